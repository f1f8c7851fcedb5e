//! Link accounting: requests and body bytes on the hub's upstream link, per server,
//! component and resource, as Prometheus counters on the serve port's `/metrics`.
//!
//! The cloud link is the scarcest thing an edge node has (4G, metered). Every request the
//! hub makes upstream is counted here: forwarded client requests and their streamed answers
//! (watches count as their bytes arrive, not when they end), refills, the hub's own clients,
//! and the hub's short exchanges (health probes, lease renewals: component `tinyhub`).
//!
//! Series (labels `server`, the base URL or a name such as `leader`; `component`, the first
//! word of the User-Agent, lowercased; `resource`, the plural in the path, empty for a
//! non-resource path such as `/readyz` or a discovery document):
//!
//! - `tinyhub_cloud_requests_total{server,component,resource}`: requests that went on the
//!   link (an attempt that could not connect did not, and is not counted; a retry is).
//! - `tinyhub_cloud_sent_bytes_total{...}`: request body bytes sent.
//! - `tinyhub_cloud_received_bytes_total{...}`: response body bytes received, as the link
//!   carried them: the compressed size when the server sent gzip (the hub passes gzip through
//!   untouched; decoding it only to count would cost CPU on every answer).
//! - `tinyhub_cloud_received_gzip_bytes_total{...}`: the part of the received bytes that came
//!   gzip-encoded (how much of the link compression already covers).
//! - `tinyhub_cloud_all_{requests,sent_bytes,received_bytes,received_gzip_bytes}_total`:
//!   the same without labels, every request counted, those past the series cap too.
//!
//! Beside the series, a **totals table** keyed by (component, resource, verb), without the
//! server, is what `linkbook` keeps across restarts (`tinyhub_link_*_total`, `/v1/link`):
//! requests, body bytes up and down (and the gzip part of down) on the cloud link, bytes
//! saved by inflating gzip the hub asked for ([`Link::inflated`]), and bytes a pool leader or
//! pool cache served instead of the cloud (`pool_saved`). At most [`MAX_TOTALS`] keys, then
//! one `_other` row; their labels are cut to [`MAX_TOTALS_LABEL`] bytes of `[a-z0-9._-]` (what
//! bounds the totals file). The verb is the caller's (`request::Verb`, as the request was
//! classified). A leader's answers count as `pool_saved`, never as link bytes; a
//! non-resource request to a leader (a probe) counts only in the series.
//!
//! Bodies only: request and response heads (a few hundred bytes per exchange), chunk framing
//! and TLS records are not counted, as ureq does not expose them; the request count lets one
//! estimate them.
//!
//! Design: the label key is resolved once per request ([`LinkStats::link`]: the labels are
//! borrowed from the request, the component lowercased into a stack buffer, then one mutex
//! lock and a map lookup for the series, whose entry keeps its totals row per verb once looked
//! up; nothing allocated once both exist) into a [`Link`], handles on their atomics. A body
//! reader then adds each read's byte count to them (one relaxed atomic add per read; a read
//! carries up to the 8 KiB input buffer): a watch's bytes show at once, and nothing is batched
//! that a dropped stream could lose. Measured (x86-64, release, 100 series): resolving the
//! series from the headers and path ~0.3 µs per request (about what the existing in-flight
//! series cost, which allocate three strings), counting a read ~2 ns.
//!
//! Labels come from clients (User-Agent, path): as for the request series in `metrics`, at
//! most [`MAX_SERIES`] are kept; requests past the cap count only in the totals. Cost: one
//! series is its key (three short strings, about 60 to 120 bytes with the server URL) plus
//! 32 bytes of counters, 160 of its totals rows per verb, the Arc's 16 and a map slot, about
//! 360 bytes; 512 series at most, ~180 KB at worst.

use std::borrow::Borrow;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::lock;

/// Most labelled link series kept; requests past it count only in the totals (the same cap
/// as the request series in `metrics`).
pub(crate) const MAX_SERIES: usize = 512;

/// Longest label value kept from a client's input (User-Agent word, resource): longer ones
/// are cut at a character boundary.
const MAX_LABEL: usize = 64;

/// The component label of the hub's own exchanges (probes, lease renewals).
pub(crate) const HUB_COMPONENT: &str = "tinyhub";

/// Most (component, resource, verb) keys of the totals table; later keys count in one
/// `_other` row. A node's usual clients (kubelet, kube-proxy, coredns, a CNI, the hub) make
/// about 45; the cap is what keeps the totals file within 64 KiB (`linkbook`).
pub(crate) const MAX_TOTALS: usize = 64;

/// Longest component or resource label of the totals table.
pub(crate) const MAX_TOTALS_LABEL: usize = 32;

/// The label value of the totals row past [`MAX_TOTALS`].
pub(crate) const OTHER: &str = "_other";

/// How many verbs the totals table tells apart.
pub(crate) const N_VERBS: usize = 10;

/// The verbs of the totals table, as `request::Verb` names them; `other` for anything else
/// (a non-resource path, a method the hub does not classify).
pub(crate) const VERBS: [&str; N_VERBS] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "proxy",
    "other",
];

/// What one totals key counts: requests, up (request body bytes), down (response body bytes
/// as the link carried them), down gzip, gzip saved, pool saved.
pub(crate) type Totals = [u64; 6];

/// The atomics behind one totals key.
#[derive(Debug, Default)]
struct TotalCounters([AtomicU64; 6]);

impl TotalCounters {
    const fn new() -> TotalCounters {
        TotalCounters([const { AtomicU64::new(0) }; 6])
    }

    fn add(&self, i: usize, n: u64) {
        if n > 0 {
            self.0[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> Totals {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Index of the requests in [`Totals`].
pub(crate) const T_REQUESTS: usize = 0;
/// Index of the request body bytes.
pub(crate) const T_UP: usize = 1;
/// Index of the response body bytes.
pub(crate) const T_DOWN: usize = 2;
/// Index of the gzip part of the response body bytes.
pub(crate) const T_DOWN_GZIP: usize = 3;
/// Index of the bytes saved by inflating gzip for a client.
pub(crate) const T_GZIP_SAVED: usize = 4;
/// Index of the bytes served from the pool instead of the cloud.
pub(crate) const T_POOL_SAVED: usize = 5;

/// The totals table: component → resource → one slot per verb.
type TotalsMap = BTreeMap<Box<str>, BTreeMap<Box<str>, [Option<Arc<TotalCounters>>; N_VERBS]>>;

/// One series: its counters, and its totals row per verb once a request looked it up (the
/// row is a function of the series' labels and the verb), so a warm request takes one lock.
#[derive(Debug, Default)]
struct Series {
    counters: LinkCounters,
    rows: [OnceLock<Arc<TotalCounters>>; N_VERBS],
}

/// The counters of one series (or of the requests past the cap).
#[derive(Debug, Default)]
pub(crate) struct LinkCounters {
    requests: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    received_gzip: AtomicU64,
}

impl LinkCounters {
    const fn new() -> LinkCounters {
        LinkCounters {
            requests: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_gzip: AtomicU64::new(0),
        }
    }

    /// (requests, sent, received, received gzip) as they are now.
    fn snapshot(&self) -> [u64; 4] {
        [
            self.requests.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
            self.received_gzip.load(Ordering::Relaxed),
        ]
    }
}

/// The labels of a series, borrowed: what a lookup compares without allocating.
trait Labels {
    /// The server label.
    fn server(&self) -> &str;
    /// The component label, lowercased.
    fn component(&self) -> &[u8];
    /// The resource label.
    fn resource(&self) -> &str;
}

impl Ord for dyn Labels + '_ {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // The most distinct label first: the server is the same for most series.
        self.resource()
            .cmp(other.resource())
            .then_with(|| self.component().cmp(other.component()))
            .then_with(|| self.server().cmp(other.server()))
    }
}

impl PartialOrd for dyn Labels + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Labels + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}

impl Eq for dyn Labels + '_ {}

/// A series' labels as the map holds them (allocated once, when the series is made).
struct Key {
    server: Box<str>,
    component: Box<str>,
    resource: Box<str>,
}

impl Labels for Key {
    fn server(&self) -> &str {
        &self.server
    }
    fn component(&self) -> &[u8] {
        self.component.as_bytes()
    }
    fn resource(&self) -> &str {
        &self.resource
    }
}

impl<'a> Borrow<dyn Labels + 'a> for Key {
    fn borrow(&self) -> &(dyn Labels + 'a) {
        self
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self as &dyn Labels).cmp(other as &dyn Labels)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}

impl Eq for Key {}

/// A series' labels as a request has them.
struct Asked<'a> {
    server: &'a str,
    /// Lowercased, on the stack.
    component: &'a [u8],
    resource: &'a str,
}

impl Labels for Asked<'_> {
    fn server(&self) -> &str {
        self.server
    }
    fn component(&self) -> &[u8] {
        self.component
    }
    fn resource(&self) -> &str {
        self.resource
    }
}

/// The link series of the process (or of a test).
pub(crate) struct LinkStats {
    series: Mutex<BTreeMap<Key, Arc<Series>>>,
    /// Requests past the series cap.
    overflow: LinkCounters,
    /// The totals table and its key count.
    totals: Mutex<(TotalsMap, usize)>,
    /// The `_other` row of the totals table, shared by the keys past the cap.
    totals_other: OnceLock<Arc<TotalCounters>>,
}

/// The process-wide link series.
pub(crate) static LINK: LinkStats = LinkStats::new();

impl LinkStats {
    /// No series yet.
    pub(crate) const fn new() -> LinkStats {
        LinkStats {
            series: Mutex::new(BTreeMap::new()),
            overflow: LinkCounters::new(),
            totals: Mutex::new((BTreeMap::new(), 0)),
            totals_other: OnceLock::new(),
        }
    }

    /// The series of one request to `server` (a base URL, or a name such as `leader`) of
    /// `verb` (as `request::Verb::as_str` names it) for `path` (with its query) from
    /// `component` (a User-Agent's first word, see [`component_of`]), and its totals row; made
    /// when new and under the caps. `leader`: the server is a pool leader, whose answers count
    /// as saved, not as link bytes. Count on the returned handle; it holds no lock.
    pub(crate) fn link(
        &'static self,
        server: &str,
        verb: &str,
        component: &str,
        path: &str,
        leader: bool,
    ) -> Link {
        self.resolve(server, Some(verb), component, path, leader)
    }

    /// A handle on `server`'s series without labels from a request, counting nothing in the
    /// totals: a tunnel's before its request is known.
    pub(crate) fn untotalled(&'static self, server: &str) -> Link {
        self.resolve(server, None, "", "", false)
    }

    /// [`LinkStats::link`]; no totals row without a verb.
    fn resolve(
        &'static self,
        server: &str,
        verb: Option<&str>,
        component: &str,
        path: &str,
        leader: bool,
    ) -> Link {
        let component = cut(component.trim());
        let resource = cut(resource_of(path));
        // Lowercased into a buffer on the stack: the lookup allocates nothing.
        let mut lower = [0u8; MAX_LABEL];
        let lower = &mut lower[..component.len()];
        lower.copy_from_slice(component.as_bytes());
        lower.make_ascii_lowercase();
        let asked = Asked {
            server,
            component: lower,
            resource,
        };
        let series = {
            let mut map = lock(&self.series);
            match map.get(&asked as &dyn Labels) {
                Some(series) => Some(Arc::clone(series)),
                None if map.len() < MAX_SERIES => {
                    let series = Arc::new(Series::default());
                    let key = Key {
                        server: server.into(),
                        component: component.to_ascii_lowercase().into(),
                        resource: resource.into(),
                    };
                    map.insert(key, Arc::clone(&series));
                    Some(series)
                }
                None => None,
            }
        };
        // A probe of a leader (no resource) is no traffic the cloud was spared.
        let row = match verb {
            Some(_) if leader && resource.is_empty() => None,
            None => None,
            Some(verb) => {
                let verb = verb_index(verb);
                // Only when the series has not met this verb yet (or is past the cap).
                let look_up = || {
                    // ASCII lowercasing keeps UTF-8 valid; the fallback is never taken.
                    let component = std::str::from_utf8(lower).unwrap_or(OTHER);
                    self.row(&totals_label(component), &totals_label(resource), verb)
                };
                Some(match &series {
                    Some(series) => Arc::clone(series.rows[verb].get_or_init(look_up)),
                    None => look_up(),
                })
            }
        };
        Link {
            stats: self,
            series,
            row,
            leader,
        }
    }

    /// The `_other` row of the totals table.
    fn other(&self) -> &Arc<TotalCounters> {
        self.totals_other
            .get_or_init(|| Arc::new(TotalCounters::new()))
    }

    /// The totals row of (component, resource, verb index), labels as [`totals_label`] makes
    /// them: made when new and under the cap, else the `_other` row.
    fn row(&self, component: &str, resource: &str, verb: usize) -> Arc<TotalCounters> {
        let mut guard = lock(&self.totals);
        let (map, count) = &mut *guard;
        if let Some(slot) = map
            .get(component)
            .and_then(|r| r.get(resource))
            .and_then(|verbs| verbs[verb].as_ref())
        {
            return Arc::clone(slot);
        }
        if *count >= MAX_TOTALS {
            return Arc::clone(self.other());
        }
        *count += 1;
        let counters = Arc::new(TotalCounters::new());
        let slot = map
            .entry(component.into())
            .or_default()
            .entry(resource.into())
            .or_default();
        slot[verb] = Some(Arc::clone(&counters));
        counters
    }

    /// Counts `bytes` of a list or watch a pool cache served a local client (not a
    /// follower) from memory: bytes the cloud link did not carry.
    pub(crate) fn pool_served(&self, component: &str, resource: &str, verb: &str, bytes: u64) {
        let component = totals_label(component.trim());
        self.row(&component, &totals_label(resource), verb_index(verb))
            .add(T_POOL_SAVED, bytes);
    }

    /// The totals table as it is now: (component, resource, verb, totals) in key order, the
    /// `_other` row last when it counted anything.
    pub(crate) fn totals(&self) -> Vec<(String, String, &'static str, Totals)> {
        let mut out = Vec::new();
        {
            let guard = lock(&self.totals);
            for (component, resources) in &guard.0 {
                for (resource, verbs) in resources {
                    for (verb, slot) in VERBS.iter().zip(verbs) {
                        if let Some(row) = slot {
                            out.push((
                                component.to_string(),
                                resource.to_string(),
                                *verb,
                                row.snapshot(),
                            ));
                        }
                    }
                }
            }
        }
        let other = self
            .totals_other
            .get()
            .map_or_else(Totals::default, |row| row.snapshot());
        if other.iter().any(|&n| n > 0) {
            out.push((OTHER.to_owned(), OTHER.to_owned(), OTHER, other));
        }
        out
    }

    /// The series and the totals in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        const NAMES: [(&str, &str); 4] = [
            (
                "requests",
                "requests the hub sent upstream (forwarded, its own clients, probes and lease renewals)",
            ),
            ("sent_bytes", "request body bytes the hub sent upstream"),
            (
                "received_bytes",
                "response body bytes the hub received from upstream, as the link carried them (compressed when gzip)",
            ),
            (
                "received_gzip_bytes",
                "the part of the received body bytes that came gzip-encoded",
            ),
        ];
        // Snapshots first: the lock is not held while formatting.
        let rows: Vec<(String, [u64; 4])> = lock(&self.series)
            .iter()
            .map(|(key, counters)| {
                let labels = format!(
                    "server=\"{}\",component=\"{}\",resource=\"{}\"",
                    escape(&key.server),
                    escape(&key.component),
                    escape(&key.resource)
                );
                (labels, counters.counters.snapshot())
            })
            .collect();
        let mut totals = self.overflow.snapshot();
        for (_, values) in &rows {
            for (total, value) in totals.iter_mut().zip(values) {
                *total += value;
            }
        }
        for (i, (name, help)) in NAMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "# HELP tinyhub_cloud_{name}_total {help}, by server, component and resource\n# TYPE tinyhub_cloud_{name}_total counter"
            );
            for (labels, values) in &rows {
                let _ = writeln!(out, "tinyhub_cloud_{name}_total{{{labels}}} {}", values[i]);
            }
            let _ = writeln!(
                out,
                "# HELP tinyhub_cloud_all_{name}_total {help}, all of them (series past the cap too)\n# TYPE tinyhub_cloud_all_{name}_total counter\ntinyhub_cloud_all_{name}_total {}",
                totals[i]
            );
        }
    }
}

/// One request's series and totals row: counts what it carries. Made per request, never
/// allocating once its series and row exist (every answer body holds one; a body the hub
/// inflates holds a second, cloned: two reference counts, for the saving it tells).
#[derive(Clone)]
pub(crate) struct Link {
    stats: &'static LinkStats,
    /// `None`: past the cap, counted in the totals only.
    series: Option<Arc<Series>>,
    /// Its totals row (the `_other` one past the cap); `None` for a leader's probe and a
    /// tunnel's handle before its request is known.
    row: Option<Arc<TotalCounters>>,
    /// The server is a pool leader: answers count as pool-saved.
    leader: bool,
}

impl Link {
    fn counters(&self) -> &LinkCounters {
        self.series
            .as_deref()
            .map_or(&self.stats.overflow, |s| &s.counters)
    }
}

impl Link {
    /// Counts one request that went on the link, with `body` request body bytes.
    pub(crate) fn request(&self, body: u64) {
        let c = self.counters();
        c.requests.fetch_add(1, Ordering::Relaxed);
        if body > 0 {
            c.sent.fetch_add(body, Ordering::Relaxed);
        }
        // A leader's requests travel the LAN: not the cloud link's.
        if let Some(row) = self.row.as_ref().filter(|_| !self.leader) {
            row.add(T_REQUESTS, 1);
            row.add(T_UP, body);
        }
    }

    /// Counts `bytes` of response body received, gzip-encoded when `gzip`.
    pub(crate) fn received(&self, bytes: u64, gzip: bool) {
        if bytes == 0 {
            return;
        }
        let c = self.counters();
        c.received.fetch_add(bytes, Ordering::Relaxed);
        if gzip {
            c.received_gzip.fetch_add(bytes, Ordering::Relaxed);
        }
        match &self.row {
            Some(row) if self.leader => row.add(T_POOL_SAVED, bytes),
            Some(row) => {
                row.add(T_DOWN, bytes);
                if gzip {
                    row.add(T_DOWN_GZIP, bytes);
                }
            }
            None => {}
        }
    }

    /// Counts an answer the hub inflated itself once its reader ends: `compressed` bytes came
    /// on the link (counted as received already), `plain` were read out of them; the
    /// difference is what gzip saved the link.
    pub(crate) fn inflated(&self, compressed: u64, plain: u64) {
        if let Some(row) = &self.row {
            row.add(T_GZIP_SAVED, plain.saturating_sub(compressed));
        }
    }
}

/// The index in [`VERBS`] of a verb name; `other` for one it does not know.
fn verb_index(verb: &str) -> usize {
    VERBS.iter().position(|v| *v == verb).unwrap_or(N_VERBS - 1)
}

/// A response body that counts its bytes on a [`Link`] as they are read (a watch's while it
/// streams): what an upstream client wraps its body reader in.
pub(crate) struct Counted<R> {
    inner: R,
    link: Link,
    /// The body is gzip-encoded: its bytes count as such too.
    gzip: bool,
}

impl<R> Counted<R> {
    /// `inner`'s bytes counted on `link`, as gzip-encoded when `gzip`.
    pub(crate) fn new(inner: R, link: Link, gzip: bool) -> Counted<R> {
        Counted { inner, link, gzip }
    }

    /// The link its bytes are counted on (an inflater tells it the saving).
    pub(crate) fn link(&self) -> &Link {
        &self.link
    }
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.link.received(n as u64, self.gzip);
        Ok(n)
    }
}

/// A writer or reader that counts the bytes through it (a pool cache's list, for
/// [`LinkStats::pool_served`]; the compressed size of an answer the hub inflates).
pub(crate) struct Tally<T> {
    inner: T,
    /// Bytes written or read so far.
    pub(crate) bytes: u64,
}

impl<T> Tally<T> {
    /// Counts what goes to or comes from `inner`.
    pub(crate) fn new(inner: T) -> Tally<T> {
        Tally { inner, bytes: 0 }
    }

    /// What it counts for.
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &T {
        &self.inner
    }
}

impl<R: std::io::Read> std::io::Read for Tally<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

impl<W: std::io::Write> std::io::Write for Tally<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The component label of a request: the User-Agent's first word (before `/`), trimmed; the
/// map lowercases it. Empty without a User-Agent.
pub(crate) fn component_of(headers: &[(String, String)]) -> &str {
    headers
        .iter()
        .find(|(name, _)| {
            name.len() == "user-agent".len()
                && crate::ascii::eq_ignore_ascii_case(name, "user-agent")
        })
        .map_or("", |(_, value)| crate::ascii::user_agent_product(value))
}

/// The resource label of a path (with or without its query): the plural after
/// `/api/<version>/` or `/apis/<group>/<version>/`, past a legacy `watch` or `proxy` prefix
/// and a namespace; `namespaces` for a Namespace itself; empty for a non-resource path or a
/// discovery document, and for a segment that is not a resource name (percent-escaped).
pub(crate) fn resource_of(path_and_query: &str) -> &str {
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(p, _)| p);
    locate(path).unwrap_or("")
}

/// The resource of a path (without its query); `None` for a non-resource path or a
/// discovery document.
fn locate(path: &str) -> Option<&str> {
    let mut segments = crate::ascii::split_ascii(path, b'/').filter(|s| !s.is_empty());
    let skip = match segments.next() {
        Some("api") => 1,
        Some("apis") => 2,
        _ => return None,
    };
    let rest: [Option<&str>; 5] = {
        let mut it = segments.skip(skip);
        [it.next(), it.next(), it.next(), it.next(), it.next()]
    };
    let mut i = 0;
    if matches!(rest[0], Some("watch" | "proxy")) && rest[1].is_some() {
        i = 1;
    }
    if rest[i] == Some("namespaces")
        && rest[i + 2].is_some_and(|s| !matches!(s, "status" | "finalize"))
    {
        i += 2;
    }
    match rest[i] {
        Some(resource)
            if resource.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
            }) =>
        {
            Some(resource)
        }
        _ => None,
    }
}

/// At most [`MAX_LABEL`] bytes of `s`, cut at a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_LABEL {
        return s;
    }
    let mut end = MAX_LABEL;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A label of the totals table: at most [`MAX_TOTALS_LABEL`] bytes, each of `[a-z0-9._-]`,
/// anything else `_` (no escaping in the file, `/v1/link` or `/metrics`: what bounds them).
fn totals_label(s: &str) -> String {
    s.chars()
        .take(MAX_TOTALS_LABEL)
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect()
}

/// Escapes a label value: backslash, double quote and newline (the metrics' too).
pub(crate) fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(value);
    }
    std::borrow::Cow::Owned(
        value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the exposition line `series` (name and labels) in `text`.
    fn value(text: &str, series: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn page(stats: &LinkStats) -> String {
        let mut out = String::new();
        stats.render(&mut out);
        out
    }

    #[test]
    fn the_resource_is_the_plural_in_the_path() {
        for (path, want) in [
            ("/api/v1/services", "services"),
            ("/api/v1/services?watch=true&resourceVersion=5", "services"),
            (
                "/apis/discovery.k8s.io/v1/endpointslices?limit=500",
                "endpointslices",
            ),
            (
                "/api/v1/namespaces/kube-system/configmaps/leader-hub-p",
                "configmaps",
            ),
            (
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
                "leases",
            ),
            ("/api/v1/nodes/n1/status", "nodes"),
            ("/api/v1/watch/namespaces/default/pods", "pods"),
            ("/api/v1/proxy/nodes/n1", "nodes"),
            ("/api/v1/namespaces/default", "namespaces"),
            ("/api/v1/namespaces/default/finalize", "namespaces"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/watch", "watch"),
            ("/api/v1", ""),
            ("/apis/apps/v1", ""),
            ("/apis", ""),
            ("/readyz", ""),
            ("/version?timeout=32s", ""),
            ("/api/v1/Pods%2F..", ""),
            ("", ""),
        ] {
            assert_eq!(resource_of(path), want, "{path}");
        }
    }

    #[test]
    fn the_component_is_the_user_agent_product_of_the_user_agent() {
        let ua = |v: &str| vec![("User-Agent".to_owned(), v.to_owned())];
        assert_eq!(
            component_of(&ua("kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0")),
            "kube-proxy"
        );
        assert_eq!(component_of(&ua(" coredns ")), "coredns");
        assert_eq!(component_of(&[("accept".into(), "*/*".into())]), "");
    }

    #[test]
    fn requests_and_bytes_add_up_per_series_and_in_the_totals() {
        static S: LinkStats = LinkStats::new();
        let cloud = "https://10.0.0.1:6443";
        let a = S.link(cloud, "list", "kube-proxy", "/api/v1/services", false);
        a.request(0);
        a.received(1000, false);
        a.received(24, false);
        // The same labels, the component written otherwise: the same series.
        let b = S.link(cloud, "list", "Kube-Proxy", "/api/v1/services", false);
        b.request(0);
        b.received(500, true);
        let lease = S.link(
            cloud,
            "update",
            HUB_COMPONENT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            false,
        );
        lease.request(300);
        lease.received(0, false);
        let leader = S.link(
            "leader",
            "list",
            "coredns",
            "/apis/discovery.k8s.io/v1/endpointslices",
            true,
        );
        leader.request(0);
        leader.received(7, false);

        let text = page(&S);
        let series = |name: &str, server: &str, component: &str, resource: &str| {
            value(
                &text,
                &format!(
                    "tinyhub_cloud_{name}_total{{server=\"{server}\",component=\"{component}\",resource=\"{resource}\"}}"
                ),
            )
        };
        assert_eq!(series("requests", cloud, "kube-proxy", "services"), Some(2));
        assert_eq!(
            series("received_bytes", cloud, "kube-proxy", "services"),
            Some(1524)
        );
        assert_eq!(
            series("received_gzip_bytes", cloud, "kube-proxy", "services"),
            Some(500)
        );
        assert_eq!(
            series("sent_bytes", cloud, "kube-proxy", "services"),
            Some(0)
        );
        assert_eq!(series("requests", cloud, "tinyhub", "leases"), Some(1));
        assert_eq!(series("sent_bytes", cloud, "tinyhub", "leases"), Some(300));
        assert_eq!(
            series("received_bytes", "leader", "coredns", "endpointslices"),
            Some(7)
        );
        assert_eq!(text.matches("tinyhub_cloud_requests_total{").count(), 3);
        assert_eq!(value(&text, "tinyhub_cloud_all_requests_total"), Some(4));
        assert_eq!(
            value(&text, "tinyhub_cloud_all_sent_bytes_total"),
            Some(300)
        );
        assert_eq!(
            value(&text, "tinyhub_cloud_all_received_bytes_total"),
            Some(1531)
        );
        assert_eq!(
            value(&text, "tinyhub_cloud_all_received_gzip_bytes_total"),
            Some(500)
        );
        assert!(text.contains("# TYPE tinyhub_cloud_received_bytes_total counter\n"));
        assert!(text.contains("# TYPE tinyhub_cloud_all_received_bytes_total counter\n"));
    }

    #[test]
    fn series_past_the_cap_count_only_in_the_totals() {
        static S: LinkStats = LinkStats::new();
        for i in 0..MAX_SERIES {
            S.link(
                "https://c",
                "list",
                &format!("agent-{i}"),
                "/api/v1/pods",
                false,
            )
            .request(1);
        }
        // A new series past the cap: counted, but without labels of its own.
        let late = S.link("https://c", "list", "one-too-many", "/api/v1/pods", false);
        late.request(10);
        late.received(5, false);
        // A series made before the cap still counts under its labels.
        S.link("https://c", "list", "agent-0", "/api/v1/pods", false)
            .received(3, false);

        let text = page(&S);
        assert_eq!(
            text.matches("tinyhub_cloud_requests_total{").count(),
            MAX_SERIES
        );
        assert!(!text.contains("one-too-many"));
        assert_eq!(
            value(
                &text,
                "tinyhub_cloud_received_bytes_total{server=\"https://c\",component=\"agent-0\",resource=\"pods\"}"
            ),
            Some(3)
        );
        assert_eq!(
            value(&text, "tinyhub_cloud_all_requests_total"),
            Some(MAX_SERIES as u64 + 1)
        );
        assert_eq!(
            value(&text, "tinyhub_cloud_all_sent_bytes_total"),
            Some(MAX_SERIES as u64 + 10)
        );
        assert_eq!(
            value(&text, "tinyhub_cloud_all_received_bytes_total"),
            Some(8)
        );
    }

    #[test]
    fn a_counted_body_counts_each_read_as_it_happens() {
        use std::io::Read;
        static S: LinkStats = LinkStats::new();
        let link = S.link(
            "leader",
            "list",
            "kube-proxy",
            "/apis/discovery.k8s.io/v1/endpointslices",
            true,
        );
        link.request(0);
        let mut body = Counted::new(&b"0123456789"[..], link, true);
        let mut buf = [0u8; 4];
        let received = "tinyhub_cloud_received_bytes_total{server=\"leader\",component=\"kube-proxy\",resource=\"endpointslices\"}";
        assert_eq!(body.read(&mut buf).unwrap(), 4);
        assert_eq!(
            value(&page(&S), received),
            Some(4),
            "counted before the end"
        );
        let mut rest = Vec::new();
        body.read_to_end(&mut rest).unwrap();
        let text = page(&S);
        assert_eq!(value(&text, received), Some(10));
        assert_eq!(
            value(&text, "tinyhub_cloud_all_received_gzip_bytes_total"),
            Some(10)
        );
    }

    #[test]
    fn hostile_labels_are_cut_and_escaped() {
        static S: LinkStats = LinkStats::new();
        let long = "é".repeat(100);
        S.link("https://c", "list", &long, "", false).request(0);
        S.link("https://c", "list", "evil\"}\nx", "", false)
            .request(0);
        let text = page(&S);
        assert!(text.contains(&format!("component=\"{}\"", "é".repeat(32))));
        assert!(text.contains("component=\"evil\\\"}\\nx\""));
    }

    #[test]
    fn a_series_keeps_its_rows_per_verb_and_the_caller_names_the_verb() {
        static S: LinkStats = LinkStats::new();
        let path = "/api/v1/namespaces/d/pods?watch=True";
        let a = S.link("https://c", "watch", "kubelet", path, false);
        let b = S.link("https://d", "watch", "Kubelet", path, false);
        // Two servers, two series, one totals row; the verb is the caller's, not the path's.
        assert!(Arc::ptr_eq(
            a.row.as_ref().unwrap(),
            b.row.as_ref().unwrap()
        ));
        let again = S.link("https://c", "watch", "kubelet", path, false);
        assert!(Arc::ptr_eq(
            a.row.as_ref().unwrap(),
            again.row.as_ref().unwrap()
        ));
        let get = S.link("https://c", "get", "kubelet", path, false);
        assert!(!Arc::ptr_eq(
            a.row.as_ref().unwrap(),
            get.row.as_ref().unwrap()
        ));
        for l in [a, b, again, get] {
            l.request(0);
        }
        S.link("https://c", "no-such-verb", "kubelet", path, false)
            .request(0);
        let verbs: Vec<(&str, u64)> = S
            .totals()
            .iter()
            .map(|(_, _, v, t)| (*v, t[T_REQUESTS]))
            .collect();
        assert_eq!(verbs, [("get", 1), ("watch", 3), ("other", 1)]);
    }

    #[test]
    fn a_tunnel_before_its_request_has_no_totals_row() {
        static S: LinkStats = LinkStats::new();
        let l = S.untotalled("https://c");
        assert!(l.row.is_none());
        l.request(3);
        l.received(10, false);
        assert!(S.totals().is_empty());
        assert_eq!(
            value(&page(&S), "tinyhub_cloud_all_requests_total"),
            Some(1)
        );
    }

    #[test]
    fn totals_labels_are_short_and_need_no_escaping() {
        static S: LinkStats = LinkStats::new();
        S.link(
            "https://c",
            "get",
            &"é\"x".repeat(30),
            "/api/v1/pods",
            false,
        )
        .request(0);
        S.pool_served(&"Ab".repeat(40), "pods", "list", 1);
        let labels: Vec<String> = S.totals().into_iter().map(|(c, ..)| c).collect();
        assert_eq!(labels, ["__x".repeat(10) + "__", "ab".repeat(16)]);
    }

    #[test]
    fn totals_count_the_cloud_link_and_what_leaders_and_gzip_saved() {
        static S: LinkStats = LinkStats::new();
        let row = |c: &str, r: &str, v: &str| {
            S.totals()
                .into_iter()
                .find(|(tc, tr, tv, _)| tc == c && tr == r && *tv == v)
                .map(|(_, _, _, t)| t)
        };
        // Two servers, one row: the server is no part of the key.
        for server in ["https://a", "https://b"] {
            let l = S.link(
                server,
                "list",
                "Kubelet",
                "/api/v1/pods?fieldSelector=x",
                false,
            );
            l.request(0);
            l.received(100, true);
            l.inflated(100, 900);
        }
        assert_eq!(
            row("kubelet", "pods", "list"),
            Some([2, 0, 200, 200, 1600, 0])
        );
        // A leader's answer is saved, not carried; its probe counts nowhere in the totals.
        let l = S.link("leader", "list", "kube-proxy", "/api/v1/services", true);
        l.request(0);
        l.received(50, false);
        S.link("leader", "list", "tinyhub", "/readyz", true)
            .request(0);
        S.pool_served("Kube-Proxy", "services", "list", 25);
        assert_eq!(
            row("kube-proxy", "services", "list"),
            Some([0, 0, 0, 0, 0, 75])
        );
        assert!(S.totals().iter().all(|(c, ..)| c != "tinyhub"));
        let l = S.link("https://a", "update", "tinyhub", "/api/v1/nodes/n", false);
        l.request(10);
        assert_eq!(row("tinyhub", "nodes", "update"), Some([1, 10, 0, 0, 0, 0]));
    }

    #[test]
    fn totals_past_the_cap_go_to_the_other_row() {
        static S: LinkStats = LinkStats::new();
        for i in 0..MAX_TOTALS {
            S.link("https://c", "list", &format!("a{i}"), "/api/v1/pods", false)
                .request(1);
        }
        let late = S.link("https://c", "list", "late", "/api/v1/pods", false);
        late.request(5);
        S.pool_served("later", "pods", "watch", 7);
        let totals = S.totals();
        assert_eq!(totals.len(), MAX_TOTALS + 1);
        let (c, r, v, t) = totals.last().unwrap();
        assert_eq!((c.as_str(), r.as_str(), *v), (OTHER, OTHER, OTHER));
        assert_eq!(*t, [1, 5, 0, 0, 0, 7]);
    }
}
