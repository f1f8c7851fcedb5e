//! The health checker of lease mode (YurtHub's `pkg/yurthub/healthchecker/cloudapiserver`): a
//! server is healthy when the hub can renew the node lease through it.
//!
//! One thread for all servers, since the lease is one object of the cluster. Every
//! `--heartbeat-interval-seconds` a round starts at the server after the one that began the
//! last round and stops at the first renewal, so the lease is renewed at most once per tick;
//! a server not probed keeps its state. One failed probe (its `--heartbeat-failed-retry` PUTs
//! are inside it) makes a server unhealthy; `--heartbeat-healthy-threshold` successes in a row
//! make it healthy again. A server already unhealthy answers `/readyz` before it is asked to
//! renew, so a dead one costs a round one request timeout, not a whole renewal (~15 s with
//! the defaults): the rounds stay well within the lease's 40 s.
//!
//! A request that fails in transport wakes a probe of its server at once, as in `/readyz`
//! mode ([`Backends::report_failure`]); that probe is `/readyz` (a lease write per failed
//! request would load etcd for nothing), and an overdue tick goes first.
//!
//! While kubelet is silent past `--kubelet-health-grace-period` (or has not asked at all
//! within [`FIRST_REQUEST_GRACE`] of the start), nothing is renewed: the lease must expire so
//! the node goes NotReady. Servers are then judged by `/readyz` with its retry rule, so
//! kube-proxy and the rest keep the cloud (YurtHub marks every server unhealthy, #420). So
//! are servers that refuse the renewal (403: an identity that may not write the lease). A
//! deleted Node's 404 is an answer of the server: healthy, nothing renewed.

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};
use serde_json::Value;

use super::NodeHeartbeat;
use super::local::{PERSIST_EVERY, PersistPolicy};
use super::renew::{LeaseApi, LeaseError, Renewal, Renewer};
use crate::cache::writer::CacheTx;
use crate::config::Heartbeat;
use crate::health::{self, Backends, Probe, ProbeError};
use crate::metrics::{METRICS, Metrics};

/// How long kubelet may take to send its first lease request after the hub starts before it
/// counts as stopped (a kubelet that crash-loops after a reboot must not be kept Ready).
pub(crate) const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(300);

/// How often a refused renewal (403) is logged again.
const FORBIDDEN_LOG_EVERY: Duration = Duration::from_secs(600);

/// Where renewed leases go to reach the disk.
pub(crate) trait LeaseSink: Send {
    /// Queues `lease` (JSON) for the disk; false when it could not be queued.
    fn write(&self, lease: Vec<u8>) -> bool;
}

impl LeaseSink for CacheTx {
    fn write(&self, lease: Vec<u8>) -> bool {
        self.put(super::lease_collection(), lease)
    }
}

/// Why a lease-mode probe found its server unhealthy.
#[derive(Debug, Clone, PartialEq)]
enum Unhealthy {
    /// `/readyz` failed (asked while nothing is renewed, before a renewal through a server
    /// already unhealthy, after a refused renewal, or on a wake).
    Readyz(ProbeError),
    /// The renewal through the server failed (a 403 excepted: then `/readyz` judges).
    Renewal(LeaseError),
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unhealthy::Readyz(e) => e.fmt(f),
            Unhealthy::Renewal(e) => write!(f, "renewing the node lease: {e}"),
        }
    }
}

/// The lease-mode checker; [`LeaseChecker::spawn`] runs it.
pub(crate) struct LeaseChecker {
    backends: Arc<Backends>,
    node: Arc<NodeHeartbeat>,
    /// The lease requests through each server, in `--server-addr` order.
    servers: Vec<Box<dyn LeaseApi + Send>>,
    /// `/readyz`, while nothing is renewed.
    readyz: Arc<dyn Probe>,
    renewer: Renewer,
    settings: Heartbeat,
    persist: PersistPolicy,
    sink: Option<Box<dyn LeaseSink>>,
    /// The server that starts the next round.
    next: usize,
    /// Successful probes in a row, per server.
    successes: Vec<u32>,
    /// Kubelet was silent at the last probe (its transitions are logged).
    kubelet_silent: bool,
    /// When a refused renewal (403) was last logged.
    forbidden_logged: Option<Instant>,
}

impl LeaseChecker {
    /// A checker of `backends`, renewing through `servers` (one per backend, same order);
    /// renewed leases go to `sink` (none without a cache).
    pub(crate) fn new(
        backends: Arc<Backends>,
        node: Arc<NodeHeartbeat>,
        servers: Vec<Box<dyn LeaseApi + Send>>,
        readyz: Arc<dyn Probe>,
        renewer: Renewer,
        settings: Heartbeat,
        sink: Option<Box<dyn LeaseSink>>,
    ) -> LeaseChecker {
        let successes = vec![0; servers.len()];
        LeaseChecker {
            backends,
            node,
            servers,
            readyz,
            renewer,
            settings,
            persist: PersistPolicy::new(PERSIST_EVERY),
            sink,
            next: 0,
            successes,
            kubelet_silent: false,
            forbidden_logged: None,
        }
    }

    /// Starts from the lease kept on disk (read at start-up): kubelet gets it until the first
    /// renewal, and it counts as written.
    pub(crate) fn restore(&mut self, stored: Value, now: Instant) {
        self.persist.persisted(&stored, now);
        self.node.lease.set(stored);
    }

    /// One tick: a round from the next server in rotation, ending at the first success.
    pub(crate) fn tick(&mut self, now: Instant) {
        let n = self.servers.len();
        for _ in 0..n {
            let index = self.next;
            self.next = (index + 1) % n;
            let reports = self.backends.reports(index);
            let result = self.probe(index, now);
            let ok = result.is_ok();
            self.judge(index, result, reports);
            if ok {
                break;
            }
        }
    }

    /// A request to server `index` failed in transport: `/readyz` now. A wake left over from
    /// before the server was found unhealthy is dropped: its next tick judges it, and a
    /// success here would count towards the threshold within milliseconds of another.
    pub(crate) fn woken(&mut self, index: usize) {
        if !self.backends.is_healthy(index) {
            return;
        }
        let reports = self.backends.reports(index);
        let result = self.readyz(index);
        self.judge(index, result, reports);
    }

    /// Runs the checker on its own thread until `stop` sends or closes. Its first round
    /// starts at once: the servers' state at start-up comes from `/readyz`
    /// ([`crate::health::probe_all_once`]), which a black-holed server answers within one
    /// timeout, where a renewal would keep the hub from serving for ~15 s.
    pub(crate) fn spawn(mut self, stop: Receiver<()>) -> std::io::Result<thread::JoinHandle<()>> {
        thread::Builder::new()
            .name("heartbeat".into())
            .stack_size(crate::SMALL_STACK)
            .spawn(move || self.run(&stop))
    }

    fn run(&mut self, stop: &Receiver<()>) {
        let wakes: Vec<Receiver<()>> = (0..self.servers.len())
            .map(|index| self.backends.wake_receiver(index))
            .collect();
        let interval = self.settings.interval;
        let mut next_tick = Instant::now();
        loop {
            if Instant::now() >= next_tick {
                self.tick(Instant::now());
                // After a round longer than the interval, the next comes an interval after
                // it ends: never back to back.
                let after = Instant::now();
                next_tick += interval;
                if next_tick <= after {
                    next_tick = after + interval;
                }
                continue;
            }
            let mut select = Select::new();
            select.recv(stop);
            for wake in &wakes {
                select.recv(wake);
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            // A round went deep (a request, at times a TLS handshake); the wait is shallow and
            // most of the thread's life: the pages below it go back (one system call a round).
            crate::alloc::trim_stack();
            match select.select_timeout(wait) {
                // The tick is due: the loop's top runs it.
                Err(_) => {}
                Ok(op) if op.index() == 0 => {
                    let _ = op.recv(stop);
                    return;
                }
                Ok(op) => {
                    let index = op.index() - 1;
                    let _ = op.recv(&wakes[index]);
                    self.woken(index);
                }
            }
        }
    }

    /// Records the verdict `result` of a probe of server `index` that began when its failure
    /// count was `reports` ([`Backends::judge`]: the thresholds of `/readyz` mode too).
    fn judge(&mut self, index: usize, result: Result<(), Unhealthy>, reports: u64) {
        if let Err(why) = &result {
            let base = &self.backends.get(index).base;
            if self.backends.is_healthy(index) {
                log::warn!("cloud server probe failed server=\"{base}\" err=\"{why}\"");
            } else {
                log::debug!("cloud server still unhealthy server=\"{base}\" err=\"{why}\"");
            }
        }
        let threshold = self.settings.healthy_threshold;
        let streak = &mut self.successes[index];
        self.backends
            .judge(index, result.is_ok(), reports, streak, threshold);
    }

    /// `/readyz` of server `index` by its own retry rule.
    fn readyz(&self, index: usize) -> Result<(), Unhealthy> {
        let healthy = self.backends.is_healthy(index);
        let base = &self.backends.get(index).base;
        health::readyz_round(self.readyz.as_ref(), base, &self.settings, healthy)
            .map_err(Unhealthy::Readyz)
    }

    /// One probe of server `index`: a renewal, or `/readyz` while nothing is renewed.
    fn probe(&mut self, index: usize, now: Instant) -> Result<(), Unhealthy> {
        let silent = self
            .node
            .kubelet
            .stopped(now, self.node.grace, FIRST_REQUEST_GRACE);
        if silent != self.kubelet_silent {
            self.kubelet_silent = silent;
            if silent {
                let since = match self.node.kubelet.last_seen() {
                    Some(_) => format!("in {:?}", self.node.grace),
                    None => format!("since the hub started {FIRST_REQUEST_GRACE:?} ago"),
                };
                log::warn!(
                    "kubelet has not asked for its lease {since}: the hub stops renewing it (the node goes NotReady) and judges servers by /readyz"
                );
            } else {
                log::info!("kubelet asks for its lease again: the hub renews it");
            }
        }
        if silent {
            return self.readyz(index);
        }
        if !self.backends.is_healthy(index) {
            self.readyz(index)?;
        }
        let current = self.node.lease.current();
        match self
            .renewer
            .probe(self.servers[index].as_ref(), current.as_deref())
        {
            Renewal::Renewed(lease) => {
                Metrics::inc(&METRICS.lease_renewals);
                self.keep(lease, now);
                Ok(())
            }
            Renewal::Failed(LeaseError::Forbidden(why)) => {
                Metrics::inc(&METRICS.lease_renewal_failures);
                let due = self
                    .forbidden_logged
                    .is_none_or(|at| now.saturating_duration_since(at) >= FORBIDDEN_LOG_EVERY);
                if due {
                    self.forbidden_logged = Some(now);
                    log::error!(
                        "the cloud refuses the hub's renewal of the node lease (403: {why}): servers are judged by /readyz and the node's lease is not renewed; an identity that may not write it needs --heartbeat-mode=readyz"
                    );
                }
                self.readyz(index)
            }
            Renewal::Failed(e) => {
                Metrics::inc(&METRICS.lease_renewal_failures);
                Err(Unhealthy::Renewal(e))
            }
            // The server answered (the Node is deleted): nothing to renew.
            Renewal::NodeMissing | Renewal::NodeGone => Ok(()),
        }
    }

    /// Makes `lease` the current one and sends it to disk when the policy says so.
    fn keep(&mut self, lease: Value, now: Instant) {
        let write = self.sink.is_some() && self.persist.after_renewal(&lease, now);
        let bytes = write.then(|| lease.to_string().into_bytes());
        self.node.lease.set(lease);
        if let (Some(bytes), Some(sink)) = (bytes, &self.sink) {
            if sink.write(bytes) {
                Metrics::inc(&METRICS.lease_disk_writes);
            } else {
                log::debug!("the renewed node lease was not queued for the disk (writer busy)");
                self.persist.forget();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;
    use crate::config::LbMode;
    use crate::heartbeat::renew::{NODE_GONE_AFTER, RenewSettings};
    use crate::upstream::UpstreamError;

    /// The cluster's lease and Node, as every server sees them.
    #[derive(Default)]
    struct Cluster {
        lease: Mutex<Option<Value>>,
        rv: AtomicUsize,
        node_deleted: AtomicBool,
        /// Every lease and Node request is refused with 403.
        refuse: AtomicBool,
        /// Every request, as "server verb".
        calls: Mutex<Vec<String>>,
    }

    /// One apiserver of the cluster; `up` false refuses every request.
    struct Server {
        name: &'static str,
        up: Arc<AtomicBool>,
        cluster: Arc<Cluster>,
    }

    impl Server {
        fn call(&self, verb: &str) -> Result<(), LeaseError> {
            let mut calls = self.cluster.calls.lock().unwrap();
            calls.push(format!("{} {verb}", self.name));
            if self.cluster.refuse.load(Ordering::SeqCst) {
                return Err(LeaseError::Forbidden("leases are not yours".into()));
            }
            if self.up.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(LeaseError::no_answer("connection refused"))
            }
        }

        fn store(&self, lease: &Value) -> Value {
            let mut stored = lease.clone();
            let rv = self.cluster.rv.fetch_add(1, Ordering::SeqCst) + 1;
            stored["metadata"]["resourceVersion"] = json!(rv.to_string());
            if stored["metadata"]["uid"].is_null() {
                stored["metadata"]["uid"] = json!(format!("lease-{rv}"));
            }
            *self.cluster.lease.lock().unwrap() = Some(stored.clone());
            stored
        }
    }

    impl LeaseApi for Server {
        fn get_lease(&self) -> Result<Option<Value>, LeaseError> {
            self.call("get-lease")?;
            Ok(self.cluster.lease.lock().unwrap().clone())
        }
        fn create_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
            self.call("create")?;
            Ok(self.store(lease))
        }
        fn update_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
            self.call("put")?;
            let current = self.cluster.lease.lock().unwrap().clone();
            match current {
                // The apiserver creates on update, but the body's uid is a precondition.
                None if !lease["metadata"]["uid"].is_null() => Err(LeaseError::Conflict(
                    "Precondition failed: UID in precondition".into(),
                )),
                None => Ok(self.store(lease)),
                Some(c)
                    if c["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] =>
                {
                    Err(LeaseError::Conflict("stale".into()))
                }
                Some(_) => Ok(self.store(lease)),
            }
        }
        fn get_node(&self) -> Result<Option<Value>, LeaseError> {
            self.call("get-node")?;
            Ok((!self.cluster.node_deleted.load(Ordering::SeqCst))
                .then(|| json!({"metadata":{"name":"edge-1","uid":"node-uid"}})))
        }
    }

    /// `/readyz` of every server: up or not by the same flags, counting its calls.
    struct Readyz {
        up: Vec<Arc<AtomicBool>>,
        calls: AtomicUsize,
    }

    impl Probe for Readyz {
        fn probe(&self, base: &str, _: Duration) -> Result<(), ProbeError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let index = if base.contains("b1") { 1 } else { 0 };
            if self.up[index].load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(ProbeError::Answered(503))
            }
        }
    }

    /// Counts the leases sent to disk.
    struct Disk(Arc<Mutex<Vec<Value>>>);

    impl LeaseSink for Disk {
        fn write(&self, lease: Vec<u8>) -> bool {
            let value = serde_json::from_slice(&lease).expect("JSON");
            self.0.lock().unwrap().push(value);
            true
        }
    }

    struct Rig {
        checker: LeaseChecker,
        backends: Arc<Backends>,
        node: Arc<NodeHeartbeat>,
        cluster: Arc<Cluster>,
        up: Vec<Arc<AtomicBool>>,
        readyz: Arc<Readyz>,
        disk: Arc<Mutex<Vec<Value>>>,
    }

    impl Rig {
        fn calls(&self) -> Vec<String> {
            std::mem::take(&mut *self.cluster.calls.lock().unwrap())
        }

        /// A tick with kubelet asking for its lease just before, as every 10 s.
        fn tick(&mut self, now: Instant) {
            self.node.kubelet.record(now);
            self.checker.tick(now);
        }
    }

    fn rig(servers: usize) -> Rig {
        let backends = Arc::new(Backends::new(
            (0..servers).map(|i| format!("https://b{i}:6443")).collect(),
            LbMode::RoundRobin,
        ));
        let node = Arc::new(NodeHeartbeat::new("edge-1", Duration::from_secs(40)));
        let cluster = Arc::new(Cluster::default());
        let names = ["s0", "s1"];
        let up: Vec<_> = (0..servers)
            .map(|_| Arc::new(AtomicBool::new(true)))
            .collect();
        let apis: Vec<Box<dyn LeaseApi + Send>> = (0..servers)
            .map(|i| {
                Box::new(Server {
                    name: names[i],
                    up: Arc::clone(&up[i]),
                    cluster: Arc::clone(&cluster),
                }) as Box<dyn LeaseApi + Send>
            })
            .collect();
        let readyz = Arc::new(Readyz {
            up: up.clone(),
            calls: AtomicUsize::new(0),
        });
        let renewer = Renewer::with_clock(
            RenewSettings {
                node: "edge-1".into(),
                grace: Duration::from_secs(40),
                failed_retry: 3,
                node_gone_after: NODE_GONE_AFTER,
            },
            Box::new(|_| {}),
            Box::new(SystemTime::now),
        );
        let disk = Arc::new(Mutex::new(Vec::new()));
        let settings = Heartbeat {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            failed_retry: 3,
            healthy_threshold: 2,
        };
        let checker = LeaseChecker::new(
            Arc::clone(&backends),
            Arc::clone(&node),
            apis,
            Arc::clone(&readyz) as Arc<dyn Probe>,
            renewer,
            settings,
            Some(Box::new(Disk(Arc::clone(&disk)))),
        );
        Rig {
            checker,
            backends,
            node,
            cluster,
            up,
            readyz,
            disk,
        }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn each_tick_renews_once_through_the_next_server_in_rotation() {
        let mut r = rig(2);
        let t0 = Instant::now();
        r.tick(t0);
        // A fresh cluster: GET finds nothing, the Node is looked up, the lease created.
        assert_eq!(r.calls(), ["s0 get-lease", "s0 get-node", "s0 create"]);
        let created = r
            .node
            .lease
            .current()
            .expect("the created lease is current");
        assert_eq!(created["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "node-uid");
        r.tick(secs(t0, 10));
        assert_eq!(r.calls(), ["s1 put"]);
        r.tick(secs(t0, 20));
        assert_eq!(r.calls(), ["s0 put"]);
        r.tick(secs(t0, 30));
        assert_eq!(r.calls(), ["s1 put"]);
        let current = r.node.lease.current().expect("renewed");
        assert_eq!(current["metadata"]["resourceVersion"], "4");
        assert!(r.backends.is_healthy(0) && r.backends.is_healthy(1));
    }

    #[test]
    fn one_failed_probe_is_unhealthy_and_the_threshold_brings_it_back() {
        let mut r = rig(2);
        let t0 = Instant::now();
        r.tick(t0); // s0
        r.tick(secs(t0, 5)); // s1
        r.calls();
        r.up[0].store(false, Ordering::SeqCst);
        // The round fails on s0 (3 PUTs, 4 GETs) and renews through s1 in the same tick.
        r.tick(secs(t0, 10));
        let calls = r.calls();
        assert_eq!(calls.iter().filter(|c| c.starts_with("s0")).count(), 7);
        assert_eq!(calls.last().map(String::as_str), Some("s1 put"));
        assert!(!r.backends.is_healthy(0), "one failed probe is enough");
        assert!(r.backends.any_healthy());
        r.up[0].store(true, Ordering::SeqCst);
        // Each probe moves the rotation on: s0 starts the next round. Two successes in a
        // row make it healthy again.
        r.tick(secs(t0, 20)); // s0: 1 of 2
        assert!(!r.backends.is_healthy(0));
        assert_eq!(r.calls(), ["s0 put"]);
        r.tick(secs(t0, 30)); // s1
        r.tick(secs(t0, 40)); // s0: 2 of 2
        assert!(r.backends.is_healthy(0));
    }

    #[test]
    fn a_silent_kubelet_stops_the_renewals_but_not_the_cloud() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.tick(t0);
        r.tick(secs(t0, 10));
        assert_eq!(
            r.calls(),
            ["s0 get-lease", "s0 get-node", "s0 create", "s0 put"]
        );
        // kubelet's last request was at 10 s; past the 40 s grace period: /readyz only, and
        // the server stays healthy.
        r.checker.tick(secs(t0, 51));
        assert!(r.calls().is_empty(), "nothing renewed");
        assert_eq!(r.readyz.calls.load(Ordering::SeqCst), 1);
        assert!(r.backends.any_healthy(), "kube-proxy keeps the cloud");
        // A dead cloud still shows through /readyz, after its retries.
        r.up[0].store(false, Ordering::SeqCst);
        r.checker.tick(secs(t0, 60));
        assert!(!r.backends.any_healthy());
        assert_eq!(r.readyz.calls.load(Ordering::SeqCst), 1 + 4);
        r.up[0].store(true, Ordering::SeqCst);
        // kubelet back: renewals again.
        r.tick(secs(t0, 70));
        assert_eq!(r.calls(), ["s0 put"]);
    }

    #[test]
    fn a_kubelet_that_never_asks_stops_the_renewals_after_the_first_grace() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.checker.tick(t0);
        assert_eq!(r.calls(), ["s0 get-lease", "s0 get-node", "s0 create"]);
        r.checker
            .tick(t0 + FIRST_REQUEST_GRACE + Duration::from_secs(10));
        assert!(r.calls().is_empty(), "nothing renewed");
        assert!(r.backends.any_healthy());
    }

    #[test]
    fn a_refused_renewal_is_judged_by_readyz_and_asked_once() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.tick(t0);
        r.calls();
        r.cluster.refuse.store(true, Ordering::SeqCst);
        r.tick(secs(t0, 10));
        assert_eq!(r.calls(), ["s0 put"], "a 403 is not asked again");
        assert!(r.backends.any_healthy(), "the server answers /readyz");
        assert_eq!(r.readyz.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_dead_unhealthy_server_costs_a_round_one_readyz() {
        let mut r = rig(2);
        let t0 = Instant::now();
        r.tick(t0); // s0
        r.up[0].store(false, Ordering::SeqCst);
        r.tick(secs(t0, 10)); // s1
        r.tick(secs(t0, 20)); // s0 fails its renewal, s1 renews
        assert!(!r.backends.is_healthy(0));
        r.calls();
        r.tick(secs(t0, 30)); // s1
        r.tick(secs(t0, 40)); // s0: /readyz only, then s1
        assert_eq!(r.calls(), ["s1 put", "s1 put"]);
        assert!(!r.backends.is_healthy(0));
    }

    #[test]
    fn a_wake_asks_readyz_and_writes_no_lease() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.tick(t0);
        r.calls();
        r.backends.report_failure(0);
        assert!(!r.backends.any_healthy(), "suspect");
        r.checker.woken(0);
        assert!(r.calls().is_empty());
        assert_eq!(r.readyz.calls.load(Ordering::SeqCst), 1);
        assert!(
            r.backends.any_healthy(),
            "its /readyz cleared the suspicion"
        );
        // A wake left over once the server was found dead counts for nothing.
        r.backends.set_healthy(0, false);
        r.checker.woken(0);
        assert_eq!(r.readyz.calls.load(Ordering::SeqCst), 1);
        assert!(!r.backends.is_healthy(0));
    }

    #[test]
    fn a_deleted_node_is_not_renewed_and_its_server_stays_healthy() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.tick(t0);
        r.calls();
        r.cluster.node_deleted.store(true, Ordering::SeqCst);
        *r.cluster.lease.lock().unwrap() = None; // garbage-collected with its owner
        for tick in 1..=10 {
            r.tick(secs(t0, 10 * tick));
            assert!(r.backends.any_healthy(), "tick {tick}");
        }
        let calls = r.calls();
        assert!(!calls.iter().any(|c| c.ends_with("create")), "{calls:?}");
        // Once counted gone, a probe only asks for the Node.
        assert_eq!(calls.last().map(String::as_str), Some("s0 get-node"));
    }

    /// The figure of the closing note: with the default 10 s interval, ten minutes of
    /// renewals write the lease file twice (at start and after 10 minutes), an hour 6 times;
    /// YurtHub writes on every renewal (61 and 360).
    #[test]
    fn ten_minutes_of_renewals_write_the_lease_twice() {
        let mut r = rig(1);
        let t0 = Instant::now();
        r.tick(t0);
        for tick in 1..=60 {
            r.tick(secs(t0, 10 * tick));
        }
        let renewals = r.cluster.rv.load(Ordering::SeqCst);
        assert_eq!(renewals, 61, "one renewal per tick");
        let written: Vec<_> = r.disk.lock().unwrap().clone();
        assert_eq!(written.len(), 2, "writes in 10 minutes");
        assert_eq!(written[1]["metadata"]["resourceVersion"], "61");
        for tick in 61..360 {
            r.tick(secs(t0, 10 * tick));
        }
        assert_eq!(r.disk.lock().unwrap().len(), 6, "writes in an hour");
        // The disk copy is a whole lease kubelet can be answered with after a reboot.
        assert_eq!(written[0]["kind"], "Lease");
    }

    #[test]
    fn a_lease_restored_from_disk_answers_at_once_and_is_not_written_again() {
        let mut r = rig(1);
        let t0 = Instant::now();
        let stored = json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"edge-1","namespace":"kube-node-lease","resourceVersion":"0","uid":"l1",
                "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"edge-1","uid":"node-uid"}]},
            "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40,
                "renewTime":"2026-12-01T00:00:00.000000Z"}});
        r.checker.restore(stored.clone(), t0);
        assert_eq!(r.node.lease.current().as_deref(), Some(&stored));
        // The cloud holds the same lease: the PUT from the restored copy works at once.
        *r.cluster.lease.lock().unwrap() = Some(stored);
        r.tick(t0);
        assert_eq!(r.calls(), ["s0 put"]);
        assert!(
            r.disk.lock().unwrap().is_empty(),
            "only the renewal stamp changed"
        );
    }

    #[test]
    fn a_failed_probe_is_logged_as_before_without_repeating_the_server() {
        let refused = UpstreamError::Transport {
            server: "https://10.0.0.1:6443".into(),
            detail: "io: Connection refused".into(),
            timeout: false,
            maybe_sent: false,
        };
        let cases = [
            (
                Unhealthy::Renewal(LeaseError::Transport(refused.clone())),
                "renewing the node lease: no answer: io: Connection refused",
            ),
            (
                Unhealthy::Renewal(LeaseError::Status {
                    code: 500,
                    message: "etcd".into(),
                }),
                "renewing the node lease: HTTP 500: etcd",
            ),
            (
                Unhealthy::Readyz(ProbeError::NoAnswer(refused)),
                "io: Connection refused",
            ),
            (
                Unhealthy::Readyz(ProbeError::Answered(500)),
                "health probe answered 500",
            ),
        ];
        for (unhealthy, text) in cases {
            assert_eq!(unhealthy.to_string(), text);
        }
    }
}
