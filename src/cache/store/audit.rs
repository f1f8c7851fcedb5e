//! `tinyhub cache verify`'s walk: every entry of the cache judged once, against the layout
//! the store writes and the checks it serves by (`check.rs`).
//!
//! One walk, one directory's names and one file's bytes in memory at a time (each file read
//! bounded, its head parsed only). Each problem is a path below the root, a [`Code`] and a
//! detail, with the collection it belongs to (what repair marks for a relist) and what
//! repair does about it ([`Action`]). The walk reads and `stat`s only: it writes nothing,
//! takes no lock and follows no symlink, so it runs beside a hub; then it leaves the
//! staging directory and the journals alone (the hub's work in progress), and a file that
//! vanishes while it looks is skipped. The quarantine is never looked into, and YurtHub's
//! `_internal` is known and left alone.
//!
//! An object's `kind` is judged against its collection's, which is what more than half of
//! its objects say (the kind directory names the plural, not the kind, and the cached
//! discovery documents are not consulted): a lone object of another kind is not caught.

use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::check::{Expect, FileRead, Judged, Refusal, check_object, read_judged};
use super::error::{StoreError, StoreOp, io_err};
use super::fs::{DIR_MODE, FILE_MODE};
use super::journal::{is_event_dir_name, journal_is_complete};
use super::relist::{RELIST_FILE, RelistMarks};
use super::synced::{BadRecord, SYNCED_FILE, parse_synced};
use super::view::{RootEntry, is_kind_dir_name};
use crate::cache::key::{METADATA_DIR, TokenKey};
use crate::cache::object::ObjectHead;

/// What is wrong with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Code {
    /// Larger than the store's read bound: never read.
    TooLarge,
    /// Not a JSON object (torn, empty), or an object without a name.
    NotObject,
    /// An object, but not the one its path names (name, namespace, apiVersion).
    NamesOther,
    /// A symlink where the store keeps files or directories.
    Symlink,
    /// A directory, FIFO or device where an object file belongs.
    NotAFile,
    /// A file where a directory belongs.
    NotADir,
    /// What an interrupted write leaves: a staged file, an incomplete journal, a YurtHub
    /// `tmp_*`, an events directory of an older version.
    Leftover,
    /// A complete journal not applied yet (the hub's next start would roll it forward).
    PendingJournal,
    /// A name that cannot be a cache entry, at its depth.
    Foreign,
    /// One of the store's records (`.synced`, `.grants`, `.error-keys`, `.relist`) that does
    /// not read.
    BadRecord,
    /// A file not 0600, a directory not 0700.
    Mode,
    /// Not owned by the cache root's owner.
    Owner,
}

impl Code {
    /// The code as `verify` prints it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::TooLarge => Refusal::TOO_LARGE,
            Code::NotObject => Refusal::NOT_OBJECT,
            Code::NamesOther => Refusal::NAMES_OTHER,
            Code::Symlink => "symlink",
            Code::NotAFile => "not-a-file",
            Code::NotADir => "not-a-dir",
            Code::Leftover => "leftover",
            Code::PendingJournal => "pending-journal",
            Code::Foreign => "foreign",
            Code::BadRecord => "bad-record",
            Code::Mode => "mode",
            Code::Owner => "owner",
        }
    }

    /// What `repair` does about it.
    pub(crate) fn action(self) -> Action {
        match self {
            Code::PendingJournal => Action::RollForward,
            Code::Mode => Action::Chmod,
            Code::Owner => Action::Chown,
            _ => Action::Quarantine,
        }
    }
}

/// What `repair` does about a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Moved into `.quarantine/<time>/`, never deleted.
    Quarantine,
    /// Its mode set to 0600 (a file) or 0700 (a directory), in place.
    Chmod,
    /// Given to the cache root's owner (only when run as root).
    Chown,
    /// Applied as the hub's recovery would.
    RollForward,
}

impl Action {
    /// As `verify -o json` says it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Quarantine => "quarantine",
            Action::Chmod => "chmod",
            Action::Chown => "chown",
            Action::RollForward => "roll-forward",
        }
    }
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The path below the cache root (`.` for the root itself).
    pub path: String,
    /// What is wrong.
    pub code: Code,
    /// The detail, one line.
    pub detail: String,
    /// The collection it belongs to, as (component, kind directory below the component's),
    /// when it is in one: a repair of it marks the collection for a relist.
    pub collection: Option<(String, String)>,
    /// Whether it is a directory (a mode of 0700 is wanted then).
    pub is_dir: bool,
}

/// How the walk runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AuditOptions {
    /// A hub runs on the cache: its staging directory and journals are its work in
    /// progress, not judged.
    pub hub_running: bool,
}

/// What the walk read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Files looked at.
    pub files: u64,
    /// Their bytes (by size; files too large are counted, never read).
    pub bytes: u64,
}

/// Walks the cache under `root`, calling `found` with each problem in walk order (the
/// root's entries sorted, each directory's sorted). An error only when a directory the
/// cache needs cannot be read.
pub(crate) fn walk(
    root: &Path,
    options: AuditOptions,
    found: &mut dyn FnMut(Problem),
) -> Result<Checked, StoreError> {
    let owner = fs::symlink_metadata(root)
        .map_err(io_err(StoreOp::Stat, root))?
        .uid();
    let mut walk = Walk {
        root,
        options,
        owner,
        checked: Checked::default(),
        found,
        held: None,
    };
    walk.root()?;
    Ok(walk.checked)
}

struct Walk<'a> {
    root: &'a Path,
    options: AuditOptions,
    /// The cache root's owner: every entry should be its.
    owner: u32,
    checked: Checked,
    found: &'a mut dyn FnMut(Problem),
    /// The problems of the collection being walked, until it ends.
    held: Option<Vec<Problem>>,
}

/// An entry of a directory, with what `lstat` said; `None` when it vanished.
struct Entry {
    name: String,
    /// Its path below the root.
    rel: String,
    meta: Metadata,
}

impl Walk<'_> {
    /// Says a problem, or keeps it while a collection is walked (its problems come out
    /// sorted by path when it ends).
    fn emit(&mut self, problem: Problem) {
        match &mut self.held {
            Some(held) => held.push(problem),
            None => (self.found)(problem),
        }
    }

    fn problem(
        &mut self,
        rel: &str,
        code: Code,
        detail: impl Into<String>,
        at: Option<&Collection>,
    ) {
        self.emit(Problem {
            path: rel.to_owned(),
            code,
            detail: detail.into(),
            collection: at.map(|c| (c.component.clone(), c.kind.clone())),
            is_dir: false,
        });
    }

    /// The entries of the directory `rel` (below the root; "" for the root), sorted by
    /// name; a name that is not UTF-8 is foreign. Missing (vanished): none.
    fn entries(&mut self, rel: &str, at: Option<&Collection>) -> Result<Vec<Entry>, StoreError> {
        let dir = self.root.join(rel);
        let read = match fs::read_dir(&dir) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(StoreOp::ReadDir, &dir)(e)),
        };
        let mut names = Vec::new();
        for entry in read {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &dir))?;
            match entry.file_name().into_string() {
                Ok(name) => names.push(name),
                Err(raw) => {
                    let shown = raw.to_string_lossy().into_owned();
                    let rel = join(rel, &shown);
                    self.problem(&rel, Code::Foreign, "a name that is not UTF-8", at);
                }
            }
        }
        names.sort_unstable();
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let rel = join(rel, &name);
            let path = self.root.join(&rel);
            match fs::symlink_metadata(&path) {
                Ok(meta) => entries.push(Entry { name, rel, meta }),
                // Vanished since the listing: a running hub's rename.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(StoreOp::Stat, &path)(e)),
            }
        }
        Ok(entries)
    }

    /// The root's own mode and owner, then each root entry.
    fn root(&mut self) -> Result<(), StoreError> {
        let meta = fs::symlink_metadata(self.root).map_err(io_err(StoreOp::Stat, self.root))?;
        self.mode_and_owner(".", &meta, true, None);
        for entry in self.entries("", None)? {
            let is_dir = kind_of(&entry.meta);
            match RootEntry::of(&entry.name, is_dir) {
                RootEntry::Component => self.component(&entry)?,
                RootEntry::Record => self.record(&entry),
                RootEntry::Document => self.document(&entry),
                RootEntry::Staging => {
                    if self.options.hub_running {
                        continue;
                    }
                    self.mode_and_owner(&entry.rel, &entry.meta, true, None);
                    for staged in self.entries(&entry.rel, None)? {
                        self.count(&staged.meta);
                        let detail = "a write a crash interrupted (the next start removes it)";
                        self.problem(&staged.rel, Code::Leftover, detail, None);
                    }
                }
                RootEntry::Journal => {
                    if self.options.hub_running {
                        continue;
                    }
                    self.count(&entry.meta);
                    if journal_is_complete(&self.root.join(&entry.rel))? {
                        let detail = "a complete replacement not applied yet";
                        self.problem(&entry.rel, Code::PendingJournal, detail, None);
                    } else {
                        let detail = "an incomplete journal (the replacement never happened)";
                        self.problem(&entry.rel, Code::Leftover, detail, None);
                    }
                }
                RootEntry::Quarantine | RootEntry::YurtHubInternal => {}
                RootEntry::Foreign => self.foreign(&entry, "no cache entry has this name", None),
            }
        }
        Ok(())
    }

    /// A foreign entry, or a symlink said as one.
    fn foreign(&mut self, entry: &Entry, detail: &str, at: Option<&Collection>) {
        if entry.meta.file_type().is_symlink() {
            self.problem(&entry.rel, Code::Symlink, "a symlink, never followed", at);
        } else {
            self.count(&entry.meta);
            self.problem(&entry.rel, Code::Foreign, detail, at);
        }
    }

    fn count(&mut self, meta: &Metadata) {
        if meta.is_file() {
            self.checked.files += 1;
            self.checked.bytes += meta.len();
        }
    }

    /// A component's directory: its kind directories, token answers and metadata views.
    fn component(&mut self, dir: &Entry) -> Result<(), StoreError> {
        self.mode_and_owner(&dir.rel, &dir.meta, true, None);
        for entry in self.entries(&dir.rel, None)? {
            let name = entry.name.as_str();
            let is_dir = entry.meta.is_dir();
            if name.starts_with("tmp_") {
                self.leftover_tmp(&entry, None);
            } else if !is_dir && !is_kind_dir_name(name) {
                let detail = "a file directly in a component's directory";
                self.foreign(&entry, detail, None);
            } else if is_dir && name == TokenKey::DIR {
                self.tokens(&entry)?;
            } else if is_dir && name == METADATA_DIR {
                self.mode_and_owner(&entry.rel, &entry.meta, true, None);
                for inner in self.entries(&entry.rel, None)? {
                    self.kind_entry(&dir.name, &inner, &format!("{METADATA_DIR}/{}", inner.name))?;
                }
            } else {
                self.kind_entry(&dir.name, &entry, name)?;
            }
        }
        Ok(())
    }

    /// An entry where a kind directory belongs: `kind` is its path below the component's.
    fn kind_entry(&mut self, component: &str, entry: &Entry, kind: &str) -> Result<(), StoreError> {
        let collection = Collection {
            component: component.to_owned(),
            kind: kind.to_owned(),
        };
        if entry.name.starts_with("tmp_") {
            self.leftover_tmp(entry, None);
        } else if entry.meta.file_type().is_symlink() {
            self.problem(&entry.rel, Code::Symlink, "a symlink, never followed", None);
        } else if !is_kind_dir_name(&entry.name) || !crate::names::is_safe_segment(&entry.name) {
            self.foreign(entry, "not a <resource>.<version>.<group> directory", None);
        } else if !entry.meta.is_dir() {
            self.count(&entry.meta);
            self.problem(
                &entry.rel,
                Code::NotADir,
                "a file where a kind directory belongs",
                None,
            );
        } else if is_event_dir_name(&entry.name) {
            let detail = "events an older version cached (the next start removes them)";
            self.problem(&entry.rel, Code::Leftover, detail, None);
        } else {
            self.collection(entry, &collection)?;
        }
        Ok(())
    }

    /// A kind directory: cluster-scoped objects, and namespace directories of objects.
    /// Each object passes the store's check; then, among those that did, one whose `kind`
    /// differs from the collection's (what most of its objects say) is another object too.
    /// Its problems come out sorted by path when it ends.
    fn collection(&mut self, dir: &Entry, c: &Collection) -> Result<(), StoreError> {
        self.held = Some(Vec::new());
        let walked = self.collection_entries(dir, c);
        let mut held = self.held.take().unwrap_or_default();
        held.sort_by(|a, b| a.path.cmp(&b.path));
        for problem in held {
            (self.found)(problem);
        }
        walked
    }

    fn collection_entries(&mut self, dir: &Entry, c: &Collection) -> Result<(), StoreError> {
        self.mode_and_owner(&dir.rel, &dir.meta, true, Some(c));
        // The objects that passed, with their kind: judged when every one is known.
        let mut good: Vec<(Entry, Option<String>)> = Vec::new();
        for entry in self.entries(&dir.rel, Some(c))? {
            if entry.meta.is_dir() && self.plain_name(&entry, Some(c)) {
                self.mode_and_owner(&entry.rel, &entry.meta, true, Some(c));
                for object in self.entries(&entry.rel, Some(c))? {
                    if object.meta.is_dir() && self.plain_name(&object, Some(c)) {
                        let detail = "a directory where an object belongs";
                        self.problem(&object.rel, Code::NotAFile, detail, Some(c));
                    } else if let Some(kind) = self.object(&object, c, Some(&entry.name)) {
                        good.push((object, kind));
                    }
                }
            } else if let Some(kind) = self.object(&entry, c, None) {
                good.push((entry, kind));
            }
        }
        let majority = majority_kind(good.iter().filter_map(|(_, k)| k.as_deref()));
        for (entry, kind) in &good {
            match (kind.as_deref(), majority) {
                (Some(kind), Some(wanted)) if kind != wanted => {
                    let detail = format!("holds kind {kind:?}, not the collection's {wanted:?}");
                    self.problem(&entry.rel, Code::NamesOther, detail, Some(c));
                }
                _ => self.mode_and_owner(&entry.rel, &entry.meta, false, Some(c)),
            }
        }
        Ok(())
    }

    /// Whether an entry's name is one the store could have made; a problem said if not.
    fn plain_name(&mut self, entry: &Entry, at: Option<&Collection>) -> bool {
        if entry.name.starts_with("tmp_") {
            self.leftover_tmp(entry, at);
            false
        } else if entry.meta.file_type().is_symlink() {
            self.problem(&entry.rel, Code::Symlink, "a symlink, never followed", at);
            false
        } else if !crate::names::is_safe_segment(&entry.name) {
            self.foreign(entry, "a name the cache never writes", at);
            false
        } else {
            true
        }
    }

    /// YurtHub's temporary `tmp_<name>`, file or directory.
    fn leftover_tmp(&mut self, entry: &Entry, at: Option<&Collection>) {
        self.count(&entry.meta);
        let detail = "a YurtHub temporary file an interrupted write left";
        self.problem(&entry.rel, Code::Leftover, detail, at);
    }

    /// An object file named `entry.name` in `namespace`'s directory (or the kind's): `Some`
    /// with its `kind` (if it says one) when it passes the store's check.
    fn object(
        &mut self,
        entry: &Entry,
        c: &Collection,
        namespace: Option<&str>,
    ) -> Option<Option<String>> {
        if !self.plain_name(entry, Some(c)) {
            return None;
        }
        let expect = Expect::for_kind_dir(&c.kind, namespace, &entry.name);
        let mut kind = None;
        let good = self.file(entry, Some(c), |bytes| {
            check_object(bytes, &expect).map_err(said)?;
            kind = ObjectHead::parse(bytes).and_then(|h| h.kind.map(|k| k.into_owned()));
            Ok(())
        });
        good.then_some(kind)
    }

    /// Reads a file bounded and judges its bytes with `judge` (an error: a code and a
    /// detail), as the store reads ([`read_judged`]); `true` when it is a good file, whose
    /// mode is then judged.
    fn file(
        &mut self,
        entry: &Entry,
        at: Option<&Collection>,
        judge: impl FnOnce(&[u8]) -> Result<(), (Code, String)>,
    ) -> bool {
        self.count(&entry.meta);
        let path = self.root.join(&entry.rel);
        let (code, detail) = match read_judged(&path, judge) {
            Ok(Judged::Good(_)) => return true,
            Ok(Judged::Absent(FileRead::Missing)) => return false,
            Ok(Judged::Bad(said, _)) => said,
            Ok(Judged::TooLarge { size }) => {
                (Code::TooLarge, Refusal::TooLarge { size }.to_string())
            }
            Ok(Judged::Absent(FileRead::Symlink)) => {
                (Code::Symlink, "a symlink, never followed".to_owned())
            }
            Ok(Judged::Absent(_)) => (
                Code::NotAFile,
                "not a regular file (a directory, FIFO or device)".to_owned(),
            ),
            // Unreadable (permission): said as what stops it being served.
            Err(e) => (Code::NotObject, format!("cannot read: {e}")),
        };
        self.problem(&entry.rel, code, detail, at);
        false
    }

    /// `<component>/tokens/<namespace>/<service account>/<digest>`: each answer names its
    /// service account and namespace.
    fn tokens(&mut self, dir: &Entry) -> Result<(), StoreError> {
        self.mode_and_owner(&dir.rel, &dir.meta, true, None);
        for ns in self.entries(&dir.rel, None)? {
            if !self.plain_name(&ns, None) {
                continue;
            }
            if !ns.meta.is_dir() {
                self.count(&ns.meta);
                self.problem(
                    &ns.rel,
                    Code::NotADir,
                    "a file where a namespace directory belongs",
                    None,
                );
                continue;
            }
            self.mode_and_owner(&ns.rel, &ns.meta, true, None);
            for account in self.entries(&ns.rel, None)? {
                if !self.plain_name(&account, None) {
                    continue;
                }
                if !account.meta.is_dir() {
                    self.count(&account.meta);
                    let detail = "a file where a service account's directory belongs";
                    self.problem(&account.rel, Code::NotADir, detail, None);
                    continue;
                }
                self.mode_and_owner(&account.rel, &account.meta, true, None);
                for answer in self.entries(&account.rel, None)? {
                    if !self.plain_name(&answer, None) {
                        continue;
                    }
                    if answer.meta.is_dir() {
                        let detail = "a directory where a token answer belongs";
                        self.problem(&answer.rel, Code::NotAFile, detail, None);
                        continue;
                    }
                    let expect = Expect {
                        namespace: Some(&ns.name),
                        name: &account.name,
                        api_version: None,
                    };
                    let good = self.file(&answer, None, |bytes| {
                        check_object(bytes, &expect).map_err(said)
                    });
                    if good {
                        self.mode_and_owner(&answer.rel, &answer.meta, false, None);
                    }
                }
            }
        }
        Ok(())
    }

    /// One of the store's records: `.relist` and `.synced` must read as their readers read
    /// them (what verify passes, repair and the hub can load); the others as JSON.
    fn record(&mut self, entry: &Entry) {
        if entry.name == crate::dir_lock::NOTE_FILE {
            // The lock's note is free text.
            self.count(&entry.meta);
            self.mode_and_owner(&entry.rel, &entry.meta, false, None);
            return;
        }
        let bad = |e: BadRecord| (Code::BadRecord, e.0);
        let good = self.file(entry, None, |bytes| match entry.name.as_str() {
            RELIST_FILE => RelistMarks::parse(bytes).map(|_| ()).map_err(bad),
            SYNCED_FILE => parse_synced(bytes).map(|_| ()).map_err(bad),
            _ => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
                .map(|_| ())
                .map_err(|e| (Code::BadRecord, format!("does not read as JSON: {e}"))),
        });
        if good {
            self.mode_and_owner(&entry.rel, &entry.meta, false, None);
        }
    }

    /// A non-resource document: a JSON object.
    fn document(&mut self, entry: &Entry) {
        let good = self.file(entry, None, |bytes| match ObjectHead::read(bytes) {
            Ok(_) => Ok(()),
            Err(e) => Err((Code::NotObject, format!("not a JSON object: {e}"))),
        });
        if good {
            self.mode_and_owner(&entry.rel, &entry.meta, false, None);
        }
    }

    /// A mode other than 0600 (a file) or 0700 (a directory), and an owner other than the
    /// root's.
    fn mode_and_owner(
        &mut self,
        rel: &str,
        meta: &Metadata,
        is_dir: bool,
        at: Option<&Collection>,
    ) {
        let mode = meta.permissions().mode() & 0o7777;
        let wanted = if is_dir { DIR_MODE } else { FILE_MODE };
        if mode != wanted {
            self.emit(Problem {
                path: rel.to_owned(),
                code: Code::Mode,
                detail: format!("mode {mode:04o}, not {wanted:04o}"),
                collection: at.map(|c| (c.component.clone(), c.kind.clone())),
                is_dir,
            });
        }
        if meta.uid() != self.owner {
            self.emit(Problem {
                path: rel.to_owned(),
                code: Code::Owner,
                detail: format!(
                    "owned by uid {}, not the cache's {}",
                    meta.uid(),
                    self.owner
                ),
                collection: at.map(|c| (c.component.clone(), c.kind.clone())),
                is_dir,
            });
        }
    }
}

/// The kind more than half of `kinds` say; `None` when none does.
fn majority_kind<'k>(kinds: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut total = 0;
    for kind in kinds {
        total += 1;
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .into_iter()
        .find(|(_, n)| n * 2 > total)
        .map(|(k, _)| k)
}

/// A refusal of the store's checks as a problem's code and detail.
fn said(refusal: Refusal) -> (Code, String) {
    let code = match refusal {
        Refusal::TooLarge { .. } => Code::TooLarge,
        Refusal::NotObject { .. } => Code::NotObject,
        Refusal::NamesOther { .. } => Code::NamesOther,
    };
    (code, refusal.to_string())
}

/// The collection a walk is in.
struct Collection {
    component: String,
    /// Below the component's directory (`pods.v1.core`, or the metadata view's).
    kind: String,
}

/// `Some(true)` a real directory, `Some(false)` a regular file, `None` anything else.
fn kind_of(meta: &Metadata) -> Option<bool> {
    if meta.is_dir() {
        Some(true)
    } else if meta.is_file() {
        Some(false)
    } else {
        None
    }
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;
    use std::collections::BTreeSet;

    /// Makes `files` (path, content; `None` a directory) under a fresh root, every file 0600
    /// and every directory 0700, and walks it.
    fn walked(
        files: &[(&str, Option<&str>)],
        options: AuditOptions,
    ) -> BTreeSet<(String, &'static str)> {
        let dir = TempDir::new("audit");
        let root = dir.0.clone();
        for (rel, content) in files {
            let path = root.join(rel);
            match content {
                Some(text) => {
                    fs::create_dir_all(path.parent().unwrap()).unwrap();
                    fs::write(&path, text).unwrap();
                }
                None => fs::create_dir_all(&path).unwrap(),
            }
        }
        let mut pending = vec![root.clone()];
        while let Some(d) = pending.pop() {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
                }
            }
        }
        let mut found = BTreeSet::new();
        walk(&root, options, &mut |p| {
            found.insert((p.path, p.code.as_str()));
        })
        .unwrap();
        found
    }

    fn pod(ns: &str, name: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#
        )
    }

    fn codes(items: &[(&str, &'static str)]) -> BTreeSet<(String, &'static str)> {
        items.iter().map(|(p, c)| ((*p).to_owned(), *c)).collect()
    }

    #[test]
    fn what_the_hub_writes_is_clean() {
        let web = pod("default", "web");
        let token =
            r#"{"kind":"TokenRequest","metadata":{"name":"builder","namespace":"default"}}"#;
        let found = walked(
            &[
                (".staging", None),
                (".synced", Some(r#"{"version":1,"kinds":[]}"#)),
                (".tinyhub.lock", Some("pid 1 on x since y\n")),
                ("version", Some(r#"{"major":"1"}"#)),
                ("_apis_apps_v1", Some(r#"{"kind":"APIResourceList"}"#)),
                ("kubelet/pods.v1.core/default/web", Some(&web)),
                (
                    "kubelet/nodes.v1.core/edge-1",
                    Some(r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-1"}}"#),
                ),
                ("kubelet/tokens/default/builder/0a1b2c", Some(token)),
                (
                    "coredns/partialobjectmetadatas.v1.meta.k8s.io/services.v1.core/default/dns",
                    Some(
                        r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"dns","namespace":"default"}}"#,
                    ),
                ),
                (
                    "_internal/restmapper/cache-crd-restmapper.conf",
                    Some("anything"),
                ),
                (".quarantine/20260101T000000Z/notes.txt", Some("anything")),
            ],
            AuditOptions::default(),
        );
        assert_eq!(found, BTreeSet::new());
    }

    #[test]
    fn each_kind_of_stray_has_its_code() {
        let web = pod("default", "web");
        let huge = "x".repeat(usize::try_from(super::super::check::MAX_FILE).unwrap() + 1);
        let found = walked(
            &[
                (".staging/r.3.0", Some("{}")),
                (
                    ".journal.1",
                    Some("tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/default/gone\nend\t1\n"),
                ),
                (".journal.2", Some("tinyhub-journal 1\n")),
                (".synced", Some("{not json")),
                // JSON, but no relist record: what repair's load refuses.
                (".relist", Some("{}")),
                (".other", Some("x")),
                ("kubelet/pods.v1.core/default/tmp_web", Some(&web)),
                ("kubelet/pods.v1.core/default/big", Some(&huge)),
                ("kubelet/events.v1.core/default/e", Some("{}")),
                ("kubelet/notakind/x", Some("{}")),
                ("kubelet/stray.json", Some("{}")),
                (
                    "kubelet/secrets.v1.core",
                    Some("a file where a kind directory belongs"),
                ),
                (
                    "kubelet/configmaps.v1.core/default/cm",
                    Some(
                        r#"{"apiVersion":"apps/v1","metadata":{"name":"cm","namespace":"default"}}"#,
                    ),
                ),
                (
                    "kubelet/tokens/default/builder/0a1b",
                    Some(r#"{"metadata":{"name":"other","namespace":"default"}}"#),
                ),
                ("kubelet/pods.v1.core/default/web", Some(&web)),
                (
                    "kubelet/pods.v1.core/default/db",
                    Some(&pod("default", "db")),
                ),
                (
                    "kubelet/pods.v1.core/default/settings",
                    Some(
                        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"default"}}"#,
                    ),
                ),
            ],
            AuditOptions::default(),
        );
        assert_eq!(
            found,
            codes(&[
                (".staging/r.3.0", "leftover"),
                (".journal.1", "pending-journal"),
                (".journal.2", "leftover"),
                (".synced", "bad-record"),
                (".relist", "bad-record"),
                (".other", "foreign"),
                ("kubelet/pods.v1.core/default/tmp_web", "leftover"),
                ("kubelet/pods.v1.core/default/big", "too-large"),
                ("kubelet/events.v1.core", "leftover"),
                ("kubelet/notakind", "foreign"),
                ("kubelet/stray.json", "foreign"),
                ("kubelet/secrets.v1.core", "not-a-dir"),
                ("kubelet/configmaps.v1.core/default/cm", "names-other"),
                ("kubelet/tokens/default/builder/0a1b", "names-other"),
                ("kubelet/pods.v1.core/default/settings", "names-other"),
            ])
        );
    }

    #[test]
    fn beside_a_running_hub_its_work_in_progress_is_not_judged() {
        let found = walked(
            &[
                (".staging/p.7", Some("{\"half")),
                (".journal.9", Some("tinyhub-journal 1\n")),
                ("notes.txt", Some("x")),
            ],
            AuditOptions { hub_running: true },
        );
        assert_eq!(found, codes(&[("notes.txt", "foreign")]));
    }

    #[test]
    fn modes_are_judged_for_files_and_directories() {
        let dir = TempDir::new("audit-modes");
        let root = dir.0.clone();
        let ns = root.join("kubelet/pods.v1.core/default");
        fs::create_dir_all(&ns).unwrap();
        fs::write(ns.join("web"), pod("default", "web")).unwrap();
        for d in [
            &root,
            &root.join("kubelet"),
            &root.join("kubelet/pods.v1.core"),
        ] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
        }
        fs::set_permissions(&ns, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(ns.join("web"), fs::Permissions::from_mode(0o640)).unwrap();
        let mut found = Vec::new();
        walk(&root, AuditOptions::default(), &mut |p| found.push(p)).unwrap();
        let said: Vec<(String, &str, bool, &str)> = found
            .iter()
            .map(|p| (p.path.clone(), p.code.as_str(), p.is_dir, p.detail.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "kubelet/pods.v1.core/default".to_owned(),
                    "mode",
                    true,
                    "mode 0755, not 0700"
                ),
                (
                    "kubelet/pods.v1.core/default/web".to_owned(),
                    "mode",
                    false,
                    "mode 0640, not 0600"
                ),
            ]
        );
        assert!(
            found
                .iter()
                .all(|p| p.collection == Some(("kubelet".into(), "pods.v1.core".into())))
        );
    }
}
