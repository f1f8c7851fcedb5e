//! The stand-in cloud's side of issue 14 (response filters), tested on its own over HTTPS
//! as a client of the apiserver sees it, so the filter tests can trust what they filter:
//! EndpointSlices in v1 and v1beta1 shapes, OpenYurt's NodePool CRD, and each fixture's
//! JSON in the fields the filters read (YurtHub's `pkg/yurthub/filter`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::hub::{CloudClient, Events, names_in_order};
use crate::support::{
    APISERVER_ADDRESSES, APISERVER_PORT, Cloud, DISCARD_ANNOTATION, NODEPOOL_LABEL,
    NODEPORT_LISTEN_ANNOTATION, TOPOLOGY_ANNOTATION,
};

const SLICES_V1: &str = "/apis/discovery.k8s.io/v1";
const SLICES_V1BETA1: &str = "/apis/discovery.k8s.io/v1beta1";
const NODEPOOLS: &str = "/apis/apps.openyurt.io/v1beta2/nodepools";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn client(cloud: &Cloud) -> CloudClient {
    CloudClient::new(cloud, "kubernetes-admin")
}

/// A GET that must answer 200, as JSON.
fn get_ok(c: &CloudClient, path: &str) -> Value {
    let r = c.get(path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

/// The next event of a watch, failing the test when the stream ends first.
fn next(events: &mut Events) -> Value {
    events.next_event().expect("the watch ended early")
}

/// `app`'s slice: three pods, on edge-1, edge-2 and one without a node.
fn web_service(cloud: &Cloud, keys: Option<&str>) -> (Value, Value, Value) {
    cloud.topology_service(
        "shop",
        "web",
        keys,
        &[
            ("10.244.1.5", "edge-1"),
            ("10.244.2.5", "edge-2"),
            ("10.244.3.5", ""),
        ],
    )
}

#[test]
fn endpointslices_read_as_v1_carry_node_names_and_as_v1beta1_topology() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    let (_, slice, _) = web_service(&cloud, Some(HOSTNAME));
    let name = slice["metadata"]["name"].as_str().expect("generated name");
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    let selector = "labelSelector=kubernetes.io%2Fservice-name%3Dweb";

    let v1 = get_ok(
        &c,
        &format!("{SLICES_V1}/namespaces/shop/endpointslices?{selector}"),
    );
    assert_eq!(v1["apiVersion"], "discovery.k8s.io/v1");
    assert_eq!(v1["kind"], "EndpointSliceList");
    assert_eq!(names_in_order(&v1), [name]);
    let eps = &v1["items"][0]["endpoints"];
    assert_eq!(eps[0]["nodeName"], "edge-1");
    assert_eq!(eps[1]["nodeName"], "edge-2");
    assert!(eps[2].get("nodeName").is_none(), "{}", eps[2]);
    assert!(
        eps[0].get("topology").is_none(),
        "v1 has no topology: {}",
        eps[0]
    );

    let beta = get_ok(
        &c,
        &format!("{SLICES_V1BETA1}/namespaces/shop/endpointslices?{selector}"),
    );
    assert_eq!(beta["apiVersion"], "discovery.k8s.io/v1beta1");
    assert_eq!(names_in_order(&beta), [name]);
    let eps = &beta["items"][0]["endpoints"];
    assert_eq!(eps[0]["topology"], json!({HOSTNAME: "edge-1"}));
    assert_eq!(eps[1]["topology"][HOSTNAME], "edge-2");
    assert!(eps[2].get("topology").is_none(), "{}", eps[2]);
    assert_eq!(eps[0]["addresses"], json!(["10.244.1.5"]));
    assert_eq!(beta["items"][0]["addressType"], "IPv4");

    let one = get_ok(
        &c,
        &format!("{SLICES_V1BETA1}/namespaces/shop/endpointslices/{name}"),
    );
    assert_eq!(one["apiVersion"], "discovery.k8s.io/v1beta1");
    assert_eq!(one["kind"], "EndpointSlice");
    assert_eq!(one["endpoints"][1]["topology"][HOSTNAME], "edge-2");
    // The stored object did not change by being read in another version.
    let stored = cloud
        .get("endpointslices", "shop", name)
        .expect("slice stored");
    assert!(stored["endpoints"][0].get("topology").is_none());
}

#[test]
fn endpointslices_written_as_v1beta1_are_stored_as_v1() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    let body = json!({
        "apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
        "metadata": {"name": "old-abcde", "labels": {"kubernetes.io/service-name": "old"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.9.9"], "conditions": {"ready": true},
                       "topology": {HOSTNAME: "edge-9", "topology.kubernetes.io/zone": "z1"}}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    });
    let path = format!("{SLICES_V1BETA1}/namespaces/default/endpointslices");
    let r = c.call(
        "POST",
        &path,
        "application/json",
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["endpoints"][0]["topology"][HOSTNAME], "edge-9");
    let v1 = get_ok(
        &c,
        &format!("{SLICES_V1}/namespaces/default/endpointslices/old-abcde"),
    );
    assert_eq!(
        v1["endpoints"][0],
        json!({"addresses": ["10.244.9.9"], "conditions": {"ready": true},
               "nodeName": "edge-9", "zone": "z1"})
    );

    // A merge patch in v1beta1 terms moves the endpoint to another node.
    let patch = json!({"endpoints": [{"addresses": ["10.244.9.9"],
                                      "topology": {HOSTNAME: "edge-7"}}]});
    let r = c.call(
        "PATCH",
        &format!("{path}/old-abcde"),
        "application/merge-patch+json",
        Some(patch.to_string().as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let stored = cloud
        .get("endpointslices", "default", "old-abcde")
        .expect("slice");
    assert_eq!(stored["endpoints"][0]["nodeName"], "edge-7");
    assert!(stored["endpoints"][0].get("topology").is_none());
}

#[test]
fn v1beta1_watch_sees_the_same_changes_in_its_own_shape() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    let (_, slice, _) = web_service(&cloud, Some(HOSTNAME));
    let name = slice["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let (status, mut events) = c.watch(&format!(
        "{SLICES_V1BETA1}/endpointslices?watch=true&timeoutSeconds=10\
         &labelSelector=kubernetes.io%2Fservice-name%3Dweb"
    ));
    assert_eq!(status, 200);
    let added = next(&mut events);
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["apiVersion"], "discovery.k8s.io/v1beta1");
    assert_eq!(
        added["object"]["endpoints"][0]["topology"][HOSTNAME],
        "edge-1"
    );
    assert!(cloud.wait_for_watchers("endpointslices", 1, Duration::from_secs(5)));

    let mut moved = slice.clone();
    moved["endpoints"][2]["nodeName"] = json!("edge-3");
    cloud.update("endpointslices", moved);
    let modified = next(&mut events);
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(
        modified["object"]["endpoints"][2]["topology"][HOSTNAME],
        "edge-3"
    );

    cloud.delete("endpointslices", "shop", &name);
    let deleted = next(&mut events);
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(deleted["object"]["apiVersion"], "discovery.k8s.io/v1beta1");
    let rv: u64 = deleted["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion");
    assert_eq!(
        rv,
        cloud.resource_version(),
        "the deletion's resourceVersion"
    );
}

#[test]
fn discovery_serves_both_slice_versions_and_the_nodepool_crd() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    let group = get_ok(&c, "/apis/discovery.k8s.io");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let beta = get_ok(&c, SLICES_V1BETA1);
    assert_eq!(beta["groupVersion"], "discovery.k8s.io/v1beta1");
    assert_eq!(beta["resources"][0]["name"], "endpointslices");

    let yurt = get_ok(&c, "/apis/apps.openyurt.io/v1beta2");
    let resources: Vec<&str> = yurt["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(resources, ["nodepools", "nodepools/status"]);
    assert_eq!(yurt["resources"][0]["namespaced"], false);
    assert_eq!(yurt["resources"][0]["kind"], "NodePool");
    assert_eq!(yurt["resources"][0]["shortNames"], json!(["np"]));

    let groups = get_ok(&c, "/apis");
    let listed: Vec<&str> = groups["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(listed.contains(&"apps.openyurt.io"), "{listed:?}");

    // Aggregated discovery lists both versions of the group, preferred first.
    let agg = c.send(
        "GET",
        "/apis",
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
        None,
    );
    assert_eq!(agg.status, 200);
    let doc = agg.json();
    let item = doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["metadata"]["name"] == "discovery.k8s.io")
        .expect("discovery.k8s.io listed");
    let versions: Vec<&str> = item["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
    assert_eq!(
        item["versions"][1]["resources"][0]["responseKind"]["version"],
        "v1beta1"
    );

    // The CRD can go like any other.
    cloud.remove_crd("nodepools.apps.openyurt.io");
    assert_eq!(c.get(NODEPOOLS).status, 404);
    assert_eq!(c.get("/apis/apps.openyurt.io").status, 404);
}

#[test]
fn nodepools_get_list_and_watch_by_name() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.nodepool("hangzhou", &["edge-2", "edge-1"]);
    cloud.nodepool("beijing", &["edge-9"]);

    let pool = get_ok(&c, &format!("{NODEPOOLS}/hangzhou"));
    assert_eq!(pool["apiVersion"], "apps.openyurt.io/v1beta2");
    assert_eq!(pool["kind"], "NodePool");
    assert_eq!(pool["status"]["nodes"], json!(["edge-1", "edge-2"]));
    assert_eq!(pool["spec"]["type"], "Edge");
    assert!(pool["metadata"].get("namespace").is_none());
    let status = get_ok(&c, &format!("{NODEPOOLS}/hangzhou/status"));
    assert_eq!(status["status"]["readyNodeNum"], 2);
    assert_eq!(
        c.get("/apis/apps.openyurt.io/v1beta2/namespaces/default/nodepools/hangzhou")
            .status,
        404,
        "cluster-scoped"
    );
    assert_eq!(c.get(&format!("{NODEPOOLS}/shanghai")).status, 404);

    let all = get_ok(&c, NODEPOOLS);
    assert_eq!(all["kind"], "NodePoolList");
    assert_eq!(names_in_order(&all), ["beijing", "hangzhou"]);
    // Custom resources carry their kind in lists.
    assert_eq!(all["items"][0]["kind"], "NodePool");
    let one = get_ok(
        &c,
        &format!("{NODEPOOLS}?fieldSelector=metadata.name%3Dhangzhou"),
    );
    assert_eq!(names_in_order(&one), ["hangzhou"]);
    let rv = one["metadata"]["resourceVersion"]
        .as_str()
        .expect("list rv")
        .to_string();

    let (status, mut events) = c.watch(&format!(
        "{NODEPOOLS}?watch=true&timeoutSeconds=10&resourceVersion={rv}\
         &fieldSelector=metadata.name%3Dhangzhou"
    ));
    assert_eq!(status, 200);
    assert!(cloud.wait_for_watchers("nodepools", 1, Duration::from_secs(5)));
    cloud.set_nodepool_nodes("beijing", &["edge-9", "edge-8"]);
    cloud.set_nodepool_nodes("hangzhou", &["edge-1"]);
    let ev = next(&mut events);
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["metadata"]["name"], "hangzhou");
    assert_eq!(ev["object"]["status"]["nodes"], json!(["edge-1"]));
}

#[test]
fn the_kubernetes_service_slice_and_endpoints_are_the_apiservers() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.kubernetes_service_fixtures();

    let svc = get_ok(&c, "/api/v1/namespaces/default/services/kubernetes");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc["spec"]["clusterIPs"], json!(["10.96.0.1"]));
    assert_eq!(svc["spec"]["ports"][0]["name"], "https");
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);

    // kube-proxy's list: every slice, in v1.
    let slices = get_ok(&c, &format!("{SLICES_V1}/endpointslices"));
    let slice = slices["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|s| s["metadata"]["namespace"] == "default" && s["metadata"]["name"] == "kubernetes")
        .expect("default/kubernetes slice")
        .clone();
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["ports"],
        json!([{"name": "https", "port": APISERVER_PORT, "protocol": "TCP"}])
    );
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    let eps = slice["endpoints"].as_array().expect("endpoints");
    let addrs: Vec<&str> = eps
        .iter()
        .filter_map(|e| e["addresses"][0].as_str())
        .collect();
    assert_eq!(addrs, APISERVER_ADDRESSES);
    assert!(eps.iter().all(|e| e["conditions"]["ready"] == true));
    assert!(eps.iter().all(|e| e.get("nodeName").is_none()));

    let ep = get_ok(&c, "/api/v1/namespaces/default/endpoints/kubernetes");
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], APISERVER_PORT);
    assert_eq!(
        ep["subsets"][0]["addresses"][1]["ip"],
        APISERVER_ADDRESSES[1]
    );
}

#[test]
fn kube_proxy_configmap_holds_kubeadms_kubeconfig_line() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.kube_proxy_configmap();
    // kubelet's watch of one ConfigMap it mounts.
    let (status, mut events) = c.watch(
        "/api/v1/namespaces/kube-system/configmaps?watch=true&timeoutSeconds=5\
         &fieldSelector=metadata.name%3Dkube-proxy",
    );
    assert_eq!(status, 200);
    let ev = next(&mut events);
    assert_eq!(ev["type"], "ADDED");
    let cm = &ev["object"];
    assert_eq!(cm["metadata"]["labels"]["app"], "kube-proxy");
    let conf = cm["data"]["config.conf"].as_str().expect("config.conf");
    // The lines inclusterconfig rewrites: `kubeconfig: <path>` after trimming, two parts on ':'.
    let lines: Vec<&str> = conf.lines().collect();
    let hits: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            let parts: Vec<&str> = lines[i].trim().split(':').collect();
            parts.len() == 2 && parts[0] == "kubeconfig"
        })
        .collect();
    assert_eq!(hits.len(), 1, "{conf}");
    assert_eq!(
        lines[hits[0]],
        "  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf"
    );
    let parent = lines[..hits[0]]
        .iter()
        .rev()
        .find(|l| !l.starts_with(' '))
        .expect("a parent key");
    assert_eq!(*parent, "clientConnection:");
    assert!(conf.contains("kind: KubeProxyConfiguration"));
    let kubeconfig = cm["data"]["kubeconfig.conf"].as_str().expect("kubeconfig");
    assert!(
        kubeconfig.contains(&format!("server: {}", cloud.url())),
        "{kubeconfig}"
    );
    let got = get_ok(&c, "/api/v1/namespaces/kube-system/configmaps/kube-proxy");
    assert_eq!(got["data"], cm["data"]);
}

#[test]
fn nodes_carry_their_pool_label_and_are_ready() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.node("edge-1", Some("hangzhou"), &[("example.com/gw", "yes")]);
    cloud.node("cloud-1", None, &[]);

    let node = get_ok(&c, "/api/v1/nodes/edge-1");
    assert_eq!(node["metadata"]["labels"][NODEPOOL_LABEL], "hangzhou");
    assert_eq!(node["metadata"]["labels"][HOSTNAME], "edge-1");
    assert_eq!(node["metadata"]["labels"]["example.com/gw"], "yes");
    assert_eq!(node["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(node["status"]["conditions"][0]["status"], "True");
    assert_eq!(node["status"]["addresses"][0]["type"], "InternalIP");

    let pooled = get_ok(
        &c,
        "/api/v1/nodes?labelSelector=apps.openyurt.io%2Fnodepool%3Dhangzhou",
    );
    assert_eq!(names_in_order(&pooled), ["edge-1"]);
    let unpooled = get_ok(
        &c,
        "/api/v1/nodes?labelSelector=%21apps.openyurt.io%2Fnodepool",
    );
    assert_eq!(names_in_order(&unpooled), ["cloud-1"]);
}

#[test]
fn services_for_topology_nodeport_and_discard_filters() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    web_service(&cloud, Some("openyurt.io/nodepool"));
    cloud.topology_service("shop", "plain", None, &[("10.244.1.6", "edge-1")]);
    cloud.nodeport_service("shop", "np-listen", Some("-hangzhou,*"), "NodePort");
    cloud.nodeport_service("shop", "np-empty", Some(""), "LoadBalancer");
    cloud.nodeport_service("shop", "np-none", None, "NodePort");
    cloud.lb_service_discard("shop", "lb-discard", Some("true"));
    cloud.lb_service_discard("shop", "lb-keep", Some("false"));
    cloud.tunnel_server_internal_service();

    // kube-proxy's list of Services.
    let list = get_ok(
        &c,
        "/api/v1/services?labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name",
    );
    let by_name = |ns: &str, n: &str| -> Value {
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|s| s["metadata"]["namespace"] == ns && s["metadata"]["name"] == n)
            .unwrap_or_else(|| panic!("{ns}/{n} not listed"))
            .clone()
    };
    assert_eq!(list["items"].as_array().map(Vec::len), Some(9));
    let web = by_name("shop", "web");
    assert_eq!(
        web["metadata"]["annotations"][TOPOLOGY_ANNOTATION],
        "openyurt.io/nodepool"
    );
    assert!(
        by_name("shop", "plain")["metadata"]
            .get("annotations")
            .is_none()
    );

    let listen = by_name("shop", "np-listen");
    assert_eq!(listen["spec"]["type"], "NodePort");
    assert_eq!(
        listen["metadata"]["annotations"][NODEPORT_LISTEN_ANNOTATION],
        "-hangzhou,*"
    );
    let ports: Vec<u64> = listen["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["nodePort"].as_u64())
        .collect();
    assert_eq!(ports.len(), 2);
    assert!(
        ports.iter().all(|p| (30000..=32767).contains(p)),
        "{ports:?}"
    );
    assert_ne!(ports[0], ports[1]);
    let empty = by_name("shop", "np-empty");
    assert_eq!(empty["spec"]["type"], "LoadBalancer");
    assert_eq!(
        empty["metadata"]["annotations"][NODEPORT_LISTEN_ANNOTATION],
        ""
    );
    assert!(
        by_name("shop", "np-none")["metadata"]
            .get("annotations")
            .is_none()
    );

    let discard = by_name("shop", "lb-discard");
    assert_eq!(discard["spec"]["type"], "LoadBalancer");
    assert_eq!(
        discard["metadata"]["annotations"][DISCARD_ANNOTATION],
        "true"
    );
    assert_eq!(
        discard["status"]["loadBalancer"]["ingress"][0]["ip"],
        "203.0.113.10"
    );
    assert_eq!(
        by_name("shop", "lb-keep")["metadata"]["annotations"][DISCARD_ANNOTATION],
        "false"
    );
    let tunnel = by_name("kube-system", "x-tunnel-server-internal-svc");
    assert_eq!(tunnel["spec"]["type"], "ClusterIP");

    // servicetopology's lookup: the slice's namespace and service-name label find the
    // Service.
    let slices = get_ok(&c, &format!("{SLICES_V1}/namespaces/shop/endpointslices"));
    let svc_names: BTreeSet<&str> = slices["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|s| s["metadata"]["labels"]["kubernetes.io/service-name"].as_str())
        .collect();
    assert_eq!(svc_names, BTreeSet::from(["plain", "web"]));
    let eps = get_ok(&c, "/api/v1/namespaces/shop/endpoints/web");
    assert_eq!(eps["subsets"][0]["addresses"][0]["nodeName"], "edge-1");
    assert!(eps["subsets"][0]["addresses"][2].get("nodeName").is_none());
}

#[test]
fn a_pod_sets_the_in_cluster_variables_explicitly() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.pod_with_service_env("ops", "operator", "edge-1", "api.example.com", "443");
    // kubelet's list of its pods.
    let list = get_ok(&c, "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1");
    assert_eq!(names_in_order(&list), ["operator"]);
    let pod = &list["items"][0];
    assert_eq!(pod["status"]["phase"], "Running");
    let env = |section: &str, i: usize, var: &str| -> Value {
        pod["spec"][section][i]["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == var)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        env("containers", 0, "KUBERNETES_SERVICE_HOST")["value"],
        "api.example.com"
    );
    assert_eq!(
        env("containers", 0, "KUBERNETES_SERVICE_PORT")["value"],
        "443"
    );
    let from = env("containers", 1, "KUBERNETES_SERVICE_HOST");
    assert!(from.get("value").is_none() && from.get("valueFrom").is_some());
    assert_eq!(env("containers", 1, "KUBERNETES_SERVICE_PORT"), Value::Null);
    assert_eq!(
        env("initContainers", 0, "KUBERNETES_SERVICE_HOST")["value"],
        "api.example.com"
    );
    assert_eq!(
        env("initContainers", 0, "KUBERNETES_SERVICE_PORT")["value"],
        "443"
    );
}

#[test]
fn bulk_services_and_twenty_thousand_slices_list_and_page() {
    let cloud = Cloud::start();
    let c = client(&cloud);
    cloud.set_record_requests(false);
    let t = Instant::now();
    cloud.populate_services(1000);
    let rv = cloud.populate_endpointslices(20_000, 50);
    let filled = t.elapsed();
    assert_eq!(cloud.resource_version(), rv);

    let services = get_ok(&c, "/api/v1/services");
    // The 1,000 plus the seeded default/kubernetes.
    assert_eq!(services["items"].as_array().map(Vec::len), Some(1001));
    let annotated = services["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|s| s["metadata"]["annotations"][TOPOLOGY_ANNOTATION] == HOSTNAME)
        .count();
    assert_eq!(annotated, 250);
    let svc = get_ok(&c, "/api/v1/namespaces/svc-1/services/svc-000001");
    assert_eq!(
        svc["metadata"]["annotations"][TOPOLOGY_ANNOTATION],
        "openyurt.io/nodepool"
    );

    let t = Instant::now();
    let all = c.get(&format!("{SLICES_V1}/endpointslices"));
    assert_eq!(all.status, 200);
    let all = all.json();
    let listed = t.elapsed();
    let items = all["items"].as_array().expect("items");
    assert_eq!(items.len(), 20_000);
    assert_eq!(items[0]["endpoints"].as_array().map(Vec::len), Some(3));
    let page = get_ok(&c, &format!("{SLICES_V1}/endpointslices?limit=500"));
    assert_eq!(page["items"].as_array().map(Vec::len), Some(500));
    assert_eq!(page["metadata"]["remainingItemCount"], 19_500);

    // A slice of a populated Service is found by the label servicetopology reads.
    let one = get_ok(
        &c,
        &format!(
            "{SLICES_V1BETA1}/namespaces/svc-4/endpointslices\
             ?labelSelector=kubernetes.io%2Fservice-name%3Dsvc-000004"
        ),
    );
    assert_eq!(names_in_order(&one), ["svc-000004-ab12c"]);
    assert_eq!(
        one["items"][0]["endpoints"][0]["topology"][HOSTNAME],
        "node-4"
    );
    eprintln!("filled 21,000 objects in {filled:?}; listed 20,000 slices in {listed:?}");
}
