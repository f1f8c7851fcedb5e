//! Runs the real `tinyhub` binary as a child process (the one built beside the running test,
//! example or benchmark, or the one named by `TINYHUB_TEST_BIN`, under the runner named by
//! `TINYHUB_TEST_RUNNER`, e.g. qemu), learns its ports from its log, and talks to it over plain
//! HTTP like a node component would. Shared by the integration tests, the demo and the
//! benchmarks. Synchronisation is by readiness and by polling for conditions with a deadline,
//! never by fixed sleeps.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Auth, AuthMethod, Cloud, KubeconfigOptions};

/// A directory removed when dropped, under `TMPDIR` (`make test` fails when anything is left
/// there: tests/untouched.sh). Drop it after what writes into it: a hub still running when its
/// directory goes writes it again (its lock note, a certificate, a cache file) and leaves that
/// behind. Locals drop last declared first, so bind the directory before the hub
/// (`let (_dir, hub) = ...`), and a struct lists the hub before the directory.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh empty directory named after `tag`.
    pub fn new(tag: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tinyhub-it-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `f` until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How to start a hub.
#[derive(Clone)]
pub struct HubSpec {
    /// The hub's kubeconfig (`None`: a bootstrap mode, given in `args`).
    pub kubeconfig: Option<PathBuf>,
    /// Its cache root.
    pub cache_dir: PathBuf,
    /// Its `--root-dir` (certificates and kubeconfigs it writes).
    pub root_dir: PathBuf,
    /// Flags after the defaults below (later flags win).
    pub args: Vec<String>,
    /// Extra environment of the hub process (test hooks).
    pub env: Vec<(String, String)>,
    /// A command the hub runs under (its words, then the runner of `TINYHUB_TEST_RUNNER` if
    /// any, then the binary), e.g. `setpriv ...`.
    pub prefix: Vec<String>,
    /// Another build than [`hub_binary`] (the benchmark's static musl twin).
    pub binary: Option<PathBuf>,
}

impl HubSpec {
    /// A hub for `cloud` with a client-certificate kubeconfig, caching under `dir/cache`.
    pub fn for_cloud(cloud: &Cloud, dir: &Path) -> HubSpec {
        let cert = cloud.issue_client("system:node:edge-1", &["system:nodes"]);
        HubSpec::with_auth(cloud, dir, Auth::CertInline(cert))
    }

    /// A hub for `cloud` with a kubeconfig carrying `auth` (an [`Auth`], or
    /// [`KubeconfigOptions`] to name the file too), caching under `dir/cache`.
    pub fn with_auth(cloud: &Cloud, dir: &Path, auth: impl Into<KubeconfigOptions>) -> HubSpec {
        HubSpec {
            kubeconfig: Some(cloud.write_kubeconfig(dir, auth)),
            ..HubSpec::bootstrap(dir, &[])
        }
    }

    /// A hub with no kubeconfig: its identity comes from `args` (`--bootstrap-file`,
    /// `--join-token`, `--bootstrap-mode=kubeletcertificate`), its root is `dir/root`.
    pub fn bootstrap(dir: &Path, args: &[&str]) -> HubSpec {
        HubSpec {
            kubeconfig: None,
            cache_dir: dir.join("cache"),
            root_dir: dir.join("root"),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            prefix: Vec::new(),
            binary: None,
        }
    }

    /// Sets an environment variable of the hub process.
    pub fn env(mut self, key: &str, value: &str) -> HubSpec {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Adds flags.
    pub fn with(mut self, args: &[&str]) -> HubSpec {
        self.args.extend(args.iter().map(|s| (*s).to_owned()));
        self
    }

    /// The hub's command line: the binary (under the prefix or runner), the test defaults
    /// (ports 0, fast health checks, no dummy interface), then `args`, prepared by
    /// [`HubSpec::prepare`].
    pub fn command(&self) -> Command {
        let mut cmd = match self.prefix.split_first() {
            // The prefix wraps the runner too: under qemu `setpriv … qemu-arm tinyhub`.
            Some((program, words)) => {
                let mut cmd = Command::new(program);
                cmd.args(words);
                if let Ok(runner) = std::env::var("TINYHUB_TEST_RUNNER") {
                    cmd.args(runner.split_whitespace());
                }
                cmd.arg(self.binary.clone().unwrap_or_else(hub_binary));
                cmd
            }
            None => match &self.binary {
                Some(bin) => runner_command(bin).unwrap_or_else(|| Command::new(bin)),
                None => hub_command(),
            },
        };
        if let Some(kubeconfig) = &self.kubeconfig {
            cmd.arg(format!("--kubeconfig={}", kubeconfig.display()));
        }
        cmd.arg("--node-name=edge-1")
            .arg("--proxy-port=0")
            .arg("--serve-port=0")
            .arg("--proxy-secure-port=0")
            .arg(format!("--root-dir={}", self.root_dir.display()))
            .arg(format!("--disk-cache-path={}", self.cache_dir.display()))
            .arg("--heartbeat-interval-seconds=1")
            .arg("--heartbeat-timeout-seconds=1")
            .arg("--heartbeat-failed-retry=1")
            .arg("--heartbeat-healthy-threshold=1")
            .arg("--v=2")
            // Hubs of parallel tests must not make (and delete) one interface of the host;
            // tests/integration/dummy_if.rs turns it on inside its own network namespace.
            .arg("--enable-dummy-if=false")
            .args(&self.args);
        self.prepare(cmd)
    }

    /// `cmd` with this spec's environment, no stdin or stdout, and stderr piped.
    pub fn prepare(&self, mut cmd: Command) -> Command {
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }
}

/// A running hub process.
pub struct Hub {
    child: Option<Child>,
    /// Proxy address.
    pub proxy: SocketAddr,
    /// Serve-port address.
    pub serve: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    /// How it was started (to restart it alike).
    pub spec: HubSpec,
    /// Started by [`Hub::start_exact`]: `spec.args` alone, no test defaults.
    exact: bool,
}

/// The `tinyhub` binary: `TINYHUB_TEST_BIN`, or the one cargo built beside this program
/// (tests and benchmarks run from `target/<profile>/deps/`, examples from
/// `target/<profile>/examples/`).
pub fn hub_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("TINYHUB_TEST_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the path of this program");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/<kind>/<program>");
    let bin = profile_dir.join("tinyhub");
    assert!(
        bin.exists(),
        "{} is not built: run `cargo build` (or `make`) first",
        bin.display()
    );
    bin
}

/// `program` under the runner named by `TINYHUB_TEST_RUNNER` (its words, then `program`);
/// None when no runner is set.
pub fn runner_command(program: impl AsRef<OsStr>) -> Option<Command> {
    let runner = std::env::var("TINYHUB_TEST_RUNNER").ok()?;
    let mut parts = runner.split_whitespace();
    let mut cmd = Command::new(parts.next()?);
    cmd.args(parts).arg(program);
    Some(cmd)
}

/// The binary under test and the runner prefix, from the environment or the build.
pub fn hub_command() -> Command {
    let bin = hub_binary();
    runner_command(&bin).unwrap_or_else(|| Command::new(bin))
}

/// `kubectl` talking to the server of `kubeconfig`, with its discovery cache in `cache` and
/// `HOME` at `home`, whatever `KUBECONFIG` says; the caller adds the command's arguments.
pub fn kubectl_command(kubeconfig: &Path, cache: &Path, home: &Path) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cache-dir={}", cache.display()))
        .arg("--request-timeout=20s")
        .env("HOME", home)
        .env_remove("KUBECONFIG");
    cmd
}

/// True when the tests run an emulated binary (slower: allow more time).
pub fn emulated() -> bool {
    std::env::var("TINYHUB_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}

/// Time allowed for the hub to come up.
fn start_timeout() -> Duration {
    if emulated() {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(20)
    }
}

impl Hub {
    /// Starts a hub and waits until it says it is ready.
    pub fn start(spec: &HubSpec) -> Hub {
        Hub::spawn(spec.command(), spec)
    }

    /// Starts the binary with `args` and nothing else (no test defaults: the fixed ports
    /// and paths a manifest gets), `env` added to its environment, and waits until it says
    /// it is ready. The hub's `spec` holds only these: its paths are the hub's own defaults.
    pub fn start_exact(args: &[String], env: &[(String, String)]) -> Hub {
        let spec = HubSpec {
            kubeconfig: None,
            cache_dir: PathBuf::new(),
            root_dir: PathBuf::new(),
            args: args.to_vec(),
            env: env.to_vec(),
            prefix: Vec::new(),
            binary: None,
        };
        let mut cmd = hub_command();
        cmd.args(args);
        let mut hub = Hub::spawn(spec.prepare(cmd), &spec);
        hub.exact = true;
        hub
    }

    /// Runs `cmd` (prepared by [`HubSpec::prepare`]) and waits until the hub says it is ready.
    fn spawn(mut cmd: Command, spec: &HubSpec) -> Hub {
        let mut child = cmd.spawn().expect("start the tinyhub binary");
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let logs = Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if std::env::var_os("TINYHUB_TEST_LOG").is_some() {
                        eprintln!("hub: {line}");
                    }
                    let _ = tx.send(line.clone());
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let (mut proxy, mut serve) = (None, None);
        let deadline = Instant::now() + start_timeout();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "the hub did not become ready; its log:\n{}",
                        logs.lock().unwrap().join("\n")
                    );
                }
            };
            if let Some(addr) = line.split("role=proxy addr=").nth(1) {
                proxy = addr.trim().parse().ok();
            }
            if line.contains("the plain proxy port is closed") {
                // Port 0 takes no connection: a client is refused there as at a closed port.
                proxy = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            }
            if let Some(addr) = line.split("role=serve addr=").nth(1) {
                serve = addr.trim().parse().ok();
            }
            if line.contains("tinyhub is ready") {
                break;
            }
        }
        // With a kubeconfig the hub asks for its serving certificate at once; tests that
        // count the cloud's requests or dials start after that, as after the cache's start.
        if spec.kubeconfig.is_some() {
            let settled = |l: &str| {
                l.contains("role=https-proxy addr=")
                    || l.contains("cannot get a serving certificate")
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !logs.lock().unwrap().iter().any(|l| settled(l)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Hub {
            child: Some(child),
            proxy: proxy.expect("the hub logged its proxy address"),
            serve: serve.expect("the hub logged its serve address"),
            logs,
            spec: spec.clone(),
            exact: false,
        }
    }

    /// The HTTPS proxy's address, once the hub has logged it (it opens when the first
    /// serving certificate is installed).
    pub fn wait_https(&self, timeout: Duration) -> Option<SocketAddr> {
        let mut found = None;
        eventually(timeout, || {
            found = self.logs.lock().unwrap().iter().find_map(|l| {
                l.split("role=https-proxy addr=")
                    .nth(1)?
                    .trim()
                    .parse()
                    .ok()
            });
            found.is_some()
        });
        found
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.proxy)
    }

    /// `http://127.0.0.1:PORT` of the serve port.
    pub fn serve_url(&self) -> String {
        format!("http://{}", self.serve)
    }

    /// The hub's log so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// The lines of the hub's log after the first `n`, and the count so far (the `n` of the
    /// next call): a reader that follows the log for hours copies only what is new.
    pub fn logs_since(&self, n: usize) -> (Vec<String>, usize) {
        let lines = self.logs.lock().unwrap();
        (lines.get(n..).unwrap_or_default().to_vec(), lines.len())
    }

    /// Waits for a log line containing `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_log_line(|l| l.contains(needle), timeout)
    }

    /// How many lines of the hub's log so far satisfy `pred`.
    pub fn log_lines(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.logs.lock().unwrap().iter().filter(|l| pred(l)).count()
    }

    /// Waits for a log line that satisfies `pred`.
    pub fn wait_log_line(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> bool {
        eventually(timeout, || {
            self.logs.lock().unwrap().iter().any(|l| pred(l))
        })
    }

    /// The value of a metric line that starts with `series` (name plus labels).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = get(&format!("{}/metrics", self.serve_url()), "test").text();
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Waits until the metric `series` has the value `want`.
    pub fn wait_metric(&self, series: &str, want: f64, timeout: Duration) -> bool {
        eventually(timeout, || self.metric(series) == Some(want))
    }

    /// Waits until the metric `series` (a counter) reaches at least `want`.
    pub fn wait_metric_at_least(&self, series: &str, want: f64, timeout: Duration) -> bool {
        eventually(timeout, || self.metric(series).is_some_and(|v| v >= want))
    }

    /// Waits until the hub holds `cloud` healthy (`up`) or unhealthy (not `up`).
    pub fn wait_healthy(&self, cloud: &Cloud, up: bool, timeout: Duration) -> bool {
        self.wait_metric(&health_series(cloud), if up { 1.0 } else { 0.0 }, timeout)
    }

    /// The cache root the test defaults gave the hub.
    fn cache_dir(&self) -> &Path {
        assert!(
            !self.exact,
            "a hub of Hub::start_exact caches where its own flags say, not in spec.cache_dir"
        );
        &self.spec.cache_dir
    }

    /// Waits until every one of `rels` (paths relative to the hub's cache root) exists.
    pub fn wait_cached(&self, rels: &[&str], timeout: Duration) -> bool {
        let cache = self.cache_dir();
        eventually(timeout, || rels.iter().all(|rel| cache.join(rel).exists()))
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        child.wait().expect("wait for the hub")
    }

    /// Kills the process at once (SIGKILL), like a power cut for the process.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited (reaped here; the hub's kill on drop then does
    /// nothing).
    pub fn exited(&mut self) -> bool {
        match &mut self.child {
            // An error of waitpid: no child left to wait for, so none running.
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Stops this hub (SIGKILL) and starts it again with the same flags and cache.
    pub fn restart(mut self) -> Hub {
        self.kill9();
        if self.exact {
            Hub::start_exact(&self.spec.args, &self.spec.env)
        } else {
            Hub::start(&self.spec)
        }
    }
}

/// A GET of configmap `default/<name>` through `hub` made it to `cloud` as the node
/// `edge-1`, by client certificate (the hub's own identity, not a client's).
pub fn reads_as_the_node(cloud: &Cloud, hub: &Hub, name: &str) {
    let path = format!("/api/v1/namespaces/default/configmaps/{name}");
    let r = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = cloud
        .requests()
        .into_iter()
        .rev()
        .find(|q| q.path == path)
        .expect("the cloud saw the read");
    let id = seen.identity.expect("authenticated");
    assert_eq!(id.user, "system:node:edge-1");
    assert_eq!(id.method, AuthMethod::ClientCert);
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("--- hub log ---\n{}\n--- end of hub log ---", self.logs());
        }
    }
}

/// Whether process `pid` (not necessarily a child of this one) is live: there, and not a
/// zombie waiting for its parent.
pub fn pid_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the parenthesised command name (which may hold ')').
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Sends a signal with kill(1).
pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn agent(timeout: Option<Duration>) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .user_agent(ureq::config::AutoHeaderValue::None)
        .accept_encoding(ureq::config::AutoHeaderValue::None)
        .timeout_global(timeout)
        .build();
    ureq::Agent::new_with_config(config)
}

/// Sends one request and reads the whole answer.
pub fn call(
    method: &str,
    url: &str,
    ua: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let timeout = if emulated() { 120 } else { 30 };
    let agent = agent(Some(Duration::from_secs(timeout)));
    let builder = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("user-agent", ua);
    exchange(&agent, builder, headers, body, &format!("{method} {url}"))
}

/// Sends `builder`'s request with `headers` and `body` through `agent` and reads the whole
/// answer; `what` names the request in a panic.
fn exchange(
    agent: &ureq::Agent,
    mut builder: ureq::http::request::Builder,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    what: &str,
) -> Reply {
    for (n, v) in headers {
        builder = builder.header(*n, *v);
    }
    let result = match body {
        Some(b) => agent.run(builder.body(b.to_vec()).expect("request")),
        None => agent.run(builder.body(()).expect("request")),
    };
    let response = result.unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .read_to_end(&mut body)
        .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"));
    Reply {
        status,
        headers,
        body,
    }
}

/// The names of a list answer's items (a panic that shows the answer when it is no list).
pub fn item_names(list: &serde_json::Value) -> BTreeSet<String> {
    names_in_order(list).into_iter().collect()
}

/// The names of a list answer's items in the answer's order, repeats kept (a panic that
/// shows the answer when it is no list).
pub fn names_in_order(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// GET with a User-Agent.
pub fn get(url: &str, ua: &str) -> Reply {
    call("GET", url, ua, &[], None)
}

/// Opens a streaming GET (a watch); returns the status and a reader of the body.
pub fn stream(url: &str, ua: &str) -> (u16, Box<dyn Read + Send>) {
    let agent = agent(None);
    let request = ureq::http::Request::builder()
        .method("GET")
        .uri(url)
        .header("user-agent", ua)
        .body(())
        .expect("request");
    let response = agent
        .run(request)
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, Box::new(response.into_body().into_reader()))
}

/// Reads watch events (one JSON object per line) from a stream, skipping blank lines.
pub struct Events {
    reader: BufReader<Box<dyn Read + Send>>,
}

impl Events {
    /// Wraps a watch body.
    pub fn new(body: Box<dyn Read + Send>) -> Events {
        Events {
            reader: BufReader::new(body),
        }
    }

    /// The next event, or None at the end of the stream.
    pub fn next_event(&mut self) -> Option<serde_json::Value> {
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Err(e) => {
                    eprintln!("watch stream ended with an error: {e}");
                    return None;
                }
                Ok(_) if line.trim().is_empty() => continue,
                Ok(_) => {
                    return Some(
                        serde_json::from_str(&line)
                            .unwrap_or_else(|e| panic!("bad event {line:?}: {e}")),
                    );
                }
            }
        }
    }
}

/// Sends raw bytes as a request and returns the raw answer (for requests no client library
/// would send).
pub fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).expect("send");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                // One answer is enough: stop at the end of a Content-Length body.
                if let Some(len) = complete_length(&out)
                    && out.len() >= len
                {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn complete_length(raw: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(raw);
    let head_end = text.find("\r\n\r\n")?;
    let length = text[..head_end]
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })?
        .parse::<usize>()
        .ok()?;
    Some(head_end + 4 + length)
}

/// The status code of a raw answer.
pub fn raw_status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A number field of `/proc/<pid>/status` (`VmHWM:`, `VmRSS:` in KiB, `Threads:`); 0 when
/// the process is gone.
pub fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// utime and stime, in USER_HZ ticks, from a `/proc/<pid>/stat` (or
/// `/proc/<pid>/task/<tid>/stat`) file; None when it cannot be read.
pub fn stat_ticks(path: impl AsRef<Path>) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?))
}

/// User plus system CPU time of a process (`self` or a pid), in USER_HZ ticks; None when
/// its `/proc/<pid>/stat` cannot be read.
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let (user, system) = stat_ticks(format!("/proc/{pid}/stat"))?;
    Some(user + system)
}

/// Raises this process's open-file limit to its hard limit (hubs it starts inherit it);
/// returns the limit now in force (0 when it cannot be read).
#[allow(unsafe_code, reason = "std has no rlimit API")]
pub fn raise_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid rlimit of ours.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        }
    }
    limit.rlim_cur
}

/// Opens `count` connections to `addr` from eight threads at once and holds them, each
/// having sent `prefix` (the start of a request that never finishes, or nothing).
pub fn hold_connections(addr: SocketAddr, count: usize, prefix: &'static [u8]) -> Vec<TcpStream> {
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let share = count / 8 + usize::from(i < count % 8);
            std::thread::spawn(move || {
                (0..share)
                    .filter_map(|_| {
                        let mut s =
                            TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok()?;
                        let _ = s.write_all(prefix);
                        Some(s)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    clients
        .into_iter()
        .flat_map(|c| c.join().unwrap_or_default())
        .collect()
}

/// Threads of a process.
pub fn threads(pid: u32) -> usize {
    proc_status(pid, "Threads:") as usize
}

impl Hub {
    /// Lists `path` as kubelet does, reading the answer at an edge link's pace (16 KiB reads
    /// with `pause` between them), and waits until the hub committed it to its cache. The hub
    /// drops a response's cache session rather than slow its client when the disk falls 8 MiB
    /// behind; over loopback, on a loaded machine, that can happen even at this pace, so a
    /// dropped session is retried, slower.
    pub fn cache_list_paced(&self, path: &str, pause: Duration) {
        let mut pause = pause;
        for _ in 0..4 {
            let committed = self
                .metric("tinyhub_cache_sessions_committed_total")
                .unwrap_or(0.0);
            let abandoned = self
                .metric("tinyhub_cache_sessions_abandoned_total")
                .unwrap_or(0.0);
            let (status, mut body) = stream(&format!("{}{path}", self.url()), KUBELET);
            assert_eq!(status, 200, "{path}");
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = body.read(&mut buf).expect("read the list");
                if n == 0 {
                    break;
                }
                std::thread::sleep(pause);
            }
            let settled = eventually(Duration::from_secs(180), || {
                self.metric("tinyhub_cache_sessions_committed_total")
                    .unwrap_or(0.0)
                    > committed
                    || self
                        .metric("tinyhub_cache_sessions_abandoned_total")
                        .unwrap_or(0.0)
                        > abandoned
            });
            assert!(
                settled,
                "the list of {path} was neither committed nor dropped:\n{}",
                self.logs()
            );
            if self
                .metric("tinyhub_cache_sessions_abandoned_total")
                .unwrap_or(0.0)
                == abandoned
            {
                return;
            }
            pause *= 3;
        }
        panic!(
            "the hub dropped every cache session of {path}:\n{}",
            self.logs()
        );
    }
}

impl Hub {
    /// Waits until the hub's cache writer is quiet: nothing queued, no refill waiting, nothing in flight in
    /// `<cache>/.staging`, and neither its `tinyhub_cache_*` series nor the requests in
    /// flight changed over several samples in a row. A client can have its whole answer
    /// before the writer has stored it (the tee's copy and the writer's renames come after),
    /// and background sessions (the `yurt-hub-cfg` list, refills) commit at their own time:
    /// walk or snapshot the cache only after this. Panics with the hub's log when the cache
    /// does not settle within a generous deadline (longer under emulation).
    pub fn wait_cache_quiet(&self) {
        let (interval, deadline) = if emulated() {
            (Duration::from_millis(400), Duration::from_secs(300))
        } else {
            (Duration::from_millis(100), Duration::from_secs(60))
        };
        // Identical quiet samples in a row needed, `interval` apart.
        const STABLE: usize = 4;
        let staging = self.cache_dir().join(".staging");
        let mut last: Option<Vec<String>> = None;
        let mut stable = 0;
        let settled = eventually(deadline, || {
            let text = get(&format!("{}/metrics", self.serve_url()), "test").text();
            let activity: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("tinyhub_cache_") || l.starts_with(IN_FLIGHT))
                .map(str::to_owned)
                .collect();
            // A dropped answer waits for the answers to its request in flight before it is
            // fetched again (a hub without the series has none waiting).
            let idle = activity
                .iter()
                .any(|l| l == "tinyhub_cache_writer_queue_depth 0")
                && !activity
                    .iter()
                    .any(|l| l.starts_with("tinyhub_cache_refills_waiting ") && !l.ends_with(" 0"))
                && files_under(&staging).is_empty();
            if idle && last.as_ref() == Some(&activity) {
                stable += 1;
            } else {
                stable = usize::from(idle);
            }
            last = Some(activity);
            if stable >= STABLE {
                return true;
            }
            std::thread::sleep(interval);
            false
        });
        assert!(
            settled,
            "the cache writer did not settle within {deadline:?} (staged: {:?}):\n{}",
            files_under(&staging),
            self.logs()
        );
    }

    /// Every file under the cache root with its bytes, sorted, taken once the writer is
    /// quiet (see [`Hub::wait_cache_quiet`]); `.staging` is included, so a staged file left
    /// behind is caught, not one caught mid-commit.
    pub fn snapshot_settled(&self) -> Vec<(PathBuf, Vec<u8>)> {
        self.wait_cache_quiet();
        snapshot(self.cache_dir())
    }
}

/// Every file under `dir` with its bytes, sorted (a file that cannot be read has none).
/// Taken while the hub writes, it may catch a commit half-way: see
/// [`Hub::snapshot_settled`].
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

/// Kubelet's User-Agent.
pub const KUBELET: &str = "kubelet/v1.30.0 (linux/arm) kubernetes/abcdef0";

/// The hub's gauge of requests in flight.
pub const IN_FLIGHT: &str = "node_yurthub_in_flight_requests_total";

/// The series of the hub's metrics that says whether it holds `cloud` healthy (1) or not (0).
pub fn health_series(cloud: &Cloud) -> String {
    format!(
        "node_yurthub_server_healthy_status{{server=\"{}\"}}",
        cloud.url()
    )
}

/// The note a running hub writes in its cache root and root dir (src/dir_lock.rs): not a
/// cache entry.
pub const LOCK_FILE: &str = ".tinyhub.lock";

/// Every file under `dir`, recursively, sorted, but a hub's lock file; empty when `dir`
/// cannot be read.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else if e.file_name() != LOCK_FILE {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Waits until there are exactly `n` files under `dir` (see [`files_under`]).
pub fn wait_file_count(dir: &Path, n: usize, timeout: Duration) -> bool {
    eventually(timeout, || files_under(dir).len() == n)
}

/// A file's content as JSON; None when it cannot be read or is not JSON.
pub fn read_json(path: &Path) -> Option<serde_json::Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// A client of the stand-in cloud itself (not through a hub), over HTTPS with the cloud's CA
/// and a bearer token: what a component sees when it talks to the apiserver directly.
pub struct CloudClient {
    agent: ureq::Agent,
    base: String,
    token: String,
    /// The User-Agent of `send` (kubectl's unless [`CloudClient::with_user_agent`]).
    ua: String,
}

impl CloudClient {
    /// A client registered on `cloud` as user `user` (a new bearer token).
    pub fn new(cloud: &Cloud, user: &str) -> CloudClient {
        let token = format!("cloud-client-{}", super::util::name_suffix());
        cloud.add_token(&token, user);
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .root_certs(ureq::tls::RootCerts::new_with_certs(&[
                ureq::tls::Certificate::from_der(cloud.pki().ca_der()).to_owned(),
            ]))
            .build();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .user_agent(ureq::config::AutoHeaderValue::None)
            .accept_encoding(ureq::config::AutoHeaderValue::None)
            .tls_config(tls)
            .build()
            .new_agent();
        CloudClient {
            agent,
            base: cloud.url(),
            token,
            ua: "kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b".to_owned(),
        }
    }

    /// The same client sending `ua` as its User-Agent.
    pub fn with_user_agent(mut self, ua: &str) -> CloudClient {
        self.ua = ua.to_owned();
        self
    }

    fn request(&self, method: &str, path: &str, ua: &str) -> ureq::http::request::Builder {
        ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("user-agent", ua)
            .header("authorization", format!("Bearer {}", self.token))
    }

    /// Sends one request with `headers` (`Accept: application/json` unless given) and reads
    /// the whole answer.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Reply {
        let mut builder = self.request(method, path, &self.ua);
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
        {
            builder = builder.header("accept", "application/json");
        }
        exchange(
            &self.agent,
            builder,
            headers,
            body,
            &format!("{method} {path}"),
        )
    }

    /// Sends a request whose body has `content_type` (`application/json`, or
    /// `application/merge-patch+json` for PATCH).
    pub fn call(&self, method: &str, path: &str, content_type: &str, body: Option<&[u8]>) -> Reply {
        self.send(method, path, &[("content-type", content_type)], body)
    }

    /// GET `path` (with its query).
    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], None)
    }

    /// Opens a watch (`path` carries `watch=true` or is under `/watch/`); the status and
    /// its events.
    pub fn watch(&self, path: &str) -> (u16, Events) {
        let request = self
            .request(
                "GET",
                path,
                "kube-proxy/v1.30.0 (linux/arm) kubernetes/7c48c2b",
            )
            .body(())
            .expect("request");
        let response = self
            .agent
            .run(request)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = response.status().as_u16();
        (
            status,
            Events::new(Box::new(response.into_body().into_reader())),
        )
    }
}
