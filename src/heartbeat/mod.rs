//! The node heartbeat in edge mode (YurtHub's `pkg/yurthub/healthchecker/cloudapiserver`): the hub
//! answers kubelet's lease requests itself and renews `kube-node-lease/<node>` in the cloud, and
//! that renewal is its health probe of each server (`--heartbeat-mode=lease`, the default in edge
//! mode).
//!
//! - [`lease`]: the Lease object the hub sends (`newLease`), MicroTime stamps, paths, and a
//!   protobuf Lease read as JSON.
//! - [`renew`]: one probe against one server over [`renew::LeaseApi`] (PUT, 409 → GET and
//!   retry, 404 → POST, backoff), and the deleted-Node rule ([`renew::Renewal::NodeGone`]).
//! - [`api`]: [`renew::LeaseApi`] over one server (`Upstream::exchange_with`).
//! - [`kubelet`]: "is kubelet alive", from the time of its last lease request.
//! - [`local`]: the current lease answering kubelet, and when it is written to disk.
//! - [`checker`]: the health checker of lease mode: a rotating renewal per tick, and what
//!   replaces it while kubelet is silent or the renewal is refused; its verdicts go through
//!   the same thresholds as `/readyz` mode ([`crate::health::Backends::judge`]).
//!
//! [`start`] builds them for the hub and starts the checker; the request path asks
//! [`NodeHeartbeat::intercepts`] and [`NodeHeartbeat::answer`].
//!
//! Where tinyhub departs from YurtHub (§1.5): kubelet's lease requests get the newest renewed
//! lease; a lease kubelet creates while none is known is kept; a silent kubelet stops the
//! renewals but not the hub's trust in the servers (YurtHub #420 marks them all unhealthy and
//! pushes every component offline); the lease reaches the disk when more than its renewal
//! stamp changed or every 10 minutes; a deleted Node's lease is not renewed or re-created.

pub(crate) mod api;
pub(crate) mod checker;
pub(crate) mod kubelet;
pub(crate) mod lease;
pub(crate) mod local;
pub(crate) mod renew;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;

use crate::cache::key::{CollectionKey, ObjectKey, View};
use crate::cache::store::Store;
use crate::cache::writer::CacheTx;
use crate::config::Config;
use crate::health::{Backends, Probe};
use crate::names::{Component, Gvr};
use crate::request::{ApiRequest, Verb};
use crate::upstream::Upstream;

use self::api::ServerLeaseApi;
use self::checker::{LeaseChecker, LeaseSink};
use self::kubelet::KubeletLiveness;
use self::local::{KubeletVerb, LocalAnswer, LocalLease};
use self::renew::{LeaseApi, NODE_GONE_AFTER, RenewSettings, Renewer};

/// The component whose lease requests the hub answers.
const KUBELET: &str = "kubelet";
/// The API group of leases.
const LEASE_GROUP: &str = "coordination.k8s.io";

/// What kubelet's request path and the checker share.
#[derive(Debug)]
pub(crate) struct NodeHeartbeat {
    /// The newest lease: the renewals' base and kubelet's answers.
    pub lease: LocalLease,
    /// When kubelet last asked for its lease.
    pub kubelet: KubeletLiveness,
    /// `--kubelet-health-grace-period`.
    pub grace: Duration,
}

impl NodeHeartbeat {
    /// Nothing known yet about `node`'s lease or kubelet.
    pub(crate) fn new(node: &str, grace: Duration) -> NodeHeartbeat {
        NodeHeartbeat {
            lease: LocalLease::new(node),
            kubelet: KubeletLiveness::new(Instant::now()),
            grace,
        }
    }

    /// How the hub answers `req` itself: a kubelet request for leases (any namespace and name,
    /// as YurtHub), by verb. `None` for the rest, and for verbs kubelet never sends to leases
    /// (list, subresources), which go the common way.
    pub(crate) fn intercepts(req: &ApiRequest) -> Option<KubeletVerb> {
        let path = req.resource()?;
        if req.component != KUBELET
            || path.gvr.resource != "leases"
            || path.gvr.group != LEASE_GROUP
            || path.subresource.is_some()
        {
            return None;
        }
        Some(match req.verb {
            Verb::Get => KubeletVerb::Get,
            Verb::Update => KubeletVerb::Update,
            Verb::Patch => KubeletVerb::Patch,
            Verb::Create => KubeletVerb::Create,
            Verb::Delete => KubeletVerb::Delete,
            Verb::DeleteCollection => KubeletVerb::DeleteCollection,
            Verb::Watch => KubeletVerb::Watch,
            Verb::List | Verb::Proxy | Verb::Other => return None,
        })
    }

    /// Answers kubelet's `verb` on `namespace/name` (body: a create's), and notes that kubelet
    /// is alive.
    pub(crate) fn answer(
        &self,
        verb: KubeletVerb,
        namespace: &str,
        name: &str,
        body: &[u8],
    ) -> LocalAnswer {
        self.kubelet.record(Instant::now());
        self.lease.answer(verb, namespace, name, body)
    }
}

/// Starts the lease-mode heartbeat of `config`'s node over `backends`: the checker thread
/// (until `stop` closes), its first round at once from the lease kept in `store` by an
/// earlier run, renewed leases to `cache`, `readyz` while nothing is renewed. The heartbeat
/// it returns answers kubelet's lease requests.
pub(crate) fn start(
    config: &Config,
    backends: &Arc<Backends>,
    upstream: &Arc<Upstream>,
    store: Option<&Store>,
    cache: Option<CacheTx>,
    readyz: Arc<dyn Probe>,
    stop: &Receiver<()>,
) -> std::io::Result<Arc<NodeHeartbeat>> {
    let node = &config.node_name;
    let grace = config.kubelet_health_grace_period;
    let heartbeat = Arc::new(NodeHeartbeat::new(node, grace));
    let servers: Vec<Box<dyn LeaseApi + Send>> = config
        .servers
        .iter()
        .map(|server| {
            Box::new(ServerLeaseApi::new(
                Arc::clone(upstream),
                server.base.clone(),
                node.clone(),
                config.heartbeat.timeout,
            )) as Box<dyn LeaseApi + Send>
        })
        .collect();
    let renewer = Renewer::new(RenewSettings {
        node: node.clone(),
        grace,
        failed_retry: config.heartbeat.failed_retry,
        node_gone_after: NODE_GONE_AFTER,
    });
    let sink = cache.map(|tx| Box::new(tx) as Box<dyn LeaseSink>);
    let mut checker = LeaseChecker::new(
        Arc::clone(backends),
        Arc::clone(&heartbeat),
        servers,
        readyz,
        renewer,
        config.heartbeat,
        sink,
    );
    if let Some(stored) = store.and_then(|store| stored_lease(store, node)) {
        checker.restore(stored, Instant::now());
    }
    checker.spawn(stop.clone())?;
    Ok(heartbeat)
}

/// The node lease kept in the cache by an earlier run, if it is readable and this node's
/// Lease (the check a renewal's answer passes).
fn stored_lease(store: &Store, node: &str) -> Option<Value> {
    let bytes = match store.get(&lease_key(node)) {
        Ok(found) => found?,
        Err(e) => {
            log::warn!("cannot read the node lease kept in the cache: {e}");
            return None;
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(stored) if lease::is_node_lease(&stored, node) => Some(stored),
        _ => {
            log::warn!("the node lease kept in the cache is not this node's Lease; not used");
            None
        }
    }
}

/// Where the node's lease is kept on disk, under kubelet as YurtHub keeps it:
/// `kubelet/leases.v1.coordination.k8s.io/kube-node-lease/<node>`.
pub(crate) fn lease_key(node: &str) -> ObjectKey {
    ObjectKey {
        collection: lease_collection(),
        namespace: Some(lease::LEASE_NAMESPACE.to_owned()),
        name: node.to_owned(),
    }
}

/// The collection of [`lease_key`].
pub(crate) fn lease_collection() -> CollectionKey {
    CollectionKey {
        component: Component::KUBELET,
        gvr: Gvr::new(LEASE_GROUP, "v1", "leases"),
        view: View::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request;

    fn classify(method: &str, path: &str, agent: &str) -> ApiRequest {
        let headers = vec![("User-Agent".to_owned(), agent.to_owned())];
        request::classify(method, path, &headers).expect("a valid request")
    }

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";
    const KUBELET_UA: &str = "kubelet/v1.31.0 (linux/arm) kubernetes/abc";

    #[test]
    fn kubelet_lease_requests_are_answered_by_verb() {
        let cases = [
            ("GET", LEASE, KubeletVerb::Get),
            ("PUT", LEASE, KubeletVerb::Update),
            ("PATCH", LEASE, KubeletVerb::Patch),
            ("DELETE", LEASE, KubeletVerb::Delete),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                KubeletVerb::Create,
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/other/leases?watch=true",
                KubeletVerb::Watch,
            ),
        ];
        for (method, path, verb) in cases {
            let req = classify(method, path, KUBELET_UA);
            assert_eq!(
                NodeHeartbeat::intercepts(&req),
                Some(verb),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn other_components_lists_and_other_kinds_go_the_common_way() {
        let cases = [
            ("GET", LEASE, "kube-proxy/v1.31.0"),
            ("PUT", LEASE, "kubectl/v1.31.0"),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                KUBELET_UA,
            ),
            ("GET", "/api/v1/nodes/edge-1", KUBELET_UA),
            (
                "GET",
                "/apis/example.com/v1/namespaces/a/leases/x",
                KUBELET_UA,
            ),
        ];
        for (method, path, agent) in cases {
            let req = classify(method, path, agent);
            assert_eq!(
                NodeHeartbeat::intercepts(&req),
                None,
                "{method} {path} {agent}"
            );
        }
    }

    #[test]
    fn an_answer_notes_that_kubelet_is_alive() {
        let hb = NodeHeartbeat::new("edge-1", Duration::from_secs(40));
        assert!(hb.kubelet.last_seen().is_none());
        hb.answer(KubeletVerb::Get, lease::LEASE_NAMESPACE, "edge-1", b"");
        assert!(hb.kubelet.last_seen().is_some());
    }

    #[test]
    fn the_lease_is_kept_where_yurthub_keeps_it() {
        let key = lease_key("edge-1");
        assert_eq!(key.collection.component, "kubelet");
        assert_eq!(key.collection.dir_name(), "leases.v1.coordination.k8s.io");
        assert_eq!(key.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(key.name, "edge-1");
    }
}
