//! Case 10 (issues 18 and 34): tinyhub beside what an operator would improvise instead — nginx
//! as a reverse proxy in front of the same TLS cloud, without a cache and with `proxy_cache` on
//! disk used write-through (every request still goes to the cloud, every answer is stored,
//! as the hub does). The same client, the same gets and lists, the four proxies in turn,
//! round by round; the CPU each proxy's process spent per request (from /proc), the new TLS
//! connections the cloud accepted, the requests it served per client request, context
//! switches, and (full run) the system calls of a short run under `strace -c -f`. Then 1 and
//! 4 clients list through the edge hub as fast as it answers (the cloud's lists per client
//! list, refills included, and its new TLS connections), and the memory of 100 open watches.
//! The full run also measures the memory of the x86_64 static musl twin of the gateway builds
//! (`make bench` builds it) beside the glibc build's.
//!
//! The armv7 binary under user emulation, for the relative figures (`make bench-armv7`): as
//! the tests run it, `TINYHUB_TEST_BIN=target/armv7-unknown-linux-musleabihf/release/tinyhub
//! TINYHUB_TEST_RUNNER=qemu-arm-static cargo bench --bench hub -- --cases=10` after `make
//! armv7`, with `QEMU_CPU` set to `cross/cross.mk`'s `CROSS_QEMU_ARM_CPU` as `make cross-test`
//! sets it (unset, qemu's default CPU has NEON, which the gateways' lack). qemu-user runs the
//! guest in the process it starts, whose CPU /proc counts. Such a run measures the two hubs
//! only (no nginx, no strace: an emulated hub beside native peers means nothing) and reports
//! what emulation leaves meaningful, in a section of its own, "10a" ([`relative_section`]):
//! the ratios between the two hubs, the cloud's side, the hub's own heap; RSS is shown as the
//! qemu process's, with the emulator's floor beside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::client::Client;
use crate::report::{Report, Section, Table};
use crate::stats::{Pool, size};
use crate::support::hub::{Hub, HubSpec, KUBELET, cpu_ticks, emulated, eventually, proc_status};
use crate::support::pem;
use crate::support::{Cloud, PodFill, RecordedRequest};
use crate::{Bench, Running};

/// Client threads of the concurrent gets.
const CONNS: usize = 16;
/// Client threads of the lists (issue 34: 1 and 4).
const LIST_CLIENTS: [usize; 2] = [1, 4];
/// Gets of the `strace` run, one client.
const STRACE_GETS: usize = 2_000;
const MIB: u64 = 1024 * 1024;

/// One proxy under test.
struct Proxy {
    name: &'static str,
    /// Plain-HTTP base URL clients use.
    url: String,
    /// The process whose CPU counts.
    pid: u32,
}

/// What one proxy did over the rounds of one workload.
#[derive(Default, Clone, Copy)]
struct Tally {
    ops: u64,
    ticks: u64,
    secs: f64,
    ctx: u64,
    accepted: u64,
    cloud_requests: u64,
}

impl Tally {
    /// CPU per operation, µs (ticks are 1/100 s).
    fn cpu_us(&self) -> f64 {
        self.ticks as f64 * 10_000.0 / self.ops.max(1) as f64
    }

    fn per_op(&self, n: u64) -> f64 {
        n as f64 / self.ops.max(1) as f64
    }
}

/// nginx running in the foreground in a directory of its own, one process (`master_process
/// off`): its CPU is that process's.
struct Nginx {
    child: Child,
    plain: u16,
    cached: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nginx binary, installed from Debian when missing.
fn nginx_binary() -> Result<PathBuf, String> {
    let find = || {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    };
    if let Some(bin) = find() {
        return Ok(bin);
    }
    // `make bench` installs it (bench-tools); a bare `cargo bench` does it here.
    println!("nginx is missing: apt-get install nginx");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if apt(&["update", "-qq"])
        && apt(&["install", "-y", "-qq", "nginx"])
        && let Some(bin) = find()
    {
        return Ok(bin);
    }
    Err("nginx is not installed and apt-get could not install it".into())
}

/// A port free on loopback now.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

impl Nginx {
    /// nginx in front of `cloud` with the bench's client certificate: one server without a
    /// cache, one with `proxy_cache` written through.
    fn start(cloud: &Cloud, dir: &Path) -> Result<Nginx, String> {
        let bin = nginx_binary()?;
        let io = |e: std::io::Error| format!("nginx's files: {e}");
        for sub in ["tmp", "cache", "logs"] {
            fs::create_dir_all(dir.join(sub)).map_err(io)?;
        }
        let cert = cloud.issue_client("bench", &["system:masters"]);
        fs::write(
            dir.join("client.crt"),
            pem("CERTIFICATE", &cert.pair.cert_der),
        )
        .map_err(io)?;
        fs::write(dir.join("client.key"), &cert.pair.key_pem).map_err(io)?;
        let (plain, cached) = (free_port()?, free_port()?);
        let d = dir.display();
        let upstream = cloud.addr();
        // Keep-alive to the cloud as the hub's pool does; the client certificate as a direct
        // client's; TLS sessions reused. The cloud's certificate is not verified (the hub
        // verifies it; it only costs at a handshake, which keep-alive makes rare).
        let common = format!(
            "proxy_pass https://cloud; proxy_http_version 1.1; proxy_set_header Connection \"\"; \
             proxy_ssl_certificate {d}/client.crt; proxy_ssl_certificate_key {d}/client.key; \
             proxy_ssl_verify off; proxy_ssl_session_reuse on; proxy_read_timeout 600s;"
        );
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n\
             error_log {d}/logs/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy;\n\
               fastcgi_temp_path {d}/tmp/fcgi; uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;\n\
               proxy_cache_path {d}/cache levels=1:2 keys_zone=k8s:10m max_size=2g inactive=1d use_temp_path=off;\n\
               upstream cloud {{ server {upstream}; keepalive 64; }}\n\
               server {{ listen 127.0.0.1:{plain}; location / {{ {common} }} }}\n\
               server {{ listen 127.0.0.1:{cached}; location / {{ {common}\n\
                 proxy_cache k8s; proxy_cache_key $request_uri; proxy_cache_bypass 1;\n\
                 proxy_cache_valid 200 1d; proxy_ignore_headers Cache-Control Expires Set-Cookie; }} }}\n\
             }}\n"
        );
        let conf_path = dir.join("nginx.conf");
        fs::write(&conf_path, conf).map_err(io)?;
        let child = Command::new(&bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let nginx = Nginx {
            child,
            plain,
            cached,
        };
        let up = eventually(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", cached)).is_ok()
        });
        if !up {
            return Err(format!(
                "nginx did not start: {}",
                fs::read_to_string(dir.join("logs/error.log")).unwrap_or_default()
            ));
        }
        Ok(nginx)
    }

    fn url(port: u16) -> String {
        format!("http://127.0.0.1:{port}")
    }
}

/// Context switches of every thread of `pid`.
fn ctx_switches(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Rounds of `window` on each proxy in turn (the order rotating), `clients` threads each
/// running `op` against the proxy's URL; requests the cloud served for `path` are counted.
/// `settle` (the edge hub's cache quiet) after the warm-up and ends each proxy's round, so that
/// what the edge hub does after its clients' answers (the writer's catch-up, refills and the
/// connections they open) is counted in its own round, not in the next proxy's.
fn rounds(
    b: &Bench,
    proxies: &[Proxy],
    clients: usize,
    (path, rounds, window): (&str, usize, Duration),
    settle: &dyn Fn(),
) -> Result<Vec<Tally>, String> {
    let pools: Vec<Pool> = proxies
        .iter()
        .map(|p| {
            let ops = (0..clients)
                .map(|_| {
                    let mut client = Client::plain(&p.url, KUBELET);
                    let path = path.to_owned();
                    Box::new(move || client.get(&path)) as crate::stats::Op
                })
                .collect();
            Pool::new(ops)
        })
        .collect();
    // Warm-up: connections made, the hubs' pools filled.
    for pool in &pools {
        pool.run(Duration::from_millis(200))?;
    }
    settle();
    let mut tallies = vec![Tally::default(); proxies.len()];
    b.cloud.set_record_requests(true);
    for r in 0..rounds {
        for k in 0..proxies.len() {
            let i = (r + k) % proxies.len();
            let p = &proxies[i];
            b.cloud.reset_requests();
            let (t0, c0, a0) = (
                cpu_ticks(&p.pid.to_string()).unwrap_or(0),
                ctx_switches(p.pid),
                b.cloud.accepted_connections(),
            );
            let rate = pools[i]
                .run(window)
                .map_err(|e| format!("{}: {e}", p.name))?;
            settle();
            let t = &mut tallies[i];
            t.ticks += cpu_ticks(&p.pid.to_string()).unwrap_or(0) - t0;
            t.ctx += ctx_switches(p.pid) - c0;
            t.accepted += b.cloud.accepted_connections() - a0;
            t.ops += rate.ops;
            t.secs += rate.elapsed.as_secs_f64();
            t.cloud_requests += b.cloud.count(|q| q.path == path && !refill(q)) as u64;
            // Only the edge hub refills (a hub before issue 34 also 5 s after a drop, past
            // `settle`), whichever proxy's round it comes in.
            tallies[0].cloud_requests += b.cloud.count(|q| q.path == path && refill(q)) as u64;
        }
    }
    b.cloud.reset_requests();
    b.cloud.set_record_requests(false);
    Ok(tallies)
}

/// A request the hub's refill thread made (`<component>/tinyhub-refill`).
fn refill(q: &RecordedRequest) -> bool {
    q.user_agent.ends_with("/tinyhub-refill")
}

/// `clients` listing through a hub as fast as it answers, and what it cost the cloud, refills
/// included.
#[derive(Default, Clone, Copy)]
struct Flood {
    lists: u64,
    per_sec: f64,
    /// Lists the cloud served, the hub's refills included.
    served: u64,
    refills: u64,
    /// New TLS connections the cloud accepted.
    accepted: u64,
}

impl Flood {
    fn per_list(&self) -> f64 {
        self.served as f64 / self.lists.max(1) as f64
    }
}

/// [`Flood`] of `clients` on `hub` for `window`; the cloud's lists counted until the hub's
/// cache is quiet (its refills come after the load, at the writer's pace; a hub from before
/// issue 34 spaces them 5 s apart, which `settle` leaves room for).
fn flood(
    b: &Bench,
    hub: &Hub,
    path: &str,
    clients: usize,
    (window, settle): (Duration, Duration),
) -> Result<Flood, String> {
    let cloud = b.cloud;
    let pool = Pool::new(
        (0..clients)
            .map(|_| {
                let mut client = Client::plain(&hub.url(), KUBELET);
                let path = path.to_owned();
                Box::new(move || client.get(&path)) as crate::stats::Op
            })
            .collect(),
    );
    // Warm-up: the clients' connections and the hub's pool made, what it dropped refilled.
    pool.run(Duration::from_millis(200))?;
    std::thread::sleep(settle);
    hub.wait_cache_quiet();
    cloud.set_record_requests(true);
    cloud.reset_requests();
    let accepted = cloud.accepted_connections();
    let rate = pool.run(window)?;
    std::thread::sleep(settle);
    hub.wait_cache_quiet();
    let flood = Flood {
        lists: rate.ops,
        per_sec: rate.ops_per_sec(),
        served: cloud.count(|q| q.path == path) as u64,
        refills: cloud.count(|q| q.path == path && refill(q)) as u64,
        accepted: cloud.accepted_connections() - accepted,
    };
    cloud.set_record_requests(false);
    cloud.reset_requests();
    Ok(flood)
}

/// `strace -c -f` on `pid` while one client makes `gets` gets: system calls per get and the
/// most frequent ones. None when strace is missing or cannot attach.
fn syscalls(p: &Proxy, path: &str, gets: usize) -> Option<(f64, String)> {
    let out = std::env::temp_dir().join(format!("tinyhub-bench-strace-{}", p.pid));
    let mut strace = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(&out)
        .args(["-p", &p.pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Attached once it has written its first line to stderr; give it a moment instead.
    std::thread::sleep(Duration::from_millis(800));
    let mut client = Client::plain(&p.url, KUBELET);
    let ok = (0..gets).all(|_| client.get(path).is_ok());
    std::thread::sleep(Duration::from_millis(200));
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    let text = fs::read_to_string(&out).ok()?;
    let _ = fs::remove_file(&out);
    if !ok {
        return None;
    }
    // Lines: % time, seconds, usecs/call, calls, [errors], syscall.
    let mut calls: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let name = *words.last()?;
            let n = words.get(3)?.parse::<u64>().ok()?;
            Some((n, name.to_owned()))
        })
        .collect();
    let total = calls.iter().find(|(_, n)| n == "total")?.0;
    calls.retain(|(_, n)| n != "total");
    calls.sort_by_key(|c| std::cmp::Reverse(c.0));
    let top = calls
        .iter()
        .take(6)
        .map(|(n, name)| format!("{name} {:.1}", *n as f64 / gets as f64))
        .collect::<Vec<_>>()
        .join(", ");
    Some((total as f64 / gets as f64, top))
}

/// Case 10.
pub fn peer(b: &Bench, dir: &Path, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    let cloud = b.cloud;
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "peer-small", "namespace": "default"},
               "data": {"greeting": "hello from the cloud", "mode": "edge", "replicas": "3"}}),
    );
    cloud.populate_pods(&PodFill {
        count: scale.list_pods,
        nodes: 1,
        namespaces: 1,
        body_bytes: scale.pod_bytes,
        prefix: "peer".into(),
    });
    let get_path = "/api/v1/namespaces/default/configmaps/peer-small";
    let list_path = "/api/v1/namespaces/peer-0/pods";

    for sub in ["nginx", "edge", "cloud", "glibc", "musl"] {
        fs::create_dir_all(dir.join(sub)).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Under emulation the hubs alone: an emulated hub's CPU beside a native nginx's means
    // nothing, and nginx's rounds would only lengthen the run.
    let nginx = if emulated() {
        None
    } else {
        Some(Nginx::start(cloud, &dir.join("nginx"))?)
    };
    let edge = b.start_hub(&dir.join("edge"));
    let cloud_mode = b.start_hub_with(&dir.join("cloud"), &["--v=0", "--working-mode=cloud"]);
    let mut proxies = vec![
        Proxy {
            name: "tinyhub, edge mode",
            url: edge.url(),
            pid: edge.pid(),
        },
        Proxy {
            name: "tinyhub, cloud mode",
            url: cloud_mode.url(),
            pid: cloud_mode.pid(),
        },
    ];
    if let Some(nginx) = &nginx {
        let nginx_pid = nginx.child.id();
        proxies.push(Proxy {
            name: "nginx",
            url: Nginx::url(nginx.plain),
            pid: nginx_pid,
        });
        proxies.push(Proxy {
            name: "nginx + proxy_cache",
            url: Nginx::url(nginx.cached),
            pid: nginx_pid,
        });
    }
    // Every proxy answers as the cloud does.
    let direct_size = b.direct().get(get_path)?;
    for p in &proxies {
        let size = Client::plain(&p.url, KUBELET).get(get_path)?;
        if size != direct_size {
            return Err(format!(
                "{} answered {size} bytes where the cloud answered {direct_size}",
                p.name
            ));
        }
    }

    let (n_rounds, window) = (scale.rounds.max(2), scale.window);
    // Emulated, a list takes about a second: longer windows for a dozen lists per hub.
    let slow = if emulated() { 3 } else { 1 };
    let list_window = window * slow;
    let settle_edge = || edge.wait_cache_quiet();
    let one = rounds(b, &proxies, 1, (get_path, n_rounds, window), &settle_edge)?;
    let many = rounds(
        b,
        &proxies,
        CONNS,
        (get_path, n_rounds, window),
        &settle_edge,
    )?;
    // Lists: the edge hub's refills (at the disk's pace, spaced) count for it, until they end.
    // A hub from before issue 34 refills at once and then every 5 s: `settle` waits for them.
    let settle = if scale.quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(7)
    };
    let edge_ticks = || cpu_ticks(&edge.pid().to_string()).unwrap_or(0);
    let mut lists_by = Vec::new();
    for clients in LIST_CLIENTS {
        let edge_t0 = edge_ticks();
        let mut lists = rounds(
            b,
            &proxies,
            clients,
            (list_path, n_rounds, list_window),
            &settle_edge,
        )?;
        // `rounds` stops recording; refills may still come.
        cloud.set_record_requests(true);
        std::thread::sleep(settle);
        edge.wait_cache_quiet();
        lists[0].cloud_requests += cloud.count(|q| q.path == list_path && refill(q)) as u64;
        // The edge hub's CPU over the whole pass, until its cache is quiet: what it does for
        // its lists after answering them (the writer's catch-up, refills) is its lists' cost,
        // whichever proxy's round it falls in (its idle CPU meanwhile counts too).
        lists[0].ticks = edge_ticks() - edge_t0;
        lists_by.push(lists);
    }
    // The issue's run: 1 and 4 clients list through the edge hub as fast as it answers,
    // faster than its writer persists them; the cloud's lists counted until its cache is quiet.
    let flood_window = if scale.quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5) * slow
    };
    let floods = LIST_CLIENTS
        .iter()
        .map(|&clients| flood(b, &edge, list_path, clients, (flood_window, settle)))
        .collect::<Result<Vec<_>, _>>()?;
    let abandoned = crate::client::metrics(&edge)?
        .find("tinyhub_cache_sessions_abandoned_total")
        .unwrap_or(0.0);
    cloud.set_record_requests(false);
    cloud.reset_requests();
    if emulated() {
        drop((edge, cloud_mode));
        let memory = memory_of(&crate::support::hub::hub_binary(), &dir.join("glibc"))?;
        let figures = Relative {
            one: [one[0], one[1]],
            many: [many[0], many[1]],
            lists: [
                [lists_by[0][0], lists_by[0][1]],
                [lists_by[1][0], lists_by[1][1]],
            ],
            floods: [floods[0], floods[1]],
            abandoned,
            memory,
        };
        relative_section(
            &figures,
            (get_path, list_path),
            (n_rounds, window, list_window, flood_window),
            scale,
            report,
        );
        return Ok(());
    }
    let strace: Vec<_> = if scale.quick {
        Vec::new()
    } else {
        proxies
            .iter()
            .map(|p| syscalls(p, get_path, STRACE_GETS))
            .collect()
    };

    let mut section = Section::new(
        "10. Peer: tinyhub beside nginx",
        &format!(
            "The same keep-alive client (kubelet's User-Agent) through four proxies in front of \
             the same TLS cloud, the proxies in turn, {n_rounds} round(s) of {window:?} each, \
             the order rotating: `GET {get_path}` ({direct_size} bytes) with 1 and {CONNS} \
             client threads, and the list of {} pods of about {} bytes (`GET {list_path}`) with \
             1 and 4. nginx {}: one process (`master_process off`), keep-alive to the cloud \
             (`keepalive 64`), the bench's client certificate, `proxy_ssl_session_reuse on`, \
             `proxy_ssl_verify off`; with `proxy_cache` on disk written through: \
             `proxy_cache_bypass 1` (every request goes to the cloud), `proxy_cache_valid 200 1d`, \
             `proxy_ignore_headers Cache-Control Expires Set-Cookie`. CPU is the proxy process's \
             user + system time over the rounds (/proc/<pid>/stat), per request; the edge \
             hub's for the lists over the whole pass until its cache was quiet (its writer and \
             refills work after the answers).",
            scale.list_pods,
            scale.pod_bytes,
            nginx_version(),
        ),
    );
    let mut cpu = Table::new(
        "CPU per request (µs) and throughput",
        &[
            "workload",
            proxies[0].name,
            proxies[1].name,
            proxies[2].name,
            proxies[3].name,
        ],
    );
    for (what, t) in [
        ("small get, 1 client", &one),
        ("small get, 16 clients", &many),
        ("list of the pods, 1 client", &lists_by[0]),
        ("list of the pods, 4 clients", &lists_by[1]),
    ] {
        cpu.row(
            std::iter::once(what.to_owned())
                .chain(t.iter().map(|t| {
                    format!(
                        "{:.0} µs ({:.0}/s)",
                        t.cpu_us(),
                        t.ops as f64 / t.secs.max(1e-9)
                    )
                }))
                .collect(),
        );
    }
    section.tables.push(cpu);
    let mut conns = Table::new(
        "The cloud's side, and the proxy's context switches",
        &[
            "per request",
            proxies[0].name,
            proxies[1].name,
            proxies[2].name,
            proxies[3].name,
        ],
    );
    let row = |what: &str, f: &dyn Fn(&Tally) -> String, t: &[Tally]| {
        std::iter::once(what.to_owned())
            .chain(t.iter().map(f))
            .collect::<Vec<_>>()
    };
    conns.row(row(
        "new TLS connections per 1,000 gets, 16 clients",
        &|t| format!("{:.2}", 1000.0 * t.per_op(t.accepted)),
        &many,
    ));
    conns.row(row(
        "cloud requests per get",
        &|t| format!("{:.3}", t.per_op(t.cloud_requests)),
        &many,
    ));
    for (clients, lists) in LIST_CLIENTS.iter().zip(&lists_by) {
        conns.row(row(
            &format!("cloud lists per list, {clients} client(s)"),
            &|t| format!("{:.3}", t.per_op(t.cloud_requests)),
            lists,
        ));
        conns.row(row(
            &format!("new TLS connections per 1,000 lists, {clients} client(s)"),
            &|t| format!("{:.2}", 1000.0 * t.per_op(t.accepted)),
            lists,
        ));
    }
    conns.row(row(
        "context switches per get, 1 client",
        &|t| format!("{:.2}", t.per_op(t.ctx)),
        &one,
    ));
    conns.row(row(
        "context switches per get, 16 clients",
        &|t| format!("{:.2}", t.per_op(t.ctx)),
        &many,
    ));
    section.tables.push(conns);
    if !strace.is_empty() {
        let mut calls = Table::new(
            &format!("System calls per small get (`strace -c -f`, {STRACE_GETS} gets, 1 client)"),
            &["proxy", "calls per get", "most frequent, per get"],
        );
        for (p, s) in proxies.iter().zip(&strace) {
            calls.row(match s {
                Some((n, top)) => vec![p.name.into(), format!("{n:.1}"), top.clone()],
                None => vec![
                    p.name.into(),
                    "strace absent or refused".into(),
                    String::new(),
                ],
            });
        }
        section.tables.push(calls);
    }
    section.notes.push(format!(
        "The cloud accepted these new TLS connections during the 1-client gets: {}; during \
         the {CONNS}-client gets: {} (warm-up excluded). nginx's two servers share one \
         process and one upstream pool.",
        one.iter()
            .zip(&proxies)
            .map(|(t, p)| format!("{} {}", p.name, t.accepted))
            .collect::<Vec<_>>()
            .join(", "),
        many.iter()
            .zip(&proxies)
            .map(|(t, p)| format!("{} {}", p.name, t.accepted))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    section.notes.push(format!(
        "The edge hub's refills (User-Agent `kubelet/tinyhub-refill`, made when its writer fell \
         behind and dropped a cache session) count as its cloud lists, until its cache was \
         quiet after the rounds. Then clients listed through it as fast as it answered, the \
         cloud's lists counted until its cache was quiet: {}; cache sessions abandoned over the \
         whole case: {abandoned}.",
        LIST_CLIENTS
            .iter()
            .zip(&floods)
            .map(|(c, f)| format!(
                "{c} client(s) {} lists at {:.0}/s, {} cloud lists ({} refills) over {} new TLS \
                 connections",
                f.lists, f.per_sec, f.served, f.refills, f.accepted
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));

    // Targets: issue 34's, and issue 18's where issue 34 set none.
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let (e1, c1, n1) = (one[0].cpu_us(), one[1].cpu_us(), one[2].cpu_us());
    let (e16, c16, n16) = (many[0].cpu_us(), many[1].cpu_us(), many[2].cpu_us());
    for (clients, lists) in LIST_CLIENTS.iter().zip(&lists_by) {
        let (el, nl) = (lists[0].cpu_us(), lists[3].cpu_us());
        report.target(
            &format!(
                "List CPU with the cache, {clients} client(s): edge tinyhub vs nginx + \
                 proxy_cache (issue 34)"
            ),
            "≤ 1×",
            format!("{el:.0} µs vs {nl:.0} µs ({:.2}×)", ratio(el, nl)),
            el <= nl,
        );
    }
    for (clients, f) in LIST_CLIENTS.iter().zip(&floods) {
        report.target(
            &format!(
                "Cloud lists per client list through the edge hub, {clients} client(s) listing \
                 as fast as it answers (issue 34)"
            ),
            "≤ 1.05",
            format!(
                "{:.3} ({} client lists at {:.0}/s, {} cloud lists of which {} refills)",
                f.per_list(),
                f.lists,
                f.per_sec,
                f.served,
                f.refills
            ),
            f.per_list() <= 1.05,
        );
    }
    let (flood_lists, flood_accepted) = floods
        .iter()
        .fold((0, 0), |(l, a), f| (l + f.lists, a + f.accepted));
    let per_1000 = 1000.0 * flood_accepted as f64 / flood_lists.max(1) as f64;
    report.target(
        "New TLS connections per 1,000 lists through the edge hub, refills included (issue 34)",
        "≤ 1",
        format!("{per_1000:.2} ({flood_accepted} over {flood_lists} client lists)"),
        per_1000 <= 1.0,
    );
    report.target(
        "Cloud-mode CPU per small get, 16 clients (issue 34)",
        "≤ 1.5× nginx without a cache",
        format!("{c16:.0} µs vs {n16:.0} µs ({:.2}×)", ratio(c16, n16)),
        ratio(c16, n16) <= 1.5,
    );
    report.target(
        "Cloud-mode CPU per small get, 1 client (issue 18)",
        "≤ 1.2× nginx without a cache",
        format!("{c1:.0} µs vs {n1:.0} µs ({:.2}×)", ratio(c1, n1)),
        ratio(c1, n1) <= 1.2,
    );
    let edge_ratio = ratio(e1, c1).max(ratio(e16, c16));
    report.target(
        "Edge-mode CPU per small get vs cloud mode, 1 and 16 clients (issue 34)",
        "≤ 1.1×",
        format!(
            "1 client {e1:.0} vs {c1:.0} µs ({:.2}×); 16 clients {e16:.0} vs {c16:.0} µs ({:.2}×)",
            ratio(e1, c1),
            ratio(e16, c16)
        ),
        edge_ratio <= 1.1,
    );
    let handshakes = 1000.0 * (many[0].accepted + many[1].accepted) as f64
        / (many[0].ops + many[1].ops).max(1) as f64;
    report.target(
        "New TLS connections per 1,000 gets through tinyhub, 16 clients (issue 18)",
        "≤ 1",
        format!("{handshakes:.2}"),
        handshakes <= 1.0,
    );
    drop((edge, cloud_mode, nginx));

    watch_memory(dir, scale.quick, &mut section, report)?;
    report.sections.push(section);
    Ok(())
}

/// What the emulated run measured of the two hubs (edge first, cloud mode second).
struct Relative {
    /// Small gets, 1 client.
    one: [Tally; 2],
    /// Small gets, [`CONNS`] clients.
    many: [Tally; 2],
    /// Lists, by [`LIST_CLIENTS`].
    lists: [[Tally; 2]; 2],
    /// The edge hub's list floods, by [`LIST_CLIENTS`].
    floods: [Flood; 2],
    /// Cache sessions the edge hub abandoned over the case.
    abandoned: f64,
    /// The edge hub's memory (a hub of its own, as the native run's memory rows).
    memory: Memory,
}

/// The title of the emulated run's section: its own number ("10a"), so that `--update`
/// keeps it apart from case 10's native section and replaces only itself.
const RELATIVE_TITLE: &str = "10a. Peer case on the armv7 binary under qemu: relative figures";

/// Case 10 under `TINYHUB_TEST_RUNNER` (the armv7 binary under `qemu-arm-static`): only the
/// figures emulation leaves meaningful, as section [`RELATIVE_TITLE`] and targets marked
/// "armv7 under qemu". qemu-user translates the guest's instructions (several times slower)
/// but passes its system calls to the host kernel (about as fast as native), so the ratio
/// between the two hubs weighs computation more than a real ARM CPU would; still, both run
/// the same binary under the same translation, which is what the ratio compares.
fn relative_section(
    f: &Relative,
    (get_path, list_path): (&str, &str),
    (n_rounds, window, list_window, flood_window): (usize, Duration, Duration, Duration),
    scale: &crate::Scale,
    report: &mut Report,
) {
    let bin = crate::support::hub::hub_binary();
    let runner = std::env::var("TINYHUB_TEST_RUNNER").unwrap_or_default();
    let qemu_cpu = std::env::var("QEMU_CPU").unwrap_or_else(|_| "unset: qemu's default".into());
    let mut section = Section::new(
        RELATIVE_TITLE,
        &format!(
            "Case 10's two hubs, both the binary `{}` ({}) run as `{} <binary>` with QEMU_CPU \
             `{qemu_cpu}`, on this machine: {n_rounds} round(s) of {window:?} each \
             ({list_window:?} for the lists, {flood_window:?} for the floods), the two in turn, \
             the same keep-alive client and workloads as case 10 (`GET {get_path}` with 1 and \
             {CONNS} client threads; the list of {} pods of about {} bytes, `GET \
             {list_path}`, with 1 and 4). nginx is not run: an emulated hub's CPU beside a \
             native nginx's means nothing. What emulation leaves meaningful: the ratio of the \
             two hubs' CPU (the same binary under the same translation; qemu slows the guest's \
             instructions several times but its system calls hardly, so the ratio weighs \
             computation more than an ARM CPU would), the cloud's side (requests, connections) \
             and the hub's own heap accounting (`tinyhub_heap_bytes`, the guest's allocations, \
             32-bit). What it does not: the µs and rates themselves (emulated, shown only for \
             the ratios), and RSS (the qemu process's: the guest's pages plus qemu's own code, \
             translation cache and per-thread state; the guest's own share of it is shown apart). \
             `make bench-armv7` runs it.",
            bin.display(),
            binary_version(&bin),
            runner.trim(),
            scale.list_pods,
            scale.pod_bytes,
        ),
    );
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let mut cpu = Table::new(
        "CPU per request under emulation (emulated µs, and requests per second): only the ratio \
         means something",
        &[
            "workload",
            "tinyhub, edge mode",
            "tinyhub, cloud mode",
            "edge / cloud mode",
        ],
    );
    let workloads = [
        ("small get, 1 client", &f.one),
        ("small get, 16 clients", &f.many),
        ("list of the pods, 1 client", &f.lists[0]),
        ("list of the pods, 4 clients", &f.lists[1]),
    ];
    for (what, [edge, cloud]) in workloads {
        let cell = |t: &Tally| {
            format!(
                "{:.0} µs ({:.1}/s)",
                t.cpu_us(),
                t.ops as f64 / t.secs.max(1e-9)
            )
        };
        cpu.row(vec![
            what.into(),
            cell(edge),
            cell(cloud),
            format!("{:.2}×", ratio(edge.cpu_us(), cloud.cpu_us())),
        ]);
    }
    section.tables.push(cpu);

    let mut side = Table::new(
        "The cloud's side",
        &["per request", "tinyhub, edge mode", "tinyhub, cloud mode"],
    );
    let [edge16, cloud16] = &f.many;
    side.row(vec![
        "cloud requests per get, 16 clients".into(),
        format!("{:.3}", edge16.per_op(edge16.cloud_requests)),
        format!("{:.3}", cloud16.per_op(cloud16.cloud_requests)),
    ]);
    side.row(vec![
        "new TLS connections per 1,000 gets, 16 clients".into(),
        format!("{:.2}", 1000.0 * edge16.per_op(edge16.accepted)),
        format!("{:.2}", 1000.0 * cloud16.per_op(cloud16.accepted)),
    ]);
    for (clients, [edge, cloud]) in LIST_CLIENTS.iter().zip(&f.lists) {
        side.row(vec![
            format!("cloud lists per list, {clients} client(s)"),
            format!("{:.3}", edge.per_op(edge.cloud_requests)),
            format!("{:.3}", cloud.per_op(cloud.cloud_requests)),
        ]);
    }
    section.tables.push(side);

    let m = &f.memory;
    let kib = |b: f64| format!("{:.0} KiB", b / 1024.0);
    let heap = |h: Option<f64>| h.map_or("n/a".into(), |b| size(b as u64));
    let per_watch_heap = match (m.heap_idle, m.heap_watches) {
        (Some(a), Some(b)) => kib((b - a).max(0.0) / WATCHES as f64),
        _ => "n/a".into(),
    };
    let mut memory = Table::new(
        &format!(
            "The edge hub's memory under emulation, on a cloud of its own (idle, and with \
             {WATCHES} kubelet watches open; per watch: the difference over {WATCHES}). The \
             heap is the hub's own accounting; the guest's RSS, its resident pages with the \
             watches open, is near what an ARM device would hold; the qemu process's adds the \
             emulator's own: {}",
            match runner_floor(&bin) {
                Some(floor) => format!(
                    "the emulator alone, running the binary's `--version`, peaks at {} \
                     (`/usr/bin/time`'s maximum RSS)",
                    size(floor)
                ),
                None => "the emulator's own share was not measured (no `/usr/bin/time`)".into(),
            }
        ),
        &["", "idle", "watches open", "per watch"],
    );
    memory.row(vec![
        "heap (`tinyhub_heap_bytes`)".into(),
        heap(m.heap_idle),
        heap(m.heap_watches),
        per_watch_heap,
    ]);
    let guest = |g: Option<u64>| g.map_or("n/a".into(), size);
    memory.row(vec![
        "the guest's RSS (its 4 GiB of `/proc/<pid>/smaps`)".into(),
        guest(m.guest_idle),
        guest(m.guest_watches),
        match (m.guest_idle, m.guest_watches) {
            (Some(a), Some(b)) => kib(b.saturating_sub(a) as f64 / WATCHES as f64),
            _ => "n/a".into(),
        },
    ]);
    memory.row(vec![
        "the qemu process's RSS (VmRSS; VmHWM with watches)".into(),
        size(m.idle),
        size(m.watches),
        kib(m.watches.saturating_sub(m.idle) as f64 / WATCHES as f64),
    ]);
    section.tables.push(memory);

    section.notes.push(format!(
        "The edge hub's list floods (clients listing as fast as it answered, the cloud's lists \
         counted until its cache was quiet): {}; cache sessions abandoned over the whole case: \
         {}.",
        LIST_CLIENTS
            .iter()
            .zip(&f.floods)
            .map(|(c, fl)| format!(
                "{c} client(s) {} lists at {:.1}/s, {} cloud lists ({} refills) over {} new TLS \
                 connections",
                fl.lists, fl.per_sec, fl.served, fl.refills, fl.accepted
            ))
            .collect::<Vec<_>>()
            .join("; "),
        f.abandoned
    ));

    // Issue 34's targets that compare the hub with itself or count the cloud's side; those
    // against nginx are case 10's native run's.
    let mut targets = Table::new(
        "Issue 34's targets that emulation leaves meaningful",
        &["target", "goal", "measured", "result"],
    );
    let mut target = |what: String, goal: &str, measured: String, met: bool| {
        targets.row(vec![
            what.clone(),
            goal.into(),
            measured.clone(),
            if met { "met" } else { "**missed**" }.into(),
        ]);
        report.target(&format!("{what} (armv7 under qemu)"), goal, measured, met);
    };
    let ([e1, c1], [e16, c16]) = (&f.one, &f.many);
    let (r1, r16) = (
        ratio(e1.cpu_us(), c1.cpu_us()),
        ratio(e16.cpu_us(), c16.cpu_us()),
    );
    target(
        "Edge-mode CPU per small get vs cloud mode, 1 and 16 clients".into(),
        "≤ 1.1×",
        format!("1 client {r1:.2}×; 16 clients {r16:.2}×"),
        r1.max(r16) <= 1.1,
    );
    for (clients, fl) in LIST_CLIENTS.iter().zip(&f.floods) {
        target(
            format!(
                "Cloud lists per client list through the edge hub, {clients} client(s) listing \
                 as fast as it answers"
            ),
            "≤ 1.05",
            format!(
                "{:.3} ({} client lists, {} cloud lists of which {} refills)",
                fl.per_list(),
                fl.lists,
                fl.served,
                fl.refills
            ),
            fl.per_list() <= 1.05,
        );
    }
    let (lists, accepted) = f
        .floods
        .iter()
        .fold((0, 0), |(l, a), fl| (l + fl.lists, a + fl.accepted));
    let per_1000 = 1000.0 * accepted as f64 / lists.max(1) as f64;
    target(
        "New TLS connections per 1,000 lists through the edge hub, refills included".into(),
        "≤ 1",
        format!("{per_1000:.2} ({accepted} over {lists} client lists)"),
        per_1000 <= 1.0,
    );
    section.tables.push(targets);
    report.sections.push(section);
}

/// `bin --version` under the runner, or "" when it cannot run.
fn binary_version(bin: &Path) -> String {
    crate::support::hub::runner_command(bin)
        .unwrap_or_else(|| Command::new(bin))
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The maximum RSS, bytes, of the runner alone running `bin --version` (`/usr/bin/time`
/// reads it from the kernel when the process ends): the emulator's floor beside the hub's
/// RSS. None without a runner or `/usr/bin/time`.
fn runner_floor(bin: &Path) -> Option<u64> {
    let runner = std::env::var("TINYHUB_TEST_RUNNER").ok()?;
    let out = Command::new("/usr/bin/time")
        .args(["-f", "max-rss-kib %M"])
        .args(runner.split_whitespace())
        .arg(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("max-rss-kib ")?.trim().parse::<u64>().ok())?;
    Some(kib * 1024)
}

/// `nginx -v`'s version, as "nginx/1.22.1".
fn nginx_version() -> String {
    nginx_binary()
        .ok()
        .and_then(|bin| Command::new(bin).arg("-v").output().ok())
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .and_then(|v| v.split(": ").nth(1).map(str::to_owned))
        .unwrap_or_else(|| "(version unknown)".into())
}

/// Watches of the memory rows.
const WATCHES: u64 = 100;

/// The memory of the glibc build under test, idle and with [`WATCHES`] watches open, and (full
/// run) the same of the hub built as a static x86_64 musl binary (the gateways' libc and
/// linking, on this machine's architecture), as the footprint case measures them.
fn watch_memory(
    dir: &Path,
    quick: bool,
    section: &mut Section,
    report: &mut Report,
) -> Result<(), String> {
    let glibc = crate::support::hub::hub_binary();
    let mut builds = vec![("glibc (the bench's)", glibc, "glibc")];
    if !quick {
        // `make bench` builds it first (`make x86_64-musl`, cross/cross.mk: zig's musl, as
        // the armv7 and aarch64 builds).
        let musl = crate::target_dir().join("x86_64-unknown-linux-musl/release/tinyhub");
        if !musl.exists() {
            return Err(format!(
                "{} is not built: `make x86_64-musl` (make bench does)",
                musl.display()
            ));
        }
        builds.push(("static musl", musl, "musl"));
    }
    let mut table = Table::new(
        &format!(
            "Memory of the x86_64 builds (VmRSS idle; VmHWM with {WATCHES} kubelet watches \
             open; per watch: the difference over {WATCHES}; of it anonymous: RssAnon's, the \
             rest the binary's pages the watches' code faults back in once)"
        ),
        &[
            "build",
            "binary",
            "idle",
            "watches open",
            "per watch",
            "of it anonymous",
        ],
    );
    for (name, bin, sub) in &builds {
        let memory = memory_of(bin, &dir.join(sub))?;
        let Memory { idle, watches, .. } = memory;
        let per_watch = watches.saturating_sub(idle) / WATCHES;
        let anon_per_watch = memory.anon_watches.saturating_sub(memory.anon_idle) / WATCHES;
        let bytes = fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
        table.row(vec![
            (*name).into(),
            size(bytes),
            size(idle),
            size(watches),
            size(per_watch),
            size(anon_per_watch),
        ]);
        if *sub == "glibc" {
            report.target(
                "RSS with 100 watches open, glibc build (issue 34)",
                "≤ 12 MiB",
                format!("{} (VmHWM)", size(watches)),
                watches <= 12 * MIB,
            );
            report.target(
                "Memory per idle forwarded watch, glibc build (issue 34)",
                "≤ 48 KiB",
                format!(
                    "{} (VmHWM {} with {WATCHES} open, idle VmRSS {}; anonymous {} a watch)",
                    size(per_watch),
                    size(watches),
                    size(idle),
                    size(anon_per_watch)
                ),
                per_watch <= 48 * 1024,
            );
        } else {
            report.target(
                "Idle RSS of the static musl build (issues 18, 34)",
                "≤ 3 MiB",
                size(idle),
                idle <= 3 * MIB,
            );
            report.target(
                "RSS of the static musl build with 100 watches open (issues 18, 34)",
                "≤ 8 MiB",
                size(watches),
                watches <= 8 * MIB,
            );
        }
    }
    section.tables.push(table);
    Ok(())
}

/// A hub's memory idle and with [`WATCHES`] watches open, bytes.
#[derive(Clone, Copy)]
struct Memory {
    /// VmRSS, idle.
    idle: u64,
    /// VmHWM with the watches open.
    watches: u64,
    /// RssAnon, idle and with the watches open: the memory the hub made, not its binary's
    /// pages.
    anon_idle: u64,
    anon_watches: u64,
    /// The hub's own heap accounting (`tinyhub_heap_bytes`), idle.
    heap_idle: Option<f64>,
    /// The same with the watches open.
    heap_watches: Option<f64>,
    /// Under emulation, the guest's resident pages ([`guest_rss`]), idle.
    guest_idle: Option<u64>,
    /// The same with the watches open.
    guest_watches: Option<u64>,
}

/// Under qemu-user, the resident bytes of the guest's address space: the mappings in the 4 GiB
/// above the process's lowest one. A 32-bit guest's memory is one reserved 4 GiB block of the
/// qemu process, placed below qemu's own mappings (its binary, heap, translation buffer and
/// threads' stacks, all higher up), so this is the guest's own share of VmRSS: its binary,
/// heap and thread stacks, as an ARM device would hold them. None when not emulated or
/// `/proc/<pid>/smaps` cannot be read.
fn guest_rss(pid: u32) -> Option<u64> {
    if !emulated() {
        return None;
    }
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut lowest = None;
    let mut start = 0u64;
    let mut kib = 0u64;
    for line in smaps.lines() {
        // A mapping's header: "start-end perms offset dev inode [path]", in hex.
        let head = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        if let Some((a, _)) = head
            && let Ok(a) = u64::from_str_radix(a, 16)
        {
            start = a;
            lowest = Some(lowest.map_or(a, |l: u64| l.min(a)));
        } else if let Some(rest) = line.strip_prefix("Rss:")
            && lowest.is_some_and(|l| start - l < 1 << 32)
        {
            kib += rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()?;
        }
    }
    Some(kib * 1024)
}

/// [`Memory`] of the hub `bin` (under `TINYHUB_TEST_RUNNER` if set), on a cloud of its own:
/// the shared one holds by now the 20,000 Services case 5 added, which the hub's own
/// Services watch would list into its memory.
fn memory_of(bin: &Path, dir: &Path) -> Result<Memory, String> {
    let cloud = Cloud::start();
    cloud.set_record_requests(false);
    let spec = HubSpec {
        binary: Some(bin.to_owned()),
        ..HubSpec::for_cloud(&cloud, dir)
    }
    .with(&["--v=0"]);
    let hub = Running::register(Hub::start(&spec));
    hub.wait_cache_quiet();
    std::thread::sleep(Duration::from_secs(3));
    let idle = proc_status(hub.pid(), "VmRSS:") * 1024;
    let anon_idle = proc_status(hub.pid(), "RssAnon:") * 1024;
    let heap_idle = crate::client::metrics(&hub)?.find("tinyhub_heap_bytes");
    let guest_idle = guest_rss(hub.pid());
    let watchers = cloud.watchers("configmaps");
    let path = format!(
        "/api/v1/namespaces/mem-peer/configmaps?watch=1&resourceVersion={}",
        cloud.resource_version()
    );
    let streams = (0..WATCHES)
        .map(|_| Client::plain(&hub.url(), KUBELET).watch(&path))
        .collect::<Result<Vec<_>, _>>()?;
    if !cloud.wait_for_watchers(
        "configmaps",
        watchers + WATCHES as usize,
        Duration::from_secs(30),
    ) {
        return Err(format!(
            "{WATCHES} watches did not all reach the cloud within 30 s"
        ));
    }
    std::thread::sleep(Duration::from_secs(1));
    let watches = proc_status(hub.pid(), "VmHWM:") * 1024;
    let anon_watches = proc_status(hub.pid(), "RssAnon:") * 1024;
    let heap_watches = crate::client::metrics(&hub)?.find("tinyhub_heap_bytes");
    let guest_watches = guest_rss(hub.pid());
    drop(streams);
    Ok(Memory {
        idle,
        watches,
        anon_idle,
        anon_watches,
        heap_idle,
        heap_watches,
        guest_idle,
        guest_watches,
    })
}
