//! Issue 11 item 1: an offline watch is held until the cloud has come back. The cloud dies
//! just after a health probe, with the default `--heartbeat-interval-seconds=10`: kubelet's
//! watch is held its full `timeoutSeconds` (not ended after a second because the health flag
//! is stale), the hub dials the dead cloud a few times in all rather than once per request,
//! and a held watch ends once the cloud is healthy again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

/// YurtHub's heartbeat defaults, written out so that they win over the fast ones the test
/// launcher gives; the healthy threshold is 1 so the cloud's return is seen at one probe.
const DEFAULT_HEARTBEAT: &[&str] = &[
    "--heartbeat-interval-seconds=10",
    "--heartbeat-timeout-seconds=2",
    "--heartbeat-failed-retry=3",
    "--heartbeat-healthy-threshold=1",
];

/// A cloud with kubelet's pods and node, and a hub (default heartbeat) whose kubelet cache is
/// warm. The hub's start-up probe has just run when this returns; the next is ~10 s away.
fn warm() -> (Cloud, TempDir, Hub) {
    let cloud = Cloud::start();
    for name in ["web-1", "web-2"] {
        cloud.create(
            "pods",
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}
            }),
        );
    }
    cloud.create("nodes", json!({"metadata": {"name": "edge-1"}}));
    let dir = TempDir::new("offline-hold");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(DEFAULT_HEARTBEAT));
    for path in [
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
        "/api/v1/nodes/edge-1",
    ] {
        assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    }
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/web-1",
                "kubelet/nodes.v1.core/edge-1"
            ],
            Duration::from_secs(10)
        ),
        "cache not warm: {}",
        hub.logs()
    );
    (cloud, dir, hub)
}

/// One kubelet watch of pods: how long it lasted and whether its stream ended cleanly.
fn watch(hub_url: &str, timeout_seconds: u64) -> (Duration, bool) {
    let started = Instant::now();
    let (status, mut body) = stream(
        &format!("{hub_url}/api/v1/pods?watch=1&timeoutSeconds={timeout_seconds}"),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut rest = Vec::new();
    let clean = body.read_to_end(&mut rest).is_ok();
    (started.elapsed(), clean)
}

/// Polls the hub's health metric of `cloud` from now on; returns how long until it said
/// unhealthy (None when it did not within `limit`).
fn time_until_unhealthy(hub: &Hub, cloud: &Cloud, limit: Duration) -> JoinHandle<Option<Duration>> {
    let (url, series) = (format!("{}/metrics", hub.serve_url()), health_series(cloud));
    let since = Instant::now();
    thread::spawn(move || {
        let unhealthy = format!("{series} 0");
        eventually(limit, || {
            get(&url, "test").text().lines().any(|l| l == unhealthy)
        })
        .then(|| since.elapsed())
    })
}

#[test]
fn a_watch_is_held_its_full_timeout_when_the_cloud_dies_between_probes() {
    let (cloud, _dir, hub) = warm();
    cloud.stop();
    let flag = time_until_unhealthy(&hub, &cloud, Duration::from_secs(30));
    let (held, clean) = watch(&hub.url(), 3);
    let flag = flag.join().unwrap();
    eprintln!("connection refused: watch held {held:?}; health flag unhealthy after {flag:?}");
    assert!(
        held >= Duration::from_millis(2500) && held < Duration::from_secs(15),
        "a 3 s watch was held {held:?}: {}",
        hub.logs()
    );
    assert!(clean, "the held watch did not end cleanly");
    assert!(
        flag.is_some_and(|f| f <= held),
        "the hub still held the dead cloud healthy when the watch ended ({flag:?})"
    );

    // Held while the cloud is away, ended once a probe finds it back.
    let url = hub.url();
    let long = thread::spawn(move || watch(&url, 60));
    assert!(hub.wait_metric(IN_FLIGHT, 1.0, Duration::from_secs(10)));
    cloud.restart();
    let back = Instant::now();
    let (held, clean) = long.join().unwrap();
    assert!(clean, "the held watch did not end cleanly");
    assert!(
        back.elapsed() < Duration::from_secs(30) && held < Duration::from_secs(55),
        "the held watch ended {:?} after the cloud came back",
        back.elapsed()
    );
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(5)));
}

/// A plain listener on a stopped cloud's port that accepts each connection and closes it at
/// once, counting: the hub's dials at a dead cloud, made visible (a refused connection
/// leaves no trace anywhere a test can read).
struct DeadPort {
    dials: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DeadPort {
    fn open(addr: SocketAddr) -> DeadPort {
        let listener = TcpListener::bind(addr).expect("bind the stopped cloud's port");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let (dials, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (dials, stop) = (Arc::clone(&dials), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            dials.fetch_add(1, Ordering::SeqCst);
                            drop(conn);
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        DeadPort {
            dials,
            stop,
            thread: Some(thread),
        }
    }

    fn dials(&self) -> u64 {
        self.dials.load(Ordering::SeqCst)
    }
}

impl Drop for DeadPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_dead_cloud_is_dialled_a_few_times_not_once_per_request() {
    let (cloud, _dir, hub) = warm();
    cloud.stop();
    let dead = DeadPort::open(cloud.addr());
    // Like kubelet: a 3 s watch, watched again whenever it ends early, while the node's
    // status is read every 100 ms.
    let url = hub.url();
    let watches = thread::spawn(move || {
        let started = Instant::now();
        let mut runs = Vec::new();
        while started.elapsed() < Duration::from_secs(3) {
            runs.push(watch(&url, 3));
        }
        runs
    });
    let mut reads = 0;
    while !watches.is_finished() {
        let r = get(&format!("{}/api/v1/nodes/edge-1", hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{}", r.text());
        reads += 1;
        thread::sleep(Duration::from_millis(100));
    }
    let runs = watches.join().unwrap();
    let dials = dead.dials();
    eprintln!(
        "accept-and-close: {dials} dials at the dead cloud during {} watch(es) {runs:?} and {reads} reads",
        runs.len()
    );
    assert_eq!(
        runs.len(),
        1,
        "kubelet had to watch again: {runs:?}\n{}",
        hub.logs()
    );
    assert!(
        runs[0].0 >= Duration::from_millis(2500) && runs[0].1,
        "{runs:?}"
    );
    // The bound is structural, not a measure of speed: each of the two clients (the watch,
    // the reads) dials twice (a try and its retry: a connection closed at once may be a
    // stale pooled one) before its failure makes the server suspect; the probe round that
    // wakes dials 1 + failed_retry times back to back (`/readyz`, in lease mode too); a
    // periodic round that overlaps, once (an unhealthy server answers `/readyz` before it
    // is asked to renew the lease).
    let failed_retry: u64 = DEFAULT_HEARTBEAT
        .iter()
        .find_map(|f| f.strip_prefix("--heartbeat-failed-retry=")?.parse().ok())
        .expect("the test gives --heartbeat-failed-retry");
    let bound = 2 * 2 + (1 + failed_retry) + 1;
    assert!(
        dials <= bound,
        "the hub dialled the dead cloud {dials} times (at most {bound}) for {reads} reads and one watch"
    );
}

/// A TCP relay in front of the cloud that can accept and close the next few connections:
/// requests that fail in transport, while the cloud behind it is alive and answers the
/// probe (on a connection the hub already has).
struct Relay {
    addr: SocketAddr,
    /// Writes of the hub still to answer by closing their connection.
    refuse: Arc<AtomicU64>,
}

impl Relay {
    fn start(cloud: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let addr = listener.local_addr().unwrap();
        let refuse = Arc::new(AtomicU64::new(0));
        let refuse2 = Arc::clone(&refuse);
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let Ok(up) = std::net::TcpStream::connect(cloud) else {
                    continue;
                };
                // The hub's side: each write read may be the one to cut.
                let (mut from, mut to) = (conn.try_clone().unwrap(), up.try_clone().unwrap());
                let refuse = Arc::clone(&refuse2);
                thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    let take = |n: u64| n.checked_sub(1);
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        if refuse
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                            .is_ok()
                            || to.write_all(&buf[..n]).is_err()
                        {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                });
                let (mut from, mut to) = (up, conn);
                thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Relay { addr, refuse }
    }

    /// Closes the connection of each of the hub's next `n` writes (a new connection's
    /// handshake, or a request on a pooled one) before it reaches the cloud.
    fn fail_next(&self, n: u64) {
        self.refuse.store(n, Ordering::SeqCst);
    }
}

#[test]
fn a_write_goes_to_a_suspect_server_not_to_the_cache() {
    let cloud = Cloud::start();
    let relay = Relay::start(cloud.addr());
    let dir = TempDir::new("suspect-write");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&[
        &format!("--server-addr=https://{}", relay.addr),
        "--heartbeat-interval-seconds=60",
        "--heartbeat-timeout-seconds=20",
        "--heartbeat-failed-retry=3",
    ]));
    // The cloud answers everything, its probe too, after 3 s: a suspect server stays suspect
    // that long. A read fails in transport twice (its retry too): the server is suspect.
    // The hub's own watch of yurt-hub-cfg goes through the relay too: once it is open, the
    // two failures are the read's (under emulation it can start later than the test).
    assert!(
        cloud
            .wait_for_request(
                |r| r.path.ends_with("/configmaps") && r.query.contains("watch="),
                Duration::from_secs(60),
            )
            .is_some(),
        "the hub never watched yurt-hub-cfg: {}",
        hub.logs()
    );
    cloud.set_delay(Duration::from_secs(3));
    relay.fail_next(2);
    let read = call(
        "GET",
        &format!("{}/api/v1/namespaces/default/configmaps/absent", hub.url()),
        "curl/8",
        &[],
        None,
    );
    assert_ne!(
        read.status,
        404,
        "the read reached the cloud: {}",
        read.text()
    );
    // A write while the probe is under way goes to the cloud, which takes it.
    let created = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        KUBELET,
        &[("Content-Type", "application/json")],
        Some(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"written"}}"#),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(
        cloud.count(|r| r.method == "POST" && !r.is_hubs_own()),
        1,
        "the write was answered from the cache while the cloud was up: {}",
        hub.logs()
    );
}

#[test]
fn an_answer_slower_than_the_request_time_does_not_make_the_server_suspect() {
    let cloud = Cloud::start();
    let dir = TempDir::new("slow-answer");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&[
        "--heartbeat-interval-seconds=60",
        "--heartbeat-timeout-seconds=30",
    ]));
    // A live cloud slow over one request: `timeout=1s` gives it 16 s, it takes 20.
    cloud.set_delay(Duration::from_secs(20));
    let slow = get(
        &format!(
            "{}/api/v1/namespaces/default/configmaps?timeout=1s",
            hub.url()
        ),
        "curl/8",
    );
    cloud.set_delay(Duration::ZERO);
    assert!(slow.status >= 500, "{}", slow.text());
    // Connected, then slow: left to the periodic probe, not a failure to probe at once.
    assert_eq!(
        hub.log_lines(|l| l.contains("probing it now")),
        0,
        "{}",
        hub.logs()
    );
    assert_eq!(hub.metric("tinyhub_upstream_retries_total"), Some(0.0));
}
