//! A leader hub's multiplexer port (YurtHub's `pkg/yurthub/proxy/multiplexer`; issue 16 item 3):
//! the pool's follower hubs list and watch the pool-scope resources from this node's watch caches
//! (`watchcache::PoolCaches`) on `<node-ip>:<--multiplexer-port>` (10269) over TLS,
//! instead of each asking the cloud.
//!
//! Design decisions:
//! - **Who is admitted**: the TLS configuration (`identity::server_config`) requires a
//!   client certificate chained to the CA of the nodes' client certificates
//!   (`--multiplexer-client-ca-file`, else the cluster CA: k3s and RKE2 sign them with a
//!   client CA of their own), so a peer without one, or with one from another CA, never
//!   gets past the handshake. After it each request is checked
//!   (`identity::check_follower`: O `system:nodes`; `identity::check_request`: a list or
//!   watch of a pool-scope resource) and refused with a 403 `Status` otherwise, with an
//!   info line naming the peer's CN and address. YurtHub forwards anything sent to 10269
//!   with the leader's identity; this port serves nothing else.
//! - **What a follower gets**: what `pool_local::answer` gives a local client, from a cache
//!   the same rule serves (`PoolCaches::servable`), but with no filters (a follower filters
//!   for its own node: the leader's servicetopology would be wrong there) and no disk-cache
//!   session (the leader's disk cache is fed by its own clients). JSON only, as locally: a
//!   follower that takes only another form gets 406.
//! - **Not served: 503, the follower reads from the cloud** where a local client would be
//!   forwarded: a cache whose feed fails (frozen data: a follower relisting from it would
//!   never fail over) or whose list was too large, a member of the set whose kind the hub
//!   cannot cache, a cache not filled past the warming time. Also while this hub reaches no
//!   cloud server (and its followers' open watches end within a second): the follower's own
//!   cache holds the same data, and two leaders reading from each other make no closed
//!   loop.
//! - **How fresh it is** (issue 32): `GET /v1/pool/freshness` answers, to any admitted
//!   follower and before its per-follower admission (O(1), it holds nothing), whether this
//!   hub reaches the cloud and, per pool cache, the seconds since its feeder last heard the
//!   cloud's word on it (a list, an event, a bookmark; monotonic, so a clock jump on either
//!   node changes nothing; `null` before the first) and whether its cloud watch shows
//!   bookmarks. Followers skip a leader whose view is too old (`pool::health`). A stale
//!   leader does not refuse its followers: it does not know their bound.
//! - **Not ready**: while the caches warm (`PoolCaches::warming`), YurtHub's 429 with
//!   `Retry-After: 1`.
//! - **Per follower**: at most [`PER_FOLLOWER`] requests in flight per follower node (429
//!   past it), so that one peer cannot take the port's slots from the others; past the
//!   port's fair total a follower holding less than its share still gets in (`FOLLOWERS`).
//! - **The server is the proxy ports' own** (`server::serve_tls`: caps, eviction, one thread
//!   per connection), with its own small [`LIMITS`] and `Load`: followers cannot take the
//!   local clients' slots, nor the reverse. The peer's certificates reach the handler
//!   through `Exchange::peer_certificates`.
//! - **Lifetime** (for the wiring): the port is opened when the hub first learns it is a
//!   leader (a failed bind is tried again every health interval, `app/pool.rs` `open_multiplexer`)
//!   and stays open for the hub's life: a follower whose copy of the leader ConfigMap
//!   is stale still reads a warm cache, and a node elected again needs no new listener. It
//!   stops at shutdown like the HTTPS port: the shared flag, then [`MultiplexerPort::wake`];
//!   its watches end within a second of the flag.
//! - **The CA is taken when the port opens** (it is in the `rustls::ServerConfig` `start` is
//!   given; the log names it): after a CA rotation, followers with certificates of the new
//!   CA fail the handshake and read from the cloud until the hub restarts. The serving certificate
//!   is reloaded in place (`ServingCert`), as on the HTTPS port.
//! - **Observability**: `tinyhub_multiplexer_requests_total{follower,code}` (the follower's
//!   node name, under the labelled-series cap) and one log line per request in the proxy's
//!   style with the follower's node: refusals and 5xx at info, the rest at debug.
//!
//! Memory: per follower connection one thread (a small stack) and the server's 4 KiB read
//! buffer; per request the `ApiRequest` and what `pool_local::answer` holds (a page of
//! object handles, or one batch of watch events, its buffer kept at most 16 KiB between
//! batches); per follower with a request open one entry of the server's long-running count. The
//! objects are the caches' own.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::pool_local;
use crate::metrics::METRICS;
use crate::pool::health::{Freshness, ResourceAge};
use crate::request::{self, ApiRequest, Target};
use crate::requester::Port;
use crate::server::{self, Admission, Exchange, Handler, Limits, Load, LongRunningLimits};
use crate::status::Status;
use crate::upstream::Cloud;
use crate::watchcache::WatchCache;
use crate::watchcache::{PoolCaches, Unserved};
use crate::{SMALL_STACK, spawn};
use identity::Follower;

/// The path a leader tells how fresh its pool caches are on (issue 32): a follower's
/// `clients::leader_probe` asks it every health round. Not an API path.
pub(crate) const FRESHNESS_PATH: &str = "/v1/pool/freshness";

/// Requests one follower node may have in flight on the port: its feeders' watch of each
/// pool-scope resource (two by default) and a list or two beside them. Past it, 429: one
/// peer (any certificate of the CA with O `system:nodes`, from any pool) cannot hold the
/// slots of the pool's real followers.
pub(crate) const PER_FOLLOWER: usize = 4;

/// The multiplexer port's caps: [`PER_FOLLOWER`] requests for each of some thirty follower
/// nodes (a fair total of 120), with room for connections kept idle between lists; past
/// them a new connection is closed (a TLS port cannot answer 429 at accept) and a request
/// gets 429. Each connection is a thread with a [`SMALL_STACK`] (reserved, mostly not
/// resident). Every follower request is admitted under its follower (`handle`), lists as
/// watches, so no request takes a short slot (`max_in_flight`).
pub(crate) const LIMITS: Limits = Limits {
    max_connections: 160,
    max_in_flight: 0,
    stack_size: SMALL_STACK,
    io_timeout: server::IO_TIMEOUT,
    long_running: Some(FOLLOWERS),
};

/// The followers' shares of the port (issue 28): past the fair total a follower still gets
/// a request in while it holds less than the total divided by the pool's members — the
/// followers holding a request now and itself: the leader ConfigMap names only the
/// leaders, and a member that asks nothing needs no share — so while any follower holds
/// more than that, a new follower is not refused. The ceiling (152) leaves 8 of the
/// connections for handshakes and idle ones: past it, 429 whatever the shares.
const FOLLOWERS: LongRunningLimits = LongRunningLimits {
    fair_total: 120,
    ceiling: 152,
    per_key: PER_FOLLOWER,
    // Followers are other nodes, all alike: no slots kept apart.
    reserve: 0,
};

/// A running multiplexer port.
#[derive(Debug)]
pub(crate) struct MultiplexerPort {
    /// The address bound (port 0 resolved).
    pub addr: SocketAddr,
    /// The accept thread.
    thread: JoinHandle<()>,
}

impl MultiplexerPort {
    /// After the shutdown flag is set: wakes the accept thread, which then ends.
    pub(crate) fn wake(&self) {
        server::wake(self.addr);
    }

    /// After the shutdown flag is set: wakes the accept thread and waits for it to end
    /// (connection threads end on their own: watches within a second of the flag).
    pub(crate) fn stop(self) {
        self.wake();
        let _ = self.thread.join();
    }
}

/// Binds `bind` at once and serves `caches` to the pool's followers over `tls` (from
/// `identity::server_config`: the hub's serving certificate, followers verified against the
/// CA of their client certificates) on its own thread until `shutdown` is set (then
/// [`MultiplexerPort::wake`]). `cloud` tells whether this hub reaches the cloud: while it
/// does not, followers are sent back to their own. Called when the hub learns it is a
/// leader; the port then stays open for the hub's life (see the module docs). An error is
/// the bind's (the port taken, the address not this node's) or the thread's.
pub(crate) fn start(
    bind: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    caches: Arc<PoolCaches>,
    cloud: Arc<dyn Cloud>,
    shutdown: Arc<AtomicBool>,
) -> io::Result<MultiplexerPort> {
    let listener = server::bind(bind)?;
    let addr = listener.local_addr();
    let handler: Handler = {
        let shutdown = Arc::clone(&shutdown);
        Arc::new(move |ex| handle(&caches, cloud.as_ref(), &shutdown, ex))
    };
    let load = Arc::new(Load::default());
    let thread = spawn("multiplexer", move || {
        server::serve_tls(
            listener,
            Port::Unknown,
            tls,
            handler,
            LIMITS,
            load,
            shutdown,
        )
    })
    .map_err(|e| io::Error::other(e.to_string()))?;
    log::info!("listening role=multiplexer addr={addr}");
    Ok(MultiplexerPort { addr, thread })
}

/// Serves one follower request to the end, counted and logged.
fn handle(caches: &PoolCaches, cloud: &dyn Cloud, shutdown: &AtomicBool, ex: Exchange<'_>) {
    let started = Instant::now();
    let peer = ex.remote();
    let follower = match identity::check_follower(ex.peer_certificates()) {
        Ok(follower) => follower,
        Err(status) => {
            let cn = common_name(ex.peer_certificates());
            log::info!(
                "multiplexer refused peer={peer} cn={cn:?} method={} path=\"{}\" status={} reason=\"{}\"",
                ex.method(),
                request::truncate(ex.url()),
                status.code,
                status.message
            );
            let _ = ex.send_status(&status);
            METRICS.count_multiplexer("", status.code);
            return;
        }
    };
    let name = follower_name(&follower);
    // Before the per-follower admission: O(1), holds nothing, takes no follower's slot.
    if ex.method() == "GET" && ex.url().split('?').next() == Some(FRESHNESS_PATH) {
        let body = freshness(caches, cloud).to_json();
        let _ = ex.send(200, &[("Content-Type", "application/json")], &body);
        METRICS.count_multiplexer(name, 200);
        log::debug!(
            "multiplexer follower={name:?} peer={peer} path=\"{FRESHNESS_PATH}\" status=200 took={:?}",
            started.elapsed()
        );
        return;
    }
    let _slot = match ex.admit(Admission::LongRunning {
        key: name,
        node: false,
    }) {
        Ok(slot) => slot,
        Err(status) => {
            log::info!(
                "multiplexer refused follower={name:?} peer={peer} path=\"{}\" status={} reason={:?}",
                request::truncate(ex.url()),
                status.code,
                status.message
            );
            let _ = ex.send_status(&status);
            METRICS.count_multiplexer(name, status.code);
            return;
        }
    };
    let req = match request::classify(ex.method(), ex.url(), ex.headers()) {
        Ok(req) => req,
        Err(e) => {
            let status = Status::bad_request(e.to_string());
            log::info!(
                "multiplexer refused follower={name:?} peer={peer} method={} path=\"{}\" status=400 err=\"{e}\"",
                ex.method(),
                request::truncate(ex.url())
            );
            let _ = ex.send_status(&status);
            METRICS.count_multiplexer(name, status.code);
            return;
        }
    };
    let code = match admit(caches, cloud, &req) {
        Ok(cache) => {
            // The follower's request as YurtHub's leader counts it: served by its
            // multiplexer, under the follower's User-Agent.
            let _in_flight = METRICS.start_aggregated(super::call::labels(&req));
            // A watch ends (cleanly: the follower resumes it, and is refused) once this hub
            // reaches no cloud: its cache no longer moves, the follower's link may.
            let stopping = || shutdown.load(Ordering::Relaxed) || !cloud.any_healthy();
            // No filters, no disk-cache session: see the module docs.
            // Nor the endpoints overlay: it is this node's, never its followers'.
            pool_local::answer(cache, None, None, ex, &req, &stopping, None)
        }
        Err(status) if status.code == 403 => {
            log::info!(
                "multiplexer refused follower={name:?} cn={:?} peer={peer} verb={} path=\"{}\" status=403",
                follower.common_name.as_deref().unwrap_or(""),
                req.verb.as_str(),
                request::truncate(ex.url())
            );
            let _ = ex.send_status(&status);
            METRICS.count_multiplexer(name, status.code);
            return;
        }
        Err(status) => {
            let _ = ex.send_status(&status);
            status.code
        }
    };
    METRICS.count_multiplexer(name, code);
    log_request(name, peer, &req, code, started.elapsed());
}

/// How fresh this leader's pool caches are: whether it reaches the cloud, and per cache the
/// age of its feeder's last word from the cloud (monotonic) and whether its cloud watch shows
/// bookmarks.
fn freshness(caches: &PoolCaches, cloud: &dyn Cloud) -> Freshness {
    Freshness {
        cloud: cloud.any_healthy(),
        resources: caches
            .caches()
            .map(|c| ResourceAge {
                resource: c.resource().gvr.dir_name(),
                age: c.synced_age(),
                bookmarks: c.bookmarked(),
            })
            .collect(),
    }
}

/// The cache that answers `req`, or the refusal: 403 for anything but a pool-scope list or
/// watch, 406 for a client that takes no JSON; 503 (the follower reads from the cloud) for a
/// kind the leader keeps no cache of, a cache whose feed fails or that is not filled after
/// warming, and while the leader cannot reach the cloud (the follower's own cache holds the
/// same data); 429 while warming. The rule of what a cache serves is
/// [`PoolCaches::servable`], the local clients' own.
fn admit<'c>(
    caches: &'c PoolCaches,
    cloud: &dyn Cloud,
    req: &ApiRequest,
) -> Result<&'c WatchCache, Status> {
    let gvr = identity::check_request(caches.scope(), req)?;
    let cache = caches.servable(gvr, req.accept).map_err(|why| match why {
        Unserved::NotJson => {
            Status::not_acceptable("the leader's multiplexer serves only application/json")
        }
        Unserved::NotKept => Status::service_unavailable(format!(
            "the leader keeps no cache of {gvr}: read it from the cloud"
        )),
        Unserved::Failing => Status::service_unavailable(format!(
            "the leader's feed of {gvr} is failing: read from the cloud"
        )),
        Unserved::TooLarge => Status::service_unavailable(format!(
            "the leader's list of {gvr} is too large for its cache: read from the cloud"
        )),
    })?;
    if !cloud.any_healthy() {
        return Err(Status::service_unavailable(
            "the leader cannot reach the cloud: keep your own cache or read from the cloud",
        ));
    }
    if cache.is_ready() {
        Ok(cache)
    } else {
        Err(not_ready(cache, caches.warming()))
    }
}

/// The answer of a cache not filled yet: YurtHub's 429 while `warming`, else a 503 that
/// sends the follower to the cloud.
fn not_ready(cache: &WatchCache, warming: bool) -> Status {
    if warming {
        cache.initializing()
    } else {
        Status::service_unavailable(format!(
            "the leader's cache of {} is not filled: read it from the cloud",
            cache.resource().gvr.go_string()
        ))
    }
}

/// The follower's label and log name: its node, else its certificate's CN.
fn follower_name(follower: &Follower) -> &str {
    follower
        .node
        .as_deref()
        .or(follower.common_name.as_deref())
        .unwrap_or("")
}

/// The CN of the peer's certificate, for the log ("" when there is none to read).
fn common_name(peer: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> String {
    peer.and_then(<[_]>::first)
        .and_then(|der| crate::x509::parse(der))
        .and_then(|info| info.common_name)
        .unwrap_or_default()
}

/// The log line of a follower's request, in the proxy's style (`proxy::call::log`): 5xx at
/// info, the rest at debug. Names from certificates are quoted with escapes (`{:?}`): a CN
/// cannot break the line.
fn log_request(follower: &str, peer: SocketAddr, req: &ApiRequest, status: u16, took: Duration) {
    let resource = match &req.target {
        Target::Resource(r) => r.gvr.resource.as_str(),
        Target::NonResource(p) => p.as_str(),
    };
    let level = if status >= 500 {
        log::Level::Info
    } else {
        log::Level::Debug
    };
    log::log!(
        level,
        "multiplexer follower={follower:?} peer={peer} verb={} resource=\"{resource}\" status={status} duration={took:?}",
        req.verb.as_str(),
    );
}

pub(crate) mod identity;
#[cfg(test)]
mod tests;
