//! The cloud's side of a tunnel (exec, attach, port-forward): [`Upstream::open_tunnel`]
//! dials a server itself — ureq answers a 101 but keeps the socket behind it — with rustls
//! over the agents' TLS material (`Agents::tunnel_hub`/`tunnel_client`, HTTP/1.1 only),
//! sends the upgrade request with the credentials of its identity, and reads the answer's
//! head. What follows a 101 is spliced by `tunnel`; another answer is read whole
//! ([`Opened::read_body`]) and relayed by the proxy.
//!
//! A server is picked as `send` picks one; another is tried only when no connection was
//! made (and the failed one is reported to its health checker). Connecting and the TLS
//! handshake have [`CONNECT_TIMEOUT`]; the answer's head the request's own time (60 s),
//! else a timeout, which the proxy answers 504.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

use super::agents::CONNECT_TIMEOUT;
use super::conn::{conn_server, host_and_port};
use super::token::TokenSource;
use super::{Upstream, UpstreamError, forwarded_headers};
use crate::http1::response::{AnswerFraming, ResponseHead, read_response_head};
use crate::http1::{BodyState, Framing};
use crate::link::{self, LINK, Link};
use crate::metrics::{METRICS, OpenConn};
use crate::route::Identity;
use crate::tunnel::{self, End};

/// Largest body of an answer other than a 101 that is relayed (a `Status`).
pub(crate) const MAX_REFUSAL_BODY: usize = 1024 * 1024;

/// An upgrade request to send to the cloud.
pub(crate) struct TunnelRequest<'a> {
    /// HTTP method (kubectl: GET for WebSocket, POST for SPDY).
    pub method: &'a str,
    /// The Kubernetes verb, as the request was classified (the link totals' key).
    pub verb: crate::request::Verb,
    /// Path and query, as received.
    pub target: &'a str,
    /// The client's headers; hop-by-hop ones are dropped, `Upgrade` kept.
    pub headers: &'a [(String, String)],
    /// Whose credentials.
    pub identity: Identity,
    /// Time the answer's head may take.
    pub answer: Duration,
}

/// The cloud's answer to an upgrade and the connection it came on.
pub(crate) struct Opened {
    /// The answer's head: a 101, or a refusal to relay.
    pub head: ResponseHead,
    /// Bytes read behind the head (the new protocol's first, after a 101).
    pub early: Vec<u8>,
    /// The connection.
    pub end: CloudEnd,
    /// The end of the request's answer time: a refusal's body comes by then too.
    answer_by: Instant,
}

impl Opened {
    /// The body of an answer other than a 101, read whole by its framing (at most
    /// [`MAX_REFUSAL_BODY`] bytes) within what is left of the answer time its head had.
    pub(crate) fn read_body(&mut self) -> io::Result<Vec<u8>> {
        let framing = match self.head.framing()? {
            AnswerFraming::Length(0) => return Ok(Vec::new()),
            AnswerFraming::Length(n) => Some(Framing::Length(n)),
            AnswerFraming::Chunked => Some(Framing::Chunked),
            AnswerFraming::Close => None,
        };
        let early = std::mem::take(&mut self.early);
        let mut input = BufReader::new(
            early
                .as_slice()
                .chain(Blocking(&mut self.end, self.answer_by)),
        );
        let mut body = Vec::new();
        let mut buf = [0u8; 4096];
        let mut state = framing.map(BodyState::new);
        loop {
            let n = match state.as_mut() {
                Some(state) => state.read_limited(&mut input, &mut buf, MAX_REFUSAL_BODY as u64)?,
                None => input.read(&mut buf)?,
            };
            if n == 0 {
                return Ok(body);
            }
            if body.len() + n > MAX_REFUSAL_BODY {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the cloud's answer is larger than the hub relays",
                ));
            }
            body.extend_from_slice(&buf[..n]);
        }
    }
}

/// The hub's connection to the cloud for a tunnel: TLS (or plain, for an `http://`
/// server), counted open to its server while it lives, its bytes from the cloud on the
/// link.
pub(crate) struct CloudEnd {
    sock: TcpStream,
    tls: Option<rustls::ClientConnection>,
    /// A `close_notify` is queued, `SHUT_WR` to follow it.
    shutting: bool,
    link: Link,
    _open: OpenConn,
}

impl CloudEnd {
    /// Switches the connection to non-blocking, for the splice.
    pub(crate) fn for_splice(&mut self) -> io::Result<&mut dyn End> {
        self.sock.set_nonblocking(true)?;
        Ok(self)
    }
}

impl End for CloudEnd {
    fn fd(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.tls.as_mut() {
            Some(tls) => tunnel::tls::read(tls, &self.sock, buf)?,
            None => (&self.sock).read(buf)?,
        };
        self.link.received(n as u64, false);
        Ok(n)
    }

    fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        match self.tls.as_mut() {
            Some(tls) => tunnel::tls::write(tls, data),
            None => (&self.sock).write(data),
        }
    }

    fn flush_out(&mut self) -> io::Result<bool> {
        match self.tls.as_mut() {
            Some(tls) => tunnel::tls::flush(tls, &self.sock, &mut self.shutting),
            None => Ok(true),
        }
    }

    fn close_write(&mut self) -> io::Result<()> {
        match self.tls.as_mut() {
            Some(tls) => tunnel::tls::close_write(tls, &self.sock, &mut self.shutting),
            None => self.sock.shutdown(Shutdown::Write),
        }
    }
}

/// The connection used blocking, before the splice: each socket call within what is left
/// until a deadline (see [`Armed`]).
struct Blocking<'a>(&'a mut CloudEnd, Instant);

impl Read for Blocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let end = &mut *self.0;
        let mut sock = Armed(&end.sock, self.1);
        match end.tls.as_mut() {
            Some(tls) => rustls::Stream::new(tls, &mut sock).read(buf),
            None => sock.read(buf),
        }
    }
}

impl Write for Blocking<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let end = &mut *self.0;
        let mut sock = Armed(&end.sock, self.1);
        match end.tls.as_mut() {
            Some(tls) => rustls::Stream::new(tls, &mut sock).write(data),
            None => sock.write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let end = &mut *self.0;
        let mut sock = Armed(&end.sock, self.1);
        match end.tls.as_mut() {
            Some(tls) => rustls::Stream::new(tls, &mut sock).flush(),
            None => sock.flush(),
        }
    }
}

/// A blocking socket whose every call gets what is left until a deadline as its timeout
/// (a timeout once nothing is left), as `server/stream.rs` arms a client's. rustls loops
/// over its socket inside one call (a handshake to its end, a record until it is whole):
/// armed once per rustls call, a server dribbling a byte now and then could stretch it
/// without end.
struct Armed<'a>(&'a TcpStream, Instant);

impl Armed<'_> {
    /// The time left, or the timeout when none is.
    fn left(&self) -> io::Result<Duration> {
        let left = self.1.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the cloud server did not keep up in time",
            ));
        }
        Ok(left)
    }
}

impl Read for Armed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.set_read_timeout(Some(self.left()?))?;
        self.0.read(buf)
    }
}

impl Write for Armed<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.set_write_timeout(Some(self.left()?))?;
        self.0.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Finishes `conn`'s handshake on `sock` by `deadline`.
fn handshake(
    conn: &mut rustls::ClientConnection,
    sock: &TcpStream,
    deadline: Instant,
) -> io::Result<()> {
    let mut sock = Armed(sock, deadline);
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(())
}

impl Upstream {
    /// Opens a tunnel for `req` on a healthy server: the answer's head, and the connection
    /// it came on.
    pub(crate) fn open_tunnel(&self, req: &TunnelRequest<'_>) -> Result<Opened, UpstreamError> {
        let agents = self.current()?;
        let config = agents.of(req.identity).tunnel;
        let write = !matches!(req.method, "GET" | "HEAD");
        // Keyed as a request would be, so a client's tunnels go where its requests go.
        let key = self.pick_key(req.headers, req.target);
        let mut backend = self
            .backends
            .pick(None, write, key)
            .ok_or(UpstreamError::NoHealthyBackend)?;
        let mut tried_other = false;
        loop {
            let base = &self.backends.get(backend).base;
            match self.dial(base, config) {
                Ok(end) => {
                    let head = request_head(req, base, self.token.as_ref());
                    let answer_by = Instant::now() + req.answer;
                    return send(end, &head, req, base, answer_by).map(|(head, early, end)| {
                        Opened {
                            head,
                            early,
                            end,
                            answer_by,
                        }
                    });
                }
                Err(err) => {
                    // No connection: nothing was sent; the server may be down.
                    self.backends.report_failure(backend);
                    match self.backends.pick(Some(backend), write, key) {
                        Some(other) if !tried_other => {
                            log::info!("opening a tunnel on another cloud server after: {err}");
                            tried_other = true;
                            backend = other;
                        }
                        _ => return Err(err),
                    }
                }
            }
        }
    }

    /// Connects to `base` and, for `https://`, finishes the TLS handshake, within
    /// [`CONNECT_TIMEOUT`] in all, however many addresses the name has (resolving the name
    /// is not bounded: the system's resolver has its own timeouts).
    fn dial(
        &self,
        base: &str,
        config: &Arc<rustls::ClientConfig>,
    ) -> Result<CloudEnd, UpstreamError> {
        let failed = |detail: String, timeout: bool| UpstreamError::Transport {
            server: base.to_owned(),
            detail,
            timeout,
            maybe_sent: false,
        };
        let unreadable =
            || UpstreamError::Request(format!("a server URL the hub cannot read: {base}"));
        let uri: ureq::http::Uri = base.parse().map_err(|_| unreadable())?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(unreadable()),
        };
        let (host, port) = host_and_port(&uri).ok_or_else(unreadable)?;
        let addrs: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            // Names resolve with the system's resolver, on this request's thread.
            Err(_) => (host, port)
                .to_socket_addrs()
                .map_err(|e| failed(format!("resolving {host}: {e}"), false))?
                .collect(),
        };
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut last = failed(format!("{host} has no address"), false);
        let mut sock = None;
        for addr in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last = failed(format!("connecting to {host} took too long"), true);
                break;
            }
            match TcpStream::connect_timeout(addr, left) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = failed(e.to_string(), timed_out(&e)),
            }
        }
        let sock = sock.ok_or(last)?;
        let io = |e: io::Error| failed(e.to_string(), timed_out(&e));
        let _ = sock.set_nodelay(true);
        crate::tunnel::keep_alive(std::os::fd::AsRawFd::as_raw_fd(&sock)).map_err(io)?;
        let mut end = CloudEnd {
            link: LINK.untotalled(base),
            _open: METRICS.open_conn(&conn_server(&uri), tls),
            sock,
            tls: None,
            shutting: false,
        };
        if tls {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| UpstreamError::Request(format!("server name {host}: {e}")))?;
            let mut conn = rustls::ClientConnection::new(Arc::clone(config), name)
                .map_err(|e| UpstreamError::Request(e.to_string()))?;
            // The whole handshake within what is left of the connect time, however many
            // round trips and records it takes.
            handshake(&mut conn, &end.sock, deadline).map_err(io)?;
            end.tls = Some(conn);
        }
        Ok(end)
    }
}

/// Sends `head` on `end` and reads the answer's head by `deadline`.
fn send(
    mut end: CloudEnd,
    head: &[u8],
    req: &TunnelRequest<'_>,
    base: &str,
    deadline: Instant,
) -> Result<(ResponseHead, Vec<u8>, CloudEnd), UpstreamError> {
    let failed = |e: io::Error| UpstreamError::Transport {
        server: base.to_owned(),
        detail: e.to_string(),
        timeout: timed_out(&e),
        maybe_sent: true,
    };
    end.link = LINK.link(
        base,
        req.verb.as_str(),
        link::component_of(req.headers),
        req.target,
        false,
    );
    // The head goes out and the answer comes back within the request's time.
    let mut out = Blocking(&mut end, deadline);
    out.write_all(head)
        .and_then(|()| out.flush())
        .map_err(failed)?;
    end.link.request(0);
    let mut input = BufReader::with_capacity(8 * 1024, Blocking(&mut end, deadline));
    let answer = read_response_head(&mut input).map_err(failed)?;
    let early = input.buffer().to_vec();
    input.consume(early.len());
    drop(input);
    Ok((answer, early, end))
}

/// The request head of an upgrade: the client's headers but the hop-by-hop ones (and those
/// its `Connection` names), `Connection: Upgrade` with the client's `Upgrade`, the client's
/// `Authorization` only for its own identity, the hub's bearer token for the hub's.
fn request_head(req: &TunnelRequest<'_>, base: &str, token: Option<&TokenSource>) -> Vec<u8> {
    let host = base
        .split_once("://")
        .map_or(base, |(_, rest)| rest)
        .trim_end_matches('/');
    let mut out = Vec::with_capacity(1024);
    let mut line = |name: &str, value: &str| {
        // A header that could split the head is left out.
        if !value.contains(['\r', '\n']) && !name.contains(['\r', '\n', ':']) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    };
    line("Host", host);
    for (name, value) in forwarded_headers(req.headers, req.identity, false) {
        line(name, value);
    }
    // The client's upgrade, which the filter drops as hop-by-hop for every other request.
    for (_, value) in req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
    {
        line("Upgrade", value);
    }
    line("Connection", "Upgrade");
    if req.identity == Identity::Hub
        && let Some(token) = token.and_then(TokenSource::current)
    {
        line("Authorization", &format!("Bearer {token}"));
    }
    let mut head = format!("{} {} HTTP/1.1\r\n", req.method, req.target).into_bytes();
    head.extend_from_slice(&out);
    head.extend_from_slice(b"\r\n");
    head
}

/// A socket call that ran out of its timeout (Linux says `EAGAIN` for it).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_dribbling_its_handshake_is_given_up_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // A record header announcing 16 KiB, then its bytes one every 200 ms: each socket
        // read gets a byte well within any timeout, the record is never whole.
        thread_dribble(listener);
        let sock = TcpStream::connect(addr).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let mut conn =
            rustls::ClientConnection::new(Arc::new(config), "127.0.0.1".try_into().unwrap())
                .unwrap();
        let started = Instant::now();
        let err = handshake(&mut conn, &sock, started + Duration::from_secs(1)).unwrap_err();
        assert!(timed_out(&err), "{err}");
        assert!(
            started.elapsed() < Duration::from_millis(1800),
            "given up after {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_server_dribbling_the_record_of_its_answer_is_given_up_at_the_deadline() {
        let (server_config, client_config) = crate::tunnel::tests::tls_configs();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The server reads the request, then sends its 101 in one TLS record, a byte of the
        // record every 200 ms: every socket read is quick, the record whole only after 10 s.
        std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut conn = rustls::ServerConnection::new(server_config).unwrap();
            while conn.is_handshaking() {
                conn.complete_io(&mut sock).unwrap();
            }
            let _ = conn.complete_io(&mut sock);
            conn.writer()
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n")
                .unwrap();
            let mut record = Vec::new();
            while conn.wants_write() {
                conn.write_tls(&mut record).unwrap();
            }
            for b in record {
                std::thread::sleep(Duration::from_millis(200));
                if sock.write_all(&[b]).is_err() {
                    return;
                }
            }
        });
        let sock = TcpStream::connect(addr).unwrap();
        let mut conn =
            rustls::ClientConnection::new(client_config, "127.0.0.1".try_into().unwrap()).unwrap();
        handshake(&mut conn, &sock, Instant::now() + Duration::from_secs(10)).unwrap();
        let end = CloudEnd {
            link: LINK.untotalled("https://127.0.0.1"),
            _open: METRICS.open_conn("127.0.0.1:443", true),
            sock,
            tls: Some(conn),
            shutting: false,
        };
        let headers = Vec::new();
        let req = TunnelRequest {
            method: "POST",
            verb: crate::request::Verb::Create,
            target: "/api/v1/namespaces/a/pods/p/exec",
            headers: &headers,
            identity: Identity::Anonymous,
            answer: Duration::from_secs(1),
        };
        let started = Instant::now();
        let head = b"POST /api/v1/namespaces/a/pods/p/exec HTTP/1.1\r\nHost: x\r\n\r\n";
        let result = send(end, head, &req, "https://127.0.0.1", started + req.answer);
        assert!(
            matches!(result, Err(UpstreamError::Transport { timeout: true, .. })),
            "{:?}",
            result.map(|(head, ..)| head.status)
        );
        assert!(
            started.elapsed() < Duration::from_millis(1800),
            "given up after {:?}",
            started.elapsed()
        );
    }

    fn thread_dribble(listener: std::net::TcpListener) {
        std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]);
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(200));
                if sock.write_all(&[0]).is_err() {
                    return;
                }
            }
        });
    }

    #[test]
    fn the_upgrade_goes_with_the_identitys_credentials_and_no_other_hop_by_hop_header() {
        let headers: Vec<(String, String)> = [
            ("Host", "hub"),
            ("Connection", "Upgrade, X-Private"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Private", "hop"),
            ("Authorization", "Bearer pod-token"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("Keep-Alive", "5"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let head = |identity| {
            let req = TunnelRequest {
                method: "POST",
                verb: crate::request::Verb::Create,
                target: "/api/v1/namespaces/a/pods/p/exec?command=cat",
                headers: &headers,
                identity,
                answer: Duration::from_secs(60),
            };
            String::from_utf8(request_head(&req, "https://10.0.0.1:6443", None)).unwrap()
        };
        assert_eq!(
            head(Identity::Client),
            "POST /api/v1/namespaces/a/pods/p/exec?command=cat HTTP/1.1\r\n\
             Host: 10.0.0.1:6443\r\nAuthorization: Bearer pod-token\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nUpgrade: SPDY/3.1\r\n\
             Connection: Upgrade\r\n\r\n"
        );
        for identity in [Identity::Hub, Identity::Anonymous] {
            let head = head(identity);
            assert!(!head.contains("pod-token"), "{head}");
            assert!(head.contains("Upgrade: SPDY/3.1\r\n"), "{head}");
        }
    }
}
