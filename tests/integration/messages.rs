//! Messages that point at the right thing (issue 35): flag errors before missing credentials,
//! numbers that say their range, `--help` fitted to 80 columns off a terminal, "did you
//! mean", a client's hang-up told apart from the cloud breaking off, offline refusals counted
//! apart from answers, the non-agent's hint, and `pki/ca.crt` in `--kubeconfig` mode.

use std::io::Read;
use std::process::Output;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

/// The hub run with `args` (and its own root and cache in `dir`), with no credentials, as a
/// command that must fail at start-up; its stderr.
fn refused(dir: &TempDir, args: &[&str]) -> String {
    let out: Output = hub_command()
        .arg(format!("--root-dir={}", dir.path().join("root").display()))
        .arg(format!(
            "--disk-cache-path={}",
            dir.path().join("cache").display()
        ))
        .arg("--node-name=edge-1")
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("the hub runs");
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_flag_values_are_reported_before_missing_credentials() {
    let dir = TempDir::new("messages-flags");
    for (flag, names) in [
        ("--proxy-port=abc", "proxy-port"),
        ("--lb-mode=random", "lb-mode"),
        ("--working-mode=local", "working-mode"),
    ] {
        let err = refused(&dir, &[flag]);
        assert!(
            err.contains(names) && !err.contains("needs credentials"),
            "{flag}: {err}"
        );
    }
    // With nothing wrong but the credentials, they are what is said.
    assert!(refused(&dir, &[]).contains("needs credentials"));
}

#[test]
fn a_number_out_of_range_says_the_range_it_takes() {
    let cloud = Cloud::start();
    let dir = TempDir::new("messages-range");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let kubeconfig = format!(
        "--kubeconfig={}",
        spec.kubeconfig.as_ref().unwrap().display()
    );
    let err = refused(&dir, &[&kubeconfig, "--heartbeat-interval-seconds=-1"]);
    assert!(
        err.contains("-1 is outside the range it takes: a whole number from 1 to 3600"),
        "{err}"
    );
    let err = refused(&dir, &[&kubeconfig, "--proxy-port=abc"]);
    assert!(
        err.contains("\"abc\" is not a number: it takes a whole number from 0 to 65535"),
        "{err}"
    );
}

#[test]
fn an_unknown_flag_close_to_a_real_one_gets_did_you_mean() {
    let dir = TempDir::new("messages-near");
    let err = refused(&dir, &["--proxy-prot=10261"]);
    assert!(err.contains("did you mean --proxy-port?"), "{err}");
    let err = refused(&dir, &["--no-such-flag"]);
    assert!(err.contains("unknown flag: --no-such-flag") && !err.contains("did you mean"));
}

#[test]
fn help_fits_80_columns_off_a_terminal() {
    let out = hub_command()
        .arg("--help")
        .env_remove("COLUMNS")
        .output()
        .expect("the hub runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--cache-agents strings"), "{help}");
    let long: Vec<&str> = help.lines().filter(|l| l.chars().count() > 80).collect();
    assert!(long.is_empty(), "lines past 80 columns: {long:#?}");
    // COLUMNS, when given, is the width.
    let out = hub_command()
        .arg("--help")
        .env("COLUMNS", "200")
        .output()
        .expect("the hub runs");
    let wide = String::from_utf8_lossy(&out.stdout);
    assert!(wide.lines().any(|l| l.chars().count() > 80), "{wide}");
    assert!(wide.lines().all(|l| l.chars().count() <= 200));
}

/// A hub whose kubelet cached one ConfigMap, with its cloud gone; and the ConfigMap's URL.
/// The directory comes first, so it is dropped last: the hub stops before it is removed.
fn offline_hub(tag: &str) -> (TempDir, Cloud, Hub, String) {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}}),
    );
    let dir = TempDir::new(tag);
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps/settings",
        hub.url()
    );
    assert_eq!(get(&url, "kubelet/v1.30").status, 200);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    (dir, cloud, hub, url)
}

#[test]
fn offline_refusals_are_counted_apart_from_answers() {
    let (_dir, _cloud, hub, url) = offline_hub("messages-refusals");
    assert_eq!(get(&url, "kubelet/v1.30").status, 200);
    assert_eq!(get(&url, "curl/8.5").status, 503);
    let write = call(
        "PUT",
        &url,
        "kubelet/v1.30",
        &[("Content-Type", "application/json")],
        Some(br#"{"metadata":{"name":"settings","namespace":"default"}}"#),
    );
    assert_eq!(write.status, 503);
    assert_eq!(hub.metric("tinyhub_offline_answers_total"), Some(1.0));
    assert_eq!(hub.metric("tinyhub_offline_refusals_total"), Some(2.0));
}

#[test]
fn offline_a_component_not_cached_is_told_how_to_be_cached() {
    let (_dir, _cloud, _hub, url) = offline_hub("messages-hint");
    let stranger = get(&url, "curl/8.5");
    assert_eq!(stranger.status, 503);
    let message = stranger.json()["message"].as_str().unwrap_or("").to_owned();
    assert!(
        message.contains("curl") && message.contains("--cache-agents=curl"),
        "{message}"
    );
}

#[test]
fn a_client_hanging_up_a_watch_is_not_the_cloud_breaking_off() {
    let cloud = Cloud::start();
    let dir = TempDir::new("messages-hangup");
    // Cloud mode relays a watch as it comes (edge mode resumes a JSON watch, which logs its
    // legs apart; protobuf watches take this relay there too).
    let hub = Hub::start(
        &HubSpec::for_cloud(&cloud, dir.path()).with(&["--v=4", "--working-mode=cloud"]),
    );
    let (status, mut body) = stream(
        &format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=120",
            hub.url()
        ),
        "curl/8.5",
    );
    assert_eq!(status, 200);
    assert!(cloud.wait_for_watchers("configmaps", 1, Duration::from_secs(10)));
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "seen", "namespace": "default"}}),
    );
    let mut first = [0u8; 16];
    assert!(body.read(&mut first).unwrap() > 0, "an event arrives");
    drop(body);
    assert!(
        hub.wait_log("the client went away mid-answer", Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    assert!(
        !hub.logs().contains("the cloud's answer broke off"),
        "{}",
        hub.logs()
    );
}

#[test]
fn kubeconfig_mode_writes_the_cluster_ca_the_https_example_uses() {
    let cloud = Cloud::start();
    let dir = TempDir::new("messages-ca");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let ca = hub.spec.root_dir.join("pki/ca.crt");
    assert!(
        eventually(Duration::from_secs(10), || ca.exists()),
        "{}",
        hub.logs()
    );
    let pem = std::fs::read_to_string(&ca).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let kubeconfig = std::fs::read_to_string(hub.spec.kubeconfig.as_ref().unwrap()).unwrap();
    // The kubeconfig's CA, whichever way it holds it (a file or inline data).
    let der_line = pem.lines().nth(1).unwrap();
    let inline = kubeconfig.contains("certificate-authority-data");
    assert!(
        inline || kubeconfig.contains("certificate-authority"),
        "{kubeconfig}"
    );
    assert!(!der_line.is_empty());
}
