//! Leader hub health and the follower's fallback order (YurtHub's
//! `pkg/yurthub/healthchecker/leaderhub`): a leader is healthy when it answers its probe
//! within 2 s, checked every 20 s and at once when the leader list changes; a follower reads
//! from the usable leader rendezvous hashing of its node name picks; and a pool-scope request
//! tries the leader, then the cloud, then the cache.
//!
//! Design decisions:
//! - The probe goes through the [`Prober`] trait, so rounds are tested without sockets;
//!   `clients::leader_probe` is the real one (`GET /v1/pool/freshness`), [`TcpDialer`] the
//!   TCP dial YurtHub makes (any [`Dialer`] is a prober that never asks). A round probes the
//!   leaders one after another: a pool has one to a few leaders, so a black-holed round costs
//!   n × 2 s on the checker's thread, not a thread per leader.
//! - **Only fresh leaders** (issue 32): a leader tells how long ago its cloud watch of each
//!   pool-scope resource last brought an event or a bookmark, and whether it reaches the
//!   cloud. A follower skips, for one resource, a leader that tells and whose view of it is
//!   older than `--pool-leader-max-staleness` (its cloud watch shows bookmarks, so an old age
//!   is a hung watch, not a quiet resource), or that reaches no cloud; it takes the next
//!   leader or the cloud, and comes back when a round finds it fresh. An age not known yet
//!   (warming) is not stale: the warming rules govern it. What a leader told is kept as
//!   instants (the probe's less each age), so a leader that answers its dial but not the
//!   question ages past the bound; the staleness each round judged is kept too, so a change
//!   that time made moves followers as one a probe brought. A leader that tells but does not
//!   list a resource does not cache it (it would answer 503): not read it from. A leader
//!   that does not tell (any status but 200, not JSON, no answer in time before it ever
//!   told: YurtHub, an older tinyhub) is judged by reachability and is not asked again
//!   until the leader list changes: a YurtHub leader forwards unknown paths to its cloud,
//!   which would spend its uplink every round.
//! - **Rendezvous, not round-robin**: each usable leader scores
//!   `splitmix64(fnv1a(node) ^ fnv1a(leader))` (`hashing`) and the highest wins, so a
//!   follower reads all its resources from one leader, followers spread evenly, and a lost
//!   (or stale) leader moves only its own followers, who come back with it.
//! - Per-leader flags are atomics in an `Arc<[Slot]>` replaced whole when the list
//!   changes: request threads read them without a lock held across anything; a round on a
//!   list just replaced writes to slots nobody reads any more, which is harmless. A new
//!   list is probed before it is published (as YurtHub's `UpdateBackends`), so a follower
//!   never sends to a leader it has not seen answer.
//! - A forwarded request that cannot connect marks its leader unhealthy until the next
//!   round ([`LeaderHealth::mark_unreachable`]): the next request goes to the cloud at once
//!   instead of waiting up to 20 s.
//! - **A leader that refuses this node** (its TLS handshake fails, 401/403) keeps passing the
//!   TCP probe, so health alone would send the feeders back to it every round and tear their
//!   cloud watches down each time. [`LeaderHealth::refused`] sets it aside for a backoff
//!   (20 s doubling to 10 min, warned about once) that no round clears; a new leader list
//!   (the ConfigMap changed) starts afresh, and an answer served resets it.
//! - Memory: one slot is a [`Leader`], its socket address, flags, its refusal backoff and
//!   its last freshness (a few dozen bytes per pool-scope resource), about 200 bytes on a
//!   32-bit router plus the node name.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::leader::{Leader, Source};
use crate::hashing::{FNV_OFFSET, fnv1a, rendezvous};

/// Time between health rounds.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(20);
/// Time one probe (a TCP connect, or the freshness GET) may take.
pub(crate) const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// A leader's first refusal sets it aside this long; each next one doubles it.
const REFUSED_FIRST: Duration = Duration::from_secs(20);
/// The longest a refusing leader is set aside.
const REFUSED_MAX: Duration = Duration::from_secs(600);

/// How fresh a leader's pool caches are, as it tells (`GET /v1/pool/freshness`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Freshness {
    /// It reaches a cloud server.
    pub cloud: bool,
    /// Per pool-scope resource it caches.
    pub resources: Vec<ResourceAge>,
}

impl Freshness {
    /// The JSON a leader answers on its multiplexer port (`GET /v1/pool/freshness`):
    /// `{"cloud":true,"resources":[{"resource":"services.v1.core","ageSeconds":12,
    /// "bookmarks":true}]}`, ages in whole seconds, an unknown one `null`.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let resources: Vec<serde_json::Value> = self
            .resources
            .iter()
            .map(|r| {
                serde_json::json!({
                    "resource": r.resource,
                    "ageSeconds": r.age.map(|a| a.as_secs()),
                    "bookmarks": r.bookmarks,
                })
            })
            .collect();
        let value = serde_json::json!({"cloud": self.cloud, "resources": resources});
        // A `Value` of strings, numbers and booleans always serializes.
        serde_json::to_vec(&value).unwrap_or_default()
    }

    /// [`Freshness::to_json`] read back; None for anything else (a YurtHub leader's
    /// answer: it forwards the path to its cloud).
    pub(crate) fn parse(body: &[u8]) -> Option<Freshness> {
        #[derive(serde::Deserialize)]
        struct Wire {
            cloud: bool,
            resources: Vec<WireAge>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct WireAge {
            resource: String,
            age_seconds: Option<f64>,
            #[serde(default)]
            bookmarks: bool,
        }
        let wire: Wire = serde_json::from_slice(body).ok()?;
        let resources = wire
            .resources
            .into_iter()
            .map(|r| ResourceAge {
                resource: r.resource,
                // A negative or absurd age is no age.
                age: r
                    .age_seconds
                    .and_then(|s| Duration::try_from_secs_f64(s).ok()),
                bookmarks: r.bookmarks,
            })
            .collect();
        Some(Freshness {
            cloud: wire.cloud,
            resources,
        })
    }
}

/// One pool cache's age on a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceAge {
    /// The resource's kind directory (`services.v1.core`: `names::Gvr::dir_name`).
    pub resource: String,
    /// Since its cloud watch last brought an event or a bookmark (or it listed); None:
    /// not yet (warming).
    pub age: Option<Duration>,
    /// Its cloud watch has shown bookmarks: a silent watch is a hung one.
    pub bookmarks: bool,
}

/// What one probe of a leader found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing answered in time.
    Unreachable,
    /// It answers, and told how fresh it is.
    Told(Freshness),
    /// It answers, but does not tell (a status other than 200, not JSON: YurtHub or an
    /// older tinyhub): not asked again until the leader list changes.
    Silent,
    /// It listens (its TCP dial opens) but did not answer the question within
    /// [`DIAL_TIMEOUT`]: a loaded leader, or a YurtHub leader forwarding the path to its
    /// cloud. One not known to tell yet is then asked no more, as [`Probe::Silent`].
    Slow,
    /// It answers, but was not asked or could not tell this time (a TCP dial only, no
    /// credentials yet, its TLS handshake refused this node, a broken-off answer).
    Reachable,
}

/// Probes a leader.
pub(crate) trait Prober: Send + Sync {
    /// Whether the leader at `addr` answers within [`DIAL_TIMEOUT`], and, when `ask`, how
    /// fresh it is.
    fn probe(&self, addr: SocketAddr, ask: bool) -> Probe;
}

/// Opens (and closes) a connection, to tell whether something listens.
pub(crate) trait Dialer: Send + Sync {
    /// Whether a TCP connection to `addr` opened within `timeout`.
    fn reachable(&self, addr: SocketAddr, timeout: Duration) -> bool;
}

/// A dialer is a prober that never asks.
impl<D: Dialer> Prober for D {
    fn probe(&self, addr: SocketAddr, _ask: bool) -> Probe {
        if self.reachable(addr, DIAL_TIMEOUT) {
            Probe::Reachable
        } else {
            Probe::Unreachable
        }
    }
}

/// The real dialer: a TCP connect, closed at once.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TcpDialer;

impl Dialer for TcpDialer {
    fn reachable(&self, addr: SocketAddr, timeout: Duration) -> bool {
        // Dropped at once: the leader sees a connection that closes before its handshake.
        TcpStream::connect_timeout(&addr, timeout).is_ok()
    }
}

/// What a leader tells of its freshness, as this node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Telling {
    /// Not asked yet, or it could not tell so far.
    Unknown,
    /// It does not tell: judged by reachability, not asked again.
    Silent,
    /// What it told at its last answer.
    Told(Told),
}

/// A leader's last answer, its ages turned into instants (the probe's less the age), so
/// that an answer not renewed (the leader answers its dial, not the question) ages.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Told {
    /// It reaches a cloud server.
    cloud: bool,
    /// Per pool-scope resource it caches: its kind directory, when its cloud watch last
    /// spoke (None: warming), whether that watch shows bookmarks.
    resources: Vec<(String, Option<Instant>, bool)>,
}

impl Told {
    fn new(asked: Instant, freshness: Freshness) -> Told {
        Told {
            cloud: freshness.cloud,
            resources: freshness
                .resources
                .into_iter()
                .map(|r| {
                    let at = r.age.and_then(|age| asked.checked_sub(age));
                    (r.resource, at, r.bookmarks)
                })
                .collect(),
        }
    }
}

/// What a leader that tells is judged stale for: whether it reaches a cloud, and per
/// resource it lists, whether its view is older than the bound. A resource it does not list
/// is not cached there (a 503 to a follower): stale for it too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Staleness {
    cloud: bool,
    resources: Vec<(String, bool)>,
}

impl Staleness {
    /// Stale for `resource` (None: for any it lists).
    fn stale(&self, resource: Option<&str>) -> bool {
        !self.cloud
            || match resource {
                None => self.resources.iter().any(|r| r.1),
                Some(want) => self
                    .resources
                    .iter()
                    .find(|r| r.0 == want)
                    .is_none_or(|r| r.1),
            }
    }

    /// The resources it is stale for, for logs.
    fn stale_ones(&self) -> Vec<&str> {
        self.resources
            .iter()
            .filter(|r| r.1)
            .map(|r| r.0.as_str())
            .collect()
    }
}

/// One leader and whether it answered its last probe.
#[derive(Debug)]
struct Slot {
    leader: Leader,
    addr: SocketAddr,
    /// Its seed in rendezvous hashing (FNV-1a-64 of its node name).
    seed: u64,
    healthy: AtomicBool,
    /// It refused this node: not used before this, and the backoff of its next refusal.
    /// A mutex taken per feeder request, never on a client's request.
    refused: Mutex<Option<(Instant, Duration)>>,
    /// Whether it tells, and what it told (its ages as instants). A mutex taken per round
    /// and per feeder choice.
    telling: Mutex<Telling>,
    /// What the last round judged it stale for (None: not judged): a change moves
    /// followers, whether a probe brought it or time did.
    judged: Mutex<Option<Staleness>>,
}

impl Slot {
    fn new(leader: &Leader, port: u16) -> Slot {
        Slot {
            leader: leader.clone(),
            addr: leader.addr(port),
            seed: fnv1a(FNV_OFFSET, leader.node.as_bytes()),
            healthy: AtomicBool::new(false),
            refused: Mutex::new(None),
            telling: Mutex::new(Telling::Unknown),
            judged: Mutex::new(None),
        }
    }

    /// It refused this node (`why`): see [`LeaderHealth::refused`]. True when it was usable
    /// until now.
    fn refuse(&self, why: &str) -> bool {
        let was = self.usable();
        let mut refused = crate::lock(&self.refused);
        let backoff = match *refused {
            None => {
                log::warn!(
                    "leader hub {} ({}) refuses this node ({why}): pool-scope reads go to the cloud, the leader is asked again after a backoff of {} s doubling to {} s",
                    self.leader.node,
                    self.addr,
                    REFUSED_FIRST.as_secs(),
                    REFUSED_MAX.as_secs()
                );
                REFUSED_FIRST
            }
            Some((until, _)) if Instant::now() < until => return false,
            Some((_, last)) => {
                log::debug!(
                    "leader hub {} ({}) refuses this node again: {why}",
                    self.leader.node,
                    self.addr
                );
                (last * 2).min(REFUSED_MAX)
            }
        };
        *refused = Some((Instant::now() + backoff, backoff));
        was
    }

    /// It refused this node and has not served it since: probed by a dial only, so that
    /// rounds spend no handshake on it (the feeders ask it again after their backoff).
    fn has_refused(&self) -> bool {
        crate::lock(&self.refused).is_some()
    }

    /// Whether its view of `resource` (a kind directory; None: any) is too old to read
    /// from by `max` (zero: never): see [`Slot::staleness`].
    fn stale(&self, resource: Option<&str>, max: Duration) -> bool {
        self.staleness(max).is_some_and(|s| s.stale(resource))
    }

    /// What it is stale for by `max`; None when it does not tell (yet) or `max` is zero. A
    /// resource is stale when its cloud watch shows bookmarks (so a silent watch is a hung
    /// one, not a quiet resource) and last spoke more than `max` ago by the leader's last
    /// answer, aged since; an age not known yet (warming) is not stale.
    fn staleness(&self, max: Duration) -> Option<Staleness> {
        if max.is_zero() {
            return None;
        }
        let telling = crate::lock(&self.telling);
        let Telling::Told(told) = &*telling else {
            return None;
        };
        Some(Staleness {
            cloud: told.cloud,
            resources: told
                .resources
                .iter()
                .map(|(resource, at, bookmarks)| {
                    let old = *bookmarks && at.is_some_and(|at| at.elapsed() > max);
                    (resource.clone(), old)
                })
                .collect(),
        })
    }

    /// It answered its last probe and is not set aside for a refusal.
    fn usable(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
            && crate::lock(&self.refused).is_none_or(|(until, _)| Instant::now() >= until)
    }
}

/// The leaders' health, shared by the checker, the ConfigMap watcher and request threads.
#[derive(Debug)]
pub(crate) struct LeaderHealth {
    /// The multiplexer port the leaders serve on (this hub's own `--multiplexer-port`, as in
    /// YurtHub).
    port: u16,
    slots: RwLock<Arc<[Slot]>>,
    /// This node's key in rendezvous hashing (FNV-1a-64 of its name).
    key: u64,
    /// `--pool-leader-max-staleness` (zero: off).
    max_staleness: Duration,
}

/// Probes every slot once, in order, and stores the outcomes; true when one changed (its
/// health, or what it is stale for).
fn round(slots: &[Slot], prober: &dyn Prober, max_staleness: Duration) -> bool {
    let mut changed = false;
    for slot in slots {
        let silent = matches!(*crate::lock(&slot.telling), Telling::Silent);
        let ask = !silent && !slot.has_refused();
        let asked = Instant::now();
        let probe = prober.probe(slot.addr, ask);
        let up = probe != Probe::Unreachable;
        {
            let mut telling = crate::lock(&slot.telling);
            let silent = match probe {
                Probe::Told(freshness) => {
                    *telling = Telling::Told(Told::new(asked, freshness));
                    false
                }
                Probe::Silent => true,
                // Listens, but did not answer in time: one not known to tell is taken as
                // one that does not (a YurtHub leader forwarding the path to its cloud over
                // a slow link); one that told keeps what it told, which ages.
                Probe::Slow => *telling == Telling::Unknown,
                // Nothing new: what it told ages; an unreachable leader is not read from.
                Probe::Unreachable | Probe::Reachable => false,
            };
            if silent && *telling != Telling::Silent {
                *telling = Telling::Silent;
                log::info!(
                    "leader hub {} ({}) does not tell how fresh it is: judged by whether it answers, and not asked again until the leader list changes",
                    slot.leader.node,
                    slot.addr
                );
            }
        }
        let was = slot.healthy.swap(up, Ordering::AcqRel);
        if was != up {
            changed = true;
            let state = if up { "healthy" } else { "unhealthy" };
            log::info!("leader hub {} ({}) is {state}", slot.leader.node, slot.addr);
        }
        let after = slot.staleness(max_staleness);
        let before = std::mem::replace(&mut *crate::lock(&slot.judged), after.clone());
        if before != after {
            changed = true;
            log_staleness(slot, before.as_ref(), after.as_ref(), max_staleness);
        }
    }
    changed
}

/// One line when what `slot` is stale for changed from `before` to `after`.
fn log_staleness(
    slot: &Slot,
    before: Option<&Staleness>,
    after: Option<&Staleness>,
    max: Duration,
) {
    fn summary(s: Option<&Staleness>) -> Option<(bool, Vec<&str>)> {
        s.map(|s| (!s.cloud, s.stale_ones()))
    }
    let (was, now) = (summary(before), summary(after));
    if was.as_ref().is_none_or(|w| !w.0 && w.1.is_empty())
        && now.as_ref().is_none_or(|n| !n.0 && n.1.is_empty())
    {
        // Only what it lists changed (or it was first judged, fresh).
        return;
    }
    match now {
        Some((true, _)) => log::info!(
            "leader hub {} ({}) reaches no cloud: its followers read elsewhere",
            slot.leader.node,
            slot.addr
        ),
        Some((false, stale)) if !stale.is_empty() => log::info!(
            "leader hub {} ({})'s view of {} is older than {} s (--pool-leader-max-staleness): its followers read them elsewhere",
            slot.leader.node,
            slot.addr,
            stale.join(", "),
            max.as_secs_f64()
        ),
        _ => log::info!(
            "leader hub {} ({}) is fresh again",
            slot.leader.node,
            slot.addr
        ),
    }
}

impl LeaderHealth {
    /// No leader yet; leaders serve on `port`; this node is `node`; a leader whose view is
    /// older than `max_staleness` (zero: no check) is skipped.
    pub(crate) fn new(port: u16, node: &str, max_staleness: Duration) -> LeaderHealth {
        LeaderHealth {
            port,
            slots: RwLock::new(Arc::from(Vec::new())),
            key: fnv1a(FNV_OFFSET, node.as_bytes()),
            max_staleness,
        }
    }

    fn slots(&self) -> Arc<[Slot]> {
        // A plain swap of an Arc: a panicking writer cannot leave it half-written.
        Arc::clone(&self.slots.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the leaders with `leaders`, probed first (synchronously, as YurtHub does
    /// when the list changes: up to 2 s per leader on the caller's thread); then they are the
    /// ones picked from.
    pub(crate) fn set_leaders(&self, leaders: &[Leader], prober: &dyn Prober) {
        let slots: Vec<Slot> = leaders.iter().map(|l| Slot::new(l, self.port)).collect();
        round(&slots, prober, self.max_staleness);
        *self.slots.write().unwrap_or_else(PoisonError::into_inner) = Arc::from(slots);
    }

    /// One health round over the current leaders (the checker's tick); true when a
    /// leader's health, or what it is stale for, changed.
    pub(crate) fn check(&self, prober: &dyn Prober) -> bool {
        round(&self.slots(), prober, self.max_staleness)
    }

    /// At least one leader answered its last probe and is not set aside for a refusal
    /// (tests).
    #[cfg(test)]
    pub(crate) fn any_healthy(&self) -> bool {
        self.slots().iter().any(Slot::usable)
    }

    /// At least one leader answered its last probe, set aside for a refusal or not.
    pub(crate) fn any_answering(&self) -> bool {
        self.slots()
            .iter()
            .any(|s| s.healthy.load(Ordering::Acquire))
    }

    /// Whether the ConfigMap names any leader.
    pub(crate) fn any_leader(&self) -> bool {
        !self.slots().is_empty()
    }

    /// The address of the leader this node reads `resource` (a kind directory; None: any)
    /// from: of the leaders usable and fresh for it, the one rendezvous hashing of this
    /// node's name picks, other than `except` (which takes the next); None when there is
    /// none (tests: the route asks [`LeaderHealth::pick_avoiding`]).
    #[cfg(test)]
    pub(crate) fn pick(
        &self,
        resource: Option<&str>,
        except: Option<SocketAddr>,
    ) -> Option<SocketAddr> {
        self.pick_avoiding(resource, except.as_slice())
    }

    /// [`LeaderHealth::pick`] other than any of `avoid`.
    pub(crate) fn pick_avoiding(
        &self,
        resource: Option<&str>,
        avoid: &[SocketAddr],
    ) -> Option<SocketAddr> {
        self.slots()
            .iter()
            .filter(|s| !avoid.contains(&s.addr) && self.usable(s, resource))
            .max_by_key(|s| rendezvous(self.key, s.seed))
            .map(|s| s.addr)
    }

    /// Whether `slot` may be read `resource` from: usable, and not stale for it.
    fn usable(&self, slot: &Slot, resource: Option<&str>) -> bool {
        slot.usable() && !slot.stale(resource, self.max_staleness)
    }

    /// When the leader at `addr` last heard the cloud's word on `resource` (a kind
    /// directory), by what it told at its last probe (the probe's instant less the age it
    /// told): a follower reading from it is as fresh as that. None when it does not tell,
    /// or knows no age yet.
    pub(crate) fn synced_at(&self, addr: SocketAddr, resource: &str) -> Option<Instant> {
        let slots = self.slots();
        let slot = slots.iter().find(|s| s.addr == addr)?;
        let telling = crate::lock(&slot.telling);
        let Telling::Told(told) = &*telling else {
            return None;
        };
        told.resources.iter().find(|r| r.0 == resource)?.1
    }

    /// Whether the leader at `addr` tells how fresh it is (it answered the question).
    pub(crate) fn tells(&self, addr: SocketAddr) -> bool {
        self.slots()
            .iter()
            .any(|s| s.addr == addr && matches!(*crate::lock(&s.telling), Telling::Told(_)))
    }

    /// The leader at `addr` refused this node (`why`): set aside for a backoff (20 s, doubled
    /// by each next refusal up to 10 min) that a TCP round does not clear. Warned about the
    /// first time only. A refusal while set aside (another feeder's request that was under
    /// way) changes nothing. True when it was usable until now.
    pub(crate) fn refused(&self, addr: SocketAddr, why: &str) -> bool {
        let mut changed = false;
        for slot in self.slots().iter().filter(|s| s.addr == addr) {
            changed |= slot.refuse(why);
        }
        changed
    }

    /// The leader at `addr` served this node: a refusal backoff starts afresh.
    pub(crate) fn served(&self, addr: SocketAddr) {
        for slot in self.slots().iter().filter(|s| s.addr == addr) {
            let mut refused = crate::lock(&slot.refused);
            if refused.is_some() {
                log::info!(
                    "leader hub {} ({addr}) serves this node again",
                    slot.leader.node
                );
                *refused = None;
            }
        }
    }

    /// A request to `addr` could not connect: unhealthy until a round sees it answer. True
    /// when it was healthy until now.
    pub(crate) fn mark_unreachable(&self, addr: SocketAddr) -> bool {
        let mut changed = false;
        for slot in self.slots().iter().filter(|s| s.addr == addr) {
            if slot.healthy.swap(false, Ordering::AcqRel) {
                changed = true;
                log::info!("leader hub {} ({addr}) is unreachable", slot.leader.node);
            }
        }
        changed
    }

    /// The leaders and whether each is usable (healthy, not set aside for a refusal; tests).
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Vec<(Leader, bool)> {
        self.slots()
            .iter()
            .map(|s| (s.leader.clone(), s.usable()))
            .collect()
    }
}

/// `https://<addr>` for a picked leader (an IPv6 address in brackets).
pub(crate) fn leader_url(addr: SocketAddr) -> String {
    format!("https://{addr}")
}

/// The checker's loop: a round every `interval` until `stop` fires or closes; `after` is
/// told after each round whether a leader's health changed.
pub(crate) fn run_checker(
    health: &LeaderHealth,
    prober: &dyn Prober,
    interval: Duration,
    stop: &Receiver<()>,
    after: &mut dyn FnMut(bool),
) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => after(health.check(prober)),
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Where one try of a pool-scope request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// A healthy leader hub (picked by [`LeaderHealth::pick`]).
    Leader,
    /// A healthy cloud server.
    Cloud,
    /// The local cache (edge mode only: the caller's policy).
    Cache,
}

/// The order in which a pool-scope request tries its sources: the first is where it goes,
/// the next ones where it goes when that fails before answering. 3 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    hops: [Option<Hop>; 3],
}

impl Plan {
    /// The hops, in order (tests only: the feeders take the first).
    #[cfg(test)]
    pub(crate) fn iter(self) -> impl Iterator<Item = Hop> {
        self.hops.into_iter().flatten()
    }

    /// Where the request goes first.
    pub(crate) fn first(self) -> Hop {
        // `plan` always ends in the cache: never empty.
        self.hops[0].unwrap_or(Hop::Cache)
    }

    /// Where it goes after `hop` failed; None after the last (tests only: a feeder asks
    /// [`plan`] again after a failure, which then excludes the failed hop).
    #[cfg(test)]
    pub(crate) fn after(self, hop: Hop) -> Option<Hop> {
        self.iter().skip_while(|&h| h != hop).nth(1)
    }
}

/// The fallback order leader → cloud → cache, each only when it can answer: a leader only
/// when the source is the pool and a leader is healthy, the cloud only when a server is
/// healthy, the cache always last.
pub(crate) fn plan(source: Source, leader_healthy: bool, cloud_healthy: bool) -> Plan {
    let mut hops = [None; 3];
    let mut n = 0;
    let mut push = |hop| {
        hops[n] = Some(hop);
        n += 1;
    };
    if source == Source::Pool && leader_healthy {
        push(Hop::Leader);
    }
    if cloud_healthy {
        push(Hop::Cloud);
    }
    push(Hop::Cache);
    Plan { hops }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::TcpListener;
    use std::sync::Mutex;

    use super::*;

    /// The staleness bound of the tests.
    const BOUND: Duration = Duration::from_secs(90);

    /// Answers from a set of reachable addresses, recording every dial.
    #[derive(Default)]
    struct FakeDialer {
        up: Mutex<HashSet<SocketAddr>>,
        dials: Mutex<Vec<SocketAddr>>,
        timeouts: Mutex<Vec<Duration>>,
    }

    impl FakeDialer {
        fn set_up(&self, addrs: &[SocketAddr]) {
            *self.up.lock().unwrap() = addrs.iter().copied().collect();
        }
        fn dials(&self) -> usize {
            self.dials.lock().unwrap().len()
        }
    }

    impl Dialer for FakeDialer {
        fn reachable(&self, addr: SocketAddr, timeout: Duration) -> bool {
            self.dials.lock().unwrap().push(addr);
            self.timeouts.lock().unwrap().push(timeout);
            self.up.lock().unwrap().contains(&addr)
        }
    }

    fn leader(node: &str, ip: &str) -> Leader {
        Leader {
            node: node.into(),
            ip: ip.parse().unwrap(),
        }
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_new_leader_list_is_probed_before_it_is_used() {
        let health = LeaderHealth::new(10269, "edge-2", BOUND);
        let dialer = FakeDialer::default();
        assert_eq!(health.pick(None, None), None);
        assert!(!health.any_healthy());
        dialer.set_up(&[addr("10.0.0.1:10269")]);
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "fd00::2")], &dialer);
        assert_eq!(
            *dialer.dials.lock().unwrap(),
            [addr("10.0.0.1:10269"), addr("[fd00::2]:10269")]
        );
        assert!(
            dialer
                .timeouts
                .lock()
                .unwrap()
                .iter()
                .all(|&t| t == DIAL_TIMEOUT)
        );
        assert!(health.any_healthy());
        for _ in 0..4 {
            assert_eq!(
                health.pick(None, None),
                Some(addr("10.0.0.1:10269")),
                "only the healthy one"
            );
        }
        let snapshot = health.snapshot();
        assert_eq!(snapshot.len(), 2);
        assert!(snapshot[0].1 && !snapshot[1].1);
    }

    #[test]
    fn picks_follow_rendezvous_over_healthy_leaders_and_each_round() {
        let health = LeaderHealth::new(1, "edge-2", BOUND);
        let dialer = FakeDialer::default();
        let (a, b, c) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"), addr("10.0.0.3:1"));
        dialer.set_up(&[a, b, c]);
        health.set_leaders(
            &[
                leader("a", "10.0.0.1"),
                leader("b", "10.0.0.2"),
                leader("c", "10.0.0.3"),
            ],
            &dialer,
        );
        // One leader for this node, every time, whatever the resource.
        let first = health.pick(None, None).unwrap();
        assert!((0..5).all(|_| health.pick(Some("services.v1.core"), None) == Some(first)));
        let second = health.pick(None, Some(first)).unwrap();
        assert_ne!(first, second, "`except` takes the next");

        dialer.set_up(&[c]);
        assert!(health.check(&dialer), "two leaders went down");
        assert!((0..5).all(|_| health.pick(None, None) == Some(c)));
        dialer.set_up(&[]);
        health.check(&dialer);
        assert_eq!(health.pick(None, None), None);
        assert!(!health.any_healthy());
        dialer.set_up(&[a, b, c]);
        assert!(health.check(&dialer));
        assert!(!health.check(&dialer), "the same outcome is no change");
        assert_eq!(
            health.pick(None, None),
            Some(first),
            "back after one good round"
        );
    }

    #[test]
    fn an_unreachable_leader_is_avoided_until_the_next_round() {
        let health = LeaderHealth::new(1, "edge-2", BOUND);
        let dialer = FakeDialer::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        dialer.set_up(&[a, b]);
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "10.0.0.2")], &dialer);
        assert!(health.mark_unreachable(a), "it was healthy");
        assert!(!health.mark_unreachable(a), "no change the second time");
        assert!((0..4).all(|_| health.pick(None, None) == Some(b)));
        health.check(&dialer);
        assert_eq!(health.pick(None, Some(b)), Some(a));
    }

    #[test]
    fn a_refusing_leader_stays_aside_through_healthy_rounds_with_a_doubling_backoff() {
        let health = LeaderHealth::new(1, "edge-2", BOUND);
        let dialer = FakeDialer::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        dialer.set_up(&[a, b]);
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "10.0.0.2")], &dialer);
        let backoff =
            |health: &LeaderHealth| health.slots()[0].refused.lock().unwrap().map(|r| r.1);

        assert!(health.refused(a, "403"), "it was usable");
        assert_eq!(backoff(&health), Some(Duration::from_secs(20)));
        for _ in 0..3 {
            assert!(!health.check(&dialer), "the TCP probe still passes");
            assert!(
                (0..4).all(|_| health.pick(None, None) == Some(b)),
                "a round does not clear it"
            );
        }
        assert_eq!(health.pick(None, Some(b)), None, "no other leader");
        assert!(!health.snapshot()[0].1);
        assert!(health.any_answering() && health.any_healthy());
        assert!(!health.refused(a, "403"), "already aside");
        assert_eq!(
            backoff(&health),
            Some(Duration::from_secs(20)),
            "not while aside"
        );
        // Each refusal past the backoff doubles it.
        let expire = |health: &LeaderHealth| {
            let slots = health.slots();
            let mut refused = slots[0].refused.lock().unwrap();
            *refused = refused.map(|(_, b)| (Instant::now(), b));
        };
        expire(&health);
        assert!(
            health.refused(a, "403"),
            "usable again when its backoff ended"
        );
        assert_eq!(backoff(&health), Some(Duration::from_secs(40)));
        for _ in 0..6 {
            expire(&health);
            health.refused(a, "403");
        }
        assert_eq!(backoff(&health), Some(REFUSED_MAX), "capped");

        // Only b: no usable leader at all while it refuses.
        health.refused(b, "bad certificate");
        assert!(!health.any_healthy());
        assert!(health.any_answering(), "they still answer their dial");

        // Served (past its backoff), it starts afresh.
        health.served(a);
        assert_eq!(backoff(&health), None);
        assert_eq!(health.pick(None, Some(b)), Some(a));

        // A new leader list (the ConfigMap changed) starts afresh too.
        health.refused(a, "403");
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "10.0.0.2")], &dialer);
        assert!((0..4).all(|_| health.pick(None, Some(b)) == Some(a)));
    }

    #[test]
    fn the_checker_runs_rounds_until_stopped() {
        let health = LeaderHealth::new(1, "edge-2", BOUND);
        let dialer = FakeDialer::default();
        health.set_leaders(&[leader("a", "10.0.0.1")], &dialer);
        assert_eq!(dialer.dials(), 1);
        let (stop_tx, stop) = crossbeam_channel::bounded(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                run_checker(
                    &health,
                    &dialer,
                    Duration::from_millis(1),
                    &stop,
                    &mut |_| {},
                )
            });
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while dialer.dials() < 4 && std::time::Instant::now() < until {
                std::thread::yield_now();
            }
            stop_tx.send(()).unwrap();
        });
        assert!(dialer.dials() >= 4, "rounds ran: {}", dialer.dials());
        let after = dialer.dials();
        // Stopped: a closed channel ends it too, without a round.
        drop(stop_tx);
        run_checker(
            &health,
            &dialer,
            Duration::from_secs(60),
            &stop,
            &mut |_| {},
        );
        assert_eq!(dialer.dials(), after);
    }

    #[test]
    fn the_tcp_dialer_tells_a_listener_from_a_closed_port() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap();
        assert!(TcpDialer.reachable(open, DIAL_TIMEOUT));
        drop(listener);
        assert!(!TcpDialer.reachable(open, DIAL_TIMEOUT));
    }

    #[test]
    fn leader_urls_of_picked_addresses_bracket_ipv6() {
        assert_eq!(leader_url(addr("10.0.0.5:10269")), "https://10.0.0.5:10269");
        assert_eq!(
            leader_url(addr("[fd00::5]:10269")),
            "https://[fd00::5]:10269"
        );
    }

    #[test]
    fn the_fallback_order_is_leader_then_cloud_then_cache() {
        use Hop::*;
        let order = |source, leader, cloud| plan(source, leader, cloud).iter().collect::<Vec<_>>();
        assert_eq!(order(Source::Pool, true, true), [Leader, Cloud, Cache]);
        assert_eq!(order(Source::Pool, true, false), [Leader, Cache]);
        assert_eq!(order(Source::Pool, false, true), [Cloud, Cache]);
        assert_eq!(order(Source::Pool, false, false), [Cache]);
        assert_eq!(
            order(Source::Cloud, true, true),
            [Cloud, Cache],
            "a leader itself"
        );
        assert_eq!(order(Source::Cloud, false, false), [Cache]);

        let p = plan(Source::Pool, true, true);
        assert_eq!(p.first(), Leader);
        assert_eq!(p.after(Leader), Some(Cloud));
        assert_eq!(p.after(Cloud), Some(Cache));
        assert_eq!(p.after(Cache), None);
        let p = plan(Source::Pool, true, false);
        assert_eq!(p.after(Leader), Some(Cache), "a dead cloud is skipped");
        assert_eq!(plan(Source::Cloud, false, false).first(), Cache);
    }

    /// Answers each probe from a table of what each leader tells, recording whether it
    /// was asked.
    #[derive(Default)]
    struct FakeProber {
        told: Mutex<Vec<(SocketAddr, Probe)>>,
        asked: Mutex<Vec<(SocketAddr, bool)>>,
    }

    impl FakeProber {
        fn tell(&self, addr: SocketAddr, probe: Probe) {
            let mut told = self.told.lock().unwrap();
            told.retain(|(a, _)| *a != addr);
            told.push((addr, probe));
        }
        fn asked(&self, addr: SocketAddr) -> usize {
            let asked = self.asked.lock().unwrap();
            asked.iter().filter(|(a, ask)| *a == addr && *ask).count()
        }
    }

    impl Prober for FakeProber {
        fn probe(&self, addr: SocketAddr, ask: bool) -> Probe {
            self.asked.lock().unwrap().push((addr, ask));
            let told = self.told.lock().unwrap();
            match told
                .iter()
                .find(|(a, _)| *a == addr)
                .map(|(_, p)| p.clone())
            {
                Some(Probe::Told(_)) if !ask => Probe::Reachable,
                Some(probe) => probe,
                None => Probe::Unreachable,
            }
        }
    }

    /// A leader's answer: services at that age, slices fresh.
    fn told(cloud: bool, services: Option<u64>, bookmarks: bool) -> Probe {
        Probe::Told(Freshness {
            cloud,
            resources: vec![
                ResourceAge {
                    resource: SERVICES.into(),
                    age: services.map(Duration::from_secs),
                    bookmarks,
                },
                ResourceAge {
                    resource: SLICES.into(),
                    age: Some(Duration::ZERO),
                    bookmarks: true,
                },
            ],
        })
    }

    /// A leader's answer listing one resource, fresh.
    fn only(resource: &str) -> Probe {
        Probe::Told(Freshness {
            cloud: true,
            resources: vec![ResourceAge {
                resource: resource.into(),
                age: Some(Duration::from_secs(1)),
                bookmarks: true,
            }],
        })
    }

    const SERVICES: &str = "services.v1.core";
    const SLICES: &str = "endpointslices.v1.discovery.k8s.io";

    fn three() -> Vec<Leader> {
        vec![
            leader("edge-1", "10.0.0.1"),
            leader("edge-2", "10.0.0.2"),
            leader("edge-3", "10.0.0.3"),
        ]
    }

    #[test]
    fn followers_spread_over_leaders_and_a_lost_leader_moves_only_its_own() {
        let dialer = FakeDialer::default();
        let all = [addr("10.0.0.1:1"), addr("10.0.0.2:1"), addr("10.0.0.3:1")];
        let picks = |up: &[SocketAddr]| -> Vec<SocketAddr> {
            dialer.set_up(up);
            (0..100)
                .map(|i| {
                    let health = LeaderHealth::new(1, &format!("edge-{}", 100 + i), BOUND);
                    health.set_leaders(&three(), &dialer);
                    health.pick(None, None).unwrap()
                })
                .collect()
        };
        let before = picks(&all);
        for leader in all {
            let n = before.iter().filter(|&&p| p == leader).count();
            assert!((20..=47).contains(&n), "{leader}: {n} of 100");
        }
        // edge-1's followers move; nobody else does.
        let after = picks(&all[1..]);
        for (was, now) in before.iter().zip(&after) {
            if *was == all[0] {
                assert_ne!(*now, all[0]);
            } else {
                assert_eq!(was, now, "a follower of a live leader stays");
            }
        }
        assert_eq!(picks(&all), before, "they come back with it");
    }

    #[test]
    fn a_stale_leader_is_skipped_for_that_resource_until_it_is_fresh_again() {
        let prober = FakeProber::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        prober.tell(a, told(true, Some(1), true));
        prober.tell(b, told(true, Some(1), true));
        health.set_leaders(&three()[..2], &prober);
        let mine = health.pick(Some(SERVICES), None).unwrap();
        let other = if mine == a { b } else { a };

        let synced = health.synced_at(mine, SERVICES).unwrap();
        assert!(
            synced <= Instant::now() - Duration::from_secs(1),
            "asked less its age"
        );
        assert_eq!(
            health.synced_at(mine, "configmaps.v1.core"),
            None,
            "not told"
        );
        // Its services watch hangs: past the bound, its followers read services elsewhere,
        // slices still from it.
        prober.tell(mine, told(true, Some(6), true));
        assert!(health.check(&prober), "a staleness flip is a change");
        assert_eq!(health.pick(Some(SERVICES), None), Some(other));
        assert_eq!(health.pick(Some(SLICES), None), Some(mine));
        assert!(!health.check(&prober), "still stale: no change");
        // Fresh again: back.
        prober.tell(mine, told(true, Some(0), true));
        assert!(health.check(&prober));
        assert_eq!(health.pick(Some(SERVICES), None), Some(mine));

        // An unknown age (warming) is not stale, nor an old age without bookmarks (an idle
        // watch of a cloud that sends none).
        prober.tell(mine, told(true, None, true));
        health.check(&prober);
        assert_eq!(health.pick(Some(SERVICES), None), Some(mine));
        prober.tell(mine, told(true, Some(600), false));
        health.check(&prober);
        assert_eq!(health.pick(Some(SERVICES), None), Some(mine));

        // A leader that reaches no cloud is stale for everything.
        prober.tell(mine, told(false, Some(0), true));
        assert!(health.check(&prober));
        assert_eq!(health.pick(Some(SLICES), None), Some(other));
        // Both stale: the cloud.
        prober.tell(other, told(false, Some(0), true));
        health.check(&prober);
        assert_eq!(health.pick(Some(SLICES), None), None);

        // The check off (0): judged by reachability only.
        let off = LeaderHealth::new(1, "edge-9", Duration::ZERO);
        off.set_leaders(&three()[..2], &prober);
        assert!(off.pick(Some(SLICES), None).is_some());
    }

    #[test]
    fn a_leader_that_does_not_tell_is_asked_once_until_the_list_changes_and_still_used() {
        let prober = FakeProber::default();
        let a = addr("10.0.0.1:1");
        prober.tell(a, Probe::Silent);
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        health.set_leaders(&three()[..1], &prober);
        assert_eq!(
            health.pick(Some(SERVICES), None),
            Some(a),
            "judged by reachability"
        );
        for _ in 0..3 {
            health.check(&prober);
        }
        assert_eq!(prober.asked(a), 1, "asked once");
        assert_eq!(prober.asked.lock().unwrap().len(), 4, "dialled every round");
        assert_eq!(health.pick(Some(SERVICES), None), Some(a));
        // A new list: asked again.
        health.set_leaders(&three()[..1], &prober);
        assert_eq!(prober.asked(a), 2);
        // One that answers, but could not tell this time (a 5xx): asked again.
        let b = addr("10.0.0.2:1");
        prober.tell(b, Probe::Reachable);
        health.set_leaders(&three()[1..2], &prober);
        health.check(&prober);
        assert_eq!(prober.asked(b), 2);
        assert_eq!(health.pick(None, None), Some(b));
    }

    #[test]
    fn a_slow_leader_is_reachable_and_asked_no_more_only_when_it_never_told() {
        let prober = FakeProber::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        // a listens but never answers the question in time (a YurtHub leader forwarding the
        // path over a slow link); b told once, then is slow under load.
        prober.tell(a, Probe::Slow);
        prober.tell(b, told(true, Some(1), true));
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        health.set_leaders(&three()[..2], &prober);
        prober.tell(b, Probe::Slow);
        for _ in 0..3 {
            health.check(&prober);
        }
        assert_eq!(prober.asked(a), 1, "not known to tell: asked once");
        assert_eq!(prober.asked(b), 4, "it told: still asked");
        assert_eq!(
            health.snapshot().iter().filter(|s| s.1).count(),
            2,
            "both usable"
        );
        assert_eq!(health.pick(Some(SERVICES), Some(b)), Some(a));
        assert!(
            health.synced_at(b, SERVICES).is_some(),
            "what it told is kept"
        );
    }

    #[test]
    fn what_a_leader_told_ages_when_it_answers_only_its_dial() {
        let prober = FakeProber::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        prober.tell(a, told(true, Some(1), true));
        prober.tell(b, told(true, Some(1), true));
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        health.set_leaders(&three()[..2], &prober);
        let mine = health.pick(Some(SERVICES), None).unwrap();
        let other = if mine == a { b } else { a };
        // It answers, but cannot tell any more (a broken-off answer): its last word ages.
        prober.tell(mine, Probe::Reachable);
        assert!(!health.check(&prober), "1 s old: fresh");
        let slots = health.slots();
        let slot = slots.iter().find(|s| s.addr == mine).unwrap();
        if let Telling::Told(told) = &mut *slot.telling.lock().unwrap() {
            for r in &mut told.resources {
                r.1 = r.1.map(|at| at - Duration::from_secs(10));
            }
        }
        assert!(health.check(&prober), "10 s later, stale: a change");
        assert_eq!(health.pick(Some(SERVICES), None), Some(other));
        assert!(!health.check(&prober), "still stale: no change");
    }

    #[test]
    fn a_leader_that_tells_but_does_not_cache_a_resource_is_not_read_it_from() {
        let prober = FakeProber::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        prober.tell(a, only(SERVICES));
        prober.tell(b, only(SERVICES));
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        health.set_leaders(&three()[..2], &prober);
        let mine = health.pick(Some(SERVICES), None).unwrap();
        let other = if mine == a { b } else { a };
        assert_eq!(
            health.pick(Some(SLICES), None),
            None,
            "neither caches slices"
        );
        // It caches slices only: services from the other one.
        prober.tell(mine, only(SLICES));
        assert!(health.check(&prober), "what it caches changed");
        assert_eq!(health.pick(Some(SERVICES), None), Some(other));
        assert_eq!(health.pick(Some(SLICES), None), Some(mine));
    }

    #[test]
    fn a_leader_that_refused_this_node_is_dialled_not_asked_until_it_serves_it() {
        let prober = FakeProber::default();
        let a = addr("10.0.0.1:1");
        prober.tell(a, told(true, Some(0), true));
        let health = LeaderHealth::new(1, "edge-9", Duration::from_secs(5));
        health.set_leaders(&three()[..1], &prober);
        assert_eq!(prober.asked(a), 1);
        health.refused(a, "403");
        for _ in 0..3 {
            health.check(&prober);
        }
        assert_eq!(prober.asked(a), 1, "dialled only, no handshake");
        health.served(a);
        health.check(&prober);
        assert_eq!(prober.asked(a), 2, "asked again once it serves this node");
    }

    #[test]
    fn the_freshness_json_reads_back_and_anything_else_does_not_tell() {
        let told = Freshness {
            cloud: true,
            resources: vec![
                ResourceAge {
                    resource: SERVICES.into(),
                    age: Some(Duration::from_secs(12)),
                    bookmarks: true,
                },
                ResourceAge {
                    resource: SLICES.into(),
                    age: None,
                    bookmarks: false,
                },
            ],
        };
        let text = told.to_json();
        assert_eq!(
            String::from_utf8_lossy(&text),
            r#"{"cloud":true,"resources":[{"ageSeconds":12,"bookmarks":true,"resource":"services.v1.core"},{"ageSeconds":null,"bookmarks":false,"resource":"endpointslices.v1.discovery.k8s.io"}]}"#
        );
        assert_eq!(Freshness::parse(&text), Some(told));
        assert_eq!(
            Freshness::parse(br#"{"cloud":false,"resources":[{"resource":"x","ageSeconds":-3}]}"#)
                .map(|f| (f.cloud, f.resources[0].age, f.resources[0].bookmarks)),
            Some((false, None, false)),
            "a negative age is no age"
        );
        // A YurtHub leader forwards the path to its cloud: a 404 Status, or HTML.
        assert_eq!(Freshness::parse(br#"{"kind":"Status","code":404}"#), None);
        assert_eq!(Freshness::parse(b"<html>"), None);
    }
}
