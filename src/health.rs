//! Cloud backends and their health: which `--server-addr` entries are usable now, how a
//! request picks one (`rr` or `priority`), and the checker threads that probe each backend
//! every `--heartbeat-interval-seconds` with YurtHub's retry and healthy-threshold rules.
//!
//! The probe itself (an HTTP request) is given from outside through [`Probe`]: this module
//! knows nothing about HTTP or TLS. "No backend is healthy" is how the rest of the hub knows
//! it is offline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::config::{Heartbeat, LbMode};

/// One cloud apiserver.
#[derive(Debug)]
pub struct Backend {
    /// `https://host:port`.
    pub base: String,
    healthy: AtomicBool,
}

/// The cloud apiservers and how requests spread over them.
#[derive(Debug)]
pub struct Backends {
    list: Vec<Backend>,
    lb: LbMode,
    next: AtomicUsize,
}

impl Backends {
    /// Backends in `--server-addr` order, all presumed healthy until probed.
    pub fn new(bases: Vec<String>, lb: LbMode) -> Backends {
        Backends {
            list: bases
                .into_iter()
                .map(|base| Backend {
                    base,
                    healthy: AtomicBool::new(true),
                })
                .collect(),
            lb,
            next: AtomicUsize::new(0),
        }
    }

    /// The backend at `index`.
    pub fn get(&self, index: usize) -> &Backend {
        &self.list[index]
    }

    /// How many backends there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when there are none (never, after configuration).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Picks a healthy backend other than `exclude`, by the load-balancing mode.
    pub fn pick(&self, exclude: Option<usize>) -> Option<usize> {
        let n = self.list.len();
        let usable = |i: usize| Some(i) != exclude && self.list[i].healthy.load(Ordering::Relaxed);
        match self.lb {
            LbMode::Priority => (0..n).find(|&i| usable(i)),
            LbMode::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|k| (start + k) % n).find(|&i| usable(i))
            }
        }
    }

    /// True when at least one backend is healthy: the hub is online.
    pub fn any_healthy(&self) -> bool {
        self.list.iter().any(|b| b.healthy.load(Ordering::Relaxed))
    }

    /// Whether backend `index` is healthy.
    pub fn is_healthy(&self, index: usize) -> bool {
        self.list[index].healthy.load(Ordering::Relaxed)
    }

    /// Records a new health state, logging a change.
    pub fn set_healthy(&self, index: usize, healthy: bool) {
        let backend = &self.list[index];
        let before = backend.healthy.swap(healthy, Ordering::Relaxed);
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
                    .filter(|b| b.healthy.load(Ordering::Relaxed))
                    .count()
                    == 1
            {
                log::info!("a cloud server is reachable again: forwarding");
            }
        }
    }

    /// (base, healthy) of every backend, for metrics.
    pub fn snapshot(&self) -> Vec<(String, bool)> {
        self.list
            .iter()
            .map(|b| (b.base.clone(), b.healthy.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Probes one backend once; `Err` says why it is not healthy.
pub trait Probe: Send + Sync {
    /// One probe of `base` bounded by `timeout`.
    fn probe(&self, base: &str, timeout: Duration) -> Result<(), String>;
}

/// Probes every backend once, in parallel, and records the results: the state at start-up.
pub fn probe_all_once(backends: &Backends, probe: &dyn Probe, timeout: Duration) {
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
pub fn spawn_checkers(
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
    let mut successes = 0u32;
    loop {
        match stop.recv_timeout(hb.interval) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if backends.is_healthy(index) {
            // A healthy server gets `failed_retry` more tries before it is declared unhealthy.
            let mut last_error = String::new();
            let ok = (0..=hb.failed_retry).any(|_| match probe.probe(&base, hb.timeout) {
                Ok(()) => true,
                Err(e) => {
                    last_error = e;
                    false
                }
            });
            if !ok {
                log::warn!(
                    "cloud server probe failed server=\"{base}\" retries={} err=\"{last_error}\"",
                    hb.failed_retry
                );
                successes = 0;
                backends.set_healthy(index, false);
            }
        } else {
            match probe.probe(&base, hb.timeout) {
                Ok(()) => {
                    successes += 1;
                    if successes >= hb.healthy_threshold {
                        successes = 0;
                        backends.set_healthy(index, true);
                    }
                }
                Err(e) => {
                    log::debug!("cloud server still unhealthy server=\"{base}\" err=\"{e}\"");
                    successes = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn backends(n: usize, lb: LbMode) -> Backends {
        Backends::new((0..n).map(|i| format!("https://b{i}:6443")).collect(), lb)
    }

    #[test]
    fn round_robin_skips_unhealthy() {
        let b = backends(3, LbMode::RoundRobin);
        let picks: Vec<_> = (0..6).map(|_| b.pick(None).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        b.set_healthy(1, false);
        let picks: Vec<_> = (0..4).map(|_| b.pick(None).unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        assert!(picks.contains(&0) && picks.contains(&2));
    }

    #[test]
    fn priority_takes_the_first_healthy() {
        let b = backends(3, LbMode::Priority);
        assert_eq!(b.pick(None), Some(0));
        assert_eq!(b.pick(None), Some(0));
        assert_eq!(b.pick(Some(0)), Some(1));
        b.set_healthy(0, false);
        assert_eq!(b.pick(None), Some(1));
        b.set_healthy(1, false);
        b.set_healthy(2, false);
        assert_eq!(b.pick(None), None);
        assert!(!b.any_healthy());
    }

    /// A probe whose answers the test scripts; it records the backend's health at each call.
    struct Scripted {
        backends: Arc<Backends>,
        answers: Mutex<Vec<bool>>,
        seen: Mutex<Vec<bool>>,
        done: crossbeam_channel::Sender<()>,
    }

    impl Probe for Scripted {
        fn probe(&self, _: &str, _: Duration) -> Result<(), String> {
            self.seen.lock().unwrap().push(self.backends.is_healthy(0));
            let mut answers = self.answers.lock().unwrap();
            if answers.is_empty() {
                let _ = self.done.try_send(());
                return Err("script over".into());
            }
            if answers.remove(0) {
                Ok(())
            } else {
                Err("down".into())
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
