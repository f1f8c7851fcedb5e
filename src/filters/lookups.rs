//! [`Lookups`] over the cloud: GETs of a Service, this Node and a NodePool by name through
//! the hub's own credentials, each answer (a failure included) memoised for a short while, so
//! a list of a thousand EndpointSlices costs one GET per Service, and an unreachable cloud
//! costs one timeout per key and TTL rather than one per object. yurt-manager's
//! `openyurt.io/update-trigger`, patched on the endpoints after a topology change, makes every
//! answer remembered before it stale, so the event that carries it is filtered with the new
//! annotation or members.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Lookups;
use super::topology_index::{TopologyIndex, topology_of};
use crate::cloud_error::UpstreamError;

/// How long an answer is reused.
const TTL: Duration = Duration::from_secs(30);
/// Time allowed for one lookup: the client's answer waits for it.
pub(crate) const LOOKUP_DEADLINE: Duration = Duration::from_secs(5);
/// Largest object a lookup reads.
pub(crate) const MAX_OBJECT: u64 = 1024 * 1024;
/// Memoised entries kept at most; the oldest are forgotten first past this.
const MAX_ENTRIES: usize = 1024;

/// The path of Service `namespace/service`.
fn service_path(namespace: &str, service: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/services/{service}")
}

/// Fetches one object by path: Ok(None) on 404, Err on anything else that is not a 200.
/// The cloud's is `clients`' (a GET as the hub, like the hub's other own requests).
pub(crate) trait FetchObject: Send + Sync {
    /// GET `path` as the hub.
    fn fetch(&self, path: &str) -> Result<Option<Value>, FetchError>;
}

/// Why a lookup brought no object. Whatever the origin, the filters go on without it (a
/// Service's topology unknown, the node in no pool) until the memo's [`TTL`] ends; the log
/// line says which.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// No answer from the cloud: unreachable, too slow, or no credentials yet.
    NoAnswer(UpstreamError),
    /// The cloud answered with this status, neither 200 nor 404.
    Status(u16),
    /// The answer's body broke off.
    Read(io::Error),
    /// The answer is not JSON.
    Json(serde_json::Error),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::NoAnswer(e) => e.fmt(f),
            FetchError::Status(status) => write!(f, "the cloud answered {status}"),
            FetchError::Read(e) => e.fmt(f),
            FetchError::Json(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FetchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FetchError::NoAnswer(e) => Some(e),
            FetchError::Status(_) => None,
            FetchError::Read(e) => Some(e),
            FetchError::Json(e) => Some(e),
        }
    }
}

/// A memoised answer.
#[derive(Clone)]
struct Entry {
    at: Instant,
    /// Insertion order, for forgetting the oldest (instants may tie).
    seq: u64,
    /// None: not found, or the lookup failed.
    value: Option<Arc<Value>>,
}

/// [`Lookups`] through the cloud, memoised.
pub(crate) struct CloudLookups {
    fetcher: Arc<dyn FetchObject>,
    node_name: String,
    memo: Mutex<Memo>,
    /// The services watch's annotations; a Service is looked up alone only while it has none.
    services: Option<Arc<TopologyIndex>>,
}

/// The remembered answers, and what makes them stale besides their age.
#[derive(Default)]
struct Memo {
    entries: HashMap<String, Entry>,
    /// The newest update trigger seen (unix seconds).
    newest_trigger: i64,
    /// The Services read again for `newest_trigger` (several may change within a second).
    refreshed: std::collections::HashSet<String>,
    /// When the last new trigger was seen: entries fetched before it are stale.
    stale_before: Option<Instant>,
    /// The next entry's `seq`.
    next_seq: u64,
}

impl Memo {
    /// The entry for `path` when it is neither past [`TTL`] nor older than the newest trigger.
    fn fresh(&self, path: &str, now: Instant) -> Option<&Entry> {
        let entry = self.entries.get(path)?;
        let young = now.duration_since(entry.at) < TTL;
        let after_trigger = self.stale_before.is_none_or(|t| entry.at >= t);
        (young && after_trigger).then_some(entry)
    }

    /// Remembers `entry`, forgetting stale entries, then the oldest, past [`MAX_ENTRIES`].
    fn insert(&mut self, path: &str, mut entry: Entry, now: Instant) {
        entry.seq = self.next_seq;
        self.next_seq += 1;
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(path) {
            self.entries.retain(|_, e| now.duration_since(e.at) < TTL);
        }
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(path) {
            // Only when a 30 s window held over a thousand distinct keys: one scan is cheap
            // next to the cloud round trip that brought this entry.
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.seq)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(path.to_owned(), entry);
    }
}

impl CloudLookups {
    /// Lookups for node `node_name` through `fetcher` (the cloud), Services' topology
    /// from `services` when it has been listed.
    pub(crate) fn new(
        fetcher: Arc<dyn FetchObject>,
        node_name: String,
        services: Option<Arc<TopologyIndex>>,
    ) -> CloudLookups {
        CloudLookups {
            fetcher,
            node_name,
            memo: Mutex::new(Memo::default()),
            services,
        }
    }

    /// The object at `path`, from the memo when fresh; None when absent or unreachable.
    fn get(&self, path: &str) -> Option<Arc<Value>> {
        let now = Instant::now();
        if let Some(entry) = self.lock().fresh(path, now) {
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
        let entry = Entry {
            at: now,
            seq: 0,
            value: value.clone(),
        };
        self.lock().insert(path, entry, now);
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memo> {
        // The map is valid after any panic elsewhere (inserts are whole): keep using it.
        self.memo.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Lookups for CloudLookups {
    fn service_topology(&self, namespace: &str, service: &str) -> Option<Option<String>> {
        if let Some(known) = self
            .services
            .as_ref()
            .and_then(|i| i.get(namespace, service))
        {
            return Some(known);
        }
        let svc = self.get(&service_path(namespace, service))?;
        Some(topology_of(&svc))
    }

    fn node_pool(&self) -> Option<String> {
        let node = self.get(&format!("/api/v1/nodes/{}", self.node_name))?;
        node.get("metadata")?
            .get("labels")?
            .get("apps.openyurt.io/nodepool")?
            .as_str()
            .map(str::to_owned)
    }

    fn saw_update_trigger(&self, namespace: &str, service: &str, trigger: &str) {
        // Only a newer trigger counts: a list carries the old triggers of every Service, and
        // comparing values, not clocks, keeps the node's clock out of it.
        let Ok(trigger) = trigger.trim().parse::<i64>() else {
            return;
        };
        let key = format!("{namespace}/{service}");
        {
            let mut memo = self.lock();
            let seen = trigger < memo.newest_trigger
                || (trigger == memo.newest_trigger && memo.refreshed.contains(&key));
            if seen {
                return;
            }
            memo.stale_before = Some(Instant::now());
        }
        // The services watch may not have brought the change yet: read this Service now.
        if let Some(index) = &self.services {
            let path = service_path(namespace, service);
            match self.fetcher.fetch(&path) {
                Ok(svc) => index.set(key.clone(), svc.as_ref().and_then(topology_of)),
                Err(e) => log::info!("filter lookup of {path} failed: {e}"),
            }
        }
        // Recorded once read, so a client that meets the same mark meanwhile reads too.
        let mut memo = self.lock();
        if trigger > memo.newest_trigger {
            memo.newest_trigger = trigger;
            memo.refreshed.clear();
        }
        if trigger == memo.newest_trigger {
            memo.refreshed.insert(key);
        }
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
        fn fetch(&self, path: &str) -> Result<Option<Value>, FetchError> {
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
                "/api/v1/namespaces/default/services/down" => Err(FetchError::Status(503)),
                _ => Ok(None),
            }
        }
    }

    fn lookups() -> (Arc<Canned>, CloudLookups) {
        let canned = Arc::new(Canned {
            calls: AtomicU32::new(0),
        });
        let lookups = CloudLookups::new(canned.clone(), "node-a".into(), None);
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

    #[test]
    fn a_listed_index_answers_without_a_lookup() {
        let canned = Arc::new(Canned {
            calls: AtomicU32::new(0),
        });
        let index = Arc::new(TopologyIndex::new(Duration::ZERO));
        let l = CloudLookups::new(canned.clone(), "node-a".into(), Some(Arc::clone(&index)));
        // Not listed yet: one by one.
        assert_eq!(
            l.service_topology("default", "web"),
            Some(Some("openyurt.io/nodepool".into()))
        );
        assert_eq!(canned.calls.load(Ordering::Relaxed), 1);
        index.replace(HashMap::from([(
            "default/web".to_owned(),
            "kubernetes.io/hostname".to_owned(),
        )]));
        assert_eq!(
            l.service_topology("default", "web"),
            Some(Some("kubernetes.io/hostname".into()))
        );
        assert_eq!(l.service_topology("default", "plain"), Some(None));
        assert_eq!(
            canned.calls.load(Ordering::Relaxed),
            1,
            "no lookup once listed"
        );
        // A slice marked after a change the watch has not brought: the Service is read now.
        l.saw_update_trigger("default", "web", "1700000000");
        assert_eq!(canned.calls.load(Ordering::Relaxed), 2);
        assert_eq!(
            index.get("default", "web"),
            Some(Some("openyurt.io/nodepool".into()))
        );
    }

    #[test]
    fn a_newer_update_trigger_makes_remembered_answers_stale_once() {
        let (canned, l) = lookups();
        let calls = || canned.calls.load(Ordering::Relaxed);
        l.service_topology("default", "web");
        l.saw_update_trigger("default", "web", "1700000000");
        l.service_topology("default", "web");
        assert_eq!(
            calls(),
            2,
            "the Service is read again after a newer trigger"
        );
        // The same trigger on the Service's other slices, an older one, or garbage: no
        // new reads.
        for trigger in ["1700000000", "1600000000", "soon", ""] {
            l.saw_update_trigger("default", "web", trigger);
            l.service_topology("default", "web");
        }
        assert_eq!(calls(), 2);
        // Another Service changed within the same second: read again as well, once.
        l.service_topology("default", "plain");
        assert_eq!(calls(), 3);
        l.saw_update_trigger("default", "plain", "1700000000");
        l.saw_update_trigger("default", "plain", "1700000000");
        l.service_topology("default", "plain");
        l.service_topology("default", "plain");
        assert_eq!(calls(), 4);
        l.saw_update_trigger("default", "web", " 1700000001 ");
        l.service_topology("default", "web");
        assert_eq!(calls(), 5);
    }

    #[test]
    fn past_the_cap_the_oldest_answer_is_forgotten_first() {
        let (canned, l) = lookups();
        let calls = || canned.calls.load(Ordering::Relaxed);
        for i in 0..MAX_ENTRIES {
            l.service_topology("default", &format!("svc-{i}"));
        }
        l.service_topology("default", "web");
        assert_eq!(calls(), MAX_ENTRIES as u32 + 1);
        // The newest stay remembered; only the first one went.
        l.service_topology("default", "web");
        l.service_topology("default", &format!("svc-{}", MAX_ENTRIES - 1));
        assert_eq!(calls(), MAX_ENTRIES as u32 + 1);
        l.service_topology("default", "svc-0");
        assert_eq!(calls(), MAX_ENTRIES as u32 + 2);
    }
}
