//! The client side: the only module that touches tiny_http. It owns the listeners, caps how
//! many requests are served at once (one thread with a small stack per request; past the cap
//! a 429 with `Retry-After` is answered from the accept thread, so a flood never spawns
//! threads without bound), and writes every response itself with explicit framing.
//!
//! Why write the framing by hand: tiny_http's own chunked encoder holds 8 KiB before sending,
//! which would stall watch events, and `add_header` drops `Transfer-Encoding`. So a response
//! takes the raw writer (`into_writer`), writes its status line and headers, then either a
//! `Content-Length` body or chunks flushed one by one.
//!
//! Known limit of tiny_http 0.12 (measured in BENCHMARKS.md): its accept thread hands every
//! connection to a pool thread of its own, without a cap and without read timeouts, so idle
//! keep-alive connections each hold one such thread. The cap here bounds request threads.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::metrics::{METRICS, Metrics};
use crate::status::Status;

/// A bound listening socket served by tiny_http.
pub struct Listener {
    server: tiny_http::Server,
    socket: TcpListener,
    addr: SocketAddr,
}

/// Binds `addr` (port 0 picks a free port).
pub fn bind(addr: SocketAddr) -> io::Result<Listener> {
    let socket = TcpListener::bind(addr)?;
    let addr = socket.local_addr()?;
    let server = tiny_http::Server::from_listener(socket.try_clone()?, None)
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(Listener {
        server,
        socket,
        addr,
    })
}

impl Listener {
    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits up to `timeout` for the next request. An `Err` means tiny_http's accept thread
    /// died (it stops on any accept error, e.g. out of file descriptors): the listener is
    /// rebuilt on the same socket and the old one keeps serving its open connections.
    fn next(
        &mut self,
        timeout: Duration,
        on_orphan: &dyn Fn(tiny_http::Server),
    ) -> Option<tiny_http::Request> {
        match self.server.recv_timeout(timeout) {
            Ok(request) => request,
            Err(e) => {
                log::error!(
                    "accepting connections failed on {}: {e}; restarting the listener",
                    self.addr
                );
                // Give a transient condition (EMFILE) a moment instead of spinning.
                thread::sleep(Duration::from_millis(200));
                match self
                    .socket
                    .try_clone()
                    .map_err(|e| e.to_string())
                    .and_then(|s| {
                        tiny_http::Server::from_listener(s, None).map_err(|e| e.to_string())
                    }) {
                    Ok(fresh) => {
                        let old = std::mem::replace(&mut self.server, fresh);
                        on_orphan(old);
                    }
                    Err(e) => log::error!("cannot restart the listener on {}: {e}", self.addr),
                }
                None
            }
        }
    }
}

/// How request threads are run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests served at once; past it, 429.
    pub max_in_flight: usize,
    /// Stack of each request thread.
    pub stack_size: usize,
}

/// Requests being served, shared with whoever waits for them to drain.
#[derive(Debug, Default)]
pub struct InFlightCount(AtomicUsize);

impl InFlightCount {
    /// Requests being served now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Serves `listener` until `shutdown` is set: each request runs `handler` on its own thread.
pub fn serve_threaded(
    mut listener: Listener,
    handler: Arc<dyn Fn(Exchange) + Send + Sync>,
    limits: Limits,
    in_flight: Arc<InFlightCount>,
    shutdown: Arc<AtomicBool>,
) {
    let dispatch = |request: tiny_http::Request| {
        let exchange = Exchange::new(request);
        if shutdown.load(Ordering::Relaxed) {
            let _ = exchange.send_status(&Status::service_unavailable("the hub is shutting down"));
            return;
        }
        // Reserve a slot before spawning so the cap holds even under a burst.
        if in_flight.0.fetch_add(1, Ordering::AcqRel) >= limits.max_in_flight {
            in_flight.0.fetch_sub(1, Ordering::AcqRel);
            Metrics::inc(&METRICS.rejected_requests);
            let status = Status::too_many_requests(
                format!(
                    "the hub is serving its maximum of {} requests; retry shortly",
                    limits.max_in_flight
                ),
                1,
            );
            let _ = exchange.send_status(&status);
            return;
        }
        let slot = Slot(Arc::clone(&in_flight));
        let handler = Arc::clone(&handler);
        let spawned = thread::Builder::new()
            .name("request".into())
            .stack_size(limits.stack_size)
            .spawn(move || {
                let _slot = slot;
                handler(exchange);
            });
        if let Err(e) = spawned {
            // The exchange went down with the closure; tiny_http answers 500 for a dropped request.
            log::error!("cannot start a request thread: {e}");
        }
    };
    serve_loop(&mut listener, &shutdown, &dispatch);
}

/// Serves `listener` on the calling thread (health and metrics: quick answers only).
pub fn serve_inline(
    mut listener: Listener,
    handler: &(dyn Fn(Exchange) + Sync),
    shutdown: Arc<AtomicBool>,
) {
    let dispatch = |request: tiny_http::Request| handler(Exchange::new(request));
    serve_loop(&mut listener, &shutdown, &dispatch);
}

fn serve_loop(
    listener: &mut Listener,
    shutdown: &AtomicBool,
    dispatch: &(dyn Fn(tiny_http::Request) + Sync),
) {
    thread::scope(|scope| {
        let orphan = |old: tiny_http::Server| {
            // The old server's open connections still send requests its way.
            scope.spawn(move || {
                while !shutdown.load(Ordering::Relaxed) {
                    if let Ok(Some(request)) = old.recv_timeout(Duration::from_secs(1)) {
                        dispatch(request);
                    }
                }
            });
        };
        while !shutdown.load(Ordering::Relaxed) {
            if let Some(request) = listener.next(Duration::from_millis(250), &orphan) {
                dispatch(request);
            }
        }
    });
}

/// Frees an in-flight slot when the request thread ends, however it ends.
struct Slot(Arc<InFlightCount>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request and the means to answer it.
pub struct Exchange {
    // Boxed: tiny_http's request is large and exchanges travel by value through results.
    request: Box<tiny_http::Request>,
    headers: Vec<(String, String)>,
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Exactly this many bytes follow (`Content-Length`).
    Known(u64),
    /// Bytes follow as they come (chunked; close-delimited for HTTP/1.0 clients).
    Streamed,
}

impl Exchange {
    fn new(request: tiny_http::Request) -> Exchange {
        let headers = request
            .headers()
            .iter()
            .map(|h| {
                (
                    h.field.as_str().as_str().to_owned(),
                    h.value.as_str().to_owned(),
                )
            })
            .collect();
        Exchange {
            request: Box::new(request),
            headers,
        }
    }

    /// The request method.
    pub fn method(&self) -> &str {
        self.request.method().as_str()
    }

    /// The request target: path and query, as sent.
    pub fn url(&self) -> &str {
        self.request.url()
    }

    /// Request headers as (name, value).
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length` of the request body, when the client sent one.
    pub fn body_length(&self) -> Option<u64> {
        self.request.body_length().map(|n| n as u64)
    }

    /// True when the request carries a body (a length above zero, or chunked).
    pub fn has_body(&self) -> bool {
        match self.request.body_length() {
            Some(n) => n > 0,
            None => self.header("transfer-encoding").is_some(),
        }
    }

    /// The request body.
    pub fn body(&mut self) -> &mut dyn Read {
        self.request.as_reader()
    }

    /// The peer address.
    pub fn remote(&self) -> Option<SocketAddr> {
        self.request.remote_addr().copied()
    }

    /// Sends the status line and headers; the body follows through the returned writer.
    /// `headers` must not contain framing headers (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`): this function writes those.
    pub fn start(
        self,
        status: u16,
        headers: &[(&str, &str)],
        length: Length,
    ) -> io::Result<BodyWriter> {
        let http10 = self.request.http_version() == &tiny_http::HTTPVersion(1, 0);
        let wants_close = self
            .header("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
        let no_body =
            self.request.method() == &tiny_http::Method::Head || status == 204 || status == 304;
        let framing = match length {
            Length::Known(n) => Framing::Known(n),
            Length::Streamed if no_body => Framing::Known(0),
            Length::Streamed if http10 => Framing::Close,
            Length::Streamed => Framing::Chunked,
        };
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(
            format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status)).as_bytes(),
        );
        for (name, value) in headers {
            if value.contains(['\r', '\n']) {
                continue; // never let a header value split the response
            }
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        match (length, framing) {
            (Length::Known(n), _) => {
                head.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
            }
            (_, Framing::Chunked) => head.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            _ => {}
        }
        if http10 || wants_close || framing == Framing::Close {
            head.extend_from_slice(b"Connection: close\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let mut out = self.request.into_writer();
        out.write_all(&head)?;
        // Flush now: a watch client waits for the head before it reads any event.
        out.flush()?;
        Ok(BodyWriter {
            out,
            framing: if no_body { Framing::Known(0) } else { framing },
            discard: no_body,
            frame: Vec::new(),
        })
    }

    /// Answers with a complete body.
    pub fn send(self, status: u16, headers: &[(&str, &str)], body: &[u8]) -> io::Result<()> {
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Known(u64),
    Chunked,
    Close,
}

/// Writes a response body with the framing chosen in [`Exchange::start`]; every write is
/// flushed so watch events reach the client at once.
pub struct BodyWriter {
    out: Box<dyn Write + Send>,
    framing: Framing,
    /// HEAD and bodiless statuses: bytes are counted, not sent.
    discard: bool,
    frame: Vec<u8>,
}

impl BodyWriter {
    /// Sends `data` now.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.discard {
            return Ok(());
        }
        match &mut self.framing {
            Framing::Known(remaining) => {
                if data.len() as u64 > *remaining {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "body longer than its Content-Length",
                    ));
                }
                *remaining -= data.len() as u64;
                self.out.write_all(data)?;
            }
            Framing::Close => self.out.write_all(data)?,
            Framing::Chunked => {
                // One write per chunk: size line, data and CRLF together.
                self.frame.clear();
                self.frame
                    .extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                self.frame.extend_from_slice(data);
                self.frame.extend_from_slice(b"\r\n");
                self.out.write_all(&self.frame)?;
            }
        }
        self.out.flush()
    }

    /// Ends the body cleanly (the terminal chunk for chunked framing).
    pub fn finish(mut self) -> io::Result<()> {
        match self.framing {
            Framing::Chunked => {
                self.out.write_all(b"0\r\n\r\n")?;
                self.out.flush()
            }
            Framing::Known(0) | Framing::Close => self.out.flush(),
            Framing::Known(n) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body ended {n} bytes short of its Content-Length"),
            )),
        }
    }

    /// Ends the body so the client sees a failure rather than a short but valid answer: an
    /// invalid chunk for chunked framing (the client drops the connection). tiny_http gives
    /// no way to close the socket itself.
    pub fn abort(mut self) {
        if self.framing == Framing::Chunked && !self.discard {
            let _ = self.out.write_all(b"xx\r\n");
            let _ = self.out.flush();
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
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}
