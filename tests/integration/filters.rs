//! Issue 14: the relay's response filters (YurtHub's `pkg/yurthub/filter`), through the real binary
//! against the stand-in cloud's fixtures: what kubelet and kube-proxy read is filtered online
//! (lists, watches, gets, gzip), a request needing no filter passes byte for byte, and the same
//! reads answered from the cache while the cloud is gone are filtered too.

use std::io::Read;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// The HTTPS proxy port masterservice writes (the hub need not manage to bind it).
const SECURE_PORT: u16 = 10268;
const HOSTNAME: &str = "kubernetes.io/hostname";

fn start_hub(cloud: &Cloud, tag: &str) -> (TempDir, Hub) {
    start_hub_with(cloud, tag, &[])
}

/// A hub whose filters inject 127.0.0.1 and [`SECURE_PORT`], with `args` besides.
fn start_hub_with(cloud: &Cloud, tag: &str, args: &[&str]) -> (TempDir, Hub) {
    let dir = TempDir::new(tag);
    let spec = HubSpec::for_cloud(cloud, dir.path())
        .with(&[
            "--bind-proxy-address=127.0.0.1",
            &format!("--proxy-secure-port={SECURE_PORT}"),
        ])
        .with(args);
    (dir, Hub::start(&spec))
}

/// A watch of `path` through the hub as `agent` (10 s), open.
fn watch(hub: &Hub, path: &str, agent: &str) -> Events {
    let url = format!("{}{path}?watch=true&timeoutSeconds=10", hub.url());
    let (status, body) = stream(&url, agent);
    assert_eq!(status, 200, "{url}");
    Events::new(body)
}

fn item<'a>(list: &'a Value, ns: &str, name: &str) -> Option<&'a Value> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .find(|i| i["metadata"]["namespace"] == ns && i["metadata"]["name"] == name)
}

fn assert_points_at_hub(svc: &Value) {
    assert_eq!(svc["spec"]["clusterIP"], "127.0.0.1", "{svc}");
    assert_eq!(svc["spec"]["clusterIPs"], json!(["127.0.0.1"]), "{svc}");
    let https = svc["spec"]["ports"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "https"))
        .unwrap_or_else(|| panic!("no https port: {svc}"));
    assert_eq!(https["port"], SECURE_PORT, "{svc}");
}

/// Endpoint addresses of the slice of Service `web`.
fn web_addresses(list: &Value) -> Vec<String> {
    let slice = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "web")
        .unwrap_or_else(|| panic!("no slice of web: {list}"));
    slice["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["addresses"][0].as_str().unwrap_or("").to_owned())
        .collect()
}

/// A cloud with everything the filters act on: the seeded `default/kubernetes` Service, a
/// plain Service, a cloud-only LoadBalancer, kube-proxy's ConfigMap, and Service `web` with
/// node-level topology and endpoints on edge-1 and edge-2.
fn filtered_cloud() -> Cloud {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    cloud.topology_service(
        "shop",
        "web",
        Some(HOSTNAME),
        &[("10.244.1.5", "edge-1"), ("10.244.2.5", "edge-2")],
    );
    cloud.lb_service_discard("shop", "cloud-lb", Some("true"));
    cloud.kube_proxy_configmap();
    cloud
}

/// The reads the filters act on, checked as filtered (online or offline).
fn check_filtered_reads(hub: &Hub) {
    let url = |p: &str| format!("{}{p}", hub.url());

    let services = get(&url("/api/v1/services"), KUBELET);
    assert_eq!(services.status, 200, "{}", services.text());
    let services = services.json();
    assert_points_at_hub(item(&services, "default", "kubernetes").expect("kubernetes"));
    let web = item(&services, "shop", "web").expect("web");
    assert_ne!(
        web["spec"]["clusterIP"], "127.0.0.1",
        "only default/kubernetes moves"
    );
    // kubelet gets no discardcloudservice.
    assert!(item(&services, "shop", "cloud-lb").is_some());

    let services = get(&url("/api/v1/services"), KUBE_PROXY);
    assert_eq!(services.status, 200, "{}", services.text());
    let services = services.json();
    assert!(item(&services, "shop", "cloud-lb").is_none(), "{services}");
    assert!(item(&services, "shop", "web").is_some());
    // kube-proxy gets no masterservice.
    let kubernetes = item(&services, "default", "kubernetes").expect("kubernetes");
    assert_ne!(kubernetes["spec"]["clusterIP"], "127.0.0.1");

    let cm = get(
        &url("/api/v1/namespaces/kube-system/configmaps/kube-proxy"),
        KUBELET,
    );
    assert_eq!(cm.status, 200, "{}", cm.text());
    let length: usize = cm
        .header("content-length")
        .expect("a get has a Content-Length")
        .parse()
        .expect("a number");
    assert_eq!(length, cm.body.len());
    let conf = cm.json()["data"]["config.conf"]
        .as_str()
        .expect("config.conf")
        .to_owned();
    assert!(
        conf.contains("#kubeconfig: /var/lib/kube-proxy/kubeconfig.conf"),
        "{conf}"
    );

    let slices = get(&url("/apis/discovery.k8s.io/v1/endpointslices"), KUBE_PROXY);
    assert_eq!(slices.status, 200, "{}", slices.text());
    assert_eq!(web_addresses(&slices.json()), ["10.244.1.5"]);
}

#[test]
fn kubelet_and_kube_proxy_reads_are_filtered_online_and_offline() {
    let cloud = filtered_cloud();
    let (_dir, hub) = start_hub(&cloud, "filters-reads");
    check_filtered_reads(&hub);
    assert!(
        hub.wait_cached(
            &[
                "kubelet/services.v1.core/default/kubernetes",
                "kube-proxy/services.v1.core/shop/web",
                "kubelet/configmaps.v1.core/kube-system/kube-proxy",
            ],
            Duration::from_secs(10)
        ),
        "cache not warm: {}",
        hub.logs()
    );
    hub.wait_cache_quiet();

    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    check_filtered_reads(&hub);
}

#[test]
fn kubelet_services_watch_points_kubernetes_at_the_hub() {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub(&cloud, "filters-ms-watch");
    let mut events = watch(&hub, "/api/v1/services", KUBELET);
    let added = events.next_event().expect("an ADDED event");
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "kubernetes");
    assert_points_at_hub(&added["object"]);

    let mut svc = added["object"].clone();
    svc["metadata"]["labels"] = json!({"touched": "yes"});
    svc["spec"]["clusterIP"] = json!("10.96.0.1");
    svc["spec"]["clusterIPs"] = json!(["10.96.0.1"]);
    svc["spec"]["ports"][0]["port"] = json!(443);
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(5)));
    cloud.update("services", svc);
    let modified = events.next_event().expect("a MODIFIED event");
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["metadata"]["labels"]["touched"], "yes");
    assert_points_at_hub(&modified["object"]);
}

#[test]
fn kube_proxy_watch_sees_a_discarded_service_as_deleted() {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub(&cloud, "filters-discard-watch");
    let mut events = watch(&hub, "/api/v1/namespaces/shop/services", KUBE_PROXY);
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(5)));
    let lb = cloud.lb_service_discard("shop", "cloud-lb", Some("true"));
    cloud.topology_service("shop", "web", None, &[]);

    let dropped = events.next_event().expect("an event for cloud-lb");
    assert_eq!(dropped["type"], "DELETED", "{dropped}");
    assert_eq!(dropped["object"]["metadata"]["name"], "cloud-lb");
    assert_eq!(dropped["object"]["spec"], lb["spec"], "the original object");
    let kept = events.next_event().expect("an event for web");
    assert_eq!(kept["type"], "ADDED");
    assert_eq!(kept["object"]["metadata"]["name"], "web");
}

#[test]
fn gzip_from_the_cloud_is_filtered_and_sent_plain() {
    let cloud = filtered_cloud();
    cloud.set_gzip_threshold(0);
    let (_dir, hub) = start_hub(&cloud, "filters-gzip");
    let reply = call(
        "GET",
        &format!("{}/api/v1/services", hub.url()),
        KUBELET,
        &[("accept-encoding", "gzip")],
        None,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-encoding"), None);
    let services = reply.json();
    assert_points_at_hub(item(&services, "default", "kubernetes").expect("kubernetes"));
    // Cached as the plain JSON the client got.
    let file = hub
        .spec
        .cache_dir
        .join("kubelet/services.v1.core/default/kubernetes");
    assert!(
        eventually(Duration::from_secs(10), || read_json(&file)
            .is_some_and(|s| s["spec"]["clusterIP"] == "127.0.0.1")),
        "{}",
        hub.logs()
    );
}

#[test]
fn a_request_needing_no_filter_passes_byte_for_byte() {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    let (_dir, hub) = start_hub(&cloud, "filters-none");
    let direct = CloudClient::new(&cloud, "kubernetes-admin");
    // masterservice covers kubelet's lists and watches of services, not its gets.
    for path in [
        "/api/v1/namespaces/default/services/kubernetes",
        "/api/v1/nodes/edge-1",
    ] {
        // The hub's answer first: kubelet's GET of its node writes the node's Autonomy
        // condition (issue 31), and the answer is the node the cloud then holds.
        let got = get(&format!("{}{path}", hub.url()), KUBELET);
        let want = direct.get(path);
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.text(), want.text(), "{path}");
    }
}

#[test]
fn a_large_list_is_filtered_as_it_streams_and_cached_filtered() {
    let cloud = Cloud::start();
    cloud.populate_services(1500);
    cloud.lb_service_discard("svc-3", "cloud-lb", Some("true"));
    let (_dir, hub) = start_hub(&cloud, "filters-stream");
    let url = format!("{}/api/v1/services", hub.url());
    let check = |reply: Reply| {
        assert_eq!(reply.status, 200, "{}", reply.text());
        let list = reply.json();
        assert_eq!(list["kind"], "ServiceList");
        assert!(
            list["metadata"]["resourceVersion"].is_string(),
            "{}",
            list["metadata"]
        );
        let items = list["items"].as_array().expect("items");
        // 1500 populated + default/kubernetes; cloud-lb dropped.
        assert_eq!(items.len(), 1501);
        assert!(item(&list, "svc-3", "cloud-lb").is_none());
        assert!(item(&list, "svc-3", "svc-000003").is_some());
    };
    // kube-proxy's lists of Services are served from the node's shared watch cache (issue
    // 16), 429 until it is warm; filtered as they stream all the same.
    let mut online = get(&url, KUBE_PROXY);
    assert!(eventually(Duration::from_secs(20), || {
        online = get(&url, KUBE_PROXY);
        online.status == 200
    }));
    assert!(online.body.len() > 128 * 1024, "a large list");
    assert_eq!(
        online.header("content-length"),
        None,
        "chunked to the client"
    );
    check(online);
    hub.wait_cache_quiet();

    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    check(get(&url, KUBE_PROXY));
}

#[test]
fn an_undecodable_answer_passes_unchanged_with_a_log_line() {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub(&cloud, "filters-garbage");
    let path = "/api/v1/namespaces/kube-system/configmaps/kube-proxy";
    let garbage = b"{\"kind\":\"ConfigMap\",\"data\":{\"config.conf\":\"kubeconfig: x\"";
    cloud.misanswer(path, 1, 200, garbage);
    let reply = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, garbage, "passed as it came");
    assert!(
        hub.wait_log("passed unchanged and not cached", Duration::from_secs(5)),
        "{}",
        hub.logs()
    );
    // Nothing of it was cached: offline, the object is not there.
    go_offline(&cloud, &hub);
    let offline = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(offline.status, 404, "{}", offline.text());
}

#[test]
fn an_object_the_filters_cannot_read_goes_out_unfiltered_and_nothing_is_cached() {
    let cloud = Cloud::start();
    // Since issue 16 an edge hub serves every client's list of Services from the node's
    // shared watch cache: a cloud's answer to one reaches a filtered client through the
    // relay in cloud mode only (where nothing is cached).
    let (_dir, hub) = start_hub_with(&cloud, "filters-unreadable", &["--working-mode=cloud"]);
    // All namespaces: a list confined to another namespace than `default` holds no object
    // masterservice changes, and skips the filter stage.
    let path = "/api/v1/services";
    // A lone surrogate escape: valid to the hub's scanner, refused by serde_json (in an item
    // masterservice must parse: it is named `kubernetes`).
    let body = br#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"namespace":"default","name":"kubernetes"},"spec":{"clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],"ports":[{"name":"https","port":443}]}},{"metadata":{"namespace":"shop","name":"kubernetes","annotations":{"note":"\ud800"}}}]}"#;
    cloud.misanswer(path, 1, 200, body);
    let reply = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(reply.status, 200);
    let text = reply.text();
    assert!(
        text.contains(r#""clusterIP":"127.0.0.1""#),
        "the rest is filtered: {text}"
    );
    assert!(
        text.contains(
            r#"{"metadata":{"namespace":"shop","name":"kubernetes","annotations":{"note":"\ud800"}}}"#
        ),
        "the odd item as it came: {text}"
    );
    assert!(
        hub.wait_log("cannot be read", Duration::from_secs(5)),
        "{}",
        hub.logs()
    );
    assert_eq!(hub.log_lines(|l| l.contains("cannot be read")), 1);
}

#[test]
fn servicetopology_filters_core_endpoints_and_v1beta1_slices_and_heeds_an_update_trigger() {
    let cloud = Cloud::start();
    let (_, slice, _) = cloud.topology_service(
        "shop",
        "web",
        Some(HOSTNAME),
        &[("10.244.1.5", "edge-1"), ("10.244.2.5", "edge-2")],
    );
    let (_dir, hub) = start_hub(&cloud, "filters-topology-forms");
    // Core Endpoints, which YurtHub leaves unfiltered (#2613); lists and watches only.
    let eps = get(
        &format!("{}/api/v1/namespaces/shop/endpoints", hub.url()),
        KUBE_PROXY,
    );
    assert_eq!(eps.status, 200, "{}", eps.text());
    let eps = eps.json();
    let ips: Vec<Value> = item(&eps, "shop", "web").expect("web")["subsets"]
        .as_array()
        .expect("subsets")
        .iter()
        .flat_map(|s| s["addresses"].as_array().cloned().unwrap_or_default())
        .map(|a| a["ip"].clone())
        .collect();
    assert_eq!(ips, [json!("10.244.1.5")]);
    // The v1beta1 form, the hostname read from its topology.
    let beta = get(
        &format!(
            "{}/apis/discovery.k8s.io/v1beta1/namespaces/shop/endpointslices",
            hub.url()
        ),
        "coredns/1.11.1",
    );
    assert_eq!(beta.status, 200, "{}", beta.text());
    assert_eq!(web_addresses(&beta.json()), ["10.244.1.5"]);

    // A watch; the Service loses its topology and yurt-manager marks the slice: the event
    // that carries the mark is filtered with the new Service, not a remembered one.
    let slices = "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices";
    let mut events = watch(&hub, slices, KUBE_PROXY);
    let added = events.next_event().expect("an ADDED event");
    assert_eq!(
        web_addresses(&json!({"items": [added["object"]]})),
        ["10.244.1.5"]
    );
    let mut svc = cloud.get("services", "shop", "web").expect("web");
    svc["metadata"]["annotations"] = json!({});
    cloud.update("services", svc);
    let mut marked = slice.clone();
    let trigger = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    marked["metadata"]["annotations"]["openyurt.io/update-trigger"] = json!(trigger.to_string());
    cloud.update("endpointslices", marked);
    let modified = events.next_event().expect("a MODIFIED event");
    assert_eq!(modified["type"], "MODIFIED", "{modified}");
    assert_eq!(
        web_addresses(&json!({"items": [modified["object"]]})),
        ["10.244.1.5", "10.244.2.5"]
    );
}

#[test]
fn yurt_hub_cfg_adds_a_component_to_a_filter_without_a_restart() {
    check_yurt_hub_cfg_reload("filters-reload", &[]);
}

#[test]
fn yurt_hub_cfg_adds_a_component_to_a_filter_in_cloud_mode_too() {
    // No cache in cloud mode, but the filters still follow the ConfigMap, as YurtHub's do.
    check_yurt_hub_cfg_reload("filters-reload-cloud", &["--working-mode=cloud"]);
}

fn check_yurt_hub_cfg_reload(tag: &str, args: &[&str]) {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub_with(&cloud, tag, args);
    let custom = "custom-agent/1.0";
    let url = format!("{}/api/v1/services", hub.url());
    let kubernetes_ip = |reply: Reply| {
        assert_eq!(reply.status, 200, "{}", reply.text());
        item(&reply.json(), "default", "kubernetes").expect("kubernetes")["spec"]["clusterIP"]
            .clone()
    };
    assert_ne!(kubernetes_ip(get(&url, custom)), "127.0.0.1");

    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "yurt-hub-cfg", "namespace": "kube-system"},
               "data": {"masterservice": "custom-agent"}}),
    );
    assert!(
        eventually(Duration::from_secs(15), || kubernetes_ip(get(&url, custom))
            == "127.0.0.1"),
        "yurt-hub-cfg not applied: {}",
        hub.logs()
    );
    assert!(hub.wait_log(
        "response filter configuration changed",
        Duration::from_secs(1)
    ));
}

#[test]
fn a_watch_undecodable_from_its_start_passes_unchanged_and_one_broken_later_is_cut() {
    let cloud = Cloud::start();
    // Cloud mode: an edge hub serves every client's watches of Services from the node's
    // shared watch cache since issue 16, so a cloud's broken watch reaches a filtered client
    // only in cloud mode (kubelet's, with masterservice).
    let (_dir, hub) = start_hub_with(&cloud, "filters-bad-watch", &["--working-mode=cloud"]);
    let url = format!(
        "{}/api/v1/namespaces/default/services?watch=true&timeoutSeconds=10",
        hub.url()
    );
    let garbage: &[u8] = b"<html>502 upstream gone</html>\n";
    cloud.misanswer_watch("/api/v1/namespaces/default/services", 1, &[garbage]);
    let (status, mut body) = stream(&url, KUBELET);
    assert_eq!(status, 200);
    let mut got = Vec::new();
    body.read_to_end(&mut got).expect("a whole answer");
    assert_eq!(got, garbage, "passed as it came");

    // Once filtered events went out, raw bytes cannot follow them: the stream is cut.
    let lb = json!({"type": "ADDED", "object": {"kind": "Service", "apiVersion": "v1",
        "metadata": {"namespace": "default", "name": "kubernetes"},
        "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                 "ports": [{"name": "https", "port": 443}]}}})
    .to_string()
        + "\n";
    let lines: [&[u8]; 2] = [lb.as_bytes(), b"{\"type\":\"ADDED\",\"object\":{\n"];
    cloud.misanswer_watch("/api/v1/namespaces/default/services", 1, &lines);
    let (status, body) = stream(&url, KUBELET);
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    let first = events.next_event().expect("the first event");
    assert_eq!(first["type"], "ADDED", "{first}");
    assert_points_at_hub(&first["object"]);
    assert_eq!(events.next_event(), None, "then the stream ends");
}

/// A hub for `cloud` with `--proxy-secure-port=0` plus `args`, once its HTTPS port is open
/// (the filters inject the port it really bound); returns that port too.
fn start_hub_https(cloud: &Cloud, tag: &str, args: &[&str]) -> (TempDir, Hub, u16) {
    let dir = TempDir::new(tag);
    let spec = HubSpec::for_cloud(cloud, dir.path())
        .with(&["--bind-proxy-address=127.0.0.1"])
        .with(args);
    let hub = Hub::start(&spec);
    let https = hub
        .wait_https(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    assert_ne!(https.port(), 0);
    (dir, hub, https.port())
}

/// Lets the cache settle, stops the cloud and waits until the hub answers from the cache.
fn go_offline(cloud: &Cloud, hub: &Hub) {
    hub.wait_cache_quiet();
    cloud.stop();
    assert!(
        hub.wait_healthy(cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
}

/// The port named `https` of a Service or EndpointSlice.
fn https_port(obj: &Value) -> Value {
    obj["spec"]["ports"]
        .as_array()
        .or_else(|| obj["ports"].as_array())
        .and_then(|p| p.iter().find(|p| p["name"] == "https"))
        .unwrap_or_else(|| panic!("no https port: {obj}"))["port"]
        .clone()
}

/// kube-proxy's services as `(namespace/name)` for namespace `shop`.
fn shop_services(hub: &Hub) -> Vec<String> {
    let reply = get(
        &format!("{}/api/v1/namespaces/shop/services", hub.url()),
        KUBE_PROXY,
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut names: Vec<String> = reply.json()["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    names.sort_unstable();
    names
}

/// nodeportisolation for a hub whose pool is `pool-a`, from `args` or the node's label
/// `node_pool`: a watch sees the Service for another pool as DELETED, a list omits it, online
/// and from the cache.
fn check_nodeport_isolation(tag: &str, args: &[&str], node_pool: &str) {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some(node_pool), &[]);
    let (_dir, hub, _) = start_hub_https(&cloud, tag, args);
    let mut events = watch(&hub, "/api/v1/namespaces/shop/services", KUBE_PROXY);
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(5)));
    let theirs = cloud.nodeport_service("shop", "theirs", Some("pool-b, -pool-a"), "NodePort");
    cloud.nodeport_service("shop", "ours", Some("-pool-c,pool-a"), "NodePort");
    cloud.nodeport_service("shop", "plain", None, "NodePort");
    cloud.nodeport_service("shop", "everyone", Some("*"), "LoadBalancer");

    let dropped = events.next_event().expect("an event for theirs");
    assert_eq!(dropped["type"], "DELETED", "{dropped}");
    assert_eq!(dropped["object"]["metadata"]["name"], "theirs");
    assert_eq!(
        dropped["object"]["spec"], theirs["spec"],
        "the original object"
    );
    for name in ["ours", "plain", "everyone"] {
        let kept = events.next_event().expect("an event");
        assert_eq!(kept["type"], "ADDED", "{kept}");
        assert_eq!(kept["object"]["metadata"]["name"], name);
    }
    drop(events);

    let want = ["everyone", "ours", "plain"];
    assert_eq!(shop_services(&hub), want);
    // kubelet is not nodeportisolation's client: it sees every Service.
    let all = get(
        &format!("{}/api/v1/namespaces/shop/services", hub.url()),
        KUBELET,
    );
    assert!(item(&all.json(), "shop", "theirs").is_some());
    go_offline(&cloud, &hub);
    assert_eq!(shop_services(&hub), want);
}

#[test]
fn nodeportisolation_uses_the_nodepool_flag_online_and_offline() {
    // The flag wins over the node's label.
    check_nodeport_isolation("filters-npi-flag", &["--nodepool-name=pool-a"], "pool-b");
}

#[test]
fn nodeportisolation_uses_the_nodes_pool_label_online_and_offline() {
    check_nodeport_isolation("filters-npi-label", &[], "pool-a");
}

#[test]
fn kube_proxy_sends_kubernetes_traffic_to_the_bound_https_port_online_and_offline() {
    let cloud = Cloud::start();
    cloud.kubernetes_service_fixtures();
    cloud.topology_service("shop", "web", None, &[("10.244.1.5", "edge-1")]);
    let (_dir, hub, port) = start_hub_https(&cloud, "filters-fkst", &[]);
    let check = || {
        let slices = get(
            &format!("{}/apis/discovery.k8s.io/v1/endpointslices", hub.url()),
            KUBE_PROXY,
        );
        assert_eq!(slices.status, 200, "{}", slices.text());
        let slices = slices.json();
        let kubernetes = item(&slices, "default", "kubernetes").expect("default/kubernetes");
        assert_eq!(
            kubernetes["endpoints"],
            json!([{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]),
            "{kubernetes}"
        );
        assert_eq!(https_port(kubernetes), port, "the port the hub bound");
        // Other slices are not touched.
        assert_eq!(web_addresses(&slices), ["10.244.1.5"]);

        // masterservice injects the same bound port into kubelet's view.
        let services = get(&format!("{}/api/v1/services", hub.url()), KUBELET).json();
        let svc = item(&services, "default", "kubernetes").expect("kubernetes");
        assert_eq!(svc["spec"]["clusterIP"], "127.0.0.1", "{svc}");
        assert_eq!(https_port(svc), port, "the port the hub bound");
    };
    check();
    go_offline(&cloud, &hub);
    check();
}

#[test]
fn kubelet_pods_point_explicit_service_env_at_the_hub_online_and_offline() {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    cloud.pod_with_service_env("shop", "operator", "edge-1", "api.example.com", "443");
    let (_dir, hub, port) = start_hub_https(&cloud, "filters-senv", &[]);
    let env = |pod: &Value, field: &str, container: &str| -> Vec<(String, Value)> {
        pod["spec"][field]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == container))
            .unwrap_or_else(|| panic!("no {field} {container}: {pod}"))["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter(|v| {
                v["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("KUBERNETES_SERVICE_"))
            })
            .map(|v| {
                (
                    v["name"].as_str().unwrap_or("").to_owned(),
                    v["value"].clone(),
                )
            })
            .collect()
    };
    let check_pod = |pod: &Value| {
        let (host, port) = (json!("127.0.0.1"), json!(port.to_string()));
        assert_eq!(
            env(pod, "containers", "app"),
            [
                ("KUBERNETES_SERVICE_HOST".to_owned(), host.clone()),
                ("KUBERNETES_SERVICE_PORT".to_owned(), port)
            ]
        );
        // Set beside valueFrom; no port added.
        assert_eq!(
            env(pod, "containers", "sidecar"),
            [("KUBERNETES_SERVICE_HOST".to_owned(), host)]
        );
        assert_eq!(
            env(pod, "initContainers", "init"),
            [
                (
                    "KUBERNETES_SERVICE_HOST".to_owned(),
                    json!("api.example.com")
                ),
                ("KUBERNETES_SERVICE_PORT".to_owned(), json!("443"))
            ],
            "init containers are left alone"
        );
    };
    let check = || {
        let one = get(
            &format!("{}/api/v1/namespaces/shop/pods/operator", hub.url()),
            KUBELET,
        );
        assert_eq!(one.status, 200, "{}", one.text());
        check_pod(&one.json());
        let list = get(
            &format!(
                "{}/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
                hub.url()
            ),
            KUBELET,
        );
        assert_eq!(list.status, 200, "{}", list.text());
        check_pod(item(&list.json(), "shop", "operator").expect("the pod"));
    };
    check();
    // Another client's view is not changed.
    let raw = get(
        &format!("{}/api/v1/namespaces/shop/pods/operator", hub.url()),
        KUBE_PROXY,
    );
    assert_eq!(
        env(&raw.json(), "containers", "app")[0].1,
        "api.example.com"
    );
    go_offline(&cloud, &hub);
    check();
}

#[test]
fn servicetopology_keeps_the_endpoints_of_this_nodes_pool_online_and_offline() {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    cloud.nodepool("pool-a", &["edge-1", "edge-3"]);
    cloud.nodepool("pool-b", &["edge-2"]);
    cloud.topology_service(
        "shop",
        "web",
        Some("openyurt.io/nodepool"),
        &[
            ("10.244.1.5", "edge-1"),
            ("10.244.2.5", "edge-2"),
            ("10.244.3.5", "edge-3"),
        ],
    );
    let (_dir, hub, _) = start_hub_https(&cloud, "filters-pool-topology", &[]);
    let url = format!(
        "{}/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices",
        hub.url()
    );
    let check = || {
        let slices = get(&url, KUBE_PROXY);
        assert_eq!(slices.status, 200, "{}", slices.text());
        assert_eq!(web_addresses(&slices.json()), ["10.244.1.5", "10.244.3.5"]);
    };
    check();
    go_offline(&cloud, &hub);
    check();
}

/// The reads of [`check_filtered_reads`] with masterservice, or every filter (`*`), disabled.
/// `want` is the cloud's own `default/kubernetes` Service.
fn check_disabled(hub: &Hub, want: &Value, all: bool) {
    let url = |p: &str| format!("{}{p}", hub.url());
    let services = get(&url("/api/v1/services"), KUBELET);
    assert_eq!(services.status, 200, "{}", services.text());
    let services = services.json();
    let kubernetes = item(&services, "default", "kubernetes").expect("kubernetes");
    assert_eq!(kubernetes["spec"], want["spec"], "masterservice is off");

    let services = get(&url("/api/v1/services"), KUBE_PROXY).json();
    assert_eq!(
        item(&services, "shop", "cloud-lb").is_some(),
        all,
        "discardcloudservice is on unless all are off: {services}"
    );
    let path = "/api/v1/namespaces/kube-system/configmaps/kube-proxy";
    let cm = get(&url(path), KUBELET);
    assert_eq!(cm.status, 200, "{}", cm.text());
    let conf = cm.json()["data"]["config.conf"]
        .as_str()
        .expect("config.conf")
        .to_owned();
    assert_eq!(
        conf.contains("#kubeconfig:"),
        !all,
        "inclusterconfig is on unless all are off: {conf}"
    );
}

fn check_disabling(tag: &str, flag: &str, all: bool) {
    let cloud = Cloud::start();
    cloud.node("edge-1", Some("pool-a"), &[]);
    cloud.lb_service_discard("shop", "cloud-lb", Some("true"));
    cloud.kube_proxy_configmap();
    let direct = CloudClient::new(&cloud, "kubernetes-admin");
    let want = direct
        .get("/api/v1/namespaces/default/services/kubernetes")
        .json();
    let (_dir, hub, _) = start_hub_https(&cloud, tag, &[flag]);
    check_disabled(&hub, &want, all);
    if all {
        let path = "/api/v1/namespaces/kube-system/configmaps/kube-proxy";
        let got = get(&format!("{}{path}", hub.url()), KUBELET);
        assert_eq!(got.text(), direct.get(path).text(), "byte for byte");
    }
    go_offline(&cloud, &hub);
    check_disabled(&hub, &want, all);
}

#[test]
fn disabled_masterservice_leaves_kubernetes_alone_online_and_offline() {
    check_disabling(
        "filters-disable-ms",
        "--disabled-resource-filters=masterservice",
        false,
    );
}

#[test]
fn disabling_every_filter_leaves_answers_unchanged_online_and_offline() {
    check_disabling("filters-disable-all", "--disabled-resource-filters=*", true);
}

/// Env var `name` of pod `name`'s first container in a pod list.
fn pod_env(list: &Value, ns: &str, pod: &str, var: &str) -> Option<String> {
    let env = item(list, ns, pod)?["spec"]["containers"][0]["env"].as_array()?;
    let found = env.iter().find(|v| v["name"] == var)?;
    Some(found["value"].as_str()?.to_owned())
}

#[test]
fn kubelets_repeated_pod_list_is_filtered_again_once_the_cloud_changes() {
    // Issue 34: a list its filters left unchanged passes its repeat at one resourceVersion
    // unscanned (filters/list_memo.rs). A change in the cloud moves the resourceVersion: the
    // next list is filtered again, and one a filter changed is filtered every time.
    let cloud = Cloud::start();
    cloud.populate_pods(&PodFill {
        count: 120,
        namespaces: 1,
        nodes: 1,
        body_bytes: 1_000,
        prefix: "memo".into(),
    });
    let (_dir, hub) = start_hub(&cloud, "filters-memo");
    let url = format!("{}/api/v1/namespaces/memo-0/pods", hub.url());
    let list = || {
        let reply = get(&url, KUBELET);
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.body.len() > 64 * 1024, "a list that streams");
        reply.json()
    };
    let first = list();
    assert_eq!(first["items"].as_array().map(Vec::len), Some(120));
    assert_eq!(list(), first, "the repeat at one resourceVersion");

    let mut pod = cloud.get("pods", "memo-0", "memo-000007").expect("the pod");
    pod["spec"]["containers"][0]["env"] = json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": "api.example.com"},
        {"name": "POD_INDEX", "value": "7"}
    ]);
    cloud.update("pods", pod);
    for round in 0..2 {
        let changed = list();
        assert_ne!(
            changed["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"],
            "round {round}"
        );
        let host = pod_env(&changed, "memo-0", "memo-000007", "KUBERNETES_SERVICE_HOST");
        assert!(
            host.as_deref().is_some_and(|h| h != "api.example.com"),
            "round {round}: {host:?} points at the hub"
        );
        assert_eq!(
            pod_env(&changed, "memo-0", "memo-000008", "POD_INDEX").as_deref(),
            Some("8")
        );
    }
}
