//! Case 9, a pool of hubs (issue 16): the link economy of pool-scope resources, and the
//! memory of the pool's leader hub.
//!
//! **Link economy.** A pool of simulated nodes, each running kube-proxy and coredns (their
//! User-Agents; each lists Services and `discovery.k8s.io/v1` EndpointSlices at
//! resourceVersion 0, then watches them from the list's resourceVersion with bookmarks, as
//! their informers do), against a stand-in cloud of its own holding the same fixtures in each
//! setup; then a churn of EndpointSlice updates made in the cloud. Two setups, alternating
//! round by round: **direct** (every client talks to the cloud) and **pool** (one hub per
//! node, edge-1 named leader by the `leader-hub-pool-a` ConfigMap, each node's clients
//! going through its own hub). The figure is what the cloud sends ([`Cloud::bytes_sent`]:
//! response heads and bodies as the stand-in writes them, before TLS) during the start-up
//! (lists and watches opening) and during the churn, until every client has seen the last
//! update; with the requests the cloud answered, and how many EndpointSlice watches the
//! cloud held during the churn, which says what was measured: one per node when each hub
//! reads the cloud for itself (node-level sharing), one for the pool when followers read
//! through the leader.
//!
//! **Leader memory.** One hub, edge-1, the pool's leader, over a cloud with more
//! EndpointSlices: its peak RSS after its own two clients, simulated followers (TLS clients
//! with a node's certificate and the User-Agent `multiplexer-proxy-edge-N`, listing and
//! watching both resources on the leader's multiplexer port as a follower hub's feeders do;
//! cheaper on a two-core machine than as many hub processes, and the leader sees the same
//! requests) and a churn; beside the same hub idle (ready, its caches filled at start, before
//! any client). When the leader does not open its multiplexer port (a build without it), the
//! followers are left out and the section says so.
//!
//! Design decisions: a fresh cloud per run (the other cases' cloud holds 20,000
//! EndpointSlices by then, and a run's bytes must be its own); the leader starts first and
//! its node's clients fill its caches before the followers start (a follower turned away by
//! a warming leader reads the cloud until its watch ends, minutes later: not the pool's
//! steady state); the hubs keep their response filters and YurtHub's 10 s heartbeat (what a
//! node runs), and the clients ask for gzip as client-go does (the cloud compresses big
//! lists, never watches).
//!
//! The pool is built here by a minimal builder of its own ([`PoolHubs`]); the integration
//! tests' pool builder (tests/support) is meant to replace it. Clients are threads of this
//! process ([`Reflectors`]), one per client and resource, each a small list-then-watch loop
//! that re-watches from its last resourceVersion when a stream ends and re-lists on 410.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::json;
use ureq::Agent;

use crate::client::{DirectTls, ProcMem, agent, metrics, proc_mem, wait_health};
use crate::online::{COREDNS, KUBE_PROXY};
use crate::report::{Report, Section, Table};
use crate::stats::{count, ratio, size};
use crate::support::hub::{Hub, HubSpec, TempDir};
use crate::support::{Auth, Cloud, RecordedRequest, lock};
use crate::{Bench, Running};

/// The pool's name.
pub(crate) const POOL: &str = "pool-a";
/// The pool-scope resources, as the clients list them.
const SERVICES: &str = "/api/v1/services";
/// See [`SERVICES`].
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
/// The cloud's resource name of [`SLICES`], for its watch count.
const SLICES_RESOURCE: &str = "endpointslices";
/// Time allowed for the hubs to start and every client to list and watch.
const START: Duration = Duration::from_secs(180);
/// Time allowed for the last update to reach every client.
const DELIVERY: Duration = Duration::from_secs(180);
/// A client answered 429 (a cache warming) or 503 tries again after this (`Retry-After: 1`).
const RETRY: Duration = Duration::from_secs(1);
/// Consecutive failed attempts (connection refused, 429, 503) after which a client gives up.
const ATTEMPTS: u32 = 60;

/// Node `edge-<i>` (1-based).
pub(crate) fn node(i: usize) -> String {
    format!("edge-{i}")
}

/// Node `edge-<i>`'s address: `127.0.0.<i + 1>` (`127.0.0.2` for the leader, edge-1).
pub(crate) fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, (i + 1) as u8)
}

/// The first word of a User-Agent, for labels.
fn component(ua: &str) -> &str {
    ua.split('/').next().unwrap_or(ua)
}

/// The cloud of one run: `services` Services, `slices` EndpointSlices, Nodes `edge-1` to
/// `edge-<nodes>` in NodePool `pool-a`, and the pool's leader ConfigMap naming edge-1.
fn pool_cloud(nodes: usize, services: usize, slices: usize) -> Cloud {
    let cloud = Cloud::start();
    cloud.populate_services(services);
    cloud.populate_endpointslices(slices, nodes);
    let names: Vec<String> = (1..=nodes).map(node).collect();
    for n in &names {
        cloud.node(n, Some(POOL), &[]);
    }
    pool_of(&cloud, &names);
    cloud
}

/// NodePool `pool-a` of `names`, and its leader ConfigMap naming edge-1, with Services and
/// EndpointSlices pool-scoped.
pub(crate) fn pool_of(cloud: &Cloud, names: &[String]) {
    cloud.nodepool(POOL, &names.iter().map(String::as_str).collect::<Vec<_>>());
    let name = format!("leader-hub-{POOL}");
    cloud.create(
        "configmaps",
        json!({
            "metadata": {"name": name, "namespace": "kube-system",
                         "labels": {"openyurt.io/configmap-name": name}},
            "data": {
                "leaders": format!("{}/{}", node(1), node_ip(1)),
                "enable-leader-election": "true",
                "interconnectivity": "true",
                "pool-scoped-metadata": "/v1/services,discovery.k8s.io/v1/endpointslices",
            },
        }),
    );
}

/// A pool of hubs on this machine: node `edge-<i>` listening on `127.0.0.<i + 1>`, all with
/// the same `--multiplexer-port`, edge-1 the leader (by the cloud's ConfigMap). The leader
/// starts first ([`PoolHubs::start_leader`]), the followers when the caller has made sure
/// the leader's caches are filled ([`PoolHubs::start_followers`]): a follower turned away by a
/// leader still filling its cache reads from the cloud until its watch ends (minutes), which
/// is not the pool's steady state.
///
/// A minimal builder of the benchmark's own; the integration tests' pool builder
/// (tests/support) is to replace it.
pub struct PoolHubs {
    /// The hubs, edge-1 first.
    pub hubs: Vec<Running>,
    /// The multiplexer port of every hub.
    pub port: u16,
    /// Nodes in the pool (hubs started or to start).
    nodes: usize,
    /// The leader's multiplexer port accepted connections after its start.
    pub leader_serves: bool,
    /// Each hub's directory (cache, root), removed with the pool.
    dirs: Vec<TempDir>,
    /// Names the directories.
    tag: String,
}

impl PoolHubs {
    /// Starts the hub of edge-1, the leader of a pool of `nodes`, and waits until it holds
    /// the cloud healthy and (10 s at most: a build without the port) accepts connections on
    /// its multiplexer port.
    pub fn start_leader(cloud: &Cloud, nodes: usize, tag: &str) -> Result<PoolHubs, String> {
        let mut pool = PoolHubs {
            hubs: Vec::new(),
            port: multiplexer_port(nodes)?,
            nodes,
            leader_serves: false,
            dirs: Vec::new(),
            tag: tag.to_owned(),
        };
        pool.start_nodes(cloud, 1..=1)?;
        let addr = SocketAddr::from((node_ip(1), pool.port));
        pool.leader_serves = port_open(addr, Duration::from_secs(10));
        Ok(pool)
    }

    /// Starts the other nodes' hubs at once, and waits until each holds the cloud healthy.
    pub fn start_followers(&mut self, cloud: &Cloud) -> Result<(), String> {
        self.start_nodes(cloud, 2..=self.nodes)
    }

    /// Starts the hubs of `nodes` in parallel and waits until each holds the cloud healthy.
    fn start_nodes(
        &mut self,
        cloud: &Cloud,
        nodes: std::ops::RangeInclusive<usize>,
    ) -> Result<(), String> {
        let first = *nodes.start();
        for i in nodes.clone() {
            self.dirs
                .push(TempDir::new(&format!("{}-{}", self.tag, node(i))));
        }
        let specs: Vec<HubSpec> = nodes
            .map(|i| hub_spec(cloud, i, self.port, self.dirs[i - 1].path()))
            .collect();
        // In parallel: a hub's start (its serving certificate by CSR) is mostly waiting.
        let started: Vec<Result<Hub, String>> = thread::scope(|s| {
            let handles: Vec<_> = specs
                .iter()
                .map(|spec| s.spawn(move || Hub::start(spec)))
                .collect();
            handles
                .into_iter()
                .zip(first..)
                .map(|(h, i)| {
                    h.join()
                        .map_err(|_| format!("{} did not start (see its log above)", node(i)))
                })
                .collect()
        });
        // Registered before any error returns, so every started hub is stopped with the pool.
        let mut failed = None;
        for hub in started {
            match hub {
                Ok(h) => self.hubs.push(Running::register(h)),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for hub in &self.hubs[first - 1..] {
            wait_health(hub, cloud, true, START)?;
        }
        Ok(())
    }
}

/// Node `edge-<i>`'s hub: its own certificate (`system:node:edge-<i>` in `system:nodes`),
/// pool `pool-a`, `--node-ip 127.0.0.<i + 1>`, YurtHub's heartbeat interval (10 s: the
/// launcher's 1 s would put ten lease renewals a second on the link being measured).
fn hub_spec(cloud: &Cloud, i: usize, port: u16, dir: &Path) -> HubSpec {
    let name = node(i);
    let cert = cloud.issue_client(&format!("system:node:{name}"), &["system:nodes"]);
    HubSpec::with_auth(cloud, dir, Auth::CertInline(cert)).with(&[
        "--v=0",
        &format!("--node-name={name}"),
        &format!("--nodepool-name={POOL}"),
        &format!("--node-ip={}", node_ip(i)),
        &format!("--multiplexer-port={port}"),
        "--heartbeat-interval-seconds=10",
    ])
}

/// A port free on every node address of a pool of `nodes`.
fn multiplexer_port(nodes: usize) -> Result<u16, String> {
    for _ in 0..20 {
        let first = TcpListener::bind((node_ip(1), 0))
            .map_err(|e| format!("binding {}:0: {e}", node_ip(1)))?;
        let port = first
            .local_addr()
            .map_err(|e| format!("the address of a listener: {e}"))?
            .port();
        if (2..=nodes).all(|i| TcpListener::bind((node_ip(i), port)).is_ok()) {
            return Ok(port);
        }
    }
    Err(format!(
        "no port is free on 127.0.0.2 to {}",
        node_ip(nodes)
    ))
}

// ---- clients ----

/// One client of a pool-scope resource: where it sends its requests, and as whom.
pub(crate) struct Endpoint {
    /// Its own connections, as a component has.
    agent: Agent,
    /// `http://<hub>`, `https://<cloud>` or `https://<leader>:<port>`.
    base: String,
    /// The component's User-Agent.
    ua: String,
    /// It asks for gzip, as client-go does (case 12 also runs clients that do not).
    gzip: bool,
}

impl Endpoint {
    /// Plain HTTP to a hub.
    pub(crate) fn plain(hub: &Hub, ua: &str) -> Endpoint {
        Endpoint {
            agent: agent(None),
            base: hub.url(),
            ua: ua.to_owned(),
            gzip: true,
        }
    }

    /// HTTPS with `tls` to `base` (the cloud, or a leader's multiplexer port).
    pub(crate) fn tls(base: &str, tls: &DirectTls, ua: &str) -> Endpoint {
        Endpoint {
            agent: agent(Some(tls)),
            base: base.to_owned(),
            ua: ua.to_owned(),
            gzip: true,
        }
    }

    /// The same client asking for gzip only when `gzip` (python's client and curl do not).
    pub(crate) fn gzip(self, gzip: bool) -> Endpoint {
        Endpoint { gzip, ..self }
    }

    /// Sends a GET of `path_query`; a watch has no overall deadline and no read timeout
    /// (a quiet watch stays quiet; the benchmark ends it by closing the other side).
    fn get(
        &self,
        path_query: &str,
        watch: bool,
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let url = format!("{}{path_query}", self.base);
        let mut request = ureq::http::Request::builder()
            .method("GET")
            .uri(&url)
            .header("user-agent", &self.ua)
            .header("accept", "application/json, */*");
        if self.gzip {
            // As client-go's transport does: the cloud compresses big lists, not watches.
            request = request.header("accept-encoding", "gzip");
        }
        let request = request.body(()).map_err(|e| format!("GET {url}: {e}"))?;
        let mut config = self.agent.configure_request(request);
        if watch {
            config = config.timeout_global(None).timeout_per_read(None);
        }
        self.agent
            .run(config.build())
            .map_err(|e| format!("GET {url}: {e}"))
    }
}

/// The body of an answer, inflated when the server sent gzip.
fn body_reader(response: ureq::http::Response<ureq::Body>) -> Box<dyn Read + Send> {
    let gzip = response
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let body = response.into_body().into_reader();
    if gzip {
        Box::new(flate2::read::GzDecoder::new(body))
    } else {
        Box::new(body)
    }
}

/// `metadata.resourceVersion` of a list or an object, and a list's `continue`.
#[derive(Deserialize, Default)]
struct Meta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    next: String,
}

/// A list answer: its resourceVersion and its items, which are counted, not kept.
#[derive(Deserialize)]
struct ListHead {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    items: Vec<IgnoredAny>,
}

/// An object as a watch event carries it (a `Status` for ERROR).
#[derive(Deserialize)]
struct EventObject {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    code: u16,
}

/// One watch event, read for its type and resourceVersion only.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    object: EventObject,
}

/// What one client has done so far, read by the benchmark while it runs.
#[derive(Default)]
struct Progress {
    /// A watch is open (its answer was 200).
    watching: AtomicBool,
    /// The highest resourceVersion of an object it has seen (lists and events; bookmarks
    /// not counted).
    seen: AtomicU64,
    /// Items of its last list.
    items: AtomicU64,
    /// Lists after the first (a 410).
    relists: AtomicU64,
    /// Watches opened again after a stream ended.
    rewatches: AtomicU64,
    /// Why it stopped, when it failed.
    failure: Mutex<Option<String>>,
}

/// How a watch stream ended.
enum WatchEnd {
    /// The stream ended (or the benchmark stopped it): watch again from this resourceVersion.
    Resume(u64),
    /// 410: list again.
    Expired,
}

/// One client's list-then-watch loop over `path` until `stop`.
fn reflect(e: &Endpoint, path: &str, p: &Progress, stop: &AtomicBool) -> Result<(), String> {
    let mut from = None;
    let mut lists = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let rv = match from {
            Some(rv) => rv,
            None => {
                let Some(rv) = list(e, path, p, stop)? else {
                    return Ok(());
                };
                if lists > 0 {
                    p.relists.fetch_add(1, Ordering::Relaxed);
                }
                lists += 1;
                rv
            }
        };
        match watch(e, path, rv, p, stop)? {
            WatchEnd::Resume(last) => {
                if !stop.load(Ordering::Relaxed) {
                    p.rewatches.fetch_add(1, Ordering::Relaxed);
                }
                from = Some(last);
            }
            WatchEnd::Expired => from = None,
        }
    }
    Ok(())
}

/// Sends a GET until it is answered with anything but a refused connection, 429 or 503
/// ([`ATTEMPTS`] at most, [`RETRY`] apart); None once `stop` is set.
fn attempt(
    e: &Endpoint,
    path_query: &str,
    watch: bool,
    stop: &AtomicBool,
) -> Result<Option<ureq::http::Response<ureq::Body>>, String> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match e.get(path_query, watch) {
            Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {
                last = format!("GET {}{path_query}: status {}", e.base, r.status());
            }
            Ok(r) => return Ok(Some(r)),
            Err(why) => last = why,
        }
        thread::sleep(RETRY);
    }
    Err(format!("{last} ({ATTEMPTS} attempts, {RETRY:?} apart)"))
}

/// Lists `path` at resourceVersion 0 as a reflector's pager does: pages of 500 while the
/// answer carries `continue` (the apiserver's watch cache answers resourceVersion 0 whole;
/// the stand-in pages it); returns the list's resourceVersion, or None once stopped.
fn list(e: &Endpoint, path: &str, p: &Progress, stop: &AtomicBool) -> Result<Option<u64>, String> {
    let mut query = format!("{path}?limit=500&resourceVersion=0");
    let mut items = 0;
    loop {
        let Some(response) = attempt(e, &query, false, stop)? else {
            return Ok(None);
        };
        let status = response.status().as_u16();
        let mut body = Vec::new();
        body_reader(response)
            .read_to_end(&mut body)
            .map_err(|err| format!("GET {}{query}: reading the body: {err}", e.base))?;
        if status != 200 {
            return Err(format!(
                "GET {}{query}: status {status}: {}",
                e.base,
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let head: ListHead = serde_json::from_slice(&body)
            .map_err(|err| format!("GET {}{query}: not a list: {err}", e.base))?;
        items += head.items.len() as u64;
        if !head.metadata.next.is_empty() {
            // The token is base64: its '+', '/' and '=' escaped for the query.
            let token = head
                .metadata
                .next
                .replace('+', "%2B")
                .replace('/', "%2F")
                .replace('=', "%3D");
            query = format!("{path}?continue={token}&limit=500");
            continue;
        }
        let rv = head
            .metadata
            .resource_version
            .parse::<u64>()
            .map_err(|_| format!("GET {}{query}: the list has no resourceVersion", e.base))?;
        p.items.store(items, Ordering::Relaxed);
        p.seen.fetch_max(rv, Ordering::Relaxed);
        return Ok(Some(rv));
    }
}

/// Watches `path` from `rv` with bookmarks until the stream ends, recording each event's
/// resourceVersion.
fn watch(
    e: &Endpoint,
    path: &str,
    rv: u64,
    p: &Progress,
    stop: &AtomicBool,
) -> Result<WatchEnd, String> {
    // informers ask for 5 to 10 minutes; longer than any run of this case.
    let query = format!(
        "{path}?allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=900&watch=true"
    );
    let Some(response) = attempt(e, &query, true, stop)? else {
        return Ok(WatchEnd::Resume(rv));
    };
    match response.status().as_u16() {
        200 => {}
        410 => return Ok(WatchEnd::Expired),
        s => return Err(format!("GET {}{query}: status {s}", e.base)),
    }
    p.watching.store(true, Ordering::Relaxed);
    let mut last = rv;
    let mut reader = BufReader::new(body_reader(response));
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            // The end of the stream, or the benchmark closing the server side.
            Ok(0) | Err(_) => return Ok(WatchEnd::Resume(last)),
            Ok(_) if line.trim().is_empty() => continue,
            Ok(_) => {}
        }
        let event: Event = serde_json::from_str(&line).map_err(|err| {
            format!(
                "a watch of {}{path}: an event that is not JSON ({err}): {:?}",
                e.base,
                &line[..line.len().min(200)]
            )
        })?;
        if event.kind == "ERROR" {
            if event.object.code == 410 {
                return Ok(WatchEnd::Expired);
            }
            return Err(format!("a watch of {}{path}: {}", e.base, line.trim()));
        }
        if let Ok(rv) = event.object.metadata.resource_version.parse::<u64>() {
            last = last.max(rv);
            if event.kind != "BOOKMARK" {
                p.seen.fetch_max(rv, Ordering::Relaxed);
            }
        }
    }
}

/// The clients of one run, each on a thread of its own.
#[derive(Default)]
pub(crate) struct Reflectors {
    /// Who (component and node), the path, and its progress.
    clients: Vec<(String, &'static str, Arc<Progress>)>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Reflectors {
    /// Starts the client `who` of `path` through `e`.
    pub(crate) fn start(
        &mut self,
        who: String,
        e: Endpoint,
        path: &'static str,
    ) -> Result<(), String> {
        let progress = Arc::new(Progress::default());
        let (p, stop) = (progress.clone(), self.stop.clone());
        let thread = thread::Builder::new()
            .name("bench-client".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(why) = reflect(&e, path, &p, &stop) {
                    *lock(&p.failure) = Some(why);
                }
            })
            .map_err(|e| format!("starting a client thread: {e}"))?;
        self.clients.push((who, path, progress));
        self.threads.push(thread);
        Ok(())
    }

    /// The first failure of a client, with who it was.
    fn failure(&self) -> Option<String> {
        self.clients.iter().find_map(|(who, path, p)| {
            lock(&p.failure)
                .as_ref()
                .map(|why| format!("{who}, {path}: {why}"))
        })
    }

    /// Waits until every client has listed and is watching.
    pub(crate) fn wait_watching(&self, timeout: Duration) -> Result<(), String> {
        self.wait(timeout, "every client to list and watch", |_, p| {
            p.watching.load(Ordering::Relaxed)
        })
    }

    /// Waits until every client of `path` has seen an object at resourceVersion `rv` or
    /// later.
    pub(crate) fn wait_seen(&self, path: &str, rv: u64, timeout: Duration) -> Result<(), String> {
        self.wait(
            timeout,
            &format!("every client of {path} to see resourceVersion {rv}"),
            |p_path, p| p_path != path || p.seen.load(Ordering::Relaxed) >= rv,
        )
    }

    /// Polls every client with `done` until all hold, a client fails, or `timeout`.
    fn wait(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&str, &Progress) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(why) = self.failure() {
                return Err(why);
            }
            let behind: Vec<&str> = self
                .clients
                .iter()
                .filter(|(_, path, p)| !done(path, p))
                .map(|(who, _, _)| who.as_str())
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what}; still waiting for {}",
                    behind.join(", ")
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Items of each client's last list of `path`, distinct values.
    fn items(&self, path: &str) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, p, _)| *p == path)
            .map(|(_, _, p)| p.items.load(Ordering::Relaxed))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Tells every client to stop; their streams end when the caller closes the other side.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for every client thread (after [`Reflectors::stop`] and the servers' end);
    /// returns (re-lists, re-watches) over all clients.
    pub(crate) fn join(mut self) -> (u64, u64) {
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
        self.clients.iter().fold((0, 0), |(l, w), (_, _, p)| {
            (
                l + p.relists.load(Ordering::Relaxed),
                w + p.rewatches.load(Ordering::Relaxed),
            )
        })
    }
}

impl Drop for Reflectors {
    fn drop(&mut self) {
        // A run that failed half-way: its clients end when the servers go.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits until the cloud has sent nothing for half a second (10 s at most); its byte count
/// then.
pub(crate) fn settled_bytes(cloud: &Cloud) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = cloud.bytes_sent();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        let now = cloud.bytes_sent();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(500) {
            break;
        }
    }
    last
}

/// Updates EndpointSlices `0..updates` (modulo `slices`) in the cloud, one after another (a
/// label each: the whole object goes out in every event); the resourceVersion of the last.
fn churn(cloud: &Cloud, slices: usize, updates: usize, tag: &str) -> Result<u64, String> {
    let mut last = 0;
    for i in 0..updates {
        let k = i % slices.max(1);
        let o = cloud.patch(
            SLICES_RESOURCE,
            &format!("svc-{}", k % 10),
            &format!("svc-{k:06}-ab12c"),
            json!({"metadata": {"labels": {"bench-churn": format!("{tag}-{i}")}}}),
        );
        last = o["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("the update of slice {k} has no resourceVersion: {o}"))?;
    }
    Ok(last)
}

/// Body bytes of `resources` the hubs received from `cloud` (their own link accounting,
/// `tinyhub_cloud_received_bytes_total`), summed; None when they do not count them.
fn hubs_body_bytes(pool: &PoolHubs, cloud: &Cloud, resources: &[&str]) -> Option<u64> {
    let server = format!("server=\"{}\"", cloud.url());
    let wanted: Vec<String> = resources
        .iter()
        .map(|r| format!("resource=\"{r}\""))
        .collect();
    let mut total = 0.0;
    for hub in &pool.hubs {
        total += metrics(hub)
            .ok()?
            .sum("tinyhub_cloud_received_bytes_total", |l| {
                l.contains(&server) && wanted.iter().any(|w| l.contains(w))
            })?;
    }
    Some(total as u64)
}

// ---- the link economy ----

/// The two setups.
#[derive(Clone, Copy, PartialEq)]
enum Setup {
    /// Every client to the cloud.
    Direct,
    /// Every client through its node's hub.
    Pool,
}

impl Setup {
    /// Its name in the table.
    fn label(self) -> &'static str {
        match self {
            Setup::Direct => "direct",
            Setup::Pool => "pool",
        }
    }
}

/// What one run of a setup measured.
struct Run {
    setup: Setup,
    round: usize,
    /// The leader accepted connections on its multiplexer port (pool only).
    leader_serves: bool,
    /// Until every client watches, settled (in the pool from the hubs' start: their feeders
    /// list at start): bytes, requests.
    startup: (u64, usize),
    /// Service and EndpointSlice body bytes the hubs received from the cloud until every
    /// client watched, by their own link accounting (pool only).
    hub_scope_startup: Option<u64>,
    /// From the first update to the last client seeing the last one: bytes, requests.
    churn: (u64, usize),
    /// EndpointSlice watch streams the cloud held during the churn (the most of two samples).
    slice_watches: usize,
    /// From the last update made to the last client seeing it.
    last_seen: Duration,
    /// From the first update to the last client seeing the last one.
    churn_time: Duration,
    /// Lists of Services and EndpointSlices the cloud answered: (asking for gzip, all).
    lists_gzip: (usize, usize),
    /// Re-lists of the clients (410s).
    relists: u64,
    /// Re-watches of the clients (streams that ended).
    rewatches: u64,
    /// EndpointSlice body bytes the hubs received from the cloud during the churn, by their
    /// own link accounting (pool only).
    hub_slice_bytes: Option<u64>,
}

/// One run of `setup` over a fresh cloud with the case's fixtures.
fn run_setup(b: &Bench, setup: Setup, round: usize) -> Result<Run, String> {
    let s = b.scale;
    let nodes = s.pool_nodes;
    let cloud = pool_cloud(nodes, s.pool_services, s.pool_slices);
    let tls = DirectTls::for_cloud(&cloud)?;
    // The fixtures went in without HTTP: nothing sent yet, but read it rather than assume.
    let start = (cloud.bytes_sent(), cloud.count(|_| true));
    let mut pool = match setup {
        Setup::Pool => Some(PoolHubs::start_leader(&cloud, nodes, "bench-pool")?),
        Setup::Direct => None,
    };

    let mut clients = Reflectors::default();
    for i in 1..=nodes {
        if i == 2
            && let Some(p) = pool.as_mut()
        {
            // The leader's caches are filled (its own clients' lists were answered), and
            // the hubs so far have started: the followers now.
            p.start_followers(&cloud)?;
        }
        for ua in [KUBE_PROXY, COREDNS] {
            for path in [SERVICES, SLICES] {
                let e = match &pool {
                    Some(p) => Endpoint::plain(&p.hubs[i - 1], ua),
                    None => Endpoint::tls(&cloud.url(), &tls, ua),
                };
                clients.start(format!("{} on {}", component(ua), node(i)), e, path)?;
            }
        }
        if i == 1 {
            clients.wait_watching(START)?;
        }
    }
    clients.wait_watching(START)?;
    let startup = (settled_bytes(&cloud), cloud.count(|_| true));
    for (path, want) in [(SERVICES, s.pool_services + 1), (SLICES, s.pool_slices)] {
        let items = clients.items(path);
        // The Services are the fixtures' and the cluster's own `default/kubernetes`.
        if items != [want as u64] {
            return Err(format!(
                "{}: the clients' lists of {path} had {items:?} items, not {want}",
                setup.label()
            ));
        }
    }

    let hub_scope_startup = pool
        .as_ref()
        .and_then(|p| hubs_body_bytes(p, &cloud, &["services", SLICES_RESOURCE]));
    let hub_bytes0 = pool
        .as_ref()
        .and_then(|p| hubs_body_bytes(p, &cloud, &[SLICES_RESOURCE]));
    let watches0 = cloud.watchers(SLICES_RESOURCE);
    let t0 = Instant::now();
    let last_rv = churn(&cloud, s.pool_slices, s.pool_updates, &format!("r{round}"))?;
    let made = Instant::now();
    clients.wait_seen(SLICES, last_rv, DELIVERY)?;
    let seen = Instant::now();
    let churned = (cloud.bytes_sent(), cloud.count(|_| true));
    let watches1 = cloud.watchers(SLICES_RESOURCE);
    let hub_slice_bytes = match (
        hub_bytes0,
        pool.as_ref()
            .and_then(|p| hubs_body_bytes(p, &cloud, &[SLICES_RESOURCE])),
    ) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };

    let leader_serves = pool.as_ref().is_some_and(|p| p.leader_serves);
    let is_list = |r: &RecordedRequest| {
        r.method == "GET"
            && (r.path == SERVICES || r.path == SLICES)
            && !r
                .query
                .split('&')
                .any(|q| q == "watch=true" || q == "watch=1")
    };
    let lists_gzip = (
        cloud.count(|r| is_list(r) && r.accept_encoding.contains("gzip")),
        cloud.count(is_list),
    );
    clients.stop();
    // The clients' streams end with their servers.
    drop(pool);
    drop(cloud);
    let (relists, rewatches) = clients.join();
    Ok(Run {
        setup,
        round,
        leader_serves,
        lists_gzip,
        startup: (startup.0 - start.0, startup.1 - start.1),
        hub_scope_startup,
        churn: (churned.0 - startup.0, churned.1 - startup.1),
        slice_watches: watches0.max(watches1),
        last_seen: seen - made,
        churn_time: seen - t0,
        relists,
        rewatches,
        hub_slice_bytes,
    })
}

// ---- the leader's memory ----

/// The leader's memory in one state.
struct Mem {
    /// The state, as the table names it.
    state: String,
    /// From /proc.
    proc: ProcMem,
    /// `tinyhub_heap_bytes`.
    heap: Option<f64>,
    /// `tinyhub_pool_cache_bytes`, summed over its series (resources).
    pool_cache: Option<f64>,
}

/// The hub's memory now, from /proc and its metrics.
fn measure(hub: &Hub, state: &str) -> Result<Mem, String> {
    let proc = proc_mem(hub.pid())?;
    let m = metrics(hub)?;
    Ok(Mem {
        state: state.to_owned(),
        proc,
        heap: m.find("tinyhub_heap_bytes"),
        pool_cache: m.sum("tinyhub_pool_cache_bytes", |_| true),
    })
}

/// What the leader part measured.
struct Leader {
    mems: Vec<Mem>,
    /// Followers served, or why none were.
    followers: Result<usize, String>,
    /// EndpointSlice watches the cloud held after the churn.
    slice_watches: usize,
}

/// Waits up to `timeout` for a TCP listener at `addr`.
fn port_open(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The leader hub alone over a cloud of `leader_slices` EndpointSlices: idle, with its own
/// kube-proxy and coredns, then with simulated followers and a churn.
fn leader_memory(b: &Bench) -> Result<Leader, String> {
    let s = b.scale;
    let nodes = s.leader_followers + 1;
    let cloud = pool_cloud(nodes, s.pool_services, s.leader_slices);
    let pool = PoolHubs::start_leader(&cloud, nodes, "bench-leader")?;
    let leader = &pool.hubs[0];
    settled_bytes(&cloud);
    let mut mems = vec![measure(
        leader,
        "idle: ready, its feeders' caches filled, no client yet",
    )?];

    let mut clients = Reflectors::default();
    for ua in [KUBE_PROXY, COREDNS] {
        for path in [SERVICES, SLICES] {
            let who = format!("{} on {}", component(ua), node(1));
            clients.start(who, Endpoint::plain(leader, ua), path)?;
        }
    }
    clients.wait_watching(START)?;
    mems.push(measure(leader, "its own kube-proxy and coredns watching")?);

    // A follower hub's feeders: one list and one watch of each resource on the leader's
    // multiplexer port, as `multiplexer-proxy-<node>` with the node's certificate.
    let addr = SocketAddr::from((node_ip(1), pool.port));
    let followers = if pool.leader_serves {
        let base = format!("https://{addr}");
        for i in 2..=nodes {
            let name = node(i);
            let tls =
                DirectTls::for_identity(&cloud, &format!("system:node:{name}"), &["system:nodes"])?;
            let ua = format!("multiplexer-proxy-{name}");
            for path in [SERVICES, SLICES] {
                clients.start(
                    format!("follower {name}"),
                    Endpoint::tls(&base, &tls, &ua),
                    path,
                )?;
            }
        }
        clients.wait_watching(START)?;
        Ok(nodes - 1)
    } else {
        Err(format!(
            "the leader did not open its multiplexer port ({addr}) within 10 s of its start: \
             this build does not serve followers"
        ))
    };
    let last_rv = churn(&cloud, s.leader_slices, s.leader_updates, "leader")?;
    clients.wait_seen(SLICES, last_rv, DELIVERY)?;
    let slice_watches = cloud.watchers(SLICES_RESOURCE);
    let state = match &followers {
        Ok(n) => format!(
            "{n} followers served, after a churn of {} updates",
            count(s.leader_updates as u64)
        ),
        Err(_) => format!(
            "no followers (port closed), after a churn of {} updates",
            count(s.leader_updates as u64)
        ),
    };
    mems.push(measure(leader, &state)?);
    clients.stop();
    drop(pool);
    drop(cloud);
    clients.join();
    Ok(Leader {
        mems,
        followers,
        slice_watches,
    })
}

// ---- the case ----

/// Case 9: the link economy of a pool, then the leader's memory; one section.
pub fn pool(b: &Bench, report: &mut Report) -> Result<(), String> {
    let s = b.scale;
    let mut runs = Vec::new();
    for round in 1..=s.pool_rounds {
        for setup in [Setup::Direct, Setup::Pool] {
            let run = run_setup(b, setup, round)?;
            println!(
                "  round {round}, {}: start-up {} in {} requests, churn {} in {} requests, \
                 {} EndpointSlice watches on the cloud, last update seen after {:.0} ms",
                setup.label(),
                size(run.startup.0),
                run.startup.1,
                size(run.churn.0),
                run.churn.1,
                run.slice_watches,
                run.last_seen.as_secs_f64() * 1e3
            );
            runs.push(run);
        }
    }
    let leader = leader_memory(b)?;
    report.sections.push(section(s, &runs, &leader));
    Ok(())
}

/// Bytes as a count and a size.
fn bytes(n: u64) -> String {
    format!("{} ({})", count(n), size(n))
}

/// What the pool's watch count says was measured.
fn measured_what(watches: usize, nodes: usize) -> String {
    if watches == 1 {
        "1: the pool read through its leader".into()
    } else if watches == nodes {
        format!("{watches}: node-level sharing only, every hub's own feeder watched the cloud")
    } else {
        format!("{watches}: neither one for the pool nor one per node")
    }
}

/// The case's section: the link economy table and the leader's memory, with their notes.
fn section(s: &crate::Scale, runs: &[Run], leader: &Leader) -> Section {
    let mut section = Section::new(
        "9. A pool of hubs: link economy and the leader's memory",
        &format!(
            "{} nodes, each running kube-proxy and coredns (their User-Agents; each lists \
             Services and EndpointSlices at resourceVersion 0 and watches them from the list's \
             resourceVersion with bookmarks, asking for gzip as client-go does), against a \
             stand-in cloud of their own holding {} Services and {} EndpointSlices; then \
             {} EndpointSlice updates made in the cloud (a label each), until every client has \
             seen the last. **direct**: the {} clients talk to the cloud; **pool**: one hub per \
             node (edge mode, `--nodepool-name {POOL}`, nodes edge-1 to edge-{}, YurtHub's \
             10 s heartbeat), edge-1 named leader by the ConfigMap `kube-system/leader-hub-{POOL}`, \
             each node's clients going through its own hub. Bytes are what the cloud sent: \
             response heads and bodies as it wrote them, before TLS. Start-up runs until every \
             client watches: directly, from the first list; in the pool, from the hubs' start \
             (the leader's and its node's clients first, then the followers', as a pool runs \
             once its leader is up; the feeders list at start, so the hubs' own start-up \
             traffic is in it: certificates, `yurt-hub-cfg`, the leader ConfigMap, the \
             Services index, Nodes, leases). The churn runs from the first update to the \
             last client seeing the last. A fresh cloud per run, the setups alternating. The \
             stand-in pages a list at resourceVersion 0 by its `limit` (500), where the \
             apiserver's watch cache answers it whole: a direct client's list of more than 500 \
             EndpointSlices is more than one request here.",
            s.pool_nodes,
            count(s.pool_services as u64),
            count(s.pool_slices as u64),
            count(s.pool_updates as u64),
            2 * s.pool_nodes,
            s.pool_nodes,
        ),
    );
    let mut t = Table::new(
        "Link economy",
        &[
            "setup",
            "start-up: cloud bytes",
            "start-up: requests",
            "churn: cloud bytes",
            "churn: requests",
            "EndpointSlice watches on the cloud",
            "last update → last client",
        ],
    );
    for r in runs {
        t.row(vec![
            format!("{} (round {})", r.setup.label(), r.round),
            bytes(r.startup.0),
            count(r.startup.1 as u64),
            bytes(r.churn.0),
            count(r.churn.1 as u64),
            r.slice_watches.to_string(),
            format!("{:.0} ms", r.last_seen.as_secs_f64() * 1e3),
        ]);
    }
    let sum = |setup: Setup, f: fn(&Run) -> u64| -> u64 {
        runs.iter().filter(|r| r.setup == setup).map(f).sum()
    };
    let startup = |r: &Run| r.startup.0;
    let churned = |r: &Run| r.churn.0;
    let reqs = |r: &Run| r.startup.1 as u64;
    let churn_reqs = |r: &Run| r.churn.1 as u64;
    let ratio_of =
        |f: fn(&Run) -> u64| ratio(sum(Setup::Direct, f) as f64, sum(Setup::Pool, f) as f64);
    t.row(vec![
        "**ratio direct / pool**".into(),
        ratio_of(startup),
        ratio_of(reqs),
        ratio_of(churned),
        ratio_of(churn_reqs),
        String::new(),
        String::new(),
    ]);
    section.tables.push(t);

    let pool_runs: Vec<&Run> = runs.iter().filter(|r| r.setup == Setup::Pool).collect();
    if let Some(w) = pool_runs.iter().map(|r| r.slice_watches).max() {
        section.notes.push(format!(
            "**What this measured**: EndpointSlice watches the cloud held during the pool's \
             churn: {} (1 when followers read through the leader, {} when each hub reads the \
             cloud for itself). Expect a churn ratio near {} through the leader, near 2 \
             (kube-proxy and coredns sharing their node's watch) with node-level sharing only.",
            measured_what(w, s.pool_nodes),
            s.pool_nodes,
            2 * s.pool_nodes
        ));
    }
    for r in &pool_runs {
        let scope = r.hub_scope_startup.map_or(String::new(), |b| {
            format!(
                "; of the start-up's bytes, {} were Service and EndpointSlice bodies by the \
                 hubs' own link accounting",
                bytes(b)
            )
        });
        let churned = r.hub_slice_bytes.map_or(String::new(), |b| {
            format!(
                "; of the churn's, {} were EndpointSlice bodies by the same accounting",
                bytes(b)
            )
        });
        section.notes.push(format!(
            "Pool, round {}: the leader {} its multiplexer port{scope}{churned}. The churn \
             took {:.0} ms from the first update to the last client's view of the last.",
            r.round,
            if r.leader_serves {
                "opened"
            } else {
                "did not open"
            },
            r.churn_time.as_secs_f64() * 1e3
        ));
    }
    for r in runs.iter().filter(|r| r.setup == Setup::Direct) {
        section.notes.push(format!(
            "Direct, round {}: the churn took {:.0} ms from the first update to the last \
             client's view of the last.",
            r.round,
            r.churn_time.as_secs_f64() * 1e3
        ));
    }
    for setup in [Setup::Direct, Setup::Pool] {
        let (gzip, all) = runs
            .iter()
            .filter(|r| r.setup == setup)
            .fold((0, 0), |(g, a), r| (g + r.lists_gzip.0, a + r.lists_gzip.1));
        section.notes.push(format!(
            "{}: {gzip} of the {all} lists of Services and EndpointSlices the cloud answered \
             asked for gzip (the cloud compresses answers over 128 KiB, as the apiserver does).",
            match setup {
                Setup::Direct => "Direct",
                Setup::Pool => "Pool",
            }
        ));
    }
    let (relists, rewatches) = runs
        .iter()
        .fold((0, 0), |(l, w), r| (l + r.relists, w + r.rewatches));
    if relists + rewatches > 0 {
        section.notes.push(format!(
            "Clients re-listed {relists} and re-watched {rewatches} times in all (a watch \
             ended or answered 410)."
        ));
    }

    // The leader's memory.
    let mut t = Table::new(
        &format!(
            "The leader's memory: edge-1 alone over a cloud of {} EndpointSlices and {} \
             Services",
            count(s.leader_slices as u64),
            count(s.pool_services as u64)
        ),
        &[
            "state of edge-1",
            "VmRSS",
            "VmHWM (since start)",
            "threads",
            "heap",
            "`tinyhub_pool_cache_bytes`",
        ],
    );
    let opt = |v: Option<f64>| v.map_or("n/a".into(), |b| size(b as u64));
    for m in &leader.mems {
        t.row(vec![
            m.state.clone(),
            size(m.proc.rss),
            size(m.proc.hwm),
            m.proc.threads.to_string(),
            opt(m.heap),
            opt(m.pool_cache),
        ]);
    }
    section.tables.push(t);
    section.notes.push(match &leader.followers {
        Ok(n) => format!(
            "Followers: {n} simulated follower hubs, each a node's client certificate \
             (`system:node:edge-N` in `system:nodes`) and the User-Agent \
             `multiplexer-proxy-edge-N`, listing and watching both resources on \
             `https://{}:<multiplexer port>` as a follower's feeders do (cheaper than {n} hub \
             processes on this machine; the leader sees the same requests). The cloud held {} \
             EndpointSlice watch(es) at the end.",
            node_ip(1),
            leader.slice_watches
        ),
        Err(why) => format!(
            "Followers: none measured: {why}. The last row is the leader with its own clients \
             and the churn only."
        ),
    });
    if leader.mems.iter().any(|m| m.pool_cache.is_none()) {
        section.notes.push(
            "This hub does not expose `tinyhub_pool_cache_bytes` (the watch cache's own \
             accounting): n/a."
                .into(),
        );
    }
    section
}
