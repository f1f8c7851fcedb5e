//! One list per scope (issue 29, item 3): when the cloud's history is gone, every client
//! watch of one scope needs the same list, and a node that just came back must not send it
//! once per watch.
//!
//! A round per [`ScopeKey`] (who asks and what): the first watch to [`ListRounds::join`]
//! leads it, waits out the gather window ([`GATHER`]) so that the watches of the scope whose
//! resumes met their 410 at about the same moment join as followers, then lists once and
//! hands each item to its own difference and to every follower over a bounded channel. A
//! follower that does not keep up is dropped (its watch ends cleanly); a round whose list
//! began is closed, and a later join opens a new one. The gather works because every watch
//! of a scope broke at the same moment, waited for the same usable cloud and slept the same
//! per-scope jitter (design §5.3): their 410s come within milliseconds of each other.
//!
//! Also here: the list itself ([`list_scope`]), cut one item at a time by the cache's own
//! decoder, so a 20,000-object list is never held whole; each item gets the `kind` and
//! `apiVersion` the apiserver leaves out of list items (a client decodes a watch event's
//! object by them).
//!
//! What it does not do: compare anything with the cache (`diff.rs`), or decide when a round
//! is needed (the resumable watch's loop, `mod.rs`).

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::cache::decode::{BodyDecoder, BodyShape, Located, Path, Unit};
use crate::cache::object::located_str;
use crate::cache::writer::MAX_OBJECT_BYTES;
use crate::route::{Deadline, Identity};
use crate::upstream::{Cloud, Outgoing};

/// How long a round's leader waits for the other watches of its scope before it lists.
pub(crate) const GATHER: Duration = Duration::from_secs(1);
/// Items a follower's channel holds before the leader waits on it.
pub(super) const FOLLOWER_QUEUE: usize = 64;
/// How long the leader waits on one follower's full channel before it drops that follower.
const FOLLOWER_WAIT: Duration = Duration::from_secs(10);
/// The list's deadline, end to end: a consistent read of a big scope over a slow uplink.
const LIST_DEADLINE: Duration = Duration::from_secs(300);

/// Lists a scope, handing each item to its argument (false: stop); the list's end, or why
/// there is none.
pub(super) type Lister<'l> =
    dyn FnMut(&mut dyn FnMut(ListedItem) -> bool) -> Result<ListEnd, RoundFailure> + 'l;

/// The scope of a list: who asks (the hub's identity, or a client credential's digest —
/// never shared across credentials) and what (the collection path with its namespace, the
/// selectors as sent).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ScopeKey {
    /// `None`: the hub's identity; else a digest of the client's credential.
    pub identity: Option<[u8; 8]>,
    /// The collection path: `/api/v1/namespaces/ns/pods`, `/api/v1/pods`.
    pub path: String,
    /// `labelSelector` as sent.
    pub label_selector: String,
    /// `fieldSelector` as sent.
    pub field_selector: String,
    /// The list's `Accept` ([`route::rebuild_list_accept`](crate::route::rebuild_list_accept)):
    /// a metadata-only watch and a full one of the same scope list apart.
    pub accept: &'static str,
}

/// One listed object, shared by every client watch of the round.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ListedItem {
    /// Its namespace; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its resourceVersion, as listed.
    pub rv: String,
    /// The item with kind and apiVersion set (the apiserver leaves them out of list items).
    pub object: Box<[u8]>,
}

/// The end of a whole list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListEnd {
    /// The list's resourceVersion.
    pub rv: String,
    /// The kind of its items (`Pod` of a `PodList`), for the bookmark at `rv`.
    pub kind: String,
    /// Their apiVersion.
    pub api_version: String,
}

/// What a round hands each of its watches, in order: items, then the end or the failure.
#[derive(Debug)]
pub(crate) enum Listed {
    /// One object of the list.
    Item(Arc<ListedItem>),
    /// The list was read whole.
    End(ListEnd),
    /// The round could not list.
    Failed(RoundFailure),
}

/// Why a round came to no list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RoundFailure {
    /// The cloud failed (transport, 5xx, 429, a body cut or not a list): the watch backs off
    /// and resumes again, which costs one request (a 410 again leads to a new round).
    Cloud(String),
    /// The cloud refused the list, or the list cannot be made into events: the watch ends
    /// cleanly, as it did before watches were resumed.
    Unusable(String),
}

impl fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoundFailure::Cloud(why) | RoundFailure::Unusable(why) => f.write_str(why),
        }
    }
}

/// The list request of a round: the scope's collection path and selectors, no
/// resourceVersion (a consistent read), on the watch's own headers and identity.
pub(crate) struct ListRequest<'a> {
    /// Path and query ([`super::leg::list_target`]'s).
    pub target: &'a str,
    /// The client's headers for later legs (User-Agent, Authorization; no Accept-Encoding).
    pub headers: &'a [(String, String)],
    /// Whose credentials.
    pub identity: Identity,
    /// The list's `Accept`: the form its watches' answers are cached in.
    pub accept: &'static str,
    /// The kind and apiVersion of the watch's objects when known (the last delivered): used
    /// only if an item comes before the list says its own.
    pub kind_hint: Option<(&'a str, &'a str)>,
    /// The leading client's deadline: the list's own is cut to it (the list is of no use to
    /// that client after it, and its followers retry).
    pub deadline: Option<Instant>,
    /// Why the leader must not list any more (the hub stopping, its client's time up):
    /// looked at once the gather window has passed.
    pub over: &'a dyn Fn() -> Option<&'static str>,
}

/// The rounds under way, one per scope.
#[derive(Debug)]
pub(crate) struct ListRounds {
    open: Mutex<HashMap<ScopeKey, Arc<Round>>>,
    gather: Duration,
    /// [`FOLLOWER_WAIT`] (shorter in tests).
    follower_wait: Duration,
}

/// One round still gathering: its followers' channels; `None` once its list began.
#[derive(Debug, Default)]
struct Round {
    followers: Mutex<Option<Vec<Sender<Listed>>>>,
}

/// How a watch takes part in a round.
pub(crate) enum Joined<'r> {
    /// It lists for the round.
    Lead(Leader<'r>),
    /// It receives the leader's list.
    Follow(Receiver<Listed>),
}

/// The watch that lists for its round.
#[derive(Debug)]
pub(crate) struct Leader<'r> {
    rounds: &'r ListRounds,
    key: ScopeKey,
    round: Arc<Round>,
}

impl Default for ListRounds {
    fn default() -> Self {
        ListRounds::new(GATHER)
    }
}

impl ListRounds {
    /// No rounds yet; each leader waits `gather` for followers ([`GATHER`] in production).
    pub(crate) fn new(gather: Duration) -> ListRounds {
        ListRounds {
            open: Mutex::new(HashMap::new()),
            gather,
            follower_wait: FOLLOWER_WAIT,
        }
    }

    /// Joins the round of `key` that is still gathering, or opens one and leads it.
    pub(crate) fn join(&self, key: ScopeKey) -> Joined<'_> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(round) = open.get(&key) {
            let mut followers = round
                .followers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(followers) = followers.as_mut() {
                let (tx, rx) = bounded(FOLLOWER_QUEUE);
                followers.push(tx);
                return Joined::Follow(rx);
            }
        }
        let round = Arc::new(Round {
            followers: Mutex::new(Some(Vec::new())),
        });
        open.insert(key.clone(), Arc::clone(&round));
        Joined::Lead(Leader {
            rounds: self,
            key,
            round,
        })
    }

    /// How long a leader waits on a follower's full channel (tests: shorter).
    #[cfg(test)]
    pub(super) fn set_follower_wait(&mut self, wait: Duration) {
        self.follower_wait = wait;
    }

    /// The followers of `key`'s round still gathering.
    #[cfg(test)]
    pub(super) fn followers(&self, key: &ScopeKey) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(key).map_or(0, |round| {
            let followers = round
                .followers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            followers.as_ref().map_or(0, Vec::len)
        })
    }

    /// Waits until `key`'s round has `n` followers; fails the test after 10 s.
    #[cfg(test)]
    pub(super) fn wait_for_followers(&self, key: &ScopeKey, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.followers(key) < n {
            assert!(
                Instant::now() < deadline,
                "{n} followers never joined the round"
            );
            std::thread::yield_now();
        }
    }
}

impl Leader<'_> {
    /// Waits out the gather window, closes the round to newcomers, lists once through
    /// `cloud` and hands each item, then the end or the failure, to `each` and to every
    /// follower. `each` returning false (the leader's own client left) stops only the
    /// leader's share: the list goes on while followers remain.
    pub(crate) fn list(
        self,
        cloud: &dyn Cloud,
        req: &ListRequest<'_>,
        each: &mut dyn FnMut(&Listed) -> bool,
    ) {
        self.run(
            &mut |item| {
                // Followers retry from their own resumes (and end there if the hub stops).
                if let Some(why) = (req.over)() {
                    return Err(RoundFailure::Cloud(format!("not listed: {why}")));
                }
                list_scope(cloud, req, item)
            },
            each,
        );
    }

    /// [`Leader::list`] with the list made by `list` (tests list without a cloud).
    pub(super) fn run(self, list: &mut Lister<'_>, each: &mut dyn FnMut(&Listed) -> bool) {
        std::thread::sleep(self.rounds.gather);
        let mut followers = self.close();
        let wait = self.rounds.follower_wait;
        let mut leading = true;
        let mut hand = |listed: Listed, followers: &mut Vec<Sender<Listed>>| {
            if leading {
                leading = each(&listed);
            }
            followers.retain(|tx| {
                let copy = match &listed {
                    Listed::Item(item) => Listed::Item(Arc::clone(item)),
                    Listed::End(end) => Listed::End(end.clone()),
                    Listed::Failed(why) => Listed::Failed(why.clone()),
                };
                tx.send_timeout(copy, wait).is_ok()
            });
            leading || !followers.is_empty()
        };
        let listed = list(&mut |item| hand(Listed::Item(Arc::new(item)), &mut followers));
        let last = match listed {
            Ok(end) => Listed::End(end),
            Err(why) => Listed::Failed(why),
        };
        hand(last, &mut followers);
    }

    /// Closes the round to newcomers: its followers, and the scope free for a new round.
    fn close(&self) -> Vec<Sender<Listed>> {
        let mut open = self
            .rounds
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if open
            .get(&self.key)
            .is_some_and(|round| Arc::ptr_eq(round, &self.round))
        {
            open.remove(&self.key);
        }
        let mut followers = self
            .round
            .followers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        followers.take().unwrap_or_default()
    }
}

impl Drop for Leader<'_> {
    /// A leader that never listed (its watch ended first) still closes its round: the
    /// followers' channels close, and each retries from its resume.
    fn drop(&mut self) {
        drop(self.close());
    }
}

/// Lists the scope once through `cloud`, handing each item to `each` (false: stop).
fn list_scope(
    cloud: &dyn Cloud,
    req: &ListRequest<'_>,
    each: &mut dyn FnMut(ListedItem) -> bool,
) -> Result<ListEnd, RoundFailure> {
    let mut headers = req.headers.to_vec();
    headers.push(("Accept-Encoding".to_owned(), "gzip".to_owned()));
    let mut answer = cloud
        .send(Outgoing {
            method: "GET",
            verb: crate::request::Verb::List,
            path_and_query: req.target,
            headers: &headers,
            accept: Some(req.accept),
            encoding: crate::upstream::Encoding::AsClient,
            body: None,
            deadline: Deadline::Bounded(list_deadline(req.deadline, Instant::now())),
            identity: req.identity,
            affinity: None,
        })
        .map_err(|e| RoundFailure::Cloud(format!("the list failed: {e}")))?;
    match answer.status {
        200 if answer.is_json() => {}
        200 => return Err(RoundFailure::Cloud("the list is not JSON".to_owned())),
        status @ (429 | 500..) => {
            return Err(RoundFailure::Cloud(format!(
                "the list was answered {status}"
            )));
        }
        status => {
            return Err(RoundFailure::Unusable(format!(
                "the list was answered {status}"
            )));
        }
    }
    let gzip = answer.is_gzip();
    read_list(&mut answer.body, gzip, req.kind_hint, each)
}

/// The list's deadline: [`LIST_DEADLINE`], cut to the time the leading client has left (at
/// least a second, so that a list asked for is a list tried).
fn list_deadline(client: Option<Instant>, now: Instant) -> Duration {
    let left = client.map_or(LIST_DEADLINE, |d| d.saturating_duration_since(now));
    left.clamp(Duration::from_secs(1), LIST_DEADLINE)
}

/// The paths located in each list item (indexes fixed: see `read_list`).
const ITEM_PATHS: &[Path] = &[
    &["kind"],
    &["apiVersion"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "resourceVersion"],
];

/// Reads a list body, one item at a time, into `each` (false: stop, which is
/// `RoundFailure::Unusable`: no one is left to take it).
fn read_list(
    body: &mut dyn Read,
    gzip: bool,
    kind_hint: Option<(&str, &str)>,
    each: &mut dyn FnMut(ListedItem) -> bool,
) -> Result<ListEnd, RoundFailure> {
    let mut decoder =
        BodyDecoder::new(BodyShape::List, gzip, MAX_OBJECT_BYTES).locating(ITEM_PATHS);
    let mut list = ListRead {
        kind_hint,
        ..ListRead::default()
    };
    let unreadable = |e| RoundFailure::Cloud(format!("the list cannot be read: {e}"));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = body
            .read(&mut buf)
            .map_err(|e| RoundFailure::Cloud(format!("the list broke off: {e}")))?;
        if n == 0 {
            break;
        }
        decoder
            .feed_located(&buf[..n], &mut |unit, found| list.unit(unit, found, each))
            .map_err(unreadable)?;
        if let Some(why) = list.failed.take() {
            return Err(why);
        }
    }
    decoder
        .finish_located(&mut |unit, found| list.unit(unit, found, each))
        .map_err(unreadable)?;
    if let Some(why) = list.failed {
        return Err(why);
    }
    let Some(rv) = list.rv.filter(|rv| !rv.is_empty()) else {
        return Err(RoundFailure::Cloud(
            "the list has no resourceVersion".to_owned(),
        ));
    };
    let (kind, api_version) =
        item_kind(list.kind.as_deref(), list.api_version.as_deref(), kind_hint)
            .ok_or_else(|| RoundFailure::Unusable("the list names no kind".to_owned()))?;
    Ok(ListEnd {
        rv,
        kind: kind.to_owned(),
        api_version: api_version.to_owned(),
    })
}

/// What a list said of itself so far, while its items are handed on.
#[derive(Default)]
struct ListRead<'h> {
    kind_hint: Option<(&'h str, &'h str)>,
    /// The list's `kind` (`PodList`).
    kind: Option<String>,
    api_version: Option<String>,
    rv: Option<String>,
    failed: Option<RoundFailure>,
}

impl ListRead<'_> {
    fn unit(&mut self, unit: Unit<'_>, found: &Located, each: &mut dyn FnMut(ListedItem) -> bool) {
        #[derive(serde::Deserialize)]
        struct Meta {
            #[serde(rename = "resourceVersion")]
            resource_version: Option<String>,
        }
        if self.failed.is_some() {
            return;
        }
        match unit {
            Unit::ListMember { key: "kind", value } => {
                self.kind = serde_json::from_slice(value).ok();
            }
            Unit::ListMember {
                key: "apiVersion",
                value,
            } => self.api_version = serde_json::from_slice(value).ok(),
            Unit::ListMember {
                key: "metadata",
                value,
            } => {
                self.rv = serde_json::from_slice::<Meta>(value)
                    .ok()
                    .and_then(|m| m.resource_version);
            }
            Unit::ListItem(raw) => {
                let kind = item_kind(
                    self.kind.as_deref(),
                    self.api_version.as_deref(),
                    self.kind_hint,
                );
                self.failed = match listed_item(raw, found, kind).map(&mut *each) {
                    Ok(true) => None,
                    Ok(false) => Some(RoundFailure::Unusable(
                        "no watch is left to take the list".to_owned(),
                    )),
                    Err(why) => Some(why),
                };
            }
            _ => {}
        }
    }
}

/// The kind and apiVersion of a list's items: the list's own (`PodList` → `Pod`), else the
/// watch's last known.
fn item_kind<'k>(
    list_kind: Option<&'k str>,
    api_version: Option<&'k str>,
    hint: Option<(&'k str, &'k str)>,
) -> Option<(&'k str, &'k str)> {
    match (list_kind.and_then(|k| k.strip_suffix("List")), api_version) {
        (Some(kind), Some(api_version)) if !kind.is_empty() => Some((kind, api_version)),
        _ => hint,
    }
}

/// One list item as the difference takes it: its key and resourceVersion, and its bytes
/// with `kind` and `apiVersion` in front when it has no kind of its own.
fn listed_item(
    raw: &[u8],
    found: &Located,
    kind: Option<(&str, &str)>,
) -> Result<ListedItem, RoundFailure> {
    let unreadable = || RoundFailure::Cloud("a list item has no readable name".to_owned());
    let text = |i: usize| -> Option<Option<String>> {
        let span = found.span(i).ok()?;
        located_str(raw, span).map(|s| s.map(|s| s.into_owned()))
    };
    let name = text(2)
        .flatten()
        .filter(|n| !n.is_empty())
        .ok_or_else(unreadable)?;
    let namespace = text(3).ok_or_else(unreadable)?.filter(|ns| !ns.is_empty());
    let rv = text(4).ok_or_else(unreadable)?.unwrap_or_default();
    let has_kind = matches!(text(0), Some(Some(_)));
    let object: Box<[u8]> = if has_kind {
        raw.into()
    } else {
        let (kind, api_version) = kind.ok_or_else(|| {
            RoundFailure::Unusable("a list item comes before the list names its kind".to_owned())
        })?;
        with_kind(raw, kind, api_version).ok_or_else(unreadable)?
    };
    Ok(ListedItem {
        namespace,
        name,
        rv,
        object,
    })
}

/// `object` with `"kind":K,"apiVersion":A` as its first members; None if it is not a JSON
/// object.
fn with_kind(object: &[u8], kind: &str, api_version: &str) -> Option<Box<[u8]>> {
    let start = object.iter().position(|b| !b.is_ascii_whitespace())?;
    if object[start] != b'{' {
        return None;
    }
    let rest = &object[start + 1..];
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    let mut out = Vec::with_capacity(object.len() + kind.len() + api_version.len() + 32);
    out.extend_from_slice(b"{\"kind\":");
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, kind);
    out.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut out, api_version);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Some(out.into_boxed_slice())
}

#[cfg(test)]
mod tests;
