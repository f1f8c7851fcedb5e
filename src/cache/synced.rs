//! Freshness you can see (issue 32): for each component's cache of a kind, when the hub last
//! heard the cloud's word on it — a list committed (whole or partial), an object or a 404
//! applied, a watch event or bookmark. The writer thread notes it as it applies each answer
//! ([`Synced::note`]); the offline answers say how old they are from it
//! (`X-Tinyhub-Cache-Age`), `/v1/readyz?verbose` lists it, and the metrics page carries it as
//! `tinyhub_cache_last_sync_timestamp_seconds{component,resource}`.
//!
//! Wall-clock seconds, because an age must survive a restart: the record goes to
//! `<cache>/.synced` at most every [`PERSIST_EVERY`] while it changes, and at the drain. A
//! crash loses at most that much, which makes ages look older, never younger: a kind with no
//! entry has no age. Only a cache with no `.synced` at all (written before the file existed)
//! takes each kind directory's newest modification time.
//! When the clock is behind a record (no RTC, before NTP), the age is unknown, never
//! negative or made up.
//!
//! A session's word ([`Word`]) is the cloud's, as of now, unless it was relayed from a pool
//! cache: then it is as old as that cache's own last sync, so a disk copy of a stale pool
//! cache never looks fresh.
//!
//! Listed whole (issue 35): each kind's record also keeps the scopes it was listed whole in
//! — a list the writer committed whole (`writer/rules.rs`, `ListState::is_whole`: not a page,
//! every item read),
//! its namespace (none: all of them) and its selectors — because an offline list may only be
//! answered from a collection that holds all of its scope: a get, a watch event or one page
//! caches objects, never the knowledge that there are no others (kubectl once answered
//! `get pods -A` offline with the one pod it had fetched by name). A scope covers a list when
//! it is across all namespaces or the same one, and every selector requirement of the scope
//! is one of the list's ([`Selectors::narrows`]: a list without selectors covers any, one made
//! with `spec.nodeName=edge-1` covers that selector and narrower ones). A list of one object
//! by name (`metadata.name=<name>`, kubelet's way to read each ConfigMap and Secret) is not
//! recorded: offline it is answered when that object is cached (`offline/list.rs`). At most
//! [`MAX_LISTS`] scopes a kind, a scope that covers another replacing it; a scope not known
//! before makes the record's next write due at once, so that the first list of a kind is on
//! disk before an outage (a restart's relists add nothing new, so they write nothing). A kind
//! forgotten (the cloud's 404 for its list, eviction) loses its scopes, and an object evicted
//! from it ([`Synced::not_whole`]) all of them. A record written before scopes were kept
//! (an entry without `lists`, or no `.synced` at all) covers every list of its kinds, as
//! before, until the kind is next listed whole: an upgrade during an outage keeps answering.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::key::{CollectionKey, METADATA_DIR, View};
use super::store::Store;
use super::store::synced::{ListedScope, SyncedEntry, synced_bytes};
use crate::lock;
use crate::metrics::{escape, header};
use crate::names::{Component, Gvr};
use crate::selector::Selectors;

/// How often at most the record is written while it changes: ≤ 13 writes an hour, the
/// drain's included.
pub(crate) const PERSIST_EVERY: Duration = Duration::from_secs(300);

/// Kinds recorded at most (components × kinds; a node has a few dozen): the file stays small
/// and the metric under the page's series cap. A kind past it is not recorded, and its
/// answers carry no age.
const MAX_KINDS: usize = 256;

/// Scopes listed whole kept per kind: a component lists a kind through one or two scopes
/// (kubelet's pods by `spec.nodeName`, kube-proxy's Services by its labels); past it the
/// oldest goes.
pub(crate) const MAX_LISTS: usize = 8;

/// Longest selector text (label and field together) a scope keeps; a list with longer
/// selectors is not recorded (and so not answered offline).
const MAX_LIST_TEXT: usize = 1024;

/// One kind's record.
#[derive(Debug, Clone)]
struct Kind {
    /// When the cloud's word was last heard, Unix seconds.
    at: u64,
    /// The scopes it was listed whole in; `None`: unknown (a record from before they were
    /// kept), which covers every list.
    lists: Option<Vec<Listed>>,
}

/// A scope a kind was listed whole in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    /// None: across all namespaces (or a cluster-scoped kind).
    namespace: Option<String>,
    selectors: Selectors,
}

impl Listed {
    /// A whole list of `self` holds every object of a list of `namespace` with `selectors`.
    fn covers(&self, namespace: Option<&str>, selectors: &Selectors) -> bool {
        (self.namespace.is_none() || self.namespace.as_deref() == namespace)
            && selectors.narrows(&self.selectors)
    }

    fn stored(&self) -> ListedScope {
        ListedScope {
            namespace: self.namespace.clone(),
            label: self.selectors.label.to_string(),
            field: self.selectors.field.to_string(),
        }
    }

    /// A stored scope; None when its selectors no longer parse (then it covers nothing).
    fn of(stored: &ListedScope) -> Option<Listed> {
        let selectors = Selectors::parse(Some(&stored.label), Some(&stored.field)).ok()?;
        Some(Listed {
            namespace: stored.namespace.clone(),
            selectors,
        })
    }
}

/// Where a cache session's bytes come from, and so as of when they are the cloud's word.
#[derive(Clone)]
pub(crate) enum Word {
    /// The cloud's own answer (a relay, the refill, a resumable watch): as of now.
    Cloud,
    /// Relayed from a pool cache: as of that cache's own last sync, in Unix seconds (`None`
    /// while it has none), read when each unit is applied.
    Relayed(Arc<dyn Fn() -> Option<u64> + Send + Sync>),
}

impl Word {
    /// When the word was the cloud's, `now` being the writer's clock.
    pub(crate) fn at(&self, now: u64) -> Option<u64> {
        match self {
            Word::Cloud => Some(now),
            Word::Relayed(last) => last(),
        }
    }
}

impl std::fmt::Debug for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Word::Cloud => f.write_str("Cloud"),
            Word::Relayed(_) => f.write_str("Relayed"),
        }
    }
}

/// The last sync of each component's kind, in Unix seconds. Shared: the writer thread notes
/// and persists, request threads and the serve port read.
#[derive(Debug)]
pub(crate) struct Synced {
    kinds: Mutex<BTreeMap<CollectionKey, Kind>>,
    /// Changed since the last write: read without the lock on each writer turn.
    unsaved: AtomicBool,
    /// The writer's clock for [`Synced::persist`]: seconds are counted from it.
    born: Instant,
    /// When the next write is due, in seconds since `born`.
    due: AtomicU64,
}

impl Default for Synced {
    fn default() -> Synced {
        Synced::with(BTreeMap::new(), Duration::ZERO)
    }
}

/// Writes of `.synced` by this process.
static WRITES: AtomicU64 = AtomicU64::new(0);
/// Bytes of those writes.
static WRITTEN_BYTES: AtomicU64 = AtomicU64::new(0);
/// The record the metrics page renders ([`Synced::export`]).
static EXPORTED: Mutex<Option<Arc<Synced>>> = Mutex::new(None);

/// The key of a `.synced` entry or a kind directory: `None` when it names no collection
/// (then it is left out, as a file edited by hand may hold).
pub(crate) fn key_of(component: &str, dir: &str) -> Option<CollectionKey> {
    let (view, kind) = match dir
        .strip_prefix(METADATA_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
    {
        Some(kind) => (View::Metadata, kind),
        None => (View::Full, dir),
    };
    let mut parts = kind.splitn(3, '.');
    let (resource, version, group) = (parts.next()?, parts.next()?, parts.next()?);
    let group = if group == "core" { "" } else { group };
    let key = CollectionKey {
        component: Component::new(component)?,
        gvr: Gvr::new(group, version, resource),
        view,
    };
    // The way back must give the same directory (`core` the only group so spelled).
    (key.unsafe_field().is_none() && key.dir_name() == dir).then_some(key)
}

impl Synced {
    /// A record of `kinds`, its first write due `first_write` from now.
    fn with(kinds: BTreeMap<CollectionKey, Kind>, first_write: Duration) -> Synced {
        Synced {
            kinds: Mutex::new(kinds),
            unsaved: AtomicBool::new(false),
            born: Instant::now(),
            due: AtomicU64::new(first_write.as_secs()),
        }
    }

    /// The record as the cache holds it: `.synced`; when there is no such file at all (a
    /// cache written before it), each kind directory's newest modification time. A kind
    /// missing from an existing file has no age: the directory was written after its last
    /// record (a write after a sync is no sync), so its time could read younger than the
    /// truth. An unreadable file is warned of once and read as empty.
    pub(crate) fn load(store: &Store) -> Synced {
        let mut kinds = BTreeMap::new();
        match store.stored_ages() {
            Ok(entries) => {
                for e in entries.into_iter().take(MAX_KINDS) {
                    if let Some(key) = key_of(&e.component, &e.resource) {
                        let lists = e
                            .lists
                            .map(|lists| lists.iter().filter_map(Listed::of).collect());
                        kinds.insert(key, Kind { at: e.at, lists });
                    }
                }
            }
            Err(e) => log::warn!("cache: {e}; the cache's ages are unknown until each kind syncs"),
        }
        // The first write, too, waits its turn: a hub stopped within minutes writes at its
        // drain, and one that crashes reads older ages, as the bound allows.
        Synced::with(kinds, PERSIST_EVERY)
    }

    /// Renders this record on the metrics page from now on (the last one exported wins: one
    /// hub per process).
    pub(crate) fn export(self: &Arc<Synced>) {
        *lock(&EXPORTED) = Some(Arc::clone(self));
    }

    /// The cloud's word on `collection` was heard at `at` (Unix seconds): the writer thread,
    /// as it applies an answer. No allocation unless the kind is new.
    pub(crate) fn note(&self, collection: &CollectionKey, at: u64) {
        let mut kinds = lock(&self.kinds);
        let full = kinds.len() >= MAX_KINDS;
        let changed = match kinds.get_mut(collection) {
            Some(kind) => std::mem::replace(&mut kind.at, at) != at,
            None if full => false,
            None => {
                let lists = Some(Vec::new());
                kinds.insert(collection.clone(), Kind { at, lists });
                true
            }
        };
        if changed {
            self.unsaved.store(true, Ordering::Relaxed);
        }
    }

    /// `collection` was listed whole in `namespace` (none: all) with `selectors`, and the
    /// list committed (after [`Synced::note`], which records the kind). A scope already
    /// covered changes nothing; a new one replaces those it covers and is written at the
    /// writer's next turn.
    pub(crate) fn listed_whole(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) {
        let scope = Listed {
            namespace: namespace.map(str::to_owned),
            selectors: selectors.clone(),
        };
        // A list of one object by name says no more than the object (`Offline::list` answers
        // it when the object is cached): kubelet's many such lists would push out the rest.
        if selectors.field.object_name().is_some() {
            return;
        }
        let stored = scope.stored();
        if stored.label.len() + stored.field.len() > MAX_LIST_TEXT {
            return;
        }
        let mut kinds = lock(&self.kinds);
        let Some(kind) = kinds.get_mut(collection) else {
            return;
        };
        let lists = kind.lists.get_or_insert_with(Vec::new);
        if lists.iter().any(|l| l.covers(namespace, selectors)) {
            return;
        }
        lists.retain(|l| !scope.covers(l.namespace.as_deref(), &l.selectors));
        if lists.len() >= MAX_LISTS {
            lists.remove(0);
        }
        lists.push(scope);
        self.unsaved.store(true, Ordering::Relaxed);
        self.due.store(0, Ordering::Relaxed);
    }

    /// Whether an offline list of `collection` in `namespace` (none: all) with `selectors`
    /// may be answered: a whole list of a scope covering it was committed (or the record is
    /// from before scopes were kept).
    pub(crate) fn covers(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) -> bool {
        match lock(&self.kinds).get(collection) {
            None => false,
            Some(Kind { lists: None, .. }) => true,
            Some(Kind {
                lists: Some(lists), ..
            }) => lists.iter().any(|l| l.covers(namespace, selectors)),
        }
    }

    /// Whether an object of `collection` in `namespace` that the cache lacks is known not
    /// to exist as of the last list: a whole list without selectors of a scope holding it
    /// was committed.
    pub(crate) fn absent_as_listed(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
    ) -> bool {
        match lock(&self.kinds).get(collection) {
            Some(Kind {
                lists: Some(lists), ..
            }) => lists
                .iter()
                .any(|l| l.covers(namespace, &Selectors::everything())),
            _ => false,
        }
    }

    /// An object of `collection` left the cache without the cloud's word (evicted): no list
    /// of it is whole any more until it is listed again.
    pub(crate) fn not_whole(&self, collection: &CollectionKey) {
        if let Some(kind) = lock(&self.kinds).get_mut(collection)
            && kind.lists.as_ref().is_none_or(|l| !l.is_empty())
        {
            kind.lists = Some(Vec::new());
            self.unsaved.store(true, Ordering::Relaxed);
        }
    }

    /// `collection` is no longer cached (the cloud answered 404 to its list).
    pub(crate) fn forget(&self, collection: &CollectionKey) {
        if lock(&self.kinds).remove(collection).is_some() {
            self.unsaved.store(true, Ordering::Relaxed);
        }
    }

    /// When the cloud's word on `collection` was last heard (Unix seconds).
    pub(crate) fn last(&self, collection: &CollectionKey) -> Option<u64> {
        lock(&self.kinds).get(collection).map(|kind| kind.at)
    }

    /// How old the cache of `collection` is, in whole seconds: `None` with no record, or
    /// when the clock is behind it.
    pub(crate) fn age(&self, collection: &CollectionKey) -> Option<u64> {
        age_at(self.last(collection)?, crate::unix_secs())
    }

    /// Every record: (component, kind directory, Unix seconds), sorted by the names.
    pub(crate) fn entries(&self) -> Vec<(String, String, u64)> {
        let mut entries: Vec<_> = lock(&self.kinds)
            .iter()
            .map(|(key, kind)| (key.component.as_str().to_owned(), key.dir_name(), kind.at))
            .collect();
        entries.sort();
        entries
    }

    /// Writes `.synced` when the record changed and [`PERSIST_EVERY`] passed since the last
    /// write, or when `drain` (the writer's last turn) whatever the time. The writer thread
    /// only. A failed write is warned of and tried again at the next turn due.
    pub(crate) fn persist(&self, store: &Store, drain: bool) {
        // Most turns: two atomic loads, no lock.
        let elapsed = self.born.elapsed().as_secs();
        if !self.unsaved.load(Ordering::Relaxed)
            || !(drain || elapsed >= self.due.load(Ordering::Relaxed))
        {
            return;
        }
        self.unsaved.store(false, Ordering::Relaxed);
        self.due
            .store(elapsed + PERSIST_EVERY.as_secs(), Ordering::Relaxed);
        let bytes = {
            let kinds = lock(&self.kinds)
                .iter()
                .map(|(key, kind)| SyncedEntry {
                    component: key.component.as_str().to_owned(),
                    resource: key.dir_name(),
                    at: kind.at,
                    lists: kind
                        .lists
                        .as_ref()
                        .map(|lists| lists.iter().map(Listed::stored).collect()),
                })
                .collect();
            synced_bytes(kinds)
        };
        let result = match bytes {
            Ok(bytes) => store
                .put_synced(&bytes)
                .map(|()| bytes.len())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(len) => {
                WRITES.fetch_add(1, Ordering::Relaxed);
                WRITTEN_BYTES.fetch_add(len as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.unsaved.store(true, Ordering::Relaxed);
                log::warn!(
                    "cache: storing .synced failed: {e} (kept in memory; after a restart the \
                     ages read older)"
                );
            }
        }
    }
}

/// The age of a sync at `at` when the clock says `now`; `None` when the clock is behind it.
pub(crate) fn age_at(at: u64, now: u64) -> Option<u64> {
    now.checked_sub(at)
}

/// The exported record's series: `tinyhub_cache_last_sync_timestamp_seconds{component,resource}`
/// and the writes of `.synced` (a source app/build.rs registers).
pub(crate) fn render(out: &mut String) {
    let Some(synced) = lock(&EXPORTED).clone() else {
        return;
    };
    let entries = synced.entries();
    header(
        out,
        "tinyhub_cache_last_sync_timestamp_seconds",
        "gauge",
        "when the disk cache last heard the cloud's word on a component's kind (a list, an \
         object, a 404, a watch event or bookmark), Unix seconds",
    );
    for (component, resource, at) in &entries {
        let _ = writeln!(
            out,
            "tinyhub_cache_last_sync_timestamp_seconds{{component=\"{}\",resource=\"{}\"}} {at}",
            escape(component),
            escape(resource)
        );
    }
    for (name, help, value) in [
        (
            "tinyhub_cache_synced_file_writes_total",
            "writes of the disk cache's sync record (.synced) by this process",
            &WRITES,
        ),
        (
            "tinyhub_cache_synced_file_bytes_total",
            "bytes written to the disk cache's sync record (.synced) by this process",
            &WRITTEN_BYTES,
        ),
    ] {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
    }
}

/// `/v1/readyz?verbose`'s informational lines, one per recorded kind:
/// `[+]synced kubelet/pods.v1.core 42s ago`.
pub(crate) fn readyz_lines(synced: &Synced, out: &mut String) {
    let now = crate::unix_secs();
    for (component, resource, at) in synced.entries() {
        let _ = match age_at(at, now) {
            Some(age) => writeln!(out, "[+]synced {component}/{resource} {age}s ago"),
            None => writeln!(
                out,
                "[+]synced {component}/{resource} age unknown (clock behind the last sync)"
            ),
        };
    }
}

#[cfg(test)]
mod tests;
