//! The pool's leader hubs as yurt-manager publishes them (yurt-manager's
//! `pkg/yurtmanager/controller/hubleaderconfig`): the ConfigMap
//! `<namespace>/leader-hub-<pool>`, read from its JSON into a [`LeaderConfig`]; where this
//! node reads pool-scope resources from ([`Source`]); the leaders' URLs; and the state kept
//! across the ConfigMap's watch events ([`PoolState`]). Pure: the watch itself belongs to
//! the caller.
//!
//! Design decisions:
//! - Read as YurtHub reads it: `leaders` entries `<node>/<address>` with exactly one `/`,
//!   `pool-scoped-metadata` replacing the start-up set (an empty or absent value: no
//!   multiplexing), `enable-leader-election` true only when exactly `"true"`,
//!   `interconnectivity` unused. Unlike YurtHub, an address must be an IP (v4 or v6), and
//!   every entry skipped says why, for the caller to log.
//! - A leader URL brackets an IPv6 address (`https://[fd00::5]:10269`); YurtHub does not,
//!   which makes its URL unusable for IPv6 leaders.
//! - A deleted ConfigMap changes nothing: YurtHub ignores deletes (only a NodePool's
//!   deletion removes it), and a node that lost its pool's ConfigMap for a moment should not
//!   stampede the cloud.
//! - Memory: one [`Leader`] is a boxed node name and an address (28 bytes on a 32-bit
//!   router, plus the name); a pool has one to a few leaders.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use super::resources::PoolScope;
use crate::names::{Gvr, is_dns_label, is_dns_subdomain};

/// The ConfigMap names start with this, then the pool's name.
pub(crate) const CONFIG_NAME_PREFIX: &str = "leader-hub-";
/// The label yurt-manager puts on the ConfigMap; its value is the ConfigMap's name (tests
/// only: the watcher selects the ConfigMap by name).
#[cfg(test)]
pub(crate) const CONFIG_LABEL: &str = "openyurt.io/configmap-name";
/// Data key: the leaders, `<node>/<address>` comma-separated.
pub(crate) const KEY_LEADERS: &str = "leaders";
/// Data key: the pool-scope resources, `group/version/resource` comma-separated.
pub(crate) const KEY_POOL_SCOPED_METADATA: &str = "pool-scoped-metadata";
/// Data key: `"true"` when the pool elects leaders.
pub(crate) const KEY_ENABLE_LEADER_ELECTION: &str = "enable-leader-election";
/// Seconds one watch of the ConfigMap lasts before the caller renews it.
pub(crate) const WATCH_SECONDS: u64 = 300;

/// Why the pool's leader ConfigMap cannot be named, or one version of it cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaderConfigError {
    /// `leader-hub-<pool>` is not a valid object name.
    PoolName {
        /// The pool name it was made from.
        pool: String,
    },
    /// The namespace is not a DNS label.
    Namespace(String),
    /// The object is not a JSON object.
    NotAnObject,
    /// Its `data` is neither absent nor an object.
    DataNotAnObject,
}

impl fmt::Display for LeaderConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderConfigError::PoolName { pool } => write!(
                f,
                "{:?} is not a valid ConfigMap name (from the pool name {pool:?})",
                format!("{CONFIG_NAME_PREFIX}{pool}")
            ),
            LeaderConfigError::Namespace(namespace) => {
                write!(f, "{namespace:?} is not a namespace")
            }
            LeaderConfigError::NotAnObject => f.write_str("the ConfigMap is not a JSON object"),
            LeaderConfigError::DataNotAnObject => {
                f.write_str("the ConfigMap's data is not an object")
            }
        }
    }
}

impl std::error::Error for LeaderConfigError {}

/// The name of `pool`'s ConfigMap, `leader-hub-<pool>`; an error when that is not a valid
/// object name (the pool name is put into request paths and queries).
pub(crate) fn config_name(pool: &str) -> Result<String, LeaderConfigError> {
    let name = format!("{CONFIG_NAME_PREFIX}{pool}");
    if is_dns_subdomain(&name) {
        Ok(name)
    } else {
        Err(LeaderConfigError::PoolName { pool: pool.into() })
    }
}

/// The label selector of `pool`'s ConfigMap, `openyurt.io/configmap-name=leader-hub-<pool>`
/// (what YurtHub's informer selects by; tests only).
#[cfg(test)]
pub(crate) fn label_selector(pool: &str) -> Result<String, LeaderConfigError> {
    Ok(format!("{CONFIG_LABEL}={}", config_name(pool)?))
}

/// The path that lists `pool`'s ConfigMap in `namespace`, by name:
/// `/api/v1/namespaces/<ns>/configmaps?fieldSelector=metadata.name%3Dleader-hub-<pool>`.
pub(crate) fn list_path(namespace: &str, pool: &str) -> Result<String, LeaderConfigError> {
    if !is_dns_label(namespace) {
        return Err(LeaderConfigError::Namespace(namespace.into()));
    }
    let name = config_name(pool)?;
    // Names are lower-case alphanumerics, '-' and '.': nothing to escape.
    Ok(format!(
        "/api/v1/namespaces/{namespace}/configmaps?fieldSelector=metadata.name%3D{name}"
    ))
}

/// The path that watches `pool`'s ConfigMap from `resource_version` for
/// [`WATCH_SECONDS`], with bookmarks.
pub(crate) fn watch_path(
    namespace: &str,
    pool: &str,
    resource_version: &str,
) -> Result<String, LeaderConfigError> {
    let mut rv = String::new();
    crate::request::escape(resource_version, crate::request::QUERY_SAFE, &mut rv);
    Ok(format!(
        "{}&watch=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}&allowWatchBookmarks=true",
        list_path(namespace, pool)?
    ))
}

/// One leader hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leader {
    /// Its node's name.
    pub node: Box<str>,
    /// Its InternalIP, where it serves the multiplexer port (and which its serving
    /// certificate names).
    pub ip: IpAddr,
}

impl Leader {
    /// `https://<ip>:<port>`, an IPv6 address in brackets (tests only: a follower uses
    /// `health::leader_url` of the picked address).
    #[cfg(test)]
    pub(crate) fn url(&self, port: u16) -> String {
        format!("https://{}", self.addr(port))
    }

    /// The socket address to dial.
    pub(crate) fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip, port)
    }
}

/// Where this node lists and watches pool-scope resources from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A leader hub of the pool (then the cloud, then the cache, by health).
    Pool,
    /// The cloud (then the cache): election off, no leader, or this node leads.
    Cloud,
}

impl Source {
    /// YurtHub's name for it, for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Pool => "pool",
            Source::Cloud => "api",
        }
    }
}

/// What one version of the ConfigMap says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderConfig {
    /// The leaders, in the ConfigMap's order, each once.
    pub leaders: Vec<Leader>,
    /// The pool-scope resources, replacing the start-up set.
    pub pool_scope: PoolScope,
    /// `enable-leader-election` is `"true"`.
    pub election: bool,
    /// Why entries were skipped (a leader without exactly one `/` or with no IP address, a
    /// resource that is not group/version/resource), for the caller to log.
    pub skipped: Vec<String>,
}

impl LeaderConfig {
    /// Reads a ConfigMap object. An error when it is not a ConfigMap-like object; a missing
    /// `data` (or key) reads as empty values, as a Go map lookup does.
    pub(crate) fn from_configmap(cm: &Value) -> Result<LeaderConfig, LeaderConfigError> {
        let object = cm.as_object().ok_or(LeaderConfigError::NotAnObject)?;
        let data = match object.get("data") {
            None | Some(Value::Null) => None,
            Some(Value::Object(data)) => Some(data),
            Some(_) => return Err(LeaderConfigError::DataNotAnObject),
        };
        let mut skipped = Vec::new();
        let leaders_text = data_value(data, KEY_LEADERS, &mut skipped);
        let metadata = data_value(data, KEY_POOL_SCOPED_METADATA, &mut skipped);
        let election = data_value(data, KEY_ENABLE_LEADER_ELECTION, &mut skipped) == "true";
        let (pool_scope, mut scope_skipped) = PoolScope::from_metadata(metadata);
        let leaders = parse_leaders(leaders_text, &mut skipped);
        skipped.append(&mut scope_skipped);
        Ok(LeaderConfig {
            leaders,
            pool_scope,
            election,
            skipped,
        })
    }

    /// Where `node` reads pool-scope resources: [`Source::Pool`] when election is on, there
    /// is a leader, and `node` is not one of them; else [`Source::Cloud`].
    pub(crate) fn source(&self, node: &str) -> Source {
        if self.election
            && !self.leaders.is_empty()
            && !self.leaders.iter().any(|l| &*l.node == node)
        {
            Source::Pool
        } else {
            Source::Cloud
        }
    }
}

/// The string at `key` of a ConfigMap's data; "" when absent, null or not a string (then
/// with a reason in `skipped`).
fn data_value<'a>(
    data: Option<&'a serde_json::Map<String, Value>>,
    key: &str,
    skipped: &mut Vec<String>,
) -> &'a str {
    match data.and_then(|d| d.get(key)) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(_) => {
            skipped.push(format!("data key {key:?} is not a string: read as empty"));
            ""
        }
    }
}

/// The `leaders` value: entries `<node>/<ip>`, bad ones skipped with a reason.
fn parse_leaders(text: &str, skipped: &mut Vec<String>) -> Vec<Leader> {
    let mut leaders: Vec<Leader> = Vec::new();
    for entry in text.split(',').filter(|e| !e.trim().is_empty()) {
        let parts: Vec<&str> = entry.split('/').collect();
        let [node, address] = parts[..] else {
            skipped.push(format!("leader {entry:?} skipped: not <node>/<address>"));
            continue;
        };
        let (node, address) = (node.trim(), address.trim());
        if !is_dns_subdomain(node) {
            skipped.push(format!(
                "leader {entry:?} skipped: {node:?} is not a node name"
            ));
            continue;
        }
        // yurt-manager writes a node's InternalIP; a bracketed IPv6 is read too.
        let bare = address
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(address);
        let Ok(ip) = bare.parse::<IpAddr>() else {
            skipped.push(format!(
                "leader {entry:?} skipped: {address:?} is not an IP address"
            ));
            continue;
        };
        let leader = Leader {
            node: node.into(),
            ip,
        };
        if !leaders.contains(&leader) {
            leaders.push(leader);
        }
    }
    leaders
}

/// A watch event of the ConfigMap, as far as the state cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigEvent<'a> {
    /// Listed, added or modified: this is the ConfigMap now.
    Seen(&'a Value),
    /// Deleted: ignored (the last state holds).
    Deleted,
}

/// What changed with one event, for the caller to act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// The leader list changed: probe the new leaders at once.
    pub leaders: bool,
    /// The source changed.
    pub source: bool,
    /// Resources no longer pool-scope: drop their watch caches.
    pub removed: Vec<Gvr>,
    /// Why entries were skipped (or the whole object), to log.
    pub skipped: Vec<String>,
}

/// This node's view of its pool, across the ConfigMap's events: starts from the flags'
/// set with the cloud as source and no leader.
#[derive(Debug, Clone)]
pub(crate) struct PoolState {
    node: Box<str>,
    /// `leader-hub-<pool>`: an object of another name is not this pool's.
    config_name: Box<str>,
    pool_scope: PoolScope,
    leaders: Vec<Leader>,
    source: Source,
    /// A ConfigMap has been seen (the set is then the ConfigMap's).
    seen: bool,
}

impl PoolState {
    /// Before any ConfigMap of `node`'s `pool`: `flags` (defaults plus
    /// `--pool-scope-resources`), the cloud. An error when the pool makes no valid
    /// ConfigMap name.
    pub(crate) fn new(
        node: &str,
        pool: &str,
        flags: PoolScope,
    ) -> Result<PoolState, LeaderConfigError> {
        Ok(PoolState {
            node: node.into(),
            config_name: config_name(pool)?.into(),
            pool_scope: flags,
            leaders: Vec::new(),
            source: Source::Cloud,
            seen: false,
        })
    }

    /// Applies one event. An object that cannot be read, or that names another ConfigMap
    /// (YurtHub's informer filters by name too), changes nothing (the reason is in
    /// `skipped`), like a delete.
    pub(crate) fn apply(&mut self, event: ConfigEvent<'_>) -> Change {
        let cm = match event {
            ConfigEvent::Deleted => return Change::default(),
            ConfigEvent::Seen(cm) => cm,
        };
        if let Some(name) = cm.pointer("/metadata/name").and_then(Value::as_str)
            && name != &*self.config_name
        {
            return Change {
                skipped: vec![format!(
                    "ConfigMap {name:?} ignored: this pool's is {:?}",
                    self.config_name
                )],
                ..Change::default()
            };
        }
        let config = match LeaderConfig::from_configmap(cm) {
            Ok(config) => config,
            Err(why) => {
                return Change {
                    skipped: vec![format!("leader ConfigMap ignored: {why}")],
                    ..Change::default()
                };
            }
        };
        let source = config.source(&self.node);
        let change = Change {
            leaders: config.leaders != self.leaders,
            source: source != self.source,
            removed: self.pool_scope.removed_in(&config.pool_scope),
            skipped: config.skipped,
        };
        self.leaders = config.leaders;
        self.pool_scope = config.pool_scope;
        self.source = source;
        self.seen = true;
        change
    }

    /// The pool-scope resources now.
    pub(crate) fn pool_scope(&self) -> &PoolScope {
        &self.pool_scope
    }

    /// The leaders now (may include this node).
    pub(crate) fn leaders(&self) -> &[Leader] {
        &self.leaders
    }

    /// Where pool-scope resources are read from now.
    pub(crate) fn source(&self) -> Source {
        self.source
    }

    /// A ConfigMap has been seen since start (tests only).
    #[cfg(test)]
    pub(crate) fn seen(&self) -> bool {
        self.seen
    }

    /// The ConfigMap names this node a leader.
    pub(crate) fn is_leader(&self) -> bool {
        self.leaders.iter().any(|l| l.node == self.node)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cm(data: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "leader-hub-pool-a",
                "namespace": "kube-system",
                "labels": {"openyurt.io/configmap-name": "leader-hub-pool-a"}
            },
            "data": data
        })
    }

    fn leader(node: &str, ip: &str) -> Leader {
        Leader {
            node: node.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn names_label_and_paths_of_the_pools_configmap() {
        assert_eq!(config_name("pool-a").unwrap(), "leader-hub-pool-a");
        assert_eq!(
            label_selector("pool-a").unwrap(),
            "openyurt.io/configmap-name=leader-hub-pool-a"
        );
        assert_eq!(
            list_path("kube-system", "pool-a").unwrap(),
            "/api/v1/namespaces/kube-system/configmaps?fieldSelector=metadata.name%3Dleader-hub-pool-a"
        );
        assert_eq!(
            watch_path("yurt", "pool-a", "12&x").unwrap(),
            "/api/v1/namespaces/yurt/configmaps?fieldSelector=metadata.name%3Dleader-hub-pool-a&watch=true&resourceVersion=12%26x&timeoutSeconds=300&allowWatchBookmarks=true"
        );
        // The paths classify as a list and a watch of that one ConfigMap.
        let watch =
            crate::request::classify("GET", &watch_path("yurt", "p", "7").unwrap(), &[]).unwrap();
        assert_eq!(watch.verb, crate::request::Verb::Watch);
        assert_eq!(
            watch.query.field_selector.as_deref(),
            Some("metadata.name=leader-hub-p")
        );
        assert_eq!(
            config_name("Pool_A").unwrap_err().to_string(),
            r#""leader-hub-Pool_A" is not a valid ConfigMap name (from the pool name "Pool_A")"#
        );
        assert_eq!(
            list_path("Kube-System", "p").unwrap_err(),
            LeaderConfigError::Namespace("Kube-System".into())
        );
        assert!(list_path("Kube-System", "p").is_err());
        assert!(list_path("kube-system", "p/../x").is_err());
    }

    #[test]
    fn yurt_managers_configmap_is_read() {
        let c = LeaderConfig::from_configmap(&cm(json!({
            "leaders": "nodeA/10.0.0.5,nodeb/fd00::6",
            "pool-scoped-metadata": "/v1/services,discovery.k8s.io/v1/endpointslices",
            "interconnectivity": "true",
            "enable-leader-election": "true"
        })))
        .unwrap();
        // "nodeA" is not a node name (upper case): skipped with its reason.
        assert_eq!(c.leaders, [leader("nodeb", "fd00::6")]);
        assert_eq!(c.skipped.len(), 1);
        assert!(
            c.skipped[0].contains("\"nodeA\" is not a node name"),
            "{:?}",
            c.skipped
        );
        assert!(c.election);
        assert_eq!(
            c.pool_scope.to_metadata(),
            "/v1/services,discovery.k8s.io/v1/endpointslices"
        );
    }

    #[test]
    fn bad_leader_entries_are_skipped_with_a_reason() {
        let c = LeaderConfig::from_configmap(&cm(json!({
            "leaders": "a/10.0.0.1,b,c/10.0.0.3/x,d/host.example,e/[fd00::7],a/10.0.0.1,,f/ 10.0.0.9 ",
            "enable-leader-election": "True"
        })))
        .unwrap();
        assert_eq!(
            c.leaders,
            [
                leader("a", "10.0.0.1"),
                leader("e", "fd00::7"),
                leader("f", "10.0.0.9")
            ]
        );
        assert_eq!(c.skipped.len(), 3, "{:?}", c.skipped);
        assert!(c.skipped[0].contains("\"b\" skipped: not <node>/<address>"));
        assert!(c.skipped[1].contains("\"c/10.0.0.3/x\""));
        assert!(c.skipped[2].contains("\"host.example\" is not an IP address"));
        assert!(!c.election, "only exactly \"true\" turns election on");
        assert!(
            c.pool_scope.is_empty(),
            "no pool-scoped-metadata: nothing multiplexed"
        );
    }

    #[test]
    fn malformed_configmaps_are_errors_or_empty_values() {
        assert!(LeaderConfig::from_configmap(&json!([])).is_err());
        assert!(LeaderConfig::from_configmap(&json!({"data": "x"})).is_err());
        let c = LeaderConfig::from_configmap(&json!({"metadata": {}})).unwrap();
        assert!(c.leaders.is_empty() && !c.election && c.pool_scope.is_empty());
        let c = LeaderConfig::from_configmap(&cm(json!({"leaders": 5}))).unwrap();
        assert!(c.leaders.is_empty());
        assert!(c.skipped[0].contains("\"leaders\" is not a string"));
    }

    #[test]
    fn the_source_is_the_pool_only_for_a_follower_with_election_on() {
        let config = |election: &str, leaders: &str| {
            LeaderConfig::from_configmap(&cm(json!({
                "leaders": leaders,
                "enable-leader-election": election,
                "pool-scoped-metadata": "/v1/services"
            })))
            .unwrap()
        };
        let two = "n1/10.0.0.1,n2/10.0.0.2";
        assert_eq!(config("true", two).source("n3"), Source::Pool);
        assert_eq!(config("true", two).source("n2"), Source::Cloud, "a leader");
        assert_eq!(
            config("false", two).source("n3"),
            Source::Cloud,
            "election off"
        );
        assert_eq!(config("true", "").source("n3"), Source::Cloud, "no leader");
        assert_eq!(
            config("true", "x/nope").source("n3"),
            Source::Cloud,
            "no usable leader"
        );
        assert_eq!(Source::Pool.as_str(), "pool");
        assert_eq!(Source::Cloud.as_str(), "api");
    }

    #[test]
    fn leader_urls_bracket_ipv6() {
        assert_eq!(leader("a", "10.0.0.5").url(10269), "https://10.0.0.5:10269");
        assert_eq!(leader("b", "fd00::6").url(10269), "https://[fd00::6]:10269");
        assert_eq!(
            leader("b", "fd00::6").addr(1),
            "[fd00::6]:1".parse().unwrap()
        );
    }

    #[test]
    fn the_state_follows_add_and_update_and_keeps_itself_on_delete() {
        assert!(PoolState::new("n3", "Pool A", PoolScope::default()).is_err());
        let mut state = PoolState::new("n3", "pool-a", PoolScope::with_defaults([])).unwrap();
        assert_eq!(state.source(), Source::Cloud);
        assert!(!state.seen());
        assert!(
            state
                .pool_scope()
                .contains(&Gvr::new("discovery.k8s.io", "v1", "endpointslices"))
        );

        let first = cm(json!({
            "leaders": "n1/10.0.0.1",
            "enable-leader-election": "true",
            "pool-scoped-metadata": "/v1/services"
        }));
        let change = state.apply(ConfigEvent::Seen(&first));
        assert!(change.leaders && change.source);
        assert_eq!(
            change.removed,
            [Gvr::parse("discovery.k8s.io/v1/endpointslices").unwrap()]
        );
        assert_eq!(state.source(), Source::Pool);
        assert_eq!(state.leaders(), [leader("n1", "10.0.0.1")]);
        assert!(state.seen() && !state.is_leader());

        assert_eq!(
            state.apply(ConfigEvent::Seen(&first)),
            Change::default(),
            "same data"
        );
        assert_eq!(state.apply(ConfigEvent::Deleted), Change::default());
        assert_eq!(
            state.source(),
            Source::Pool,
            "a delete keeps the last state"
        );
        assert_eq!(state.leaders().len(), 1);

        // This node becomes a leader: the cloud, same leader count but a new list.
        let second = cm(json!({
            "leaders": "n3/10.0.0.3",
            "enable-leader-election": "true",
            "pool-scoped-metadata": "/v1/services"
        }));
        let change = state.apply(ConfigEvent::Seen(&second));
        assert!(change.leaders && change.source && change.removed.is_empty());
        assert_eq!(state.source(), Source::Cloud);
        assert!(state.is_leader());

        // An unreadable object changes nothing and says why.
        let change = state.apply(ConfigEvent::Seen(&json!("x")));
        assert!(!change.leaders && change.skipped[0].contains("not a JSON object"));
        assert_eq!(state.leaders(), [leader("n3", "10.0.0.3")]);

        // Another pool's ConfigMap changes nothing.
        let mut other = cm(json!({"leaders": "n9/10.0.0.9", "enable-leader-election": "true"}));
        other["metadata"]["name"] = json!("leader-hub-pool-b");
        let change = state.apply(ConfigEvent::Seen(&other));
        assert!(!change.leaders && change.skipped[0].contains("\"leader-hub-pool-b\" ignored"));
        assert_eq!(state.leaders(), [leader("n3", "10.0.0.3")]);

        // An empty pool-scoped-metadata: nothing is multiplexed any more.
        let change = state.apply(ConfigEvent::Seen(&cm(json!({"leaders": "n3/10.0.0.3"}))));
        assert_eq!(change.removed, [Gvr::parse("/v1/services").unwrap()]);
        assert!(state.pool_scope().is_empty());
    }
}
