use super::*;
use crate::cache::key::CollectionKey;

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

#[test]
fn tombstones_are_bounded_and_forget_the_oldest_first() {
    let mut tombstones = Tombstones::default();
    let key = |name: &str| ObjectKey {
        collection: pods(),
        namespace: Some("ns".into()),
        name: name.into(),
    };
    assert!(!tombstones.buries(&key("p0"), Some("1"), None));
    for i in 0..=TOMBSTONES {
        tombstones.bury(&key(&format!("p{i}")), 10, 11);
    }
    assert_eq!(tombstones.order.len(), TOMBSTONES);
    assert_eq!(tombstones.stale_up_to.len(), TOMBSTONES);
    assert!(!tombstones.buries(&key("p0"), Some("5"), None), "forgotten");
    let last = key(&format!("p{TOMBSTONES}"));
    assert!(tombstones.buries(&last, Some("10"), None));
    assert!(!tombstones.buries(&last, Some("11"), None));
    assert!(
        !tombstones.buries(&last, Some("x"), None),
        "unreadable: never stale"
    );
    assert!(!tombstones.buries(&last, None, None));
    // Cluster-scoped `p1` is another object than `ns/p1`.
    let cluster = ObjectKey {
        namespace: None,
        ..key("p1")
    };
    assert!(!tombstones.buries(&cluster, Some("1"), None));
}

#[test]
fn a_list_taken_after_the_removal_is_never_refused() {
    let mut tombstones = Tombstones::default();
    let key = ObjectKey {
        collection: pods(),
        namespace: Some("ns".into()),
        name: "p".into(),
    };
    // Version 5 was left out by a list at 40.
    tombstones.bury(&key, 5, 40);
    assert!(tombstones.buries(&key, Some("5"), None), "a replayed event");
    assert!(
        tombstones.buries(&key, Some("5"), Some(39)),
        "an older list"
    );
    assert!(
        !tombstones.buries(&key, Some("5"), Some(40)),
        "the cloud at 40"
    );
    assert!(!tombstones.buries(&key, Some("3"), Some(41)));
    // Merged with a later removal, both bounds rise.
    tombstones.bury(&key, 7, 50);
    assert!(tombstones.buries(&key, Some("7"), Some(45)));
    assert!(!tombstones.buries(&key, Some("7"), Some(50)));
}
