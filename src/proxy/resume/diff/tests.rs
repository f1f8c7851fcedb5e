//! The difference against a store in a scratch directory, written to a Vec-backed chain.

use std::time::Duration;

use super::*;
use crate::selector::Selectors;
use crate::stream::tests::Scratch;
use crate::upstream::{Answer, Outgoing, UpstreamError};

/// The scratch directory `resume-diff-<tag>`.
fn scratch(tag: &str) -> Scratch {
    Scratch::new(&format!("resume-diff-{tag}"))
}

/// The client's chain: every event written, with the rv recorded as delivered.
#[derive(Default)]
struct Client {
    events: Vec<(Value, String)>,
    /// Fails the write after this many events.
    gone_after: Option<usize>,
    /// The resume point: moved only by a whole difference.
    last: String,
    /// The first write waits for a message (or the sender gone) on this: a client too slow.
    hold: Option<crossbeam_channel::Receiver<()>>,
}

impl Emit for Client {
    fn emit(&mut self, event: &[u8], rv: &str) -> Result<(), Stop> {
        if self.gone_after == Some(self.events.len()) {
            return Err(Stop::Gone(std::io::ErrorKind::BrokenPipe.into()));
        }
        if self.events.is_empty()
            && let Some(hold) = &self.hold
        {
            let _ = hold.recv();
        }
        self.events
            .push((serde_json::from_slice(event).unwrap(), rv.to_owned()));
        Ok(())
    }

    fn caught_up_to(&mut self, rv: &str) {
        self.last = rv.to_owned();
    }

    fn gone(&mut self, _: Duration) -> bool {
        false
    }
}

impl Client {
    /// (type, namespace/name, object's resourceVersion) of each event.
    fn seen(&self) -> Vec<(String, String, String)> {
        let text = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        self.events
            .iter()
            .map(|(e, _)| {
                let o = &e["object"];
                let key = format!(
                    "{}/{}",
                    text(o, "/metadata/namespace"),
                    text(o, "/metadata/name")
                );
                (text(e, "/type"), key, text(o, "/metadata/resourceVersion"))
            })
            .collect()
    }
}

/// Never asked: the rounds of these tests are led by hand.
struct NoCloud;

impl Cloud for NoCloud {
    fn send(&self, _: Outgoing<'_>) -> Result<Answer, UpstreamError> {
        Err(UpstreamError::NoHealthyBackend)
    }
    fn any_healthy(&self) -> bool {
        true
    }
    fn any_probed_healthy(&self) -> bool {
        true
    }
    fn server(&self, _: usize) -> &str {
        "https://cloud:6443"
    }
    fn healthy(&self, _: usize) -> bool {
        true
    }
    fn recoveries(&self) -> u64 {
        0
    }
}

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

fn pod(ns: &str, name: &str, rv: u64, node: &str) -> Vec<u8> {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"app":"web"}}}},"spec":{{"nodeName":"{node}"}}}}"#
    )
    .into_bytes()
}

fn store_with(dir: &Scratch, stored: &[(&str, &str, u64, &str)]) -> Store {
    let (store, _) = Store::open(&dir.0).unwrap();
    for &(ns, name, rv, node) in stored {
        let key = ObjectKey {
            collection: pods(),
            namespace: Some(ns.to_owned()),
            name: name.to_owned(),
        };
        store
            .put(&key, &pod(ns, name, rv, node), Some(&rv.to_string()))
            .unwrap();
    }
    store
}

/// A list item as the apiserver sends it (no kind), with kind and apiVersion put in front
/// as `rounds.rs` does.
fn listed(ns: &str, name: &str, rv: u64, node: &str) -> ListedItem {
    let raw = pod(ns, name, rv, node);
    let mut object = br#"{"kind":"Pod","apiVersion":"v1","#.to_vec();
    object.extend_from_slice(&raw[1..]);
    ListedItem {
        namespace: Some(ns.to_owned()),
        name: name.to_owned(),
        rv: rv.to_string(),
        object: object.into_boxed_slice(),
    }
}

fn end(rv: u64) -> ListEnd {
    ListEnd {
        rv: rv.to_string(),
        kind: "Pod".to_owned(),
        api_version: "v1".to_owned(),
    }
}

struct Watch<'a> {
    store: &'a Store,
    collection: CollectionKey,
    /// The scope's field selector, as sent (the selectors are parsed from it).
    field_selector: String,
    selectors: Selectors,
    client_rv: u64,
    pass_bookmarks: bool,
    rounds: ListRounds,
    deadline: Option<std::time::Instant>,
    shutdown: AtomicBool,
}

impl<'a> Watch<'a> {
    fn new(store: &'a Store, client_rv: u64) -> Watch<'a> {
        Watch {
            store,
            collection: pods(),
            field_selector: String::new(),
            selectors: Selectors::everything(),
            client_rv,
            pass_bookmarks: false,
            rounds: ListRounds::new(Duration::ZERO),
            deadline: None,
            shutdown: AtomicBool::new(false),
        }
    }

    /// The watch's field selector.
    fn select(&mut self, field: &str) {
        self.field_selector = field.to_owned();
        self.selectors = Selectors::parse(None, Some(field)).unwrap();
    }

    fn ctx(&self) -> RoundCtx<'_> {
        RoundCtx {
            cloud: &NoCloud,
            rounds: &self.rounds,
            key: ScopeKey {
                identity: None,
                path: "/api/v1/pods".to_owned(),
                label_selector: String::new(),
                field_selector: self.field_selector.clone(),
                accept: "application/json",
            },
            list_target: "/api/v1/pods".to_owned(),
            headers: &[],
            identity: Identity::Hub,
            store: self.store,
            collection: &self.collection,
            namespace: None,
            selectors: &self.selectors,
            client_rv: self.client_rv,
            pass_bookmarks: self.pass_bookmarks,
            kind: None,
            deadline: self.deadline,
            shutdown: &self.shutdown,
        }
    }

    /// The difference of `list` (ended at `list_rv`) sent to a fresh client.
    fn diff(&self, list: &[ListedItem], list_rv: u64) -> (Client, Diffed) {
        let ctx = self.ctx();
        let mut differ = Differ::new(&ctx);
        let mut client = Client::default();
        for item in list {
            differ.item(item, &mut client).unwrap();
        }
        let counts = differ.end(&end(list_rv), &mut client).unwrap();
        (client, counts)
    }
}

fn event(kind: &str, key: &str, rv: u64) -> (String, String, String) {
    (kind.to_owned(), key.to_owned(), rv.to_string())
}

#[test]
fn added_modified_unchanged_and_deleted() {
    let dir = scratch("all");
    // The client was sent a/same@10, a/changed@11, a/gone@12; its last rv is 12.
    let store = store_with(
        &dir,
        &[
            ("a", "same", 10, "n1"),
            ("a", "changed", 11, "n1"),
            ("a", "gone", 12, "n1"),
        ],
    );
    let watch = Watch::new(&store, 12);
    let list = [
        listed("a", "changed", 20, "n1"),
        listed("a", "new", 21, "n1"),
        listed("a", "same", 10, "n1"),
        listed("b", "other", 22, "n1"),
    ];
    let (client, counts) = watch.diff(&list, 30);
    assert_eq!(
        client.seen(),
        [
            event("MODIFIED", "a/changed", 20),
            event("ADDED", "a/new", 21),
            event("ADDED", "b/other", 22),
            event("DELETED", "a/gone", 30),
        ]
    );
    assert_eq!(
        counts,
        Diffed {
            added: 2,
            modified: 1,
            deleted: 1
        }
    );
    // Listed objects go as listed, kind included; each is recorded at its own rv.
    let (first, rv) = &client.events[0];
    assert_eq!(first["object"]["kind"], "Pod");
    assert_eq!(first["object"]["spec"]["nodeName"], "n1");
    assert_eq!(rv, "20");
    // The deletion carries the stored object, with kind, at the list's rv.
    let (deleted, rv) = &client.events[3];
    assert_eq!(deleted["object"]["kind"], "Pod");
    assert_eq!(deleted["object"]["apiVersion"], "v1");
    assert_eq!(deleted["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(rv, "30");
}

#[test]
fn a_stored_version_newer_than_the_client_is_sent() {
    let dir = scratch("newer");
    // Another stream of the component stored a/web@15; this watch delivered up to 12.
    let store = store_with(&dir, &[("a", "web", 15, "n1"), ("a", "db", 11, "n1")]);
    let watch = Watch::new(&store, 12);
    let list = [listed("a", "db", 11, "n1"), listed("a", "web", 15, "n1")];
    let (client, counts) = watch.diff(&list, 30);
    assert_eq!(client.seen(), [event("MODIFIED", "a/web", 15)]);
    assert_eq!(counts.modified, 1);
    // No deletion, no bookmark: the client is left at the list's version all the same.
    assert_eq!(client.last, "30");
    // The same list against a client that got 15 sends nothing.
    let watch = Watch::new(&store, 15);
    assert_eq!(watch.diff(&list, 30).0.seen(), []);
}

#[test]
fn objects_outside_the_selectors_are_not_deleted() {
    let dir = scratch("selectors");
    // The component also cached pods of other nodes (another watch, a get): not this
    // watch's, so their absence from its list deletes nothing.
    let store = store_with(
        &dir,
        &[
            ("a", "mine", 10, "edge-1"),
            ("a", "theirs", 11, "edge-2"),
            ("a", "mine-gone", 12, "edge-1"),
        ],
    );
    let mut watch = Watch::new(&store, 12);
    watch.select("spec.nodeName=edge-1");
    let (client, _) = watch.diff(&[listed("a", "mine", 10, "edge-1")], 30);
    assert_eq!(client.seen(), [event("DELETED", "a/mine-gone", 30)]);
    // Without selectors the other node's pod would have gone too.
    let watch = Watch::new(&store, 12);
    let (client, _) = watch.diff(&[listed("a", "mine", 10, "edge-1")], 30);
    assert_eq!(client.seen().len(), 2);
}

#[test]
fn deletions_come_last_at_the_list_rv() {
    let dir = scratch("last");
    let store = store_with(&dir, &[("a", "a-gone", 5, "n1"), ("z", "z-gone", 6, "n1")]);
    let watch = Watch::new(&store, 6);
    // The list's items sort after the deleted names, yet the deletions come after them.
    let list = [listed("m", "new", 25, "n1"), listed("zz", "new", 26, "n1")];
    let (client, _) = watch.diff(&list, 40);
    assert_eq!(
        client.seen(),
        [
            event("ADDED", "m/new", 25),
            event("ADDED", "zz/new", 26),
            event("DELETED", "a/a-gone", 40),
            event("DELETED", "z/z-gone", 40),
        ]
    );
    let recorded: Vec<&str> = client.events.iter().map(|(_, rv)| rv.as_str()).collect();
    assert_eq!(recorded, ["25", "26", "40", "40"]);
}

#[test]
fn bookmark_only_when_asked() {
    let dir = scratch("bookmark");
    let store = store_with(&dir, &[("a", "web", 5, "n1")]);
    let mut watch = Watch::new(&store, 5);
    let list = [listed("a", "web", 5, "n1")];
    assert_eq!(watch.diff(&list, 40).0.events, []);
    watch.pass_bookmarks = true;
    let (client, counts) = watch.diff(&list, 40);
    assert_eq!(counts, Diffed::default());
    let [(bookmark, rv)] = &client.events[..] else {
        panic!("one bookmark: {:?}", client.events);
    };
    assert_eq!(
        *bookmark,
        serde_json::json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "40"}}})
    );
    assert_eq!(rv, "40");
}

/// The whole round through `catch_up`: a follower of a round led by hand.
#[test]
fn catch_up_sends_the_difference_of_its_rounds_list() {
    let dir = scratch("catch-up");
    let store = store_with(&dir, &[("a", "gone", 5, "n1"), ("a", "web", 6, "n1")]);
    let mut watch = Watch::new(&store, 6);
    watch.pass_bookmarks = true;
    watch.rounds = ListRounds::new(Duration::from_millis(300));
    let ctx = watch.ctx();
    let Joined::Lead(leader) = watch.rounds.join(ctx.key.clone()) else {
        panic!("the first join leads");
    };
    let (result, client) = std::thread::scope(|s| {
        let follower = s.spawn(|| {
            let mut client = Client::default();
            (catch_up(&ctx, &mut client), client)
        });
        watch.rounds.wait_for_followers(&ctx.key, 1);
        leader.run(
            &mut |each| {
                assert!(each(listed("a", "new", 20, "n1")));
                assert!(each(listed("a", "web", 6, "n1")));
                Ok(end(30))
            },
            &mut |_| true,
        );
        follower.join().unwrap()
    });
    let CatchUp::Done {
        list_rv,
        added,
        modified,
        deleted,
        listed,
    } = result
    else {
        panic!("{result:?}");
    };
    assert_eq!(
        (list_rv.as_str(), added, modified, deleted, listed),
        ("30", 1, 0, 1, false)
    );
    let mut seen = client.seen();
    let bookmark = seen.pop().unwrap();
    assert_eq!(bookmark.0, "BOOKMARK");
    assert_eq!(
        seen,
        [event("ADDED", "a/new", 20), event("DELETED", "a/gone", 30)]
    );
}

#[test]
fn a_client_gone_mid_difference_and_a_failed_list_end_the_round() {
    let dir = scratch("gone");
    let store = store_with(&dir, &[]);
    let watch = Watch::new(&store, 0);
    let ctx = watch.ctx();
    let mut client = Client {
        gone_after: Some(0),
        ..Client::default()
    };
    let mut differ = Differ::new(&ctx);
    assert!(matches!(
        differ.item(&listed("a", "new", 20, "n1"), &mut client),
        Err(Stop::Gone(_))
    ));
    // A lead whose list fails: the cloud's failure is a retry (NoCloud fails every send).
    let mut client = Client::default();
    assert!(matches!(catch_up(&ctx, &mut client), CatchUp::Retry(_)));
    assert!(client.events.is_empty());
}

/// The bytes a chain delivered.
#[derive(Default)]
struct Delivered(Vec<u8>);

impl crate::stream::Sink for Delivered {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        self.0.extend_from_slice(data);
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Stop> {
        Ok(())
    }
    fn abort(&mut self) {}
    fn uncache(&mut self, _: crate::stream::Uncached) -> Result<(), Stop> {
        Ok(())
    }
}

impl ClientEnd for Delivered {
    fn client_gone(&mut self, _: Duration) -> bool {
        false
    }
    fn probe(&self) -> Option<crate::server::ClientProbe> {
        None
    }
}

#[test]
fn through_the_event_cut_the_client_is_left_at_the_list_rv() {
    let dir = scratch("event-cut");
    let store = store_with(&dir, &[("a", "gone", 5, "n1")]);
    let watch = Watch::new(&store, 5);
    let ctx = watch.ctx();
    let note = |_: u64| {};
    let start = crate::stream::Progress {
        last_rv: "5".to_owned(),
        initial_done: true,
        ..Default::default()
    };
    let mut chain = EventCut::new(Delivered::default(), false, start, &note);
    let mut differ = Differ::new(&ctx);
    differ
        .item(&listed("a", "new", 20, "n1"), &mut chain)
        .unwrap();
    differ.end(&end(30), &mut chain).unwrap();
    assert_eq!(chain.progress().last_rv, "30");
    assert_eq!(chain.progress().kind, "Pod");
    // Nothing to delete, no bookmark: the list's version all the same.
    let mut differ = Differ::new(&ctx);
    for item in [listed("a", "gone", 5, "n1"), listed("a", "new", 20, "n1")] {
        differ.item(&item, &mut chain).unwrap();
    }
    differ.end(&end(35), &mut chain).unwrap();
    assert_eq!(chain.progress().last_rv, "35");
    let lines: Vec<Value> = chain
        .inner_mut()
        .0
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "DELETED", "ADDED"]);
}

#[test]
fn a_deletion_the_cache_already_took_is_sent_from_its_tombstone() {
    let dir = scratch("tombstone");
    let store = store_with(
        &dir,
        &[
            ("a", "gone", 5, "n1"),
            ("a", "seen-gone", 4, "n1"),
            ("a", "web", 5, "n1"),
        ],
    );
    // This client saw seen-gone deleted at 5 (its last version); then another watch's
    // difference deleted "gone" from the component's cache at the list's version, 30.
    let seen_gone = ObjectKey {
        collection: pods(),
        namespace: Some("a".to_owned()),
        name: "seen-gone".to_owned(),
    };
    store.delete(&seen_gone, Some("5")).unwrap();
    let gone = ObjectKey {
        name: "gone".to_owned(),
        ..seen_gone.clone()
    };
    store.delete(&gone, Some("30")).unwrap();
    let watch = Watch::new(&store, 5);
    let (client, counts) = watch.diff(&[listed("a", "web", 5, "n1")], 30);
    assert_eq!(client.seen(), [event("DELETED", "a/gone", 30)]);
    assert_eq!(counts.deleted, 1);
    assert_eq!(
        client.events[0].0["object"],
        serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "gone", "namespace": "a", "resourceVersion": "30"}})
    );
    // Listed again (made anew): not deleted.
    let (client, _) = watch.diff(
        &[listed("a", "gone", 31, "n1"), listed("a", "web", 5, "n1")],
        31,
    );
    assert_eq!(client.seen(), [event("ADDED", "a/gone", 31)]);
}

#[test]
fn a_watch_of_one_named_object_deletes_only_that_one() {
    let dir = scratch("named");
    let store = store_with(
        &dir,
        &[
            ("a", "one", 5, "n1"),
            ("a", "two", 5, "n1"),
            ("a", "three", 5, "n1"),
        ],
    );
    // Another watch of the component saw "three" deleted after this watch's last version.
    let three = ObjectKey {
        collection: pods(),
        namespace: Some("a".to_owned()),
        name: "three".to_owned(),
    };
    store.delete(&three, Some("20")).unwrap();
    let mut watch = Watch::new(&store, 5);
    // The scope of `/api/v1/namespaces/a/pods/one?watch=1`: its route's selectors do not
    // name the object, the scope's do.
    watch.field_selector = "metadata.name=one".to_owned();
    let (client, _) = watch.diff(&[], 30);
    assert_eq!(client.seen(), [event("DELETED", "a/one", 30)]);
    // A scope whose selectors need more than the key: a tombstone is sent unjudged.
    watch.select("spec.nodeName=n1");
    let (client, _) = watch.diff(
        &[listed("a", "one", 5, "n1"), listed("a", "two", 5, "n1")],
        30,
    );
    assert_eq!(client.seen(), [event("DELETED", "a/three", 30)]);
}

/// A chain at resourceVersion 5 (the client's last before the outage), writing to a Vec.
fn chain_at_5<'n>(note: &'n dyn Fn(u64)) -> EventCut<'n, Delivered> {
    let start = crate::stream::Progress {
        last_rv: "5".to_owned(),
        initial_done: true,
        ..Default::default()
    };
    EventCut::new(Delivered::default(), true, start, note)
}

/// The types of the events a chain delivered.
fn delivered_types(chain: &mut EventCut<'_, Delivered>) -> Vec<String> {
    chain
        .inner_mut()
        .0
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap()["type"].to_string())
        .collect()
}

#[test]
fn a_difference_cut_short_leaves_the_client_at_its_resume_point() {
    let dir = scratch("cut-short");
    let store = store_with(&dir, &[]);
    let watch = Watch::new(&store, 5);
    let ctx = watch.ctx();
    let note = |_: u64| {};
    let mut chain = chain_at_5(&note);
    let mut differ = Differ::new(&ctx);
    // Listed in key order: "b" changed at 21 before "a" at 9; a resume from 21 would lose
    // any change between 9 and 21 the rest of the list held.
    differ
        .item(&listed("x", "b", 21, "n1"), &mut chain)
        .unwrap();
    differ.item(&listed("x", "c", 9, "n1"), &mut chain).unwrap();
    assert_eq!(delivered_types(&mut chain).len(), 2);
    assert_eq!(chain.progress().last_rv, "5");
    assert_eq!(chain.progress().kind, "Pod");
    // The whole difference moves it to the list's version.
    differ.end(&end(30), &mut chain).unwrap();
    assert_eq!(chain.progress().last_rv, "30");
}

#[test]
fn a_follower_whose_list_fails_midway_retries_from_where_it_was() {
    let dir = scratch("follower-fails");
    let store = store_with(&dir, &[]);
    let watch = Watch::new(&store, 5);
    let Joined::Lead(leader) = watch.rounds.join(watch.ctx().key) else {
        panic!("the first join leads");
    };
    let (caught_up, delivered, last_rv) = std::thread::scope(|s| {
        let follower = s.spawn(|| {
            let note = |_: u64| {};
            let mut chain = chain_at_5(&note);
            let ctx = watch.ctx();
            let caught_up = catch_up(&ctx, &mut chain);
            let delivered = delivered_types(&mut chain).len();
            (caught_up, delivered, chain.progress().last_rv.clone())
        });
        watch.rounds.wait_for_followers(&watch.ctx().key, 1);
        leader.run(
            &mut |each| {
                assert!(each(listed("x", "b", 21, "n1")));
                assert!(each(listed("x", "c", 9, "n1")));
                Err(RoundFailure::Cloud("the list broke off".to_owned()))
            },
            &mut |_| true,
        );
        follower.join().unwrap()
    });
    assert!(matches!(caught_up, CatchUp::Retry(_)), "{caught_up:?}");
    assert_eq!(delivered, 2);
    assert_eq!(last_rv, "5");
}

#[test]
fn a_follower_dropped_from_its_round_ends_its_watch() {
    let dir = scratch("follower-dropped");
    let store = store_with(&dir, &[]);
    let mut watch = Watch::new(&store, 5);
    watch.rounds.set_follower_wait(Duration::from_millis(20));
    let Joined::Lead(leader) = watch.rounds.join(watch.ctx().key) else {
        panic!("the first join leads");
    };
    let (release, hold) = crossbeam_channel::bounded(1);
    let mut client = Client {
        hold: Some(hold),
        last: "5".to_owned(),
        ..Client::default()
    };
    let caught_up = std::thread::scope(|s| {
        let follower = s.spawn(|| {
            let ctx = watch.ctx();
            catch_up(&ctx, &mut client)
        });
        watch.rounds.wait_for_followers(&watch.ctx().key, 1);
        // The follower's client takes nothing until the leader has given up on it.
        leader.run(
            &mut |each| {
                for i in 0..crate::proxy::resume::rounds::FOLLOWER_QUEUE as u64 + 10 {
                    each(listed("x", &format!("p{i}"), 10 + i, "n1"));
                }
                Ok(end(1000))
            },
            &mut |_| true,
        );
        drop(release);
        follower.join().unwrap()
    });
    assert!(matches!(caught_up, CatchUp::Unusable(_)), "{caught_up:?}");
    assert_eq!(client.last, "5");
}

#[test]
fn a_round_is_left_when_the_hub_stops() {
    let dir = scratch("round-shutdown");
    let store = store_with(&dir, &[]);
    let watch = Watch::new(&store, 5);
    // A leader that never lists (stuck in its gather, say).
    let Joined::Lead(leader) = watch.rounds.join(watch.ctx().key) else {
        panic!("the first join leads");
    };
    watch.shutdown.store(true, Ordering::Relaxed);
    let (done, finished) = crossbeam_channel::bounded(1);
    std::thread::scope(|s| {
        s.spawn(|| {
            let ctx = watch.ctx();
            let _ = done.send(catch_up(&ctx, &mut Client::default()));
        });
        let caught_up = finished.recv_timeout(Duration::from_secs(5));
        drop(leader);
        let caught_up = caught_up.expect("the follower left its round within a few ticks");
        assert!(matches!(caught_up, CatchUp::Unusable(_)), "{caught_up:?}");
    });
    // A leader after the hub stopped does not list (the cloud here would fail it anyway:
    // the reason tells which).
    let watch = Watch::new(&store, 5);
    watch.shutdown.store(true, Ordering::Relaxed);
    let caught_up = catch_up(&watch.ctx(), &mut Client::default());
    match caught_up {
        CatchUp::Retry(why) => assert!(why.contains("the hub is stopping"), "{why}"),
        other => panic!("{other:?}"),
    }
}
