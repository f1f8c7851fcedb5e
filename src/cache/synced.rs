//! Freshness you can see (issue 32): for each component's cache of a kind, when the hub last
//! heard the cloud's word on it — a list committed (whole or partial), an object or a 404
//! applied, a watch event or bookmark. The writer thread notes it as it applies each answer
//! ([`Synced::note`]); the offline answers say how old they are from it
//! (`X-Tinyhub-Cache-Age`), `/v1/readyz?verbose` lists it, and the metrics page carries it as
//! `tinyhub_cache_last_sync_timestamp_seconds{component,resource}`.
//!
//! Wall-clock seconds, because an age must survive a restart: the record goes to
//! `<cache>/.synced` at most every [`PERSIST_EVERY`] while it changes, and at the drain. A
//! crash loses at most that much, which makes ages look older, never younger. A kind with no
//! entry (a cache written before the file) takes its directory's newest modification time.
//! When the clock is behind a record (no RTC, before NTP), the age is unknown, never
//! negative or made up.
//!
//! A session's word ([`Word`]) is the cloud's, as of now, unless it was relayed from a pool
//! cache: then it is as old as that cache's own last sync, so a disk copy of a stale pool
//! cache never looks fresh.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::key::CollectionKey;
use super::store::Store;
use crate::lock;
use crate::metrics::{escape, header};

/// How often at most the record is written while it changes: ≤ 13 writes an hour, the
/// drain's included.
pub(crate) const PERSIST_EVERY: Duration = Duration::from_secs(300);

/// Kinds recorded at most (components × kinds; a node has a few dozen): the file stays small
/// and the metric under the page's series cap. A kind past it is not recorded, and its
/// answers carry no age.
const MAX_KINDS: usize = 256;

/// The file's format version.
const VERSION: u32 = 1;

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

/// The last sync of each (component, kind directory), in Unix seconds. Shared: the writer
/// thread notes and persists, request threads and the serve port read.
#[derive(Debug, Default)]
pub(crate) struct Synced {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    kinds: BTreeMap<(String, String), u64>,
    /// Changed since the last write.
    unsaved: bool,
    /// When the last write was tried, or the record loaded (the writer's clock).
    written: Option<Instant>,
}

/// `<cache>/.synced`.
#[derive(Debug, Serialize, Deserialize)]
struct File {
    version: u32,
    kinds: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    component: String,
    resource: String,
    at: u64,
}

/// Writes of `.synced` by this process.
static WRITES: AtomicU64 = AtomicU64::new(0);
/// Bytes of those writes.
static WRITTEN_BYTES: AtomicU64 = AtomicU64::new(0);
/// The record the metrics page renders ([`Synced::export`]).
static EXPORTED: Mutex<Option<Arc<Synced>>> = Mutex::new(None);

/// Seconds since the Unix epoch by the system clock.
fn now() -> u64 {
    u64::try_from(crate::unix_now()).unwrap_or(0)
}

impl Synced {
    /// The record as the cache holds it: `.synced`, then, for each kind directory without an
    /// entry, its newest modification time. An unreadable file is warned of once and read as
    /// empty (ages then come from the directories).
    pub(crate) fn load(store: &Store) -> Synced {
        let mut kinds = BTreeMap::new();
        match store.synced() {
            Ok(Some(bytes)) => match serde_json::from_slice::<File>(&bytes) {
                Ok(file) if file.version == VERSION => {
                    for e in file.kinds.into_iter().take(MAX_KINDS) {
                        kinds.insert((e.component, e.resource), e.at);
                    }
                }
                Ok(file) => log::warn!(
                    "cache: .synced has version {}, not {VERSION}; ages start from the \
                     kind directories' modification times",
                    file.version
                ),
                Err(e) => log::warn!(
                    "cache: .synced does not parse ({e}); ages start from the kind \
                     directories' modification times"
                ),
            },
            Ok(None) => {}
            Err(e) => log::warn!("cache: cannot read .synced: {e}"),
        }
        for dir in store.kind_dirs_on_disk() {
            if kinds.len() >= MAX_KINDS {
                break;
            }
            kinds
                .entry((dir.component, dir.kind))
                .or_insert(dir.modified);
        }
        Synced {
            inner: Mutex::new(Inner {
                kinds,
                unsaved: false,
                // The first write, too, waits its turn: a hub stopped within minutes writes
                // at its drain, and one that crashes reads older ages, as the bound allows.
                written: Some(Instant::now()),
            }),
        }
    }

    /// Renders this record on the metrics page from now on (the last one exported wins: one
    /// hub per process).
    pub(crate) fn export(self: &Arc<Synced>) {
        *lock(&EXPORTED) = Some(Arc::clone(self));
    }

    /// The cloud's word on `collection` was heard at `at` (Unix seconds): the writer thread,
    /// as it applies an answer.
    pub(crate) fn note(&self, collection: &CollectionKey, at: u64) {
        let mut inner = lock(&self.inner);
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        if inner.kinds.len() >= MAX_KINDS && !inner.kinds.contains_key(&key) {
            return;
        }
        if inner.kinds.insert(key, at) != Some(at) {
            inner.unsaved = true;
        }
    }

    /// `collection` is no longer cached (the cloud answered 404 to its list).
    pub(crate) fn forget(&self, collection: &CollectionKey) {
        let mut inner = lock(&self.inner);
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        if inner.kinds.remove(&key).is_some() {
            inner.unsaved = true;
        }
    }

    /// When the cloud's word on `collection` was last heard (Unix seconds).
    pub(crate) fn last(&self, collection: &CollectionKey) -> Option<u64> {
        let key = (
            collection.component.as_str().to_owned(),
            collection.dir_name(),
        );
        lock(&self.inner).kinds.get(&key).copied()
    }

    /// How old the cache of `collection` is, in whole seconds: `None` with no record, or
    /// when the clock is behind it.
    pub(crate) fn age(&self, collection: &CollectionKey) -> Option<u64> {
        age_at(self.last(collection)?, now())
    }

    /// Every record: (component, kind directory, Unix seconds), sorted.
    pub(crate) fn entries(&self) -> Vec<(String, String, u64)> {
        lock(&self.inner)
            .kinds
            .iter()
            .map(|((c, k), at)| (c.clone(), k.clone(), *at))
            .collect()
    }

    /// Writes `.synced` when the record changed and [`PERSIST_EVERY`] passed since the last
    /// write, or when `drain` (the writer's last turn) whatever the time. The writer thread
    /// only. A failed write is warned of and tried again at the next turn due.
    pub(crate) fn persist(&self, store: &Store, drain: bool) {
        let bytes = {
            let mut inner = lock(&self.inner);
            let due = inner.written.is_none_or(|at| at.elapsed() >= PERSIST_EVERY);
            if !inner.unsaved || !(due || drain) {
                return;
            }
            inner.unsaved = false;
            inner.written = Some(Instant::now());
            let kinds = inner
                .kinds
                .iter()
                .map(|((component, resource), at)| Entry {
                    component: component.clone(),
                    resource: resource.clone(),
                    at: *at,
                })
                .collect();
            serde_json::to_vec(&File {
                version: VERSION,
                kinds,
            })
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
                lock(&self.inner).unsaved = true;
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
    let now = now();
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
