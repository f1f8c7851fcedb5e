//! The node-local watch cache of one pool-scope resource (YurtHub's `pkg/yurthub/multiplexer`): fed
//! by one upstream list and watch, it answers every local list and watch of the resource from
//! memory, with the cloud's resourceVersions, as the apiserver's own watch cache does.
//!
//! Pure data structures: no I/O, no threads. The feeder calls [`WatchCache::replace`] with a
//! full list and [`WatchCache::apply`] per watch event; client threads call
//! [`WatchCache::list`] and [`WatchCache::watch`], and block in [`Watcher::next`] for events.
//!
//! Design decisions:
//!
//! - **Objects held once, compactly.** Each object is the JSON the cloud sent in one
//!   `Arc<[u8]>` behind a small index (`object.rs`): key, resourceVersion, labels and the
//!   resource's field labels are spans into those bytes, extracted once at insert. The
//!   objects sit in a `Vec` sorted by key (`namespace/name`, the apiserver's key order, so
//!   continue tokens page the same way): 16 bytes per object on 64-bit, 8 on 32-bit, no tree
//!   nodes. An ADDED or DELETED event shifts the tail of the vector (a memmove of at most
//!   16 bytes per object: 80 KB for 5,000 objects); a MODIFIED one replaces in place.
//! - **One event history, shared by every watcher.** A ring (`VecDeque`) of events, each
//!   with the object after it and the object before it (`Arc` clones, never copies),
//!   bounded by count, by bytes and by age ([`CacheOptions`]). A watcher is a cursor (a
//!   sequence number) into it: watchers cost no queue, and the writer never waits for one.
//!   A watcher whose cursor falls off the ring (a client too slow to read, or away) is ended
//!   with `410 Expired` ("too old resource version"), so its client relists: that is how a
//!   slow watcher is ended, without the writer ever blocking on it.
//! - **Waiting without polling**: one `Mutex` over the state and one `Condvar`, notified
//!   after every change; a watcher wakes, takes a batch of `Arc`s under the lock, and filters
//!   and writes them after releasing it.
//! - **Per-watcher selectors**, with the apiserver's rule (`cacheWatcher.convertToWatchEvent`):
//!   an object that stops matching is sent as DELETED (its last matching state with the
//!   event's resourceVersion), one that starts matching as ADDED.
//! - **A relist is a diff.** [`WatchCache::replace`] turns the new list into the ADDED,
//!   MODIFIED and DELETED events it implies, in resourceVersion order (deletions, whose
//!   resourceVersion is unknown, at the list's), so watchers carry on across an upstream
//!   relist instead of all relisting (the apiserver's cacher ends them all). A list older
//!   than the cache (the cloud restored from a backup) cannot be diffed in the same
//!   resourceVersion space: it resets the cache, and every watcher ends.
//! - **Consistent paging**: a continue token is the apiserver's own (`{"v","rv","start"}`
//!   base64), and a later page is served as the state was at the token's resourceVersion,
//!   rebuilt from the current objects and the history's previous objects; older than the
//!   history, it is `410 Expired`.
//! - **Lists are streamed**: the page is chosen under the lock as `Arc` clones, and written
//!   object by object after it is released; nothing is built whole.

mod list;
mod object;
pub(crate) mod pool;
mod resource;
pub(crate) mod series;
mod watch;

/// The resourceVersion of a watch event's object, read from its head only (a bookmark's,
/// or one the index cannot read).
fn object_rv(object: &[u8]) -> Result<u64, ApplyError> {
    let head = crate::cache::object::ObjectHead::read(object)
        .map_err(|e| ApplyError::BadEvent(e.to_string()))?;
    let text = head
        .metadata
        .and_then(|m| m.resource_version)
        .unwrap_or_default();
    parse_rv(&text).ok_or_else(|| ApplyError::BadResourceVersion(text.into_owned()))
}

#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) use list::ListRequest;
pub(crate) use object::{Object, ObjectError, parse_rv};
pub(crate) use pool::{PoolCaches, Unserved, WATCH_SECONDS};
pub(crate) use resource::Resource;
pub(crate) use watch::{WatchEvent, WatchNext, Watcher, error_event_line, push_event_line};

use crate::lock;
use crate::selector::Selectors;
use crate::status::Status;

/// Bounds and waits of one cache.
#[derive(Clone, Debug)]
pub(crate) struct CacheOptions {
    /// Most events the history keeps.
    pub max_events: usize,
    /// Most bytes the history may keep alive beyond the current objects (see
    /// [`WatchCache::memory`]).
    pub max_history_bytes: usize,
    /// Events older than this are dropped at the next change (YurtHub: 3 minutes).
    pub max_age: Duration,
    /// Most events a watcher takes per wake-up.
    pub max_batch: usize,
    /// How long a list or watch at a resourceVersion newer than the cache's waits for the
    /// cache to catch up before `504` (the apiserver waits 3 s).
    pub fresh_wait: Duration,
    /// Most JSON bytes of objects a full list may bring: past it the resource is not cached
    /// (its requests are forwarded) and the list is not tried again for a while. A relist
    /// holds the new objects beside the old ones, so the peak is about twice this.
    pub max_list_bytes: usize,
}

/// How long the feeder waits before it lists again a resource whose list was past
/// [`CacheOptions::max_list_bytes`] (each try costs the whole list over the link).
pub(crate) const LIST_TOO_LARGE_PAUSE: Duration = Duration::from_secs(600);

impl Default for CacheOptions {
    fn default() -> CacheOptions {
        CacheOptions {
            max_events: 4096,
            max_history_bytes: 4 << 20,
            max_age: Duration::from_secs(180),
            max_batch: 256,
            fresh_wait: Duration::from_secs(3),
            // 16 MiB: about 16,000 EndpointSlices of 1 KB, a 32 MiB peak on a relist.
            max_list_bytes: 16 << 20,
        }
    }
}

/// What a watch event does (the upstream's and the clients').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`: only a resourceVersion.
    Bookmark,
}

impl EventType {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
        }
    }

    /// Reads a wire name; `ERROR` and anything else are not events to apply.
    pub(crate) fn parse(text: &str) -> Option<EventType> {
        match text {
            "ADDED" => Some(EventType::Added),
            "MODIFIED" => Some(EventType::Modified),
            "DELETED" => Some(EventType::Deleted),
            "BOOKMARK" => Some(EventType::Bookmark),
            _ => None,
        }
    }
}

/// Why the feeder's input was not applied. The feeder relists on any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApplyError {
    /// A watch event before the first full list.
    NotReady,
    /// The object could not be indexed.
    Object(ObjectError),
    /// A resourceVersion that is not a decimal number.
    BadResourceVersion(String),
    /// The watch event is not `{"type":..,"object":..}` with a known type; an `ERROR` event
    /// carries the cloud's Status text (a 410 means: relist).
    BadEvent(String),
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::NotReady => f.write_str("a watch event before the first list"),
            ApplyError::Object(e) => write!(f, "{e}"),
            ApplyError::BadResourceVersion(rv) => {
                write!(f, "resourceVersion {rv:?} is not a decimal number")
            }
            ApplyError::BadEvent(e) => write!(f, "watch event: {e}"),
        }
    }
}

impl std::error::Error for ApplyError {}

impl From<ObjectError> for ApplyError {
    fn from(e: ObjectError) -> ApplyError {
        ApplyError::Object(e)
    }
}

/// What applying one watch event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Recorded as an event of this type (an ADDED of a known object is a MODIFIED, a
    /// MODIFIED of an unknown one an ADDED).
    Event(EventType),
    /// The cache's resourceVersion moved (a bookmark, or a deletion of an unknown object).
    Advanced,
    /// Not newer than the cache: ignored.
    Stale,
    /// An object the cache cannot index: left out (counted in
    /// [`WatchCache::skipped_objects`]), the cache's resourceVersion moved past it.
    Skipped,
}

/// What a full list changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Replaced {
    /// Objects in the new list not held before.
    pub added: usize,
    /// Objects held with another resourceVersion.
    pub modified: usize,
    /// Objects held and not in the new list.
    pub deleted: usize,
    /// The list was older than the cache: everything was reset, watchers ended.
    pub reset: bool,
}

/// One event of the history.
#[derive(Clone, Debug)]
struct Event {
    kind: EventType,
    /// The event's resourceVersion.
    rv: u64,
    /// The object after the event; for DELETED, the object as deleted.
    object: Object,
    /// The object before the event.
    prev: Option<Object>,
    /// `object` carries an older resourceVersion than `rv` (a deletion found by a relist:
    /// the last state held), to be written with `rv` in its place.
    splice_rv: bool,
    /// When the event was recorded, for [`CacheOptions::max_age`].
    at: Instant,
}

impl Event {
    /// Bytes the event keeps alive beyond the current objects: its slot, what it replaced,
    /// and for a deletion the object as deleted.
    fn cost(&self) -> usize {
        let prev = self.prev.as_ref().map_or(0, Object::heap_bytes);
        let deleted = if self.kind == EventType::Deleted && !self.splice_rv {
            self.object.heap_bytes()
        } else {
            0
        };
        std::mem::size_of::<Event>() + prev + deleted
    }
}

/// The cache's state, under one lock.
struct State {
    /// A full list was applied.
    ready: bool,
    /// The cache's resourceVersion: the newest list, event or bookmark applied.
    rv: u64,
    /// Objects sorted by key.
    objects: Vec<Object>,
    /// Events in resourceVersion order.
    history: VecDeque<Event>,
    /// Sum of the history's [`Event::cost`].
    history_bytes: usize,
    /// Sequence number of `history[0]`.
    first_seq: u64,
    /// Every event newer than this is in the history: the oldest resourceVersion a watch
    /// or a continue can start from.
    start_rv: u64,
    /// Bumped when the cache resets: watchers of an older generation end.
    generation: u64,
}

impl State {
    /// Sequence number after the last event.
    fn end_seq(&self) -> u64 {
        self.first_seq + self.history.len() as u64
    }

    /// Index of the object with `key`, or where it would go.
    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        self.objects.binary_search_by(|o| o.cmp_key(key))
    }

    /// Records an event and drops what the bounds no longer allow.
    fn record(&mut self, event: Event, options: &CacheOptions) {
        self.history_bytes += event.cost();
        self.history.push_back(event);
        self.prune(options, Instant::now());
    }

    /// Drops the oldest events beyond the count, bytes and age bounds.
    fn prune(&mut self, options: &CacheOptions, now: Instant) {
        while let Some(front) = self.history.front() {
            let old = now.saturating_duration_since(front.at) > options.max_age;
            if !old
                && self.history.len() <= options.max_events
                && self.history_bytes <= options.max_history_bytes
            {
                break;
            }
            self.start_rv = self.start_rv.max(front.rv);
            self.history_bytes -= front.cost();
            self.first_seq += 1;
            self.history.pop_front();
        }
    }
}

/// The shared part of a cache.
struct Inner {
    resource: Resource,
    options: CacheOptions,
    state: Mutex<State>,
    /// Notified after every change of `state`.
    changed: Condvar,
    /// Objects of the feeder's lists and watches the cache could not index and left out.
    skipped: std::sync::atomic::AtomicU64,
    /// The feeder's requests the cloud answered unusably in a row (see
    /// [`WatchCache::feeder_failing`]).
    feeder_failures: std::sync::atomic::AtomicU32,
    /// A list was past `max_list_bytes`: no list before this.
    list_paused_until: Mutex<Option<Instant>>,
    /// The feeder's first list waits for the pool's leader (see
    /// [`WatchCache::awaits_leader`]).
    awaits_leader: std::sync::atomic::AtomicBool,
    /// When `synced` counts from (monotonic: a clock jump changes no age): a day before
    /// the cache was made, so that a follower's first list through a leader can note the
    /// older instant its leader last heard the cloud (see [`SYNCED_BACK`]).
    born: Instant,
    /// When the feeder last heard the cloud's word on the resource (a list, an event, a
    /// bookmark), in ms since `born` plus one; 0: never (see [`WatchCache::synced_age`]).
    synced: std::sync::atomic::AtomicU64,
    /// The feeder's cloud watch has shown a bookmark (see [`WatchCache::note_bookmark`]).
    bookmarked: std::sync::atomic::AtomicBool,
}

/// Unusable answers in a row after which the cache's feed counts as failing: with the
/// feeder's retry pause (the heartbeat interval), about three intervals.
const FEEDER_FAILURES: u32 = 3;

/// How long before a cache was made its last word from the cloud can be noted
/// ([`WatchCache::note_synced`]): a follower's first list through a leader is as old as the
/// leader's own cache, which may predate the follower's start.
const SYNCED_BACK: Duration = Duration::from_secs(24 * 3600);

/// The watch cache of one resource; clones share it.
#[derive(Clone)]
pub(crate) struct WatchCache {
    inner: Arc<Inner>,
}

/// What a cache holds, in bytes (see [`WatchCache::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    /// Objects held.
    pub objects: usize,
    /// Their JSON bytes.
    pub json_bytes: usize,
    /// Everything held: objects (allocations with their index), the vector, the history's
    /// slots and the objects only the history keeps, and an allocator overhead estimate.
    pub total_bytes: usize,
    /// Events in the history.
    pub events: usize,
}

impl WatchCache {
    /// An empty cache of `resource`, not ready until the first full list.
    pub(crate) fn new(resource: Resource, options: CacheOptions) -> WatchCache {
        WatchCache {
            inner: Arc::new(Inner {
                resource,
                options,
                state: Mutex::new(State {
                    ready: false,
                    rv: 0,
                    objects: Vec::new(),
                    history: VecDeque::new(),
                    history_bytes: 0,
                    first_seq: 0,
                    start_rv: 0,
                    generation: 0,
                }),
                changed: Condvar::new(),
                skipped: std::sync::atomic::AtomicU64::new(0),
                feeder_failures: std::sync::atomic::AtomicU32::new(0),
                list_paused_until: Mutex::new(None),
                awaits_leader: std::sync::atomic::AtomicBool::new(false),
                // Where the monotonic clock cannot go that far back (a node just booted),
                // the cache's own birth: an older instant then reads as that.
                born: Instant::now()
                    .checked_sub(SYNCED_BACK)
                    .unwrap_or_else(Instant::now),
                synced: std::sync::atomic::AtomicU64::new(0),
                bookmarked: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The resource held.
    pub(crate) fn resource(&self) -> &Resource {
        &self.inner.resource
    }

    /// Whether the first full list was applied; until then lists and watches are refused
    /// with [`WatchCache::initializing`].
    pub(crate) fn is_ready(&self) -> bool {
        lock(&self.inner.state).ready
    }

    /// YurtHub's answer while the cache warms: 429, `Retry-After: 1`
    /// (`multiplexerproxy.go`).
    pub(crate) fn initializing(&self) -> Status {
        Status::too_many_requests(
            format!(
                "cacher for gvr({}) is initializing, please try again later.",
                self.inner.resource.gvr.go_string()
            ),
            1,
        )
    }

    /// The cache's resourceVersion (0 before the first list).
    pub(crate) fn resource_version(&self) -> u64 {
        lock(&self.inner.state).rv
    }

    /// Indexes one object of this cache's resource, for [`WatchCache::replace`] and
    /// [`WatchCache::apply`]. Done by the feeder before taking the lock.
    pub(crate) fn parse(&self, json: &[u8]) -> Result<Object, ObjectError> {
        Object::parse(json, &self.inner.resource)
    }

    /// Applies a full list taken at `list_rv`: the objects become the cache's, and the
    /// change is recorded as the events it implies (see the module docs). The first list
    /// makes the cache ready.
    pub(crate) fn replace(
        &self,
        list_rv: &str,
        mut objects: Vec<Object>,
    ) -> Result<Replaced, ApplyError> {
        let list_rv =
            parse_rv(list_rv).ok_or_else(|| ApplyError::BadResourceVersion(list_rv.to_owned()))?;
        // Key order; of two objects with one key (a broken list) the newer is kept.
        objects.sort_by(|a, b| a.cmp_keys(b).then(b.rv().cmp(&a.rv())));
        objects.dedup_by(|later, earlier| later.cmp_keys(earlier).is_eq());
        objects.shrink_to_fit();
        let mut state = lock(&self.inner.state);
        let mut summary = Replaced::default();
        if !state.ready || list_rv < state.rv {
            summary.reset = state.ready;
            summary.added = objects.len();
            state.objects = objects;
            // Sequence numbers only grow, so a cursor into the old history is behind.
            state.first_seq = state.end_seq();
            state.history.clear();
            state.history_bytes = 0;
            state.start_rv = list_rv;
            if summary.reset {
                state.generation += 1;
            }
        } else {
            let events = diff(&state.objects, &objects, state.rv, list_rv, &mut summary);
            state.objects = objects;
            for event in events {
                state.record(event, &self.inner.options);
            }
        }
        state.rv = list_rv;
        state.ready = true;
        drop(state);
        self.inner.changed.notify_all();
        Ok(summary)
    }

    /// Drops every object and event and ends every watch (the resource is no longer
    /// pool-scope): not ready again until the next full list.
    pub(crate) fn clear(&self) {
        let mut state = lock(&self.inner.state);
        state.ready = false;
        state.rv = 0;
        state.objects = Vec::new();
        state.first_seq = state.end_seq();
        state.history = VecDeque::new();
        state.history_bytes = 0;
        state.generation += 1;
        drop(state);
        self.inner.changed.notify_all();
    }

    /// Applies one upstream watch event. An event not newer than the cache is ignored.
    pub(crate) fn apply(&self, kind: EventType, object: Object) -> Result<Applied, ApplyError> {
        if kind == EventType::Bookmark {
            return self.apply_bookmark(object.rv());
        }
        let rv = object.rv();
        let mut state = lock(&self.inner.state);
        if !state.ready {
            return Err(ApplyError::NotReady);
        }
        if rv <= state.rv {
            return Ok(Applied::Stale);
        }
        state.rv = rv;
        let key = object.key();
        let found = state.find(key.as_bytes());
        let event = match (kind, found) {
            (EventType::Deleted, Err(_)) => None,
            (EventType::Deleted, Ok(i)) => {
                let prev = state.objects.remove(i);
                Some(Event {
                    kind,
                    rv,
                    object,
                    prev: Some(prev),
                    splice_rv: false,
                    at: Instant::now(),
                })
            }
            (_, Ok(i)) => {
                let prev = std::mem::replace(&mut state.objects[i], object.clone());
                Some(Event {
                    kind: EventType::Modified,
                    rv,
                    object,
                    prev: Some(prev),
                    splice_rv: false,
                    at: Instant::now(),
                })
            }
            (_, Err(i)) => {
                state.objects.insert(i, object.clone());
                Some(Event {
                    kind: EventType::Added,
                    rv,
                    object,
                    prev: None,
                    splice_rv: false,
                    at: Instant::now(),
                })
            }
        };
        let applied = match event {
            Some(event) => {
                let kind = event.kind;
                state.record(event, &self.inner.options);
                Applied::Event(kind)
            }
            None => Applied::Advanced,
        };
        drop(state);
        self.inner.changed.notify_all();
        Ok(applied)
    }

    /// Applies an upstream BOOKMARK: the cache's resourceVersion moves, no object changes.
    pub(crate) fn apply_bookmark(&self, rv: u64) -> Result<Applied, ApplyError> {
        let mut state = lock(&self.inner.state);
        if !state.ready {
            return Err(ApplyError::NotReady);
        }
        if rv <= state.rv {
            return Ok(Applied::Stale);
        }
        state.rv = rv;
        drop(state);
        self.inner.changed.notify_all();
        Ok(Applied::Advanced)
    }

    /// Applies one watch event as the upstream stream carries it,
    /// `{"type":"MODIFIED","object":{...}}` (a unit of `cache::decode`'s watch stream; tests:
    /// the feeder uses [`WatchCache::apply_watch_event`]).
    #[cfg(test)]
    pub(crate) fn apply_event_json(&self, event: &[u8]) -> Result<Applied, ApplyError> {
        self.apply_watch_event(event).map(|(_, applied)| applied)
    }

    /// [`WatchCache::apply_event_json`], with the event's type (the feeder tells the cloud's
    /// bookmarks from its events).
    pub(crate) fn apply_watch_event(
        &self,
        event: &[u8],
    ) -> Result<(EventType, Applied), ApplyError> {
        #[derive(serde::Deserialize)]
        struct Wire<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            #[serde(borrow)]
            object: &'a serde_json::value::RawValue,
        }
        let wire: Wire<'_> =
            serde_json::from_slice(event).map_err(|e| ApplyError::BadEvent(e.to_string()))?;
        let Some(kind) = EventType::parse(wire.kind) else {
            let what = if wire.kind == "ERROR" {
                format!("the cloud ended the watch: {}", wire.object.get())
            } else {
                format!("unknown type {:?}", wire.kind)
            };
            return Err(ApplyError::BadEvent(what));
        };
        if kind == EventType::Bookmark {
            let applied = self.apply_bookmark(object_rv(wire.object.get().as_bytes())?)?;
            return Ok((kind, applied));
        }
        let object = self.parse(wire.object.get().as_bytes())?;
        Ok((kind, self.apply(kind, object)?))
    }

    /// The feeder heard the cloud's word on the resource at `at` (a list or an event
    /// applied, a bookmark of the cloud's; a follower: its leader's own age): the age
    /// [`WatchCache::synced_age`] counts from. An instant older than the last one changes
    /// nothing.
    pub(crate) fn note_synced(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.inner.born).as_millis();
        let ms = u64::try_from(ms).unwrap_or(u64::MAX - 1).saturating_add(1);
        self.inner
            .synced
            .fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long ago the cloud's word on the resource was last heard (monotonic); None
    /// before the first.
    pub(crate) fn synced_age(&self) -> Option<Duration> {
        match self.inner.synced.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            ms => Some(
                self.inner
                    .born
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms - 1)),
            ),
        }
    }

    /// The feeder's cloud watch brought a bookmark: the cloud sends them on an idle watch
    /// (about once a minute), so from now on a silent watch means a hung one, and an age
    /// past a minute or so means a stale cache.
    pub(crate) fn note_bookmark(&self) {
        self.inner
            .bookmarked
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the feeder's cloud watch has shown a bookmark ([`WatchCache::note_bookmark`]).
    pub(crate) fn bookmarked(&self) -> bool {
        self.inner
            .bookmarked
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The feeder got a usable answer from the cloud (a whole list, a watch's 200).
    pub(crate) fn feeder_ok(&self) {
        self.inner
            .feeder_failures
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// The cloud answered the feeder, but unusably (a refusal, a 5xx, garbage); a
    /// connection that failed is no such answer (offline, the cache keeps serving).
    pub(crate) fn feeder_failed(&self) {
        self.inner
            .feeder_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.changed.notify_all();
    }

    /// The cloud is answering but the feeder has had no usable answer for a few retries:
    /// what the cache holds is frozen while the cloud moves on, so its watches end (410)
    /// and its lists and watches are forwarded until the feeder recovers.
    pub(crate) fn feeder_failing(&self) -> bool {
        self.inner
            .feeder_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= FEEDER_FAILURES
    }

    /// Whether the feeder's first list waits for the pool's leader (one warming, or not
    /// listening yet): the cache counts as warming meanwhile (`PoolCaches::warming`), so its
    /// clients get 429 rather than being forwarded one by one.
    pub(crate) fn awaits_leader(&self) -> bool {
        self.inner
            .awaits_leader
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The feeder says whether its first list waits for the pool's leader.
    pub(crate) fn set_awaits_leader(&self, waits: bool) {
        self.inner
            .awaits_leader
            .store(waits, std::sync::atomic::Ordering::Relaxed);
    }

    /// Most JSON bytes a full list may bring ([`CacheOptions::max_list_bytes`]).
    pub(crate) fn max_list_bytes(&self) -> usize {
        self.inner.options.max_list_bytes
    }

    /// A list was past [`CacheOptions::max_list_bytes`]: the feeder lists again only after
    /// [`LIST_TOO_LARGE_PAUSE`], and a filled cache stops serving (its feed fails).
    pub(crate) fn list_too_large(&self) {
        *lock(&self.inner.list_paused_until) = Some(Instant::now() + LIST_TOO_LARGE_PAUSE);
        self.inner
            .feeder_failures
            .store(FEEDER_FAILURES, std::sync::atomic::Ordering::Relaxed);
        self.inner.changed.notify_all();
    }

    /// Whether the feeder must not list yet (after a list too large).
    pub(crate) fn list_paused(&self) -> bool {
        lock(&self.inner.list_paused_until).is_some_and(|until| Instant::now() < until)
    }

    /// Counts one object of a list the cache could not index and left out.
    pub(crate) fn note_skipped(&self) {
        self.inner
            .skipped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Objects the cache could not index and left out since it was made.
    pub(crate) fn skipped_objects(&self) -> u64 {
        self.inner
            .skipped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Leaves out the object of a watch event [`WatchCache::apply_event_json`] refused with
    /// [`ApplyError::Object`]: counts it and moves the cache's resourceVersion to the
    /// object's, when that much can be read, so the feeder resumes after it instead of
    /// relisting (a relist would skip it again, once per update of that object). The last
    /// state held of its key, if any, stays: the cache cannot tell which key it was.
    pub(crate) fn skip_unreadable(&self, event: &[u8]) -> Result<Applied, ApplyError> {
        #[derive(serde::Deserialize)]
        struct Wire<'a> {
            #[serde(borrow)]
            object: &'a serde_json::value::RawValue,
        }
        let wire: Wire<'_> =
            serde_json::from_slice(event).map_err(|e| ApplyError::BadEvent(e.to_string()))?;
        let rv = object_rv(wire.object.get().as_bytes())?;
        self.note_skipped();
        self.apply_bookmark(rv)?;
        Ok(Applied::Skipped)
    }

    /// Waits until the cache's resourceVersion is at least `rv`, for at most `timeout`;
    /// whether it is.
    pub(crate) fn wait_fresh(&self, rv: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.inner.state);
        while state.rv < rv {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .inner
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }

    /// The bytes the cache holds: every distinct object allocation (current objects and
    /// those only the history keeps: replaced and deleted states), the vector of objects,
    /// the history's slots, and one allocator header per allocation. Walks everything
    /// under the lock: for metrics and tests, not per request.
    pub(crate) fn memory(&self) -> Memory {
        let state = lock(&self.inner.state);
        let word = std::mem::size_of::<usize>();
        let mut seen: HashSet<usize> = HashSet::with_capacity(state.objects.len());
        let mut total = state.objects.capacity() * std::mem::size_of::<Object>()
            + state.history.capacity() * std::mem::size_of::<Event>();
        let mut json_bytes = 0;
        let mut count = |o: &Object, total: &mut usize| {
            if seen.insert(o.addr()) {
                // The allocator's header, and its rounding up to two words, on average.
                *total += o.heap_bytes() + 2 * word;
            }
        };
        for o in &state.objects {
            json_bytes += o.json().len();
            count(o, &mut total);
        }
        for e in &state.history {
            count(&e.object, &mut total);
            if let Some(prev) = &e.prev {
                count(prev, &mut total);
            }
        }
        Memory {
            objects: state.objects.len(),
            json_bytes,
            total_bytes: total,
            events: state.history.len(),
        }
    }
}

/// Whether `object` is in `namespace` (when given) and satisfies `selectors`, whose field
/// labels `resource` accepted.
fn selected(
    object: &Object,
    namespace: Option<&str>,
    selectors: &Selectors,
    resource: &Resource,
) -> bool {
    namespace.is_none_or(|ns| object.namespace() == ns) && object.matches(selectors, resource)
}

/// The events that turn `old` into `new` (both sorted by key), for a list at `list_rv`
/// over a cache at `cache_rv`, in resourceVersion order.
fn diff(
    old: &[Object],
    new: &[Object],
    cache_rv: u64,
    list_rv: u64,
    summary: &mut Replaced,
) -> Vec<Event> {
    let now = Instant::now();
    // An object's own resourceVersion orders its event when it lies between the cache's
    // and the list's, as it should; otherwise (a broken upstream) the list's is used.
    let event_rv = |o: &Object| {
        let rv = o.rv();
        if rv > cache_rv && rv <= list_rv {
            rv
        } else {
            list_rv
        }
    };
    let mut events = Vec::new();
    let (mut i, mut j) = (0, 0);
    loop {
        let order = match (old.get(i), new.get(j)) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => a.cmp_keys(b),
        };
        match order {
            std::cmp::Ordering::Less => {
                let prev = old[i].clone();
                summary.deleted += 1;
                events.push(Event {
                    kind: EventType::Deleted,
                    rv: list_rv,
                    object: prev.clone(),
                    prev: Some(prev),
                    splice_rv: true,
                    at: now,
                });
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                summary.added += 1;
                events.push(Event {
                    kind: EventType::Added,
                    rv: event_rv(&new[j]),
                    object: new[j].clone(),
                    prev: None,
                    splice_rv: false,
                    at: now,
                });
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                if old[i].rv() != new[j].rv() {
                    summary.modified += 1;
                    events.push(Event {
                        kind: EventType::Modified,
                        rv: event_rv(&new[j]),
                        object: new[j].clone(),
                        prev: Some(old[i].clone()),
                        splice_rv: false,
                        at: now,
                    });
                }
                i += 1;
                j += 1;
            }
        }
    }
    // Stable: deletions, all at the list's resourceVersion, stay in key order at the end.
    events.sort_by_key(|e| e.rv);
    events
}
