//! The gateway scenario in one test, meant for the emulated binary (`make cross-test` runs
//! the tests of cross/test/emulated-tests.txt with `TINYHUB_TEST_BIN` = the armv7 hub under
//! `qemu-arm-static`): the x86_64 stand-in cloud, reads and a watch through the hub, the
//! cloud stopped, the same reads from the hub's cache, and the hub's peak memory, reported
//! net of the emulator's own when `TINYHUB_QEMU_BASELINE_BIN` names a do-nothing program.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

/// Peak RSS of the runner alone running a program that sleeps a second.
fn runner_baseline_kib() -> Option<u64> {
    let program = std::env::var("TINYHUB_QEMU_BASELINE_BIN").ok()?;
    let mut child = runner_command(program)?
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let mut peak = 0;
    while child.try_wait().ok()?.is_none() {
        peak = peak.max(proc_status(child.id(), "VmHWM:"));
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(peak)
}

#[test]
fn cross_online_then_offline_with_memory_report() {
    let cloud = Cloud::start();
    for i in 0..20 {
        cloud.create("pods", json!({"metadata": {"name": format!("p{i}"), "namespace": "default", "labels": {"i": i.to_string()}},
                                   "spec": {"nodeName": "edge-1"}, "status": {"phase": "Running"}}));
    }
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
    let dir = TempDir::new("cross");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let idle = proc_status(hub.pid(), "VmRSS:");
    let url = |p: &str| format!("{}{p}", hub.url());

    let pods = get(
        &url("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1"),
        KUBELET,
    );
    assert_eq!(pods.status, 200);
    assert_eq!(pods.json()["items"].as_array().unwrap().len(), 20);
    assert_eq!(
        get(
            &url("/api/v1/namespaces/default/configmaps/settings"),
            KUBELET
        )
        .status,
        200
    );
    let rv = cloud.resource_version();
    let (status, body) = stream(
        &url(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=30"
        )),
        KUBELET,
    );
    assert_eq!(status, 200);
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "live", "namespace": "default"}}),
    );
    assert_eq!(
        Events::new(body).next_event().unwrap()["object"]["metadata"]["name"],
        "live"
    );
    assert!(
        hub.wait_cached(
            &["kubelet/configmaps.v1.core/default/live"],
            Duration::from_secs(30)
        ),
        "{}",
        hub.logs()
    );
    assert!(hub.wait_cached(
        &["kubelet/pods.v1.core/default/p19"],
        Duration::from_secs(30)
    ));

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(30)));
    let offline = get(
        &url("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=i+in+(3,4)"),
        KUBELET,
    )
    .json();
    let names: Vec<&str> = offline["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p3", "p4"]);
    assert_eq!(
        get(&url("/api/v1/namespaces/default/configmaps/live"), KUBELET).json()["metadata"]["name"],
        "live"
    );

    let peak = proc_status(hub.pid(), "VmHWM:");
    // The hub's own heap accounting is exact under an emulator too.
    let heap = hub.metric("tinyhub_heap_bytes").unwrap_or(0.0) as u64 / 1024;
    let heap_peak = hub.metric("tinyhub_heap_peak_bytes").unwrap_or(0.0) as u64 / 1024;
    let threads = threads(hub.pid());
    match runner_baseline_kib() {
        Some(baseline) => eprintln!(
            "MEASURED under {}: process peak RSS {peak} KiB (idle {idle} KiB), the emulator alone {baseline} KiB, \
             difference {} KiB (includes qemu's translated-code cache); the hub's own heap {heap} KiB, heap peak {heap_peak} KiB; {threads} threads",
            std::env::var("TINYHUB_TEST_RUNNER").unwrap_or_default(),
            peak.saturating_sub(baseline)
        ),
        None => eprintln!(
            "MEASURED: peak RSS {peak} KiB (idle {idle} KiB); the hub's own heap {heap} KiB, heap peak {heap_peak} KiB; {threads} threads"
        ),
    }
}
