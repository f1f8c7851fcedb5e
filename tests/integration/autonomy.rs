//! Issue 31 item 4: kubelet's GET of its node carries the node's `Autonomy` condition, as
//! YurtHub keeps it: False while autonomy is off, True while it is on and the cache stores
//! what it is given, Unknown once cache writes have failed at more than 3 checks in a row. A
//! change is PUT to the node's status, once; offline kubelet gets the cached node with the
//! condition set, and nothing is stored or sent.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

const STATUS_PATH: &str = "/api/v1/nodes/edge-1/status";

/// A cloud with the node `edge-1` (an edge worker of `pool-a`) and a hub for it.
fn start(tag: &str) -> (Cloud, TempDir, HubSpec, Hub) {
    start_with(tag, &[])
}

/// [`start`] with the hub's extra flags `args`.
fn start_with(tag: &str, args: &[&str]) -> (Cloud, TempDir, HubSpec, Hub) {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    let dir = TempDir::new(tag);
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.args.extend(args.iter().map(|a| a.to_string()));
    let hub = Hub::start(&spec);
    (cloud, dir, spec, hub)
}

/// The node's annotations and labels merged into the cloud's node (null removes one).
fn annotate(cloud: &Cloud, annotations: Value, labels: Value) {
    cloud.patch(
        "nodes",
        "",
        "edge-1",
        json!({"metadata": {"annotations": annotations, "labels": labels}}),
    );
}

/// kubelet's GET of its node through the hub: the node.
fn kubelet_get(hub: &Hub) -> Value {
    let r = get(&format!("{}/api/v1/nodes/edge-1", hub.url()), KUBELET);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), hub.logs());
    r.json()
}

/// The node's Autonomy condition.
fn autonomy(node: &Value) -> Option<&Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Autonomy")
}

/// The status of the node's Autonomy condition ("" when it has none).
fn status(node: &Value) -> &str {
    autonomy(node)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

/// The PUTs of the node's status the cloud received.
fn puts(cloud: &Cloud) -> usize {
    cloud.count(|r| r.method == "PUT" && r.path == STATUS_PATH)
}

/// The node as the hub's cache holds it for kubelet.
fn cached(cache: &Path) -> Option<Value> {
    let bytes = std::fs::read(cache.join("kubelet/nodes.v1.core/edge-1")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Each annotation form gives its condition; a change is one PUT with the hub's identity, a
/// GET that changes nothing is none; the cache holds the cloud's node after the PUT.
/// The cloud answers the next PUT of the node's status 500.
fn refuse_the_next_write(cloud: &Cloud) {
    let refusal = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}"#;
    cloud.misanswer(STATUS_PATH, 1, 500, refusal);
}

/// Waits until the cache holds the cloud's node at its current resourceVersion, and checks
/// that it has no Autonomy condition (the cloud refused the write); returns that version.
fn cached_without_the_condition(cloud: &Cloud, cache: &Path) -> Value {
    let rv = cloud.get("nodes", "", "edge-1").unwrap()["metadata"]["resourceVersion"].clone();
    assert!(
        eventually(Duration::from_secs(20), || cached(cache)
            .is_some_and(|c| c["metadata"]["resourceVersion"] == rv)),
        "{:?}",
        cached(cache)
    );
    assert_eq!(status(&cached(cache).unwrap()), "");
    rv
}

#[test]
fn each_annotation_form_gives_its_condition_with_one_put_per_change() {
    let (cloud, _dir, spec, hub) = start("autonomy-forms");
    let cases: [(&str, Value, Value, &str, usize); 7] = [
        ("no annotation", json!({}), json!({}), "False", 1),
        (
            "autonomy true",
            json!({"node.beta.openyurt.io/autonomy": "true"}),
            json!({}),
            "True",
            1,
        ),
        // Still True, now by the duration alone: nothing to write.
        (
            "duration 0",
            json!({"node.beta.openyurt.io/autonomy": null, "node.openyurt.io/autonomy-duration": "0"}),
            json!({}),
            "True",
            0,
        ),
        (
            "duration bogus",
            json!({"node.openyurt.io/autonomy-duration": "bogus"}),
            json!({}),
            "False",
            1,
        ),
        (
            "duration 10m",
            json!({"node.openyurt.io/autonomy-duration": "10m"}),
            json!({}),
            "True",
            1,
        ),
        (
            "not an edge worker",
            json!({"node.beta.openyurt.io/autonomy": "true"}),
            json!({"openyurt.io/is-edge-worker": "false"}),
            "False",
            1,
        ),
        (
            "an edge worker again",
            json!({}),
            json!({"openyurt.io/is-edge-worker": "true"}),
            "True",
            1,
        ),
    ];
    for (case, annotations, labels, want, new_puts) in cases {
        annotate(&cloud, annotations, labels);
        let before = puts(&cloud);
        let node = kubelet_get(&hub);
        assert_eq!(status(&node), want, "{case}: {node}");
        assert_eq!(puts(&cloud), before + new_puts, "{case}");
        // The cloud holds it, and kubelet got the cloud's node.
        let in_cloud = cloud.get("nodes", "", "edge-1").unwrap();
        assert_eq!(status(&in_cloud), want, "{case}: {in_cloud}");
        assert_eq!(
            node["metadata"]["resourceVersion"], in_cloud["metadata"]["resourceVersion"],
            "{case}"
        );
        // Asked again with nothing changed: no PUT.
        assert_eq!(status(&kubelet_get(&hub)), want, "{case}");
        assert_eq!(
            puts(&cloud),
            before + new_puts,
            "{case}: a second GET wrote"
        );
        // The cache holds the cloud's node.
        assert!(
            eventually(Duration::from_secs(20), || cached(&spec.cache_dir)
                .is_some_and(
                    |c| c["metadata"]["resourceVersion"] == in_cloud["metadata"]["resourceVersion"]
                )),
            "{case}: {:?}",
            cached(&spec.cache_dir)
        );
    }
    let condition = autonomy(&kubelet_get(&hub)).unwrap().clone();
    assert_eq!(condition["reason"], "autonomy enabled successfully");
    assert_eq!(
        condition["message"],
        "The autonomy is enabled and it works fine"
    );
    assert!(condition["lastTransitionTime"].is_string(), "{condition}");
    // The writes went as the hub, not as kubelet.
    let writes: Vec<_> = cloud
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path == STATUS_PATH)
        .collect();
    assert_eq!(writes.len(), 6);
    for w in &writes {
        assert!(w.user_agent.starts_with("tinyhub/"), "{}", w.user_agent);
        assert_eq!(w.client_cert_cn.as_deref(), Some("system:node:edge-1"));
    }
}

/// Cache writes failing at more than 3 checks in a row say Unknown with the failure's
/// message; stored again, True.
#[test]
fn a_failing_cache_gives_unknown_after_three_checks() {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    annotate(
        &cloud,
        json!({"node.beta.openyurt.io/autonomy": "true"}),
        json!({}),
    );
    cloud.create(
        "pods",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "keys-0"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
        }),
    );
    let dir = TempDir::new("autonomy-failing");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    // A file where the namespace's directory of kubelet's pods must go: writes under it fail.
    let kind_dir = spec.cache_dir.join("kubelet/pods.v1.core");
    std::fs::create_dir_all(&kind_dir).unwrap();
    std::fs::write(kind_dir.join("keys-0"), b"in the way").unwrap();
    let hub = Hub::start(&spec);
    assert_eq!(status(&kubelet_get(&hub)), "True");
    assert_eq!(puts(&cloud), 1);

    let pod_url = format!("{}/api/v1/namespaces/keys-0/pods/p1", hub.url());
    assert_eq!(get(&pod_url, KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        1.0,
        Duration::from_secs(20)
    ));
    // Checks 1 to 3 leave it True.
    for check in 1..=3 {
        assert_eq!(status(&kubelet_get(&hub)), "True", "check {check}");
    }
    assert_eq!(puts(&cloud), 1);
    let node = kubelet_get(&hub);
    let condition = autonomy(&node).unwrap();
    assert_eq!(condition["status"], "Unknown", "{node}");
    assert_eq!(condition["reason"], "cache failed");
    let message = condition["message"].as_str().unwrap();
    assert!(message.contains("keys-0"), "{message}");
    assert_eq!(puts(&cloud), 2);
    assert_eq!(
        status(&cloud.get("nodes", "", "edge-1").unwrap()),
        "Unknown"
    );

    // The way cleared and the pod stored: True at the next check.
    std::fs::remove_file(kind_dir.join("keys-0")).unwrap();
    assert_eq!(get(&pod_url, KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        0.0,
        Duration::from_secs(20)
    ));
    assert_eq!(status(&kubelet_get(&hub)), "True");
    assert_eq!(puts(&cloud), 3);
}

/// A refused PUT: kubelet still gets the condition, the cache keeps the cloud's node without
/// it; a conflict reads the node again and writes once more. Offline kubelet gets the cached
/// node with the condition set, which is neither stored nor sent.
#[test]
fn refused_writes_and_offline_answers_set_the_condition_in_the_answer_only() {
    let (cloud, _dir, spec, hub) = start("autonomy-offline");
    annotate(
        &cloud,
        json!({"node.beta.openyurt.io/autonomy": "true"}),
        json!({}),
    );
    refuse_the_next_write(&cloud);
    let node = kubelet_get(&hub);
    assert_eq!(status(&node), "True", "{node}");
    assert_eq!(puts(&cloud), 1);
    assert_eq!(status(&cloud.get("nodes", "", "edge-1").unwrap()), "");
    assert!(hub.wait_log(
        "cannot write the node's Autonomy condition",
        Duration::from_secs(5)
    ));
    let rv = cached_without_the_condition(&cloud, &spec.cache_dir);

    // Offline: the cached node, with the condition in the answer only.
    let puts_online = puts(&cloud);
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    let before = std::fs::read(spec.cache_dir.join("kubelet/nodes.v1.core/edge-1")).unwrap();
    let offline = kubelet_get(&hub);
    let condition = autonomy(&offline).unwrap();
    assert_eq!(condition["status"], "True", "{offline}");
    assert_eq!(condition["reason"], "autonomy enabled successfully");
    assert_eq!(offline["metadata"]["resourceVersion"], rv);
    assert_eq!(status(&kubelet_get(&hub)), "True");
    assert_eq!(
        std::fs::read(spec.cache_dir.join("kubelet/nodes.v1.core/edge-1")).unwrap(),
        before,
        "the offline answer was stored"
    );

    // Back online: a conflict is read again and written once more.
    cloud.restart();
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(15)));
    let before = puts(&cloud);
    assert_eq!(
        before, puts_online,
        "a write of the offline answer reached the cloud"
    );
    cloud.misanswer(STATUS_PATH, 1, 409, br#"{"kind":"Status","code":409}"#);
    let node = kubelet_get(&hub);
    assert_eq!(status(&node), "True", "{node}");
    assert_eq!(puts(&cloud), before + 2);
    let in_cloud = cloud.get("nodes", "", "edge-1").unwrap();
    assert_eq!(status(&in_cloud), "True");
    assert_eq!(
        node["metadata"]["resourceVersion"],
        in_cloud["metadata"]["resourceVersion"]
    );
}

/// Only kubelet's GET of this node, as the node, carries the condition: another node, another
/// component, the status subresource or a client with its own credential get the cloud's
/// node as it is, and nothing is written.
#[test]
fn only_kubelets_get_of_this_node_sets_the_condition() {
    let (cloud, _dir, _spec, hub) = start("autonomy-who");
    cloud.node("edge-2", Some("pool-a"), &[]);
    cloud.add_token("user-token", "someone");
    let base = hub.url();
    let others = [
        (format!("{base}/api/v1/nodes/edge-2"), KUBELET, None),
        (
            format!("{base}/api/v1/nodes/edge-1"),
            "kubectl/v1.32.0",
            None,
        ),
        (format!("{base}/api/v1/nodes/edge-1/status"), KUBELET, None),
        (
            format!("{base}/api/v1/nodes/edge-1"),
            KUBELET,
            Some("Bearer user-token"),
        ),
    ];
    for (url, ua, authorization) in &others {
        let headers: Vec<(&str, &str)> = authorization
            .iter()
            .map(|a| ("authorization", *a))
            .collect();
        let r = call("GET", url, ua, &headers, None);
        assert_eq!(r.status, 200, "{url} {ua}: {}", r.text());
        assert_eq!(status(&r.json()), "", "{url} {ua} {authorization:?}");
    }
    assert_eq!(puts(&cloud), 0);
    assert_eq!(cloud.count(|r| r.method == "PUT"), 0);
    // kubelet's own GET does.
    assert_eq!(status(&kubelet_get(&hub)), "False");
    assert_eq!(puts(&cloud), 1);
}

/// A slow cloud cannot keep kubelet waiting past the `timeout` its GET names: the writes stop
/// in time, and kubelet gets the node with the condition set, unwritten.
#[test]
fn a_slow_cloud_still_answers_kubelet_within_its_timeout() {
    // The health checks wait out the cloud's delay: the cloud stays healthy, only slow.
    let (cloud, _dir, _spec, hub) =
        start_with("autonomy-slow", &["--heartbeat-timeout-seconds=10"]);
    annotate(
        &cloud,
        json!({"node.beta.openyurt.io/autonomy": "true"}),
        json!({}),
    );
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(15)));
    // Every answer a second late, and every PUT a conflict: 5 PUTs and 4 reads again would
    // take 10 s.
    cloud.misanswer(STATUS_PATH, 5, 409, br#"{"kind":"Status","code":409}"#);
    cloud.set_delay(Duration::from_secs(1));

    // kubelet asks with `timeout=3s` and gives up soon after it.
    let slack = Duration::from_secs(if emulated() { 10 } else { 2 });
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(3) + slack))
            .build(),
    );
    let url = format!("{}/api/v1/nodes/edge-1?timeout=3s", hub.url());
    let mut answer = agent
        .get(&url)
        .header("user-agent", KUBELET)
        .call()
        .unwrap_or_else(|e| panic!("kubelet gave up before the hub answered: {e}"));
    assert_eq!(answer.status().as_u16(), 200);
    let body = answer.body_mut().read_to_vec().unwrap();
    let node: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status(&node), "True", "{node}");
    cloud.set_delay(Duration::ZERO);
    assert!(hub.wait_log(
        "cannot write the node's Autonomy condition",
        Duration::from_secs(5)
    ));
    assert_eq!(status(&cloud.get("nodes", "", "edge-1").unwrap()), "");
}

/// The cloud failing within the GET's answer, though its health checks pass: kubelet gets
/// the cached node with the condition set, and nothing is written.
#[test]
fn a_cloud_breaking_off_the_get_gives_the_cached_node_with_the_condition() {
    // Health checks by /readyz, which the broken answer spares: no lease renewal takes it.
    let (cloud, _dir, spec, hub) = start_with("autonomy-broken", &["--heartbeat-mode=readyz"]);
    annotate(
        &cloud,
        json!({"node.beta.openyurt.io/autonomy": "true"}),
        json!({}),
    );
    // The write refused: the cache keeps the cloud's node, without the condition.
    refuse_the_next_write(&cloud);
    assert_eq!(status(&kubelet_get(&hub)), "True");
    let rv = cached_without_the_condition(&cloud, &spec.cache_dir);
    let puts_before = puts(&cloud);

    cloud.drop_mid_body(1);
    let node = kubelet_get(&hub);
    assert_eq!(status(&node), "True", "{node}\n{}", hub.logs());
    assert_eq!(node["metadata"]["resourceVersion"], rv);
    assert!(hub.wait_log("answering from the cache", Duration::from_secs(5)));
    assert_eq!(puts(&cloud), puts_before);
}
