//! Lists proven unchanged: what proves one (the same scope at the same resourceVersion, its
//! collection untouched since a whole commit of the cloud's own bytes), what never does,
//! and what a proven list does (nothing past its `metadata`, its end the bookkeeping only).
//!
//! Each repeat below carries a pod the first list did not have at the same resourceVersion
//! (no apiserver would): where it is found on disk, the repeat was read; where it is not,
//! the repeat was taken as unchanged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::super::list_cost::{padded_pod, pod_list};
use super::super::tee::{CacheMsg, channel};
use super::super::{CacheTx, WriterOptions, run};
use crate::cache::key::{CollectionKey, ObjectKey};
use crate::cache::store::Store;
use crate::cache::synced::Synced;
use crate::cache::target::CacheTarget;
use crate::cache::temp_dir::TempDir;
use crate::metrics::METRICS;
use crate::selector::Selectors;

/// The tests here count [`METRICS`]' unchanged lists, which only they make: one at a time.
static COUNTING: Mutex<()> = Mutex::new(());

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

fn target(namespace: Option<&str>, label: Option<&str>) -> CacheTarget {
    CacheTarget::List {
        collection: pods(),
        namespace: namespace.map(str::to_owned),
        selectors: Selectors::parse(label, None).unwrap(),
        paged: false,
    }
}

fn everything() -> CacheTarget {
    target(None, None)
}

/// 20 pods of about 5 KB (a list of ~108 KB: it streams, as a large list does), `changed`
/// (if any) at another resourceVersion and so other bytes.
fn pods_list(list_rv: u64, changed: Option<usize>) -> Vec<u8> {
    let items: Vec<String> = (0..20)
        .map(|i| {
            padded_pod(
                i,
                if Some(i) == changed {
                    900
                } else {
                    10 + i as u64
                },
                5400,
            )
        })
        .collect();
    pod_list(&items, list_rv).into_bytes()
}

/// A session of the cloud's own bytes (or not, `plain`), fed in reads of 16 KiB.
fn send(tx: &CacheTx, target: CacheTarget, body: &[u8], plain: bool, complete: bool) {
    let mut s = tx.begin(target, 200, false, None).unwrap();
    if plain {
        s.reproducible(0);
    }
    for read in body.chunks(16 * 1024) {
        assert!(s.chunk(read));
    }
    s.finish(complete);
}

/// The list at resourceVersion 100, twice: the first fills the cache, the second finds
/// every object stored as listed, which a repeat is proven by (the index knows them all).
fn fill(tx: &CacheTx) {
    for _ in 0..2 {
        send(tx, everything(), &pods_list(100, None), true, true);
    }
}

/// Runs one writer over what `queue` sends: the memos live as long as it.
fn write(store: &Store, synced: &Synced, queue: impl FnOnce(&CacheTx)) {
    let (tx, rx) = channel(4096, 1 << 30);
    queue(&tx);
    drop(tx);
    run(
        store,
        rx,
        &AtomicBool::new(false),
        WriterOptions::default(),
        synced,
    );
}

fn unchanged_count() -> u64 {
    METRICS.cache_lists_unchanged.load(Ordering::Relaxed)
}

/// The resourceVersion pod `i` is stored at.
fn stored_rv(store: &Store, i: usize) -> Option<u64> {
    store
        .version_of(&ObjectKey {
            collection: pods(),
            namespace: Some("peer-0".into()),
            name: format!("peer-{i:06}"),
        })
        .unwrap()
}

struct Case {
    _dir: TempDir,
    store: Store,
    synced: Synced,
}

fn case(tag: &str) -> Case {
    let dir = TempDir::new(tag);
    let (store, _) = Store::open(&dir.root()).unwrap();
    Case {
        _dir: dir,
        store,
        synced: Synced::default(),
    }
}

#[test]
fn the_same_list_again_is_proven_unchanged_and_not_read_past_its_metadata() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-same");
    let at = unchanged_count();
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(tx, everything(), &pods_list(100, Some(3)), true, true);
    });
    assert_eq!(unchanged_count() - at, 1, "the repeat is counted unchanged");
    assert_eq!(stored_rv(&c.store, 3), Some(13), "the repeat was not read");
    assert!(c.synced.covers(&pods(), None, &Selectors::everything()));
    // A new resourceVersion is read, and what it changed is stored.
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(tx, everything(), &pods_list(101, Some(3)), true, true);
    });
    assert_eq!(stored_rv(&c.store, 3), Some(900));
}

#[test]
fn a_list_that_changed_the_cache_proves_a_repeat_only_once_it_is_found_stored() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-first");
    let at = unchanged_count();
    write(&c.store, &c.synced, |tx| {
        send(tx, everything(), &pods_list(100, None), true, true);
        send(tx, everything(), &pods_list(100, Some(3)), true, true);
        send(tx, everything(), &pods_list(100, Some(4)), true, true);
    });
    // The second changed pod 3 (read: the first had written every pod), so the third is
    // read too: it puts pod 3 back and changes pod 4.
    assert_eq!(stored_rv(&c.store, 3), Some(13));
    assert_eq!(stored_rv(&c.store, 4), Some(900), "the third is read");
    assert_eq!(unchanged_count(), at);
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(tx, everything(), &pods_list(100, Some(5)), true, true);
    });
    assert_eq!(
        stored_rv(&c.store, 5),
        Some(15),
        "found stored: the repeat is proven"
    );
    assert_eq!(unchanged_count() - at, 1);
}

#[test]
fn another_scope_at_the_same_resource_version_is_read() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-scope");
    let at = unchanged_count();
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(
            tx,
            target(Some("peer-0"), None),
            &pods_list(100, Some(3)),
            true,
            true,
        );
    });
    assert_eq!(
        stored_rv(&c.store, 3),
        Some(900),
        "a namespace's list is read"
    );
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(
            tx,
            target(None, Some("fill=peer")),
            &pods_list(100, Some(4)),
            true,
            true,
        );
    });
    assert_eq!(
        stored_rv(&c.store, 4),
        Some(900),
        "a selector's list is read"
    );
    assert_eq!(unchanged_count(), at, "neither is counted unchanged");
}

#[test]
fn a_change_to_the_collection_between_the_lists_makes_the_repeat_read_whole() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-moved");
    let at = unchanged_count();
    let event = format!(
        r#"{{"type":"MODIFIED","object":{}}}"#,
        padded_pod(5, 200, 1000)
    );
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        let mut w = tx
            .begin(CacheTarget::Watch { collection: pods() }, 200, false, None)
            .unwrap();
        assert!(w.chunk(event.as_bytes()));
        w.finish(true);
        send(tx, everything(), &pods_list(100, Some(3)), true, true);
    });
    assert_eq!(unchanged_count(), at);
    assert_eq!(stored_rv(&c.store, 3), Some(900), "the repeat was read");
    // As before: a whole list is the cloud's whole truth, even over a newer event.
    assert_eq!(stored_rv(&c.store, 5), Some(15));
    // A file found changed behind the store's back (a reader drops its index entry) too.
    let file = c
        .store
        .root()
        .join("kubelet/pods.v1.core/peer-0/peer-000007");
    write(&c.store, &c.synced, |tx| {
        fill(tx);
    });
    std::fs::write(&file, b"{}").unwrap();
    let key = ObjectKey {
        collection: pods(),
        namespace: Some("peer-0".into()),
        name: "peer-000007".into(),
    };
    let _ = c.store.get(&key);
    write(&c.store, &c.synced, |tx| {
        fill(tx);
    });
    assert_eq!(
        stored_rv(&c.store, 7),
        Some(17),
        "the damaged file is written again"
    );
    assert_eq!(unchanged_count(), at);
}

#[test]
fn a_proven_list_broken_off_changes_nothing_and_is_not_counted() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-broken");
    let at = unchanged_count();
    let committed = METRICS.cache_sessions_committed.load(Ordering::Relaxed);
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(tx, everything(), &pods_list(100, Some(3)), true, false);
        // The memo stands: the next repeat is proven.
        send(tx, everything(), &pods_list(100, Some(4)), true, true);
    });
    assert_eq!(unchanged_count() - at, 1, "only the whole repeat");
    assert!(METRICS.cache_sessions_committed.load(Ordering::Relaxed) >= committed + 2);
    assert_eq!(stored_rv(&c.store, 3), Some(13));
    assert_eq!(stored_rv(&c.store, 4), Some(14));
}

#[test]
fn no_proof_without_the_clouds_own_bytes_or_with_items_before_metadata() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-never");
    let at = unchanged_count();
    // An answer of no known form (a filter that reads the cloud) neither proves nor is
    // proven.
    write(&c.store, &c.synced, |tx| {
        send(tx, everything(), &pods_list(100, None), false, true);
        send(tx, everything(), &pods_list(100, Some(3)), true, true);
    });
    assert_eq!(
        stored_rv(&c.store, 3),
        Some(900),
        "a filtered list makes no memo"
    );
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        send(tx, everything(), &pods_list(100, Some(4)), false, true);
    });
    assert_eq!(stored_rv(&c.store, 4), Some(900), "a filtered list is read");
    // Another form (another filter chain, another address pods are pointed at): read.
    write(&c.store, &c.synced, |tx| {
        fill(tx);
        let mut s = tx.begin(everything(), 200, false, None).unwrap();
        s.reproducible(7);
        assert!(s.chunk(&pods_list(100, Some(6))));
        s.finish(true);
    });
    assert_eq!(stored_rv(&c.store, 6), Some(900), "another form is read");
    // `metadata` after the items: read whole.
    let late = |changed| {
        let body = String::from_utf8(pods_list(100, changed)).unwrap();
        let (head, items) = body
            .split_once(r#""metadata":{"resourceVersion":"100"},"#)
            .unwrap();
        format!(
            r#"{head}{},"metadata":{{"resourceVersion":"100"}}}}"#,
            items.trim_end_matches('}')
        )
    };
    assert!(serde_json::from_str::<serde_json::Value>(&late(None)).is_ok());
    write(&c.store, &c.synced, |tx| {
        for _ in 0..2 {
            send(tx, everything(), late(None).as_bytes(), true, true);
        }
        send(tx, everything(), late(Some(5)).as_bytes(), true, true);
    });
    assert_eq!(
        stored_rv(&c.store, 5),
        Some(900),
        "items before metadata: read"
    );
    assert_eq!(unchanged_count(), at);
}

/// Once the writer says it has enough, the session copies nothing more; only its end goes.
#[test]
fn a_session_told_enough_stops_copying_but_still_ends() {
    let (tx, rx) = channel(64, 1 << 30);
    let body = pods_list(100, None);
    let mut s = tx.begin(everything(), 200, false, None).unwrap();
    s.reproducible(0);
    // The first 32 KiB go (with the session's begin).
    assert!(s.chunk(&body[..40 * 1024]));
    let Ok(CacheMsg::Begin {
        enough: Some(enough),
        ..
    }) = rx.rx.try_recv()
    else {
        panic!("a list of the cloud's own bytes begins with a flag");
    };
    assert!(matches!(rx.rx.try_recv(), Ok(CacheMsg::Chunk { .. })));
    enough.store(true, Ordering::Relaxed);
    for read in body[40 * 1024..].chunks(16 * 1024) {
        assert!(s.chunk(read), "the client's answer goes on");
    }
    s.finish(true);
    assert!(matches!(
        rx.rx.try_recv(),
        Ok(CacheMsg::End { complete: true, .. })
    ));
    assert!(rx.rx.try_recv().is_err(), "nothing else was copied");
    // Of no known form, no flag: the writer reads every byte.
    let mut s = tx.begin(everything(), 200, false, None).unwrap();
    assert!(s.chunk(&body[..40 * 1024]));
    assert!(matches!(
        rx.rx.try_recv(),
        Ok(CacheMsg::Begin { enough: None, .. })
    ));
}

/// A list that reaches the writer whole (under 32 KiB) is always read: small, and so a cloud
/// answering one scope at one resourceVersion with other objects is followed.
#[test]
fn a_small_list_read_whole_is_always_read() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-small");
    let at = unchanged_count();
    let small = |changed| {
        let items: Vec<String> = (0..3)
            .map(|i| {
                padded_pod(
                    i,
                    if Some(i) == changed {
                        900
                    } else {
                        10 + i as u64
                    },
                    5400,
                )
            })
            .collect();
        pod_list(&items, 100).into_bytes()
    };
    write(&c.store, &c.synced, |tx| {
        for _ in 0..2 {
            send(tx, everything(), &small(None), true, true);
        }
        send(tx, everything(), &small(Some(1)), true, true);
    });
    assert_eq!(stored_rv(&c.store, 1), Some(900));
    assert_eq!(unchanged_count(), at);
}

#[test]
fn a_list_without_a_resource_version_proves_nothing() {
    let _one = COUNTING.lock().unwrap_or_else(PoisonError::into_inner);
    let c = case("unchanged-no-rv");
    let without = |changed| {
        let body = String::from_utf8(pods_list(100, changed)).unwrap();
        assert!(
            body.contains(r#""resourceVersion":"100""#),
            "{}",
            &body[..200]
        );
        body.replacen(r#""resourceVersion":"100""#, r#""resourceVersion":"""#, 1)
    };
    let at = unchanged_count();
    write(&c.store, &c.synced, |tx| {
        for _ in 0..2 {
            send(tx, everything(), without(None).as_bytes(), true, true);
        }
        send(tx, everything(), without(Some(3)).as_bytes(), true, true);
    });
    assert_eq!(unchanged_count() - at, 0);
    assert_eq!(
        stored_rv(&c.store, 3),
        Some(900),
        "the changed list was read"
    );
}
