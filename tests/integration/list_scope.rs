//! Issue 11, items 2 and 7: what one list or watch answer may do to the cache.
//!
//! Item 7: a list replaces what the cache holds within the list's scope, so the hub must
//! read the scope (namespace, selectors, paging) from the query exactly as the apiserver
//! does (Go's `url.ParseQuery`: escaped keys, `+` as a space, the first of repeated keys).
//! Each test caches 30 pods of node `node-0`, sends one GET the cloud reads differently from
//! a naive reading, and checks that nothing the cloud did not delete leaves the cache.
//!
//! Item 2: a list item or a watch event object that is not a JSON object is never stored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

const PODS: usize = 30;
/// The writer's line for a committed list of kubelet's pods.
const KUBELET_PODS_COMMITTED: &str = "cache: list kubelet/pods.v1.core committed";
const ERRORS: &str = "tinyhub_cache_errors_total";

/// A cloud with 30 pods on `node-0` (`s-000000`..`s-000029`, namespaces `s-0`..`s-2`,
/// labels `app=app-<i % 10>`), and a hub whose kubelet cache holds all of them.
fn cached_pods(tag: &str) -> (Cloud, TempDir, Hub) {
    let cloud = Cloud::start();
    cloud.populate_pods(&PodFill {
        count: PODS,
        namespaces: 3,
        nodes: 1,
        body_bytes: 800,
        prefix: "s".into(),
    });
    let dir = TempDir::new(tag);
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // Waited for until committed, not only until its files are there: the test's own lists
    // wait for the commit after theirs.
    let r = list_and_commit(&hub, "fieldSelector=spec.nodeName%3Dnode-0");
    assert_eq!(r.status, 200);
    assert_eq!(items(&r), PODS);
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
    (cloud, dir, hub)
}

fn pods_dir(hub: &Hub) -> PathBuf {
    hub.spec.cache_dir.join("kubelet/pods.v1.core")
}

fn pod_file(hub: &Hub, i: usize) -> PathBuf {
    pods_dir(hub).join(format!("s-{}/s-{i:06}", i % 3))
}

fn cached(hub: &Hub) -> usize {
    files_under(&pods_dir(hub)).len()
}

/// kubelet's `GET /api/v1/pods?<query>`.
fn list(hub: &Hub, query: &str) -> Reply {
    get(&format!("{}/api/v1/pods?{query}", hub.url()), KUBELET)
}

fn items(r: &Reply) -> usize {
    r.json()["items"].as_array().map_or(0, Vec::len)
}

/// Sends the list and waits until the cache writer has committed its answer.
fn list_and_commit(hub: &Hub, query: &str) -> Reply {
    // This list's own commit: the count of committed sessions also moves with the hub's
    // own watches' sessions, which end at any time.
    let lists = || hub.logs().matches(KUBELET_PODS_COMMITTED).count();
    let before = lists();
    let r = list(hub, query);
    assert!(
        eventually(Duration::from_secs(10), || lists() > before),
        "{query}: not committed\n{}",
        hub.logs()
    );
    r
}

#[test]
fn an_escaped_field_selector_key_is_the_selector_the_cloud_reads() {
    let (_cloud, _dir, hub) = cached_pods("scope-field");
    // The apiserver decodes the key to `fieldSelector` and answers 0 pods.
    let r = list_and_commit(&hub, "field%53elector=spec.nodeName%3Dnowhere");
    assert_eq!((r.status, items(&r)), (200, 0));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
}

#[test]
fn an_escaped_label_selector_key_is_the_selector_the_cloud_reads() {
    let (_cloud, _dir, hub) = cached_pods("scope-label");
    let r = list_and_commit(&hub, "label%53elector=app%3Dnone");
    assert_eq!((r.status, items(&r)), (200, 0));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
}

#[test]
fn an_escaped_continue_key_is_a_later_page() {
    let (_cloud, _dir, hub) = cached_pods("scope-continue");
    let first = list_and_commit(&hub, "fieldSelector=spec.nodeName%3Dnode-0&limit=25");
    assert_eq!(items(&first), 25);
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .expect("a first page has a continue token")
        .to_owned();
    // The last page: 5 pods and no continue token. It says nothing of the other 25.
    let last = list_and_commit(
        &hub,
        &format!("fieldSelector=spec.nodeName%3Dnode-0&limit=25&c%6Fntinue={token}"),
    );
    assert_eq!((last.status, items(&last)), (200, PODS - 25));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
}

#[test]
fn a_plus_in_a_selector_value_is_a_space() {
    let (cloud, _dir, hub) = cached_pods("scope-plus");
    // `app in (app-1,app-2)`: pods 1, 2, 11, 12, 21, 22.
    let r = list_and_commit(&hub, "label%53elector=app+in+(app-1,app-2)");
    assert_eq!((r.status, items(&r)), (200, 6));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
    // The scope is exact, so what left the cloud within it leaves the cache, and only that.
    cloud.delete("pods", "s-1", "s-000001");
    cloud.delete("pods", "s-0", "s-000003");
    let r = list_and_commit(&hub, "labelSelector=app+in+(app-1,app-2)");
    assert_eq!((r.status, items(&r)), (200, 5));
    assert!(!pod_file(&hub, 1).exists(), "gone from the cloud, in scope");
    assert!(
        pod_file(&hub, 3).exists(),
        "gone from the cloud, out of scope"
    );
    assert_eq!(cached(&hub), PODS - 1);
}

#[test]
fn the_first_of_repeated_keys_counts_however_each_is_spelled() {
    let (_cloud, _dir, hub) = cached_pods("scope-repeat");
    // Go's url.ParseQuery gives fieldSelector = ["spec.nodeName=nowhere", ""]; the apiserver
    // takes the first.
    let r = list_and_commit(
        &hub,
        "field%53elector=spec.nodeName%3Dnowhere&fieldSelector=",
    );
    assert_eq!((r.status, items(&r)), (200, 0));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
    let r = list_and_commit(
        &hub,
        "labelSelector=app%3Dnone&label%53elector=&labelSelector=app%3Dapp-1",
    );
    assert_eq!((r.status, items(&r)), (200, 0));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
}

#[test]
fn a_correct_relist_after_a_misread_one_caches_everything() {
    let (cloud, _dir, hub) = cached_pods("scope-relist");
    let rv = list_and_commit(&hub, "fieldSelector=spec.nodeName%3Dnode-0").json()["metadata"]
        ["resourceVersion"]
        .as_str()
        .expect("a list resourceVersion")
        .to_owned();
    // One list answered for a wrong scope (a misread query upstream): empty, at the
    // cloud's current resourceVersion. Within the scope the hub asked for, it removes every
    // cached pod.
    let empty = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[]}}"#
    );
    cloud.misanswer("/api/v1/pods", 1, 200, empty.as_bytes());
    let r = list_and_commit(&hub, "fieldSelector=spec.nodeName%3Dnode-0");
    assert_eq!((r.status, items(&r)), (200, 0));
    // Waited for, not read once: another session (the node lease's write) may have been
    // the commit `list_and_commit` saw.
    let settles = |want| eventually(Duration::from_secs(10), || cached(&hub) == want);
    assert!(settles(0), "{} cached\n{}", cached(&hub), hub.logs());
    // The next, correct list at the same resourceVersion brings every pod back: the
    // removals made by the list before are no reason to refuse it.
    let r = list_and_commit(&hub, "fieldSelector=spec.nodeName%3Dnode-0");
    assert_eq!((r.status, items(&r)), (200, PODS));
    assert!(settles(PODS), "{} cached\n{}", cached(&hub), hub.logs());
}

#[test]
fn a_semicolon_the_cloud_may_read_as_a_separator_deletes_nothing() {
    let (cloud, _dir, hub) = cached_pods("scope-semicolon");
    // An apiserver built with Go before 1.17 reads `fieldSelector=spec.nodeName=nowhere`
    // here; later ones drop the pair. The hub cannot know which, so it deletes nothing.
    cloud.set_semicolon_separates(true);
    let r = list_and_commit(&hub, "x=1;fieldSelector=spec.nodeName%3Dnowhere");
    assert_eq!((r.status, items(&r)), (200, 0));
    assert_eq!(cached(&hub), PODS, "{}", hub.logs());
    cloud.set_semicolon_separates(false);
    let r = list_and_commit(&hub, "x=1;fieldSelector=spec.nodeName%3Dnowhere");
    assert_eq!((r.status, items(&r)), (200, PODS));
    assert_eq!(cached(&hub), PODS);
}

/// A pod item as the apiserver lists it (no kind), on `node-0`.
fn item(ns: &str, name: &str, rv: u64) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}},"spec":{{"nodeName":"node-0"}}}}"#
    )
}

/// An array that a derived serde struct would read as a pod head, field by field.
const EVIL: &str =
    r#"["Pod",{"name":"evil","namespace":"ns","resourceVersion":"99"},{"nodeName":"node-0"}]"#;

fn evil_file(cache: &Path) -> PathBuf {
    cache.join("kubelet/pods.v1.core/ns/evil")
}

fn warnings_about_non_objects(hub: &Hub) -> usize {
    hub.log_lines(|l| l.contains("not a JSON object"))
}

#[test]
fn list_items_that_are_not_objects_are_skipped_and_counted() {
    let cloud = Cloud::start();
    let dir = TempDir::new("scope-array-items");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"100"}},"items":[{},{EVIL},{EVIL},["Pod"],{}]}}"#,
        item("ns", "good-1", 10),
        item("ns", "good-2", 11),
    );
    cloud.misanswer("/api/v1/pods", 1, 200, body.as_bytes());
    let errors = hub.metric(ERRORS).unwrap_or(0.0);
    let r = list(&hub, "fieldSelector=spec.nodeName%3Dnode-0");
    assert_eq!(r.status, 200);
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/ns/good-1",
                "kubelet/pods.v1.core/ns/good-2"
            ],
            Duration::from_secs(10)
        ),
        "the rest of the list is cached\n{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    assert!(!evil_file(&cache).exists(), "an array is never stored");
    assert_eq!(files_under(&cache.join("kubelet/pods.v1.core")).len(), 2);
    assert!(hub.wait_metric_at_least(ERRORS, errors + 3.0, Duration::from_secs(5)));
    assert_eq!(warnings_about_non_objects(&hub), 1, "{}", hub.logs());
}

#[test]
fn watch_objects_that_are_not_objects_are_skipped_and_counted() {
    let cloud = Cloud::start();
    let dir = TempDir::new("scope-array-events");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let evil = format!(r#"{{"type":"ADDED","object":{EVIL}}}"#);
    let array_head = r#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":["evil","ns","98"],"spec":{"nodeName":"node-0"}}}"#;
    let good = r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"good","namespace":"ns","resourceVersion":"12"},"spec":{"nodeName":"node-0"}}}"#;
    cloud.misanswer_watch(
        "/api/v1/pods",
        1,
        &[
            evil.as_bytes(),
            array_head.as_bytes(),
            evil.as_bytes(),
            good.as_bytes(),
        ],
    );
    let errors = hub.metric(ERRORS).unwrap_or(0.0);
    let (status, mut body) = stream(
        &format!(
            "{}/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0&watch=true&timeoutSeconds=30",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut all = Vec::new();
    let _ = std::io::Read::read_to_end(&mut body, &mut all);
    assert!(
        hub.wait_cached(&["kubelet/pods.v1.core/ns/good"], Duration::from_secs(10)),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    assert!(!evil_file(&cache).exists(), "an array is never stored");
    assert_eq!(files_under(&cache.join("kubelet/pods.v1.core")).len(), 1);
    assert!(hub.wait_metric_at_least(ERRORS, errors + 3.0, Duration::from_secs(5)));
    assert_eq!(warnings_about_non_objects(&hub), 1, "{}", hub.logs());
}
