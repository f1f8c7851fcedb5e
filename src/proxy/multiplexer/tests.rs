//! The multiplexer port over loopback TLS: followers with node certificates read the
//! leader's caches; everyone and everything else is refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::{Value, json};

use super::*;
use crate::names::Gvr;
use crate::pool::resources::PoolScope;
use crate::proxy::pool_local::tests::StubCloud;
use crate::server::tls::ServingCert;
use crate::server::tls::tests::TestCa;
use crate::watchcache::{CacheOptions, EventType};

/// A leader's multiplexer port on 127.0.0.1, stopped when dropped.
struct Leader {
    ca: TestCa,
    cloud: Arc<StubCloud>,
    caches: Arc<PoolCaches>,
    shutdown: Arc<AtomicBool>,
    port: Option<MultiplexerPort>,
}

impl Leader {
    /// Serving the default pool scope and `extra` members, caches empty.
    fn start(extra: &[&str]) -> Leader {
        let ca = TestCa::new();
        let serving = Arc::new(ServingCert::new());
        let (chain, key) = ca.issue("system:node:leader", &["127.0.0.1"]);
        serving.set(chain, key).unwrap();
        let tls = identity::server_config(serving, std::slice::from_ref(&ca.der)).unwrap();
        let scope = PoolScope::with_defaults(extra.iter().map(|g| Gvr::parse(g).unwrap()));
        let (caches, _) = PoolCaches::new(scope, "leader", &CacheOptions::default());
        let caches = Arc::new(caches);
        let shutdown = Arc::new(AtomicBool::new(false));
        let cloud = Arc::new(StubCloud::default());
        let port = start(
            "127.0.0.1:0".parse().unwrap(),
            tls,
            Arc::clone(&caches),
            Arc::clone(&cloud) as Arc<dyn Cloud>,
            Arc::clone(&shutdown),
        )
        .unwrap();
        Leader {
            ca,
            cloud,
            caches,
            shutdown,
            port: Some(port),
        }
    }

    /// The Services cache.
    fn services(&self) -> &WatchCache {
        let gvr = Gvr::parse("/v1/services").unwrap();
        self.caches.cache_of(&gvr).unwrap()
    }

    /// Fills the Services cache at rv 10 with `a/web` and `b/db`.
    fn fill(&self) {
        let cache = self.services();
        let objects = [service("a", "web", 3), service("b", "db", 4)]
            .iter()
            .map(|json| cache.parse(json).unwrap())
            .collect();
        cache.replace("10", objects).unwrap();
    }

    /// A follower trusting the cluster CA, with a certificate of that CA for `cn` in
    /// `orgs`.
    fn follower(&self, cn: &str, orgs: &[&str]) -> Arc<ClientConfig> {
        client(&self.ca, Some(self.ca.issue_in(cn, orgs, &[])))
    }

    /// The node `edge` of the pool.
    fn node(&self, edge: &str) -> Arc<ClientConfig> {
        self.follower(&format!("system:node:{edge}"), &["system:nodes"])
    }

    fn addr(&self) -> SocketAddr {
        self.port.as_ref().unwrap().addr
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        if let Some(port) = self.port.take() {
            port.stop();
        }
    }
}

/// A Service as a list item.
fn service(ns: &str, name: &str, rv: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                     "uid": format!("uid-{name}")},
        "spec": {"clusterIP": format!("10.96.0.{rv}"), "type": "ClusterIP",
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// A rustls client trusting `ca`, presenting `identity` if any.
fn client(
    ca: &TestCa,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

type Conn = BufReader<StreamOwned<ClientConnection, TcpStream>>;

/// A connection to the leader, as a follower verifying its address.
fn connect(leader: &Leader, config: Arc<ClientConfig>) -> Conn {
    let name = ServerName::IpAddress("127.0.0.1".parse::<std::net::IpAddr>().unwrap().into());
    let tls = ClientConnection::new(config, name).unwrap();
    let sock = TcpStream::connect(leader.addr()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    BufReader::new(StreamOwned::new(tls, sock))
}

/// An answer: status, head, body (dechunked).
#[derive(Debug)]
struct Answer {
    code: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends `method path` as a follower's multiplexer does (JSON).
fn send(conn: &mut Conn, method: &str, path: &str, accept: &str) -> io::Result<()> {
    write!(
        conn.get_mut(),
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: multiplexer-proxy-edge\r\nAccept: {accept}\r\nContent-Length: 0\r\n\r\n"
    )?;
    conn.get_mut().flush()
}

/// Reads a response head: its status and text.
fn read_head(conn: &mut Conn) -> io::Result<(u16, String)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no status in {head:?}")))?;
    Ok((code, head))
}

/// Reads one chunk of a chunked body; empty at its end.
fn read_chunk(conn: &mut Conn) -> io::Result<Vec<u8>> {
    let mut line = String::new();
    conn.read_line(&mut line)?;
    let size = line.trim().split(';').next().unwrap_or("");
    let size = usize::from_str_radix(size, 16).map_err(io::Error::other)?;
    let mut data = vec![0; size + 2];
    conn.read_exact(&mut data)?;
    data.truncate(size);
    Ok(data)
}

/// `method path` and its whole answer.
fn request(conn: &mut Conn, method: &str, path: &str, accept: &str) -> io::Result<Answer> {
    send(conn, method, path, accept)?;
    let (code, head) = read_head(conn)?;
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.trim().parse::<usize>().ok());
    let mut body = Vec::new();
    match length {
        Some(n) => {
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        }
        None => loop {
            let chunk = read_chunk(conn)?;
            if chunk.is_empty() {
                break;
            }
            body.extend_from_slice(&chunk);
        },
    }
    let body = String::from_utf8(body).map_err(io::Error::other)?;
    Ok(Answer { code, head, body })
}

/// A GET of `path` on a new connection with `config`.
fn get(leader: &Leader, config: Arc<ClientConfig>, path: &str) -> io::Result<Answer> {
    request(
        &mut connect(leader, config),
        "GET",
        path,
        "application/json",
    )
}

/// The names of a list's items.
fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_node_lists_services_from_the_filled_cache() {
    let leader = Leader::start(&[]);
    leader.fill();
    let answer = get(&leader, leader.node("edge-list"), "/api/v1/services").unwrap();
    assert_eq!(answer.code, 200, "{answer:?}");
    let list = answer.json();
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(list["metadata"]["resourceVersion"], "10");
    assert_eq!(names(&list), ["web", "db"]);
    // One connection serves several requests, each admitted.
    let mut conn = connect(&leader, leader.node("edge-list"));
    for _ in 0..2 {
        let a = request(&mut conn, "GET", "/api/v1/namespaces/b/services", "*/*").unwrap();
        assert_eq!((a.code, names(&a.json())), (200, vec!["db"]));
    }
    // Counted once the answer is sent, which the client may see first.
    let series = "tinyhub_multiplexer_requests_total{follower=\"edge-list\",code=\"200\"} 3\n";
    let until = Instant::now() + Duration::from_secs(5);
    while !METRICS.render(&[]).contains(series) {
        assert!(Instant::now() < until, "{}", METRICS.render(&[]));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_watch_from_a_resource_version_gets_what_is_added_after_it() {
    let leader = Leader::start(&[]);
    leader.fill();
    let mut conn = connect(&leader, leader.node("edge-2"));
    send(
        &mut conn,
        "GET",
        "/api/v1/services?watch=1&resourceVersion=10&timeoutSeconds=30",
        "application/json",
    )
    .unwrap();
    let (code, head) = read_head(&mut conn).unwrap();
    assert_eq!(code, 200, "{head}");
    let cache = leader.services();
    let added = cache.parse(&service("c", "new", 11)).unwrap();
    cache.apply(EventType::Added, added).unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"\n") {
        let chunk = read_chunk(&mut conn).unwrap();
        assert!(!chunk.is_empty(), "the watch ended");
        seen.extend_from_slice(&chunk);
    }
    let event: Value = serde_json::from_slice(&seen).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "new");
    assert_eq!(event["object"]["metadata"]["resourceVersion"], "11");
    assert_eq!(event["object"]["kind"], "Service");
}

#[test]
fn no_client_certificate_or_one_from_another_ca_gets_no_answer() {
    let leader = Leader::start(&[]);
    leader.fill();
    let anonymous = client(&leader.ca, None);
    assert!(get(&leader, anonymous, "/api/v1/services").is_err());
    let stranger = TestCa::new();
    let forged = client(
        &leader.ca,
        Some(stranger.issue_in("system:node:edge-2", &["system:nodes"], &[])),
    );
    assert!(get(&leader, forged, "/api/v1/services").is_err());
    // The same request with a good certificate is answered: the refusals are the
    // certificates'.
    assert_eq!(
        get(&leader, leader.node("edge-2"), "/api/v1/services")
            .unwrap()
            .code,
        200
    );
}

#[test]
fn a_certificate_without_system_nodes_is_refused_with_403() {
    let leader = Leader::start(&[]);
    leader.fill();
    for orgs in [&["system:masters"][..], &[]] {
        let config = leader.follower("system:node:edge-2", orgs);
        let answer = get(&leader, config, "/api/v1/services").unwrap();
        assert_eq!(answer.code, 403, "{answer:?}");
        let status = answer.json();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Forbidden");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("has no O system:nodes"),
            "{status}"
        );
    }
}

#[test]
fn only_pool_scope_lists_and_watches_are_served() {
    let leader = Leader::start(&[]);
    leader.fill();
    let mut conn = connect(&leader, leader.node("edge-2"));
    for (method, path) in [
        ("GET", "/api/v1/namespaces/a/services/web"),
        ("POST", "/api/v1/namespaces/a/services"),
        ("DELETE", "/api/v1/namespaces/a/services/web"),
        ("GET", "/api/v1/pods"),
        ("GET", "/api/v1/secrets?watch=1"),
        ("GET", "/apis/apps/v1/deployments"),
        ("GET", "/api/v1/namespaces/a/services/web/status"),
        ("GET", "/version"),
    ] {
        let answer = request(&mut conn, method, path, "application/json").unwrap();
        assert_eq!(answer.code, 403, "{method} {path}: {answer:?}");
        assert_eq!(answer.json()["reason"], "Forbidden", "{method} {path}");
    }
    // The connection still serves what is allowed.
    let answer = request(&mut conn, "GET", "/api/v1/services", "application/json").unwrap();
    assert_eq!(answer.code, 200);
}

#[test]
fn a_follower_that_takes_no_json_gets_406() {
    let leader = Leader::start(&[]);
    leader.fill();
    let mut conn = connect(&leader, leader.node("edge-2"));
    let answer = request(
        &mut conn,
        "GET",
        "/api/v1/services",
        "application/vnd.kubernetes.protobuf",
    )
    .unwrap();
    assert_eq!(answer.code, 406, "{answer:?}");
    assert_eq!(answer.json()["reason"], "NotAcceptable");
}

#[test]
fn a_cache_still_warming_answers_429_retry_after_1() {
    let leader = Leader::start(&["apps/v1/deployments"]);
    let answer = get(&leader, leader.node("edge-2"), "/api/v1/services?watch=1").unwrap();
    assert_eq!(answer.code, 429, "{answer:?}");
    assert!(
        answer.head.contains("\r\nRetry-After: 1\r\n"),
        "{}",
        answer.head
    );
    assert!(
        answer.json()["message"]
            .as_str()
            .unwrap()
            .contains("is initializing")
    );
    // A member the hub keeps no cache of sends the follower to the cloud.
    let answer = get(&leader, leader.node("edge-2"), "/apis/apps/v1/deployments").unwrap();
    assert_eq!(answer.code, 503, "{answer:?}");
    assert!(answer.body.contains("no cache of apps/v1/deployments"));
}

#[test]
fn a_cache_whose_feed_fails_sends_followers_to_the_cloud_as_local_clients_are() {
    let leader = Leader::start(&[]);
    leader.fill();
    let cache = leader.services();
    while !cache.feeder_failing() {
        cache.feeder_failed();
    }
    for path in [
        "/api/v1/services",
        "/api/v1/services?watch=1&resourceVersion=10",
    ] {
        let answer = get(&leader, leader.node("edge-2"), path).unwrap();
        assert_eq!(answer.code, 503, "{path}: {answer:?}");
        assert!(
            answer.body.contains("feed of /v1/services is failing"),
            "{}",
            answer.body
        );
    }
    // The feeder recovers: served again.
    cache.feeder_ok();
    let answer = get(&leader, leader.node("edge-2"), "/api/v1/services").unwrap();
    assert_eq!(answer.code, 200, "{answer:?}");
}

#[test]
fn a_leader_that_cannot_reach_the_cloud_sends_followers_back_to_their_own() {
    let leader = Leader::start(&[]);
    leader.fill();
    leader.cloud.unreachable.store(true, Ordering::Relaxed);
    let answer = get(&leader, leader.node("edge-2"), "/api/v1/services").unwrap();
    assert_eq!(answer.code, 503, "{answer:?}");
    assert!(
        answer.body.contains("cannot reach the cloud"),
        "{}",
        answer.body
    );
    leader.cloud.unreachable.store(false, Ordering::Relaxed);
    let answer = get(&leader, leader.node("edge-2"), "/api/v1/services").unwrap();
    assert_eq!(answer.code, 200, "{answer:?}");
}

#[test]
fn one_follower_past_its_requests_in_flight_gets_429_and_others_are_served() {
    let leader = Leader::start(&[]);
    leader.fill();
    let watch = "/api/v1/services?watch=1&resourceVersion=10&timeoutSeconds=30";
    let mut open: Vec<Conn> = (0..PER_FOLLOWER)
        .map(|_| {
            let mut conn = connect(&leader, leader.node("edge-greedy"));
            send(&mut conn, "GET", watch, "application/json").unwrap();
            assert_eq!(read_head(&mut conn).unwrap().0, 200);
            conn
        })
        .collect();
    let refused = get(&leader, leader.node("edge-greedy"), "/api/v1/services").unwrap();
    assert_eq!(refused.code, 429, "{refused:?}");
    assert!(
        refused.body.contains("holds 4 long-running requests"),
        "{}",
        refused.body
    );
    // Another node is not held back by it.
    let other = get(&leader, leader.node("edge-other"), "/api/v1/services").unwrap();
    assert_eq!(other.code, 200, "{other:?}");
    // A watch that ends gives its slot back.
    drop(open.pop());
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let again = get(&leader, leader.node("edge-greedy"), "/api/v1/services").unwrap();
        if again.code == 200 {
            break;
        }
        assert!(Instant::now() < until, "{again:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_cache_not_filled_after_warming_sends_followers_to_the_cloud() {
    let cache = WatchCache::new(
        crate::watchcache::Resource::services(),
        CacheOptions::default(),
    );
    let warming = not_ready(&cache, true);
    assert_eq!((warming.code, warming.retry_after), (429, Some(1)));
    let failed = not_ready(&cache, false);
    assert_eq!(failed.code, 503);
    assert!(failed.message.contains("not filled"), "{}", failed.message);
}

#[test]
fn plain_connections_carry_no_peer_certificates() {
    // Over plain TCP (the proxy port) the seam says None: the follower check refuses.
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr();
    let shutdown = Arc::new(AtomicBool::new(false));
    let handler: Handler = Arc::new(|ex: Exchange<'_>| {
        let status = match identity::check_follower(ex.peer_certificates()) {
            Ok(_) => Status::internal("a plain connection had certificates"),
            Err(status) => status,
        };
        let _ = ex.send_status(&status);
    });
    let stop = Arc::clone(&shutdown);
    let thread = std::thread::spawn(move || {
        server::serve(
            listener,
            crate::requester::Port::Unknown,
            handler,
            LIMITS,
            Arc::new(Load::default()),
            stop,
        )
    });
    let mut sock = TcpStream::connect(addr).unwrap();
    write!(
        sock,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    sock.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("no client certificate"), "{text}");
    shutdown.store(true, Ordering::Release);
    server::wake(addr);
    thread.join().unwrap();
}

#[test]
fn shutdown_closes_the_port_and_ends_open_watches() {
    let mut leader = Leader::start(&[]);
    leader.fill();
    let mut conn = connect(&leader, leader.node("edge-2"));
    send(
        &mut conn,
        "GET",
        "/api/v1/services?watch=1&resourceVersion=10",
        "application/json",
    )
    .unwrap();
    assert_eq!(read_head(&mut conn).unwrap().0, 200);
    let addr = leader.addr();
    let stopped = Instant::now();
    leader.shutdown.store(true, Ordering::Release);
    leader.port.take().unwrap().stop();
    // The watch ends whole (its last chunk), within about a second of the flag.
    assert_eq!(read_chunk(&mut conn).unwrap(), b"");
    assert!(stopped.elapsed() < Duration::from_secs(3));
    assert!(TcpStream::connect(addr).is_err(), "the port still listens");
}

#[test]
fn a_new_follower_gets_in_while_others_hold_more_than_their_share() {
    let leader = Leader::start(&[]);
    leader.fill();
    let watch = "/api/v1/services?watch=1&resourceVersion=10&timeoutSeconds=30";
    // 32 followers with PER_FOLLOWER watches each: 128, the port's old cap, past the fair
    // total of 120 (the last two got in while under their share, 120 / 31).
    let mut open = Vec::new();
    for i in 0..32 {
        let node = leader.node(&format!("edge-{i}"));
        for _ in 0..PER_FOLLOWER {
            let mut conn = connect(&leader, Arc::clone(&node));
            send(&mut conn, "GET", watch, "application/json").unwrap();
            let (code, head) = read_head(&mut conn).unwrap();
            assert_eq!(code, 200, "edge-{i}: {head}");
            open.push(conn);
        }
    }
    // Each holds 4, more than 120 / 33: a 33rd member is not refused.
    let newcomer = get(&leader, leader.node("edge-new"), "/api/v1/services").unwrap();
    assert_eq!(newcomer.code, 200, "{newcomer:?}");
    // One that holds its share and more is.
    let greedy = get(&leader, leader.node("edge-0"), "/api/v1/services").unwrap();
    assert_eq!(greedy.code, 429, "{greedy:?}");
    assert!(greedy.head.to_ascii_lowercase().contains("retry-after: 1"));
    drop(open);
}
