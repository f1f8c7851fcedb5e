//! The on-disk cache: one JSON file per object in YurtHub's layout, written crash-safely.
//!
//! Layout: `<root>/<component>/<resource>.<version>.<group>/[<namespace>/]<name>`, files
//! 0600, directories 0700; non-resource documents directly in the root; TokenRequest answers
//! in `<root>/<component>/tokens/<namespace>/<service account>/<digest>` (a name without a
//! dot, so never a kind directory). The store knows
//! paths, bytes and `metadata.resourceVersion`, nothing else: it does not decode objects,
//! evaluate selectors (a replacement asks the caller through `in_scope`), keep anything in
//! memory between calls but the tombstones of recent deletions and an index of what is
//! stored (a path hash, a resourceVersion and a content hash per object). It does lock
//! the root against a second process (`src/dir_lock.rs`): two writers' recoveries would
//! remove each other's staged files, and the index trusts that no one else writes.
//!
//! Concurrency: one writer (the cache writer thread) and any number of readers. Every file
//! appears by `rename`, so a reader sees an object whole, old or new, and needs no lock
//! for the file (a read takes the index's lock for a moment, to drop an entry that does
//! not match what it read).
//!
//! # Temporary files: one staging directory
//!
//! Everything not yet visible is written to `<root>/.staging/` — single puts as `p.<n>`,
//! staged list objects as `r.<replace>.<seq>`, journals being written as `j.<replace>`,
//! and collections being deleted as `d.<n>` — and renamed into place from there. A
//! dot-name beside each target would have made every rename stay within one directory,
//! but then finding leftovers after a crash means walking the whole tree (20,000 files on
//! slow flash at every boot), and readers and YurtHub-era tools would meet half-written
//! files in kind directories. With one staging directory, recovery reads the root and
//! `.staging` only, and a kind directory only ever holds whole objects. The price: the
//! staging directory must be on the same filesystem as every kind directory (a mount
//! point inside the root makes writes fail with `EXDEV`), and a rename touches two
//! directories; only the target one is fsynced, since a source entry that survives a
//! crash is just a leftover that recovery removes. Keys can never collide with these
//! names: [`is_safe_segment`] refuses a leading `.`.
//!
//! # Single writes
//!
//! Write `.staging/p.<n>`, `fdatasync` it, rename it over the target, fsync the target
//! directory. A crash leaves the old file or the new one; the temporary file is removed
//! at the next start.
//!
//! # Replacements and recovery
//!
//! A list answer replaces what a collection holds all at once, through a journal
//! (`replace.rs`; the journal's format and the recovery at start are in `journal.rs`).
//! [`Store::open`] rolls an interrupted replacement forward or back.
//!
//! # Whose version wins
//!
//! Everything stored is the cloud's: answers to reads, lists and watches (a client's write
//! is never stored as the cloud's truth). The cloud's answers interleave in the writer, so
//! resourceVersions, compared as numbers, put them in order; the rules are three.
//!
//! - **A single object** (a get's answer, a watch event) is not written over a stored
//!   version newer than its own, nor at or below a version a deletion buried
//!   (`tombstones.rs`): a replayed or late event, or a get answered by an apiserver that
//!   lags behind an event already stored, must not undo it. Both versions compared are the
//!   cloud's; a file from before this start counts as the cloud's too, until a whole list
//!   says otherwise.
//! - **A whole list of a scope** ([`Replace::commit`]) is the cloud's whole truth for it,
//!   and replaces the scope whatever versions the cache holds: resourceVersions are opaque,
//!   and they go backwards after an etcd restore, which would otherwise freeze the cache on
//!   old objects for good (or on a file planted behind the hub's back with a huge one).
//!   Nothing stored or buried before the list began stops it: every object it returns is
//!   written, every object of the scope it left out is removed. Only what the cloud said
//!   while the list was being staged is compared (an object a watch event or a get wrote
//!   or deleted meanwhile, which the store notes in `recent.rs`): a list then does not undo
//!   a newer event, bring back a deletion, or remove an object created after it was taken.
//! - **A partial list** (a page, an answer with an item the hub could not read or file)
//!   deletes nothing, and each of its objects is guarded as a single object is.
//!
//! After an etcd restore, then, events and gets below the stored versions are refused until
//! the next whole list, which the client makes when its watch breaks; that list's versions
//! rule from then on.
//!
//! # What a failure leaves
//!
//! A failed write (ENOSPC, EACCES, EIO) returns a [`StoreError`] naming the path and the
//! operation, leaves the stored file as it was and removes its temporary file. A failed
//! replacement removes its staged files. If a rename or delete fails while a journal is
//! being applied, the rest is still applied, the journal is removed and the first error
//! is returned: each object is then old or new, but the collection may be mixed.
//!
//! # Files
//!
//! `mod.rs` the store API and layout; `replace.rs` list replacements; `journal.rs` the
//! journal and recovery at start; `tombstones.rs` recent deletions; `recent.rs` which
//! objects changed lately (what a whole list yields to); `index.rs` the
//! in-memory index that answers unchanged puts and stored versions; `list.rs` reading a collection (or its names) in order; `tokens.rs` TokenRequest answers; `fs.rs` the no-follow, 0600/0700
//! file primitives; `error.rs` [`StoreError`];
//! `error_keys.rs` the list of keys whose write failed, kept beside the cache; `grants.rs`
//! the credentials' read grants, kept beside the cache; `synced.rs` when each kind last heard
//! the cloud, kept beside the cache, and the kind directories' modification times;
//! `check.rs` what a file must be to be served (bounded, a regular file, the object its path
//! names); `relist.rs` the `.relist` record of collections to relist whole.

pub(crate) mod archive;
pub(crate) mod audit;
pub(crate) mod check;
mod error;
mod error_keys;
mod fs;
mod generation;
mod grants;
mod index;
mod journal;
mod list;
pub(crate) mod quarantine;
mod recent;
pub(crate) mod relist;
mod replace;
pub(crate) mod synced;
#[cfg(test)]
mod tests;
mod tokens;
mod tombstones;
mod usage;
pub(crate) mod view;

use std::borrow::Cow;
use std::fs::{DirBuilder, File};
use std::hash::RandomState;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::key::{CollectionKey, ObjectKey, rv_newer};
use super::object::ObjectHead;
use crate::dir_lock::DirLock;
use crate::names::is_safe_segment;
use error::io_err;
use fs::{
    DIR_MODE, all_real_dirs, make_dir, parent_of, read_object, remove_quietly, sync_dir,
    write_new_file,
};
use index::{Known, ObjectIndex, Reading, entry_with};
use list::NameCursor;
use recent::RecentChanges;
use tombstones::Tombstones;

pub(crate) use error::{StoreError, StoreOp};
pub(crate) use generation::Generation;
pub(crate) use journal::CommitStep;
pub(crate) use journal::RecoveryReport;
pub(crate) use list::{NameIter, ObjectIter};
pub(crate) use replace::Replace;
#[cfg(test)]
pub(crate) use replace::ReplaceReport;
#[cfg(test)]
pub(crate) use tokens::{TOKEN_CAP, TOKEN_STALE};
pub(crate) use usage::Usage;
use usage::{Bucket, file_len};

/// Where everything not yet visible is written.
pub(crate) const STAGING: &str = ".staging";

/// Source of unique temporary names within this process. `usize`, not `u64`: 64-bit
/// atomics are missing on some 32-bit router CPUs.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

fn next_id() -> usize {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutOutcome {
    /// The object was written (or, inside a replacement, staged to be).
    Written {
        /// Its size.
        bytes: u64,
    },
    /// The same bytes are already stored; nothing was written (flash wears out).
    Identical,
    /// The stored object's resourceVersion is newer; nothing was written.
    Stale,
}

/// One object read back from a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredObject {
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The file's bytes, as stored (not necessarily valid JSON).
    pub bytes: Vec<u8>,
    /// What the object check read of its head, so a list need not parse it again; `None`
    /// when the file is no object (its reader answers it as damaged).
    pub head: Option<StoredHead>,
}

/// The fields of a stored object's head an offline list answers with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoredHead {
    /// `kind`.
    pub kind: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
}

/// How a store behaves beyond its root; production uses the default, but for the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StoreOptions {
    /// Fault injection: stop every replacement's commit at this step, as a crash would,
    /// with [`StoreError::InjectedCrash`] and nothing cleaned up. `None` by default.
    pub crash_at: Option<CommitStep>,
    /// Open without building the index: [`Store::start_index`] builds it in the background
    /// (the hub). By default it is built before [`Store::open_with`] returns.
    pub background_index: bool,
    /// Fault injection: the index build sleeps this long between reading each file and
    /// making its entry, so a test can change the store in between. `None` by default.
    pub index_pause: Option<std::time::Duration>,
}

/// The cache directory. Cheap to share: `Send + Sync`, every method takes `&self`.
#[derive(Debug)]
pub(crate) struct Store {
    root: PathBuf,
    staging: PathBuf,
    /// The root, open: `syncfs` needs a descriptor on the cache filesystem.
    root_dir: File,
    /// Bumped by every change made outside a replacement and by every journal applied, so
    /// a commit knows whether its staging-time comparisons may be out of date.
    changes: AtomicUsize,
    /// Which objects those changes touched, lately (`recent.rs`).
    recent: Mutex<RecentChanges>,
    /// How often each collection changed (`generation.rs`).
    generations: Mutex<generation::Generations>,
    /// Recently removed objects. Locked only by the one writer thread: never contended.
    tombstones: Mutex<Tombstones>,
    /// What is stored, so an unchanged put touches no file (`index.rs`).
    index: Mutex<ObjectIndex>,
    /// The index's hash key, never changed: what hashes without its lock.
    index_key: RandomState,
    /// What the files weigh (`usage.rs`), for `--cache-max-bytes`.
    usage: Mutex<Usage>,
    /// Fault injection; the default in production.
    options: StoreOptions,
    /// Gets and lists reading now: the index build yields to them (`index.rs`).
    readers: Arc<AtomicUsize>,
    /// The collections to relist whole when next read online (`relist.rs`), as
    /// `.relist` holds them.
    relist: Mutex<relist::RelistMarks>,
    /// Whether `relist` holds any: a watch's begin asks, and almost always none is.
    relist_any: AtomicBool,
    /// Held while the store is open: no other process uses this root meanwhile.
    _lock: DirLock,
}

impl Store {
    /// Opens the cache at `root`, creating it (0700) if missing: locks it for this process
    /// ([`StoreError::Lock`] when another holds it), recovers from a crash, and proves that
    /// a file can be made, flushed and removed under it. A root that cannot be written (a
    /// read-only mount, no permission) fails here; a full one only says so in the log (what
    /// is cached still answers).
    #[allow(
        dead_code,
        reason = "tests; the hub and `cache import` open with `open_with` (the hub builds the index in the background, an import needs none)"
    )]
    pub(crate) fn open(root: &Path) -> Result<(Store, RecoveryReport), StoreError> {
        Store::open_with(root, StoreOptions::default())
    }

    /// [`Store::open`] with `options` (tests inject faults through them).
    pub(crate) fn open_with(
        root: &Path,
        options: StoreOptions,
    ) -> Result<(Store, RecoveryReport), StoreError> {
        if let Err(e) = DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(root)
        {
            let e = match std::fs::metadata(root) {
                Ok(meta) if !meta.is_dir() => io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "exists and is not a directory",
                ),
                _ => e,
            };
            return Err(io_err(StoreOp::CreateDir, root)(e));
        }
        // Before recovery, which clears the staging directory a running hub writes to.
        let lock = DirLock::acquire(root).map_err(StoreError::Lock)?;
        let root_dir = File::open(root).map_err(io_err(StoreOp::Read, root))?;
        let relist = Store::load_relist(root);
        let index = ObjectIndex::default();
        let store = Store {
            root: root.to_owned(),
            staging: root.join(STAGING),
            root_dir,
            changes: AtomicUsize::new(0),
            recent: Mutex::new(RecentChanges::default()),
            generations: Mutex::new(generation::Generations::default()),
            tombstones: Mutex::new(Tombstones::default()),
            index_key: index.hasher(),
            index: Mutex::new(index),
            usage: Mutex::new(Usage::default()),
            options,
            readers: Arc::new(AtomicUsize::new(0)),
            relist_any: AtomicBool::new(!relist.is_empty()),
            relist: Mutex::new(relist),
            _lock: lock,
        };
        let report = store.recover()?;
        if !options.background_index {
            store.build_index();
        }
        match store.probe_write() {
            Err(e) if e.is_disk_full() => {
                log::warn!("{e}: the cache is full; what it holds still answers")
            }
            probed => probed?,
        }
        Ok((store, report))
    }

    /// Makes, flushes and removes a file in the staging directory: mode bits do not tell
    /// (root ignores them, a read-only mount does not show in them), trying does. A probe
    /// left by a crash is removed by the next recovery, like any staged file.
    fn probe_write(&self) -> Result<(), StoreError> {
        let probe = self.staging.join(format!("probe.{}", next_id()));
        write_new_file(&probe, b"tinyhub write probe\n", true)?;
        std::fs::remove_file(&probe).map_err(io_err(StoreOp::Remove, &probe))
    }

    /// The cache root.
    #[cfg(test)]
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The stored bytes of one object; `None` if it is not cached, or if its file holds
    /// another object than the key names, or is over [`check::MAX_FILE`] (counted and
    /// warned of, [`check::refused`]). A file that is no JSON object is handed out all the
    /// same, counted: the caller answers it as damaged.
    pub(crate) fn get(&self, key: &ObjectKey) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let _reading = Reading::new(&self.readers);
        let dirs = self.object_dirs(key);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        let path = dirs[dirs.len() - 1].join(&key.name);
        let read = check::read_checked(&path, &check::Expect::for_key(key))?;
        let forgot = {
            let mut index = self.index();
            let at = index.key_hash(key);
            match read.bytes() {
                Some(bytes) => index.check_read(at, bytes),
                None => index.forget(at),
            }
        };
        if forgot {
            // What the index believed of the collection was wrong: no proof stands.
            self.moved_collection(&key.collection);
        }
        Ok(check::serve(&path, read))
    }

    /// The stored resourceVersion of one object: the index's when it knows the object (no
    /// syscall), else the file's. `None` when it is not stored; `Some(0)` when it is stored
    /// without a numeric resourceVersion (as old as [`rv_newer`] takes it to be).
    ///
    /// A read from the file does not fill the index: only the writer makes entries, since
    /// a reader's entry could record a version the writer replaced or removed meanwhile, and
    /// a later put would be judged by it. Entries are missing only after a collection was
    /// deleted whole or a journal applied, so the file is the rare path.
    pub(crate) fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>, StoreError> {
        check_key(key)?;
        {
            let index = self.index();
            if let Some(rv) = index.rv_of(index.key_hash(key)) {
                return Ok(Some(rv));
            }
        }
        let dirs = self.object_dirs(key);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        let Some(bytes) = read_own(&dirs[dirs.len() - 1].join(&key.name), key)? else {
            return Ok(None);
        };
        // Reached only when the index holds no entry: nothing to check the bytes against.
        let rv = stored_rv(&bytes).and_then(|rv| rv.parse().ok());
        Ok(Some(rv.unwrap_or(0)))
    }

    /// The names of a collection's objects, sorted by (namespace, name), without reading a
    /// file: one namespace directory's names at a time, as [`Store::list`] reads them.
    ///
    /// `None` when the collection is not cached; `namespace` limits the names to one
    /// namespace directory, and without it cluster-scoped names come first.
    pub(crate) fn names(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
    ) -> Result<Option<NameIter>, StoreError> {
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        let Some(kind_dir) = self.collection_dir(c)? else {
            return Ok(None);
        };
        let cursor = NameCursor::open(kind_dir, namespace, None)?;
        Ok(Some(NameIter { cursor }))
    }

    /// Whether this collection was ever cached (a list answered empty counts).
    pub(crate) fn has_collection(&self, c: &CollectionKey) -> bool {
        matches!(self.collection_dir(c), Ok(Some(_)))
    }

    /// The objects of a collection, sorted by (namespace, name), read one file per `next()`.
    ///
    /// `None` when the collection is not cached. `namespace` limits the listing to one
    /// namespace directory; without it, cluster-scoped objects come first (namespace
    /// `""`), then every namespace. `after` = (namespace or `""`, name) resumes strictly
    /// after that position. Names are read one namespace directory at a time.
    pub(crate) fn list(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> Result<Option<ObjectIter>, StoreError> {
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        let Some(kind_dir) = self.collection_dir(c)? else {
            return Ok(None);
        };
        let cursor = NameCursor::open(kind_dir, namespace, after)?;
        let api_version = check::Expect::for_collection(c);
        Ok(Some(ObjectIter {
            cursor,
            api_version,
            _reading: Reading::new(&self.readers),
        }))
    }

    /// Creates or updates one object.
    ///
    /// Nothing is written when the stored bytes are the same ([`PutOutcome::Identical`])
    /// or the stored resourceVersion is newer than `rv`, or `rv` is at or below one this
    /// store removed ([`PutOutcome::Stale`]). A stored file that is not valid JSON counts as
    /// older and is replaced. What is stored is judged by the index when it knows the
    /// object, without touching the disk.
    pub(crate) fn put(
        &self,
        key: &ObjectKey,
        bytes: &[u8],
        rv: Option<&str>,
    ) -> Result<PutOutcome, StoreError> {
        check_key(key)?;
        // Before reading the file: a buried version needs no disk access to be refused.
        if self.buries(key, rv) {
            return Ok(PutOutcome::Stale);
        }
        let (at, content, known) = {
            let index = self.index();
            let at = index.key_hash(key);
            let content = index.content_hash(bytes);
            (at, content, index.judge(at, content, rv))
        };
        if let Known::Unchanged(outcome) = known {
            return Ok(outcome);
        }
        let dirs = self.object_dirs(key);
        let target = dirs[dirs.len() - 1].join(&key.name);
        if known == Known::Unknown {
            let existing = if all_real_dirs(&dirs)? {
                read_own(&target, key)?
            } else {
                None
            };
            if let Some(outcome) = unchanged(existing.as_deref(), bytes, rv) {
                if outcome == PutOutcome::Identical {
                    self.index().record(at, entry_with(bytes, content));
                }
                return Ok(outcome);
            }
        }
        let bucket = Bucket::Collection(kind_dirs_below_root(&key.collection).1);
        self.write_indexed(at, content, (&dirs, &target), bytes, &bucket)?;
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }

    /// Whether the object `name` (in `namespace`) of `collection` is stored as exactly
    /// `bytes`, as the index knows it: then [`Store::put`] of them would answer
    /// [`PutOutcome::Identical`] (or `Stale`) and write nothing. Two hashes and one lock, no
    /// syscall and no allocation; hashed before the lock is taken (connection threads ask
    /// this for their gets' answers: issue 34), so neither the writer nor another
    /// connection waits for them. `false` when the index does not know the object (only a
    /// put can tell) or it differs. (An unsafe collection, namespace or name is never stored,
    /// so the index knows none: it answers `false` as for any unknown path.)
    pub(crate) fn holds_exactly(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        name: &str,
        bytes: &[u8],
    ) -> bool {
        let at = self.object_hash(collection, namespace, name);
        self.holds_hashed(at, self.content_hash(bytes))
    }

    /// The index's hash of the path of the object `name` (in `namespace`) of `collection`,
    /// taken without its lock.
    pub(crate) fn object_hash(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        name: &str,
    ) -> u64 {
        index::key_hash_with(&self.index_key, collection, namespace, name)
    }

    /// The index's hash of a file's `bytes`, taken without its lock.
    pub(crate) fn content_hash(&self, bytes: &[u8]) -> u64 {
        index::hash_with(&self.index_key, bytes)
    }

    /// [`Store::holds_exactly`] of the object at path hash `at`, for bytes of hash `content`
    /// ([`Store::object_hash`], [`Store::content_hash`]).
    pub(crate) fn holds_hashed(&self, at: u64, content: u64) -> bool {
        self.index().judge(at, content, None) == Known::Unchanged(PutOutcome::Identical)
    }

    /// Writes `bytes`, hashing to `content`, to `target` (making `dirs` first) and keeps the index at `at` exact:
    /// after a failure the file may be old or new, so the entry goes. The file it replaces
    /// is weighed first, so `bucket`'s figures stay exact.
    fn write_indexed(
        &self,
        at: u64,
        content: u64,
        (dirs, target): (&[PathBuf], &Path),
        bytes: &[u8],
        bucket: &Bucket,
    ) -> Result<(), StoreError> {
        let old = file_len(target);
        if let Bucket::Collection(kind) = bucket {
            // Written or failed (then the file may be old or new): it changed.
            self.moved(kind);
        }
        let written = dirs
            .iter()
            .try_for_each(|dir| self.ensure_dir(dir))
            .and_then(|()| self.write_file(target, bytes));
        let mut index = self.index();
        match &written {
            Ok(()) => index.record(at, entry_with(bytes, content)),
            Err(_) => {
                index.forget(at);
            }
        }
        drop(index);
        if written.is_ok() {
            self.weigh(bucket, old, Some(bytes.len() as u64));
            self.changed(Some(at));
        }
        written
    }

    /// Removes one object; `false` if it was not cached.
    ///
    /// `rv` is the deletion's resourceVersion (a watch's DELETED event), `None` when unknown
    /// (the cloud answered 404). A stored object newer than `rv` stays (a late DELETED from
    /// an older stream; `false`); otherwise every version before `rv` is stale from now on,
    /// stored or not, and [`Store::put`] and replacements refuse them.
    pub(crate) fn delete(&self, key: &ObjectKey, rv: Option<&str>) -> Result<bool, StoreError> {
        check_key(key)?;
        let dirs = self.object_dirs(key);
        let real = all_real_dirs(&dirs)?;
        let dir = &dirs[dirs.len() - 1];
        let path = dir.join(&key.name);
        let at = self.index().key_hash(key);
        let mut buried = false;
        if let Some(rv) = rv {
            // Unreadable: not known to be newer, so the deletion goes ahead.
            if real
                && let Ok(Some(stored)) = read_own(&path, key)
                && stored_rv(&stored).is_some_and(|s| rv_newer(&s, rv))
            {
                return Ok(false);
            }
            if let Ok(rv) = rv.parse::<u64>() {
                self.bury(key, rv.saturating_sub(1), rv);
                buried = true;
            }
        }
        // A tombstone alone is a change too: a list staged meanwhile must heed it.
        self.moved_collection(&key.collection);
        let bucket = Bucket::Collection(kind_dirs_below_root(&key.collection).1);
        let removed = real && self.remove_indexed(at, &path, &bucket)?;
        if removed || buried {
            self.changed(Some(at));
        }
        if removed {
            sync_dir(dir)?;
        }
        Ok(removed)
    }

    /// Removes the object file at `path` (path hash `at`, weighed in `bucket`) and its index
    /// entry; `false` if there was none.
    fn remove_indexed(&self, at: u64, path: &Path, bucket: &Bucket) -> Result<bool, StoreError> {
        self.index().forget(at);
        let old = file_len(path);
        match std::fs::remove_file(path) {
            Ok(()) => {
                self.weigh(bucket, old, None);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(StoreOp::Remove, path)(e)),
        }
    }

    /// Numbers a change to the object at path hash `at` (`None`: to more than one) and
    /// notes it (`recent.rs`).
    fn changed(&self, at: Option<u64>) {
        let seq = self.changes.fetch_add(1, Ordering::Relaxed) + 1;
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .note(seq, at);
    }

    /// Removes a whole collection at once (the cloud answered a list with 404).
    ///
    /// The kind directory is renamed into the staging directory, which readers never
    /// look at, and removed from there; `false` if it was not cached.
    pub(crate) fn delete_collection(&self, c: &CollectionKey) -> Result<bool, StoreError> {
        check_collection(c)?;
        let (above, kind_dir) = self.kind_dirs(c);
        if !all_real_dirs(&above)? {
            return Ok(false);
        }
        let parent_dir = parent_of(&kind_dir).to_owned();
        match std::fs::symlink_metadata(&kind_dir) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(StoreOp::Stat, &kind_dir)(e)),
        }
        let trash = self.staging.join(format!("d.{}", next_id()));
        self.moved_collection(c);
        // Its entries go (the disk answers until puts refill them); the others' stay.
        self.forget_kind(&kind_dirs_below_root(c).1, &kind_dir);
        std::fs::rename(&kind_dir, &trash).map_err(io_err(StoreOp::Rename, &trash))?;
        // Out of sight at once; the staging directory holds it only until the removal below.
        self.drop_row(c);
        self.changed(None);
        sync_dir(&parent_dir)?;
        if let Err(e) = std::fs::remove_dir_all(&trash) {
            // Invisible already; the next start removes what is left.
            log::warn!("cache: cannot remove {}: {e}", trash.display());
        }
        Ok(true)
    }
    /// A cached non-resource document by its file name (see
    /// [`non_resource_file_name`](super::key::non_resource_file_name)).
    pub(crate) fn get_non_resource(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_segment("non-resource name", name)?;
        let bytes = read_object(&self.root.join(name))?;
        let mut index = self.index();
        let at = index.path_hash(name);
        // A document is no collection's: what the index forgets moves no generation.
        let _ = match &bytes {
            Some(bytes) => index.check_read(at, bytes),
            None => index.forget(at),
        };
        Ok(bytes)
    }

    /// Stores a non-resource document; [`PutOutcome::Identical`] if unchanged.
    pub(crate) fn put_non_resource(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<PutOutcome, StoreError> {
        check_segment("non-resource name", name)?;
        let (at, content, known) = {
            let index = self.index();
            let at = index.path_hash(name);
            let content = index.content_hash(bytes);
            // No resourceVersion: only the bytes can make it unchanged.
            (at, content, index.judge(at, content, None))
        };
        if let Known::Unchanged(outcome) = known {
            return Ok(outcome);
        }
        let target = self.root.join(name);
        if known == Known::Unknown && read_object(&target)?.as_deref() == Some(bytes) {
            self.index().record(at, entry_with(bytes, content));
            return Ok(PutOutcome::Identical);
        }
        self.write_indexed(at, content, (&[], &target), bytes, &Bucket::Document)?;
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }
    /// The directories from the root down to where the object's file lives.
    fn object_dirs(&self, key: &ObjectKey) -> Vec<PathBuf> {
        let (mut dirs, kind) = self.kind_dirs(&key.collection);
        let in_kind = key.namespace.as_ref().map(|ns| kind.join(ns));
        dirs.push(kind);
        dirs.extend(in_kind);
        dirs
    }

    /// The directories from the root down to the kind's: (those above it, the kind's), as
    /// [`kind_dirs_below_root`] names them.
    pub(super) fn kind_dirs(&self, c: &CollectionKey) -> (Vec<PathBuf>, PathBuf) {
        let (above, kind) = kind_dirs_below_root(c);
        let above = above.iter().map(|dir| self.root.join(dir)).collect();
        (above, self.root.join(kind))
    }

    /// The kind directory if the collection is cached (it and every directory above it
    /// below the root are real directories, not symlinks).
    fn collection_dir(&self, c: &CollectionKey) -> Result<Option<PathBuf>, StoreError> {
        check_collection(c)?;
        let (mut dirs, kind) = self.kind_dirs(c);
        dirs.push(kind);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        Ok(dirs.pop())
    }

    /// Makes `dir` (0700) unless it exists, and makes its entry durable.
    fn ensure_dir(&self, dir: &Path) -> Result<(), StoreError> {
        if make_dir(dir)? {
            sync_dir(parent_of(dir))?;
        }
        Ok(())
    }

    /// Writes `bytes` to `target` durably and atomically through a staged file.
    fn write_file(&self, target: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let temp = self.staging.join(format!("p.{}", next_id()));
        write_new_file(&temp, bytes, true)?;
        if let Err(e) = std::fs::rename(&temp, target) {
            remove_quietly(&temp);
            return Err(io_err(StoreOp::Rename, target)(e));
        }
        sync_dir(parent_of(target))
    }
}

/// The file at `path`, `key`'s, as a put, a delete or a version reads it: `None` when it is
/// missing or fails the object check (a ghost naming another object, a leftover that is no
/// object). What the hub would not serve as `key` decides nothing about it; a put replaces
/// it. Not counted as refused: only what is served is.
fn read_own(path: &Path, key: &ObjectKey) -> Result<Option<Vec<u8>>, StoreError> {
    let bytes = read_object(path)?;
    Ok(bytes.filter(|bytes| check::check_object(bytes, &check::Expect::for_key(key)).is_ok()))
}

/// `Some` outcome when a put must not write: same bytes, or a newer stored version. A
/// stored file without a readable resourceVersion (corrupt, say) is never newer.
fn unchanged(existing: Option<&[u8]>, bytes: &[u8], rv: Option<&str>) -> Option<PutOutcome> {
    let existing = existing?;
    if existing == bytes {
        return Some(PutOutcome::Identical);
    }
    let stored = stored_rv(existing)?;
    rv_newer(&stored, rv?).then_some(PutOutcome::Stale)
}

/// `metadata.resourceVersion` of a stored object, borrowed unless it holds escapes.
fn stored_rv(bytes: &[u8]) -> Option<Cow<'_, str>> {
    ObjectHead::parse(bytes)?.metadata?.resource_version
}

/// The directories from the component's down to the kind's, as paths below the root (the
/// journal's names): (those above the kind's: the component's, the view's if it has one
/// ([`View::dir`](super::key::View::dir)); the kind's).
pub(super) fn kind_dirs_below_root(c: &CollectionKey) -> (Vec<String>, String) {
    let mut above = vec![c.component.as_str().to_owned()];
    if let Some(view) = c.view.dir() {
        above.push(format!("{}/{view}", c.component));
    }
    (above, format!("{}/{}", c.component, c.dir_name()))
}

fn check_segment(field: &'static str, value: &str) -> Result<(), StoreError> {
    if is_safe_segment(value) {
        Ok(())
    } else {
        Err(StoreError::UnsafeKey {
            field,
            value: value.to_owned(),
        })
    }
}

fn check_collection(c: &CollectionKey) -> Result<(), StoreError> {
    unsafe_key(c.unsafe_field())
}

fn check_key(key: &ObjectKey) -> Result<(), StoreError> {
    unsafe_key(key.unsafe_field())
}

fn unsafe_key(found: Option<(&'static str, &str)>) -> Result<(), StoreError> {
    match found {
        None => Ok(()),
        Some((field, value)) => Err(StoreError::UnsafeKey {
            field,
            value: value.to_owned(),
        }),
    }
}
