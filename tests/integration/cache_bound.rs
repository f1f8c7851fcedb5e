//! Issue 33: `--cache-max-bytes` — the cache's files stay within the bound; what goes first is
//! what no pod of this node needs (other components' lists, least recently synced first); the
//! node's pods, the Secrets and ConfigMaps they mount, the node and its lease are never
//! evicted; when even those do not fit, new kinds are not cached, with one error line and a
//! metric, and the hub keeps answering; a restart with a lower bound shrinks the cache.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const COREDNS: &str = "coredns/v1.11.1 (linux/arm) kubernetes/abcdef0";
const BOUND: u64 = 1 << 20;
const PODS: usize = 10;
const NODE_PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";
/// Bulk ConfigMaps, which kube-proxy and coredns list here (Services and EndpointSlices
/// would be answered offline from the pool's watch caches, not the disk).
const BULK: &str = "/api/v1/namespaces/bulk/configmaps";
const PROXY_DIR: &str = "kube-proxy/configmaps.v1.core";
/// The node's lease, which kubelet reads and renews.
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";
const COREDNS_DIR: &str = "coredns/configmaps.v1.core";

/// Pod `app/web-<i>` on `node`, mounting Secret `secret-<i>` as a volume, ConfigMap
/// `config-<i>` by `envFrom` and `kube-root-ca.crt` through a projected volume.
fn pod(i: usize, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}"), "namespace": "app"},
        "spec": {
            "nodeName": node,
            "volumes": [
                {"name": "s", "secret": {"secretName": format!("secret-{i}")}},
                {"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt"}}
                ]}}
            ],
            "containers": [{"name": "c", "image": "busybox",
                            "envFrom": [{"configMapRef": {"name": format!("config-{i}")}}]}]
        },
        "status": {"phase": "Running"}
    })
}

/// `n` bytes of payload.
fn pad(n: usize) -> String {
    "x".repeat(n)
}

/// A cloud with node `edge-1`, its [`PODS`] pods (and one of another node) with their Secrets
/// (`secret_bytes` each) and ConfigMaps, and `bulk` ConfigMaps of about 3 KB in namespace
/// `bulk`.
fn cloud(secret_bytes: usize, bulk: usize) -> Cloud {
    let cloud = Cloud::start();
    cloud.node("edge-1", None, &[]);
    cloud.create(
        "leases",
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
               "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40}}),
    );
    for i in 0..PODS {
        cloud.create("pods", pod(i, "edge-1"));
        cloud.create(
            "secrets",
            json!({"metadata": {"name": format!("secret-{i}"), "namespace": "app"},
                   "data": {"key": pad(secret_bytes)}}),
        );
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": format!("config-{i}"), "namespace": "app"},
                   "data": {"key": pad(1000)}}),
        );
    }
    cloud.create("pods", pod(99, "edge-2"));
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "kube-root-ca.crt", "namespace": "app"},
               "data": {"ca.crt": pad(1200)}}),
    );
    for i in 0..bulk {
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": format!("bulk-{i}"), "namespace": "bulk"},
                   "data": {"key": pad(3000)}}),
        );
    }
    cloud
}

/// What kubelet reads of its pods: its pod list, each pod's Secret and ConfigMaps, its node
/// and its lease.
fn kubelet_reads(hub: &Hub) -> Vec<String> {
    let mut paths = vec![
        NODE_PODS.to_owned(),
        "/api/v1/nodes/edge-1".to_owned(),
        LEASE.to_owned(),
    ];
    paths.push("/api/v1/namespaces/app/configmaps/kube-root-ca.crt".to_owned());
    for i in 0..PODS {
        paths.push(format!("/api/v1/namespaces/app/secrets/secret-{i}"));
        paths.push(format!("/api/v1/namespaces/app/configmaps/config-{i}"));
    }
    for path in &paths {
        let r = get(&format!("{}{path}", hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{path}");
    }
    paths
}

/// Every path of [`kubelet_reads`] answered (offline too) as the cloud answered it; the pod
/// list with this node's pods only.
fn kubelet_served(hub: &Hub, paths: &[String]) {
    for path in paths {
        let r = get(&format!("{}{path}", hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{path}\n{}", hub.logs());
        if path == NODE_PODS {
            assert_eq!(item_names(&r.json()).len(), PODS, "{path}");
        }
    }
}

/// The bytes of the regular files under `dir`, as `du --apparent-size` would count them
/// (the lock's note too, the operator's quarantine aside); links are not followed.
fn cache_bytes(dir: &Path) -> u64 {
    let mut sum = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && entry.file_name() != ".quarantine" {
            sum += cache_bytes(&entry.path());
        } else if kind.is_file() {
            sum += entry.metadata().map_or(0, |m| m.len());
        }
    }
    sum
}

/// A list by `ua` through `hub`, read whole, and the writer quiet after it.
fn list(hub: &Hub, path: &str, ua: &str) -> u16 {
    let r = get(&format!("{}{path}", hub.url()), ua);
    hub.wait_cache_quiet();
    r.status
}

fn evictions(hub: &Hub, tier: &str) -> f64 {
    hub.metric(&format!("tinyhub_cache_evictions_total{{tier=\"{tier}\"}}"))
        .unwrap_or(0.0)
}

#[test]
fn the_bound_evicts_what_no_pod_needs_and_the_nodes_pods_are_served_offline() {
    // About 600 KB listed by kube-proxy, then the same by coredns: both do not fit in 1 MiB
    // beside kubelet's ~50 KB.
    let cloud = cloud(2000, 200);
    let dir = TempDir::new("bound-evicts");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-max-bytes=1Mi"]);
    let hub = Hub::start(&spec);
    let cache = hub.spec.cache_dir.clone();
    let paths = kubelet_reads(&hub);
    assert_eq!(list(&hub, BULK, KUBE_PROXY), 200);
    assert!(cache.join(PROXY_DIR).exists(), "{}", hub.logs());
    assert_eq!(evictions(&hub, "other-components"), 0.0);
    assert_eq!(list(&hub, BULK, COREDNS), 200);

    // kube-proxy's, the least recently synced list, made room for coredns's.
    let bytes = cache_bytes(&cache);
    assert!(
        bytes <= BOUND,
        "{bytes} bytes under the cache\n{}",
        hub.logs()
    );
    assert!(cache.join(COREDNS_DIR).exists(), "{}", hub.logs());
    assert!(!cache.join(PROXY_DIR).exists());
    assert!(evictions(&hub, "other-components") >= 1.0);
    assert!(hub.metric("tinyhub_cache_evicted_bytes_total").unwrap() >= 500_000.0);
    assert_eq!(hub.metric("tinyhub_cache_max_bytes"), Some(BOUND as f64));
    assert_eq!(hub.metric("tinyhub_cache_over_bound_bytes"), Some(0.0));
    let relist = read_json(&cache.join(".relist")).expect("a relist record");
    assert!(
        relist["collections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["component"] == "kube-proxy"
                && m["kind"] == "configmaps.v1.core"
                && m["reason"] == "evicted"),
        "{relist}"
    );
    // The figures the hub keeps are the disk's: a record (`.synced`) written between the
    // scrape and the walk changes both, so the walk is taken between two scrapes that agree.
    let counted = || -> u64 {
        get(&format!("{}/metrics", hub.serve_url()), "test")
            .text()
            .lines()
            .filter(|l| l.starts_with("tinyhub_cache_bytes{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let mut seen = (0, 0);
    let exact = eventually(Duration::from_secs(10), || {
        let before = counted();
        let walked = cache_bytes(&cache);
        seen = (before, walked);
        before == walked && counted() == before
    });
    assert!(exact, "metrics {} bytes, the disk {}", seen.0, seen.1);

    // The cloud gone: kubelet's pods, what they mount and the node answer; kube-proxy's
    // evicted list is not cached.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(20)));
    kubelet_served(&hub, &paths);
    let r = get(&format!("{}{BULK}", hub.url()), KUBE_PROXY);
    assert_eq!(r.status, 404, "kube-proxy's evicted list");
    let r = get(&format!("{}{BULK}", hub.url()), COREDNS);
    assert_eq!(item_names(&r.json()).len(), 200);
}

#[test]
fn a_bound_below_what_the_pods_need_refuses_other_kinds_and_keeps_kubelet_served() {
    // 10 Secrets of 120 KB: the protected set alone is past 1 MiB.
    let cloud = cloud(120_000, 20);
    let dir = TempDir::new("bound-refuses");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-max-bytes=1Mi"]);
    let hub = Hub::start(&spec);
    let cache = hub.spec.cache_dir.clone();
    let paths = kubelet_reads(&hub);
    hub.wait_cache_quiet();
    for i in 0..PODS {
        let secret = cache.join(format!("kubelet/secrets.v1.core/app/secret-{i}"));
        assert!(
            secret.exists(),
            "secret-{i} cached over the bound\n{}",
            hub.logs()
        );
    }
    assert!(hub.metric("tinyhub_cache_over_bound_bytes").unwrap() > 0.0);

    for _ in 0..2 {
        assert_eq!(list(&hub, BULK, KUBE_PROXY), 200, "answered, not cached");
    }
    assert!(!cache.join(PROXY_DIR).exists());
    let series = "tinyhub_cache_bound_refused_total{component=\"kube-proxy\",resource=\"configmaps.v1.core\"}";
    assert!(hub.metric(series).unwrap_or(0.0) >= 2.0, "{}", hub.logs());
    let line = "cache: over --cache-max-bytes (1Mi): not caching kube-proxy/configmaps.v1.core";
    assert_eq!(hub.log_lines(|l| l.contains(line)), 1, "{}", hub.logs());

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(20)));
    kubelet_served(&hub, &paths);
    let r = get(
        &format!("{}/api/v1/namespaces/app/secrets/secret-3", hub.url()),
        KUBELET,
    );
    assert_eq!(
        r.json()["data"]["key"].as_str().map(str::len),
        Some(120_000)
    );
}

#[test]
fn a_restart_with_a_lower_bound_shrinks_the_cache_at_once() {
    let cloud = cloud(2000, 200);
    let dir = TempDir::new("bound-restart");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let hub = Hub::start(&spec);
    let paths = kubelet_reads(&hub);
    assert_eq!(list(&hub, BULK, KUBE_PROXY), 200);
    assert_eq!(list(&hub, BULK, COREDNS), 200);
    let cache = hub.spec.cache_dir.clone();
    assert!(cache_bytes(&cache) > BOUND, "no bound yet");
    drop(hub);

    cloud.stop();
    let hub = Hub::start(&spec.with(&["--cache-max-bytes=1Mi"]));
    assert!(
        eventually(Duration::from_secs(20), || evictions(
            &hub,
            "other-components"
        ) >= 1.0),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    let bytes = cache_bytes(&cache);
    assert!(
        bytes <= BOUND,
        "{bytes} bytes under the cache\n{}",
        hub.logs()
    );
    kubelet_served(&hub, &paths);
}

#[test]
fn an_evicted_collection_comes_back_only_by_a_whole_unscoped_list() {
    let cloud = cloud(2000, 200);
    let dir = TempDir::new("bound-refill");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-max-bytes=1Mi"]);
    let hub = Hub::start(&spec);
    let cache = hub.spec.cache_dir.clone();
    assert_eq!(list(&hub, BULK, KUBE_PROXY), 200);
    assert_eq!(list(&hub, BULK, COREDNS), 200);
    assert!(!cache.join(PROXY_DIR).exists(), "{}", hub.logs());

    // A GET, a watch's event and a namespace's list are answered, and cache nothing of the
    // evicted collection: offline, a part of it would be served as the whole.
    let one = format!("{}{BULK}/bulk-1", hub.url());
    assert_eq!(get(&one, KUBE_PROXY).status, 200);
    let watch = format!("{}{BULK}?watch=true&resourceVersion=0", hub.url());
    let (status, body) = stream(&watch, KUBE_PROXY);
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    let mut changed = cloud.get("configmaps", "bulk", "bulk-2").unwrap();
    changed["data"]["key"] = json!("changed");
    cloud.update("configmaps", changed);
    let seen = std::iter::from_fn(|| events.next_event())
        .take(400)
        .any(|e| e["object"]["data"]["key"] == "changed");
    assert!(seen, "the watch saw the change\n{}", hub.logs());
    assert_eq!(list(&hub, BULK, KUBE_PROXY), 200);
    hub.wait_cache_quiet();
    assert!(
        !cache.join(PROXY_DIR).exists(),
        "a part of an evicted collection was cached\n{}",
        hub.logs()
    );

    // A list of every namespace refills it whole, and clears its mark.
    assert_eq!(list(&hub, "/api/v1/configmaps", KUBE_PROXY), 200);
    assert!(
        cache.join(PROXY_DIR).join("bulk/bulk-199").exists(),
        "{}",
        hub.logs()
    );
    let relist = read_json(&cache.join(".relist")).unwrap_or(json!({}));
    let marked = relist["collections"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|m| m["component"] == "kube-proxy" && m["kind"] == "configmaps.v1.core");
    assert!(!marked, "{relist}");
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(20)));
    let r = get(&format!("{}{BULK}", hub.url()), KUBE_PROXY);
    assert_eq!(item_names(&r.json()).len(), 200, "{}", hub.logs());
}
