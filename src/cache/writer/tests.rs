//! The writer end to end: sessions sent through the channel, the writer run over them, the
//! files it leaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::tee::CacheMsg;
use super::*;
use crate::cache::key::CollectionKey;
use crate::cache::store::Store;
use crate::cache::target::CacheTarget;
use crate::cache::temp_dir::TempDir;
use crate::metrics::METRICS;
use crate::selector::Selectors;

/// A store in a scratch directory, and its files.
struct TempStore {
    store: Store,
    dir: TempDir,
}

impl TempStore {
    fn new(tag: &str) -> TempStore {
        let dir = TempDir::new(&format!("writer-{tag}"));
        let (store, _) = Store::open(&dir.root()).unwrap();
        TempStore { store, dir }
    }

    fn read(&self, rel: &str) -> Option<serde_json::Value> {
        std::fs::read(self.dir.root().join(rel))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
    }
}

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

fn list_target() -> CacheTarget {
    CacheTarget::List {
        collection: pods(),
        namespace: None,
        selectors: Selectors::everything(),
        paged: false,
    }
}

/// A session for a whole-list answer of every pod.
fn list(tx: &CacheTx) -> Session {
    tx.begin(list_target(), 200, false, None).unwrap()
}

/// A session for a watch of every pod.
fn watch(tx: &CacheTx) -> Session {
    tx.begin(CacheTarget::Watch { collection: pods() }, 200, false, None)
        .unwrap()
}

/// Runs the writer over everything `send` queues, until the senders are gone.
fn write(store: &Store, budget: usize, send: impl FnOnce(&CacheTx)) {
    write_noting(
        store,
        budget,
        &crate::cache::synced::Synced::default(),
        send,
    );
}

/// [`write`], noting the cloud's word in `synced`.
fn write_noting(
    store: &Store,
    budget: usize,
    synced: &crate::cache::synced::Synced,
    send: impl FnOnce(&CacheTx),
) {
    let (tx, rx) = channel(64, budget);
    send(&tx);
    drop(tx);
    run(
        store,
        rx,
        &AtomicBool::new(false),
        WriterOptions::default(),
        synced,
    );
}

const LIST: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[
    {"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"nodeName":"n1"}},
    {"metadata":{"name":"pending","namespace":"ns","resourceVersion":"6"},"spec":{}},
    {"metadata":{"name":"b","namespace":"ns","resourceVersion":"7"},"spec":{"nodeName":"n1"}}]}"#;

#[test]
fn a_list_in_small_chunks_becomes_files_with_type_meta() {
    let t = TempStore::new("list");
    write(&t.store, 1 << 20, |tx| {
        let mut s = list(tx);
        for piece in LIST.as_bytes().chunks(7) {
            assert!(s.chunk(piece));
        }
        s.finish(true);
    });
    let a = t.read("kubelet/pods.v1.core/ns/a").unwrap();
    assert_eq!(
        (a["kind"].as_str(), a["apiVersion"].as_str()),
        (Some("Pod"), Some("v1"))
    );
    assert!(t.read("kubelet/pods.v1.core/ns/b").is_some());
    assert!(
        t.read("kubelet/pods.v1.core/ns/pending").is_none(),
        "unbound pods are not stored"
    );
}

#[test]
fn a_broken_off_list_commits_nothing() {
    let t = TempStore::new("broken");
    write(&t.store, 1 << 20, |tx| {
        let mut s = list(tx);
        s.chunk(&LIST.as_bytes()[..LIST.len() - 10]);
        s.finish(false);
    });
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_none());
    assert!(!t.store.has_collection(&pods()));
}

#[test]
fn a_full_queue_abandons_the_session_without_blocking() {
    let t = TempStore::new("full");
    let before = METRICS.cache_sessions_abandoned.load(Ordering::Relaxed);
    write(&t.store, 16, |tx| {
        let mut s = list(tx);
        // Coalesced until the end; then more than the budget at once.
        assert!(s.chunk(LIST.as_bytes()));
        s.finish(true);
    });
    assert!(METRICS.cache_sessions_abandoned.load(Ordering::Relaxed) > before);
    assert!(
        t.read("kubelet/pods.v1.core/ns/a").is_none(),
        "nothing half-written"
    );
}

#[test]
fn a_small_answer_read_whole_is_one_message_and_is_stored() {
    let t = TempStore::new("whole");
    let (tx, rx) = channel(8, 1 << 20);
    let mut s = list(&tx);
    assert_eq!(rx.rx.len(), 0, "nothing sent before the body");
    assert!(s.chunk_owned(LIST.as_bytes().to_vec()));
    s.finish(true);
    assert_eq!(rx.rx.len(), 1);
    assert!(matches!(rx.rx.try_recv(), Ok(CacheMsg::Whole { .. })));
    // And through the writer, it is stored as the three messages would have been.
    write(&t.store, 1 << 20, |tx| {
        let mut s = list(tx);
        s.chunk_owned(LIST.as_bytes().to_vec());
        s.finish(true);
    });
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_some());
}

/// A queue of one message, already holding it, whose drops go to `refills`.
fn full_queue(refills: &Refills) -> (CacheTx, tee::CacheRx) {
    let (tx, rx) = channel(1, 1 << 20);
    let tx = tx.with_refills(refills.sender());
    assert!(tx.put(pods(), b"{}".to_vec()));
    (tx, rx)
}

#[test]
fn a_whole_answer_dropped_for_a_full_queue_is_fetched_again() {
    let refills = Refills::new();
    let (tx, _rx) = channel(8, 16);
    let tx = tx.with_refills(refills.sender());
    let request = Refill {
        request: Box::new(crate::request::on_behalf_of("kubelet", "GET", "/api/v1/pods").unwrap()),
        target: list_target(),
        sent_as: "/api/v1/pods".into(),
    };
    let before = METRICS.cache_sessions_abandoned.load(Ordering::Relaxed);
    let mut s = tx
        .begin(list_target(), 200, false, Some(request.clone()))
        .unwrap();
    // Over the 16-byte budget: the one message cannot go.
    assert!(s.chunk_owned(LIST.as_bytes().to_vec()));
    s.finish(true);
    assert!(METRICS.cache_sessions_abandoned.load(Ordering::Relaxed) > before);
    let dropped = refills.rx().try_recv().expect("a refill");
    assert_eq!(dropped.refill, request);
    // A client's session is not even begun while the queue holds as many messages as it can.
    let (tx, _rx) = full_queue(&refills);
    assert!(
        tx.begin(list_target(), 200, false, Some(request.clone()))
            .is_none()
    );
    assert_eq!(
        refills.rx().try_recv().map(|d| d.refill).ok(),
        Some(request)
    );
}

/// A small answer begun with its refill deferred makes it only when it is wanted: dropped
/// for a full queue (at its end or at its start), it is fetched again as any; gone whole, it
/// was never made.
#[test]
fn a_deferred_refill_is_made_only_for_a_dropped_answer() {
    let refills = Refills::new();
    let request = Refill {
        request: Box::new(crate::request::on_behalf_of("kubelet", "GET", "/api/v1/pods").unwrap()),
        target: list_target(),
        sent_as: "/api/v1/pods".into(),
    };
    let made = std::cell::Cell::new(0);
    let make = |sent_as: String| {
        made.set(made.get() + 1);
        assert_eq!(sent_as, "/api/v1/pods");
        Some(request.clone())
    };
    // A list answered whole through a queue with `budget` bytes.
    let answer_through = |budget: usize| {
        let (tx, _rx) = channel(8, budget);
        let tx = tx.with_refills(refills.sender());
        let mut s = tx
            .begin_deferred(Arc::new(list_target()), 200, false, "/api/v1/pods", make)
            .unwrap();
        assert!(s.chunk_owned(LIST.as_bytes().to_vec()));
        s.finish_refilling(true, make);
    };
    // Room for it: never made.
    answer_through(1 << 20);
    assert_eq!(made.get(), 0);
    assert!(refills.rx().try_recv().is_err());
    // Over the 16-byte budget: made and handed over.
    answer_through(16);
    assert_eq!(made.get(), 1);
    let dropped = refills.rx().try_recv().expect("a refill");
    assert_eq!(dropped.refill, request);
    // Not even begun (the queue holds as many messages as it can): handed over too.
    let (tx, _rx) = full_queue(&refills);
    assert!(
        tx.begin_deferred(Arc::new(list_target()), 200, false, "/api/v1/pods", make)
            .is_none()
    );
    assert_eq!(
        refills.rx().try_recv().map(|d| d.refill).ok(),
        Some(request.clone())
    );
    // The ledger now follows the request: a session is begun with its refill, as `begin`'s.
    let (tx, _rx) = channel(8, 1 << 20);
    let tx = tx.with_refills(refills.sender());
    let s = tx.begin_deferred(Arc::new(list_target()), 200, false, "/api/v1/pods", make);
    assert_eq!(made.get(), 3);
    drop(s);
}

#[test]
fn watch_events_apply_one_by_one_and_a_torn_last_event_does_not() {
    let t = TempStore::new("watch");
    let events = concat!(
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"w","namespace":"ns","resourceVersion":"3"},"spec":{"nodeName":"n"}}}"#,
        "\n",
        r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"w","namespace":"ns","resourceVersion":"4","labels":{"v":"2"}},"spec":{"nodeName":"n"}}}"#,
        "\n",
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"5"}}}"#,
        "\n",
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x","namespace":"ns","resourceVersion":"6"},"spec":{"nodeName":"n"}}}"#,
        "\n",
        r#"{"type":"DELETED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x","namespace":"ns","resourceVersion":"7"},"spec":{"nodeName":"n"}}}"#,
        "\n",
        r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"torn","names"#,
    );
    write(&t.store, 1 << 20, |tx| {
        let mut s = watch(tx);
        for piece in events.as_bytes().chunks(13) {
            s.chunk(piece);
        }
        s.finish(false);
    });
    assert_eq!(
        t.read("kubelet/pods.v1.core/ns/w").unwrap()["metadata"]["labels"]["v"],
        "2"
    );
    assert!(
        t.read("kubelet/pods.v1.core/ns/x").is_none(),
        "added then deleted"
    );
    assert!(t.read("kubelet/pods.v1.core/ns/torn").is_none());
}

/// A watch event line for pod `ns/w` at `rv`.
fn event(kind: &str, rv: u64) -> String {
    format!(
        r#"{{"type":"{kind}","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"w","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n"}}}}}}"#
    ) + "\n"
}

fn stored_rv_of(t: &TempStore, rel: &str) -> Option<String> {
    t.read(rel).map(|v| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    })
}

/// A client resuming its watch from an old resourceVersion replays versions the cache
/// has already replaced; when another stream deleted the object meanwhile, the replay
/// must not write an older version back (power_loss: "went back from 382 to 375").
#[test]
fn a_replayed_event_does_not_bring_back_an_object_a_deletion_removed() {
    let t = TempStore::new("replay-after-delete");
    let w = "kubelet/pods.v1.core/ns/w";
    write(&t.store, 1 << 20, |tx| {
        let mut now = watch(tx);
        let mut resumed = watch(tx);
        assert!(now.chunk(event("MODIFIED", 382).as_bytes()));
        assert!(now.chunk(event("DELETED", 423).as_bytes()));
        assert!(resumed.chunk(event("MODIFIED", 375).as_bytes()));
        assert!(resumed.chunk(event("MODIFIED", 382).as_bytes()));
        now.finish(false);
        resumed.finish(false);
    });
    assert_eq!(stored_rv_of(&t, w), None, "older than the deletion");
    // A version after the deletion (the name created again) is stored as usual.
    write(&t.store, 1 << 20, |tx| {
        let mut now = watch(tx);
        assert!(now.chunk(event("MODIFIED", 382).as_bytes()));
        assert!(now.chunk(event("DELETED", 423).as_bytes()));
        assert!(now.chunk(event("ADDED", 430).as_bytes()));
        now.finish(false);
    });
    assert_eq!(stored_rv_of(&t, w).as_deref(), Some("430"));
}

/// The same when a whole list removed the object: nothing at or below the version it
/// removed comes back.
#[test]
fn a_replayed_event_does_not_bring_back_an_object_a_list_removed() {
    let t = TempStore::new("replay-after-list");
    let w = "kubelet/pods.v1.core/ns/w";
    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"430"},"items":[
        {"metadata":{"name":"other","namespace":"ns","resourceVersion":"420"},"spec":{"nodeName":"n"}}]}"#;
    write(&t.store, 1 << 20, |tx| {
        let mut now = watch(tx);
        let mut resumed = watch(tx);
        assert!(now.chunk(event("MODIFIED", 382).as_bytes()));
        let mut relist = list(tx);
        assert!(relist.chunk(body.as_bytes()));
        relist.finish(true);
        assert!(resumed.chunk(event("MODIFIED", 375).as_bytes()));
        assert!(resumed.chunk(event("MODIFIED", 382).as_bytes()));
        now.finish(false);
        resumed.finish(false);
    });
    assert!(t.read("kubelet/pods.v1.core/ns/other").is_some());
    assert_eq!(
        stored_rv_of(&t, w),
        None,
        "at or below what the list removed"
    );
}

/// Writes `body` as a whole-list answer of every pod.
fn list_answer(t: &TempStore, body: &str) {
    write(&t.store, 1 << 20, |tx| {
        let mut s = list(tx);
        assert!(s.chunk(body.as_bytes()));
        s.finish(true);
    });
}

#[test]
fn items_that_are_not_objects_are_skipped_and_the_list_then_deletes_nothing() {
    let t = TempStore::new("not-objects");
    list_answer(&t, LIST);
    let errors = METRICS.cache_errors.load(Ordering::Relaxed);
    // `b` is left out, and two items cannot be read: one of them may be `b`.
    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[
        {"metadata":{"name":"a","namespace":"ns","resourceVersion":"15"},"spec":{"nodeName":"n1"}},
        ["Pod",{"name":"evil","namespace":"ns","resourceVersion":"99"},{"nodeName":"n1"}],
        {"metadata":["b","ns","16"],"spec":{"nodeName":"n1"}}]}"#;
    list_answer(&t, body);
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/ns/a").as_deref(),
        Some("15")
    );
    assert!(t.read("kubelet/pods.v1.core/ns/evil").is_none());
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/ns/b").as_deref(),
        Some("7")
    );
    // Other tests count too: at least these two.
    assert!(METRICS.cache_errors.load(Ordering::Relaxed) >= errors + 2);
    // A watch event object that is an array is skipped the same.
    write(&t.store, 1 << 20, |tx| {
        let mut s = watch(tx);
        let line = r#"{"type":"ADDED","object":["Pod",{"name":"evil","namespace":"ns","resourceVersion":"99"},{"nodeName":"n1"}]}"#;
        assert!(s.chunk(format!("{line}\n").as_bytes()));
        s.finish(false);
    });
    assert!(t.read("kubelet/pods.v1.core/ns/evil").is_none());
}

/// Issue 28, item 6: a pod without a namespace would be a file where the directory of the
/// namespace of its name belongs, and no pod of that namespace could then be cached.
#[test]
fn a_namespaced_item_without_a_namespace_is_refused_and_the_list_deletes_nothing() {
    let t = TempStore::new("no-namespace");
    list_answer(&t, LIST);
    // `b` is left out, and an item has no namespace: the list is not whole.
    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[
        {"metadata":{"name":"kube-system","resourceVersion":"16"},"spec":{"nodeName":"n1"}},
        {"metadata":{"name":"a","namespace":"ns","resourceVersion":"15"},"spec":{"nodeName":"n1"}}]}"#;
    list_answer(&t, body);
    assert!(
        !t.dir
            .root()
            .join("kubelet/pods.v1.core/kube-system")
            .exists()
    );
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/ns/a").as_deref(),
        Some("15")
    );
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/ns/b").as_deref(),
        Some("7")
    );
    // Nor from a watch; the namespace of that name is cached as any other.
    write(&t.store, 1 << 20, |tx| {
        let mut s = watch(tx);
        for object in [
            r#"{"metadata":{"name":"kube-system","resourceVersion":"21"},"spec":{"nodeName":"n1"}}"#,
            r#"{"metadata":{"name":"dns","namespace":"kube-system","resourceVersion":"22"},"spec":{"nodeName":"n1"}}"#,
        ] {
            let line = format!(r#"{{"type":"ADDED","object":{object}}}"#);
            assert!(s.chunk(format!("{line}\n").as_bytes()));
        }
        s.finish(false);
    });
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/kube-system/dns").as_deref(),
        Some("22")
    );
    // A cluster-scoped kind has no namespace, and is stored.
    let nodes = CollectionKey::new("kubelet", "nodes", "v1", "");
    write(&t.store, 1 << 20, |tx| {
        let target = CacheTarget::Watch { collection: nodes };
        let mut s = tx.begin(target, 200, false, None).unwrap();
        let line = r#"{"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"3"}}}"#;
        assert!(s.chunk(format!("{line}\n").as_bytes()));
        s.finish(false);
    });
    assert_eq!(
        stored_rv_of(&t, "kubelet/nodes.v1.core/n1").as_deref(),
        Some("3")
    );
}

#[test]
fn an_answer_that_is_not_evidently_a_list_deletes_nothing() {
    let t = TempStore::new("not-a-list");
    list_answer(&t, LIST);
    // A watch event read as a list: no kind, no items.
    list_answer(
        &t,
        r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"x"}}}"#,
    );
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_some());
    assert!(t.read("kubelet/pods.v1.core/ns/b").is_some());
    // An empty list that says so replaces everything.
    list_answer(
        &t,
        r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"30"},"items":[]}"#,
    );
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_none());
}

/// The delay option slows the writer down, as a slow flash would; what it writes is the same.
#[test]
fn a_delay_per_message_slows_the_writer_and_changes_nothing_else() {
    let t = TempStore::new("delay");
    let (tx, rx) = channel(64, 1 << 20);
    let mut s = list(&tx);
    assert!(s.chunk(LIST.as_bytes()));
    s.finish(true);
    drop(tx);
    let delay = Duration::from_millis(20);
    let options = WriterOptions {
        delay_per_message: Some(delay),
        ..WriterOptions::default()
    };
    let started = Instant::now();
    run(
        &t.store,
        rx,
        &AtomicBool::new(false),
        options,
        &crate::cache::synced::Synced::default(),
    );
    // One message: the small answer whole.
    assert!(started.elapsed() >= delay);
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_some());
    assert!(t.read("kubelet/pods.v1.core/ns/pending").is_none());
}

#[test]
fn a_watch_event_that_is_an_array_is_skipped_and_counted() {
    use super::failures::FailureLog;
    use super::rules::watch_event;
    let t = TempStore::new("array-events");
    let mut failures = FailureLog::default();
    let mut not_objects = 0;
    // The stream decoder refuses it at the top level; the event parse refuses it too,
    // whoever hands it over. A derived struct would read type and object field by field.
    let evil = br#"["ADDED",{"kind":"Pod","apiVersion":"v1","metadata":{"name":"evil","namespace":"ns","resourceVersion":"99"},"spec":{"nodeName":"n1"}}]"#;
    watch_event(
        &t.store,
        &mut failures,
        &pods(),
        evil,
        None,
        &mut not_objects,
    );
    assert!(t.read("kubelet/pods.v1.core/ns/evil").is_none());
    assert_eq!(not_objects, 1, "counted as a non-object");
    let good = event("ADDED", 5);
    watch_event(
        &t.store,
        &mut failures,
        &pods(),
        good.trim_end().as_bytes(),
        None,
        &mut not_objects,
    );
    assert_eq!(
        stored_rv_of(&t, "kubelet/pods.v1.core/ns/w").as_deref(),
        Some("5")
    );
    assert_eq!(not_objects, 1);
}

/// The keys the list file of failed keys holds, in order.
fn persisted_error_keys(t: &TempStore) -> Vec<String> {
    t.read(".error-keys")
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default()
}

/// A store where every write of a pod in namespace `ns` fails (a file is where the
/// namespace's directory must go), and that file.
fn blocked_store(tag: &str) -> (TempStore, std::path::PathBuf) {
    let t = TempStore::new(tag);
    let kind_dir = t.dir.root().join("kubelet/pods.v1.core");
    std::fs::create_dir_all(&kind_dir).unwrap();
    let blocker = kind_dir.join("ns");
    std::fs::write(&blocker, b"in the way").unwrap();
    (t, blocker)
}

/// Writes a whole answer of `target` with `body` (status 200).
fn send(tx: &CacheTx, target: CacheTarget, body: &str) {
    let mut s = tx.begin(target, 200, false, None).unwrap();
    assert!(s.chunk(body.as_bytes()));
    s.finish(true);
}

fn watch_target() -> CacheTarget {
    CacheTarget::Watch { collection: pods() }
}

/// A key whose write failed stays in the list (on disk too, across a restart) until it is
/// written, by a watch event or by a list that commits it; the list's own key likewise.
#[test]
fn failed_keys_are_kept_until_written_again() {
    let (t, blocker) = blocked_store("error-keys");
    write(&t.store, 1 << 20, |tx| {
        send(tx, watch_target(), &event("ADDED", 5));
        send(tx, list_target(), LIST);
    });
    let both = ["kubelet/pods.v1.core", "kubelet/pods.v1.core/ns/w"];
    assert_eq!(persisted_error_keys(&t), both);
    // A restart reads the list back; what is written then leaves it.
    assert_eq!(super::error_keys::ErrorKeys::load(&t.store).keys(), both);
    std::fs::remove_file(blocker).unwrap();
    write(&t.store, 1 << 20, |tx| send(tx, list_target(), LIST));
    assert!(t.read("kubelet/pods.v1.core/ns/a").is_some());
    assert_eq!(persisted_error_keys(&t), ["kubelet/pods.v1.core/ns/w"]);
    write(&t.store, 1 << 20, |tx| {
        send(tx, watch_target(), &event("MODIFIED", 8));
    });
    let stored = stored_rv_of(&t, "kubelet/pods.v1.core/ns/w");
    assert_eq!(stored.as_deref(), Some("8"));
    assert!(persisted_error_keys(&t).is_empty());
}

/// A list that stages an object whose write had failed stores it when it commits.
#[test]
fn a_committed_list_clears_the_failed_keys_of_its_objects() {
    let (t, blocker) = blocked_store("error-keys-list");
    let object = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"nodeName":"n1"}}"#;
    let target = CacheTarget::Object {
        collection: pods(),
        namespace: Some("ns".into()),
        name: Some("a".into()),
    };
    write(&t.store, 1 << 20, |tx| send(tx, target, object));
    assert_eq!(persisted_error_keys(&t), ["kubelet/pods.v1.core/ns/a"]);
    std::fs::remove_file(blocker).unwrap();
    write(&t.store, 1 << 20, |tx| send(tx, list_target(), LIST));
    let stored = stored_rv_of(&t, "kubelet/pods.v1.core/ns/a");
    assert_eq!(stored.as_deref(), Some("5"));
    assert!(persisted_error_keys(&t).is_empty());
}

/// Gets of one object: a repeat stored exactly so already changes nothing (`identical.rs`),
/// a changed answer is written at once, even at the same resourceVersion, and each tells the
/// kind's sync.
#[test]
fn a_repeated_get_changes_nothing_and_a_changed_one_is_written_at_once() {
    let t = TempStore::new("repeated-get");
    let synced = crate::cache::synced::Synced::default();
    let object = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"nodeName":"n1"}}"#;
    let target = || CacheTarget::Object {
        collection: pods(),
        namespace: Some("ns".into()),
        name: Some("a".into()),
    };
    let changed = object.replace("n1", "n2");
    write_noting(&t.store, 1 << 20, &synced, |tx| {
        send(tx, target(), object);
        send(tx, target(), &format!("{object}\n"));
    });
    let path = t.dir.root().join("kubelet/pods.v1.core/ns/a");
    assert_eq!(std::fs::read(&path).unwrap(), object.as_bytes());
    write_noting(&t.store, 1 << 20, &synced, |tx| {
        send(tx, target(), object);
        send(tx, target(), &changed);
    });
    assert_eq!(std::fs::read(&path).unwrap(), changed.as_bytes());
    assert!(synced.last(&pods()).is_some());
}

/// A kind the cloud no longer has (a list answered 404) takes its failed keys with it.
#[test]
fn a_pruned_collection_takes_its_failed_keys_with_it() {
    let (t, blocker) = blocked_store("error-keys-prune");
    write(&t.store, 1 << 20, |tx| {
        send(tx, watch_target(), &event("ADDED", 5))
    });
    assert_eq!(persisted_error_keys(&t), ["kubelet/pods.v1.core/ns/w"]);
    write(&t.store, 1 << 20, |tx| {
        // The writer prunes at the session's start.
        let s = tx.begin(list_target(), 404, false, None).unwrap();
        s.finish(true);
    });
    assert!(!blocker.exists());
    assert!(persisted_error_keys(&t).is_empty());
}

/// A resumable watch's difference reads the store after a barrier: by then every event the
/// session copied before it is applied, whatever the writer was busy with.
#[test]
fn barrier_is_answered_after_earlier_events_are_applied() {
    let t = TempStore::new("barrier");
    let (tx, rx) = channel(64, 1 << 20);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            // Slow, as a slow flash would be: the events are still queued when sync begins.
            let options = WriterOptions {
                delay_per_message: Some(Duration::from_millis(30)),
                ..WriterOptions::default()
            };
            run(
                &t.store,
                rx,
                &stop,
                options,
                &crate::cache::synced::Synced::default(),
            );
        });
        let mut s = watch(&tx);
        for rv in 3..8 {
            assert!(s.chunk(event("MODIFIED", rv).as_bytes()));
        }
        assert!(s.sync(Duration::from_secs(10)), "acknowledged");
        assert_eq!(
            stored_rv_of(&t, "kubelet/pods.v1.core/ns/w").as_deref(),
            Some("7"),
            "every event before the barrier is on disk"
        );
        // Too short a wait for a writer this slow: false, and the session goes on.
        assert!(s.chunk(event("MODIFIED", 8).as_bytes()));
        assert!(!s.sync(Duration::from_millis(1)));
        assert!(s.sync(Duration::from_secs(10)));
        assert_eq!(
            stored_rv_of(&t, "kubelet/pods.v1.core/ns/w").as_deref(),
            Some("8")
        );
        s.finish(true);
        drop(tx);
        stop.store(true, Ordering::Release);
        writer.join().unwrap();
    });
}

/// A session the queue dropped cannot vouch for the store.
#[test]
fn a_dropped_session_does_not_sync() {
    let (tx, _rx) = channel(2, 1 << 20);
    let mut s = watch(&tx);
    // Begin and one chunk fill the channel; the next chunk drops the session.
    assert!(s.chunk(event("ADDED", 3).as_bytes()));
    assert!(!s.chunk(event("MODIFIED", 4).as_bytes()));
    assert!(!s.sync(Duration::from_millis(50)));
}

/// Freshness (issue 32): what the writer notes of each answer.
mod synced {
    use std::sync::Arc;

    use super::*;
    use crate::cache::synced::{Synced, Word};

    fn run_with(store: &Store, synced: &Synced, send: impl FnOnce(&CacheTx)) {
        write_noting(store, 1 << 20, synced, send);
    }

    const BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}"#;

    #[test]
    fn a_list_a_bookmark_and_an_object_404_are_the_clouds_word() {
        let t = TempStore::new("synced-units");
        let synced = Synced::default();
        let now = u64::try_from(crate::unix_now()).unwrap();
        run_with(&t.store, &synced, |tx| {
            let mut s = watch(tx);
            assert!(s.chunk(format!("{BOOKMARK}\n").as_bytes()));
            s.finish(true);
        });
        assert!(
            synced.last(&pods()).is_some_and(|at| at >= now),
            "a bookmark alone"
        );

        let synced = Synced::default();
        run_with(&t.store, &synced, |tx| {
            let mut s = list(tx);
            s.chunk(&LIST.as_bytes()[..LIST.len() - 10]);
            s.finish(false);
        });
        assert_eq!(
            synced.last(&pods()),
            None,
            "a broken-off list tells nothing"
        );
        run_with(&t.store, &synced, |tx| {
            let mut s = list(tx);
            s.chunk(LIST.as_bytes());
            s.finish(true);
        });
        assert!(synced.last(&pods()).is_some(), "a committed list");

        let synced = Synced::default();
        let object = CacheTarget::Object {
            collection: pods(),
            namespace: Some("ns".to_owned()),
            name: Some("gone".to_owned()),
        };
        run_with(&t.store, &synced, |tx| {
            tx.begin(object, 404, false, None).unwrap().finish(true);
        });
        assert!(synced.last(&pods()).is_some(), "a 404 of an object");
    }

    /// Gets answered as stored already (`identical.rs`) are handled on one reading of the
    /// clocks for many (`run.rs`'s `Clock`): each still tells the cloud's word, as of now.
    #[test]
    fn gets_answered_as_stored_already_are_the_clouds_word_as_of_now() {
        let t = TempStore::new("synced-stored-already");
        let configmaps = CollectionKey::new("kubelet", "configmaps", "v1", "");
        let get = || CacheTarget::Object {
            collection: configmaps.clone(),
            namespace: Some("ns".into()),
            name: Some("cm".into()),
        };
        let body = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","resourceVersion":"3"}}"#;
        let send = |tx: &CacheTx, n: usize| {
            for _ in 0..n {
                let mut s = tx.begin(get(), 200, false, None).unwrap();
                assert!(s.chunk_owned(body.as_bytes().to_vec()));
                s.finish(true);
            }
        };
        // Stored by the first answer, the whole way.
        run_with(&t.store, &Synced::default(), |tx| send(tx, 1));
        let (synced, now) = (Synced::default(), crate::unix_secs());
        // More than one reading of the clocks serves (`QUICK_PER_READING`), fewer than the
        // queue takes (the writer runs once all are sent).
        run_with(&t.store, &synced, |tx| send(tx, 40));
        assert!(
            synced.last(&configmaps).is_some_and(|at| at >= now),
            "{:?} noted, {now} before the gets",
            synced.last(&configmaps)
        );
        assert_eq!(
            t.read("kubelet/configmaps.v1.core/ns/cm"),
            serde_json::from_str(body).ok()
        );
    }

    #[test]
    fn a_relayed_session_is_as_old_as_its_pool_cache() {
        let t = TempStore::new("synced-relayed");
        let synced = Synced::default();
        let target = CacheTarget::Watch { collection: pods() };
        run_with(&t.store, &synced, |tx| {
            let word = Word::Relayed(Arc::new(|| Some(1_234)));
            let mut s = tx.begin_relayed(target.clone(), 200, false, word).unwrap();
            assert!(s.chunk(format!("{BOOKMARK}\n").as_bytes()));
            s.finish(true);
        });
        assert_eq!(synced.last(&pods()), Some(1_234));
        let synced = Synced::default();
        run_with(&t.store, &synced, |tx| {
            let word = Word::Relayed(Arc::new(|| None));
            let mut s = tx.begin_relayed(target, 200, false, word).unwrap();
            assert!(s.chunk(format!("{BOOKMARK}\n").as_bytes()));
            s.finish(true);
        });
        assert_eq!(
            synced.last(&pods()),
            None,
            "a pool cache never synced tells nothing"
        );
    }

    /// A unit the store failed to take is not in the cache: no word heard (issue 32 review).
    #[test]
    fn a_failed_put_notes_nothing_and_a_stored_one_and_the_lease_do() {
        let (t, blocker) = blocked_store("synced-failed-put");
        let synced = Synced::default();
        run_with(&t.store, &synced, |tx| {
            send(tx, watch_target(), &event("ADDED", 5));
            let object = CacheTarget::Object {
                collection: pods(),
                namespace: Some("ns".to_owned()),
                name: Some("w".to_owned()),
            };
            let pod = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"w","namespace":"ns","resourceVersion":"6"},"spec":{"nodeName":"n"}}"#;
            send(tx, object, pod);
        });
        assert_eq!(synced.last(&pods()), None, "nothing was stored");
        std::fs::remove_file(blocker).unwrap();
        run_with(&t.store, &synced, |tx| {
            send(tx, watch_target(), &event("ADDED", 7));
        });
        assert!(synced.last(&pods()).is_some(), "stored: heard");

        // The heartbeat's renewed lease is the cloud's answer: its kind has an age.
        let lease = CollectionKey::new("tinyhub", "leases", "v1", "coordination.k8s.io");
        let bytes = br#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"n","namespace":"kube-node-lease","resourceVersion":"3"}}"#;
        run_with(&t.store, &synced, |tx| {
            assert!(tx.put(lease.clone(), bytes.to_vec()));
        });
        assert!(synced.last(&lease).is_some(), "the lease put");
    }
}

/// Small answers coming faster than the writer's linger ring its doorbell a few times, not
/// once each, and every one is stored.
#[test]
fn small_answers_under_load_ride_few_wake_ups_and_none_is_lost() {
    let t = TempStore::new("batch");
    let (tx, rx) = channel(64, 1 << 20);
    let queue = std::sync::Arc::clone(&rx.queue);
    let configmaps = CollectionKey::new("kubelet", "configmaps", "v1", "");
    const ANSWERS: usize = 20;
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            run(
                &t.store,
                rx,
                &AtomicBool::new(false),
                // Longer than production's, so that a slow disk's write still fits in it.
                WriterOptions {
                    linger: Some(Duration::from_millis(500)),
                    ..WriterOptions::default()
                },
                &crate::cache::synced::Synced::default(),
            )
        });
        for i in 0..ANSWERS {
            let name = format!("cm{i}");
            let target = CacheTarget::Object {
                collection: configmaps.clone(),
                namespace: Some("ns".into()),
                name: Some(name.clone()),
            };
            let body = format!(
                r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{}"}}}}"#,
                i + 1
            );
            let mut s = tx.begin(target, 200, false, None).unwrap();
            assert!(s.chunk_owned(body.into_bytes()));
            s.finish(true);
            // A client's next answer: well within the linger, slower than the writer.
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(tx);
        writer.join().unwrap();
    });
    let rings = queue.doorbell.rings.load(Ordering::Relaxed);
    assert!(
        rings <= (ANSWERS / 4) as u64,
        "{rings} wake-ups for {ANSWERS} answers"
    );
    for i in 0..ANSWERS {
        assert!(
            t.read(&format!("kubelet/configmaps.v1.core/ns/cm{i}"))
                .is_some(),
            "cm{i} stored"
        );
    }
}

/// A get's answer stored exactly so already is taken by the connection thread itself
/// (`identical.rs`, `Direct`): no session and no message, the kind still hears the cloud's
/// word. Anything else, and anything while a key's write has failed, goes to the writer.
#[test]
fn a_get_stored_already_needs_no_writer_unless_a_write_failed() {
    use crate::cache::synced::Synced;
    let dir = TempDir::new("writer-direct");
    let store = Arc::new(Store::open(&dir.root()).unwrap().0);
    let configmaps = CollectionKey::new("kubelet", "configmaps", "v1", "");
    let get = |name: &str| CacheTarget::Object {
        collection: configmaps.clone(),
        namespace: Some("ns".into()),
        name: Some(name.into()),
    };
    let body = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","resourceVersion":"3"}}"#;
    write(&store, 1 << 20, |tx| send(tx, get("cm"), body));

    // Runs a writer with direct answers over `check`, which gets its sender once the writer
    // has handled a first message (and so said whether it allows them).
    let with_writer = |check: &dyn Fn(&CacheTx, &Synced)| {
        let synced = Arc::new(Synced::default());
        let (tx, rx) = channel(64, 1 << 20);
        let tx = tx.with_direct(Direct::new(Arc::clone(&store), Arc::clone(&synced)));
        assert!(
            !tx.stored_already(&get("cm"), 200, false, body.as_bytes()),
            "not before the writer allows it"
        );
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| run(&store, rx, &stop, WriterOptions::default(), &synced));
            let mut first = tx.begin(watch_target(), 200, false, None).unwrap();
            assert!(first.sync(Duration::from_secs(60)), "the writer runs");
            check(&tx, &synced);
            first.finish(true);
            stop.store(true, Ordering::Release);
            drop(tx);
        });
    };
    with_writer(&|tx, synced| {
        let taken = |target: &CacheTarget, status, gzip, body: &str| {
            tx.stored_already(target, status, gzip, body.as_bytes())
        };
        assert!(taken(&get("cm"), 200, false, &format!("{body}\n")));
        assert!(synced.last(&configmaps).is_some(), "the cloud's word");
        let changed = body.replace(r#""3""#, r#""4""#);
        assert!(!taken(&get("cm"), 200, false, &changed), "a change");
        assert!(!taken(&get("other"), 200, false, body), "another name");
        assert!(!taken(&get("cm"), 200, true, body), "gzip");
        assert!(!taken(&get("cm"), 404, false, body), "another status");
    });
    assert_eq!(
        std::fs::read(dir.root().join("kubelet/configmaps.v1.core/ns/cm")).unwrap(),
        body.as_bytes()
    );

    // A key whose write failed: only the whole path clears it, so every answer takes it.
    let blocker = dir.root().join("kubelet/pods.v1.core/ns");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"in the way").unwrap();
    write(&store, 1 << 20, |tx| {
        send(tx, watch_target(), &event("ADDED", 5))
    });
    with_writer(&|tx, _| {
        assert!(!tx.stored_already(&get("cm"), 200, false, body.as_bytes()));
    });
}
