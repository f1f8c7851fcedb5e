//! `tinyhub cache import`: an archive made by `export` installed into a cache the caller
//! holds the lock of (an open [`Store`]), all at once.
//!
//! 1. The manifest first: another node's archive is refused unless allowed, and a cache that
//!    holds a component is refused unless it is to be replaced; nothing is written yet.
//! 2. Every entry is staged below `.staging/import.<n>/` (`cache/…` and `root/…`), each file
//!    checked as the store checks what it serves (a record or document parses, an object
//!    names the path it is at). Credentials are skipped unless asked for. The archive's end
//!    is checked (counts, gzip trailer) before anything is installed; any refusal or failure
//!    (a full disk) removes what was staged, and the cache is as it was.
//! 3. The identity's files, with credentials, written under `--root-dir` one by one, each
//!    atomically, before the commit point: the next open clears `.staging`, so after the
//!    commit point they could no longer be copied from it. A crash or a full disk here
//!    leaves the old cache (and some identity files new); running the import again writes
//!    them all again.
//! 4. `syncfs`, then one journal (`journal.rs`): with `replace`, the current top-level
//!    entries moved into a quarantine directory of this import's own (`.quarantine/<UTC
//!    time>`, or `<time>-1`, … as a repair's; made fresh, so no `move` into it finds its
//!    target taken), then each staged top-level entry moved into the root. The journal's
//!    rename is the commit point: a crash before it leaves the old cache (recovery clears
//!    `.staging`), after it the new one (recovery rolls it forward).
//!
//! `.synced` is kept, each time clamped to the export's time (and to now): ages then say how
//! old the cloud's word is, never "fresh at import".

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::super::check::MAX_FILE;
use super::super::error::{StoreError, StoreOp, io_err};
use super::super::fs::{make_dir, parent_of, real_dir, sync_dir, sync_filesystem, write_new_file};
use super::super::grants::GRANTS_FILE;
use super::super::journal::{CommitStep, JOURNAL_PREFIX, JournalWriter, RECORD_FILES};
use super::super::quarantine::Quarantine;
use super::super::synced::SYNCED_FILE;
use super::super::{STAGING, Store, next_id};
use super::{
    ArchiveError, ArchivePath, ArchiveReader, Entry, Place, check_cache_dir, check_cache_file,
};
use crate::names::Component;

/// How to import.
#[derive(Debug, Clone)]
pub(crate) struct ImportOptions<'a> {
    /// `--node-name`: the archive's must be the same, unless `allow_other_node`.
    pub node_name: &'a str,
    /// Imports another node's archive.
    pub allow_other_node: bool,
    /// Moves the current content into the quarantine first (else a cache that holds a
    /// component is refused).
    pub replace: bool,
    /// Installs token answers, `.grants` and the identity's files when the archive has them.
    pub with_credentials: bool,
    /// `--root-dir`, where the identity's files go.
    pub root_dir: &'a Path,
    /// Unix seconds now.
    pub now: i64,
    /// `--cache-max-bytes`: an archive whose files hold more bytes is refused (0: no bound).
    pub max_bytes: u64,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ImportReport {
    /// The archive's node name.
    pub node_name: String,
    /// When the archive was made, Unix seconds.
    pub created_at: i64,
    /// Files installed in the cache.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Credential files installed (cache and root).
    pub credentials: u64,
    /// Credential files in the archive, not installed (no `with_credentials`).
    pub credentials_skipped: u64,
    /// Where the replaced content went, below the cache.
    pub replaced_into: Option<String>,
    /// The top-level entries moved there.
    pub replaced: Vec<String>,
}

/// Why an import did nothing, or failed.
#[derive(Debug)]
pub(crate) enum ImportError {
    /// The archive is damaged or holds an entry the reader refuses.
    Archive(ArchiveError),
    /// A file whose content the store refuses (it names another object, is not one).
    Content {
        /// The entry, as the archive names it.
        path: String,
        /// `<code>: <detail>`.
        why: String,
    },
    /// Another node's archive.
    OtherNode {
        /// The archive's node.
        archive: String,
        /// This node.
        node: String,
    },
    /// The cache holds these components and `replace` was not given.
    NotEmpty(Vec<String>),
    /// The archive's files hold more bytes than `--cache-max-bytes`.
    TooLarge {
        /// The manifest's bytes.
        bytes: u64,
        /// The bound.
        bound: u64,
    },
    /// The cache could not be written (a full disk, an I/O error); nothing changed unless
    /// the commit point was passed.
    Store(StoreError),
}

impl ImportError {
    /// True when the archive or the situation was refused (exit 2), false for a failure of
    /// the disk (exit 4).
    pub(crate) fn is_refusal(&self) -> bool {
        !matches!(self, ImportError::Store(_))
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Archive(e) => write!(f, "{e}"),
            ImportError::Content { path, why } => write!(f, "archive entry {path:?}: {why}"),
            ImportError::OtherNode { archive, node } => write!(
                f,
                "the archive is node {archive:?}'s, this is {node:?} (--allow-other-node imports it anyway)"
            ),
            ImportError::NotEmpty(components) => write!(
                f,
                "the cache already holds {} (--replace moves it into .quarantine/ first)",
                components.join(", ")
            ),
            ImportError::TooLarge { bytes, bound } => write!(
                f,
                "the archive's files hold {bytes} bytes, more than --cache-max-bytes={bound}"
            ),
            ImportError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl From<StoreError> for ImportError {
    fn from(e: StoreError) -> ImportError {
        ImportError::Store(e)
    }
}

/// What was staged: the top-level entries to move in (name, whether a directory), and the
/// identity's files.
#[derive(Default)]
struct Staged {
    top: BTreeSet<(String, bool)>,
    root_files: Vec<String>,
    files: u64,
    bytes: u64,
    credentials: u64,
    credentials_skipped: u64,
}

impl Store {
    /// Installs the archive read from `src`; see the module doc.
    pub(crate) fn import(
        &self,
        src: impl Read,
        opts: &ImportOptions<'_>,
    ) -> Result<ImportReport, ImportError> {
        let mut reader = ArchiveReader::open(src, MAX_FILE).map_err(ImportError::Archive)?;
        let manifest = reader.manifest().clone();
        if manifest.node_name != opts.node_name && !opts.allow_other_node {
            return Err(ImportError::OtherNode {
                archive: manifest.node_name,
                node: opts.node_name.to_owned(),
            });
        }
        if opts.max_bytes != 0 && manifest.bytes > opts.max_bytes {
            return Err(ImportError::TooLarge {
                bytes: manifest.bytes,
                bound: opts.max_bytes,
            });
        }
        let components = self.top_level_components()?;
        if !components.is_empty() && !opts.replace {
            return Err(ImportError::NotEmpty(components));
        }
        let stage_rel = format!("{STAGING}/import.{}", next_id());
        let stage = self.root.join(&stage_rel);
        make_dir(&stage)?;
        let clamp = manifest.created_at.min(opts.now);
        let done = self
            .stage_archive(&mut reader, &stage, clamp, opts)
            .and_then(|staged| self.commit_import(&stage_rel, staged, opts));
        match &done {
            Err(ImportError::Store(StoreError::InjectedCrash)) => {}
            // Past the commit point: the journal still names the staged entries, and the
            // next open rolls it forward from them.
            Err(_) if self.journal_pending() => {}
            // Staged files never reach the cache after a failure; removed now, or at the next
            // open if this fails too.
            _ => {
                if let Err(e) = fs::remove_dir_all(&stage) {
                    log::warn!("cache: cannot remove {}: {e}", stage.display());
                }
            }
        }
        let mut report = done?;
        report.node_name = manifest.node_name;
        report.created_at = manifest.created_at;
        Ok(report)
    }

    /// Whether a journal is in the root (an import's that failed after its commit point).
    fn journal_pending(&self) -> bool {
        fs::read_dir(&self.root).into_iter().flatten().any(|entry| {
            entry
                .ok()
                .and_then(|e| e.file_name().into_string().ok())
                .is_some_and(|name| name.starts_with(JOURNAL_PREFIX))
        })
    }

    /// The component directories directly in the root.
    fn top_level_components(&self) -> Result<Vec<String>, StoreError> {
        let entries = fs::read_dir(&self.root).map_err(io_err(StoreOp::ReadDir, &self.root))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.root))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if Component::new(&name).is_some() && entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.push(name);
            }
        }
        found.sort();
        Ok(found)
    }

    /// Step 2: every entry written below `stage`, checked; the archive's end checked.
    fn stage_archive(
        &self,
        reader: &mut ArchiveReader<impl Read>,
        stage: &Path,
        clamp: i64,
        opts: &ImportOptions<'_>,
    ) -> Result<Staged, ImportError> {
        let mut staged = Staged::default();
        let mut made: HashSet<PathBuf> = HashSet::new();
        while let Some(entry) = reader.next_entry().map_err(ImportError::Archive)? {
            let (path, bytes) = match entry {
                Entry::Dir(path) => (path, None),
                Entry::File(path, bytes) => (path, Some(bytes)),
            };
            let refuse = |why: &str| ImportError::Content {
                path: path.to_string(),
                why: why.to_owned(),
            };
            let credential = is_credential(&path);
            if credential && !opts.with_credentials {
                if bytes.is_some() {
                    staged.credentials_skipped += 1;
                }
                continue;
            }
            let mut segments = path.segments();
            let first = segments.next().unwrap_or_default().to_owned();
            let deeper = segments.next().is_some();
            let is_dir = bytes.is_none();
            if path.place == Place::Cache {
                if (deeper || is_dir) && Component::new(&first).is_none() {
                    return Err(refuse("foreign: not a component directory"));
                }
                staged.top.insert((first, deeper || is_dir));
            }
            if is_dir && path.place == Place::Cache {
                check_cache_dir(&path.rel).map_err(|why| refuse(&why.to_string()))?;
            }
            let disk = stage.join(path.place_dir()).join(&path.rel);
            let dir = if is_dir {
                disk.as_path()
            } else {
                parent_of(&disk)
            };
            make_dirs(stage, dir, &mut made)?;
            let Some(mut bytes) = bytes else { continue };
            match path.place {
                Place::Cache => {
                    check_cache_file(&path.rel, &bytes).map_err(|why| refuse(&why.to_string()))?;
                    if path.rel == SYNCED_FILE {
                        bytes = clamp_synced(&bytes, clamp);
                    }
                }
                Place::Root => staged.root_files.push(path.rel.clone()),
            }
            write_new_file(&disk, &bytes, false)?;
            if credential {
                staged.credentials += 1;
            } else {
                staged.files += 1;
                staged.bytes += bytes.len() as u64;
            }
        }
        Ok(staged)
    }

    /// Steps 3 and 4: the journal written, made durable, applied; then the identity's files.
    fn commit_import(
        &self,
        stage_rel: &str,
        staged: Staged,
        opts: &ImportOptions<'_>,
    ) -> Result<ImportReport, ImportError> {
        self.checkpoint(CommitStep::Staged)?;
        let mut report = ImportReport {
            files: staged.files,
            bytes: staged.bytes,
            credentials: staged.credentials,
            credentials_skipped: staged.credentials_skipped,
            ..ImportReport::default()
        };
        let replaced = if opts.replace {
            self.replaced_entries(&staged)?
        } else {
            Vec::new()
        };
        let mut quarantine = String::new();
        if !replaced.is_empty() {
            quarantine = self.replace_into(&replaced, opts)?;
            report.replaced_into = Some(quarantine.clone());
            report.replaced = replaced.clone();
        }
        // Before the commit point: after it, the next open may clear the staged copies.
        let stage = self.root.join(stage_rel).join("root");
        for rel in &staged.root_files {
            install_root_file(&stage.join(rel), &opts.root_dir.join(rel))?;
        }
        let id = next_id();
        let journal_temp = self.staging.join(format!("j.{id}"));
        let mut journal = JournalWriter::new(&journal_temp);
        for name in &replaced {
            journal.line(format_args!("move\t{name}\t{quarantine}/{name}"))?;
        }
        for (name, is_dir) in &staged.top {
            let op = if *is_dir { "move" } else { "install" };
            journal.line(format_args!("{op}\t{stage_rel}/cache/{name}\t{name}"))?;
        }
        if let Some(file) = journal.finish()? {
            self.checkpoint(CommitStep::JournalWritten)?;
            sync_filesystem(&self.root_dir).map_err(io_err(StoreOp::Sync, &self.root))?;
            self.checkpoint(CommitStep::Synced)?;
            file.sync_all()
                .map_err(io_err(StoreOp::Sync, &journal_temp))?;
            drop(file);
            let visible = self.root.join(format!("{JOURNAL_PREFIX}{id}"));
            fs::rename(&journal_temp, &visible).map_err(io_err(StoreOp::Rename, &visible))?;
            self.checkpoint(CommitStep::JournalVisible)?;
            sync_dir(&self.root)?;
            self.checkpoint(CommitStep::JournalDurable)?;
            let applied = self.apply_journal(&visible, &mut |step| self.checkpoint(step))?;
            if let Some(e) = applied.first_error {
                // The journal stays: the next open rolls the rest forward.
                return Err(e.into());
            }
            for dir in &applied.touched {
                sync_dir(dir)?;
            }
            self.checkpoint(CommitStep::DirsSynced)?;
            fs::remove_file(&visible).map_err(io_err(StoreOp::Remove, &visible))?;
            sync_dir(&self.root)?;
            self.checkpoint(CommitStep::JournalRemoved)?;
        }
        Ok(report)
    }

    /// Makes this import's own quarantine directory, as a repair makes its own (never one
    /// an earlier run made, even in the same second), with a summary of what goes into it;
    /// returns it below the root (`.quarantine/<time>`).
    fn replace_into(
        &self,
        replaced: &[String],
        opts: &ImportOptions<'_>,
    ) -> Result<String, StoreError> {
        let now = std::time::UNIX_EPOCH
            + std::time::Duration::from_secs(u64::try_from(opts.now).unwrap_or(0));
        let mut quarantine = Quarantine::new(&self.root, now);
        let summary = serde_json::json!({
            "import": { "at": crate::logging::rfc3339(opts.now) },
            "replaced": replaced,
        });
        // Serializing a `Value` of strings cannot fail.
        let bytes = serde_json::to_vec_pretty(&summary).unwrap_or_default();
        quarantine.write_report(&bytes)?;
        let rel = quarantine.rel_dir().ok_or_else(|| {
            // `write_report` made the directory: it has a name.
            io_err(StoreOp::CreateDir, &self.root)(std::io::Error::other(
                "the quarantine directory has no name",
            ))
        })?;
        Ok(rel)
    }

    /// What a replacing import moves aside: every component directory, document and record
    /// in the root; the credentials' key (`.grants`) only when the archive brings its own.
    fn replaced_entries(&self, staged: &Staged) -> Result<Vec<String>, StoreError> {
        let entries = fs::read_dir(&self.root).map_err(io_err(StoreOp::ReadDir, &self.root))?;
        let brings_grants = staged.top.contains(&(GRANTS_FILE.to_owned(), false));
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(StoreOp::ReadDir, &self.root))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let moved = if is_dir {
                Component::new(&name).is_some()
            } else if name == GRANTS_FILE {
                brings_grants
            } else {
                RECORD_FILES.contains(&name.as_str())
                    || name == "version"
                    || (name.starts_with('_') && crate::names::is_safe_segment(&name))
            };
            if moved {
                found.push(name);
            }
        }
        found.sort();
        Ok(found)
    }

    /// Stops here when [`StoreOptions::crash_at`](super::super::StoreOptions::crash_at) says.
    fn checkpoint(&self, step: CommitStep) -> Result<(), StoreError> {
        if self.options.crash_at == Some(step) {
            return Err(StoreError::InjectedCrash);
        }
        Ok(())
    }
}

impl ArchivePath {
    /// The staging subdirectory of its place.
    fn place_dir(&self) -> &'static str {
        match self.place {
            Place::Cache => "cache",
            Place::Root => "root",
        }
    }
}

/// Token answers, the credentials' key and the identity's files.
fn is_credential(path: &ArchivePath) -> bool {
    match path.place {
        Place::Root => true,
        Place::Cache => {
            let mut segments = path.segments();
            let first = segments.next();
            first == Some(GRANTS_FILE) || segments.next() == Some("tokens")
        }
    }
}

/// Makes `dir` and every directory between `stage` and it (0700), each once.
fn make_dirs(stage: &Path, dir: &Path, made: &mut HashSet<PathBuf>) -> Result<(), StoreError> {
    if dir == stage || made.contains(dir) {
        return Ok(());
    }
    make_dirs(stage, parent_of(dir), made)?;
    make_dir(dir)?;
    made.insert(dir.to_owned());
    Ok(())
}

/// `.synced` with every kind's time no later than `clamp`; unchanged if it is not the
/// record's shape (`{"kinds":[{"at":…}]}`).
fn clamp_synced(bytes: &[u8], clamp: i64) -> Vec<u8> {
    let Ok(mut doc) = serde_json::from_slice::<Value>(bytes) else {
        return bytes.to_vec();
    };
    let clamp = u64::try_from(clamp).unwrap_or(0);
    if let Some(kinds) = doc.get_mut("kinds").and_then(Value::as_array_mut) {
        for kind in kinds {
            if let Some(at) = kind.get_mut("at")
                && at.as_u64().is_some_and(|t| t > clamp)
            {
                *at = Value::from(clamp);
            }
        }
    }
    serde_json::to_vec(&doc).unwrap_or_else(|_| bytes.to_vec())
}

/// Copies a staged identity file to `--root-dir`, atomically, making `pki/` if needed.
fn install_root_file(staged: &Path, target: &Path) -> Result<(), StoreError> {
    let bytes = fs::read(staged).map_err(io_err(StoreOp::Read, staged))?;
    let dir = parent_of(target);
    if !real_dir(dir)? {
        crate::atomic_file::make_dirs(dir).map_err(io_err(StoreOp::CreateDir, dir))?;
    }
    crate::atomic_file::write_atomic(target, &bytes).map_err(io_err(StoreOp::Write, target))
}
