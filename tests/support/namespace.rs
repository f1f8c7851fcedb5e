//! One test of the integration binary re-run inside new Linux namespaces (util-linux's
//! `unshare`), so that it may make interfaces, take YurtHub's fixed ports and mount over
//! system paths without touching the machine; and the mounts such a test makes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

// The unit tests' re-run of one ignored test, shared so both run their children alike.
#[path = "../../src/child_test.rs"]
mod child_test;

/// Set to `1` (CI does, running as root), a refused `unshare` fails the test instead of
/// skipping it, so a green run means the namespaced tests did run.
pub const REQUIRE_NAMESPACES: &str = "TINYHUB_REQUIRE_NAMESPACES";

/// Runs the ignored test `name` (`module::test`) of this binary under `unshare` with the
/// namespace flags `namespaces` (`-n`, `-m`, `-r`), `marker` set in its environment, and
/// asserts that it passed. Returns false, having said SKIPPED, when this process may not
/// make the namespaces (then nothing of the machine was touched either), unless
/// [`REQUIRE_NAMESPACES`] is `1`: then that is a failure naming the reason.
pub fn run_test_in_namespaces(namespaces: &[&str], name: &str, marker: &str) -> bool {
    let wrap: Vec<&str> = std::iter::once("unshare")
        .chain(namespaces.iter().copied())
        .collect();
    let out = child_test::output(name, &wrap, (marker, OsStr::new("1")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.starts_with("unshare:") {
        let why = format!(
            "{name} did not run: this process may not create namespaces {namespaces:?} ({})",
            stderr.trim()
        );
        assert!(
            std::env::var_os(REQUIRE_NAMESPACES).is_none_or(|v| v != "1"),
            "{why}; {REQUIRE_NAMESPACES}=1 requires them"
        );
        eprintln!("SKIPPED: {why}");
        return false;
    }
    eprint!("{}", child_test::assert_passed(&out));
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
    run_tool("mount", args).unwrap_or_else(|e| panic!("{e} (util-linux's `mount`)"));
}

/// Puts `source` at `target` in this (private) mount namespace. A `target` that does not
/// exist is made in an overlay of its parent whose changes live in `scratch` (a directory
/// of its own for each call), so the machine's `/etc` or `/var/lib` never changes; the mounts
/// inside the parent (a container's `/etc/hosts`, `/etc/resolv.conf`) are bound back over
/// the overlay, which would show the files under them. The mounts go when the value is
/// dropped, so the directories they cover can be removed. tests/untouched.sh does the same.
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
        let (upper, work, kept) = (
            scratch.join("upper"),
            scratch.join("work"),
            scratch.join("kept"),
        );
        std::fs::create_dir(&upper).unwrap();
        std::fs::create_dir(&work).unwrap();
        std::fs::create_dir(&kept).unwrap();
        // Each mount inside the parent, kept aside (with those below it) before the overlay
        // covers it.
        let subs = submounts(parent);
        for (n, sub) in subs.iter().enumerate() {
            let aside = kept.join(n.to_string());
            if sub.is_dir() {
                std::fs::create_dir(&aside).unwrap();
            } else {
                std::fs::write(&aside, "").unwrap();
            }
            mount(&[
                "--rbind",
                &sub.display().to_string(),
                &aside.display().to_string(),
            ]);
            mounts.0.push(aside);
        }
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
        for (n, sub) in subs.iter().enumerate() {
            let aside = kept.join(n.to_string());
            // The overlay shows what lay under the mount, if anything: made where missing.
            if aside.is_dir() {
                std::fs::create_dir_all(sub).unwrap();
            } else if !sub.exists() {
                std::fs::create_dir_all(sub.parent().expect("below the parent")).unwrap();
                std::fs::write(sub, "").unwrap();
            }
            mount(&[
                "--rbind",
                &aside.display().to_string(),
                &sub.display().to_string(),
            ]);
            mounts.0.push(sub.clone());
        }
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

/// The mount points below `dir` (not `dir` itself) none of whose parents below `dir` is one
/// too, as findmnt lists them: each bound with `--rbind` brings those below it.
fn submounts(dir: &Path) -> Vec<PathBuf> {
    let listed = run_tool("findmnt", &["-rn", "-o", "TARGET"])
        .unwrap_or_else(|e| panic!("{e} (util-linux's `findmnt`)"));
    let mut points: Vec<PathBuf> = listed
        .lines()
        // findmnt -r writes a space as \x20.
        .map(|l| PathBuf::from(l.replace("\\x20", " ")))
        .filter(|p| p != dir && p.starts_with(dir))
        .collect();
    points.sort();
    points.dedup();
    let mut tops: Vec<PathBuf> = Vec::new();
    for point in points {
        if !tops.iter().any(|top| point.starts_with(top)) {
            tops.push(point);
        }
    }
    tops
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
    run_tool("ip", args).unwrap_or_else(|e| panic!("{e} (iproute2's `ip`, make tools)"))
}

/// `program ARGS`: its stdout, or the command and its stderr (or why it did not start).
pub fn run_tool(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
