//! The TLS front of the stand-in cloud: accepts TCP on the public port, does the TLS
//! handshake with rustls (client certificate optional, checked against the test CA), then
//! splices the plaintext to the internal HTTP port (`http1.rs`) over a loopback connection.
//!
//! It records, per internal connection (keyed by that connection's local address, which
//! the internal server sees as the peer address), who presented which certificate, and
//! gives each connection a "closed" signal that watch handlers wait on. It also owns the
//! faults that act on connections: stop/restart of the listener, blackhole, and cutting a
//! connection. It knows nothing about HTTP.
//!
//! It counts the plaintext bytes the internal server writes towards clients (response heads
//! and bodies as the stand-in writes them, before TLS), for the benchmark's link economy.
//!
//! Threads: one acceptor; per connection, one thread client→server (which also did the
//! handshake) and one server→client. Lock order is `conn` (rustls state) before `tx` (the
//! TCP write half), so TLS records leave in the order they were sealed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender, bounded};
use rustls::ServerConnection;
use rustls::server::ServerConfig;

use super::super::pki::{CertSubject, Pki};
use super::super::util::lock;

/// What a request handler may know about the TLS connection it came in on.
#[derive(Clone)]
pub struct ConnView {
    /// The client certificate's identity, if one was presented.
    pub subject: Option<CertSubject>,
    /// Disconnected (never receives) when the client connection is gone.
    pub closed: Receiver<()>,
    /// Connection id, for [`Front::cut`].
    pub id: u64,
}

struct Live {
    tcp: TcpStream,
    internal: Option<(SocketAddr, TcpStream)>,
    cut: Arc<AtomicBool>,
    /// The internal server switched the connection to another protocol (a 101): each
    /// side's end is passed on as a half-close ([`Front::switch_protocols`]).
    switched: Arc<AtomicBool>,
    _closed: Sender<()>,
}

#[derive(Default)]
struct Table {
    live: HashMap<u64, Live>,
    views: HashMap<SocketAddr, ConnView>,
}

struct Acceptor {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// The TLS front.
pub struct Front {
    tls: Arc<ServerConfig>,
    internal: SocketAddr,
    pki: Pki,
    public: Mutex<Option<SocketAddr>>,
    table: Mutex<Table>,
    held: Mutex<Vec<TcpStream>>,
    gate: Arc<Gate>,
    acceptor: Mutex<Option<Acceptor>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
    /// Plaintext bytes forwarded from the internal server to clients, all connections.
    sent: Arc<AtomicU64>,
}

impl Front {
    /// A front for the internal server at `internal`; not listening yet.
    pub fn new(tls: Arc<ServerConfig>, internal: SocketAddr, pki: Pki) -> Front {
        Front {
            tls,
            internal,
            pki,
            public: Mutex::new(None),
            table: Mutex::new(Table::default()),
            held: Mutex::new(Vec::new()),
            gate: Arc::new(Gate::default()),
            acceptor: Mutex::new(None),
            next_id: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            sent: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Listens on `addr` (port 0 picks one; later calls reuse the first address).
    /// Returns once the listener is bound: connections are accepted from then on.
    pub fn listen(self: &Arc<Self>, addr: SocketAddr) -> io::Result<SocketAddr> {
        let mut acc = lock(&self.acceptor);
        let mut public = lock(&self.public);
        if let (Some(_), Some(a)) = (acc.as_ref(), *public) {
            return Ok(a);
        }
        let listener = TcpListener::bind(public.unwrap_or(addr))?;
        let bound = listener.local_addr()?;
        *public = Some(bound);
        let stop = Arc::new(AtomicBool::new(false));
        let me = self.clone();
        let stop2 = stop.clone();
        let thread = thread::Builder::new()
            .name("cloud-accept".into())
            .spawn(move || me.accept_loop(listener, &stop2))?;
        *acc = Some(Acceptor { stop, thread });
        Ok(bound)
    }

    /// The public address, once listening has started.
    pub fn public_addr(&self) -> Option<SocketAddr> {
        *lock(&self.public)
    }

    /// Whether the public listener is open.
    pub fn is_listening(&self) -> bool {
        lock(&self.acceptor).is_some()
    }

    fn accept_loop(self: Arc<Self>, listener: TcpListener, stop: &AtomicBool) {
        for s in listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(tcp) = s else { continue };
            self.accepted.fetch_add(1, Ordering::Relaxed);
            if *lock(&self.gate.on) {
                lock(&self.held).push(tcp);
                continue;
            }
            // Registered here, before the thread starts, so that a stop() that has joined
            // this acceptor finds and cuts every connection it let in.
            let Some((id, cut, closed)) = self.register(&tcp) else {
                continue;
            };
            let me = self.clone();
            let spawned = thread::Builder::new()
                .name("cloud-conn".into())
                .spawn(move || me.serve(id, tcp, cut, closed));
            if spawned.is_err() {
                self.forget(id);
            }
        }
    }

    fn register(&self, tcp: &TcpStream) -> Option<(u64, Arc<AtomicBool>, Receiver<()>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cut = Arc::new(AtomicBool::new(false));
        let (tx, rx) = bounded(0);
        let live = Live {
            tcp: tcp.try_clone().ok()?,
            internal: None,
            cut: cut.clone(),
            switched: Arc::default(),
            _closed: tx,
        };
        lock(&self.table).live.insert(id, live);
        Some((id, cut, rx))
    }

    /// Drops a connection's entry; its `closed` signal fires. Its view stays until the
    /// internal side lets it go ([`Front::release_view`]), so a request that arrived just
    /// before the client left is still attributed to the right identity.
    fn forget(&self, id: u64) {
        lock(&self.table).live.remove(&id);
    }

    /// Marks the connection of `internal_peer` as switched to another protocol (the
    /// internal server is about to send a 101): from then on the end of either side's
    /// writing is passed on as the end of writing only (`shutdown(Write)`), so a tunnel's
    /// half-close crosses the front, where an HTTP connection's end closes both ways.
    pub fn switch_protocols(&self, internal_peer: &SocketAddr) {
        let t = lock(&self.table);
        let id = t.views.get(internal_peer).map(|v| v.id);
        if let Some(live) = id.and_then(|id| t.live.get(&id)) {
            live.switched.store(true, Ordering::SeqCst);
        }
    }

    /// Forgets the view of an internal connection that has ended.
    pub fn release_view(&self, internal_peer: &SocketAddr) {
        lock(&self.table).views.remove(internal_peer);
    }

    fn serve(self: Arc<Self>, id: u64, tcp: TcpStream, cut: Arc<AtomicBool>, closed: Receiver<()>) {
        log::trace!("cloud conn {id}: accepted from {:?}", tcp.peer_addr());
        match self.run(id, tcp, &cut, closed) {
            Ok(()) => log::trace!("cloud conn {id}: closed"),
            Err(e) => log::trace!("cloud conn {id}: {e}"),
        }
        self.forget(id);
    }

    fn run(
        &self,
        id: u64,
        mut tcp: TcpStream,
        cut: &Arc<AtomicBool>,
        closed: Receiver<()>,
    ) -> io::Result<()> {
        tcp.set_nodelay(true)?;
        let mut conn = ServerConnection::new(self.tls.clone()).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        let subject = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| self.pki.lookup(c.as_ref()));
        let internal = TcpStream::connect(self.internal)?;
        internal.set_nodelay(true)?;
        let iaddr = internal.local_addr()?;
        log::trace!("cloud conn {id}: TLS up, internal {iaddr}");
        let switched = {
            let mut t = lock(&self.table);
            let Some(live) = t.live.get_mut(&id) else {
                return Ok(());
            };
            if cut.load(Ordering::SeqCst) {
                return Ok(());
            }
            live.internal = Some((iaddr, internal.try_clone()?));
            let switched = live.switched.clone();
            let view = ConnView {
                subject,
                closed,
                id,
            };
            t.views.insert(iaddr, view);
            switched
        };
        conn.set_buffer_limit(None);
        let splice = Splice {
            id,
            conn: Arc::new(Mutex::new(conn)),
            tx: Arc::new(Mutex::new(tcp.try_clone()?)),
            cut: cut.clone(),
            gate: self.gate.clone(),
            sent: self.sent.clone(),
            switched,
        };
        let out = {
            let (splice, internal) = (splice.clone(), internal.try_clone()?);
            thread::Builder::new()
                .name("cloud-conn-out".into())
                .spawn(move || splice.pump_out(internal))?
        };
        let result = splice.pump_in(tcp, &internal);
        if result.is_ok() && splice.switched.load(Ordering::SeqCst) && !cut.load(Ordering::SeqCst) {
            // A tunnel: the client's end is the end of its writing only; the server side
            // answers until it closes, and the out-pump passes that on.
            let _ = internal.shutdown(Shutdown::Write);
            let _ = out.join();
            let _ = internal.shutdown(Shutdown::Both);
            return result;
        }
        // Whatever ended the client side, the server side ends too; the out-pump then ends.
        let _ = internal.shutdown(Shutdown::Both);
        let _ = out.join();
        result
    }

    /// Looks up the connection an internal request arrived on (by its peer address).
    pub fn view(&self, internal_peer: &SocketAddr) -> Option<ConnView> {
        lock(&self.table).views.get(internal_peer).cloned()
    }

    /// Cuts one connection abruptly once the bytes already written by the server side
    /// have been forwarded: no TLS close_notify, no more data.
    pub fn cut(&self, id: u64) {
        let t = lock(&self.table);
        if let Some(l) = t.live.get(&id) {
            l.cut.store(true, Ordering::SeqCst);
            if let Some((_, s)) = &l.internal {
                // Shutting down our read side lets the out-pump drain what is queued, then
                // see end-of-stream (Linux keeps queued data readable after SHUT_RD).
                let _ = s.shutdown(Shutdown::Read);
            }
        }
        drop(t);
        self.gate.kick();
    }

    /// Closes the public listener (new connections are refused); live ones stay.
    fn close_listener(&self) {
        let acc = lock(&self.acceptor).take();
        if let Some(acc) = acc {
            acc.stop.store(true, Ordering::SeqCst);
            if let Some(a) = *lock(&self.public) {
                // Wakes the blocked accept(); the acceptor sees `stop` and drops the listener.
                let _ = TcpStream::connect(a);
            }
            let _ = acc.thread.join();
        }
    }

    /// Like a crashed process: closes the listener and cuts every connection at once.
    pub fn stop(&self) {
        self.close_listener();
        {
            let t = lock(&self.table);
            for l in t.live.values() {
                l.cut.store(true, Ordering::SeqCst);
                let _ = l.tcp.shutdown(Shutdown::Both);
                if let Some((_, s)) = &l.internal {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
        self.gate.kick();
        self.release_held();
    }

    /// Accept but never answer (new and existing connections stall) when on.
    pub fn set_blackhole(&self, on: bool) {
        self.gate.set(on);
        if !on {
            self.release_held();
        }
    }

    fn release_held(&self) {
        for s in lock(&self.held).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// TLS connections currently open (handshaking or spliced).
    pub fn live_connections(&self) -> usize {
        lock(&self.table).live.len()
    }

    /// TCP connections accepted since start (including blackholed ones).
    pub fn accepted_connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Plaintext bytes sent to clients since start: response heads and bodies (chunk framing
    /// included) as the internal server wrote them, without TLS records.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// The blackhole switch; splice pumps wait on it while it is on.
#[derive(Default)]
struct Gate {
    on: Mutex<bool>,
    wake: Condvar,
}

impl Gate {
    fn wait_open(&self, cut: &AtomicBool) {
        let mut on = lock(&self.on);
        while *on && !cut.load(Ordering::SeqCst) {
            on = self.wake.wait(on).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set(&self, on: bool) {
        *lock(&self.on) = on;
        self.wake.notify_all();
    }

    fn kick(&self) {
        let _on = lock(&self.on);
        self.wake.notify_all();
    }
}

/// Both halves of one spliced connection.
#[derive(Clone)]
struct Splice {
    id: u64,
    conn: Arc<Mutex<ServerConnection>>,
    tx: Arc<Mutex<TcpStream>>,
    cut: Arc<AtomicBool>,
    gate: Arc<Gate>,
    /// The front's count of bytes sent to clients.
    sent: Arc<AtomicU64>,
    /// The connection switched protocols (see [`Live::switched`]).
    switched: Arc<AtomicBool>,
}

impl Splice {
    /// Sends sealed TLS records, keeping the order in which they were sealed: the TCP
    /// write lock is taken before the rustls lock is released.
    fn send_tls(&self, mut conn: std::sync::MutexGuard<'_, ServerConnection>) -> io::Result<()> {
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out)?;
        }
        if out.is_empty() {
            return Ok(());
        }
        let mut tx = lock(&self.tx);
        drop(conn);
        tx.write_all(&out)
    }

    /// Client → server: decrypts what the client sends and writes it to the internal side.
    fn pump_in(&self, mut tcp: TcpStream, internal: &TcpStream) -> io::Result<()> {
        let mut internal = internal;
        let mut buf = vec![0u8; 16 * 1024];
        let mut plain_buf = vec![0u8; 16 * 1024];
        let mut n = 0;
        loop {
            let mut plain = Vec::new();
            let mut peer_closed = false;
            {
                let mut conn = lock(&self.conn);
                let mut input = &buf[..n];
                loop {
                    if !input.is_empty() {
                        conn.read_tls(&mut input)?;
                    }
                    if let Err(e) = conn.process_new_packets() {
                        // Send the alert rustls queued, then give up on this connection.
                        let _ = self.send_tls(conn);
                        return Err(io::Error::other(e));
                    }
                    loop {
                        match conn.reader().read(&mut plain_buf) {
                            Ok(0) => {
                                peer_closed = true;
                                break;
                            }
                            Ok(k) => plain.extend_from_slice(&plain_buf[..k]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if input.is_empty() {
                        break;
                    }
                }
                self.send_tls(conn)?;
            }
            if !plain.is_empty() {
                log::trace!(
                    "cloud splice {}: in {:?}",
                    self.id,
                    String::from_utf8_lossy(&plain[..plain.len().min(50)])
                );
                internal.write_all(&plain)?;
            }
            if peer_closed {
                log::trace!("cloud splice {}: client sent close_notify", self.id);
                return Ok(());
            }
            n = tcp.read(&mut buf)?;
            if n == 0 {
                log::trace!("cloud splice {}: client closed TCP", self.id);
                return Ok(());
            }
            self.gate.wait_open(&self.cut);
            if self.cut.load(Ordering::SeqCst) {
                return Ok(());
            }
        }
    }

    /// Server → client: encrypts what the internal side writes and sends it to the client.
    fn pump_out(self, mut internal: TcpStream) {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = match internal.read(&mut buf) {
                Ok(0) => {
                    log::trace!("cloud splice {}: server side closed", self.id);
                    break;
                }
                Err(e) => {
                    log::trace!("cloud splice: server side: {e}");
                    break;
                }
                Ok(n) => n,
            };
            log::trace!(
                "cloud splice {}: out {:?}",
                self.id,
                String::from_utf8_lossy(&buf[..n.min(40)])
            );
            self.gate.wait_open(&self.cut);
            // Counted before the write, so a client that has read the bytes always finds
            // them counted (counting after raced a fast client on a loaded machine).
            self.sent.fetch_add(n as u64, Ordering::Relaxed);
            let mut conn = lock(&self.conn);
            if conn.writer().write_all(&buf[..n]).is_err() || self.send_tls(conn).is_err() {
                break;
            }
        }
        if !self.cut.load(Ordering::SeqCst) {
            // The internal side closed the connection: end TLS properly.
            let mut conn = lock(&self.conn);
            conn.send_close_notify();
            let _ = self.send_tls(conn);
            if self.switched.load(Ordering::SeqCst) {
                // A tunnel: the server's end is the end of its writing; the client may
                // still send, and the in-pump reads on until it ends.
                let _ = lock(&self.tx).shutdown(Shutdown::Write);
                return;
            }
        }
        let _ = lock(&self.tx).shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::super::super::hub::CloudClient;
    use super::super::Cloud;

    #[test]
    fn bytes_sent_counts_heads_and_bodies_and_watch_events_as_they_go() {
        let cloud = Cloud::start();
        let client = CloudClient::new(&cloud, "admin");
        let before = cloud.bytes_sent();
        let reply = client.get("/api/v1/namespaces/default/services/kubernetes");
        assert_eq!(reply.status, 200, "{}", reply.text());
        // The body and a head (status line, Content-Type, Content-Length: well under 1 KiB).
        let sent = cloud.bytes_sent() - before;
        assert!(
            sent > reply.body.len() as u64 + 40 && sent < reply.body.len() as u64 + 1024,
            "{sent} bytes for a body of {}",
            reply.body.len()
        );

        let (status, mut events) = client.watch("/api/v1/namespaces/shop/configmaps?watch=true");
        assert_eq!(status, 200);
        let before = cloud.bytes_sent();
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": "c", "namespace": "shop"}, "data": {"k": "v".repeat(500)}}),
        );
        let event = events.next_event().expect("an event");
        // Compact JSON has the same length whatever the order of its keys.
        let line = serde_json::to_string(&event).expect("JSON") + "\n";
        // Counted while the watch is open: the event line and its chunk framing, and at most
        // one bookmark line if the watch's bookmark interval passed meanwhile.
        let deadline = Instant::now() + Duration::from_secs(5);
        while cloud.bytes_sent() - before < line.len() as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let sent = cloud.bytes_sent() - before;
        assert!(
            sent >= line.len() as u64 && sent < line.len() as u64 + 256,
            "{sent} bytes for an event line of {}",
            line.len()
        );
    }

    #[test]
    fn cut_watches_cuts_the_watches_of_one_resource_and_nothing_else() {
        let cloud = Cloud::start();
        let client = CloudClient::new(&cloud, "admin");
        let (status, mut pods) = client.watch("/api/v1/namespaces/cut/pods?watch=true");
        assert_eq!(status, 200);
        let (status, mut maps) = client.watch("/api/v1/namespaces/cut/configmaps?watch=true");
        assert_eq!(status, 200);
        assert!(cloud.wait_for_watchers("pods", 1, Duration::from_secs(5)));
        assert!(cloud.wait_for_watchers("configmaps", 1, Duration::from_secs(5)));

        assert_eq!(cloud.cut_watches("pods"), 1);
        // The pod watch ends without an event (cut, no terminal chunk) and its handler goes.
        assert_eq!(pods.next_event(), None);
        assert!(cloud.wait_for_watchers_at_most("pods", 0, Duration::from_secs(5)));
        assert_eq!(cloud.cut_watches("pods"), 0, "nothing left to cut");

        // The other watch and the listener stay up.
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": "c", "namespace": "cut"}}),
        );
        let event = maps
            .next_event()
            .expect("the configmap watch still carries events");
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], "c");
        let reply = client.get("/api/v1/namespaces/cut/configmaps/c");
        assert_eq!(reply.status, 200, "{}", reply.text());
        let (status, mut again) = client.watch("/api/v1/namespaces/cut/pods?watch=true");
        assert_eq!(status, 200);
        cloud.create(
            "pods",
            json!({"metadata": {"name": "p", "namespace": "cut"}, "spec": {"containers": []}}),
        );
        assert_eq!(
            again.next_event().expect("a new pod watch works")["type"],
            "ADDED"
        );
    }
}
