//! The seam between the server and a client socket: what the connection loop needs beyond
//! `Read + Write` (timeouts, shutdown, a probe for another thread, a TLS client's
//! certificates for the multiplexer port), implemented for `TcpStream`, for [`TlsStream`]
//! (the HTTPS and multiplexer ports), and in the unit tests for an in-memory
//! stream, so the framing of whole exchanges is tested without sockets. [`ClientProbe`], the
//! socket's side of a held stream watched by the reaper, lives here too. A connection holds
//! its stream as a `Box<dyn ClientStream>`: one allocation per connection, and one indirect
//! call per system call.

use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

use crate::tunnel::{self, End};

/// A client connection as the server uses it.
pub(crate) trait ClientStream: Read + Write + Send + Sync + Debug {
    /// Bounds each following read (`None`: no bound).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Bounds each following write (`None`: no bound).
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Ends the connection both ways; a thread blocked reading it sees the end of the
    /// stream.
    fn shutdown(&self) -> io::Result<()>;
    /// Ends the connection after a whole answer, on its own thread: like
    /// [`ClientStream::shutdown`], after a TLS `close_notify` on the HTTPS port (a TLS client
    /// takes an end without one for a cut).
    fn close(&mut self) -> io::Result<()> {
        self.shutdown()
    }
    /// A handle that tells another thread whether the client hung up; `None` when there is
    /// no such handle.
    fn probe(&self) -> Option<ClientProbe>;
    /// The certificates the client presented in the TLS handshake, leaf first, as the
    /// listener's rustls configuration verified them; `None` on a plain connection or when
    /// the client sent none.
    fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        None
    }
    /// The stream as one side of a tunnel, switched to non-blocking for the splice (the
    /// connection closes after it); the in-memory test stream has none.
    fn tunnel_end(&mut self) -> io::Result<&mut dyn End> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

impl ClientStream for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }

    fn shutdown(&self) -> io::Result<()> {
        TcpStream::shutdown(self, Shutdown::Both)
    }

    fn probe(&self) -> Option<ClientProbe> {
        self.try_clone().ok().map(ClientProbe)
    }

    fn tunnel_end(&mut self) -> io::Result<&mut dyn End> {
        self.set_nonblocking(true)?;
        crate::tunnel::keep_alive(std::os::fd::AsRawFd::as_raw_fd(self))?;
        Ok(self)
    }
}

/// Looks at a client connection from another thread while its own thread writes a stream.
pub(crate) struct ClientProbe(TcpStream);

impl ClientProbe {
    /// True when the client closed the connection or it broke. Bytes the client sent are
    /// left where they are: over TLS a client that hangs up sends a `close_notify` before
    /// its FIN, and those unread bytes must not hide the FIN behind them.
    #[allow(
        unsafe_code,
        reason = "std has no non-blocking peek on a blocking socket"
    )]
    pub(crate) fn gone(&self) -> bool {
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
            1.. => self.hung_up(),
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    /// With bytes waiting unread: whether the client's FIN (or an error) came after them.
    #[allow(unsafe_code, reason = "std has no poll")]
    fn hung_up(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // Timeout 0: the probe never waits.
        // SAFETY: `fd` is one valid pollfd of ours; `self.0` keeps the descriptor open.
        let n = unsafe { libc::poll(&raw mut fd, 1, 0) };
        n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

/// A client connection over TLS (the HTTPS proxy port): the socket and rustls's server
/// state, driven by hand rather than through `rustls::StreamOwned` so each read and write
/// keeps the connection loop's deadlines however many system calls a TLS record takes.
pub(crate) struct TlsStream {
    /// rustls's state of the connection.
    tls: rustls::ServerConnection,
    /// The socket under it.
    sock: TcpStream,
    /// The timeout last asked for reads (nanoseconds, 0 for none): the whole of one read,
    /// not of each system call under it.
    read_timeout: AtomicU64,
    /// Likewise for writes.
    write_timeout: AtomicU64,
    /// As a tunnel's end: a `close_notify` is queued, `SHUT_WR` to follow it.
    shutting: bool,
}

/// One read or write of the stream as it goes: its deadline and the socket calls made.
struct Op {
    /// When the operation must be done (`None`: no timeout).
    deadline: Option<Instant>,
    /// Socket calls made so far.
    calls: u32,
    /// The socket's read timeout was shortened and must be set back.
    read_shortened: bool,
    /// Likewise its write timeout.
    write_shortened: bool,
}

impl Op {
    /// An operation bounded by `timeout` (nanoseconds, 0 for none), starting now.
    fn new(timeout: &AtomicU64) -> Op {
        Op {
            deadline: from_nanos(timeout.load(Ordering::Relaxed)).map(|t| Instant::now() + t),
            calls: 0,
            read_shortened: false,
            write_shortened: false,
        }
    }
}

impl TlsStream {
    /// Runs the server side of the TLS handshake on `sock`, within `timeout` as a whole: a
    /// client that connects and says nothing, or dribbles its hello, is dropped after it.
    pub(crate) fn accept(
        sock: TcpStream,
        config: Arc<rustls::ServerConfig>,
        timeout: Duration,
    ) -> io::Result<TlsStream> {
        let tls = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        let mut stream = TlsStream {
            tls,
            sock,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
            shutting: false,
        };
        ClientStream::set_read_timeout(&stream, Some(timeout))?;
        ClientStream::set_write_timeout(&stream, Some(timeout))?;
        let mut op = Op::new(&stream.read_timeout);
        let result = (|| {
            while stream.tls.is_handshaking() {
                stream.flush_tls(&mut op)?;
                if !stream.tls.is_handshaking() {
                    break;
                }
                if !stream.tls.wants_read() {
                    // Nothing to send and nothing wanted: looping would spin for ever.
                    return Err(io::Error::other("the TLS handshake stalled"));
                }
                stream.read_tls(&mut op)?;
            }
            // The server's last flight (TLS 1.2 Finished).
            stream.flush_tls(&mut op)
        })();
        stream.restore(&op)?;
        result.map(|()| stream)
    }

    /// Before each socket call of `op` after its first: the socket gets what is left until
    /// the deadline (a timeout when nothing is left), so a client that moves a few bytes
    /// at a time cannot stretch one operation.
    fn arm(&self, reading: bool, op: &mut Op) -> io::Result<()> {
        op.calls += 1;
        let Some(deadline) = op.deadline.filter(|_| op.calls > 1) else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not keep up in time",
            ));
        }
        if reading {
            op.read_shortened = true;
            self.sock.set_read_timeout(Some(left))
        } else {
            op.write_shortened = true;
            self.sock.set_write_timeout(Some(left))
        }
    }

    /// Gives the socket back the timeouts asked for, after `op` shortened them.
    fn restore(&self, op: &Op) -> io::Result<()> {
        if op.read_shortened {
            self.sock
                .set_read_timeout(from_nanos(self.read_timeout.load(Ordering::Relaxed)))?;
        }
        if op.write_shortened {
            self.sock
                .set_write_timeout(from_nanos(self.write_timeout.load(Ordering::Relaxed)))?;
        }
        Ok(())
    }

    /// Reads TLS records from the socket (one system call) and processes them; a fatal
    /// TLS error is sent to the client as an alert and returned.
    fn read_tls(&mut self, op: &mut Op) -> io::Result<()> {
        let n = loop {
            self.arm(true, op)?;
            match self.tls.read_tls(&mut self.sock) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if let Err(e) = self.tls.process_new_packets() {
            let _ = self.flush_tls(op);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if n == 0 && self.tls.is_handshaking() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// Sends every TLS byte rustls holds.
    fn flush_tls(&mut self, op: &mut Op) -> io::Result<()> {
        while self.tls.wants_write() {
            self.arm(false, op)?;
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A timeout as stored (nanoseconds, 0 for none).
fn from_nanos(nanos: u64) -> Option<Duration> {
    (nanos != 0).then(|| Duration::from_nanos(nanos))
}

/// A timeout to store (see [`from_nanos`]).
fn to_nanos(timeout: Option<Duration>) -> u64 {
    // A zero timeout cannot be set on a socket (std refuses it): 0 stands for none.
    timeout.map_or(0, |t| {
        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1)
    })
}

impl Read for TlsStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut op = Op::new(&self.read_timeout);
        let result = loop {
            match self.tls.reader().read(out) {
                // No whole record yet: read more from the socket.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => break other,
            }
            // TLS 1.3 may have to answer a key update while reading.
            if let Err(e) = self
                .read_tls(&mut op)
                .and_then(|()| self.flush_tls(&mut op))
            {
                break Err(e);
            }
        };
        self.restore(&op)?;
        result
    }
}

impl Write for TlsStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(data)])
    }

    /// All of `parts` go into one TLS record where they fit (a chunk's size line, data and
    /// end travel together), then out to the socket before the call returns.
    fn write_vectored(&mut self, parts: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut op = Op::new(&self.write_timeout);
        let result = self.flush_tls(&mut op).and_then(|()| {
            let n = self.tls.writer().write_vectored(parts)?;
            self.flush_tls(&mut op)?;
            Ok(n)
        });
        self.restore(&op)?;
        result
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut op = Op::new(&self.write_timeout);
        let result = self.flush_tls(&mut op);
        self.restore(&op)?;
        result
    }
}

impl Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("peer", &self.sock.peer_addr().ok())
            .field("version", &self.tls.protocol_version())
            .finish()
    }
}

impl ClientStream for TlsStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(timeout)?;
        self.read_timeout
            .store(to_nanos(timeout), Ordering::Relaxed);
        Ok(())
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(timeout)?;
        self.write_timeout
            .store(to_nanos(timeout), Ordering::Relaxed);
        Ok(())
    }

    /// Ends the socket without a TLS `close_notify` (that needs the connection's own
    /// thread): HTTP framing, not the TLS close, tells a client where an answer ends.
    fn shutdown(&self) -> io::Result<()> {
        self.sock.shutdown(Shutdown::Both)
    }

    fn close(&mut self) -> io::Result<()> {
        self.tls.send_close_notify();
        // Within one write timeout; no restore of a shortened timeout: the socket goes next.
        let sent = self.flush_tls(&mut Op::new(&self.write_timeout));
        let closed = self.sock.shutdown(Shutdown::Both);
        sent.and(closed)
    }

    /// The socket as on the plain port. A client's TLS `close_notify` shows as bytes, not as
    /// the end of the stream: the probe says gone at the TCP FIN that follows it (clients
    /// close the socket right after), seen behind the unread bytes.
    fn probe(&self) -> Option<ClientProbe> {
        self.sock.try_clone().ok().map(ClientProbe)
    }

    /// rustls keeps them after the handshake: no copy.
    fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.tls.peer_certificates()
    }

    fn tunnel_end(&mut self) -> io::Result<&mut dyn End> {
        self.sock.set_nonblocking(true)?;
        crate::tunnel::keep_alive(std::os::fd::AsRawFd::as_raw_fd(&self.sock))?;
        Ok(self)
    }
}

/// The HTTPS port's client as a tunnel's end: rustls driven without blocking
/// (`tunnel::tls`).
impl End for TlsStream {
    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.sock)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        tunnel::tls::read(&mut self.tls, &self.sock, buf)
    }

    fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        tunnel::tls::write(&mut self.tls, data)
    }

    fn flush_out(&mut self) -> io::Result<bool> {
        tunnel::tls::flush(&mut self.tls, &self.sock, &mut self.shutting)
    }

    fn close_write(&mut self) -> io::Result<()> {
        tunnel::tls::close_write(&mut self.tls, &self.sock, &mut self.shutting)
    }
}
