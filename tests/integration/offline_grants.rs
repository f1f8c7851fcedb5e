//! Issue 28 item 4: offline, the cache answers a client with its own credential only what
//! that credential read from the cloud while online; the node's own components (kubelet on
//! the loopback port, without credentials) are answered everything, as before. The pool's
//! shared caches serve a credential once its first list went to the cloud. Grants outlive a
//! restart, never a token's own `exp`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::pool::service_in;
use crate::support::{Cloud, base64_encode};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const PROXY_TOKEN: &str = "Bearer kube-proxy-pod-token";
const MADE_UP: &str = "Bearer made-up-token";

const KUBELET_SECRET: &str = "/api/v1/namespaces/default/secrets/kubelet-secret";
const PROXY_SECRET: &str = "/api/v1/namespaces/kube-system/secrets/proxy-secret";
const SERVICES: &str = "/api/v1/services";

fn secret(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns}, "data": {"k": "c2VjcmV0"}})
}

/// GET `path` through `hub` as `ua`, with `authorization` when given.
fn read(hub: &Hub, path: &str, ua: &str, authorization: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    call("GET", &format!("{}{path}", hub.url()), ua, &headers, None)
}

fn names(reply: &Reply) -> BTreeSet<String> {
    item_names(&reply.json())
}

/// The grants the hub has written, once there are at least `n`.
fn wait_grants(cache: &Path, n: usize) -> bool {
    eventually(Duration::from_secs(10), || {
        read_json(&cache.join(".grants"))
            .and_then(|g| g["grants"].as_array().map(Vec::len))
            .is_some_and(|len| len >= n)
    })
}

/// A JWT (unsigned as far as the hub cares: it only reads `exp`) as an Authorization value.
fn jwt(exp: u64) -> String {
    let url = |bytes: &[u8]| {
        base64_encode(bytes)
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    };
    let claims = json!({"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:kube-system:kube-proxy", "exp": exp});
    format!(
        "Bearer {}.{}.c2lnbmF0dXJl",
        url(br#"{"alg":"RS256","typ":"JWT"}"#),
        url(claims.to_string().as_bytes())
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn assert_status(reply: &Reply, want: u16, what: &str) {
    assert_eq!(reply.status, want, "{what}: {}", reply.text());
}

/// What the cache answers offline: kube-proxy's token what it read, a made-up token
/// nothing (of kubelet's cache either), kubelet on the loopback port everything.
fn check_offline(hub: &Hub) {
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| (*s).to_owned()).collect() };
    let services = set(&["web", "db", "kubernetes"]);

    for ua in [KUBELET, KUBE_PROXY] {
        for path in [
            KUBELET_SECRET,
            PROXY_SECRET,
            SERVICES,
            "/api/v1/namespaces/shop/services",
        ] {
            let r = read(hub, path, ua, Some(MADE_UP));
            assert_status(&r, 403, &format!("a made-up token, {path} as {ua}"));
            assert_eq!(r.json()["kind"], "Status");
        }
    }

    let own = read(hub, SERVICES, KUBE_PROXY, Some(PROXY_TOKEN));
    assert_status(&own, 200, "the token's own services list");
    assert_eq!(names(&own), services);
    let own = read(
        hub,
        "/api/v1/namespaces/shop/services",
        KUBE_PROXY,
        Some(PROXY_TOKEN),
    );
    assert_status(&own, 200, "a namespace of a list the token read across all");
    assert_eq!(names(&own), set(&["web", "db"]));
    let own = read(hub, PROXY_SECRET, KUBE_PROXY, Some(PROXY_TOKEN));
    assert_status(&own, 200, "the secret the token got");
    assert_eq!(own.json()["metadata"]["name"], "proxy-secret");
    // The same token asking for what kubelet read: not its to read.
    let other = read(hub, KUBELET_SECRET, KUBELET, Some(PROXY_TOKEN));
    assert_status(&other, 403, "kubelet's secret to kube-proxy's token");
    assert_eq!(other.json()["reason"], "Forbidden");

    let kubelet = read(hub, KUBELET_SECRET, KUBELET, None);
    assert_status(&kubelet, 200, "kubelet's secret to kubelet");
    assert_eq!(kubelet.json()["metadata"]["name"], "kubelet-secret");
    let kubelet = read(hub, SERVICES, KUBELET, None);
    assert_status(&kubelet, 200, "services to kubelet");
    assert_eq!(names(&kubelet), services);
}

#[test]
fn offline_a_made_up_token_gets_nothing_of_kubelets_cache_while_kubelet_on_loopback_gets_everything()
 {
    let cloud = Cloud::start();
    cloud.add_token(
        PROXY_TOKEN.trim_start_matches("Bearer "),
        "system:serviceaccount:kube-system:kube-proxy",
    );
    cloud.create("services", service_in("shop", "web", "10.96.0.10"));
    cloud.create("services", service_in("shop", "db", "10.96.0.11"));
    cloud.create("secrets", secret("default", "kubelet-secret"));
    cloud.create("secrets", secret("kube-system", "proxy-secret"));
    let dir = TempDir::new("offline-grants");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = dir.path().join("cache");

    // Online, a made-up token is the cloud's to judge.
    assert_status(
        &read(&hub, KUBELET_SECRET, KUBELET, Some(MADE_UP)),
        401,
        "a made-up token online",
    );
    // kubelet reads as the node; kube-proxy's pod with its own token.
    assert_status(
        &read(&hub, KUBELET_SECRET, KUBELET, None),
        200,
        "kubelet's secret",
    );
    assert_status(
        &read(&hub, PROXY_SECRET, KUBE_PROXY, Some(PROXY_TOKEN)),
        200,
        "secret",
    );
    assert_status(
        &read(&hub, SERVICES, KUBE_PROXY, Some(PROXY_TOKEN)),
        200,
        "services",
    );
    assert_status(
        &read(&hub, SERVICES, KUBELET, None),
        200,
        "services to kubelet",
    );
    assert!(
        hub.wait_cached(
            &[
                "kubelet/secrets.v1.core/default/kubelet-secret",
                "kube-proxy/secrets.v1.core/kube-system/proxy-secret",
                "kube-proxy/services.v1.core/shop/web",
                "kubelet/services.v1.core/shop/db",
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    check_offline(&hub);

    assert!(wait_grants(&cache, 2), "grants not written: {}", hub.logs());
    let file = std::fs::read_to_string(cache.join(".grants")).unwrap();
    assert!(
        !file.contains("kube-proxy-pod-token"),
        "no credential on disk"
    );
    // After a restart with the cloud still down, from disk: the same answers.
    let hub = hub.restart();
    check_offline(&hub);
}

#[test]
fn a_token_past_its_own_exp_is_answered_nothing_offline() {
    let cloud = Cloud::start();
    let expired = jwt(unix_now() - 60);
    let valid = jwt(unix_now() + 3600);
    // The stand-in cloud accepts both, as a cloud whose clock lags would.
    for token in [&expired, &valid] {
        cloud.add_token(
            token.trim_start_matches("Bearer "),
            "system:serviceaccount:x:y",
        );
    }
    cloud.create("secrets", secret("kube-system", "proxy-secret"));
    let dir = TempDir::new("offline-grants-exp");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    for token in [&expired, &valid] {
        assert_status(
            &read(&hub, PROXY_SECRET, KUBE_PROXY, Some(token)),
            200,
            "online",
        );
    }
    assert!(
        hub.wait_cached(
            &["kube-proxy/secrets.v1.core/kube-system/proxy-secret"],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    assert!(wait_grants(&dir.path().join("cache"), 1), "{}", hub.logs());

    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    assert_status(
        &read(&hub, PROXY_SECRET, KUBE_PROXY, Some(&valid)),
        200,
        "a token within its exp",
    );
    assert_status(
        &read(&hub, PROXY_SECRET, KUBE_PROXY, Some(&expired)),
        403,
        "a token past its exp",
    );
}

#[test]
fn the_shared_cache_serves_a_token_once_the_cloud_let_it_list() {
    let cloud = Cloud::start();
    cloud.add_token(
        PROXY_TOKEN.trim_start_matches("Bearer "),
        "system:serviceaccount:kube-system:kube-proxy",
    );
    cloud.create("services", service_in("shop", "web", "10.96.0.10"));
    let dir = TempDir::new("pool-grants");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // The node's caches are warm.
    assert!(
        eventually(Duration::from_secs(20), || read(
            &hub, SERVICES, KUBELET, None
        )
        .status
            == 200),
        "{}",
        hub.logs()
    );
    let from_cloud = |token: &'static str| {
        move |r: &crate::support::RecordedRequest| {
            r.path == SERVICES && r.bearer_token.as_deref() == Some(token)
        }
    };

    // A token the cloud has not judged goes to the cloud, which refuses a made-up one.
    cloud.reset_requests();
    assert_status(
        &read(&hub, SERVICES, KUBE_PROXY, Some(MADE_UP)),
        401,
        "made up",
    );
    assert_eq!(
        cloud
            .requests()
            .iter()
            .filter(|r| from_cloud("made-up-token")(r))
            .count(),
        1
    );
    assert_status(
        &read(&hub, SERVICES, KUBE_PROXY, Some(PROXY_TOKEN)),
        200,
        "first list",
    );
    assert_eq!(
        cloud
            .requests()
            .iter()
            .filter(|r| from_cloud("kube-proxy-pod-token")(r))
            .count(),
        1,
        "the token's first list goes to the cloud"
    );
    // Accepted once: its lists and watches of that scope come from the shared cache.
    cloud.reset_requests();
    let again = read(&hub, SERVICES, KUBE_PROXY, Some(PROXY_TOKEN));
    assert_status(&again, 200, "second list");
    assert_eq!(names(&again).len(), 2, "{}", again.text());
    let narrower = read(
        &hub,
        "/api/v1/namespaces/shop/services",
        KUBE_PROXY,
        Some(PROXY_TOKEN),
    );
    assert_status(&narrower, 200, "a namespace of it");
    assert_eq!(
        cloud
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/services"))
            .count(),
        0,
        "the shared cache answered the token's later lists"
    );
    // A made-up token is still the cloud's to judge.
    assert_status(
        &read(&hub, SERVICES, KUBE_PROXY, Some(MADE_UP)),
        401,
        "made up again",
    );
}
