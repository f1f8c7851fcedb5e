//! The resumable watches' counters, per resource (`resource[.group]`):
//!
//! ```text
//! tinyhub_watch_resumed_total{resource}             legs resumed (200 to a resume request)
//! tinyhub_watch_relists_total{resource}             lists sent by rounds after a 410
//! tinyhub_watch_events_synthesized_total{resource}  ADDED/MODIFIED/DELETED sent by differences
//! ```
//!
//! Kept here and rendered by `metrics` as a source, as the filters' series are.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use crate::metrics::header;

/// Resources counted at most (the page's cap on any labelled family); past it a new
/// resource is not counted.
const MAX_RESOURCES: usize = crate::link::MAX_SERIES;

/// The counters of each resource: resumed, relists, synthesized events.
pub(crate) struct WatchSeries(Mutex<BTreeMap<String, [u64; 3]>>);

/// The process's counters, rendered by [`render`].
pub(crate) static WATCH_SERIES: WatchSeries = WatchSeries::new();

/// Which counter.
#[derive(Debug, Clone, Copy)]
enum Counter {
    Resumed = 0,
    Relists = 1,
    Synthesized = 2,
}

impl WatchSeries {
    /// No counts yet.
    pub(crate) const fn new() -> WatchSeries {
        WatchSeries(Mutex::new(BTreeMap::new()))
    }

    /// A leg of a watch of `resource` was resumed (the cloud answered 200).
    pub(crate) fn resumed(&self, resource: &str) {
        self.add(resource, Counter::Resumed, 1);
    }

    /// A round listed `resource` after a 410 (its leader only).
    pub(crate) fn relisted(&self, resource: &str) {
        self.add(resource, Counter::Relists, 1);
    }

    /// A difference sent `events` ADDED/MODIFIED/DELETED events of `resource`.
    pub(crate) fn synthesized(&self, resource: &str, events: u64) {
        self.add(resource, Counter::Synthesized, events);
    }

    fn add(&self, resource: &str, counter: Counter, n: u64) {
        // Plain counters: a panic elsewhere leaves them usable.
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counts) = map.get_mut(resource) {
            counts[counter as usize] += n;
        } else if map.len() < MAX_RESOURCES {
            let mut counts = [0; 3];
            counts[counter as usize] = n;
            map.insert(resource.to_owned(), counts);
        }
    }

    fn render(&self, out: &mut String) {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (counter, name, help) in [
            (
                Counter::Resumed,
                "tinyhub_watch_resumed_total",
                "watch legs resumed from the last delivered resourceVersion, by resource",
            ),
            (
                Counter::Relists,
                "tinyhub_watch_relists_total",
                "lists sent to rebuild resumed watches after the cloud's history was gone, by resource",
            ),
            (
                Counter::Synthesized,
                "tinyhub_watch_events_synthesized_total",
                "ADDED, MODIFIED and DELETED events the hub made from such a list's difference, by resource",
            ),
        ] {
            header(out, name, "counter", help);
            for (resource, counts) in map.iter() {
                let _ = writeln!(
                    out,
                    "{name}{{resource=\"{resource}\"}} {}",
                    counts[counter as usize]
                );
            }
        }
    }
}

/// Renders the resumable watches' series (the source `app/build.rs` registers).
pub(crate) fn render(out: &mut String) {
    WATCH_SERIES.render(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_resource_counts_apart() {
        let s = WatchSeries::new();
        s.resumed("pods");
        s.resumed("pods");
        s.relisted("endpointslices.discovery.k8s.io");
        s.synthesized("pods", 4);
        let mut text = String::new();
        s.render(&mut text);
        for line in [
            "# TYPE tinyhub_watch_resumed_total counter",
            "tinyhub_watch_resumed_total{resource=\"pods\"} 2",
            "tinyhub_watch_resumed_total{resource=\"endpointslices.discovery.k8s.io\"} 0",
            "tinyhub_watch_relists_total{resource=\"endpointslices.discovery.k8s.io\"} 1",
            "tinyhub_watch_relists_total{resource=\"pods\"} 0",
            "tinyhub_watch_events_synthesized_total{resource=\"pods\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
