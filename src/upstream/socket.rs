//! The TCP transport beneath every cloud connection. It does what ureq's own `TcpTransport`
//! does, with fewer system calls per request on a pooled connection, where a small get costs
//! only a few: ureq asks the kernel to change a socket's timeouts whenever the time left
//! differs (every request, as a deadline's remainder shrinks by microseconds), and probes a
//! pooled connection with three calls (non-blocking on, a read, non-blocking off).
//!
//! Here a timeout is changed only when the one set is shorter than needed or longer by more
//! than a sixteenth (a read may then wait that much past its deadline), and the probe is one
//! `recv(MSG_PEEK | MSG_DONTWAIT)`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ureq::Timeout;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};

/// Connects to the first of a request's resolved addresses that answers.
#[derive(Debug, Default)]
pub(super) struct TcpConnector;

impl Connector<()> for TcpConnector {
    type Out = Socket;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _: Option<()>,
    ) -> Result<Option<Socket>, ureq::Error> {
        let stream = connect(details)?;
        if details.config.no_delay() {
            stream.set_nodelay(true)?;
        }
        let socket = Socket {
            stream: Arc::new(stream),
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            read_timeout: None,
            write_timeout: None,
        };
        (details.register_shutdown)(Arc::downgrade(&socket.stream) as Weak<dyn ShutdownHandle>)?;
        Ok(Some(socket))
    }
}

/// Tries each address in turn within the connect timeout: an address that refuses or cannot
/// be routed to gives way to the next, as ureq's connector does (a host whose IPv6 address
/// comes first but has no route).
fn connect(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    let deadline = details.timeout.not_zero().map(|t| Instant::now() + *t);
    let mut last = None;
    for addr in details.addrs.iter() {
        let attempt = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ureq::Error::Timeout(Timeout::Connect));
                }
                TcpStream::connect_timeout(addr, left)
            }
            None => TcpStream::connect(addr),
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                last = Some(ureq::Error::Timeout(Timeout::Connect));
            }
            Err(e) if addr_specific(&e) => last = Some(ureq::Error::Io(e)),
            Err(e) => return Err(ureq::Error::Io(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        ureq::Error::Io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "no address to connect to",
        ))
    }))
}

/// A failure that concerns only the address tried: the next one may still answer.
fn addr_specific(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::AddrNotAvailable
    )
}

/// One TCP connection to a cloud server.
pub(super) struct Socket {
    /// Shared (weakly) with the shutdown handle ureq keeps, which cancels a stream from
    /// another thread; all I/O goes through `&TcpStream`.
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    /// The timeouts set on the socket now (`None`: none, the kernel's default).
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

/// Which of the socket's two timeouts.
#[derive(Clone, Copy)]
enum Direction {
    Read,
    Write,
}

impl Socket {
    /// The socket's own reads and writes, bypassing its buffers: the TLS layer above
    /// (`tls_conn.rs`) reads and writes records here, so the buffers of this layer are
    /// never allocated on a TLS connection.
    pub(super) fn raw(&mut self) -> Raw<'_> {
        self.split().0
    }

    /// The socket's reads and writes, and its buffers beside them (a plain TCP connection's,
    /// where ureq reads and writes).
    fn split(&mut self) -> (Raw<'_>, &mut LazyBuffers) {
        let Socket {
            stream,
            buffers,
            read_timeout,
            write_timeout,
        } = self;
        let raw = Raw {
            stream,
            read_timeout,
            write_timeout,
        };
        (raw, buffers)
    }
}

/// A [`Socket`]'s reads and writes without its buffers, each within a ureq timeout.
pub(super) struct Raw<'s> {
    stream: &'s TcpStream,
    /// The socket's timeouts as set now (the [`Socket`]'s own fields).
    read_timeout: &'s mut Option<Duration>,
    write_timeout: &'s mut Option<Duration>,
}

impl Raw<'_> {
    /// Makes the socket's timeout for `direction` fit `wanted`, with a system call only when
    /// the one set does not (see [`fits`]).
    fn time_out(&mut self, direction: Direction, wanted: Option<Duration>) -> io::Result<()> {
        let set = match direction {
            Direction::Read => &mut *self.read_timeout,
            Direction::Write => &mut *self.write_timeout,
        };
        if fits(*set, wanted) {
            return Ok(());
        }
        // A little over: the next request's full timeout, a hair longer than this one's
        // remainder, then fits without another call.
        let value = wanted.map(|w| w + w / 32);
        match direction {
            Direction::Read => self.stream.set_read_timeout(value)?,
            Direction::Write => self.stream.set_write_timeout(value)?,
        }
        *set = value;
        Ok(())
    }

    /// Writes all of `data` within `timeout`.
    pub(super) fn write_all(
        &mut self,
        data: &[u8],
        timeout: NextTimeout,
    ) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let wanted = remaining(timeout)?;
        self.time_out(Direction::Write, wanted)?;
        self.stream
            .write_all(data)
            .map_err(|e| io_error(e, timeout.reason))
    }

    /// One read into `buf` within `timeout`; 0 when the server closed.
    pub(super) fn read(
        &mut self,
        buf: &mut [u8],
        timeout: NextTimeout,
    ) -> Result<usize, ureq::Error> {
        let timeout = timeout.for_read();
        let wanted = remaining(timeout)?;
        self.time_out(Direction::Read, wanted)?;
        let started = Instant::now();
        loop {
            match self.stream.read(buf) {
                Ok(n) => return Ok(n),
                // Linux does not restart a socket read that has a timeout when a signal
                // lands: go on with what is left of the time.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let Some(wanted) = wanted else {
                        return Err(ureq::Error::Io(e));
                    };
                    let left = wanted.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(ureq::Error::Timeout(timeout.reason));
                    }
                    self.time_out(Direction::Read, Some(left))?;
                }
                Err(e) => return Err(io_error(e, timeout.reason)),
            }
        }
    }
}

/// Whether a socket timeout `set` serves for `wanted`: none for none, and otherwise at least
/// as long and at most a sixteenth longer.
fn fits(set: Option<Duration>, wanted: Option<Duration>) -> bool {
    match (set, wanted) {
        (None, None) => true,
        (Some(set), Some(wanted)) => set >= wanted && set - wanted <= wanted / 16,
        _ => false,
    }
}

/// What an I/O error means to ureq: a timeout (the socket's own, seen as `WouldBlock` on
/// Linux) is the request's `reason`; anything else is the error itself.
fn io_error(e: io::Error, reason: Timeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ureq::Error::Timeout(reason),
        _ => ureq::Error::Io(e),
    }
}

/// The time a step may take, or the timeout's own error when none is left.
fn remaining(timeout: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if timeout.after.is_zero() {
        return Err(ureq::Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|t| *t))
}

impl Transport for Socket {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let (mut raw, buffers) = self.split();
        raw.write_all(&buffers.output()[..amount], timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let (mut raw, buffers) = self.split();
        let amount = raw.read(buffers.input_append_buf(), timeout)?;
        buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        peek_open(&self.stream)
    }
}

/// Whether an idle connection can carry a request: nothing waiting to be read (bytes the
/// server sent unasked, or its close) and no error. One call, without blocking: std's
/// `peek` blocks, and making the socket non-blocking for it takes two calls more.
#[allow(unsafe_code)]
fn peek_open(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: a valid, open descriptor (the stream is borrowed) and a one-byte buffer that
    // lives across the call.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_timeout_is_set_again_only_when_it_no_longer_fits() {
        let s = Duration::from_secs;
        assert!(fits(None, None));
        assert!(
            !fits(None, Some(s(60))),
            "a deadline on an unbounded socket"
        );
        assert!(!fits(Some(s(60)), None), "a bounded socket for a watch");
        assert!(fits(Some(s(60)), Some(s(60))));
        // A remainder a little shorter than what is set: within a sixteenth.
        assert!(fits(Some(s(60)), Some(Duration::from_millis(59_990))));
        assert!(
            !fits(Some(s(60)), Some(s(50))),
            "too long by more than a sixteenth"
        );
        assert!(!fits(Some(s(50)), Some(s(60))), "too short");
        // What `time_out` sets for a full timeout fits the next request's full one.
        let set = s(60) + s(60) / 32;
        assert!(fits(Some(set), Some(s(60))));
        assert!(fits(Some(set), Some(Duration::from_millis(59_000))));
    }

    #[test]
    fn the_probe_tells_open_from_closed_and_from_unasked_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert!(peek_open(&client), "an idle connection is open");
        server.write_all(b"x").unwrap();
        // The byte arrives on loopback at once, but wait for it without a timed assertion.
        let mut byte = [0u8];
        assert_eq!(client.peek(&mut byte).unwrap(), 1);
        assert!(!peek_open(&client), "bytes the client did not ask for");
        let mut client2 = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server2, _) = listener.accept().unwrap();
        drop(server2);
        // Blocks until the close arrives: then the probe sees it.
        assert_eq!(client2.read(&mut byte).unwrap(), 0);
        assert!(!peek_open(&client2), "closed by the server");
        // The probe left the socket blocking, as it found it.
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!((&client).read(&mut byte).unwrap(), 1);
    }
}
