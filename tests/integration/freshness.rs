//! Issue 32 item 3, freshness you can see: when each cache last heard the cloud's word (a
//! list, an object, an event or a bookmark) as `tinyhub_cache_last_sync_timestamp_seconds`
//! and lines in `/v1/readyz?verbose`; answers served from a cache say how old they are
//! (`X-Tinyhub-Cache-Age`), relayed ones do not; the age carries on across a restart offline
//! from `<cache>/.synced`.

use std::io::Read as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::service_in;

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// kubelet's scope of pods.
const NODE_PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";
const CONFIGMAP: &str = "/api/v1/namespaces/default/configmaps/settings";
const AGE: &str = "X-Tinyhub-Cache-Age";
const PODS_SYNCED: &str =
    "tinyhub_cache_last_sync_timestamp_seconds{component=\"kubelet\",resource=\"pods.v1.core\"}";
const POOL_SYNCED: &str = "tinyhub_pool_cache_last_sync_timestamp_seconds{resource=\"services\"}";

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A cloud with one pod on edge-1, a ConfigMap and a Service, bookmarking every second.
fn cloud() -> Cloud {
    let cloud = Cloud::start();
    cloud.set_bookmark_interval(Some(Duration::from_secs(1)));
    cloud.create(
        "pods",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}
        }),
    );
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    );
    cloud.create("services", service_in("shop", "web", "10.96.0.10"));
    cloud
}

/// The age an answer says, in seconds; None without the header.
fn age_of(reply: &Reply) -> Option<u64> {
    reply.header(AGE).map(|v| {
        v.parse()
            .unwrap_or_else(|e| panic!("{AGE}: {v:?} is not seconds: {e}"))
    })
}

/// kube-proxy's Services list from the pool cache, once it is warm.
fn pool_list(hub: &Hub) -> Reply {
    let url = format!("{}/api/v1/services", hub.url());
    let mut reply = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            let r = get(&url, KUBE_PROXY);
            let ok = r.status == 200;
            reply = Some(r);
            ok
        }),
        "the Services cache never warmed: {}",
        hub.logs()
    );
    reply.unwrap()
}

#[test]
fn the_sync_gauge_and_readyz_move_with_bookmarks_while_watches_are_idle() {
    let cloud = cloud();
    let dir = TempDir::new("freshness-gauge");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let before = unix_now().floor();

    let list = get(&format!("{}{NODE_PODS}", hub.url()), KUBELET);
    assert_eq!(list.status, 200);
    assert_eq!(age_of(&list), None, "a relayed answer carries no age");
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // kubelet's watch, resumable, without bookmarks asked: the hub asks the cloud for them
    // and the client never sees one, but the cache still hears the cloud through them. It
    // ends at its timeout, after the checks below, and is then read whole.
    let (status, mut body) = stream(
        &format!(
            "{}{NODE_PODS}&watch=true&resourceVersion={rv}&timeoutSeconds=20",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut first = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            first = hub.metric(PODS_SYNCED);
            first.is_some()
        }),
        "no {PODS_SYNCED}: {}",
        hub.logs()
    );
    let first = first.unwrap();
    assert!(
        first >= before && first <= unix_now(),
        "{first} not in [{before}, now]"
    );
    // Nothing changes in the cloud: only bookmarks move it.
    assert!(
        eventually(Duration::from_secs(10), || hub
            .metric(PODS_SYNCED)
            .is_some_and(|v| v >= first + 2.0)),
        "the gauge stood at {first} while bookmarks came: {}",
        hub.logs()
    );

    // A pool-local list says its age; the pool cache has its own gauge and line.
    let services = pool_list(&hub);
    assert!(age_of(&services).is_some(), "{:?}", services.headers);
    assert!(
        eventually(Duration::from_secs(10), || hub
            .metric(POOL_SYNCED)
            .is_some()),
        "{}",
        hub.logs()
    );

    let ready = get(&format!("{}/v1/readyz?verbose", hub.serve_url()), "curl/8");
    let text = ready.text();
    assert_eq!(ready.status, 200, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("[+]synced kubelet/pods.v1.core "))
        .unwrap_or_else(|| panic!("no line for kubelet's pods: {text}"));
    assert!(line.ends_with("s ago"), "{line}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("[+]synced pool/services.v1.core ") && l.ends_with("s ago")),
        "{text}"
    );
    assert!(text.ends_with("readyz check passed\n"), "{text}");

    // The hub's Services watch hangs (open, silent): the pool cache's gauge stops.
    cloud.freeze_watches("services", "system:node:edge-1", true);
    std::thread::sleep(Duration::from_secs(2));
    let frozen = hub.metric(POOL_SYNCED).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let later = hub.metric(POOL_SYNCED).unwrap();
    assert!(later <= frozen + 1.0, "{frozen} → {later} while frozen");
    cloud.freeze_watches("services", "system:node:edge-1", false);
    assert!(
        eventually(Duration::from_secs(15), || hub
            .metric(POOL_SYNCED)
            .is_some_and(|v| v >= later + 2.0)),
        "the pool cache's gauge never moved again: {}",
        hub.logs()
    );
    let mut seen = String::new();
    body.read_to_string(&mut seen)
        .expect("the watch ends at its timeout");
    assert!(
        !seen.contains("BOOKMARK"),
        "kubelet got bookmarks it did not ask for: {seen}"
    );
}

/// kubelet reads its pods and a ConfigMap through `hub`, and they are cached.
fn warm_kubelet(hub: &Hub) {
    for path in [NODE_PODS, CONFIGMAP] {
        let reply = get(&format!("{}{path}", hub.url()), KUBELET);
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(age_of(&reply), None, "{path}: relayed, so no age");
    }
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/web",
                "kubelet/configmaps.v1.core/default/settings"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
}

/// The ages of an offline get, list and held watch, each at least `since` seconds.
fn offline_ages(hub: &Hub, since: u64) -> [u64; 3] {
    let url = |p: &str| format!("{}{p}", hub.url());
    let get_ = get(&url(CONFIGMAP), KUBELET);
    let list = get(&url(NODE_PODS), KUBELET);
    // Held offline until its timeout.
    let watch = get(
        &url(&format!("{NODE_PODS}&watch=true&timeoutSeconds=1")),
        KUBELET,
    );
    let mut ages = [0; 3];
    for (i, (what, reply)) in [("get", &get_), ("list", &list), ("watch", &watch)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(reply.status, 200, "{what}: {}", reply.text());
        let age = age_of(reply).unwrap_or_else(|| panic!("{what}: no {AGE}: {:?}", reply.headers));
        assert!(age >= since, "{what}: age {age} < {since} s of outage");
        ages[i] = age;
    }
    ages
}

/// kubelet's GET of its node through `hub`.
fn node_get(hub: &Hub) -> Reply {
    get(&format!("{}/api/v1/nodes/edge-1", hub.url()), KUBELET)
}

#[test]
fn offline_answers_say_how_old_they_are_and_relayed_ones_do_not() {
    let cloud = cloud();
    cloud.node("edge-1", None, &[]);
    let dir = TempDir::new("freshness-offline");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    warm_kubelet(&hub);
    let node = node_get(&hub);
    assert_eq!(node.status, 200, "{}", node.text());
    assert_eq!(age_of(&node), None, "the node online: relayed, so no age");
    assert!(
        hub.wait_cached(&["kubelet/nodes.v1.core/edge-1"], Duration::from_secs(10)),
        "{}",
        hub.logs()
    );
    let services = pool_list(&hub);
    assert!(
        age_of(&services).is_some(),
        "a pool-local list says its age"
    );

    let outage = Instant::now();
    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    assert!(eventually(Duration::from_secs(5), || outage.elapsed()
        >= Duration::from_secs(2)));
    let since = outage.elapsed().as_secs();
    offline_ages(&hub, since);
    // kubelet's most important offline read: its node, from the cache, says its age too.
    let node = node_get(&hub);
    assert_eq!(node.status, 200, "{}", node.text());
    let age = age_of(&node).unwrap_or_else(|| panic!("the node: no {AGE}: {:?}", node.headers));
    assert!(age >= since, "the node: age {age} < {since} s of outage");
}

#[test]
fn a_restart_offline_carries_the_age_on_from_the_record() {
    let cloud = cloud();
    let dir = TempDir::new("freshness-restart");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let mut hub = Hub::start(&spec);
    warm_kubelet(&hub);
    let outage = Instant::now();
    let outage_unix = unix_now();
    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );

    // SIGTERM: the drain writes the record.
    signal(hub.pid(), "TERM");
    assert!(hub.wait_exit().success());
    let record: Value = read_json(&spec.cache_dir.join(".synced"))
        .unwrap_or_else(|| panic!("no .synced after the drain"));
    let kinds = record["kinds"].as_array().expect("kinds");
    let configmaps = kinds
        .iter()
        .find(|k| k["component"] == "kubelet" && k["resource"] == "configmaps.v1.core")
        .unwrap_or_else(|| panic!("{record}"));
    let at = configmaps["at"].as_f64().unwrap();
    assert!(
        at <= outage_unix,
        "{at} is after the outage began at {outage_unix}"
    );
    // The record, not the directories' times (nearly the same), must be what the ages go on
    // from: make it 100 s older than the outage.
    let at = at - 100.0;
    let mut record = record;
    for kind in record["kinds"].as_array_mut().unwrap() {
        if kind["resource"] == "configmaps.v1.core" {
            kind["at"] = json!(at as u64);
        }
    }
    std::fs::write(
        spec.cache_dir.join(".synced"),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();

    // Started again with the cloud still gone: the ages go on from the record.
    let hub = Hub::start(&spec);
    assert!(eventually(Duration::from_secs(5), || outage.elapsed()
        >= Duration::from_secs(3)));
    let since = outage.elapsed().as_secs();
    let [get_age, ..] = offline_ages(&hub, since);
    assert!(
        get_age >= 100 && get_age as f64 >= unix_now().floor() - at - 1.0,
        "age {get_age} does not go on from the record's {at}"
    );
}
