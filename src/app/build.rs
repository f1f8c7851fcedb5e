//! The build phase: from the validated flags to the parts the hub runs with. No thread but
//! the signal handler runs yet: the start-up lines, the root directory's lock and the disk
//! cache (a hub that cannot use them exits here), the identity read from disk, the listeners
//! bound (a taken port exits here too), the cloud's client.

use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cache::store::{Store, StoreOptions};
use crate::cache::synced::Synced;
use crate::config::Config;
use crate::dir_lock::DirLock;
use crate::error::StartupError;
use crate::health::Backends;
use crate::mode::WorkingMode;
use crate::pki::{self, IdentityState};
use crate::serve::Readiness;
use crate::server;
use crate::signals;
use crate::upstream::Upstream;

/// What [`build`] makes of the flags, for `start`.
pub(super) struct Parts {
    /// The signals, from before anything else.
    pub(super) signals: crossbeam_channel::Receiver<i32>,
    /// The root directory's lock (None when the cache is the root dir: its lock covers both).
    pub(super) root_lock: Option<DirLock>,
    /// Edge mode's disk cache, recovered.
    pub(super) store: Option<Arc<Store>>,
    /// The hub's identity, as the readiness check and the rotation see it.
    pub(super) identity: Arc<IdentityState>,
    /// What `/readyz` answers from.
    pub(super) readiness: Arc<Readiness>,
    /// The plain proxy port; None with `--enable-plain-proxy=false`.
    pub(super) proxy_listener: Option<server::Listener>,
    /// The serve port (health checks, metrics).
    pub(super) serve_listener: server::Listener,
    /// The cloud's servers and their health.
    pub(super) backends: Arc<Backends>,
    /// The cloud's client, with the identity found on disk.
    pub(super) upstream: Arc<Upstream>,
}

/// Builds the parts: signal handling first, then the lines that say what starts, then the
/// directories (before anything reads or rewrites them), the identity, the listeners and the
/// cloud's client.
pub(super) fn build(config: &Config) -> Result<Parts, StartupError> {
    let signals = signals::listen(config.root_dir.clone())
        .map_err(|e| StartupError::new(e.to_string()).context("cannot set up signal handling"))?;
    // Several crates may race to install a provider; the first one wins and all use ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    log_start(config);

    // First of all, before anything reads or rewrites them (`pki::initial_credentials`
    // forgets stale identity files), and before anything is bound or started: a hub that
    // cannot use its directories, or finds another hub on them, exits at once.
    // Held until `run` returns, which is when the process ends.
    let mut root_lock = Some(lock_root_dir(&config.root_dir)?);
    if config.working_mode == WorkingMode::Edge
        && root_lock
            .as_ref()
            .is_some_and(|lock| lock.holds(&config.disk_cache_path))
    {
        // The cache is the root dir: the store's lock covers both.
        root_lock = None;
    }
    let store = open_cache(config)?;
    // Before any request goes upstream: the totals carry on from the file.
    crate::linkbook::BOOK.open(&config.root_dir);

    // When each kind last heard the cloud, as the cache kept it: read once here; the writer
    // notes, the offline answers, readyz and the metrics page read it.
    let synced = store.as_deref().map(|store| {
        let synced = Arc::new(Synced::load(store));
        synced.export();
        synced
    });
    let identity = Arc::new(IdentityState::default());
    let readiness = Arc::new(Readiness {
        identity: Arc::clone(&identity),
        synced,
        ..Readiness::default()
    });
    let (initial_tls, token) = pki::initial_credentials(config);
    if let Some(not_after) = initial_tls.as_ref().and_then(|t| t.client_not_after()) {
        warn_expiry(not_after);
    }
    let (proxy_listener, serve_listener) = bind_listeners(config)?;

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
    crate::upstream::inflate::set_ask_gzip(config.upstream_gzip);
    Ok(Parts {
        signals,
        root_lock,
        store,
        identity,
        readiness,
        proxy_listener,
        serve_listener,
        backends,
        upstream,
    })
}

/// The start-up lines: version, node, mode and servers; the effective configuration (debug);
/// the flags accepted but not implemented; the flags' warnings. Registers the feature modules'
/// metrics on the way, as it always did.
fn log_start(config: &Config) {
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
}

/// An error line when the hub's client certificate has expired, a warning when it expires
/// within 30 days.
fn warn_expiry(not_after: SystemTime) {
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

/// Binds the plain proxy port (None with `--enable-plain-proxy=false`) and the serve port,
/// and says where each listens.
fn bind_listeners(
    config: &Config,
) -> Result<(Option<server::Listener>, server::Listener), StartupError> {
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
    Ok((proxy_listener, serve_listener))
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
    // The index (what lets an unchanged put skip the disk) is built in the background: the
    // first offline answer must not wait for a read of every cached file.
    let options = StoreOptions {
        background_index: true,
        ..StoreOptions::default()
    };
    let (store, report) = Store::open_with(path, options).map_err(|e| {
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
    let store = Arc::new(store);
    store.start_index();
    Ok(Some(store))
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

/// The feature modules' series on the metrics page, in the page's order: the response
/// filters' (always), then the pool caches', then the resumable watches', then the endpoints
/// overlay's, then the link totals'. Once per process, as `METRICS` is.
fn register_metrics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::metrics::METRICS.register(Box::new(crate::filters::series::render));
        crate::metrics::METRICS.register(Box::new(crate::watchcache::series::render));
        crate::metrics::METRICS.register(Box::new(crate::proxy::resume::series::render));
        crate::metrics::METRICS.register(Box::new(crate::overlay::series::render));
        crate::metrics::METRICS.register(Box::new(crate::cache::synced::render));
        crate::metrics::METRICS.register(Box::new(crate::linkbook::series));
    });
}
