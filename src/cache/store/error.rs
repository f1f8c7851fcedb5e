//! Why a store operation failed: [`StoreError`], with the filesystem operation
//! ([`StoreOp`]) and the path of an I/O failure.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[cfg(doc)]
use super::StoreOptions;
use crate::status::Status;

/// The filesystem operation a [`StoreError::Io`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum StoreOp {
    /// Creating a directory.
    CreateDir,
    /// Listing a directory.
    ReadDir,
    /// Reading a path's metadata.
    Stat,
    /// Opening or reading a file.
    Read,
    /// Creating or writing a file.
    Write,
    /// Flushing a file, a directory or the filesystem to stable storage.
    Sync,
    /// Renaming something into place (the path is the destination).
    Rename,
    /// Removing a file or directory.
    Remove,
}

impl StoreOp {
    /// The operation as a verb phrase for messages and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreOp::CreateDir => "create directory",
            StoreOp::ReadDir => "list directory",
            StoreOp::Stat => "stat",
            StoreOp::Read => "read",
            StoreOp::Write => "write",
            StoreOp::Sync => "sync",
            StoreOp::Rename => "rename into",
            StoreOp::Remove => "remove",
        }
    }
}

/// Why a store operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum StoreError {
    /// A key field is not a safe path segment; nothing was read or written.
    UnsafeKey {
        /// Which field: `component`, `namespace`, `name`, ...
        field: &'static str,
        /// The refused value.
        value: String,
    },
    /// An object given to a namespaced replacement belongs to another namespace.
    OutsideScope {
        /// The object's namespace.
        namespace: Option<String>,
        /// The object's name.
        name: String,
        /// The namespace being replaced.
        scope: String,
    },
    /// A filesystem operation failed.
    Io {
        /// What was being done.
        op: StoreOp,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The cache root could not be locked, or another process holds it: two hubs must not
    /// share a cache.
    Lock(crate::dir_lock::LockError),
    /// A commit stopped where [`StoreOptions::crash_at`] said, as a crash would; never with
    /// the default options.
    InjectedCrash,
}

impl StoreError {
    /// True when the filesystem is out of space (or the quota is used up).
    pub(crate) fn is_disk_full(&self) -> bool {
        match self {
            // std maps ENOSPC to `StorageFull` and EDQUOT to `QuotaExceeded`.
            StoreError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            ),
            _ => false,
        }
    }
}

impl StoreError {
    /// The answer to a request that a cache read failed for: 400 for a key that cannot be a
    /// path in the cache (what would escape the cache root is the client's error, as the
    /// design says), 500 for anything else. The one conversion from a store error to a
    /// `Status`.
    pub(crate) fn status(&self) -> Status {
        match self {
            StoreError::UnsafeKey { .. } => Status::bad_request(self.to_string()),
            _ => Status::internal(format!("reading the cache: {self}")),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::UnsafeKey { field, value } => {
                write!(
                    f,
                    "cache key refused: {field} {value:?} is not a safe path segment"
                )
            }
            StoreError::OutsideScope {
                namespace,
                name,
                scope,
            } => write!(
                f,
                "object {}/{name} is outside the replacement of namespace {scope:?}",
                namespace.as_deref().unwrap_or("")
            ),
            StoreError::Io { op, path, source } => {
                write!(
                    f,
                    "cache: cannot {} {}: {source}",
                    op.as_str(),
                    path.display()
                )
            }
            StoreError::Lock(e) => write!(f, "cache: {e}"),
            StoreError::InjectedCrash => f.write_str("injected crash"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub(super) fn io_err(op: StoreOp, path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_cannot_be_a_path_is_the_clients_400_anything_else_a_500() {
        let unsafe_key = StoreError::UnsafeKey {
            field: "name",
            value: "../x".into(),
        };
        assert_eq!(unsafe_key.status().code, 400);
        let io = StoreError::Io {
            op: StoreOp::ReadDir,
            path: PathBuf::from("/cache/kubelet/pods.v1.core"),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let status = io.status();
        assert_eq!(status.code, 500);
        assert!(
            status.message.starts_with("reading the cache: "),
            "{}",
            status.message
        );
    }
}
