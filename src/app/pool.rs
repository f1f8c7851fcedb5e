//! The pool's parts (edge mode with pool-scope resources or `--nodepool-name`): the node-local
//! watch caches and their feeders, where pool-scope reads go and the leaders' health checker,
//! the watcher of the `leader-hub-<pool>` ConfigMap, and the multiplexer port a leader opens.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::clients::leader_config::{LeaderWatch, OnLeader};
use crate::clients::leader_probe::LeaderProbe;
use crate::clients::pool_watch::Feeder;
use crate::config::Config;
use crate::error::StartupError;
use crate::mode::WorkingMode;
use crate::pool::health::CHECK_INTERVAL;
use crate::pool::leader::PoolState;
use crate::pool::route::PoolRoute;
use crate::proxy::multiplexer::{self, MultiplexerPort};
use crate::server::tls::ServingCert;
use crate::spawn;
use crate::upstream::Upstream;
use crate::watchcache::CacheOptions;
use crate::watchcache::PoolCaches;

/// Edge mode: the node-local watch caches of the pool-scope resources (YurtHub's
/// `pkg/yurthub/multiplexer`), each with its feeder thread, started now so that the cache is warm
/// when kube-proxy and coredns first ask (see `clients::pool_watch`); the feeders read through the
/// pool's leader when `route` says so, and end when `stop` closes. None in cloud mode, or when the
/// pool-scope set is empty.
pub(super) fn start_pool_caches(
    config: &Config,
    upstream: &Arc<Upstream>,
    route: Option<&Arc<PoolRoute>>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<Option<Arc<PoolCaches>>, StartupError> {
    if config.working_mode != WorkingMode::Edge || config.pool_scope.is_empty() {
        return Ok(None);
    }
    let (pool, unknown) = PoolCaches::new(
        config.pool_scope.clone(),
        &config.node_name,
        &CacheOptions::default(),
    );
    for gvr in unknown {
        log::warn!(
            "pool-scope resource {gvr} is not served from a node-local cache (its kind is not known to tinyhub); its lists and watches are forwarded"
        );
    }
    for (i, cache) in pool.caches().enumerate() {
        let feeder = Feeder::new(
            Arc::clone(upstream),
            cache.clone(),
            pool.own_agent().to_owned(),
            config.heartbeat.interval,
            route.cloned(),
            pool.active_flag(i),
        );
        let name = format!("pool-{}", cache.resource().gvr.resource);
        let stop = stop.clone();
        spawn(&name, move || feeder.run(stop))?;
    }
    Ok(Some(Arc::new(pool)))
}

/// Edge mode with `--nodepool-name`: where pool-scope reads go (set by the
/// `leader-hub-<pool>` ConfigMap's watcher, [`start_leader_watch`]), with the leaders' health
/// checker (a round every 20 s) started here. None otherwise (the cloud, always).
pub(super) fn start_pool_route(
    config: &Config,
    upstream: &Arc<Upstream>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<Option<Arc<PoolRoute>>, StartupError> {
    if config.working_mode != WorkingMode::Edge || config.nodepool_name.is_none() {
        return Ok(None);
    }
    // Leaders are asked how fresh they are, as the feeders ask them for data.
    let prober = LeaderProbe {
        upstream: Arc::clone(upstream),
        user_agent: crate::pool::resources::user_agent(&config.node_name),
    };
    let route = Arc::new(PoolRoute::new(
        config.multiplexer_port,
        &config.node_name,
        config.pool_leader_max_staleness,
        Box::new(prober),
    ));
    let (checked, stop) = (Arc::clone(&route), stop.clone());
    spawn("leader-health", move || checked.run_checker(&stop))?;
    Ok(Some(route))
}

/// Starts the watcher of the pool's `leader-hub-<pool>` ConfigMap into `route`; the first
/// time it names this node a leader, `on_leader` runs (the multiplexer port opens); its
/// pool-scope set replaces the start-up one in `pool`.
fn start_leader_watch(
    config: &Config,
    upstream: &Arc<Upstream>,
    route: &Arc<PoolRoute>,
    caches: Option<Arc<PoolCaches>>,
    on_leader: OnLeader,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<(), StartupError> {
    let Some(pool) = config.nodepool_name.clone() else {
        return Ok(());
    };
    let state = PoolState::new(&config.node_name, &pool, config.pool_scope.clone())
        .map_err(|e| StartupError::new(e.to_string()).context("--nodepool-name"))?;
    let scoped = Arc::clone(route);
    let watch = LeaderWatch {
        upstream: Arc::clone(upstream),
        route: Arc::clone(route),
        state,
        namespace: config.namespace.clone(),
        pool,
        retry: config.heartbeat.interval,
        on_leader: Some(on_leader),
        on_scope: Box::new(move |scope| {
            log::info!(
                "the leader ConfigMap sets the pool-scope resources to {:?}",
                scope.to_metadata()
            );
            let Some(caches) = &caches else { return };
            for gvr in caches.set_scope(scope) {
                log::warn!(
                    "pool-scope resource {gvr} is not served from a node-local cache (its kind is not known to tinyhub); its lists and watches are forwarded"
                );
            }
            // A feeder whose resource left the set ends its watch now.
            scoped.nudge();
        }),
    };
    let stop = stop.clone();
    spawn("leader-config", move || watch.run(stop))?;
    Ok(())
}

/// With `--nodepool-name` (`route` is there): the watcher of the leader ConfigMap, which opens
/// the multiplexer port the first time it names this node a leader. Returns where that port is
/// kept for the shutdown (empty until then, and always without a pool).
pub(super) fn start_leader(
    config: &Config,
    upstream: &Arc<Upstream>,
    (route, caches): (Option<&Arc<PoolRoute>>, Option<&Arc<PoolCaches>>),
    serving: &Arc<ServingCert>,
    shutdown: &Arc<AtomicBool>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<Arc<Mutex<Option<MultiplexerPort>>>, StartupError> {
    let multiplexer: Arc<Mutex<Option<MultiplexerPort>>> = Arc::new(Mutex::new(None));
    if let Some(route) = route {
        let on_leader = open_multiplexer(
            config,
            upstream,
            caches.cloned(),
            serving,
            (&multiplexer, shutdown),
        );
        start_leader_watch(config, upstream, route, caches.cloned(), on_leader, stop)?;
    }
    Ok(multiplexer)
}

/// What runs the first time the leader ConfigMap names this node a leader (with the ConfigMap's
/// leaders): the multiplexer port opens on `<--node-ip>:<--multiplexer-port>` with the serving
/// certificate, followers verified against `--multiplexer-client-ca-file`, else the cluster CA the
/// upstream trusts then (YurtHub's `pkg/yurthub/proxy/multiplexer`), kept in `port` for the
/// shutdown. The ConfigMap's IP for this node that is not `--node-ip` is an error line naming both
/// (followers dial the ConfigMap's). A failed bind (the port taken, a DHCP address changed) is an
/// error line and is tried again every health interval until it succeeds or the hub stops: the node
/// holds the pool's leader slot, followers' dials fail meanwhile and they read from the cloud.
fn open_multiplexer(
    config: &Config,
    upstream: &Arc<Upstream>,
    caches: Option<Arc<PoolCaches>>,
    serving: &Arc<ServingCert>,
    (port, shutdown): (&Arc<Mutex<Option<MultiplexerPort>>>, &Arc<AtomicBool>),
) -> OnLeader {
    let bind = config
        .node_ip
        .map(|ip| SocketAddr::new(ip, config.multiplexer_port));
    let (serving, port, shutdown) = (Arc::clone(serving), Arc::clone(port), Arc::clone(shutdown));
    let upstream = Arc::clone(upstream);
    let (node, client_ca) = (
        config.node_name.clone(),
        config.multiplexer_client_ca.clone(),
    );
    Box::new(move |leaders| {
        let published = leaders.iter().find(|l| *l.node == *node).map(|l| l.ip);
        if let Some(ip) = published.filter(|ip| Some(*ip) != bind.map(|b| b.ip())) {
            let node_ip = bind.map_or_else(|| "none".to_owned(), |b| b.ip().to_string());
            log::error!(
                "the leader ConfigMap names this node a leader at {ip}, but --node-ip is {node_ip}: \
                 followers dial {ip}, and the multiplexer port is served on --node-ip"
            );
        }
        let Some(bind) = bind else {
            log::error!(
                "this node is a leader of its pool, but has no --node-ip to serve the multiplexer port on"
            );
            return;
        };
        let Some(caches) = caches else {
            log::error!("this node is a leader of its pool, but has no pool-scope cache to serve");
            return;
        };
        let stopping = Arc::clone(&shutdown);
        let open = move || -> Result<MultiplexerPort, OpenError> {
            // The CA of now: in token mode it is learnt after start (the ConfigMap that names
            // this node a leader came through it).
            let ca = match &client_ca {
                Some(path) => read_client_ca(path).map_err(OpenError::ClientCa)?,
                None => upstream.cluster_ca(),
            };
            let tls = multiplexer::identity::server_config(Arc::clone(&serving), &ca)
                .map_err(OpenError::Tls)?;
            let cloud = Arc::clone(&upstream) as Arc<dyn crate::upstream::Cloud>;
            let opened =
                multiplexer::start(bind, tls, Arc::clone(&caches), cloud, Arc::clone(&shutdown))
                    .map_err(OpenError::Listen)?;
            let source = if client_ca.is_some() {
                "--multiplexer-client-ca-file"
            } else {
                "the cluster CA"
            };
            log::info!(
                "the multiplexer port checks followers' certificates against {source}: {}",
                describe_cas(&ca)
            );
            Ok(opened)
        };
        let keep =
            move |opened| *port.lock().unwrap_or_else(PoisonError::into_inner) = Some(opened);
        match open() {
            Ok(opened) => keep(opened),
            Err(e) => {
                log::error!(
                    "cannot serve the multiplexer port on {bind} (--node-ip, --multiplexer-port): {e}; trying again every {}s",
                    CHECK_INTERVAL.as_secs()
                );
                let retried = spawn("multiplexer-open", move || {
                    let mut failures = 1u32;
                    loop {
                        std::thread::sleep(CHECK_INTERVAL);
                        if stopping.load(Ordering::Relaxed) {
                            return;
                        }
                        match open() {
                            Ok(opened) => {
                                log::info!(
                                    "the multiplexer port is open after {failures} failures"
                                );
                                keep(opened);
                                return;
                            }
                            Err(e) => {
                                failures += 1;
                                log::debug!(
                                    "cannot serve the multiplexer port on {bind} ({failures} times): {e}"
                                );
                            }
                        }
                    }
                });
                if let Err(e) = retried {
                    log::error!("{e}");
                }
            }
        }
    })
}

/// Why the multiplexer port could not be opened (it is tried again every
/// [`CHECK_INTERVAL`]).
#[derive(Debug)]
enum OpenError {
    /// `--multiplexer-client-ca-file` is unusable.
    ClientCa(ClientCaError),
    /// No TLS configuration could be made of the CA.
    Tls(multiplexer::identity::FollowerCaError),
    /// The port could not be bound.
    Listen(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::ClientCa(e) => e.fmt(f),
            OpenError::Tls(e) => e.fmt(f),
            OpenError::Listen(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::ClientCa(e) => Some(e),
            OpenError::Tls(e) => Some(e),
            OpenError::Listen(e) => Some(e),
        }
    }
}

/// Why `--multiplexer-client-ca-file` gives no CA: each names the file.
#[derive(Debug)]
enum ClientCaError {
    /// It cannot be read.
    Read(PathBuf, io::Error),
    /// It is not PEM.
    Pem(PathBuf, rustls::pki_types::pem::Error),
    /// It holds no certificate.
    Empty(PathBuf),
}

impl fmt::Display for ClientCaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientCaError::Read(path, e) => write!(f, "{}: {e}", path.display()),
            ClientCaError::Pem(path, e) => write!(f, "{}: bad PEM ({e})", path.display()),
            ClientCaError::Empty(path) => write!(f, "{}: no certificate in it", path.display()),
        }
    }
}

impl std::error::Error for ClientCaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientCaError::Read(_, e) => Some(e),
            ClientCaError::Pem(_, e) => Some(e),
            ClientCaError::Empty(_) => None,
        }
    }
}

/// The certificates of the PEM file `path`, for `--multiplexer-client-ca-file`.
fn read_client_ca(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, ClientCaError> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| ClientCaError::Read(path.into(), e))?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientCaError::Pem(path.into(), e))?;
    if certs.is_empty() {
        return Err(ClientCaError::Empty(path.into()));
    }
    Ok(certs)
}

/// The CAs' subjects (CN) and public-key pins, for the log.
fn describe_cas(cas: &[rustls::pki_types::CertificateDer<'_>]) -> String {
    let names: Vec<String> = cas
        .iter()
        .map(|der| {
            let cn = crate::x509::parse(der)
                .and_then(|info| info.common_name)
                .unwrap_or_default();
            let pin = crate::x509::pin(der).unwrap_or_default();
            format!("CN={cn:?} {pin}")
        })
        .collect();
    names.join(", ")
}
