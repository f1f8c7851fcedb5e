//! Issue 16 items 2 and 3, one watch for the whole pool (YurtHub's `pkg/yurthub/multiplexer`,
//! `pkg/yurthub/healthchecker/leaderhub`): three hubs on one machine (`tests/support/pool.rs`),
//! `edge-1` the leader named by the pool's
//! `leader-hub-pool-a` ConfigMap. The followers' pool caches list and watch through the
//! leader's multiplexer port; the leader alone talks to the cloud; a dead leader sends the
//! followers to the cloud and its return brings them back; the leader admits only the pool's
//! hubs and only pool-scope reads.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::{
    self, Pool, list_when_warm, node_ip, of, patience, service, set_leader_config,
    set_leader_config_scoped, slice,
};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const COREDNS: &str = "coredns/1.11.1 (linux/arm)";
const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

/// The cloud with two Services and their slices, and the pool's ConfigMap naming `edge-1`.
fn cloud_with_objects() -> Cloud {
    let cloud = Cloud::start();
    cloud.create("services", service("web", "10.96.0.10"));
    cloud.create("services", service("db", "10.96.0.11"));
    cloud.create("endpointslices", slice("web-abc", "web", "10.244.1.5"));
    cloud.create("endpointslices", slice("db-abc", "db", "10.244.1.6"));
    set_leader_config(&cloud, &[1], true);
    cloud
}

/// (namespace/name, resourceVersion) of each item, sorted.
fn keys(items: &[Value]) -> Vec<(String, String)> {
    let mut keys = pool::keys_in_order(items);
    keys.sort();
    keys
}

fn items(list: &Value) -> &[Value] {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
}

/// A local watch of `path` through `hub` as `ua`, from `list`'s resourceVersion.
fn watch_from(hub: &Hub, path: &str, ua: &str, list: &Value) -> Events {
    let rv = list["metadata"]["resourceVersion"].as_str().expect("rv");
    let url = format!(
        "{}{path}?watch=true&resourceVersion={rv}&timeoutSeconds=120",
        hub.url()
    );
    let (status, body) = stream(&url, ua);
    assert_eq!(status, 200, "watch of {path} as {ua}");
    Events::new(body)
}

/// Reads `events` until an ADDED of `name`.
fn sees_added(events: &mut Events, name: &str) -> bool {
    while let Some(event) = events.next_event() {
        if event["type"] == "ADDED" && event["object"]["metadata"]["name"] == name {
            return true;
        }
    }
    false
}

/// The lists and watches of `resource` the cloud got from anyone.
fn lists_and_watches(cloud: &Cloud, resource: &str) -> (usize, usize) {
    let lists = cloud.count(|r| of(r, resource) && !r.is_watch());
    let watches = cloud.count(|r| of(r, resource) && r.is_watch());
    (lists, watches)
}

#[test]
fn every_node_sees_the_clouds_services_and_slices_through_one_leader() {
    let cloud = cloud_with_objects();
    let pool = Pool::start(&cloud, "pool-leader-share", 3, &[1]);
    let direct_services = keys(&cloud.list("services", None));
    let direct_slices = keys(&cloud.list("endpointslices", None));

    // kube-proxy and coredns on every node see what the cloud has, and watch it.
    let mut watches = Vec::new();
    for n in 1..=3 {
        let hub = pool.hub(n);
        for ua in [KUBE_PROXY, COREDNS] {
            let services = list_when_warm(hub, SERVICES, ua);
            assert_eq!(keys(items(&services)), direct_services, "edge-{n} {ua}");
            let slices = list_when_warm(hub, SLICES, ua);
            assert_eq!(keys(items(&slices)), direct_slices, "edge-{n} {ua}");
            watches.push((
                n,
                watch_from(hub, SERVICES, ua, &services),
                watch_from(hub, SLICES, ua, &slices),
            ));
        }
    }

    // A new Service and slice in the cloud reach every node's watches.
    cloud.create("services", service("cache", "10.96.0.12"));
    cloud.create("endpointslices", slice("cache-abc", "cache", "10.244.1.7"));
    for (n, services, slices) in &mut watches {
        assert!(sees_added(services, "cache"), "edge-{n}'s Services watch");
        assert!(sees_added(slices, "cache-abc"), "edge-{n}'s slices watch");
    }

    // The cloud saw one list and one watch of each resource for the whole pool: the
    // leader's (every request from anyone counted, the hubs' own included).
    for resource in ["services", "endpointslices"] {
        assert_eq!(
            lists_and_watches(&cloud, resource),
            (1, 1),
            "{resource}: {:#?}",
            cloud
                .requests()
                .iter()
                .filter(|r| of(r, resource))
                .map(|r| format!("{} {}?{}", r.user_agent, r.path, r.query))
                .collect::<Vec<_>>()
        );
        assert!(
            cloud.count(|r| of(r, resource) && r.user_agent == "multiplexer-proxy-edge-1") == 2,
            "the leader's feeder"
        );
        assert_eq!(cloud.watchers(resource), 1, "{resource}");
    }
    // Each follower's link series name the leader as the server of its feeders' list and
    // watch.
    for n in [2, 3] {
        for resource in ["services", "endpointslices"] {
            let series = format!(
                "tinyhub_cloud_requests_total{{server=\"https://{}\",component=\"multiplexer-proxy-edge-{n}\",resource=\"{resource}\"}}",
                pool.multiplexer(1)
            );
            assert_eq!(pool.hub(n).metric(&series), Some(2.0), "{series}");
        }
    }
    // The followers' feeders were served by the leader: a list of each resource (their
    // watches, still open, are counted when they end).
    let leader = pool.hub(1);
    for follower in ["edge-2", "edge-3"] {
        let series =
            format!("tinyhub_multiplexer_requests_total{{follower=\"{follower}\",code=\"200\"}}");
        assert!(
            leader.wait_metric_at_least(&series, 2.0, patience(5)),
            "{series}: {:?}",
            leader.metric(&series)
        );
    }
}

#[test]
fn followers_wait_for_a_warming_leader_instead_of_listing_from_the_cloud() {
    let cloud = cloud_with_objects();
    // The leader's first list of slices fails: it warms for a retry interval (3 s), answering
    // its followers 429 meanwhile.
    cloud.misanswer(SLICES, 1, 500, b"{}");
    // Every hub starts at once, as after a power cut.
    let pool = Pool::start_together(
        &cloud,
        "pool-leader-warming",
        3,
        &["--heartbeat-interval-seconds=3"],
    );
    for n in 1..=3 {
        let slices = list_when_warm(pool.hub(n), SLICES, KUBE_PROXY);
        assert_eq!(items(&slices).len(), 2, "edge-{n}");
    }
    let leader = pool.hub(1);
    for follower in ["edge-2", "edge-3"] {
        // Turned away while the leader warmed, and served by it once it was warm.
        for code in ["429", "200"] {
            let series = format!(
                "tinyhub_multiplexer_requests_total{{follower=\"{follower}\",code=\"{code}\"}}"
            );
            assert!(
                leader.wait_metric_at_least(&series, 1.0, patience(5)),
                "{series}: {:?}",
                leader.metric(&series)
            );
        }
    }
    // The cloud saw the leader's failed list and its second one, none from a follower.
    assert_eq!(
        lists_and_watches(&cloud, "endpointslices"),
        (2, 1),
        "{:#?}",
        cloud
            .requests()
            .iter()
            .filter(|r| of(r, "endpointslices"))
            .map(|r| format!("{} {}?{}", r.user_agent, r.path, r.query))
            .collect::<Vec<_>>()
    );
}

#[test]
fn followers_read_from_the_cloud_while_the_leader_is_down_and_come_back() {
    let cloud = cloud_with_objects();
    let mut pool = Pool::start(&cloud, "pool-leader-down", 3, &[1]);
    let mut watches = Vec::new();
    for n in [2, 3] {
        let services = list_when_warm(pool.hub(n), SERVICES, KUBE_PROXY);
        watches.push((n, watch_from(pool.hub(n), SERVICES, KUBE_PROXY, &services)));
    }
    assert!(cloud.wait_for_watchers("services", 1, patience(10)));
    assert_eq!(cloud.watchers("services"), 1, "the leader's alone");

    // The leader dies: each follower's feeder goes on from the cloud (within one health
    // interval; its watch through the leader breaks at once here), and the local watches,
    // never reopened, get what the cloud gets.
    pool.stop_node(1);
    assert!(
        cloud.wait_for_watchers("services", 2, patience(25)),
        "the followers watch the cloud: {}",
        cloud.watchers("services")
    );
    cloud.create("services", service("cache", "10.96.0.12"));
    for (n, events) in &mut watches {
        assert!(sees_added(events, "cache"), "edge-{n}'s local watch");
    }

    // The leader is back: at its next health round each follower ends its cloud watch and
    // resumes through the leader; the cloud is down to the leader's watch again.
    pool.start_node(&cloud, 1);
    assert!(
        cloud.wait_for_watchers_at_most("services", 1, patience(50)),
        "the followers left the cloud: {} watches",
        cloud.watchers("services")
    );
    cloud.create("services", service("queue", "10.96.0.13"));
    for (n, events) in &mut watches {
        assert!(
            sees_added(events, "queue"),
            "edge-{n}'s local watch, through the leader again"
        );
    }
}

#[test]
fn followers_read_from_the_cloud_without_election_or_leaders() {
    let cloud = cloud_with_objects();
    set_leader_config(&cloud, &[1], false);
    let pool = Pool::start(&cloud, "pool-leader-off", 3, &[1]);
    for n in 1..=3 {
        list_when_warm(pool.hub(n), SERVICES, KUBE_PROXY);
    }
    // Election off: every hub watches the cloud itself.
    assert!(
        cloud.wait_for_watchers("services", 3, patience(10)),
        "{}",
        cloud.watchers("services")
    );
    assert!(cloud.count(|r| of(r, "services") && r.user_agent == "multiplexer-proxy-edge-2") >= 2);

    // Election on: the followers move to the leader at once.
    set_leader_config(&cloud, &[1], true);
    assert!(
        cloud.wait_for_watchers_at_most("services", 1, patience(15)),
        "{}",
        cloud.watchers("services")
    );

    // No leader named: back to the cloud.
    set_leader_config(&cloud, &[], true);
    assert!(
        cloud.wait_for_watchers("services", 3, patience(15)),
        "{}",
        cloud.watchers("services")
    );
}

/// Writes `text` to `dir/name`; its path as a string.
fn write(dir: &TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write a test file");
    path.display().to_string()
}

/// `curl` against the leader's multiplexer port: (exit code, HTTP status, body).
fn curl(url: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_leader_admits_only_pool_hubs_and_only_pool_scope_reads() {
    let cloud = cloud_with_objects();
    let pool = Pool::start(&cloud, "pool-leader-refuse", 1, &[1]);
    let dir = TempDir::new("pool-leader-refuse-certs");
    let ca = write(&dir, "ca.pem", cloud.ca_pem());
    let node = cloud.issue_client("system:node:edge-7", &["system:nodes"]);
    let (node_cert, node_key) = (
        write(&dir, "node.pem", &node.pair.cert_pem),
        write(&dir, "node-key.pem", &node.pair.key_pem),
    );
    let other_ca = crate::support::Pki::new().issue_client("system:node:edge-8", &["system:nodes"]);
    let (other_cert, other_key) = (
        write(&dir, "other.pem", &other_ca.pair.cert_pem),
        write(&dir, "other-key.pem", &other_ca.pair.key_pem),
    );
    let user = cloud.issue_client("alice", &["developers"]);
    let (user_cert, user_key) = (
        write(&dir, "user.pem", &user.pair.cert_pem),
        write(&dir, "user-key.pem", &user.pair.key_pem),
    );
    let base = format!("https://{}", pool.multiplexer(1));
    let services = format!("{base}{SERVICES}");
    let ua = ["-H", "User-Agent: multiplexer-proxy-edge-7"];

    // A node's certificate of the cluster CA: pool-scope lists are served.
    let (code, out) = curl(
        &services,
        &[
            &["--cacert", &ca, "--cert", &node_cert, "--key", &node_key],
            &ua[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("\n200") && out.contains("ServiceList"),
        "{out}"
    );

    // No certificate, or one of another CA: the handshake fails, nothing is served.
    let (code, out) = curl(&services, &[&["--cacert", &ca], &ua[..]].concat());
    assert_ne!(code, 0, "without a certificate: {out}");
    assert!(!out.contains("ServiceList"), "{out}");
    let (code, out) = curl(
        &services,
        &[
            &["--cacert", &ca, "--cert", &other_cert, "--key", &other_key],
            &ua[..],
        ]
        .concat(),
    );
    assert_ne!(code, 0, "another CA's certificate: {out}");
    assert!(!out.contains("ServiceList"), "{out}");

    // The cluster CA's certificate of a user, not a node: 403.
    let (code, out) = curl(
        &services,
        &[
            &["--cacert", &ca, "--cert", &user_cert, "--key", &user_key],
            &ua[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("\n403") && out.contains("\"kind\":\"Status\""),
        "{out}"
    );

    // A node, but not a pool-scope list or watch: 403 (YurtHub would forward it to the
    // cloud with the leader's identity).
    for path in [
        "/api/v1/pods",
        "/api/v1/namespaces/kube-system/secrets",
        "/api/v1/namespaces/shop/services/web",
    ] {
        let (code, out) = curl(
            &format!("{base}{path}"),
            &[
                &["--cacert", &ca, "--cert", &node_cert, "--key", &node_key],
                &ua[..],
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{path}: {out}");
        assert!(
            out.ends_with("\n403") && out.contains("\"kind\":\"Status\""),
            "{path}: {out}"
        );
    }
    assert_eq!(
        cloud.count(|r| r.path.contains("secrets") || r.path == "/api/v1/pods"),
        0,
        "nothing was forwarded"
    );
}

/// A fake leader on `addr` presenting `cert` (of the cluster CA), asking for a client
/// certificate of the CA `ca_der`: counts TLS handshakes begun (a ClientHello read), and
/// keeps the head of each HTTP request read after one, with whether the client presented a
/// certificate; it answers each with a 500.
struct FakeLeader {
    hellos: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<(String, bool)>>>,
}

/// A [`FakeLeader`] for edge-9 (127.0.0.10) on a port free on nodes 1..=9, presenting a
/// certificate of the cluster CA for `cert_ip`; with that port.
fn fake_leader(cloud: &Cloud, cert_ip: &str) -> (FakeLeader, u16) {
    let port = pool::free_port(9);
    let fake_addr = SocketAddr::new(node_ip(9).into(), port);
    let cert = cloud.pki().issue_server(&[cert_ip]);
    (
        FakeLeader::start(fake_addr, &cert, cloud.pki().ca_der()),
        port,
    )
}

/// [`fake_leader`] as the pool's only leader, and the hub of follower `edge-2` (caching in
/// a `tag` directory) pointed at it; in that order, so that the hub is dropped first.
fn follower_of_fake_leader(cloud: &Cloud, cert_ip: &str, tag: &str) -> (FakeLeader, TempDir, Hub) {
    let (fake, port) = fake_leader(cloud, cert_ip);
    set_leader_config(cloud, &[9], true);
    let dir = TempDir::new(tag);
    let hub = Hub::start(&pool::node_spec(cloud, dir.path(), 2, port));
    (fake, dir, hub)
}

impl FakeLeader {
    fn start(addr: SocketAddr, cert: &crate::support::CertKey, ca_der: &[u8]) -> FakeLeader {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_der.clone()));
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(ca_der.to_vec()))
            .expect("the test CA");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .expect("verifier");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_client_cert_verifier(verifier)
                .with_single_cert(vec![CertificateDer::from(cert.cert_der.clone())], key)
                .expect("cert and key"),
        );
        let listener = TcpListener::bind(addr).expect("bind the fake leader");
        let hellos = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (h, r) = (Arc::clone(&hellos), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, h, r) = (Arc::clone(&config), Arc::clone(&h), Arc::clone(&r));
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let conn = rustls::ServerConnection::new(config).expect("connection");
                    let counted = Counting {
                        inner: stream,
                        read: 0,
                    };
                    let mut tls = rustls::StreamOwned::new(conn, counted);
                    let mut buf = [0u8; 1024];
                    if let Ok(n) = tls.read(&mut buf)
                        && n > 0
                    {
                        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                        let certified = tls.conn.peer_certificates().is_some();
                        r.lock().unwrap().push((head, certified));
                        let _ = tls.write_all(
                            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n",
                        );
                    }
                    // The health checker's dials close without a byte; a client's TLS
                    // handshake sends its ClientHello.
                    if tls.sock.read > 0 {
                        h.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        FakeLeader { hellos, requests }
    }
}

/// A socket counting the bytes read from it.
struct Counting {
    inner: std::net::TcpStream,
    read: usize,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n;
        Ok(n)
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn a_follower_refuses_a_leader_whose_certificate_names_another_address() {
    let cloud = cloud_with_objects();
    // The ConfigMap names edge-9 at 127.0.0.10, where a server presents a certificate of
    // the cluster CA for 127.0.0.99.
    let (fake, _dir, hub) = follower_of_fake_leader(&cloud, "127.0.0.99", "pool-leader-wrong-ip");

    // The follower tried the leader (TLS), refused its certificate, and read from the cloud.
    let list = list_when_warm(&hub, SERVICES, KUBE_PROXY);
    assert_eq!(keys(items(&list)), keys(&cloud.list("services", None)));
    assert!(
        hub.wait_log_line(
            |l| l.contains("from the leader hub") && l.contains("invalid peer certificate"),
            patience(10)
        ),
        "the leader was tried, and its certificate refused"
    );
    assert!(
        fake.hellos.load(Ordering::Relaxed) >= 1,
        "a handshake began"
    );
    assert!(
        fake.requests.lock().unwrap().is_empty(),
        "no request was sent to it"
    );
    assert!(
        cloud.count(|r| of(r, "services") && r.user_agent == "multiplexer-proxy-edge-2") >= 1,
        "the cloud served the follower"
    );
}

#[test]
fn the_configmaps_pool_scope_set_replaces_the_start_up_one_at_run_time() {
    let cloud = cloud_with_objects();
    set_leader_config(&cloud, &[], false);
    let pool = Pool::start(&cloud, "pool-leader-scope", 1, &[]);
    let hub = pool.hub(1);
    list_when_warm(hub, SLICES, KUBE_PROXY);
    assert!(cloud.wait_for_watchers("endpointslices", 1, patience(10)));
    let direct = |ua: &str| cloud.count(|r| of(r, "endpointslices") && r.user_agent == ua);
    assert_eq!(direct(KUBE_PROXY), 0, "served from the node's cache");

    // EndpointSlices leave the set (and an unknown kind joins it): the feeder's watch ends,
    // kube-proxy's lists go to the cloud, Services stay local.
    set_leader_config_scoped(&cloud, &[], false, "/v1/services,apps/v1/deployments");
    assert!(
        cloud.wait_for_watchers_at_most("endpointslices", 0, patience(10)),
        "the feeder stopped watching"
    );
    assert!(hub.wait_log(
        "apps/v1/deployments is not served from a node-local cache",
        patience(5)
    ));
    let before = direct(KUBE_PROXY);
    let list = list_when_warm(hub, SLICES, KUBE_PROXY);
    assert_eq!(
        keys(items(&list)),
        keys(&cloud.list("endpointslices", None))
    );
    assert_eq!(direct(KUBE_PROXY), before + 1, "forwarded to the cloud");
    list_when_warm(hub, SERVICES, KUBE_PROXY);
    assert_eq!(
        cloud.count(|r| of(r, "services") && r.user_agent == KUBE_PROXY),
        0
    );

    // Back in the set: listed and watched again, served locally again.
    set_leader_config(&cloud, &[], false);
    assert!(cloud.wait_for_watchers("endpointslices", 1, patience(10)));
    list_when_warm(hub, SLICES, KUBE_PROXY);
    assert_eq!(
        direct(KUBE_PROXY),
        before + 1,
        "served from the node's cache again"
    );
}

#[test]
fn a_follower_reads_from_the_cloud_for_a_round_when_its_leader_answers_an_error() {
    let cloud = cloud_with_objects();
    // A leader at 127.0.0.10 with a good certificate that answers every request with 500.
    let (fake, _dir, hub) = follower_of_fake_leader(&cloud, "127.0.0.10", "pool-leader-refusing");

    // Each feeder asked the leader first, as the multiplexer with the hub's certificate,
    // then read from the cloud; the leader stays healthy (it answered).
    let list = list_when_warm(&hub, SERVICES, KUBE_PROXY);
    assert_eq!(keys(items(&list)), keys(&cloud.list("services", None)));
    let asked = fake.requests.lock().unwrap().clone();
    assert!(
        asked.iter().any(
            |(head, certified)| head.starts_with(&format!("GET {SERVICES} "))
                && head
                    .to_ascii_lowercase()
                    .contains("user-agent: multiplexer-proxy-edge-2")
                && *certified
        ),
        "{asked:?}"
    );
    assert!(
        cloud.count(|r| of(r, "services") && r.user_agent == "multiplexer-proxy-edge-2") >= 1,
        "the cloud served the follower"
    );
    assert_eq!(
        hub.log_lines(|l| l.contains("is unreachable")),
        0,
        "{}",
        hub.logs()
    );
}

/// Reads `events` until an ADDED of `name`, failing on an ERROR event (a 410 would send the
/// client to relist).
fn sees_added_without_error(events: &mut Events, name: &str) -> bool {
    while let Some(event) = events.next_event() {
        assert_ne!(event["type"], "ERROR", "{event}");
        if event["type"] == "ADDED" && event["object"]["metadata"]["name"] == name {
            return true;
        }
    }
    false
}

#[test]
fn followers_that_start_before_their_leader_wait_for_it_instead_of_listing_from_the_cloud() {
    // Under qemu a hub takes longer to learn its leader than the follower's first list
    // waits for the ConfigMap (10 s): the follower then lists from the cloud, as it should.
    if emulated() {
        eprintln!("SKIP: the waits this test counts on are a native binary's");
        return;
    }
    let cloud = cloud_with_objects();
    // A power cut where the leader boots 3 s after its followers: they dial a port nobody
    // listens on yet.
    let pool = Pool::start_late(
        &cloud,
        "pool-leader-late",
        3,
        &[1],
        Duration::from_secs(3),
        &["--heartbeat-interval-seconds=3"],
    );
    for n in 1..=3 {
        for (path, resource) in [(SERVICES, "services"), (SLICES, "endpointslices")] {
            let list = list_when_warm(pool.hub(n), path, KUBE_PROXY);
            assert_eq!(
                keys(items(&list)),
                keys(&cloud.list(resource, None)),
                "edge-{n} {path}"
            );
        }
    }
    // The cloud saw one list of each resource, the leader's, and nothing from a follower.
    for resource in ["services", "endpointslices"] {
        let seen: Vec<String> = cloud
            .requests()
            .iter()
            .filter(|r| of(r, resource))
            .map(|r| format!("{} {}?{}", r.user_agent, r.path, r.query))
            .collect();
        assert_eq!(
            cloud.count(|r| of(r, resource) && !r.is_watch()),
            1,
            "{seen:#?}"
        );
        assert_eq!(
            cloud.count(|r| of(r, resource) && r.user_agent != "multiplexer-proxy-edge-1"),
            0,
            "{seen:#?}"
        );
    }
}

#[test]
fn a_leader_restart_does_not_freeze_its_followers_caches_or_send_their_clients_to_the_cloud() {
    let cloud = cloud_with_objects();
    let mut pool = Pool::start_with(
        &cloud,
        "pool-leader-restart",
        3,
        &[1],
        &["--heartbeat-interval-seconds=3"],
    );
    let mut watches = Vec::new();
    for n in [2, 3] {
        let slices = list_when_warm(pool.hub(n), SLICES, KUBE_PROXY);
        watches.push((n, watch_from(pool.hub(n), SLICES, KUBE_PROXY, &slices)));
    }
    // The leader dies: the followers watch the cloud.
    pool.stop_node(1);
    assert!(
        cloud.wait_for_watchers("endpointslices", 2, patience(25)),
        "{}",
        cloud.watchers("endpointslices")
    );
    // It comes back with its first 8 lists of slices failing: it warms for 8 retry
    // intervals (24 s, more than a health round), answering 429. The followers, which hold
    // data, are not turned into failing caches by its 429s: they keep their cloud watches
    // until it serves, then come back.
    cloud.misanswer(SLICES, 8, 500, b"{}");
    pool.start_node(&cloud, 1);
    assert!(
        pool.hub(1).wait_log("failed", patience(10)),
        "the leader's list failed"
    );
    assert!(
        cloud.wait_for_watchers_at_most("endpointslices", 1, patience(70)),
        "the followers left the cloud: {} watches",
        cloud.watchers("endpointslices")
    );
    cloud.create("endpointslices", slice("cache-abc", "web", "10.244.1.7"));
    for (n, events) in &mut watches {
        assert!(
            sees_added_without_error(events, "cache-abc"),
            "edge-{n}'s local watch carried on"
        );
    }
    for n in [2, 3] {
        let list = list_when_warm(pool.hub(n), SLICES, KUBE_PROXY);
        assert_eq!(items(&list).len(), 3, "edge-{n}");
    }
    assert_eq!(
        cloud.count(|r| r.user_agent == KUBE_PROXY),
        0,
        "no kube-proxy request reached the cloud"
    );
}

#[test]
fn a_leader_that_refuses_the_follower_is_asked_again_only_after_a_backoff() {
    let cloud = cloud_with_objects();
    // edge-9's certificate names another address: every handshake fails, while its port
    // keeps answering the TCP health probe.
    let (fake, _dir, hub) =
        follower_of_fake_leader(&cloud, "127.0.0.99", "pool-leader-refusing-backoff");
    list_when_warm(&hub, SERVICES, KUBE_PROXY);
    assert!(hub.wait_log("refuses this node", patience(10)));
    let began = std::time::Instant::now();
    // Two health rounds (20 s each) and more: the leader is set aside for 20 s, then 40 s.
    std::thread::sleep(Duration::from_secs(45));
    let watches = cloud
        .count(|r| of(r, "services") && r.is_watch() && r.user_agent == "multiplexer-proxy-edge-2");
    assert!(
        watches <= 2,
        "the cloud watch was torn down {} times in {:?}",
        watches - 1,
        began.elapsed()
    );
    assert_eq!(
        hub.log_lines(|l| l.contains("is healthy")),
        1,
        "no flapping: {}",
        hub.logs()
    );
    assert_eq!(
        hub.log_lines(|l| l.contains("refuses this node (")),
        1,
        "warned once"
    );
    assert!(fake.hellos.load(Ordering::Relaxed) <= 6, "a few handshakes");
}

#[test]
fn a_follower_turned_away_by_one_leader_reads_from_another_before_the_cloud() {
    let cloud = cloud_with_objects();
    // Two leaders: edge-9, a fake that answers every request with 500 (named first, so it
    // is picked first), and edge-1, a real hub.
    let (fake, port) = fake_leader(&cloud, "127.0.0.10");
    set_leader_config(&cloud, &[9, 1], true);
    let dirs = [
        TempDir::new("pool-leader-two-1"),
        TempDir::new("pool-leader-two-2"),
    ];
    let leader = Hub::start(&pool::node_spec(&cloud, dirs[0].path(), 1, port));
    assert!(leader.wait_log("role=multiplexer addr=", patience(20)));
    for path in [SERVICES, SLICES] {
        list_when_warm(&leader, path, "warm-up");
    }
    let follower = Hub::start(&pool::node_spec(&cloud, dirs[1].path(), 2, port));
    for (path, resource) in [(SERVICES, "services"), (SLICES, "endpointslices")] {
        let list = list_when_warm(&follower, path, KUBE_PROXY);
        assert_eq!(keys(items(&list)), keys(&cloud.list(resource, None)));
    }
    assert!(
        !fake.requests.lock().unwrap().is_empty(),
        "the fake leader was asked first"
    );
    let from_follower: Vec<String> = cloud
        .requests()
        .iter()
        .filter(|r| r.user_agent == "multiplexer-proxy-edge-2")
        .map(|r| format!("{}?{}", r.path, r.query))
        .collect();
    assert!(
        from_follower.is_empty(),
        "the other leader served the follower: {from_follower:#?}"
    );
}
