//! Issue 34 item 1: a driver for counting the hub's instructions per list (the peer bench's
//! `GET /api/v1/namespaces/peer-0/pods`, 1,000 pods of about 5 KB, as kubelet with the
//! bench client's headers, one keep-alive client), ignored in the suite. Run it under
//! callgrind:
//!
//! `TINYHUB_LIST_COST_CALLGRIND=/tmp/out TINYHUB_TEST_BIN=<release build with symbols> cargo
//! test --test integration list_path_cost -- --ignored --nocapture --test-threads=1`
//!
//! The hub runs under `valgrind --tool=callgrind --separate-threads=yes` (so the connection
//! thread and the cache writer show apart); its counters are zeroed after the warm-up lists
//! (the cache filled, then proven unchanged) and dumped after the counted ones and the cache
//! gone quiet (the writer's catch-up counted with them), once per mode, to
//! `<out>.cloud.<pid>.1-<thread>` and `<out>.edge.<pid>.1-<thread>`, and the instructions
//! per list of each busy thread are printed. `TINYHUB_LIST_COST_LISTS` sets the counted lists
//! (default 10). Without `TINYHUB_LIST_COST_CALLGRIND` it only drives
//! the lists (checking each answer is the whole list) and prints the hub's CPU time per list
//! from /proc (noisy where the machine is shared; 200 lists or more for a figure).

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::get_cost::{callgrind, read_answer};
use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

const PATH: &str = "/api/v1/namespaces/peer-0/pods";
const PODS: usize = 1_000;

/// One GET of the list on a kept-alive connection, as the bench's client sends it (ureq with
/// no automatic header but its `Accept: */*`): the status and the body.
fn list(conn: &mut BufReader<TcpStream>, host: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let req = format!(
        "GET {PATH} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {KUBELET}\r\nAccept: */*\r\n\r\n"
    );
    conn.get_mut().write_all(req.as_bytes())?;
    read_answer(conn)
}

/// Prints the instructions per list of each thread that ran more than a million in the
/// dump `<prefix>.1-<thread>` (the connection thread, the cache writer, ...).
fn per_thread(prefix: &str, lists: usize) {
    let path = std::path::Path::new(prefix);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let start = format!("{}.1-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut threads: Vec<(String, u64)> = entries
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let thread = file.strip_prefix(&start)?.to_owned();
            let text = std::fs::read_to_string(e.path()).ok()?;
            let total = text
                .lines()
                .find_map(|l| l.strip_prefix("summary: "))?
                .trim()
                .parse()
                .ok()?;
            Some((thread, total))
        })
        .filter(|(_, total)| *total > 1_000_000)
        .collect();
    threads.sort();
    for (thread, total) in threads {
        eprintln!(
            "thread {thread}: {} instructions per list",
            total / lists.max(1) as u64
        );
    }
}

fn drive(mode: &str) {
    let out = std::env::var("TINYHUB_LIST_COST_CALLGRIND").ok();
    let lists: usize = std::env::var("TINYHUB_LIST_COST_LISTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let cloud = Cloud::start();
    // As the bench's cloud: no gzip (the padded pods would shrink to almost nothing, and the
    // run would measure inflating instead of the 5 MB the bench's hubs read over TLS).
    cloud.set_gzip_threshold(usize::MAX);
    // The peer bench's fill.
    cloud.populate_pods(&PodFill {
        count: PODS,
        nodes: 1,
        namespaces: 1,
        body_bytes: 5_000,
        prefix: "peer".into(),
    });
    let dir = TempDir::new("list-cost");
    let mut spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--v=0"]);
    if mode == "cloud" {
        spec = spec.with(&["--working-mode=cloud"]);
    }
    if let Some(out) = &out {
        spec.prefix = vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            "--separate-threads=yes".into(),
            format!("--callgrind-out-file={out}.{mode}.%p"),
        ];
    }
    let hub = Hub::start(&spec);
    let host = hub.url().trim_start_matches("http://").to_owned();
    let connect = || {
        let sock = TcpStream::connect(&host).expect("connect to the hub");
        sock.set_read_timeout(Some(Duration::from_secs(300)))
            .expect("timeout");
        BufReader::new(sock)
    };
    let mut conn = connect();
    // The hub closes a connection idle while its cache settles: made again then.
    let one = |conn: &mut BufReader<TcpStream>| {
        let (status, body) = list(conn, &host).unwrap_or_else(|e| {
            eprintln!("reconnecting after: {e}");
            *conn = connect();
            list(conn, &host).expect("a list on a fresh connection")
        });
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let value: serde_json::Value = serde_json::from_slice(&body).expect("a JSON list");
        assert_eq!(
            value["items"].as_array().map(Vec::len),
            Some(PODS),
            "the whole list"
        );
        body.len()
    };
    // Warm-up: the first list fills the cache, the second finds it as listed (a memo), the
    // third is proven unchanged; the cache quiet after each.
    let mut size = 0;
    for _ in 0..3 {
        size = one(&mut conn);
        hub.wait_cache_quiet();
    }
    if out.is_some() {
        callgrind("-z", hub.pid());
    }
    let ticks = || cpu_ticks(&hub.pid().to_string()).unwrap_or(0);
    let t0 = ticks();
    for _ in 0..lists {
        one(&mut conn);
    }
    hub.wait_cache_quiet();
    // The hub's user + system time (1/100 s ticks), its cache's quiet wait included.
    let ms = (ticks() - t0) as f64 * 10.0 / lists.max(1) as f64;
    eprintln!("{mode}: {lists} lists of {size} bytes, {ms:.1} ms of CPU per list");
    if let Some(out) = &out {
        callgrind("-d", hub.pid());
        per_thread(&format!("{out}.{mode}.{}", hub.pid()), lists);
    }
    drop(conn);
    drop(hub);
}

#[test]
#[ignore = "a measuring driver, run by hand under callgrind"]
fn list_path_cost_cloud() {
    drive("cloud");
}

#[test]
#[ignore = "a measuring driver, run by hand under callgrind"]
fn list_path_cost_edge() {
    drive("edge");
}
