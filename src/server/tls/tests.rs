//! The HTTPS port over loopback: answers through `serve_tls`, certificate reloads, and the
//! connections it refuses. `TestCa` is shared with the upstream tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::*;
use crate::server::{Exchange, Handler, Length, Limits, Load, bind, serve_tls, wake};

/// A certificate authority for tests, issuing leaves signed by it.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate.
    pub(crate) der: CertificateDer<'static>,
    /// The same, PEM.
    pub(crate) pem: String,
}

impl TestCa {
    /// A fresh CA (rcgen cannot fail on these fixed parameters).
    pub(crate) fn new() -> TestCa {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            issuer: Issuer::new(params, key),
            der: cert.der().clone(),
            pem: cert.pem(),
        }
    }

    /// A leaf named `cn` for `sans` (DNS names or IPs): its chain and key.
    pub(crate) fn issue(
        &self,
        cn: &str,
        sans: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let (cert, key) = self.sign(cn, sans);
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone()], key)
    }

    /// Like [`TestCa::issue`], as PEM: the certificate and its key.
    pub(crate) fn issue_pem(&self, cn: &str, sans: &[&str]) -> (String, String) {
        let (cert, key) = self.sign(cn, sans);
        (cert.pem(), key.serialize_pem())
    }

    /// Like [`TestCa::issue`], with the subject's O values `organizations`, two at most (a
    /// node's certificate has `system:nodes`).
    pub(crate) fn issue_in(
        &self,
        cn: &str,
        organizations: &[&str],
        sans: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        // rcgen keeps one value per type: a second O needs the OID spelt out, so two at most.
        assert!(organizations.len() <= 2, "at most two organizations");
        let types = [
            DnType::OrganizationName,
            DnType::CustomDnType(vec![2, 5, 4, 10]),
        ];
        for (ty, org) in types.into_iter().zip(organizations) {
            params.distinguished_name.push(ty, *org);
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone()], key)
    }

    /// A leaf and its key pair.
    fn sign(&self, cn: &str, sans: &[&str]) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        (params.signed_by(&key, &self.issuer).unwrap(), key)
    }

    /// A rustls client trusting this CA, offering `alpn`.
    pub(crate) fn client(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let mut config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// `serve_tls` on a loopback port, stopped when dropped.
struct Running {
    addr: SocketAddr,
    load: Arc<Load>,
    shutdown: Arc<AtomicBool>,
    /// While set, `/hold` does not answer.
    hold: Arc<AtomicBool>,
    /// For each `/watch`: whether its probe saw the client go (within 10 s).
    watched: mpsc::Receiver<bool>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    /// With room for 8 connections and 8 requests.
    fn start(cert: Arc<ServingCert>, io_timeout: Duration) -> Running {
        Running::with_caps(cert, io_timeout, 8, 8)
    }

    /// With these caps; `/hold` waits for `hold` to clear.
    fn with_caps(
        cert: Arc<ServingCert>,
        io_timeout: Duration,
        max_connections: usize,
        max_in_flight: usize,
    ) -> Running {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr();
        let load = Arc::new(Load::default());
        let shutdown = Arc::new(AtomicBool::new(false));
        let hold = Arc::new(AtomicBool::new(true));
        let limits = Limits {
            max_connections,
            max_in_flight,
            stack_size: 256 * 1024,
            io_timeout,
            long_running: None,
        };
        let held = Arc::clone(&hold);
        let (watch, watched) = mpsc::channel();
        let handler: Handler = Arc::new(move |ex: Exchange<'_>| {
            if ex.url() == "/watch" {
                let _ = watch.send(watch_until_gone(ex));
                return;
            }
            if ex.url() == "/hold" {
                let until = Instant::now() + Duration::from_secs(10);
                while held.load(Ordering::Acquire) && Instant::now() < until {
                    thread::sleep(Duration::from_millis(5));
                }
            }
            answer(ex);
        });
        let (l, s) = (Arc::clone(&load), Arc::clone(&shutdown));
        let clients = ClusterCaClients::new(Box::new(Vec::new));
        let config = server_config(cert, Arc::new(clients));
        let thread = thread::spawn(move || {
            serve_tls(
                listener,
                crate::requester::Port::Secure,
                config,
                handler,
                limits,
                l,
                s,
            )
        });
        Running {
            addr,
            load,
            shutdown,
            hold,
            watched,
            thread: Some(thread),
        }
    }

    /// Waits (a few seconds at most) until no connection thread is left.
    fn drained(&self) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if self.load.connections.load(Ordering::Acquire) == 0 {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        wake(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `/plain` and `/hold`: "hello" with a length; `/abort`: "ab" streamed, then aborted;
/// anything else: "ab" then "cde", streamed (chunked).
fn answer(ex: Exchange<'_>) {
    let none: &[(&str, &str)] = &[];
    if ex.url() == "/abort" {
        if let Ok(mut w) = ex.start(200, none, Length::Streamed)
            && w.write(b"ab").is_ok()
        {
            w.abort();
        }
        return;
    }
    let _ = if matches!(ex.url(), "/plain" | "/hold") {
        ex.send(200, none, b"hello")
    } else {
        ex.start(200, none, Length::Streamed).and_then(|mut w| {
            w.write(b"ab")?;
            w.write(b"cde")?;
            w.finish()
        })
    };
}

/// Starts a streamed answer with "ab", then asks the client's probe, as the reaper does,
/// until it says the client is gone (true) or 10 s pass (false).
fn watch_until_gone(ex: Exchange<'_>) -> bool {
    let none: &[(&str, &str)] = &[];
    let Ok(mut w) = ex.start(200, none, Length::Streamed) else {
        return false;
    };
    let Some(probe) = w.probe() else {
        return false;
    };
    if w.write(b"ab").is_err() {
        return false;
    }
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if probe.gone() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

/// A TLS client connection.
type Client = StreamOwned<ClientConnection, TcpStream>;

/// Connects to `addr` as `localhost` (the handshake happens at the first I/O).
fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> Client {
    let name = "localhost".try_into().unwrap();
    let conn = ClientConnection::new(config, name).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    StreamOwned::new(conn, sock)
}

/// `GET /plain` on a keep-alive connection: the whole answer.
fn get_plain(client: &mut Client) -> std::io::Result<String> {
    get(client, "/plain")
}

/// `GET path` on a keep-alive connection: the answer, whole by its `Content-Length`.
fn get(client: &mut Client, path: &str) -> std::io::Result<String> {
    write!(client, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|n| n.trim().parse::<usize>().ok());
            if length.is_some_and(|n| answer.len() >= end + 4 + n) {
                return Ok(text);
            }
        }
        let n = client.read(&mut buf)?;
        if n == 0 {
            return Ok(text);
        }
        answer.extend_from_slice(&buf[..n]);
    }
}

/// The certificate the server presented.
fn leaf(client: &Client) -> Vec<u8> {
    client.conn.peer_certificates().unwrap()[0].to_vec()
}

/// A serving certificate for localhost and 127.0.0.1, issued by `ca`.
fn serving(ca: &TestCa) -> Arc<ServingCert> {
    let cert = Arc::new(ServingCert::new());
    let (chain, key) = ca.issue("hub", &["localhost", "127.0.0.1"]);
    cert.set(chain, key).unwrap();
    cert
}

#[test]
fn https_answers_whole_and_streamed_through_ureq() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(ureq::tls::RootCerts::new_with_certs(&[
            ureq::tls::Certificate::from_der(&ca.der).to_owned(),
        ]))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .proxy(None)
        .build()
        .into();
    let base = format!("https://localhost:{}", server.addr.port());
    let mut plain = agent.get(format!("{base}/plain")).call().unwrap();
    assert_eq!(plain.body_mut().read_to_string().unwrap(), "hello");
    let mut streamed = agent.get(format!("{base}/stream")).call().unwrap();
    assert_eq!(
        streamed
            .headers()
            .get("transfer-encoding")
            .map(|v| v.as_bytes()),
        Some(&b"chunked"[..])
    );
    assert_eq!(streamed.body_mut().read_to_string().unwrap(), "abcde");
}

#[test]
fn a_new_certificate_serves_new_handshakes_and_leaves_open_connections_alone() {
    let ca = TestCa::new();
    let cert = serving(&ca);
    let server = Running::start(Arc::clone(&cert), Duration::from_secs(5));
    let config = ca.client(&[b"http/1.1"]);
    let mut old = connect(server.addr, config);
    assert!(get_plain(&mut old).unwrap().ends_with("hello"));
    let first = leaf(&old);

    let (chain, key) = ca.issue("hub-renewed", &["localhost"]);
    let renewed = chain[0].to_vec();
    cert.set(chain, key).unwrap();

    // A client of its own: one that resumes a session keeps the certificate it was made on.
    let mut new = connect(server.addr, ca.client(&[b"http/1.1"]));
    assert!(get_plain(&mut new).unwrap().ends_with("hello"));
    assert_eq!(leaf(&new), renewed);
    // The keep-alive connection made before keeps its certificate and keeps working.
    let again = get_plain(&mut old).unwrap();
    assert!(
        again.starts_with("HTTP/1.1 200 OK") && again.ends_with("hello"),
        "{again}"
    );
    assert_eq!(leaf(&old), first);
    assert_ne!(first, renewed);
}

#[test]
fn a_key_that_is_not_the_leafs_is_refused_and_the_old_certificate_stays() {
    let ca = TestCa::new();
    let cert = ServingCert::new();
    assert!(!cert.is_set());
    let (chain, _) = ca.issue("hub", &["localhost"]);
    let (_, other) = ca.issue("other", &["localhost"]);
    let err = cert.set(chain.clone(), other).unwrap_err();
    assert!(matches!(err, ServingCertError::KeyMismatch(_)), "{err:?}");
    assert!(err.to_string().contains("do not belong together"), "{err}");
    assert!(!cert.is_set());
    let empty = cert.set(Vec::new(), ca.issue("x", &["x"]).1).unwrap_err();
    assert!(matches!(empty, ServingCertError::EmptyChain), "{empty:?}");
    assert_eq!(empty.to_string(), "the serving certificate chain is empty");
    assert!(!format!("{cert:?}").contains("PRIVATE"));
}

#[test]
fn plain_http_to_the_tls_port_gets_no_answer_and_the_thread_ends() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let mut sock = TcpStream::connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock.write_all(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("HTTP/1.1"),
        "{got:?}"
    );
    assert!(server.drained(), "the connection thread ended");
}

#[test]
fn a_client_offering_only_h2_is_refused_in_the_handshake() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let mut h2 = connect(server.addr, ca.client(&[b"h2"]));
    let err = get_plain(&mut h2).unwrap_err();
    assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
    // Offering both gets HTTP/1.1.
    let mut both = connect(server.addr, ca.client(&[b"h2", b"http/1.1"]));
    assert!(get_plain(&mut both).unwrap().ends_with("hello"));
    assert_eq!(both.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    drop(both);
    assert!(server.drained());
}

#[test]
fn no_certificate_yet_fails_the_handshake_until_one_is_set() {
    let ca = TestCa::new();
    let cert = Arc::new(ServingCert::new());
    let server = Running::start(Arc::clone(&cert), Duration::from_secs(5));
    let config = ca.client(&[]);
    assert!(get_plain(&mut connect(server.addr, Arc::clone(&config))).is_err());
    assert!(server.drained());
    let (chain, key) = ca.issue("hub", &["localhost"]);
    cert.set(chain, key).unwrap();
    assert!(cert.is_set());
    assert!(
        get_plain(&mut connect(server.addr, config))
            .unwrap()
            .ends_with("hello")
    );
}

#[test]
fn a_silent_client_is_dropped_after_the_io_timeout() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_millis(300));
    let mut sock = TcpStream::connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The server closes: the end of the stream, not this read's own timeout.
    assert_eq!(sock.read(&mut [0u8; 16]).unwrap(), 0);
    assert!(server.drained());
}

/// Starts `GET /hold` on a connection of its own, and waits until it is in flight.
fn hold(server: &Running, config: &Arc<ClientConfig>) -> JoinHandle<std::io::Result<String>> {
    let (addr, config) = (server.addr, Arc::clone(config));
    let before = server.load.in_flight();
    let held = thread::spawn(move || get(&mut connect(addr, config), "/hold"));
    let until = Instant::now() + Duration::from_secs(5);
    while server.load.in_flight() == before && Instant::now() < until {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(server.load.in_flight(), before + 1);
    held
}

#[test]
fn the_in_flight_cap_and_eviction_apply_over_tls() {
    let ca = TestCa::new();
    let server = Running::with_caps(serving(&ca), Duration::from_secs(5), 2, 1);
    let config = ca.client(&[]);
    let held = hold(&server, &config);
    // A second request is past the in-flight cap: 429 over TLS, and the connection stays.
    let mut second = connect(server.addr, Arc::clone(&config));
    let busy = get(&mut second, "/plain").unwrap();
    assert!(busy.starts_with("HTTP/1.1 429 "), "{busy}");
    assert!(busy.contains("Retry-After: 1"), "{busy}");
    // At the connection cap, a new connection evicts the idle one (once its thread is back
    // waiting for a request: until then both are busy and a new one is closed).
    let until = Instant::now() + Duration::from_secs(5);
    let mut third = loop {
        let mut third = connect(server.addr, Arc::clone(&config));
        match get(&mut third, "/plain") {
            Ok(answer) if answer.starts_with("HTTP/1.1 429 ") => break third,
            other => assert!(Instant::now() < until, "{other:?}"),
        }
        thread::sleep(Duration::from_millis(10));
    };
    assert!(matches!(
        get(&mut second, "/plain").as_deref(),
        Ok("") | Err(_)
    ));
    server.hold.store(false, Ordering::Release);
    assert!(held.join().unwrap().unwrap().ends_with("hello"));
    assert!(get_plain(&mut third).unwrap().ends_with("hello"));
}

#[test]
fn past_the_connection_cap_a_tls_client_is_closed_without_a_plain_text_answer() {
    let ca = TestCa::new();
    let server = Running::with_caps(serving(&ca), Duration::from_secs(5), 2, 2);
    let config = ca.client(&[]);
    let held = [hold(&server, &config), hold(&server, &config)];
    // Both connections serve a request: nothing to evict, and a plain 429 would only be
    // garbage in place of a handshake.
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = raw.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    server.hold.store(false, Ordering::Release);
    for held in held {
        assert!(held.join().unwrap().unwrap().ends_with("hello"));
    }
    assert!(server.drained());
}

#[test]
fn a_body_dribbled_inside_one_tls_record_times_out_like_on_the_plain_port() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_millis(300));
    let name = "localhost".try_into().unwrap();
    let mut conn = ClientConnection::new(ca.client(&[]), name).unwrap();
    let mut sock = TcpStream::connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    conn.writer()
        .write_all(b"POST /plain HTTP/1.1\r\nHost: localhost\r\nContent-Length: 60\r\n\r\n")
        .unwrap();
    conn.complete_io(&mut sock).unwrap();
    // The whole body in one record, sent a byte every 25 ms: each socket read gets bytes
    // well within the read timeout, the record (and the body read) takes seconds.
    conn.writer().write_all(&[b'a'; 60]).unwrap();
    let mut record = Vec::new();
    conn.write_tls(&mut record).unwrap();
    for byte in record {
        if sock.write_all(&[byte]).is_err() {
            break;
        }
        thread::sleep(Duration::from_millis(25));
    }
    let mut answer = Vec::new();
    let mut tls = StreamOwned::new(conn, sock);
    let mut buf = [0u8; 512];
    while let Ok(n) = tls.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
}

/// Opens `/watch` and reads its answer up to the first chunk, leaving nothing unread in the
/// socket (unread bytes would make the client's close a reset, which any probe sees).
fn open_watch(server: &Running, ca: &TestCa) -> Client {
    let mut client = connect(server.addr, ca.client(&[]));
    write!(client, "GET /watch HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&got).contains("\r\nab\r\n") {
        let n = client.read(&mut buf).unwrap();
        assert_ne!(n, 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    // Whatever TLS records are left (none expected) are read too.
    client.sock.set_nonblocking(true).unwrap();
    while client.conn.read_tls(&mut client.sock).is_ok_and(|n| n > 0) {}
    client.conn.process_new_packets().unwrap();
    client
}

#[test]
fn a_watch_client_that_sends_close_notify_and_hangs_up_is_seen_gone() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let mut client = open_watch(&server, &ca);
    // What Go's tls.Conn.Close() does: close_notify, then close the socket.
    client.conn.send_close_notify();
    client.sock.set_nonblocking(false).unwrap();
    while client.conn.wants_write() {
        client.conn.write_tls(&mut client.sock).unwrap();
    }
    drop(client);
    let gone = server.watched.recv_timeout(Duration::from_secs(15));
    assert_eq!(gone, Ok(true), "the probe saw the client go");
    assert!(server.drained());
}

#[test]
fn a_watch_client_that_hangs_up_without_close_notify_is_seen_gone() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    drop(open_watch(&server, &ca));
    let gone = server.watched.recv_timeout(Duration::from_secs(15));
    assert_eq!(gone, Ok(true), "the probe saw the client go");
    assert!(server.drained());
}

/// `GET path` with `Connection: close`: the bytes read until the end, and how it ended.
fn get_closing(server: &Running, ca: &TestCa, path: &str) -> (String, std::io::Result<usize>) {
    let mut client = connect(server.addr, ca.client(&[]));
    write!(
        client,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let end = client.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), end)
}

#[test]
fn a_whole_answer_on_a_closing_connection_ends_with_close_notify() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    // A TLS client tells a clean end from a cut one: only close_notify is clean.
    let (answer, end) = get_closing(&server, &ca, "/plain");
    assert!(answer.ends_with("hello"), "{answer}");
    assert!(end.is_ok(), "{end:?}");
    let (answer, end) = get_closing(&server, &ca, "/stream");
    assert!(answer.ends_with("0\r\n\r\n"), "{answer}");
    assert!(end.is_ok(), "{end:?}");
}

#[test]
fn an_aborted_answer_ends_without_close_notify() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let (answer, end) = get_closing(&server, &ca, "/abort");
    assert!(answer.ends_with("ab\r\n"), "{answer}");
    let err = end.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
}

/// A client's session cache that counts the TLS 1.3 tickets it was given.
#[derive(Debug, Default)]
struct Tickets {
    given: std::sync::atomic::AtomicUsize,
}

impl rustls::client::ClientSessionStore for Tickets {
    fn set_kx_hint(&self, _: rustls::pki_types::ServerName<'static>, _: rustls::NamedGroup) {}

    fn kx_hint(&self, _: &rustls::pki_types::ServerName<'_>) -> Option<rustls::NamedGroup> {
        None
    }

    fn set_tls12_session(
        &self,
        _: rustls::pki_types::ServerName<'static>,
        _: rustls::client::Tls12ClientSessionValue,
    ) {
    }

    fn tls12_session(
        &self,
        _: &rustls::pki_types::ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        None
    }

    fn remove_tls12_session(&self, _: &rustls::pki_types::ServerName<'static>) {}

    fn insert_tls13_ticket(
        &self,
        _: rustls::pki_types::ServerName<'static>,
        _: rustls::client::Tls13ClientSessionValue,
    ) {
        self.given.fetch_add(1, Ordering::SeqCst);
    }

    fn take_tls13_ticket(
        &self,
        _: &rustls::pki_types::ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        None
    }
}

#[test]
fn no_session_tickets_are_sent() {
    let ca = TestCa::new();
    let server = Running::start(serving(&ca), Duration::from_secs(5));
    let tickets = Arc::new(Tickets::default());
    let mut config = Arc::unwrap_or_clone(ca.client(&[]));
    config.resumption = rustls::client::Resumption::store(tickets.clone());
    let mut client = connect(server.addr, Arc::new(config));
    assert!(get_plain(&mut client).unwrap().ends_with("hello"));
    assert_eq!(
        client.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(tickets.given.load(Ordering::SeqCst), 0);
}
