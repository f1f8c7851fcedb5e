//! List answers: a [`Replace`] stages the answer's objects, and its commit makes them
//! visible all at once through a journal, deleting what the answer left out.
//!
//! [`Replace::put`] writes each object that differs from the stored one to
//! `.staging/r.<id>.<seq>` without an fsync, also one older than the stored one: whether
//! the answer is whole, and so wins over every stored version (see "Whose version wins" in
//! `mod.rs`), is known only at the commit. [`Replace::commit`] (a whole answer) or
//! [`Replace::commit_partial`] then:
//!
//! 1. decides which staged objects are written (a partial answer drops those older than
//!    the stored ones; either compares again what changed while it was staged), walks the
//!    stored objects of the scope in (namespace, name) order, merging with the staged names
//!    sorted the same way (a whole answer only: a partial one deletes nothing), and writes
//!    `.staging/j.<id>`: the directories to make, the renames and the deletes;
//! 2. `syncfs` once on the cache filesystem (staged objects and journal are durable), then
//!    fsyncs the journal and renames it to `<root>/.journal.<id>`, and fsyncs the root:
//!    this rename is the commit point;
//! 3. applies the journal, fsyncs every directory it touched, removes the journal and
//!    fsyncs the root again (so a stale journal can never be replayed over later writes).
//!
//! When nothing differs, no journal is written and nothing is synced: a relist of an
//! unchanged collection costs reads only.
//!
//! The journal's format and how recovery applies it: `journal.rs`.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

#[cfg(doc)]
use super::StoreOptions;
use super::error::{StoreError, StoreOp, io_err};
use super::fs::{
    all_real_dirs, read_object, real_dir, remove_quietly, sync_dir, sync_filesystem, write_new_file,
};
use super::index::{Known, entry_at_rv};
use super::journal::{CommitStep, JOURNAL_PREFIX, JournalWriter, RelPath};
use super::list::NameCursor;
use super::recent::Changed;
use super::usage::{Bucket, Weight, file_len};
use super::{
    PutOutcome, Store, check_collection, check_segment, kind_dirs_below_root, next_id, stored_rv,
    unchanged,
};
use crate::cache::key::{CollectionKey, ObjectKey, rv_newer};

/// What a committed replacement did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReplaceReport {
    /// Objects written.
    pub written: usize,
    /// Objects already stored with the same bytes.
    pub identical: usize,
    /// Objects not written because the stored one is newer, or a deletion made them stale.
    pub stale: usize,
    /// Stored objects in scope but absent from the answer, removed.
    pub deleted: usize,
    /// Stored objects absent from the answer but newer than it and stored while it was
    /// staged (created after it was taken), kept.
    pub kept_newer: usize,
    /// Objects of the answer a watch deleted while the answer was staged, not brought back.
    pub deleted_meanwhile: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// The kind directory a replacement commits into.
struct KindDir {
    /// The directories above the kind's, from the component's down (the view's, for a
    /// metadata view), as the journal names them.
    above: Vec<String>,
    /// `<component>/<resource>.<version>.<group>` (or
    /// `<component>/partialobjectmetadatas.v1.meta.k8s.io/<resource>.<version>.<group>`), as
    /// the journal names it.
    rel: String,
    /// The same under the cache root.
    dir: PathBuf,
}

impl KindDir {
    fn of(replace: &Replace<'_>) -> KindDir {
        let (above, rel) = kind_dirs_below_root(&replace.collection);
        let dir = replace.store.root.join(&rel);
        KindDir { above, rel, dir }
    }

    /// Whether the kind's directory and every one above it are real directories.
    fn all_real(&self, root: &Path) -> Result<bool, StoreError> {
        let mut dirs: Vec<PathBuf> = self.above.iter().map(|rel| root.join(rel)).collect();
        dirs.push(self.dir.clone());
        all_real_dirs(&dirs)
    }
}

impl Store {
    /// Starts replacing what this collection holds in `namespace` (every namespace and
    /// the cluster-scoped objects when `None`) with a list answer.
    pub(crate) fn begin_replace(
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
            staged_bytes: 0,
            deleted: Weight::default(),
            weighed: false,
            collection_checked: false,
            namespace_checked: None,
        })
    }
}

/// Whether a stored object left out of a whole answer is in its scope (the caller checks
/// the request's selectors), and so deleted.
type InScope<'f> = &'f mut dyn FnMut(&[u8]) -> bool;

/// A list answer being staged; see [`Store::begin_replace`].
///
/// Holds the answer's names, not its objects: their bytes in one string, plus 20 bytes an
/// object on a 32-bit target (40 on 64-bit).
pub(crate) struct Replace<'s> {
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
    /// Bytes written to `.staging` for it (`usage.rs`), released when it ends either way.
    staged_bytes: u64,
    /// What the journal's deletes remove (`usage.rs`).
    deleted: Weight,
    /// The commit weighed what it renamed and deleted: no recount of the kind directory.
    weighed: bool,
    /// The component and kind directories were found to be real directories.
    collection_checked: bool,
    /// The last namespace directory found to be a real directory.
    namespace_checked: Option<String>,
}

/// Why a staged object is not written after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// A watch deleted it while the answer was staged.
    DeletedMeanwhile,
    /// The stored version is newer, or a tombstone buries this one.
    Stale,
    /// The same bytes are stored now.
    Identical,
}

/// One object of the answer: where its key lies in `Replace::keys`, and its staged file.
#[derive(Debug, Clone, Copy)]
struct Staged {
    start: usize,
    namespace_len: usize,
    name_len: usize,
    /// The staged file's sequence number; `None` when nothing was written.
    temp: Option<usize>,
    /// The staged file's size.
    bytes: u64,
    /// A stored copy existed when this was staged: if it is gone by the commit, a watch
    /// deleted it meanwhile, and the (older) list must not bring it back.
    existed: bool,
    /// The stored version was newer, or a tombstone buried this one, when it was staged:
    /// written only if the answer turns out whole (see [`Replace::commit`]).
    stale: bool,
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
    pub(crate) fn set_list_rv(&mut self, rv: Option<&str>) {
        self.list_rv = rv.and_then(|rv| rv.parse().ok());
    }

    /// Stage one object of the list answer (written to a temporary file now, not yet
    /// visible). Identical objects are not written. An object older than the stored one, or
    /// buried by a tombstone, is staged all the same and answered [`PutOutcome::Stale`]:
    /// whether the answer is whole, and so wins over it, is known only at the commit.
    /// `rv` is `bytes`' own `metadata.resourceVersion` (the caller read their head).
    pub(crate) fn put(
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
        let (at, content, known) = {
            let probe = Self::set_probe(&mut self.probe, namespace, name);
            let index = self.store.index();
            let at = index.key_hash(probe);
            let content = index.content_hash(bytes);
            (at, content, index.judge(at, content, rv))
        };
        let (existed, outcome) = match known {
            Known::Unchanged(outcome) => (true, Some(outcome)),
            Known::Differs => (true, None),
            Known::Unknown => {
                let existing = self.read_stored(namespace, name)?;
                let outcome = unchanged(existing.as_deref(), bytes, rv);
                if outcome == Some(PutOutcome::Identical) {
                    // The stored bytes are these: their version is `rv`, not parsed again
                    // (a whole object's parse cost more than the rest of the put).
                    self.store.index().record(at, entry_at_rv(rv, content));
                }
                (existing.is_some(), outcome)
            }
        };
        let outcome = match outcome {
            None if self.buried(namespace, name, rv) => Some(PutOutcome::Stale),
            outcome => outcome,
        };
        let stale = outcome == Some(PutOutcome::Stale);
        let temp = match outcome {
            Some(PutOutcome::Identical) => None,
            _ => {
                let seq = self.entries.len();
                write_new_file(&self.temp_path(seq), bytes, false)?;
                self.staged_bytes += bytes.len() as u64;
                self.store.weigh_staging(true, bytes.len() as u64, 1);
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
            bytes: bytes.len() as u64,
            existed,
            stale,
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

    /// Make a whole answer visible all at once: the cloud's whole list of the scope replaces
    /// it, whatever resourceVersions the cache holds (they are opaque, and go backwards
    /// after an etcd restore). Every staged object replaces its file, and every cached object
    /// of this collection and namespace scope that was not in the answer and for which
    /// `in_scope(bytes)` is true (the caller checks the request's selectors) is deleted.
    /// Objects outside the scope stay. The kind (and namespace) directory exists afterwards
    /// even for an empty answer.
    ///
    /// What was stored, or buried by a tombstone, before [`Store::begin_replace`] never
    /// stops the answer. Only what the cloud said while it was being staged (a watch event
    /// or a get stored or deleted an object meanwhile) is compared: a staged object older
    /// than such a change is not written, one deleted meanwhile is not brought back, and an
    /// object stored meanwhile at a resourceVersion newer than `list_rv` (created after the
    /// list was taken) is not deleted.
    ///
    /// Versions of a deleted object up to its own (or up to `list_rv`, if lower) are stale
    /// from then on (see [`Store::delete`]), also when the commit then fails: the answer left
    /// it out anyway.
    pub(crate) fn commit(
        self,
        in_scope: &mut dyn FnMut(&[u8]) -> bool,
        list_rv: Option<&str>,
    ) -> Result<ReplaceReport, StoreError> {
        self.finish(Some(in_scope), list_rv)
    }

    /// Make an answer that is not known to be whole visible all at once (a page, a list
    /// with an unreadable item): it deletes nothing, and never replaces a stored version
    /// newer than its own nor one a tombstone buries.
    pub(crate) fn commit_partial(self, list_rv: Option<&str>) -> Result<ReplaceReport, StoreError> {
        self.finish(None, list_rv)
    }

    /// [`Replace::commit`] when `in_scope` is given, else [`Replace::commit_partial`].
    fn finish(
        mut self,
        in_scope: Option<InScope<'_>>,
        list_rv: Option<&str>,
    ) -> Result<ReplaceReport, StoreError> {
        let result = self.run_commit(in_scope, list_rv);
        if !self.weighed {
            // Renamed into place, deleted, or left staged: the kind directory says which.
            self.store.recount(&self.collection);
        }
        // Success renamed every staged file into place: nothing is left to remove.
        if result.is_ok() {
            self.armed = false;
        }
        // An injected crash cleans nothing up, as a real one would: recovery has to.
        if matches!(result, Err(StoreError::InjectedCrash)) {
            self.armed = false;
        }
        result
    }

    /// The commit protocol of the module doc, step by step.
    fn run_commit(
        &mut self,
        in_scope: Option<InScope<'_>>,
        list_rv: Option<&str>,
    ) -> Result<ReplaceReport, StoreError> {
        self.checkpoint(CommitStep::Staged)?;
        self.set_list_rv(list_rv);
        let keys = &self.keys;
        self.entries.sort_by(|a, b| a.key(keys).cmp(&b.key(keys)));
        let changed = self.changed_since_begin();
        self.settle(in_scope.is_some(), &changed)?;
        let kind = KindDir::of(self);
        // Step 1: the journal.
        let journal_temp = self.journal_temp_path();
        let mut journal = JournalWriter::new(&journal_temp);
        self.journal_dirs(&mut journal, &kind);
        self.journal_changes(&mut journal, &kind, in_scope, list_rv, &changed)?;
        let Some(journal_file) = journal.finish()? else {
            // Nothing to rename or delete: no journal, no sync; the collection must exist.
            let store = self.store;
            for rel in &kind.above {
                store.ensure_dir(&store.root.join(rel))?;
            }
            store.ensure_dir(&kind.dir)?;
            if let Some(ns) = &self.namespace {
                store.ensure_dir(&kind.dir.join(ns))?;
            }
            self.weighed = true;
            return Ok(self.report);
        };
        // From here the collection's files change (or may, should a step fail).
        self.store.moved(&kind.rel);
        // Step 2: the commit point.
        let journal_path = self.make_durable(journal_file, &journal_temp)?;
        let weights = self.journal_weights(&kind);
        // Step 3: applied, and gone.
        match self.apply(&journal_path)? {
            Some(e) => Err(e),
            None => {
                // Applied whole: what it renamed and deleted is the change.
                if let Some((gone, added)) = weights {
                    let bucket = Bucket::Collection(kind.rel.clone());
                    self.store.weigh_rows(&bucket, gone, added);
                    self.weighed = true;
                }
                Ok(self.report)
            }
        }
    }

    /// What the journal removes (the files its renames replace, its deletes) and adds (the
    /// staged files): one stat per renamed object, none for the rest of the kind. `None`
    /// when an answer named one object twice (two renames onto one file): the kind is
    /// recounted then.
    fn journal_weights(&self, kind: &KindDir) -> Option<(Weight, Weight)> {
        let (mut gone, mut added) = (self.deleted, Weight::default());
        let mut last = None;
        for entry in self.entries.iter().filter(|e| e.temp.is_some()) {
            let (ns, name) = entry.key(&self.keys);
            if last == Some((ns, name)) {
                return None;
            }
            last = Some((ns, name));
            let dir = match ns {
                "" => kind.dir.clone(),
                ns => kind.dir.join(ns),
            };
            if let Some(old) = file_len(&dir.join(name)) {
                gone.bytes += old;
                gone.files += 1;
            }
            added.bytes += entry.bytes;
            added.files += 1;
        }
        Some((gone, added))
    }

    /// The objects changed since staging began (none, cheaply, when nothing was counted).
    fn changed_since_begin(&self) -> Changed {
        if self.store.changes.load(Ordering::Relaxed) == self.changes_at_begin {
            return Changed::Only(HashSet::new());
        }
        self.store
            .recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .since(self.changes_at_begin)
    }

    /// The journal's directories: the component's, the kind's and each namespace's that an
    /// object is renamed into (entries are sorted, so each namespace comes once).
    fn journal_dirs(&self, journal: &mut JournalWriter, kind: &KindDir) {
        for rel in &kind.above {
            journal.mkdir(rel.clone());
        }
        journal.mkdir(kind.rel.clone());
        let mut last_namespace = self.namespace.as_deref();
        if let Some(ns) = last_namespace {
            journal.mkdir(format!("{}/{ns}", kind.rel));
        }
        for entry in self.entries.iter().filter(|e| e.temp.is_some()) {
            let (ns, _) = entry.key(&self.keys);
            if !ns.is_empty() && last_namespace != Some(ns) {
                journal.mkdir(format!("{}/{ns}", kind.rel));
                last_namespace = Some(ns);
            }
        }
    }

    /// The journal's renames of the staged objects and, for a whole answer (`in_scope`
    /// given), the deletes of stored objects in scope it left out: the stored names merged
    /// with the answer's, both in (namespace, name) order.
    fn journal_changes(
        &mut self,
        journal: &mut JournalWriter,
        kind: &KindDir,
        mut in_scope: Option<InScope<'_>>,
        list_rv: Option<&str>,
        changed: &Changed,
    ) -> Result<(), StoreError> {
        let store = self.store;
        let keys = &self.keys;
        let id = self.id;
        let rename = |journal: &mut JournalWriter, entry: &Staged| match entry.temp {
            Some(seq) => {
                let (namespace, name) = entry.key(keys);
                let target = RelPath {
                    kind: &kind.rel,
                    namespace,
                    name,
                };
                journal.line(format_args!("rename\tr.{id}.{seq}\t{target}"))
            }
            None => Ok(()),
        };
        let mut next = 0;
        // Only a whole answer deletes, so only it needs to read what it left out.
        let walk = in_scope.is_some();
        if walk && kind.all_real(&store.root)? {
            let mut cursor = NameCursor::open(kind.dir.clone(), self.namespace.as_deref(), None)?;
            while let Some(found) = cursor.next_name() {
                let (namespace, name) = found?;
                let stored = (namespace.as_deref().unwrap_or(""), name.as_str());
                while let Some(entry) = self.entries.get(next).filter(|e| e.key(keys) < stored) {
                    rename(journal, entry)?;
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
                if !in_scope.as_mut().is_some_and(|in_scope| in_scope(&bytes)) {
                    continue;
                }
                let rv = stored_rv(&bytes);
                let key = ObjectKey {
                    collection: self.collection.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                // Newer than the list and stored while it was staged: created after the list
                // was taken. Newer but stored before: not the cloud's now (an etcd restore,
                // a file planted on disk), and the whole list says so.
                if let (Some(list_rv), Some(rv)) = (list_rv, rv.as_deref())
                    && rv_newer(rv, list_rv)
                    && changed.contains(store.index().key_hash(&key))
                {
                    self.report.kept_newer += 1;
                    continue;
                }
                let target = RelPath {
                    kind: &kind.rel,
                    namespace: stored.0,
                    name: stored.1,
                };
                journal.line(format_args!("delete\t{target}"))?;
                self.deleted.bytes += bytes.len() as u64;
                self.deleted.files += 1;
                // The list says the object was gone at its version: a replay of a version
                // up to it (or up to the object's own, if lower) must not bring it back, nor
                // a partial list older than this one.
                if let Some(rv) = rv.as_deref().and_then(|rv| rv.parse::<u64>().ok()) {
                    let up_to = self.list_rv.map_or(rv, |list_rv| rv.min(list_rv));
                    store.bury(&key, up_to, self.list_rv.unwrap_or(rv));
                }
                self.report.deleted += 1;
            }
        }
        for entry in &self.entries[next..] {
            rename(journal, entry)?;
        }
        Ok(())
    }

    /// Step 2: staged objects and journal made durable, then the journal renamed to its
    /// visible name and the root synced: the commit point. Returns the journal's path.
    fn make_durable(
        &self,
        journal_file: fs::File,
        journal_temp: &std::path::Path,
    ) -> Result<PathBuf, StoreError> {
        let store = self.store;
        self.checkpoint(CommitStep::JournalWritten)?;
        sync_filesystem(&store.root_dir).map_err(io_err(StoreOp::Sync, &store.root))?;
        self.checkpoint(CommitStep::Synced)?;
        super::fs::synced();
        journal_file
            .sync_all()
            .map_err(io_err(StoreOp::Sync, journal_temp))?;
        drop(journal_file);
        let journal_path = store.root.join(format!("{JOURNAL_PREFIX}{}", self.id));
        fs::rename(journal_temp, &journal_path).map_err(io_err(StoreOp::Rename, &journal_path))?;
        self.checkpoint(CommitStep::JournalVisible)?;
        if let Err(e) = sync_dir(&store.root) {
            // Whether the journal would survive a crash is unknown: take it back, so the
            // replacement is fully undone rather than maybe replayed later.
            remove_quietly(&journal_path);
            return Err(e);
        }
        self.checkpoint(CommitStep::JournalDurable)?;
        Ok(journal_path)
    }

    /// Step 3: the journal applied, every directory it touched synced, the journal removed
    /// and the root synced. The first error that left the cache consistent is returned as a
    /// value (`Ok(Some)`), so the steps after it still run; an injected crash stops at once.
    fn apply(&self, journal_path: &std::path::Path) -> Result<Option<StoreError>, StoreError> {
        let store = self.store;
        let mut first_error =
            match store.apply_journal(journal_path, &mut |step| self.checkpoint(step)) {
                Ok(applied) => {
                    let mut first_error = applied.first_error;
                    for dir in &applied.touched {
                        if let Err(e) = sync_dir(dir) {
                            first_error.get_or_insert(e);
                        }
                    }
                    first_error
                }
                Err(StoreError::InjectedCrash) => return Err(StoreError::InjectedCrash),
                // A directory could not be made (nothing applied), or the journal not read
                // back (some of it applied, each object whole): the journal goes either way.
                Err(e) => Some(e),
            };
        self.checkpoint(CommitStep::DirsSynced)?;
        match fs::remove_file(journal_path) {
            Ok(()) => {
                if let Err(e) = sync_dir(&store.root) {
                    first_error.get_or_insert(e);
                }
            }
            Err(e) => {
                first_error.get_or_insert(io_err(StoreOp::Remove, journal_path)(e));
            }
        }
        self.checkpoint(CommitStep::JournalRemoved)?;
        Ok(first_error)
    }

    /// Decides which staged objects are written, now that it is known whether the answer is
    /// `whole` and which objects `changed` since staging began. An object changed meanwhile
    /// is compared again with its stored file and the tombstones (a watch event may have
    /// stored a newer version, or deleted it): rare, so the staged file is read back instead
    /// of keeping versions in memory. Any other object keeps its staging-time verdict, but a
    /// whole answer writes even those found stale then: the cloud's whole list wins over
    /// what the cache held before it.
    fn settle(&mut self, whole: bool, changed: &Changed) -> Result<(), StoreError> {
        let any_changed = !matches!(changed, Changed::Only(set) if set.is_empty());
        for i in 0..self.entries.len() {
            let entry = self.entries[i];
            let Some(seq) = entry.temp else { continue };
            // Nothing changed meanwhile and found current at staging: what staging counted
            // stands (the usual whole list), without a key or path built.
            if !any_changed && !entry.stale {
                continue;
            }
            let (namespace, name) = entry.key(&self.keys);
            let (namespace, name) = (
                (!namespace.is_empty()).then(|| namespace.to_owned()),
                name.to_owned(),
            );
            let touched = any_changed && {
                let probe = Self::set_probe(&mut self.probe, namespace.as_deref(), &name);
                changed.contains(self.store.index().key_hash(probe))
            };
            let temp = self.temp_path(seq);
            let (fate, staged_len) = if touched {
                let staged = read_object(&temp)?.unwrap_or_default();
                let fate = self.compare_again(namespace.as_deref(), &name, &staged, entry)?;
                (fate, Some(staged.len() as u64))
            } else if whole || !entry.stale {
                (None, None)
            } else {
                (Some(Fate::Stale), None)
            };
            // What staging counted stands.
            if fate.is_none() && !entry.stale {
                continue;
            }
            if fate == Some(Fate::Stale) && entry.stale {
                remove_quietly(&temp);
                self.entries[i].temp = None;
                continue;
            }
            let len = match staged_len {
                Some(len) => len,
                None => fs::metadata(&temp)
                    .map_err(io_err(StoreOp::Stat, &temp))?
                    .len(),
            };
            // Undo the count made at staging, then count what happens.
            if entry.stale {
                self.report.stale -= 1;
            } else {
                self.report.written -= 1;
                self.report.bytes -= len;
            }
            match fate {
                None => {
                    self.report.written += 1;
                    self.report.bytes += len;
                    continue;
                }
                Some(Fate::DeletedMeanwhile) => self.report.deleted_meanwhile += 1,
                Some(Fate::Stale) => self.report.stale += 1,
                Some(Fate::Identical) => self.report.identical += 1,
            }
            remove_quietly(&temp);
            self.entries[i].temp = None;
        }
        Ok(())
    }

    /// Why the `staged` copy of `namespace/name` must not be written, judged against the
    /// stored file and the tombstones as they are now; `None` when it is written.
    fn compare_again(
        &mut self,
        namespace: Option<&str>,
        name: &str,
        staged: &[u8],
        entry: Staged,
    ) -> Result<Option<Fate>, StoreError> {
        let staged_rv = stored_rv(staged);
        Ok(match self.read_stored(namespace, name)? {
            // Deleted meanwhile: the (older) list must not bring it back.
            None if entry.existed => Some(Fate::DeletedMeanwhile),
            // Also when the list staged it before any file existed: a watch may have
            // stored and then deleted it since.
            None if self.buried(namespace, name, staged_rv.as_deref()) => Some(Fate::Stale),
            None => None,
            Some(_) if self.buried(namespace, name, staged_rv.as_deref()) => Some(Fate::Stale),
            Some(stored) => match unchanged(Some(&stored), staged, staged_rv.as_deref()) {
                Some(PutOutcome::Identical) => Some(Fate::Identical),
                Some(_) => Some(Fate::Stale),
                None => None,
            },
        })
    }

    /// Whether version `rv` of this collection's `namespace/name` is buried in the store's
    /// tombstones.
    fn buried(&mut self, namespace: Option<&str>, name: &str, rv: Option<&str>) -> bool {
        let store = self.store;
        let tombstones = store
            .tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if tombstones.is_empty() {
            return false;
        }
        let probe = Self::set_probe(&mut self.probe, namespace, name);
        tombstones.buries(probe, rv, self.list_rv)
    }

    /// Points `probe` at `namespace/name`; once its buffers have grown, without allocating.
    fn set_probe<'p>(
        probe: &'p mut ObjectKey,
        namespace: Option<&str>,
        name: &str,
    ) -> &'p ObjectKey {
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
        probe
    }

    /// The stored bytes of one object of this collection, checking each directory on the
    /// way is real (not a symlink) once.
    fn read_stored(
        &mut self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (mut dirs, kind_dir) = self.store.kind_dirs(&self.collection);
        if !self.collection_checked {
            dirs.push(kind_dir.clone());
            if !all_real_dirs(&dirs)? {
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

    /// Where a crash can happen during a commit; [`StoreOptions::crash_at`] stops there.
    fn checkpoint(&self, step: CommitStep) -> Result<(), StoreError> {
        if self.store.options.crash_at == Some(step) {
            return Err(StoreError::InjectedCrash);
        }
        Ok(())
    }
}

impl Drop for Replace<'_> {
    /// Abandons an uncommitted (or failed) replacement: staged files go, nothing visible changes.
    fn drop(&mut self) {
        let staged = self.entries.iter().filter(|e| e.temp.is_some()).count() as u64;
        self.store.weigh_staging(false, self.staged_bytes, staged);
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
