//! Case 12 (issue 32): a node's day in miniature, on the cloud link.
//!
//! **The scene.** A cloud of the case's own per run: Services and EndpointSlices, pods on the
//! node with a ConfigMap and a Secret each, the node's Namespace, Node objects, bookmarks
//! every 60 s. **Start-up:** kubelet lists and watches its pods (its node's namespace stands
//! for the `spec.nodeName` selector) and gets its Node and every pod's ConfigMap and Secret;
//! kube-proxy lists and watches Services and EndpointSlices; coredns those and Namespaces;
//! flanneld gets its Node and lists and watches Nodes. **Then** changes to slices, Services
//! and pods, until every watch has seen the last of its kind.
//!
//! **Rows** ([`ROWS`], the lead's list to extend: a row is a setup and the hub's flags):
//! direct (the clients to the cloud), a hub (one node) with `--upstream-gzip` off and on, a pool (one hub per node, edge-1 the
//! leader; the figures divided by the nodes). Each row runs twice: clients asking for gzip as
//! client-go does, and clients that do not (python's client, curl).
//!
//! **Reported:** what the cloud sent ([`Cloud::bytes_sent`]: heads and bodies before TLS) and
//! the requests it answered, from the hubs' start to the last change seen; `poolSavedBytes`
//! and `gzipSavedBytes` from the hubs' `/v1/link`; the size of `link-totals.json` as each hub
//! wrote it at its drain (SIGTERM), and the flash it wrote over the run
//! (`tinyhub_link_file_writes_total` and `_bytes_total`, before the drain) scaled to an
//! hour. Figures are reported, never asserted.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{Client, DirectTls};
use crate::pool::{Endpoint, POOL, PoolHubs, Reflectors, node, pool_of, settled_bytes};
use crate::report::{Report, Section, Table};
use crate::stats::{count, size};
use crate::support::Cloud;
use crate::support::hub::{Hub, HubSpec, KUBELET, TempDir, eventually, get, proc_status, signal};
use crate::{Bench, Running};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const COREDNS: &str = "coredns/v1.11.1 (linux/arm) kubernetes/abcdef0";
const FLANNELD: &str = "flanneld/v0.25.1 (linux/arm) kubernetes/abcdef0";
const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
/// Time for every client to list and watch, and for a change to reach every watch.
const WAIT: Duration = Duration::from_secs(180);
/// Padding of each pod (a real pod's spec and status are a few KB).
const POD_PAD: usize = 2_000;

/// How a row reaches the cloud.
#[derive(Clone, Copy)]
pub enum Setup {
    /// The clients talk to the cloud themselves.
    Direct,
    /// One hub, with these flags after the launcher's.
    Hub(&'static [&'static str]),
    /// A pool of hubs, one per node (the scale's `link_pool_nodes`), edge-1 the leader.
    Pool,
}

/// The rows, in the table's order: (label, setup). The gzip part of issue 32 adds
/// `("hub, gzip off", Setup::Hub(&["--upstream-gzip=false"]))` beside the default hub.
pub const ROWS: &[(&str, Setup)] = &[
    ("direct", Setup::Direct),
    ("hub, gzip off", Setup::Hub(&["--upstream-gzip=false"])),
    ("hub, gzip on", Setup::Hub(&[])),
    ("pool, per node", Setup::Pool),
];

/// What one run measured.
struct Figures {
    /// Cloud bytes and requests, per node.
    bytes: u64,
    requests: u64,
    /// From the hubs' `/v1/link`, per node.
    pool_saved: u64,
    gzip_saved: u64,
    /// The largest `link-totals.json` a hub wrote at its drain; None without a hub.
    file: Option<u64>,
    /// The most a hub wrote of it over the run, scaled to an hour: (writes, bytes).
    flash: Option<(f64, f64)>,
    /// Nodes of the run.
    nodes: usize,
}

/// Runs every row twice (clients asking for gzip, then not) and writes the section.
pub fn link(b: &Bench, report: &mut Report) -> Result<(), String> {
    let mut table = Table::new(
        "",
        &[
            "row",
            "clients ask for gzip",
            "cloud bytes",
            "cloud requests",
            "poolSavedBytes",
            "gzipSavedBytes",
            "link-totals.json",
            "writes per hour",
            "flash per hour",
        ],
    );
    let mut single = None;
    let mut pooled = None;
    for (label, setup) in ROWS {
        for gzip in [true, false] {
            let f = run(b, *setup, gzip, label)?;
            table.row(vec![
                (*label).to_owned(),
                if gzip { "yes" } else { "no" }.to_owned(),
                size(f.bytes),
                count(f.requests),
                f.file.map_or("–".into(), |_| size(f.pool_saved)),
                f.file.map_or("–".into(), |_| size(f.gzip_saved)),
                f.file.map_or("–".into(), size),
                f.flash.map_or("–".into(), |(w, _)| format!("{w:.0}")),
                f.flash.map_or("–".into(), |(_, b)| size(b as u64)),
            ]);
            match setup {
                Setup::Hub([]) if gzip => single = Some(f.bytes),
                Setup::Pool if gzip => pooled = Some((f.bytes, f.nodes)),
                _ => {}
            }
        }
    }
    let s = b.scale;
    let mut section = Section::new(
        "12. A node's day in miniature: the cloud link",
        &format!(
            "A cloud of the case's own per run with {} Services, {} EndpointSlices, {} pods \
             per node (each with a ConfigMap and a Secret) and bookmarks every 60 s. Start-up: \
             kubelet lists and watches its pods and gets its Node and every pod's ConfigMap and \
             Secret; kube-proxy lists and watches Services and EndpointSlices; coredns those \
             and Namespaces; flanneld gets its Node and lists and watches Nodes. Then {} \
             changes to slices, Services and pods, until every watch has seen the last. Cloud \
             bytes are what the stand-in wrote (heads and bodies, before TLS) from the hubs' \
             start, their own requests included; a pool's figures are divided by its {} nodes. \
             `link-totals.json` is the largest file a hub wrote at its drain; the writes and \
             flash per hour are the most a hub wrote over the run (its \
             `tinyhub_link_file_writes_total` and `_bytes_total` before the drain), scaled to \
             an hour (a run shorter than the hub's 60 s interval shows none).",
            s.link_services, s.link_slices, s.link_pods, s.link_changes, s.link_pool_nodes
        ),
    );
    section.tables.push(table);
    if let (Some(single), Some((pooled, nodes))) = (single, pooled) {
        report.target(
            "12: a pool node's cloud bytes, clients asking for gzip",
            "≤ 1/5 of a single hub's",
            format!(
                "{} per node of {nodes} against {} ({:.2})",
                size(pooled),
                size(single),
                pooled as f64 / single.max(1) as f64
            ),
            pooled * 5 <= single,
        );
    }
    report.sections.push(section);
    Ok(())
}

/// One run of `setup` on a fresh cloud.
fn run(b: &Bench, setup: Setup, gzip: bool, label: &str) -> Result<Figures, String> {
    let s = b.scale;
    let nodes = if matches!(setup, Setup::Pool) {
        s.link_pool_nodes
    } else {
        1
    };
    let cloud = Cloud::start();
    populate(&cloud, b, nodes, matches!(setup, Setup::Pool));
    let (bytes_before, requests_before) = (cloud.bytes_sent(), cloud.requests().len());
    let tls = DirectTls::for_cloud(&cloud)?;
    let dir = TempDir::new("bench-link");
    let started = Instant::now();
    let mut hubs: Vec<Running> = Vec::new();
    let mut pool = None;
    match setup {
        Setup::Direct => {}
        Setup::Hub(flags) => {
            let mut args = vec!["--v=0", "--heartbeat-interval-seconds=10"];
            args.extend_from_slice(flags);
            let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&args));
            hubs.push(Running::register(hub));
        }
        Setup::Pool => pool = Some(PoolHubs::start_leader(&cloud, nodes, "bench-link")?),
    }
    let mut clients = Reflectors::default();
    let endpoint = |i: usize, hubs: &[Running], pool: &Option<PoolHubs>, ua: &str| {
        let e = match (hubs.first(), pool) {
            (Some(hub), _) => Endpoint::plain(hub, ua),
            (None, Some(p)) => Endpoint::plain(&p.hubs[i - 1], ua),
            (None, None) => Endpoint::tls(&cloud.url(), &tls, ua),
        };
        e.gzip(gzip)
    };
    let start_node =
        |i: usize, clients: &mut Reflectors, pool: &Option<PoolHubs>| -> Result<(), String> {
            let n = node(i);
            for (ua, path) in node_clients(&n) {
                let who = format!("{n} {}", ua.split('/').next().unwrap_or(ua));
                clients.start(who, endpoint(i, &hubs, pool, ua), path)?;
            }
            Ok(())
        };
    start_node(1, &mut clients, &pool)?;
    clients.wait_watching(WAIT)?;
    if let Some(p) = pool.as_mut() {
        // The leader's caches are filled by its own node's clients first, as case 9 does.
        p.start_followers(&cloud)?;
        for i in 2..=nodes {
            start_node(i, &mut clients, &pool)?;
        }
        clients.wait_watching(WAIT)?;
    }
    for i in 1..=nodes {
        gets(i, &cloud, &tls, &hubs, &pool, s.link_pods)?;
    }
    let marks = churn(&cloud, b, nodes)?;
    for (path, rv) in &marks {
        clients.wait_seen(path, *rv, WAIT)?;
    }
    let bytes = settled_bytes(&cloud) - bytes_before;
    let requests = (cloud.requests().len() - requests_before) as u64;
    let all: Vec<&Hub> = hubs
        .iter()
        .map(|h| &**h)
        .chain(pool.iter().flat_map(|p| p.hubs.iter().map(|h| &**h)))
        .collect();
    let (mut pool_saved, mut gzip_saved) = (0, 0);
    for hub in &all {
        let link = get(&format!("{}/v1/link", hub.serve_url()), "bench").json();
        pool_saved += link["lifetime"]["poolSavedBytes"].as_u64().unwrap_or(0);
        gzip_saved += link["lifetime"]["gzipSavedBytes"].as_u64().unwrap_or(0);
    }
    // The file's writes over the run so far, scaled to an hour (the drain's is not counted).
    let hours = started.elapsed().as_secs_f64() / 3600.0;
    let flash = all
        .iter()
        .map(|hub| {
            let m = |name: &str| hub.metric(name).unwrap_or(0.0) / hours;
            (
                m("tinyhub_link_file_writes_total"),
                m("tinyhub_link_file_bytes_total"),
            )
        })
        .reduce(|a, b| if b.1 > a.1 { b } else { a });
    clients.stop();
    let file = drained_file_size(&all);
    drop(hubs);
    drop(pool);
    cloud.stop();
    clients.join();
    let per = nodes as u64;
    let f = Figures {
        bytes: bytes / per,
        requests: requests / per,
        pool_saved: pool_saved / per,
        gzip_saved: gzip_saved / per,
        file,
        flash,
        nodes,
    };
    println!(
        "case 12 {label}, gzip {gzip}: {} and {} requests per node",
        size(f.bytes),
        count(f.requests)
    );
    Ok(f)
}

/// The lists and watches of node `n`'s usual clients, as (User-Agent, path): kubelet its
/// pods (its node's namespace stands for the `spec.nodeName` selector), kube-proxy Services
/// and EndpointSlices, coredns those and Namespaces, flanneld Nodes. Case 13 reuses them.
pub(crate) fn node_clients(n: &str) -> [(&'static str, &'static str); 7] {
    let pods: &'static str = Box::leak(format!("/api/v1/namespaces/{n}/pods").into_boxed_str());
    [
        (KUBELET, pods),
        (KUBE_PROXY, SERVICES),
        (KUBE_PROXY, SLICES),
        (COREDNS, SERVICES),
        (COREDNS, SLICES),
        (COREDNS, "/api/v1/namespaces"),
        (FLANNELD, "/api/v1/nodes"),
    ]
}

/// Stops `hubs` (SIGTERM, the drain writes the totals) and returns the largest file they
/// wrote; None without hubs.
fn drained_file_size(hubs: &[&Hub]) -> Option<u64> {
    for hub in hubs {
        signal(hub.pid(), "TERM");
    }
    let mut largest = None;
    for hub in hubs {
        // A process that has exited (a zombie until reaped) has no VmRSS line.
        eventually(Duration::from_secs(30), || {
            proc_status(hub.pid(), "VmRSS:") == 0
        });
        let size =
            std::fs::metadata(hub.spec.root_dir.join("link-totals.json")).map_or(0, |m| m.len());
        largest = Some(largest.unwrap_or(0).max(size));
    }
    largest
}

/// The cloud of a run: Services and slices, `nodes` nodes (in the pool, with its NodePool and
/// leader ConfigMap), each with its pods, their ConfigMaps and Secrets, in a namespace named
/// after the node. Case 13 reuses it.
pub(crate) fn populate(cloud: &Cloud, b: &Bench, nodes: usize, pool: bool) {
    let s = b.scale;
    cloud.set_bookmark_interval(Some(Duration::from_secs(60)));
    cloud.populate_services(s.link_services);
    cloud.populate_endpointslices(s.link_slices, nodes);
    let names: Vec<String> = (1..=nodes).map(node).collect();
    for n in &names {
        cloud.node(n, pool.then_some(POOL), &[]);
        cloud.create("namespaces", json!({"metadata": {"name": n}}));
        for j in 0..s.link_pods {
            cloud.create("configmaps", named(n, &format!("cm-{j}"), "data"));
            cloud.create("secrets", named(n, &format!("secret-{j}"), "data"));
            cloud.create(
                "pods",
                json!({"metadata": {"name": format!("pod-{j}"), "namespace": n,
                                    "annotations": {"pad": "x".repeat(POD_PAD)}},
                       "spec": {"nodeName": n, "containers": [{"name": "app", "image": "app:1"}]}}),
            );
        }
    }
    if pool {
        pool_of(cloud, &names);
    }
}

fn named(namespace: &str, name: &str, key: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": namespace}, "data": {key: "dmFsdWU="}})
}

/// kubelet's gets of node `i`: its Node, each pod's ConfigMap and Secret; flanneld's Node.
/// Case 13 reuses it.
pub(crate) fn gets(
    i: usize,
    cloud: &Cloud,
    tls: &DirectTls,
    hubs: &[Running],
    pool: &Option<PoolHubs>,
    pods: usize,
) -> Result<(), String> {
    let n = node(i);
    let client = |ua: &'static str| match (hubs.first(), pool) {
        (Some(hub), _) => Client::plain(&hub.url(), ua),
        (None, Some(p)) => Client::plain(&p.hubs[i - 1].url(), ua),
        (None, None) => Client::direct(&cloud.url(), tls, ua),
    };
    let mut kubelet = client(KUBELET);
    kubelet.get(&format!("/api/v1/nodes/{n}"))?;
    for j in 0..pods {
        kubelet.get(&format!("/api/v1/namespaces/{n}/configmaps/cm-{j}"))?;
        kubelet.get(&format!("/api/v1/namespaces/{n}/secrets/secret-{j}"))?;
    }
    client(FLANNELD).get(&format!("/api/v1/nodes/{n}"))?;
    Ok(())
}

/// The changes: slices, Services and the nodes' pods in turn (a label each, so the whole
/// object goes out in every event); then the resourceVersion each watch must reach: the last
/// slice and Service change, and per node its last pod change.
fn churn(cloud: &Cloud, b: &Bench, nodes: usize) -> Result<Vec<(&'static str, u64)>, String> {
    let s = b.scale;
    let rv = |o: &Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("a change without a resourceVersion: {o}"))
    };
    let mut last: Vec<(&'static str, u64)> = vec![(SLICES, 0), (SERVICES, 0)];
    let mut pods: Vec<u64> = vec![0; nodes];
    for i in 0..s.link_changes {
        let label = json!({"metadata": {"labels": {"bench-change": format!("c{i}")}}});
        match i % 3 {
            0 => {
                let k = (i / 3) % s.link_slices.max(1);
                let o = cloud.patch(
                    "endpointslices",
                    &format!("svc-{}", k % 10),
                    &format!("svc-{k:06}-ab12c"),
                    label,
                );
                last[0].1 = rv(&o)?;
            }
            1 => {
                let k = (i / 3) % s.link_services.max(1);
                let o = cloud.patch(
                    "services",
                    &format!("svc-{}", k % 10),
                    &format!("svc-{k:06}"),
                    label,
                );
                last[1].1 = rv(&o)?;
            }
            _ => {
                let n = (i / 3) % nodes;
                let j = (i / 3 / nodes) % s.link_pods.max(1);
                let o = cloud.patch("pods", &node(n + 1), &format!("pod-{j}"), label);
                pods[n] = rv(&o)?;
            }
        }
    }
    for (n, rv) in pods.into_iter().enumerate() {
        if rv > 0 {
            let path: &'static str =
                Box::leak(format!("/api/v1/namespaces/{}/pods", node(n + 1)).into_boxed_str());
            last.push((path, rv));
        }
    }
    last.retain(|(_, rv)| *rv > 0);
    Ok(last)
}
