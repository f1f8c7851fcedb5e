//! The overlay's behaviour: kubelet's writes as it sends them, the objects they rewrite, the
//! drop when the cloud is back, and what a watch's view sends.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::patch::tests::{condition_element_order, conditions};
use super::series::Series;
use super::*;

const NODE: &str = "n1";
const SMP: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";

/// An overlay of node n1 counting into its own series.
fn overlay() -> (Overlay, &'static Series) {
    let series: &'static Series = Box::leak(Box::new(Series::new()));
    (Overlay::with_series(NODE, true, series), series)
}

/// A pod of namespace `default` on `node`, Running and Ready, with `ips`.
fn pod_on(name: &str, uid: &str, node: &str, ips: &[&str]) -> Vec<u8> {
    let pod_ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "41"},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx"}]},
        "status": {
            "phase": "Running",
            "podIP": ips[0],
            "podIPs": pod_ips,
            "conditions": conditions("2026-12-01T10:00:00Z"),
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0}]
        }
    }))
    .unwrap()
}

fn pod(name: &str, uid: &str, ip: &str) -> Vec<u8> {
    pod_on(name, uid, NODE, &[ip])
}

/// kubelet's status patch (`statusutil.PatchPodStatus`) moving the pod from `old` IPs to
/// `new` ones, with Ready `ready`.
fn kubelet_patch(uid: &str, old: &[&str], new: &[&str], ready: bool) -> Vec<u8> {
    let order: Vec<Value> = new.iter().map(|ip| json!({"ip": ip})).collect();
    let mut ips = order.clone();
    ips.extend(
        old.iter()
            .filter(|ip| !new.contains(ip))
            .map(|ip| json!({"$patch": "delete", "ip": ip})),
    );
    let status = if ready { "True" } else { "False" };
    serde_json::to_vec(&json!({"metadata": {"uid": uid}, "status": {
        "$setElementOrder/conditions": condition_element_order(),
        "$setElementOrder/podIPs": order,
        "conditions": [{"lastTransitionTime": "2026-12-06T10:00:00Z", "status": status, "type": "Ready"}],
        "podIP": new[0],
        "podIPs": ips
    }}))
    .unwrap()
}

fn capture<'a>(name: &'a str, cached: &'a [u8], write: PodWrite<'a>) -> Capture<'a> {
    Capture {
        by_node_kubelet: true,
        namespace: "default",
        name,
        write,
        cached_pod: Some(cached),
    }
}

fn patch<'a>(content_type: &'a str, body: &'a [u8]) -> PodWrite<'a> {
    PodWrite::Patch { content_type, body }
}

/// web-a (10.244.1.10) moved to 10.244.1.20 by kubelet's patch, at recoveries `r`.
fn web_a_moved(overlay: &Overlay, r: u64) -> Captured {
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = kubelet_patch("ua", &["10.244.1.10"], &["10.244.1.20"], true);
    overlay.capture(
        capture("web-a", &cached, patch(SMP, &body)),
        CloudState::down(r),
    )
}

fn endpoint(ip: &str, node: &str, pod: &str, uid: &str, ready: bool) -> Value {
    json!({
        "addresses": [ip],
        "conditions": {"ready": ready, "serving": ready, "terminating": false},
        "nodeName": node,
        "targetRef": {"kind": "Pod", "namespace": "default", "name": pod, "uid": uid}
    })
}

/// The EndpointSlice `web-x` of Service web: web-a and web-b on n1, web-c on n2.
fn slice_of(address_type: &str, endpoints: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "namespace": "default", "resourceVersion": "500",
            "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .unwrap()
}

fn slice() -> Vec<u8> {
    slice_of(
        "IPv4",
        vec![
            endpoint("10.244.1.10", NODE, "web-a", "ua", true),
            endpoint("10.244.1.11", NODE, "web-b", "ub", true),
            endpoint("10.244.2.7", "n2", "web-c", "uc", true),
        ],
    )
}

/// The core Endpoints `web`: web-a and web-b ready on n1, web-c on n2.
fn endpoints_object(subsets: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "501"},
        "subsets": subsets
    }))
    .unwrap()
}

fn address(ip: &str, node: &str, pod: &str, uid: &str) -> Value {
    json!({"ip": ip, "nodeName": node,
        "targetRef": {"kind": "Pod", "namespace": "default", "name": pod, "uid": uid}})
}

fn endpoints() -> Vec<u8> {
    endpoints_object(json!([{
        "addresses": [
            address("10.244.1.10", NODE, "web-a", "ua"),
            address("10.244.1.11", NODE, "web-b", "ub"),
            address("10.244.2.7", "n2", "web-c", "uc")
        ],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }]))
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// What the capture of `write` of pod `name`, cached as `cached`, gives while the cloud is
/// down (outage 0).
fn capture_down(overlay: &Overlay, name: &str, cached: &[u8], write: PodWrite) -> Captured {
    overlay.capture(capture(name, cached, write), CloudState::down(0))
}

/// `base`, an object of `kind`, as `snapshot` rewrites it (it must rewrite it).
fn rewritten_by(snapshot: &Snapshot, kind: EndpointKind, base: &[u8]) -> Value {
    parse(&snapshot.rewrite(kind, base).unwrap())
}

/// `base`, an object of `kind`, as the overlay's snapshot in outage 0 rewrites it.
fn rewritten(overlay: &Overlay, kind: EndpointKind, base: &[u8]) -> Value {
    rewritten_by(&overlay.snapshot(CloudState::down(0)), kind, base)
}

/// The slice after `write` of pod `name` (cached as `cached`) applied a change, in outage 0.
fn slice_after(overlay: &Overlay, name: &str, cached: &[u8], write: PodWrite) -> Value {
    let got = capture_down(overlay, name, cached, write);
    assert_eq!(got, Captured::Applied { changed: true });
    rewritten(overlay, EndpointKind::Slice, &slice())
}

/// The slice after `write` of web-a (cached at 10.244.1.10) applied a change, in outage 0.
fn slice_after_web_a(overlay: &Overlay, write: PodWrite) -> Value {
    let cached = pod("web-a", "ua", "10.244.1.10");
    slice_after(overlay, "web-a", &cached, write)
}

/// The endpoint of pod `name` in a rewritten slice.
fn endpoint_of<'v>(slice: &'v Value, name: &str) -> Option<&'v Value> {
    slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["targetRef"]["name"] == name)
}

#[test]
fn kubelets_patch_moves_the_pods_endpoint_and_nothing_else() {
    let (overlay, series) = overlay();
    assert!(!overlay.snapshot(CloudState::down(0)).active());
    assert_eq!(
        web_a_moved(&overlay, 0),
        Captured::Applied { changed: true }
    );
    let snapshot = overlay.snapshot(CloudState::down(0));
    assert!(snapshot.active());
    let base = slice();
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &base);
    let mut expected = parse(&base);
    expected["endpoints"][0]["addresses"] = json!(["10.244.1.20"]);
    // Only web-a's address changed: the resourceVersion, web-b (no write), web-c (another
    // node) and every other field are the cloud's.
    assert_eq!(out, expected);
    assert_eq!(out["metadata"]["resourceVersion"], "500");
    assert_eq!(series.captures_of("applied"), 1);
    assert_eq!(series.served(EndpointKind::Slice).0, 1);
}

#[test]
fn a_ready_flip_marks_the_endpoint_not_ready_and_keeps_terminating() {
    let (overlay, _) = overlay();
    let cached = pod("web-b", "ub", "10.244.1.11");
    let body = kubelet_patch("ub", &["10.244.1.11"], &["10.244.1.11"], false);
    let out = slice_after(&overlay, "web-b", &cached, patch(SMP, &body));
    let b = endpoint_of(&out, "web-b").unwrap();
    assert_eq!(b["addresses"], json!(["10.244.1.11"]));
    assert_eq!(
        b["conditions"],
        json!({"ready": false, "serving": false, "terminating": false})
    );
    assert_eq!(
        endpoint_of(&out, "web-a").unwrap()["conditions"]["ready"],
        true
    );
}

#[test]
fn dual_stack_pods_give_each_slice_its_family() {
    let (overlay, _) = overlay();
    let cached = pod_on("web-a", "ua", NODE, &["10.244.1.10", "fd00::10"]);
    let body = kubelet_patch(
        "ua",
        &["10.244.1.10", "fd00::10"],
        &["10.244.1.20", "fd00::20"],
        true,
    );
    let got = capture_down(&overlay, "web-a", &cached, patch(SMP, &body));
    assert_eq!(got, Captured::Applied { changed: true });
    let snapshot = overlay.snapshot(CloudState::down(0));
    let v6 = slice_of(
        "IPv6",
        vec![endpoint("fd00::10", NODE, "web-a", "ua", true)],
    );
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &v6);
    assert_eq!(out["endpoints"][0]["addresses"], json!(["fd00::20"]));
    assert_eq!(out["endpoints"][0]["conditions"]["ready"], true);
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &slice());
    assert_eq!(out["endpoints"][0]["addresses"], json!(["10.244.1.20"]));
}

#[test]
fn an_ipv6_slice_of_an_ipv4_only_pod_keeps_its_address_not_ready() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let v6 = slice_of(
        "IPv6",
        vec![endpoint("fd00::10", NODE, "web-a", "ua", true)],
    );
    let out = rewritten(&overlay, EndpointKind::Slice, &v6);
    assert_eq!(out["endpoints"][0]["addresses"], json!(["fd00::10"]));
    assert_eq!(out["endpoints"][0]["conditions"]["ready"], false);
    assert_eq!(out["endpoints"][0]["conditions"]["serving"], false);
}

#[test]
fn a_null_in_a_strategic_patch_deletes_the_field() {
    let (overlay, _) = overlay();
    let body = br#"{"status":{"podIP":null,"podIPs":null}}"#;
    // No IP of the slice's family any more: the address stays, not ready.
    let out = slice_after_web_a(&overlay, patch(SMP, body));
    let a = endpoint_of(&out, "web-a").unwrap();
    assert_eq!(a["addresses"], json!(["10.244.1.10"]));
    assert_eq!(a["conditions"]["ready"], false);
}

#[test]
fn a_merge_patch_replaces_lists_whole() {
    let (overlay, _) = overlay();
    let body = br#"{"status":{"podIP":"10.244.1.30","podIPs":[{"ip":"10.244.1.30"}],
        "conditions":[{"type":"Ready","status":"False"}]}}"#;
    let out = slice_after_web_a(
        &overlay,
        patch("application/merge-patch+json; charset=utf-8", body),
    );
    let a = endpoint_of(&out, "web-a").unwrap();
    assert_eq!(a["addresses"], json!(["10.244.1.30"]));
    assert_eq!(a["conditions"]["ready"], false);
}

#[test]
fn a_put_replaces_the_status() {
    let (overlay, _) = overlay();
    let put = pod("web-a", "ua", "10.244.1.40");
    let out = slice_after_web_a(&overlay, PodWrite::Put { body: &put });
    assert_eq!(
        endpoint_of(&out, "web-a").unwrap()["addresses"],
        json!(["10.244.1.40"])
    );
}

#[test]
fn each_patch_applies_to_the_cached_pod_not_to_the_last_patch() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    // A later patch that carries Ready only: a diff against the cached pod, so the IP is the
    // cached pod's again, not the first patch's.
    let body =
        br#"{"metadata":{"uid":"ua"},"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#;
    let out = slice_after_web_a(&overlay, patch(SMP, body));
    let a = endpoint_of(&out, "web-a").unwrap();
    assert_eq!(a["addresses"], json!(["10.244.1.10"]));
    assert_eq!(a["conditions"]["ready"], false);
}

#[test]
fn a_repeated_patch_changes_nothing_and_keeps_the_generation() {
    let (overlay, series) = overlay();
    web_a_moved(&overlay, 0);
    let generation = overlay.snapshot(CloudState::down(0)).generation();
    assert_eq!(
        web_a_moved(&overlay, 0),
        Captured::Applied { changed: false }
    );
    assert_eq!(
        overlay.snapshot(CloudState::down(0)).generation(),
        generation
    );
    assert_eq!(series.captures_of("unchanged"), 1);
}

#[test]
fn a_first_patch_that_changes_nothing_still_overlays_the_pod() {
    let (overlay, _) = overlay();
    let before = overlay.snapshot(CloudState::down(0)).generation();
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = kubelet_patch("ua", &["10.244.1.10"], &["10.244.1.10"], true);
    let got = capture_down(&overlay, "web-a", &cached, patch(SMP, &body));
    assert_eq!(got, Captured::Applied { changed: false });
    let snapshot = overlay.snapshot(CloudState::down(0));
    assert!(snapshot.active());
    // The cloud's slice may lag behind its pod: a pass is due.
    assert_ne!(snapshot.generation(), before);
    // This slice already says what the pod says: nothing to rewrite.
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, &slice()), None);
}

#[test]
fn writes_for_another_pod_or_node_or_without_a_cached_pod_are_ignored() {
    let (overlay, series) = overlay();
    let cached = pod("web-a", "ua", "10.244.1.10");
    // A patch of a re-created pod of the same name.
    let body = kubelet_patch("other", &["10.244.1.10"], &["10.244.1.20"], true);
    let got = capture_down(&overlay, "web-a", &cached, patch(SMP, &body));
    assert_eq!(got, Captured::Ignored(Ignored::NotThisPod));
    // A pod of another node.
    let elsewhere = pod_on("web-c", "uc", "n2", &["10.244.2.7"]);
    let body = kubelet_patch("uc", &["10.244.2.7"], &["10.244.2.8"], true);
    let got = capture_down(&overlay, "web-c", &elsewhere, patch(SMP, &body));
    assert_eq!(got, Captured::Ignored(Ignored::NotThisPod));
    // No cached pod.
    let body = kubelet_patch("ua", &["10.244.1.10"], &["10.244.1.20"], true);
    let mut c = capture("web-a", &cached, patch(SMP, &body));
    c.cached_pod = None;
    assert_eq!(
        overlay.capture(c, CloudState::down(0)),
        Captured::Ignored(Ignored::NotCached)
    );
    assert!(!overlay.snapshot(CloudState::down(0)).active());
    assert_eq!(overlay.snapshot(CloudState::down(0)).generation(), 0);
    assert_eq!(series.captures_of("not_this_pod"), 2);
    assert_eq!(series.captures_of("not_cached"), 1);
}

#[test]
fn bodies_it_cannot_read_are_ignored() {
    let (overlay, series) = overlay();
    let cached = pod("web-a", "ua", "10.244.1.10");
    let json_patch = br#"[{"op":"replace","path":"/status/podIP","value":"10.244.1.20"}]"#;
    for write in [
        patch("application/json-patch+json", json_patch),
        patch("application/apply-patch+yaml", b"status: {}"),
        patch("application/vnd.kubernetes.protobuf", b"k8s\0\x0a"),
        patch(SMP, b"{not json"),
        patch(MERGE, b"[1]"),
        PodWrite::Put { body: b"null" },
    ] {
        let got = overlay.capture(capture("web-a", &cached, write), CloudState::down(0));
        assert!(
            matches!(got, Captured::Ignored(Ignored::Unreadable(_))),
            "{write:?}: {got:?}"
        );
    }
    assert!(!overlay.snapshot(CloudState::down(0)).active());
    assert_eq!(series.captures_of("unreadable"), 6);
}

#[test]
fn a_client_that_is_not_the_nodes_kubelet_changes_nothing() {
    let (overlay, series) = overlay();
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = kubelet_patch("ua", &["10.244.1.10"], &["10.244.1.20"], true);
    let mut c = capture("web-a", &cached, patch(SMP, &body));
    c.by_node_kubelet = false;
    assert_eq!(
        overlay.capture(c, CloudState::down(0)),
        Captured::Ignored(Ignored::NotKubelet)
    );
    let snapshot = overlay.snapshot(CloudState::down(0));
    assert!(!snapshot.active());
    assert_eq!(snapshot.generation(), 0);
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, &slice()), None);
    assert_eq!(series.captures_of("not_kubelet"), 1);
    // Nor does anyone when the overlay is off.
    let off = Overlay::with_series(NODE, false, series);
    assert!(!off.enabled());
    c.by_node_kubelet = true;
    assert_eq!(
        off.capture(c, CloudState::down(0)),
        Captured::Ignored(Ignored::Disabled)
    );
    assert!(!off.snapshot(CloudState::down(0)).active());
    assert_eq!(series.captures_of("disabled"), 1);
}

#[test]
fn a_v1beta1_slice_matches_by_topology_hostname() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let beta = |host: &str| {
        json!({
            "addresses": ["10.244.1.10"],
            "conditions": {"ready": true},
            "topology": {"kubernetes.io/hostname": host},
            "targetRef": {"kind": "Pod", "namespace": "default", "name": "web-a", "uid": "ua"}
        })
    };
    let snapshot = overlay.snapshot(CloudState::down(0));
    let ours = slice_of("IPv4", vec![beta(NODE)]);
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &ours);
    assert_eq!(out["endpoints"][0]["addresses"], json!(["10.244.1.20"]));
    assert_eq!(
        out["endpoints"][0]["topology"],
        json!({"kubernetes.io/hostname": NODE})
    );
    // The same pod name on another node's endpoint is another pod.
    let theirs = slice_of("IPv4", vec![beta("n2")]);
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, &theirs), None);
    // As is a targetRef with another uid.
    let mut other = endpoint("10.244.1.10", NODE, "web-a", "u-old", true);
    other["targetRef"]["uid"] = json!("u-old");
    let stale = slice_of("IPv4", vec![other]);
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, &stale), None);
}

#[test]
fn an_endpoint_without_target_ref_matches_by_node_and_old_ip_in_its_namespace() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let snapshot = overlay.snapshot(CloudState::down(0));
    let bare = |node: &str| json!({"addresses": ["10.244.1.10"], "conditions": {"ready": true}, "nodeName": node});
    let ours = slice_of("IPv4", vec![bare(NODE), bare("n2")]);
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &ours);
    assert_eq!(out["endpoints"][0]["addresses"], json!(["10.244.1.20"]));
    // Another node's endpoint with the same address is left alone.
    assert_eq!(out["endpoints"][1]["addresses"], json!(["10.244.1.10"]));
    // A slice of another namespace does not name this namespace's pod.
    let mut elsewhere = parse(&ours);
    elsewhere["metadata"]["namespace"] = json!("other");
    let elsewhere = serde_json::to_vec(&elsewhere).unwrap();
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, &elsewhere), None);
}

#[test]
fn endpoints_addresses_move_between_ready_and_not_ready() {
    let (overlay, series) = overlay();
    web_a_moved(&overlay, 0);
    let cached = pod("web-b", "ub", "10.244.1.11");
    let body = kubelet_patch("ub", &["10.244.1.11"], &["10.244.1.21"], false);
    capture_down(&overlay, "web-b", &cached, patch(SMP, &body));
    let base = endpoints();
    let out = rewritten(&overlay, EndpointKind::Endpoints, &base);
    assert_eq!(
        out["subsets"],
        json!([{
            "addresses": [
                address("10.244.1.20", NODE, "web-a", "ua"),
                address("10.244.2.7", "n2", "web-c", "uc")
            ],
            "notReadyAddresses": [address("10.244.1.21", NODE, "web-b", "ub")],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
        }])
    );
    assert_eq!(out["metadata"]["resourceVersion"], "501");
    assert_eq!(series.served(EndpointKind::Endpoints).0, 1);
    // Ready again: back among the addresses.
    let body = kubelet_patch("ub", &["10.244.1.11"], &["10.244.1.21"], true);
    capture_down(&overlay, "web-b", &cached, patch(SMP, &body));
    let not_ready = endpoints_object(json!([{
        "notReadyAddresses": [address("10.244.1.11", NODE, "web-b", "ub")],
        "ports": [{"port": 80}]
    }]));
    let out = rewritten(&overlay, EndpointKind::Endpoints, &not_ready);
    assert_eq!(
        out["subsets"],
        json!([{"addresses": [address("10.244.1.21", NODE, "web-b", "ub")], "ports": [{"port": 80}]}])
    );
}

#[test]
fn a_pod_kubelet_deleted_loses_its_endpoints() {
    let (overlay, _) = overlay();
    let cached = pod("web-b", "ub", "10.244.1.11");
    let got = capture_down(&overlay, "web-b", &cached, PodWrite::Delete);
    assert_eq!(got, Captured::Applied { changed: true });
    let snapshot = overlay.snapshot(CloudState::down(0));
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &slice());
    assert!(endpoint_of(&out, "web-b").is_none());
    assert_eq!(out["endpoints"].as_array().unwrap().len(), 2);
    let out = rewritten_by(&snapshot, EndpointKind::Endpoints, &endpoints());
    let ips: Vec<&str> = out["subsets"][0]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ip"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["10.244.1.10", "10.244.2.7"]);
    // A subset of web-b alone is dropped, and with it the last subset.
    let only_b = endpoints_object(json!([
        {"addresses": [address("10.244.1.11", NODE, "web-b", "ub")], "ports": [{"port": 80}]},
        {"addresses": [address("10.244.2.7", "n2", "web-c", "uc")], "ports": [{"port": 81}]}
    ]));
    let out = rewritten_by(&snapshot, EndpointKind::Endpoints, &only_b);
    assert_eq!(out["subsets"].as_array().unwrap().len(), 1);
    assert_eq!(out["subsets"][0]["ports"], json!([{"port": 81}]));
    let alone = endpoints_object(json!([
        {"addresses": [address("10.244.1.11", NODE, "web-b", "ub")], "ports": [{"port": 80}]}
    ]));
    let out = rewritten_by(&snapshot, EndpointKind::Endpoints, &alone);
    assert!(out.get("subsets").is_none(), "{out}");
    // A late status of the deleted pod does not bring it back.
    let body = kubelet_patch("ub", &["10.244.1.11"], &["10.244.1.11"], true);
    capture_down(&overlay, "web-b", &cached, patch(SMP, &body));
    let out = rewritten(&overlay, EndpointKind::Slice, &slice());
    assert!(endpoint_of(&out, "web-b").is_none());
}

#[test]
fn a_finished_pod_is_not_ready() {
    let (overlay, _) = overlay();
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = br#"{"metadata":{"uid":"ua"},"status":{"phase":"Failed"}}"#;
    let got = capture_down(&overlay, "web-a", &cached, patch(SMP, body));
    assert_eq!(got, Captured::Applied { changed: true });
    let snapshot = overlay.snapshot(CloudState::down(0));
    let out = rewritten_by(&snapshot, EndpointKind::Slice, &slice());
    let a = endpoint_of(&out, "web-a").unwrap();
    assert_eq!(a["conditions"]["ready"], false);
    assert_eq!(a["conditions"]["serving"], false);
    let out = rewritten_by(&snapshot, EndpointKind::Endpoints, &endpoints());
    assert_eq!(
        out["subsets"][0]["notReadyAddresses"][0]["ip"],
        "10.244.1.10"
    );
}

#[test]
fn the_cloud_back_drops_the_overlay_and_remembers_what_it_rewrote() {
    let (overlay, series) = overlay();
    web_a_moved(&overlay, 3);
    let during = overlay.snapshot(CloudState::down(3));
    assert!(during.active());
    assert!(during.rewrite(EndpointKind::Slice, &slice()).is_some());
    // Still the same outage: the same snapshot, no drop.
    assert!(Arc::ptr_eq(&during, &overlay.snapshot(CloudState::down(3))));
    let after = overlay.snapshot(CloudState::down(4));
    assert!(!after.active());
    assert!(after.generation() > during.generation());
    assert_eq!(after.rewrite(EndpointKind::Slice, &slice()), None);
    assert!(after.reverted(EndpointKind::Slice, "default", "web-x"));
    assert!(!after.reverted(EndpointKind::Endpoints, "default", "web-x"));
    assert!(!after.reverted(EndpointKind::Slice, "default", "web-y"));
    let later = Instant::now() + Duration::from_secs(16 * 60);
    assert!(!after.reverted_at(EndpointKind::Slice, "default", "web-x", later));
    // The same count again is no new drop.
    assert_eq!(
        overlay.snapshot(CloudState::down(4)).generation(),
        after.generation()
    );
    // A next outage starts a new overlay.
    web_a_moved(&overlay, 4);
    assert!(overlay.snapshot(CloudState::down(4)).active());
    assert!(!overlay.snapshot(CloudState::down(5)).active());
    let _ = series;
}

/// A snapshot with web-a moved and web-b's Ready as `b_ready`, on `overlay`.
fn moved(overlay: &Overlay, b_ready: bool) -> Arc<Snapshot> {
    web_a_moved(overlay, 0);
    let cached = pod("web-b", "ub", "10.244.1.11");
    let body = kubelet_patch("ub", &["10.244.1.11"], &["10.244.1.11"], b_ready);
    capture_down(overlay, "web-b", &cached, patch(SMP, &body));
    overlay.snapshot(CloudState::down(0))
}

/// A whole pass of `view` over `objects`: what it sends, in order.
fn pass_all<'o>(
    view: &mut WatchView,
    snapshot: &Snapshot,
    objects: impl Iterator<Item = &'o [u8]>,
) -> Vec<Cow<'o, [u8]>> {
    let Some(mut pass) = view.pass(snapshot) else {
        return Vec::new();
    };
    objects.filter_map(|object| pass.object(object)).collect()
}

/// Another slice, of a Service with no pod of this node.
fn other_slice() -> Vec<u8> {
    let mut v = parse(&slice_of(
        "IPv4",
        vec![endpoint("10.244.2.9", "n2", "db-0", "ud", true)],
    ));
    v["metadata"]["name"] = json!("db-x");
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn a_view_sends_nothing_while_there_is_nothing_to_send() {
    let (overlay, _) = overlay();
    let mut view = WatchView::new(EndpointKind::Slice);
    let snapshot = overlay.snapshot(CloudState::down(0));
    let base = slice();
    assert!(matches!(
        view.outgoing(&snapshot, false, &base),
        Cow::Borrowed(b) if std::ptr::eq(b, &base[..])
    ));
    // Generation 0: the overlay never held a pod, so the watch's objects are not read.
    assert!(!view.pass_due(&snapshot));
    assert!(pass_all(&mut view, &snapshot, [&base[..]].into_iter()).is_empty());
    assert!(!view.pass_due(&snapshot));
}

#[test]
fn a_view_sends_each_change_once() {
    let (overlay, series) = overlay();
    let mut view = WatchView::new(EndpointKind::Slice);
    let snapshot = moved(&overlay, true);
    let (base, other) = (slice(), other_slice());
    // An event goes out rewritten, and is noted.
    let sent = view.outgoing(&snapshot, false, &base).into_owned();
    assert_eq!(
        endpoint_of(&parse(&sent), "web-a").unwrap()["addresses"],
        json!(["10.244.1.20"])
    );
    assert_eq!(
        view.outgoing(&snapshot, false, &other),
        Cow::Borrowed(&other[..])
    );
    // The first pass: the client holds both as they are now.
    assert!(view.pass_due(&snapshot));
    assert!(pass_all(&mut view, &snapshot, [&base[..], &other[..]].into_iter()).is_empty());
    assert!(!view.pass_due(&snapshot));
    assert!(pass_all(&mut view, &snapshot, [&base[..], &other[..]].into_iter()).is_empty());
    // web-b turns unready: exactly the slice goes out again.
    let changed = moved(&overlay, false);
    assert!(view.pass_due(&changed));
    let out = pass_all(&mut view, &changed, [&base[..], &other[..]].into_iter());
    assert_eq!(out.len(), 1);
    let b = endpoint_of(&parse(&out[0]), "web-b").unwrap().clone();
    assert_eq!(b["conditions"]["ready"], false);
    assert!(pass_all(&mut view, &changed, [&base[..], &other[..]].into_iter()).is_empty());
    assert_eq!(series.served(EndpointKind::Slice).1, 1);
    // The cloud is back: the cloud's bytes go out, once.
    let dropped = overlay.snapshot(CloudState::down(1));
    assert!(view.pass_due(&dropped));
    let out = pass_all(&mut view, &dropped, [&base[..], &other[..]].into_iter());
    assert_eq!(out, vec![Cow::Borrowed(&base[..])]);
    assert!(pass_all(&mut view, &dropped, [&base[..], &other[..]].into_iter()).is_empty());
    assert_eq!(
        view.outgoing(&dropped, false, &base),
        Cow::Borrowed(&base[..])
    );
}

#[test]
fn a_view_forgets_what_was_deleted_or_sent_as_the_clouds() {
    let (overlay, _) = overlay();
    let snapshot = moved(&overlay, true);
    let base = slice();
    let mut view = WatchView::new(EndpointKind::Slice);
    assert!(matches!(
        view.outgoing(&snapshot, false, &base),
        Cow::Owned(_)
    ));
    pass_all(&mut view, &snapshot, std::iter::empty());
    // DELETED: the client holds nothing, so the drop sends nothing back.
    assert_eq!(
        view.outgoing(&snapshot, true, &base),
        Cow::Borrowed(&base[..])
    );
    let dropped = overlay.snapshot(CloudState::down(1));
    assert!(pass_all(&mut view, &dropped, [&base[..]].into_iter()).is_empty());
    // A view that was sent the cloud's object after the drop holds the cloud's bytes.
    let (overlay, _) = self::overlay();
    let snapshot = moved(&overlay, true);
    let mut view = WatchView::new(EndpointKind::Slice);
    view.outgoing(&snapshot, false, &base);
    pass_all(&mut view, &snapshot, std::iter::empty());
    let dropped = overlay.snapshot(CloudState::down(1));
    assert_eq!(
        view.outgoing(&dropped, false, &base),
        Cow::Borrowed(&base[..])
    );
    assert!(pass_all(&mut view, &dropped, [&base[..]].into_iter()).is_empty());
}

#[test]
fn a_new_view_first_sends_the_current_overlay_and_the_reverted_objects() {
    let (overlay, _) = overlay();
    let snapshot = moved(&overlay, true);
    let (base, other) = (slice(), other_slice());
    // A watch that starts during the outage: its first pass sends the rewritten slice.
    let mut view = WatchView::new(EndpointKind::Slice);
    let out = pass_all(&mut view, &snapshot, [&base[..], &other[..]].into_iter());
    assert_eq!(out.len(), 1);
    assert_eq!(
        endpoint_of(&parse(&out[0]), "web-a").unwrap()["addresses"],
        json!(["10.244.1.20"])
    );
    // A watch that starts after the drop (a re-watch across it): the cloud's slice once.
    let dropped = overlay.snapshot(CloudState::down(1));
    let mut view = WatchView::new(EndpointKind::Slice);
    let out = pass_all(&mut view, &dropped, [&base[..], &other[..]].into_iter());
    assert_eq!(out, vec![Cow::Borrowed(&base[..])]);
    assert!(pass_all(&mut view, &dropped, [&base[..], &other[..]].into_iter()).is_empty());
    // A view of Endpoints reverts no slice.
    let mut view = WatchView::new(EndpointKind::Endpoints);
    assert!(pass_all(&mut view, &dropped, [&base[..]].into_iter()).is_empty());
}

#[test]
fn the_log_line_shows_ips_and_readiness() {
    let shown = |ips: &[&str], ready, terminal, gone| Shown {
        ips: ips.iter().map(|ip| ip.to_string()).collect(),
        ready,
        terminal,
        gone,
    };
    assert_eq!(
        shown(&["10.244.1.20"], true, false, false).to_string(),
        "10.244.1.20 ready=true"
    );
    assert_eq!(
        shown(&["10.244.1.20", "fd00::20"], false, true, true).to_string(),
        "10.244.1.20,fd00::20 ready=false terminal=true gone=true"
    );
    assert_eq!(
        shown(&[], false, false, false).to_string(),
        "none ready=false"
    );
}

#[test]
fn a_terminating_endpoint_stays_not_ready_but_serves() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let mut ending = endpoint("10.244.1.10", NODE, "web-a", "ua", false);
    ending["conditions"] = json!({"ready": false, "serving": false, "terminating": true});
    let out = rewritten(
        &overlay,
        EndpointKind::Slice,
        &slice_of("IPv4", vec![ending]),
    );
    assert_eq!(
        out["endpoints"][0]["conditions"],
        json!({"ready": false, "serving": true, "terminating": true})
    );
}

#[test]
fn odd_shapes_are_left_alone() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let snapshot = overlay.snapshot(CloudState::down(0));
    for odd in [
        json!({"metadata": {"namespace": "default"}, "addressType": "IPv4", "endpoints": "web-a"}),
        json!({"metadata": {"namespace": "default"}, "addressType": "IPv4",
            "endpoints": ["web-a", 7, null, {"addresses": [1], "targetRef": "web-a", "nodeName": "other"}]}),
        json!({"metadata": {"namespace": "default"}, "addressType": "FQDN",
            "endpoints": [endpoint("10.244.1.10", NODE, "web-a", "ua", true)]}),
        json!({"metadata": 3, "subsets": ["web-a", {"addresses": "web-a"}, {"addresses": [null, "web-a"]}]}),
        json!(["web-a"]),
    ] {
        let bytes = serde_json::to_vec(&odd).unwrap();
        assert_eq!(snapshot.rewrite(EndpointKind::Slice, &bytes), None, "{odd}");
        assert_eq!(
            snapshot.rewrite(EndpointKind::Endpoints, &bytes),
            None,
            "{odd}"
        );
    }
    assert_eq!(snapshot.rewrite(EndpointKind::Slice, b"{\"web-a\""), None);
}

/// The overlay is never on while a server is usable: a capture then applies nothing and
/// starts no outage, and a server usable at a snapshot drops the overlay even when the
/// count of returns never moved (two servers, one of them up all along), or when the first
/// capture already saw the count of the return (a race at the cloud's return).
#[test]
fn the_overlay_is_never_on_while_the_cloud_is_usable() {
    let (overlay, series) = overlay();
    let up = |recoveries| CloudState {
        recoveries,
        usable: true,
    };
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = kubelet_patch("ua", &["10.244.1.10"], &["10.244.1.20"], true);
    let got = overlay.capture(capture("web-a", &cached, patch(SMP, &body)), up(0));
    assert_eq!(got, Captured::Ignored(Ignored::Online));
    assert_eq!(series.captures_of("online"), 1);
    let snapshot = overlay.snapshot(CloudState::down(0));
    assert!(!snapshot.active());
    assert_eq!(snapshot.generation(), 0, "no outage began");

    // Server A fails while server B stays up: the count never moves.
    web_a_moved(&overlay, 0);
    let during = overlay.snapshot(CloudState::down(0));
    assert!(during.active());
    assert!(during.rewrite(EndpointKind::Slice, &slice()).is_some());
    let online = overlay.snapshot(up(0));
    assert!(!online.active(), "dropped while a server is usable");
    assert!(online.reverted(EndpointKind::Slice, "default", "web-x"));
    assert!(!overlay.snapshot(CloudState::down(0)).active(), "stays off");

    // The first capture read the count after the return: the usable cloud still drops it.
    web_a_moved(&overlay, 7);
    assert!(overlay.snapshot(CloudState::down(7)).active());
    assert!(!overlay.snapshot(up(7)).active());
    // A capture while usable drops the overlay too.
    web_a_moved(&overlay, 7);
    assert!(overlay.snapshot(CloudState::down(7)).active());
    let got = overlay.capture(capture("web-a", &cached, patch(SMP, &body)), up(7));
    assert_eq!(got, Captured::Ignored(Ignored::Online));
    assert!(!overlay.snapshot(CloudState::down(7)).active());
}

/// `dropped` with every time it holds moved `by` into the past, if the clock goes back
/// that far.
fn aged(dropped: &Snapshot, by: Duration) -> Option<Snapshot> {
    let back = |at: Instant| at.checked_sub(by);
    let reverted = dropped
        .reverted
        .iter()
        .map(|(key, at)| Some((key.clone(), back(*at)?)))
        .collect::<Option<BTreeMap<_, _>>>()?;
    Some(Snapshot {
        generation: dropped.generation,
        node: Arc::clone(&dropped.node),
        pods: dropped.pods.clone(),
        needles: Vec::new(),
        served_rewritten: Arc::default(),
        reverted: Arc::new(reverted),
        dropped_at: match dropped.dropped_at {
            Some(at) => Some(back(at)?),
            None => None,
        },
        series: dropped.series,
    })
}

/// After an outage, a new watch's first pass reads its scope only within the window after
/// the drop: once it passed, the overlay costs a new watch nothing again.
#[test]
fn a_new_watch_reads_its_scope_for_reverted_keys_only_within_the_window() {
    let (overlay, _) = overlay();
    web_a_moved(&overlay, 0);
    let during = overlay.snapshot(CloudState::down(0));
    assert!(during.rewrite(EndpointKind::Slice, &slice()).is_some());
    assert!(!during.reverting(), "no drop yet");
    let dropped = overlay.snapshot(CloudState::down(1));
    assert!(dropped.reverting());
    assert!(WatchView::new(EndpointKind::Slice).pass_due(&dropped));
    let later = Instant::now() + Duration::from_secs(16 * 60);
    assert!(!dropped.reverting_at(later));
    // The same snapshot 16 minutes on (when the clock goes back that far).
    let Some(old) = aged(&dropped, Duration::from_secs(16 * 60)) else {
        return;
    };
    assert!(!old.reverted(EndpointKind::Slice, "default", "web-x"));
    let mut view = WatchView::new(EndpointKind::Slice);
    assert!(!view.pass_due(&old), "nothing to read for");
    assert!(view.pass(&old).is_none(), "a pass reads nothing");
}
