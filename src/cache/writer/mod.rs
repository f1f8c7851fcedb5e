//! The cache write path: connection threads tee response bodies into a bounded channel
//! ([`CacheTx`], [`Session`]) and one writer thread ([`run`]) decodes them incrementally and
//! persists each object through the store. The writer is the only code that writes the cache.
//!
//! The client never waits for the disk: every send is a `try_send`. When the queue is full
//! the response's session is abandoned (counted in `tinyhub_cache_sessions_abandoned_total`)
//! and nothing half-received is committed: a list's staged objects are dropped, a watch keeps
//! the events that arrived whole.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::decode::{BodyDecoder, BodyShape, Unit};
use super::key::{CollectionKey, ObjectKey, TokenKey};
use super::object::{ObjectHead, ObjectMeta};
use super::store::{PutOutcome, Replace, Store, StoreError};
use crate::metrics::{METRICS, Metrics};
use crate::route::{CacheTarget, TokenTarget};

/// A failing disk (full, read-only) fails every write: one log line per object would flood
/// the log, on flash it may share. Failures are reported once per interval, with a count.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Store failures not yet reported, and when the last report was made. Owned by [`run`]:
/// only the writer thread writes, so it needs no lock.
#[derive(Default)]
struct FailureLog {
    reported: Option<Instant>,
    unreported: u64,
    /// Set by a failure, cleared by the next successful write.
    failing: bool,
}

/// Largest single object (or watch event) the writer assembles; etcd refuses objects above
/// 1.5 MiB, so this leaves room for any real one.
pub const MAX_OBJECT_BYTES: usize = 8 * 1024 * 1024;

/// Messages from connection threads to the writer.
pub enum CacheMsg {
    /// A response to persist begins.
    Begin {
        /// Session id.
        id: u64,
        /// What to persist.
        target: CacheTarget,
        /// HTTP status of the answer.
        status: u16,
        /// The body is gzip-encoded.
        gzip: bool,
        /// Set by the connection thread when it gives the session up.
        abandoned: Arc<AtomicBool>,
    },
    /// The next bytes of that response's body.
    Chunk {
        /// Session id.
        id: u64,
        /// Body bytes, in order.
        data: Vec<u8>,
    },
    /// The body ended; `complete` is false when it broke off.
    End {
        /// Session id.
        id: u64,
        /// The body arrived whole.
        complete: bool,
    },
    /// One whole object to store (an offline create).
    Put {
        /// Where it belongs.
        collection: CollectionKey,
        /// The object's JSON.
        bytes: Vec<u8>,
    },
}

/// The byte budget shared by senders and the writer: body bytes waiting in the channel are
/// bounded whatever the chunk sizes are.
struct Queue {
    queued_bytes: AtomicUsize,
    budget: usize,
}

/// How a sender behaves when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Give up at once: a client is waiting (connection threads).
    NeverWait,
    /// Wait for room: nobody is waiting (the refill thread), so it goes at the disk's pace.
    Wait,
}

/// The longest a paced sender waits for room before it gives up.
const PACED_PATIENCE: Duration = Duration::from_secs(120);

impl Queue {
    /// Queues `msg` on `tx`. With [`Pace::NeverWait`] it gives up at once when the channel
    /// or the byte budget is full; with [`Pace::Wait`] it waits for room, up to a bound.
    fn send(&self, tx: &Sender<CacheMsg>, msg: CacheMsg, pace: Pace) -> bool {
        let len = msg.payload_len();
        let mut deadline = None;
        // Senders race, so the budget can be overshot by one chunk per sender: still bounded.
        while self.queued_bytes.load(Ordering::Relaxed) + len > self.budget {
            if pace == Pace::NeverWait {
                return false;
            }
            let now = std::time::Instant::now();
            if now >= *deadline.get_or_insert(now + PACED_PATIENCE) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        let sent = match pace {
            Pace::NeverWait => tx.try_send(msg).is_ok(),
            Pace::Wait => tx.send_timeout(msg, PACED_PATIENCE).is_ok(),
        };
        if sent {
            METRICS
                .cache_writer_queue_depth
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
        }
        sent
    }
}

impl CacheMsg {
    fn payload_len(&self) -> usize {
        match self {
            CacheMsg::Chunk { data, .. } => data.len(),
            CacheMsg::Put { bytes, .. } => bytes.len(),
            CacheMsg::Begin { .. } | CacheMsg::End { .. } => 0,
        }
    }
}

/// The sending side, cloned into every connection thread.
#[derive(Clone)]
pub struct CacheTx {
    tx: Sender<CacheMsg>,
    queue: Arc<Queue>,
    next_id: Arc<AtomicU64>,
    /// Where responses dropped for a full queue are sent to be fetched again.
    refills: Option<Sender<Refill>>,
}

/// A response whose cache session was dropped because the disk fell behind: the request to
/// repeat, on the hub's own credentials, at the disk's pace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refill {
    /// Path and query of the original request.
    pub path_and_query: String,
    /// The component whose cache it fills.
    pub component: String,
}

/// The writer's side of the queue.
pub struct CacheRx {
    rx: Receiver<CacheMsg>,
    queue: Arc<Queue>,
}

/// Creates the queue: at most `messages` messages holding at most `budget` body bytes.
pub fn channel(messages: usize, budget: usize) -> (CacheTx, CacheRx) {
    let (tx, rx) = crossbeam_channel::bounded(messages);
    let queue = Arc::new(Queue {
        queued_bytes: AtomicUsize::new(0),
        budget,
    });
    (
        CacheTx {
            tx,
            queue: Arc::clone(&queue),
            next_id: Arc::new(AtomicU64::new(1)),
            refills: None,
        },
        CacheRx { rx, queue },
    )
}

/// Bytes a list or get session gathers before handing them to the writer: fewer, larger
/// messages. Watch sessions send each read at once, so an event is on disk promptly.
const COALESCE: usize = 32 * 1024;

impl CacheTx {
    /// Sends responses dropped for a full queue to `refills` from now on.
    pub fn with_refills(mut self, refills: Sender<Refill>) -> CacheTx {
        self.refills = Some(refills);
        self
    }

    /// Starts persisting a response, or None when the queue is full right now. `refill`
    /// says how to fetch it again should the session be dropped for a full queue.
    pub fn begin(
        &self,
        target: CacheTarget,
        status: u16,
        gzip: bool,
        refill: Option<Refill>,
    ) -> Option<Session> {
        let refill = refill.and_then(|r| Some((self.refills.clone()?, r)));
        self.start(target, status, gzip, Pace::NeverWait, refill)
    }

    /// Starts persisting a response that no client waits for: every send waits for room.
    pub fn begin_paced(&self, target: CacheTarget, status: u16, gzip: bool) -> Option<Session> {
        self.start(target, status, gzip, Pace::Wait, None)
    }

    fn start(
        &self,
        target: CacheTarget,
        status: u16,
        gzip: bool,
        pace: Pace,
        refill: Option<(Sender<Refill>, Refill)>,
    ) -> Option<Session> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let abandoned = Arc::new(AtomicBool::new(false));
        let streaming = matches!(target, CacheTarget::Watch { .. });
        let msg = CacheMsg::Begin {
            id,
            target,
            status,
            gzip,
            abandoned: Arc::clone(&abandoned),
        };
        let mut session = Session {
            id,
            tx: self.tx.clone(),
            queue: Arc::clone(&self.queue),
            abandoned,
            done: false,
            streaming,
            pending: Vec::new(),
            pace,
            refill,
        };
        if !self.queue.send(&self.tx, msg, pace) {
            session.abandon();
            return None;
        }
        Some(session)
    }

    /// Stores one whole object; false when the queue is full.
    pub fn put(&self, collection: CollectionKey, bytes: Vec<u8>) -> bool {
        self.queue.send(
            &self.tx,
            CacheMsg::Put { collection, bytes },
            Pace::NeverWait,
        )
    }
}

/// One response being persisted, owned by the connection thread that forwards it.
pub struct Session {
    id: u64,
    tx: Sender<CacheMsg>,
    queue: Arc<Queue>,
    abandoned: Arc<AtomicBool>,
    done: bool,
    streaming: bool,
    pending: Vec<u8>,
    pace: Pace,
    refill: Option<(Sender<Refill>, Refill)>,
}

impl Session {
    /// Copies `data` to the writer; false once the session is abandoned (queue full).
    pub fn chunk(&mut self, data: &[u8]) -> bool {
        if self.done {
            return false;
        }
        if self.streaming {
            return self.send_data(data.to_vec());
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(COALESCE.max(data.len()));
        }
        self.pending.extend_from_slice(data);
        if self.pending.len() >= COALESCE {
            let data = std::mem::take(&mut self.pending);
            return self.send_data(data);
        }
        true
    }

    /// Hands over a whole buffer (a small answer) without copying it.
    pub fn chunk_owned(&mut self, data: Vec<u8>) -> bool {
        if self.done {
            return false;
        }
        if self.pending.is_empty() {
            return self.send_data(data);
        }
        self.chunk(&data)
    }

    fn send_data(&mut self, data: Vec<u8>) -> bool {
        if !self
            .queue
            .send(&self.tx, CacheMsg::Chunk { id: self.id, data }, self.pace)
        {
            self.abandon();
            return false;
        }
        true
    }

    /// The body is over: whole (`complete`) or broken off.
    pub fn finish(mut self, complete: bool) {
        if self.done {
            return;
        }
        if complete && !self.pending.is_empty() {
            let data = std::mem::take(&mut self.pending);
            if !self.send_data(data) {
                return;
            }
        }
        self.done = true;
        if !self.queue.send(
            &self.tx,
            CacheMsg::End {
                id: self.id,
                complete,
            },
            self.pace,
        ) {
            self.abandon();
        }
    }

    fn abandon(&mut self) {
        self.done = true;
        if !self.abandoned.swap(true, Ordering::AcqRel) {
            Metrics::inc(&METRICS.cache_sessions_abandoned);
            // The answer is still wanted on disk: have it fetched again at the disk's pace.
            let refilled = self
                .refill
                .take()
                .is_some_and(|(tx, refill)| tx.try_send(refill).is_ok());
            log::debug!(
                "cache session {} abandoned: the writer queue is full{}",
                self.id,
                if refilled {
                    "; it will be fetched again"
                } else {
                    ""
                }
            );
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.done {
            // The connection thread gave up (client gone, error) without finishing.
            self.done = true;
            if !self.queue.send(
                &self.tx,
                CacheMsg::End {
                    id: self.id,
                    complete: false,
                },
                Pace::NeverWait,
            ) {
                self.abandoned.store(true, Ordering::Release);
            }
        }
    }
}

/// Runs the writer until every [`CacheTx`] is dropped, or until `stop` is set and the queue
/// has been drained (shutdown: what is queued is written, unfinished answers are not).
pub fn run(store: &Store, rx: CacheRx, stop: &AtomicBool) {
    let mut sessions: HashMap<u64, Active<'_>> = HashMap::new();
    let mut failures = FailureLog::default();
    // Test hook: a writer slowed down on purpose (a slow flash), to show that clients never
    // wait for it. Not a flag: nobody should set it in production.
    let test_delay = std::env::var("TINYHUB_TEST_WRITER_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    loop {
        let wait = if stop.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            Duration::from_millis(500)
        };
        match rx.rx.recv_timeout(wait) {
            Ok(msg) => {
                if let Some(delay) = test_delay {
                    std::thread::sleep(delay);
                }
                let started = std::time::Instant::now();
                rx.queue
                    .queued_bytes
                    .fetch_sub(msg.payload_len(), Ordering::Relaxed);
                METRICS
                    .cache_writer_queue_depth
                    .fetch_sub(1, Ordering::Relaxed);
                handle(store, &mut sessions, &mut failures, msg);
                METRICS
                    .cache_writer_busy_micros
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            Err(RecvTimeoutError::Timeout) if stop.load(Ordering::Acquire) => break,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // Sessions whose connection gave up: drop their staged state.
        sessions.retain(|id, s| {
            let keep = !s.abandoned.load(Ordering::Acquire);
            if !keep {
                log::debug!("cache session {id} dropped: abandoned");
            }
            keep
        });
    }
    if !sessions.is_empty() {
        log::info!(
            "cache writer stopping with {} unfinished responses, not committed",
            sessions.len()
        );
    }
}

/// A session the writer is working on.
struct Active<'s> {
    target: CacheTarget,
    decoder: Option<BodyDecoder>,
    abandoned: Arc<AtomicBool>,
    list: Option<ListState<'s>>,
    /// A unit failed in a way that spoils the whole answer (a list that cannot commit).
    failed: bool,
    /// Units of this answer skipped for not being a JSON object (see [`not_an_object`]).
    not_objects: u64,
}

/// What a list answer has told so far.
struct ListState<'s> {
    replace: Replace<'s>,
    item_kind: Option<String>,
    api_version: Option<String>,
    resource_version: Option<String>,
    continue_token: bool,
    /// The answer's `kind` says it is a list (`...List`).
    is_list: bool,
}

fn handle<'s>(
    store: &'s Store,
    sessions: &mut HashMap<u64, Active<'s>>,
    failures: &mut FailureLog,
    msg: CacheMsg,
) {
    match msg {
        CacheMsg::Begin {
            id,
            target,
            status,
            gzip,
            abandoned,
        } => {
            if let Some(active) = begin(store, failures, target, status, gzip, abandoned) {
                sessions.insert(id, active);
            }
        }
        CacheMsg::Chunk { id, data } => {
            let Some(active) = sessions.get_mut(&id) else {
                return;
            };
            if active.failed {
                return;
            }
            let Some(decoder) = active.decoder.as_mut() else {
                return;
            };
            let (target, list) = (&active.target, &mut active.list);
            let not_objects = &mut active.not_objects;
            let mut failed = false;
            let result = decoder.feed(&data, &mut |unit| {
                if !apply_unit(store, failures, target, list, not_objects, unit) {
                    failed = true;
                }
            });
            if let Err(e) = result {
                log::warn!(
                    "cache: cannot decode the answer for {}: {e}",
                    describe(target)
                );
                Metrics::inc(&METRICS.cache_errors);
                failed = true;
            }
            active.failed |= failed;
        }
        CacheMsg::End { id, complete } => {
            if let Some(active) = sessions.remove(&id) {
                end(store, failures, active, complete);
            }
        }
        CacheMsg::Put { collection, bytes } => {
            put_object(store, failures, &collection, &bytes, &mut 0);
        }
    }
}

fn begin<'s>(
    store: &'s Store,
    failures: &mut FailureLog,
    target: CacheTarget,
    status: u16,
    gzip: bool,
    abandoned: Arc<AtomicBool>,
) -> Option<Active<'s>> {
    let shape = match (&target, status) {
        (CacheTarget::List { collection, .. }, 404) => {
            // The kind is gone in the cloud (a deleted CRD): never serve it from cache again.
            match store.delete_collection(collection) {
                Ok(true) => log::info!(
                    "cache: pruned {} after the cloud answered 404",
                    describe(&target)
                ),
                Ok(false) => {}
                Err(e) => failures.error("prune", &target, &e),
            }
            return None;
        }
        (
            CacheTarget::Object {
                collection,
                namespace,
                name: Some(name),
            },
            404,
        ) => {
            let key = ObjectKey {
                collection: collection.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            match store.delete(&key, None) {
                Ok(true) => Metrics::inc(&METRICS.cache_objects_deleted),
                Ok(false) => {}
                Err(e) => failures.error("delete", &target, &e),
            }
            return None;
        }
        (_, 200 | 201) => match &target {
            CacheTarget::List { .. } => BodyShape::List,
            CacheTarget::Watch { .. } => BodyShape::WatchStream,
            // Nothing to key a token answer by without the request's digest.
            CacheTarget::Token(TokenTarget { digest: None, .. }) => return None,
            CacheTarget::Object { .. }
            | CacheTarget::NonResource { .. }
            | CacheTarget::Token(_) => BodyShape::Object,
        },
        _ => return None,
    };
    let list = match &target {
        CacheTarget::List {
            collection,
            namespace,
            ..
        } => match store.begin_replace(collection, namespace.as_deref()) {
            Ok(replace) => Some(ListState {
                replace,
                item_kind: None,
                api_version: None,
                resource_version: None,
                continue_token: false,
                is_list: false,
            }),
            Err(e) => {
                failures.error("begin list", &target, &e);
                return None;
            }
        },
        _ => None,
    };
    Some(Active {
        decoder: Some(BodyDecoder::new(shape, gzip, MAX_OBJECT_BYTES)),
        target,
        abandoned,
        list,
        failed: false,
        not_objects: 0,
    })
}

fn end(store: &Store, failures: &mut FailureLog, mut active: Active<'_>, complete: bool) {
    let target = &active.target;
    let mut ok = complete && !active.failed && !active.abandoned.load(Ordering::Acquire);
    if ok && let Some(decoder) = active.decoder.as_mut() {
        let (list, mut failed) = (&mut active.list, false);
        let not_objects = &mut active.not_objects;
        if let Err(e) = decoder.finish(&mut |unit| {
            if !apply_unit(store, failures, target, list, not_objects, unit) {
                failed = true;
            }
        }) {
            log::warn!(
                "cache: the answer for {} ended inside a value: {e}",
                describe(target)
            );
            ok = false;
        }
        ok &= !failed;
    }
    let Some(list) = active.list.take() else {
        if ok {
            Metrics::inc(&METRICS.cache_sessions_committed);
        }
        return;
    };
    if !ok {
        // Dropping the replacement removes what it staged: the cached list stays as it was.
        log::info!(
            "cache: list answer for {} incomplete, cache left unchanged",
            describe(target)
        );
        Metrics::inc(&METRICS.cache_sessions_abandoned);
        return;
    }
    let CacheTarget::List {
        selectors, paged, ..
    } = target
    else {
        return;
    };
    // Only a whole list says which objects are gone; one page of it says nothing, and
    // neither does an answer that is not evidently a list or held items the hub could not
    // read (an unreadable item may be an object the cloud still has).
    let whole = !*paged && !list.continue_token && list.is_list && active.not_objects == 0;
    let mut in_scope = |bytes: &[u8]| -> bool {
        whole
            && serde_json::from_slice::<serde_json::Value>(bytes)
                // A file that is not JSON is garbage in scope: let the answer replace it.
                .map_or(true, |v| selectors.matches(&v))
    };
    match list
        .replace
        .commit(&mut in_scope, list.resource_version.as_deref())
    {
        Ok(report) => {
            if report.written > 0 {
                failures.written_again();
            }
            Metrics::inc(&METRICS.cache_sessions_committed);
            METRICS
                .cache_objects_written
                .fetch_add(report.written as u64, Ordering::Relaxed);
            METRICS
                .cache_bytes_written
                .fetch_add(report.bytes, Ordering::Relaxed);
            METRICS
                .cache_writes_skipped_identical
                .fetch_add(report.identical as u64, Ordering::Relaxed);
            METRICS
                .cache_writes_skipped_stale
                .fetch_add(report.stale as u64, Ordering::Relaxed);
            METRICS
                .cache_objects_deleted
                .fetch_add(report.deleted as u64, Ordering::Relaxed);
            log::debug!(
                "cache: list {} committed written={} identical={} deleted={} kept_newer={}",
                describe(target),
                report.written,
                report.identical,
                report.deleted,
                report.kept_newer
            );
        }
        Err(e) => failures.error("commit list", target, &e),
    }
}

/// Applies one decoded unit; false when the session can no longer commit.
fn apply_unit(
    store: &Store,
    failures: &mut FailureLog,
    target: &CacheTarget,
    list: &mut Option<ListState<'_>>,
    not_objects: &mut u64,
    unit: Unit<'_>,
) -> bool {
    match (unit, target) {
        (Unit::Object(bytes), CacheTarget::NonResource { file }) => {
            count_put(
                failures,
                store.put_non_resource(file, bytes),
                "document",
                target,
            );
            true
        }
        (Unit::Object(bytes), CacheTarget::Object { collection, .. }) => {
            put_object(store, failures, collection, bytes, not_objects);
            true
        }
        (Unit::Object(bytes), CacheTarget::Token(token)) => {
            put_token(store, failures, token, bytes);
            true
        }
        (Unit::ListMember { key, value }, _) => {
            if let Some(list) = list.as_mut() {
                list_member(list, key, value);
            }
            true
        }
        (Unit::ListItem(bytes), CacheTarget::List { collection, .. }) => match list.as_mut() {
            Some(list) => list_item(failures, collection, list, bytes, not_objects),
            None => false,
        },
        (Unit::WatchEvent(bytes), CacheTarget::Watch { collection }) => {
            watch_event(store, failures, collection, bytes, not_objects);
            true
        }
        _ => true,
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Where an object goes, or why it is not stored.
fn object_key(
    collection: &CollectionKey,
    head: &ObjectHead<'_>,
) -> Option<(ObjectKey, Option<String>)> {
    if head.kind.as_deref() == Some("Status") {
        return None;
    }
    let meta = head.metadata.as_ref()?;
    let name = meta.name.as_deref().filter(|n| !n.is_empty())?;
    // A pod not bound to a node is of no use to a node (as in YurtHub).
    if collection.group.is_empty() && collection.resource == "pods" {
        let bound = head
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if !bound {
            return None;
        }
    }
    Some((
        ObjectKey {
            collection: collection.clone(),
            namespace: meta
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            name: name.to_owned(),
        },
        meta.resource_version.as_deref().map(str::to_owned),
    ))
}

/// Counts a unit of an answer that is not a JSON object (it is skipped), and logs the first
/// of each answer: a broken answer may hold thousands.
fn not_an_object(
    not_objects: &mut u64,
    collection: &CollectionKey,
    what: &str,
    e: &serde_json::Error,
) {
    Metrics::inc(&METRICS.cache_errors);
    *not_objects += 1;
    if *not_objects == 1 {
        log::warn!(
            "cache: {what} in an answer for {}/{} is not a JSON object ({e}); skipped, as is \
             any other in this answer (counted in tinyhub_cache_errors_total)",
            collection.component,
            collection.dir_name()
        );
    }
}

fn put_object(
    store: &Store,
    failures: &mut FailureLog,
    collection: &CollectionKey,
    bytes: &[u8],
    not_objects: &mut u64,
) {
    let head = match ObjectHead::read(bytes) {
        Ok(h) => h,
        Err(e) => return not_an_object(not_objects, collection, "an object", &e),
    };
    if let Some((key, rv)) = object_key(collection, &head) {
        count_put(
            failures,
            store.put(&key, bytes, rv.as_deref()),
            "object",
            &key,
        );
    }
}

/// Keeps a TokenRequest answer for offline TokenRequests; one without a token or a readable
/// expiry could never be served, so it is not kept. (The token itself is never logged.)
fn put_token(store: &Store, failures: &mut FailureLog, target: &TokenTarget, bytes: &[u8]) {
    let Some(digest) = &target.digest else {
        return;
    };
    if crate::tokens::expiry(bytes).is_none() {
        log::debug!(
            "cache: the TokenRequest answer for {}/{} has no token or expiry; not kept",
            target.namespace,
            target.name
        );
        return;
    }
    let key = TokenKey {
        component: target.component.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        digest: digest.clone(),
    };
    count_put(failures, store.put_token(&key, bytes), "token answer", &key);
}

fn watch_event(
    store: &Store,
    failures: &mut FailureLog,
    collection: &CollectionKey,
    bytes: &[u8],
    not_objects: &mut u64,
) {
    let event: Event<'_> = match serde_json::from_slice(bytes) {
        Ok(e) => e,
        Err(e) => {
            log::warn!(
                "cache: a watch event for {} does not parse: {e}",
                collection.dir_name()
            );
            Metrics::inc(&METRICS.cache_errors);
            return;
        }
    };
    let object = event.object.get().as_bytes();
    match event.kind.as_ref() {
        "ADDED" | "MODIFIED" => put_object(store, failures, collection, object, not_objects),
        "DELETED" => {
            let head = match ObjectHead::read(object) {
                Ok(h) => h,
                Err(e) => return not_an_object(not_objects, collection, "a watch object", &e),
            };
            let Some((key, rv)) = object_key(collection, &head) else {
                return;
            };
            // The store keeps a newer object (a late DELETED from an older stream) and
            // refuses every older version from now on.
            match store.delete(&key, rv.as_deref()) {
                Ok(true) => Metrics::inc(&METRICS.cache_objects_deleted),
                Ok(false) => {}
                Err(e) => failures.error("delete", &key, &e),
            }
        }
        // BOOKMARK carries no object change; ERROR ends the stream (the client re-lists).
        _ => {}
    }
}

fn list_member(list: &mut ListState<'_>, key: &str, value: &[u8]) {
    match key {
        "kind" => {
            if let Ok(kind) = serde_json::from_slice::<String>(value) {
                list.is_list = kind.ends_with("List");
                list.item_kind = Some(kind.strip_suffix("List").unwrap_or(&kind).to_owned());
            }
        }
        "apiVersion" => list.api_version = serde_json::from_slice::<String>(value).ok(),
        "metadata" => {
            if let Ok(meta) = serde_json::from_slice::<ObjectMeta<'_>>(value) {
                list.resource_version = meta.resource_version.map(Cow::into_owned);
                list.replace.set_list_rv(list.resource_version.as_deref());
                list.continue_token = meta.continue_token.is_some_and(|c| !c.is_empty());
            }
        }
        _ => {}
    }
}

/// Stages one list item with `kind` and `apiVersion` set from the list (the apiserver leaves
/// them out of items). False when the list can no longer commit.
fn list_item(
    failures: &mut FailureLog,
    collection: &CollectionKey,
    list: &mut ListState<'_>,
    bytes: &[u8],
    not_objects: &mut u64,
) -> bool {
    let head = match ObjectHead::read(bytes) {
        Ok(h) => h,
        // The rest of the list is still cached; the list then deletes nothing (see `end`).
        Err(e) => {
            not_an_object(not_objects, collection, "a list item", &e);
            return true;
        }
    };
    let Some((key, rv)) = object_key(collection, &head) else {
        return true;
    };
    let owned;
    let object: &[u8] = if head.kind.is_none() {
        let (Some(kind), Some(api_version)) = (&list.item_kind, &list.api_version) else {
            log::warn!(
                "cache: a {} list gave items before its kind; not cached",
                collection.dir_name()
            );
            return false;
        };
        owned = with_type_meta(bytes, kind, api_version);
        &owned
    } else {
        bytes
    };
    let result = list
        .replace
        .put(key.namespace.as_deref(), &key.name, object, rv.as_deref());
    match result {
        Ok(_) => true,
        Err(e) => {
            failures.error("stage", &key, &e);
            false
        }
    }
}

/// `{...}` with `"kind":..,"apiVersion":..` inserted at the front.
fn with_type_meta(object: &[u8], kind: &str, api_version: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(object.len() + kind.len() + api_version.len() + 32);
    out.extend_from_slice(b"{\"kind\":");
    // Kinds and versions are plain identifiers; serde_json escapes anything odd.
    out.extend_from_slice(&serde_json::to_vec(kind).unwrap_or_default());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(&serde_json::to_vec(api_version).unwrap_or_default());
    let start = object
        .iter()
        .position(|&b| b == b'{')
        .map_or(object.len(), |i| i + 1);
    let rest = &object[start..];
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    out
}

fn count_put(
    failures: &mut FailureLog,
    result: Result<PutOutcome, super::store::StoreError>,
    what: &str,
    key: &dyn std::fmt::Debug,
) {
    match result {
        Ok(PutOutcome::Written { bytes }) => {
            failures.written_again();
            Metrics::inc(&METRICS.cache_objects_written);
            METRICS
                .cache_bytes_written
                .fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(PutOutcome::Identical) => Metrics::inc(&METRICS.cache_writes_skipped_identical),
        Ok(PutOutcome::Stale) => Metrics::inc(&METRICS.cache_writes_skipped_stale),
        Err(e) => failures.error(what, key, &e),
    }
}

impl FailureLog {
    /// Counts a store failure, and reports it unless one was reported within the interval.
    fn error(&mut self, what: &str, subject: &dyn std::fmt::Debug, e: &StoreError) {
        Metrics::inc(&METRICS.cache_errors);
        if e.is_disk_full() {
            Metrics::inc(&METRICS.cache_disk_full);
        }
        self.failing = true;
        if self
            .reported
            .is_some_and(|t| t.elapsed() < FAILURE_LOG_INTERVAL)
        {
            self.unreported += 1;
            return;
        }
        let earlier = std::mem::take(&mut self.unreported);
        self.reported = Some(Instant::now());
        log::warn!(
            "cache: storing {what} {subject:?} failed: {e} ({earlier} more failures since the \
             last report; what is cached stays as it was; the next report comes in {} s at the \
             earliest)",
            FAILURE_LOG_INTERVAL.as_secs()
        );
    }

    /// After failures, says once that writes succeed again.
    fn written_again(&mut self) {
        if !std::mem::take(&mut self.failing) {
            return;
        }
        let earlier = std::mem::take(&mut self.unreported);
        log::info!("cache: writing again ({earlier} failures since the last report)");
    }
}

fn describe(target: &CacheTarget) -> String {
    match target {
        CacheTarget::Object { collection, .. }
        | CacheTarget::List { collection, .. }
        | CacheTarget::Watch { collection } => {
            format!("{}/{}", collection.component, collection.dir_name())
        }
        CacheTarget::NonResource { file } => file.clone(),
        CacheTarget::Token(t) => format!(
            "{}/{}/{}/{}",
            t.component,
            TokenKey::DIR,
            t.namespace,
            t.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;
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
        let (tx, rx) = channel(64, budget);
        send(&tx);
        drop(tx);
        run(store, rx, &AtomicBool::new(false));
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

    #[test]
    fn type_meta_goes_in_front() {
        let out = with_type_meta(br#"{"metadata":{"name":"a"}}"#, "Pod", "v1");
        assert_eq!(
            out,
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#
        );
        let out = with_type_meta(b" { } ", "Pod", "v1");
        assert_eq!(out, br#"{"kind":"Pod","apiVersion":"v1" } "#);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["kind"], "Pod");
    }
}
