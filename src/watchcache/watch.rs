//! Watches from the cache: a cursor into the shared history, the synthetic ADDED events of
//! a watch from "now", per-watcher selectors with the apiserver's transitions, bookmarks,
//! and the event lines clients read.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use super::object::{Object, parse_rv};
use super::{Event, EventType, WatchCache, selected};
use crate::lock;
use crate::selector::Selectors;
use crate::status::Status;

/// One event for one client.
#[derive(Clone, Debug)]
pub(crate) enum WatchEvent {
    /// ADDED, MODIFIED or DELETED of an object; `rv`, when set, is written in place of the
    /// object's own resourceVersion (a DELETED that carries an older state).
    Object {
        /// The event's type.
        kind: EventType,
        /// The object, shared with the cache.
        object: Object,
        /// The resourceVersion to write instead of the object's.
        rv: Option<u64>,
    },
    /// BOOKMARK at this resourceVersion.
    Bookmark(u64),
    /// The BOOKMARK that ends the initial state of a `sendInitialEvents=true` watch:
    /// annotated `k8s.io/initial-events-end: "true"`, at the state's resourceVersion.
    InitialEventsEnd(u64),
}

impl WatchEvent {
    /// The event's type.
    pub(crate) fn kind(&self) -> EventType {
        match self {
            WatchEvent::Object { kind, .. } => *kind,
            WatchEvent::Bookmark(_) | WatchEvent::InitialEventsEnd(_) => EventType::Bookmark,
        }
    }

    /// The resourceVersion the client learns from the event.
    #[cfg(test)]
    pub(crate) fn rv(&self) -> u64 {
        match self {
            WatchEvent::Object { object, rv, .. } => rv.unwrap_or_else(|| object.rv()),
            WatchEvent::Bookmark(rv) | WatchEvent::InitialEventsEnd(rv) => *rv,
        }
    }

    /// Writes `{"type":"ADDED","object":{...}}` and a newline, the object's bytes in place.
    /// Several small writes: the caller's writer should buffer, and flush per batch.
    pub(crate) fn write_line(&self, w: &mut dyn Write, cache: &WatchCache) -> io::Result<()> {
        let resource = cache.resource();
        write!(w, "{{\"type\":\"{}\",\"object\":", self.kind().as_str())?;
        match self {
            WatchEvent::Object { object, rv, .. } => object.write_typed(w, resource, *rv)?,
            WatchEvent::Bookmark(rv) | WatchEvent::InitialEventsEnd(rv) => {
                w.write_all(b"{\"kind\":")?;
                super::object::write_json_str(w, &resource.kind)?;
                w.write_all(b",\"apiVersion\":")?;
                super::object::write_json_str(w, &resource.gvr.api_version())?;
                write!(
                    w,
                    ",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"creationTimestamp\":null"
                )?;
                if matches!(self, WatchEvent::InitialEventsEnd(_)) {
                    w.write_all(b",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}")?;
                }
                w.write_all(b"}}")?;
            }
        }
        w.write_all(b"}\n")
    }
}

/// `{"type":"ERROR","object":<Status>}` and a newline: how the apiserver ends a watch it
/// cannot serve after the 200 (a 410 for a resourceVersion too old).
pub(crate) fn error_event_line(status: &Status) -> Vec<u8> {
    let mut line = Vec::new();
    push_event_line(&mut line, "ERROR", &status.to_json());
    line
}

/// Appends `{"type":<kind>,"object":<object>}` and a newline: one watch event's line, as
/// [`WatchEvent::write_line`] writes it, of an object already in its JSON form.
pub(crate) fn push_event_line(out: &mut Vec<u8>, kind: &str, object: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
}

/// What [`Watcher::next`] found.
#[derive(Debug)]
pub(crate) enum WatchNext {
    /// Events for this client, in order; never empty.
    Events(Vec<WatchEvent>),
    /// Nothing for this client within the timeout (a time to send a bookmark).
    Idle,
}

/// One client's watch: a cursor into the cache's history and its filter.
pub(crate) struct Watcher {
    cache: WatchCache,
    namespace: Option<String>,
    selectors: Selectors,
    /// Sequence number of the next history event to read.
    cursor: u64,
    /// The cache's generation when the watch began.
    generation: u64,
    /// Every event up to this resourceVersion has been handed out.
    rv: u64,
    /// Synthetic ADDED events still to hand out (a watch from "now").
    initial: VecDeque<Object>,
    /// `sendInitialEvents=true`: the resourceVersion of the annotated BOOKMARK still to send
    /// after `initial`.
    initial_end: Option<u64>,
}

impl WatchCache {
    /// Starts a watch at `resource_version` without `sendInitialEvents`: see
    /// [`WatchCache::watch_from`].
    #[cfg(test)]
    pub(crate) fn watch(
        &self,
        resource_version: Option<&str>,
        namespace: Option<&str>,
        selectors: Selectors,
    ) -> Result<Watcher, Status> {
        self.watch_from(resource_version, None, namespace, selectors)
    }

    /// Starts a watch at `resource_version` with `sendInitialEvents` as given (the caller
    /// validated it with `allowWatchBookmarks` and `resourceVersionMatch`). What the
    /// apiserver's cacher (`watchCache.getAllEventsSinceLocked`) sends, and so this:
    ///
    /// | sendInitialEvents | resourceVersion | sent |
    /// |---|---|---|
    /// | unset | unset, "", "0" | the current objects as ADDED, then what follows |
    /// | unset or false | N | the events after N (410 before the history) |
    /// | false | unset, "", "0" | what follows from now, no initial state |
    /// | true | unset, "", "0", N | once the cache is at N (NotOlderThan), the current objects as ADDED, a BOOKMARK annotated `k8s.io/initial-events-end: "true"` at their resourceVersion, then what follows |
    ///
    /// (With RV unset and `true` the apiserver first reads etcd's current revision, a
    /// consistent read; the cache serves what it holds, as it does for a list at "0".)
    /// Refusals: 429 while warming, 400 for a bad selector or resourceVersion, 410 (the
    /// apiserver's "too old resource version: X (Y)") before the history or at a
    /// resourceVersion several history events share (a relist's deletions: a client
    /// resuming there may have seen only some of them, and skipping the rest would leave it
    /// ghosts), 504 with the `ResourceVersionTooLarge` cause when the cache does not reach a
    /// newer one within [`super::CacheOptions::fresh_wait`].
    pub(crate) fn watch_from(
        &self,
        resource_version: Option<&str>,
        send_initial_events: Option<bool>,
        namespace: Option<&str>,
        selectors: Selectors,
    ) -> Result<Watcher, Status> {
        self.inner.resource.check_selectors(&selectors)?;
        let from = match resource_version {
            None | Some("" | "0") => None,
            Some(text) => Some(parse_rv(text).ok_or_else(|| {
                Status::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        };
        let namespace = namespace.filter(|ns| !ns.is_empty()).map(str::to_owned);
        let state = self.fresh_state(from, self.inner.options.fresh_wait)?;
        let mut watcher = Watcher {
            cache: self.clone(),
            namespace,
            selectors,
            cursor: state.end_seq(),
            generation: state.generation,
            rv: state.rv,
            initial: VecDeque::new(),
            initial_end: None,
        };
        match (send_initial_events, from) {
            (Some(true), _) | (None, None) => {
                let resource = &self.inner.resource;
                watcher.initial = state
                    .objects
                    .iter()
                    .filter(|o| {
                        selected(
                            o,
                            watcher.namespace.as_deref(),
                            &watcher.selectors,
                            resource,
                        )
                    })
                    .cloned()
                    .collect();
                if send_initial_events == Some(true) {
                    watcher.initial_end = Some(state.rv);
                }
            }
            // From now: the cursor is at the history's end.
            (Some(false), None) => {}
            (_, Some(rv)) => {
                if rv < state.start_rv {
                    return Err(too_old(rv, state.start_rv));
                }
                let skip = state.history.partition_point(|e| e.rv <= rv);
                if skip >= 2 && state.history.get(skip - 2).is_some_and(|e| e.rv == rv) {
                    return Err(Status::expired(format!(
                        "too old resource version: {rv} ({rv}): several events share it"
                    )));
                }
                watcher.cursor = state.first_seq + skip as u64;
                if skip < state.history.len() {
                    watcher.rv = rv;
                }
            }
        }
        Ok(watcher)
    }
}

/// The apiserver's 410 for a watch before the history.
fn too_old(rv: u64, oldest: u64) -> Status {
    Status::expired(format!("too old resource version: {rv} ({oldest})"))
}

impl Watcher {
    /// The next events for this client, waiting up to `timeout` for one. Ends the watch
    /// with 410 when the client fell behind the history (too slow to read, or the cache was
    /// reset): the client relists, as after the apiserver ends a watch.
    pub(crate) fn next(&mut self, timeout: Duration) -> Result<WatchNext, Status> {
        let options = &self.cache.inner.options;
        if !self.initial.is_empty() || self.initial_end.is_some() {
            let n = self.initial.len().min(options.max_batch);
            let mut events: Vec<WatchEvent> = self
                .initial
                .drain(..n)
                .map(|object| WatchEvent::Object {
                    kind: EventType::Added,
                    object,
                    rv: None,
                })
                .collect();
            if self.initial.is_empty()
                && let Some(rv) = self.initial_end.take()
            {
                events.push(WatchEvent::InitialEventsEnd(rv));
            }
            return Ok(WatchNext::Events(events));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let batch = {
                let inner = &self.cache.inner;
                let mut state = lock(&inner.state);
                loop {
                    if state.generation != self.generation || self.cursor < state.first_seq {
                        return Err(too_old(self.rv, state.start_rv));
                    }
                    if self.cache.feeder_failing() {
                        return Err(Status::expired(
                            "the node-local cache has lost its feed from the cloud; list again",
                        ));
                    }
                    if self.cursor < state.end_seq() {
                        break;
                    }
                    self.rv = state.rv;
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(WatchNext::Idle);
                    }
                    state = inner
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                // The cursor lies within the history (checked above).
                let from = usize::try_from(self.cursor - state.first_seq).unwrap_or(usize::MAX);
                // A run of events sharing one resourceVersion (a relist's deletions) is never
                // cut: a client resuming from it would skip the rest (see `watch_from`).
                let mut to = from.saturating_add(options.max_batch.max(1));
                while to < state.history.len()
                    && state.history.get(to).map(|e| e.rv)
                        == state.history.get(to - 1).map(|e| e.rv)
                {
                    to += 1;
                }
                let to = to.min(state.history.len());
                let batch: Vec<Event> = state.history.range(from..to).cloned().collect();
                self.cursor += batch.len() as u64;
                self.rv = if self.cursor == state.end_seq() {
                    state.rv
                } else {
                    batch.last().map_or(self.rv, |e| e.rv)
                };
                batch
            };
            // Filtered after the lock is released: events are immutable and shared.
            let events: Vec<WatchEvent> = batch.iter().filter_map(|e| self.convert(e)).collect();
            if !events.is_empty() {
                return Ok(WatchNext::Events(events));
            }
            if Instant::now() >= deadline {
                return Ok(WatchNext::Idle);
            }
        }
    }

    /// A BOOKMARK at the resourceVersion up to which this client has every event, valid
    /// once the events [`Watcher::next`] returned are written; `None` while synthetic ADDED
    /// events are still to come (the bookmark would claim them).
    pub(crate) fn bookmark(&self) -> Option<WatchEvent> {
        (self.initial.is_empty() && self.initial_end.is_none())
            .then_some(WatchEvent::Bookmark(self.rv))
    }

    /// The resourceVersion up to which this client has every event.
    #[cfg(test)]
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    /// One history event as this client sees it (`cacheWatcher.convertToWatchEvent`): an
    /// object that starts matching is ADDED, one that stops matching is DELETED with its
    /// last matching state and the event's resourceVersion; `None` when neither state
    /// matches.
    fn convert(&self, e: &Event) -> Option<WatchEvent> {
        let resource = &self.cache.inner.resource;
        let passes = |o: &Object| selected(o, self.namespace.as_deref(), &self.selectors, resource);
        let now = e.kind != EventType::Deleted && passes(&e.object);
        let before = e.prev.as_ref().is_some_and(passes);
        let (kind, object, rv) = match (now, before) {
            (false, false) => return None,
            (true, false) => (EventType::Added, e.object.clone(), None),
            (true, true) => (EventType::Modified, e.object.clone(), None),
            (false, true) if e.kind == EventType::Deleted => (
                EventType::Deleted,
                e.object.clone(),
                e.splice_rv.then_some(e.rv),
            ),
            (false, true) => (EventType::Deleted, e.prev.clone()?, Some(e.rv)),
        };
        Some(WatchEvent::Object { kind, object, rv })
    }
}
