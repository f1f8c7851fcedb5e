//! YurtHub's serve-port extras: `GET /pods` (kubelet's cached pods as a PodList, online and
//! offline), the endpoints tinyhub does not implement answered 501 with why (the OTA routes
//! are in `ota.rs`), and SIGUSR1's
//! dump of the threads under `--root-dir`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

fn pod(namespace: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    })
}

/// `GET /pods` on the serve port: checked to be a PodList; its items' `namespace/name`,
/// sorted.
fn served_pods(hub: &Hub) -> Vec<String> {
    let reply = get(&format!("{}/pods", hub.serve_url()), "curl/8");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let list = reply.json();
    assert_eq!(list["kind"], "PodList", "{list}");
    assert_eq!(list["apiVersion"], "v1", "{list}");
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("items is an array: {list}"))
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or(""),
                p["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    names.sort();
    names
}

/// Kubelet lists its node's pods through the hub (which caches them).
fn kubelet_lists_its_pods(hub: &Hub) {
    let url = format!(
        "{}/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
        hub.url()
    );
    assert_eq!(get(&url, KUBELET).status, 200);
}

#[test]
fn pods_lists_what_kubelet_listed_through_the_hub_online_and_offline() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("default", "web", "edge-1"));
    cloud.create("pods", pod("kube-system", "proxy", "edge-1"));
    cloud.create("pods", pod("default", "elsewhere", "edge-2"));
    let dir = TempDir::new("serve-pods");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    kubelet_lists_its_pods(&hub);
    assert!(hub.wait_cached(
        &[
            "kubelet/pods.v1.core/default/web",
            "kubelet/pods.v1.core/kube-system/proxy"
        ],
        Duration::from_secs(30)
    ));
    hub.wait_cache_quiet();
    let want = ["default/web", "kube-system/proxy"];
    assert_eq!(served_pods(&hub), want);

    // A pod kubelet sees deleted leaves the list too.
    cloud.delete("pods", "kube-system", "proxy");
    kubelet_lists_its_pods(&hub);
    assert!(eventually(Duration::from_secs(30), || served_pods(&hub)
        == ["default/web"]));

    // With the cloud gone, the same answer from the cache.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(30)));
    assert_eq!(served_pods(&hub), ["default/web"]);
}

#[test]
fn pods_of_a_cache_without_pods_is_an_empty_pod_list() {
    let cloud = Cloud::start();
    let dir = TempDir::new("serve-no-pods");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    assert_eq!(served_pods(&hub), Vec::<String>::new());
    // Not a pod list of the proxy port's rules: kubelet's empty list there is a 404 offline.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(30)));
    assert_eq!(served_pods(&hub), Vec::<String>::new());
}

#[test]
fn what_the_serve_port_does_not_implement_is_a_501_saying_why() {
    let cloud = Cloud::start();
    let dir = TempDir::new("serve-501");
    let cloud_dir = dir.path().join("cloud");
    std::fs::create_dir_all(&cloud_dir).unwrap();
    let edge = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cloud_mode =
        Hub::start(&HubSpec::for_cloud(&cloud, &cloud_dir).with(&["--working-mode=cloud"]));
    // The OTA routes are no longer among them (tests/integration/ota.rs).
    let cases = [
        (&edge, "GET", "/debug/pprof/heap", "pprof"),
        (&cloud_mode, "GET", "/pods", "cloud mode"),
    ];
    for (hub, method, path, why) in cases {
        let reply = call(
            method,
            &format!("{}{path}", hub.serve_url()),
            "curl/8",
            &[],
            None,
        );
        assert_eq!(reply.status, 501, "{method} {path}: {}", reply.text());
        let status = reply.json();
        assert_eq!(status["kind"], "Status");
        assert!(
            status["message"].as_str().is_some_and(|m| m.contains(why)),
            "{method} {path}: {status}"
        );
    }
    // Anything else stays a 404.
    let reply = get(
        &format!("{}/openyurt.io/v1/other", edge.serve_url()),
        "curl/8",
    );
    assert_eq!(reply.status, 404);
}

#[test]
fn sigusr1_dumps_the_threads_under_the_root_dir_and_the_hub_runs_on() {
    let cloud = Cloud::start();
    let dir = TempDir::new("sigusr1");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let hub = Hub::start(&spec);
    let dump = spec
        .root_dir
        .join(format!("tinyhub.{}.threads.log", hub.pid()));
    signal(hub.pid(), "USR1");
    assert!(
        hub.wait_log("SIGUSR1: ", Duration::from_secs(30)),
        "{}",
        hub.logs()
    );
    assert!(
        hub.logs().contains(&dump.display().to_string()),
        "{}",
        hub.logs()
    );
    let text = std::fs::read_to_string(&dump).expect("the dump");
    assert!(text.starts_with("tinyhub "), "{text}");
    let threads = text.lines().filter(|l| l.starts_with("tid ")).count();
    assert!(threads >= 5, "{text}");
    if !emulated() {
        // Every hub thread is named (under qemu the names are the emulator's).
        for name in ["\"cache-writer\"", "\"serve\"", "\"proxy\""] {
            assert!(text.contains(name), "{name} in {text}");
        }
    }
    // Not a termination signal: the hub answers on.
    assert_eq!(
        get(&format!("{}/v1/healthz", hub.serve_url()), "curl/8").status,
        200
    );
    assert!(!hub.logs().contains("shutting down"), "{}", hub.logs());
}
