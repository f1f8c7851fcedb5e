//! The seam between the server and a client socket: what the connection loop needs beyond
//! `Read + Write` (timeouts, shutdown, a probe for another thread), implemented for
//! `TcpStream`, and in the unit tests for an in-memory stream, so the framing of whole
//! exchanges is tested without sockets. Connections use it as `dyn ClientStream` behind a
//! reference: no allocation, and one indirect call per system call.

use std::fmt::Debug;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use super::ClientProbe;

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
        self.try_clone().ok().map(ClientProbe::new)
    }
}
