//! Issue 31 item 3: metadata-only clients (client-go's metadata client and its informers, which
//! ask for `as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, protobuf first). The hub asks
//! the cloud for the JSON form, caches it in YurtHub's layout for it
//! (`<component>/partialobjectmetadatas.v1.meta.k8s.io/<resource>.<version>.<group>/...`), apart
//! from the full objects, and answers lists (selectors, paging), gets and held watches from it
//! offline in that form. Protobuf only and field selectors the metadata cannot answer pass
//! through uncached.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

/// A controller on the node with a metadata informer (a cache agent).
const CONTROLLER: &str = "coredns/v1.11.1 (linux/arm64) kubernetes/abcdef0";
/// What client-go's metadata client sends for a list.
const LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// What it sends for a get or a watch.
const GET_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// The metadata view of the controller's pods on disk.
const META_PODS: &str = "coredns/partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core";

fn pod(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    })
}

fn read(url: &str, accept: &str) -> Reply {
    call("GET", url, CONTROLLER, &[("Accept", accept)], None)
}

/// A watch with `accept`: its status, Content-Type and events.
fn watch(url: &str, accept: &str) -> (u16, String, Events) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let request = ureq::http::Request::builder()
        .uri(url)
        .header("user-agent", CONTROLLER)
        .header("accept", accept)
        .body(())
        .expect("request");
    let response = agent
        .run(request)
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body: Box<dyn Read + Send> = Box::new(response.into_body().into_reader());
    (status, content_type, Events::new(body))
}

/// An object as client-go's metadata client reads it: kind, apiVersion, metadata, nothing else.
fn assert_partial(object: &Value) {
    assert_eq!(object["kind"], "PartialObjectMetadata", "{object}");
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1", "{object}");
    assert!(object.get("spec").is_none(), "{object}");
    assert!(object.get("status").is_none(), "{object}");
}

/// A list in the metadata form, every item too; returns its item names.
fn assert_partial_list(list: &Value) -> std::collections::BTreeSet<String> {
    assert_eq!(list["kind"], "PartialObjectMetadataList", "{list}");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1", "{list}");
    for item in list["items"].as_array().expect("items") {
        assert_partial(item);
    }
    item_names(list)
}

fn names(items: &[&str]) -> std::collections::BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_metadata_informer_is_cached_apart_and_answered_offline_in_its_form() {
    let cloud = Cloud::start();
    for (ns, name, app) in [
        ("default", "web-1", "web"),
        ("default", "web-2", "web"),
        ("default", "db-1", "db"),
        ("kube-system", "proxy-1", "proxy"),
    ] {
        cloud.create("pods", pod(ns, name, json!({ "app": app })));
    }
    let dir = TempDir::new("metadata-only");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());

    // Online: the informer's list, asked of the cloud in the JSON metadata form.
    let list = read(&url("/api/v1/pods"), LIST_ACCEPT);
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(
        assert_partial_list(&list.json()),
        names(&["web-1", "web-2", "db-1", "proxy-1"])
    );
    let asked: Vec<String> = cloud
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && r.user_agent.starts_with("coredns/"))
        .map(|r| r.accept.clone())
        .collect();
    assert_eq!(
        asked,
        ["application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"]
    );
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // The same component's full objects of one namespace, read as plain JSON: their own
    // directory.
    let full = get(&url("/api/v1/namespaces/kube-system/pods"), CONTROLLER);
    assert_eq!(full.status, 200);
    assert_eq!(full.json()["kind"], "PodList");
    let cache = hub.spec.cache_dir.clone();
    assert!(
        hub.wait_cached(
            &[
                &format!("{META_PODS}/default/web-1"),
                &format!("{META_PODS}/default/web-2"),
                &format!("{META_PODS}/default/db-1"),
                &format!("{META_PODS}/kube-system/proxy-1"),
                "coredns/pods.v1.core/kube-system/proxy-1",
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    let stored: Value = serde_json::from_slice(
        &std::fs::read(cache.join(META_PODS).join("default/web-1")).unwrap(),
    )
    .unwrap();
    assert_partial(&stored);
    assert_eq!(stored["metadata"]["labels"]["app"], "web");
    let full_stored: Value = serde_json::from_slice(
        &std::fs::read(cache.join("coredns/pods.v1.core/kube-system/proxy-1")).unwrap(),
    )
    .unwrap();
    assert_eq!(full_stored["spec"]["nodeName"], "edge-1", "{full_stored}");
    assert!(!cache.join("coredns/pods.v1.core/default").exists());

    // Its watch: events in the metadata form, each one cached in the metadata view.
    let (status, content_type, mut events) = watch(
        &url(&format!(
            "/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=60"
        )),
        GET_ACCEPT,
    );
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(10)));
    cloud.create("pods", pod("default", "web-3", json!({"app": "web"})));
    let event = events.next_event().expect("an event");
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_partial(&event["object"]);
    assert_eq!(event["object"]["metadata"]["name"], "web-3");
    assert!(
        hub.wait_cached(
            &[&format!("{META_PODS}/default/web-3")],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    drop(events);
    let full_before =
        std::fs::read(cache.join("coredns/pods.v1.core/kube-system/proxy-1")).unwrap();

    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    check_offline(&hub);
    // The full objects were neither used nor touched.
    assert_eq!(
        std::fs::read(cache.join("coredns/pods.v1.core/kube-system/proxy-1")).unwrap(),
        full_before
    );
    let full_get = get(&url("/api/v1/namespaces/default/pods/web-1"), CONTROLLER);
    assert_eq!(full_get.status, 404, "{}", full_get.text());
    // Listed whole in kube-system only: all namespaces never were (issue 35).
    let all = get(&url("/api/v1/pods"), CONTROLLER);
    assert_eq!(all.status, 404, "{}", all.text());
    let full_list = get(&url("/api/v1/namespaces/kube-system/pods"), CONTROLLER);
    assert_eq!(full_list.status, 200);
    assert_eq!(item_names(&full_list.json()), names(&["proxy-1"]));
    assert_eq!(
        full_list.json()["items"][0]["spec"]["nodeName"],
        "edge-1",
        "{}",
        full_list.text()
    );

    // After a restart (the index rebuilt from disk), the same answers.
    let hub = hub.restart();
    check_offline(&hub);
}

/// What the metadata informer gets with the cloud gone.
fn check_offline(hub: &Hub) {
    let url = |p: &str| format!("{}{p}", hub.url());

    let list = read(&url("/api/v1/pods"), LIST_ACCEPT);
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(
        assert_partial_list(&list.json()),
        names(&["web-1", "web-2", "web-3", "db-1", "proxy-1"])
    );

    let selected = read(
        &url("/api/v1/namespaces/default/pods?labelSelector=app%3Dweb"),
        LIST_ACCEPT,
    );
    assert_eq!(selected.status, 200);
    assert_eq!(
        assert_partial_list(&selected.json()),
        names(&["web-1", "web-2", "web-3"])
    );
    let by_name = read(
        &url("/api/v1/pods?fieldSelector=metadata.name%3Ddb-1"),
        LIST_ACCEPT,
    );
    assert_eq!(by_name.status, 200);
    assert_eq!(assert_partial_list(&by_name.json()), names(&["db-1"]));

    // Found nothing: still the metadata list's kind.
    let none = read(&url("/api/v1/pods?labelSelector=app%3Dnone"), LIST_ACCEPT);
    assert_eq!(none.status, 200);
    assert_eq!(assert_partial_list(&none.json()), names(&[]));

    // Paged by limit and continue.
    let mut seen = Vec::new();
    let mut cont = String::new();
    for _ in 0..5 {
        let page = read(
            &url(&format!("/api/v1/pods?limit=2&continue={cont}")),
            LIST_ACCEPT,
        );
        assert_eq!(page.status, 200, "{}", page.text());
        let page = page.json();
        let got = assert_partial_list(&page);
        assert!(got.len() <= 2, "{page}");
        seen.extend(got);
        match page["metadata"]["continue"].as_str() {
            Some(next) if !next.is_empty() => cont = next.to_owned(),
            _ => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["db-1", "proxy-1", "web-1", "web-2", "web-3"]);

    let one = read(&url("/api/v1/namespaces/default/pods/web-2"), GET_ACCEPT);
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(one.header("content-type"), Some("application/json"));
    assert_partial(&one.json());
    assert_eq!(one.json()["metadata"]["name"], "web-2");

    // A held watch: open, no events, ended at its timeoutSeconds.
    let started = Instant::now();
    let (status, content_type, mut events) =
        watch(&url("/api/v1/pods?watch=1&timeoutSeconds=2"), GET_ACCEPT);
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert!(events.next_event().is_none(), "no events offline");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_secs(2) && held < Duration::from_secs(20),
        "held {held:?}"
    );
}

#[test]
fn protobuf_only_and_spec_field_selectors_pass_through_uncached() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("default", "web-1", json!({"app": "web"})));
    let dir = TempDir::new("metadata-uncached");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());

    // Protobuf only: passed on as asked (the stand-in speaks no protobuf: 406), nothing kept.
    let proto =
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let answer = read(&url("/api/v1/pods"), proto);
    assert_eq!(answer.status, 406, "{}", answer.text());
    assert!(
        cloud
            .requests()
            .iter()
            .any(|r| r.path == "/api/v1/pods" && r.accept == proto),
        "the client's Accept goes to the cloud unchanged"
    );
    assert!(hub.wait_log_line(
        |l| l.contains("component=\"coredns\"") && l.contains("cache=table-or-partial"),
        Duration::from_secs(10)
    ));

    // A field selector on the spec: the metadata has none to match, so it is the cloud's.
    let spec = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";
    let answer = read(&url(spec), LIST_ACCEPT);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(item_names(&answer.json()), names(&["web-1"]));
    assert!(
        hub.wait_log_line(
            |l| l.contains("component=\"coredns\"") && l.contains("cache=metadata-field-selector"),
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    assert!(!hub.spec.cache_dir.join("coredns").exists());

    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    let offline = read(&url(spec), LIST_ACCEPT);
    assert_eq!(offline.status, 503, "{}", offline.text());
    let offline = read(&url("/api/v1/pods"), proto);
    assert_eq!(offline.status, 503, "{}", offline.text());
}

#[test]
fn whole_objects_from_a_cloud_that_ignores_as_reach_the_client_but_not_the_metadata_view() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("default", "web-1", json!({"app": "web"})));
    let dir = TempDir::new("metadata-whole-answer");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());
    let cache = hub.spec.cache_dir.clone();

    let list = read(&url("/api/v1/pods"), LIST_ACCEPT);
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(assert_partial_list(&list.json()), names(&["web-1"]));
    assert!(
        hub.wait_cached(
            &[&format!("{META_PODS}/default/web-1")],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );

    // A cloud that ignores `as=` answers plain JSON: whole pods, one not bound to a node.
    let mut unbound = pod("default", "pending", json!({}));
    unbound["spec"]["nodeName"] = json!(null);
    let whole_list = json!({
        "kind": "PodList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "999"},
        "items": [pod("default", "whole-1", json!({})), unbound],
    });
    cloud.misanswer("/api/v1/pods", 1, 200, whole_list.to_string().as_bytes());
    let answer = read(&url("/api/v1/pods"), LIST_ACCEPT);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.json()["kind"],
        "PodList",
        "the cloud's answer, relayed"
    );
    assert_eq!(item_names(&answer.json()), names(&["whole-1", "pending"]));
    let whole_pod = pod("default", "whole-2", json!({}));
    cloud.misanswer(
        "/api/v1/namespaces/default/pods/whole-2",
        1,
        200,
        whole_pod.to_string().as_bytes(),
    );
    let one = read(&url("/api/v1/namespaces/default/pods/whole-2"), GET_ACCEPT);
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(one.json()["spec"]["nodeName"], "edge-1", "{}", one.text());

    // The metadata view holds what it held: nothing whole was stored in it, nothing pruned.
    hub.wait_cache_quiet();
    let stored: Vec<String> = files_under(&cache.join(META_PODS))
        .iter()
        .map(|p| {
            p.strip_prefix(cache.join(META_PODS))
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(stored, ["default/web-1"], "{}", hub.logs());
    let kept: Value = serde_json::from_slice(
        &std::fs::read(cache.join(META_PODS).join("default/web-1")).unwrap(),
    )
    .unwrap();
    assert_partial(&kept);
}

#[test]
fn a_metadata_watch_past_the_clouds_history_is_rebuilt_in_its_form() {
    let cloud = Cloud::start();
    for name in ["keep", "change", "gone"] {
        cloud.create("pods", pod("default", name, json!({"app": "web"})));
    }
    let dir = TempDir::new("metadata-rebuild");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());

    // The informer: its list (the difference's baseline), then its watch from there.
    let list = read(&url("/api/v1/pods"), LIST_ACCEPT);
    assert_eq!(list.status, 200, "{}", list.text());
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _, mut events) = watch(
        &url(&format!(
            "/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=90"
        )),
        GET_ACCEPT,
    );
    assert_eq!(status, 200);
    assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(10)));
    assert!(
        hub.wait_cached(
            &[
                &format!("{META_PODS}/default/keep"),
                &format!("{META_PODS}/default/change"),
                &format!("{META_PODS}/default/gone"),
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();

    // An outage past the cloud's history: one pod made, one changed, one deleted.
    cloud.stop();
    cloud.create("pods", pod("default", "new-1", json!({"app": "web"})));
    let mut change = cloud.get("pods", "default", "change").unwrap();
    change["metadata"]["labels"]["app"] = json!("changed");
    cloud.update("pods", change);
    cloud.delete("pods", "default", "gone");
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    cloud.compact();
    cloud.reset_requests();
    cloud.restart();

    // The same stream carries the difference, in the metadata form, and no ERROR.
    let mut got = std::collections::BTreeSet::new();
    while got.len() < 3 {
        let event = events
            .next_event()
            .unwrap_or_else(|| panic!("the watch ended:\n{}", hub.logs()));
        assert_ne!(event["type"], "ERROR", "{event}");
        if event["type"] == "BOOKMARK" {
            continue;
        }
        assert_partial(&event["object"]);
        got.insert((
            event["type"].as_str().unwrap().to_owned(),
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
    }
    let expected: std::collections::BTreeSet<_> = [
        ("ADDED", "new-1"),
        ("MODIFIED", "change"),
        ("DELETED", "gone"),
    ]
    .iter()
    .map(|(t, n)| ((*t).to_owned(), (*n).to_owned()))
    .collect();
    assert_eq!(got, expected, "{}", hub.logs());
    // Listed once, in the metadata list's form alone.
    let lists: Vec<String> = cloud
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.query.contains("watch"))
        .map(|r| r.accept.clone())
        .collect();
    assert_eq!(
        lists,
        ["application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"]
    );
    assert!(
        hub.wait_cached(
            &[&format!("{META_PODS}/default/new-1")],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
}
