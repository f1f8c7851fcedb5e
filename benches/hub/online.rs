//! Cases 1 to 3, the cloud reachable: a small get, a list of 1,000 pods (and the same list
//! answered offline from the cache), and watch delivery — each timed directly against the
//! cloud and through the hub, alternating.
//!
//! The hub here is one long-lived process shared by the three cases; the cache writer and
//! memory cases use a fresh one (`footprint.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded};
use serde_json::{Value, json};

use crate::client::{Client, WatchStream, disk_usage, metrics, wait_health};
use crate::report::{Report, Section, Table};
use crate::stats::{self, Pool, Rate, Samples, dur, ratio};
use crate::support::hub::{Hub, eventually};
use crate::support::{Cloud, PodFill};
use crate::{Bench, Scale};

/// Requests each way before timing starts (connections, TLS sessions, the hub's cache file).
const WARM_UP: usize = 50;
/// The simulated distance to the cloud for the context figures of case 1.
const CLOUD_AWAY: Duration = Duration::from_millis(5);
/// How long the hub may take to notice the cloud going away or coming back.
pub const HEALTH_CHANGE: Duration = Duration::from_secs(30);

/// Times `a` and `b` alternately, `n` times each, after a warm-up.
fn alternate_latency(
    n: usize,
    warm: usize,
    mut a: impl FnMut() -> Result<u64, String>,
    mut b: impl FnMut() -> Result<u64, String>,
) -> Result<(Samples, Samples), String> {
    let (mut sa, mut sb) = (Samples::default(), Samples::default());
    for i in 0..warm + n {
        let t = Instant::now();
        a().map_err(|e| format!("direct: {e}"))?;
        let da = t.elapsed();
        let t = Instant::now();
        b().map_err(|e| format!("through the hub: {e}"))?;
        let db = t.elapsed();
        if i >= warm {
            sa.push(da);
            sb.push(db);
        }
    }
    Ok((sa, sb))
}

/// A row of percentiles per labelled set of samples, then `ratio_label`'s row: the second
/// set's figures over the first's.
fn latency_table(
    caption: &str,
    what: &str,
    rows: [(&str, &Samples); 2],
    ratio_label: &str,
) -> Table {
    latency_ratios(caption, what, &rows, &[(ratio_label, 0, 1)])
}

/// A row of percentiles per labelled set of samples, then one row per `(label, a, b)` of
/// `ratios`: the figures of `rows[b]` over those of `rows[a]`.
fn latency_ratios(
    caption: &str,
    what: &str,
    rows: &[(&str, &Samples)],
    ratios: &[(&str, usize, usize)],
) -> Table {
    let mut t = Table::new(caption, &[what, "p50", "p90", "p99", "mean", "samples"]);
    for (label, s) in rows {
        t.row(vec![
            (*label).into(),
            dur(s.p50()),
            dur(s.quantile(0.9)),
            dur(s.p99()),
            dur(s.mean()),
            s.len().to_string(),
        ]);
    }
    for &(label, a, b) in ratios {
        let (a, b) = (rows[a].1, rows[b].1);
        let r = |f: fn(&Samples) -> Duration| ratio(f(b).as_secs_f64(), f(a).as_secs_f64());
        t.row(vec![
            label.into(),
            r(Samples::p50),
            r(|s| s.quantile(0.9)),
            r(Samples::p99),
            r(Samples::mean),
            String::new(),
        ]);
    }
    t
}

/// [`latency_table`] of direct `d` against through-the-hub `h`.
fn hub_latency_table(caption: &str, what: &str, d: &Samples, h: &Samples) -> Table {
    latency_table(
        caption,
        what,
        [("direct", d), ("through the hub", h)],
        "hub / direct",
    )
}

/// An operation for a throughput pool: GET `path` with `client`.
fn get_op(mut client: Client, path: String) -> stats::Op {
    Box::new(move || client.get(&path))
}

/// Throughput with `clients` threads each way, alternating window by window.
fn throughput(
    b: &Bench,
    hub: &Hub,
    path: &str,
    clients: usize,
    scale: &Scale,
) -> Result<(Rate, Rate), String> {
    let direct = Pool::new(
        (0..clients)
            .map(|_| get_op(b.direct(), path.to_owned()))
            .collect(),
    );
    let through = Pool::new(
        (0..clients)
            .map(|_| get_op(b.via(hub), path.to_owned()))
            .collect(),
    );
    // Opens every connection before the timed windows.
    direct
        .run(Duration::from_millis(100))
        .map_err(|e| format!("direct warm-up: {e}"))?;
    through
        .run(Duration::from_millis(100))
        .map_err(|e| format!("hub warm-up: {e}"))?;
    stats::alternate(&direct, &through, scale.rounds, scale.window)
}

/// Case 1: one ConfigMap, latency and requests per second with 1 and 16 clients.
pub fn small_get(b: &Bench, hub: &Hub, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    b.cloud.create(
        "configmaps",
        json!({"metadata": {"name": "bench-small", "namespace": "default"},
               "data": {"greeting": "hello from the cloud", "mode": "edge", "replicas": "3"}}),
    );
    let path = "/api/v1/namespaces/default/configmaps/bench-small";
    let (mut d, mut h) = (b.direct(), b.via(hub));
    let (size_d, size_h) = (d.get(path)?, h.get(path)?);
    if size_d != size_h {
        return Err(format!(
            "the hub answered {size_h} bytes where the cloud answered {size_d}"
        ));
    }
    let m0 = metrics(hub)?;
    let accepted = b.cloud.accepted_connections();
    let (ld, lh) = alternate_latency(scale.get_samples, WARM_UP, || d.get(path), || h.get(path))?;
    let accepted = b.cloud.accepted_connections() - accepted;
    let mut section = Section::new(
        "1. Small get (one ConfigMap)",
        &format!(
            "`GET {path}`, a {size_d}-byte answer. Latency: one client, the two ways alternating \
             request by request. Throughput: 1 and 16 client threads, {} round(s) of {:?} per way.",
            scale.rounds, scale.window
        ),
    );
    section
        .tables
        .push(hub_latency_table("Latency", "one client", &ld, &lh));
    section.notes.push(format!(
        "The cloud accepted {accepted} new TLS connections during these {} gets of each way \
         (warm-up included; with keep-alive both ways none are needed).",
        scale.get_samples + WARM_UP
    ));
    let mut tput = Table::new(
        "Throughput",
        &["clients", "direct req/s", "hub req/s", "hub / direct"],
    );
    let mut at16 = None;
    for clients in [1, 16] {
        let (rd, rh) = throughput(b, hub, path, clients, scale)?;
        println!(
            "  {clients:>2} clients: direct {:.0} req/s, hub {:.0} req/s",
            rd.ops_per_sec(),
            rh.ops_per_sec()
        );
        tput.row(vec![
            clients.to_string(),
            format!("{:.0}", rd.ops_per_sec()),
            format!("{:.0}", rh.ops_per_sec()),
            ratio(rh.ops_per_sec(), rd.ops_per_sec()),
        ]);
        if clients == 16 {
            at16 = Some((rd, rh));
        }
    }
    section.tables.push(tput);

    // Context, not a target: the same gets with the cloud a WAN round trip away.
    b.cloud.set_delay(CLOUD_AWAY);
    let far = alternate_latency(
        (scale.get_samples / 20).max(10),
        5,
        || d.get(path),
        || h.get(path),
    );
    b.cloud.set_delay(Duration::ZERO);
    let (fd, fh) = far?;
    section.tables.push(hub_latency_table(
        &format!(
            "Latency with the cloud {} ms away (the stand-in holds every answer {0} ms, like a \
             WAN round trip; context only)",
            CLOUD_AWAY.as_millis()
        ),
        "one client",
        &fd,
        &fh,
    ));

    let m1 = metrics(hub)?;
    let delta = |s: &str| m1.get(s) - m0.get(s);
    section.notes.push(format!(
        "Through the hub every get is a kubelet's and is cached: {:.0} answers committed, {:.0} \
         writes skipped as identical, {:.0} cache sessions abandoned during the case.",
        delta("tinyhub_cache_sessions_committed_total"),
        delta("tinyhub_cache_writes_skipped_identical_total"),
        delta("tinyhub_cache_sessions_abandoned_total"),
    ));
    note_offline(&mut section, delta("tinyhub_offline_answers_total"));
    let p50 = lh.p50().as_secs_f64() / ld.p50().as_secs_f64();
    report.target(
        "Small get: added latency",
        "hub/direct p50 ≤ 1.15",
        format!("{p50:.2} ({} vs {})", dur(lh.p50()), dur(ld.p50())),
        p50 <= 1.15,
    );
    if let Some((rd, rh)) = at16 {
        let r = rh.ops_per_sec() / rd.ops_per_sec();
        report.target(
            "Small get: throughput at 16 clients",
            "hub/direct ≥ 0.85",
            format!(
                "{r:.2} ({:.0} vs {:.0} req/s)",
                rh.ops_per_sec(),
                rd.ops_per_sec()
            ),
            r >= 0.85,
        );
    }
    report.sections.push(section);
    Ok(())
}

/// Flags a comparison spoiled by the hub answering from its cache while the cloud was up
/// (it judged the cloud unhealthy: a missed heartbeat under load).
fn note_offline(section: &mut Section, offline_answers: f64) {
    if offline_answers > 0.0 {
        section.notes.push(format!(
            "**{offline_answers:.0} requests through the hub were answered from the cache** while \
             the cloud was up: the hub's heartbeat judged the cloud unhealthy under load, so some \
             hub figures above are offline answers."
        ));
    }
}

/// Number of `items` in a list body.
fn items(body: &[u8]) -> Result<usize, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the list is not JSON: {e}"))?;
    v["items"]
        .as_array()
        .map(Vec::len)
        .ok_or_else(|| "the list has no items array".to_owned())
}

/// Restarts the cloud when dropped, if it is stopped: a failed case leaves it running.
pub struct Outage<'a>(pub &'a Cloud);

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        if !self.0.is_running() {
            self.0.restart();
        }
    }
}

/// Case 2: a list of 1,000 pods (about 5 MB), online both ways, then offline from the cache.
pub fn list(b: &Bench, hub: &Hub, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    let pods = scale.list_pods;
    b.cloud.populate_pods(&PodFill {
        count: pods,
        namespaces: 1,
        nodes: 1,
        body_bytes: scale.pod_bytes,
        prefix: "list".into(),
    });
    let path = "/api/v1/namespaces/list-0/pods";
    let (mut d, mut h) = (b.direct(), b.via(hub));

    // Warm the hub's cache at an edge link's pace, and check it holds the whole list.
    let warm = crate::footprint::cache_list(hub, path, scale.edge_rate)?;
    let cached = disk_usage(&hub.spec.cache_dir.join("kubelet/pods.v1.core/list-0")).0;
    if cached != pods as u64 {
        return Err(format!(
            "after the warm-up the hub's cache holds {cached} of the {pods} pods"
        ));
    }
    let body = d.get_body(path)?;
    let size = body.len() as u64;
    for (way, n) in [
        ("direct", items(&body)?),
        ("hub", items(&h.get_body(path)?)?),
    ] {
        if n != pods {
            return Err(format!("the {way} list has {n} items, not {pods}"));
        }
    }
    drop(body);

    let m1 = metrics(hub)?;
    let (ld, lh) = alternate_latency(scale.list_samples, 3, || d.get(path), || h.get(path))?;
    let mut section = Section::new(
        &format!("2. List of {} pods", stats::count(pods as u64)),
        &format!(
            "`GET {path}`: {pods} pods, {:.1} MB of JSON, read as fast as the client can. \
             Throughput: {} round(s) of {:?} per way.",
            size as f64 / 1e6,
            scale.rounds,
            scale.window
        ),
    );
    section
        .tables
        .push(hub_latency_table("Latency", "one client", &ld, &lh));
    let mut tput = Table::new(
        "Throughput",
        &[
            "clients",
            "direct lists/s",
            "hub lists/s",
            "direct MB/s",
            "hub MB/s",
            "hub / direct",
        ],
    );
    for clients in [1, 4] {
        let (rd, rh) = throughput(b, hub, path, clients, scale)?;
        println!(
            "  {clients} clients: direct {:.1} MB/s, hub {:.1} MB/s",
            rd.mb_per_sec(),
            rh.mb_per_sec()
        );
        tput.row(vec![
            clients.to_string(),
            format!("{:.1}", rd.ops_per_sec()),
            format!("{:.1}", rh.ops_per_sec()),
            format!("{:.0}", rd.mb_per_sec()),
            format!("{:.0}", rh.mb_per_sec()),
            ratio(rh.mb_per_sec(), rd.mb_per_sec()),
        ]);
    }
    section.tables.push(tput);
    let m2 = metrics(hub)?;
    let delta = |s: &str| m2.get(s) - m1.get(s);
    section.notes.push(format!(
        "Through the hub these lists are a kubelet's: of the {:.0} cache sessions they opened, \
         {:.0} were committed and {:.0} abandoned because the disk fell more than 8 MiB behind \
         the network (by design the client never waits for the disk).",
        delta("tinyhub_cache_sessions_committed_total")
            + delta("tinyhub_cache_sessions_abandoned_total"),
        delta("tinyhub_cache_sessions_committed_total"),
        delta("tinyhub_cache_sessions_abandoned_total"),
    ));
    note_offline(&mut section, delta("tinyhub_offline_answers_total"));

    // Offline: the same list from the cache, the cloud stopped.
    let outage = Outage(b.cloud);
    b.cloud.stop();
    let cut = Instant::now();
    wait_health(hub, b.cloud, false, HEALTH_CHANGE)?;
    let noticed = cut.elapsed();
    let offline_items = items(&h.get_body(path)?)?;
    if offline_items != pods {
        return Err(format!(
            "offline, the hub's list has {offline_items} items, not {pods}"
        ));
    }
    let m3 = metrics(hub)?;
    let mut lo = Samples::default();
    for _ in 0..scale.list_samples {
        let t = Instant::now();
        h.get(path).map_err(|e| format!("offline: {e}"))?;
        lo.push(t.elapsed());
    }
    // The hub counts an offline answer once it is sent, a moment after the client has read
    // it: the last one's count may trail the last get.
    let wanted = scale.list_samples as f64;
    let mut answered = 0.0;
    eventually(Duration::from_secs(5), || {
        answered = metrics(hub).map_or(answered, |m| {
            m.get("tinyhub_offline_answers_total") - m3.get("tinyhub_offline_answers_total")
        });
        answered >= wanted
    });
    if answered < wanted {
        return Err(format!(
            "only {answered} of the {} offline lists were answered from the cache",
            scale.list_samples
        ));
    }
    b.cloud.restart();
    drop(outage);
    wait_health(hub, b.cloud, true, HEALTH_CHANGE)?;
    section.tables.push(latency_table(
        "Offline (cloud stopped, answered from the cache) vs online, through the hub",
        "through the hub",
        [("cloud up", &lh), ("cloud down (cache)", &lo)],
        "offline / online",
    ));
    if !warm.abandoned_at.is_empty() {
        section.notes.push(format!(
            "Warming the cache, the hub abandoned the list's cache session at {} (the writer fell \
             more than 8 MiB behind); a slower read was cached.",
            crate::footprint::rates(&warm.abandoned_at)
        ));
    }
    section.notes.push(format!(
        "The hub reported the stopped cloud unhealthy {:.1} s after the stop (heartbeat every \
         second); the offline samples were taken after that.",
        noticed.as_secs_f64()
    ));
    let r = lo.p50().as_secs_f64() / lh.p50().as_secs_f64();
    report.target(
        &format!(
            "Offline list of {} pods vs online through the hub",
            stats::count(pods as u64)
        ),
        "offline p50 ≤ online p50",
        format!("{r:.2} ({} vs {})", dur(lo.p50()), dur(lh.p50())),
        r <= 1.0,
    );
    report.sections.push(section);
    Ok(())
}

/// An event's object name and when its line arrived, or why the stream failed.
type Arrival = Result<(String, Instant), String>;

/// Reads watch lines until `stop`, sending each event's object name and arrival time; the
/// second receiver fires when the reader has stopped and closed its stream.
fn watch_reader(
    mut stream: WatchStream,
    stop: Arc<AtomicBool>,
) -> (Receiver<Arrival>, Receiver<()>) {
    let (tx, rx) = bounded(16);
    let (done_tx, done_rx) = bounded(1);
    std::thread::spawn(move || {
        let mut line = String::new();
        while !stop.load(Ordering::Acquire) {
            let event = match stream.next_line(&mut line) {
                Ok(true) => {
                    let at = Instant::now();
                    serde_json::from_str::<Value>(&line)
                        .map_err(|e| format!("a watch line is not JSON: {e}"))
                        .map(|v| {
                            let name = v["object"]["metadata"]["name"].as_str().unwrap_or("");
                            (name.to_owned(), at)
                        })
                }
                Ok(false) => Err("the watch ended".to_owned()),
                Err(e) => Err(e),
            };
            let failed = event.is_err();
            if tx.send(event).is_err() || failed {
                break;
            }
        }
        let _ = done_tx.send(());
    });
    (rx, done_rx)
}

/// Case 3: time from the cloud emitting an event to the client receiving it.
pub fn watch(b: &Bench, hub: &Hub, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    let warm = 20;
    let before = b.cloud.watchers("configmaps");
    let q = format!("?watch=1&resourceVersion={}", b.cloud.resource_version());
    let stop = Arc::new(AtomicBool::new(false));
    let ways = [("watch-direct", b.direct()), ("watch-hub", b.via(hub))];
    let mut readers = Vec::new();
    for (ns, client) in &ways {
        let stream = client.watch(&format!("/api/v1/namespaces/{ns}/configmaps{q}"))?;
        readers.push((*ns, watch_reader(stream, Arc::clone(&stop))));
    }
    if !b
        .cloud
        .wait_for_watchers("configmaps", before + 2, Duration::from_secs(20))
    {
        return Err("the two watches did not reach the cloud within 20 s".into());
    }
    let mut samples = [Samples::default(), Samples::default()];
    for i in 0..warm + scale.watch_events {
        for (k, (ns, (rx, _))) in readers.iter().enumerate() {
            let name = format!("ev-{i:05}");
            let emitted = Instant::now();
            b.cloud.create(
                "configmaps",
                json!({"metadata": {"name": name, "namespace": ns}, "data": {"i": i.to_string()}}),
            );
            let (got, at) = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| {
                format!("no event on the {ns} watch within 10 s of creating {name}")
            })??;
            if got != name {
                return Err(format!(
                    "the {ns} watch delivered {got:?}, expected {name:?}"
                ));
            }
            if i >= warm {
                samples[k].push(at.saturating_duration_since(emitted));
            }
        }
    }
    // Wake both readers with one more event so they see `stop` and close their streams.
    stop.store(true, Ordering::Release);
    for (ns, _) in &readers {
        b.cloud.create(
            "configmaps",
            json!({"metadata": {"name": "ev-last", "namespace": ns}}),
        );
    }
    for (ns, (_, done)) in &readers {
        done.recv_timeout(Duration::from_secs(10))
            .map_err(|_| format!("the {ns} watch reader did not stop"))?;
    }
    let [sd, sh] = samples;
    let mut section = Section::new(
        "3. Watch delivery",
        &format!(
            "Time from the cloud emitting an event (a ConfigMap created in the watched namespace) \
             to the client reading its line; {} events per way after {warm} warm-up events, the \
             two ways alternating event by event. The watch through the hub is a kubelet's, so \
             the hub also hands every event to its cache writer.",
            scale.watch_events
        ),
    );
    let mut t = hub_latency_table("", "event delivery", &sd, &sh);
    let added = |f: fn(&Samples) -> Duration| {
        let (h, d) = (f(&sh).as_secs_f64(), f(&sd).as_secs_f64());
        format!("{:+.0} µs", (h - d) * 1e6)
    };
    t.row(vec![
        "hub − direct".into(),
        added(Samples::p50),
        added(|s| s.quantile(0.9)),
        added(Samples::p99),
        added(Samples::mean),
        String::new(),
    ]);
    section.tables.push(t);
    let added_p50 = sh.p50().as_secs_f64() - sd.p50().as_secs_f64();
    report.target(
        "Watch delivery: added latency",
        "hub adds ≤ 1 ms p50",
        format!(
            "{:+.3} ms ({} vs {})",
            added_p50 * 1e3,
            dur(sh.p50()),
            dur(sd.p50())
        ),
        added_p50 <= 0.001,
    );
    report.sections.push(section);
    Ok(())
}

/// kube-proxy's User-Agent: the filters of its Services and EndpointSlices apply.
pub const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// A component whose answers the hub caches like kubelet's, but whose Services no filter
/// touches (servicetopology takes only its Endpoints and EndpointSlices).
pub const COREDNS: &str = "coredns/v1.11.1 (linux/arm) kubernetes/abcdef0";

/// The filter stage's figures of one chain in a metrics snapshot: (answers, seconds).
pub fn filter_stage(m: &crate::client::MetricSnapshot, chain: &str) -> (f64, f64) {
    (
        m.get(&format!(
            "tinyhub_filter_seconds_count{{filter_chain=\"{chain}\"}}"
        )),
        m.get(&format!(
            "tinyhub_filter_seconds_sum{{filter_chain=\"{chain}\"}}"
        )),
    )
}

/// Case 7: the cost of a response filter. The list of 1,000 Services read directly, through
/// the hub as coredns (cached, no filter) and as kubelet (cached, masterservice), the three
/// ways alternating request by request.
pub fn filtered_list(b: &Bench, hub: &Hub, report: &mut Report) -> Result<(), String> {
    let scale = b.scale;
    let services = scale.filtered_services;
    crate::ensure_services(b.cloud, services);
    let path = "/api/v1/services";
    let mut d = b.direct();
    let mut plain = Client::plain(&hub.url(), COREDNS);
    // In edge mode coredns's Services come from the hub's watch cache, which follows the
    // cloud by its watch (as the apiserver's own cache does): wait until it has caught up
    // with the Services just made (a feeder that had to list again after case 2's outage
    // takes a retry interval).
    let caught_up = Instant::now() + Duration::from_secs(60);
    while items(&plain.get_body(path)?)? != services + 1 {
        if Instant::now() > caught_up {
            return Err(format!(
                "the hub's Services (as coredns) did not reach {} in 60 s",
                services + 1
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut filtered = Client::plain(&hub.url(), crate::support::hub::KUBELET);
    let body = d.get_body(path)?;
    let size = body.len() as u64;
    let plain_body = plain.get_body(path)?;
    let filtered_body = filtered.get_body(path)?;
    // The seeded `default/kubernetes` Service is in the list too.
    for (way, n) in [
        ("direct", items(&body)?),
        ("hub as coredns", items(&plain_body)?),
        ("hub as kubelet", items(&filtered_body)?),
    ] {
        if n != services + 1 {
            return Err(format!(
                "the {way} list has {n} items, not {}",
                services + 1
            ));
        }
    }
    if plain_body == filtered_body {
        return Err(
            "kubelet's list through the hub is coredns's: masterservice did nothing".into(),
        );
    }
    drop((body, plain_body, filtered_body));

    // Those lists' cache sessions end before the count starts.
    hub.wait_cache_quiet();
    let m0 = metrics(hub)?;
    let (mut sd, mut sp, mut sf) = (Samples::default(), Samples::default(), Samples::default());
    let time = |c: &mut Client, way: &str| -> Result<Duration, String> {
        let t = Instant::now();
        c.get(path).map_err(|e| format!("{way}: {e}"))?;
        Ok(t.elapsed())
    };
    for i in 0..3 + scale.list_samples {
        let (td, tp, tf) = (
            time(&mut d, "direct")?,
            time(&mut plain, "through the hub as coredns")?,
            time(&mut filtered, "through the hub as kubelet")?,
        );
        if i >= 3 {
            sd.push(td);
            sp.push(tp);
            sf.push(tf);
        }
    }
    // The writer commits a session after the client has its answer: wait for all of them
    // (2 hub ways per round), for a note that counts every one.
    let ended = |m: &crate::client::MetricSnapshot| {
        let s = |name: &str| m.get(name) - m0.get(name);
        s("tinyhub_cache_sessions_committed_total") + s("tinyhub_cache_sessions_abandoned_total")
    };
    let rounds = (3 + scale.list_samples) as f64;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut m1 = metrics(hub)?;
    while ended(&m1) < 2.0 * rounds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        m1 = metrics(hub)?;
    }
    let delta = |s: &str| m1.get(s) - m0.get(s);
    let (answers, seconds) = {
        let (a0, s0) = filter_stage(&m0, "masterservice");
        let (a1, s1) = filter_stage(&m1, "masterservice");
        (a1 - a0, s1 - s0)
    };
    // More when the refill thread fetched an abandoned session again (filtered too).
    if answers < rounds {
        return Err(format!(
            "the hub counted {answers} masterservice answers for {rounds} kubelet lists"
        ));
    }

    let mut section = Section::new(
        &format!(
            "7. Filtered list of {} Services",
            stats::count(services as u64)
        ),
        &format!(
            "`GET {path}`: {} Services, {:.2} MB of JSON. Directly; through the hub as coredns \
             (cached, no filter applies to its Services); through the hub as kubelet (cached, \
             filtered by masterservice, which rewrites `default/kubernetes` and reads every \
             other Service). One client per way, the three ways alternating request by request.",
            services + 1,
            size as f64 / 1e6
        ),
    );
    section.tables.push(latency_ratios(
        "Latency",
        "one client",
        &[
            ("direct", &sd),
            ("hub, no filter (coredns)", &sp),
            ("hub, filtered (kubelet: masterservice)", &sf),
        ],
        &[
            ("hub no filter / direct", 0, 1),
            ("hub filtered / direct", 0, 2),
            ("filtered / no filter (the filter's cost)", 1, 2),
        ],
    ));
    let per_answer = seconds / answers.max(1.0);
    let added = sf.p50().as_secs_f64() - sp.p50().as_secs_f64();
    let mut stage = Table::new("The filter's cost", &["figure", "value"]);
    stage.row(vec![
        "added p50 latency, filtered vs no filter through the hub".into(),
        format!("{:.2} ms", added * 1e3),
    ]);
    stage.row(vec![
        "filter stage per answer (`tinyhub_filter_seconds` sum / count, masterservice)".into(),
        format!("{:.2} ms", per_answer * 1e3),
    ]);
    stage.row(vec![
        "filter stage per Service".into(),
        format!("{:.2} µs", per_answer * 1e6 / (services + 1) as f64),
    ]);
    section.tables.push(stage);
    section.notes.push(format!(
        "The filter stage's time is the hub's own measure of decoding, filtering and encoding \
         the body (the network excluded); objects no filter of the chain can touch (here all \
         but `default/kubernetes`) are passed without being parsed. The hub counted \
         {answers:.0} filtered answers ({rounds:.0} lists, the rest refills of abandoned cache \
         sessions) and {:.0} Services changed by masterservice during the timed lists. Cache \
         sessions during the case ({:.0} lists through the hub): {:.0} committed, {:.0} \
         abandoned.",
        delta("tinyhub_filter_objects_total{filter=\"masterservice\",outcome=\"changed\"}"),
        2.0 * rounds,
        delta("tinyhub_cache_sessions_committed_total"),
        delta("tinyhub_cache_sessions_abandoned_total"),
    ));
    note_offline(&mut section, delta("tinyhub_offline_answers_total"));
    report.sections.push(section);
    Ok(())
}
