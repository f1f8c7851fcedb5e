//! Where this node's pool-scope reads go now (YurtHub's `pkg/yurthub/healthchecker/leaderhub`): one
//! object, built in app/pool.rs and shared by the `leader-hub-<pool>` watcher (which sets the source and
//! the leaders), the leader health checker (every 20 s) and the feeders of the pool caches
//! (which ask it where to list and watch, and report a leader that failed them).
//!
//! Design decisions:
//! - **No lock on a client's path** (only the feeders ask the route): the source is an
//!   atomic, the leaders' health is [`LeaderHealth`] (an `Arc` snapshot, atomics, and a small
//!   mutex per leader for its refusal backoff, taken per feeder request), the generation an
//!   atomic counter. The list of feeders to wake has a mutex, taken when something changed.
//! - **The generation** is bumped whenever the answer to "where do pool-scope reads go now"
//!   may have changed: the source, the leader list, a leader's health or staleness. A
//!   feeder compares it across a watch to know the watch ended because of a change (resume
//!   at once).
//! - **Waking a blocked watch**: a feeder blocked in a read of a watch that no longer goes
//!   where it should (the cloud while a leader is usable; a leader no longer the one to read
//!   from) is woken through its [`Wake`] handle, which ends the stream (the feeder's local
//!   watches carry on: it resumes from its cache's resourceVersion). Every health round
//!   nudges the feeders too, so one whose watch went to the cloud for a round because a
//!   leader turned it away (busy, lagging, warming while the follower holds data) moves back
//!   to it at the first round after that leader has heard the cloud on the resource since
//!   (the feeder's own record, `clients::pool_watch`), whether or not the cloud answers. A leader that
//!   refuses this node (TLS, 403) is set aside for a backoff instead
//!   ([`LeaderHealth::refused`]).
//! - **First list**: the feeders wait (up to [`FIRST_LIST_PATIENCE`]) for the ConfigMap's
//!   first list, and then, while leaders are named but none answers yet (a power cut: the
//!   leader binds its port after its own ConfigMap list), re-dial them
//!   ([`PoolRoute::probe_now`]) for a while before they list from the cloud.
//! - **Which leader** (issue 32): per resource, of the leaders usable and fresh for it, the one
//!   rendezvous hashing of this node's name picks (`pool::health`); a watch through any other
//!   leader is ended at the next wake and resumed there, as one on the cloud is.
//! - Offline or before any ConfigMap: the source is the cloud, no leader.
//! - Memory: two atomics, the leaders' slots (see [`LeaderHealth`]), a weak pointer per
//!   feeder (one per pool-scope resource).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::health::{CHECK_INTERVAL, LeaderHealth, Prober, run_checker};
use super::leader::{Leader, Source};

/// How long the feeders' first lists wait for the ConfigMap's first list (the watcher
/// settles the route after it when the cloud cannot be asked, and the feeders wait no
/// longer either): a follower that listed before learning its leader would list
/// everything from the cloud.
pub(crate) const FIRST_LIST_PATIENCE: Duration = Duration::from_secs(10);

/// A feeder that can be told that the route may have changed.
pub(crate) trait Wake: Send + Sync {
    /// The route may have changed: end a watch that no longer goes where `route` says.
    fn wake(&self, route: &PoolRoute);
}

/// Where pool-scope reads go, shared by the ConfigMap watcher, the checker and the feeders.
pub(crate) struct PoolRoute {
    /// The source is the pool (else the cloud).
    pool: AtomicBool,
    health: LeaderHealth,
    generation: AtomicU64,
    /// The ConfigMap was listed once (or that failed): the feeders' first list waits for it.
    settled: AtomicBool,
    prober: Box<dyn Prober>,
    wakers: Mutex<Vec<Weak<dyn Wake>>>,
}

impl PoolRoute {
    /// The cloud as source, no leader; leaders serve on `port`, probed by `prober`; this
    /// node is `node` (its leader picked by rendezvous hashing of it); a leader whose view
    /// of a resource is older than `max_staleness` (zero: no check) is skipped for it.
    pub(crate) fn new(
        port: u16,
        node: &str,
        max_staleness: Duration,
        prober: Box<dyn Prober>,
    ) -> PoolRoute {
        PoolRoute {
            pool: AtomicBool::new(false),
            health: LeaderHealth::new(port, node, max_staleness),
            generation: AtomicU64::new(0),
            settled: AtomicBool::new(false),
            prober,
            wakers: Mutex::new(Vec::new()),
        }
    }

    /// [`PoolRoute::new`] for node `edge-2` with the default staleness bound (tests).
    #[cfg(test)]
    pub(crate) fn for_tests(port: u16, prober: Box<dyn Prober>) -> PoolRoute {
        PoolRoute::new(port, "edge-2", Duration::from_secs(90), prober)
    }

    /// Where pool-scope reads go by the ConfigMap.
    pub(crate) fn source(&self) -> Source {
        if self.pool.load(Ordering::Acquire) {
            Source::Pool
        } else {
            Source::Cloud
        }
    }

    /// Bumped whenever where reads go may have changed.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The leader to read `resource` (a kind directory; None: any) from now (of the usable
    /// ones fresh for it, the one rendezvous hashing of this node's name picks), other than
    /// `except` (one that just turned this node away: the next leader before the cloud);
    /// None when the source is the cloud or no other leader is usable.
    pub(crate) fn leader_for(
        &self,
        resource: Option<&str>,
        except: Option<SocketAddr>,
    ) -> Option<SocketAddr> {
        self.leader_avoiding(resource, except.as_slice())
    }

    /// [`PoolRoute::leader_for`] other than any of `avoid`.
    pub(crate) fn leader_avoiding(
        &self,
        resource: Option<&str>,
        avoid: &[SocketAddr],
    ) -> Option<SocketAddr> {
        (self.source() == Source::Pool)
            .then(|| self.health.pick_avoiding(resource, avoid))
            .flatten()
    }

    /// [`PoolRoute::leader_for`] any resource (tests).
    #[cfg(test)]
    pub(crate) fn leader_except(&self, except: Option<SocketAddr>) -> Option<SocketAddr> {
        self.leader_for(None, except)
    }

    /// When the leader at `addr` last heard the cloud's word on `resource`, by what it told
    /// at its last probe ([`LeaderHealth::synced_at`]).
    pub(crate) fn leader_synced_at(&self, addr: SocketAddr, resource: &str) -> Option<Instant> {
        self.health.synced_at(addr, resource)
    }

    /// Whether the leader at `addr` tells how fresh it is ([`LeaderHealth::tells`]).
    pub(crate) fn leader_tells(&self, addr: SocketAddr) -> bool {
        self.health.tells(addr)
    }

    /// The source is the pool and leaders are named, but none answers its dial yet (one
    /// that answers but refused this node is no leader to wait for).
    pub(crate) fn awaits_leader(&self) -> bool {
        self.source() == Source::Pool && self.health.any_leader() && !self.health.any_answering()
    }

    /// Dials the leaders now (a feeder's first list waiting for a leader to bind its port),
    /// as a health round.
    pub(crate) fn probe_now(&self) {
        self.after_round(self.health.check(self.prober.as_ref()));
    }

    /// The ConfigMap says `source`, and (when they changed) `leaders`, which are dialled at
    /// once, before they are used (up to 2 s each, on the caller's thread).
    pub(crate) fn set(&self, source: Source, leaders: Option<&[Leader]>) {
        if let Some(leaders) = leaders {
            self.health.set_leaders(leaders, self.prober.as_ref());
        }
        self.pool.store(source == Source::Pool, Ordering::Release);
        self.bump();
    }

    /// The ConfigMap's first list ended (applied, or failed): the source is known.
    pub(crate) fn settle(&self) {
        self.settled.store(true, Ordering::Release);
    }

    /// Whether the ConfigMap's first list has ended.
    pub(crate) fn settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// A request to the leader at `addr` could not connect or broke off: the cloud until the
    /// next health round sees it answer.
    pub(crate) fn leader_failed(&self, addr: SocketAddr) {
        if self.health.mark_unreachable(addr) {
            self.bump();
        }
    }

    /// The leader at `addr` refused this node (a TLS failure, 401/403): set aside for a
    /// backoff no health round clears ([`LeaderHealth::refused`]).
    pub(crate) fn leader_refused(&self, addr: SocketAddr, why: &str) {
        if self.health.refused(addr, why) {
            self.bump();
        }
    }

    /// The leader at `addr` served this node: a refusal backoff starts afresh.
    pub(crate) fn leader_served(&self, addr: SocketAddr) {
        self.health.served(addr);
    }

    /// A feeder to wake when the route may have changed (kept weakly: a feeder that ended is
    /// forgotten at the next change).
    pub(crate) fn register(&self, waker: Weak<dyn Wake>) {
        self.wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(waker);
    }

    /// One health round, as the checker's tick (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        self.probe_now();
    }

    /// The leader checker's loop: a round every 20 s until `stop` fires or closes.
    pub(crate) fn run_checker(&self, stop: &Receiver<()>) {
        run_checker(
            &self.health,
            self.prober.as_ref(),
            CHECK_INTERVAL,
            stop,
            &mut |changed| self.after_round(changed),
        );
    }

    /// After a health round: a change bumps the generation; either way the feeders are
    /// nudged (one on the cloud while a leader is usable moves back to it).
    fn after_round(&self, changed: bool) {
        if changed {
            self.bump();
        } else {
            self.wake_all();
        }
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.wake_all();
    }

    /// Tells the feeders to look at the route again (the pool-scope set changed).
    pub(crate) fn nudge(&self) {
        self.wake_all();
    }

    fn wake_all(&self) {
        // Upgraded under the lock, woken outside it: a wake shuts a socket down.
        let live: Vec<_> = {
            let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
            wakers.retain(|w| w.strong_count() > 0);
            wakers.iter().filter_map(Weak::upgrade).collect()
        };
        for waker in live {
            waker.wake(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    #[derive(Default)]
    struct Up(Mutex<HashSet<SocketAddr>>);

    impl super::super::health::Dialer for Arc<Up> {
        fn reachable(&self, addr: SocketAddr, _: Duration) -> bool {
            self.0.lock().unwrap().contains(&addr)
        }
    }

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(&self, _: &PoolRoute) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn leader(node: &str, ip: &str) -> Leader {
        Leader {
            node: node.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn the_route_follows_the_configmap_and_the_leaders_health() {
        let up = Arc::new(Up::default());
        let route = PoolRoute::for_tests(10269, Box::new(Arc::clone(&up)));
        let counter = Arc::new(Counter::default());
        let weak: Weak<dyn Wake> = Arc::downgrade(&(Arc::clone(&counter) as Arc<dyn Wake>));
        route.register(weak);
        assert_eq!(route.source(), Source::Cloud);
        assert_eq!(route.leader_except(None), None);
        let a: SocketAddr = "10.0.0.1:10269".parse().unwrap();

        up.0.lock().unwrap().insert(a);
        route.set(Source::Pool, Some(&[leader("a", "10.0.0.1")]));
        assert_eq!(route.generation(), 1);
        assert_eq!(route.leader_except(None), Some(a));
        assert!(
            route.leader_for(None, None).is_some()
                && route.leader_for(Some("services.v1.core"), None) == Some(a)
        );
        assert_eq!(counter.0.load(Ordering::Relaxed), 1);

        route.leader_failed(a);
        assert_eq!(route.generation(), 2);
        assert_eq!(
            route.leader_except(None),
            None,
            "the cloud until the next round"
        );
        route.leader_failed(a);
        assert_eq!(route.generation(), 2, "no change, no bump");

        route.check();
        assert_eq!(route.generation(), 3, "healthy again");
        assert_eq!(route.leader_except(None), Some(a));
        route.check();
        assert_eq!(route.generation(), 3);
        assert_eq!(counter.0.load(Ordering::Relaxed), 4, "every round nudges");

        // This node becomes a leader: the cloud, whatever the leaders' health.
        route.set(Source::Cloud, None);
        assert_eq!(route.leader_except(None), None);
        assert!(
            route.leader_for(None, None).is_none()
                && route.leader_for(Some("services.v1.core"), None).is_none()
        );

        // A feeder that ended is forgotten.
        drop(counter);
        route.check();
        assert!(route.wakers.lock().unwrap().is_empty());
    }
}
