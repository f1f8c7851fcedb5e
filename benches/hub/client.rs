//! The benchmark's client side: one keep-alive HTTP client that talks either to the stand-in
//! cloud directly over TLS (client certificate, the cloud's CA as the only root) or to the hub
//! over plain HTTP, with the same User-Agent and the same code path both ways; watch streams;
//! reads paced like an edge link; the hub's `/metrics` and `/proc` figures; and polling with
//! a deadline.
//!
//! It does not time anything itself: the cases do, around these calls.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::{Duration, Instant};

use ureq::Agent;
use ureq::config::AutoHeaderValue;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};

use crate::support::Cloud;
use crate::support::hub::{Hub, health_series, proc_status, stat_ticks};

/// Time allowed for one request (a 100 MB list read at an edge link's pace included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest silence a watch stream may have before the read fails.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Read size for whole bodies.
const READ_BUFFER: usize = 64 * 1024;

/// TLS settings for talking to the cloud directly.
#[derive(Clone)]
pub struct DirectTls(TlsConfig);

impl DirectTls {
    /// A client certificate from the cloud's CA, and that CA as the only root.
    pub fn for_cloud(cloud: &Cloud) -> Result<DirectTls, String> {
        DirectTls::for_identity(cloud, "bench", &["system:masters"])
    }

    /// Like [`DirectTls::for_cloud`] for user `cn` in `groups` (a node: `system:node:<name>`
    /// in `system:nodes`). The cloud's CA is also what a leader hub's serving certificate
    /// chains to, so the same settings reach a leader's multiplexer port.
    pub fn for_identity(cloud: &Cloud, cn: &str, groups: &[&str]) -> Result<DirectTls, String> {
        let cert = cloud.issue_client(cn, groups);
        let key = PrivateKey::from_pem(cert.pair.key_pem.as_bytes())
            .map_err(|e| format!("the bench client key: {e}"))?;
        let chain = vec![Certificate::from_der(&cert.pair.cert_der).to_owned()];
        let root = Certificate::from_der(cloud.pki().ca_der()).to_owned();
        Ok(DirectTls(
            TlsConfig::builder()
                .provider(TlsProvider::Rustls)
                .root_certs(RootCerts::new_with_certs(&[root]))
                .client_cert(Some(ClientCert::new_with_certs(&chain, key)))
                .build(),
        ))
    }
}

/// A keep-alive client bound to one base URL and one User-Agent.
pub struct Client {
    agent: Agent,
    base: String,
    ua: &'static str,
    buf: Vec<u8>,
}

/// A ureq agent as every benchmark client uses it (no automatic headers, statuses as
/// answers, [`REQUEST_TIMEOUT`] per request), with `tls` for HTTPS.
pub fn agent(tls: Option<&DirectTls>) -> Agent {
    let mut config = Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .user_agent(AutoHeaderValue::None)
        .accept_encoding(AutoHeaderValue::None)
        .max_idle_connections_per_host(4)
        .timeout_global(Some(REQUEST_TIMEOUT));
    if let Some(tls) = tls {
        config = config.tls_config(tls.0.clone());
    }
    Agent::new_with_config(config.build())
}

impl Client {
    /// Straight to the cloud.
    pub fn direct(cloud_url: &str, tls: &DirectTls, ua: &'static str) -> Client {
        Client {
            agent: agent(Some(tls)),
            base: cloud_url.to_owned(),
            ua,
            buf: vec![0; READ_BUFFER],
        }
    }

    /// Plain HTTP (the hub).
    pub fn plain(base: &str, ua: &'static str) -> Client {
        Client {
            agent: agent(None),
            base: base.to_owned(),
            ua,
            buf: vec![0; READ_BUFFER],
        }
    }

    fn open(&self, path: &str) -> Result<ureq::BodyReader<'static>, String> {
        let url = format!("{}{path}", self.base);
        let response = self
            .agent
            .get(&url)
            .header("user-agent", self.ua)
            .call()
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body().into_reader();
        if status != 200 {
            let mut text = String::new();
            let _ = (&mut body).take(2048).read_to_string(&mut text);
            return Err(format!("GET {url}: status {status}: {text}"));
        }
        Ok(body)
    }

    /// GETs `path` and reads the whole body; returns its size. Anything but 200 is an error.
    pub fn get(&mut self, path: &str) -> Result<u64, String> {
        let mut body = self.open(path)?;
        let mut total = 0u64;
        loop {
            match body.read(&mut self.buf) {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e) => return Err(format!("GET {}{path}: reading the body: {e}", self.base)),
            }
        }
    }

    /// GETs `path` and returns the whole body.
    pub fn get_body(&mut self, path: &str) -> Result<Vec<u8>, String> {
        let mut body = self.open(path)?;
        let mut out = Vec::new();
        body.read_to_end(&mut out)
            .map_err(|e| format!("GET {}{path}: reading the body: {e}", self.base))?;
        Ok(out)
    }

    /// GETs `path` reading at most `bytes_per_sec` (16 KiB reads with a pause between), like a
    /// node behind a slow link; returns the body size.
    pub fn get_paced(&mut self, path: &str, bytes_per_sec: f64) -> Result<u64, String> {
        let body = self.open(path)?;
        paced_copy(body, bytes_per_sec, |_| true)
            .map_err(|e| format!("GET {}{path}: reading the body: {e}", self.base))
    }

    /// Opens a watch; reads fail after [`WATCH_READ_TIMEOUT`] of silence.
    pub fn watch(&self, path: &str) -> Result<WatchStream, String> {
        let url = format!("{}{path}", self.base);
        let request = ureq::http::Request::builder()
            .method("GET")
            .uri(&url)
            .header("user-agent", self.ua)
            .body(())
            .map_err(|e| format!("GET {url}: {e}"))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(None)
            .timeout_per_read(Some(WATCH_READ_TIMEOUT))
            .build();
        let response = self
            .agent
            .run(request)
            .map_err(|e| format!("watch {url}: {e}"))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(format!("watch {url}: status {status}"));
        }
        Ok(WatchStream {
            reader: BufReader::with_capacity(READ_BUFFER, response.into_body().into_reader()),
        })
    }
}

/// Copies `body` to nowhere at `bytes_per_sec`, calling `seen` with each piece read; stops
/// at the end of the body or when `seen` returns false.
///
/// Like a link of that capacity, it never reads faster to catch up after a stall (beyond a
/// few milliseconds of slack): a burst would push the hub's cache writer harder than the
/// rate says.
pub fn paced_copy(
    mut body: impl Read,
    bytes_per_sec: f64,
    mut seen: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<u64> {
    const SLACK: Duration = Duration::from_millis(5);
    let mut buf = vec![0u8; 16 * 1024];
    let mut next = Instant::now();
    let mut total = 0u64;
    loop {
        let n = body.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        if !seen(&buf[..n]) {
            return Ok(total);
        }
        // When these bytes would have finished crossing the link.
        let now = Instant::now();
        next = next.max(now.checked_sub(SLACK).unwrap_or(now))
            + Duration::from_secs_f64(n as f64 / bytes_per_sec);
        if next > now {
            std::thread::sleep(next - now);
        }
    }
}

/// An open watch: one JSON event per line.
pub struct WatchStream {
    reader: BufReader<ureq::BodyReader<'static>>,
}

impl WatchStream {
    /// The next non-blank line; `Ok(false)` at the end of the stream.
    pub fn next_line(&mut self, line: &mut String) -> Result<bool, String> {
        loop {
            line.clear();
            match self.reader.read_line(line) {
                Ok(0) => return Ok(false),
                Ok(_) if line.trim().is_empty() => continue,
                Ok(_) => return Ok(true),
                Err(e) => return Err(format!("reading a watch stream: {e}")),
            }
        }
    }

    /// The raw body, for paced reading.
    pub fn into_inner(self) -> BufReader<ureq::BodyReader<'static>> {
        self.reader
    }
}

/// The hub's metrics at one instant.
pub struct MetricSnapshot(HashMap<String, f64>);

impl MetricSnapshot {
    /// A series (name plus labels, exactly as exposed); 0 when absent.
    pub fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    /// A series, or None when the hub does not expose it.
    pub fn find(&self, series: &str) -> Option<f64> {
        self.0.get(series).copied()
    }

    /// The sum of metric `name`'s series whose labels (the text between the braces) satisfy
    /// `labels`; None when the hub exposes no series of `name` at all.
    pub fn sum(&self, name: &str, labels: impl Fn(&str) -> bool) -> Option<f64> {
        let mut found = None;
        for (series, value) in &self.0 {
            let (n, l) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or(rest)),
                None => (series.as_str(), ""),
            };
            if n == name {
                let total = found.get_or_insert(0.0);
                if labels(l) {
                    *total += value;
                }
            }
        }
        found
    }
}

/// Reads the hub's `/metrics`.
pub fn metrics(hub: &Hub) -> Result<MetricSnapshot, String> {
    let url = format!("{}/metrics", hub.serve_url());
    let text = agent(None)
        .get(&url)
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?
        .into_body()
        .read_to_string()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let map = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect();
    Ok(MetricSnapshot(map))
}

/// Waits until the hub reports the cloud healthy (`up`) or not.
pub fn wait_health(hub: &Hub, cloud: &Cloud, up: bool, timeout: Duration) -> Result<(), String> {
    let series = health_series(cloud);
    let want = if up { 1.0 } else { 0.0 };
    wait_until(timeout, &format!("{series} to be {want}"), || {
        Ok(metrics(hub)?.find(&series) == Some(want))
    })
}

/// Polls `f` every 10 ms until it holds; an error after `timeout` names `what`.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if f()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Memory and threads of a process, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Default)]
pub struct ProcMem {
    /// Peak resident set (since start or the last [`reset_peak`]), bytes.
    pub hwm: u64,
    /// Resident set now, bytes.
    pub rss: u64,
    /// Of which anonymous memory (heap, stacks), bytes.
    pub anon: u64,
    /// Of which file-backed pages (the binary's code and data, libc), bytes.
    pub file: u64,
    /// Threads now.
    pub threads: u64,
}

/// Reads [`ProcMem`] of `pid`; an error when the process is gone.
pub fn proc_mem(pid: u32) -> Result<ProcMem, String> {
    let m = ProcMem {
        hwm: proc_status(pid, "VmHWM:") * 1024,
        rss: proc_status(pid, "VmRSS:") * 1024,
        anon: proc_status(pid, "RssAnon:") * 1024,
        file: proc_status(pid, "RssFile:") * 1024,
        threads: proc_status(pid, "Threads:"),
    };
    if m.rss == 0 {
        return Err(format!("process {pid} is gone (no /proc/{pid}/status)"));
    }
    Ok(m)
}

/// CPU time a thread has used, split as the kernel accounts it.
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    /// In the program.
    pub user: Duration,
    /// In the kernel on its behalf (system calls: file writes, renames, fsync).
    pub system: Duration,
}

impl Cpu {
    /// User plus system time.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// What was used since `before`.
    pub fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
        }
    }
}

/// CPU time of the thread of `pid` named `name`, from `/proc/<pid>/task/*/stat`.
pub fn thread_cpu(pid: u32, name: &str) -> Option<Cpu> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let (user, system) = stat_ticks(task.path().join("stat"))?;
        // /proc counts in USER_HZ, which Linux fixes at 100 on every architecture.
        return Some(Cpu {
            user: Duration::from_millis(user * 10),
            system: Duration::from_millis(system * 10),
        });
    }
    None
}

/// Resets the process's peak RSS to its current RSS (`/proc/<pid>/clear_refs`, value 5), so
/// the next VmHWM is the peak of what follows.
pub fn reset_peak(pid: u32) -> Result<(), String> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| format!("resetting the peak RSS of {pid}: {e}"))
}

/// The filesystem `path` is on, from `/proc/self/mounts`: "type (device)".
pub fn filesystem(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, point, kind) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(point)
                .then_some((point.len(), kind, device))
        })
        .max_by_key(|(len, _, _)| *len)
        .map_or_else(
            || "unknown".to_owned(),
            |(_, kind, device)| format!("{kind} ({device})"),
        )
}

/// Files under `dir` (recursively): (number, apparent bytes, bytes allocated on disk).
pub fn disk_usage(dir: &Path) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut totals = (0, 0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return totals;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            let (n, b, d) = disk_usage(&entry.path());
            totals = (totals.0 + n, totals.1 + b, totals.2 + d);
        } else {
            totals = (
                totals.0 + 1,
                totals.1 + meta.len(),
                totals.2 + meta.blocks() * 512,
            );
        }
    }
    totals
}
