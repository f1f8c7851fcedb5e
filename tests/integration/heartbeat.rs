//! The node heartbeat in edge mode (issue 15, YurtHub's
//! `pkg/yurthub/healthchecker/cloudapiserver`), with the real hub and the stand-in cloud: kubelet's
//! lease requests are answered by the hub and never reach the cloud, while the hub renews the node
//! lease every interval; a silent kubelet stops the renewals but not kube-proxy's cloud; a conflict
//! is read again and renewed; kubelet is answered after an offline start and after an offline
//! reboot; the lease file is written once, not at every renewal.

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::{
    Hub, HubSpec, KUBELET, TempDir, call, emulated, eventually, get, health_series,
};
use crate::support::proto_lease::encode_lease;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";
const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// kubelet's Accept for its heartbeat client.
const KUBELET_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
}

/// A cloud with Node `edge-1` and a hub (the tests' 1 s heartbeat, plus `flags`) that has
/// created the node lease.
fn renewing(flags: &[&str]) -> (Cloud, TempDir, Hub) {
    let cloud = Cloud::start();
    cloud.node("edge-1", None, &[]);
    let dir = TempDir::new("heartbeat");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(flags));
    assert!(
        eventually(Duration::from_secs(30), || cloud.lease("edge-1").is_some()),
        "the hub never created the node lease\n{}",
        hub.logs()
    );
    (cloud, dir, hub)
}

/// Lease writes the cloud took from the hub.
fn renewals(cloud: &Cloud) -> usize {
    cloud
        .lease_writes("tinyhub/")
        .iter()
        .filter(|r| matches!(r.status, Some(200 | 201)))
        .count()
}

/// kubelet's lease requests that reached the cloud.
fn kubelet_lease_requests(cloud: &Cloud) -> usize {
    cloud.count(|r| r.user_agent.starts_with("kubelet/") && r.path.starts_with(LEASES))
}

fn lease_file(hub: &Hub) -> PathBuf {
    hub.spec
        .cache_dir
        .join("kubelet/leases.v1.coordination.k8s.io/kube-node-lease/edge-1")
}

/// kubelet's GET of its lease through the hub, as kubelet asks (protobuf preferred).
fn kubelet_get(hub: &Hub) -> crate::support::hub::Reply {
    let url = format!("{}{LEASE}", hub.url());
    call("GET", &url, KUBELET, &[("Accept", KUBELET_ACCEPT)], None)
}

/// kubelet's PUT of `lease` through the hub.
fn kubelet_put(hub: &Hub, lease: &Value) -> crate::support::hub::Reply {
    let url = format!("{}{LEASE}", hub.url());
    let body = lease.to_string();
    call(
        "PUT",
        &url,
        KUBELET,
        &[
            ("Content-Type", "application/json"),
            ("Accept", KUBELET_ACCEPT),
        ],
        Some(body.as_bytes()),
    )
}

#[test]
fn kubelet_lease_requests_never_reach_the_cloud_which_sees_a_renewal_every_interval() {
    let (cloud, _dir, hub) = renewing(&[]);
    let created = cloud.lease("edge-1").expect("created");
    let uid = cloud.node_uid("edge-1").expect("the node has a uid");
    assert_eq!(created["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );
    assert_eq!(created["spec"]["holderIdentity"], "edge-1");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 40);

    // kubelet renews every 10 s through the hub; here every 300 ms for 5 s, each a GET and a
    // PUT of what it got (with a stale stamp).
    let from = renewals(&cloud);
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_secs(5) {
        // The cloud stores a renewal a moment before the hub has its answer.
        let newest = rv(&cloud.lease("edge-1").expect("the lease"));
        assert!(
            eventually(Duration::from_secs(5), || rv(&kubelet_get(&hub).json())
                >= newest),
            "kubelet gets the newest renewed lease, not a stale copy"
        );
        let got = kubelet_get(&hub);
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.header("content-type"), Some("application/json"));
        let mut lease = got.json();
        lease["spec"]["renewTime"] = json!("2020-01-01T00:00:00.000000Z");
        let put = kubelet_put(&hub, &lease);
        assert_eq!(put.status, 200, "{}", put.text());
        let answer = put.json();
        assert_eq!(answer["kind"], "Lease");
        assert_ne!(
            answer["spec"]["renewTime"], "2020-01-01T00:00:00.000000Z",
            "the answer is the hub's lease, not kubelet's body"
        );
        seen.push(rv(&answer));
        thread::sleep(Duration::from_millis(300));
    }
    let renewed = renewals(&cloud) - from;
    assert_eq!(
        kubelet_lease_requests(&cloud),
        0,
        "a kubelet lease request reached the cloud"
    );
    // One renewal per 1 s tick, never more: the window holds about five.
    let least = if emulated() { 1 } else { 3 };
    assert!(
        (least..=7).contains(&renewed),
        "{renewed} renewals in 5 s\n{}",
        hub.logs()
    );
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(
        seen.last() > seen.first(),
        "kubelet saw the renewals: {seen:?}"
    );
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));

    // Deletes are refused, as YurtHub's local answer; the lease stays.
    let url = format!("{}{LEASE}", hub.url());
    let deleted = call("DELETE", &url, KUBELET, &[], None);
    assert_eq!(deleted.status, 403, "{}", deleted.text());
    assert_eq!(deleted.json()["reason"], "Forbidden");
    assert!(cloud.lease("edge-1").is_some());
    assert_eq!(kubelet_lease_requests(&cloud), 0);
}

#[test]
fn a_silent_kubelet_stops_the_renewals_within_the_grace_period_and_kube_proxy_keeps_the_cloud() {
    let (cloud, _dir, hub) = renewing(&["--kubelet-health-grace-period=3s"]);
    let from = renewals(&cloud);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert_eq!(kubelet_get(&hub).status, 200);
        thread::sleep(Duration::from_millis(300));
    }
    let silent_from = Instant::now();
    // Note when the last renewal reaches the cloud, over twice the grace period.
    let (mut count, mut last) = (renewals(&cloud), silent_from);
    while silent_from.elapsed() < Duration::from_secs(8) {
        let now = renewals(&cloud);
        if now != count {
            (count, last) = (now, Instant::now());
        }
        thread::sleep(Duration::from_millis(50));
    }
    assert!(count > from, "renewed while kubelet asked\n{}", hub.logs());
    let stopped_after = last.saturating_duration_since(silent_from);
    eprintln!("the last renewal came {stopped_after:?} after kubelet's last lease request");
    // The grace period (3 s) plus one interval (1 s); the bound adds a second for the probe
    // in flight and this loop's polling.
    let bound = Duration::from_secs(if emulated() { 7 } else { 5 });
    assert!(
        stopped_after <= bound,
        "renewals went on {stopped_after:?} after kubelet stopped\n{}",
        hub.logs()
    );
    assert!(hub.wait_log(
        "kubelet has not asked for its lease",
        Duration::from_secs(1)
    ));

    // The cloud stays healthy for the others: kube-proxy's list is forwarded (of ConfigMaps:
    // its lists of Services are served from the node's shared watch cache, issue 16).
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));
    let before = cloud.count(|r| r.user_agent.starts_with("kube-proxy/"));
    let configmaps = get(
        &format!("{}/api/v1/namespaces/kube-system/configmaps", hub.url()),
        KUBE_PROXY,
    );
    assert_eq!(configmaps.status, 200, "{}", configmaps.text());
    assert_eq!(
        cloud.count(|r| r.user_agent.starts_with("kube-proxy/")),
        before + 1,
        "kube-proxy's request reached the cloud"
    );

    // kubelet is back: so are the renewals.
    assert_eq!(kubelet_get(&hub).status, 200);
    let back = renewals(&cloud);
    assert!(
        eventually(Duration::from_secs(5), || renewals(&cloud) > back),
        "renewals resume with kubelet\n{}",
        hub.logs()
    );
    assert!(hub.wait_log("kubelet asks for its lease again", Duration::from_secs(1)));
    assert_eq!(kubelet_lease_requests(&cloud), 0);
}

#[test]
fn a_conflict_on_the_renewal_is_read_again_and_renewed() {
    let (cloud, _dir, hub) = renewing(&["--heartbeat-failed-retry=3"]);
    // Wait for a renewal after the create, so the next one starts from the hub's copy.
    assert!(eventually(Duration::from_secs(10), || renewals(&cloud) >= 2));
    cloud.conflict_leases(2);
    // Each 409 is followed by a fresh GET and a PUT from what it read.
    let get = ("GET".to_owned(), Some(200));
    let (put, conflict) = (("PUT".to_owned(), Some(200)), ("PUT".to_owned(), Some(409)));
    let want = [conflict.clone(), get.clone(), conflict.clone(), get, put];
    let heartbeat = || -> Vec<(String, Option<u16>)> {
        cloud
            .requests()
            .into_iter()
            .filter(|r| r.is_heartbeat())
            .map(|r| (r.method, r.status))
            .collect()
    };
    let recovered = |seen: &[(String, Option<u16>)]| {
        seen.iter()
            .position(|r| *r == conflict)
            .and_then(|at| seen.get(at..at + want.len()))
            .is_some_and(|run| run == want)
    };
    assert!(
        eventually(Duration::from_secs(15), || recovered(&heartbeat())),
        "{:?}\n{}",
        heartbeat(),
        hub.logs()
    );
    assert!(
        !hub.logs().contains("cloud server is unhealthy"),
        "a conflict is no failure of the server\n{}",
        hub.logs()
    );
    // kubelet gets what the recovered renewal stored.
    let stored = cloud.lease("edge-1").expect("the lease");
    assert!(eventually(Duration::from_secs(5), || {
        rv(&kubelet_get(&hub).json()) >= rv(&stored)
    }));
}

#[test]
fn offline_from_the_start_kubelet_creates_its_lease_in_protobuf_and_its_renewals_get_200() {
    let cloud = Cloud::start();
    cloud.stop();
    let dir = TempDir::new("heartbeat-offline-start");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // Nothing known: 404, as the apiserver says it, and kubelet creates its lease.
    let first = kubelet_get(&hub);
    assert_eq!(first.status, 404, "{}", first.text());
    assert_eq!(first.json()["reason"], "NotFound");
    let body = encode_lease(
        "edge-1",
        "kube-node-lease",
        "edge-1",
        40,
        1_800_000_000,
        5_000,
        None,
    );
    let created = call(
        "POST",
        &format!("{}{LEASES}", hub.url()),
        KUBELET,
        &[("Content-Type", PROTOBUF), ("Accept", KUBELET_ACCEPT)],
        Some(&body),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.header("content-type"), Some(PROTOBUF));
    assert_eq!(created.body, body, "echoed byte for byte");
    // Its renewals (protobuf PUTs) get the lease it created, as JSON (YurtHub: 404).
    for _ in 0..3 {
        let url = format!("{}{LEASE}", hub.url());
        let put = call(
            "PUT",
            &url,
            KUBELET,
            &[("Content-Type", PROTOBUF), ("Accept", KUBELET_ACCEPT)],
            Some(&body),
        );
        assert_eq!(put.status, 200, "{}", put.text());
        let lease = put.json();
        assert_eq!(lease["kind"], "Lease");
        assert_eq!(lease["metadata"]["name"], "edge-1");
        assert_eq!(lease["spec"]["holderIdentity"], "edge-1");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(lease["spec"]["renewTime"], "2027-01-15T08:00:00.000005Z");
    }
    assert_eq!(hub.metric(&health_series(&cloud)), Some(0.0));
}

#[test]
fn after_an_offline_reboot_kubelet_gets_the_lease_kept_on_disk() {
    let (cloud, _dir, hub) = renewing(&[]);
    let file = lease_file(&hub);
    assert!(
        eventually(Duration::from_secs(10), || file.exists()),
        "the lease never reached the disk\n{}",
        hub.logs()
    );
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("JSON");
    assert_eq!(kept["kind"], "Lease");
    cloud.stop();
    let hub = hub.restart();
    let got = kubelet_get(&hub);
    assert_eq!(got.status, 200, "{}", got.text());
    let lease = got.json();
    assert_eq!(lease["metadata"]["uid"], kept["metadata"]["uid"]);
    assert_eq!(rv(&lease), rv(&kept));
    let put = kubelet_put(&hub, &lease);
    assert_eq!(put.status, 200, "{}", put.text());
    assert_eq!(put.json()["spec"]["holderIdentity"], "edge-1");
    // kubelet's requests wrote nothing: the file is the hub's.
    let after: Value = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("JSON");
    assert_eq!(after, kept);
}

/// Renewals reach the disk only when more than their stamp changed, or every 10 minutes:
/// over a run of renewals the lease file is written once (YurtHub: once per renewal). The
/// 10-minute and hourly figures are counted by `heartbeat::checker`'s unit test.
#[test]
fn renewals_write_the_lease_file_once_not_each_time() {
    let (cloud, _dir, hub) = renewing(&[]);
    let file = lease_file(&hub);
    assert!(eventually(Duration::from_secs(10), || file.exists()));
    // The store replaces a file by renaming a new one over it: a write is a new inode.
    let inode = || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&file).map(|m| m.ino()).ok()
    };
    let first = inode();
    let from = renewals(&cloud);
    let mut writes = 0;
    let mut last = first;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        let now = inode();
        if now != last {
            writes += 1;
            last = now;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let renewed = renewals(&cloud) - from;
    eprintln!("{renewed} renewals, {writes} lease file writes");
    assert!(
        renewed >= if emulated() { 1 } else { 3 },
        "{renewed} renewals"
    );
    assert_eq!(writes, 0, "the lease file was written again by a renewal");
    assert_eq!(
        hub.metric("tinyhub_node_lease_disk_writes_total"),
        Some(1.0)
    );
    assert!(hub.metric("tinyhub_node_lease_renewals_total") >= Some(renewed as f64));
    assert!(
        rv(&cloud.lease("edge-1").expect("lease"))
            > rv(
                &serde_json::from_slice::<Value>(&std::fs::read(&file).expect("read"))
                    .expect("JSON")
            ),
        "the cloud's lease moved on; the file kept the first"
    );
}

#[test]
fn a_deleted_node_gets_no_new_lease_until_it_registers_again() {
    let (cloud, _dir, hub) = renewing(&[]);
    assert!(eventually(Duration::from_secs(10), || renewals(&cloud) >= 2));
    // The stand-in, like the garbage collector, removes the lease the Node owned.
    cloud.delete("nodes", "", "edge-1");
    assert!(cloud.lease("edge-1").is_none());
    let hub_creates = || {
        cloud
            .lease_writes("tinyhub/")
            .iter()
            .filter(|r| r.method == "POST" || r.status == Some(201))
            .count()
    };
    let created_before = hub_creates();
    assert!(
        hub.wait_log("stops renewing its lease", Duration::from_secs(20)),
        "{}",
        hub.logs()
    );
    assert!(
        cloud.lease("edge-1").is_none(),
        "the deleted Node's lease was re-created"
    );
    assert_eq!(hub_creates(), created_before);
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));
    // kubelet registers the Node again: a new lease, owned by the new Node.
    cloud.node("edge-1", None, &[]);
    let uid = cloud.node_uid("edge-1").expect("a uid");
    assert!(
        eventually(Duration::from_secs(20), || {
            cloud
                .lease("edge-1")
                .is_some_and(|l| l["metadata"]["ownerReferences"][0]["uid"] == uid.as_str())
        }),
        "{}",
        hub.logs()
    );
    assert!(hub.wait_log("is back: renewing its lease again", Duration::from_secs(1)));
}

#[test]
fn a_renewal_the_cloud_refuses_leaves_the_servers_to_readyz_and_says_why() {
    let (cloud, _dir, hub) = renewing(&["--heartbeat-failed-retry=3"]);
    cloud.refuse_lease_writes(403, None);
    assert!(
        hub.wait_log(
            "refuses the hub's renewal of the node lease (403",
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    let refused = || {
        cloud
            .lease_writes("tinyhub/")
            .iter()
            .filter(|r| r.status == Some(403))
            .count()
    };
    let from = refused();
    assert!(eventually(Duration::from_secs(10), || refused() >= from + 2));
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));
    let services = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_eq!(services.status, 200, "{}", services.text());
    assert!(
        !hub.logs().contains("cloud server is unhealthy"),
        "{}",
        hub.logs()
    );
    // Asked once per tick, not retried within it (3 PUTs a tick if it were): writes refused
    // ≈ ticks.
    let window = Instant::now();
    let start = refused();
    thread::sleep(Duration::from_secs(3));
    let per_tick = (refused() - start) as f64 / window.elapsed().as_secs_f64();
    assert!(
        per_tick <= 2.0,
        "{per_tick} refused writes per second at a 1 s tick"
    );
}
