//! The store's memory of recent deletions, so that a replayed watch event or an older list
//! cannot write back what a DELETED or a list removed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError};

use super::Store;
#[cfg(doc)]
use crate::cache::key::rv_newer;
use crate::cache::key::{CollectionKey, ObjectKey};

/// Deletions the store remembers; past it the oldest is forgotten first. A few hundred bytes
/// each: deletions are rare on a node, and a replay reaches back minutes at most.
const TOMBSTONES: usize = 1024;

/// Objects the store removed, each with the highest resourceVersion known to be stale.
///
/// Responses interleave in the writer, and a client resuming its watch from an old
/// resourceVersion replays versions the cache has already replaced. While the file is there
/// the store refuses them as older; once a DELETED or a list removed it, nothing on disk
/// says they are old, and the replay would write an older version back (one that stays if
/// the hub is killed before the replay reaches the deletion). A list staged before the
/// deletion would do the same at its commit.
///
/// A list taken at or after the moment the object was known gone is different: it is the
/// cloud's truth at its resourceVersion, so an object it returns exists, and a tombstone
/// that says otherwise is wrong (made by a DELETED that only meant "left this watch's
/// selector", or by a replacement whose scope was not the cloud's). Such a list is never
/// refused (see [`Tombstone`]). A whole list is not refused by any tombstone made before it
/// began, whatever its resourceVersion (they go backwards after an etcd restore): these
/// bounds judge only partial lists, and what a watch deleted while a whole list was staged
/// (see "Whose version wins" in `mod.rs`).
#[derive(Debug, Default)]
pub(super) struct Tombstones {
    /// `Arc`, not `Rc`: the store is shared with reader threads, so this must be `Send`.
    stale_up_to: HashMap<Arc<ObjectKey>, Tombstone>,
    /// Oldest first, for forgetting.
    order: VecDeque<Arc<ObjectKey>>,
}

/// What one removal says of an object's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tombstone {
    /// Versions up to this one are stale: watch events, gets and lists taken before
    /// `gone_at` may not write them back.
    up_to: u64,
    /// The resourceVersion at which the cloud said the object was gone: the DELETED event's,
    /// or that of the list that left it out. A list at or after it saw the cloud after the
    /// removal; if it returns a version up to `up_to` (which exists from that version up to
    /// the list's, so also at `gone_at`), the removal was not the cloud's, and the list wins.
    gone_at: u64,
}

impl Tombstones {
    /// Whether no removal is remembered (a lookup has nothing to find).
    pub(super) fn is_empty(&self) -> bool {
        self.stale_up_to.is_empty()
    }

    /// Versions of the object up to `rv` may no longer be written, unless by a list taken at
    /// or after `gone_at`.
    pub(super) fn bury(&mut self, key: &ObjectKey, up_to: u64, gone_at: u64) {
        if let Some(t) = self.stale_up_to.get_mut(key) {
            t.up_to = t.up_to.max(up_to);
            t.gone_at = t.gone_at.max(gone_at);
            return;
        }
        if self.order.len() >= TOMBSTONES
            && let Some(oldest) = self.order.pop_front()
        {
            self.stale_up_to.remove(&oldest);
        }
        let key = Arc::new(key.clone());
        self.order.push_back(Arc::clone(&key));
        self.stale_up_to.insert(key, Tombstone { up_to, gone_at });
    }

    /// Whether version `rv` of `key` is at or below one the store removed. An unreadable
    /// version never counts as stale, as in [`rv_newer`]. `list_rv` is the resourceVersion
    /// of the list answer that returns `rv` (None for anything else): a list taken at or
    /// after the removal is never refused.
    pub(super) fn buries(&self, key: &ObjectKey, rv: Option<&str>, list_rv: Option<u64>) -> bool {
        if self.stale_up_to.is_empty() {
            return false;
        }
        let Some(rv) = rv.and_then(|rv| rv.parse::<u64>().ok()) else {
            return false;
        };
        self.stale_up_to
            .get(key)
            .is_some_and(|t| rv <= t.up_to && list_rv.is_none_or(|list_rv| list_rv < t.gone_at))
    }

    /// The keys of `c` (in `namespace`, when given) removed at a resourceVersion above
    /// `after`.
    fn removed_after(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
        after: u64,
    ) -> Vec<(Option<String>, String)> {
        let mut found: Vec<_> = self
            .stale_up_to
            .iter()
            .filter(|(key, t)| {
                t.gone_at > after
                    && key.collection == *c
                    && namespace.is_none_or(|ns| key.namespace.as_deref() == Some(ns))
            })
            .map(|(key, _)| (key.namespace.clone(), key.name.clone()))
            .collect();
        found.sort_unstable();
        found
    }
}

/// The tombstones, locked (only the writer thread writes: never contended).
impl Store {
    /// Versions of `key` up to `up_to` may no longer be written, but by a list taken at or
    /// after `gone_at`.
    pub(super) fn bury(&self, key: &ObjectKey, up_to: u64, gone_at: u64) {
        self.tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bury(key, up_to, gone_at);
    }

    /// The objects of a collection (in `namespace`, when given) that the store removed at a
    /// resourceVersion above `after` and still remembers (the last [`TOMBSTONES`] removals),
    /// sorted by (namespace, name); none is read. What a resumed watch's difference must
    /// also send as deleted: another stream of the component may have removed an object
    /// after this watch's last version (the cache is then ahead of the client).
    pub(crate) fn removed_after(
        &self,
        c: &CollectionKey,
        namespace: Option<&str>,
        after: u64,
    ) -> Vec<(Option<String>, String)> {
        self.tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .removed_after(c, namespace, after)
    }

    /// Whether version `rv` of `key` (not from a list) is at or below one this store removed.
    pub(super) fn buries(&self, key: &ObjectKey, rv: Option<&str>) -> bool {
        self.tombstones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buries(key, rv, None)
    }
}

#[cfg(test)]
mod tests;
