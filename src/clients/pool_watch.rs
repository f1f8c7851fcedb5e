//! The feeder of one pool-scope resource's node-local watch cache (YURTHUB.md §4.5): one
//! list of the whole resource from the cloud, fed to [`WatchCache::replace`] object by
//! object as it streams, then watches from the cache's resourceVersion, each event applied
//! as it arrives. Every local client's list and watch of the resource is then served from
//! that one cache (`proxy::pool_local`), so the cloud sees one list and one watch per
//! resource per node instead of one per client.
//!
//! Design decisions:
//!
//! - **Started at start, not on the first request** (app.rs, edge mode): every edge node
//!   runs kube-proxy and coredns, which list both default resources within seconds of
//!   booting, so the memory would be spent anyway; a cache warming since start spares those
//!   first clients a 429 and the informer backoff after it; and the thread's life is the
//!   hub's (one stop channel), with no start from a request thread.
//! - **The multiplexer's identity**: the hub's credentials with the User-Agent
//!   `multiplexer-proxy-<node>`, as YurtHub's multiplexer sends (`pool::identity`). It
//!   talks to `Upstream` directly, never through the proxy, so it cannot loop into its own
//!   cache; the component is not a cache agent, so nothing is written to disk. Memory per
//!   feeder beyond the cache: a [`WatchSlot`] (a mutex, a cancel handle) and a few cells.
//! - **Bounded memory**: the list is cut by the cache's incremental decoder (one object at
//!   a time, at most `MAX_OBJECT_BYTES`); only the indexed objects (what the cache keeps
//!   anyway) are gathered until the list ends, never the body.
//! - **Resume, relist, back off**: a watch that ends by its time, or whose connection
//!   breaks (or ends inside an event), resumes from the cache's resourceVersion (every event and bookmark moves it);
//!   a 410, an ERROR event or an event the cache cannot apply lists again (the relist is a
//!   diff, so local watchers carry on); a failed list waits `retry` (the heartbeat interval)
//!   before the next try; nothing is asked of a cloud whose servers are all unhealthy.
//! - **gzip**: it asks `Accept-Encoding: gzip` (the apiserver compresses bodies over 128 KiB,
//!   lists only: its watch streams are never compressed); a gzip body is inflated by the
//!   cache's own decoder as it streams, and the link series count the compressed bytes. A
//!   1,000-EndpointSlice list is ~14x smaller on the link (954 KB → 68 KB with the stand-in)
//!   for ~1 ms more CPU on x86-64 (release) to inflate.
//! - **What is not relisted**: a watch cut inside an event (a proxy's clean EOF) resumes, as
//!   every whole event before it was applied; an object the index cannot read is left out,
//!   counted (`tinyhub_pool_cache_skipped_objects_total`), and its resourceVersion applied,
//!   since a relist would leave it out again, once per update of that object.
//! - **Through the pool's leader** (YURTHUB.md §4.6; `pool::route::PoolRoute`, with
//!   `--nodepool-name`): when the leader ConfigMap makes the pool the source and a leader
//!   answers its health dial, the list and the watches go to
//!   `https://<leader ip>:<--multiplexer-port>` with the same User-Agent and the hub's client
//!   certificate (`Upstream::send_to_base`; the leader's certificate checked against the
//!   cluster CA and its IP). Fallback leader → cloud → cache (`pool::health::plan`): a leader
//!   that cannot be reached or breaks off mid-stream is marked unreachable and the feeder goes
//!   on at once from the cloud, resuming from the cache's resourceVersion (the leader passes
//!   the cloud's through); one that answers another status (429 warming, 503, 403) costs a
//!   round on the cloud. A watch that no longer goes where the route says (the cloud while a
//!   leader is usable, a leader no longer usable, a resource no longer pool-scope) is ended
//!   by the route (its [`Wake`] shuts the stream's connection) and resumed at once; local
//!   watches carry on throughout. The first list waits (up to 10 s) for the ConfigMap's first
//!   list, so that a follower does not start by listing everything from the cloud.
//! - **The run-time set**: a resource the leader ConfigMap takes out of the pool-scope set
//!   idles its feeder and drops its cache; put back, it is listed again.
//! - Offline, the cache keeps what it holds and keeps serving it (see `proxy::pool_local`).

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{ClientError, read_units, watch_deadline};
use crate::cache::decode::{BodyShape, DecodeError, Unit};
use crate::pool::health::{Hop, leader_url, plan};
use crate::pool::leader::Source;
use crate::pool::route::{PoolRoute, Wake};
use crate::proxy::pool_local::random_between;
use crate::route::{Deadline, Identity};
use crate::upstream::{Answer, Cancel, Outgoing, Upstream};
use crate::watchcache::{ApplyError, WatchCache};

/// A list of a whole resource: time for a large cluster over a slow link.
const LIST_DEADLINE: Duration = Duration::from_secs(300);
/// Watches last a random time in this range (seconds), as client-go's reflector picks
/// them, so the watches of many nodes do not all renew at once.
const WATCH_SECONDS: (u64, u64) = (300, 600);
/// The longest the first list waits for the leader ConfigMap's first list.
const FIRST_LIST_PATIENCE: Duration = Duration::from_secs(10);
/// A leader answering 429 is asked again after this (its `Retry-After`).
const LEADER_RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a leader answering 429 is waited for before the cloud is asked: a little more
/// than its warming time (`pool_local::WARMING`), after which it answers 503.
const LEADER_WARMING: Duration = Duration::from_secs(70);
/// A watch that ends sooner than this is resumed only after the retry pause.
const MIN_WATCH: Duration = Duration::from_secs(1);

/// Why a list was cut: larger than [`crate::watchcache::CacheOptions::max_list_bytes`].
const TOO_LARGE: &str = "the list is larger than the node-local cache takes";

/// What one feeder needs.
pub(crate) struct Feeder {
    /// The cloud.
    pub upstream: Arc<Upstream>,
    /// The cache it fills.
    pub cache: WatchCache,
    /// `multiplexer-proxy-<node>`.
    pub user_agent: String,
    /// The pause after a failure (`--heartbeat-interval-seconds`).
    pub retry: Duration,
    /// Where to read from (a leader hub or the cloud); None: the cloud always.
    route: Option<Arc<PoolRoute>>,
    /// Where the current request goes; set by `run` before each list and watch.
    via: Cell<Via>,
    /// The route's generation when `via` was chosen.
    chosen_at: Cell<u64>,
    /// What the last request to a leader came to, for `run`.
    leader_outcome: Cell<LeaderOutcome>,
    /// The open watch's cancel handle, for the route to end it.
    slot: Arc<WatchSlot>,
    /// The resource is pool-scope now (the leader ConfigMap may take it out and back).
    active: Arc<AtomicBool>,
}

/// Where one request of a feeder goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The cloud (its healthy servers).
    Cloud,
    /// The leader hub at this address.
    Leader(SocketAddr),
}

/// What the last request to a leader came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaderOutcome {
    /// No trouble (or no leader asked).
    Fine,
    /// It answered 429: its cache is warming (seconds after its start). Asked again after
    /// its `Retry-After` rather than the cloud: a pool whose hubs all restart at once (a
    /// power cut) would otherwise send every follower's list to the cloud, and keep its
    /// watches there until the next health round.
    Warming,
    /// It answered another status than 200 (503 not filled, 403): the cloud this round.
    Refused,
    /// It could not be reached or broke off: marked unreachable, the cloud at once.
    Failed,
}

/// The open watch of a feeder, as the route sees it: where it goes and how to end it. A
/// mutex taken once per watch and once per route change.
struct WatchSlot {
    open: Mutex<Option<(Via, Cancel)>>,
    /// The feeder's resource is pool-scope (see [`Feeder::active`]).
    active: Arc<AtomicBool>,
    /// The route ended the watch: resume at once.
    woken: AtomicBool,
}

impl WatchSlot {
    fn hold(&self, via: Via, cancel: Option<Cancel>) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = cancel.map(|c| (via, c));
    }

    fn release(&self) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

impl Wake for WatchSlot {
    fn wake(&self, route: &PoolRoute) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = match open.as_ref() {
            None => false,
            Some(_) if !self.active.load(Ordering::Acquire) => true,
            Some((Via::Cloud, _)) => route.wants_leader(),
            Some((Via::Leader(addr), _)) => !route.leader_usable(*addr),
        };
        if stale && let Some((_, cancel)) = open.take() {
            self.woken.store(true, Ordering::Release);
            cancel.cancel();
        }
    }
}

/// The collection path of the cache's resource: `/api/v1/services`,
/// `/apis/discovery.k8s.io/v1/endpointslices`.
pub(crate) fn collection_path(cache: &WatchCache) -> String {
    let r = cache.resource();
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.resource)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.resource)
    }
}

/// How one watch ended.
enum Watched {
    /// `stop` fired.
    Stopped,
    /// By its time or a broken connection: resume from the cache's resourceVersion.
    Resume { broke: Option<ClientError> },
    /// A 410, an ERROR event or an event the cache refused: list again.
    Relist(String),
}

impl Feeder {
    /// The feeder of `cache`, reading through the pool's leaders when `route` says so.
    pub(crate) fn new(
        upstream: Arc<Upstream>,
        cache: WatchCache,
        user_agent: String,
        retry: Duration,
        route: Option<Arc<PoolRoute>>,
        active: Arc<AtomicBool>,
    ) -> Feeder {
        let slot = Arc::new(WatchSlot {
            open: Mutex::new(None),
            active: Arc::clone(&active),
            woken: AtomicBool::new(false),
        });
        if let Some(route) = &route {
            let waker: Arc<dyn Wake> = Arc::clone(&slot) as Arc<dyn Wake>;
            route.register(Arc::downgrade(&waker));
        }
        Feeder {
            upstream,
            cache,
            user_agent,
            retry,
            route,
            via: Cell::new(Via::Cloud),
            chosen_at: Cell::new(0),
            leader_outcome: Cell::new(LeaderOutcome::Fine),
            slot,
            active,
        }
    }

    /// Where the next request goes: a healthy leader when the source is the pool (unless
    /// one refused this round), else the cloud (fallback order leader → cloud → cache,
    /// `pool::health::plan`; the cache keeps serving on its own).
    fn choose(&self, avoid_leader: bool) -> Option<Via> {
        let source = self.route.as_ref().map_or(Source::Cloud, |r| r.source());
        let leader = self
            .route
            .as_ref()
            .filter(|_| !avoid_leader)
            .and_then(|r| r.leader());
        let cloud = self.upstream.backends().any_healthy();
        match plan(source, leader.is_some(), cloud).first() {
            Hop::Leader => leader.map(Via::Leader),
            Hop::Cloud => Some(Via::Cloud),
            Hop::Cache => None,
        }
    }

    /// Lists and watches until `stop` fires or closes.
    pub(crate) fn run(self, stop: Receiver<()>) {
        let path = collection_path(&self.cache);
        let mut listed = false;
        let mut failed_lists = 0u32;
        // A leader refused the last request: the cloud for the next one.
        let mut avoid_leader = false;
        // Since when the leader has answered 429 (warming) in a row.
        let mut leader_busy_since: Option<Instant> = None;
        // The first list waits for the ConfigMap's (a few seconds at most): a follower that
        // started a moment before learning its leader would list everything from the cloud.
        if let Some(route) = &self.route {
            let until = Instant::now() + FIRST_LIST_PATIENCE;
            while !route.settled() && Instant::now() < until {
                match stop.recv_timeout(Duration::from_millis(50)) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        }
        loop {
            if !self.active.load(Ordering::Acquire) {
                // Out of the pool-scope set: no requests, no objects held; the proxy forwards
                // the resource's lists and watches. Listed again when it is back.
                if listed || self.cache.is_ready() {
                    self.cache.clear();
                    listed = false;
                    log::info!(
                        "{path} is no longer pool-scope: its node-local cache is dropped, its lists and watches forwarded"
                    );
                }
                match stop.recv_timeout(self.retry) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
            let mut pause = true;
            let mut wait_override = None;
            let generation = self.route.as_ref().map(|r| r.generation());
            if let Some(via) = self.choose(avoid_leader) {
                avoid_leader = false;
                self.via.set(via);
                self.chosen_at.set(generation.unwrap_or(0));
                self.leader_outcome.set(LeaderOutcome::Fine);
                if !listed {
                    match self.list(&path, &stop) {
                        Ok(false) => return,
                        Ok(true) => {
                            listed = true;
                            failed_lists = 0;
                        }
                        Err(e) => {
                            failed_lists += 1;
                            let line = format!(
                                "list of {path} for the pool cache failed{}: {e}",
                                self.via_note()
                            );
                            // The first failure is news; the retries every `retry` are not.
                            if failed_lists == 1 {
                                log::info!("{line}");
                            } else {
                                log::debug!("{line} ({failed_lists} times)");
                            }
                        }
                    }
                }
                if listed && self.leader_outcome.get() == LeaderOutcome::Fine {
                    let began = Instant::now();
                    let watched = self.watch(&path, &stop);
                    self.slot.release();
                    match watched {
                        Watched::Stopped => return,
                        Watched::Resume { broke: None } => {
                            // A server that ends watches at once must not make a busy loop.
                            pause = began.elapsed() < MIN_WATCH;
                        }
                        Watched::Resume { broke: Some(e) } => {
                            if let Via::Leader(addr) = self.via.get()
                                && self.leader_outcome.get() == LeaderOutcome::Fine
                                && !self.slot.woken.load(Ordering::Acquire)
                            {
                                // Broke off mid-stream: the cloud until a round sees it.
                                self.leader_outcome.set(LeaderOutcome::Failed);
                                if let Some(route) = &self.route {
                                    route.leader_failed(addr);
                                }
                            }
                            log::debug!(
                                "watch of {path} for the pool cache broke off{}: {e}",
                                self.via_note()
                            );
                        }
                        Watched::Relist(why) => {
                            log::info!(
                                "watch of {path} for the pool cache ended{} ({why}); listing again",
                                self.via_note()
                            );
                            listed = false;
                            // At once, unless the cloud ends every watch at once.
                            pause = began.elapsed() < MIN_WATCH;
                        }
                    }
                }
                match self.leader_outcome.get() {
                    LeaderOutcome::Fine => {}
                    LeaderOutcome::Warming => {
                        leader_busy_since.get_or_insert_with(Instant::now);
                        // Past the leader's own warming time it answers 503, not 429; the
                        // bound only guards against a leader that says 429 for ever.
                        if leader_busy_since.is_some_and(|t| t.elapsed() > LEADER_WARMING) {
                            avoid_leader = true;
                            leader_busy_since = None;
                            pause = false;
                        } else {
                            wait_override = Some(LEADER_RETRY_AFTER);
                        }
                    }
                    LeaderOutcome::Refused => {
                        avoid_leader = true;
                        pause = false;
                    }
                    // Marked unreachable: the cloud next, at once, from the cache's
                    // resourceVersion (the same RV space), local watches carrying on.
                    LeaderOutcome::Failed => pause = false,
                }
            }
            // Ended by a change of route: resume at once where the route says.
            if self.slot.woken.swap(false, Ordering::AcqRel)
                || generation != self.route.as_ref().map(|r| r.generation())
            {
                pause = false;
            }
            if !matches!(self.leader_outcome.get(), LeaderOutcome::Warming) {
                leader_busy_since = None;
            }
            let wait = match (wait_override, pause) {
                (Some(wait), _) => wait,
                (None, true) => self.retry,
                (None, false) => Duration::ZERO,
            };
            match stop.recv_timeout(wait) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    /// " from the leader hub <addr>" when the current request went to a leader, for logs.
    fn via_note(&self) -> String {
        match self.via.get() {
            Via::Cloud => String::new(),
            Via::Leader(addr) => format!(" from the leader hub {addr}"),
        }
    }

    /// A GET of `path` with the multiplexer's User-Agent, where `run` chose (a leader or the
    /// cloud); a status other than 200 is an error. A leader that cannot be reached is
    /// marked so; one that answers another status is noted ([`LeaderOutcome`]).
    fn get(&self, path: &str, deadline: Deadline) -> Result<Answer, ClientError> {
        let headers = [
            ("User-Agent".to_owned(), self.user_agent.clone()),
            ("Accept-Encoding".to_owned(), "gzip".to_owned()),
        ];
        let outgoing = Outgoing {
            method: "GET",
            path_and_query: path,
            headers: &headers,
            accept: Some("application/json"),
            body: None,
            deadline,
            identity: Identity::Hub,
        };
        let via = self.via.get();
        let answer = match via {
            Via::Cloud => self.upstream.send(outgoing)?,
            Via::Leader(addr) => match self.upstream.send_to_base(&leader_url(addr), outgoing) {
                Ok(answer) => answer,
                Err(e) => {
                    self.leader_outcome.set(LeaderOutcome::Failed);
                    if let Some(route) = &self.route {
                        route.leader_failed(addr);
                    }
                    return Err(e.into());
                }
            },
        };
        match answer.status {
            200 => {
                // A stream can be ended by the route when it no longer goes where it should.
                self.slot.hold(via, answer.cancel.clone());
                // The route changed between the choice and now: it may have to end at once.
                if let Some(route) = &self.route
                    && route.generation() != self.chosen_at.get()
                {
                    self.slot.wake(route);
                }
                Ok(answer)
            }
            status => {
                match (via, status) {
                    (Via::Leader(_), 429) => self.leader_outcome.set(LeaderOutcome::Warming),
                    (Via::Leader(_), 410) | (Via::Cloud, _) => {}
                    (Via::Leader(_), _) => self.leader_outcome.set(LeaderOutcome::Refused),
                }
                Err(ClientError::Status(status))
            }
        }
    }

    /// Lists the whole resource into the cache; Ok(false) when `stop` fired. Tells the cache
    /// whether the cloud's answer was usable ([`WatchCache::feeder_failing`]).
    fn list(&self, path: &str, stop: &Receiver<()>) -> Result<bool, ClientError> {
        if self.cache.list_paused() {
            return Err(ClientError::Answer(
                "the last list was larger than the cache takes; its requests are forwarded",
            ));
        }
        let listed = self.list_once(path, stop);
        if let Err(ClientError::Answer(TOO_LARGE)) = listed {
            log::warn!(
                "the list of {path} is larger than the {} bytes the node-local cache takes: its lists and watches are forwarded, listed again in {} s",
                self.cache.max_list_bytes(),
                crate::watchcache::LIST_TOO_LARGE_PAUSE.as_secs()
            );
            self.cache.list_too_large();
            return listed;
        }
        match &listed {
            Ok(_) => self.cache.feeder_ok(),
            Err(e) => self.note_failure(e),
        }
        listed
    }

    /// Counts an unusable answer of the cloud against the cache's feed; a connection that
    /// failed (offline, or a server going down) does not count.
    fn note_failure(&self, e: &ClientError) {
        if !matches!(e, ClientError::Upstream(_) | ClientError::Read(_)) {
            self.cache.feeder_failed();
        }
    }

    /// [`Feeder::list`] itself.
    fn list_once(&self, path: &str, stop: &Receiver<()>) -> Result<bool, ClientError> {
        let mut answer = self.get(path, Deadline::Bounded(LIST_DEADLINE))?;
        let mut objects = Vec::new();
        let mut rv: Option<String> = None;
        let mut skipped = 0usize;
        let (mut bytes, cap) = (0usize, self.cache.max_list_bytes());
        let whole = read_units(
            &mut answer,
            BodyShape::List,
            stop,
            &mut |_| {},
            &mut |unit| {
                match unit {
                    // Past the cap the read stops: nothing more is gathered or downloaded.
                    Unit::ListItem(raw) if bytes.saturating_add(raw.len()) > cap => {
                        return Err(ClientError::Answer(TOO_LARGE));
                    }
                    Unit::ListItem(raw) => match self.cache.parse(raw) {
                        Ok(object) => {
                            bytes += raw.len();
                            objects.push(object);
                        }
                        // One odd object does not cost every client the rest.
                        Err(e) => {
                            skipped += 1;
                            self.cache.note_skipped();
                            log::info!("an object of {path} cannot be cached and is left out: {e}");
                        }
                    },
                    Unit::ListMember {
                        key: "metadata",
                        value,
                    } => {
                        #[derive(serde::Deserialize)]
                        struct Meta {
                            #[serde(rename = "resourceVersion")]
                            resource_version: Option<String>,
                        }
                        rv = serde_json::from_slice::<Meta>(value)?.resource_version;
                    }
                    _ => {}
                }
                Ok(())
            },
        )?;
        if !whole {
            return Ok(false);
        }
        let rv = rv.ok_or(ClientError::Answer("the list has no resourceVersion"))?;
        let count = objects.len();
        match self.cache.replace(&rv, objects) {
            Ok(replaced) => {
                log::debug!(
                    "pool cache of {path} listed at {rv}: {count} objects ({skipped} left out), {} added, {} modified, {} deleted{}",
                    replaced.added,
                    replaced.modified,
                    replaced.deleted,
                    if replaced.reset { ", reset" } else { "" }
                );
                Ok(true)
            }
            Err(ApplyError::BadResourceVersion(_)) => Err(ClientError::Answer(
                "the list's resourceVersion is not a number",
            )),
            Err(_) => Err(ClientError::Answer("the list could not be applied")),
        }
    }

    /// Watches from the cache's resourceVersion, applying each event.
    fn watch(&self, path: &str, stop: &Receiver<()>) -> Watched {
        let rv = self.cache.resource_version();
        let seconds = random_between(WATCH_SECONDS.0, WATCH_SECONDS.1);
        let url = format!(
            "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={seconds}"
        );
        let mut answer = match self.get(&url, watch_deadline(seconds)) {
            Ok(answer) => answer,
            Err(ClientError::Status(410)) => return Watched::Relist("410 Gone".to_owned()),
            Err(e) => {
                self.note_failure(&e);
                return Watched::Resume { broke: Some(e) };
            }
        };
        self.cache.feeder_ok();
        let mut refused: Option<ApplyError> = None;
        let ended = read_units(
            &mut answer,
            BodyShape::WatchStream,
            stop,
            &mut |_| {},
            &mut |unit| {
                let Unit::WatchEvent(raw) = unit else {
                    return Ok(());
                };
                // An object the index cannot read is left out and the watch goes on past it:
                // a relist would leave it out again, once per update of that object.
                let applied = match self.cache.apply_event_json(raw) {
                    Err(ApplyError::Object(e)) => {
                        log::info!("an object of {path} cannot be cached and is left out: {e}");
                        self.cache.skip_unreadable(raw)
                    }
                    other => other,
                };
                match applied {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        refused = Some(e);
                        Err(ClientError::Answer("a watch event was not applied"))
                    }
                }
            },
        );
        match (ended, refused) {
            (_, Some(e)) => Watched::Relist(e.to_string()),
            (Ok(true), None) => Watched::Resume { broke: None },
            (Ok(false), None) => Watched::Stopped,
            // A stream that ends inside an event (a clean EOF from a proxy, a cut line) lost
            // nothing applied: every whole event before it moved the cache's resourceVersion.
            (
                Err(
                    e @ (ClientError::Upstream(_)
                    | ClientError::Read(_)
                    | ClientError::Decode(DecodeError::Truncated)),
                ),
                None,
            ) => Watched::Resume { broke: Some(e) },
            (Err(e), None) => Watched::Relist(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchcache::{CacheOptions, Resource};

    #[test]
    fn collection_paths_are_the_apiservers() {
        let services = WatchCache::new(Resource::services(), CacheOptions::default());
        assert_eq!(collection_path(&services), "/api/v1/services");
        let slices = WatchCache::new(Resource::endpointslices(), CacheOptions::default());
        assert_eq!(
            collection_path(&slices),
            "/apis/discovery.k8s.io/v1/endpointslices"
        );
    }
}
