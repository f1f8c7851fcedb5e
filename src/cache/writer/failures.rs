//! Store failures as the writer reports them: each counted, its key kept as failed until
//! stored, and logged at a bounded rate (a failing disk fails every write); and the count of
//! each put's outcome. Shared by the writer loop (`run.rs`) and the rules (`rules.rs`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::error_keys::{ErrorKeys, Keyed};
use crate::cache::store::{PutOutcome, StoreError};
use crate::metrics::{METRICS, Metrics};

/// A failing disk (full, read-only) fails every write: one log line per object would flood
/// the log, on flash it may share. Failures are reported once per interval, with a count.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Store failures not yet reported, and when the last report was made. Owned by [`run`](super::run()):
/// only the writer thread writes, so it needs no lock.
#[derive(Default)]
pub(super) struct FailureLog {
    reported: Option<Instant>,
    unreported: u64,
    /// Set by a failure, cleared by the next successful write.
    failing: bool,
    /// The keys whose last write failed.
    pub(super) error_keys: ErrorKeys,
}

/// Counts a put's outcome; a failure goes to the failure log. True when the store holds the
/// object (written, or already so).
pub(super) fn count_put(
    failures: &mut FailureLog,
    result: Result<PutOutcome, StoreError>,
    what: &str,
    key: &dyn Keyed,
) -> bool {
    match result {
        Ok(outcome) => {
            match outcome {
                PutOutcome::Written { bytes } => {
                    failures.written_again();
                    Metrics::inc(&METRICS.cache_objects_written);
                    METRICS
                        .cache_bytes_written
                        .fetch_add(bytes, Ordering::Relaxed);
                }
                PutOutcome::Identical => Metrics::inc(&METRICS.cache_writes_skipped_identical),
                PutOutcome::Stale => Metrics::inc(&METRICS.cache_writes_skipped_stale),
            }
            failures.stored(key);
            true
        }
        Err(e) => {
            failures.error(what, key, &e);
            false
        }
    }
}

impl FailureLog {
    /// No failure yet; `error_keys` the keys that failed before (kept beside the cache).
    pub(super) fn new(error_keys: ErrorKeys) -> FailureLog {
        FailureLog {
            error_keys,
            ..FailureLog::default()
        }
    }

    /// Counts a store failure, keeps its key as failed, and reports it unless one was
    /// reported within the interval.
    pub(super) fn error(&mut self, what: &str, subject: &dyn Keyed, e: &StoreError) {
        Metrics::inc(&METRICS.cache_errors);
        self.error_keys.failed(subject, e);
        if e.is_disk_full() {
            Metrics::inc(&METRICS.cache_disk_full);
        }
        self.failing = true;
        if self
            .reported
            .is_some_and(|t| t.elapsed() < FAILURE_LOG_INTERVAL)
        {
            self.unreported += 1;
            return;
        }
        let earlier = std::mem::take(&mut self.unreported);
        self.reported = Some(Instant::now());
        log::warn!(
            "cache: storing {what} {} failed: {e} ({earlier} more failures since the \
             last report; what is cached stays as it was; the next report comes in {} s at the \
             earliest)",
            subject.error_key(),
            FAILURE_LOG_INTERVAL.as_secs()
        );
    }

    /// `key` holds what it should now: no longer a failed key.
    pub(super) fn stored(&mut self, key: &dyn Keyed) {
        self.error_keys.stored(key);
    }

    /// After failures, says once that writes succeed again.
    pub(super) fn written_again(&mut self) {
        if !std::mem::take(&mut self.failing) {
            return;
        }
        let earlier = std::mem::take(&mut self.unreported);
        log::info!("cache: writing again ({earlier} failures since the last report)");
    }
}
