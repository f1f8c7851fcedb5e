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
//!   the relay's own filter stage (`filter_body::BodyFilter`), which decodes its own copy of
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
//! Memory: one `Vec` of object handles per list page (a pointer and a length per object)
//! and one batch buffer per watch (its events' bytes, at most [`BATCH_KEEP`] kept between
//! batches: a leader serves a watch per follower); the objects themselves are shared.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Filters;
use super::filter_body::{BodyFilter, StageTime};
use crate::cache::decode::BodyShape;
use crate::cache::writer::Session;
use crate::filters::Chain;
use crate::pool::resources::{self, Gvr, PoolScope, Resolution};
use crate::request::{Accept, ApiRequest, Query, Verb};
use crate::route;
use crate::selector::Selectors;
use crate::server::{BodyWriter, Exchange, Length};
use crate::status::Status;
use crate::watchcache::{
    CacheOptions, ListRequest, Resource, WatchCache, WatchNext, Watcher, error_event_line,
};

/// How long a watch waits for events before it looks whether its client hung up.
const WATCH_TICK: Duration = Duration::from_secs(1);
/// A watch that asked for bookmarks gets one after this long without one (the apiserver's
/// cacher sends them about every minute).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// Watches without `timeoutSeconds` last a random time in this range (seconds), as the
/// apiserver picks for its default (`MinRequestTimeout` 1800 s is YurtHub's upstream; the
/// multiplexer's own cacher serves 300–600); the feeders' watches too, as client-go's
/// reflector picks them, so the watches of many nodes do not all renew at once.
pub(crate) const WATCH_SECONDS: (u64, u64) = (300, 600);
/// How long after start a cache not yet filled answers 429 (its feeder lists at once and
/// retries every heartbeat interval); past it, its kind is forwarded until the cache fills.
const WARMING: Duration = Duration::from_secs(60);

/// The node-local caches of the pool-scope resources, and who they serve.
pub(crate) struct PoolCaches {
    scope: PoolScope,
    /// This hub's multiplexer's User-Agent, whose requests are never served from here.
    own_agent: String,
    /// One cache per member of `scope` the hub knows the kind of, in `scope`'s order.
    caches: Vec<(Gvr, WatchCache)>,
    /// Per cache (same order): whether its resource is pool-scope now (the leader
    /// ConfigMap's `pool-scoped-metadata` replaces the start-up set at run time). An
    /// inactive cache serves nothing and its feeder idles; shared with the feeders.
    active: Box<[Arc<AtomicBool>]>,
    /// The members of the run-time set of a kind the hub cannot cache, already warned about.
    warned: Mutex<Vec<Gvr>>,
    /// Until when a cache not filled yet answers 429 (warming); after it, its requests are
    /// forwarded as before (a feeder that cannot list, e.g. 403 for the hub's identity, must
    /// not leave kube-proxy at 429 for ever).
    warm_by: Instant,
}

impl PoolCaches {
    /// The caches of `scope` for node `node`. A member whose kind and scope the hub does not
    /// know (an extra `--pool-scope-resources` entry: it reads no discovery) gets no cache
    /// and stays forwarded; the caller logs the names returned.
    pub(crate) fn new(
        scope: PoolScope,
        node: &str,
        options: &CacheOptions,
    ) -> (PoolCaches, Vec<String>) {
        let mut caches = Vec::new();
        let mut unknown = Vec::new();
        for gvr in scope.iter() {
            match known_resource(gvr) {
                Some(resource) => {
                    let cache = WatchCache::new(resource, options.clone());
                    crate::watchcache::series::export(&cache);
                    caches.push((gvr.clone(), cache));
                }
                None => unknown.push(gvr.to_string()),
            }
        }
        let active = caches
            .iter()
            .map(|_| Arc::new(AtomicBool::new(true)))
            .collect();
        let pool = PoolCaches {
            scope,
            own_agent: resources::user_agent(node),
            caches,
            active,
            warned: Mutex::new(Vec::new()),
            warm_by: Instant::now() + WARMING,
        };
        (pool, unknown)
    }

    /// Whether a cache not filled yet still counts as warming (429) rather than failed
    /// (forwarded): for a while after start, and as long as a feeder's first list waits for
    /// the pool's leader ([`WatchCache::awaits_leader`], bounded by the feeder).
    pub(crate) fn warming(&self) -> bool {
        Instant::now() < self.warm_by || self.caches().any(WatchCache::awaits_leader)
    }

    /// The caches, for their feeders.
    pub(crate) fn caches(&self) -> impl Iterator<Item = &WatchCache> {
        self.caches.iter().map(|(_, cache)| cache)
    }

    /// The Services cache, when Services are in the pool scope (servicetopology's index
    /// reads it instead of a watch of its own).
    pub(crate) fn services(&self) -> Option<&WatchCache> {
        self.caches
            .iter()
            .find(|(g, _)| g.group.is_empty() && &*g.version == "v1" && &*g.resource == "services")
            .map(|(_, cache)| cache)
    }

    /// The multiplexer's User-Agent, which the feeders send.
    pub(crate) fn own_agent(&self) -> &str {
        &self.own_agent
    }

    /// The pool-scope set these caches serve (what a leader's multiplexer port admits).
    pub(crate) fn scope(&self) -> &PoolScope {
        &self.scope
    }

    /// The cache of `gvr`, if the hub keeps one (a member of unknown kind has none, nor one
    /// the run-time set left out).
    #[cfg(test)]
    pub(crate) fn cache_of(&self, gvr: &Gvr) -> Option<&WatchCache> {
        self.active_cache(&gvr.group, &gvr.version, &gvr.resource)
    }

    /// The active cache of `group/version/resource`: the one lookup over the caches and
    /// their run-time flags.
    fn active_cache(&self, group: &str, version: &str, resource: &str) -> Option<&WatchCache> {
        self.caches
            .iter()
            .zip(&self.active)
            .find(|((g, _), on)| {
                *g.group == *group
                    && *g.version == *version
                    && *g.resource == *resource
                    && on.load(Ordering::Acquire)
            })
            .map(|((_, cache), _)| cache)
    }

    /// The one rule of what a cache serves, to local clients ([`PoolCaches::cache_for`]) and
    /// to a leader's followers (`multiplexer::admit`): the active cache of
    /// `group/version/resource` for a client taking `accept`, or why not. A cache not filled
    /// yet is returned: each caller has its own warming rule for it.
    pub(crate) fn servable(
        &self,
        (group, version, resource): (&str, &str, &str),
        accept: Accept,
    ) -> Result<&WatchCache, Unserved> {
        // JSON only: the cache holds JSON, and the hub converts to nothing else.
        if !matches!(accept, Accept::Json | Accept::JsonOrProtobuf) {
            return Err(Unserved::NotJson);
        }
        let cache = self
            .active_cache(group, version, resource)
            .ok_or(Unserved::NotKept)?;
        // A filled cache whose feed fails while the cloud answers holds frozen data; one
        // whose list was too large holds none and is not tried again for minutes. One never
        // filled and failing follows the warming rule.
        if cache.list_paused() {
            return Err(Unserved::TooLarge);
        }
        if cache.feeder_failing() && cache.is_ready() {
            return Err(Unserved::Failing);
        }
        Ok(cache)
    }

    /// Whether the cache at position `i` of [`PoolCaches::caches`] is in the run-time set,
    /// shared with its feeder (which idles while it is not).
    pub(crate) fn active_flag(&self, i: usize) -> Arc<AtomicBool> {
        self.active.get(i).cloned().unwrap_or_default()
    }

    /// The leader ConfigMap's set replaces the start-up one: a cache whose resource left it
    /// serves nothing more (its lists and watches are forwarded; its feeder drops its
    /// objects), one that is back serves again once its feeder has listed. Members the hub
    /// cannot cache are forwarded; each is returned once, for the caller to warn about.
    /// (Kinds the hub can cache are always in the start-up set: the defaults.)
    pub(crate) fn set_scope(&self, scope: &PoolScope) -> Vec<String> {
        for ((gvr, _), on) in self.caches.iter().zip(&self.active) {
            on.store(
                scope.contains(&gvr.group, &gvr.version, &gvr.resource),
                Ordering::Release,
            );
        }
        // A plain Vec of names: a panicking holder cannot leave it torn.
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let mut news = Vec::new();
        for gvr in scope.iter() {
            if known_resource(gvr).is_none() && !warned.contains(gvr) {
                warned.push(gvr.clone());
                news.push(gvr.to_string());
            }
        }
        news
    }

    /// The cache that serves `req` (whose User-Agent header is `user_agent`), if it is one
    /// to serve locally.
    pub(super) fn cache_for(&self, req: &ApiRequest, user_agent: &str) -> Option<&WatchCache> {
        if self.scope.resolve(req, user_agent, &self.own_agent) != Resolution::Local {
            return None;
        }
        let r = req.resource()?;
        // Frozen or not JSON: forwarded, live, with the client's own credentials.
        self.servable((&r.group, &r.version, &r.resource), req.accept)
            .ok()
    }
}

/// Why [`PoolCaches::servable`] serves a request from no cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unserved {
    /// The hub keeps no cache of the resource, or the run-time set left it out.
    NotKept,
    /// The client takes no JSON.
    NotJson,
    /// The cache's feed fails while the cloud answers (its data is frozen): read it from
    /// the cloud until the feeder recovers.
    Failing,
    /// The resource's list was too large for the cache (it holds none, and is not listed
    /// again for minutes).
    TooLarge,
}

/// The resources the hub can cache without discovery.
fn known_resource(gvr: &Gvr) -> Option<Resource> {
    match (&*gvr.group, &*gvr.version, &*gvr.resource) {
        ("", "v1", "services") => Some(Resource::services()),
        ("discovery.k8s.io", "v1", "endpointslices") => Some(Resource::endpointslices()),
        _ => None,
    }
}

/// Answers the list or watch `req` from `cache` (ready); the HTTP status sent. `shutdown`
/// ends a watch when the hub stops. `session`, when the route caches the answer for this
/// client, gets what the client gets, as the relay's tee gives it a forwarded answer: the
/// disk cache keeps serving this client offline after a restart. A leader's multiplexer
/// port calls it too, with neither filters nor session.
pub(crate) fn answer(
    cache: &WatchCache,
    filters: Option<&Filters>,
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
    match req.verb {
        Verb::Watch => {
            let rv = req.query.resource_version.as_deref();
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
                    stream_watch(cache, watcher, ex, filter, &how, session)
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
                    let Ok(mut writer) = ex.start(200, &JSON, Length::Streamed) else {
                        return 200;
                    };
                    let shape = route::body_shape(req);
                    let mut out = ToClient::new(&mut writer, filter, shape, session);
                    let sent = page.write_to(&mut out).and_then(|()| out.finish());
                    let session = out.session.take();
                    match sent {
                        Ok(()) => {
                            if let Some(s) = session {
                                s.finish(true);
                            }
                            let _ = writer.finish();
                        }
                        // The client sees a broken answer rather than a short valid one, and
                        // nothing partial is cached.
                        Err(e) => {
                            log::debug!("a pool-cache list was not sent whole: {e}");
                            if let Some(s) = session {
                                s.finish(false);
                            }
                            writer.abort();
                        }
                    }
                    200
                }
                Err(status) => refuse(ex, &status),
            }
        }
    }
}

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

/// How a watch is served.
struct WatchHow<'s> {
    /// The client asked for bookmarks.
    bookmarks: bool,
    /// When it ends.
    timeout: Duration,
    /// True once the hub is stopping.
    shutdown: &'s dyn Fn() -> bool,
}

/// Streams a watch until its time, the client's leaving, shutdown, or the cache ending it.
fn stream_watch(
    cache: &WatchCache,
    mut watcher: Watcher,
    ex: Exchange<'_>,
    filter: Option<(&Filters, Chain)>,
    how: &WatchHow<'_>,
    session: Option<Session>,
) -> u16 {
    let WatchHow {
        bookmarks,
        timeout,
        shutdown,
    } = *how;
    let Ok(mut writer) = ex.start(200, &JSON, Length::Streamed) else {
        return 200;
    };
    let started = Instant::now();
    let mut last_bookmark = started;
    let mut batch = Vec::new();
    let ended_cleanly = {
        let mut out = ToClient::new(&mut writer, filter, BodyShape::WatchStream, session);
        let ended = loop {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() || shutdown() {
                break true;
            }
            batch.clear();
            match watcher.next(left.min(WATCH_TICK)) {
                Ok(WatchNext::Events(events)) => {
                    for event in &events {
                        // Writing to a Vec cannot fail.
                        let _ = event.write_line(&mut batch, cache);
                    }
                }
                Ok(WatchNext::Idle) => {
                    let due = bookmarks && last_bookmark.elapsed() >= BOOKMARK_EVERY;
                    if let Some(bookmark) = watcher.bookmark().filter(|_| due) {
                        let _ = bookmark.write_line(&mut batch, cache);
                        last_bookmark = Instant::now();
                    }
                    if batch.is_empty() {
                        if out.client_gone() {
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
        // The cache keeps whole events either way. `ToClient::finish` is not called: it
        // only checks that the stream did not end inside an event, and every event is
        // written whole.
        if let Some(s) = out.session.take() {
            s.finish(ended);
        }
        ended
    };
    if ended_cleanly {
        let _ = writer.finish();
    }
    200
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

/// Writes an answer to the client, through the client's filters when it has any, and what
/// the client gets to the cache writer's session, if any.
struct ToClient<'w, 'c> {
    writer: &'w mut BodyWriter<'c>,
    /// The filter, and its time on this answer (recorded once, when dropped, as the relay's).
    filter: Option<(BodyFilter<'w>, StageTime)>,
    out: Vec<u8>,
    session: Option<Session>,
}

impl<'w, 'c> ToClient<'w, 'c> {
    fn new(
        writer: &'w mut BodyWriter<'c>,
        filter: Option<(&'w Filters, Chain)>,
        shape: BodyShape,
        session: Option<Session>,
    ) -> ToClient<'w, 'c> {
        let filter = filter.map(|(filters, chain)| {
            let filter =
                BodyFilter::new(shape, false, chain, &filters.ctx, filters.lookups.as_ref());
            (filter, StageTime::new(chain))
        });
        ToClient {
            writer,
            filter,
            out: Vec::new(),
            session,
        }
    }

    /// Ends the body's filtering (a list's closing brackets come from the filter).
    fn finish(&mut self) -> io::Result<()> {
        if let Some((filter, stage)) = &mut self.filter {
            let out = &mut self.out;
            stage
                .time(|| filter.finish(out))
                .map_err(io::Error::other)?;
            self.send_out()?;
        }
        Ok(())
    }

    fn send_out(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.writer.write(&self.out)?;
            self.tee_out();
            self.out.clear();
        }
        Ok(())
    }

    /// Gives the session what the client got: `out` when filtered, else `data`. A full
    /// queue abandons the session (the writer drops it), as for a forwarded answer.
    fn tee_data(&mut self, data: &[u8]) {
        if self.session.as_mut().is_some_and(|s| !s.chunk(data)) {
            self.session = None;
        }
    }

    /// Gives the session the filtered output.
    fn tee_out(&mut self) {
        let out = std::mem::take(&mut self.out);
        self.tee_data(&out);
        self.out = out;
    }

    /// Whether the client hung up (waits a millisecond).
    fn client_gone(&mut self) -> bool {
        self.writer.client_gone(Duration::from_millis(1))
    }
}

impl Write for ToClient<'_, '_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.filter {
            Some((filter, stage)) => {
                // The bytes are the cache's own JSON: one the scanner cannot decode is a bug,
                // and the answer is cut rather than sent unfiltered.
                let out = &mut self.out;
                stage
                    .time(|| filter.feed(data, out))
                    .map_err(io::Error::other)?;
                // An object serde cannot read (the index could) went out unfiltered, as the
                // relay sends it: the client gets it, the disk cache does not.
                if let Some(e) = filter.take_unreadable()
                    && let Some(session) = self.session.take()
                {
                    log::info!("a pool-cache answer is not cached: {e}");
                    session.finish(false);
                }
                self.send_out()?;
            }
            None => {
                self.writer.write(data)?;
                self.tee_data(data);
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
mod tests {
    use super::*;
    use crate::pool::resources::Gvr;
    use crate::request::classify;

    fn req(url: &str, ua: &str, accept: &str) -> ApiRequest {
        let headers = [
            ("User-Agent".to_owned(), ua.to_owned()),
            ("Accept".to_owned(), accept.to_owned()),
        ];
        classify("GET", url, &headers).unwrap()
    }

    fn pool() -> PoolCaches {
        let scope = PoolScope::with_defaults([Gvr::parse("apps/v1/deployments").unwrap()]);
        let (pool, unknown) = PoolCaches::new(scope, "edge-1", &CacheOptions::default());
        assert_eq!(unknown, ["apps/v1/deployments"]);
        pool
    }

    #[test]
    fn caches_warm_past_the_start_up_window_while_a_feeder_awaits_its_leader() {
        let mut pool = pool();
        assert!(pool.warming());
        pool.warm_by = Instant::now();
        assert!(!pool.warming(), "past the window: forwarded");
        let slices = pool.caches().nth(1).unwrap().clone();
        slices.set_awaits_leader(true);
        assert!(pool.warming(), "a feeder waits for its leader: still 429");
        slices.set_awaits_leader(false);
        assert!(!pool.warming());
    }

    #[test]
    fn local_clients_are_served_and_the_multiplexer_and_protobuf_only_clients_are_not() {
        let pool = pool();
        let json = "application/json";
        let kp = "kube-proxy/v1.30.0";
        let found = |url: &str, ua: &str, accept: &str| {
            pool.cache_for(&req(url, ua, accept), ua)
                .map(|c| c.resource().resource.clone())
        };
        assert_eq!(
            found("/api/v1/services", kp, json).as_deref(),
            Some("services")
        );
        assert_eq!(
            found(
                "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices?watch=1",
                "coredns",
                "application/vnd.kubernetes.protobuf, application/json"
            )
            .as_deref(),
            Some("endpointslices")
        );
        // client-go's protobuf content type (kube-proxy's default) takes JSON too.
        assert_eq!(
            found(
                "/api/v1/services?watch=1",
                kp,
                "application/vnd.kubernetes.protobuf, */*"
            )
            .as_deref(),
            Some("services")
        );
        assert_eq!(
            found("/api/v1/services", "multiplexer-proxy-edge-1", json),
            None
        );
        assert_eq!(
            found(
                "/api/v1/services",
                kp,
                "application/vnd.kubernetes.protobuf"
            ),
            None
        );
        assert_eq!(found("/api/v1/namespaces/a/services/b", kp, json), None);
        assert_eq!(found("/apis/apps/v1/deployments", kp, json), None);
        assert_eq!(found("/api/v1/pods", kp, json), None);
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
