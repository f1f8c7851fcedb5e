//! The socket calls: the module's only unsafe code.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Receive buffer: the kernel sends dump parts of up to 32 KiB to a reader whose buffer
/// allows it (net/netlink/af_netlink.c `netlink_dump`).
pub(super) const RECV_BUFFER: usize = 32 * 1024;

/// A NETLINK_ROUTE socket, closed on drop.
pub(super) struct Socket(OwnedFd);

impl Socket {
    /// Opens the socket with a receive timeout; the kernel binds it on the first send.
    pub(super) fn open(timeout: Duration) -> io::Result<Self> {
        // SAFETY: plain syscall with constant arguments; a non-negative result is a new
        // descriptor that only this OwnedFd owns.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by socket() and is owned by nothing else.
        let socket = Socket(unsafe { OwnedFd::from_raw_fd(fd) });
        // `as _`: musl deprecates naming time_t and suseconds_t (they grow to 64 bits);
        // the timeout is seconds, far inside either width.
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as _,
            tv_usec: timeout.subsec_micros() as _,
        };
        // SAFETY: `tv` is a valid timeval for the length passed; the fd is open.
        let rc = unsafe {
            libc::setsockopt(
                socket.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(socket)
    }

    /// Sends one request to the kernel (pid 0).
    pub(super) fn send(&self, message: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl is plain data, valid zeroed; only the family is set.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `message` and `kernel` are valid for the lengths passed.
        let sent = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        match sent {
            n if n < 0 => Err(io::Error::last_os_error()),
            n if n as usize != message.len() => Err(io::Error::from_raw_os_error(libc::EIO)),
            _ => Ok(()),
        }
    }

    /// Receives one datagram; EAGAIN after the timeout; EMSGSIZE if it was cut.
    pub(super) fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for writes of its length. MSG_TRUNC makes the
            // result the datagram's real length, so a cut one is seen.
            let n = unsafe {
                libc::recv(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n as usize > buf.len() {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            return Ok(n as usize);
        }
    }
}

/// Moves the calling thread into a new network namespace (tests only).
#[cfg(test)]
pub(super) fn unshare_net() -> io::Result<()> {
    // SAFETY: plain syscall; it changes only the calling thread's namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops root, and with it every capability, for the whole process (tests only).
#[cfg(test)]
pub(super) fn become_nobody() -> io::Result<()> {
    // SAFETY: plain syscalls (glibc and musl apply them to every thread).
    let rc = unsafe { libc::setresgid(65534, 65534, 65534) | libc::setresuid(65534, 65534, 65534) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
