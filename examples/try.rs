//! `make try`: tinyhub by hand. Starts the stand-in cloud apiserver (the demo's objects and a
//! configmap `tick` whose data changes every few seconds) and the real `tinyhub` binary in
//! front of it, writes kubeconfigs under one local folder (`TRY_DIR`, default `./try`), prints
//! the commands to try from another terminal, and runs until Ctrl-C.
//!
//! The cloud is cut and brought back by signals to this process (`kill -USR1 <pid>`,
//! `kill -USR2 <pid>`): no port or file to find, and the same from any terminal. SIGINT,
//! SIGTERM and SIGHUP end the hub and the cloud. The hub writes nothing outside the folder:
//! its root and cache are in it and it makes no dummy interface.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::hub::{Hub, signal};
use support::{Auth, Cloud, KubeconfigOptions, rfc3339, unix_now, write_plain_kubeconfig};

/// How often the `tick` configmap changes.
const TICK_EVERY: Duration = Duration::from_secs(3);

/// How often the main loop looks at the signals and copies the hub's log.
const POLL: Duration = Duration::from_millis(100);

/// Set by the signal handler; read (and cleared) by the main loop.
static STOP: AtomicBool = AtomicBool::new(false);
static CUT: AtomicBool = AtomicBool::new(false);
static BACK: AtomicBool = AtomicBool::new(false);

/// Only atomic stores: all a signal handler may safely do.
extern "C" fn on_signal(signal: libc::c_int) {
    let flag = match signal {
        libc::SIGUSR1 => &CUT,
        libc::SIGUSR2 => &BACK,
        _ => &STOP,
    };
    flag.store(true, Ordering::SeqCst);
}

/// The files a run leaves in the folder (it may be the user's own folder, so only these are
/// ever removed, and only where [`MARK`] says a try wrote them): the hub's cache and root, the
/// kubeconfigs and the log.
const OURS: &[&str] = &[
    "cache",
    "root",
    "hub.kubeconfig",
    "admin.kubeconfig",
    "cloud.kubeconfig",
    "hub.log",
];

/// The file a try writes first in its folder: its mark that the files of [`OURS`] there are a
/// try's, and its lock (held while it runs) that keeps a second try out.
const MARK: &str = ".tinyhub-try";

/// How long a hub has to end on SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(3);

fn main() {
    let dir = PathBuf::from(std::env::var_os("TRY_DIR").unwrap_or_else(|| "try".into()));
    // Held until the process ends: another try on this folder is refused.
    let _mark = match claim(&dir) {
        Ok(mark) => mark,
        Err(e) => {
            eprintln!("make try: {e}");
            std::process::exit(1);
        }
    };
    for signal in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: the handler only stores to atomics (async-signal-safe).
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }

    let cloud = Cloud::start();
    // The request log grows with every request; a try may run for hours.
    cloud.set_record_requests(false);
    common::seed(&cloud);
    let mut ticks = 0u64;
    tick(&cloud, ticks);
    let mut spec = common::hub_spec(&cloud, &dir);
    // Should this program be killed without a chance to end the hub (SIGKILL), the kernel
    // ends it: setpriv (util-linux, `make tools`) sets the hub's parent-death signal.
    if Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        spec.prefix = vec!["setpriv".into(), "--pdeathsig=TERM".into()];
    }
    let mut hub = Hub::start(&spec);
    let admin = write_plain_kubeconfig(&dir, "admin.kubeconfig", &hub.url());
    let cluster_admin =
        Auth::CertInline(cloud.issue_client("kubernetes-admin", &["system:masters"]));
    let direct = cloud.write_kubeconfig(
        &dir,
        KubeconfigOptions::from(cluster_admin).named("cloud.kubeconfig"),
    );
    let me = std::process::id();
    let kubectl = format!("kubectl --kubeconfig={}", admin.display());
    println!(
        "tinyhub try: a stand-in cloud apiserver and the tinyhub binary, files in {dir}/\n\n\
         \x20 cloud  {cloud_url}  {seeded}, configmap default/tick\n\
         \x20        (tick's data changes every {every} s)\n\
         \x20 hub    {hub_url} (proxy), {serve}/metrics, pid {hub_pid}\n\
         \x20        cache {dir}/cache, certificates {dir}/root, log {dir}/hub.log\n\n\
         Ready. From another terminal:\n\n\
         \x20 kubectl through the hub:  {kubectl} get pods -A -o name\n\
         \x20 cut the cloud:            kill -USR1 {me}\n\
         \x20 bring it back:            kill -USR2 {me}\n\n\
         \x20 watch the tick:           {kubectl} get configmap tick -w -o jsonpath='{{.data.time}}{{\"\\n\"}}'\n\
         \x20 kubectl to the cloud:     kubectl --kubeconfig={direct} get pods -A\n\n\
         kubectl's tables (its default output) are the cloud's work and not cached: what the hub\n\
         keeps for kubectl are the objects it read (-o name, -o yaml, ...); offline, `get pods -A`\n\
         is answered from them. Ctrl-C here (or kill {me}) stops the hub and the cloud.",
        dir = dir.display(),
        cloud_url = cloud.url(),
        seeded = common::SEEDED,
        every = TICK_EVERY.as_secs(),
        hub_url = hub.url(),
        serve = hub.serve_url(),
        hub_pid = hub.pid(),
        direct = direct.display(),
    );
    let _ = std::io::stdout().flush();

    let mut log = Log::open(&dir.join("hub.log"));
    let mut next_tick = Instant::now() + TICK_EVERY;
    while !STOP.load(Ordering::SeqCst) {
        if CUT.swap(false, Ordering::SeqCst) {
            if cloud.is_running() {
                cloud.stop();
                say(
                    "the cloud is cut: the hub answers from its cache once its health check fails (a second or two)",
                );
            } else {
                say("the cloud is already cut");
            }
        }
        if BACK.swap(false, Ordering::SeqCst) {
            if cloud.is_running() {
                say("the cloud is already up");
            } else {
                cloud.restart();
                say("the cloud is back: the hub forwards again once its health check passes");
            }
        }
        if Instant::now() >= next_tick {
            ticks += 1;
            tick(&cloud, ticks);
            next_tick += TICK_EVERY;
        }
        log.copy(&hub);
        if hub.exited() {
            say("the hub exited; its log is in hub.log");
            break;
        }
        std::thread::sleep(POLL);
    }
    say("stopping the hub and the cloud");
    // As a service manager stops it: SIGTERM, a moment to end, then SIGKILL (the drop).
    if !hub.exited() {
        signal(hub.pid(), "TERM");
        let deadline = Instant::now() + GRACE;
        while !hub.exited() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
    }
    log.copy(&hub);
    // Dropping the hub kills it if it still runs and waits for it; dropping the cloud closes
    // its ports.
    drop(hub);
    drop(cloud);
    println!(
        "stopped; the files stay in {dir}/ (`rm -rf {dir}` removes them)",
        dir = dir.display()
    );
}

/// Writes the `tick` configmap: the count and the time, as the cloud's truth of the moment.
/// It changes while the cloud is cut too (the cloud goes on; the node cannot see it).
fn tick(cloud: &Cloud, n: u64) {
    cloud.apply(
        "configmaps",
        json!({"metadata": {"name": "tick", "namespace": "default"},
               "data": {"count": n.to_string(), "time": rfc3339(unix_now())}}),
    );
}

/// One line of this program's own story, with the time.
fn say(what: &str) {
    let now = unix_now() % 86_400;
    println!(
        "{:02}:{:02}:{:02} {what}",
        now / 3600,
        now / 60 % 60,
        now % 60
    );
    let _ = std::io::stdout().flush();
}

/// Makes `dir` a try's folder and locks it: refused while another try runs there, or when
/// the files of [`OURS`] are there without a try's mark (someone else's). A previous try's
/// files are removed, and only when no hub holds its root any more.
fn claim(dir: &Path) -> Result<fs::File, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mark_path = dir.join(MARK);
    let marked = mark_path.exists();
    if !marked {
        let theirs: Vec<&str> = OURS
            .iter()
            .copied()
            .filter(|name| dir.join(name).symlink_metadata().is_ok())
            .collect();
        if !theirs.is_empty() {
            return Err(format!(
                "{} holds {} but no {MARK}: not a try's folder, left alone; \
                 give another one (TRY_DIR=...)",
                dir.display(),
                theirs.join(", ")
            ));
        }
    }
    let mark = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&mark_path)
        .map_err(|e| format!("cannot write {}: {e}", mark_path.display()))?;
    if !try_lock(&mark) {
        return Err(format!(
            "another try runs in {} (it holds {MARK}); end it first, or give another folder \
             (TRY_DIR=...)",
            dir.display()
        ));
    }
    // A hub left running by a try that was killed outright still holds its root's lock
    // (src/dir_lock.rs: flock on the directory): its files stay.
    let root = dir.join("root");
    if let Ok(open) = fs::File::open(&root)
        && !try_lock(&open)
    {
        return Err(format!(
            "a hub still runs on {} (it holds the lock of the folder); end it first",
            root.display()
        ));
    }
    if marked {
        for name in OURS {
            let path = dir.join(name);
            let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
        }
    }
    Ok(mark)
}

/// Takes an exclusive `flock` on `file` without waiting; false when another holds it. A
/// filesystem that does not lock counts as free (nothing could be kept out anyway).
fn try_lock(file: &fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
}

/// The hub's log (kept in memory by [`Hub`]) copied to a file as it grows.
struct Log {
    file: Option<fs::File>,
    /// Lines copied so far.
    lines: usize,
}

impl Log {
    fn open(path: &Path) -> Log {
        let file = fs::File::create(path)
            .map_err(|e| eprintln!("cannot write {}: {e}", path.display()))
            .ok();
        Log { file, lines: 0 }
    }

    /// Appends the lines logged since the last copy (only those are read from the hub: the
    /// cost of a copy does not grow with the hours).
    fn copy(&mut self, hub: &Hub) {
        let Some(file) = &mut self.file else { return };
        let (new, total) = hub.logs_since(self.lines);
        for line in new {
            let _ = writeln!(file, "{line}");
        }
        self.lines = total;
    }
}
