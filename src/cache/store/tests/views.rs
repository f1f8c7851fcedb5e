//! The metadata view of a collection (`CollectionKey::view`): its own directory one level
//! below the component's, apart from the full objects in every operation, replaced and
//! recovered through the journal, and known to the index rebuilt at open.

use super::*;
use crate::cache::key::METADATA_DIR;

fn meta_pods() -> CollectionKey {
    pods().metadata()
}

/// `namespace/name` of every object of `c`; `(not cached)` when it is not.
fn listed(store: &Store, c: &CollectionKey) -> Vec<String> {
    names(store, c, None, None).unwrap_or_else(|| vec!["(not cached)".to_owned()])
}

const META_WEB: &str = "kubelet/partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core/a/web";

#[test]
fn the_metadata_view_is_kept_apart_from_the_full_objects() {
    let dir = TempDir::new("views-apart");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "web", 5, "full");
    assert!(!store.has_collection(&meta_pods()));
    assert_eq!(get(&store, &meta_pods(), Some("a"), "web"), None);
    put(&store, &meta_pods(), Some("a"), "web", 5, "meta");
    put(&store, &meta_pods(), Some("b"), "db", 5, "meta");
    let stored = snapshot(&dir.root());
    assert_eq!(
        stored["kubelet/pods.v1.core/a/web"],
        Some(object(Some("a"), "web", 5, "full"))
    );
    assert_eq!(stored[META_WEB], Some(object(Some("a"), "web", 5, "meta")));
    assert_eq!(
        get(&store, &pods(), Some("a"), "web"),
        Some(object(Some("a"), "web", 5, "full"))
    );
    assert_eq!(
        get(&store, &meta_pods(), Some("a"), "web"),
        Some(object(Some("a"), "web", 5, "meta"))
    );
    assert_eq!(listed(&store, &pods()), ["a/web"]);
    assert_eq!(listed(&store, &meta_pods()), ["a/web", "b/db"]);

    // Pruning one view leaves the other, and the views' directory.
    assert!(store.delete_collection(&meta_pods()).unwrap());
    assert!(!store.has_collection(&meta_pods()));
    assert!(dir.root().join("kubelet").join(METADATA_DIR).is_dir());
    assert_eq!(listed(&store, &pods()), ["a/web"]);
    assert!(store.delete_collection(&pods()).unwrap());
    put(&store, &meta_pods(), Some("a"), "web", 5, "meta");
    assert_eq!(listed(&store, &meta_pods()), ["a/web"]);
}

#[test]
fn the_views_directory_is_no_collection_of_the_full_view() {
    let dir = TempDir::new("views-refused");
    let store = open(&dir);
    put(&store, &meta_pods(), Some("a"), "web", 5, "meta");
    // What a request for `/apis/meta.k8s.io/v1/partialobjectmetadatas` would key.
    let lookalike = CollectionKey::new("kubelet", "partialobjectmetadatas", "v1", "meta.k8s.io");
    assert!(store.delete_collection(&lookalike).is_err());
    assert!(store.list(&lookalike, None, None).is_err());
    assert!(
        store
            .put(&key(&lookalike, None, "pods.v1.core"), b"{}", None)
            .is_err()
    );
    assert_eq!(
        get(&store, &meta_pods(), Some("a"), "web"),
        Some(object(Some("a"), "web", 5, "meta"))
    );
}

#[test]
fn a_symlinked_views_directory_is_not_followed() {
    let dir = TempDir::new("views-symlink");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "web", 5, "full");
    // Through the link, `<views>/pods.v1.core` would be the full objects' directory.
    let component = dir.root().join("kubelet");
    symlink(&component, component.join(METADATA_DIR)).unwrap();
    assert!(
        component
            .join(METADATA_DIR)
            .join("pods.v1.core/a/web")
            .exists()
    );
    assert!(!store.has_collection(&meta_pods()));
    assert_eq!(get(&store, &meta_pods(), Some("a"), "web"), None);
    assert_eq!(listed(&store, &meta_pods()), ["(not cached)"]);
}

#[test]
fn after_a_restart_the_index_knows_the_metadata_view() {
    let dir = TempDir::new("views-index");
    {
        let store = open(&dir);
        put(&store, &meta_pods(), Some("a"), "web", 5, "meta");
        put(&store, &pods(), Some("a"), "web", 7, "full");
    }
    let store = open(&dir);
    // A full object and its metadata view: two entries.
    assert_eq!(store.index().len(), 2);
    let marker = b"not written by the store";
    fs::write(dir.root().join(META_WEB), marker).unwrap();
    // Read, the marker would differ and be rewritten: the index answered.
    assert_eq!(
        put(&store, &meta_pods(), Some("a"), "web", 5, "meta"),
        PutOutcome::Identical
    );
    assert_eq!(
        put(&store, &meta_pods(), Some("a"), "web", 4, "older"),
        PutOutcome::Stale
    );
    assert_eq!(fs::read(dir.root().join(META_WEB)).unwrap(), marker);
}

/// A replacement of the metadata view with a/web and b/db, not committed.
fn stage(store: &Store) -> Replace<'_> {
    let mut replace = store.begin_replace(&meta_pods(), None).unwrap();
    for (ns, name) in [("a", "web"), ("b", "db")] {
        replace
            .put(Some(ns), name, &object(Some(ns), name, 9, "web"), Some("9"))
            .unwrap();
    }
    replace
}

#[test]
fn a_replacement_of_the_metadata_view_commits_and_recovers_after_a_crash() {
    let expected = |root: &Path| {
        let stored = snapshot(root);
        assert_eq!(stored[META_WEB], Some(object(Some("a"), "web", 9, "web")));
        assert!(
            stored.contains_key("kubelet/partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core/b/db")
        );
        assert!(!stored.contains_key("kubelet/pods.v1.core"));
    };

    // Into an empty root: every directory down to the kind is made.
    let dir = TempDir::new("views-replace");
    let store = open(&dir);
    stage(&store).commit(&mut |_| true, Some("9")).unwrap();
    expected(&dir.root());
    // A whole list without `b/db` removes it from this view only.
    put(&store, &pods(), Some("b"), "db", 5, "full");
    let mut replace = store.begin_replace(&meta_pods(), None).unwrap();
    replace
        .put(
            Some("a"),
            "web",
            &object(Some("a"), "web", 9, "web"),
            Some("9"),
        )
        .unwrap();
    replace.commit(&mut |_| true, Some("10")).unwrap();
    assert_eq!(listed(&store, &meta_pods()), ["a/web"]);
    assert_eq!(listed(&store, &pods()), ["b/db"]);

    // A crash once the journal is visible: the next open rolls it forward.
    let dir = TempDir::new("views-crash");
    {
        let store = open_crashing_at(&dir, CommitStep::JournalVisible);
        assert!(stage(&store).commit(&mut |_| true, Some("9")).is_err());
    }
    let store = open(&dir);
    expected(&dir.root());
    assert_eq!(listed(&store, &meta_pods()), ["a/web", "b/db"]);
}
