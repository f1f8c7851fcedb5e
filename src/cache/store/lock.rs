//! The cache's lock file: one hub per cache directory. `<root>/.tinyhub.lock` is locked
//! (`flock`, exclusive) for as long as the store is open, with the holder's pid written in
//! it; a second hub on the same root is refused with that pid. The lock, not the file's
//! existence, is what counts: the kernel drops it when its holder dies, so a file left by a
//! hub killed with SIGKILL blocks nothing.
//!
//! The name starts with a dot, so it is never a cache key ([`is_safe_segment`] refuses a
//! leading dot), never a component the recovery walks, and never a journal (`.journal.*`):
//! the store neither serves it nor removes it. The file stays after the hub ends.
//!
//! [`is_safe_segment`]: crate::names::is_safe_segment

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::error::{StoreError, StoreOp, io_err};
use super::fs::FILE_MODE;

/// The lock file's name in the cache root.
pub(super) const LOCK_FILE: &str = ".tinyhub.lock";

/// A held lock on a cache root; released when dropped (or when the process ends).
#[derive(Debug)]
pub(super) struct CacheLock {
    /// Kept open: closing the last descriptor of the open file releases the lock.
    _file: File,
}

impl CacheLock {
    /// Locks `root` for this process and writes its pid in the lock file, durably: the
    /// first write of every start, so a root that cannot be written fails here, with the
    /// operating system's reason. A root another process holds is
    /// [`StoreError::Locked`] with that process's pid.
    pub(super) fn acquire(root: &Path) -> Result<CacheLock, StoreError> {
        let path = root.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err(StoreOp::Write, &path))?;
        match try_lock(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(StoreError::Locked {
                    holder: holder_pid(&mut file),
                    path,
                });
            }
            Err(e) => return Err(io_err(StoreOp::Lock, &path)(e)),
        }
        match write_pid(&mut file, &path) {
            // Held all the same; a full disk is no reason to stop a hub whose cache reads.
            Err(e) if e.is_disk_full() => log::warn!("{e}; the cache lock is held without a pid"),
            written => written?,
        }
        Ok(CacheLock { _file: file })
    }
}

/// Writes this process's pid over the lock file's content and flushes it to disk.
fn write_pid(file: &mut File, path: &Path) -> Result<(), StoreError> {
    let pid = format!("{}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(pid.as_bytes()))
        .map_err(io_err(StoreOp::Write, path))?;
    file.sync_data().map_err(io_err(StoreOp::Sync, path))
}

/// The pid a holder wrote; `None` while it has not written it yet (or wrote garbage).
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
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
