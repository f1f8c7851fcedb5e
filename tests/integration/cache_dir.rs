//! The directories at start-up: a cache directory (edge mode) that cannot be used stops the
//! hub with one line naming it and why, and exit status 78 (a configuration error: the
//! systemd unit does not restart on it); a second hub on the same cache or `--root-dir` is
//! refused naming the first one, before it touches anything of it; a hub killed with
//! SIGKILL leaves nothing that blocks the next. The tests that need a small filesystem
//! mount a tmpfs in a mount namespace of their own, so nothing is mounted on the machine.

use std::io::Read;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::mount::{Tmpfs, run_with_private_mounts};
use crate::support::namespace::{enter_child, is_root};

/// What a refused start's line begins its context with (`... the cache directory`, `...
/// the root directory`).
const REFUSED: &str = "cannot use the ";
/// sysexits.h's `EX_CONFIG`: the hub's status when it refuses its directories.
const EX_CONFIG: i32 = 78;
/// Set in the environment of a test re-run in its own namespaces.
const NS_CHILD: &str = "TINYHUB_CACHE_DIR_NS_CHILD";

/// Runs a hub that must refuse to start: its exit status and its log. Panics when it is still
/// running after a generous deadline (it would have started where it must not).
fn refused(spec: &HubSpec) -> (ExitStatus, String) {
    let mut child = spec.command().spawn().expect("start the tinyhub binary");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        log
    });
    let limit = Duration::from_secs(if emulated() { 60 } else { 20 });
    let mut status = None;
    eventually(limit, || {
        status = child.try_wait().expect("wait for the hub");
        status.is_some()
    });
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the hub kept running; its log:\n{}",
            reader.join().unwrap_or_default()
        );
    };
    (status, reader.join().expect("the log reader"))
}

/// The one line of a refused start, checked: exited 78, never ready, the line names `path`.
fn refusal_line(spec: &HubSpec, path: &str) -> String {
    let (status, log) = refused(spec);
    assert_eq!(status.code(), Some(EX_CONFIG), "{status:?}; log:\n{log}");
    assert!(!log.contains("tinyhub is ready"), "{log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(REFUSED)).collect();
    assert_eq!(lines.len(), 1, "one line says why; log:\n{log}");
    assert!(lines[0].contains(path), "{}", lines[0]);
    lines[0].to_owned()
}

/// ConfigMap `default/settings` (`k: v`) in the cloud, for a hub to cache.
fn create_settings(cloud: &Cloud) {
    cloud.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
}

#[test]
fn a_cache_path_that_is_a_file_stops_an_edge_hub_and_not_a_cloud_one() {
    let cloud = Cloud::start();
    let dir = TempDir::new("cache-is-file");
    let blocked = dir.path().join("not-a-directory");
    std::fs::write(&blocked, "x").unwrap();
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.cache_dir = blocked.clone();
    let line = refusal_line(&spec, &blocked.display().to_string());
    assert!(line.contains("not a directory"), "{line}");
    assert_eq!(
        std::fs::read(&blocked).unwrap(),
        b"x",
        "the file is untouched"
    );
    // Cloud mode keeps no cache: the same path does not matter there.
    let cloud_hub = Hub::start(&spec.with(&["--working-mode=cloud"]));
    assert_eq!(
        get(&format!("{}/api/v1/namespaces", cloud_hub.url()), KUBELET).status,
        200
    );
}

#[test]
fn a_cache_on_a_read_only_filesystem_stops_an_edge_hub() {
    run_with_private_mounts("cache_dir::read_only_child", NS_CHILD);
}

#[test]
#[ignore = "run by a_cache_on_a_read_only_filesystem_stops_an_edge_hub in its namespaces"]
fn read_only_child() {
    enter_child(NS_CHILD);
    let dir = TempDir::new("cache-ro");
    let mount_point = dir.path().join("ro");
    let tmpfs = Tmpfs::mount(&mount_point, "4m");
    let cloud = Cloud::start();
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.cache_dir = mount_point.join("hub");
    // A cache an earlier start filled, then the filesystem went read-only (flash worn out,
    // an overlay gone): mode bits say nothing of it, and root ignores them anyway.
    {
        let hub = Hub::start(&spec);
        assert_eq!(get(&format!("{}/version", hub.url()), KUBELET).status, 200);
        assert!(hub.wait_cached(&["version"], Duration::from_secs(30)));
    }
    tmpfs.remount_read_only().expect("remount read-only");
    let line = refusal_line(&spec, &spec.cache_dir.display().to_string());
    assert!(line.contains("Read-only file system"), "{line}");
    assert!(
        spec.cache_dir.join("version").exists(),
        "the cache is untouched"
    );
}

#[test]
fn a_full_cache_filesystem_only_warns_and_what_is_cached_answers() {
    run_with_private_mounts("cache_dir::full_disk_child", NS_CHILD);
}

#[test]
#[ignore = "run by a_full_cache_filesystem_only_warns_and_what_is_cached_answers in its namespaces"]
fn full_disk_child() {
    enter_child(NS_CHILD);
    let dir = TempDir::new("cache-full");
    let mount_point = dir.path().join("full");
    let tmpfs = Tmpfs::mount(&mount_point, "2m");
    let cloud = Cloud::start();
    create_settings(&cloud);
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.cache_dir = mount_point.join("hub");
    let path = "/api/v1/namespaces/default/configmaps/settings";
    let mut hub = Hub::start(&spec);
    assert_eq!(get(&format!("{}{path}", hub.url()), KUBELET).status, 200);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(30)
    ));
    hub.kill9();
    // As a cache written by a tinyhub from before the lock: no note, and no room for one.
    std::fs::remove_file(spec.cache_dir.join(LOCK_FILE)).unwrap();
    tmpfs.fill();
    // The next start on the full filesystem (and the cloud gone) comes up and answers
    // from what is cached: stopping it would leave the node with no answers at all.
    cloud.stop();
    let hub = Hub::start(&spec);
    for warning in ["the cache is full", "cannot write "] {
        assert!(
            hub.wait_log(warning, Duration::from_secs(10)),
            "{warning}: {}",
            hub.logs()
        );
    }
    let offline = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(offline.status, 200, "{}", offline.text());
    assert_eq!(offline.json()["data"]["k"], "v");
}

#[test]
fn a_second_hub_on_the_same_cache_is_refused_but_a_killed_ones_lock_blocks_nothing() {
    let cloud = Cloud::start();
    create_settings(&cloud);
    let dir = TempDir::new("cache-lock");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let lock_file = spec.cache_dir.join(LOCK_FILE);
    let first = Hub::start(&spec);
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps/settings",
        first.url()
    );
    assert_eq!(get(&url, KUBELET).status, 200);
    assert!(first.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(30)
    ));

    // Another root dir: the cache's lock is what refuses it.
    let mut second = spec.clone();
    second.root_dir = dir.path().join("root-2");
    let line = refusal_line(&second, &spec.cache_dir.display().to_string());
    let holder = format!("pid {} on ", first.pid());
    assert!(line.contains(&holder), "{line}");
    // The refused hub took nothing from the first: it still answers, online and from its
    // cache.
    assert_eq!(get(&url, KUBELET).status, 200);
    let note = std::fs::read_to_string(&lock_file).unwrap();
    assert!(note.starts_with(&holder), "{note}");

    // Killed with SIGKILL, the first leaves its lock file; the next start takes it over and
    // answers from the cache the first one filled.
    let next = first.restart();
    let note = std::fs::read_to_string(&lock_file).unwrap();
    assert!(
        note.starts_with(&format!("pid {} on ", next.pid())),
        "{note}"
    );
    cloud.stop();
    let offline = get(
        &format!(
            "{}/api/v1/namespaces/default/configmaps/settings",
            next.url()
        ),
        KUBELET,
    );
    assert_eq!(offline.status, 200, "{}", offline.text());
    assert_eq!(offline.json()["data"]["k"], "v");
}

/// Every file under `dir` (a hub's lock note aside) with its content.
fn contents_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect()
}

#[test]
fn a_second_hub_on_the_same_root_dir_is_refused_before_it_touches_the_identity() {
    let cloud = Cloud::start();
    cloud.add_bootstrap_token("abcdef", "0123456789abcdef");
    let dir = TempDir::new("root-dir-lock");
    let join = |server: &str| {
        HubSpec::bootstrap(
            dir.path(),
            &[
                &format!("--server-addr={server}"),
                "--join-token=abcdef.0123456789abcdef",
                &format!("--discovery-token-ca-cert-hash={}", cloud.ca_pin()),
            ],
        )
    };
    let first = Hub::start(&join(&cloud.url()));
    assert!(
        first.wait_metric_at_least(
            "tinyhub_client_certificate_rotations_total",
            1.0,
            Duration::from_secs(30)
        ),
        "no client certificate: {}",
        first.logs()
    );
    // And its serving certificate: nothing of the identity is being written any more.
    assert!(
        first.wait_https(Duration::from_secs(30)).is_some(),
        "{}",
        first.logs()
    );
    let identity = contents_under(&first.spec.root_dir);
    assert!(
        identity
            .iter()
            .any(|(f, _)| f.starts_with(first.spec.root_dir.join("pki"))),
        "{identity:?}"
    );

    // Another cloud on the same paths: its identity would be stale and forgotten, had the
    // lock not refused it first.
    let line = refusal_line(
        &join("https://127.0.0.1:1"),
        &first.spec.root_dir.display().to_string(),
    );
    assert!(line.contains("the root directory"), "{line}");
    assert!(line.contains(&format!("pid {} on ", first.pid())), "{line}");
    assert_eq!(contents_under(&first.spec.root_dir), identity);
}

#[test]
fn a_cache_directory_the_hub_may_not_write_stops_it() {
    if !is_root() {
        eprintln!(
            "SKIPPED: a_cache_directory_the_hub_may_not_write_stops_it needs root to run the hub as uid 65534"
        );
        return;
    }
    let cloud = Cloud::start();
    let dir = TempDir::new("cache-not-writable");
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.prefix = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ]
    .map(str::to_owned)
    .to_vec();
    // The kubeconfig and the root dir are the service user's; the cache is root's, 0755, as
    // a package or an image may leave /etc/kubernetes/cache.
    chown_nobody(dir.path());
    std::fs::create_dir(&spec.cache_dir).unwrap();
    let line = refusal_line(&spec, &spec.cache_dir.display().to_string());
    assert!(line.contains("Permission denied"), "{line}");
    assert_eq!(
        std::fs::read_dir(&spec.cache_dir).unwrap().count(),
        0,
        "nothing was written in the cache"
    );
}

/// Hands `dir` and what it holds to uid and gid 65534 (nobody).
fn chown_nobody(dir: &std::path::Path) {
    let status = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(status.success());
}

#[test]
fn a_cache_in_the_root_dir_itself_is_locked_once_and_the_hub_starts() {
    let cloud = Cloud::start();
    let dir = TempDir::new("cache-is-root");
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    spec.cache_dir = spec.root_dir.clone();
    // One directory, one lock: the hub does not refuse itself.
    let hub = Hub::start(&spec);
    assert_eq!(get(&format!("{}/version", hub.url()), KUBELET).status, 200);
    let line = refusal_line(&spec, &spec.root_dir.display().to_string());
    assert!(line.contains(&format!("pid {} on ", hub.pid())), "{line}");
}
