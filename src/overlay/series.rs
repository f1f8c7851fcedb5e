//! The endpoints overlay's series for the metrics page (`tinyhub_endpoints_*`): the pods
//! overlaid, the objects served rewritten, the MODIFIED events the overlay's changes made, and
//! kubelet's writes by what became of them. [`render`] is the source app/build.rs registers
//! ([`crate::metrics::Metrics::register`]); the counters are [`SERIES`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::{Captured, EndpointKind, Ignored};
use crate::metrics::header;

/// The overlay's counters.
pub(super) struct Series {
    /// Pods overlaid now.
    pods: AtomicI64,
    /// Objects served rewritten, by [`EndpointKind`] (slices, endpoints).
    rewritten: [AtomicU64; 2],
    /// MODIFIED events a pass over a watch's objects produced, by kind.
    events: [AtomicU64; 2],
    /// kubelet's writes by outcome, in [`OUTCOMES`] order.
    captures: [AtomicU64; OUTCOMES.len()],
}

/// The `outcome` labels of `tinyhub_endpoints_overlay_captures_total`.
const OUTCOMES: [&str; 8] = [
    "applied",
    "unchanged",
    "not_kubelet",
    "not_cached",
    "not_this_pod",
    "unreadable",
    "disabled",
    "online",
];

/// The kinds in label order.
const KINDS: [EndpointKind; 2] = [EndpointKind::Slice, EndpointKind::Endpoints];

/// The process's overlay counters.
pub(super) static SERIES: Series = Series::new();

impl Series {
    /// All zero.
    pub(super) const fn new() -> Series {
        Series {
            pods: AtomicI64::new(0),
            rewritten: [AtomicU64::new(0), AtomicU64::new(0)],
            events: [AtomicU64::new(0), AtomicU64::new(0)],
            captures: [
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ],
        }
    }

    /// Counts a capture by its outcome.
    pub(super) fn captured(&self, outcome: &Captured) {
        let i = match outcome {
            Captured::Applied { changed: true } => 0,
            Captured::Applied { changed: false } => 1,
            Captured::Ignored(Ignored::NotKubelet) => 2,
            Captured::Ignored(Ignored::NotCached) => 3,
            Captured::Ignored(Ignored::NotThisPod) => 4,
            Captured::Ignored(Ignored::Unreadable(_)) => 5,
            Captured::Ignored(Ignored::Disabled) => 6,
            Captured::Ignored(Ignored::Online) => 7,
        };
        self.captures[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an object served rewritten.
    pub(super) fn rewritten(&self, kind: EndpointKind) {
        self.rewritten[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` MODIFIED events of a pass.
    pub(super) fn events(&self, kind: EndpointKind, n: usize) {
        self.events[kind as usize].fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Sets the number of pods overlaid.
    pub(super) fn set_pods(&self, n: usize) {
        self.pods
            .store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
    }
}

#[cfg(test)]
impl Series {
    /// The count of captures with `outcome`.
    pub(super) fn captures_of(&self, outcome: &str) -> u64 {
        OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .map_or(0, |i| self.captures[i].load(Ordering::Relaxed))
    }

    /// The objects served rewritten of `kind`, and the MODIFIED events of passes.
    pub(super) fn served(&self, kind: EndpointKind) -> (u64, u64) {
        (
            self.rewritten[kind as usize].load(Ordering::Relaxed),
            self.events[kind as usize].load(Ordering::Relaxed),
        )
    }
}

/// Renders the overlay's series from [`SERIES`].
pub(crate) fn render(out: &mut String) {
    render_series(out, &SERIES);
}

/// The overlay's series from `series`.
fn render_series(out: &mut String, series: &Series) {
    header(
        out,
        "tinyhub_endpoints_overlay_pods",
        "gauge",
        "this node's pods whose state kubelet reported while the cloud was unreachable, overlaid on the cached endpoints",
    );
    let _ = writeln!(
        out,
        "tinyhub_endpoints_overlay_pods {}",
        series.pods.load(Ordering::Relaxed)
    );
    let by_resource = |out: &mut String, name: &str, help: &str, counts: &[AtomicU64; 2]| {
        header(out, name, "counter", help);
        for kind in KINDS {
            let _ = writeln!(
                out,
                "{name}{{resource=\"{}\"}} {}",
                kind.resource(),
                counts[kind as usize].load(Ordering::Relaxed)
            );
        }
    };
    by_resource(
        out,
        "tinyhub_endpoints_rewritten_total",
        "EndpointSlices and Endpoints served rewritten to this node's pods while the cloud was unreachable, by resource",
        &series.rewritten,
    );
    by_resource(
        out,
        "tinyhub_endpoints_overlay_events_total",
        "MODIFIED events sent on open watches because the overlay changed or was dropped, by resource",
        &series.events,
    );
    header(
        out,
        "tinyhub_endpoints_overlay_captures_total",
        "counter",
        "pod status writes seen while the cloud was unreachable, by what the overlay made of them",
    );
    for (outcome, count) in OUTCOMES.iter().zip(&series.captures) {
        let _ = writeln!(
            out,
            "tinyhub_endpoints_overlay_captures_total{{outcome=\"{outcome}\"}} {}",
            count.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn overlay_series_show_each_resource_and_outcome() {
        static S: Series = Series::new();
        S.set_pods(2);
        S.rewritten(EndpointKind::Slice);
        S.rewritten(EndpointKind::Slice);
        S.rewritten(EndpointKind::Endpoints);
        S.events(EndpointKind::Endpoints, 3);
        S.captured(&Captured::Applied { changed: true });
        S.captured(&Captured::Applied { changed: false });
        S.captured(&Captured::Ignored(Ignored::NotKubelet));
        S.captured(&Captured::Ignored(Ignored::NotKubelet));
        S.captured(&Captured::Ignored(Ignored::Unreadable("x".into())));
        let mut text = String::new();
        render_series(&mut text, &S);
        for line in [
            "# TYPE tinyhub_endpoints_overlay_pods gauge",
            "tinyhub_endpoints_overlay_pods 2",
            "# TYPE tinyhub_endpoints_rewritten_total counter",
            "tinyhub_endpoints_rewritten_total{resource=\"endpointslices\"} 2",
            "tinyhub_endpoints_rewritten_total{resource=\"endpoints\"} 1",
            "tinyhub_endpoints_overlay_events_total{resource=\"endpointslices\"} 0",
            "tinyhub_endpoints_overlay_events_total{resource=\"endpoints\"} 3",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"applied\"} 1",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"unchanged\"} 1",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"not_kubelet\"} 2",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"not_cached\"} 0",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"unreadable\"} 1",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"disabled\"} 0",
            "tinyhub_endpoints_overlay_captures_total{outcome=\"online\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert_eq!(
            text.matches("tinyhub_endpoints_overlay_captures_total{")
                .count(),
            OUTCOMES.len()
        );
        assert_eq!(OUTCOMES.len(), 8);
    }

    #[test]
    fn the_page_carries_the_overlay_series() {
        static M: Metrics = Metrics::new();
        M.register(Box::new(render));
        let text = M.render(&[]);
        assert!(text.contains("tinyhub_endpoints_rewritten_total{resource=\"endpoints\"} "));
        assert!(text.contains("# TYPE tinyhub_endpoints_overlay_pods gauge"));
    }
}
