//! `--cache-max-bytes`: the writer admits each write only when the cache's files stay within
//! the bound, evicting first by priority what no pod of this node needs offline.
//!
//! The writer is the store's only writer, so it alone keeps the bound: before each object,
//! list item, watch event, document and token answer it asks [`Bound::admit`], which near
//! the bound charges an object only what it grows the cache by (an unchanged object of a
//! relist replaces its file and adds nothing). Over the
//! bound, it evicts until the write fits below a low-water mark (90 % of the bound: near the
//! bound, each refill would otherwise evict another collection, which its own refill then
//! evicts back):
//! 1. collections of components other than kubelet, least recently synced first (the
//!    `.synced` record: every online read is a sync; no record is oldest), those no open
//!    answer is writing before those one is;
//! 2. kubelet's kinds outside the protected set ("old kinds", `protect::Rule::None`),
//!    least recently synced first;
//! 3. objects of kubelet's member kinds that the set does not hold (the Secrets of pods
//!    gone), oldest modification first.
//!
//! A collection goes whole ([`Store::delete_collection`]: a rename away, so a reader sees it
//! as it was or gone, never partial) and is marked `evicted` in `.relist`, and the writer abandons the answers still writing it
//! ([`Bound::take_evicted`]), so none writes part of it back. While it is marked, every
//! write into it is refused but a list's across namespaces ([`Write::Refill`]), which commits only
//! whole ([`Bound::may_commit`]): a get, a watch event, a namespace's list or a first page
//! would make a part that offline lists serve as the whole. An object goes by `delete(key, None)`, which buries nothing. The collection being
//! written is never evicted for its own write.
//!
//! The hub's own collections (the `yurt-hub-cfg` ConfigMap, which says who is cached) are
//! never evicted: a few hundred bytes the hub needs offline.
//!
//! When even that does not fit, the hub keeps answering: a write into the protected set
//! (kubelet's protected kinds, its tokens, documents, the hub's own) goes through and the overshoot shows in
//! `tinyhub_cache_over_bound_bytes`; a new kind is not created; a write into an existing
//! unprotected kind is refused and that kind evicted, so it is never served half-updated.
//! Each refusal is counted, with one error line per collection every 10 minutes.
//!
//! The protected set is read from kubelet's cached pods (and claims, and volumes) when
//! eviction first needs it, and read again at the admit after a write or a commit of pods or
//! claims; the pod being admitted protects what it names in its own admit.
//!
//! The bound waits for the census (`Store::usage_total`), which the writer takes itself
//! (`settle`) once the background index build is over, then enforces it at once: a cache
//! over a lowered bound shrinks at the start.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::key::{CollectionKey, ObjectKey, View};
use crate::cache::protect::{Protected, Rule, rule_of};
use crate::cache::store::Store;
use crate::cache::store::relist::RelistReason;
use crate::cache::synced::{Synced, key_of};
use crate::lock;
use crate::metrics::{METRICS, Metrics, header};
use crate::names::Component;

/// One error line per refused collection at most this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(600);
/// While over the bound with nothing written, the writer tries again this often (the
/// records and `.staging` grow without a write it admits).
const SETTLE_EVERY: Duration = Duration::from_secs(30);
/// Once it must evict, the bound evicts down to this share of itself (per mille), not
/// just to the write: near the bound, every refill would otherwise evict another
/// collection, which a list every 10 minutes refills, and so on.
const LOW_WATER_PER_MILLE: u64 = 900;
/// After eviction found nothing more to take, writes are judged without looking again
/// for this long: a protected set past the bound would otherwise rescan at every write.
const STARVED_FOR: Duration = Duration::from_secs(10);

/// What one write adds to the cache, as [`Bound::admit`] judges it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Write<'a> {
    /// An object (put, list item, watch event) of this collection.
    Object(&'a CollectionKey),
    /// An item of a list of this collection across namespaces (a selector kept): the
    /// only write that may refill a collection the bound evicted, since it commits only
    /// whole ([`Bound::may_commit`]).
    Refill(&'a CollectionKey),
    /// A TokenRequest answer of this component.
    Token(&'a Component),
    /// A non-resource document.
    Document,
}

/// The eviction tiers, as `tinyhub_cache_evictions_total{tier}` names them.
const TIERS: [&str; 4] = [
    "other-components",
    "kubelet-kinds",
    "kubelet-objects",
    "refused",
];

/// The bound's counters, rendered on the metrics page ([`export`]).
#[derive(Debug, Default)]
pub(crate) struct BoundStats {
    max: u64,
    /// Evictions per tier ([`TIERS`]).
    evictions: [AtomicU64; 4],
    evicted_bytes: AtomicU64,
    /// Writes refused per (component, kind directory).
    refused: Mutex<BTreeMap<(String, String), u64>>,
}

impl BoundStats {
    /// Counters of a bound of `max` bytes (0: none).
    pub(crate) fn new(max: u64) -> BoundStats {
        BoundStats {
            max,
            ..BoundStats::default()
        }
    }
}

/// The writer's side of the bound.
#[derive(Debug)]
pub(crate) struct Bound {
    max: u64,
    /// What eviction frees down to ([`LOW_WATER_PER_MILLE`] of `max`).
    low: u64,
    node: String,
    /// The protected set, until kubelet's pods or claims change.
    protected: Option<Protected>,
    /// The set was built while kubelet's pods or claims were being written: read again at
    /// the next admit, once the write is on disk.
    stale: bool,
    /// Collections an open answer is writing (the writer keeps it).
    pub(super) open: HashSet<CollectionKey>,
    /// Collections evicted since the writer last looked: it abandons their answers.
    evicted: Vec<CollectionKey>,
    /// When each refused (component, kind directory) was last logged.
    logged: HashMap<(String, String), Instant>,
    /// The census had been taken when last looked.
    counted: bool,
    /// When the bound was last enforced without a write.
    settled: Option<Instant>,
    /// When eviction last found nothing more to take.
    starved: Option<Instant>,
    stats: Arc<BoundStats>,
}

impl Bound {
    /// The bound of `stats.max` bytes on node `node`'s cache; `None` for no bound.
    pub(crate) fn new(node: &str, stats: Arc<BoundStats>) -> Option<Bound> {
        (stats.max > 0).then(|| Bound {
            max: stats.max,
            low: stats.max / 1000 * LOW_WATER_PER_MILLE
                + stats.max % 1000 * LOW_WATER_PER_MILLE / 1000,
            node: node.to_owned(),
            protected: None,
            stale: false,
            open: HashSet::new(),
            evicted: Vec::new(),
            logged: HashMap::new(),
            counted: false,
            settled: None,
            starved: None,
            stats,
        })
    }

    /// The collections evicted since the last call: the writer abandons their open answers.
    pub(super) fn take_evicted(&mut self) -> Vec<CollectionKey> {
        std::mem::take(&mut self.evicted)
    }

    /// Enforces the bound without a write: once when the census at open is first seen taken,
    /// then every [`SETTLE_EVERY`] while the cache is over it.
    pub(super) fn settle(&mut self, store: &Store, synced: &Synced) {
        let (mut total, counted) = store.usage_total();
        if !counted {
            // Taken here, on the writer's thread, so no write changes a figure during the
            // walk; after the index build, which reads the same files.
            if store.index_building() {
                return;
            }
            store.take_census();
            total = store.usage_total().0;
        }
        let first = !self.counted;
        self.counted = true;
        if first {
            let quarantined = store.quarantine_bytes();
            if quarantined > self.max / 10 {
                log::warn!(
                    "cache: .quarantine holds {quarantined} bytes, more than a tenth of \
                     --cache-max-bytes ({}), outside the bound: look at it and remove it",
                    quantity(self.max)
                );
            }
        }
        let due = self.settled.is_none_or(|at| at.elapsed() >= SETTLE_EVERY);
        if first || (total > self.max && due) {
            self.settled = Some(Instant::now());
            // A set built while kubelet's pods were being written lacks them.
            if std::mem::take(&mut self.stale) {
                self.protected = None;
            }
            if store.usage(true).total() > self.max {
                self.make_room(store, synced, None, 0, None);
            }
        }
    }

    /// Whether `write`, of `incoming` bytes, may be stored: `true` when it fits within the
    /// bound (after evicting, if need be) or is protected; `false` when it is refused.
    pub(super) fn admit(
        &mut self,
        store: &Store,
        synced: &Synced,
        write: Write<'_>,
        incoming: u64,
    ) -> bool {
        self.admit_unit(store, synced, write, incoming, None)
    }

    /// [`Bound::admit`], with the object itself when it is one of kubelet's pods (or
    /// claims): what it names is protected in its own admit, before it is on disk.
    pub(super) fn admit_unit(
        &mut self,
        store: &Store,
        synced: &Synced,
        write: Write<'_>,
        incoming: u64,
        object: Option<&[u8]>,
    ) -> bool {
        if std::mem::take(&mut self.stale) {
            self.protected = None;
        }
        let (c, refill) = match write {
            Write::Object(c) => (Some(c), false),
            Write::Refill(c) => (Some(c), true),
            _ => (None, false),
        };
        if let Some(c) = c {
            if names_protection(c) {
                // The set built in this admit lacks this write: read again after it.
                self.protected = None;
                self.stale = true;
            }
            // An evicted collection comes back only by a whole list across namespaces: a GET, a watch
            // or a namespace's list would make a part of it that offline lists serve as whole.
            if !refill && store.relist_reason(c) == Some(RelistReason::Evicted) {
                log::debug!(
                    "cache: {}/{} was evicted; not cached until a list across namespaces refills it",
                    c.component.as_str(),
                    c.dir_name()
                );
                return false;
            }
        }
        let (total, counted) = store.usage_total();
        if !counted || total.saturating_add(incoming) <= self.max {
            return true;
        }
        // Near the bound, only growth counts: an unchanged object (a relist's) or a smaller
        // version replaces its file and adds nothing. One parse and one stat, here only.
        let incoming = match (c, object) {
            (Some(c), Some(bytes)) => growth(store, c, bytes).unwrap_or(incoming),
            _ => incoming,
        };
        if total.saturating_add(incoming) <= self.max {
            return true;
        }
        let pending = object.filter(|_| c.is_some_and(names_protection));
        let starved = self.starved.is_some_and(|at| at.elapsed() < STARVED_FOR);
        if !starved {
            if self.make_room(store, synced, c, incoming, pending) {
                return true;
            }
            self.starved = Some(Instant::now());
        }
        let write = match write {
            Write::Refill(c) => Write::Object(c),
            write => write,
        };
        match write {
            Write::Document => true,
            Write::Token(component) => {
                *component == Component::KUBELET || {
                    self.refused(component.as_str(), "tokens");
                    false
                }
            }
            Write::Object(c) | Write::Refill(c) if protected_kind(c) => true,
            Write::Object(c) | Write::Refill(c) => {
                self.refused(c.component.as_str(), &c.dir_name());
                // Never served half-updated: what it holds goes too, until a list refills it.
                if store.has_collection(c) {
                    self.evict_collection(store, synced, c, 3);
                }
                false
            }
        }
    }

    /// Evicts by the tiers (never `except`) until `incoming` more bytes fit below the low-water
    /// mark; whether they fit within the bound.
    fn make_room(
        &mut self,
        store: &Store,
        synced: &Synced,
        except: Option<&CollectionKey>,
        incoming: u64,
        pending: Option<&[u8]>,
    ) -> bool {
        let (max, low) = (self.max, self.low);
        // The records were counted again when the bound was judged (`settle`, `admit`'s
        // caller); between victims only the kept figures move.
        let after = move |store: &Store| store.usage_total().0.saturating_add(incoming);
        let fits = move |store: &Store| after(store) <= low;
        if store.usage(true).total().saturating_add(incoming) <= max {
            return true;
        }
        let usage = store.usage(false);
        let mut others = Vec::new();
        let mut old_kinds = Vec::new();
        let mut members = Vec::new();
        for (component, dir) in usage.collections.keys() {
            let Some(c) = key_of(component, dir) else {
                continue;
            };
            if rule_of(dir) == Rule::Members && c.component == Component::KUBELET {
                // Objects go one by one, from the collection written too.
                members.push(c);
                continue;
            }
            // The hub's own (the `yurt-hub-cfg` ConfigMap: who is cached, offline too).
            if Some(&c) == except || c.component == Component::TINYHUB {
                continue;
            }
            if c.component != Component::KUBELET {
                others.push((self.open.contains(&c), synced.last(&c).unwrap_or(0), c));
            } else if rule_of(dir) == Rule::None {
                old_kinds.push((synced.last(&c).unwrap_or(0), c));
            }
        }
        others.sort();
        old_kinds.sort();
        for (_, _, c) in others {
            if fits(store) {
                return true;
            }
            self.evict_collection(store, synced, &c, 0);
        }
        for (_, c) in old_kinds {
            if fits(store) {
                return true;
            }
            self.evict_collection(store, synced, &c, 1);
        }
        if !fits(store) {
            self.evict_members(store, synced, &members, pending, &fits);
        }
        after(store) <= max
    }

    /// Tier 3: objects of kubelet's member kinds that the protected set does not hold,
    /// oldest first, until `fits`.
    fn evict_members(
        &mut self,
        store: &Store,
        synced: &Synced,
        members: &[CollectionKey],
        pending: Option<&[u8]>,
        fits: &dyn Fn(&Store) -> bool,
    ) -> bool {
        let mut protected = self.protected(store).clone();
        if let Some(Ok(unit)) = pending.map(serde_json::from_slice::<serde_json::Value>) {
            // Kubelet's pod (or claim) being admitted: what it names stays too. A watch
            // event carries it in `object`.
            let object = match unit.get("object") {
                Some(object) if unit.get("type").is_some() => object,
                _ => &unit,
            };
            protected.add_pending(object);
        }
        let mut victims = Vec::new();
        for c in members {
            let kind = c.dir_name();
            for (modified, bytes, namespace, name) in store.object_times(c) {
                if !protected.holds(&kind, namespace.as_deref(), &name) {
                    victims.push((modified, bytes, c, namespace, name));
                }
            }
        }
        victims.sort();
        for (_, bytes, c, namespace, name) in victims {
            if fits(store) {
                return true;
            }
            let key = ObjectKey {
                collection: c.clone(),
                namespace,
                name,
            };
            match store.delete(&key, None) {
                Ok(true) => {
                    // Its lists are no longer whole: offline, they are not answered.
                    synced.not_whole(&key.collection);
                    self.stats.evictions[2].fetch_add(1, Ordering::Relaxed);
                    self.stats.evicted_bytes.fetch_add(bytes, Ordering::Relaxed);
                    Metrics::inc(&METRICS.cache_objects_deleted);
                }
                Ok(false) => {}
                Err(e) => log::warn!("cache: cannot evict {}: {e}", c.dir_name()),
            }
        }
        fits(store)
    }

    /// The protected set, read again from kubelet's cached pods (and claims) when they
    /// changed since.
    fn protected(&mut self, store: &Store) -> &Protected {
        let node = &self.node;
        self.protected.get_or_insert_with(|| {
            let pods = read_all(store, &kubelet_kind("", "v1", "pods"));
            let mut set = Protected::from_pods(node, &pods);
            if set.has_claims() {
                set.bind_volumes(&read_all(
                    store,
                    &kubelet_kind("", "v1", "persistentvolumeclaims"),
                ));
            }
            if set.has_volumes() {
                set.volume_secrets(&read_all(
                    store,
                    &kubelet_kind("", "v1", "persistentvolumes"),
                ));
            }
            set
        })
    }

    /// Removes `c` whole, counted under tier `tier` ([`TIERS`]); its answers are abandoned.
    fn evict_collection(&mut self, store: &Store, synced: &Synced, c: &CollectionKey, tier: usize) {
        let bytes = store.usage(false).of(c).bytes;
        match store.delete_collection(c) {
            Ok(true) => {
                log::info!(
                    "cache: evicted {}/{} ({bytes} bytes) to stay within --cache-max-bytes ({}); \
                     the next online list refills it",
                    c.component.as_str(),
                    c.dir_name(),
                    quantity(self.max)
                );
                // An evicted collection has no age: it is not cached.
                synced.forget(c);
                self.stats.evictions[tier].fetch_add(1, Ordering::Relaxed);
                self.stats.evicted_bytes.fetch_add(bytes, Ordering::Relaxed);
                self.evicted.push(c.clone());
                if let Err(e) = store.mark_relist(c, RelistReason::Evicted) {
                    log::warn!("cache: cannot mark {} for a relist: {e}", c.dir_name());
                }
            }
            // Not on disk: a row for it (if any) names nothing.
            Ok(false) => store.drop_row(c),
            Err(e) => log::warn!("cache: cannot evict {}: {e}", c.dir_name()),
        }
    }

    /// Whether a list answer of `c` may commit: not when `c` was evicted and the answer is
    /// not a whole list across namespaces (`whole_across`), which alone makes it whole again.
    pub(super) fn may_commit(&self, store: &Store, c: &CollectionKey, whole_across: bool) -> bool {
        whole_across || store.relist_reason(c) != Some(RelistReason::Evicted)
    }

    /// A list of `c` was committed: when it holds kubelet's pods or claims, the protected
    /// set is read again at the next admit.
    pub(super) fn committed(&mut self, c: &CollectionKey) {
        if names_protection(c) {
            self.protected = None;
        }
    }

    /// Counts a refused write into `component`'s `kind`, and says so once per 10 min.
    fn refused(&mut self, component: &str, kind: &str) {
        let key = (component.to_owned(), kind.to_owned());
        *lock(&self.stats.refused).entry(key.clone()).or_insert(0) += 1;
        let due = self
            .logged
            .get(&key)
            .is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY);
        if due {
            self.logged.insert(key, Instant::now());
            log::error!(
                "cache: over --cache-max-bytes ({}): not caching {component}/{kind}",
                quantity(self.max)
            );
        }
    }
}

/// What `unit` (an object, a list item, a watch event of `c`) adds to the cache: its
/// object's size less that of the stored file it replaces (a watch event's object measured
/// alone, without the event around it); `None` when the unit does not parse.
fn growth(store: &Store, c: &CollectionKey, unit: &[u8]) -> Option<u64> {
    let parsed = serde_json::from_slice::<serde_json::Value>(unit).ok()?;
    let (object, len) = match parsed.get("object") {
        Some(object) if parsed.get("type").is_some() => {
            (object, serde_json::to_vec(object).ok()?.len() as u64)
        }
        _ => (&parsed, unit.len() as u64),
    };
    let meta = &object["metadata"];
    let Some(name) = meta["name"].as_str() else {
        return Some(len);
    };
    let key = ObjectKey {
        collection: c.clone(),
        namespace: meta["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned),
        name: name.to_owned(),
    };
    Some(len.saturating_sub(store.object_len(&key).unwrap_or(0)))
}

/// Whether a write to `c` may change the protected set: kubelet's pods and claims.
fn names_protection(c: &CollectionKey) -> bool {
    c.component == Component::KUBELET
        && c.view == View::Full
        && c.gvr.group.is_empty()
        && matches!(c.gvr.resource.as_str(), "pods" | "persistentvolumeclaims")
}

/// Whether writes into `c` go through over the bound: kubelet's kinds that hold protected
/// objects (the set's members are judged one by one only when evicting), and the hub's own.
fn protected_kind(c: &CollectionKey) -> bool {
    c.component == Component::TINYHUB
        || (c.component == Component::KUBELET
            && c.view == View::Full
            && rule_of(&c.dir_name()) != Rule::None)
}

/// Kubelet's full-view collection of `group/version/resource`.
fn kubelet_kind(group: &str, version: &str, resource: &str) -> CollectionKey {
    CollectionKey {
        component: Component::KUBELET,
        gvr: crate::names::Gvr::new(group, version, resource),
        view: View::Full,
    }
}

/// Every object of `c` that parses as JSON (what does not names nothing).
fn read_all(store: &Store, c: &CollectionKey) -> Vec<serde_json::Value> {
    let Ok(Some(objects)) = store.list(c, None, None) else {
        return Vec::new();
    };
    objects
        .filter_map(Result::ok)
        .filter_map(|o| serde_json::from_slice(&o.bytes).ok())
        .collect()
}

/// `bytes` as the flag would spell it: `16Mi` when it is a whole number of MiB, else bytes.
pub(crate) fn quantity(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b => b.to_string(),
    }
}

/// Renders the bound's series and the cache's weight on the metrics page from now on.
pub(crate) fn export(stats: Arc<BoundStats>, store: Arc<Store>) {
    METRICS.register(Box::new(move |out| render(&stats, &store, out)));
}

fn render(stats: &BoundStats, store: &Store, out: &mut String) {
    // The records counted again: a few stats a scrape.
    let usage = store.usage(true);
    header(
        out,
        "tinyhub_cache_bytes",
        "gauge",
        "bytes of the files under the cache directory, by component and kind directory (tokens, documents, records and staging apart)",
    );
    for ((component, dir), weight) in &usage.collections {
        let _ = writeln!(
            out,
            "tinyhub_cache_bytes{{component=\"{}\",resource=\"{}\"}} {}",
            label(component),
            label(dir),
            weight.bytes
        );
    }
    for (component, weight) in &usage.tokens {
        let _ = writeln!(
            out,
            "tinyhub_cache_bytes{{component=\"{}\",resource=\"tokens\"}} {}",
            label(component),
            weight.bytes
        );
    }
    for (name, weight) in [
        ("documents", usage.documents),
        ("records", usage.records),
        ("staging", usage.staging),
    ] {
        let _ = writeln!(
            out,
            "tinyhub_cache_bytes{{component=\"\",resource=\"{name}\"}} {}",
            weight.bytes
        );
    }
    header(
        out,
        "tinyhub_cache_max_bytes",
        "gauge",
        "--cache-max-bytes (0: no bound)",
    );
    let _ = writeln!(out, "tinyhub_cache_max_bytes {}", stats.max);
    header(
        out,
        "tinyhub_cache_over_bound_bytes",
        "gauge",
        "bytes the cache holds past --cache-max-bytes: protected objects that did not fit",
    );
    let over = match stats.max {
        0 => 0,
        max => usage.total().saturating_sub(max),
    };
    let _ = writeln!(out, "tinyhub_cache_over_bound_bytes {over}");
    header(
        out,
        "tinyhub_cache_evictions_total",
        "counter",
        "collections (objects, for kubelet-objects) evicted to stay within --cache-max-bytes, by tier",
    );
    for (tier, n) in TIERS.iter().zip(&stats.evictions) {
        let _ = writeln!(
            out,
            "tinyhub_cache_evictions_total{{tier=\"{tier}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }
    header(
        out,
        "tinyhub_cache_evicted_bytes_total",
        "counter",
        "bytes evicted to stay within --cache-max-bytes",
    );
    let _ = writeln!(
        out,
        "tinyhub_cache_evicted_bytes_total {}",
        stats.evicted_bytes.load(Ordering::Relaxed)
    );
    header(
        out,
        "tinyhub_cache_bound_refused_total",
        "counter",
        "writes not cached because even eviction left no room within --cache-max-bytes",
    );
    for ((component, dir), n) in lock(&stats.refused).iter() {
        let _ = writeln!(
            out,
            "tinyhub_cache_bound_refused_total{{component=\"{}\",resource=\"{}\"}} {n}",
            label(component),
            label(dir)
        );
    }
}

/// A label value escaped as the exposition format wants (components and kind directories
/// are safe segments already: this only keeps a surprise from breaking the page).
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::cache::store::relist::{RelistMarks, RelistReason};
    use crate::cache::temp_dir::TempDir;

    fn key(component: &str, resource: &str, group: &str) -> CollectionKey {
        CollectionKey {
            component: Component::new(component).unwrap(),
            gvr: crate::names::Gvr::new(group, "v1", resource),
            view: View::Full,
        }
    }

    fn put(
        store: &Store,
        c: &CollectionKey,
        ns: Option<&str>,
        name: &str,
        body: serde_json::Value,
    ) {
        let mut object = body;
        object["metadata"] =
            serde_json::json!({"name": name, "namespace": ns, "resourceVersion": "1"});
        object["pad"] = serde_json::json!("x".repeat(800));
        let key = ObjectKey {
            collection: c.clone(),
            namespace: ns.map(str::to_owned),
            name: name.to_owned(),
        };
        store
            .put(&key, object.to_string().as_bytes(), Some("1"))
            .unwrap();
    }

    /// One byte more than the room left: admitting this much evicts exactly one more victim.
    fn one_more(store: &Store, max: u64) -> u64 {
        max.saturating_sub(store.usage(true).total()) + 1
    }

    #[test]
    fn eviction_goes_by_tier_and_never_takes_the_protected_set() {
        let dir = TempDir::new("evict-order");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let synced = Synced::default();
        let pods = key("kubelet", "pods", "");
        let secrets = key("kubelet", "secrets", "");
        let services = key("kubelet", "services", "");
        let nodes = key("kubelet", "nodes", "");
        let leases = key("kubelet", "leases", "coordination.k8s.io");
        let deployments = key("kubelet", "deployments", "apps");
        let coredns = key("coredns", "services", "");
        let proxy = key("kube-proxy", "endpointslices", "discovery.k8s.io");
        let flannel = key("flanneld", "nodes", "");
        let pod = serde_json::json!({"spec": {"nodeName": "edge-1",
            "volumes": [{"name": "v", "secret": {"secretName": "mounted"}}]}});
        put(&store, &pods, Some("app"), "web", pod);
        for name in ["mounted", "junk-old", "junk-new"] {
            put(&store, &secrets, Some("app"), name, serde_json::json!({}));
        }
        // Gone pods' Secrets go oldest first, whatever their names say.
        let secret_file = |name: &str| dir.root().join("kubelet/secrets.v1.core/app").join(name);
        for (name, age) in [("junk-old", 3000), ("junk-new", 1000)] {
            let at = SystemTime::now() - Duration::from_secs(age);
            std::fs::File::options()
                .write(true)
                .open(secret_file(name))
                .and_then(|f| f.set_modified(at))
                .unwrap();
        }
        put(&store, &services, Some("app"), "web", serde_json::json!({}));
        put(&store, &nodes, None, "edge-1", serde_json::json!({}));
        put(&store, &nodes, None, "edge-2", serde_json::json!({}));
        put(
            &store,
            &leases,
            Some("kube-node-lease"),
            "edge-1",
            serde_json::json!({}),
        );
        put(
            &store,
            &deployments,
            Some("app"),
            "web",
            serde_json::json!({}),
        );
        put(&store, &coredns, Some("app"), "web", serde_json::json!({}));
        put(&store, &proxy, Some("app"), "web-1", serde_json::json!({}));
        put(&store, &flannel, None, "edge-1", serde_json::json!({}));
        // Least recently synced first, but one being written goes after those that are not.
        synced.note(&flannel, 10);
        synced.note(&coredns, 50);
        synced.note(&proxy, 100);

        let max = store.usage(true).total();
        let stats = Arc::new(BoundStats::new(max));
        let mut bound = Bound::new("edge-1", Arc::clone(&stats)).unwrap();
        // One victim per write, to see the order (the low-water mark has a test of its own).
        bound.low = max;
        bound.open.insert(flannel.clone());
        assert!(
            bound.admit(&store, &synced, Write::Object(&pods), 0),
            "it fits"
        );
        assert!(bound.take_evicted().is_empty());

        let gone_in_order = [&coredns, &proxy, &flannel, &deployments];
        for (i, victim) in gone_in_order.iter().enumerate() {
            let incoming = one_more(&store, max);
            assert!(bound.admit(&store, &synced, Write::Object(&pods), incoming));
            assert_eq!(bound.take_evicted(), [(*victim).clone()], "victim {i}");
            for later in &gone_in_order[i + 1..] {
                assert!(store.has_collection(later), "{later:?} evicted too early");
            }
        }
        for victim in ["junk-old", "junk-new"] {
            assert!(secret_file(victim).exists());
            let incoming = one_more(&store, max);
            assert!(bound.admit(&store, &synced, Write::Object(&secrets), incoming));
            assert!(!secret_file(victim).exists(), "{victim} evicted");
        }
        let other_node = dir.root().join("kubelet/nodes.v1.core/edge-2");
        assert!(other_node.exists());
        let incoming = one_more(&store, max);
        assert!(bound.admit(&store, &synced, Write::Object(&pods), incoming));
        assert!(
            !other_node.exists(),
            "another node's, newer than the Secrets"
        );
        assert!(dir.root().join("kubelet/nodes.v1.core/edge-1").exists());

        // Nothing left to evict: the protected set is written all the same, over the bound.
        let incoming = one_more(&store, max) + 10_000;
        assert!(bound.admit(&store, &synced, Write::Object(&pods), incoming));
        assert!(bound.admit(&store, &synced, Write::Token(&Component::KUBELET), incoming));
        assert!(bound.admit(&store, &synced, Write::Document, incoming));
        for kept in [
            "kubelet/pods.v1.core/app/web",
            "kubelet/secrets.v1.core/app/mounted",
            "kubelet/services.v1.core/app/web",
            "kubelet/nodes.v1.core/edge-1",
            "kubelet/leases.v1.coordination.k8s.io/kube-node-lease/edge-1",
        ] {
            assert!(dir.root().join(kept).exists(), "{kept} kept");
        }
        // A new kind is not created; an existing unprotected one is refused and evicted.
        // (kube-proxy's evicted slices are refused by their relist mark, whatever the room.)
        assert!(!bound.admit(&store, &synced, Write::Object(&proxy), 0));
        let new_kind = key("kube-proxy", "endpoints", "");
        assert!(!bound.admit(&store, &synced, Write::Object(&new_kind), incoming));
        assert!(!store.has_collection(&new_kind));
        let refused = key("kube-proxy", "services", "");
        put(&store, &refused, Some("app"), "web", serde_json::json!({}));
        assert!(!bound.admit(&store, &synced, Write::Object(&refused), incoming));
        assert!(!store.has_collection(&refused));
        assert_eq!(bound.take_evicted(), std::slice::from_ref(&refused));
        assert!(!bound.admit(
            &store,
            &synced,
            Write::Token(&Component::new("coredns").unwrap()),
            incoming
        ));

        let count = |tier: usize| stats.evictions[tier].load(Ordering::Relaxed);
        assert_eq!((count(0), count(1), count(2), count(3)), (3, 1, 3, 1));
        let refusals = lock(&stats.refused).clone();
        assert_eq!(refusals.len(), 3, "{refusals:?}");
        let marks = RelistMarks::load(&dir.root()).unwrap();
        for c in [&coredns, &proxy, &flannel, &deployments, &refused] {
            assert_eq!(
                marks.contains(c.component.as_str(), &c.dir_name()),
                Some(RelistReason::Evicted),
                "{c:?}"
            );
        }
        assert_eq!(quantity(max), max.to_string());
        assert_eq!(quantity(16 << 20), "16Mi");
    }

    /// Sets `name`'s file (below the root) `age` seconds old.
    fn age(dir: &TempDir, rel: &str, age: u64) {
        let at = SystemTime::now() - Duration::from_secs(age);
        std::fs::File::options()
            .write(true)
            .open(dir.root().join(rel))
            .and_then(|f| f.set_modified(at))
            .unwrap();
    }

    #[test]
    fn a_pod_being_written_protects_what_it_names_in_its_own_admit_and_after() {
        let dir = TempDir::new("evict-stale");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let synced = Synced::default();
        let pods = key("kubelet", "pods", "");
        let secrets = key("kubelet", "secrets", "");
        let mounts = |secret: &str| {
            serde_json::json!({"spec": {"nodeName": "edge-1",
                "volumes": [{"name": "v", "secret": {"secretName": secret}}]}})
        };
        put(&store, &pods, Some("app"), "old", mounts("old-secret"));
        for (name, seconds) in [("new-secret", 3000), ("junk-1", 2000), ("junk-2", 1000)] {
            put(&store, &secrets, Some("app"), name, serde_json::json!({}));
            age(
                &dir,
                &format!("kubelet/secrets.v1.core/app/{name}"),
                seconds,
            );
        }
        put(
            &store,
            &secrets,
            Some("app"),
            "old-secret",
            serde_json::json!({}),
        );
        let max = store.usage(true).total();
        let mut bound = Bound::new("edge-1", Arc::new(BoundStats::new(max))).unwrap();
        bound.low = max;
        let gone = |name: &str| {
            !dir.root()
                .join("kubelet/secrets.v1.core/app")
                .join(name)
                .exists()
        };

        // A pod rescheduled here names the oldest Secret: its own admit keeps it.
        let mut new_pod = mounts("new-secret");
        new_pod["metadata"] = serde_json::json!({"name": "new", "namespace": "app"});
        let event = serde_json::json!({"type": "ADDED", "object": new_pod}).to_string();
        let incoming = one_more(&store, max);
        assert!(bound.admit_unit(
            &store,
            &synced,
            Write::Object(&pods),
            incoming,
            Some(event.as_bytes())
        ));
        assert!(
            !gone("new-secret"),
            "the new pod's Secret was evicted in its own admit"
        );
        assert!(gone("junk-1"));
        put(&store, &pods, Some("app"), "new", mounts("new-secret"));

        // The next write reads the set again: the pod is on disk now.
        let incoming = one_more(&store, max);
        assert!(bound.admit(&store, &synced, Write::Object(&secrets), incoming));
        assert!(gone("junk-2"));
        let incoming = one_more(&store, max);
        assert!(bound.admit(&store, &synced, Write::Object(&secrets), incoming));
        assert!(
            !gone("new-secret"),
            "a stale set evicted the new pod's Secret"
        );
        assert!(!gone("old-secret"));
    }

    #[test]
    fn eviction_frees_down_to_the_low_water_mark_and_drops_a_row_for_a_gone_dir() {
        let dir = TempDir::new("evict-low");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let synced = Synced::default();
        let pods = key("kubelet", "pods", "");
        put(&store, &pods, Some("app"), "web", serde_json::json!({}));
        let others: Vec<_> = (0..20)
            .map(|i| key(&format!("agent-{i:02}"), "services", ""))
            .collect();
        for (i, c) in others.iter().enumerate() {
            put(&store, c, Some("app"), "web", serde_json::json!({}));
            synced.note(c, i as u64 + 1);
        }
        let max = store.usage(true).total();
        let stats = Arc::new(BoundStats::new(max));
        let mut bound = Bound::new("edge-1", Arc::clone(&stats)).unwrap();
        let incoming = one_more(&store, max);
        assert!(bound.admit(&store, &synced, Write::Object(&pods), incoming));
        let after = store.usage(true).total() + incoming;
        assert!(after <= max / 10 * 9 + max % 10, "{after} of {max}");
        let evicted = bound.take_evicted();
        assert!(evicted.len() >= 2, "{evicted:?}");
        assert_eq!(evicted[..2], others[..2], "least recently synced first");
        // Room is left: the next small writes evict nothing.
        assert!(bound.admit(&store, &synced, Write::Object(&pods), 100));
        assert!(bound.take_evicted().is_empty());

        // A kind directory gone behind the figures: its row goes when eviction finds it gone.
        let last = others.last().unwrap();
        std::fs::remove_dir_all(dir.root().join("agent-19/services.v1.core")).unwrap();
        assert!(store.usage(false).of(last).bytes > 0);
        bound.evict_collection(&store, &synced, last, 0);
        assert_eq!(store.usage(false).of(last), Default::default());
    }

    /// The writer with `max` bytes of bound over `send`'s sessions.
    fn write_bounded(store: &Store, max: u64, send: impl FnOnce(&crate::cache::writer::CacheTx)) {
        let (tx, rx) = crate::cache::writer::channel(64, 1 << 20);
        send(&tx);
        drop(tx);
        let options = crate::cache::writer::WriterOptions {
            bound: Some((Arc::new(BoundStats::new(max)), "edge-1".into())),
            ..Default::default()
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        crate::cache::writer::run(store, rx, &stop, options, &Synced::default());
    }

    #[test]
    fn a_watch_refused_over_the_bound_writes_nothing_more_of_its_collection() {
        let dir = TempDir::new("evict-watch");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let proxy = key("kube-proxy", "services", "");
        put(&store, &proxy, Some("app"), "web", serde_json::json!({}));
        let max = store.usage(true).total() + 2000;
        let event = |name: &str, pad: usize| {
            serde_json::json!({"type": "ADDED", "object": {"kind": "Service", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": "app", "resourceVersion": "5"},
                "pad": "x".repeat(pad)}})
            .to_string()
        };
        // Past the bound, then small enough to fit once the collection is gone: one chunk.
        let body = format!("{}\n{}\n", event("big", 5000), event("small", 10));
        write_bounded(&store, max, |tx| {
            let target = crate::cache::target::CacheTarget::Watch {
                collection: proxy.clone(),
            };
            let mut s = tx.begin(target, 200, false, None).unwrap();
            assert!(s.chunk(body.as_bytes()));
            s.finish(false);
        });
        assert!(!store.has_collection(&proxy), "refused and evicted");
        assert!(
            !dir.root()
                .join("kube-proxy/services.v1.core/app/small")
                .exists()
        );
    }

    #[test]
    fn near_the_bound_an_unchanged_object_charges_nothing() {
        let dir = TempDir::new("evict-growth");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let synced = Synced::default();
        let proxy = key("kube-proxy", "services", "");
        let coredns = key("coredns", "services", "");
        put(&store, &coredns, Some("app"), "web", serde_json::json!({}));
        put(&store, &proxy, Some("app"), "web", serde_json::json!({}));
        let stored = std::fs::read(dir.root().join("kube-proxy/services.v1.core/app/web")).unwrap();
        let max = store.usage(true).total();
        let mut bound = Bound::new("edge-1", Arc::new(BoundStats::new(max))).unwrap();
        // At the bound exactly: kube-proxy's relist of the same object evicts no one.
        let len = stored.len() as u64;
        assert!(bound.admit_unit(&store, &synced, Write::Object(&proxy), len, Some(&stored)));
        let event = format!(
            r#"{{"type":"MODIFIED","object":{}}}"#,
            String::from_utf8_lossy(&stored)
        );
        let len = event.len() as u64;
        assert!(bound.admit_unit(
            &store,
            &synced,
            Write::Object(&proxy),
            len,
            Some(event.as_bytes())
        ));
        assert!(bound.take_evicted().is_empty());
        assert!(store.has_collection(&coredns));
        // A new object grows the cache: room is made.
        let mut other: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        other["metadata"]["name"] = serde_json::json!("api");
        let other = other.to_string();
        let len = other.len() as u64;
        assert!(bound.admit_unit(
            &store,
            &synced,
            Write::Object(&proxy),
            len,
            Some(other.as_bytes())
        ));
        assert_eq!(bound.take_evicted(), [coredns]);
    }
}
