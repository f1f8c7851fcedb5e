//! Gets answered as stored (issue 34): a small get's answer handed over whole, whose bytes
//! the store's index knows as the very file stored under the name the request asked for,
//! needs no decoding: a put of it would answer `Identical` and write nothing. Repeated gets
//! of an object that did not change (kubelet's configmaps, secrets, its Node, leases read
//! back) are most of what the writer sees; this skips the decoder, the object's head and
//! key, and the session's buffers for them.
//!
//! Sound because the file under a name was put there from bytes whose own `metadata` named
//! it (every write keys an object by what it says), and was a JSON object then: the same
//! bytes, decoded, would be keyed to the same file, be found identical and store nothing.
//! What the whole path would do besides the writer does for it too (`run.rs`, `stored_again`):
//! the bound admits the object (or not: then nothing more, as there), the kind hears the
//! cloud's word, the counters. Any
//! doubt goes the whole way: gzip, another status, a name the request did not give, a body
//! that is not one object between whitespace, keys whose write failed earlier (their
//! bookkeeping needs the key), an index that does not know the object or knows other bytes.
//! A changed object is therefore never skipped: its bytes hash otherwise.

use std::sync::Arc;

use super::error_keys::ErrorKeys;
use crate::cache::key::CollectionKey;
use crate::cache::store::Store;
use crate::cache::synced::Synced;
use crate::cache::target::CacheTarget;
use crate::metrics::{METRICS, Metrics};

/// The collection and the object of a whole answer of `status` to `target` when `store`
/// holds exactly it under the name asked for; `None` when it does not, or not provably (the
/// whole path then takes it). `error_keys`: the keys whose write failed, which only the
/// whole path clears.
pub(super) fn stored_already<'a>(
    store: &Store,
    error_keys: &ErrorKeys,
    target: &'a CacheTarget,
    (status, gzip): (u16, bool),
    body: &'a [u8],
) -> Option<(&'a CollectionKey, &'a [u8])> {
    if !error_keys.is_empty() {
        return None;
    }
    held_exactly(store, target, (status, gzip), body)
}

/// [`stored_already`] but for the failed keys, which its caller judged.
fn held_exactly<'a>(
    store: &Store,
    target: &'a CacheTarget,
    (status, gzip): (u16, bool),
    body: &'a [u8],
) -> Option<(&'a CollectionKey, &'a [u8])> {
    let CacheTarget::Object {
        collection,
        namespace,
        name: Some(name),
    } = target
    else {
        return None;
    };
    if gzip || !matches!(status, 200 | 201) {
        return None;
    }
    let object = one_object(body)?;
    store
        .holds_exactly(collection, namespace.as_deref(), name, object)
        .then_some((collection, object))
}

/// The connection thread's side of [`stored_already`] (issue 34): a small get's answer the
/// store holds exactly so is not handed to the writer at all. No session, no message, no
/// wake-up of the writer: of all the writer would do with it (`run.rs`, `stored_again`)
/// only the counters and the kind hearing the cloud's word remain, done here. Nothing is
/// written: the writer stays the only code that writes the cache.
///
/// Taken only while the writer says it may be ([`Direct::allow`]): no failed keys (their
/// bookkeeping needs the whole path) and no bound (whose admission is the writer's). Messages
/// still queued may change the object before the writer reaches them; the answer then counts
/// as heard before them, as an answer relayed a moment earlier would have: it is the cloud's
/// own, and it was proven identical to what the store held when it was relayed.
pub(crate) struct Direct {
    store: Arc<Store>,
    synced: Arc<Synced>,
}

impl Direct {
    /// Proves answers against `store`, telling `synced` when their kinds heard the cloud.
    pub(crate) fn new(store: Arc<Store>, synced: Arc<Synced>) -> Direct {
        Direct { store, synced }
    }

    /// Whether the writer lets connection threads take answers stored already themselves:
    /// with no failed keys and no bound.
    pub(super) fn allow(error_keys: &ErrorKeys, bounded: bool) -> bool {
        error_keys.is_empty() && !bounded
    }

    /// Whether the whole answer `body` of `status` to `target` is stored exactly so already,
    /// and was accounted for (the counters, the cloud's word on its kind as of now): then it
    /// needs no cache session.
    pub(super) fn took(
        &self,
        target: &CacheTarget,
        (status, gzip): (u16, bool),
        body: &[u8],
    ) -> bool {
        let Some((collection, _)) = held_exactly(&self.store, target, (status, gzip), body) else {
            return false;
        };
        Metrics::inc(&METRICS.cache_writes_skipped_identical);
        Metrics::inc(&METRICS.cache_sessions_committed);
        self.synced.note(collection, crate::unix_secs());
        true
    }
}

/// The body's one JSON object, as the decoder hands it on (from its `{` to its `}`), when it
/// is nothing else but JSON whitespace around one; `None`: the decoder must judge it. (The
/// object's inside is not checked here: bytes the index knows as stored were checked when
/// they were stored.)
fn one_object(body: &[u8]) -> Option<&[u8]> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = body.iter().position(|b| !ws(b))?;
    let end = body.iter().rposition(|b| !ws(b))?;
    let object = &body[start..=end];
    (object.len() >= 2 && object[0] == b'{' && object[object.len() - 1] == b'}').then_some(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::key::ObjectKey;
    use crate::cache::temp_dir::TempDir;

    const OBJECT: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"data":{"k":"v"}}"#;

    fn configmaps() -> CollectionKey {
        CollectionKey::new("kubelet", "configmaps", "v1", "")
    }

    fn get(name: &str) -> CacheTarget {
        CacheTarget::Object {
            collection: configmaps(),
            namespace: Some("ns".into()),
            name: Some(name.into()),
        }
    }

    /// Whether `body`, answered 200 to `target`, is taken as stored already in `store`.
    fn taken(store: &Store, target: &CacheTarget, gzip: bool, body: &str) -> bool {
        let error_keys = ErrorKeys::load(store);
        stored_already(store, &error_keys, target, (200, gzip), body.as_bytes()).is_some()
    }

    #[test]
    fn only_the_bytes_stored_under_the_asked_name_are_taken_as_stored() {
        let dir = TempDir::new("identical");
        let (store, _) = Store::open(&dir.root()).unwrap();
        assert!(
            !taken(&store, &get("a"), false, OBJECT),
            "nothing stored yet: the whole path stores it"
        );
        let key = ObjectKey {
            collection: configmaps(),
            namespace: Some("ns".into()),
            name: "a".into(),
        };
        store.put(&key, OBJECT.as_bytes(), Some("5")).unwrap();
        // As the cloud sends it, with a line end: the same object.
        assert!(taken(&store, &get("a"), false, &format!("{OBJECT}\n")));
        // A change the resourceVersion does not tell is a change all the same.
        let changed = OBJECT.replace(r#""k":"v""#, r#""k":"w""#);
        assert!(!taken(&store, &get("a"), false, &changed));
        let newer = OBJECT.replace(r#""resourceVersion":"5""#, r#""resourceVersion":"6""#);
        assert!(!taken(&store, &get("a"), false, &newer));
        // The same bytes asked under another name, or gzip, go the whole way.
        assert!(!taken(&store, &get("b"), false, OBJECT));
        assert!(!taken(&store, &get("a"), true, OBJECT));
        assert!(!taken(&store, &get("a"), false, &format!("{OBJECT} x")));
    }

    #[test]
    fn one_object_is_the_body_without_its_surrounding_whitespace() {
        assert_eq!(one_object(b" {\"a\":1}\n"), Some(&b"{\"a\":1}"[..]));
        assert_eq!(one_object(b"{}"), Some(&b"{}"[..]));
        assert_eq!(one_object(b"[1]"), None);
        assert_eq!(one_object(b"{} x"), None);
        assert_eq!(one_object(b"\xef\xbb\xbf{}"), None);
        assert_eq!(one_object(b" \n"), None);
        assert_eq!(one_object(b"}"), None);
    }
}
