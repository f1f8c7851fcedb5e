//! Answers that never pretend (issue 35): offline, a list is answered only for a scope the
//! component listed whole while the cloud was reachable, and a get of an object it never
//! cached says so, apart from one its last whole list shows gone.

use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::kubectl::Kubectl;

fn pod(cloud: &Cloud, namespace: &str, name: &str) {
    cloud.create(
        "pods",
        json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
               "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "nginx"}]}}),
    );
}

#[test]
fn offline_kubectl_never_lists_what_it_only_fetched_by_name() {
    let cloud = Cloud::start();
    for (ns, name) in [
        ("default", "web-1"),
        ("default", "web-2"),
        ("default", "web-3"),
        ("kube-system", "dns-1"),
        ("kube-system", "dns-2"),
    ] {
        pod(&cloud, ns, name);
    }
    cloud.node("edge-1", None, &[]);
    let dir = TempDir::new("offline-scope-kubectl");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-agents=kubectl"]));
    let k = Kubectl::new(dir.path(), &hub);
    // Online: one pod by name, and the kube-system namespace listed whole.
    k.ok(&["get", "pod", "web-1", "-o", "json"]);
    k.ok(&["get", "pods", "-n", "kube-system", "-o", "json"]);
    assert!(
        hub.wait_cached(
            &[
                "kubectl/pods.v1.core/default/web-1",
                "kubectl/pods.v1.core/kube-system/dns-2"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    cloud.delete("pods", "kube-system", "dns-2");
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    // All namespaces were never listed: not one pod of five passed off as all of them.
    let all = k.fails(&["get", "pods", "-A"]);
    assert!(all.contains("not cached for kubectl"), "{all}");
    let default = k.fails(&["get", "pods", "-n", "default", "-o", "name"]);
    assert!(default.contains("not cached for kubectl"), "{default}");
    // The namespace it listed whole answers, with and without selectors.
    let system = k.ok(&["get", "pods", "-n", "kube-system", "-o", "name"]);
    assert_eq!(system.trim(), "pod/dns-1\npod/dns-2", "{system}");
    let selected = k.ok(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "app=dns-1",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "pod/dns-1");
    // The pod it got by name still answers.
    k.ok(&["get", "pod", "web-1", "-n", "default", "-o", "name"]);

    // A node that exists but was never cached for kubectl: not found, and why.
    let node = k.fails(&["get", "node", "edge-1"]);
    assert!(
        node.contains(r#"nodes "edge-1" not found"#) && node.contains("never cached for kubectl"),
        "{node}"
    );
    // A pod its last whole list did not hold: not found, as the apiserver said. (kubectl would
    // show the namespace's 404 it asks for next.)
    let url = format!("{}/api/v1/namespaces/kube-system/pods/gone-1", hub.url());
    let gone = get(&url, "kubectl/v1.32.4");
    assert_eq!(gone.status, 404);
    let gone = gone.text();
    assert!(
        gone.contains(r#""message":"pods \"gone-1\" not found""#),
        "the apiserver's words, true as of that list: {gone}"
    );
}

#[test]
fn offline_lists_answer_only_scopes_a_selector_list_covers() {
    let cloud = Cloud::start();
    for (ns, name) in [("default", "a"), ("default", "b"), ("other", "c")] {
        pod(&cloud, ns, name);
    }
    let dir = TempDir::new("offline-scope-raw");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let base = format!("{}/api/v1/pods", hub.url());
    let selected = format!("{base}?fieldSelector=spec.nodeName%3Dedge-1");
    // kube-proxy lists with a selector, and gets one pod of another namespace by name.
    assert_eq!(get(&selected, "kube-proxy/v1.30").status, 200);
    let by_name = format!("{}/api/v1/namespaces/other/pods/c", hub.url());
    assert_eq!(get(&by_name, "kube-proxy/v1.30").status, 200);
    // Its metadata view: one pod by name only.
    let meta = [(
        "Accept",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    )];
    let meta_get = [(
        "Accept",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
    )];
    assert_eq!(
        call("GET", &by_name, "kube-proxy/v1.30", &meta_get, None).status,
        200
    );
    assert!(hub.wait_cached(
        &[
            "kube-proxy/pods.v1.core/other/c",
            "kube-proxy/partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core/other/c"
        ],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    let answer = get(&selected, "kube-proxy/v1.30");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(item_names(&answer.json()).len(), 3);
    let narrower = get(
        &format!("{selected},metadata.namespace%3Ddefault"),
        "kube-proxy/v1.30",
    );
    assert_eq!(narrower.status, 200, "a narrower selection of a whole list");
    assert_eq!(item_names(&narrower.json()).len(), 2);
    // No selectors, or others: never listed whole.
    for url in [base.clone(), format!("{base}?labelSelector=app%3Da")] {
        let refused = get(&url, "kube-proxy/v1.30");
        assert_eq!(refused.status, 404, "{url}: {}", refused.text());
        assert!(
            refused.text().contains("not cached for kube-proxy"),
            "{}",
            refused.text()
        );
    }
    // A list of one object by name (kubelet's way with ConfigMaps and Secrets): answered
    // when that object is cached, by a get as here; not when it is not.
    let ns = format!("{}/api/v1/namespaces/other/pods", hub.url());
    let named = get(
        &format!("{ns}?fieldSelector=metadata.name%3Dc"),
        "kube-proxy/v1.30",
    );
    assert_eq!(named.status, 200, "{}", named.text());
    assert_eq!(item_names(&named.json()).len(), 1);
    let unknown = get(
        &format!("{ns}?fieldSelector=metadata.name%3Dzz"),
        "kube-proxy/v1.30",
    );
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let listed_meta = call("GET", &base, "kube-proxy/v1.30", &meta, None);
    assert_eq!(listed_meta.status, 404, "{}", listed_meta.text());
    assert!(listed_meta.text().contains("not cached for kube-proxy"));
}

/// kubelet's list of an `optional: true` ConfigMap that does not exist: answered empty
/// offline, after a reboot too, as the cloud answered it (a 404 would keep kubelet from ever
/// starting the pod); a name it never listed is still not known.
#[test]
fn offline_a_missing_name_listed_empty_stays_empty_across_a_restart() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "present", "namespace": "default"}, "data": {"a": "1"}}),
    );
    let dir = TempDir::new("offline-scope-absent");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let hub = Hub::start(&spec);
    let ns = format!("{}/api/v1/namespaces/default/configmaps", hub.url());
    let missing = format!("{ns}?fieldSelector=metadata.name%3Dmissing");
    let online = get(&missing, KUBELET);
    assert_eq!(online.status, 200, "{}", online.text());
    let online = online.json();
    assert_eq!(item_names(&online).len(), 0, "{online}");
    let rv = online["metadata"]["resourceVersion"].clone();
    assert!(rv.is_string(), "{online}");
    // The record holds it before the power goes (it is written at once).
    let record = spec.cache_dir.join(".synced");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(&record)
            .is_ok_and(|text| text.contains(r#""name":"missing""#))),
        "{}",
        hub.logs()
    );
    cloud.stop();
    let hub = hub.restart();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    // The restarted hub listens on other ports.
    let ns = format!("{}/api/v1/namespaces/default/configmaps", hub.url());
    let missing = format!("{ns}?fieldSelector=metadata.name%3Dmissing");
    let offline = get(&missing, KUBELET);
    assert_eq!(offline.status, 200, "{}", offline.text());
    let offline = offline.json();
    assert_eq!(item_names(&offline).len(), 0, "{offline}");
    assert_eq!(offline["metadata"]["resourceVersion"], rv, "{offline}");
    // A name never listed: not known to be absent.
    let never = get(
        &format!("{ns}?fieldSelector=metadata.name%3Dnever"),
        KUBELET,
    );
    assert_eq!(never.status, 404, "{}", never.text());
}
