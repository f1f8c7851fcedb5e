//! Node-level traffic reuse (YurtHub's `pkg/yurthub/multiplexer`; edge mode): every list and watch
//! of a pool-scope resource from a local client is answered from the one watch cache of that
//! resource (`watchcache/`, fed by `clients::pool_watch`), not forwarded to the cloud per
//! client.
//!
//! Design decisions:
//!
//! - **Who is served**: what `pool::PoolScope::resolve` calls `Local` — a list or watch of
//!   a pool-scope collection (or a watch of one of its objects) from any client but this
//!   hub's own multiplexer, whose requests go on to the cloud. Only JSON is served: a
//!   client that takes only protobuf, or asks for a Table, is forwarded as before.
//! - **Warming**: until the first list, YurtHub's 429 with `Retry-After: 1`; but when the
//!   cloud is unreachable and the cache was never filled, the request takes the ordinary
//!   path, which answers from the disk cache (`Hub::handle`).
//! - **Offline, once filled**: the cache keeps serving what it holds; the feeder resumes
//!   when the cloud is back. The objects are at most as old as the last event received,
//!   which is what the disk cache would answer too.
//! - **Frozen or too large**: a filled cache whose feeder gets only unusable answers from a
//!   cloud that does answer (3 in a row: a 403, a 5xx, garbage) ends its watches with 410
//!   and is forwarded until the feeder recovers (`WatchCache::feeder_failing`); a resource
//!   whose list is past `CacheOptions::max_list_bytes` is forwarded (`list_paused`).
//! - **Filters per client, shared objects untouched**: the answer is written as the
//!   apiserver would send it and, when `Filters` has a chain for this client, passed through
//!   the relay's own filter stage (`stream::FilterStage`), which decodes its own copy of
//!   each object: the cache's bytes are never changed, and each client gets what a
//!   forwarded answer would have given it.
//! - **The disk cache still gets the client's answer**: when the route caches the request
//!   (a cache agent's list or watch), what the client got is teed to the writer as the
//!   relay's tee would, so offline answers after a restart (the memory cache is empty then)
//!   still have it.
//! - **Watch-list** (`sendInitialEvents`, client-go's WatchListClient): validated as the
//!   apiserver does (422 unless `allowWatchBookmarks=true` and
//!   `resourceVersionMatch=NotOlderThan`), then served as its cacher serves it: the table is
//!   at `WatchCache::watch_from`.
//! - **Streaming**: a list page is chosen under the cache's lock as shared objects and
//!   written in writes of about 32 KiB (chunked); a watch writes each batch of events as one
//!   chunk, ends at `timeoutSeconds` (else a random 300–600 s), and notices a client that
//!   hung up within a second while idle (a busy one by its failed writes).
//!
//! - **The endpoints overlay** (issue 30, [`LocalOverlay`]): EndpointSlices and Endpoints
//!   go out rewritten to this node's pods as kubelet reports them offline, per local
//!   client, before its filters: a list's items, each watch event's object
//!   ([`WatchView::outgoing`]), and at an idle tick where the overlay moved (or the first),
//!   a MODIFIED of each object in the watch's scope whose bytes differ from what the client
//!   was last sent ([`WatchView::pass`]; after the drop, the cloud's object again). A pass
//!   reads the cache as it is at that idle tick, not as the client holds it: an event that
//!   arrives meanwhile can go out twice (its object in the pass, then the event itself), or
//!   a pass can modify an object whose ADDED is still to come; client-go's informers take
//!   both. The cache's objects and history stay the cloud's; rewritten bytes never reach
//!   the disk cache: a list with one goes untee'd, a rewritten event goes to the client
//!   only and the cloud's line of it to the disk cache's session only, and a pass goes to
//!   the client only ([`TeeMode`]). The multiplexer's followers never get the overlay.
//!
//! - **How old**: every answer, to a local client or a follower, says how long ago the cache
//!   last heard the cloud's word (`X-Tinyhub-Cache-Age: <seconds>`, left off before the
//!   first), and what it tees to the disk cache is as old as that, not as of now
//!   ([`word_of`]): a disk copy of a stale pool cache never looks fresh.
//!
//! Memory: one `Vec` of object handles per list page (a pointer and a length per object)
//! and one batch buffer per watch (its events' bytes, at most [`BATCH_KEEP`] kept between
//! batches: a leader serves a watch per follower); the objects themselves are shared. A
//! pass holds the scope's handles and one object's bytes at a time, and writes its events
//! in batches of about [`PASS_FLUSH`].

use std::borrow::Cow;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cache::decode::BodyShape;
use crate::cache::synced::Word;
use crate::cache::writer::Session;
use crate::filters::body::{BodyFilter, StageTime};
use crate::filters::{Chain, Filters};
use crate::link::{LINK, Tally};
use crate::offline::json_head;
use crate::overlay::{CloudState, EndpointKind, Overlay, Snapshot, WatchView};
use crate::request::{ApiRequest, Query, Verb};
use crate::route;
use crate::selector::Selectors;
use crate::server::{BodyWriter, Exchange, Length};
use crate::status::Status;
use crate::stream::{FilterStage, Sink, SinkWrite, Stop, Tee, TeeMode, ToClient, Uncached};
use crate::upstream::Cloud;
use crate::watchcache::{
    EventType, ListRequest, WATCH_SECONDS, WatchCache, WatchEvent, WatchNext, Watcher,
    error_event_line, push_event_line,
};

/// How long a watch waits for events before it looks whether its client hung up.
const WATCH_TICK: Duration = Duration::from_secs(1);
/// A watch that asked for bookmarks gets one after this long without one (the apiserver's
/// cacher sends them about every minute).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// Bytes of a pass's MODIFIED events gathered before a write.
const PASS_FLUSH: usize = 32 << 10;

/// The endpoints overlay as the answers to local clients apply it (never the multiplexer's
/// followers: another node's hub gets the cloud's objects).
pub(crate) struct LocalOverlay<'o> {
    /// The overlay.
    pub overlay: &'o Overlay,
    /// The cloud, whose state each snapshot is taken with: the overlay is dropped while a
    /// server is usable, and once the cloud came back since its outage began.
    pub cloud: &'o dyn Cloud,
}

impl LocalOverlay<'_> {
    /// What to serve now.
    fn snapshot(&self) -> Arc<Snapshot> {
        self.overlay.snapshot(CloudState {
            recoveries: self.cloud.recoveries(),
            usable: self.cloud.any_healthy(),
        })
    }
}

/// Answers the list or watch `req` from `cache` (ready); the HTTP status sent. `shutdown`
/// ends a watch when the hub stops. `session`, when the route caches the answer for this
/// client, gets what the client gets, as the relay's tee gives it a forwarded answer: the
/// disk cache keeps serving this client offline after a restart. `overlaid`, for a local
/// client, applies the endpoints overlay to the kinds it rewrites, and marks the answer as a
/// local client's (counted as pool-saved on the link). A leader's multiplexer port calls it
/// too, with neither filters, session nor overlay.
pub(crate) fn answer(
    cache: &WatchCache,
    filters: Option<&Filters>,
    overlaid: Option<&LocalOverlay<'_>>,
    ex: Exchange<'_>,
    req: &ApiRequest,
    shutdown: &dyn Fn() -> bool,
    session: Option<Session>,
) -> u16 {
    let chain = filters.map_or(Chain::EMPTY, |f| f.chain_for(req));
    let filter = filters.filter(|_| !chain.is_empty()).map(|f| (f, chain));
    let selectors = match selectors_of(req) {
        Ok(selectors) => selectors,
        Err(status) => return refuse(ex, &status),
    };
    let query = &req.query;
    if let Err(status) = validate(query, req.verb == Verb::Watch) {
        return refuse(ex, &status);
    }
    let r = req.resource();
    let namespace = r.and_then(|r| r.namespace.as_deref());
    // A follower's answer is the leader's to count; a local one the link's. The caller says
    // which: only a local client's answer has the overlay (the multiplexer passes none),
    // whatever port it came in on.
    let local = overlaid.is_some();
    let overlaid = overlaid
        .filter(|o| o.overlay.enabled())
        .zip(EndpointKind::of(&cache.resource().gvr));
    match req.verb {
        Verb::Watch => {
            let rv = req.query.resource_version.as_deref();
            let overlay = overlaid.map(|(overlaid, kind)| ScopedView {
                overlaid,
                view: WatchView::new(kind),
                namespace,
                selectors: selectors.clone(),
            });
            match cache.watch_from(rv, query.send_initial_events, namespace, selectors) {
                Ok(watcher) => {
                    // 0 means unset, as the apiserver reads it (an instant end would spin).
                    let timeout = req.query.timeout_seconds.filter(|&t| t > 0).map_or_else(
                        || {
                            Duration::from_secs(crate::random_between(
                                WATCH_SECONDS.0,
                                WATCH_SECONDS.1,
                            ))
                        },
                        Duration::from_secs,
                    );
                    let how = WatchHow {
                        bookmarks: query.allow_watch_bookmarks,
                        timeout,
                        shutdown,
                    };
                    stream_watch(cache, watcher, ex, filter, &how, session, overlay)
                }
                // Before the 200, with the apiserver's own status. The cacher sends a 410 as
                // an ERROR event after a 200 instead (`newErrWatcher`); client-go's reflector
                // relists on either.
                Err(status) => refuse(ex, &status),
            }
        }
        _ => {
            // YurtHub reads an absent or empty resourceVersion as "0": from the cache.
            let rv = match req.query.resource_version.as_deref() {
                None | Some("") => "0",
                Some(rv) => rv,
            };
            let list = ListRequest {
                resource_version: Some(rv),
                namespace,
                selectors: &selectors,
                limit: req.query.limit,
                continue_token: req.query.continue_token.as_deref(),
                exact: query.resource_version_match.as_deref() == Some("Exact"),
            };
            match cache.list(&list) {
                Ok(page) => {
                    let age = age_of(cache);
                    let head = json_head(age.as_deref());
                    let Ok(writer) = ex.start(200, &head, Length::Streamed) else {
                        return 200;
                    };
                    // Read again only while the overlay holds pods.
                    let rewritten = overlaid
                        .map(|(o, kind)| (o.snapshot(), kind))
                        .filter(|(snapshot, _)| snapshot.active())
                        .and_then(|(snapshot, kind)| {
                            let mut written = Vec::new();
                            page.write_to(&mut written).ok()?;
                            rewrite_page(&written, &snapshot, kind)
                        });
                    // Rewritten items are never the disk cache's: none of this list is kept.
                    let session = match (session, &rewritten) {
                        (Some(s), Some(_)) => {
                            s.finish(false);
                            None
                        }
                        (session, _) => session,
                    };
                    let mut sink = to_client(writer, filter, route::body_shape(req), session);
                    let mut out = Tally::new(SinkWrite(&mut sink));
                    let sent = match &rewritten {
                        Some(body) => out.write_all(body),
                        None => page.write_to(&mut out),
                    };
                    if local {
                        let (component, resource) =
                            (req.component.as_str(), &cache.resource().gvr.resource);
                        LINK.pool_served(component, resource, "list", out.bytes);
                    }
                    match sent.map_err(Stop::Gone).and_then(|()| sink.finish()) {
                        Ok(()) => {}
                        // The client sees a broken answer rather than a short valid one, and
                        // nothing partial is cached.
                        Err(e) => {
                            log::debug!("a pool-cache list was not sent whole: {e}");
                            sink.abort();
                        }
                    }
                    200
                }
                Err(status) => refuse(ex, &status),
            }
        }
    }
}

/// How long ago `cache` last heard the cloud, in whole seconds, for an answer's head.
fn age_of(cache: &WatchCache) -> Option<String> {
    cache.synced_age().map(|age| age.as_secs().to_string())
}

/// The disk cache's word for what a session teed from `cache` holds: as of the cache's own
/// last sync, read as each part is applied.
pub(crate) fn word_of(cache: &WatchCache) -> Word {
    let cache = cache.clone();
    Word::Relayed(Arc::new(move || {
        crate::watchcache::series::last_sync_unix(&cache)
    }))
}

/// How a watch is served.
struct WatchHow<'s> {
    /// The client asked for bookmarks.
    bookmarks: bool,
    /// When it ends.
    timeout: Duration,
    /// True once the hub is stopping.
    shutdown: &'s dyn Fn() -> bool,
}

/// A watch's view of the endpoints overlay, with the watch's scope for the passes.
struct ScopedView<'o> {
    overlaid: &'o LocalOverlay<'o>,
    view: WatchView,
    namespace: Option<&'o str>,
    selectors: Selectors,
}

/// Streams a watch until its time, the client's leaving, shutdown, or the cache ending it.
fn stream_watch(
    cache: &WatchCache,
    mut watcher: Watcher,
    ex: Exchange<'_>,
    filter: Option<(&Filters, Chain)>,
    how: &WatchHow<'_>,
    session: Option<Session>,
    mut overlay: Option<ScopedView<'_>>,
) -> u16 {
    let WatchHow {
        bookmarks,
        timeout,
        shutdown,
    } = *how;
    let age = age_of(cache);
    let head = json_head(age.as_deref());
    let Ok(writer) = ex.start(200, &head, Length::Streamed) else {
        return 200;
    };
    let started = Instant::now();
    let mut last_bookmark = started;
    let mut batch = Vec::new();
    let mut sink = to_client(writer, filter, BodyShape::WatchStream, session);
    let mut out = SinkWrite(&mut sink);
    let ended = loop {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() || shutdown() {
            break true;
        }
        batch.clear();
        match watcher.next(left.min(WATCH_TICK)) {
            Ok(WatchNext::Events(events)) => {
                let overlaid = overlay
                    .as_mut()
                    .map(|o| (o.overlaid.snapshot(), o))
                    // Online, and offline until kubelet reports a pod, events go as they are.
                    .filter(|(snapshot, o)| !o.view.passes_through(snapshot));
                match overlaid {
                    Some((snapshot, overlay)) => {
                        let written =
                            overlaid_lines(&events, cache, overlay, &snapshot, &mut batch, out.0);
                        if let Err(e) = written {
                            log::debug!("a pool-cache watch client went away: {e:?}");
                            break false;
                        }
                    }
                    None => {
                        for event in &events {
                            // Writing to a Vec cannot fail.
                            let _ = event.write_line(&mut batch, cache);
                        }
                    }
                }
            }
            Ok(WatchNext::Idle) => {
                // The client has every event: the objects in its scope are what it holds.
                if let Some(overlay) = overlay.as_mut() {
                    let snapshot = overlay.overlaid.snapshot();
                    if overlay.view.pass_due(&snapshot)
                        && let Err(e) = write_pass(cache, overlay, &snapshot, out.0)
                    {
                        log::debug!("a pool-cache watch client went away: {e:?}");
                        break false;
                    }
                }
                let due = bookmarks && last_bookmark.elapsed() >= BOOKMARK_EVERY;
                if let Some(bookmark) = watcher.bookmark().filter(|_| due) {
                    let _ = bookmark.write_line(&mut batch, cache);
                    last_bookmark = Instant::now();
                }
                if batch.is_empty() {
                    let client = out.0.inner_mut().inner_mut();
                    if client.client_gone(Duration::from_millis(1)) {
                        break false;
                    }
                    continue;
                }
            }
            // After the 200, as the apiserver does: an ERROR event, then the end.
            Err(status) => {
                let _ = out.write_all(&error_event_line(&status));
                break true;
            }
        }
        if let Err(e) = out.write_all(&batch) {
            log::debug!("a pool-cache watch client went away: {e}");
            break false;
        }
        give_back(&mut batch);
    };
    // The cache keeps whole events either way. The filter stage is not finished: that only
    // checks that the stream did not end inside an event, and every event is written whole.
    let tee = sink.inner_mut();
    tee.end_session(ended);
    if ended {
        let _ = tee.inner_mut().finish();
    }
    200
}

/// The way to a pool-cache answer's client, through its filters and the tee; `C` is the
/// client's end (a [`ToClient`] but in tests).
type Through<'f, C> = FilterStage<'f, Tee<'f, C>>;

/// Appends `events` to `batch` as event lines, each object through the watch's overlay
/// view. An event it rewrites goes out at once, after the batch so far: the rewritten line
/// to the client only, then the cloud's line to the disk cache's session only, each whole
/// and through the same filters, so the disk cache keeps the cloud's object.
fn overlaid_lines<C: Sink>(
    events: &[WatchEvent],
    cache: &WatchCache,
    overlay: &mut ScopedView<'_>,
    snapshot: &Snapshot,
    batch: &mut Vec<u8>,
    sink: &mut Through<'_, C>,
) -> Result<(), Stop> {
    let mut object_bytes = Vec::new();
    let mut line = Vec::new();
    for event in events {
        let WatchEvent::Object { kind, object, rv } = event else {
            // Writing to a Vec cannot fail.
            let _ = event.write_line(batch, cache);
            continue;
        };
        object_bytes.clear();
        let _ = object.write_typed(&mut object_bytes, cache.resource(), *rv);
        let deleted = *kind == EventType::Deleted;
        match overlay.view.outgoing(snapshot, deleted, &object_bytes) {
            Cow::Borrowed(bytes) => push_event_line(batch, kind.as_str(), bytes),
            Cow::Owned(rewritten) => {
                // (An empty write would end the chunked answer.)
                if !batch.is_empty() {
                    sink.write(batch)?;
                    batch.clear();
                }
                line.clear();
                push_event_line(&mut line, kind.as_str(), &rewritten);
                write_as(sink, TeeMode::ClientOnly, &line)?;
                line.clear();
                push_event_line(&mut line, kind.as_str(), &object_bytes);
                write_as(sink, TeeMode::SessionOnly, &line)?;
            }
        }
    }
    Ok(())
}

/// One pass of the watch's overlay view over the cache's objects in its scope, as the
/// client holds them now (the events before are all written): the MODIFIED events it calls
/// for, written to the client only as they are found, in batches of about [`PASS_FLUSH`].
/// The objects are the ADDED events a watch from "now" starts with (the current objects,
/// shared handles, before any history), each written out through one reused buffer; none
/// are read when the pass can send nothing.
fn write_pass<C: Sink>(
    cache: &WatchCache,
    overlay: &mut ScopedView<'_>,
    snapshot: &Snapshot,
    sink: &mut Through<'_, C>,
) -> Result<(), Stop> {
    let Some(mut pass) = overlay.view.pass(snapshot) else {
        return Ok(());
    };
    let Ok(mut lister) = cache.watch_from(None, None, overlay.namespace, overlay.selectors.clone())
    else {
        return Ok(());
    };
    let mut object_bytes = Vec::new();
    let mut lines = Vec::new();
    // `bookmark` is None until the initial objects are all handed out.
    while lister.bookmark().is_none() {
        let Ok(WatchNext::Events(events)) = lister.next(Duration::ZERO) else {
            break;
        };
        for event in events {
            let WatchEvent::Object { object, rv, .. } = event else {
                continue;
            };
            object_bytes.clear();
            // Writing to a Vec cannot fail.
            let _ = object.write_typed(&mut object_bytes, cache.resource(), rv);
            if let Some(modified) = pass.object(&object_bytes) {
                push_event_line(&mut lines, EventType::Modified.as_str(), &modified);
            }
            if lines.len() >= PASS_FLUSH {
                write_as(sink, TeeMode::ClientOnly, &lines)?;
                lines.clear();
            }
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    write_as(sink, TeeMode::ClientOnly, &lines)
}

/// Writes whole event lines where `mode` says (the client only, or the disk cache's
/// session only), then lets the tee copy both ways again.
fn write_as<C: Sink>(sink: &mut Through<'_, C>, mode: TeeMode, lines: &[u8]) -> Result<(), Stop> {
    sink.inner_mut().set_mode(mode);
    let written = sink.write(lines);
    sink.inner_mut().set_mode(TeeMode::Both);
    written
}

/// A list page as `ListPage::write_to` wrote it, with its items rewritten by the overlay, in
/// the same form; None when the overlay rewrites none of them (the page is then written as
/// usual, and teed).
fn rewrite_page(written: &[u8], snapshot: &Snapshot, kind: EndpointKind) -> Option<Vec<u8>> {
    /// A page as `ListPage::write_to` writes it, its parts raw.
    #[derive(Deserialize)]
    struct Page<'a> {
        #[serde(borrow)]
        kind: &'a RawValue,
        #[serde(borrow, rename = "apiVersion")]
        api_version: &'a RawValue,
        #[serde(borrow)]
        metadata: &'a RawValue,
        #[serde(borrow)]
        items: Vec<&'a RawValue>,
    }
    let parsed: Page<'_> = serde_json::from_slice(written).ok()?;
    let items: Vec<Option<Vec<u8>>> = parsed
        .items
        .iter()
        .map(|item| snapshot.rewrite(kind, item.get().as_bytes()))
        .collect();
    if items.iter().all(Option::is_none) {
        return None;
    }
    let mut body = Vec::with_capacity(written.len() + 1024);
    body.extend_from_slice(b"{\"kind\":");
    body.extend_from_slice(parsed.kind.get().as_bytes());
    body.extend_from_slice(b",\"apiVersion\":");
    body.extend_from_slice(parsed.api_version.get().as_bytes());
    body.extend_from_slice(b",\"metadata\":");
    body.extend_from_slice(parsed.metadata.get().as_bytes());
    body.extend_from_slice(b",\"items\":[");
    for (i, (raw, rewritten)) in parsed.items.iter().zip(&items).enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(rewritten.as_deref().unwrap_or(raw.get().as_bytes()));
    }
    body.extend_from_slice(b"]}");
    Some(body)
}

/// What a watch's batch buffer keeps between batches: a few events' worth. A burst (256
/// EndpointSlices of 1-4 KiB) grows it to up to 1 MiB, which a leader with thirty followers'
/// watches would otherwise keep for each watch's life.
const BATCH_KEEP: usize = 16 << 10;

/// Empties a watch's batch buffer once written, keeping at most [`BATCH_KEEP`] of it.
fn give_back(batch: &mut Vec<u8>) {
    batch.clear();
    batch.shrink_to(BATCH_KEEP);
}

/// The way of a pool-cache answer to its client: through the client's filters when it has
/// any (the cache's bytes are never changed: the filter decodes its own copy), then the tee,
/// which gives the disk cache's session, if any, what the client got. A full queue abandons
/// the session (the writer drops it), as for a forwarded answer.
fn to_client<'f, 'c>(
    writer: BodyWriter<'c>,
    filter: Option<(&'f Filters, Chain)>,
    shape: BodyShape,
    session: Option<Session>,
) -> FilterStage<'f, Tee<'f, ToClient<'c>>> {
    let tee = Tee::new(ToClient::new(writer), session, &note_uncached);
    match filter {
        // The bytes are the cache's own JSON: one the scanner cannot decode is a bug, and the
        // answer is cut rather than sent unfiltered.
        Some((filters, chain)) => {
            let body = BodyFilter::new(shape, false, chain, &filters.ctx, filters.lookups.as_ref());
            FilterStage::new(tee, body, StageTime::new(chain), false)
        }
        None => FilterStage::none(tee),
    }
}

/// An object serde cannot read (the index could) went out unfiltered, as the relay sends it:
/// the client gets it, the disk cache does not.
fn note_uncached(why: &Uncached, copying: bool) {
    if let (Uncached::Unreadable(e), true) = (why, copying) {
        log::info!("a pool-cache answer is not cached: {e}");
    }
}

/// `metav1.ResourceVersionMatchNotOlderThan`.
const NOT_OLDER_THAN: &str = "NotOlderThan";

/// The apiserver's validation of a list's or watch's options (`ValidateListOptions`, with
/// the WatchList feature on): a watch with `sendInitialEvents` needs bookmarks and
/// `resourceVersionMatch=NotOlderThan`, which a watch may carry only with it; a list may not
/// carry `sendInitialEvents`. (Every value of it is a boolean, as the apiserver reads it:
/// `request::Query`.)
fn validate(query: &Query, watch: bool) -> Result<(), Status> {
    let rv_match = query.resource_version_match.as_deref();
    let mut forbidden: Vec<(&str, String)> = Vec::new();
    if !watch {
        if query.send_initial_events.is_some() {
            forbidden.push((
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list".to_owned(),
            ));
        }
    } else if query.send_initial_events.is_some() {
        if rv_match != Some(NOT_OLDER_THAN) {
            forbidden.push((
                "resourceVersionMatch",
                format!(
                    "sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
                ),
            ));
        }
        if !query.allow_watch_bookmarks {
            forbidden.push((
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true".to_owned(),
            ));
        }
    } else if rv_match.is_some() {
        forbidden.push((
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                .to_owned(),
        ));
    }
    if forbidden.is_empty() {
        return Ok(());
    }
    let pairs: Vec<(&str, &str)> = forbidden.iter().map(|(f, d)| (*f, d.as_str())).collect();
    Err(Status::invalid_list_options(&pairs))
}

/// The request's selectors; a watch of one object selects it by name.
fn selectors_of(req: &ApiRequest) -> Result<Selectors, Status> {
    let name = req.resource().and_then(|r| r.name.as_deref());
    let field = match (req.query.field_selector.as_deref(), name) {
        (Some(f), Some(n)) if !f.trim().is_empty() => Some(format!("{f},metadata.name={n}")),
        (_, Some(n)) => Some(format!("metadata.name={n}")),
        (f, None) => f.map(str::to_owned),
    };
    Selectors::parse(req.query.label_selector.as_deref(), field.as_deref())
        .map_err(|e| Status::bad_request(e.to_string()))
}

fn refuse(ex: Exchange<'_>, status: &Status) -> u16 {
    let _ = ex.send_status(status);
    status.code
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::request::classify;
    use crate::stream::tests::DiskCache;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn req(url: &str, ua: &str, accept: &str) -> ApiRequest {
        let headers = [
            ("User-Agent".to_owned(), ua.to_owned()),
            ("Accept".to_owned(), accept.to_owned()),
        ];
        classify("GET", url, &headers).unwrap()
    }

    /// A list page of slices goes out with the slice naming kubelet's pod rewritten and the
    /// others byte for byte as the cache holds them; with nothing overlaid, or no item
    /// rewritten, the page is written (and teed) as usual.
    #[test]
    fn a_list_page_is_rewritten_item_by_item_in_its_own_form() {
        let slice =
            |name: &str, pod: &str, ip: &str| String::from_utf8(slice(name, pod, ip, 500)).unwrap();
        let (web, db) = (
            slice("web-x", "web-a", "10.244.1.10"),
            slice("db-x", "db-a", "10.244.1.30"),
        );
        let page = format!(
            r#"{{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{{"resourceVersion":"600"}},"items":[{db},{web}]}}"#
        );
        let overlay = Overlay::new("n1", true);
        let kind = EndpointKind::Slice;
        assert_eq!(
            rewrite_page(
                page.as_bytes(),
                &overlay.snapshot(CloudState::down(0)),
                kind
            ),
            None
        );
        capture_web_a(&overlay, &web_a(), MOVED);
        let snapshot = overlay.snapshot(CloudState::down(0));
        let body = rewrite_page(page.as_bytes(), &snapshot, kind).expect("web-x rewritten");
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(list["kind"], "EndpointSliceList");
        assert_eq!(list["metadata"]["resourceVersion"], "600");
        assert_eq!(
            list["items"][1]["endpoints"][0]["addresses"][0],
            "10.244.1.20"
        );
        assert_eq!(list["items"][1]["metadata"]["resourceVersion"], "500");
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.contains(&db),
            "another pod's slice is the cache's bytes: {text}"
        );
        let only_db = page.replace(&format!(",{web}"), "");
        assert_eq!(rewrite_page(only_db.as_bytes(), &snapshot, kind), None);
    }

    /// A cloud reachable or not, as a test sets it, never back from an outage; never asked
    /// to send (the answers from the pool caches, and the multiplexer port's tests).
    #[derive(Debug, Default)]
    pub(crate) struct StubCloud {
        /// No server is usable.
        pub(crate) unreachable: AtomicBool,
    }

    impl StubCloud {
        /// A cloud that is down: no server usable.
        fn down() -> StubCloud {
            StubCloud {
                unreachable: AtomicBool::new(true),
            }
        }
    }

    impl Cloud for StubCloud {
        fn send(
            &self,
            _: crate::upstream::Outgoing<'_>,
        ) -> Result<crate::upstream::Answer, crate::upstream::UpstreamError> {
            Err(crate::upstream::UpstreamError::Transport {
                server: "https://cloud:6443".into(),
                detail: "not in this test".into(),
                timeout: false,
                maybe_sent: false,
            })
        }

        fn any_healthy(&self) -> bool {
            !self.unreachable.load(Ordering::Relaxed)
        }

        fn any_probed_healthy(&self) -> bool {
            self.any_healthy()
        }

        fn server(&self, _: usize) -> &str {
            "https://cloud:6443"
        }

        fn healthy(&self, _: usize) -> bool {
            self.any_healthy()
        }

        fn recoveries(&self) -> u64 {
            0
        }
    }

    /// An end that keeps what reached it, and the length of each write.
    #[derive(Default)]
    struct Kept(Vec<u8>, Vec<usize>);

    impl Sink for Kept {
        fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
            self.0.extend_from_slice(data);
            self.1.push(data.len());
            Ok(())
        }
        fn finish(&mut self) -> Result<(), Stop> {
            Ok(())
        }
        fn abort(&mut self) {}
        fn uncache(&mut self, _: Uncached) -> Result<(), Stop> {
            Ok(())
        }
    }

    /// A slice `name` of namespace `default` at `rv` with one endpoint, pod `pod` of node
    /// n1 at `ip`, as a list item.
    fn slice(name: &str, pod: &str, ip: &str, rv: u64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string()},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "n1",
                "targetRef": {"kind": "Pod", "namespace": "default", "name": pod, "uid": "u-".to_owned() + pod}}]
        }))
        .unwrap()
    }

    /// kubelet's cached pod web-a of node n1 at 10.244.1.10, Ready.
    fn web_a() -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-a", "namespace": "default", "uid": "u-web-a"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.244.1.10", "podIPs": [{"ip": "10.244.1.10"}],
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    /// kubelet's merge patch `body` of web-a, offline.
    fn capture_web_a(overlay: &Overlay, cached: &[u8], body: &[u8]) {
        use crate::overlay::{Capture, PodWrite};
        overlay.capture(
            Capture {
                by_node_kubelet: true,
                namespace: "default",
                name: "web-a",
                write: PodWrite::Patch {
                    content_type: "application/merge-patch+json",
                    body,
                },
                cached_pod: Some(cached),
            },
            CloudState::down(0),
        );
    }

    const MOVED: &[u8] = br#"{"status":{"podIP":"10.244.1.20","podIPs":[{"ip":"10.244.1.20"}]}}"#;

    /// A watch cache of EndpointSlices holding `slices` (list items) at resourceVersion 500.
    fn slices_cache(slices: impl IntoIterator<Item = Vec<u8>>) -> WatchCache {
        use crate::watchcache::{CacheOptions, Resource};
        let cache = WatchCache::new(Resource::endpointslices(), CacheOptions::default());
        let objects = slices
            .into_iter()
            .map(|bytes| cache.parse(&bytes).unwrap())
            .collect();
        cache.replace("500", objects).unwrap();
        cache
    }

    /// The view of a watch of every slice, through `overlaid`.
    fn every_slice<'a>(overlaid: &'a LocalOverlay<'a>) -> ScopedView<'a> {
        ScopedView {
            overlaid,
            view: WatchView::new(EndpointKind::Slice),
            namespace: None,
            selectors: Selectors::everything(),
        }
    }

    /// A pass over a scope larger than a batch writes its events as it finds them, in
    /// writes of about [`PASS_FLUSH`], never the scope's events at once.
    #[test]
    fn a_pass_writes_its_events_in_batches() {
        let cache = slices_cache(
            (0..300).map(|i| slice(&format!("web-{i:03}"), "web-a", "10.244.1.10", 500)),
        );
        let overlay = Overlay::new("n1", true);
        capture_web_a(&overlay, &web_a(), MOVED);
        let overlaid = LocalOverlay {
            overlay: &overlay,
            cloud: &StubCloud::down(),
        };
        let mut scoped = every_slice(&overlaid);
        let mut sink = FilterStage::none(Tee::new(Kept::default(), None, &note_uncached));
        let snapshot = overlaid.snapshot();
        write_pass(&cache, &mut scoped, &snapshot, &mut sink).unwrap();
        let Kept(bytes, writes) = std::mem::take(sink.inner_mut().inner_mut());
        let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
        assert_eq!(lines.count(), 300, "every slice once");
        assert!(writes.len() >= 3, "{writes:?}");
        let line = bytes.len() / 300 + 1;
        assert!(writes.iter().all(|&w| w < PASS_FLUSH + line), "{writes:?}");
    }

    /// Issue 30, with the overlay active: a cloud event the overlay rewrites reaches the
    /// client rewritten, in its place among the batch's events, and the disk cache's session
    /// as the cloud sent it; a pass's MODIFIED reaches the client only. The disk cache keeps
    /// the cloud's objects throughout.
    #[test]
    fn a_rewritten_watch_event_reaches_the_disk_cache_as_the_clouds() {
        use serde_json::{Value, json};

        let cache = slices_cache([slice("web-x", "web-a", "10.244.1.10", 500)]);
        let parsed = |bytes: &[u8]| cache.parse(bytes).unwrap();

        let overlay = Overlay::new("n1", true);
        let cached = web_a();
        let capture = |body: &[u8]| capture_web_a(&overlay, &cached, body);
        capture(MOVED);
        let overlaid = LocalOverlay {
            overlay: &overlay,
            cloud: &StubCloud::down(),
        };
        let mut scoped = every_slice(&overlaid);

        let mut disk = DiskCache::open("pool-local-overlay-tee");
        let session = disk.session();
        let mut sink = FilterStage::none(Tee::new(Kept::default(), session, &note_uncached));

        // A batch: another slice, the slice the overlay rewrites (the cloud moved it to rv
        // 501, still at the old IP), another slice.
        let event = |kind: EventType, bytes: Vec<u8>| WatchEvent::Object {
            kind,
            object: parsed(&bytes),
            rv: None,
        };
        let events = [
            event(EventType::Added, slice("db-x", "db-a", "10.244.2.30", 501)),
            event(
                EventType::Modified,
                slice("web-x", "web-a", "10.244.1.10", 502),
            ),
            event(EventType::Added, slice("db-y", "db-b", "10.244.2.31", 503)),
        ];
        let snapshot = overlaid.snapshot();
        assert!(snapshot.active());
        let mut batch = Vec::new();
        overlaid_lines(
            &events,
            &cache,
            &mut scoped,
            &snapshot,
            &mut batch,
            &mut sink,
        )
        .unwrap();
        sink.write(&batch).unwrap();

        // kubelet reports web-a unready: the idle tick's pass sends the slice again.
        capture(br#"{"status":{"podIP":"10.244.1.20","podIPs":[{"ip":"10.244.1.20"}],"conditions":[{"type":"Ready","status":"False"}]}}"#);
        let snapshot = overlaid.snapshot();
        assert!(scoped.view.pass_due(&snapshot));
        write_pass(&cache, &mut scoped, &snapshot, &mut sink).unwrap();

        let tee = sink.inner_mut();
        assert!(tee.session_intact());
        tee.end_session(true);
        let lines: Vec<Value> = tee
            .inner_mut()
            .0
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            .collect();
        let seen: Vec<(&str, &str, &str, &Value)> = lines
            .iter()
            .map(|e| {
                let o = &e["object"];
                (
                    e["type"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap(),
                    o["endpoints"][0]["addresses"][0].as_str().unwrap(),
                    &o["endpoints"][0]["conditions"]["ready"],
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("ADDED", "db-x", "10.244.2.30", &json!(true)),
                ("MODIFIED", "web-x", "10.244.1.20", &json!(true)),
                ("ADDED", "db-y", "10.244.2.31", &json!(true)),
                ("MODIFIED", "web-x", "10.244.1.20", &json!(false)),
            ],
            "what the client got, in order"
        );
        assert_eq!(
            lines[1]["object"]["metadata"]["resourceVersion"], "502",
            "the cloud's resourceVersion"
        );

        disk.write_out();
        let stored = |name: &str| -> Option<Value> {
            let bytes = disk.stored("default", name)?;
            Some(serde_json::from_slice(&bytes).unwrap())
        };
        let web = stored("web-x").expect("the cloud's event of web-x reached the disk cache");
        assert_eq!(web["endpoints"][0]["addresses"][0], "10.244.1.10");
        assert_eq!(web["endpoints"][0]["conditions"]["ready"], true);
        assert_eq!(web["metadata"]["resourceVersion"], "502");
        assert!(stored("db-x").is_some());
        assert!(stored("db-y").is_some());
    }

    #[test]
    fn a_watch_batch_buffer_gives_back_a_bursts_memory() {
        let mut batch = Vec::new();
        batch.resize(1 << 20, b'x');
        give_back(&mut batch);
        assert!(batch.is_empty());
        assert!(batch.capacity() <= BATCH_KEEP, "{}", batch.capacity());
        // A small batch keeps its buffer: no allocation per batch.
        batch.extend_from_slice(&[b'y'; 4096]);
        let capacity = batch.capacity();
        give_back(&mut batch);
        assert_eq!(batch.capacity(), capacity);
    }

    #[test]
    fn watch_lengths_stay_within_their_range_and_vary() {
        let picks: Vec<u64> = (0..200).map(|_| crate::random_between(300, 600)).collect();
        assert!(picks.iter().all(|s| (300..=600).contains(s)), "{picks:?}");
        let distinct: std::collections::HashSet<_> = picks.iter().collect();
        assert!(distinct.len() > 50, "{distinct:?}");
    }

    #[test]
    fn send_initial_events_is_validated_as_the_apiserver_does() {
        let check = |url: &str, watch: bool| validate(&req(url, "x", "").query, watch);
        let q = "/api/v1/services?watch=1&sendInitialEvents=true";
        assert!(
            check(
                &format!("{q}&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"),
                true
            )
            .is_ok()
        );
        let e = check(q, true).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true]"
        );
        let v: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(v["details"]["kind"], "ListOptions");
        assert_eq!(v["details"]["group"], "meta.k8s.io");
        assert_eq!(v["details"]["causes"][1]["field"], "allowWatchBookmarks");
        assert_eq!(v["details"]["causes"][1]["reason"], "FieldValueForbidden");
        let e = check(&format!("{q}&allowWatchBookmarks=1"), true).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        );
        assert_eq!(
            check(
                "/api/v1/services?watch=1&resourceVersionMatch=NotOlderThan",
                true
            )
            .unwrap_err()
            .code,
            422
        );
        assert_eq!(
            check("/api/v1/services?sendInitialEvents=false", false)
                .unwrap_err()
                .code,
            422
        );
        // Any value is a boolean, as the apiserver's conversion reads it
        // (`runtime.Convert_Slice_string_To_Pointer_bool`): `yes` is true, not a 400.
        assert!(
            check(
                "/api/v1/services?watch=1&sendInitialEvents=yes&allowWatchBookmarks=x&resourceVersionMatch=NotOlderThan",
                true
            )
            .is_ok()
        );
        // A list may carry resourceVersionMatch.
        assert!(
            check(
                "/api/v1/services?resourceVersionMatch=NotOlderThan&resourceVersion=5",
                false
            )
            .is_ok()
        );
    }

    #[test]
    fn a_watch_of_one_object_selects_it_by_name() {
        let r = req(
            "/api/v1/namespaces/a/services/web?watch=1&fieldSelector=spec.type%3DClusterIP",
            "x",
            "application/json",
        );
        let s = selectors_of(&r).unwrap();
        let expected =
            Selectors::parse(None, Some("spec.type=ClusterIP,metadata.name=web")).unwrap();
        assert_eq!(s, expected);
    }
}
