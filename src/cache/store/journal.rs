//! The journal of a replacement, and the recovery at start ([`Store::open`]): roll complete
//! journals forward, clear the staging directory, remove the event collections older
//! versions cached.
//!
//! # Journal format
//!
//! UTF-8 text, one operation a line, fields separated by a tab (shown
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
//! An import (`archive/import.rs`) journals whole top-level entries instead, with two more
//! operations whose paths may start at `.staging/` or `.quarantine/`:
//!
//! ```text
//! move ⇥ kubelet ⇥ .quarantine/20261206T101500Z-replaced/kubelet
//! move ⇥ .staging/import.4/cache/kubelet ⇥ kubelet
//! install ⇥ .staging/import.4/cache/.synced ⇥ .synced
//! ```
//!
//! `move` renames a file or directory to a name that must be free: one whose target exists
//! or whose source is gone was done before. `install` renames a file over its target: one
//! whose source is gone was done before.
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

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::error::{StoreError, StoreOp, io_err};
use super::fs::{create_new_file, exists_no_follow, make_dir, open_no_follow, parent_of, sync_dir};
use super::{Store, next_id};
use crate::names::is_safe_segment;

/// Name prefix of a complete journal in the root; a sequence number follows.
pub(super) const JOURNAL_PREFIX: &str = ".journal.";

/// The steps of a commit a crash can fall between, where
/// [`StoreOptions::crash_at`](super::StoreOptions::crash_at) can stop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitStep {
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

/// The longest journal line read: far more than an operation's two paths of at most five
/// segments; a longer one is damage, never held whole in memory.
const MAX_LINE: u64 = 64 * 1024;

/// First line of every journal.
const JOURNAL_MAGIC: &str = "tinyhub-journal 1";

/// The records the store keeps beside the cache, which an import installs and a
/// replacing import moves aside: the only dot names a journal may move.
pub(super) const RECORD_FILES: [&str; 4] = [".synced", ".relist", ".error-keys", ".grants"];

/// Where an import stages and where a replacing one moves the old content.
const STAGING_DIR: &str = ".staging";
const QUARANTINE_DIR: &str = ".quarantine";

/// What [`Store::open`] found and repaired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecoveryReport {
    /// Complete journals applied (replacements finished).
    pub rolled_forward: usize,
    /// Incomplete or invalid journals discarded (replacements undone).
    pub rolled_back: usize,
    /// Entries removed from the staging directory.
    pub removed_temp_files: usize,
    /// Event collections an older version cached, removed (events are no longer cached).
    pub removed_event_dirs: usize,
}

impl Store {
    /// Finishes interrupted replacements and clears the staging directory.
    pub(super) fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        let mut journals = Vec::new();
        let entries = fs::read_dir(&self.root).map_err(io_err(StoreOp::ReadDir, &self.root))?;
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.root))?;
            let name = entry.file_name();
            if let Some(seq) = name.to_str().and_then(journal_seq) {
                // Journals are applied in the order they were committed.
                journals.push((seq, entry.path()));
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

    /// Applies a complete journal as the hub does: [`apply_journal`] with the index told of
    /// each change and each delete done.
    pub(super) fn apply_journal(
        &self,
        journal: &Path,
        checkpoint: &mut dyn FnMut(CommitStep) -> Result<(), StoreError>,
    ) -> Result<Applied, StoreError> {
        apply_journal(&self.root, journal, &mut Live(self), checkpoint)
    }
}

/// What applying a journal does beside its directories and renames. The hub's store forgets
/// the index entries of what changes and removes what the journal deletes; a repair (no
/// hub, no index) keeps what it deletes in its quarantine instead.
pub(super) trait ApplyHooks {
    /// `rel` (below the root) is about to change; `None`: whole top-level entries are.
    fn changing(&mut self, rel: Option<&str>);
    /// Takes the file `rel` (below the root) out of the cache; `false` when it was gone
    /// already (done by an earlier run of the journal).
    fn delete(&mut self, rel: &str) -> Result<bool, StoreError>;
}

/// The hub's own application: the index told, deletes done.
struct Live<'s>(&'s Store);

impl ApplyHooks for Live<'_> {
    fn changing(&mut self, rel: Option<&str>) {
        let Some(rel) = rel else {
            // Whole directories change: no entry can be trusted.
            self.0.index().clear();
            self.0.changed(None);
            self.0.moved_all();
            return;
        };
        // The object's index entry goes whatever happens: the journal does not say what
        // the staged file holds. The change is noted (`recent.rs`): a list staged
        // meanwhile must compare with it.
        let at = {
            let mut index = self.0.index();
            let at = index.path_hash(rel);
            index.forget(at);
            at
        };
        self.0.changed(Some(at));
    }

    fn delete(&mut self, rel: &str) -> Result<bool, StoreError> {
        let path = self.0.root.join(rel);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(StoreOp::Remove, &path)(e)),
        }
    }
}

/// Applies the complete journal `journal` to the cache at `root`, in its order: the one
/// applier of the hub's commits and recovery and of `tinyhub cache repair`. Directories come
/// first; if one cannot be made, those made so far are removed again and nothing else is
/// done. A failed rename or delete does not stop the others; the first such error is
/// returned in [`Applied`]. Idempotent: a run cut short is finished by the next. The
/// touched directories are the caller's to fsync, the journal the caller's to retire.
pub(super) fn apply_journal(
    root: &Path,
    journal: &Path,
    hooks: &mut dyn ApplyHooks,
    checkpoint: &mut dyn FnMut(CommitStep) -> Result<(), StoreError>,
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
        if (&mut reader)
            .take(MAX_LINE)
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
            let dir = root.join(rel);
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
            checkpoint(CommitStep::DirsMade)?;
        }
        if let Err(e) = apply_op(root, op, hooks, &mut applied.touched) {
            log::warn!("cache: {e}");
            applied.first_error.get_or_insert(e);
        }
        checkpoint(CommitStep::Applied(ops))?;
        ops += 1;
    }
    Ok(applied)
}

/// Applies one rename, delete, move or install, idempotently; `hooks` is told first.
fn apply_op(
    root: &Path,
    op: JournalOp<'_>,
    hooks: &mut dyn ApplyHooks,
    touched: &mut BTreeSet<PathBuf>,
) -> Result<(), StoreError> {
    match op {
        JournalOp::Move(..) | JournalOp::Install(..) => hooks.changing(None),
        JournalOp::Rename(_, rel) | JournalOp::Delete(rel) => hooks.changing(Some(rel)),
        JournalOp::Mkdir(_) => {}
    }
    match op {
        JournalOp::Mkdir(_) => Ok(()),
        JournalOp::Rename(temp, rel) => {
            let from = root.join(STAGING_DIR).join(temp);
            let to = root.join(rel);
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
        JournalOp::Move(from, to) | JournalOp::Install(from, to) => {
            let from = root.join(from);
            let to = root.join(to);
            let overwrite = matches!(op, JournalOp::Install(..));
            // Done before: the source is gone, or (a move) the target is taken.
            if !exists_no_follow(&from) || (!overwrite && exists_no_follow(&to)) {
                return Ok(());
            }
            fs::rename(&from, &to).map_err(io_err(StoreOp::Rename, &to))?;
            touched.insert(parent_of(&from).to_owned());
            touched.insert(parent_of(&to).to_owned());
            Ok(())
        }
        JournalOp::Delete(rel) => {
            if hooks.delete(rel)? {
                touched.insert(parent_of(&root.join(rel)).to_owned());
            }
            Ok(())
        }
    }
}

/// The removal of event collections at start.
impl Store {
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

/// `events.<version>.core` or `events.<version>.events.k8s.io`: a kind directory of events
/// (what recovery removes, and `verify` calls a leftover).
pub(super) fn is_event_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("events.") else {
        return false;
    };
    rest.split_once('.').is_some_and(|(version, group)| {
        !version.is_empty() && matches!(group, "core" | "events.k8s.io")
    })
}

/// The place of the journal `name` (a root entry) in the order of commits: `Some` for a
/// `.journal.<n>`, `n` (`.journal.10` after `.journal.9`; a number that does not parse,
/// last).
pub(super) fn journal_seq(name: &str) -> Option<u64> {
    let seq = name.strip_prefix(JOURNAL_PREFIX)?;
    Some(seq.parse::<u64>().unwrap_or(u64::MAX))
}

/// What applying a journal touched, and the first rename or delete that failed.
#[derive(Default)]
pub(super) struct Applied {
    pub(super) touched: BTreeSet<PathBuf>,
    pub(super) first_error: Option<StoreError>,
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
    /// Move this file or directory to a free name (an import: from the staging directory
    /// into the root, or from the root into the quarantine).
    Move(&'a str, &'a str),
    /// Rename this staged file over this top-level file (an import's records and documents).
    Install(&'a str, &'a str),
}

/// Parses one operation line; `None` for anything else, including a path that is not
/// made of safe segments (a journal can never reach outside the root either).
fn parse_op(line: &str) -> Option<JournalOp<'_>> {
    let mut fields = line.split('\t');
    let op = match (fields.next()?, fields.next(), fields.next()) {
        // Up to `<component>/<view>/<kind>/<namespace>` and its objects (a metadata view).
        ("mkdir", Some(dir), None) if relative_path(dir, 1..=4) => JournalOp::Mkdir(dir),
        ("rename", Some(temp), Some(path))
            if is_safe_segment(temp) && relative_path(path, 2..=5) =>
        {
            JournalOp::Rename(temp, path)
        }
        ("delete", Some(path), None) if relative_path(path, 2..=5) => JournalOp::Delete(path),
        ("move", Some(from), Some(to))
            if (below(STAGING_DIR, from) && top_level(to))
                || (top_level(from) && below(QUARANTINE_DIR, to)) =>
        {
            JournalOp::Move(from, to)
        }
        ("install", Some(from), Some(to)) if below(STAGING_DIR, from) && top_level(to) => {
            JournalOp::Install(from, to)
        }
        _ => return None,
    };
    fields.next().is_none().then_some(op)
}

fn relative_path(path: &str, segments: std::ops::RangeInclusive<usize>) -> bool {
    segments.contains(&path.split('/').count()) && path.split('/').all(is_safe_segment)
}

/// One entry directly in the root that an import may move: a safe name or a record.
fn top_level(path: &str) -> bool {
    is_safe_segment(path) || RECORD_FILES.contains(&path)
}

/// A path 2 to 4 segments below `dir` (in the root), each safe or a record.
fn below(dir: &str, path: &str) -> bool {
    path.strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| {
            (2..=4).contains(&rest.split('/').count()) && rest.split('/').all(top_level)
        })
}

/// Whether a journal is whole: magic line, valid operations with every `mkdir` first,
/// and a final `end` line with the number of operations.
pub(super) fn journal_is_complete(path: &Path) -> Result<bool, StoreError> {
    let file = open_no_follow(path).map_err(io_err(StoreOp::Read, path))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut read = |line: &mut String| -> Result<Option<bool>, StoreError> {
        line.clear();
        // A line past the bound ends without its newline: damaged.
        match (&mut reader).take(MAX_LINE).read_line(line) {
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
pub(super) struct JournalWriter<'p> {
    path: &'p Path,
    mkdirs: Vec<String>,
    out: Option<BufWriter<File>>,
    lines: usize,
}

impl<'p> JournalWriter<'p> {
    pub(super) fn new(path: &'p Path) -> JournalWriter<'p> {
        JournalWriter {
            path,
            mkdirs: Vec::new(),
            out: None,
            lines: 0,
        }
    }

    pub(super) fn mkdir(&mut self, dir: String) {
        self.mkdirs.push(dir);
    }

    pub(super) fn line(&mut self, args: fmt::Arguments<'_>) -> Result<(), StoreError> {
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
    pub(super) fn finish(self) -> Result<Option<File>, StoreError> {
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
pub(super) struct RelPath<'a> {
    pub(super) kind: &'a str,
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
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
