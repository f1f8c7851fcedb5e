//! Case 11 (issue 29): a node's usual watches through an outage of the cloud, through the hub
//! and, side by side, the same informers going direct.
//!
//! Each informer is a small loop like a client-go reflector as the node components use it:
//! list its scope, watch from the list's resourceVersion with bookmarks, and on any end of
//! the watch (the connection broken, an ERROR event such as 410 Gone, the stream closed)
//! list again, which is what YurtHub's clients do when their watch ends at an outage. Every
//! list after the first is a relist. The set: kubelet's pods (its node selector), its Node and
//! a few per-object ConfigMap and Secret watches; kube-proxy's and coredns' Services and
//! EndpointSlices; flanneld's Nodes.
//!
//! Two clouds of the case's own hold the same objects: one behind a hub of its own (started
//! with the launcher's 1 s health checks so it sees the outage at once), one the direct
//! informers talk to, so each cloud's requests and bytes are one way's only. Both stop at the
//! same instant, take the same changes while down, and restart together; then the time runs
//! until every informer's view (names and resourceVersions) equals its scope in its cloud.
//! Two sub-cases on the same clouds: the history intact, then gone (`compact()` during the
//! outage, so every resume answers 410). Figures are reported, never asserted; a view that
//! never catches up is a failure.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{DirectTls, agent, metrics, proc_mem, reset_peak};
use crate::report::{Report, Section, Table};
use crate::stats::{count, size};
use crate::support::hub::{Hub, HubSpec, KUBELET, proc_status};
use crate::support::{Cloud, RecordedRequest, lock};
use crate::{Bench, Running};

/// The node the hub runs for (the launcher's `--node-name`).
const NODE: &str = "edge-1";
/// kube-proxy's User-Agent.
const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// coredns' User-Agent.
const COREDNS: &str = "coredns/v1.11.1 (linux/arm) kubernetes/abcdef0";
/// flanneld's User-Agent.
const FLANNELD: &str = "flanneld/v0.25.1 (linux/arm) kubernetes/abcdef0";
/// Per-object ConfigMap and Secret watches of kubelet (each kind).
const OBJECT_WATCHES: usize = 3;
/// An informer's pause after a failed list or watch request (client-go backs off from 0.8 s).
const RETRY: Duration = Duration::from_secs(1);
/// How long a watch read may wait: longer than any outage of the case, so a held watch's
/// silence is never taken for its end.
const WATCH_READ: Duration = Duration::from_secs(600);
/// Kept after every informer has caught up, so late requests of either way count too.
const SETTLE: Duration = Duration::from_secs(1);
/// How often views and the hub's RSS are read during the catch-up.
const POLL: Duration = Duration::from_millis(50);
/// The hub's verdict that the cloud is back (1 s probes) plus its resume jitter (< 5 s).
const HUB_BACK: Duration = Duration::from_secs(1 + 5);
/// After a 410, the resume's list round gathers its scope's watches this long (rounds.rs).
const GATHER: Duration = Duration::from_secs(1);
/// Allowed over [`HUB_BACK`] for polling and the machine's load.
const SLACK: Duration = Duration::from_secs(1);
/// Padding of each pod, bytes (a real pod's spec and status are a few KB).
const POD_PAD: usize = 2_000;

/// Which objects of its resource an informer sees.
#[derive(Clone)]
enum Scope {
    /// Pods bound to [`NODE`] (`spec.nodeName`).
    NodePods,
    /// One object, by namespace ("" for cluster-scoped) and name.
    Named(String, String),
    /// Every object.
    All,
}

/// One informer: who, what, and how its list URL reads.
#[derive(Clone)]
struct Spec {
    /// Label in tables and failures.
    label: String,
    /// Its User-Agent (the hub caches by it).
    ua: &'static str,
    /// The cloud's resource name.
    resource: &'static str,
    /// The collection path (namespaced when the scope is one object in a namespace).
    path: String,
    /// The list's query, "" for none.
    query: String,
    /// What it should hold.
    scope: Scope,
}

/// The node's usual watches.
fn specs() -> Vec<Spec> {
    let spec = |label: &str, ua, resource, path: &str, query: &str, scope| Spec {
        label: label.to_owned(),
        ua,
        resource,
        path: path.to_owned(),
        query: query.to_owned(),
        scope,
    };
    let mut v = vec![
        spec(
            "kubelet pods",
            KUBELET,
            "pods",
            "/api/v1/pods",
            "fieldSelector=spec.nodeName%3Dedge-1",
            Scope::NodePods,
        ),
        spec(
            "kubelet node",
            KUBELET,
            "nodes",
            "/api/v1/nodes",
            "fieldSelector=metadata.name%3Dedge-1",
            Scope::Named(String::new(), NODE.into()),
        ),
    ];
    for i in 0..OBJECT_WATCHES {
        for (resource, ns, prefix) in [("configmaps", "app", "cm"), ("secrets", "app", "secret")] {
            let name = format!("{prefix}-{i}");
            v.push(spec(
                &format!("kubelet {resource} {name}"),
                KUBELET,
                resource,
                &format!("/api/v1/namespaces/{ns}/{resource}"),
                &format!("fieldSelector=metadata.name%3D{name}"),
                Scope::Named(ns.into(), name),
            ));
        }
    }
    for (who, ua) in [("kube-proxy", KUBE_PROXY), ("coredns", COREDNS)] {
        v.push(spec(
            &format!("{who} services"),
            ua,
            "services",
            "/api/v1/services",
            "",
            Scope::All,
        ));
        v.push(spec(
            &format!("{who} endpointslices"),
            ua,
            "endpointslices",
            "/apis/discovery.k8s.io/v1/endpointslices",
            "",
            Scope::All,
        ));
    }
    v.push(spec(
        "flanneld nodes",
        FLANNELD,
        "nodes",
        "/api/v1/nodes",
        "",
        Scope::All,
    ));
    v
}

/// A view: "namespace/name" to resourceVersion.
type View = BTreeMap<String, String>;

/// What an informer holds and did, shared with the case.
#[derive(Default)]
struct State {
    view: View,
    /// Successful lists after the first.
    relists: u64,
}

/// A running informer.
struct Informer {
    spec: Spec,
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
}

/// The key of an object in a view.
fn key(o: &Value) -> String {
    format!(
        "{}/{}",
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// The resourceVersion of an object or list.
fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The informer's loop: list, watch from the list's resourceVersion until the watch ends,
/// list again; until `stop`.
fn run_informer(
    spec: Spec,
    base: String,
    tls: Option<DirectTls>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let agent = agent(tls.as_ref());
    let sep = if spec.query.is_empty() { "" } else { "&" };
    let mut listed = false;
    while !stop.load(Ordering::Relaxed) {
        let url = format!("{base}{}?{}", spec.path, spec.query);
        let list = agent
            .get(&url)
            .header("user-agent", spec.ua)
            .call()
            .ok()
            .filter(|r| r.status().as_u16() == 200)
            .and_then(|r| serde_json::from_reader::<_, Value>(r.into_body().into_reader()).ok());
        let Some(list) = list else {
            thread::sleep(RETRY);
            continue;
        };
        let last = rv(&list);
        {
            let mut s = lock(&state);
            s.view = list["items"]
                .as_array()
                .map(|items| items.iter().map(|o| (key(o), rv(o))).collect())
                .unwrap_or_default();
            if listed {
                s.relists += 1;
            }
        }
        listed = true;
        let url = format!(
            "{base}{}?{}{sep}watch=true&resourceVersion={last}&allowWatchBookmarks=true\
             &timeoutSeconds=3600",
            spec.path, spec.query
        );
        let Ok(request) = ureq::http::Request::builder()
            .method("GET")
            .uri(&url)
            .header("user-agent", spec.ua)
            .body(())
        else {
            return;
        };
        let request = agent
            .configure_request(request)
            .timeout_global(None)
            .timeout_per_read(Some(WATCH_READ))
            .build();
        let response = match agent.run(request) {
            Ok(r) if r.status().as_u16() == 200 => r,
            _ => {
                thread::sleep(RETRY);
                continue;
            }
        };
        let reader = std::io::BufReader::new(response.into_body().into_reader());
        for line in std::io::BufRead::lines(reader) {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                break;
            };
            let object = &event["object"];
            match event["type"].as_str() {
                Some("ADDED" | "MODIFIED") => {
                    lock(&state).view.insert(key(object), rv(object));
                }
                Some("DELETED") => {
                    lock(&state).view.remove(&key(object));
                }
                // Where a re-watch would start; these informers relist instead.
                Some("BOOKMARK") => {}
                // An ERROR (410 Gone) or anything else ends the watch: relist.
                _ => break,
            }
        }
    }
}

impl Informer {
    fn start(spec: Spec, base: &str, tls: Option<DirectTls>, stop: &Arc<AtomicBool>) -> Informer {
        let state = Arc::new(Mutex::new(State::default()));
        let thread = {
            let (spec, base, state, stop) =
                (spec.clone(), base.to_owned(), state.clone(), stop.clone());
            thread::Builder::new()
                .name("bench-informer".into())
                .spawn(move || run_informer(spec, base, tls, state, stop))
                .ok()
        };
        Informer {
            spec,
            state,
            thread,
        }
    }
}

/// What `spec`'s scope holds in `cloud` now.
fn truth(cloud: &Cloud, spec: &Spec) -> View {
    cloud
        .list(spec.resource, None)
        .iter()
        .filter(|o| match &spec.scope {
            Scope::All => true,
            Scope::NodePods => o["spec"]["nodeName"] == NODE,
            Scope::Named(ns, name) => {
                o["metadata"]["name"] == name.as_str()
                    && o["metadata"]["namespace"].as_str().unwrap_or("") == ns
            }
        })
        .map(|o| (key(o), rv(o)))
        .collect()
}

/// One way: its cloud and informers.
struct Way {
    name: &'static str,
    cloud: Cloud,
    informers: Vec<Informer>,
}

impl Way {
    /// The informers whose view differs from their scope in the cloud (labels).
    fn behind(&self, truths: &[View]) -> Vec<String> {
        self.informers
            .iter()
            .zip(truths)
            .filter(|(i, t)| lock(&i.state).view != **t)
            .map(|(i, _)| i.spec.label.clone())
            .collect()
    }

    fn truths(&self) -> Vec<View> {
        self.informers
            .iter()
            .map(|i| truth(&self.cloud, &i.spec))
            .collect()
    }

    fn relists(&self) -> u64 {
        self.informers.iter().map(|i| lock(&i.state).relists).sum()
    }
}

/// The objects of both clouds, the same in each.
fn populate(cloud: &Cloud, b: &Bench) {
    let s = b.scale;
    cloud.node(NODE, None, &[]);
    for i in 0..s.outage_nodes {
        cloud.node(&format!("node-{i}"), None, &[]);
    }
    for i in 0..s.outage_pods {
        cloud.create("pods", pod(&format!("web-{i}"), NODE));
        cloud.create("pods", pod(&format!("other-{i}"), "node-0"));
    }
    for i in 0..OBJECT_WATCHES {
        cloud.create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "namespace": "app"},
                   "data": {"config": "x".repeat(500)}}),
        );
        cloud.create(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": format!("secret-{i}"), "namespace": "app"},
                   "data": {"token": "eA==".repeat(100)}}),
        );
    }
    cloud.populate_services(s.outage_services);
    cloud.populate_endpointslices(s.outage_services, s.outage_nodes);
}

/// A pod of `node` with some padding.
fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"bench/pad": "p".repeat(POD_PAD)}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    })
}

/// Change `i` of an outage (`round` tells outages apart), made the same in each cloud: mostly
/// kubelet's pods (updates, new ones, deletions), then slices, Services, Nodes, the watched
/// ConfigMaps and Secrets, and pods of other nodes no informer of this node sees.
fn change(cloud: &Cloud, b: &Bench, round: usize, i: usize) {
    let s = b.scale;
    let mark = json!({"metadata": {"annotations": {"bench/change": format!("{round}-{i}")}}});
    match i % 10 {
        0..=2 => {
            cloud.patch(
                "pods",
                "default",
                &format!("web-{}", i % s.outage_pods),
                mark,
            );
        }
        3 => {
            let n = i % s.outage_services;
            cloud.patch(
                "endpointslices",
                &format!("svc-{}", n % 10),
                &format!("svc-{n:06}-ab12c"),
                mark,
            );
        }
        4 => {
            let n = (i * 7) % s.outage_services;
            cloud.patch(
                "services",
                &format!("svc-{}", n % 10),
                &format!("svc-{n:06}"),
                mark,
            );
        }
        5 => {
            let name = if i % 20 == 5 {
                NODE.to_owned()
            } else {
                format!("node-{}", i % s.outage_nodes)
            };
            cloud.patch("nodes", "", &name, mark);
        }
        6 => {
            let (resource, prefix) = if i % 20 == 6 {
                ("configmaps", "cm")
            } else {
                ("secrets", "secret")
            };
            cloud.patch(
                resource,
                "app",
                &format!("{prefix}-{}", i % OBJECT_WATCHES),
                mark,
            );
        }
        7 => {
            cloud.create("pods", pod(&format!("new-{round}-{i}"), NODE));
        }
        8 => {
            // The pods this outage's creations added, one in two: DELETED events.
            let name = format!("new-{round}-{}", i - 1);
            if i % 20 == 8 && cloud.get("pods", "default", &name).is_some() {
                cloud.delete("pods", "default", &name);
            } else {
                cloud.patch(
                    "pods",
                    "default",
                    &format!("web-{}", i % s.outage_pods),
                    mark,
                );
            }
        }
        _ => {
            cloud.patch(
                "pods",
                "default",
                &format!("other-{}", i % s.outage_pods),
                mark,
            );
        }
    }
}

/// One sub-case's figures, per way.
struct Outcome {
    history: &'static str,
    /// The history was compacted during the outage.
    compacted: bool,
    /// Per way (hub, direct): relists, lists, watches, bytes, catch-up time.
    ways: Vec<WayOutcome>,
    /// The hub's VmHWM since the restart and its highest sampled VmRSS, bytes.
    hub_hwm: u64,
    hub_rss: u64,
    /// The hub's VmRSS just before the outage.
    hub_before: u64,
    /// The hub's resume series' deltas: resumed legs, lists after a 410, events synthesized.
    resumed: f64,
    hub_lists: f64,
    synthesized: f64,
}

struct WayOutcome {
    name: &'static str,
    relists: u64,
    lists: usize,
    watches: usize,
    bytes: u64,
    caught_up: Duration,
}

/// A request the hub makes for itself whatever its clients do: certificates, heartbeat, and
/// the health probes (`/readyz`) that tell it the cloud is back.
fn hubs_own(r: &RecordedRequest) -> bool {
    r.is_hubs_own() || r.path == "/readyz" || r.path == "/healthz" || r.path == "/livez"
}

/// Sums of the hub's resume series.
fn resume_series(hub: &Hub) -> Result<[f64; 3], String> {
    let m = metrics(hub)?;
    let sum = |name| m.sum(name, |_| true).unwrap_or(0.0);
    Ok([
        sum("tinyhub_watch_resumed_total"),
        sum("tinyhub_watch_relists_total"),
        sum("tinyhub_watch_events_synthesized_total"),
    ])
}

/// Case 11: the node's watches through an outage with its history intact, then gone.
pub fn outage(b: &Bench, dir: &std::path::Path, report: &mut Report) -> Result<(), String> {
    let hub_cloud = Cloud::start();
    let direct_cloud = Cloud::start();
    for c in [&hub_cloud, &direct_cloud] {
        c.set_gzip_threshold(usize::MAX);
        populate(c, b);
    }
    let hub = Running::register(Hub::start(
        &HubSpec::for_cloud(&hub_cloud, dir).with(&["--v=0"]),
    ));
    hub.wait_cache_quiet();
    let tls = DirectTls::for_cloud(&direct_cloud)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut ways = vec![
        Way {
            name: "through the hub",
            informers: specs()
                .into_iter()
                .map(|s| Informer::start(s, &hub.url(), None, &stop))
                .collect(),
            cloud: hub_cloud,
        },
        Way {
            name: "direct",
            informers: specs()
                .into_iter()
                .map(|s| Informer::start(s, &direct_cloud.url(), Some(tls.clone()), &stop))
                .collect(),
            cloud: direct_cloud,
        },
    ];
    let result = measure(b, &hub, &mut ways);
    stop.store(true, Ordering::Relaxed);
    drop(hub);
    for way in &mut ways {
        way.cloud.stop();
        for i in &mut way.informers {
            if let Some(t) = i.thread.take() {
                let _ = t.join();
            }
        }
    }
    let outcomes = result?;
    write_section(b, &outcomes, report);
    Ok(())
}

/// Waits until every informer of `ways` has caught up (or `limit` passes); the time each way
/// took, sampling the hub's RSS meanwhile.
fn catch_up(
    ways: &[Way],
    hub: &Hub,
    since: Instant,
    limit: Duration,
    rss: &mut u64,
) -> Result<Vec<Duration>, String> {
    let truths: Vec<Vec<View>> = ways.iter().map(Way::truths).collect();
    let mut done: Vec<Option<Duration>> = vec![None; ways.len()];
    loop {
        *rss = (*rss).max(proc_status(hub.pid(), "VmRSS:") * 1024);
        for (w, way) in ways.iter().enumerate() {
            if done[w].is_none() && way.behind(&truths[w]).is_empty() {
                done[w] = Some(since.elapsed());
            }
        }
        if let Some(all) = done.iter().copied().collect::<Option<Vec<_>>>() {
            return Ok(all);
        }
        if since.elapsed() > limit {
            let behind: Vec<String> = ways
                .iter()
                .zip(&truths)
                .map(|(w, t)| format!("{}: {:?}", w.name, w.behind(t)))
                .collect();
            return Err(format!(
                "not every informer caught up within {limit:?}; behind: {}",
                behind.join("; ")
            ));
        }
        thread::sleep(POLL);
    }
}

fn measure(b: &Bench, hub: &Running, ways: &mut [Way]) -> Result<Vec<Outcome>, String> {
    let s = b.scale;
    let synced = Instant::now();
    let mut ignore = 0;
    catch_up(ways, hub, synced, Duration::from_secs(60), &mut ignore)
        .map_err(|e| format!("before the outage, {e}"))?;
    println!(
        "  {} informers per way in sync after {:.1} s",
        ways[0].informers.len(),
        synced.elapsed().as_secs_f64()
    );
    let mut outcomes = Vec::new();
    for (round, (history, compact)) in [("intact", false), ("gone (compacted)", true)]
        .into_iter()
        .enumerate()
    {
        let relists_before: Vec<u64> = ways.iter().map(Way::relists).collect();
        let series_before = resume_series(hub)?;
        let hub_before = proc_status(hub.pid(), "VmRSS:") * 1024;
        for w in ways.iter() {
            w.cloud.stop();
        }
        let down = Instant::now();
        for i in 0..s.outage_changes {
            for w in ways.iter() {
                change(&w.cloud, b, round, i);
            }
        }
        if compact {
            for w in ways.iter() {
                w.cloud.compact();
            }
        }
        if let Some(rest) = s.outage.checked_sub(down.elapsed()) {
            thread::sleep(rest);
        }
        let before: Vec<u64> = ways
            .iter()
            .map(|w| {
                w.cloud.reset_requests();
                w.cloud.bytes_sent()
            })
            .collect();
        reset_peak(hub.pid())?;
        for w in ways.iter() {
            w.cloud.restart();
        }
        let back = Instant::now();
        let mut rss = 0;
        let times = catch_up(
            ways,
            hub,
            back,
            HUB_BACK + Duration::from_secs(60),
            &mut rss,
        )
        .map_err(|e| format!("history {history}: {e}"))?;
        thread::sleep(SETTLE);
        let hub_hwm = proc_mem(hub.pid())?.hwm;
        let series = resume_series(hub)?;
        let mut per_way = Vec::new();
        for (w, way) in ways.iter().enumerate() {
            let requests = way.cloud.requests();
            // On the terminal only: what each cloud was asked, by component and target.
            let mut asked: BTreeMap<String, usize> = BTreeMap::new();
            for r in requests.iter().filter(|r| !hubs_own(r)) {
                let what = format!(
                    "{} {} {}{}",
                    r.component(),
                    r.method,
                    r.path,
                    if r.is_watch() { " (watch)" } else { "" }
                );
                *asked.entry(what).or_default() += 1;
            }
            println!("  history {history}, {}, the cloud was asked:", way.name);
            for (what, n) in &asked {
                println!("    {n} × {what}");
            }
            let clients = || requests.iter().filter(|r| !hubs_own(r));
            per_way.push(WayOutcome {
                name: way.name,
                relists: way.relists() - relists_before[w],
                lists: clients()
                    .filter(|r| !r.is_watch() && r.method == "GET")
                    .count(),
                watches: clients().filter(|r| r.is_watch()).count(),
                bytes: way.cloud.bytes_sent() - before[w],
                caught_up: times[w],
            });
        }
        for w in &per_way {
            println!(
                "  history {history}, {}: {} relists, {} lists and {} watches to the cloud, {} \
                 from it, caught up in {:.2} s",
                w.name,
                w.relists,
                w.lists,
                w.watches,
                size(w.bytes),
                w.caught_up.as_secs_f64()
            );
        }
        outcomes.push(Outcome {
            history,
            compacted: compact,
            ways: per_way,
            hub_hwm,
            hub_rss: rss,
            hub_before,
            resumed: series[0] - series_before[0],
            hub_lists: series[1] - series_before[1],
            synthesized: series[2] - series_before[2],
        });
    }
    Ok(outcomes)
}

fn write_section(b: &Bench, outcomes: &[Outcome], report: &mut Report) {
    let s = b.scale;
    let informers = specs().len();
    let mut section = Section::new(
        "11. Watches through an outage",
        &format!(
            "A node's usual watches, {informers} informers: kubelet's pods (`spec.nodeName`), \
             its Node and {OBJECT_WATCHES} ConfigMap and {OBJECT_WATCHES} Secret watches by \
             name; kube-proxy's and coredns' Services and EndpointSlices; flanneld's Nodes. \
             Each lists, watches from the list's resourceVersion with bookmarks, and lists \
             again on any end of its watch (as YurtHub's clients do when their watch ends at \
             an outage). Two clouds of the case's own hold the same objects ({} pods on the \
             node and {} elsewhere, {} Nodes, {} Services and EndpointSlices): one behind a \
             hub of its own (1 s health checks), one the same informers reach directly. Both \
             stop (connections refused, open ones cut) for {:.0} s, take the same {} changes \
             (pod updates, creations and deletions; slices, Services, Nodes, the watched \
             ConfigMaps and Secrets; pods of other nodes), and restart together. Twice: the \
             history intact, then gone (`compact()` during the outage: every watch from \
             before it answers 410). Requests and bytes are what each cloud saw and sent \
             from its restart until {:.0} s after every informer of its way caught up \
             (the hub's heartbeat and health probes not counted as requests; their bytes, \
             a few hundred a second, are in; the hub's own watch of \
             `kube-system/yurt-hub-cfg` is, and it lists that ConfigMap again). Caught up: every informer's names and \
             resourceVersions equal its scope in its cloud.",
            s.outage_pods,
            s.outage_pods,
            s.outage_nodes + 1,
            s.outage_services,
            s.outage.as_secs_f64(),
            s.outage_changes,
            SETTLE.as_secs_f64(),
        ),
    );
    let mut table = Table::new(
        "After the restart",
        &[
            "history",
            "way",
            "client relists",
            "lists to the cloud",
            "watches to the cloud",
            "bytes from the cloud",
            "until all caught up",
        ],
    );
    for o in outcomes {
        for w in &o.ways {
            table.row(vec![
                o.history.into(),
                w.name.into(),
                count(w.relists),
                w.lists.to_string(),
                w.watches.to_string(),
                size(w.bytes),
                format!("{:.2} s", w.caught_up.as_secs_f64()),
            ]);
        }
    }
    section.tables.push(table);
    let mut mem = Table::new(
        "The hub during the catch-up",
        &[
            "history",
            "VmRSS before the outage",
            "peak (VmHWM since the restart)",
            "highest VmRSS sampled (50 ms)",
            "legs resumed",
            "lists after a 410",
            "events synthesized",
        ],
    );
    for o in outcomes {
        mem.row(vec![
            o.history.into(),
            size(o.hub_before),
            size(o.hub_hwm),
            size(o.hub_rss),
            format!("{:.0}", o.resumed),
            format!("{:.0}", o.hub_lists),
            format!("{:.0}", o.synthesized),
        ]);
    }
    section.tables.push(mem);
    section.notes.push(format!(
        "Through the hub the catch-up waits for the hub's verdict that the cloud is back (1 s \
         probes here) and its resume jitter (0 to 5 s per scope, so a region's nodes do not \
         come back in the same second); the direct informers retry every {:.0} s and list as \
         soon as the cloud answers. Directly, the history does not matter: every watch ended \
         at the outage and every informer lists again.",
        RETRY.as_secs_f64()
    ));
    section.notes.push(
        "Bytes: a resumed watch replays every change made during the outage (each event a \
         whole object), a relist carries the scope's state once; so the hub's saving grows \
         with the objects in scope and shrinks with the churn during the outage. After a \
         410 the hub lists each scope once (kube-proxy's and coredns' shared) and sends \
         only the difference to its clients, which never list."
            .into(),
    );
    section.notes.push(
        "Through the hub, kube-proxy's and coredns' Services and EndpointSlices are served from \
         the hub's node-local watch cache, whose one watch per resource (User-Agent \
         `multiplexer-proxy-<node>`) resumes for both; every other watch resumes on its own, \
         or after a 410 lists its scope once and sends its client the difference."
            .into(),
    );
    section.notes.push(
        "The machine is shared with other work; times are from one run and move with its load."
            .into(),
    );
    report.sections.push(section);

    for o in outcomes {
        let hub = o.ways.iter().find(|w| w.name == "through the hub");
        let direct = o.ways.iter().find(|w| w.name == "direct");
        let (Some(hub), Some(direct)) = (hub, direct) else {
            continue;
        };
        report.target(
            &format!(
                "Outage, history {}: client relists through the hub",
                o.history
            ),
            "0",
            format!("{} (direct: {})", hub.relists, direct.relists),
            hub.relists == 0,
        );
        report.target(
            &format!(
                "Outage, history {}: bytes from the cloud on reconnect",
                o.history
            ),
            "fewer than direct",
            format!("{} (direct: {})", size(hub.bytes), size(direct.bytes)),
            hub.bytes < direct.bytes,
        );
        // After a 410 the round's gather window comes on top.
        let (bound, why) = if o.compacted {
            (
                HUB_BACK + GATHER,
                "health verdict + jitter + the round's gather",
            )
        } else {
            (HUB_BACK, "health verdict + jitter")
        };
        report.target(
            &format!(
                "Outage, history {}: all caught up through the hub",
                o.history
            ),
            &format!(
                "≤ {:.0} s ({why}), +{:.0} s for polling and load",
                bound.as_secs_f64(),
                SLACK.as_secs_f64()
            ),
            format!("{:.2} s", hub.caught_up.as_secs_f64()),
            hub.caught_up <= bound + SLACK,
        );
    }
}
