//! Issue 28 item 6, what the hub does with itself at start: it raises its open-file soft limit
//! to the hard limit and says both in one line (250 watches used 1,015 of 1,024 descriptors),
//! and it no longer says that response filters are not implemented (they are).

use crate::support::Cloud;
use crate::support::hub::*;

/// The `Max open files` line of `/proc/<pid>/limits`: (soft, hard).
fn open_files_limits(pid: &str) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "{line}");
    (numbers[0], numbers[1])
}

#[test]
fn the_hub_raises_its_open_file_soft_limit_to_the_hard_limit() {
    let (_, hard) = open_files_limits("self");
    let low = (hard / 2).min(256);
    let cloud = Cloud::start();
    let dir = TempDir::new("nofile");
    let mut spec = HubSpec::for_cloud(&cloud, dir.path());
    // prlimit (util-linux) sets the soft limit of itself and execs the hub: the hub starts
    // with `low` of `hard`.
    spec.prefix = vec!["prlimit".to_owned(), format!("--nofile={low}:")];
    let hub = Hub::start(&spec);
    assert_eq!(
        open_files_limits(&hub.pid().to_string()),
        (hard, hard),
        "the hub's soft limit is its hard limit"
    );
    let line = format!("soft={hard} hard={hard} (soft raised from {low})");
    assert_eq!(
        hub.log_lines(|l| l.contains("RLIMIT_NOFILE") && l.contains(&line)),
        1,
        "one line says both limits ({line}); the log:\n{}",
        hub.logs()
    );
}

#[test]
fn the_start_up_log_does_not_say_filters_are_not_implemented() {
    let cloud = Cloud::start();
    let dir = TempDir::new("filters-said");
    // --v=2 (the test default) shows debug lines; the filters are on by default.
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let logs = hub.logs();
    assert!(
        logs.contains("tinyhub is ready"),
        "the whole start-up is in the log"
    );
    assert!(!logs.contains("not implemented yet"), "{logs}");
}
