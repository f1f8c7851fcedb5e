//! One connection's thread: the buffered socket with its deadlines (a whole-operation
//! deadline for a head or one body read, a send timeout that shrinks after a partial write),
//! and the loop that reads a head, admits the request, hands it to the handler as an
//! [`Exchange`] and keeps the connection or closes it.

use std::io::{self, BufRead, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::admission::Gate;
use super::admission::{Load, Tracked, enter_short};
use super::stream::ClientStream;
use super::{Exchange, Handler, Limits, MAX_BODY, body_too_large, closing_answer, too_busy};
use crate::http1::{self, BodyState};
use crate::requester::Port;
use crate::status::Status;

/// Time an idle keep-alive connection is kept (Go clients keep idle connections 90 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to send a whole request head once it started.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer of a connection: a request head fits; bodies bypass it.
const READ_BUFFER: usize = 4 * 1024;

/// One client connection: the socket and what has been read from it.
pub(super) struct Conn {
    /// Boxed once per connection: every exchange sees the same type whatever the stream.
    pub(super) stream: Box<dyn ClientStream>,
    /// The read buffer, [`READ_BUFFER`] bytes; empty until a read needs it, and while a
    /// streamed answer is written ([`Conn::release_buffer`]).
    pub(super) buf: Box<[u8]>,
    pub(super) pos: usize,
    pub(super) len: usize,
    pub(super) peer: SocketAddr,
    /// The listener the connection came in on.
    pub(super) port: Port,
    /// The response was written whole; the connection may serve another request.
    pub(super) response_complete: bool,
    /// The response head went out.
    pub(super) response_started: bool,
    /// Something went wrong on the connection: close it after this exchange.
    pub(super) broken: bool,
    /// Request body bytes read so far.
    pub(super) body_read: u64,
    /// Reading the request body failed: the answer the client gets for it.
    pub(super) body_failure: Option<Status>,
    /// While a request head, or one read of a body, is read: when it must be complete.
    pub(super) deadline: Option<Instant>,
    /// Time one body read or one answer write may take.
    pub(super) io_timeout: Duration,
    /// The socket's send timeout as last set (`None`: not set yet).
    pub(super) send_timeout: Option<Duration>,
    /// The socket's read timeout as last set (`None`: unknown).
    pub(super) read_timeout: Option<Duration>,
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
    pub(super) fn send(&mut self, mut parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
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

    /// Lets the read buffer go while nothing unread is in it: a streamed answer may last
    /// hours (a watch) and reads nothing more of the request (a client's hang-up is seen
    /// without it: [`Exchange::client_gone`]). The next read makes it again.
    pub(super) fn release_buffer(&mut self) {
        if self.pos == self.len {
            (self.pos, self.len) = (0, 0);
            self.buf = Box::default();
        }
    }

    /// Writes `data` within one write timeout (see [`Conn::send`]).
    pub(super) fn send_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.send(&mut [io::IoSlice::new(data)])
    }
}

impl Read for Conn {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.len && out.len() >= READ_BUFFER {
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
            if self.buf.is_empty() {
                self.buf = vec![0u8; READ_BUFFER].into_boxed_slice();
            }
            self.len = self.stream.read(&mut self.buf)?;
            self.pos = 0;
        }
        Ok(&self.buf[self.pos..self.len])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.len);
    }
}

/// Serves the requests of one connection until it closes, breaks, or stays silent too long.
/// `tracked` is the connection as the accept thread sees it (marked waiting or busy here).
/// Never inlined: the thread's start, below which a watch waits, keeps only its own frame.
#[inline(never)]
pub(super) fn serve_connection(
    stream: Box<dyn ClientStream>,
    (peer, port): (SocketAddr, Port),
    handler: &Handler,
    limits: Limits,
    (load, tracked): (&Load, &Tracked),
    shutdown: &AtomicBool,
) {
    let mut conn = Conn {
        stream,
        buf: Box::default(),
        pos: 0,
        len: 0,
        peer,
        port,
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
    let gate = Gate { load, limits };
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
        // Set only when it changes: a keep-alive connection's requests all wait the same,
        // and a small get costs a few system calls in all (one was this, every request).
        if conn.read_timeout != Some(wait) {
            conn.read_timeout = match conn.stream.set_read_timeout(Some(wait)) {
                Ok(()) => Some(wait),
                Err(_) => None,
            };
        }
        match conn.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(_) => {}
        }
        let Some((head, framing)) = read_request(&mut conn, tracked) else {
            return;
        };
        let keep_alive = head.keep_alive() && !shutdown.load(Ordering::Acquire);
        conn.response_complete = false;
        conn.response_started = false;
        conn.body_read = 0;
        conn.body_failure = None;
        let continue_pending = framing != http1::Framing::None && head.expects_continue();
        let exchange = Exchange {
            conn: &mut conn,
            head,
            body: BodyState::new(framing),
            keep_alive,
            continue_pending,
            gate: &gate,
        };
        if limits.long_running.is_some() {
            // The handler admits the request once it knows what it is (`Exchange::admit`).
            handler(exchange);
        } else if let Some(_slot) = enter_short(load, limits.max_in_flight) {
            handler(exchange);
        } else {
            let _ = exchange.send_status(&too_busy(limits.max_in_flight, "requests in flight"));
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
        if !conn.response_complete {
            // Cut short: no TLS close_notify, so a client sees the answer is not whole.
            let _ = conn.stream.shutdown();
            return;
        }
        if !keep_alive || conn.broken {
            let _ = conn.stream.close();
            return;
        }
    }
}

/// The next request's head, read within [`HEAD_TIMEOUT`], and its body's framing; None when
/// the connection is to close (evicted meanwhile, or the head refused: answered here).
/// Never inlined: the head's parsing and refusals stay out of the frame a watch's whole
/// life runs below.
#[inline(never)]
fn read_request(
    conn: &mut Conn,
    tracked: &Tracked,
) -> Option<(Box<http1::RequestHead>, http1::Framing)> {
    conn.deadline = Some(Instant::now() + HEAD_TIMEOUT);
    let head = http1::read_head(conn);
    conn.deadline = None;
    if !tracked.busy() {
        return None;
    }
    let head = match head {
        Ok(head) => Box::new(head),
        Err(e) => {
            if let Some(status) = Status::for_head(&e) {
                log::debug!("bad request from {}: {e}", conn.peer);
                let _ = answer_and_close(conn, &status);
            }
            return None;
        }
    };
    match head.framing() {
        Ok(http1::Framing::Length(n)) if n > MAX_BODY => {
            let _ = answer_and_close(conn, &body_too_large());
            None
        }
        Ok(framing) => Some((head, framing)),
        Err(e) => {
            // Framing refusals are all malformed heads: always answered (400).
            if let Some(status) = Status::for_head(&e) {
                let _ = answer_and_close(conn, &status);
            }
            None
        }
    }
}

/// Answers a request whose connection cannot carry another, and closes it.
pub(super) fn answer_and_close(conn: &mut Conn, status: &Status) -> io::Result<()> {
    conn.response_started = true;
    conn.send_all(&closing_answer(status))?;
    conn.stream.close()
}
