//! A cache directory seen from outside the hub (`tinyhub cache`): whether a directory is a
//! cache at all, and what each entry of its root is.
//!
//! Nothing here locks, recovers, indexes or writes: a tool reads a running hub's cache
//! through it without disturbing it, and a directory that is not a cache (a mistyped
//! `--disk-cache-path=/etc`) is refused before anything else looks inside it.

use std::fs;
use std::io;
use std::path::Path;

use super::STAGING;
use super::error::{StoreError, StoreOp, io_err};
use super::error_keys::ERROR_KEYS_FILE;
use super::grants::GRANTS_FILE;
use super::index::{for_each_kind_dir, safe_entries};
use super::journal::JOURNAL_PREFIX;
use super::synced::SYNCED_FILE;
use crate::dir_lock::NOTE_FILE;
use crate::names::Component;

/// Where `tinyhub cache repair` (and import's `--replace`) moves what it takes out of the
/// cache; the hub, `verify` and export never look inside.
pub(crate) const QUARANTINE: &str = ".quarantine";

/// The repair marks' record (`relist.rs`).
pub(crate) const RELIST: &str = ".relist";

/// YurtHub's own directory in a cache it wrote (`_internal/restmapper/…`): known, never
/// served, never exported.
pub(crate) const YURTHUB_INTERNAL: &str = "_internal";

/// What one entry directly in the cache root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootEntry {
    /// A component's directory.
    Component,
    /// One of the store's records beside the cache (`.synced`, `.grants`, `.error-keys`,
    /// `.relist`) or the lock's note.
    Record,
    /// The staging directory.
    Staging,
    /// A journal (`.journal.<n>`).
    Journal,
    /// The quarantine.
    Quarantine,
    /// A cached non-resource document (`version`, `_api`, `_apis_…`).
    Document,
    /// YurtHub's `_internal`.
    YurtHubInternal,
    /// Anything else.
    Foreign,
}

impl RootEntry {
    /// What the root entry `name` is, given whether it is a real directory (`false` for a
    /// regular file; `None` for a symlink or anything else, which is always foreign).
    pub(crate) fn of(name: &str, is_dir: Option<bool>) -> RootEntry {
        let Some(is_dir) = is_dir else {
            return RootEntry::Foreign;
        };
        match (name, is_dir) {
            (STAGING, true) => RootEntry::Staging,
            (QUARANTINE, true) => RootEntry::Quarantine,
            (YURTHUB_INTERNAL, true) => RootEntry::YurtHubInternal,
            (SYNCED_FILE | GRANTS_FILE | ERROR_KEYS_FILE | RELIST | NOTE_FILE, false) => {
                RootEntry::Record
            }
            (name, false) if name.starts_with(JOURNAL_PREFIX) => RootEntry::Journal,
            (name, false) if is_document_name(name) => RootEntry::Document,
            (name, true) if Component::new(name).is_some() => RootEntry::Component,
            _ => RootEntry::Foreign,
        }
    }
}

/// A name [`non_resource_file_name`](crate::cache::key::non_resource_file_name) can give:
/// `version`, or `_` and safe characters.
fn is_document_name(name: &str) -> bool {
    name == "version"
        || (name.len() > 1 && name.starts_with('_') && crate::names::is_safe_segment(name))
}

/// Whether a directory is a cache: [`RootVerdict::Cache`], or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootVerdict {
    /// It is one (perhaps with a few foreign entries, which `verify` names).
    Cache,
    /// It is not; the reason, one line.
    NotACache(String),
}

/// Foreign root entries a cache may hold before it is taken for something else.
const MAX_FOREIGN: usize = 8;

/// Judges the directory `root` by its root entries (and each component directory's names):
/// a cache holds at least one mark of a cache (the staging directory, the lock's note, the
/// sync record, YurtHub's `_internal`, or a component directory holding a
/// `<resource>.<version>.<group>` directory), and fewer than 8 foreign entries, fewer
/// than half of all. `--disk-cache-path=/etc` is thus refused before `/etc/passwd` is
/// read, let alone moved. A root that is missing, or a symlink, or not a directory, is no
/// cache either; an unreadable one is an error.
pub(crate) fn judge_root(root: &Path) -> Result<RootVerdict, StoreError> {
    match fs::symlink_metadata(root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(meta) if meta.file_type().is_symlink() => {
            return Ok(RootVerdict::NotACache(
                "it is a symlink (give the directory itself)".to_owned(),
            ));
        }
        Ok(_) => return Ok(RootVerdict::NotACache("not a directory".to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(RootVerdict::NotACache("no such directory".to_owned()));
        }
        Err(e) => return Err(io_err(StoreOp::Stat, root)(e)),
    }
    let entries = fs::read_dir(root).map_err(io_err(StoreOp::ReadDir, root))?;
    let (mut total, mut foreign, mut marked) = (0usize, Vec::new(), false);
    for entry in entries {
        let entry = entry.map_err(io_err(StoreOp::ReadDir, root))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = match entry.file_type() {
            Ok(t) if t.is_dir() => Some(true),
            Ok(t) if t.is_file() => Some(false),
            _ => None,
        };
        total += 1;
        match RootEntry::of(&name, is_dir) {
            RootEntry::Foreign => foreign.push(name),
            RootEntry::Staging | RootEntry::YurtHubInternal => marked = true,
            RootEntry::Record if name != GRANTS_FILE && name != ERROR_KEYS_FILE => marked = true,
            RootEntry::Component if !marked => marked = holds_kind_dir(&root.join(&name), &name),
            _ => {}
        }
    }
    if !marked {
        return Ok(RootVerdict::NotACache(format!(
            "no mark of a tinyhub or YurtHub cache ({STAGING}, {NOTE_FILE}, {SYNCED_FILE}, \
             {YURTHUB_INTERNAL}, or a component directory holding a <resource>.<version>.<group> \
             directory)"
        )));
    }
    if foreign.len() >= MAX_FOREIGN || foreign.len() * 2 >= total {
        foreign.sort();
        foreign.truncate(3);
        return Ok(RootVerdict::NotACache(format!(
            "too many entries no cache holds ({} of {total}, such as {})",
            foreign.len().max(1),
            foreign.join(", ")
        )));
    }
    Ok(RootVerdict::Cache)
}

/// Whether the component directory `dir` holds a kind directory whose name reads as
/// `<resource>.<version>.<group>`.
fn holds_kind_dir(dir: &Path, name: &str) -> bool {
    let mut found = false;
    for_each_kind_dir(dir, name, &mut |kind_rel, _| {
        let kind = kind_rel.rsplit('/').next().unwrap_or("");
        found |= kind.splitn(3, '.').filter(|p| !p.is_empty()).count() == 3;
    });
    found && safe_entries(dir).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;

    fn verdict(make: &[(&str, Option<&str>)]) -> RootVerdict {
        let dir = TempDir::new("judge-root");
        for (path, content) in make {
            let path = dir.0.join(path);
            match content {
                Some(text) => {
                    fs::create_dir_all(path.parent().unwrap()).unwrap();
                    fs::write(&path, text).unwrap();
                }
                None => fs::create_dir_all(&path).unwrap(),
            }
        }
        judge_root(&dir.0).unwrap()
    }

    #[test]
    fn a_cache_is_known_by_its_marks() {
        for marks in [
            &[(".staging", None)][..],
            &[(".synced", Some("{}"))][..],
            &[(".tinyhub.lock", Some("pid 1"))][..],
            &[("_internal/restmapper/cache-crd-restmapper.conf", Some("{}"))][..],
            // A YurtHub cache: nothing but components and their kinds.
            &[("kubelet/pods.v1.core/default/web", Some("{}"))][..],
            &[(
                "coredns/partialobjectmetadatas.v1.meta.k8s.io/services.v1.core/x",
                Some("{}"),
            )][..],
        ] {
            assert_eq!(verdict(marks), RootVerdict::Cache, "{marks:?}");
        }
        // A few strays do not make it something else: verify names them.
        assert_eq!(
            verdict(&[
                (".staging", None),
                ("kubelet/pods.v1.core/default/web", Some("{}")),
                ("version", Some("{}")),
                ("notes.txt", Some("x")),
            ]),
            RootVerdict::Cache
        );
    }

    #[test]
    fn what_is_not_a_cache_says_why() {
        let etc = verdict(&[
            ("passwd", Some("root:x:0:0")),
            ("hosts", Some("127.0.0.1 localhost")),
            ("ssl/certs/ca.pem", Some("x")),
        ]);
        assert!(
            matches!(&etc, RootVerdict::NotACache(why) if why.contains("no mark")),
            "{etc:?}"
        );
        let empty = verdict(&[]);
        assert!(matches!(empty, RootVerdict::NotACache(_)), "{empty:?}");
        // Marked, but mostly something else.
        let mostly = verdict(&[
            (".staging", None),
            ("passwd", Some("x")),
            ("hosts", Some("x")),
        ]);
        assert!(
            matches!(&mostly, RootVerdict::NotACache(why) if why.contains("hosts, passwd")),
            "{mostly:?}"
        );
        let dir = TempDir::new("judge-missing");
        let missing = judge_root(&dir.0.join("nope")).unwrap();
        assert_eq!(missing, RootVerdict::NotACache("no such directory".into()));
    }

    #[test]
    fn root_entries_are_classified_by_name_and_type() {
        for (name, is_dir, entry) in [
            (".staging", Some(true), RootEntry::Staging),
            (".staging", Some(false), RootEntry::Foreign),
            (".journal.7", Some(false), RootEntry::Journal),
            (".synced", Some(false), RootEntry::Record),
            (".relist", Some(false), RootEntry::Record),
            (".tinyhub.lock", Some(false), RootEntry::Record),
            (".quarantine", Some(true), RootEntry::Quarantine),
            ("_apis_apps_v1", Some(false), RootEntry::Document),
            ("version", Some(false), RootEntry::Document),
            ("_internal", Some(true), RootEntry::YurtHubInternal),
            ("kube-proxy", Some(true), RootEntry::Component),
            ("Kube-Proxy", Some(true), RootEntry::Foreign),
            ("notes.txt", Some(false), RootEntry::Foreign),
            ("kubelet", None, RootEntry::Foreign),
            (".other", Some(false), RootEntry::Foreign),
        ] {
            assert_eq!(RootEntry::of(name, is_dir), entry, "{name}");
        }
    }
}
