//! Issue 16 item 1, node-level traffic reuse (YurtHub's `pkg/yurthub/multiplexer`): in edge mode
//! every list and watch of a pool-scope resource from a local client is served from one shared
//! watch cache per resource, which the hub fills with one list and one watch of its own
//! (User-Agent `multiplexer-proxy-<node>`); the cloud never sees the clients' requests.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::pool::{keys_in_order as keys, list_when_warm_within, service_in as service};
use crate::support::{Cloud, RecordedRequest};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
const COREDNS: &str = "coredns/1.11.1 (linux/arm)";
const KUBELET: &str = "kubelet/v1.30.0 (linux/arm) kubernetes/abcdef0";
const MULTIPLEXER: &str = "multiplexer-proxy-edge-1";
const SECURE_PORT: u16 = 10268;

fn start_hub(cloud: &Cloud, tag: &str) -> (TempDir, Hub) {
    let dir = TempDir::new(tag);
    let spec = HubSpec::for_cloud(cloud, dir.path()).with(&[
        "--bind-proxy-address=127.0.0.1",
        &format!("--proxy-secure-port={SECURE_PORT}"),
    ]);
    (dir, Hub::start(&spec))
}

/// A list through the hub as `ua`, waiting out the 429s of a warming cache (20 s).
fn list_when_warm(hub: &Hub, path: &str, ua: &str) -> Value {
    list_when_warm_within(hub, path, ua, Duration::from_secs(20))
}

/// A watch of `url` as `ua`, asserted to be answered 200: its events.
fn watch(url: &str, ua: &str) -> Events {
    let (status, body) = stream(url, ua);
    assert_eq!(status, 200);
    Events::new(body)
}

fn is_services(r: &RecordedRequest) -> bool {
    r.path == "/api/v1/services"
}

fn is_watch(r: &RecordedRequest) -> bool {
    r.query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
}

fn items(list: &Value) -> &[Value] {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
}

#[test]
fn local_components_share_one_list_and_one_watch_of_services() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    cloud.create("services", service("shop", "db", "10.96.0.11"));
    let (_dir, hub) = start_hub(&cloud, "pool-local-share");

    let direct = cloud.list("services", None);
    let mut lists = Vec::new();
    for ua in [KUBE_PROXY, COREDNS] {
        let list = list_when_warm(&hub, "/api/v1/services", ua);
        assert_eq!(list["kind"], "ServiceList", "{list}");
        assert_eq!(keys(items(&list)), keys(&direct), "{ua}");
        lists.push(list);
    }
    // A namespace and a label selector are served from the same cache.
    let shop = list_when_warm(
        &hub,
        "/api/v1/namespaces/shop/services?labelSelector=app%3Dweb",
        KUBE_PROXY,
    );
    assert_eq!(
        keys(items(&shop))
            .into_iter()
            .map(|k| k.0)
            .collect::<Vec<_>>(),
        ["shop/web"]
    );

    // Both watch from their list's resourceVersion; a new Service reaches both.
    let mut watches = Vec::new();
    for (ua, list) in [KUBE_PROXY, COREDNS].into_iter().zip(&lists) {
        let rv = list["metadata"]["resourceVersion"].as_str().expect("rv");
        let url = format!(
            "{}/api/v1/services?watch=true&resourceVersion={rv}&timeoutSeconds=30",
            hub.url()
        );
        let (status, body) = stream(&url, ua);
        assert_eq!(status, 200, "{ua}");
        watches.push(Events::new(body));
    }
    let created = cloud.create("services", service("shop", "cache", "10.96.0.12"));
    for events in &mut watches {
        let event = events.next_event().expect("an event");
        assert_eq!(event["type"], "ADDED", "{event}");
        assert_eq!(event["object"]["metadata"]["name"], "cache", "{event}");
        assert_eq!(
            event["object"]["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
        assert_eq!(event["object"]["kind"], "Service", "{event}");
    }

    // The cloud saw one list and one watch of Services and of EndpointSlices from the hub,
    // whatever the User-Agent (servicetopology's index reads the Services cache), all from
    // its multiplexer, and nothing of Services from the components.
    let requests = cloud.requests();
    for (what, is) in [
        ("services", is_services as fn(&RecordedRequest) -> bool),
        ("endpointslices", is_slices),
    ] {
        for watch in [false, true] {
            let seen: Vec<&RecordedRequest> = requests
                .iter()
                .filter(|r| is(r) && is_watch(r) == watch)
                .collect();
            assert_eq!(seen.len(), 1, "{what} watch={watch}: {seen:#?}");
            assert_eq!(seen[0].user_agent, MULTIPLEXER, "{what}");
        }
    }
    let by_components = requests
        .iter()
        .filter(|r| {
            r.path.contains("services") && (r.user_agent == KUBE_PROXY || r.user_agent == COREDNS)
        })
        .count();
    assert_eq!(by_components, 0, "{requests:#?}");
    let watch = requests
        .iter()
        .find(|r| is_services(r) && r.user_agent == MULTIPLEXER && is_watch(r))
        .expect("the multiplexer's watch");
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
    let seconds: u64 = watch
        .query
        .split('&')
        .find_map(|p| p.strip_prefix("timeoutSeconds="))
        .and_then(|s| s.parse().ok())
        .expect("timeoutSeconds");
    assert!((300..=600).contains(&seconds), "{seconds}");
}

#[test]
fn filters_apply_per_client_and_leave_the_shared_objects_unchanged() {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub(&cloud, "pool-local-filters");
    let kubernetes = |ua: &str| {
        let list = list_when_warm(&hub, "/api/v1/services", ua);
        items(&list)
            .iter()
            .find(|s| {
                s["metadata"]["namespace"] == "default" && s["metadata"]["name"] == "kubernetes"
            })
            .cloned()
            .unwrap_or_else(|| panic!("no default/kubernetes: {list}"))
    };
    // masterservice points kubelet at the hub; kube-proxy gets the object as stored, also
    // after kubelet's filtered answer (the shared object was not changed).
    assert_eq!(kubernetes(KUBELET)["spec"]["clusterIP"], "127.0.0.1");
    assert_eq!(kubernetes(KUBE_PROXY)["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(kubernetes(KUBELET)["spec"]["clusterIP"], "127.0.0.1");
    assert_eq!(
        cloud.count(|r| is_services(r) && r.user_agent.starts_with("kube")),
        0
    );
}

#[test]
fn a_warming_cache_answers_429_and_serves_once_listed() {
    let cloud = Cloud::start();
    // The hub's lists of Services fail until this is lifted; the cloud stays healthy.
    cloud.misanswer(
        "/api/v1/services",
        1_000_000,
        500,
        br#"{"kind":"Status","code":500}"#,
    );
    let (_dir, hub) = start_hub(&cloud, "pool-local-warming");
    assert!(
        cloud
            .wait_for_request(
                |r| is_services(r) && r.user_agent == MULTIPLEXER,
                Duration::from_secs(10)
            )
            .is_some(),
        "the multiplexer lists Services at start"
    );
    let reply = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(
        reply.json()["message"],
        "cacher for gvr(/v1, Resource=services) is initializing, please try again later."
    );
    let watch = get(
        &format!("{}/api/v1/services?watch=true&timeoutSeconds=5", hub.url()),
        COREDNS,
    );
    assert_eq!(watch.status, 429, "{}", watch.text());

    cloud.misanswer("/api/v1/services", 0, 500, b"");
    let list = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert_eq!(keys(items(&list)), keys(&cloud.list("services", None)));
}

#[test]
fn the_cloud_gone_before_the_first_list_falls_back_to_the_disk_cache() {
    let cloud = Cloud::start();
    cloud.stop();
    let (_dir, hub) = start_hub(&cloud, "pool-local-offline");
    // Never filled, the cloud unreachable: the ordinary offline path answers (nothing
    // cached for this component: 404 from the disk cache, not a 429 that never ends).
    let reply = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_ne!(reply.status, 429, "{}", reply.text());
    assert!(
        hub.wait_log_line(
            |l| l.contains("resource=\"services\"") && l.contains("cache=offline"),
            Duration::from_secs(5)
        ),
        "{}",
        hub.logs()
    );
}

#[test]
fn the_feeder_lists_again_after_an_error_event_and_local_watches_carry_on() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "doomed", "10.96.0.19"));
    // Until told otherwise, the feeder's watches of Services end at once with no event (it
    // resumes them every retry pause): what changes meanwhile only a relist can find.
    cloud.misanswer_watch("/api/v1/services", 1_000_000, &[]);
    let (_dir, hub) = start_hub(&cloud, "pool-local-relist");
    let lists = |cloud: &Cloud| {
        cloud.count(|r| is_services(r) && r.user_agent == MULTIPLEXER && !is_watch(r))
    };
    // A local watch opened before the relist, from the first list's resourceVersion.
    let list = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert_eq!(lists(&cloud), 1, "{}", hub.logs());
    let rv = list["metadata"]["resourceVersion"].as_str().expect("rv");
    let url = format!(
        "{}/api/v1/services?watch=true&resourceVersion={rv}&timeoutSeconds=60",
        hub.url()
    );
    let mut events = watch(&url, COREDNS);
    // Changes the feeder does not see by watch: only the relist finds them.
    cloud.create("services", service("shop", "late", "10.96.0.20"));
    cloud.delete("services", "shop", "doomed");
    // The next watch ends with the 410 an apiserver sends for a resourceVersion it no
    // longer has; the one after is the real watch.
    let expired: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}
"#;
    cloud.misanswer_watch("/api/v1/services", 1, &[expired]);
    assert!(
        eventually(Duration::from_secs(30), || lists(&cloud) >= 2),
        "listed again: {}",
        hub.logs()
    );
    assert!(
        hub.wait_log("listing again", Duration::from_secs(1)),
        "{}",
        hub.logs()
    );
    // The relist's diff reaches the open watch, with no 410.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = events.next_event().expect("an event");
        assert_ne!(event["type"], "ERROR", "{event}");
        let name = event["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        seen.push((event["type"].as_str().unwrap_or("").to_owned(), name));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ("ADDED".to_owned(), "late".to_owned()),
            ("DELETED".to_owned(), "doomed".to_owned())
        ]
    );
    // Once the feeder watches again, new objects reach the same local watch.
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(15)));
    cloud.create("services", service("shop", "later", "10.96.0.21"));
    let event = events.next_event().expect("an event");
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("later")),
        "{event}"
    );
    assert_eq!(lists(&cloud), 2, "one list per ERROR, no more");
}

#[test]
fn an_unreadable_services_list_leaves_the_cache_warming_and_an_unreadable_item_is_left_out() {
    let cloud = Cloud::start();
    // A 200 whose body is not a list: the feeder cannot fill the cache, and clients are not
    // served garbage from it.
    cloud.misanswer(
        "/api/v1/services",
        1_000_000,
        200,
        b"{\"kind\":\"ServiceList\",\"items\":[{\"meta",
    );
    let (_dir, hub) = start_hub(&cloud, "pool-local-garbage-list");
    assert!(
        hub.wait_log(
            "list of /api/v1/services for the pool cache failed",
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    let reply = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_eq!(reply.status, 429, "{}", reply.text());
    // A list with one item the cache cannot index (no name): left out and counted, the
    // rest served.
    let rv = cloud.resource_version();
    let list = format!(
        r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{{"metadata":{{"namespace":"shop","resourceVersion":"{rv}"}}}},{}]}}"#,
        json!({"metadata": {"name": "web", "namespace": "shop", "resourceVersion": rv.to_string()},
               "spec": {"clusterIP": "10.96.0.10", "type": "ClusterIP"}})
    );
    cloud.misanswer("/api/v1/services", 1, 200, list.as_bytes());
    let served = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert_eq!(
        keys(items(&served)),
        [("shop/web".to_owned(), rv.to_string())]
    );
    assert_eq!(
        hub.metric(&cache_series("skipped_objects_total", "services")),
        Some(1.0)
    );
}

#[test]
fn garbage_in_the_feeders_watch_lists_again_and_the_cache_keeps_serving() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    cloud.misanswer_watch(
        "/api/v1/services",
        1,
        &[b"{\"type\":\"ADDED\",\"object\":[1,2}\n"],
    );
    let (_dir, hub) = start_hub(&cloud, "pool-local-garbage-watch");
    let lists = || cloud.count(|r| is_services(r) && r.user_agent == MULTIPLEXER && !is_watch(r));
    assert!(
        eventually(Duration::from_secs(30), || lists() >= 2),
        "listed again: {}",
        hub.logs()
    );
    let served = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert_eq!(keys(items(&served)), keys(&cloud.list("services", None)));
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(15)));
    assert_eq!(lists(), 2, "{}", hub.logs());
}

#[test]
fn what_a_cache_agent_got_from_the_shared_cache_is_answered_offline_after_a_restart() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    let (_dir, hub) = start_hub(&cloud, "pool-local-restart");
    let online = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert!(
        hub.wait_cached(
            &[
                "kube-proxy/services.v1.core/shop/web",
                "kube-proxy/services.v1.core/default/kubernetes"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    // The scope it listed whole is on disk (`.synced`) before the kill, as the files are.
    let synced = hub.spec.cache_dir.join(".synced");
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(&synced).is_ok_and(|s| s.contains("services.v1.core"))
    }));
    cloud.stop();
    let hub = hub.restart();
    let offline = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_eq!(offline.status, 200, "{}", offline.text());
    let names = |list: &Value| {
        let mut names: Vec<String> = keys(items(list)).into_iter().map(|k| k.0).collect();
        names.sort();
        names
    };
    assert_eq!(names(&offline.json()), names(&online));
}

#[test]
fn a_local_watch_ends_when_its_client_hangs_up_and_at_its_timeout() {
    let cloud = Cloud::start();
    let (_dir, hub) = start_hub(&cloud, "pool-local-hangup");
    list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    // Served from the node's watch cache: counted apart, as YurtHub counts its multiplexer's.
    let series = "node_yurthub_aggregated_in_flight_requests_collector{verb=\"watch\",resource=\"services\",subresources=\"\",client=\"kube-proxy\"}";
    let url = format!(
        "{}/api/v1/services?watch=true&timeoutSeconds=300",
        hub.url()
    );
    let mut events = watch(&url, KUBE_PROXY);
    // From "now": the current objects as ADDED first.
    let first = events.next_event().expect("an ADDED event");
    assert_eq!(first["type"], "ADDED", "{first}");
    assert!(
        hub.wait_metric(series, 1.0, Duration::from_secs(5)),
        "{}",
        hub.logs()
    );
    drop(events);
    assert!(
        hub.wait_metric(series, 0.0, Duration::from_secs(5)),
        "the watch outlived its client: {}",
        hub.logs()
    );

    // timeoutSeconds ends it cleanly: the stream ends, no error.
    let url = format!("{}/api/v1/services?watch=true&timeoutSeconds=1", hub.url());
    let started = std::time::Instant::now();
    let mut events = watch(&url, COREDNS);
    while events.next_event().is_some() {}
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn offline_the_filled_cache_keeps_serving_and_the_feeder_resumes_its_watch_after() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    let (_dir, hub) = start_hub(&cloud, "pool-local-resume");
    // An application of the node's, which is no cache agent: nothing of its is on disk.
    let app = "edge-app/1.0";
    let online = list_when_warm(&hub, "/api/v1/services", app);
    assert!(cloud.wait_for_watchers("services", 1, Duration::from_secs(10)));
    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    // Only the shared cache can answer it now.
    let offline = get(&format!("{}/api/v1/services", hub.url()), app);
    assert_eq!(offline.status, 200, "{}", offline.text());
    assert_eq!(keys(items(&offline.json())), keys(items(&online)));

    cloud.restart();
    assert!(
        hub.wait_healthy(&cloud, true, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    let rv = online["metadata"]["resourceVersion"].as_str().expect("rv");
    let url = format!(
        "{}/api/v1/services?watch=true&resourceVersion={rv}&timeoutSeconds=30",
        hub.url()
    );
    let mut events = watch(&url, app);
    let multiplexer_watches =
        || cloud.count(|r| is_services(r) && r.user_agent == MULTIPLEXER && is_watch(r));
    assert!(
        eventually(Duration::from_secs(15), || multiplexer_watches() >= 2),
        "the feeder watches again: {}",
        hub.logs()
    );
    cloud.create("services", service("shop", "after", "10.96.0.21"));
    let event = events.next_event().expect("an event");
    assert_eq!(event["object"]["metadata"]["name"], "after", "{event}");
    // Resumed from its resourceVersion: no second list.
    assert_eq!(
        cloud.count(|r| is_services(r) && r.user_agent == MULTIPLEXER && !is_watch(r)),
        1
    );
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

fn is_slices(r: &RecordedRequest) -> bool {
    r.path == SLICES
}

/// `tinyhub_pool_cache_<name>{resource="<resource>"}`.
fn cache_series(name: &str, resource: &str) -> String {
    format!("tinyhub_pool_cache_{name}{{resource=\"{resource}\"}}")
}

#[test]
fn a_watch_cut_inside_an_event_is_resumed_not_relisted() {
    let cloud = Cloud::start();
    // The feeder's first watch of EndpointSlices ends inside an event, as a proxy's clean
    // EOF or a cut line leaves it.
    cloud.misanswer_watch(
        SLICES,
        1,
        &[br#"{"type":"ADDED","object":{"kind":"Endpoint"#],
    );
    let (_dir, hub) = start_hub(&cloud, "pool-local-cut");
    let watches = || cloud.count(|r| is_slices(r) && r.user_agent == MULTIPLEXER && is_watch(r));
    assert!(
        eventually(Duration::from_secs(15), || watches() >= 2),
        "watched again: {}",
        hub.logs()
    );
    assert_eq!(
        cloud.count(|r| is_slices(r) && r.user_agent == MULTIPLEXER && !is_watch(r)),
        1,
        "resumed from its resourceVersion, no second list: {}",
        hub.logs()
    );
    assert!(!hub.logs().contains("listing again"), "{}", hub.logs());
}

#[test]
fn an_object_the_cache_cannot_read_is_counted_and_skipped_without_a_relist() {
    let cloud = Cloud::start();
    let rv = cloud.resource_version();
    // A MODIFIED whose object has no name: the cache cannot index it.
    let nameless = format!(
        r#"{{"type":"MODIFIED","object":{{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{{"namespace":"shop","resourceVersion":"{rv}"}},"endpoints":[]}}}}
"#
    );
    cloud.misanswer_watch(SLICES, 3, &[nameless.as_bytes()]);
    let (_dir, hub) = start_hub(&cloud, "pool-local-unreadable");
    let watches = || cloud.count(|r| is_slices(r) && r.user_agent == MULTIPLEXER && is_watch(r));
    assert!(
        eventually(Duration::from_secs(20), || watches() >= 4),
        "every misanswered watch seen: {}",
        hub.logs()
    );
    assert!(
        hub.wait_metric(
            &cache_series("skipped_objects_total", "endpointslices"),
            3.0,
            Duration::from_secs(5)
        ),
        "{}",
        hub.logs()
    );
    assert_eq!(
        cloud.count(|r| is_slices(r) && r.user_agent == MULTIPLEXER && !is_watch(r)),
        1,
        "no relist per unreadable update: {}",
        hub.logs()
    );
}

/// Issue 16 item 4: the feeder asks gzip for its lists. The figures of a 1,000-EndpointSlice
/// list on the link, plain (a cloud that never compresses) and gzip, from the hub's own link
/// series of its multiplexer.
#[test]
fn the_feeder_lists_with_gzip_and_the_link_counts_the_compressed_bytes() {
    let mut figures = Vec::new();
    for gzip in [false, true] {
        let cloud = Cloud::start();
        cloud.populate_endpointslices(1000, 10);
        if !gzip {
            cloud.set_gzip_threshold(usize::MAX);
        }
        let (_dir, hub) = start_hub(&cloud, "pool-local-gzip");
        assert!(
            hub.wait_metric(
                &cache_series("objects", "endpointslices"),
                1000.0,
                Duration::from_secs(20)
            ),
            "{}",
            hub.logs()
        );
        let list = cloud
            .requests()
            .into_iter()
            .find(|r| is_slices(r) && r.user_agent == MULTIPLEXER && !is_watch(r))
            .expect("the feeder's list");
        assert!(list.accept_encoding.contains("gzip"), "{list:?}");
        let series = |name: &str| {
            hub.metric(&format!(
                "tinyhub_cloud_{name}_total{{server=\"{}\",component=\"{}\",resource=\"endpointslices\"}}",
                cloud.url(),
                MULTIPLEXER
            ))
            .unwrap_or(0.0)
        };
        let (received, zipped) = (series("received_bytes"), series("received_gzip_bytes"));
        if gzip {
            assert!(zipped > 0.0 && zipped <= received, "{zipped} of {received}");
        } else {
            assert_eq!(zipped, 0.0);
        }
        // The cache holds every slice either way; the pool cache's own figures are exported.
        let bytes = hub
            .metric(&cache_series("bytes", "endpointslices"))
            .unwrap_or(0.0);
        assert!(bytes > 1000.0 * 200.0, "{bytes}");
        figures.push(received);
    }
    assert!(
        figures[1] * 5.0 < figures[0],
        "gzip saves the link: {figures:?}"
    );
    eprintln!(
        "feeder's list of 1,000 EndpointSlices on the link: {} bytes plain, {} gzip ({:.1}x)",
        figures[0],
        figures[1],
        figures[0] / figures[1]
    );
}

/// The watch cache's real cost (review 16): the hub's own heap (`tinyhub_heap_bytes`, the
/// counting allocator) with 5,000 EndpointSlices cached, less that of a hub with none, per
/// object, against the cache's own estimate (`tinyhub_pool_cache_bytes`).
#[test]
fn the_heap_holds_5000_endpointslices_at_the_bytes_the_cache_reports() {
    const N: usize = 5000;
    let mut heaps = Vec::new();
    let mut reported = 0.0;
    for count in [0, N] {
        let cloud = Cloud::start();
        if count > 0 {
            cloud.populate_endpointslices(count, 50);
        }
        let (_dir, hub) = start_hub(&cloud, "pool-local-heap");
        assert!(
            hub.wait_metric(
                &cache_series("objects", "endpointslices"),
                count as f64,
                Duration::from_secs(30)
            ),
            "{}",
            hub.logs()
        );
        assert!(cloud.wait_for_watchers("endpointslices", 1, Duration::from_secs(10)));
        // Settled: the list's buffers are given back; the least of a few scrapes.
        std::thread::sleep(Duration::from_millis(500));
        let heap = (0..5)
            .filter_map(|_| {
                std::thread::sleep(Duration::from_millis(100));
                hub.metric("tinyhub_heap_bytes")
            })
            .fold(f64::MAX, f64::min);
        heaps.push(heap);
        if count > 0 {
            reported = hub
                .metric(&cache_series("bytes", "endpointslices"))
                .expect("the cache's bytes");
        }
    }
    let delta = heaps[1] - heaps[0];
    let per_object = delta / N as f64;
    eprintln!(
        "heap with {N} EndpointSlices cached: +{delta} bytes, {per_object:.0} bytes per object \
         ({} bytes per object by the cache's own count; {}-bit)",
        reported / N as f64,
        usize::BITS
    );
    // The cache's own count is within 15 % of what the allocator saw.
    assert!(
        (delta - reported).abs() < 0.15 * reported,
        "heap delta {delta}, cache reports {reported}"
    );
}

#[test]
fn a_cache_whose_feed_fails_while_the_cloud_answers_is_forwarded_until_it_recovers() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    // The feeder's watches end at once, empty: it resumes them every retry pause.
    cloud.misanswer_watch("/api/v1/services", 1_000_000, &[]);
    let (_dir, hub) = start_hub(&cloud, "pool-local-frozen");
    let list = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    let rv = list["metadata"]["resourceVersion"].as_str().expect("rv");
    let url = format!(
        "{}/api/v1/services?watch=true&resourceVersion={rv}&timeoutSeconds=60",
        hub.url()
    );
    let mut events = watch(&url, COREDNS);
    // Now the cloud, healthy, refuses the feeder: its next watch ends with a 410 and every
    // list after it is a 500.
    let expired: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}
"#;
    cloud.misanswer(
        "/api/v1/services",
        1_000_000,
        500,
        br#"{"kind":"Status","code":500}"#,
    );
    cloud.misanswer_watch("/api/v1/services", 1, &[expired]);
    // The local watch ends with a 410 once the feed counts as failing...
    let event = events.next_event().expect("an ERROR event");
    assert_eq!(
        (event["type"].as_str(), event["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410)),
        "{event}"
    );
    // ... and the clients' requests go to the cloud, not to the frozen cache.
    let forwarded = || cloud.count(|r| is_services(r) && r.user_agent == KUBE_PROXY);
    let reply = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert_eq!(forwarded(), 1);
    // The cloud answers the feeder again: once it has listed, the cache serves again.
    cloud.misanswer("/api/v1/services", 0, 500, b"");
    assert!(
        eventually(Duration::from_secs(15), || {
            let before = forwarded();
            let reply = get(&format!("{}/api/v1/services", hub.url()), KUBE_PROXY);
            reply.status == 200 && forwarded() == before
        }),
        "served locally again: {}",
        hub.logs()
    );
    let served = list_when_warm(&hub, "/api/v1/services", KUBE_PROXY);
    assert_eq!(keys(items(&served)), keys(&cloud.list("services", None)));
}

#[test]
fn a_list_larger_than_the_cache_takes_is_not_cached_and_its_kind_is_forwarded() {
    let cloud = Cloud::start();
    // About 17 MB of EndpointSlices, past the cache's 16 MiB.
    cloud.populate_endpointslices(18_000, 50);
    let (_dir, hub) = start_hub(&cloud, "pool-local-too-large");
    assert!(
        hub.wait_log("larger than the", Duration::from_secs(60)),
        "{}",
        hub.logs()
    );
    let reply = get(&format!("{}{SLICES}?limit=10", hub.url()), KUBE_PROXY);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        cloud.count(|r| is_slices(r) && r.user_agent == KUBE_PROXY),
        1,
        "forwarded"
    );
    assert_eq!(
        hub.metric(&cache_series("objects", "endpointslices")),
        Some(0.0)
    );
    // Not listed again at every retry pause.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        cloud.count(|r| is_slices(r) && r.user_agent == MULTIPLEXER && !is_watch(r)),
        1
    );
}

#[test]
fn a_watch_list_gets_the_state_and_the_initial_events_end_bookmark() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    let (_dir, hub) = start_hub(&cloud, "pool-local-watch-list");
    let list = list_when_warm(&hub, "/api/v1/namespaces/shop/services", KUBE_PROXY);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    // client-go's WatchListClient: no list, a watch that starts with the state.
    let url = format!(
        "{}/api/v1/namespaces/shop/services?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=30",
        hub.url()
    );
    let mut events = watch(&url, KUBE_PROXY);
    let first = events.next_event().expect("ADDED");
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("web")),
        "{first}"
    );
    let end = events.next_event().expect("the end bookmark");
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true",
        "{end}"
    );
    assert_eq!(end["object"]["metadata"]["resourceVersion"], rv.as_str());
    cloud.create("services", service("shop", "next", "10.96.0.11"));
    let next = events.next_event().expect("a live event");
    assert_eq!(next["object"]["metadata"]["name"], "next", "{next}");
    // Without the options the apiserver requires: its 422.
    let reply = get(
        &format!(
            "{}/api/v1/services?watch=1&sendInitialEvents=true",
            hub.url()
        ),
        KUBE_PROXY,
    );
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert_eq!(reply.json()["reason"], "Invalid");
}
