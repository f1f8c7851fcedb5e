//! Issue 28 item 5, no client can starve kubelet: watches do not take the short-request
//! slots of `--max-requests-in-flight` (the apiserver's max-in-flight leaves long-running
//! requests out too); they are capped per fairness key (port, credential, component), so
//! one local client holding all the watches it can still leaves kubelet's lease and reads
//! answered at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::Cloud;
use crate::support::hub::{Hub, HubSpec, KUBELET, TempDir, call, eventually, raise_file_limit};
use crate::support::pool::list_when_warm_within;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";
const FLOOD: &str = "flood/1.0";

/// The head of the answer on `stream` (up to the blank line), as text.
fn read_head(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A watch of every Service, opened on its own connection as `ua` with no credential (the
/// plain port lends the node's identity: an unauthenticated local client); the connection
/// and the head of its answer.
fn open_watch(hub: &Hub, ua: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(hub.proxy).unwrap();
    let request = format!(
        "GET /api/v1/services?watch=true&timeoutSeconds=120 HTTP/1.1\r\nHost: hub\r\nUser-Agent: {ua}\r\nAccept: application/json\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let head = read_head(&mut stream);
    (stream, head)
}

fn status(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"))
}

#[test]
fn two_hundred_fifty_watches_from_one_client_leave_kubelet_answered_within_a_second() {
    raise_file_limit();
    let cloud = Cloud::start();
    cloud.node("edge-1", None, &[]);
    let dir = TempDir::new("fairness");
    // The default --max-requests-in-flight (250): the flood tries to hold every slot.
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    assert!(
        eventually(Duration::from_secs(30), || cloud.lease("edge-1").is_some()),
        "the hub never created the node lease\n{}",
        hub.logs()
    );
    list_when_warm_within(&hub, "/api/v1/services", FLOOD, Duration::from_secs(20));

    let mut held = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..250 {
        let (stream, head) = open_watch(&hub, FLOOD);
        match status(&head) {
            200 => held.push(stream),
            429 => refused.push(head),
            other => panic!("watch answered {other}: {head}\n{}", hub.logs()),
        }
    }
    // kubelet's lease GET (answered by the hub) and an ordinary read (from the cloud): each
    // well under the second the issue allows, with every watch still held.
    let lease_url = format!("{}{LEASE}", hub.url());
    let started = Instant::now();
    let lease = call("GET", &lease_url, KUBELET, &[], None);
    let lease_took = started.elapsed();
    assert_eq!(lease.status, 200, "{}\n{}", lease.text(), hub.logs());
    let node_url = format!("{}/api/v1/nodes/edge-1", hub.url());
    let started = Instant::now();
    let node = call("GET", &node_url, KUBELET, &[], None);
    let node_took = started.elapsed();
    assert_eq!(node.status, 200, "{}", node.text());
    assert!(
        lease_took < Duration::from_secs(1) && node_took < Duration::from_secs(1),
        "lease in {lease_took:?}, node in {node_took:?}"
    );
    // One key gets half of --max-requests-in-flight; the rest are refused with a Status
    // that says when to come back.
    assert_eq!(held.len(), 125, "{}", hub.logs());
    assert_eq!(refused.len(), 125);
    assert!(
        refused[0]
            .to_ascii_lowercase()
            .contains("retry-after: 1\r\n"),
        "{}",
        refused[0]
    );
    assert!(
        hub.logs()
            .contains("refused verb=watch path=\"/api/v1/services?watch=true"),
        "one log line says why\n{}",
        hub.logs()
    );
    assert!(hub.metric("node_yurthub_rejected_requests_counter") >= Some(125.0));

    // kubelet's own watch is not the flood's: it gets in past the flood's share.
    let (_kubelet_watch, head) = open_watch(&hub, KUBELET);
    assert_eq!(status(&head), 200, "{head}");
    drop(held);
}
