//! Issue 31 item 1: `kubectl exec` and `kubectl port-forward`, the streaming requests a node's
//! pods make. First kubectl against the stand-in cloud directly, which proves its
//! remotecommand and port-forward ends (`the_stand_in_*`); then the same through the hub, as
//! the node on the plain port and as a pod with its token on the HTTPS port.
//!
//! kubectl 1.32 speaks WebSocket by default; `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` and
//! `KUBECTL_PORT_FORWARD_WEBSOCKETS=false` make it speak SPDY, as kubectl did before 1.30
//! (exec) and 1.31 (port-forward), and as it does when the WebSocket upgrade is refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Auth, Cloud, KubeconfigOptions, RecordedRequest, write_plain_kubeconfig};

/// kubectl's two switches back to SPDY.
const EXEC_SPDY: (&str, &str) = ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
const PORT_FORWARD_SPDY: (&str, &str) = ("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");

/// Pod `default/web-1` on `edge-1`, running (kubectl checks the phase first).
fn running_pod(cloud: &Cloud) {
    let mut pod = cloud.create(
        "pods",
        json!({"metadata": {"name": "web-1", "namespace": "default"},
               "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "nginx"}]}}),
    );
    pod["status"] = json!({"phase": "Running"});
    cloud.update_status("pods", pod);
}

/// kubectl ≥ 1.31, which port-forwards over WebSocket: beside a version dispatcher (which
/// would run the 1.30 the stand-in reports) its `kubectl.1.32` or `kubectl.1.31`, else
/// `kubectl` itself.
fn kubectl_program() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|k| k.exists());
    found
        .and_then(|k| std::fs::canonicalize(k).ok())
        .and_then(|k| {
            ["kubectl.1.32", "kubectl.1.31"]
                .iter()
                .map(|v| k.with_file_name(v))
                .find(|v| v.exists())
        })
        .unwrap_or_else(|| "kubectl".into())
}

/// kubectl with `kubeconfig`, a home in `dir` and `env`, as `kubectl_command` runs it.
fn kubectl(kubeconfig: &Path, dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(kubectl_program());
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!(
            "--cache-dir={}",
            dir.join("kubectl-cache").display()
        ))
        .env("HOME", dir)
        .env_remove("KUBECONFIG")
        .envs(env.iter().copied());
    cmd
}

/// Bytes of every value, more than one WebSocket or SPDY frame's worth.
fn payload() -> Vec<u8> {
    (0..100_000u32).map(|i| (i % 251) as u8).collect()
}

/// Runs `kubectl exec -i web-1 -- cat` with `input` on stdin (no `-i` for `None`): its
/// stdout, once it succeeded within 60 s.
fn exec_cat(cmd: Command, input: Option<Vec<u8>>) -> Vec<u8> {
    let mut cmd = cmd;
    let interactive = if input.is_some() { "-i" } else { "-i=false" };
    let mut child = cmd
        .args(["exec", interactive, "web-1", "-n", "default", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed (Debian package kubectl; .ci/run installs it)");
    let mut stdin = child.stdin.take().unwrap();
    let writer = thread::spawn(move || stdin.write_all(&input.unwrap_or_default()));
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let status = wait(&mut child, Duration::from_secs(60));
    let _ = writer.join();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.is_some_and(|s| s.success()),
        "kubectl exec: {status:?}: {}",
        String::from_utf8_lossy(&err)
    );
    out
}

/// Reads `r` to its end on a thread of its own.
fn reader(mut r: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut all = Vec::new();
        let _ = r.read_to_end(&mut all);
        all
    })
}

/// The child's exit within `timeout`, or `None` (then it is killed).
fn wait(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A running `kubectl port-forward pod/web-1 :8080` and the local port it listens on.
struct PortForward(Child, u16);

impl PortForward {
    fn start(cmd: Command) -> PortForward {
        let mut cmd = cmd;
        let mut child = cmd
            .args(["port-forward", "-n", "default", "pod/web-1", ":8080"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed");
        let err = reader(child.stderr.take().unwrap());
        // "Forwarding from 127.0.0.1:<port> -> 8080" once it listens.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines
            .find_map(|l| {
                let l = l.ok()?;
                let rest = l.strip_prefix("Forwarding from 127.0.0.1:")?;
                rest.split(' ').next()?.parse().ok()
            })
            .unwrap_or_else(|| {
                let _ = child.kill();
                let err = err.join().unwrap_or_default();
                panic!("kubectl port-forward: {}", String::from_utf8_lossy(&err))
            });
        // It says "Handling connection for 8080" on each one: keep its stdout open.
        thread::spawn(move || lines.for_each(drop));
        PortForward(child, port)
    }

    /// Sends the payload through one local connection and reads as much back.
    fn echo(&self) -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", self.1)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let sent = payload();
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || w.write_all(&sent));
        let mut back = vec![0u8; payload().len()];
        let read = s.read_exact(&mut back);
        let _ = writer.join();
        read.map(|()| back).unwrap_or_default()
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// kubectl with `kubeconfig` round-trips the payload through exec and port-forward (two
/// connections), over WebSocket, then SPDY; the cloud saw each upgrade once: its requests.
fn assert_streams_round_trip(cloud: &Cloud, kubeconfig: &Path, dir: &Path) -> Vec<RecordedRequest> {
    for env in [&[][..], &[EXEC_SPDY]] {
        assert!(
            exec_cat(kubectl(kubeconfig, dir, env), Some(payload())) == payload(),
            "exec {env:?}"
        );
    }
    for env in [&[][..], &[PORT_FORWARD_SPDY]] {
        let forward = PortForward::start(kubectl(kubeconfig, dir, env));
        assert!(forward.echo() == payload(), "port-forward {env:?}");
        assert!(forward.echo() == payload(), "a second connection, {env:?}");
    }
    let requests = cloud.requests();
    let methods = |what: &str| -> Vec<&str> {
        let upgrades = requests.iter().filter(|q| q.path.ends_with(what));
        upgrades.map(|q| q.method.as_str()).collect()
    };
    // GET: a WebSocket; POST: SPDY.
    assert_eq!(methods("/exec"), ["GET", "POST"]);
    assert_eq!(methods("/portforward"), ["GET", "POST"]);
    let upgrades = requests
        .into_iter()
        .filter(|q| q.path.ends_with("/exec") || q.path.ends_with("/portforward"));
    upgrades.collect()
}

#[test]
fn the_stand_in_answers_kubectl_exec_and_port_forward() {
    let cloud = Cloud::start();
    running_pod(&cloud);
    let dir = TempDir::new("streams-stand-in");
    cloud.add_token("admin-token", "kubernetes-admin");
    let kubeconfig = cloud.write_kubeconfig(dir.path(), Auth::Token("admin-token".into()));
    assert_streams_round_trip(&cloud, &kubeconfig, dir.path());
    // With no stdin, its `cat` ends at once.
    for env in [&[][..], &[EXEC_SPDY]] {
        let out = exec_cat(kubectl(&kubeconfig, dir.path(), env), None);
        assert!(out.is_empty(), "exec with no stdin {env:?}");
    }
}

#[test]
fn kubectl_exec_and_port_forward_pass_the_plain_port_as_the_node() {
    let cloud = Cloud::start();
    running_pod(&cloud);
    let dir = TempDir::new("streams-plain");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let kubeconfig = write_plain_kubeconfig(dir.path(), "hub.kubeconfig", &hub.url());
    for q in assert_streams_round_trip(&cloud, &kubeconfig, dir.path()) {
        assert_eq!(
            q.client_cert_cn.as_deref(),
            Some("system:node:edge-1"),
            "{}",
            hub.logs()
        );
        assert_eq!(q.bearer_token, None);
    }
}

#[test]
fn kubectl_exec_and_port_forward_pass_the_https_port_with_a_pod_token() {
    let cloud = Cloud::start();
    running_pod(&cloud);
    cloud.add_token("pod-token", "system:serviceaccount:default:app");
    let dir = TempDir::new("streams-https");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    // A pod's kubeconfig: the cluster CA (which signs the hub's serving certificate) and its
    // service account token.
    let kubeconfig = cloud.write_kubeconfig(
        dir.path(),
        KubeconfigOptions {
            name: "pod.kubeconfig".into(),
            server: Some(format!("https://{addr}")),
            ..Auth::Token("pod-token".into()).into()
        },
    );
    for q in assert_streams_round_trip(&cloud, &kubeconfig, dir.path()) {
        assert_eq!(
            q.bearer_token.as_deref(),
            Some("pod-token"),
            "{}",
            hub.logs()
        );
        assert_eq!(q.client_cert_cn, None, "the pod's own credentials only");
    }
}
