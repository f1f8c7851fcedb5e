//! Issue 17 (metrics parity): YurtHub's `node_yurthub_*` series the hub exports and the
//! standard `process_*` ones, each moving with what it measures on the real binary; and the
//! whole `/metrics` page passing a strict check of the text exposition format, so that no
//! series can break a Prometheus scrape.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

/// A client no cache applies to: its watches go to the cloud as they are.
const CURL: &str = "curl/8.5.0";

/// The `/metrics` page.
fn page(hub: &Hub) -> String {
    let reply = get(&format!("{}/metrics", hub.serve_url()), "test");
    assert_eq!(reply.status, 200);
    reply.text()
}

/// What a strict reader of the text format (version 0.0.4) finds wrong with `text`, or the
/// families it holds by name with their type.
fn check_exposition(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeSet<String> = BTreeSet::new();
    // Families whose lines have ended: none may come back.
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series: BTreeSet<String> = BTreeSet::new();
    if !text.ends_with('\n') {
        return Err("the page does not end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        let family = if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .ok_or_else(|| at("HELP without text"))?;
            check_name(name).map_err(|e| at(&e))?;
            if help.trim().is_empty() {
                return Err(at("empty HELP"));
            }
            if !helps.insert(name.to_owned()) {
                return Err(at("a second HELP for the family"));
            }
            name.to_owned()
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without a type"))?;
            check_name(name).map_err(|e| at(&e))?;
            if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                return Err(at("unknown type"));
            }
            if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                return Err(at("a second TYPE for the family"));
            }
            if current.as_deref() == Some(name) && series.iter().any(|s| family_of(s) == name) {
                return Err(at("TYPE after the family's samples"));
            }
            name.to_owned()
        } else if line.starts_with('#') || line.trim().is_empty() {
            return Err(at("a comment or blank line the hub never writes"));
        } else {
            let (name, labels, value) = split_sample(line).map_err(|e| at(&e))?;
            check_name(name).map_err(|e| at(&e))?;
            let labels = parse_labels(labels).map_err(|e| at(&e))?;
            parse_value(value).map_err(|e| at(&e))?;
            let family = sample_family(name, &types);
            if !types.contains_key(&family) {
                return Err(at("a sample before its family's TYPE"));
            }
            let key = format!("{name}{labels:?}");
            if !series.insert(key) {
                return Err(at("the same series twice"));
            }
            family
        };
        if current.as_deref() != Some(family.as_str()) {
            if let Some(done) = current.take() {
                closed.insert(done);
            }
            if closed.contains(&family) {
                return Err(at("the family's lines are not together"));
            }
            current = Some(family);
        }
    }
    Ok(types)
}

/// The family a series key (`name{labels}`) belongs to, for the TYPE-order check.
fn family_of(series: &str) -> &str {
    series.split('{').next().unwrap_or(series)
}

/// The family of sample `name`: a summary's or histogram's `_sum`, `_count`, `_bucket` belong
/// to it, everything else is its own.
fn sample_family(name: &str, types: &BTreeMap<String, String>) -> String {
    for suffix in ["_sum", "_count", "_bucket"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types
                .get(base)
                .is_some_and(|t| t == "summary" || t == "histogram")
        {
            return base.to_owned();
        }
    }
    name.to_owned()
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

/// (name, the text inside the braces, the value) of a sample line; no timestamps (the hub
/// writes none).
fn split_sample(line: &str) -> Result<(&str, &str, &str), String> {
    match line.find('{') {
        Some(open) => {
            let close = line.rfind('}').ok_or("labels not closed")?;
            let value = line[close + 1..]
                .strip_prefix(' ')
                .ok_or("no space before the value")?;
            Ok((&line[..open], &line[open + 1..close], value))
        }
        None => {
            let (name, value) = line.split_once(' ').ok_or("no value")?;
            Ok((name, "", value))
        }
    }
}

/// The labels of `name="value",...`, each name once, values with only `\\`, `\"` and `\n`
/// escapes.
fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("a bad escape in a label value".into()),
                },
                Some((_, '\n')) => return Err("a raw newline in a label value".into()),
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("a label value not closed".into()),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name:?} twice"));
        }
        rest = &after[end + 1..];
        if !rest.is_empty() {
            rest = rest
                .strip_prefix(',')
                .ok_or("labels not separated by a comma")?;
        }
    }
    Ok(labels)
}

fn parse_value(value: &str) -> Result<f64, String> {
    match value {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        v => v.parse().map_err(|_| format!("bad value {v:?}")),
    }
}

#[test]
fn the_checker_refuses_what_breaks_a_scrape() {
    let good = "# HELP a_total things\n# TYPE a_total counter\na_total 1\n\
                # HELP b one\n# TYPE b gauge\nb{x=\"1\",y=\"q\\\"\\n\"} 2.5\nb{x=\"2\"} -1\n\
                # HELP c time\n# TYPE c summary\nc_sum{k=\"v\"} 0.5\nc_count{k=\"v\"} 2\n";
    assert!(
        check_exposition(good).is_ok(),
        "{:?}",
        check_exposition(good)
    );
    for bad in [
        // A family twice, apart.
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n",
        // HELP or TYPE twice.
        "# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n",
        "# TYPE a gauge\n# TYPE a counter\na 1\n",
        // A sample with no TYPE before it, a value that is no number, a bad label.
        "a 1\n",
        "# TYPE a gauge\na one\n",
        "# TYPE a gauge\na{x=1} 1\n",
        "# TYPE a gauge\na{x=\"\\q\"} 1\n",
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",
        // The same series twice, a bad name, no newline at the end.
        "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",
        "# TYPE 1a gauge\n1a 1\n",
        "# TYPE a gauge\na 1",
    ] {
        assert!(check_exposition(bad).is_err(), "accepted:\n{bad}");
    }
}

/// The page after traffic of every kind the hub counts passes the strict check, and carries
/// YurtHub's series and the standard process ones with their types.
#[test]
fn the_whole_metrics_page_is_valid_exposition_format() {
    let cloud = Cloud::start();
    let dir = TempDir::new("metrics-format");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // Labels with quotes and backslashes from a hostile User-Agent, a cached list, a
    // pool-scope list served from the node's cache, a forwarded one.
    assert_eq!(
        get(&format!("{}/api/v1/pods", hub.url()), "evil\"\\agent").status,
        200
    );
    assert_eq!(
        get(&format!("{}/api/v1/nodes", hub.url()), KUBELET).status,
        200
    );
    assert!(eventually(Duration::from_secs(30), || {
        get(
            &format!("{}/api/v1/services", hub.url()),
            "kube-proxy/v1.30",
        )
        .status
            == 200
    }));
    let text = page(&hub);
    let types = check_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (name, kind) in [
        ("node_yurthub_server_healthy_status", "gauge"),
        ("node_yurthub_in_flight_requests_collector", "gauge"),
        ("node_yurthub_in_flight_requests_total", "gauge"),
        (
            "node_yurthub_aggregated_in_flight_requests_collector",
            "gauge",
        ),
        ("node_yurthub_aggregated_in_flight_requests_total", "gauge"),
        (
            "node_yurthub_target_for_multiplexer_requests_collector",
            "gauge",
        ),
        ("node_yurthub_closable_conns_collector", "gauge"),
        ("node_yurthub_proxy_traffic_collector", "counter"),
        ("node_yurthub_rejected_requests_counter", "counter"),
        ("node_yurthub_error_keys_count", "gauge"),
        ("node_yurthub_error_keys_persistency_status", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_virtual_memory_max_bytes", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    assert!(text.contains("client=\"evil\\\"\\\\agent\""), "{text}");
    // Nothing failed to be stored; the hub's services feeder is counted by its server.
    assert_eq!(hub.metric("node_yurthub_error_keys_count"), Some(0.0));
    assert_eq!(
        hub.metric("node_yurthub_error_keys_persistency_status"),
        Some(1.0)
    );
    let feeder = format!(
        "node_yurthub_target_for_multiplexer_requests_collector{{verb=\"watch\",resource=\"services\",subresources=\"\",client=\"multiplexer-proxy-edge-1\",server=\"{}\"}}",
        cloud.url()
    );
    assert!(
        hub.wait_metric(&feeder, 1.0, Duration::from_secs(30)),
        "{}",
        page(&hub)
    );
    // The list served from the node's cache has ended: its series stays, at 0.
    let series = |family: &str, verb: &str| {
        format!(
            "{family}{{verb=\"{verb}\",resource=\"services\",subresources=\"\",client=\"kube-proxy\"}}"
        )
    };
    let aggregated = "node_yurthub_aggregated_in_flight_requests_collector";
    assert!(
        hub.wait_metric(&series(aggregated, "list"), 0.0, Duration::from_secs(30)),
        "{}",
        page(&hub)
    );
    // A watch it serves counts among the aggregated while it is open, not among the others.
    let (status, body) = stream(
        &format!(
            "{}/api/v1/services?watch=true&timeoutSeconds=300",
            hub.url()
        ),
        "kube-proxy/v1.30",
    );
    assert_eq!(status, 200);
    assert!(
        hub.wait_metric(&series(aggregated, "watch"), 1.0, Duration::from_secs(30)),
        "{}",
        page(&hub)
    );
    assert!(
        hub.metric("node_yurthub_aggregated_in_flight_requests_total")
            .is_some_and(|n| n >= 1.0)
    );
    let others = "node_yurthub_in_flight_requests_collector";
    assert_eq!(hub.metric(&series(others, "watch")), None, "{}", page(&hub));
    drop(body);
    assert!(
        hub.wait_metric(&series(aggregated, "watch"), 0.0, Duration::from_secs(30)),
        "the watch outlived its client: {}",
        page(&hub)
    );
}

/// Seconds since the Unix epoch now.
fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[test]
fn process_series_follow_the_process() {
    let cloud = Cloud::start();
    let dir = TempDir::new("metrics-process");
    // The boot time /proc gives is whole seconds: the start time may be off by one.
    let before = now_seconds() - 1.0;
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let after = now_seconds() + 1.0;
    let started = hub
        .metric("process_start_time_seconds")
        .expect("start time");
    assert!(
        (before..=after).contains(&started),
        "started {started}, between {before} and {after}"
    );
    assert!(hub.metric("process_max_fds").is_some_and(|n| n >= 64.0));
    assert!(
        hub.metric("process_cpu_seconds_total")
            .is_some_and(|s| s >= 0.0)
    );
    // qemu-user shows the guest a /proc/self/stat of its own making, with 0 for the sizes
    // and CPU times (the start time is there); and /proc/<pid>/status outside is the
    // emulator's.
    if !emulated() {
        assert!(
            hub.metric("process_virtual_memory_bytes")
                .is_some_and(|b| b > 0.0)
        );
        let rss_kib = |hub: &Hub| proc_status(hub.pid(), "VmRSS:") as f64;
        let low = rss_kib(&hub);
        let resident = hub.metric("process_resident_memory_bytes").expect("rss") / 1024.0;
        let high = rss_kib(&hub);
        assert!(resident > 0.0);
        // Read a moment apart: allow a tenth, and a MiB, of movement.
        let slack = 1024.0 + low.max(high) / 10.0;
        assert!(
            resident >= low.min(high) - slack && resident <= low.max(high) + slack,
            "process_resident_memory_bytes {resident} KiB, VmRSS {low}..{high} KiB"
        );
    }
    // Forty idle connections: forty descriptors more, then fewer again once they close.
    let open_fds = |hub: &Hub| hub.metric("process_open_fds").expect("open fds");
    let base = open_fds(&hub);
    let addr = hub
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    let held = hold_connections(addr, 40, b"");
    assert_eq!(held.len(), 40);
    assert!(
        eventually(Duration::from_secs(30), || open_fds(&hub) >= base + 40.0),
        "{} open with 40 connections held, {base} before",
        open_fds(&hub)
    );
    drop(held);
    assert!(
        eventually(Duration::from_secs(30), || open_fds(&hub) < base + 20.0),
        "{} open after the connections closed, {base} before",
        open_fds(&hub)
    );
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "keys-0"},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
    })
}

/// The keys in the hub's list of keys that failed to be stored.
fn listed_error_keys(cache: &Path) -> Vec<String> {
    read_json(&cache.join(".error-keys"))
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default()
}

/// A key whose write fails is counted (and listed on disk, so a restart still counts it)
/// until it is written; a key written at once is never counted.
#[test]
fn error_keys_count_a_failed_write_until_the_key_is_written() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("p1"));
    cloud.create("pods", pod("p2"));
    let dir = TempDir::new("metrics-error-keys");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    // A file where the namespace's directory of kubelet's pods must go: writes under it fail.
    let kind_dir = spec.cache_dir.join("kubelet/pods.v1.core");
    std::fs::create_dir_all(&kind_dir).unwrap();
    std::fs::write(kind_dir.join("keys-0"), b"in the way").unwrap();
    let hub = Hub::start(&spec);
    assert_eq!(hub.metric("node_yurthub_error_keys_count"), Some(0.0));
    let pod_url =
        |hub: &Hub, name: &str| format!("{}/api/v1/namespaces/keys-0/pods/{name}", hub.url());
    assert_eq!(get(&pod_url(&hub, "p1"), KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        1.0,
        Duration::from_secs(20)
    ));
    assert_eq!(get(&pod_url(&hub, "p2"), KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        2.0,
        Duration::from_secs(20)
    ));
    assert!(eventually(Duration::from_secs(20), || listed_error_keys(
        &spec.cache_dir
    ) == [
        "kubelet/pods.v1.core/keys-0/p1",
        "kubelet/pods.v1.core/keys-0/p2"
    ]));
    assert_eq!(
        hub.metric("node_yurthub_error_keys_persistency_status"),
        Some(1.0)
    );

    // A restart still knows them.
    let hub = hub.restart();
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        2.0,
        Duration::from_secs(20)
    ));

    // The way is clear: each key leaves the count when it is written.
    std::fs::remove_file(kind_dir.join("keys-0")).unwrap();
    assert_eq!(get(&pod_url(&hub, "p1"), KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        1.0,
        Duration::from_secs(20)
    ));
    assert!(hub.wait_cached(&["kubelet/pods.v1.core/keys-0/p1"], Duration::from_secs(10)));
    assert_eq!(get(&pod_url(&hub, "p2"), KUBELET).status, 200);
    assert!(hub.wait_metric(
        "node_yurthub_error_keys_count",
        0.0,
        Duration::from_secs(20)
    ));
    assert!(eventually(Duration::from_secs(20), || listed_error_keys(
        &spec.cache_dir
    )
    .is_empty()));
    assert_eq!(
        hub.metric("node_yurthub_error_keys_persistency_status"),
        Some(1.0)
    );
}

/// The hub's connections to the cloud, as the gauge counts them, agree with the cloud's own
/// count: with three watches of a client open (three connections of their own), and after
/// they ended.
#[test]
fn closable_conns_count_open_watches_to_the_cloud_and_drop_when_they_end() {
    let cloud = Cloud::start();
    let dir = TempDir::new("metrics-conns");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let series = format!(
        "node_yurthub_closable_conns_collector{{server=\"{}\"}}",
        cloud.url().trim_start_matches("https://")
    );
    let conns = || hub.metric(&series).unwrap_or(0.0);
    // Read twice around the cloud's count: a connection opening meanwhile shows as a
    // difference, and the next round reads again.
    let agreed = || {
        let first = conns();
        let live = cloud.live_connections() as f64;
        (first == live && conns() == live).then_some(live)
    };
    let settle = || {
        let mut last = None;
        assert!(
            eventually(Duration::from_secs(30), || {
                last = agreed();
                last.is_some()
            }),
            "the gauge {} never agreed with the cloud's {} connections",
            conns(),
            cloud.live_connections()
        );
        last.unwrap_or_default()
    };
    let before = settle();
    assert!(before >= 1.0, "the hub's own watches and heartbeat");

    let watchers = cloud.watchers("pods");
    let streams: Vec<_> = (0..3)
        .map(|_| stream(&format!("{}/api/v1/pods?watch=true", hub.url()), CURL))
        .collect();
    assert!(streams.iter().all(|(status, _)| *status == 200));
    assert!(cloud.wait_for_watchers("pods", watchers + 3, Duration::from_secs(20)));
    let open = settle();
    assert!(
        open >= before + 3.0,
        "{open} with the watches, {before} before"
    );

    drop(streams);
    assert!(cloud.wait_for_watchers_at_most("pods", watchers, Duration::from_secs(20)));
    let after = settle();
    assert!(
        after <= open - 3.0,
        "{after} after the watches, {open} with them"
    );
}
