//! Issue 16 (link accounting): the hub's `tinyhub_cloud_*` series count every request it
//! sends the cloud and the body bytes each way, per server, component and resource — a
//! list, a gzip list, a write, a watch while it streams, the hub's own probes — and what
//! gzip saves the link on the pool-scope lists.

use std::io::Read;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

/// A client no filter and no cache applies to: the hub relays the cloud's body untouched, so
/// the bytes it received are the bytes the client got.
const CURL: &str = "curl/8.5.0";

/// The value of `tinyhub_cloud_<name>_total` for one series (0 when absent).
fn series(hub: &Hub, cloud: &Cloud, name: &str, component: &str, resource: &str) -> f64 {
    hub.metric(&labelled(cloud, name, component, resource))
        .unwrap_or(0.0)
}

/// Asserts each `(name, value)` of `expected`, in order: `component`'s series `name` for
/// `resource` on `hub` has that value.
fn assert_series(
    hub: &Hub,
    cloud: &Cloud,
    component: &str,
    resource: &str,
    expected: &[(&str, f64)],
) {
    for &(name, value) in expected {
        assert_eq!(
            series(hub, cloud, name, component, resource),
            value,
            "{component} {resource} {name}"
        );
    }
}

fn labelled(cloud: &Cloud, name: &str, component: &str, resource: &str) -> String {
    format!(
        "tinyhub_cloud_{name}_total{{server=\"{}\",component=\"{component}\",resource=\"{resource}\"}}",
        cloud.url()
    )
}

fn start(cloud: &Cloud, tag: &str, flags: &[&str]) -> (TempDir, Hub) {
    let dir = TempDir::new(tag);
    let hub = Hub::start(&HubSpec::for_cloud(cloud, dir.path()).with(flags));
    (dir, hub)
}

#[test]
fn lists_writes_and_probes_move_their_series_by_their_body_bytes() {
    let cloud = Cloud::start();
    // Not a pool-scope resource (those are served from the hub's watch cache), and past the
    // 128 KiB over which the cloud compresses.
    for i in 0..300 {
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": format!("pad-{i}"), "namespace": "default"},
                   "data": {"pad": "x".repeat(500)}}),
        );
    }
    // The hub's node: its lease renewals (the health probes of lease mode) go on the link.
    cloud.node("edge-1", None, &[]);
    // The client's own encoding on the link (issue 32's gzip for everyone is counted in
    // cloud_gzip.rs): a plain list takes its plain bytes.
    let (_dir, hub) = start(&cloud, "link-metrics", &["--upstream-gzip=false"]);
    let list = format!("{}/api/v1/namespaces/default/configmaps", hub.url());

    // A plain list: one request, every body byte the client got.
    let plain = get(&list, CURL);
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(plain.header("content-encoding"), None);
    assert_series(
        &hub,
        &cloud,
        "curl",
        "configmaps",
        &[
            ("requests", 1.0),
            ("received_bytes", plain.body.len() as f64),
            ("sent_bytes", 0.0),
            ("received_gzip_bytes", 0.0),
        ],
    );

    // The same list asking for gzip: the link carried the compressed body, which the hub
    // passes through (the client got those very bytes).
    let zipped = call("GET", &list, CURL, &[("accept-encoding", "gzip")], None);
    assert_eq!(zipped.status, 200);
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert!(zipped.body.len() * 4 < plain.body.len(), "gzip saves");
    assert_series(
        &hub,
        &cloud,
        "curl",
        "configmaps",
        &[
            ("requests", 2.0),
            (
                "received_bytes",
                (plain.body.len() + zipped.body.len()) as f64,
            ),
            ("received_gzip_bytes", zipped.body.len() as f64),
        ],
    );

    // A write: its body is counted as sent, under the writer's component and resource.
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "link-cm", "namespace": "default"}, "data": {"k": "v"}}))
    .unwrap();
    let created = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        "kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b",
        &[("content-type", "application/json")],
        Some(&body),
    );
    assert!(created.status < 500, "{}", created.text());
    assert_series(
        &hub,
        &cloud,
        "kubectl",
        "configmaps",
        &[
            ("requests", 1.0),
            ("sent_bytes", body.len() as f64),
            ("received_bytes", created.body.len() as f64),
        ],
    );

    // The hub's own exchanges, its lease renewals every second: component tinyhub.
    let renewals = labelled(&cloud, "requests", "tinyhub", "leases");
    assert!(hub.wait_metric_at_least(&renewals, 3.0, Duration::from_secs(10)));
    assert!(series(&hub, &cloud, "sent_bytes", "tinyhub", "leases") > 0.0);
    assert!(series(&hub, &cloud, "received_bytes", "tinyhub", "leases") > 0.0);

    // The totals hold every series.
    let all = hub
        .metric("tinyhub_cloud_all_received_bytes_total")
        .unwrap();
    assert!(all >= (plain.body.len() + zipped.body.len() + created.body.len()) as f64);
    let sent = hub.metric("tinyhub_cloud_all_sent_bytes_total").unwrap();
    assert!(sent >= body.len() as f64);
}

#[test]
fn a_watch_counts_its_bytes_as_they_stream() {
    let cloud = Cloud::start();
    let (_dir, hub) = start(&cloud, "link-metrics-watch", &[]);
    let rv = cloud.resource_version();
    // The hub watches ConfigMaps of its own (its leader ConfigMap): one more than those.
    let before = cloud.watchers("configmaps");
    let (status, mut stream) = stream(
        &format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}",
            hub.url()
        ),
        "watcher/1.0",
    );
    assert_eq!(status, 200);
    assert!(
        eventually(Duration::from_secs(10), || cloud.watchers("configmaps")
            == before + 1),
        "the watch reached the cloud"
    );
    assert_series(
        &hub,
        &cloud,
        "watcher",
        "configmaps",
        &[("requests", 1.0), ("received_bytes", 0.0)],
    );

    let mut read = 0;
    for name in ["link-w1", "link-w2"] {
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}}),
        );
        read += read_line(&mut stream);
        // The watch is still open: its bytes are on the page already.
        let received = labelled(&cloud, "received_bytes", "watcher", "configmaps");
        assert!(
            hub.wait_metric(&received, read as f64, Duration::from_secs(5)),
            "{name}: {:?} after {read} bytes read",
            hub.metric(&received)
        );
    }
    assert_eq!(
        series(&hub, &cloud, "requests", "watcher", "configmaps"),
        1.0
    );
}

/// Reads one watch event line (to its newline) byte by byte; its length.
fn read_line(stream: &mut Box<dyn Read + Send>) -> usize {
    let mut n = 0;
    let mut byte = [0u8];
    loop {
        stream.read_exact(&mut byte).expect("a watch event");
        n += 1;
        if byte[0] == b'\n' {
            return n;
        }
    }
}

/// The figures of the issue: what a list of 1,000 Services and of 1,000 EndpointSlices
/// takes on the link, plain and gzip (the stand-in compresses above 128 KiB, as the
/// apiserver does), read from the hub's own link series.
#[test]
fn gzip_shrinks_the_pool_scope_lists_on_the_link() {
    let cloud = Cloud::start();
    cloud.populate_services(1000);
    cloud.populate_endpointslices(1000, 10);
    // Cloud mode forwards them (edge mode serves them from its watch cache).
    // Without issue 32's gzip for everyone: the plain list is plain on the link.
    let (_dir, hub) = start(
        &cloud,
        "link-metrics-gzip",
        &["--working-mode=cloud", "--upstream-gzip=false"],
    );
    let mut figures = Vec::new();
    for (path, resource) in [
        ("/api/v1/services", "services"),
        ("/apis/discovery.k8s.io/v1/endpointslices", "endpointslices"),
    ] {
        let url = format!("{}{path}", hub.url());
        let received = || series(&hub, &cloud, "received_bytes", "curl", resource);
        let plain = get(&url, CURL);
        assert_eq!(plain.status, 200);
        let plain_bytes = received();
        assert_eq!(plain_bytes, plain.body.len() as f64);
        let zipped = call("GET", &url, CURL, &[("accept-encoding", "gzip")], None);
        assert_eq!(zipped.header("content-encoding"), Some("gzip"));
        let zipped_bytes = received() - plain_bytes;
        assert_eq!(zipped_bytes, zipped.body.len() as f64);
        assert!(zipped_bytes * 5.0 < plain_bytes, "{resource}: gzip saves");
        figures.push(format!(
            "{resource}: {plain_bytes} bytes plain, {zipped_bytes} gzip ({:.1}x)",
            plain_bytes / zipped_bytes
        ));
    }
    eprintln!("link bytes of a 1,000-object list: {}", figures.join("; "));
}
