//! Issue 3: what the hub persists from the answers it forwards — one file per object in
//! YurtHub's layout, kept in step by watches, guarded by resourceVersion, pruned on 404,
//! replaced within the scope of a list, crash-safe.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

fn pod(ns: &str, name: &str, node: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    })
}

fn pod_file(cache: &Path, component: &str, ns: &str, name: &str) -> PathBuf {
    cache
        .join(component)
        .join("pods.v1.core")
        .join(ns)
        .join(name)
}

const FIELD_EDGE1: &str = "fieldSelector=spec.nodeName%3Dedge-1";

#[test]
fn a_kubelet_pod_list_becomes_one_file_per_pod() {
    let cloud = Cloud::start();
    cloud.create(
        "pods",
        pod("default", "web-1", "edge-1", json!({"app": "web"})),
    );
    cloud.create(
        "pods",
        pod("kube-system", "proxy-1", "edge-1", json!({"app": "proxy"})),
    );
    cloud.create(
        "pods",
        pod("default", "elsewhere", "edge-2", json!({"app": "web"})),
    );
    let dir = TempDir::new("list-files");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = &hub.spec.cache_dir;
    let r = call(
        "GET",
        &format!(
            "{}/api/v1/pods?{FIELD_EDGE1}&limit=500&resourceVersion=0",
            hub.url()
        ),
        KUBELET,
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    let seen = cloud
        .wait_for_request(|r| r.path == "/api/v1/pods", Duration::from_secs(5))
        .unwrap();
    assert_eq!(
        seen.accept, "application/json",
        "the hub asks the cloud for JSON to cache"
    );

    let web = pod_file(cache, "kubelet", "default", "web-1");
    assert!(
        eventually(Duration::from_secs(10), || web.exists()),
        "{}",
        hub.logs()
    );
    let stored = read_json(&web).unwrap();
    assert_eq!(stored["kind"], "Pod", "items get kind from the list");
    assert_eq!(stored["apiVersion"], "v1");
    assert_eq!(stored["metadata"]["name"], "web-1");
    assert_eq!(stored["spec"]["nodeName"], "edge-1");
    assert!(read_json(&pod_file(cache, "kubelet", "kube-system", "proxy-1")).is_some());
    assert!(
        !pod_file(cache, "kubelet", "default", "elsewhere").exists(),
        "outside the selector"
    );
    let mode = std::fs::metadata(&web).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(hub.wait_metric_at_least(
        "tinyhub_cache_objects_written_total",
        2.0,
        Duration::from_secs(5)
    ));
    // The writer's figures are on /metrics.
    assert!(hub.metric("tinyhub_cache_bytes_written_total").unwrap() >= 600.0);
    assert_eq!(hub.metric("tinyhub_cache_writer_queue_depth"), Some(0.0));
    assert!(
        hub.metric("tinyhub_cache_writer_busy_seconds_total")
            .unwrap()
            > 0.0
    );
}

#[test]
fn watch_events_add_change_and_remove_files() {
    let cloud = Cloud::start();
    let dir = TempDir::new("watch-files");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let rv = cloud.resource_version();
    let (status, body) = stream(
        &format!(
            "{}/api/v1/pods?{FIELD_EDGE1}&watch=true&resourceVersion={rv}&timeoutSeconds=60",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(10)));
    let file = pod_file(&cache, "kubelet", "default", "w");

    cloud.create("pods", pod("default", "w", "edge-1", json!({"v": "1"})));
    assert_eq!(events.next_event().unwrap()["type"], "ADDED");
    assert!(eventually(Duration::from_secs(10), || read_json(&file)
        .is_some_and(|p| p["metadata"]["labels"]["v"] == "1")));

    cloud.patch(
        "pods",
        "default",
        "w",
        json!({"metadata": {"labels": {"v": "2"}}}),
    );
    assert_eq!(events.next_event().unwrap()["type"], "MODIFIED");
    assert!(eventually(Duration::from_secs(10), || read_json(&file)
        .is_some_and(|p| p["metadata"]["labels"]["v"] == "2")));

    cloud.delete("pods", "default", "w");
    assert_eq!(events.next_event().unwrap()["type"], "DELETED");
    assert!(eventually(Duration::from_secs(10), || !file.exists()));
}

#[test]
fn an_older_resource_version_never_overwrites_a_newer_file() {
    let cloud = Cloud::start();
    let start_rv = cloud.resource_version();
    cloud.create("pods", pod("default", "p", "edge-1", json!({"v": "1"})));
    cloud.patch(
        "pods",
        "default",
        "p",
        json!({"metadata": {"labels": {"v": "2"}}}),
    );
    let newest = cloud.patch(
        "pods",
        "default",
        "p",
        json!({"metadata": {"labels": {"v": "3"}}}),
    );
    let dir = TempDir::new("stale");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let file = pod_file(&hub.spec.cache_dir, "kubelet", "default", "p");
    assert_eq!(
        get(
            &format!("{}/api/v1/namespaces/default/pods/p", hub.url()),
            KUBELET
        )
        .status,
        200
    );
    assert!(eventually(Duration::from_secs(10), || read_json(&file)
        .is_some_and(|p| p["metadata"]["labels"]["v"] == "3")));

    // A watch from an old resourceVersion replays the older versions after the newest is cached.
    let (status, body) = stream(
        &format!(
            "{}/api/v1/namespaces/default/pods?watch=1&resourceVersion={start_rv}&timeoutSeconds=2",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    let mut seen = Vec::new();
    while let Some(e) = events.next_event() {
        seen.push(
            e["object"]["metadata"]["labels"]["v"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
    }
    assert_eq!(seen, ["1", "2", "3"]);
    assert!(
        hub.wait_metric_at_least(
            "tinyhub_cache_writes_skipped_stale_total",
            2.0,
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    let stored = read_json(&file).unwrap();
    assert_eq!(stored["metadata"]["labels"]["v"], "3");
    assert_eq!(
        stored["metadata"]["resourceVersion"],
        newest["metadata"]["resourceVersion"]
    );
}

#[test]
fn a_crd_list_answered_404_removes_that_kind() {
    let cloud = Cloud::start();
    cloud.create("widgets.example.com", json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "default"}}));
    let dir = TempDir::new("crd-prune");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let kind_dir = hub
        .spec
        .cache_dir
        .join("kubelet")
        .join("widgets.v1.example.com");
    let url = format!("{}/apis/example.com/v1/widgets", hub.url());
    assert_eq!(get(&url, KUBELET).status, 200);
    assert!(hub.wait_cached(
        &["kubelet/widgets.v1.example.com/default/w1"],
        Duration::from_secs(10)
    ));
    cloud.remove_crd("widgets.example.com");
    assert_eq!(get(&url, KUBELET).status, 404);
    assert!(
        eventually(Duration::from_secs(10), || !kind_dir.exists()),
        "{}",
        hub.logs()
    );
}

#[test]
fn other_components_are_not_cached_until_yurt_hub_cfg_says_so() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "app", "namespace": "default"}, "data": {"a": "b"}}),
    );
    let dir = TempDir::new("agents");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let url = format!("{}/api/v1/namespaces/default/configmaps/app", hub.url());
    assert_eq!(get(&url, "curl/8.5").status, 200);
    // kubelet's answer is cached, curl's is not.
    assert_eq!(get(&url, KUBELET).status, 200);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/app"],
        Duration::from_secs(10)
    ));
    assert!(!cache.join("curl").exists());

    // The hub watches yurt-hub-cfg: turning on "*" takes effect without a restart.
    assert!(
        cloud.wait_for_watchers("configmaps", 1, Duration::from_secs(10)),
        "the hub watches its ConfigMap"
    );
    cloud.create("configmaps", json!({"metadata": {"name": "yurt-hub-cfg", "namespace": "kube-system"}, "data": {"cache_agents": "*"}}));
    assert!(
        hub.wait_log(
            "cache agents from kube-system/yurt-hub-cfg",
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    assert_eq!(get(&url, "curl/8.5").status, 200);
    assert!(hub.wait_cached(
        &["curl/configmaps.v1.core/default/app"],
        Duration::from_secs(10)
    ));

    // And off again.
    cloud.patch(
        "configmaps",
        "kube-system",
        "yurt-hub-cfg",
        json!({"data": {"cache_agents": ""}}),
    );
    // The line that turned "*" on starts alike ("...: [] and every component (*)").
    assert!(hub.wait_log_line(
        |l| l.ends_with("cache agents from kube-system/yurt-hub-cfg: []"),
        Duration::from_secs(10)
    ));
    let other = format!("{}/api/v1/namespaces/default/configmaps?limit=1", hub.url());
    assert_eq!(get(&other, "wget/1").status, 200);
    // The writer works in order: once kubelet's later answer is on disk, wget's would be too.
    let later = format!(
        "{}/api/v1/namespaces/kube-system/configmaps/yurt-hub-cfg",
        hub.url()
    );
    assert_eq!(get(&later, KUBELET).status, 200);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/kube-system/yurt-hub-cfg"],
        Duration::from_secs(10)
    ));
    assert!(!cache.join("wget").exists());
}

#[test]
fn a_list_replaces_only_what_is_in_its_scope() {
    let cloud = Cloud::start();
    for (ns, name, app) in [("a", "a1", "web"), ("a", "a2", "db"), ("b", "b1", "web")] {
        cloud.create("pods", pod(ns, name, "edge-1", json!({"app": app})));
    }
    let dir = TempDir::new("scope");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    for ns in ["a", "b"] {
        assert_eq!(
            get(
                &format!("{}/api/v1/namespaces/{ns}/pods", hub.url()),
                KUBELET
            )
            .status,
            200
        );
    }
    let all = ["a/a1", "a/a2", "b/b1"].map(|p| cache.join("kubelet/pods.v1.core").join(p));
    assert!(eventually(Duration::from_secs(10), || all
        .iter()
        .all(|p| p.exists())));

    // Gone from the cloud: a2 (db) and b1. A list of namespace a with app=web does not see a2
    // (outside its selector) nor b1 (outside its namespace): both stay.
    cloud.delete("pods", "a", "a2");
    cloud.delete("pods", "b", "b1");
    let committed = hub
        .metric("tinyhub_cache_sessions_committed_total")
        .unwrap();
    assert_eq!(
        get(
            &format!(
                "{}/api/v1/namespaces/a/pods?labelSelector=app%3Dweb",
                hub.url()
            ),
            KUBELET
        )
        .status,
        200
    );
    assert!(eventually(Duration::from_secs(5), || hub
        .metric("tinyhub_cache_sessions_committed_total")
        > Some(committed)));
    assert!(all.iter().all(|p| p.exists()), "out-of-scope objects stay");

    // A list of namespace a without a selector removes a2; b1 stays.
    assert_eq!(
        get(&format!("{}/api/v1/namespaces/a/pods", hub.url()), KUBELET).status,
        200
    );
    assert!(eventually(Duration::from_secs(10), || !all[1].exists()));
    assert!(all[0].exists() && all[2].exists());

    // An empty answer leaves an existing, empty collection.
    cloud.delete("pods", "a", "a1");
    assert_eq!(
        get(&format!("{}/api/v1/namespaces/a/pods", hub.url()), KUBELET).status,
        200
    );
    assert!(eventually(Duration::from_secs(10), || !all[0].exists()));
    assert!(cache.join("kubelet/pods.v1.core/a").is_dir());
}

#[test]
fn gzip_answers_pass_through_compressed_and_are_cached_decoded() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(1);
    // Nodes: kubelet's read of them passes no response filter (a filtered answer is
    // decoded: filters.rs).
    cloud.create(
        "nodes",
        json!({"metadata": {"name": "z", "labels": {"a": "b"}}}),
    );
    let dir = TempDir::new("gzip");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let r = call(
        "GET",
        &format!("{}/api/v1/nodes", hub.url()),
        KUBELET,
        &[("Accept-Encoding", "gzip")],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-encoding"),
        Some("gzip"),
        "passed through as the cloud sent it"
    );
    assert_eq!(&r.body[..2], &[0x1f, 0x8b]);
    let file = hub.spec.cache_dir.join("kubelet/nodes.v1.core/z");
    assert!(eventually(Duration::from_secs(10), || read_json(&file)
        .is_some_and(|c| c["metadata"]["labels"]["a"] == "b")));
}

#[test]
fn a_list_cut_off_mid_body_commits_nothing() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    cloud.populate_pods(&PodFill {
        count: 200,
        nodes: 1,
        namespaces: 1,
        body_bytes: 2000,
        prefix: "cut".into(),
    });
    let dir = TempDir::new("cut");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = format!(
        "{}/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0",
        hub.url()
    );
    assert_eq!(get(&url, KUBELET).status, 200);
    let kind_dir = hub.spec.cache_dir.join("kubelet/pods.v1.core/cut-0");
    assert!(wait_file_count(&kind_dir, 200, Duration::from_secs(10)));
    let before: Vec<_> = files_under(&kind_dir);

    // The cloud deletes half of them, then breaks off the next answer in the middle.
    for i in 0..100 {
        cloud.delete("pods", "cut-0", &format!("cut-{i:06}"));
    }
    cloud.drop_mid_body(1);
    let (status, mut body) = stream(&url, KUBELET);
    assert_eq!(status, 200);
    let mut sink = Vec::new();
    assert!(
        std::io::Read::read_to_end(&mut body, &mut sink).is_err(),
        "the client sees a broken answer"
    );
    assert!(hub.wait_metric_at_least(
        "tinyhub_cache_sessions_abandoned_total",
        1.0,
        Duration::from_secs(5)
    ));
    // The writer counts the session abandoned before it removes what the session staged.
    hub.wait_cache_quiet();
    assert_eq!(
        files_under(&kind_dir),
        before,
        "the cached list is untouched"
    );
    // Nothing left over in the cache tree but objects.
    // (`.synced` is the sync record, written when a kind is first listed whole: no leftover.)
    assert!(files_under(&hub.spec.cache_dir).iter().all(|p| {
        let name = p.file_name().unwrap().to_string_lossy();
        !name.starts_with('.') || name == ".synced"
    }));
}

#[test]
fn a_20000_pod_list_is_cached_with_the_hub_small() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    // Realistic pods of about 3.5 KB: a 70 MB list.
    cloud.populate_pods(&PodFill {
        count: 20_000,
        nodes: 1,
        body_bytes: 3_500,
        ..PodFill::default()
    });
    let dir = TempDir::new("big-cached");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let idle = proc_status(hub.pid(), "VmHWM:");
    // Read as fast as loopback goes: the disk falls behind, the hub drops the session rather
    // than slow the client, and refills the list itself at the disk's pace.
    let list = get(&format!("{}/api/v1/pods", hub.url()), KUBELET);
    assert_eq!(list.status, 200);
    assert!(list.body.len() > 70_000_000);
    drop(list);
    let root = hub.spec.cache_dir.join("kubelet/pods.v1.core");
    assert!(
        wait_file_count(&root, 20_000, Duration::from_secs(300)),
        "{}",
        hub.logs()
    );
    // Growth of the peak, so the figure holds under an emulator too (qemu has its own RSS);
    // the absolute figure of a release build is in BENCHMARKS.md.
    let peak = proc_status(hub.pid(), "VmHWM:");
    eprintln!("MEASURED: caching 20,000 pods took the hub's peak RSS from {idle} to {peak} KiB");
    assert!(
        peak - idle < 24 * 1024,
        "hub peak RSS grew from {idle} to {peak} KiB caching a 70 MB list"
    );

    // The same list again: nothing is rewritten.
    let written = hub.metric("tinyhub_cache_objects_written_total").unwrap();
    hub.cache_list_paced("/api/v1/pods", Duration::from_millis(1));
    assert_eq!(
        hub.metric("tinyhub_cache_objects_written_total").unwrap(),
        written
    );
    assert!(
        hub.metric("tinyhub_cache_writes_skipped_identical_total")
            .unwrap()
            >= 20_000.0
    );
}

/// The generation label of every cached pod under `root` (None for a missing label).
fn generations(root: &Path) -> std::collections::BTreeMap<Option<String>, usize> {
    let mut seen = std::collections::BTreeMap::new();
    for file in files_under(root) {
        // A file renamed away between the listing and the read is skipped.
        if let Some(v) = read_json(&file) {
            *seen
                .entry(v["metadata"]["labels"]["gen"].as_str().map(str::to_owned))
                .or_insert(0) += 1;
        }
    }
    seen
}

#[test]
fn a_slow_writer_never_slows_the_client_and_commits_nothing_torn() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    cloud.populate_pods(&PodFill {
        count: 2_000,
        nodes: 1,
        namespaces: 1,
        body_bytes: 2_000,
        prefix: "slow".into(),
    });
    let dir = TempDir::new("slow-writer");
    // Test-only flag: the writer sleeps 30 ms per message (32 KiB), like a slow flash: about
    // 1 MB/s, slower than any hub relays, emulated ones included (4 MB: 4 s).
    let spec =
        HubSpec::for_cloud(&cloud, dir.path()).with(&["--test-only-cache-writer-delay-ms=30"]);
    let hub = Hub::start(&spec);
    let url = format!("{}/api/v1/namespaces/slow-0/pods", hub.url());
    let root = hub.spec.cache_dir.join("kubelet/pods.v1.core/slow-0");

    // The client has its whole answer while the writer has not committed anything yet.
    let first = get(&url, KUBELET);
    assert_eq!(first.json()["items"].as_array().unwrap().len(), 2_000);
    assert_eq!(
        files_under(&root).len(),
        0,
        "the client got its answer before the writer caught up"
    );
    // Then all of it, each file whole.
    assert!(wait_file_count(&root, 2_000, Duration::from_secs(60)));
    assert!(
        files_under(&root).iter().all(|f| read_json(f).is_some()),
        "a torn file"
    );

    // A new generation of every pod, listed again: the client again gets it at once, and the
    // cache moves from all old to all new, never a mix.
    for i in 0..2_000 {
        cloud.patch(
            "pods",
            "slow-0",
            &format!("slow-{i:06}"),
            json!({"metadata": {"labels": {"gen": "2"}}}),
        );
    }
    let second = get(&url, KUBELET);
    assert!(second.text().contains("\"gen\":\"2\""));
    assert_eq!(
        generations(&root).get(&None),
        Some(&2_000),
        "still the old generation when the client is done"
    );
    // (While the writer renames the new files into place, a reader may see both generations
    // for a moment; a crash then leaves one or the other: see kill_9_mid_write... below.)
    assert!(eventually(Duration::from_secs(60), || generations(&root)
        .get(&Some("2".into()))
        == Some(&2_000)));

    // A list bigger than the writer's queue (12 MB) is dropped from the cache, then fetched
    // again by the hub at the disk's pace.
    cloud.populate_pods(&PodFill {
        count: 6_000,
        nodes: 1,
        namespaces: 1,
        body_bytes: 2_000,
        prefix: "big".into(),
    });
    let big = get(
        &format!("{}/api/v1/namespaces/big-0/pods", hub.url()),
        KUBELET,
    );
    assert_eq!(big.status, 200);
    let big_root = hub.spec.cache_dir.join("kubelet/pods.v1.core/big-0");
    assert!(hub.wait_metric_at_least(
        "tinyhub_cache_sessions_abandoned_total",
        1.0,
        Duration::from_secs(5)
    ));
    assert!(
        wait_file_count(&big_root, 6_000, Duration::from_secs(120)),
        "{}",
        hub.logs()
    );
    assert!(hub.metric("tinyhub_cache_refills_total").unwrap() >= 1.0);
}

#[test]
fn kill_9_mid_write_leaves_each_list_all_old_or_all_new() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    cloud.populate_pods(&PodFill {
        count: 3_000,
        nodes: 1,
        namespaces: 1,
        body_bytes: 1_000,
        prefix: "crash".into(),
    });
    let dir = TempDir::new("crash");
    let mut hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = format!("{}/api/v1/namespaces/crash-0/pods", hub.url());
    let root = hub.spec.cache_dir.join("kubelet/pods.v1.core/crash-0");
    let generation = |p: &Path| {
        read_json(p).and_then(|v| v["metadata"]["labels"]["gen"].as_str().map(str::to_owned))
    };

    // How long the first list takes to be committed sets where the kills land: spread
    // around that moment, so some land before, some during and some after the commit.
    let started = std::time::Instant::now();
    assert_eq!(get(&url, KUBELET).status, 200);
    assert!(wait_file_count(&root, 3_000, Duration::from_secs(60)));
    let commit = started.elapsed();
    let mut outcomes = Vec::new();
    for (round, factor) in [0.2f64, 0.35, 0.45, 0.55, 0.65, 0.8, 1.2]
        .into_iter()
        .enumerate()
    {
        let delay = commit.mul_f64(factor);
        let label = format!("g{round}");
        for i in 0..3_000 {
            cloud.patch(
                "pods",
                "crash-0",
                &format!("crash-{i:06}"),
                json!({"metadata": {"labels": {"gen": label}}}),
            );
        }
        let before = files_under(&root).first().and_then(|p| generation(p));
        // The hub's port changes at each restart; a raw request does not panic when the
        // hub dies under it.
        let client = {
            let addr = hub.proxy;
            std::thread::spawn(move || {
                raw(addr, format!("GET /api/v1/namespaces/crash-0/pods HTTP/1.1\r\nHost: x\r\nUser-Agent: {KUBELET}\r\n\r\n").as_bytes())
            })
        };
        std::thread::sleep(delay);
        hub.kill9();
        let _ = client.join();
        hub = hub.restart();
        // Recovery ran before the hub said it was ready; what it writes at start (its own
        // `yurt-hub-cfg` list) is staged for a moment: look once that settled.
        hub.wait_cache_quiet();
        // After recovery every object is of one generation: the old one or the new one.
        let gens: std::collections::BTreeSet<Option<String>> =
            files_under(&root).iter().map(|p| generation(p)).collect();
        assert_eq!(gens.len(), 1, "round {round}: mixed generations {gens:?}");
        assert_eq!(files_under(&root).len(), 3_000, "round {round}");
        let now = gens.into_iter().next().unwrap();
        assert!(
            now == before || now.as_deref() == Some(label.as_str()),
            "round {round}: {now:?}"
        );
        outcomes.push(now.as_deref() == Some(label.as_str()));
        // (`.synced`, the sync record, is no leftover.)
        assert!(
            files_under(&hub.spec.cache_dir)
                .iter()
                .all(|p| !p.to_string_lossy().contains("/.") || p.ends_with(".synced")),
            "no leftovers"
        );
    }
    eprintln!(
        "kill -9 after {commit:?} × [0.2, 0.35, 0.45, 0.55, 0.65, 0.8, 1.2]; new list committed: {outcomes:?}"
    );
}
