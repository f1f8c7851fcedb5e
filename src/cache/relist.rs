//! The hub's side of the relist marks (`store/relist.rs` keeps them, in `<cache>/.relist`):
//! a collection that `tinyhub cache repair` took files out of, or that the bound evicted,
//! is known to be incomplete, so the first watch of each scope of it that begins online
//! hands its refill (the list of the watch's scope, `clients/refill.rs`) to the refill
//! thread at once, as a dropped session would. A whole list of all of the collection (no
//! namespace, no selector) committed by the writer clears the mark, whoever asked for it
//! (`writer/run.rs`); a list of a namespace or a selector does not, since the objects
//! outside its scope may be what is missing, so the watch of another scope still has its
//! own refill. A list needs no help (it is the relist); a get stores its object as always.
//! Until then the collection answers what remains, and readyz's verbose page says
//! `[+]relist pending <component>/<kind> (<reason>)`.
//!
//! The thrash guard: a scope's refill is handed over at most once per [`REFILL_EVERY`], so
//! a collection that is evicted again as soon as it is listed (a bound too small), or one
//! only ever read in scopes, costs the cloud one list per scope per 10 min, not one per
//! watch. A refill the refill thread's full queue refused is not counted: the next watch
//! hands it again.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::key::CollectionKey;
use crate::cache::store::Store;
use crate::cache::store::relist::RelistReason;

/// The least time between two refills the marks hand over for one collection.
pub(crate) const REFILL_EVERY: Duration = Duration::from_secs(600);

/// The marks as the tee sees them: the store's, and when each scope's refill was last
/// handed over.
pub(crate) struct Relist {
    store: Arc<Store>,
    /// `<component>/<kind>` and the scope → when its refill was last handed over; entries
    /// older than [`REFILL_EVERY`] are dropped as others come.
    handed: Mutex<HashMap<(String, String), Instant>>,
}

/// A refill due for a marked collection: hand it over, then [`Relist::handed`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Due {
    /// Why the collection is marked.
    pub reason: RelistReason,
    key: (String, String),
}

impl Relist {
    /// The marks of `store`'s cache.
    pub(crate) fn new(store: Arc<Store>) -> Relist {
        Relist {
            store,
            handed: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a watch of `c` in `scope` (its namespace and selectors, as the refill lists
    /// them) beginning `now` should have that scope relisted at once: `c` is marked, and
    /// no refill of that scope was handed over within [`REFILL_EVERY`].
    pub(crate) fn refill_due(&self, c: &CollectionKey, scope: &str, now: Instant) -> Option<Due> {
        let reason = self.store.relist_reason(c)?;
        let key = (
            format!("{}/{}", c.component, c.dir_name()),
            scope.to_owned(),
        );
        let handed = crate::lock(&self.handed);
        if handed
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < REFILL_EVERY)
        {
            return None;
        }
        Some(Due { reason, key })
    }

    /// The refill `due` said was handed over `now`: not again within [`REFILL_EVERY`].
    pub(crate) fn handed(&self, due: Due, now: Instant) {
        let mut handed = crate::lock(&self.handed);
        handed.retain(|_, at| now.duration_since(*at) < REFILL_EVERY);
        handed.insert(due.key, now);
    }
}

/// readyz's verbose lines for the marked collections: informative, never failing
/// readiness (what is cached still answers).
pub(crate) fn readyz_lines(store: &Store, out: &mut String) {
    for mark in store.relist_pending() {
        let _ = writeln!(
            out,
            "[+]relist pending {}/{} ({})",
            mark.component,
            mark.kind,
            mark.reason.as_str()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;

    #[test]
    fn a_marked_collections_refill_is_handed_over_once_per_ten_minutes() {
        let dir = TempDir::new("relist-guard");
        let store = Arc::new(Store::open(&dir.root()).unwrap().0);
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let nodes = CollectionKey::new("kubelet", "nodes", "v1", "");
        let relist = Relist::new(Arc::clone(&store));
        let t0 = Instant::now();
        let due = |c: &CollectionKey, scope: &str, now: Instant| {
            let due = relist.refill_due(c, scope, now)?;
            let reason = due.reason;
            relist.handed(due, now);
            Some(reason)
        };
        assert_eq!(due(&pods, "", t0), None, "nothing marked");
        store.mark_relist(&pods, RelistReason::Evicted).unwrap();
        // Not handed over (the refill queue was full): due again at once.
        assert!(relist.refill_due(&pods, "", t0).is_some());
        assert_eq!(due(&pods, "", t0), Some(RelistReason::Evicted));
        assert_eq!(due(&nodes, "", t0), None);
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(due(&pods, "", soon), None, "the thrash guard");
        // Another scope of the collection has its own refill.
        assert_eq!(due(&pods, "ns=b", soon), Some(RelistReason::Evicted));
        assert_eq!(due(&pods, "ns=b", soon), None);
        let later = t0 + REFILL_EVERY;
        assert_eq!(due(&pods, "", later), Some(RelistReason::Evicted));
        let mut lines = String::new();
        readyz_lines(&store, &mut lines);
        assert_eq!(lines, "[+]relist pending kubelet/pods.v1.core (evicted)\n");
        // A whole list committed clears it, on disk too.
        assert!(store.clear_relist(&pods).unwrap());
        assert!(!store.clear_relist(&pods).unwrap());
        assert_eq!(due(&pods, "", later + REFILL_EVERY), None);
        drop(relist);
        drop(store);
        let store = Store::open(&dir.root()).unwrap().0;
        assert!(store.relist_pending().is_empty());
    }
}
