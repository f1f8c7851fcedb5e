//! What a leader hub serves its followers, and what the node-local caches serve (review 16b
//! items 1 and 8): a leader whose feed fails, or that reaches no cloud, sends its followers
//! to their own cloud link instead of serving them frozen data; servicetopology's index
//! reads Services from the cloud while the pool cache has none.
//!
//! The leader `edge-1` talks to its own apiserver (`Cloud::start_peer`: the same data, its
//! own faults), so that its feed can fail while the followers' link works.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::{
    self, list_when_warm, patience, service, set_leader_config, set_leader_config_scoped,
};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
/// The followers' and leader's retry pause (`--heartbeat-interval-seconds`).
const RETRY: &str = "--heartbeat-interval-seconds=3";

/// The names in a list.
fn names(list: &Value) -> Vec<String> {
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

/// Whether kube-proxy's Services reflector on `hub` (a list, then a watch from it, again
/// after each end) comes to know Service `name` within `timeout`.
fn kube_proxy_sees(hub: &Hub, name: &str, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        let reply = get(&format!("{}{SERVICES}", hub.url()), KUBE_PROXY);
        if reply.status != 200 {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let list = reply.json();
        if names(&list).iter().any(|n| n == name) {
            return true;
        }
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0");
        let url = format!(
            "{}{SERVICES}?watch=true&resourceVersion={rv}&timeoutSeconds=5",
            hub.url()
        );
        let (status, body) = stream(&url, KUBE_PROXY);
        if status != 200 {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let mut events = Events::new(body);
        while let Some(event) = events.next_event() {
            if event["type"] == "ADDED" && event["object"]["metadata"]["name"] == name {
                return true;
            }
        }
    }
    false
}

/// The cloud with one Service, the pool's ConfigMap naming `edge-1`, and the apiserver the
/// leader talks to.
fn clouds() -> (Cloud, Cloud) {
    let cloud = Cloud::start();
    cloud.create("services", service("web", "10.96.0.10"));
    set_leader_config(&cloud, &[1], true);
    let leaders_cloud = cloud.start_peer();
    (cloud, leaders_cloud)
}

/// A leader (`edge-1`, on `leaders_cloud`) and a follower (`edge-2`, on `cloud`), the
/// follower's Services read through the leader.
struct TwoNodes {
    leader: Hub,
    follower: Hub,
    _dirs: (TempDir, TempDir),
}

impl TwoNodes {
    fn start(cloud: &Cloud, leaders_cloud: &Cloud, tag: &str) -> TwoNodes {
        let port = pool::free_port(2);
        let dirs = (
            TempDir::new(&format!("{tag}-1")),
            TempDir::new(&format!("{tag}-2")),
        );
        let leader =
            Hub::start(&pool::node_spec(leaders_cloud, dirs.0.path(), 1, port).with(&[RETRY]));
        assert!(
            leader.wait_log("role=multiplexer addr=", patience(20)),
            "{}",
            leader.logs()
        );
        list_when_warm(&leader, SERVICES, KUBE_PROXY);
        list_when_warm(&leader, SLICES, KUBE_PROXY);
        let follower = Hub::start(&pool::node_spec(cloud, dirs.1.path(), 2, port).with(&[RETRY]));
        list_when_warm(&follower, SERVICES, KUBE_PROXY);
        let nodes = TwoNodes {
            leader,
            follower,
            _dirs: dirs,
        };
        assert!(
            nodes
                .leader
                .wait_metric_at_least(&nodes.served("200"), 1.0, patience(10)),
            "the follower reads through the leader: {}",
            nodes.follower.logs()
        );
        nodes
    }

    /// The leader's count of the follower's requests answered `code`.
    fn served(&self, code: &str) -> String {
        format!("tinyhub_multiplexer_requests_total{{follower=\"edge-2\",code=\"{code}\"}}")
    }

    /// That count now.
    fn count(&self, code: &str) -> f64 {
        self.leader.metric(&self.served(code)).unwrap_or(0.0)
    }

    /// The follower comes to see a Service created now, and the leader then stops serving it
    /// (its 200s stop growing) and refuses it (503s).
    fn follower_reads_around_the_leader(&self, cloud: &Cloud) {
        cloud.create("services", service("late", "10.96.0.12"));
        assert!(
            kube_proxy_sees(&self.follower, "late", patience(30)),
            "the follower's kube-proxy never saw the new Service: {}",
            self.follower.logs()
        );
        assert!(
            self.leader
                .wait_metric_at_least(&self.served("503"), 1.0, patience(5)),
            "the leader sent the follower away: {}",
            self.leader.logs()
        );
        let before = self.count("200");
        // Several of the follower's retry pauses (3 s), less than its health round (20 s).
        std::thread::sleep(Duration::from_secs(12));
        assert_eq!(
            self.count("200"),
            before,
            "the leader still serves the follower: {}",
            self.follower.logs()
        );
    }
}

#[test]
fn a_leader_whose_feed_fails_sends_its_followers_to_the_cloud() {
    let (cloud, leaders_cloud) = clouds();
    // The leader's feeder's watches end at once, empty: it resumes them every retry pause.
    leaders_cloud.misanswer_watch(SERVICES, 1_000_000, &[]);
    let nodes = TwoNodes::start(&cloud, &leaders_cloud, "pool-serve-frozen");

    // The leader's apiserver now refuses its feeder: its next watch ends with a 410 and each
    // list after it is a 500. Its feed fails: its own kube-proxy is forwarded (500).
    let expired: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}
"#;
    leaders_cloud.misanswer(SERVICES, 1_000_000, 500, br#"{"kind":"Status","code":500}"#);
    leaders_cloud.misanswer_watch(SERVICES, 1, &[expired]);
    let leaders_url = format!("{}{SERVICES}", nodes.leader.url());
    assert!(
        eventually(patience(30), || get(&leaders_url, KUBE_PROXY).status == 500),
        "the leader's feed does not fail: {}",
        nodes.leader.logs()
    );
    nodes.follower_reads_around_the_leader(&cloud);
}

#[test]
fn a_leader_that_reaches_no_cloud_sends_its_followers_to_their_own() {
    let (cloud, leaders_cloud) = clouds();
    let nodes = TwoNodes::start(&cloud, &leaders_cloud, "pool-serve-offline");
    leaders_cloud.stop();
    // The leader's health check finds its apiserver gone.
    assert!(
        nodes
            .leader
            .wait_log("no cloud server is healthy", patience(30)),
        "{}",
        nodes.leader.logs()
    );
    nodes.follower_reads_around_the_leader(&cloud);
}

#[test]
fn servicetopology_reads_services_from_the_cloud_while_the_pool_cache_has_none() {
    let cloud = Cloud::start();
    cloud.create("services", service("web", "10.96.0.10"));
    set_leader_config(&cloud, &[], false);
    let dir = TempDir::new("pool-serve-topology");
    let port = pool::free_port(1);
    let hub = Hub::start(
        &pool::node_spec(&cloud, dir.path(), 1, port)
            .with(&[RETRY, "--enable-resource-filter=true"]),
    );
    list_when_warm(&hub, SERVICES, KUBE_PROXY);
    let own = |r: &crate::support::RecordedRequest| {
        r.path == SERVICES && r.is_watch() && r.user_agent.starts_with("tinyhub/")
    };
    // The index reads the pool cache: no Services watch of its own.
    assert!(cloud.wait_for_watchers("services", 1, patience(10)));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        cloud.count(own),
        0,
        "servicetopology watches the cloud itself"
    );

    // Services leave the pool-scope set: the cache serves none, and the index keeps itself
    // with its own list and watch.
    set_leader_config_scoped(&cloud, &[], false, "discovery.k8s.io/v1/endpointslices");
    assert!(
        eventually(patience(15), || cloud.count(own) >= 1),
        "servicetopology's index is left frozen: {}",
        hub.logs()
    );
}

#[test]
fn a_leader_names_a_configmap_ip_that_is_not_its_node_ip_and_retries_a_taken_port() {
    let cloud = Cloud::start();
    // The ConfigMap names edge-1 at 127.0.0.9; its --node-ip is 127.0.0.2.
    let mut config = pool::leader_config(&[1], true);
    config["data"]["leaders"] = json!("edge-1/127.0.0.9");
    cloud.create("configmaps", config);
    let port = pool::free_port(1);
    // Something else holds the multiplexer port on the node's IP.
    let squatter = std::net::TcpListener::bind((pool::node_ip(1), port)).expect("bind");
    let dir = TempDir::new("pool-serve-bind");
    let hub = Hub::start(&pool::node_spec(&cloud, dir.path(), 1, port));
    assert!(
        hub.wait_log(
            "names this node a leader at 127.0.0.9, but --node-ip is 127.0.0.2",
            patience(20)
        ),
        "{}",
        hub.logs()
    );
    assert!(
        hub.wait_log("cannot serve the multiplexer port on", patience(5)),
        "{}",
        hub.logs()
    );
    // The port comes free: the hub serves it at its next try (every 20 s).
    drop(squatter);
    assert!(
        hub.wait_log("the multiplexer port is open after", patience(30)),
        "{}",
        hub.logs()
    );
    let logs = hub.logs();
    assert!(logs.contains("role=multiplexer addr=127.0.0.2:"), "{logs}");
    assert!(
        logs.contains("checks followers' certificates against the cluster CA: CN="),
        "the CA followers are checked against is named: {logs}"
    );
}
