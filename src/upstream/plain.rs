//! The exchange of every bounded request (all but a stream's: gets, lists, writes, the hub's
//! own short exchanges) on a pooled connection, done here rather than by ureq's `Agent::run`.
//!
//! Why: for a small get ureq's exchange cost ~50 K instructions beyond the TLS records
//! themselves (callgrind, the `get_cost` driver): a URL built and parsed, an `http::Request`
//! and two `HeaderMap`s, ureq-proto's state machine, a resolver call and a pool purge per
//! request, a chain of five body readers. Here the head is written straight into the
//! connection's output buffer, the answer's head is read by `http1::response` and its body by
//! `http1::BodyState` (the tunnels' and the server's own parsers), and an idle connection is
//! taken by its server's base URL. ureq stays for what a stream needs (a connection of its
//! own, its cancel handle), and its transport API stays below both: the connections are made
//! by the same connector chain (`socket.rs`, `tls_conn.rs`, `conn.rs`, `retire.rs`) and read
//! and written through its `Transport` and `Buffers`.

use std::io::{self, BufRead, Read};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use ureq::Timeout;
use ureq::http;
use ureq::unversioned::resolver::Resolver;
use ureq::unversioned::transport::time::{Duration as UreqDuration, Instant as UreqInstant};
use ureq::unversioned::transport::{ConnectionDetails, NextTimeout, Transport};

use super::UpstreamError;
use crate::http1::response::{AnswerFraming, ResponseHead, read_response_head};
use crate::http1::{BodyState, Framing};

/// Makes a new connection (the agents' connector chain, boxed).
pub(super) type Connect =
    dyn Fn(&ConnectionDetails) -> Result<Box<dyn Transport>, ureq::Error> + Send + Sync;

/// An idle connection and the server it goes to.
struct Idle {
    base: Arc<str>,
    transport: Box<dyn Transport>,
    since: Instant,
}

/// The idle connections of one identity, most recently used last.
type IdleList = Mutex<Vec<Idle>>;

/// The connections of one identity (with the hub's client certificate or without): made by
/// `connect`, kept idle up to `max_idle` for `max_age`.
pub(super) struct Plain {
    connect: Box<Connect>,
    /// What the connector chain reads (buffer sizes, no-delay).
    config: ureq::config::Config,
    resolver: Box<dyn Resolver>,
    idle: Arc<IdleList>,
    max_idle: usize,
    max_age: Duration,
    connect_timeout: Duration,
}

/// The time a bounded exchange has: `total` for the whole of it, `per_read` for each read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    deadline: Instant,
    per_read: Option<Duration>,
}

impl Limits {
    /// `total` from now, each read at most `per_read`.
    pub(super) fn new(total: Duration, per_read: Option<Duration>) -> Limits {
        Limits {
            deadline: Instant::now() + total,
            per_read,
        }
    }

    /// What is left of the whole exchange, or `step` when it is shorter (reported as its
    /// reason); each read at most `per_read` (the socket applies it).
    fn next(&self, step: Option<(Duration, Timeout)>) -> NextTimeout {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let (after, reason) = match step {
            Some((limit, reason)) if limit < left => (limit, reason),
            _ => (left, Timeout::Global),
        };
        NextTimeout {
            after: UreqDuration::Exact(after),
            reason,
            per_read: self.per_read.map(UreqDuration::Exact),
            per_write: None,
        }
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

impl Plain {
    /// Connections made by `connect` (read with `config`, resolved by `resolver`), up to
    /// `max_idle` kept for `max_age`, each new one made within `connect_timeout`.
    pub(super) fn new(
        connect: Box<Connect>,
        config: ureq::config::Config,
        resolver: Box<dyn Resolver>,
        max_idle: usize,
        max_age: Duration,
        connect_timeout: Duration,
    ) -> Plain {
        Plain {
            connect,
            config,
            resolver,
            idle: Arc::new(Mutex::new(Vec::new())),
            max_idle,
            max_age,
            connect_timeout,
        }
    }

    /// An open idle connection to `base`, if any, with the pool's name of its server (one
    /// the server closed meanwhile, or that a TLS swap retired, is dropped).
    fn take(&self, base: &str) -> Option<(Box<dyn Transport>, Arc<str>)> {
        loop {
            let (idle, aged) = {
                let mut list = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                // Aged ones go first (rare: after a quiet spell), closed outside the lock.
                let now = Instant::now();
                let aged: Vec<Idle> = list
                    .extract_if(.., |i| now.duration_since(i.since) >= self.max_age)
                    .collect();
                let at = list.iter().rposition(|i| &*i.base == base);
                (at.map(|at| list.remove(at)), aged)
            };
            drop(aged);
            let Idle {
                base,
                mut transport,
                ..
            } = idle?;
            if transport.is_open() {
                return Some((transport, base));
            }
        }
    }

    /// A connection to `base`: an idle one, or a new one within the connect timeout (and
    /// what is left of `limits`); with the name of its server it goes back to the pool under
    /// (made once per connection, not per request).
    fn connection(
        &self,
        base: &str,
        limits: &Limits,
    ) -> Result<(Box<dyn Transport>, Arc<str>), UpstreamError> {
        if let Some(pooled) = self.take(base) {
            return Ok(pooled);
        }
        let error = |e| transport_error(base, e);
        let uri: http::Uri = base.parse().map_err(|e: http::uri::InvalidUri| {
            UpstreamError::Request(format!("the server URL {base}: {e}"))
        })?;
        let timeout = limits.next(Some((self.connect_timeout, Timeout::Connect)));
        let addrs = self
            .resolver
            .resolve(&uri, &self.config, timeout)
            .map_err(error)?;
        let run_connector: Arc<Connect> =
            Arc::new(|_: &ConnectionDetails| Err(ureq::Error::ConnectionFailed));
        let details = ConnectionDetails {
            uri: &uri,
            addrs,
            config: &self.config,
            request_level: false,
            resolver: &*self.resolver,
            now: UreqInstant::Exact(Instant::now()),
            timeout,
            current_time: Arc::new(UreqInstant::now),
            run_connector,
            register_shutdown: Arc::new(|_| Ok(())),
        };
        let transport = (self.connect)(&details).map_err(error)?;
        if details.needs_tls() && !transport.is_tls() {
            return Err(error(ureq::Error::TlsRequired));
        }
        Ok((transport, Arc::from(base)))
    }

    /// Sends `head` (a whole request head, see [`Head`]) and `body` to `base` and reads the
    /// answer's head within `limits`; the body follows in the [`PlainBody`]. `sent` is told
    /// the bytes of the body sent once the request went on the link (a connection was had).
    pub(super) fn exchange(
        &self,
        base: &str,
        head: &[u8],
        bodiless_answer: bool,
        body: Option<(&mut dyn Read, bool)>,
        limits: Limits,
        sent: &mut dyn FnMut(u64),
    ) -> Result<(ResponseHead, PlainBody), UpstreamError> {
        let (mut transport, server) = self.connection(base, &limits)?;
        let t = &mut *transport;
        let cloud = |e: ureq::Error| transport_error(base, e);
        // On the link from here: the request may be delivered, whole or in part.
        let mut body_sent = 0;
        let result = write_all(t, head, &limits)
            .map_err(cloud)
            .and_then(|()| match body {
                Some((reader, chunked)) => {
                    send_body(t, reader, chunked, &limits, base, &mut body_sent)
                }
                None => Ok(()),
            });
        sent(body_sent);
        result?;
        let mut input = Input {
            transport: t,
            limits: &limits,
        };
        let answer = read_response_head(&mut input).map_err(|e| cloud(ureq::Error::from(e)))?;
        let framing = if bodiless_answer || answer.status == 101 {
            Some(Framing::None)
        } else {
            match answer.framing().map_err(|e| cloud(ureq::Error::from(e)))? {
                AnswerFraming::Length(0) => Some(Framing::None),
                AnswerFraming::Length(n) => Some(Framing::Length(n)),
                AnswerFraming::Chunked => Some(Framing::Chunked),
                AnswerFraming::Close => None,
            }
        };
        // A connection the server closes after this answer, or switched, is never pooled.
        let reusable = answer.status != 101
            && framing.is_some()
            && !crate::http1::has_token(&answer.headers, "connection", "close");
        let mut body = PlainBody {
            transport: Some(transport),
            state: framing.map(BodyState::new),
            limits,
            home: reusable.then(|| (Arc::downgrade(&self.idle), server, self.max_idle)),
        };
        if body.state == Some(BodyState::Done) {
            body.finish();
        }
        Ok((answer, body))
    }
}

/// Writes `data` through `t`'s output buffer within `limits`.
fn write_all(t: &mut dyn Transport, mut data: &[u8], limits: &Limits) -> Result<(), ureq::Error> {
    while !data.is_empty() {
        let out = t.buffers().output();
        let n = out.len().min(data.len());
        out[..n].copy_from_slice(&data[..n]);
        t.transmit_output(n, limits.next(None))?;
        data = &data[n..];
    }
    Ok(())
}

/// Sends the client's body from `reader`, chunked or as it is, counting its bytes in
/// `total`. A failed read is
/// the client's failure ([`UpstreamError::ClientBody`]); time running out before the whole
/// body was read is the client's too ([`UpstreamError::ClientTooSlow`]).
fn send_body(
    t: &mut dyn Transport,
    reader: &mut dyn Read,
    chunked: bool,
    limits: &Limits,
    base: &str,
    total: &mut u64,
) -> Result<(), UpstreamError> {
    let too_slow = || UpstreamError::ClientTooSlow(Timeout::Global.to_string());
    // Room for a chunk's size line and its CRLF around the data.
    const FRAME: usize = crate::http1::response::CHUNK_SIZE_LINE + 2;
    loop {
        if limits.expired() {
            return Err(too_slow());
        }
        let out = t.buffers().output();
        let room = if chunked {
            out.len() - FRAME
        } else {
            out.len()
        };
        let start = if chunked { FRAME - 2 } else { 0 };
        let n = loop {
            match reader.read(&mut out[start..start + room]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(UpstreamError::ClientBody(e.to_string())),
            }
        };
        *total += n as u64;
        let amount = if chunked {
            let mut line = [0u8; crate::http1::response::CHUNK_SIZE_LINE];
            if n == 0 {
                out[..5].copy_from_slice(crate::http1::response::LAST_CHUNK);
                5
            } else {
                let size = crate::http1::response::chunk_size_line(n, &mut line);
                // The size line goes right before the data.
                let at = start - size.len();
                out[at..start].copy_from_slice(size);
                out.copy_within(at..start + n, 0);
                out[n + size.len()..n + size.len() + 2].copy_from_slice(b"\r\n");
                n + size.len() + 2
            }
        } else {
            n
        };
        if amount > 0 {
            match t.transmit_output(amount, limits.next(None)) {
                Err(ureq::Error::Timeout(_)) => return Err(too_slow()),
                Err(e) => return Err(transport_error(base, e)),
                Ok(()) => {}
            }
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// A transport's input as `BufRead`, each wait within `limits`. A ureq error travels inside the `io::Error` and comes out whole.
struct Input<'t> {
    transport: &'t mut dyn Transport,
    limits: &'t Limits,
}

impl Read for Input<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Input<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.transport.buffers().input().is_empty() {
            let timeout = self.limits.next(None);
            if timeout.after.is_zero() {
                return Err(ureq::Error::Timeout(timeout.reason).into_io());
            }
            self.transport
                .await_input(timeout)
                .map_err(ureq::Error::into_io)?;
        }
        Ok(self.transport.buffers().input())
    }

    fn consume(&mut self, amount: usize) {
        self.transport.buffers().input_consume(amount);
    }
}

/// An answer's body on a pooled connection, which goes back to its pool once the body was
/// read to its end (dropped before that, it is closed).
pub(crate) struct PlainBody {
    /// None once the body ended.
    transport: Option<Box<dyn Transport>>,
    /// Where the body stands; None: until the server closes.
    state: Option<BodyState>,
    limits: Limits,
    /// The pool it goes back to, its server, and the most the pool keeps; None: not
    /// reusable.
    home: Option<(Weak<IdleList>, Arc<str>, usize)>,
}

impl PlainBody {
    /// The body ended: its connection back to the pool when it can carry another request.
    fn finish(&mut self) {
        let Some(mut transport) = self.transport.take() else {
            return;
        };
        let Some((idle, base, max_idle)) = self.home.take() else {
            return;
        };
        // Bytes past the body, or a retired connection: not reused.
        if !transport.buffers().input().is_empty() || !transport.is_open() {
            return;
        }
        let Some(idle) = idle.upgrade() else {
            return;
        };
        let mut list = idle.lock().unwrap_or_else(PoisonError::into_inner);
        list.push(Idle {
            base,
            transport,
            since: Instant::now(),
        });
        // The oldest go first (dropped outside the lock).
        let over = list.len().saturating_sub(max_idle);
        let dropped: Vec<Idle> = list.drain(..over).collect();
        drop(list);
        drop(dropped);
    }
}

impl Read for PlainBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(transport) = self.transport.as_mut() else {
            return Ok(0);
        };
        let mut input = Input {
            transport: &mut **transport,
            limits: &self.limits,
        };
        let n = match &mut self.state {
            Some(state) => state.read_limited(&mut input, buf, u64::MAX)?,
            // Until the server closes.
            None => input.read(buf)?,
        };
        if n == 0 && !buf.is_empty() {
            self.finish();
        }
        Ok(n)
    }
}

/// A request head written for the wire: the request line, `Host`, then the fields added.
pub(super) struct Head {
    bytes: Vec<u8>,
}

impl Head {
    /// `method target` to `base` (`scheme://authority[/prefix]`), with its `Host`.
    pub(super) fn new(method: &str, base: &str, target: &str) -> Result<Head, UpstreamError> {
        let (https, rest) = if let Some(rest) = base.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = base.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(UpstreamError::Request(format!(
                "the server URL {base} is not http(s)"
            )));
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        // The scheme's own port is left out, as ureq wrote it.
        let host = authority
            .strip_suffix(if https { ":443" } else { ":80" })
            .unwrap_or(authority);
        let mut bytes = Vec::with_capacity(512);
        for part in [
            method,
            " ",
            prefix,
            target,
            " HTTP/1.1\r\nhost: ",
            host,
            "\r\n",
        ] {
            bytes.extend_from_slice(part.as_bytes());
        }
        if !is_token(method) || !valid_value(target) || target.contains(' ') {
            return Err(UpstreamError::Request(
                "a request line with control characters".into(),
            ));
        }
        Ok(Head { bytes })
    }

    /// Adds `name: value`; a name that is not a token, or a value with a line break or a
    /// NUL, is refused.
    pub(super) fn add(&mut self, name: &str, value: &str) -> Result<(), UpstreamError> {
        if !is_token(name) || !valid_value(value) {
            return Err(UpstreamError::Request(format!(
                "an invalid header {name:?}"
            )));
        }
        for part in [name, ": ", value, "\r\n"] {
            self.bytes.extend_from_slice(part.as_bytes());
        }
        Ok(())
    }

    /// The whole head, with its blank line.
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.bytes.extend_from_slice(b"\r\n");
        self.bytes
    }
}

/// No line break and no NUL: nothing that could end a header or the head early (the
/// client's own headers were parsed by httparse, which refuses every control character but
/// a tab; this guards the head whatever its source). memchr, not a byte loop: at opt-level
/// z the loop took twice the instructions, even on short values.
fn valid_value(s: &str) -> bool {
    memchr::memchr3(b'\r', b'\n', 0, s.as_bytes()).is_none()
}

/// A method or header name: visible ASCII without a colon (a superset of RFC 9110's token
/// that still cannot break the head).
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b > b' ' && b < 0x7f && b != b':')
}

/// The request went on the link: it was answered, or failed after connecting (it may have
/// been sent whole or in part). A failure to connect sent nothing.
pub(super) fn on_the_link<T>(result: &Result<T, ureq::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => !never_connected(e),
    }
}

/// The failure came before a connection existed: the request cannot have been delivered.
fn never_connected(error: &ureq::Error) -> bool {
    matches!(
        error,
        ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
    ) || matches!(error, ureq::Error::Io(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotConnected))
}

/// The [`UpstreamError`] of a request to `server` that ureq could not complete.
pub(super) fn transport_error(server: &str, error: ureq::Error) -> UpstreamError {
    let timeout = matches!(error, ureq::Error::Timeout(_))
        || matches!(&error, ureq::Error::Io(e) if e.kind() == io::ErrorKind::TimedOut);
    // Failures before a connection exists cannot have delivered the request.
    let before_connecting = never_connected(&error);
    UpstreamError::Transport {
        server: server.to_owned(),
        detail: error.to_string(),
        timeout,
        maybe_sent: !before_connecting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(base: &str, target: &str) -> String {
        let mut head = Head::new("GET", base, target).unwrap();
        head.add("Accept", "application/json").unwrap();
        String::from_utf8(head.finish()).unwrap()
    }

    #[test]
    fn a_head_names_its_host_as_ureq_did_and_keeps_the_servers_path_prefix() {
        assert_eq!(
            head("https://10.0.0.1:6443", "/api?x=1"),
            "GET /api?x=1 HTTP/1.1\r\nhost: 10.0.0.1:6443\r\nAccept: application/json\r\n\r\n"
        );
        // The scheme's own port is left out.
        assert!(head("https://apiserver:443", "/api").contains("\r\nhost: apiserver\r\n"));
        assert!(head("http://[::1]:80", "/api").contains("\r\nhost: [::1]\r\n"));
        assert!(head("http://[::1]:8080", "/api").contains("\r\nhost: [::1]:8080\r\n"));
        assert!(
            head("https://lb/k8s", "/api").starts_with("GET /k8s/api HTTP/1.1\r\nhost: lb\r\n")
        );
    }

    #[test]
    fn nothing_that_could_break_the_head_is_written() {
        let mut head = Head::new("GET", "https://a", "/").unwrap();
        assert!(head.add("X-A", "b\r\nX-Injected: 1").is_err());
        assert!(head.add("X-A", "b\nc").is_err());
        assert!(head.add("X-A: b", "c").is_err());
        assert!(head.add("", "c").is_err());
        assert!(head.add("X-A", "tab\tand obs-text \u{e9}").is_ok());
        assert!(Head::new("GET", "https://a", "/a b").is_err());
        assert!(Head::new("G T", "https://a", "/").is_err());
        assert!(Head::new("GET", "ftp://a", "/").is_err());
    }
}
