//! Issue 11, items 3–5: what a node needs from the hub to keep its pods while the cloud is
//! gone, also after a reboot — service account tokens, a pod list that never says "no
//! pods", and events that never reach the flash.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, base64_decode, base64_encode, parse_rfc3339, rfc3339};

const WAIT: Duration = Duration::from_secs(10);
const JSON: &[(&str, &str)] = &[("Content-Type", "application/json")];

fn post(hub: &Hub, path: &str, body: &Value) -> Reply {
    let bytes = serde_json::to_vec(body).unwrap();
    call(
        "POST",
        &format!("{}{path}", hub.url()),
        KUBELET,
        JSON,
        Some(&bytes),
    )
}

fn token_request(audiences: &[&str], seconds: u64, pod: &str) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {
            "audiences": audiences, "expirationSeconds": seconds,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": format!("uid-{pod}")}
        }
    })
}

/// The same as [`token_request`], as client-go encodes it in protobuf: the `k8s\0` magic,
/// then `runtime.Unknown{typeMeta: 1, raw: 2}` holding `TokenRequest{spec: 2}`.
fn protobuf_token_request(audiences: &[&str], seconds: u64, pod: &str) -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }
    let uid = format!("uid-{pod}");
    let bound = [
        field(1, b"Pod"),
        field(2, b"v1"),
        field(3, pod.as_bytes()),
        field(4, uid.as_bytes()),
    ]
    .concat();
    let mut spec: Vec<u8> = audiences
        .iter()
        .flat_map(|a| field(1, a.as_bytes()))
        .collect();
    spec.extend(field(3, &bound));
    spec.push(4 << 3); // expirationSeconds, a varint
    let mut rest = seconds;
    while rest >= 0x80 {
        spec.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    spec.push(rest as u8);
    let type_meta = [
        field(1, b"authentication.k8s.io/v1"),
        field(2, b"TokenRequest"),
    ]
    .concat();
    let request = field(2, &spec);
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &request)].concat()
}

/// An event as client-go encodes it in protobuf: the `k8s\0` magic, then
/// `runtime.Unknown{typeMeta: 1, raw: 2}` holding `Event{metadata: 1, involvedObject: 2,
/// reason: 3, message: 4, type: 9}`.
fn protobuf_event(name: &str) -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }
    let meta = [field(1, name.as_bytes()), field(3, b"default")].concat();
    let involved = [field(1, b"Pod"), field(2, b"default"), field(3, b"web-1")].concat();
    let event = [
        field(1, &meta),
        field(2, &involved),
        field(3, b"Started"),
        field(4, b"Started container c"),
        field(9, b"Normal"),
    ]
    .concat();
    let type_meta = [field(1, b"v1"), field(2, b"Event")].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &event)].concat()
}

fn token_path(account: &str) -> String {
    format!("/api/v1/namespaces/default/serviceaccounts/{account}/token")
}

fn token_of(reply: &Reply) -> String {
    assert_eq!(reply.status, 201, "{}", reply.text());
    let token = reply.json()["status"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!token.is_empty(), "{}", reply.text());
    token
}

/// The claims of a JWT, checking that it says HS256.
fn jwt_claims(token: &str) -> Value {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "not a JWT: {token}");
    let decode = |part: &str| -> Value {
        let mut b64 = part.replace('-', "+").replace('_', "/");
        while !b64.len().is_multiple_of(4) {
            b64.push('=');
        }
        serde_json::from_slice(&base64_decode(&b64).expect("base64url")).expect("JSON")
    };
    assert_eq!(decode(parts[0])["alg"], "HS256");
    decode(parts[1])
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Asserts that `token` is one the hub made: a minute's HS256 JWT for the account.
fn assert_local_token(token: &str, account: &str) {
    let claims = jwt_claims(token);
    assert_eq!(claims["iss"], "tinyhub");
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:default:{account}")
    );
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap(),
        claims["exp"].as_i64().unwrap(),
    );
    assert_eq!(exp - iat, 60, "{claims}");
    assert!((iat - unix_now()).abs() < 30, "{claims}");
}

fn token_files(cache: &Path) -> Vec<PathBuf> {
    files_under(&cache.join("kubelet/tokens"))
}

#[test]
fn service_account_tokens_survive_an_offline_reboot() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tokens");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();

    // Online: the cloud's tokens, one valid for an hour, one for 30 s.
    let builder = token_request(&["api", "vault"], 3600, "web-0");
    let real = token_of(&post(&hub, &token_path("builder"), &builder));
    let short = token_request(&["api"], 30, "web-1");
    let real_short = token_of(&post(&hub, &token_path("short"), &short));
    assert!(real.starts_with("cloud-token-") && real_short.starts_with("cloud-token-"));
    // kubelet's kube-api-access token as an apiserver gives it by default
    // (--service-account-extend-token-expiration): the JWT is valid for a year, the answer
    // says the hour asked for. That hour is over (the last renewal was an hour ago).
    let b64url = |text: &str| {
        base64_encode(text.as_bytes())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    };
    let now = unix_now();
    let extended_jwt = format!(
        "{}.{}.c2lnbmF0dXJl",
        b64url(r#"{"alg":"RS256","kid":"k1"}"#),
        b64url(
            &json!({"iss": "https://kubernetes.default.svc.cluster.local",
                    "sub": "system:serviceaccount:default:extended",
                    "iat": now - 3660, "exp": now + 365 * 86_400})
            .to_string()
        )
    );
    let extended = token_request(&["api"], 3607, "web-3");
    let answer = json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": "extended", "namespace": "default"},
        "spec": extended["spec"],
        "status": {"token": extended_jwt, "expirationTimestamp": rfc3339((now - 60) as u64)},
    });
    cloud.misanswer(
        &token_path("extended"),
        1,
        201,
        &serde_json::to_vec(&answer).unwrap(),
    );
    let reply = post(&hub, &token_path("extended"), &extended);
    assert_eq!(token_of(&reply), extended_jwt);
    assert!(
        eventually(WAIT, || token_files(&cache).len() == 3),
        "token answers not kept: {:?}",
        files_under(&cache)
    );
    for file in token_files(&cache) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }

    // The node reboots while the cloud is gone.
    cloud.stop();
    let hub = hub.restart();
    assert!(hub.wait_healthy(&cloud, false, WAIT), "{}", hub.logs());

    // The same request (audiences in another order) gets the cached token.
    let same = token_request(&["vault", "api"], 3600, "web-0");
    let reply = post(&hub, &token_path("builder"), &same);
    assert_eq!(token_of(&reply), real);
    assert_eq!(reply.json()["kind"], "TokenRequest");

    // kubelet sends protobuf by default (--kube-api-content-type): the same request so
    // encoded gets the same cached token.
    let reply = call(
        "POST",
        &format!("{}{}", hub.url(), token_path("builder")),
        KUBELET,
        &[
            ("Content-Type", "application/vnd.kubernetes.protobuf"),
            ("Accept", "application/vnd.kubernetes.protobuf, */*"),
        ],
        Some(&protobuf_token_request(&["api", "vault"], 3600, "web-0")),
    );
    assert_eq!(token_of(&reply), real);

    // The extended token is still good by its own exp: served as cached, with an expiry a
    // minute away so kubelet asks again (and gets a fresh one once the cloud is back).
    let reply = post(&hub, &token_path("extended"), &extended);
    assert_eq!(token_of(&reply), extended_jwt);
    let expires = reply.json()["status"]["expirationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .expect("an expirationTimestamp") as i64;
    assert!((expires - (unix_now() + 60)).abs() <= 5, "{}", reply.text());

    // A cached token that expires within a minute, another audience set, another pod, an
    // account never asked for: a minute's token made by the hub, never an empty one.
    let cases = [
        ("short", short),
        ("builder", token_request(&["other"], 3600, "web-0")),
        ("builder", token_request(&["api", "vault"], 3600, "web-9")),
        ("nobody", token_request(&[], 3600, "web-2")),
    ];
    let mut made = Vec::new();
    for (account, request) in &cases {
        let reply = post(&hub, &token_path(account), request);
        let token = token_of(&reply);
        assert!(!token.starts_with("cloud-token-"), "{account}: {token}");
        assert_local_token(&token, account);
        let answer = reply.json();
        assert_eq!(answer["spec"]["audiences"], request["spec"]["audiences"]);
        assert_eq!(
            answer["spec"]["boundObjectRef"],
            request["spec"]["boundObjectRef"]
        );
        assert!(answer["status"]["expirationTimestamp"].is_string());
        made.push(token);
    }

    // Offline answers write nothing; no token ever reaches the log.
    assert_eq!(token_files(&cache).len(), 3);
    let logs = hub.logs();
    for token in made.iter().chain([&real, &real_short, &extended_jwt]) {
        assert!(!logs.contains(token.as_str()), "a token is in the log");
    }
    assert!(
        logs.contains("offline TokenRequest for serviceaccount default/short"),
        "{logs}"
    );
}

fn pod(ns: &str, name: &str, node: Option<&str>, app: &str) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
    }
    pod
}

#[test]
fn an_empty_offline_pod_list_for_kubelet_is_not_found() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("default", "web-1", Some("edge-1"), "web"));
    cloud.create("pods", pod("default", "web-2", Some("edge-1"), "web"));
    // Not bound to a node yet: of no use to a node, never cached.
    cloud.create("pods", pod("queue", "pending-0", None, "batch"));
    let dir = TempDir::new("podlist");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let online = get(&format!("{}/api/v1/pods", hub.url()), KUBELET);
    assert_eq!(online.status, 200);
    assert_eq!(names_in_order(&online.json()).len(), 3);
    assert!(hub.wait_cached(
        &[
            "kubelet/pods.v1.core/default/web-1",
            "kubelet/pods.v1.core/default/web-2"
        ],
        WAIT
    ));
    let cache = hub.spec.cache_dir.clone();
    assert!(!cache.join("kubelet/pods.v1.core/queue").exists());

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, WAIT), "{}", hub.logs());
    let list = |query: &str| get(&format!("{}/api/v1/{query}", hub.url()), KUBELET);

    let mine = list("pods?fieldSelector=spec.nodeName%3Dedge-1");
    assert_eq!(mine.status, 200);
    assert_eq!(names_in_order(&mine.json()), ["web-1", "web-2"]);

    // Nothing matches: kubelet must not conclude that the node has no pods.
    for query in [
        "pods?fieldSelector=spec.nodeName%3Dedge-2",
        "pods?labelSelector=app%3Dnone",
        "namespaces/queue/pods",
        "pods?limit=1&labelSelector=app%3Dnone",
    ] {
        let reply = list(query);
        assert_eq!(reply.status, 404, "{query}: {}", reply.text());
        let status = reply.json();
        assert_eq!(status["kind"], "Status", "{query}");
        assert_eq!(status["reason"], "NotFound", "{query}");
    }

    // A later page may be empty: only a whole answer with nothing is a 404.
    let first = list("pods?limit=1").json();
    assert_eq!(names_in_order(&first), ["web-1"]);
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("a continue token");
    let later = list(&format!(
        "pods?limit=1&labelSelector=app%3Dnone&continue={token}"
    ));
    assert_eq!(later.status, 200, "{}", later.text());
    assert!(names_in_order(&later.json()).is_empty());
}

#[test]
fn events_are_never_written_to_the_cache() {
    let cloud = Cloud::start();
    let dir = TempDir::new("events");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let event = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"},
            "reason": "Started", "message": "Started container c", "type": "Normal"
        })
    };
    let configmap = |name: &str| json!({"metadata": {"name": name, "namespace": "default"}});
    let events_dir = cache.join("kubelet/events.v1.core");

    // Online: the event is created in the cloud, and nothing is written here. (The
    // configmap after it is a marker: the writer takes answers in order.)
    assert_eq!(
        post(&hub, "/api/v1/namespaces/default/events", &event("e1")).status,
        201
    );
    assert_eq!(
        post(
            &hub,
            "/api/v1/namespaces/default/configmaps",
            &configmap("marker-1")
        )
        .status,
        201
    );
    assert!(hub.wait_cached(&["kubelet/configmaps.v1.core/default/marker-1"], WAIT));
    assert!(!events_dir.exists(), "{:?}", files_under(&cache));
    assert!(cloud.get("events", "default", "e1").is_some());

    // Offline: 201 with the body, and nothing on disk.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, WAIT), "{}", hub.logs());
    let reply = post(&hub, "/api/v1/namespaces/default/events", &event("e2"));
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json(), event("e2"));
    // kubelet and kube-proxy send events in protobuf by default: the body comes back as
    // it went, not a 400 that kubelet drops ("Server rejected event (will not retry!)").
    let protobuf = protobuf_event("web-1.17a2b3c4d5e6f7aa");
    let reply = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/events", hub.url()),
        KUBELET,
        &[
            ("Content-Type", "application/vnd.kubernetes.protobuf"),
            ("Accept", "application/vnd.kubernetes.protobuf, */*"),
        ],
        Some(&protobuf),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/vnd.kubernetes.protobuf")
    );
    assert_eq!(reply.body, protobuf);
    // Offline nothing a client sends is stored at all (issue 28), so there is no marker to
    // wait for: the writer is quiet, and no event reached it.
    hub.wait_cache_quiet();
    assert!(!events_dir.exists(), "{:?}", files_under(&cache));

    // What an older version cached is removed at start, for every component.
    let old = [
        "kubelet/events.v1.core/default/web-1.17a2b3c4d5e6f708",
        "kube-proxy/events.v1.core/kube-system/proxy.17a2b3c4d5e6f709",
        "kubelet/events.v1.events.k8s.io/default/web-1.17a2b3c4d5e6f70a",
    ];
    for rel in old {
        let path = cache.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&event("old")).unwrap()).unwrap();
    }
    let hub = hub.restart();
    for rel in old {
        let kind_dir: PathBuf = cache.join(rel).parent().unwrap().parent().unwrap().into();
        assert!(!kind_dir.exists(), "{} is still there", kind_dir.display());
    }
    // What the cloud gave is kept: only event collections go.
    assert!(
        cache
            .join("kubelet/configmaps.v1.core/default/marker-1")
            .exists()
    );
    assert!(
        hub.logs()
            .contains("removed 3 cached event collections (events are no longer cached)"),
        "{}",
        hub.logs()
    );
}
