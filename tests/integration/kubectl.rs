//! Real clients nobody here wrote: `kubectl` through the hub, online against the stand-in
//! cloud and offline from the hub's cache (`--cache-agents=kubectl`).

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::kubectl::Kubectl;

/// The client's minor version (the dispatcher kubectl reports the version it runs).
fn minor_version() -> u32 {
    let out = Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["clientVersion"]["minor"]
        .as_str()
        .map(|m| m.trim_end_matches('+'))
        .and_then(|m| m.parse().ok())
        .unwrap_or(99)
}

fn seed(cloud: &Cloud) {
    cloud.create("pods", json!({"metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}}, "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "nginx"}]}}));
    cloud.create("pods", json!({"metadata": {"name": "dns-1", "namespace": "kube-system"}, "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "coredns"}]}}));
    cloud.create("configmaps", json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"greeting": "hello"}}));
}

#[test]
fn kubectl_through_the_hub_online() {
    let cloud = Cloud::start();
    seed(&cloud);
    let dir = TempDir::new("kubectl");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let k = Kubectl::new(dir.path(), &hub);

    let pods = k.ok(&["get", "pods", "-A"]);
    assert!(
        pods.contains("web-1") && pods.contains("dns-1") && pods.contains("kube-system"),
        "{pods}"
    );

    let yaml = k.ok(&["get", "configmap", "settings", "-o", "yaml"]);
    assert!(
        yaml.contains("greeting: hello") && yaml.contains("kind: ConfigMap"),
        "{yaml}"
    );

    // kubectl before 1.24 validates `apply` against /openapi/v2 in protobuf, which the
    // stand-in does not serve; Debian bookworm's own kubectl (the CI fallback) is 1.20.
    let apply: &[&str] = if minor_version() < 24 {
        &["apply", "--validate=false", "-f"]
    } else {
        &["apply", "-f"]
    };
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: default\ndata:\n  k: v1\n").unwrap();
    k.ok(&[apply, &[manifest.to_str().unwrap()]].concat());
    assert_eq!(
        cloud.get("configmaps", "default", "applied").unwrap()["data"]["k"],
        "v1"
    );
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: default\ndata:\n  k: v2\n").unwrap();
    k.ok(&[apply, &[manifest.to_str().unwrap()]].concat());
    assert_eq!(
        cloud.get("configmaps", "default", "applied").unwrap()["data"]["k"],
        "v2"
    );

    k.ok(&["create", "configmap", "created", "--from-literal=a=b"]);
    assert_eq!(
        cloud.get("configmaps", "default", "created").unwrap()["data"]["a"],
        "b"
    );

    k.ok(&["delete", "configmap", "created"]);
    assert!(cloud.get("configmaps", "default", "created").is_none());

    // get --watch prints the current objects, then changes as they happen, until the timeout.
    let watcher = {
        let kubeconfig = k.kubeconfig.clone();
        let cache = k.cache.clone();
        std::thread::spawn(move || {
            Kubectl { kubeconfig, cache }.run(&[
                "get",
                "configmaps",
                "--watch",
                "--request-timeout=6s",
            ])
        })
    };
    assert!(
        cloud.wait_for_watchers("configmaps", 2, Duration::from_secs(20)),
        "kubectl's watch reaches the cloud"
    );
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "seen-by-watch", "namespace": "default"}}),
    );
    let out = watcher.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("settings") && text.contains("seen-by-watch"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubectl_reads_from_the_cache_when_the_cloud_is_gone() {
    let cloud = Cloud::start();
    seed(&cloud);
    let dir = TempDir::new("kubectl-offline");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-agents=kubectl"]));
    let k = Kubectl::new(dir.path(), &hub);
    // Online reads as JSON are cached for the kubectl component (tables are not).
    let online = k.ok(&["get", "configmap", "settings", "-o", "json"]);
    assert!(online.contains("hello"));
    k.ok(&["get", "pods", "-A", "-o", "json"]);
    assert!(
        hub.wait_cached(
            &["kubectl/configmaps.v1.core/default/settings"],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    assert!(hub.wait_cached(
        &["kubectl/pods.v1.core/kube-system/dns-1"],
        Duration::from_secs(10)
    ));

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));

    let yaml = k.ok(&["get", "configmap", "settings", "-o", "yaml"]);
    assert!(yaml.contains("greeting: hello"), "{yaml}");
    let table = k.ok(&["get", "pods", "-A"]);
    assert!(
        table.contains("web-1") && table.contains("dns-1"),
        "{table}"
    );
    let labelled = k.ok(&["get", "pods", "-A", "-l", "app=web", "-o", "name"]);
    assert_eq!(labelled.trim(), "pod/web-1");
    let missing = k.run(&["get", "configmap", "never-cached"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}
