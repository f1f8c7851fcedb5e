//! Issue 34 item 3: a driver for counting the hub's instructions per small get (the peer
//! bench's `GET /api/v1/namespaces/default/configmaps/peer-small` as kubelet, one keep-alive
//! client), ignored in the suite. Run it under callgrind:
//!
//! `TINYHUB_GET_COST_CALLGRIND=/tmp/out TINYHUB_TEST_BIN=<release build with symbols> cargo
//! test --test integration get_cost -- --ignored --nocapture`
//!
//! The hub runs under `valgrind --tool=callgrind`; its counters are zeroed after the warm-up
//! gets and dumped after the counted ones (`callgrind_control`), once per mode, to
//! `<out>.cloud.<n>` and `<out>.edge.<n>`. `TINYHUB_GET_COST_GETS` sets the counted gets
//! (default 500), `TINYHUB_GET_COST_V` the hub's `--v` (default 0, as the bench). Without
//! `TINYHUB_GET_COST_CALLGRIND` it only drives the gets. `TINYHUB_GET_COST_STRACE=/tmp/out`
//! (without callgrind) attaches `strace -f -c` to the hub for the counted gets: its syscalls,
//! summed to `<out>.cloud` and `<out>.edge`. Every run prints the hub process's CPU per
//! counted get (from `/proc`, 10 ms ticks: count enough gets): with `TINYHUB_TEST_BIN` the
//! armv7 binary and `TINYHUB_TEST_RUNNER=qemu-arm-static`, the edge/cloud ratio the peer
//! bench's section 10a measures, without its rounds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

const PATH: &str = "/api/v1/namespaces/default/configmaps/peer-small";

/// A kept-alive client connection to the hub, made again when the hub closes it.
struct Conn {
    host: String,
    conn: Option<BufReader<TcpStream>>,
    /// Connections made after the first.
    reconnects: usize,
}

impl Conn {
    fn new(host: String) -> Conn {
        Conn {
            host,
            conn: None,
            reconnects: 0,
        }
    }

    /// One GET; returns the status. Retried once on a fresh connection when the kept-alive
    /// one was closed.
    fn get(&mut self) -> u16 {
        match self.try_get() {
            Ok(status) => status,
            Err(e) => {
                eprintln!("reconnecting after: {e}");
                self.conn = None;
                self.reconnects += 1;
                self.try_get().expect("a get on a fresh connection")
            }
        }
    }

    fn try_get(&mut self) -> std::io::Result<u16> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let sock = TcpStream::connect(&self.host)?;
                sock.set_read_timeout(Some(Duration::from_secs(120)))?;
                self.conn.insert(BufReader::new(sock))
            }
        };
        let req = format!(
            "GET {PATH} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {KUBELET}\r\nAccept: application/json\r\n\r\n",
            self.host
        );
        conn.get_mut().write_all(req.as_bytes())?;
        read_answer(conn).map(|(status, _)| status)
    }
}

/// Tells the callgrind of the hub `pid` to `what` (zero, dump); shared with `list_path_cost`.
pub(crate) fn callgrind(what: &str, pid: u32) {
    let ok = Command::new("callgrind_control")
        .arg(what)
        .arg(pid.to_string())
        .status()
        .expect("callgrind_control")
        .success();
    assert!(ok, "callgrind_control {what}");
}

fn drive(mode: &str) {
    let out = std::env::var("TINYHUB_GET_COST_CALLGRIND").ok();
    let gets: usize = std::env::var("TINYHUB_GET_COST_GETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "peer-small", "namespace": "default"},
               "data": {"greeting": "hello from the cloud", "mode": "edge", "replicas": "3"}}),
    );
    let dir = TempDir::new("get-cost");
    // The bench's verbosity, unless `TINYHUB_GET_COST_V` asks another (the request's log
    // line shows from 2).
    let v = format!(
        "--v={}",
        std::env::var("TINYHUB_GET_COST_V").unwrap_or_else(|_| "0".into())
    );
    let mut spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[v.as_str()]);
    if mode == "cloud" {
        spec = spec.with(&["--working-mode=cloud"]);
    }
    if let Some(out) = &out {
        // Under callgrind (and qemu: the armv7 binary's host instructions, with
        // `TINYHUB_TEST_RUNNER`) a health probe may take seconds: the cloud must not look down.
        spec = spec.with(&[
            "--heartbeat-timeout-seconds=30",
            "--heartbeat-failed-retry=10",
        ]);
        spec.prefix = vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            // qemu's translated code is written to memory and run.
            "--smc-check=all-non-file".into(),
            format!("--callgrind-out-file={out}.{mode}.%p"),
        ];
    }
    let hub = Hub::start(&spec);
    let mut conn = Conn::new(hub.url().trim_start_matches("http://").to_owned());
    for _ in 0..50 {
        assert_eq!(conn.get(), 200);
    }
    if out.is_some() {
        callgrind("-z", hub.pid());
    }
    // Attached after the warm-up, stopped before the hub: the counted gets' syscalls only.
    let strace = std::env::var("TINYHUB_GET_COST_STRACE").ok().map(|out| {
        let child = Command::new("strace")
            .args(["-f", "-c", "-o", &format!("{out}.{mode}"), "-p"])
            .arg(hub.pid().to_string())
            .spawn()
            .expect("strace");
        std::thread::sleep(Duration::from_secs(2));
        child
    });
    conn.reconnects = 0;
    let pid = hub.pid().to_string();
    let ticks = || cpu_ticks(&pid).unwrap_or(0);
    let t0 = ticks();
    for _ in 0..gets {
        assert_eq!(conn.get(), 200);
    }
    // The writer's last batch handled (it lingers 2 ms), within the count.
    std::thread::sleep(Duration::from_millis(100));
    let cpu_us = (ticks() - t0) as f64 * 10_000.0 / gets as f64;
    eprintln!(
        "{mode}: {gets} gets, {} new connections, {cpu_us:.1} µs of the hub's CPU per get",
        conn.reconnects
    );
    if out.is_some() {
        callgrind("-d", hub.pid());
    }
    if let Some(mut strace) = strace {
        signal(strace.id(), "INT");
        strace.wait().expect("strace's summary");
    }
    drop(conn);
    drop(hub);
}

#[test]
#[ignore = "a measuring driver, run by hand under callgrind"]
fn get_cost_cloud() {
    drive("cloud");
}

#[test]
#[ignore = "a measuring driver, run by hand under callgrind"]
fn get_cost_edge() {
    drive("edge");
}

/// Reads one answer from a kept-alive connection: its status and its body (by its length,
/// or chunked, without trailers).
pub(super) fn read_answer(conn: &mut BufReader<TcpStream>) -> std::io::Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    conn.read_line(&mut line)?;
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
    let (mut len, mut chunked) = (None, false);
    loop {
        line.clear();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("closed in the head"));
        }
        if line == "\r\n" {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                len = Some(v.trim().parse::<usize>().map_err(std::io::Error::other)?);
            } else if n.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.trim().eq_ignore_ascii_case("chunked");
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(std::io::Error::other)?;
            if size == 0 {
                // No trailers: the empty line ends the body.
                line.clear();
                conn.read_line(&mut line)?;
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            conn.read_exact(&mut body[start..])?;
            let mut crlf = [0; 2];
            conn.read_exact(&mut crlf)?;
        }
    } else {
        body.resize(len.unwrap_or(0), 0);
        conn.read_exact(&mut body)?;
    }
    Ok((status, body))
}
