//! The cache directory at start-up (edge mode): one that cannot be used stops the hub with
//! one line naming it and why, and a second hub on the same directory is refused naming the
//! first one's pid, while a hub killed with SIGKILL leaves nothing that blocks the next.

use std::io::Read;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::mount::Tmpfs;

/// The line a refused start logs.
const REFUSED: &str = "cannot use the cache directory";

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

/// The one line of a refused start, checked: exited non-zero, never ready, the line names
/// `path`.
fn refusal_line(spec: &HubSpec, path: &str) -> String {
    let (status, log) = refused(spec);
    assert!(!status.success(), "{status:?}; log:\n{log}");
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
    let dir = TempDir::new("cache-ro");
    let mount_point = dir.path().join("ro");
    let Some(tmpfs) = Tmpfs::mount_or_skip(&mount_point, "4m", "read-only") else {
        return;
    };
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
    let dir = TempDir::new("cache-full");
    let mount_point = dir.path().join("full");
    let Some(tmpfs) = Tmpfs::mount_or_skip(&mount_point, "2m", "full-disk") else {
        return;
    };
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
    tmpfs.fill();
    // The next start on the full filesystem (and the cloud gone) comes up and answers
    // from what is cached: stopping it would leave the node with no answers at all.
    cloud.stop();
    let hub = Hub::start(&spec);
    assert!(
        hub.wait_log("the cache is full", Duration::from_secs(10)),
        "{}",
        hub.logs()
    );
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

    let line = refusal_line(&spec, &spec.cache_dir.display().to_string());
    assert!(line.contains(&format!("pid {}", first.pid())), "{line}");
    // The refused hub took nothing from the first: it still answers, online and from its
    // cache.
    assert_eq!(get(&url, KUBELET).status, 200);
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap().trim(),
        first.pid().to_string()
    );

    // Killed with SIGKILL, the first leaves its lock file; the next start takes it over and
    // answers from the cache the first one filled.
    let next = first.restart();
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap().trim(),
        next.pid().to_string()
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
