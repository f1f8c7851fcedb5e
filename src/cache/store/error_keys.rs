//! The list of cache keys whose last write failed (see `cache/writer/error_keys.rs`), kept
//! beside the cache in `<root>/.error-keys` so a restart still knows what the cache missed.
//! A dot name: never a key (`is_safe_segment` refuses a leading `.`), never a component.

use super::fs::read_object;
use super::{Store, StoreError};

/// The file's name under the cache root.
pub(super) const ERROR_KEYS_FILE: &str = ".error-keys";

impl Store {
    /// The stored list's bytes; `None` when there is none.
    pub(crate) fn error_keys(&self) -> Result<Option<Vec<u8>>, StoreError> {
        read_object(&self.root.join(ERROR_KEYS_FILE))
    }

    /// Replaces the stored list, crash-safely as any object.
    pub(crate) fn put_error_keys(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_file(&self.root.join(ERROR_KEYS_FILE), bytes)
    }
}
