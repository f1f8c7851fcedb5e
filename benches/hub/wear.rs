//! Case 13 (issue 33): flash wear, measured.
//!
//! **The scene** is case 12's (`link.rs`: [`populate`], [`node_clients`], [`gets`]): Services
//! and EndpointSlices, this node's pods with a ConfigMap and a Secret each, kubelet,
//! kube-proxy, coredns and flanneld listing and watching through one hub, kubelet getting
//! its Node and every pod's ConfigMap and Secret, and the hub renewing the node's lease every
//! 10 s (it writes it to the cache every 600 s, `heartbeat/local.rs`), plus other Nodes.
//!
//! **Steady state:** one change a second, round-robin over an EndpointSlice, a Service,
//! another node's status, one of this node's pods and one of its ConfigMaps (kubelet does
//! not watch ConfigMaps here: that change reaches no cache). **Worst case:** the same, with
//! a relist storm every [`Scale::wear_storm_every`]: the cloud compacts its history and
//! cuts every watch, so each resumes into a 410 and lists again, and every client lists
//! again through the hub, as clients that restart do.
//!
//! **Reported, per hour** (each phase's counts, the writer settled after it, over the
//! phase's own length, the waits for the settling left out, scaled): objects and payload
//! bytes the cache wrote, writes skipped because the same bytes were stored, what they
//! would have written (skipped × the mean object size), the store's flushes
//! (`tinyhub_cache_syncs_total`), the process's `write_bytes` from `/proc/<pid>/io` (what
//! reached the block layer: objects, journals, directories, `.synced`, link totals),
//! `.synced` and link-totals writes, the lease's writes, and flash ≈ `write_bytes` + flushes
//! × 4 KiB (a flush commits at least a page: a stated assumption, not a measurement).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::DirectTls;
use crate::link::{gets, node_clients, populate};
use crate::pool::{Endpoint, Reflectors, node};
use crate::report::{Report, Section, Table};
use crate::stats::{count, size};
use crate::support::Cloud;
use crate::support::hub::{Hub, HubSpec, TempDir, get};
use crate::{Bench, Running};

/// Time for every client to list and watch.
const WAIT: Duration = Duration::from_secs(180);
/// What a flush is assumed to cost the flash beyond the bytes: one page.
const PAGE: u64 = 4096;
/// The kinds the node's clients watch, cut in a storm.
const WATCHED: [&str; 5] = ["pods", "services", "endpointslices", "namespaces", "nodes"];

/// The hub's counters a phase is measured by.
#[derive(Clone, Copy, Default)]
struct Counts {
    objects: f64,
    bytes: f64,
    identical: f64,
    syncs: f64,
    synced_file: f64,
    link_file: f64,
    lease: f64,
    /// `/proc/<pid>/io` `write_bytes`.
    io: f64,
}

impl Counts {
    fn of(hub: &Hub) -> Result<Counts, String> {
        let m = |name: &str| hub.metric(name).unwrap_or(0.0);
        Ok(Counts {
            objects: m("tinyhub_cache_objects_written_total"),
            bytes: m("tinyhub_cache_bytes_written_total"),
            identical: m("tinyhub_cache_writes_skipped_identical_total"),
            syncs: m("tinyhub_cache_syncs_total"),
            synced_file: m("tinyhub_cache_synced_file_writes_total"),
            link_file: m("tinyhub_link_file_writes_total"),
            lease: m("tinyhub_node_lease_disk_writes_total"),
            io: write_bytes(hub.pid())? as f64,
        })
    }

    /// `self - before`, scaled from `elapsed` to an hour.
    fn per_hour(&self, before: &Counts, elapsed: Duration) -> Counts {
        let k = 3600.0 / elapsed.as_secs_f64().max(1e-9);
        Counts {
            objects: (self.objects - before.objects) * k,
            bytes: (self.bytes - before.bytes) * k,
            identical: (self.identical - before.identical) * k,
            syncs: (self.syncs - before.syncs) * k,
            synced_file: (self.synced_file - before.synced_file) * k,
            link_file: (self.link_file - before.link_file) * k,
            lease: (self.lease - before.lease) * k,
            io: (self.io - before.io) * k,
        }
    }
}

/// The bytes process `pid` caused to be written to storage (`/proc/<pid>/io`).
fn write_bytes(pid: u32) -> Result<u64, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .map_err(|e| format!("reading /proc/{pid}/io: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no write_bytes in /proc/{pid}/io"))
}

/// Runs the two phases on a cloud of the case's own and writes the section.
pub fn wear(b: &Bench, report: &mut Report) -> Result<(), String> {
    let s = b.scale;
    let cloud = Cloud::start();
    populate(&cloud, b, 1, false);
    for k in 0..s.wear_other_nodes {
        cloud.node(&format!("other-{k}"), None, &[]);
    }
    let tls = DirectTls::for_cloud(&cloud)?;
    let dir = TempDir::new("bench-wear");
    let hub = Hub::start(
        &HubSpec::for_cloud(&cloud, dir.path()).with(&["--v=0", "--heartbeat-interval-seconds=10"]),
    );
    let hubs = vec![Running::register(hub)];
    let hub: &Hub = &hubs[0];
    let mut clients = Reflectors::default();
    let n = node(1);
    for (ua, path) in node_clients(&n) {
        let who = format!("{n} {}", ua.split('/').next().unwrap_or(ua));
        clients.start(who, Endpoint::plain(hub, ua), path)?;
    }
    clients.wait_watching(WAIT)?;
    gets(1, &cloud, &tls, &hubs, &None, s.link_pods)?;
    hub.wait_cache_quiet();

    let mut change = Change::default();
    let start = Counts::of(hub)?;
    let (_, length) = change.run(&cloud, b, s.wear_steady, None)?;
    hub.wait_cache_quiet();
    let steady_end = Counts::of(hub)?;
    let steady = steady_end.per_hour(&start, length);

    let (storms, length) = change.run(&cloud, b, s.wear_storm, Some((s.wear_storm_every, hub)))?;
    clients.wait_watching(WAIT)?;
    hub.wait_cache_quiet();
    let storm = Counts::of(hub)?.per_hour(&steady_end, length);
    clients.stop();
    drop(hubs);
    cloud.stop();
    clients.join();

    let mut table = Table::new(
        "Per hour, each phase's counts scaled from its length.",
        &[
            "phase",
            "objects written",
            "bytes written",
            "skipped identical",
            "without the skip",
            "fsyncs",
            "write_bytes (/proc)",
            "flash ≈",
            ".synced writes",
            "link-totals writes",
            "lease writes",
        ],
    );
    for (label, c) in [("steady, 1 change/s", steady), ("relist storms", storm)] {
        let mean = if c.objects > 0.0 {
            c.bytes / c.objects
        } else {
            0.0
        };
        table.row(vec![
            label.to_owned(),
            count(c.objects as u64),
            size(c.bytes as u64),
            count(c.identical as u64),
            size((c.bytes + c.identical * mean) as u64),
            count(c.syncs as u64),
            size(c.io as u64),
            size(c.io as u64 + c.syncs as u64 * PAGE),
            format!("{:.0}", c.synced_file),
            format!("{:.0}", c.link_file),
            format!("{:.0}", c.lease),
        ]);
        println!(
            "case 13 {label}: {} objects, {} written, {} to the block layer per hour",
            count(c.objects as u64),
            size(c.bytes as u64),
            size(c.io as u64)
        );
    }
    let mut section = Section::new(
        "13. Flash wear",
        &format!(
            "Case 12's scene through one hub ({} Services, {} EndpointSlices, {} pods on the \
             node each with a ConfigMap and a Secret, {} other Nodes; kubelet, kube-proxy, \
             coredns and flanneld listing and watching; the lease renewed every 10 s and \
             written to the cache every 600 s). Steady: one change a second for {} s, \
             round-robin over an EndpointSlice, a Service, another Node's status, one of the \
             node's pods and one of its ConfigMaps. Storms: the same for {} s with the \
             cloud's history compacted and every watch cut every {} s ({storms} storms), so \
             each watch resumes into a 410 and lists again, and each client lists again \
             through the hub (as a restarted one does). Per hour over each phase's own length \
             (the wait for the writer to settle after it counts its writes, not its time). \
             \"Without the skip\" adds the \
             writes skipped because the same bytes were stored, at the mean object size; \
             \"flash ≈\" is `write_bytes` plus 4 KiB per fsync (a flush commits at least a \
             page: an assumption, not a measurement). `write_bytes` counts what reached the \
             block layer in whole pages: each object file is at least a page, and journals, \
             directories, `.synced` and the link totals add theirs. A storm as the cloud \
             makes it reaches this cache barely: the hub resumes its clients' watches itself \
             (issue 29) and the pool caches list again on their own, so the cache still takes \
             only the changes; a client that restarts and lists again adds its list, whose \
             unchanged objects are skipped. The lease is written every 600 s while the hub \
             renews it for kubelet; here no kubelet asks for its lease, so the hub renews only \
             in its first 5 minutes. On this machine's filesystem, not a router's flash: the \
             counts carry over, the bytes below the filesystem do not.",
            s.link_services,
            s.link_slices,
            s.link_pods,
            s.wear_other_nodes,
            s.wear_steady.as_secs(),
            s.wear_storm.as_secs(),
            s.wear_storm_every.as_secs(),
        ),
    );
    section.tables.push(table);
    report.sections.push(section);
    Ok(())
}

/// The round-robin of changes.
#[derive(Default)]
struct Change {
    i: usize,
}

impl Change {
    /// Makes one change a second for `length`; with `storms` (every, hub), a relist storm
    /// at each of its ticks: the cloud's history compacted, every watch cut, and every node
    /// client's list made again through the hub. Returns the storms made and the time taken.
    fn run(
        &mut self,
        cloud: &Cloud,
        b: &Bench,
        length: Duration,
        storms_every: Option<(Duration, &Hub)>,
    ) -> Result<(usize, Duration), String> {
        let started = Instant::now();
        let mut storms = 0;
        let mut tick = 0u32;
        while started.elapsed() < length {
            if let Some((every, hub)) = storms_every
                && started.elapsed() >= every * storms as u32
            {
                cloud.compact();
                for kind in WATCHED {
                    cloud.cut_watches(kind);
                }
                for (ua, path) in node_clients(&node(1)) {
                    let r = get(&format!("{}{path}", hub.url()), ua);
                    if r.status != 200 {
                        return Err(format!("a client's list {path} answered {}", r.status));
                    }
                }
                storms += 1;
            }
            self.one(cloud, b);
            tick += 1;
            let next = started + Duration::from_secs(u64::from(tick));
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        Ok((storms, started.elapsed()))
    }

    /// The next change of the round-robin.
    fn one(&mut self, cloud: &Cloud, b: &Bench) {
        let s = b.scale;
        let (i, k) = (self.i, self.i / 5);
        self.i += 1;
        let label = json!({"metadata": {"labels": {"bench-change": format!("c{i}")}}});
        match i % 5 {
            0 => {
                let k = k % s.link_slices.max(1);
                cloud.patch(
                    "endpointslices",
                    &format!("svc-{}", k % 10),
                    &format!("svc-{k:06}-ab12c"),
                    label,
                );
            }
            1 => {
                let k = k % s.link_services.max(1);
                cloud.patch(
                    "services",
                    &format!("svc-{}", k % 10),
                    &format!("svc-{k:06}"),
                    label,
                );
            }
            2 => {
                let name = format!("other-{}", k % s.wear_other_nodes.max(1));
                let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                    "lastHeartbeatTime": format!("2026-01-01T00:00:{:02}Z", i % 60)}]}});
                cloud.patch("nodes", "", &name, status);
            }
            3 => {
                let j = k % s.link_pods.max(1);
                cloud.patch("pods", &node(1), &format!("pod-{j}"), label);
            }
            _ => {
                let j = k % s.link_pods.max(1);
                cloud.patch("configmaps", &node(1), &format!("cm-{j}"), label);
            }
        }
    }
}
