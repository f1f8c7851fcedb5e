//! One request and its answer: [`Exchange`] (the head, the body reader with its
//! body-failure record, the choice of response framing) and [`BodyWriter`] (the body, sent
//! as it comes).

use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

use super::admission::{Gate, LongRunningSlot, RequestSlot, enter_short};
use super::connection::{Conn, answer_and_close};
use super::{ClientProbe, MAX_BODY, body_too_large, refused, too_busy};
use crate::http1::response::{self, CHUNK_SIZE_LINE, ResponseFraming};
use crate::http1::{BodyState, RequestHead};
use crate::requester::Port;
use crate::status::Status;
use crate::tunnel::End;

/// Unread request body drained after an answer to keep the connection; more closes it.
const MAX_DRAIN: u64 = 1024 * 1024;

/// One request and the means to answer it.
pub(crate) struct Exchange<'c> {
    pub(super) conn: &'c mut Conn,
    // Boxed: exchanges travel by value through results, and the head is the bulk of one.
    pub(super) head: Box<RequestHead>,
    pub(super) body: BodyState,
    /// The connection may serve another request after this one (the client asked for it
    /// and the hub is not shutting down).
    pub(super) keep_alive: bool,
    /// `Expect: 100-continue` with a body, not yet answered.
    pub(super) continue_pending: bool,
    /// The listener's counts and caps, for [`Exchange::admit`] (one reference: exchanges
    /// travel by value).
    pub(super) gate: &'c Gate<'c>,
}

/// What a request holds while it is served ([`Exchange::admit`]). An answer that never
/// waits on anything (kubelet's lease from the hub's heartbeat, a refusal) asks for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission<'k> {
    /// A request answered in a bounded time: one of `--max-requests-in-flight`.
    Short,
    /// A watch or another stream held open, counted under its fairness `key` (on the proxy
    /// ports the port, the credential's digest and, for the node, the component; on the
    /// multiplexer port the follower); `node`: the node's own request, which may take the
    /// slots kept for the node and is held only to its key's cap (see
    /// [`LongRunningLimits`](super::LongRunningLimits)).
    LongRunning {
        /// The fairness key.
        key: &'k str,
        /// The node's own request.
        node: bool,
    },
}

/// A slot [`Exchange::admit`] gave; given back when dropped, however the request ends.
/// Neither when the server took the request's slot before the handler saw it.
pub(crate) struct Admitted<'c> {
    _short: Option<RequestSlot<'c>>,
    _long_running: Option<LongRunningSlot<'c>>,
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Length {
    /// Exactly this many bytes follow (`Content-Length`).
    Known(u64),
    /// Bytes follow as they come (chunked; close-delimited for HTTP/1.0 clients).
    Streamed,
}

impl<'c> Exchange<'c> {
    /// The request method.
    pub(crate) fn method(&self) -> &str {
        &self.head.method
    }

    /// The request target: path and query, as sent.
    pub(crate) fn url(&self) -> &str {
        &self.head.target
    }

    /// Request headers as (name, value).
    pub(crate) fn headers(&self) -> &[(String, String)] {
        &self.head.headers
    }

    /// The first header named `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// `Content-Length` of the request body, when the client sent one.
    pub(crate) fn body_length(&self) -> Option<u64> {
        match self.body {
            BodyState::Length(n) => Some(n),
            _ => None,
        }
    }

    /// When reading the body failed, the answer for it: the client's error, never the
    /// cloud's — 400 for a body that is malformed or ends early, 408 for one that stalls past
    /// the read timeout, 413 past [`MAX_BODY`]. The connection closes after it (the framing
    /// is lost).
    pub(crate) fn body_failure(&self) -> Option<Status> {
        self.conn.body_failure.clone()
    }

    /// Records that the body cannot be read to its end in time (the request's own time ran
    /// out while it trickled in): the answer is `status`, and the rest of the body is not
    /// read — the connection closes after the answer.
    pub(crate) fn fail_body(&mut self, status: Status) {
        self.conn.broken = true;
        self.conn.body_failure = Some(status);
    }

    /// True when the request carries a body.
    pub(crate) fn has_body(&self) -> bool {
        self.body != BodyState::Done
    }

    /// The request body.
    pub(crate) fn body(&mut self) -> &mut dyn Read {
        self
    }

    /// The peer address.
    pub(crate) fn remote(&self) -> SocketAddr {
        self.conn.peer
    }

    /// The listener the request came in on.
    pub(crate) fn port(&self) -> Port {
        self.conn.port
    }

    /// Takes the slot `what` needs, to hold until the answer is complete, or the 429 (with
    /// `Retry-After`, counted as a refusal) that says why not. A listener without
    /// `long_running` caps took an in-flight slot for the request already: every admission
    /// succeeds there.
    pub(crate) fn admit(&self, what: Admission<'_>) -> Result<Admitted<'c>, Status> {
        let Gate { load, limits } = *self.gate;
        let mut admitted = Admitted {
            _short: None,
            _long_running: None,
        };
        let Some(long) = limits.long_running else {
            return Ok(admitted);
        };
        match what {
            Admission::Short => {
                let slot = enter_short(load, limits.max_in_flight)
                    .ok_or_else(|| too_busy(limits.max_in_flight, "requests in flight"))?;
                admitted._short = Some(slot);
            }
            Admission::LongRunning { key, node } => {
                load.enter_long_running(key, node, &long)
                    .map_err(|why| refused(format!("{}; retry shortly", why.reason(&long))))?;
                admitted._long_running = Some(LongRunningSlot {
                    load,
                    key: key.into(),
                });
            }
        }
        Ok(admitted)
    }

    /// The client certificates of a TLS connection, leaf first, already verified by the
    /// listener's rustls configuration (the multiplexer port requires them); `None` on a
    /// plain connection, or a TLS one whose client sent none.
    pub(crate) fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.conn.stream.peer_certificates()
    }

    /// Sends the status line and headers; the body follows through the returned writer.
    /// `headers` must not contain framing headers (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`): this function writes those.
    pub(crate) fn start<N: AsRef<str>, V: AsRef<str>>(
        self,
        status: u16,
        headers: &[(N, V)],
        length: Length,
    ) -> io::Result<BodyWriter<'c>> {
        self.respond(status, headers, length, &[])
    }

    /// [`Exchange::start`], with `first`, the start of the body, in the head's write: a small
    /// answer goes out in one system call (and one TCP segment) rather than two.
    fn respond<N: AsRef<str>, V: AsRef<str>>(
        mut self,
        status: u16,
        headers: &[(N, V)],
        length: Length,
        first: &[u8],
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
        let no_body = response::bodiless(&self.head.method, status);
        let length = match length {
            Length::Known(n) => Some(n),
            Length::Streamed => None,
        };
        let framing = response::framing(length, no_body, self.head.minor_version == 0);
        let mut head = Vec::with_capacity(256);
        // Say so when the connection will not serve another request (an unread body, an
        // unanswered Expect), so the client does not send one into a closing socket.
        let close = !self.keep_alive || self.conn.broken;
        response::write_head(&mut head, status, headers, length, framing, close);
        let conn = self.conn;
        conn.response_started = true;
        if length.is_none() {
            conn.release_buffer();
        }
        let mut writer = BodyWriter {
            conn,
            framing: if no_body {
                ResponseFraming::Known(0)
            } else {
                framing
            },
            discard: no_body,
        };
        // One write, and no waiting: a watch client needs the head before any event.
        match &mut writer.framing {
            ResponseFraming::Known(remaining)
                if !no_body && !first.is_empty() && first.len() as u64 <= *remaining =>
            {
                *remaining -= first.len() as u64;
                let sent = writer
                    .conn
                    .send(&mut [io::IoSlice::new(&head), io::IoSlice::new(first)]);
                if sent.is_err() {
                    writer.conn.broken = true;
                }
                sent?;
            }
            _ => {
                writer.conn.send_all(&head)?;
                writer.write(first)?;
            }
        }
        Ok(writer)
    }

    /// Answers with a complete body.
    pub(crate) fn send<N: AsRef<str>, V: AsRef<str>>(
        self,
        status: u16,
        headers: &[(N, V)],
        body: &[u8],
    ) -> io::Result<()> {
        self.respond(status, headers, Length::Known(body.len() as u64), body)?
            .finish()
    }

    /// Switches the connection to another protocol: sends `101 Switching Protocols` with
    /// `headers` (the cloud's), and gives the connection for a tunnel ([`Upgraded`]). The
    /// connection serves no other request: it closes once the tunnel ends.
    pub(crate) fn upgrade<N: AsRef<str>, V: AsRef<str>>(
        self,
        headers: &[(N, V)],
    ) -> io::Result<Upgraded<'c>> {
        let mut head = Vec::with_capacity(256);
        response::write_switching_head(&mut head, headers);
        let conn = self.conn;
        conn.response_started = true;
        // Complete as HTTP goes; broken so the connection loop closes it after the tunnel.
        conn.response_complete = true;
        conn.broken = true;
        conn.send_all(&head)?;
        Ok(Upgraded { conn })
    }

    /// Answers with a Kubernetes `Status`.
    pub(crate) fn send_status(self, status: &Status) -> io::Result<()> {
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

/// A connection after its 101 ([`Exchange::upgrade`]): the client's side of a tunnel.
pub(crate) struct Upgraded<'c> {
    conn: &'c mut Conn,
}

impl Upgraded<'_> {
    /// The bytes the client sent after its request head and the hub read with it (a first
    /// frame may follow the head at once), and the connection as a tunnel's end.
    pub(crate) fn end(&mut self) -> io::Result<(&[u8], &mut dyn End)> {
        let conn = &mut *self.conn;
        let end = conn.stream.tunnel_end()?;
        Ok((&conn.buf[conn.pos..conn.len], end))
    }
}

/// The request body, borrowed apart from the head so both can be used at once.
pub(crate) struct RequestBody<'a> {
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
            self.conn.send_all(response::CONTINUE)?;
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
    pub(crate) fn parts(&mut self) -> (&RequestHead, RequestBody<'_>) {
        let pending = self.continue_pending;
        let body = RequestBody {
            conn: self.conn,
            state: &mut self.body,
            continue_pending: pending.then_some(&mut self.continue_pending),
        };
        (&self.head, body)
    }
}

/// Writes a response body with the framing chosen in [`Exchange::start`]; every write goes
/// out at once so watch events reach the client without delay.
pub(crate) struct BodyWriter<'c> {
    conn: &'c mut Conn,
    framing: ResponseFraming,
    /// HEAD and bodiless statuses: bytes are counted, not sent.
    discard: bool,
}

/// Writes one chunk — size line, data, CRLF — in one vectored write where the socket takes
/// it (no copy of the data into a frame buffer), within one write timeout.
fn write_chunk(conn: &mut Conn, data: &[u8]) -> io::Result<()> {
    let mut size = [0u8; CHUNK_SIZE_LINE];
    let head = response::chunk_size_line(data.len(), &mut size);
    conn.send(&mut [
        io::IoSlice::new(head),
        io::IoSlice::new(data),
        io::IoSlice::new(b"\r\n"),
    ])
}

impl BodyWriter<'_> {
    /// Sends `data` now.
    pub(crate) fn write(&mut self, data: &[u8]) -> io::Result<()> {
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
    pub(crate) fn finish(self) -> io::Result<()> {
        let result = match self.framing {
            ResponseFraming::Chunked => self.conn.send_all(response::LAST_CHUNK),
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
    pub(crate) fn abort(self) {
        self.conn.broken = true;
        let _ = self.conn.stream.shutdown();
    }

    /// A handle that tells from another thread whether the client is gone.
    pub(crate) fn probe(&self) -> Option<ClientProbe> {
        self.conn.stream.probe()
    }

    /// Waits up to `wait` and tells whether the client has closed its side of the
    /// connection (a held watch stops at once when it has). Anything the client sends
    /// meanwhile is read and dropped — a client sends nothing while it reads a stream, but
    /// over TLS its `close_notify`, which reads as the end — and the connection is closed
    /// after this answer.
    pub(crate) fn client_gone(&mut self, wait: Duration) -> bool {
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
