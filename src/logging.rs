//! klog-style logging to stderr, which is what Kubernetes operators grep for:
//! `I1130 23:42:36.123456   12345 proxy.rs:42] message key="value"`.
//!
//! `--v=N` maps onto log levels: 0–1 info, 2–3 debug, 4 and more trace. Warnings and errors
//! always show. `--vmodule=pattern=N,…` raises the verbosity of the source files whose name
//! (without `.rs`; the path when the pattern has a `/`) matches a glob, as klog does for Go
//! files: `--vmodule=relay=4,*lease*=3`. A Rust module is a directory of files where a Go
//! package is one: a pattern without `/` also matches the files of the module directory of
//! that name (`upstream=4` covers `src/upstream/*.rs`, `mod.rs` among them). As in klog, an entry never lowers a file below
//! `--v`, and the level is worked out once per file, not per record. `--skip-headers`
//! leaves the header out, `--add-dir-header` names the file with its directory. Times are
//! UTC (no time-zone database on a router; procd's syslog adds local time anyway).

use std::fmt::Write as _;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// How the hub logs, from `--v`, `--vmodule`, `--skip-headers` and `--add-dir-header`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// `--v`.
    pub verbosity: u8,
    /// `--vmodule`, first match wins.
    pub vmodule: Vec<VModule>,
    /// `--skip-headers`: the message alone.
    pub skip_headers: bool,
    /// `--add-dir-header`: the file's path, not its name alone.
    pub add_dir_header: bool,
}

/// One `--vmodule` entry: source files matching `pattern` log at `verbosity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VModule {
    pattern: String,
    verbosity: u8,
}

/// Reads `--vmodule` (`pattern=N,…`, klog's syntax; empty entries skipped).
// A String error on purpose: it has one cause (an entry is not pattern=N), no caller
// decides anything from it, and it is the flag's message, printed as-is by
// `StartupError::flag` at start-up (the edge of the program).
pub(crate) fn parse_vmodule(text: &str) -> Result<Vec<VModule>, String> {
    let mut out = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let parsed = entry.split_once('=').and_then(|(pattern, n)| {
            let verbosity = n.trim().parse::<u8>().ok()?;
            let pattern = pattern.trim();
            (!pattern.is_empty()).then(|| VModule {
                pattern: pattern.to_owned(),
                verbosity,
            })
        });
        out.push(
            parsed
                .ok_or_else(|| format!("{entry:?}: expect a comma-separated list of pattern=N"))?,
        );
    }
    Ok(out)
}

impl LogOptions {
    /// The verbosity of a record from `file` (`src/proxy/relay.rs`): `--v`, or the first
    /// matching entry's level where that is higher (klog's `V()` is true as soon as `--v`
    /// suffices, and consults vmodule only when it does not).
    fn verbosity_of(&self, file: Option<&str>) -> u8 {
        let Some(file) = file else {
            return self.verbosity;
        };
        let path = file.strip_suffix(".rs").unwrap_or(file);
        let mut parts = path.rsplit('/');
        let name = parts.next().unwrap_or(path);
        // The module directory the file is in; files at the crate root have none.
        let module = parts.next().filter(|dir| *dir != "src");
        self.vmodule
            .iter()
            .find(|m| {
                if m.pattern.contains('/') {
                    glob_matches(&m.pattern, path)
                } else {
                    glob_matches(&m.pattern, name)
                        || module.is_some_and(|dir| glob_matches(&m.pattern, dir))
                }
            })
            .map_or(self.verbosity, |m| m.verbosity.max(self.verbosity))
    }

    /// The most verbose level any file may log at.
    fn max_level(&self) -> log::LevelFilter {
        let most = self.vmodule.iter().map(|m| m.verbosity);
        level_for(most.fold(self.verbosity, u8::max))
    }
}

/// Go's `filepath.Match` for `*` and `?` (no classes): whether `text` matches `pattern`.
/// Neither wildcard matches `/`, so the pattern's slashes pair off with the text's in order
/// and each part is matched on its own.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let (mut patterns, mut texts) = (pattern.split('/'), text.split('/'));
    loop {
        match (patterns.next(), texts.next()) {
            (None, None) => return true,
            (Some(p), Some(t)) if part_matches(p.as_bytes(), t.as_bytes()) => {}
            _ => return false,
        }
    }
}

/// Whether `text` (no `/`) matches `pattern`, in time linear in their lengths for each
/// backtrack: a `*` takes as little as it can, and on a mismatch only the last `*` takes
/// one more byte (an earlier `*` taking more cannot help what the last one could not).
fn part_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // After the last `*` seen: the pattern index past it and the text index it resumes at.
    let mut last_star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                last_star = Some((p, t));
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match last_star {
                Some((after, from)) => {
                    p = after;
                    t = from + 1;
                    last_star = Some((after, t));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Each source file's log level under [`LogOptions`], worked out on a file's first record
/// and kept (klog keeps it per call site), so the globs are not matched on every record.
struct FileLevels {
    options: LogOptions,
    by_file: std::sync::Mutex<std::collections::HashMap<&'static str, log::LevelFilter>>,
}

impl FileLevels {
    fn new(options: LogOptions) -> FileLevels {
        FileLevels {
            options,
            by_file: std::sync::Mutex::default(),
        }
    }

    /// The level a record from `file` may log at; `file_static` is the same file when it
    /// lives as long as the program (then the answer is kept).
    fn level(&self, file_static: Option<&'static str>, file: Option<&str>) -> log::LevelFilter {
        if self.options.vmodule.is_empty() {
            return level_for(self.options.verbosity);
        }
        let Some(file) = file_static else {
            return level_for(self.options.verbosity_of(file));
        };
        // A poisoned map only means another thread panicked mid-insert of a plain value.
        let mut by_file = self
            .by_file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *by_file
            .entry(file)
            .or_insert_with(|| level_for(self.options.verbosity_of(Some(file))))
    }
}

/// The process's logger: env_logger's formatting and dependency caps, and each record held
/// to its file's verbosity.
struct Klog {
    inner: env_logger::Logger,
    levels: FileLevels,
}

impl log::Log for Klog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.level() <= self.levels.level(record.file_static(), record.file()) {
            self.inner.log(record);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Installs the logger for the process. Call once, before any thread logs.
pub fn init(options: &LogOptions) {
    let level = options.max_level();
    let pid = std::process::id();
    let (skip_headers, add_dir_header) = (options.skip_headers, options.add_dir_header);
    let inner = env_logger::Builder::new()
        .filter_level(level)
        // Our dependencies log at debug about every connection; keep them quiet unless asked for.
        .filter_module("rustls", level.min(log::LevelFilter::Info))
        .filter_module("ureq", level.min(log::LevelFilter::Info))
        .filter_module("ureq_proto", level.min(log::LevelFilter::Info))
        .format(move |buf, record| {
            if skip_headers {
                return writeln!(buf, "{}", record.args());
            }
            let (month, day, hour, min, sec, micros) = utc_now();
            let letter = match record.level() {
                log::Level::Error => 'E',
                log::Level::Warn => 'W',
                _ => 'I',
            };
            let path = record.file().unwrap_or("?");
            let file = if add_dir_header {
                path
            } else {
                path.rsplit('/').next().unwrap_or(path)
            };
            // The klog line, written to `$out`.
            macro_rules! glog_line {
                ($out:expr) => {
                    writeln!(
                        $out,
                        "{letter}{month:02}{day:02} {hour:02}:{min:02}:{sec:02}.{micros:06} {pid:>7} {file}:{}] {}",
                        record.line().unwrap_or(0),
                        record.args()
                    )
                };
            }
            // Formatted into this thread's line first, then handed on whole: the logger's
            // buffer costs a borrow and a check per piece, and a line has some forty pieces.
            LINE.with(|line| {
                let Ok(mut line) = line.try_borrow_mut() else {
                    // A line logged while formatting another: straight to the buffer.
                    return glog_line!(buf);
                };
                line.clear();
                // Writing to a String fails only if a Display impl does; the line then
                // goes as far as it got, as it would have to the buffer.
                let _ = glog_line!(line);
                let written = buf.write_all(line.as_bytes());
                // A rare huge line does not keep its room for the thread's life.
                if line.capacity() > MAX_KEPT_LINE {
                    *line = String::new();
                }
                written
            })
        })
        .target(env_logger::Target::Stderr)
        .build();
    let max = inner.filter();
    let logger = Klog {
        inner,
        levels: FileLevels::new(options.clone()),
    };
    // Fails only when a logger is already installed: the first one stays.
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(max);
    }
}

thread_local! {
    /// The line being formatted on this thread (see [`init`]).
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Room a thread's line keeps between lines.
const MAX_KEPT_LINE: usize = 4096;

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
    fn vmodule_sets_the_verbosity_of_matching_files() {
        let options = LogOptions {
            verbosity: 1,
            vmodule: parse_vmodule("relay=4, *lease*=3,src/pool/*=2,proxy/mod=0").unwrap(),
            ..LogOptions::default()
        };
        let check = |file, want: u8| assert_eq!(options.verbosity_of(Some(file)), want, "{file}");
        check("src/proxy/relay.rs", 4);
        check("src/heartbeat/lease.rs", 3);
        check("src/proxy/kubelet_lease.rs", 3);
        check("src/pool/route.rs", 2);
        // A pattern with a slash is matched against the whole path; `*` stops at `/`.
        check("src/pool/sub/deep.rs", 1);
        check("src/proxy/mod.rs", 1);
        check("src/proxy/call.rs", 1);
        assert_eq!(options.verbosity_of(None), 1);
        // A module's name covers its directory's files, as a Go package's file names did.
        let module = LogOptions {
            verbosity: 0,
            vmodule: parse_vmodule("upstream=4,src=3").unwrap(),
            ..LogOptions::default()
        };
        assert_eq!(module.verbosity_of(Some("src/upstream/mod.rs")), 4);
        assert_eq!(module.verbosity_of(Some("src/upstream/send.rs")), 4);
        assert_eq!(module.verbosity_of(Some("src/upstream_x.rs")), 0);
        assert_eq!(
            module.verbosity_of(Some("src/route.rs")),
            0,
            "src is no module"
        );
        assert_eq!(options.max_level(), log::LevelFilter::Trace);
        assert!(glob_matches("re?ay", "relay") && !glob_matches("re?ay", "rely"));
    }

    #[test]
    fn a_vmodule_entry_never_lowers_a_file_below_v() {
        // klog: `--v=4 --vmodule=relay=0` still logs relay at 4.
        let options = LogOptions {
            verbosity: 4,
            vmodule: parse_vmodule("relay=0,lease=2,pool=6").unwrap(),
            ..LogOptions::default()
        };
        assert_eq!(options.verbosity_of(Some("src/proxy/relay.rs")), 4);
        assert_eq!(options.verbosity_of(Some("src/heartbeat/lease.rs")), 4);
        assert_eq!(options.verbosity_of(Some("src/pool.rs")), 6);
        let levels = FileLevels::new(options);
        assert_eq!(
            levels.level(Some("src/proxy/relay.rs"), Some("src/proxy/relay.rs")),
            log::LevelFilter::Trace
        );
    }

    #[test]
    fn globs_match_as_go_filepath_match() {
        for (pattern, text, want) in [
            ("*", "relay", true),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("r*y", "relay", true),
            ("r*y", "relays", false),
            ("*a*b", "xaxxb", true),
            ("*a*b", "xaxxbc", false),
            ("a*b*c", "abbbc", true),
            ("a?c", "ac", false),
            ("**", "x", true),
            ("src/*/relay", "src/proxy/relay", true),
            ("src/*", "src/proxy/relay", false),
            ("*/relay", "relay", false),
            ("src/*y", "src/proxy", true),
        ] {
            assert_eq!(glob_matches(pattern, text), want, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn a_pathological_glob_gets_the_right_answer() {
        // Exponential for a backtracking matcher; the answers are what is checked here.
        let pattern = "*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let no_b = "a".repeat(60);
        assert!(!glob_matches(pattern, &no_b));
        assert!(glob_matches(pattern, &format!("{no_b}b")));
        assert!(!glob_matches(pattern, &format!("{}b", "a".repeat(11))));
        assert!(glob_matches(pattern, &format!("{}b", "a".repeat(12))));
        let options = LogOptions {
            verbosity: 0,
            vmodule: parse_vmodule(&format!("{pattern}=3")).unwrap(),
            ..LogOptions::default()
        };
        let levels = FileLevels::new(options);
        let file: &'static str = Box::leak(format!("src/{no_b}b.rs").into_boxed_str());
        for _ in 0..2 {
            assert_eq!(
                levels.level(Some(file), Some(file)),
                log::LevelFilter::Debug
            );
        }
        assert_eq!(levels.by_file.lock().unwrap().len(), 1, "kept per file");
        assert_eq!(
            levels.level(Some("src/relay.rs"), Some("src/relay.rs")),
            log::LevelFilter::Info
        );
    }

    #[test]
    fn bad_vmodule_entries_are_refused() {
        assert_eq!(parse_vmodule("").unwrap(), Vec::new());
        for bad in ["relay", "relay=x", "=3", "relay=-1"] {
            assert!(parse_vmodule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(level_for(0), log::LevelFilter::Info);
        assert_eq!(level_for(2), log::LevelFilter::Debug);
        assert_eq!(level_for(9), log::LevelFilter::Trace);
    }
}
