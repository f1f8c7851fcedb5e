//! `make bench`: tinyhub measured against going direct (tracker issue 6).
//!
//! Starts the stand-in cloud apiserver in this process and the real release `tinyhub` beside
//! it, then measures each case two ways in the same run, alternating: a client talking to the
//! cloud directly over TLS, and the same client through the hub over plain HTTP. Cases: a
//! small get, a list of 1,000 pods (online and offline), watch delivery, the cache writer,
//! memory, binary size, and a list of 1,000 Services with and without a response filter; and,
//! through the hub alone, the time its lease-renewal health check takes to call a dead cloud
//! unhealthy (issue 15); and, on clouds of its own, a pool of hubs (issue 16): the bytes the
//! cloud sends kube-proxy and coredns of every node directly and through the pool, and the
//! memory of the pool's leader hub; and beside nginx with and without `proxy_cache` (issue
//! 18, issue 34's targets): CPU of gets and of lists at 1 and 4 clients, connections, the
//! cloud's lists per client list under a list flood, system calls per request, and the
//! memory of watches (the static musl build's too; its hubs may be the armv7 binary under
//! `qemu-arm-static`, as the tests run it: `TINYHUB_TEST_BIN` and `TINYHUB_TEST_RUNNER`); and,
//! on clouds of its own, a node's usual watches through an outage of the cloud (issue 29),
//! through a hub and directly; and, on clouds of its own, a node's day in miniature on the
//! cloud link (issue 32): cloud bytes and requests direct, through a hub and through a pool,
//! with and without clients asking for gzip, and the link totals' flash writes; on a
//! cloud of its own, the flash a node's cache wears per hour, steady and in relist storms;
//! and, on clouds of its own, the hub's offline boot from a cold cache of 200 to 20,000
//! objects (issue 33). Prints a table per case as it goes and writes
//! `BENCHMARKS.md` at the repository top with the machine, the date and every target of the
//! issue, met or missed.
//!
//! `--quick` (CI, `make bench-quick`) runs every case small, in seconds, and writes
//! `target/BENCHMARKS-quick.md`; its figures mean nothing, only that the program runs.
//! `--cases=9` runs some cases only and writes nothing, unless `--update`: their sections
//! then replace theirs in the existing file, each marked as from a partial run, and their
//! targets the rows of those sections in its targets table, each marked with the run's date.
//! After BENCHMARKS.md, the "Measured" block of README.md is rewritten from it
//! (`hub/readme.rs`); `--readme-only` (`make readme`) does only that, measuring nothing.
//! Under `cargo test` (no `--bench` argument) it does nothing.
//!
//! It does not change the hub or the cloud, and it judges no timing by itself except against
//! the targets, which are reported, never asserted: a missed target is a finding, not
//! a failure. A failure (a wrong answer, a wait past its deadline) names the case and exits 1.

// The support module's inline unit tests compile here without their `#[test]` functions.
#[allow(unused_imports)]
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "hub/boot.rs"]
mod boot;
#[path = "hub/client.rs"]
mod client;
#[path = "hub/footprint.rs"]
mod footprint;
#[path = "hub/heartbeat.rs"]
mod heartbeat;
#[path = "hub/link.rs"]
mod link;
#[path = "hub/online.rs"]
mod online;
#[path = "hub/outage.rs"]
mod outage;
#[path = "hub/peer.rs"]
mod peer;
#[path = "hub/pool.rs"]
mod pool;
#[path = "hub/readme.rs"]
mod readme;
#[path = "hub/report.rs"]
mod report;
#[path = "hub/stats.rs"]
mod stats;
#[path = "hub/wear.rs"]
mod wear;

use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use client::{Client, DirectTls};
use report::Report;
use support::hub::{Hub, HubSpec, KUBELET, TempDir, eventually, hub_binary, proc_status};
use support::{Cloud, lock};

/// How big each case is.
pub struct Scale {
    /// `--quick`: a smoke run.
    pub quick: bool,
    /// Small gets timed per way.
    pub get_samples: usize,
    /// Rounds per way of each throughput run.
    pub rounds: usize,
    /// Length of one throughput round.
    pub window: Duration,
    /// Pods in the list of case 2.
    pub list_pods: usize,
    /// Lists timed per way (and offline).
    pub list_samples: usize,
    /// Watch events timed per way.
    pub watch_events: usize,
    /// Pods in the big cached list of case 4.
    pub cached_pods: usize,
    /// Watch events in the burst of case 4.
    pub burst: usize,
    /// Concurrent watches of case 5.
    pub watches: usize,
    /// An edge link's pace for reads the hub must cache, bytes per second.
    pub edge_rate: f64,
    /// Approximate JSON size of every synthetic pod.
    pub pod_bytes: usize,
    /// Connections that send the start of a request head and never finish it.
    pub slow_heads: usize,
    /// Connections opened at once and held (they send nothing).
    pub flood: usize,
    /// Services in the filtered list of case 7.
    pub filtered_services: usize,
    /// EndpointSlices in kube-proxy's filtered list of case 5.
    pub filtered_slices: usize,
    /// Rounds of each idle way (cloud refused, cloud black-holed) of case 8.
    pub heartbeat_rounds: usize,
    /// Nodes (hubs, each with kube-proxy and coredns) of case 9's pool.
    pub pool_nodes: usize,
    /// Services in case 9's cloud.
    pub pool_services: usize,
    /// EndpointSlices in case 9's cloud.
    pub pool_slices: usize,
    /// EndpointSlice updates of case 9's churn.
    pub pool_updates: usize,
    /// Rounds of case 9's two setups (direct, pool), alternating.
    pub pool_rounds: usize,
    /// EndpointSlices in the cloud of case 9's leader.
    pub leader_slices: usize,
    /// Followers case 9's leader serves.
    pub leader_followers: usize,
    /// EndpointSlice updates of the leader's churn.
    pub leader_updates: usize,
    /// How long case 11's cloud stays away.
    pub outage: Duration,
    /// Changes made in case 11's cloud while it is away.
    pub outage_changes: usize,
    /// Pods on case 11's node (and as many on another).
    pub outage_pods: usize,
    /// Other Nodes of case 11's cloud.
    pub outage_nodes: usize,
    /// Services (and as many EndpointSlices) of case 11's cloud.
    pub outage_services: usize,
    /// Services of case 12's cloud.
    pub link_services: usize,
    /// EndpointSlices of case 12's cloud.
    pub link_slices: usize,
    /// Pods per node of case 12 (each with a ConfigMap and a Secret).
    pub link_pods: usize,
    /// Changes of case 12's churn.
    pub link_changes: usize,
    /// Nodes of case 12's pool row.
    pub link_pool_nodes: usize,
    /// Case 13's steady phase (one change a second).
    pub wear_steady: Duration,
    /// Case 13's storm phase, and how often a storm comes in it.
    pub wear_storm: Duration,
    /// See [`Scale::wear_storm`].
    pub wear_storm_every: Duration,
    /// Other Nodes of case 13's cloud, whose status changes.
    pub wear_other_nodes: usize,
}

impl Scale {
    fn full() -> Scale {
        Scale {
            quick: false,
            get_samples: 5_000,
            rounds: 3,
            window: Duration::from_secs(2),
            list_pods: 1_000,
            list_samples: 30,
            watch_events: 1_000,
            cached_pods: 20_000,
            burst: 10_000,
            watches: 100,
            edge_rate: 10e6,
            pod_bytes: 5_000,
            slow_heads: 1_000,
            flood: 10_000,
            filtered_services: 1_000,
            filtered_slices: 20_000,
            heartbeat_rounds: 3,
            pool_nodes: 10,
            pool_services: 100,
            pool_slices: 1_000,
            pool_updates: 1_000,
            pool_rounds: 2,
            leader_slices: 5_000,
            leader_followers: 10,
            leader_updates: 200,
            outage: Duration::from_secs(60),
            outage_changes: 1_000,
            outage_pods: 100,
            outage_nodes: 100,
            outage_services: 500,
            link_services: 1_000,
            link_slices: 1_000,
            link_pods: 50,
            link_changes: 1_000,
            link_pool_nodes: 10,
            wear_steady: Duration::from_secs(600),
            wear_storm: Duration::from_secs(600),
            wear_storm_every: Duration::from_secs(300),
            wear_other_nodes: 20,
        }
    }

    fn quick() -> Scale {
        Scale {
            quick: true,
            get_samples: 200,
            rounds: 1,
            window: Duration::from_millis(250),
            list_pods: 200,
            list_samples: 5,
            watch_events: 50,
            cached_pods: 1_000,
            burst: 500,
            watches: 10,
            edge_rate: 10e6,
            pod_bytes: 5_000,
            slow_heads: 100,
            flood: 300,
            filtered_services: 200,
            filtered_slices: 1_000,
            heartbeat_rounds: 1,
            pool_nodes: 3,
            pool_services: 20,
            pool_slices: 100,
            pool_updates: 100,
            pool_rounds: 1,
            leader_slices: 500,
            leader_followers: 3,
            leader_updates: 50,
            outage: Duration::from_secs(2),
            outage_changes: 50,
            outage_pods: 10,
            outage_nodes: 5,
            outage_services: 20,
            link_services: 50,
            link_slices: 50,
            link_pods: 5,
            link_changes: 30,
            link_pool_nodes: 3,
            wear_steady: Duration::from_secs(10),
            wear_storm: Duration::from_secs(6),
            wear_storm_every: Duration::from_secs(5),
            wear_other_nodes: 3,
        }
    }
}

/// What the cases share: the cloud, how to reach it directly, and the scale.
pub struct Bench<'a> {
    /// The stand-in cloud.
    pub cloud: &'a Cloud,
    /// TLS for direct clients.
    pub tls: DirectTls,
    /// Case sizes.
    pub scale: &'a Scale,
}

impl Bench<'_> {
    /// A kubelet-like client straight to the cloud.
    pub fn direct(&self) -> Client {
        Client::direct(&self.cloud.url(), &self.tls, KUBELET)
    }

    /// The same client through `hub`.
    pub fn via(&self, hub: &Hub) -> Client {
        Client::plain(&hub.url(), KUBELET)
    }

    /// Starts a hub for the cloud with its cache under `dir`, logging at `--v=0`, and waits
    /// until its own start-up session (the `yurt-hub-cfg` list) has committed: a case that
    /// counts committed sessions must count only its own.
    pub fn start_hub(&self, dir: &Path) -> Running {
        self.start_hub_with(dir, &["--v=0"])
    }

    /// [`Bench::start_hub`] with `args` after the launcher's defaults instead of `--v=0`.
    pub fn start_hub_with(&self, dir: &Path, args: &[&str]) -> Running {
        let hub = Running::register(Hub::start(&HubSpec::for_cloud(self.cloud, dir).with(args)));
        hub.wait_cache_quiet();
        hub
    }
}

/// Services `svc-<i>` the cloud holds so far (0 to this - 1), see [`ensure_services`].
static SERVICES: Mutex<usize> = Mutex::new(0);

/// Makes the cloud hold Services `svc-000000` to `svc-<count - 1>` (the stand-in's
/// `populate_services`), adding only those an earlier case did not: case 7 lists 1,000 of
/// them, case 5's EndpointSlices belong to 20,000.
pub fn ensure_services(cloud: &Cloud, count: usize) {
    let mut have = lock(&SERVICES);
    if *have < count {
        cloud.populate_services_from(*have, count - *have);
        *have = count;
    }
}

/// Hub processes running now, killed by the watchdog if the run overstays.
pub static HUBS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// CPU time (USER_HZ ticks) used by the hubs that have exited, to tell the benchmark's own
/// load from other work on the machine.
static HUB_TICKS: AtomicU64 = AtomicU64::new(0);
/// The case running now, for failure messages.
static CASE: Mutex<&'static str> = Mutex::new("start-up");

/// A hub started by the benchmark; registered for the watchdog while it lives.
pub struct Running(Hub);

impl Running {
    /// Registers `hub` for the watchdog (and its CPU time for the report) until dropped.
    pub fn register(hub: Hub) -> Running {
        lock(&HUBS).push(hub.pid());
        Running(hub)
    }
}

impl Deref for Running {
    type Target = Hub;
    fn deref(&self) -> &Hub {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let pid = self.0.pid();
        let ticks = support::hub::cpu_ticks(&pid.to_string()).unwrap_or(0);
        HUB_TICKS.fetch_add(ticks, Ordering::Relaxed);
        // Under a runner (a profiler such as valgrind, through TINYHUB_TEST_RUNNER) a graceful
        // stop first, so the profile gets written; otherwise, and after it, the inner `Hub`
        // kills the process when it drops, right after this.
        if support::hub::emulated() && !std::thread::panicking() {
            support::hub::signal(pid, "TERM");
            // A process that has exited (a zombie until reaped) has no VmRSS line.
            eventually(Duration::from_secs(120), || proc_status(pid, "VmRSS:") == 0);
        }
        lock(&HUBS).retain(|p| *p != pid);
    }
}

/// A case run against the shared online hub.
type OnlineCase = fn(&Bench, &Hub, &mut Report) -> Result<(), String>;

/// A case that failed, and why.
struct Failure {
    case: &'static str,
    why: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.case, self.why)
    }
}

struct Options {
    quick: bool,
    under_bench: bool,
    cases: Option<Vec<u8>>,
    update: bool,
    readme_only: bool,
}

/// The highest case number.
const LAST_CASE: u8 = 14;

const USAGE: &str = "usage: cargo bench --bench hub [-- --quick] [-- --cases=1,2,...,14 [--update]] \
                     [-- --readme-only]\n\
                     --update: write the sections of the cases run into the existing report \
                     (BENCHMARKS.md, or the quick one), replacing theirs and their rows of the \
                     targets table, keeping the rest\n\
                     --readme-only: measure nothing, rewrite README.md's measured block from \
                     BENCHMARKS.md";

fn options() -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        under_bench: false,
        cases: None,
        update: false,
        readme_only: false,
    };
    let mut unknown = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--bench" => o.under_bench = true,
            "--quick" => o.quick = true,
            "--update" => o.update = true,
            "--readme-only" => o.readme_only = true,
            "--help" | "-h" => return Err(USAGE.into()),
            _ => match arg.strip_prefix("--cases=") {
                Some(list) => {
                    let cases = list
                        .split(',')
                        .map(|c| {
                            c.trim()
                                .parse::<u8>()
                                .ok()
                                .filter(|n| (1..=LAST_CASE).contains(n))
                        })
                        .collect::<Option<Vec<u8>>>()
                        .ok_or_else(|| {
                            format!("--cases takes numbers 1 to {LAST_CASE}: {list:?}")
                        })?;
                    o.cases = Some(cases);
                }
                None => unknown.push(arg),
            },
        }
    }
    // `cargo test` passes its own arguments (--nocapture, filters) to every target; only
    // under `cargo bench` is an unknown argument a mistake.
    if o.under_bench && !unknown.is_empty() {
        return Err(format!("unknown arguments {unknown:?}\n{USAGE}"));
    }
    if o.update && o.cases.is_none() {
        return Err(format!("--update goes with --cases\n{USAGE}"));
    }
    Ok(o)
}

fn main() -> ExitCode {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if !opts.under_bench {
        println!(
            "benches/hub.rs runs under `cargo bench` (`make bench`, `make bench-quick`); nothing to do"
        );
        return ExitCode::SUCCESS;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if opts.readme_only {
        return match write_readme(&repo) {
            Ok(()) => ExitCode::SUCCESS,
            Err(f) => {
                eprintln!("{f}");
                ExitCode::FAILURE
            }
        };
    }
    // Case 5 opens thousands of connections at once.
    support::hub::raise_file_limit();
    let scale = if opts.quick {
        Scale::quick()
    } else {
        Scale::full()
    };
    watchdog(if opts.quick {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(2400)
    });
    match run(&scale, opts.cases.as_deref(), opts.update) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("\nbenchmark failed: {f}");
            ExitCode::FAILURE
        }
    }
}

/// Ends the whole run (and the hubs it started) if it overstays `limit`: every wait has its
/// own deadline, this catches a read that blocks where no deadline reaches.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!(
            "\nbenchmark failed: {} did not finish; the whole run exceeded {limit:?}",
            lock(&CASE)
        );
        for pid in lock(&HUBS).iter() {
            support::hub::signal(*pid, "KILL");
        }
        std::process::exit(1);
    });
}

/// Runs `f` as step `name`: a panic (from the shared support code) becomes a failure too.
fn case<T>(name: &'static str, f: impl FnOnce() -> Result<T, String>) -> Result<T, Failure> {
    *lock(&CASE) = name;
    println!("\n==> {name}");
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(why)) => Err(Failure { case: name, why }),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".into());
            Err(Failure { case: name, why })
        }
    }
}

fn run(scale: &Scale, only: Option<&[u8]>, update: bool) -> Result<(), Failure> {
    let wanted = |n: u8| only.is_none_or(|o| o.contains(&n));
    let started = Instant::now();
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut report = Report::default();
    // Several crates may race to install a provider; the first one wins and all use ring.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let (bin, version) = case("setup", || {
        let bin = hub_binary();
        // Under TINYHUB_TEST_RUNNER (the armv7 binary under qemu) the runner starts it too:
        // this machine need not run foreign binaries by itself (binfmt_misc).
        let out = support::hub::runner_command(&bin)
            .unwrap_or_else(|| std::process::Command::new(&bin))
            .arg("--version")
            .output()
            .map_err(|e| format!("running {} --version: {e}", bin.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok((bin, version))
    })?;
    let load_before = report::load_average();
    let machine_before = report::machine_ticks();
    let self_before = support::hub::cpu_ticks("self");
    report.preamble = vec![
        ("Date".into(), report::utc_now()),
        ("Machine".into(), report::machine()),
        ("Commit".into(), report::commit(&manifest_dir)),
        (
            "Build".into(),
            format!(
                "{}; `{}` {}",
                report::release_profile(&manifest_dir.join("Cargo.toml")),
                bin.display(),
                if version.is_empty() {
                    String::new()
                } else {
                    format!("(`{version}`)")
                }
            ),
        ),
        (
            "Mode".into(),
            if scale.quick {
                "`--quick` smoke run: small sizes, figures not meaningful".into()
            } else {
                "full".into()
            },
        ),
    ];
    println!(
        "tinyhub benchmark ({})",
        if scale.quick { "quick" } else { "full" }
    );
    for (k, v) in &report.preamble {
        println!("  {k}: {v}");
    }

    let cloud = Cloud::start();
    cloud.set_record_requests(false);
    // The client asks for no compression, but make sure: gzip would shrink the padded pods
    // to almost nothing and measure the compressor instead of the proxy.
    cloud.set_gzip_threshold(usize::MAX);
    let bench = Bench {
        cloud: &cloud,
        tls: DirectTls::for_cloud(&cloud).map_err(|why| Failure { case: "setup", why })?,
        scale,
    };

    // Kept until the end: removing thousands of cache files just before the cache writer case
    // would slow its file creation on filesystems that avoid reusing fresh inodes (ext4).
    let online_dir = TempDir::new("bench-online");
    // Case 7 runs with the online hub, before case 5 adds thousands of Services, but its
    // section goes last.
    let mut late = None;
    if wanted(1) || wanted(2) || wanted(3) || wanted(7) {
        let hub = case("start the hub for cases 1 to 3 and 7", || {
            Ok(bench.start_hub(online_dir.path()))
        })?;
        let online: [(u8, &'static str, OnlineCase); 4] = [
            (1, "case 1 (small get)", online::small_get),
            (2, "case 2 (list of 1,000 pods)", online::list),
            (3, "case 3 (watch delivery)", online::watch),
            (
                7,
                "case 7 (filtered list of 1,000 Services)",
                online::filtered_list,
            ),
        ];
        for (n, name, f) in online {
            if wanted(n) {
                case(name, || f(&bench, &hub, &mut report))?;
                print_last(&report);
            }
        }
        if wanted(7) {
            late = report.sections.pop();
        }
    }
    if wanted(4) || wanted(5) {
        let dir = TempDir::new("bench-footprint");
        case("cases 4 and 5 (cache writer, memory)", || {
            footprint::writer_and_memory(&bench, dir.path(), &mut report)
        })?;
        let n = report.sections.len();
        print!("{}", report.sections[n - 2].markdown());
        print_last(&report);
    }
    if wanted(6) {
        case("case 6 (binary size)", || {
            footprint::binary_size(&bin, &target_dir(), &mut report)
        })?;
        print_last(&report);
    }
    report.sections.extend(late);
    // Last: it runs no other hub beside its own, and its section follows case 7's.
    if wanted(8) {
        let dir = TempDir::new("bench-heartbeat");
        case(
            "case 8 (heartbeat: from the cloud's death to unhealthy)",
            || heartbeat::death_to_unhealthy(&bench, dir.path(), &mut report),
        )?;
        print_last(&report);
    }
    // Its own hubs and nginx on the shared cloud.
    if wanted(10) {
        let dir = TempDir::new("bench-peer");
        case("case 10 (peer: tinyhub beside nginx)", || {
            peer::peer(&bench, dir.path(), &mut report)
        })?;
        print_last(&report);
    }
    // Its own clouds and hubs, nothing shared with the cases above.
    if wanted(9) {
        case(
            "case 9 (a pool of hubs: link economy, the leader's memory)",
            || pool::pool(&bench, &mut report),
        )?;
        print_last(&report);
    }
    // Its own clouds and hub, nothing shared with the cases above.
    if wanted(11) {
        let dir = TempDir::new("bench-outage");
        case("case 11 (watches through an outage)", || {
            outage::outage(&bench, dir.path(), &mut report)
        })?;
        print_last(&report);
    }
    // Its own clouds and hubs, nothing shared with the cases above.
    if wanted(12) {
        case(
            "case 12 (a node's day in miniature: the cloud link)",
            || link::link(&bench, &mut report),
        )?;
        print_last(&report);
    }
    // Its own cloud and hub, nothing shared with the cases above.
    if wanted(13) {
        case("case 13 (flash wear)", || wear::wear(&bench, &mut report))?;
        print_last(&report);
    }

    // Its own clouds and hubs, nothing shared with the cases above.
    if wanted(14) {
        case("case 14 (offline boot)", || boot::boot(&bench, &mut report))?;
        print_last(&report);
    }

    drop(online_dir);
    let load_after = report::load_average();
    let elapsed = started.elapsed();
    report.preamble.push((
        "Load average".into(),
        format!(
            "{load_before} before, {load_after} after (1, 5, 15 min); the run took {:.0} s",
            elapsed.as_secs_f64()
        ),
    ));
    if let (Some((busy0, steal0)), Some((busy1, steal1)), Some(me0), Some(me1)) = (
        machine_before,
        report::machine_ticks(),
        self_before,
        support::hub::cpu_ticks("self"),
    ) {
        // Ticks are USER_HZ, fixed at 100 per second.
        let ours = (me1 - me0) + HUB_TICKS.load(Ordering::Relaxed);
        let others = (busy1 - busy0).saturating_sub(ours) as f64 / 100.0;
        let capacity = elapsed.as_secs_f64()
            * std::thread::available_parallelism().map_or(1, usize::from) as f64;
        report.preamble.push((
            "Other activity".into(),
            format!(
                "other processes used {others:.0} CPU-seconds during the run ({:.0}% of the \
                 machine); the hypervisor stole {:.1} s",
                100.0 * others / capacity.max(1e-9),
                (steal1 - steal0) as f64 / 100.0
            ),
        ));
    }
    report.method = method(scale);
    println!("\n==> targets\n\n{}", report.targets_table().markdown());

    let (path, title) = if scale.quick {
        (
            target_dir().join("BENCHMARKS-quick.md"),
            "tinyhub benchmarks (quick smoke run)",
        )
    } else {
        (manifest_dir.join("BENCHMARKS.md"), "tinyhub benchmarks")
    };
    if only.is_some() && !update {
        println!("(a partial run with --cases writes no file; --update writes its sections)");
        return Ok(());
    }
    let written = if update {
        report.update(&path)
    } else {
        report.write(&path, title)
    };
    written.map_err(|why| Failure {
        case: "report",
        why,
    })?;
    println!("wrote {}", path.display());
    // The quick run's figures mean nothing: the README keeps the full run's.
    if !scale.quick {
        write_readme(&manifest_dir)?;
    }
    Ok(())
}

/// Rewrites README.md's measured block in `repo` from its BENCHMARKS.md, and says so.
fn write_readme(repo: &Path) -> Result<(), Failure> {
    let changed = readme::regenerate(repo).map_err(|why| Failure {
        case: "README.md's measured block",
        why,
    })?;
    if changed {
        println!(
            "rewrote the measured block of {}",
            repo.join("README.md").display()
        );
    } else {
        println!("README.md's measured block already matches BENCHMARKS.md");
    }
    Ok(())
}

/// Cargo's target directory: this program runs as `<target>/<profile>/deps/hub-<hash>`.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn print_last(report: &Report) {
    if let Some(s) = report.sections.last() {
        print!("{}", s.markdown());
    }
}

fn method(scale: &Scale) -> Vec<String> {
    vec![
        "One process runs the stand-in cloud (the test apiserver: a TLS front that splices to an \
         in-memory HTTP/1.1 server, objects in memory) and the benchmark clients; `tinyhub` runs \
         as a child process (`--v=0`, heartbeat every second; case 8's hub logs at `--v=2` and \
         keeps YurtHub's default heartbeat, every 10 s). Everything shares this machine's \
         cores, so the hub's own work competes with the cloud's and the clients'."
            .into(),
        "Both ways use the same client (ureq 3.5, one keep-alive connection per client thread, \
         User-Agent of a kubelet, no compression): direct means TLS 1.3 with a client \
         certificate to the cloud; through the hub means plain HTTP to the hub on loopback, which \
         forwards over its own pooled TLS connections with its own certificate. As a kubelet, \
         every cacheable answer through the hub is also handed to its cache writer."
            .into(),
        "Latency: the two ways alternate request by request (direct, hub, direct, hub, ...) after \
         a warm-up; percentiles are nearest-rank over the sorted samples. Throughput: N client \
         threads, each with its own connection, run back to back for a fixed window; the two ways \
         alternate window by window; the rate is operations over the time from the common start \
         to the last completed operation, summed over the rounds."
            .into(),
        format!(
            "Reads the hub has to cache in full (the cache warm-up of case 2, the lists and the \
             watch burst of case 4) are read at an edge link's pace, about {:.0} MB/s in 16 KiB \
             reads: over loopback the cloud outruns the disk, and the hub then drops the response's \
             cache session rather than slow the client (by design, counted in \
             `tinyhub_cache_sessions_abandoned_total`). Other reads go as fast as the client reads.",
            scale.edge_rate / 1e6
        ),
        "Watch delivery: two watches stay open (one direct, one through the hub) on two \
         namespaces; the benchmark creates a ConfigMap in one, then the other, and times from \
         just before the cloud's create call (which emits the event) to the line arriving at the \
         client, one event in flight at a time."
            .into(),
        "Memory: VmRSS, VmHWM and Threads from `/proc/<hub pid>/status`; the peak is reset \
         (`/proc/<pid>/clear_refs` = 5) when each state begins, so each state's peak is its own. \
         `tinyhub_heap_bytes` / `tinyhub_heap_peak_bytes` are the hub's own heap accounting \
         (lifetime peak). Cache writer throughput is objects (or bytes) over \
         `tinyhub_cache_writer_busy_seconds_total`, the time the writer thread spent on them."
            .into(),
        format!(
            "Synthetic pods are about {} bytes of JSON each (the stand-in cloud's `PodFill`).",
            scale.pod_bytes
        ),
    ]
}
