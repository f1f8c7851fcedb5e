//! Issue 31 item 1: connection upgrades (exec, attach, port-forward) through the hub. The
//! stand-in cloud echoes raw bytes after its 101 (`x-test-echo: raw`); the hub must pass
//! its 101 back and splice the bytes both ways, half-close included, with the credentials
//! the trust rules give the client; refuse what cannot be tunnelled with a `Status`; and
//! hold no thread after a tunnel ends.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use crate::support::Cloud;
use crate::support::hub::*;

const EXEC: &str = "/api/v1/namespaces/default/pods/web-1/exec?command=cat&stdin=true&stdout=true";
const KUBECTL: &str = "kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef0";

/// A client connection to the hub, plain or over TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => match s.read(buf) {
                // The hub's end without a close_notify after the tunnel is an end too.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Conn {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(data),
            Conn::Tls(s) => s.write(data),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

impl Conn {
    /// Ends the client's writing; it reads on.
    fn close_write(&mut self) {
        match self {
            Conn::Plain(s) => s.shutdown(Shutdown::Write).unwrap(),
            Conn::Tls(s) => {
                s.conn.send_close_notify();
                s.flush().unwrap();
            }
        }
    }
}

/// A TLS connection to the hub's HTTPS port, whose certificate chains to the cloud's CA.
fn tls_to(addr: SocketAddr, cloud: &Cloud) -> Conn {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(cloud.pki().ca_der().to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "127.0.0.1".try_into().unwrap()).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    Conn::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
}

fn plain_to(addr: SocketAddr) -> Conn {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    Conn::Plain(tcp)
}

/// Sends an exec upgrade with `extra` headers (each `Name: value`) and reads the answer's
/// head; the connection is left right behind it.
fn upgrade(conn: Conn, extra: &[&str]) -> (String, Conn) {
    upgrade_at(conn, EXEC, extra)
}

/// [`upgrade`] of `target`.
fn upgrade_at(conn: Conn, target: &str, extra: &[&str]) -> (String, Conn) {
    upgrade_sending(conn, target, extra, b"")
}

/// [`upgrade_at`] with `behind` sent in the same write as the head.
fn upgrade_sending(mut conn: Conn, target: &str, extra: &[&str], behind: &[u8]) -> (String, Conn) {
    let mut head = format!(
        "POST {target} HTTP/1.1\r\nHost: hub\r\nUser-Agent: {KUBECTL}\r\nConnection: Upgrade\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
    );
    for h in extra {
        head += h;
        head += "\r\n";
    }
    head += "\r\n";
    let mut head = head.into_bytes();
    head.extend_from_slice(behind);
    conn.write_all(&head).unwrap();
    conn.flush().unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            other => panic!(
                "the answer's head broke off ({other:?}): {}",
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    (String::from_utf8(answer).unwrap(), conn)
}

/// The rest of an answer with `Content-Length`, after its head.
fn body(head: &str, conn: &mut Conn) -> String {
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length: {head}"));
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

/// Every byte value, in 4 KiB pieces, echoed one piece at a time; then the client's end,
/// and the cloud's echo of a last piece sent just before it still arrives.
fn echo_byte_for_byte(conn: &mut Conn) {
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 256) as u8).collect();
    for piece in data.chunks(4096) {
        conn.write_all(piece).unwrap();
        conn.flush().unwrap();
        let mut back = vec![0u8; piece.len()];
        conn.read_exact(&mut back).unwrap();
        assert!(back == piece, "the echo differs from what was sent");
    }
    conn.write_all(b"last words").unwrap();
    conn.close_write();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"last words", "after the client's half-close");
}

fn status_line(head: &str) -> &str {
    head.lines().next().unwrap_or("")
}

#[test]
fn a_raw_upgrade_passes_byte_for_byte_as_the_node_on_the_plain_port() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-plain");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 101 Switching Protocols",
        "{head}"
    );
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: spdy/3.1\r\n"), "{head}");
    assert!(
        lower.contains("x-stream-protocol-version: v4.channel.k8s.io\r\n"),
        "the cloud's headers: {head}"
    );
    echo_byte_for_byte(&mut conn);

    // The node's tunnel went with the hub's identity.
    let seen = cloud
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/pods/web-1/exec"))
        .expect("the cloud saw the exec");
    assert_eq!(seen.client_cert_cn.as_deref(), Some("system:node:edge-1"));
    assert_eq!(seen.bearer_token, None);
    assert!(
        hub.wait_log_line(
            |l| l.contains("cache=tunnel") && l.contains("up=65546") && l.contains("down=65546"),
            Duration::from_secs(10)
        ),
        "one line with the bytes each way: {}",
        hub.logs()
    );
}

#[test]
fn bytes_sent_with_either_head_go_first_on_both_ports() {
    let cloud = Cloud::start();
    cloud.add_token("runner-token", "system:serviceaccount:ci:runner");
    let dir = TempDir::new("tunnel-early");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let https = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    for conn in [plain_to(hub.proxy), tls_to(https, &cloud)] {
        // The client's first bytes right behind its head, the cloud's greeting in its 101's
        // own write: both are read with a head, and must not be lost with it.
        let (head, mut conn) = upgrade_sending(
            conn,
            EXEC,
            &[
                "Upgrade: SPDY/3.1",
                "x-test-echo: raw",
                "x-test-greet: settings;",
                "Authorization: Bearer runner-token",
            ],
            b"first frame;",
        );
        assert_eq!(
            status_line(&head),
            "HTTP/1.1 101 Switching Protocols",
            "{head}"
        );
        conn.close_write();
        let mut rest = Vec::new();
        conn.read_to_end(&mut rest).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&rest),
            "settings;first frame;",
            "the greeting, then the echo of the client's first bytes"
        );
    }
}

#[test]
fn a_pod_on_the_https_port_tunnels_with_its_own_token_not_the_hubs_certificate() {
    let cloud = Cloud::start();
    cloud.add_token("runner-token", "system:serviceaccount:ci:runner");
    let dir = TempDir::new("tunnel-https");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let addr = hub
        .wait_https(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no HTTPS port: {}", hub.logs()));
    let (head, mut conn) = upgrade(
        tls_to(addr, &cloud),
        &[
            "Upgrade: SPDY/3.1",
            "x-test-echo: raw",
            "Authorization: Bearer runner-token",
        ],
    );
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 101 Switching Protocols",
        "{head}"
    );
    echo_byte_for_byte(&mut conn);
    let seen = cloud
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/pods/web-1/exec"))
        .expect("the cloud saw the exec");
    assert_eq!(seen.bearer_token.as_deref(), Some("runner-token"));
    assert_eq!(
        seen.client_cert_cn, None,
        "never the hub's certificate for a pod"
    );

    // Without a credential the pod is anonymous to the cloud, which refuses it: passed back.
    let (head, mut conn) = upgrade(
        tls_to(addr, &cloud),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 401 "), "{head}");
    assert!(body(&head, &mut conn).contains("Unauthorized"));
}

#[test]
fn a_hundred_tunnels_carry_a_mebibyte_each_way_and_leave_no_thread_or_heap_behind() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-many");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    // One request first: the threads a hub starts lazily are up before the count.
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    conn.close_write();
    let _ = conn.read_to_end(&mut Vec::new());
    drop(conn);
    assert!(eventually(Duration::from_secs(10), || hub
        .log_lines(|l| l.contains("cache=tunnel"))
        == 1));
    let idle = threads(hub.pid());
    let heap = hub.metric("tinyhub_heap_bytes").expect("the heap series");

    let proxy = hub.proxy;
    let tunnels: Vec<_> = (0..100u32)
        .map(|n| {
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let (head, conn) =
                        upgrade(plain_to(proxy), &["Upgrade: SPDY/3.1", "x-test-echo: raw"]);
                    assert!(head.starts_with("HTTP/1.1 101"), "tunnel {n}: {head}");
                    let Conn::Plain(tcp) = conn else {
                        unreachable!()
                    };
                    let data: Vec<u8> = (0..1u32 << 20)
                        .map(|i| (i.wrapping_mul(31).wrapping_add(n) % 251) as u8)
                        .collect();
                    let mut writer = tcp.try_clone().unwrap();
                    let sent = data.clone();
                    let write = thread::spawn(move || {
                        writer.write_all(&sent).unwrap();
                        writer.shutdown(Shutdown::Write).unwrap();
                    });
                    let mut back = Vec::with_capacity(1 << 20);
                    (&tcp).read_to_end(&mut back).unwrap();
                    write.join().unwrap();
                    assert!(
                        back == data,
                        "tunnel {n}: {} bytes back, not the same",
                        back.len()
                    );
                })
                .unwrap()
        })
        .collect();
    for t in tunnels {
        t.join().unwrap();
    }
    assert!(
        eventually(Duration::from_secs(30), || {
            hub.log_lines(|l| l.contains("cache=tunnel") && l.contains("up=1048576 down=1048576"))
                == 100
        }),
        "100 tunnels logged with a MiB each way: {}",
        hub.log_lines(|l| l.contains("cache=tunnel"))
    );
    assert!(
        eventually(Duration::from_secs(10), || threads(hub.pid()) <= idle + 2),
        "threads back near idle: {} after, {idle} before",
        threads(hub.pid())
    );
    // Each tunnel held two 16 KiB buffers and two TLS connections' (3 MiB and more for the
    // hundred): none of it stays.
    let after = hub.metric("tinyhub_heap_bytes").unwrap_or(f64::MAX);
    assert!(
        after <= heap + 1024.0 * 1024.0,
        "heap back near idle: {after} bytes after, {heap} before"
    );
}

#[test]
fn in_cloud_mode_an_upgrade_the_hub_cannot_read_is_tunnelled_all_the_same() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-cloud-mode");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--working-mode=cloud"]));
    // A namespace no name rule allows: the classifier refuses it, the cloud judges it.
    let target = "/api/v1/namespaces/Not_A_Namespace/pods/web-1/exec?command=sh&command=-c&command=login%20secret";
    let (head, mut conn) = upgrade_at(
        plain_to(hub.proxy),
        target,
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 101 Switching Protocols",
        "{head}"
    );
    echo_byte_for_byte(&mut conn);
    assert!(
        hub.wait_log_line(
            |l| l.contains("verb=unknown")
                && l.contains("cache=tunnel")
                && l.contains("resource=\"/api/v1/namespaces/Not_A_Namespace/pods/web-1/exec\""),
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    // The command's arguments stay out of the log.
    assert!(!hub.logs().contains("secret"), "{}", hub.logs());
}

#[test]
fn tunnels_are_long_running_requests_under_their_keys_share() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-caps");
    // A key alone holds half the in-flight cap in long-running requests: two here.
    let hub =
        Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--max-requests-in-flight=4"]));
    let held: Vec<Conn> = (0..2)
        .map(|_| {
            let (head, conn) = upgrade(
                plain_to(hub.proxy),
                &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
            );
            assert!(head.starts_with("HTTP/1.1 101"), "{head}");
            conn
        })
        .collect();
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 429 "), "{head}");
    assert!(body(&head, &mut conn).contains("Status"));
    // Short requests are not what the tunnels hold.
    let reply = get(
        &format!("{}/api/v1/namespaces/default/configmaps", hub.url()),
        KUBECTL,
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    // A tunnel that ends gives its slot back.
    drop(held);
    assert!(eventually(Duration::from_secs(10), || {
        let (head, _conn) = upgrade(
            plain_to(hub.proxy),
            &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
        );
        head.starts_with("HTTP/1.1 101")
    }));
}

#[test]
fn the_slots_kept_for_the_node_take_its_tunnel_the_hub_cannot_read() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-node-reserve");
    // Eight in flight: long-running ones up to eight, the last two kept for the node.
    let hub = Hub::start(
        &HubSpec::for_cloud(&cloud, dir.path())
            .with(&["--working-mode=cloud", "--max-requests-in-flight=8"]),
    );
    // Three pods' credentials take two tunnels each: six, all that is not kept.
    let mut held = Vec::new();
    for round in 0..2 {
        for pod in ["pod-a", "pod-b", "pod-c"] {
            if round == 0 {
                cloud.add_token(pod, &format!("system:serviceaccount:ci:{pod}"));
            }
            let (head, conn) = upgrade(
                plain_to(hub.proxy),
                &[
                    "Upgrade: SPDY/3.1",
                    "x-test-echo: raw",
                    &format!("Authorization: Bearer {pod}"),
                ],
            );
            assert!(head.starts_with("HTTP/1.1 101"), "{pod}: {head}");
            held.push(conn);
        }
    }
    let (head, _conn) = upgrade(
        plain_to(hub.proxy),
        &[
            "Upgrade: SPDY/3.1",
            "x-test-echo: raw",
            "Authorization: Bearer pod-a",
        ],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 429 "), "{head}");
    // The node's tunnel, one the classifier cannot read, still gets a kept slot.
    let (head, mut conn) = upgrade_at(
        plain_to(hub.proxy),
        "/api/v1/namespaces/Not_A_Namespace/pods/web-1/exec?command=cat",
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 101 Switching Protocols",
        "{head}"
    );
    echo_byte_for_byte(&mut conn);
}

#[test]
fn an_open_tunnel_does_not_hold_the_hubs_shutdown() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-shutdown");
    let mut hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let (head, conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let started = std::time::Instant::now();
    signal(hub.pid(), "TERM");
    let status = hub.wait_exit();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Ended by the hub's stop flag within its tick, inside the drain's 3 s.
    assert!(hub.logs().contains("ended=stopped"), "{}", hub.logs());
    drop(conn);
}

#[test]
fn a_cloud_that_never_answers_the_upgrade_is_a_504() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-silent");
    let hub = Hub::start(
        &HubSpec::for_cloud(&cloud, dir.path()).with(&["--test-only-tunnel-answer-seconds=1"]),
    );
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-upgrade: silent"],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 504 "), "{head}");
    let status: serde_json::Value = serde_json::from_str(&body(&head, &mut conn)).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 504);
}

#[test]
fn offline_an_upgrade_is_a_503_that_says_the_cloud_is_needed() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-offline");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(30)));
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 503 "), "{head}");
    let status: serde_json::Value = serde_json::from_str(&body(&head, &mut conn)).unwrap();
    assert_eq!(status["kind"], "Status");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("exec, attach and port-forward need it"),
        "{message}"
    );
}

#[test]
fn an_upgrade_without_an_upgrade_header_or_with_a_body_is_a_400_and_the_clouds_refusal_is_passed_back()
 {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-refusals");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let (head, mut conn) = upgrade(plain_to(hub.proxy), &[]);
    assert!(status_line(&head).starts_with("HTTP/1.1 400 "), "{head}");
    let status: serde_json::Value = serde_json::from_str(&body(&head, &mut conn)).unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Upgrade header"),
        "{status}"
    );

    // A body before the new protocol: refused; an empty chunked one is no body.
    let with_body = format!(
        "POST {EXEC} HTTP/1.1\r\nHost: hub\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nx-test-echo: raw\r\nContent-Length: 5\r\n\r\nhello"
    );
    let answer = raw(hub.proxy, with_body.as_bytes());
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(answer.contains("no request body"), "{answer}");
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &[
            "Upgrade: SPDY/3.1",
            "x-test-echo: raw",
            "Transfer-Encoding: chunked\r\n\r\n0",
        ],
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    conn.write_all(b"after an empty body").unwrap();
    conn.close_write();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"after an empty body");

    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-upgrade: status=403"],
    );
    assert!(status_line(&head).starts_with("HTTP/1.1 403 "), "{head}");
    assert!(
        body(&head, &mut conn).contains("refused by the test"),
        "the cloud's own body"
    );
}

#[test]
fn a_quiet_tunnel_ends_at_the_idle_limit() {
    let cloud = Cloud::start();
    let dir = TempDir::new("tunnel-idle");
    let hub = Hub::start(
        &HubSpec::for_cloud(&cloud, dir.path()).with(&["--test-only-tunnel-idle-seconds=2"]),
    );
    let (head, mut conn) = upgrade(
        plain_to(hub.proxy),
        &["Upgrade: SPDY/3.1", "x-test-echo: raw"],
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    conn.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    conn.read_exact(&mut back).unwrap();
    let quiet = std::time::Instant::now();
    let mut rest = Vec::new();
    // The hub closes the tunnel: the client reads its end, not its own read timeout.
    conn.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let waited = quiet.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(30),
        "closed after {waited:?}"
    );
    assert!(hub.wait_log_line(
        |l| l.contains("cache=tunnel") && l.contains("ended=idle"),
        Duration::from_secs(5)
    ));
}
