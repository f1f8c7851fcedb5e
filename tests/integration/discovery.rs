//! Issue 11 item 6: discovery offline for today's clients. kubectl ≥ 1.26 and client-go ask for
//! `/api` and `/apis` in aggregated form (`apidiscovery.k8s.io` `v2`, `v2beta1` as a fallback,
//! plain JSON last); the hub keeps each form it saw apart and answers each client offline with
//! the first form its `Accept` takes, or 406 as the apiserver does — never 404.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, write_plain_kubeconfig};

/// The Accept of client-go's discovery (kubectl 1.26–1.34).
const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

fn get_accept(url: &str, accept: &str) -> Reply {
    call("GET", url, KUBELET, &[("Accept", accept)], None)
}

/// The group names of an `APIGroupDiscoveryList` or an `APIGroupList`.
fn group_names(doc: &Value) -> Vec<String> {
    let list = doc["items"].as_array().or(doc["groups"].as_array());
    list.unwrap_or_else(|| panic!("no groups in {doc}"))
        .iter()
        .map(|g| {
            g["metadata"]["name"]
                .as_str()
                .or(g["name"].as_str())
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

#[test]
fn each_discovery_form_is_cached_and_answered_offline_as_the_client_asks() {
    let cloud = Cloud::start();
    let dir = TempDir::new("discovery");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());

    // Online: the stand-in answers like an apiserver, and the hub passes kubectl's Accept on.
    let mut online = Vec::new();
    for path in ["/api", "/apis"] {
        let aggregated = get_accept(&url(path), KUBECTL_ACCEPT);
        assert_eq!(aggregated.status, 200, "{path}: {}", aggregated.text());
        assert_eq!(aggregated.header("content-type"), Some(V2), "{path}");
        assert_eq!(aggregated.json()["kind"], "APIGroupDiscoveryList", "{path}");
        let legacy = get_accept(&url(path), "application/json");
        assert_eq!(legacy.header("content-type"), Some("application/json"));
        online.push((path, aggregated.json(), legacy.json()));
    }
    assert_eq!(online[1].2["kind"], "APIGroupList");
    assert_eq!(online[0].2["kind"], "APIVersions");
    // Only /apis is ever read in v2beta1.
    let beta = get_accept(&url("/apis"), V2BETA1);
    assert_eq!(beta.header("content-type"), Some(V2BETA1));
    assert_eq!(beta.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert!(
        hub.wait_cached(
            &[
                "_api",
                "_apis",
                "_api.aggregated.v2",
                "_apis.aggregated.v2",
                "_apis.aggregated.v2beta1"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    // kubectl's Accept gets v2, the legacy Accept the legacy document: the online bodies.
    for (path, aggregated, legacy) in &online {
        let a = get_accept(&url(path), KUBECTL_ACCEPT);
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        assert_eq!(a.header("content-type"), Some(V2), "{path}");
        assert_eq!(&a.json(), aggregated, "{path}");
        assert_eq!(a.header("vary"), Some("Accept"), "{path}");
        for accept in ["application/json", "*/*"] {
            let l = get_accept(&url(path), accept);
            assert_eq!(l.status, 200, "{path} {accept}");
            assert_eq!(l.header("content-type"), Some("application/json"));
            assert_eq!(&l.json(), legacy, "{path} {accept}");
        }
        // Only the aggregated form is accepted: it is given.
        let only = get_accept(&url(path), V2);
        assert_eq!(only.header("content-type"), Some(V2), "{path}");
        assert_eq!(&only.json(), aggregated);
    }
    assert!(group_names(&online[1].1).contains(&"apps".to_owned()));

    // The client's order is respected: v2beta1 first (cached for /apis) wins over v2 ...
    let beta_first = get_accept(&url("/apis"), &format!("{V2BETA1},{V2},application/json"));
    assert_eq!(beta_first.header("content-type"), Some(V2BETA1));
    assert_eq!(
        beta_first.json()["apiVersion"],
        "apidiscovery.k8s.io/v2beta1"
    );
    // ... and falls through to v2 where v2beta1 was never read.
    let fallback = get_accept(&url("/api"), &format!("{V2BETA1},{V2},application/json"));
    assert_eq!(fallback.header("content-type"), Some(V2));
    // q-values order the ranges as the apiserver orders them.
    let low = get_accept(&url("/apis"), &format!("{V2};q=0.5,application/json"));
    assert_eq!(low.header("content-type"), Some("application/json"));
    assert_eq!(low.json()["kind"], "APIGroupList");
    let high = get_accept(&url("/apis"), &format!("application/json;q=0.9,{V2}"));
    assert_eq!(high.header("content-type"), Some(V2));

    // Only a form that was never read: 406 NotAcceptable as the apiserver says it, not 404.
    let refused = get_accept(&url("/api"), V2BETA1);
    assert_eq!(refused.status, 406, "{}", refused.text());
    let status = refused.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotAcceptable");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("only the following media types are accepted: ")
            && message.contains("application/json"),
        "{message}"
    );
}

#[test]
fn discovery_never_read_is_unavailable_not_missing() {
    let cloud = Cloud::start();
    let dir = TempDir::new("discovery-cold");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    // A 404 for /api tells client-go the server has no core group; the hub does not know.
    for path in ["/api", "/apis"] {
        for accept in [KUBECTL_ACCEPT, V2, "application/json"] {
            let r = get_accept(&format!("{}{path}", hub.url()), accept);
            assert_eq!(r.status, 503, "{path} {accept}: {}", r.text());
            assert_eq!(r.json()["reason"], "ServiceUnavailable");
        }
    }
}

#[test]
fn a_plain_json_client_is_never_refused_when_only_the_aggregated_form_is_cached() {
    let cloud = Cloud::start();
    let dir = TempDir::new("discovery-aggregated-only");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |p: &str| format!("{}{p}", hub.url());
    // Only kubectl read discovery: only the v2 form is cached.
    for path in ["/api", "/apis"] {
        assert_eq!(get_accept(&url(path), V2).status, 200, "{path}");
    }
    assert!(hub.wait_cached(
        &["_api.aggregated.v2", "_apis.aggregated.v2"],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    for path in ["/api", "/apis"] {
        // An apiserver never says 406 to a client that takes plain JSON: the hub only
        // lacks the document, as if it had never read it.
        for accept in [
            "application/json",
            "*/*",
            "application/vnd.kubernetes.protobuf, application/json",
        ] {
            let r = get_accept(&url(path), accept);
            assert_eq!(r.status, 503, "{path} {accept}: {}", r.text());
            assert_eq!(r.json()["reason"], "ServiceUnavailable");
        }
        // A client that takes only aggregated forms gets the one cached, or the 406 an
        // apiserver without that form says (client-go then falls back).
        let v2 = get_accept(&url(path), V2);
        assert_eq!(v2.header("content-type"), Some(V2), "{path}");
        let refused = get_accept(&url(path), V2BETA1);
        assert_eq!(refused.status, 406, "{path}: {}", refused.text());
        assert_eq!(refused.json()["reason"], "NotAcceptable");
    }
}

#[test]
fn kubectl_with_a_cold_discovery_cache_works_offline() {
    let cloud = Cloud::start();
    cloud.create("pods", json!({"metadata": {"name": "web-1", "namespace": "default"}, "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "nginx"}]}}));
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "b"}}),
    );
    let dir = TempDir::new("discovery-kubectl");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-agents=kubectl"]));
    let kubeconfig = write_plain_kubeconfig(dir.path(), "kubectl.kubeconfig", &hub.url());
    // Each run has a fresh HOME and kubectl cache: discovery comes from the hub every time,
    // as for any component after a reboot.
    let kubectl = |args: &[&str]| {
        let home = TempDir::new("discovery-home");
        let out = kubectl_command(&kubeconfig, &home.path().join("cache"), home.path())
            .args(args)
            .output()
            .expect("kubectl is installed (Debian package kubectl; .ci/run installs it)");
        (
            out.status.success(),
            format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let ok = |args: &[&str]| {
        let (success, out) = kubectl(args);
        assert!(success, "kubectl {args:?}: {out}\n{}", hub.logs());
        out
    };

    // Warm-up online: JSON reads are cached for the kubectl component (tables are not).
    assert!(ok(&["get", "pods", "-o", "json"]).contains("web-1"));
    assert!(ok(&["get", "configmaps", "-o", "json"]).contains("settings"));
    // An empty namespace, listed whole: offline it is known empty (one never listed is
    // not cached, issue 35).
    ok(&["get", "configmaps", "-n", "kube-system", "-o", "json"]);
    assert!(
        hub.wait_cached(
            &[
                "kubectl/pods.v1.core/default/web-1",
                "kubectl/configmaps.v1.core/default/settings"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    let pods = ok(&["get", "pods"]);
    assert!(pods.contains("web-1"), "{pods}");
    let cms = ok(&["get", "cm", "-o", "name"]);
    assert!(cms.contains("configmap/settings"), "{cms}");
    // An empty list still says its kind (from the aggregated document: kubectl read no other).
    let none = ok(&["get", "cm", "-n", "kube-system"]);
    assert!(none.contains("No resources found"), "{none}");
    let cached = |name: &str| Path::new(&hub.spec.cache_dir).join(name).exists();
    assert!(cached("_api.aggregated.v2") && cached("_apis.aggregated.v2"));
}
