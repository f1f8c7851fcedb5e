//! Issue 28 item 6: requests nginx refuses, which the hub accepted and forwarded, are refused
//! with nginx's status and a Kubernetes `Status`, and none of them reaches the cloud.

use crate::support::Cloud;
use crate::support::hub::*;

/// (what, the request, the status nginx answers it with).
const REFUSED: &[(&str, &str, u16)] = &[
    (
        "whitespace before a chunk size",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nTransfer-Encoding: chunked\r\n\r\n 2\r\n{}\r\n0\r\n\r\n",
        400,
    ),
    (
        "a tab before chunked",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nTransfer-Encoding:\tchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        501,
    ),
    (
        "a tab after chunked",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nTransfer-Encoding: chunked\t\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        501,
    ),
    (
        "Transfer-Encoding in HTTP/1.0",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.0\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        400,
    ),
    (
        "two equal Content-Length lines",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        400,
    ),
    (
        "HTTP/1.1 without Host",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nUser-Agent: kubelet/v1.30\r\nContent-Length: 2\r\n\r\n{}",
        400,
    ),
    (
        "two Host lines",
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nContent-Length: 2\r\n\r\n{}",
        400,
    ),
];

#[test]
fn requests_nginx_refuses_are_refused_before_the_cloud() {
    let cloud = Cloud::start();
    let dir = TempDir::new("request-refusals");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    for &(what, request, status) in REFUSED {
        let answer = raw(hub.proxy, request.as_bytes());
        assert_eq!(raw_status(&answer), status, "{what}: {answer}");
        let reason = if status == 501 {
            "NotImplemented"
        } else {
            "BadRequest"
        };
        assert!(
            answer.contains(&format!("\"reason\":\"{reason}\"")),
            "{what}: {answer}"
        );
        assert!(
            answer.contains("Connection: close"),
            "{what}: the framing is not trusted, the connection ends: {answer}"
        );
    }
    assert_eq!(
        cloud.count(|r| r.method == "POST" && !r.is_hubs_own()),
        0,
        "nothing refused reached the cloud"
    );
    // What stays accepted: the same create, well framed, and HTTP/1.0 without Host.
    let good = raw(
        hub.proxy,
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1.30\r\nContent-Type: application/json\r\nTransfer-Encoding:  chunked \r\nConnection: close\r\n\r\n3e\r\n{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}\r\n0\r\n\r\n",
    );
    assert_eq!(raw_status(&good), 201, "{good}");
    let old = raw(hub.proxy, b"GET /version HTTP/1.0\r\n\r\n");
    assert_eq!(raw_status(&old), 200, "{old}");
}
