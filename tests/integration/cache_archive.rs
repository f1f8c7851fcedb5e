//! Issue 33: `tinyhub cache export` / `import`. A cache made by the real hub, exported,
//! wiped and imported, serves the same offline answers; another node's archive, credentials
//! without the flag, hostile archives (cut short, `..`, absolute paths, links, devices, an
//! over-size file, pax `linkpath`, a file where a kind directory belongs, a manifest lying
//! about its counts) are refused with one line and exit 2, the cache and its parent as they
//! were; an import killed at any moment leaves the cache wholly old or wholly new; a full
//! disk is exit 4, the cache unchanged.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::mount::{Tmpfs, run_with_private_mounts};
use crate::support::namespace::enter_child;

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const AGE: &str = "X-Tinyhub-Cache-Age";
const NS_CHILD: &str = "TINYHUB_CACHE_ARCHIVE_NS_CHILD";

/// The offline answers compared: kubelet's pod list, a Secret get, kube-proxy's slices.
const READS: [(&str, &str); 3] = [
    ("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", KUBELET),
    ("/api/v1/namespaces/default/secrets/db-password", KUBELET),
    ("/apis/discovery.k8s.io/v1/endpointslices", KUBE_PROXY),
];

/// Runs `tinyhub cache <args>` against `spec`'s cache and root with `--node-name=<node>`.
fn cache_cmd(spec: &HubSpec, node: &str, args: &[&str]) -> Output {
    cache_command(spec, node, args)
        .output()
        .expect("run tinyhub cache")
}

fn cache_command(spec: &HubSpec, node: &str, args: &[&str]) -> Command {
    let mut cmd = hub_command();
    cmd.arg("cache")
        .args(args)
        .arg(format!("--disk-cache-path={}", spec.cache_dir.display()))
        .arg(format!("--root-dir={}", spec.root_dir.display()))
        .arg(format!("--node-name={node}"))
        .stdin(Stdio::null());
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A cloud with this node's pods, a Secret, the apiserver's slices; a hub that read them as
/// kubelet and kube-proxy and asked for a token, then drained (its `.synced` written).
fn cached(dir: &Path, pods: &[&str]) -> (Cloud, HubSpec) {
    let cloud = Cloud::start();
    cloud.kubernetes_service_fixtures();
    for name in pods {
        cloud.create(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}}),
        );
    }
    cloud.create(
        "secrets",
        json!({"metadata": {"name": "db-password", "namespace": "default"}, "data": {"p": "c2VjcmV0"}}),
    );
    let spec = HubSpec::for_cloud(&cloud, dir);
    let mut hub = Hub::start(&spec);
    for (path, ua) in READS {
        let reply = get(&format!("{}{path}", hub.url()), ua);
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    }
    let token = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"audiences": ["api"], "expirationSeconds": 3600}});
    let reply = call(
        "POST",
        &format!(
            "{}/api/v1/namespaces/default/serviceaccounts/builder/token",
            hub.url()
        ),
        KUBELET,
        &[("content-type", "application/json")],
        Some(&serde_json::to_vec(&token).unwrap()),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert!(
        hub.wait_cached(
            &["kubelet/secrets.v1.core/default/db-password"],
            Duration::from_secs(30)
        ) && eventually(Duration::from_secs(30), || {
            !files_under(&spec.cache_dir.join("kubelet/tokens")).is_empty()
                && !files_under(&spec.cache_dir.join("kube-proxy")).is_empty()
                && files_under(&spec.cache_dir.join("kubelet/pods.v1.core")).len() == pods.len()
        }),
        "{}",
        hub.logs()
    );
    signal(hub.pid(), "TERM");
    assert!(hub.wait_exit().success(), "{}", hub.logs());
    (cloud, spec)
}

/// The offline answers (the cloud stopped): each read's status, body and age.
fn offline_answers(spec: &HubSpec) -> Vec<(u16, Vec<u8>, Option<u64>)> {
    let hub = Hub::start(spec);
    READS
        .iter()
        .map(|(path, ua)| {
            let reply = get(&format!("{}{path}", hub.url()), ua);
            let age = reply.header(AGE).and_then(|a| a.parse().ok());
            (reply.status, reply.body.clone(), age)
        })
        .collect()
}

/// Names in a tar.gz, as `tar tzf` lists them.
fn listing(archive: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("tzf")
        .arg(archive)
        .output()
        .expect("run tar");
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn export_wipe_import_and_the_hub_serves_the_same_answers_offline() {
    let dir = TempDir::new("archive-roundtrip");
    let (cloud, spec) = cached(dir.path(), &["web-0", "web-1"]);
    cloud.stop();
    let before = offline_answers(&spec);
    for (status, body, age) in &before {
        assert_eq!(*status, 200, "{}", String::from_utf8_lossy(body));
        assert!(age.is_some());
    }

    let archive = dir.path().join("edge-1.tar.gz");
    let out = cache_cmd(&spec, "edge-1", &["export", archive.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("hub stopped"), "{}", stderr(&out));
    let names = listing(&archive);
    assert_eq!(names[0], "tinyhub-cache/MANIFEST.json");
    assert!(
        names
            .iter()
            .any(|n| n.ends_with("secrets.v1.core/default/db-password"))
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("/tokens/") || n.ends_with(".grants") || n.starts_with("root/")),
        "{names:?}"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&archive).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    std::fs::remove_dir_all(&spec.cache_dir).unwrap();
    // Another node's archive is refused; the node's own is taken.
    let out = cache_cmd(&spec, "edge-2", &["import", archive.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allow-other-node"),
        "{}",
        stderr(&out)
    );
    let out = cache_cmd(&spec, "edge-1", &["import", archive.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported edge-1's cache"));

    let after = offline_answers(&spec);
    for ((status, body, age), (status0, body0, age0)) in after.iter().zip(&before) {
        assert_eq!(
            (status, body),
            (status0, body0),
            "{}",
            String::from_utf8_lossy(body)
        );
        // The cloud's word is as old as it was, never "fresh at import".
        assert!(age.unwrap() >= age0.unwrap(), "{age:?} < {age0:?}");
    }

    // A directory that is no cache (a copy of /etc) is refused, nothing written in it.
    let etc = HubSpec {
        cache_dir: dir.path().join("etc"),
        ..spec.clone()
    };
    std::fs::create_dir_all(&etc.cache_dir).unwrap();
    std::fs::write(etc.cache_dir.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    std::fs::write(etc.cache_dir.join("hosts"), "127.0.0.1 localhost\n").unwrap();
    let before_etc = tree(&etc.cache_dir);
    let out = cache_cmd(
        &etc,
        "edge-1",
        &["import", archive.to_str().unwrap(), "--replace"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a tinyhub or YurtHub cache"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree(&etc.cache_dir), before_etc);

    // --allow-other-node takes it, and says so.
    let other = HubSpec {
        cache_dir: dir.path().join("other"),
        ..spec.clone()
    };
    let out = cache_cmd(
        &other,
        "edge-2",
        &["import", archive.to_str().unwrap(), "--allow-other-node"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("WARNING: the archive is node \"edge-1\"'s"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn credentials_travel_only_when_asked_and_said_loudly() {
    let dir = TempDir::new("archive-creds");
    let (_cloud, spec) = cached(dir.path(), &["web-0"]);
    // Beside a running hub: read-only, and said.
    let hub = Hub::start(&spec);
    let archive = dir.path().join("creds.tar.gz");
    let out = cache_cmd(
        &spec,
        "edge-1",
        &["export", archive.to_str().unwrap(), "--with-credentials"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("hub running ("), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("WARNING: the archive holds this node's private keys and tokens"),
        "{}",
        stderr(&out)
    );
    // An import refuses while the hub runs, naming it.
    let out = cache_cmd(
        &spec,
        "edge-1",
        &["import", archive.to_str().unwrap(), "--replace"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a hub runs on") && stderr(&out).contains("(pid "),
        "{}",
        stderr(&out)
    );
    drop(hub);
    assert!(
        listing(&archive)
            .iter()
            .any(|n| n.starts_with("cache/kubelet/tokens/default/builder/"))
    );

    // Without the flag, an import leaves them out and says so.
    let plain = HubSpec {
        cache_dir: dir.path().join("plain"),
        ..spec.clone()
    };
    let out = cache_cmd(&plain, "edge-1", &["import", archive.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--with-credentials installs them"),
        "{}",
        stderr(&out)
    );
    assert!(files_under(&plain.cache_dir.join("kubelet/tokens")).is_empty());
    let with = HubSpec {
        cache_dir: dir.path().join("with"),
        ..spec.clone()
    };
    let out = cache_cmd(
        &with,
        "edge-1",
        &["import", archive.to_str().unwrap(), "--with-credentials"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("WARNING: installed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(files_under(&with.cache_dir.join("kubelet/tokens")).len(), 1);
}

// Hostile archives, built here byte by byte.

fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let digits = format!("{value:0width$o}");
    field[..width].copy_from_slice(digits.as_bytes());
}

fn header(name: &str, kind: u8, size: u64) -> Vec<u8> {
    let mut block = vec![0u8; 512];
    block[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut block[100..108], 0o600);
    octal(&mut block[108..116], 0);
    octal(&mut block[116..124], 0);
    octal(&mut block[124..136], size);
    octal(&mut block[136..148], 0);
    block[156] = kind;
    block[257..263].copy_from_slice(b"ustar\0");
    block[263..265].copy_from_slice(b"00");
    block[148..156].copy_from_slice(b"        ");
    let sum: u64 = block.iter().map(|&b| u64::from(b)).sum();
    block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    block
}

fn entry(name: &str, kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = header(name, kind, body.len() as u64);
    out.extend_from_slice(body);
    out.resize(out.len().next_multiple_of(512), 0);
    out
}

fn pax(key: &str, value: &str) -> Vec<u8> {
    let rest = key.len() + value.len() + 3;
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    entry(
        "PaxHeaders/x",
        b'x',
        format!("{len} {key}={value}\n").as_bytes(),
    )
}

/// A gzip'd archive: a manifest for edge-1 saying `files` and `bytes`, then `entries`.
fn archive(files: u64, bytes: u64, entries: &[Vec<u8>]) -> Vec<u8> {
    let manifest = json!({"format": 1, "nodeName": "edge-1", "createdAt": "2026-01-01T00:00:00Z",
                          "tinyhub": "0.1.0", "withCredentials": false, "files": files, "bytes": bytes});
    let mut tar = entry(
        "tinyhub-cache/MANIFEST.json",
        b'0',
        manifest.to_string().as_bytes(),
    );
    for e in entries {
        tar.extend_from_slice(e);
    }
    tar.extend_from_slice(&[0; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

/// Every path below `dir` with its bytes (directories `None`), the lock's note's content
/// left out (the import's open rewrites it).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(path.clone(), None);
                walk(&path, out);
            } else if path.file_name().is_some_and(|n| n == LOCK_FILE) {
                out.insert(path, None);
            } else {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

#[test]
fn hostile_archives_are_refused_with_one_line_and_nothing_changes() {
    let dir = TempDir::new("archive-hostile");
    let (_cloud, spec) = cached(dir.path(), &["web-0"]);
    let good = dir.path().join("good.tar.gz");
    let out = cache_cmd(&spec, "edge-1", &["export", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let good_bytes = std::fs::read(&good).unwrap();

    let pod = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"default"}}"#;
    let n = pod.len() as u64;
    let in_pods = "cache/kubelet/pods.v1.core/default/x";
    let big = 9 * 1024 * 1024;
    let mut hostile: Vec<(String, Vec<u8>, &str)> = vec![
        (
            "dot-dot".into(),
            archive(1, n, &[entry("cache/../x", b'0', pod)]),
            "\"..\"",
        ),
        (
            "absolute".into(),
            archive(1, n, &[entry("/etc/x", b'0', pod)]),
            "absolute",
        ),
        (
            "symlink".into(),
            archive(1, n, &[entry(in_pods, b'2', b"")]),
            "symlink",
        ),
        (
            "hard link".into(),
            archive(1, n, &[entry(in_pods, b'1', b"")]),
            "hard link",
        ),
        (
            "device".into(),
            archive(1, n, &[entry(in_pods, b'3', b"")]),
            "device",
        ),
        (
            "over-size".into(),
            archive(1, big, &[entry(in_pods, b'0', &vec![b' '; big as usize])]),
            "more than the cache's largest",
        ),
        (
            "pax linkpath".into(),
            archive(
                1,
                n,
                &[[pax("linkpath", "/etc/passwd"), entry(in_pods, b'0', pod)].concat()],
            ),
            "linkpath",
        ),
        (
            "file for a kind dir".into(),
            archive(1, n, &[entry("cache/kubelet/pods.v1.core", b'0', pod)]),
            "foreign",
        ),
        (
            "lying manifest".into(),
            archive(2, 2 * n, &[entry(in_pods, b'0', pod)]),
            "its manifest says 2",
        ),
    ];
    // Cut at 10 offsets spread over the good archive.
    for i in 1..=10 {
        let cut = good_bytes.len() * i / 11;
        hostile.push((
            format!("cut at {cut}"),
            good_bytes[..cut].to_vec(),
            "damaged",
        ));
    }
    let before = tree(dir.path());
    for (what, bytes, reason) in hostile {
        let path = dir.path().join("hostile.tar.gz");
        std::fs::write(&path, &bytes).unwrap();
        let out = cache_cmd(
            &spec,
            "edge-1",
            &["import", path.to_str().unwrap(), "--replace"],
        );
        std::fs::remove_file(&path).unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.contains(reason), "{what}: {err}");
        assert_eq!(tree(dir.path()), before, "{what} changed the tree");
        assert!(!Path::new("/etc/x").exists() && !dir.path().join("x").exists());
    }
    // A good archive the hub's bound could not keep.
    let out = cache_cmd(
        &spec,
        "edge-1",
        &[
            "import",
            good.to_str().unwrap(),
            "--replace",
            "--cache-max-bytes=100",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--cache-max-bytes=100"), "{err}");
    assert_eq!(
        tree(dir.path()),
        before,
        "the bounded import changed the tree"
    );
}

#[test]
fn an_import_killed_at_any_moment_leaves_the_cache_wholly_old_or_new() {
    let dir = TempDir::new("archive-kill");
    // The archive holds 60 new pods; the cache holds 3 old ones.
    let new_pods: Vec<String> = (0..60).map(|i| format!("new-{i:02}")).collect();
    let names: Vec<&str> = new_pods.iter().map(String::as_str).collect();
    for sub in ["new", "old"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let (_cloud_new, new_spec) = cached(&dir.path().join("new"), &names);
    let archive = dir.path().join("new.tar.gz");
    let out = cache_cmd(&new_spec, "edge-1", &["export", archive.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (_cloud_old, spec) = cached(&dir.path().join("old"), &["old-0", "old-1", "old-2"]);
    let pods_of = |spec: &HubSpec| -> Vec<String> {
        let mut names: Vec<String> = files_under(&spec.cache_dir.join("kubelet/pods.v1.core"))
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let old = pods_of(&spec);
    let mut new = new_pods.clone();
    new.sort();

    // How long a whole import takes here, then kills spread over it.
    let saved = dir.path().join("saved");
    copy_tree(&spec.cache_dir, &saved);
    let started = Instant::now();
    let out = cache_cmd(
        &spec,
        "edge-1",
        &["import", archive.to_str().unwrap(), "--replace"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let whole = started.elapsed();
    // Kills spread over the import, then aimed between the latest that left it old and the
    // earliest that left it new: where the journal is in the root (the commit point passed,
    // the journal not removed yet), which the next start must roll forward.
    let (mut saw_old, mut saw_new, mut mid) = (0, 0, 0);
    let has_journal = |dir: &Path| {
        std::fs::read_dir(dir).is_ok_and(|mut entries| {
            entries
                .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".journal.")))
        })
    };
    let mut round = 0u32;
    while round < 20 || (mid == 0 && round < 60) {
        // Timed kills first; then each kill is aimed: the root is watched, and the import
        // killed the moment its journal shows.
        let aimed = round >= 20;
        let delay = whole * round.min(20) / 16;
        round += 1;
        std::fs::remove_dir_all(&spec.cache_dir).unwrap();
        copy_tree(&saved, &spec.cache_dir);
        let mut child = cache_command(
            &spec,
            "edge-1",
            &["import", archive.to_str().unwrap(), "--replace"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        if aimed {
            let until = Instant::now() + whole * 4;
            while !has_journal(&spec.cache_dir)
                && Instant::now() < until
                && child.try_wait().unwrap().is_none()
            {}
        } else {
            std::thread::sleep(delay);
        }
        let _ = child.kill();
        let _ = child.wait();
        let journal = has_journal(&spec.cache_dir);
        // The next start recovers: kubelet's pods are all old or all new, never a mixture.
        let hub = Hub::start(&spec);
        let reply = get(&format!("{}/v1/healthz", hub.serve_url()), KUBELET);
        assert_eq!(reply.status, 200);
        drop(hub);
        let found = pods_of(&spec);
        if found == old {
            assert!(!journal, "kill {round}: a journal, and the old cache");
            saw_old += 1;
        } else {
            assert_eq!(found, new, "kill {round} (after {delay:?}, aimed: {aimed})");
            saw_new += 1;
            mid += usize::from(journal);
        }
        assert!(files_under(&spec.cache_dir.join(".staging")).is_empty());
    }
    eprintln!(
        "a whole import took {whole:?}; after {round} kills: {saw_old} old, {saw_new} new, {mid} between the journal's rename and its removal"
    );
    assert!(saw_old > 0 && saw_new > 0, "{saw_old} old, {saw_new} new");
    assert!(
        mid > 0,
        "no kill fell between the journal's rename and its removal"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn an_import_onto_a_full_disk_fails_with_4_and_leaves_the_cache() {
    run_with_private_mounts("cache_archive::full_disk_child", NS_CHILD);
}

#[test]
#[ignore = "run by an_import_onto_a_full_disk_fails_with_4_and_leaves_the_cache in its namespaces"]
fn full_disk_child() {
    enter_child(NS_CHILD);
    let dir = TempDir::new("archive-full");
    let mount_point = dir.path().join("full");
    let _tmpfs = Tmpfs::mount(&mount_point, "4m");
    // 60 pods of 100 KiB each: 6 MiB, more than the filesystem holds.
    let pad = "p".repeat(100 * 1024);
    let mut entries = Vec::new();
    let mut bytes = 0;
    for i in 0..60 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": format!("big-{i}"), "namespace": "default",
                                      "annotations": {"pad": pad}}});
        let body = serde_json::to_vec(&pod).unwrap();
        bytes += body.len() as u64;
        entries.push(entry(
            &format!("cache/kubelet/pods.v1.core/default/big-{i}"),
            b'0',
            &body,
        ));
    }
    let path = dir.path().join("big.tar.gz");
    std::fs::write(&path, archive(60, bytes, &entries)).unwrap();
    let spec = HubSpec {
        cache_dir: mount_point.join("cache"),
        ..HubSpec::bootstrap(dir.path(), &[])
    };
    // A cache the hub made: a staging directory and one pod.
    let pods = spec.cache_dir.join("kubelet/pods.v1.core/default");
    std::fs::create_dir_all(spec.cache_dir.join(".staging")).unwrap();
    std::fs::write(spec.cache_dir.join(LOCK_FILE), "").unwrap();
    std::fs::create_dir_all(&pods).unwrap();
    let old: Value = json!({"metadata": {"name": "old", "namespace": "default"}});
    std::fs::write(pods.join("old"), old.to_string()).unwrap();
    let before = tree(&mount_point);
    let out = cache_cmd(
        &spec,
        "edge-1",
        &["import", path.to_str().unwrap(), "--replace"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("No space left"), "{}", stderr(&out));
    assert_eq!(tree(&mount_point), before);
}
