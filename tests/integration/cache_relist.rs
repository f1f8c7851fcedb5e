//! Issue 33: a collection marked in `<cache>/.relist` (by `tinyhub cache repair`, or evicted
//! by the bound) is relisted whole by the hub the first time a watch of it begins online:
//! one list, the mark cleared, readyz saying so until then.

use std::fs;
use std::time::Duration;

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill, RecordedRequest};

const PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0";

fn pod_lists(cloud: &Cloud) -> usize {
    cloud.count(|r: &RecordedRequest| {
        r.method == "GET" && r.path == "/api/v1/pods" && !r.query.contains("watch")
    })
}

/// Whether `.relist` marks kubelet's pods.
fn marked(cache: &std::path::Path) -> bool {
    fs::read(cache.join(".relist"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["collections"] != json!([]))
}

fn readyz(hub: &Hub) -> String {
    get(&format!("{}/v1/readyz?verbose", hub.serve_url()), "curl/8").text()
}

#[test]
fn a_marked_collection_is_relisted_once_when_its_watch_begins() {
    let cloud = Cloud::start();
    let rv = cloud.populate_pods(&PodFill {
        count: 3,
        namespaces: 1,
        nodes: 1,
        body_bytes: 1_000,
        prefix: "app".into(),
    });
    let dir = TempDir::new("cache-relist");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let hub = Hub::start(&spec);
    assert_eq!(get(&format!("{}{PODS}", hub.url()), KUBELET).status, 200);
    let cache = spec.cache_dir.clone();
    let taken = cache.join("kubelet/pods.v1.core/app-0/app-000001");
    assert!(
        hub.wait_cached(
            &["kubelet/pods.v1.core/app-0/app-000001"],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    drop(hub);
    // What `tinyhub cache repair` leaves: a file moved aside, the collection marked.
    fs::remove_file(&taken).unwrap();
    fs::write(
        cache.join(".relist"),
        json!({"version": 1, "collections": [
            {"component": "kubelet", "kind": "pods.v1.core", "reason": "repaired",
             "at": "2026-12-06T15:00:00Z"}
        ]})
        .to_string(),
    )
    .unwrap();

    let hub = Hub::start(&spec);
    assert!(
        readyz(&hub).contains("[+]relist pending kubelet/pods.v1.core (repaired)\n"),
        "{}",
        readyz(&hub)
    );
    cloud.reset_requests();
    let watch = format!("{}{PODS}&watch=true&resourceVersion={rv}", hub.url());
    let (status, _events) = stream(&watch, KUBELET);
    assert_eq!(status, 200);
    // The refill lists the watch's scope: the file taken out is back, the mark is gone.
    assert!(
        eventually(Duration::from_secs(20), || taken.exists()),
        "not relisted: {}",
        hub.logs()
    );
    // kubelet's list across namespaces (by `spec.nodeName`, the scope it caches) clears
    // the mark.
    assert!(
        eventually(Duration::from_secs(10), || !marked(&cache)),
        "{}",
        hub.logs()
    );
    assert!(!readyz(&hub).contains("relist pending"), "{}", readyz(&hub));
    hub.wait_cache_quiet();
    assert_eq!(pod_lists(&cloud), 1, "{:#?}", cloud.requests());
    // Another watch begins: nothing is marked any more, nothing is listed.
    let (status, _again) = stream(&watch, KUBELET);
    assert_eq!(status, 200);
    hub.wait_cache_quiet();
    assert_eq!(pod_lists(&cloud), 1, "{:#?}", cloud.requests());
    // And across a restart the record stays empty.
    let hub = hub.restart();
    assert!(!readyz(&hub).contains("relist pending"), "{}", readyz(&hub));
}

#[test]
fn a_namespace_relisted_leaves_the_mark_for_the_others() {
    let cloud = Cloud::start();
    let rv = cloud.populate_pods(&PodFill {
        count: 4,
        namespaces: 2,
        nodes: 1,
        body_bytes: 500,
        prefix: "app".into(),
    });
    let dir = TempDir::new("cache-relist-ns");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let hub = Hub::start(&spec);
    assert_eq!(get(&format!("{}{PODS}", hub.url()), KUBELET).status, 200);
    hub.wait_cache_quiet();
    drop(hub);
    let cache = spec.cache_dir.clone();
    // One pod taken out of each namespace, the collection marked.
    let taken: Vec<std::path::PathBuf> = ["app-0", "app-1"]
        .iter()
        .map(|ns| {
            let dir = cache.join("kubelet/pods.v1.core").join(ns);
            let mut files: Vec<_> = fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            let file = files.pop().expect("a pod in each namespace");
            fs::remove_file(&file).unwrap();
            file
        })
        .collect();
    fs::write(
        cache.join(".relist"),
        json!({"version": 1, "collections": [
            {"component": "kubelet", "kind": "pods.v1.core", "reason": "evicted",
             "at": "2026-12-06T15:00:00Z"}
        ]})
        .to_string(),
    )
    .unwrap();

    let hub = Hub::start(&spec);
    let watch_ns = |ns: &str| {
        let url = format!(
            "{}/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={rv}",
            hub.url()
        );
        let (status, _events) = stream(&url, KUBELET);
        assert_eq!(status, 200);
    };
    // The first namespace's watch relists that namespace only: the mark stays.
    watch_ns("app-0");
    assert!(
        eventually(Duration::from_secs(20), || taken[0].exists()),
        "not relisted: {}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    assert!(
        marked(&cache),
        "a namespace's list cleared the mark: {}",
        hub.logs()
    );
    assert!(!taken[1].exists());
    // The other namespace's watch has its own refill.
    watch_ns("app-1");
    assert!(
        eventually(Duration::from_secs(20), || taken[1].exists()),
        "the other namespace was not relisted: {}",
        hub.logs()
    );
}
