//! One renewal of the node lease through one apiserver: YurtHub's `nodeLease.Update`
//! (YurtHub's `pkg/yurthub/healthchecker/cloudapiserver`), over the [`LeaseApi`] trait so the
//! algorithm is tested without a network, plus tinyhub's rule for a deleted Node (§1.5): never
//! re-create its lease, and stop renewing once it has been missing for several probes in a row.
//!
//! Call sequence of one probe (`failed_retry` = `--heartbeat-failed-retry`, at least 1):
//!
//! ```text
//! if base: retry_update(base); success → done          (other failures fall through)
//! (lease, created) = backoff_ensure(); created → done
//! retry_update(lease)
//! retry_update(b): up to failed_retry × PUT new_lease(b); 409 → b = backoff_ensure(), next
//! backoff_ensure: ensure(); after a failure sleep 200, 400, 800 ms; give up before 1.6 s
//! ensure: GET lease; 404 → POST new_lease(none), created
//! ```
//!
//! `new_lease` asks `GET node` for the owner reference only when the lease names no owner,
//! at most once per probe (YurtHub asks before every PUT; the answer cannot change within
//! the ~15 s a probe lasts at worst, and on a black-holed server each extra GET costs the
//! full timeout).

use std::fmt;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::lease;
use crate::upstream::UpstreamError;

/// Why one request of a renewal failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseError {
    /// 409: the resourceVersion sent is not the newest.
    Conflict(String),
    /// 404 on a PUT or POST (a GET's 404 is `Ok(None)`).
    NotFound(String),
    /// 403: the hub's identity may not do this (then `--heartbeat-mode=readyz` is the way).
    Forbidden(String),
    /// Any other HTTP status.
    Status {
        /// HTTP status code.
        code: u16,
        /// The Status message, or what the body said.
        message: String,
    },
    /// A 2xx answer that is not this node's Lease (not JSON, or another object): retried
    /// like any other status.
    Unreadable {
        /// HTTP status code.
        code: u16,
        /// What is wrong with the answer.
        message: String,
    },
    /// No answer: connection refused or reset, TLS failure, timeout, no credentials yet.
    Transport(UpstreamError),
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Conflict(m) => write!(f, "conflict: {m}"),
            LeaseError::NotFound(m) => write!(f, "not found: {m}"),
            LeaseError::Forbidden(m) => write!(f, "forbidden: {m}"),
            LeaseError::Status { code, message } | LeaseError::Unreadable { code, message } => {
                write!(f, "HTTP {code}: {message}")
            }
            // The probe's log line names the server already.
            LeaseError::Transport(e) => write!(f, "no answer: {}", e.without_server()),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Transport(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
impl LeaseError {
    /// A request that got no answer (the connection broke after it was sent).
    pub(crate) fn no_answer(detail: &str) -> LeaseError {
        LeaseError::Transport(UpstreamError::Transport {
            server: "https://10.0.0.1:6443".into(),
            detail: detail.into(),
            timeout: false,
            maybe_sent: true,
        })
    }
}

/// The requests a renewal makes against one apiserver, for this node's lease
/// ([`lease::lease_path`]) and Node ([`lease::node_path`]). Each is one HTTP request with
/// the heartbeat timeout.
pub(crate) trait LeaseApi {
    /// `GET` the lease; `Ok(None)` on 404.
    fn get_lease(&self) -> Result<Option<Value>, LeaseError>;
    /// `POST` the lease to its namespace; the stored object.
    fn create_lease(&self, lease: &Value) -> Result<Value, LeaseError>;
    /// `PUT` the lease (its resourceVersion guards the write); the stored object.
    fn update_lease(&self, lease: &Value) -> Result<Value, LeaseError>;
    /// `GET` the Node; `Ok(None)` on 404.
    fn get_node(&self) -> Result<Option<Value>, LeaseError>;
}

/// The result of one probe.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Renewal {
    /// The lease as the apiserver stored it (kind and apiVersion set): the hub's current lease.
    Renewed(Value),
    /// The server could not renew the lease: the last error.
    Failed(LeaseError),
    /// The Node, seen before, answered 404 and the lease was gone too: the lease was not
    /// re-created (it would outlive the Node without an owner). The server did answer.
    NodeMissing,
    /// The Node was deleted (404 for [`RenewSettings::node_gone_after`] probes in a row after
    /// it had been seen): nothing was written, and until it is back a probe only asks for
    /// it. The server did answer.
    NodeGone,
}

/// What a renewal needs from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewSettings {
    /// This node.
    pub node: String,
    /// `--kubelet-health-grace-period`: `leaseDurationSeconds` of a lease the hub creates.
    pub grace: Duration,
    /// `--heartbeat-failed-retry`: PUT attempts per probe (0 counts as 1).
    pub failed_retry: u32,
    /// Consecutive probes with `GET node` 404 after which the Node counts as deleted.
    pub node_gone_after: u32,
}

/// Probes in a row with the Node missing before renewals stop (3 × 10 s: longer than a
/// kubelet re-registering its Node takes, short next to the lease's 40 s).
pub(crate) const NODE_GONE_AFTER: u32 = 3;

/// Longest sleep of `backoff_ensure` (YurtHub's `maxBackoff`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Renews the node lease, one probe at a time, through whichever server it is given; keeps
/// what is known about the Node across probes (one per hub, shared by the servers).
pub(crate) struct Renewer {
    settings: RenewSettings,
    sleep: Box<dyn Fn(Duration) + Send>,
    clock: Box<dyn Fn() -> SystemTime + Send>,
    /// Consecutive probes in which `GET node` answered 404.
    node_missing: u32,
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renewer")
            .field("settings", &self.settings)
            .field("node_missing", &self.node_missing)
            .finish_non_exhaustive()
    }
}

/// What `GET node` said in this probe.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lookup {
    NotAsked,
    Found(Option<String>),
    Missing,
    Failed,
}

/// A failed request as a step of a probe: a 403 ends it, the rest may be tried again.
fn abort(e: LeaseError) -> Abort {
    match e {
        LeaseError::Forbidden(_) => Abort::Stop(Renewal::Failed(e)),
        e => Abort::Retryable(e),
    }
}

/// How a step of a probe ends early.
enum Abort {
    /// A failure the backoff and retry loops try again.
    Retryable(LeaseError),
    /// The probe ends now with this result.
    Stop(Renewal),
}

impl Renewer {
    /// A renewer that sleeps for real and stamps the system time.
    pub(crate) fn new(settings: RenewSettings) -> Renewer {
        Renewer::with_clock(
            settings,
            Box::new(std::thread::sleep),
            Box::new(SystemTime::now),
        )
    }

    /// A renewer with its own sleep and clock (tests).
    pub(crate) fn with_clock(
        settings: RenewSettings,
        sleep: Box<dyn Fn(Duration) + Send>,
        clock: Box<dyn Fn() -> SystemTime + Send>,
    ) -> Renewer {
        Renewer {
            settings,
            sleep,
            clock,
            node_missing: 0,
        }
    }

    /// Whether the Node counts as deleted: probes only ask for it until it comes back.
    pub(crate) fn node_gone(&self) -> bool {
        self.node_missing >= self.settings.node_gone_after.max(1)
    }

    /// One probe through `api`, starting from `base` (the hub's current lease, if any).
    pub(crate) fn probe(&mut self, api: &dyn LeaseApi, base: Option<&Value>) -> Renewal {
        let mut lookup = Lookup::NotAsked;
        if self.node_gone() {
            match api.get_node() {
                Ok(None) => return Renewal::NodeGone,
                Err(e) => return Renewal::Failed(e),
                Ok(Some(node)) => {
                    log::info!(
                        "node {} is back: renewing its lease again",
                        self.settings.node
                    );
                    lookup = Lookup::Found(lease::node_uid(&node).map(str::to_owned));
                    self.node_missing = 0;
                }
            }
        }
        let mut run = Probe {
            api,
            settings: &self.settings,
            sleep: &*self.sleep,
            clock: &*self.clock,
            node_missing: self.node_missing,
            lookup,
        };
        let result = match run.update(base) {
            Ok(mut renewed) => {
                lease::stamp_type(&mut renewed);
                Renewal::Renewed(renewed)
            }
            Err(Abort::Retryable(e)) => Renewal::Failed(e),
            Err(Abort::Stop(r)) => r,
        };
        match run.lookup {
            Lookup::Missing => self.node_missing = self.node_missing.saturating_add(1),
            Lookup::Found(_) => self.node_missing = 0,
            Lookup::NotAsked | Lookup::Failed => {}
        }
        if result == Renewal::NodeGone {
            log::warn!(
                "node {} not found in {} probes in a row: the hub stops renewing its lease",
                self.settings.node,
                self.node_missing
            );
        }
        result
    }
}

/// The state of one probe.
struct Probe<'a> {
    api: &'a dyn LeaseApi,
    settings: &'a RenewSettings,
    sleep: &'a dyn Fn(Duration),
    clock: &'a dyn Fn() -> SystemTime,
    /// Consecutive earlier probes with the Node missing.
    node_missing: u32,
    lookup: Lookup,
}

impl Probe<'_> {
    /// YurtHub's `nodeLease.Update(base)`. A base without a resourceVersion (a lease
    /// kubelet created while the hub knew none) is read again first: a PUT of it would be
    /// refused.
    fn update(&mut self, base: Option<&Value>) -> Result<Value, Abort> {
        let versioned = base.filter(|b| {
            b.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|rv| !rv.is_empty())
        });
        if let Some(base) = versioned {
            match self.retry_update(base.clone()) {
                Ok(renewed) => return Ok(renewed),
                Err(Abort::Stop(r)) => return Err(Abort::Stop(r)),
                Err(Abort::Retryable(e)) => {
                    log::debug!("renewing the lease from the hub's copy failed: {e}");
                }
            }
        }
        let (lease, created) = self.backoff_ensure()?;
        if created {
            return Ok(lease);
        }
        self.retry_update(lease)
    }

    /// Up to `failed_retry` PUTs; a conflict fetches the newest lease as the next base.
    fn retry_update(&mut self, mut base: Value) -> Result<Value, Abort> {
        let mut last = None;
        for _ in 0..self.settings.failed_retry.max(1) {
            let lease = self.new_lease(Some(&base), false)?;
            match self.api.update_lease(&lease) {
                Ok(renewed) => return Ok(renewed),
                Err(e @ LeaseError::Conflict(_)) => {
                    base = self.backoff_ensure()?.0;
                    last = Some(e);
                }
                // Asking again is refused again: one request per probe is enough.
                Err(e @ LeaseError::Forbidden(_)) => return Err(Abort::Stop(Renewal::Failed(e))),
                Err(e) => last = Some(e),
            }
        }
        // Invariant: the loop ran at least once and every pass that did not return set it.
        Err(Abort::Retryable(last.expect("at least one attempt")))
    }

    /// `ensure` until it works; sleeps 200, 400, 800 ms between attempts, at most 4.
    fn backoff_ensure(&mut self) -> Result<(Value, bool), Abort> {
        let mut pause = Duration::from_millis(100);
        loop {
            match self.ensure() {
                Ok(found) => return Ok(found),
                Err(Abort::Stop(r)) => return Err(Abort::Stop(r)),
                Err(Abort::Retryable(e)) => {
                    pause *= 2;
                    if pause > MAX_BACKOFF {
                        return Err(Abort::Retryable(e));
                    }
                    (self.sleep)(pause);
                }
            }
        }
    }

    /// GET the lease, or POST a new one when there is none: (lease, created).
    fn ensure(&mut self) -> Result<(Value, bool), Abort> {
        match self.api.get_lease() {
            Ok(Some(found)) => Ok((found, false)),
            Ok(None) => {
                let fresh = self.new_lease(None, true)?;
                self.api
                    .create_lease(&fresh)
                    .map(|created| (created, true))
                    .map_err(abort)
            }
            Err(e) => Err(abort(e)),
        }
    }

    /// [`lease::new_lease`] with the owner reference looked up when missing. A missing Node
    /// stops the probe: no lease is created without its Node (one would outlive it with no
    /// owner to collect it: kubernetes #109777), and after `node_gone_after` probes in a row
    /// an existing one is not renewed either.
    fn new_lease(&mut self, base: Option<&Value>, creating: bool) -> Result<Value, Abort> {
        let needs_owner = !base.is_some_and(lease::has_owner_references);
        if needs_owner && self.lookup == Lookup::NotAsked {
            self.lookup = match self.api.get_node() {
                Ok(Some(node)) => Lookup::Found(lease::node_uid(&node).map(str::to_owned)),
                Ok(None) => Lookup::Missing,
                Err(e) => {
                    log::debug!(
                        "cannot get node {} for the lease's owner: {e}",
                        self.settings.node
                    );
                    Lookup::Failed
                }
            };
            if self.lookup == Lookup::Missing
                && self.node_missing.saturating_add(1) >= self.settings.node_gone_after.max(1)
            {
                return Err(Abort::Stop(Renewal::NodeGone));
            }
        }
        if creating && self.lookup == Lookup::Missing {
            return Err(Abort::Stop(Renewal::NodeMissing));
        }
        let uid = match (&self.lookup, needs_owner) {
            (Lookup::Found(uid), true) => uid.as_deref(),
            _ => None,
        };
        Ok(lease::new_lease(
            base,
            &self.settings.node,
            self.settings.grace,
            (self.clock)(),
            uid,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::UNIX_EPOCH;

    use serde_json::json;

    use super::*;

    type Answers<T> = RefCell<VecDeque<Result<T, LeaseError>>>;

    /// An apiserver that answers from scripts and records every request.
    #[derive(Default)]
    struct FakeLeaseApi {
        calls: RefCell<Vec<String>>,
        sent: RefCell<Vec<Value>>,
        gets: Answers<Option<Value>>,
        creates: Answers<Value>,
        updates: Answers<Value>,
        nodes: Answers<Option<Value>>,
    }

    fn next<T>(answers: &Answers<T>, what: &str) -> Result<T, LeaseError> {
        answers
            .borrow_mut()
            .pop_front()
            .unwrap_or_else(|| Err(LeaseError::no_answer(&format!("unscripted {what}"))))
    }

    fn describe(lease: &Value) -> String {
        let rv = lease["metadata"]["resourceVersion"].as_str().unwrap_or("-");
        let owner = lease["metadata"]["ownerReferences"][0]["uid"]
            .as_str()
            .unwrap_or("-");
        format!("rv={rv} owner={owner}")
    }

    impl LeaseApi for FakeLeaseApi {
        fn get_lease(&self) -> Result<Option<Value>, LeaseError> {
            self.calls.borrow_mut().push("GET lease".into());
            next(&self.gets, "GET lease")
        }
        fn create_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
            self.calls
                .borrow_mut()
                .push(format!("POST {}", describe(lease)));
            self.sent.borrow_mut().push(lease.clone());
            next(&self.creates, "POST")
        }
        fn update_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
            self.calls
                .borrow_mut()
                .push(format!("PUT {}", describe(lease)));
            self.sent.borrow_mut().push(lease.clone());
            next(&self.updates, "PUT")
        }
        fn get_node(&self) -> Result<Option<Value>, LeaseError> {
            self.calls.borrow_mut().push("GET node".into());
            next(&self.nodes, "GET node")
        }
    }

    impl FakeLeaseApi {
        fn take_calls(&self) -> Vec<String> {
            std::mem::take(&mut *self.calls.borrow_mut())
        }
    }

    fn stored(rv: &str, owner: Option<&str>) -> Value {
        let mut lease = json!({"metadata":{"name":"edge-1","namespace":"kube-node-lease",
            "resourceVersion": rv},
            "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40}});
        if let Some(uid) = owner {
            lease["metadata"]["ownerReferences"] =
                json!([{"apiVersion":"v1","kind":"Node","name":"edge-1","uid":uid}]);
        }
        lease
    }

    fn node(uid: &str) -> Value {
        json!({"kind":"Node","metadata":{"name":"edge-1","uid":uid}})
    }

    fn renewer(failed_retry: u32) -> (Renewer, Arc<Mutex<Vec<u64>>>) {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let record = slept.clone();
        let r = Renewer::with_clock(
            RenewSettings {
                node: "edge-1".into(),
                grace: Duration::from_secs(40),
                failed_retry,
                node_gone_after: NODE_GONE_AFTER,
            },
            Box::new(move |d| crate::lock(&record).push(d.as_millis() as u64)),
            Box::new(|| UNIX_EPOCH + Duration::from_secs(1_787_047_200)),
        );
        (r, slept)
    }

    fn queue<T>(items: Vec<Result<T, LeaseError>>) -> Answers<T> {
        RefCell::new(items.into())
    }

    #[test]
    fn a_renewal_from_the_current_lease_is_one_put() {
        let (mut r, slept) = renewer(3);
        let api = FakeLeaseApi {
            updates: queue(vec![Ok(stored("6", Some("u1")))]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(api.take_calls(), ["PUT rv=5 owner=u1"]);
        let Renewal::Renewed(lease) = result else {
            panic!("not renewed: {result:?}")
        };
        assert_eq!(lease["metadata"]["resourceVersion"], "6");
        assert_eq!(lease["kind"], "Lease");
        assert_eq!(
            api.sent.borrow()[0]["spec"]["renewTime"],
            "2026-08-18T10:00:00.000000Z"
        );
        assert!(crate::lock(&slept).is_empty());
    }

    #[test]
    fn a_conflict_fetches_the_newest_lease_and_puts_again() {
        let (mut r, _) = renewer(3);
        let api = FakeLeaseApi {
            updates: queue(vec![
                Err(LeaseError::Conflict("modified".into())),
                Ok(stored("8", Some("u1"))),
            ]),
            gets: queue(vec![Ok(Some(stored("7", Some("u1"))))]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(
            api.take_calls(),
            ["PUT rv=5 owner=u1", "GET lease", "PUT rv=7 owner=u1"]
        );
        assert!(matches!(result, Renewal::Renewed(l) if l["metadata"]["resourceVersion"] == "8"));
    }

    #[test]
    fn no_lease_anywhere_creates_one_owned_by_the_node() {
        let (mut r, _) = renewer(3);
        let api = FakeLeaseApi {
            gets: queue(vec![Ok(None)]),
            nodes: queue(vec![Ok(Some(node("u1")))]),
            creates: queue(vec![Ok(stored("1", Some("u1")))]),
            ..Default::default()
        };
        let result = r.probe(&api, None);
        assert_eq!(
            api.take_calls(),
            ["GET lease", "GET node", "POST rv=- owner=u1"]
        );
        let posted = api.sent.borrow()[0].clone();
        assert_eq!(posted["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(posted["spec"]["holderIdentity"], "edge-1");
        assert!(matches!(result, Renewal::Renewed(_)));
    }

    #[test]
    fn a_failed_put_from_the_copy_falls_back_to_get_and_put() {
        let (mut r, _) = renewer(2);
        let api = FakeLeaseApi {
            updates: queue(vec![
                Err(LeaseError::Status {
                    code: 500,
                    message: "etcd".into(),
                }),
                Err(LeaseError::no_answer("reset")),
                Ok(stored("9", Some("u1"))),
            ]),
            gets: queue(vec![Ok(Some(stored("8", Some("u1"))))]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(
            api.take_calls(),
            [
                "PUT rv=5 owner=u1",
                "PUT rv=5 owner=u1",
                "GET lease",
                "PUT rv=8 owner=u1"
            ]
        );
        assert!(matches!(result, Renewal::Renewed(_)));
    }

    #[test]
    fn an_unreadable_answer_is_retried_like_a_failed_status() {
        let (mut r, _) = renewer(2);
        let api = FakeLeaseApi {
            updates: queue(vec![
                Err(LeaseError::Unreadable {
                    code: 200,
                    message: "the answer is not JSON: expected value".into(),
                }),
                Ok(stored("6", Some("u1"))),
            ]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(api.take_calls(), ["PUT rv=5 owner=u1", "PUT rv=5 owner=u1"]);
        assert!(matches!(result, Renewal::Renewed(_)));
    }

    #[test]
    fn a_dead_server_exhausts_the_retries_and_the_backoff() {
        let (mut r, slept) = renewer(3);
        let api = FakeLeaseApi::default(); // every request: no answer
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(
            api.take_calls(),
            [
                "PUT rv=5 owner=u1",
                "PUT rv=5 owner=u1",
                "PUT rv=5 owner=u1",
                "GET lease",
                "GET lease",
                "GET lease",
                "GET lease"
            ]
        );
        assert_eq!(*crate::lock(&slept), [200, 400, 800]);
        assert!(matches!(result, Renewal::Failed(LeaseError::Transport(_))));
    }

    #[test]
    fn conflicts_on_every_put_end_in_a_conflict_failure() {
        let (mut r, _) = renewer(2);
        let conflict = || Err(LeaseError::Conflict("modified".into()));
        let api = FakeLeaseApi {
            updates: queue(vec![conflict(), conflict(), conflict(), conflict()]),
            gets: queue(vec![
                Ok(Some(stored("6", Some("u1")))),
                Ok(Some(stored("7", Some("u1")))),
                Ok(Some(stored("8", Some("u1")))),
                Ok(Some(stored("9", Some("u1")))),
                Ok(Some(stored("10", Some("u1")))),
            ]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert_eq!(
            api.take_calls(),
            [
                "PUT rv=5 owner=u1",
                "GET lease",
                "PUT rv=6 owner=u1",
                "GET lease",
                "GET lease",
                "PUT rv=8 owner=u1",
                "GET lease",
                "PUT rv=9 owner=u1",
                "GET lease"
            ]
        );
        assert!(matches!(result, Renewal::Failed(LeaseError::Conflict(_))));
    }

    #[test]
    fn zero_retries_still_put_once() {
        let (mut r, _) = renewer(0);
        let api = FakeLeaseApi {
            updates: queue(vec![Ok(stored("6", Some("u1")))]),
            ..Default::default()
        };
        assert!(matches!(
            r.probe(&api, Some(&stored("5", Some("u1")))),
            Renewal::Renewed(_)
        ));
        assert_eq!(api.take_calls(), ["PUT rv=5 owner=u1"]);
    }

    #[test]
    fn the_owner_reference_is_looked_up_once_and_then_kept() {
        let (mut r, _) = renewer(3);
        // kubelet's own lease, without an owner: the first renewal adds the Node.
        let api = FakeLeaseApi {
            nodes: queue(vec![Ok(Some(node("u1")))]),
            updates: queue(vec![
                Err(LeaseError::no_answer("timeout")),
                Ok(stored("6", Some("u1"))),
                Ok(stored("7", Some("u1"))),
            ]),
            ..Default::default()
        };
        let Renewal::Renewed(current) = r.probe(&api, Some(&stored("5", None))) else {
            panic!("not renewed")
        };
        assert_eq!(
            api.take_calls(),
            ["GET node", "PUT rv=5 owner=u1", "PUT rv=5 owner=u1"]
        );
        assert!(matches!(r.probe(&api, Some(&current)), Renewal::Renewed(_)));
        assert_eq!(api.take_calls(), ["PUT rv=6 owner=u1"]);
    }

    #[test]
    fn no_lease_is_created_before_the_node_registers() {
        let (mut r, _) = renewer(3);
        let absent = || FakeLeaseApi {
            gets: queue(vec![Ok(None)]),
            nodes: queue(vec![Ok(None)]),
            ..Default::default()
        };
        for _ in 0..2 {
            let api = absent();
            assert_eq!(r.probe(&api, None), Renewal::NodeMissing);
            assert_eq!(api.take_calls(), ["GET lease", "GET node"], "no POST");
        }
        let api = absent();
        assert_eq!(r.probe(&api, None), Renewal::NodeGone);
        let api = absent();
        assert_eq!(r.probe(&api, None), Renewal::NodeGone);
        assert_eq!(api.take_calls(), ["GET node"]);
        // kubelet registers the Node: the lease comes, owned by it.
        let api = FakeLeaseApi {
            nodes: queue(vec![Ok(Some(node("u1")))]),
            gets: queue(vec![Ok(None)]),
            creates: queue(vec![Ok(stored("1", Some("u1")))]),
            ..Default::default()
        };
        assert!(matches!(r.probe(&api, None), Renewal::Renewed(_)));
        assert_eq!(
            api.take_calls(),
            ["GET node", "GET lease", "POST rv=- owner=u1"]
        );
    }

    #[test]
    fn a_base_without_resource_version_is_read_again_before_the_put() {
        let (mut r, _) = renewer(3);
        let mut created_by_kubelet = stored("5", Some("u1"));
        created_by_kubelet["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("resourceVersion");
        let api = FakeLeaseApi {
            gets: queue(vec![Ok(Some(stored("9", Some("u1"))))]),
            updates: queue(vec![Ok(stored("10", Some("u1")))]),
            ..Default::default()
        };
        assert!(matches!(
            r.probe(&api, Some(&created_by_kubelet)),
            Renewal::Renewed(_)
        ));
        assert_eq!(api.take_calls(), ["GET lease", "PUT rv=9 owner=u1"]);
    }

    #[test]
    fn a_deleted_node_is_never_given_a_new_lease_and_renewals_stop() {
        let (mut r, _) = renewer(3);
        let base = stored("5", Some("u1"));
        // The Node was deleted; the garbage collector removed its lease.
        let gone = || FakeLeaseApi {
            updates: queue(vec![
                Err(LeaseError::NotFound("lease".into())),
                Err(LeaseError::NotFound("lease".into())),
                Err(LeaseError::NotFound("lease".into())),
            ]),
            gets: queue(vec![Ok(None)]),
            nodes: queue(vec![Ok(None), Ok(None)]),
            ..Default::default()
        };
        let probe_calls = [
            "PUT rv=5 owner=u1",
            "PUT rv=5 owner=u1",
            "PUT rv=5 owner=u1",
            "GET lease",
            "GET node",
        ];
        for _ in 0..2 {
            let api = gone();
            assert_eq!(r.probe(&api, Some(&base)), Renewal::NodeMissing);
            assert_eq!(api.take_calls(), probe_calls, "no POST for a deleted Node");
            assert!(!r.node_gone());
        }
        let api = gone();
        assert_eq!(r.probe(&api, Some(&base)), Renewal::NodeGone);
        assert_eq!(api.take_calls(), probe_calls);
        assert!(r.node_gone());
        // From now on a probe only asks whether the Node is back.
        let api = gone();
        assert_eq!(r.probe(&api, Some(&base)), Renewal::NodeGone);
        assert_eq!(api.take_calls(), ["GET node"]);
        // It is back (re-registered, new uid): the lease is created again, owned by it.
        let api = FakeLeaseApi {
            nodes: queue(vec![Ok(Some(node("u2")))]),
            updates: queue(vec![Err(LeaseError::NotFound("lease".into()))]),
            gets: queue(vec![Ok(None)]),
            creates: queue(vec![Ok(stored("1", Some("u2")))]),
            ..Default::default()
        };
        assert!(matches!(r.probe(&api, None), Renewal::Renewed(_)));
        assert_eq!(
            api.take_calls(),
            ["GET node", "GET lease", "POST rv=- owner=u2"]
        );
        assert!(!r.node_gone());
    }

    #[test]
    fn a_node_missing_once_between_successes_does_not_count_as_gone() {
        let (mut r, _) = renewer(1);
        let base = stored("5", None);
        for found in [false, false, true, false, false, true] {
            let api = FakeLeaseApi {
                nodes: queue(vec![Ok(found.then(|| node("u1")))]),
                updates: queue(vec![Ok(stored("6", None))]),
                ..Default::default()
            };
            assert!(matches!(r.probe(&api, Some(&base)), Renewal::Renewed(_)));
        }
        assert!(!r.node_gone());
    }

    #[test]
    fn a_forbidden_request_ends_the_probe_at_once() {
        let (mut r, _) = renewer(3);
        let api = FakeLeaseApi {
            updates: queue(vec![Err(LeaseError::Forbidden("no".into()))]),
            ..Default::default()
        };
        let result = r.probe(&api, Some(&stored("5", Some("u1"))));
        assert!(matches!(result, Renewal::Failed(LeaseError::Forbidden(_))));
        assert_eq!(
            api.take_calls(),
            ["PUT rv=5 owner=u1"],
            "asking again is refused again"
        );
        // Without a base: the GET refused, no backoff, no retry.
        let api = FakeLeaseApi {
            gets: queue(vec![Err(LeaseError::Forbidden("no".into()))]),
            ..Default::default()
        };
        assert!(matches!(
            r.probe(&api, None),
            Renewal::Failed(LeaseError::Forbidden(_))
        ));
        assert_eq!(api.take_calls(), ["GET lease"]);
    }
}
