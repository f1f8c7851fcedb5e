//! How often each collection changed since the store opened: a number per kind directory,
//! moved by every change the store makes to that collection's files or to what its index
//! believes of them, and one for the whole cache, moved when a change cannot be pinned to a
//! collection. Equal numbers at two moments prove that nothing the store did (or learnt)
//! touched the collection in between: the writer's proof that a list it committed still
//! describes what is stored (`cache/writer/unchanged.rs`).
//!
//! What moves a collection's number: a put (written, or failed: the file may be either),
//! a delete (a tombstone alone too), a replacement that wrote a journal, the collection
//! deleted whole (a 404 prune, an eviction), a relist mark, and a reader finding a file that
//! does not match the index (or no file) and dropping its entry. What moves the whole
//! cache's: a journal that moves whole directories (the index cleared).
//!
//! In memory only: a restart begins with no proof (the writer's memo is in memory too).
//! Nothing else writes the root while the store holds its lock (`dir_lock.rs`); a file
//! changed behind the store's back is caught as the index catches it, when a reader reads
//! it.

use std::collections::HashMap;
use std::sync::{MutexGuard, PoisonError};

use super::{Store, kind_dirs_below_root};
use crate::cache::key::CollectionKey;

/// A collection's change count at one moment; equal values: nothing changed in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation {
    /// The whole cache's count.
    epoch: u64,
    /// The collection's own.
    own: u64,
}

/// The counts, per kind directory below the root (`kubelet/pods.v1.core`). A few hundred at
/// most: one per collection changed since the store opened.
#[derive(Debug, Default)]
pub(super) struct Generations {
    epoch: u64,
    kinds: HashMap<String, u64>,
}

impl Store {
    /// `c`'s change count now.
    pub(crate) fn generation(&self, c: &CollectionKey) -> Generation {
        let kind = kind_dirs_below_root(c).1;
        let generations = self.generations();
        Generation {
            epoch: generations.epoch,
            own: generations.kinds.get(&kind).copied().unwrap_or(0),
        }
    }

    /// The collection in kind directory `kind_rel` (below the root) changed, or may have.
    pub(super) fn moved(&self, kind_rel: &str) {
        let mut generations = self.generations();
        match generations.kinds.get_mut(kind_rel) {
            Some(own) => *own += 1,
            None => {
                generations.kinds.insert(kind_rel.to_owned(), 1);
            }
        }
    }

    /// [`Store::moved`] by key.
    pub(super) fn moved_collection(&self, c: &CollectionKey) {
        self.moved(&kind_dirs_below_root(c).1);
    }

    /// Something changed that cannot be pinned to one collection: every count moves.
    pub(super) fn moved_all(&self) {
        self.generations().epoch += 1;
    }

    fn generations(&self) -> MutexGuard<'_, Generations> {
        self.generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use crate::cache::key::{CollectionKey, ObjectKey};
    use crate::cache::store::Store;
    use crate::cache::temp_dir::TempDir;

    fn key(c: &CollectionKey, name: &str) -> ObjectKey {
        ObjectKey {
            collection: c.clone(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn pod(name: &str, rv: u64) -> Vec<u8> {
        format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
        )
        .into_bytes()
    }

    /// Every change the store makes to a collection moves its count, and only its; an
    /// identical put, a read that matches, or another collection's change do not.
    #[test]
    fn every_change_to_a_collection_moves_its_generation_and_only_its() {
        let dir = TempDir::new("generation");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let maps = CollectionKey::new("kubelet", "configmaps", "v1", "");
        let moved = |what: &str, f: &dyn Fn()| {
            let (before, other) = (store.generation(&pods), store.generation(&maps));
            f();
            assert_ne!(store.generation(&pods), before, "{what} moves it");
            assert_eq!(store.generation(&maps), other, "{what} leaves others");
        };
        let still = |what: &str, f: &dyn Fn()| {
            let before = store.generation(&pods);
            f();
            assert_eq!(store.generation(&pods), before, "{what} leaves it");
        };
        moved("a put", &|| {
            store
                .put(&key(&pods, "a"), &pod("a", 5), Some("5"))
                .unwrap();
        });
        still("an identical put", &|| {
            store
                .put(&key(&pods, "a"), &pod("a", 5), Some("5"))
                .unwrap();
        });
        still("a read that matches", &|| {
            store.get(&key(&pods, "a")).unwrap().unwrap();
        });
        still("another collection's put", &|| {
            store.put(&key(&maps, "m"), b"{}", None).unwrap();
        });
        // A file damaged behind the store's back, found by a reader.
        let file = dir.root().join("kubelet/pods.v1.core/ns/a");
        std::fs::write(&file, pod("a", 4)).unwrap();
        moved("a read that finds it changed", &|| {
            store.get(&key(&pods, "a")).unwrap();
        });
        // Stored again (the index knows it), then removed behind the store's back.
        store
            .put(&key(&pods, "a"), &pod("a", 6), Some("6"))
            .unwrap();
        std::fs::remove_file(&file).unwrap();
        moved("a read that finds it gone", &|| {
            store.get(&key(&pods, "a")).unwrap();
        });
        moved("a delete", &|| {
            store.delete(&key(&pods, "b"), Some("9")).unwrap();
        });
        moved("a relist mark", &|| {
            store
                .mark_relist(&pods, crate::cache::store::relist::RelistReason::Evicted)
                .unwrap();
        });
        store
            .put(&key(&pods, "c"), &pod("c", 6), Some("6"))
            .unwrap();
        moved("a replacement that writes", &|| {
            let mut replace = store.begin_replace(&pods, None).unwrap();
            replace
                .put(Some("ns"), "c", &pod("c", 7), Some("7"))
                .unwrap();
            replace.commit(&mut |_| true, Some("7")).unwrap();
        });
        still("a replacement that changes nothing", &|| {
            let mut replace = store.begin_replace(&pods, None).unwrap();
            replace
                .put(Some("ns"), "c", &pod("c", 7), Some("7"))
                .unwrap();
            replace.commit(&mut |_| true, Some("7")).unwrap();
        });
        moved("the collection deleted whole", &|| {
            store.delete_collection(&pods).unwrap();
        });
    }
}
