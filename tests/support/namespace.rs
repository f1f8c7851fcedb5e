//! One test of the integration binary re-run inside new Linux namespaces (util-linux's
//! `unshare`), so that it may make interfaces, take YurtHub's fixed ports and mount over
//! system paths without touching the machine; and the mounts such a test makes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the ignored test `name` (`module::test`) of this binary under `unshare` with the
/// namespace flags `namespaces` (`-n`, `-m`, `-r`), `marker` set in its environment, and
/// asserts that it passed. Returns false, having said SKIPPED, when this process may not
/// make the namespaces (then nothing of the machine was touched either).
pub fn run_test_in_namespaces(namespaces: &[&str], name: &str, marker: &str) -> bool {
    let out = Command::new("unshare")
        .args(namespaces)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(marker, "1")
        .output()
        .expect("util-linux's `unshare` (make tools)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.starts_with("unshare:") {
        eprintln!(
            "SKIPPED: {name} did not run: this process may not create namespaces {namespaces:?} ({})",
            stderr.trim()
        );
        return false;
    }
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{stderr}"
    );
    true
}

/// The start of a test [`run_test_in_namespaces`] runs: checks that `marker` is set (the
/// test is not run by hand outside the namespaces, where it would touch the machine) and
/// brings up the new network namespace's `lo`, which starts down.
pub fn enter_child(marker: &str) {
    assert!(
        std::env::var_os(marker).is_some(),
        "run by run_test_in_namespaces, never outside the namespaces"
    );
    ip(&["link", "set", "lo", "up"]);
}

/// Whether this process runs as root (`unshare -r` maps a user to root in a namespace).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `mount ARGS`, in this process's mount namespace; a panic with its stderr on failure.
pub fn mount(args: &[&str]) {
    run_tool("mount", "util-linux's `mount`", args);
}

/// Puts `source` at `target` in this (private) mount namespace. A `target` that does not
/// exist is made in an overlay of its parent whose changes live in `scratch` (a directory
/// of its own for each call), so the machine's `/etc` or `/var/lib` never changes. The
/// mounts go when the value is dropped, so the directories they cover can be removed.
pub fn bind_over(source: &Path, target: &Path, scratch: &Path) -> Mounts {
    let mut mounts = Mounts(Vec::new());
    if !target.exists() {
        let parent = target.parent().expect("an absolute path below /");
        // tmpfs: an overlay's upper directory may not be on an overlay (as /tmp in a container is).
        std::fs::create_dir_all(scratch).unwrap();
        mount(&[
            "-t",
            "tmpfs",
            "tinyhub-test",
            &scratch.display().to_string(),
        ]);
        mounts.0.push(scratch.to_owned());
        let (upper, work) = (scratch.join("upper"), scratch.join("work"));
        std::fs::create_dir(&upper).unwrap();
        std::fs::create_dir(&work).unwrap();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            parent.display(),
            upper.display(),
            work.display()
        );
        mount(&[
            "-t",
            "overlay",
            "overlay",
            "-o",
            &options,
            &parent.display().to_string(),
        ]);
        mounts.0.push(parent.to_owned());
        std::fs::create_dir(target).unwrap();
    }
    mount(&[
        "--bind",
        &source.display().to_string(),
        &target.display().to_string(),
    ]);
    mounts.0.push(target.to_owned());
    mounts
}

/// Mount points, unmounted in reverse order when dropped.
pub struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for point in self.0.iter().rev() {
            // A failure leaves the mount to the namespace's end; the test has its answer.
            let _ = Command::new("umount").arg(point).status();
        }
    }
}

/// `ip ARGS` in this network namespace; its stdout, or a panic with its stderr.
pub fn ip(args: &[&str]) -> String {
    run_tool("ip", "iproute2's `ip` (make tools)", args)
}

/// `program ARGS` (`what` names its package); its stdout, or a panic with its stderr.
fn run_tool(program: &str, what: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(what);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
