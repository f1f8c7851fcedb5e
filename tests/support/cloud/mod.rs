//! The stand-in cloud: a Kubernetes-like apiserver in-process, on 127.0.0.1 with a random
//! port, TLS with the test CA (client certificates optional), for tinyhub's tests, demo
//! and benchmarks.
//!
//! [`Cloud`] is the handle tests hold: addresses and credentials, fault switches
//! (stop/restart, blackhole, delay, drop mid-body, readyz, lease refusals and conflicts),
//! the request log, and a Rust API over the objects (create/update/patch/delete emit watch
//! events like HTTP writes do).
//!
//! Code map: `front.rs` TLS front and connection faults; `http1.rs` the internal HTTP/1.1
//! server (tiny_http 0.12 loses connections under bursts, see there); `server.rs` routing
//! and verbs; `respond.rs` response framing (chunks, gzip); `render.rs` lists, Tables, watch
//! lines; `store.rs` objects, resourceVersions, event log, watchers; `selector.rs` label and
//! field selectors; `kinds.rs` the kind registry and discovery; `status.rs` errors;
//! `convert.rs` serving an older version (v1beta1 EndpointSlices) from the stored one;
//! `leases.rs` Leases' PUT rules and the lease fault switches;
//! `observe.rs` the request log; `fixtures.rs` the objects OpenYurt's filters read and bulk
//! Services/EndpointSlices; `csr.rs` the certificate controllers, bootstrap tokens and
//! `cluster-info`; `websocket.rs`, `remotecommand.rs`, `portforward.rs` kubectl's exec and
//! port-forward after an upgrade (WebSocket, SPDY).

mod convert;
mod csr;
mod fixtures;
mod front;
mod http1;
mod kinds;
mod leases;
mod observe;
mod portforward;
mod remotecommand;
mod render;
mod respond;
mod selector;
mod server;
mod status;
mod store;
mod tokens;
mod upgrade;
mod websocket;

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime};

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use serde_json::{Value, json};

pub use csr::CsrMode;
pub use fixtures::{
    APISERVER_ADDRESSES, APISERVER_PORT, DISCARD_ANNOTATION, KUBE_PROXY_CONFIG_CONF,
    NODEPOOL_LABEL, NODEPORT_LISTEN_ANNOTATION, TOPOLOGY_ANNOTATION,
};
pub use observe::{AuthMethod, Identity, RecordedRequest};
pub use selector::{FieldSelector, FieldTerm, LabelOp, LabelSelector, Requirement};
pub use status::ApiError;

use super::kubeconfig::{
    KubeconfigOptions, KubeletFiles, write_bootstrap_kubeconfig, write_kubeconfig,
    write_kubelet_files,
};
use super::pki::{CertSpec, ClientCert, Pki};
use super::util::{lock, rfc3339, unix_now};
use front::Front;
use kinds::{KINDS, KindId};
use observe::Recorder;
use store::{Obj, Store, Target};

/// State shared by every apiserver instance of one cloud (see [`Cloud::start_peer`]).
struct Shared {
    store: Arc<Store>,
    pki: Pki,
    tokens: Mutex<HashMap<String, String>>,
    /// Bootstrap tokens: id → secret.
    bootstrap: Mutex<BTreeMap<String, String>>,
    /// The server `cluster-info` names (the first instance's URL unless overridden).
    cluster_info_server: Mutex<String>,
    /// The CSR controllers' settings and counters.
    csr: Mutex<csr::CsrState>,
}

/// Per-instance switches.
struct Knobs {
    delay: Duration,
    drop_mid: usize,
    gzip_threshold: usize,
    ready: bool,
    bookmark_every: Option<Duration>,
    /// Watches of these (storage kind, user) pairs stay open but send nothing.
    frozen: Vec<(KindId, String)>,
    record: bool,
    /// The next answers to paths under a prefix (not watches), replaced: the prefix, how
    /// many, and the status and JSON body sent instead.
    misanswer: Option<(String, usize, u16, Vec<u8>)>,
    /// The next watches of paths under a prefix, answered with raw event lines instead: the
    /// prefix, how many, and the lines (each sent as one chunk; then the stream ends).
    misanswer_watch: Option<(String, usize, Vec<Vec<u8>>)>,
    /// Queries are split on `;` as well as `&`, as Go before 1.17 did.
    semicolon_separates: bool,
    /// Lease refusals and forced conflicts.
    leases: leases::LeaseFaults,
}

/// One apiserver instance: its front, its request log, its switches.
struct Instance {
    shared: Arc<Shared>,
    front: Arc<Front>,
    recorder: Recorder,
    knobs: Mutex<Knobs>,
    /// The watches being answered, by kind, with the connection each is carried on.
    watches: server::OpenWatches,
}

/// Synthetic pods for big-list tests (see [`Cloud::populate_pods`]).
///
/// Pod `i` (0-based) is `<prefix>-<i:06>` in namespace `<prefix>-<i % namespaces>`, with
/// labels `app=app-<i % 10>`, `tier=` one of `frontend|backend|cache` by `i % 3`,
/// `fill=<prefix>`, `spec.nodeName=node-<i % nodes>`, `status.phase` `Pending` when
/// `i % 10 == 9` else `Running`, and an annotation padding the JSON to about `body_bytes`.
#[derive(Clone, Debug)]
pub struct PodFill {
    /// Number of pods.
    pub count: usize,
    /// Spread over this many namespaces.
    pub namespaces: usize,
    /// Spread over this many node names.
    pub nodes: usize,
    /// Approximate JSON size of each pod.
    pub body_bytes: usize,
    /// Name prefix (default `bulk`).
    pub prefix: String,
}

impl Default for PodFill {
    fn default() -> Self {
        PodFill {
            count: 1000,
            namespaces: 10,
            nodes: 10,
            body_bytes: 5000,
            prefix: "bulk".into(),
        }
    }
}

/// A running stand-in apiserver. Dropping it stops everything.
pub struct Cloud {
    inst: Arc<Instance>,
    internal: SocketAddr,
    internal_stop: Arc<AtomicBool>,
    http_thread: Option<JoinHandle<()>>,
    /// The CSR controllers (the first instance of a cloud runs them, not its peers).
    controller: Option<csr::Controller>,
}

fn tls_config(pki: &Pki) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    // The CA was just generated by rcgen; rustls accepts it.
    roots
        .add(CertificateDer::from(pki.ca_der().to_vec()))
        .expect("test CA is a valid trust anchor");
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .expect("client verifier from a valid root");
    let server = pki.server();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key_der.clone()));
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(server.cert_der.clone())], key)
        .expect("serving certificate matches its key");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

impl Cloud {
    /// Starts a cloud with a fresh [`Pki`]. Returns once it accepts connections.
    pub fn start() -> Cloud {
        Self::start_with(Pki::new())
    }

    /// Starts a cloud using `pki` (its CA and serving certificate).
    pub fn start_with(pki: Pki) -> Cloud {
        let shared = Arc::new(Shared {
            store: Arc::new(Store::new()),
            pki,
            tokens: Mutex::new(HashMap::new()),
            bootstrap: Mutex::new(BTreeMap::new()),
            cluster_info_server: Mutex::new(String::new()),
            csr: Mutex::new(csr::CsrState::default()),
        });
        let mut cloud = Self::launch(shared.clone());
        *lock(&shared.cluster_info_server) = cloud.url();
        cloud.seed();
        cloud.controller = Some(csr::start(shared));
        cloud
    }

    /// The objects a kubeadm cluster has from the start besides namespaces: the
    /// `default/kubernetes` Service and `kube-public/cluster-info`.
    fn seed(&self) {
        self.create(
            "services",
            json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                         "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                         "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                    "targetPort": 6443}],
                         "sessionAffinity": "None", "type": "ClusterIP"},
                "status": {"loadBalancer": {}},
            }),
        );
        self.create("configmaps", self.cluster_info());
    }

    fn cluster_info(&self) -> Value {
        let shared = &self.inst.shared;
        let server = lock(&shared.cluster_info_server).clone();
        csr::cluster_info(&server, self.ca_pem(), &lock(&shared.bootstrap))
    }

    /// Rewrites `cluster-info` after a change of tokens or server (the bootstrap signer).
    fn refresh_cluster_info(&self) {
        self.apply("configmaps", self.cluster_info());
    }

    /// Starts a second apiserver on its own port that shares this one's data, PKI and
    /// tokens (like two apiservers on one etcd), with its own faults and request log.
    pub fn start_peer(&self) -> Cloud {
        Self::launch(self.inst.shared.clone())
    }

    fn launch(shared: Arc<Shared>) -> Cloud {
        // Binding loopback port 0 only fails when the machine is out of ports or sockets.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind internal port");
        let internal = listener.local_addr().expect("internal address");
        let front = Arc::new(Front::new(
            tls_config(&shared.pki),
            internal,
            shared.pki.clone(),
        ));
        let inst = Arc::new(Instance {
            shared,
            front: front.clone(),
            recorder: Recorder::default(),
            watches: server::OpenWatches::default(),
            knobs: Mutex::new(Knobs {
                delay: Duration::ZERO,
                drop_mid: 0,
                gzip_threshold: 128 * 1024,
                ready: true,
                bookmark_every: None,
                frozen: Vec::new(),
                record: true,
                misanswer: None,
                misanswer_watch: None,
                semicolon_separates: false,
                leases: leases::LeaseFaults::default(),
            }),
        });
        let internal_stop = Arc::new(AtomicBool::new(false));
        let http_thread = {
            let (inst, stop) = (inst.clone(), internal_stop.clone());
            thread::Builder::new()
                .name("cloud-http".into())
                .spawn(move || server::serve(listener, inst, stop))
                .expect("spawn cloud-http")
        };
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        front.listen(any).expect("bind public port");
        Cloud {
            inst,
            internal,
            internal_stop,
            http_thread: Some(http_thread),
            controller: None,
        }
    }

    // ---- addresses and credentials ----

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr())
    }

    /// The public address (stable across stop/restart).
    pub fn addr(&self) -> SocketAddr {
        self.inst
            .front
            .public_addr()
            .expect("listening since start")
    }

    /// The CA certificate (PEM) clients must trust.
    pub fn ca_pem(&self) -> &str {
        self.inst.shared.pki.ca_pem()
    }

    /// The PKI (issue more client certificates, look up who a certificate is).
    pub fn pki(&self) -> &Pki {
        &self.inst.shared.pki
    }

    /// Issues a client certificate for user `cn` in `groups`.
    pub fn issue_client(&self, cn: &str, groups: &[&str]) -> ClientCert {
        self.inst.shared.pki.issue_client(cn, groups)
    }

    /// Accepts `Authorization: Bearer <token>` as user `user`.
    pub fn add_token(&self, token: &str, user: &str) {
        lock(&self.inst.shared.tokens).insert(token.into(), user.into());
    }

    /// Stops accepting a token.
    pub fn remove_token(&self, token: &str) {
        lock(&self.inst.shared.tokens).remove(token);
    }

    /// Writes a kubeconfig for this cloud in `dir` and returns its path; `opts` is an
    /// [`super::Auth`] (CA inline, file `kubeconfig`) or full [`KubeconfigOptions`].
    pub fn write_kubeconfig(&self, dir: &Path, opts: impl Into<KubeconfigOptions>) -> PathBuf {
        write_kubeconfig(dir, &self.url(), self.ca_pem(), &opts.into())
    }

    // ---- identity: bootstrap tokens, cluster-info, CSRs (kubeadm, kube-controller-manager,
    // yurt-manager) ----

    /// Accepts the bootstrap token `<id>.<secret>` as user `system:bootstrap:<id>` in
    /// `system:bootstrappers` (RBAC: CSRs create/get/list/watch and discovery only) and
    /// signs `cluster-info` with it.
    pub fn add_bootstrap_token(&self, id: &str, secret: &str) {
        lock(&self.inst.shared.bootstrap).insert(id.into(), secret.into());
        self.refresh_cluster_info();
    }

    /// Forgets a bootstrap token (it then gets 401; its `cluster-info` signature goes).
    pub fn remove_bootstrap_token(&self, id: &str) {
        lock(&self.inst.shared.bootstrap).remove(id);
        self.refresh_cluster_info();
    }

    /// The server URL `cluster-info`'s kubeconfig names (default: this cloud's URL).
    pub fn set_cluster_info_server(&self, url: &str) {
        *lock(&self.inst.shared.cluster_info_server) = url.into();
        self.refresh_cluster_info();
    }

    /// What the CSR controllers do with new requests (default [`CsrMode::Rules`]).
    pub fn set_csr_mode(&self, mode: CsrMode) {
        lock(&self.inst.shared.csr).mode = mode;
    }

    /// Lifetime of the certificates the signer issues from now on (default 1 h; a CSR's
    /// smaller `spec.expirationSeconds` wins).
    pub fn set_csr_lifetime(&self, lifetime: Duration) {
        lock(&self.inst.shared.csr).lifetime = lifetime;
    }

    /// The CertificateSigningRequests now stored.
    pub fn csrs(&self) -> Vec<Value> {
        self.list("certificatesigningrequests", None)
    }

    /// How many certificates the signer has issued.
    pub fn issued_certificates(&self) -> usize {
        lock(&self.inst.shared.csr).issued
    }

    /// `sha256:<hex>` of the CA's SubjectPublicKeyInfo (`--discovery-token-ca-cert-hash`).
    pub fn ca_pin(&self) -> String {
        self.inst.shared.pki.ca_pin()
    }

    /// Writes at `path` the bootstrap kubeconfig `yurtadm join` writes for `token`: cluster
    /// `kubernetes` (this cloud, CA inline), user `token-bootstrap-client`.
    pub fn write_bootstrap_kubeconfig(&self, path: &Path, token: &str) {
        write_bootstrap_kubeconfig(path, &self.url(), self.ca_pem(), token);
    }

    /// Writes kubelet's credentials in `dir` as kubeadm and kubelet do (`kubelet.conf`,
    /// `pki/ca.crt`, `kubelet-client-<date>.pem` behind the `kubelet-client-current.pem`
    /// symlink) with a new certificate for `system:node:<node>` in `system:nodes` valid for
    /// `lifetime` from now. Called again, it rotates: a new dated file, the symlink swapped
    /// atomically.
    pub fn write_kubelet_credentials(
        &self,
        dir: &Path,
        node: &str,
        lifetime: Duration,
    ) -> KubeletFiles {
        let not_before = unix_now();
        let pair = self.inst.shared.pki.issue_with_key(&CertSpec {
            cn: format!("system:node:{node}"),
            orgs: vec!["system:nodes".into()],
            not_before,
            not_after: not_before + lifetime.as_secs().max(1),
            ..CertSpec::default()
        });
        write_kubelet_files(dir, &self.url(), self.ca_pem(), &pair, SystemTime::now())
    }

    // ---- faults ----

    /// Like the process dying: closes the listener and cuts every connection (in-flight
    /// answers and watches end abruptly, without a terminal chunk or TLS close_notify).
    pub fn stop(&self) {
        self.inst.front.stop();
    }

    /// Cuts every connection of this instance carrying an open watch of `resource` (as a
    /// middlebox dropping idle streams would: no terminal chunk, no TLS close_notify); the
    /// listener and every other connection stay up. Returns how many connections it cut.
    pub fn cut_watches(&self, resource: &str) -> usize {
        let conns = self
            .inst
            .watches
            .connections(kinds::storage(kind_id(resource)));
        for &id in &conns {
            self.inst.front.cut(id);
        }
        conns.len()
    }

    /// Listens again on the same port with the same data. Returns once it accepts.
    pub fn restart(&self) {
        let addr = self.addr();
        if let Err(e) = self.inst.front.listen(addr) {
            panic!("restart on {addr}: {e}");
        }
    }

    /// Whether the public port is open (not stopped).
    pub fn is_running(&self) -> bool {
        self.inst.front.is_listening()
    }

    /// On: new TCP connections are accepted and held without a TLS handshake, and open
    /// connections stop carrying data both ways (like a network partition). Off: new
    /// connections work, stalled ones resume, held ones are closed.
    pub fn set_blackhole(&self, on: bool) {
        self.inst.front.set_blackhole(on);
    }

    /// Delays every answer (before the status line) by `d`.
    pub fn set_delay(&self, d: Duration) {
        lock(&self.inst.knobs).delay = d;
    }

    /// The next `n` answers that are not watches or health checks send their status,
    /// headers (with the full Content-Length) and half the body, then the connection is cut.
    pub fn drop_mid_body(&self, n: usize) {
        lock(&self.inst.knobs).drop_mid = n;
    }

    /// The next `n` answers to paths starting with `path` (watches excepted) are `status`
    /// with `body` (sent as `application/json` with its exact length) instead of the real
    /// answer: a broken apiserver or a middlebox answering garbage.
    pub fn misanswer(&self, path: &str, n: usize, status: u16, body: &[u8]) {
        lock(&self.inst.knobs).misanswer = Some((path.to_owned(), n, status, body.to_vec()));
    }

    /// The next `n` watches of paths starting with `path` stream `lines` (raw bytes, one
    /// chunk each) instead of the real events, then end: a broken apiserver sending events
    /// the hub must not trust.
    pub fn misanswer_watch(&self, path: &str, n: usize, lines: &[&[u8]]) {
        let lines = lines.iter().map(|l| l.to_vec()).collect();
        lock(&self.inst.knobs).misanswer_watch = Some((path.to_owned(), n, lines));
    }

    /// Reads a `;` in a query as a separator, as apiservers built with Go before 1.17 did
    /// (`true`), or drops the pair holding it, as later ones do (`false`, the default).
    pub fn set_semicolon_separates(&self, on: bool) {
        lock(&self.inst.knobs).semicolon_separates = on;
    }

    /// `/readyz` answers 200 `ok` (true, the default) or 500.
    pub fn set_ready(&self, ready: bool) {
        lock(&self.inst.knobs).ready = ready;
    }

    /// Bodies larger than this are gzip-compressed when the client accepts gzip
    /// (default 128 KiB, as the kube-apiserver).
    pub fn set_gzip_threshold(&self, bytes: usize) {
        lock(&self.inst.knobs).gzip_threshold = bytes;
    }

    /// Watches with `allowWatchBookmarks=true` get a BOOKMARK this often (default: never).
    pub fn set_bookmark_interval(&self, every: Option<Duration>) {
        lock(&self.inst.knobs).bookmark_every = every;
    }

    /// A hung upstream watch, for one client: with `on`, every watch of `resource` by `user`
    /// (a client certificate's CN, e.g. `system:node:edge-1`) on this instance, open or
    /// new, stays open but sends nothing (neither events nor bookmarks), while that user's
    /// other requests, and everyone else's, are answered. With `on` false they are thawed by
    /// cutting them (the client resumes from where it was).
    pub fn freeze_watches(&self, resource: &str, user: &str, on: bool) {
        let id = kinds::storage(kind_id(resource));
        {
            let mut knobs = lock(&self.inst.knobs);
            knobs.frozen.retain(|(k, u)| !(*k == id && u == user));
            if on {
                knobs.frozen.push((id, user.to_owned()));
            }
        }
        if !on {
            self.cut_watches(resource);
        }
    }

    // ---- node leases (kube-node-lease) ----

    /// The next `n` requests on Leases (any verb, watches included; `None`: every one until
    /// [`Cloud::clear_lease_refusals`]) on this instance are answered `status` with a
    /// `Status` body: 403 Forbidden worded as the Node authorizer denies a lease
    /// (`... cannot update resource "leases" ... can only access node lease with the same
    /// name as the requesting node`), 429 TooManyRequests, 500 InternalError (etcd timed
    /// out), 503 ServiceUnavailable; other codes with an empty reason. Replaces an earlier
    /// refusal; `n == Some(0)` clears.
    pub fn refuse_leases(&self, status: u16, n: Option<usize>) {
        self.set_lease_refusal(status, n, false);
    }

    /// Like [`Cloud::refuse_leases`] for lease writes only (POST, PUT, PATCH, DELETE); gets,
    /// lists and watches are served.
    pub fn refuse_lease_writes(&self, status: u16, n: Option<usize>) {
        self.set_lease_refusal(status, n, true);
    }

    fn set_lease_refusal(&self, status: u16, n: Option<usize>, writes_only: bool) {
        lock(&self.inst.knobs).leases.refusal = (n != Some(0)).then_some(leases::Refusal {
            status,
            writes_only,
            left: n,
        });
    }

    /// Ends a lease refusal.
    pub fn clear_lease_refusals(&self) {
        lock(&self.inst.knobs).leases.refusal = None;
    }

    /// The next `n` PUTs of a named Lease on this instance answer 409 Conflict as if another
    /// writer had updated it first: the lease, if it exists, gets a new resourceVersion (same
    /// content, a MODIFIED event), so a fresh GET and a PUT with its resourceVersion succeed.
    pub fn conflict_leases(&self, n: usize) {
        lock(&self.inst.knobs).leases.conflicts = n;
    }

    /// Node `node`'s Lease (`kube-node-lease/<node>`) as the cloud holds it, if any.
    pub fn lease(&self, node: &str) -> Option<Value> {
        self.get("leases", "kube-node-lease", node)
    }

    /// `metadata.uid` of Node `node`, if it exists (what a lease's ownerReference names).
    pub fn node_uid(&self, node: &str) -> Option<String> {
        let n = self.get("nodes", "", node)?;
        n["metadata"]["uid"].as_str().map(str::to_string)
    }

    /// The recorded lease writes (POST, PUT, PATCH, DELETE on any Lease, answered or
    /// refused) whose User-Agent starts with `ua_prefix` ("" for all), oldest first.
    pub fn lease_writes(&self, ua_prefix: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| {
                leases::is_write(&r.method)
                    && r.user_agent.starts_with(ua_prefix)
                    && leases::target(&r.path).is_some()
            })
            .collect()
    }

    // ---- observation ----

    /// Records requests (true, the default) or not (for benchmarks: the log grows with
    /// every request).
    pub fn set_record_requests(&self, on: bool) {
        lock(&self.inst.knobs).record = on;
    }

    /// Every request recorded since start or the last reset, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inst.recorder.all()
    }

    /// Number of recorded requests satisfying `pred`.
    pub fn count(&self, pred: impl Fn(&RecordedRequest) -> bool) -> usize {
        self.inst.recorder.count(&pred)
    }

    /// Forgets the recorded requests.
    pub fn reset_requests(&self) {
        self.inst.recorder.reset();
    }

    /// Blocks until a recorded request satisfies `pred` (status updates count), or `None`
    /// after `timeout`.
    pub fn wait_for_request(
        &self,
        pred: impl Fn(&RecordedRequest) -> bool,
        timeout: Duration,
    ) -> Option<RecordedRequest> {
        self.inst.recorder.wait_for(&pred, timeout)
    }

    /// Open watch streams on `resource` across the cloud (peers included).
    pub fn watchers(&self, resource: &str) -> usize {
        self.inst
            .shared
            .store
            .watcher_count(Some(kind_id(resource)))
    }

    /// Blocks until at least `n` watch streams on `resource` are open; false on timeout.
    pub fn wait_for_watchers(&self, resource: &str, n: usize, timeout: Duration) -> bool {
        self.inst
            .shared
            .store
            .wait_watchers(kind_id(resource), &|c| c >= n, timeout)
    }

    /// Blocks until at most `n` watch streams on `resource` are open; false on timeout.
    pub fn wait_for_watchers_at_most(&self, resource: &str, n: usize, timeout: Duration) -> bool {
        self.inst
            .shared
            .store
            .wait_watchers(kind_id(resource), &|c| c <= n, timeout)
    }

    /// TLS connections open on this instance now.
    pub fn live_connections(&self) -> usize {
        self.inst.front.live_connections()
    }

    /// TCP connections this instance has accepted since start.
    pub fn accepted_connections(&self) -> u64 {
        self.inst.front.accepted_connections()
    }

    /// Bytes this instance has sent to its clients since start: response heads and bodies as
    /// it writes them (chunk framing included, gzip when it compressed), before TLS.
    pub fn bytes_sent(&self) -> u64 {
        self.inst.front.bytes_sent()
    }

    // ---- data (no HTTP; same resourceVersion and watch rules as HTTP writes) ----

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inst.shared.store.current_rv()
    }

    /// Drops the watch-event log up to the current resourceVersion: watches from an older
    /// resourceVersion and older continue tokens then get 410 Expired.
    pub fn compact(&self) {
        let store = &self.inst.shared.store;
        store.compact_to(store.current_rv());
    }

    /// Like [`Cloud::compact`] up to `rv`.
    pub fn compact_to(&self, rv: u64) {
        self.inst.shared.store.compact_to(rv);
    }

    /// Removes a CRD (`widgets.example.com`): its objects go, its URLs answer 404, it leaves
    /// discovery, its open watches end.
    pub fn remove_crd(&self, name: &str) {
        self.inst.shared.store.set_present(crd_id(name), false);
    }

    /// Installs a removed CRD again (with no objects).
    pub fn add_crd(&self, name: &str) {
        self.inst.shared.store.set_present(crd_id(name), true);
    }

    /// Creates an object of `resource` (`pods`, `deployments`, `widgets.example.com`, ...);
    /// the namespace comes from `metadata.namespace` (default `default`). Returns it as a
    /// get would. Panics on an API error (for example AlreadyExists).
    pub fn create(&self, resource: &str, obj: Value) -> Value {
        let id = kind_id(resource);
        let ns = obj_ns(id, &obj);
        let o = self.inst.shared.store.create(id, &ns, obj, false);
        typed(id, o, "create")
    }

    /// Replaces an object (namespace and name from its metadata); a set, stale
    /// `metadata.resourceVersion` panics with Conflict, as a PUT would answer 409.
    pub fn update(&self, resource: &str, obj: Value) -> Value {
        self.replace(resource, obj, Target::Main)
    }

    /// Replaces an object's `status` (the `/status` subresource).
    pub fn update_status(&self, resource: &str, obj: Value) -> Value {
        self.replace(resource, obj, Target::Status)
    }

    fn replace(&self, resource: &str, obj: Value, target: Target) -> Value {
        let id = kind_id(resource);
        let ns = obj_ns(id, &obj);
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let o = self
            .inst
            .shared
            .store
            .update(id, &ns, &name, obj, target, false);
        typed(id, o, "update")
    }

    /// Creates the object, or replaces it whatever its resourceVersion.
    pub fn apply(&self, resource: &str, mut obj: Value) -> Value {
        let id = kind_id(resource);
        let ns = obj_ns(id, &obj);
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if self.inst.shared.store.get(id, &ns, &name).is_err() {
            return self.create(resource, obj);
        }
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        let o = self
            .inst
            .shared
            .store
            .update(id, &ns, &name, obj, Target::Main, false);
        typed(id, o, "apply")
    }

    /// Applies a JSON merge patch to `ns/name` ("" namespace for cluster-scoped kinds).
    pub fn patch(&self, resource: &str, ns: &str, name: &str, patch: Value) -> Value {
        let id = kind_id(resource);
        let o = self
            .inst
            .shared
            .store
            .patch(id, ns, name, &patch, Target::Main, false);
        typed(id, o, "patch")
    }

    /// Deletes `ns/name`, returning its last state. Panics when it does not exist.
    pub fn delete(&self, resource: &str, ns: &str, name: &str) -> Value {
        let id = kind_id(resource);
        let o = self.inst.shared.store.delete(id, ns, name, false);
        typed(id, o, "delete")
    }

    /// The object `ns/name`, if it exists.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let id = kind_id(resource);
        self.inst
            .shared
            .store
            .get(id, ns, name)
            .ok()
            .map(|o| o.value_with_kind(&KINDS[id]))
    }

    /// Objects of `resource` in `ns` (all namespaces for `None`), in key order.
    pub fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Value> {
        let id = kind_id(resource);
        match self.inst.shared.store.list(id, ns, None, &|_| true, None) {
            Ok(page) => page
                .items
                .iter()
                .map(|o| o.value_with_kind(&KINDS[id]))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Inserts synthetic pods fast (one ADDED event each); returns the resourceVersion after.
    pub fn populate_pods(&self, fill: &PodFill) -> u64 {
        let id = kind_id("pods");
        let now = rfc3339(unix_now());
        // The JSON below is about 700 bytes before padding.
        let pad = "x".repeat(fill.body_bytes.saturating_sub(700));
        let tiers = ["frontend", "backend", "cache"];
        let prefix = &fill.prefix;
        let store = &self.inst.shared.store;
        store.insert_many(id, fill.count, &mut |i, rv| {
            let name = format!("{prefix}-{i:06}");
            let ns = format!("{prefix}-{}", i % fill.namespaces.max(1));
            let node = format!("node-{}", i % fill.nodes.max(1));
            let (app, tier) = (format!("app-{}", i % 10), tiers[i % 3]);
            let phase = if i % 10 == 9 { "Pending" } else { "Running" };
            let uid = super::util::new_uid();
            // Built with format! rather than json!: this runs 10^4 times in debug builds.
            // Every interpolated value is alphanumeric or '-', so no JSON escaping is needed.
            let body = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{now}","labels":{{"app":"{app}","tier":"{tier}","fill":"{prefix}"}},"annotations":{{"example.com/padding":"{pad}"}}}},"spec":{{"nodeName":"{node}","restartPolicy":"Always","serviceAccountName":"default","containers":[{{"name":"app","image":"registry.example.com/app:1.2.3","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}}}},"env":[{{"name":"POD_INDEX","value":"{i}"}}]}}]}},"status":{{"phase":"{phase}","podIP":"10.{}.{}.{}","conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"{now}"}}]}}}}"#,
                (i >> 16) & 255,
                (i >> 8) & 255,
                i & 255
            );
            Obj {
                rv,
                namespace: ns,
                name,
                labels: vec![
                    ("app".into(), app),
                    ("tier".into(), tier.into()),
                    ("fill".into(), prefix.clone()),
                ],
                node_name: node,
                phase: phase.into(),
                created: now.clone(),
                body,
            }
        });
        store.current_rv()
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        self.controller.take();
        self.inst.front.stop();
        self.internal_stop.store(true, Ordering::SeqCst);
        // Wakes the internal accept so it sees the stop flag.
        let _ = TcpStream::connect(self.internal);
        if let Some(t) = self.http_thread.take() {
            let _ = t.join();
        }
    }
}

fn kind_id(resource: &str) -> KindId {
    kinds::find_by_name(resource)
        .unwrap_or_else(|| panic!("the stand-in cloud has no resource {resource:?}"))
}

fn crd_id(name: &str) -> KindId {
    match kinds::find_by_name(name) {
        Some(id) if KINDS[id].crd => id,
        _ => panic!("{name:?} is not a CRD of the stand-in cloud"),
    }
}

fn obj_ns(id: KindId, obj: &Value) -> String {
    if !KINDS[id].namespaced {
        return String::new();
    }
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".into(),
    }
}

fn typed(id: KindId, o: Result<Arc<Obj>, ApiError>, what: &str) -> Value {
    match o {
        Ok(o) => o.value_with_kind(&KINDS[id]),
        Err(e) => panic!("cloud {what} of {}: {e}", KINDS[id].resource),
    }
}
