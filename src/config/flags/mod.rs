//! Command-line parsing, stage one: turn `argv` into raw flag values with no I/O and no
//! interpretation beyond syntax. One table ([`FLAGS`]) drives both parsing and `--help`, so
//! the two cannot drift apart.
//!
//! Syntax follows Go's pflag, as YurtHub manifests and init scripts write it: `--flag=value`,
//! `--flag value`, `--bool`, `--bool=false`, `--v=2`. Flags YurtHub has and tinyhub does not
//! implement are accepted with a warning (see [`IGNORED_YURTHUB_FLAGS`]) so existing manifests
//! keep working.

use std::ffi::OsString;

use crate::error::StartupError;

mod ignored;
mod wrap;

pub(crate) use ignored::{Honoured, IGNORED_LOG_FLAGS, IGNORED_YURTHUB_FLAGS};
pub(crate) use wrap::{help_width, wrap};

/// The kind of value a flag takes, as the help text names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `--flag` alone means true.
    Bool,
    /// An integer.
    Int,
    /// Free text.
    Str,
    /// A comma-separated list.
    Strings,
    /// A Go duration (`40s`, `1m30s`).
    Duration,
}

/// One supported flag.
#[derive(Debug)]
pub(crate) struct FlagSpec {
    /// Name without the leading dashes.
    pub name: &'static str,
    /// What it takes.
    pub kind: Kind,
    /// Default as shown in `--help` ("" = none shown).
    pub default: &'static str,
    /// One-line description.
    pub help: &'static str,
}

const fn flag(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> FlagSpec {
    FlagSpec {
        name,
        kind,
        default,
        help,
    }
}

/// Every flag tinyhub implements: YurtHub's (its `options.go`, README.md "Flags" lists
/// those left out), component-base's `--v` and `--vmodule`, klog's `--skip-headers` and
/// `--add-dir-header`, and tinyhub's own.
pub(crate) const FLAGS: &[FlagSpec] = &[
    flag(
        "server-addr",
        Kind::Strings,
        "",
        "comma list of https://host:port cloud apiservers (default: the kubeconfig's server)",
    ),
    flag(
        "kubeconfig",
        Kind::Str,
        "",
        "the hub's own credentials for the cloud: CA, client certificate/key or token (when set, it wins over --bootstrap-mode)",
    ),
    flag(
        "bootstrap-mode",
        Kind::Str,
        "token",
        "where the hub's identity comes from without --kubeconfig: token (its own certificates, by CSR) or kubeletcertificate (kubelet's client certificate)",
    ),
    flag(
        "bootstrap-file",
        Kind::Str,
        "",
        "token mode: the bootstrap kubeconfig (server, CA data, bootstrap token) that yurtadm join writes",
    ),
    flag(
        "join-token",
        Kind::Str,
        "",
        "token mode: a bootstrap token (abcdef.0123456789abcdef) to discover the cluster through kube-public/cluster-info",
    ),
    flag(
        "join-token-file",
        Kind::Str,
        "",
        "token mode: a file holding the --join-token (one line), so that the token is not in the process's command line",
    ),
    flag(
        "discovery-token-ca-cert-hash",
        Kind::Strings,
        "",
        "sha256:<hex> pins of the cluster CA's public key for --join-token discovery; repeatable",
    ),
    flag(
        "discovery-token-unsafe-skip-ca-verification",
        Kind::Bool,
        "false",
        "allow --join-token discovery without a CA pin",
    ),
    flag(
        "hub-cert-organizations",
        Kind::Strings,
        "",
        "extra organizations (O) in the hub's client certificate; repeatable",
    ),
    flag(
        "hub-cert-signer",
        Kind::Str,
        "kube-apiserver-client",
        "signer of the hub's client certificate: kube-apiserver-client (approved by yurt-manager) or kube-apiserver-client-kubelet (approved by kube-controller-manager, O system:nodes only)",
    ),
    flag(
        "root-dir",
        Kind::Str,
        "/var/lib/yurthub",
        "where the hub keeps its kubeconfigs and certificates (pki/); locked at start (one hub per directory)",
    ),
    flag(
        "node-ip",
        Kind::Str,
        "",
        "this node's IP, put in the serving certificate, and where a leader hub serves --multiplexer-port (yurt-manager publishes the node's InternalIP: they must match) (default: the address of the default route)",
    ),
    flag(
        "kubelet-kubeconfig",
        Kind::Str,
        "/etc/kubernetes/kubelet.conf",
        "kubeletcertificate mode: kubelet's kubeconfig (its server)",
    ),
    flag(
        "kubelet-ca-file",
        Kind::Str,
        "/etc/kubernetes/pki/ca.crt",
        "kubeletcertificate mode: the cluster CA",
    ),
    flag(
        "kubelet-client-certificate",
        Kind::Str,
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
        "kubeletcertificate mode: kubelet's client certificate and key, re-read when kubelet rotates it",
    ),
    flag(
        "node-name",
        Kind::Str,
        "",
        "the name of this node (default: the hostname)",
    ),
    flag(
        "nodepool-name",
        Kind::Str,
        "",
        "the name of this node's pool: for the servicetopology and nodeportisolation filters (default: the node's apps.openyurt.io/nodepool label), and the pool's leader hubs (ConfigMap leader-hub-<pool>)",
    ),
    flag(
        "namespace",
        Kind::Str,
        "kube-system",
        "the namespace of the pool's ConfigMap leader-hub-<pool> (yurt-manager's --working-namespace)",
    ),
    flag(
        "pool-scope-resources",
        Kind::Strings,
        "",
        "resources each node lists and watches once for all its components (and through the pool's leader hub), as group/version/resource with the core group empty (/v1/nodes); added to /v1/services and discovery.k8s.io/v1/endpointslices, which are always in; the pool's ConfigMap replaces the set once seen; a kind tinyhub does not know is forwarded, with a warning; repeatable",
    ),
    flag(
        "bind-address",
        Kind::Str,
        "127.0.0.1",
        "the IP address on which the serve port (and, unless --bind-proxy-address is set, the proxy ports) listen",
    ),
    flag(
        "bind-proxy-address",
        Kind::Str,
        "",
        "the IP address on which the proxy ports listen (default: --bind-address)",
    ),
    flag(
        "enable-plain-proxy",
        Kind::Bool,
        "true",
        "serve the plain HTTP proxy port (--proxy-port), which lends the node's identity to a request without credentials; false leaves only the HTTPS port, where kubelet proves it is the node with its client certificate (the strictest set-up)",
    ),
    flag(
        "enable-dummy-if",
        Kind::Bool,
        "true",
        "make the dummy interface --dummy-if-name with --dummy-if-ip, on which the proxy ports also listen, so pods reach the hub at one address on every node (needs CAP_NET_ADMIN)",
    ),
    flag(
        "dummy-if-ip",
        Kind::Str,
        "",
        "the address of the dummy interface: IPv4 in 169.254.0.0/16 except 169.254.31.0/24 and 169.254.1.1, or IPv6 (default: 169.254.2.1, or fd00::2:1 when --bind-address is IPv6)",
    ),
    flag(
        "dummy-if-name",
        Kind::Str,
        "hub-dummy0",
        "the name of the dummy interface (at most 15 bytes)",
    ),
    flag(
        "proxy-port",
        Kind::Int,
        "10261",
        "the port of the plain HTTP proxy for node components",
    ),
    flag(
        "proxy-secure-port",
        Kind::Int,
        "10268",
        "the port of the HTTPS proxy, served once the hub has a serving certificate (0: any free port)",
    ),
    flag(
        "serve-port",
        Kind::Int,
        "10267",
        "the port serving /v1/healthz, /v1/readyz, /metrics, POST|PUT /v1/token and GET /pods (kubelet's cached pods)",
    ),
    flag(
        "multiplexer-port",
        Kind::Int,
        "10269",
        "the port on which a leader hub serves pool-scope list/watch to the pool's other hubs (on --node-ip, TLS, a client certificate of the cluster CA required), and on which followers reach their leaders",
    ),
    flag(
        "multiplexer-client-ca-file",
        Kind::Str,
        "",
        "a PEM file of the CA that signs the nodes' client certificates, which a leader hub checks its followers' certificates against on --multiplexer-port (k3s and RKE2 sign them with a client CA of their own) (default: the cluster CA)",
    ),
    flag(
        "pool-leader-max-staleness",
        Kind::Duration,
        "90s",
        "a follower skips a pool leader whose view of a pool-scope resource (its cloud watch's last event or bookmark, as the leader tells) is older than this, for the next leader or the cloud, and returns when it is fresh again (above the apiserver's bookmark period of about a minute; 0 turns the check off)",
    ),
    flag(
        "disk-cache-path",
        Kind::Str,
        "/etc/kubernetes/cache",
        "the root of the on-disk cache; edge mode needs it writable and locks it (one hub per directory)",
    ),
    flag(
        "cache-max-bytes",
        Kind::Str,
        "0",
        "the most bytes the files under --disk-cache-path may take, with Kubernetes suffixes (16Mi, 64M); past it the hub evicts what no pod of this node needs, and stops caching new kinds when even that is not enough (0: no bound; at least 1Mi)",
    ),
    flag(
        "cache-agents",
        Kind::Strings,
        "",
        "extra components whose responses are cached, comma list; * caches every component",
    ),
    flag(
        "lb-mode",
        Kind::Str,
        "rr",
        "how requests spread over --server-addr: rr (round robin), priority (first healthy) or consistent-hashing (a client to the same server)",
    ),
    flag(
        "heartbeat-interval-seconds",
        Kind::Int,
        "10",
        "seconds between health probes of each cloud apiserver",
    ),
    flag(
        "heartbeat-timeout-seconds",
        Kind::Int,
        "2",
        "seconds after which a health probe times out",
    ),
    flag(
        "heartbeat-failed-retry",
        Kind::Int,
        "3",
        "probe retries after a failure before a server is marked unhealthy",
    ),
    flag(
        "heartbeat-healthy-threshold",
        Kind::Int,
        "2",
        "consecutive successful probes before an unhealthy server is healthy again",
    ),
    flag(
        "kubelet-health-grace-period",
        Kind::Duration,
        "40s",
        "edge mode: kubelet counts as stopped after this long without a lease request (then the hub stops renewing the node lease); also the leaseDurationSeconds of a lease the hub creates",
    ),
    flag(
        "heartbeat-mode",
        Kind::Str,
        "lease",
        "edge mode: how cloud servers are probed: lease (renew the node lease through them, as YurtHub) or readyz (GET /readyz, for an identity that may not write leases)",
    ),
    flag(
        "working-mode",
        Kind::Str,
        "edge",
        "edge (cache and answer offline) or cloud (pure proxy)",
    ),
    flag(
        "enable-resource-filter",
        Kind::Bool,
        "true",
        "YurtHub's response filters, which point pods' in-cluster clients at the hub and keep Services and endpoints local (--working-mode=cloud turns off discardcloudservice, forwardkubesvctraffic and serviceenvupdater)",
    ),
    flag(
        "offline-endpoints-overlay",
        Kind::Bool,
        "true",
        "edge mode: while the cloud is unreachable, serve the EndpointSlices and Endpoints that name this node's pods with the IPs and readiness the node's kubelet reports (its offline status updates, never stored; dropped when the cloud is back); false serves them as cached",
    ),
    flag(
        "upstream-gzip",
        Kind::Bool,
        "true",
        "ask the cloud for gzip on every get and list, whoever asked; a client that did not ask gets the answer inflated (at most 16 at once, then as asked); false sends requests as their clients asked",
    ),
    flag(
        "disabled-resource-filters",
        Kind::Strings,
        "",
        "response filters to turn off, comma list of names, or * for all",
    ),
    flag(
        "max-requests-in-flight",
        Kind::Int,
        "250",
        "the maximum number of requests served at once; past it the hub answers 429",
    ),
    flag(
        "v",
        Kind::Int,
        "0",
        "log verbosity: 0-1 info, 2-3 debug, 4+ trace",
    ),
    flag(
        "vmodule",
        Kind::Str,
        "",
        "per-file log verbosity above --v, comma list of pattern=N: a glob of a source file's name without .rs (of its path when the pattern has a /), e.g. relay=4,*lease*=3",
    ),
    flag(
        "skip-headers",
        Kind::Bool,
        "false",
        "log the messages without klog's header (severity, time, pid, file:line)",
    ),
    flag(
        "add-dir-header",
        Kind::Bool,
        "false",
        "name the source file with its directory in the log header",
    ),
    flag("help", Kind::Bool, "", "print this help and exit"),
    flag(
        "version",
        Kind::Bool,
        "",
        "print the version and the target it was built for, then exit",
    ),
];

/// Flags for tests only, parsed like the others and left out of `--help`: nobody should
/// set them in production.
pub(crate) const TEST_FLAGS: &[FlagSpec] = &[
    flag(
        "test-only-client-io-timeout-seconds",
        Kind::Int,
        "60",
        "time one read of a client's request body, or one write of its answer, may take",
    ),
    flag(
        "test-only-cache-writer-delay-ms",
        Kind::Int,
        "0",
        "time the cache writer sleeps before each message, as a slow flash would (0: none)",
    ),
    flag(
        "test-only-tunnel-idle-seconds",
        Kind::Int,
        "14400",
        "time a tunnel (exec, attach, port-forward) may pass no byte either way before it is closed",
    ),
    flag(
        "test-only-tunnel-answer-seconds",
        Kind::Int,
        "60",
        "time the cloud has to answer a connection upgrade before the client gets 504",
    ),
    flag(
        "test-only-link-write-seconds",
        Kind::Int,
        "60",
        "time between writes of the link totals file (only when they changed)",
    ),
    flag(
        "test-only-dummy-if-kind",
        Kind::Str,
        "dummy",
        "the link kind the dummy interface is made with: dummy, or bridge on test kernels without the dummy driver",
    ),
];

/// The flags as given, before validation: the last occurrence of a flag wins, as in pflag.
#[derive(Debug, Default)]
pub(crate) struct RawFlags {
    values: Vec<(&'static str, String)>,
    /// YurtHub and logging flags that were given, are not implemented, and ask for what
    /// tinyhub does not do: each named once, in the order given.
    pub ignored: Vec<String>,
}

impl RawFlags {
    /// Every value given for `name`, in order (pflag's repeatable string slices).
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.values
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value given for `name`, if any.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the arguments after the program name.
pub(crate) fn parse<I>(args: I) -> Result<RawFlags, StartupError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    parse_with(args, &mut |_, given| Ok(Some(given)))
}

/// One argument as given, offered to [`parse_with`]'s caller before the hub reads it.
#[derive(Debug)]
pub(crate) enum Given {
    /// `--name` (`_` read as `-`); its value, if any, is still the parser's.
    Long(String),
    /// `-c`.
    Short(char),
    /// A positional argument.
    Value(OsString),
}

/// What [`parse_with`]'s caller does with an argument: `Ok(None)` when it took it,
/// `Ok(Some(given))` to leave it to the hub's flags.
pub(crate) type OwnArgs<'a> =
    dyn FnMut(&mut lexopt::Parser, Given) -> Result<Option<Given>, StartupError> + 'a;

/// [`parse`], with each argument offered to `own` first (`tinyhub cache`'s positionals and
/// its own flags): `Ok(None)` when `own` took it (and read its value from the parser),
/// `Ok(Some(given))` to leave it to the hub's flags, read and checked as the hub does.
pub(crate) fn parse_with<I>(args: I, own: &mut OwnArgs<'_>) -> Result<RawFlags, StartupError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::Arg;

    let mut parser = lexopt::Parser::from_args(args);
    let mut raw = RawFlags::default();
    // Ignored flags as given, and whether tinyhub honours the value: the last one counts.
    let mut given_ignored: Vec<(&'static str, bool)> = Vec::new();
    loop {
        let arg = parser
            .next()
            .map_err(|e| StartupError::new(e.to_string()))?;
        let Some(arg) = arg else { break };
        let given = match arg {
            // pflag's WordSepNormalizeFunc, as Kubernetes components register it:
            // `--log_dir` is `--log-dir`.
            Arg::Long(name) => Given::Long(name.replace('_', "-")),
            Arg::Short(c) => Given::Short(c),
            Arg::Value(v) => Given::Value(v),
        };
        let Some(given) = own(&mut parser, given)? else {
            continue;
        };
        let name = match given {
            Given::Long(name) => name,
            // Go's pflag also takes single-dash long names such as `-v=2`; lexopt splits a
            // short cluster, so only the forms manifests use are supported here.
            Given::Short('h') => "help".to_owned(),
            Given::Short('v') => "v".to_owned(),
            Given::Short(c) => {
                return Err(StartupError::new(format!(
                    "unknown shorthand flag: '{c}' in -{c}"
                )));
            }
            Given::Value(v) => {
                return Err(StartupError::new(format!(
                    "unexpected argument {:?}: tinyhub takes only flags",
                    v.to_string_lossy()
                )));
            }
        };
        if let Some(spec) = FLAGS.iter().chain(TEST_FLAGS).find(|s| s.name == name) {
            let value = if spec.kind == Kind::Bool {
                match parser.optional_value() {
                    Some(v) => os_to_string(&name, v)?,
                    None => "true".to_owned(),
                }
            } else {
                let v = parser
                    .value()
                    .map_err(|_| StartupError::new(format!("flag needs an argument: --{name}")))?;
                os_to_string(&name, v)?
            };
            raw.values.push((spec.name, value));
        } else if let Some(flag) = IGNORED_YURTHUB_FLAGS
            .iter()
            .chain(IGNORED_LOG_FLAGS)
            .find(|f| f.name == name)
        {
            let value = if flag.takes_value {
                let v = parser
                    .value()
                    .map_err(|_| StartupError::new(format!("flag needs an argument: --{name}")))?;
                os_to_string(&name, v)?
            } else {
                let text = match parser.optional_value() {
                    Some(v) => os_to_string(&name, v)?,
                    None => "true".to_owned(),
                };
                // pflag refuses a boolean it cannot read, ignored flag or not.
                let value = parse_bool(&text).ok_or_else(|| {
                    StartupError::flag(&name, format!("{text:?} is not a boolean"))
                })?;
                value.to_string()
            };
            let honoured = match flag.honoured {
                Honoured::Always => true,
                Honoured::When(wanted) => value == wanted,
                Honoured::Never => false,
            };
            given_ignored.push((flag.name, honoured));
        } else {
            let names = FLAGS.iter().map(|s| s.name);
            let hint = match wrap::did_you_mean(&name, names) {
                Some(near) => format!("did you mean --{near}? (see --help)"),
                None => "see --help".to_owned(),
            };
            return Err(StartupError::new(format!(
                "unknown flag: --{name} ({hint})"
            )));
        }
    }
    for (i, (name, _)) in given_ignored.iter().enumerate() {
        let first = given_ignored.iter().position(|(n, _)| n == name) == Some(i);
        let last_honoured = given_ignored.iter().rev().find(|(n, _)| n == name);
        if first && last_honoured.is_some_and(|(_, honoured)| !honoured) {
            raw.ignored.push((*name).to_owned());
        }
    }
    Ok(raw)
}

/// A boolean as Go's `strconv.ParseBool` (and so pflag) reads it.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Some(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A flag's value as text; not UTF-8 is refused, naming the flag.
pub(crate) fn os_to_string(name: &str, value: OsString) -> Result<String, StartupError> {
    value
        .into_string()
        .map_err(|v| StartupError::flag(name, format!("value {v:?} is not valid UTF-8")))
}

/// The `--help` text, pflag style.
pub(crate) fn help_text() -> String {
    let mut out = String::from(
        "tinyhub: a node-local Kubernetes API proxy that caches what node components read\n\
         and answers from that cache while the cloud is unreachable.\n\nUsage:\n  tinyhub [flags]\n\nFlags:\n",
    );
    let column = FLAGS
        .iter()
        .map(|s| s.name.len() + type_name(s.kind).len())
        .max()
        .unwrap_or(0)
        + 4;
    for spec in FLAGS {
        let ty = type_name(spec.kind);
        let left = if ty.is_empty() {
            format!("--{}", spec.name)
        } else {
            format!("--{} {ty}", spec.name)
        };
        out.push_str(&format!(
            "      {left:<column$}  {}",
            spec.help,
            column = column + 2
        ));
        match (spec.kind, spec.default) {
            (_, "") => {}
            (Kind::Str, d) => out.push_str(&format!(" (default \"{d}\")")),
            (_, d) => out.push_str(&format!(" (default {d})")),
        }
        out.push('\n');
    }
    out.push_str(
        "\nAccepted for YurtHub's command line, not implemented (named in one warning at start\n\
         unless given with the value tinyhub honours anyway):\n",
    );
    for flag in IGNORED_YURTHUB_FLAGS.iter().chain(IGNORED_LOG_FLAGS) {
        let honoured = match flag.honoured {
            Honoured::Always => " (always honoured)".to_owned(),
            Honoured::When(value) => format!(" (honoured: {value})"),
            Honoured::Never => String::new(),
        };
        out.push_str(&format!("      --{}{honoured}: {}\n", flag.name, flag.why));
    }
    out
}

fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "",
        Kind::Int => "int",
        Kind::Str => "string",
        Kind::Strings => "strings",
        Kind::Duration => "duration",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(args: &[&str]) -> RawFlags {
        parse(args.iter().copied()).expect("flags should parse")
    }

    fn parse_err(args: &[&str]) -> String {
        parse(args.iter().copied())
            .expect_err("flags should not parse")
            .to_string()
    }

    #[test]
    fn pflag_forms() {
        let raw = parse_ok(&[
            "--server-addr=https://a:6443,https://b:6443",
            "--node-name",
            "edge-1",
            "--enable-resource-filter=false",
            "--v=4",
            "--help",
        ]);
        assert_eq!(
            raw.get("server-addr"),
            Some("https://a:6443,https://b:6443")
        );
        assert_eq!(raw.get("node-name"), Some("edge-1"));
        assert_eq!(raw.get("enable-resource-filter"), Some("false"));
        assert_eq!(raw.get("v"), Some("4"));
        assert_eq!(raw.get("help"), Some("true"));
        assert_eq!(raw.get("kubeconfig"), None);
    }

    #[test]
    fn last_occurrence_wins() {
        let raw = parse_ok(&["--proxy-port=1", "--proxy-port=2"]);
        assert_eq!(raw.get("proxy-port"), Some("2"));
    }

    #[test]
    fn repeated_slice_flags_keep_every_value() {
        let raw = parse_ok(&[
            "--discovery-token-ca-cert-hash=sha256:aa",
            "--discovery-token-ca-cert-hash",
            "sha256:bb,sha256:cc",
        ]);
        let all: Vec<_> = raw.all("discovery-token-ca-cert-hash").collect();
        assert_eq!(all, ["sha256:aa", "sha256:bb,sha256:cc"]);
    }

    #[test]
    fn pool_flags_are_flags_now() {
        let raw = parse_ok(&[
            "--namespace=yurt",
            "--pool-scope-resources=/v1/nodes",
            "--pool-scope-resources",
            "apps/v1/deployments,/v1/pods",
        ]);
        assert!(raw.ignored.is_empty(), "{:?}", raw.ignored);
        assert_eq!(raw.get("namespace"), Some("yurt"));
        let all: Vec<_> = raw.all("pool-scope-resources").collect();
        assert_eq!(all, ["/v1/nodes", "apps/v1/deployments,/v1/pods"]);
        let help = help_text();
        assert!(help.contains("--namespace string "), "{help}");
        assert!(help.contains("(default \"kube-system\")"));
        assert!(help.contains("--pool-scope-resources strings "));
    }

    #[test]
    fn yurthub_only_flags_are_ignored_not_fatal() {
        let raw = parse_ok(&["--gc-frequency=3", "--profiling", "--node-name=n"]);
        assert_eq!(raw.ignored, vec!["gc-frequency", "profiling"]);
        assert_eq!(raw.get("node-name"), Some("n"));
    }

    #[test]
    fn a_value_tinyhub_honours_anyway_is_not_warned_about() {
        let raw = parse_ok(&[
            "--enable-node-pool=true",
            "--enable-node-pool",
            "--profiling=false",
            "--enable-iptables=0",
            "--logtostderr",
            "--alsologtostderr=true",
            "--log-flush-frequency=5s",
            "--logging-format=text",
            "--one-output",
        ]);
        assert!(raw.ignored.is_empty(), "{:?}", raw.ignored);
        let raw = parse_ok(&[
            "--enable-node-pool=false",
            "--logtostderr=false",
            "--log-dir",
            "/var/log",
            "--logging-format=json",
            "--log-file=/tmp/a",
            "--log-file=/tmp/b",
            "--profiling",
            "--profiling=false",
        ]);
        // Each named once, in the order given; the last value given counts.
        assert_eq!(
            raw.ignored,
            [
                "enable-node-pool",
                "logtostderr",
                "log-dir",
                "logging-format",
                "log-file"
            ]
        );
    }

    #[test]
    fn underscores_are_dashes_as_in_pflag() {
        let raw = parse_ok(&["--log_dir=/var/log", "--node_name=n", "--add_dir_header"]);
        assert_eq!(raw.ignored, ["log-dir"]);
        assert_eq!(raw.get("node-name"), Some("n"));
        assert_eq!(raw.get("add-dir-header"), Some("true"));
    }

    #[test]
    fn an_ignored_boolean_must_still_be_a_boolean() {
        assert!(
            parse_err(&["--profiling=maybe"]).contains("--profiling: \"maybe\" is not a boolean")
        );
        assert!(parse_err(&["--log-dir"]).contains("needs an argument"));
    }

    #[test]
    fn help_lists_the_ignored_flags_with_why() {
        let help = help_text();
        for flag in IGNORED_YURTHUB_FLAGS.iter().chain(IGNORED_LOG_FLAGS) {
            assert!(
                help.contains(&format!("      --{}", flag.name)),
                "{}",
                flag.name
            );
            assert!(help.contains(flag.why), "{}", flag.name);
        }
        assert!(help.contains("--enable-node-pool (honoured: true): "));
    }

    #[test]
    fn bad_command_lines() {
        assert!(parse_err(&["--no-such-flag"]).contains("unknown flag: --no-such-flag"));
        assert!(!parse_err(&["--no-such-flag"]).contains("did you mean"));
        assert!(
            parse_err(&["--proxy-prot=1"])
                .contains("unknown flag: --proxy-prot (did you mean --proxy-port? (see --help))")
        );
        assert!(parse_err(&["--node-name"]).contains("needs an argument"));
        assert!(parse_err(&["stray"]).contains("takes only flags"));
        assert!(parse_err(&["-x"]).contains("unknown shorthand"));
    }

    #[test]
    fn test_flags_parse_but_stay_out_of_help() {
        let raw = parse_ok(&["--test-only-client-io-timeout-seconds=3"]);
        assert_eq!(raw.get("test-only-client-io-timeout-seconds"), Some("3"));
        assert!(!help_text().contains("test-only"));
    }

    #[test]
    fn help_lists_every_flag_of_the_design() {
        let help = help_text();
        for name in [
            "server-addr",
            "kubeconfig",
            "node-name",
            "nodepool-name",
            "bind-address",
            "proxy-port",
            "proxy-secure-port",
            "serve-port",
            "multiplexer-port",
            "multiplexer-client-ca-file",
            "disk-cache-path",
            "cache-max-bytes",
            "cache-agents",
            "lb-mode",
            "heartbeat-interval-seconds",
            "heartbeat-timeout-seconds",
            "heartbeat-failed-retry",
            "heartbeat-healthy-threshold",
            "kubelet-health-grace-period",
            "heartbeat-mode",
            "working-mode",
            "enable-resource-filter",
            "disabled-resource-filters",
        ] {
            assert!(
                help.contains(&format!("--{name} ")),
                "--help misses --{name}"
            );
        }
        assert!(help.contains("(default 10261)"));
        assert!(help.contains("--kubelet-health-grace-period duration "));
        assert!(help.contains("(default 40s)"));
        assert!(help.contains("(default \"lease\")"));
        assert!(help.contains("(default \"/etc/kubernetes/cache\")"));
    }
}
