//! Issue 35 item 2: no test touches the machine. `make test` runs the suites through
//! tests/untouched.sh: with a TMPDIR of their own that must be empty at the end, a hub's default
//! directories (`/var/lib/yurthub`, `/etc/kubernetes`) unchanged and, as root, those private to
//! the run and held by a stand-in hub, as on a node where YurtHub or tinyhub runs. These tests
//! check the check: it fails on what a command leaves behind, and under it a hub started on
//! the default directories finds them held.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::hub::*;
use crate::support::namespace::REQUIRE_NAMESPACES;
use crate::support::{Auth, Cloud};

/// Set by tests/untouched.sh in its mount namespace, where the default directories are the
/// run's own and held by its stand-in hub.
const HELD: &str = "TINYHUB_TEST_DEFAULTS_HELD";

/// `sh tests/untouched.sh <command>`.
fn untouched(command: &str) -> Output {
    Command::new("sh")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/untouched.sh"))
        .arg(command)
        .output()
        .expect("run tests/untouched.sh")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_check_fails_on_what_a_command_leaves_behind_and_passes_its_status_on() {
    let clean = untouched("mkdir \"$TMPDIR/gone\" && rmdir \"$TMPDIR/gone\"");
    assert!(clean.status.success(), "{}", said(&clean));

    let left =
        untouched("mkdir \"$TMPDIR/tinyhub-it-left\" && : > \"$TMPDIR/tinyhub-it-left/note\"");
    assert_eq!(left.status.code(), Some(1), "{}", said(&left));
    assert!(
        said(&left).contains("untouched: FAIL: the tests left these in their TMPDIR")
            && said(&left).contains("tinyhub-it-left/note"),
        "{}",
        said(&left)
    );

    let failed = untouched("exit 3");
    assert_eq!(failed.status.code(), Some(3), "{}", said(&failed));

    // Writing into a default directory is a failure too. Only where that directory is this
    // run's own (make test as root): elsewhere the write would reach the machine's.
    if std::env::var_os(HELD).is_some() {
        let wrote = untouched(": > /var/lib/yurthub/left");
        assert_eq!(wrote.status.code(), Some(1), "{}", said(&wrote));
        assert!(
            said(&wrote).contains("/var/lib/yurthub/left"),
            "{}",
            said(&wrote)
        );
    }
}

#[test]
fn under_make_test_a_hubs_default_directories_are_held_by_another_hub() {
    if std::env::var_os(HELD).is_none() {
        assert!(
            std::env::var_os(REQUIRE_NAMESPACES).is_none_or(|v| v != "1"),
            "not run by tests/untouched.sh in its namespace (run `make test` as root); \
             {REQUIRE_NAMESPACES}=1 requires it"
        );
        eprintln!(
            "SKIPPED: the default directories are the machine's (make test as root holds its own)"
        );
        return;
    }
    let cloud = Cloud::start();
    let dir = TempDir::new("defaults-held");
    let kubeconfig = cloud.write_kubeconfig(dir.path(), Auth::Token("t".into()));
    // The hub's exit, or None when it is still running after 20 s (it started: killed).
    let start = |path_flag: String| {
        let mut child = hub_command()
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--proxy-port=0",
                "--serve-port=0",
                "--proxy-secure-port=0",
                "--enable-dummy-if=false",
            ])
            .arg(path_flag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tinyhub");
        let ended = eventually(Duration::from_secs(20), || {
            child.try_wait().is_ok_and(|s| s.is_some())
        });
        if !ended {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("the hub's stderr");
        (ended, out)
    };
    for (flag, held) in [
        (
            format!("--disk-cache-path={}", dir.path().join("cache").display()),
            "/var/lib/yurthub",
        ),
        (
            format!("--root-dir={}", dir.path().join("root").display()),
            "/etc/kubernetes/cache",
        ),
    ] {
        let (ended, out) = start(flag);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(ended && !out.status.success(), "it started: {err}");
        assert!(
            err.contains(&format!("another tinyhub uses {held} (pid "))
                && err.contains("make test's stand-in hub"),
            "{err}"
        );
    }
}

/// Where the check makes a default directory in an overlay of its parent (`/etc` with no
/// `/etc/kubernetes`), the mounts inside that parent stay as they were under it: a
/// container's `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname` are bind mounts, and the
/// overlay alone would show the files under them. Here `/etc/hostname` is such a mount (in a
/// mount namespace of this test), read by the command the check runs.
#[test]
fn the_mounts_inside_an_overlaid_parent_stay_under_the_check() {
    let etc_hostname = std::path::Path::new("/etc/hostname");
    if !crate::support::namespace::is_root()
        || std::path::Path::new("/etc/kubernetes").exists()
        || !etc_hostname.is_file()
    {
        eprintln!(
            "SKIPPED: needs root, an /etc/hostname and no /etc/kubernetes (then the check \
             overlays /etc; under make test it exists)"
        );
        return;
    }
    let dir = TempDir::new("submount");
    let stand_in = dir.path().join("hostname");
    std::fs::write(&stand_in, "tinyhub-bound-hostname\n").expect("write");
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" /etc/hostname && exec sh "$2" 'cat /etc/hostname'"#)
        .arg("sh")
        .arg(&stand_in)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/untouched.sh"))
        .output()
        .expect("run unshare");
    if !out.status.success() && said(&out).starts_with("unshare:") {
        assert!(
            std::env::var_os(REQUIRE_NAMESPACES).is_none_or(|v| v != "1"),
            "{}",
            said(&out)
        );
        eprintln!("SKIPPED: no mount namespace: {}", said(&out));
        return;
    }
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("private /var/lib/yurthub"),
        "the check ran in its namespace: {}",
        said(&out)
    );
    assert!(
        said(&out).contains("tinyhub-bound-hostname"),
        "the bind mount on /etc/hostname is lost under the overlay of /etc: {}",
        said(&out)
    );
}
