//! `--cache-max-bytes`: the writer admits each write only when the cache's files stay within
//! the bound, evicting first by priority what no pod of this node needs offline.
//!
//! The writer is the store's only writer, so it alone keeps the bound: before each object,
//! list item, watch event, document and token answer it asks [`Bound::admit`]. Over the
//! bound, it evicts until the write fits:
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
//! ([`Bound::take_evicted`]), so none writes part of it back; the next online list refills
//! it. An object goes by `delete(key, None)`, which buries nothing. The collection being
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
//! The bound waits for the census at open (`Store::usage_total`), then enforces it at once:
//! a cache over a lowered bound shrinks at the start.

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
/// After eviction found nothing more to take, writes are judged without looking again
/// for this long: a protected set past the bound would otherwise rescan at every write.
const STARVED_FOR: Duration = Duration::from_secs(10);

/// What one write adds to the cache, as [`Bound::admit`] judges it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Write<'a> {
    /// An object (put, list item, watch event) of this collection.
    Object(&'a CollectionKey),
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
    node: String,
    /// The protected set, until kubelet's pods or claims change.
    protected: Option<Protected>,
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
            node: node.to_owned(),
            protected: None,
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
        let (total, counted) = store.usage_total();
        if !counted {
            return;
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
            if store.usage(true).total() > self.max {
                self.make_room(store, synced, None, 0);
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
        if let Write::Object(c) = write
            && names_protection(c)
        {
            self.protected = None;
        }
        let (total, counted) = store.usage_total();
        if !counted || total.saturating_add(incoming) <= self.max {
            return true;
        }
        let except = match write {
            Write::Object(c) => Some(c),
            _ => None,
        };
        let starved = self.starved.is_some_and(|at| at.elapsed() < STARVED_FOR);
        if !starved {
            if self.make_room(store, synced, except, incoming) {
                return true;
            }
            self.starved = Some(Instant::now());
        }
        match write {
            Write::Document => true,
            Write::Token(component) => {
                *component == Component::KUBELET || {
                    self.refused(component.as_str(), "tokens");
                    false
                }
            }
            Write::Object(c) if protected_kind(c) => true,
            Write::Object(c) => {
                self.refused(c.component.as_str(), &c.dir_name());
                // Never served half-updated: what it holds goes too, until a list refills it.
                if store.has_collection(c) {
                    self.evict_collection(store, synced, c, 3);
                }
                false
            }
        }
    }

    /// Evicts by the tiers until `incoming` more bytes fit (but never `except`); whether they do.
    fn make_room(
        &mut self,
        store: &Store,
        synced: &Synced,
        except: Option<&CollectionKey>,
        incoming: u64,
    ) -> bool {
        let max = self.max;
        let fits = move |store: &Store| store.usage(true).total().saturating_add(incoming) <= max;
        if fits(store) {
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
        if fits(store) {
            return true;
        }
        self.evict_members(store, &members, &fits)
    }

    /// Tier 3: objects of kubelet's member kinds that the protected set does not hold,
    /// oldest first, until `fits`.
    fn evict_members(
        &mut self,
        store: &Store,
        members: &[CollectionKey],
        fits: &dyn Fn(&Store) -> bool,
    ) -> bool {
        let protected = self.protected(store).clone();
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
            Ok(false) => {}
            Err(e) => log::warn!("cache: cannot evict {}: {e}", c.dir_name()),
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
        assert!(!bound.admit(&store, &synced, Write::Object(&proxy), incoming));
        assert!(!store.has_collection(&proxy));
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
}
