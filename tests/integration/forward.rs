//! Issue 2: forwarding to the cloud — bodies and statuses pass through, answers stream,
//! identities are right, backends are balanced, fail over and are health-checked, and the
//! concurrency cap holds.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Auth, Cloud, PodFill};

fn configmap(ns: &str, name: &str, value: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": value}})
}

#[test]
fn reads_writes_and_errors_pass_through_unchanged() {
    let cloud = Cloud::start();
    let dir = TempDir::new("passthrough");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    cloud.create("configmaps", configmap("default", "one", "1"));

    let got = get(
        &format!("{}/api/v1/namespaces/default/configmaps/one", hub.url()),
        "curl/8",
    );
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["data"]["k"], "1");
    assert!(
        got.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );

    let missing = get(
        &format!("{}/api/v1/namespaces/default/configmaps/nope", hub.url()),
        "curl/8",
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["reason"], "NotFound");

    let body = serde_json::to_vec(&configmap("default", "two", "2")).unwrap();
    let created = call(
        "POST",
        &format!(
            "{}/api/v1/namespaces/default/configmaps?fieldManager=test",
            hub.url()
        ),
        "curl/8",
        &[("Content-Type", "application/json")],
        Some(&body),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(
        cloud.get("configmaps", "default", "two").unwrap()["data"]["k"],
        "2"
    );
    let seen = cloud
        .wait_for_request(
            |r| r.method == "POST" && !r.is_hubs_own(),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(
        seen.query, "fieldManager=test",
        "query strings pass through"
    );
    assert_eq!(seen.content_type, "application/json");

    let conflict = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        "curl/8",
        &[("Content-Type", "application/json")],
        Some(&body),
    );
    assert_eq!(conflict.status, 409, "the cloud's status passes through");

    let patched = call(
        "PATCH",
        &format!("{}/api/v1/namespaces/default/configmaps/two", hub.url()),
        "curl/8",
        &[("Content-Type", "application/merge-patch+json")],
        Some(br#"{"data":{"k":"3"}}"#),
    );
    assert_eq!(patched.status, 200);
    assert_eq!(
        cloud.get("configmaps", "default", "two").unwrap()["data"]["k"],
        "3"
    );

    let deleted = call(
        "DELETE",
        &format!("{}/api/v1/namespaces/default/configmaps/two", hub.url()),
        "curl/8",
        &[],
        None,
    );
    assert_eq!(deleted.status, 200);
    assert!(cloud.get("configmaps", "default", "two").is_none());
}

#[test]
fn hop_by_hop_headers_stay_on_their_hop() {
    let cloud = Cloud::start();
    let dir = TempDir::new("hop");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    cloud.create("configmaps", configmap("default", "one", "1"));
    let answer = raw(
        hub.proxy,
        b"GET /api/v1/namespaces/default/configmaps/one HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8\r\nConnection: close, X-Private\r\nX-Private: secret\r\nTE: trailers\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nKeep-Alive: timeout=5\r\n\r\n",
    );
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap()
        .to_ascii_lowercase();
    assert_eq!(
        head.matches("content-length:").count(),
        1,
        "one framing header: {head}"
    );
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(
        head.contains("connection: close"),
        "the hub answers the client's close: {head}"
    );
    let seen = cloud
        .wait_for_request(
            |r| r.path.ends_with("/configmaps/one"),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(seen.user_agent, "curl/8", "end-to-end headers pass");
    for hop in [
        "x-private",
        "te",
        "proxy-authorization",
        "keep-alive",
        "connection",
    ] {
        assert_eq!(seen.header(hop), None, "{hop} crossed the hub");
    }
}

#[test]
fn watch_events_reach_the_client_while_the_stream_is_open() {
    let cloud = Cloud::start();
    let dir = TempDir::new("watch-stream");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let rv = cloud.resource_version();
    let (status, body) = stream(
        &format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=60",
            hub.url()
        ),
        "curl/8",
    );
    assert_eq!(status, 200);
    assert!(cloud.wait_for_watchers("configmaps", 1, Duration::from_secs(10)));
    let mut events = Events::new(body);
    let started = Instant::now();
    cloud.create("configmaps", configmap("default", "live", "x"));
    let event = events
        .next_event()
        .expect("an event before the stream ends");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "live");
    // The cloud's stream lasts 60 s; the event came long before that.
    assert!(started.elapsed() < Duration::from_secs(30));
    cloud.update("configmaps", configmap("default", "live", "y"));
    assert_eq!(events.next_event().unwrap()["type"], "MODIFIED");
}

#[test]
fn a_50_mb_list_streams_through_with_bounded_hub_memory() {
    let cloud = Cloud::start();
    // No gzip, so 50 MB really cross the hub.
    cloud.set_gzip_threshold(usize::MAX);
    cloud.populate_pods(&PodFill {
        count: 10_000,
        body_bytes: 5_000,
        ..PodFill::default()
    });
    let dir = TempDir::new("big-list");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let before = proc_status(hub.pid(), "VmHWM:");
    // Not a cache agent: pure streaming. (The cached case is in cache_write.rs.)
    let (status, mut body) = stream(&format!("{}/api/v1/pods", hub.url()), "curl/8");
    assert_eq!(status, 200);
    let mut total = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = body.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert!(total > 50_000_000, "{total} bytes");
    // Growth of the peak, so the figure holds under an emulator too (qemu has its own RSS).
    let hwm = proc_status(hub.pid(), "VmHWM:");
    assert!(
        hwm - before < 8 * 1024,
        "hub peak RSS grew from {before} to {hwm} KiB relaying {total} bytes"
    );
}

#[test]
fn the_hub_identity_or_the_clients_own_bearer_token() {
    let cloud = Cloud::start();
    cloud.add_token("client-token", "alice");
    let dir = TempDir::new("identity");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));

    let plain = get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8");
    assert_eq!(plain.status, 200);
    let seen = cloud
        .wait_for_request(
            |r| r.path == "/api/v1/namespaces" && r.bearer_token.is_none(),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(
        seen.client_cert_cn.as_deref(),
        Some("system:node:edge-1"),
        "the hub's client certificate"
    );

    cloud.reset_requests();
    let own = call(
        "GET",
        &format!("{}/api/v1/namespaces", hub.url()),
        "curl/8",
        &[("Authorization", "Bearer client-token")],
        None,
    );
    assert_eq!(own.status, 200);
    let seen = cloud
        .wait_for_request(|r| r.path == "/api/v1/namespaces", Duration::from_secs(5))
        .unwrap();
    assert_eq!(
        seen.bearer_token.as_deref(),
        Some("client-token"),
        "the client's token is kept"
    );
    assert_eq!(
        seen.client_cert_cn, None,
        "and the hub's certificate is not sent with it"
    );

    cloud.reset_requests();
    let bad = call(
        "GET",
        &format!("{}/api/v1/namespaces", hub.url()),
        "curl/8",
        &[("Authorization", "Bearer wrong")],
        None,
    );
    assert_eq!(
        bad.status, 401,
        "a bad client token is the client's problem, not replaced"
    );
}

#[test]
fn token_kubeconfigs_inline_and_as_file() {
    let cloud = Cloud::start();
    cloud.add_token("hub-token", "tinyhub");
    for auth in [
        Auth::Token("hub-token".into()),
        Auth::TokenFile("hub-token".into()),
    ] {
        let dir = TempDir::new("token");
        let spec = HubSpec::with_auth(&cloud, dir.path(), auth);
        let hub = Hub::start(&spec);
        cloud.reset_requests();
        assert_eq!(
            get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8").status,
            200
        );
        let seen = cloud
            .wait_for_request(|r| r.path == "/api/v1/namespaces", Duration::from_secs(5))
            .unwrap();
        assert_eq!(seen.bearer_token.as_deref(), Some("hub-token"));
    }
}

fn spread(clouds: &[&Cloud], lb: &str) -> Vec<usize> {
    let dir = TempDir::new("lb");
    let servers: Vec<String> = clouds.iter().map(|c| c.url()).collect();
    // No response filters: their services watch would take turns in the rotation too.
    let spec = HubSpec::for_cloud(clouds[0], dir.path()).with(&[
        &format!("--server-addr={}", servers.join(",")),
        &format!("--lb-mode={lb}"),
        "--enable-resource-filter=false",
    ]);
    let hub = Hub::start(&spec);
    for c in clouds {
        c.reset_requests();
    }
    for _ in 0..10 {
        assert_eq!(
            get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8").status,
            200
        );
    }
    clouds
        .iter()
        .map(|c| c.count(|r| r.path == "/api/v1/namespaces"))
        .collect()
}

#[test]
fn round_robin_and_priority() {
    let first = Cloud::start();
    let second = first.start_peer();
    // The hub's own requests (its ConfigMap watch) share the rotation, so allow one off.
    let rr = spread(&[&first, &second], "rr");
    assert!(
        rr.iter().all(|&n| (4..=6).contains(&n)) && rr.iter().sum::<usize>() == 10,
        "{rr:?}"
    );
    assert_eq!(spread(&[&first, &second], "priority"), vec![10, 0]);
}

#[test]
fn failover_when_the_first_backend_stops() {
    let first = Cloud::start();
    let second = first.start_peer();
    let dir = TempDir::new("failover");
    let servers = format!("--server-addr={},{}", first.url(), second.url());
    let hub =
        Hub::start(&HubSpec::for_cloud(&first, dir.path()).with(&[&servers, "--lb-mode=priority"]));
    assert_eq!(
        get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8").status,
        200
    );
    first.stop();
    let stopped = Instant::now();
    // Even before the health checker notices, a GET is retried on the healthy peer.
    for _ in 0..5 {
        assert_eq!(
            get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8").status,
            200
        );
    }
    assert!(hub.wait_healthy(&first, false, Duration::from_secs(10)));
    // One heartbeat interval (1 s here) plus the probe's retry and timeout.
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    assert!(hub.wait_log("cloud server is unhealthy", Duration::from_secs(1)));
    second.reset_requests();
    assert_eq!(
        get(&format!("{}/api/v1/namespaces", hub.url()), "curl/8").status,
        200
    );
    assert_eq!(
        second.count(|r| r.path == "/api/v1/namespaces"),
        1,
        "served by the second backend"
    );
    first.restart();
    assert!(hub.wait_healthy(&first, true, Duration::from_secs(10)));
}

#[test]
fn a_blackholed_backend_is_detected_by_the_health_checker() {
    let cloud = Cloud::start();
    let dir = TempDir::new("blackhole");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let series = health_series(&cloud);
    assert_eq!(hub.metric(&series), Some(1.0));
    cloud.set_blackhole(true);
    // interval 1 s + (1 retry + 1) × 1 s timeout, plus slack.
    assert!(
        hub.wait_metric(&series, 0.0, Duration::from_secs(10)),
        "{}",
        hub.logs()
    );
    cloud.set_blackhole(false);
    assert!(hub.wait_metric(&series, 1.0, Duration::from_secs(10)));
}

#[test]
fn the_connection_cap_answers_429_instead_of_spawning() {
    let cloud = Cloud::start();
    let dir = TempDir::new("cap");
    let hub =
        Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--max-requests-in-flight=2"]));
    let watch = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=30",
        hub.url()
    );
    // Watches are capped per client apart from the requests in flight (issue 28): at
    // --max-requests-in-flight=2, one each, and two clients hold the ceiling of 2.
    let (a, _wa) = stream(&watch, "curl/8");
    let (b, _wb) = stream(&watch, "kubectl/v1.30.0");
    assert_eq!((a, b), (200, 200));
    assert!(cloud.wait_for_watchers("configmaps", 2, Duration::from_secs(10)));
    // The HTTPS listener's thread starts once the serving certificate is issued, after the
    // hub says it is ready: counted before, not as a refusal's.
    assert!(
        hub.wait_https(Duration::from_secs(10)).is_some(),
        "{}",
        hub.logs()
    );
    let threads_before = threads(hub.pid());
    let mut refused = 0;
    for _ in 0..20 {
        let r = get(&watch, "curl/8");
        if r.status == 429 {
            refused += 1;
            assert_eq!(r.header("retry-after"), Some("1"));
            assert_eq!(r.json()["reason"], "TooManyRequests");
        }
    }
    assert_eq!(refused, 20);
    assert!(
        threads(hub.pid()) <= threads_before + 2,
        "no thread per refused request"
    );
    assert_eq!(
        hub.metric("node_yurthub_rejected_requests_counter"),
        Some(20.0)
    );
}

/// Issue 31: connection upgrades go to the cloud (they were refused with 501); an upgrade to
/// a protocol the cloud does not speak gets the cloud's own refusal back, as a direct
/// client would (`tunnel.rs` has the tunnels themselves).
#[test]
fn connection_upgrades_go_to_the_cloud_and_its_refusal_comes_back() {
    let cloud = Cloud::start();
    let dir = TempDir::new("upgrade");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let r = call(
        "POST",
        &format!(
            "{}/api/v1/namespaces/default/pods/p/exec?command=sh",
            hub.url()
        ),
        "kubectl/v1.32",
        &[("Connection", "Upgrade"), ("Upgrade", "no-such-protocol/1")],
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["kind"], "Status");
    assert!(
        cloud
            .requests()
            .iter()
            .any(|seen| seen.path.ends_with("/pods/p/exec")),
        "the cloud judged it: {}",
        r.text()
    );
}

#[test]
fn graceful_shutdown_on_sigterm_even_with_open_watches() {
    let cloud = Cloud::start();
    let dir = TempDir::new("sigterm");
    let mut hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let (status, _watch) = stream(
        &format!("{}/api/v1/configmaps?watch=1&timeoutSeconds=60", hub.url()),
        "curl/8",
    );
    assert_eq!(status, 200);
    let ready = get(&format!("{}/v1/readyz", hub.serve_url()), "curl/8");
    assert_eq!((ready.status, ready.text().as_str()), (200, "OK"));
    let started = Instant::now();
    signal(hub.pid(), "TERM");
    // While it drains (the watch holds it open), readiness says so.
    assert!(eventually(Duration::from_secs(3), || {
        let r = get(&format!("{}/v1/readyz?verbose", hub.serve_url()), "curl/8");
        r.status == 503 && r.text().contains("shutting down")
    }));
    let status = hub.wait_exit();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "within procd's term_timeout"
    );
}

#[test]
fn head_requests_get_the_head_only() {
    let cloud = Cloud::start();
    cloud.create("configmaps", configmap("default", "one", "1"));
    let dir = TempDir::new("head");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let path = "/api/v1/namespaces/default/configmaps/one";
    // Online the cloud's answer to HEAD passes through, head only, and the connection goes on.
    let answer = raw(
        hub.proxy,
        format!("HEAD {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8\r\n\r\nGET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let (first, rest) = answer.split_once("\r\n\r\n").unwrap();
    assert!(first.starts_with("HTTP/1.1 405"), "{first}");
    assert!(
        rest.starts_with("HTTP/1.1 200"),
        "no body after a HEAD answer, then the next answer: {rest}"
    );
    assert!(!hub.logs().contains("broke off"), "{}", hub.logs());
    // Offline, a HEAD of a cached object is the head of the GET.
    let full = get(&format!("{}{path}", hub.url()), KUBELET);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/one"],
        Duration::from_secs(5)
    ));
    cloud.stop();
    let head = call("HEAD", &format!("{}{path}", hub.url()), KUBELET, &[], None);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(full.body.len().to_string().as_str())
    );
}

#[test]
fn a_watch_whose_client_hangs_up_is_ended_even_while_the_cloud_is_silent() {
    let cloud = Cloud::start();
    let dir = TempDir::new("hangup");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let base = cloud.watchers("secrets");
    let watches: Vec<_> = (0..3)
        .map(|_| {
            stream(
                &format!("{}/api/v1/secrets?watch=1&timeoutSeconds=600", hub.url()),
                KUBELET,
            )
        })
        .collect();
    assert!(cloud.wait_for_watchers("secrets", base + 3, Duration::from_secs(10)));
    assert!(hub.wait_metric(IN_FLIGHT, 3.0, Duration::from_secs(5)));
    drop(watches);
    // Nothing happens on secrets: only the reaper can notice.
    assert!(
        cloud.wait_for_watchers_at_most("secrets", base, Duration::from_secs(5)),
        "the cloud streams were not closed"
    );
    assert!(hub.wait_metric(IN_FLIGHT, 0.0, Duration::from_secs(5)));
}

#[test]
fn a_write_that_may_have_reached_the_cloud_is_not_answered_from_the_cache() {
    let cloud = Cloud::start();
    let dir = TempDir::new("write-sent");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // The hub's own ConfigMap watch is up (its list would otherwise take the fault).
    assert!(cloud.wait_for_watchers("configmaps", 1, Duration::from_secs(10)));
    // The cloud applies the create, then its answer breaks off.
    cloud.drop_mid_body(1);
    let body = serde_json::to_vec(&configmap("default", "maybe", "1")).unwrap();
    let r = call(
        "POST",
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        KUBELET,
        &[("Content-Type", "application/json")],
        Some(&body),
    );
    assert!(
        cloud.get("configmaps", "default", "maybe").is_some(),
        "the cloud did create it"
    );
    assert_ne!(
        r.status,
        201,
        "a 201 from the cache would be a guess: {}",
        r.text()
    );
    assert!(r.status >= 500, "{}", r.status);
}

#[test]
fn sixteen_clients_at_once_reuse_the_cloud_connections_of_their_first_burst() {
    let cloud = Cloud::start();
    cloud.create("configmaps", configmap("default", "one", "1"));
    let dir = TempDir::new("reuse16");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = format!("{}/api/v1/namespaces/default/configmaps/one", hub.url());
    // Each answer takes a while, so the 16 requests of a burst are in flight together and
    // the hub needs 16 cloud connections at once.
    // (Longer under an emulator, which is slow to start 16 requests.)
    cloud.set_delay(Duration::from_millis(if emulated() { 500 } else { 100 }));
    let burst = || {
        let start = std::sync::Barrier::new(16);
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| {
                    start.wait();
                    assert_eq!(get(&url, "curl/8").status, 200);
                });
            }
        });
    };
    burst();
    // The hub counts its handshakes: at least one per connection of that burst.
    let series = format!(
        "tinyhub_upstream_tls_handshakes_total{{server=\"{}\"}}",
        cloud.addr()
    );
    let handshakes = || hub.metric(&series).unwrap_or(0.0);
    let first = handshakes();
    assert!(first >= 16.0, "{series} = {first} after a burst of 16");
    let before = cloud.accepted_connections();
    for _ in 0..5 {
        burst();
    }
    // A pool of 4 (as it was) opened 12 new TLS connections a burst. None of these 80 gets
    // needs a new connection; health probes share the pool, and a slow hub (an emulator) may
    // not have had all 16 in flight in its first burst: at most 2.
    let opened = cloud.accepted_connections() - before;
    assert!(opened <= 2, "{opened} new connections for 5 bursts of 16");
    assert!(
        handshakes() - first <= 2.0,
        "{series}: {first}, then {}",
        handshakes()
    );
}

#[test]
fn small_answers_reuse_the_cloud_connection() {
    let cloud = Cloud::start();
    cloud.create("configmaps", configmap("default", "one", "1"));
    let dir = TempDir::new("reuse");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = format!("{}/api/v1/namespaces/default/configmaps/one", hub.url());
    assert_eq!(get(&url, "curl/8").status, 200);
    let before = cloud.accepted_connections();
    for _ in 0..20 {
        assert_eq!(get(&url, "curl/8").status, 200);
    }
    // Health probes share the pool too; none of the 20 gets needs a new TLS connection.
    assert!(
        cloud.accepted_connections() - before <= 1,
        "{} new connections",
        cloud.accepted_connections() - before
    );
}
