//! List replacements: scope, deletions, newer objects, tombstones, abandoned answers.

use super::*;

#[test]
fn replace_of_a_namespace_deletes_only_absent_objects_in_scope() {
    let dir = TempDir::new("replace-ns");
    let store = open(&dir);
    seed_replace(&store);
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    let v = object(Some("a"), "v", 9, "web");
    assert_eq!(
        replace
            .put(Some("a"), "x", &object(Some("a"), "x", 5, "web"), Some("5"))
            .unwrap(),
        PutOutcome::Identical
    );
    assert_eq!(
        replace.put(Some("a"), "v", &v, Some("9")).unwrap(),
        PutOutcome::Written {
            bytes: v.len() as u64
        }
    );
    // Not visible before the commit.
    assert_eq!(get(&store, &pods(), Some("a"), "v"), None);
    // A watch stores a/n, created after the list was taken, while it is staged.
    put(&store, &pods(), Some("a"), "n", 11, "web");
    let report = replace.commit(&mut app_web, Some("10")).unwrap();
    let expected = ReplaceReport {
        written: 1,
        identical: 1,
        stale: 0,
        deleted: 2,
        kept_newer: 1,
        bytes: v.len() as u64,
        deleted_meanwhile: 0,
    };
    assert_eq!(report, expected);
    // a/y and a/z (newer than the list, stored before it) are gone; a/w is out of scope.
    assert_eq!(
        names(&store, &pods(), None, None).unwrap(),
        ["a/n", "a/v", "a/w", "a/x", "b/q"]
    );
    assert_eq!(get(&store, &pods(), Some("a"), "v"), Some(v));
    assert!(staging_entries(&dir.root()).is_empty());
    assert!(
        !snapshot(&dir.root())
            .keys()
            .any(|k| k.starts_with(".journal"))
    );
}

#[test]
fn replace_of_every_namespace_reaches_all_of_them() {
    let dir = TempDir::new("replace-all");
    let store = open(&dir);
    seed_replace(&store);
    let mut replace = store.begin_replace(&pods(), None).unwrap();
    replace
        .put(Some("a"), "x", &object(Some("a"), "x", 6, "web"), Some("6"))
        .unwrap();
    put(&store, &pods(), Some("c"), "n", 11, "web");
    let report = replace.commit(&mut app_web, Some("10")).unwrap();
    assert_eq!(
        (report.written, report.deleted, report.kept_newer),
        (1, 3, 1)
    );
    assert_eq!(
        names(&store, &pods(), None, None).unwrap(),
        ["a/w", "a/x", "c/n"]
    );
    assert_eq!(
        get(&store, &pods(), Some("a"), "x"),
        Some(object(Some("a"), "x", 6, "web"))
    );

    // Without a list version nothing counts as newer.
    let replace = store.begin_replace(&pods(), None).unwrap();
    put(&store, &pods(), Some("c"), "m", 12, "web");
    let report = replace.commit(&mut |_| true, None).unwrap();
    assert_eq!((report.deleted, report.kept_newer), (4, 0));
    assert_eq!(
        names(&store, &pods(), None, None).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn replace_of_cluster_scoped_objects() {
    let dir = TempDir::new("replace-cluster");
    let store = open(&dir);
    put(&store, &nodes(), None, "edge-1", 1, "node");
    put(&store, &nodes(), None, "edge-2", 1, "node");
    let mut replace = store.begin_replace(&nodes(), None).unwrap();
    replace
        .put(
            None,
            "edge-3",
            &object(None, "edge-3", 2, "node"),
            Some("2"),
        )
        .unwrap();
    replace
        .put(
            None,
            "edge-1",
            &object(None, "edge-1", 2, "node"),
            Some("2"),
        )
        .unwrap();
    let report = replace.commit(&mut |_| true, Some("2")).unwrap();
    assert_eq!((report.written, report.deleted), (2, 1));
    assert_eq!(
        names(&store, &nodes(), None, None).unwrap(),
        ["/edge-1", "/edge-3"]
    );
}

#[test]
fn empty_answer_leaves_an_existing_empty_collection() {
    let dir = TempDir::new("replace-empty");
    let store = open(&dir);
    // Never cached before: the collection (and namespace) now exist, empty.
    let report = store
        .begin_replace(&nodes(), None)
        .unwrap()
        .commit(&mut |_| true, Some("3"))
        .unwrap();
    assert_eq!(report, ReplaceReport::default());
    assert!(store.has_collection(&nodes()));
    assert_eq!(
        names(&store, &nodes(), None, None).unwrap(),
        Vec::<String>::new()
    );
    store
        .begin_replace(&pods(), Some("kube-system"))
        .unwrap()
        .commit(&mut |_| true, Some("3"))
        .unwrap();
    assert!(dir.root().join("kubelet/pods.v1.core/kube-system").is_dir());
    assert_eq!(
        names(&store, &pods(), Some("kube-system"), None).unwrap(),
        Vec::<String>::new()
    );

    // Cached before: everything in scope goes, the directory stays.
    seed_replace(&store);
    let report = store
        .begin_replace(&pods(), Some("a"))
        .unwrap()
        .commit(&mut |_| true, None)
        .unwrap();
    assert_eq!(report.deleted, 4);
    assert!(store.has_collection(&pods()));
    assert_eq!(
        names(&store, &pods(), Some("a"), None).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(names(&store, &pods(), None, None).unwrap(), ["b/q"]);
}

/// Stores a/x at 20 and a/y at 5, then stages a list at 10 of both, while a watch stores a
/// newer a/y (12).
fn stage_over_newer(store: &Store) -> Replace<'_> {
    put(store, &pods(), Some("a"), "x", 20, "web");
    put(store, &pods(), Some("a"), "y", 5, "web");
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    assert_eq!(
        replace
            .put(
                Some("a"),
                "x",
                &object(Some("a"), "x", 10, "web"),
                Some("10")
            )
            .unwrap(),
        PutOutcome::Stale
    );
    let y = object(Some("a"), "y", 10, "web");
    assert!(matches!(
        replace.put(Some("a"), "y", &y, Some("10")).unwrap(),
        PutOutcome::Written { .. }
    ));
    // A watch event stores a newer y while the list is being staged.
    put(store, &pods(), Some("a"), "y", 12, "web");
    replace
}

#[test]
fn a_partial_list_never_overwrites_a_newer_object() {
    let dir = TempDir::new("replace-stale");
    let store = open(&dir);
    let report = stage_over_newer(&store).commit_partial(Some("10")).unwrap();
    assert_eq!(
        (report.written, report.stale, report.deleted, report.bytes),
        (0, 2, 0, 0)
    );
    assert_eq!(
        get(&store, &pods(), Some("a"), "x"),
        Some(object(Some("a"), "x", 20, "web"))
    );
    assert_eq!(
        get(&store, &pods(), Some("a"), "y"),
        Some(object(Some("a"), "y", 12, "web"))
    );
    assert!(staging_entries(&dir.root()).is_empty());
}

/// Issue 28, item 2: the cloud's whole answer wins over what the cache held before it, but
/// not over what a watch stored while it was staged.
#[test]
fn a_whole_list_wins_over_a_newer_object_stored_before_it() {
    let dir = TempDir::new("replace-whole-newer");
    let store = open(&dir);
    let report = stage_over_newer(&store)
        .commit(&mut |_| true, Some("10"))
        .unwrap();
    let x = object(Some("a"), "x", 10, "web");
    assert_eq!(
        (report.written, report.stale, report.deleted, report.bytes),
        (1, 1, 0, x.len() as u64)
    );
    assert_eq!(get(&store, &pods(), Some("a"), "x"), Some(x));
    assert_eq!(
        get(&store, &pods(), Some("a"), "y"),
        Some(object(Some("a"), "y", 12, "web"))
    );
    assert!(staging_entries(&dir.root()).is_empty());
}

/// Issue 28, item 2: after an etcd restore every resourceVersion the cloud hands out is
/// lower than those cached; its whole list replaces the cache all the same, stored versions
/// and tombstones notwithstanding, and watch events then follow from its versions.
#[test]
fn after_an_etcd_restore_a_whole_list_at_lower_versions_wins() {
    let dir = TempDir::new("replace-restore");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "p", 5000, "web");
    put(&store, &pods(), Some("a"), "q", 5001, "web");
    put(&store, &pods(), Some("a"), "r", 6000, "web");
    put(&store, &pods(), Some("a"), "s", 6500, "web");
    assert!(
        store
            .delete(&key(&pods(), Some("a"), "s"), Some("7000"))
            .unwrap()
    );

    let mut relist = store.begin_replace(&pods(), Some("a")).unwrap();
    relist.set_list_rv(Some("300"));
    let p = object(Some("a"), "p", 200, "restored");
    let q = object(Some("a"), "q", 201, "restored");
    let s = object(Some("a"), "s", 250, "restored");
    for (name, bytes, rv) in [("p", &p, "200"), ("q", &q, "201"), ("s", &s, "250")] {
        // Judged stale while staging; whether the answer is whole is told by the commit.
        assert_eq!(
            relist.put(Some("a"), name, bytes, Some(rv)).unwrap(),
            PutOutcome::Stale,
            "{name}"
        );
    }
    let report = relist.commit(&mut |_| true, Some("300")).unwrap();
    assert_eq!(
        (
            report.written,
            report.stale,
            report.deleted,
            report.kept_newer
        ),
        (3, 0, 1, 0)
    );
    assert_eq!(get(&store, &pods(), Some("a"), "p"), Some(p));
    assert_eq!(get(&store, &pods(), Some("a"), "q"), Some(q));
    assert_eq!(get(&store, &pods(), Some("a"), "s"), Some(s));
    assert_eq!(get(&store, &pods(), Some("a"), "r"), None);
    // The cloud's next events are newer than the list: stored.
    assert!(matches!(
        put(&store, &pods(), Some("a"), "p", 310, "web"),
        PutOutcome::Written { .. }
    ));
    // r was gone at 300: a replayed version up to it is refused, a later one is stored.
    assert_eq!(
        put(&store, &pods(), Some("a"), "r", 250, "web"),
        PutOutcome::Stale
    );
    assert!(matches!(
        put(&store, &pods(), Some("a"), "r", 350, "web"),
        PutOutcome::Written { .. }
    ));
    assert!(staging_entries(&dir.root()).is_empty());
}

#[test]
fn replace_never_brings_back_an_object_a_watch_deleted_meanwhile() {
    let dir = TempDir::new("replace-deleted");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "x", 5, "web");
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    let x = object(Some("a"), "x", 6, "web");
    assert!(matches!(
        replace.put(Some("a"), "x", &x, Some("6")).unwrap(),
        PutOutcome::Written { .. }
    ));
    // A watch's DELETED arrives while the (older) list is being staged.
    let key = ObjectKey {
        collection: pods(),
        namespace: Some("a".into()),
        name: "x".into(),
    };
    assert!(store.delete(&key, None).unwrap());
    let report = replace.commit(&mut |_| true, Some("6")).unwrap();
    assert_eq!((report.written, report.deleted_meanwhile), (0, 1));
    assert_eq!(get(&store, &pods(), Some("a"), "x"), None);
    assert!(staging_entries(&dir.root()).is_empty());
}

/// Issue 11, item 7: a list whose scope the hub misread deleted objects the cloud still
/// has; the next whole list of them, at a later resourceVersion, must store them again.
#[test]
fn a_later_whole_list_restores_what_a_misread_list_removed() {
    let dir = TempDir::new("replace-misread");
    let store = open(&dir);
    let mut first = store.begin_replace(&pods(), Some("a")).unwrap();
    for (name, rv) in [("p", 5), ("q", 6)] {
        let bytes = object(Some("a"), name, rv, "web");
        first
            .put(Some("a"), name, &bytes, Some(&rv.to_string()))
            .unwrap();
    }
    first.commit(&mut |_| true, Some("10")).unwrap();
    // Empty, as a list of another scope would be.
    let misread = store.begin_replace(&pods(), Some("a")).unwrap();
    let report = misread.commit(&mut |_| true, Some("10")).unwrap();
    assert_eq!(report.deleted, 2);
    // A replayed event and a list older than the removal are refused still.
    let p = key(&pods(), Some("a"), "p");
    assert_eq!(
        store
            .put(&p, &object(Some("a"), "p", 5, "web"), Some("5"))
            .unwrap(),
        PutOutcome::Stale
    );
    let mut older = store.begin_replace(&pods(), Some("a")).unwrap();
    older.set_list_rv(Some("9"));
    let bytes = object(Some("a"), "p", 5, "web");
    assert_eq!(
        older.put(Some("a"), "p", &bytes, Some("5")).unwrap(),
        PutOutcome::Stale
    );
    drop(older);
    // The cloud's whole list at (or after) the removal brings both back.
    let mut relist = store.begin_replace(&pods(), Some("a")).unwrap();
    relist.set_list_rv(Some("10"));
    for (name, rv) in [("p", 5), ("q", 6)] {
        let bytes = object(Some("a"), name, rv, "web");
        assert!(matches!(
            relist
                .put(Some("a"), name, &bytes, Some(&rv.to_string()))
                .unwrap(),
            PutOutcome::Written { .. }
        ));
    }
    relist.commit(&mut |_| true, Some("10")).unwrap();
    assert!(get(&store, &pods(), Some("a"), "p").is_some());
    assert!(get(&store, &pods(), Some("a"), "q").is_some());
}

/// Bug: a list staged an object while no file existed; a watch then stored and deleted
/// it. With no file left, the commit's recheck kept the (older) staged copy.
#[test]
fn replace_never_brings_back_an_object_stored_and_deleted_while_it_was_staged() {
    let dir = TempDir::new("replace-buried");
    let store = open(&dir);
    let w = key(&pods(), Some("ns"), "w");
    let mut replace = store.begin_replace(&pods(), Some("ns")).unwrap();
    let staged = object(Some("ns"), "w", 382, "web");
    assert!(matches!(
        replace.put(Some("ns"), "w", &staged, Some("382")).unwrap(),
        PutOutcome::Written { .. }
    ));
    put(&store, &pods(), Some("ns"), "w", 410, "web");
    assert!(store.delete(&w, Some("423")).unwrap());
    let report = replace.commit(&mut |_| true, Some("400")).unwrap();
    assert_eq!(
        report,
        ReplaceReport {
            stale: 1,
            ..ReplaceReport::default()
        }
    );
    assert_eq!(store.get(&w).unwrap(), None);
    assert!(staging_entries(&dir.root()).is_empty());
}

/// Bug: dropping a staged object deleted meanwhile lowered `written` but not `bytes`.
#[test]
fn an_object_deleted_meanwhile_counts_no_bytes() {
    let dir = TempDir::new("replace-deleted-bytes");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "x", 5, "web");
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    let x = object(Some("a"), "x", 6, "web");
    replace.put(Some("a"), "x", &x, Some("6")).unwrap();
    assert!(store.delete(&key(&pods(), Some("a"), "x"), None).unwrap());
    let report = replace.commit(&mut |_| true, Some("6")).unwrap();
    assert_eq!(
        (report.written, report.bytes, report.deleted_meanwhile),
        (0, 0, 1)
    );
}

#[test]
fn a_deletion_keeps_a_newer_object_and_buries_older_versions() {
    let dir = TempDir::new("delete-rv");
    let store = open(&dir);
    let x = key(&pods(), Some("a"), "x");
    put(&store, &pods(), Some("a"), "x", 9, "web");
    assert!(!store.delete(&x, Some("8")).unwrap(), "a late DELETED");
    assert!(get(&store, &pods(), Some("a"), "x").is_some());
    assert!(store.delete(&x, Some("12")).unwrap());
    assert_eq!(
        put(&store, &pods(), Some("a"), "x", 11, "web"),
        PutOutcome::Stale
    );
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    let old = object(Some("a"), "x", 11, "web");
    assert_eq!(
        replace.put(Some("a"), "x", &old, Some("11")).unwrap(),
        PutOutcome::Stale
    );
    drop(replace);
    assert!(matches!(
        put(&store, &pods(), Some("a"), "x", 12, "web"),
        PutOutcome::Written { .. }
    ));
}

#[test]
fn unchanged_relist_writes_nothing() {
    let dir = TempDir::new("replace-unchanged");
    // A journal would be written (and this option stop the commit) if anything changed.
    let store = open_crashing_at(&dir, CommitStep::JournalWritten);
    seed_replace(&store);
    let mut replace = store.begin_replace(&pods(), Some("b")).unwrap();
    assert_eq!(
        replace
            .put(Some("b"), "q", &object(Some("b"), "q", 5, "web"), Some("5"))
            .unwrap(),
        PutOutcome::Identical
    );
    assert!(staging_entries(&dir.root()).is_empty());
    let report = replace.commit(&mut |_| true, Some("5")).unwrap();
    assert_eq!(
        report,
        ReplaceReport {
            identical: 1,
            ..ReplaceReport::default()
        }
    );
    assert!(staging_entries(&dir.root()).is_empty());
}

#[test]
fn replace_refuses_objects_outside_its_namespace() {
    let dir = TempDir::new("replace-scope");
    let store = open(&dir);
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    for ns in [Some("b"), None] {
        match replace.put(ns, "x", b"{}", None) {
            Err(StoreError::OutsideScope { .. }) => {}
            other => panic!("{ns:?}: {other:?}"),
        }
    }
    drop(replace);
    assert!(!store.has_collection(&pods()));
}

#[test]
fn abandoned_replace_changes_nothing() {
    let dir = TempDir::new("replace-abandon");
    let store = open(&dir);
    seed_replace(&store);
    let before = snapshot(&dir.root());
    let replace = stage_two(&store);
    assert_eq!(staging_entries(&dir.root()).len(), 2);
    drop(replace);
    let mut replace = store.begin_replace(&nodes(), None).unwrap();
    replace
        .put(
            None,
            "edge-1",
            &object(None, "edge-1", 9, "node"),
            Some("9"),
        )
        .unwrap();
    drop(replace);
    assert_eq!(snapshot(&dir.root()), before);
    assert!(!store.has_collection(&nodes()));
    assert!(staging_entries(&dir.root()).is_empty());
}
