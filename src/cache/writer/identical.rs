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
//! What the whole path would do besides is done here too: the bound admits the object (or
//! not: then nothing more, as there), the kind hears the cloud's word, the counters. Any
//! doubt goes the whole way: gzip, another status, a name the request did not give, a body
//! that is not one object between whitespace, keys whose write failed earlier (their
//! bookkeeping needs the key), an index that does not know the object or knows other bytes.
//! A changed object is therefore never skipped: its bytes hash otherwise.

use super::evict::Write;
use super::run::{Writer, note};
use crate::cache::synced::Word;
use crate::cache::target::CacheTarget;
use crate::metrics::{METRICS, Metrics};

/// Handles a whole answer that is an object stored exactly so already; `false` (nothing
/// done) when it is not, or not provably: the whole path then takes it.
pub(super) fn handled(
    w: &mut Writer<'_, '_>,
    target: &CacheTarget,
    status: u16,
    gzip: bool,
    word: &Word,
    body: &[u8],
) -> bool {
    let CacheTarget::Object {
        collection,
        namespace,
        name: Some(name),
    } = target
    else {
        return false;
    };
    if gzip || !matches!(status, 200 | 201) || !w.failures.error_keys.is_empty() {
        return false;
    }
    let Some(object) = one_object(body) else {
        return false;
    };
    if !w
        .store
        .holds_exactly(collection, namespace.as_deref(), name, object)
    {
        return false;
    }
    if let Some(bound) = w.bound.as_mut()
        && !bound.admit_unit(
            w.store,
            w.synced,
            Write::Object(collection),
            object.len() as u64,
            Some(object),
        )
    {
        // Not cached, as the whole path would have it.
        return true;
    }
    Metrics::inc(&METRICS.cache_writes_skipped_identical);
    Metrics::inc(&METRICS.cache_sessions_committed);
    note(w.synced, collection, word, &mut None);
    true
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
    use super::super::error_keys::ErrorKeys;
    use super::super::failures::FailureLog;
    use super::super::unchanged::Memos;
    use super::*;
    use crate::cache::key::{CollectionKey, ObjectKey};
    use crate::cache::store::Store;
    use crate::cache::synced::Synced;
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

    /// Whether the writer over `store` takes `body`, answered to `target`, as stored already;
    /// `synced` hears what it notes.
    fn taken(store: &Store, synced: &Synced, target: &CacheTarget, gzip: bool, body: &str) -> bool {
        let mut failures = FailureLog::new(ErrorKeys::load(store));
        let mut w = Writer {
            store,
            failures: &mut failures,
            synced,
            bound: None,
            memos: Memos::default(),
        };
        handled(&mut w, target, 200, gzip, &Word::Cloud, body.as_bytes())
    }

    #[test]
    fn only_the_bytes_stored_under_the_asked_name_are_taken_as_stored() {
        let dir = TempDir::new("identical");
        let (store, _) = Store::open(&dir.root()).unwrap();
        let synced = Synced::default();
        assert!(
            !taken(&store, &synced, &get("a"), false, OBJECT),
            "nothing stored yet: the whole path stores it"
        );
        let key = ObjectKey {
            collection: configmaps(),
            namespace: Some("ns".into()),
            name: "a".into(),
        };
        store.put(&key, OBJECT.as_bytes(), Some("5")).unwrap();
        assert!(synced.last(&configmaps()).is_none());
        // As the cloud sends it, with a line end: the same object.
        assert!(taken(
            &store,
            &synced,
            &get("a"),
            false,
            &format!("{OBJECT}\n")
        ));
        assert!(
            synced.last(&configmaps()).is_some(),
            "the kind heard the cloud's word"
        );
        // A change the resourceVersion does not tell is a change all the same.
        let changed = OBJECT.replace(r#""k":"v""#, r#""k":"w""#);
        assert!(!taken(&store, &synced, &get("a"), false, &changed));
        let newer = OBJECT.replace(r#""resourceVersion":"5""#, r#""resourceVersion":"6""#);
        assert!(!taken(&store, &synced, &get("a"), false, &newer));
        // The same bytes asked under another name, or gzip, go the whole way.
        assert!(!taken(&store, &synced, &get("b"), false, OBJECT));
        assert!(!taken(&store, &synced, &get("a"), true, OBJECT));
        assert!(!taken(
            &store,
            &synced,
            &get("a"),
            false,
            &format!("{OBJECT} x")
        ));
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
