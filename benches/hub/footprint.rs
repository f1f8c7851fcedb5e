//! Cases 4 to 6, what the hub costs the node: the cache writer (a 20,000-pod list, a burst of
//! 10,000 watch events, a re-list of unchanged objects), the hub's memory and threads in each
//! state (idle, 100 open watches, caching 20,000 pods, an offline list of 5,000 pods, a
//! filtered list of 20,000 EndpointSlices as kube-proxy, on a hub of its own), and the size of
//! the binaries.
//!
//! One fresh hub goes through the states in order, so "idle" is a hub that has done nothing
//! yet; each state's peak RSS is its own (reset when the state begins).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::Client;
use crate::client::{
    Cpu, MetricSnapshot, ProcMem, disk_usage, filesystem, metrics, paced_copy, proc_mem,
    reset_peak, thread_cpu, wait_health, wait_until,
};
use crate::online::{HEALTH_CHANGE, KUBE_PROXY, Outage, filter_stage};
use crate::report::{Report, Section, Table};
use crate::stats::{count, dur, size};
use crate::support::PodFill;
use crate::support::hub::{Hub, KUBELET, hold_connections, raw, raw_status};
use crate::{Bench, Running};

/// How long the writer may take to persist what it was sent.
const PERSIST: Duration = Duration::from_secs(180);

/// The hub's memory in one state.
struct Mem {
    state: String,
    proc: ProcMem,
    heap: Option<f64>,
    heap_peak: Option<f64>,
}

fn measure(hub: &Hub, state: &str) -> Result<Mem, String> {
    // /proc first: reading /metrics makes the hub do (a little) work.
    let proc = proc_mem(hub.pid())?;
    let m = metrics(hub)?;
    Ok(Mem {
        state: state.to_owned(),
        proc,
        heap: m.find("tinyhub_heap_bytes"),
        heap_peak: m.find("tinyhub_heap_peak_bytes"),
    })
}

/// What the cache writer did between two metric snapshots.
struct Work {
    objects: f64,
    bytes: f64,
    skipped: f64,
    abandoned: f64,
    committed: f64,
    busy: Option<f64>,
    cpu: Option<Cpu>,
    wall: Duration,
}

fn work(before: &MetricSnapshot, after: &MetricSnapshot, cpu: Option<Cpu>, wall: Duration) -> Work {
    let d = |s: &str| after.get(s) - before.get(s);
    let busy = match (
        before.find("tinyhub_cache_writer_busy_seconds_total"),
        after.find("tinyhub_cache_writer_busy_seconds_total"),
    ) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    Work {
        objects: d("tinyhub_cache_objects_written_total"),
        bytes: d("tinyhub_cache_bytes_written_total"),
        skipped: d("tinyhub_cache_writes_skipped_identical_total"),
        abandoned: d("tinyhub_cache_sessions_abandoned_total"),
        committed: d("tinyhub_cache_sessions_committed_total"),
        busy,
        cpu,
        wall,
    }
}

/// CPU time of the hub's cache writer thread so far.
fn writer_cpu(hub: &Hub) -> Option<Cpu> {
    thread_cpu(hub.pid(), "cache-writer")
}

fn cpu_delta(before: Option<Cpu>, after: Option<Cpu>) -> Option<Cpu> {
    Some(after?.since(&before?))
}

/// Waits until the writer has committed or abandoned one more session than in `before`.
fn wait_session_end(hub: &Hub, before: &MetricSnapshot, what: &str) -> Result<(), String> {
    let c0 = before.get("tinyhub_cache_sessions_committed_total");
    let a0 = before.get("tinyhub_cache_sessions_abandoned_total");
    wait_until(PERSIST, what, || {
        let m = metrics(hub)?;
        Ok(m.get("tinyhub_cache_sessions_committed_total") > c0
            || m.get("tinyhub_cache_sessions_abandoned_total") > a0)
    })
}

/// A list read through the hub at an edge link's pace, and what the writer did with it.
pub struct CachedList {
    /// The cache writer's work for the attempt that committed.
    work: Work,
    /// Body bytes.
    pub bytes: u64,
    /// Time to read the body.
    read_time: Duration,
    /// Rates (bytes per second) at which earlier attempts were abandoned.
    pub abandoned_at: Vec<f64>,
}

/// Reads `path` through the hub at `rate` until its cache session commits, halving the rate
/// after an abandoned attempt (the writer fell more than 8 MiB behind), three attempts at
/// most.
pub fn cache_list(hub: &Hub, path: &str, rate: f64) -> Result<CachedList, String> {
    cache_list_as(hub, KUBELET, path, rate)
}

/// [`cache_list`] by the component of User-Agent `agent`.
fn cache_list_as(
    hub: &Hub,
    agent: &'static str,
    path: &str,
    rate: f64,
) -> Result<CachedList, String> {
    let mut abandoned_at = Vec::new();
    let mut rate = rate;
    for _ in 0..3 {
        let (m0, cpu0) = (metrics(hub)?, writer_cpu(hub));
        let t0 = Instant::now();
        let bytes = Client::plain(&hub.url(), agent).get_paced(path, rate)?;
        let read_time = t0.elapsed();
        wait_session_end(hub, &m0, &format!("the cache session of {path} to end"))?;
        let work = work(
            &m0,
            &metrics(hub)?,
            cpu_delta(cpu0, writer_cpu(hub)),
            t0.elapsed(),
        );
        if work.committed >= 1.0 {
            return Ok(CachedList {
                work,
                bytes,
                read_time,
                abandoned_at,
            });
        }
        abandoned_at.push(rate);
        rate /= 2.0;
    }
    Err(format!(
        "the hub abandoned the cache session of {path} at every pace tried ({})",
        rates(&abandoned_at)
    ))
}

/// "10, 5 MB/s".
pub fn rates(r: &[f64]) -> String {
    let list: Vec<String> = r.iter().map(|x| format!("{:.1}", x / 1e6)).collect();
    format!("{} MB/s", list.join(", "))
}

/// Cases 4 and 5 on one fresh hub; pushes two sections.
pub fn writer_and_memory(b: &Bench, dir: &Path, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    let cloud = b.cloud;
    let hub: Running = b.start_hub(dir);
    let pid = hub.pid();
    let mut mems = Vec::new();

    // Idle: started, the cloud healthy, nothing asked yet.
    wait_health(&hub, cloud, true, HEALTH_CHANGE)?;
    reset_peak(pid)?;
    std::thread::sleep(if scale.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(3)
    });
    mems.push(measure(
        &hub,
        "idle (started, cloud healthy, no client yet)",
    )?);

    // Open watches.
    let configmap_watchers = cloud.watchers("configmaps");
    reset_peak(pid)?;
    let watch_path = format!(
        "/api/v1/namespaces/mem/configmaps?watch=1&resourceVersion={}",
        cloud.resource_version()
    );
    let mut streams = Vec::new();
    for _ in 0..scale.watches {
        streams.push(b.via(&hub).watch(&watch_path)?);
    }
    if !cloud.wait_for_watchers(
        "configmaps",
        configmap_watchers + scale.watches,
        Duration::from_secs(30),
    ) {
        return Err(format!(
            "{} watches through the hub did not all reach the cloud within 30 s",
            scale.watches
        ));
    }
    mems.push(measure(
        &hub,
        &format!("{} kubelet watches open", scale.watches),
    )?);
    // Close them; the hub notices a gone client when it next writes to it, so send events.
    drop(streams);
    let mut nudge = 0;
    wait_until(
        Duration::from_secs(30),
        "the hub to close the watches the clients left",
        || {
            if cloud.watchers("configmaps") <= configmap_watchers {
                return Ok(true);
            }
            nudge += 1;
            cloud.create(
                "configmaps",
                json!({"metadata": {"name": format!("nudge-{nudge}"), "namespace": "mem"}}),
            );
            std::thread::sleep(Duration::from_millis(50));
            Ok(false)
        },
    )?;

    // The big list, cached at an edge link's pace.
    let pods = scale.cached_pods;
    cloud.populate_pods(&PodFill {
        count: pods,
        namespaces: 4,
        nodes: 4,
        body_bytes: scale.pod_bytes,
        prefix: "big".into(),
    });
    let list_path = "/api/v1/pods?labelSelector=fill%3Dbig";
    reset_peak(pid)?;
    let first = cache_list(&hub, list_path, scale.edge_rate)?;
    let (listed, list_bytes, read_time) = (&first.work, first.bytes, first.read_time);
    mems.push(measure(
        &hub,
        &format!("caching a {}-pod list", count(pods as u64)),
    )?);
    let pods_dir = hub.spec.cache_dir.join("kubelet/pods.v1.core");
    let (files, apparent, allocated) = disk_usage(&pods_dir);

    // A burst of watch events, read at the same pace.
    let pod_watchers = cloud.watchers("pods");
    let burst_watch = b.via(&hub).watch(&format!(
        "/api/v1/pods?watch=1&labelSelector=fill%3Dburst&resourceVersion={}",
        cloud.resource_version()
    ))?;
    if !cloud.wait_for_watchers("pods", pod_watchers + 1, Duration::from_secs(20)) {
        return Err("the burst watch did not reach the cloud within 20 s".into());
    }
    let lines = Arc::new(AtomicU64::new(0));
    let reader_failed = Arc::new(AtomicBool::new(false));
    {
        let (lines, failed, rate, want) = (
            Arc::clone(&lines),
            Arc::clone(&reader_failed),
            scale.edge_rate,
            scale.burst as u64,
        );
        std::thread::spawn(move || {
            let result = paced_copy(burst_watch.into_inner(), rate, |piece| {
                let n = piece.iter().filter(|&&c| c == b'\n').count() as u64;
                lines.fetch_add(n, Ordering::Relaxed) + n < want
            });
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
        });
    }
    let (m0, cpu0) = (metrics(&hub)?, writer_cpu(&hub));
    let t0 = Instant::now();
    cloud.populate_pods(&PodFill {
        count: scale.burst,
        namespaces: 1,
        nodes: 1,
        body_bytes: scale.pod_bytes,
        prefix: "burst".into(),
    });
    wait_until(PERSIST, "the burst's events to reach the client", || {
        if reader_failed.load(Ordering::Relaxed) {
            return Err("the burst watch broke off".into());
        }
        Ok(lines.load(Ordering::Relaxed) >= scale.burst as u64)
    })?;
    let delivered = t0.elapsed();
    let objects0 = m0.get("tinyhub_cache_objects_written_total");
    let abandoned0 = m0.get("tinyhub_cache_sessions_abandoned_total");
    wait_until(PERSIST, "the burst's objects to be written", || {
        let m = metrics(&hub)?;
        Ok(
            m.get("tinyhub_cache_objects_written_total") - objects0 >= scale.burst as f64
                || m.get("tinyhub_cache_sessions_abandoned_total") > abandoned0,
        )
    })?;
    let burst = work(
        &m0,
        &metrics(&hub)?,
        cpu_delta(cpu0, writer_cpu(&hub)),
        t0.elapsed(),
    );

    // The same list again, nothing changed: every write should be skipped.
    let second = cache_list(&hub, list_path, scale.edge_rate)?;
    let relisted = &second.work;

    // Offline list of a quarter of the pods (one namespace), the cloud stopped: within the
    // scope the hub listed whole (all namespaces, `fill=big`), as offline lists must be.
    let offline_pods = pods / 4;
    let offline_path = "/api/v1/namespaces/big-0/pods?labelSelector=fill%3Dbig";
    let outage = Outage(cloud);
    cloud.stop();
    wait_health(&hub, cloud, false, HEALTH_CHANGE)?;
    reset_peak(pid)?;
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        std::thread::spawn(move || {
            let mut max = ProcMem::default();
            while sampling.load(Ordering::Relaxed) {
                if let Ok(m) = proc_mem(pid) {
                    max.rss = max.rss.max(m.rss);
                    max.threads = max.threads.max(m.threads);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            max
        })
    };
    let t0 = Instant::now();
    let offline_body = b.via(&hub).get_body(offline_path);
    let offline_time = t0.elapsed();
    let mut offline_mem = measure(
        &hub,
        &format!("offline list of {} pods", count(offline_pods as u64)),
    );
    sampling.store(false, Ordering::Relaxed);
    let sampled = sampler
        .join()
        .map_err(|_| "the memory sampler panicked".to_owned())?;
    drop(outage);
    let offline_body = offline_body?;
    if let Ok(m) = offline_mem.as_mut() {
        m.proc.threads = m.proc.threads.max(sampled.threads);
    }
    mems.push(offline_mem?);
    let offline_items = serde_json::from_slice::<Value>(&offline_body)
        .map_err(|e| format!("the offline list is not JSON: {e}"))?["items"]
        .as_array()
        .map_or(0, Vec::len);
    if offline_items != offline_pods {
        let m = metrics(&hub)?;
        return Err(format!(
            "the offline list has {offline_items} items, not {offline_pods}; the cache holds {} \
             files for big-0, {} objects deleted and {} offline answers so far; the answer began \
             {:?}",
            disk_usage(&pods_dir.join("big-0")).0,
            m.get("tinyhub_cache_objects_deleted_total"),
            m.get("tinyhub_offline_answers_total"),
            String::from_utf8_lossy(&offline_body[..offline_body.len().min(300)])
        ));
    }

    // kube-proxy's list of EndpointSlices, filtered (servicetopology reads each slice's
    // Service's topology from the hub's services watch) and cached, read at an edge link's
    // pace. On a hub of its own, started once the cloud holds the Services and slices, so its
    // peak is this job's from the start (glibc keeps what the states above freed).
    let slices = scale.filtered_slices;
    crate::ensure_services(cloud, slices);
    cloud.populate_endpointslices(slices, 4);
    let slices_path = "/apis/discovery.k8s.io/v1/endpointslices";
    // First on the hub of the states above (glibc keeps what they freed), then on its own.
    wait_health(&hub, cloud, true, HEALTH_CHANGE)?;
    reset_peak(pid)?;
    cache_list_as(&hub, KUBE_PROXY, slices_path, scale.edge_rate)?;
    mems.push(measure(
        &hub,
        &format!(
            "filtered list of {} EndpointSlices as kube-proxy",
            count(slices as u64)
        ),
    )?);
    let filtered_dir = dir.join("filtered");
    std::fs::create_dir_all(&filtered_dir).map_err(|e| format!("{filtered_dir:?}: {e}"))?;
    let filtering = b.start_hub(&filtered_dir);
    wait_health(&filtering, cloud, true, HEALTH_CHANGE)?;
    let chain = "servicetopology,forwardkubesvctraffic";
    let seen = "tinyhub_filter_objects_total{filter=\"servicetopology\",outcome=\"seen\"}";
    let m0 = metrics(&filtering)?;
    let t0 = Instant::now();
    let sliced = cache_list_as(&filtering, KUBE_PROXY, slices_path, scale.edge_rate)?;
    let sliced_time = t0.elapsed();
    mems.push(measure(
        &filtering,
        &format!(
            "a fresh hub: filtered list of {} EndpointSlices as kube-proxy (peak since start)",
            count(slices as u64)
        ),
    )?);
    let m1 = metrics(&filtering)?;
    drop(filtering);
    let seen = m1.get(seen) - m0.get(seen);
    if seen < slices as f64 {
        return Err(format!(
            "servicetopology saw {seen} objects for a list of {slices} EndpointSlices"
        ));
    }
    let (answers, seconds) = {
        let ((a0, s0), (a1, s1)) = (filter_stage(&m0, chain), filter_stage(&m1, chain));
        (a1 - a0, s1 - s0)
    };

    // ---- case 4 ----
    let mut section = Section::new(
        "4. Cache writer",
        &format!(
            "A kubelet's list of {} pods ({:.0} MB) and a kubelet watch receiving a burst of {} \
             ADDED events ({} created at once in the cloud), both read through the hub at about \
             {:.0} MB/s; then the same list again, unchanged. \"Writer time\" is \
             `tinyhub_cache_writer_busy_seconds_total` (time the writer thread spent handling \
             messages, disk waits included); \"writer CPU\" is that thread's CPU time from \
             /proc; \"wall\" runs from the request (or the cloud's create) to the last object \
             persisted. The cache is on {}.",
            count(pods as u64),
            list_bytes as f64 / 1e6,
            count(scale.burst as u64),
            count(scale.burst as u64),
            scale.edge_rate / 1e6,
            filesystem(dir)
        ),
    );
    let mut t = Table::new(
        "Throughput",
        &[
            "input",
            "objects written",
            "MB written",
            "writer time",
            "objects/s (writer time)",
            "MB/s (writer time)",
            "writer CPU (user + sys)",
            "wall",
            "objects/s (wall)",
        ],
    );
    for (label, w, n) in [
        (
            format!("list of {} pods", count(pods as u64)),
            listed,
            listed.objects,
        ),
        (
            format!("{} watch events", count(scale.burst as u64)),
            &burst,
            burst.objects,
        ),
        (
            "re-list, unchanged (skipped writes)".to_owned(),
            relisted,
            relisted.skipped,
        ),
    ] {
        let per = |x: f64| match w.busy {
            Some(s) if s > 0.0 => format!("{:.0}", x / s),
            _ => "n/a".into(),
        };
        t.row(vec![
            label,
            count(w.objects as u64),
            format!("{:.1}", w.bytes / 1e6),
            w.busy.map_or("n/a".into(), |s| format!("{s:.2} s")),
            per(n),
            match w.busy {
                Some(s) if s > 0.0 && w.bytes > 0.0 => format!("{:.1}", w.bytes / 1e6 / s),
                _ => "n/a".into(),
            },
            w.cpu.map_or("n/a".into(), |c| {
                format!(
                    "{:.2} s ({:.2} + {:.2})",
                    c.total().as_secs_f64(),
                    c.user.as_secs_f64(),
                    c.system.as_secs_f64()
                )
            }),
            format!("{:.2} s", w.wall.as_secs_f64()),
            format!("{:.0}", n / w.wall.as_secs_f64()),
        ]);
    }
    section.tables.push(t);
    let mut disk = Table::new("On disk", &["figure", "value"]);
    disk.row(vec![
        "bytes written per object (bytes_written / objects_written, the list)".into(),
        format!("{:.0}", listed.bytes / listed.objects.max(1.0)),
    ]);
    disk.row(vec![
        "files in the cache after the list".into(),
        count(files),
    ]);
    disk.row(vec![
        "apparent size per file".into(),
        format!("{:.0} bytes", apparent as f64 / files.max(1) as f64),
    ]);
    disk.row(vec![
        "disk usage per object (allocated blocks)".into(),
        format!("{:.0} bytes", allocated as f64 / files.max(1) as f64),
    ]);
    disk.row(vec![
        "cache directory for the list (allocated)".into(),
        size(allocated),
    ]);
    disk.row(vec![
        "writes skipped as identical on the re-list".into(),
        format!(
            "{} of {} ({} written)",
            count(relisted.skipped as u64),
            count(pods as u64),
            count(relisted.objects as u64)
        ),
    ]);
    disk.row(vec![
        "cache sessions abandoned (list, burst, re-list; all attempts)".into(),
        format!(
            "{}, {:.0}, {}",
            first.abandoned_at.len(),
            burst.abandoned,
            second.abandoned_at.len()
        ),
    ]);
    section.tables.push(disk);
    section.notes.push(format!(
        "The list took {:.1} s to read at the paced rate; its session committed {:.2} s after the \
         last byte. The burst reached the client in {:.2} s.",
        read_time.as_secs_f64(),
        (listed.wall - read_time).as_secs_f64(),
        delivered.as_secs_f64()
    ));
    for (what, list) in [("list", &first), ("re-list", &second)] {
        if !list.abandoned_at.is_empty() {
            section.notes.push(format!(
                "**The {what}'s cache session was abandoned** when read at {}: the writer fell more \
                 than 8 MiB behind the network. The figures above are from the attempt at {} MB/s.",
                rates(&list.abandoned_at),
                format_args!("{:.1}", list.abandoned_at.last().map_or(0.0, |r| r / 2e6))
            ));
        }
    }
    if burst.abandoned > 0.0 {
        section.notes.push(format!(
            "**The burst's cache session was abandoned** after {} of {} objects: the writer fell \
             more than 8 MiB behind the watch read at {:.0} MB/s.",
            count(burst.objects as u64),
            count(scale.burst as u64),
            scale.edge_rate / 1e6
        ));
    }
    if let Some(cpu) = listed.cpu.filter(|c| c.system > c.user * 2) {
        section.notes.push(format!(
            "For the list, the writer spent {:.0}% of its CPU time in the kernel (a new file, a \
             write and a rename per object, fsyncs): here its cost is the filesystem's more than \
             its own.",
            100.0 * cpu.system.as_secs_f64() / cpu.total().as_secs_f64().max(1e-9)
        ));
    }
    if listed.busy.is_none() {
        section.notes.push(
            "This hub does not expose `tinyhub_cache_writer_busy_seconds_total`, so the writer's \
             own throughput is n/a; its CPU time is shown instead."
                .into(),
        );
    }
    report.sections.push(section);

    // ---- case 5 ----
    let mut section = Section::new(
        "5. Memory",
        "One hub, in order. VmRSS is split into anonymous memory (heap, stacks) and file-backed \
         pages (code of the binary and libc). VmHWM is the peak since the state began (reset \
         through /proc/<pid>/clear_refs); the heap figures are the hub's own accounting of live heap \
         bytes (`tinyhub_heap_bytes`) and their lifetime peak (`tinyhub_heap_peak_bytes`).",
    );
    // Hostile clients: request heads that never finish, then connections opened at once.
    let proxy = hub.proxy;
    wait_health(&hub, cloud, true, HEALTH_CHANGE)?;
    reset_peak(pid)?;
    let slow = hold_connections(
        proxy,
        scale.slow_heads,
        b"GET /api/v1/pods HTTP/1.1\r\nX-Slow: ",
    );
    let t0 = Instant::now();
    let health = raw(
        hub.serve,
        b"GET /v1/healthz HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n",
    );
    let healthz_time = t0.elapsed();
    if raw_status(&health) != 200 {
        return Err(format!("/v1/healthz under slow heads: {health}"));
    }
    let t0 = Instant::now();
    b.via(&hub).get_body("/api/v1/namespaces")?;
    let get_time = t0.elapsed();
    mems.push(measure(
        &hub,
        &format!(
            "{} request heads that never finish ({} open)",
            count(scale.slow_heads as u64),
            slow.len()
        ),
    )?);
    drop(slow);
    reset_peak(pid)?;
    let t0 = Instant::now();
    let flood = hold_connections(proxy, scale.flood, b"");
    let flood_time = t0.elapsed();
    let connected = flood.len();
    mems.push(measure(
        &hub,
        &format!(
            "{} connections opened at once and held",
            count(scale.flood as u64)
        ),
    )?);
    drop(flood);
    let evicted = metrics(&hub)?.get("tinyhub_evicted_connections_total");

    let mut t = Table::new(
        "",
        &[
            "state",
            "VmRSS",
            "anon / file",
            "VmHWM (state peak)",
            "threads",
            "heap",
            "heap peak (lifetime)",
        ],
    );
    let heap = |h: Option<f64>| h.map_or("n/a".into(), |b| size(b as u64));
    for m in &mems {
        t.row(vec![
            m.state.clone(),
            size(m.proc.rss),
            format!("{} / {}", size(m.proc.anon), size(m.proc.file)),
            size(m.proc.hwm),
            m.proc.threads.to_string(),
            heap(m.heap),
            heap(m.heap_peak),
        ]);
    }
    section.tables.push(t);
    section.notes.push(format!(
        "The offline list ({:.1} MB) took {}; RSS sampled every 2 ms during it peaked at {}.",
        offline_body.len() as f64 / 1e6,
        dur(offline_time),
        size(sampled.rss)
    ));
    section.notes.push(format!(
        "Hostile clients, on the proxy port (its cap: 500 connections): with {} heads that \
         never finish held open, `/v1/healthz` answered in {} and a kubelet get in {}; \
         of {} connection attempts made at once, {} connected within {}; {} connections \
         were evicted in all (past the cap the one waiting longest for its head is closed). \
         Threads in the table are those of that moment, not the peak.",
        count(scale.slow_heads as u64),
        dur(healthz_time),
        dur(get_time),
        count(scale.flood as u64),
        count(connected as u64),
        dur(flood_time),
        count(evicted as u64)
    ));
    section.notes.push(format!(
        "The filtered list of {} EndpointSlices ({:.1} MB) was read as kube-proxy at about \
         {:.0} MB/s and cached; it took {:.1} s in all, of which the filter stage \
         (`tinyhub_filter_seconds`, chain {chain}, {answers:.0} answer(s)) {:.2} s; \
         servicetopology read each slice's Service from the hub's own watch of Services, \
         listed when that hub started. That hub ran for this list alone: its VmHWM is the \
         peak since its start.{}",
        count(slices as u64),
        sliced.bytes as f64 / 1e6,
        scale.edge_rate / 1e6,
        sliced_time.as_secs_f64(),
        seconds,
        if sliced.abandoned_at.is_empty() {
            String::new()
        } else {
            format!(
                " Its cache session was abandoned at {} first.",
                rates(&sliced.abandoned_at)
            )
        }
    ));
    if mems.iter().any(|m| m.heap.is_none()) {
        section.notes.push(
            "This hub does not expose `tinyhub_heap_bytes` / `tinyhub_heap_peak_bytes`: heap \
             figures are n/a."
                .into(),
        );
    }
    report.sections.push(section);

    const MIB: u64 = 1024 * 1024;
    let (idle, watches, cached, filtered) =
        (&mems[0].proc, &mems[1].proc, &mems[2].proc, &mems[5].proc);
    report.target(
        "Idle RSS",
        "≤ 4 MiB",
        format!("{} (VmRSS)", size(idle.rss)),
        idle.rss <= 4 * MIB,
    );
    report.target(
        &format!("RSS with {} open watches", scale.watches),
        "≤ 12 MiB",
        format!(
            "{} (VmHWM while open; VmRSS {})",
            size(watches.hwm),
            size(watches.rss)
        ),
        watches.hwm <= 12 * MIB,
    );
    report.target(
        &format!("Peak RSS caching {} pods", count(pods as u64)),
        "≤ 32 MiB",
        format!("{} (VmHWM)", size(cached.hwm)),
        cached.hwm <= 32 * MIB,
    );
    report.target(
        &format!(
            "Peak RSS, a hub's filtered list of {} EndpointSlices as kube-proxy",
            count(slices as u64)
        ),
        "≤ 32 MiB (the bar of 20,000 pods)",
        format!("{} (VmHWM)", size(filtered.hwm)),
        filtered.hwm <= 32 * MIB,
    );
    Ok(())
}

/// Case 6: sizes of the hub binary under test and of the gateway builds in `target`.
pub fn binary_size(bin: &Path, target: &Path, report: &mut Report) -> Result<(), String> {
    if !bin.exists() {
        return Err(format!("{} does not exist", bin.display()));
    }
    let mut t = Table::new("", &["build", "file", "size"]);
    for (label, path) in [
        ("x86_64 (host) release", bin.to_path_buf()),
        (
            "armv7 musl release",
            target.join("armv7-unknown-linux-musleabihf/release/tinyhub"),
        ),
        (
            "aarch64 musl release",
            target.join("aarch64-unknown-linux-musl/release/tinyhub"),
        ),
    ] {
        let shown = path
            .strip_prefix(target.parent().unwrap_or(target))
            .unwrap_or(&path)
            .display()
            .to_string();
        let size_text = match std::fs::metadata(&path) {
            Ok(m) => format!("{} ({} bytes)", size(m.len()), count(m.len())),
            Err(_) => "not built".into(),
        };
        t.row(vec![label.into(), format!("`{shown}`"), size_text]);
    }
    let mut section = Section::new(
        "6. Binary size",
        "Stripped release builds (`make build`; `make armv7`, `make aarch64` for the gateways).",
    );
    section.tables.push(t);
    // Measured once, not by this run: two `make armv7` builds of the same tree, one with a
    // gzip writer reachable and one without (issue 33, `tinyhub cache export`).
    section.notes.push(
        "gzip for `tinyhub cache export` links miniz's deflate: 24,968 bytes (24.4 KiB) of the \
         armv7 musl release binary (2,444,736 → 2,469,704 bytes, main 2ee1025 with and without a \
         gzip writer reachable; measured once with `make armv7`, not by this run), under the \
         60 KiB beyond which export would have written a plain tar by default."
            .into(),
    );
    report.sections.push(section);
    Ok(())
}
