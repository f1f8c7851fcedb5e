//! The feeder of one pool-scope resource's node-local watch cache (YurtHub's
//! `pkg/yurthub/multiplexer`): one list of the whole resource from the cloud, fed to
//! [`WatchCache::replace`] object by object as it streams, then watches from the cache's
//! resourceVersion, each event applied as it arrives. Every local client's list and watch of the
//! resource is then served from that one cache (`proxy::pool_local`), so the cloud sees one list
//! and one watch per resource per node instead of one per client.
//!
//! Design decisions:
//!
//! - **Started at start, not on the first request** (app/pool.rs, edge mode): every edge node
//!   runs kube-proxy and coredns, which list both default resources within seconds of
//!   booting, so the memory would be spent anyway; a cache warming since start spares those
//!   first clients a 429 and the informer backoff after it; and the thread's life is the
//!   hub's (one stop channel), with no start from a request thread.
//! - **The multiplexer's identity**: the hub's credentials with the User-Agent
//!   `multiplexer-proxy-<node>`, as YurtHub's multiplexer sends (`pool::resources`); to a
//!   leader hub the client certificate only, never the cloud bearer token. It
//!   talks to `Upstream` directly, never through the proxy, so it cannot loop into its own
//!   cache; the component is not a cache agent, so nothing is written to disk. Memory per
//!   feeder beyond the cache: a [`WatchSlot`] (a mutex, a cancel handle) and a few cells.
//! - **Bounded memory**: the list is cut by the cache's incremental decoder (one object at
//!   a time, at most `MAX_OBJECT_BYTES`); only the indexed objects (what the cache keeps
//!   anyway) are gathered until the list ends, never the body.
//! - **Resume, relist, back off**: a watch that ends by its time, or whose connection breaks (or
//!   ends inside an event), resumes from the cache's resourceVersion (every event and bookmark
//!   moves it); a 410, an ERROR event or an event the cache cannot apply lists again (the relist is
//!   a diff, so local watchers carry on); a failed list waits `retry` (the heartbeat interval)
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
//! - **Through the pool's leader** (YurtHub's `pkg/yurthub/healthchecker/leaderhub`;
//!   `pool::route::PoolRoute`, with `--nodepool-name`): when the leader ConfigMap makes the pool
//!   the source and a leader answers its health dial, the list and the watches go to
//!   `https://<leader ip>:<--multiplexer-port>` with the same User-Agent and the hub's client
//!   certificate (`Upstream::send_to_base`; the leader's certificate checked against the cluster CA
//!   and its IP). Fallback leader → cloud → cache (`pool::health::plan`): a leader that cannot be
//!   reached or breaks off mid-stream is marked unreachable and the feeder goes on at once from the
//!   cloud, resuming from the cache's resourceVersion (the leader passes the cloud's through). One
//!   that turns a request away (503, a 504 because it lags behind the follower's resourceVersion,
//!   its server's cap, 429 warming while the follower holds data) is skipped for one turn: another
//!   leader, else the cloud, else nothing this turn; a health round moves the watch back once that
//!   leader has heard the cloud on the resource since (by what it tells; one that does not tell,
//!   at the next round), not before (a 503 or 504 each round would bounce it every 20 s); the
//!   watch's own next turn tries it again.
//!   One that refuses this node (a failed TLS handshake, 401/403) is set aside for a backoff
//!   (`pool::health`). None of these counts against the cache's feed
//!   ([`WatchCache::feeder_failing`] is the cloud's). A watch that no longer goes where the route
//!   says (the cloud while a leader is usable, a leader no longer usable, a resource no longer
//!   pool-scope) is ended by the route (its [`Wake`] shuts the stream's connection) and resumed at
//!   once; local watches carry on throughout.
//! - **Freshness** (issue 32): the cache notes when the cloud last spoke on the resource
//!   ([`WatchCache::note_synced`]): a list applied, an event, a cloud bookmark (which also
//!   marks that the cloud sends bookmarks, [`WatchCache::note_bookmark`]). Through a leader,
//!   events only, and a list as old as the leader told its cache is (its bookmarks are its
//!   own, sent whatever its cloud watch does);
//!   after each health round, the age the leader told of its own cache. A leader's followers
//!   read that age (`GET /v1/pool/freshness`, `proxy::multiplexer`) and skip a stale leader
//!   (`pool::health`): a watch through a leader that is no longer the one to read from
//!   (stale, unusable, or another one back) is ended by the route and resumed where it says.
//!   A cloud watch that has shown bookmarks and then brings nothing for 150 s is hung: the
//!   route's round ends it and it resumes (a leader heals by itself; its followers have left
//!   it well before).
//! - **The first list from the pool**: it waits (up to `FIRST_LIST_PATIENCE`) for the
//!   ConfigMap's first list; then, while named leaders do not answer their dial yet (a power
//!   cut), it re-dials them every 1.5 s for up to 30 s; and a leader that answers 429 warming
//!   is asked again every second for up to 70 s. Meanwhile the cache counts as warming
//!   ([`WatchCache::awaits_leader`]): local clients get 429, not forwarded one by one.
//! - **The run-time set**: a resource the leader ConfigMap takes out of the pool-scope set
//!   idles its feeder and drops its cache; put back, it is listed again.
//! - Offline, the cache keeps what it holds and keeps serving it (see `proxy::pool_local`).

use std::cell::Cell;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{ClientError, read_list_items, read_units, watch_deadline};
use crate::cache::decode::{BodyShape, DecodeError, Unit};
use crate::metrics::{Entered, METRICS, TargetLabels};
use crate::pool::health::{Hop, leader_url, plan};
use crate::pool::leader::Source;
use crate::pool::route::{FIRST_LIST_PATIENCE, PoolRoute, Wake};
use crate::random_between;
use crate::request::Verb;
use crate::route::{Deadline, Identity};
use crate::upstream::{Answer, Cancel, Outgoing, Upstream};
use crate::watchcache::WATCH_SECONDS;
use crate::watchcache::{ApplyError, EventType, WatchCache};

/// A list of a whole resource: time for a large cluster over a slow link.
const LIST_DEADLINE: Duration = Duration::from_secs(300);
/// A warming leader is asked again after this (its `Retry-After`).
const LEADER_RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a first list waits for a warming leader (counted from when it began to wait)
/// before the cloud is asked: a little more than its warming time (`watchcache::pool::WARMING`),
/// after which it answers 503.
const LEADER_WARMING: Duration = Duration::from_secs(70);
/// How long a first list waits for named leaders none of which answers its dial yet (a
/// power cut: a leader binds its port only after its own ConfigMap list) before the cloud
/// is asked; they are dialled again every [`LEADER_REDIAL`] meanwhile.
const LEADER_STARTING: Duration = Duration::from_secs(30);
/// The pause between dials of leaders that do not answer yet, before the first list.
const LEADER_REDIAL: Duration = Duration::from_millis(1500);
/// A watch through a leader that brings nothing (not even the bookmark a leader sends every
/// minute, `pool_local::BOOKMARK_EVERY`) for this long is from a hung leader (its kernel
/// still accepts, so TCP health is green): ended at the next health round, the leader
/// marked unreachable.
const LEADER_IDLE: Duration = Duration::from_secs(150);
/// The most of a leader's 429 body read to tell a warming cache from a busy server.
const REFUSAL_BODY: u64 = 1024;
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

/// What the last request to a leader came to. None of these is the cloud's failure: only
/// the cloud's answers move the cache's feed state ([`WatchCache::feeder_failing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaderOutcome {
    /// No trouble (or no leader asked).
    Fine,
    /// It answered 429 for a warming cache ([`WatchCache::initializing`]: seconds after its
    /// start). A follower with no data yet asks it again after its `Retry-After` rather
    /// than the cloud (a pool whose hubs all restart at once would otherwise send every
    /// follower's list to the cloud); one with data keeps serving it and reads from
    /// another leader or the cloud for a turn.
    Warming,
    /// It turned the request away for now: its server's cap (a 429 of another kind), 503
    /// (not filled, its feed failing), 504 (its cache lags behind the follower's
    /// resourceVersion, which came from the cloud), another status. Another leader or the
    /// cloud for one turn; a health round moves the watch back once it has news
    /// ([`WatchSlot::busy`]).
    Busy,
    /// It refused this node: its TLS handshake failed, or 401/403. Set aside for a backoff
    /// ([`PoolRoute::leader_refused`]), another leader or the cloud meanwhile.
    Refused,
    /// It could not be reached or broke off: marked unreachable, the cloud at once.
    Failed,
}

/// What a leader's answer of `status` (with the start of its body) says.
fn leader_answer(status: u16, body: &[u8]) -> LeaderOutcome {
    // `WatchCache::initializing`'s message; the server's own cap says "maximum".
    const WARMING: &[u8] = b"is initializing";
    match status {
        401 | 403 => LeaderOutcome::Refused,
        429 if body.windows(WARMING.len()).any(|w| w == WARMING) => LeaderOutcome::Warming,
        _ => LeaderOutcome::Busy,
    }
}

/// The open watch of a feeder, as the route sees it: where it goes and how to end it. A
/// mutex taken once per watch and once per route change.
struct WatchSlot {
    open: Mutex<Option<(Via, Cancel)>>,
    /// The cache fed (whether its cloud watch shows bookmarks).
    cache: WatchCache,
    /// Its resource's kind directory, as leaders name it when they tell their freshness.
    resource: String,
    /// The feeder's resource is pool-scope (see [`Feeder::active`]).
    active: Arc<AtomicBool>,
    /// The route ended the watch: resume at once.
    woken: AtomicBool,
    /// When the slot was made: the origin of `last_read_ms`.
    born: Instant,
    /// When the open watch last brought bytes (or opened), in ms since `born`.
    last_read_ms: AtomicU64,
    /// A leader's watch silent this long (ms) is ended ([`LEADER_IDLE`]; shorter in tests),
    /// and so is a cloud watch that has shown bookmarks.
    idle_after_ms: AtomicU64,
    /// The route ended a leader's watch for its silence: the leader is taken as failed.
    idle: AtomicBool,
    /// The route ended a cloud watch for its silence after it had shown bookmarks.
    cloud_idle: AtomicBool,
    /// Leaders that turned this resource away (busy, lagging, warming while this node holds
    /// data), each with when it had last heard the cloud on it by what it told then. A watch
    /// elsewhere is not moved back to one by the route until it has heard the cloud since
    /// (it caches the resource now, its feed works, it caught up) or it serves this node: a
    /// 503 or 504 each round would otherwise bounce the watch every 20 s. One that does not
    /// tell is moved back to at the next round, as before. A feeder's own next turn (its
    /// watch ended by its time) still tries it. At most one per leader.
    busy: Mutex<Vec<(SocketAddr, Option<Instant>)>>,
}

impl WatchSlot {
    fn hold(&self, via: Via, cancel: Option<Cancel>) {
        self.touch();
        *crate::lock(&self.open) = cancel.map(|c| (via, c));
    }

    /// The open watch brought bytes.
    fn touch(&self) {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_read_ms.store(now, Ordering::Relaxed);
    }

    /// The open watch has brought nothing for longer than a leader's bookmarks allow.
    fn silent(&self) -> bool {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(self.last_read_ms.load(Ordering::Relaxed))
            > self.idle_after_ms.load(Ordering::Relaxed)
    }

    /// The leader at `addr` turned this resource away.
    fn note_busy(&self, addr: SocketAddr, route: &PoolRoute) {
        let heard = route.leader_synced_at(addr, &self.resource);
        let mut busy = crate::lock(&self.busy);
        busy.retain(|b| b.0 != addr);
        busy.push((addr, heard));
    }

    /// The leader at `addr` served this node's request for the resource.
    fn clear_busy(&self, addr: SocketAddr) {
        crate::lock(&self.busy).retain(|b| b.0 != addr);
    }

    /// The leader the route would move this watch to: the one to read from, other than one
    /// that turned the resource away and has not heard the cloud on it since.
    fn target(&self, route: &PoolRoute) -> Option<SocketAddr> {
        let avoid: Vec<SocketAddr> = {
            let mut busy = crate::lock(&self.busy);
            // Ages are told in whole seconds: an instant more than 1 s later is news. A
            // leader that does not tell has no news to wait for: moved back at the round.
            busy.retain(|(addr, then)| {
                route.leader_tells(*addr)
                    && match (*then, route.leader_synced_at(*addr, &self.resource)) {
                        (None, Some(_)) => false,
                        (Some(then), Some(now)) => now <= then + Duration::from_secs(1),
                        (_, None) => true,
                    }
            });
            busy.iter().map(|b| b.0).collect()
        };
        route.leader_avoiding(Some(&self.resource), &avoid)
    }

    fn release(&self) {
        crate::lock(&self.open).take();
    }
}

impl Wake for WatchSlot {
    fn wake(&self, route: &PoolRoute) {
        let mut open = crate::lock(&self.open);
        // After each health round: a cache fed through a leader is as fresh as the leader
        // says its own is (its hub-made bookmarks are not the cloud's word).
        if let Some((Via::Leader(addr), _)) = open.as_ref()
            && let Some(at) = route.leader_synced_at(*addr, &self.resource)
        {
            self.cache.note_synced(at);
        }
        let stale = match open.as_ref() {
            None => false,
            Some(_) if !self.active.load(Ordering::Acquire) => true,
            // The cloud sends bookmarks on an idle watch about once a minute: one that showed
            // them and then says nothing is hung (this hub, when a leader, would serve its
            // followers a stale view): ended and resumed.
            Some((Via::Cloud, _)) if self.cache.bookmarked() && self.silent() => {
                self.cloud_idle.store(true, Ordering::Release);
                true
            }
            Some((Via::Cloud, _)) => self.target(route).is_some(),
            // Usable or not: the run loop marks it failed.
            Some((Via::Leader(_), _)) if self.silent() => {
                self.idle.store(true, Ordering::Release);
                true
            }
            // No longer the leader to read from: unusable, stale, or another one back
            // (unless that one turned the resource away and has no news since).
            Some((Via::Leader(addr), _)) => self.target(route) != Some(*addr),
        };
        if stale && let Some((_, cancel)) = open.take() {
            self.woken.store(true, Ordering::Release);
            cancel.cancel();
        }
    }
}

/// A 200 answer of [`Feeder::get`] and the base URL of the server that gave it (a leader or
/// a cloud server): the `server` label of the target series.
struct Served {
    answer: Answer,
    server: String,
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
            cache: cache.clone(),
            resource: cache.resource().gvr.dir_name(),
            active: Arc::clone(&active),
            woken: AtomicBool::new(false),
            born: Instant::now(),
            last_read_ms: AtomicU64::new(0),
            idle_after_ms: AtomicU64::new(
                u64::try_from(LEADER_IDLE.as_millis()).unwrap_or(u64::MAX),
            ),
            idle: AtomicBool::new(false),
            cloud_idle: AtomicBool::new(false),
            busy: Mutex::new(Vec::new()),
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

    /// Where the next request goes: a usable leader other than `avoid` (one that turned the
    /// last request away) when the source is the pool, else the cloud (fallback order
    /// leader → cloud → cache, `pool::health::plan`; the cache keeps serving on its own).
    fn choose(&self, avoid: Option<SocketAddr>) -> Option<Via> {
        let source = self.route.as_ref().map_or(Source::Cloud, |r| r.source());
        let resource = Some(self.slot.resource.as_str());
        let leader = self
            .route
            .as_ref()
            .and_then(|r| r.leader_for(resource, avoid));
        let cloud = self.upstream.backends().any_healthy();
        match plan(source, leader.is_some(), cloud).first() {
            Hop::Leader => leader.map(Via::Leader),
            Hop::Cloud => Some(Via::Cloud),
            Hop::Cache => None,
        }
    }

    /// Lists and watches until `stop` fires or closes.
    pub(crate) fn run(self, stop: Receiver<()>) {
        let path = self.cache.resource().gvr.collection_path();
        let mut listed = false;
        let mut failed_lists = 0u32;
        // A leader turned the last request away: another leader or the cloud for the next
        // turn only (taken each turn, whether or not anything could be asked).
        let mut avoid: Option<SocketAddr> = None;
        // Since when the first list has waited for a leader (not listening yet, or warming).
        let mut awaiting_since: Option<Instant> = None;
        if !self.await_route(&stop) {
            return;
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
                self.cache.set_awaits_leader(false);
                awaiting_since = None;
                match stop.recv_timeout(self.retry) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            }
            // A cache with no data yet whose named leaders do not answer yet (a power cut:
            // each binds its port after its own ConfigMap list) dials them again for a while
            // rather than listing everything from the cloud; its clients get 429 meanwhile.
            if !self.cache.is_ready()
                && let Some(route) = &self.route
                && route.awaits_leader()
                && awaiting_since.get_or_insert_with(Instant::now).elapsed() < LEADER_STARTING
            {
                route.probe_now();
                if route.awaits_leader() {
                    self.cache.set_awaits_leader(true);
                    match stop.recv_timeout(LEADER_REDIAL) {
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                        _ => return,
                    }
                }
            }
            let mut pause = true;
            let mut wait_override = None;
            let mut awaits_leader = false;
            let generation = self.route.as_ref().map(|r| r.generation());
            if let Some(via) = self.choose(avoid.take()) {
                self.via.set(via);
                self.chosen_at.set(generation.unwrap_or(0));
                self.leader_outcome.set(LeaderOutcome::Fine);
                if !listed {
                    let Some(done) = self.list_turn(&path, &stop, &mut failed_lists) else {
                        return;
                    };
                    listed = done;
                }
                if listed && self.leader_outcome.get() == LeaderOutcome::Fine {
                    let Some((relist, paused)) = self.watch_turn(&path, &stop) else {
                        return;
                    };
                    listed &= !relist;
                    pause = paused;
                }
                let leader = match self.via.get() {
                    Via::Leader(addr) => Some(addr),
                    Via::Cloud => None,
                };
                match self.leader_outcome.get() {
                    LeaderOutcome::Fine => {}
                    // Nothing to serve yet: asked again after its Retry-After, the cache
                    // warming meanwhile; the bound only guards against a leader that says
                    // 429 for ever (past its own warming time it answers 503).
                    LeaderOutcome::Warming
                        if !self.cache.is_ready()
                            && awaiting_since.get_or_insert_with(Instant::now).elapsed()
                                <= LEADER_WARMING =>
                    {
                        awaits_leader = true;
                        wait_override = Some(LEADER_RETRY_AFTER);
                    }
                    // Turned away for now: another leader or the cloud for one turn, at once
                    // (a cloud watch then lasts until the next health round's nudge).
                    LeaderOutcome::Warming | LeaderOutcome::Busy => {
                        if let (Some(addr), Some(route)) = (leader, &self.route) {
                            self.slot.note_busy(addr, route);
                        }
                        avoid = leader;
                        pause = false;
                    }
                    // Set aside by the route (a backoff) or marked unreachable: the cloud
                    // next, at once, from the cache's resourceVersion (the same RV space),
                    // local watches carrying on.
                    LeaderOutcome::Refused | LeaderOutcome::Failed => pause = false,
                }
            }
            self.cache.set_awaits_leader(awaits_leader);
            // Ended by a change of route: resume at once where the route says.
            if self.slot.woken.swap(false, Ordering::AcqRel)
                || generation != self.route.as_ref().map(|r| r.generation())
            {
                pause = false;
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

    /// Before the first list, waits for the route to learn the pool's leaders from the
    /// ConfigMap (a few seconds at most): a follower that started a moment before learning its
    /// leader would list everything from the cloud. False when `stop` fired meanwhile.
    fn await_route(&self, stop: &Receiver<()>) -> bool {
        if let Some(route) = &self.route {
            let until = Instant::now() + FIRST_LIST_PATIENCE;
            while !route.settled() && Instant::now() < until {
                match stop.recv_timeout(Duration::from_millis(50)) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    _ => return false,
                }
            }
        }
        true
    }

    /// One list from the current source: whether the cache is listed now, None when `stop`
    /// fired. A failure is one info line the first time, debug lines after, counted in
    /// `failed_lists`.
    fn list_turn(&self, path: &str, stop: &Receiver<()>, failed_lists: &mut u32) -> Option<bool> {
        match self.list(path, stop) {
            Ok(false) => None,
            Ok(true) => {
                *failed_lists = 0;
                self.cache.set_awaits_leader(false);
                Some(true)
            }
            Err(e) => {
                *failed_lists += 1;
                let failed_lists = *failed_lists;
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
                Some(false)
            }
        }
    }

    /// One watch from the current source, a leader found idle or broken marked failed: whether
    /// to list again and whether to pause before the next turn, None when `stop` fired.
    fn watch_turn(&self, path: &str, stop: &Receiver<()>) -> Option<(bool, bool)> {
        let began = Instant::now();
        let watched = self.watch(path, stop);
        self.slot.release();
        if self.slot.idle.swap(false, Ordering::AcqRel)
            && let Via::Leader(addr) = self.via.get()
        {
            log::info!(
                "the watch of {path} from the leader hub {addr} brought nothing for {} s: the leader is taken as failed",
                LEADER_IDLE.as_secs()
            );
            self.leader_outcome.set(LeaderOutcome::Failed);
            if let Some(route) = &self.route {
                route.leader_failed(addr);
            }
        }
        if self.slot.cloud_idle.swap(false, Ordering::AcqRel) {
            log::info!(
                "the cloud watch of {path} brought nothing for {} s after showing bookmarks: resumed",
                LEADER_IDLE.as_secs()
            );
        }
        match watched {
            Watched::Stopped => None,
            Watched::Resume { broke: None } => {
                // A server that ends watches at once must not make a busy loop.
                Some((false, began.elapsed() < MIN_WATCH))
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
                Some((false, true))
            }
            Watched::Relist(why) => {
                log::info!(
                    "watch of {path} for the pool cache ended{} ({why}); listing again",
                    self.via_note()
                );
                // At once, unless the cloud ends every watch at once.
                Some((true, began.elapsed() < MIN_WATCH))
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

    /// Counts a request as in flight to `server`, the base URL that answered it
    /// (`node_yurthub_target_for_multiplexer_requests_collector`) until the guard is dropped.
    fn count_target(&self, verb: &'static str, server: String) -> Entered<TargetLabels> {
        let resource = self.cache.resource().gvr.resource.clone();
        let labels = (verb, resource, String::new(), self.user_agent.clone());
        METRICS.start_target(labels, server)
    }

    /// A GET of `path` with the multiplexer's User-Agent, where `run` chose (a leader or the
    /// cloud); a status other than 200 is an error. A leader that cannot be reached is
    /// marked so; one that answers another status is noted ([`LeaderOutcome`]).
    fn get(&self, verb: Verb, path: &str, deadline: Deadline) -> Result<Served, ClientError> {
        let headers = [
            ("User-Agent".to_owned(), self.user_agent.clone()),
            ("Accept-Encoding".to_owned(), "gzip".to_owned()),
        ];
        let outgoing = Outgoing {
            method: "GET",
            verb,
            path_and_query: path,
            headers: &headers,
            accept: Some("application/json"),
            encoding: crate::upstream::Encoding::AsClient,
            body: None,
            deadline,
            identity: Identity::Hub,
            affinity: None,
        };
        let via = self.via.get();
        let (mut answer, server) = match via {
            Via::Cloud => {
                let answer = self.upstream.send(outgoing)?;
                let server = self.upstream.backends().get(answer.backend).base.clone();
                (answer, server)
            }
            Via::Leader(addr) => {
                let base = leader_url(addr);
                match self.upstream.send_to_base(&base, outgoing) {
                    Ok(answer) => (answer, base),
                    Err(e) => {
                        // No certificate yet is no fault of the leader's: backed off as a
                        // refusal, until the hub has its identity.
                        let refused = e.is_tls_refusal()
                            || matches!(e, crate::upstream::UpstreamError::NoCredentials(_));
                        self.leader_outcome.set(if refused {
                            LeaderOutcome::Refused
                        } else {
                            LeaderOutcome::Failed
                        });
                        if let Some(route) = &self.route {
                            if refused {
                                route.leader_refused(addr, &e.to_string());
                            } else {
                                route.leader_failed(addr);
                            }
                        }
                        return Err(e.into());
                    }
                }
            }
        };
        match answer.status {
            200 => {
                if let (Via::Leader(addr), Some(route)) = (via, &self.route) {
                    route.leader_served(addr);
                    self.slot.clear_busy(addr);
                }
                // A stream can be ended by the route when it no longer goes where it should.
                self.slot.hold(via, answer.cancel.clone());
                // The route changed between the choice and now: it may have to end at once.
                if let Some(route) = &self.route
                    && route.generation() != self.chosen_at.get()
                {
                    self.slot.wake(route);
                }
                Ok(Served { answer, server })
            }
            status => {
                if let Via::Leader(addr) = via
                    && status != 410
                {
                    let mut body = Vec::new();
                    if status == 429 {
                        // Small: a Status object. Unread, it reads as a busy leader.
                        let _ = (&mut answer.body).take(REFUSAL_BODY).read_to_end(&mut body);
                    }
                    let outcome = leader_answer(status, &body);
                    self.leader_outcome.set(outcome);
                    if let (LeaderOutcome::Refused, Some(route)) = (outcome, &self.route) {
                        route.leader_refused(addr, &format!("it answers {status}"));
                    }
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
    /// failed (offline, or a server going down) does not count, nor does anything a leader
    /// answers (its own state, [`LeaderOutcome`]): a leader's restart must not make a
    /// follower's filled cache stop serving.
    fn note_failure(&self, e: &ClientError) {
        if self.via.get() == Via::Cloud
            && !matches!(e, ClientError::Upstream(_) | ClientError::Read(_))
        {
            self.cache.feeder_failed();
        }
    }

    /// [`Feeder::list`] itself.
    fn list_once(&self, path: &str, stop: &Receiver<()>) -> Result<bool, ClientError> {
        let Served { mut answer, server } =
            self.get(Verb::List, path, Deadline::Bounded(LIST_DEADLINE))?;
        let _target = self.count_target("list", server);
        let mut objects = Vec::new();
        let mut skipped = 0usize;
        let (mut bytes, cap) = (0usize, self.cache.max_list_bytes());
        let rv = read_list_items(&mut answer, stop, &mut |raw| {
            // Past the cap the read stops: nothing more is gathered or downloaded.
            if bytes.saturating_add(raw.len()) > cap {
                return Err(ClientError::Answer(TOO_LARGE));
            }
            match self.cache.parse(raw) {
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
            }
            Ok(())
        })?;
        let Some(rv) = rv else {
            return Ok(false);
        };
        let count = objects.len();
        match self.cache.replace(&rv, objects) {
            Ok(replaced) => {
                self.cache.note_synced(self.listed_at());
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

    /// When the cloud last spoke on what a list just applied says: now, from the cloud;
    /// through a leader, what it told of its own cache (its list is that cache, which may
    /// be older than this moment), now when it does not tell.
    fn listed_at(&self) -> Instant {
        match (self.via.get(), &self.route) {
            (Via::Leader(addr), Some(route)) => route
                .leader_synced_at(addr, &self.slot.resource)
                .unwrap_or_else(Instant::now),
            _ => Instant::now(),
        }
    }

    /// An event of `kind` was applied: the cloud's word on the resource, unless it is a
    /// leader's own bookmark (a leader sends them whatever its cloud watch does; its age is
    /// what it tells). A cloud bookmark also shows that the cloud sends them.
    fn note_word(&self, kind: EventType) {
        match (self.via.get(), kind) {
            (Via::Leader(_), EventType::Bookmark) => {}
            (Via::Cloud, EventType::Bookmark) => {
                self.cache.note_synced(self.listed_at());
                self.cache.note_bookmark();
            }
            _ => self.cache.note_synced(Instant::now()),
        }
    }

    /// Watches from the cache's resourceVersion, applying each event.
    fn watch(&self, path: &str, stop: &Receiver<()>) -> Watched {
        let rv = self.cache.resource_version();
        let seconds = random_between(WATCH_SECONDS.0, WATCH_SECONDS.1);
        let url = format!(
            "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={seconds}"
        );
        let Served { mut answer, server } =
            match self.get(Verb::Watch, &url, watch_deadline(seconds)) {
                Ok(served) => served,
                Err(ClientError::Status(410)) => return Watched::Relist("410 Gone".to_owned()),
                Err(e) => {
                    self.note_failure(&e);
                    return Watched::Resume { broke: Some(e) };
                }
            };
        self.cache.feeder_ok();
        let _target = self.count_target("watch", server);
        let mut refused: Option<ApplyError> = None;
        let ended = read_units(
            &mut answer,
            BodyShape::WatchStream,
            stop,
            &mut |_| self.slot.touch(),
            &mut |unit| {
                let Unit::WatchEvent(raw) = unit else {
                    return Ok(());
                };
                // An object the index cannot read is left out and the watch goes on past it:
                // a relist would leave it out again, once per update of that object.
                let applied = match self.cache.apply_watch_event(raw) {
                    Err(ApplyError::Object(e)) => {
                        log::info!("an object of {path} cannot be cached and is left out: {e}");
                        self.cache
                            .skip_unreadable(raw)
                            .map(|a| (EventType::Added, a))
                    }
                    other => other,
                };
                match applied {
                    Ok((kind, _)) => {
                        self.note_word(kind);
                        Ok(())
                    }
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
pub(super) mod tests {
    use std::collections::VecDeque;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{IpAddr, TcpListener};
    use std::thread;

    use super::*;
    use crate::config::LbMode;
    use crate::health::Backends;
    use crate::pool::health::{Dialer, Freshness, Probe, Prober, ResourceAge};
    use crate::pool::leader::Leader;
    use crate::server::tls::tests::TestCa;
    use crate::watchcache::{CacheOptions, Resource};

    /// A TLS server on a loopback address that answers the feeder's requests: first its scripted
    /// answers, in order (status 0: a watch's 200 head, then 20 s of silence; 1: the same
    /// with one bookmark before the silence; 2: no answer; 3: a 200 of the body whose
    /// connection closes 100 bytes short), then an empty
    /// Services list at resourceVersion 5 or an empty watch (which ends at once). It records each
    /// request line.
    pub(crate) struct Fake {
        pub(crate) addr: SocketAddr,
        requests: Arc<Mutex<Vec<String>>>,
        script: Arc<Mutex<VecDeque<(u16, &'static str)>>>,
    }

    impl Fake {
        /// Serves on `ip` (a loopback address) with a certificate of `ca` for it.
        pub(crate) fn start(ca: &TestCa, ip: &str, script: &[(u16, &'static str)]) -> Fake {
            let (chain, key) = ca.issue("fake", &[ip]);
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
            let config = Arc::new(config);
            let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0)).unwrap();
            let fake = Fake {
                addr: listener.local_addr().unwrap(),
                requests: Arc::default(),
                script: Arc::new(Mutex::new(script.iter().copied().collect())),
            };
            let (requests, script) = (Arc::clone(&fake.requests), Arc::clone(&fake.script));
            thread::spawn(move || {
                for sock in listener.incoming().flatten() {
                    let (config, requests, script) = (
                        Arc::clone(&config),
                        Arc::clone(&requests),
                        Arc::clone(&script),
                    );
                    thread::spawn(move || {
                        let conn = rustls::ServerConnection::new(config).unwrap();
                        let mut tls = rustls::StreamOwned::new(conn, sock);
                        let _ = Fake::serve(&mut tls, &requests, &script);
                    });
                }
            });
            fake
        }

        fn serve(
            tls: &mut rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
            requests: &Mutex<Vec<String>>,
            script: &Mutex<VecDeque<(u16, &'static str)>>,
        ) -> std::io::Result<()> {
            loop {
                let mut reader = BufReader::new(&mut *tls);
                let mut first = String::new();
                if reader.read_line(&mut first)? == 0 {
                    return Ok(());
                }
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                        break;
                    }
                }
                drop(reader);
                requests.lock().unwrap().push(first.trim_end().to_owned());
                let scripted = script.lock().unwrap().pop_front();
                match scripted {
                    // Never answers.
                    Some((2, _)) => {
                        thread::sleep(Duration::from_secs(20));
                        return Ok(());
                    }
                    // A 200 whose body breaks off.
                    Some((3, body)) => {
                        write!(
                            tls,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len() + 100
                        )?;
                        tls.flush()?;
                        tls.conn.send_close_notify();
                        tls.flush()?;
                        return Ok(());
                    }
                    _ => {}
                }
                if let Some((0 | 1, _)) = scripted {
                    tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                    if let Some((1, _)) = scripted {
                        let line = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"6\"}}}\n";
                        write!(tls, "{:x}\r\n{line}\r\n", line.len())?;
                    }
                    tls.flush()?;
                    thread::sleep(Duration::from_secs(20));
                    return Ok(());
                }
                let (status, body) = match scripted {
                    Some(answer) => answer,
                    None if first.contains("watch=true") => (200, ""),
                    None => (
                        200,
                        r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}"#,
                    ),
                };
                write!(
                    tls,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )?;
                tls.flush()?;
            }
        }

        /// The request lines so far.
        pub(crate) fn requests(&self) -> Vec<String> {
            self.requests.lock().unwrap().clone()
        }
    }

    /// Leaders answer their dial once `up` is set.
    struct Switch(Arc<AtomicBool>);

    impl Dialer for Switch {
        fn reachable(&self, _: SocketAddr, _: Duration) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// The upstream of a hub with a node certificate of `ca` whose cloud is `cloud` (none:
    /// offline).
    pub(crate) fn upstream_of(ca: &TestCa, cloud: Option<&Fake>) -> Arc<Upstream> {
        let bases = cloud
            .map(|c| format!("https://{}", c.addr))
            .into_iter()
            .collect();
        let (cert, key) = ca.issue_pem("system:node:edge-2", &[]);
        let tls =
            crate::tls::load(ca.pem.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).unwrap();
        let backends = Arc::new(Backends::new(bases, LbMode::RoundRobin));
        Arc::new(Upstream::new(backends, Some(&tls), None, 16).unwrap())
    }

    /// A follower's Services feeder: its cloud is `cloud` (no server: offline), its leaders
    /// `leaders` (loopback IPs serving on `port`), which answer their dial once `up` is set.
    fn follower(
        ca: &TestCa,
        cloud: Option<&Fake>,
        leaders: &[&str],
        port: u16,
        up: &Arc<AtomicBool>,
    ) -> (Feeder, Arc<PoolRoute>) {
        follower_probed(ca, cloud, leaders, port, Box::new(Switch(Arc::clone(up))))
    }

    /// [`follower`] whose leaders are probed by `prober`.
    fn follower_probed(
        ca: &TestCa,
        cloud: Option<&Fake>,
        leaders: &[&str],
        port: u16,
        prober: Box<dyn Prober>,
    ) -> (Feeder, Arc<PoolRoute>) {
        let upstream = upstream_of(ca, cloud);
        let route = Arc::new(PoolRoute::for_tests(port, prober));
        let leaders: Vec<Leader> = leaders
            .iter()
            .enumerate()
            .map(|(i, ip)| Leader {
                node: format!("edge-{}", i + 1).into(),
                ip: ip.parse().unwrap(),
            })
            .collect();
        route.set(Source::Pool, Some(&leaders));
        route.settle();
        let feeder = Feeder::new(
            upstream,
            WatchCache::new(Resource::services(), CacheOptions::default()),
            "multiplexer-proxy-edge-2".into(),
            Duration::from_millis(100),
            Some(Arc::clone(&route)),
            Arc::new(AtomicBool::new(true)),
        );
        (feeder, route)
    }

    /// Runs `feeder` until `done` holds (up to 10 s), then stops it; whether `done` held.
    fn run_until(feeder: Feeder, mut done: impl FnMut() -> bool) -> bool {
        let (stop_tx, stop) = crossbeam_channel::bounded(1);
        let running = thread::spawn(move || feeder.run(stop));
        let until = Instant::now() + Duration::from_secs(10);
        let mut held = done();
        while !held && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
            held = done();
        }
        drop(stop_tx);
        running.join().unwrap();
        held
    }

    const BUSY: &str = r#"{"kind":"Status","code":429,"message":"the hub is serving its maximum of 64 multiplexer requests; retry shortly"}"#;
    const WARMING: &str = r#"{"kind":"Status","code":429,"message":"cacher for gvr(/v1, Resource=services) is initializing, please try again later."}"#;
    const LAGS: &str =
        r#"{"kind":"Status","code":504,"reason":"Timeout","message":"Too large resource version"}"#;

    #[test]
    fn an_offline_follower_asks_its_leader_again_after_each_refusal_and_never_counts_it_as_the_clouds_failure()
     {
        let ca = TestCa::new();
        // Listed, then every watch is turned away a few times before one is served.
        let leader = Fake::start(
            &ca,
            "127.0.0.1",
            &[
                (
                    200,
                    r#"{"kind":"ServiceList","metadata":{"resourceVersion":"5"},"items":[]}"#,
                ),
                (503, "{}"),
                (504, LAGS),
                (429, BUSY),
                (429, WARMING),
                (503, "{}"),
                (403, "{}"),
            ],
        );
        let up = Arc::new(AtomicBool::new(true));
        let (feeder, route) = follower(&ca, None, &["127.0.0.1"], leader.addr.port(), &up);
        let cache = feeder.cache.clone();
        let failing = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&failing);
        let c = cache.clone();
        // The offline follower keeps coming back to its leader, one turn after each
        // refusal, until it is set aside for its 403.
        let served = run_until(feeder, || {
            if c.feeder_failing() {
                seen.store(true, Ordering::SeqCst);
            }
            leader.requests().len() >= 7
        });
        assert!(served, "{:#?}", leader.requests());
        assert!(cache.is_ready());
        assert!(
            !failing.load(Ordering::SeqCst),
            "a leader's refusals are not the cloud's"
        );
        assert!(
            leader.requests()[1..]
                .iter()
                .all(|r| r.contains("watch=true")),
            "listed once: {:#?}",
            leader.requests()
        );
        assert_eq!(route.leader_except(None), None, "set aside after its 403");
    }

    #[test]
    fn a_first_list_waits_for_a_leader_that_is_not_listening_yet_then_for_its_warming() {
        let ca = TestCa::new();
        let cloud = Fake::start(&ca, "127.0.0.1", &[]);
        let leader = Fake::start(&ca, "127.0.0.2", &[(429, WARMING), (429, WARMING)]);
        let up = Arc::new(AtomicBool::new(false));
        let (feeder, _route) = follower(&ca, Some(&cloud), &["127.0.0.2"], leader.addr.port(), &up);
        let cache = feeder.cache.clone();
        let (c, u) = (cache.clone(), Arc::clone(&up));
        let began = Instant::now();
        let mut awaited = (false, false);
        let listed = run_until(feeder, || {
            // The leader binds its port 2 s after the follower starts.
            if began.elapsed() > Duration::from_secs(2) {
                u.store(true, Ordering::SeqCst);
            }
            if c.awaits_leader() {
                if u.load(Ordering::SeqCst) {
                    awaited.1 = true;
                } else {
                    awaited.0 = true;
                }
            }
            c.is_ready()
        });
        assert!(listed);
        assert!(
            awaited.0,
            "its clients got 429 while the leader did not listen"
        );
        assert!(awaited.1, "and while it warmed");
        assert!(!cache.awaits_leader());
        assert!(cloud.requests().is_empty(), "{:#?}", cloud.requests());
        let requests = leader.requests();
        assert!(
            requests.len() >= 3 && !requests[2].contains("watch=true"),
            "{requests:#?}"
        );
    }

    #[test]
    fn a_silent_leader_watch_is_ended_at_a_health_round_and_the_leader_taken_as_failed() {
        let ca = TestCa::new();
        let list = r#"{"kind":"ServiceList","metadata":{"resourceVersion":"5"},"items":[]}"#;
        // Listed, then a watch whose stream says nothing (a hung leader).
        let leader = Fake::start(&ca, "127.0.0.1", &[(200, list), (0, "")]);
        let up = Arc::new(AtomicBool::new(true));
        let (feeder, route) = follower(&ca, None, &["127.0.0.1"], leader.addr.port(), &up);
        feeder.slot.idle_after_ms.store(300, Ordering::Relaxed);
        let generation = route.generation();
        let r = Arc::clone(&route);
        let began = Instant::now();
        let mut failed = false;
        let resumed = run_until(feeder, || {
            // A health round every poll: only a silent watch is ended by one.
            r.check();
            failed |= r.generation() > generation;
            leader.requests().len() >= 3
        });
        assert!(resumed, "{:#?}", leader.requests());
        assert!(began.elapsed() >= Duration::from_millis(300));
        assert!(failed, "the leader was marked unreachable");
    }

    #[test]
    fn a_leaders_own_cloud_watch_silent_after_showing_bookmarks_is_resumed_and_noted() {
        let ca = TestCa::new();
        let list = r#"{"kind":"ServiceList","metadata":{"resourceVersion":"5"},"items":[]}"#;
        // Listed, then a watch that shows a bookmark and then says nothing (a hung watch).
        let cloud = Fake::start(&ca, "127.0.0.1", &[(200, list), (1, "")]);
        let up = Arc::new(AtomicBool::new(true));
        // A leader: the route's source is the cloud.
        let (feeder, route) = follower(&ca, Some(&cloud), &[], 1, &up);
        route.set(Source::Cloud, None);
        feeder.slot.idle_after_ms.store(300, Ordering::Relaxed);
        let cache = feeder.cache.clone();
        assert_eq!(cache.synced_age(), None, "nothing heard yet");
        let r = Arc::clone(&route);
        let resumed = run_until(feeder, || {
            r.check();
            cloud.requests().len() >= 3
        });
        assert!(resumed, "{:#?}", cloud.requests());
        assert!(cache.bookmarked());
        assert_eq!(cache.resource_version(), 6, "the bookmark was applied");
        assert!(
            cache
                .synced_age()
                .is_some_and(|a| a < Duration::from_secs(10))
        );
    }

    /// Leaders that tell what `told` holds for them (by address), at each probe.
    #[derive(Clone, Default)]
    struct Tells(Arc<Mutex<Vec<(SocketAddr, u64)>>>);

    impl Tells {
        /// The leader at `addr` tells its Services are `age` seconds old.
        fn set(&self, addr: SocketAddr, age: u64) {
            let mut told = self.0.lock().unwrap();
            told.retain(|t| t.0 != addr);
            told.push((addr, age));
        }
    }

    impl Prober for Tells {
        fn probe(&self, addr: SocketAddr, _: bool) -> Probe {
            let told = self.0.lock().unwrap();
            match told.iter().find(|t| t.0 == addr) {
                Some(&(_, age)) => Probe::Told(Freshness {
                    cloud: true,
                    resources: vec![ResourceAge {
                        resource: "services.v1.core".into(),
                        age: Some(Duration::from_secs(age)),
                        bookmarks: true,
                    }],
                }),
                None => Probe::Unreachable,
            }
        }
    }

    /// A watch's connection that records being shut down.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl ureq::unversioned::transport::ShutdownHandle for Flag {
        fn shutdown(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_watch_is_not_moved_back_to_a_leader_that_turned_it_away_until_it_has_news() {
        let ca = TestCa::new();
        let tells = Tells::default();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.2:1".parse().unwrap(),
        );
        tells.set(a, 5);
        tells.set(b, 5);
        let (feeder, route) = follower_probed(
            &ca,
            None,
            &["127.0.0.1", "127.0.0.2"],
            1,
            Box::new(tells.clone()),
        );
        let first = route.leader_for(Some("services.v1.core"), None).unwrap();
        let second = if first == a { b } else { a };
        // The first answered 503 (it does not cache services yet, or lags): the watch went
        // to the second.
        feeder.slot.note_busy(first, &route);
        let flag = Arc::new(Flag::default());
        let handle: Arc<dyn ureq::unversioned::transport::ShutdownHandle> = flag.clone();
        feeder
            .slot
            .hold(Via::Leader(second), Some(Cancel::of(&handle)));
        for _ in 0..3 {
            route.check();
        }
        assert!(!flag.0.load(Ordering::SeqCst), "kept on the second leader");
        // The first heard its cloud since: moved back.
        tells.set(first, 0);
        route.check();
        assert!(flag.0.load(Ordering::SeqCst), "moved back to the first");

        // Both turned it away: a cloud watch stays until one has news.
        feeder.slot.note_busy(first, &route);
        feeder.slot.note_busy(second, &route);
        let flag = Arc::new(Flag::default());
        let handle: Arc<dyn ureq::unversioned::transport::ShutdownHandle> = flag.clone();
        feeder.slot.hold(Via::Cloud, Some(Cancel::of(&handle)));
        route.check();
        assert!(!flag.0.load(Ordering::SeqCst), "kept on the cloud");
        // One that serves this node is no longer avoided.
        feeder.slot.clear_busy(second);
        route.check();
        assert!(flag.0.load(Ordering::SeqCst), "moved to the second");
    }

    #[test]
    fn a_watch_moves_back_at_the_round_to_a_leader_that_does_not_tell() {
        let ca = TestCa::new();
        let up = Arc::new(AtomicBool::new(true));
        let (feeder, route) = follower(&ca, None, &["127.0.0.1"], 1, &up);
        let leader = route.leader_for(Some("services.v1.core"), None).unwrap();
        feeder.slot.note_busy(leader, &route);
        let flag = Arc::new(Flag::default());
        let handle: Arc<dyn ureq::unversioned::transport::ShutdownHandle> = flag.clone();
        feeder.slot.hold(Via::Cloud, Some(Cancel::of(&handle)));
        route.check();
        assert!(flag.0.load(Ordering::SeqCst), "no news to wait for");
    }

    #[test]
    fn a_list_through_a_leader_is_as_fresh_as_the_leader_says_its_cache_is() {
        let ca = TestCa::new();
        let list = r#"{"kind":"ServiceList","metadata":{"resourceVersion":"5"},"items":[]}"#;
        let leader = Fake::start(&ca, "127.0.0.1", &[(200, list)]);
        let tells = Tells::default();
        tells.set(leader.addr, 30);
        let (feeder, _route) = follower_probed(
            &ca,
            None,
            &["127.0.0.1"],
            leader.addr.port(),
            Box::new(tells),
        );
        let cache = feeder.cache.clone();
        let mut age = None;
        assert!(run_until(feeder, || {
            age = cache.synced_age().filter(|_| cache.is_ready());
            age.is_some()
        }));
        assert!(leader.requests()[0].contains("GET /api/v1/services "));
        let age = age.unwrap_or_default();
        assert!(age >= Duration::from_secs(29), "{age:?}");
    }

    #[test]
    fn a_request_is_counted_against_the_server_that_answered_it() {
        let ca = TestCa::new();
        let cloud = Fake::start(&ca, "127.0.0.1", &[]);
        let leader = Fake::start(&ca, "127.0.0.2", &[]);
        let up = Arc::new(AtomicBool::new(true));
        let (feeder, _route) = follower(&ca, Some(&cloud), &["127.0.0.2"], leader.addr.port(), &up);
        let server_of = |via| {
            feeder.via.set(via);
            match feeder.get(
                Verb::List,
                "/api/v1/services",
                Deadline::Bounded(LIST_DEADLINE),
            ) {
                Ok(served) => served.server,
                Err(e) => panic!("{via:?}: {e}"),
            }
        };
        assert_eq!(
            server_of(Via::Leader(leader.addr)),
            format!("https://{}", leader.addr)
        );
        assert_eq!(server_of(Via::Cloud), format!("https://{}", cloud.addr));
        assert_eq!(leader.requests().len(), 1);
        assert_eq!(cloud.requests().len(), 1);
    }

    #[test]
    fn a_leader_that_turns_a_request_away_is_skipped_for_another_before_the_cloud() {
        let ca = TestCa::new();
        let up = Arc::new(AtomicBool::new(true));
        let (feeder, _route) = follower(&ca, None, &["127.0.0.1", "127.0.0.2"], 1, &up);
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.2:1".parse().unwrap(),
        );
        for _ in 0..4 {
            assert_eq!(feeder.choose(Some(a)), Some(Via::Leader(b)));
            assert_eq!(feeder.choose(Some(b)), Some(Via::Leader(a)));
        }
    }

    #[test]
    fn a_leaders_answer_tells_warming_from_busy_lagging_and_refusing() {
        assert_eq!(
            leader_answer(429, WARMING.as_bytes()),
            LeaderOutcome::Warming
        );
        assert_eq!(leader_answer(429, BUSY.as_bytes()), LeaderOutcome::Busy);
        assert_eq!(leader_answer(429, b""), LeaderOutcome::Busy);
        assert_eq!(leader_answer(504, LAGS.as_bytes()), LeaderOutcome::Busy);
        assert_eq!(leader_answer(503, b"{}"), LeaderOutcome::Busy);
        assert_eq!(leader_answer(403, b"{}"), LeaderOutcome::Refused);
        assert_eq!(leader_answer(401, b"{}"), LeaderOutcome::Refused);
        // The message the leader's cache builds (the server's cap says "maximum", BUSY).
        let warming = WatchCache::new(Resource::services(), CacheOptions::default()).initializing();
        assert!(
            warming.message.contains("is initializing"),
            "{}",
            warming.message
        );
    }

    #[test]
    fn collection_paths_are_the_apiservers() {
        let services = WatchCache::new(Resource::services(), CacheOptions::default());
        assert_eq!(
            services.resource().gvr.collection_path(),
            "/api/v1/services"
        );
        let slices = WatchCache::new(Resource::endpointslices(), CacheOptions::default());
        assert_eq!(
            slices.resource().gvr.collection_path(),
            "/apis/discovery.k8s.io/v1/endpointslices"
        );
    }
}
