//! The binary's own read-only pages let go once the start-up is over (issue 34 item 4).
//!
//! An idle hub's resident set is mostly its executable's code and constants, file-backed: the
//! kernel maps a fault's whole 64 KiB window of pages already in the page cache
//! (`fault_around_bytes`), and the start-up runs code from nearly every window of the text.
//! Once it is over, the idle hub runs a small part of it (the health checks, the accept loops,
//! the waits), which the link puts together at the front of the text (`cross/idle-text.ld`).
//! `MADV_DONTNEED` on those mappings takes them out of the process's page tables; the pages
//! stay in the page cache (no read from flash), and what runs after faults its windows back
//! in. The resident set then holds the code the hub runs, not the code it ran once.
//!
//! Only private, read-only mappings of the executable whose pages are all the file's
//! (`Anonymous: 0 kB`) are dropped: a dynamic build's RELRO (relocated by the loader, then
//! made read-only) holds private copies that must never go back to the file's bytes.

use std::io;
use std::time::Duration;

/// One mapping of `/proc/self/smaps`: its range, whether it may be dropped, and how much of it
/// was resident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// Start address.
    pub start: usize,
    /// End address (exclusive).
    pub end: usize,
    /// Read-only, private, the executable's own file, no private (anonymous) page.
    pub droppable: bool,
    /// Resident bytes when read.
    pub rss: usize,
}

/// Drops the executable's read-only pages from the process's page tables; the bytes that were
/// resident in the mappings dropped. Errors: `/proc/self/smaps` unreadable, `madvise` refused.
#[allow(unsafe_code, reason = "std has no madvise")]
// Its own symbol: cross/idle-text.py's profile of the idle hub starts at its call.
#[inline(never)]
pub(crate) fn release() -> io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = 0;
    for mapping in mappings(&smaps, &exe.to_string_lossy()) {
        if !mapping.droppable {
            continue;
        }
        // SAFETY: the range is a whole mapping of this process, read from its smaps, mapped
        // private and read-only from the executable with no private page: dropping its pages
        // only makes the next access read the same bytes from the page cache again.
        let done = unsafe {
            libc::madvise(
                mapping.start as *mut libc::c_void,
                mapping.end - mapping.start,
                libc::MADV_DONTNEED,
            )
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        released += mapping.rss;
    }
    Ok(released)
}

/// The CPU time the process has used, all threads (`CLOCK_PROCESS_CPUTIME_ID`); zero if the
/// clock cannot be read.
#[allow(unsafe_code, reason = "std has no process CPU clock")]
pub(crate) fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec the call writes.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The mappings of `smaps` (proc(5)) backed by the file `exe`, in order.
pub(crate) fn mappings(smaps: &str, exe: &str) -> Vec<Mapping> {
    let mut found: Vec<Mapping> = Vec::new();
    // The mapping the field lines below belong to, when it is one of `exe`'s.
    let mut current: Option<Mapping> = None;
    for line in smaps.lines() {
        if let Some(head) = mapping_head(line) {
            found.extend(current.take());
            let (range, perms, path) = head;
            if path != exe {
                continue;
            }
            let Some((start, end)) = range
                .split_once('-')
                .and_then(|(s, e)| Some((hex(s)?, hex(e)?)))
            else {
                continue;
            };
            let perms = perms.as_bytes();
            current = Some(Mapping {
                start,
                end,
                droppable: perms.len() == 4
                    && perms[0] == b'r'
                    && perms[1] == b'-'
                    && perms[3] == b'p',
                rss: 0,
            });
            continue;
        }
        let Some(mapping) = current.as_mut() else {
            continue;
        };
        if let Some(kb) = field_kb(line, "Rss:") {
            mapping.rss = kb * 1024;
        } else if let Some(kb) = field_kb(line, "Anonymous:") {
            mapping.droppable &= kb == 0;
        }
    }
    found.extend(current);
    found
}

/// A mapping's first line (`start-end perms offset dev inode [path]`): its range, permissions
/// and path ("" for none); `None` for a field line (`Name: value`).
fn mapping_head(line: &str) -> Option<(&str, &str, &str)> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    if !range.contains('-') || range.ends_with(':') {
        return None;
    }
    let perms = fields.next()?;
    // offset, device, inode
    for _ in 0..3 {
        fields.next()?;
    }
    Some((range, perms, fields.next().unwrap_or("").trim()))
}

/// A `Name:   <n> kB` field's number.
fn field_kb(line: &str, name: &str) -> Option<usize> {
    line.strip_prefix(name)?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

fn hex(s: &str) -> Option<usize> {
    usize::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/usr/bin/tinyhub";

    /// A dynamic build's mappings: headers and constants, text, RELRO (relocated by the
    /// loader, then read-only), data, and a library's text.
    const SMAPS: &str = "\
55d0a0000000-55d0a0010000 r--p 00000000 fd:01 42   /usr/bin/tinyhub
Size:                 64 kB
Rss:                  40 kB
Anonymous:             0 kB
55d0a0010000-55d0a0030000 r-xp 00010000 fd:01 42   /usr/bin/tinyhub
Size:                128 kB
Rss:                 128 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
55d0a0030000-55d0a0031000 r--p 00030000 fd:01 42   /usr/bin/tinyhub
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
55d0a0031000-55d0a0032000 rw-p 00031000 fd:01 42   /usr/bin/tinyhub
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
7f0000000000-7f0000010000 r-xp 00000000 fd:01 7    /usr/lib/libc.so.6
Size:                 64 kB
Rss:                  64 kB
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]
Rss:                  12 kB
Anonymous:            12 kB
";

    #[test]
    fn only_the_executables_read_only_file_pages_are_droppable() {
        let found = mappings(SMAPS, EXE);
        let droppable: Vec<_> = found
            .iter()
            .map(|m| (m.start, m.end, m.droppable, m.rss))
            .collect();
        assert_eq!(
            droppable,
            vec![
                (0x55d0a0000000, 0x55d0a0010000, true, 40 * 1024),
                (0x55d0a0010000, 0x55d0a0030000, true, 128 * 1024),
                // The RELRO holds the loader's private copies: dropping them would bring the
                // file's unrelocated bytes back.
                (0x55d0a0030000, 0x55d0a0031000, false, 4 * 1024),
                (0x55d0a0031000, 0x55d0a0032000, false, 4 * 1024),
            ]
        );
    }

    #[test]
    fn a_path_with_spaces_and_other_files_are_told_apart() {
        let smaps = "\
00400000-00410000 r-xp 00000000 fd:01 42   /opt/my hub/tinyhub
Rss:                  64 kB
Anonymous:             0 kB
00410000-00420000 r-xp 00000000 fd:01 43   /opt/my hub/tinyhub.old
Rss:                  64 kB
Anonymous:             0 kB
";
        let found = mappings(smaps, "/opt/my hub/tinyhub");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].start, found[0].droppable), (0x400000, true));
    }

    #[test]
    fn the_process_own_text_is_dropped_and_still_runs() {
        // This test binary's own mappings: dropping them must leave it running (the code and
        // constants fault back in from the page cache).
        let released = release().expect("madvise of the test binary's own pages");
        let exe = std::fs::read_link("/proc/self/exe").expect("the executable");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let found = mappings(&smaps, &exe.to_string_lossy());
        assert!(found.iter().any(|m| m.droppable), "{found:?}");
        assert!(released > 0);
        assert_eq!(format!("{}", 6 * 7), "42");
    }
}
