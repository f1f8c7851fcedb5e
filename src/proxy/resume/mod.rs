//! Watches that outlive outages (issue 29): the relay of a resumable watch keeps the client's
//! stream open across upstream legs. The first leg is the forwarded request's answer; when a
//! leg breaks, the hub holds the client (hub-made bookmarks if it asked for bookmarks), waits
//! until a cloud server is usable again (plus a jitter after an outage, or the backoff after a
//! failed resume), and watches again from the last resourceVersion it delivered, splicing the
//! events into the same stream. The client's watch ends only at its own `timeoutSeconds`, when
//! it leaves, or when the hub stops.
//!
//! ```text
//!   LEG ──broke off / ended early / 5xx, 429, garbage──> HOLD ──usable (+ jitter)──> RESUME
//!    ^                                                     ^                          │
//!    └──────────────── 200 ───────────────────────────────┼──────────────────────────┤
//!                                                          └── 5xx, 429, transport ───┤
//!   410 (leg or resume): a cache agent's view rebuilt by one list and the difference   │
//!   (`diff.rs`, `rounds.rs`); anyone else's watch ends cleanly, never with an ERROR. <─┘
//! ```
//!
//! Never sent to the client: an ERROR caused by the outage, a partial event, a bookmark it did
//! not ask for. An ERROR on the client's own first leg before anything was delivered is the
//! cloud's answer to its request: passed on, and the watch ends as before.
//!
//! - `leg.rs`: the legs as values (targets, headers, the answer's reading, backoff, jitter);
//! - `series.rs`: the `tinyhub_watch_*` counters.
//!
//! The chain a leg is pumped into is `stream`'s: `EventCut` (whole events, the last delivered
//! resourceVersion, the outage's ERRORs swallowed) → `FilterStage` → `Tee` → `ToClient`.
//!
//! The thread, admission slot and in-flight entry are the request's own: held or not, the
//! watch is one request until it ends. What it does not do: decide eligibility (`route`),
//! rebuild a view after a 410 (`diff.rs`), end a dead leg (the reaper, told how by `leg`).

mod diff;
pub(super) mod leg;
pub(crate) mod rounds;
pub(crate) mod series;

use std::cell::RefCell;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use self::diff::{CatchUp, RoundCtx};
use self::leg::{Backoff, Resumed};
use self::rounds::ScopeKey;
use self::series::WATCH_SERIES;
use super::call::{Call, Relayed};
use super::{CacheStatus, Hub};
use crate::cache::decode::BodyShape;
use crate::cache::writer::Session;
use crate::filters::Filters;
use crate::filters::body::{BodyFilter, StageTime};
use crate::metrics::InFlight;
use crate::request::{ApiRequest, ResourcePath};
use crate::route::{
    Deadline, Identity, NoCacheReason, Resume, Route, WATCH_DEFAULT, WATCH_MARGIN,
    rebuild_list_accept,
};
use crate::server::{BodyWriter, Exchange, Length};
use crate::stream::{
    BodyReads, ClientEnd, EventCut, FilterStage, LegEnd, Progress, Pumped, Stop, Tee, ToClient,
    Uncached, pump,
};
use crate::upstream::Answer;

/// How often a held watch looks at its client, the cloud's health, its deadline and the
/// hub's shutdown (as the offline hold does).
const TICK: Duration = Duration::from_secs(1);
/// How often a held watch looks at the cloud's health while no server is usable.
const HEALTH_POLL: Duration = Duration::from_millis(250);
/// How long after a resume the events count as its catch-up (the cloud sends a resumed
/// watch's backlog at once).
const CATCH_UP_WINDOW: Duration = Duration::from_secs(1);
/// A leg that ends cleanly with this little left of the client's time ends the client's watch.
const DEADLINE_SLACK: Duration = Duration::from_secs(1);
/// A leg that lived this long worked, though it delivered nothing: the backoff starts over.
const LEG_PROVEN: Duration = Duration::from_secs(60);
/// How long a round waits for the cache writer to apply what the client was sent.
const BARRIER_WAIT: Duration = Duration::from_secs(5);

/// The scope of a round's list: who asks (the hub's identity, or a digest of the client's
/// credential: never shared across credentials) and what (the collection path and the
/// selectors as sent; a watch of one named object selects it by name).
fn scope_key(req: &ApiRequest, path: &ResourcePath, route: &Route, list_target: &str) -> ScopeKey {
    let identity = match route.identity {
        Identity::Hub => None,
        Identity::Client | Identity::Anonymous => {
            let mut digest = [0u8; 8];
            if let Some(d) = req.requester.credential.digest() {
                digest.copy_from_slice(&d[..8]);
            }
            Some(digest)
        }
    };
    let fields = req.query.field_selector.as_deref().unwrap_or("");
    let field_selector = match &path.name {
        Some(name) if fields.is_empty() => format!("metadata.name={name}"),
        Some(name) => format!("metadata.name={name},{fields}"),
        None => fields.to_owned(),
    };
    ScopeKey {
        identity,
        path: list_target
            .split('?')
            .next()
            .unwrap_or(list_target)
            .to_owned(),
        label_selector: req.query.label_selector.clone().unwrap_or_default(),
        field_selector,
        accept: rebuild_list_accept(req.accept),
    }
}

/// A forwarded watch the hub can follow across legs.
pub(super) struct Resumable<'a> {
    req: &'a ApiRequest,
    path: &'a ResourcePath,
    mode: Resume,
}

/// Whether `answer` to the call's request is a watch stream the hub can follow: its route
/// says resumable, and the cloud answered 200 in JSON, not compressed (the apiserver never
/// compresses a watch; one that is, is relayed as before).
pub(super) fn resumable<'a>(call: &'a Call<'_>, answer: &Answer) -> Option<Resumable<'a>> {
    let mode = call.route.resume?;
    let req = call.req.as_ref()?;
    let path = req.resource()?;
    let stream = answer.status == 200 && answer.is_json() && !answer.is_gzip();
    stream.then_some(Resumable { req, path, mode })
}

/// The client's end of the chain: whole events → filters → cache copy → client.
type Chain<'f, 'n, 'c> = EventCut<'n, FilterStage<'f, Tee<'n, ToClient<'c>>>>;

impl Call<'_> {
    /// The relay of a resumable watch (issue 29): the client's stream outlives its upstream
    /// legs. The client gets the first leg's headers (streamed), then whole events of every
    /// leg, filtered and teed into the cache as any watch.
    ///
    /// Never inlined, nor are the relay's other branches: a watch waits for hours in this
    /// frame, and its thread's stack holds what every frame above it reserved.
    ///
    /// The watch's parts are made in a frame of their own ([`Call::watch_of`]): this frame,
    /// above every wait, holds the finished watch only, not the values it was built from.
    #[inline(never)]
    pub(super) fn relay_resumable<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        session: Option<Session>,
        cache_status: CacheStatus,
        filters: Option<&Filters>,
        watch: Resumable<'_>,
    ) -> Relayed<'c> {
        let Resumable { req, path, .. } = watch;
        let resource = leg::resource_label(path);
        let component = req.component.as_str();
        // Set at each resume; the stage's count of the catch-up logs it.
        let resumed: RefCell<Option<(Duration, String)>> = RefCell::new(None);
        // A resume counts once its leg delivered or ended without a 410 (one that met a 410
        // is a round's, which logs and counts itself).
        let note = |caught_up: u64| {
            if let Some((held, rv)) = resumed.borrow_mut().take() {
                WATCH_SERIES.resumed(&resource);
                log::info!(
                    "watch resumed resource=\"{resource}\" component=\"{component}\" held={:.1}s caught_up={caught_up} via=resume rv={rv}",
                    held.as_secs_f64()
                );
            }
        };
        let uncached = |why: &Uncached, _: bool| {
            let (Uncached::Unreadable(e) | Uncached::Undecodable(e)) = why;
            log::info!("{e}; the watch is not cached resource=\"{resource}\"");
        };
        let parts = Parts {
            raw_query: ex.url().split_once('?').map_or("", |(_, q)| q).to_owned(),
            affinity: ex.url().to_owned(),
            headers: leg::leg_headers(ex.headers()),
            session,
            filters,
            resumed: &resumed,
            resource: &resource,
            note: &note,
            uncached: &uncached,
        };
        let writer = match start(ex, &mut answer) {
            Ok(writer) => writer,
            Err(e) => return Relayed::ClientGone(e),
        };
        // Made straight into this frame's one copy of it (no `Result` around it to move out).
        let mut watch = self.watch_of(writer, parts, watch);
        let ended = watch.run(answer);
        let status = if watch.chain.inner_mut().inner().uncached() {
            CacheStatus::Bypass(NoCacheReason::Answer)
        } else {
            cache_status
        };
        match ended {
            Ok(()) => Relayed::Done(status),
            Err(e) => Relayed::ClientGone(e),
        }
    }

    /// The watch that relays to `writer`, made of `parts`. Never inlined: the values the
    /// chain is built from stay in this frame, gone before the watch waits.
    #[inline(never)]
    fn watch_of<'a, 'f, 'n, 'c>(
        &'a self,
        writer: BodyWriter<'c>,
        parts: Parts<'f, 'n>,
        watch: Resumable<'a>,
    ) -> Watch<'a, 'f, 'n, 'c>
    where
        'n: 'a,
    {
        let Parts {
            raw_query,
            affinity,
            headers,
            session,
            filters,
            resumed,
            resource,
            note,
            uncached,
        } = parts;
        let Resumable { req, path, mode } = watch;
        let deadline = req
            .query
            .timeout_seconds
            .filter(|&s| s > 0)
            .map(|s| Instant::now() + Duration::from_secs(s));
        let tee = Tee::new(ToClient::new(writer), session, uncached);
        let chain_of = self.route.filters;
        let stage = match filters {
            Some(f) => {
                let filter =
                    BodyFilter::new(BodyShape::WatchStream, false, chain_of, &f.ctx, &*f.lookups);
                FilterStage::new(tee, filter, StageTime::new(chain_of), true)
            }
            None => FilterStage::none(tee),
        };
        let chain = EventCut::new(
            stage,
            req.query.allow_watch_bookmarks,
            Progress::from_query(&req.query),
            note,
        );
        let scope = leg::list_target(path, &raw_query);
        Watch {
            hub: self.hub,
            req,
            path,
            route: &self.route,
            mode,
            chain,
            resumed,
            resource,
            raw_query,
            affinity,
            scope,
            headers,
            deadline,
            backoff: Backoff::new(),
            bookmarked: Arc::new(AtomicBool::new(false)),
            traffic: 0,
            in_flight: self.in_flight.as_ref(),
        }
    }
}

/// The client's answer started with the first leg's status and headers (streamed). Never
/// inlined: what starting an answer takes (the rest of the request's body drained) stays out
/// of the frame a watch waits below.
#[inline(never)]
fn start<'c>(ex: Exchange<'c>, answer: &mut Answer) -> io::Result<BodyWriter<'c>> {
    let headers = std::mem::take(&mut answer.headers);
    ex.start(answer.status, &headers, Length::Streamed)
}

/// What [`Call::watch_of`] makes a watch of, besides the call and the first leg.
struct Parts<'f, 'n> {
    /// The client's query, its original target, its headers for later legs (`Watch`'s).
    raw_query: String,
    affinity: String,
    headers: Vec<(String, String)>,
    session: Option<Session>,
    filters: Option<&'f Filters>,
    resumed: &'n RefCell<Option<(Duration, String)>>,
    resource: &'n str,
    /// Logs a resume once its leg delivered (the chain's count of the catch-up).
    note: &'n dyn Fn(u64),
    /// Logs why the watch is not cached.
    uncached: &'n dyn Fn(&Uncached, bool),
}

/// One client's resumable watch: its chain, what later legs are made of, and its time.
struct Watch<'a, 'f, 'n, 'c> {
    hub: &'a Hub,
    req: &'a ApiRequest,
    path: &'a ResourcePath,
    route: &'a Route,
    mode: Resume,
    chain: Chain<'f, 'n, 'c>,
    /// How long the watch was held and the resourceVersion it resumed from, for the log line
    /// the chain's catch-up count writes.
    resumed: &'n RefCell<Option<(Duration, String)>>,
    /// `resource[.group]`, the series' label.
    resource: &'a str,
    /// The client's query, for the targets of later legs.
    raw_query: String,
    /// The client's original target: every leg's consistent-hashing key.
    affinity: String,
    /// The scope's list target: what the jitter is drawn on, one draw per scope and outage.
    scope: String,
    /// Headers for every later leg: the client's, hop-by-hop and Accept-Encoding dropped,
    /// copied once at start (Authorization kept: a client with its own credential resumes
    /// on it; the hub's identity gets the hub's credentials in `upstream`, as for any request).
    headers: Vec<(String, String)>,
    /// None: no timeoutSeconds (the watch lives until the client leaves or the hub stops).
    deadline: Option<Instant>,
    backoff: Backoff,
    /// A leg of this watch showed a bookmark: the cloud bookmarks it (the hub always asks),
    /// so a later leg silent for long is dead even before its own first bookmark.
    bookmarked: Arc<AtomicBool>,
    /// Bytes the cloud sent over every leg, counted once when the watch ends.
    traffic: u64,
    in_flight: Option<&'a InFlight>,
}

/// What a hold came to.
enum Held {
    /// A server is usable (and the jitter after an outage has passed): resume.
    Ready,
    /// The client's deadline came, or the hub is stopping: end the watch cleanly.
    End,
    /// The client went away.
    Gone(io::Error),
}

/// What a round after a 410 came to.
enum Rebuilt {
    /// The difference went out: resume from the list's resourceVersion.
    Resume,
    /// The list failed in the cloud: back off, resume again (a 410 again starts a round).
    Retry,
    /// No difference can be made: the watch ends cleanly (logged why).
    End,
    /// The client went away.
    Gone(io::Error),
}

/// What a resume request came to.
enum Step {
    /// A new leg (boxed: an answer is much larger than the other variant).
    Leg(Box<Answer>),
    /// Any other answer, read by `leg::classify`.
    Not(Resumed),
}

impl Watch<'_, '_, '_, '_> {
    /// Runs the watch to its end: Ok when it ended (its terminal chunk sent, or nothing more
    /// to send), Err when its client went away.
    fn run(&mut self, first: Answer) -> io::Result<()> {
        let ended = self.legs(first);
        if let Some(in_flight) = self.in_flight {
            in_flight.add_traffic(self.traffic);
        }
        match ended {
            Ok(clean) => self.chain.end(clean).map_err(io::Error::from),
            Err(e) => {
                let _ = self.chain.end(false);
                Err(e)
            }
        }
    }

    /// The legs, holds and resumes: Ok(whether the watch ends cleanly), Err when its client
    /// went away.
    fn legs(&mut self, first: Answer) -> io::Result<bool> {
        let mut next = Some(first);
        let mut hub_leg = false;
        let mut wait = None;
        loop {
            if let Some(answer) = next.take() {
                self.chain.new_leg(hub_leg);
                let before = self.chain.progress().last_rv.clone();
                let began = Instant::now();
                let end = self.leg(answer)?;
                // Only a leg that moved the client on proves the way to the cloud works: a
                // 200 followed by garbage, an in-stream 5xx or an early end is a failed
                // resume like any other, and waits the backoff (else a middlebox answering
                // 200 gets resumes at full speed). A quiet leg that lived long is no storm
                // either (a watch of a quiet scope with no bookmarks, closed by a proxy's
                // idle timeout): its next leg starts afresh.
                let moved =
                    self.chain.progress().last_rv != before || began.elapsed() >= LEG_PROVEN;
                if moved {
                    self.backoff.reset();
                }
                match end {
                    // The cloud's own refusal went to the client (the watch ends as before).
                    LegEnd::Refused(_) => return Ok(true),
                    LegEnd::Ended if self.due(DEADLINE_SLACK) => return Ok(true),
                    _ if !self.resumable() => {
                        // Nothing to resume from yet (no resourceVersion, initial events
                        // not through): as before, a clean end ends, a break aborts.
                        return Ok(end == LegEnd::Ended);
                    }
                    LegEnd::Expired => match self.rebuild(Instant::now()) {
                        Rebuilt::Resume => {}
                        Rebuilt::Retry => wait = Some(self.backoff.next_wait()),
                        Rebuilt::End => return Ok(true),
                        Rebuilt::Gone(e) => return Err(e),
                    },
                    _ if !moved => wait = Some(self.backoff.next_wait()),
                    _ => {}
                }
                log::debug!(
                    "a watch's leg ended ({end:?}); holding it resource=\"{}\" component=\"{}\" rv={}",
                    self.resource,
                    self.req.component,
                    self.chain.progress().last_rv
                );
            }
            let held_since = Instant::now();
            match self.hold(wait.take()) {
                Held::Ready => {}
                Held::End => return Ok(true),
                Held::Gone(e) => return Err(e),
            }
            match self.resume() {
                Step::Leg(answer) => {
                    let rv = self.chain.progress().last_rv.clone();
                    *self.resumed.borrow_mut() = Some((held_since.elapsed(), rv));
                    self.chain.mark_resumed(CATCH_UP_WINDOW);
                    hub_leg = true;
                    next = Some(*answer);
                }
                Step::Not(Resumed::Expired) => match self.rebuild(held_since) {
                    Rebuilt::Resume => {}
                    Rebuilt::Retry => wait = Some(self.backoff.next_wait()),
                    Rebuilt::End => return Ok(true),
                    Rebuilt::Gone(e) => return Err(e),
                },
                Step::Not(Resumed::Trouble(asked)) => {
                    // The server's Retry-After, never shorter than the backoff.
                    let backoff = self.backoff.next_wait();
                    wait = Some(asked.map_or(backoff, |asked| asked.max(backoff)));
                }
                Step::Not(Resumed::Refused(code)) => {
                    log::info!(
                        "watch ended: the cloud refused its resume with {code} resource=\"{}\" component=\"{}\"",
                        self.resource,
                        self.req.component
                    );
                    return Ok(true);
                }
                Step::Not(Resumed::Leg) => {}
            }
        }
    }

    /// One leg pumped into the chain, under the reaper: cancelled when the client leaves,
    /// when its server is found unhealthy, or when it has been silent too long after it
    /// showed bookmarks (a black-holed connection never ends a read by itself).
    fn leg(&mut self, mut answer: Answer) -> io::Result<LegEnd> {
        let clock = Arc::new(LegClock::new(Arc::clone(&self.bookmarked)));
        let _watched = answer.cancel.take().map(|cancel| {
            let cloud = Arc::clone(&self.hub.cloud);
            let backend = answer.backend;
            let seen = Arc::clone(&clock);
            let stale = move || !cloud.healthy(backend) || seen.silent_after_bookmarks();
            self.hub
                .reaper
                .watch_leg(self.chain.probe(), cancel, Box::new(stale))
        });
        let mut body = Touch {
            inner: &mut answer.body,
            clock: &clock,
        };
        let mut reads = BodyReads::watch();
        match pump(&mut body, &mut reads, &mut self.traffic, &mut self.chain) {
            Pumped::Stopped(Stop::Gone(e)) => Err(e),
            // A stage inside cut the stream (the filters could not read it): it ends, as a
            // relayed watch does.
            Pumped::Stopped(stop) if !matches!(stop, Stop::EndOfLeg) => Ok(LegEnd::Refused(0)),
            Pumped::BrokeOff(e) => {
                log::debug!(
                    "a watch's leg broke off: {e} resource=\"{}\"",
                    self.resource
                );
                Ok(self.chain.leg_end().unwrap_or(LegEnd::BrokeOff))
            }
            _ => Ok(self.chain.leg_end().unwrap_or(LegEnd::BrokeOff)),
        }
    }

    /// Waits until a server is usable: at once when it is (a leg cut while the cloud stayed
    /// up resumes unnoticed), after the jitter when the hold had to wait for it (an outage),
    /// and never before `backoff` has passed (a failed resume). Looks at the client, its
    /// deadline and the hub's shutdown every tick; sends a bookmark every
    /// `HELD_BOOKMARK_EVERY` when the client asked for them.
    #[inline(never)]
    fn hold(&mut self, backoff: Option<Duration>) -> Held {
        let mut until = Instant::now() + backoff.unwrap_or_default();
        let mut had_to_wait = false;
        let mut jittered = false;
        let mut next_bookmark = Instant::now() + leg::HELD_BOOKMARK_EVERY;
        loop {
            let now = Instant::now();
            if self.hub.shutdown.load(Ordering::Relaxed) || self.due(Duration::ZERO) {
                return Held::End;
            }
            // Looked at during a backoff too: a resume that failed at the outage's start
            // waits out the outage like the others, and gets the same jitter.
            let usable = self.hub.cloud.any_healthy();
            had_to_wait |= !usable;
            if now >= until && usable {
                if !had_to_wait || jittered {
                    return Held::Ready;
                }
                jittered = true;
                until = now + leg::jitter(&self.scope, self.hub.cloud.recoveries());
                continue;
            }
            if now >= next_bookmark {
                next_bookmark = now + leg::HELD_BOOKMARK_EVERY;
                if let Err(e) = self.held_bookmark() {
                    return Held::Gone(e);
                }
            }
            // To the instant of a jitter or backoff; while waiting for a usable server, a
            // quarter tick, so the watches of a scope see it within one round's gather.
            let mut tick = TICK.min(until.saturating_duration_since(now).max(HEALTH_POLL));
            if let Some(deadline) = self.deadline {
                tick = tick.min(deadline.saturating_duration_since(now));
            }
            if self.client_gone(tick) {
                return Held::Gone(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the client went away while its watch was held",
                ));
            }
        }
    }

    /// One resume request from the last delivered resourceVersion, through the cloud client
    /// (failover, health reports, link counts as for any request).
    #[inline(never)]
    fn resume(&mut self) -> Step {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()).as_secs().max(1));
        let target = leg::resume_target(
            self.path,
            &self.raw_query,
            &self.chain.progress().last_rv,
            left,
        );
        let stream = left
            .map(Duration::from_secs)
            .unwrap_or(WATCH_DEFAULT)
            .saturating_add(WATCH_MARGIN);
        let outgoing = crate::upstream::Outgoing {
            method: "GET",
            verb: crate::request::Verb::Watch,
            path_and_query: &target,
            headers: &self.headers,
            accept: self.route.upstream_accept,
            encoding: crate::upstream::Encoding::AsClient,
            body: None,
            deadline: Deadline::Stream(stream),
            identity: self.route.identity,
            // Every leg keys as the client's request, so it stays on the same server.
            affinity: Some(&self.affinity),
        };
        match self.hub.cloud.send(outgoing) {
            Ok(answer) => {
                let read = leg::classify(
                    answer.status,
                    answer.is_json(),
                    answer.is_gzip(),
                    answer.header("retry-after"),
                );
                match read {
                    Resumed::Leg => Step::Leg(Box::new(answer)),
                    other => {
                        log::debug!(
                            "a watch's resume was answered {}: {other:?} resource=\"{}\"",
                            answer.status,
                            self.resource
                        );
                        Step::Not(other)
                    }
                }
            }
            Err(e) => {
                log::debug!(
                    "a watch's resume failed: {e} resource=\"{}\"",
                    self.resource
                );
                Step::Not(Resumed::Trouble(None))
            }
        }
    }

    /// The cloud's history is gone: a cache agent's view is rebuilt by one list of its scope
    /// (shared by the watches of the scope whose 410 came together) and the difference
    /// against its component's cache, which holds exactly what the client was sent once the
    /// writer applied it (the barrier) and the cache session was never dropped. Anyone
    /// else's watch ends cleanly, with one line saying why.
    #[inline(never)]
    fn rebuild(&mut self, held_since: Instant) -> Rebuilt {
        let why = match self.mode {
            Resume::ResumeOnly => match self.route.cache {
                Err(NoCacheReason::Transformed) => "a transformed (as=) answer",
                Err(NoCacheReason::NotAgent) => "not a cache agent",
                _ => "its answer is not cached",
            },
            Resume::Rebuild if !self.chain.inner_mut().inner_mut().session_intact() => {
                "its cache session was dropped"
            }
            // Every event the client was sent is applied: the cache is its baseline.
            Resume::Rebuild if !self.chain.inner_mut().inner_mut().sync(BARRIER_WAIT) => {
                "the cache writer did not catch up"
            }
            Resume::Rebuild => match self.round(held_since) {
                Ok(rebuilt) => return rebuilt,
                Err(why) => why,
            },
        };
        log::info!(
            "watch ended: the cloud's history is gone and the hub cannot rebuild the client's view: {why} resource=\"{}\" component=\"{}\" rv={}",
            self.resource,
            self.req.component,
            self.chain.progress().last_rv
        );
        Rebuilt::End
    }

    /// One round: the scope's list (led or followed) and this client's difference; the
    /// counters and the resume line. Err: why no difference can be made.
    fn round(&mut self, held_since: Instant) -> Result<Rebuilt, &'static str> {
        let store = self.hub.offline.as_ref().map(|o| &*o.store);
        let (Some(store), Some(collection)) = (store, self.route.collection()) else {
            return Err("no disk cache for its component");
        };
        let progress = self.chain.progress();
        let client_rv = progress.last_rv.parse().unwrap_or(0);
        let kind = (progress.kind.clone(), progress.api_version.clone());
        let list_target = leg::list_target(self.path, &self.raw_query);
        let ctx = RoundCtx {
            cloud: &*self.hub.cloud,
            rounds: &self.hub.rounds,
            key: scope_key(self.req, self.path, self.route, &list_target),
            list_target,
            headers: &self.headers,
            identity: self.route.identity,
            store,
            collection,
            namespace: self.path.namespace.as_deref(),
            selectors: &self.route.selectors,
            client_rv,
            pass_bookmarks: self.req.query.allow_watch_bookmarks,
            kind: (!kind.0.is_empty()).then_some((kind.0.as_str(), kind.1.as_str())),
            deadline: self.deadline,
            shutdown: &self.hub.shutdown,
        };
        // A difference cut short leaves the client where it was before the round (its
        // events do not move the resume point, `diff::Emit`): kept here as well, so that no
        // way out of the round but a whole difference moves it.
        let before = self.chain.progress().last_rv.clone();
        let caught_up = diff::catch_up(&ctx, &mut self.chain);
        if !matches!(caught_up, CatchUp::Done { .. }) {
            self.chain.progress_mut().last_rv = before;
        }
        match caught_up {
            CatchUp::Done {
                list_rv,
                added,
                modified,
                deleted,
                listed,
            } => {
                if listed {
                    WATCH_SERIES.relisted(self.resource);
                }
                WATCH_SERIES.synthesized(self.resource, added + modified + deleted);
                log::info!(
                    "watch resumed resource=\"{}\" component=\"{}\" held={:.1}s caught_up={} via=difference list_rv={list_rv} added={added} modified={modified} deleted={deleted}",
                    self.resource,
                    self.req.component,
                    held_since.elapsed().as_secs_f64(),
                    added + modified + deleted,
                );
                Ok(Rebuilt::Resume)
            }
            CatchUp::ClientGone(stop) => Ok(Rebuilt::Gone(stop.into())),
            CatchUp::Retry(why) => {
                log::info!(
                    "a watch's list after the cloud's history was gone failed, retrying: {why} resource=\"{}\"",
                    self.resource
                );
                Ok(Rebuilt::Retry)
            }
            CatchUp::Unusable(why) => {
                log::info!(
                    "watch ended: the cloud's history is gone and the hub cannot rebuild the client's view: {why} resource=\"{}\" component=\"{}\"",
                    self.resource,
                    self.req.component
                );
                Ok(Rebuilt::End)
            }
        }
    }

    /// A bookmark at the last delivered resourceVersion, when the client asked for them and
    /// the kind of its objects is known.
    #[inline(never)]
    fn held_bookmark(&mut self) -> io::Result<()> {
        let progress = self.chain.progress();
        if !self.req.query.allow_watch_bookmarks
            || progress.kind.is_empty()
            || progress.last_rv.is_empty()
        {
            return Ok(());
        }
        let rv = progress.last_rv.clone();
        let event = serde_json::json!({
            "type": "BOOKMARK",
            "object": {
                "kind": progress.kind,
                "apiVersion": progress.api_version,
                "metadata": {"resourceVersion": rv},
            },
        });
        self.chain
            .emit(event.to_string().as_bytes(), &rv)
            .map_err(io::Error::from)
    }

    /// Whether the client hung up, waiting up to `wait`.
    fn client_gone(&mut self, wait: Duration) -> bool {
        self.chain.client_gone(wait)
    }

    /// A later leg can take up from what the client has: a resourceVersion is known and a
    /// watch-list's initial events are through.
    fn resumable(&self) -> bool {
        let progress = self.chain.progress();
        !progress.last_rv.is_empty() && progress.initial_done
    }

    /// The client's deadline is at most `slack` away.
    fn due(&self, slack: Duration) -> bool {
        self.deadline
            .is_some_and(|d| d.saturating_duration_since(Instant::now()) <= slack)
    }
}

/// When a leg last brought bytes, and whether a leg of its watch showed a bookmark, for the
/// reaper's staleness rule. Whole seconds in a u32: 64-bit atomics are missing on some
/// 32-bit CPUs.
struct LegClock {
    started: Instant,
    last: AtomicU32,
    /// The watch's: shared by its legs.
    bookmarked: Arc<AtomicBool>,
}

impl LegClock {
    fn new(bookmarked: Arc<AtomicBool>) -> LegClock {
        LegClock {
            started: Instant::now(),
            last: AtomicU32::new(0),
            bookmarked,
        }
    }

    fn seconds(&self) -> u32 {
        u32::try_from(self.started.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Silent for longer than `LEG_SILENCE` once the watch showed a bookmark, on this leg or
    /// an earlier one (the apiserver bookmarks each watcher about once a minute).
    fn silent_after_bookmarks(&self) -> bool {
        let silent = silence(self.seconds(), self.last.load(Ordering::Relaxed));
        self.bookmarked.load(Ordering::Relaxed) && u64::from(silent) > leg::LEG_SILENCE.as_secs()
    }
}

/// Seconds since the last read, at `now`: the clock read once by the caller, and nothing when
/// the reader stored a later second meanwhile (the reaper's thread must not underflow).
fn silence(now: u32, last: u32) -> u32 {
    now.saturating_sub(last)
}

/// A leg's body that notes each read on its clock.
struct Touch<'a, R> {
    inner: &'a mut R,
    clock: &'a LegClock,
}

impl<R: Read> Read for Touch<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.clock
                .last
                .store(self.clock.seconds(), Ordering::Relaxed);
            // Looked for until seen once (a bookmark split across reads is found in the next).
            if !self.clock.bookmarked.load(Ordering::Relaxed)
                && buf[..n].windows(10).any(|w| w == b"\"BOOKMARK\"")
            {
                self.clock.bookmarked.store(true, Ordering::Relaxed);
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_never_underflows() {
        assert_eq!(silence(10, 4), 6);
        // The reader stored second 6 after the reaper read second 5.
        assert_eq!(silence(5, 6), 0);
    }

    #[test]
    fn a_leg_after_one_that_showed_bookmarks_goes_stale_when_silent() {
        let Some(long_ago) = Instant::now().checked_sub(leg::LEG_SILENCE * 2) else {
            return; // A clock younger than the silence: nothing to test with.
        };
        let bookmarked = Arc::new(AtomicBool::new(false));
        // The first leg brings a bookmark.
        let first = LegClock::new(Arc::clone(&bookmarked));
        let mut body: &[u8] = br#"{"type":"BOOKMARK","object":{}}"#;
        let mut touch = Touch {
            inner: &mut body,
            clock: &first,
        };
        io::copy(&mut touch, &mut io::sink()).unwrap();
        // The next leg has been silent ever since it began, long ago, and never bookmarked.
        let next = LegClock {
            started: long_ago,
            ..LegClock::new(Arc::clone(&bookmarked))
        };
        assert!(next.silent_after_bookmarks());
        // A watch that never showed a bookmark: no silence rule (old apiservers, proxies).
        let never = LegClock {
            started: long_ago,
            ..LegClock::new(Arc::new(AtomicBool::new(false)))
        };
        assert!(!never.silent_after_bookmarks());
    }
}
