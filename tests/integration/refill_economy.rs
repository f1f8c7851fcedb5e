//! Issue 34, item 2: no second fetch under load. A client listing a collection back to back
//! through an edge hub whose cache writer is slower than the lists costs the cloud one list
//! per client list, over the connections the hub already has, and once the load stops the
//! cache holds the whole list as the client last saw it.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

const PODS: usize = 400;
const LIST: &str = "/api/v1/namespaces/eco-0/pods";

/// A request the hub's refill thread made.
fn refill(q: &crate::support::RecordedRequest) -> bool {
    q.path == LIST && q.user_agent.ends_with("/tinyhub-refill")
}

/// One keep-alive client, as kubelet or wrk: lists `url` and reads the whole answer.
fn lister(url: String) -> impl Fn() -> usize {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    move || {
        let answer = agent
            .get(&url)
            .header("user-agent", KUBELET)
            .call()
            .expect("list through the hub");
        assert_eq!(answer.status().as_u16(), 200);
        let mut body = Vec::new();
        answer
            .into_body()
            .into_reader()
            .read_to_end(&mut body)
            .expect("the list's body");
        body.len()
    }
}

#[test]
fn a_client_listing_faster_than_the_writer_costs_the_cloud_one_list_each() {
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    cloud.populate_pods(&PodFill {
        count: PODS,
        nodes: 1,
        namespaces: 1,
        body_bytes: 1_000,
        prefix: "eco".into(),
    });
    let dir = TempDir::new("refill-economy");
    // Test-only flag: the writer sleeps 10 ms per message (32 KiB), about 3 MB/s: a list of
    // ~0.5 MB takes it ~5 times as long as the client takes to read it, so the queue fills
    // and the hub drops cache sessions of the client's lists.
    let spec =
        HubSpec::for_cloud(&cloud, dir.path()).with(&["--test-only-cache-writer-delay-ms=10"]);
    let hub = Hub::start(&spec);
    let url = format!("{}{LIST}", hub.url());
    let list = lister(url.clone());
    // Warm: the hub's connections to the cloud made, the collection cached once.
    list();
    hub.wait_cache_quiet();
    cloud.reset_requests();
    let accepted = cloud.accepted_connections();
    let abandoned = hub
        .metric("tinyhub_cache_sessions_abandoned_total")
        .unwrap_or(0.0);

    // As fast as it can for a few seconds (and at least enough lists that one list more
    // would be under 5 %); halfway, a pod changes, which the cache must end up holding.
    let started = Instant::now();
    let mut lists = 0u64;
    let mut changed = false;
    while lists < 21 || started.elapsed() < Duration::from_secs(3) {
        list();
        lists += 1;
        if !changed && started.elapsed() >= Duration::from_millis(1_500) {
            cloud.patch(
                "pods",
                "eco-0",
                "eco-000007",
                json!({"metadata": {"labels": {"seen": "late"}}}),
            );
            changed = true;
        }
    }
    let during = cloud.count(|q| q.path == LIST) as u64;
    let refills_during = cloud.count(refill);
    assert!(
        hub.metric("tinyhub_cache_sessions_abandoned_total")
            .unwrap_or(0.0)
            > abandoned,
        "the writer never fell behind: the test proves nothing"
    );
    assert_eq!(
        (during, refills_during),
        (lists, 0),
        "while the client keeps listing, the cloud serves its lists only (no refill)"
    );

    // The load stops: the writer drains, and the cache holds the list as last listed.
    hub.wait_cache_quiet();
    let served = cloud.count(|q| q.path == LIST) as u64;
    let per_list = served as f64 / lists as f64;
    let new_connections = cloud.accepted_connections() - accepted;
    eprintln!(
        "{lists} client lists in {:?}: the cloud served {served} ({} refills), {per_list:.3} \
         per client list, over {new_connections} new connections",
        started.elapsed(),
        cloud.count(refill)
    );
    assert!(
        per_list <= 1.05,
        "{per_list:.3} cloud lists per client list"
    );
    assert_eq!(
        new_connections, 0,
        "the lists and their refill go over the connections the hub already had"
    );

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    let offline = get(&url, KUBELET);
    assert_eq!(offline.status, 200, "{}", offline.text());
    let items = offline.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(items.len(), PODS, "the cache holds the whole list");
    let late = items
        .iter()
        .find(|p| p["metadata"]["name"] == "eco-000007")
        .expect("the changed pod is cached");
    assert_eq!(
        late["metadata"]["labels"]["seen"], "late",
        "the cache holds the list as the client last saw it"
    );
}

#[test]
fn a_list_larger_than_the_writers_queue_is_refilled_once_the_client_stops_over_a_pooled_connection()
{
    let cloud = Cloud::start();
    cloud.set_gzip_threshold(usize::MAX);
    // About 12 MB: every client session overflows the writer's 8 MiB queue and is dropped.
    cloud.populate_pods(&PodFill {
        count: 1_200,
        nodes: 1,
        namespaces: 1,
        body_bytes: 10_000,
        prefix: "big".into(),
    });
    let path = "/api/v1/namespaces/big-0/pods";
    let dir = TempDir::new("refill-economy-big");
    let spec =
        HubSpec::for_cloud(&cloud, dir.path()).with(&["--test-only-cache-writer-delay-ms=10"]);
    let hub = Hub::start(&spec);
    let list = lister(format!("{}{path}", hub.url()));
    // Warm: the hub's connections made; the first list's refill done.
    list();
    hub.wait_cache_quiet();
    cloud.reset_requests();
    let accepted = cloud.accepted_connections();
    let refilled = hub.metric("tinyhub_cache_refills_total").unwrap_or(0.0);

    let started = Instant::now();
    let mut lists = 0usize;
    while lists < 4 || started.elapsed() < Duration::from_secs(2) {
        list();
        lists += 1;
    }
    let is_refill = |q: &crate::support::RecordedRequest| {
        q.path == path && q.user_agent.ends_with("/tinyhub-refill")
    };
    assert_eq!(
        (cloud.count(|q| q.path == path), cloud.count(is_refill)),
        (lists, 0),
        "while the client keeps listing, the cloud serves its lists only"
    );
    // Stopped: the one list its sessions never brought is fetched once, when the writer is
    // quiet, on a connection the hub already has.
    hub.wait_cache_quiet();
    assert_eq!(cloud.count(is_refill), 1, "{}", hub.logs());
    assert_eq!(
        hub.metric("tinyhub_cache_refills_total").unwrap_or(0.0),
        refilled + 1.0
    );
    assert_eq!(
        cloud.accepted_connections() - accepted,
        0,
        "the refill took a pooled connection"
    );
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    let offline = get(&format!("{}{path}", hub.url()), KUBELET);
    assert_eq!(offline.status, 200, "{}", offline.text());
    assert_eq!(
        offline.json()["items"].as_array().map(Vec::len),
        Some(1_200),
        "the cache holds the whole list"
    );
}
