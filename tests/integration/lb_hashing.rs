//! Issue 31, item 2: `--lb-mode=consistent-hashing`. The same client (User-Agent and target)
//! goes to the same healthy server; when that server stops only its clients move, and they
//! come back when it returns. An unknown mode stops the start with one line.

use std::time::Duration;

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, RecordedRequest};

/// How many distinct clients are sent.
const PAIRS: usize = 30;

fn pair(i: usize) -> (String, String) {
    (
        format!("pair-{i}/1.0"),
        format!("/api/v1/namespaces/ns-{i}/configmaps"),
    )
}

/// Sends every pair `times` times and returns, per pair, the indexes of the clouds that saw
/// it (one entry per request seen).
fn send_all(hub: &Hub, clouds: &[&Cloud], times: usize) -> Vec<Vec<usize>> {
    for c in clouds {
        c.reset_requests();
    }
    for i in 0..PAIRS {
        let (ua, path) = pair(i);
        for _ in 0..times {
            let reply = get(&format!("{}{path}", hub.url()), &ua);
            assert_eq!(reply.status, 200, "{ua} {path}: {}", reply.text());
        }
    }
    (0..PAIRS)
        .map(|i| {
            let (ua, path) = pair(i);
            let mut seen = Vec::new();
            for (k, c) in clouds.iter().enumerate() {
                let n = c.count(|r| r.user_agent == ua && r.path == path);
                seen.extend(std::iter::repeat_n(k, n));
            }
            seen
        })
        .collect()
}

/// The one server each pair went to; panics when a pair was split or lost.
fn servers_of(seen: &[Vec<usize>], times: usize) -> Vec<usize> {
    seen.iter()
        .enumerate()
        .map(|(i, s)| {
            assert_eq!(s.len(), times, "pair {i} seen {s:?}");
            assert!(s.iter().all(|&k| k == s[0]), "pair {i} went to {s:?}");
            s[0]
        })
        .collect()
}

/// A hub over `clouds` (the first's CA and credentials) by consistent hashing; no response
/// filters: their watches would be requests of the hub's own.
fn hashing_hub(clouds: &[&Cloud], dir: &TempDir) -> Hub {
    let servers: Vec<String> = clouds.iter().map(|c| c.url()).collect();
    Hub::start(&HubSpec::for_cloud(clouds[0], dir.path()).with(&[
        &format!("--server-addr={}", servers.join(",")),
        "--lb-mode=consistent-hashing",
        "--enable-resource-filter=false",
    ]))
}

#[test]
fn a_client_stays_on_its_server_and_only_a_stopped_servers_clients_move() {
    let first = Cloud::start();
    let second = first.start_peer();
    let third = first.start_peer();
    let clouds = [&first, &second, &third];
    let dir = TempDir::new("lb-hashing");
    let hub = hashing_hub(&clouds, &dir);

    let home = servers_of(&send_all(&hub, &clouds, 3), 3);
    for k in 0..clouds.len() {
        let n = home.iter().filter(|&&h| h == k).count();
        assert!(n > 0, "server {k} got no client: {home:?}");
    }

    // Stop the server with the most clients: only they move, each to one other server.
    let stopped = (0..clouds.len())
        .max_by_key(|&k| home.iter().filter(|&&h| h == k).count())
        .unwrap();
    clouds[stopped].stop();
    assert!(hub.wait_healthy(clouds[stopped], false, Duration::from_secs(10)));
    let during = servers_of(&send_all(&hub, &clouds, 2), 2);
    for i in 0..PAIRS {
        if home[i] == stopped {
            assert_ne!(during[i], stopped, "pair {i}");
        } else {
            assert_eq!(during[i], home[i], "pair {i} moved though its server is up");
        }
    }

    // Back: its clients come back to it.
    clouds[stopped].restart();
    assert!(hub.wait_healthy(clouds[stopped], true, Duration::from_secs(10)));
    assert_eq!(servers_of(&send_all(&hub, &clouds, 1), 1), home);
}

/// kubelet's watch of its pods, as the cloud sees it (the first leg and every resume).
fn node_pod_watch(r: &RecordedRequest) -> bool {
    r.path == "/api/v1/pods" && r.query.contains("watch=") && r.user_agent == KUBELET
}

#[test]
fn a_resumed_watch_stays_on_its_server() {
    let first = Cloud::start();
    let second = first.start_peer();
    let third = first.start_peer();
    let clouds = [&first, &second, &third];
    first.create(
        "pods",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}
        }),
    );
    let dir = TempDir::new("lb-hashing-watch");
    let hub = hashing_hub(&clouds, &dir);
    let pods = "fieldSelector=spec.nodeName%3Dedge-1";
    let list = get(&format!("{}/api/v1/pods?{pods}", hub.url()), KUBELET);
    assert_eq!(list.status, 200, "{}", list.text());
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!(
        "{}/api/v1/pods?watch=true&resourceVersion={rv}&{pods}&allowWatchBookmarks=true&timeoutSeconds=600",
        hub.url()
    );
    let (status, _held) = stream(&url, KUBELET);
    assert_eq!(status, 200);
    let mut home = None;
    assert!(eventually(Duration::from_secs(10), || {
        home = (0..clouds.len()).find(|&k| clouds[k].count(node_pod_watch) == 1);
        home.is_some()
    }));
    let home = home.unwrap();
    // Each resume leg asks from a later resourceVersion: a different target, the same client.
    for legs in 2..=4 {
        assert!(clouds[home].cut_watches("pods") >= 1, "no pod watch to cut");
        assert!(
            eventually(Duration::from_secs(10), || clouds[home]
                .count(node_pod_watch)
                == legs),
            "no resume on server {home}:\n{}",
            hub.logs()
        );
        first.patch(
            "pods",
            "default",
            "web-1",
            json!({"metadata": {"labels": {"leg": legs.to_string()}}}),
        );
    }
    for (k, c) in clouds.iter().enumerate() {
        if k != home {
            assert_eq!(c.count(node_pod_watch), 0, "a leg went to server {k}");
        }
    }
}

#[test]
fn an_unknown_lb_mode_exits_2_naming_the_three() {
    let cloud = Cloud::start();
    let dir = TempDir::new("lb-bogus");
    let out = HubSpec::for_cloud(&cloud, dir.path())
        .with(&["--lb-mode=bogus"])
        .command()
        .output()
        .expect("run tinyhub");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--lb-mode") && err.contains("rr, priority or consistent-hashing"),
        "{err}"
    );
}
