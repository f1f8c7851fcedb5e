//! The client side: the only module that touches client sockets. One thread with a small
//! stack per connection, a cap on connections and a cap on requests in flight
//! (`--max-requests-in-flight`, 429 with `Retry-After`). At the connection cap the accept
//! thread closes the connection that has waited longest for its request head — one that
//! never sent a request before an idle keep-alive one — so clients that never finish their
//! headers cannot lock others out; only when every connection is serving a request does a
//! new one get 429. Threads stay bounded either way. Requests are framed by `http1.rs`;
//! responses are written here with explicit framing (`Content-Length`, or chunks flushed one
//! by one so watch events reach the client at once).
//!
//! Why not tiny_http, which the project started with: its connection pool spawns a thread per
//! connection without bound, sets no timeouts (an idle or silent connection holds a thread
//! forever), and its pool can leave a new connection waiting until another one closes (a
//! lost wake-up in `TaskPool::spawn`); and it gives no way to close a connection whose
//! answer broke off. BENCHMARKS.md has the flood measurements.

use std::io::{self, BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::http1::{self, BodyState, HeadError, RequestHead};
use crate::metrics::{METRICS, Metrics};
use crate::status::Status;

/// Time an idle keep-alive connection is kept (Go clients keep idle connections 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to send a whole request head once it started.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one read of a request body, or one write of a response, may take (the default of
/// [`Limits::io_timeout`]). It bounds the whole operation, not each system call: a client
/// that takes a few bytes now and then does not restart it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Unread request body drained after an answer to keep the connection; more closes it.
const MAX_DRAIN: u64 = 1024 * 1024;
/// Read buffer of a connection: a request head fits; bodies bypass it.
const READ_BUFFER: usize = 4 * 1024;
/// Largest request body, the apiserver's own limit: a larger one is refused with 413 before
/// it is read (a chunked one once it has grown past it).
pub const MAX_BODY: u64 = 3 * 1024 * 1024;

/// The answer to a request body larger than [`MAX_BODY`].
pub fn body_too_large() -> Status {
    Status::new(
        413,
        "RequestEntityTooLarge",
        format!("the request body is larger than its limit of {MAX_BODY} bytes"),
    )
}

/// A bound listening socket.
pub struct Listener {
    socket: TcpListener,
    addr: SocketAddr,
}

/// Connections the kernel may hold completed for the accept thread. std listens with 128;
/// a burst of connections past that has its handshakes dropped and retried a second or
/// more later. Go servers, the apiserver among them, ask for the system maximum likewise.
const BACKLOG: i32 = 4096;

/// Binds `addr` (port 0 picks a free port).
#[allow(unsafe_code, reason = "std has no way to set the listen backlog")]
pub fn bind(addr: SocketAddr) -> io::Result<Listener> {
    use std::os::fd::AsRawFd;
    let socket = TcpListener::bind(addr)?;
    // Listening again on a listening socket only changes its backlog (the kernel caps it
    // at net.core.somaxconn).
    // SAFETY: the descriptor is the listener's own and open for the call.
    if unsafe { libc::listen(socket.as_raw_fd(), BACKLOG) } != 0 {
        log::warn!(
            "cannot raise the listen backlog of {addr}: {}",
            io::Error::last_os_error()
        );
    }
    let addr = socket.local_addr()?;
    Ok(Listener { socket, addr })
}

impl Listener {
    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Wakes a listener blocked in `accept` (after its shutdown flag is set).
pub fn wake(addr: SocketAddr) {
    let target = match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
        }
        other => other,
    };
    let _ = TcpStream::connect_timeout(&target, Duration::from_millis(200));
}

/// The caps of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections (one thread each); past it, 429 at accept.
    pub max_connections: usize,
    /// Requests being served; past it, 429.
    pub max_in_flight: usize,
    /// Stack of each connection thread.
    pub stack_size: usize,
    /// Time one read of a request body, or one write of an answer, may take.
    pub io_timeout: Duration,
}

/// Connections and requests being served, shared with whoever waits for them to drain.
#[derive(Debug, Default)]
pub struct Load {
    connections: AtomicUsize,
    in_flight: AtomicUsize,
    /// Every open connection, for the accept thread to pick one to evict at the cap.
    open: Mutex<Vec<Arc<Tracked>>>,
    /// Counts the times a connection started waiting for a head: the order to evict in.
    waits: AtomicU64,
}

impl Load {
    /// Requests being served now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn open(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Tracked>>> {
        // The list stays consistent whatever a panicking holder did: each step is one push,
        // one swap_remove or one scan.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the open connection that has waited longest for a request head, preferring one
    /// that never sent a request; false when every connection is serving a request.
    fn evict_one(&self) -> bool {
        let mut open = self.open();
        let Some((index, _)) = open
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.rank.load(Ordering::Acquire)))
            .filter(|&(_, rank)| rank != BUSY)
            .min_by_key(|&(_, rank)| rank)
        else {
            return false;
        };
        let victim = open.swap_remove(index);
        drop(open);
        victim.rank.store(BUSY, Ordering::Release);
        // Its thread, blocked reading a head, sees the end of the stream and exits.
        let _ = victim.stream.shutdown(Shutdown::Both);
        Metrics::inc(&METRICS.evicted_connections);
        true
    }

    fn forget(&self, tracked: &Arc<Tracked>) {
        let mut open = self.open();
        if let Some(i) = open.iter().position(|t| Arc::ptr_eq(t, tracked)) {
            open.swap_remove(i);
        }
    }
}

/// Rank of a connection serving a request: never evicted.
const BUSY: u64 = u64::MAX;
/// Added to the rank of a connection idle between requests, so connections that never sent
/// a request (a slow-header flood) are evicted before a component's keep-alive connection.
const IDLE_RANK: u64 = 1 << 62;

/// What the accept thread knows of an open connection.
#[derive(Debug)]
struct Tracked {
    /// A handle on the connection's socket: shutting it down ends the connection.
    stream: TcpStream,
    /// [`BUSY`], or the order to evict in while waiting for a head: when it started
    /// waiting (a [`Load::waits`] count), plus [`IDLE_RANK`] after a first request.
    rank: AtomicU64,
}

impl Tracked {
    fn waiting(&self, load: &Load, served_before: bool) {
        let since = load.waits.fetch_add(1, Ordering::Relaxed);
        let rank = if served_before {
            IDLE_RANK + since
        } else {
            since
        };
        self.rank.store(rank, Ordering::Release);
    }

    /// Marks the connection serving a request; false when the accept thread evicted it
    /// meanwhile (its socket is shut down: the request must not be served).
    fn busy(&self) -> bool {
        self.rank.swap(BUSY, Ordering::AcqRel) != BUSY
    }
}

/// Connections served past the cap while the ones evicted for them close: their threads
/// exit as soon as they see the shutdown, so a small margin keeps threads bounded.
fn eviction_margin(max_connections: usize) -> usize {
    max_connections / 4 + 1
}

/// Longest the accept thread waits for evicted connections to close before it refuses one.
const ADMIT_WAIT: Duration = Duration::from_millis(500);

/// Takes a connection slot for a new connection: a free one, or one freed by evicting the
/// connection that waited longest for a head. False when every connection is serving a
/// request. Only the accept thread adds connections, so the count it reads cannot grow
/// behind its back.
fn admit(load: &Load, max_connections: usize) -> bool {
    let ceiling = max_connections + eviction_margin(max_connections);
    let deadline = Instant::now() + ADMIT_WAIT;
    loop {
        let open = load.connections.load(Ordering::Acquire);
        if open < max_connections || (open < ceiling && load.evict_one()) {
            load.connections.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        // Below the ceiling with nothing to evict: every connection is serving a request.
        // At the ceiling, evicted threads are still on their way out (a flood of
        // connections outruns them): wait for them, the kernel's backlog holds the rest.
        if open < ceiling || Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// A request handler; it must answer through the [`Exchange`].
pub type Handler = Arc<dyn Fn(Exchange<'_>) + Send + Sync>;

/// Accepts connections until `shutdown` is set (then [`wake`] the listener).
pub fn serve(
    listener: Listener,
    handler: Handler,
    limits: Limits,
    load: Arc<Load>,
    shutdown: Arc<AtomicBool>,
) {
    let mut last_error_log: Option<Instant> = None;
    while !shutdown.load(Ordering::Acquire) {
        let (stream, peer) = match listener.socket.accept() {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: keep the listener, slow down.
                if last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    log::error!("accepting a connection on {} failed: {e}", listener.addr);
                    last_error_log = Some(Instant::now());
                }
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shutdown.load(Ordering::Acquire) {
            break;
        }
        if !admit(&load, limits.max_connections) {
            refuse(stream, &too_busy(limits.max_connections, "connections"));
            continue;
        }
        let handle = match stream.try_clone() {
            Ok(handle) => handle,
            Err(e) => {
                load.connections.fetch_sub(1, Ordering::AcqRel);
                log::error!("cannot track a connection: {e}");
                refuse(
                    stream,
                    &Status::service_unavailable("the hub is out of resources"),
                );
                continue;
            }
        };
        let tracked = Arc::new(Tracked {
            stream: handle,
            rank: AtomicU64::new(BUSY),
        });
        tracked.waiting(&load, false);
        load.open().push(Arc::clone(&tracked));
        // From here the slot is released however the connection ends.
        let slot = ConnectionSlot {
            load: Arc::clone(&load),
            tracked: Arc::clone(&tracked),
        };
        let (handler, shutdown) = (Arc::clone(&handler), Arc::clone(&shutdown));
        let spawned = thread::Builder::new()
            .name("conn".into())
            .stack_size(limits.stack_size)
            .spawn(move || {
                let slot = slot;
                serve_connection(stream, peer, &handler, limits, &slot, &shutdown);
            });
        if let Err(e) = spawned {
            // The closure, and with it the slot and the stream, is dropped: answer through
            // the tracking handle.
            log::error!("cannot start a connection thread: {e}");
            if let Ok(stream) = tracked.stream.try_clone() {
                refuse(
                    stream,
                    &Status::service_unavailable("the hub cannot start a thread right now"),
                );
            }
        }
    }
}

fn too_busy(limit: usize, what: &str) -> Status {
    Metrics::inc(&METRICS.rejected_requests);
    Status::too_many_requests(
        format!("the hub is serving its maximum of {limit} {what}; retry shortly"),
        1,
    )
}

/// Answers a connection the hub will not serve, without reading its request, and closes it.
fn refuse(mut stream: TcpStream, status: &Status) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_status_and_close(&mut stream, status);
}

/// Writes `status` as a whole answer that says `Connection: close`, then closes the socket.
fn write_status_and_close(stream: &mut TcpStream, status: &Status) -> io::Result<()> {
    stream.write_all(&closing_answer(status))?;
    stream.shutdown(Shutdown::Both)
}

/// `status` as a whole answer, head and body, that says `Connection: close`.
fn closing_answer(status: &Status) -> Vec<u8> {
    let body = status.to_json();
    let retry = status
        .retry_after
        .map(|s| format!("Retry-After: {s}\r\n"))
        .unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\n{retry}Content-Length: {}\r\nConnection: close\r\n\r\n",
        status.code,
        reason_phrase(status.code),
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Frees a connection slot, and forgets the connection, when its thread ends however it ends.
struct ConnectionSlot {
    load: Arc<Load>,
    tracked: Arc<Tracked>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.load.forget(&self.tracked);
        self.load.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Frees a request slot when the request ends.
struct RequestSlot<'a>(&'a Load);

impl Drop for RequestSlot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One client connection: the socket and what has been read from it.
struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    peer: SocketAddr,
    /// The response was written whole; the connection may serve another request.
    response_complete: bool,
    /// The response head went out.
    response_started: bool,
    /// Something went wrong on the connection: close it after this exchange.
    broken: bool,
    /// Request body bytes read so far.
    body_read: u64,
    /// Reading the request body failed: the answer the client gets for it.
    body_failure: Option<Status>,
    /// While a request head, or one read of a body, is read: when it must be complete.
    deadline: Option<Instant>,
    /// Time one body read or one answer write may take.
    io_timeout: Duration,
    /// The socket's send timeout as last set (`None`: not set yet).
    send_timeout: Option<Duration>,
    /// The socket's read timeout as last set by [`Conn::arm_read`] (`None`: unknown).
    read_timeout: Option<Duration>,
}

/// A read timeout this close to what is left of a deadline is kept, not set again: each
/// body read arms a fresh deadline of one read timeout, microseconds after the last.
const REARM_SLACK: Duration = Duration::from_millis(1);

impl Conn {
    /// Gives the next read of the socket what is left until the deadline, if one is set: a
    /// whole-operation deadline, not a per-read one, so a client dribbling a byte at a time
    /// cannot hold the connection longer.
    fn arm_read(&mut self) -> io::Result<()> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing in time",
                ));
            }
            if self
                .read_timeout
                .is_none_or(|t| t.abs_diff(left) > REARM_SLACK)
            {
                self.stream.set_read_timeout(Some(left))?;
                self.read_timeout = Some(left);
            }
        }
        Ok(())
    }

    fn set_send_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        if self.send_timeout != Some(timeout) {
            self.stream.set_write_timeout(Some(timeout))?;
            self.send_timeout = Some(timeout);
        }
        Ok(())
    }

    /// Writes all of `parts` within one write timeout. The socket's own timeout bounds each
    /// system call, and a client that takes a few bytes now and then would restart it with
    /// every partial write (holding a thread and a full send buffer for minutes): after a
    /// partial write the next call gets only what is left of the operation's time.
    fn send(&mut self, mut parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
        let deadline = Instant::now() + self.io_timeout;
        self.set_send_timeout(self.io_timeout)?;
        while !parts.is_empty() {
            match self.stream.write_vectored(parts) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the client stopped reading",
                    ));
                }
                Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not read its answer in time",
                    ));
                }
                Err(e) => return Err(e),
            }
            if parts.is_empty() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not read its answer in time",
                ));
            }
            self.set_send_timeout(left)?;
        }
        Ok(())
    }

    /// Writes `data` within one write timeout (see [`Conn::send`]).
    fn send_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.send(&mut [io::IoSlice::new(data)])
    }
}

impl Read for Conn {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.len && out.len() >= self.buf.len() {
            // Large reads bypass the buffer.
            self.arm_read()?;
            return self.stream.read(out);
        }
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Conn {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.len {
            self.arm_read()?;
            self.len = self.stream.read(&mut self.buf)?;
            self.pos = 0;
        }
        Ok(&self.buf[self.pos..self.len])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.len);
    }
}

fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    handler: &Handler,
    limits: Limits,
    slot: &ConnectionSlot,
    shutdown: &AtomicBool,
) {
    let (load, tracked) = (&*slot.load, &*slot.tracked);
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        stream,
        buf: vec![0u8; READ_BUFFER].into_boxed_slice(),
        pos: 0,
        len: 0,
        peer,
        response_complete: false,
        response_started: false,
        broken: false,
        body_read: 0,
        body_failure: None,
        deadline: None,
        io_timeout: limits.io_timeout,
        send_timeout: None,
        read_timeout: None,
    };
    let mut first = true;
    loop {
        // Wait for the next request, then give the head a deadline. A new connection gets
        // only the head's time to start talking, so silent connections do not pile up.
        // The accept thread marked a new connection waiting, in the order they came.
        let wait = if first {
            HEAD_TIMEOUT
        } else {
            tracked.waiting(load, true);
            IDLE_TIMEOUT
        };
        first = false;
        let _ = conn.stream.set_read_timeout(Some(wait));
        conn.read_timeout = None;
        match conn.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(_) => {}
        }
        conn.deadline = Some(Instant::now() + HEAD_TIMEOUT);
        let head = http1::read_head(&mut conn);
        conn.deadline = None;
        if !tracked.busy() {
            return;
        }
        let head = match head {
            Ok(head) => head,
            Err(e) => {
                if let Some(code) = e.status() {
                    log::debug!("bad request from {peer}: {e}");
                    let status = match e {
                        HeadError::UriTooLong => {
                            Status::new(code, "RequestURITooLong", e.to_string())
                        }
                        HeadError::TooLarge(_) => {
                            Status::new(code, "RequestHeaderFieldsTooLarge", e.to_string())
                        }
                        HeadError::Io(_) => {
                            Status::new(code, "Timeout", "the request head did not arrive in time")
                        }
                        _ => Status::new(code, "BadRequest", e.to_string()),
                    };
                    let _ = answer_and_close(&mut conn, &status);
                }
                return;
            }
        };
        let framing = match head.framing() {
            Ok(http1::Framing::Length(n)) if n > MAX_BODY => {
                let _ = answer_and_close(&mut conn, &body_too_large());
                return;
            }
            Ok(framing) => framing,
            Err(e) => {
                let _ = answer_and_close(&mut conn, &Status::bad_request(e.to_string()));
                return;
            }
        };
        let keep_alive = head.keep_alive() && !shutdown.load(Ordering::Acquire);
        conn.response_complete = false;
        conn.response_started = false;
        conn.body_read = 0;
        conn.body_failure = None;
        let continue_pending = framing != http1::Framing::None && head.expects_continue();
        let exchange = Exchange {
            conn: &mut conn,
            head: Box::new(head),
            body: BodyState::new(framing),
            keep_alive,
            continue_pending,
        };
        if load.in_flight.fetch_add(1, Ordering::AcqRel) >= limits.max_in_flight {
            load.in_flight.fetch_sub(1, Ordering::AcqRel);
            let _ = exchange.send_status(&too_busy(limits.max_in_flight, "requests in flight"));
        } else {
            let _slot = RequestSlot(load);
            handler(exchange);
        }
        if !conn.response_started {
            // A handler that forgot to answer: say so rather than leave the client waiting.
            log::error!("a request from {peer} got no answer");
            let _ = answer_and_close(
                &mut conn,
                &Status::internal("the hub did not answer this request"),
            );
            return;
        }
        if !keep_alive || !conn.response_complete || conn.broken {
            let _ = conn.stream.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Answers a request whose connection cannot carry another, and closes it.
fn answer_and_close(conn: &mut Conn, status: &Status) -> io::Result<()> {
    conn.response_started = true;
    conn.send_all(&closing_answer(status))?;
    conn.stream.shutdown(Shutdown::Both)
}

/// One request and the means to answer it.
pub struct Exchange<'c> {
    conn: &'c mut Conn,
    // Boxed: exchanges travel by value through results, and the head is the bulk of one.
    head: Box<RequestHead>,
    body: BodyState,
    /// The connection may serve another request after this one (the client asked for it
    /// and the hub is not shutting down).
    keep_alive: bool,
    /// `Expect: 100-continue` with a body, not yet answered.
    continue_pending: bool,
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Exactly this many bytes follow (`Content-Length`).
    Known(u64),
    /// Bytes follow as they come (chunked; close-delimited for HTTP/1.0 clients).
    Streamed,
}

impl<'c> Exchange<'c> {
    /// The request method.
    pub fn method(&self) -> &str {
        &self.head.method
    }

    /// The request target: path and query, as sent.
    pub fn url(&self) -> &str {
        &self.head.target
    }

    /// Request headers as (name, value).
    pub fn headers(&self) -> &[(String, String)] {
        &self.head.headers
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// `Content-Length` of the request body, when the client sent one.
    pub fn body_length(&self) -> Option<u64> {
        match self.body {
            BodyState::Length(n) => Some(n),
            _ => None,
        }
    }

    /// True when reading the body failed because it went past [`MAX_BODY`] (answer with
    /// [`body_too_large`]).
    pub fn body_too_large(&self) -> bool {
        self.conn
            .body_failure
            .as_ref()
            .is_some_and(|s| s.code == 413)
    }

    /// When reading the body failed, the answer for it: the client's error, never the
    /// cloud's — 400 for a body that is malformed or ends early, 408 for one that stalls past
    /// the read timeout, 413 past [`MAX_BODY`]. The connection closes after it (the framing
    /// is lost).
    pub fn body_failure(&self) -> Option<Status> {
        self.conn.body_failure.clone()
    }

    /// Records that the body cannot be read to its end in time (the request's own time ran
    /// out while it trickled in): the answer is `status`, and the rest of the body is not
    /// read — the connection closes after the answer.
    pub fn fail_body(&mut self, status: Status) {
        self.conn.broken = true;
        self.conn.body_failure = Some(status);
    }

    /// True when the request carries a body.
    pub fn has_body(&self) -> bool {
        self.body != BodyState::Done
    }

    /// The request body.
    pub fn body(&mut self) -> &mut dyn Read {
        self
    }

    /// The peer address.
    pub fn remote(&self) -> SocketAddr {
        self.conn.peer
    }

    /// Sends the status line and headers; the body follows through the returned writer.
    /// `headers` must not contain framing headers (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`): this function writes those.
    pub fn start<N: AsRef<str>, V: AsRef<str>>(
        mut self,
        status: u16,
        headers: &[(N, V)],
        length: Length,
    ) -> io::Result<BodyWriter<'c>> {
        self.finish_request_body();
        // A body found broken only now (its handler never read it: an answer from the cache)
        // is still the client's error: it gets that, not the answer meant for a good request.
        if let Some(failure) = self.conn.body_failure.take_if(|f| f.code != status) {
            log::debug!(
                "answering {} rather than {status}: {}",
                failure.code,
                failure.message
            );
            let _ = answer_and_close(self.conn, &failure);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the request body was broken: {}", failure.message),
            ));
        }
        let http10 = self.head.minor_version == 0;
        let keep_alive = self.keep_alive;
        let no_body = self.head.method == "HEAD" || status == 204 || status == 304;
        let framing = match length {
            Length::Known(n) => ResponseFraming::Known(n),
            Length::Streamed if no_body => ResponseFraming::Known(0),
            Length::Streamed if http10 => ResponseFraming::Close,
            Length::Streamed => ResponseFraming::Chunked,
        };
        let mut head = Vec::with_capacity(256);
        // Writing into a Vec cannot fail.
        let _ = write!(head, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
        for (name, value) in headers {
            let (name, value) = (name.as_ref(), value.as_ref());
            if value.contains(['\r', '\n']) || name.contains(['\r', '\n', ':']) {
                continue; // never let a header split the response
            }
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        match (length, framing) {
            (Length::Known(n), _) => {
                let _ = write!(head, "Content-Length: {n}\r\n");
            }
            (_, ResponseFraming::Chunked) => {
                head.extend_from_slice(b"Transfer-Encoding: chunked\r\n")
            }
            _ => {}
        }
        // Say so when the connection will not serve another request (an unread body, an
        // unanswered Expect), so the client does not send one into a closing socket.
        if !keep_alive || framing == ResponseFraming::Close || self.conn.broken {
            head.extend_from_slice(b"Connection: close\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let conn = self.conn;
        conn.response_started = true;
        // One write, and no waiting: a watch client needs the head before any event.
        conn.send_all(&head)?;
        Ok(BodyWriter {
            conn,
            framing: if no_body {
                ResponseFraming::Known(0)
            } else {
                framing
            },
            discard: no_body,
        })
    }

    /// Answers with a complete body.
    pub fn send<N: AsRef<str>, V: AsRef<str>>(
        self,
        status: u16,
        headers: &[(N, V)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut writer = self.start(status, headers, Length::Known(body.len() as u64))?;
        writer.write(body)?;
        writer.finish()
    }

    /// Answers with a Kubernetes `Status`.
    pub fn send_status(self, status: &Status) -> io::Result<()> {
        let retry = status.retry_after.map(|s| s.to_string());
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(retry) = retry.as_deref() {
            headers.push(("Retry-After", retry));
        }
        self.send(status.code, &headers, &status.to_json())
    }

    /// Before answering: drain a small unread body so the connection can serve the next
    /// request, or mark the connection for closing.
    fn finish_request_body(&mut self) {
        if self.body == BodyState::Done {
            return;
        }
        // A body that failed is not read again: its framing is lost, and one that stalled
        // would hold the answer another read timeout.
        if matches!(self.body, BodyState::Length(n) if n > MAX_DRAIN)
            || self.continue_pending
            || self.conn.body_failure.is_some()
        {
            self.conn.broken = true;
            return;
        }
        let mut sink = [0u8; 4096];
        let mut drained = 0u64;
        loop {
            match read_body(self.conn, &mut self.body, &mut sink, u64::MAX) {
                Ok(0) => return,
                Ok(n) => {
                    drained += n as u64;
                    if drained > MAX_DRAIN {
                        self.conn.broken = true;
                        return;
                    }
                }
                Err(e) => {
                    self.conn.broken = true;
                    self.conn.body_failure = Some(body_error(&e));
                    return;
                }
            }
        }
    }
}

impl Read for Exchange<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let (_, mut body) = self.parts();
        body.read(out)
    }
}

/// The request body, borrowed apart from the head so both can be used at once.
pub struct RequestBody<'a> {
    conn: &'a mut Conn,
    state: &'a mut BodyState,
    /// `Expect: 100-continue` not yet answered: cleared when it is.
    continue_pending: Option<&'a mut bool>,
}

/// One read of a request body, within one read timeout however many reads of the socket
/// it takes (a size line, then data); a chunk announcing more than `limit` bytes is refused
/// at its size line.
fn read_body(
    conn: &mut Conn,
    state: &mut BodyState,
    out: &mut [u8],
    limit: u64,
) -> io::Result<usize> {
    conn.deadline = Some(Instant::now() + conn.io_timeout);
    let result = state.read_limited(conn, out, limit);
    conn.deadline = None;
    result
}

impl Read for RequestBody<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(status) = &self.conn.body_failure {
            // Read again after it failed (a retry): the same failure, not a desynchronised
            // read of the framing.
            return Err(io::Error::other(status.message.clone()));
        }
        if let Some(pending) = self.continue_pending.take() {
            *pending = false;
            self.conn.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let limit = MAX_BODY.saturating_sub(self.conn.body_read);
        let result = read_body(self.conn, self.state, out, limit).and_then(|n| {
            self.conn.body_read += n as u64;
            // A declared length was checked at once; a chunked body is refused as soon as a
            // chunk would take it past the limit.
            let promised = match *self.state {
                BodyState::Chunk(left) => left,
                _ => 0,
            };
            if self.conn.body_read.saturating_add(promised) > MAX_BODY {
                self.conn.body_failure = Some(body_too_large());
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the request body is larger than its limit",
                ));
            }
            Ok(n)
        });
        if let Err(e) = &result {
            self.conn.broken = true;
            if self.conn.body_failure.is_none() {
                self.conn.body_failure = Some(body_error(e));
            }
        }
        result
    }
}

/// The answer to a request whose body could not be read.
fn body_error(e: &io::Error) -> Status {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            Status::request_timeout("the request body stalled: no bytes within the read timeout")
        }
        io::ErrorKind::FileTooLarge => body_too_large(),
        _ => Status::bad_request(format!("cannot read the request body: {e}")),
    }
}

impl Exchange<'_> {
    /// The head and the body reader together (forwarding needs both at once).
    pub fn parts(&mut self) -> (&RequestHead, RequestBody<'_>) {
        let pending = self.continue_pending;
        let body = RequestBody {
            conn: self.conn,
            state: &mut self.body,
            continue_pending: pending.then_some(&mut self.continue_pending),
        };
        (&self.head, body)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponseFraming {
    Known(u64),
    Chunked,
    Close,
}

/// Writes a response body with the framing chosen in [`Exchange::start`]; every write goes
/// out at once so watch events reach the client without delay.
pub struct BodyWriter<'c> {
    conn: &'c mut Conn,
    framing: ResponseFraming,
    /// HEAD and bodiless statuses: bytes are counted, not sent.
    discard: bool,
}

/// Writes one chunk — size line, data, CRLF — in one vectored write where the socket takes
/// it (no copy of the data into a frame buffer), within one write timeout.
fn write_chunk(conn: &mut Conn, data: &[u8]) -> io::Result<()> {
    let mut size = [0u8; 18];
    let head = {
        use std::io::Write as _;
        let mut cursor = &mut size[..];
        write!(cursor, "{:x}\r\n", data.len())?;
        let left = cursor.len();
        &size[..18 - left]
    };
    conn.send(&mut [
        io::IoSlice::new(head),
        io::IoSlice::new(data),
        io::IoSlice::new(b"\r\n"),
    ])
}

impl BodyWriter<'_> {
    /// Sends `data` now.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() || self.discard {
            return Ok(());
        }
        let result = match &mut self.framing {
            ResponseFraming::Known(remaining) => {
                if data.len() as u64 > *remaining {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "body longer than its Content-Length",
                    ));
                }
                *remaining -= data.len() as u64;
                self.conn.send_all(data)
            }
            ResponseFraming::Close => self.conn.send_all(data),
            ResponseFraming::Chunked => write_chunk(self.conn, data),
        };
        if result.is_err() {
            self.conn.broken = true;
        }
        result
    }

    /// Ends the body cleanly (the terminal chunk for chunked framing).
    pub fn finish(self) -> io::Result<()> {
        let result = match self.framing {
            ResponseFraming::Chunked => self.conn.send_all(b"0\r\n\r\n"),
            ResponseFraming::Known(0) => Ok(()),
            ResponseFraming::Close => {
                self.conn.broken = true;
                Ok(())
            }
            ResponseFraming::Known(n) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body ended {n} bytes short of its Content-Length"),
            )),
        };
        match &result {
            Ok(()) => self.conn.response_complete = true,
            Err(_) => self.conn.broken = true,
        }
        result
    }

    /// Ends the body so the client sees a failure rather than a short but valid answer: the
    /// connection is closed without the end of the body.
    pub fn abort(self) {
        self.conn.broken = true;
        let _ = self.conn.stream.shutdown(Shutdown::Both);
    }

    /// A handle that tells from another thread whether the client is gone.
    pub fn probe(&self) -> Option<ClientProbe> {
        self.conn.stream.try_clone().ok().map(ClientProbe)
    }

    /// Waits up to `wait` and tells whether the client has closed its side of the
    /// connection (a held watch stops at once when it has). Anything the client sends
    /// meanwhile is read and dropped — a client does not send while it reads a stream — and
    /// the connection is closed after this answer.
    pub fn client_gone(&mut self, wait: Duration) -> bool {
        if self.conn.pos < self.conn.len {
            self.conn.pos = self.conn.len;
            self.conn.broken = true;
        }
        let deadline = Instant::now() + wait;
        let mut scratch = [0u8; 512];
        self.conn.read_timeout = None;
        let gone = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            if self.conn.stream.set_read_timeout(Some(left)).is_err() {
                break true;
            }
            match self.conn.stream.read(&mut scratch) {
                Ok(0) => break true,
                Ok(_) => self.conn.broken = true,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        let _ = self
            .conn
            .stream
            .set_read_timeout(Some(self.conn.io_timeout));
        gone
    }
}

/// Looks at a client connection from another thread while its own thread writes a stream.
pub struct ClientProbe(TcpStream);

impl ClientProbe {
    /// True when the client closed the connection or it broke. Bytes the client sent are
    /// left where they are (a client does not send anything while it reads a stream).
    #[allow(
        unsafe_code,
        reason = "std has no non-blocking peek on a blocking socket"
    )]
    pub fn gone(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut probe = 0u8;
        // MSG_DONTWAIT: the probe never waits (a read timeout would hold the reaper one
        // kernel tick per idle watch), and the socket's flags and timeouts, shared with the
        // connection's thread, stay as they are.
        // SAFETY: `self.0` keeps the descriptor open for the call; the buffer is one byte
        // of ours, valid for writing.
        let n = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                (&raw mut probe).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => true,
            1.. => false,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }
}

/// The standard reason phrase of a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair: the server side to track, the client side to watch.
    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    fn closed(client: &mut TcpStream) -> bool {
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        matches!(client.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn body_reads_one_after_another_keep_the_read_timeout_already_set() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (server, mut client) = pair(&listener);
        let io_timeout = Duration::from_secs(60);
        let mut conn = Conn {
            stream: server,
            buf: vec![0u8; 64].into_boxed_slice(),
            pos: 0,
            len: 0,
            peer: client.local_addr().unwrap(),
            response_complete: false,
            response_started: false,
            broken: false,
            body_read: 0,
            body_failure: None,
            deadline: None,
            io_timeout,
            send_timeout: None,
            read_timeout: None,
        };
        client.write_all(b"5\r\nhello\r\n").unwrap();
        let mut state = BodyState::Chunk(0);
        let mut out = [0u8; 5];
        assert_eq!(
            read_body(&mut conn, &mut state, &mut out, MAX_BODY).unwrap(),
            5
        );
        // Seen through another handle of the socket: a timeout no body read would set.
        let marker = Duration::from_secs(7);
        conn.stream
            .try_clone()
            .unwrap()
            .set_read_timeout(Some(marker))
            .unwrap();
        // The next read's deadline is one read timeout away again: the socket keeps its
        // timeout (no system call to set it again).
        client.write_all(b"5\r\nworld\r\n0\r\n\r\n").unwrap();
        assert_eq!(
            read_body(&mut conn, &mut state, &mut out, MAX_BODY).unwrap(),
            5
        );
        assert_eq!(&out, b"world");
        assert_eq!(conn.stream.read_timeout().unwrap(), Some(marker));
    }

    #[test]
    fn eviction_takes_new_silent_connections_before_idle_ones_and_never_busy_ones() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let load = Load::default();
        let mut clients = Vec::new();
        let mut tracked = Vec::new();
        for _ in 0..4 {
            let (server, client) = pair(&listener);
            let t = Arc::new(Tracked {
                stream: server,
                rank: AtomicU64::new(BUSY),
            });
            load.open().push(Arc::clone(&t));
            clients.push(client);
            tracked.push(t);
        }
        // 0: idle after a request, waiting longest; 1: busy; 2 and 3: never sent a request,
        // 3 waiting longer than 2.
        tracked[0].waiting(&load, true);
        tracked[3].waiting(&load, false);
        tracked[2].waiting(&load, false);

        for expected in [3, 2, 0] {
            assert!(load.evict_one());
            assert!(
                closed(&mut clients[expected]),
                "connection {expected} evicted"
            );
        }
        assert!(!load.evict_one(), "a busy connection is never evicted");
        assert!(!closed(&mut clients[1]));
        assert_eq!(load.open().len(), 1);
        load.forget(&tracked[1]);
        assert!(load.open().is_empty());
    }
}
