//! `tinyhub cache export`: the cache (and, when asked, the credentials) written as an
//! archive, without the lock and without writing anything under the cache.
//!
//! Two walks: the first reads every file once (bounded, never through a symlink), keeps what
//! passes the store's object check and lists what does not; the manifest then says how many
//! files and bytes follow, and the second walk writes them. A file that changed size between
//! the walks (a running hub wrote it) fails the export: the archive would lie about its
//! counts, and an import would refuse it. A kind directory that changed while it was walked
//! (a running hub applied a list) is walked again, up to 3 times.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::super::StoreError;
use super::super::check::{self, FileRead};
use super::super::grants::GRANTS_FILE;
use super::super::index::{for_each_kind_dir, safe_entries};
use super::super::view::YURTHUB_INTERNAL;
use super::{ArchivePath, ArchiveWriter, CACHE_RECORDS, Manifest, check_cache_file};
use crate::names::Component;

/// Walks of one kind directory at most, while a running hub keeps changing it.
const WALKS: usize = 3;

/// What to export.
#[derive(Debug, Clone)]
pub(crate) struct ExportOptions<'a> {
    /// The cache root.
    pub cache: &'a Path,
    /// `--root-dir`, whose identity files go with credentials.
    pub root_dir: &'a Path,
    /// `--node-name`, written into the manifest.
    pub node_name: &'a str,
    /// Token answers, `.grants` and the identity's files too.
    pub with_credentials: bool,
    /// Unix seconds now.
    pub now: i64,
}

/// What an export did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExportReport {
    /// Files written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, credential files (token answers, `.grants`, the identity's).
    pub credentials: u64,
    /// Files left out, one line each: `<path below the cache>: <why>`.
    pub left_out: Vec<String>,
}

/// Why an export failed.
#[derive(Debug)]
pub(crate) enum ExportError {
    /// Writing the archive failed.
    Io(io::Error),
    /// Reading the cache failed (permission, I/O).
    Store(StoreError),
    /// A file changed while the export ran (a running hub wrote it).
    Changed(String),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::Io(e) => write!(f, "{e}"),
            ExportError::Store(e) => write!(f, "{e}"),
            ExportError::Changed(path) => write!(
                f,
                "{path} changed while it was being exported (the hub is writing): run the export again"
            ),
        }
    }
}

/// One file to write: where it goes in the archive, where it is, how long it was.
struct Planned {
    path: ArchivePath,
    disk: PathBuf,
    len: u64,
}

/// Writes the archive of `opts.cache` to `out`.
pub(crate) fn export<W: Write>(
    opts: &ExportOptions<'_>,
    out: W,
) -> Result<(W, ExportReport), ExportError> {
    let mut report = ExportReport::default();
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    plan_cache(opts, &mut dirs, &mut files, &mut report);
    if opts.with_credentials {
        plan_root(opts.root_dir, &mut files, &mut report);
    }
    report.files = files.len() as u64;
    report.bytes = files.iter().map(|f| f.len).sum();
    let manifest = Manifest {
        node_name: opts.node_name.to_owned(),
        created_at: opts.now,
        tinyhub: env!("CARGO_PKG_VERSION").to_owned(),
        with_credentials: opts.with_credentials,
        files: report.files,
        bytes: report.bytes,
    };
    let mut writer = ArchiveWriter::new(out, &manifest).map_err(ExportError::Io)?;
    for dir in &dirs {
        writer.dir(dir).map_err(ExportError::Io)?;
    }
    for file in &files {
        let bytes = match check::read_bounded(&file.disk) {
            Ok(FileRead::Bytes(bytes)) if bytes.len() as u64 == file.len => bytes,
            Ok(_) => return Err(ExportError::Changed(file.path.to_string())),
            Err(e) => return Err(ExportError::Store(e)),
        };
        writer.file(&file.path, &bytes).map_err(ExportError::Io)?;
    }
    let out = writer.finish().map_err(ExportError::Io)?;
    Ok((out, report))
}

/// The cache's part: the records, the documents, every component's kinds (each kind
/// directory as a directory entry too: an empty list is an answer) and, with credentials,
/// its token answers. What is not the store's is left out and listed.
fn plan_cache(
    opts: &ExportOptions<'_>,
    dirs: &mut Vec<ArchivePath>,
    files: &mut Vec<Planned>,
    report: &mut ExportReport,
) {
    let cache = opts.cache;
    let mut top: Vec<(String, bool)> = fs::read_dir(cache)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            let kind = entry.file_type().ok()?;
            Some((name, kind.is_dir()))
        })
        .collect();
    top.sort();
    for (name, is_dir) in top {
        if CACHE_RECORDS.contains(&name.as_str()) {
            let credential = name == GRANTS_FILE;
            if !credential || opts.with_credentials {
                plan_file(cache, &name, credential, files, report);
            }
            continue;
        }
        if name.starts_with('.') || name == YURTHUB_INTERNAL {
            // The store's work in progress, the lock's note, the quarantine, YurtHub's own.
            continue;
        }
        if !is_dir {
            plan_file(cache, &name, false, files, report);
            continue;
        }
        if Component::new(&name).is_none() {
            report
                .left_out
                .push(format!("{name}: not a component directory"));
            continue;
        }
        dirs.push(ArchivePath::cache(name.clone()));
        let component_dir = cache.join(&name);
        let mut kinds = Vec::new();
        for_each_kind_dir(&component_dir, &name, &mut |kind_rel, _| {
            kinds.push(kind_rel.to_owned());
        });
        kinds.sort();
        for kind_rel in kinds {
            dirs.push(ArchivePath::cache(kind_rel.clone()));
            plan_kind(cache, &kind_rel, files, report);
        }
        if opts.with_credentials {
            plan_tree(cache, &format!("{name}/tokens"), 3, true, files, report);
        }
    }
}

/// One kind's files, walked again (up to [`WALKS`] times in all) when its directories changed
/// during the walk: a running hub's replacement renames into them, and a collection caught
/// halfway would hold some objects of the list before and some of the one after.
fn plan_kind(cache: &Path, kind_rel: &str, files: &mut Vec<Planned>, report: &mut ExportReport) {
    let dir = cache.join(kind_rel);
    for walk in 1..=WALKS {
        let before = last_change(&dir);
        let (planned, left_out) = (files.len(), report.left_out.len());
        plan_tree(cache, kind_rel, 2, false, files, report);
        if walk == WALKS || last_change(&dir) == before {
            return;
        }
        files.truncate(planned);
        report.left_out.truncate(left_out);
    }
}

/// The newest modification time of `dir` and of the directories directly in it (its
/// namespaces): every rename into or out of them moves it.
fn last_change(dir: &Path) -> Option<SystemTime> {
    let modified = |path: &Path| fs::symlink_metadata(path).and_then(|m| m.modified()).ok();
    let own = modified(dir)?;
    let inner = safe_entries(dir).filter(|(_, is_dir)| *is_dir);
    Some(
        inner
            .filter_map(|(ns, _)| modified(&dir.join(ns)))
            .fold(own, SystemTime::max),
    )
}

/// Every file below `rel` (a directory below the cache) down to `depth` levels, in name order.
fn plan_tree(
    cache: &Path,
    rel: &str,
    depth: usize,
    credential: bool,
    files: &mut Vec<Planned>,
    report: &mut ExportReport,
) {
    let mut entries: Vec<(String, bool)> = safe_entries(&cache.join(rel)).collect();
    entries.sort();
    for (name, is_dir) in entries {
        let below = format!("{rel}/{name}");
        if is_dir && depth > 1 {
            plan_tree(cache, &below, depth - 1, credential, files, report);
        } else if !is_dir {
            plan_file(cache, &below, credential, files, report);
        }
    }
}

/// One cache file, read and checked; planned when it passes, listed when not.
fn plan_file(
    cache: &Path,
    rel: &str,
    credential: bool,
    files: &mut Vec<Planned>,
    report: &mut ExportReport,
) {
    let disk = cache.join(rel);
    let bytes = match check::read_bounded(&disk) {
        Ok(FileRead::Bytes(bytes)) => bytes,
        Ok(other) => {
            report.left_out.push(format!("{rel}: {}", not_read(&other)));
            return;
        }
        Err(e) => {
            report.left_out.push(format!("{rel}: {e}"));
            return;
        }
    };
    if let Err(why) = check_cache_file(rel, &bytes) {
        report.left_out.push(format!("{rel}: {why}"));
        return;
    }
    if credential {
        report.credentials += 1;
    }
    files.push(Planned {
        path: ArchivePath::cache(rel),
        disk,
        len: bytes.len() as u64,
    });
}

/// The identity's files below `--root-dir`: the two kubeconfigs and `pki/`'s regular files;
/// a `-current.pem` symlink goes as a file of its target's bytes (a pair copied in by hand
/// is one the hub reads), other symlinks are left out.
fn plan_root(root: &Path, files: &mut Vec<Planned>, report: &mut ExportReport) {
    let mut plan = |rel: String, disk: PathBuf| match check::read_bounded(&disk) {
        Ok(FileRead::Bytes(bytes)) => {
            report.credentials += 1;
            files.push(Planned {
                path: ArchivePath::root(rel),
                disk,
                len: bytes.len() as u64,
            });
        }
        Ok(other) => report
            .left_out
            .push(format!("root/{rel}: {}", not_read(&other))),
        Err(e) => report.left_out.push(format!("root/{rel}: {e}")),
    };
    for name in ["yurthub.conf", "bootstrap-hub.conf"] {
        if fs::symlink_metadata(root.join(name)).is_ok() {
            plan(name.to_owned(), root.join(name));
        }
    }
    let pki = root.join("pki");
    let mut names: Vec<(String, fs::FileType)> = fs::read_dir(&pki)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            Some((
                entry.file_name().into_string().ok()?,
                entry.file_type().ok()?,
            ))
        })
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        let rel = format!("pki/{name}");
        if !ArchivePath::root(rel.clone()).is_valid() {
            continue;
        }
        if kind.is_file() {
            plan(rel, pki.join(&name));
        } else if kind.is_symlink() && name.ends_with("-current.pem") {
            // The dated file it names, in pki/ itself (client-go's link is absolute).
            let target = fs::read_link(pki.join(&name))
                .ok()
                .and_then(|t| t.file_name().map(|n| pki.join(n)));
            match target {
                Some(target) => plan(rel, target),
                None => plan(rel, pki.join(&name)),
            }
        }
    }
}

/// Why the store's bounded read gave no bytes, as the left-out list says it.
fn not_read(read: &FileRead) -> String {
    match read {
        FileRead::Bytes(_) => "read".to_owned(),
        FileRead::Missing => "gone".to_owned(),
        FileRead::Symlink => "a symlink, never followed".to_owned(),
        FileRead::NotFile => "not a regular file".to_owned(),
        FileRead::TooLarge { size } => {
            format!("{size} bytes, larger than the cache's largest file")
        }
    }
}
