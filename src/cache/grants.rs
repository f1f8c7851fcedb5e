//! Read grants: what each client credential was seen to read from the cloud while it was
//! reachable, so that the cache answers a credential offline only with that (issue 28).
//!
//! A grant is (holder, scope, expiry). The holder is a keyed hash (HMAC-SHA256) of the
//! credential's SHA-256 (`requester::Credential::Authorization`): neither the credential
//! nor its plain digest is ever kept, so the grants file cannot be used to guess a token
//! offline without its key. The scope is what the cloud answered 200 to: one object
//! (group, resource, namespace, name) or a list scope (group, resource, a namespace or all,
//! the label and field selector texts as sent). The expiry is the token's own `exp` claim
//! when it is a JWT (read without verifying: the cloud verified it when it answered), else
//! [`DEFAULT_LIFETIME`] after the cloud last accepted it; an expired grant answers nothing
//! and is forgotten at the next write.
//!
//! Coverage: a grant for a list scope without selectors covers any selectors (selectors
//! only narrow a list) and, for all namespaces, every namespace; a list scope with
//! selectors covers the same selectors, and an object only when the object matches them
//! (the caller reads it and asks [`ObjectCover::Selected`]).
//!
//! Persistence: the grants and the HMAC key live in one file beside the cache, `.grants`
//! (`store/grants.rs`), so that a restart offline still answers the pods that read with
//! their own tokens. The key is made at random when there is no readable file, and written
//! with the first grant. Only the writer thread writes it: a change marks the grants
//! unsaved and the connection thread that made it sends one `CacheMsg::Grants` (at most
//! one is queued at a time); the writer snapshots and writes the whole file (bounded by
//! [`MAX_GRANTS`] grants of at most [`MAX_SCOPE_TEXT`] bytes of selectors each).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use base64::engine::general_purpose::STANDARD;
use ring::{hmac, rand};
use serde::{Deserialize, Serialize};

use crate::unix_now;

use super::store::Store;

/// Most grants kept: past it the expired ones go, then the one seen longest ago.
pub(crate) const MAX_GRANTS: usize = 2048;

/// Most grants one credential keeps: past it its own least recently seen goes, so a client
/// listing with ever new selectors cannot push out every other credential's grants.
pub(crate) const MAX_GRANTS_PER_CREDENTIAL: usize = 256;

/// Longest selector text (label and field together) a list grant keeps; a list with longer
/// selectors is not remembered (no client of the cache sends such a list twice).
pub(crate) const MAX_SCOPE_TEXT: usize = 1024;

/// How long a grant of a credential without an `exp` of its own (not a JWT: a static token,
/// basic credentials) lasts after the cloud last accepted it: a week offline.
pub(crate) const DEFAULT_LIFETIME: i64 = 7 * 24 * 3600;

/// A grant whose expiry only moves later by less than this is not written again (a
/// credential without `exp` moves it at each request).
const REWRITE_AFTER: i64 = 3600;

/// What the cloud let a credential read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Scope {
    /// API group ("" for core).
    pub group: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace; `None`: cluster-scoped, or a list across all namespaces.
    pub namespace: Option<String>,
    /// One object, or a list scope.
    pub reach: Reach,
}

/// One object, or a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Reach {
    /// The object of this name.
    Object(String),
    /// A list (or watch) with these selector texts ("" for none).
    List {
        /// `labelSelector` as sent.
        label: String,
        /// `fieldSelector` as sent.
        field: String,
    },
}

impl Scope {
    /// The scope of a list or watch; selectors as sent (trimmed, `None` as "").
    pub(crate) fn list(
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        label: Option<&str>,
        field: Option<&str>,
    ) -> Scope {
        let text = |s: Option<&str>| s.map(str::trim).unwrap_or("").to_owned();
        Scope {
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            reach: Reach::List {
                label: text(label),
                field: text(field),
            },
        }
    }

    /// The scope of one object.
    pub(crate) fn object(
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Scope {
        Scope {
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            reach: Reach::Object(name.to_owned()),
        }
    }

    /// Selector bytes this scope keeps.
    fn text_len(&self) -> usize {
        match &self.reach {
            Reach::Object(_) => 0,
            Reach::List { label, field } => label.len() + field.len(),
        }
    }

    /// A list grant of `self` covers the list `wanted`: same resource, all namespaces or
    /// the same one, no selectors or the same ones.
    fn covers_list(&self, wanted: &Scope) -> bool {
        let (Reach::List { label, field }, Reach::List { label: l, field: f }) =
            (&self.reach, &wanted.reach)
        else {
            return false;
        };
        self.same_resource(wanted)
            && (self.namespace.is_none() || self.namespace == wanted.namespace)
            && ((label.is_empty() && field.is_empty()) || (label == l && field == f))
    }

    fn same_resource(&self, other: &Scope) -> bool {
        self.group == other.group && self.resource == other.resource
    }
}

/// How far a credential's grants cover one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ObjectCover {
    /// The object, or a list without selectors that holds it.
    Whole,
    /// Only lists with selectors: the object is covered if it matches one of these
    /// (label, field) selector texts.
    Selected(Vec<(String, String)>),
    /// Nothing.
    Nothing,
}

/// One remembered grant.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Grant {
    /// HMAC-SHA256 of the credential's digest under the grants' key, base64 on disk.
    #[serde(with = "b64")]
    holder: [u8; 32],
    scope: Scope,
    /// Unix seconds.
    expires: i64,
    /// When the cloud last accepted it (Unix seconds): the oldest goes first at the cap.
    seen: i64,
}

/// The file's form.
#[derive(Serialize, Deserialize)]
struct File {
    #[serde(with = "b64")]
    key: [u8; 32],
    grants: Vec<Grant>,
}

/// The grants of every client credential; shared by the request threads (which record and
/// check) and the writer (which persists).
pub(crate) struct Grants {
    /// `None` when no random key could be made: nothing is recorded, no credential of its
    /// own is answered offline.
    key: Option<([u8; 32], hmac::Key)>,
    grants: Mutex<Vec<Grant>>,
    /// Memory holds a change the file does not.
    unsaved: AtomicBool,
    /// A `CacheMsg::Grants` is queued.
    queued: AtomicBool,
}

impl Grants {
    /// The grants the store kept from an earlier run, with their key; a new random key and
    /// none when there is no readable file (every credential then reads from the cloud
    /// again before the cache answers it).
    pub(crate) fn load(store: &Store) -> Grants {
        let now = unix_now();
        let file = match store.grants() {
            Ok(Some(bytes)) => match serde_json::from_slice::<File>(&bytes) {
                Ok(file) => Some(file),
                Err(e) => {
                    log::warn!("cache: the read grants are unreadable ({e}); starting anew");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                log::warn!("cache: cannot read the read grants ({e}); starting anew");
                None
            }
        };
        match file {
            Some(file) => {
                let grants = Grants::with_key(file.key);
                let mut kept = file.grants;
                kept.retain(|g| g.expires > now);
                kept.sort_by_key(|g| std::cmp::Reverse(g.seen));
                kept.truncate(MAX_GRANTS);
                *grants.lock() = kept;
                grants
            }
            None => {
                let key = rand::generate::<[u8; 32]>(&rand::SystemRandom::new())
                    .map(|k| k.expose())
                    .ok();
                match key {
                    Some(key) => Grants::with_key(key),
                    None => {
                        log::error!(
                            "cache: no random key for the read grants; clients with their own \
                             credentials get nothing from the cache offline"
                        );
                        Grants {
                            key: None,
                            grants: Mutex::new(Vec::new()),
                            unsaved: AtomicBool::new(false),
                            queued: AtomicBool::new(false),
                        }
                    }
                }
            }
        }
    }

    /// Empty grants under `key`.
    pub(crate) fn with_key(key: [u8; 32]) -> Grants {
        Grants {
            key: Some((key, hmac::Key::new(hmac::HMAC_SHA256, &key))),
            grants: Mutex::new(Vec::new()),
            unsaved: AtomicBool::new(false),
            queued: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Grant>> {
        // A poisoned lock still holds whole grants: each change is one push or assignment.
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn holder(&self, digest: &[u8; 32]) -> Option<[u8; 32]> {
        let (_, key) = self.key.as_ref()?;
        let tag = hmac::sign(key, digest);
        let mut out = [0; 32];
        out.copy_from_slice(tag.as_ref()); // HMAC-SHA256 tags are 32 bytes
        Some(out)
    }

    /// The cloud answered 200 to the credential of `digest` reading `scope`: remember it
    /// until `expires` (Unix seconds). Nothing is kept past its expiry, nor a list whose
    /// selectors are longer than [`MAX_SCOPE_TEXT`].
    pub(crate) fn record(&self, digest: &[u8; 32], scope: Scope, expires: i64, now: i64) {
        if expires <= now || scope.text_len() > MAX_SCOPE_TEXT {
            return;
        }
        let Some(holder) = self.holder(digest) else {
            return;
        };
        let mut grants = self.lock();
        if let Some(g) = grants
            .iter_mut()
            .find(|g| g.holder == holder && g.scope == scope)
        {
            g.seen = now;
            // A JWT's grant keeps its `exp`; one without moves later at each request.
            if expires > g.expires + REWRITE_AFTER || expires < g.expires {
                g.expires = expires;
                self.unsaved.store(true, Ordering::SeqCst);
            }
            return;
        }
        if grants.len() >= MAX_GRANTS {
            grants.retain(|g| g.expires > now);
        }
        // The least recently seen goes: this credential's own once it holds its most, else
        // anyone's.
        let own = grants.iter().filter(|g| g.holder == holder).count();
        let full = own >= MAX_GRANTS_PER_CREDENTIAL || grants.len() >= MAX_GRANTS;
        if full
            && let Some(oldest) = grants
                .iter()
                .enumerate()
                .filter(|(_, g)| own < MAX_GRANTS_PER_CREDENTIAL || g.holder == holder)
                .min_by_key(|(_, g)| g.seen)
                .map(|(i, _)| i)
        {
            grants.swap_remove(oldest);
        }
        grants.push(Grant {
            holder,
            scope,
            expires,
            seen: now,
        });
        self.unsaved.store(true, Ordering::SeqCst);
    }

    /// The credential of `digest` read a list scope covering `wanted` (a list scope), and
    /// that grant has not expired.
    pub(crate) fn allows_list(&self, digest: &[u8; 32], wanted: &Scope, now: i64) -> bool {
        let Some(holder) = self.holder(digest) else {
            return false;
        };
        self.lock()
            .iter()
            .any(|g| g.holder == holder && g.expires > now && g.scope.covers_list(wanted))
    }

    /// How far the credential of `digest` is allowed the object `wanted` (an object
    /// scope): its own grant or a list without selectors holding it, else the selectors
    /// of the lists that may hold it.
    pub(crate) fn object_cover(&self, digest: &[u8; 32], wanted: &Scope, now: i64) -> ObjectCover {
        let Some(holder) = self.holder(digest) else {
            return ObjectCover::Nothing;
        };
        let mut selected = Vec::new();
        for g in self.lock().iter() {
            if g.holder != holder || g.expires <= now || !g.scope.same_resource(wanted) {
                continue;
            }
            match &g.scope.reach {
                Reach::Object(_) if g.scope == *wanted => return ObjectCover::Whole,
                Reach::Object(_) => {}
                Reach::List { label, field }
                    if g.scope.namespace.is_none() || g.scope.namespace == wanted.namespace =>
                {
                    if label.is_empty() && field.is_empty() {
                        return ObjectCover::Whole;
                    }
                    selected.push((label.clone(), field.clone()));
                }
                Reach::List { .. } => {}
            }
        }
        if selected.is_empty() {
            ObjectCover::Nothing
        } else {
            ObjectCover::Selected(selected)
        }
    }

    /// After a change: true when the caller should queue a `CacheMsg::Grants` (memory holds
    /// what the file does not, and none is queued). A caller that then cannot queue it
    /// calls [`Grants::not_queued`].
    pub(crate) fn take_persist_turn(&self) -> bool {
        self.unsaved.load(Ordering::SeqCst) && !self.queued.swap(true, Ordering::SeqCst)
    }

    /// The `CacheMsg::Grants` could not be queued: the next change tries again.
    pub(crate) fn not_queued(&self) {
        self.queued.store(false, Ordering::SeqCst);
    }

    /// Writes the grants to the store (the writer thread), forgetting the expired ones.
    pub(crate) fn persist(&self, store: &Store) {
        // Cleared before the snapshot: a change made after it marks them unsaved again and
        // finds nothing queued, so it is sent.
        self.queued.store(false, Ordering::SeqCst);
        self.unsaved.store(false, Ordering::SeqCst);
        let Some((key, _)) = &self.key else {
            return;
        };
        // Serialised after the lock is let go: token requests wait on it.
        let grants = {
            let mut grants = self.lock();
            let now = unix_now();
            grants.retain(|g| g.expires > now);
            grants.clone()
        };
        let bytes = serde_json::to_vec(&File { key: *key, grants });
        let result = match bytes {
            Ok(bytes) => store.put_grants(&bytes).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            self.unsaved.store(true, Ordering::SeqCst);
            log::warn!(
                "cache: storing the read grants failed: {e} (kept in memory; a restart \
                 forgets what was not stored)"
            );
        }
    }

    /// How many grants are held (tests, debugging).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// When the grant of a request's `Authorization` value ends: the bearer token's own `exp`
/// when it is a JWT, else [`DEFAULT_LIFETIME`] from `now`.
pub(crate) fn expiry_of(authorization: &str, now: i64) -> i64 {
    let value = authorization.trim();
    let token = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    token
        .and_then(crate::tokens::jwt_exp)
        .unwrap_or(now + DEFAULT_LIFETIME)
}

/// 32 bytes as standard base64 in the file.
mod b64 {
    use super::STANDARD;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        let bytes = STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)?;
        <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| serde::de::Error::custom("not 32 bytes"))
    }
}

#[cfg(test)]
mod tests;
