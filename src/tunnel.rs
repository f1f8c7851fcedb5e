//! The splice of an upgraded connection (exec, attach, port-forward): bytes both ways
//! between the client's connection and the hub's own to the cloud, until both sides have
//! ended. It knows nothing of HTTP (the 101 has been exchanged before it starts) nor of
//! whose the sides are: each is an [`End`], a non-blocking plaintext pipe over one
//! descriptor, which `server` implements for a client's socket and `upstream` for the
//! cloud's; [`tls`] drives rustls without blocking for the ends over TLS.
//!
//! One thread (the request's own) runs one `poll` loop over both descriptors. Each
//! direction has one buffer of [`BUFFER`] bytes, and a side is read only while the buffer
//! towards the other side is empty and flushed: nothing is held beyond one read, and a slow
//! reader slows its writer through TCP, as a direct connection would. The end of one side
//! is passed on as the end of writing to the other (half-close), and the other direction
//! keeps flowing until its own end. The only timer is the idle limit (no byte either way);
//! the stop flag (the hub's shutdown) is looked at every turn, and at least once a second.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Bytes one direction holds at most: one read.
pub(crate) const BUFFER: usize = 16 * 1024;
/// How often a quiet splice looks at its stop flag.
const TICK: Duration = Duration::from_secs(1);

/// The limits of a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// No byte either way for this long ends the tunnel (kubelet's
    /// `--streaming-connection-idle-timeout` default, 4 h).
    pub idle: Duration,
    /// The cloud's answer to the upgrade must come within this (60 s), else 504; a
    /// refusal's body too, within the same time.
    pub answer: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            idle: Duration::from_secs(4 * 3600),
            answer: Duration::from_secs(60),
        }
    }
}

/// One side of a tunnel: a plaintext pipe over one descriptor, driven without blocking.
pub(crate) trait End {
    /// The descriptor `poll` waits on.
    fn fd(&self) -> RawFd;
    /// Reads plaintext now: `Ok(0)` is the end of the side's writing (a FIN, or a TLS
    /// `close_notify`), `WouldBlock` nothing yet. A TLS end tries what it has decrypted
    /// already before the socket: `poll` cannot see those bytes.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Takes what it can of `data` now (`WouldBlock`: nothing).
    fn send(&mut self, data: &[u8]) -> io::Result<usize>;
    /// Sends what the end holds towards its socket (TLS records); true when nothing is left.
    fn flush_out(&mut self) -> io::Result<bool>;
    /// Ends writing to this side (a TLS `close_notify`, then `SHUT_WR`), reading goes on.
    fn close_write(&mut self) -> io::Result<()>;
}

/// How a splice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Both sides ended their writing and everything was passed on.
    Closed,
    /// No byte either way within the idle limit.
    Idle,
    /// A read or write failed (a reset, a TLS error): both sides are dropped.
    Broken,
    /// The stop flag was set (the hub is shutting down).
    Stopped,
}

impl Ended {
    /// Short text for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ended::Closed => "closed",
            Ended::Idle => "idle",
            Ended::Broken => "broken",
            Ended::Stopped => "stopped",
        }
    }
}

/// What a splice moved and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spliced {
    /// Bytes from side A (the client) to side B (the cloud).
    pub up: u64,
    /// Bytes from B to A.
    pub down: u64,
    /// Why it ended.
    pub how: Ended,
}

/// One direction: its buffer and how far it got.
struct Flow {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source ended its writing.
    eof: bool,
    /// The end was passed on to the destination.
    closed: bool,
    moved: u64,
}

impl Flow {
    fn new(early: &[u8]) -> Flow {
        let mut buf = vec![0u8; BUFFER.max(early.len())].into_boxed_slice();
        buf[..early.len()].copy_from_slice(early);
        Flow {
            buf,
            start: 0,
            end: early.len(),
            eof: false,
            closed: false,
            moved: 0,
        }
    }

    fn pending(&self) -> bool {
        self.start < self.end
    }

    /// Moves what it can from `src` to `dst`; true when a byte moved or an end was seen.
    fn step(&mut self, src: &mut dyn End, dst: &mut dyn End) -> io::Result<bool> {
        let mut progress = false;
        while self.pending() {
            match dst.send(&self.buf[self.start..self.end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.start += n;
                    self.moved += n as u64;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // A TLS end full of records: they go out as the socket takes them, so
                    // the wait below is for its socket, not for rustls.
                    dst.flush_out()?;
                    return Ok(progress);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.start = 0;
        self.end = 0;
        // Nothing more until the last read is out of the hub, TLS records included.
        if !dst.flush_out()? {
            return Ok(progress);
        }
        if self.eof {
            if !self.closed {
                self.closed = true;
                dst.close_write()?;
                return Ok(true);
            }
            return Ok(progress);
        }
        match src.recv(&mut self.buf) {
            Ok(0) => {
                self.eof = true;
                Ok(true)
            }
            Ok(n) => {
                self.end = n;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(progress)
            }
            Err(e) => Err(e),
        }
    }

    /// Done: the end was seen and passed on.
    fn done(&self) -> bool {
        self.closed
    }
}

/// Passes bytes between `a` and `b` until both have ended (or the idle limit, an error,
/// `stop`). `a_early` and `b_early` are bytes each side sent that were read with its head
/// (a client's first frame right behind its request; the cloud's behind its 101): they go
/// first.
pub(crate) fn splice(
    a: &mut dyn End,
    a_early: &[u8],
    b: &mut dyn End,
    b_early: &[u8],
    idle: Duration,
    stop: &dyn Fn() -> bool,
) -> Spliced {
    let mut up = Flow::new(a_early);
    let mut down = Flow::new(b_early);
    let mut last = Instant::now();
    let how = loop {
        // Every turn, also while bytes keep moving and `poll` is never reached.
        if stop() {
            break Ended::Stopped;
        }
        let result = (|| -> io::Result<bool> {
            let moved_up = up.step(a, b)?;
            let moved_down = down.step(b, a)?;
            Ok(moved_up || moved_down)
        })();
        match result {
            Err(_) => break Ended::Broken,
            Ok(true) => {
                last = Instant::now();
                continue;
            }
            Ok(false) => {}
        }
        if up.done() && down.done() {
            // Both ends passed on; the last TLS records too.
            match (a.flush_out(), b.flush_out()) {
                (Ok(true), Ok(true)) => break Ended::Closed,
                (Err(_), _) | (_, Err(_)) => break Ended::Broken,
                _ => {}
            }
        }
        let left = idle.saturating_sub(last.elapsed());
        if left.is_zero() {
            break Ended::Idle;
        }
        // Waits for what would let either direction move: a side to read from when the
        // buffer towards the other is empty and the other holds nothing unsent (a TLS end's
        // records), a side to write to when something waits for it. A side whose bytes
        // cannot be taken on is not asked for, or `poll` would report it readable at once,
        // again and again, until the other side's socket drains. (An error is met again in
        // the next step.)
        let a_flushed = a.flush_out().unwrap_or(true);
        let b_flushed = b.flush_out().unwrap_or(true);
        let a_in = !up.pending() && !up.eof && b_flushed;
        let b_in = !down.pending() && !down.eof && a_flushed;
        let a_out = down.pending() || !a_flushed || (down.eof && !down.closed);
        let b_out = up.pending() || !b_flushed || (up.eof && !up.closed);
        let mut fds = [pollfd(a.fd(), a_in, a_out), pollfd(b.fd(), b_in, b_out)];
        if wait(&mut fds, left.min(TICK)).is_err() {
            break Ended::Broken;
        }
        // A side that failed shows as readable or writable: the next step meets its error.
    };
    Spliced {
        up: up.moved,
        down: down.moved,
        how,
    }
}

/// What `poll` waits for on `fd`; a side nothing is wanted from is left out (a negative
/// descriptor), so its hang-up, which `poll` reports whatever was asked, cannot wake the
/// loop again and again while the other direction drains.
fn pollfd(fd: RawFd, read: bool, write: bool) -> libc::pollfd {
    let mut events = 0;
    if read {
        events |= libc::POLLIN;
    }
    if write {
        events |= libc::POLLOUT;
    }
    libc::pollfd {
        fd: if events == 0 { -1 } else { fd },
        events,
        revents: 0,
    }
}

/// Waits up to `timeout` for one of `fds`.
#[allow(unsafe_code, reason = "std has no poll")]
fn wait(fds: &mut [libc::pollfd; 2], timeout: Duration) -> io::Result<()> {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is two valid pollfds of ours; their descriptors are open for the call
    // (the ends own them).
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms.max(1)) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// TCP keepalive on a tunnel's socket: the first probe after [`KEEPALIVE_IDLE`] without
/// a byte from the peer, then one every [`KEEPALIVE_INTERVAL`], the connection dropped
/// after [`KEEPALIVE_PROBES`] unanswered (about a minute in all); and bytes sent but not
/// acknowledged for [`UNACKED_LIMIT`] drop it too. A tunnel over a link that died (an
/// edge node's uplink) then ends as broken within about a minute or two, and gives back
/// its thread and its long-running slot, where only the idle limit (4 h) would end it.
/// (Go's dialer, which YurtHub's tunnels use, probes after 15 s.)
pub(crate) fn keep_alive(fd: RawFd) -> io::Result<()> {
    let secs = |d: Duration| libc::c_int::try_from(d.as_secs()).unwrap_or(libc::c_int::MAX);
    let ms = libc::c_int::try_from(UNACKED_LIMIT.as_millis()).unwrap_or(libc::c_int::MAX);
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPIDLE,
        secs(KEEPALIVE_IDLE),
    )?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        secs(KEEPALIVE_INTERVAL),
    )?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
}

/// Quiet time before a tunnel's socket sends its first keepalive probe.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between keepalive probes.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes that drop the connection.
pub(crate) const KEEPALIVE_PROBES: libc::c_int = 3;
/// Time bytes sent may go unacknowledged before the connection is dropped.
pub(crate) const UNACKED_LIMIT: Duration = Duration::from_secs(60);

/// One integer socket option.
#[allow(unsafe_code, reason = "std sets no keepalive")]
fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a valid c_int for the length passed; `fd` is the caller's open
    // socket.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::addr_of!(value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A plain socket as an [`End`] (set non-blocking before the splice): a TCP socket (a plain
/// `http://` side) or a Unix one (the tests here).
macro_rules! plain_end {
    ($($socket:ty),*) => {$(
        impl End for $socket {
            fn fd(&self) -> RawFd {
                std::os::fd::AsRawFd::as_raw_fd(self)
            }
            fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                io::Read::read(self, buf)
            }
            fn send(&mut self, data: &[u8]) -> io::Result<usize> {
                io::Write::write(self, data)
            }
            fn flush_out(&mut self) -> io::Result<bool> {
                Ok(true)
            }
            fn close_write(&mut self) -> io::Result<()> {
                self.shutdown(std::net::Shutdown::Write)
            }
        }
    )*};
}
plain_end!(std::net::TcpStream, std::os::unix::net::UnixStream);

/// An [`End`] over TLS, for a rustls connection of either side (the HTTPS port's client,
/// the hub's own to the cloud) over its non-blocking socket: the four functions its
/// `End` calls. `shutting` is the end's own flag: a `close_notify` is queued and the
/// socket's `SHUT_WR` follows once the records before it are out.
pub(crate) mod tls {
    use std::io::{self, Read as _};
    use std::net::{Shutdown, TcpStream};

    use rustls::{ConnectionCommon, SideData};

    /// What the peer sent, decrypted: what rustls holds first, then the socket's records.
    /// A `close_notify`, or the socket's end without one, is the end (`Ok(0)`).
    pub(crate) fn read<D: SideData>(
        tls: &mut ConnectionCommon<D>,
        mut sock: &TcpStream,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without a close_notify: the end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            tls.read_tls(&mut sock)?;
            tls.process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }

    /// Seals `data` into rustls's records (sent by [`flush`]); `WouldBlock` when its
    /// buffer is full.
    pub(crate) fn write<D: SideData>(
        tls: &mut ConnectionCommon<D>,
        data: &[u8],
    ) -> io::Result<usize> {
        match io::Write::write(&mut tls.writer(), data)? {
            0 if !data.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    /// Sends the records rustls holds; then, once a `close_notify` is out, `SHUT_WR`.
    pub(crate) fn flush<D: SideData>(
        tls: &mut ConnectionCommon<D>,
        mut sock: &TcpStream,
        shutting: &mut bool,
    ) -> io::Result<bool> {
        while tls.wants_write() {
            match tls.write_tls(&mut sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if *shutting {
            *shutting = false;
            sock.shutdown(Shutdown::Write)?;
        }
        Ok(true)
    }

    /// Queues a `close_notify` and sends what it can (see [`flush`]).
    pub(crate) fn close_write<D: SideData>(
        tls: &mut ConnectionCommon<D>,
        sock: &TcpStream,
        shutting: &mut bool,
    ) -> io::Result<()> {
        tls.send_close_notify();
        *shutting = true;
        flush(tls, sock, shutting).map(drop)
    }
}

#[cfg(test)]
pub(crate) mod tests;
