//! Issue 32 item 2 (link totals that survive restarts): `GET /v1/link` and
//! `tinyhub_link_*_total{component,resource,verb}` count what the cloud link carried per
//! component, resource and verb, agree with `tinyhub_cloud_*`, and carry on across a SIGTERM
//! and a `kill -9` from `<root-dir>/link-totals.json`; an unreadable file is kept as `.bad`
//! and counting starts afresh; the file is written at most once per interval.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::{list_when_warm, service_in as service};
use crate::support::{parse_rfc3339, unix_now};

/// A client no filter and no cache applies to: the hub relays the cloud's body untouched.
const CURL: &str = "curl/8.5.0";
const KUBECTL: &str = "kubectl/v1.30.0 (linux/amd64) kubernetes/7c48c2b";
const COREDNS: &str = "coredns/1.11.1 (linux/arm)";

/// The file is written every second (when it changed) in these tests.
const FAST: &str = "--test-only-link-write-seconds=1";

fn start(cloud: &Cloud, dir: &TempDir) -> Hub {
    Hub::start(&HubSpec::for_cloud(cloud, dir.path()).with(&[FAST]))
}

fn totals_file(hub: &Hub) -> PathBuf {
    hub.spec.root_dir.join("link-totals.json")
}

fn link(hub: &Hub) -> Value {
    let r = get(&format!("{}/v1/link", hub.serve_url()), "test");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

/// The row (component, resource, verb) of a period's `by` (an empty object when absent).
fn row<'v>(period: &'v Value, component: &str, resource: &str, verb: &str) -> &'v Value {
    static NONE: Value = Value::Null;
    period["by"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {period}"))
        .iter()
        .find(|r| r["component"] == component && r["resource"] == resource && r["verb"] == verb)
        .unwrap_or(&NONE)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The requests of `curl`'s configmap lists in the file (the lifetime of its key row: `[c,
/// r, v, lastSeen, lifetime, month, today]`), 0 when none.
fn written_lists(path: &Path) -> u64 {
    let Some(file) = read_json(path) else {
        return 0;
    };
    file["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r[0] == "curl" && r[1] == "configmaps" && r[2] == "list")
        .map_or(0, |r| n(&r[4][0]))
}

/// Today's UTC day number.
fn utc_day() -> u64 {
    unix_now() / 86_400
}

const CURL_LISTS: &str =
    "tinyhub_link_requests_total{component=\"curl\",resource=\"configmaps\",verb=\"list\"}";

fn list_configmaps(hub: &Hub) -> Vec<u8> {
    let r = get(
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        CURL,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.body
}

fn cloud_with_configmaps(count: usize) -> Cloud {
    let cloud = Cloud::start();
    for i in 0..count {
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": format!("pad-{i}"), "namespace": "default"},
                   "data": {"pad": "x".repeat(200)}}),
        );
    }
    cloud
}

#[test]
fn the_totals_agree_with_the_cloud_series_by_verb_and_count_what_the_pool_served() {
    let cloud = cloud_with_configmaps(20);
    cloud.create("services", service("kube-system", "kube-dns", "10.96.0.10"));
    let dir = TempDir::new("link-totals-agree");
    let hub = start(&cloud, &dir);
    let day = utc_day();

    let list = list_configmaps(&hub);
    let one = get(
        &format!("{}/api/v1/namespaces/default/configmaps/pad-3", hub.url()),
        CURL,
    );
    assert_eq!(one.status, 200);
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "link-cm", "namespace": "default"}, "data": {"k": "v"}}))
    .unwrap();
    let created = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        KUBECTL,
        &[("content-type", "application/json")],
        Some(&body),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    // Served from the hub's pool cache of Services: the cloud link did not carry it.
    list_when_warm(&hub, "/api/v1/services", COREDNS);

    let totals = link(&hub);
    // Over UTC midnight, today and the month began in between: the lifetime still agrees.
    let periods: &[&str] = if utc_day() == day {
        &["lifetime", "today", "month"]
    } else {
        &["lifetime"]
    };
    let cloud_series = |name: &str, component: &str| {
        hub.metric(&format!(
            "tinyhub_cloud_{name}_total{{server=\"{}\",component=\"{component}\",resource=\"configmaps\"}}",
            cloud.url()
        ))
        .unwrap_or(0.0) as u64
    };
    for &period in periods {
        let p = &totals[period];
        let (l, g) = (
            row(p, "curl", "configmaps", "list"),
            row(p, "curl", "configmaps", "get"),
        );
        assert_eq!(n(&l["requests"]), 1, "{period}: {p}");
        assert_eq!(n(&l["downBytes"]), list.len() as u64, "{period}");
        assert_eq!(n(&g["requests"]), 1, "{period}");
        assert_eq!(n(&g["downBytes"]), one.body.len() as u64, "{period}");
        // The verbs together are the cloud series of (curl, configmaps).
        assert_eq!(
            n(&l["downBytes"]) + n(&g["downBytes"]),
            cloud_series("received_bytes", "curl"),
            "{period}"
        );
        assert_eq!(
            n(&l["requests"]) + n(&g["requests"]),
            cloud_series("requests", "curl")
        );
        let c = row(p, "kubectl", "configmaps", "create");
        assert_eq!(n(&c["requests"]), 1, "{period}");
        assert_eq!(n(&c["upBytes"]), body.len() as u64, "{period}");
        assert_eq!(n(&c["upBytes"]), cloud_series("sent_bytes", "kubectl"));
        let served = row(p, "coredns", "services", "list");
        assert!(n(&served["poolSavedBytes"]) > 0, "{period}: {p}");
        assert_eq!(n(&served["requests"]), 0, "not on the link: {served}");
    }
    assert_eq!(
        totals["lifetime"]["requests"],
        totals["lifetime"]["by"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| n(&r["requests"]))
            .sum::<u64>(),
        "the sums are the rows'"
    );
    assert!(totals["since"].as_str().unwrap().ends_with('Z'));
    let kept: Vec<&str> = totals["days"].as_array().unwrap()[0]["by"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["component"].as_str())
        .collect();
    assert!(
        kept.contains(&"curl") && kept.contains(&"kubectl"),
        "{kept:?}"
    );
    assert_eq!(hub.metric(CURL_LISTS), Some(1.0));
}

#[test]
fn after_a_sigterm_the_totals_carry_on_where_they_were() {
    let cloud = cloud_with_configmaps(5);
    let dir = TempDir::new("link-totals-sigterm");
    // The default interval (60 s): the drain is the only writer in this test.
    let mut hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    for _ in 0..3 {
        list_configmaps(&hub);
    }
    let before = link(&hub);
    let lists = row(&before["lifetime"], "curl", "configmaps", "list").clone();
    assert_eq!(n(&lists["requests"]), 3);
    assert_eq!(
        written_lists(&totals_file(&hub)),
        0,
        "no interval passed yet"
    );
    signal(hub.pid(), "TERM");
    assert!(hub.wait_exit().success());
    // The drain wrote what was counted, whatever the last interval did.
    assert_eq!(written_lists(&totals_file(&hub)), 3);

    let hub = Hub::start(&hub.spec);
    assert_eq!(hub.metric(CURL_LISTS), Some(3.0), "carried on");
    list_configmaps(&hub);
    assert_eq!(hub.metric(CURL_LISTS), Some(4.0));
    let after = link(&hub);
    assert_eq!(after["since"], before["since"]);
    let again = row(&after["lifetime"], "curl", "configmaps", "list");
    assert_eq!(
        n(&again["downBytes"]),
        n(&lists["downBytes"]) * 4 / 3,
        "the same list, once more"
    );
}

#[test]
fn after_a_kill_9_the_totals_lose_at_most_what_came_after_the_last_write() {
    let cloud = cloud_with_configmaps(5);
    let dir = TempDir::new("link-totals-kill9");
    let mut hub = start(&cloud, &dir);
    let file = totals_file(&hub);
    list_configmaps(&hub);
    list_configmaps(&hub);
    assert!(
        eventually(Duration::from_secs(10), || written_lists(&file) == 2),
        "written within the interval"
    );
    for _ in 0..3 {
        list_configmaps(&hub);
    }
    hub.kill9();
    let written = written_lists(&file);
    assert!((2..=5).contains(&written), "{written}");

    let hub = Hub::start(&hub.spec);
    let carried = hub.metric(CURL_LISTS).unwrap_or(0.0) as u64;
    assert_eq!(carried, written, "what the file had, no more and no less");
}

#[test]
fn an_unreadable_file_is_kept_as_bad_and_counting_starts_afresh() {
    let cloud = cloud_with_configmaps(2);
    let dir = TempDir::new("link-totals-bad");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[FAST]);
    std::fs::create_dir_all(&spec.root_dir).unwrap();
    let garbage = b"{\"version\":1,\"since\":17";
    std::fs::write(spec.root_dir.join("link-totals.json"), garbage).unwrap();
    let started = unix_now();

    let hub = Hub::start(&spec);
    let bad = spec.root_dir.join("link-totals.json.bad");
    assert_eq!(std::fs::read(&bad).unwrap(), garbage, "kept as it was");
    let warned = |l: &str| l.contains("link totals") && l.contains("cannot be read");
    assert_eq!(hub.log_lines(warned), 1, "{}", hub.logs());
    list_configmaps(&hub);
    let totals = link(&hub);
    assert_eq!(
        n(&row(&totals["lifetime"], "curl", "configmaps", "list")["requests"]),
        1
    );
    let since = parse_rfc3339(totals["since"].as_str().unwrap()).unwrap();
    assert!(
        since >= started,
        "counting began at the start, not at 17: {totals}"
    );
    // And a good file takes its place.
    assert!(eventually(Duration::from_secs(10), || {
        written_lists(&totals_file(&hub)) == 1
    }));
    assert_eq!(hub.log_lines(warned), 1);
}

#[test]
fn the_file_is_written_at_most_once_per_interval() {
    let cloud = cloud_with_configmaps(2);
    let dir = TempDir::new("link-totals-writes");
    let began = Instant::now();
    let hub = start(&cloud, &dir);
    // Something moves all the time: the file has something new at every interval.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        list_configmaps(&hub);
        std::thread::sleep(Duration::from_millis(100));
    }
    let writes = hub.metric("tinyhub_link_file_writes_total").unwrap() as u64;
    let elapsed = began.elapsed().as_secs();
    assert!(writes >= 2, "{writes}");
    assert!(writes <= elapsed + 1, "{writes} writes in {elapsed} s");
    let bytes = hub.metric("tinyhub_link_file_bytes_total").unwrap() as u64;
    let size = std::fs::metadata(totals_file(&hub)).unwrap().len();
    assert!(bytes >= size * writes / 2 && size > 0, "{bytes} {size}");
}

#[test]
fn a_list_the_hub_inflated_for_a_client_counts_what_gzip_saved() {
    // Past the apiserver's 128 KiB: the cloud gzips what the hub asks for; curl did not ask.
    let cloud = cloud_with_configmaps(800);
    let dir = TempDir::new("link-totals-gzip");
    let hub = start(&cloud, &dir);

    let list = list_configmaps(&hub);
    assert!(list.len() > 128 * 1024, "{}", list.len());
    let totals = link(&hub);
    let l = row(&totals["lifetime"], "curl", "configmaps", "list");
    let down = n(&l["downBytes"]);
    assert!(0 < down && down < list.len() as u64 / 2, "{l}");
    assert_eq!(n(&l["downGzipBytes"]), down, "all of it came gzip: {l}");
    assert_eq!(
        n(&l["gzipSavedBytes"]),
        list.len() as u64 - down,
        "the plain bytes the client got less the link's: {l}"
    );
    assert_eq!(
        n(&totals["lifetime"]["gzipSavedBytes"]),
        n(&l["gzipSavedBytes"]),
        "{totals}"
    );
}
