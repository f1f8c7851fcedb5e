//! A scratch directory for the cache's unit tests.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the system temp dir, removed when dropped; the cache root is its
/// `cache` subdirectory.
pub(super) struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `tag`.
    pub(super) fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("tinyhub-cache-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    /// Where a store under test keeps its cache.
    pub(super) fn root(&self) -> PathBuf {
        self.0.join("cache")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
