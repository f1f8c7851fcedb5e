//! The hub's local address: a Linux dummy interface (`--dummy-if-name`, default `hub-dummy0`)
//! carrying `--dummy-if-ip` (default 169.254.2.1) as a /32 (or /128), so pods reach the hub at
//! an address that exists on every node. Made, checked and removed over rtnetlink with the
//! libc crate, as YurtHub does with vishvananda/netlink
//! (openyurt pkg/yurthub/network/dummyif_linux.go).
//!
//! Two layers: netlink messages are built and answers parsed by pure functions over byte
//! buffers (`wire.rs`, tested byte for byte); [`DummyInterface`] (here) drives them over one
//! NETLINK_ROUTE socket per operation (`sys.rs`, the only unsafe code), each with a receive
//! timeout. [`LocalAddress`] (`local.rs`) is the hub's use of it at run time: made at start (or
//! a warning and the fallback host), re-checked every [`RECHECK_PERIOD`] on its own thread,
//! removed at exit; the proxy ports are `app/listeners.rs`'s.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod local;
#[allow(unsafe_code)]
mod sys;
mod wire;

#[cfg(test)]
mod tests;

pub(crate) use local::LocalAddress;

/// `--dummy-if-name`'s default (openyurt cmd/yurthub/app/options/options.go:115).
pub(crate) const DEFAULT_NAME: &str = "hub-dummy0";
/// `--dummy-if-ip`'s default for an IPv4 bind address (options.go:40).
pub(crate) const DEFAULT_IP4: Ipv4Addr = Ipv4Addr::new(169, 254, 2, 1);
/// `--dummy-if-ip`'s default for an IPv6 bind address (options.go:41).
pub(crate) const DEFAULT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 2, 1);
/// How often YurtHub re-ensures the interface (pkg/yurthub/network/network.go:29).
pub(crate) const RECHECK_PERIOD: Duration = Duration::from_secs(60);
/// How long one netlink operation waits for the kernel's answer. The kernel answers rtnetlink
/// synchronously, so this only bounds a wedged kernel or a lost reply.
const RECV_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest interface name: IFNAMSIZ (16) less the NUL; YurtHub checks the same 15
/// (options.go:168).
const MAX_NAME_BYTES: usize = 15;

/// The default `--dummy-if-ip` for a bind address: YurtHub picks by the family of
/// `--bind-address` (options.go:244-249).
pub(crate) fn default_dummy_ip(bind: IpAddr) -> IpAddr {
    match bind.to_canonical() {
        IpAddr::V4(_) => IpAddr::V4(DEFAULT_IP4),
        IpAddr::V6(_) => IpAddr::V6(DEFAULT_IP6),
    }
}

/// YurtHub's rules for `--dummy-if-ip` (options.go:254-284): any IPv6 address; an IPv4 one
/// must be link-local (169.254.0.0/16), outside 169.254.31.0/24 and not 169.254.1.1 (both
/// reserved: the flag's help, options.go:224). An IPv4-mapped IPv6 address counts as IPv4, as
/// Go's `net.IP.To4` makes it.
pub(crate) fn validate_dummy_ip(ip: IpAddr) -> Result<(), DummyIpError> {
    let v4 = match ip.to_canonical() {
        IpAddr::V6(_) => return Ok(()),
        IpAddr::V4(v4) => v4,
    };
    let [a, b, c, _] = v4.octets();
    if (a, b) != (169, 254) {
        return Err(DummyIpError::NotLinkLocal(ip));
    }
    if c == 31 {
        return Err(DummyIpError::ReservedRange(ip));
    }
    if v4 == Ipv4Addr::new(169, 254, 1, 1) {
        return Err(DummyIpError::Reserved(ip));
    }
    Ok(())
}

/// Why an address cannot be `--dummy-if-ip` (YurtHub's rules, [`validate_dummy_ip`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DummyIpError {
    /// An IPv4 address outside 169.254.0.0/16.
    NotLinkLocal(IpAddr),
    /// In 169.254.31.0/24, which YurtHub reserves.
    ReservedRange(IpAddr),
    /// 169.254.1.1, which YurtHub reserves.
    Reserved(IpAddr),
}

impl fmt::Display for DummyIpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DummyIpError::NotLinkLocal(ip) => write!(
                f,
                "--dummy-if-ip {ip} is not in 169.254.0.0/16 (an IPv4 dummy address must be link-local)"
            ),
            DummyIpError::ReservedRange(ip) => {
                write!(f, "--dummy-if-ip {ip} is in the reserved 169.254.31.0/24")
            }
            DummyIpError::Reserved(ip) => write!(f, "--dummy-if-ip {ip} is reserved"),
        }
    }
}

impl std::error::Error for DummyIpError {}

/// The kernel's rule for an interface name (net/core/dev.c `dev_valid_name`): 1 to 15 bytes,
/// not `.` or `..`, no `/`, `:`, NUL or white space. YurtHub checks only the length.
pub(crate) fn validate_dummy_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return Err("longer than 15 bytes (the kernel's IFNAMSIZ)");
    }
    if name == "." || name == ".." {
        return Err("`.` and `..` are not interface names");
    }
    if name
        .bytes()
        .any(|b| matches!(b, b'/' | b':' | 0) || b.is_ascii_whitespace() || b == 0x0b)
    {
        return Err("contains `/`, `:`, NUL or white space");
    }
    Ok(())
}

/// One netlink operation, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Opening the NETLINK_ROUTE socket.
    Open,
    /// RTM_GETLINK by name.
    GetLink,
    /// RTM_NEWLINK with NLM_F_CREATE.
    CreateLink,
    /// RTM_NEWLINK setting IFF_UP.
    SetUp,
    /// RTM_GETADDR dump.
    ListAddresses,
    /// RTM_NEWADDR.
    AddAddress,
    /// RTM_DELLINK.
    DeleteLink,
}

impl Op {
    /// What the hub was doing, as a verb phrase completed by the interface's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Open => "open a netlink socket for",
            Op::GetLink => "look up interface",
            Op::CreateLink => "create the dummy interface",
            Op::SetUp => "bring up interface",
            Op::ListAddresses => "list the addresses of interface",
            Op::AddAddress => "add the address to interface",
            Op::DeleteLink => "delete interface",
        }
    }
}

/// Why the dummy interface could not be made, checked or removed.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum NetifError {
    /// EPERM or EACCES: the process lacks CAP_NET_ADMIN (in its network namespace).
    NoPermission {
        /// The operation refused.
        op: Op,
        /// The interface.
        name: String,
    },
    /// EOPNOTSUPP from RTM_NEWLINK: the kernel has no such link kind (module not built or
    /// not loadable).
    KindMissing {
        /// The interface.
        name: String,
        /// The link kind asked for: `dummy` outside tests.
        kind: &'static str,
    },
    /// The name breaks the kernel's rules; checked before any netlink call.
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule.
        reason: &'static str,
    },
    /// A link of that name exists but is not a dummy: the hub neither uses nor deletes it.
    NotDummy {
        /// The interface.
        name: String,
        /// Its IFLA_INFO_KIND, absent for kinds without one (loopback, some physical NICs).
        kind: Option<String>,
    },
    /// The kernel did not answer within [`RECV_TIMEOUT`].
    Timeout {
        /// The operation.
        op: Op,
        /// The interface.
        name: String,
    },
    /// Any other errno.
    Os {
        /// The operation.
        op: Op,
        /// The interface.
        name: String,
        /// The positive errno.
        errno: i32,
    },
    /// The kernel's answer did not parse.
    Malformed {
        /// The operation.
        op: Op,
        /// The interface.
        name: String,
        /// What was wrong.
        what: &'static str,
    },
}

impl NetifError {
    /// The error for a failed operation's errno (positive), by the rules in the type's docs.
    pub(crate) fn from_errno(op: Op, name: &str, kind: &'static str, errno: i32) -> Self {
        let name = name.to_owned();
        match errno {
            libc::EPERM | libc::EACCES => NetifError::NoPermission { op, name },
            libc::EOPNOTSUPP if op == Op::CreateLink => NetifError::KindMissing { name, kind },
            libc::EAGAIN => NetifError::Timeout { op, name },
            _ => NetifError::Os { op, name, errno },
        }
    }
}

impl fmt::Display for NetifError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetifError::NoPermission { op, name } => write!(
                f,
                "cannot {} {name}: permission denied; the dummy interface needs CAP_NET_ADMIN",
                op.as_str()
            ),
            NetifError::KindMissing { name, kind } => write!(
                f,
                "cannot create the dummy interface {name}: the kernel has no `{kind}` link \
                 kind; load the kernel module `{kind}` (on OpenWrt install the package \
                 kmod-{kind})"
            ),
            NetifError::InvalidName { name, reason } => {
                write!(f, "invalid interface name {name:?}: {reason}")
            }
            NetifError::NotDummy { name, kind } => write!(
                f,
                "interface {name} exists and is not a dummy interface (kind {}); the hub \
                 leaves it alone: choose another --dummy-if-name",
                kind.as_deref().unwrap_or("none")
            ),
            NetifError::Timeout { op, name } => write!(
                f,
                "cannot {} {name}: the kernel did not answer within {} s",
                op.as_str(),
                RECV_TIMEOUT.as_secs()
            ),
            NetifError::Os { op, name, errno } => write!(
                f,
                "cannot {} {name}: {}",
                op.as_str(),
                std::io::Error::from_raw_os_error(*errno)
            ),
            NetifError::Malformed { op, name, what } => write!(
                f,
                "cannot {} {name}: malformed netlink answer ({what})",
                op.as_str()
            ),
        }
    }
}

impl std::error::Error for NetifError {}

/// What [`DummyInterface::ensure`] had to change; all false when everything was in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ensured {
    /// The link was missing and was created (up).
    pub(crate) created: bool,
    /// The link existed but was down and was brought up.
    pub(crate) brought_up: bool,
    /// The address was missing and was added.
    pub(crate) address_added: bool,
}

impl Ensured {
    /// Whether anything was repaired or made.
    pub(crate) fn changed(self) -> bool {
        self.created || self.brought_up || self.address_added
    }
}

/// The hub's dummy interface: its name and its one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DummyInterface {
    /// `--dummy-if-name`, valid by [`validate_dummy_name`].
    pub(crate) name: String,
    /// `--dummy-if-ip`, IPv4-mapped addresses made IPv4.
    pub(crate) ip: IpAddr,
    /// The link kind: `dummy`. Tests use another where the kernel lacks dummy (see tests.rs).
    kind: &'static str,
}

impl DummyInterface {
    /// Checks the name (the address is checked with the flags, by [`validate_dummy_ip`]).
    pub(crate) fn new(name: &str, ip: IpAddr) -> Result<Self, NetifError> {
        Self::with_kind(name, ip, "dummy")
    }

    /// [`DummyInterface::new`] with another link kind, for tests on kernels without dummy
    /// (`--test-only-dummy-if-kind`).
    pub(crate) fn with_kind(
        name: &str,
        ip: IpAddr,
        kind: &'static str,
    ) -> Result<Self, NetifError> {
        validate_dummy_name(name).map_err(|reason| NetifError::InvalidName {
            name: name.to_owned(),
            reason,
        })?;
        Ok(DummyInterface {
            name: name.to_owned(),
            ip: ip.to_canonical(),
            kind,
        })
    }

    /// Makes the interface exist, be up and carry the address, changing only what is
    /// missing; other addresses on it stay, as YurtHub's AddrReplace leaves them
    /// (dummyif_linux.go:46-69). Unlike YurtHub it also brings the link up: a down dummy
    /// gets no local route, so its address would not answer.
    pub(crate) fn ensure(&self) -> Result<Ensured, NetifError> {
        let mut done = Ensured::default();
        let link = match self.link()? {
            Some(link) => link,
            None => {
                match self.ack(Op::CreateLink, |seq| {
                    wire::new_link(seq, &self.name, self.kind)
                }) {
                    // Another process made it between the look-up and here: fine.
                    Err(NetifError::Os { errno, .. }) if errno == libc::EEXIST => {}
                    other => {
                        other?;
                        done.created = true;
                    }
                }
                self.link()?
                    .ok_or_else(|| self.malformed(Op::GetLink, "link vanished"))?
            }
        };
        if link.flags & libc::IFF_UP as u32 == 0 {
            self.ack(Op::SetUp, |seq| wire::set_up(seq, link.index))?;
            done.brought_up = true;
        }
        if !self.addresses(link.index)?.contains(&self.ip) {
            match self.ack(Op::AddAddress, |seq| {
                wire::new_addr(seq, link.index, self.ip)
            }) {
                Err(NetifError::Os { errno, .. }) if errno == libc::EEXIST => {}
                other => {
                    other?;
                    done.address_added = true;
                }
            }
        }
        Ok(done)
    }

    /// Deletes the interface (and so its addresses); a missing one is fine. A link of that
    /// name that is not a dummy is refused, never deleted.
    pub(crate) fn remove(&self) -> Result<(), NetifError> {
        let Some(link) = self.link()? else {
            return Ok(());
        };
        match self.ack(Op::DeleteLink, |seq| wire::del_link(seq, link.index)) {
            Err(NetifError::Os { errno, .. }) if errno == libc::ENODEV => Ok(()),
            other => other,
        }
    }

    /// The link of that name; `NotDummy` when it has another kind.
    fn link(&self) -> Result<Option<wire::Link>, NetifError> {
        let mut link = None;
        let found = self.transact(
            Op::GetLink,
            |seq| wire::get_link(seq, &self.name),
            |kind, payload| {
                if kind != libc::RTM_NEWLINK {
                    return Err("unexpected message type");
                }
                link = Some(wire::parse_link(payload)?);
                Ok(true)
            },
        );
        match found {
            Err(NetifError::Os { errno, .. }) if errno == libc::ENODEV => return Ok(None),
            other => other?,
        }
        let link = link.ok_or_else(|| self.malformed(Op::GetLink, "no link in the answer"))?;
        if link.kind.as_deref() != Some(self.kind) {
            return Err(NetifError::NotDummy {
                name: self.name.clone(),
                kind: link.kind,
            });
        }
        Ok(Some(link))
    }

    /// The addresses of the link `index` in the family of the hub's address.
    fn addresses(&self, index: u32) -> Result<Vec<IpAddr>, NetifError> {
        let mut found = Vec::new();
        self.transact(
            Op::ListAddresses,
            |seq| wire::get_addrs(seq, family(self.ip)),
            |kind, payload| {
                if kind != libc::RTM_NEWADDR {
                    return Err("unexpected message type");
                }
                // The kernel filters a dump by index only in strict mode: filter here.
                if let (i, Some(ip)) = wire::parse_addr(payload)?
                    && i == index
                {
                    found.push(ip);
                }
                Ok(false)
            },
        )?;
        Ok(found)
    }

    /// A request the kernel answers with an ack (NLMSG_ERROR 0) or an errno.
    fn ack(&self, op: Op, build: impl FnOnce(u32) -> Vec<u8>) -> Result<(), NetifError> {
        self.transact(op, build, |_, _| Err("unexpected message type"))
    }

    /// Sends one request on a fresh socket and feeds the answer's messages of our sequence
    /// number to `on_data` until it returns true, an ack or NLMSG_DONE ends the answer, or an
    /// error does.
    fn transact(
        &self,
        op: Op,
        build: impl FnOnce(u32) -> Vec<u8>,
        mut on_data: impl FnMut(u16, &[u8]) -> Result<bool, &'static str>,
    ) -> Result<(), NetifError> {
        // Fresh sequence numbers keep a stray late answer from matching.
        static SEQ: AtomicU32 = AtomicU32::new(1);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let errno = |e: std::io::Error| {
            NetifError::from_errno(op, &self.name, self.kind, e.raw_os_error().unwrap_or(0))
        };
        let socket = sys::Socket::open(RECV_TIMEOUT).map_err(|e| match errno(e) {
            NetifError::Os { errno, .. } => NetifError::Os {
                op: Op::Open,
                name: self.name.clone(),
                errno,
            },
            other => other,
        })?;
        socket.send(&build(seq)).map_err(errno)?;
        let mut buf = vec![0u8; sys::RECV_BUFFER];
        loop {
            let len = socket.recv(&mut buf).map_err(errno)?;
            for message in wire::Messages::new(&buf[..len]) {
                let message = message.map_err(|what| self.malformed(op, what))?;
                if message.seq != seq {
                    continue;
                }
                match message.kind {
                    wire::NLMSG_ERROR | wire::NLMSG_DONE => {
                        return match wire::parse_errno(message.kind, message.payload) {
                            Ok(0) => Ok(()),
                            Ok(e) => Err(NetifError::from_errno(op, &self.name, self.kind, e)),
                            Err(what) => Err(self.malformed(op, what)),
                        };
                    }
                    wire::NLMSG_NOOP => {}
                    kind => {
                        if on_data(kind, message.payload).map_err(|w| self.malformed(op, w))? {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// A `Malformed` error for this interface.
    fn malformed(&self, op: Op, what: &'static str) -> NetifError {
        NetifError::Malformed {
            op,
            name: self.name.clone(),
            what,
        }
    }
}

/// The address family of an address, as netlink wants it.
fn family(ip: IpAddr) -> u8 {
    // AF_INET (2) and AF_INET6 (10) fit a byte: ifaddrmsg's family is a u8.
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}
