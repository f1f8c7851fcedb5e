//! How every file under `--root-dir` is written: atomically (a temporary file in the same
//! directory, fsynced, renamed, the directory fsynced), 0600 in 0700 directories. The
//! identity's files (`pki/files`) and the link totals (`linkbook`) are written by it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of every file written here: they hold keys and tokens.
const FILE_MODE: u32 = 0o600;
/// Mode of directories created here.
const DIR_MODE: u32 = 0o700;

/// The file a temporary name `.<target>.<pid>.<n>.tmp` of [`write_atomic`] was for.
pub(crate) fn temp_target(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, n) = inner.rsplit_once('.')?;
    let (target, pid) = rest.rsplit_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(pid) && !target.is_empty()).then_some(target)
}

/// The directory `path` is in (`.` for a bare file name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates `dir` and missing parents, 0700; existing ones keep their mode.
pub(crate) fn make_dirs(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(with_path(dir, "create directory"))
}

/// Replaces `path` with `bytes` atomically: a temporary file in the same directory (0600),
/// written, fsynced, renamed over `path`, the directory fsynced. Temporary files an earlier,
/// interrupted write of the same file left are removed first.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent_of(path);
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a UTF-8 file name", path.display()),
        )
    })?;
    remove_leftovers(dir, name);
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(with_path(path, "write")(e));
    }
    sync_dir(dir)
}

/// Removes `.<name>.<pid>.<n>.tmp` files: a kill during an earlier write of `name`.
fn remove_leftovers(dir: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let file_name = entry.file_name();
        if file_name.to_str().and_then(temp_target) == Some(name) {
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => log::info!("removed {} (an interrupted write)", path.display()),
                Err(e) => log::warn!("cannot remove {}: {e}", path.display()),
            }
        }
    }
}

/// Makes a directory's entries durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        // Some filesystems cannot fsync a directory; their entries are durable otherwise.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(with_path(dir, "sync")(e)),
    }
}

/// Adds the path and what was being done to an I/O error.
pub(crate) fn with_path<'a>(
    path: &'a Path,
    what: &'static str,
) -> impl Fn(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}
