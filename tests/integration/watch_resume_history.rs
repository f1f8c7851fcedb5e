//! Issue 29 item 2 and 3: an outage that outlasts the cloud's history. kubelet's pod watches
//! through the hub stay open; the hub lists the scope once for both (not once per watch) and
//! sends each the difference against kubelet's disk cache: the added and changed pods as
//! listed, the deleted one last at the list's resourceVersion, a bookmark there, and no
//! ERROR; then it watches from the list's resourceVersion, on the same stream. kube-proxy's
//! Service and EndpointSlice watches, served from the hub's pool caches, get the events that
//! turn their view into the cloud's, on the same streams, with no ERROR.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::feed::Feed;
use crate::support::hub::*;
use crate::support::pool::{list_when_warm, service_in, slice};

/// kubelet's pod scope, URL-encoded as client-go sends it.
const SCOPE: &str = "fieldSelector=spec.nodeName%3Dedge-1";
/// How long the cloud stays away.
const OUTAGE: Duration = Duration::from_secs(8);
/// How long the difference may take after the restart: the health checker's verdict
/// (1 s probes in tests), the jitter (< 5 s), the gather (1 s), the list, and slack.
const CATCH_UP: Duration = Duration::from_secs(25);
/// kube-proxy's User-Agent.
const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// kube-proxy's label selector (no headless Services, none another proxy serves), encoded.
const PROXY_SELECTOR: &str = "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";

fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    })
}

fn rv_of(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// (type, name, resourceVersion) of an event.
fn summary(event: &Value) -> (String, String, String) {
    let object = &event["object"];
    (
        event["type"].as_str().unwrap_or_default().to_owned(),
        object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        rv_of(object),
    )
}

/// kube-proxy as an informer of `path` (Services or EndpointSlices): its list through the
/// hub's pool cache, then its watch from the list's resourceVersion with bookmarks.
fn kube_proxy_feed(hub: &Hub, path: &str) -> Feed {
    let list = list_when_warm(hub, &format!("{path}?{PROXY_SELECTOR}"), KUBE_PROXY);
    let rv = rv_of(&list);
    Feed::open_as(
        &format!(
            "{}{path}?{PROXY_SELECTOR}&watch=true&resourceVersion={rv}\
             &allowWatchBookmarks=true&timeoutSeconds=600",
            hub.url()
        ),
        KUBE_PROXY,
    )
}

fn entry(kind: &str, name: &str, rv: &str) -> (String, String, String) {
    (kind.to_owned(), name.to_owned(), rv.to_owned())
}

#[test]
fn an_outage_past_the_history_gives_the_difference_and_one_list_per_scope() {
    let cloud = Cloud::start();
    for name in ["keep", "change", "gone"] {
        cloud.create("pods", pod(name, "edge-1"));
    }
    cloud.create("pods", pod("elsewhere", "edge-2"));
    for name in ["web", "db"] {
        cloud.create("services", service_in("shop", name, "10.96.0.10"));
        let slice_name = format!("{name}-abc");
        cloud.create("endpointslices", slice(&slice_name, name, "10.244.1.5"));
    }
    let dir = TempDir::new("watch-resume-history");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // kube-proxy's informers of Services and EndpointSlices, from the hub's pool caches.
    let proxy_feeds = [
        kube_proxy_feed(&hub, "/api/v1/services"),
        kube_proxy_feed(&hub, "/apis/discovery.k8s.io/v1/endpointslices"),
    ];

    // kubelet as an informer: its list through the hub (cached: the difference's
    // baseline), then two watches of that scope from the list's resourceVersion.
    let list = get(&format!("{}/api/v1/pods?{SCOPE}", hub.url()), KUBELET);
    assert_eq!(list.status, 200);
    let listed_rv = rv_of(&list.json());
    let watch_url = format!(
        "{}/api/v1/pods?{SCOPE}&watch=true&resourceVersion={listed_rv}&allowWatchBookmarks=true&timeoutSeconds=600",
        hub.url()
    );
    let feeds = [Feed::open(&watch_url), Feed::open(&watch_url)];
    assert!(cloud.wait_for_watchers("pods", 2, Duration::from_secs(10)));
    let pods_dir = dir.path().join("cache/kubelet/pods.v1.core/default");
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/keep",
                "kubelet/pods.v1.core/default/change",
                "kubelet/pods.v1.core/default/gone",
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();

    // The outage: two pods made, one changed, one deleted, one made on another node.
    cloud.stop();
    let stopped = std::time::Instant::now();
    let new_1 = cloud.create("pods", pod("new-1", "edge-1"));
    let new_2 = cloud.create("pods", pod("new-2", "edge-1"));
    let mut change = cloud.get("pods", "default", "change").unwrap();
    change["metadata"]["labels"]["app"] = json!("changed");
    let changed = cloud.update("pods", change);
    cloud.delete("pods", "default", "gone");
    cloud.create("pods", pod("elsewhere-2", "edge-2"));
    // For kube-proxy: a Service and an EndpointSlice changed, one of each made, one deleted.
    let proxy_expected = [
        [
            entry(
                "MODIFIED",
                "web",
                &rv_of(&cloud.patch(
                    "services",
                    "shop",
                    "web",
                    json!({"metadata": {"labels": {"v": "2"}}}),
                )),
            ),
            entry(
                "ADDED",
                "cache",
                &rv_of(&cloud.create("services", service_in("shop", "cache", "10.96.0.12"))),
            ),
        ],
        [
            entry(
                "MODIFIED",
                "web-abc",
                &rv_of(&cloud.patch(
                    "endpointslices",
                    "shop",
                    "web-abc",
                    json!({"endpoints": [{"addresses": ["10.244.1.6"], "conditions": {"ready": true}}]}),
                )),
            ),
            entry(
                "ADDED",
                "cache-abc",
                &rv_of(&cloud.create("endpointslices", slice("cache-abc", "cache", "10.244.1.7"))),
            ),
        ],
    ];
    cloud.delete("services", "shop", "db");
    cloud.delete("endpointslices", "shop", "db-abc");
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    // An outage of some seconds (every watch's first resume has failed and waits for the
    // cloud), after which the history is gone: a watch from before it meets 410.
    std::thread::sleep(OUTAGE.saturating_sub(stopped.elapsed()));
    cloud.compact();
    cloud.reset_requests();
    cloud.restart();

    let mut list_rv = String::new();
    let mut watches_added = 0;
    for feed in &feeds {
        // Added and changed pods as listed, with the cloud's own resourceVersions (in the
        // list's order, which is the store's key order). A watch whose sibling's difference
        // reached kubelet's cache first finds the new pods there already, newer than what
        // it was sent, and sends them as MODIFIED: an informer upserts either. The round's
        // leader sends ADDED, so one of the two watches does.
        let mut first: BTreeSet<_> = (0..3)
            .map(|_| summary(&feed.next(CATCH_UP, &hub)))
            .collect();
        let added = [
            entry("ADDED", "new-1", &rv_of(&new_1)),
            entry("ADDED", "new-2", &rv_of(&new_2)),
        ];
        if added.iter().all(|e| first.contains(e)) {
            watches_added += 1;
        } else {
            first = first
                .into_iter()
                .map(|(kind, name, rv)| match name.as_str() {
                    "new-1" | "new-2" if kind == "MODIFIED" => ("ADDED".to_owned(), name, rv),
                    _ => (kind, name, rv),
                })
                .collect();
        }
        let expected: BTreeSet<_> = [
            added[0].clone(),
            added[1].clone(),
            entry("MODIFIED", "change", &rv_of(&changed)),
        ]
        .into();
        assert_eq!(first, expected, "{}", hub.logs());
        // The deletion last, at the list's resourceVersion; then a bookmark there.
        let deleted = feed.next(CATCH_UP, &hub);
        let (kind, name, rv) = summary(&deleted);
        assert_eq!((kind.as_str(), name.as_str()), ("DELETED", "gone"));
        assert_eq!(deleted["object"]["kind"], "Pod");
        assert!(rv.parse::<u64>().unwrap() >= rv_of(&changed).parse::<u64>().unwrap());
        let bookmark = feed.next(CATCH_UP, &hub);
        assert_eq!(summary(&bookmark), entry("BOOKMARK", "", &rv));
        if list_rv.is_empty() {
            list_rv = rv;
        } else {
            assert_eq!(rv, list_rv, "both watches had the same list");
        }
    }
    assert!(watches_added >= 1, "the leader sends the new pods as ADDED");

    // Then the hub watches from the list's resourceVersion, on the same streams.
    let after = cloud.create("pods", pod("after", "edge-1"));
    for feed in &feeds {
        assert_eq!(
            summary(&feed.next(CATCH_UP, &hub)),
            entry("ADDED", "after", &rv_of(&after))
        );
        assert!(feed.quiet(Duration::from_millis(500)).is_none());
    }

    // The cloud saw: one resume per watch (410), exactly one pod list of the scope for both,
    // and one watch per stream from the list's resourceVersion; no ERROR went out (above).
    let pod_requests = |pred: &dyn Fn(&str) -> bool| {
        cloud.count(|r| {
            r.path == "/api/v1/pods" && r.query.contains("spec.nodeName") && pred(&r.query)
        })
    };
    let from = |rv: &str| format!("resourceVersion={rv}&");
    let from_old = from(&listed_rv);
    let from_list = from(&list_rv);
    assert_eq!(
        pod_requests(&|q| q.contains("watch=") && (q.to_owned() + "&").contains(&from_old)),
        2,
        "{:#?}",
        cloud.requests()
    );
    assert_eq!(
        pod_requests(&|q| !q.contains("watch=")),
        1,
        "one list for the scope: {:#?}",
        cloud.requests()
    );
    assert_eq!(
        pod_requests(&|q| q.contains("watch=") && (q.to_owned() + "&").contains(&from_list)),
        2,
        "{:#?}",
        cloud.requests()
    );

    // kubelet's cache holds what the cloud holds on edge-1, refreshed by the events.
    let names = || -> BTreeSet<String> {
        std::fs::read_dir(&pods_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let cloud_names: BTreeSet<String> = ["keep", "change", "new-1", "new-2", "after"]
        .map(str::to_owned)
        .into();
    assert!(
        eventually(Duration::from_secs(10), || names() == cloud_names),
        "{:?}",
        names()
    );
    assert_eq!(
        hub.metric("tinyhub_watch_relists_total{resource=\"pods\"}"),
        Some(1.0)
    );
    // Four events for each of the two watches.
    assert_eq!(
        hub.metric("tinyhub_watch_events_synthesized_total{resource=\"pods\"}"),
        Some(8.0)
    );

    // kube-proxy's streams got the events that turn their view into the cloud's: the
    // changed and the made object at the cloud's resourceVersions, and the deleted one
    // (which an informer that still holds it drops); no ERROR, the streams are still open,
    // and none of its requests reached the cloud (the pool caches served them all).
    for ((feed, expected), gone) in proxy_feeds.iter().zip(proxy_expected).zip(["db", "db-abc"]) {
        let got: BTreeSet<_> = (0..3)
            .map(|_| {
                let (kind, name, rv) = summary(&feed.next_change(CATCH_UP, &hub));
                // The deletion's resourceVersion is the cache's, not one the test knows.
                if kind == "DELETED" {
                    (kind, name, String::new())
                } else {
                    (kind, name, rv)
                }
            })
            .collect();
        let mut want: BTreeSet<_> = expected.into();
        want.insert(entry("DELETED", gone, ""));
        assert_eq!(got, want, "{}", hub.logs());
        assert!(feed.still_open(), "kube-proxy's watch ended");
    }
    assert_eq!(
        cloud.count(|r| r.user_agent == KUBE_PROXY),
        0,
        "{:#?}",
        cloud.requests()
    );
}
