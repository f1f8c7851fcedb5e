use super::*;
use crate::cache::store::StoredHead;
use crate::names::Gvr;

#[test]
fn continue_tokens_round_trip_and_foreign_ones_are_refused() {
    let token = encode_continue("kube-system", "coredns-1");
    assert_eq!(
        decode_continue(&token),
        Some(("kube-system".into(), "coredns-1".into()))
    );
    assert_eq!(
        decode_continue(&encode_continue("", "node-1")),
        Some(("".into(), "node-1".into()))
    );
    for foreign in [
        "",
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ",
        "tinyhub1.zz.00",
        "tinyhub1.6161",
        "tinyhub1.61.",
        "tinyhub1.6.61",
    ] {
        assert_eq!(decode_continue(foreign), None, "{foreign:?}");
    }
}

#[test]
fn skipped_files_make_one_warning_per_list() {
    let path = ResourcePath {
        gvr: Gvr::new("", "v1", "pods"),
        subresource: None,
        namespace: None,
        name: None,
        legacy_prefix: None,
        extra_path: false,
    };
    let mut skipped = Skipped::new(&path);
    assert_eq!(skipped.message(), None);
    skipped.damaged(Some("default"), "web-1");
    assert_eq!(
        skipped.message().as_deref(),
        Some("offline list of pods: skipped 1 damaged cache file: default/web-1")
    );
    for i in 0..6 {
        skipped.damaged(None, &format!("n{i}"));
    }
    let error = |name: &str| StoreError::Io {
        op: crate::cache::store::StoreOp::Read,
        path: name.into(),
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    };
    skipped.unreadable(error("/cache/a"));
    skipped.unreadable(error("/cache/b"));
    let message = skipped.message().unwrap();
    assert!(
        message.starts_with(
            "offline list of pods: skipped 7 damaged cache files: default/web-1, n0, n1, n2, n3 and 2 more; 2 unreadable (first: cache: cannot read /cache/a: "
        ),
        "{message}"
    );
    skipped.report();
    assert_eq!(skipped.message(), None, "reported once");
}

#[test]
fn list_heads_filter_by_selector() {
    let stored = |bytes: &[u8], head: Option<StoredHead>| StoredObject {
        namespace: None,
        name: "a".into(),
        bytes: bytes.to_vec(),
        head,
    };
    let pod = br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"7","labels":{"app":"web"}},"spec":{"nodeName":"n1"}}"#;
    let checked = Some(StoredHead {
        kind: Some("Pod".into()),
        resource_version: Some("7".into()),
    });
    let web = crate::selector::Selectors::parse(Some("app=web"), Some("spec.nodeName=n1")).unwrap();
    let db = crate::selector::Selectors::parse(Some("app=db"), None).unwrap();
    let everything = crate::selector::Selectors::everything();
    let head = parse_head(&mut stored(pod, None), &web).unwrap();
    assert!(head.selected);
    assert_eq!(head.resource_version.as_deref(), Some("7"));
    assert!(!parse_head(&mut stored(pod, None), &db).unwrap().selected);
    // A plain list takes the head the store's check read.
    let plain = parse_head(&mut stored(pod, checked), &everything).unwrap();
    assert_eq!(plain.kind.as_deref(), Some("Pod"));
    assert_eq!(plain.resource_version.as_deref(), Some("7"));
    // A file that is no object has no head: damaged, for either kind of list.
    assert!(parse_head(&mut stored(b"{not json", None), &everything).is_none());
    assert!(parse_head(&mut stored(b"{not json", None), &web).is_none());
}
