//! What kube-controller-manager and OpenYurt's yurt-manager do with CertificateSigningRequests,
//! for the stand-in cloud: a controller thread sees each new CSR, waits a moment, then
//! approves (by the rules of yurt-manager's csrapprover and the kubelet-client auto-approver),
//! denies or fails it, and signs approved ones with the test CA. Each decision is a status
//! write, so watchers see MODIFIED events as in a real cluster.
//!
//! Also the bootstrap-token side of kubeadm: the identity a token stands for, what RBAC lets
//! a bootstrapper do, and the `kube-public/cluster-info` ConfigMap with its JWS signatures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use crossbeam_channel::{Receiver, Sender, bounded, select};
use serde_json::{Value, json};

use super::super::pki::{CertSpec, parse_csr, pem, pem_decode};
use super::super::util::{base64_decode, base64_encode, lock, rfc3339, unix_now};
use super::Shared;
use super::kinds::{self, KINDS, KindId};
use super::status::ApiError;
use super::store::{EventType, Target};

/// What the CSR controllers do with a new request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CsrMode {
    /// Approve and sign what yurt-manager or kube-controller-manager would; leave the rest
    /// pending.
    #[default]
    Rules,
    /// Deny every request (condition Denied, reason `TestDenied`).
    Deny,
    /// Fail every request (condition Failed, reason `TestFailed`).
    Fail,
    /// No controller acts: requests stay pending.
    Never,
}

/// How long after its creation a CSR is acted on (the controllers' reaction time).
const REACTION: Duration = Duration::from_millis(100);
/// Group every bootstrap token's user is in.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";

/// The CSR kind's id.
pub fn csr_kind() -> KindId {
    kinds::find("certificates.k8s.io", "v1", "certificatesigningrequests")
        .expect("certificatesigningrequests is registered")
}

/// The groups a bootstrap token's user `system:bootstrap:<id>` is in (kubeadm's tokens).
pub fn bootstrap_groups() -> Vec<String> {
    vec![
        BOOTSTRAPPERS.into(),
        "system:bootstrappers:kubeadm:default-node-token".into(),
        "system:authenticated".into(),
    ]
}

/// Whether RBAC lets a bootstrapper make this request (kubeadm's `system:node-bootstrapper`
/// role plus `system:discovery`); otherwise the 403 to answer.
pub fn bootstrapper_may(user: &str, method: &str, path: &str, watch: bool) -> Result<(), ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let discovery = matches!(
        segs.as_slice(),
        ["healthz" | "livez" | "readyz" | "version", ..]
            | ["api"]
            | ["api", "v1"]
            | ["apis"]
            | ["apis", _]
            | ["apis", _, _]
            | ["openapi", ..]
    );
    if method == "GET" && discovery {
        return Ok(());
    }
    let csr = match segs.as_slice() {
        [
            "apis",
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
        ] => method == "POST" || method == "GET",
        [
            "apis",
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            _,
        ] => method == "GET",
        [
            "apis",
            "certificates.k8s.io",
            "v1",
            "watch",
            "certificatesigningrequests",
            ..,
        ] => method == "GET",
        _ => false,
    };
    if csr {
        return Ok(());
    }
    // Words the refusal as the apiserver does: verb, resource, group, scope.
    let (rest, group) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => (rest, ""),
        ["apis", g, _, rest @ ..] => (rest, *g),
        _ => (&segs[..], ""),
    };
    let rest = match rest {
        ["watch", r @ ..] => r,
        r => r,
    };
    let (ns, res, name) = match rest {
        ["namespaces", ns, res, name @ ..] => (Some(*ns), *res, name.first().copied()),
        [res, name @ ..] => (None, *res, name.first().copied()),
        [] => (None, "", None),
    };
    let verb = match (method, name.is_some()) {
        _ if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    };
    let scope = match ns {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".into(),
    };
    let qualified = if group.is_empty() {
        res.to_string()
    } else {
        format!("{res}.{group}")
    };
    let subject = match name {
        Some(n) => format!("{qualified} \"{n}\""),
        None => qualified,
    };
    Err(ApiError::forbidden(
        format!(
            "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{res}\" in API group \"{group}\" {scope}"
        ),
        res,
        group,
        name.unwrap_or(""),
    ))
}

/// The `cluster-info` ConfigMap as kubeadm and the bootstrap signer keep it: a kubeconfig
/// with one unnamed cluster, and a detached JWS of it per bootstrap token.
pub fn cluster_info(server: &str, ca_pem: &str, tokens: &BTreeMap<String, String>) -> Value {
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n",
        base64_encode(ca_pem.as_bytes())
    );
    let mut data = serde_json::Map::new();
    for (id, secret) in tokens {
        data.insert(
            format!("jws-kubeconfig-{id}"),
            json!(detached_jws(&kubeconfig, id, secret)),
        );
    }
    data.insert("kubeconfig".into(), json!(kubeconfig));
    json!({
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": data,
    })
}

/// `<b64url(header)>..<b64url(HS256)>` of `payload`, keyed by the token secret.
fn detached_jws(payload: &str, id: &str, secret: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"HS256","kid":"{id}"}}"#));
    let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, signing_input.as_bytes());
    format!("{header}..{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// The running controller; dropping it stops the thread.
pub struct Controller {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the controllers of a cloud.
pub fn start(shared: Arc<Shared>) -> Controller {
    let events = shared.store.tap(csr_kind());
    let (stop, stopped) = bounded::<()>(0);
    let thread = thread::Builder::new()
        .name("cloud-csr".into())
        .spawn(move || run(&shared, &events, &stopped))
        .expect("spawn cloud-csr");
    Controller {
        stop: Some(stop),
        thread: Some(thread),
    }
}

fn run(shared: &Shared, events: &Receiver<Arc<super::store::Event>>, stop: &Receiver<()>) {
    loop {
        let ev = select! {
            recv(events) -> ev => match ev { Ok(ev) => ev, Err(_) => return },
            recv(stop) -> _ => return,
        };
        if ev.etype != EventType::Added {
            continue;
        }
        select! {
            recv(stop) -> _ => return,
            default(REACTION) => {}
        }
        act(shared, &ev.obj.name);
    }
}

fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = rfc3339(unix_now());
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

/// Decides on and, when approved, signs the CSR `name`.
fn act(shared: &Shared, name: &str) {
    let id = csr_kind();
    let mode = lock(&shared.csr).mode;
    if mode == CsrMode::Never {
        return;
    }
    let Ok(obj) = shared.store.get(id, "", name) else {
        return;
    };
    let csr = obj.value();
    if csr["status"]["conditions"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
    {
        return;
    }
    let parsed = csr["spec"]["request"]
        .as_str()
        .and_then(base64_decode)
        .ok_or_else(|| "spec.request is not base64".to_string())
        .and_then(|pem_bytes| {
            pem_decode(&String::from_utf8_lossy(&pem_bytes), "CERTIFICATE REQUEST")
                .ok_or_else(|| "no PEM block of type CERTIFICATE REQUEST".to_string())
        })
        .and_then(|der| parse_csr(&der));
    let decided = match (mode, &parsed) {
        (CsrMode::Deny, _) => condition("Denied", "TestDenied", "denied by the test cloud"),
        (CsrMode::Fail, _) => condition("Failed", "TestFailed", "failed by the test cloud"),
        (_, Err(e)) => condition("Failed", "SignerValidationFailure", e),
        (_, Ok(p)) => match approver(&csr, &p.cn, &p.orgs) {
            Some(message) => condition("Approved", "AutoApproved", message),
            None => return,
        },
    };
    let approved = decided["type"] == "Approved";
    if !set_status(shared, id, name, |s| s["conditions"] = json!([decided])) {
        return;
    }
    let Ok(p) = parsed else { return };
    if !approved {
        return;
    }
    let usages = usages(&csr);
    let lifetime = {
        let configured = lock(&shared.csr).lifetime.as_secs().max(1);
        match csr["spec"]["expirationSeconds"].as_u64() {
            Some(s) if s > 0 => configured.min(s),
            _ => configured,
        }
    };
    let not_before = unix_now();
    let spec = CertSpec {
        cn: p.cn.clone(),
        orgs: p.orgs.clone(),
        dns: p.dns.clone(),
        ips: p.ips.clone(),
        server: usages.iter().any(|u| u == "server auth"),
        not_before,
        not_after: not_before + lifetime,
    };
    let der = shared.pki.sign_key(&p.spki, &spec);
    let cert = base64_encode(pem("CERTIFICATE", &der).as_bytes());
    if set_status(shared, id, name, |s| s["certificate"] = json!(cert)) {
        lock(&shared.csr).issued += 1;
    }
}

/// Rewrites the status of CSR `name`; false when it is gone.
fn set_status(shared: &Shared, id: KindId, name: &str, change: impl Fn(&mut Value)) -> bool {
    let Ok(obj) = shared.store.get(id, "", name) else {
        return false;
    };
    let mut v = obj.value();
    if !v["status"].is_object() {
        v["status"] = json!({});
    }
    change(&mut v["status"]);
    shared
        .store
        .update(id, "", name, v, Target::Status, false)
        .is_ok()
}

fn usages(csr: &Value) -> Vec<String> {
    let mut u: Vec<String> = csr["spec"]["usages"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    u.sort();
    u
}

fn usages_are(csr: &Value, want: &[&str]) -> bool {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    usages(csr) == want
}

/// The approver that would approve this CSR, as its message; `None` leaves it pending.
fn approver(csr: &Value, cn: &str, orgs: &[String]) -> Option<&'static str> {
    let signer = csr["spec"]["signerName"].as_str().unwrap_or("");
    let client = ["digital signature", "key encipherment", "client auth"];
    let node = cn.starts_with("system:node:");
    let only_nodes = orgs.len() == 1 && orgs[0] == "system:nodes";
    match signer {
        // yurt-manager's csrapprover (isYurtHubNodeCert).
        "kubernetes.io/kube-apiserver-client"
            if node
                && orgs.len() >= 2
                && orgs.iter().all(|o| {
                    o == "openyurt:yurthub"
                        || o == "system:nodes"
                        || o.starts_with("openyurt:tenant:")
                })
                && usages_are(csr, &client) =>
        {
            Some("approved by yurt-manager csrapprover (yurthub client certificate)")
        }
        // yurt-manager's csrapprover (isYurtTLSServerCert).
        "kubernetes.io/kubelet-serving"
            if node
                && only_nodes
                && usages_are(
                    csr,
                    &["key encipherment", "digital signature", "server auth"],
                ) =>
        {
            Some("approved by yurt-manager csrapprover (yurthub serving certificate)")
        }
        // kube-controller-manager's csrapproving controller.
        "kubernetes.io/kube-apiserver-client-kubelet"
            if node && only_nodes && usages_are(csr, &client) =>
        {
            Some("Auto approving kubelet client certificate after SubjectAccessReview.")
        }
        _ => None,
    }
}

/// CSR controller settings and counters.
pub struct CsrState {
    /// What the controllers do.
    pub mode: CsrMode,
    /// Lifetime of the certificates the signer issues.
    pub lifetime: Duration,
    /// Certificates issued so far.
    pub issued: usize,
}

impl Default for CsrState {
    fn default() -> Self {
        CsrState {
            mode: CsrMode::Rules,
            lifetime: Duration::from_secs(3600),
            issued: 0,
        }
    }
}

/// Fills the fields the apiserver sets on a CSR from who created it.
pub fn stamp_requester(v: &mut Value, user: &str, groups: &[String]) {
    if !v["spec"].is_object() {
        v["spec"] = json!({});
    }
    v["spec"]["username"] = json!(user);
    v["spec"]["groups"] = json!(groups);
}

/// Whether `id` names the CSR kind (so creates get stamped).
pub fn is_csr(id: KindId) -> bool {
    KINDS[id].resource == "certificatesigningrequests"
}
