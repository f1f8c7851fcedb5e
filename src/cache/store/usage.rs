//! What the cache's files weigh (`--cache-max-bytes`): bytes and files per collection
//! (component, kind directory), per component's token answers, and three buckets besides:
//! non-resource documents, the dot records beside the cache (`.synced`, `.grants`, …) and
//! `.staging` (a list being staged occupies flash too). `.quarantine` is left out: the
//! operator's to empty.
//!
//! Counted once by a walk ([`Store::take_census`], sizes only, no file read: at open, or by
//! the writer once the background index build is over, so that no write races the walk) and
//! kept exact from then on by the store's write paths, with the total beside the rows: a put stats the file it replaces, a
//! removal the file it removes, a collection deleted whole drops its row, a list committed
//! weighs its journal's renames (one stat each, of the file replaced) and deletions (the
//! sizes read to judge them), and recounts its kind directory only when the journal did not
//! apply whole, a token
//! answer recounts its service account's directory. The records bucket is recounted when
//! the bound is judged ([`Store::usage`] with `fresh_records`): those files are written by
//! their own modules at their own pace, a few hundred bytes each. A few hundred rows at most:
//! one per kind directory the cache holds.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{MutexGuard, PoisonError};
use std::time::SystemTime;

use super::{STAGING, Store, kind_dirs_below_root};
use crate::cache::key::{CollectionKey, METADATA_DIR, ObjectKey, TokenKey};
use crate::names::is_safe_segment;

/// Bytes and files of one bucket.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Weight {
    /// Sum of the regular files' sizes.
    pub bytes: u64,
    /// Regular files.
    pub files: u64,
}

impl Weight {
    fn add(&mut self, bytes: u64, files: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.files = self.files.saturating_add(files);
    }

    fn sub(&mut self, bytes: u64, files: u64) {
        self.bytes = self.bytes.saturating_sub(bytes);
        self.files = self.files.saturating_sub(files);
    }
}

/// Where a file's bytes count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bucket {
    /// An object of a collection: its kind directory below the root (`kubelet/pods.v1.core`).
    Collection(String),
    /// A non-resource document in the root.
    Document,
}

/// The cache's weight, by bucket.
#[derive(Debug, Default, Clone)]
pub(crate) struct Usage {
    /// Whether the census at open has been taken: until then the figures are partial and
    /// the bound is not enforced.
    pub counted: bool,
    /// Per kind directory below the root: (component, kind directory below the component's,
    /// as [`CollectionKey::dir_name`] spells it).
    pub collections: BTreeMap<(String, String), Weight>,
    /// Token answers per component.
    pub tokens: BTreeMap<String, Weight>,
    /// Non-resource documents.
    pub documents: Weight,
    /// The dot records beside the cache (and the lock's note).
    pub records: Weight,
    /// Everything under `.staging`.
    pub staging: Weight,
    /// [`Usage::total`], kept by every change through the store (the writer asks it at
    /// each write: no sum over the rows then).
    kept: u64,
    /// A key reused to look a row up without allocating.
    scratch: (String, String),
}

impl Usage {
    /// Bytes of every bucket.
    pub(crate) fn total(&self) -> u64 {
        let rows = self.collections.values().chain(self.tokens.values());
        rows.chain([&self.documents, &self.records, &self.staging])
            .fold(0u64, |sum, w| sum.saturating_add(w.bytes))
    }

    /// The row of `collection`.
    pub(crate) fn of(&self, collection: &CollectionKey) -> Weight {
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        self.collections.get(&key).copied().unwrap_or_default()
    }

    fn bucket(&mut self, bucket: &Bucket) -> &mut Weight {
        match bucket {
            Bucket::Document => &mut self.documents,
            Bucket::Collection(rel) => {
                let (component, dir) = rel.split_once('/').unwrap_or((rel.as_str(), ""));
                // The key spelled into a reused one: no allocation when the row exists, as
                // it does for every object but a kind's first.
                let (c, d) = &mut self.scratch;
                c.clear();
                c.push_str(component);
                d.clear();
                d.push_str(dir);
                if !self.collections.contains_key(&self.scratch) {
                    self.collections
                        .insert(self.scratch.clone(), Weight::default());
                }
                self.collections
                    .get_mut(&self.scratch)
                    .unwrap_or(&mut self.documents)
            }
        }
    }

    /// `kept` after a bucket went from `before` bytes to `after`.
    fn moved(&mut self, before: u64, after: u64) {
        self.kept = self.kept.saturating_sub(before).saturating_add(after);
    }
}

/// The sizes of the regular files directly in `dir` and one level of directories down
/// (a kind directory: cluster-scoped objects, namespaces' objects), never following a link.
fn kind_dir_weight(dir: &Path) -> Weight {
    let mut weight = Weight::default();
    walk(dir, 1, &mut |bytes| weight.add(bytes, 1));
    weight
}

/// How deep a walk of a tree outside the collections (the quarantine, tokens) goes.
pub(super) const TREE_DEPTH: u32 = 16;

/// Calls `f` with the size of each regular file under `dir`, `depth` directory levels down
/// at most; links are not followed.
pub(super) fn walk(dir: &Path, depth: u32, f: &mut dyn FnMut(u64)) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_file() {
            f(entry.metadata().map_or(0, |m| m.len()));
        } else if kind.is_dir() && depth > 0 {
            walk(&entry.path(), depth - 1, f);
        }
    }
}

/// The size of the regular file at `path`, `None` when there is none (links not followed).
pub(super) fn file_len(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|m| m.len())
}

/// The weight of the dot records in `root` (regular files whose name starts with a dot).
fn records_weight(root: &Path) -> Weight {
    let mut weight = Weight::default();
    for entry in fs::read_dir(root).into_iter().flatten().flatten() {
        let dot = entry.file_name().as_encoded_bytes().first() == Some(&b'.');
        if dot && entry.file_type().is_ok_and(|t| t.is_file()) {
            weight.add(entry.metadata().map_or(0, |m| m.len()), 1);
        }
    }
    weight
}

/// Counts every file under `root` into a fresh [`Usage`].
fn census(root: &Path) -> Usage {
    let mut usage = Usage {
        counted: true,
        records: records_weight(root),
        ..Usage::default()
    };
    walk(&root.join(STAGING), 8, &mut |bytes| {
        usage.staging.add(bytes, 1)
    });
    for entry in fs::read_dir(root).into_iter().flatten().flatten() {
        let (Ok(kind), Ok(name)) = (entry.file_type(), entry.file_name().into_string()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        if kind.is_file() {
            usage
                .documents
                .add(entry.metadata().map_or(0, |m| m.len()), 1);
            continue;
        }
        if !kind.is_dir() {
            continue;
        }
        let component = entry.path();
        for inner in fs::read_dir(&component).into_iter().flatten().flatten() {
            let (Ok(kind), Ok(dir)) = (inner.file_type(), inner.file_name().into_string()) else {
                continue;
            };
            if !kind.is_dir() {
                continue;
            }
            if dir == TokenKey::DIR {
                let tokens = usage.tokens.entry(name.clone()).or_default();
                walk(&inner.path(), 2, &mut |bytes| tokens.add(bytes, 1));
            } else if dir == METADATA_DIR {
                for view in fs::read_dir(inner.path()).into_iter().flatten().flatten() {
                    if view.file_type().is_ok_and(|t| t.is_dir())
                        && let Ok(kind) = view.file_name().into_string()
                    {
                        let weight = kind_dir_weight(&view.path());
                        usage
                            .collections
                            .insert((name.clone(), format!("{dir}/{kind}")), weight);
                    }
                }
            } else {
                let weight = kind_dir_weight(&inner.path());
                usage.collections.insert((name.clone(), dir), weight);
            }
        }
    }
    usage
}

impl Store {
    fn usage_lock(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts every file under the root (sizes only): the figures [`Store::usage`] reports
    /// from now on, kept by the write paths. At open when the index is built there; else the
    /// writer's to call (the bound's `settle`), so no write races the walk.
    pub(crate) fn take_census(&self) {
        let mut counted = census(&self.root);
        counted.kept = counted.total();
        *self.usage_lock() = counted;
    }

    /// What the cache's files weigh now; with `fresh_records`, the dot records are counted
    /// again first (a few stats).
    pub(crate) fn usage(&self, fresh_records: bool) -> Usage {
        let records = fresh_records.then(|| records_weight(&self.root));
        let mut usage = self.usage_lock();
        if let Some(records) = records {
            let before = std::mem::replace(&mut usage.records, records).bytes;
            usage.moved(before, records.bytes);
        }
        usage.clone()
    }

    /// Bytes under `<root>/.quarantine` (`tinyhub cache repair`'s): outside the bound, but
    /// on the same flash.
    pub(crate) fn quarantine_bytes(&self) -> u64 {
        let mut bytes = 0u64;
        walk(&self.root.join(".quarantine"), TREE_DEPTH, &mut |len| {
            bytes = bytes.saturating_add(len)
        });
        bytes
    }

    /// The cache's bytes now, and whether they were counted (the census ran).
    pub(crate) fn usage_total(&self) -> (u64, bool) {
        let usage = self.usage_lock();
        (usage.kept, usage.counted)
    }

    /// A file of `bucket` went from `old` bytes (`None`: there was none) to `new` (`None`:
    /// removed).
    pub(super) fn weigh(&self, bucket: &Bucket, old: Option<u64>, new: Option<u64>) {
        let mut usage = self.usage_lock();
        let weight = usage.bucket(bucket);
        let before = weight.bytes;
        if let Some(old) = old {
            weight.sub(old, 1);
        }
        if let Some(new) = new {
            weight.add(new, 1);
        }
        let after = weight.bytes;
        usage.moved(before, after);
    }

    /// Files of `bucket` went (`gone`) and came (`added`): a journal applied.
    pub(super) fn weigh_rows(&self, bucket: &Bucket, gone: Weight, added: Weight) {
        let mut usage = self.usage_lock();
        let weight = usage.bucket(bucket);
        let before = weight.bytes;
        weight.sub(gone.bytes, gone.files);
        weight.add(added.bytes, added.files);
        let after = weight.bytes;
        usage.moved(before, after);
    }

    /// `bytes` more (`staged`) or fewer (not) in `.staging`, in `files` files.
    pub(super) fn weigh_staging(&self, staged: bool, bytes: u64, files: u64) {
        let mut usage = self.usage_lock();
        let before = usage.staging.bytes;
        if staged {
            usage.staging.add(bytes, files);
        } else {
            usage.staging.sub(bytes, files);
        }
        let after = usage.staging.bytes;
        usage.moved(before, after);
    }

    /// Counts `collection`'s kind directory again (after a list's journal was applied).
    pub(super) fn recount(&self, collection: &CollectionKey) {
        let (_, kind) = kind_dirs_below_root(collection);
        let weight = kind_dir_weight(&self.root.join(&kind));
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        let mut usage = self.usage_lock();
        let before = if weight == Weight::default() {
            usage.collections.remove(&key)
        } else {
            usage.collections.insert(key, weight)
        };
        usage.moved(before.unwrap_or_default().bytes, weight.bytes);
    }

    /// `collection` is gone whole (or was found not there).
    pub(crate) fn drop_row(&self, collection: &CollectionKey) {
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        let mut usage = self.usage_lock();
        if let Some(before) = usage.collections.remove(&key) {
            usage.moved(before.bytes, 0);
        }
    }

    /// A component's token answers went from `before` to `after` in one service account's
    /// directory.
    pub(super) fn weigh_tokens(&self, component: &str, before: Weight, after: Weight) {
        let mut usage = self.usage_lock();
        let tokens = usage.tokens.entry(component.to_owned()).or_default();
        let was = tokens.bytes;
        tokens.sub(before.bytes, before.files);
        tokens.add(after.bytes, after.files);
        let now = tokens.bytes;
        usage.moved(was, now);
    }
}

impl Store {
    /// The size of `key`'s stored file; `None` when there is none (or the key is unsafe).
    pub(crate) fn object_len(&self, key: &ObjectKey) -> Option<u64> {
        if key.collection.unsafe_field().is_some()
            || !key.namespace.as_deref().is_none_or(is_safe_segment)
            || !is_safe_segment(&key.name)
        {
            return None;
        }
        let kind_dir = self.root.join(kind_dirs_below_root(&key.collection).1);
        let dir = match &key.namespace {
            Some(ns) => kind_dir.join(ns),
            None => kind_dir,
        };
        file_len(&dir.join(&key.name))
    }

    /// Every object file of `c` with its modification time and size, as (modified, bytes,
    /// namespace, name), in name order: what the bound evicts objects by. Stats only.
    pub(crate) fn object_times(
        &self,
        c: &CollectionKey,
    ) -> Vec<(SystemTime, u64, Option<String>, String)> {
        let Ok(Some(names)) = self.names(c, None) else {
            return Vec::new();
        };
        let kind_dir = self.root.join(kind_dirs_below_root(c).1);
        names
            .filter_map(Result::ok)
            .filter_map(|(namespace, name)| {
                let path = match &namespace {
                    Some(ns) => kind_dir.join(ns).join(&name),
                    None => kind_dir.join(&name),
                };
                let meta = fs::symlink_metadata(path).ok()?;
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                meta.file_type()
                    .is_file()
                    .then_some((modified, meta.len(), namespace, name))
            })
            .collect()
    }
}

/// The weight of one service account's token directory.
pub(super) fn account_weight(dir: &Path) -> Weight {
    let mut weight = Weight::default();
    walk(dir, 0, &mut |bytes| weight.add(bytes, 1));
    weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;

    fn key(c: &CollectionKey, ns: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            collection: c.clone(),
            namespace: ns.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// Every write path keeps the figures equal to a fresh census of the disk.
    #[test]
    fn the_write_paths_keep_the_census_exact() {
        let dir = TempDir::new("usage");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let slices = CollectionKey::new("kube-proxy", "endpointslices", "v1", "discovery.k8s.io");
        let exact = |store: &Store| {
            let kept = store.usage(true);
            let counted = census(&dir.root());
            assert_eq!(kept.collections, counted.collections);
            assert_eq!(kept.documents, counted.documents);
            assert_eq!(kept.tokens, counted.tokens);
            assert_eq!(kept.total(), counted.total());
            assert_eq!(store.usage_total().0, kept.total(), "the running total");
            kept
        };
        let obj = |name: &str, rv: u32, pad: usize| {
            format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"a","resourceVersion":"{rv}"}},"x":"{}"}}"#,
                "p".repeat(pad)
            )
        };
        store
            .put(
                &key(&pods, Some("a"), "p1"),
                obj("p1", 1, 10).as_bytes(),
                Some("1"),
            )
            .unwrap();
        store
            .put(
                &key(&pods, Some("a"), "p2"),
                obj("p2", 2, 100).as_bytes(),
                Some("2"),
            )
            .unwrap();
        // Replaced by a larger and a smaller version.
        store
            .put(
                &key(&pods, Some("a"), "p1"),
                obj("p1", 3, 500).as_bytes(),
                Some("3"),
            )
            .unwrap();
        store
            .put(
                &key(&pods, Some("a"), "p2"),
                obj("p2", 4, 1).as_bytes(),
                Some("4"),
            )
            .unwrap();
        let kept = exact(&store);
        assert_eq!(kept.of(&pods).files, 2);
        store.delete(&key(&pods, Some("a"), "p2"), None).unwrap();
        store
            .put_non_resource("version", b"{\"major\":\"1\"}")
            .unwrap();
        exact(&store);
        let mut replace = store.begin_replace(&slices, None).unwrap();
        for i in 0..5 {
            let name = format!("s{i}");
            replace
                .put(Some("a"), &name, obj(&name, 10 + i, 50).as_bytes(), None)
                .unwrap();
        }
        assert!(store.usage(false).staging.bytes > 0, "staged bytes count");
        replace.commit(&mut |_| true, Some("20")).unwrap();
        let kept = exact(&store);
        assert_eq!(kept.of(&slices).files, 5);
        assert_eq!(kept.staging, Weight::default());
        // A smaller whole list deletes the rest.
        let mut replace = store.begin_replace(&slices, None).unwrap();
        replace
            .put(Some("a"), "s0", obj("s0", 30, 5).as_bytes(), None)
            .unwrap();
        replace.commit(&mut |_| true, Some("30")).unwrap();
        assert_eq!(exact(&store).of(&slices).files, 1);
        // An answer naming one object twice: two renames onto one file.
        let mut replace = store.begin_replace(&slices, None).unwrap();
        for (rv, pad) in [(31, 5), (32, 300)] {
            replace
                .put(Some("a"), "s0", obj("s0", rv, pad).as_bytes(), None)
                .unwrap();
        }
        replace.commit(&mut |_| true, Some("32")).unwrap();
        assert_eq!(exact(&store).of(&slices).files, 1);
        // An abandoned one leaves nothing staged.
        let mut replace = store.begin_replace(&slices, None).unwrap();
        replace
            .put(Some("a"), "s9", obj("s9", 40, 5).as_bytes(), None)
            .unwrap();
        drop(replace);
        assert_eq!(exact(&store).staging, Weight::default());
        let token = TokenKey {
            component: crate::names::Component::KUBELET,
            namespace: "a".into(),
            name: "default".into(),
            digest: "d1".into(),
        };
        store
            .put_token(&token, b"{\"status\":{\"token\":\"t\"}}")
            .unwrap();
        assert_eq!(exact(&store).tokens["kubelet"].files, 1);
        assert!(store.delete_collection(&slices).unwrap());
        let kept = exact(&store);
        assert_eq!(kept.of(&slices), Weight::default());
        assert!(kept.total() > 0 && kept.counted);
        // A reopen counts the same.
        drop(store);
        let (store, _) = Store::open(&dir.root()).unwrap();
        assert_eq!(store.usage(true).total(), kept.total());
    }

    /// In the hub the index is built on its own thread, beside the writer: the census is
    /// not taken there (it would overwrite the writer's figures with a walk's older ones)
    /// but by the writer once the build is over, and is exact.
    #[test]
    fn a_background_build_leaves_the_census_to_the_writer() {
        let dir = TempDir::new("usage-background");
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let obj = |name: &str| {
            format!(r#"{{"metadata":{{"name":"{name}","namespace":"a","resourceVersion":"1"}}}}"#)
        };
        {
            let (store, _) = Store::open(&dir.root()).unwrap();
            for i in 0..50 {
                let name = format!("p{i}");
                store
                    .put(&key(&pods, Some("a"), &name), obj(&name).as_bytes(), None)
                    .unwrap();
            }
        }
        let options = super::super::StoreOptions {
            background_index: true,
            index_pause: Some(std::time::Duration::from_millis(1)),
            ..Default::default()
        };
        let store = std::sync::Arc::new(Store::open_with(&dir.root(), options).unwrap().0);
        store.start_index();
        // The writer, meanwhile.
        for i in 50..60 {
            let name = format!("p{i}");
            store
                .put(&key(&pods, Some("a"), &name), obj(&name).as_bytes(), None)
                .unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while store.index_building() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!store.index_building());
        assert!(!store.usage_total().1, "the build's thread took the census");
        store.take_census();
        let kept = store.usage(true);
        assert!(kept.counted);
        assert_eq!(kept.of(&pods).files, 60);
        assert_eq!(kept.total(), census(&dir.root()).total());
    }

    /// A collection deleted whole forgets its own index entries, not the others'.
    #[test]
    fn a_collection_deleted_whole_keeps_the_other_collections_index_entries() {
        let dir = TempDir::new("usage-index");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let maps = CollectionKey::new("coredns", "configmaps", "v1", "");
        for (c, n) in [(&pods, 3), (&maps, 5)] {
            for i in 0..n {
                let name = format!("o{i}");
                let body = format!(
                    r#"{{"metadata":{{"name":"{name}","namespace":"a","resourceVersion":"1"}}}}"#
                );
                store
                    .put(&key(c, Some("a"), &name), body.as_bytes(), None)
                    .unwrap();
            }
        }
        assert_eq!(store.index().len(), 8);
        assert!(store.delete_collection(&maps).unwrap());
        assert_eq!(store.index().len(), 3, "kubelet's pods stay indexed");
    }
}
