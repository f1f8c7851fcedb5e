//! The hub's own identity (issue 13), end to end with the real binary against the stand-in
//! cloud, which discovers, approves and signs like kube-apiserver, kube-controller-manager
//! and yurt-manager: joining by join token (pin right, pin wrong, no pin), by bootstrap
//! file, with kubelet's certificate; rotation while a watch and a list loop run through the
//! hub; the HTTPS port answering kubectl and Python; a denied CSR and an unreachable cloud
//! at first start, with cached reads still answered; `POST /v1/token`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, CsrMode, base64_encode};

const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";
const NODE_USER: &str = "system:node:edge-1";

fn join_token() -> String {
    format!("{TOKEN_ID}.{TOKEN_SECRET}")
}

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": name}})
}

/// A cloud with the test bootstrap token.
fn cloud_with_token() -> Cloud {
    let cloud = Cloud::start();
    cloud.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    cloud
}

/// Token-mode flags for `cloud` with the given extra flags.
fn join_flags(cloud: &Cloud, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        format!("--server-addr={}", cloud.url()),
        format!("--join-token={}", join_token()),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn spec(dir: &Path, args: &[String]) -> HubSpec {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    HubSpec::bootstrap(dir, &args)
}

/// The pin of `cloud`'s CA as the flag.
fn pin_flag(cloud: &Cloud) -> String {
    format!("--discovery-token-ca-cert-hash={}", cloud.ca_pin())
}

/// A hub that joins `cloud` with the join token and the right pin, once it holds its first
/// client certificate.
fn joined(cloud: &Cloud, dir: &Path) -> Hub {
    let hub = Hub::start(&spec(dir, &join_flags(cloud, &[&pin_flag(cloud)])));
    assert_first_certificate(&hub);
    hub
}

/// The hub got its first client certificate.
fn assert_first_certificate(hub: &Hub) {
    assert!(
        wait_client_certs(hub, 1.0, Duration::from_secs(30)),
        "no client certificate: {}",
        hub.logs()
    );
}

fn readyz(hub: &Hub) -> Reply {
    get(&format!("{}/readyz?verbose", hub.serve_url()), "curl/8")
}

/// Waits until the hub has put a client certificate to use (the metric counts them).
fn wait_client_certs(hub: &Hub, n: f64, timeout: Duration) -> bool {
    hub.wait_metric_at_least("tinyhub_client_certificate_rotations_total", n, timeout)
}

/// Runs kubectl with `args` in namespace default, a fresh home and no ambient kubeconfig:
/// its output, once it succeeded.
fn kubectl(home: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .args(["-n", "default"])
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kubelet's client certificate and key (`system:node:edge-1`) as files under `dir`, as its
/// kubeconfig would name them.
fn kubelet_cert_files(cloud: &Cloud, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let kubelet = cloud.issue_client(NODE_USER, &["system:nodes"]);
    let (cert, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    std::fs::write(&cert, &kubelet.pair.cert_pem).unwrap();
    std::fs::write(&key, &kubelet.pair.key_pem).unwrap();
    (cert, key)
}

/// Python's own HTTPS client reads configmap `default/settings` from `addr`, trusting only
/// `ca`, presenting kubelet's client certificate `(cert, key)` (only the node is lent the
/// node's identity on the HTTPS port), as the component `ua` names: its status and `data.k`.
fn python_get_setting(
    addr: std::net::SocketAddr,
    ca: &Path,
    (cert, key): (&Path, &Path),
    ua: &str,
) -> String {
    let script = format!(
        "import http.client, json, ssl\n\
         ctx = ssl.create_default_context(cafile={ca:?})\n\
         ctx.load_cert_chain({cert:?}, {key:?})\n\
         c = http.client.HTTPSConnection('{}', {}, context=ctx)\n\
         c.request('GET', '/api/v1/namespaces/default/configmaps/settings', headers={{'User-Agent': {ua:?}}})\n\
         r = c.getresponse()\n\
         print(r.status, json.loads(r.read())['data']['k'])\n",
        addr.ip(),
        addr.port(),
        ca = ca.display().to_string(),
        cert = cert.display().to_string(),
        key = key.display().to_string(),
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn joins_by_join_token_with_the_right_pin() {
    let cloud = cloud_with_token();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("join-pin");
    let started = Instant::now();
    let hub = joined(&cloud, dir.path());
    eprintln!(
        "time from start to the first client certificate: {:?}",
        started.elapsed()
    );
    reads_as_the_node(&cloud, &hub, "settings");

    // The files YurtHub writes, private.
    let root = dir.path().join("root");
    for file in [
        "bootstrap-hub.conf",
        "yurthub.conf",
        "pki/ca.crt",
        "pki/yurthub-current.pem",
    ] {
        let path = root.join(file);
        assert!(path.exists(), "{file} missing");
        assert_eq!(mode_of(&path), 0o600, "{file}");
    }
    let boot = std::fs::read_to_string(root.join("bootstrap-hub.conf")).unwrap();
    assert!(boot.contains(&join_token()) && boot.contains("token-bootstrap-client"));
    let conf = std::fs::read_to_string(root.join("yurthub.conf")).unwrap();
    assert!(conf.contains(&root.join("pki/yurthub-current.pem").display().to_string()));
    // kubectl reads the kubeconfig the hub wrote for itself.
    let kubeconfig = root.join("yurthub.conf").display().to_string();
    let out = kubectl(
        dir.path(),
        &[
            "--kubeconfig",
            &kubeconfig,
            "get",
            "configmap",
            "settings",
            "-o",
            "name",
        ],
    );
    assert_eq!(out.trim(), "configmap/settings");

    // The CSR: YurtHub's signer, subject and usages, approved.
    let csrs = cloud.csrs();
    let client = csrs
        .iter()
        .find(|c| c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client")
        .expect("a client CSR");
    assert_eq!(client["spec"]["username"], "system:bootstrap:abcdef");

    // The serving certificate followed, and readyz is happy.
    assert!(
        hub.wait_https(Duration::from_secs(30)).is_some(),
        "{}",
        hub.logs()
    );
    assert!(eventually(Duration::from_secs(10), || readyz(&hub).status == 200));
}

#[test]
fn a_wrong_pin_refuses_the_cluster_and_says_why() {
    let cloud = cloud_with_token();
    let dir = TempDir::new("join-wrong-pin");
    let wrong = format!("--discovery-token-ca-cert-hash=sha256:{}", "ab".repeat(32));
    let hub = Hub::start(&spec(dir.path(), &join_flags(&cloud, &[&wrong])));
    assert!(
        hub.wait_log_line(|l| l.contains("pin"), Duration::from_secs(30)),
        "{}",
        hub.logs()
    );
    let r = readyz(&hub);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("[-]certificates"), "{}", r.text());
    assert!(
        cloud.csrs().is_empty(),
        "no CSR from a cluster it does not trust"
    );
    assert!(!dir.path().join("root/bootstrap-hub.conf").exists());
}

#[test]
fn a_join_token_without_a_pin_needs_the_unsafe_flag() {
    let cloud = cloud_with_token();
    let dir = TempDir::new("join-no-pin");
    let out = hub_command()
        .args(join_flags(&cloud, &[]))
        .arg("--node-name=edge-1")
        .arg(format!("--root-dir={}", dir.path().join("root").display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--discovery-token-ca-cert-hash"), "{err}");

    let flags = join_flags(&cloud, &["--discovery-token-unsafe-skip-ca-verification"]);
    let hub = Hub::start(&spec(dir.path(), &flags));
    assert_first_certificate(&hub);
}

#[test]
fn joins_by_bootstrap_file() {
    let cloud = cloud_with_token();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("join-file");
    let file = dir.path().join("bootstrap-hub.conf");
    cloud.write_bootstrap_kubeconfig(&file, &join_token());
    let hub = Hub::start(&spec(
        dir.path(),
        &[format!("--bootstrap-file={}", file.display())],
    ));
    assert_first_certificate(&hub);
    reads_as_the_node(&cloud, &hub, "settings");
    assert!(dir.path().join("root/pki/ca.crt").exists());
}

#[test]
fn kubelet_certificate_mode_follows_kubelets_rotation() {
    let cloud = Cloud::start();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("kubelet-mode");
    let kubelet = dir.path().join("kubelet");
    // The first certificate lives only a few seconds: the hub must move on before it ends.
    let files = cloud.write_kubelet_credentials(&kubelet, "edge-1", Duration::from_secs(4));
    let hub = Hub::start(&spec(
        dir.path(),
        &[
            "--bootstrap-mode=kubeletcertificate".to_owned(),
            format!("--kubelet-kubeconfig={}", files.kubeconfig.display()),
            format!("--kubelet-ca-file={}", files.ca.display()),
            format!("--kubelet-client-certificate={}", files.cert.display()),
        ],
    ));
    reads_as_the_node(&cloud, &hub, "settings");
    cloud.write_kubelet_credentials(&kubelet, "edge-1", Duration::from_secs(3600));
    assert!(
        wait_client_certs(&hub, 2.0, Duration::from_secs(20)),
        "{}",
        hub.logs()
    );
    std::thread::sleep(Duration::from_secs(5));
    // The first certificate has expired: only the new one opens connections now.
    reads_as_the_node(&cloud, &hub, "settings");
    assert!(hub.wait_log("kubelet rotated its certificate", Duration::from_secs(1)));
}

#[test]
fn rotation_under_a_watch_and_a_list_loop_fails_no_request() {
    let cloud = cloud_with_token();
    cloud.set_csr_lifetime(Duration::from_secs(6));
    let dir = TempDir::new("rotation");
    let hub = joined(&cloud, dir.path());

    let (status, body) = stream(
        &format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=60",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(status, 200);
    let seen = Arc::new(AtomicUsize::new(0));
    {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            for line in BufReader::new(body).lines().map_while(Result::ok) {
                if line.contains("\"ADDED\"") {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (lists, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let looper = {
        let (stop, lists, failures, url) = (
            Arc::clone(&stop),
            Arc::clone(&lists),
            Arc::clone(&failures),
            format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let r = get(&url, KUBELET);
                lists.fetch_add(1, Ordering::SeqCst);
                if r.status != 200 || r.header("x-tinyhub-offline").is_some() {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Three lifetimes: at least two renewals at 70–90 % of six seconds.
    let mut created = 0;
    let until = Instant::now() + Duration::from_secs(18);
    while Instant::now() < until {
        created += 1;
        cloud.create("configmaps", configmap(&format!("c{created}")));
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::SeqCst);
    looper.join().unwrap();
    let rotations = hub
        .metric("tinyhub_client_certificate_rotations_total")
        .unwrap_or(0.0);
    eprintln!(
        "rotation test: {} lists, {} failed, {created} configmaps created, {} watch events, {rotations} client certificates",
        lists.load(Ordering::SeqCst),
        failures.load(Ordering::SeqCst),
        seen.load(Ordering::SeqCst)
    );
    assert!(
        rotations >= 3.0,
        "first certificate and two renewals: {rotations}"
    );
    assert_eq!(failures.load(Ordering::SeqCst), 0, "{}", hub.logs());
    assert!(
        eventually(Duration::from_secs(5), || seen.load(Ordering::SeqCst)
            >= created),
        "the watch kept delivering: {} of {created}",
        seen.load(Ordering::SeqCst)
    );
}

/// The cloud CA as a file, for kubectl and Python.
fn ca_file(cloud: &Cloud, dir: &Path) -> std::path::PathBuf {
    let path = dir.join("cluster-ca.crt");
    std::fs::write(&path, cloud.ca_pem()).unwrap();
    path
}

#[test]
fn the_https_port_answers_kubectl_and_python() {
    let cloud = Cloud::start();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("https");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    let ca = ca_file(&cloud, dir.path());
    let server = format!("https://{addr}");
    // kubelet's kind of kubeconfig: the cluster CA and its own client certificate, which
    // makes it the node on this port (it goes upstream with the hub's identity).
    let kubelet = cloud.issue_client(NODE_USER, &["system:nodes"]);
    let kubeconfig = dir.path().join("https.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: kubelet\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: hub\n  context: {{cluster: hub, user: kubelet}}\ncurrent-context: hub\n",
            ca.display(),
            base64_encode(kubelet.pair.cert_pem.as_bytes()),
            base64_encode(kubelet.pair.key_pem.as_bytes()),
        ),
    )
    .unwrap();

    let kubeconfig = kubeconfig.display().to_string();
    let get = ["get", "configmap", "settings", "-o", "jsonpath={.data.k}"];
    let out = kubectl(
        dir.path(),
        &[&["--kubeconfig", &kubeconfig][..], &get].concat(),
    );
    assert_eq!(out, "settings");

    // A client's own bearer token goes upstream, as on the plain port.
    cloud.add_token("pod-token", "system:serviceaccount:default:app");
    let ca_path = ca.display().to_string();
    let with_token = [
        "--server",
        &server,
        "--certificate-authority",
        &ca_path,
        "--token",
        "pod-token",
    ];
    kubectl(
        dir.path(),
        &[&with_token[..], &["get", "configmaps", "-o", "name"]].concat(),
    );
    assert!(
        cloud
            .requests()
            .iter()
            .any(|q| q.bearer_token.as_deref() == Some("pod-token"))
    );

    let (cert, key) = kubelet_cert_files(&cloud, dir.path());
    assert_eq!(
        python_get_setting(addr, &ca, (&cert, &key), "python-urllib"),
        "200 settings"
    );
}

#[test]
fn a_restart_uses_the_stored_certificates_even_offline() {
    let cloud = cloud_with_token();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("restart");
    let hub = joined(&cloud, dir.path());
    assert!(
        hub.wait_https(Duration::from_secs(30)).is_some(),
        "{}",
        hub.logs()
    );
    reads_as_the_node(&cloud, &hub, "settings");
    hub.wait_cache_quiet();
    let csrs = cloud.csrs().len();

    cloud.stop();
    let hub = hub.restart();
    // Ready on the stored client certificate; the HTTPS port open on the stored serving
    // one, answering from the cache.
    assert!(
        eventually(Duration::from_secs(10), || readyz(&hub).status == 200),
        "{}",
        readyz(&hub).text()
    );
    let addr = hub
        .wait_https(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    let (cert, key) = kubelet_cert_files(&cloud, dir.path());
    assert_eq!(
        python_get_setting(addr, &ca_file(&cloud, dir.path()), (&cert, &key), KUBELET),
        "200 settings"
    );

    // Back online as the node, with no new CSR.
    cloud.restart();
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(20)));
    reads_as_the_node(&cloud, &hub, "settings");
    assert_eq!(
        cloud.csrs().len(),
        csrs,
        "no certificate was requested again"
    );
}

#[test]
fn a_denied_csr_is_said_and_cached_reads_go_on() {
    let cloud = cloud_with_token();
    cloud.create("configmaps", configmap("settings"));
    cloud.set_csr_lifetime(Duration::from_secs(5));
    let dir = TempDir::new("denied");
    let hub = joined(&cloud, dir.path());
    let path = "/api/v1/namespaces/default/configmaps/settings";
    assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    hub.wait_cache_quiet();
    cloud.set_csr_mode(CsrMode::Deny);
    assert!(
        hub.wait_log_line(
            |l| l.to_lowercase().contains("denied"),
            Duration::from_secs(30)
        ),
        "{}",
        hub.logs()
    );
    // The certificate runs out; the cloud refuses the hub; the cache still answers.
    assert!(eventually(Duration::from_secs(20), || {
        let r = readyz(&hub);
        r.status == 503 && r.text().to_lowercase().contains("denied")
    }));
    let r = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["k"], "settings");
}

#[test]
fn an_unreachable_cloud_at_first_start_leaves_cached_reads() {
    let cloud = cloud_with_token();
    cloud.create("configmaps", configmap("settings"));
    let dir = TempDir::new("first-start-offline");
    // An earlier hub (a kubeconfig one) filled the cache.
    {
        let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
        let path = "/api/v1/namespaces/default/configmaps/settings";
        assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
        hub.wait_cache_quiet();
    }
    cloud.stop();
    let hub = Hub::start(&spec(dir.path(), &join_flags(&cloud, &[&pin_flag(&cloud)])));
    assert!(
        hub.wait_log_line(
            |l| l.contains("cluster-info") || l.contains("discover"),
            Duration::from_secs(30)
        ),
        "{}",
        hub.logs()
    );
    let r = readyz(&hub);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("[-]certificates"), "{}", r.text());
    let r = get(
        &format!(
            "{}/api/v1/namespaces/default/configmaps/settings",
            hub.url()
        ),
        KUBELET,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["k"], "settings");
}

#[test]
fn post_v1_token_brings_back_a_node_whose_certificate_and_token_expired() {
    let cloud = cloud_with_token();
    cloud.set_csr_lifetime(Duration::from_secs(4));
    let dir = TempDir::new("v1-token");
    let hub = joined(&cloud, dir.path());
    // Renewals are refused until the certificate has run out, and the old token is gone.
    cloud.set_csr_mode(CsrMode::Deny);
    assert!(eventually(Duration::from_secs(15), || readyz(&hub)
        .text()
        .contains("has expired")));
    cloud.remove_bootstrap_token(TOKEN_ID);

    let url = format!("{}/v1/token", hub.serve_url());
    let post = |body: &str| call("POST", &url, "curl/8", &[], Some(body.as_bytes()));
    assert_eq!(post("not json").status, 400);
    assert_eq!(post(r#"{"jointoken": ""}"#).status, 400);
    // A token the cluster does not know: discovery finds no signature for it.
    assert_eq!(
        post(r#"{"jointoken": "zzzzzz.zzzzzzzzzzzzzzzz"}"#).status,
        500
    );

    cloud.add_bootstrap_token("fedcba", "fedcba9876543210");
    cloud.set_csr_mode(CsrMode::Rules);
    let r = post(r#"{"jointoken": "fedcba.fedcba9876543210"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let boot = std::fs::read_to_string(dir.path().join("root/bootstrap-hub.conf")).unwrap();
    assert!(boot.contains("fedcba.fedcba9876543210"), "{boot}");
    // The hub asks at once with the new token, and is ready again.
    assert!(
        eventually(Duration::from_secs(15), || cloud
            .csrs()
            .iter()
            .any(|c| c["spec"]["username"] == "system:bootstrap:fedcba")),
        "{}",
        hub.logs()
    );
    assert!(
        eventually(Duration::from_secs(15), || readyz(&hub).status == 200),
        "{}",
        readyz(&hub).text()
    );
}
