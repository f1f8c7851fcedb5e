//! Is kubelet alive? Judged by its lease requests (YurtHub's
//! `pkg/yurthub/healthchecker/cloudapiserver`): the hub answers them itself, so it records the time
//! of each, and kubelet counts as stopped once a grace period passed without one. Two atomics:
//! cheap enough for the request path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When kubelet last asked for its lease.
#[derive(Debug)]
pub(crate) struct KubeletLiveness {
    /// Reference point of the stored offsets.
    origin: Instant,
    /// Microseconds from `origin` to the newest request seen.
    last_micros: AtomicU64,
    /// Whether any request was seen (before the first one kubelet is never "stopped").
    seen: AtomicBool,
}

impl KubeletLiveness {
    /// Nothing seen yet; `origin` must not be later than any time given to [`Self::record`].
    pub(crate) fn new(origin: Instant) -> KubeletLiveness {
        KubeletLiveness {
            origin,
            last_micros: AtomicU64::new(0),
            seen: AtomicBool::new(false),
        }
    }

    /// Notes a kubelet lease request at `now`. Concurrent calls keep the newest time.
    pub(crate) fn record(&self, now: Instant) {
        let micros = now.saturating_duration_since(self.origin).as_micros() as u64;
        self.last_micros.fetch_max(micros, Ordering::Relaxed);
        self.seen.store(true, Ordering::Release);
    }

    /// When kubelet was last seen, if ever.
    pub(crate) fn last_seen(&self) -> Option<Instant> {
        if !self.seen.load(Ordering::Acquire) {
            return None;
        }
        let micros = self.last_micros.load(Ordering::Relaxed);
        Some(self.origin + Duration::from_micros(micros))
    }

    /// Whether kubelet is stopped at `now`: more than `grace` passed since its last request
    /// (YurtHub: `now > last + grace`), or none came within `first` of the origin (the hub's
    /// start; YurtHub waits for the first request forever).
    pub(crate) fn stopped(&self, now: Instant, grace: Duration, first: Duration) -> bool {
        match self.last_seen() {
            Some(last) => now.saturating_duration_since(last) > grace,
            None => now.saturating_duration_since(self.origin) > first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(40);
    const FIRST: Duration = Duration::from_secs(300);

    #[test]
    fn before_the_first_request_stopped_only_past_the_first_grace() {
        let t0 = Instant::now();
        let k = KubeletLiveness::new(t0);
        assert!(!k.stopped(t0 + Duration::from_secs(300), GRACE, FIRST));
        assert!(k.stopped(t0 + Duration::from_secs(301), GRACE, FIRST));
        assert_eq!(k.last_seen(), None);
        // A request, however late, starts the usual rule.
        k.record(t0 + Duration::from_secs(400));
        assert!(!k.stopped(t0 + Duration::from_secs(420), GRACE, FIRST));
    }

    #[test]
    fn stopped_only_past_the_grace_period() {
        let t0 = Instant::now();
        let k = KubeletLiveness::new(t0);
        k.record(t0 + Duration::from_secs(5));
        assert!(
            !k.stopped(t0 + Duration::from_secs(45), GRACE, FIRST),
            "exactly the grace"
        );
        assert!(k.stopped(t0 + Duration::from_millis(45_001), GRACE, FIRST));
        // A new request brings it back.
        k.record(t0 + Duration::from_secs(50));
        assert!(!k.stopped(t0 + Duration::from_secs(60), GRACE, FIRST));
    }

    #[test]
    fn an_older_time_does_not_move_the_last_request_back() {
        let t0 = Instant::now();
        let k = KubeletLiveness::new(t0);
        k.record(t0 + Duration::from_secs(30));
        k.record(t0 + Duration::from_secs(10));
        assert_eq!(k.last_seen(), Some(t0 + Duration::from_secs(30)));
        assert!(!k.stopped(t0 + Duration::from_secs(60), GRACE, FIRST));
    }

    #[test]
    fn records_from_many_threads() {
        let t0 = Instant::now();
        let k = std::sync::Arc::new(KubeletLiveness::new(t0));
        let threads: Vec<_> = (1..=4u64)
            .map(|i| {
                let k = k.clone();
                std::thread::spawn(move || k.record(t0 + Duration::from_secs(i)))
            })
            .collect();
        for t in threads {
            t.join().expect("recording thread");
        }
        assert_eq!(k.last_seen(), Some(t0 + Duration::from_secs(4)));
    }
}
