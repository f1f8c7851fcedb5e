//! When each kind last heard the cloud's word (see `cache/synced.rs`), kept beside the cache
//! in `<root>/.synced` so that ages go on across a restart; and, for a cache written before
//! that file existed, the newest modification time of each kind directory. A dot name: never
//! a key, never a component.

use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::check::{FileRead, read_bounded};
use super::index::{for_each_kind_dir, safe_entries};
use super::{Store, StoreError};

/// The file's name under the cache root.
pub(super) const SYNCED_FILE: &str = ".synced";

/// The record's format version.
const VERSION: u32 = 1;

/// The record, JSON: `{"version":1,"kinds":[{"component":"kubelet","resource":"pods.v1.core","at":1765033200,"lists":[{"field":"spec.nodeName=edge-1"}]}]}`.
/// `lists` came later than the rest: an entry without it was written before the hub recorded
/// what was listed whole (a tinyhub that does not know it reads past it), and so did
/// `absent` (`[{"namespace":"default","name":"opt","rv":"42"}]`: names a list by name found
/// absent).
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    version: u32,
    kinds: Vec<SyncedEntry>,
}

/// One kind of the record: when the cloud's word on it was last heard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SyncedEntry {
    /// The component's directory name.
    pub component: String,
    /// The kind's directory below it
    /// ([`crate::cache::key::CollectionKey::dir_name`]).
    pub resource: String,
    /// Unix seconds.
    pub at: u64,
    /// The scopes the kind was listed whole in (`cache/synced.rs`, "Listed whole"); `None`
    /// in a record written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lists: Option<Vec<ListedScope>>,
    /// The names a list of one object by name found absent (`cache/synced.rs`, "Known
    /// absent"); empty in a record written before they were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<AbsentName>,
}

/// One name a whole list of it by name (`fieldSelector=metadata.name=<name>`) found absent:
/// its namespace (none: all of them, or a cluster-scoped kind), the name and that list's
/// resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AbsentName {
    /// The list's namespace; none: across all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The name listed.
    pub name: String,
    /// The list's resourceVersion (empty: it had none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rv: String,
}

/// One scope a kind was listed whole in, as stored: a namespace (none: all of them, or a
/// cluster-scoped kind) and the selectors' texts (empty: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ListedScope {
    /// The list's namespace; none: across all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `labelSelector`, printed from the parsed selector.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// `fieldSelector`, printed from the parsed selector.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// A stored record that does not read: why, in a few words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadRecord(pub(crate) String);

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The entries of a stored `.synced` record: the one reader of its bytes (the hub at open,
/// `tinyhub cache ls` and `verify`).
pub(crate) fn parse_synced(bytes: &[u8]) -> Result<Vec<SyncedEntry>, BadRecord> {
    let record: Record =
        serde_json::from_slice(bytes).map_err(|e| BadRecord(format!("not a sync record: {e}")))?;
    if record.version != VERSION {
        return Err(BadRecord(format!(
            "sync record version {} (this tinyhub reads {VERSION})",
            record.version
        )));
    }
    Ok(record.kinds)
}

/// A record's bytes.
pub(crate) fn synced_bytes(kinds: Vec<SyncedEntry>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Record {
        version: VERSION,
        kinds,
    })
}

/// A kind directory found on disk: its component, its path below the component's
/// ([`crate::cache::key::CollectionKey::dir_name`]) and its newest modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KindDir {
    component: String,
    kind: String,
    /// Unix seconds of the newest modification of the directory or of one directly in it
    /// (a namespace directory): every object write renames into one of them.
    modified: u64,
}

impl Store {
    /// Replaces the stored sync record, crash-safely as any object (staged, synced, renamed).
    pub(crate) fn put_synced(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_file(&self.root.join(SYNCED_FILE), bytes)
    }

    /// The ages the cache holds ([`stored_ages`]).
    pub(crate) fn stored_ages(&self) -> Result<Vec<SyncedEntry>, BadRecord> {
        stored_ages(&self.root)
    }
}

/// When each kind of the cache at `root` last heard the cloud's word, as the hub reads it at
/// open (and `tinyhub cache ls`, with no hub): the `.synced` record's entries; with no record
/// at all (a cache written before it), each kind directory's newest modification time. An
/// error when the record does not read — bad JSON, but also a record too large, a symlink or
/// anything but a regular file: a damaged record is no record, never the licence of a
/// missing one (whose kinds cover every list, `cache/synced.rs`).
pub(crate) fn stored_ages(root: &Path) -> Result<Vec<SyncedEntry>, BadRecord> {
    let path = root.join(SYNCED_FILE);
    match read_bounded(&path) {
        Ok(FileRead::Bytes(bytes)) => parse_synced(&bytes),
        Ok(FileRead::Symlink) => Err(BadRecord(format!("{} is a symlink", path.display()))),
        Ok(FileRead::NotFile) => Err(BadRecord(format!(
            "{} is not a regular file",
            path.display()
        ))),
        Ok(FileRead::TooLarge { size }) => Err(BadRecord(format!(
            "{} is {size} bytes, over the bound: not read",
            path.display()
        ))),
        Ok(FileRead::Missing) => Ok(kind_dirs_on_disk(root)
            .into_iter()
            .map(|d| SyncedEntry {
                component: d.component,
                resource: d.kind,
                at: d.modified,
                lists: None,
                absent: Vec::new(),
            })
            .collect()),
        Err(e) => Err(BadRecord(e.to_string())),
    }
}

/// Every kind directory of every component, with its newest modification time: a few
/// `stat`s per kind (its namespaces), no object file read. Unreadable entries are left out;
/// token answers (`tokens`, a name without a dot) are no kind.
fn kind_dirs_on_disk(root: &Path) -> Vec<KindDir> {
    let mut found = Vec::new();
    for component in subdirs(root) {
        let below = root.join(&component);
        for_each_kind_dir(&below, &component, &mut |kind_rel, kind_dir| {
            if let Some(modified) = newest(kind_dir) {
                // `kind_rel` is `<component>/<kind dir>`: the kind is what follows.
                let kind = kind_rel[component.len() + 1..].to_owned();
                found.push(KindDir {
                    component: component.clone(),
                    kind,
                    modified,
                });
            }
        });
    }
    found
}

/// The names of `dir`'s real directories that could be keys (no dot names, no symlinks).
fn subdirs(dir: &Path) -> impl Iterator<Item = String> {
    safe_entries(dir).filter_map(|(name, is_dir)| is_dir.then_some(name))
}

/// The newest modification time of `dir` and of the directories directly in it, in Unix
/// seconds.
fn newest(dir: &Path) -> Option<u64> {
    let seconds = |path: &Path| {
        std::fs::symlink_metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
    };
    let own = seconds(dir)?;
    let inner = subdirs(dir).filter_map(|ns| seconds(&dir.join(ns)));
    Some(inner.fold(own, u64::max))
}
