//! The hub's identity conversations with the cloud: a small HTTPS client (not the proxy's
//! `Upstream`: no pooling over backends, no streaming to a client) and the CSR exchange built
//! on it — create a `CertificateSigningRequest`, then watch it until it is issued, denied or
//! failed (YurtHub §3.4).
//!
//! It does not make keys or requests (`csr.rs`) and does not store what it gets (`files.rs`);
//! its failures (`ApiError`, `CsrError`) are `error.rs`'s.
//! Every network call runs on a short-lived helper thread so that `stop` ends a wait within
//! a fraction of a second, even while a read blocks; the abandoned thread ends at its own
//! timeout.

use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crossbeam_channel::Receiver;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use ureq::Agent;
use ureq::config::AutoHeaderValue;
use ureq::http;
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};

use super::error::{ApiError, CsrError, PkiError};
use crate::link::{HUB_COMPONENT, LINK};
use crate::request::Verb;
use crate::upstream::HUB_USER_AGENT;
use crate::upstream::inflate;

/// How the hub proves who it is.
#[derive(Clone)]
pub(crate) enum Auth {
    /// A bootstrap (join) token, sent as `Authorization: Bearer`.
    Token(String),
    /// The hub's current client certificate.
    Certificate(crate::tls::ClientIdentity),
}

impl fmt::Debug for Auth {
    // Never print the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::Certificate(id) => f.debug_tuple("Certificate").field(id).finish(),
        }
    }
}

/// A client for one cloud server, trusting one CA.
#[derive(Clone)]
pub(crate) struct ApiClient {
    /// `https://host:port`, no trailing slash.
    server: Arc<str>,
    agent: Agent,
    /// The `Authorization` header value, for token auth.
    bearer: Option<Arc<str>>,
}

impl fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClient")
            .field("server", &self.server)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// What the hub asks for.
pub(crate) struct CsrSpec<'a> {
    /// The PKCS#10 request, PEM (`CERTIFICATE REQUEST`).
    pub request_pem: &'a str,
    /// `spec.signerName`, e.g. `kubernetes.io/kube-apiserver-client`.
    pub signer: &'a str,
    /// `spec.usages`, e.g. `["key encipherment", "digital signature", "client auth"]`.
    pub usages: &'a [&'a str],
}

/// The largest JSON answer read whole (a CSR object with its certificate is a few KiB).
const BODY_LIMIT: u64 = 1024 * 1024;
/// The longest watch event line accepted.
const EVENT_LIMIT: usize = 1024 * 1024;
/// Time allowed for the TCP connection and TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for one create or get.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a single watch runs before the server is asked to end it (then: get, watch).
const WATCH_SPAN: Duration = Duration::from_secs(300);
/// Pause before watching again after a watch that broke quickly.
const REWATCH_PAUSE: Duration = Duration::from_secs(1);
/// The CSR collection.
const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// ureq settings for the identity conversations (from `upstream.rs`: statuses are answers,
/// no redirects, no proxy from the environment, small buffers).
pub(super) fn agent(tls: TlsConfig) -> Agent {
    Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        // The hub's own User-Agent, as on every request it makes of its own; gzip asked per
        // request (`ApiClient::call`) and inflated by the hub, never by ureq.
        .user_agent(AutoHeaderValue::Provided(Arc::new(
            HUB_USER_AGENT.to_owned(),
        )))
        .accept_encoding(AutoHeaderValue::None)
        .tls_config(tls)
        .input_buffer_size(8 * 1024)
        .output_buffer_size(4 * 1024)
        .max_response_header_size(8 * 1024)
        .max_idle_connections_per_host(1)
        .max_idle_connections(1)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .build()
        .new_agent()
}

/// ureq's TLS configuration with ring (the process default may not be installed yet).
pub(super) fn tls_builder() -> ureq::tls::TlsConfigBuilder {
    TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
}

/// Every certificate of a PEM bundle, as ureq roots; an error when there is none.
pub(super) fn roots(ca_pem: &[u8]) -> Result<Vec<Certificate<'static>>, PkiError> {
    let roots: Vec<Certificate<'static>> = CertificateDer::pem_slice_iter(ca_pem)
        .filter_map(Result::ok)
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    if roots.is_empty() {
        return Err(PkiError::NoCaCertificate);
    }
    Ok(roots)
}

/// The outcome of work run on a helper thread.
pub(super) enum Waited<T> {
    /// The work finished.
    Done(T),
    /// `stop` fired first.
    Stopped,
    /// `deadline` passed first.
    TimedOut,
    /// The helper thread could not start (memory is short) or ended without an answer.
    Lost(String),
}

/// Runs `work` on a helper thread and waits for it, for `stop` or for `deadline`. An
/// abandoned thread finishes on its own (every call it makes has a timeout).
pub(super) fn interruptible<T: Send + 'static>(
    stop: &Receiver<()>,
    deadline: Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Waited<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("hub-identity".into())
        .stack_size(crate::SMALL_STACK)
        .spawn(move || {
            let _ = tx.send(work());
        });
    if let Err(e) = spawned {
        return Waited::Lost(e.to_string());
    }
    crossbeam_channel::select! {
        recv(rx) -> got => match got {
            Ok(value) => Waited::Done(value),
            Err(_) => Waited::Lost("the helper thread ended without an answer".into()),
        },
        // A message or the channel's closing.
        recv(stop) -> _ => Waited::Stopped,
        default(deadline.saturating_duration_since(Instant::now())) => Waited::TimedOut,
    }
}

/// Sleeps `pause`, or less when `stop` fires (then true). The stack pages the work before
/// it touched (a TLS handshake, a key's signature) are given back first: the renewals' threads
/// spend nearly all their life here, for hours.
pub(super) fn pause(stop: &Receiver<()>, pause: Duration) -> bool {
    crate::alloc::trim_stack();
    !matches!(
        stop.recv_timeout(pause),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    )
}

impl ApiClient {
    /// A client for `server` (`https://host:port`) trusting the CAs of `ca_pem`.
    pub(crate) fn new(server: &str, ca_pem: &[u8], auth: Auth) -> Result<ApiClient, PkiError> {
        let roots = roots(ca_pem)?;
        let (client_cert, bearer) = match auth {
            Auth::Token(token) => (None, Some(Arc::from(format!("Bearer {token}")))),
            Auth::Certificate(id) => (Some(id.ureq_cert().map_err(PkiError::ClientKey)?), None),
        };
        let tls = tls_builder()
            .root_certs(RootCerts::new_with_certs(&roots))
            .client_cert(client_cert)
            .build();
        Ok(ApiClient {
            server: Arc::from(server.trim_end_matches('/')),
            agent: agent(tls),
            bearer,
        })
    }

    /// `GET path`: the JSON of a 2xx answer, else the status and the `Status` message.
    pub(crate) fn get_json(&self, path: &str, timeout: Duration) -> Result<Value, ApiError> {
        let (status, body) = self.call(Verb::Get, "GET", path, None, Some(timeout))?;
        json_answer(status, &body)
    }

    /// `POST path` with a JSON body: the JSON of a 2xx answer.
    fn post_json(&self, path: &str, body: &Value, timeout: Duration) -> Result<Value, ApiError> {
        let (status, body) = self.call(
            Verb::Create,
            "POST",
            path,
            Some(body.to_string()),
            Some(timeout),
        )?;
        json_answer(status, &body)
    }

    /// One request, its body read whole (up to [`BODY_LIMIT`], inflated too). A GET asks for
    /// gzip: the hub inflates it. Counted on the link as component `tinyhub`.
    fn call(
        &self,
        verb: Verb,
        method: &str,
        path: &str,
        body: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<(u16, Vec<u8>), ApiError> {
        let link = LINK.link(&self.server, verb.as_str(), HUB_COMPONENT, path, false);
        let sent = body.as_ref().map_or(0, |b| b.len() as u64);
        let response = self.send(
            method,
            path,
            body,
            timeout,
            method == "GET" && inflate::ask_gzip(),
        )?;
        // Counted once it went, as the hub's other exchanges are: a failed dial sent nothing.
        link.request(sent);
        let status = response.status().as_u16();
        let encoding = response.headers().get("content-encoding").cloned();
        let body = response
            .into_body()
            .with_config()
            .limit(BODY_LIMIT)
            .read_to_vec()
            .map_err(|e| ApiError::Transport(e.to_string()))?;
        let plain = inflate::plain_body(
            body,
            encoding.as_ref().map(|v| v.as_bytes()),
            BODY_LIMIT,
            Some(&link),
        )
        .map_err(|e| ApiError::Transport(format!("the gzip answer does not inflate: {e}")))?;
        Ok((status, plain))
    }

    /// Sends one request, asking for gzip when `gzip`; the answer's body is left to read.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        timeout: Option<Duration>,
        gzip: bool,
    ) -> Result<http::Response<ureq::Body>, ApiError> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.server))
            .header("accept", "application/json");
        if gzip {
            builder = builder.header("accept-encoding", "gzip");
        }
        if let Some(bearer) = &self.bearer {
            builder = builder.header("authorization", &**bearer);
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let request = builder
            .body(body.unwrap_or_default())
            .map_err(|e| ApiError::Transport(format!("cannot build the request: {e}")))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(timeout)
            .build();
        self.agent
            .run(request)
            .map_err(|e| ApiError::Transport(e.to_string()))
    }
}

/// A 2xx answer's JSON, or the error a non-2xx answer stands for.
fn json_answer(status: u16, body: &[u8]) -> Result<Value, ApiError> {
    if !(200..300).contains(&status) {
        return Err(ApiError::Status {
            status,
            message: status_message(body),
        });
    }
    serde_json::from_slice(body).map_err(|e| ApiError::Invalid(format!("not JSON: {e}")))
}

/// The `message` of a Kubernetes `Status` body, else the start of the body as text.
fn status_message(body: &[u8]) -> String {
    if let Ok(Value::Object(status)) = serde_json::from_slice::<Value>(body)
        && let Some(message) = status.get("message").and_then(Value::as_str)
    {
        return message.to_string();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    let text = text.trim();
    if text.is_empty() {
        "(no message)".into()
    } else {
        text.to_string()
    }
}

/// The CSR object the hub creates (no `expirationSeconds`: the signer's default applies, as
/// with YurtHub).
fn csr_object(spec: &CsrSpec<'_>) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": STANDARD.encode(spec.request_pem.as_bytes()),
            "signerName": spec.signer,
            "usages": spec.usages,
        },
    })
}

/// Where a CSR object stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    /// Issued: the PEM chain of `status.certificate`.
    Issued(Vec<u8>),
    /// A `Denied` condition.
    Denied { reason: String, message: String },
    /// A `Failed` condition, or a certificate that cannot be decoded.
    Failed { reason: String, message: String },
    /// The object was deleted.
    Deleted,
}

/// The decision a CSR object holds, if any.
fn decision(object: &Value) -> Option<Decision> {
    let status = &object["status"];
    if let Some(conditions) = status["conditions"].as_array() {
        for condition in conditions {
            if condition["status"].as_str() != Some("True") {
                continue;
            }
            let reason = condition["reason"].as_str().unwrap_or("").to_string();
            let message = condition["message"].as_str().unwrap_or("").to_string();
            match condition["type"].as_str() {
                Some("Denied") => return Some(Decision::Denied { reason, message }),
                Some("Failed") => return Some(Decision::Failed { reason, message }),
                _ => {}
            }
        }
    }
    let b64 = status["certificate"].as_str().filter(|c| !c.is_empty())?;
    Some(match STANDARD.decode(b64) {
        Ok(pem) => Decision::Issued(pem),
        Err(e) => Decision::Failed {
            reason: "InvalidCertificate".into(),
            message: format!("status.certificate is not base64: {e}"),
        },
    })
}

/// How one watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WatchEnd {
    /// The CSR was decided.
    Decided(Decision),
    /// The stream ended (or broke, or the server said the version is too old): get the
    /// object and watch again.
    Broken(String),
}

/// Reads newline-delimited watch events from `body` until the CSR is decided or the
/// stream ends.
fn follow(mut body: impl Read) -> WatchEnd {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if let Some(end) = event(&line) {
                return end;
            }
        }
        if pending.len() > EVENT_LIMIT {
            return WatchEnd::Broken("a watch event is too long".into());
        }
        match body.read(&mut chunk) {
            Ok(0) => {
                // A last event without its newline still counts.
                return event(&pending)
                    .unwrap_or_else(|| WatchEnd::Broken("the watch ended".into()));
            }
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return WatchEnd::Broken(format!("the watch broke: {e}")),
        }
    }
}

/// What one event line means: None to read on.
fn event(line: &[u8]) -> Option<WatchEnd> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let event: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Some(WatchEnd::Broken(format!("a watch event is not JSON: {e}"))),
    };
    match event["type"].as_str() {
        Some("ADDED" | "MODIFIED") => decision(&event["object"]).map(WatchEnd::Decided),
        Some("DELETED") => Some(WatchEnd::Decided(Decision::Deleted)),
        // 410 Gone (version too old) and any other error: start again from a get.
        Some("ERROR") => Some(WatchEnd::Broken(format!(
            "the watch reported an error: {}",
            event["object"]["message"]
                .as_str()
                .unwrap_or("(no message)")
        ))),
        _ => None,
    }
}

/// Creates a CSR and waits up to `wait` for its certificate (YurtHub: 15 min); `stop` ends
/// the wait within a fraction of a second.
pub(crate) fn request_certificate(
    client: &ApiClient,
    spec: &CsrSpec<'_>,
    wait: Duration,
    stop: &Receiver<()>,
) -> Result<Vec<u8>, CsrError> {
    let deadline = Instant::now() + wait;
    let body = csr_object(spec);
    let created = {
        let client = client.clone();
        match interruptible(stop, deadline, move || {
            client.post_json(CSR_PATH, &body, CALL_TIMEOUT)
        }) {
            Waited::Done(Ok(object)) => object,
            // 5xx is the server's trouble, not a refusal: a transport error, tried again later.
            Waited::Done(Err(ApiError::Status { status, message })) if status < 500 => {
                return Err(CsrError::Refused { status, message });
            }
            Waited::Done(Err(e)) => return Err(CsrError::Transport(e.to_string())),
            Waited::Stopped => return Err(CsrError::Stopped),
            Waited::TimedOut => return Err(CsrError::TimedOut),
            Waited::Lost(e) => return Err(CsrError::Transport(format!("helper thread: {e}"))),
        }
    };
    let name = created["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| CsrError::Transport("the created request has no name".into()))?
        .to_string();
    log::info!(
        "certificate signing request {name} created (signer {}); waiting for approval",
        spec.signer
    );
    let finish = |d: Decision| finish(&name, spec.signer, d);
    if let Some(d) = decision(&created) {
        return finish(d);
    }
    let mut version = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    loop {
        let started = Instant::now();
        let span = WATCH_SPAN.min(deadline.saturating_duration_since(started));
        let path = format!(
            "{CSR_PATH}?fieldSelector=metadata.name%3D{name}&watch=true&resourceVersion={version}&timeoutSeconds={}",
            span.as_secs().max(1)
        );
        let watcher = client.clone();
        let ended = match interruptible(stop, deadline, move || {
            // The server ends the watch after `span`; the slack covers connecting.
            match watcher.send("GET", &path, None, Some(span + CALL_TIMEOUT), false) {
                Ok(response) if response.status().is_success() => {
                    follow(response.into_body().into_reader())
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response
                        .into_body()
                        .with_config()
                        .limit(BODY_LIMIT)
                        .read_to_vec()
                        .unwrap_or_default();
                    WatchEnd::Broken(format!(
                        "the watch answered {status}: {}",
                        status_message(&body)
                    ))
                }
                Err(e) => WatchEnd::Broken(e.to_string()),
            }
        }) {
            Waited::Done(WatchEnd::Decided(d)) => return finish(d),
            Waited::Done(WatchEnd::Broken(why)) => why,
            Waited::Stopped => return Err(CsrError::Stopped),
            Waited::TimedOut => return Err(CsrError::TimedOut),
            Waited::Lost(e) => return Err(CsrError::Transport(format!("helper thread: {e}"))),
        };
        log::debug!("watch of certificate signing request {name}: {ended}; looking again");
        if started.elapsed() < REWATCH_PAUSE
            && pause(
                stop,
                REWATCH_PAUSE.min(deadline.saturating_duration_since(Instant::now())),
            )
        {
            return Err(CsrError::Stopped);
        }
        // A watch can end any time: read the object, then watch from its version.
        let getter = client.clone();
        let path = format!("{CSR_PATH}/{name}");
        match interruptible(stop, deadline, move || getter.get_json(&path, CALL_TIMEOUT)) {
            Waited::Done(Ok(object)) => {
                if let Some(d) = decision(&object) {
                    return finish(d);
                }
                if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
                    version = v.to_string();
                }
            }
            Waited::Done(Err(ApiError::Status { status: 404, .. })) => {
                return finish(Decision::Deleted);
            }
            Waited::Done(Err(e)) => {
                log::debug!("certificate signing request {name}: {e}");
                if pause(stop, REWATCH_PAUSE) {
                    return Err(CsrError::Stopped);
                }
            }
            Waited::Stopped => return Err(CsrError::Stopped),
            Waited::TimedOut => return Err(CsrError::TimedOut),
            Waited::Lost(e) => return Err(CsrError::Transport(format!("helper thread: {e}"))),
        }
        if Instant::now() >= deadline {
            return Err(CsrError::TimedOut);
        }
    }
}

/// The result for a decided CSR; a refusal names the request and its signer (the caller
/// logs it, with what it does next).
fn finish(name: &str, signer: &str, decision: Decision) -> Result<Vec<u8>, CsrError> {
    match decision {
        Decision::Issued(pem) => {
            log::info!("certificate signing request {name} issued (signer {signer})");
            Ok(pem)
        }
        Decision::Denied { reason, message } => {
            let why = format!("{name} (signer {signer}): reason {reason:?}, message {message:?}");
            log::debug!("certificate signing request denied: {why}");
            Err(CsrError::Denied(why))
        }
        Decision::Failed { reason, message } => {
            let why = format!("{name} (signer {signer}): reason {reason:?}, message {message:?}");
            log::debug!("certificate signing request failed: {why}");
            Err(CsrError::Failed(why))
        }
        Decision::Deleted => {
            let why = format!("{name} (signer {signer}) was deleted before it was issued");
            log::debug!("certificate signing request failed: {why}");
            Err(CsrError::Failed(why))
        }
    }
}

/// A stand-in cloud for this module's and `discovery.rs`'s tests: HTTPS on 127.0.0.1 with a
/// certificate from its own CA, answering each request as a closure says.
#[cfg(test)]
pub(crate) mod test_cloud {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::Duration;

    use crossbeam_channel::{Receiver, Sender};
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, PublicKeyData,
    };
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    /// A request the cloud received.
    #[derive(Debug, Clone)]
    pub(crate) struct Seen {
        /// `GET`, `POST`.
        pub method: String,
        /// Path and query, as sent.
        pub target: String,
        /// The request head, lower-cased.
        pub head: String,
        /// The request body.
        pub body: Vec<u8>,
        /// The client presented a certificate (verified against the client CA).
        pub client_cert: bool,
    }

    /// How to answer.
    pub(crate) enum Reply {
        /// A whole JSON answer with this status.
        Json(u16, String),
        /// A chunked answer (status 200): each piece after its pause, then the end.
        Stream(Vec<(Duration, String)>),
        /// A 200 head, then silence.
        Hang,
    }

    /// A running stand-in cloud.
    pub(crate) struct TestCloud {
        /// `https://127.0.0.1:<port>`.
        pub url: String,
        /// The CA that signed the serving certificate, PEM.
        pub ca_pem: String,
        /// SHA-256 of the CA's SubjectPublicKeyInfo, computed by rcgen's encoding.
        pub ca_spki_sha256: [u8; 32],
        /// Every request, in order.
        pub seen: Receiver<Seen>,
    }

    /// A CA and a serving certificate for 127.0.0.1 signed by it.
    pub(crate) fn ca_and_leaf() -> (String, [u8; 32], Vec<CertificateDer<'static>>, KeyPair) {
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test-cloud-ca");
        let ca = params.self_signed(&ca_key).expect("ca");
        let spki = ca_key.subject_public_key_info();
        let mut pin = [0u8; 32];
        pin.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref());
        let issuer = Issuer::new(params, ca_key);
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("params")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf");
        (
            ca.pem(),
            pin,
            vec![leaf.der().clone(), ca.der().clone()],
            leaf_key,
        )
    }

    /// Starts the cloud; `reply` decides each answer.
    pub(crate) fn start(reply: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> TestCloud {
        start_with(None, reply)
    }

    /// Starts the cloud requiring a client certificate signed by `client_ca` (DER).
    pub(crate) fn start_with(
        client_ca: Option<CertificateDer<'static>>,
        reply: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> TestCloud {
        let (ca_pem, ca_spki_sha256, chain, key) = ca_and_leaf();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("versions");
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca).expect("client ca");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(chain, key).expect("server config");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("https://{}", listener.local_addr().expect("addr"));
        let (tx, seen) = crossbeam_channel::unbounded();
        let reply = Arc::new(reply);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, reply, tx) = (Arc::clone(&config), Arc::clone(&reply), tx.clone());
                std::thread::spawn(move || serve(stream, config, &*reply, &tx));
            }
        });
        TestCloud {
            url,
            ca_pem,
            ca_spki_sha256,
            seen,
        }
    }

    /// Answers the requests of one connection.
    fn serve(
        stream: TcpStream,
        config: Arc<rustls::ServerConfig>,
        reply: &(dyn Fn(&Seen) -> Reply + Send + Sync),
        tx: &Sender<Seen>,
    ) {
        let Ok(conn) = rustls::ServerConnection::new(config) else {
            return;
        };
        let mut tls = rustls::StreamOwned::new(conn, stream);
        loop {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match tls.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            let raw = String::from_utf8_lossy(&head).into_owned();
            let mut words = raw.split_whitespace();
            let method = words.next().unwrap_or("").to_string();
            let target = words.next().unwrap_or("").to_string();
            let head = raw.to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            if tls.read_exact(&mut body).is_err() {
                return;
            }
            let seen = Seen {
                method,
                target,
                head,
                body,
                client_cert: tls.conn.peer_certificates().is_some(),
            };
            let answer = reply(&seen);
            let _ = tx.send(seen);
            let ok = match answer {
                Reply::Json(status, body) => write!(
                    tls,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .and_then(|()| tls.flush()),
                Reply::Stream(pieces) => {
                    let mut out = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                    )
                    .and_then(|()| tls.flush());
                    for (pause, text) in pieces {
                        std::thread::sleep(pause);
                        out = out
                            .and_then(|()| write!(tls, "{:x}\r\n{text}\r\n", text.len()))
                            .and_then(|()| tls.flush());
                    }
                    let _ = out.and_then(|()| tls.write_all(b"0\r\n\r\n"));
                    let _ = tls.flush();
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                    return;
                }
                Reply::Hang => {
                    let _ = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                    )
                    .and_then(|()| tls.flush());
                    std::thread::sleep(Duration::from_secs(30));
                    return;
                }
            };
            if ok.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_cloud::{self, Reply};
    use super::*;

    const PEM_REQUEST: &str =
        "-----BEGIN CERTIFICATE REQUEST-----\nMIIBtest\n-----END CERTIFICATE REQUEST-----\n";
    const ISSUED: &str = "-----BEGIN CERTIFICATE-----\nMIIBissued\n-----END CERTIFICATE-----\n";
    const USAGES: &[&str] = &["key encipherment", "digital signature", "client auth"];

    fn spec() -> CsrSpec<'static> {
        CsrSpec {
            request_pem: PEM_REQUEST,
            signer: "kubernetes.io/kube-apiserver-client",
            usages: USAGES,
        }
    }

    /// A CSR object as the apiserver shows it.
    fn csr(rv: &str, conditions: Value, certificate: Option<&str>) -> Value {
        let mut status = json!({});
        if !conditions.is_null() {
            status["conditions"] = conditions;
        }
        if let Some(pem) = certificate {
            status["certificate"] = json!(STANDARD.encode(pem));
        }
        json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": "csr-abc12", "resourceVersion": rv},
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client"},
            "status": status,
        })
    }

    fn event(kind: &str, object: Value) -> String {
        format!("{}\n", json!({"type": kind, "object": object}))
    }

    fn approved() -> Value {
        json!([{"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "ok"}])
    }

    /// A reader that hands out the stream in pieces of `size` bytes.
    struct Pieces {
        data: Vec<u8>,
        at: usize,
        size: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.size.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn follow_in_pieces(stream: &str, size: usize) -> WatchEnd {
        follow(Pieces {
            data: stream.as_bytes().to_vec(),
            at: 0,
            size,
        })
    }

    #[test]
    fn the_csr_object_has_kubernetes_shape_and_no_expiration() {
        let object = csr_object(&spec());
        assert_eq!(object["apiVersion"], "certificates.k8s.io/v1");
        assert_eq!(object["kind"], "CertificateSigningRequest");
        assert_eq!(object["metadata"], json!({"generateName": "csr-"}));
        let request = STANDARD
            .decode(object["spec"]["request"].as_str().expect("request"))
            .expect("base64");
        assert_eq!(request, PEM_REQUEST.as_bytes());
        assert_eq!(
            object["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client"
        );
        assert_eq!(object["spec"]["usages"], json!(USAGES));
        let spec_keys: Vec<&String> = object["spec"].as_object().expect("spec").keys().collect();
        assert_eq!(
            spec_keys.len(),
            3,
            "only request, signerName, usages: {spec_keys:?}"
        );
        assert!(!object.to_string().contains("expirationSeconds"));
    }

    #[test]
    fn an_approved_then_issued_csr_is_read_across_split_chunks() {
        let stream = [
            event("ADDED", csr("5", Value::Null, None)),
            event("MODIFIED", csr("6", approved(), None)),
            event("MODIFIED", csr("7", approved(), Some(ISSUED))),
        ]
        .concat();
        for size in [1, 7, 64, 4096] {
            assert_eq!(
                follow_in_pieces(&stream, size),
                WatchEnd::Decided(Decision::Issued(ISSUED.as_bytes().to_vec())),
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn denied_and_failed_conditions_end_the_watch_with_their_reason() {
        let denied = json!([{"type": "Denied", "status": "True", "reason": "NotMine", "message": "go away"}]);
        let stream = [
            event("ADDED", csr("5", Value::Null, None)),
            event("MODIFIED", csr("6", denied, None)),
        ]
        .concat();
        assert_eq!(
            follow_in_pieces(&stream, 10),
            WatchEnd::Decided(Decision::Denied {
                reason: "NotMine".into(),
                message: "go away".into()
            })
        );
        let failed = json!([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True", "reason": "SignerError", "message": "no key"}]);
        assert_eq!(
            follow_in_pieces(&event("MODIFIED", csr("6", failed, None)), 10),
            WatchEnd::Decided(Decision::Failed {
                reason: "SignerError".into(),
                message: "no key".into()
            })
        );
        // A condition that is not "True" decides nothing.
        let not_true = json!([{"type": "Denied", "status": "False"}]);
        assert!(matches!(
            follow_in_pieces(&event("MODIFIED", csr("6", not_true, None)), 10),
            WatchEnd::Broken(_)
        ));
    }

    #[test]
    fn a_stream_ending_or_erroring_before_an_answer_means_look_again() {
        let stream = [
            event("ADDED", csr("5", Value::Null, None)),
            event("MODIFIED", csr("6", approved(), None)),
        ]
        .concat();
        assert!(matches!(follow_in_pieces(&stream, 5), WatchEnd::Broken(_)));
        assert!(matches!(follow_in_pieces("", 5), WatchEnd::Broken(_)));
        let gone = event(
            "ERROR",
            json!({"kind": "Status", "code": 410, "message": "too old resource version"}),
        );
        match follow_in_pieces(&gone, 5) {
            WatchEnd::Broken(why) => assert!(why.contains("too old"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            follow_in_pieces("{not json\n", 5),
            WatchEnd::Broken(_)
        ));
        // A deleted request will never be issued.
        assert_eq!(
            follow_in_pieces(&event("DELETED", csr("8", Value::Null, None)), 5),
            WatchEnd::Decided(Decision::Deleted)
        );
    }

    #[test]
    fn a_last_event_without_its_newline_still_counts() {
        let stream = event("MODIFIED", csr("7", approved(), Some(ISSUED)));
        assert_eq!(
            follow_in_pieces(stream.trim_end(), 3),
            WatchEnd::Decided(Decision::Issued(ISSUED.as_bytes().to_vec()))
        );
    }

    #[test]
    fn a_non_2xx_answer_carries_the_status_message() {
        let body = br#"{"kind":"Status","status":"Failure","message":"certificatesigningrequests is forbidden: User \"system:anonymous\" cannot create","code":403}"#;
        assert_eq!(
            json_answer(403, body),
            Err(ApiError::Status {
                status: 403,
                message: "certificatesigningrequests is forbidden: User \"system:anonymous\" cannot create".into()
            })
        );
        assert_eq!(
            json_answer(502, b"bad gateway\n"),
            Err(ApiError::Status {
                status: 502,
                message: "bad gateway".into()
            })
        );
        assert!(matches!(
            json_answer(200, b"<html>"),
            Err(ApiError::Invalid(_))
        ));
    }

    #[test]
    fn the_debug_forms_hide_the_token() {
        let auth = Auth::Token("abcdef.0123456789abcdef".into());
        assert!(!format!("{auth:?}").contains("0123456789abcdef"));
        let client = ApiClient::new(
            "https://127.0.0.1:1",
            test_cloud::ca_and_leaf().0.as_bytes(),
            auth,
        )
        .expect("client");
        assert!(!format!("{client:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn certificate_auth_presents_the_client_certificate_and_no_token() {
        // A client CA and a client certificate signed by it.
        let (client_ca_pem, _, chain, key) = test_cloud::ca_and_leaf();
        let client_ca = CertificateDer::from_pem_slice(client_ca_pem.as_bytes()).expect("ca");
        let cert_pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            STANDARD.encode(chain[0].as_ref())
        );
        let material = crate::tls::load(
            client_ca_pem.as_bytes(),
            Some((cert_pem.as_bytes(), key.serialize_pem().as_bytes())),
        )
        .expect("material");
        let identity = material.client.expect("identity");
        let cloud = test_cloud::start_with(Some(client_ca), |_| {
            Reply::Json(
                200,
                r#"{"kind":"Service","spec":{"clusterIP":"10.96.0.1"}}"#.into(),
            )
        });
        let client = ApiClient::new(
            &cloud.url,
            cloud.ca_pem.as_bytes(),
            Auth::Certificate(identity),
        )
        .expect("client");
        let answer = client
            .get_json(
                "/api/v1/namespaces/default/services/kubernetes",
                Duration::from_secs(10),
            )
            .expect("answer");
        assert_eq!(answer["spec"]["clusterIP"], "10.96.0.1");
        let seen = cloud.seen.try_recv().expect("request");
        assert!(seen.client_cert);
        assert!(!seen.head.contains("authorization"), "{}", seen.head);

        // Without a certificate, the handshake fails: a transport error.
        let anonymous = token_client(&cloud);
        assert!(matches!(
            anonymous.get_json("/api", Duration::from_secs(10)),
            Err(ApiError::Transport(_))
        ));
    }

    #[test]
    fn a_client_needs_a_ca_certificate() {
        let err = ApiClient::new("https://127.0.0.1:1", b"not pem", Auth::Token("t".into()))
            .expect_err("no CA")
            .to_string();
        assert!(err.contains("no PEM certificate"), "{err}");
    }

    /// The stand-in for `request_certificate`: create answers rv 5, the first watch breaks
    /// after a pending event, the get answers rv 7, the second watch issues.
    /// A client of `cloud` with the test bootstrap token.
    fn token_client(cloud: &test_cloud::TestCloud) -> ApiClient {
        ApiClient::new(
            &cloud.url,
            cloud.ca_pem.as_bytes(),
            Auth::Token("abcdef.0123456789abcdef".into()),
        )
        .expect("client")
    }

    fn issuing_cloud() -> test_cloud::TestCloud {
        let watches = std::sync::atomic::AtomicUsize::new(0);
        test_cloud::start(
            move |seen| match (seen.method.as_str(), seen.target.as_str()) {
                ("POST", CSR_PATH) => Reply::Json(201, csr("5", Value::Null, None).to_string()),
                ("GET", t) if t.contains("watch=true") => {
                    if watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        Reply::Stream(vec![(
                            Duration::ZERO,
                            event("ADDED", csr("5", Value::Null, None)),
                        )])
                    } else {
                        let done = event("MODIFIED", csr("8", approved(), Some(ISSUED)));
                        let (a, b) = done.split_at(40);
                        Reply::Stream(vec![
                            (Duration::ZERO, a.to_string()),
                            (Duration::from_millis(20), b.to_string()),
                        ])
                    }
                }
                ("GET", t) if t == format!("{CSR_PATH}/csr-abc12") => {
                    Reply::Json(200, csr("7", approved(), None).to_string())
                }
                _ => Reply::Json(404, r#"{"kind":"Status","message":"not found"}"#.into()),
            },
        )
    }

    #[test]
    fn request_certificate_creates_watches_rereads_and_returns_the_chain() {
        let cloud = issuing_cloud();
        let client = token_client(&cloud);
        let (_stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let pem =
            request_certificate(&client, &spec(), Duration::from_secs(30), &stop).expect("issued");
        assert_eq!(pem, ISSUED.as_bytes());

        let seen: Vec<_> = cloud.seen.try_iter().collect();
        let targets: Vec<(&str, &str)> = seen
            .iter()
            .map(|s| (s.method.as_str(), s.target.as_str()))
            .collect();
        assert_eq!(targets.len(), 4, "{targets:?}");
        assert_eq!(targets[0], ("POST", CSR_PATH));
        assert!(
            targets[1].1.starts_with(&format!(
                "{CSR_PATH}?fieldSelector=metadata.name%3Dcsr-abc12&watch=true&resourceVersion=5"
            )),
            "{targets:?}"
        );
        assert_eq!(targets[2], ("GET", &*format!("{CSR_PATH}/csr-abc12")));
        assert!(targets[3].1.contains("&resourceVersion=7"), "{targets:?}");
        for s in &seen {
            assert!(
                s.head
                    .contains("authorization: bearer abcdef.0123456789abcdef"),
                "{}",
                s.head
            );
        }
        let sent: Value = serde_json::from_slice(&seen[0].body).expect("json body");
        assert_eq!(sent, csr_object(&spec()));
    }

    #[test]
    fn a_refused_create_says_the_status_and_message() {
        let cloud = test_cloud::start(|_| {
            Reply::Json(
                403,
                r#"{"kind":"Status","code":403,"message":"forbidden: token expired"}"#.into(),
            )
        });
        let client = token_client(&cloud);
        let (_stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let err = request_certificate(&client, &spec(), Duration::from_secs(30), &stop)
            .expect_err("refused");
        assert_eq!(
            err,
            CsrError::Refused {
                status: 403,
                message: "forbidden: token expired".into()
            }
        );
        assert!(err.to_string().contains("403"), "{err}");

        // A 5xx is the server's trouble, to be tried again: not a refusal.
        let broken = test_cloud::start(|_| Reply::Json(503, r#"{"message":"etcd down"}"#.into()));
        let client = token_client(&broken);
        match request_certificate(&client, &spec(), Duration::from_secs(30), &stop) {
            Err(CsrError::Transport(why)) => assert!(why.contains("etcd down"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A cloud that creates but never decides (the watch stays silent).
    fn silent_cloud() -> test_cloud::TestCloud {
        test_cloud::start(|seen| match seen.method.as_str() {
            "POST" => Reply::Json(201, csr("5", Value::Null, None).to_string()),
            _ => Reply::Hang,
        })
    }

    #[test]
    fn closing_stop_abandons_a_silent_watch() {
        let cloud = silent_cloud();
        let client = token_client(&cloud);
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let seen = cloud.seen.clone();
        std::thread::spawn(move || {
            // Close stop once the watch is open.
            while let Ok(s) = seen.recv() {
                if s.target.contains("watch=true") {
                    break;
                }
            }
            drop(stop_tx);
        });
        // A wait long enough that only stop can end the call.
        let err = request_certificate(&client, &spec(), Duration::from_secs(600), &stop)
            .expect_err("stopped");
        assert_eq!(err, CsrError::Stopped);
    }

    #[test]
    fn a_silent_watch_times_out_after_the_wait() {
        let cloud = silent_cloud();
        let client = token_client(&cloud);
        let (_stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let err = request_certificate(&client, &spec(), Duration::from_secs(2), &stop)
            .expect_err("timed out");
        assert_eq!(err, CsrError::TimedOut);
    }
}
