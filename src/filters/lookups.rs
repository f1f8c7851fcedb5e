//! [`Lookups`] over the cloud: GETs of a Service, this Node and a NodePool by name through
//! the hub's own credentials, each answer (a failure included) memoised for a short while, so
//! a list of a thousand EndpointSlices costs one GET per Service, and an unreachable cloud
//! costs one timeout per key and TTL rather than one per object.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Lookups;
use crate::route::{Deadline, Identity};
use crate::upstream::{Outgoing, Upstream};

/// How long an answer is reused.
const TTL: Duration = Duration::from_secs(30);
/// Time allowed for one lookup: the client's answer waits for it.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(5);
/// Largest object read.
const MAX_OBJECT: u64 = 1024 * 1024;
/// Memoised entries kept at most; the oldest are forgotten first past this.
const MAX_ENTRIES: usize = 1024;

/// Fetches one object by path: Ok(None) on 404, Err on anything else that is not a 200.
pub(crate) trait FetchObject: Send + Sync {
    /// GET `path` as the hub.
    fn fetch(&self, path: &str) -> Result<Option<Value>, String>;
}

impl FetchObject for Upstream {
    fn fetch(&self, path: &str) -> Result<Option<Value>, String> {
        let headers = [(
            "User-Agent".to_owned(),
            format!("tinyhub/{}", env!("CARGO_PKG_VERSION")),
        )];
        let mut answer = self
            .send(Outgoing {
                method: "GET",
                path_and_query: path,
                headers: &headers,
                accept: Some("application/json"),
                body: None,
                deadline: Deadline::Bounded(LOOKUP_DEADLINE),
                identity: Identity::Hub,
            })
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        (&mut answer.body)
            .take(MAX_OBJECT)
            .read_to_end(&mut body)
            .map_err(|e| e.to_string())?;
        match answer.status {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| e.to_string()),
            404 => Ok(None),
            status => Err(format!("status {status}")),
        }
    }
}

/// A memoised answer.
#[derive(Clone)]
struct Entry {
    at: Instant,
    /// None: not found, or the lookup failed.
    value: Option<Arc<Value>>,
}

/// [`Lookups`] through the cloud, memoised.
pub(crate) struct CloudLookups {
    fetcher: Arc<dyn FetchObject>,
    node_name: String,
    memo: Mutex<HashMap<String, Entry>>,
}

impl CloudLookups {
    /// Lookups for node `node_name` through `fetcher` (the [`Upstream`]).
    pub(crate) fn new(fetcher: Arc<dyn FetchObject>, node_name: String) -> CloudLookups {
        CloudLookups {
            fetcher,
            node_name,
            memo: Mutex::new(HashMap::new()),
        }
    }

    /// The object at `path`, from the memo when fresh; None when absent or unreachable.
    fn get(&self, path: &str) -> Option<Arc<Value>> {
        let now = Instant::now();
        if let Some(entry) = self.lock().get(path)
            && now.duration_since(entry.at) < TTL
        {
            return entry.value.clone();
        }
        // Fetched without the lock: other lookups need not wait for this one's cloud.
        let value = match self.fetcher.fetch(path) {
            Ok(value) => value.map(Arc::new),
            Err(e) => {
                log::info!("filter lookup of {path} failed: {e}");
                None
            }
        };
        let mut memo = self.lock();
        if memo.len() >= MAX_ENTRIES {
            memo.retain(|_, e| now.duration_since(e.at) < TTL);
            if memo.len() >= MAX_ENTRIES {
                memo.clear();
            }
        }
        memo.insert(
            path.to_owned(),
            Entry {
                at: now,
                value: value.clone(),
            },
        );
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // The map is valid after any panic elsewhere (inserts are whole): keep using it.
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Lookups for CloudLookups {
    fn service_topology(&self, namespace: &str, service: &str) -> Option<Option<String>> {
        let svc = self.get(&format!(
            "/api/v1/namespaces/{namespace}/services/{service}"
        ))?;
        Some(super::annotation(&svc, super::servicetopology::TOPOLOGY_ANNOTATION).map(str::to_owned))
    }

    fn node_pool(&self) -> Option<String> {
        let node = self.get(&format!("/api/v1/nodes/{}", self.node_name))?;
        node.get("metadata")?
            .get("labels")?
            .get("apps.openyurt.io/nodepool")?
            .as_str()
            .map(str::to_owned)
    }

    fn pool_members(&self, pool: &str) -> Option<Vec<String>> {
        let pool = self.get(&format!("/apis/apps.openyurt.io/v1beta2/nodepools/{pool}"))?;
        let nodes = pool.get("status")?.get("nodes")?.as_array()?;
        Some(
            nodes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use serde_json::json;

    use super::*;

    struct Canned {
        calls: AtomicU32,
    }

    impl FetchObject for Canned {
        fn fetch(&self, path: &str) -> Result<Option<Value>, String> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match path {
                "/api/v1/namespaces/default/services/web" => Ok(Some(json!({
                    "metadata": {"annotations": {"openyurt.io/topologyKeys": "openyurt.io/nodepool"}}
                }))),
                "/api/v1/namespaces/default/services/plain" => Ok(Some(json!({"metadata": {}}))),
                "/api/v1/nodes/node-a" => Ok(Some(json!({
                    "metadata": {"labels": {"apps.openyurt.io/nodepool": "hangzhou"}}
                }))),
                "/apis/apps.openyurt.io/v1beta2/nodepools/hangzhou" => Ok(Some(json!({
                    "status": {"nodes": ["node-a", "node-b"]}
                }))),
                "/api/v1/namespaces/default/services/down" => Err("unreachable".into()),
                _ => Ok(None),
            }
        }
    }

    fn lookups() -> (Arc<Canned>, CloudLookups) {
        let canned = Arc::new(Canned {
            calls: AtomicU32::new(0),
        });
        let lookups = CloudLookups::new(canned.clone(), "node-a".into());
        (canned, lookups)
    }

    #[test]
    fn answers_what_the_cloud_holds() {
        let (_, l) = lookups();
        assert_eq!(
            l.service_topology("default", "web"),
            Some(Some("openyurt.io/nodepool".into()))
        );
        assert_eq!(l.service_topology("default", "plain"), Some(None));
        assert_eq!(l.service_topology("default", "gone"), None);
        assert_eq!(l.service_topology("default", "down"), None);
        assert_eq!(l.node_pool(), Some("hangzhou".into()));
        assert_eq!(
            l.pool_members("hangzhou"),
            Some(vec!["node-a".into(), "node-b".into()])
        );
        assert_eq!(l.pool_members("nowhere"), None);
    }

    #[test]
    fn answers_and_failures_are_memoised() {
        let (canned, l) = lookups();
        for _ in 0..5 {
            l.service_topology("default", "web");
            l.service_topology("default", "down");
        }
        assert_eq!(canned.calls.load(Ordering::Relaxed), 2);
    }
}
