//! Issue 11 item 8: a client's broken body is the client's error. A malformed chunked body
//! is a 400 and a body that stalls a 408, within the body read timeout; neither reaches the
//! cloud, counts as a cloud failure or is answered from the cache. A client that stops
//! reading an answer is cut off at the write timeout of one write, however the kernel splits
//! it. An offline create whose name is unsafe as a file name is a 400 that stores nothing.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

/// The client read and write timeout the tests give the hub (the documented 60 s would make
/// each test wait a minute).
const IO_TIMEOUT_SECS: u64 = 4;

/// The hidden flag that shortens the hub's client timeouts.
fn short_io() -> String {
    format!("--test-only-client-io-timeout-seconds={IO_TIMEOUT_SECS}")
}

/// A request head with a chunked body, from kubelet, for `method` and `path`.
fn chunked_head(method: &str, path: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: hub\r\nUser-Agent: {KUBELET}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
}

/// Sends `head` and `body`, closes the sending side when `half_close`, and reads the answer
/// to its end; returns it and the time it took.
fn exchange(addr: SocketAddr, head: &str, body: &[u8], half_close: bool) -> (String, Duration) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let started = Instant::now();
    s.write_all(head.as_bytes()).unwrap();
    // The hub may answer and close before it has read all of a broken body.
    let _ = s.write_all(body);
    if half_close {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

/// Chunked bodies no client library sends: (what, bytes, sent with the sending side closed).
const MALFORMED: &[(&str, &[u8], bool)] = &[
    (
        "a chunk size that is not hex",
        b"zz\r\nhello\r\n0\r\n\r\n",
        false,
    ),
    ("a 0x prefix", b"0x5\r\nhello\r\n0\r\n\r\n", false),
    ("an empty chunk size", b"\r\nhello\r\n0\r\n\r\n", false),
    (
        "a chunk size past 64 bits",
        b"10000000000000000\r\nhello\r\n0\r\n\r\n",
        false,
    ),
    (
        "data longer than its chunk",
        b"3\r\nhello\r\n0\r\n\r\n",
        false,
    ),
    ("no CRLF after the data", b"5\r\nhello0\r\n\r\n", false),
    ("a bare LF after the data", b"5\r\nhello\n0\r\n\r\n", false),
    ("a bare LF after the size", b"5\nhello\r\n0\r\n\r\n", false),
    ("the body ends inside a chunk", b"5\r\nhel", true),
    (
        "the body ends before the last chunk",
        b"5\r\nhello\r\n",
        true,
    ),
    ("no CRLF after the last chunk", b"5\r\nhello\r\n0\r\n", true),
];

#[test]
fn malformed_chunked_bodies_are_a_400_never_a_cloud_failure_or_a_cached_answer() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    );
    let dir = TempDir::new("bodies-malformed");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let object = "/api/v1/namespaces/default/configmaps/settings";
    // kubelet has read the object: the cache could answer a GET for it.
    assert_eq!(get(&format!("{}{object}", hub.url()), KUBELET).status, 200);
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(10)
    ));

    for &(what, body, half_close) in MALFORMED {
        for (method, path) in [
            ("POST", "/api/v1/namespaces/default/configmaps"),
            ("GET", object),
        ] {
            let (answer, _) = exchange(hub.proxy, &chunked_head(method, path), body, half_close);
            assert_eq!(raw_status(&answer), 400, "{method} with {what}: {answer}");
            assert!(
                answer.contains("\"reason\":\"BadRequest\""),
                "{method} with {what}: {answer}"
            );
            assert!(
                answer.contains("Connection: close"),
                "the framing is broken: the connection ends ({method} with {what}): {answer}"
            );
        }
    }
    // Nothing broken reached the cloud as a request, and none of it is the cloud's failure.
    assert_eq!(cloud.count(|r| r.method == "POST" && !r.is_hubs_own()), 0);
    assert_eq!(hub.metric("tinyhub_upstream_errors_total"), Some(0.0));
    assert_eq!(hub.metric("tinyhub_offline_answers_total"), Some(0.0));
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));

    // A chunk larger than any body is refused at its size line, not waited for: also when
    // no data follows the size line (the hub's read timeout is 60 s here).
    for body in [&b"fffffffffffffff\r\nhello"[..], b"fffffffffffffff\r\n"] {
        let (answer, took) = exchange(
            hub.proxy,
            &chunked_head("POST", "/api/v1/namespaces/default/configmaps"),
            body,
            false,
        );
        assert_eq!(raw_status(&answer), 413, "{answer}");
        assert!(
            took < Duration::from_secs(30),
            "the 413 came after {took:?}"
        );
    }

    // Well-formed bodies still go through: chunk sizes with leading zeros and extensions.
    let good = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"good"}}"#;
    let mut body = format!("0000{:x};ext=1\r\n", good.len()).into_bytes();
    body.extend_from_slice(good);
    body.extend_from_slice(b"\r\n0\r\nX-Trailer: 1\r\n\r\n");
    let (answer, _) = exchange(
        hub.proxy,
        &chunked_head("POST", "/api/v1/namespaces/default/configmaps"),
        &body,
        true,
    );
    assert_eq!(raw_status(&answer), 201, "{answer}");
    assert_eq!(cloud.count(|r| r.method == "POST" && !r.is_hubs_own()), 1);

    // Offline too, a request with a broken body gets the body's error, not a cached answer.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    assert_eq!(get(&format!("{}{object}", hub.url()), KUBELET).status, 200);
    for &(what, body, half_close) in MALFORMED {
        let (answer, _) = exchange(hub.proxy, &chunked_head("GET", object), body, half_close);
        assert_eq!(
            raw_status(&answer),
            400,
            "offline GET with {what}: {answer}"
        );
    }
}

#[test]
fn a_body_that_stalls_is_a_408_within_the_read_timeout() {
    let cloud = Cloud::start();
    let dir = TempDir::new("bodies-stall");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&[&short_io()]));
    let create = "/api/v1/namespaces/default/configmaps";
    // One read timeout, not two (a stalled body was read again before answering).
    let bound = Duration::from_secs(IO_TIMEOUT_SECS * 2);
    // Chunked, stopping inside a chunk; a declared length, stopping short of it.
    let declared = format!(
        "POST {create} HTTP/1.1\r\nHost: hub\r\nUser-Agent: {KUBELET}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    );
    for (what, head, body) in [
        (
            "chunked",
            chunked_head("POST", create),
            &b"40\r\n{\"apiVersion\":\"v1\""[..],
        ),
        ("declared", declared, b"{\"apiVersion\":\"v1\""),
    ] {
        let (answer, took) = exchange(hub.proxy, &head, body, false);
        assert_eq!(raw_status(&answer), 408, "{what}: {answer}");
        assert!(
            answer.contains("\"reason\":\"Timeout\""),
            "{what}: {answer}"
        );
        assert!(
            took >= Duration::from_secs(IO_TIMEOUT_SECS) && took < bound,
            "{what}: answered after {took:?}"
        );
    }
    assert_eq!(cloud.count(|r| r.method == "POST" && !r.is_hubs_own()), 0);
    assert_eq!(hub.metric("tinyhub_upstream_errors_total"), Some(0.0));
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));

    // Offline, the create is answered by the hub itself: the same 408.
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    let (answer, took) = exchange(
        hub.proxy,
        &chunked_head("POST", create),
        b"40\r\n{\"apiVersion\":\"v1\"",
        false,
    );
    assert_eq!(raw_status(&answer), 408, "offline: {answer}");
    assert!(took < bound, "offline: answered after {took:?}");
}

/// A connection whose receive buffer is as small as the kernel allows, so that what the hub
/// sends piles up in the hub's own send buffer.
#[allow(unsafe_code, reason = "std cannot set SO_RCVBUF before connecting")]
fn small_window_connect(addr: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(v4) = addr else {
        panic!("the hub listens on IPv4 loopback")
    };
    // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
    // TcpStream; the sockaddr is built in full before use.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let size: libc::c_int = 4096;
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let connected = libc::connect(
            fd,
            (&raw const sin).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(connected, 0, "connect: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// The write timeout of the cut-off test: long enough that the bound of two of them leaves
/// room for a slow machine (the suite also runs under qemu).
const WRITE_TIMEOUT_SECS: u64 = 6;

#[test]
fn a_client_that_stops_reading_is_cut_off_at_the_write_timeout() {
    let cloud = Cloud::start();
    // About 16 MB of pods: far more than the kernel buffers between the hub and its client.
    cloud.populate_pods(&PodFill {
        count: 3200,
        ..PodFill::default()
    });
    let dir = TempDir::new("bodies-write");
    let io = format!("--test-only-client-io-timeout-seconds={WRITE_TIMEOUT_SECS}");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&[&io]));
    assert_eq!(hub.metric(IN_FLIGHT), Some(0.0));

    let mut s = small_window_connect(hub.proxy);
    // Not a cache agent: the answer goes straight from the cloud to the client.
    s.write_all(b"GET /api/v1/pods HTTP/1.1\r\nHost: hub\r\nUser-Agent: curl/8\r\n\r\n")
        .unwrap();
    let asked = Instant::now();
    // The client reads the start of the answer, then stops reading.
    let mut start = [0u8; 12];
    s.read_exact(&mut start).unwrap();
    assert_eq!(&start, b"HTTP/1.1 200");
    let stopped = Instant::now();
    // The hub fills the buffers at once, then blocks in one write: that write ends at the
    // write timeout, however often the kernel takes a few bytes of it.
    let cut_off = eventually(Duration::from_secs(120), || {
        hub.metric(IN_FLIGHT) == Some(0.0)
    });
    let took = stopped.elapsed();
    assert!(
        cut_off,
        "the hub still writes to a client that stopped reading"
    );
    eprintln!(
        "a client that stopped reading was cut off after {took:?} (write timeout {WRITE_TIMEOUT_SECS} s; asked {:?} before)",
        stopped - asked
    );
    assert!(
        took < Duration::from_secs(WRITE_TIMEOUT_SECS * 2),
        "cut off after {took:?}, with a write timeout of {WRITE_TIMEOUT_SECS} s"
    );
    // The client sees the answer end without its last chunk: the connection is closed.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        !rest.ends_with(b"0\r\n\r\n"),
        "the answer must not look complete"
    );
    assert_eq!(hub.metric(&health_series(&cloud)), Some(1.0));
}

#[test]
fn an_offline_event_with_a_name_unsafe_as_a_path_is_a_400_that_stores_nothing() {
    let cloud = Cloud::start();
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    );
    let dir = TempDir::new("bodies-names");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let url = |path: &str| format!("{}{path}", hub.url());
    assert_eq!(
        get(&url("/api/v1/namespaces/default/configmaps"), KUBELET).status,
        200
    );
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/default/settings"],
        Duration::from_secs(10)
    ));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(15)));
    hub.wait_cache_quiet();
    let files = files_under(&hub.spec.cache_dir).len();

    let post = |meta: serde_json::Value| {
        let body = json!({"apiVersion": "v1", "kind": "Event", "metadata": meta});
        call(
            "POST",
            &url("/api/v1/namespaces/default/events"),
            KUBELET,
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
    };
    for meta in [
        json!({"name": "../x"}),
        json!({"name": "a/b"}),
        json!({"name": "Upper"}),
        json!({"name": ".hidden"}),
        json!({"name": "a%2Fb"}),
        json!({"name": "x".repeat(254)}),
        json!({"generateName": "../"}),
        json!({"generateName": "a/"}),
        json!({}),
    ] {
        let created = post(meta.clone());
        assert_eq!(created.status, 400, "{meta}: {}", created.text());
        assert_eq!(created.json()["reason"], "BadRequest", "{meta}");
    }
    // A safe name is echoed; nothing offline is ever stored (issue 28), events least of all.
    assert_eq!(post(json!({"name": "fine"})).status, 201);
    hub.wait_cache_quiet();
    let after = files_under(&hub.spec.cache_dir);
    assert_eq!(after.len(), files, "nothing was stored: {after:#?}");
}

#[test]
fn a_body_slower_than_the_request_time_is_the_clients_408() {
    let cloud = Cloud::start();
    let dir = TempDir::new("bodies-slow");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&[&short_io()]));
    // `timeout=1s` gives the request 16 s in all; the body comes 8 bytes every 2 s, each
    // within the read timeout, and would take 26 s.
    let mut s = TcpStream::connect(hub.proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(
        format!(
            "POST /api/v1/namespaces/default/configmaps?timeout=1s HTTP/1.1\r\nHost: hub\r\nUser-Agent: {KUBELET}\r\nContent-Type: application/json\r\nContent-Length: 104\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..13 {
            if writer.write_all(b"        ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    });
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(raw_status(&answer), 408, "{answer}");
    assert!(answer.contains("\"reason\":\"Timeout\""), "{answer}");
    assert!(answer.contains("Connection: close"), "{answer}");
    assert_eq!(hub.metric("tinyhub_upstream_errors_total"), Some(0.0));
    assert_eq!(cloud.count(|r| r.method == "POST" && !r.is_hubs_own()), 0);
    let _ = trickle.join();
}
