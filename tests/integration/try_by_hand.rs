//! `make try` (examples/try.rs) driven as its banner tells a person to: kubectl through the
//! hub with the kubeconfig it wrote, the printed command that cuts the cloud, kubectl again
//! (answered from the hub's cache), the command that brings the cloud back, then Ctrl-C
//! (SIGINT), after which neither it nor the hub runs. Its folder is this test's temp dir. And
//! `make demo` (examples/demo.rs), run to its end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::hub::{TempDir, eventually, kubectl_command, pid_running, signal};

/// The example `name`, built for this test's profile and features into this test's target dir
/// (fresh after `make test`, which builds `--examples`; built here when run alone).
fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the path of this test");
    // target/<profile>/deps/integration-… → target/<profile>
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "--example", name])
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
        "cargo build --example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile.join("examples").join(name)
}

/// The try example's command with `TRY_DIR=folder`.
fn try_command(folder: &Path) -> Command {
    let mut cmd = Command::new(example_binary("try"));
    cmd.env("TRY_DIR", folder);
    cmd
}

/// Runs a try on `folder` that is expected to refuse at once: whether it ended (with failure)
/// within 60 s, and what it said. One still running then (it did not refuse) is killed.
fn refused_try(folder: &Path) -> (bool, String) {
    let mut child = try_command(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a try");
    let ended = eventually(Duration::from_secs(60), || {
        child.try_wait().is_ok_and(|s| s.is_some())
    });
    if !ended {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("the try's output");
    (ended && !out.status.success(), text(&out))
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
        let mut child = try_command(&dir.join("try"))
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
        if let Some(pid) = self.hub_pid.filter(|&pid| pid_running(pid)) {
            signal(pid, "KILL");
        }
    }
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
    assert!(pid_running(hub_pid), "the hub runs:\n{banner}");

    // A second try on the same folder is refused, and the first hub's files stay.
    let (refused, said) = refused_try(&folder);
    assert!(refused && said.contains("another try runs in"), "{said}");
    assert!(folder.join("root").exists() && folder.join("hub.kubeconfig").exists());
    assert!(
        pid_running(hub_pid),
        "the hub runs after a second try was refused"
    );

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
        pid_running(hub_pid),
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
    assert!(!pid_running(hub_pid), "the hub outlived the try");
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

/// A folder that holds a `cache` or `root` no try made (say `TRY_DIR=$HOME`) is refused and
/// left as it was; a try's own folder is cleared at the next try.
#[test]
fn make_try_leaves_a_folder_it_did_not_make_alone() {
    let dir = TempDir::new("try-theirs");
    let folder = dir.path().join("home");
    std::fs::create_dir_all(folder.join("cache")).expect("mkdir");
    std::fs::write(folder.join("cache/keep"), "mine").expect("write");
    std::fs::create_dir_all(folder.join("root")).expect("mkdir");
    let (refused, said) = refused_try(&folder);
    assert!(refused && said.contains("not a try's folder"), "{said}");
    assert_eq!(
        std::fs::read_to_string(folder.join("cache/keep"))
            .ok()
            .as_deref(),
        Some("mine")
    );
    assert!(folder.join("root").is_dir());
}

/// `make demo` runs its story to the end: reads online, the cloud cut, the same reads from the
/// cache, the cloud back (the demo asserts each step itself and stops at the first that fails).
#[test]
fn make_demo_runs_to_its_end() {
    let out = Command::new(example_binary("demo"))
        .output()
        .expect("run the demo example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("the hub served the same reads online and offline"),
        "{stdout}"
    );
}
