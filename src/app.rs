//! Wiring and lifecycle: builds the parts from a validated [`Config`], starts the threads,
//! and shuts down on the first SIGTERM/SIGINT within procd's 5 s (readiness fails at once,
//! listeners close, in-flight requests get a few seconds, the cache writer drains its queue);
//! a second signal exits 1 at once.

use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::cache::agents::CacheAgents;
use crate::cache::grants::Grants;
use crate::cache::store::Store;
use crate::cache::writer;
use crate::cache::writer::CacheTx;
use crate::cache::writer::Refills;
use crate::cache::writer::WriterOptions;
use crate::clients::agents_watch;
use crate::clients::leader_config::{LeaderWatch, OnLeader};
use crate::clients::pool_watch::Feeder;
use crate::clients::refill;
use crate::clients::services_watch;
use crate::config::{Config, HeartbeatMode};
use crate::dir_lock::DirLock;
use crate::error::StartupError;
use crate::filters::lookups::CloudLookups;
use crate::filters::topology_index::TopologyIndex;
use crate::filters::{FilterConfig, FilterContext, FilterName, FilterReload, Switches};
use crate::health::{self, Backends, Probe};
use crate::heartbeat::{self, NodeHeartbeat};
use crate::mode::WorkingMode;
use crate::netif::LocalAddress;
use crate::offline::Offline;
use crate::pki::{self, IdentityState};
use crate::pool::health::{CHECK_INTERVAL, TcpDialer};
use crate::pool::leader::PoolState;
use crate::pool::route::PoolRoute;
use crate::proxy::multiplexer::{self, MultiplexerPort};
use crate::proxy::pool_local::PoolCaches;
use crate::proxy::{Filters, Hub};
use crate::reaper::Reaper;
use crate::requester::Port;
use crate::serve::{self, Readiness};
use crate::server::tls::ServingCert;
use crate::server::{self, Limits, Load, LongRunningLimits};
use crate::upstream::Upstream;
use crate::watchcache::CacheOptions;
use crate::{SMALL_STACK, signals, spawn};

/// Messages the cache writer queue holds.
const WRITER_QUEUE: usize = 1024;
/// Body bytes the cache writer queue holds: how far the disk may fall behind the network
/// before a response's cache session is dropped.
const WRITER_BUDGET: usize = 8 * 1024 * 1024;
/// The serve port answers health checks and metrics: a few connections are plenty.
const SERVE_LIMITS: Limits = Limits {
    max_connections: 16,
    max_in_flight: 16,
    stack_size: SMALL_STACK,
    io_timeout: server::IO_TIMEOUT,
    long_running: None,
};
/// Time in-flight requests get to finish after the first signal.
const DRAIN: Duration = Duration::from_secs(3);
/// How long after start servicetopology may wait for the first list of Services to end before
/// it looks Services up one by one: a big list over a slow link takes a while, and a kube-proxy
/// list filtered by one round trip per Service would take far longer. A failed list ends the
/// wait at once.
const FIRST_SERVICES_LIST_PATIENCE: Duration = Duration::from_secs(60);

/// Edge mode: the node-local watch caches of the pool-scope resources (YurtHub's
/// `pkg/yurthub/multiplexer`), each with its feeder thread, started now so that the cache is warm
/// when kube-proxy and coredns first ask (see `clients::pool_watch`); the feeders read through the
/// pool's leader when `route` says so, and end when `stop` closes. None in cloud mode, or when the
/// pool-scope set is empty.
fn start_pool_caches(
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
        let name = format!("pool-{}", cache.resource().resource);
        let stop = stop.clone();
        spawn(&name, move || feeder.run(stop))?;
    }
    Ok(Some(Arc::new(pool)))
}

/// Edge mode with `--nodepool-name`: where pool-scope reads go (set by the
/// `leader-hub-<pool>` ConfigMap's watcher, [`start_leader_watch`]), with the leaders' health
/// checker (a round every 20 s) started here. None otherwise (the cloud, always).
fn start_pool_route(
    config: &Config,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<Option<Arc<PoolRoute>>, StartupError> {
    if config.working_mode != WorkingMode::Edge || config.nodepool_name.is_none() {
        return Ok(None);
    }
    let route = Arc::new(PoolRoute::new(config.multiplexer_port, Box::new(TcpDialer)));
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
        .map_err(|e| StartupError::new(e).context("--nodepool-name"))?;
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

/// Edge mode: the disk cache, locked for this process, recovered and proven writable. One
/// that cannot be used (not a directory, read-only, no permission, another hub's) stops the
/// hub with the path and the operating system's reason, so that procd or systemd show a
/// failed service rather than a ready hub with no offline answers. Cloud mode keeps none.
fn open_cache(config: &Config) -> Result<Option<Arc<Store>>, StartupError> {
    if config.working_mode != WorkingMode::Edge {
        return Ok(None);
    }
    let path = &config.disk_cache_path;
    let (store, report) = Store::open(path).map_err(|e| {
        StartupError::new(e.to_string()).context(format!(
            "cannot use the cache directory {} (--disk-cache-path; edge mode answers from it while the cloud is unreachable)",
            path.display()
        ))
        .unusable_directory()
    })?;
    if report.rolled_forward + report.rolled_back + report.removed_temp_files > 0 {
        log::info!(
            "cache recovered after an interrupted write: rolled_forward={} rolled_back={} removed_temp_files={}",
            report.rolled_forward,
            report.rolled_back,
            report.removed_temp_files
        );
    }
    Ok(Some(Arc::new(store)))
}

/// Creates `--root-dir` (0700, as the identity files want it) when missing and locks it
/// for this process: two hubs on one root dir would rotate certificates into the same files.
fn lock_root_dir(dir: &std::path::Path) -> Result<DirLock, StartupError> {
    let refused = |e: String| {
        StartupError::new(e)
            .context(format!(
                "cannot use the root directory {} (--root-dir; the hub's identity lives there)",
                dir.display()
            ))
            .unusable_directory()
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| refused(format!("create directory {}: {e}", dir.display())))?;
    DirLock::acquire(dir).map_err(|e| refused(e.to_string()))
}

/// Runs the hub until a signal ends it.
pub fn run(config: Config) -> Result<(), StartupError> {
    let signals = signals::listen(config.root_dir.clone())
        .map_err(|e| StartupError::new(e.to_string()).context("cannot set up signal handling"))?;
    // Several crates may race to install a provider; the first one wins and all use ring.
    let _ = rustls::crypto::ring::default_provider().install_default();

    log::info!(
        "tinyhub {} starting node=\"{}\" mode={:?} servers={:?}",
        env!("CARGO_PKG_VERSION"),
        config.node_name,
        config.working_mode,
        config
            .servers
            .iter()
            .map(|s| s.base.as_str())
            .collect::<Vec<_>>()
    );
    crate::rlimit::raise_open_files();
    register_metrics();
    log::debug!("effective configuration: {config:?}");
    if !config.ignored_flags.is_empty() {
        let names: Vec<String> = config
            .ignored_flags
            .iter()
            .map(|f| format!("--{f}"))
            .collect();
        log::warn!(
            "ignored, not implemented by tinyhub (README.md \"Flags\" says why): {}",
            names.join(" ")
        );
    }
    for warning in &config.warnings {
        log::warn!("{warning}");
    }

    // First of all, before anything reads or rewrites them (`pki::initial_credentials`
    // forgets stale identity files), and before anything is bound or started: a hub that
    // cannot use its directories, or finds another hub on them, exits at once.
    // Held until `run` returns, which is when the process ends.
    let mut _root_lock = Some(lock_root_dir(&config.root_dir)?);
    if config.working_mode == WorkingMode::Edge
        && _root_lock
            .as_ref()
            .is_some_and(|lock| lock.holds(&config.disk_cache_path))
    {
        // The cache is the root dir: the store's lock covers both.
        _root_lock = None;
    }
    let store = open_cache(&config)?;

    let identity = Arc::new(IdentityState::default());
    let readiness = Arc::new(Readiness {
        identity: Arc::clone(&identity),
        ..Readiness::default()
    });
    let (initial_tls, token) = pki::initial_credentials(&config);
    if let Some(not_after) = initial_tls.as_ref().and_then(|t| t.client_not_after()) {
        match not_after.duration_since(SystemTime::now()) {
            Err(_) => {
                log::error!("the hub's client certificate has expired: the cloud will refuse it")
            }
            Ok(left) if left < Duration::from_secs(30 * 86_400) => {
                log::warn!(
                    "the hub's client certificate expires in {} days",
                    left.as_secs() / 86_400
                )
            }
            Ok(_) => {}
        }
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    let writer_stop = Arc::new(AtomicBool::new(false));

    // The plain port lends the node's identity (requester.rs); --enable-plain-proxy=false
    // closes it, on both addresses.
    let proxy_listener = if config.plain_proxy {
        let listener = server::bind(config.proxy_addr).map_err(|e| {
            StartupError::new(e.to_string()).context(format!(
                "cannot listen on {} (--proxy-port)",
                config.proxy_addr
            ))
        })?;
        Some(listener)
    } else {
        None
    };
    let serve_listener = server::bind(config.serve_addr).map_err(|e| {
        StartupError::new(e.to_string()).context(format!(
            "cannot listen on {} (--serve-port)",
            config.serve_addr
        ))
    })?;
    match &proxy_listener {
        Some(listener) => log::info!("listening role=proxy addr={}", listener.local_addr()),
        None => log::info!(
            "the plain proxy port is closed (--enable-plain-proxy=false): node components use the HTTPS port, where only a client certificate naming this node is the node"
        ),
    }
    log::info!("listening role=serve addr={}", serve_listener.local_addr());

    let backends = Arc::new(Backends::new(
        config.servers.iter().map(|s| s.base.clone()).collect(),
        config.lb_mode,
    ));
    let upstream = Arc::new(
        Upstream::new(
            Arc::clone(&backends),
            initial_tls.as_ref(),
            token,
            config.max_requests_in_flight,
        )
        .map_err(|e| StartupError::new(e.to_string()).context("cannot set up TLS to the cloud"))?,
    );

    // The serve port answers health checks from the start, while the rest comes up.
    {
        let (readiness, backends) = (Arc::clone(&readiness), Arc::clone(&backends));
        let store = store.clone();
        let handler: server::Handler =
            Arc::new(move |ex| serve::handle(ex, &readiness, &backends, store.as_deref()));
        // Never stopped: it answers readyz with 503 during the shutdown, until the process ends.
        let shutdown = Arc::new(AtomicBool::new(false));
        spawn("serve", move || {
            server::serve(
                serve_listener,
                Port::Unknown,
                handler,
                SERVE_LIMITS,
                Arc::new(Load::default()),
                shutdown,
            )
        })?;
    }

    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    // Before the hub's own clients start: they skip servers found unhealthy.
    health::probe_all_once(&backends, upstream.as_ref(), config.heartbeat.timeout);

    let agents = Arc::new(CacheAgents::new(&config.cache_agents));
    // The local address (issue 14 item 1): the proxy ports also listen on the dummy IP, and
    // `local.filter_host` is the host the response filters inject.
    let local = LocalAddress::start(config.dummy_if.as_ref(), config.proxy_addr.ip());
    // Before the filters: servicetopology's index reads the Services cache when there is one.
    let route = start_pool_route(&config, &stop_rx)?;
    let pool = start_pool_caches(&config, &upstream, route.as_ref(), &stop_rx)?;
    let (filters, filter_reload) = response_filters(
        &config,
        &upstream,
        local.filter_host,
        pool.as_ref(),
        &stop_rx,
    )?;
    // The filters inject the HTTPS port really bound (`--proxy-secure-port` may be 0).
    let filter_port = filters.as_ref().map(|f| f.ctx.secure_port.clone());
    let mut writer_thread = None;
    let mut store_for_lease = None;
    let (cache, offline) = match store {
        Some(store) => {
            store_for_lease = Some(Arc::clone(&store));
            agents_watch::load_cached(&store, &agents, filter_reload.as_ref());
            let (cache_tx, cache_rx) = writer::channel(WRITER_QUEUE, WRITER_BUDGET);
            let refills = Refills::new();
            let cache_tx = cache_tx.with_refills(refills.sender());
            {
                let (upstream, cache_tx, stop) =
                    (Arc::clone(&upstream), cache_tx.clone(), stop_rx.clone());
                let filters = filters.clone();
                spawn("cache-refill", move || {
                    refill::run(refills, upstream, cache_tx, filters, stop)
                })?;
            }
            writer_thread = Some({
                let store = Arc::clone(&store);
                let stop = Arc::clone(&writer_stop);
                let options = WriterOptions {
                    delay_per_message: config.cache_writer_delay,
                };
                spawn("cache-writer", move || {
                    writer::run(&store, cache_rx, &stop, options)
                })?
            });
            // Read here; written only by the writer thread (`CacheMsg::Grants`).
            let grants = Arc::new(Grants::load(&store));
            let offline = Offline {
                store,
                backends: Arc::clone(&backends),
                shutdown: Arc::clone(&shutdown),
                grants,
            };
            (Some(cache_tx), Some(offline))
        }
        None => (None, None),
    };
    // yurt-hub-cfg: who is cached (with a cache) and whom the filters serve (with filters, in
    // cloud mode or without a cache too).
    if cache.is_some() || filter_reload.is_some() {
        let (upstream, agents, cache_tx) =
            (Arc::clone(&upstream), Arc::clone(&agents), cache.clone());
        let retry = config.heartbeat.interval;
        let stop = stop_rx.clone();
        let filter_reload = filter_reload.clone();
        spawn("agents-watch", move || {
            agents_watch::run(upstream, agents, filter_reload, cache_tx, retry, stop)
        })?;
    }

    let node_heartbeat = start_health(
        &config,
        &backends,
        &upstream,
        store_for_lease.as_deref(),
        cache.clone(),
        &stop_rx,
    )?;

    // The serving certificate, for the HTTPS port and a leader's multiplexer port.
    let serving = Arc::new(ServingCert::new());
    let multiplexer: Arc<Mutex<Option<MultiplexerPort>>> = Arc::new(Mutex::new(None));
    if let Some(route) = &route {
        let on_leader = open_multiplexer(
            &config,
            &upstream,
            pool.clone(),
            &serving,
            (&multiplexer, &shutdown),
        );
        start_leader_watch(&config, &upstream, route, pool.clone(), on_leader, &stop_rx)?;
    }
    let upstream_for_identity = Arc::clone(&upstream);
    // The HTTPS port verifies client certificates against the cluster CA of each handshake.
    let https_clients = {
        let upstream = Arc::clone(&upstream);
        Arc::new(server::tls::ClusterCaClients::new(Box::new(move || {
            upstream.cluster_ca()
        })))
    };
    let hub = Arc::new(Hub {
        mode: config.working_mode,
        cloud: upstream,
        agents,
        cache,
        offline,
        reaper: Reaper::start(),
        filters,
        heartbeat: node_heartbeat,
        pool,
        shutdown: Arc::clone(&shutdown),
        node_name: Arc::from(config.node_name.as_str()),
    });
    let load = Arc::new(Load::default());
    let proxy_addr = proxy_listener.as_ref().map(server::Listener::local_addr);
    let handler: server::Handler = {
        let hub = Arc::clone(&hub);
        Arc::new(move |ex| hub.handle(ex))
    };
    // Both proxy ports share the caps: the HTTPS one is the same hub behind TLS.
    let limits = Limits {
        max_connections: config.max_requests_in_flight.saturating_mul(2).max(64),
        max_in_flight: config.max_requests_in_flight,
        stack_size: SMALL_STACK,
        io_timeout: config.client_io_timeout,
        // The hub admits each request once it knows what it is: watches apart (issue 28).
        long_running: Some(LongRunningLimits::for_in_flight(
            config.max_requests_in_flight,
        )),
    };
    let proxy_thread = proxy_listener
        .map(|listener| {
            let (handler, load, shutdown) = (
                Arc::clone(&handler),
                Arc::clone(&load),
                Arc::clone(&shutdown),
            );
            spawn("proxy", move || {
                server::serve(listener, Port::Plain, handler, limits, load, shutdown)
            })
        })
        .transpose()?;
    drop(hub);
    let dummy_ip = local.extra_listen_ip(config.proxy_addr.ip());
    log::info!(
        "in-cluster clients are pointed at host={}",
        local.filter_host
    );
    let dummy_proxy = dummy_ip.zip(proxy_addr).and_then(|(ip, plain)| {
        listen_also(
            SocketAddr::new(ip, plain.port()),
            "proxy-dummy",
            None,
            (&handler, limits, &load, &shutdown),
        )
    });
    let dummy_check = local.spawn_recheck(stop_rx.clone())?;
    let dummy_secure: Arc<OnceLock<SocketAddr>> = Arc::new(OnceLock::new());

    // The HTTPS port opens when the first serving certificate is installed.
    let secure_addr: Arc<OnceLock<SocketAddr>> = Arc::new(OnceLock::new());
    let open_https: Box<dyn FnOnce() + Send> = {
        let (bind, serving, secure_addr, dummy_secure) = (
            config.proxy_secure_addr,
            Arc::clone(&serving),
            Arc::clone(&secure_addr),
            Arc::clone(&dummy_secure),
        );
        let (load, shutdown) = (Arc::clone(&load), Arc::clone(&shutdown));
        Box::new(move || match server::bind(bind) {
            Ok(listener) => {
                let addr = listener.local_addr();
                log::info!("listening role=https-proxy addr={addr}");
                let _ = secure_addr.set(addr);
                if let Some(port) = &filter_port {
                    port.set(addr.port());
                }
                let tls = server::tls::server_config(serving, https_clients);
                if let Some(ip) = dummy_ip {
                    let also = SocketAddr::new(ip, addr.port());
                    let parts = (&handler, limits, &load, &shutdown);
                    if listen_also(also, "https-proxy-dummy", Some(Arc::clone(&tls)), parts)
                        .is_some()
                    {
                        let _ = dummy_secure.set(also);
                    }
                }
                let started = spawn("https-proxy", move || {
                    server::serve_tls(listener, Port::Secure, tls, handler, limits, load, shutdown)
                });
                if let Err(e) = started {
                    log::error!("{e}");
                }
            }
            Err(e) => log::error!(
                "cannot listen on {bind} (--proxy-secure-port): {e}; the HTTPS proxy is not served"
            ),
        })
    };
    pki::start(
        &config,
        pki::Parts {
            upstream: upstream_for_identity,
            serving,
            state: identity,
            on_first_serving_cert: open_https,
        },
        &stop_rx,
    )?;
    log::info!("tinyhub is ready");

    // Wait for the first signal.
    let first = signals
        .recv()
        .map_err(|_| StartupError::new("the signal thread stopped"))?;
    log::info!(
        "{} received: shutting down (a second signal exits at once)",
        signals::name(first)
    );
    readiness.shutting_down.store(true, Ordering::Release);
    shutdown.store(true, Ordering::Release);
    drop(stop_tx);
    {
        let signals = signals.clone();
        spawn("second-signal", move || {
            if let Ok(second) = signals.recv() {
                log::warn!("{} received again: exiting now", signals::name(second));
                std::process::exit(1);
            }
        })?;
    }
    for addr in [proxy_addr.as_ref(), secure_addr.get(), dummy_secure.get()]
        .into_iter()
        .flatten()
    {
        server::wake(*addr);
    }
    if let Some((addr, thread)) = dummy_proxy {
        server::wake(addr);
        let _ = thread.join();
    }
    // The lock guards one Option: a panicking holder cannot leave it torn.
    let port = multiplexer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(port) = port {
        port.stop();
    }
    if let Some(thread) = proxy_thread {
        let _ = thread.join();
    }
    let deadline = Instant::now() + DRAIN;
    while load.in_flight() > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    if load.in_flight() > 0 {
        log::info!(
            "{} requests still open at shutdown (watches); closing them",
            load.in_flight()
        );
    }
    writer_stop.store(true, Ordering::Release);
    if let Some(writer) = writer_thread {
        let _ = writer.join();
    }
    // After the listeners closed, and with the check stopped (dropping `stop_tx` ended it),
    // so that it cannot make the interface again.
    if let Some(check) = dummy_check {
        let _ = check.join();
    }
    local.remove();
    log::info!("tinyhub stopped");
    Ok(())
}

/// Starts the health checker, after the start-up `/readyz` probe of every server: the node
/// lease renewal in lease mode (YurtHub's `pkg/yurthub/healthchecker/cloudapiserver`; its first
/// round at once, from the lease kept in the cache, which also answers kubelet after an offline
/// reboot), `/readyz` otherwise. In lease mode, the heartbeat that answers kubelet's lease
/// requests.
fn start_health(
    config: &Config,
    backends: &Arc<Backends>,
    upstream: &Arc<Upstream>,
    store: Option<&Store>,
    cache: Option<CacheTx>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<Option<Arc<NodeHeartbeat>>, StartupError> {
    let readyz: Arc<dyn Probe> = Arc::clone(upstream) as Arc<dyn Probe>;
    if config.heartbeat_mode == HeartbeatMode::Readyz {
        health::spawn_checkers(Arc::clone(backends), readyz, config.heartbeat, stop.clone());
        return Ok(None);
    }
    heartbeat::start(config, backends, upstream, store, cache, readyz, stop)
        .map(Some)
        .map_err(|e| StartupError::new(e.to_string()).context("cannot start the heartbeat"))
}

/// The response filters of the flags (None when `--enable-resource-filter=false`), and their
/// live configuration for the `yurt-hub-cfg` watch; with servicetopology on, the thread that
/// watches Services for it.
fn response_filters(
    config: &Config,
    upstream: &Arc<Upstream>,
    host: std::net::IpAddr,
    pool: Option<&Arc<PoolCaches>>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<(Option<Filters>, Option<FilterReload>), StartupError> {
    if !config.enable_resource_filter {
        return Ok((None, None));
    }
    let switches = filter_switches(config);
    for name in &switches.unknown {
        log::warn!("--disabled-resource-filters names no filter: {name}");
    }
    // A filter the switches turn off stays off: yurt-hub-cfg only adds components.
    let services = if switches.is_enabled(FilterName::ServiceTopology) {
        let index = Arc::new(TopologyIndex::new(FIRST_SERVICES_LIST_PATIENCE));
        let (upstream, watched, stop) = (Arc::clone(upstream), Arc::clone(&index), stop.clone());
        let retry = config.heartbeat.interval;
        // One list and watch of Services per node: the pool cache's when it has Services
        // (its own while that cache serves none).
        let cached = pool.filter(|p| p.services().is_some()).cloned();
        spawn("services-watch", move || match cached {
            Some(pool) => services_watch::run_from_cache(pool, upstream, watched, retry, stop),
            None => services_watch::run(upstream, watched, retry, stop),
        })?;
        Some(index)
    } else {
        None
    };
    let lookups = CloudLookups::new(
        Arc::clone(upstream) as Arc<dyn crate::filters::lookups::FetchObject>,
        config.node_name.clone(),
        services,
    );
    let live = Arc::new(std::sync::RwLock::new(Arc::new(FilterConfig::new(
        switches,
    ))));
    let filters = Filters {
        config: Arc::clone(&live),
        ctx: filter_context(config, host),
        lookups: Arc::new(lookups),
    };
    // (A dummy interface that could not be made has said so in its own line.)
    if config.dummy_if.is_none() && filters.ctx.host.is_loopback() {
        log::warn!(
            "the response filters point in-cluster clients at {}, which pods cannot reach: \
             enable the dummy interface or set --bind-proxy-address to an address pods reach",
            filters.ctx.host
        );
    }
    Ok((Some(filters), Some(FilterReload { config: live })))
}

/// The feature modules' series on the metrics page, in the page's order: the response
/// filters' (always), then the pool caches'. Once per process, as `METRICS` is.
fn register_metrics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::metrics::METRICS.register(Box::new(crate::filters::series::render));
        crate::metrics::METRICS.register(Box::new(crate::watchcache::series::render));
    });
}

/// The response filters' switches from the flags: `--enable-resource-filter`,
/// `--disabled-resource-filters`, `--working-mode=cloud` (edge-only filters off).
fn filter_switches(config: &Config) -> Switches {
    Switches::new(
        config.enable_resource_filter,
        &config.disabled_resource_filters,
        config.working_mode == WorkingMode::Cloud,
    )
}

/// What the response filters know of this hub, from the flags: `--node-ip`, the port of
/// `--proxy-secure-port`, the node and `--nodepool-name`; `host` as [`FilterContext::new`] takes it.
fn filter_context(config: &Config, host: std::net::IpAddr) -> FilterContext {
    FilterContext::new(
        host,
        config.node_ip,
        config.proxy_secure_addr.port(),
        config.node_name.clone(),
        config.nodepool_name.clone(),
    )
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
        let open = move || -> Result<MultiplexerPort, String> {
            // The CA of now: in token mode it is learnt after start (the ConfigMap that names
            // this node a leader came through it).
            let ca = match &client_ca {
                Some(path) => read_client_ca(path)?,
                None => upstream.cluster_ca(),
            };
            let tls = multiplexer::identity::server_config(Arc::clone(&serving), &ca)
                .map_err(|e| e.to_string())?;
            let cloud = Arc::clone(&upstream) as Arc<dyn crate::upstream::Cloud>;
            let opened =
                multiplexer::start(bind, tls, Arc::clone(&caches), cloud, Arc::clone(&shutdown))
                    .map_err(|e| e.to_string())?;
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

/// The certificates of the PEM file `path`, for `--multiplexer-client-ca-file`.
fn read_client_ca(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: bad PEM ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
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

/// A proxy port's second address (the dummy interface's): bound and served on its own accept
/// thread with the same handler, caps and load, plain or (with `tls`) HTTPS. A failure is
/// one error line: the port still serves on its main address.
fn listen_also(
    addr: SocketAddr,
    role: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
    (handler, limits, load, shutdown): (&server::Handler, Limits, &Arc<Load>, &Arc<AtomicBool>),
) -> Option<(SocketAddr, JoinHandle<()>)> {
    let listener = match server::bind(addr) {
        Ok(listener) => listener,
        Err(e) => {
            log::error!("cannot listen on {addr} (the dummy interface's address): {e}");
            return None;
        }
    };
    let addr = listener.local_addr();
    log::info!("listening role={role} addr={addr}");
    let (handler, load, shutdown) = (Arc::clone(handler), Arc::clone(load), Arc::clone(shutdown));
    let started = spawn(role, move || match tls {
        Some(tls) => {
            server::serve_tls(listener, Port::Secure, tls, handler, limits, load, shutdown)
        }
        None => server::serve(listener, Port::PlainDummy, handler, limits, load, shutdown),
    });
    match started {
        Ok(thread) => Some((addr, thread)),
        Err(e) => {
            log::error!("{e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::{FilterName, SecurePort};
    use std::net::IpAddr;

    fn config(args: &[&str]) -> crate::config::Config {
        match crate::config::from_args(args.iter().copied()) {
            Ok(crate::config::Command::Run(c)) => *c,
            Ok(crate::config::Command::Print(text)) => panic!("printed {text}"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn switches_and_context_from_the_flags() {
        let base = [
            "--node-name=edge-1",
            "--server-addr=https://10.0.0.1:6443",
            "--join-token=abcdef.0123456789abcdef",
            "--discovery-token-unsafe-skip-ca-verification",
        ];
        let c = config(&base);
        assert_eq!(filter_switches(&c), Switches::new(true, &[], false));
        let host: IpAddr = "169.254.2.1".parse().expect("literal IP");
        let context = filter_context(&c, host);
        assert_eq!(
            context,
            FilterContext {
                host,
                secure_port: SecurePort::new(10268),
                node_name: "edge-1".into(),
                pool_name: None
            }
        );

        let mut args = base.to_vec();
        args.extend([
            "--working-mode=cloud",
            "--disabled-resource-filters=masterservice,bogus",
            "--proxy-secure-port=10443",
            "--nodepool-name=hangzhou",
        ]);
        let c = config(&args);
        let s = filter_switches(&c);
        assert!(!s.is_enabled(FilterName::MasterService));
        assert!(!s.is_enabled(FilterName::ServiceEnvUpdater), "cloud mode");
        assert!(s.is_enabled(FilterName::ServiceTopology));
        assert_eq!(s.unknown, ["bogus"]);
        let context = filter_context(&c, host);
        assert_eq!(context.secure_port.get(), 10443);
        // A clone shares the port the HTTPS listener publishes.
        let copy = context.clone();
        context.secure_port.set(40001);
        assert_eq!(copy.secure_port.get(), 40001);
        assert_eq!(context.pool_name.as_deref(), Some("hangzhou"));

        // Bound to every address, the hub tells pods the node's.
        let mut args = base.to_vec();
        args.push("--node-ip=10.1.2.3");
        let any: IpAddr = "0.0.0.0".parse().expect("literal IP");
        let context = filter_context(&config(&args), any);
        assert_eq!(
            context.host,
            "10.1.2.3".parse::<IpAddr>().expect("literal IP")
        );

        let mut args = base.to_vec();
        args.push("--enable-resource-filter=false");
        assert_eq!(
            filter_switches(&config(&args)),
            Switches::new(false, &[], false)
        );
    }
}
