//! The writer thread: takes the tee's messages in order, decodes each answer incrementally
//! and persists it through the store (an object, a list replacement, watch events, a
//! document, a token answer); store failures are counted and logged at a bounded rate, and
//! the keys they spoil are kept until stored (`error_keys.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::TryRecvError;

use super::MAX_OBJECT_BYTES;
use super::error_keys::{ErrorKeys, Keyed};
use super::failures::{FailureLog, count_put};
use super::rules::{
    ListState, list_item, list_member, located_paths, namespaced, put_object, put_token,
    watch_event,
};
#[cfg(doc)]
use super::tee::CacheTx;
use super::tee::{CacheMsg, CacheRx};
use crate::cache::decode::{BodyDecoder, BodyShape, Located, Unit};
use crate::cache::key::ObjectKey;
use crate::cache::store::Store;
use crate::cache::target::{CacheTarget, TokenTarget};
use crate::metrics::{METRICS, Metrics};

/// How the writer runs; production passes the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WriterOptions {
    /// Sleep this long before each message, as a slow flash would: tests show with it that
    /// clients never wait for the writer. `None` in production (set only by a test-only flag).
    pub delay_per_message: Option<Duration>,
}

/// Runs the writer until every [`CacheTx`] is dropped, or until `stop` is set and the queue
/// has been drained (shutdown: what is queued is written, unfinished answers are not).
pub(crate) fn run(store: &Store, rx: CacheRx, stop: &AtomicBool, options: WriterOptions) {
    let mut sessions: HashMap<u64, Active<'_>> = HashMap::new();
    let mut failures = FailureLog::new(ErrorKeys::load(store));
    loop {
        // Nothing queued: sleep on the doorbell (see `tee::Doorbell`), unless stopping, when
        // the queue is only drained.
        let mut msg = rx.rx.try_recv();
        if matches!(msg, Err(TryRecvError::Empty)) && !stop.load(Ordering::Acquire) {
            rx.queue
                .doorbell
                .wait(Duration::from_millis(500), || !rx.rx.is_empty());
            msg = rx.rx.try_recv();
        }
        match msg {
            Ok(msg) => {
                if let Some(delay) = options.delay_per_message {
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
            Err(TryRecvError::Empty) if stop.load(Ordering::Acquire) => break,
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => break,
        }
        failures.error_keys.persist(store, false);
        // Sessions whose connection gave up: drop their staged state.
        sessions.retain(|id, s| {
            let keep = !s.given_up();
            if !keep {
                log::debug!("cache session {id} dropped: abandoned");
            }
            keep
        });
    }
    failures.error_keys.persist(store, true);
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
    /// Set by the connection thread when it gives up (`None`: a whole answer, never given up).
    abandoned: Option<Arc<AtomicBool>>,
    list: Option<ListState<'s>>,
    /// A unit failed in a way that spoils the whole answer (a list that cannot commit).
    failed: bool,
    /// Units of this answer skipped for not being a JSON object (see `rules::not_an_object`).
    not_objects: u64,
}

impl Active<'_> {
    /// The connection thread gave the session up.
    fn given_up(&self) -> bool {
        self.abandoned
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Acquire))
    }
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
            if let Some(active) = begin(store, failures, target, status, gzip, Some(abandoned)) {
                sessions.insert(id, active);
            }
        }
        CacheMsg::Chunk { id, data } => {
            if let Some(active) = sessions.get_mut(&id) {
                feed(store, failures, active, &data);
            }
        }
        CacheMsg::Whole {
            target,
            status,
            gzip,
            body,
        } => {
            if let Some(mut active) = begin(store, failures, target, status, gzip, None) {
                feed(store, failures, &mut active, &body);
                end(store, failures, active, true);
            }
        }
        CacheMsg::End { id, complete } => {
            if let Some(active) = sessions.remove(&id) {
                end(store, failures, active, complete);
            }
        }
        CacheMsg::Put { collection, bytes } => {
            put_object(store, failures, &collection, None, &bytes, None, &mut 0);
        }
        CacheMsg::Grants(grants) => grants.persist(store),
        // Every message before it is handled; the sender may have stopped waiting.
        CacheMsg::Barrier(ack) => {
            let _ = ack.try_send(());
        }
    }
}

/// Decodes the next bytes of `active`'s body and applies each unit to the store.
fn feed(store: &Store, failures: &mut FailureLog, active: &mut Active<'_>, data: &[u8]) {
    if active.failed {
        return;
    }
    let Some(decoder) = active.decoder.as_mut() else {
        return;
    };
    let (target, list) = (&active.target, &mut active.list);
    let not_objects = &mut active.not_objects;
    let mut failed = false;
    let result = decoder.feed_located(data, &mut |unit, found| {
        if !apply_unit(store, failures, target, list, not_objects, unit, found) {
            failed = true;
        }
    });
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

fn begin<'s>(
    store: &'s Store,
    failures: &mut FailureLog,
    target: CacheTarget,
    status: u16,
    gzip: bool,
    abandoned: Option<Arc<AtomicBool>>,
) -> Option<Active<'s>> {
    let shape = match (&target, status) {
        (CacheTarget::List { collection, .. }, 404) => {
            // The kind is gone in the cloud (a deleted CRD): never serve it from cache again.
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
            Ok(replace) => Some(ListState {
                replace,
                failed_keys: Vec::new(),
                namespaced: namespaced(collection, namespace.as_deref()),
                no_namespace: 0,
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
        decoder: Some(
            BodyDecoder::new(shape, gzip, MAX_OBJECT_BYTES).locating(located_paths(shape)),
        ),
        target,
        abandoned,
        list,
        failed: false,
        not_objects: 0,
    })
}

fn end(store: &Store, failures: &mut FailureLog, mut active: Active<'_>, complete: bool) {
    let target = &active.target;
    let mut ok = complete && !active.failed && !active.given_up();
    if ok && let Some(decoder) = active.decoder.as_mut() {
        let (list, mut failed) = (&mut active.list, false);
        let not_objects = &mut active.not_objects;
        if let Err(e) = decoder.finish_located(&mut |unit, found| {
            if !apply_unit(store, failures, target, list, not_objects, unit, found) {
                failed = true;
            }
        }) {
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
        log::info!(
            "cache: list answer for {} incomplete, cache left unchanged",
            target.error_key()
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
    let list_rv = list.resource_version.as_deref();
    let committed = if list.is_whole(*paged, active.not_objects) {
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

/// Applies one decoded unit; false when the session can no longer commit.
fn apply_unit(
    store: &Store,
    failures: &mut FailureLog,
    target: &CacheTarget,
    list: &mut Option<ListState<'_>>,
    not_objects: &mut u64,
    unit: Unit<'_>,
    found: &Located,
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
        (
            Unit::Object(bytes),
            CacheTarget::Object {
                collection,
                namespace,
                ..
            },
        ) => {
            put_object(
                store,
                failures,
                collection,
                namespace.as_deref(),
                bytes,
                Some(found),
                not_objects,
            );
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
            Some(list) => list_item(failures, collection, list, bytes, found, not_objects),
            None => false,
        },
        (Unit::WatchEvent(bytes), CacheTarget::Watch { collection }) => {
            watch_event(store, failures, collection, bytes, Some(found), not_objects);
            true
        }
        _ => true,
    }
}
