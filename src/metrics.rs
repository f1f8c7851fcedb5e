//! Prometheus text metrics. YurtHub's `node_yurthub_*` names are kept where the meaning
//! matches, so existing dashboards work; tinyhub's own are under `tinyhub_*`.
//!
//! Counters are process-wide atomics in [`METRICS`]; labelled series live in small maps
//! behind a mutex taken once at the start and once at the end of a request. Rendering is
//! hand-written (no client library): a few dozen lines keep the names exact.
//!
//! It names no feature module: those export their own series as a [`Source`] registered at
//! start (the response filters' `tinyhub_filter_*`, the pool caches' `tinyhub_pool_cache_*`),
//! rendered with the helpers here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub(crate) use crate::link::escape;
use crate::lock;

mod process;

/// Labels YurtHub uses for per-request series: verb, resource, subresources, client.
pub(crate) type RequestLabels = (&'static str, String, String, String);

/// A request of the node's multiplexer to where it reads pool-scope resources from: its
/// [`RequestLabels`] and the server (a cloud server's URL, or a leader hub's).
pub(crate) type TargetLabels = (RequestLabels, String);

/// Requests in flight: a gauge per labels ([`MAX_SERIES`] at most; finished series stay at
/// 0, as YurtHub's do: "this request happened") and their total, every request counted.
pub(crate) struct InFlightSeries<L> {
    series: Mutex<BTreeMap<L, i64>>,
    total: AtomicI64,
}

impl<L: Ord> InFlightSeries<L> {
    const fn new() -> InFlightSeries<L> {
        InFlightSeries {
            series: Mutex::new(BTreeMap::new()),
            total: AtomicI64::new(0),
        }
    }

    /// Counts a request as started; its labels back when they have a series.
    fn enter(&self, labels: L) -> Option<L>
    where
        L: Clone,
    {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut map = lock(&self.series);
        // A series met before (nearly every request) is counted without cloning its labels
        // for the map's entry (allocations, freed at once).
        if let Some(n) = map.get_mut(&labels) {
            *n += 1;
            return Some(labels);
        }
        // Labels come from clients (User-Agent): cap the number of series so a client that
        // invents a new agent per request cannot grow the hub's memory without bound.
        (map.len() < MAX_SERIES).then(|| {
            map.insert(labels.clone(), 1);
            labels
        })
    }

    /// Counts a request [`InFlightSeries::enter`] started as finished.
    fn leave(&self, labels: Option<&L>) {
        self.total.fetch_sub(1, Ordering::Relaxed);
        if let Some(labels) = labels
            && let Some(n) = lock(&self.series).get_mut(labels)
        {
            *n -= 1;
        }
    }

    /// Writes the gauge family `name`, a series per labels (`labels` renders them), and
    /// with `total` (its name and help) the gauge of every request counted.
    fn render(
        &self,
        out: &mut String,
        name: &str,
        help: &str,
        total: Option<(&str, &str)>,
        labels: impl Fn(&L) -> String,
    ) {
        header(out, name, "gauge", help);
        for (series, n) in lock(&self.series).iter() {
            let _ = writeln!(out, "{name}{{{}}} {n}", labels(series));
        }
        if let Some((total_name, total_help)) = total {
            gauge(
                out,
                total_name,
                total_help,
                self.total.load(Ordering::Relaxed),
            );
        }
    }
}

/// Marks the end of a request in its in-flight series when dropped.
pub(crate) struct Entered<L: Ord + 'static> {
    series: &'static InFlightSeries<L>,
    labels: Option<L>,
}

impl<L: Ord + 'static> Drop for Entered<L> {
    fn drop(&mut self) {
        self.series.leave(self.labels.as_ref());
    }
}

/// All of the hub's metrics.
pub(crate) struct Metrics {
    /// Objects written to disk by the cache writer.
    pub cache_objects_written: AtomicU64,
    /// Bytes written to disk by the cache writer.
    pub cache_bytes_written: AtomicU64,
    /// Writes skipped because the same bytes were already on disk.
    pub cache_writes_skipped_identical: AtomicU64,
    /// Writes refused because the cached object was newer.
    pub cache_writes_skipped_stale: AtomicU64,
    /// Objects removed from the cache (watch DELETED, list replacement, 404 prune).
    pub cache_objects_deleted: AtomicU64,
    /// Cache sessions abandoned because the writer queue was full or the body broke off.
    pub cache_sessions_abandoned: AtomicU64,
    /// Cache sessions committed.
    pub cache_sessions_committed: AtomicU64,
    /// List answers proven unchanged by their resourceVersion, not read past their
    /// `metadata` (issue 34; counted in `cache_sessions_committed` too).
    pub cache_lists_unchanged: AtomicU64,
    /// Dropped answers fetched again and committed by the refill thread.
    pub cache_refills: AtomicU64,
    /// Dropped answers not fetched again: a later answer to the same request went whole.
    pub cache_refills_coalesced: AtomicU64,
    /// Requests with a dropped answer waiting for their refill (the cloud reachable), or
    /// being refilled.
    pub cache_refills_waiting: AtomicI64,
    /// Store or decode failures in the writer.
    pub cache_errors: AtomicU64,
    /// Writes that failed because the cache's file system was full (ENOSPC, EDQUOT).
    pub cache_disk_full: AtomicU64,
    /// Flushes to stable storage by the cache's store (fdatasync, fsync, syncfs).
    pub cache_syncs: AtomicU64,
    /// Stored files not served, by [`RefusedFile`] (its order).
    pub cache_refused_files: [AtomicU64; 3],
    /// Messages waiting in the writer queue.
    pub cache_writer_queue_depth: AtomicI64,
    /// Microseconds the writer spent handling messages (its throughput is objects / this).
    pub cache_writer_busy_micros: AtomicU64,
    /// Requests answered from the cache because the cloud was unreachable: the cache had
    /// the answer (a status below 400).
    pub offline_answers: AtomicU64,
    /// Requests the cache could not answer while the cloud was unreachable (a write's 503,
    /// a component not cached, a scope never listed whole, a credential's 403).
    pub offline_refusals: AtomicU64,
    /// Requests refused with 429 at the concurrency cap.
    pub rejected_requests: AtomicU64,
    /// Connections closed before their request arrived, to make room at the connection cap.
    pub evicted_connections: AtomicU64,
    /// Transport failures talking to the cloud.
    pub upstream_errors: AtomicU64,
    /// Idempotent requests retried on another backend after a transport failure.
    pub upstream_retries: AtomicU64,
    /// Client certificates put to use, the first one too (issued by CSR, or kubelet's).
    pub client_certificate_rotations: AtomicU64,
    /// Serving certificates issued and installed.
    pub serving_certificate_rotations: AtomicU64,
    /// Node lease renewals the cloud took (lease mode).
    pub lease_renewals: AtomicU64,
    /// Node lease probes that failed (lease mode).
    pub lease_renewal_failures: AtomicU64,
    /// Renewed node leases sent to the disk cache.
    pub lease_disk_writes: AtomicU64,
    /// Cache keys whose last write failed (the cache writer's `error_keys`).
    pub error_keys_count: AtomicI64,
    /// 1 while the list of failed keys on disk says what the writer holds, else 0.
    pub error_keys_persistency_status: AtomicI64,
    /// Requests being served now, but for those [`Metrics::aggregated`] counts.
    in_flight: InFlightSeries<RequestLabels>,
    /// Pool-scope lists and watches served by the node's multiplexer (its watch caches,
    /// `proxy::pool_local`), and on a leader the followers' on its multiplexer port: what
    /// YurtHub counts as "aggregated".
    aggregated: InFlightSeries<RequestLabels>,
    /// The node's multiplexer's own lists and watches (`clients::pool_watch`) by the server
    /// they went to.
    targets: InFlightSeries<TargetLabels>,
    traffic: Mutex<BTreeMap<RequestLabels, u64>>,
    /// The series other modules export, rendered at each scrape ([`Metrics::register`]).
    sources: Mutex<Vec<Source>>,
    /// A leader's multiplexer port: requests by follower node and status code (an entry is
    /// the node's name, a code and a count: under 100 bytes; [`MAX_SERIES`] at most).
    multiplexer: Mutex<BTreeMap<(String, u16), u64>>,
    /// Connections to each remote server (`host:port`: a cloud server or a leader hub),
    /// [`MAX_SERIES`] servers at most. A server stays at 0 open once its connections are gone.
    conns: Mutex<BTreeMap<String, ConnCount>>,
}

/// The connections of one remote server.
#[derive(Debug, Default, Clone, Copy)]
struct ConnCount {
    /// Open now.
    open: i64,
    /// TLS connections ever made: each cost a full handshake, on both sides.
    handshakes: u64,
}

/// The follower label of requests past the series cap; never a node's name (no `(` in DNS
/// names).
const OTHER_FOLLOWERS: &str = "(other)";

/// Most labelled series kept per metric; requests past it count only in the totals. The
/// link series (`crate::link`) share the figure.
const MAX_SERIES: usize = crate::link::MAX_SERIES;

/// Why a stored file was not served (`tinyhub_cache_refused_files_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusedFile {
    /// Larger than any object the hub stores: never read.
    Size,
    /// Not a JSON object with a name.
    NotObject,
    /// An object other than its path names.
    NamesOther,
}

impl RefusedFile {
    /// Every reason, in the order of [`Metrics::cache_refused_files`].
    const ALL: [RefusedFile; 3] = [
        RefusedFile::Size,
        RefusedFile::NotObject,
        RefusedFile::NamesOther,
    ];

    /// The `reason` label.
    fn label(self) -> &'static str {
        match self {
            RefusedFile::Size => "size",
            RefusedFile::NotObject => "not_object",
            RefusedFile::NamesOther => "names_other",
        }
    }
}

impl Metrics {
    /// Counts a stored file not served.
    pub(crate) fn refused_file(&self, why: RefusedFile) {
        self.cache_refused_files[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Series another module exports: appends its lines (`# HELP`, `# TYPE`, samples; see
/// [`header`], [`summary`], [`escape`]) to the page at each scrape.
pub(crate) type Source = Box<dyn Fn(&mut String) + Send + Sync>;

/// The process-wide metrics.
pub(crate) static METRICS: Metrics = Metrics::new();

impl Metrics {
    /// No counts, no sources: [`METRICS`], or a test's own.
    pub(crate) const fn new() -> Metrics {
        Metrics {
            cache_objects_written: AtomicU64::new(0),
            cache_bytes_written: AtomicU64::new(0),
            cache_writes_skipped_identical: AtomicU64::new(0),
            cache_writes_skipped_stale: AtomicU64::new(0),
            cache_objects_deleted: AtomicU64::new(0),
            cache_sessions_abandoned: AtomicU64::new(0),
            cache_sessions_committed: AtomicU64::new(0),
            cache_lists_unchanged: AtomicU64::new(0),
            cache_refills: AtomicU64::new(0),
            cache_refills_coalesced: AtomicU64::new(0),
            cache_refills_waiting: AtomicI64::new(0),
            cache_errors: AtomicU64::new(0),
            cache_disk_full: AtomicU64::new(0),
            cache_syncs: AtomicU64::new(0),
            cache_refused_files: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            cache_writer_queue_depth: AtomicI64::new(0),
            cache_writer_busy_micros: AtomicU64::new(0),
            offline_answers: AtomicU64::new(0),
            offline_refusals: AtomicU64::new(0),
            rejected_requests: AtomicU64::new(0),
            evicted_connections: AtomicU64::new(0),
            upstream_errors: AtomicU64::new(0),
            upstream_retries: AtomicU64::new(0),
            client_certificate_rotations: AtomicU64::new(0),
            serving_certificate_rotations: AtomicU64::new(0),
            lease_renewals: AtomicU64::new(0),
            lease_renewal_failures: AtomicU64::new(0),
            lease_disk_writes: AtomicU64::new(0),
            error_keys_count: AtomicI64::new(0),
            error_keys_persistency_status: AtomicI64::new(0),
            in_flight: InFlightSeries::new(),
            aggregated: InFlightSeries::new(),
            targets: InFlightSeries::new(),
            traffic: Mutex::new(BTreeMap::new()),
            sources: Mutex::new(Vec::new()),
            multiplexer: Mutex::new(BTreeMap::new()),
            conns: Mutex::new(BTreeMap::new()),
        }
    }

    /// Renders `source`'s series on every page from now on, after the hub's own and those
    /// registered before it. Feature modules register at start (app/build.rs): the metrics know
    /// none of them.
    pub(crate) fn register(&self, source: Source) {
        lock(&self.sources).push(source);
    }

    /// Adds one to a counter.
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks a request as started; the guard marks it finished when dropped.
    pub(crate) fn start_request(&'static self, labels: RequestLabels) -> InFlight {
        InFlight {
            metrics: self,
            entered: Entered {
                labels: self.in_flight.enter(labels),
                series: &self.in_flight,
            },
        }
    }

    /// Marks a pool-scope request served by the node's multiplexer (or, on a leader, a
    /// follower's) as started, apart from the others as YurtHub counts it; the guard marks
    /// it finished when dropped.
    pub(crate) fn start_aggregated(&'static self, labels: RequestLabels) -> Entered<RequestLabels> {
        Entered {
            labels: self.aggregated.enter(labels),
            series: &self.aggregated,
        }
    }

    /// Marks a list or watch of the node's multiplexer to `server` as started; the guard
    /// marks it finished when dropped.
    pub(crate) fn start_target(
        &'static self,
        labels: RequestLabels,
        server: String,
    ) -> Entered<TargetLabels> {
        Entered {
            labels: self.targets.enter((labels, server)),
            series: &self.targets,
        }
    }

    /// Counts bytes the cloud sent for a request.
    pub(crate) fn add_traffic(&self, labels: &RequestLabels, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut map = lock(&self.traffic);
        let room = map.len() < MAX_SERIES;
        match map.get_mut(labels) {
            Some(total) => *total += bytes,
            None if room => {
                map.insert(labels.clone(), bytes);
            }
            None => {}
        }
    }

    /// Counts a request on the multiplexer port from `follower` (its node's name, "" for a
    /// peer refused before it was known) answered with `code`. Past the series cap a new
    /// follower counts as `(other)`.
    pub(crate) fn count_multiplexer(&self, follower: &str, code: u16) {
        let mut map = lock(&self.multiplexer);
        let known = map.len() < MAX_SERIES || map.contains_key(&(follower.to_owned(), code));
        let follower = if known { follower } else { OTHER_FOLLOWERS };
        *map.entry((follower.to_owned(), code)).or_insert(0) += 1;
    }

    /// Counts a new connection to `server` (`host:port`) as open until the guard is
    /// dropped, and as a handshake when it is `tls`. Past the series cap a new server is not
    /// counted.
    pub(crate) fn open_conn(&'static self, server: &str, tls: bool) -> OpenConn {
        let mut map = lock(&self.conns);
        let known = map.len() < MAX_SERIES || map.contains_key(server);
        let server = known.then(|| {
            let count = map.entry(server.to_owned()).or_default();
            count.open += 1;
            count.handshakes += u64::from(tls);
            server.to_owned()
        });
        OpenConn {
            metrics: self,
            server,
        }
    }

    /// The Prometheus text exposition, with one health series per backend.
    pub(crate) fn render(&self, backends: &[(String, bool)]) -> String {
        let mut out = String::with_capacity(4096);
        self.render_yurthub(&mut out, backends);
        self.render_hub(&mut out);
        self.render_cache(&mut out);
        self.render_cloud(&mut out);
        // What the feature modules export (the response filters, the pool's watch caches),
        // in the order app/build.rs registered them.
        for source in lock(&self.sources).iter() {
            source(&mut out);
        }
        // The upstream link's requests and bytes (`tinyhub_cloud_*`, see `link`).
        crate::link::LINK.render(&mut out);
        process::ProcessStats::read().render(&mut out);
        out
    }

    /// YurtHub's series first, as YurtHub names them: the servers' health, the requests in
    /// flight and where pool-scope ones went, the refusals, the connections to each server
    /// (with the hub's own handshake count), the error keys.
    fn render_yurthub(&self, out: &mut String, backends: &[(String, bool)]) {
        header(
            out,
            "node_yurthub_server_healthy_status",
            "gauge",
            "healthy status of remote servers. 1: healthy, 0: unhealthy",
        );
        for (server, healthy) in backends {
            let _ = writeln!(
                out,
                "node_yurthub_server_healthy_status{{server=\"{}\"}} {}",
                escape(server),
                u8::from(*healthy)
            );
        }
        self.in_flight.render(
            out,
            "node_yurthub_in_flight_requests_collector",
            "collector of in flight requests handling by hub agent(exclude aggregated in flight requests)",
            Some((
                "node_yurthub_in_flight_requests_total",
                "total of in flight requests handling by hub agent(exclude aggregated in flight requests)",
            )),
            request_labels,
        );
        self.aggregated.render(
            out,
            "node_yurthub_aggregated_in_flight_requests_collector",
            "collector of in flight requests aggregated by multiplexer manager",
            Some((
                "node_yurthub_aggregated_in_flight_requests_total",
                "total of in flight requests aggregated by multiplexer manager",
            )),
            request_labels,
        );
        self.targets.render(
            out,
            "node_yurthub_target_for_multiplexer_requests_collector",
            "collector of requests for pool scope metadata with which server are forwarded",
            None,
            |(labels, server)| format!("{},server=\"{}\"", request_labels(labels), escape(server)),
        );
        counter(
            out,
            "node_yurthub_rejected_requests_counter",
            "counter of rejected requests for exceeding in flight limit in hub agent",
            &self.rejected_requests,
        );
        header(
            out,
            "node_yurthub_closable_conns_collector",
            "gauge",
            "collector of underlay tcp connection from hub agent to remote server",
        );
        let conns = lock(&self.conns);
        for (server, n) in conns.iter() {
            let _ = writeln!(
                out,
                "node_yurthub_closable_conns_collector{{server=\"{}\"}} {}",
                escape(server),
                n.open
            );
        }
        header(
            out,
            "tinyhub_upstream_tls_handshakes_total",
            "counter",
            "TLS connections the hub opened to each remote server: one handshake each",
        );
        for (server, n) in conns.iter() {
            let _ = writeln!(
                out,
                "tinyhub_upstream_tls_handshakes_total{{server=\"{}\"}} {}",
                escape(server),
                n.handshakes
            );
        }
        gauge(
            out,
            "node_yurthub_error_keys_count",
            "error keys count",
            self.error_keys_count.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "node_yurthub_error_keys_persistency_status",
            "error keys persistency status 1: ready, 0: notReady",
            self.error_keys_persistency_status.load(Ordering::Relaxed),
        );
    }

    /// The hub's own work: certificate rotations, the node lease, connections evicted, and
    /// YurtHub's traffic series.
    fn render_hub(&self, out: &mut String) {
        counter(
            out,
            "tinyhub_client_certificate_rotations_total",
            "client certificates put to use: issued to the hub, or kubelet's (the first one too)",
            &self.client_certificate_rotations,
        );
        counter(
            out,
            "tinyhub_serving_certificate_rotations_total",
            "serving certificates issued to the hub for its HTTPS port",
            &self.serving_certificate_rotations,
        );
        counter(
            out,
            "tinyhub_node_lease_renewals_total",
            "renewals of the node lease the cloud took (edge mode, lease heartbeat)",
            &self.lease_renewals,
        );
        counter(
            out,
            "tinyhub_node_lease_renewal_failures_total",
            "node lease renewals that failed (each makes its server unhealthy)",
            &self.lease_renewal_failures,
        );
        counter(
            out,
            "tinyhub_node_lease_disk_writes_total",
            "renewed node leases written to the cache (a change other than the renewal, or every 10 minutes)",
            &self.lease_disk_writes,
        );
        counter(
            out,
            "tinyhub_evicted_connections_total",
            "connections closed before their request arrived, to make room at the connection cap",
            &self.evicted_connections,
        );
        header(
            out,
            "node_yurthub_proxy_traffic_collector",
            "counter",
            "collector of proxy response traffic by hub agent(unit: byte)",
        );
        for ((verb, resource, sub, client), n) in lock(&self.traffic).iter() {
            let _ = writeln!(
                out,
                "node_yurthub_proxy_traffic_collector{{client=\"{}\",verb=\"{verb}\",resource=\"{}\",subresources=\"{}\"}} {n}",
                escape(client),
                escape(resource),
                escape(sub)
            );
        }
    }

    /// The disk cache's writer, the heap, the refills.
    fn render_cache(&self, out: &mut String) {
        counter(
            out,
            "tinyhub_cache_objects_written_total",
            "objects written to the disk cache",
            &self.cache_objects_written,
        );
        counter(
            out,
            "tinyhub_cache_bytes_written_total",
            "bytes written to the disk cache",
            &self.cache_bytes_written,
        );
        counter(
            out,
            "tinyhub_cache_writes_skipped_identical_total",
            "object writes skipped because the same bytes were on disk",
            &self.cache_writes_skipped_identical,
        );
        counter(
            out,
            "tinyhub_cache_writes_skipped_stale_total",
            "object writes refused because the cached object was newer",
            &self.cache_writes_skipped_stale,
        );
        counter(
            out,
            "tinyhub_cache_objects_deleted_total",
            "objects removed from the disk cache",
            &self.cache_objects_deleted,
        );
        counter(
            out,
            "tinyhub_cache_sessions_committed_total",
            "responses whose objects were persisted",
            &self.cache_sessions_committed,
        );
        counter(
            out,
            "tinyhub_cache_lists_unchanged_total",
            "list answers proven unchanged by their resourceVersion (committed, not read past their metadata)",
            &self.cache_lists_unchanged,
        );
        counter(
            out,
            "tinyhub_cache_sessions_abandoned_total",
            "responses not persisted because the writer queue was full or the body broke off",
            &self.cache_sessions_abandoned,
        );
        counter(
            out,
            "tinyhub_cache_errors_total",
            "disk or decode failures in the cache writer",
            &self.cache_errors,
        );
        counter(
            out,
            "tinyhub_cache_disk_full_total",
            "cache writes that failed because the disk was full",
            &self.cache_disk_full,
        );
        counter(
            out,
            "tinyhub_cache_syncs_total",
            "flushes to stable storage by the disk cache (fdatasync, fsync, syncfs): each writes at least a page of flash",
            &self.cache_syncs,
        );
        let name = "tinyhub_cache_refused_files_total";
        header(
            out,
            name,
            "counter",
            "stored files not served: over the size bound, not an object, or naming another object than their path",
        );
        for (reason, n) in RefusedFile::ALL.iter().zip(&self.cache_refused_files) {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                reason.label(),
                n.load(Ordering::Relaxed)
            );
        }
        gauge(
            out,
            "tinyhub_cache_writer_queue_depth",
            "messages waiting for the cache writer",
            self.cache_writer_queue_depth.load(Ordering::Relaxed).max(0),
        );
        let busy = self.cache_writer_busy_micros.load(Ordering::Relaxed) as f64 / 1e6;
        header(
            out,
            "tinyhub_cache_writer_busy_seconds_total",
            "counter",
            "time the cache writer spent decoding and persisting",
        );
        let _ = writeln!(out, "tinyhub_cache_writer_busy_seconds_total {busy:.6}");
        gauge(
            out,
            "tinyhub_heap_bytes",
            "heap bytes the hub holds now (its own accounting)",
            crate::alloc::Counting::live() as i64,
        );
        gauge(
            out,
            "tinyhub_heap_peak_bytes",
            "the most heap bytes the hub has held",
            crate::alloc::Counting::peak() as i64,
        );
        counter(
            out,
            "tinyhub_cache_refills_total",
            "answers dropped for a full writer queue, fetched again and persisted",
            &self.cache_refills,
        );
        counter(
            out,
            "tinyhub_cache_refills_coalesced_total",
            "dropped answers not fetched again: a later answer to the same request reached the writer whole",
            &self.cache_refills_coalesced,
        );
        gauge(
            out,
            "tinyhub_cache_refills_waiting",
            "requests whose dropped answer waits to be fetched again while the cloud is reachable, or is being fetched",
            self.cache_refills_waiting.load(Ordering::Relaxed).max(0),
        );
    }

    /// The answers given without the cloud, its failures and retries, the multiplexer port's
    /// requests.
    fn render_cloud(&self, out: &mut String) {
        counter(
            out,
            "tinyhub_offline_answers_total",
            "requests answered from the cache while the cloud was unreachable (status below 400; refusals are tinyhub_offline_refusals_total)",
            &self.offline_answers,
        );
        counter(
            out,
            "tinyhub_offline_refusals_total",
            "requests the cache could not answer while the cloud was unreachable (status 400 or above: writes, components not cached, scopes never listed whole)",
            &self.offline_refusals,
        );
        counter(
            out,
            "tinyhub_upstream_errors_total",
            "transport failures talking to the cloud",
            &self.upstream_errors,
        );
        counter(
            out,
            "tinyhub_upstream_retries_total",
            "idempotent requests retried on another backend",
            &self.upstream_retries,
        );
        header(
            out,
            "tinyhub_multiplexer_requests_total",
            "counter",
            "requests of the pool's follower hubs on this leader's multiplexer port, by follower node and status (200 served, 403 refused, 429 and 503 cache not ready)",
        );
        for ((follower, code), n) in lock(&self.multiplexer).iter() {
            let _ = writeln!(
                out,
                "tinyhub_multiplexer_requests_total{{follower=\"{}\",code=\"{code}\"}} {n}",
                escape(follower)
            );
        }
    }
}

/// The `_sum` (seconds, from `nanos`) and `_count` lines of summary `name` under `label`.
pub(crate) fn summary(out: &mut String, name: &str, label: &str, nanos: u64, count: u64) {
    let seconds = nanos as f64 / 1e9;
    let _ = writeln!(
        out,
        "{name}_sum{{{label}}} {seconds:.9}\n{name}_count{{{label}}} {count}"
    );
}

/// `verb="…",resource="…",subresources="…",client="…"`, escaped.
fn request_labels((verb, resource, sub, client): &RequestLabels) -> String {
    format!(
        "verb=\"{verb}\",resource=\"{}\",subresources=\"{}\",client=\"{}\"",
        escape(resource),
        escape(sub),
        escape(client)
    )
}

/// Marks the end of a request in the in-flight series when dropped.
pub(crate) struct InFlight {
    metrics: &'static Metrics,
    entered: Entered<RequestLabels>,
}

impl InFlight {
    /// Counts bytes the cloud sent for this request under its labels.
    pub(crate) fn add_traffic(&self, bytes: u64) {
        if let Some(labels) = &self.entered.labels {
            self.metrics.add_traffic(labels, bytes);
        }
    }
}

/// One open connection to a remote server, counted in
/// `node_yurthub_closable_conns_collector` until dropped.
pub(crate) struct OpenConn {
    metrics: &'static Metrics,
    /// `None`: past the series cap, not counted.
    server: Option<String>,
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        if let Some(server) = self.server.take()
            && let Some(n) = lock(&self.metrics.conns).get_mut(&server)
        {
            n.open -= 1;
        }
    }
}

/// The `# HELP` and `# TYPE` lines of metric `name`.
pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, value: &AtomicU64) {
    header(out, name, "counter", help);
    let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
}

fn gauge(out: &mut String, name: &str, help: &str, value: i64) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_series_go_up_and_back_to_zero() {
        static M: Metrics = Metrics::new();
        let labels: RequestLabels = ("list", "pods".into(), "".into(), "kubelet".into());
        let guard = M.start_request(labels.clone());
        assert!(M.render(&[]).contains(
            "node_yurthub_in_flight_requests_collector{verb=\"list\",resource=\"pods\",subresources=\"\",client=\"kubelet\"} 1"
        ));
        guard.add_traffic(100);
        drop(guard);
        let text = M.render(&[
            ("https://a:6443".into(), true),
            ("https://b:6443".into(), false),
        ]);
        assert!(text.contains("client=\"kubelet\"} 0"));
        assert!(text.contains("node_yurthub_proxy_traffic_collector{client=\"kubelet\",verb=\"list\",resource=\"pods\",subresources=\"\"} 100"));
        assert!(text.contains("node_yurthub_server_healthy_status{server=\"https://a:6443\"} 1"));
        assert!(text.contains("node_yurthub_server_healthy_status{server=\"https://b:6443\"} 0"));
        assert!(text.contains("node_yurthub_in_flight_requests_total 0"));
        assert!(text.contains("tinyhub_heap_bytes "));
        assert!(text.contains("tinyhub_cache_writer_busy_seconds_total "));
    }

    #[test]
    fn multiplexer_requests_count_per_follower_and_code_within_the_cap() {
        static M: Metrics = Metrics::new();
        M.count_multiplexer("edge-2", 200);
        M.count_multiplexer("edge-2", 200);
        M.count_multiplexer("", 403);
        let text = M.render(&[]);
        assert!(text.contains("# TYPE tinyhub_multiplexer_requests_total counter\n"));
        assert!(
            text.contains(
                "tinyhub_multiplexer_requests_total{follower=\"edge-2\",code=\"200\"} 2\n"
            )
        );
        assert!(
            text.contains("tinyhub_multiplexer_requests_total{follower=\"\",code=\"403\"} 1\n")
        );
        for i in 0..MAX_SERIES {
            M.count_multiplexer(&format!("node-{i}"), 200);
        }
        // Known series keep counting; new followers past the cap share one series.
        M.count_multiplexer("edge-2", 200);
        M.count_multiplexer("late-node", 200);
        let text = M.render(&[]);
        assert!(
            text.contains(
                "tinyhub_multiplexer_requests_total{follower=\"edge-2\",code=\"200\"} 3\n"
            )
        );
        assert!(!text.contains("late-node"));
        assert!(
            text.contains("tinyhub_multiplexer_requests_total{follower=\"(other)\",code=\"200\"} ")
        );
    }

    #[test]
    fn multiplexer_requests_count_apart_from_the_others() {
        static M: Metrics = Metrics::new();
        let labels: RequestLabels = ("watch", "services".into(), "".into(), "kube-proxy".into());
        let served = M.start_aggregated(labels.clone());
        let feed = M.start_target(
            (
                "watch",
                "services".into(),
                "".into(),
                "multiplexer-proxy-edge-1".into(),
            ),
            "https://10.0.0.5:10269".into(),
        );
        let text = M.render(&[]);
        for line in [
            "node_yurthub_aggregated_in_flight_requests_collector{verb=\"watch\",resource=\"services\",subresources=\"\",client=\"kube-proxy\"} 1",
            "node_yurthub_aggregated_in_flight_requests_total 1",
            "node_yurthub_in_flight_requests_total 0",
            "node_yurthub_target_for_multiplexer_requests_collector{verb=\"watch\",resource=\"services\",subresources=\"\",client=\"multiplexer-proxy-edge-1\",server=\"https://10.0.0.5:10269\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(!text.contains("node_yurthub_in_flight_requests_collector{"));
        drop((served, feed));
        let text = M.render(&[]);
        assert!(text.contains("node_yurthub_aggregated_in_flight_requests_total 0\n"));
        assert!(text.contains(
            "client=\"multiplexer-proxy-edge-1\",server=\"https://10.0.0.5:10269\"} 0\n"
        ));
    }

    #[test]
    fn open_connections_count_per_server_within_the_cap() {
        static M: Metrics = Metrics::new();
        let named = |text: &str, name: &str, server: &str| {
            let prefix = format!("{name}{{server=\"{server}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .map(str::to_owned)
        };
        let series =
            |text: &str, server: &str| named(text, "node_yurthub_closable_conns_collector", server);
        let handshakes =
            |text: &str, server: &str| named(text, "tinyhub_upstream_tls_handshakes_total", server);
        let a = M.open_conn("10.0.0.1:6443", true);
        let b = M.open_conn("10.0.0.1:6443", true);
        let leader = M.open_conn("10.0.0.9:10269", false);
        let text = M.render(&[]);
        assert!(text.contains("# TYPE node_yurthub_closable_conns_collector gauge\n"));
        assert_eq!(series(&text, "10.0.0.1:6443").as_deref(), Some("2"));
        assert_eq!(series(&text, "10.0.0.9:10269").as_deref(), Some("1"));
        drop(a);
        drop(leader);
        let text = M.render(&[]);
        assert_eq!(series(&text, "10.0.0.1:6443").as_deref(), Some("1"));
        // A server whose connections are gone stays, at 0.
        assert_eq!(series(&text, "10.0.0.9:10269").as_deref(), Some("0"));
        // Handshakes count every TLS connection made, closed or not; plain ones none.
        assert_eq!(handshakes(&text, "10.0.0.1:6443").as_deref(), Some("2"));
        assert_eq!(handshakes(&text, "10.0.0.9:10269").as_deref(), Some("0"));
        let more: Vec<OpenConn> = (0..MAX_SERIES)
            .map(|i| M.open_conn(&format!("10.1.{}.{}:6443", i / 256, i % 256), true))
            .collect();
        let late = M.open_conn("10.9.9.9:6443", true);
        let text = M.render(&[]);
        assert_eq!(series(&text, "10.9.9.9:6443"), None, "past the cap");
        assert_eq!(
            text.matches("node_yurthub_closable_conns_collector{")
                .count(),
            MAX_SERIES
        );
        drop((b, more, late));
        assert_eq!(
            series(&M.render(&[]), "10.0.0.1:6443").as_deref(),
            Some("0")
        );
    }

    #[test]
    fn hostile_label_values_are_escaped() {
        static M: Metrics = Metrics::new();
        let _g = M.start_request(("get", "pods".into(), "".into(), "evil\"}\n".into()));
        assert!(M.render(&[]).contains("client=\"evil\\\"}\\n\"} 1"));
    }
}
