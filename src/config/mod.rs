//! Configuration in two stages, as ripgrep does it: [`flags`] turns `argv` into raw values
//! with no I/O, then [`from_args`] validates them, reads the kubeconfig and its files, and
//! returns a [`Config`] every later part can trust. Nothing here opens a socket or spawns a
//! thread; a bad flag, an unreadable file or a server that is not `https://` comes back as one
//! clear [`StartupError`] line.

pub(crate) mod cache_args;
pub(crate) mod flags;
pub(crate) mod join;
mod join_flags;
pub(crate) mod kubeconfig;

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::StartupError;
use crate::mode::WorkingMode;
use crate::names::{is_dns_label, is_dns_subdomain};
use crate::netif::{self, DummyInterface};
use crate::pool::leader;
use crate::pool::resources::PoolScope;
use crate::tls::{self, TlsMaterial};
pub use cache_args::CacheArgs;
use join::{CaPin, JoinToken};
pub(crate) use kubeconfig::Token;

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the hub.
    Run(Box<Config>),
    /// Print this text (help) and exit 0.
    Print(String),
    /// `tinyhub cache …`: a command on the disk cache, no hub (`cachectl`).
    Cache(CacheArgs),
}

/// A validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Cloud apiservers, in `--server-addr` order.
    pub(crate) servers: Vec<ServerUrl>,
    /// Where the hub's credentials for the cloud come from.
    pub(crate) identity: IdentitySource,
    /// `--root-dir`: the hub's kubeconfigs and certificates.
    pub(crate) root_dir: PathBuf,
    /// `--hub-cert-organizations`, duplicates removed.
    pub(crate) hub_cert_organizations: Vec<String>,
    /// `--node-ip`, else the address of the default route (None when there is none).
    pub(crate) node_ip: Option<IpAddr>,
    /// This node.
    pub(crate) node_name: String,
    /// This node's pool (`--nodepool-name`, a valid NodePool name whose `leader-hub-<pool>`
    /// is a valid ConfigMap name).
    pub nodepool_name: Option<String>,
    /// `--namespace`: where the pool's `leader-hub-<pool>` ConfigMap lives (a DNS label).
    pub(crate) namespace: String,
    /// The pool-scope resources at start: YurtHub's defaults plus `--pool-scope-resources`,
    /// sorted, each once; the pool's ConfigMap replaces them at run time once seen.
    pub(crate) pool_scope: PoolScope,
    /// Plain HTTP proxy listener.
    pub(crate) proxy_addr: SocketAddr,
    /// `--enable-plain-proxy`: serve the plain proxy port (on `proxy_addr` and the dummy
    /// interface). Without it only the HTTPS port serves the node's components.
    pub(crate) plain_proxy: bool,
    /// Health and metrics listener.
    pub(crate) serve_addr: SocketAddr,
    /// HTTPS proxy listener, opened once a serving certificate exists.
    pub(crate) proxy_secure_addr: SocketAddr,
    /// The dummy interface to make (`--enable-dummy-if`, `--dummy-if-name`, `--dummy-if-ip`):
    /// None when disabled. Both proxy ports also listen on its address.
    pub(crate) dummy_if: Option<DummyInterface>,
    /// `--multiplexer-port`: where a leader hub serves its pool (on `node_ip`), and where
    /// followers reach their leaders.
    pub multiplexer_port: u16,
    /// `--multiplexer-client-ca-file`: the CA a leader checks its followers' client
    /// certificates against; None for the cluster CA.
    pub(crate) multiplexer_client_ca: Option<PathBuf>,
    /// `--pool-leader-max-staleness`: a follower skips a leader whose view of a resource is
    /// older (zero: no check).
    pub(crate) pool_leader_max_staleness: Duration,
    /// Cache root.
    pub(crate) disk_cache_path: PathBuf,
    /// `--cache-max-bytes`: the most bytes the cache's files may take (0: no bound).
    pub(crate) cache_max_bytes: u64,
    /// Components cached besides the defaults (`*` = all).
    pub(crate) cache_agents: Vec<String>,
    /// How requests spread over the servers.
    pub(crate) lb_mode: LbMode,
    /// Health-probe settings.
    pub(crate) heartbeat: Heartbeat,
    /// How cloud servers are probed: always [`HeartbeatMode::Readyz`] in cloud mode.
    pub(crate) heartbeat_mode: HeartbeatMode,
    /// `--kubelet-health-grace-period`: kubelet is stopped after this long without a lease
    /// request; whole seconds of it are the `leaseDurationSeconds` of a lease the hub creates.
    pub(crate) kubelet_health_grace_period: Duration,
    /// Edge (cache and offline answers) or cloud (pure proxy).
    pub(crate) working_mode: WorkingMode,
    /// `--enable-resource-filter`.
    pub(crate) enable_resource_filter: bool,
    /// `--disabled-resource-filters`.
    pub disabled_resource_filters: Vec<String>,
    /// `--offline-endpoints-overlay`, and edge mode: the EndpointSlices and Endpoints of this
    /// node's pods follow kubelet's offline status updates (`overlay/`).
    pub(crate) offline_endpoints_overlay: bool,
    /// `--upstream-gzip`: the hub asks the cloud for gzip on its reads and inflates for
    /// clients that did not ask (issue 32).
    pub(crate) upstream_gzip: bool,
    /// Concurrent requests served before answering 429.
    pub(crate) max_requests_in_flight: usize,
    /// `--v`, `--vmodule`, `--skip-headers`, `--add-dir-header`.
    pub log: crate::logging::LogOptions,
    /// YurtHub and logging flags given and not honoured, named in one warning once logging
    /// is up.
    pub(crate) ignored_flags: Vec<String>,
    /// Other things to warn about once logging is up.
    pub(crate) warnings: Vec<String>,
    /// Time one read of a client's request body, or one write of its answer, may take
    /// (60 s; shorter only through a test-only flag).
    pub(crate) client_io_timeout: Duration,
    /// Time the cache writer sleeps before each message, as a slow flash would (tests only:
    /// `None` unless a test-only flag sets it).
    pub(crate) cache_writer_delay: Option<Duration>,
    /// The limits of tunnels (4 h idle, 60 s for the cloud's 101; shorter only through
    /// test-only flags).
    pub(crate) tunnel: crate::tunnel::Limits,
    /// Time between writes of `link-totals.json` (60 s; shorter only through a test-only
    /// flag).
    pub(crate) link_write_interval: Duration,
}

/// Where the hub's identity for the cloud comes from (`--kubeconfig`, else `--bootstrap-mode`).
#[derive(Debug)]
pub(crate) enum IdentitySource {
    /// A kubeconfig the user made: fixed material, as before bootstrap modes existed.
    Kubeconfig {
        /// CA and client certificate.
        tls: TlsMaterial,
        /// Bearer token, when the kubeconfig has one.
        token: Option<Token>,
    },
    /// `--bootstrap-mode=token`: the hub's own certificates, requested by CSR.
    Token(TokenMode),
    /// `--bootstrap-mode=kubeletcertificate`: kubelet's client certificate, re-read when it
    /// changes.
    Kubelet(KubeletFiles),
}

/// Token mode's inputs.
#[derive(Debug, Clone)]
pub(crate) struct TokenMode {
    /// `--bootstrap-file`: a bootstrap kubeconfig to read (and to rewrite on `/v1/token`).
    pub bootstrap_file: Option<PathBuf>,
    /// `--join-token`, for `cluster-info` discovery when no bootstrap kubeconfig exists.
    pub join_token: Option<JoinToken>,
    /// `--discovery-token-ca-cert-hash`.
    pub pins: Vec<CaPin>,
    /// `--discovery-token-unsafe-skip-ca-verification`.
    pub unsafe_skip: bool,
    /// Which signer the client certificate is requested from.
    pub signer: ClientSigner,
}

/// `--hub-cert-signer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientSigner {
    /// `kubernetes.io/kube-apiserver-client`, O `openyurt:yurthub` and `system:nodes` (plus
    /// `--hub-cert-organizations`): YurtHub's, approved by yurt-manager.
    ApiserverClient,
    /// `kubernetes.io/kube-apiserver-client-kubelet`, O exactly `system:nodes`: approved by a
    /// plain kube-controller-manager, for clusters without yurt-manager.
    ApiserverClientKubelet,
}

/// kubelet's files that kubeletcertificate mode reads.
#[derive(Debug, Clone)]
pub(crate) struct KubeletFiles {
    /// kubelet's kubeconfig (its server).
    pub kubeconfig: PathBuf,
    /// The cluster CA.
    pub ca: PathBuf,
    /// kubelet's client certificate and key in one file (usually a symlink kubelet swaps).
    pub cert: PathBuf,
}

/// One cloud apiserver, `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerUrl {
    /// `https://host:port` with no trailing slash; request paths are appended to it.
    pub base: String,
}

/// `--lb-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LbMode {
    /// Round robin over healthy servers.
    RoundRobin,
    /// The first healthy server in `--server-addr` order.
    Priority,
    /// The same client (User-Agent and target) to the same healthy server, by rendezvous
    /// hashing.
    ConsistentHashing,
}

/// `--heartbeat-mode`: what a health probe of a cloud server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeartbeatMode {
    /// Renew the node lease through the server (YurtHub's edge mode); kubelet's lease
    /// requests are answered by the hub.
    Lease,
    /// `GET /readyz`: for cloud mode, and for an identity that may not write the node lease.
    Readyz,
}

/// Health-probe settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heartbeat {
    /// Time between probe rounds.
    pub interval: Duration,
    /// Timeout of one probe.
    pub timeout: Duration,
    /// Retries after a failed probe before the server is unhealthy.
    pub failed_retry: u32,
    /// Consecutive successes before an unhealthy server is healthy again.
    pub healthy_threshold: u32,
}

/// The text `--version` prints: version and the target triple this binary was built for.
pub(crate) fn version_text() -> String {
    format!(
        "tinyhub {} ({})\n",
        env!("CARGO_PKG_VERSION"),
        env!("TINYHUB_TARGET")
    )
}

/// Parses and validates the arguments after the program name.
pub fn from_args<I>(args: I) -> Result<Command, StartupError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut args = args.into_iter().map(Into::into).peekable();
    if args.peek().is_some_and(|first| first == "cache") {
        args.next();
        return match cache_args::parse(args)? {
            cache_args::Parsed::Run(cache) => Ok(Command::Cache(cache)),
            cache_args::Parsed::Help => Ok(Command::Print(flags::wrap(
                &cache_args::help_text(),
                flags::help_width(),
            ))),
        };
    }
    let raw = flags::parse(args)?;
    if raw.get("help").is_some_and(|v| v != "false") {
        // Fitted to the terminal, or 80 columns (issue 35: lines ran to 400).
        return Ok(Command::Print(flags::wrap(
            &flags::help_text(),
            flags::help_width(),
        )));
    }
    if raw.get("version").is_some_and(|v| v != "false") {
        return Ok(Command::Print(version_text()));
    }
    validate(&raw).map(|c| Command::Run(Box::new(c)))
}

fn validate(raw: &flags::RawFlags) -> Result<Config, StartupError> {
    let f = Flags { raw };
    // Its error waits until every other flag's value is judged (the `identity` field, last
    // below): a bad value (`--proxy-port=abc`) is what to report, not the missing
    // credentials it would hide behind.
    let credentials = identity_of(&f);
    let kubeconfig_server;
    let node_name = node_name_of(raw)?;
    let (bind, proxy_addr, proxy_secure_addr, serve_addr) = addresses(&f)?;
    let lb_mode = lb_mode_of(&f)?;
    let working_mode = working_mode_of(&f)?;
    let dummy_if = dummy_interface(raw, bind, f.boolean("enable-dummy-if")?)?;

    let heartbeat = Heartbeat {
        interval: Duration::from_secs(f.int("heartbeat-interval-seconds", 1, 3600)?),
        timeout: Duration::from_secs(f.int("heartbeat-timeout-seconds", 1, 600)?),
        failed_retry: f.int("heartbeat-failed-retry", 0, 100)? as u32,
        healthy_threshold: f.int("heartbeat-healthy-threshold", 1, 100)? as u32,
    };
    let kubelet_health_grace_period = grace_period(&f)?;
    let mut warnings = Vec::new();
    let heartbeat_mode = heartbeat_mode_of(&f, working_mode, &mut warnings)?;

    let cache_agents = f
        .list("cache-agents")
        .into_iter()
        .map(|a| a.to_ascii_lowercase())
        .collect();

    let root_dir = PathBuf::from(f.get("root-dir"));
    let node_ip = node_ip_of(&f, &root_dir, &mut warnings)?;
    let (nodepool_name, namespace, pool_scope) = pool_of(&f)?;
    let mut hub_cert_organizations: Vec<String> = Vec::new();
    for org in f.all("hub-cert-organizations") {
        if !hub_cert_organizations.contains(&org) {
            hub_cert_organizations.push(org);
        }
    }

    // (A struct expression evaluates its fields in the order written.)
    Ok(Config {
        root_dir,
        hub_cert_organizations,
        node_ip,
        node_name,
        nodepool_name,
        namespace,
        pool_scope,
        proxy_addr,
        plain_proxy: f.boolean("enable-plain-proxy")?,
        serve_addr,
        proxy_secure_addr,
        dummy_if,
        multiplexer_port: f.port("multiplexer-port")?,
        multiplexer_client_ca: raw
            .get("multiplexer-client-ca-file")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        pool_leader_max_staleness: parse_go_duration(f.get("pool-leader-max-staleness"))
            .map_err(|e| StartupError::flag("pool-leader-max-staleness", e))?,
        disk_cache_path: PathBuf::from(f.get("disk-cache-path")),
        cache_max_bytes: f.bytes_bound("cache-max-bytes", MIN_CACHE_BOUND)?,
        cache_agents,
        lb_mode,
        heartbeat,
        heartbeat_mode,
        kubelet_health_grace_period,
        working_mode,
        enable_resource_filter: f.boolean("enable-resource-filter")?,
        disabled_resource_filters: f.list("disabled-resource-filters"),
        offline_endpoints_overlay: overlay_of(&f, working_mode, &mut warnings)?,
        upstream_gzip: f.boolean("upstream-gzip")?,
        max_requests_in_flight: f.int("max-requests-in-flight", 1, 100_000)? as usize,
        log: crate::logging::LogOptions {
            verbosity: f.int("v", 0, 10)? as u8,
            vmodule: crate::logging::parse_vmodule(f.get("vmodule"))
                .map_err(|e| StartupError::flag("vmodule", e))?,
            skip_headers: f.boolean("skip-headers")?,
            add_dir_header: f.boolean("add-dir-header")?,
        },
        ignored_flags: raw.ignored.clone(),
        warnings,
        client_io_timeout: Duration::from_secs(f.int(
            "test-only-client-io-timeout-seconds",
            1,
            3600,
        )?),
        cache_writer_delay: Some(f.int("test-only-cache-writer-delay-ms", 0, 60_000)?)
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis),
        tunnel: crate::tunnel::Limits {
            idle: Duration::from_secs(f.int("test-only-tunnel-idle-seconds", 1, 86_400)?),
            answer: Duration::from_secs(f.int("test-only-tunnel-answer-seconds", 1, 3600)?),
        },
        link_write_interval: Duration::from_secs(f.int("test-only-link-write-seconds", 1, 3600)?),
        identity: {
            let (identity, server) = credentials?;
            kubeconfig_server = server;
            identity
        },
        servers: servers_of(&f, kubeconfig_server)?,
    })
}

/// The smallest `--cache-max-bytes` taken (but 0, no bound): 1 MiB.
const MIN_CACHE_BOUND: u64 = 1 << 20;

/// A Kubernetes quantity as whole bytes: digits, then optionally a binary (`Ki` … `Ei`) or
/// decimal (`k` … `E`) suffix; `None` for anything else (fractions, exponents, overflow).
pub(crate) fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// The raw flags with their defaults, read as the types they hold; a bad value is a
/// [`StartupError`] naming its flag.
struct Flags<'a> {
    raw: &'a flags::RawFlags,
}

impl Flags<'_> {
    /// The flag's value, or its default (from the flag table).
    fn get(&self, name: &str) -> &str {
        self.raw.get(name).unwrap_or_else(|| {
            flags::FLAGS
                .iter()
                .chain(flags::TEST_FLAGS)
                .find(|s| s.name == name)
                .map(|s| s.default)
                .unwrap_or("")
        })
    }

    /// A whole number within `min..=max`; a refusal says what the flag takes.
    fn int(&self, name: &str, min: u64, max: u64) -> Result<u64, StartupError> {
        let text = self.get(name);
        let wanted = format!("a whole number from {min} to {max}");
        // Read wider than the flag takes, so that `-1` is out of range, not "no number".
        let Ok(value) = text.parse::<i128>() else {
            let why = format!("{text:?} is not a number: it takes {wanted}");
            return Err(StartupError::flag(name, why));
        };
        match u64::try_from(value) {
            Ok(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(StartupError::flag(
                name,
                format!("{value} is outside the range it takes: {wanted}"),
            )),
        }
    }

    /// A byte count with Kubernetes quantity suffixes (`16Mi`, `64M`, `1048576`): 0, or at
    /// least `min` (a smaller bound could not hold even a few objects).
    fn bytes_bound(&self, name: &str, min: u64) -> Result<u64, StartupError> {
        let text = self.get(name);
        let value = parse_quantity(text).ok_or_else(|| {
            StartupError::flag(
                name,
                format!("{text:?} is not a byte count (a whole number, optionally with Ki, Mi, Gi, Ti, k, M, G or T)"),
            )
        })?;
        if value != 0 && value < min {
            return Err(StartupError::flag(
                name,
                format!("{text} is below {min} bytes (1Mi); 0 means no bound"),
            ));
        }
        Ok(value)
    }

    /// A port (0 lets the kernel choose).
    fn port(&self, name: &str) -> Result<u16, StartupError> {
        self.int(name, 0, 65535).map(|p| p as u16)
    }

    /// A boolean, as Go's ParseBool reads it.
    fn boolean(&self, name: &str) -> Result<bool, StartupError> {
        let text = self.get(name);
        flags::parse_bool(text)
            .ok_or_else(|| StartupError::flag(name, format!("{text:?} is not a boolean")))
    }

    /// `text`, the value of flag `name`, as an IP address.
    fn ip(&self, name: &str, text: &str) -> Result<IpAddr, StartupError> {
        text.parse()
            .map_err(|_| StartupError::flag(name, format!("{text:?} is not an IP address")))
    }

    /// A comma list.
    fn list(&self, name: &str) -> Vec<String> {
        split_list(self.get(name))
    }

    /// A repeatable slice flag: every occurrence, each a comma list, as pflag reads them.
    fn all(&self, name: &str) -> Vec<String> {
        self.raw.all(name).flat_map(split_list).collect()
    }
}

/// Where the hub's credentials come from, and the server a kubeconfig names.
fn identity_of(f: &Flags<'_>) -> Result<(IdentitySource, Option<String>), StartupError> {
    let raw = f.raw;
    let boolean = |name: &str| f.boolean(name);
    // A kubeconfig the user gives wins over bootstrap (YurtHub has no such flag; tinyhub's
    // users had only this until bootstrap modes came).
    Ok(match raw.get("kubeconfig").filter(|p| !p.is_empty()) {
        Some(path) => given_kubeconfig(path)?,
        None => match f.get("bootstrap-mode") {
            "token" => token_mode(raw, &boolean)?,
            "kubeletcertificate" => {
                let files = KubeletFiles {
                    kubeconfig: PathBuf::from(f.get("kubelet-kubeconfig")),
                    ca: PathBuf::from(f.get("kubelet-ca-file")),
                    cert: PathBuf::from(f.get("kubelet-client-certificate")),
                };
                // Only the server is needed now; the certificate is read (and re-read) by
                // the identity manager, which says clearly when it is missing.
                let server = kubeconfig::load(&files.kubeconfig)
                    .map_err(|e| e.context("--bootstrap-mode=kubeletcertificate"))?
                    .server;
                (IdentitySource::Kubelet(files), server)
            }
            other => {
                return Err(StartupError::flag(
                    "bootstrap-mode",
                    format!("{other:?} is not token or kubeletcertificate"),
                ));
            }
        },
    })
}

/// `--server-addr`, else the kubeconfig's server: at least one.
fn servers_of(
    f: &Flags<'_>,
    kubeconfig_server: Option<String>,
) -> Result<Vec<ServerUrl>, StartupError> {
    let raw = f.raw;
    let server_list = match raw.get("server-addr").filter(|s| !s.trim().is_empty()) {
        Some(_) => f.list("server-addr"),
        None => kubeconfig_server.into_iter().collect(),
    };
    if server_list.is_empty() {
        return Err(StartupError::new(
            "no cloud server: give --server-addr or a kubeconfig with a cluster server",
        ));
    }
    let servers = server_list
        .iter()
        .map(|s| parse_server(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(servers)
}

/// `--node-name`, else the hostname; a valid node name.
fn node_name_of(raw: &flags::RawFlags) -> Result<String, StartupError> {
    let node_name = match raw.get("node-name").filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None => hostname().ok_or_else(|| {
            StartupError::new("--node-name is not set and the hostname cannot be read")
        })?,
    };
    if !is_dns_subdomain(&node_name) {
        return Err(StartupError::flag(
            "node-name",
            format!("{node_name:?} is not a valid node name"),
        ));
    }
    Ok(node_name)
}

/// `--bind-address`, and the proxy, HTTPS proxy and serve addresses.
fn addresses(f: &Flags<'_>) -> Result<(IpAddr, SocketAddr, SocketAddr, SocketAddr), StartupError> {
    let raw = f.raw;
    let bind = f.ip("bind-address", f.get("bind-address"))?;
    let proxy_bind = match raw.get("bind-proxy-address").filter(|s| !s.is_empty()) {
        Some(text) => f.ip("bind-proxy-address", text)?,
        None => bind,
    };
    let proxy_addr = SocketAddr::new(proxy_bind, f.port("proxy-port")?);
    let proxy_secure_addr = SocketAddr::new(proxy_bind, f.port("proxy-secure-port")?);
    let serve_addr = SocketAddr::new(bind, f.port("serve-port")?);
    if proxy_addr == serve_addr && proxy_addr.port() != 0 {
        return Err(StartupError::new(format!(
            "--proxy-port and --serve-port are both {}",
            proxy_addr.port()
        )));
    }
    Ok((bind, proxy_addr, proxy_secure_addr, serve_addr))
}

/// `--lb-mode`.
fn lb_mode_of(f: &Flags<'_>) -> Result<LbMode, StartupError> {
    Ok(match f.get("lb-mode") {
        "rr" => LbMode::RoundRobin,
        "priority" => LbMode::Priority,
        "consistent-hashing" => LbMode::ConsistentHashing,
        other => {
            return Err(StartupError::flag(
                "lb-mode",
                format!("{other:?} is not rr, priority or consistent-hashing"),
            ));
        }
    })
}

/// `--working-mode`: edge or cloud.
fn working_mode_of(f: &Flags<'_>) -> Result<WorkingMode, StartupError> {
    Ok(match f.get("working-mode") {
        "edge" => WorkingMode::Edge,
        "cloud" => WorkingMode::Cloud,
        // YurtHub's local mode programs iptables DNAT from --server-addr to a tenant control
        // plane's apiservers found through --host-control-plane-address: a job with nothing
        // to cache, which tinyhub does not do. Running as edge instead would mislead.
        "local" => {
            return Err(StartupError::flag(
                "working-mode",
                "local is not supported: YurtHub's local mode (iptables DNAT to a tenant control plane's apiservers from --host-control-plane-address) is not implemented in tinyhub; use edge or cloud",
            ));
        }
        other => {
            return Err(StartupError::flag(
                "working-mode",
                format!("{other:?} is not edge or cloud"),
            ));
        }
    })
}

/// `--kubelet-health-grace-period`, within 1 s..=24 h.
fn grace_period(f: &Flags<'_>) -> Result<Duration, StartupError> {
    Ok({
        let text = f.get("kubelet-health-grace-period");
        let grace = parse_go_duration(text)
            .map_err(|e| StartupError::flag("kubelet-health-grace-period", e))?;
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&grace) {
            return Err(StartupError::flag(
                "kubelet-health-grace-period",
                format!("{text:?} is outside 1s..=24h"),
            ));
        }
        grace
    })
}

/// `--heartbeat-mode` as the working mode allows it (cloud mode probes with `/readyz`, with a
/// warning when lease was asked for).
fn heartbeat_mode_of(
    f: &Flags<'_>,
    working_mode: WorkingMode,
    warnings: &mut Vec<String>,
) -> Result<HeartbeatMode, StartupError> {
    let raw = f.raw;
    Ok(match (f.get("heartbeat-mode"), working_mode) {
        ("lease", WorkingMode::Edge) => HeartbeatMode::Lease,
        ("readyz", _) => HeartbeatMode::Readyz,
        ("lease", WorkingMode::Cloud) => {
            // Cloud mode forwards kubelet's lease requests: kubelet renews its own lease.
            if raw.get("heartbeat-mode").is_some() {
                warnings.push(
                    "--heartbeat-mode=lease has no effect with --working-mode=cloud: servers are probed with /readyz".to_owned(),
                );
            }
            HeartbeatMode::Readyz
        }
        (other, _) => {
            return Err(StartupError::flag(
                "heartbeat-mode",
                format!("{other:?} is not lease or readyz"),
            ));
        }
    })
}

/// `--offline-endpoints-overlay` (edge mode only: cloud mode has no cache to serve endpoints
/// from, and says so when the flag turns the overlay on there explicitly).
fn overlay_of(
    f: &Flags<'_>,
    working_mode: WorkingMode,
    warnings: &mut Vec<String>,
) -> Result<bool, StartupError> {
    let on = f.boolean("offline-endpoints-overlay")?;
    if on && working_mode == WorkingMode::Cloud && f.raw.get("offline-endpoints-overlay").is_some()
    {
        warnings.push(
            "--offline-endpoints-overlay has no effect with --working-mode=cloud: there is no cache to serve endpoints from".to_owned(),
        );
    }
    Ok(on && working_mode == WorkingMode::Edge)
}

/// `--node-ip`, else the default route's address; with the warnings about it and about a
/// `--kubeconfig` that is the hub's own.
fn node_ip_of(
    f: &Flags<'_>,
    root_dir: &std::path::Path,
    warnings: &mut Vec<String>,
) -> Result<Option<IpAddr>, StartupError> {
    let raw = f.raw;
    let node_ip = match raw.get("node-ip").filter(|s| !s.is_empty()) {
        Some(text) => Some(f.ip("node-ip", text)?),
        None => default_route_ip(),
    };
    if node_ip.is_none() {
        warnings.push("no --node-ip and no default route: the serving certificate names only the bind addresses and the kubernetes Service".to_owned());
    }
    // The hub's own kubeconfig from token mode, given back as --kubeconfig, would never
    // be renewed: that flag means "the user's credentials".
    if let Some(path) = raw.get("kubeconfig").filter(|p| !p.is_empty())
        && std::fs::canonicalize(path).ok()
            == std::fs::canonicalize(root_dir.join("yurthub.conf")).ok()
        && std::fs::canonicalize(path).is_ok()
    {
        warnings.push(format!(
            "--kubeconfig={path} is the hub's own kubeconfig: with --kubeconfig its certificate is never renewed; leave the flag out to let token mode renew it"
        ));
    }
    Ok(node_ip)
}

/// `--nodepool-name`, `--namespace` and `--pool-scope-resources`.
fn pool_of(f: &Flags<'_>) -> Result<(Option<String>, String, PoolScope), StartupError> {
    let raw = f.raw;
    let nodepool_name = raw
        .get("nodepool-name")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    if let Some(pool) = &nodepool_name
        && (!is_dns_subdomain(pool) || leader::config_name(pool).is_err())
    {
        return Err(StartupError::flag(
            "nodepool-name",
            format!(
                "{pool:?} is not a valid NodePool name (lower-case, at most 242 bytes for leader-hub-<pool>)"
            ),
        ));
    }
    let namespace = f.get("namespace").to_owned();
    if !is_dns_label(&namespace) {
        return Err(StartupError::flag(
            "namespace",
            format!("{namespace:?} is not a valid namespace"),
        ));
    }
    let pool_scope = PoolScope::parse_flag_values(raw.all("pool-scope-resources"))
        .map(PoolScope::with_defaults)
        .map_err(|e| StartupError::flag("pool-scope-resources", e.to_string()))?;
    Ok((nodepool_name, namespace, pool_scope))
}

/// `--dummy-if-ip` (by YurtHub's rules, default by `--bind-address`'s family) and
/// `--dummy-if-name`, checked whether or not the interface is enabled, as YurtHub checks the
/// address. Made in cloud mode too, as YurtHub does (openyurt cmd/yurthub/app/config/
/// config.go:237): masterservice and inclusterconfig still point the node's pods at the hub.
fn dummy_interface(
    raw: &flags::RawFlags,
    bind: IpAddr,
    enable: bool,
) -> Result<Option<DummyInterface>, StartupError> {
    let ip = match raw.get("dummy-if-ip").filter(|s| !s.is_empty()) {
        Some(text) => {
            let ip: IpAddr = text.parse().map_err(|_| {
                StartupError::flag("dummy-if-ip", format!("{text:?} is not an IP address"))
            })?;
            netif::validate_dummy_ip(ip).map_err(|e| StartupError::new(e.to_string()))?;
            ip
        }
        None => netif::default_dummy_ip(bind),
    };
    let name = raw.get("dummy-if-name").unwrap_or(netif::DEFAULT_NAME);
    let kind = match raw.get("test-only-dummy-if-kind").unwrap_or("dummy") {
        "dummy" => "dummy",
        "bridge" => "bridge",
        other => {
            return Err(StartupError::flag(
                "test-only-dummy-if-kind",
                format!("{other:?} is not dummy or bridge"),
            ));
        }
    };
    let interface = if kind == "dummy" {
        DummyInterface::new(name, ip)
    } else {
        DummyInterface::with_kind(name, ip, kind)
    }
    .map_err(|e| StartupError::flag("dummy-if-name", e.to_string()))?;
    Ok(enable.then_some(interface))
}

/// A Go duration as `time.ParseDuration` reads it (`40s`, `1m30s`, `1.5h`, `300ms`, `0`),
/// without a sign: a negative duration means nothing for the flags that take one.
// A String error on purpose: it has one cause (the text is not a duration), no caller
// decides anything from it, and it is the flag's message, printed as-is by
// `StartupError::flag` at start-up (the edge of the program).
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (such as 40s, 1m30s, 1.5h)");
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: u128 = 0;
    let mut rest = rest;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(bad());
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let mut part = whole.checked_mul(per_unit).ok_or_else(bad)?;
        // Digits past nanosecond precision cannot matter; 30 keeps 10^len within u128.
        let mut scale = per_unit;
        for digit in fraction.bytes().take(30) {
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        nanos = nanos.checked_add(part).ok_or_else(bad)?;
        rest = tail;
    }
    // Go's limit: what fits an int64 of nanoseconds (~292 years).
    let nanos = u64::try_from(nanos)
        .ok()
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(bad)?;
    Ok(Duration::from_nanos(nanos))
}

/// A comma list, blanks dropped.
fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `--kubeconfig`: the user's own credentials, checked now. Also its server.
fn given_kubeconfig(path: &str) -> Result<(IdentitySource, Option<String>), StartupError> {
    let kubeconfig = kubeconfig::load(path.as_ref())?;
    // Later refusals of what the kubeconfig holds name it, as its own errors do.
    let in_kubeconfig =
        |message: &str| StartupError::new(message).context(format!("kubeconfig {path}"));
    if kubeconfig.insecure_skip_tls_verify {
        return Err(in_kubeconfig(
            "insecure-skip-tls-verify is not supported: give the cloud's CA",
        ));
    }
    let ca = kubeconfig
        .ca_pem
        .as_deref()
        .ok_or_else(|| in_kubeconfig("no certificate-authority: the hub must verify its cloud"))?;
    let client = kubeconfig
        .client_cert_pem
        .as_deref()
        .zip(kubeconfig.client_key_pem.as_deref());
    let tls = tls::load(ca, client).map_err(|e| e.context(format!("kubeconfig {path}")))?;
    if tls.client.is_none() && kubeconfig.token.is_none() {
        return Err(in_kubeconfig(
            "the current user has neither a client certificate nor a token",
        ));
    }
    let identity = IdentitySource::Kubeconfig {
        tls,
        token: kubeconfig.token,
    };
    Ok((identity, kubeconfig.server))
}

/// `--bootstrap-mode=token`: a bootstrap file or a join token, and the pins discovery needs.
/// Also the bootstrap file's server, the default of `--server-addr`.
fn token_mode(
    raw: &flags::RawFlags,
    boolean: &dyn Fn(&str) -> Result<bool, StartupError>,
) -> Result<(IdentitySource, Option<String>), StartupError> {
    let bootstrap_file = raw
        .get("bootstrap-file")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let join_token = join_flags::join_token(raw)?;
    if bootstrap_file.is_none() && join_token.is_none() {
        return Err(StartupError::new(
            "the hub needs credentials for the cloud: give --kubeconfig, or --bootstrap-file or --join-token or --join-token-file (--bootstrap-mode=token), or --bootstrap-mode=kubeletcertificate",
        ));
    }
    let pins = raw
        .all("discovery-token-ca-cert-hash")
        .flat_map(split_list)
        .map(|p| {
            CaPin::parse(&p)
                .map_err(|e| StartupError::flag("discovery-token-ca-cert-hash", e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A pin guards discovery only: a bootstrap file already carries the CA (YurtHub asks
    // for pins even then, which its own static-pod templates do not pass).
    let unsafe_skip = boolean("discovery-token-unsafe-skip-ca-verification")?;
    if join_token.is_some() && bootstrap_file.is_none() && pins.is_empty() && !unsafe_skip {
        return Err(StartupError::new(
            "--join-token discovery needs --discovery-token-ca-cert-hash=sha256:<hex> (or --discovery-token-unsafe-skip-ca-verification)",
        ));
    }
    let signer = match raw
        .get("hub-cert-signer")
        .unwrap_or("kube-apiserver-client")
    {
        "kube-apiserver-client" => ClientSigner::ApiserverClient,
        "kube-apiserver-client-kubelet" => ClientSigner::ApiserverClientKubelet,
        other => {
            return Err(StartupError::flag(
                "hub-cert-signer",
                format!("{other:?} is not kube-apiserver-client or kube-apiserver-client-kubelet"),
            ));
        }
    };
    // The bootstrap file is read now only for its server; an unreadable one is the identity
    // manager's to report (yurtadm may write it after the hub's unit starts).
    let server = bootstrap_file
        .as_deref()
        .and_then(|p| kubeconfig::load(p).ok())
        .and_then(|k| k.server);
    let mode = TokenMode {
        bootstrap_file,
        join_token,
        pins,
        unsafe_skip,
        signer,
    };
    Ok((IdentitySource::Token(mode), server))
}

/// The local address of the default route, as YurtHub's `--node-ip` default: a UDP socket
/// "connected" to a documentation address sends nothing and learns the source address.
fn default_route_ip() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// Checks one `--server-addr` entry: `https://host[:port]`, no path, query or user info.
fn parse_server(text: &str) -> Result<ServerUrl, StartupError> {
    let bad = |why: &str| StartupError::flag("server-addr", format!("{text:?} {why}"));
    let rest = text
        .strip_prefix("https://")
        .ok_or_else(|| bad("is not an https:// URL (the hub talks TLS to its cloud)"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err(bad("has no host"));
    }
    if authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("must be only https://host:port"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        // An IPv6 literal without a port ends in `]`.
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (authority, None),
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("has a bad port")),
        }
    }
    Ok(ServerUrl {
        base: format!("https://{authority}"),
    })
}

fn hostname() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()?;
    let name = text.trim().to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: PathBuf,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("tinyhub-cfg-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let ca_key = rcgen::KeyPair::generate().unwrap();
            let ca = rcgen::CertificateParams::new(vec!["ca".to_owned()])
                .unwrap()
                .self_signed(&ca_key)
                .unwrap();
            std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
            Fixture { dir }
        }

        fn kubeconfig(&self, server: &str, user: &str) -> String {
            let path = self.dir.join("kubeconfig");
            let text = format!(
                "clusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            );
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn run(args: &[&str]) -> Result<Config, String> {
        match from_args(args.iter().copied()) {
            Ok(Command::Run(c)) => Ok(*c),
            Ok(other) => Err(format!("not a run: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn defaults_follow_yurthub() {
        let f = Fixture::new("defaults");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let c = run(&["--kubeconfig", &kc, "--node-name=edge-1"]).unwrap();
        assert_eq!(
            c.servers,
            vec![ServerUrl {
                base: "https://10.0.0.1:6443".into()
            }]
        );
        assert_eq!(c.proxy_addr, "127.0.0.1:10261".parse().unwrap());
        assert_eq!(c.serve_addr, "127.0.0.1:10267".parse().unwrap());
        assert_eq!(c.proxy_secure_addr, "127.0.0.1:10268".parse().unwrap());
        assert_eq!(c.multiplexer_port, 10269);
        assert_eq!(c.multiplexer_client_ca, None, "the cluster CA");
        assert_eq!(c.disk_cache_path, PathBuf::from("/etc/kubernetes/cache"));
        assert_eq!(c.lb_mode, LbMode::RoundRobin);
        assert_eq!(c.working_mode, WorkingMode::Edge);
        assert_eq!(c.heartbeat.interval, Duration::from_secs(10));
        assert_eq!(c.heartbeat.timeout, Duration::from_secs(2));
        assert_eq!(c.heartbeat.failed_retry, 3);
        assert_eq!(c.heartbeat.healthy_threshold, 2);
        assert_eq!(c.heartbeat_mode, HeartbeatMode::Lease);
        assert_eq!(c.kubelet_health_grace_period, Duration::from_secs(40));
        assert_eq!(c.pool_leader_max_staleness, Duration::from_secs(90));
        assert!(c.enable_resource_filter);
        assert_eq!(c.max_requests_in_flight, 250);
        assert!(
            matches!(&c.identity, IdentitySource::Kubeconfig { token: Some(Token::Inline(t)), .. } if t == "abc")
        );
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/yurthub"));
    }

    #[test]
    fn pool_flags_default_to_yurthubs_and_the_resources_add_to_the_defaults() {
        let f = Fixture::new("pool");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let with = |extra: &[&str]| {
            let mut args = vec!["--kubeconfig", kc.as_str(), "--node-name=n"];
            args.extend_from_slice(extra);
            run(&args)
        };
        let c = with(&[]).unwrap();
        assert_eq!(c.namespace, "kube-system");
        assert_eq!(c.nodepool_name, None);
        assert_eq!(
            c.pool_scope.to_metadata(),
            "/v1/services,discovery.k8s.io/v1/endpointslices"
        );
        let c = with(&[
            "--namespace=yurt-system",
            "--nodepool-name=hangzhou.edge",
            "--pool-scope-resources=apps/v1/deployments,/v1/services",
            "--pool-scope-resources",
            " /v1/nodes ",
        ])
        .unwrap();
        assert_eq!(c.namespace, "yurt-system");
        assert_eq!(c.nodepool_name.as_deref(), Some("hangzhou.edge"));
        assert_eq!(
            c.pool_scope.to_metadata(),
            "/v1/nodes,/v1/services,apps/v1/deployments,discovery.k8s.io/v1/endpointslices"
        );
        assert!(c.ignored_flags.is_empty(), "{:?}", c.ignored_flags);
        // Given empty: the defaults alone.
        let c = with(&["--pool-scope-resources="]).unwrap();
        assert_eq!(c.pool_scope.iter().count(), 2);

        let long_pool = format!("--nodepool-name={}", "p".repeat(243));
        for (flag, want) in [
            (
                "--pool-scope-resources=/v1/services,apps/deployments",
                "--pool-scope-resources: \"apps/deployments\" is not group/version/resource",
            ),
            (
                "--pool-scope-resources=/v1/Services",
                "\"Services\" is not a resource name",
            ),
            (
                "--namespace=Kube_System",
                "--namespace: \"Kube_System\" is not a valid namespace",
            ),
            ("--namespace=", "--namespace: \"\" is not a valid namespace"),
            (
                "--nodepool-name=Pool A",
                "--nodepool-name: \"Pool A\" is not a valid NodePool name",
            ),
            (long_pool.as_str(), "--nodepool-name"),
        ] {
            let err = with(&[flag]).expect_err(flag);
            assert!(
                err.contains(want),
                "{flag}: {err:?} should mention {want:?}"
            );
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
        assert!(with(&[&format!("--nodepool-name={}", "p".repeat(242))]).is_ok());
    }

    #[test]
    fn go_durations() {
        let secs = Duration::from_secs;
        for (text, want) in [
            ("40s", secs(40)),
            ("0", Duration::ZERO),
            ("+5s", secs(5)),
            ("1m30s", secs(90)),
            ("1.5h", secs(5400)),
            ("2h0m0.5s", Duration::from_millis(7_200_500)),
            ("300ms", Duration::from_millis(300)),
            (".5s", Duration::from_millis(500)),
            ("1.s", secs(1)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
        ] {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
        for text in [
            "",
            "40",
            "-40s",
            "4 0s",
            "40x",
            "s",
            ".s",
            "1..5s",
            "1.2.3s",
            "9999999999h",
        ] {
            assert!(parse_go_duration(text).is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn the_kubelet_grace_period_is_a_go_duration_of_at_least_a_second() {
        let f = Fixture::new("grace");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let with = |grace: &str| {
            let flag = format!("--kubelet-health-grace-period={grace}");
            run(&["--kubeconfig", &kc, "--node-name=n", &flag])
        };
        let c = with("1m30s").unwrap();
        assert_eq!(c.kubelet_health_grace_period, Duration::from_secs(90));
        assert!(c.ignored_flags.is_empty(), "the flag is no longer ignored");
        assert!(with("40").unwrap_err().contains("is not a duration"));
        assert!(with("500ms").unwrap_err().contains("outside 1s..=24h"));
        assert!(with("25h").unwrap_err().contains("outside 1s..=24h"));
    }

    #[test]
    fn the_heartbeat_mode_is_lease_or_readyz_and_readyz_in_cloud_mode() {
        let f = Fixture::new("hb-mode");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let with = |extra: &[&str]| {
            let mut args = vec!["--kubeconfig", kc.as_str(), "--node-name=n"];
            args.extend_from_slice(extra);
            run(&args)
        };
        let c = with(&["--heartbeat-mode=readyz"]).unwrap();
        assert_eq!(c.heartbeat_mode, HeartbeatMode::Readyz);
        let c = with(&["--heartbeat-mode", "lease"]).unwrap();
        assert_eq!(c.heartbeat_mode, HeartbeatMode::Lease);
        let c = with(&["--working-mode=cloud"]).unwrap();
        assert_eq!(c.heartbeat_mode, HeartbeatMode::Readyz);
        assert!(
            !c.warnings.iter().any(|w| w.contains("heartbeat-mode")),
            "{:?}",
            c.warnings
        );
        let c = with(&["--working-mode=cloud", "--heartbeat-mode=lease"]).unwrap();
        assert_eq!(c.heartbeat_mode, HeartbeatMode::Readyz);
        assert!(c.warnings.iter().any(|w| w.contains("no effect")));
        let e = with(&["--heartbeat-mode=healthz"]).unwrap_err();
        assert!(e.contains("not lease or readyz"), "{e}");
    }

    #[test]
    fn the_endpoints_overlay_is_on_in_edge_mode_and_never_in_cloud_mode() {
        let f = Fixture::new("overlay-flag");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let with = |extra: &[&str]| {
            let mut args = vec!["--kubeconfig", kc.as_str(), "--node-name=n"];
            args.extend_from_slice(extra);
            run(&args)
        };
        let said = |c: &Config| {
            c.warnings
                .iter()
                .any(|w| w.contains("offline-endpoints-overlay"))
        };
        let c = with(&[]).unwrap();
        assert!(c.offline_endpoints_overlay && !said(&c));
        let c = with(&["--offline-endpoints-overlay=false"]).unwrap();
        assert!(!c.offline_endpoints_overlay);
        let c = with(&["--working-mode=cloud"]).unwrap();
        assert!(
            !c.offline_endpoints_overlay && !said(&c),
            "{:?}",
            c.warnings
        );
        let c = with(&["--working-mode=cloud", "--offline-endpoints-overlay=true"]).unwrap();
        assert!(!c.offline_endpoints_overlay && said(&c), "{:?}", c.warnings);
        let e = with(&["--offline-endpoints-overlay=maybe"]).unwrap_err();
        assert!(e.contains("not a boolean"), "{e}");
    }

    #[test]
    fn upstream_gzip_is_on_unless_turned_off() {
        let f = Fixture::new("gzip-flag");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let with = |extra: &[&str]| {
            let mut args = vec!["--kubeconfig", kc.as_str(), "--node-name=n"];
            args.extend_from_slice(extra);
            run(&args)
        };
        assert!(with(&[]).unwrap().upstream_gzip);
        assert!(!with(&["--upstream-gzip=false"]).unwrap().upstream_gzip);
        let e = with(&["--upstream-gzip=sometimes"]).unwrap_err();
        assert!(e.contains("not a boolean"), "{e}");
    }

    #[test]
    fn local_mode_is_refused_with_why() {
        let f = Fixture::new("local-mode");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let e = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--working-mode=local",
            "--host-control-plane-address=10.0.0.2:6443",
        ])
        .unwrap_err();
        assert!(
            e.starts_with("--working-mode: local is not supported"),
            "{e}"
        );
        assert!(
            e.contains("iptables DNAT") && e.contains("use edge or cloud"),
            "{e}"
        );
    }

    #[test]
    fn logging_flags_reach_the_log_options() {
        let f = Fixture::new("log-flags");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let c = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--v=3",
            "--vmodule=relay=5",
            "--skip_headers",
            "--add-dir-header=true",
            "--log-dir=/var/log",
            "--log-flush-frequency=5s",
        ])
        .unwrap();
        assert_eq!(c.log.verbosity, 3);
        assert_eq!(
            c.log.vmodule,
            crate::logging::parse_vmodule("relay=5").unwrap()
        );
        assert!(c.log.skip_headers && c.log.add_dir_header);
        assert_eq!(c.ignored_flags, ["log-dir"]);
        let e = run(&["--kubeconfig", &kc, "--node-name=n", "--vmodule=relay"]).unwrap_err();
        assert!(e.starts_with("--vmodule: \"relay\": expect"), "{e}");
    }

    #[test]
    fn the_cache_bound_takes_kubernetes_quantities() {
        let f = Fixture::new("cache-bound");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let bound = |arg: &str| run(&["--kubeconfig", &kc, "--node-name=n", arg]);
        assert_eq!(
            run(&["--kubeconfig", &kc, "--node-name=n"])
                .unwrap()
                .cache_max_bytes,
            0
        );
        for (arg, want) in [
            ("--cache-max-bytes=0", 0),
            ("--cache-max-bytes=16Mi", 16 << 20),
            ("--cache-max-bytes=64M", 64_000_000),
            ("--cache-max-bytes=2Gi", 2 << 30),
            ("--cache-max-bytes=1048576", 1 << 20),
            ("--cache-max-bytes=1024Ki", 1 << 20),
        ] {
            assert_eq!(bound(arg).unwrap().cache_max_bytes, want, "{arg}");
        }
        for (arg, why) in [
            ("--cache-max-bytes=1000Ki", "below"),
            ("--cache-max-bytes=1", "below"),
            ("--cache-max-bytes=16MB", "not a byte count"),
            ("--cache-max-bytes=1.5Gi", "not a byte count"),
            ("--cache-max-bytes=-1", "not a byte count"),
            ("--cache-max-bytes=", "not a byte count"),
            ("--cache-max-bytes=99999999Ei", "not a byte count"),
        ] {
            let e = bound(arg).unwrap_err();
            assert!(
                e.starts_with("--cache-max-bytes:") && e.contains(why),
                "{arg}: {e}"
            );
        }
    }

    #[test]
    fn the_cache_writer_is_slowed_only_by_a_test_only_flag() {
        let f = Fixture::new("writer-delay");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let c = run(&["--kubeconfig", &kc, "--node-name=n"]).unwrap();
        assert_eq!(c.cache_writer_delay, None);
        let c = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--test-only-cache-writer-delay-ms=0",
        ]);
        assert_eq!(c.unwrap().cache_writer_delay, None);
        let c = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--test-only-cache-writer-delay-ms=30",
        ]);
        assert_eq!(
            c.unwrap().cache_writer_delay,
            Some(Duration::from_millis(30))
        );
        let c = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--test-only-cache-writer-delay-ms=x",
        ]);
        assert!(c.unwrap_err().contains("is not a number"));
    }

    #[test]
    fn the_link_totals_are_written_every_minute_unless_a_test_says_otherwise() {
        let f = Fixture::new("link-write");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let c = run(&["--kubeconfig", &kc, "--node-name=n"]).unwrap();
        assert_eq!(c.link_write_interval, Duration::from_secs(60));
        let flag = |v: &str| {
            run(&[
                "--kubeconfig",
                &kc,
                "--node-name=n",
                &format!("--test-only-link-write-seconds={v}"),
            ])
        };
        assert_eq!(
            flag("1").unwrap().link_write_interval,
            Duration::from_secs(1)
        );
        assert!(flag("0").is_err(), "a write loop without a pause");
    }

    #[test]
    fn server_addr_overrides_the_kubeconfig() {
        let f = Fixture::new("override");
        let kc = f.kubeconfig("https://ignored:6443", "token: abc");
        let c = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--server-addr=https://a:6443,https://[fd00::1]:6443/",
            "--lb-mode=priority",
            "--cache-agents=Foo,bar",
            "--working-mode",
            "cloud",
            "--bind-address=0.0.0.0",
            "--proxy-port=0",
            "--serve-port=0",
        ])
        .unwrap();
        let bases: Vec<_> = c.servers.iter().map(|s| s.base.as_str()).collect();
        assert_eq!(bases, ["https://a:6443", "https://[fd00::1]:6443"]);
        assert_eq!(c.lb_mode, LbMode::Priority);
        assert_eq!(c.working_mode, WorkingMode::Cloud);
        let hashing = run(&[
            "--kubeconfig",
            &kc,
            "--node-name=n",
            "--lb-mode=consistent-hashing",
        ])
        .unwrap();
        assert_eq!(hashing.lb_mode, LbMode::ConsistentHashing);
        assert_eq!(c.cache_agents, ["foo", "bar"]);
        assert_eq!(c.proxy_addr, "0.0.0.0:0".parse().unwrap());
    }

    #[test]
    fn bad_configurations_say_one_clear_thing() {
        let f = Fixture::new("bad");
        let kc = f.kubeconfig("https://a:6443", "token: abc");
        let no_user = f.dir.join("nouser");
        std::fs::write(&no_user, "clusters:\n- name: c\n  cluster: {server: 'https://a:1', certificate-authority: ca.crt}\ncontexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n").unwrap();
        let no_user = no_user.display().to_string();
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                vec!["--node-name=n"],
                "the hub needs credentials for the cloud",
            ),
            (
                vec![
                    "--node-name=n",
                    "--join-token=abcdef.0123456789abcdef",
                    "--server-addr=https://a:1",
                ],
                "--discovery-token-ca-cert-hash",
            ),
            (
                vec![
                    "--node-name=n",
                    "--join-token=abcdef.0123456789abcdef",
                    "--discovery-token-ca-cert-hash=md5:00",
                ],
                "sha256:",
            ),
            (
                vec![
                    "--node-name=n",
                    "--join-token=nope",
                    "--discovery-token-unsafe-skip-ca-verification",
                ],
                "--join-token",
            ),
            (
                vec!["--node-name=n", "--bootstrap-mode=magic"],
                "--bootstrap-mode",
            ),
            (
                vec![
                    "--node-name=n",
                    "--bootstrap-file=/x",
                    "--hub-cert-signer=any",
                ],
                "--hub-cert-signer",
            ),
            (
                vec![
                    "--node-name=n",
                    "--bootstrap-mode=kubeletcertificate",
                    "--kubelet-kubeconfig=/nonexistent/kubelet.conf",
                ],
                "/nonexistent/kubelet.conf",
            ),
            (
                vec!["--node-name=n", "--bootstrap-file=/nonexistent/boot.conf"],
                "no cloud server",
            ),
            (
                vec!["--kubeconfig=/nonexistent", "--node-name=n"],
                "/nonexistent",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--server-addr=http://a:6443",
                ],
                "not an https://",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--server-addr=https://a:99999",
                ],
                "bad port",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--server-addr=https://a/x",
                ],
                "only https://host:port",
            ),
            (
                vec!["--kubeconfig", &kc, "--node-name=n", "--lb-mode=random"],
                "--lb-mode",
            ),
            (
                vec!["--kubeconfig", &kc, "--node-name=n", "--proxy-port=x"],
                "not a number",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--heartbeat-interval-seconds=0",
                ],
                "outside",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--bind-address=localhost",
                ],
                "not an IP",
            ),
            (
                vec!["--kubeconfig", &kc, "--node-name=Bad_Name"],
                "not a valid node name",
            ),
            (
                vec![
                    "--kubeconfig",
                    &kc,
                    "--node-name=n",
                    "--enable-resource-filter=maybe",
                ],
                "not a boolean",
            ),
            (
                vec!["--kubeconfig", &no_user, "--node-name=n"],
                "neither a client certificate nor a token",
            ),
        ];
        for (args, want) in cases {
            let err = run(&args).expect_err(&format!("{args:?} should fail"));
            assert!(
                err.contains(want),
                "{args:?}: {err:?} should mention {want:?}"
            );
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
    }

    #[test]
    fn a_join_token_file_gives_the_token_and_bad_ones_name_the_flag() {
        let f = Fixture::new("join-token-file");
        let write = |name: &str, text: &str| {
            let path = f.dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let token = |path: &str| -> Result<String, String> {
            let c = run(&[
                "--node-name=n",
                &format!("--join-token-file={path}"),
                "--discovery-token-unsafe-skip-ca-verification",
                "--server-addr=https://a:1",
            ])?;
            match c.identity {
                IdentitySource::Token(mode) => Ok(mode.join_token.map(|t| t.bearer()).unwrap()),
                other => panic!("token mode: {other:?}"),
            }
        };
        let good = "abcdef.0123456789abcdef";
        // As `echo`, a file a shell wrote, or no line end at all.
        for text in [format!("{good}\n"), format!("{good}\r\n"), good.to_owned()] {
            assert_eq!(token(&write("ok", &text)).as_deref(), Ok(good), "{text:?}");
        }
        let missing = f.dir.join("missing").display().to_string();
        let cases = [
            (missing, "cannot read"),
            (write("empty", ""), "holds no token"),
            (write("newline", "\n"), "holds no token"),
            (
                write("two-lines", &format!("{good}\n\n")),
                "join token has the form",
            ),
            (
                write("spaced", &format!(" {good}\n")),
                "join token has the form",
            ),
            (write("bad", "nope-secret\n"), "join token has the form"),
        ];
        for (path, want) in cases {
            let err = token(&path).expect_err(&format!("{path} should fail"));
            assert!(err.contains("--join-token-file"), "{err}");
            assert!(err.contains(&path) && err.contains(want), "{err}");
            assert!(
                !err.contains("secret"),
                "the content is not repeated: {err}"
            );
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
        let both = run(&[
            "--node-name=n",
            &format!("--join-token={good}"),
            &format!("--join-token-file={}", write("both", good)),
            "--discovery-token-unsafe-skip-ca-verification",
        ])
        .expect_err("both flags");
        assert!(both.contains("--join-token-file"), "{both}");
        assert!(both.contains("not both"), "{both}");
        // Discovery still wants a pin.
        let unpinned = run(&[
            "--node-name=n",
            &format!("--join-token-file={}", write("pin", good)),
        ])
        .expect_err("no pin");
        assert!(
            unpinned.contains("--discovery-token-ca-cert-hash"),
            "{unpinned}"
        );
    }

    #[test]
    fn token_mode_reads_pins_organizations_and_the_bootstrap_server() {
        let f = Fixture::new("token-mode");
        let boot = f.kubeconfig("https://10.0.0.9:6443", "token: abcdef.0123456789abcdef");
        let pin = format!("sha256:{}", "AB".repeat(32));
        let c = run(&[
            "--node-name=n",
            &format!("--bootstrap-file={boot}"),
            &format!(
                "--discovery-token-ca-cert-hash={pin},sha256:{}",
                "0".repeat(64)
            ),
            "--hub-cert-organizations=a,b",
            "--hub-cert-organizations=a",
            "--hub-cert-signer=kube-apiserver-client-kubelet",
            "--root-dir=/tmp/hub-root",
            "--node-ip=10.1.2.3",
            "--multiplexer-client-ca-file=/etc/rancher/k3s/client-ca.crt",
        ])
        .unwrap();
        let bases: Vec<_> = c.servers.iter().map(|s| s.base.as_str()).collect();
        assert_eq!(
            bases,
            ["https://10.0.0.9:6443"],
            "the bootstrap file's server"
        );
        let IdentitySource::Token(mode) = &c.identity else {
            panic!("token mode: {:?}", c.identity)
        };
        assert_eq!(mode.pins.len(), 2);
        assert!(mode.join_token.is_none());
        assert_eq!(mode.signer, ClientSigner::ApiserverClientKubelet);
        assert_eq!(c.hub_cert_organizations, ["a", "b"]);
        assert_eq!(c.root_dir, PathBuf::from("/tmp/hub-root"));
        assert_eq!(
            c.multiplexer_client_ca.as_deref(),
            Some(std::path::Path::new("/etc/rancher/k3s/client-ca.crt"))
        );
        assert_eq!(c.node_ip, Some("10.1.2.3".parse().unwrap()));
        // A kubeconfig wins over the bootstrap flags.
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let c = run(&["--node-name=n", "--kubeconfig", &kc, "--join-token=bad"]).unwrap();
        assert!(matches!(c.identity, IdentitySource::Kubeconfig { .. }));
    }

    #[test]
    fn the_dummy_interface_follows_yurthub() {
        let f = Fixture::new("dummy-if");
        let kc = f.kubeconfig("https://10.0.0.1:6443", "token: abc");
        let base = ["--kubeconfig", kc.as_str(), "--node-name=n"];
        let with = |extra: &[&str]| run(&[&base[..], extra].concat());
        let dummy = |c: Config| c.dummy_if.map(|d| (d.name, d.ip.to_string()));

        let c = with(&[]).unwrap();
        assert_eq!(dummy(c), Some(("hub-dummy0".into(), "169.254.2.1".into())));
        // No longer an ignored YurtHub flag: a bare `--enable-dummy-if` means true.
        let c = with(&["--enable-dummy-if", "--dummy-if-ip=169.254.3.3"]).unwrap();
        assert!(c.ignored_flags.is_empty(), "{:?}", c.ignored_flags);
        assert_eq!(dummy(c).unwrap().1, "169.254.3.3");
        // An IPv6 bind address makes the default IPv6, as YurtHub does.
        let c = with(&["--bind-address=::1"]).unwrap();
        assert_eq!(dummy(c), Some(("hub-dummy0".into(), "fd00::2:1".into())));
        let c = with(&["--dummy-if-ip=169.254.9.9", "--dummy-if-name=pods0"]).unwrap();
        assert_eq!(dummy(c), Some(("pods0".into(), "169.254.9.9".into())));
        let c = with(&["--dummy-if-ip=fd00::53"]).unwrap();
        assert_eq!(dummy(c).unwrap().1, "fd00::53");
        // Off by the flag only (the serving certificate then leaves it out); cloud mode has
        // it too, since its filters still point pods at it.
        assert_eq!(dummy(with(&["--enable-dummy-if=false"]).unwrap()), None);
        assert_eq!(
            dummy(with(&["--working-mode=cloud"]).unwrap()),
            Some(("hub-dummy0".into(), "169.254.2.1".into()))
        );
        assert!(
            !serving_ips(&with(&["--enable-dummy-if=false"]).unwrap())
                .contains(&"169.254.2.1".parse().unwrap())
        );
        assert!(serving_ips(&with(&[]).unwrap()).contains(&"169.254.2.1".parse().unwrap()));

        let cases: &[(&str, &str)] = &[
            ("--dummy-if-ip=10.0.0.1", "is not in 169.254.0.0/16"),
            ("--dummy-if-ip=169.254.31.7", "reserved 169.254.31.0/24"),
            ("--dummy-if-ip=169.254.1.1", "169.254.1.1 is reserved"),
            (
                "--dummy-if-ip=hub",
                "--dummy-if-ip: \"hub\" is not an IP address",
            ),
            (
                "--dummy-if-name=a-very-long-name0",
                "--dummy-if-name: invalid interface name",
            ),
            ("--dummy-if-name=a/b", "contains `/`"),
            ("--enable-dummy-if=maybe", "--enable-dummy-if"),
            ("--test-only-dummy-if-kind=vlan", "is not dummy or bridge"),
        ];
        for (flag, want) in cases {
            let err = with(&[flag]).expect_err(flag);
            assert!(
                err.contains(want),
                "{flag}: {err:?} should mention {want:?}"
            );
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
        // A bad address is refused even with the interface off, as YurtHub validates it.
        assert!(with(&["--enable-dummy-if=false", "--dummy-if-ip=10.0.0.1"]).is_err());
    }

    /// The IP SANs the hub asks for in its serving certificate.
    fn serving_ips(c: &Config) -> Vec<IpAddr> {
        crate::pki::serving_template(c).ip_addresses
    }

    #[test]
    fn help_and_version_print() {
        assert!(
            matches!(from_args(["--help"]), Ok(Command::Print(t)) if t.contains("--server-addr"))
        );
        assert!(
            matches!(from_args(["--version"]), Ok(Command::Print(t)) if t.starts_with("tinyhub "))
        );
    }
}
