//! Issue 34 item 4: a driver for the peer bench's memory row of one build (benches/hub/peer.rs
//! `memory_of`), ignored in the suite: the hub's VmRSS idle, then its VmHWM with
//! [`WATCHES`] kubelet watches open through it, and the difference per watch. Run it on a
//! release build:
//!
//! `TINYHUB_TEST_BIN=<target>/release/tinyhub cargo test --test integration watch_memory --
//! --ignored --nocapture`
//!
//! `TINYHUB_WATCH_MEMORY_HOLD=<seconds>` keeps the watches open that long after measuring
//! (to read the hub's `/proc/<pid>/smaps` or attach a debugger); the pid is printed.
//! `TINYHUB_WATCH_MEMORY_SMAPS=<prefix>` copies the hub's smaps idle and with the watches
//! open to `<prefix>.idle` and `<prefix>.watches`. `TINYHUB_WATCH_MEMORY_PAUSE=<seconds>`
//! waits that long, idle, before the watches open (to attach a debugger first).

use std::time::Duration;

use crate::support::Cloud;
use crate::support::hub::*;

/// Watches opened, as the bench's `WATCHES` (`TINYHUB_WATCH_MEMORY_WATCHES` sets another
/// number).
const WATCHES: u64 = 100;

#[test]
#[ignore = "a measurement driver: run it by hand (doc comment above)"]
fn watch_memory() {
    let wanted: u64 = std::env::var("TINYHUB_WATCH_MEMORY_WATCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(WATCHES);
    let cloud = Cloud::start();
    cloud.set_record_requests(false);
    let dir = TempDir::new("watch-memory");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--v=0"]);
    let hub = Hub::start(&spec);
    hub.wait_cache_quiet();
    std::thread::sleep(Duration::from_secs(3));
    let idle = proc_status(hub.pid(), "VmRSS:") * 1024;
    let smaps = std::env::var("TINYHUB_WATCH_MEMORY_SMAPS").ok();
    let copy_smaps = |suffix: &str| {
        if let Some(prefix) = &smaps {
            let text = std::fs::read(format!("/proc/{}/smaps", hub.pid())).expect("smaps");
            std::fs::write(format!("{prefix}.{suffix}"), text).expect("a copy of smaps");
        }
    };
    copy_smaps("idle");
    let heap = || {
        let text = get(&format!("{}/metrics", hub.serve_url()), "test").text();
        text.lines()
            .find_map(|l| l.strip_prefix("tinyhub_heap_bytes "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    let heap_idle = heap();
    if let Some(pause) = std::env::var("TINYHUB_WATCH_MEMORY_PAUSE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        println!("pid {}: idle, pausing {pause} s", hub.pid());
        std::thread::sleep(Duration::from_secs(pause));
    }
    let watchers = cloud.watchers("configmaps");
    let url = format!(
        "{}/api/v1/namespaces/mem-peer/configmaps?watch=1&resourceVersion={}",
        hub.url(),
        cloud.resource_version()
    );
    let streams: Vec<_> = (0..wanted)
        .map(|_| {
            let (status, body) = stream(&url, KUBELET);
            assert_eq!(status, 200);
            body
        })
        .collect();
    assert!(cloud.wait_for_watchers(
        "configmaps",
        watchers + wanted as usize,
        Duration::from_secs(30)
    ));
    std::thread::sleep(Duration::from_secs(1));
    let watches = proc_status(hub.pid(), "VmHWM:") * 1024;
    let rss = proc_status(hub.pid(), "VmRSS:") * 1024;
    copy_smaps("watches");
    let heap_watches = heap();
    let per_watch = watches.saturating_sub(idle) / wanted;
    println!(
        "pid {}: idle VmRSS {} KiB; with {wanted} watches VmHWM {} KiB (VmRSS {} KiB); \
         per watch {} B = {:.1} KiB; the hub's live heap {} -> {} B ({} B per watch)",
        hub.pid(),
        idle / 1024,
        watches / 1024,
        rss / 1024,
        per_watch,
        per_watch as f64 / 1024.0,
        heap_idle,
        heap_watches,
        heap_watches.saturating_sub(heap_idle) / wanted
    );
    if let Some(hold) = std::env::var("TINYHUB_WATCH_MEMORY_HOLD")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        std::thread::sleep(Duration::from_secs(hold));
    }
    drop(streams);
}
