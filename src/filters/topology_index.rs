//! The `openyurt.io/topologyKeys` annotation of every Service that has one, kept by the
//! services watch (`clients::services_watch`) as YurtHub keeps an informer of all Services
//! (YurtHub's `pkg/yurthub/filter/servicetopology`), but holding only the annotated ones: a few
//! bytes per topology-aware Service instead of every Service decoded. servicetopology reads it for
//! each EndpointSlice with no round trip to the cloud.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::servicetopology::TOPOLOGY_ANNOTATION;

/// The annotated Services, and whether a whole list of them has been read.
pub(crate) struct TopologyIndex {
    state: Mutex<State>,
    /// Signalled when the first list attempt ends, either way.
    attempted: Condvar,
    /// Lookups wait for the first list until then, not each for its own while: a list of
    /// slices read during a slow first list falls back to lookups one by one.
    patience_until: Instant,
}

#[derive(Default)]
struct State {
    /// `namespace/name` → the annotation's value.
    annotated: HashMap<String, String>,
    /// A whole list was read: a Service missing here has no annotation (or does not exist).
    synced: bool,
    /// The first list was tried (the lookups stop waiting for it).
    attempted: bool,
}

impl TopologyIndex {
    /// An empty index whose lookups wait up to `patience` from now for the first list.
    pub(crate) fn new(patience: Duration) -> TopologyIndex {
        TopologyIndex {
            state: Mutex::new(State::default()),
            attempted: Condvar::new(),
            patience_until: Instant::now() + patience,
        }
    }

    /// The annotation of Service `namespace/name` (`Some(None)`: none, or no such Service), or
    /// None while the index has never been whole: the caller then looks the Service up
    /// itself. Waits for the first list to be tried, within the index's patience.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Option<String>> {
        let mut state = self.lock();
        while !state.attempted {
            let left = self
                .patience_until
                .saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .attempted
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if !state.synced {
            return None;
        }
        let key = format!("{namespace}/{name}");
        Some(state.annotated.get(&key).cloned())
    }

    /// A list was read whole: its annotated Services replace what was known.
    pub(crate) fn replace(&self, annotated: HashMap<String, String>) {
        let mut state = self.lock();
        state.annotated = annotated;
        state.synced = true;
        state.attempted = true;
        self.attempted.notify_all();
    }

    /// A list could not be read: lookups stop waiting (what was known stays).
    pub(crate) fn list_failed(&self) {
        self.lock().attempted = true;
        self.attempted.notify_all();
    }

    /// One watch event's Service: `deleted` for a DELETED event.
    pub(crate) fn apply(&self, service: &Value, deleted: bool) {
        if let Some((key, topology)) = entry(service) {
            self.set(key, topology.filter(|_| !deleted));
        }
    }

    /// Service `key` (`namespace/name`) has `topology`, or none.
    pub(crate) fn set(&self, key: String, topology: Option<String>) {
        let mut state = self.lock();
        match topology {
            Some(keys) => {
                state.annotated.insert(key, keys);
            }
            None => {
                state.annotated.remove(&key);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change is whole under the lock: the state is valid after a panic elsewhere.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A Service's `namespace/name` and its annotation, None when it has no name.
pub(crate) fn entry(service: &Value) -> Option<(String, Option<String>)> {
    let metadata = service.get("metadata")?;
    let name = metadata.get("name")?.as_str()?;
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    Some((format!("{namespace}/{name}"), topology_of(service)))
}

/// A Service's `openyurt.io/topologyKeys` annotation.
pub(crate) fn topology_of(service: &Value) -> Option<String> {
    super::annotation(service, TOPOLOGY_ANNOTATION).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(name: &str, keys: Option<&str>) -> Value {
        let mut svc = json!({"metadata": {"namespace": "shop", "name": name}});
        if let Some(keys) = keys {
            svc["metadata"]["annotations"] = json!({TOPOLOGY_ANNOTATION: keys});
        }
        svc
    }

    #[test]
    fn unknown_until_a_whole_list_then_kept_by_events() {
        let index = TopologyIndex::new(Duration::ZERO);
        assert_eq!(index.get("shop", "web"), None, "never listed");
        index.list_failed();
        assert_eq!(index.get("shop", "web"), None);

        let mut listed = HashMap::new();
        if let Some((key, Some(keys))) = entry(&service("web", Some("kubernetes.io/hostname"))) {
            listed.insert(key, keys);
        }
        index.replace(listed);
        assert_eq!(
            index.get("shop", "web"),
            Some(Some("kubernetes.io/hostname".into()))
        );
        assert_eq!(index.get("shop", "plain"), Some(None));

        index.apply(&service("plain", Some("openyurt.io/nodepool")), false);
        index.apply(&service("web", None), false);
        assert_eq!(
            index.get("shop", "plain"),
            Some(Some("openyurt.io/nodepool".into()))
        );
        assert_eq!(index.get("shop", "web"), Some(None));
        index.apply(&service("plain", Some("openyurt.io/nodepool")), true);
        assert_eq!(index.get("shop", "plain"), Some(None));
        // An object with no name changes nothing.
        index.apply(&json!({"metadata": {}}), false);
        assert_eq!(index.lock().annotated.len(), 0);
    }

    #[test]
    fn a_lookup_waits_for_the_first_list_attempt() {
        let index = std::sync::Arc::new(TopologyIndex::new(Duration::from_secs(30)));
        let lister = std::sync::Arc::clone(&index);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            lister.replace(HashMap::from([(
                "shop/web".into(),
                "kubernetes.io/hostname".into(),
            )]));
        });
        assert_eq!(
            index.get("shop", "web"),
            Some(Some("kubernetes.io/hostname".into()))
        );
        t.join().expect("the lister thread");
    }
}
