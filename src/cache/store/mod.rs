//! The on-disk cache: one JSON file per object in YurtHub's layout, written crash-safely.
//!
//! Layout: `<root>/<component>/<resource>.<version>.<group>/[<namespace>/]<name>`, files
//! 0600, directories 0700; non-resource documents directly in the root; TokenRequest answers
//! in `<root>/<component>/tokens/<namespace>/<service account>/<digest>` (a name without a
//! dot, so never a kind directory). The store knows
//! paths, bytes and `metadata.resourceVersion`, nothing else: it does not decode objects,
//! evaluate selectors (a replacement asks the caller through `in_scope`), keep anything in
//! memory between calls but the tombstones of recent deletions, or lock against a second
//! process on the same root.
//!
//! Concurrency: one writer (the cache writer thread) and any number of readers. Every file
//! appears by `rename`, so a reader sees an object whole, old or new, and needs no lock.
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
//! # Replacements (list answers)
//!
//! [`Replace::put`] writes each object that differs from the stored one to
//! `.staging/r.<id>.<seq>` without an fsync. [`Replace::commit`] then:
//!
//! 1. walks the stored objects of the scope in (namespace, name) order, merging with the
//!    staged names sorted the same way, and writes `.staging/j.<id>`: the directories to
//!    make, the renames and the deletes;
//! 2. `syncfs` once on the cache filesystem (staged objects and journal are durable), then
//!    fsyncs the journal and renames it to `<root>/.journal.<id>`, and fsyncs the root:
//!    this rename is the commit point;
//! 3. applies the journal, fsyncs every directory it touched, removes the journal and
//!    fsyncs the root again (so a stale journal can never be replayed over later writes).
//!
//! When nothing differs, no journal is written and nothing is synced: a relist of an
//! unchanged collection costs reads only.
//!
//! Journal format, UTF-8 text, one operation a line, fields separated by a tab (shown
//! as ` ⇥ `; no key segment can hold one), paths relative to the root:
//!
//! ```text
//! tinyhub-journal 1
//! mkdir ⇥ kubelet
//! mkdir ⇥ kubelet/pods.v1.core
//! mkdir ⇥ kubelet/pods.v1.core/default
//! rename ⇥ r.7.0 ⇥ kubelet/pods.v1.core/default/web-0
//! delete ⇥ kubelet/pods.v1.core/default/web-1
//! end ⇥ 5
//! ```
//!
//! `end` carries the number of operation lines; every `mkdir` comes first. Applying is
//! idempotent: a directory that exists is kept, a rename whose source is gone was done
//! before, a delete of a missing file is done.
//!
//! # Recovery ([`Store::open`])
//!
//! Reads the root directory only for `.journal.*`: a complete journal (magic line, valid
//! operations, matching `end`) is rolled forward, anything else is removed (rolled back:
//! nothing was applied before the journal became complete and visible). Then everything
//! in `.staging` is removed, and so is every component's event directory (older versions
//! cached events). The kind directories are never walked. A crash before the
//! journal's rename leaves the collection fully old, after it fully new once recovered.
//! Concurrent readers may see a mixture during the milliseconds a journal is being
//! applied; each object is still whole.
//!
//! # What a failure leaves
//!
//! A failed write (ENOSPC, EACCES, EIO) returns a [`StoreError`] naming the path and the
//! operation, leaves the stored file as it was and removes its temporary file. A failed
//! replacement removes its staged files. If a rename or delete fails while a journal is
//! being applied, the rest is still applied, the journal is removed and the first error
//! is returned: each object is then old or new, but the collection may be mixed.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::key::{CollectionKey, ObjectKey, TokenKey, is_safe_segment, rv_newer};
use super::object::ObjectHead;

/// Where everything not yet visible is written.
const STAGING: &str = ".staging";
/// Name prefix of a complete journal in the root; a sequence number follows.
const JOURNAL_PREFIX: &str = ".journal.";
/// First line of every journal.
const JOURNAL_MAGIC: &str = "tinyhub-journal 1";
/// Mode of object files: the cache holds secrets.
const FILE_MODE: u32 = 0o600;
/// Mode of cache directories.
const DIR_MODE: u32 = 0o700;

/// Source of unique temporary names within this process. `usize`, not `u64`: 64-bit
/// atomics are missing on some 32-bit router CPUs.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// Deletions the store remembers; past it the oldest is forgotten first. A few hundred bytes
/// each: deletions are rare on a node, and a replay reaches back minutes at most.
const TOMBSTONES: usize = 1024;

/// Objects the store removed, each with the highest resourceVersion known to be stale.
///
/// Responses interleave in the writer, and a client resuming its watch from an old
/// resourceVersion replays versions the cache has already replaced. While the file is there
/// the store refuses them as older; once a DELETED or a list removed it, nothing on disk
/// says they are old, and the replay would write an older version back (one that stays if
/// the hub is killed before the replay reaches the deletion). A list staged before the
/// deletion would do the same at its commit.
///
/// A list taken at or after the moment the object was known gone is different: it is the
/// cloud's whole truth at its resourceVersion, so an object it returns exists, and a
/// tombstone that says otherwise is wrong (made by a DELETED that only meant "left this
/// watch's selector", or by a replacement whose scope was not the cloud's). Such a list is
/// never refused (see [`Tombstone`]).
#[derive(Debug, Default)]
struct Tombstones {
    /// `Arc`, not `Rc`: the store is shared with reader threads, so this must be `Send`.
    stale_up_to: HashMap<Arc<ObjectKey>, Tombstone>,
    /// Oldest first, for forgetting.
    order: VecDeque<Arc<ObjectKey>>,
}

/// What one removal says of an object's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tombstone {
    /// Versions up to this one are stale: watch events, gets and lists taken before
    /// `gone_at` may not write them back.
    up_to: u64,
    /// The resourceVersion at which the cloud said the object was gone: the DELETED event's,
    /// or that of the list that left it out. A list at or after it saw the cloud after the
    /// removal; if it returns a version up to `up_to` (which exists from that version up to
    /// the list's, so also at `gone_at`), the removal was not the cloud's, and the list wins.
    gone_at: u64,
}

impl Tombstones {
    /// Versions of the object up to `rv` may no longer be written, unless by a list taken at
    /// or after `gone_at`.
    fn bury(&mut self, key: &ObjectKey, up_to: u64, gone_at: u64) {
        if let Some(t) = self.stale_up_to.get_mut(key) {
            t.up_to = t.up_to.max(up_to);
            t.gone_at = t.gone_at.max(gone_at);
            return;
        }
        if self.order.len() >= TOMBSTONES
            && let Some(oldest) = self.order.pop_front()
        {
            self.stale_up_to.remove(&oldest);
        }
        let key = Arc::new(key.clone());
        self.order.push_back(Arc::clone(&key));
        self.stale_up_to.insert(key, Tombstone { up_to, gone_at });
    }

    /// Whether version `rv` of `key` is at or below one the store removed. An unreadable
    /// version never counts as stale, as in [`rv_newer`]. `list_rv` is the resourceVersion
    /// of the list answer that returns `rv` (None for anything else): a list taken at or
    /// after the removal is never refused.
    fn buries(&self, key: &ObjectKey, rv: Option<&str>, list_rv: Option<u64>) -> bool {
        if self.stale_up_to.is_empty() {
            return false;
        }
        let Some(rv) = rv.and_then(|rv| rv.parse::<u64>().ok()) else {
            return false;
        };
        self.stale_up_to
            .get(key)
            .is_some_and(|t| rv <= t.up_to && list_rv.is_none_or(|list_rv| list_rv < t.gone_at))
    }
}

fn next_id() -> usize {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// The filesystem operation a [`StoreError::Io`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOp {
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
    pub fn as_str(self) -> &'static str {
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
pub enum StoreError {
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
    /// The fault-injection hook stopped a commit, as a crash would.
    #[cfg(test)]
    InjectedCrash,
}

impl StoreError {
    /// True when the filesystem is out of space (or the quota is used up).
    pub fn is_disk_full(&self) -> bool {
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
            #[cfg(test)]
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

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
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
pub struct StoredObject {
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The file's bytes, as stored (not necessarily valid JSON).
    pub bytes: Vec<u8>,
}

/// What [`Store::open`] found and repaired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Complete journals applied (replacements finished).
    pub rolled_forward: usize,
    /// Incomplete or invalid journals discarded (replacements undone).
    pub rolled_back: usize,
    /// Entries removed from the staging directory.
    pub removed_temp_files: usize,
    /// Event collections an older version cached, removed (events are no longer cached).
    pub removed_event_dirs: usize,
}

/// What a committed replacement did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Objects written.
    pub written: usize,
    /// Objects already stored with the same bytes.
    pub identical: usize,
    /// Objects not written because the stored one is newer, or a deletion made them stale.
    pub stale: usize,
    /// Stored objects in scope but absent from the answer, removed.
    pub deleted: usize,
    /// Stored objects absent from the answer but newer than it, kept.
    pub kept_newer: usize,
    /// Objects of the answer a watch deleted while the answer was staged, not brought back.
    pub deleted_meanwhile: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// The cache directory. Cheap to share: `Send + Sync`, every method takes `&self`.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    staging: PathBuf,
    /// The root, open: `syncfs` needs a descriptor on the cache filesystem.
    root_dir: File,
    /// Bumped by every change made outside a replacement, so a commit knows whether its
    /// staging-time comparisons may be out of date.
    changes: AtomicUsize,
    /// Recently removed objects. Locked only by the one writer thread: never contended.
    tombstones: Mutex<Tombstones>,
}

impl Store {
    /// Opens the cache at `root`, creating it (0700) if missing, and recovers from a crash.
    pub fn open(root: &Path) -> Result<(Store, RecoveryReport), StoreError> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(root)
            .map_err(io_err(StoreOp::CreateDir, root))?;
        let root_dir = File::open(root).map_err(io_err(StoreOp::Read, root))?;
        let store = Store {
            root: root.to_owned(),
            staging: root.join(STAGING),
            root_dir,
            changes: AtomicUsize::new(0),
            tombstones: Mutex::new(Tombstones::default()),
        };
        let report = store.recover()?;
        Ok((store, report))
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The stored bytes of one object; `None` if it is not cached.
    pub fn get(&self, key: &ObjectKey) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let dirs = self.object_dirs(key);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        read_object(&dirs[dirs.len() - 1].join(&key.name))
    }

    /// Whether this collection was ever cached (a list answered empty counts).
    pub fn has_collection(&self, c: &CollectionKey) -> bool {
        matches!(self.collection_dir(c), Ok(Some(_)))
    }

    /// The objects of a collection, sorted by (namespace, name), read one file per `next()`.
    ///
    /// `None` when the collection is not cached. `namespace` limits the listing to one
    /// namespace directory; without it, cluster-scoped objects come first (namespace
    /// `""`), then every namespace. `after` = (namespace or `""`, name) resumes strictly
    /// after that position. Names are read one namespace directory at a time.
    pub fn list(
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
        Ok(Some(ObjectIter { cursor }))
    }

    /// Creates or updates one object.
    ///
    /// Nothing is written when the stored bytes are the same ([`PutOutcome::Identical`])
    /// or the stored resourceVersion is newer than `rv`, or `rv` is at or below one this
    /// store removed ([`PutOutcome::Stale`]). A stored file that is not valid JSON counts as
    /// older and is replaced.
    pub fn put(
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
        let dirs = self.object_dirs(key);
        let target = dirs[dirs.len() - 1].join(&key.name);
        let existing = if all_real_dirs(&dirs)? {
            read_object(&target)?
        } else {
            None
        };
        if let Some(outcome) = unchanged(existing.as_deref(), bytes, rv) {
            return Ok(outcome);
        }
        for dir in &dirs {
            self.ensure_dir(dir)?;
        }
        self.write_file(&target, bytes)?;
        self.changes.fetch_add(1, Ordering::Relaxed);
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }

    /// Removes one object; `false` if it was not cached.
    ///
    /// `rv` is the deletion's resourceVersion (a watch's DELETED event), `None` when unknown
    /// (the cloud answered 404). A stored object newer than `rv` stays (a late DELETED from
    /// an older stream; `false`); otherwise every version before `rv` is stale from now on,
    /// stored or not, and [`Store::put`] and replacements refuse them.
    pub fn delete(&self, key: &ObjectKey, rv: Option<&str>) -> Result<bool, StoreError> {
        check_key(key)?;
        let dirs = self.object_dirs(key);
        let real = all_real_dirs(&dirs)?;
        let dir = &dirs[dirs.len() - 1];
        let path = dir.join(&key.name);
        if let Some(rv) = rv {
            // Unreadable: not known to be newer, so the deletion goes ahead.
            if real
                && let Ok(Some(stored)) = read_object(&path)
                && stored_rv(&stored).is_some_and(|s| rv_newer(&s, rv))
            {
                return Ok(false);
            }
            if let Ok(rv) = rv.parse::<u64>() {
                self.bury(key, rv.saturating_sub(1), rv);
            }
        }
        if !real {
            return Ok(false);
        }
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(StoreOp::Remove, &path)(e)),
        }
        self.changes.fetch_add(1, Ordering::Relaxed);
        sync_dir(dir)?;
        Ok(true)
    }

    /// Removes a whole collection at once (the cloud answered a list with 404).
    ///
    /// The kind directory is renamed into the staging directory, which readers never
    /// look at, and removed from there; `false` if it was not cached.
    pub fn delete_collection(&self, c: &CollectionKey) -> Result<bool, StoreError> {
        check_collection(c)?;
        let component_dir = self.root.join(&c.component);
        if !real_dir(&component_dir)? {
            return Ok(false);
        }
        let kind_dir = component_dir.join(c.dir_name());
        match fs::symlink_metadata(&kind_dir) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(StoreOp::Stat, &kind_dir)(e)),
        }
        let trash = self.staging.join(format!("d.{}", next_id()));
        fs::rename(&kind_dir, &trash).map_err(io_err(StoreOp::Rename, &trash))?;
        self.changes.fetch_add(1, Ordering::Relaxed);
        sync_dir(&component_dir)?;
        if let Err(e) = fs::remove_dir_all(&trash) {
            // Invisible already; the next start removes what is left.
            log::warn!("cache: cannot remove {}: {e}", trash.display());
        }
        Ok(true)
    }

    /// Starts replacing what this collection holds in `namespace` (every namespace and
    /// the cluster-scoped objects when `None`) with a list answer.
    pub fn begin_replace(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
    ) -> Result<Replace<'_>, StoreError> {
        check_collection(c)?;
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        Ok(Replace {
            store: self,
            probe: ObjectKey {
                collection: c.clone(),
                namespace: None,
                name: String::new(),
            },
            collection: c.clone(),
            namespace: namespace.map(str::to_owned),
            id: next_id(),
            keys: String::new(),
            entries: Vec::new(),
            report: ReplaceReport::default(),
            changes_at_begin: self.changes.load(Ordering::Relaxed),
            list_rv: None,
            armed: true,
            collection_checked: false,
            namespace_checked: None,
            #[cfg(test)]
            crash_at: None,
        })
    }

    /// A cached non-resource document by its file name (see
    /// [`non_resource_file_name`](super::key::non_resource_file_name)).
    pub fn get_non_resource(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_segment("non-resource name", name)?;
        read_object(&self.root.join(name))
    }

    /// Stores a non-resource document; [`PutOutcome::Identical`] if unchanged.
    pub fn put_non_resource(&self, name: &str, bytes: &[u8]) -> Result<PutOutcome, StoreError> {
        check_segment("non-resource name", name)?;
        let target = self.root.join(name);
        if read_object(&target)?.as_deref() == Some(bytes) {
            return Ok(PutOutcome::Identical);
        }
        self.write_file(&target, bytes)?;
        self.changes.fetch_add(1, Ordering::Relaxed);
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }

    /// Versions of `key` up to `up_to` may no longer be written, but by a list taken at or
    /// after `gone_at`.
    fn bury(&self, key: &ObjectKey, up_to: u64, gone_at: u64) {
        self.tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bury(key, up_to, gone_at);
    }

    /// Whether version `rv` of `key` (not from a list) is at or below one this store removed.
    fn buries(&self, key: &ObjectKey, rv: Option<&str>) -> bool {
        self.tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buries(key, rv, None)
    }

    /// The directories from the root down to where the object's file lives.
    fn object_dirs(&self, key: &ObjectKey) -> Vec<PathBuf> {
        let component = self.root.join(&key.collection.component);
        let kind = component.join(key.collection.dir_name());
        let mut dirs = vec![component, kind];
        if let Some(ns) = &key.namespace {
            dirs.push(dirs[1].join(ns));
        }
        dirs
    }

    /// The kind directory if the collection is cached (component and kind are real
    /// directories, not symlinks).
    fn collection_dir(&self, c: &CollectionKey) -> Result<Option<PathBuf>, StoreError> {
        check_collection(c)?;
        let component = self.root.join(&c.component);
        if !real_dir(&component)? {
            return Ok(None);
        }
        let kind = component.join(c.dir_name());
        Ok(real_dir(&kind)?.then_some(kind))
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
        if let Err(e) = fs::rename(&temp, target) {
            remove_quietly(&temp);
            return Err(io_err(StoreOp::Rename, target)(e));
        }
        sync_dir(parent_of(target))
    }

    /// Finishes interrupted replacements and clears the staging directory.
    fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        let mut journals = Vec::new();
        let entries = fs::read_dir(&self.root).map_err(io_err(StoreOp::ReadDir, &self.root))?;
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.root))?;
            let name = entry.file_name();
            if let Some(seq) = name.to_str().and_then(|n| n.strip_prefix(JOURNAL_PREFIX)) {
                // Journals are applied in the order they were committed.
                journals.push((seq.parse::<u64>().unwrap_or(u64::MAX), entry.path()));
            }
        }
        journals.sort();
        for (_, journal) in &journals {
            if journal_is_complete(journal)? {
                let applied = self.apply_journal(journal, &mut |_| Ok(()))?;
                if let Some(e) = applied.first_error {
                    // Kept: the next start tries again, and applying twice is harmless.
                    return Err(e);
                }
                for dir in &applied.touched {
                    sync_dir(dir)?;
                }
                log::info!("cache: finished the replacement in {}", journal.display());
                report.rolled_forward += 1;
            } else {
                log::warn!("cache: discarding incomplete journal {}", journal.display());
                report.rolled_back += 1;
            }
            fs::remove_file(journal).map_err(io_err(StoreOp::Remove, journal))?;
        }
        if !journals.is_empty() {
            sync_dir(&self.root)?;
        }
        self.ensure_dir(&self.staging)?;
        let entries =
            fs::read_dir(&self.staging).map_err(io_err(StoreOp::ReadDir, &self.staging))?;
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.staging))?;
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let removed = if is_dir {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(io_err(StoreOp::Remove, &path))?;
            report.removed_temp_files += 1;
        }
        // Housekeeping, not recovery: a failure leaves the files, and the cache usable.
        report.removed_event_dirs = self.remove_event_dirs().unwrap_or_else(|e| {
            log::warn!("cache: cannot remove the cached events of an older version: {e}");
            0
        });
        if report != RecoveryReport::default() {
            log::info!(
                "cache: recovered {}: replacements finished {}, undone {}; {} leftovers removed; {} cached event collections removed",
                self.root.display(),
                report.rolled_forward,
                report.rolled_back,
                report.removed_temp_files,
                report.removed_event_dirs
            );
        }
        Ok(report)
    }

    /// Applies a complete journal. Directories come first; if one cannot be made, those
    /// made so far are removed again and nothing else is done. A failed rename or
    /// delete does not stop the others; the first such error is returned in [`Applied`].
    fn apply_journal(
        &self,
        journal: &Path,
        checkpoint: &mut dyn FnMut(Step) -> Result<(), StoreError>,
    ) -> Result<Applied, StoreError> {
        let file = open_no_follow(journal).map_err(io_err(StoreOp::Read, journal))?;
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        let mut applied = Applied::default();
        let mut created: Vec<PathBuf> = Vec::new();
        let mut ops = 0;
        let mut dirs_made = false;
        loop {
            line.clear();
            if reader
                .read_line(&mut line)
                .map_err(io_err(StoreOp::Read, journal))?
                == 0
            {
                break;
            }
            let text = line.strip_suffix('\n').unwrap_or(&line);
            if text.starts_with("end\t") {
                break;
            }
            // The magic line, and nothing else: the journal was checked before.
            let Some(op) = parse_op(text) else { continue };
            if let JournalOp::Mkdir(rel) = op {
                let dir = self.root.join(rel);
                match make_dir(&dir) {
                    Ok(true) => {
                        applied.touched.insert(parent_of(&dir).to_owned());
                        created.push(dir);
                    }
                    Ok(false) => {}
                    Err(e) => {
                        for dir in created.iter().rev() {
                            let _ = fs::remove_dir(dir);
                        }
                        return Err(e);
                    }
                }
                continue;
            }
            if !dirs_made {
                dirs_made = true;
                checkpoint(Step::DirsMade)?;
            }
            if let Err(e) = self.apply_op(op, &mut applied.touched) {
                log::warn!("cache: {e}");
                applied.first_error.get_or_insert(e);
            }
            checkpoint(Step::Applied(ops))?;
            ops += 1;
        }
        Ok(applied)
    }

    /// Applies one rename or delete, idempotently.
    fn apply_op(
        &self,
        op: JournalOp<'_>,
        touched: &mut BTreeSet<PathBuf>,
    ) -> Result<(), StoreError> {
        match op {
            JournalOp::Mkdir(_) => Ok(()),
            JournalOp::Rename(temp, rel) => {
                let from = self.staging.join(temp);
                let to = self.root.join(rel);
                match fs::rename(&from, &to) {
                    Ok(()) => {}
                    // The source is gone: renamed by an earlier run of this journal.
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !exists_no_follow(&from) => {
                        return Ok(());
                    }
                    Err(e) => return Err(io_err(StoreOp::Rename, &to)(e)),
                }
                touched.insert(parent_of(&to).to_owned());
                Ok(())
            }
            JournalOp::Delete(rel) => {
                let path = self.root.join(rel);
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(io_err(StoreOp::Remove, &path)(e)),
                }
                touched.insert(parent_of(&path).to_owned());
                Ok(())
            }
        }
    }
}

/// Token answers and the removal of event collections (see `tokens.rs`).
impl Store {
    /// A cached TokenRequest answer; `None` if there is none.
    pub fn get_token(&self, key: &TokenKey) -> Result<Option<Vec<u8>>, StoreError> {
        unsafe_key(key.unsafe_field())?;
        let dirs = self.token_dirs(key);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        read_object(&dirs[dirs.len() - 1].join(&key.digest))
    }

    /// Stores a TokenRequest answer (0600, like every file here), replacing the one before,
    /// and removes the service account's answers not renewed for [`TOKEN_STALE`].
    pub fn put_token(&self, key: &TokenKey, bytes: &[u8]) -> Result<PutOutcome, StoreError> {
        unsafe_key(key.unsafe_field())?;
        let dirs = self.token_dirs(key);
        let account = &dirs[dirs.len() - 1];
        let target = account.join(&key.digest);
        if all_real_dirs(&dirs)? && read_object(&target)?.as_deref() == Some(bytes) {
            return Ok(PutOutcome::Identical);
        }
        for dir in &dirs {
            self.ensure_dir(dir)?;
        }
        self.write_file(&target, bytes)?;
        self.prune_tokens(account, &key.digest);
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }

    /// Removes the answers in a service account's directory, but `keep`, that were last
    /// written more than [`TOKEN_STALE`] ago. Each pod's tokens are kept apart (the key
    /// holds the pod), so without this every pod that ever ran would leave a file.
    /// Best effort: what cannot be removed now is tried again at the next put.
    fn prune_tokens(&self, account: &Path, keep: &str) {
        let Ok(entries) = fs::read_dir(account) else {
            return;
        };
        let now = SystemTime::now();
        let mut removed = false;
        for entry in entries.flatten() {
            let stale = entry.file_name().to_str() != Some(keep)
                && entry.file_type().is_ok_and(|t| t.is_file())
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|written| now.duration_since(written).ok())
                    .is_some_and(|age| age > TOKEN_STALE);
            removed |= stale && fs::remove_file(entry.path()).is_ok();
        }
        if removed && let Err(e) = sync_dir(account) {
            log::debug!("{e}");
        }
    }

    /// `<component>/tokens/<namespace>/<name>`, from the root down.
    fn token_dirs(&self, key: &TokenKey) -> Vec<PathBuf> {
        let component = self.root.join(&key.component);
        let tokens = component.join(TokenKey::DIR);
        let namespace = tokens.join(&key.namespace);
        let account = namespace.join(&key.name);
        vec![component, tokens, namespace, account]
    }

    /// Removes every component's `events.<version>.core` and `events.<version>.events.k8s.io`
    /// directory: older versions cached the answers to event writes, a file and an fsync
    /// per event that nothing ever read back or removed. Reads the root and each component
    /// directory only. Returns how many were removed.
    fn remove_event_dirs(&self) -> Result<usize, StoreError> {
        let mut removed = 0;
        let entries = fs::read_dir(&self.root).map_err(io_err(StoreOp::ReadDir, &self.root))?;
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.root))?;
            let component = entry.path();
            let is_component = entry.file_type().is_ok_and(|t| t.is_dir())
                && entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| !n.starts_with('.'));
            if !is_component {
                continue;
            }
            let kinds = fs::read_dir(&component).map_err(io_err(StoreOp::ReadDir, &component))?;
            let mut touched = false;
            for kind in kinds {
                let kind = kind.map_err(io_err(StoreOp::ReadDir, &component))?;
                let is_events = kind.file_name().to_str().is_some_and(is_event_dir_name)
                    && kind.file_type().is_ok_and(|t| t.is_dir());
                if !is_events {
                    continue;
                }
                // Out of sight first, like a pruned collection: a crash mid-removal leaves
                // a staging leftover, not a half-empty kind.
                let trash = self.staging.join(format!("d.{}", next_id()));
                fs::rename(kind.path(), &trash).map_err(io_err(StoreOp::Rename, &trash))?;
                if let Err(e) = fs::remove_dir_all(&trash) {
                    // Invisible already; the next start removes what is left.
                    log::warn!("cache: cannot remove {}: {e}", trash.display());
                }
                touched = true;
                removed += 1;
            }
            if touched {
                sync_dir(&component)?;
            }
        }
        if removed > 0 {
            log::info!(
                "cache: removed {removed} cached event collection{} (events are no longer cached)",
                if removed == 1 { "" } else { "s" }
            );
        }
        Ok(removed)
    }
}

/// How long a TokenRequest answer may go without being renewed before it is removed: kubelet
/// renews a live pod's token at least daily (within 80 % of its life, and after 24 h at the
/// latest), so one this old belongs to a pod that is gone.
pub const TOKEN_STALE: Duration = Duration::from_secs(7 * 24 * 3600);

/// `events.<version>.core` or `events.<version>.events.k8s.io`: a kind directory of events.
fn is_event_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("events.") else {
        return false;
    };
    rest.split_once('.').is_some_and(|(version, group)| {
        !version.is_empty() && matches!(group, "core" | "events.k8s.io")
    })
}

/// The objects of one collection, read lazily; see [`Store::list`].
///
/// A file that vanishes between listing its directory and reading it is skipped, and so
/// are symlinks, dot-names and anything that is not a regular file.
#[derive(Debug)]
pub struct ObjectIter {
    cursor: NameCursor,
}

impl Iterator for ObjectIter {
    type Item = Result<StoredObject, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (namespace, name) = match self.cursor.next_name()? {
                Ok(found) => found,
                Err(e) => return Some(Err(e)),
            };
            match read_object(&self.cursor.path_of(namespace.as_deref(), &name)) {
                Ok(Some(bytes)) => {
                    return Some(Ok(StoredObject {
                        namespace,
                        name,
                        bytes,
                    }));
                }
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// A list answer being staged; see [`Store::begin_replace`].
///
/// Holds the answer's names, not its objects: their bytes in one string, plus 20 bytes an
/// object on a 32-bit target (40 on 64-bit).
pub struct Replace<'s> {
    store: &'s Store,
    /// A key of this collection whose namespace and name are overwritten for each tombstone
    /// lookup: once its buffers have grown, a lookup allocates nothing.
    probe: ObjectKey,
    collection: CollectionKey,
    namespace: Option<String>,
    id: usize,
    /// Every staged (namespace, name), concatenated; `entries` point into it.
    keys: String,
    entries: Vec<Staged>,
    report: ReplaceReport,
    changes_at_begin: usize,
    /// The answer's resourceVersion, once known (see [`Replace::set_list_rv`]).
    list_rv: Option<u64>,
    /// Whether dropping this must remove staged files.
    armed: bool,
    /// The component and kind directories were found to be real directories.
    collection_checked: bool,
    /// The last namespace directory found to be a real directory.
    namespace_checked: Option<String>,
    /// The fault-injection hook: stop the commit at this step, as a crash would.
    #[cfg(test)]
    crash_at: Option<Step>,
}

/// One object of the answer: where its key lies in `Replace::keys`, and its staged file.
#[derive(Debug, Clone, Copy)]
struct Staged {
    start: usize,
    namespace_len: usize,
    name_len: usize,
    /// The staged file's sequence number; `None` when nothing was written.
    temp: Option<usize>,
    /// A stored copy existed when this was staged: if it is gone by the commit, a watch
    /// deleted it meanwhile, and the (older) list must not bring it back.
    existed: bool,
}

impl Staged {
    /// (namespace or `""`, name): the order of listings and of the merge.
    fn key<'k>(&self, keys: &'k str) -> (&'k str, &'k str) {
        let split = self.start + self.namespace_len;
        (
            &keys[self.start..split],
            &keys[split..split + self.name_len],
        )
    }
}

impl Replace<'_> {
    /// The list answer's `metadata.resourceVersion`. Known before the items (the apiserver
    /// writes `metadata` first), it lets items that a tombstone wrongly refuses through:
    /// a list at or after a removal is the cloud's truth (see `Tombstone`). Items staged
    /// before it is known are judged without it.
    pub fn set_list_rv(&mut self, rv: Option<&str>) {
        self.list_rv = rv.and_then(|rv| rv.parse().ok());
    }

    /// Stage one object of the list answer (written to a temporary file now, not yet
    /// visible). Identical objects, and objects older than the stored ones, are not written.
    pub fn put(
        &mut self,
        namespace: Option<&str>,
        name: &str,
        bytes: &[u8],
        rv: Option<&str>,
    ) -> Result<PutOutcome, StoreError> {
        check_segment("name", name)?;
        if let Some(ns) = namespace {
            check_segment("namespace", ns)?;
        }
        if let Some(scope) = &self.namespace
            && namespace != Some(scope.as_str())
        {
            return Err(StoreError::OutsideScope {
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
                scope: scope.clone(),
            });
        }
        // Before reading the file: a buried version needs no disk access to be refused.
        let (existing, outcome) = if self.buried(namespace, name, rv) {
            (None, Some(PutOutcome::Stale))
        } else {
            let existing = self.read_stored(namespace, name)?;
            let outcome = unchanged(existing.as_deref(), bytes, rv);
            (existing, outcome)
        };
        let temp = match outcome {
            Some(_) => None,
            None => {
                let seq = self.entries.len();
                write_new_file(&self.temp_path(seq), bytes, false)?;
                Some(seq)
            }
        };
        let start = self.keys.len();
        self.keys.push_str(namespace.unwrap_or(""));
        self.keys.push_str(name);
        self.entries.push(Staged {
            start,
            namespace_len: namespace.map_or(0, str::len),
            name_len: name.len(),
            temp,
            existed: existing.is_some(),
        });
        Ok(match outcome {
            Some(PutOutcome::Identical) => {
                self.report.identical += 1;
                PutOutcome::Identical
            }
            Some(PutOutcome::Stale) => {
                self.report.stale += 1;
                PutOutcome::Stale
            }
            _ => {
                self.report.written += 1;
                self.report.bytes += bytes.len() as u64;
                PutOutcome::Written {
                    bytes: bytes.len() as u64,
                }
            }
        })
    }

    /// Make the answer visible all at once: every staged object replaces its file, and
    /// every cached object of this collection and namespace scope that was not in the
    /// answer and for which `in_scope(bytes)` is true (the caller checks the request's
    /// selectors) is deleted — unless its resourceVersion is newer than `list_rv` (it was
    /// created after the list was taken). Objects outside the scope stay. The kind (and
    /// namespace) directory exists afterwards even for an empty answer.
    ///
    /// Every version up to a deleted object's own is stale from then on (see
    /// [`Store::delete`]), also when the commit then fails: the answer left it out anyway.
    pub fn commit(
        mut self,
        in_scope: &mut dyn FnMut(&[u8]) -> bool,
        list_rv: Option<&str>,
    ) -> Result<ReplaceReport, StoreError> {
        let result = self.run_commit(in_scope, list_rv);
        // Success renamed every staged file into place: nothing is left to remove.
        if result.is_ok() {
            self.armed = false;
        }
        // A crash cleans nothing up; recovery has to.
        #[cfg(test)]
        if matches!(result, Err(StoreError::InjectedCrash)) {
            self.armed = false;
        }
        result
    }

    fn run_commit(
        &mut self,
        in_scope: &mut dyn FnMut(&[u8]) -> bool,
        list_rv: Option<&str>,
    ) -> Result<ReplaceReport, StoreError> {
        self.checkpoint(Step::Staged)?;
        self.set_list_rv(list_rv);
        let keys = &self.keys;
        self.entries.sort_by(|a, b| a.key(keys).cmp(&b.key(keys)));
        if self.store.changes.load(Ordering::Relaxed) != self.changes_at_begin {
            self.recheck()?;
        }
        let store = self.store;
        let keys = &self.keys;
        let component = self.collection.component.as_str();
        let kind_rel = format!("{component}/{}", self.collection.dir_name());
        let kind_dir = store.root.join(&kind_rel);
        let journal_temp = self.journal_temp_path();

        let mut journal = JournalWriter::new(&journal_temp);
        journal.mkdir(component.to_owned());
        journal.mkdir(kind_rel.clone());
        let mut last_namespace = self.namespace.as_deref();
        if let Some(ns) = last_namespace {
            journal.mkdir(format!("{kind_rel}/{ns}"));
        }
        for entry in self.entries.iter().filter(|e| e.temp.is_some()) {
            let (ns, _) = entry.key(keys);
            if !ns.is_empty() && last_namespace != Some(ns) {
                journal.mkdir(format!("{kind_rel}/{ns}"));
                last_namespace = Some(ns);
            }
        }

        // Merge the stored names with the answer's, both in (namespace, name) order.
        let id = self.id;
        let rename = |journal: &mut JournalWriter, entry: &Staged| match entry.temp {
            Some(seq) => {
                let (namespace, name) = entry.key(keys);
                let target = RelPath {
                    kind: &kind_rel,
                    namespace,
                    name,
                };
                journal.line(format_args!("rename\tr.{id}.{seq}\t{target}"))
            }
            None => Ok(()),
        };
        let mut next = 0;
        if real_dir(&store.root.join(component))? && real_dir(&kind_dir)? {
            let mut cursor = NameCursor::open(kind_dir.clone(), self.namespace.as_deref(), None)?;
            while let Some(found) = cursor.next_name() {
                let (namespace, name) = found?;
                let stored = (namespace.as_deref().unwrap_or(""), name.as_str());
                while let Some(entry) = self.entries.get(next).filter(|e| e.key(keys) < stored) {
                    rename(&mut journal, entry)?;
                    next += 1;
                }
                if self
                    .entries
                    .get(next)
                    .is_some_and(|e| e.key(keys) == stored)
                {
                    continue;
                }
                let Some(bytes) = read_object(&cursor.path_of(namespace.as_deref(), &name))? else {
                    continue;
                };
                if !in_scope(&bytes) {
                    continue;
                }
                let rv = stored_rv(&bytes);
                if let (Some(list_rv), Some(rv)) = (list_rv, rv.as_deref())
                    && rv_newer(rv, list_rv)
                {
                    self.report.kept_newer += 1;
                    continue;
                }
                let target = RelPath {
                    kind: &kind_rel,
                    namespace: stored.0,
                    name: stored.1,
                };
                journal.line(format_args!("delete\t{target}"))?;
                // What the list removes is older than the list: a replay must not bring it back,
                // nor a list older than this one.
                if let Some(rv) = rv.as_deref().and_then(|rv| rv.parse::<u64>().ok()) {
                    let key = ObjectKey {
                        collection: self.collection.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                    };
                    store.bury(&key, rv, self.list_rv.unwrap_or(rv));
                }
                self.report.deleted += 1;
            }
        }
        for entry in &self.entries[next..] {
            rename(&mut journal, entry)?;
        }

        let Some(journal_file) = journal.finish()? else {
            // Nothing to rename or delete: no journal, no sync; the collection must exist.
            store.ensure_dir(&store.root.join(component))?;
            store.ensure_dir(&kind_dir)?;
            if let Some(ns) = &self.namespace {
                store.ensure_dir(&kind_dir.join(ns))?;
            }
            return Ok(self.report);
        };
        self.checkpoint(Step::JournalWritten)?;
        sync_filesystem(&store.root_dir).map_err(io_err(StoreOp::Sync, &store.root))?;
        self.checkpoint(Step::Synced)?;
        journal_file
            .sync_all()
            .map_err(io_err(StoreOp::Sync, &journal_temp))?;
        drop(journal_file);
        let journal_path = store.root.join(format!("{JOURNAL_PREFIX}{id}"));
        fs::rename(&journal_temp, &journal_path).map_err(io_err(StoreOp::Rename, &journal_path))?;
        self.checkpoint(Step::JournalVisible)?;
        if let Err(e) = sync_dir(&store.root) {
            // Whether the journal would survive a crash is unknown: take it back, so the
            // replacement is fully undone rather than maybe replayed later.
            remove_quietly(&journal_path);
            return Err(e);
        }
        self.checkpoint(Step::JournalDurable)?;

        store.changes.fetch_add(1, Ordering::Relaxed);
        let mut first_error =
            match store.apply_journal(&journal_path, &mut |step| self.checkpoint(step)) {
                Ok(applied) => {
                    let mut first_error = applied.first_error;
                    for dir in &applied.touched {
                        if let Err(e) = sync_dir(dir) {
                            first_error.get_or_insert(e);
                        }
                    }
                    first_error
                }
                #[cfg(test)]
                Err(StoreError::InjectedCrash) => return Err(StoreError::InjectedCrash),
                // A directory could not be made (nothing applied), or the journal not read
                // back (some of it applied, each object whole): the journal goes either way.
                Err(e) => Some(e),
            };
        self.checkpoint(Step::DirsSynced)?;
        match fs::remove_file(&journal_path) {
            Ok(()) => {
                if let Err(e) = sync_dir(&store.root) {
                    first_error.get_or_insert(e);
                }
            }
            Err(e) => {
                first_error.get_or_insert(io_err(StoreOp::Remove, &journal_path)(e));
            }
        }
        self.checkpoint(Step::JournalRemoved)?;
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.report),
        }
    }

    /// Compares again every staged object with its stored file and the tombstones, because
    /// something else changed the cache since staging began (a watch event may have stored
    /// a newer version, or deleted the object). Rare, so it reads the staged file back
    /// instead of keeping versions in memory.
    fn recheck(&mut self) -> Result<(), StoreError> {
        for i in 0..self.entries.len() {
            let entry = self.entries[i];
            let Some(seq) = entry.temp else { continue };
            let (namespace, name) = entry.key(&self.keys);
            let (namespace, name) = (
                (!namespace.is_empty()).then(|| namespace.to_owned()),
                name.to_owned(),
            );
            let temp = self.temp_path(seq);
            let staged = read_object(&temp)?.unwrap_or_default();
            let staged_rv = stored_rv(&staged);
            let outcome = match self.read_stored(namespace.as_deref(), &name)? {
                // Deleted meanwhile: the (older) list must not bring it back.
                None if entry.existed => None,
                // Also when the list staged it before any file existed: a watch may have
                // stored and then deleted it since.
                None if self.buried(namespace.as_deref(), &name, staged_rv.as_deref()) => {
                    Some(PutOutcome::Stale)
                }
                None => continue,
                Some(_) if self.buried(namespace.as_deref(), &name, staged_rv.as_deref()) => {
                    Some(PutOutcome::Stale)
                }
                Some(stored) => match unchanged(Some(&stored), &staged, staged_rv.as_deref()) {
                    Some(outcome) => Some(outcome),
                    None => continue,
                },
            };
            remove_quietly(&temp);
            self.entries[i].temp = None;
            self.report.written -= 1;
            self.report.bytes -= staged.len() as u64;
            match outcome {
                None => self.report.deleted_meanwhile += 1,
                Some(PutOutcome::Stale) => self.report.stale += 1,
                Some(_) => self.report.identical += 1,
            }
        }
        Ok(())
    }

    /// Whether version `rv` of this collection's `namespace/name` is buried in the store's
    /// tombstones.
    fn buried(&mut self, namespace: Option<&str>, name: &str, rv: Option<&str>) -> bool {
        let store = self.store;
        let tombstones = store
            .tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if tombstones.stale_up_to.is_empty() {
            return false;
        }
        let probe = &mut self.probe;
        probe.name.clear();
        probe.name.push_str(name);
        match namespace {
            Some(ns) => {
                let buf = probe.namespace.get_or_insert_with(String::new);
                buf.clear();
                buf.push_str(ns);
            }
            None => probe.namespace = None,
        }
        tombstones.buries(probe, rv, self.list_rv)
    }

    /// The stored bytes of one object of this collection, checking each directory on the
    /// way is real (not a symlink) once.
    fn read_stored(
        &mut self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let kind_dir = self
            .store
            .root
            .join(&self.collection.component)
            .join(self.collection.dir_name());
        if !self.collection_checked {
            if !all_real_dirs(&[parent_of(&kind_dir).to_owned(), kind_dir.clone()])? {
                return Ok(None);
            }
            self.collection_checked = true;
        }
        let dir = match namespace {
            None => kind_dir,
            Some(ns) => {
                let dir = kind_dir.join(ns);
                if self.namespace_checked.as_deref() != Some(ns) {
                    if !real_dir(&dir)? {
                        return Ok(None);
                    }
                    self.namespace_checked = Some(ns.to_owned());
                }
                dir
            }
        };
        read_object(&dir.join(name))
    }

    fn temp_path(&self, seq: usize) -> PathBuf {
        self.store.staging.join(format!("r.{}.{seq}", self.id))
    }

    fn journal_temp_path(&self) -> PathBuf {
        self.store.staging.join(format!("j.{}", self.id))
    }

    /// Where a crash can happen during a commit; the fault-injection hook stops there.
    fn checkpoint(&self, step: Step) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.crash_at == Some(step) {
            return Err(StoreError::InjectedCrash);
        }
        let _ = step;
        Ok(())
    }
}

impl Drop for Replace<'_> {
    /// Abandons an uncommitted (or failed) replacement: staged files go, nothing visible changes.
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for entry in &self.entries {
            if let Some(seq) = entry.temp {
                remove_quietly(&self.temp_path(seq));
            }
        }
        remove_quietly(&self.journal_temp_path());
    }
}

/// The steps of a commit a crash can fall between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Every object staged, nothing else done.
    Staged,
    /// The journal is written to the staging directory.
    JournalWritten,
    /// `syncfs` returned.
    Synced,
    /// The journal has its final name.
    JournalVisible,
    /// The root is fsynced: the replacement is decided.
    JournalDurable,
    /// The journal's directories exist.
    DirsMade,
    /// The journal's rename or delete number `n` (from 0) is done.
    Applied(usize),
    /// Every touched directory is fsynced.
    DirsSynced,
    /// The journal is removed.
    JournalRemoved,
}

/// What applying a journal touched, and the first rename or delete that failed.
#[derive(Default)]
struct Applied {
    touched: BTreeSet<PathBuf>,
    first_error: Option<StoreError>,
}

/// One journal line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JournalOp<'a> {
    /// Make this directory (relative to the root) unless it exists.
    Mkdir(&'a str),
    /// Rename this staged file to this path (relative to the root).
    Rename(&'a str, &'a str),
    /// Remove this file (relative to the root).
    Delete(&'a str),
}

/// Parses one operation line; `None` for anything else, including a path that is not
/// made of safe segments (a journal can never reach outside the root either).
fn parse_op(line: &str) -> Option<JournalOp<'_>> {
    let mut fields = line.split('\t');
    let op = match (fields.next()?, fields.next(), fields.next()) {
        ("mkdir", Some(dir), None) if relative_path(dir, 1..=3) => JournalOp::Mkdir(dir),
        ("rename", Some(temp), Some(path))
            if is_safe_segment(temp) && relative_path(path, 2..=4) =>
        {
            JournalOp::Rename(temp, path)
        }
        ("delete", Some(path), None) if relative_path(path, 2..=4) => JournalOp::Delete(path),
        _ => return None,
    };
    fields.next().is_none().then_some(op)
}

fn relative_path(path: &str, segments: std::ops::RangeInclusive<usize>) -> bool {
    segments.contains(&path.split('/').count()) && path.split('/').all(is_safe_segment)
}

/// Whether a journal is whole: magic line, valid operations with every `mkdir` first,
/// and a final `end` line with the number of operations.
fn journal_is_complete(path: &Path) -> Result<bool, StoreError> {
    let file = open_no_follow(path).map_err(io_err(StoreOp::Read, path))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut read = |line: &mut String| -> Result<Option<bool>, StoreError> {
        line.clear();
        match reader.read_line(line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.ends_with('\n'))),
            // Not UTF-8: damaged.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(Some(false)),
            Err(e) => Err(io_err(StoreOp::Read, path)(e)),
        }
    };
    if read(&mut line)? != Some(true) || line.trim_end_matches('\n') != JOURNAL_MAGIC {
        return Ok(false);
    }
    let mut ops = 0usize;
    let mut past_mkdirs = false;
    loop {
        if read(&mut line)? != Some(true) {
            return Ok(false);
        }
        let text = line.trim_end_matches('\n');
        if let Some(count) = text.strip_prefix("end\t") {
            let whole = count.parse() == Ok(ops);
            return Ok(whole && read(&mut line)?.is_none());
        }
        match parse_op(text) {
            None => return Ok(false),
            Some(JournalOp::Mkdir(_)) if past_mkdirs => return Ok(false),
            Some(JournalOp::Mkdir(_)) => {}
            Some(_) => past_mkdirs = true,
        }
        ops += 1;
    }
}

/// Writes a journal, creating its file only when the first rename or delete comes:
/// a replacement that changes nothing writes nothing.
struct JournalWriter<'p> {
    path: &'p Path,
    mkdirs: Vec<String>,
    out: Option<BufWriter<File>>,
    lines: usize,
}

impl<'p> JournalWriter<'p> {
    fn new(path: &'p Path) -> JournalWriter<'p> {
        JournalWriter {
            path,
            mkdirs: Vec::new(),
            out: None,
            lines: 0,
        }
    }

    fn mkdir(&mut self, dir: String) {
        self.mkdirs.push(dir);
    }

    fn line(&mut self, args: fmt::Arguments<'_>) -> Result<(), StoreError> {
        let out = match &mut self.out {
            Some(out) => out,
            None => {
                let file = create_new_file(self.path).map_err(io_err(StoreOp::Write, self.path))?;
                let mut out = BufWriter::new(file);
                let mut header = format!("{JOURNAL_MAGIC}\n");
                for dir in &self.mkdirs {
                    header.push_str("mkdir\t");
                    header.push_str(dir);
                    header.push('\n');
                }
                out.write_all(header.as_bytes())
                    .map_err(io_err(StoreOp::Write, self.path))?;
                self.lines = self.mkdirs.len();
                self.out.insert(out)
            }
        };
        writeln!(out, "{args}").map_err(io_err(StoreOp::Write, self.path))?;
        self.lines += 1;
        Ok(())
    }

    /// Ends the journal; `None` if it never had a rename or delete (no file then).
    fn finish(self) -> Result<Option<File>, StoreError> {
        let Some(mut out) = self.out else {
            return Ok(None);
        };
        writeln!(out, "end\t{}", self.lines).map_err(io_err(StoreOp::Write, self.path))?;
        let file = out
            .into_inner()
            .map_err(|e| io_err(StoreOp::Write, self.path)(e.into_error()))?;
        Ok(Some(file))
    }
}

/// A path relative to the root, written without building a string.
struct RelPath<'a> {
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
}

impl fmt::Display for RelPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Hands out the names of a collection in (namespace, name) order, reading one
/// namespace directory at a time.
#[derive(Debug)]
struct NameCursor {
    kind_dir: PathBuf,
    /// Namespaces still to read, last first (so `pop` gives the next).
    pending: Vec<String>,
    /// The namespace of `names`; `None` for cluster-scoped objects.
    current: Option<String>,
    names: std::vec::IntoIter<String>,
    after: Option<(String, String)>,
}

impl NameCursor {
    fn open(
        kind_dir: PathBuf,
        scope: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> Result<NameCursor, StoreError> {
        let after = after.map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        let not_before = |ns: &str| {
            after
                .as_ref()
                .is_none_or(|(after_ns, _)| ns >= after_ns.as_str())
        };
        let (names, pending) = match scope {
            Some(ns) => (
                Vec::new(),
                if not_before(ns) {
                    vec![ns.to_owned()]
                } else {
                    Vec::new()
                },
            ),
            None => {
                let (mut files, mut dirs) = read_dir_sorted(&kind_dir)?;
                resume("", &mut files, after.as_ref());
                dirs.retain(|ns| not_before(ns));
                dirs.reverse();
                (files, dirs)
            }
        };
        Ok(NameCursor {
            kind_dir,
            pending,
            current: None,
            names: names.into_iter(),
            after,
        })
    }

    fn next_name(&mut self) -> Option<Result<(Option<String>, String), StoreError>> {
        loop {
            if let Some(name) = self.names.next() {
                return Some(Ok((self.current.clone(), name)));
            }
            let ns = self.pending.pop()?;
            let dir = self.kind_dir.join(&ns);
            let files = match real_dir(&dir) {
                Ok(true) => read_dir_sorted(&dir).map(|(files, _)| files),
                Ok(false) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            match files {
                Ok(mut files) => {
                    resume(&ns, &mut files, self.after.as_ref());
                    self.names = files.into_iter();
                    self.current = Some(ns);
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    fn path_of(&self, namespace: Option<&str>, name: &str) -> PathBuf {
        match namespace {
            Some(ns) => self.kind_dir.join(ns).join(name),
            None => self.kind_dir.join(name),
        }
    }
}

/// Drops the names at or before `after` from one namespace's sorted names.
fn resume(namespace: &str, names: &mut Vec<String>, after: Option<&(String, String)>) {
    let Some((after_ns, after_name)) = after else {
        return;
    };
    match namespace.cmp(after_ns.as_str()) {
        std::cmp::Ordering::Less => names.clear(),
        std::cmp::Ordering::Equal => names.retain(|n| n.as_str() > after_name.as_str()),
        std::cmp::Ordering::Greater => {}
    }
}

/// The regular files and the real directories of `dir`, each sorted; symlinks,
/// dot-names and names that are not safe segments are left out. Missing = empty.
fn read_dir_sorted(dir: &Path) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((files, dirs)),
        Err(e) => return Err(io_err(StoreOp::ReadDir, dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(StoreOp::ReadDir, dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !is_safe_segment(&name) {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_file() => files.push(name),
            Ok(t) if t.is_dir() => dirs.push(name),
            Ok(_) => {}
            // Vanished since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(StoreOp::Stat, &entry.path())(e)),
        }
    }
    files.sort_unstable();
    dirs.sort_unstable();
    Ok((files, dirs))
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

fn io_err(op: StoreOp, path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// The parent of a path below the root. Every path the store builds has one.
fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("/"))
}

/// Whether `path` is a real directory: `false` if missing, or if it is a symlink or
/// anything else (which a reader must not follow out of the root).
fn real_dir(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => {
            log::warn!("cache: {} is not a directory; ignoring it", path.display());
            Ok(false)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_err(StoreOp::Stat, path)(e)),
    }
}

fn all_real_dirs(dirs: &[PathBuf]) -> Result<bool, StoreError> {
    for dir in dirs {
        if !real_dir(dir)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes a directory (0700); `false` if it already is one, an error if something else
/// (a symlink, a file) has the name.
fn make_dir(dir: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(false),
        Ok(_) => {
            let e = io::Error::new(
                io::ErrorKind::NotADirectory,
                "exists and is not a directory",
            );
            return Err(io_err(StoreOp::CreateDir, dir)(e));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(StoreOp::Stat, dir)(e)),
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(StoreOp::CreateDir, dir)(e)),
    }
}

/// Reads a stored file. `None` when it is missing, or is a symlink, a directory or
/// anything but a regular file: never followed, never waited on.
fn read_object(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            log::warn!("cache: not following symlink {}", path.display());
            return Ok(None);
        }
        Err(e) => return Err(io_err(StoreOp::Read, path)(e)),
    };
    let meta = file.metadata().map_err(io_err(StoreOp::Stat, path))?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&file)
        .read_to_end(&mut bytes)
        .map_err(io_err(StoreOp::Read, path))?;
    Ok(Some(bytes))
}

/// Opens for reading without following a final symlink, and without blocking on a FIFO.
fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

fn exists_no_follow(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Creates a file that must not exist yet, mode 0600.
fn create_new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Writes a new file with `bytes`, flushed to disk when `sync`; removed again on failure.
fn write_new_file(path: &Path, bytes: &[u8], sync: bool) -> Result<(), StoreError> {
    let mut file = create_new_file(path).map_err(io_err(StoreOp::Write, path))?;
    let written = file
        .write_all(bytes)
        .map_err(io_err(StoreOp::Write, path))
        .and_then(|()| {
            if sync {
                file.sync_data().map_err(io_err(StoreOp::Sync, path))
            } else {
                Ok(())
            }
        });
    if written.is_err() {
        remove_quietly(path);
    }
    written
}

fn remove_quietly(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        log::warn!("cache: cannot remove {}: {e}", path.display());
    }
}

/// Makes a directory's entries durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    let synced = File::open(dir).and_then(|d| d.sync_all());
    match synced {
        Ok(()) => Ok(()),
        // Some filesystems cannot fsync a directory; their entries are durable otherwise.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(io_err(StoreOp::Sync, dir)(e)),
    }
}

/// Flushes every dirty page and inode of the filesystem that holds `dir` to stable
/// storage: one call instead of an fsync per staged object.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code, reason = "syncfs has no wrapper in std")]
fn sync_filesystem(dir: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: syncfs takes a plain descriptor and touches no memory of ours; `dir` keeps
    // the descriptor open for the whole call.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere (development hosts only) `sync` has to do; it may return before the data is on disk.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[allow(unsafe_code, reason = "sync has no wrapper in std")]
fn sync_filesystem(_dir: &File) -> io::Result<()> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::key::non_resource_file_name;
    use super::super::temp_dir::TempDir;
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::{MetadataExt, symlink};
    use std::process::Command;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// Everything stored under a root: path → bytes (`None` for a directory).
    type Snapshot = BTreeMap<String, Option<Vec<u8>>>;

    fn open(dir: &TempDir) -> Store {
        Store::open(&dir.root()).unwrap().0
    }

    fn pods() -> CollectionKey {
        CollectionKey::new("kubelet", "pods", "v1", "")
    }

    fn nodes() -> CollectionKey {
        CollectionKey::new("kubelet", "nodes", "v1", "")
    }

    fn key(c: &CollectionKey, namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            collection: c.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// A small object as the apiserver sends it.
    fn object(namespace: Option<&str>, name: &str, rv: u64, app: &str) -> Vec<u8> {
        let namespace = namespace
            .map(|ns| format!(r#","namespace":"{ns}""#))
            .unwrap_or_default();
        format!(r#"{{"metadata":{{"name":"{name}"{namespace},"resourceVersion":"{rv}","labels":{{"app":"{app}"}}}}}}"#)
            .into_bytes()
    }

    fn put(
        store: &Store,
        c: &CollectionKey,
        namespace: Option<&str>,
        name: &str,
        rv: u64,
        app: &str,
    ) -> PutOutcome {
        let bytes = object(namespace, name, rv, app);
        store
            .put(&key(c, namespace, name), &bytes, Some(&rv.to_string()))
            .unwrap()
    }

    fn get(
        store: &Store,
        c: &CollectionKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Vec<u8>> {
        store.get(&key(c, namespace, name)).unwrap()
    }

    /// `namespace/name` of every listed object, in order; `None` for an unknown collection.
    fn names(
        store: &Store,
        c: &CollectionKey,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> Option<Vec<String>> {
        let objects = store.list(c, namespace, after).unwrap()?;
        let name = |o: StoredObject| format!("{}/{}", o.namespace.unwrap_or_default(), o.name);
        Some(objects.map(|o| name(o.unwrap())).collect())
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    fn app_web(bytes: &[u8]) -> bool {
        contains(bytes, br#""app":"web""#)
    }

    /// Everything under the root but the staging directory: path → bytes (`None` for a
    /// directory).
    fn snapshot(root: &Path) -> Snapshot {
        fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                if rel == STAGING {
                    continue;
                }
                if fs::symlink_metadata(&path).unwrap().is_dir() {
                    out.insert(rel, None);
                    walk(root, &path, out);
                } else {
                    out.insert(rel, Some(fs::read(&path).unwrap()));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(root, root, &mut out);
        out
    }

    fn staging_entries(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(root.join(STAGING))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn layout_and_modes() {
        let dir = TempDir::new("layout");
        let store = open(&dir);
        let root = dir.root();
        put(&store, &pods(), Some("default"), "web", 1, "web");
        put(&store, &nodes(), None, "edge-1", 1, "node");
        store
            .put(
                &key(
                    &CollectionKey::new("kube-proxy", "endpointslices", "v1", "discovery.k8s.io"),
                    Some("default"),
                    "kubernetes",
                ),
                b"{}",
                None,
            )
            .unwrap();

        let snap = snapshot(&root);
        let paths: Vec<&str> = snap.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "kube-proxy",
                "kube-proxy/endpointslices.v1.discovery.k8s.io",
                "kube-proxy/endpointslices.v1.discovery.k8s.io/default",
                "kube-proxy/endpointslices.v1.discovery.k8s.io/default/kubernetes",
                "kubelet",
                "kubelet/nodes.v1.core",
                "kubelet/nodes.v1.core/edge-1",
                "kubelet/pods.v1.core",
                "kubelet/pods.v1.core/default",
                "kubelet/pods.v1.core/default/web",
            ]
        );
        assert_eq!(
            snap["kubelet/pods.v1.core/default/web"],
            Some(object(Some("default"), "web", 1, "web"))
        );
        assert_eq!(
            snap["kubelet/nodes.v1.core/edge-1"],
            Some(object(None, "edge-1", 1, "node"))
        );
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join(STAGING)), 0o700);
        for (path, content) in &snap {
            let expected = if content.is_some() { 0o600 } else { 0o700 };
            assert_eq!(mode(&root.join(path)), expected, "{path}");
        }
        assert!(staging_entries(&root).is_empty());
        assert_eq!(store.root(), root);
    }

    #[test]
    fn get_finds_only_what_was_put() {
        let dir = TempDir::new("get");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "web", 1, "web");
        put(&store, &nodes(), None, "edge-1", 1, "node");
        assert_eq!(
            get(&store, &pods(), Some("a"), "web"),
            Some(object(Some("a"), "web", 1, "web"))
        );
        assert_eq!(
            get(&store, &nodes(), None, "edge-1"),
            Some(object(None, "edge-1", 1, "node"))
        );
        assert_eq!(get(&store, &pods(), Some("b"), "web"), None);
        assert_eq!(get(&store, &pods(), None, "web"), None);
        assert_eq!(get(&store, &pods(), Some("a"), "db"), None);
        assert_eq!(
            get(
                &store,
                &CollectionKey::new("coredns", "pods", "v1", ""),
                Some("a"),
                "web"
            ),
            None
        );
        assert_eq!(
            get(
                &store,
                &CollectionKey::new("kubelet", "pods", "v1", "apps"),
                Some("a"),
                "web"
            ),
            None
        );
    }

    #[test]
    fn list_is_sorted_resumable_and_scoped() {
        let dir = TempDir::new("list");
        let store = open(&dir);
        for (ns, name) in [
            ("b", "web"),
            ("a", "zed"),
            ("a", "api"),
            ("kube-system", "dns"),
            ("a-b", "x"),
        ] {
            put(&store, &pods(), Some(ns), name, 1, "web");
        }
        // Leftovers from other tools are not objects.
        let kind_dir = dir.root().join("kubelet/pods.v1.core");
        fs::write(kind_dir.join(".partial"), b"{").unwrap();
        fs::write(kind_dir.join("a/.partial"), b"{").unwrap();
        fs::create_dir(kind_dir.join("a/subdir")).unwrap();

        let check = |namespace: Option<&str>, after: Option<(&str, &str)>, expected: &[&str]| {
            assert_eq!(
                names(&store, &pods(), namespace, after).unwrap(),
                expected,
                "{namespace:?} after {after:?}"
            );
        };
        // (namespace, name) order: "a" < "a-b" < "aa", unlike the joined path "a-b/x" < "a/api".
        check(
            None,
            None,
            &["a/api", "a/zed", "a-b/x", "b/web", "kube-system/dns"],
        );
        check(
            None,
            Some(("a", "api")),
            &["a/zed", "a-b/x", "b/web", "kube-system/dns"],
        );
        check(
            None,
            Some(("a", "zed")),
            &["a-b/x", "b/web", "kube-system/dns"],
        );
        check(None, Some(("aa", "")), &["b/web", "kube-system/dns"]);
        check(
            None,
            Some(("", "zzz")),
            &["a/api", "a/zed", "a-b/x", "b/web", "kube-system/dns"],
        );
        check(None, Some(("kube-system", "dns")), &[]);
        check(Some("a"), None, &["a/api", "a/zed"]);
        check(Some("a"), Some(("a", "api")), &["a/zed"]);
        check(Some("a"), Some(("", "x")), &["a/api", "a/zed"]);
        check(Some("a"), Some(("b", "")), &[]);
        check(Some("never-used"), None, &[]);
        assert_eq!(names(&store, &nodes(), None, None), None);
        assert_eq!(names(&store, &nodes(), Some("a"), None), None);

        for name in ["edge-2", "edge-1", "edge-10"] {
            put(&store, &nodes(), None, name, 1, "node");
        }
        let check = |after: Option<(&str, &str)>, expected: &[&str]| {
            assert_eq!(
                names(&store, &nodes(), None, after).unwrap(),
                expected,
                "after {after:?}"
            );
        };
        check(None, &["/edge-1", "/edge-10", "/edge-2"]);
        check(Some(("", "edge-10")), &["/edge-2"]);
        check(Some(("default", "")), &[]);

        let first = store
            .list(&pods(), Some("b"), None)
            .unwrap()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let expected = StoredObject {
            namespace: Some("b".into()),
            name: "web".into(),
            bytes: object(Some("b"), "web", 1, "web"),
        };
        assert_eq!(first, expected);
        let node = store
            .list(&nodes(), None, None)
            .unwrap()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!((node.namespace, node.name), (None, "edge-1".to_owned()));
    }

    #[test]
    fn list_reads_lazily_and_skips_vanished_files() {
        let dir = TempDir::new("lazy");
        let store = open(&dir);
        for (ns, name) in [("a", "one"), ("a", "three"), ("a", "two"), ("b", "four")] {
            put(&store, &pods(), Some(ns), name, 1, "web");
        }
        let mut objects = store.list(&pods(), None, None).unwrap().unwrap();
        assert_eq!(objects.next().unwrap().unwrap().name, "one");
        // "a" has been listed: its deleted file is skipped. "b" has not been read yet.
        assert!(
            store
                .delete(&key(&pods(), Some("a"), "three"), None)
                .unwrap()
        );
        assert!(
            store
                .delete(&key(&pods(), Some("b"), "four"), None)
                .unwrap()
        );
        put(&store, &pods(), Some("b"), "five", 1, "web");
        let rest: Vec<String> = objects.map(|o| o.unwrap().name).collect();
        assert_eq!(rest, ["two", "five"]);
    }

    #[test]
    fn put_writes_only_what_is_new() {
        let dir = TempDir::new("put");
        let store = open(&dir);
        let k = key(&pods(), Some("a"), "web");
        let path = dir.root().join("kubelet/pods.v1.core/a/web");
        let v5 = object(Some("a"), "web", 5, "web");
        assert_eq!(
            store.put(&k, &v5, Some("5")).unwrap(),
            PutOutcome::Written {
                bytes: v5.len() as u64
            }
        );
        let before = fs::metadata(&path).unwrap();

        assert_eq!(
            store.put(&k, &v5, Some("5")).unwrap(),
            PutOutcome::Identical
        );
        assert_eq!(store.put(&k, &v5, None).unwrap(), PutOutcome::Identical);
        let v4 = object(Some("a"), "web", 4, "changed");
        assert_eq!(store.put(&k, &v4, Some("4")).unwrap(), PutOutcome::Stale);
        let after = fs::metadata(&path).unwrap();
        assert_eq!(
            (after.ino(), after.mtime(), after.mtime_nsec()),
            (before.ino(), before.mtime(), before.mtime_nsec())
        );
        assert_eq!(fs::read(&path).unwrap(), v5);

        let v6 = object(Some("a"), "web", 6, "web");
        assert_eq!(
            store.put(&k, &v6, Some("6")).unwrap(),
            PutOutcome::Written {
                bytes: v6.len() as u64
            }
        );
        assert_ne!(fs::metadata(&path).unwrap().ino(), before.ino());
        assert_eq!(fs::read(&path).unwrap(), v6);

        // The same version with other bytes is not older: written.
        let v6b = object(Some("a"), "web", 6, "other");
        assert!(matches!(
            store.put(&k, &v6b, Some("6")).unwrap(),
            PutOutcome::Written { .. }
        ));
        // Without a version there is no guard.
        let v1 = object(Some("a"), "web", 1, "web");
        assert!(matches!(
            store.put(&k, &v1, None).unwrap(),
            PutOutcome::Written { .. }
        ));
        // An opaque stored version never blocks.
        let opaque = br#"{"metadata":{"resourceVersion":"abc"}}"#;
        assert!(matches!(
            store.put(&k, opaque, Some("1")).unwrap(),
            PutOutcome::Written { .. }
        ));
        assert!(matches!(
            store.put(&k, &v1, Some("1")).unwrap(),
            PutOutcome::Written { .. }
        ));
        assert_eq!(get(&store, &pods(), Some("a"), "web"), Some(v1));
        assert!(staging_entries(&dir.root()).is_empty());
    }

    #[test]
    fn corrupt_file_is_returned_as_is_and_replaced_by_put() {
        let dir = TempDir::new("corrupt");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "web", 5, "web");
        let path = dir.root().join("kubelet/pods.v1.core/a/web");
        // Truncated JSON whose prefix claims a newer version: still unreadable, so older.
        let corrupt: &[u8] = br#"{"metadata":{"resourceVersion":"99""#;
        fs::write(&path, corrupt).unwrap();
        assert_eq!(
            get(&store, &pods(), Some("a"), "web").as_deref(),
            Some(corrupt)
        );
        let listed: Vec<Vec<u8>> = store
            .list(&pods(), None, None)
            .unwrap()
            .unwrap()
            .map(|o| o.unwrap().bytes)
            .collect();
        assert_eq!(listed, [corrupt]);
        assert!(matches!(
            put(&store, &pods(), Some("a"), "web", 1, "web"),
            PutOutcome::Written { .. }
        ));
        assert_eq!(
            get(&store, &pods(), Some("a"), "web"),
            Some(object(Some("a"), "web", 1, "web"))
        );
    }

    #[test]
    fn any_damaged_file_is_older_than_an_answer_single_or_listed() {
        let dir = TempDir::new("damaged");
        let store = open(&dir);
        let path = dir.root().join("kubelet/pods.v1.core/a/web");
        let damaged: [&[u8]; 4] = [
            br#"{"metadata":{"resourceVersion":"99""#,
            b"",
            b"\x00\xff garbage",
            // An array fills a derived struct field by field: it must not pass for an
            // object whose resourceVersion is 99.
            br#"[null,{"name":"web","resourceVersion":"99"}]"#,
        ];
        for (i, bad) in damaged.into_iter().enumerate() {
            put(&store, &pods(), Some("a"), "web", 1, "web");
            fs::write(&path, bad).unwrap();
            assert!(
                matches!(
                    put(&store, &pods(), Some("a"), "web", 2, "web"),
                    PutOutcome::Written { .. }
                ),
                "put over damaged file {i}"
            );
            assert_eq!(
                get(&store, &pods(), Some("a"), "web"),
                Some(object(Some("a"), "web", 2, "web"))
            );
            fs::write(&path, bad).unwrap();
            let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
            let listed = object(Some("a"), "web", 3, "web");
            assert!(
                matches!(
                    replace.put(Some("a"), "web", &listed, Some("3")).unwrap(),
                    PutOutcome::Written { .. }
                ),
                "list over damaged file {i}"
            );
            replace.commit(&mut |_| true, Some("3")).unwrap();
            assert_eq!(get(&store, &pods(), Some("a"), "web"), Some(listed));
        }
    }

    #[test]
    fn unsafe_keys_are_refused_without_touching_the_disk() {
        let dir = TempDir::new("unsafe");
        let store = open(&dir);
        let bad = [
            "", ".", "..", "../x", "a/b", "/etc", "a\0b", ".hidden", ".staging", "a\\b", "%2e%2e",
            "a\nb",
        ];
        let refused = |result: Result<(), StoreError>, what: &str| match result {
            Err(StoreError::UnsafeKey { .. }) => {}
            other => panic!("{what}: {other:?}"),
        };
        for b in bad {
            let mut collections = vec![
                CollectionKey::new(b, "pods", "v1", ""),
                CollectionKey::new("kubelet", b, "v1", ""),
                CollectionKey::new("kubelet", "pods", b, ""),
            ];
            if !b.is_empty() {
                collections.push(CollectionKey::new("kubelet", "pods", "v1", b));
            }
            let mut keys: Vec<ObjectKey> = collections
                .iter()
                .map(|c| key(c, Some("default"), "web"))
                .collect();
            keys.push(key(&pods(), Some(b), "web"));
            keys.push(key(&pods(), Some("default"), b));
            keys.push(key(&pods(), None, b));
            for k in &keys {
                refused(store.put(k, b"{}", None).map(drop), &format!("put {k:?}"));
                refused(store.get(k).map(drop), &format!("get {k:?}"));
                refused(store.delete(k, None).map(drop), &format!("delete {k:?}"));
            }
            for c in &collections {
                assert!(!store.has_collection(c));
                refused(store.list(c, None, None).map(drop), &format!("list {c:?}"));
                refused(
                    store.delete_collection(c).map(drop),
                    &format!("delete_collection {c:?}"),
                );
                refused(
                    store.begin_replace(c, None).map(drop),
                    &format!("begin_replace {c:?}"),
                );
            }
            refused(
                store.list(&pods(), Some(b), None).map(drop),
                "list namespace",
            );
            refused(
                store.begin_replace(&pods(), Some(b)).map(drop),
                "begin_replace namespace",
            );
            let mut replace = store.begin_replace(&pods(), None).unwrap();
            refused(
                replace.put(Some(b), "web", b"{}", None).map(drop),
                "replace namespace",
            );
            refused(replace.put(None, b, b"{}", None).map(drop), "replace name");
            drop(replace);
            refused(
                store.put_non_resource(b, b"{}").map(drop),
                "put_non_resource",
            );
            refused(store.get_non_resource(b).map(drop), "get_non_resource");
        }
        assert_eq!(snapshot(&dir.root()), BTreeMap::new());
        assert!(staging_entries(&dir.root()).is_empty());
        let beside: Vec<_> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(beside, ["cache"]);
    }

    #[test]
    fn symlinks_are_never_followed() {
        let dir = TempDir::new("symlink");
        let store = open(&dir);
        let root = dir.root();
        let outside = dir.0.join("outside");
        fs::create_dir_all(outside.join("pods.v1.core/a")).unwrap();
        fs::write(outside.join("secret"), b"secret").unwrap();
        fs::write(outside.join("pods.v1.core/a/web"), b"secret").unwrap();
        put(&store, &pods(), Some("a"), "web", 1, "web");
        let kind_dir = root.join("kubelet/pods.v1.core");

        // A symlinked object file.
        symlink(outside.join("secret"), kind_dir.join("a/link")).unwrap();
        assert_eq!(get(&store, &pods(), Some("a"), "link"), None);
        assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/web"]);
        // A symlinked namespace directory.
        symlink(&outside, kind_dir.join("evil")).unwrap();
        assert_eq!(get(&store, &pods(), Some("evil"), "secret"), None);
        assert_eq!(
            names(&store, &pods(), Some("evil"), None).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/web"]);
        assert!(
            store
                .put(&key(&pods(), Some("evil"), "new"), b"{}", None)
                .is_err()
        );
        assert!(
            !store
                .delete(&key(&pods(), Some("evil"), "secret"), None)
                .unwrap()
        );
        // A symlinked component directory.
        symlink(&outside, root.join("proxy")).unwrap();
        let proxy_pods = CollectionKey::new("proxy", "pods", "v1", "");
        assert!(!store.has_collection(&proxy_pods));
        assert_eq!(names(&store, &proxy_pods, None, None), None);
        assert_eq!(get(&store, &proxy_pods, Some("a"), "web"), None);
        assert!(
            !store
                .delete(&key(&proxy_pods, Some("a"), "web"), None)
                .unwrap()
        );
        assert!(
            store
                .put(&key(&proxy_pods, Some("a"), "new"), b"{}", None)
                .is_err()
        );
        assert!(!store.delete_collection(&proxy_pods).unwrap());
        // Writing over a symlinked object replaces the link, not its target.
        assert!(matches!(
            put(&store, &pods(), Some("a"), "link", 1, "web"),
            PutOutcome::Written { .. }
        ));
        assert!(
            fs::symlink_metadata(kind_dir.join("a/link"))
                .unwrap()
                .is_file()
        );

        let mut left: Vec<_> = fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["pods.v1.core", "secret"]);
        assert_eq!(fs::read(outside.join("secret")).unwrap(), b"secret");
        assert_eq!(
            fs::read(outside.join("pods.v1.core/a/web")).unwrap(),
            b"secret"
        );
        assert_eq!(
            fs::read_dir(outside.join("pods.v1.core/a"))
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn delete_and_delete_collection() {
        let dir = TempDir::new("delete");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "web", 1, "web");
        put(&store, &pods(), Some("a"), "db", 1, "db");
        put(&store, &nodes(), None, "edge-1", 1, "node");
        assert!(store.delete(&key(&pods(), Some("a"), "web"), None).unwrap());
        assert!(!store.delete(&key(&pods(), Some("a"), "web"), None).unwrap());
        assert!(
            !store
                .delete(&key(&pods(), Some("zzz"), "web"), None)
                .unwrap()
        );
        assert_eq!(get(&store, &pods(), Some("a"), "web"), None);
        assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/db"]);

        assert!(store.delete_collection(&pods()).unwrap());
        assert!(!store.has_collection(&pods()));
        assert_eq!(names(&store, &pods(), None, None), None);
        assert_eq!(get(&store, &pods(), Some("a"), "db"), None);
        assert!(!store.delete_collection(&pods()).unwrap());
        assert!(staging_entries(&dir.root()).is_empty());
        assert_eq!(names(&store, &nodes(), None, None).unwrap(), ["/edge-1"]);
    }

    #[test]
    fn non_resource_documents() {
        let dir = TempDir::new("nonresource");
        let store = open(&dir);
        let version = non_resource_file_name("/version").unwrap();
        let discovery = non_resource_file_name("/apis/discovery.k8s.io/v1").unwrap();
        let body: &[u8] = br#"{"gitVersion":"v1.30.0"}"#;
        assert_eq!(
            store.put_non_resource(&version, body).unwrap(),
            PutOutcome::Written {
                bytes: body.len() as u64
            }
        );
        assert_eq!(
            store.put_non_resource(&version, body).unwrap(),
            PutOutcome::Identical
        );
        assert_eq!(
            store.get_non_resource(&version).unwrap().as_deref(),
            Some(body)
        );
        assert_eq!(store.get_non_resource(&discovery).unwrap(), None);
        store.put_non_resource(&discovery, b"{}").unwrap();
        assert_eq!(
            fs::read(dir.root().join("_apis_discovery.k8s.io_v1")).unwrap(),
            b"{}"
        );
        assert_eq!(fs::read(dir.root().join("version")).unwrap(), body);
        assert_eq!(mode(&dir.root().join("version")), 0o600);
        let newer: &[u8] = br#"{"gitVersion":"v1.31.0"}"#;
        assert!(matches!(
            store.put_non_resource(&version, newer).unwrap(),
            PutOutcome::Written { .. }
        ));
        assert_eq!(
            store.get_non_resource(&version).unwrap().as_deref(),
            Some(newer)
        );
        assert!(staging_entries(&dir.root()).is_empty());
    }

    /// Stored before each replacement test: a/x, a/y, a/z (newer than the list), a/w (out
    /// of the selector's scope) and b/q.
    fn seed_replace(store: &Store) {
        put(store, &pods(), Some("a"), "x", 5, "web");
        put(store, &pods(), Some("a"), "y", 5, "web");
        put(store, &pods(), Some("a"), "z", 50, "web");
        put(store, &pods(), Some("a"), "w", 5, "db");
        put(store, &pods(), Some("b"), "q", 5, "web");
    }

    #[test]
    fn replace_of_a_namespace_deletes_only_absent_objects_in_scope() {
        let dir = TempDir::new("replace-ns");
        let store = open(&dir);
        seed_replace(&store);
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        let v = object(Some("a"), "v", 9, "web");
        assert_eq!(
            replace
                .put(Some("a"), "x", &object(Some("a"), "x", 5, "web"), Some("5"))
                .unwrap(),
            PutOutcome::Identical
        );
        assert_eq!(
            replace.put(Some("a"), "v", &v, Some("9")).unwrap(),
            PutOutcome::Written {
                bytes: v.len() as u64
            }
        );
        // Not visible before the commit.
        assert_eq!(get(&store, &pods(), Some("a"), "v"), None);
        let report = replace.commit(&mut app_web, Some("10")).unwrap();
        let expected = ReplaceReport {
            written: 1,
            identical: 1,
            stale: 0,
            deleted: 1,
            kept_newer: 1,
            bytes: v.len() as u64,
            deleted_meanwhile: 0,
        };
        assert_eq!(report, expected);
        assert_eq!(
            names(&store, &pods(), None, None).unwrap(),
            ["a/v", "a/w", "a/x", "a/z", "b/q"]
        );
        assert_eq!(get(&store, &pods(), Some("a"), "v"), Some(v));
        assert!(staging_entries(&dir.root()).is_empty());
        assert!(
            !snapshot(&dir.root())
                .keys()
                .any(|k| k.starts_with(".journal"))
        );
    }

    #[test]
    fn replace_of_every_namespace_reaches_all_of_them() {
        let dir = TempDir::new("replace-all");
        let store = open(&dir);
        seed_replace(&store);
        let mut replace = store.begin_replace(&pods(), None).unwrap();
        replace
            .put(Some("a"), "x", &object(Some("a"), "x", 6, "web"), Some("6"))
            .unwrap();
        let report = replace.commit(&mut app_web, Some("10")).unwrap();
        assert_eq!(
            (report.written, report.deleted, report.kept_newer),
            (1, 2, 1)
        );
        assert_eq!(
            names(&store, &pods(), None, None).unwrap(),
            ["a/w", "a/x", "a/z"]
        );
        assert_eq!(
            get(&store, &pods(), Some("a"), "x"),
            Some(object(Some("a"), "x", 6, "web"))
        );

        // Without a list version nothing counts as newer.
        let replace = store.begin_replace(&pods(), None).unwrap();
        let report = replace.commit(&mut |_| true, None).unwrap();
        assert_eq!((report.deleted, report.kept_newer), (3, 0));
        assert_eq!(
            names(&store, &pods(), None, None).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn replace_of_cluster_scoped_objects() {
        let dir = TempDir::new("replace-cluster");
        let store = open(&dir);
        put(&store, &nodes(), None, "edge-1", 1, "node");
        put(&store, &nodes(), None, "edge-2", 1, "node");
        let mut replace = store.begin_replace(&nodes(), None).unwrap();
        replace
            .put(
                None,
                "edge-3",
                &object(None, "edge-3", 2, "node"),
                Some("2"),
            )
            .unwrap();
        replace
            .put(
                None,
                "edge-1",
                &object(None, "edge-1", 2, "node"),
                Some("2"),
            )
            .unwrap();
        let report = replace.commit(&mut |_| true, Some("2")).unwrap();
        assert_eq!((report.written, report.deleted), (2, 1));
        assert_eq!(
            names(&store, &nodes(), None, None).unwrap(),
            ["/edge-1", "/edge-3"]
        );
    }

    #[test]
    fn empty_answer_leaves_an_existing_empty_collection() {
        let dir = TempDir::new("replace-empty");
        let store = open(&dir);
        // Never cached before: the collection (and namespace) now exist, empty.
        let report = store
            .begin_replace(&nodes(), None)
            .unwrap()
            .commit(&mut |_| true, Some("3"))
            .unwrap();
        assert_eq!(report, ReplaceReport::default());
        assert!(store.has_collection(&nodes()));
        assert_eq!(
            names(&store, &nodes(), None, None).unwrap(),
            Vec::<String>::new()
        );
        store
            .begin_replace(&pods(), Some("kube-system"))
            .unwrap()
            .commit(&mut |_| true, Some("3"))
            .unwrap();
        assert!(dir.root().join("kubelet/pods.v1.core/kube-system").is_dir());
        assert_eq!(
            names(&store, &pods(), Some("kube-system"), None).unwrap(),
            Vec::<String>::new()
        );

        // Cached before: everything in scope goes, the directory stays.
        seed_replace(&store);
        let report = store
            .begin_replace(&pods(), Some("a"))
            .unwrap()
            .commit(&mut |_| true, None)
            .unwrap();
        assert_eq!(report.deleted, 4);
        assert!(store.has_collection(&pods()));
        assert_eq!(
            names(&store, &pods(), Some("a"), None).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(names(&store, &pods(), None, None).unwrap(), ["b/q"]);
    }

    #[test]
    fn replace_never_overwrites_a_newer_object() {
        let dir = TempDir::new("replace-stale");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "x", 20, "web");
        put(&store, &pods(), Some("a"), "y", 5, "web");
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        assert_eq!(
            replace
                .put(
                    Some("a"),
                    "x",
                    &object(Some("a"), "x", 10, "web"),
                    Some("10")
                )
                .unwrap(),
            PutOutcome::Stale
        );
        let y = object(Some("a"), "y", 10, "web");
        assert!(matches!(
            replace.put(Some("a"), "y", &y, Some("10")).unwrap(),
            PutOutcome::Written { .. }
        ));
        // A watch event stores a newer y while the list is being staged.
        put(&store, &pods(), Some("a"), "y", 12, "web");
        let report = replace.commit(&mut |_| true, Some("10")).unwrap();
        assert_eq!(
            (report.written, report.stale, report.deleted, report.bytes),
            (0, 2, 0, 0)
        );
        assert_eq!(
            get(&store, &pods(), Some("a"), "x"),
            Some(object(Some("a"), "x", 20, "web"))
        );
        assert_eq!(
            get(&store, &pods(), Some("a"), "y"),
            Some(object(Some("a"), "y", 12, "web"))
        );
        assert!(staging_entries(&dir.root()).is_empty());
    }

    #[test]
    fn replace_never_brings_back_an_object_a_watch_deleted_meanwhile() {
        let dir = TempDir::new("replace-deleted");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "x", 5, "web");
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        let x = object(Some("a"), "x", 6, "web");
        assert!(matches!(
            replace.put(Some("a"), "x", &x, Some("6")).unwrap(),
            PutOutcome::Written { .. }
        ));
        // A watch's DELETED arrives while the (older) list is being staged.
        let key = ObjectKey {
            collection: pods(),
            namespace: Some("a".into()),
            name: "x".into(),
        };
        assert!(store.delete(&key, None).unwrap());
        let report = replace.commit(&mut |_| true, Some("6")).unwrap();
        assert_eq!((report.written, report.deleted_meanwhile), (0, 1));
        assert_eq!(get(&store, &pods(), Some("a"), "x"), None);
        assert!(staging_entries(&dir.root()).is_empty());
    }

    #[test]
    fn tombstones_are_bounded_and_forget_the_oldest_first() {
        let mut tombstones = Tombstones::default();
        let key = |name: &str| ObjectKey {
            collection: pods(),
            namespace: Some("ns".into()),
            name: name.into(),
        };
        assert!(!tombstones.buries(&key("p0"), Some("1"), None));
        for i in 0..=TOMBSTONES {
            tombstones.bury(&key(&format!("p{i}")), 10, 11);
        }
        assert_eq!(tombstones.order.len(), TOMBSTONES);
        assert_eq!(tombstones.stale_up_to.len(), TOMBSTONES);
        assert!(!tombstones.buries(&key("p0"), Some("5"), None), "forgotten");
        let last = key(&format!("p{TOMBSTONES}"));
        assert!(tombstones.buries(&last, Some("10"), None));
        assert!(!tombstones.buries(&last, Some("11"), None));
        assert!(
            !tombstones.buries(&last, Some("x"), None),
            "unreadable: never stale"
        );
        assert!(!tombstones.buries(&last, None, None));
        // Cluster-scoped `p1` is another object than `ns/p1`.
        let cluster = ObjectKey {
            namespace: None,
            ..key("p1")
        };
        assert!(!tombstones.buries(&cluster, Some("1"), None));
    }

    #[test]
    fn a_list_taken_after_the_removal_is_never_refused() {
        let mut tombstones = Tombstones::default();
        let key = ObjectKey {
            collection: pods(),
            namespace: Some("ns".into()),
            name: "p".into(),
        };
        // Version 5 was left out by a list at 40.
        tombstones.bury(&key, 5, 40);
        assert!(tombstones.buries(&key, Some("5"), None), "a replayed event");
        assert!(
            tombstones.buries(&key, Some("5"), Some(39)),
            "an older list"
        );
        assert!(
            !tombstones.buries(&key, Some("5"), Some(40)),
            "the cloud at 40"
        );
        assert!(!tombstones.buries(&key, Some("3"), Some(41)));
        // Merged with a later removal, both bounds rise.
        tombstones.bury(&key, 7, 50);
        assert!(tombstones.buries(&key, Some("7"), Some(45)));
        assert!(!tombstones.buries(&key, Some("7"), Some(50)));
    }

    /// Issue 11, item 7: a list whose scope the hub misread deleted objects the cloud still
    /// has; the next whole list of them, at a later resourceVersion, must store them again.
    #[test]
    fn a_later_whole_list_restores_what_a_misread_list_removed() {
        let dir = TempDir::new("replace-misread");
        let store = open(&dir);
        let mut first = store.begin_replace(&pods(), Some("a")).unwrap();
        for (name, rv) in [("p", 5), ("q", 6)] {
            let bytes = object(Some("a"), name, rv, "web");
            first
                .put(Some("a"), name, &bytes, Some(&rv.to_string()))
                .unwrap();
        }
        first.commit(&mut |_| true, Some("10")).unwrap();
        // Empty, as a list of another scope would be.
        let misread = store.begin_replace(&pods(), Some("a")).unwrap();
        let report = misread.commit(&mut |_| true, Some("10")).unwrap();
        assert_eq!(report.deleted, 2);
        // A replayed event and a list older than the removal are refused still.
        let p = key(&pods(), Some("a"), "p");
        assert_eq!(
            store
                .put(&p, &object(Some("a"), "p", 5, "web"), Some("5"))
                .unwrap(),
            PutOutcome::Stale
        );
        let mut older = store.begin_replace(&pods(), Some("a")).unwrap();
        older.set_list_rv(Some("9"));
        let bytes = object(Some("a"), "p", 5, "web");
        assert_eq!(
            older.put(Some("a"), "p", &bytes, Some("5")).unwrap(),
            PutOutcome::Stale
        );
        drop(older);
        // The cloud's whole list at (or after) the removal brings both back.
        let mut relist = store.begin_replace(&pods(), Some("a")).unwrap();
        relist.set_list_rv(Some("10"));
        for (name, rv) in [("p", 5), ("q", 6)] {
            let bytes = object(Some("a"), name, rv, "web");
            assert!(matches!(
                relist
                    .put(Some("a"), name, &bytes, Some(&rv.to_string()))
                    .unwrap(),
                PutOutcome::Written { .. }
            ));
        }
        relist.commit(&mut |_| true, Some("10")).unwrap();
        assert!(get(&store, &pods(), Some("a"), "p").is_some());
        assert!(get(&store, &pods(), Some("a"), "q").is_some());
    }

    /// Bug: a list staged an object while no file existed; a watch then stored and deleted
    /// it. With no file left, the commit's recheck kept the (older) staged copy.
    #[test]
    fn replace_never_brings_back_an_object_stored_and_deleted_while_it_was_staged() {
        let dir = TempDir::new("replace-buried");
        let store = open(&dir);
        let w = key(&pods(), Some("ns"), "w");
        let mut replace = store.begin_replace(&pods(), Some("ns")).unwrap();
        let staged = object(Some("ns"), "w", 382, "web");
        assert!(matches!(
            replace.put(Some("ns"), "w", &staged, Some("382")).unwrap(),
            PutOutcome::Written { .. }
        ));
        put(&store, &pods(), Some("ns"), "w", 410, "web");
        assert!(store.delete(&w, Some("423")).unwrap());
        let report = replace.commit(&mut |_| true, Some("400")).unwrap();
        assert_eq!(
            report,
            ReplaceReport {
                stale: 1,
                ..ReplaceReport::default()
            }
        );
        assert_eq!(store.get(&w).unwrap(), None);
        assert!(staging_entries(&dir.root()).is_empty());
    }

    /// Bug: dropping a staged object deleted meanwhile lowered `written` but not `bytes`.
    #[test]
    fn an_object_deleted_meanwhile_counts_no_bytes() {
        let dir = TempDir::new("replace-deleted-bytes");
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "x", 5, "web");
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        let x = object(Some("a"), "x", 6, "web");
        replace.put(Some("a"), "x", &x, Some("6")).unwrap();
        assert!(store.delete(&key(&pods(), Some("a"), "x"), None).unwrap());
        let report = replace.commit(&mut |_| true, Some("6")).unwrap();
        assert_eq!(
            (report.written, report.bytes, report.deleted_meanwhile),
            (0, 0, 1)
        );
    }

    #[test]
    fn a_deletion_keeps_a_newer_object_and_buries_older_versions() {
        let dir = TempDir::new("delete-rv");
        let store = open(&dir);
        let x = key(&pods(), Some("a"), "x");
        put(&store, &pods(), Some("a"), "x", 9, "web");
        assert!(!store.delete(&x, Some("8")).unwrap(), "a late DELETED");
        assert!(get(&store, &pods(), Some("a"), "x").is_some());
        assert!(store.delete(&x, Some("12")).unwrap());
        assert_eq!(
            put(&store, &pods(), Some("a"), "x", 11, "web"),
            PutOutcome::Stale
        );
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        let old = object(Some("a"), "x", 11, "web");
        assert_eq!(
            replace.put(Some("a"), "x", &old, Some("11")).unwrap(),
            PutOutcome::Stale
        );
        drop(replace);
        assert!(matches!(
            put(&store, &pods(), Some("a"), "x", 12, "web"),
            PutOutcome::Written { .. }
        ));
    }

    #[test]
    fn full_disk_and_used_up_quota_are_disk_full() {
        let io = |errno| StoreError::Io {
            op: StoreOp::Write,
            path: PathBuf::from("x"),
            source: io::Error::from_raw_os_error(errno),
        };
        assert!(io(libc::ENOSPC).is_disk_full());
        assert!(io(libc::EDQUOT).is_disk_full());
        assert!(!io(libc::EACCES).is_disk_full());
    }

    #[test]
    fn unchanged_relist_writes_nothing() {
        let dir = TempDir::new("replace-unchanged");
        let store = open(&dir);
        seed_replace(&store);
        let mut replace = store.begin_replace(&pods(), Some("b")).unwrap();
        assert_eq!(
            replace
                .put(Some("b"), "q", &object(Some("b"), "q", 5, "web"), Some("5"))
                .unwrap(),
            PutOutcome::Identical
        );
        assert!(staging_entries(&dir.root()).is_empty());
        // A journal would be written (and this hook stop the commit) if anything changed.
        replace.crash_at = Some(Step::JournalWritten);
        let report = replace.commit(&mut |_| true, Some("5")).unwrap();
        assert_eq!(
            report,
            ReplaceReport {
                identical: 1,
                ..ReplaceReport::default()
            }
        );
        assert!(staging_entries(&dir.root()).is_empty());
    }

    #[test]
    fn replace_refuses_objects_outside_its_namespace() {
        let dir = TempDir::new("replace-scope");
        let store = open(&dir);
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        for ns in [Some("b"), None] {
            match replace.put(ns, "x", b"{}", None) {
                Err(StoreError::OutsideScope { .. }) => {}
                other => panic!("{ns:?}: {other:?}"),
            }
        }
        drop(replace);
        assert!(!store.has_collection(&pods()));
    }

    #[test]
    fn abandoned_replace_changes_nothing() {
        let dir = TempDir::new("replace-abandon");
        let store = open(&dir);
        seed_replace(&store);
        let before = snapshot(&dir.root());
        let mut replace = store.begin_replace(&pods(), None).unwrap();
        replace
            .put(Some("a"), "x", &object(Some("a"), "x", 9, "web"), Some("9"))
            .unwrap();
        replace
            .put(
                Some("c"),
                "new",
                &object(Some("c"), "new", 9, "web"),
                Some("9"),
            )
            .unwrap();
        assert_eq!(staging_entries(&dir.root()).len(), 2);
        drop(replace);
        let mut replace = store.begin_replace(&nodes(), None).unwrap();
        replace
            .put(
                None,
                "edge-1",
                &object(None, "edge-1", 9, "node"),
                Some("9"),
            )
            .unwrap();
        drop(replace);
        assert_eq!(snapshot(&dir.root()), before);
        assert!(!store.has_collection(&nodes()));
        assert!(staging_entries(&dir.root()).is_empty());
    }

    const LIST_RV: &str = "10";

    /// The crash scenario's stored state: a/x is updated, a/y is unchanged, a/d goes,
    /// b/k is out of scope and b/z newer than the list; c/n is new in a new namespace.
    fn seed_crash(store: &Store) {
        put(store, &pods(), Some("a"), "x", 5, "web");
        put(store, &pods(), Some("a"), "y", 5, "web");
        put(store, &pods(), Some("a"), "d", 5, "web");
        put(store, &pods(), Some("b"), "k", 5, "other");
        put(store, &pods(), Some("b"), "z", 50, "web");
    }

    fn stage_crash(store: &Store) -> Replace<'_> {
        let mut replace = store.begin_replace(&pods(), None).unwrap();
        replace
            .put(Some("c"), "n", &object(Some("c"), "n", 9, "web"), Some("9"))
            .unwrap();
        replace
            .put(Some("a"), "y", &object(Some("a"), "y", 5, "web"), Some("5"))
            .unwrap();
        replace
            .put(Some("a"), "x", &object(Some("a"), "x", 8, "web"), Some("8"))
            .unwrap();
        replace
    }

    /// Runs the crash scenario, stopping the commit at `step`; returns the store's root.
    fn crash_at(dir: &TempDir, step: Step) -> Result<ReplaceReport, StoreError> {
        let store = open(dir);
        seed_crash(&store);
        let mut replace = stage_crash(&store);
        replace.crash_at = Some(step);
        replace.commit(&mut app_web, Some(LIST_RV))
    }

    /// The stored state before and after the crash scenario's replacement.
    fn crash_states() -> (Snapshot, Snapshot) {
        let dir = TempDir::new("crash-baseline");
        let store = open(&dir);
        seed_crash(&store);
        let old = snapshot(&dir.root());
        let x = object(Some("a"), "x", 8, "web");
        let n = object(Some("c"), "n", 9, "web");
        let report = stage_crash(&store)
            .commit(&mut app_web, Some(LIST_RV))
            .unwrap();
        let expected = ReplaceReport {
            written: 2,
            identical: 1,
            stale: 0,
            deleted: 1,
            kept_newer: 1,
            bytes: (x.len() + n.len()) as u64,
            deleted_meanwhile: 0,
        };
        assert_eq!(report, expected);
        let new = snapshot(&dir.root());
        assert_eq!(new["kubelet/pods.v1.core/a/x"], Some(x));
        assert_eq!(new["kubelet/pods.v1.core/c/n"], Some(n));
        assert!(!new.contains_key("kubelet/pods.v1.core/a/d"));
        assert!(
            new.contains_key("kubelet/pods.v1.core/b/k")
                && new.contains_key("kubelet/pods.v1.core/b/z")
        );
        assert!(!old.contains_key("kubelet/pods.v1.core/c"));
        (old, new)
    }

    #[test]
    fn crash_at_any_step_of_a_replace_recovers_all_old_or_all_new() {
        let (old, new) = crash_states();
        let report = |rolled_forward, removed_temp_files| RecoveryReport {
            rolled_forward,
            rolled_back: 0,
            removed_temp_files,
            removed_event_dirs: 0,
        };
        // The journal's operations: delete a/d, rename a/x, rename c/n.
        let steps = [
            (Step::Staged, &old, report(0, 2)),
            (Step::JournalWritten, &old, report(0, 3)),
            (Step::Synced, &old, report(0, 3)),
            (Step::JournalVisible, &new, report(1, 0)),
            (Step::JournalDurable, &new, report(1, 0)),
            (Step::DirsMade, &new, report(1, 0)),
            (Step::Applied(0), &new, report(1, 0)),
            (Step::Applied(1), &new, report(1, 0)),
            (Step::Applied(2), &new, report(1, 0)),
            (Step::DirsSynced, &new, report(1, 0)),
            (Step::JournalRemoved, &new, report(0, 0)),
        ];
        for (step, expected, expected_report) in steps {
            let dir = TempDir::new("crash");
            match crash_at(&dir, step) {
                Err(StoreError::InjectedCrash) => {}
                other => panic!("{step:?}: no crash: {other:?}"),
            }
            let (store, report) = Store::open(&dir.root()).unwrap();
            assert_eq!(&snapshot(&dir.root()), expected, "crash at {step:?}");
            assert_eq!(report, expected_report, "crash at {step:?}");
            assert!(staging_entries(&dir.root()).is_empty(), "crash at {step:?}");
            // And the store works on.
            put(&store, &pods(), Some("a"), "after", 1, "web");
            assert!(get(&store, &pods(), Some("a"), "after").is_some());
        }
        // Those were all the steps: there is no fourth operation to crash after.
        let dir = TempDir::new("crash");
        assert!(crash_at(&dir, Step::Applied(3)).is_ok());
        assert_eq!(snapshot(&dir.root()), new);
    }

    fn journal_path(root: &Path) -> PathBuf {
        let journals: Vec<PathBuf> = fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with(JOURNAL_PREFIX)
            })
            .collect();
        assert_eq!(journals.len(), 1, "{journals:?}");
        journals.into_iter().next().unwrap()
    }

    #[test]
    fn journal_replayed_twice_is_harmless() {
        let (_, new) = crash_states();
        let dir = TempDir::new("replay");
        assert!(matches!(
            crash_at(&dir, Step::Applied(1)),
            Err(StoreError::InjectedCrash)
        ));
        let journal = journal_path(&dir.root());
        let text = fs::read_to_string(&journal).unwrap();
        assert!(
            text.starts_with("tinyhub-journal 1\nmkdir\tkubelet\n"),
            "{text}"
        );
        assert!(text.ends_with("end\t7\n"), "{text}");
        let (_, report) = Store::open(&dir.root()).unwrap();
        assert_eq!(report.rolled_forward, 1);
        assert_eq!(snapshot(&dir.root()), new);
        fs::write(&journal, &text).unwrap();
        let (_, report) = Store::open(&dir.root()).unwrap();
        assert_eq!(report.rolled_forward, 1);
        assert_eq!(snapshot(&dir.root()), new);
    }

    #[test]
    fn incomplete_or_hostile_journal_is_rolled_back() {
        let (old, _) = crash_states();
        let dir = TempDir::new("torn-journal");
        let root = dir.root();
        assert!(matches!(
            crash_at(&dir, Step::JournalVisible),
            Err(StoreError::InjectedCrash)
        ));
        let journal = journal_path(&root);
        let text = fs::read_to_string(&journal).unwrap();
        // Torn at every line boundary and in the middle of the end marker.
        let mut cuts: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        cuts.pop();
        cuts.push(text.len() - 2);
        for cut in cuts {
            fs::write(&journal, &text[..cut]).unwrap();
            // Keep the staged files for the next round: recovery would remove them.
            let staged: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(root.join(STAGING))
                .unwrap()
                .map(|e| e.unwrap().path())
                .map(|p| (p.clone(), fs::read(&p).unwrap()))
                .collect();
            let (_, report) = Store::open(&root).unwrap();
            assert_eq!(
                (report.rolled_forward, report.rolled_back),
                (0, 1),
                "cut at {cut}"
            );
            assert_eq!(snapshot(&root), old, "cut at {cut}");
            for (path, bytes) in staged {
                fs::write(path, bytes).unwrap();
            }
        }

        let victim = dir.0.join("victim");
        fs::write(&victim, b"keep").unwrap();
        let hostile = [
            "tinyhub-journal 1\ndelete\t../victim\nend\t1\n",
            "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/../../../../victim\nend\t1\n",
            "tinyhub-journal 1\nrename\t../victim\tkubelet/pods.v1.core/a/x\nend\t1\n",
            "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nend\t2\n",
            "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nmkdir\tkubelet/x\nend\t2\n",
            "tinyhub-journal 2\ndelete\tkubelet/pods.v1.core/a/x\nend\t1\n",
            "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nend\t1\ndelete\tkubelet/pods.v1.core/a/y\n",
        ];
        for (i, text) in hostile.iter().enumerate() {
            fs::write(root.join(format!("{JOURNAL_PREFIX}{i}")), text).unwrap();
        }
        fs::write(root.join(format!("{JOURNAL_PREFIX}junk")), b"\xff\xfe").unwrap();
        let (_, report) = Store::open(&root).unwrap();
        assert_eq!(
            (report.rolled_forward, report.rolled_back),
            (0, hostile.len() + 1)
        );
        assert_eq!(snapshot(&root), old);
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn recovery_removes_leftovers() {
        let dir = TempDir::new("leftovers");
        let root = dir.root();
        {
            let store = open(&dir);
            seed_replace(&store);
            let mut replace = store.begin_replace(&pods(), None).unwrap();
            replace
                .put(Some("a"), "x", &object(Some("a"), "x", 9, "web"), Some("9"))
                .unwrap();
            replace
                .put(
                    Some("c"),
                    "new",
                    &object(Some("c"), "new", 9, "web"),
                    Some("9"),
                )
                .unwrap();
            // The process dies: nothing is cleaned up.
            std::mem::forget(replace);
        }
        let before = snapshot(&root);
        fs::create_dir_all(root.join(STAGING).join("d.7/a")).unwrap();
        fs::write(root.join(STAGING).join("d.7/a/x"), b"{}").unwrap();
        fs::write(root.join(STAGING).join("p.3"), b"{\"half").unwrap();
        let (_, report) = Store::open(&root).unwrap();
        assert_eq!(
            report,
            RecoveryReport {
                rolled_forward: 0,
                rolled_back: 0,
                removed_temp_files: 4,
                removed_event_dirs: 0,
            }
        );
        assert!(staging_entries(&root).is_empty());
        assert_eq!(snapshot(&root), before);
        let (_, report) = Store::open(&root).unwrap();
        assert_eq!(report, RecoveryReport::default());
    }

    /// Each version pads the object to a length of its own, so a torn read cannot pass.
    fn versioned(name: &str, version: usize) -> Vec<u8> {
        let pad = "p".repeat(version * 37 % 5000);
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"a","resourceVersion":"{version}"}},"pad":"{pad}"}}"#)
            .into_bytes()
    }

    fn check_whole(bytes: &[u8]) {
        let value: serde_json::Value = serde_json::from_slice(bytes).expect("a whole JSON object");
        let version: usize = value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(value["pad"].as_str().unwrap().len(), version * 37 % 5000);
    }

    #[test]
    fn readers_never_see_a_torn_object() {
        let dir = TempDir::new("concurrent");
        let store = open(&dir);
        let x = key(&pods(), Some("a"), "x");
        store.put(&x, &versioned("x", 1), Some("1")).unwrap();
        let done = AtomicBool::new(false);
        let (started, first_read) = mpsc::channel();
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0usize;
                while !done.load(Ordering::Acquire) {
                    check_whole(&store.get(&x).unwrap().expect("x is never absent"));
                    for object in store.list(&pods(), Some("a"), None).unwrap().unwrap() {
                        check_whole(&object.unwrap().bytes);
                    }
                    reads += 1;
                    if reads == 1 {
                        started.send(()).unwrap();
                    }
                }
                reads
            });
            first_read.recv().unwrap();
            for version in 2..300 {
                if version % 10 == 0 {
                    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
                    let rv = version.to_string();
                    replace
                        .put(Some("a"), "x", &versioned("x", version), Some(&rv))
                        .unwrap();
                    replace
                        .put(Some("a"), "y", &versioned("y", version), Some(&rv))
                        .unwrap();
                    replace.commit(&mut |_| true, Some(&rv)).unwrap();
                } else {
                    store
                        .put(&x, &versioned("x", version), Some(&version.to_string()))
                        .unwrap();
                }
            }
            done.store(true, Ordering::Release);
            assert!(reader.join().unwrap() >= 1);
        });
        assert_eq!(store.get(&x).unwrap(), Some(versioned("x", 299)));
    }

    const FULL_DISK_ROOT: &str = "TINYHUB_STORE_TEST_FULL_DISK_ROOT";

    /// A file-size limit (`ulimit -f`, with SIGXFSZ ignored) makes writes fail part-way,
    /// as a full disk does, in a child process running `full_disk_child`.
    #[test]
    fn failed_writes_keep_the_old_files() {
        let dir = TempDir::new("full-disk");
        let root = dir.root();
        {
            let store = open(&dir);
            put(&store, &pods(), Some("a"), "x", 5, "web");
            store.put_non_resource("version", b"{}").unwrap();
        }
        let before = snapshot(&root);
        let test = format!(
            "{}::full_disk_child",
            module_path!().split_once("::").unwrap().1
        );
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"trap '' XFSZ; ulimit -f 8 && exec "$0" "$@""#)
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &test,
                "--ignored",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(FULL_DISK_ROOT, &root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{stderr}"
        );
        // Checked before any recovery could hide leftovers.
        assert!(staging_entries(&root).is_empty());
        assert_eq!(snapshot(&root), before);
    }

    #[test]
    #[ignore = "run by failed_writes_keep_the_old_files in a child process with a file size limit"]
    fn full_disk_child() {
        let root = PathBuf::from(
            std::env::var_os(FULL_DISK_ROOT).expect("run by failed_writes_keep_the_old_files"),
        );
        let (store, _) = Store::open(&root).unwrap();
        let old = object(Some("a"), "x", 5, "web");
        let big = object(Some("a"), "x", 6, &"y".repeat(64 * 1024));
        match store.put(&key(&pods(), Some("a"), "x"), &big, Some("6")) {
            Err(StoreError::Io {
                op: StoreOp::Write,
                path,
                ..
            }) => assert!(path.starts_with(root.join(STAGING))),
            other => panic!("{other:?}"),
        }
        assert_eq!(get(&store, &pods(), Some("a"), "x"), Some(old.clone()));
        assert!(staging_entries(&root).is_empty());
        assert!(store.put_non_resource("version", &big).is_err());
        assert_eq!(
            store.get_non_resource("version").unwrap().as_deref(),
            Some(&b"{}"[..])
        );

        // A replacement whose object, then whose journal, cannot be written.
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        assert!(replace.put(Some("a"), "x", &big, Some("6")).is_err());
        for i in 0..300 {
            let name = format!("new-{i:03}");
            replace
                .put(
                    Some("a"),
                    &name,
                    &object(Some("a"), &name, 6, "web"),
                    Some("6"),
                )
                .unwrap();
        }
        match replace.commit(&mut |_| true, Some("6")) {
            Err(StoreError::Io {
                op: StoreOp::Write,
                path,
                ..
            }) => assert!(path.starts_with(root.join(STAGING))),
            other => panic!("{other:?}"),
        }
        assert!(staging_entries(&root).is_empty());
        assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/x"]);
        assert_eq!(get(&store, &pods(), Some("a"), "x"), Some(old));
    }

    #[test]
    fn token_answers_live_outside_every_collection() {
        let dir = TempDir::new("tokens");
        let store = open(&dir);
        let key = TokenKey {
            component: "kubelet".into(),
            namespace: "default".into(),
            name: "builder".into(),
            digest: "ab".repeat(32),
        };
        assert_eq!(store.get_token(&key).unwrap(), None);
        store.put_token(&key, b"{\"status\":{}}").unwrap();
        assert_eq!(
            store.put_token(&key, b"{\"status\":{}}").unwrap(),
            PutOutcome::Identical
        );
        assert_eq!(
            store.get_token(&key).unwrap().as_deref(),
            Some(&b"{\"status\":{}}"[..])
        );
        let file = dir
            .root()
            .join("kubelet/tokens/default/builder")
            .join("ab".repeat(32));
        assert_eq!(mode(&file), 0o600);
        // A service account list does not see it.
        let accounts = CollectionKey::new("kubelet", "serviceaccounts", "v1", "");
        assert_eq!(names(&store, &accounts, None, None), None);
        // Another pod's answer, not renewed for longer than TOKEN_STALE, goes at the next
        // put; a recent one stays.
        let account = dir.root().join("kubelet/tokens/default/builder");
        let other = |digest: &str| TokenKey {
            digest: digest.repeat(32),
            ..key.clone()
        };
        store.put_token(&other("cd"), b"{}").unwrap();
        store.put_token(&other("ef"), b"{}").unwrap();
        let old = SystemTime::now() - TOKEN_STALE - Duration::from_secs(60);
        File::options()
            .write(true)
            .open(account.join("cd".repeat(32)))
            .unwrap()
            .set_modified(old)
            .unwrap();
        store
            .put_token(&key, b"{\"status\":{\"renewed\":1}}")
            .unwrap();
        assert_eq!(store.get_token(&other("cd")).unwrap(), None);
        assert!(store.get_token(&other("ef")).unwrap().is_some());
        assert!(store.get_token(&key).unwrap().is_some());
        let hostile = TokenKey {
            name: "../x".into(),
            ..key
        };
        assert!(store.get_token(&hostile).is_err());
        assert!(store.put_token(&hostile, b"{}").is_err());
    }

    #[test]
    fn event_collections_of_older_versions_are_removed_at_start() {
        let dir = TempDir::new("events");
        let root = dir.root();
        {
            let store = open(&dir);
            for component in ["kubelet", "kube-proxy"] {
                let events = CollectionKey::new(component, "events", "v1", "");
                put(&store, &events, Some("default"), "e1", 1, "x");
            }
            let new_events = CollectionKey::new("kubelet", "events", "v1", "events.k8s.io");
            put(&store, &new_events, Some("default"), "e2", 1, "x");
            put(&store, &pods(), Some("default"), "web", 1, "web");
            // Not events: another group's kind that happens to be called so, and a pod
            // named like an event directory.
            let other = CollectionKey::new("kubelet", "events", "v1", "example.com");
            put(&store, &other, Some("default"), "e3", 1, "x");
            put(&store, &pods(), Some("default"), "events.v1.core", 1, "web");
        }
        let (store, report) = Store::open(&root).unwrap();
        assert_eq!(report.removed_event_dirs, 3);
        let paths: Vec<String> = snapshot(&root).into_keys().collect();
        assert!(
            !paths.iter().any(|p| p.contains("events.v1.core/")),
            "{paths:?}"
        );
        assert!(
            !paths.iter().any(|p| p.contains("events.k8s.io")),
            "{paths:?}"
        );
        assert!(paths.contains(&"kubelet/events.v1.example.com/default/e3".to_owned()));
        assert!(get(&store, &pods(), Some("default"), "events.v1.core").is_some());
        assert!(staging_entries(&root).is_empty());
        drop(store);
        assert_eq!(Store::open(&root).unwrap().1, RecoveryReport::default());
    }
}
