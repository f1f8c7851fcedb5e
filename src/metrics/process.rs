//! The standard `process_*` series, as Prometheus' Go and Rust clients name and define them
//! (so node dashboards and alerts written for any exporter read the hub too), taken from
//! `/proc` at each scrape: no thread, no state between scrapes.
//!
//! Sources: `/proc/self/stat` (CPU time, start time, virtual and resident size),
//! `/proc/self/fd` (open descriptors), `/proc/self/limits` (the soft `nofile` and address
//! space limits),
//! `/proc/stat` (`btime`, the boot time the start time counts from). The stat line and its
//! units (clock ticks, the page size) are read by `src/procfs.rs`.
//!
//! A source that cannot be read leaves its series out of the page (never a made-up 0).

use std::fmt::Write as _;
use std::path::Path;

use crate::procfs::{Stat, Units, parse_stat};

/// What one scrape read; `None` where the source could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit of open file descriptors (`u64::MAX` when unlimited, as the Go client).
    pub max_fds: Option<u64>,
    /// The soft limit of the address space, in bytes (`u64::MAX` when unlimited).
    pub virtual_max_bytes: Option<u64>,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: Option<u64>,
    /// Resident set size, in bytes.
    pub resident_bytes: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// Reads this process's figures now.
    pub(crate) fn read() -> ProcessStats {
        let proc = Path::new("/proc");
        let stat = std::fs::read_to_string(proc.join("self/stat"))
            .ok()
            .and_then(|s| parse_stat(&s));
        let boot = std::fs::read_to_string(proc.join("stat"))
            .ok()
            .and_then(|s| parse_boot_time(&s));
        let open_fds = std::fs::read_dir(proc.join("self/fd"))
            .ok()
            // The directory handle read_dir holds is one of the entries: not counted.
            .map(|dir| dir.count().saturating_sub(1) as u64);
        let limits = std::fs::read_to_string(proc.join("self/limits")).unwrap_or_default();
        let mut stats = ProcessStats::from_parts(
            stat,
            boot,
            open_fds,
            soft_limit(&limits, "Max open files"),
            Units::of_this_system(),
        );
        stats.virtual_max_bytes = soft_limit(&limits, "Max address space");
        stats
    }

    fn from_parts(
        stat: Option<Stat>,
        boot: Option<u64>,
        open_fds: Option<u64>,
        max_fds: Option<u64>,
        units: Option<Units>,
    ) -> ProcessStats {
        let scaled = stat.as_ref().zip(units);
        ProcessStats {
            cpu_seconds: scaled.map(|(s, u)| u.seconds(s.utime.saturating_add(s.stime))),
            open_fds,
            max_fds,
            virtual_max_bytes: None,
            virtual_bytes: stat.as_ref().map(|s| s.vsize),
            resident_bytes: scaled.map(|(s, u)| s.rss_pages.saturating_mul(u.page_bytes)),
            start_time_seconds: scaled
                .zip(boot)
                .map(|((s, u), boot)| boot as f64 + u.seconds(s.start_ticks)),
        }
    }

    /// The series in the text exposition format, HELP and TYPE as the Go client writes them.
    pub(crate) fn render(&self, out: &mut String) {
        let series: [(&str, &str, &str, Option<f64>); 7] = [
            (
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds,
            ),
            (
                "process_open_fds",
                "gauge",
                "Number of open file descriptors.",
                self.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                self.max_fds.map(|n| n as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
                self.virtual_bytes.map(|n| n as f64),
            ),
            (
                "process_virtual_memory_max_bytes",
                "gauge",
                "Maximum amount of virtual memory available in bytes.",
                self.virtual_max_bytes.map(|n| n as f64),
            ),
            (
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
                self.resident_bytes.map(|n| n as f64),
            ),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                self.start_time_seconds,
            ),
        ];
        for (name, kind, help, value) in series {
            if let Some(value) = value {
                super::header(out, name, kind, help);
                let _ = writeln!(out, "{name} {value}");
            }
        }
    }
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the Unix epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of the line `limit` (`Max open files`) of `/proc/<pid>/limits`.
fn soft_limit(text: &str, limit: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix(limit))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        soft => soft.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (tiny hub) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                        250 130 0 0 20 0 9 0 66655 3133440 417 18446744073709551615 1 2 3 4 5";

    #[test]
    fn limits_and_boot_time_are_read_from_their_lines() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63368                63368                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(soft_limit(limits, "Max open files"), Some(1024));
        assert_eq!(soft_limit(limits, "Max processes"), Some(63368));
        assert_eq!(
            soft_limit(
                "Max address space         unlimited            unlimited            bytes",
                "Max address space"
            ),
            Some(u64::MAX)
        );
        assert_eq!(soft_limit("Max processes 5 5", "Max open files"), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1796227313\nprocesses 9\n"),
            Some(1796227313)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn ticks_and_pages_are_scaled_by_the_units_given() {
        let stat = parse_stat(STAT);
        // Other units than this machine's: 64 KiB pages (some ARM kernels) and a tick
        // other than USER_HZ's 100, to see that both are applied.
        let units = Some(Units {
            ticks_per_second: 250,
            page_bytes: 65536,
        });
        let stats = ProcessStats::from_parts(
            stat.clone(),
            Some(1_700_000_000),
            Some(7),
            Some(1024),
            units,
        );
        assert_eq!(stats.cpu_seconds, Some(1.52));
        assert_eq!(stats.resident_bytes, Some(417 * 65536));
        assert_eq!(stats.virtual_bytes, Some(3133440));
        assert_eq!(stats.start_time_seconds, Some(1_700_000_000.0 + 266.62));
        // Without sysconf's units nothing that needs them is given.
        let bare = ProcessStats::from_parts(stat, Some(1), None, None, None);
        assert_eq!(bare.cpu_seconds, None);
        assert_eq!(bare.resident_bytes, None);
        assert_eq!(bare.start_time_seconds, None);
        assert_eq!(bare.virtual_bytes, Some(3133440));
    }

    #[test]
    fn this_process_reads_as_a_running_one() {
        let stats = ProcessStats::read();
        assert!(stats.resident_bytes.is_some_and(|b| b > 0));
        assert!(stats.virtual_bytes.is_some_and(|b| b > 0));
        assert!(stats.open_fds.is_some_and(|n| n >= 3), "{stats:?}");
        assert!(
            stats
                .max_fds
                .is_some_and(|n| n >= stats.open_fds.unwrap_or(0))
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        assert!(
            stats
                .start_time_seconds
                .is_some_and(|t| t > 1e9 && t <= now + 1.0)
        );
        let mut text = String::new();
        stats.render(&mut text);
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ")
        );
        assert!(
            text.contains("# HELP process_resident_memory_bytes Resident memory size in bytes.\n")
        );
        assert_eq!(text.matches("# TYPE ").count(), 7);
    }
}
