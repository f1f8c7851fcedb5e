//! Issue 29: a relayed watch outlives its upstream. kubelet's pod watch keeps its connection
//! across a cloud outage whose history is intact (the outage's events arrive on the same
//! stream, from one resume at the last delivered resourceVersion, with no list), and across a
//! watch connection cut while the cloud stays up (nothing visible to the client). kube-proxy's
//! Service and EndpointSlice watches, served from the hub's pool caches, stay open across the
//! same outage and bring its changes.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::pool::{list_when_warm, service_in, slice};
use crate::support::{Cloud, RecordedRequest};

/// kubelet's scope of pods.
const NODE_PODS: &str = "fieldSelector=spec.nodeName%3Dedge-1";
/// How long the cloud stays away.
const OUTAGE: Duration = Duration::from_secs(20);
/// The hub's verdict that the cloud is back (1 s probes in tests) + the resume jitter (< 5 s)
/// + slack for a loaded machine.
const CATCH_UP: Duration = Duration::from_secs(2 + 5 + 10);

fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    })
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// A cloud with two of edge-1's pods and one elsewhere, and a hub in front of it.
fn cloud_and_hub(tag: &str) -> (Cloud, TempDir, Hub) {
    let cloud = Cloud::start();
    for (name, node) in [("web-1", "edge-1"), ("web-2", "edge-1"), ("db-1", "edge-2")] {
        cloud.create("pods", pod(name, node));
    }
    let dir = TempDir::new(tag);
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    (cloud, dir, hub)
}

/// kubelet as an informer: its pod list through the hub, then its watch from the list's
/// resourceVersion (bookmarks asked, a 10-minute timeout). The events arrive on the channel
/// as they are read; it disconnects when the stream ends or breaks.
fn kubelet_pods(hub: &Hub) -> Watcher {
    let list = get(&format!("{}/api/v1/pods?{NODE_PODS}", hub.url()), KUBELET);
    assert_eq!(list.status, 200, "{}", list.text());
    let list_rv = rv_of(&list.json());
    let url = format!(
        "{}/api/v1/pods?watch=true&resourceVersion={list_rv}&{NODE_PODS}\
         &allowWatchBookmarks=true&timeoutSeconds=600",
        hub.url()
    );
    watcher(&url, KUBELET, list_rv)
}

/// kube-proxy's User-Agent.
const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// kube-proxy's label selector (no headless Services, none another proxy serves), encoded.
const PROXY_SELECTOR: &str = "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";

/// kube-proxy as an informer of `path` (Services or EndpointSlices): its list through the
/// hub's pool cache, once that holds `name`, then its watch from the list's resourceVersion
/// with bookmarks.
fn kube_proxy_watch(hub: &Hub, path: &str, name: &str) -> Watcher {
    let mut list = Value::Null;
    let holds = eventually(Duration::from_secs(20), || {
        list = list_when_warm(hub, &format!("{path}?{PROXY_SELECTOR}"), KUBE_PROXY);
        list["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|o| o["metadata"]["name"] == name))
    });
    assert!(holds, "{path} without {name}: {list}");
    let list_rv = rv_of(&list);
    let url = format!(
        "{}{path}?{PROXY_SELECTOR}&watch=true&resourceVersion={list_rv}\
         &allowWatchBookmarks=true&timeoutSeconds=600",
        hub.url()
    );
    watcher(&url, KUBE_PROXY, list_rv)
}

/// A watch of `url` as `ua`, answered 200, read on a thread of its own.
fn watcher(url: &str, ua: &str, last_rv: u64) -> Watcher {
    let (status, body) = stream(url, ua);
    assert_eq!(status, 200, "{url}");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut events = Events::new(body);
        while let Some(event) = events.next_event() {
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    Watcher { rx, last_rv }
}

/// The client's side of a watch: its events, and the resourceVersion of the last event or
/// bookmark it read.
struct Watcher {
    rx: Receiver<Value>,
    last_rv: u64,
}

impl Watcher {
    /// The next event that is not a bookmark within `wait` (bookmarks move `last_rv` too);
    /// panics with the hub's log when the stream ended or nothing came.
    fn next_change(&mut self, wait: Duration, hub: &Hub) -> Value {
        let until = Instant::now() + wait;
        loop {
            let event = match self
                .rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no event within {wait:?}:\n{}", hub.logs())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the watch stream ended:\n{}", hub.logs())
                }
            };
            assert_ne!(
                event["type"], "ERROR",
                "an ERROR reached the client: {event}"
            );
            self.last_rv = rv_of(&event["object"]);
            if event["type"] != "BOOKMARK" {
                return event;
            }
        }
    }

    /// Reads bookmarks only for `wait`: the watch stays open and brings no change.
    fn quiet_for(&mut self, wait: Duration, hub: &Hub) {
        let until = Instant::now() + wait;
        loop {
            match self
                .rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Err(RecvTimeoutError::Timeout) => return,
                Ok(event) if event["type"] == "BOOKMARK" => self.last_rv = rv_of(&event["object"]),
                Ok(event) => panic!("an event while the cloud was away: {event}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the watch ended with the outage:\n{}", hub.logs())
                }
            }
        }
    }

    /// Whether the stream is still open (read up to now; no ERROR among what it read).
    fn open(&self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(event) => assert_ne!(event["type"], "ERROR", "{event}"),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }
}

/// The event's type and object name.
fn what(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap_or("").to_owned(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

/// A pod watch of kubelet's scope sent to the cloud.
fn node_pod_watch(r: &RecordedRequest) -> bool {
    r.path == "/api/v1/pods" && r.query.contains("watch=") && r.query.contains(NODE_PODS)
}

/// A list of pods sent to the cloud.
fn pod_list(r: &RecordedRequest) -> bool {
    r.path == "/api/v1/pods" && r.method == "GET" && !r.query.contains("watch=")
}

/// The `resourceVersion` a recorded request asked for.
fn asked_rv(r: &RecordedRequest) -> Option<u64> {
    r.query
        .split('&')
        .find_map(|p| p.strip_prefix("resourceVersion="))
        .and_then(|rv| rv.parse().ok())
}

#[test]
fn watches_keep_their_connection_across_an_outage_with_history() {
    let (cloud, _dir, hub) = cloud_and_hub("watch-resume-outage");
    // The apiserver bookmarks its watchers (about once a minute; here faster).
    cloud.set_bookmark_interval(Some(Duration::from_secs(2)));
    let mut watch = kubelet_pods(&hub);
    // kube-proxy's Services and EndpointSlices, from the hub's pool caches.
    cloud.create("services", service_in("shop", "web", "10.96.0.10"));
    cloud.create("endpointslices", slice("web-abc", "web", "10.244.1.5"));
    let mut proxy_watches = [
        kube_proxy_watch(&hub, "/api/v1/services", "web"),
        kube_proxy_watch(&hub, "/apis/discovery.k8s.io/v1/endpointslices", "web-abc"),
    ];
    let changed = rv_of(&cloud.patch(
        "pods",
        "default",
        "web-1",
        json!({"metadata": {"labels": {"v": "1"}}}),
    ));
    let event = watch.next_change(Duration::from_secs(10), &hub);
    assert_eq!(what(&event), ("MODIFIED".into(), "web-1".into()));
    assert_eq!(rv_of(&event["object"]), changed);
    hub.wait_cache_quiet();

    cloud.stop();
    let down = Instant::now();
    let added = [
        rv_of(&cloud.create("pods", pod("web-3", "edge-1"))),
        rv_of(&cloud.create("pods", pod("web-4", "edge-1"))),
    ];
    let modified = rv_of(&cloud.patch(
        "pods",
        "default",
        "web-2",
        json!({"metadata": {"labels": {"v": "2"}}}),
    ));
    cloud.delete("pods", "default", "web-1");
    // Not on kubelet's node: never its business.
    cloud.create("pods", pod("db-2", "edge-2"));
    // kube-proxy's business: a Service and an EndpointSlice changed.
    let proxy_changed = [
        rv_of(&cloud.patch(
            "services",
            "shop",
            "web",
            json!({"metadata": {"labels": {"v": "2"}}}),
        )),
        rv_of(&cloud.patch(
            "endpointslices",
            "shop",
            "web-abc",
            json!({"endpoints": [{"addresses": ["10.244.1.6"], "conditions": {"ready": true}}]}),
        )),
    ];
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "the hub never found the cloud down:\n{}",
        hub.logs()
    );
    // Held through the outage: no change, and the stream stays open.
    watch.quiet_for(OUTAGE.saturating_sub(down.elapsed()), &hub);
    let before = watch.last_rv;

    cloud.reset_requests();
    cloud.restart();
    let back = Instant::now();
    let mut got = Vec::new();
    let mut last = before;
    while got.len() < 4 {
        let event = watch.next_change(CATCH_UP.saturating_sub(back.elapsed()), &hub);
        let rv = rv_of(&event["object"]);
        assert!(rv > last, "events out of order: {rv} after {last}: {event}");
        last = rv;
        got.push((what(&event), rv));
    }
    let names: Vec<(String, String)> = got.iter().map(|(w, _)| w.clone()).collect();
    assert_eq!(
        names,
        [
            ("ADDED".into(), "web-3".into()),
            ("ADDED".into(), "web-4".into()),
            ("MODIFIED".into(), "web-2".into()),
            ("DELETED".into(), "web-1".into()),
        ]
    );
    assert_eq!(got[0].1, added[0]);
    assert_eq!(got[1].1, added[1]);
    assert_eq!(got[2].1, modified);

    // One resume, from the last delivered resourceVersion; no list.
    let watches: Vec<RecordedRequest> = cloud
        .requests()
        .into_iter()
        .filter(node_pod_watch)
        .collect();
    assert_eq!(
        watches.len(),
        1,
        "pod watches after the outage: {watches:#?}"
    );
    assert_eq!(
        asked_rv(&watches[0]),
        Some(before),
        "{:?}",
        watches[0].query
    );
    assert_eq!(cloud.count(pod_list), 0, "the hub listed pods");
    assert!(
        hub.wait_log_line(
            |l| l.contains("watch resumed resource=\"pods\" component=\"kubelet\"")
                && l.contains("caught_up=4"),
            // Written once the catch-up window closed: at the next bookmark.
            Duration::from_secs(10)
        ),
        "no resume line:\n{}",
        hub.logs()
    );
    assert!(
        hub.metric("tinyhub_watch_resumed_total{resource=\"pods\"}")
            .is_some_and(|n| n >= 1.0),
        "{}",
        get(&format!("{}/metrics", hub.serve_url()), "test").text()
    );

    // kube-proxy's watches bring the outage's changes on the connections they had, with no
    // ERROR (which would make it list again); the streams are still open, and none of its
    // requests reached the cloud (the pool caches served its one list and watch of each).
    for ((watch, name), rv) in proxy_watches
        .iter_mut()
        .zip(["web", "web-abc"])
        .zip(proxy_changed)
    {
        let event = watch.next_change(CATCH_UP, &hub);
        assert_eq!(what(&event), ("MODIFIED".into(), name.into()), "{event}");
        assert_eq!(rv_of(&event["object"]), rv);
        assert!(watch.open(), "kube-proxy's {name} watch ended");
    }
    assert_eq!(
        cloud.count(|r| r.user_agent == KUBE_PROXY),
        0,
        "{:#?}",
        cloud.requests()
    );
}

#[test]
fn a_cut_watch_connection_is_resumed_without_the_client_noticing() {
    let (cloud, _dir, hub) = cloud_and_hub("watch-resume-cut");
    let mut watch = kubelet_pods(&hub);
    let list_rv = watch.last_rv;
    assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(10)));
    assert_eq!(cloud.count(node_pod_watch), 1, "{:#?}", cloud.requests());
    assert!(cloud.cut_watches("pods") >= 1, "no pod watch to cut");
    // The change is made once the hub watches again (made sooner, it could still leave on
    // the cut connection before its end).
    assert!(
        eventually(Duration::from_secs(10), || cloud.count(node_pod_watch) == 2),
        "no resume:\n{}",
        hub.logs()
    );
    let changed = rv_of(&cloud.patch(
        "pods",
        "default",
        "web-2",
        json!({"metadata": {"labels": {"v": "cut"}}}),
    ));
    let event = watch.next_change(Duration::from_secs(10), &hub);
    assert_eq!(what(&event), ("MODIFIED".into(), "web-2".into()));
    assert_eq!(rv_of(&event["object"]), changed);

    // The client's own watch, then one resume from where it was.
    let watches: Vec<RecordedRequest> = cloud
        .requests()
        .into_iter()
        .filter(node_pod_watch)
        .collect();
    assert_eq!(watches.len(), 2, "pod watches: {:#?}", cloud.requests());
    assert_eq!(
        asked_rv(&watches[1]),
        Some(list_rv),
        "{:?}",
        watches[1].query
    );
    assert_eq!(
        cloud.count(pod_list),
        1,
        "the hub listed pods besides the client"
    );
    let ready = get(&format!("{}/v1/readyz", hub.serve_url()), "curl/8");
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(
        !hub.logs().contains("no cloud server is healthy"),
        "the cut was taken for an outage:\n{}",
        hub.logs()
    );
}
