//! Which resources are pool-scope (YurtHub's `cmd/yurthub/app/options/pool_scope_metadata.go`):
//! their set, parsed from
//! `--pool-scope-resources` and from the leader ConfigMap's `pool-scoped-metadata`, and the
//! decision whether one request is a pool-scope list or watch. Pure: no I/O.
//!
//! Design decisions:
//! - The set starts as YurtHub's defaults plus the flag's entries (the flag *appends*, as
//!   YurtHub's `Set` does: the defaults cannot be removed by flag); once the pool's
//!   ConfigMap is seen its value *replaces* the set, and an empty value means no
//!   multiplexing at all ([`PoolScope::from_metadata`]).
//! - A pool-scope request is any list or watch of a member, from any client, in any
//!   namespace (YurtHub's `ResolveRequestForPoolScopeMetadata` reads only verb and GVR).
//!   The hub's own multiplexer sends its requests with the User-Agent
//!   `multiplexer-proxy-<node>`: those must go out (to a leader or the cloud), never back
//!   into the local watch cache, or the cache would feed on itself ([`Resolution`]).
//! - The set is a sorted `Vec`: a handful of entries, where a binary search beats a hash
//!   set in both memory and time. One [`Gvr`] costs three strings (36 bytes on a 32-bit
//!   router, 72 on 64-bit) plus its text, about 40 bytes.

use crate::names::{Gvr, GvrError};
use crate::request::{ApiRequest, Verb};

/// A hub's multiplexer's User-Agent starts with this, then its node's name.
pub(crate) const USER_AGENT_PREFIX: &str = "multiplexer-proxy-";

/// The User-Agent of `node`'s multiplexer, `multiplexer-proxy-<node>`: what its requests to
/// a leader (and through its own proxy) carry, and also its cache component on disk.
pub(crate) fn user_agent(node: &str) -> String {
    format!("{USER_AGENT_PREFIX}{node}")
}

/// YurtHub's default pool-scope resources (`options.go`), in the flag format.
pub(crate) const DEFAULT_POOL_SCOPE: [&str; 2] =
    ["/v1/services", "discovery.k8s.io/v1/endpointslices"];

/// The defaults as [`Gvr`]s.
pub(crate) fn defaults() -> Vec<Gvr> {
    DEFAULT_POOL_SCOPE
        .iter()
        // Constant, valid entries: checked by a test.
        .filter_map(|entry| Gvr::parse(entry).ok())
        .collect()
}

/// The set of pool-scope resources, sorted, without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PoolScope {
    gvrs: Vec<Gvr>,
}

/// What the hub does with one request, as YurtHub's `ResolveRequestForPoolScopeMetadata`
/// decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Not a list or watch of a pool-scope resource: the ordinary request path.
    NotPoolScope,
    /// A pool-scope list or watch from a client: served by the local watch cache.
    Local,
    /// A pool-scope list or watch from this hub's own multiplexer: sent out (to a leader or
    /// the cloud), never back into the local watch cache.
    Forward,
}

impl PoolScope {
    /// The set of `gvrs`, sorted, duplicates dropped.
    pub(crate) fn new(gvrs: impl IntoIterator<Item = Gvr>) -> PoolScope {
        let mut gvrs: Vec<Gvr> = gvrs.into_iter().collect();
        gvrs.sort();
        gvrs.dedup();
        gvrs.shrink_to_fit();
        PoolScope { gvrs }
    }

    /// The start-up set: the defaults plus `--pool-scope-resources` (appended, as in YurtHub).
    pub(crate) fn with_defaults(extra: impl IntoIterator<Item = Gvr>) -> PoolScope {
        PoolScope::new(defaults().into_iter().chain(extra))
    }

    /// Reads `--pool-scope-resources` values: each a comma list of entries, blanks dropped.
    /// The first bad entry is the error, naming it.
    pub(crate) fn parse_flag_values<'a>(
        values: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<Gvr>, GvrError> {
        values
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(Gvr::parse)
            .collect()
    }

    /// Reads a ConfigMap's `pool-scoped-metadata` value (yurt-manager writes it sorted and
    /// comma-separated): the set, and why each entry that is not a GVR was skipped (YurtHub
    /// skips them silently; the caller logs them). An empty value is the empty set: no
    /// multiplexing at all.
    pub(crate) fn from_metadata(value: &str) -> (PoolScope, Vec<String>) {
        let mut skipped = Vec::new();
        let mut gvrs = Vec::new();
        for entry in value.split(',').filter(|e| !e.trim().is_empty()) {
            match Gvr::parse(entry) {
                Ok(gvr) => gvrs.push(gvr),
                Err(why) => skipped.push(format!("pool-scoped-metadata entry skipped: {why}")),
            }
        }
        (PoolScope::new(gvrs), skipped)
    }

    /// The set in the ConfigMap's format: sorted, comma-separated.
    pub(crate) fn to_metadata(&self) -> String {
        let entries: Vec<String> = self.gvrs.iter().map(Gvr::to_string).collect();
        entries.join(",")
    }

    /// The members, sorted.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Gvr> {
        self.gvrs.iter()
    }

    /// No pool-scope resource: nothing is multiplexed.
    pub(crate) fn is_empty(&self) -> bool {
        self.gvrs.is_empty()
    }

    /// Whether `gvr` is a member.
    pub(crate) fn contains(&self, gvr: &Gvr) -> bool {
        self.find(gvr).is_some()
    }

    /// The member `gvr`, by binary search.
    fn find(&self, gvr: &Gvr) -> Option<&Gvr> {
        self.gvrs.binary_search(gvr).ok().map(|i| &self.gvrs[i])
    }

    /// Members of `self` that `next` no longer has: their watch caches are to be dropped.
    pub(crate) fn removed_in(&self, next: &PoolScope) -> Vec<Gvr> {
        self.gvrs
            .iter()
            .filter(|g| !next.contains(g))
            .cloned()
            .collect()
    }

    /// The member `req` lists or watches, if it is a pool-scope request: a list or watch of
    /// the collection (any namespace) or a watch of one object, never a subresource.
    pub(crate) fn target_of<'a>(&'a self, req: &ApiRequest) -> Option<&'a Gvr> {
        if !matches!(req.verb, Verb::List | Verb::Watch) {
            return None;
        }
        let r = req.resource()?;
        if r.subresource.is_some() || r.extra_path {
            return None;
        }
        self.find(&r.gvr)
    }

    /// Whether `req` is a list or watch of a pool-scope resource, whoever sent it.
    pub(crate) fn is_pool_scope(&self, req: &ApiRequest) -> bool {
        self.target_of(req).is_some()
    }

    /// What to do with `req`, whose `User-Agent` header is `user_agent` ("" when absent):
    /// `own_agent` is this hub's multiplexer's ([`user_agent`]). The comparison is
    /// of the whole header, exactly, as YurtHub compares it (`req.UserAgent() ==`): another
    /// node's multiplexer, or ours with a version suffix, is a client like any other.
    pub(crate) fn resolve(
        &self,
        req: &ApiRequest,
        user_agent: &str,
        own_agent: &str,
    ) -> Resolution {
        if !self.is_pool_scope(req) {
            Resolution::NotPoolScope
        } else if user_agent == own_agent {
            Resolution::Forward
        } else {
            Resolution::Local
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_node() {
        assert_eq!(user_agent("edge-1"), "multiplexer-proxy-edge-1");
        // The filters never touch what a multiplexer reads (filters::is_unfiltered).
        assert!(user_agent("edge-1").starts_with(USER_AGENT_PREFIX));
    }
    use crate::request::classify;

    fn gvr(entry: &str) -> Gvr {
        Gvr::parse(entry).unwrap()
    }

    fn req(method: &str, url: &str, ua: &str) -> ApiRequest {
        let headers = [("User-Agent".to_owned(), ua.to_owned())];
        classify(method, url, &headers).unwrap()
    }

    #[test]
    fn the_flag_format_reads_group_version_resource_with_an_empty_core_group() {
        let g = gvr("/v1/services");
        assert_eq!(
            (&*g.group, &*g.version, &*g.resource),
            ("", "v1", "services")
        );
        let g = gvr(" discovery.k8s.io / v1 / endpointslices ");
        assert_eq!(g.to_string(), "discovery.k8s.io/v1/endpointslices");
        for (bad, why) in [
            ("v1/services", "is not group/version/resource"),
            ("a/b/c/d", "is not group/version/resource"),
            ("services", "is not group/version/resource"),
            ("Apps/v1/deployments", "is not an API group"),
            ("/V1/services", "is not an API version"),
            ("//services", "is not an API version"),
            ("/v1/", "is not a resource name"),
            ("/v1/Services", "is not a resource name"),
            ("/v1/.x", "is not a resource name"),
        ] {
            let e = Gvr::parse(bad).expect_err(bad).to_string();
            assert!(
                e.contains(why) && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_flag_appends_to_the_defaults_which_it_cannot_remove() {
        assert_eq!(
            defaults().iter().map(Gvr::to_string).collect::<Vec<_>>(),
            DEFAULT_POOL_SCOPE
        );
        let extra =
            PoolScope::parse_flag_values(["apps/v1/deployments, ,/v1/services", "/v1/nodes"])
                .unwrap();
        assert_eq!(extra.len(), 3);
        let scope = PoolScope::with_defaults(extra);
        assert_eq!(
            scope.to_metadata(),
            "/v1/nodes,/v1/services,apps/v1/deployments,discovery.k8s.io/v1/endpointslices",
            "sorted, the repeated default once"
        );
        let e = PoolScope::parse_flag_values(["/v1/nodes,apps/deployments"]).unwrap_err();
        assert_eq!(e, GvrError::NotThreeParts("apps/deployments".into()));
        assert!(e.to_string().contains("\"apps/deployments\""), "{e}");
    }

    #[test]
    fn the_configmap_value_replaces_the_set_and_an_empty_one_empties_it() {
        let (scope, skipped) =
            PoolScope::from_metadata("/v1/services,apps/v1/deployments,bad,/v1/X");
        assert_eq!(scope.to_metadata(), "/v1/services,apps/v1/deployments");
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].contains("\"bad\""), "{skipped:?}");
        assert!(!scope.contains(&gvr("discovery.k8s.io/v1/endpointslices")));

        let (empty, skipped) = PoolScope::from_metadata("");
        assert!(empty.is_empty() && skipped.is_empty());
        let get = req("GET", "/api/v1/services", "kube-proxy/v1.30");
        assert_eq!(
            empty.resolve(&get, "kube-proxy/v1.30", "multiplexer-proxy-n1"),
            Resolution::NotPoolScope
        );

        let before = PoolScope::with_defaults([]);
        let removed = before.removed_in(&scope);
        assert_eq!(removed, [gvr("discovery.k8s.io/v1/endpointslices")]);
    }

    #[test]
    fn lists_and_watches_of_members_from_any_client_are_pool_scope() {
        let scope = PoolScope::with_defaults([]);
        for (method, url) in [
            ("GET", "/api/v1/services"),
            ("GET", "/api/v1/services?watch=true&resourceVersion=5"),
            ("GET", "/api/v1/watch/services"),
            ("GET", "/api/v1/namespaces/default/services"),
            (
                "GET",
                "/api/v1/watch/namespaces/default/services/kubernetes",
            ),
            (
                "GET",
                "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=a%3Db",
            ),
            ("HEAD", "/apis/discovery.k8s.io/v1/endpointslices"),
        ] {
            for ua in [
                "kube-proxy/v1.30",
                "coredns",
                "kubelet/v1.30 (linux/arm)",
                "",
            ] {
                assert!(
                    scope.is_pool_scope(&req(method, url, ua)),
                    "{method} {url} {ua}"
                );
            }
        }
        for (method, url) in [
            ("GET", "/api/v1/namespaces/default/services/kubernetes"),
            (
                "GET",
                "/api/v1/namespaces/default/services/kubernetes/status",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/services/kubernetes/status?watch=true",
            ),
            (
                "GET",
                "/api/v1/namespaces/default/services/kubernetes/proxy/x",
            ),
            ("POST", "/api/v1/namespaces/default/services"),
            ("DELETE", "/api/v1/namespaces/default/services"),
            ("GET", "/api/v1/pods"),
            ("GET", "/apis/discovery.k8s.io/v1beta1/endpointslices"),
            ("GET", "/apis/other.k8s.io/v1/endpointslices"),
            ("GET", "/api/v1"),
            ("GET", "/version"),
        ] {
            assert!(
                !scope.is_pool_scope(&req(method, url, "kube-proxy")),
                "{method} {url}"
            );
        }
    }

    #[test]
    fn only_this_hubs_own_multiplexer_is_forwarded() {
        let scope = PoolScope::with_defaults([]);
        let own = "multiplexer-proxy-edge-1";
        let list = |ua: &str| scope.resolve(&req("GET", "/api/v1/services", ua), ua, own);
        assert_eq!(list(own), Resolution::Forward);
        for other in [
            "kube-proxy/v1.30",
            "multiplexer-proxy-edge-2",
            "multiplexer-proxy-edge-1/v1",
            "multiplexer-proxy-edge-10",
            "Multiplexer-Proxy-edge-1",
            "",
        ] {
            assert_eq!(list(other), Resolution::Local, "{other:?}");
        }
        let get = req("GET", "/api/v1/namespaces/a/services/b", own);
        assert_eq!(scope.resolve(&get, own, own), Resolution::NotPoolScope);
    }
}
