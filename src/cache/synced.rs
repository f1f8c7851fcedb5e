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
//! recorded as a scope: offline it is answered when that object is cached (`offline/list.rs`).
//! At most [`MAX_LISTS`] scopes a kind, a scope that covers another replacing it. A kind's
//! first scope (or one across all namespaces without selectors) makes the record's next
//! write due at once, so that the first list of a kind is on disk before an outage; later
//! ones wait the usual [`PERSIST_EVERY`] (a client cycling selectors costs no write a list,
//! and a restart's relists add nothing new, so they write nothing). Whatever narrows what
//! is claimed is written at once: a kind forgotten (the cloud's 404 for its list) loses its
//! scopes, an object evicted from it ([`Synced::not_whole`]) all of them.
//!
//! Known absent: a whole list of one name that found nothing (kubelet's list of an
//! `optional: true` ConfigMap or Secret that does not exist) records that name, its
//! namespace and the list's resourceVersion, at most [`MAX_ABSENT`] a kind, apart from the
//! scopes so that they never push one out. Offline the same list is answered empty, as the
//! cloud did and YurtHub does (a 404 would keep kubelet from ever starting such a pod); a
//! name never listed so keeps its 404. The object cached since (it answers first), a later
//! list of it that found it, or a whole list without selectors holding it supersede the
//! absence; an eviction drops every absence of the kind with its scopes.
//!
//! From before scopes were kept: an entry without `lists`, or a cache with no `.synced` at all
//! (written by a tinyhub that predates the file), covers every list of its kinds as before,
//! so that an upgrade during an outage keeps answering; the first word from the cloud on
//! such a kind after the load ([`Synced::note`]) turns it into "nothing proved whole yet".
//! A `.synced` that exists but does not read (bad JSON, too large, a symlink, not a file) is
//! damaged, not old: it proves nothing and nothing is answered from it. (A new cache that
//! crashed before its first record reads as an old one until it hears the cloud; a kind's
//! first scope is written at once, which keeps that window short.)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::key::{CollectionKey, METADATA_DIR, View};
use super::store::Store;
use super::store::synced::{AbsentName, ListedScope, SyncedEntry, synced_bytes};
use crate::lock;
use crate::metrics::{escape, header};
use crate::names::{Component, Gvr};
use crate::selector::Selectors;

/// How often at most the record is written while it changes: ≤ 13 writes an hour, the
/// drain's included.
pub(crate) const PERSIST_EVERY: Duration = Duration::from_secs(300);

/// Kinds recorded at most (components × kinds; a node has a few dozen): the file stays small
/// and the metric under the page's series cap. A new kind past it pushes out the one heard
/// least recently, never one of kubelet's while another's is there.
const MAX_KINDS: usize = 256;

/// Scopes listed whole kept per kind: a component lists a kind through one or two scopes
/// (kubelet's pods by `spec.nodeName`, kube-proxy's Services by its labels); past it the
/// oldest goes.
pub(crate) const MAX_LISTS: usize = 8;

/// Longest scope a kind keeps, as its record writes it (JSON, escapes counted); a list with
/// longer selectors is not recorded (and so not answered offline). With [`MAX_KINDS`],
/// [`MAX_LISTS`] and [`MAX_ABSENT`] it bounds the record well under the largest file the
/// store reads (a record it could not read would prove nothing).
const MAX_LIST_TEXT: usize = 1024;

/// Names known absent kept per kind (see "Known absent"); past it the oldest goes.
pub(crate) const MAX_ABSENT: usize = 32;

/// Longest resourceVersion an absence keeps (the apiserver's are decimal numbers).
const MAX_RV: usize = 64;

/// One kind's record.
#[derive(Debug, Clone)]
struct Kind {
    /// When the cloud's word was last heard, Unix seconds.
    at: u64,
    /// The scopes it was listed whole in; `None`: unknown (a record from before they were
    /// kept), which covers every list.
    lists: Option<Vec<Listed>>,
    /// Names a whole list by name found absent, oldest first.
    absent: Vec<AbsentName>,
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
    /// truth. An unreadable file (bad JSON, too large, a symlink, not a file) is warned of
    /// once and read as empty: it proves no list whole. Past [`MAX_KINDS`] entries, kubelet's
    /// and then the most recent are kept, as [`Synced::note`] would have kept them.
    pub(crate) fn load(store: &Store) -> Synced {
        let mut found = Vec::new();
        match store.stored_ages() {
            Ok(entries) => {
                for e in entries {
                    if let Some(key) = key_of(&e.component, &e.resource) {
                        let lists = e
                            .lists
                            .map(|lists| lists.iter().filter_map(Listed::of).collect());
                        let mut absent = e.absent;
                        absent.truncate(MAX_ABSENT);
                        found.push((
                            key,
                            Kind {
                                at: e.at,
                                lists,
                                absent,
                            },
                        ));
                    }
                }
            }
            Err(e) => log::warn!(
                "cache: {e}; the cache's ages are unknown until each kind syncs, and no list \
                 is answered offline until listed again"
            ),
        }
        // Past the cap (a file edited by hand, or a bigger cap before): the ones a new kind
        // would push out last are kept.
        if found.len() > MAX_KINDS {
            found.sort_by_key(|(key, kind)| {
                (key.component != Component::KUBELET, u64::MAX - kind.at)
            });
            found.truncate(MAX_KINDS);
        }
        let kinds = found.into_iter().collect();
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
    /// as it applies an answer. No allocation unless the kind is new. An entry from before
    /// scopes were kept now proves nothing whole (the hub hears the cloud: its lists will
    /// say), written at once; a new kind past [`MAX_KINDS`] pushes out the one heard least
    /// recently, kubelet's last.
    pub(crate) fn note(&self, collection: &CollectionKey, at: u64) {
        let mut kinds = lock(&self.kinds);
        let changed = match kinds.get_mut(collection) {
            Some(kind) => {
                let old = kind.lists.is_none();
                if old {
                    kind.lists = Some(Vec::new());
                    self.due.store(0, Ordering::Relaxed);
                }
                std::mem::replace(&mut kind.at, at) != at || old
            }
            None => {
                if kinds.len() >= MAX_KINDS
                    && let Some(victim) = kinds
                        .iter()
                        .min_by_key(|(key, kind)| (key.component == Component::KUBELET, kind.at))
                        .map(|(key, _)| key.clone())
                {
                    // What it claimed leaves the disk at once too.
                    kinds.remove(&victim);
                    self.due.store(0, Ordering::Relaxed);
                }
                let kind = Kind {
                    at,
                    lists: Some(Vec::new()),
                    absent: Vec::new(),
                };
                kinds.insert(collection.clone(), kind);
                true
            }
        };
        if changed {
            self.unsaved.store(true, Ordering::Relaxed);
        }
    }

    /// `collection` was listed whole in `namespace` (none: all) with `selectors`, and the
    /// list committed with `items` objects at `resource_version` (after [`Synced::note`],
    /// which records the kind). A scope already covered changes nothing; a new one replaces
    /// those it covers, written at once when it is the kind's first (or covers all of it),
    /// else at the usual cadence. A list of one name records only whether that name was
    /// found ("Known absent").
    pub(crate) fn listed_whole(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
        items: usize,
        resource_version: Option<&str>,
    ) {
        // A list of one object by name says no more than the object (`Offline::list` answers
        // it when the object is cached): kubelet's many such lists would push out the rest.
        if let Some(name) = selectors.field.object_name() {
            self.listed_name(
                collection,
                namespace,
                selectors,
                name,
                items,
                resource_version,
            );
            return;
        }
        let scope = Listed {
            namespace: namespace.map(str::to_owned),
            selectors: selectors.clone(),
        };
        // Bounded as written, escapes and all, so the record always reads back.
        let fits = serde_json::to_vec(&scope.stored()).is_ok_and(|b| b.len() <= MAX_LIST_TEXT);
        if !fits {
            return;
        }
        let mut kinds = lock(&self.kinds);
        let Some(kind) = kinds.get_mut(collection) else {
            return;
        };
        let everything = selectors.is_everything();
        // The absences it holds are superseded: the list answers for them.
        let before = kind.absent.len();
        kind.absent.retain(|a| {
            !(everything && (namespace.is_none() || a.namespace.as_deref() == namespace))
        });
        let dropped = kind.absent.len() != before;
        let lists = kind.lists.get_or_insert_with(Vec::new);
        if lists.iter().any(|l| l.covers(namespace, selectors)) {
            if dropped {
                self.unsaved.store(true, Ordering::Relaxed);
            }
            return;
        }
        let first = lists.is_empty();
        lists.retain(|l| !scope.covers(l.namespace.as_deref(), &l.selectors));
        if lists.len() >= MAX_LISTS {
            lists.remove(0);
        }
        lists.push(scope);
        self.unsaved.store(true, Ordering::Relaxed);
        if first || (everything && namespace.is_none()) {
            self.due.store(0, Ordering::Relaxed);
        }
    }

    /// A whole list of `collection` by one `name` committed with `items` objects: recorded
    /// absent when it found none and asked for nothing but the name (another selector could
    /// have left out an object that exists); found, it is absent no more.
    fn listed_name(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
        name: &str,
        items: usize,
        resource_version: Option<&str>,
    ) {
        let only_name = selectors.label.is_everything() && selectors.field.paths().count() == 1;
        let rv = resource_version.unwrap_or_default();
        let mut kinds = lock(&self.kinds);
        let Some(kind) = kinds.get_mut(collection) else {
            return;
        };
        let at = kind
            .absent
            .iter()
            .position(|a| a.namespace.as_deref() == namespace && a.name == name);
        if items > 0 || !only_name || rv.len() > MAX_RV || rv.chars().any(|c| !c.is_ascii_graphic())
        {
            // Found (or not provably absent): an absence it had is superseded.
            if let Some(at) = at {
                kind.absent.remove(at);
                self.unsaved.store(true, Ordering::Relaxed);
                self.due.store(0, Ordering::Relaxed);
            }
            return;
        }
        let first = kind.absent.is_empty();
        let absent = AbsentName {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            rv: rv.to_owned(),
        };
        match at {
            Some(at) if kind.absent[at] == absent => return,
            Some(at) => {
                kind.absent.remove(at);
            }
            None if kind.absent.len() >= MAX_ABSENT => {
                kind.absent.remove(0);
            }
            None => {}
        }
        kind.absent.push(absent);
        self.unsaved.store(true, Ordering::Relaxed);
        if first {
            self.due.store(0, Ordering::Relaxed);
        }
    }

    /// The resourceVersion of the list that found the one name an offline list of
    /// `collection` in `namespace` with `selectors` asks for absent (empty: it had none);
    /// `None` when that name is not known absent. The caller answers first from the object
    /// when it is cached.
    pub(crate) fn known_absent(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) -> Option<String> {
        let name = selectors.field.object_name()?;
        let kinds = lock(&self.kinds);
        kinds
            .get(collection)?
            .absent
            .iter()
            .find(|a| a.namespace.as_deref() == namespace && a.name == name)
            .map(|a| a.rv.clone())
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
    /// of it is whole any more until it is listed again, and no name of it is known absent
    /// (the object evicted may be one cached since). Written at once: the disk must never
    /// claim more than memory.
    pub(crate) fn not_whole(&self, collection: &CollectionKey) {
        if let Some(kind) = lock(&self.kinds).get_mut(collection)
            && (kind.lists.as_ref().is_none_or(|l| !l.is_empty()) || !kind.absent.is_empty())
        {
            kind.lists = Some(Vec::new());
            kind.absent.clear();
            self.unsaved.store(true, Ordering::Relaxed);
            self.due.store(0, Ordering::Relaxed);
        }
    }

    /// `collection` is no longer cached (the cloud answered 404 to its list): written at
    /// once, as any narrowing.
    pub(crate) fn forget(&self, collection: &CollectionKey) {
        if lock(&self.kinds).remove(collection).is_some() {
            self.unsaved.store(true, Ordering::Relaxed);
            self.due.store(0, Ordering::Relaxed);
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
        self.persist_at(store, drain, Instant::now());
    }

    /// [`Synced::persist`] with the time read by the caller (`now`, not before this record
    /// was made): the writer reads the clock once for many turns.
    pub(crate) fn persist_at(&self, store: &Store, drain: bool, now: Instant) {
        // Most turns: two atomic loads, no lock.
        let elapsed = now.saturating_duration_since(self.born).as_secs();
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
                    absent: kind.absent.clone(),
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
