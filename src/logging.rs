//! klog-style logging to stderr, which is what Kubernetes operators grep for:
//! `I1130 23:42:36.123456   12345 proxy.rs:42] message key="value"`.
//!
//! `--v=N` maps onto log levels: 0–1 info, 2–3 debug, 4 and more trace. Warnings and errors
//! always show. Times are UTC (no time-zone database on a router; procd's syslog adds local
//! time anyway).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Installs the logger for the process. Call once, before any thread logs.
pub fn init(verbosity: u8) {
    let level = level_for(verbosity);
    let pid = std::process::id();
    env_logger::Builder::new()
        .filter_level(level)
        // Our dependencies log at debug about every connection; keep them quiet unless asked for.
        .filter_module("rustls", level.min(log::LevelFilter::Info))
        .filter_module("ureq", level.min(log::LevelFilter::Info))
        .filter_module("ureq_proto", level.min(log::LevelFilter::Info))
        .format(move |buf, record| {
            let (month, day, hour, min, sec, micros) = utc_now();
            let letter = match record.level() {
                log::Level::Error => 'E',
                log::Level::Warn => 'W',
                _ => 'I',
            };
            let file = record
                .file()
                .map(|f| f.rsplit('/').next().unwrap_or(f))
                .unwrap_or("?");
            writeln!(
                buf,
                "{letter}{month:02}{day:02} {hour:02}:{min:02}:{sec:02}.{micros:06} {pid:>7} {file}:{}] {}",
                record.line().unwrap_or(0),
                record.args()
            )
        })
        .target(env_logger::Target::Stderr)
        .init();
}

/// The log level a klog verbosity stands for.
pub(crate) fn level_for(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0 | 1 => log::LevelFilter::Info,
        2 | 3 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// (month, day, hour, minute, second, microsecond) of now, in UTC.
fn utc_now() -> (u32, u32, u32, u32, u32, u32) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (_, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = (secs % 86_400) as u32;
    (
        month,
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_micros(),
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A point in time as `YYYY-MM-DDTHH:MM:SSZ` (UTC), for log lines about certificates.
pub(crate) fn time_rfc3339(at: std::time::SystemTime) -> String {
    rfc3339(
        at.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()) as i64,
    )
}

/// Seconds since the epoch as `2026-12-02T01:02:03Z`, as Kubernetes writes timestamps.
pub(crate) fn rfc3339(secs: i64) -> String {
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 of a civil date: Howard Hinnant's `days_from_civil`, the inverse
/// of [`civil_from_days`].
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        let at = |s: u64| time_rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_796_170_000), "2026-12-02T00:06:40Z");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for days in [-719_468, -1, 0, 59, 11_016, 19_723, 20_788, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(level_for(0), log::LevelFilter::Info);
        assert_eq!(level_for(2), log::LevelFilter::Debug);
        assert_eq!(level_for(9), log::LevelFilter::Trace);
    }
}
