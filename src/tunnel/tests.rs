//! The splice over socket pairs: each test holds the far ends of both sides.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::*;

/// A splice on its own thread between two socket pairs; the test gets the far ends.
fn start(
    a_early: &'static [u8],
    b_early: &'static [u8],
    idle: Duration,
    stop: Arc<AtomicBool>,
) -> (UnixStream, UnixStream, thread::JoinHandle<Spliced>) {
    let (mut a, client) = UnixStream::pair().unwrap();
    let (mut b, cloud) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let splice = thread::spawn(move || {
        splice(&mut a, a_early, &mut b, b_early, idle, &|| {
            stop.load(Ordering::Relaxed)
        })
    });
    (client, cloud, splice)
}

fn read_all(mut s: &UnixStream) -> Vec<u8> {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn bytes_pass_both_ways_early_ones_first_and_each_end_is_passed_on() {
    let stop = Arc::new(AtomicBool::new(false));
    let (mut client, mut cloud, splice) =
        start(b"early-up ", b"early-down ", Duration::from_secs(30), stop);
    client.write_all(b"stdin").unwrap();
    cloud.write_all(b"stdout").unwrap();
    let mut got = [0u8; 14];
    cloud.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"early-up stdin");
    let mut got = [0u8; 17];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"early-down stdout");

    // Half-close: the client's end reaches the cloud, which still answers after it.
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    (&cloud).read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "the client's end arrives as the end: {rest:?}"
    );
    cloud.write_all(b" after the client's end").unwrap();
    cloud.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_all(&client), b" after the client's end");

    let spliced = splice.join().unwrap();
    assert_eq!(spliced.how, Ended::Closed);
    assert_eq!(spliced.up, 14);
    assert_eq!(spliced.down, 17 + 23);
}

#[test]
fn a_mebibyte_each_way_arrives_whole_while_both_sides_write_at_once() {
    let stop = Arc::new(AtomicBool::new(false));
    let (client, cloud, splice) = start(b"", b"", Duration::from_secs(30), stop);
    let up: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let down: Vec<u8> = (0..1 << 20).map(|i| (i % 241) as u8).collect();
    let echo_side = |mut s: UnixStream, data: Vec<u8>| {
        thread::spawn(move || {
            let mut w = s.try_clone().unwrap();
            let writer = thread::spawn(move || {
                w.write_all(&data).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            writer.join().unwrap();
            got
        })
    };
    let at_cloud = echo_side(cloud, up.clone());
    let at_client = echo_side(client, down.clone());
    // Each side sent the other's expectation: what arrives is what the other side wrote.
    assert!(at_cloud.join().unwrap() == down);
    assert!(at_client.join().unwrap() == up);
    let spliced = splice.join().unwrap();
    assert_eq!(
        (spliced.up, spliced.down, spliced.how),
        (1 << 20, 1 << 20, Ended::Closed)
    );
}

#[test]
fn a_side_that_does_not_read_stops_the_hub_reading_the_other() {
    let stop = Arc::new(AtomicBool::new(false));
    let (mut client, cloud, splice) = start(b"", b"", Duration::from_secs(30), Arc::clone(&stop));
    // The cloud reads nothing: the client's writes stall once the sockets' buffers and the
    // hub's one read are full, rather than piling up in the hub.
    client
        .set_write_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let chunk = [7u8; 64 * 1024];
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match Write::write(&mut client, &chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    assert!(
        Instant::now() < deadline,
        "the client's writes never stalled"
    );
    stop.store(true, Ordering::Relaxed);
    let spliced = splice.join().unwrap();
    assert_eq!(spliced.how, Ended::Stopped);
    // What left the hub went into the cloud's socket; what the hub held is one read.
    let mut held_by_cloud = 0usize;
    cloud.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64 * 1024];
    while let Ok(n @ 1..) = (&cloud).read(&mut buf) {
        held_by_cloud += n;
    }
    assert_eq!(spliced.up as usize, held_by_cloud);
    assert!(
        sent >= held_by_cloud,
        "{sent} sent, {held_by_cloud} delivered"
    );
}

#[test]
fn a_quiet_tunnel_ends_at_the_idle_limit_and_activity_restarts_it() {
    let stop = Arc::new(AtomicBool::new(false));
    let (mut client, mut cloud, splice) = start(b"", b"", Duration::from_millis(600), stop);
    let started = Instant::now();
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(300));
        client.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        cloud.read_exact(&mut one).unwrap();
    }
    let spliced = splice.join().unwrap();
    assert_eq!(spliced.how, Ended::Idle);
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(spliced.up, 3);
}

#[test]
fn a_reset_side_breaks_the_tunnel() {
    let stop = Arc::new(AtomicBool::new(false));
    let (client, mut cloud, splice) = start(b"", b"", Duration::from_secs(30), stop);
    drop(client);
    // The client's end is passed on, and the cloud's answer then finds nobody.
    assert_eq!(read_all(&cloud), b"");
    let _ = cloud.write_all(b"to nobody");
    let spliced = splice.join().unwrap();
    assert!(
        matches!(spliced.how, Ended::Broken | Ended::Closed),
        "{spliced:?}"
    );
}

/// A TLS end as the hub's are made: rustls of either side over a non-blocking socket.
struct TlsEnd<C> {
    tls: C,
    sock: std::net::TcpStream,
    shutting: bool,
}

impl End for TlsEnd<rustls::ServerConnection> {
    fn fd(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        tls::read(&mut self.tls, &self.sock, buf)
    }
    fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        tls::write(&mut self.tls, data)
    }
    fn flush_out(&mut self) -> io::Result<bool> {
        tls::flush(&mut self.tls, &self.sock, &mut self.shutting)
    }
    fn close_write(&mut self) -> io::Result<()> {
        tls::close_write(&mut self.tls, &self.sock, &mut self.shutting)
    }
}

/// A server and a client configuration over one self-signed certificate for 127.0.0.1.
fn tls_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

#[test]
fn over_tls_a_first_flight_rustls_already_holds_is_passed_on_and_close_notify_is_the_end() {
    let (server_config, client_config) = tls_configs();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The client sends its first 64 KiB at once behind the handshake, then its
    // close_notify, and reads what comes back to the end.
    let up: Vec<u8> = (0..64 * 1024).map(|i| (i % 253) as u8).collect();
    let sent = up.clone();
    let client = thread::spawn(move || {
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let conn =
            rustls::ClientConnection::new(client_config, "127.0.0.1".try_into().unwrap()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        tls.write_all(&sent).unwrap();
        tls.conn.send_close_notify();
        tls.flush().unwrap();
        let mut down = Vec::new();
        tls.read_to_end(&mut down).unwrap();
        down
    });
    let (mut sock, _) = listener.accept().unwrap();
    let mut conn = rustls::ServerConnection::new(server_config).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    // Whatever the handshake read past its end stays decrypted in rustls, which `poll`
    // cannot see: the splice must find it.
    sock.set_nonblocking(true).unwrap();
    let mut client_end = TlsEnd {
        tls: conn,
        sock,
        shutting: false,
    };
    let (mut cloud_hub, mut cloud) = UnixStream::pair().unwrap();
    cloud_hub.set_nonblocking(true).unwrap();
    let splice = thread::spawn(move || {
        splice(
            &mut client_end,
            b"",
            &mut cloud_hub,
            b"",
            Duration::from_secs(30),
            &|| false,
        )
    });
    let mut got = Vec::new();
    cloud.read_to_end(&mut got).unwrap();
    assert!(got == up, "{} bytes of {} arrived", got.len(), up.len());
    // The client's close_notify arrived as the end; the cloud answers after it.
    cloud.write_all(b"exit status 0").unwrap();
    cloud.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(client.join().unwrap(), b"exit status 0");
    let spliced = splice.join().unwrap();
    assert_eq!(
        (spliced.up, spliced.down, spliced.how),
        (64 * 1024, 13, Ended::Closed)
    );
}
