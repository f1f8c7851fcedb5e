//! What the store holds, in memory: per stored object a hash of its path, its
//! resourceVersion and a hash of its bytes, so that a put of an unchanged (or older) object
//! is answered without a syscall.
//!
//! Built once at open, after recovery, by reading every object file; then an entry is
//! made only by what the store writes, or finds identical to what it was asked to write
//! (a stale put learns nothing), and dropped by every other change (delete, replacements,
//! recovery). The hub owns the root (its
//! lock, `src/dir_lock.rs`), so nothing else changes the files. An entry that is missing
//! only costs the disk path it replaces, so whenever a change cannot be followed exactly
//! (a collection deleted whole, a journal applied) entries are dropped, not guessed.
//!
//! A file damaged behind the store's back (bit rot, an editor) is not seen by a put while
//! its entry stands; [`Store::get`] hashes what it reads and drops an entry that does not
//! match, so the next put replaces the file as it did before the index.
//!
//! Hashes are SipHash-1-3 with a key drawn at start (no one can aim collisions at it).
//! Two different contents of one object share a 64-bit hash with probability 2^-64 per
//! put; that put would be wrongly answered Identical. Two paths sharing a hash (2^-64
//! per pair, ~10^-11 for 20,000 objects) would judge one object by the other's entry.
//!
//! Size: 24 bytes an entry plus hashbrown's control byte, at a load of 7/8 or less (28.6
//! to 57 bytes an object; 819,200 bytes of table for 20,000 objects).

use std::collections::HashMap;
use std::fs;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::path::Path;
use std::sync::{MutexGuard, PoisonError};

use super::fs::read_object;
use super::{PutOutcome, Store, stored_rv};
use crate::cache::key::{METADATA_DIR, ObjectKey};
use crate::names::is_safe_segment;

/// The index: path hash → [`Entry`].
#[derive(Debug, Default)]
pub(super) struct ObjectIndex {
    /// Keys both hashes; drawn per process, since nothing of the index outlives it.
    hasher: RandomState,
    entries: HashMap<u64, Entry, BuildHasherDefault<PassThrough>>,
}

/// One stored file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    /// `metadata.resourceVersion` as a number; 0 when it is missing or not a decimal
    /// number, which is exactly as old as [`rv_newer`](crate::cache::key::rv_newer) takes
    /// it to be: never newer than anything.
    rv: u64,
    /// Hash of the file's bytes.
    content: u64,
}

/// What the index knows of a put, without the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// Nothing: the disk must tell.
    Unknown,
    /// The object is stored and differs; this put writes it.
    Differs,
    /// Identical or stale: nothing to write (a replacement stages a stale object all the
    /// same: a whole list wins over it).
    Unchanged(PutOutcome),
}

impl ObjectIndex {
    /// The path hash of an object: that of `<component>/<kind dir>/[<namespace>/]<name>`
    /// (the view's directory before the kind's, [`View::dir`](crate::cache::key::View::dir)),
    /// the same as [`ObjectIndex::path_hash`] of its path below the root.
    pub(super) fn key_hash(&self, key: &ObjectKey) -> u64 {
        let c = &key.collection;
        let [resource, version, group] = c.gvr.dir_name_parts();
        let mut h = self.hasher.build_hasher();
        // `write`, never `write_str`: the pieces must hash as their concatenation does.
        h.write(c.component.as_str().as_bytes());
        h.write(b"/");
        if let Some(view) = c.view.dir() {
            h.write(view.as_bytes());
            h.write(b"/");
        }
        for part in [resource, ".", version, ".", group, "/"] {
            h.write(part.as_bytes());
        }
        if let Some(ns) = &key.namespace {
            h.write(ns.as_bytes());
            h.write(b"/");
        }
        h.write(key.name.as_bytes());
        h.finish()
    }

    /// The hash of a path relative to the root (`kubelet/pods.v1.core/a/web`; a
    /// non-resource document's file name).
    pub(super) fn path_hash(&self, rel: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(rel.as_bytes());
        h.finish()
    }

    /// The entry that `bytes`, stored, would have.
    pub(super) fn entry_of(&self, bytes: &[u8]) -> Entry {
        entry_with(bytes, self.content_hash(bytes))
    }

    /// The hash of a file's bytes.
    pub(super) fn content_hash(&self, bytes: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(bytes);
        h.finish()
    }

    /// Judges a put of bytes hashing to `content` at `rv` as
    /// [`unchanged`](super::unchanged) would with the stored file.
    pub(super) fn judge(&self, key: u64, content: u64, rv: Option<&str>) -> Known {
        let Some(entry) = self.entries.get(&key) else {
            return Known::Unknown;
        };
        if entry.content == content {
            return Known::Unchanged(PutOutcome::Identical);
        }
        match rv.and_then(|rv| rv.parse::<u64>().ok()) {
            Some(rv) if entry.rv > rv => Known::Unchanged(PutOutcome::Stale),
            _ => Known::Differs,
        }
    }

    /// The stored resourceVersion of the object at path hash `key` (0: none, or not a
    /// number); `None` when the index does not know the object (the disk must tell).
    pub(super) fn rv_of(&self, key: u64) -> Option<u64> {
        self.entries.get(&key).map(|e| e.rv)
    }

    /// The file at `key` now holds what `entry` describes.
    pub(super) fn record(&mut self, key: u64, entry: Entry) {
        self.entries.insert(key, entry);
    }

    /// The file at `key` is gone, or no longer known.
    pub(super) fn forget(&mut self, key: u64) {
        self.entries.remove(&key);
    }

    /// Drops an entry whose file was just read as `bytes` and does not match it.
    pub(super) fn check_read(&mut self, key: u64, bytes: &[u8]) {
        let content = self.content_hash(bytes);
        if self.entries.get(&key).is_some_and(|e| e.content != content) {
            log::warn!(
                "cache: a stored file changed behind the hub's back; it is rewritten at the next answer"
            );
            self.entries.remove(&key);
        }
    }

    /// Forgets everything (a whole collection went; the disk answers until puts refill it).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Entries held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Heap bytes of the table: buckets × (entry + control byte).
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        let cap = self.entries.capacity();
        if cap == 0 {
            return 0;
        }
        // hashbrown keeps at most 7/8 of its (power of two) buckets full.
        let buckets = (cap * 8 / 7).next_power_of_two();
        buckets * (size_of::<(u64, Entry)>() + 1)
    }
}

impl Store {
    /// The index, locked: the writer thread changes it, readers only drop entries.
    pub(super) fn index(&self) -> MutexGuard<'_, ObjectIndex> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Builds the index from every object file and non-resource document under the root
    /// (tokens are not indexed). Whatever cannot be read is left out: the disk answers for it.
    pub(super) fn build_index(&self) {
        let mut index = self.index();
        for (name, is_dir) in safe_entries(&self.root) {
            if !is_dir {
                index_file(&mut index, &self.root, &name);
                continue;
            }
            for_each_kind_dir(&self.root.join(&name), &name, &mut |kind_rel, kind_dir| {
                index_kind(&mut index, &self.root, kind_rel, kind_dir);
            });
        }
    }
}

/// Calls `f` with each kind directory of a component's directory `dir` (whose path below
/// the root is `rel`): its path below the root and on disk; also those of its metadata views,
/// one level down ([`METADATA_DIR`]). A kind directory's name has dots (`pods.v1.core`);
/// `tokens` has none.
pub(super) fn for_each_kind_dir(dir: &Path, rel: &str, f: &mut dyn FnMut(&str, &Path)) {
    for (kind, is_dir) in safe_entries(dir) {
        if !is_dir || !kind.contains('.') {
            continue;
        }
        let kind_dir = dir.join(&kind);
        let kind_rel = format!("{rel}/{kind}");
        if kind == METADATA_DIR {
            for (inner, is_dir) in safe_entries(&kind_dir) {
                if is_dir && inner.contains('.') {
                    f(&format!("{kind_rel}/{inner}"), &kind_dir.join(&inner));
                }
            }
        } else {
            f(&kind_rel, &kind_dir);
        }
    }
}

/// Indexes every object of one kind directory (`kind_rel` below `root`, at `kind_dir`).
fn index_kind(index: &mut ObjectIndex, root: &Path, kind_rel: &str, kind_dir: &Path) {
    let mut path = String::new();
    for (entry, is_dir) in safe_entries(kind_dir) {
        path.clear();
        path.extend([kind_rel, "/", entry.as_str()]);
        if !is_dir {
            index_file(index, root, &path);
            continue;
        }
        let namespace_len = path.len();
        for (object, is_dir) in safe_entries(&kind_dir.join(&entry)) {
            if !is_dir {
                path.truncate(namespace_len);
                path.extend(["/", object.as_str()]);
                index_file(index, root, &path);
            }
        }
    }
}

/// The entries of `dir` that the store could have made (safe segments), with whether each
/// is a directory; none if `dir` cannot be read.
pub(super) fn safe_entries(dir: &Path) -> impl Iterator<Item = (String, bool)> {
    fs::read_dir(dir).into_iter().flatten().filter_map(|entry| {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        let kind = entry.file_type().ok()?;
        let is_dir = kind.is_dir();
        ((is_dir || kind.is_file()) && is_safe_segment(&name)).then_some((name, is_dir))
    })
}

/// Indexes the file at `rel` below `root`, if it can be read.
fn index_file(index: &mut ObjectIndex, root: &Path, rel: &str) {
    if let Ok(Some(bytes)) = read_object(&root.join(rel)) {
        let entry = index.entry_of(&bytes);
        let key = index.path_hash(rel);
        index.record(key, entry);
    }
}

/// The entry of `bytes` whose hash is `content`.
pub(super) fn entry_with(bytes: &[u8], content: u64) -> Entry {
    let rv = stored_rv(bytes).and_then(|rv| rv.parse().ok()).unwrap_or(0);
    Entry { rv, content }
}

/// The map's hasher: its keys are SipHash outputs already.
#[derive(Debug, Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed (`write_u64`); fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
