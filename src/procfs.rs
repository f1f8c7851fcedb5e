//! What the hub reads of itself in `/proc`: the fields of a `/proc/<pid>/stat` (or
//! `/proc/<pid>/task/<tid>/stat`) line, and the units its figures are counted in. Used by
//! the `process_*` series (`metrics/process.rs`) and the SIGUSR1 thread dump
//! (`thread_dump.rs`).

/// The fields of a stat line the hub uses, in the units the file gives them (proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The command (thread) name, as the kernel keeps it.
    pub name: String,
    /// The state letter: `R`, `S`, `D`, ...
    pub state: String,
    /// User CPU time, in clock ticks.
    pub utime: u64,
    /// System CPU time, in clock ticks.
    pub stime: u64,
    /// Start time after boot, in clock ticks.
    pub start_ticks: u64,
    /// Virtual size, in bytes.
    pub vsize: u64,
    /// Resident set, in pages.
    pub rss_pages: u64,
}

/// Parses a stat line (`pid (name) S ppid …`). The name may hold spaces and parentheses, so
/// the fields are counted after its last `)`; `None` when a field is missing or not a number.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let (head, tail) = line.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = tail.split_whitespace().collect();
    // proc(5) numbers the fields from 1 with the pid; after the name, `state` (field 3) is
    // index 0.
    let text = |n: usize| fields.get(n - 3).copied();
    let number = |n: usize| -> Option<u64> { text(n)?.parse().ok() };
    Some(Stat {
        name,
        state: text(3)?.to_owned(),
        utime: number(14)?,
        stime: number(15)?,
        start_ticks: number(22)?,
        vsize: number(23)?,
        rss_pages: number(24)?,
    })
}

/// The units of a stat line's figures, from `sysconf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Units {
    /// Clock ticks per second (USER_HZ): 100 on every Linux ABI, whatever the kernel's
    /// CONFIG_HZ, but `sysconf(_SC_CLK_TCK)` is the documented way to read it.
    pub ticks_per_second: u64,
    /// The page size: 4 KiB on most, 16 or 64 KiB on some ARM and MIPS kernels.
    pub page_bytes: u64,
}

impl Units {
    /// This system's units; `None` when `sysconf` does not know them.
    #[allow(unsafe_code, reason = "std has no sysconf")]
    pub(crate) fn of_this_system() -> Option<Units> {
        // SAFETY: sysconf takes a constant and touches no memory of ours.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Some(Units {
            ticks_per_second: u64::try_from(ticks).ok().filter(|&t| t > 0)?,
            page_bytes: u64::try_from(page).ok().filter(|&p| p > 0)?,
        })
    }

    /// `ticks` clock ticks in seconds.
    pub(crate) fn seconds(self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_second as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_names_last_parenthesis() {
        let line = "4242 (tiny (hub) x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 130 0 0 20 0 9 0 66655 3133440 417 18446744073709551615 1 2 3 4 5";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                name: "tiny (hub) x)".to_owned(),
                state: "S".to_owned(),
                utime: 250,
                stime: 130,
                start_ticks: 66655,
                vsize: 3133440,
                rss_pages: 417,
            })
        );
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (short) S 1 2 3"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_read_in_this_systems_units() {
        let line = std::fs::read_to_string("/proc/self/stat").unwrap();
        let stat = parse_stat(&line).expect(&line);
        assert!(stat.vsize > 0 && stat.rss_pages > 0, "{stat:?}");
        let units = Units::of_this_system().expect("sysconf");
        assert_eq!(units.seconds(units.ticks_per_second * 3), 3.0);
        assert!(units.page_bytes >= 4096);
    }
}
