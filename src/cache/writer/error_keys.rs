//! The cache keys whose last write failed, as YurtHub keeps them (its `errorKeys`): what an
//! operator needs to know before trusting the node offline. A key enters when storing it
//! fails (a full or broken disk, a path in the way) and leaves when it is stored, found
//! already current, or removed; the count is `node_yurthub_error_keys_count`.
//!
//! The list is kept on disk beside the cache (`Store::put_error_keys`), rewritten whole when
//! it changes, so a restart still knows what the cache missed;
//! `node_yurthub_error_keys_persistency_status` is 1 while the file says what memory holds
//! and 0 while it could not be written (on a full disk it cannot: YurtHub's append-only file
//! fails there too). No writes while nothing fails: a healthy hub never touches the file.
//!
//! Owned by the writer thread: no lock. What the request path reads of it (kubelet's `GET
//! node` sets the node's Autonomy condition by it) is published to [`failing_keys`]: the
//! count is the metric's, read without a lock, the messages behind one taken only while some
//! key fails.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::key::{CollectionKey, ObjectKey, TokenKey};
use crate::cache::store::{Store, StoreError};
use crate::cache::target::CacheTarget;
use crate::metrics::METRICS;

/// Most keys kept. A disk that fails every write could otherwise grow the list with the
/// cache; at about 150 bytes a key (its path and the error) this bounds it near 150 KB.
/// Past it new keys are not counted, and a line says so once.
pub(crate) const MAX_ERROR_KEYS: usize = 1024;

/// Longest error message kept per key (the store's messages name the path and the cause).
const MAX_MESSAGE: usize = 200;

/// The list is written at most this often: a disk failing every write changes it at each
/// failure, and each write is a staged file, an fsync and a rename.
const WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// After a failed write of the list, the next try waits this long (a full disk fails every
/// try).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Longest summary of the failing keys' messages ([`failing_keys`]): it becomes a condition's
/// message in the node's status, which every reader of the node downloads.
const MAX_SUMMARY: usize = 4096;

/// The failing keys' messages joined (None while none fails), published before the count
/// (`node_yurthub_error_keys_count`).
static FAILING_MESSAGES: Mutex<Option<Arc<str>>> = Mutex::new(None);

/// The error messages of the keys whose last write failed, when some do (YurtHub's
/// `QueryCacheResult`): in key order, joined by a newline, cut at a message's end once past
/// 4 KiB. One atomic load while none fails (the usual case), a short lock otherwise.
pub(crate) fn failing_keys() -> Option<Arc<str>> {
    if METRICS.error_keys_count.load(Ordering::Acquire) == 0 {
        return None;
    }
    // A poisoned lock still holds a whole `Option`: the summary is only ever replaced.
    crate::lock(&FAILING_MESSAGES).clone()
}

/// Something the writer stores under a cache key: its key as YurtHub writes it,
/// `<component>/<resource>.<version>.<group>[/<namespace>][/<name>]`.
pub(super) trait Keyed {
    /// The key.
    fn error_key(&self) -> String;
}

fn collection_key(c: &CollectionKey, namespace: Option<&str>, name: Option<&str>) -> String {
    let mut key = format!("{}/{}", c.component, c.dir_name());
    for part in [namespace, name].into_iter().flatten() {
        key.push('/');
        key.push_str(part);
    }
    key
}

impl Keyed for ObjectKey {
    fn error_key(&self) -> String {
        collection_key(
            &self.collection,
            self.namespace.as_deref(),
            Some(&self.name),
        )
    }
}

impl Keyed for TokenKey {
    fn error_key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.component,
            TokenKey::DIR,
            self.namespace,
            self.name,
            self.digest
        )
    }
}

impl Keyed for CacheTarget {
    fn error_key(&self) -> String {
        match self {
            CacheTarget::Object {
                collection,
                namespace,
                name,
            } => collection_key(collection, namespace.as_deref(), name.as_deref()),
            CacheTarget::List {
                collection,
                namespace,
                ..
            } => collection_key(collection, namespace.as_deref(), None),
            CacheTarget::Watch { collection } => collection_key(collection, None, None),
            CacheTarget::NonResource { file } => file.clone(),
            CacheTarget::Token(t) => format!(
                "{}/{}/{}/{}",
                t.component,
                TokenKey::DIR,
                t.namespace,
                t.name
            ),
        }
    }
}

/// The failed keys, with why each failed.
#[derive(Debug, Default)]
pub(super) struct ErrorKeys {
    keys: BTreeMap<String, String>,
    /// The file is behind memory.
    dirty: bool,
    /// When the file was last written, or the write tried.
    written_at: Option<Instant>,
    /// The last try failed.
    failing: bool,
    /// The cap was met (said once).
    capped: bool,
}

impl ErrorKeys {
    /// The list the store kept from an earlier run (empty when there is none, or it cannot
    /// be read: then the file is rewritten at the next change).
    pub(super) fn load(store: &Store) -> ErrorKeys {
        let mut loaded = ErrorKeys::default();
        match store.error_keys() {
            Ok(None) => {}
            Ok(Some(bytes)) => match serde_json::from_slice::<BTreeMap<String, String>>(&bytes) {
                Ok(mut keys) => {
                    while keys.len() > MAX_ERROR_KEYS {
                        keys.pop_last();
                    }
                    if !keys.is_empty() {
                        log::warn!(
                            "cache: {} keys failed to be stored in an earlier run and are not \
                             stored yet (node_yurthub_error_keys_count)",
                            keys.len()
                        );
                    }
                    loaded.keys = keys;
                }
                Err(e) => {
                    log::warn!(
                        "cache: the list of keys that failed to be stored is unreadable ({e}); starting a new one"
                    );
                    loaded.dirty = true;
                }
            },
            Err(e) => {
                log::warn!("cache: cannot read the list of keys that failed to be stored: {e}");
                loaded.dirty = true;
            }
        }
        loaded.publish();
        METRICS
            .error_keys_persistency_status
            .store(i64::from(!loaded.dirty), Ordering::Relaxed);
        loaded
    }

    /// Storing `key` failed with `e`.
    pub(super) fn failed(&mut self, key: &dyn Keyed, e: &StoreError) {
        let key = key.error_key();
        let mut message = e.to_string();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        if !self.keys.contains_key(&key) && self.keys.len() >= MAX_ERROR_KEYS {
            if !std::mem::replace(&mut self.capped, true) {
                log::warn!(
                    "cache: more than {MAX_ERROR_KEYS} keys failed to be stored; the others are \
                     not counted in node_yurthub_error_keys_count"
                );
            }
            return;
        }
        if self.keys.get(&key) != Some(&message) {
            self.keys.insert(key, message);
            self.dirty = true;
            self.publish();
        }
    }

    /// No key is waiting to be stored again.
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `key` holds what it should now (stored, already current, or removed).
    pub(super) fn stored(&mut self, key: &dyn Keyed) {
        // The usual case, without building the key.
        if self.keys.is_empty() {
            return;
        }
        self.stored_key(&key.error_key());
    }

    /// [`ErrorKeys::stored`] for a key already built.
    pub(super) fn stored_key(&mut self, key: &str) {
        if self.keys.remove(key).is_some() {
            self.dirty = true;
            self.publish();
        }
    }

    /// Every key of `collection` holds what it should: the collection is gone.
    pub(super) fn removed_collection(&mut self, collection: &CollectionKey) {
        if self.keys.is_empty() {
            return;
        }
        let whole = collection_key(collection, None, None);
        let under = format!("{whole}/");
        let before = self.keys.len();
        self.keys
            .retain(|k, _| *k != whole && !k.starts_with(&under));
        if self.keys.len() != before {
            self.dirty = true;
            self.publish();
        }
    }

    /// `key` is in the list (its write failed and has not succeeded since).
    pub(super) fn contains(&self, key: &dyn Keyed) -> Option<String> {
        if self.keys.is_empty() {
            return None;
        }
        let key = key.error_key();
        self.keys.contains_key(&key).then_some(key)
    }

    /// Writes the list when it changed, at most once per [`WRITE_INTERVAL`] (after a
    /// failure, [`RETRY_AFTER`]) unless `now` (the writer is stopping).
    pub(super) fn persist(&mut self, store: &Store, now: bool) {
        let wait = if self.failing {
            RETRY_AFTER
        } else {
            WRITE_INTERVAL
        };
        if !self.dirty || (!now && self.written_at.is_some_and(|t| t.elapsed() < wait)) {
            return;
        }
        self.written_at = Some(Instant::now());
        // A map of strings always serialises.
        let bytes = serde_json::to_vec(&self.keys).unwrap_or_default();
        match store.put_error_keys(&bytes) {
            Ok(()) => {
                self.dirty = false;
                self.failing = false;
                METRICS
                    .error_keys_persistency_status
                    .store(1, Ordering::Relaxed);
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    log::warn!("cache: cannot keep the list of keys that failed to be stored: {e}");
                }
                METRICS
                    .error_keys_persistency_status
                    .store(0, Ordering::Relaxed);
            }
        }
    }

    /// Publishes the keys for the request path: the messages, then the count (a reader that
    /// sees the count sees the messages it counts).
    fn publish(&self) {
        let summary = (!self.keys.is_empty()).then(|| Arc::from(self.summary()));
        *crate::lock(&FAILING_MESSAGES) = summary;
        METRICS
            .error_keys_count
            .store(self.keys.len() as i64, Ordering::Release);
    }

    /// The keys' messages in key order joined by a newline (YurtHub joins them in its map's
    /// order), whole messages only, up to [`MAX_SUMMARY`] bytes and the one that passes it.
    fn summary(&self) -> String {
        let mut joined = String::new();
        for message in self.keys.values() {
            if joined.len() >= MAX_SUMMARY {
                break;
            }
            if !joined.is_empty() {
                joined.push('\n');
            }
            joined.push_str(message);
        }
        joined
    }

    /// The keys, in order.
    #[cfg(test)]
    pub(super) fn keys(&self) -> Vec<&str> {
        self.keys.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary is the messages in key order, one a line, whole ones only, cut once past
    /// its bound.
    #[test]
    fn summary_joins_whole_messages_in_key_order_up_to_its_bound() {
        let mut keys = ErrorKeys::default();
        assert_eq!(keys.summary(), "");
        keys.keys
            .insert("kubelet/pods.v1.core/ns/b".into(), "no space".into());
        keys.keys
            .insert("kubelet/pods.v1.core/ns/a".into(), "in the way".into());
        assert_eq!(keys.summary(), "in the way\nno space");

        let long = "x".repeat(MAX_MESSAGE);
        for i in 0..MAX_ERROR_KEYS {
            keys.keys
                .insert(format!("kubelet/pods.v1.core/many/{i:04}"), long.clone());
        }
        let summary = keys.summary();
        assert!(summary.len() >= MAX_SUMMARY, "{}", summary.len());
        assert!(
            summary.len() < MAX_SUMMARY + MAX_MESSAGE + 1,
            "{}",
            summary.len()
        );
        assert!(
            summary
                .split('\n')
                .all(|m| m == long || m == "in the way" || m == "no space")
        );
    }
}
