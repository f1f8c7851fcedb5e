//! Issue 28: the node's identity and cache belong to the node. Offline writes plant nothing
//! (item 1), and the node's identity is lent only on the plain port at `--bind-address` or
//! to a client certificate naming this node (item 3); a request without credentials on the
//! HTTPS port reaches the cloud anonymous and opens no component's cache.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::https::{self, ClientId};
use crate::support::hub::*;

const NODE: &str = "edge-1";

/// Every file under the cache and its bytes (the writer quiet first).
fn snapshot(hub: &Hub) -> BTreeMap<String, Vec<u8>> {
    hub.wait_cache_quiet();
    let root = hub.spec.cache_dir.clone();
    files_under(&root)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_default();
            let rel = path.strip_prefix(&root).unwrap_or(&path);
            (rel.display().to_string(), bytes)
        })
        .collect()
}

fn pod(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": image}]},
        "status": {"phase": "Running"}
    })
}

/// What an attacker on the node posts: a privileged pod mounting the host's root, bound to
/// this node, with a resourceVersion above anything the cloud has.
fn planted(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "99999999"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "x", "image": "evil", "securityContext": {"privileged": true},
                            "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}]
        }
    })
}

/// The cluster CA (which signs the hub's serving certificate), DER.
fn ca(cloud: &Cloud) -> Vec<u8> {
    cloud.pki().ca_der().to_vec()
}

/// kubelet's offline view of its pods: names and images.
fn kubelet_pods(hub: &Hub) -> BTreeMap<String, String> {
    let url = format!(
        "{}/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}",
        hub.url()
    );
    let list = get(&url, KUBELET);
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let image = p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default();
            (name, image.to_owned())
        })
        .collect()
}

#[test]
fn offline_writes_plant_nothing_on_either_port_and_after_a_restart() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("app-0", "app:1"));
    cloud.create(
        "secrets",
        json!({"metadata": {"name": "creds", "namespace": "default"}, "data": {"k": "b2xk"}}),
    );
    let dir = TempDir::new("trust-writes");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let https_addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    let url = |p: &str| format!("{}{p}", hub.url());
    assert_eq!(kubelet_pods(&hub).len(), 1);
    let secret_path = "/api/v1/namespaces/default/secrets/creds";
    assert_eq!(get(&url(secret_path), KUBELET).status, 200);
    assert!(hub.wait_cached(
        &[
            "kubelet/pods.v1.core/default/app-0",
            "kubelet/secrets.v1.core/default/creds"
        ],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    let before = snapshot(&hub);

    let json_body = [("Content-Type", "application/json")];
    let pods = "/api/v1/namespaces/default/pods";
    let over = planted("app-0");
    let secret = json!({"metadata": {"name": "creds", "namespace": "default",
                        "resourceVersion": "99999999"}, "data": {"k": "bmV3"}});
    // kubelet's User-Agent and no token on the plain port: every write waits for the cloud.
    let writes: [(&str, String, Option<&Value>); 6] = [
        ("POST", pods.to_owned(), Some(&planted("backdoor"))),
        ("POST", pods.to_owned(), Some(&over)),
        ("PUT", format!("{pods}/app-0"), Some(&over)),
        ("PATCH", format!("{pods}/app-0"), Some(&over)),
        ("PUT", secret_path.to_owned(), Some(&secret)),
        ("DELETE", format!("{pods}/app-0"), None),
    ];
    for (method, path, body) in &writes {
        let body = body.map(Value::to_string);
        let headers: &[(&str, &str)] = if *method == "PATCH" {
            &[("Content-Type", "application/merge-patch+json")]
        } else {
            &json_body
        };
        let answer = call(
            method,
            &url(path),
            KUBELET,
            headers,
            body.as_deref().map(str::as_bytes),
        );
        assert_eq!(answer.status, 503, "{method} {path}: {}", answer.text());
        assert_eq!(answer.json()["kind"], "Status", "{method} {path}");
    }
    // The same on the HTTPS port with a made-up token.
    let body = planted("backdoor").to_string();
    let answer = https::call(
        https_addr,
        &ca(&cloud),
        "POST",
        pods,
        &[
            ("User-Agent", KUBELET),
            ("Authorization", "Bearer made-up"),
            ("Content-Type", "application/json"),
        ],
        None,
        Some(body.as_bytes()),
    )
    .expect("the HTTPS port answers");
    assert_eq!(answer.status, 503, "{}", answer.text());

    assert_eq!(snapshot(&hub), before, "an offline write changed the cache");
    let want = BTreeMap::from([("app-0".to_owned(), "app:1".to_owned())]);
    assert_eq!(kubelet_pods(&hub), want);
    let stored = get(&url(secret_path), KUBELET).json();
    assert_eq!(stored["data"]["k"], "b2xk");

    // Nothing was kept for later either.
    let hub = hub.restart();
    assert_eq!(kubelet_pods(&hub), want);
    assert_eq!(snapshot(&hub), before);
}

/// The identity the cloud saw on the last request to `path`: its user, or None for a
/// request it could not authenticate.
fn seen_by_cloud(cloud: &Cloud, path: &str) -> Option<String> {
    let request = cloud
        .requests()
        .into_iter()
        .rfind(|r| r.path == path)
        .unwrap_or_else(|| panic!("the cloud never saw {path}"));
    request.identity.map(|i| i.user)
}

#[test]
fn only_the_node_uses_the_nodes_identity_on_the_https_port() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
    let dir = TempDir::new("trust-https");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    let path = "/api/v1/namespaces/default/configmaps/settings";
    let ca = ca(&cloud);
    let https_get = |client: Option<&ClientId>, ua: &str| {
        https::call(addr, &ca, "GET", path, &[("User-Agent", ua)], client, None)
    };

    // The plain port at --bind-address lends the node's identity, as YurtHub's does.
    assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    let node = seen_by_cloud(&cloud, path);
    assert_eq!(node.as_deref(), Some("system:node:edge-1"));

    // No credentials on the HTTPS port: anonymous, whatever the User-Agent says.
    let anonymous = https_get(None, KUBELET).expect("served");
    assert_ne!(anonymous.status, 200, "{}", anonymous.text());
    assert_eq!(seen_by_cloud(&cloud, path), None);

    // kubelet's own client certificate is the node.
    let kubelet = cloud.issue_client("system:node:edge-1", &["system:nodes"]);
    let kubelet = ClientId::from_pem(&kubelet.pair.cert_pem, &kubelet.pair.key_pem);
    let answer = https_get(Some(&kubelet), KUBELET).expect("served");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["data"]["k"], "v");
    assert_eq!(seen_by_cloud(&cloud, path), node);

    // Another node's certificate of the same CA is not this node.
    let other = cloud.issue_client("system:node:edge-2", &["system:nodes"]);
    let other = ClientId::from_pem(&other.pair.cert_pem, &other.pair.key_pem);
    let answer = https_get(Some(&other), KUBELET).expect("served");
    assert_ne!(answer.status, 200, "{}", answer.text());
    assert_eq!(seen_by_cloud(&cloud, path), None);

    // A certificate the cluster CA did not sign ends the handshake.
    let stranger = crate::support::Pki::new().issue_client("system:node:edge-1", &["system:nodes"]);
    let stranger = ClientId::from_pem(&stranger.pair.cert_pem, &stranger.pair.key_pem);
    assert!(https_get(Some(&stranger), KUBELET).is_err());

    // Offline, the cache answers the node on either port and nobody without credentials.
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    let offline = https_get(Some(&kubelet), KUBELET).expect("served");
    assert_eq!(offline.status, 200, "{}", offline.text());
    let anonymous = https_get(None, KUBELET).expect("served");
    assert_eq!(anonymous.status, 503, "{}", anonymous.text());
    assert!(!anonymous.text().contains("\"k\""), "{}", anonymous.text());
}

#[test]
fn with_the_plain_port_closed_kubelet_proves_it_is_the_node_on_the_https_port() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
    let dir = TempDir::new("trust-strict");
    // A port free now, for the plain port the hub must not open.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_port = plain.local_addr().unwrap().port();
    drop(plain);
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[
        "--enable-plain-proxy=false",
        &format!("--proxy-port={plain_port}"),
    ]);
    let hub = Hub::start(&spec);
    let addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", plain_port)).is_err(),
        "the plain port is open"
    );
    let path = "/api/v1/namespaces/default/configmaps/settings";
    let ca = ca(&cloud);
    let kubelet = cloud.issue_client("system:node:edge-1", &["system:nodes"]);
    let kubelet = ClientId::from_pem(&kubelet.pair.cert_pem, &kubelet.pair.key_pem);
    let https_get = |client: Option<&ClientId>| {
        https::call(
            addr,
            &ca,
            "GET",
            path,
            &[("User-Agent", KUBELET)],
            client,
            None,
        )
        .expect("served")
    };
    let node = https_get(Some(&kubelet));
    assert_eq!(node.status, 200, "{}", node.text());
    assert_eq!(
        seen_by_cloud(&cloud, path).as_deref(),
        Some("system:node:edge-1")
    );
    assert_ne!(https_get(None).status, 200);
    assert_eq!(seen_by_cloud(&cloud, path), None);
}
