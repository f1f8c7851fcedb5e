//! Lists proven unchanged (issue 34). An answer to the same list (collection, namespace and
//! selectors, never a page) at the same list `metadata.resourceVersion` is the same snapshot
//! of the cloud: Kubernetes guarantees it. So when the writer committed such a list whole and
//! its collection has not changed since (the store's generation, `store/generation.rs`),
//! committing it again would change nothing. The writer then reads the new answer only up to
//! its `metadata` (the apiserver writes it before `items`), tells the session it needs no more
//! of it (the tee stops copying), and at its end does the bookkeeping of a committed list and
//! nothing else.
//!
//! Only a streamed list (32 KiB or more) is taken on the guarantee. One that reaches the
//! writer whole is small and always read: reading it costs about what the proof does, and a
//! cloud that answers one scope twice at one resourceVersion with other objects (a query
//! misread on the way) is then followed there.
//!
//! What is remembered, per scope and in memory only: the list's resourceVersion, how many
//! objects it held, what its body was a function of (its form: the cloud's bytes as sent,
//! or a rewrite by filters that read nothing but the object and fixed settings; a filter that
//! reads the cloud, or an answer the hub made, has none) and the collection's generation
//! right after its commit. A memo is made only by a whole commit of a known form that found
//! every object already stored as listed and nothing else in scope (it wrote and deleted
//! nothing, kept nothing newer beside it): then the scope holds exactly the list, and the
//! store's index knows each of its objects as stored, so that a reader finding one of those
//! files damaged or gone drops its entry and moves the generation (as without memos, where
//! the next list would then write it again). A list that changed the cache is so proven
//! only from its next repeat on. Anything else, and any doubt (items before `metadata`, a
//! `continue` token, a kind that is not a list), goes the whole way, which is always right,
//! only slower.

use std::collections::HashMap;

use crate::cache::key::CollectionKey;
use crate::cache::store::{Generation, Store};
use crate::cache::target::CacheTarget;
use crate::selector::Selectors;

/// Scopes remembered per collection; past it the oldest goes.
const PER_COLLECTION: usize = 8;
/// Collections remembered; past it all are forgotten (a memo is an optimisation only).
const COLLECTIONS: usize = 256;

/// One whole list committed.
struct Memo {
    namespace: Option<String>,
    selectors: Selectors,
    list_rv: String,
    /// What its body was a function of (`Session::reproducible`).
    form: u64,
    /// Objects it held, as the commit counted them.
    items: usize,
    generation: Generation,
}

/// What proves a new answer unchanged: the memo's facts, and the generation they hold at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proven {
    /// The list's resourceVersion.
    pub(super) list_rv: String,
    /// Objects the list holds.
    pub(super) items: usize,
    /// The collection's generation when it was proven: the end checks it again.
    pub(super) generation: Generation,
}

/// The writer's memos of whole lists, by collection.
#[derive(Default)]
pub(super) struct Memos {
    by_collection: HashMap<CollectionKey, Vec<Memo>>,
}

/// The scope of a list target: (collection, namespace, selectors), or `None` for a page or
/// anything not a list.
fn scope(target: &CacheTarget) -> Option<(&CollectionKey, Option<&str>, &Selectors)> {
    match target {
        CacheTarget::List {
            collection,
            namespace,
            selectors,
            paged: false,
        } => Some((collection, namespace.as_deref(), selectors)),
        _ => None,
    }
}

impl Memos {
    /// Whether an answer for `target` of `form` at `list_rv` is proven unchanged: the same
    /// scope was committed whole in that form at that resourceVersion, and its collection
    /// has not changed since.
    pub(super) fn proves(
        &self,
        store: &Store,
        target: &CacheTarget,
        form: u64,
        list_rv: &str,
    ) -> Option<Proven> {
        let (collection, namespace, selectors) = scope(target)?;
        let memo = self
            .by_collection
            .get(collection)?
            .iter()
            .find(|m| m.namespace.as_deref() == namespace && m.selectors == *selectors)?;
        let generation = store.generation(collection);
        let same = memo.list_rv == list_rv && memo.form == form;
        (same && memo.generation == generation).then(|| Proven {
            list_rv: memo.list_rv.clone(),
            items: memo.items,
            generation,
        })
    }

    /// A list for `target` was committed: remembered with its `form` when it has one (a
    /// whole answer of a known form that left the scope holding exactly its `items`
    /// objects, at `list_rv`), else whatever was remembered of the scope is forgotten.
    pub(super) fn committed(
        &mut self,
        store: &Store,
        target: &CacheTarget,
        list_rv: Option<&str>,
        items: usize,
        form: Option<u64>,
    ) {
        let Some((collection, namespace, selectors)) = scope(target) else {
            return;
        };
        let same = |m: &Memo| m.namespace.as_deref() == namespace && m.selectors == *selectors;
        // An answer without a resourceVersion names no snapshot: it proves nothing.
        let list_rv = list_rv.filter(|rv| !rv.is_empty());
        let (Some(list_rv), Some(form)) = (list_rv, form) else {
            if let Some(memos) = self.by_collection.get_mut(collection) {
                memos.retain(|m| !same(m));
            }
            return;
        };
        if self.by_collection.len() >= COLLECTIONS && !self.by_collection.contains_key(collection) {
            self.by_collection.clear();
        }
        let memos = self.by_collection.entry(collection.clone()).or_default();
        memos.retain(|m| !same(m));
        if memos.len() >= PER_COLLECTION {
            memos.remove(0);
        }
        memos.push(Memo {
            namespace: namespace.map(str::to_owned),
            selectors: selectors.clone(),
            list_rv: list_rv.to_owned(),
            form,
            items,
            generation: store.generation(collection),
        });
    }
}

#[cfg(test)]
mod tests;
