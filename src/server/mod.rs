//! The client side: the only module that touches client sockets. One thread with a small
//! stack per connection, a cap on connections and a cap on requests in flight
//! (`--max-requests-in-flight`, 429 with `Retry-After`). Where the listener's [`Limits`]
//! have `long_running` caps the handler admits each request once it knows what it is
//! ([`Exchange::admit`]): a short one takes an in-flight slot, a long-running one (a watch)
//! one of its fairness key's, and an answer that never waits (kubelet's lease) none;
//! elsewhere the server takes an in-flight slot for every request. At the connection cap the accept
//! thread closes the connection that has waited longest for its request head — one that
//! never sent a request before an idle keep-alive one — so clients that never finish their
//! headers cannot lock others out; only when every connection is serving a request does a
//! new one get 429. Threads stay bounded either way. Requests are framed by `http1`, and so
//! are response heads (`http1::response`); this module only does the I/O: explicit framing
//! (`Content-Length`, or chunks flushed one by one so watch events reach the client at once),
//! deadlines, and closing a connection whose framing is lost.
//!
//! Files: `listen.rs` (bind, backlog, wake), `admission.rs` (caps, eviction, slots, the
//! long-running shares), `connection.rs` (one connection's loop and deadlines),
//! `exchange.rs` (`Exchange` and its `admit`, the request body, `BodyWriter`), `stream.rs`
//! (the `ClientStream` seam that lets `tests.rs` run whole exchanges in memory,
//! `TlsStream` for the HTTPS port, and `ClientProbe`), `tls.rs` (the HTTPS port's
//! reloadable serving certificate and rustls configuration; [`serve_tls`] is the same
//! accept loop with a handshake on each connection's thread).
//!
//! Why not tiny_http, which the project started with: its connection pool spawns a thread per
//! connection without bound, sets no timeouts (an idle or silent connection holds a thread
//! forever), and its pool can leave a new connection waiting until another one closes (a
//! lost wake-up in `TaskPool::spawn`); and it gives no way to close a connection whose
//! answer broke off. BENCHMARKS.md has the flood measurements.

mod admission;
mod connection;
mod exchange;
mod listen;
mod stream;
pub(crate) mod tls;

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::http1::response::{self, ResponseFraming};
use crate::metrics::{METRICS, Metrics};
use crate::requester::Port;
use crate::status::Status;

use admission::{BUSY, ConnectionSlot, Tracked, admit};
pub(crate) use admission::{Load, LongRunningLimits};
use connection::serve_connection;
pub(crate) use exchange::{Admission, BodyWriter, Exchange, Length};
pub(crate) use listen::{Listener, bind, wake};
pub(crate) use stream::ClientProbe;
use stream::{ClientStream, TlsStream};

/// Time one read of a request body, or one write of a response, may take (the default of
/// [`Limits::io_timeout`]). It bounds the whole operation, not each system call: a client
/// that takes a few bytes now and then does not restart it.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request body, the apiserver's own limit: a larger one is refused with 413 before
/// it is read (a chunked one once it has grown past it).
pub(crate) const MAX_BODY: u64 = 3 * 1024 * 1024;

/// The answer to a request body larger than [`MAX_BODY`].
pub(crate) fn body_too_large() -> Status {
    Status::body_too_large(MAX_BODY)
}

/// The caps of one listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Open connections (one thread each); past it, 429 at accept.
    pub max_connections: usize,
    /// Requests being served; past it, 429. With `long_running` caps, short requests only.
    pub max_in_flight: usize,
    /// The caps on long-running requests, when the handler admits each request
    /// ([`Exchange::admit`]); None: the server takes one of `max_in_flight` for every
    /// request before the handler sees it.
    pub long_running: Option<LongRunningLimits>,
    /// Stack of each connection thread.
    pub stack_size: usize,
    /// Time one read of a request body, or one write of an answer, may take.
    pub io_timeout: Duration,
}

/// A request handler; it must answer through the [`Exchange`].
pub(crate) type Handler = Arc<dyn Fn(Exchange<'_>) + Send + Sync>;

/// Accepts connections until `shutdown` is set (then [`wake`] the listener); each request's
/// [`Exchange::port`] is `port`.
pub(crate) fn serve(
    listener: Listener,
    port: Port,
    handler: Handler,
    limits: Limits,
    load: Arc<Load>,
    shutdown: Arc<AtomicBool>,
) {
    accept_loop(listener, port, None, handler, limits, load, shutdown);
}

/// [`serve`] over TLS (the HTTPS proxy port, [`tls::server_config`]): the same caps,
/// eviction and 429s. Each connection's handshake runs on its own thread within the time a
/// plain connection has to start its request; a failed one (plain HTTP, a client that
/// does not trust the certificate, no certificate yet) is a debug line and closes it.
pub(crate) fn serve_tls(
    listener: Listener,
    port: Port,
    tls: Arc<rustls::ServerConfig>,
    handler: Handler,
    limits: Limits,
    load: Arc<Load>,
    shutdown: Arc<AtomicBool>,
) {
    accept_loop(listener, port, Some(tls), handler, limits, load, shutdown);
}

/// The accept loop of [`serve`] and [`serve_tls`]: with `tls`, each connection's thread
/// runs the handshake first.
fn accept_loop(
    listener: Listener,
    port: Port,
    tls: Option<Arc<rustls::ServerConfig>>,
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
            refuse(
                stream,
                tls.is_some(),
                &too_busy(limits.max_connections, "connections"),
            );
            continue;
        }
        let handle = match stream.try_clone() {
            Ok(handle) => handle,
            Err(e) => {
                load.connections.fetch_sub(1, Ordering::AcqRel);
                log::error!("cannot track a connection: {e}");
                refuse(
                    stream,
                    tls.is_some(),
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
        // The same connection with its stream type erased, as the list and the slot hold it.
        let erased: Arc<Tracked> = tracked.clone();
        load.open().push(Arc::clone(&erased));
        // From here the slot is released however the connection ends.
        let slot = ConnectionSlot {
            load: Arc::clone(&load),
            tracked: erased,
        };
        let (handler, shutdown) = (Arc::clone(&handler), Arc::clone(&shutdown));
        let handshake = tls.clone();
        let spawned = thread::Builder::new()
            .name("conn".into())
            .stack_size(limits.stack_size)
            .spawn(move || {
                let slot = slot;
                let _ = stream.set_nodelay(true);
                let stream: Box<dyn ClientStream> = match handshake {
                    None => Box::new(stream),
                    // The handshake is the client's first words: it gets the time a plain
                    // connection has to start its request. Eviction shuts the socket down
                    // meanwhile as it would a silent plain connection.
                    Some(config) => {
                        let time = limits.io_timeout.min(connection::HEAD_TIMEOUT);
                        match accept_tls(stream, config, time) {
                            Ok(stream) => stream,
                            Err(e) => {
                                log::debug!("TLS handshake with {peer} failed: {e}");
                                return;
                            }
                        }
                    }
                };
                let tracked = (&*slot.load, &*slot.tracked);
                serve_connection(stream, (peer, port), &handler, limits, tracked, &shutdown);
            });
        if let Err(e) = spawned {
            // The closure, and with it the slot and the stream, is dropped: answer through
            // the tracking handle.
            log::error!("cannot start a connection thread: {e}");
            if let Ok(stream) = tracked.stream.try_clone() {
                refuse(
                    stream,
                    tls.is_some(),
                    &Status::service_unavailable("the hub cannot start a thread right now"),
                );
            }
        }
    }
}

/// The TLS handshake of a new connection, boxed. Never inlined: the connection's whole life
/// runs below the frame that calls it, and a watch may last hours; the handshake's state is
/// in its own frame, gone before the first request.
#[inline(never)]
fn accept_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    time: Duration,
) -> io::Result<Box<dyn ClientStream>> {
    Ok(Box::new(TlsStream::accept(stream, config, time)?))
}

pub(super) fn too_busy(limit: usize, what: &str) -> Status {
    refused(format!(
        "the hub is serving its maximum of {limit} {what}; retry shortly"
    ))
}

/// A 429 with `Retry-After: 1` saying `why`, counted as a refusal.
pub(super) fn refused(why: String) -> Status {
    Metrics::inc(&METRICS.rejected_requests);
    Status::too_many_requests(why, 1)
}

/// Answers a connection the hub will not serve, without reading its request, and closes it.
/// A TLS connection is only closed: the answer would need a handshake on the accept
/// thread, and plain bytes are no answer to a TLS client.
fn refuse(mut stream: TcpStream, tls: bool, status: &Status) {
    if tls {
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_status_and_close(&mut stream, status);
}

/// Writes `status` as a whole answer that says `Connection: close`, then closes the socket.
fn write_status_and_close(stream: &mut TcpStream, status: &Status) -> io::Result<()> {
    stream.write_all(&closing_answer(status))?;
    stream.shutdown(Shutdown::Both)
}

/// `status` as a whole answer, head and body, that says `Connection: close`.
pub(super) fn closing_answer(status: &Status) -> Vec<u8> {
    let body = status.to_json();
    let retry = status.retry_after.map(|s| s.to_string());
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(retry) = retry.as_deref() {
        headers.push(("Retry-After", retry));
    }
    let length = body.len() as u64;
    let mut answer = Vec::with_capacity(256 + body.len());
    let framing = ResponseFraming::Known(length);
    response::write_head(
        &mut answer,
        status.code,
        &headers,
        Some(length),
        framing,
        true,
    );
    answer.extend_from_slice(&body);
    answer
}

#[cfg(test)]
mod tests;
