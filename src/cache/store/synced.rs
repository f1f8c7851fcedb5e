//! When each kind last heard the cloud's word (see `cache/synced.rs`), kept beside the cache
//! in `<root>/.synced` so that ages go on across a restart; and, for a cache written before
//! that file existed, the newest modification time of each kind directory. A dot name: never
//! a key, never a component.

use std::path::Path;
use std::time::UNIX_EPOCH;

use super::fs::read_object;
use super::index::{for_each_kind_dir, safe_entries};
use super::{Store, StoreError};

/// The file's name under the cache root.
pub(super) const SYNCED_FILE: &str = ".synced";

/// A kind directory found on disk: its component, its path below the component's
/// ([`crate::cache::key::CollectionKey::dir_name`]) and its newest modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KindDir {
    /// The component's directory name.
    pub component: String,
    /// The kind's directory below it, e.g. `pods.v1.core`.
    pub kind: String,
    /// Unix seconds of the newest modification of the directory or of one directly in it
    /// (a namespace directory): every object write renames into one of them.
    pub modified: u64,
}

impl Store {
    /// The stored sync record's bytes; `None` when there is none.
    pub(crate) fn synced(&self) -> Result<Option<Vec<u8>>, StoreError> {
        read_object(&self.root.join(SYNCED_FILE))
    }

    /// Replaces the stored sync record, crash-safely as any object (staged, synced, renamed).
    pub(crate) fn put_synced(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_file(&self.root.join(SYNCED_FILE), bytes)
    }

    /// Every kind directory of every component, with its newest modification time: a few
    /// `stat`s per kind (its namespaces), no object file read. Unreadable entries are left
    /// out; token answers (`tokens`, a name without a dot) are no kind.
    pub(crate) fn kind_dirs_on_disk(&self) -> Vec<KindDir> {
        let mut found = Vec::new();
        for component in subdirs(&self.root) {
            let below = self.root.join(&component);
            for_each_kind_dir(&below, &component, &mut |kind_rel, kind_dir| {
                if let Some(modified) = newest(kind_dir) {
                    // `kind_rel` is `<component>/<kind dir>`: the kind is what follows.
                    let kind = kind_rel[component.len() + 1..].to_owned();
                    found.push(KindDir {
                        component: component.clone(),
                        kind,
                        modified,
                    });
                }
            });
        }
        found
    }
}

/// The names of `dir`'s real directories that could be keys (no dot names, no symlinks).
fn subdirs(dir: &Path) -> impl Iterator<Item = String> {
    safe_entries(dir).filter_map(|(name, is_dir)| is_dir.then_some(name))
}

/// The newest modification time of `dir` and of the directories directly in it, in Unix
/// seconds.
fn newest(dir: &Path) -> Option<u64> {
    let seconds = |path: &Path| {
        std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    };
    let own = seconds(dir)?;
    let inner = subdirs(dir).filter_map(|ns| seconds(&dir.join(ns)));
    Some(inner.fold(own, u64::max))
}
