//! The seam between the server and a client socket: what the connection loop needs beyond
//! `Read + Write` (timeouts, shutdown, a probe for another thread), implemented for
//! `TcpStream`, and in the unit tests for an in-memory stream, so the framing of whole
//! exchanges is tested without sockets. [`ClientProbe`], the socket's side of a held stream
//! watched by the reaper, lives here too. Connections use it as `dyn ClientStream` behind a
//! reference: no allocation, and one indirect call per system call.

use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// A client connection as the server uses it.
pub(crate) trait ClientStream: Read + Write + Send + Sync + Debug {
    /// Bounds each following read (`None`: no bound).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Bounds each following write (`None`: no bound).
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Ends the connection both ways; a thread blocked reading it sees the end of the
    /// stream.
    fn shutdown(&self) -> io::Result<()>;
    /// A handle that tells another thread whether the client hung up; `None` when there is
    /// no such handle.
    fn probe(&self) -> Option<ClientProbe>;
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
}

/// Looks at a client connection from another thread while its own thread writes a stream.
pub(crate) struct ClientProbe(TcpStream);

impl ClientProbe {
    /// True when the client closed the connection or it broke. Bytes the client sent are
    /// left where they are (a client does not send anything while it reads a stream).
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
            1.. => false,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }
}
