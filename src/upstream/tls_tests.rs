//! The TLS material swapped while the hub runs, against a small TLS cloud on loopback that
//! records the client certificate each connection presented and counts live connections.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConnection, SignatureScheme};

use super::*;
use crate::config::LbMode;
use crate::health::{Probe, ProbeError};
use crate::server::tls::tests::TestCa;
use std::sync::Mutex;

/// Takes any client certificate and records nothing itself (the connection does).
#[derive(Debug)]
struct AnyClient(Arc<rustls::crypto::CryptoProvider>);

impl ClientCertVerifier for AnyClient {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS cloud: `/watch` sends "one", then "two" once released, then ends; `/slow` is a
/// short "ok" once released; anything else is "ok" at once. Connections live until the
/// client closes them.
struct Cloud {
    addr: SocketAddr,
    /// The client leaf each connection presented, in the order they came.
    leaves: Arc<Mutex<Vec<Option<Vec<u8>>>>>,
    /// Each request's head, in the order they came.
    heads: Arc<Mutex<Vec<String>>>,
    live: Arc<AtomicUsize>,
    release: Arc<AtomicBool>,
}

impl Cloud {
    /// Serves with a certificate of `ca` for 127.0.0.1, asking for client certificates.
    fn start(ca: &TestCa) -> Cloud {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (chain, key) = ca.issue("cloud", &["127.0.0.1"]);
        let config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(Arc::new(AnyClient(provider)))
            .with_single_cert(chain, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let cloud = Cloud {
            addr: listener.local_addr().unwrap(),
            leaves: Arc::default(),
            heads: Arc::default(),
            live: Arc::default(),
            release: Arc::default(),
        };
        let heads = Arc::clone(&cloud.heads);
        let (leaves, live, release) = (
            Arc::clone(&cloud.leaves),
            Arc::clone(&cloud.live),
            Arc::clone(&cloud.release),
        );
        thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let heads = Arc::clone(&heads);
                let (config, leaves, live, release) = (
                    Arc::clone(&config),
                    Arc::clone(&leaves),
                    Arc::clone(&live),
                    Arc::clone(&release),
                );
                live.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let _ = sock.set_read_timeout(Some(Duration::from_secs(30)));
                    let conn = ServerConnection::new(config).unwrap();
                    let mut tls = rustls::StreamOwned::new(conn, sock);
                    let _ = serve(&mut tls, &leaves, &heads, &release);
                    live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        cloud
    }

    /// Its URL.
    fn base(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Connections open now.
    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Waits up to 10 s (YurtHub's bound after a rotation) for `n` live connections.
    fn live_becomes(&self, n: usize) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self.live() == n {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The client leaf of the newest connection.
    fn last_leaf(&self) -> Option<Vec<u8>> {
        self.leaves.lock().unwrap().last().cloned().flatten()
    }
}

/// The cloud's side of one connection.
type ServerTls = rustls::StreamOwned<ServerConnection, std::net::TcpStream>;

/// Serves requests on one connection until the client closes it, noting its leaf.
fn serve(
    tls: &mut ServerTls,
    leaves: &Mutex<Vec<Option<Vec<u8>>>>,
    heads: &Mutex<Vec<String>>,
    release: &AtomicBool,
) -> io::Result<()> {
    let mut recorded = false;
    loop {
        let mut head = Vec::new();
        let mut reader = BufReader::new(&mut *tls);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let end = line == "\r\n";
            head.push(line);
            if end {
                break;
            }
        }
        drop(reader);
        heads.lock().unwrap().push(head.concat());
        if !recorded {
            recorded = true;
            let leaf = tls.conn.peer_certificates().map(|c| c[0].to_vec());
            leaves.lock().unwrap().push(leaf);
        }
        if head[0].starts_with("GET /slow ") {
            let until = Instant::now() + Duration::from_secs(20);
            while !release.load(Ordering::SeqCst) && Instant::now() < until {
                thread::sleep(Duration::from_millis(10));
            }
            tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
        } else if head[0].starts_with("GET /watch ") {
            tls.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")?;
            tls.flush()?;
            let until = Instant::now() + Duration::from_secs(20);
            while !release.load(Ordering::SeqCst) && Instant::now() < until {
                thread::sleep(Duration::from_millis(10));
            }
            tls.write_all(b"3\r\ntwo\r\n0\r\n\r\n")?;
        } else {
            tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
        }
        tls.flush()?;
    }
}

/// The material of `ca` with a new client certificate named `cn`.
fn material(ca: &TestCa, cn: &str) -> (TlsMaterial, Vec<u8>) {
    let (cert, key) = ca.issue_pem(cn, &[]);
    let tls = crate::tls::load(ca.pem.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).unwrap();
    let leaf = tls.client.as_ref().unwrap().chain[0].to_vec();
    (tls, leaf)
}

/// A GET of `path` with the hub's identity.
fn get(path: &str, deadline: Deadline) -> Outgoing<'_> {
    Outgoing {
        method: "GET",
        verb: crate::request::Verb::Get,
        path_and_query: path,
        headers: &[],
        accept: None,
        encoding: crate::upstream::Encoding::AsClient,
        body: None,
        deadline,
        identity: Identity::Hub,
        affinity: None,
    }
}

/// The whole body of `answer`.
fn read_all(mut answer: Answer) -> String {
    let mut text = String::new();
    answer.body.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn a_new_certificate_is_presented_at_once_and_idle_connections_close_while_a_watch_lives() {
    let ca = TestCa::new();
    let cloud = Cloud::start(&ca);
    let backends = Arc::new(Backends::new(vec![cloud.base()], LbMode::RoundRobin));
    let (first, first_leaf) = material(&ca, "hub-1");
    let upstream = Upstream::new(backends, Some(&first), None, 16).unwrap();

    let bounded = Deadline::Bounded(Duration::from_secs(10));
    assert_eq!(read_all(upstream.send(get("/a", bounded)).unwrap()), "ok");
    let mut watch = upstream
        .send(get("/watch", Deadline::Stream(Duration::from_secs(60))))
        .unwrap();
    let mut got = [0u8; 3];
    watch.body.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"one");
    assert_eq!(cloud.last_leaf().as_deref(), Some(&first_leaf[..]));
    assert!(
        cloud.live_becomes(2),
        "a pooled idle connection and the watch"
    );
    // The first connection is idle in the pool: the next request reuses it.
    assert_eq!(read_all(upstream.send(get("/a", bounded)).unwrap()), "ok");
    assert_eq!(cloud.leaves.lock().unwrap().len(), 2, "no new connection");
    assert_eq!(cloud.live(), 2);

    let (second, second_leaf) = material(&ca, "hub-2");
    upstream.set_tls(&second).unwrap();
    assert!(
        cloud.live_becomes(1),
        "the old pool's idle connection closes; {} live",
        cloud.live()
    );
    assert_eq!(read_all(upstream.send(get("/b", bounded)).unwrap()), "ok");
    assert_eq!(cloud.last_leaf().as_deref(), Some(&second_leaf[..]));
    assert_eq!(cloud.leaves.lock().unwrap().len(), 3, "one new connection");

    // The watch opened before the swap goes on to its end on its own connection.
    cloud.release.store(true, Ordering::SeqCst);
    assert_eq!(read_all(watch), "two");
}

#[test]
fn without_tls_material_nothing_is_sent_until_some_is_set() {
    let ca = TestCa::new();
    let cloud = Cloud::start(&ca);
    let backends = Arc::new(Backends::new(vec![cloud.base()], LbMode::RoundRobin));
    let upstream = Upstream::new(backends, None, None, 16).unwrap();
    for identity in [Identity::Hub, Identity::Client] {
        let mut req = get("/a", Deadline::Bounded(Duration::from_secs(10)));
        req.identity = identity;
        let err = upstream.send(req).err().unwrap();
        assert!(matches!(err, UpstreamError::NoCredentials(_)), "{err}");
        assert!(err.never_sent());
        assert!(
            err.to_string()
                .starts_with("the hub has no credentials for the cloud yet: "),
            "{err}"
        );
    }
    let probed = upstream.probe(&cloud.base(), Duration::from_secs(5));
    let Err(ProbeError::NoAnswer(UpstreamError::NoCredentials(_))) = &probed else {
        panic!("{probed:?}");
    };
    assert!(
        probed
            .unwrap_err()
            .to_string()
            .starts_with("the hub has no credentials for the cloud yet"),
    );
    assert_eq!(cloud.leaves.lock().unwrap().len(), 0, "no connection made");

    let (tls, leaf) = material(&ca, "hub");
    upstream.set_tls(&tls).unwrap();
    let answer = upstream.send(get("/a", Deadline::Bounded(Duration::from_secs(10))));
    assert_eq!(read_all(answer.unwrap()), "ok");
    assert_eq!(cloud.last_leaf().as_deref(), Some(&leaf[..]));
}

#[test]
fn idle_connections_close_at_a_swap_while_a_request_on_the_old_agents_waits_for_its_answer() {
    let ca = TestCa::new();
    let cloud = Cloud::start(&ca);
    let backends = Arc::new(Backends::new(vec![cloud.base()], LbMode::RoundRobin));
    let (first, _) = material(&ca, "hub-1");
    let upstream = Arc::new(Upstream::new(backends, Some(&first), None, 16).unwrap());
    let bounded = Deadline::Bounded(Duration::from_secs(30));

    // A request that waits for its answer holds the old agents (and ureq's old pool) ...
    let slow = {
        let upstream = Arc::clone(&upstream);
        thread::spawn(move || upstream.send(get("/slow", bounded)).map(read_all))
    };
    assert!(cloud.live_becomes(1));
    // ... while another connection of theirs is idle in the pool.
    assert_eq!(read_all(upstream.send(get("/a", bounded)).unwrap()), "ok");
    assert_eq!(cloud.live(), 2);

    let (second, second_leaf) = material(&ca, "hub-2");
    upstream.set_tls(&second).unwrap();
    assert!(
        cloud.live_becomes(1),
        "the idle connection closes at once; {} live",
        cloud.live()
    );
    // The waiting request is answered on its connection, which then closes, not pooled.
    cloud.release.store(true, Ordering::SeqCst);
    assert_eq!(slow.join().unwrap().unwrap(), "ok");
    assert!(cloud.live_becomes(0), "{} live", cloud.live());
    assert_eq!(read_all(upstream.send(get("/a", bounded)).unwrap()), "ok");
    assert_eq!(cloud.last_leaf().as_deref(), Some(&second_leaf[..]));
}

#[test]
fn the_cloud_gets_the_hubs_token_and_a_leader_hub_never_does() {
    let ca = TestCa::new();
    let cloud = Cloud::start(&ca);
    let leader = Cloud::start(&ca);
    let backends = Arc::new(Backends::new(vec![cloud.base()], LbMode::RoundRobin));
    let (tls, leaf) = material(&ca, "hub");
    let token = Some(crate::config::kubeconfig::Token::Inline(
        "cloud-secret".into(),
    ));
    let upstream = Upstream::new(backends, Some(&tls), token, 16).unwrap();
    let bounded = Deadline::Bounded(Duration::from_secs(10));

    assert_eq!(read_all(upstream.send(get("/a", bounded)).unwrap()), "ok");
    let to_leader = upstream.send_to_base(&leader.base(), get("/a", bounded));
    assert_eq!(read_all(to_leader.unwrap()), "ok");

    let cloud_head = cloud.heads.lock().unwrap().concat().to_ascii_lowercase();
    assert!(
        cloud_head.contains("authorization: bearer cloud-secret"),
        "{cloud_head}"
    );
    let leader_head = leader.heads.lock().unwrap().concat().to_ascii_lowercase();
    assert!(leader_head.starts_with("get /a "), "{leader_head}");
    assert!(!leader_head.contains("authorization"), "{leader_head}");
    assert_eq!(
        leader.last_leaf().as_deref(),
        Some(&leaf[..]),
        "the certificate only"
    );
}

/// A plain HTTP server on loopback answering each request head with `answer(first line)`
/// (`None`: no answer, the connection held open until the client gives up).
fn plain_server(answer: fn(&str) -> Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut reader = BufReader::new(sock.try_clone().unwrap());
                let mut sock = sock;
                loop {
                    let mut first = String::new();
                    if reader.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut line = String::new();
                    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                        line.clear();
                    }
                    match answer(&first) {
                        Some(reply) => {
                            if sock.write_all(reply.as_bytes()).is_err() {
                                return;
                            }
                        }
                        None => {
                            // Held until the client hangs up.
                            let _ = reader.read_line(&mut line);
                            return;
                        }
                    }
                }
            });
        }
    });
    base
}

#[test]
fn a_probe_is_judged_by_the_origin_of_its_failure() {
    let ca = TestCa::new();
    let backends = Arc::new(Backends::new(vec![], LbMode::RoundRobin));
    let (tls, _) = material(&ca, "hub");
    let upstream = Upstream::new(backends, Some(&tls), None, 4).unwrap();
    let quick = Duration::from_secs(5);
    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    const NOT_FOUND: &str = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    const FAILING: &str = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";

    // An answer that is not 2xx: the server answered, unhealthy, with today's text.
    let failing = plain_server(|_| Some(FAILING));
    let probed = upstream.probe(&failing, quick);
    assert_eq!(probed, Err(ProbeError::Answered(500)));
    assert_eq!(probed.unwrap_err().to_string(), "health probe answered 500");

    // No /readyz (404): /healthz judges.
    let old = plain_server(|first| {
        Some(if first.contains("/readyz") {
            NOT_FOUND
        } else {
            OK
        })
    });
    assert_eq!(upstream.probe(&old, quick), Ok(()));
    let gone = plain_server(|_| Some(NOT_FOUND));
    assert_eq!(upstream.probe(&gone, quick), Err(ProbeError::Answered(404)));

    // Silence: no answer, a timeout after the request went.
    let silent = plain_server(|_| None);
    let probed = upstream.probe(&silent, Duration::from_millis(300));
    let Err(ProbeError::NoAnswer(UpstreamError::Transport {
        timeout: true,
        maybe_sent: true,
        ref server,
        ..
    })) = probed
    else {
        panic!("{probed:?}");
    };
    assert_eq!(server, &silent);

    // Refused: no answer, and nothing was sent; the text does not repeat the server.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let probed = upstream.probe(&refused, quick);
    let Err(ProbeError::NoAnswer(
        ref e @ UpstreamError::Transport {
            timeout: false,
            maybe_sent: false,
            ..
        },
    )) = probed
    else {
        panic!("{probed:?}");
    };
    let text = probed.as_ref().unwrap_err().to_string();
    assert_eq!(text, e.without_server().to_string());
    assert!(!text.contains(&refused), "{text}");
}

/// A plain HTTP server on loopback that answers each request with its body as it came on the
/// wire (its chunked framing too) and then closes the connection without saying so; the
/// connections it took, and those it closed, are counted.
fn echo_and_close_server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let taken = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (counted, closing) = (Arc::clone(&taken), Arc::clone(&closed));
    thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(sock.try_clone().unwrap());
            let mut sock = sock;
            let (mut chunked, mut length) = (false, 0usize);
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                chunked |= lower == "transfer-encoding: chunked\r\n";
                if let Some(n) = lower.strip_prefix("content-length: ") {
                    length = n.trim().parse().unwrap();
                }
            }
            let mut wire = Vec::new();
            if chunked {
                while !wire.ends_with(b"\r\n0\r\n\r\n") && !wire.starts_with(b"0\r\n\r\n") {
                    let mut byte = [0u8];
                    reader.read_exact(&mut byte).unwrap();
                    wire.push(byte[0]);
                }
            } else {
                wire.resize(length, 0);
                reader.read_exact(&mut wire).unwrap();
            }
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", wire.len());
            let _ = sock.write_all(head.as_bytes());
            let _ = sock.write_all(&wire);
            drop((sock, reader));
            closing.fetch_add(1, Ordering::SeqCst);
        }
    });
    (base, taken, closed)
}

#[test]
fn a_body_goes_chunked_or_by_length_and_a_connection_the_server_closed_is_not_used_again() {
    let ca = TestCa::new();
    let (base, taken, closed) = echo_and_close_server();
    let backends = Arc::new(Backends::new(vec![base], LbMode::RoundRobin));
    let (tls, _) = material(&ca, "hub");
    let upstream = Upstream::new(backends, Some(&tls), None, 4).unwrap();
    // Larger than a connection's output buffer: several chunks.
    let sent: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for (round, length) in [None, Some(sent.len() as u64), None]
        .into_iter()
        .enumerate()
    {
        let mut reader: &[u8] = &sent;
        let mut req = get(
            "/api/v1/namespaces/default/configmaps",
            Deadline::Bounded(Duration::from_secs(10)),
        );
        req.method = "POST";
        req.body = Some(BodySource {
            reader: &mut reader,
            length,
        });
        let answer = upstream
            .send(req)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(answer.status, 200);
        let mut wire = Vec::new();
        let mut body = answer.body;
        body.read_to_end(&mut wire).unwrap();
        let got = match length {
            Some(_) => wire,
            None => {
                // The chunked framing decodes to the body, strictly.
                let mut state = crate::http1::BodyState::new(crate::http1::Framing::Chunked);
                let mut input = &wire[..];
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = state.read_limited(&mut input, &mut buf, u64::MAX).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert!(
                    input.is_empty(),
                    "round {round}: bytes after the last chunk"
                );
                got
            }
        };
        assert_eq!(got, sent, "round {round}");
        // Each answer's connection was closed by the server: the next request takes a new one.
        assert_eq!(taken.load(Ordering::SeqCst), round + 1);
        let until = Instant::now() + Duration::from_secs(10);
        while closed.load(Ordering::SeqCst) <= round && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
    }
}
