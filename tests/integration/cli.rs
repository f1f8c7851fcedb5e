//! The command line: `--help`, `--version`, and bad configurations that must exit non-zero
//! with one clear line instead of a panic.

use std::process::Output;

use crate::support::hub::*;
use crate::support::{Auth, Cloud};

fn run(args: &[&str]) -> Output {
    hub_command().args(args).output().expect("run tinyhub")
}

#[test]
fn help_lists_every_flag_of_the_design() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--server-addr",
        "--kubeconfig",
        "--node-name",
        "--nodepool-name",
        "--bind-address",
        "--proxy-port",
        "--proxy-secure-port",
        "--serve-port",
        "--multiplexer-port",
        "--disk-cache-path",
        "--cache-agents",
        "--lb-mode",
        "--heartbeat-interval-seconds",
        "--heartbeat-timeout-seconds",
        "--heartbeat-failed-retry",
        "--heartbeat-healthy-threshold",
        "--working-mode",
        "--enable-resource-filter",
        "--disabled-resource-filters",
    ] {
        assert!(help.contains(flag), "--help misses {flag}");
    }
}

#[test]
fn version_names_the_target() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("tinyhub {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("linux"), "names the target triple: {text}");
}

#[test]
fn bad_configurations_exit_non_zero_with_one_line() {
    let cloud = Cloud::start();
    let dir = TempDir::new("cli");
    let kubeconfig = cloud.write_kubeconfig(dir.path(), Auth::Token("t".into()));
    let kc = format!("--kubeconfig={}", kubeconfig.display());
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, "clusters: [").unwrap();
    let garbage = format!("--kubeconfig={}", garbage.display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--bogus"], "unknown flag"),
        (vec![&kc, "--server-addr=http://127.0.0.1:6443"], "https://"),
        (
            vec!["--kubeconfig=/nonexistent/kubeconfig"],
            "/nonexistent/kubeconfig",
        ),
        (vec![&garbage], "not valid YAML"),
        (vec![&kc, "--proxy-port=70000"], "--proxy-port"),
        (vec![&kc, "--working-mode=fog"], "--working-mode"),
    ];
    for (args, want) in cases {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{args:?}: one line, got {err:?}"
        );
        assert!(
            err.contains(want),
            "{args:?}: {err:?} should mention {want:?}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let cloud = Cloud::start();
    let dir = TempDir::new("port-in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let kubeconfig = cloud.write_kubeconfig(dir.path(), Auth::Token("t".into()));
    let out = run(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--proxy-port={port}"),
        "--serve-port=0",
        &format!("--disk-cache-path={}", dir.path().join("cache").display()),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
}

#[test]
fn secrets_never_reach_the_log_even_at_high_verbosity() {
    let cloud = Cloud::start();
    cloud.add_token("s3cr3t-hub-token", "tinyhub");
    for auth in [
        Auth::Token("s3cr3t-hub-token".into()),
        Auth::CertInline(cloud.issue_client("system:node:edge-1", &["system:nodes"])),
    ] {
        let dir = TempDir::new("secrets");
        let key_line = match &auth {
            Auth::CertInline(c) => c.pair.key_pem.lines().nth(1).unwrap().to_owned(),
            _ => "s3cr3t-hub-token".to_owned(),
        };
        let spec = HubSpec::with_auth(&cloud, dir.path(), auth).with(&["--v=6"]);
        let hub = Hub::start(&spec);
        assert_eq!(
            get(&format!("{}/api/v1/namespaces", hub.url()), KUBELET).status,
            200
        );
        let logs = hub.logs();
        assert!(
            logs.contains("effective configuration"),
            "the configuration is logged at this level"
        );
        assert!(!logs.contains(&key_line), "a secret reached the log");
        assert!(
            !logs.contains("PRIVATE KEY") && !logs.contains("45, 45, 45, 45, 45"),
            "key material in the log"
        );
    }
}
