//! Which components are cache agents: YurtHub's defaults, `--cache-agents`, and the
//! `cache_agents` key of the ConfigMap `kube-system/yurt-hub-cfg`, applied at run time.
//!
//! This module holds the set and parses the ConfigMap; `clients/agents_watch.rs` keeps it in
//! step with the cloud.

use std::sync::{Arc, RwLock};

/// Components cached by default (README.md, "What it caches and what it answers offline").
pub(crate) const DEFAULT_AGENTS: &[&str] = &[
    "kubelet",
    "kube-proxy",
    "flanneld",
    "coredns",
    "raven-agent-ds",
    "yurttunnel-agent",
    "yurthub",
    "tinyhub",
];

/// The ConfigMap whose `cache_agents` key adds agents at run time.
pub(crate) const CONFIG_NAMESPACE: &str = "kube-system";
/// Name of that ConfigMap.
pub(crate) const CONFIG_NAME: &str = "yurt-hub-cfg";
/// The key read from it.
pub(crate) const CONFIG_KEY: &str = "cache_agents";

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct AgentList {
    names: Vec<String>,
    all: bool,
}

impl AgentList {
    fn parse(text: &str) -> AgentList {
        let mut list = AgentList::default();
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if name == "*" {
                list.all = true;
            } else {
                list.names.push(name.to_ascii_lowercase());
            }
        }
        list
    }

    fn contains(&self, component: &str) -> bool {
        self.all || self.names.iter().any(|n| n == component)
    }
}

/// The current set of cache agents.
#[derive(Debug)]
pub(crate) struct CacheAgents {
    fixed: AgentList,
    dynamic: RwLock<Arc<AgentList>>,
}

impl CacheAgents {
    /// The defaults plus `--cache-agents`.
    pub(crate) fn new(extra: &[String]) -> CacheAgents {
        let mut fixed = AgentList::parse(&extra.join(","));
        fixed
            .names
            .extend(DEFAULT_AGENTS.iter().map(|s| (*s).to_owned()));
        CacheAgents {
            fixed,
            dynamic: RwLock::new(Arc::new(AgentList::default())),
        }
    }

    /// True when `component`'s responses are cached.
    pub(crate) fn is_agent(&self, component: &str) -> bool {
        if self.fixed.contains(component) {
            return true;
        }
        let dynamic = Arc::clone(&self.dynamic.read().unwrap_or_else(|p| p.into_inner()));
        dynamic.contains(component)
    }

    /// Applies the `cache_agents` value of `yurt-hub-cfg` (None: the ConfigMap or key is gone).
    pub(crate) fn set_from_config(&self, value: Option<&str>) {
        let list = AgentList::parse(value.unwrap_or(""));
        let mut current = self.dynamic.write().unwrap_or_else(|p| p.into_inner());
        if **current != list {
            log::info!(
                "cache agents from {CONFIG_NAMESPACE}/{CONFIG_NAME}: {:?}{}",
                list.names,
                if list.all {
                    " and every component (*)"
                } else {
                    ""
                }
            );
            *current = Arc::new(list);
        }
    }
}

/// The `cache_agents` value of a ConfigMap object, when it has one.
pub(crate) fn cache_agents_of(configmap: &serde_json::Value) -> Option<&str> {
    configmap.get("data")?.get(CONFIG_KEY)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_flags_and_config() {
        let agents = CacheAgents::new(&["Kubectl".into()]);
        assert!(agents.is_agent("kubelet"));
        assert!(agents.is_agent("kubectl"));
        assert!(!agents.is_agent("curl"));
        agents.set_from_config(Some("curl, nginx-ingress"));
        assert!(agents.is_agent("curl"));
        assert!(agents.is_agent("nginx-ingress"));
        agents.set_from_config(Some("*"));
        assert!(agents.is_agent("anything"));
        agents.set_from_config(None);
        assert!(!agents.is_agent("anything"));
        assert!(agents.is_agent("kube-proxy"), "defaults stay");
    }

    #[test]
    fn star_flag_caches_everything() {
        assert!(CacheAgents::new(&["*".into()]).is_agent("whatever"));
    }

    #[test]
    fn reads_the_configmap_key() {
        let cm = serde_json::json!({"data": {"cache_agents": "a,b"}});
        assert_eq!(cache_agents_of(&cm), Some("a,b"));
        assert_eq!(cache_agents_of(&serde_json::json!({"data": {}})), None);
    }
}
