use super::*;

#[test]
fn offline_creates_need_a_name_the_apiserver_and_the_store_accept() {
    let check = |meta: serde_json::Value| unusable_name(&serde_json::json!({ "metadata": meta }));
    for meta in [
        serde_json::json!({"name": "web-1"}),
        serde_json::json!({"name": "kubelet.17a8b2c3d4e5f6a7"}),
        serde_json::json!({"generateName": "csr-"}),
        serde_json::json!({"generateName": "a".repeat(100)}),
        serde_json::json!({"name": "", "generateName": "web-"}),
    ] {
        assert_eq!(check(meta.clone()), None, "{meta}");
    }
    for meta in [
        serde_json::json!({"name": "../x"}),
        serde_json::json!({"name": "a/b"}),
        serde_json::json!({"name": "Upper"}),
        serde_json::json!({"name": ".hidden"}),
        serde_json::json!({"name": "a%2F"}),
        serde_json::json!({"name": "x".repeat(254)}),
        serde_json::json!({"generateName": "../"}),
        serde_json::json!({"name": "", "generateName": "A-"}),
        serde_json::json!({}),
        serde_json::json!({"name": ""}),
    ] {
        assert!(check(meta.clone()).is_some(), "{meta}");
    }
}

#[test]
fn watch_hold_is_between_30_and_60_minutes() {
    let d = random_watch_duration();
    assert!(
        d >= Duration::from_secs(1800) && d < Duration::from_secs(3600),
        "{d:?}"
    );
}

pub(super) use crate::stream::tests::Scratch;

/// The scratch directory `offline-<tag>`.
pub(super) fn scratch(tag: &str) -> Scratch {
    Scratch::new(&format!("offline-{tag}"))
}

/// An offline answerer over a store in `dir`, for node `n1` with the overlay on, its one
/// cloud server down.
pub(super) fn offline_in(dir: &Scratch) -> Offline {
    let (store, _) = Store::open(&dir.0).unwrap();
    let backends = Backends::new(
        vec!["https://cloud:6443".to_owned()],
        crate::config::LbMode::RoundRobin,
    );
    backends.set_healthy(0, false);
    Offline {
        grants: Arc::new(Grants::load(&store)),
        store: Arc::new(store),
        backends: Arc::new(backends),
        shutdown: Arc::new(AtomicBool::new(false)),
        overlay: Overlay::new("n1", true),
        synced: Arc::default(),
    }
}

/// kubelet's cached pod `default/<name>` on n1 at `ip`, Ready.
pub(super) fn pod(name: &str, uid: &str, ip: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "41"},
        "spec": {"nodeName": "n1", "containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// kubelet's status patch (strategic merge) moving pod `uid` from `old` to `new`.
pub(super) fn status_patch(uid: &str, old: &str, new: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"metadata": {"uid": uid}, "status": {
        "$setElementOrder/conditions": [{"type": "Ready"}],
        "$setElementOrder/podIPs": [{"ip": new}],
        "conditions": [{"status": "True", "type": "Ready"}],
        "podIP": new,
        "podIPs": [{"ip": new}, {"$patch": "delete", "ip": old}]
    }}))
    .unwrap()
}

/// A held watch of EndpointSlices passes over the stored slices of its scope: the slice
/// naming web-a goes out rewritten to kubelet's new IP (the cloud's resourceVersion kept),
/// once; when the cloud is back, the cloud's stored bytes go out again. The disk keeps the
/// cloud's slice throughout.
#[test]
fn a_held_slice_watch_passes_the_overlay_and_gives_the_clouds_slice_back() {
    use crate::overlay::{Capture, Captured, PodWrite};
    use crate::request::classify;
    use std::borrow::Cow;

    let dir = scratch("overlay-pass");
    let offline = offline_in(&dir);
    let slices = CollectionKey::new("kube-proxy", "endpointslices", "v1", "discovery.k8s.io");
    let slice = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "namespace": "default", "resourceVersion": "500",
            "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.1.10"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "nodeName": "n1",
            "targetRef": {"kind": "Pod", "namespace": "default", "name": "web-a", "uid": "ua"}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .unwrap();
    let key = ObjectKey {
        collection: slices.clone(),
        namespace: Some("default".to_owned()),
        name: "web-x".to_owned(),
    };
    offline.store.put(&key, &slice, Some("500")).unwrap();
    let headers = [("User-Agent".to_owned(), "kube-proxy/v1.30.2".to_owned())];
    let req = classify(
        "GET",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=1",
        &headers,
    )
    .unwrap();
    let path = req.resource().unwrap();
    let everything = Selectors::everything();
    let pass = |view: &mut WatchView| -> Option<Vec<Vec<u8>>> {
        let snapshot = offline.overlay.snapshot(offline.cloud());
        if !view.pass_due(&snapshot) {
            return None;
        }
        let Some(mut pass) = view.pass(&snapshot) else {
            return Some(Vec::new());
        };
        let objects = offline.watched_objects(&req, path, &slices, &everything);
        let sent = objects.filter_map(|object| pass.object(&object).map(Cow::into_owned));
        Some(sent.collect())
    };

    let mut view = WatchView::new(EndpointKind::Slice);
    assert_eq!(
        pass(&mut view),
        None,
        "nothing overlaid yet: the cache is not read"
    );
    let cached = pod("web-a", "ua", "10.244.1.10");
    let body = status_patch("ua", "10.244.1.10", "10.244.1.20");
    let captured = offline.overlay.capture(
        Capture {
            by_node_kubelet: true,
            namespace: "default",
            name: "web-a",
            write: PodWrite::Patch {
                content_type: "application/strategic-merge-patch+json",
                body: &body,
            },
            cached_pod: Some(&cached),
        },
        offline.cloud(),
    );
    assert_eq!(captured, Captured::Applied { changed: true });

    let sent = pass(&mut view).expect("the overlay moved");
    assert_eq!(sent.len(), 1);
    let rewritten: serde_json::Value = serde_json::from_slice(&sent[0]).unwrap();
    assert_eq!(rewritten["endpoints"][0]["addresses"][0], "10.244.1.20");
    assert_eq!(rewritten["metadata"]["resourceVersion"], "500");
    assert_eq!(pass(&mut view), None, "sent once");
    assert_eq!(
        offline.store.get(&key).unwrap().as_deref(),
        Some(&slice[..])
    );

    // The cloud is back: the overlay is dropped and the cloud's slice goes out again.
    offline.backends.set_healthy(0, true);
    let sent = pass(&mut view).expect("the drop moved the overlay");
    assert_eq!(sent, vec![slice.clone()]);
    assert_eq!(pass(&mut view), None);
}
