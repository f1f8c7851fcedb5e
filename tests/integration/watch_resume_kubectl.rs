//! Issue 29 with a client nobody here wrote: `kubectl get pods --watch` through the hub keeps
//! running across cloud outages. Two of them watch at once, kubectl being a cache agent
//! (`--cache-agents=kubectl`):
//!
//! - the default printer, which asks for a Table: resumed after an outage whose history is
//!   intact (the pod made during it is printed, the process lives on), but not rebuilt after
//!   one past the history (a Table is not what the cache holds): that watch then ends cleanly,
//!   with no error printed;
//! - `--output-watch-events -o json`, whose events can be checked: the same through the first
//!   outage, and after the second (`Cloud::compact` during it) the pod added and the pod
//!   deleted meanwhile are printed, from the difference against kubectl's cache, and the
//!   watch goes on.
//!
//! kubectl is expected installed, as CI installs it (tests/integration/kubectl.rs).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, lock, write_plain_kubeconfig};

/// How long the outage's events may take after the restart: the health checker's verdict
/// (1 s probes in tests), the jitter (< 5 s), for a difference the gather (1 s) and the list,
/// and slack for a loaded machine.
const CATCH_UP: Duration = Duration::from_secs(25);

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}
    })
}

/// One running `kubectl get --watch`: what it prints on stdout (parsed into `T` on a thread
/// of its own, so a silent kubectl fails the test instead of hanging it) and on stderr.
/// Killed when dropped.
struct Running<T> {
    what: &'static str,
    child: Child,
    out: Receiver<T>,
    err: Arc<Mutex<String>>,
}

impl<T: Send + std::fmt::Debug + 'static> Running<T> {
    fn spawn(what: &'static str, mut cmd: Command, parse: fn(ChildStdout, Sender<T>)) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed (Debian package kubectl; .ci/run installs it)");
        let stdout = child.stdout.take().expect("stdout was piped");
        let mut stderr = child.stderr.take().expect("stderr was piped");
        let (tx, out) = mpsc::channel();
        std::thread::spawn(move || parse(stdout, tx));
        let err = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                lock(&sink).push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Running {
            what,
            child,
            out,
            err,
        }
    }

    /// What it printed until `done` says so, that last item included; panics with kubectl's
    /// stderr and the hub's log when its output ended or `wait` passed first.
    fn read_until(&self, wait: Duration, hub: &Hub, mut done: impl FnMut(&T) -> bool) -> Vec<T> {
        let until = Instant::now() + wait;
        let mut got = Vec::new();
        loop {
            match self
                .out
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(item) => {
                    let last = done(&item);
                    got.push(item);
                    if last {
                        return got;
                    }
                }
                Err(e) => {
                    let why = match e {
                        RecvTimeoutError::Timeout => format!("nothing more within {wait:?}"),
                        RecvTimeoutError::Disconnected => "its output ended".to_owned(),
                    };
                    panic!(
                        "{}: {why}; printed {got:#?}\nstderr: {}\nhub log:\n{}",
                        self.what,
                        self.stderr(),
                        hub.logs()
                    )
                }
            }
        }
    }

    /// The process still runs and has printed nothing on stderr.
    fn assert_running_quietly(&mut self, hub: &Hub) {
        let status = self.child.try_wait().expect("kubectl's status");
        assert!(
            status.is_none() && self.stderr().is_empty(),
            "{}: exited {status:?}; stderr: {}\nhub log:\n{}",
            self.what,
            self.stderr(),
            hub.logs()
        );
    }

    fn stderr(&self) -> String {
        lock(&self.err).clone()
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// stdout line by line (the table printer).
fn lines(stdout: ChildStdout, tx: Sender<String>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { return };
        if tx.send(line).is_err() {
            return;
        }
    }
}

/// stdout as a sequence of JSON values (`--output-watch-events -o json` prints one
/// indented `{"type": …, "object": …}` per event).
fn events(stdout: ChildStdout, tx: Sender<Value>) {
    let values = serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>();
    for value in values {
        let Ok(value) = value else { return };
        if tx.send(value).is_err() {
            return;
        }
    }
}

/// (type, name) of a printed event.
fn what(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap_or_default().to_owned(),
        event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn is(event: &Value, kind: &str, name: &str) -> bool {
    what(event) == (kind.to_owned(), name.to_owned())
}

/// The printed events other than bookmarks (kubectl asks for none; none should come).
fn changes(printed: Vec<Value>) -> Vec<(String, String)> {
    printed
        .iter()
        .filter(|e| e["type"] != "BOOKMARK")
        .map(what)
        .collect()
}

#[test]
fn kubectl_get_watch_keeps_running_across_outages() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("web-1"));
    cloud.create("pods", pod("web-2"));
    let dir = TempDir::new("watch-resume-kubectl");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--cache-agents=kubectl"]));
    let kubeconfig = write_plain_kubeconfig(dir.path(), "kubectl.kubeconfig", &hub.url());
    let kubectl = |args: &[&str]| {
        let mut cmd = kubectl_command(&kubeconfig, &dir.path().join("kubectl-cache"), dir.path());
        // No client-side timeout: the watch lives until it is killed (the helper's 20 s
        // would end it in the middle of the test).
        cmd.arg("--request-timeout=0").args(args);
        cmd
    };

    let others = cloud.watchers("pods");
    let mut table = Running::spawn("table", kubectl(&["get", "pods", "--watch"]), lines);
    let mut json = Running::spawn(
        "json",
        kubectl(&[
            "get",
            "pods",
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ]),
        events,
    );
    // Each prints the pods it listed, then watches from the list's resourceVersion.
    let listed = json.read_until(CATCH_UP, &hub, |e| is(e, "ADDED", "web-2"));
    assert_eq!(
        changes(listed),
        [
            ("ADDED".into(), "web-1".into()),
            ("ADDED".into(), "web-2".into())
        ]
    );
    table.read_until(CATCH_UP, &hub, |l| l.starts_with("web-2 "));
    assert!(
        cloud.wait_for_watchers("pods", others + 2, Duration::from_secs(10)),
        "kubectl's watches never reached the cloud:\n{}",
        hub.logs()
    );
    // A pod made now is printed by both: their streams flow through the hub (a watch the
    // cloud has registered may not have had its answer's head through the hub yet).
    cloud.create("pods", pod("web-3"));
    let printed = json.read_until(CATCH_UP, &hub, |e| is(e, "ADDED", "web-3"));
    assert_eq!(changes(printed), [("ADDED".into(), "web-3".into())]);
    table.read_until(CATCH_UP, &hub, |l| l.starts_with("web-3 "));

    // An outage whose history is intact: the pod made during it is printed after it.
    cloud.stop();
    cloud.create("pods", pod("during-1"));
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "the hub never found the cloud down:\n{}",
        hub.logs()
    );
    json.assert_running_quietly(&hub);
    cloud.restart();
    let printed = json.read_until(CATCH_UP, &hub, |e| is(e, "ADDED", "during-1"));
    assert_eq!(
        changes(printed),
        [("ADDED".into(), "during-1".into())],
        "the outage's pod, once"
    );
    table.read_until(CATCH_UP, &hub, |l| l.starts_with("during-1 "));
    json.assert_running_quietly(&hub);
    table.assert_running_quietly(&hub);

    // An outage past the history: the JSON watch is given the difference against
    // kubectl's cache (the baseline: its list and the events since, during-1 included).
    assert!(
        hub.wait_cached(
            &["kubectl/pods.v1.core/default/during-1"],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    cloud.stop();
    cloud.create("pods", pod("during-2"));
    cloud.delete("pods", "default", "web-2");
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "the hub never found the cloud down:\n{}",
        hub.logs()
    );
    json.assert_running_quietly(&hub);
    cloud.compact();
    cloud.restart();
    let mut seen = Vec::new();
    let printed = json.read_until(CATCH_UP, &hub, |e| {
        if e["type"] != "BOOKMARK" {
            seen.push(what(e));
        }
        seen.contains(&("ADDED".into(), "during-2".into()))
            && seen.contains(&("DELETED".into(), "web-2".into()))
    });
    let mut printed = changes(printed);
    printed.sort();
    assert_eq!(
        printed,
        [
            ("ADDED".into(), "during-2".into()),
            ("DELETED".into(), "web-2".into())
        ],
        "the difference, and nothing for the pods that did not change"
    );
    json.assert_running_quietly(&hub);
    // The same watch goes on, from the list's resourceVersion.
    cloud.create("pods", pod("after"));
    let printed = json.read_until(CATCH_UP, &hub, |e| is(e, "ADDED", "after"));
    assert_eq!(changes(printed), [("ADDED".into(), "after".into())]);
    json.assert_running_quietly(&hub);

    // The table watch cannot be rebuilt (design §8): it ends as a watch ends, no error.
    assert!(
        eventually(CATCH_UP, || table
            .child
            .try_wait()
            .is_ok_and(|s| s.is_some())),
        "the table watch neither resumed nor ended:\n{}",
        hub.logs()
    );
    let status = table.child.wait().expect("kubectl's status");
    assert!(
        status.success() && table.stderr().is_empty(),
        "table: {status}; stderr: {}\nhub log:\n{}",
        table.stderr(),
        hub.logs()
    );
}
