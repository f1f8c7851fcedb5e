//! The credentials' read grants (see `cache/grants.rs`), kept beside the cache in
//! `<root>/.grants` so that a client with its own token is still answered offline after a
//! restart. A dot name: never a key (`is_safe_segment` refuses a leading `.`), never a
//! component. The file holds keyed hashes of credentials and the key itself, never a
//! credential: 0600 like every file the store writes.

use super::fs::read_object;
use super::{Store, StoreError};

/// The file's name under the cache root.
pub(super) const GRANTS_FILE: &str = ".grants";

impl Store {
    /// The stored grants' bytes; `None` when there are none.
    pub(crate) fn grants(&self) -> Result<Option<Vec<u8>>, StoreError> {
        read_object(&self.root.join(GRANTS_FILE))
    }

    /// Replaces the stored grants, crash-safely as any object (staged, synced, renamed).
    pub(crate) fn put_grants(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_file(&self.root.join(GRANTS_FILE), bytes)
    }
}
