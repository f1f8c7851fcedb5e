//! A cache directory seen from outside the hub (`tinyhub cache`): whether a directory is a
//! cache at all, what each entry of its root is, and read-only reads of what it holds (the
//! collections with their counts and bytes, a collection's objects, one object as the hub
//! would serve it, the records beside them).
//!
//! Nothing here locks, recovers, indexes or writes: a tool reads a running hub's cache
//! through it without disturbing it, and a directory that is not a cache (a mistyped
//! `--disk-cache-path=/etc`) is refused before anything else looks inside it. Every file is
//! read bounded and judged by the store's own checks (`check.rs`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::STAGING;
use super::check::{Expect, Judged, Refusal, read_checked};
use super::error::{StoreError, StoreOp, io_err};
use super::error_keys::ERROR_KEYS_FILE;
use super::fs::all_real_dirs;
use super::grants::GRANTS_FILE;
use super::index::{for_each_kind_dir, safe_entries};
use super::journal::JOURNAL_PREFIX;
use super::list::NameCursor;
use super::relist::RELIST_FILE;
use super::synced::SYNCED_FILE;
use super::usage::{TREE_DEPTH, walk};
use crate::cache::key::TokenKey;
use crate::cache::object::ObjectHead;
use crate::dir_lock::NOTE_FILE;
use crate::names::{Component, is_safe_segment};

/// Where `tinyhub cache repair` (and import's `--replace`) moves what it takes out of the
/// cache; the hub, `verify` and export never look inside.
pub(crate) const QUARANTINE: &str = ".quarantine";

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
            (SYNCED_FILE | GRANTS_FILE | ERROR_KEYS_FILE | RELIST_FILE | NOTE_FILE, false) => {
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
        found |= is_kind_dir_name(kind_rel.rsplit('/').next().unwrap_or(""));
    });
    found
}

/// `<resource>.<version>.<group>`: three non-empty dot-separated parts (the group may
/// hold more dots).
pub(super) fn is_kind_dir_name(name: &str) -> bool {
    let mut parts = name.splitn(3, '.');
    parts.by_ref().take(3).filter(|p| !p.is_empty()).count() == 3
}

/// One collection on disk, counted without reading a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CollectionSummary {
    /// The component's directory name.
    pub component: String,
    /// The kind's path below it (`pods.v1.core`; the metadata view's
    /// `partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core`).
    pub kind: String,
    /// Namespace directories.
    pub namespaces: usize,
    /// Object files (regular files with names the store could have made).
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Every collection under `root`, sorted by (component, kind): one `stat` per object file.
/// With `namespace`, only what that namespace's directory holds, and only the collections
/// that have one.
pub(crate) fn collections(root: &Path, namespace: Option<&str>) -> Vec<CollectionSummary> {
    let mut found = Vec::new();
    let mut components: Vec<String> = safe_entries(root)
        .filter_map(|(name, is_dir)| (is_dir && Component::new(&name).is_some()).then_some(name))
        .collect();
    components.sort_unstable();
    for component in components {
        for_each_kind_dir(
            &root.join(&component),
            &component,
            &mut |kind_rel, kind_dir| {
                let kind = below_component(kind_rel, &component);
                let mut summary = CollectionSummary {
                    component: component.clone(),
                    kind,
                    namespaces: 0,
                    objects: 0,
                    bytes: 0,
                };
                let count = |dir: &Path, summary: &mut CollectionSummary| {
                    for (name, is_dir) in safe_entries(dir) {
                        if is_dir {
                            continue;
                        }
                        if let Ok(meta) = fs::symlink_metadata(dir.join(name)) {
                            summary.objects += 1;
                            summary.bytes += meta.len();
                        }
                    }
                };
                if namespace.is_none() {
                    count(kind_dir, &mut summary);
                }
                for (ns, is_dir) in safe_entries(kind_dir) {
                    if is_dir && namespace.is_none_or(|want| want == ns) {
                        summary.namespaces += 1;
                        count(&kind_dir.join(ns), &mut summary);
                    }
                }
                if namespace.is_none() || summary.namespaces > 0 {
                    found.push(summary);
                }
            },
        );
    }
    found.sort_by(|a, b| (&a.component, &a.kind).cmp(&(&b.component, &b.kind)));
    found
}

/// The kind directories of one component (paths below its directory, the metadata views'
/// included), sorted; none when it has no directory.
pub(crate) fn kinds_of(root: &Path, component: &str) -> Vec<String> {
    if Component::new(component).is_none() {
        return Vec::new();
    }
    let mut kinds = Vec::new();
    for_each_kind_dir(&root.join(component), component, &mut |kind_rel, _| {
        kinds.push(below_component(kind_rel, component));
    });
    kinds.sort_unstable();
    kinds
}

/// A kind directory's path below its component's, from its path below the root
/// (`kubelet/pods.v1.core` → `pods.v1.core`), as `for_each_kind_dir` gives it.
fn below_component(kind_rel: &str, component: &str) -> String {
    kind_rel
        .strip_prefix(component)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(kind_rel)
        .to_owned()
}

/// One object file of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectRow {
    /// Its namespace directory; `None` for cluster scope.
    pub namespace: Option<String>,
    /// The file's name.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Its `metadata.resourceVersion`, when it is served and has one.
    pub resource_version: Option<String>,
    /// Its modification time.
    pub modified: Option<SystemTime>,
    /// Why the hub would not serve it, if it would not.
    pub refused: Option<Refusal>,
}

/// The objects of the collection `kind` (below `component`'s directory), in (namespace,
/// name) order, limited to `namespace` when given: each file read bounded and judged as the
/// hub judges it. `None` when the collection is not cached.
pub(crate) fn objects(
    root: &Path,
    component: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Option<Vec<ObjectRow>>, StoreError> {
    let Some(kind_dir) = kind_dir(root, component, kind)? else {
        return Ok(None);
    };
    let mut cursor = NameCursor::open(kind_dir.clone(), namespace, None)?;
    let mut rows = Vec::new();
    while let Some(next) = cursor.next_name() {
        let (ns, name) = next?;
        let path = cursor.path_of(ns.as_deref(), &name);
        let modified = fs::symlink_metadata(&path).and_then(|m| m.modified()).ok();
        let expect = Expect::for_kind_dir(kind, ns.as_deref(), &name);
        let (bytes, resource_version, refused) = match read_checked(&path, &expect)? {
            Judged::Good(bytes) => {
                let rv = ObjectHead::parse(&bytes)
                    .and_then(|h| h.metadata)
                    .and_then(|m| m.resource_version)
                    .map(|rv| rv.into_owned());
                (bytes.len() as u64, rv, None)
            }
            Judged::Bad(refusal, bytes) => (bytes.len() as u64, None, Some(refusal)),
            Judged::TooLarge { size } => (size, None, Some(Refusal::TooLarge { size })),
            // Vanished, or not a file: no object.
            Judged::Absent(_) => continue,
        };
        rows.push(ObjectRow {
            namespace: ns,
            name,
            bytes,
            resource_version,
            modified,
            refused,
        });
    }
    Ok(Some(rows))
}

/// What [`get`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Got {
    /// The object's bytes, as the hub would serve them.
    Object(Vec<u8>),
    /// Nothing cached under that name.
    Missing,
    /// A file the hub would not serve; its path below the root and why.
    Refused(String, Refusal),
}

/// The object `name` (in `namespace`) of the collection `kind` of `component`, judged as
/// the hub judges it before it serves it.
pub(crate) fn get(
    root: &Path,
    component: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Got, StoreError> {
    if namespace.is_some_and(|ns| !is_safe_segment(ns)) || !is_safe_segment(name) {
        return Ok(Got::Missing);
    }
    let Some(kind_dir) = kind_dir(root, component, kind)? else {
        return Ok(Got::Missing);
    };
    let dir = match namespace {
        Some(ns) => {
            let dir = kind_dir.join(ns);
            if !all_real_dirs(std::slice::from_ref(&dir))? {
                return Ok(Got::Missing);
            }
            dir
        }
        None => kind_dir,
    };
    let rel = match namespace {
        Some(ns) => format!("{component}/{kind}/{ns}/{name}"),
        None => format!("{component}/{kind}/{name}"),
    };
    let expect = Expect::for_kind_dir(kind, namespace, name);
    Ok(match read_checked(&dir.join(name), &expect)? {
        Judged::Good(bytes) => Got::Object(bytes),
        Judged::Bad(refusal, _) => Got::Refused(rel, refusal),
        Judged::TooLarge { size } => Got::Refused(rel, Refusal::TooLarge { size }),
        Judged::Absent(_) => Got::Missing,
    })
}

/// The namespaces of the collection `kind` of `component` that hold a file named `name`,
/// sorted: for a `get` without a namespace of an object that has one. No file is read.
pub(crate) fn namespaces_holding(
    root: &Path,
    component: &str,
    kind: &str,
    name: &str,
) -> Result<Vec<String>, StoreError> {
    let Some(kind_dir) = kind_dir(root, component, kind)? else {
        return Ok(Vec::new());
    };
    if !is_safe_segment(name) {
        return Ok(Vec::new());
    }
    let mut found: Vec<String> = safe_entries(&kind_dir)
        .filter(|(ns, is_dir)| {
            *is_dir && fs::symlink_metadata(kind_dir.join(ns).join(name)).is_ok_and(|m| m.is_file())
        })
        .map(|(ns, _)| ns)
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// The kind directory `kind` of `component` when it and every directory above it are real.
fn kind_dir(root: &Path, component: &str, kind: &str) -> Result<Option<PathBuf>, StoreError> {
    if Component::new(component).is_none() || !kind.split('/').all(is_safe_segment) {
        return Ok(None);
    }
    let mut dirs = vec![root.join(component)];
    let mut below = root.join(component);
    for part in kind.split('/') {
        below = below.join(part);
        dirs.push(below.clone());
    }
    Ok(all_real_dirs(&dirs)?.then_some(below))
}

/// What the cache holds besides its collections, for `ls`'s footer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extras {
    /// Token answers per component (counts only: never their content).
    pub tokens: Vec<(String, u64)>,
    /// Non-resource documents.
    pub documents: u64,
    /// Files and bytes in the quarantine.
    pub quarantine: (u64, u64),
}

/// Counts what `ls` shows below its table.
pub(crate) fn extras(root: &Path) -> Result<Extras, StoreError> {
    let mut extras = Extras::default();
    let mut names: Vec<(String, bool)> = safe_entries(root).collect();
    names.sort_unstable();
    for (name, is_dir) in names {
        if !is_dir {
            if is_document_name(&name) {
                extras.documents += 1;
            }
            continue;
        }
        if Component::new(&name).is_none() {
            continue;
        }
        let tokens = root.join(&name).join(TokenKey::DIR);
        let (files, _) = tree_size(&tokens);
        if files > 0 {
            extras.tokens.push((name, files));
        }
    }
    extras.quarantine = tree_size(&root.join(QUARANTINE));
    Ok(extras)
}

/// Regular files and their bytes below `dir`, symlinks not followed; a missing one is empty.
fn tree_size(dir: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    walk(dir, TREE_DEPTH, &mut |len| {
        files += 1;
        bytes += len;
    });
    (files, bytes)
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
