//! The stand-in cloud's identity services, tested on their own over HTTPS so that the hub's
//! certificate tests can trust them: bootstrap tokens and what RBAC lets them do, the signed
//! `cluster-info`, CSRs approved, denied or left pending as yurt-manager and
//! kube-controller-manager would, signed certificates that authenticate (and stop at
//! expiry), and kubelet's rotating credentials.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::{CertificateParams, DnType, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use serde_json::{Value, json};

use crate::support::https::{self, Answer, ClientId};
use crate::support::hub::{TempDir, eventually};
use crate::support::{AuthMethod, Cloud, CsrMode, base64_decode, base64_encode, csr_pem};

const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";
const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// One request to the stand-in cloud over a fresh TLS connection that trusts its CA; `Err`
/// when TLS or the connection fails (a refused client certificate).
fn https(
    cloud: &Cloud,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    client: Option<&ClientId>,
    body: Option<&Value>,
) -> Result<Answer, String> {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(auth) = auth.as_deref() {
        headers.push(("Authorization", auth));
    }
    let body = body.map(|b| b.to_string());
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    https::call(
        cloud.addr(),
        cloud.pki().ca_der(),
        method,
        path,
        &headers,
        client,
        body.as_deref().map(str::as_bytes),
    )
}

fn token() -> String {
    format!("{TOKEN_ID}.{TOKEN_SECRET}")
}

/// A CSR object for `pem` (the shape client-go's certificate manager sends).
fn csr_object(pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {"request": base64_encode(pem.as_bytes()), "signerName": signer, "usages": usages},
    })
}

const CLIENT_USAGES: &[&str] = &["key encipherment", "digital signature", "client auth"];

/// An rcgen CSR for `cn` in up to two organizations (rcgen keeps one value per attribute
/// type; the second `O=` goes in as a custom attribute of the same OID).
fn rcgen_csr(key: &KeyPair, cn: &str, orgs: &[&str]) -> String {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = orgs.first() {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    if let Some(o) = orgs.get(1) {
        params
            .distinguished_name
            .push(DnType::CustomDnType(vec![2, 5, 4, 10]), *o);
    }
    params.serialize_request(key).unwrap().pem().unwrap()
}

/// The CSR `name` once `pred` holds for it (within 5 s).
fn wait_csr(cloud: &Cloud, name: &str, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    let mut found = None;
    eventually(Duration::from_secs(5), || {
        found = cloud
            .get("certificatesigningrequests", "", name)
            .filter(|c| pred(c));
        found.is_some()
    });
    found
}

fn issued_cert(csr: &Value) -> Option<Vec<u8>> {
    let pem = base64_decode(csr["status"]["certificate"].as_str()?)?;
    let pem = String::from_utf8(pem).ok()?;
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64_decode(&b64)
}

fn condition_types(csr: &Value) -> Vec<String> {
    csr["status"]["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["type"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_yurthub_csr_from_a_bootstrap_token_is_approved_signed_and_its_certificate_authenticates() {
    let cloud = Cloud::start();
    cloud.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    let key = KeyPair::generate().unwrap();
    let pem = rcgen_csr(
        &key,
        "system:node:n1",
        &["openyurt:yurthub", "system:nodes"],
    );
    let obj = csr_object(&pem, "kubernetes.io/kube-apiserver-client", CLIENT_USAGES);
    let created = https(&cloud, "POST", CSR_PATH, Some(&token()), None, Some(&obj)).unwrap();
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let created = created.json();
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("csr-") && name.len() == 9, "{name}");
    assert_eq!(created["spec"]["username"], "system:bootstrap:abcdef");
    assert!(
        created["spec"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:bootstrappers"))
    );
    // The watch a certificate manager opens: this CSR only, from its creation on.
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    let watch = https(
        &cloud,
        "GET",
        &format!("{CSR_PATH}?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={rv}&timeoutSeconds=2"),
        Some(&token()),
        None,
        None,
    )
    .unwrap();
    assert_eq!(watch.status, 200);
    let events: Vec<Value> = String::from_utf8_lossy(&watch.body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["type"] == "MODIFIED" && e["object"]["metadata"]["name"] == name.as_str())
    );
    assert_eq!(
        condition_types(&events[0]["object"]),
        ["Approved"],
        "{events:?}"
    );
    assert_eq!(
        events[0]["object"]["status"]["conditions"][0]["status"],
        "True"
    );
    let signed = &events.last().unwrap()["object"];
    let cert = issued_cert(signed).expect("a certificate in status");
    assert_eq!(cloud.issued_certificates(), 1);
    assert_eq!(cloud.csrs().len(), 1);

    let id = ClientId {
        cert,
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    };
    let answer = https(&cloud, "GET", "/api/v1/namespaces", None, Some(&id), None).unwrap();
    assert_eq!(answer.status, 200);
    let seen = cloud
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/api/v1/namespaces")
        .unwrap();
    let who = seen.identity.unwrap();
    assert_eq!(who.method, AuthMethod::ClientCert);
    assert_eq!(who.user, "system:node:n1");
    assert_eq!(who.groups, ["openyurt:yurthub", "system:nodes"]);
}

#[test]
fn csrs_outside_the_approval_rules_stay_pending_and_deny_and_fail_modes_decide() {
    let cloud = Cloud::start();
    let key = KeyPair::generate().unwrap();
    let create = |pem: &str, signer: &str, usages: &[&str]| -> String {
        let c = cloud.create(
            "certificatesigningrequests",
            csr_object(pem, signer, usages),
        );
        c["metadata"]["name"].as_str().unwrap().to_string()
    };
    let client = "kubernetes.io/kube-apiserver-client";
    // Go's layout (every O= in one RDN), with a tenant org: approved.
    let tenant = csr_pem(
        &key,
        "system:node:n1",
        &["openyurt:yurthub", "system:nodes", "openyurt:tenant:t1"],
        &[],
        &[],
    );
    let approved = create(&tenant, client, CLIENT_USAGES);
    // An org yurt-manager does not know (the multiplexer's): nobody approves it.
    let extra = csr_pem(
        &key,
        "system:node:n1",
        &["openyurt:yurthub", "system:nodes", "openyurt:multiplexer"],
        &[],
        &[],
    );
    let pending = create(&extra, client, CLIENT_USAGES);
    // A serving CSR with the wrong usages: nobody approves it either.
    let serving = csr_pem(
        &key,
        "system:node:n1",
        &["system:nodes"],
        &["kubernetes"],
        &[],
    );
    let wrong_usages = create(&serving, "kubernetes.io/kubelet-serving", CLIENT_USAGES);
    // A serving CSR as the hub sends one: approved by yurt-manager's serving rule.
    let server_usages = ["key encipherment", "digital signature", "server auth"];
    let serving_ok = create(&serving, "kubernetes.io/kubelet-serving", &server_usages);
    assert!(wait_csr(&cloud, &approved, |c| issued_cert(c).is_some()).is_some());
    assert!(wait_csr(&cloud, &serving_ok, |c| issued_cert(c).is_some()).is_some());
    std::thread::sleep(Duration::from_millis(500));
    for name in [&pending, &wrong_usages] {
        let c = cloud.get("certificatesigningrequests", "", name).unwrap();
        assert!(
            condition_types(&c).is_empty() && issued_cert(&c).is_none(),
            "{c}"
        );
    }
    assert_eq!(cloud.issued_certificates(), 2);

    cloud.set_csr_mode(CsrMode::Deny);
    let denied = create(&tenant, client, CLIENT_USAGES);
    let c = wait_csr(&cloud, &denied, |c| !condition_types(c).is_empty()).unwrap();
    assert_eq!(condition_types(&c), ["Denied"]);
    assert_eq!(c["status"]["conditions"][0]["reason"], "TestDenied");
    cloud.set_csr_mode(CsrMode::Fail);
    let failed = create(&tenant, client, CLIENT_USAGES);
    let c = wait_csr(&cloud, &failed, |c| !condition_types(c).is_empty()).unwrap();
    assert_eq!(condition_types(&c), ["Failed"]);
    cloud.set_csr_mode(CsrMode::Rules);
    let garbage = create("not a certificate request", client, CLIENT_USAGES);
    let c = wait_csr(&cloud, &garbage, |c| !condition_types(c).is_empty()).unwrap();
    assert_eq!(condition_types(&c), ["Failed"]);
    assert_eq!(cloud.issued_certificates(), 2);
}

#[test]
fn a_bootstrap_token_may_only_request_certificates_and_stops_working_once_removed() {
    let cloud = Cloud::start();
    cloud.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    let pods = https(&cloud, "GET", "/api/v1/pods", Some(&token()), None, None).unwrap();
    assert_eq!(pods.status, 403);
    let status = pods.json();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("Forbidden"))
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("system:bootstrap:abcdef"),
        "{status}"
    );
    let list = https(&cloud, "GET", CSR_PATH, Some(&token()), None, None).unwrap();
    assert_eq!(list.status, 200);
    let wrong = format!("{TOKEN_ID}.ffffffffffffffff");
    assert_eq!(
        https(&cloud, "GET", CSR_PATH, Some(&wrong), None, None)
            .unwrap()
            .status,
        401
    );
    // What `yurtadm join` leaves for the hub names this token and this cloud.
    let dir = TempDir::new("bootstrap-conf");
    let path = dir.path().join("bootstrap-hub.conf");
    cloud.write_bootstrap_kubeconfig(&path, &token());
    let text = std::fs::read_to_string(&path).unwrap();
    let doc = &yaml_rust2::YamlLoader::load_from_str(&text).unwrap()[0];
    assert_eq!(
        doc["current-context"].as_str(),
        Some("token-bootstrap-client@kubernetes")
    );
    assert_eq!(
        doc["users"][0]["name"].as_str(),
        Some("token-bootstrap-client")
    );
    assert_eq!(
        doc["users"][0]["user"]["token"].as_str(),
        Some(token().as_str())
    );
    assert_eq!(doc["clusters"][0]["name"].as_str(), Some("kubernetes"));
    assert_eq!(
        doc["clusters"][0]["cluster"]["server"].as_str(),
        Some(cloud.url().as_str())
    );
    cloud.remove_bootstrap_token(TOKEN_ID);
    assert_eq!(
        https(&cloud, "GET", CSR_PATH, Some(&token()), None, None)
            .unwrap()
            .status,
        401
    );
}

#[test]
fn cluster_info_is_anonymous_and_signed_per_token_over_one_cluster() {
    let cloud = Cloud::start();
    cloud.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    cloud.add_bootstrap_token("zyxwvu", "fedcba9876543210");
    let path = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
    let answer = https(&cloud, "GET", path, None, None, None).unwrap();
    assert_eq!(answer.status, 200);
    let data = answer.json()["data"].clone();
    let kubeconfig = data["kubeconfig"].as_str().unwrap();
    for (id, secret) in [(TOKEN_ID, TOKEN_SECRET), ("zyxwvu", "fedcba9876543210")] {
        let jws = data[format!("jws-kubeconfig-{id}")].as_str().unwrap();
        let (header, sig) = jws.split_once("..").unwrap();
        let header_json = URL_SAFE_NO_PAD.decode(header).unwrap();
        assert_eq!(
            header_json,
            format!(r#"{{"alg":"HS256","kid":"{id}"}}"#).as_bytes()
        );
        let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(kubeconfig));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        ring::hmac::verify(&key, input.as_bytes(), &sig).expect("the JWS verifies");
    }
    let doc = &yaml_rust2::YamlLoader::load_from_str(kubeconfig).unwrap()[0];
    let clusters = doc["clusters"].as_vec().unwrap();
    assert_eq!(clusters.len(), 1);
    assert_eq!(clusters[0]["name"].as_str(), Some(""));
    assert_eq!(
        clusters[0]["cluster"]["server"].as_str(),
        Some(cloud.url().as_str())
    );
    let ca = base64_decode(
        clusters[0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(ca.as_deref(), Some(cloud.ca_pem().as_bytes()));
    // A bad token is not anonymous; a removed token's signature goes.
    let bad = https(
        &cloud,
        "GET",
        path,
        Some("abcdef.nottherightone1"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(bad.status, 401);
    cloud.remove_bootstrap_token("zyxwvu");
    let data = https(&cloud, "GET", path, None, None, None).unwrap().json()["data"].clone();
    assert!(data.get("jws-kubeconfig-zyxwvu").is_none());
    assert!(data.get("jws-kubeconfig-abcdef").is_some());
    // The other objects of a kubeadm cluster the hub's certificates rely on.
    let svc = cloud.get("services", "default", "kubernetes").unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    // The pin is SHA-256 over the CA's P-256 SubjectPublicKeyInfo (91 bytes with this header).
    let spki_head = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    let ca_der = cloud.pki().ca_der();
    let at = ca_der
        .windows(spki_head.len())
        .position(|w| w == spki_head)
        .unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, &ca_der[at..at + 91]);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(cloud.ca_pin(), format!("sha256:{hex}"));
}

#[test]
fn a_short_lived_certificate_is_refused_once_expired() {
    let cloud = Cloud::start();
    cloud.set_csr_lifetime(Duration::from_secs(2));
    let key = KeyPair::generate().unwrap();
    let pem = rcgen_csr(&key, "system:node:n3", &["system:nodes"]);
    let obj = csr_object(
        &pem,
        "kubernetes.io/kube-apiserver-client-kubelet",
        CLIENT_USAGES,
    );
    let name = cloud.create("certificatesigningrequests", obj)["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let csr = wait_csr(&cloud, &name, |c| issued_cert(c).is_some()).unwrap();
    let id = ClientId {
        cert: issued_cert(&csr).unwrap(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    };
    let fresh = https(&cloud, "GET", "/api/v1/namespaces", None, Some(&id), None).unwrap();
    assert_eq!(fresh.status, 200);
    std::thread::sleep(Duration::from_millis(3200));
    let expired = https(&cloud, "GET", "/api/v1/namespaces", None, Some(&id), None);
    assert!(
        expired.is_err(),
        "an expired certificate got {:?}",
        expired.map(|a| a.status)
    );
}

#[test]
fn kubelet_credentials_are_written_as_kubelet_does_and_rotate() {
    let cloud = Cloud::start();
    let dir = TempDir::new("kubelet-creds");
    let files = cloud.write_kubelet_credentials(dir.path(), "n2", Duration::from_secs(3600));
    assert_eq!(std::fs::read_to_string(&files.ca).unwrap(), cloud.ca_pem());
    let conf = std::fs::read_to_string(&files.kubeconfig).unwrap();
    let doc = &yaml_rust2::YamlLoader::load_from_str(&conf).unwrap()[0];
    let user = &doc["users"][0]["user"];
    let current = files.cert.to_str().unwrap();
    assert_eq!(user["client-certificate"].as_str(), Some(current));
    assert_eq!(user["client-key"].as_str(), Some(current));
    assert_eq!(
        doc["clusters"][0]["cluster"]["server"].as_str(),
        Some(cloud.url().as_str())
    );
    let first = std::fs::read_link(&files.cert).unwrap();
    let first_name = first.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        first_name.starts_with("kubelet-client-2")
            && first_name.len() == "kubelet-client-YYYY-MM-DD-HH-MM-SS.pem".len(),
        "{first_name}"
    );

    let load = || -> ClientId {
        let text = std::fs::read_to_string(&files.cert).unwrap();
        let block = |label: &str| -> Vec<u8> {
            let begin = format!("-----BEGIN {label}-----");
            let start = text.find(&begin).unwrap() + begin.len();
            let end = text[start..].find("-----END").unwrap() + start;
            let b64: String = text[start..end].split_whitespace().collect();
            base64_decode(&b64).unwrap()
        };
        assert!(text.find("CERTIFICATE").unwrap() < text.find("PRIVATE KEY").unwrap());
        ClientId {
            cert: block("CERTIFICATE"),
            key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(block("EC PRIVATE KEY"))),
        }
    };
    let who = |id: &ClientId| {
        let answer = https(&cloud, "GET", "/api/v1/nodes", None, Some(id), None).unwrap();
        assert_eq!(answer.status, 200);
        let r = cloud
            .requests()
            .into_iter()
            .rfind(|r| r.path == "/api/v1/nodes")
            .unwrap();
        r.identity.map(|i| (i.user, i.groups))
    };
    let old = load();
    let want = Some((
        "system:node:n2".to_string(),
        vec!["system:nodes".to_string()],
    ));
    assert_eq!(who(&old), want);

    let again = cloud.write_kubelet_credentials(dir.path(), "n2", Duration::from_secs(3600));
    assert_eq!(again.cert, files.cert);
    let second = std::fs::read_link(&files.cert).unwrap();
    assert_ne!(second, first);
    assert!(first.exists(), "the old dated file stays");
    let new = load();
    assert_ne!(new.cert, old.cert);
    assert_eq!(who(&new), want);
}
