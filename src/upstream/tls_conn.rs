//! The TLS layer of every cloud connection the agents make: rustls over the hub's own TCP
//! socket (`socket.rs`), with one `rustls::ClientConfig` per identity for the life of the
//! agents (`agents.rs` builds it once, the tunnels share it).
//!
//! Why not ureq's own `RustlsConnector`: every request the hub sends carries request-level
//! settings (its deadline), and for those ureq builds a new rustls configuration for each new
//! connection — the CA bundle parsed again, the client key copied, a session cache of 256
//! entries made for one connection and thrown away with it (about 19 KiB held by every open
//! watch, and no session ever resumed). And its TLS transport reads and writes records
//! through the TCP transport's own buffers, a second 12 KiB per connection. Here the
//! configuration, with its session cache, is shared, and records go straight to the socket
//! ([`Socket::raw`]): a connection holds one pair of buffers, at the TLS layer, where ureq
//! reads heads and bodies. The reads, writes, handshake and errors are otherwise ureq's:
//! `rustls::Stream` over the socket, timeouts as the request gives them.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use rustls::ClientConnection;
use rustls::pki_types::ServerName;
use ureq::unversioned::transport::time::{Duration, Instant as UreqInstant};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

use super::conn::{Hooked, host_and_port};
use super::socket::{Raw, Socket};

/// A transport with the hub's TCP [`Socket`] at its bottom, which the TLS layer reads and
/// writes directly.
pub(super) trait RawSocket {
    /// The socket beneath.
    fn socket(&mut self) -> &mut Socket;
}

impl RawSocket for Socket {
    fn socket(&mut self) -> &mut Socket {
        self
    }
}

impl<T: RawSocket, H> RawSocket for Hooked<T, H> {
    fn socket(&mut self) -> &mut Socket {
        self.inner.socket()
    }
}

/// The connector that wraps an `https` connection in TLS with a shared configuration.
pub(super) struct SharedTls {
    config: Arc<rustls::ClientConfig>,
    /// Each connection carries one stream (a watch), which may wait for hours between
    /// events: its buffers are let go while it waits (see [`TlsSocket::await_input`]).
    streams: bool,
}

impl SharedTls {
    /// TLS with `config`; `streams` for an agent whose connections each carry one stream.
    pub(super) fn new(config: &Arc<rustls::ClientConfig>, streams: bool) -> SharedTls {
        SharedTls {
            config: Arc::clone(config),
            streams,
        }
    }
}

impl fmt::Debug for SharedTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedTls").finish()
    }
}

impl<In: RawSocket + Transport> Connector<In> for SharedTls {
    type Out = Either<In, TlsSocket<In>>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(inner) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || inner.is_tls() {
            return Ok(Some(Either::A(inner)));
        }
        let mut tls = if self.streams {
            // The stream's thread then waits for hours: what the handshake leaves in a
            // thread's malloc cache (8.5 KiB) goes with a thread of its own.
            crate::alloc::apart("tls-handshake", || handshake(&self.config, details, inner))?
        } else {
            handshake(&self.config, details, inner)?
        };
        tls.lean = self.streams;
        Ok(Some(Either::B(tls)))
    }
}

/// Makes the TLS connection over `inner` within the connect timeout. Never inlined: the
/// handshake's frames (certificate checks, the client key's signature) stay out of the
/// frames of the connector chain that every request passes.
#[inline(never)]
fn handshake<T: RawSocket + Transport>(
    config: &Arc<rustls::ClientConfig>,
    details: &ConnectionDetails,
    mut inner: T,
) -> Result<TlsSocket<T>, ureq::Error> {
    let host = host_and_port(details.uri).map_or("", |(host, _)| host);
    let name = ServerName::try_from(host)
        .map_err(|_| ureq::Error::Tls("Rustls invalid dns name error"))?
        .to_owned();
    let mut conn = ClientConnection::new(Arc::clone(config), name)?;
    // The connect timeout counts from before the TCP connect, as ureq's own TLS layer has it.
    let since = match details.now {
        UreqInstant::Exact(t) => t,
        _ => Instant::now(),
    };
    let mut raw = inner.socket().raw();
    conn.complete_io(&mut Timed::new(&mut raw, details.timeout, since))?;
    let sizes = (
        details.config.input_buffer_size(),
        details.config.output_buffer_size(),
    );
    Ok(TlsSocket {
        inner,
        conn,
        buffers: LazyBuffers::new(sizes.0, sizes.1),
        sizes,
        lean: false,
    })
}

/// A TLS connection: ureq reads and writes plaintext through `buffers`; the records go
/// through the socket beneath `inner`.
pub(super) struct TlsSocket<T> {
    inner: T,
    conn: ClientConnection,
    buffers: LazyBuffers,
    /// The sizes of `buffers` (in, out), allocated on first use.
    sizes: (usize, usize),
    /// Let the buffers go while waiting for the server with nothing unread in them.
    lean: bool,
}

impl<T: fmt::Debug> fmt::Debug for TlsSocket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSocket")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<T: RawSocket + Transport> Transport for TlsSocket<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let TlsSocket {
            inner,
            conn,
            buffers,
            ..
        } = self;
        let mut raw = inner.socket().raw();
        let mut io = Timed::new(&mut raw, timeout, Instant::now());
        rustls::Stream::new(conn, &mut io).write_all(&buffers.output()[..amount])?;
        Ok(())
    }

    /// On a stream's connection ([`SharedTls::new`]), with nothing unread in the buffers and
    /// nothing decrypted waiting in rustls, they are dropped (12 KiB) before waiting: the
    /// wait is for the next event of a watch, maybe hours away, and what arrives goes first
    /// into rustls's own buffer. They are made again, zeroed, once there is something to
    /// read into them. Through a burst rustls mostly holds plaintext already, and the
    /// buffers stay: at most one drop per record read from the socket.
    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let TlsSocket {
            inner,
            conn,
            buffers,
            sizes,
            lean,
        } = self;
        let mut raw = inner.socket().raw();
        let mut io = Timed::new(&mut raw, timeout, Instant::now());
        if *lean && buffers.input().is_empty() && conn.wants_read() {
            *buffers = LazyBuffers::new(sizes.0, sizes.1);
            // What `rustls::Stream::read` waits for before it reads: some plaintext, or the
            // end of the connection. A round that only wrote (`complete_io` flushes pending
            // output first, e.g. a key update's reply) read nothing: wait again.
            while conn.wants_read() {
                let (read, wrote) = conn.complete_io(&mut io)?;
                if read == 0 && wrote == 0 {
                    break;
                }
            }
        }
        let amount = rustls::Stream::new(conn, &mut io).read(buffers.input_append_buf())?;
        buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// The socket as `io::Read` and `io::Write` for rustls, each call within what is left of
/// `timeout` since `since`. A ureq error travels inside the `io::Error` and comes out whole
/// (ureq's `From<io::Error>` unwraps it): a timeout stays a timeout.
struct Timed<'r, 's> {
    raw: &'r mut Raw<'s>,
    timeout: NextTimeout,
    since: Instant,
}

impl<'r, 's> Timed<'r, 's> {
    fn new(raw: &'r mut Raw<'s>, timeout: NextTimeout, since: Instant) -> Timed<'r, 's> {
        Timed {
            raw,
            timeout,
            since,
        }
    }

    /// What is left of the timeout now.
    fn now(&self) -> NextTimeout {
        let mut timeout = self.timeout;
        if !timeout.after.is_not_happening() {
            timeout.after = Duration::Exact(timeout.after.saturating_sub(self.since.elapsed()));
        }
        timeout
    }
}

impl Read for Timed<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let timeout = self.now();
        self.raw.read(buf, timeout).map_err(ureq::Error::into_io)
    }
}

impl Write for Timed<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let timeout = self.now();
        self.raw
            .write_all(buf, timeout)
            .map_err(ureq::Error::into_io)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
