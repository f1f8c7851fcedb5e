//! Listening sockets: bind with a deep backlog, and wake an accept thread blocked on one.
//! Accepting and admitting connections is `serve`'s job (`mod.rs`, `admission.rs`).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A bound listening socket.
pub(crate) struct Listener {
    pub(super) socket: TcpListener,
    pub(super) addr: SocketAddr,
}

/// Connections the kernel may hold completed for the accept thread. std listens with 128;
/// a burst of connections past that has its handshakes dropped and retried a second or
/// more later. Go servers, the apiserver among them, ask for the system maximum likewise.
const BACKLOG: i32 = 4096;

/// Binds `addr` (port 0 picks a free port).
#[allow(unsafe_code, reason = "std has no way to set the listen backlog")]
pub(crate) fn bind(addr: SocketAddr) -> io::Result<Listener> {
    use std::os::fd::AsRawFd;
    let socket = TcpListener::bind(addr)?;
    // Listening again on a listening socket only changes its backlog (the kernel caps it
    // at net.core.somaxconn).
    // SAFETY: the descriptor is the listener's own and open for the call.
    if unsafe { libc::listen(socket.as_raw_fd(), BACKLOG) } != 0 {
        log::warn!(
            "cannot raise the listen backlog of {addr}: {}",
            io::Error::last_os_error()
        );
    }
    let addr = socket.local_addr()?;
    Ok(Listener { socket, addr })
}

impl Listener {
    /// The address actually bound.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Wakes a listener blocked in `accept` (after its shutdown flag is set).
pub(crate) fn wake(addr: SocketAddr) {
    let target = match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
        }
        other => other,
    };
    let _ = TcpStream::connect_timeout(&target, Duration::from_millis(200));
}
