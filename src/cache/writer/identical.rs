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

use std::sync::{Arc, Mutex, PoisonError};

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
    let (collection, namespace, name, object) = object_answer(target, (status, gzip), body)?;
    store
        .holds_exactly(collection, namespace, name, object)
        .then_some((collection, object))
}

/// The collection, namespace, name and JSON object of a whole answer to a get that may be
/// stored already; `None` for any other (the whole path takes it).
fn object_answer<'a>(
    target: &'a CacheTarget,
    (status, gzip): (u16, bool),
    body: &'a [u8],
) -> Option<(&'a CollectionKey, Option<&'a str>, &'a str, &'a [u8])> {
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
    Some((collection, namespace.as_deref(), name, one_object(body)?))
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
///
/// A repeat of bytes proven lately under the same key skips the hashing ([`Proven`]), and
/// notes the kind's word once a second per object (the record keeps seconds).
pub(crate) struct Direct {
    store: Arc<Store>,
    synced: Arc<Synced>,
    /// The objects proven stored lately, with their bytes.
    proven: Mutex<Proven>,
}

/// The last few small objects proven stored, each with its key, its path and content
/// hashes and its bytes: a repeat of the same bytes under the same key is known to hash so
/// without hashing them again (comparisons, where SipHash's 64-bit rounds cost an armv7
/// router several instructions per byte). The proof stays the index's: it must still know
/// the object with that content hash. At most [`PROVEN`] objects of at most
/// [`PROVEN_BYTES`] each (what a node reads back again and again: its Node, its lease, a
/// few ConfigMaps).
#[derive(Default)]
struct Proven {
    objects: Vec<ProvenObject>,
    /// Where the next new one goes once full.
    next: usize,
}

/// One object of [`Proven`].
struct ProvenObject {
    collection: CollectionKey,
    namespace: Option<Box<str>>,
    name: Box<str>,
    /// Its path hash ([`Store::object_hash`]).
    at: u64,
    /// The hash of `bytes` ([`Store::content_hash`]).
    content: u64,
    bytes: Box<[u8]>,
    /// The Unix second its kind last heard the cloud's word through it: noted once a second.
    noted: u64,
}

/// Objects remembered at most.
const PROVEN: usize = 16;
/// The largest object remembered (16 of them: 64 KiB at most).
const PROVEN_BYTES: usize = 4 * 1024;

impl Proven {
    /// The object remembered as `name` in `namespace` of `collection` with exactly the
    /// bytes `object`.
    fn find(
        &mut self,
        (collection, namespace, name): (&CollectionKey, Option<&str>, &str),
        object: &[u8],
    ) -> Option<&mut ProvenObject> {
        self.objects.iter_mut().find(|p| {
            *p.name == *name
                && p.namespace.as_deref() == namespace
                && p.collection == *collection
                && *p.bytes == *object
        })
    }

    /// Whether the object at path hash `at` was noted at `now` already; it is from now on.
    fn noted(&mut self, at: u64, now: u64) -> bool {
        self.objects
            .iter_mut()
            .find(|p| p.at == at)
            .is_some_and(|p| std::mem::replace(&mut p.noted, now) == now)
    }

    /// Remembers `object`, of hashes `at` and `content`, in place of what was at `at`.
    fn remember(
        &mut self,
        (collection, namespace, name): (&CollectionKey, Option<&str>, &str),
        (at, content): (u64, u64),
        object: &[u8],
        noted: u64,
    ) {
        if object.len() > PROVEN_BYTES {
            return;
        }
        let entry = ProvenObject {
            collection: collection.clone(),
            namespace: namespace.map(Box::from),
            name: Box::from(name),
            at,
            content,
            bytes: Box::from(object),
            noted,
        };
        if let Some(slot) = self.objects.iter_mut().find(|p| p.at == at) {
            *slot = entry;
        } else if self.objects.len() < PROVEN {
            self.objects.push(entry);
        } else {
            self.objects[self.next] = entry;
            self.next = (self.next + 1) % PROVEN;
        }
    }
}

impl Direct {
    /// Proves answers against `store`, telling `synced` when their kinds heard the cloud.
    pub(crate) fn new(store: Arc<Store>, synced: Arc<Synced>) -> Direct {
        Direct {
            store,
            synced,
            proven: Mutex::default(),
        }
    }

    fn proven(&self) -> std::sync::MutexGuard<'_, Proven> {
        self.proven.lock().unwrap_or_else(PoisonError::into_inner)
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
        let Some((collection, namespace, name, object)) =
            object_answer(target, (status, gzip), body)
        else {
            return false;
        };
        let key = (collection, namespace, name);
        // Each lock apart: the index's is never waited for under the memo's.
        let remembered = self.proven().find(key, object).map(|p| (p.at, p.content));
        let (at, content) = remembered.unwrap_or_else(|| {
            let at = self.store.object_hash(collection, namespace, name);
            (at, self.store.content_hash(object))
        });
        if !self.store.holds_hashed(at, content) {
            return false;
        }
        let now = crate::unix_secs();
        let mut proven = self.proven();
        let noted = match remembered {
            Some(_) => proven.noted(at, now),
            None => {
                proven.remember(key, (at, content), object, now);
                false
            }
        };
        drop(proven);
        // Once a second per object: the record keeps seconds.
        count_stored_already(&self.synced, collection, (!noted).then_some(now));
        true
    }
}

/// What an answer stored already comes to, by the writer or a connection thread, besides the
/// bound's admission (the writer's alone): the counters say an identical write was skipped
/// and a session committed, and its kind heard the cloud's word at `heard` (`None`: not
/// noted this time).
pub(super) fn count_stored_already(
    synced: &Synced,
    collection: &CollectionKey,
    heard: Option<u64>,
) {
    Metrics::inc(&METRICS.cache_writes_skipped_identical);
    Metrics::inc(&METRICS.cache_sessions_committed);
    if let Some(at) = heard {
        synced.note(collection, at);
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

    /// A remembered object answers only for its very bytes at its own path, and a full memo
    /// makes room in turn, never past its bound.
    #[test]
    fn the_proven_memo_answers_only_for_the_very_bytes_and_stays_bounded() {
        let mut proven = Proven::default();
        let c = configmaps();
        let key = |name| (&c, Some("ns"), name);
        let found = |proven: &mut Proven, name, bytes: &[u8]| {
            proven.find(key(name), bytes).map(|p| p.content)
        };
        proven.remember(key("a"), (1, 11), b"{\"a\":1}", 0);
        assert_eq!(found(&mut proven, "a", b"{\"a\":1}"), Some(11));
        assert_eq!(found(&mut proven, "a", b"{\"a\":2}"), None, "other bytes");
        assert_eq!(found(&mut proven, "b", b"{\"a\":1}"), None, "another name");
        assert!(
            proven.find((&c, None, "a"), b"{\"a\":1}").is_none(),
            "another namespace"
        );
        let other = CollectionKey::new("kubelet", "secrets", "v1", "");
        assert!(
            proven
                .find((&other, Some("ns"), "a"), b"{\"a\":1}")
                .is_none()
        );
        proven.remember(key("a"), (1, 12), b"{\"a\":2}", 0);
        assert_eq!(found(&mut proven, "a", b"{\"a\":1}"), None, "replaced");
        assert_eq!(found(&mut proven, "a", b"{\"a\":2}"), Some(12));
        let large = vec![b' '; PROVEN_BYTES + 1];
        proven.remember(key("c"), (3, 13), &large, 0);
        assert_eq!(found(&mut proven, "c", &large), None, "too large");
        let names: Vec<String> = (0..2 * PROVEN).map(|n| format!("n{n}")).collect();
        for (at, name) in names.iter().enumerate() {
            proven.remember(key(name), (100 + at as u64, 7), b"{}", 0);
        }
        assert_eq!(proven.objects.len(), PROVEN);
        assert_eq!(found(&mut proven, names.last().unwrap(), b"{}"), Some(7));
        assert_eq!(found(&mut proven, &names[0], b"{}"), None, "pushed out");
    }

    /// Through the memo as without it: a repeat of the stored bytes is taken, a change never.
    #[test]
    fn a_direct_proof_takes_repeats_of_the_stored_bytes_and_never_a_change() {
        let dir = TempDir::new("identical-direct");
        let store = Arc::new(Store::open(&dir.root()).unwrap().0);
        let direct = Direct::new(Arc::clone(&store), Arc::new(Synced::default()));
        let took = |body: &str| direct.took(&get("a"), (200, false), body.as_bytes());
        assert!(!took(OBJECT), "nothing stored yet");
        let key = ObjectKey {
            collection: configmaps(),
            namespace: Some("ns".into()),
            name: "a".into(),
        };
        store.put(&key, OBJECT.as_bytes(), Some("5")).unwrap();
        for _ in 0..3 {
            assert!(took(OBJECT));
        }
        let changed = OBJECT.replace(r#""k":"v""#, r#""k":"w""#);
        assert!(!took(&changed));
        // Stored since (by the writer): the remembered bytes no longer prove anything.
        store.put(&key, changed.as_bytes(), Some("5")).unwrap();
        assert!(!took(OBJECT));
        assert!(took(&changed));
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
