//! Leader hub health and the follower's fallback order (YurtHub's
//! `pkg/yurthub/healthchecker/leaderhub`): a leader is healthy when a TCP connection to its
//! multiplexer port opens within 2 s, checked every 20 s and at once when the leader list changes;
//! requests go round-robin over healthy leaders; and a pool-scope request tries the leader, then
//! the cloud, then the cache.
//!
//! Design decisions:
//! - The probe goes through the [`Dialer`] trait, so rounds are tested without sockets;
//!   [`TcpDialer`] is the real one. A round dials the leaders one after another: a pool has
//!   one to a few leaders, so a black-holed round costs n × 2 s on the checker's thread,
//!   not a thread per leader.
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
//!   (20 s doubling to 10 min, warned about once) that no TCP round clears; a new leader list
//!   (the ConfigMap changed) starts afresh, and an answer served resets it.
//! - Memory: one slot is a [`Leader`], its socket address, a flag and its refusal backoff
//!   (about 96 bytes on a 32-bit router, plus the node name).

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::leader::{Leader, Source};

/// Time between health rounds.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(20);
/// Time one TCP connect may take.
pub(crate) const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// A leader's first refusal sets it aside this long; each next one doubles it.
const REFUSED_FIRST: Duration = Duration::from_secs(20);
/// The longest a refusing leader is set aside.
const REFUSED_MAX: Duration = Duration::from_secs(600);

/// Opens (and closes) a connection, to tell whether something listens.
pub(crate) trait Dialer: Send + Sync {
    /// Whether a TCP connection to `addr` opened within `timeout`.
    fn reachable(&self, addr: SocketAddr, timeout: Duration) -> bool;
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

/// One leader and whether it answered its last probe.
#[derive(Debug)]
struct Slot {
    leader: Leader,
    addr: SocketAddr,
    healthy: AtomicBool,
    /// It refused this node: not used before this, and the backoff of its next refusal.
    /// A mutex taken per feeder request, never on a client's request.
    refused: Mutex<Option<(Instant, Duration)>>,
}

impl Slot {
    fn new(leader: &Leader, port: u16) -> Slot {
        Slot {
            leader: leader.clone(),
            addr: leader.addr(port),
            healthy: AtomicBool::new(false),
            refused: Mutex::new(None),
        }
    }

    /// It answered its last probe and is not set aside for a refusal.
    fn usable(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
            && self
                .refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none_or(|(until, _)| Instant::now() >= until)
    }
}

/// The leaders' health, shared by the checker, the ConfigMap watcher and request threads.
#[derive(Debug)]
pub(crate) struct LeaderHealth {
    /// The multiplexer port the leaders serve on (this hub's own `--multiplexer-port`, as in
    /// YurtHub).
    port: u16,
    slots: RwLock<Arc<[Slot]>>,
    /// Round-robin position.
    next: AtomicUsize,
}

/// Probes every slot once, in order, and stores the outcomes; true when one changed.
fn round(slots: &[Slot], dialer: &dyn Dialer) -> bool {
    let mut changed = false;
    for slot in slots {
        let up = dialer.reachable(slot.addr, DIAL_TIMEOUT);
        let was = slot.healthy.swap(up, Ordering::AcqRel);
        if was != up {
            changed = true;
            let state = if up { "healthy" } else { "unhealthy" };
            log::info!("leader hub {} ({}) is {state}", slot.leader.node, slot.addr);
        }
    }
    changed
}

impl LeaderHealth {
    /// No leader yet; leaders serve on `port`.
    pub(crate) fn new(port: u16) -> LeaderHealth {
        LeaderHealth {
            port,
            slots: RwLock::new(Arc::from(Vec::new())),
            next: AtomicUsize::new(0),
        }
    }

    fn slots(&self) -> Arc<[Slot]> {
        // A plain swap of an Arc: a panicking writer cannot leave it half-written.
        Arc::clone(&self.slots.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the leaders with `leaders`, probed first (synchronously, as YurtHub does
    /// when the list changes: up to 2 s per leader on the caller's thread); then they are the
    /// ones picked from.
    pub(crate) fn set_leaders(&self, leaders: &[Leader], dialer: &dyn Dialer) {
        let slots: Vec<Slot> = leaders.iter().map(|l| Slot::new(l, self.port)).collect();
        round(&slots, dialer);
        *self.slots.write().unwrap_or_else(PoisonError::into_inner) = Arc::from(slots);
    }

    /// One health round over the current leaders (the checker's tick); true when a
    /// leader's health changed.
    pub(crate) fn check(&self, dialer: &dyn Dialer) -> bool {
        round(&self.slots(), dialer)
    }

    /// At least one leader answered its last probe and is not set aside for a refusal.
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

    /// The next usable leader's address, round-robin, other than `except`; None when there
    /// is none.
    pub(crate) fn pick(&self, except: Option<SocketAddr>) -> Option<SocketAddr> {
        let slots = self.slots();
        let n = slots.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &slots[start.wrapping_add(i) % n])
            .find(|s| Some(s.addr) != except && s.usable())
            .map(|s| s.addr)
    }

    /// The leader at `addr` refused this node (`why`): set aside for a backoff (20 s, doubled
    /// by each next refusal up to 10 min) that a TCP round does not clear. Warned about the
    /// first time only. A refusal while set aside (another feeder's request that was under
    /// way) changes nothing. True when it was usable until now.
    pub(crate) fn refused(&self, addr: SocketAddr, why: &str) -> bool {
        let mut changed = false;
        for slot in self.slots().iter().filter(|s| s.addr == addr) {
            let was = slot.usable();
            let mut refused = slot.refused.lock().unwrap_or_else(PoisonError::into_inner);
            let backoff = match *refused {
                None => {
                    log::warn!(
                        "leader hub {} ({addr}) refuses this node ({why}): pool-scope reads go to the cloud, the leader is asked again after a backoff of {} s doubling to {} s",
                        slot.leader.node,
                        REFUSED_FIRST.as_secs(),
                        REFUSED_MAX.as_secs()
                    );
                    REFUSED_FIRST
                }
                Some((until, _)) if Instant::now() < until => continue,
                Some((_, last)) => {
                    log::debug!(
                        "leader hub {} ({addr}) refuses this node again: {why}",
                        slot.leader.node
                    );
                    (last * 2).min(REFUSED_MAX)
                }
            };
            *refused = Some((Instant::now() + backoff, backoff));
            changed |= was;
        }
        changed
    }

    /// The leader at `addr` served this node: a refusal backoff starts afresh.
    pub(crate) fn served(&self, addr: SocketAddr) {
        for slot in self.slots().iter().filter(|s| s.addr == addr) {
            let mut refused = slot.refused.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// The leaders and whether each is usable (healthy, not set aside for a refusal).
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
    dialer: &dyn Dialer,
    interval: Duration,
    stop: &Receiver<()>,
    after: &mut dyn FnMut(bool),
) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => after(health.check(dialer)),
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
        let health = LeaderHealth::new(10269);
        let dialer = FakeDialer::default();
        assert_eq!(health.pick(None), None);
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
                health.pick(None),
                Some(addr("10.0.0.1:10269")),
                "only the healthy one"
            );
        }
        let snapshot = health.snapshot();
        assert_eq!(snapshot.len(), 2);
        assert!(snapshot[0].1 && !snapshot[1].1);
    }

    #[test]
    fn picks_go_round_robin_over_healthy_leaders_and_follow_each_round() {
        let health = LeaderHealth::new(1);
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
        let picks: HashSet<_> = (0..3).filter_map(|_| health.pick(None)).collect();
        assert_eq!(picks, [a, b, c].into_iter().collect());

        dialer.set_up(&[c]);
        assert!(health.check(&dialer), "two leaders went down");
        assert!((0..5).all(|_| health.pick(None) == Some(c)));
        dialer.set_up(&[]);
        health.check(&dialer);
        assert_eq!(health.pick(None), None);
        assert!(!health.any_healthy());
        dialer.set_up(&[a]);
        assert!(health.check(&dialer));
        assert!(!health.check(&dialer), "the same outcome is no change");
        assert_eq!(health.pick(None), Some(a), "back after one good round");
    }

    #[test]
    fn an_unreachable_leader_is_avoided_until_the_next_round() {
        let health = LeaderHealth::new(1);
        let dialer = FakeDialer::default();
        let (a, b) = (addr("10.0.0.1:1"), addr("10.0.0.2:1"));
        dialer.set_up(&[a, b]);
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "10.0.0.2")], &dialer);
        assert!(health.mark_unreachable(a), "it was healthy");
        assert!(!health.mark_unreachable(a), "no change the second time");
        assert!((0..4).all(|_| health.pick(None) == Some(b)));
        health.check(&dialer);
        assert!((0..4).any(|_| health.pick(None) == Some(a)));
    }

    #[test]
    fn a_refusing_leader_stays_aside_through_healthy_rounds_with_a_doubling_backoff() {
        let health = LeaderHealth::new(1);
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
                (0..4).all(|_| health.pick(None) == Some(b)),
                "a round does not clear it"
            );
        }
        assert_eq!(health.pick(Some(b)), None, "no other leader");
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
        assert_eq!(health.pick(Some(b)), Some(a));

        // A new leader list (the ConfigMap changed) starts afresh too.
        health.refused(a, "403");
        health.set_leaders(&[leader("a", "10.0.0.1"), leader("b", "10.0.0.2")], &dialer);
        assert!((0..4).any(|_| health.pick(None) == Some(a)));
        assert!((0..4).all(|_| health.pick(Some(b)) == Some(a)));
    }

    #[test]
    fn the_checker_runs_rounds_until_stopped() {
        let health = LeaderHealth::new(1);
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
}
