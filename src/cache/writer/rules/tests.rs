use super::*;

fn head(json: &str) -> ObjectHead<'_> {
    ObjectHead::read(json.as_bytes()).unwrap()
}

fn key_of(collection: &CollectionKey, json: &str) -> Option<(ObjectKey, Option<String>)> {
    object_key(collection, &head(json))
}

#[test]
fn type_meta_goes_in_front() {
    let out = with_type_meta(br#"{"metadata":{"name":"a"}}"#, "Pod", Some("v1"));
    assert_eq!(
        out,
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#
    );
    let out = with_type_meta(b" { } ", "Pod", Some("v1"));
    assert_eq!(out, br#"{"kind":"Pod","apiVersion":"v1" } "#);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["kind"], "Pod");
    let out = with_type_meta(br#"{"apiVersion":"v1"}"#, "Pod", None);
    assert_eq!(out, br#"{"kind":"Pod","apiVersion":"v1"}"#);
}

/// An item with its own `apiVersion` but no `kind` is stored as one object with each named
/// once, which the store serves; it was stored with `apiVersion` twice, never served.
#[test]
fn an_item_with_an_api_version_and_no_kind_is_stored_once_and_served() {
    use std::sync::atomic::AtomicBool;

    use crate::cache::synced::Synced;
    use crate::cache::target::CacheTarget;
    use crate::cache::temp_dir::TempDir;
    use crate::cache::writer::{WriterOptions, channel, run};
    use crate::selector::Selectors;

    let dir = TempDir::new("rules-api-version");
    let (store, _) = Store::open(&dir.root()).unwrap();
    let pods = CollectionKey::new("kubelet", "pods", "v1", "");
    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[
        {"apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"nodeName":"n1"}},
        {"metadata":{"name":"b","namespace":"ns","resourceVersion":"6"},"spec":{"nodeName":"n1"}}]}"#;
    // Whole, and cut where the item's head is found by a parse rather than located.
    for chunk in [body.len(), 3] {
        let (tx, rx) = channel(64, 1 << 20);
        let target = CacheTarget::List {
            collection: pods.clone(),
            namespace: None,
            selectors: Selectors::everything(),
            paged: false,
        };
        let mut session = tx.begin(target, 200, false, None).unwrap();
        for piece in body.as_bytes().chunks(chunk) {
            assert!(session.chunk(piece));
        }
        session.finish(true);
        drop(tx);
        let options = WriterOptions::default();
        run(
            &store,
            rx,
            &AtomicBool::new(false),
            options,
            &Synced::default(),
        );
        for name in ["a", "b"] {
            let key = ObjectKey {
                collection: pods.clone(),
                namespace: Some("ns".to_owned()),
                name: name.to_owned(),
            };
            let served = store.get(&key).unwrap().expect("served");
            let head = ObjectHead::read(&served).unwrap();
            assert_eq!(
                (head.kind.as_deref(), head.api_version.as_deref()),
                (Some("Pod"), Some("v1")),
                "{}",
                String::from_utf8_lossy(&served)
            );
        }
    }
}

#[test]
fn objects_are_keyed_by_namespace_and_name_and_unbound_pods_are_not_stored() {
    let pods = CollectionKey::new("kubelet", "pods", "v1", "");
    let bound = r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"nodeName":"n1"}}"#;
    let (key, rv) = key_of(&pods, bound).unwrap();
    assert_eq!(
        (key.namespace.as_deref(), key.name.as_str(), rv.as_deref()),
        (Some("ns"), "a", Some("5"))
    );
    for unbound in [
        r#"{"metadata":{"name":"a","namespace":"ns"},"spec":{}}"#,
        r#"{"metadata":{"name":"a","namespace":"ns"},"spec":{"nodeName":""}}"#,
        r#"{"metadata":{"name":"a","namespace":"ns"}}"#,
    ] {
        assert!(key_of(&pods, unbound).is_none(), "{unbound}");
    }
    // Another group's `pods` is not the core pod: no binding rule.
    let metrics = CollectionKey::new("kubelet", "pods", "v1beta1", "metrics.k8s.io");
    assert!(key_of(&metrics, r#"{"metadata":{"name":"a","namespace":"ns"}}"#).is_some());
    // Cluster-scoped (or an empty namespace): no namespace directory.
    let nodes = CollectionKey::new("kubelet", "nodes", "v1", "");
    let (key, rv) = key_of(&nodes, r#"{"metadata":{"name":"n1","namespace":""}}"#).unwrap();
    assert_eq!((key.namespace, rv), (None, None));
}

#[test]
fn a_status_or_a_nameless_object_is_not_stored() {
    let nodes = CollectionKey::new("kubelet", "nodes", "v1", "");
    for json in [
        r#"{"kind":"Status","metadata":{"name":"n1"}}"#,
        r#"{"kind":"Node","metadata":{"name":""}}"#,
        r#"{"kind":"Node","metadata":{}}"#,
        r#"{"kind":"Node"}"#,
    ] {
        assert!(key_of(&nodes, json).is_none(), "{json}");
    }
}

#[test]
fn a_kind_is_namespaced_by_its_request_or_as_a_built_in() {
    let check = |group: &str, resource: &str, request_namespace: Option<&str>, expected| {
        let c = CollectionKey::new("kubelet", resource, "v1", group);
        assert_eq!(
            namespaced(&c, request_namespace),
            expected,
            "{group}/{resource} {request_namespace:?}"
        );
    };
    check("", "pods", None, true);
    check("discovery.k8s.io", "endpointslices", None, true);
    check("coordination.k8s.io", "leases", None, true);
    check("", "nodes", None, false);
    check("", "namespaces", None, false);
    // Another group's `pods` is not known: only its request tells.
    check("metrics.k8s.io", "pods", None, false);
    check("example.com", "widgets", None, false);
    check("example.com", "widgets", Some("ns"), true);
}

#[test]
fn a_metadata_view_keeps_only_partial_object_metadata() {
    let full = CollectionKey::new("coredns", "pods", "v1", "");
    let meta = full.clone().metadata();
    assert!(in_view_form(&meta, Some("PartialObjectMetadata")));
    // Whole objects a cloud sent despite `as=`, typed or not.
    assert!(!in_view_form(&meta, Some("Pod")));
    assert!(!in_view_form(&meta, None));
    // The full view takes what its kind is.
    assert!(in_view_form(&full, Some("Pod")));
    assert!(in_view_form(&full, None));
}
