//! The legs of a resumable watch, as values (pure): the targets the hub asks the cloud for
//! (the first leg with bookmarks, a resume from the last delivered resourceVersion, the list
//! of the same scope after a 410), the headers every later leg carries, how a resume's answer
//! is read, the backoff after a failed resume and the jitter after an outage (issue 29).
//!
//! It sends nothing and reads no clock but the backoff's random spread.

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::OnceLock;
use std::time::Duration;

use crate::request::{self, ResourcePath};
use crate::upstream::is_hop_by_hop;

/// After an outage (the loop had to wait for a usable cloud): a resume waits a jitter in
/// [0, RESUME_JITTER), so the nodes of a region coming back at once spread their requests.
pub(crate) const RESUME_JITTER: Duration = Duration::from_secs(5);
/// A leg that brought nothing for this long after it showed a bookmark is dead (the apiserver
/// bookmarks each watcher about once a minute): the pool feeders use the same 150 s
/// (`clients/pool_watch.rs` `LEADER_IDLE`).
pub(crate) const LEG_SILENCE: Duration = Duration::from_secs(150);
/// Hub-made bookmarks while a watch is held (only for clients that asked, once the kind of
/// the objects is known): a proxy in between may close an idle stream.
pub(crate) const HELD_BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// The first wait after a failed resume; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_secs(1);
/// The longest wait between two failed resumes.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Query parameters a later leg sets itself: the client's own values are dropped.
const LEG_OWNED: &[&str] = &[
    "watch",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "allowWatchBookmarks",
    "timeoutSeconds",
];
/// Query parameters a list of the scope drops besides the watch's: it is one consistent,
/// unpaged read.
const LIST_DROPPED: &[&str] = &["limit", "continue"];

/// The group, version and resource of `path` (the one place that reads them, for the paths
/// and the series' label).
pub(crate) fn gvr(path: &ResourcePath) -> (&str, &str, &str) {
    (&path.gvr.group, &path.gvr.version, &path.gvr.resource)
}

/// The resource as the series label it: `resource[.group]` (`pods`,
/// `endpointslices.discovery.k8s.io`).
pub(crate) fn resource_label(path: &ResourcePath) -> String {
    match gvr(path) {
        ("", _, resource) => resource.to_owned(),
        (group, _, resource) => format!("{resource}.{group}"),
    }
}

/// The first leg's target: the client's, with `allowWatchBookmarks=true` (the hub always asks
/// the cloud for bookmarks, issue 29 item 1; they are passed on only when the client asked).
pub(crate) fn first_target(target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut out = String::with_capacity(target.len() + 26);
    out.push_str(path);
    out.push('?');
    for pair in pairs(query).filter(|p| key(p) != "allowWatchBookmarks") {
        out.push_str(pair);
        out.push('&');
    }
    out.push_str("allowWatchBookmarks=true");
    out
}

/// A resume's target: the collection path of `path` (a watch of one named object, or of the
/// legacy `/watch/` path, becomes the collection with `fieldSelector=metadata.name=<name>`
/// joined to the client's own field selector), the client's query pairs but those a leg sets
/// (kept byte for byte, in order), then `watch=1&resourceVersion=<rv>&allowWatchBookmarks=true`
/// and `timeoutSeconds=<left>` when the client has a deadline.
pub(crate) fn resume_target(
    path: &ResourcePath,
    raw_query: &str,
    rv: &str,
    left: Option<u64>,
) -> String {
    let mut out = scope_target(path, raw_query, &[]);
    out.push_str("watch=1&resourceVersion=");
    request::escape(rv, request::QUERY_SAFE, &mut out);
    out.push_str("&allowWatchBookmarks=true");
    if let Some(left) = left {
        out.push_str("&timeoutSeconds=");
        out.push_str(&left.to_string());
    }
    out
}

/// The list of the same scope (a round after a 410): the collection path and the client's
/// selectors, without the watch's parameters, `limit` or `continue` (one consistent read).
pub(crate) fn list_target(path: &ResourcePath, raw_query: &str) -> String {
    let mut out = scope_target(path, raw_query, LIST_DROPPED);
    // The trailing separator of the kept pairs (or the lone `?`).
    out.pop();
    out
}

/// The headers every later leg carries: the client's, without hop-by-hop ones and
/// `Accept-Encoding` (a watch is read by the hub: plain). `Authorization` stays: a client
/// with its own credential resumes on it.
pub(crate) fn leg_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !is_hop_by_hop(name) && !name.eq_ignore_ascii_case("accept-encoding"))
        .cloned()
        .collect()
}

/// How the cloud answered a resume request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resumed {
    /// 200 in JSON, not compressed: a new leg.
    Leg,
    /// 410: the history is gone.
    Expired,
    /// The cloud is not well (5xx, 429, an answer that is no watch stream): try again after
    /// the backoff, or after the wait it asked for.
    Trouble(Option<Duration>),
    /// The cloud refused the request itself (401, 403, 404, another 4xx): the client's next
    /// request meets the real error.
    Refused(u16),
}

/// Reads a resume's answer head: its status, whether its body is JSON, whether it is
/// compressed, and its `Retry-After`.
pub(crate) fn classify(status: u16, json: bool, gzip: bool, retry_after: Option<&str>) -> Resumed {
    match status {
        200 if json && !gzip => Resumed::Leg,
        200 => Resumed::Trouble(None),
        410 => Resumed::Expired,
        429 | 500..=599 => Resumed::Trouble(
            retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(BACKOFF_MAX)),
        ),
        400..=499 => Resumed::Refused(status),
        // 1xx, 2xx other than 200, 3xx: no watch stream.
        _ => Resumed::Trouble(None),
    }
}

/// The waits between failed resumes: 1 s doubling to 30 s, each spread by ±10 % (the
/// identity's renewal backoff has the same shape).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    /// A backoff at its start.
    pub(crate) fn new() -> Backoff {
        Backoff {
            next: BACKOFF_START,
        }
    }

    /// The wait before the next attempt, without spread; the following one doubles.
    pub(crate) fn step(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        now
    }

    /// The next wait, spread by ±10 %.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let base = self.step().as_millis() as u64;
        let spread = base / 10;
        Duration::from_millis(crate::random_between(base - spread, base + spread))
    }

    /// A resume succeeded: the next failure waits 1 s again.
    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}

/// The jitter of a resume after an outage: a hash of the watch's `scope` and the cloud's
/// count of recoveries under a per-process random key, in [0, RESUME_JITTER). Every watch of
/// one scope resumes at the same instant (their 410s, if any, fall in one round), the scopes
/// of a node spread over the window, and each outage draws again.
pub(crate) fn jitter(scope: &impl Hash, recoveries: u64) -> Duration {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let hash = KEY
        .get_or_init(RandomState::new)
        .hash_one((scope, recoveries));
    Duration::from_millis(hash % RESUME_JITTER.as_millis() as u64)
}

/// The collection path of `path` and `?`, then the client's query pairs but the leg's own and
/// `dropped`, each followed by `&`; a named object's name joins the field selector.
fn scope_target(path: &ResourcePath, raw_query: &str, dropped: &[&str]) -> String {
    let (group, version, resource) = gvr(path);
    let mut out = String::with_capacity(64 + raw_query.len());
    match group {
        "" => out.push_str("/api/"),
        group => {
            out.push_str("/apis/");
            out.push_str(group);
            out.push('/');
        }
    }
    out.push_str(version);
    if let Some(ns) = &path.namespace {
        out.push_str("/namespaces/");
        request::escape(ns, request::QUERY_SAFE, &mut out);
    }
    out.push('/');
    out.push_str(resource);
    out.push('?');
    let kept = |p: &&str| !LEG_OWNED.contains(&key(p)) && !dropped.contains(&key(p));
    let mut fields = None;
    for pair in pairs(raw_query).filter(kept) {
        if path.name.is_some() && key(pair) == "fieldSelector" {
            fields = pair
                .split_once('=')
                .map(|(_, v)| v)
                .filter(|v| !v.is_empty());
            continue;
        }
        out.push_str(pair);
        out.push('&');
    }
    if let Some(name) = &path.name {
        out.push_str("fieldSelector=metadata.name%3D");
        request::escape(name, request::QUERY_SAFE, &mut out);
        if let Some(fields) = fields {
            out.push_str("%2C");
            out.push_str(fields);
        }
        out.push('&');
    }
    out
}

/// The non-empty `key=value` pairs of a raw query.
fn pairs(query: &str) -> impl Iterator<Item = &str> {
    query.split('&').filter(|p| !p.is_empty())
}

/// The key of a raw query pair.
fn key(pair: &str) -> &str {
    pair.split_once('=').map_or(pair, |(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Target, classify as classify_request};

    fn path(url: &str) -> ResourcePath {
        let req = classify_request("GET", url, &[]).unwrap();
        match req.target {
            Target::Resource(path) => path,
            Target::NonResource(p) => panic!("not a resource: {p}"),
        }
    }

    fn query(url: &str) -> &str {
        url.split_once('?').map_or("", |(_, q)| q)
    }

    #[test]
    fn first_target_asks_for_bookmarks() {
        assert_eq!(
            first_target("/api/v1/pods?watch=1&resourceVersion=5"),
            "/api/v1/pods?watch=1&resourceVersion=5&allowWatchBookmarks=true"
        );
        // The client's own word on bookmarks is the hub's to set (it passes them on only
        // when the client asked).
        assert_eq!(
            first_target("/api/v1/pods?allowWatchBookmarks=false&watch=true"),
            "/api/v1/pods?watch=true&allowWatchBookmarks=true"
        );
        assert_eq!(
            first_target("/api/v1/pods"),
            "/api/v1/pods?allowWatchBookmarks=true"
        );
    }

    #[test]
    fn resume_target_keeps_selectors_and_replaces_rv() {
        let url = "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dedge-1\
                   &labelSelector=app%3Dweb&resourceVersion=10&timeoutSeconds=600&watch=true\
                   &resourceVersionMatch=NotOlderThan&sendInitialEvents=false";
        assert_eq!(
            resume_target(&path(url), query(url), "1234", Some(512)),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%3Dweb\
             &watch=1&resourceVersion=1234&allowWatchBookmarks=true&timeoutSeconds=512"
        );
        // No deadline: no timeoutSeconds (the apiserver's own length applies to each leg).
        let url = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?watch=1";
        assert_eq!(
            resume_target(&path(url), query(url), "7", None),
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices\
             ?watch=1&resourceVersion=7&allowWatchBookmarks=true"
        );
        // The legacy watch path of one object: the collection, the name a field selector
        // joined to the client's.
        let url = "/api/v1/watch/namespaces/ns/configmaps/cm-1?fieldSelector=a%3Db";
        assert_eq!(
            resume_target(&path(url), query(url), "9", Some(30)),
            "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dcm-1%2Ca%3Db\
             &watch=1&resourceVersion=9&allowWatchBookmarks=true&timeoutSeconds=30"
        );
    }

    #[test]
    fn list_target_is_one_unpaged_read_of_the_scope() {
        let url = "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dedge-1&limit=500\
                   &continue=abc&resourceVersion=3&allowWatchBookmarks=true";
        assert_eq!(
            list_target(&path(url), query(url)),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1"
        );
        let url = "/api/v1/namespaces/ns/secrets?watch=1";
        assert_eq!(
            list_target(&path(url), query(url)),
            "/api/v1/namespaces/ns/secrets"
        );
    }

    #[test]
    fn leg_headers_drop_encoding_and_hop_by_hop() {
        let h = |n: &str| (n.to_owned(), "x".to_owned());
        let kept = leg_headers(&[
            h("User-Agent"),
            h("Accept-Encoding"),
            h("Connection"),
            h("Authorization"),
            h("Accept"),
        ]);
        assert_eq!(kept, vec![h("User-Agent"), h("Authorization"), h("Accept")]);
    }

    #[test]
    fn a_resume_answer_is_read_by_its_status() {
        assert_eq!(classify(200, true, false, None), Resumed::Leg);
        assert_eq!(classify(200, false, false, None), Resumed::Trouble(None));
        assert_eq!(classify(200, true, true, None), Resumed::Trouble(None));
        assert_eq!(classify(410, true, false, None), Resumed::Expired);
        assert_eq!(classify(503, true, false, None), Resumed::Trouble(None));
        assert_eq!(
            classify(429, true, false, Some(" 3 ")),
            Resumed::Trouble(Some(Duration::from_secs(3)))
        );
        assert_eq!(classify(403, true, false, None), Resumed::Refused(403));
        assert_eq!(classify(404, true, false, None), Resumed::Refused(404));
    }

    #[test]
    fn backoff_doubles_to_30s() {
        let mut b = Backoff::new();
        let steps: Vec<u64> = (0..7).map(|_| b.step().as_secs()).collect();
        assert_eq!(steps, [1, 2, 4, 8, 16, 30, 30]);
        b.reset();
        for _ in 0..20 {
            let w = b.next_wait();
            assert!(w >= Duration::from_millis(900) && w <= Duration::from_millis(1100));
            b.reset();
        }
    }

    #[test]
    fn jitter_is_one_per_scope_and_outage() {
        let a = jitter(&"/api/v1/pods", 1);
        assert!(a < RESUME_JITTER);
        assert_eq!(
            a,
            jitter(&"/api/v1/pods", 1),
            "one scope resumes at one instant"
        );
        // Scopes (and outages) spread over the window.
        let drawn: std::collections::HashSet<_> = (0..50)
            .map(|i| jitter(&format!("/api/v1/cm-{i}"), 1))
            .collect();
        assert!(drawn.len() > 40, "{drawn:?}");
    }
}
