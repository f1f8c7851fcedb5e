//! The start phase: the threads and listeners, in the order each needs the last. The serve
//! port first (it answers health checks while the rest comes up), the link totals' writer, one
//! `/readyz` probe of every server, the pool's caches, the response filters, the disk cache's
//! writer and refills, the health checker, the leader's watch, the proxy ports, and last the
//! identity's rotation, which opens the HTTPS port at its first serving certificate.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use super::build::Parts;
use super::listeners::{self, Https};
use super::{Running, filters, pool};
use crate::cache::agents::CacheAgents;
use crate::cache::grants::Grants;
use crate::cache::relist::Relist;
use crate::cache::store::Store;
use crate::cache::synced::Synced;
use crate::cache::writer::{self, BoundStats, CacheTx, Direct, Refills, WriterOptions};
use crate::clients::{agents_watch, refill};
use crate::config::{Config, HeartbeatMode};
use crate::error::StartupError;
use crate::filters::FilterReload;
use crate::filters::Filters;
use crate::health::{self, Backends, Probe};
use crate::heartbeat::{self, NodeHeartbeat};
use crate::netif::LocalAddress;
use crate::offline::Offline;
use crate::overlay::Overlay;
use crate::pki;
use crate::proxy::Hub;
use crate::reaper::Reaper;
use crate::server::tls::ServingCert;
use crate::spawn;
use crate::upstream::Upstream;

/// Messages the cache writer queue holds.
const WRITER_QUEUE: usize = 1024;
/// Body bytes the cache writer queue holds: how far the disk may fall behind the network
/// before a response's cache session is dropped.
const WRITER_BUDGET: usize = 8 * 1024 * 1024;

/// Starts the hub on `parts`: every thread and listener, until "tinyhub is ready".
pub(super) fn start(config: &Config, parts: Parts) -> Result<Running, StartupError> {
    let Parts {
        signals,
        root_lock,
        store,
        identity,
        readiness,
        proxy_listener,
        serve_listener,
        backends,
        upstream,
    } = parts;
    let shutdown = Arc::new(AtomicBool::new(false));
    let writer_stop = Arc::new(AtomicBool::new(false));
    listeners::spawn_serve(
        serve_listener,
        &readiness,
        &upstream,
        store.clone(),
        &config.node_name,
    )?;

    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    {
        let (interval, stop) = (config.link_write_interval, stop_rx.clone());
        spawn("linkbook", move || crate::linkbook::run(interval, &stop))?;
    }
    // Before the hub's own clients start: they skip servers found unhealthy.
    health::probe_all_once(&backends, upstream.as_ref(), config.heartbeat.timeout);

    let agents = Arc::new(CacheAgents::new(&config.cache_agents));
    // The local address (issue 14 item 1): the proxy ports also listen on the dummy IP, and
    // `local.filter_host` is the host the response filters inject.
    let local = LocalAddress::start(config.dummy_if.as_ref(), config.proxy_addr.ip());
    // Before the filters: servicetopology's index reads the Services cache when there is one.
    let route = pool::start_pool_route(config, &upstream, &stop_rx)?;
    let pool = pool::start_pool_caches(config, &upstream, route.as_ref(), &stop_rx)?;
    let (filters, filter_reload) = filters::response_filters(
        config,
        &upstream,
        local.filter_host,
        pool.as_ref(),
        &stop_rx,
    )?;
    // The filters inject the HTTPS port really bound (`--proxy-secure-port` may be 0).
    let filter_port = filters.as_ref().map(|f| f.ctx.secure_port.clone());
    // This node's pods as kubelet reports them offline, for the offline answers and the pool
    // caches' clients (the config turns it on in edge mode only).
    let overlay = Overlay::new(&config.node_name, config.offline_endpoints_overlay);
    let (cache, offline, writer_thread) = match &store {
        Some(store) => {
            let synced = readiness.synced.clone().unwrap_or_default();
            let disk = start_disk_cache(
                config,
                (store, &synced),
                &overlay,
                &upstream,
                (&backends, &agents),
                (filters.as_ref(), filter_reload.as_ref()),
                (&shutdown, &writer_stop, &stop_rx),
            )?;
            (Some(disk.tx), Some(disk.offline), Some(disk.writer))
        }
        None => (None, None, None),
    };
    if cache.is_some() || filter_reload.is_some() {
        start_agents_watch(
            config,
            &upstream,
            &agents,
            cache.clone(),
            filter_reload.clone(),
            &stop_rx,
        )?;
    }

    let node_heartbeat = start_health(
        config,
        &backends,
        &upstream,
        store.as_deref(),
        cache.clone(),
        &stop_rx,
    )?;

    // The serving certificate, for the HTTPS port and a leader's multiplexer port.
    let serving = Arc::new(ServingCert::new());
    let multiplexer = pool::start_leader(
        config,
        &upstream,
        (route.as_ref(), pool.as_ref()),
        &serving,
        &shutdown,
        &stop_rx,
    )?;
    let upstream_for_identity = Arc::clone(&upstream);
    let https = Https::new(&serving, &upstream, filter_port);
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
        rounds: Arc::default(),
        overlay,
        tunnel: config.tunnel,
        autonomy_checks: std::sync::atomic::AtomicU32::new(0),
    });
    let (ports, open_https) =
        listeners::open_proxy_ports(config, hub, proxy_listener, &local, https, &shutdown)?;
    let dummy_check = local.spawn_recheck(stop_rx.clone())?;
    pki::start(
        config,
        pki::Parts {
            upstream: upstream_for_identity,
            serving,
            state: identity,
            on_first_serving_cert: open_https,
        },
        &stop_rx,
    )?;
    log::info!("tinyhub is ready");
    Ok(Running {
        signals,
        readiness,
        shutdown,
        stop: stop_tx,
        ports,
        multiplexer,
        writer_stop,
        writer_thread,
        dummy_check,
        local,
        _store: store,
        _root_lock: root_lock,
    })
}

/// Starts the watch of `yurt-hub-cfg`: who is cached (with a cache) and whom the filters serve
/// (with filters, in cloud mode or without a cache too).
fn start_agents_watch(
    config: &Config,
    upstream: &Arc<Upstream>,
    agents: &Arc<CacheAgents>,
    cache_tx: Option<CacheTx>,
    filter_reload: Option<FilterReload>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<(), StartupError> {
    let (upstream, agents) = (Arc::clone(upstream), Arc::clone(agents));
    let retry = config.heartbeat.interval;
    let stop = stop.clone();
    spawn("agents-watch", move || {
        agents_watch::run(upstream, agents, filter_reload, cache_tx, retry, stop)
    })?;
    Ok(())
}

/// Edge mode's disk cache at work: what the request path writes through and answers offline
/// from, and the writer thread the drain joins.
struct DiskCache {
    /// The cache writer's queue.
    tx: CacheTx,
    /// The offline answers from the store.
    offline: Offline,
    /// The cache writer.
    writer: JoinHandle<()>,
}

/// Starts the disk cache's threads: the cached agents loaded first, then the refills (fresh
/// copies of what clients read, fetched while the cloud is up) and the writer.
fn start_disk_cache(
    config: &Config,
    (store, synced): (&Arc<Store>, &Arc<Synced>),
    overlay: &Arc<Overlay>,
    upstream: &Arc<Upstream>,
    (backends, agents): (&Arc<Backends>, &Arc<CacheAgents>),
    (filters, filter_reload): (Option<&Filters>, Option<&FilterReload>),
    (shutdown, writer_stop, stop): (
        &Arc<AtomicBool>,
        &Arc<AtomicBool>,
        &crossbeam_channel::Receiver<()>,
    ),
) -> Result<DiskCache, StartupError> {
    agents_watch::load_cached(store, agents, filter_reload);
    let (cache_tx, cache_rx) = writer::channel(WRITER_QUEUE, WRITER_BUDGET);
    let refills = Refills::new();
    let cache_tx = cache_tx
        .with_refills(refills.sender())
        .with_relist(Arc::new(Relist::new(Arc::clone(store))))
        .with_direct(Direct::new(Arc::clone(store), Arc::clone(synced)));
    {
        let (upstream, cache_tx, stop) = (Arc::clone(upstream), cache_tx.clone(), stop.clone());
        let filters = filters.cloned();
        spawn("cache-refill", move || {
            refill::run(refills, upstream, cache_tx, filters, stop)
        })?;
    }
    let writer = {
        let (store, synced) = (Arc::clone(store), Arc::clone(synced));
        let stop = Arc::clone(writer_stop);
        let stats = Arc::new(BoundStats::new(config.cache_max_bytes));
        writer::export_bound(Arc::clone(&stats), Arc::clone(&store));
        let options = WriterOptions {
            delay_per_message: config.cache_writer_delay,
            bound: Some((stats, config.node_name.clone())),
            linger: None,
        };
        spawn("cache-writer", move || {
            writer::run(&store, cache_rx, &stop, options, &synced)
        })?
    };
    // Read here; written only by the writer thread (`CacheMsg::Grants`).
    let grants = Arc::new(Grants::load(store));
    let offline = Offline {
        store: Arc::clone(store),
        backends: Arc::clone(backends),
        shutdown: Arc::clone(shutdown),
        grants,
        overlay: Arc::clone(overlay),
        synced: Arc::clone(synced),
    };
    Ok(DiskCache {
        tx: cache_tx,
        offline,
        writer,
    })
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
