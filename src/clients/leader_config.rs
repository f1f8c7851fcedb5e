//! Watches the pool's `<namespace>/leader-hub-<pool>` ConfigMap (yurt-manager's
//! `pkg/yurtmanager/controller/hubleaderconfig`; edge mode with `--nodepool-name`): a thread lists
//! it by name, then watches it from the list's resourceVersion, feeding each version to
//! [`PoolState::apply`] and publishing the outcome in the shared [`PoolRoute`] (the source, the
//! leaders, dialled at once), where the feeders read it. The hub's own requests (component
//! `tinyhub`), never cached: offline or after a restart, until the ConfigMap is seen again, the
//! source is the cloud.
//!
//! Design decisions:
//! - As the other watches of `clients/`: a watch that ends by its time or breaks off
//!   resumes from the last resourceVersion seen; a 410 or an ERROR event lists again; a
//!   failure waits `retry` (the heartbeat interval); nothing is asked of a cloud whose
//!   servers are all unhealthy.
//! - A deleted ConfigMap changes nothing (YurtHub ignores deletes).
//! - **Not allowed to read it** (403, or 404): the hub's identity lacks the RBAC (kubelet
//!   certificate mode: `system:nodes` only, no `yurt-hub` ClusterRole). One warning names
//!   what is needed and the watcher asks again only every [`DENIED_BACKOFF`]: the pool
//!   feature is off (the source stays the cloud) without a request every heartbeat.
//! - What the ConfigMap changes beyond the route goes to the caller's callbacks: the first
//!   time it names this node a leader (the multiplexer port opens), and a new pool-scope set.
//! - Memory: the list's body (at most [`MAX_LIST_BYTES`], one small ConfigMap in practice)
//!   while it is read, one watch event at a time after.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;

use super::{ClientError, get_as_hub, read_object_events, watch_deadline};
use crate::pool::leader::{self, ConfigEvent, PoolState, WATCH_SECONDS};
use crate::pool::resources::PoolScope;
use crate::pool::route::{FIRST_LIST_PATIENCE, PoolRoute};
use crate::route::Deadline;
use crate::upstream::Upstream;

/// What runs the first time the ConfigMap names this node a leader, given the ConfigMap's
/// leaders (this node's IP among them).
pub(crate) type OnLeader = Box<dyn FnOnce(&[leader::Leader]) + Send>;

/// Largest list of the ConfigMap the watcher reads.
const MAX_LIST_BYTES: u64 = 1024 * 1024;
/// A watch that ends sooner than this is resumed only after the retry pause.
const MIN_WATCH: Duration = Duration::from_secs(1);
/// The pause after the cloud refused to show the ConfigMap to this hub (403, 404).
const DENIED_BACKOFF: Duration = Duration::from_secs(300);

/// What the ConfigMap's watcher needs.
pub(crate) struct LeaderWatch {
    /// The cloud.
    pub upstream: Arc<Upstream>,
    /// Where the outcome is published.
    pub route: Arc<PoolRoute>,
    /// The state before any ConfigMap (the flags' set, the cloud).
    pub state: PoolState,
    /// `--namespace`.
    pub namespace: String,
    /// `--nodepool-name`.
    pub pool: String,
    /// The pause after a failure (`--heartbeat-interval-seconds`).
    pub retry: Duration,
    /// Called once, the first time the ConfigMap names this node a leader, with its leaders.
    pub on_leader: Option<OnLeader>,
    /// Called with the pool-scope set each time the ConfigMap changes it.
    pub on_scope: Box<dyn FnMut(&PoolScope) + Send>,
}

/// How one watch ended.
enum Watched {
    /// `stop` fired.
    Stopped,
    /// By its time (true when it lasted) or a broken connection: resume from this
    /// resourceVersion.
    Resume(String, bool),
    /// A 410, an ERROR event or an unreadable stream: list again.
    Relist(ClientError),
    /// 403 or 404: the hub may not read it (logged); resume from this resourceVersion after
    /// [`DENIED_BACKOFF`].
    Denied(String, u16),
}

/// The warning when the cloud will not show the ConfigMap to this hub.
fn denied_line(namespace: &str, name: &str, status: u16) -> String {
    format!(
        "the cloud answers {status} to this hub's list of the pool's leader ConfigMap {namespace}/{name}: the pool's leader hub is not used (its reads go to the cloud); the hub's identity needs get, list and watch on configmaps in {namespace} (YurtHub's yurt-hub ClusterRole, or a Role bound to it); asked again every {} s",
        DENIED_BACKOFF.as_secs()
    )
}

impl LeaderWatch {
    /// Lists and watches until `stop` fires or closes.
    pub(crate) fn run(mut self, stop: Receiver<()>) {
        let (list_path, name) = match (
            leader::list_path(&self.namespace, &self.pool),
            leader::config_name(&self.pool),
        ) {
            (Ok(path), Ok(name)) => (path, name),
            // The flags were validated: a bad name cannot come here.
            (Err(e), _) | (_, Err(e)) => {
                log::error!("the pool's leader ConfigMap is not watched: {e}");
                return;
            }
        };
        let mut resume: Option<String> = None;
        let mut failed = 0u32;
        let mut warned_denied = false;
        let started = Instant::now();
        loop {
            let mut pause = true;
            // The cloud's 403/404 for this hub: warned about once, asked again rarely.
            let mut denied: Option<u16> = None;
            if self.upstream.backends().any_healthy() {
                let rv = match resume.take() {
                    Some(rv) => Ok(rv),
                    None => self.list(&list_path),
                };
                self.route.settle();
                match rv {
                    Ok(rv) => {
                        failed = 0;
                        match self.watch(&rv, &stop) {
                            Watched::Stopped => return,
                            Watched::Resume(last, lasted) => {
                                resume = Some(last);
                                pause = !lasted;
                            }
                            Watched::Relist(e) => {
                                log::debug!("watch of {}/{name} ended: {e}", self.namespace);
                                pause = false;
                            }
                            Watched::Denied(rv, status) => {
                                resume = Some(rv);
                                denied = Some(status);
                            }
                        }
                    }
                    Err(ClientError::Status(status @ (403 | 404))) => denied = Some(status),
                    Err(e) => {
                        failed += 1;
                        let line = format!("list of {}/{name} failed: {e}", self.namespace);
                        if failed == 1 {
                            log::info!("{line}");
                        } else {
                            log::debug!("{line} ({failed} times)");
                        }
                    }
                }
            }
            if !self.route.settled() && started.elapsed() >= FIRST_LIST_PATIENCE {
                self.route.settle();
            }
            if let Some(status) = denied
                && !std::mem::replace(&mut warned_denied, true)
            {
                log::warn!("{}", denied_line(&self.namespace, &name, status));
            }
            let wait = match (denied, pause) {
                (Some(_), _) => DENIED_BACKOFF,
                (None, true) => self.retry,
                (None, false) => Duration::ZERO,
            };
            match stop.recv_timeout(wait) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    /// Lists the ConfigMap and applies it; the list's resourceVersion.
    fn list(&mut self, path: &str) -> Result<String, ClientError> {
        let mut answer = get_as_hub(
            &self.upstream,
            path,
            Deadline::Bounded(Duration::from_secs(60)),
        )?;
        let mut body = Vec::new();
        (&mut answer.body)
            .take(MAX_LIST_BYTES)
            .read_to_end(&mut body)?;
        let list: Value = serde_json::from_slice(&body)?;
        // None listed: nothing changes (as a delete), the last state holds.
        for item in list
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.apply(ConfigEvent::Seen(item));
        }
        list.pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(ClientError::Answer("the list has no resourceVersion"))
    }

    /// Watches from `rv`, applying each event.
    fn watch(&mut self, rv: &str, stop: &Receiver<()>) -> Watched {
        let path = match leader::watch_path(&self.namespace, &self.pool, rv) {
            Ok(path) => path,
            Err(e) => return Watched::Relist(ClientError::Refused(e.to_string())),
        };
        let began = Instant::now();
        let mut answer = match get_as_hub(&self.upstream, &path, watch_deadline(WATCH_SECONDS)) {
            Ok(answer) => answer,
            Err(e @ ClientError::Status(410)) => return Watched::Relist(e),
            Err(ClientError::Status(status @ (403 | 404))) => {
                return Watched::Denied(rv.to_owned(), status);
            }
            Err(e) => {
                log::debug!("watch of the pool's leader ConfigMap failed: {e}");
                return Watched::Resume(rv.to_owned(), false);
            }
        };
        let mut last = rv.to_owned();
        let ended = read_object_events(&mut answer, stop, &mut last, &mut |object, deleted| {
            self.apply(if deleted {
                ConfigEvent::Deleted
            } else {
                ConfigEvent::Seen(object)
            });
        });
        match ended {
            Ok(true) => Watched::Resume(last, began.elapsed() >= MIN_WATCH),
            Ok(false) => Watched::Stopped,
            Err(e @ (ClientError::Upstream(_) | ClientError::Read(_))) => {
                log::debug!("watch of the pool's leader ConfigMap broke off: {e}");
                Watched::Resume(last, false)
            }
            Err(e) => Watched::Relist(e),
        }
    }

    /// Applies one version of the ConfigMap and publishes what changed.
    fn apply(&mut self, event: ConfigEvent<'_>) {
        let before = self.state.pool_scope().to_metadata();
        let change = self.state.apply(event);
        for why in &change.skipped {
            log::warn!("{why}");
        }
        if change.leaders || change.source {
            let leaders: Vec<String> = self
                .state
                .leaders()
                .iter()
                .map(|l| format!("{}/{}", l.node, l.ip))
                .collect();
            log::info!(
                "pool {} leaders=[{}] source={}",
                self.pool,
                leaders.join(","),
                self.state.source().as_str()
            );
            let leaders = change.leaders.then(|| self.state.leaders());
            self.route.set(self.state.source(), leaders);
        }
        if self.state.is_leader()
            && let Some(on_leader) = self.on_leader.take()
        {
            on_leader(self.state.leaders());
        }
        if self.state.pool_scope().to_metadata() != before {
            (self.on_scope)(self.state.pool_scope());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::clients::pool_watch::tests::{Fake, upstream_of};
    use crate::config::LbMode;
    use crate::health::Backends;
    use crate::pool::health::Dialer;
    use crate::pool::leader::Source;
    use crate::server::tls::tests::TestCa;

    /// Every leader answers its dial.
    struct AllUp;

    impl Dialer for AllUp {
        fn reachable(&self, _: SocketAddr, _: Duration) -> bool {
            true
        }
    }

    fn cm(leaders: &str, election: &str, scoped: &str) -> Value {
        json!({
            "metadata": {"name": "leader-hub-pool-a", "namespace": "kube-system"},
            "data": {
                "leaders": leaders,
                "enable-leader-election": election,
                "pool-scoped-metadata": scoped,
            }
        })
    }

    #[test]
    fn a_configmap_the_hub_may_not_read_is_asked_for_rarely() {
        let ca = TestCa::new();
        let cloud = Fake::start(&ca, "127.0.0.1", &[(403, "{}"); 50]);
        let route = Arc::new(PoolRoute::for_tests(10269, Box::new(AllUp)));
        let watch = LeaderWatch {
            upstream: upstream_of(&ca, Some(&cloud)),
            route: Arc::clone(&route),
            state: PoolState::new("n2", "pool-a", PoolScope::with_defaults([])).unwrap(),
            namespace: "kube-system".into(),
            pool: "pool-a".into(),
            retry: Duration::from_millis(20),
            on_leader: None,
            on_scope: Box::new(|_| {}),
        };
        let (stop_tx, stop) = crossbeam_channel::bounded(1);
        let running = std::thread::spawn(move || watch.run(stop));
        std::thread::sleep(Duration::from_millis(1500));
        drop(stop_tx);
        running.join().unwrap();
        assert_eq!(cloud.requests().len(), 1, "{:#?}", cloud.requests());
        assert!(route.settled(), "the feeders do not wait for it");
        assert_eq!(route.source(), Source::Cloud);
        assert!(denied_line("kube-system", "leader-hub-pool-a", 403).contains("configmaps"));
    }

    #[test]
    fn configmap_versions_reach_the_route_and_the_callbacks() {
        let upstream = Upstream::new(
            Arc::new(Backends::new(Vec::new(), LbMode::RoundRobin)),
            None,
            None,
            16,
        )
        .unwrap();
        let route = Arc::new(PoolRoute::for_tests(10269, Box::new(AllUp)));
        let leads = Arc::new(AtomicUsize::new(0));
        let scopes = Arc::new(Mutex::new(Vec::new()));
        let (l, s) = (Arc::clone(&leads), Arc::clone(&scopes));
        let mut watch = LeaderWatch {
            upstream: Arc::new(upstream),
            route: Arc::clone(&route),
            state: PoolState::new("n2", "pool-a", PoolScope::with_defaults([])).unwrap(),
            namespace: "kube-system".into(),
            pool: "pool-a".into(),
            retry: Duration::from_secs(1),
            on_leader: Some(Box::new(move |_| {
                l.fetch_add(1, Ordering::Relaxed);
            })),
            on_scope: Box::new(move |scope| s.lock().unwrap().push(scope.to_metadata())),
        };
        let both = "/v1/services,discovery.k8s.io/v1/endpointslices";

        // A follower of n1: the pool, through n1.
        watch.apply(ConfigEvent::Seen(&cm("n1/10.0.0.1", "true", both)));
        assert_eq!(route.source(), Source::Pool);
        assert_eq!(
            route.leader_except(None),
            Some("10.0.0.1:10269".parse().unwrap())
        );
        assert_eq!(leads.load(Ordering::Relaxed), 0);
        assert!(scopes.lock().unwrap().is_empty(), "the same set");

        // Deleted: nothing changes.
        let generation = route.generation();
        watch.apply(ConfigEvent::Deleted);
        assert_eq!(route.generation(), generation);
        assert_eq!(route.source(), Source::Pool);

        // Elected itself, with a smaller set: the cloud, the multiplexer opens once.
        watch.apply(ConfigEvent::Seen(&cm(
            "n1/10.0.0.1,n2/10.0.0.2",
            "true",
            "/v1/services",
        )));
        watch.apply(ConfigEvent::Seen(&cm(
            "n2/10.0.0.2",
            "true",
            "/v1/services",
        )));
        assert_eq!(route.source(), Source::Cloud);
        assert_eq!(route.leader_except(None), None);
        assert_eq!(leads.load(Ordering::Relaxed), 1, "once");
        assert_eq!(*scopes.lock().unwrap(), ["/v1/services"]);

        // Election off: the cloud.
        watch.apply(ConfigEvent::Seen(&cm("n1/10.0.0.1", "false", both)));
        assert_eq!(route.source(), Source::Cloud);
        assert_eq!(scopes.lock().unwrap().len(), 2);
    }
}
