//! The difference of one client watch against its component's disk cache (issue 29, item
//! 2): when the cloud's history is gone (410), the scope is listed once (`rounds.rs`) and
//! the client is sent what changed since what it holds, as ordinary watch events.
//!
//! The baseline is the component's cache: the resumable watch asks for a difference only
//! when its cache session is intact and the writer has applied every event this client was
//! sent, so within the scope the store holds what the client holds. Each listed item is
//! looked up by key (the store's index, no syscall):
//!
//! | stored | listed | event |
//! |---|---|---|
//! | none | L | `ADDED`, as listed |
//! | S == L, S ≤ the client's last resourceVersion | | nothing: the client has it |
//! | S ≠ L, or S > the client's last resourceVersion | | `MODIFIED`, as listed |
//!
//! (S above the client's last version means another stream of the component stored a
//! version this watch never delivered, a get say: the client's own version is unknown, so
//! it is sent.) Then the deletions, last: the collection's names in the store (no file
//! read), and for each one the list did not return the stored object is read and matched
//! against the scope's selectors (the watch's, with the name of a watch of one named
//! object); one of the client's is sent `DELETED` carrying the list's
//! resourceVersion (a deleted object is never written back, and a reflector's last version
//! moves to the list's). Then, also `DELETED`, what the store's tombstones say was removed
//! after the client's last version and the list did not return (another stream of the
//! component, or another watch's difference, deleted it from the cache before this one
//! looked). Then a `BOOKMARK` at the list's resourceVersion if the client asked for
//! bookmarks, so that it resumes from there.
//!
//! The watches of one round diff against the same cache while the writer applies what
//! each sends: a follower may find an object the leader just sent already stored, newer
//! than its client, and send it `MODIFIED` where the leader sent `ADDED` (an informer
//! upserts either), or find a deletion the leader sent already applied (the tombstones
//! above send it all the same).
//!
//! Streaming: one listed item in memory at a time, the keys seen as a sorted `Vec<u64>` of
//! hashes (8 bytes an object: 160 KB for 20,000), one namespace directory's names at a time.
//!
//! The events go through the client's own chain above the filter stage (`Emit`), so they
//! are filtered as the cloud's are and the tee applies them to the same cache as watch
//! events: the list refreshes the disk cache without a second session.
//!
//! What it does not do: decide when a difference is due, or count it in the metrics (the
//! loop, `mod.rs`, from [`CatchUp::Done`]).

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use serde_json::Value;

use super::rounds::{
    Joined, ListEnd, ListRequest, ListRounds, Listed, ListedItem, RoundFailure, ScopeKey,
};
use crate::cache::key::{CollectionKey, ObjectKey};
use crate::cache::store::{Store, StoreError};
use crate::route::Identity;
use crate::selector::Selectors;
use crate::stream::{ClientEnd, EventCut, Sink, Stop};
use crate::upstream::Cloud;

/// Where a difference's events go: the client's chain.
///
/// A difference's events do not move the point a later leg resumes from: its ADDED and
/// MODIFIED carry their objects' own versions in key order, not in the cloud's order, so a
/// resume from one of them would skip every change listed after it with a lower version. A
/// difference cut short (a list broken mid-body, a follower dropped, a client too slow)
/// leaves the client where it was before the round: its next resume meets the 410 again,
/// and a new round diffs against the cache, which by then holds what was sent. Only the
/// whole difference moves it, to the list's version ([`Emit::caught_up_to`]).
pub(crate) trait Emit {
    /// Writes one synthesized event (a JSON watch event, no newline) to the client; `rv` is
    /// the event's own version, not recorded as the resume point.
    fn emit(&mut self, event: &[u8], rv: &str) -> Result<(), Stop>;
    /// Records `rv` as the last delivered without writing: the difference is through, and
    /// the next leg resumes from the list, not from before the outage (a difference with
    /// no deletion and no bookmark ends at its last item's own version).
    fn caught_up_to(&mut self, rv: &str);
    /// Whether the client hung up (waits up to `wait`).
    fn gone(&mut self, wait: Duration) -> bool;
}

impl<S: Sink + ClientEnd> Emit for EventCut<'_, S> {
    fn emit(&mut self, event: &[u8], rv: &str) -> Result<(), Stop> {
        // The chain records what it writes as delivered (right for a held bookmark); the
        // resume point is put back (see the trait's doc).
        let resume_point = std::mem::take(&mut self.progress_mut().last_rv);
        let written = EventCut::emit(self, event, rv);
        self.progress_mut().last_rv = resume_point;
        written
    }

    fn caught_up_to(&mut self, rv: &str) {
        rv.clone_into(&mut self.progress_mut().last_rv);
    }

    fn gone(&mut self, wait: Duration) -> bool {
        self.client_gone(wait)
    }
}

/// What a round needs of its watch (built by the resumable watch's loop).
pub(crate) struct RoundCtx<'a> {
    /// The cloud the list goes to.
    pub cloud: &'a dyn Cloud,
    /// The rounds under way, to share one list per scope.
    pub rounds: &'a ListRounds,
    /// The watch's scope.
    pub key: ScopeKey,
    /// The list's path and query (`leg::list_target`).
    pub list_target: String,
    /// The headers of every later leg.
    pub headers: &'a [(String, String)],
    /// Whose credentials.
    pub identity: Identity,
    /// The disk cache.
    pub store: &'a Store,
    /// The component's kind directory (`route.collection()`).
    pub collection: &'a CollectionKey,
    /// The watch's namespace; `None` for all.
    pub namespace: Option<&'a str>,
    /// The watch's selectors, parsed.
    pub selectors: &'a Selectors,
    /// The last resourceVersion delivered, as a number (0 when it is not one).
    pub client_rv: u64,
    /// The client asked for bookmarks.
    pub pass_bookmarks: bool,
    /// The kind and apiVersion of the last object delivered, when known.
    pub kind: Option<(&'a str, &'a str)>,
    /// The client's own deadline (its `timeoutSeconds`); None: none.
    pub deadline: Option<Instant>,
    /// Set when the hub stops.
    pub shutdown: &'a AtomicBool,
}

/// How often a follower waiting on its round's list looks at its client, its deadline and
/// the hub's shutdown.
const FOLLOWER_TICK: Duration = Duration::from_secs(1);

impl RoundCtx<'_> {
    /// Why the watch must not wait any longer for a list: the hub is stopping or the
    /// client's time is up.
    fn over(&self) -> Option<&'static str> {
        if self.shutdown.load(Ordering::Relaxed) {
            Some("the hub is stopping")
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some("the client's time ran out")
        } else {
            None
        }
    }
}

/// How a round ended for one watch.
#[derive(Debug)]
pub(crate) enum CatchUp {
    /// The difference went out; the next leg resumes from `list_rv`.
    Done {
        /// The list's resourceVersion, now the client's last.
        list_rv: String,
        /// `ADDED` events sent.
        added: u64,
        /// `MODIFIED` events sent.
        modified: u64,
        /// `DELETED` events sent.
        deleted: u64,
        /// This watch's list was the round's (true) or another watch's (false): counts
        /// `tinyhub_watch_relists_total`.
        listed: bool,
    },
    /// The chain stopped a write: the client left (or the chain cut it).
    ClientGone(Stop),
    /// The list failed in the cloud: back off, resume again.
    Retry(String),
    /// No difference can be made: end the watch cleanly.
    Unusable(String),
}

/// Lists the watch's scope once (or takes its round's list) and sends the difference
/// against the cache through `chain`.
pub(crate) fn catch_up<E: Emit>(ctx: &RoundCtx<'_>, chain: &mut E) -> CatchUp {
    let mut differ = Differ::new(ctx);
    let mut stopped: Option<Stop> = None;
    let mut ended: Option<Result<ListEnd, RoundFailure>> = None;
    let mut take = |listed: &Listed, chain: &mut E| -> bool {
        match listed {
            Listed::Item(item) => match differ.item(item, chain) {
                Ok(()) => true,
                Err(stop) => {
                    stopped = Some(stop);
                    false
                }
            },
            Listed::End(end) => {
                ended = Some(Ok(end.clone()));
                false
            }
            Listed::Failed(why) => {
                ended = Some(Err(why.clone()));
                false
            }
        }
    };
    // A follower that took part of the list and then lost its channel was dropped by the
    // leader (it did not keep up): its watch ends cleanly. One whose channel closed before
    // anything came lost its leader before the list: it retries.
    let mut took_part = false;
    let listed = match ctx.rounds.join(ctx.key.clone()) {
        Joined::Lead(leader) => {
            let over = || ctx.over();
            let req = ListRequest {
                target: &ctx.list_target,
                headers: ctx.headers,
                identity: ctx.identity,
                accept: ctx.key.accept,
                kind_hint: ctx.kind,
                deadline: ctx.deadline,
                over: &over,
            };
            leader.list(ctx.cloud, &req, &mut |listed| take(listed, &mut *chain));
            true
        }
        Joined::Follow(rx) => {
            loop {
                match rx.recv_timeout(FOLLOWER_TICK) {
                    Ok(listed) => {
                        took_part = true;
                        if !take(&listed, &mut *chain) {
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some(why) = ctx.over() {
                            return CatchUp::Unusable(format!("{why} while its round listed"));
                        }
                        if chain.gone(Duration::ZERO) {
                            return CatchUp::ClientGone(Stop::Gone(
                                std::io::ErrorKind::ConnectionAborted.into(),
                            ));
                        }
                    }
                }
            }
            false
        }
    };
    if let Some(stop) = stopped {
        return CatchUp::ClientGone(stop);
    }
    let end = match ended {
        Some(Ok(end)) => end,
        Some(Err(RoundFailure::Cloud(why))) => return CatchUp::Retry(why),
        Some(Err(RoundFailure::Unusable(why))) => return CatchUp::Unusable(why),
        None if took_part => {
            return CatchUp::Unusable(
                "it did not keep up with its round's list and was dropped".to_owned(),
            );
        }
        None => {
            return CatchUp::Retry("the round's list was not handed over whole".to_owned());
        }
    };
    match differ.end(&end, chain) {
        Ok(Diffed {
            added,
            modified,
            deleted,
        }) => CatchUp::Done {
            list_rv: end.rv,
            added,
            modified,
            deleted,
            listed,
        },
        Err(DiffStop::Client(stop)) => CatchUp::ClientGone(stop),
        Err(DiffStop::Store(e)) => CatchUp::Unusable(format!("the cache cannot be read: {e}")),
    }
}

/// Counts of one difference.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Diffed {
    /// `ADDED` events sent.
    pub added: u64,
    /// `MODIFIED` events sent.
    pub modified: u64,
    /// `DELETED` events sent.
    pub deleted: u64,
}

/// Why the deletions could not all go out.
#[derive(Debug)]
pub(crate) enum DiffStop {
    /// The chain stopped a write.
    Client(Stop),
    /// The store could not list the collection's names or read a candidate.
    Store(StoreError),
}

/// One client watch's difference against its component's cache, fed one listed item at a
/// time.
pub(crate) struct Differ<'a> {
    store: &'a Store,
    /// The key of the item at hand: the collection is the component's kind directory, the
    /// namespace and name are overwritten per item (no allocation once they are long enough).
    key: ObjectKey,
    namespace: Option<&'a str>,
    /// The scope's selectors: the watch's, with the name of a watch of one named object.
    selectors: Selectors,
    /// The selectors read nothing but `metadata.name` and `metadata.namespace`: they can judge
    /// an object known only by its key.
    key_only: bool,
    client_rv: u64,
    pass_bookmarks: bool,
    /// Hashes of `(namespace, name)` of every listed item.
    seen: Vec<u64>,
    /// Hashes of the stored objects sent as deleted.
    deleted: Vec<u64>,
    hasher: RandomState,
    /// The event being written, reused.
    line: Vec<u8>,
    counts: Diffed,
}

impl<'a> Differ<'a> {
    /// A difference for `ctx`'s watch, nothing listed yet.
    pub(crate) fn new(ctx: &RoundCtx<'a>) -> Differ<'a> {
        let mut differ = Differ {
            store: ctx.store,
            key: ObjectKey {
                collection: ctx.collection.clone(),
                namespace: None,
                name: String::new(),
            },
            namespace: ctx.namespace,
            selectors: scope_selectors(ctx),
            key_only: false,
            client_rv: ctx.client_rv,
            pass_bookmarks: ctx.pass_bookmarks,
            seen: Vec::new(),
            deleted: Vec::new(),
            hasher: RandomState::new(),
            line: Vec::new(),
            counts: Diffed::default(),
        };
        let selectors = &differ.selectors;
        differ.key_only = selectors.label.is_everything()
            && selectors
                .field
                .paths()
                .all(|p| p == "metadata.name" || p == "metadata.namespace");
        differ
    }

    /// One listed item: `ADDED` or `MODIFIED` as listed when the client may not hold it.
    pub(crate) fn item(&mut self, item: &ListedItem, chain: &mut impl Emit) -> Result<(), Stop> {
        self.seen
            .push(self.key_hash(item.namespace.as_deref(), &item.name));
        match &item.namespace {
            Some(ns) => match &mut self.key.namespace {
                Some(key_ns) => ns.clone_into(key_ns),
                none => *none = Some(ns.clone()),
            },
            None => self.key.namespace = None,
        }
        item.name.clone_into(&mut self.key.name);
        let listed: Option<u64> = item.rv.parse().ok();
        let kind = match self.store.version_of(&self.key) {
            Ok(None) => "ADDED",
            Ok(Some(stored)) if Some(stored) == listed && stored <= self.client_rv => {
                return Ok(());
            }
            Ok(Some(_)) => "MODIFIED",
            // A key the store refuses (an unsafe name) or cannot read: sent all the same,
            // an informer upserts it.
            Err(e) => {
                log::debug!("resume: {e}: sent as modified");
                "MODIFIED"
            }
        };
        event_line(&mut self.line, kind, &item.object);
        chain.emit(&self.line, &item.rv)?;
        match kind {
            "ADDED" => self.counts.added += 1,
            _ => self.counts.modified += 1,
        }
        Ok(())
    }

    /// The deletions (last, at the list's resourceVersion), then the bookmark if the client
    /// asked for bookmarks; the client is then at the list's resourceVersion.
    pub(crate) fn end(mut self, end: &ListEnd, chain: &mut impl Emit) -> Result<Diffed, DiffStop> {
        self.seen.sort_unstable();
        let names = self
            .store
            .names(&self.key.collection, self.namespace)
            .map_err(DiffStop::Store)?;
        for found in names.into_iter().flatten() {
            let (namespace, name) = found.map_err(DiffStop::Store)?;
            let hash = self.key_hash(namespace.as_deref(), &name);
            if self.seen.binary_search(&hash).is_ok() {
                continue;
            }
            self.key.namespace = namespace;
            self.key.name = name;
            let Some(bytes) = self.store.get(&self.key).map_err(DiffStop::Store)? else {
                continue; // Removed since its directory was read.
            };
            let Some(object) = deleted_object(&bytes, &self.selectors, end) else {
                continue;
            };
            event_line(&mut self.line, "DELETED", &object);
            chain.emit(&self.line, &end.rv).map_err(DiffStop::Client)?;
            self.counts.deleted += 1;
            self.deleted.push(hash);
        }
        // What another stream of the component deleted after this watch's last version is
        // gone from the store, not from the client (a difference sent to another watch of
        // the scope just before this one, say): the store's tombstones name it. Its stored
        // object is gone, so only selectors of the key alone (a watch of one named object)
        // can be checked: a DELETED of a key the client never had is ignored by an informer
        // (client-go's `DeltaFIFO.Delete` drops a deletion of a key its store does not hold),
        // a missed one would stay in its view for good.
        self.deleted.sort_unstable();
        let removed =
            self.store
                .removed_after(&self.key.collection, self.namespace, self.client_rv);
        for (namespace, name) in removed {
            let hash = self.key_hash(namespace.as_deref(), &name);
            if self.seen.binary_search(&hash).is_ok() || self.deleted.binary_search(&hash).is_ok() {
                continue;
            }
            self.key.namespace = namespace;
            self.key.name = name;
            // Stored again since: the pass over the names above judged it.
            if !matches!(self.store.version_of(&self.key), Ok(None)) {
                continue;
            }
            let mut metadata =
                serde_json::json!({"name": self.key.name, "resourceVersion": end.rv});
            if let Some(ns) = &self.key.namespace {
                metadata["namespace"] = Value::from(ns.as_str());
            }
            let object = serde_json::json!({
                "kind": end.kind,
                "apiVersion": end.api_version,
                "metadata": metadata,
            });
            if self.key_only && !self.selectors.matches(&object) {
                continue;
            }
            // Serializing a Value to a Vec cannot fail.
            let object = serde_json::to_vec(&object).unwrap_or_default();
            event_line(&mut self.line, "DELETED", &object);
            chain.emit(&self.line, &end.rv).map_err(DiffStop::Client)?;
            self.counts.deleted += 1;
        }
        if self.pass_bookmarks {
            let bookmark = serde_json::json!({
                "type": "BOOKMARK",
                "object": {
                    "kind": end.kind,
                    "apiVersion": end.api_version,
                    "metadata": {"resourceVersion": end.rv},
                },
            });
            // Serializing a Value to a Vec cannot fail.
            let line = serde_json::to_vec(&bookmark).unwrap_or_default();
            chain.emit(&line, &end.rv).map_err(DiffStop::Client)?;
        }
        chain.caught_up_to(&end.rv);
        Ok(self.counts)
    }

    fn key_hash(&self, namespace: Option<&str>, name: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(namespace.unwrap_or("").as_bytes());
        h.write_u8(0);
        h.write(name.as_bytes());
        h.finish()
    }
}

/// The selectors of the round's scope: the watch's own, with `metadata.name` of a watch of
/// one named object (which the scope's field selector holds); the watch's parsed ones when
/// the scope's text does not parse (it always should: it was parsed to route the request).
fn scope_selectors(ctx: &RoundCtx<'_>) -> Selectors {
    let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let (label, field) = (text(&ctx.key.label_selector), text(&ctx.key.field_selector));
    Selectors::parse(label.as_deref(), field.as_deref()).unwrap_or_else(|_| ctx.selectors.clone())
}

/// The stored object as the client's `DELETED` event carries it: at the list's
/// resourceVersion, with its kind; None when it is not the client's (outside the selectors)
/// or not an object.
fn deleted_object(bytes: &[u8], selectors: &Selectors, end: &ListEnd) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(bytes).ok()?;
    if !value.is_object() || !selectors.matches(&value) {
        return None;
    }
    let object = value.as_object_mut()?;
    object
        .entry("kind")
        .or_insert_with(|| Value::from(end.kind.as_str()));
    object
        .entry("apiVersion")
        .or_insert_with(|| Value::from(end.api_version.as_str()));
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()?;
    metadata.insert("resourceVersion".to_owned(), Value::from(end.rv.as_str()));
    serde_json::to_vec(&value).ok()
}

/// `{"type":<kind>,"object":<object>}` into `line`.
fn event_line(line: &mut Vec<u8>, kind: &str, object: &[u8]) {
    line.clear();
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.push(b'}');
}

#[cfg(test)]
mod tests;
