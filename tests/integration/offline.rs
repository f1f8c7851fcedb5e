//! Issue 4: answers from the cache while the cloud is gone (stopped, or blackholed): gets,
//! selector-filtered lists with paging, held watches, writes, and refusals — also after a
//! restart of the hub, and against hostile requests.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

fn pod(ns: &str, name: &str, node: &str, labels: Value, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase}
    })
}

/// A cloud with pods, configmaps and nodes, a hub, and a warm kubelet cache. Taken apart
/// `_dir` first, so it is dropped last: the hub stops before its directory is removed.
struct Warm {
    cloud: Cloud,
    hub: Hub,
    _dir: TempDir,
}

fn warm() -> Warm {
    let cloud = Cloud::start();
    let pods = [
        (
            "default",
            "web-1",
            json!({"app": "web", "tier": "front"}),
            "Running",
        ),
        (
            "default",
            "web-2",
            json!({"app": "web", "tier": "front", "env": "prod"}),
            "Running",
        ),
        (
            "default",
            "db-1",
            json!({"app": "db", "env": "prod"}),
            "Pending",
        ),
        ("kube-system", "proxy-1", json!({"app": "proxy"}), "Running"),
    ];
    for (ns, name, labels, phase) in pods {
        cloud.create("pods", pod(ns, name, "edge-1", labels, phase));
    }
    cloud.create(
        "pods",
        pod(
            "default",
            "elsewhere",
            "edge-2",
            json!({"app": "web"}),
            "Running",
        ),
    );
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    );
    cloud.create(
        "nodes",
        json!({"metadata": {"name": "edge-1", "labels": {"role": "edge"}}}),
    );
    cloud.create(
        "nodes",
        json!({"metadata": {"name": "edge-2", "labels": {"role": "edge"}}}),
    );
    let dir = TempDir::new("offline");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // What a kubelet reads: its pods, its node, a configmap, discovery and the version.
    for path in [
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
        "/api/v1/nodes",
        "/api/v1/namespaces/default/configmaps/settings",
        "/api/v1/namespaces/default/configmaps",
        "/version",
        "/api/v1",
        "/api",
    ] {
        assert_eq!(
            get(&format!("{}{path}", hub.url()), KUBELET).status,
            200,
            "{path}"
        );
    }
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/web-1",
                "kubelet/pods.v1.core/default/web-2",
                "kubelet/pods.v1.core/default/db-1",
                "kubelet/pods.v1.core/kube-system/proxy-1",
                "kubelet/nodes.v1.core/edge-2",
                "kubelet/configmaps.v1.core/default/settings",
                "version",
                "_api_v1",
            ],
            Duration::from_secs(10)
        ),
        "cache not warm: {}",
        hub.logs()
    );
    Warm {
        cloud,
        hub,
        _dir: dir,
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn wait_offline(hub: &Hub, cloud: &Cloud) {
    assert!(
        hub.wait_healthy(cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
}

/// Every offline answer the design lists, checked on a hub whose cloud is gone.
fn check_offline_answers(hub: &Hub) {
    let url = |p: &str| format!("{}{p}", hub.url());

    let web = get(&url("/api/v1/namespaces/default/pods/web-1"), KUBELET);
    assert_eq!(web.status, 200);
    assert_eq!(web.header("content-type"), Some("application/json"));
    assert_eq!(web.json()["metadata"]["name"], "web-1");
    assert_eq!(web.json()["kind"], "Pod");

    let missing = get(&url("/api/v1/namespaces/default/pods/nope"), KUBELET);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["reason"], "NotFound");
    // Kubelet listed its pods by node, which says nothing of a pod elsewhere (issue 35).
    assert_eq!(
        missing.json()["message"],
        "pods \"nope\" not found: it was never cached for kubelet, and the cloud apiserver is unreachable"
    );

    // Lists are answered only within what kubelet listed whole: its pods, by node, and the
    // nodes; all pods never were (the cloud has one on edge-2).
    for path in [
        "/api/v1/pods",
        "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
    ] {
        let refused = get(&url(path), KUBELET);
        assert_eq!(refused.status, 404, "{path}: {}", refused.text());
        assert!(
            refused.text().contains("is not cached for kubelet"),
            "{}",
            refused.text()
        );
    }

    let cases: &[(&str, &[&str])] = &[
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
            &["web-1", "web-2", "db-1", "proxy-1"],
        ),
        (
            "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dedge-1",
            &["web-1", "web-2", "db-1"],
        ),
        (
            "/api/v1/namespaces/kube-system/pods?fieldSelector=spec.nodeName%3Dedge-1",
            &["proxy-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1,metadata.namespace%21%3Dnone",
            &["web-1", "web-2", "db-1", "proxy-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%3Dweb",
            &["web-1", "web-2"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app+in+(web,db)",
            &["web-1", "web-2", "db-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%20notin%20(web)",
            &["db-1", "proxy-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=env",
            &["web-2", "db-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=!env",
            &["web-1", "proxy-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%3D%3Dweb,env!%3Dprod",
            &["web-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1,status.phase!%3DRunning",
            &["db-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1,metadata.name%3Dproxy-1",
            &["proxy-1"],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1,metadata.namespace%3Ddefault,status.phase%3DRunning&labelSelector=tier%3Dfront",
            &["web-1", "web-2"],
        ),
        (
            "/api/v1/nodes?labelSelector=role%3Dedge",
            &["edge-1", "edge-2"],
        ),
        // An empty list of another kind stays a list (kubelet's empty pod list is a 404:
        // offline_node.rs).
        ("/api/v1/nodes?labelSelector=role%3Dnone", &[]),
    ];
    for (path, want) in cases {
        let r = get(&url(path), KUBELET);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let list = r.json();
        assert_eq!(item_names(&list), set(want), "{path}");
        assert_eq!(
            list["kind"],
            if path.contains("nodes") {
                "NodeList"
            } else {
                "PodList"
            },
            "{path}"
        );
        assert_eq!(list["apiVersion"], "v1");
    }

    // metadata.resourceVersion is the highest of the items.
    let list = get(
        &url("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1"),
        KUBELET,
    )
    .json();
    let highest = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(list["metadata"]["resourceVersion"], highest.to_string());

    // limit and continue walk the whole list; a token the hub did not issue is 410.
    let mut seen = BTreeSet::new();
    let mut next = url("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=3");
    let mut pages = 0;
    loop {
        let page = get(&next, KUBELET).json();
        pages += 1;
        assert!(page["items"].as_array().unwrap().len() <= 3);
        seen.extend(item_names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => {
                next = url(&format!(
                    "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=3&continue={token}"
                ))
            }
            _ => break,
        }
    }
    assert_eq!(
        (pages, seen),
        (2, set(&["web-1", "web-2", "db-1", "proxy-1"]))
    );
    let foreign = get(
        &url(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=3&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ",
        ),
        KUBELET,
    );
    assert_eq!(foreign.status, 410);
    assert_eq!(foreign.json()["reason"], "Expired");

    let unknown = get(&url("/apis/apps/v1/deployments"), KUBELET);
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["kind"], "Status");

    let version = get(&url("/version"), KUBELET);
    assert_eq!(version.status, 200);
    assert_eq!(version.header("content-type"), Some("application/json"));
    assert!(version.json()["gitVersion"].is_string());
    assert_eq!(
        get(&url("/api/v1"), KUBELET).json()["kind"],
        "APIResourceList"
    );

    // Writes wait for the cloud (issue 28: nothing a client sends is stored as the cloud's
    // truth): create, update, patch and delete are 503 and nothing is stored.
    let writes: [(&str, &str, &str, &[u8]); 4] = [
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"made-offline"},"data":{"x":"y"}}"#,
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/configmaps/settings",
            "application/json",
            br#"{"metadata":{"name":"settings","namespace":"default"},"data":{"a":"changed"}}"#,
        ),
        (
            "PATCH",
            "/api/v1/nodes/edge-1/status",
            "application/merge-patch+json",
            b"{}",
        ),
        ("DELETE", "/api/v1/namespaces/default/pods/web-1", "", b""),
    ];
    for (method, path, content_type, body) in writes {
        let headers: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("Content-Type", content_type)]
        };
        let body = (!body.is_empty()).then_some(body);
        let answer = call(method, &url(path), KUBELET, headers, body);
        assert_eq!(answer.status, 503, "{method} {path}: {}", answer.text());
        assert_eq!(answer.json()["reason"], "ServiceUnavailable");
    }
    let made = get(
        &url("/api/v1/namespaces/default/configmaps/made-offline"),
        KUBELET,
    );
    assert_eq!(made.status, 404, "{}", made.text());
    let settings = get(
        &url("/api/v1/namespaces/default/configmaps/settings"),
        KUBELET,
    );
    assert_eq!(
        settings.json()["data"]["a"],
        "1",
        "the cached object, unchanged"
    );
    assert_eq!(
        get(&url("/api/v1/namespaces/default/pods/web-1"), KUBELET).status,
        200
    );
    // A body announced larger than any object is refused before it is read.
    let too_big = raw(
        hub.proxy,
        format!("POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nUser-Agent: {KUBELET}\r\nContent-Type: application/json\r\nContent-Length: 4194304\r\n\r\n").as_bytes(),
    );
    assert_eq!(raw_status(&too_big), 413, "{too_big}");
    // An unbound pod selector (spec.nodeName= empty) matches none of a kubelet's pods: for
    // kubelet that is a 404, never an empty list (offline_node.rs).
    let unbound = get(&url("/api/v1/pods?fieldSelector=spec.nodeName%3D"), KUBELET);
    assert_eq!(unbound.status, 404, "{}", unbound.text());

    // Components that are not cache agents get 503.
    let stranger = get(&url("/api/v1/namespaces/default/pods/web-1"), "curl/8");
    assert_eq!(stranger.status, 503);
    assert_eq!(stranger.json()["reason"], "ServiceUnavailable");

    // A watch is held open without events for its timeoutSeconds, then ends cleanly.
    let started = Instant::now();
    let (status, body) = stream(&url("/api/v1/pods?watch=1&timeoutSeconds=2"), KUBELET);
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    assert!(events.next_event().is_none(), "no events offline");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_secs(2) && held < Duration::from_secs(10),
        "held {held:?}"
    );
}

#[test]
fn answers_from_the_cache_with_the_cloud_stopped_and_after_a_restart() {
    let Warm { _dir, cloud, hub } = warm();
    cloud.stop();
    // Before the health checker notices, a failed connection falls back to the cache too.
    let early = get(
        &format!("{}/api/v1/namespaces/default/pods/web-2", hub.url()),
        KUBELET,
    );
    assert_eq!(early.status, 200);
    wait_offline(&hub, &cloud);
    check_offline_answers(&hub);
    assert!(hub.metric("tinyhub_offline_answers_total").unwrap() > 10.0);

    // The hub restarts with the cloud still down: the same answers come from disk.
    let hub = hub.restart();
    check_offline_answers(&hub);
}

#[test]
fn answers_from_the_cache_with_the_cloud_blackholed() {
    let Warm { _dir, cloud, hub } = warm();
    cloud.set_blackhole(true);
    wait_offline(&hub, &cloud);
    check_offline_answers(&hub);
}

#[test]
fn a_held_watch_ends_when_the_cloud_comes_back() {
    let Warm { _dir, cloud, hub } = warm();
    cloud.stop();
    wait_offline(&hub, &cloud);
    let (status, body) = stream(
        &format!("{}/api/v1/pods?watch=1&timeoutSeconds=300", hub.url()),
        KUBELET,
    );
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    let back = Instant::now();
    cloud.restart();
    assert!(events.next_event().is_none());
    assert!(
        back.elapsed() < Duration::from_secs(15),
        "ended {:?} after the cloud came back",
        back.elapsed()
    );
    // And the next watch goes to the cloud again.
    let rv = cloud.resource_version();
    let (_, body) = stream(
        &format!(
            "{}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}&timeoutSeconds=30",
            hub.url()
        ),
        KUBELET,
    );
    assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(10)));
    cloud.create(
        "pods",
        pod("default", "after", "edge-1", json!({}), "Running"),
    );
    assert_eq!(
        Events::new(body).next_event().unwrap()["object"]["metadata"]["name"],
        "after"
    );
}

#[test]
fn a_client_hanging_up_frees_its_held_watch() {
    let Warm { _dir, cloud, hub } = warm();
    cloud.stop();
    wait_offline(&hub, &cloud);
    let before = threads(hub.pid());
    let watches: Vec<_> = (0..5)
        .map(|_| {
            stream(
                &format!("{}/api/v1/pods?watch=1&timeoutSeconds=600", hub.url()),
                KUBELET,
            )
        })
        .collect();
    assert!(hub.wait_metric(IN_FLIGHT, 5.0, Duration::from_secs(10)));
    drop(watches);
    assert!(
        eventually(Duration::from_secs(10), || threads(hub.pid()) <= before + 1),
        "threads {} (were {before})",
        threads(hub.pid())
    );
    assert!(hub.wait_metric(IN_FLIGHT, 0.0, Duration::from_secs(5)));
}

#[test]
fn hostile_requests_get_400_and_never_read_outside_the_cache() {
    let Warm { _dir, cloud, hub } = warm();
    // Something a path traversal from the cache root could reach.
    let outside = hub.spec.cache_dir.parent().unwrap().join("secret");
    std::fs::write(
        &outside,
        r#"{"kind":"Secret","metadata":{"name":"secret"},"data":{"leak":"TOPSECRET"}}"#,
    )
    .unwrap();
    cloud.stop();
    wait_offline(&hub, &cloud);
    let long = "a".repeat(5000);
    let terms = (0..10_000)
        .map(|i| format!("k{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let requests = [
        "/api/v1/namespaces/default/pods/..".to_owned(),
        "/api/v1/namespaces/../pods/secret".to_owned(),
        "/api/v1/namespaces/default/pods/..%2F..%2F..%2Fsecret".to_owned(),
        "/api/v1/namespaces/..%2f..%2f/pods/secret".to_owned(),
        "/api/v1/namespaces/default/pods/%2e%2e".to_owned(),
        "/api/v1/namespaces/default/pods/web-1%00".to_owned(),
        "/api/v1/namespaces/default/pods/.hidden".to_owned(),
        "/apis/..%2F..%2F/v1/secret".to_owned(),
        format!("/api/v1/namespaces/default/pods/{long}"),
        format!("/api/v1/namespaces/{long}/pods"),
        format!("/api/v1/pods?labelSelector={terms}"),
    ];
    for path in &requests {
        let answer = raw(hub.proxy, format!("GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: {KUBELET}\r\nConnection: close\r\n\r\n").as_bytes());
        // A URL past 8 KiB is refused before it is parsed.
        let want = if path.len() > 8 * 1024 { 414 } else { 400 };
        assert_eq!(
            raw_status(&answer),
            want,
            "{}: {}",
            &path[..path.len().min(80)],
            &answer[..answer.len().min(300)]
        );
        assert!(!answer.contains("TOPSECRET"));
    }
    // A selector with many terms in a URL that is not oversized is refused by its parser.
    let many = (0..400)
        .map(|i| format!("k{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let r = get(
        &format!("{}/api/v1/pods?labelSelector={many}", hub.url()),
        KUBELET,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("selector"));
    // Absurd or binary headers are refused too, and do not break the hub.
    let answer = raw(
        hub.proxy,
        format!(
            "GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nUser-Agent: {}\r\nConnection: close\r\n\r\n",
            "k".repeat(200_000)
        )
        .as_bytes(),
    );
    assert_eq!(
        raw_status(&answer),
        431,
        "{}",
        &answer[..answer.len().min(200)]
    );
    let answer = raw(
        hub.proxy,
        b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nX-Bin: \x01\x02\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        raw_status(&answer),
        400,
        "{}",
        &answer[..answer.len().min(200)]
    );
    assert_eq!(
        get(
            &format!("{}/api/v1/namespaces/default/pods/web-1", hub.url()),
            KUBELET
        )
        .status,
        200,
        "still serving"
    );
}

/// Warnings the hub logged about what offline lists of `resource` skipped.
fn skip_warnings(hub: &Hub, resource: &str) -> Vec<String> {
    let needle = format!("offline list of {resource}: skipped");
    hub.logs()
        .lines()
        .filter(|l| l.starts_with('W') && l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_corrupted_cache_file_is_reported_not_served_then_repaired() {
    let Warm { _dir, cloud, hub } = warm();
    let cache = hub.spec.cache_dir.clone();
    let file = |rel: &str| cache.join(rel);
    let web1 = file("kubelet/pods.v1.core/default/web-1");
    let web2 = file("kubelet/pods.v1.core/default/web-2");
    let proxy1 = file("kubelet/pods.v1.core/kube-system/proxy-1");
    let settings = file("kubelet/configmaps.v1.core/default/settings");
    // Torn by a tool that does not write atomically, flash garbage, a file emptied by a
    // crash, and a JSON array, which fills the hub's object head field by field and
    // claims a resourceVersion newer than anything the cloud has.
    let whole = std::fs::read(&web2).unwrap();
    let truncated = whole[..whole.len() / 2].to_vec();
    let garbage = b"\x00\xff\xfe garbage {\"kind\":\"Pod\"".to_vec();
    let array = br#"[null,{"name":"settings","namespace":"default","resourceVersion":"99999999"}]"#;
    std::fs::write(&web2, &truncated).unwrap();
    std::fs::write(&web1, &garbage).unwrap();
    std::fs::write(&proxy1, b"").unwrap();
    std::fs::write(&settings, array).unwrap();
    cloud.stop();
    wait_offline(&hub, &cloud);

    // Gets: a 500 Status, never the damaged bytes.
    for url in [
        "/api/v1/namespaces/default/pods/web-1",
        "/api/v1/namespaces/default/pods/web-2",
        "/api/v1/namespaces/kube-system/pods/proxy-1",
        "/api/v1/namespaces/default/configmaps/settings",
    ] {
        let r = get(&format!("{}{url}", hub.url()), KUBELET);
        assert_eq!(r.status, 500, "{url}: {}", r.text());
        let status = r.json();
        assert_eq!(status["kind"], "Status", "{url}");
        assert_eq!(status["reason"], "InternalError", "{url}");
        assert!(!r.text().contains("garbage") && !r.text().contains("99999999"));
    }

    // Lists: the damaged files are left out, with one warning per answer naming them.
    let lists = [
        (
            "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dedge-1",
            "pods",
            &["db-1"][..],
            &["default/web-1", "default/web-2"][..],
        ),
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
            "pods",
            &["db-1"],
            &["default/web-1", "default/web-2", "kube-system/proxy-1"],
        ),
        // With a selector, objects are read whole: the same files are skipped.
        (
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%21%3Dproxy",
            "pods",
            &["db-1"],
            &["default/web-1", "default/web-2", "kube-system/proxy-1"],
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            "configmaps",
            &[],
            &["default/settings"],
        ),
    ];
    for (round, (url, resource, served, skipped)) in lists.into_iter().enumerate() {
        let before = skip_warnings(&hub, resource).len();
        let r = get(&format!("{}{url}", hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{url}");
        assert!(
            !r.text().contains("garbage") && !r.text().contains("99999999"),
            "{url}"
        );
        let list = r.json();
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(Value::is_object),
            "{url}: {list}"
        );
        assert_eq!(item_names(&list), set(served), "{url}");
        // An offline get of a damaged file logs its own warning before answering: once it
        // is in the log, so is everything the list logged (one pipe, in order).
        let sentinel = get(
            &format!("{}/api/v1/namespaces/default/pods/web-2", hub.url()),
            KUBELET,
        );
        assert_eq!(sentinel.status, 500);
        let gets = || {
            hub.logs()
                .matches("is not valid JSON; not serving it")
                .count()
        };
        assert!(eventually(Duration::from_secs(10), || gets() == 4 + round + 1));
        let warnings = skip_warnings(&hub, resource);
        assert_eq!(
            warnings.len(),
            before + 1,
            "{url}: one warning per list answer: {warnings:#?}"
        );
        let line = warnings.last().unwrap();
        assert!(
            line.contains(&format!("skipped {} damaged cache file", skipped.len())),
            "{line}"
        );
        for name in skipped {
            assert!(line.contains(name), "{url}: {line}");
        }
    }

    // Back online, the next answer that carries the object repairs its file: a get for
    // web-1 and for the configmap (whose array claimed a newer version), a list for the rest.
    cloud.restart();
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(15)));
    let repaired = |path: &std::path::Path, resource: &str, ns: &str, name: &str| {
        let want = cloud.get(resource, ns, name).unwrap();
        eventually(Duration::from_secs(10), || {
            read_json(path).as_ref() == Some(&want)
        })
    };
    for url in [
        "/api/v1/namespaces/default/pods/web-1",
        "/api/v1/namespaces/default/configmaps/settings",
    ] {
        assert_eq!(get(&format!("{}{url}", hub.url()), KUBELET).status, 200);
    }
    assert!(
        repaired(&web1, "pods", "default", "web-1"),
        "{}",
        hub.logs()
    );
    assert!(
        repaired(&settings, "configmaps", "default", "settings"),
        "{}",
        hub.logs()
    );
    assert_eq!(
        get(
            &format!(
                "{}/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
                hub.url()
            ),
            KUBELET
        )
        .status,
        200
    );
    assert!(
        repaired(&web2, "pods", "default", "web-2"),
        "{}",
        hub.logs()
    );
    assert!(
        repaired(&proxy1, "pods", "kube-system", "proxy-1"),
        "{}",
        hub.logs()
    );
}

#[test]
fn an_offline_list_of_5000_pods_streams_from_disk() {
    let cloud = Cloud::start();
    cloud.populate_pods(&PodFill {
        count: 5_000,
        nodes: 1,
        namespaces: 5,
        body_bytes: 5_000,
        prefix: "many".into(),
    });
    let dir = TempDir::new("offline-5000");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    hub.cache_list_paced("/api/v1/pods", Duration::from_millis(2));
    let root = hub.spec.cache_dir.join("kubelet/pods.v1.core");
    assert!(
        wait_file_count(&root, 5_000, Duration::from_secs(120)),
        "{}",
        hub.logs()
    );
    cloud.stop();
    // Restart offline, so the peak measured is the offline list's alone.
    let hub = hub.restart();
    let before = proc_status(hub.pid(), "VmHWM:");
    let r = get(&format!("{}/api/v1/pods", hub.url()), KUBELET);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 5_000);
    assert!(r.body.len() > 25_000_000);
    let after = proc_status(hub.pid(), "VmHWM:");
    assert!(
        after - before < 8 * 1024,
        "an offline list of {} bytes raised the peak RSS from {before} to {after} KiB",
        r.body.len()
    );
    // Only the collection's own directory is read: a file planted in another namespace's
    // directory, which matches the selector, shows in a cluster-wide list and not in a
    // namespaced one.
    let planted = root.join("many-4/planted");
    std::fs::write(&planted, br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"planted","namespace":"many-4","resourceVersion":"1","labels":{"app":"app-3"}},"spec":{"nodeName":"node-0"}}"#).unwrap();
    let scoped = get(
        &format!(
            "{}/api/v1/namespaces/many-3/pods?labelSelector=app%3Dapp-3",
            hub.url()
        ),
        KUBELET,
    )
    .json();
    assert!(!item_names(&scoped).is_empty());
    assert!(!item_names(&scoped).contains("planted"));
    let wide = get(
        &format!("{}/api/v1/pods?labelSelector=app%3Dapp-3", hub.url()),
        KUBELET,
    )
    .json();
    assert!(item_names(&wide).contains("planted"));
}

#[test]
fn cloud_mode_never_answers_from_a_cache() {
    let Warm { _dir, cloud, hub } = warm();
    let spec = hub.spec.clone().with(&["--working-mode=cloud"]);
    drop(hub);
    let hub = Hub::start(&spec);
    cloud.stop();
    let r = get(
        &format!("{}/api/v1/namespaces/default/pods/web-1", hub.url()),
        KUBELET,
    );
    assert_eq!(r.status, 503);
}

#[test]
fn bytes_sent_behind_a_held_watch_do_not_make_it_spin() {
    use std::io::Write;
    let Warm { _dir, cloud, hub } = warm();
    cloud.stop();
    wait_offline(&hub, &cloud);
    let mut s = std::net::TcpStream::connect(hub.proxy).unwrap();
    write!(s, "GET /api/v1/pods?watch=1&timeoutSeconds=600 HTTP/1.1\r\nHost: x\r\nUser-Agent: {KUBELET}\r\n\r\nGARBAGE").unwrap();
    assert!(hub.wait_metric(IN_FLIGHT, 1.0, Duration::from_secs(5)));
    let before = cpu_ticks(&hub.pid().to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(&hub.pid().to_string()).unwrap() - before;
    assert!(spent < 20, "the held watch used {spent} CPU ticks in 2 s");
    drop(s);
    assert!(hub.wait_metric(IN_FLIGHT, 0.0, Duration::from_secs(5)));
}
