//! The response filters' series for the metrics page (`tinyhub_filter_*`): objects per
//! filter and outcome, and the time per answer. [`render`] is the source app/build.rs registers
//! ([`crate::metrics::Metrics::register`]); the counters are [`FILTER_STATS`].

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::{FILTER_STATS, FilterName, FilterStats};
use crate::metrics::{header, summary};

/// Renders the filters' series from [`FILTER_STATS`], every filter's whether it ran or not.
pub(crate) fn render(out: &mut String) {
    render_stats(out, &FILTER_STATS);
}

/// The response filters' series: objects per filter and outcome, each filter's own time per
/// answer, and the whole filter stage's time per answer per chain (summaries: sum and
/// count).
fn render_stats(out: &mut String, stats: &FilterStats) {
    header(
        out,
        "tinyhub_filter_objects_total",
        "counter",
        "objects a response filter saw, changed or dropped",
    );
    for filter in FilterName::ALL {
        let c = stats.of(filter);
        for (outcome, value) in [
            ("seen", &c.seen),
            ("changed", &c.changed),
            ("dropped", &c.dropped),
        ] {
            let _ = writeln!(
                out,
                "tinyhub_filter_objects_total{{filter=\"{}\",outcome=\"{outcome}\"}} {}",
                filter.name(),
                value.load(Ordering::Relaxed)
            );
        }
    }
    header(
        out,
        "tinyhub_filter_answer_seconds",
        "summary",
        "time one response filter itself spent on an answer (its lookups included), by filter; a watch counts once, when it ends",
    );
    for filter in FilterName::ALL {
        let c = stats.of(filter);
        let answers = c.answers.load(Ordering::Relaxed);
        if answers == 0 {
            continue;
        }
        let label = format!("filter=\"{}\"", filter.name());
        let nanos = c.nanos.load(Ordering::Relaxed);
        summary(out, "tinyhub_filter_answer_seconds", &label, nanos, answers);
    }
    header(
        out,
        "tinyhub_filter_seconds",
        "summary",
        "time the filter stage spent on an answer (decode, filters, encode), by chain; a watch counts once, when it ends",
    );
    for (chain, answers, nanos) in stats.answer_times() {
        let names: Vec<&str> = chain.iter().map(FilterName::name).collect();
        let label = format!("filter_chain=\"{}\"", names.join(","));
        summary(out, "tinyhub_filter_seconds", &label, nanos, answers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::Chain;
    use crate::metrics::Metrics;

    #[test]
    fn filter_series_show_each_filter_and_the_time_per_chain() {
        static S: FilterStats = FilterStats::new();
        let master = S.of(FilterName::MasterService);
        master.seen.fetch_add(5, Ordering::Relaxed);
        master.changed.fetch_add(1, Ordering::Relaxed);
        S.of(FilterName::NodePortIsolation)
            .nanos
            .fetch_add(1_500_000, Ordering::Relaxed);
        S.of(FilterName::DiscardCloudService)
            .dropped
            .fetch_add(2, Ordering::Relaxed);
        let proxy = Chain::EMPTY
            .with(FilterName::NodePortIsolation)
            .with(FilterName::DiscardCloudService);
        S.record_answer(proxy, std::time::Duration::from_millis(3));
        S.record_answer(proxy, std::time::Duration::from_millis(1));
        let mut text = String::new();
        render_stats(&mut text, &S);
        assert!(text.contains("# TYPE tinyhub_filter_objects_total counter\n"));
        for line in [
            "tinyhub_filter_objects_total{filter=\"masterservice\",outcome=\"seen\"} 5",
            "tinyhub_filter_objects_total{filter=\"masterservice\",outcome=\"changed\"} 1",
            "tinyhub_filter_objects_total{filter=\"masterservice\",outcome=\"dropped\"} 0",
            "tinyhub_filter_objects_total{filter=\"discardcloudservice\",outcome=\"dropped\"} 2",
            "tinyhub_filter_objects_total{filter=\"serviceenvupdater\",outcome=\"seen\"} 0",
            "# TYPE tinyhub_filter_seconds summary",
            // Registration order, whatever order the chain was built in.
            "tinyhub_filter_seconds_sum{filter_chain=\"discardcloudservice,nodeportisolation\"} 0.004000000",
            "tinyhub_filter_seconds_count{filter_chain=\"discardcloudservice,nodeportisolation\"} 2",
            "# TYPE tinyhub_filter_answer_seconds summary",
            "tinyhub_filter_answer_seconds_sum{filter=\"nodeportisolation\"} 0.001500000",
            "tinyhub_filter_answer_seconds_count{filter=\"nodeportisolation\"} 2",
            "tinyhub_filter_answer_seconds_count{filter=\"discardcloudservice\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert_eq!(text.matches("tinyhub_filter_objects_total{").count(), 21);
        // A chain or filter that filtered nothing has no series.
        assert_eq!(text.matches("tinyhub_filter_seconds_count{").count(), 1);
        assert_eq!(
            text.matches("tinyhub_filter_answer_seconds_count{").count(),
            2
        );
    }

    #[test]
    fn the_page_carries_the_filter_series() {
        static M: Metrics = Metrics::new();
        M.register(Box::new(render));
        let text = M.render(&[]);
        assert!(text.contains(
            "tinyhub_filter_objects_total{filter=\"servicetopology\",outcome=\"seen\"} "
        ));
        assert!(text.contains("# TYPE tinyhub_filter_seconds summary"));
    }
}
