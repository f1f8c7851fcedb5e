//! The node's watch caches of the pool-scope resources and who they serve (edge mode): one
//! [`WatchCache`] per resource of the pool-scope set whose kind the hub can index, the
//! run-time set the leader ConfigMap gives, warming, and the one rule of which request a
//! cache serves ([`PoolCaches::servable`]). The request path answers from them
//! (`proxy::pool_local`, a leader's `proxy::multiplexer`); the feeders fill them
//! (`clients::pool_watch`); servicetopology's index reads the Services one
//! (`clients::services_watch`).
//!
//! No I/O, no threads: flags and a lock over a list of names.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{CacheOptions, Resource, WatchCache};
use crate::names::Gvr;
use crate::pool::resources::{self, PoolScope, Resolution};
use crate::request::{Accept, ApiRequest};

/// Watches without `timeoutSeconds` last a random time in this range (seconds), as the
/// apiserver picks for its default (`MinRequestTimeout` 1800 s is YurtHub's upstream; the
/// multiplexer's own cacher serves 300–600); the feeders' watches too, as client-go's
/// reflector picks them, so the watches of many nodes do not all renew at once.
pub(crate) const WATCH_SECONDS: (u64, u64) = (300, 600);
/// How long after start a cache not yet filled answers 429 (its feeder lists at once and
/// retries every heartbeat interval); past it, its kind is forwarded until the cache fills.
const WARMING: Duration = Duration::from_secs(60);

/// The node-local caches of the pool-scope resources, and who they serve.
pub(crate) struct PoolCaches {
    scope: PoolScope,
    /// This hub's multiplexer's User-Agent, whose requests are never served from here.
    own_agent: String,
    /// One cache per member of `scope` the hub knows the kind of, in `scope`'s order.
    caches: Vec<(Gvr, WatchCache)>,
    /// Per cache (same order): whether its resource is pool-scope now (the leader
    /// ConfigMap's `pool-scoped-metadata` replaces the start-up set at run time). An
    /// inactive cache serves nothing and its feeder idles; shared with the feeders.
    active: Box<[Arc<AtomicBool>]>,
    /// The members of the run-time set of a kind the hub cannot cache, already warned about.
    warned: Mutex<Vec<Gvr>>,
    /// Until when a cache not filled yet answers 429 (warming); after it, its requests are
    /// forwarded as before (a feeder that cannot list, e.g. 403 for the hub's identity, must
    /// not leave kube-proxy at 429 for ever).
    warm_by: Instant,
}

impl PoolCaches {
    /// The caches of `scope` for node `node`. A member whose kind and scope the hub does not
    /// know (an extra `--pool-scope-resources` entry: it reads no discovery) gets no cache
    /// and stays forwarded; the caller logs the names returned.
    pub(crate) fn new(
        scope: PoolScope,
        node: &str,
        options: &CacheOptions,
    ) -> (PoolCaches, Vec<String>) {
        let mut caches = Vec::new();
        let mut unknown = Vec::new();
        for gvr in scope.iter() {
            match known_resource(gvr) {
                Some(resource) => {
                    let cache = WatchCache::new(resource, options.clone());
                    super::series::export(&cache);
                    caches.push((gvr.clone(), cache));
                }
                None => unknown.push(gvr.to_string()),
            }
        }
        let active = caches
            .iter()
            .map(|_| Arc::new(AtomicBool::new(true)))
            .collect();
        let pool = PoolCaches {
            scope,
            own_agent: resources::user_agent(node),
            caches,
            active,
            warned: Mutex::new(Vec::new()),
            warm_by: Instant::now() + WARMING,
        };
        (pool, unknown)
    }

    /// Whether a cache not filled yet still counts as warming (429) rather than failed
    /// (forwarded): for a while after start, and as long as a feeder's first list waits for
    /// the pool's leader ([`WatchCache::awaits_leader`], bounded by the feeder).
    pub(crate) fn warming(&self) -> bool {
        Instant::now() < self.warm_by || self.caches().any(WatchCache::awaits_leader)
    }

    /// The caches, for their feeders.
    pub(crate) fn caches(&self) -> impl Iterator<Item = &WatchCache> {
        self.caches.iter().map(|(_, cache)| cache)
    }

    /// The Services cache, when Services are in the pool scope (servicetopology's index
    /// reads it instead of a watch of its own).
    pub(crate) fn services(&self) -> Option<&WatchCache> {
        self.caches
            .iter()
            .find(|(g, _)| g.is("", "v1", "services"))
            .map(|(_, cache)| cache)
    }

    /// The multiplexer's User-Agent, which the feeders send.
    pub(crate) fn own_agent(&self) -> &str {
        &self.own_agent
    }

    /// The pool-scope set these caches serve (what a leader's multiplexer port admits).
    pub(crate) fn scope(&self) -> &PoolScope {
        &self.scope
    }

    /// The cache of `gvr`, if the hub keeps one (a member of unknown kind has none, nor one
    /// the run-time set left out).
    #[cfg(test)]
    pub(crate) fn cache_of(&self, gvr: &Gvr) -> Option<&WatchCache> {
        self.active_cache(gvr)
    }

    /// The active cache of `gvr`: the one lookup over the caches and their run-time flags.
    fn active_cache(&self, gvr: &Gvr) -> Option<&WatchCache> {
        self.caches
            .iter()
            .zip(&self.active)
            .find(|((g, _), on)| g == gvr && on.load(Ordering::Acquire))
            .map(|((_, cache), _)| cache)
    }

    /// The one rule of what a cache serves, to local clients ([`PoolCaches::cache_for`]) and
    /// to a leader's followers (`proxy::multiplexer::admit`): the active cache of `gvr` for
    /// a client taking `accept`, or why not. A cache not filled yet is returned: each caller
    /// has its own warming rule for it.
    pub(crate) fn servable(&self, gvr: &Gvr, accept: Accept) -> Result<&WatchCache, Unserved> {
        // JSON only: the cache holds JSON, and the hub converts to nothing else.
        if !matches!(accept, Accept::Json | Accept::JsonOrProtobuf) {
            return Err(Unserved::NotJson);
        }
        let cache = self.active_cache(gvr).ok_or(Unserved::NotKept)?;
        // A filled cache whose feed fails while the cloud answers holds frozen data; one
        // whose list was too large holds none and is not tried again for minutes. One never
        // filled and failing follows the warming rule.
        if cache.list_paused() {
            return Err(Unserved::TooLarge);
        }
        if cache.feeder_failing() && cache.is_ready() {
            return Err(Unserved::Failing);
        }
        Ok(cache)
    }

    /// Whether the cache at position `i` of [`PoolCaches::caches`] is in the run-time set,
    /// shared with its feeder (which idles while it is not).
    pub(crate) fn active_flag(&self, i: usize) -> Arc<AtomicBool> {
        self.active.get(i).cloned().unwrap_or_default()
    }

    /// The leader ConfigMap's set replaces the start-up one: a cache whose resource left it
    /// serves nothing more (its lists and watches are forwarded; its feeder drops its
    /// objects), one that is back serves again once its feeder has listed. Members the hub
    /// cannot cache are forwarded; each is returned once, for the caller to warn about.
    /// (Kinds the hub can cache are always in the start-up set: the defaults.)
    pub(crate) fn set_scope(&self, scope: &PoolScope) -> Vec<String> {
        for ((gvr, _), on) in self.caches.iter().zip(&self.active) {
            on.store(scope.contains(gvr), Ordering::Release);
        }
        // A plain Vec of names: a panicking holder cannot leave it torn.
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let mut news = Vec::new();
        for gvr in scope.iter() {
            if known_resource(gvr).is_none() && !warned.contains(gvr) {
                warned.push(gvr.clone());
                news.push(gvr.to_string());
            }
        }
        news
    }

    /// The cache that serves `req` (whose User-Agent header is `user_agent`), if it is one
    /// to serve locally.
    pub(crate) fn cache_for(&self, req: &ApiRequest, user_agent: &str) -> Option<&WatchCache> {
        if self.scope.resolve(req, user_agent, &self.own_agent) != Resolution::Local {
            return None;
        }
        let r = req.resource()?;
        // Frozen or not JSON: forwarded, live, with the client's own credentials.
        self.servable(&r.gvr, req.accept).ok()
    }
}

/// Why [`PoolCaches::servable`] serves a request from no cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unserved {
    /// The hub keeps no cache of the resource, or the run-time set left it out.
    NotKept,
    /// The client takes no JSON.
    NotJson,
    /// The cache's feed fails while the cloud answers (its data is frozen): read it from
    /// the cloud until the feeder recovers.
    Failing,
    /// The resource's list was too large for the cache (it holds none, and is not listed
    /// again for minutes).
    TooLarge,
}

/// The resources the hub can cache without discovery.
fn known_resource(gvr: &Gvr) -> Option<Resource> {
    match (&*gvr.group, &*gvr.version, &*gvr.resource) {
        ("", "v1", "services") => Some(Resource::services()),
        ("discovery.k8s.io", "v1", "endpointslices") => Some(Resource::endpointslices()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::classify;

    fn req(url: &str, ua: &str, accept: &str) -> ApiRequest {
        let headers = [
            ("User-Agent".to_owned(), ua.to_owned()),
            ("Accept".to_owned(), accept.to_owned()),
        ];
        classify("GET", url, &headers).unwrap()
    }

    fn pool() -> PoolCaches {
        let scope = PoolScope::with_defaults([Gvr::parse("apps/v1/deployments").unwrap()]);
        let (pool, unknown) = PoolCaches::new(scope, "edge-1", &CacheOptions::default());
        assert_eq!(unknown, ["apps/v1/deployments"]);
        pool
    }

    #[test]
    fn caches_warm_past_the_start_up_window_while_a_feeder_awaits_its_leader() {
        let mut pool = pool();
        assert!(pool.warming());
        pool.warm_by = Instant::now();
        assert!(!pool.warming(), "past the window: forwarded");
        let slices = pool.caches().nth(1).unwrap().clone();
        slices.set_awaits_leader(true);
        assert!(pool.warming(), "a feeder waits for its leader: still 429");
        slices.set_awaits_leader(false);
        assert!(!pool.warming());
    }

    #[test]
    fn local_clients_are_served_and_the_multiplexer_and_protobuf_only_clients_are_not() {
        let pool = pool();
        let json = "application/json";
        let kp = "kube-proxy/v1.30.0";
        let found = |url: &str, ua: &str, accept: &str| {
            pool.cache_for(&req(url, ua, accept), ua)
                .map(|c| c.resource().gvr.resource.clone())
        };
        assert_eq!(
            found("/api/v1/services", kp, json).as_deref(),
            Some("services")
        );
        assert_eq!(
            found(
                "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices?watch=1",
                "coredns",
                "application/vnd.kubernetes.protobuf, application/json"
            )
            .as_deref(),
            Some("endpointslices")
        );
        // client-go's protobuf content type (kube-proxy's default) takes JSON too.
        assert_eq!(
            found(
                "/api/v1/services?watch=1",
                kp,
                "application/vnd.kubernetes.protobuf, */*"
            )
            .as_deref(),
            Some("services")
        );
        assert_eq!(
            found("/api/v1/services", "multiplexer-proxy-edge-1", json),
            None
        );
        assert_eq!(
            found(
                "/api/v1/services",
                kp,
                "application/vnd.kubernetes.protobuf"
            ),
            None
        );
        assert_eq!(found("/api/v1/namespaces/a/services/b", kp, json), None);
        assert_eq!(found("/apis/apps/v1/deployments", kp, json), None);
        assert_eq!(found("/api/v1/pods", kp, json), None);
    }
}
