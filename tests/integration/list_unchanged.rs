//! Issue 34, item 1: a list the cloud answers again at the same resourceVersion is the same
//! snapshot, and the edge hub proves it so from the answer's `metadata` without reading the
//! rest (`tinyhub_cache_lists_unchanged_total`). The client still gets every byte; the
//! cache stays whole and answers offline; a changed list, another scope, a cached file
//! found damaged or gone, and an answer that breaks off are never taken as unchanged.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

const UNCHANGED: &str = "tinyhub_cache_lists_unchanged_total";
const LIST: &str = "/api/v1/namespaces/un-0/pods";
const WAIT: Duration = Duration::from_secs(20);

/// A cloud with 40 pods of about 5 KB in namespace `un-0` (a list of ~200 KB: it streams
/// to the writer, as a large list does), and a scratch directory.
fn start(tag: &str) -> (Cloud, TempDir) {
    let cloud = Cloud::start();
    cloud.populate_pods(&PodFill {
        count: 40,
        namespaces: 1,
        nodes: 1,
        body_bytes: 5000,
        prefix: "un".into(),
    });
    (cloud, TempDir::new(tag))
}

/// An edge hub in front of `cloud`. Its health is probed by `/readyz`: a node lease renewed
/// every second (the tests' lease mode) would move the cloud's resourceVersion between any
/// two lists, as any write in the cluster does.
fn spec(cloud: &Cloud, dir: &TempDir) -> HubSpec {
    HubSpec::for_cloud(cloud, dir.path()).with(&["--heartbeat-mode=readyz"])
}

/// Lists `path` as kubelet; the answer's body.
fn list(hub: &Hub, path: &str) -> String {
    let reply = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text()
}

/// The pods' files of the cache, by path.
fn pod_files(hub: &Hub) -> Vec<(PathBuf, Vec<u8>)> {
    hub.snapshot_settled()
        .into_iter()
        .filter(|(path, _)| path.to_string_lossy().contains("pods.v1.core/un-0/"))
        .collect()
}

fn pod_file(hub: &Hub, name: &str) -> PathBuf {
    hub.spec
        .cache_dir
        .join("kubelet/pods.v1.core/un-0")
        .join(name)
}

fn unchanged(hub: &Hub) -> f64 {
    hub.metric(UNCHANGED).unwrap_or(-1.0)
}

/// Lists `LIST` twice and waits until the writer committed both: the first fills the
/// cache, the second finds every pod stored as listed (a list that changed the cache proves
/// its repeats unchanged only once it is found so).
fn first_list(hub: &Hub) -> String {
    let body = list(hub, LIST);
    assert!(
        hub.wait_cached(&["kubelet/pods.v1.core/un-0/un-000039"], WAIT),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    assert_eq!(list(hub, LIST), body);
    hub.wait_cache_quiet();
    assert_eq!(unchanged(hub), 0.0, "{}", hub.logs());
    body
}

fn cut(cloud: &Cloud, hub: &Hub) {
    cloud.stop();
    assert!(hub.wait_healthy(cloud, false, WAIT), "{}", hub.logs());
}

fn back(cloud: &Cloud, hub: &Hub) {
    cloud.restart();
    assert!(hub.wait_healthy(cloud, true, WAIT), "{}", hub.logs());
}

fn names(body: &str) -> usize {
    item_names(&serde_json::from_str(body).unwrap()).len()
}

#[test]
fn the_same_list_twice_is_counted_unchanged_the_cache_stays_and_answers_offline() {
    let (cloud, dir) = start("unchanged-twice");
    let hub = Hub::start(&spec(&cloud, &dir));
    let first = first_list(&hub);
    let before = pod_files(&hub);
    assert_eq!(before.len(), 40);
    assert_eq!(unchanged(&hub), 0.0);

    let second = list(&hub, LIST);
    assert_eq!(
        second, first,
        "the client gets the whole answer, every byte"
    );
    assert!(hub.wait_metric(UNCHANGED, 1.0, WAIT), "{}", hub.logs());
    assert_eq!(
        pod_files(&hub),
        before,
        "the cache is as the first list left it"
    );

    cut(&cloud, &hub);
    let offline = list(&hub, LIST);
    assert_eq!(names(&offline), 40, "{offline}");
}

#[test]
fn a_pod_changed_in_the_cloud_is_applied_by_the_next_list() {
    let (cloud, dir) = start("unchanged-changed");
    let hub = Hub::start(&spec(&cloud, &dir));
    first_list(&hub);
    cloud.patch(
        "pods",
        "un-0",
        "un-000007",
        json!({"metadata": {"labels": {"tier": "changed"}}}),
    );
    list(&hub, LIST);
    assert!(
        eventually(WAIT, || read_json(&pod_file(&hub, "un-000007"))
            .is_some_and(|p| p["metadata"]["labels"]["tier"] == "changed")),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    assert_eq!(unchanged(&hub), 0.0, "a new resourceVersion is read");
    // The same (new) list again is found stored, and from then on it is unchanged.
    list(&hub, LIST);
    hub.wait_cache_quiet();
    assert_eq!(unchanged(&hub), 0.0);
    list(&hub, LIST);
    assert!(hub.wait_metric(UNCHANGED, 1.0, WAIT), "{}", hub.logs());

    cut(&cloud, &hub);
    let pod = get(&format!("{}{LIST}/un-000007", hub.url()), KUBELET);
    assert_eq!(pod.status, 200);
    assert_eq!(pod.json()["metadata"]["labels"]["tier"], "changed");
}

#[test]
fn a_cached_file_found_damaged_or_gone_is_refilled_by_the_same_list() {
    let (cloud, dir) = start("unchanged-damaged");
    let hub = Hub::start(&spec(&cloud, &dir));
    first_list(&hub);
    list(&hub, LIST);
    assert!(hub.wait_metric(UNCHANGED, 1.0, WAIT), "{}", hub.logs());
    let before = pod_files(&hub);

    // Behind the hub's back, one file is damaged and one removed; offline reads of them
    // find it out.
    let (damaged, gone) = (pod_file(&hub, "un-000003"), pod_file(&hub, "un-000004"));
    std::fs::write(&damaged, b"{\"not\":\"a pod\"}").unwrap();
    std::fs::remove_file(&gone).unwrap();
    cut(&cloud, &hub);
    let damaged_answer = get(&format!("{}{LIST}/un-000003", hub.url()), KUBELET);
    assert_eq!(damaged_answer.text(), "{\"not\":\"a pod\"}");
    let gone_answer = get(&format!("{}{LIST}/un-000004", hub.url()), KUBELET);
    assert_eq!(gone_answer.status, 404);
    back(&cloud, &hub);

    // The cloud's list is at the same resourceVersion, but the cache no longer holds it.
    list(&hub, LIST);
    assert!(
        eventually(WAIT, || pod_files(&hub) == before),
        "the cache is whole again\n{}",
        hub.logs()
    );
    assert_eq!(unchanged(&hub), 1.0, "that list was read whole");
}

#[test]
fn another_scope_at_the_same_resource_version_is_not_taken_as_unchanged() {
    let (cloud, dir) = start("unchanged-scope");
    let hub = Hub::start(&spec(&cloud, &dir));
    first_list(&hub);
    let committed = hub
        .metric("tinyhub_cache_sessions_committed_total")
        .unwrap();
    for other in [
        "/api/v1/namespaces/un-0/pods?labelSelector=tier%3Dfrontend",
        "/api/v1/pods",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0",
    ] {
        list(&hub, other);
    }
    assert!(
        hub.wait_metric(
            "tinyhub_cache_sessions_committed_total",
            committed + 3.0,
            WAIT
        ),
        "{}",
        hub.logs()
    );
    assert_eq!(unchanged(&hub), 0.0, "each scope is read on its own");
    // Those lists changed nothing: the first scope's repeat is still proven.
    list(&hub, LIST);
    assert!(hub.wait_metric(UNCHANGED, 1.0, WAIT), "{}", hub.logs());
}

#[test]
fn a_list_broken_off_after_it_was_found_unchanged_changes_nothing_and_is_not_counted() {
    let (cloud, dir) = start("unchanged-broken");
    let hub = Hub::start(&spec(&cloud, &dir));
    first_list(&hub);
    list(&hub, LIST);
    assert!(hub.wait_metric(UNCHANGED, 1.0, WAIT), "{}", hub.logs());
    let before = pod_files(&hub);
    let abandoned = hub
        .metric("tinyhub_cache_sessions_abandoned_total")
        .unwrap();

    // Half the answer (its metadata and some items), then the connection is cut.
    cloud.drop_mid_body(1);
    let (status, mut body) = stream(&format!("{}{LIST}", hub.url()), KUBELET);
    assert_eq!(status, 200);
    let mut sink = Vec::new();
    assert!(
        std::io::Read::read_to_end(&mut body, &mut sink).is_err(),
        "the client sees the answer break off"
    );
    assert!(
        hub.wait_metric(
            "tinyhub_cache_sessions_abandoned_total",
            abandoned + 1.0,
            WAIT
        ),
        "{}",
        hub.logs()
    );
    assert_eq!(unchanged(&hub), 1.0, "not counted");
    assert_eq!(pod_files(&hub), before);
    // Whole again: counted.
    list(&hub, LIST);
    assert!(hub.wait_metric(UNCHANGED, 2.0, WAIT), "{}", hub.logs());
}
