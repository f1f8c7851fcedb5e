//! The writer thread: takes the tee's messages in order, decodes each answer incrementally
//! and persists it through the store (an object, a list replacement, watch events, a
//! document, a token answer); store failures are counted and logged at a bounded rate, and
//! the keys they spoil are kept until stored (`error_keys.rs`). As it applies an answer it
//! notes when its kind last heard the cloud's word (`cache/synced.rs`), and writes that record
//! at most every few minutes and at the drain.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::TryRecvError;

use super::MAX_OBJECT_BYTES;
use super::error_keys::{ErrorKeys, Keyed};
use super::evict::{Bound, BoundStats, Write};
use super::failures::{FailureLog, count_put};
use super::identical::{self, Direct};
use super::rules::{
    ListState, list_item, list_member, located_paths, namespaced, put_object, put_token,
    watch_event,
};
#[cfg(doc)]
use super::tee::CacheTx;
use super::tee::LINGER;
use super::tee::{CacheMsg, CacheRx};
use super::unchanged::{Memos, Proven};
use crate::cache::decode::{BodyDecoder, BodyShape, Located, Unit};
use crate::cache::key::{CollectionKey, ObjectKey};
use crate::cache::store::Store;
use crate::cache::synced::{Synced, Word};
use crate::cache::target::{CacheTarget, TokenTarget};
use crate::metrics::{METRICS, Metrics};

/// How the writer runs; production passes the default but for the bound.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriterOptions {
    /// Sleep this long before each message, as a slow flash would: tests show with it that
    /// clients never wait for the writer. `None` in production (set only by a test-only flag).
    pub delay_per_message: Option<Duration>,
    /// `--cache-max-bytes` and its counters, with the node's name (whose pods' needs are
    /// protected); `None`: no bound.
    pub bound: Option<(Arc<BoundStats>, String)>,
    /// How long the writer lingers for more answers before it sleeps; `None`: [`LINGER`]
    /// (tests lengthen it to see batching on a slow disk).
    pub linger: Option<Duration>,
}

/// Runs the writer until every [`CacheTx`] is dropped, or until `stop` is set and the queue
/// has been drained (shutdown: what is queued is written, unfinished answers are not).
/// `synced` is told when each kind heard the cloud's word, and written at the end.
pub(crate) fn run(
    store: &Store,
    rx: CacheRx,
    stop: &AtomicBool,
    options: WriterOptions,
    synced: &Synced,
) {
    let mut sessions: HashMap<u64, Active<'_>> = HashMap::new();
    let mut failures = FailureLog::new(ErrorKeys::load(store));
    let bound = options
        .bound
        .as_ref()
        .and_then(|(stats, node)| Bound::new(node, Arc::clone(stats)));
    let mut w = Writer {
        store,
        failures: &mut failures,
        synced,
        bound,
        memos: Memos::default(),
        clock: Clock::read(),
    };
    let allow_direct = |w: &Writer<'_, '_>| {
        let allowed = Direct::allow(&w.failures.error_keys, w.bound.is_some());
        rx.queue.direct.store(allowed, Ordering::Release);
    };
    allow_direct(&w);
    // Whether the writer has lingered since it last handled a message.
    let mut lingered = true;
    // Whether messages were handled since the chores (`chores`) last ran.
    let mut chores_due = false;
    loop {
        // Nothing queued: linger once for more (a batch rides one wake-up), then sleep on
        // the doorbell (see `tee::Doorbell`), unless stopping, when the queue is only drained.
        let mut msg = rx.rx.try_recv();
        if matches!(msg, Err(TryRecvError::Empty)) && !stop.load(Ordering::Acquire) {
            if chores_due {
                // Busy until now; the chores see what the batch did.
                w.clock.tick();
                chores(&mut w, &mut sessions);
            }
            if lingered {
                rx.queue
                    .doorbell
                    .wait(Duration::from_millis(500), || !rx.rx.is_empty());
            } else {
                rx.queue.doorbell.linger(options.linger.unwrap_or(LINGER));
                lingered = true;
            }
            // The time waited is not work.
            w.clock = Clock::read();
            msg = rx.rx.try_recv();
        }
        let quick = match msg {
            Ok(msg) => {
                lingered = false;
                if let Some(delay) = options.delay_per_message {
                    std::thread::sleep(delay);
                }
                rx.queue
                    .queued_bytes
                    .fetch_sub(msg.payload_len(), Ordering::Relaxed);
                METRICS
                    .cache_writer_queue_depth
                    .fetch_sub(1, Ordering::Relaxed);
                let opens = matches!(msg, CacheMsg::Begin { .. } | CacheMsg::End { .. });
                let quick = handle(&mut w, &mut sessions, msg);
                allow_direct(&w);
                if let Some(bound) = w.bound.as_mut() {
                    bounded(bound, &mut sessions, opens);
                }
                quick
            }
            Err(TryRecvError::Empty) if stop.load(Ordering::Acquire) => break,
            Err(TryRecvError::Empty) => {
                // Woken with nothing to do (the wait's timeout): the chores only, on the
                // reading just taken; no work to count as busy.
                chores(&mut w, &mut sessions);
                chores_due = false;
                continue;
            }
            Err(TryRecvError::Disconnected) => break,
        };
        // A quick message leaves the clocks and the chores to a later turn (`Clock`; not with
        // the test-only delay, which makes every message slow).
        if quick && options.delay_per_message.is_none() && w.clock.reuse() {
            chores_due = true;
            continue;
        }
        w.clock.tick();
        chores(&mut w, &mut sessions);
        chores_due = false;
    }
    rx.queue.direct.store(false, Ordering::Release);
    failures.error_keys.persist(store, true);
    synced.persist(store, true);
    if !sessions.is_empty() {
        log::info!(
            "cache writer stopping with {} unfinished responses, not committed",
            sessions.len()
        );
    }
}

/// What the writer does between messages: the records it keeps written (error keys,
/// `.synced`) when due, the sessions whose connection gave up dropped, the bound settled. Run
/// after each message but quick ones ([`Clock`]), and before the writer waits.
fn chores(w: &mut Writer<'_, '_>, sessions: &mut HashMap<u64, Active<'_>>) {
    let (store, synced) = (w.store, w.synced);
    w.failures.error_keys.persist(store, false);
    synced.persist_at(store, false, w.clock.at);
    // Sessions whose connection gave up: drop their staged state.
    let before = sessions.len();
    sessions.retain(|id, s| {
        let keep = !s.given_up();
        if !keep {
            log::debug!("cache session {id} dropped: abandoned");
        }
        keep
    });
    if let Some(bound) = w.bound.as_mut() {
        bound.settle(store, synced);
        let dropped = sessions.len() != before;
        bounded(bound, sessions, dropped);
    }
}

/// The writer's reading of the clocks (issue 34), taken after each message that did work of
/// its own, but only once for a run of quick ones: small answers found stored already
/// (`identical.rs`), which take a few microseconds and no system call. Where no vDSO serves
/// the clocks (an armv7 guest under qemu-user; ARM boards whose timer it cannot read) each
/// reading is a system call, and the four a message (its busy time twice, the Unix second
/// of the cloud's word, the `.synced` schedule) were most of the edge hub's extra system
/// calls per small get. The busy time is counted from reading to reading, the waits between
/// batches left out.
struct Clock {
    /// The last reading.
    at: Instant,
    /// The wall clock in Unix seconds, read with the first quick message after `at`: when
    /// a quick answer heard the cloud's word.
    unix: Option<u64>,
    /// Quick messages handled since.
    quick: u32,
}

/// The most quick messages handled on one reading: at a few microseconds each it is a few
/// milliseconds old at most, where the cloud's word is noted to the second.
const QUICK_PER_READING: u32 = 32;

impl Clock {
    fn read() -> Clock {
        Clock {
            at: Instant::now(),
            unix: None,
            quick: 0,
        }
    }

    /// The Unix seconds of this reading.
    fn unix(&mut self) -> u64 {
        *self.unix.get_or_insert_with(crate::unix_secs)
    }

    /// After a quick message: whether the reading may serve the next message too.
    fn reuse(&mut self) -> bool {
        self.quick += 1;
        self.quick < QUICK_PER_READING
    }

    /// Reads the clocks again, counting the time since the last reading as busy.
    fn tick(&mut self) {
        let then = self.at;
        *self = Clock::read();
        METRICS.cache_writer_busy_micros.fetch_add(
            self.at.saturating_duration_since(then).as_micros() as u64,
            Ordering::Relaxed,
        );
    }
}

/// What the writer thread works with.
struct Writer<'w, 's> {
    store: &'s Store,
    failures: &'w mut FailureLog,
    synced: &'s Synced,
    /// `--cache-max-bytes`, when set.
    bound: Option<Bound>,
    /// The whole lists committed, which prove a repeat unchanged (`unchanged.rs`).
    memos: Memos,
    /// The clocks as last read.
    clock: Clock,
}

/// After a message: the answers still writing a collection the bound evicted are
/// abandoned (none writes part of it back; the next whole list refills it), and when
/// `opened` (a session began or ended) the bound learns which collections are being written.
fn bounded(bound: &mut Bound, sessions: &mut HashMap<u64, Active<'_>>, opened: bool) {
    let evicted = bound.take_evicted();
    if !evicted.is_empty() {
        for s in sessions.values_mut() {
            if collection_of(&s.target).is_some_and(|c| evicted.contains(c)) {
                s.failed = true;
                // Its staged files go now, not at its end.
                s.list = None;
            }
        }
    }
    if opened || !evicted.is_empty() {
        bound.open = sessions
            .values()
            .filter(|s| !s.failed)
            .filter_map(|s| collection_of(&s.target).cloned())
            .collect::<HashSet<_>>();
    }
}

/// The collection an answer writes into, if one.
fn collection_of(target: &CacheTarget) -> Option<&CollectionKey> {
    match target {
        CacheTarget::Object { collection, .. }
        | CacheTarget::List { collection, .. }
        | CacheTarget::Watch { collection } => Some(collection),
        CacheTarget::NonResource { .. } | CacheTarget::Token(_) => None,
    }
}

/// What `unit` of `target`'s answer would write, for the bound: `None` for what writes
/// nothing of its own (a list's members).
fn write_of<'t>(unit: &Unit<'_>, target: &'t CacheTarget) -> Option<(Write<'t>, u64)> {
    let len = unit_bytes(unit)?.len() as u64;
    let write = match target {
        CacheTarget::NonResource { .. } => Write::Document,
        CacheTarget::Token(token) => Write::Token(&token.component),
        CacheTarget::List { collection, .. } if refills(target) => Write::Refill(collection),
        target => Write::Object(collection_of(target)?),
    };
    Some((write, len))
}

/// The bytes of an object unit (what the bound reads a pending pod from).
fn unit_bytes<'u>(unit: &Unit<'u>) -> Option<&'u [u8]> {
    match unit {
        Unit::Object(bytes) | Unit::ListItem(bytes) | Unit::WatchEvent(bytes) => Some(bytes),
        _ => None,
    }
}

/// Whether `target` may refill a collection the bound evicted: a list across namespaces,
/// not a continued page; it commits only when whole. Its selector is kept: a component reads
/// its collection through one such scope (kubelet's pods by `spec.nodeName`), as a relist
/// mark is cleared by one (`relisted`).
fn refills(target: &CacheTarget) -> bool {
    matches!(
        target,
        CacheTarget::List {
            namespace: None,
            paged: false,
            ..
        }
    )
}

/// The collection a unit of `target`'s answer tells the cloud's word on, when applying it
/// does: an object answered, a watch event (a bookmark too). A list tells it when it commits.
fn heard_by<'t>(unit: &Unit<'_>, target: &'t CacheTarget) -> Option<&'t CollectionKey> {
    match (unit, target) {
        (Unit::Object(_), CacheTarget::Object { collection, .. })
        | (Unit::WatchEvent(_), CacheTarget::Watch { collection }) => Some(collection),
        _ => None,
    }
}

/// What one batch of a session's units came to: whether a stored unit was the cloud's word
/// on its kind (`heard`), and whether one spoiled the answer.
struct Batch<'t, 'b> {
    target: &'t CacheTarget,
    heard: Option<&'t CollectionKey>,
    failed: bool,
    /// The bound each unit is admitted by, with the record it evicts by.
    bound: Option<(&'b mut Bound, &'b Synced)>,
    /// The memos a list of a known form may be proven unchanged by (with that form), until
    /// it is.
    memos: Option<(&'b Memos, u64)>,
    /// The list was proven unchanged: the units after its `metadata` are not applied.
    proven: Option<Proven>,
}

impl<'t, 'b> Batch<'t, 'b> {
    fn new(target: &'t CacheTarget, bound: Option<(&'b mut Bound, &'b Synced)>) -> Batch<'t, 'b> {
        Batch {
            target,
            heard: None,
            failed: false,
            bound,
            memos: None,
            proven: None,
        }
    }

    /// Applies one unit ([`apply_unit`]) and keeps what it came to.
    fn apply(
        &mut self,
        store: &Store,
        failures: &mut FailureLog,
        list: &mut Option<Box<ListState<'_>>>,
        not_objects: &mut u64,
        unit: Unit<'_>,
        found: &Located,
    ) {
        // A unit refused (or spoiled) ends the batch: none after it may write part of what
        // the refusal evicted back. A list proven unchanged needs nothing more.
        if self.failed || self.proven.is_some() {
            return;
        }
        if let Some((bound, synced)) = self.bound.as_mut()
            && let Some((write, len)) = write_of(&unit, self.target)
            && !bound.admit_unit(store, synced, write, len, unit_bytes(&unit))
        {
            // Not cached: a list or watch that cannot hold it whole is given up.
            self.failed = true;
            return;
        }
        let hears = heard_by(&unit, self.target);
        let metadata = matches!(
            unit,
            Unit::ListMember {
                key: "metadata",
                ..
            }
        );
        match apply_unit(store, failures, self.target, list, not_objects, unit, found) {
            Applied::Stored => self.heard = self.heard.or(hears),
            Applied::NotStored => {}
            Applied::Spoiled => self.failed = true,
        }
        if metadata && let (Some((memos, form)), Some(list)) = (self.memos, list.as_ref()) {
            self.proven = proven(store, memos, self.target, form, list);
        }
    }
}

/// Whether a list whose `metadata` was just noted is proven unchanged (`unchanged.rs`):
/// only before any item, for an answer that says it is a list and whole so far.
fn proven(
    store: &Store,
    memos: &Memos,
    target: &CacheTarget,
    form: u64,
    list: &ListState<'_>,
) -> Option<Proven> {
    if list.items_seen || !list.is_list || list.continue_token {
        return None;
    }
    memos.proves(store, target, form, list.resource_version.as_deref()?)
}

/// A session the writer is working on.
struct Active<'s> {
    target: CacheTarget,
    /// As of when its answer is the cloud's word.
    word: Word,
    decoder: Option<BodyDecoder>,
    /// Set by the connection thread when it gives up (`None`: a whole answer, never given up).
    abandoned: Option<Arc<AtomicBool>>,
    /// A list's state, boxed: the sessions' map holds an entry per open watch too (which has
    /// none), each bucket as large as an entry: boxed, 724 bytes less live heap per watch.
    list: Option<Box<ListState<'s>>>,
    /// A unit failed in a way that spoils the whole answer (a list that cannot commit).
    failed: bool,
    /// Units of this answer skipped for not being a JSON object (see `rules::not_an_object`).
    not_objects: u64,
    /// The last time noted for it: a watch's events within one second note once.
    noted: Option<u64>,
    /// What the body is a function of (`Session::reproducible`): with one, a list may be
    /// proven unchanged.
    form: Option<u64>,
    /// Told when the rest of the body is not needed (the tee stops copying it).
    enough: Option<Arc<AtomicBool>>,
    /// The list was proven unchanged at its `metadata` (`unchanged.rs`): the rest of the
    /// body is not decoded, and its end only does a committed list's bookkeeping.
    proven: Option<Proven>,
}

impl Active<'_> {
    /// The connection thread gave the session up.
    fn given_up(&self) -> bool {
        self.abandoned
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Acquire))
    }
}

/// Handles one message; true when it was a quick one ([`Clock`]): a small answer found
/// stored already.
fn handle<'s>(
    w: &mut Writer<'_, 's>,
    sessions: &mut HashMap<u64, Active<'s>>,
    msg: CacheMsg,
) -> bool {
    match msg {
        CacheMsg::Begin {
            id,
            target,
            status,
            gzip,
            word,
            abandoned,
            form,
            enough,
        } => {
            let head = Head {
                target: Arc::unwrap_or_clone(target),
                status,
                gzip,
                word,
                form,
            };
            if let Some(mut active) = begin(w, head, Some(abandoned)) {
                active.enough = enough;
                sessions.insert(id, active);
            }
        }
        CacheMsg::Chunk { id, data } => {
            if let Some(active) = sessions.get_mut(&id) {
                feed(w, active, &data);
            }
        }
        CacheMsg::Whole {
            target,
            status,
            gzip,
            word,
            form,
            body,
        } => {
            // A get's answer stored exactly so already: nothing to decode (`identical.rs`).
            if let Some((collection, object)) = identical::stored_already(
                w.store,
                &w.failures.error_keys,
                &target,
                (status, gzip),
                &body,
            ) {
                stored_again(w, collection, object, &word);
                return true;
            }
            let head = Head {
                target: Arc::unwrap_or_clone(target),
                status,
                gzip,
                word,
                form,
            };
            if let Some(mut active) = begin(w, head, None) {
                feed(w, &mut active, &body);
                end(w, active, true);
            }
        }
        CacheMsg::End { id, complete } => {
            if let Some(active) = sessions.remove(&id) {
                end(w, active, complete);
            }
        }
        CacheMsg::Put { collection, bytes } => {
            // The cloud's answer to the hub's own renewal: its word on the kind, as of now
            // (without it, a lease kind would have no age after a restart). Kubelet's lease
            // is protected: the bound only makes room for it.
            if let Some(bound) = w.bound.as_mut() {
                bound.admit(
                    w.store,
                    w.synced,
                    Write::Object(&collection),
                    bytes.len() as u64,
                );
            }
            if put_object(w.store, w.failures, &collection, None, &bytes, None, &mut 0) {
                note(w.synced, &collection, &Word::Cloud, &mut None);
            }
        }
        CacheMsg::Grants(grants) => grants.persist(w.store),
        // Every message before it is handled; the sender may have stopped waiting.
        CacheMsg::Barrier(ack) => {
            let _ = ack.try_send(());
        }
    }
    false
}

/// Decodes the next bytes of `active`'s body and applies each unit to the store.
fn feed(w: &mut Writer<'_, '_>, active: &mut Active<'_>, data: &[u8]) {
    let (store, synced) = (w.store, w.synced);
    let failures = &mut *w.failures;
    if active.failed {
        return;
    }
    let Some(decoder) = active.decoder.as_mut() else {
        return;
    };
    let target = &active.target;
    let mut batch = Batch::new(target, w.bound.as_mut().map(|b| (b, synced)));
    // Only a streamed list is proven (`unchanged.rs`): one read whole is small, and read.
    if active.enough.is_some() {
        batch.memos = active.form.map(|form| (&w.memos, form));
    }
    let (list, not_objects) = (&mut active.list, &mut active.not_objects);
    let result = decoder.feed_located(data, &mut |unit, found| {
        batch.apply(store, failures, list, not_objects, unit, found);
    });
    let Batch {
        mut failed,
        heard,
        proven,
        ..
    } = batch;
    if let Some(collection) = heard {
        note(synced, collection, &active.word, &mut active.noted);
    }
    if let Some(proven) = proven {
        // Nothing of it is staged (no item came before `metadata`): dropped, the decoder
        // too, and the connection thread stops copying the rest.
        log::trace!(
            "cache: list {} unchanged at resourceVersion {}: the rest is not read",
            target.error_key(),
            proven.list_rv
        );
        active.list = None;
        active.decoder = None;
        active.proven = Some(proven);
        if let Some(enough) = &active.enough {
            enough.store(true, Ordering::Relaxed);
        }
        return;
    }
    if let Err(e) = result {
        log::warn!(
            "cache: cannot decode the answer for {}: {e}",
            target.error_key()
        );
        Metrics::inc(&METRICS.cache_errors);
        failed = true;
    }
    active.failed |= failed;
}

/// A get's answer stored exactly so already (`identical.rs`): what the whole path would do
/// with it, without decoding it. The bound admits it (or not: then nothing more, as there),
/// the kind hears the cloud's word, the counters say an identical write was skipped.
fn stored_again(w: &mut Writer<'_, '_>, collection: &CollectionKey, object: &[u8], word: &Word) {
    if let Some(bound) = w.bound.as_mut()
        && !bound.admit_unit(
            w.store,
            w.synced,
            Write::Object(collection),
            object.len() as u64,
            Some(object),
        )
    {
        return;
    }
    // The writer's last reading of the clock (`Clock`), at most a few milliseconds before
    // this message was handled: a second earlier at worst says the cache is older than it
    // is, never younger.
    let heard = word.at(w.clock.unix());
    identical::count_stored_already(w.synced, collection, heard);
}

/// What a session's `Begin` (or `Whole`) says of its answer.
struct Head {
    target: CacheTarget,
    status: u16,
    gzip: bool,
    word: Word,
    /// What the body is a function of (`Session::reproducible`); `None`: unknown.
    form: Option<u64>,
}

fn begin<'s>(
    w: &mut Writer<'_, 's>,
    head: Head,
    abandoned: Option<Arc<AtomicBool>>,
) -> Option<Active<'s>> {
    let (store, failures) = (w.store, &mut *w.failures);
    let Head {
        target,
        status,
        gzip,
        word,
        form,
    } = head;
    let shape = match (&target, status) {
        (CacheTarget::List { collection, .. }, 404) => {
            // The kind is gone in the cloud (a deleted CRD): never serve it from cache again.
            w.synced.forget(collection);
            match store.delete_collection(collection) {
                Ok(pruned) => {
                    if pruned {
                        log::info!(
                            "cache: pruned {} after the cloud answered 404",
                            target.error_key()
                        );
                    }
                    failures.error_keys.removed_collection(collection);
                }
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
                Ok(deleted) => {
                    if deleted {
                        Metrics::inc(&METRICS.cache_objects_deleted);
                    }
                    failures.stored(&key);
                    // The cloud's word on the kind, as an object's would be.
                    note(w.synced, collection, &word, &mut None);
                }
                Err(e) => failures.error("delete", &key, &e),
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
            Ok(replace) => Some(Box::new(ListState {
                replace,
                failed_keys: Vec::new(),
                namespaced: namespaced(collection, namespace.as_deref()),
                no_namespace: 0,
                item_kind: None,
                api_version: None,
                resource_version: None,
                continue_token: false,
                is_list: false,
                items_seen: false,
            })),
            Err(e) => {
                failures.error("begin list", &target, &e);
                return None;
            }
        },
        _ => None,
    };
    Some(Active {
        decoder: Some(
            BodyDecoder::new(shape, gzip, MAX_OBJECT_BYTES).locating(located_paths(shape)),
        ),
        target,
        word,
        abandoned,
        list,
        failed: false,
        not_objects: 0,
        noted: None,
        form,
        enough: None,
        proven: None,
    })
}

fn end(w: &mut Writer<'_, '_>, mut active: Active<'_>, complete: bool) {
    let (store, synced) = (w.store, w.synced);
    let failures = &mut *w.failures;
    let target = &active.target;
    let mut ok = complete && !active.failed && !active.given_up();
    if let Some(proven) = active.proven.take() {
        return end_unchanged(w, &mut active, proven, ok);
    }
    let (word, noted) = (&active.word, &mut active.noted);
    if ok && let Some(decoder) = active.decoder.as_mut() {
        let mut batch = Batch::new(target, w.bound.as_mut().map(|b| (b, synced)));
        let (list, not_objects) = (&mut active.list, &mut active.not_objects);
        let finished = decoder.finish_located(&mut |unit, found| {
            batch.apply(store, failures, list, not_objects, unit, found);
        });
        let Batch { failed, heard, .. } = batch;
        if let Some(collection) = heard {
            note(synced, collection, word, noted);
        }
        if let Err(e) = finished {
            log::warn!(
                "cache: the answer for {} ended inside a value: {e}",
                target.error_key()
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
        list_incomplete(target);
        return;
    }
    let CacheTarget::List {
        collection,
        selectors,
        paged,
        ..
    } = target
    else {
        return;
    };
    let list_rv = list.resource_version.as_deref();
    let whole = list.is_whole(*paged, active.not_objects);
    if let Some(bound) = w.bound.as_ref()
        && !bound.may_commit(store, collection, whole && refills(target))
    {
        // The staged replacement is dropped: an evicted collection comes back whole or not at all.
        Metrics::inc(&METRICS.cache_sessions_abandoned);
        return;
    }
    let committed = if whole {
        // The cloud's whole answer for the scope replaces it, whatever the cache held.
        let mut in_scope = |bytes: &[u8]| -> bool {
            serde_json::from_slice::<serde_json::Value>(bytes)
                // A file that is not JSON is garbage in scope: let the answer replace it.
                .map_or(true, |v| selectors.matches(&v))
        };
        list.replace.commit(&mut in_scope, list_rv)
    } else {
        list.replace.commit_partial(list_rv)
    };
    match committed {
        Ok(report) => {
            if let Some(bound) = w.bound.as_mut() {
                bound.committed(collection);
            }
            note(synced, collection, word, noted);
            // The scope holds exactly the list, and the store's index knows each of its
            // objects as stored, when every object was found already so and nothing else was
            // in scope: a repeat at its resourceVersion is then proven unchanged
            // (`unchanged.rs`).
            let exact = whole
                && report.written == 0
                && report.deleted == 0
                && report.stale == 0
                && report.deleted_meanwhile == 0
                && report.kept_newer == 0;
            let items = report.written + report.identical;
            let form = active.form.filter(|_| exact);
            w.memos.committed(store, target, list_rv, items, form);
            if whole {
                // Every object of the answer was written, already so, stale or deleted meanwhile.
                let items =
                    report.written + report.identical + report.stale + report.deleted_meanwhile;
                listed_whole(store, synced, target, items, list_rv);
            }
            if report.written > 0 {
                failures.written_again();
            }
            failures.stored(target);
            for key in &list.failed_keys {
                failures.error_keys.stored_key(key);
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
                target.error_key(),
                report.written,
                report.identical,
                report.deleted,
                report.kept_newer
            );
        }
        Err(e) => failures.error("commit list", target, &e),
    }
}

/// The end of a list proven unchanged at its `metadata`: whole (`ok`), the bookkeeping a
/// committed list does when its commit changes nothing (the sync noted, the scope listed
/// whole, a relist mark cleared, the counters), and nothing else; broken off, what a broken
/// list does (nothing stored, counted abandoned). Should the collection have changed while
/// the answer streamed (a watch event, a get), it is neither: what changed it is newer than
/// the memo, and only a whole commit could weigh the list against it.
fn end_unchanged(w: &mut Writer<'_, '_>, active: &mut Active<'_>, proven: Proven, ok: bool) {
    let (store, synced) = (w.store, w.synced);
    let target = &active.target;
    let CacheTarget::List { collection, .. } = target else {
        return;
    };
    if !ok {
        list_incomplete(target);
        return;
    }
    if store.generation(collection) != proven.generation {
        log::debug!(
            "cache: list {} at resourceVersion {} was unchanged, but its collection changed \
             while it streamed; not committed",
            target.error_key(),
            proven.list_rv
        );
        return;
    }
    if let Some(bound) = w.bound.as_ref()
        && !bound.may_commit(store, collection, refills(target))
    {
        Metrics::inc(&METRICS.cache_sessions_abandoned);
        return;
    }
    // Nothing was written: the bound's protected set stands (`Bound::committed` not told).
    note(synced, collection, &active.word, &mut active.noted);
    listed_whole(
        store,
        synced,
        target,
        proven.items,
        Some(proven.list_rv.as_str()),
    );
    w.failures.stored(target);
    Metrics::inc(&METRICS.cache_sessions_committed);
    Metrics::inc(&METRICS.cache_lists_unchanged);
    METRICS
        .cache_writes_skipped_identical
        .fetch_add(proven.items as u64, Ordering::Relaxed);
    log::debug!(
        "cache: list {} committed unchanged at resourceVersion {}: identical={} (not read past its metadata)",
        target.error_key(),
        proven.list_rv,
        proven.items
    );
}

/// A list for `target` broke off or failed: nothing of it is stored.
fn list_incomplete(target: &CacheTarget) {
    log::info!(
        "cache: list answer for {} incomplete, cache left unchanged",
        target.error_key()
    );
    Metrics::inc(&METRICS.cache_sessions_abandoned);
}

/// A whole list for `target` of `items` objects at `list_rv` stands in the cache: what an
/// offline list of its scope may be answered from (`cache/synced.rs`), and, across
/// namespaces, the collection complete again. A component reads its collection through one
/// such scope (kubelet's pods by `spec.nodeName`), so its selector is the collection's; a
/// namespace's list says nothing of the other namespaces' objects.
fn listed_whole(
    store: &Store,
    synced: &Synced,
    target: &CacheTarget,
    items: usize,
    list_rv: Option<&str>,
) {
    let CacheTarget::List {
        collection,
        namespace,
        selectors,
        ..
    } = target
    else {
        return;
    };
    synced.listed_whole(collection, namespace.as_deref(), selectors, items, list_rv);
    if namespace.is_none() {
        relisted(store, collection);
    }
}

/// A whole list of `collection` across namespaces was committed: a relist mark on it
/// (`cache/relist.rs`) is done with.
fn relisted(store: &Store, collection: &CollectionKey) {
    match store.clear_relist(collection) {
        Ok(true) => log::info!(
            "cache: {}/{} relisted whole; its relist mark is cleared",
            collection.component,
            collection.dir_name()
        ),
        Ok(false) => {}
        // The mark stays: the collection is relisted once more, which costs one list.
        Err(e) => log::warn!(
            "{e}: the relist mark of {}/{} stays",
            collection.component,
            collection.dir_name()
        ),
    }
}

/// The cloud's word on `collection` was heard, as of when `word` says; `noted` is the last
/// time noted for the session, which a same second does not take the record's lock for.
fn note(synced: &Synced, collection: &CollectionKey, word: &Word, noted: &mut Option<u64>) {
    if let Some(at) = word.at(crate::unix_secs())
        && *noted != Some(at)
    {
        synced.note(collection, at);
        *noted = Some(at);
    }
}

/// What applying one unit came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// The store holds what it says (or it had nothing to store): the cloud's word.
    Stored,
    /// The store failed to take it: the session goes on, but the cache does not hold it.
    NotStored,
    /// The session can no longer commit.
    Spoiled,
}

/// Applies one decoded unit.
fn apply_unit(
    store: &Store,
    failures: &mut FailureLog,
    target: &CacheTarget,
    list: &mut Option<Box<ListState<'_>>>,
    not_objects: &mut u64,
    unit: Unit<'_>,
    found: &Located,
) -> Applied {
    let stored = |ok: bool| {
        if ok {
            Applied::Stored
        } else {
            Applied::NotStored
        }
    };
    match (unit, target) {
        (Unit::Object(bytes), CacheTarget::NonResource { file }) => stored(count_put(
            failures,
            store.put_non_resource(file, bytes),
            "document",
            target,
        )),
        (
            Unit::Object(bytes),
            CacheTarget::Object {
                collection,
                namespace,
                ..
            },
        ) => stored(put_object(
            store,
            failures,
            collection,
            namespace.as_deref(),
            bytes,
            Some(found),
            not_objects,
        )),
        (Unit::Object(bytes), CacheTarget::Token(token)) => {
            put_token(store, failures, token, bytes);
            Applied::Stored
        }
        (Unit::ListMember { key, value }, _) => {
            if let Some(list) = list.as_mut() {
                list_member(list, key, value);
            }
            Applied::Stored
        }
        (Unit::ListItem(bytes), CacheTarget::List { collection, .. }) => match list.as_mut() {
            Some(list) => {
                list.items_seen = true;
                match list_item(failures, collection, list, bytes, found, not_objects) {
                    true => Applied::Stored,
                    false => Applied::Spoiled,
                }
            }
            None => Applied::Spoiled,
        },
        (Unit::WatchEvent(bytes), CacheTarget::Watch { collection }) => stored(watch_event(
            store,
            failures,
            collection,
            bytes,
            Some(found),
            not_objects,
        )),
        _ => Applied::Stored,
    }
}
