//! Response filters (YurtHub's `pkg/yurthub/filter`): which filters apply to a request, and the
//! pure functions that rewrite or drop one decoded object on its way from the cloud to a node
//! component.
//!
//! This module does no I/O. What a filter needs from the cloud (a Service's topology
//! annotation, the node's pool, a pool's members) comes through [`Lookups`], implemented by
//! the caller; turning an [`Outcome`] into a response (a dropped watch object becomes
//! `DELETED` with the original, a dropped get sends the original, a dropped list item is
//! omitted) is the relay's job. Filters never mutate their input: the input may be shared.

pub(crate) mod body;
mod discardcloudservice;
mod forwardkubesvctraffic;
mod inclusterconfig;
pub(crate) mod list_memo;
pub(crate) mod lookups;
mod masterservice;
mod nodeportisolation;
pub(crate) mod series;
mod serviceenvupdater;
mod servicetopology;
pub(crate) mod topology_index;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde_json::Value;

use crate::request::ApiRequest;

/// A response filter, in YurtHub's registration order (`cmd/yurthub/app/options/filters.go`),
/// which is the order a chain applies them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FilterName {
    /// Keeps only the endpoints of this node or pool (§2.8).
    ServiceTopology,
    /// Points kubelet's `default/kubernetes` Service at the hub (§2.2).
    MasterService,
    /// Hides cloud-only Services from kube-proxy (§2.5).
    DiscardCloudService,
    /// Comments out kube-proxy's kubeconfig in kubelet's view of its ConfigMap (§2.4).
    InClusterConfig,
    /// Hides NodePort Services not meant for this node's pool (§2.6).
    NodePortIsolation,
    /// Points kube-proxy's `default/kubernetes` EndpointSlice at the hub (§2.3).
    ForwardKubeSvcTraffic,
    /// Points explicit `KUBERNETES_SERVICE_*` env vars of pods at the hub (§2.7).
    ServiceEnvUpdater,
}

impl FilterName {
    /// Every filter, in registration order.
    pub(crate) const ALL: [FilterName; 7] = [
        FilterName::ServiceTopology,
        FilterName::MasterService,
        FilterName::DiscardCloudService,
        FilterName::InClusterConfig,
        FilterName::NodePortIsolation,
        FilterName::ForwardKubeSvcTraffic,
        FilterName::ServiceEnvUpdater,
    ];

    /// The name YurtHub's flags and `yurt-hub-cfg` use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FilterName::ServiceTopology => "servicetopology",
            FilterName::MasterService => "masterservice",
            FilterName::DiscardCloudService => "discardcloudservice",
            FilterName::InClusterConfig => "inclusterconfig",
            FilterName::NodePortIsolation => "nodeportisolation",
            FilterName::ForwardKubeSvcTraffic => "forwardkubesvctraffic",
            FilterName::ServiceEnvUpdater => "serviceenvupdater",
        }
    }

    /// Reads a YurtHub filter name (exact, as YurtHub compares it).
    pub(crate) fn parse(text: &str) -> Option<FilterName> {
        FilterName::ALL.into_iter().find(|f| f.name() == text)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Bytes every object this filter may change or drop holds in its JSON as the apiserver
    /// writes it (Go's encoder escapes no ASCII letter, digit, `.`, `/`, `-` or `_`), so an
    /// object holding none of its chain's passes without being parsed: most objects of a
    /// filtered list, which is then nearly as cheap as an unfiltered one.
    fn needles(self) -> &'static [&'static str] {
        match self {
            // Slices name their Service in this label; Endpoints are named as their Service.
            FilterName::ServiceTopology => &["kubernetes.io/service-name", "\"subsets\""],
            // Only `default/kubernetes` (the Service, or its EndpointSlice).
            FilterName::MasterService | FilterName::ForwardKubeSvcTraffic => &["\"kubernetes\""],
            FilterName::DiscardCloudService => {
                &["\"LoadBalancer\"", "\"x-tunnel-server-internal-svc\""]
            }
            FilterName::InClusterConfig => &["\"kube-proxy\""],
            FilterName::NodePortIsolation => &["\"nodeport.openyurt.io/listen\""],
            FilterName::ServiceEnvUpdater => &["KUBERNETES_SERVICE_"],
        }
    }

    /// Disabled by `--working-mode=cloud` (`filters.go:32`): they only make sense on an edge node.
    fn edge_only(self) -> bool {
        matches!(
            self,
            FilterName::DiscardCloudService
                | FilterName::ForwardKubeSvcTraffic
                | FilterName::ServiceEnvUpdater
        )
    }

    /// The one object (namespace, name) this filter may change, when it changes no other:
    /// inclusterconfig changes only `kube-system/kube-proxy`, masterservice and
    /// forwardkubesvctraffic only `default/kubernetes` (each filter's first check). A request
    /// confined to another namespace or naming another object gets an answer the filter
    /// leaves as it is, so the answer need not pass the filter stage at all.
    fn only_object(self) -> Option<(&'static str, &'static str)> {
        match self {
            FilterName::InClusterConfig => Some(("kube-system", "kube-proxy")),
            FilterName::MasterService | FilterName::ForwardKubeSvcTraffic => {
                Some(("default", "kubernetes"))
            }
            _ => None,
        }
    }

    /// The default table (§2.1, `filters.go:36-85`).
    fn defaults(self) -> Defaults {
        const LIST_WATCH: &[&str] = &["list", "watch"];
        match self {
            FilterName::ServiceTopology => Defaults {
                components: &["kube-proxy", "coredns", "nginx-ingress-controller"],
                resources: &["endpoints", "endpointslices"],
                verbs: LIST_WATCH,
            },
            FilterName::MasterService => Defaults {
                components: &["kubelet"],
                resources: &["services"],
                verbs: LIST_WATCH,
            },
            FilterName::DiscardCloudService | FilterName::NodePortIsolation => Defaults {
                components: &["kube-proxy"],
                resources: &["services"],
                verbs: LIST_WATCH,
            },
            FilterName::InClusterConfig => Defaults {
                components: &["kubelet"],
                resources: &["configmaps"],
                verbs: &["get", "list", "watch"],
            },
            FilterName::ForwardKubeSvcTraffic => Defaults {
                components: &["kube-proxy"],
                resources: &["endpointslices"],
                verbs: LIST_WATCH,
            },
            // `patch` covers kubelet's `pods/status` PATCH: YurtHub matches the resource only.
            FilterName::ServiceEnvUpdater => Defaults {
                components: &["kubelet"],
                resources: &["pods"],
                verbs: &["list", "watch", "get", "patch"],
            },
        }
    }
}

/// One row of the default table.
struct Defaults {
    components: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
}

/// The filters that apply to one request, in registration order. A bit set: building and
/// copying one never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Chain(u8);

impl Chain {
    /// No filter.
    pub(crate) const EMPTY: Chain = Chain(0);

    /// True when no filter applies: the response passes untouched.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when `filter` is in the chain.
    pub(crate) fn contains(self, filter: FilterName) -> bool {
        self.0 & (1 << filter.index()) != 0
    }

    /// The chain with `filter` added.
    pub(crate) fn with(self, filter: FilterName) -> Chain {
        Chain(self.0 | (1 << filter.index()))
    }

    /// The filters, in registration order.
    pub(crate) fn iter(self) -> impl Iterator<Item = FilterName> {
        FilterName::ALL
            .into_iter()
            .filter(move |f| self.contains(*f))
    }

    /// The chain without the filters that cannot change an answer confined to `namespace`
    /// (a namespaced request) and to the object `name` (a get, or a subresource of it):
    /// those whose only object ([`FilterName::only_object`]) lies outside. A kubelet's get of
    /// any ConfigMap but kube-proxy's, say, then skips the filter stage (no parse, no copy).
    pub(crate) fn within(self, namespace: Option<&str>, name: Option<&str>) -> Chain {
        let mut kept = Chain::EMPTY;
        for filter in self.iter() {
            let outside = filter.only_object().is_some_and(|(ns, n)| {
                namespace.is_some_and(|want| want != ns) || name.is_some_and(|want| want != n)
            });
            if !outside {
                kept = kept.with(filter);
            }
        }
        kept
    }

    /// What an answer this chain filtered is a function of, when it is one of the object
    /// alone and `ctx` (no filter of the chain reads the cloud): a value that differs
    /// whenever the rewrite could (another chain, another address or port pods are pointed
    /// at; a 64-bit hash, odd, so never 0, the value of the cloud's bytes unfiltered). Two
    /// answers of one list at one resourceVersion rewritten with the same value are the same
    /// (`cache/writer/unchanged.rs`). `None` when a filter reads the cloud (servicetopology,
    /// nodeportisolation): what it reads changes without the list's resourceVersion.
    pub(crate) fn reproducible_form(self, ctx: &FilterContext) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if self.contains(FilterName::ServiceTopology)
            || self.contains(FilterName::NodePortIsolation)
        {
            return None;
        }
        let mut hasher = std::hash::DefaultHasher::new();
        (
            self.0,
            ctx.host,
            ctx.secure_port.get(),
            &ctx.node_name,
            &ctx.pool_name,
        )
            .hash(&mut hasher);
        Some(hasher.finish() | 1)
    }

    /// Whether a filter of the chain may change or drop the object whose JSON is `raw`, by
    /// the needles of [`FilterName::needles`]. When not, the object counts as seen (unchanged)
    /// by each filter of the chain.
    pub(crate) fn may_touch(self, raw: &[u8]) -> bool {
        let needles = finders();
        if self
            .iter()
            .any(|f| needles[f.index()].iter().any(|n| n.find(raw).is_some()))
        {
            return true;
        }
        self.count_unchanged(1);
        false
    }

    /// Counts `objects` as seen (unchanged) by each filter of the chain.
    pub(crate) fn count_unchanged(self, objects: u64) {
        for filter in self.iter() {
            FILTER_STATS.per_filter[filter.index()]
                .seen
                .fetch_add(objects, Ordering::Relaxed);
        }
    }
}

/// The searchers of each filter's needles, indexed like [`FilterName::ALL`]: built once, so
/// an answer's filter stage allocates none.
fn finders() -> &'static [Vec<memchr::memmem::Finder<'static>>; 7] {
    static FINDERS: OnceLock<[Vec<memchr::memmem::Finder<'static>>; 7]> = OnceLock::new();
    FINDERS.get_or_init(|| {
        FilterName::ALL.map(|f| {
            f.needles()
                .iter()
                .map(|needle| memchr::memmem::Finder::new(needle.as_bytes()))
                .collect()
        })
    })
}

/// The start-up switches: `--enable-resource-filter`, `--disabled-resource-filters` and
/// `--working-mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Switches {
    enabled: [bool; 7],
    /// Names in `--disabled-resource-filters` that are no filter, for a start-up warning
    /// (YurtHub ignores them too).
    pub unknown: Vec<String>,
}

impl Switches {
    /// `enable`: `--enable-resource-filter`; `disabled`: the names of
    /// `--disabled-resource-filters` (`*` disables all); `cloud`: `--working-mode=cloud`.
    pub(crate) fn new(enable: bool, disabled: &[String], cloud: bool) -> Switches {
        let mut enabled = [enable; 7];
        let mut unknown = Vec::new();
        let names = disabled.iter().flat_map(|s| s.split(','));
        for name in names.map(str::trim).filter(|s| !s.is_empty()) {
            if name == "*" {
                enabled = [false; 7];
            } else if let Some(f) = FilterName::parse(name) {
                enabled[f.index()] = false;
            } else {
                unknown.push(name.to_owned());
            }
        }
        if cloud {
            for f in FilterName::ALL.into_iter().filter(|f| f.edge_only()) {
                enabled[f.index()] = false;
            }
        }
        Switches { enabled, unknown }
    }

    /// True when `filter` may run at all.
    pub(crate) fn is_enabled(&self, filter: FilterName) -> bool {
        self.enabled[filter.index()]
    }
}

/// Which filters apply to which requests: the switches, the default table and the
/// components `yurt-hub-cfg` adds. A value: rebuild it when the ConfigMap changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilterConfig {
    switches: Switches,
    /// Components added per filter by `yurt-hub-cfg`, lower-cased, without `/…` suffix.
    added: [Vec<String>; 7],
}

impl FilterConfig {
    /// The defaults under `switches`, with no ConfigMap.
    pub(crate) fn new(switches: Switches) -> FilterConfig {
        FilterConfig {
            switches,
            added: Default::default(),
        }
    }

    /// The defaults plus what the `data` of `yurt-hub-cfg` adds (None: the ConfigMap is gone
    /// or has no data). A key is a filter name or `filter_<name>` (the form YurtHub read before
    /// #2275); its value is a comma list of components, each trimmed and cut at the first `/`.
    /// Additions only: a default component cannot be removed this way.
    pub(crate) fn with_config_data(
        switches: Switches,
        data: Option<&serde_json::Map<String, Value>>,
    ) -> FilterConfig {
        let mut config = FilterConfig::new(switches);
        for (key, value) in data.into_iter().flatten() {
            let name = key.strip_prefix("filter_").unwrap_or(key);
            let (Some(filter), Some(value)) = (FilterName::parse(name), value.as_str()) else {
                continue;
            };
            let added = &mut config.added[filter.index()];
            for component in value.split(',') {
                let component = component.split('/').next().unwrap_or("").trim();
                if component.is_empty() {
                    continue;
                }
                // tinyhub lower-cases the User-Agent's component; compare like with like.
                let component = component.to_ascii_lowercase();
                if !added.contains(&component) {
                    added.push(component);
                }
            }
        }
        config
    }

    /// The components that get `filter` (defaults, then additions).
    pub(crate) fn components(&self, filter: FilterName) -> Vec<&str> {
        let mut all: Vec<&str> = filter.defaults().components.to_vec();
        all.extend(self.added[filter.index()].iter().map(String::as_str));
        all
    }

    /// The filters for a request by `component` (as request.rs reads it from the User-Agent),
    /// `verb` (request.rs's `Verb::as_str`) and `resource` (plural, no group or subresource).
    /// Allocation-free: most requests get an empty chain at the cost of a few comparisons.
    pub(crate) fn chain_for(&self, component: &str, verb: &str, resource: &str) -> Chain {
        if never_filtered(component) {
            return Chain::EMPTY;
        }
        let mut chain = Chain::EMPTY;
        for filter in FilterName::ALL {
            if !self.switches.is_enabled(filter) {
                continue;
            }
            let row = filter.defaults();
            if row.resources.contains(&resource)
                && row.verbs.contains(&verb)
                && (row.components.contains(&component)
                    || self.added[filter.index()].iter().any(|c| c == component))
            {
                chain = chain.with(filter);
            }
        }
        chain
    }

    /// [`FilterConfig::chain_for`] of a classified request; empty for a non-resource request.
    /// YurtHub matches the resource only, so `status` counts as its resource (kubelet's
    /// `PATCH pods/<name>/status` gets serviceenvupdater). Other subresources (`log`, `exec`,
    /// `eviction`, ...) answer with something other than the resource's object, which
    /// YurtHub's filters fail to decode and pass unchanged: they get no chain here, so the
    /// relay never buffers a log stream for nothing. A filter that changes one object only is
    /// left out when the request's namespace or name rules that object out ([`Chain::within`]).
    pub(crate) fn chain_for_request(&self, request: &ApiRequest) -> Chain {
        match request.resource() {
            Some(r)
                if matches!(r.subresource.as_deref(), None | Some("status")) && !r.extra_path =>
            {
                let chain = self.chain_for(
                    request.component.as_str(),
                    request.verb.as_str(),
                    &r.gvr.resource,
                );
                chain.within(r.namespace.as_deref(), r.name.as_deref())
            }
            _ => Chain::EMPTY,
        }
    }
}

/// The configuration the relay reads, swapped whole when `yurt-hub-cfg` changes: a request
/// holds the read lock only to compute its chain, never while filtering.
pub(crate) type LiveFilterConfig = Arc<std::sync::RwLock<Arc<FilterConfig>>>;

/// The live [`FilterConfig`], rebuilt when `yurt-hub-cfg` changes (under the flags'
/// switches it already holds).
#[derive(Clone)]
pub(crate) struct FilterReload {
    /// The configuration the relay reads.
    pub config: LiveFilterConfig,
}

impl FilterReload {
    /// Rebuilds the configuration from `configmap` (None: the ConfigMap is gone).
    pub(crate) fn apply(&self, configmap: Option<&Value>) {
        let mut current = self.config.write().unwrap_or_else(|p| p.into_inner());
        let config = FilterConfig::with_config_data(
            current.switches.clone(),
            configmap.and_then(config_data_of),
        );
        if **current != config {
            let summary: Vec<String> = FilterName::ALL
                .into_iter()
                .filter(|f| config.switches.is_enabled(*f))
                .map(|f| format!("{}={}", f.name(), config.components(f).join(",")))
                .collect();
            log::info!(
                "response filter configuration changed by yurt-hub-cfg: {}",
                summary.join(" ")
            );
            *current = Arc::new(config);
        }
    }
}

/// The `data` of a `yurt-hub-cfg` ConfigMap object, for [`FilterConfig::with_config_data`].
pub(crate) fn config_data_of(configmap: &Value) -> Option<&serde_json::Map<String, Value>> {
    configmap.get("data")?.as_object()
}

/// The hub's own requests and a leader hub's multiplexer are never filtered
/// (`filter/approver/approver.go:36-60`); `tinyhub` is the hub's own name for itself.
fn never_filtered(component: &str) -> bool {
    component == "yurthub" || component == "tinyhub" || component.starts_with("multiplexer-proxy-")
}

/// What the filter stage needs (cheap to clone: the refill thread filters too).
#[derive(Clone)]
pub(crate) struct Filters {
    /// Which filters apply to which requests; replaced when `yurt-hub-cfg` changes.
    pub config: LiveFilterConfig,
    /// What the filters know about this hub.
    pub ctx: FilterContext,
    /// What the filters look up in the cloud.
    pub lookups: Arc<dyn Lookups + Send + Sync>,
    /// Lists the filters left unchanged, by request (`filters/list_memo.rs`), shared by clones.
    pub memos: Arc<list_memo::ListMemos>,
}

impl Filters {
    /// The filters for `req` under the current configuration (no allocation).
    pub(crate) fn chain_for(&self, req: &ApiRequest) -> Chain {
        // A poisoned lock still holds a whole Arc: the swap cannot be half done.
        match self.config.read() {
            Ok(config) => config.chain_for_request(req),
            Err(poisoned) => poisoned.into_inner().chain_for_request(req),
        }
    }
}

/// What the filters know about this hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilterContext {
    /// The address pods reach the hub at: the dummy interface's IP, else the bind-proxy address.
    pub host: IpAddr,
    /// The hub's HTTPS proxy port: `--proxy-secure-port` until the listener binds, then the
    /// port it really bound (they differ for port 0).
    pub secure_port: SecurePort,
    /// This node's name.
    pub node_name: String,
    /// `--nodepool-name`, when set.
    pub pool_name: Option<String>,
}

impl FilterContext {
    /// The context of a hub at `host`, which the caller picks (YurtHub's dummy-interface IP
    /// 169.254.2.1, or `fd00::2:1` when the bind address is IPv6; else the bind-proxy address),
    /// with its HTTPS proxy port, node and pool (empty: none). An unspecified `host`
    /// (`0.0.0.0`, `::`) is no address a pod can dial; the hub listens on the node's address
    /// then, so that is injected (`node_ip`, else loopback).
    pub(crate) fn new(
        host: IpAddr,
        node_ip: Option<IpAddr>,
        secure_port: u16,
        node_name: String,
        pool_name: Option<String>,
    ) -> FilterContext {
        let loopback = match host {
            IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        };
        let host = if host.is_unspecified() {
            node_ip.unwrap_or(loopback)
        } else {
            host
        };
        FilterContext {
            host,
            secure_port: SecurePort::new(secure_port),
            node_name,
            pool_name: pool_name.filter(|p| !p.is_empty()),
        }
    }
}

/// The HTTPS proxy port the filters inject, shared between every clone of a context so the
/// HTTPS listener can publish the port it bound; one relaxed load per read on the request path.
#[derive(Debug, Clone)]
pub(crate) struct SecurePort(Arc<AtomicU16>);

impl SecurePort {
    /// A port holding `port` until [`SecurePort::set`].
    pub(crate) fn new(port: u16) -> SecurePort {
        SecurePort(Arc::new(AtomicU16::new(port)))
    }

    /// The current port.
    pub(crate) fn get(&self) -> u16 {
        self.0.load(Ordering::Relaxed)
    }

    /// Publishes the port the listener bound, seen by every clone.
    pub(crate) fn set(&self, port: u16) {
        self.0.store(port, Ordering::Relaxed);
    }
}

/// Two ports are equal when they hold the same value now (tests compare contexts).
impl PartialEq for SecurePort {
    fn eq(&self, other: &SecurePort) -> bool {
        self.get() == other.get()
    }
}

impl Eq for SecurePort {}

/// What a filter needs from the cloud, answered by the caller (cached GETs through the hub).
pub(crate) trait Lookups {
    /// The `openyurt.io/topologyKeys` annotation of Service `namespace/service`: None when the
    /// Service is not found, Some(None) when it has no such annotation.
    fn service_topology(&self, namespace: &str, service: &str) -> Option<Option<String>>;
    /// This node's `apps.openyurt.io/nodepool` label (used when `--nodepool-name` is not set);
    /// None when unknown.
    fn node_pool(&self) -> Option<String>;
    /// The node names of NodePool `pool` (its `status.nodes`, looked up by name); None when
    /// unavailable.
    fn pool_members(&self, pool: &str) -> Option<Vec<String>>;
    /// An object of Service `namespace/service` carries yurt-manager's
    /// `openyurt.io/update-trigger` annotation with `trigger` (unix seconds): yurt-manager sets
    /// a newer one right after a Service's topology or a pool's members changed, so answers
    /// remembered from before must not be used for that object.
    fn saw_update_trigger(&self, namespace: &str, service: &str, trigger: &str);
}

/// What the filters made of one object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Pass the object as it came.
    Unchanged,
    /// Pass this copy instead.
    Changed(Value),
    /// Hide the object from the client.
    Dropped,
}

/// Applies `chain` to `obj`: filters in registration order, each seeing the previous one's
/// result, stopping at the first drop. `obj` is never modified; a copy is made only when a
/// filter changes something. For an object that carries its `apiVersion` (a get, a watch
/// event's object); list items use [`apply_item`].
pub(crate) fn apply(
    chain: &Chain,
    obj: &Value,
    ctx: &FilterContext,
    lookups: &dyn Lookups,
) -> Outcome {
    apply_item(chain, obj, None, ctx, lookups)
}

/// [`apply`] for an item of a list, which the apiserver sends without `apiVersion`:
/// `list_api_version` is the list's (`discovery.k8s.io/v1beta1` for a v1beta1
/// EndpointSliceList), so servicetopology reads the right field of each endpoint. Without it
/// an endpoint's `nodeName` is read, else its v1beta1 hostname topology.
pub(crate) fn apply_item(
    chain: &Chain,
    obj: &Value,
    list_api_version: Option<&str>,
    ctx: &FilterContext,
    lookups: &dyn Lookups,
) -> Outcome {
    let mut current: Option<Value> = None;
    for filter in chain.iter() {
        let input = current.as_ref().unwrap_or(obj);
        let started = Instant::now();
        let outcome = run(filter, input, list_api_version, ctx, lookups);
        let counter = &FILTER_STATS.per_filter[filter.index()];
        counter
            .nanos
            .fetch_add(nanos(started.elapsed()), Ordering::Relaxed);
        counter.seen.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Outcome::Unchanged => {}
            Outcome::Changed(v) => {
                counter.changed.fetch_add(1, Ordering::Relaxed);
                current = Some(v);
            }
            Outcome::Dropped => {
                counter.dropped.fetch_add(1, Ordering::Relaxed);
                return Outcome::Dropped;
            }
        }
    }
    match current {
        Some(v) => Outcome::Changed(v),
        None => Outcome::Unchanged,
    }
}

fn run(
    filter: FilterName,
    obj: &Value,
    api_version: Option<&str>,
    ctx: &FilterContext,
    lookups: &dyn Lookups,
) -> Outcome {
    match filter {
        FilterName::ServiceTopology => servicetopology::filter(obj, api_version, ctx, lookups),
        FilterName::MasterService => masterservice::filter(obj, ctx),
        FilterName::DiscardCloudService => discardcloudservice::filter(obj),
        FilterName::InClusterConfig => inclusterconfig::filter(obj),
        FilterName::NodePortIsolation => nodeportisolation::filter(obj, ctx, lookups),
        FilterName::ForwardKubeSvcTraffic => forwardkubesvctraffic::filter(obj, ctx),
        FilterName::ServiceEnvUpdater => serviceenvupdater::filter(obj, ctx),
    }
}

/// Counters of one filter.
#[derive(Debug)]
pub(crate) struct FilterCounter {
    /// Objects the filter saw.
    pub seen: AtomicU64,
    /// Objects it changed.
    pub changed: AtomicU64,
    /// Objects it dropped.
    pub dropped: AtomicU64,
    /// Nanoseconds spent in the filter itself (its lookups included; decoding and encoding
    /// the answer are the stage's, counted per chain).
    pub nanos: AtomicU64,
    /// Answers it was applied to.
    pub answers: AtomicU64,
}

impl FilterCounter {
    const fn new() -> FilterCounter {
        FilterCounter {
            seen: AtomicU64::new(0),
            changed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            answers: AtomicU64::new(0),
        }
    }
}

/// `spent` in nanoseconds, saturated.
fn nanos(spent: std::time::Duration) -> u64 {
    u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX)
}

/// The filter stage's time spent on the answers of one chain.
#[derive(Debug)]
struct ChainTime {
    /// Answers filtered.
    answers: AtomicU64,
    /// Nanoseconds spent filtering them: decode, filters, encode, and the filters' cloud
    /// lookups (a slow cloud shows here; the relay's own reads and writes do not).
    nanos: AtomicU64,
}

/// Chains there can be: one bit per filter.
const CHAINS: usize = 1 << FilterName::ALL.len();

/// Counters of every filter, indexed like [`FilterName::ALL`], and the filter stage's time
/// per chain, for the metrics page.
#[derive(Debug)]
pub(crate) struct FilterStats {
    per_filter: [FilterCounter; 7],
    // Indexed by the chain's bits: a fixed array of atomics, so recording takes no lock and
    // never allocates.
    per_chain: [ChainTime; CHAINS],
}

impl FilterStats {
    /// All counters at zero.
    pub(crate) const fn new() -> FilterStats {
        FilterStats {
            per_filter: [const { FilterCounter::new() }; 7],
            per_chain: [const {
                ChainTime {
                    answers: AtomicU64::new(0),
                    nanos: AtomicU64::new(0),
                }
            }; CHAINS],
        }
    }

    /// The counters of `filter`.
    pub(crate) fn of(&self, filter: FilterName) -> &FilterCounter {
        &self.per_filter[filter.index()]
    }

    /// Counts one answer filtered by `chain`, which took `spent` in the filter stage.
    pub(crate) fn record_answer(&self, chain: Chain, spent: std::time::Duration) {
        let time = &self.per_chain[usize::from(chain.0) % CHAINS];
        time.answers.fetch_add(1, Ordering::Relaxed);
        time.nanos.fetch_add(nanos(spent), Ordering::Relaxed);
        for filter in chain.iter() {
            self.per_filter[filter.index()]
                .answers
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every chain that filtered an answer: (chain, answers, nanoseconds spent).
    pub(crate) fn answer_times(&self) -> impl Iterator<Item = (Chain, u64, u64)> + '_ {
        self.per_chain
            .iter()
            .enumerate()
            .filter_map(|(bits, time)| {
                let answers = time.answers.load(Ordering::Relaxed);
                // `bits` < CHAINS = 128 fits a u8.
                (answers > 0).then(|| {
                    (
                        Chain(bits as u8),
                        answers,
                        time.nanos.load(Ordering::Relaxed),
                    )
                })
            })
    }
}

/// The process's filter counters.
pub(crate) static FILTER_STATS: FilterStats = FilterStats::new();

/// Sets `port` of the entry named `https` in a `ports` array (its `targetPort` is left alone).
fn set_https_port(ports: Option<&mut Value>, secure_port: u16) {
    for port in ports.and_then(Value::as_array_mut).into_iter().flatten() {
        if port.get("name").and_then(Value::as_str) == Some("https")
            && let Some(port) = port.as_object_mut()
        {
            port.insert("port".into(), Value::from(secure_port));
        }
    }
}

/// `metadata.namespace` and `metadata.name` of an object ("" when absent).
fn namespace_name(obj: &Value) -> (&str, &str) {
    let meta = obj.get("metadata");
    let field = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    (field("namespace"), field("name"))
}

/// `metadata.annotations[key]` when it is a string.
fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

/// The pool of this node: `--nodepool-name`, else the node's label; None when unknown or empty.
fn node_pool(ctx: &FilterContext, lookups: &dyn Lookups) -> Option<String> {
    ctx.pool_name
        .clone()
        .or_else(|| lookups.node_pool())
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
