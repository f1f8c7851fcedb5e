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
    let (mut a, mut client) = UnixStream::pair().unwrap();
    let (mut b, cloud) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let stopped = Arc::clone(&stop);
    let splice = thread::spawn(move || {
        let spliced = splice(&mut a, b"", &mut b, b"", Duration::from_secs(30), &|| {
            stopped.load(Ordering::Relaxed)
        });
        (spliced, a)
    });
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
    let (spliced, a) = splice.join().unwrap();
    assert_eq!(spliced.how, Ended::Stopped);
    let drain = |s: &UnixStream| {
        s.set_nonblocking(true).unwrap();
        let mut total = 0usize;
        let mut buf = [0u8; 64 * 1024];
        while let Ok(n @ 1..) = (&*s).read(&mut buf) {
            total += n;
        }
        total
    };
    // What left the hub is in the cloud's socket; what the hub did not read is still in
    // the client's. The rest, what the hub held, is at most one read.
    let at_cloud = drain(&cloud);
    let unread = drain(&a);
    assert_eq!(spliced.up as usize, at_cloud);
    let held = sent - at_cloud - unread;
    assert!(
        held <= BUFFER,
        "the hub held {held} bytes ({sent} sent, {at_cloud} at the cloud, {unread} unread)"
    );
}

/// A side that always has bytes to give and always takes them: a splice between two
/// such never waits.
struct Endless(UnixStream);

impl End for Endless {
    fn fd(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        Ok(data.len())
    }
    fn flush_out(&mut self) -> io::Result<bool> {
        Ok(true)
    }
    fn close_write(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_stop_flag_ends_a_tunnel_whose_bytes_never_pause() {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let (done, ended) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let (x, y) = UnixStream::pair().unwrap();
        let spliced = splice(
            &mut Endless(x),
            b"",
            &mut Endless(y),
            b"",
            Duration::from_secs(30),
            &|| stopped.load(Ordering::Relaxed),
        );
        let _ = done.send(spliced.how);
    });
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    assert_eq!(
        ended.recv_timeout(Duration::from_secs(5)),
        Ok(Ended::Stopped)
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
    // A TCP pair for the client's side: its close with a zero linger is a reset.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut a, _) = listener.accept().unwrap();
    let (mut b, mut cloud) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let splice =
        thread::spawn(move || splice(&mut a, b"", &mut b, b"", Duration::from_secs(30), &|| false));
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket of ours and a `linger` of the size given.
    #[allow(unsafe_code, reason = "std cannot set SO_LINGER")]
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&client),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    drop(client);
    let spliced = splice.join().unwrap();
    assert_eq!(spliced.how, Ended::Broken);
    // Both sides are dropped: the cloud sees its connection end.
    assert_eq!(read_all(&cloud), b"");
    let _ = cloud.write_all(b"to nobody");
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
pub(crate) fn tls_configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
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

/// CPU time a thread of this process has used (utime + stime), in clock ticks.
fn cpu_ticks(tid: libc::pid_t) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // After the command name's closing parenthesis: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn a_tls_side_that_does_not_read_leaves_the_hub_waiting_not_spinning() {
    let (server_config, client_config) = tls_configs();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The cloud finishes its handshake, then reads nothing until released; then everything.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let far = thread::spawn(move || {
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        let conn =
            rustls::ClientConnection::new(client_config, "127.0.0.1".try_into().unwrap()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        released.recv().unwrap();
        let mut got = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = tls.read(&mut buf) {
            got += n;
        }
        got
    });
    let (mut sock, _) = listener.accept().unwrap();
    let mut conn = rustls::ServerConnection::new(server_config).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    sock.set_nonblocking(true).unwrap();
    let mut cloud_end = TlsEnd {
        tls: conn,
        sock,
        shutting: false,
    };
    let (mut client_hub, mut client) = UnixStream::pair().unwrap();
    client_hub.set_nonblocking(true).unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let splice = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        #[allow(unsafe_code, reason = "the thread's id, for its CPU time")]
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        splice(
            &mut client_hub,
            b"",
            &mut cloud_end,
            b"",
            Duration::from_secs(30),
            &|| false,
        )
    });
    let tid = tid_rx.recv().unwrap();
    // The client writes until the cloud's socket, the hub's one read and its own socket
    // are full.
    client
        .set_write_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let chunk = [9u8; 64 * 1024];
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Ok(n) = Write::write(&mut client, &chunk) {
        sent += n;
        assert!(
            Instant::now() < deadline,
            "the client's writes never stalled"
        );
    }
    // Stalled for a second: the hub waits in `poll` for the cloud's socket to take bytes.
    let before = cpu_ticks(tid);
    thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(tid) - before;
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code, reason = "clock ticks per second")]
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    assert!(
        used * 1000 / per_second < 100,
        "the splice used {used} ticks of CPU in a second while the cloud read nothing"
    );
    // Released, the cloud gets every byte; the client's end reaches it as a close_notify.
    release.send(()).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(far.join().unwrap(), sent);
    assert_eq!(read_all(&client), b"");
    let spliced = splice.join().unwrap();
    assert_eq!((spliced.up as usize, spliced.how), (sent, Ended::Closed));
}

#[test]
fn a_tunnels_socket_is_kept_alive_so_a_dead_link_ends_it_within_minutes() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    keep_alive(fd).unwrap();
    let get = |level, name| {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for the call; the socket is open.
        #[allow(unsafe_code, reason = "std reads no keepalive")]
        let rc = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                std::ptr::addr_of_mut!(value).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        value
    };
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
    // A silent peer is given up after 30 s + 3 × 10 s; unacknowledged bytes after 60 s.
    let idle = get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE);
    let interval = get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL);
    let probes = get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT);
    assert_eq!((idle, interval, probes), (30, 10, 3));
    assert!(idle + interval * probes <= 120);
    assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 60_000);
}
