//! How the identity's files are read: within a bound. They are written as every file under
//! `--root-dir` is (`atomic_file`).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::MAX_PEM;
pub(super) use crate::atomic_file::{
    make_dirs, parent_of, sync_dir, temp_target, with_path, write_atomic,
};

/// Reads a file (following symlinks) of at most [`MAX_PEM`] bytes.
pub(super) fn read_limited(path: &Path) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too large"));
    }
    Ok(bytes)
}
