//! One hub per directory: the cache root and `--root-dir` are each locked (`flock`,
//! exclusive) for the life of the process, and a second hub on either is refused with what
//! the holder wrote of itself.
//!
//! The lock is on the directory itself, opened read-only and kept open: it needs no new
//! inode, so a full disk (or a cache written before the lock existed) cannot stop it, and
//! the kernel drops it when its holder dies, so nothing a hub killed with SIGKILL leaves
//! blocks the next. Beside it, `.tinyhub.lock` holds a note for the operator, best-effort:
//! `pid <n> on <host> since <time>`. The host and time are there because a hub in a static
//! pod writes the pid of its own pid namespace (often 1). Its name starts with a dot, so it
//! is never a cache key (`names::is_safe_segment` refuses a leading dot), never a component
//! the cache recovery walks, and never a journal; the file stays after the hub ends.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The note's name in a locked directory.
pub(crate) const NOTE_FILE: &str = ".tinyhub.lock";

/// A held lock on a directory; released when dropped (or when the process ends).
#[derive(Debug)]
pub(crate) struct DirLock {
    /// Kept open: closing the last descriptor of the open directory releases the lock.
    dir: File,
}

/// Why a directory could not be locked.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another process holds the lock.
    Held {
        /// The locked directory.
        dir: PathBuf,
        /// What the holder wrote in its note; `None` when there is none (yet).
        holder: Option<String>,
    },
    /// Opening or locking the directory failed.
    Io {
        /// The directory.
        dir: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Held { dir, holder } => {
                write!(f, "another tinyhub uses {}", dir.display())?;
                match holder {
                    Some(note) => write!(f, " ({note}, as its {NOTE_FILE} says)"),
                    None => write!(f, " (it has not written its {NOTE_FILE} yet)"),
                }
            }
            LockError::Io { dir, source } => write!(f, "lock {}: {source}", dir.display()),
        }
    }
}

impl std::error::Error for LockError {}

impl DirLock {
    /// Locks the existing directory `dir` for this process and writes the note. The note is
    /// best-effort and a filesystem without locks (`ENOLCK`, `EOPNOTSUPP`: CIFS, NFS without
    /// lockd) is let through, each with a warning: neither is a reason to stop a hub whose
    /// directory otherwise works.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        let note = holder_note();
        match DirLock::probe(dir, Some(&note))? {
            Probe::Free(lock) => Ok(lock),
            Probe::Held { note } => Err(LockError::Held {
                dir: dir.to_owned(),
                holder: note,
            }),
            Probe::NoLocks(lock, e) => {
                log::warn!(
                    "cannot lock {}: {e}; a second hub on this directory would not be refused",
                    dir.display()
                );
                lock.write_note(dir, &note);
                Ok(lock)
            }
        }
    }

    /// Tries the same lock without waiting, for a tool that must not disturb a running hub
    /// (`tinyhub cache`): [`Probe::Held`] with the holder's note when a hub (or another tool)
    /// holds it, else [`Probe::Free`] with the lock, which the caller drops at once to stay
    /// out of a starting hub's way, or keeps for a run that writes (then `note`, when given,
    /// is written as the note, so a hub refused meanwhile names the tool). Nothing is
    /// written without a note. On a filesystem without locks (NFS without lockd, CIFS) the
    /// answer is [`Probe::NoLocks`]: whether a hub runs cannot be told.
    pub(crate) fn probe(dir: &Path, note: Option<&str>) -> Result<Probe, LockError> {
        let io_error = |source| LockError::Io {
            dir: dir.to_owned(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .map_err(io_error)?;
        match try_lock(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok(Probe::Held {
                    note: read_note(dir),
                });
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOLCK | libc::EOPNOTSUPP)) => {
                return Ok(Probe::NoLocks(DirLock { dir: file }, e));
            }
            Err(e) => return Err(io_error(e)),
        }
        let lock = DirLock { dir: file };
        if let Some(text) = note {
            lock.write_note(dir, text);
        }
        Ok(Probe::Free(lock))
    }

    /// Writes `text` as the note in `dir` (this lock's): best-effort, a failure warned of
    /// (a hub or tool refused meanwhile is then not told who holds it).
    fn write_note(&self, dir: &Path, text: &str) {
        let path = dir.join(NOTE_FILE);
        if let Err(e) = write_note(&path, text) {
            log::warn!(
                "cannot write {}: {e}; one refused on this directory will not be told who holds it",
                path.display()
            );
        }
    }

    /// Whether `other` is the directory this lock holds (the same inode, whatever the path).
    pub(crate) fn holds(&self, other: &Path) -> bool {
        match (self.dir.metadata(), std::fs::metadata(other)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
}

/// What [`DirLock::probe`] found.
#[derive(Debug)]
pub(crate) enum Probe {
    /// No one held the lock; now this process does, until the value is dropped.
    Free(DirLock),
    /// The filesystem does not lock (`ENOLCK`, `EOPNOTSUPP`): no one can be kept out, and
    /// whether a hub runs cannot be told. The directory is held open all the same; the
    /// error is the lock's.
    NoLocks(DirLock, io::Error),
    /// Another process holds it.
    Held {
        /// What the holder wrote in its note; `None` when there is none (yet).
        note: Option<String>,
    },
}

/// A note naming this process as `what` (`tinyhub cache repair`): `<what> pid <n> on <host>
/// since <UTC time>`, the hub's own note with the tool's name in front.
pub(crate) fn tool_note(what: &str) -> String {
    format!("{what} {}", holder_note())
}

/// This process as the note tells it: `pid <n> on <host> since <UTC time>`.
fn holder_note() -> String {
    let since = crate::unix_now();
    format!(
        "pid {} on {} since {}",
        std::process::id(),
        node_name().unwrap_or_else(|| "an unknown host".to_owned()),
        crate::logging::rfc3339(since)
    )
}

/// The host's name (`uname`'s nodename): in a container, the pod's.
#[allow(unsafe_code, reason = "uname has no wrapper in std")]
fn node_name() -> Option<String> {
    // SAFETY: `utsname` is a plain C struct of byte arrays; uname fills it and touches
    // nothing else.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts
        .nodename
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8(bytes).ok().filter(|n| !n.is_empty())
}

/// Replaces the note's content with `text` and flushes it: the file is created 0600 when
/// missing, never followed through a symlink.
fn write_note(path: &Path, text: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(format!("{text}\n").as_bytes())?;
    file.sync_data()
}

/// The holder's note; `None` when it is missing, unreadable or empty.
fn read_note(dir: &Path) -> Option<String> {
    let mut text = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(NOTE_FILE))
        .ok()?
        .take(512)
        .read_to_string(&mut text)
        .ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Takes the exclusive lock without waiting; `WouldBlock` when another open file holds it.
/// `flock`, not `fcntl`: its lock belongs to the open file, so a second open in the same
/// process is refused too. (`File::try_lock` needs Rust 1.89, above the crate's MSRV.)
#[allow(
    unsafe_code,
    reason = "flock has no wrapper in std at the crate's MSRV"
)]
fn try_lock(file: &File) -> io::Result<()> {
    // SAFETY: flock takes a plain descriptor and touches no memory of ours; `file` keeps
    // the descriptor open for the whole call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tinyhub-dirlock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_note_and_freed_on_drop() {
        let dir = temp_dir("twice");
        let first = DirLock::acquire(&dir).unwrap();
        assert!(first.holds(&dir));
        let refused = DirLock::acquire(&dir).unwrap_err();
        let text = refused.to_string();
        let host = node_name().unwrap();
        assert!(
            text.contains(&format!("pid {} on {host} since ", std::process::id())),
            "{text}"
        );
        drop(first);
        let again = DirLock::acquire(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_probe_sees_the_holder_and_writes_nothing_unless_asked() {
        let dir = temp_dir("probe");
        let free = DirLock::probe(&dir, None).unwrap();
        assert!(matches!(free, Probe::Free(_)));
        assert!(
            !dir.join(NOTE_FILE).exists(),
            "a probe without a note wrote one"
        );
        drop(free);
        let hub = DirLock::acquire(&dir).unwrap();
        match DirLock::probe(&dir, Some("never written")).unwrap() {
            Probe::Held { note: Some(note) } => {
                assert!(
                    note.starts_with(&format!("pid {} on ", std::process::id())),
                    "{note}"
                );
            }
            other => panic!("{other:?}"),
        }
        drop(hub);
        let tool = DirLock::probe(&dir, Some(&tool_note("tinyhub cache repair"))).unwrap();
        assert!(matches!(tool, Probe::Free(_)));
        let refused = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(refused.contains("tinyhub cache repair pid "), "{refused}");
        drop(tool);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_note_left_by_a_dead_hub_blocks_nothing_and_is_replaced() {
        let dir = temp_dir("stale");
        std::fs::write(dir.join(NOTE_FILE), "pid 4194301 on gone since then\n").unwrap();
        let lock = DirLock::acquire(&dir).unwrap();
        let note = std::fs::read_to_string(dir.join(NOTE_FILE)).unwrap();
        assert!(
            note.starts_with(&format!("pid {} on ", std::process::id())),
            "{note}"
        );
        drop(lock);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_path_that_is_not_a_directory_is_an_error_naming_it() {
        let dir = temp_dir("file");
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        let e = DirLock::acquire(&file).unwrap_err();
        assert!(matches!(e, LockError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
