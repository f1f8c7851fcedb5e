//! What the store holds, in memory: per stored object a hash of its path, its
//! resourceVersion and a hash of its bytes, so that a put of an unchanged (or older) object
//! is answered without a syscall.
//!
//! Built once after recovery by reading every object file: at open, or (the hub) in the
//! background by the `cache-index` thread, so that the first offline answer never waits for a
//! read of the whole cache (20,000 files, 100 MB, several seconds on a router's flash). Then
//! an entry is made only by what the store writes, or finds identical to what it was asked
//! to write (a stale put learns nothing), and dropped by every other change (delete,
//! replacements, recovery).
//!
//! While the background build runs, the store works as it does for an object the index
//! does not know: a put reads the file, a version is read from it. The build adds an entry
//! only for a path that nothing recorded or forgot since the build began ([`Building`]), and
//! nothing at all once the index was cleared (and then it stops reading): what it read may
//! be older than what the writer wrote or removed meanwhile, and an entry that is missing
//! only costs the disk path. Each file is hashed and parsed before the index's lock is
//! taken, so the writer's puts never wait for that. It
//! yields to readers: before each file it waits (a little) while a get or a list is reading. The hub owns the root (its
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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::check::{Expect, api_version_of_kind_dir, check_object};
use super::fs::read_object;
use super::{PutOutcome, Store, stored_rv};
use crate::cache::key::{CollectionKey, METADATA_DIR, ObjectKey};
use crate::names::is_safe_segment;

/// The index: path hash → [`Entry`].
#[derive(Debug, Default)]
pub(super) struct ObjectIndex {
    /// Keys both hashes; drawn per process, since nothing of the index outlives it.
    hasher: RandomState,
    entries: HashMap<u64, Entry, BuildHasherDefault<PassThrough>>,
    /// While a build runs: what changed since it began.
    building: Option<Building>,
}

/// What changed in the index since its build began: the build's reading of those paths may
/// be older than the change.
#[derive(Debug, Default)]
pub(super) struct Building {
    /// Path hashes recorded or forgotten since.
    touched: HashSet<u64, BuildHasherDefault<PassThrough>>,
    /// Everything was forgotten since (a collection deleted whole, a journal applied): the
    /// build adds nothing more.
    cleared: bool,
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
        self.key_hash_of(&key.collection, key.namespace.as_deref(), &key.name)
    }

    /// [`ObjectIndex::key_hash`] of the object `name` in `namespace` of `c`, from its parts.
    pub(super) fn key_hash_of(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
        name: &str,
    ) -> u64 {
        key_hash_with(&self.hasher, c, namespace, name)
    }

    /// The path hash of a path relative to the root (`kubelet/pods.v1.core/a/web`; a
    /// non-resource document's file name).
    pub(super) fn path_hash(&self, rel: &str) -> u64 {
        hash_with(&self.hasher, rel.as_bytes())
    }

    /// The entry that `bytes`, stored, would have.
    #[cfg(test)]
    pub(super) fn entry_of(&self, bytes: &[u8]) -> Entry {
        entry_with(bytes, self.content_hash(bytes))
    }

    /// The hash of a file's bytes.
    pub(super) fn content_hash(&self, bytes: &[u8]) -> u64 {
        hash_with(&self.hasher, bytes)
    }

    /// The hashes' key, so a build (and [`Store::holds_exactly`]) can hash without holding
    /// the index.
    pub(super) fn hasher(&self) -> RandomState {
        self.hasher.clone()
    }

    /// Whether the running build was cleared (or none runs): it adds nothing more.
    fn build_done(&self) -> bool {
        self.building.as_ref().is_none_or(|b| b.cleared)
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
        self.touch(key);
        self.entries.insert(key, entry);
    }

    /// The file at `key` is gone, or no longer known; `true` when an entry was dropped.
    pub(super) fn forget(&mut self, key: u64) -> bool {
        self.touch(key);
        self.entries.remove(&key).is_some()
    }

    /// Notes a change at `key` for a build that runs.
    fn touch(&mut self, key: u64) {
        // A cleared build adds nothing: what it touched no longer matters.
        if let Some(building) = &mut self.building
            && !building.cleared
        {
            building.touched.insert(key);
        }
    }

    /// A build begins: from now on it adds entries only through [`ObjectIndex::built`].
    pub(super) fn begin_build(&mut self) {
        self.building = Some(Building::default());
    }

    /// The build read the file at `key` as `entry`: kept unless the path changed since the
    /// build began, or the index was cleared (the build's reading may be the older one).
    /// `true` when kept.
    pub(super) fn built(&mut self, key: u64, entry: Entry) -> bool {
        let Some(building) = &self.building else {
            return false;
        };
        if building.cleared || building.touched.contains(&key) || self.entries.contains_key(&key) {
            return false;
        }
        self.entries.insert(key, entry);
        true
    }

    /// The build is over.
    pub(super) fn end_build(&mut self) {
        self.building = None;
    }

    /// Whether a build runs.
    pub(super) fn is_building(&self) -> bool {
        self.building.is_some()
    }

    /// Drops an entry whose file was just read as `bytes` and does not match it; `true`
    /// when it did.
    pub(super) fn check_read(&mut self, key: u64, bytes: &[u8]) -> bool {
        let content = self.content_hash(bytes);
        let differs = self.entries.get(&key).is_some_and(|e| e.content != content);
        if differs {
            log::warn!(
                "cache: a stored file changed behind the hub's back; it is rewritten at the next answer"
            );
            self.forget(key);
        }
        differs
    }

    /// Forgets everything (a whole collection went; the disk answers until puts refill it).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        if let Some(building) = &mut self.building {
            building.cleared = true;
            building.touched.clear();
        }
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
    /// (tokens are not indexed), alongside the writer ([`ObjectIndex::built`]): at open, or
    /// on the `cache-index` thread ([`Store::start_index`]). Whatever cannot be read is left
    /// out: the disk answers for it. Logs `cache index built: n objects in x s`.
    pub(super) fn build_index(&self) {
        self.index().begin_build();
        self.index_walk();
        // At open, before any writer: the figures the bound starts from. (Built in the
        // background, the writer takes the census itself once the build is over.)
        self.take_census();
    }

    /// Forgets the entries of every object under one kind directory (`kind_rel` below the
    /// root, at `kind_dir`), which is about to go whole: the other collections' stay.
    pub(super) fn forget_kind(&self, kind_rel: &str, kind_dir: &Path) {
        let mut index = self.index();
        for_each_object(kind_rel, kind_dir, &mut |rel, _| {
            let at = index.path_hash(rel);
            index.forget(at);
        });
    }

    /// The build's walk, once [`ObjectIndex::begin_build`] noted where changes start to count.
    fn index_walk(&self) {
        let started = Instant::now();
        let hasher = self.index().hasher();
        // Set once the index was cleared (an import's journal moved whole directories):
        // the build would add nothing more, so it reads nothing more.
        let mut done = false;
        let mut index_file = |rel: &str, expect: Option<&Expect<'_>>| {
            if done {
                return;
            }
            self.yield_to_readers();
            if let Ok(Some(bytes)) = read_object(&self.root.join(rel))
                // A file the hub would not serve as its path's object (a ghost) is no entry:
                // it must not decide a put or a version.
                && expect.is_none_or(|expect| check_object(&bytes, expect).is_ok())
            {
                // Hashed and parsed before the lock: the writer's puts wait on it.
                let entry = entry_with(&bytes, hash_with(&hasher, &bytes));
                let key = hash_with(&hasher, rel.as_bytes());
                // Between the read and the entry: where a change made meanwhile would race.
                if let Some(pause) = self.options.index_pause {
                    std::thread::sleep(pause);
                }
                let mut index = self.index();
                index.built(key, entry);
                done = index.build_done();
            }
        };
        for (name, is_dir) in safe_entries(&self.root) {
            if !is_dir {
                index_file(&name, None);
                continue;
            }
            for_each_kind_dir(&self.root.join(&name), &name, &mut |kind_rel, kind_dir| {
                for_each_object(kind_rel, kind_dir, &mut index_file);
            });
        }
        let objects = {
            let mut index = self.index();
            index.end_build();
            index.entries.len()
        };
        log::info!(
            "cache index built: {objects} objects in {:.3} s",
            started.elapsed().as_secs_f64()
        );
    }

    /// Builds the index on a thread of its own (`cache-index`, a small stack), so that the
    /// hub answers from the disk meanwhile; inline when no thread can be made. Only for a
    /// store opened with [`StoreOptions::background_index`](super::StoreOptions).
    pub(crate) fn start_index(self: &Arc<Store>) {
        // Here, not on the thread: every change from now on counts against the build.
        self.index().begin_build();
        let store = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("cache-index".into())
            .stack_size(256 * 1024)
            .spawn(move || store.index_walk());
        if let Err(e) = spawned {
            log::warn!("cache: cannot start the cache-index thread ({e}); indexing now");
            self.index_walk();
        }
    }

    /// Whether the index is still being built (the writer takes the bound's census after it).
    pub(crate) fn index_building(&self) -> bool {
        self.index().is_building()
    }

    /// Waits a little while a get or a list reads: the first offline answers go before the
    /// build's reads of the disk. At most [`YIELD_AT_MOST`] a file, so a reader that never
    /// stops (a client listing in a loop) slows the build, never stops it.
    fn yield_to_readers(&self) {
        let mut waited = Duration::ZERO;
        while self.readers.load(Ordering::Acquire) > 0 && waited < YIELD_AT_MOST {
            std::thread::sleep(YIELD_STEP);
            waited += YIELD_STEP;
        }
    }
}

/// The longest the build waits for readers before a file.
const YIELD_AT_MOST: Duration = Duration::from_millis(20);
/// How often it looks again.
const YIELD_STEP: Duration = Duration::from_millis(1);

/// Counts a store read in flight while it lives (`Store::get`, an `ObjectIter`), for the
/// index build to yield to.
#[derive(Debug)]
pub(super) struct Reading(Arc<AtomicUsize>);

impl Reading {
    pub(super) fn new(readers: &Arc<AtomicUsize>) -> Reading {
        readers.fetch_add(1, Ordering::AcqRel);
        Reading(Arc::clone(readers))
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

/// Calls `f` with the path below the root of every object file of one kind directory
/// (`kind_rel` below the root, at `kind_dir`), and what the file must hold to be served.
fn for_each_object(kind_rel: &str, kind_dir: &Path, f: &mut dyn FnMut(&str, Option<&Expect<'_>>)) {
    // Below the component's directory, as `Expect` takes it; the same for every object.
    let kind = kind_rel.split_once('/').map_or(kind_rel, |(_, kind)| kind);
    let api_version = api_version_of_kind_dir(kind);
    let mut path = String::new();
    for (entry, is_dir) in safe_entries(kind_dir) {
        path.clear();
        path.extend([kind_rel, "/", entry.as_str()]);
        if !is_dir {
            let expect = Expect {
                namespace: None,
                name: &entry,
                api_version: api_version.as_deref().map(Cow::Borrowed),
            };
            f(&path, Some(&expect));
            continue;
        }
        let namespace_len = path.len();
        for (object, is_dir) in safe_entries(&kind_dir.join(&entry)) {
            if !is_dir {
                path.truncate(namespace_len);
                path.extend(["/", object.as_str()]);
                let expect = Expect {
                    namespace: Some(&entry),
                    name: &object,
                    api_version: api_version.as_deref().map(Cow::Borrowed),
                };
                f(&path, Some(&expect));
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

/// [`ObjectIndex::key_hash_of`] with the index's key `hasher`.
pub(super) fn key_hash_with(
    hasher: &RandomState,
    c: &CollectionKey,
    namespace: Option<&str>,
    name: &str,
) -> u64 {
    let [resource, version, group] = c.gvr.dir_name_parts();
    let (view, view_end) = c.view.dir().map_or(("", ""), |dir| (dir, "/"));
    let (ns, ns_end) = namespace.map_or(("", ""), |ns| (ns, "/"));
    let parts = [
        c.component.as_str(),
        "/",
        view,
        view_end,
        resource,
        ".",
        version,
        ".",
        group,
        "/",
        ns,
        ns_end,
        name,
    ];
    let mut h = hasher.build_hasher();
    // The path's pieces hash as their concatenation does (`write`, never `write_str`):
    // one `write` of the path joined on the stack where it fits (each small get's proof
    // hashes one: issue 34), each piece apart otherwise. SipHash's `write` costs
    // about as much per call as per 8 bytes: 13 short pieces cost it four times one path.
    let mut joined = [0u8; 256];
    let mut len = 0;
    // By reference, and without the empty pieces (a view, a namespace, the core group):
    // fewer copies, and no by-value iterator of the array.
    for part in parts.iter().filter(|part| !part.is_empty()) {
        let Some(to) = joined.get_mut(len..len + part.len()) else {
            len = usize::MAX;
            break;
        };
        to.copy_from_slice(part.as_bytes());
        len += part.len();
    }
    match joined.get(..len) {
        Some(path) => h.write(path),
        None => parts.iter().for_each(|part| h.write(part.as_bytes())),
    }
    h.finish()
}

/// The hash of `bytes` under the index's key.
pub(super) fn hash_with(hasher: &RandomState, bytes: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    h.write(bytes);
    h.finish()
}

/// The entry of `bytes` whose hash is `content`.
pub(super) fn entry_with(bytes: &[u8], content: u64) -> Entry {
    entry_at_rv(stored_rv(bytes).as_deref(), content)
}

/// The entry of bytes whose hash is `content` and whose `metadata.resourceVersion` the
/// caller read already as `rv`: [`entry_with`] without parsing them again.
pub(super) fn entry_at_rv(rv: Option<&str>, content: u64) -> Entry {
    let rv = rv.and_then(|rv| rv.parse().ok()).unwrap_or(0);
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
