//! Issue 33: `tinyhub cache ls|get|verify|repair` against a cache the real hub made, with
//! the problems operators meet planted in it (a torn file, leftovers, foreign and ghost
//! files, wrong modes, a symlink, a directory where an object belongs, an incomplete
//! journal); the tool beside a running hub; a directory that is no cache; a 2 GB file; and
//! a repair killed at random moments.
//!
//! These commands are new: before the change `tinyhub cache …` was refused as an unexpected
//! argument (exit 2), so every test here failed on the code before it.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/7c48c2b";
const NODE_PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";

fn pod(ns: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    })
}

/// A cloud with what a node's kubelet and kube-proxy read, and a hub that cached it.
struct Made {
    cloud: Cloud,
    hub: Hub,
    dir: TempDir,
}

impl Made {
    fn cache(&self) -> PathBuf {
        self.hub.spec.cache_dir.clone()
    }
}

fn made(tag: &str) -> Made {
    let cloud = Cloud::start();
    for (ns, name, node) in [
        ("default", "web-1", "edge-1"),
        ("default", "web-2", "edge-1"),
        ("kube-system", "proxy-1", "edge-1"),
        ("default", "elsewhere", "edge-2"),
    ] {
        cloud.create("pods", pod(ns, name, node));
    }
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    );
    cloud.create(
        "secrets",
        json!({"metadata": {"name": "creds", "namespace": "default"}, "data": {"k": "dg=="}}),
    );
    for name in ["web-abcde", "db-fghij"] {
        cloud.create(
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": name, "namespace": "default",
                                "labels": {"kubernetes.io/service-name": "web"}},
                   "addressType": "IPv4", "endpoints": [], "ports": []}),
        );
    }
    let dir = TempDir::new(tag);
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    for path in [
        NODE_PODS,
        "/api/v1/namespaces/default/configmaps/settings",
        "/api/v1/namespaces/default/secrets/creds",
    ] {
        let r = get(&format!("{}{path}", hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let slices = get(
        &format!("{}/apis/discovery.k8s.io/v1/endpointslices", hub.url()),
        KUBE_PROXY,
    );
    assert_eq!(slices.status, 200, "{}", slices.text());
    let token = serde_json::to_vec(&json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": ["api"], "expirationSeconds": 3600}
    }))
    .unwrap();
    let answer = call(
        "POST",
        &format!(
            "{}/api/v1/namespaces/default/serviceaccounts/builder/token",
            hub.url()
        ),
        KUBELET,
        &[("Content-Type", "application/json")],
        Some(&token),
    );
    assert_eq!(answer.status, 201, "{}", answer.text());
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/web-1",
                "kubelet/pods.v1.core/default/web-2",
                "kubelet/pods.v1.core/kube-system/proxy-1",
                "kubelet/configmaps.v1.core/default/settings",
                "kubelet/secrets.v1.core/default/creds",
                "kube-proxy/endpointslices.v1.discovery.k8s.io/default/web-abcde",
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    Made { cloud, hub, dir }
}

/// `tinyhub cache <args> --disk-cache-path=<cache> --node-name=edge-1`.
fn tool(cache: &Path, args: &[&str]) -> Output {
    hub_command()
        .arg("cache")
        .args(args)
        .arg(format!("--disk-cache-path={}", cache.display()))
        .arg("--node-name=edge-1")
        .stdin(Stdio::null())
        .output()
        .expect("run tinyhub cache")
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn said(out: &Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        code(out),
        stdout(out),
        stderr(out)
    )
}

/// `verify`'s problems as (path, code), from its text lines.
fn problems_of(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ": ");
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

/// YAML read back as JSON (strings, integers, booleans, nulls, maps and lists).
fn yaml_to_json(y: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => json!(i),
        Yaml::Real(r) => json!(r.parse::<f64>().unwrap()),
        Yaml::Boolean(b) => json!(b),
        Yaml::Null => Value::Null,
        Yaml::Array(items) => Value::Array(items.iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), yaml_to_json(v)))
                .collect(),
        ),
        other => panic!("unexpected YAML {other:?}"),
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The file beside `cache` (in the test's temp dir) the planted symlink points at, as a
/// link to the host's `/etc/passwd` would.
fn outside_of(cache: &Path) -> PathBuf {
    let name = cache.file_name().unwrap().to_string_lossy();
    cache.with_file_name(format!("{name}.outside"))
}

/// The problems of the design's list, planted in `cache`; what verify must say of them.
fn plant(cache: &Path) -> BTreeSet<(String, String)> {
    let pods = cache.join("kubelet/pods.v1.core");
    let web2 = std::fs::read(pods.join("default/web-2")).unwrap();
    std::fs::write(pods.join("default/web-2"), &web2[..web2.len() / 2]).unwrap();
    std::fs::create_dir_all(cache.join(".staging")).unwrap();
    std::fs::write(cache.join(".staging/p.9"), b"{\"half\":").unwrap();
    let settings = cache.join("kubelet/configmaps.v1.core/default");
    std::fs::copy(settings.join("settings"), settings.join("settings.tmp")).unwrap();
    std::fs::copy(pods.join("default/web-1"), pods.join("default/ghost-pod")).unwrap();
    std::fs::write(cache.join("notes.txt"), b"operator notes\n").unwrap();
    chmod(&pods.join("kube-system/proxy-1"), 0o644);
    chmod(&settings, 0o755);
    let outside = outside_of(cache);
    std::fs::write(&outside, b"a file of the host's, outside the cache\n").unwrap();
    chmod(&outside, 0o640);
    std::os::unix::fs::symlink(&outside, pods.join("default/passwd")).unwrap();
    std::fs::create_dir(pods.join("default/web-3")).unwrap();
    std::fs::write(
        cache.join(".journal.5"),
        b"tinyhub-journal 1\nmkdir\tkubelet\n",
    )
    .unwrap();
    for f in [
        ".staging/p.9",
        "notes.txt",
        ".journal.5",
        "kubelet/configmaps.v1.core/default/settings.tmp",
        "kubelet/pods.v1.core/default/ghost-pod",
        "kubelet/pods.v1.core/default/web-2",
    ] {
        chmod(&cache.join(f), 0o600);
    }
    chmod(&pods.join("default/web-3"), 0o700);
    set(&[
        ("kubelet/pods.v1.core/default/web-2", "not-object"),
        (".staging/p.9", "leftover"),
        (
            "kubelet/configmaps.v1.core/default/settings.tmp",
            "names-other",
        ),
        ("kubelet/pods.v1.core/default/ghost-pod", "names-other"),
        ("notes.txt", "foreign"),
        ("kubelet/pods.v1.core/kube-system/proxy-1", "mode"),
        ("kubelet/configmaps.v1.core/default", "mode"),
        ("kubelet/pods.v1.core/default/passwd", "symlink"),
        ("kubelet/pods.v1.core/default/web-3", "not-a-file"),
        (".journal.5", "leftover"),
    ])
}

#[test]
fn ls_get_verify_and_repair_a_cache_the_hub_made_then_the_hub_serves_it_offline() {
    let Made {
        cloud,
        mut hub,
        dir: _dir,
    } = made("cache-cli");
    let cache = hub.spec.cache_dir.clone();
    let spec = hub.spec.clone();
    // Stopped as its supervisor stops it: the drain writes the sync record ls reads ages from.
    signal(hub.pid(), "TERM");
    assert!(hub.wait_exit().success(), "{}", hub.logs());
    let untouched = tree(&cache);

    // ls: each collection with its counts; the token answer counted, never shown.
    let ls = tool(&cache, &["ls", "-o", "json"]);
    assert_eq!(code(&ls), 0, "{}", said(&ls));
    assert!(stderr(&ls).contains("hub stopped"), "{}", said(&ls));
    let doc: Value = serde_json::from_slice(&ls.stdout).unwrap();
    let row = |component: &str, resource: &str| {
        doc["collections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["component"] == component && c["resource"] == resource)
            .cloned()
            .unwrap_or_else(|| panic!("no {component}/{resource} in {doc:#}"))
    };
    assert_eq!(row("kubelet", "pods.v1.core")["objects"], 3);
    let age = row("kubelet", "pods.v1.core")["ageSeconds"].as_u64();
    assert!(age.is_some_and(|a| a < 600), "{doc:#}");
    assert_eq!(row("kubelet", "pods.v1.core")["namespaces"], 2);
    assert_eq!(row("kubelet", "secrets.v1.core")["objects"], 1);
    assert_eq!(
        row("kube-proxy", "endpointslices.v1.discovery.k8s.io")["objects"],
        2
    );
    assert_eq!(
        doc["tokens"],
        json!([{"component": "kubelet", "answers": 1}])
    );
    assert!(!stdout(&ls).contains("cloud-token-"), "{}", said(&ls));
    let text = tool(&cache, &["ls"]);
    assert_eq!(code(&text), 0, "{}", said(&text));
    let listed = stdout(&text);
    let line = listed
        .lines()
        .find(|l| l.starts_with("kubelet") && l.contains("pods.v1.core"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_default();
    let bytes = row("kubelet", "pods.v1.core")["bytes"].to_string();
    assert_eq!(
        line[..5],
        ["kubelet", "pods.v1.core", "2", "3", bytes.as_str()],
        "{}",
        said(&text)
    );
    let in_system = tool(
        &cache,
        &["ls", "kubelet", "-n", "kube-system", "-o", "json"],
    );
    let mut in_system: Value = serde_json::from_slice(&in_system.stdout).unwrap();
    // The age is the clock's, a second apart between two runs at most: left out.
    for c in in_system["collections"].as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("ageSeconds");
    }
    let proxy_bytes = std::fs::metadata(cache.join("kubelet/pods.v1.core/kube-system/proxy-1"))
        .unwrap()
        .len();
    assert_eq!(
        in_system["collections"],
        json!([{"component": "kubelet", "resource": "pods.v1.core", "namespaces": 1,
                "objects": 1, "bytes": proxy_bytes}]),
        "{in_system:#}"
    );
    let rows = tool(&cache, &["ls", "kubelet", "pods"]);
    let rows = stdout(&rows);
    let proxy = rows
        .lines()
        .find(|l| l.contains("proxy-1"))
        .unwrap_or_default();
    let proxy_rv = serde_json::from_slice::<Value>(
        &std::fs::read(cache.join("kubelet/pods.v1.core/kube-system/proxy-1")).unwrap(),
    )
    .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        proxy.starts_with("kube-system") && proxy.split_whitespace().nth(3) == Some(&proxy_rv),
        "{rows}"
    );
    let objects = tool(
        &cache,
        &["ls", "kubelet", "pods", "-n", "default", "-o", "json"],
    );
    let names: Vec<Value> = serde_json::from_slice::<Value>(&objects.stdout).unwrap()["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].clone())
        .collect();
    assert_eq!(
        names,
        [json!("web-1"), json!("web-2")],
        "{}",
        said(&objects)
    );

    // get: the file's bytes as the hub serves them; the plural is the kind directory.
    let stored = std::fs::read(cache.join("kubelet/pods.v1.core/default/web-1")).unwrap();
    let by_dir = tool(
        &cache,
        &["get", "kubelet", "pods.v1.core", "-n", "default", "web-1"],
    );
    assert_eq!(code(&by_dir), 0, "{}", said(&by_dir));
    assert_eq!(by_dir.stdout, stored);
    let by_plural = tool(
        &cache,
        &["get", "kubelet", "pods", "-n", "default", "web-1"],
    );
    assert_eq!(by_plural.stdout, stored);
    let cloud_pod: Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(cloud_pod["metadata"]["name"], "web-1");
    let yaml = tool(
        &cache,
        &[
            "get", "kubelet", "secrets", "-n", "default", "creds", "-o", "yaml",
        ],
    );
    assert_eq!(code(&yaml), 0, "{}", said(&yaml));
    let docs = yaml_rust2::YamlLoader::load_from_str(&stdout(&yaml)).unwrap();
    let secret: Value = serde_json::from_slice(
        &std::fs::read(cache.join("kubelet/secrets.v1.core/default/creds")).unwrap(),
    )
    .unwrap();
    assert_eq!(yaml_to_json(&docs[0]), secret);
    let missing = tool(&cache, &["get", "kubelet", "pods", "-n", "default", "nope"]);
    assert_eq!(code(&missing), 1, "{}", said(&missing));
    let no_namespace = tool(&cache, &["get", "kubelet", "pods", "proxy-1"]);
    assert_eq!(code(&no_namespace), 1, "{}", said(&no_namespace));
    assert!(
        stderr(&no_namespace).contains("proxy-1 is cached in namespace kube-system: give -n"),
        "{}",
        said(&no_namespace)
    );
    // A plural that names two kinds is refused, listing them.
    std::fs::create_dir(cache.join("kubelet/pods.v1beta1.core")).unwrap();
    let ambiguous = tool(
        &cache,
        &["get", "kubelet", "pods", "-n", "default", "web-1"],
    );
    assert_eq!(code(&ambiguous), 2, "{}", said(&ambiguous));
    assert!(
        stderr(&ambiguous).contains("pods.v1.core, pods.v1beta1.core"),
        "{}",
        said(&ambiguous)
    );
    std::fs::remove_dir(cache.join("kubelet/pods.v1beta1.core")).unwrap();

    // A clean cache verifies clean.
    let clean = tool(&cache, &["verify"]);
    assert_eq!(code(&clean), 0, "{}", said(&clean));
    assert_eq!(stdout(&clean), "", "{}", said(&clean));
    // ls, get and verify wrote nothing: every byte and mode as the hub left them.
    assert!(
        tree(&cache) == untouched,
        "ls, get or verify changed the cache"
    );

    // The planted problems: exactly those lines, in text and in JSON.
    let ghost = std::fs::read(cache.join("kubelet/pods.v1.core/default/web-1")).unwrap();
    let wanted = plant(&cache);
    let planted = tree(&cache);
    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 1, "{}", said(&verify));
    assert_eq!(problems_of(&stdout(&verify)), wanted, "{}", said(&verify));
    let as_json = tool(&cache, &["verify", "-o", "json"]);
    assert_eq!(code(&as_json), 1, "{}", said(&as_json));
    let report: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(report["hub"], "stopped");
    let from_json: BTreeSet<(String, String)> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let action = p["action"].as_str().unwrap();
            let code = p["code"].as_str().unwrap();
            assert_eq!(
                action,
                if code == "mode" {
                    "chmod"
                } else {
                    "quarantine"
                },
                "{p}"
            );
            (p["path"].as_str().unwrap().to_owned(), code.to_owned())
        })
        .collect();
    assert_eq!(from_json, wanted);
    let listed = tool(&cache, &["ls", "kubelet", "pods", "-n", "default"]);
    assert_eq!(code(&listed), 0, "{}", said(&listed));
    let got = tool(
        &cache,
        &["get", "kubelet", "pods", "-n", "default", "web-2"],
    );
    assert_ne!(code(&got), 0, "a torn file is not served: {}", said(&got));
    assert!(
        tree(&cache) == planted,
        "ls, get or verify changed a cache with problems"
    );
    // The hub refuses the ghost before any repair: it is not a second web-1.
    // (Left to the hub's own tests; here the tool and the hub agree after the repair.)

    // repair: moves, chmods, marks; then verify is clean.
    let repair = tool(&cache, &["repair"]);
    assert_eq!(code(&repair), 0, "{}", said(&repair));
    assert!(
        stdout(&repair).contains("chmod 0600 kubelet/pods.v1.core/kube-system/proxy-1"),
        "{}",
        said(&repair)
    );
    assert_eq!(
        std::fs::metadata(cache.join("kubelet/configmaps.v1.core/default"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let quarantined: Vec<PathBuf> = std::fs::read_dir(cache.join(".quarantine"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let q = &quarantined[0];
    assert_eq!(
        std::fs::read(q.join("kubelet/pods.v1.core/default/ghost-pod")).unwrap(),
        ghost
    );
    assert_eq!(
        std::fs::read(q.join("notes.txt")).unwrap(),
        b"operator notes\n"
    );
    assert!(q.join("kubelet/pods.v1.core/default/web-3").is_dir());
    let outside = outside_of(&cache);
    assert_eq!(
        std::fs::read_link(q.join("kubelet/pods.v1.core/default/passwd")).unwrap(),
        outside
    );
    // Moved as a link: what it points at is neither read, changed, nor moved.
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        b"a file of the host's, outside the cache\n"
    );
    assert_eq!(
        std::fs::metadata(&outside).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let summary = read_json(&q.join("REPAIR.json")).expect("REPAIR.json");
    assert_eq!(
        summary["actions"].as_array().unwrap().len(),
        wanted.len(),
        "{summary:#}"
    );
    let marks = read_json(&cache.join(".relist")).expect(".relist");
    let marked: BTreeSet<String> = marks["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["reason"], "repaired");
            format!(
                "{}/{}",
                m["component"].as_str().unwrap(),
                m["kind"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        marked,
        ["kubelet/configmaps.v1.core", "kubelet/pods.v1.core"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    );
    let after = tool(&cache, &["verify"]);
    assert_eq!(code(&after), 0, "{}", said(&after));
    let ls = tool(&cache, &["ls"]);
    assert!(
        stdout(&ls).contains(
            "relist pending: kubelet/configmaps.v1.core (repaired), kubelet/pods.v1.core (repaired)"
        ),
        "{}",
        said(&ls)
    );
    // Running it again finds nothing to do.
    let again = tool(&cache, &["repair"]);
    assert_eq!(code(&again), 0, "{}", said(&again));
    assert!(
        stdout(&again).contains("nothing to repair"),
        "{}",
        said(&again)
    );

    // The hub, started with the cloud gone, answers kubelet's pod list from what is left.
    cloud.stop();
    let hub = Hub::start(&spec);
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    let list = get(&format!("{}{NODE_PODS}", hub.url()), KUBELET);
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(
        item_names(&list.json()),
        ["proxy-1", "web-1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    );
}

#[test]
fn beside_a_running_hub_the_tool_reads_only_and_repair_is_refused() {
    let made = made("cache-cli-running");
    let cache = made.cache();
    let pid = made.hub.pid();
    let before = made.hub.snapshot_settled();
    let written = made.hub.metric("tinyhub_cache_objects_written_total");

    let ls = tool(&cache, &["ls"]);
    assert_eq!(code(&ls), 0, "{}", said(&ls));
    assert!(
        stderr(&ls).contains(&format!("hub running (pid {pid} on ")),
        "{}",
        said(&ls)
    );
    assert!(stderr(&ls).contains("): read-only"), "{}", said(&ls));
    let verify = tool(&cache, &["verify", "-o", "json"]);
    assert_eq!(code(&verify), 0, "{}", said(&verify));
    assert_eq!(
        serde_json::from_slice::<Value>(&verify.stdout).unwrap()["hub"],
        "running"
    );
    let repair = tool(&cache, &["repair"]);
    assert_eq!(code(&repair), 3, "{}", said(&repair));
    assert!(
        stderr(&repair).contains(&format!("pid {pid} on ")),
        "{}",
        said(&repair)
    );

    // Nothing of the cache changed, and the hub goes on as before.
    assert_eq!(made.hub.snapshot_settled(), before);
    assert_eq!(
        made.hub.metric("tinyhub_cache_objects_written_total"),
        written
    );
    let r = get(&format!("{}{NODE_PODS}", made.hub.url()), KUBELET);
    assert_eq!(r.status, 200);
    drop(made.cloud);
}

#[test]
fn a_hub_started_while_verify_runs_starts() {
    let Made {
        cloud,
        mut hub,
        dir: _dir,
    } = made("cache-cli-start-during");
    let cache = hub.spec.cache_dir.clone();
    let spec = hub.spec.clone();
    hub.kill9();
    // Enough problem lines to fill the pipe: verify blocks writing them, mid-walk, until
    // they are read.
    let web1 = std::fs::read(cache.join("kubelet/pods.v1.core/default/web-1")).unwrap();
    let long = "x".repeat(150);
    for i in 0..1_000 {
        let path = cache.join(format!("kubelet/pods.v1.core/default/tmp_{long}-{i}"));
        std::fs::write(&path, &web1).unwrap();
        chmod(&path, 0o600);
    }
    let mut verify = hub_command()
        .args(["cache", "verify", "--node-name=edge-1"])
        .arg(format!("--disk-cache-path={}", cache.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = verify.stderr.take().unwrap();
    let mut first = [0u8; 12];
    std::io::Read::read_exact(&mut err, &mut first).unwrap();
    assert_eq!(&first, b"hub stopped\n");
    // The hub starts (and is ready) while verify is still at work.
    let hub = Hub::start(&spec);
    assert_eq!(
        verify.try_wait().unwrap(),
        None,
        "verify ended before the hub started"
    );
    let mut out = String::new();
    std::io::Read::read_to_string(verify.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(verify.wait().unwrap().code(), Some(1));
    assert_eq!(out.lines().count(), 1_000, "{}", &out[..out.len().min(500)]);
    let r = get(&format!("{}{NODE_PODS}", hub.url()), KUBELET);
    assert_eq!(r.status, 200, "{}", r.text());
    drop(cloud);
}

/// Every entry below `dir` with its mode and content (a symlink's target), sorted.
fn tree(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if meta.is_dir() {
                pending.push(path.clone());
                Vec::new()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.push((path, meta.permissions().mode(), content));
        }
    }
    out.sort();
    out
}

#[test]
fn a_directory_that_is_no_cache_is_refused_and_left_as_it_was() {
    let dir = TempDir::new("cache-cli-etc");
    let etc = dir.path().join("etc");
    std::fs::create_dir_all(etc.join("ssl/certs")).unwrap();
    for name in ["passwd", "hosts"] {
        let from = Path::new("/etc").join(name);
        let bytes = std::fs::read(&from).unwrap_or_else(|_| format!("{name}\n").into_bytes());
        std::fs::write(etc.join(name), bytes).unwrap();
        chmod(&etc.join(name), 0o644);
    }
    std::fs::write(
        etc.join("ssl/certs/ca.pem"),
        b"-----BEGIN CERTIFICATE-----\n",
    )
    .unwrap();
    let before = tree(&etc);
    for args in [
        &["verify"][..],
        &["repair"][..],
        &["ls"][..],
        &["get", "kubelet", "pods", "web"][..],
    ] {
        let out = tool(&etc, args);
        assert_eq!(code(&out), 2, "{args:?}: {}", said(&out));
        assert!(
            stderr(&out).contains("is not a tinyhub or YurtHub cache"),
            "{args:?}: {}",
            said(&out)
        );
    }
    assert_eq!(tree(&etc), before);
}

#[test]
fn a_two_gigabyte_file_is_too_large_and_never_read() {
    let dir = TempDir::new("cache-cli-huge");
    let cache = dir.path().join("cache");
    let pods = cache.join("kubelet/pods.v1.core/default");
    std::fs::create_dir_all(&pods).unwrap();
    std::fs::create_dir(cache.join(".staging")).unwrap();
    for d in [
        &cache,
        &cache.join(".staging"),
        &cache.join("kubelet"),
        &cache.join("kubelet/pods.v1.core"),
        &pods,
    ] {
        chmod(d, 0o700);
    }
    let huge = std::fs::File::create(pods.join("huge")).unwrap();
    huge.set_len(2 << 30).unwrap();
    drop(huge);
    chmod(&pods.join("huge"), 0o600);
    // Under a 64 MiB address-space limit: reading the file whole would fail the tool. An
    // emulator reserves more than that for itself, so under one the limit is left out.
    let out = if emulated() {
        tool(&cache, &["verify"])
    } else {
        Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 65536 && exec \"$@\"")
            .arg("sh")
            .arg(hub_binary())
            .args(["cache", "verify", "--node-name=edge-1"])
            .arg(format!("--disk-cache-path={}", cache.display()))
            .output()
            .unwrap()
    };
    assert_eq!(code(&out), 1, "{}", said(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("kubelet/pods.v1.core/default/huge: too-large: 2147483648 bytes"),
        "{}",
        said(&out)
    );
    let get = tool(&cache, &["get", "kubelet", "pods", "-n", "default", "huge"]);
    assert_eq!(code(&get), 1, "{}", said(&get));
    assert!(stderr(&get).contains("too-large"), "{}", said(&get));
}

/// Copies `from` to `to`: directories and files with their modes, symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) {
    let meta = std::fs::symlink_metadata(from).unwrap();
    if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from).unwrap(), to).unwrap();
    } else if meta.is_dir() {
        std::fs::create_dir(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
        std::fs::set_permissions(to, meta.permissions()).unwrap();
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// A replacement a crash cut once its journal `.journal.12` was durable, planted in `cache`:
/// web-9 staged to be renamed in, ghost-0 (planted before) to go. web-9's bytes.
fn plant_replacement(cache: &Path) -> Vec<u8> {
    let web9 = serde_json::to_vec(&pod("default", "web-9", "edge-1")).unwrap();
    std::fs::create_dir_all(cache.join(".staging")).unwrap();
    std::fs::write(cache.join(".staging/r.7.0"), &web9).unwrap();
    std::fs::write(
        cache.join(".journal.12"),
        "tinyhub-journal 1\nrename\tr.7.0\tkubelet/pods.v1.core/default/web-9\n\
         delete\tkubelet/pods.v1.core/default/ghost-0\nend\t2\n",
    )
    .unwrap();
    for f in [".staging/r.7.0", ".journal.12"] {
        chmod(&cache.join(f), 0o600);
    }
    web9
}

/// Every regular file below `dir`, as (path below it, bytes).
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn a_repair_killed_at_random_moments_is_finished_by_the_next_and_loses_no_byte() {
    let made = made("cache-cli-kill");
    let dir = TempDir::new("cache-cli-kill-copies");
    let template = dir.path().join("template");
    copy_tree(&made.cache(), &template);
    drop(made);
    plant(&template);
    // Enough refused files that a repair takes a while to be killed in.
    let web1 = std::fs::read(template.join("kubelet/pods.v1.core/default/web-1")).unwrap();
    for i in 0..60 {
        let path = template.join(format!("kubelet/pods.v1.core/default/ghost-{i}"));
        std::fs::write(&path, &web1).unwrap();
        chmod(&path, 0o600);
    }
    // A replacement a crash cut once its journal was durable: the next repair rolls it
    // forward (web-9 in, ghost-0 out), killed or not.
    let web9 = plant_replacement(&template);
    let original = files(&template);
    // How long a whole repair takes, to spread the kills over it.
    let probe = dir.path().join("probe");
    copy_tree(&template, &probe);
    let started = Instant::now();
    let whole = tool(&probe, &["repair"]);
    assert_eq!(code(&whole), 0, "{}", said(&whole));
    let span = started.elapsed().as_micros().max(1_000) as u64;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    eprintln!("repair kills: seed {seed}, a whole repair {span} µs");
    let mut rng = seed;
    // Rounds whose kill fell mid-repair: something quarantined, no report written yet.
    let mut cut = 0;
    for round in 0..20 {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let delay = Duration::from_micros((rng >> 33) % span);
        let cache = dir.path().join(format!("run-{round}"));
        copy_tree(&template, &cache);
        let mut child = hub_command()
            .args(["cache", "repair", "--node-name=edge-1"])
            .arg(format!("--disk-cache-path={}", cache.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let quarantined = files(&cache.join(".quarantine"));
        if !quarantined.is_empty() && !quarantined.iter().any(|(p, _)| p.ends_with("REPAIR.json")) {
            cut += 1;
        }
        let rerun = tool(&cache, &["repair"]);
        assert_eq!(
            code(&rerun),
            0,
            "round {round}, killed after {delay:?}: {}",
            said(&rerun)
        );
        let verify = tool(&cache, &["verify"]);
        assert_eq!(code(&verify), 0, "round {round}: {}", said(&verify));
        // Every original byte is in the cache or in a quarantine, under its own path.
        let now = files(&cache);
        assert_eq!(
            std::fs::read(cache.join("kubelet/pods.v1.core/default/web-9")).ok(),
            Some(web9.clone()),
            "round {round}: the journal was not rolled forward"
        );
        for (rel, bytes) in &original {
            // The staged object is where its journal put it (above).
            if rel == ".relist" || rel == ".tinyhub.lock" || rel == ".staging/r.7.0" {
                continue;
            }
            let kept = now.iter().any(|(p, b)| {
                b == bytes
                    && (p == rel
                        || p.strip_prefix(".quarantine/")
                            .and_then(|p| p.split_once('/'))
                            .is_some_and(|(_, p)| p == rel))
            });
            assert!(kept, "round {round}, killed after {delay:?}: {rel} lost");
        }
        std::fs::remove_dir_all(&cache).unwrap();
    }
    assert!(
        cut > 0,
        "no kill fell in the middle of a repair (seed {seed})"
    );
}

/// The made cache with its hub stopped (as its supervisor stops it).
fn stopped(tag: &str) -> (Made, PathBuf) {
    let mut made = made(tag);
    signal(made.hub.pid(), "TERM");
    assert!(made.hub.wait_exit().success(), "{}", made.hub.logs());
    let cache = made.cache();
    (made, cache)
}

/// The one directory a repair made in the quarantine (the newest when there are more).
fn last_quarantine(cache: &Path) -> PathBuf {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(cache.join(".quarantine"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    runs.sort();
    runs.pop().expect("a quarantine directory")
}

#[test]
fn repair_finishes_journals_an_imports_too_and_deletes_nothing() {
    let (_made, cache) = stopped("cache-cli-journals");
    let pods = cache.join("kubelet/pods.v1.core");
    let ghost = std::fs::read(pods.join("default/web-1")).unwrap();
    std::fs::write(pods.join("default/ghost-0"), &ghost).unwrap();
    chmod(&pods.join("default/ghost-0"), 0o600);
    let web9 = plant_replacement(&cache);
    // An import cut after its commit point: a component staged whole, moved in by `.journal.13`.
    let dns = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns", "namespace": "kube-system"}}))
    .unwrap();
    let staged = cache.join(".staging/import.3/cache/coredns/services.v1.core/kube-system");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("dns"), &dns).unwrap();
    chmod(&staged.join("dns"), 0o600);
    let mut dir = staged.clone();
    while dir != cache.join(".staging") {
        chmod(&dir, 0o700);
        dir = dir.parent().unwrap().to_owned();
    }
    std::fs::write(
        cache.join(".journal.13"),
        "tinyhub-journal 1\nmove\t.staging/import.3/cache/coredns\tcoredns\nend\t1\n",
    )
    .unwrap();
    chmod(&cache.join(".journal.13"), 0o600);
    let before = files(&cache);

    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 1, "{}", said(&verify));
    let problems = problems_of(&stdout(&verify));
    for wanted in [
        (".journal.12", "pending-journal"),
        (".journal.13", "pending-journal"),
        ("kubelet/pods.v1.core/default/ghost-0", "names-other"),
    ] {
        assert!(
            problems.contains(&(wanted.0.to_owned(), wanted.1.to_owned())),
            "{wanted:?}: {}",
            said(&verify)
        );
    }
    let repair = tool(&cache, &["repair"]);
    assert_eq!(code(&repair), 0, "{}", said(&repair));
    assert_eq!(std::fs::read(pods.join("default/web-9")).unwrap(), web9);
    assert_eq!(
        std::fs::read(cache.join("coredns/services.v1.core/kube-system/dns")).unwrap(),
        dns,
        "the import's journal rolled forward: {}",
        said(&repair)
    );
    assert!(!pods.join("default/ghost-0").exists());
    // Nothing deleted: the file the journal deleted, and both journals, are in the quarantine.
    let q = last_quarantine(&cache);
    assert_eq!(
        std::fs::read(q.join("kubelet/pods.v1.core/default/ghost-0")).unwrap(),
        ghost
    );
    for journal in [".journal.12", ".journal.13"] {
        let kept = std::fs::read(q.join(journal)).unwrap_or_default();
        let was = before.iter().find(|(p, _)| p == journal).unwrap();
        assert_eq!(kept, was.1, "{journal}");
    }
    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 0, "{}", said(&verify));
}

#[test]
fn a_relist_record_repair_cannot_load_is_bad_and_a_killed_runs_staged_copies_are_no_obstacle() {
    let (_made, cache) = stopped("cache-cli-records");
    // JSON, but no relist record: repair's own load refuses it.
    std::fs::write(cache.join(".relist"), b"{}").unwrap();
    chmod(&cache.join(".relist"), 0o600);
    // What a repair killed while saving its marks leaves; a new run counts from 0 again.
    std::fs::create_dir_all(cache.join(".staging")).unwrap();
    for n in 0..4 {
        let leftover = cache.join(format!(".staging/relist.{n}"));
        std::fs::write(&leftover, br#"{"version":1,"collections":[]}"#).unwrap();
        chmod(&leftover, 0o600);
    }
    // A torn object: its collection is marked, so the marks are saved.
    let web2 = cache.join("kubelet/pods.v1.core/default/web-2");
    let bytes = std::fs::read(&web2).unwrap();
    std::fs::write(&web2, &bytes[..bytes.len() / 2]).unwrap();

    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 1, "{}", said(&verify));
    let problems = problems_of(&stdout(&verify));
    assert!(
        problems.contains(&(".relist".to_owned(), "bad-record".to_owned())),
        "{}",
        said(&verify)
    );
    let repair = tool(&cache, &["repair"]);
    assert_eq!(code(&repair), 0, "{}", said(&repair));
    let q = last_quarantine(&cache);
    assert_eq!(std::fs::read(q.join(".relist")).unwrap(), b"{}");
    let marks = read_json(&cache.join(".relist")).expect(".relist");
    assert_eq!(marks["version"], 1, "{marks}");
    assert_eq!(marks["collections"][0]["kind"], "pods.v1.core", "{marks}");
    for n in 0..4 {
        assert!(
            q.join(format!(".staging/relist.{n}")).exists(),
            "relist.{n}"
        );
    }
    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 0, "{}", said(&verify));
}

#[test]
fn a_quarantine_or_staging_that_is_no_directory_does_not_stop_repair() {
    let (made, cache) = stopped("cache-cli-offenders");
    let outside = made.dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, cache.join(".quarantine")).unwrap();
    if cache.join(".staging").is_dir() {
        std::fs::remove_dir(cache.join(".staging")).unwrap();
    }
    std::fs::write(cache.join(".staging"), b"not a directory").unwrap();
    chmod(&cache.join(".staging"), 0o600);
    let web2 = cache.join("kubelet/pods.v1.core/default/web-2");
    let bytes = std::fs::read(&web2).unwrap();
    std::fs::write(&web2, &bytes[..bytes.len() / 2]).unwrap();

    let repair = tool(&cache, &["repair"]);
    assert_eq!(code(&repair), 0, "{}", said(&repair));
    assert!(
        std::fs::symlink_metadata(cache.join(".quarantine"))
            .unwrap()
            .is_dir()
    );
    let q = last_quarantine(&cache);
    assert_eq!(std::fs::read_link(q.join(".quarantine")).unwrap(), outside);
    assert_eq!(
        std::fs::read(q.join(".staging")).unwrap(),
        b"not a directory"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing went through the symlink"
    );
    assert!(q.join("kubelet/pods.v1.core/default/web-2").exists());
    let verify = tool(&cache, &["verify"]);
    assert_eq!(code(&verify), 0, "{}", said(&verify));
}
