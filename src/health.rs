//! Cloud backends and their health: which `--server-addr` entries are usable now, how a
//! request picks one (`rr`, `priority` or `consistent-hashing`), and the `/readyz` checker threads that probe each
//! backend every `--heartbeat-interval-seconds` with YurtHub's retry and healthy-threshold
//! rules (`--heartbeat-mode=readyz`, and cloud mode). In lease mode (edge) the node lease
//! renewal is the probe, and `heartbeat::checker` rules through the same [`Backends`].
//!
//! A probe every 10 s leaves the flag stale for up to that long after a server dies. So a
//! forwarded request that fails in transport reports it ([`Backends::report_failure`]): the
//! server becomes *suspect* — reads no longer pick it and count the hub offline without
//! it — and its checker is woken to probe at once instead of at its next tick. The
//! woken round applies the same retry rule, back to back, so the flag settles within
//! `(failed_retry + 1) × --heartbeat-timeout-seconds` (milliseconds when the connection is
//! refused); its result clears the suspicion either way — unless a failure was reported while
//! the round was under way: then its success may predate that failure, and the next round,
//! started at once, rules. A burst of failures wakes one round. Writes still go to a suspect
//! server ([`Backends::pick`]): a write must not be answered from the cache while a server
//! that may be up could take it.
//!
//! [`Backends::recoveries`] counts the times a server became usable again (unhealthy or
//! suspect before, healthy and trusted after): a held offline watch ends when it moves, never
//! on a flag that merely has not been probed since the cloud died.
//!
//! The probe itself (an HTTP request) is given from outside through [`Probe`]: this module
//! knows nothing about HTTP or TLS, and a failed probe only by its origin ([`ProbeError`]:
//! no answer, with the request path's `UpstreamError`, or a status that is not 2xx). "No backend is usable" is how the rest of the hub knows
//! it is offline.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::cloud_error::UpstreamError;
use crate::config::{Heartbeat, LbMode};
use crate::hashing::{FNV_OFFSET, fnv1a, rendezvous};

/// One cloud apiserver.
#[derive(Debug)]
pub(crate) struct Backend {
    /// `https://host:port`.
    pub base: String,
    healthy: AtomicBool,
    /// Failures reported by forwarded requests, ever.
    reports: AtomicU64,
    /// `reports` as read before the last probe round that ruled: when they differ, a request
    /// failed in transport since, and the server is *suspect* until a round started after
    /// that failure rules.
    settled: AtomicU64,
    /// Wakes this backend's checker; one slot, so a burst of failures is one probe round.
    wake: (Sender<()>, Receiver<()>),
    /// FNV-1a-64 of `base`, computed once: this server's seed in rendezvous hashing.
    seed: u64,
}

impl Backend {
    /// Healthy by its last probe and no request has failed on it since.
    fn usable(&self) -> bool {
        self.healthy.load(Ordering::Acquire) && !self.suspect()
    }

    /// A request failed in transport since the last probe round that ruled began.
    fn suspect(&self) -> bool {
        self.reports.load(Ordering::Acquire) != self.settled.load(Ordering::Acquire)
    }
}

/// The consistent-hashing key of a client's request: FNV-1a-64 of its User-Agent followed by
/// its original target, as YurtHub keys it (`UserAgent()+RequestURI`).
pub(crate) fn affinity_key(user_agent: &str, target: &str) -> u64 {
    fnv1a(fnv1a(FNV_OFFSET, user_agent.as_bytes()), target.as_bytes())
}

/// The cloud apiservers and how requests spread over them.
#[derive(Debug)]
pub(crate) struct Backends {
    list: Vec<Backend>,
    lb: LbMode,
    next: AtomicUsize,
    recoveries: AtomicU64,
}

impl Backends {
    /// Backends in `--server-addr` order, all presumed healthy until probed.
    pub(crate) fn new(bases: Vec<String>, lb: LbMode) -> Backends {
        Backends {
            list: bases
                .into_iter()
                .map(|base| Backend {
                    seed: fnv1a(FNV_OFFSET, base.as_bytes()),
                    base,
                    healthy: AtomicBool::new(true),
                    reports: AtomicU64::new(0),
                    settled: AtomicU64::new(0),
                    wake: crossbeam_channel::bounded(1),
                })
                .collect(),
            lb,
            next: AtomicUsize::new(0),
            recoveries: AtomicU64::new(0),
        }
    }

    /// The backend at `index`.
    pub(crate) fn get(&self, index: usize) -> &Backend {
        &self.list[index]
    }

    /// How many backends there are.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Picks a usable backend other than `exclude`, by the load-balancing mode; with
    /// `allow_suspect` (writes), one healthy by its last probe will do. `key` (see
    /// [`affinity_key`]) matters in `consistent-hashing` mode only.
    ///
    /// Consistent hashing is rendezvous hashing: every usable server scores
    /// `splitmix64(key ^ seed)` and the highest wins. So keys spread evenly, a key keeps its
    /// server while that server is usable, a server's failure moves only its own keys (each
    /// to its next-highest server) and they come back with it; `exclude` (a retry) takes the
    /// next-highest. YurtHub's ring has one point per server, so its spread is uneven.
    pub(crate) fn pick(
        &self,
        exclude: Option<usize>,
        allow_suspect: bool,
        key: u64,
    ) -> Option<usize> {
        let n = self.list.len();
        let usable = |i: usize| {
            let b = &self.list[i];
            Some(i) != exclude
                && if allow_suspect {
                    b.healthy.load(Ordering::Acquire)
                } else {
                    b.usable()
                }
        };
        match self.lb {
            LbMode::Priority => (0..n).find(|&i| usable(i)),
            LbMode::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|k| (start + k) % n).find(|&i| usable(i))
            }
            LbMode::ConsistentHashing => (0..n)
                .filter(|&i| usable(i))
                .max_by_key(|&i| rendezvous(key, self.list[i].seed)),
        }
    }

    /// Whether [`Backends::pick`] reads its key: consistent hashing over more than one
    /// backend (the key costs a hash of the User-Agent and target per request).
    pub(crate) fn hashes(&self) -> bool {
        self.lb == LbMode::ConsistentHashing && self.list.len() > 1
    }

    /// True when at least one backend is usable: the hub is online.
    pub(crate) fn any_healthy(&self) -> bool {
        self.list.iter().any(Backend::usable)
    }

    /// True when at least one backend is healthy by its last probe, suspect or not: a write
    /// is still sent there.
    pub(crate) fn any_probed_healthy(&self) -> bool {
        self.list.iter().any(|b| b.healthy.load(Ordering::Acquire))
    }

    /// Whether backend `index` is healthy by its last probe.
    pub(crate) fn is_healthy(&self, index: usize) -> bool {
        self.list[index].healthy.load(Ordering::Acquire)
    }

    /// How many times a backend has become usable (healthy and not suspect) after it was not.
    /// Compare two readings to learn whether the cloud came back in between.
    pub(crate) fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Acquire)
    }

    /// A forwarded request to backend `index` failed in transport: stop picking it and have
    /// its checker probe it now. Only the first report before the probe rules wakes it.
    pub(crate) fn report_failure(&self, index: usize) {
        let backend = &self.list[index];
        if !backend.healthy.load(Ordering::Acquire) {
            return;
        }
        let settled = backend.settled.load(Ordering::Acquire);
        // Counted even when already suspect: a round under way must not clear this failure.
        if backend.reports.fetch_add(1, Ordering::AcqRel) != settled {
            return;
        }
        log::info!(
            "a request to the cloud server failed: probing it now server=\"{}\"",
            backend.base
        );
        // Full means a wake is already pending: this failure joins that round.
        let _ = backend.wake.0.try_send(());
    }

    /// Records a probe's verdict, logging a change; it settles any suspicion either way.
    pub(crate) fn set_healthy(&self, index: usize, healthy: bool) {
        let reports = self.list[index].reports.load(Ordering::Acquire);
        self.rule(index, healthy, reports);
    }

    /// Records the verdict of a probe round that began when the failure count
    /// ([`Backends::reports`]) was `reports_before`. It settles the suspicions raised before
    /// then; a failure reported during the round keeps the server suspect (the round's success
    /// may predate it). False when such a failure is left for the next round to rule.
    pub(crate) fn rule(&self, index: usize, healthy: bool, reports_before: u64) -> bool {
        let backend = &self.list[index];
        let was_suspect = backend.suspect();
        // The flag first, then the suspicion: a backend found dead is never usable between.
        let before = backend.healthy.swap(healthy, Ordering::AcqRel);
        let was_usable = before && !was_suspect;
        // One checker per backend rules, in order: `settled` only grows.
        backend.settled.fetch_max(reports_before, Ordering::AcqRel);
        let settled = !backend.suspect();
        if healthy && settled && !was_usable {
            self.recoveries.fetch_add(1, Ordering::AcqRel);
        }
        if healthy && before && was_suspect && settled {
            log::info!(
                "cloud server answered its probe after a failed request: still healthy server=\"{}\"",
                backend.base
            );
        }
        if before != healthy {
            if healthy {
                log::info!("cloud server is healthy server=\"{}\"", backend.base);
            } else {
                log::warn!("cloud server is unhealthy server=\"{}\"", backend.base);
            }
            if !self.any_healthy() {
                log::warn!("no cloud server is healthy: answering from the cache");
            } else if healthy
                && self
                    .list
                    .iter()
                    .filter(|b| b.healthy.load(Ordering::Acquire))
                    .count()
                    == 1
            {
                log::info!("a cloud server is reachable again: forwarding");
            }
        }
        !healthy || settled
    }

    /// How many request failures backend `index` has had reported: read before a probe round,
    /// handed to [`Backends::rule`] with its verdict.
    pub(crate) fn reports(&self, index: usize) -> u64 {
        self.list[index].reports.load(Ordering::Acquire)
    }

    /// The channel that wakes backend `index`'s checker ([`Backends::report_failure`]).
    pub(crate) fn wake_receiver(&self, index: usize) -> Receiver<()> {
        self.list[index].wake.1.clone()
    }

    /// Wakes backend `index`'s checker (a pending wake already covers it).
    fn wake(&self, index: usize) {
        let _ = self.list[index].wake.0.try_send(());
    }

    /// Records one probe's verdict on backend `index` by YurtHub's thresholds: one failure
    /// makes it unhealthy, `threshold` successes in a row (`streak`, the checker's count)
    /// make an unhealthy one healthy again. The probe began when the failure count was
    /// `reports`; a request that failed while it was under way wakes the next probe now.
    pub(crate) fn judge(
        &self,
        index: usize,
        ok: bool,
        reports: u64,
        streak: &mut u32,
        threshold: u32,
    ) {
        let ruled = if ok {
            *streak = streak.saturating_add(1);
            if self.is_healthy(index) || *streak >= threshold {
                self.rule(index, true, reports)
            } else {
                true
            }
        } else {
            *streak = 0;
            self.rule(index, false, reports)
        };
        if !ruled {
            self.wake(index);
        }
    }

    /// (base, healthy by the last probe) of every backend, for metrics.
    pub(crate) fn snapshot(&self) -> Vec<(String, bool)> {
        self.list
            .iter()
            .map(|b| (b.base.clone(), b.healthy.load(Ordering::Acquire)))
            .collect()
    }
}

/// Probes one backend once; `Err` says why it is not healthy.
pub(crate) trait Probe: Send + Sync {
    /// One probe of `base` bounded by `timeout`.
    fn probe(&self, base: &str, timeout: Duration) -> Result<(), ProbeError>;
}

/// Why a probe found its server unhealthy: no answer (by the origin the request path judges
/// by), or an answer that says so. Either makes the server unhealthy; the log line says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// No answer: the server is unreachable, too slow, or the hub cannot ask it yet.
    NoAnswer(UpstreamError),
    /// The server answered with this status, not a 2xx.
    Answered(u16),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The probe's log line names the server already.
            ProbeError::NoAnswer(e) => e.without_server().fmt(f),
            ProbeError::Answered(status) => write!(f, "health probe answered {status}"),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProbeError::NoAnswer(e) => Some(e),
            ProbeError::Answered(_) => None,
        }
    }
}

/// One probe of `base` by the `/readyz` rule: a server healthy by its last probe gets
/// `failed_retry` more tries before it counts as failed, back to back (also after a wake: a
/// request has just failed, and requests answer locally until this round rules); an
/// unhealthy one, one try.
pub(crate) fn readyz_round(
    probe: &dyn Probe,
    base: &str,
    hb: &Heartbeat,
    healthy: bool,
) -> Result<(), ProbeError> {
    let tries = if healthy { 1 + hb.failed_retry } else { 1 };
    let mut result = probe.probe(base, hb.timeout);
    for _ in 1..tries {
        if result.is_ok() {
            break;
        }
        result = probe.probe(base, hb.timeout);
    }
    result
}

/// Probes every backend once, in parallel, and records the results: the state at start-up.
pub(crate) fn probe_all_once(backends: &Backends, probe: &dyn Probe, timeout: Duration) {
    thread::scope(|scope| {
        for index in 0..backends.len() {
            let probe_one = move || {
                let result = probe.probe(&backends.get(index).base, timeout);
                if let Err(why) = &result {
                    log::warn!(
                        "cloud server probe failed server=\"{}\" err=\"{why}\"",
                        backends.get(index).base
                    );
                }
                backends.set_healthy(index, result.is_ok());
            };
            let spawned = thread::Builder::new()
                .name(format!("probe-{index}"))
                .stack_size(crate::SMALL_STACK)
                .spawn_scoped(scope, probe_one);
            if let Err(e) = spawned {
                log::error!("cannot start a health probe: {e}");
            }
        }
    });
}

/// Starts one checker thread per backend; they stop when `stop` is closed or sends.
pub(crate) fn spawn_checkers(
    backends: Arc<Backends>,
    probe: Arc<dyn Probe>,
    heartbeat: Heartbeat,
    stop: Receiver<()>,
) -> Vec<thread::JoinHandle<()>> {
    (0..backends.len())
        .filter_map(|index| {
            let backends = Arc::clone(&backends);
            let probe = Arc::clone(&probe);
            let stop = stop.clone();
            thread::Builder::new()
                .name(format!("health-{index}"))
                .stack_size(crate::SMALL_STACK)
                .spawn(move || check_loop(&backends, index, probe.as_ref(), heartbeat, &stop))
                .map_err(|e| log::error!("cannot start the health checker: {e}"))
                .ok()
        })
        .collect()
}

fn check_loop(
    backends: &Backends,
    index: usize,
    probe: &dyn Probe,
    hb: Heartbeat,
    stop: &Receiver<()>,
) {
    let base = backends.get(index).base.clone();
    let wake = backends.wake_receiver(index);
    let mut successes = 0u32;
    loop {
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(wake) -> _ => {}
            default(hb.interval) => {}
        }
        let reports = backends.reports(index);
        let healthy = backends.is_healthy(index);
        let result = readyz_round(probe, &base, &hb, healthy);
        match &result {
            Err(e) if healthy => log::warn!(
                "cloud server probe failed server=\"{base}\" retries={} err=\"{e}\"",
                hb.failed_retry
            ),
            Err(e) => log::debug!("cloud server still unhealthy server=\"{base}\" err=\"{e}\""),
            Ok(()) => {}
        }
        backends.judge(
            index,
            result.is_ok(),
            reports,
            &mut successes,
            hb.healthy_threshold,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn backends(n: usize, lb: LbMode) -> Backends {
        Backends::new((0..n).map(|i| format!("https://b{i}:6443")).collect(), lb)
    }

    /// 600 distinct clients' keys, as the hub computes them.
    fn client_keys() -> Vec<u64> {
        (0..600)
            .map(|i| affinity_key(&format!("agent-{}", i % 7), &format!("/api/v1/pods?c={i}")))
            .collect()
    }

    fn hashed(b: &Backends, keys: &[u64]) -> Vec<usize> {
        keys.iter()
            .map(|&k| b.pick(None, false, k).unwrap())
            .collect()
    }

    #[test]
    fn consistent_hashing_is_sticky_and_even() {
        let b = backends(3, LbMode::ConsistentHashing);
        let keys = client_keys();
        let picks = hashed(&b, &keys);
        assert_eq!(picks, hashed(&b, &keys), "the same key, the same server");
        // A fresh set of the same servers agrees: the mapping depends on nothing but URLs.
        assert_eq!(
            picks,
            hashed(&backends(3, LbMode::ConsistentHashing), &keys)
        );
        for server in 0..3 {
            let n = picks.iter().filter(|&&p| p == server).count();
            assert!((150..=250).contains(&n), "server {server} got {n} of 600");
        }
        // The key is User-Agent then target: another agent on the same path is another key.
        assert_ne!(affinity_key("a", "/x"), affinity_key("b", "/x"));
        assert_eq!(affinity_key("ab", "/x"), affinity_key("a", "b/x"));
    }

    #[test]
    fn consistent_hashing_moves_only_a_failed_servers_keys() {
        let b = backends(3, LbMode::ConsistentHashing);
        let keys = client_keys();
        let before = hashed(&b, &keys);
        b.set_healthy(1, false);
        let during = hashed(&b, &keys);
        for (i, (&was, &now)) in before.iter().zip(&during).enumerate() {
            if was == 1 {
                assert_ne!(now, 1, "key {i} stayed on the failed server");
            } else {
                assert_eq!(now, was, "key {i} moved off a healthy server");
            }
        }
        // The failed server's keys spread over both others, not all onto one.
        let moved: Vec<_> = during
            .iter()
            .zip(&before)
            .filter(|&(_, &was)| was == 1)
            .map(|(&now, _)| now)
            .collect();
        assert!(moved.contains(&0) && moved.contains(&2), "{moved:?}");
        b.set_healthy(1, true);
        assert_eq!(hashed(&b, &keys), before, "they come back with it");
        // A suspect server (a failed request) is left the same way by reads, not by writes.
        b.report_failure(1);
        assert_eq!(hashed(&b, &keys).iter().filter(|&&p| p == 1).count(), 0);
        let writes: Vec<_> = keys
            .iter()
            .map(|&k| b.pick(None, true, k).unwrap())
            .collect();
        assert_eq!(writes, before);
    }

    #[test]
    fn consistent_hashing_exclude_takes_the_next() {
        let b = backends(3, LbMode::ConsistentHashing);
        for key in client_keys() {
            let first = b.pick(None, false, key).unwrap();
            let second = b.pick(Some(first), false, key).unwrap();
            assert_ne!(first, second);
            // The next is where the key goes when its server fails.
            b.set_healthy(first, false);
            assert_eq!(b.pick(None, false, key), Some(second));
            b.set_healthy(first, true);
        }
        let one = backends(1, LbMode::ConsistentHashing);
        assert_eq!(one.pick(Some(0), false, 7), None);
    }

    #[test]
    fn round_robin_skips_unhealthy() {
        let b = backends(3, LbMode::RoundRobin);
        let picks: Vec<_> = (0..6).map(|_| b.pick(None, false, 0).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        b.set_healthy(1, false);
        let picks: Vec<_> = (0..4).map(|_| b.pick(None, false, 0).unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        assert!(picks.contains(&0) && picks.contains(&2));
    }

    #[test]
    fn priority_takes_the_first_healthy() {
        let b = backends(3, LbMode::Priority);
        assert_eq!(b.pick(None, false, 0), Some(0));
        assert_eq!(b.pick(None, false, 0), Some(0));
        assert_eq!(b.pick(Some(0), false, 0), Some(1));
        b.set_healthy(0, false);
        assert_eq!(b.pick(None, false, 0), Some(1));
        b.set_healthy(1, false);
        b.set_healthy(2, false);
        assert_eq!(b.pick(None, false, 0), None);
        assert!(!b.any_healthy());
    }

    #[test]
    fn recoveries_count_each_return_to_usable() {
        let b = backends(1, LbMode::RoundRobin);
        assert_eq!(b.recoveries(), 0);
        b.set_healthy(0, true);
        assert_eq!(b.recoveries(), 0, "healthy all along is no recovery");
        b.set_healthy(0, false);
        assert_eq!(b.recoveries(), 0);
        b.set_healthy(0, true);
        assert_eq!(b.recoveries(), 1);
        // A failed request makes it unusable at once, with no probe yet; a probe that finds
        // it healthy makes it usable again, which is a return too.
        b.report_failure(0);
        assert!(b.is_healthy(0) && !b.any_healthy() && b.pick(None, false, 0).is_none());
        b.set_healthy(0, true);
        assert!(b.any_healthy());
        assert_eq!(b.recoveries(), 2);
        // Found dead: the suspicion gives way to the flag, and nothing returned.
        b.report_failure(0);
        b.set_healthy(0, false);
        assert!(!b.any_healthy());
        assert_eq!(b.recoveries(), 2);
        // A request failing on a server already unhealthy changes nothing.
        b.report_failure(0);
        b.set_healthy(0, true);
        assert_eq!(b.recoveries(), 3);
        assert!(b.any_healthy());
    }

    /// A probe with one fixed answer that counts its calls.
    struct Fixed {
        ok: bool,
        calls: AtomicUsize,
    }

    impl Probe for Fixed {
        fn probe(&self, _: &str, _: Duration) -> Result<(), ProbeError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.ok {
                Ok(())
            } else {
                Err(ProbeError::Answered(503))
            }
        }
    }

    /// Runs a checker that would not probe for an hour on its own, reports `failures`
    /// request failures at once, and waits until `done` holds.
    fn woken(
        ok: bool,
        failures: usize,
        done: impl Fn(&Backends) -> bool,
    ) -> (Arc<Backends>, usize) {
        let hb = Heartbeat {
            interval: Duration::from_secs(3600),
            timeout: Duration::from_millis(1),
            failed_retry: 3,
            healthy_threshold: 2,
        };
        let b = Arc::new(backends(1, LbMode::RoundRobin));
        let probe = Arc::new(Fixed {
            ok,
            calls: AtomicUsize::new(0),
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let handles = spawn_checkers(Arc::clone(&b), probe.clone(), hb, stop_rx);
        for _ in 0..failures {
            b.report_failure(0);
        }
        assert!(
            !b.any_healthy(),
            "a failed request is not trusted until probed"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done(&b) {
            assert!(
                std::time::Instant::now() < deadline,
                "the checker never ruled"
            );
            thread::sleep(Duration::from_millis(1));
        }
        // A second round, if a burst had woken one, would have started by now.
        thread::sleep(Duration::from_millis(50));
        drop(stop_tx);
        for h in handles {
            h.join().unwrap();
        }
        let calls = probe.calls.load(Ordering::SeqCst);
        (b, calls)
    }

    #[test]
    fn a_failed_request_wakes_one_probe_round_that_finds_the_server_dead() {
        let (b, calls) = woken(false, 20, |b| !b.is_healthy(0));
        assert!(!b.any_healthy());
        assert_eq!(calls, 4, "one round of 1 + failed_retry probes for a burst");
        assert_eq!(b.recoveries(), 0);
    }

    #[test]
    fn a_woken_probe_that_finds_the_server_up_trusts_it_again() {
        let (b, calls) = woken(true, 5, Backends::any_healthy);
        assert!(b.is_healthy(0));
        // A second round when a report came after the first round began (a loaded machine).
        assert!((1..=2).contains(&calls), "{calls} probes");
        assert_eq!(b.recoveries(), 1, "held watches end: the cloud is back");
    }

    #[test]
    fn writes_may_go_to_a_suspect_server_reads_may_not() {
        let b = backends(2, LbMode::Priority);
        b.report_failure(0);
        assert_eq!(b.pick(None, false, 0), Some(1));
        b.report_failure(1);
        assert_eq!(b.pick(None, false, 0), None);
        assert!(!b.any_healthy());
        assert!(b.any_probed_healthy(), "healthy by the last probe");
        assert_eq!(b.pick(None, true, 0), Some(0));
        assert_eq!(b.pick(Some(0), true, 0), Some(1));
        b.set_healthy(0, false);
        b.set_healthy(1, false);
        assert_eq!(
            b.pick(None, true, 0),
            None,
            "a server found dead takes nothing"
        );
        assert!(!b.any_probed_healthy());
    }

    /// A probe that succeeds; during its first call a request fails on the server, as if
    /// the failure came while the probe's answer was on its way.
    struct FailureDuringProbe {
        backends: Arc<Backends>,
        /// (usable, recoveries) as each call began.
        seen: Mutex<Vec<(bool, u64)>>,
    }

    impl Probe for FailureDuringProbe {
        fn probe(&self, _: &str, _: Duration) -> Result<(), ProbeError> {
            let b = &self.backends;
            let mut seen = self.seen.lock().unwrap();
            seen.push((b.any_healthy(), b.recoveries()));
            if seen.len() == 1 {
                b.report_failure(0);
            }
            Ok(())
        }
    }

    #[test]
    fn a_round_that_began_before_a_failure_does_not_clear_it() {
        let hb = Heartbeat {
            interval: Duration::from_secs(3600),
            timeout: Duration::from_millis(1),
            failed_retry: 3,
            healthy_threshold: 1,
        };
        let b = Arc::new(backends(1, LbMode::RoundRobin));
        let probe = Arc::new(FailureDuringProbe {
            backends: Arc::clone(&b),
            seen: Mutex::new(Vec::new()),
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let handles = spawn_checkers(Arc::clone(&b), probe.clone(), hb, stop_rx);
        b.report_failure(0);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !(b.any_healthy() && probe.seen.lock().unwrap().len() >= 2) {
            assert!(
                std::time::Instant::now() < deadline,
                "no second round ruled: {:?}",
                probe.seen.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(50));
        drop(stop_tx);
        for h in handles {
            h.join().unwrap();
        }
        let seen = probe.seen.lock().unwrap();
        // The second round began with the server still suspect and nothing recovered; it
        // found the server up: one recovery, and no third round.
        assert_eq!(*seen, [(false, 0), (false, 0)]);
        assert!(b.any_healthy());
        assert_eq!(b.recoveries(), 1);
    }

    /// A probe whose answers the test scripts; it records the backend's health at each call.
    struct Scripted {
        backends: Arc<Backends>,
        answers: Mutex<Vec<bool>>,
        seen: Mutex<Vec<bool>>,
        done: crossbeam_channel::Sender<()>,
    }

    impl Probe for Scripted {
        fn probe(&self, _: &str, _: Duration) -> Result<(), ProbeError> {
            self.seen.lock().unwrap().push(self.backends.is_healthy(0));
            let mut answers = self.answers.lock().unwrap();
            if answers.is_empty() {
                let _ = self.done.try_send(());
                return Err(ProbeError::Answered(599));
            }
            if answers.remove(0) {
                Ok(())
            } else {
                Err(ProbeError::Answered(503))
            }
        }
    }

    #[test]
    fn retry_and_threshold_rules() {
        let hb = Heartbeat {
            interval: Duration::from_millis(1),
            timeout: Duration::from_millis(1),
            failed_retry: 2,
            healthy_threshold: 2,
        };
        let b = Arc::new(backends(1, LbMode::RoundRobin));
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        // Round 1: fail, fail, ok: still healthy (two retries allowed).
        // Round 2: three failures: unhealthy. Then ok (1 of 2), fail (count reset), ok, ok: healthy.
        let probe = Arc::new(Scripted {
            backends: Arc::clone(&b),
            answers: Mutex::new(vec![
                false, false, true, false, false, false, true, false, true, true,
            ]),
            seen: Mutex::new(Vec::new()),
            done: done_tx,
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let handles = spawn_checkers(Arc::clone(&b), probe.clone(), hb, stop_rx);
        done_rx.recv().unwrap();
        drop(stop_tx);
        for h in handles {
            h.join().unwrap();
        }
        let seen = probe.seen.lock().unwrap();
        let (t, f) = (true, false);
        assert_eq!(seen[..11], [t, t, t, t, t, t, f, f, f, f, t]);
    }
}
