//! The hub's ports: the serve port (health checks and metrics, open from the start until the
//! process ends), the plain proxy port and the HTTPS one (opened when the first serving
//! certificate is installed), each also on the dummy interface's address when there is one.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crate::cache::store::Store;
use crate::config::Config;
use crate::error::StartupError;
use crate::filters::SecurePort;
use crate::netif::LocalAddress;
use crate::proxy::Hub;
use crate::requester::Port;
use crate::serve::{self, Ota, Readiness};
use crate::server::tls::{ClusterCaClients, ServingCert};
use crate::server::{self, Limits, Load, LongRunningLimits};
use crate::upstream::Upstream;
use crate::{SMALL_STACK, spawn};

/// The serve port answers health checks and metrics: a few connections are plenty.
const SERVE_LIMITS: Limits = Limits {
    max_connections: 16,
    max_in_flight: 16,
    stack_size: SMALL_STACK,
    io_timeout: server::IO_TIMEOUT,
    long_running: None,
};

/// Serves the serve port on its own thread: it answers health checks from the start, while
/// the rest comes up. The OTA endpoints reach the cloud through `upstream` as node `node`.
pub(super) fn spawn_serve(
    listener: server::Listener,
    readiness: &Arc<Readiness>,
    upstream: &Arc<Upstream>,
    store: Option<Arc<Store>>,
    node: &str,
) -> Result<(), StartupError> {
    let readiness = Arc::clone(readiness);
    let ota = Ota::new(Arc::clone(upstream), node);
    let handler: server::Handler =
        Arc::new(move |ex| serve::handle(ex, &readiness, store.as_deref(), &ota));
    // Never stopped: it answers readyz with 503 during the shutdown, until the process ends.
    let shutdown = Arc::new(AtomicBool::new(false));
    spawn("serve", move || {
        server::serve(
            listener,
            Port::Unknown,
            handler,
            SERVE_LIMITS,
            Arc::new(Load::default()),
            shutdown,
        )
    })?;
    Ok(())
}

/// What opens the HTTPS port, run once by the rotation at the first serving certificate.
pub(super) type OpenHttps = Box<dyn FnOnce() + Send>;

/// The proxy ports as the drain sees them: the addresses it wakes, the threads it joins, the
/// load it waits on.
pub(super) struct ProxyPorts {
    /// The plain port's address, when open.
    pub(super) plain_addr: Option<SocketAddr>,
    /// The plain port's accept thread.
    pub(super) plain_thread: Option<JoinHandle<()>>,
    /// The plain port on the dummy interface's address, and its accept thread.
    pub(super) dummy_plain: Option<(SocketAddr, JoinHandle<()>)>,
    /// The HTTPS port's address, once open.
    pub(super) secure_addr: Arc<OnceLock<SocketAddr>>,
    /// The HTTPS port on the dummy interface's address, once open.
    pub(super) dummy_secure: Arc<OnceLock<SocketAddr>>,
    /// The requests in flight on every proxy port.
    pub(super) load: Arc<Load>,
}

/// What the HTTPS port needs when it opens: the serving certificate, the client CAs it
/// verifies against, and where the filters read the port really bound.
pub(super) struct Https {
    /// The serving certificate the rotation installs.
    serving: Arc<ServingCert>,
    /// The cluster CA of each handshake.
    clients: Arc<ClusterCaClients>,
    /// The port the response filters inject (None without filters).
    filter_port: Option<SecurePort>,
}

impl Https {
    /// The HTTPS port's parts: `serving`, the client certificates verified against the cluster
    /// CA `upstream` trusts at each handshake, the filters' `filter_port`.
    pub(super) fn new(
        serving: &Arc<ServingCert>,
        upstream: &Arc<Upstream>,
        filter_port: Option<SecurePort>,
    ) -> Https {
        let upstream = Arc::clone(upstream);
        Https {
            serving: Arc::clone(serving),
            clients: Arc::new(ClusterCaClients::new(Box::new(move || {
                upstream.cluster_ca()
            }))),
            filter_port,
        }
    }
}

/// Opens the plain proxy port (with its dummy-interface twin) on `hub` now, and returns the
/// ports with what opens the HTTPS one (run at the first serving certificate).
pub(super) fn open_proxy_ports(
    config: &Config,
    hub: Arc<Hub>,
    listener: Option<server::Listener>,
    local: &LocalAddress,
    https: Https,
    shutdown: &Arc<AtomicBool>,
) -> Result<(ProxyPorts, OpenHttps), StartupError> {
    let load = Arc::new(Load::default());
    let plain_addr = listener.as_ref().map(server::Listener::local_addr);
    let handler: server::Handler = Arc::new(move |ex| hub.handle(ex));
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
    let plain_thread = listener
        .map(|listener| {
            let (handler, load, shutdown) = (
                Arc::clone(&handler),
                Arc::clone(&load),
                Arc::clone(shutdown),
            );
            spawn("proxy", move || {
                server::serve(listener, Port::Plain, handler, limits, load, shutdown)
            })
        })
        .transpose()?;
    let dummy_ip = local.extra_listen_ip(config.proxy_addr.ip());
    log::info!(
        "in-cluster clients are pointed at host={}",
        local.filter_host
    );
    let dummy_plain = dummy_ip.zip(plain_addr).and_then(|(ip, plain)| {
        listen_also(
            SocketAddr::new(ip, plain.port()),
            "proxy-dummy",
            None,
            (&handler, limits, &load, shutdown),
        )
    });
    let ports = ProxyPorts {
        plain_addr,
        plain_thread,
        dummy_plain,
        secure_addr: Arc::new(OnceLock::new()),
        dummy_secure: Arc::new(OnceLock::new()),
        load,
    };
    let open_https = https_opener(config, &ports, dummy_ip, https, (handler, limits, shutdown));
    Ok((ports, open_https))
}

/// What opens the HTTPS port when the first serving certificate is installed: bound on
/// `--proxy-secure-port` (and the dummy interface's address), its address published to the
/// drain and the filters. A failed bind is one error line: the plain port still serves.
fn https_opener(
    config: &Config,
    ports: &ProxyPorts,
    dummy_ip: Option<std::net::IpAddr>,
    https: Https,
    (handler, limits, shutdown): (server::Handler, Limits, &Arc<AtomicBool>),
) -> OpenHttps {
    let (bind, secure_addr, dummy_secure) = (
        config.proxy_secure_addr,
        Arc::clone(&ports.secure_addr),
        Arc::clone(&ports.dummy_secure),
    );
    let (load, shutdown) = (Arc::clone(&ports.load), Arc::clone(shutdown));
    let Https {
        serving,
        clients,
        filter_port,
    } = https;
    Box::new(move || match server::bind(bind) {
        Ok(listener) => {
            let addr = listener.local_addr();
            log::info!("listening role=https-proxy addr={addr}");
            let _ = secure_addr.set(addr);
            if let Some(port) = &filter_port {
                port.set(addr.port());
            }
            let tls = server::tls::server_config(serving, clients);
            if let Some(ip) = dummy_ip {
                let also = SocketAddr::new(ip, addr.port());
                let parts = (&handler, limits, &load, &shutdown);
                if listen_also(also, "https-proxy-dummy", Some(Arc::clone(&tls)), parts).is_some() {
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
