//! Join-token discovery (YurtHub §3.3, kubeadm's "token discovery"): find the cloud's CA from
//! the public `kube-public/cluster-info` ConfigMap, trusting it because the cluster signed
//! its kubeconfig with the join token's secret (a detached HS256 JWS) and, when pins are
//! given, because the CA's public key has a pinned hash.
//!
//! It does not write the bootstrap kubeconfig (`files.rs`) nor decide whether pins are
//! required (the configuration layer does). Its failures (`DiscoveryError`) are `error.rs`'s.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use crossbeam_channel::Receiver;
use ring::hmac;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use ureq::Agent;
use ureq::http;
use ureq::tls::RootCerts;
use yaml_rust2::YamlLoader;

use super::csr_api::{self, Waited};
use super::error::{DiscoveryError, FetchError, SignatureError};
use crate::config::join::{CaPin, JoinToken};

/// What discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Discovered {
    /// The `https://host:port` that answered (YurtHub writes this, not cluster-info's server).
    pub server: String,
    /// The cluster's CA bundle, PEM.
    pub ca_pem: Vec<u8>,
}

/// Discovery's timeouts.
#[derive(Debug, Clone)]
pub(crate) struct DiscoveryTiming {
    /// Time a server has to accept a TCP connection (when there are several).
    pub dial: Duration,
    /// Time allowed for one fetch of cluster-info.
    pub request: Duration,
    /// Pause between fetches (±30 % jitter).
    pub retry_every: Duration,
    /// When to stop trying.
    pub give_up_after: Duration,
}

impl Default for DiscoveryTiming {
    /// YurtHub's: 5 s dial, 10 s request, every 5 s, for 2 min.
    fn default() -> Self {
        DiscoveryTiming {
            dial: Duration::from_secs(5),
            request: Duration::from_secs(10),
            retry_every: Duration::from_secs(5),
            give_up_after: Duration::from_secs(120),
        }
    }
}

/// The ConfigMap, readable anonymously.
const CLUSTER_INFO: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";

/// Finds the cluster's CA with the join token (YurtHub §3.3).
pub(crate) fn discover(
    servers: &[String],
    token: &JoinToken,
    pins: &[CaPin],
    timing: &DiscoveryTiming,
    stop: &Receiver<()>,
) -> Result<Discovered, DiscoveryError> {
    let deadline = Instant::now() + timing.give_up_after;
    // Verification off: the token's signature, then the pins, establish trust.
    let insecure = csr_api::agent(csr_api::tls_builder().disable_verification(true).build());
    let (server, data) = fetch(servers, &insecure, token.id(), timing, deadline, stop)?;
    let kubeconfig = data["kubeconfig"]
        .as_str()
        .ok_or_else(|| DiscoveryError::BadClusterInfo("its data has no kubeconfig".into()))?;
    let jws = data[format!("jws-kubeconfig-{}", token.id()).as_str()]
        .as_str()
        .unwrap_or("");
    verify_detached(jws, kubeconfig, token.id(), token.secret())
        .map_err(DiscoveryError::BadSignature)?;
    let ca_pem = ca_data(kubeconfig)?;
    if pins.is_empty() {
        log::warn!("cluster-info from {server} accepted without a CA pin");
        return Ok(Discovered { server, ca_pem });
    }
    check_pins(&ca_pem, pins)?;
    let roots =
        csr_api::roots(&ca_pem).map_err(|e| DiscoveryError::BadClusterInfo(e.to_string()))?;
    let verified = csr_api::agent(
        csr_api::tls_builder()
            .root_certs(RootCerts::new_with_certs(&roots))
            .build(),
    );
    let (_, again) = fetch(
        std::slice::from_ref(&server),
        &verified,
        token.id(),
        timing,
        // The second fetch gets a full budget of its own, as kubeadm's does.
        Instant::now() + timing.give_up_after,
        stop,
    )?;
    if again["kubeconfig"].as_str() != Some(kubeconfig) {
        return Err(DiscoveryError::SecondFetchDiffers);
    }
    Ok(Discovered { server, ca_pem })
}

/// Fetches cluster-info until its data has `jws-kubeconfig-<id>`: (server, data).
fn fetch(
    servers: &[String],
    agent: &Agent,
    id: &str,
    timing: &DiscoveryTiming,
    deadline: Instant,
    stop: &Receiver<()>,
) -> Result<(String, Value), DiscoveryError> {
    let key = format!("jws-kubeconfig-{id}");
    let mut last = DiscoveryError::Unreachable {
        server: servers.join(", "),
        error: FetchError::NoAnswerInTime,
    };
    loop {
        let list = servers.to_vec();
        let agent = agent.clone();
        let dial = timing.dial;
        let request = timing.request;
        let attempt = move || -> Result<(String, Value), (String, FetchError)> {
            let server = endpoint(&list, dial).map_err(|(s, why)| (s, FetchError::Dial(why)))?;
            let data =
                get_cluster_info(&agent, &server, request).map_err(|e| (server.clone(), e))?;
            Ok((server, data))
        };
        match csr_api::interruptible(stop, deadline, attempt) {
            Waited::Done(Ok((server, data))) => {
                if data.get(&key).and_then(Value::as_str).is_some() {
                    return Ok((server, data));
                }
                log::debug!("cluster-info from {server} has no {key} yet");
                last = DiscoveryError::NoSignature { id: id.to_string() };
            }
            Waited::Done(Err((server, error))) => {
                log::debug!("cluster-info from {server}: {error}");
                last = DiscoveryError::Unreachable { server, error };
            }
            Waited::Stopped => return Err(DiscoveryError::Stopped),
            Waited::TimedOut => return Err(last),
            Waited::Lost(e) => {
                return Err(DiscoveryError::Unreachable {
                    server: servers.join(", "),
                    error: FetchError::Lost(e),
                });
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(last);
        }
        let wait = jittered(timing.retry_every).min(deadline - now);
        if csr_api::pause(stop, wait) {
            return Err(DiscoveryError::Stopped);
        }
    }
}

/// `d` scaled by a random factor in [0.7, 1.3).
fn jittered(d: Duration) -> Duration {
    let mut byte = [0u8; 2];
    // getrandom(2) through ring; without it, no jitter.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut byte);
    let r = f64::from(u16::from_le_bytes(byte)) / 65536.0;
    d.mul_f64(0.7 + 0.6 * r)
}

/// The first server accepting a TCP connection within `dial` (one server: no dial):
/// `Err((server, why))` names the last one tried.
pub(crate) fn endpoint(servers: &[String], dial: Duration) -> Result<String, (String, String)> {
    if let [only] = servers {
        return Ok(only.clone());
    }
    let mut last = (servers.join(", "), "no server given".to_string());
    for server in servers {
        let authority = server
            .strip_prefix("https://")
            .unwrap_or(server)
            .trim_end_matches('/');
        // `https://host` without a port means 443.
        let with_port = match authority.rsplit_once(':') {
            Some((_, port)) if !port.contains(']') => authority.to_owned(),
            _ => format!("{authority}:443"),
        };
        let addrs = match with_port.to_socket_addrs() {
            Ok(addrs) => addrs,
            Err(e) => {
                last = (server.clone(), format!("cannot resolve: {e}"));
                continue;
            }
        };
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, dial) {
                Ok(_) => return Ok(server.clone()),
                Err(e) => last = (server.clone(), format!("cannot connect: {e}")),
            }
        }
    }
    Err(last)
}

/// One anonymous GET of cluster-info: its `data`.
fn get_cluster_info(agent: &Agent, server: &str, timeout: Duration) -> Result<Value, FetchError> {
    let mut request = http::Request::builder()
        .method("GET")
        .uri(format!("{}{CLUSTER_INFO}", server.trim_end_matches('/')))
        .header("accept", "application/json");
    if crate::upstream::inflate::ask_gzip() {
        // Asked as every read of the hub's own is; inflated here, bounded as the plain body.
        request = request.header("accept-encoding", "gzip");
    }
    let request = request
        .body(())
        .map_err(|e| FetchError::BadAddress(e.to_string()))?;
    let request = agent
        .configure_request(request)
        .timeout_global(Some(timeout))
        .build();
    let response = agent
        .run(request)
        .map_err(|e| FetchError::Transport(e.to_string()))?;
    let status = response.status().as_u16();
    let encoding = response.headers().get("content-encoding").cloned();
    let body = response
        .into_body()
        .with_config()
        .limit(1024 * 1024)
        .read_to_vec()
        .map_err(|e| FetchError::Transport(e.to_string()))?;
    let body = crate::upstream::inflate::plain_body(
        body,
        encoding.as_ref().map(|v| v.as_bytes()),
        1024 * 1024,
        None,
    )
    .map_err(|e| FetchError::Transport(e.to_string()))?;
    if status != 200 {
        return Err(FetchError::Status(status));
    }
    let mut object: Value =
        serde_json::from_slice(&body).map_err(|e| FetchError::NotJson(e.to_string()))?;
    match object.get_mut("data") {
        Some(data @ Value::Object(_)) => Ok(data.take()),
        _ => Err(FetchError::NoData),
    }
}

/// Checks the detached JWS `<header>..<signature>` over `content` (kubeadm's
/// `jws-kubeconfig-<id>`): HS256 with the token secret as key, `kid` the token id.
fn verify_detached(jws: &str, content: &str, id: &str, secret: &str) -> Result<(), SignatureError> {
    let mut parts = jws.split('.');
    let (Some(header_b64), Some(""), Some(sig_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SignatureError::NotDetached);
    };
    let header = URL_SAFE_NO_PAD
        .decode(header_b64)
        .map_err(|_| SignatureError::HeaderNotBase64)?;
    let header: Value =
        serde_json::from_slice(&header).map_err(|_| SignatureError::HeaderNotJson)?;
    if header["alg"].as_str() != Some("HS256") {
        return Err(SignatureError::Algorithm(header["alg"].to_string()));
    }
    if header["kid"].as_str() != Some(id) {
        return Err(SignatureError::KeyId(header["kid"].to_string()));
    }
    let signature = URL_SAFE_NO_PAD
        .decode(sig_b64)
        .map_err(|_| SignatureError::SignatureNotBase64)?;
    let signed = format!("{header_b64}.{}", URL_SAFE_NO_PAD.encode(content));
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    hmac::verify(&key, signed.as_bytes(), &signature).map_err(|_| SignatureError::Wrong)
}

/// The CA data of the only cluster of cluster-info's kubeconfig.
fn ca_data(kubeconfig: &str) -> Result<Vec<u8>, DiscoveryError> {
    let docs = YamlLoader::load_from_str(kubeconfig)
        .map_err(|e| DiscoveryError::BadClusterInfo(format!("its kubeconfig is not YAML: {e}")))?;
    let clusters = docs
        .first()
        .and_then(|d| d["clusters"].as_vec())
        .map_or(0, Vec::len);
    if clusters != 1 {
        return Err(DiscoveryError::Clusters(clusters));
    }
    // Only inline CA data: a file path in cluster-info would name a file on this machine.
    if docs[0]["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err(DiscoveryError::BadClusterInfo(
            "its cluster has no certificate-authority-data".into(),
        ));
    }
    let mapped = crate::config::kubeconfig::parse(kubeconfig, Path::new("."))
        .map_err(|e| DiscoveryError::BadClusterInfo(e.to_string()))?;
    let ca_pem = mapped.ca_pem.ok_or_else(|| {
        DiscoveryError::BadClusterInfo("its cluster has no certificate-authority-data".into())
    })?;
    csr_api::roots(&ca_pem).map_err(|e| DiscoveryError::BadClusterInfo(e.to_string()))?;
    Ok(ca_pem)
}

/// Ok when some certificate of `ca_pem` has a pinned public key.
fn check_pins(ca_pem: &[u8], pins: &[CaPin]) -> Result<(), DiscoveryError> {
    let seen: Vec<CaPin> = CertificateDer::pem_slice_iter(ca_pem)
        .filter_map(Result::ok)
        .filter_map(|der| crate::x509::parse(der.as_ref()).map(|c| c.spki_sha256))
        .map(CaPin::from_spki_sha256)
        .collect();
    if seen.iter().any(|s| pins.contains(s)) {
        Ok(())
    } else {
        Err(DiscoveryError::PinMismatch {
            seen: seen.iter().map(CaPin::to_string).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::csr_api::test_cloud::{self, Reply};
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn token() -> JoinToken {
        JoinToken::parse(TOKEN).expect("token")
    }

    fn fast() -> DiscoveryTiming {
        DiscoveryTiming {
            dial: Duration::from_millis(500),
            request: Duration::from_secs(5),
            retry_every: Duration::from_millis(50),
            give_up_after: Duration::from_millis(400),
        }
    }

    /// Discovery at one server with the test token and [`fast`] timing.
    fn discover_at(
        url: &str,
        pins: &[CaPin],
        stop: &crossbeam_channel::Receiver<()>,
    ) -> Result<Discovered, DiscoveryError> {
        discover(&[url.to_owned()], &token(), pins, &fast(), stop)
    }

    fn no_stop() -> (crossbeam_channel::Sender<()>, Receiver<()>) {
        crossbeam_channel::bounded(0)
    }

    /// The detached JWS kubeadm's bootstrap signer writes (header `{"alg":"HS256","kid":id}`).
    fn sign(content: &str, id: &str, secret: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"HS256","kid":"{id}"}}"#));
        let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(content));
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
        let tag = hmac::sign(&key, signed.as_bytes());
        format!("{header}..{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// cluster-info's kubeconfig as kubeadm writes it: one cluster named "", no contexts.
    fn kubeconfig(ca_pem: &str, server: &str) -> String {
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n",
            base64::engine::general_purpose::STANDARD.encode(ca_pem)
        )
    }

    fn cluster_info(kubeconfig: &str, signatures: &[(&str, String)]) -> String {
        let mut data = json!({"kubeconfig": kubeconfig});
        for (id, jws) in signatures {
            data[format!("jws-kubeconfig-{id}")] = json!(jws);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": data})
        .to_string()
    }

    fn pin(bytes: [u8; 32]) -> CaPin {
        CaPin::from_spki_sha256(bytes)
    }

    // The vector of Kubernetes' own tests: kubernetes/cluster-bootstrap,
    // token/jws/jws_test.go, TestComputeDetachedSignature / TestDetachedTokenIsValid.
    const K8S_CONTENT: &str = "Hello from the other side. I must have called a thousand times.";
    const K8S_SECRET: &str = "my voice is my passcode";
    const K8S_ID: &str = "joshua";
    const K8S_JWS: &str =
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8";

    #[test]
    fn kubernetes_detached_jws_vector_verifies() {
        assert_eq!(
            verify_detached(K8S_JWS, K8S_CONTENT, K8S_ID, K8S_SECRET),
            Ok(())
        );
        // Same test file: the empty content's signature.
        assert_eq!(
            verify_detached(
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk",
                "",
                K8S_ID,
                K8S_SECRET
            ),
            Ok(())
        );
        // Our test signer agrees with Kubernetes'.
        assert_eq!(sign(K8S_CONTENT, K8S_ID, K8S_SECRET), K8S_JWS);
    }

    #[test]
    fn tampered_signatures_are_refused() {
        let refused = |jws: &str, content: &str, id: &str, secret: &str| {
            verify_detached(jws, content, id, secret)
                .expect_err("refused")
                .to_string()
        };
        // Content, secret, kid.
        refused(K8S_JWS, "Hello from the other side.", K8S_ID, K8S_SECRET);
        refused(K8S_JWS, K8S_CONTENT, K8S_ID, "my voice is not my passcode");
        assert!(refused(K8S_JWS, K8S_CONTENT, "joshub", K8S_SECRET).contains("key id"));
        // Signature: altered, truncated, extended (Kubernetes' own "+foo" case), missing.
        let (head, sig) = K8S_JWS.split_once("..").expect("detached");
        let mut flipped = sig.as_bytes().to_vec();
        flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
        let flipped = format!("{head}..{}", String::from_utf8(flipped).expect("ascii"));
        refused(&flipped, K8S_CONTENT, K8S_ID, K8S_SECRET);
        refused(
            &format!("{head}..{}", &sig[..20]),
            K8S_CONTENT,
            K8S_ID,
            K8S_SECRET,
        );
        refused(&format!("{K8S_JWS}foo"), K8S_CONTENT, K8S_ID, K8S_SECRET);
        refused(&format!("{head}.."), K8S_CONTENT, K8S_ID, K8S_SECRET);
        refused("", K8S_CONTENT, K8S_ID, K8S_SECRET);
        // Header: another header with the old signature.
        let other = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","kid":"joshua","x":1}"#);
        refused(&format!("{other}..{sig}"), K8S_CONTENT, K8S_ID, K8S_SECRET);
        // alg: correctly keyed but not HS256 (e.g. "none", or HS512 naming).
        for alg in ["none", "HS512", "hs256"] {
            let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{alg}","kid":"joshua"}}"#));
            let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(K8S_CONTENT));
            let key = hmac::Key::new(hmac::HMAC_SHA256, K8S_SECRET.as_bytes());
            let tag = URL_SAFE_NO_PAD.encode(hmac::sign(&key, signed.as_bytes()).as_ref());
            let err = refused(&format!("{header}..{tag}"), K8S_CONTENT, K8S_ID, K8S_SECRET);
            assert!(err.contains("HS256"), "{err}");
        }
        // A JWS with its payload attached is not the detached form.
        let attached = format!("{head}.{}.{sig}", URL_SAFE_NO_PAD.encode(K8S_CONTENT));
        refused(&attached, K8S_CONTENT, K8S_ID, K8S_SECRET);
    }

    #[test]
    fn cluster_info_must_hold_exactly_one_cluster_with_ca_data() {
        let (ca_pem, ..) = test_cloud::ca_and_leaf();
        let one = kubeconfig(&ca_pem, "https://10.0.0.1:6443");
        assert_eq!(ca_data(&one).expect("one cluster"), ca_pem.as_bytes());

        let none = "apiVersion: v1\nkind: Config\nclusters: []\n";
        assert_eq!(ca_data(none), Err(DiscoveryError::Clusters(0)));
        let b64 = base64::engine::general_purpose::STANDARD.encode(&ca_pem);
        let two = format!(
            "clusters:\n- name: a\n  cluster: {{server: https://a:6443, certificate-authority-data: {b64}}}\n- name: b\n  cluster: {{server: https://b:6443, certificate-authority-data: {b64}}}\n"
        );
        assert_eq!(ca_data(&two), Err(DiscoveryError::Clusters(2)));
        let by_path = "clusters:\n- name: \"\"\n  cluster: {server: https://a:6443, certificate-authority: /etc/passwd}\n";
        assert!(matches!(
            ca_data(by_path),
            Err(DiscoveryError::BadClusterInfo(_))
        ));
        let not_pem = format!(
            "clusters:\n- name: \"\"\n  cluster: {{server: https://a:6443, certificate-authority-data: {}}}\n",
            base64::engine::general_purpose::STANDARD.encode("junk")
        );
        assert!(matches!(
            ca_data(&not_pem),
            Err(DiscoveryError::BadClusterInfo(_))
        ));
        assert!(matches!(
            ca_data("clusters: [unclosed"),
            Err(DiscoveryError::BadClusterInfo(_))
        ));
    }

    #[test]
    fn the_ca_must_have_a_pinned_public_key() {
        let (ca_pem, ca_pin, ..) = test_cloud::ca_and_leaf();
        let (other_pem, other_pin, ..) = test_cloud::ca_and_leaf();
        assert_eq!(check_pins(ca_pem.as_bytes(), &[pin(ca_pin)]), Ok(()));
        assert_eq!(
            check_pins(ca_pem.as_bytes(), &[pin(other_pin), pin(ca_pin)]),
            Ok(())
        );
        // A bundle: any certificate may match.
        let bundle = format!("{other_pem}{ca_pem}");
        assert_eq!(check_pins(bundle.as_bytes(), &[pin(ca_pin)]), Ok(()));
        let err = check_pins(ca_pem.as_bytes(), &[pin(other_pin)]).expect_err("mismatch");
        assert_eq!(
            err,
            DiscoveryError::PinMismatch {
                seen: vec![pin(ca_pin).to_string()]
            }
        );
        // The message shows the hash to compare with the flag.
        assert!(err.to_string().contains(&pin(ca_pin).to_string()), "{err}");
    }

    /// A cloud serving cluster-info signed for TOKEN, its CA being the cloud's own; `tweak`
    /// may change the nth answer's (0-based) kubeconfig.
    fn discovery_cloud(
        signer_secret: &'static str,
        tweak: impl Fn(usize, String) -> String + Send + Sync + 'static,
    ) -> test_cloud::TestCloud {
        let (ca_tx, ca_rx) = crossbeam_channel::bounded::<String>(1);
        let count = AtomicUsize::new(0);
        let ca = std::sync::OnceLock::new();
        let cloud = test_cloud::start(move |seen| {
            if seen.target != CLUSTER_INFO {
                return Reply::Json(404, "{}".into());
            }
            let ca: &String = ca.get_or_init(|| ca_rx.recv().expect("ca"));
            let n = count.fetch_add(1, Ordering::SeqCst);
            let config = tweak(n, kubeconfig(ca, "https://cluster-info.example:6443"));
            let jws = sign(&config, "abcdef", signer_secret);
            Reply::Json(200, cluster_info(&config, &[("abcdef", jws)]))
        });
        ca_tx.send(cloud.ca_pem.clone()).expect("send ca");
        cloud
    }

    fn same(_: usize, config: String) -> String {
        config
    }

    /// A URL on which nothing listens.
    fn closed_url() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("https://{}", listener.local_addr().expect("addr"))
    }

    #[test]
    fn discovery_with_a_pin_fetches_twice_and_returns_the_endpoint_and_ca() {
        let cloud = discovery_cloud("0123456789abcdef", same);
        let (_keep, stop) = no_stop();
        let found =
            discover_at(&cloud.url, &[pin(cloud.ca_spki_sha256)], &stop).expect("discovered");
        assert_eq!(
            found,
            Discovered {
                server: cloud.url.clone(),
                ca_pem: cloud.ca_pem.as_bytes().to_vec()
            }
        );
        let seen: Vec<_> = cloud.seen.try_iter().collect();
        assert_eq!(seen.len(), 2, "insecure fetch, then verified fetch");
        assert!(seen.iter().all(|s| !s.head.contains("authorization")));
    }

    #[test]
    fn discovery_without_pins_trusts_the_signature_alone() {
        let cloud = discovery_cloud("0123456789abcdef", same);
        let (_keep, stop) = no_stop();
        let found = discover_at(&cloud.url, &[], &stop).expect("discovered");
        assert_eq!(found.ca_pem, cloud.ca_pem.as_bytes());
        assert_eq!(cloud.seen.try_iter().count(), 1);
    }

    #[test]
    fn discovery_refuses_a_wrong_pin_a_wrong_secret_and_a_changed_answer() {
        let (_keep, stop) = no_stop();
        let cloud = discovery_cloud("0123456789abcdef", same);
        let (_, other_pin, ..) = test_cloud::ca_and_leaf();
        let err = discover_at(&cloud.url, &[pin(other_pin)], &stop).expect_err("pin mismatch");
        assert_eq!(
            err,
            DiscoveryError::PinMismatch {
                seen: vec![pin(cloud.ca_spki_sha256).to_string()]
            }
        );

        let forged = discovery_cloud("ffffffffffffffff", same);
        let err = discover_at(&forged.url, &[], &stop).expect_err("bad signature");
        assert!(matches!(err, DiscoveryError::BadSignature(_)), "{err}");

        fn changed(n: usize, config: String) -> String {
            if n == 0 {
                config
            } else {
                format!("{config}# changed\n")
            }
        }
        let fickle = discovery_cloud("0123456789abcdef", changed);
        let err =
            discover_at(&fickle.url, &[pin(fickle.ca_spki_sha256)], &stop).expect_err("differs");
        assert_eq!(err, DiscoveryError::SecondFetchDiffers);
    }

    #[test]
    fn a_refusing_cloud_is_unreachable_with_its_status() {
        let cloud = test_cloud::start(|_| Reply::Json(403, "{}".into()));
        let (_keep, stop) = no_stop();
        let err = discover_at(&cloud.url, &[], &stop).expect_err("refused");
        assert_eq!(
            err,
            DiscoveryError::Unreachable {
                server: cloud.url.clone(),
                error: FetchError::Status(403),
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "cluster-info discovery: cannot reach {}: answered 403",
                cloud.url
            )
        );
    }

    #[test]
    fn the_second_fetch_verifies_tls_with_the_pinned_ca() {
        // cluster-info names a CA (pinned) that did not sign the serving certificate: only
        // the verified fetch can notice.
        let (other_ca, other_pin, ..) = test_cloud::ca_and_leaf();
        let cloud = discovery_cloud("0123456789abcdef", move |_, _| {
            kubeconfig(&other_ca, "https://x:6443")
        });
        let (_keep, stop) = no_stop();
        let err = discover_at(&cloud.url, &[pin(other_pin)], &stop).expect_err("unverifiable");
        assert!(
            matches!(&err, DiscoveryError::Unreachable { server, .. } if *server == cloud.url),
            "{err}"
        );
    }

    #[test]
    fn discovery_retries_until_the_token_is_signed_then_gives_up() {
        // Signed for another token id only: retried until give_up_after.
        let (ca_pem, ..) = test_cloud::ca_and_leaf();
        let config = kubeconfig(&ca_pem, "https://x:6443");
        let body = cluster_info(
            &config,
            &[("zzzzzz", sign(&config, "zzzzzz", "0123456789abcdef"))],
        );
        let cloud = test_cloud::start(move |_| Reply::Json(200, body.clone()));
        let (_keep, stop) = no_stop();
        let err = discover_at(&cloud.url, &[], &stop).expect_err("no signature");
        assert_eq!(
            err,
            DiscoveryError::NoSignature {
                id: "abcdef".into()
            }
        );
        assert!(err.to_string().contains("token id abcdef"), "{err}");
        assert!(cloud.seen.try_iter().count() >= 2, "it retried");

        // The signature appears on the third answer.
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let late = discovery_cloud("0123456789abcdef", same);
        let late_url = late.url.clone();
        let front = test_cloud::start(move |_| {
            if counter.fetch_add(1, Ordering::SeqCst) < 2 {
                Reply::Json(200, json!({"data": {"kubeconfig": "x"}}).to_string())
            } else {
                // Relay the real answer.
                let agent =
                    csr_api::agent(csr_api::tls_builder().disable_verification(true).build());
                let data =
                    get_cluster_info(&agent, &late_url, Duration::from_secs(5)).expect("relay");
                Reply::Json(200, json!({"data": data}).to_string())
            }
        });
        let timing = DiscoveryTiming {
            give_up_after: Duration::from_secs(20),
            ..fast()
        };
        let found = discover(
            std::slice::from_ref(&front.url),
            &token(),
            &[],
            &timing,
            &stop,
        )
        .expect("found on the third try");
        assert_eq!(found.server, front.url);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_first_server_accepting_a_connection_is_used() {
        let cloud = discovery_cloud("0123456789abcdef", same);
        let (_keep, stop) = no_stop();
        let found = discover(
            &[closed_url(), cloud.url.clone()],
            &token(),
            &[pin(cloud.ca_spki_sha256)],
            &fast(),
            &stop,
        )
        .expect("discovered");
        assert_eq!(found.server, cloud.url);
    }

    #[test]
    fn an_unreachable_server_is_named_and_stop_ends_the_wait() {
        let (_keep, stop) = no_stop();
        let dead = closed_url();
        let err = discover(std::slice::from_ref(&dead), &token(), &[], &fast(), &stop)
            .expect_err("unreachable");
        match &err {
            DiscoveryError::Unreachable { server, .. } => assert_eq!(server, &dead),
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains(&dead), "{err}");

        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let timing = DiscoveryTiming {
            give_up_after: Duration::from_secs(600),
            ..fast()
        };
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(stop_tx);
        });
        let err = discover(&[dead.clone(), closed_url()], &token(), &[], &timing, &stop)
            .expect_err("stopped");
        assert_eq!(err, DiscoveryError::Stopped);
        closer.join().expect("closer");
    }
}
