//! Issue 31, item 5: YurtHub's OTA routes on the serve port. `POST …/pods/{pod}/upgrade`
//! deletes a DaemonSet's pod of this node that has a pending update, so its DaemonSet brings
//! the new revision; `…/imagepull` marks the pod's next revision for the image pre-pull
//! with a merge patch of its status. Both ask the cloud as the hub, and answer YurtHub's
//! codes (500 for a missing pod, 403 for another node's pod or no pending update, 400 for a
//! pod without owners, 503 offline) as Status JSON; one call at a time, another meanwhile 429.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, RecordedRequest};

/// The revision the pods are to go to.
const NEXT: &str = "controllerrevision: v2";

/// A pod of `node` owned by `owner` (a kind, or no owner) with `conditions` (type, status,
/// message).
fn pod(name: &str, node: &str, owner: Option<&str>, conditions: &[(&str, &str, &str)]) -> Value {
    let owners: Vec<Value> = owner
        .map(|kind| json!({"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "u-1"}))
        .into_iter()
        .collect();
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(kind, status, message)| {
            json!({"type": kind, "status": status, "message": message,
                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "ownerReferences": owners},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"conditions": conditions},
    })
}

/// A pending update to [`NEXT`].
const PENDING: (&str, &str, &str) = ("PodNeedUpgrade", "True", NEXT);

/// Creates the pod in the cloud, its status as given.
fn create(cloud: &Cloud, pod: Value) {
    let created = cloud.create("pods", pod.clone());
    if created["status"]["conditions"] != pod["status"]["conditions"] {
        let mut with_status = created;
        with_status["status"] = pod["status"].clone();
        cloud.update_status("pods", with_status);
    }
}

/// The URL of the OTA route `action` of pod `default/name` on the serve port.
fn ota_url(hub: &Hub, name: &str, action: &str) -> String {
    format!(
        "{}/openyurt.io/v1/namespaces/default/pods/{name}/{action}",
        hub.serve_url()
    )
}

/// `method` on the OTA route `action` of pod `default/name` on the serve port.
fn ota(hub: &Hub, method: &str, name: &str, action: &str) -> Reply {
    call(method, &ota_url(hub, name, action), "curl/8", &[], None)
}

/// Asserts a refusal: `code` as a Status whose message holds `words`.
fn assert_refused(reply: &Reply, code: u16, words: &str, what: &str) {
    assert_eq!(reply.status, code, "{what}: {}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{what}"
    );
    let status = reply.json();
    assert_eq!(status["kind"], "Status", "{what}: {status}");
    assert_eq!(status["code"], code, "{what}: {status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains(words)),
        "{what}: {status} should say {words:?}"
    );
}

/// The hub's own requests the cloud saw with `method` on pod `name`'s paths.
fn hub_requests(cloud: &Cloud, method: &str, name: &str) -> Vec<RecordedRequest> {
    let path = format!("/api/v1/namespaces/default/pods/{name}");
    cloud
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.path.starts_with(&path))
        .collect()
}

/// The cloud's pods of the tests: one to act on and one for each refusal.
fn pods(cloud: &Cloud) {
    let image_ready = ("PodImageReady", "True", NEXT);
    create(
        cloud,
        pod("web", "edge-1", Some("DaemonSet"), &[PENDING, image_ready]),
    );
    create(
        cloud,
        pod("elsewhere", "edge-2", Some("DaemonSet"), &[PENDING]),
    );
    create(
        cloud,
        pod(
            "current",
            "edge-1",
            Some("DaemonSet"),
            &[("PodNeedUpgrade", "False", "")],
        ),
    );
    create(
        cloud,
        pod(
            "pulling",
            "edge-1",
            Some("DaemonSet"),
            &[PENDING, ("PodImageReady", "False", NEXT)],
        ),
    );
    create(cloud, pod("orphan", "edge-1", None, &[PENDING]));
    create(
        cloud,
        pod("nginx-edge-1", "edge-1", Some("Node"), &[PENDING]),
    );
}

#[test]
fn upgrade_deletes_a_daemonset_pod_with_a_pending_update_and_refuses_the_rest() {
    let cloud = Cloud::start();
    pods(&cloud);
    let dir = TempDir::new("ota-upgrade");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));

    let refusals = [
        ("ghost", 500, "Get pod failed"),
        ("elsewhere", 403, "is running on edge-2, can not be updated"),
        ("current", 403, "update status is False, can not be updated"),
        ("pulling", 403, "image is not ready"),
        ("orphan", 400, "Pod has no owner references"),
        // A static pod without its YurtStaticSet's ConfigMap.
        (
            "nginx-edge-1",
            403,
            "Configmap for static pod does not exist",
        ),
        ("Web", 400, "invalid pod name"),
    ];
    for (name, code, words) in refusals {
        let reply = ota(&hub, "POST", name, "upgrade");
        assert_refused(&reply, code, words, name);
    }
    // With the ConfigMap, a static pod is past YurtHub's checks but not tinyhub's to upgrade.
    cloud.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "yurt-static-set-nginx", "namespace": "default"}}),
    );
    let reply = ota(&hub, "POST", "nginx-edge-1", "upgrade");
    assert_refused(&reply, 501, "not supported by tinyhub", "static pod");
    // Another method is the port's 404.
    assert_eq!(ota(&hub, "GET", "web", "upgrade").status, 404);
    for name in [
        "elsewhere",
        "current",
        "pulling",
        "orphan",
        "nginx-edge-1",
        "web",
    ] {
        assert!(hub_requests(&cloud, "DELETE", name).is_empty(), "{name}");
        assert!(cloud.get("pods", "default", name).is_some(), "{name}");
    }

    let reply = ota(&hub, "POST", "web", "upgrade");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.text(), "Start updating pod default/web");
    let deletes = hub_requests(&cloud, "DELETE", "web");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    let delete = &deletes[0];
    assert_eq!(delete.path, "/api/v1/namespaces/default/pods/web");
    assert!(delete.user_agent.starts_with("tinyhub/"), "{delete:?}");
    assert_eq!(
        delete.client_cert_cn.as_deref(),
        Some("system:node:edge-1"),
        "as the hub"
    );
    assert!(cloud.get("pods", "default", "web").is_none());
}

#[test]
fn imagepull_patches_the_next_revision_into_the_pod_status_and_refuses_the_rest() {
    let cloud = Cloud::start();
    pods(&cloud);
    let dir = TempDir::new("ota-imagepull");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));

    let refusals = [
        ("ghost", 500, "Get pod failed"),
        ("elsewhere", 403, "is running on edge-2, can not be updated"),
        ("current", 403, "update status is False, can not be updated"),
    ];
    for (name, code, words) in refusals {
        let reply = ota(&hub, "POST", name, "imagepull");
        assert_refused(&reply, code, words, name);
        assert!(hub_requests(&cloud, "PATCH", name).is_empty(), "{name}");
    }
    assert_eq!(ota(&hub, "GET", "pulling", "imagepull").status, 404);

    // A pod whose pre-pull ran for the old revision is asked again for the next.
    let reply = ota(&hub, "POST", "pulling", "imagepull");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.text(),
        "Image pre-pull requested for pod default/pulling"
    );
    let patches = hub_requests(&cloud, "PATCH", "pulling");
    assert_eq!(patches.len(), 1, "{patches:?}");
    let patch = &patches[0];
    assert_eq!(patch.path, "/api/v1/namespaces/default/pods/pulling/status");
    assert_eq!(patch.query, "fieldManager=yurthub-ota");
    assert_eq!(patch.content_type, "application/merge-patch+json");
    assert_eq!(patch.status, Some(200), "{patch:?}");
    assert!(patch.user_agent.starts_with("tinyhub/"), "{patch:?}");
    let body: Value = serde_json::from_str(&patch.body).expect("a JSON patch");
    let conditions = body["status"]["conditions"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"));
    let image = |conditions: &[Value]| {
        conditions
            .iter()
            .find(|c| c["type"] == "PodImageReady")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let sent = image(conditions);
    assert_eq!(sent["status"], "False", "{body}");
    assert_eq!(sent["message"], NEXT, "{body}");
    assert!(
        conditions.iter().any(|c| c["type"] == "PodNeedUpgrade"),
        "the other conditions go too (a merge patch replaces the list): {body}"
    );
    let stored = cloud.get("pods", "default", "pulling").expect("the pod");
    let stored = image(stored["status"]["conditions"].as_array().unwrap());
    assert_eq!(
        (&stored["status"], &stored["message"]),
        (&json!("False"), &json!(NEXT))
    );

    // A pod with no pre-pull yet gets the condition added.
    let reply = ota(&hub, "POST", "orphan", "imagepull");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let stored = cloud.get("pods", "default", "orphan").expect("the pod");
    let conditions = stored["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 2, "{stored}");
    assert_eq!(image(conditions)["message"], NEXT, "{stored}");
}

#[test]
fn offline_both_routes_are_503() {
    let cloud = Cloud::start();
    pods(&cloud);
    let dir = TempDir::new("ota-offline");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(30)));
    for action in ["upgrade", "imagepull"] {
        let reply = ota(&hub, "POST", "web", action);
        assert_refused(
            &reply,
            503,
            "OTA upgrade is not allowed when node is disconnected to cloud",
            action,
        );
    }
}

#[test]
fn one_ota_call_at_a_time_and_the_health_checks_keep_their_slots() {
    let cloud = Cloud::start();
    pods(&cloud);
    let dir = TempDir::new("ota-one-at-a-time");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));

    // A slow cloud: the first call holds the OTA slot while its pod is read.
    cloud.set_delay(Duration::from_secs(3));
    let url = ota_url(&hub, "current", "upgrade");
    let first = std::thread::spawn(move || call("POST", &url, "curl/8", &[], None));
    let read = cloud.wait_for_request(
        |r| r.method == "GET" && r.path == "/api/v1/namespaces/default/pods/current",
        Duration::from_secs(20),
    );
    assert!(read.is_some(), "the first call asks the cloud for its pod");

    let second = ota(&hub, "POST", "pulling", "imagepull");
    assert_refused(&second, 429, "another OTA", "a second call meanwhile");
    assert_eq!(second.header("retry-after"), Some("1"));
    let health = get(&format!("{}/v1/healthz", hub.serve_url()), "curl/8");
    assert_eq!(health.status, 200, "{}", health.text());

    let first = first.join().expect("the first call's thread");
    assert_refused(&first, 403, "update status is False", "the first call");
    assert!(hub_requests(&cloud, "GET", "pulling").is_empty());

    // The slot is given back: the next call is answered.
    cloud.set_delay(Duration::ZERO);
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(30)));
    let reply = ota(&hub, "POST", "pulling", "imagepull");
    assert_eq!(reply.status, 200, "{}", reply.text());
}
