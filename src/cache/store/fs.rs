//! The file primitives of the store: nothing is followed through a symlink, files are
//! created 0600 and directories 0700, and whatever makes a change durable (`fdatasync`,
//! directory fsync, `syncfs`). No cache layout here: paths come from the caller.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::check::{FileRead, Refusal, read_bounded, refused};
use super::error::{StoreError, StoreOp, io_err};

/// Mode of object files: the cache holds secrets.
pub(super) const FILE_MODE: u32 = 0o600;
/// Mode of cache directories.
pub(super) const DIR_MODE: u32 = 0o700;

/// The parent of a path below the root. Every path the store builds has one.
pub(super) fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("/"))
}

/// Whether `path` is a real directory: `false` if missing, or if it is a symlink or
/// anything else (which a reader must not follow out of the root).
pub(super) fn real_dir(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => {
            log::warn!("cache: {} is not a directory; ignoring it", path.display());
            Ok(false)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_err(StoreOp::Stat, path)(e)),
    }
}

pub(super) fn all_real_dirs(dirs: &[PathBuf]) -> Result<bool, StoreError> {
    for dir in dirs {
        if !real_dir(dir)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes a directory (0700); `false` if it already is one, an error if something else
/// (a symlink, a file) has the name.
pub(super) fn make_dir(dir: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(false),
        Ok(_) => {
            let e = io::Error::new(
                io::ErrorKind::NotADirectory,
                "exists and is not a directory",
            );
            return Err(io_err(StoreOp::CreateDir, dir)(e));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(StoreOp::Stat, dir)(e)),
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(StoreOp::CreateDir, dir)(e)),
    }
}

/// Reads a stored file. `None` when it is missing, or is a symlink, a directory or
/// anything but a regular file: never followed, never waited on; `None` too for a file over
/// [`MAX_FILE`], which is never read (counted and warned of, once per path per 10 min).
pub(super) fn read_object(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match read_bounded(path)? {
        FileRead::Bytes(bytes) => Ok(Some(bytes)),
        FileRead::Symlink => {
            log::warn!("cache: not following symlink {}", path.display());
            Ok(None)
        }
        FileRead::TooLarge { size } => {
            refused(path, &Refusal::TooLarge { size });
            Ok(None)
        }
        FileRead::Missing | FileRead::NotFile => Ok(None),
    }
}

/// Opens for reading without following a final symlink, and without blocking on a FIFO.
pub(super) fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

pub(super) fn exists_no_follow(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Creates a file that must not exist yet, mode 0600.
pub(super) fn create_new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Writes a new file with `bytes`, flushed to disk when `sync`; removed again on failure.
pub(super) fn write_new_file(path: &Path, bytes: &[u8], sync: bool) -> Result<(), StoreError> {
    let mut file = create_new_file(path).map_err(io_err(StoreOp::Write, path))?;
    let written = file
        .write_all(bytes)
        .map_err(io_err(StoreOp::Write, path))
        .and_then(|()| {
            if sync {
                synced();
                file.sync_data().map_err(io_err(StoreOp::Sync, path))
            } else {
                Ok(())
            }
        });
    if written.is_err() {
        remove_quietly(path);
    }
    written
}

pub(super) fn remove_quietly(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        log::warn!("cache: cannot remove {}: {e}", path.display());
    }
}

/// Counts one flush to stable storage (`tinyhub_cache_syncs_total`): each costs the flash at
/// least a page, whatever the bytes.
pub(super) fn synced() {
    crate::metrics::Metrics::inc(&crate::metrics::METRICS.cache_syncs);
}

/// Makes a directory's entries durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    synced();
    let synced = File::open(dir).and_then(|d| d.sync_all());
    match synced {
        Ok(()) => Ok(()),
        // Some filesystems cannot fsync a directory; their entries are durable otherwise.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(io_err(StoreOp::Sync, dir)(e)),
    }
}

/// Flushes every dirty page and inode of the filesystem that holds `dir` to stable
/// storage: one call instead of an fsync per staged object.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code, reason = "syncfs has no wrapper in std")]
pub(super) fn sync_filesystem(dir: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    synced();
    // SAFETY: syncfs takes a plain descriptor and touches no memory of ours; `dir` keeps
    // the descriptor open for the whole call.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere (development hosts only) `sync` has to do; it may return before the data is on disk.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[allow(unsafe_code, reason = "sync has no wrapper in std")]
pub(super) fn sync_filesystem(_dir: &File) -> io::Result<()> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}
