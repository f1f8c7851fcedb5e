//! Issue 32 item 4, only fresh leaders: a pool leader tells its followers how fresh its pool
//! caches are (`GET /v1/pool/freshness` on its multiplexer port), and a follower skips a
//! leader whose cloud watch of a resource has gone silent past `--pool-leader-max-staleness`
//! (set to 8 s here, room for a stall of a loaded machine; the stand-in sends bookmarks
//! every second) for the next fresh leader,
//! and comes back when it is fresh again. Followers spread over the leaders by rendezvous
//! hashing of their node names. A leader that does not tell (a YurtHub) is asked once and
//! judged by whether it answers, as before.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::{
    self, Pool, list_when_warm, node_ip, patience, service, set_leader_config, slice,
};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const SERVICES: &str = "/api/v1/services";

/// The cloud with two Services and their slices, sending bookmarks every second, and the
/// pool's ConfigMap naming `leaders`.
fn cloud_with_objects(leaders: &[usize]) -> Cloud {
    let cloud = Cloud::start();
    cloud.set_bookmark_interval(Some(Duration::from_secs(1)));
    cloud.create("services", service("web", "10.96.0.10"));
    cloud.create("services", service("db", "10.96.0.11"));
    cloud.create("endpointslices", slice("web-abc", "web", "10.244.1.5"));
    cloud.create("endpointslices", slice("db-abc", "db", "10.244.1.6"));
    set_leader_config(&cloud, leaders, true);
    cloud
}

/// The leader of `leaders` rendezvous hashing picks for node `f`, as the hub does
/// (`hashing`: the highest `splitmix64(fnv1a(node) ^ fnv1a(leader))`).
fn rendezvous_pick(f: usize, leaders: &[usize]) -> usize {
    let fnv1a = |text: &str| {
        text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let splitmix64 = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let key = fnv1a(&pool::node_name(f));
    leaders
        .iter()
        .copied()
        .max_by_key(|&l| splitmix64(key ^ fnv1a(&pool::node_name(l))))
        .unwrap_or(0)
}

/// How many Services requests follower `f` sent to leader `l`, by the follower's link series.
fn services_asked(pool: &Pool, f: usize, l: usize) -> f64 {
    let series = format!(
        "tinyhub_cloud_requests_total{{server=\"https://{}\",component=\"multiplexer-proxy-{}\",resource=\"services\"}}",
        pool.multiplexer(l),
        pool::node_name(f)
    );
    pool.hub(f).metric(&series).unwrap_or(0.0)
}

/// The names of the Services in a list through `hub`.
fn names(hub: &Hub) -> Vec<String> {
    let list = list_when_warm(hub, SERVICES, KUBE_PROXY);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Watches of Services the cloud got from the followers' feeders.
fn follower_watches(cloud: &Cloud, followers: &[usize]) -> usize {
    cloud.count(|r| {
        pool::of(r, "services")
            && r.is_watch()
            && followers
                .iter()
                .any(|&f| r.user_agent == format!("multiplexer-proxy-{}", pool::node_name(f)))
    })
}

/// What leader `l` tells on `GET /v1/pool/freshness`, asked with the certificate of a node
/// of the pool (curl, files under `dir`).
fn freshness(cloud: &Cloud, pool: &Pool, dir: &TempDir, l: usize) -> Value {
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write a test file");
        path.display().to_string()
    };
    let node = cloud.issue_client("system:node:edge-7", &["system:nodes"]);
    let (ca, cert, key) = (
        write("ca.pem", cloud.ca_pem()),
        write("node.pem", &node.pair.cert_pem),
        write("node-key.pem", &node.pair.key_pem),
    );
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
        ])
        .arg(format!("https://{}/v1/pool/freshness", pool.multiplexer(l)))
        .output()
        .expect("run curl");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The age leader `l` tells for `resource` (a kind directory), and whether its cloud watch
/// shows bookmarks.
fn told(
    cloud: &Cloud,
    pool: &Pool,
    dir: &TempDir,
    l: usize,
    resource: &str,
) -> (Option<u64>, bool) {
    let told = freshness(cloud, pool, dir, l);
    let entry = told["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|e| e["resource"] == resource).cloned())
        .unwrap_or(Value::Null);
    (entry["ageSeconds"].as_u64(), entry["bookmarks"] == true)
}

#[test]
fn a_follower_skips_a_leader_whose_cloud_watch_hangs_and_returns_when_it_is_fresh() {
    let cloud = cloud_with_objects(&[1, 2]);
    let pool = Pool::start_with(
        &cloud,
        "pool-fresh",
        4,
        &[1, 2],
        &["--pool-leader-max-staleness=8s"],
    );
    let followers = [3, 4];
    // Each follower reads from the one leader rendezvous hashing of its name picks; these two
    // names spread over both leaders. (A first probe or list that fails under load may send
    // a follower to the other one for a round: only its own leader is looked at.)
    let mut leader_of = Vec::new();
    for f in followers {
        let _ = list_when_warm(pool.hub(f), SERVICES, KUBE_PROXY);
        let mine = rendezvous_pick(f, &[1, 2]);
        assert!(
            eventually(patience(40), || services_asked(&pool, f, mine) > 0.0),
            "edge-{f} reads services from edge-{mine}: {}",
            pool.hub(f).logs()
        );
        leader_of.push((f, mine));
    }
    let on = |l: usize| -> Vec<usize> {
        leader_of
            .iter()
            .filter(|(_, m)| *m == l)
            .map(|(f, _)| *f)
            .collect()
    };
    let (of_1, of_2) = (on(1), on(2));
    assert!(
        !of_1.is_empty() && !of_2.is_empty(),
        "followers spread over the leaders: {leader_of:?}"
    );
    assert_eq!(follower_watches(&cloud, &followers), 0);
    // The leaders tell: fresh, and their cloud watches show bookmarks (the stand-in sends
    // one a second).
    let dir = TempDir::new("pool-fresh-certs");
    for l in [1, 2] {
        assert!(
            eventually(patience(10), || {
                let told = freshness(&cloud, &pool, &dir, l);
                told["cloud"] == true
                    && told["resources"].as_array().is_some_and(|r| {
                        r.len() == 2
                            && r.iter().all(|e| {
                                e["bookmarks"] == true
                                    && e["ageSeconds"].as_u64().is_some_and(|a| a < 8)
                            })
                    })
            }),
            "edge-{l}: {}",
            freshness(&cloud, &pool, &dir, l)
        );
    }
    let before: Vec<(usize, f64)> = of_1
        .iter()
        .map(|&f| (f, services_asked(&pool, f, 2)))
        .collect();

    // edge-1's Services watch hangs: open, silent, while its dial and everything else
    // answer. A change made now reaches edge-1's followers only through another leader.
    cloud.freeze_watches("services", "system:node:edge-1", true);
    cloud.create("services", service("fresh", "10.96.0.12"));
    for &f in &of_1 {
        assert!(
            eventually(patience(45), || names(pool.hub(f))
                .contains(&"fresh".to_owned())),
            "edge-{f} reads services from a fresh leader within the bound and a round: {}",
            pool.hub(f).logs()
        );
    }
    for (f, asked) in &before {
        assert!(
            services_asked(&pool, *f, 2) > *asked,
            "edge-{f} went to edge-2, not the cloud"
        );
    }
    assert!(
        pool.hub(of_1[0]).log_lines(|l| l.contains("is older than")) >= 1,
        "{}",
        pool.hub(of_1[0]).logs()
    );
    // The followers of the live leader stay with it, and no follower went to the cloud.
    assert_eq!(follower_watches(&cloud, &followers), 0);
    assert!(
        !names(pool.hub(1)).contains(&"fresh".to_owned()),
        "edge-1 is stale"
    );
    let (age, bookmarks) = told(&cloud, &pool, &dir, 1, "services.v1.core");
    assert!(
        bookmarks && age.is_some_and(|a| a > 8),
        "edge-1 tells it: {age:?}"
    );

    // Thawed (its watch cut, so it resumes): fresh again, its followers come back within
    // a round.
    let back: Vec<(usize, f64)> = of_1
        .iter()
        .map(|&f| (f, services_asked(&pool, f, 1)))
        .collect();
    cloud.freeze_watches("services", "system:node:edge-1", false);
    for (f, asked) in &back {
        assert!(
            eventually(patience(30), || services_asked(&pool, *f, 1) > *asked),
            "edge-{f} is back on edge-1: {}",
            pool.hub(*f).logs()
        );
    }
    cloud.create("services", service("later", "10.96.0.13"));
    for f in followers {
        assert!(
            eventually(patience(10), || names(pool.hub(f))
                .contains(&"later".to_owned())),
            "edge-{f}"
        );
    }
    assert_eq!(follower_watches(&cloud, &followers), 0);

    // edge-2 stops: only its followers move, to edge-1.
    let moved: Vec<(usize, f64)> = of_2
        .iter()
        .map(|&f| (f, services_asked(&pool, f, 1)))
        .collect();
    let mut pool = pool;
    pool.stop_node(2);
    for (f, asked) in &moved {
        assert!(
            eventually(patience(40), || services_asked(&pool, *f, 1) > *asked),
            "edge-{f} reads from edge-1 once edge-2 is gone: {}",
            pool.hub(*f).logs()
        );
    }
    cloud.create("services", service("after", "10.96.0.14"));
    for f in followers {
        assert!(
            eventually(patience(10), || names(pool.hub(f))
                .contains(&"after".to_owned())),
            "edge-{f}"
        );
    }
    // edge-1's own followers did not move (edge-2's may read from the cloud for a turn, if
    // edge-1 lags behind the resourceVersion they bring from edge-2).
    assert_eq!(
        follower_watches(&cloud, &of_1),
        0,
        "{}",
        pool.hub(of_1[0]).logs()
    );
}

/// A leader that does not know the freshness path (as YurtHub, which forwards it to its
/// cloud): 404 to it, 500 to everything else. Records each request line.
struct Unknowing {
    requests: Arc<Mutex<Vec<String>>>,
}

impl Unknowing {
    fn start(addr: SocketAddr, cert: &crate::support::CertKey) -> Unknowing {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_der.clone()));
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![CertificateDer::from(cert.cert_der.clone())], key)
                .expect("cert and key"),
        );
        let listener = TcpListener::bind(addr).expect("bind the fake leader");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let conn = rustls::ServerConnection::new(config).expect("connection");
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    let mut buf = [0u8; 4096];
                    // One request per connection, then closed.
                    if let Ok(n) = tls.read(&mut buf)
                        && n > 0
                    {
                        let head = String::from_utf8_lossy(&buf[..n]);
                        let line = head.lines().next().unwrap_or("").to_owned();
                        let status = if line.starts_with("GET /v1/pool/freshness ") {
                            "404 Not Found"
                        } else {
                            "500 Internal Server Error"
                        };
                        seen.lock().unwrap().push(line);
                        let _ = write!(
                            tls,
                            "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                        let _ = tls.flush();
                    }
                });
            }
        });
        Unknowing { requests }
    }

    fn count(&self, prefix: &str) -> usize {
        let requests = self.requests.lock().unwrap();
        requests.iter().filter(|l| l.starts_with(prefix)).count()
    }
}

#[test]
fn a_leader_that_does_not_tell_its_freshness_is_asked_once_and_still_used() {
    let cloud = cloud_with_objects(&[9]);
    let port = pool::free_port(9);
    let cert = cloud.pki().issue_server(&["127.0.0.10"]);
    let fake = Unknowing::start(SocketAddr::new(node_ip(9).into(), port), &cert);
    let dir = TempDir::new("pool-fresh-unknowing");
    let hub = Hub::start(
        &pool::node_spec(&cloud, dir.path(), 2, port).with(&["--pool-leader-max-staleness=5s"]),
    );
    let listed = names(&hub);
    assert!(
        listed.contains(&"web".to_owned()) && listed.contains(&"db".to_owned()),
        "{listed:?}"
    );
    let asked = fake.count(&format!("GET {SERVICES}"));
    assert!(asked >= 1, "{:?}", fake.requests.lock().unwrap());
    // A health round later the feeder comes back to it (it answered its probe: it is a
    // leader, unknown freshness and all), and it was asked how fresh it is once only.
    assert!(
        eventually(patience(30), || fake.count(&format!("GET {SERVICES}"))
            > asked),
        "{:?}\n{}",
        fake.requests.lock().unwrap(),
        hub.logs()
    );
    assert_eq!(
        fake.count("GET /v1/pool/freshness "),
        1,
        "{:?}",
        fake.requests.lock().unwrap()
    );
    assert!(hub.log_lines(|l| l.contains("does not tell how fresh it is")) == 1);
}
