//! The command line: `--help`, `--version`, and bad configurations that must exit non-zero
//! with one clear line instead of a panic.

use std::process::Output;
use std::time::Duration;

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

/// Flags as (name, a value `--help` gives with it).
type FlagValues = Vec<(String, String)>;

/// The flags `--help` lists, as (name, default or ""), and the accepted-but-unimplemented
/// ones, as (name, the value honoured: "always", a value, or "").
fn help_flags() -> (FlagValues, FlagValues) {
    // Wide enough that no line is wrapped: one flag a line, its default on it.
    let out = hub_command()
        .arg("--help")
        .env("COLUMNS", "1000")
        .output()
        .expect("run tinyhub");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let (implemented, ignored) = help
        .split_once("\nAccepted for YurtHub's command line")
        .expect("--help lists the accepted, unimplemented flags");
    let implemented = implemented
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| {
            let name = l.split_whitespace().next().unwrap().to_owned();
            let default = l
                .rsplit_once("(default ")
                .map(|(_, d)| d.trim_end_matches(')').trim_matches('"').to_owned())
                .unwrap_or_default();
            (name, default)
        })
        .collect();
    let ignored = ignored
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| {
            let name_end = l.find([' ', ':']).unwrap_or_else(|| panic!("{l}"));
            let (name, rest) = l.split_at(name_end);
            let honoured = match rest.strip_prefix(" (").and_then(|r| r.split_once(')')) {
                Some(("always honoured", _)) => "always".to_owned(),
                Some((text, _)) => text
                    .strip_prefix("honoured: ")
                    .unwrap_or_else(|| panic!("{l}"))
                    .to_owned(),
                None => String::new(),
            };
            (name.to_owned(), honoured)
        })
        .collect();
    (implemented, ignored)
}

/// The rows of the tables in README.md's "### Flags" section, in order: one table of rows
/// per table, each row its flags (the first column's `--names`) and its second column.
fn readme_flag_tables() -> Vec<Vec<(Vec<String>, String)>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split_once("\n### Flags\n")
        // Up to the next heading of any level: "### Metrics" follows with a table of its own.
        .and_then(|(_, rest)| rest.split("\n#").next())
        .expect("README.md has a ### Flags section");
    let mut tables: Vec<Vec<(Vec<String>, String)>> = Vec::new();
    for line in section.lines() {
        if line.starts_with("|---") {
            tables.push(Vec::new());
        }
        if !line.starts_with("| `--") {
            continue;
        }
        // Markdown cells cannot hold a `|` (the tables would break).
        let cells: Vec<&str> = line.split('|').skip(1).collect();
        let names = cells[0]
            .split('`')
            .filter_map(|w| w.strip_prefix("--"))
            .map(str::to_owned)
            .collect();
        tables
            .last_mut()
            .expect("a row below a table's head")
            .push((names, cells[1].trim().to_owned()));
    }
    tables
}

#[test]
fn the_readme_flag_tables_match_help() {
    let (implemented, ignored) = help_flags();
    let tables = readme_flag_tables();
    assert_eq!(
        tables.len(),
        2,
        "the flags, then the accepted-but-unimplemented"
    );
    for (table, listed) in tables.iter().zip([&implemented, &ignored]) {
        let in_readme: Vec<&String> = table.iter().flat_map(|(names, _)| names).collect();
        for (name, _) in listed.iter() {
            assert!(
                in_readme.contains(&name),
                "--{name} is in --help, not in README.md"
            );
        }
        for name in &in_readme {
            assert!(
                listed.iter().any(|(n, _)| n == *name),
                "README.md names --{name}, which is not so in --help"
            );
        }
    }
    // A default --help shows is in the row's default cell, word for word.
    for (names, cell) in &tables[0] {
        let words: Vec<&str> = cell
            .split(|c: char| c.is_whitespace() || "(),`".contains(c))
            .collect();
        for name in names {
            let (_, default) = implemented.iter().find(|(n, _)| n == name).unwrap();
            assert!(
                default.is_empty() || words.contains(&default.as_str()),
                "README.md gives --{name} the default {cell:?}, --help {default:?}"
            );
        }
    }
    // The value each ignored flag is honoured with.
    for (names, cell) in &tables[1] {
        for name in names {
            let (_, honoured) = ignored.iter().find(|(n, _)| n == name).unwrap();
            assert_eq!(cell, honoured, "README.md, --{name}");
        }
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
    // TLS verification of the cloud cannot be turned off, with or without a CA beside it.
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let insecure = dir.path().join("insecure");
    std::fs::write(
        &insecure,
        text.replace(
            "    server:",
            "    insecure-skip-tls-verify: true\n    server:",
        ),
    )
    .unwrap();
    let insecure = format!("--kubeconfig={}", insecure.display());
    let insecure_only = dir.path().join("insecure-only");
    let without_ca: String = text
        .lines()
        .filter(|l| !l.contains("certificate-authority"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        &insecure_only,
        without_ca.replace(
            "    server:",
            "    insecure-skip-tls-verify: true\n    server:",
        ),
    )
    .unwrap();
    let insecure_only = format!("--kubeconfig={}", insecure_only.display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![&insecure], "insecure-skip-tls-verify is not supported"),
        (
            vec![&insecure_only],
            "insecure-skip-tls-verify is not supported",
        ),
        (vec!["--bogus"], "unknown flag"),
        (vec![&kc, "--server-addr=http://127.0.0.1:6443"], "https://"),
        (
            vec!["--kubeconfig=/nonexistent/kubeconfig"],
            "/nonexistent/kubeconfig",
        ),
        (vec![&garbage], "not valid YAML"),
        (vec![&kc, "--proxy-port=70000"], "--proxy-port"),
        (vec![&kc, "--working-mode=fog"], "--working-mode"),
        (
            vec![
                &kc,
                "--working-mode=local",
                "--host-control-plane-address=10.0.0.2:6443",
            ],
            "--working-mode: local is not supported: YurtHub's local mode (iptables DNAT",
        ),
        (vec![&kc, "--vmodule=relay"], "--vmodule"),
        (vec![&kc, "--profiling=maybe"], "--profiling"),
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
fn yurthub_and_klog_flags_are_accepted_and_the_unimplemented_named_in_one_warning() {
    let cloud = Cloud::start();
    let dir = TempDir::new("ignored-flags");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[
        "--gc-frequency=120",
        "--log_dir=/var/log/yurthub",
        "--profiling",
        // Given with what tinyhub does anyway: not warned about.
        "--enable-node-pool=true",
        "--logtostderr=true",
        "--log-flush-frequency=5s",
        "--enable-node-pool=false",
        "--min-request-timeout",
        "30m",
        "--gc-frequency=60",
        // Honoured: the header left out, and only the Services watcher's file at debug.
        "--skip_headers",
        "--v=0",
        "--vmodule=services_watch=2",
    ]);
    let hub = Hub::start(&spec);
    let warned = |l: &str| l.contains("not implemented by tinyhub");
    assert_eq!(hub.log_lines(warned), 1, "{}", hub.logs());
    let line = hub.logs().lines().find(|l| warned(l)).unwrap().to_owned();
    assert!(
        line.starts_with("ignored, not implemented by tinyhub")
            && line.ends_with(
                ": --gc-frequency --log-dir --profiling --enable-node-pool --min-request-timeout"
            ),
        "{line}"
    );
    assert!(
        hub.wait_log(
            "Services carry a topology annotation",
            Duration::from_secs(60)
        ),
        "the Services watcher logs at debug: {}",
        hub.logs()
    );
    assert!(
        !hub.logs().contains("effective configuration"),
        "app.rs stays at --v=0: {}",
        hub.logs()
    );
    assert_eq!(get(&format!("{}/version", hub.url()), KUBELET).status, 200);
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
        &format!("--root-dir={}", dir.path().join("root").display()),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cannot listen"), "{err}");
}

#[test]
fn defaults_are_loopback_only_and_the_cache_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
    cloud.create(
        "pods",
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    let dir = TempDir::new("defaults");
    // No bind address given: the hub chooses.
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    assert!(hub.proxy.ip().is_loopback(), "proxy on {}", hub.proxy);
    assert!(hub.serve.ip().is_loopback(), "serve port on {}", hub.serve);
    for path in [
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
        "/api/v1/namespaces/default/configmaps",
        "/version",
    ] {
        assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    }
    assert!(eventually(Duration::from_secs(60), || files_under(
        &hub.spec.cache_dir
    )
    .len()
        >= 3));
    // Walk the cache once the writer is done: while it commits, staged files are renamed
    // away between reading a directory and looking at an entry.
    hub.wait_cache_quiet();
    let mut checked = (0, 0);
    let mut pending = vec![hub.spec.cache_dir.clone()];
    while let Some(dir) = pending.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
        checked.0 += 1;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                // A staged file (never visible to readers) committed after all.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.ends_with(".staging") => {
                    continue;
                }
                Err(e) => panic!("{}: {e}", entry.path().display()),
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                let mode = meta.permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", entry.path().display());
                checked.1 += 1;
            }
        }
    }
    // The root, two components' trees of kind and namespace directories; three objects and
    // the version document at least.
    assert!(checked.0 >= 5 && checked.1 >= 3, "{checked:?}");
}

#[test]
fn secrets_never_reach_the_log_even_at_high_verbosity() {
    let cloud = Cloud::start();
    cloud.add_token("s3cr3t-hub-token", "tinyhub");
    cloud.add_token("s3cr3t-client-token", "someone");
    cloud.create(
        "secrets",
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"password": "c3VwZXItc2VjcmV0"}}),
    );
    for (round, auth) in [
        Auth::Token("s3cr3t-hub-token".into()),
        Auth::CertInline(cloud.issue_client("system:node:edge-1", &["system:nodes"])),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = TempDir::new("secrets");
        let key_line = match &auth {
            Auth::CertInline(c) => c.pair.key_pem.lines().nth(1).unwrap().to_owned(),
            _ => "s3cr3t-hub-token".to_owned(),
        };
        let spec = HubSpec::with_auth(&cloud, dir.path(), auth).with(&["--v=6"]);
        // A full run: reads, a watch, a secret, a client with its own token, a write, the
        // cloud going away, offline answers, a restart.
        let hub = Hub::start(&spec);
        let url = hub.url();
        for path in [
            "/api/v1/namespaces",
            "/api/v1/namespaces/default/secrets/db",
            "/api/v1/namespaces/default/secrets",
        ] {
            assert_eq!(get(&format!("{url}{path}"), KUBELET).status, 200, "{path}");
        }
        let (status, watch) = stream(
            &format!("{url}/api/v1/namespaces/default/secrets?watch=1&timeoutSeconds=1"),
            KUBELET,
        );
        assert_eq!(status, 200);
        drop(watch);
        let own = call(
            "GET",
            &format!("{url}/api/v1/namespaces/default/configmaps"),
            "curl/8",
            &[("Authorization", "Bearer s3cr3t-client-token")],
            None,
        );
        assert_eq!(own.status, 200);
        let created = call(
            "POST",
            &format!("{url}/api/v1/namespaces/default/secrets"),
            KUBELET,
            &[("Content-Type", "application/json")],
            Some(format!(r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"new-{round}"}},"data":{{"pw":"czNjcjN0LW5ldy1kYXRh"}}}}"#).as_bytes()),
        );
        assert_eq!(created.status, 201);
        cloud.stop();
        assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(10)));
        assert_eq!(
            get(
                &format!("{url}/api/v1/namespaces/default/secrets/db"),
                KUBELET
            )
            .status,
            200
        );
        let first_run = hub.logs();
        let hub = hub.restart();
        cloud.restart();
        assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(10)));
        let logs = format!("{first_run}\n{}", hub.logs());
        assert!(
            logs.contains("effective configuration"),
            "the configuration is logged at this level"
        );
        for secret in [
            key_line.as_str(),
            "s3cr3t-hub-token",
            "s3cr3t-client-token",
            "czNjcjN0",
            "c3VwZXI",
        ] {
            assert!(!logs.contains(secret), "{secret} reached the log");
        }
        assert!(
            !logs.contains("PRIVATE KEY") && !logs.contains("45, 45, 45, 45, 45"),
            "key material in the log"
        );
    }
}
