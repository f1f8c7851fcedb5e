//! `make try` (examples/try.rs) driven as its banner tells a person to: kubectl through the
//! hub with the kubeconfig it wrote, the printed command that cuts the cloud, kubectl again
//! (answered from the hub's cache), the command that brings the cloud back, then Ctrl-C
//! (SIGINT), after which neither it nor the hub runs. Its folder is this test's temp dir.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::hub::{TempDir, eventually, kubectl_command, signal};

/// The try example, built for this test's profile and features into this test's target dir
/// (fresh after `make test`, which builds `--examples`; built here when run alone).
fn try_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of this test");
    // target/<profile>/deps/integration-… → target/<profile>
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "--example", "try"])
        .arg(format!(
            "--target-dir={}",
            profile.parent().expect("target/<profile>").display()
        ))
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    // What cargo sets for this test run, not for a build: some build scripts (ring's) rerun
    // when CARGO_MANIFEST_DIR or OUT_DIR changes, and everything above them would compile
    // again (a minute, and once more at the next build outside a test).
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_EXE_"]
            .iter()
            .any(|prefix| key.starts_with(prefix))
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_TARGET_TMPDIR",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
            ]
            .contains(&key.as_ref())
        {
            build.env_remove(key.as_ref());
        }
    }
    if cfg!(feature = "fuzzing") {
        build.args(["--features", "fuzzing"]);
    }
    if profile.ends_with("release") {
        build.arg("--release");
    }
    let out = build.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build --example try failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile.join("examples").join("try")
}

/// The try process; dropping it (a failed assertion) ends it and its hub.
struct Try {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    rx: Receiver<String>,
    hub_pid: Option<u32>,
}

impl Try {
    fn start(dir: &Path) -> Try {
        let mut child = Command::new(try_binary())
            .env("TRY_DIR", dir.join("try"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the try example");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel();
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        Try {
            child,
            lines,
            rx,
            hub_pid: None,
        }
    }

    /// Waits for a printed line containing `needle` (after those already waited for).
    fn wait_line(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "no line with {needle:?} within {timeout:?}; it printed:\n{}",
                    self.output()
                ),
            }
        }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The command printed after `label` in the banner.
    fn command(&self, label: &str) -> String {
        let out = self.output();
        let line = out
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"));
        line.trim().to_owned()
    }
}

impl Drop for Try {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Killed at once, the try could not end its hub.
        if let Some(pid) = self.hub_pid.filter(|&pid| running(pid)) {
            signal(pid, "KILL");
        }
    }
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Runs a printed command line as a person pasting it would, kubectl's home in `home`.
fn shell(command: &str, home: &Path) -> Output {
    Command::new("sh")
        .args(["-c", command])
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .output()
        .expect("sh runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn make_try_is_driven_by_its_printed_commands_and_ends_on_ctrl_c() {
    let dir = TempDir::new("try");
    let home = dir.path();
    let folder = dir.path().join("try");
    let mut run = Try::start(dir.path());
    run.wait_line("Ctrl-C here", Duration::from_secs(120));
    let banner = run.output();
    let hub_pid: u32 = banner
        .split(", pid ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no hub pid in:\n{banner}"));
    run.hub_pid = Some(hub_pid);
    assert!(running(hub_pid), "the hub runs:\n{banner}");

    // kubectl through the hub, exactly as printed: the five pods, read from the cloud.
    let through = run.command("kubectl through the hub:");
    let admin = folder.join("admin.kubeconfig");
    assert!(
        through.contains(&format!("--kubeconfig={}", admin.display())),
        "{through}"
    );
    let out = shell(&through, home);
    assert!(out.status.success(), "{through}: {}", text(&out));
    for pod in ["web-1", "web-2", "web-3", "db-1", "kube-proxy-edge-1"] {
        assert!(text(&out).contains(&format!("pod/{pod}")), "{}", text(&out));
    }

    // The tick configmap changes while the cloud is up; the last value read is kept.
    let kubectl = |args: &[&str]| {
        let out = kubectl_command(&admin, &home.join("kubectl-cache"), home)
            .args(args)
            .output()
            .expect("kubectl is installed (make tools)");
        (out.status.success(), text(&out))
    };
    let count = || kubectl(&["get", "configmap", "tick", "-o", "jsonpath={.data.count}"]);
    let (ok, first) = count();
    assert!(ok, "{first}");
    let mut last = first.clone();
    assert!(
        eventually(Duration::from_secs(15), || {
            let (ok, now) = count();
            if ok {
                last = now;
            }
            last != first
        }),
        "tick stayed at {first}"
    );

    // Cut, as printed: reads are answered from the cache, the tick stays where it was.
    let cut = run.command("cut the cloud:");
    let out = shell(&cut, home);
    assert!(out.status.success(), "{cut}: {}", text(&out));
    run.wait_line("the cloud is cut", Duration::from_secs(10));
    let mut offline = String::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            let (ok, out) = kubectl(&["get", "pods", "-A"]);
            offline = out;
            ok
        }),
        "offline kubectl get pods -A: {offline}"
    );
    for pod in ["web-1", "web-2", "web-3", "db-1", "kube-proxy-edge-1"] {
        assert!(offline.contains(pod), "{offline}");
    }
    // Past a tick: the cloud's data moved on, the node's answer did not.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(count(), (true, last.clone()), "the cached tick, offline");
    assert!(
        running(hub_pid),
        "the hub runs while the cloud is cut:\n{}",
        run.output()
    );

    // Back, as printed: the tick moves again through the hub.
    let back = run.command("bring it back:");
    let out = shell(&back, home);
    assert!(out.status.success(), "{back}: {}", text(&out));
    run.wait_line("the cloud is back", Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(20), || {
            let (ok, now) = count();
            ok && now != last
        }),
        "the tick did not move after the cloud came back (still {last})"
    );

    // Ctrl-C: the try and its hub end; what it wrote is in its folder.
    signal(run.child.id(), "INT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = run.child.try_wait().expect("wait for the try") {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}:\n{}", run.output());
    assert!(!running(hub_pid), "the hub outlived the try");
    assert!(run.output().contains("stopped"), "{}", run.output());
    for name in [
        "admin.kubeconfig",
        "cloud.kubeconfig",
        "hub.kubeconfig",
        "hub.log",
        "cache",
        "root",
    ] {
        assert!(folder.join(name).exists(), "{name} in {}", folder.display());
    }
    assert!(
        folder
            .join("cache/kubectl/configmaps.v1.core/default/tick")
            .exists(),
        "the hub cached kubectl's reads in the folder"
    );
}
