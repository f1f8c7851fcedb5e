//! What the writer spends on a big list (issue 34): a list of 1,000 pods of about 5 KB each
//! through the tee's sessions, the decoder and the store, as an edge hub caches a client's
//! list. The tests are ignored: they are the driver of an instruction count, e.g.
//!
//! ```text
//! cargo test --release --lib list_cost -- --ignored --test-threads=1 --exact <name>
//! valgrind --tool=callgrind --toggle-collect='*list_cost*pass*' <test binary> --ignored --exact <name>
//! ```
//!
//! and print what they did, so that a count can be divided by the bytes it covers. Each
//! also checks what the writer left, so the driver cannot silently measure nothing.
//!
//! A list proven unchanged (`unchanged.rs`) needs the memo of an earlier one, which lives as
//! long as the writer's run: `list_cost_unchanged_*` measure a run over a list found stored
//! and its repeat (pass 6) beside a run over the first alone (pass 7); the repeat costs the
//! difference. `list_cost_tee` measures the connection thread's copy of a list into its
//! session, whole (pass 8) and once the writer said it needs no more (pass 9).

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::cache::key::CollectionKey;
use crate::cache::store::Store;
use crate::cache::synced::Synced;
use crate::cache::target::CacheTarget;
use crate::cache::temp_dir::TempDir;
use crate::metrics::METRICS;
use crate::selector::Selectors;

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

/// A pod as the apiserver writes one in a list (no kind or apiVersion), with managed fields,
/// two containers and their statuses: about 5 KB of short strings, names, numbers and
/// nesting, the mix a real pod list has. `rv` is its resourceVersion.
pub(super) fn real_pod(i: usize, rv: u64) -> String {
    let ns = format!("team-{}", i % 7);
    let name = format!("web-7d4b9c8f5-{i:05}x");
    let node = format!("edge-node-{}", i % 3);
    let ip = format!("10.244.{}.{}", (i >> 8) & 255, i & 255);
    let uid = format!("3f2a{i:04x}-9c1e-4d7b-a1b2-0c3d4e5f{i:04x}");
    let t = "2026-12-01T08:15:42Z";
    format!(
        r#"{{"metadata":{{"name":"{name}","generateName":"web-7d4b9c8f5-","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{t}","labels":{{"app.kubernetes.io/name":"web","app.kubernetes.io/instance":"web-{i}","pod-template-hash":"7d4b9c8f5","tier":"frontend"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"{t}","prometheus.io/scrape":"true","prometheus.io/port":"9102"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d4b9c8f5","uid":"b1c2d3e4-f5a6-4789-9abc-def012345678","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"{t}","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:annotations":{{".":{{}},"f:kubectl.kubernetes.io/restartedAt":{{}},"f:prometheus.io/port":{{}},"f:prometheus.io/scrape":{{}}}},"f:generateName":{{}},"f:labels":{{".":{{}},"f:app.kubernetes.io/instance":{{}},"f:app.kubernetes.io/name":{{}},"f:pod-template-hash":{{}},"f:tier":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"b1c2d3e4-f5a6-4789-9abc-def012345678\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"web\"}}":{{".":{{}},"f:env":{{".":{{}},"k:{{\"name\":\"POD_NAME\"}}":{{".":{{}},"f:name":{{}},"f:valueFrom":{{".":{{}},"f:fieldRef":{{}}}}}}}},"f:image":{{}},"f:imagePullPolicy":{{}},"f:livenessProbe":{{".":{{}},"f:failureThreshold":{{}},"f:httpGet":{{".":{{}},"f:path":{{}},"f:port":{{}},"f:scheme":{{}}}},"f:periodSeconds":{{}}}},"f:name":{{}},"f:ports":{{".":{{}},"k:{{\"containerPort\":8080,\"protocol\":\"TCP\"}}":{{".":{{}},"f:containerPort":{{}},"f:name":{{}},"f:protocol":{{}}}}}},"f:resources":{{".":{{}},"f:limits":{{".":{{}},"f:memory":{{}}}},"f:requests":{{".":{{}},"f:cpu":{{}},"f:memory":{{}}}}}}}}}},"f:dnsPolicy":{{}},"f:enableServiceLinks":{{}},"f:restartPolicy":{{}},"f:schedulerName":{{}},"f:securityContext":{{}},"f:terminationGracePeriodSeconds":{{}}}}}}}},{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"{t}","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:conditions":{{"k:{{\"type\":\"ContainersReady\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}},"k:{{\"type\":\"Ready\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}}}},"f:containerStatuses":{{}},"f:hostIP":{{}},"f:phase":{{}},"f:podIP":{{}},"f:podIPs":{{".":{{}},"k:{{\"ip\":\"{ip}\"}}":{{".":{{}},"f:ip":{{}}}}}},"f:startTime":{{}}}}}},"subresource":"status"}}]}},"spec":{{"volumes":[{{"name":"kube-api-access-{i:05}","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}},{{"downwardAPI":{{"items":[{{"path":"namespace","fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.namespace"}}}}]}}}}],"defaultMode":420}}}}],"containers":[{{"name":"web","image":"registry.example.com/team/web:1.24.3","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"env":[{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.name"}}}}}},{{"name":"GREETING","value":"h\u00e9llo \"world\"\n"}}],"resources":{{"limits":{{"memory":"128Mi"}},"requests":{{"cpu":"50m","memory":"64Mi"}}}},"volumeMounts":[{{"name":"kube-api-access-{i:05}","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}],"livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}},{{"name":"sidecar","image":"registry.example.com/infra/metrics-exporter:0.9.1","resources":{{"requests":{{"cpu":"10m","memory":"16Mi"}}}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"{node}","securityContext":{{}},"schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"{t}"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"{t}"}},{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"{t}"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"{t}"}}],"hostIP":"192.168.1.{}","podIP":"{ip}","podIPs":[{{"ip":"{ip}"}}],"startTime":"{t}","containerStatuses":[{{"name":"sidecar","state":{{"running":{{"startedAt":"{t}"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/infra/metrics-exporter:0.9.1","imageID":"registry.example.com/infra/metrics-exporter@sha256:8c1f0e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100","containerID":"containerd://1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8{:02x}","started":true}},{{"name":"web","state":{{"running":{{"startedAt":"{t}"}}}},"lastState":{{"terminated":{{"exitCode":137,"reason":"OOMKilled","startedAt":"{t}","finishedAt":"{t}","containerID":"containerd://0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"}}}},"ready":true,"restartCount":2,"image":"registry.example.com/team/web:1.24.3","imageID":"registry.example.com/team/web@sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","containerID":"containerd://9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a{:x}","started":true}}],"qosClass":"Burstable"}}}}"#,
        i % 200 + 2,
        i & 255,
        i & 15,
    )
}

/// A pod as the bench's stand-in cloud pads one (`PodFill`): about 700 bytes of fields and
/// one long annotation, to `bytes` in all.
pub(super) fn padded_pod(i: usize, rv: u64, bytes: usize) -> String {
    let pad = "x".repeat(bytes.saturating_sub(700));
    format!(
        r#"{{"metadata":{{"name":"peer-{i:06}","namespace":"peer-0","uid":"6b1c{i:04x}-2f3e-4a5b-8c9d-0e1f2a3b4c5d","resourceVersion":"{rv}","creationTimestamp":"2026-12-01T08:15:42Z","labels":{{"app":"app-{}","tier":"frontend","fill":"peer"}},"annotations":{{"example.com/padding":"{pad}"}}}},"spec":{{"nodeName":"node-0","restartPolicy":"Always","serviceAccountName":"default","containers":[{{"name":"app","image":"registry.example.com/app:1.2.3","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}}}},"env":[{{"name":"POD_INDEX","value":"{i}"}}]}}]}},"status":{{"phase":"Running","podIP":"10.0.{}.{}","conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"2026-12-01T08:15:42Z"}}]}}}}"#,
        i % 10,
        (i >> 8) & 255,
        i & 255
    )
}

/// A whole `PodList` of `items`, as the apiserver writes it.
pub(super) fn pod_list(items: &[String], rv: u64) -> String {
    let mut body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":["#
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(item);
    }
    body.push_str("]}");
    body
}

/// Queues `body` as one list answer in reads of 16 KiB (as a relay reads), then runs the
/// writer over it on this thread: the writer's whole cost, and none of the sender's.
/// `PASS` tells the passes apart in a profile (each is its own function).
#[inline(never)]
fn list_cost_pass<const PASS: u8>(store: &Store, body: &[u8]) {
    list_cost_lists::<PASS>(store, &[body]);
}

/// The list target the passes send.
fn everything() -> CacheTarget {
    CacheTarget::List {
        collection: pods(),
        namespace: None,
        selectors: Selectors::everything(),
        paged: false,
    }
}

/// Queues each of `bodies` as one list answer of the cloud's own bytes, in reads of 16 KiB,
/// then runs one writer over them all (its memos live as long as that run).
#[inline(never)]
fn list_cost_lists<const PASS: u8>(store: &Store, bodies: &[&[u8]]) {
    let (tx, rx) = channel(4096, 1 << 30);
    for body in bodies {
        let mut session = tx.begin(everything(), 200, false, None).unwrap();
        session.reproducible(0);
        for read in body.chunks(16 * 1024) {
            assert!(session.chunk(read));
        }
        session.finish(true);
    }
    drop(tx);
    let (stop, synced) = (AtomicBool::new(false), Synced::default());
    list_cost_writer::<PASS>(store, rx, &stop, &synced);
}

#[inline(never)]
fn list_cost_writer<const PASS: u8>(
    store: &Store,
    rx: tee::CacheRx,
    stop: &AtomicBool,
    synced: &Synced,
) {
    // Each pass its own code, so that a profile tells them apart (identical instances of a
    // generic are merged into one otherwise).
    std::hint::black_box(PASS);
    run(store, rx, stop, WriterOptions::default(), synced);
}

/// Lists `pod(i, rv)` for 1,000 pods five times: a first fill, the same list again (the first
/// repeat after a change, which the store's index does not know yet), one where every pod
/// changed, that one again (a first repeat again), and once more (what a client listing in a
/// loop costs the edge hub: every item known to the index).
fn three_lists(tag: &str, pod: &dyn Fn(usize, u64) -> String) {
    let dir = TempDir::new(tag);
    let (store, _) = Store::open(&dir.root()).unwrap();
    let first: Vec<String> = (0..1000).map(|i| pod(i, 100 + i as u64)).collect();
    let changed: Vec<String> = (0..1000).map(|i| pod(i, 5000 + i as u64)).collect();
    let (first, changed) = (pod_list(&first, 2000), pod_list(&changed, 7000));
    let identical = |at: u64| {
        METRICS
            .cache_writes_skipped_identical
            .load(std::sync::atomic::Ordering::Relaxed)
            - at
    };
    let at = identical(0);
    list_cost_pass::<1>(&store, first.as_bytes());
    let fill = identical(at);
    list_cost_pass::<2>(&store, first.as_bytes());
    let again = identical(at) - fill;
    list_cost_pass::<3>(&store, changed.as_bytes());
    let at = identical(0);
    list_cost_pass::<4>(&store, changed.as_bytes());
    let repeat = identical(at);
    let at = identical(0);
    list_cost_pass::<5>(&store, changed.as_bytes());
    let steady = identical(at);
    println!(
        "list_cost {tag}: 5 lists of {} + {} + 3 x {} bytes; identical skipped {fill}, \
         {again}, -, {repeat}, {steady}",
        first.len(),
        first.len(),
        changed.len()
    );
    assert!(
        repeat >= 1000,
        "the unchanged list skipped {repeat} of 1000"
    );
    assert!(
        steady >= 1000,
        "the unchanged list skipped {steady} of 1000"
    );
    // Other tests of the process may count identical writes too: at least these.
    assert!(again >= 1000, "the unchanged list skipped {again} of 1000");
    let stored = std::fs::read(
        dir.root()
            .join("kubelet/pods.v1.core/team-3/web-7d4b9c8f5-00010x"),
    )
    .or_else(|_| std::fs::read(dir.root().join("kubelet/pods.v1.core/peer-0/peer-000010")))
    .unwrap();
    let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(stored["kind"], "Pod");
    assert_eq!(stored["metadata"]["resourceVersion"], "5010");
}

#[test]
#[ignore = "the driver of an instruction count (module doc)"]
fn list_cost_real_pods() {
    three_lists("cost-real", &real_pod);
}

#[test]
#[ignore = "the driver of an instruction count (module doc)"]
fn list_cost_padded_pods() {
    three_lists("cost-padded", &|i, rv| padded_pod(i, rv, 5400));
}

/// A list found stored and its repeat in one run (pass 6), then the first alone (pass 7).
fn unchanged_lists(tag: &str, pod: &dyn Fn(usize, u64) -> String) {
    let dir = TempDir::new(tag);
    let (store, _) = Store::open(&dir.root()).unwrap();
    let items: Vec<String> = (0..1000).map(|i| pod(i, 100 + i as u64)).collect();
    let list = pod_list(&items, 2000);
    // Filled, then found stored (the index knows every object): what a memo is made from.
    list_cost_pass::<1>(&store, list.as_bytes());
    list_cost_pass::<2>(&store, list.as_bytes());
    let unchanged = || METRICS.cache_lists_unchanged.load(Ordering::Relaxed);
    let at = unchanged();
    list_cost_lists::<6>(&store, &[list.as_bytes(), list.as_bytes()]);
    let proven = unchanged() - at;
    list_cost_lists::<7>(&store, &[list.as_bytes()]);
    println!(
        "list_cost {tag}: pass 6 = 2 lists of {} bytes (the second proven unchanged: {proven}), \
         pass 7 = 1 list",
        list.len()
    );
    assert!(proven >= 1, "the repeat was not proven unchanged");
}

#[test]
#[ignore = "the driver of an instruction count (module doc)"]
fn list_cost_unchanged_real_pods() {
    unchanged_lists("cost-unchanged-real", &real_pod);
}

#[test]
#[ignore = "the driver of an instruction count (module doc)"]
fn list_cost_unchanged_padded_pods() {
    unchanged_lists("cost-unchanged-padded", &|i, rv| padded_pod(i, rv, 5400));
}

/// The connection thread's side: `body` copied into a session in reads of 16 KiB, the
/// writer's flag `enough` set after the first read (as when the list is proven unchanged).
#[inline(never)]
fn list_cost_send<const PASS: u8>(body: &[u8], enough: bool) -> usize {
    let (tx, rx) = channel(4096, 1 << 30);
    let mut session = tx.begin(everything(), 200, false, None).unwrap();
    session.reproducible(0);
    let (mut flag, mut queued) = (None, 0);
    for read in body.chunks(16 * 1024) {
        assert!(session.chunk(read));
        if enough && flag.is_none() {
            while let Ok(msg) = rx.rx.try_recv() {
                queued += msg.payload_len();
                if let tee::CacheMsg::Begin {
                    enough: Some(e), ..
                } = msg
                {
                    e.store(true, Ordering::Relaxed);
                    flag = Some(e);
                }
            }
        }
    }
    session.finish(true);
    while let Ok(msg) = rx.rx.try_recv() {
        queued += msg.payload_len();
    }
    queued
}

#[test]
#[ignore = "the driver of an instruction count (module doc)"]
fn list_cost_tee() {
    let items: Vec<String> = (0..1000)
        .map(|i| padded_pod(i, 100 + i as u64, 5400))
        .collect();
    let list = pod_list(&items, 2000);
    let whole = list_cost_send::<8>(list.as_bytes(), false);
    let cut = list_cost_send::<9>(list.as_bytes(), true);
    println!(
        "list_cost tee: a list of {} bytes; copied to the writer whole {whole}, once proven {cut}",
        list.len()
    );
    assert_eq!(whole, list.len());
    assert!(cut < 64 * 1024, "{cut}");
}

#[test]
fn the_driver_lists_are_json() {
    for pod in [real_pod(7, 9), padded_pod(7, 9, 5400)] {
        let value: serde_json::Value = serde_json::from_str(&pod).unwrap();
        assert_eq!(value["metadata"]["resourceVersion"], "9");
        assert!((4500..6500).contains(&pod.len()), "{} bytes", pod.len());
    }
}
