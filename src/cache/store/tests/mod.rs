//! The store's unit tests, by job, and the helpers they share: a store in a scratch
//! directory, small objects as the apiserver sends them, snapshots of everything stored.

mod check;
mod index;
mod lock;
mod objects;
mod recovery;
mod relist;
mod replace;
mod tokens;
mod views;

use super::journal::JOURNAL_PREFIX;
use super::*;
use crate::cache::key::{TokenKey, non_resource_file_name};
use crate::cache::temp_dir::TempDir;
use crate::dir_lock::NOTE_FILE as LOCK_FILE;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

/// Everything stored under a root: path → bytes (`None` for a directory); the staging
/// directory and the lock file (whose content is the pid of whoever opened the store) left
/// out.
type Snapshot = BTreeMap<String, Option<Vec<u8>>>;

fn open(dir: &TempDir) -> Store {
    Store::open(&dir.root()).unwrap().0
}

/// A store whose replacements all stop at `step`, as a crash would.
fn open_crashing_at(dir: &TempDir, step: CommitStep) -> Store {
    let options = StoreOptions {
        crash_at: Some(step),
        ..StoreOptions::default()
    };
    Store::open_with(&dir.root(), options).unwrap().0
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

fn get(store: &Store, c: &CollectionKey, namespace: Option<&str>, name: &str) -> Option<Vec<u8>> {
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

/// Everything under the root but the staging directory and the lock's note: path → bytes
/// (`None` for a directory); empty for a root that does not exist.
pub(super) fn snapshot(root: &Path) -> Snapshot {
    fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            if rel == STAGING || rel == LOCK_FILE {
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
    if root.exists() {
        walk(root, root, &mut out);
    }
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

/// Stored before each replacement test: a/x, a/y, a/z (newer than the list, but stored
/// before it: a whole list removes it all the same), a/w (out of the selector's scope) and
/// b/q.
/// A replacement of `pods()` that has staged a change (a/x at 9) and a new object (c/new),
/// not committed.
fn stage_two(store: &Store) -> Replace<'_> {
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
    replace
}

fn seed_replace(store: &Store) {
    put(store, &pods(), Some("a"), "x", 5, "web");
    put(store, &pods(), Some("a"), "y", 5, "web");
    put(store, &pods(), Some("a"), "z", 50, "web");
    put(store, &pods(), Some("a"), "w", 5, "db");
    put(store, &pods(), Some("b"), "q", 5, "web");
}
