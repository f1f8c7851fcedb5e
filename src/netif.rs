//! The hub's local address: a Linux dummy interface (`--dummy-if-name`, default `hub-dummy0`)
//! carrying `--dummy-if-ip` (default 169.254.2.1) as a /32 (or /128), so pods reach the hub at
//! an address that exists on every node. Made, checked and removed over rtnetlink with the
//! libc crate, as YurtHub does with vishvananda/netlink
//! (openyurt pkg/yurthub/network/dummyif_linux.go).
//!
//! Two layers: netlink messages are built and answers parsed by pure functions over byte
//! buffers (the `wire` part, tested byte for byte); [`DummyInterface`] drives them over one
//! NETLINK_ROUTE socket per operation, each with a receive timeout. [`LocalAddress`] is the
//! hub's use of it at run time: made at start (or a warning and the fallback host), re-checked
//! every [`RECHECK_PERIOD`] on its own thread, removed at exit; the proxy ports are app.rs's.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[cfg(test)]
mod tests;

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
pub(crate) fn validate_dummy_ip(ip: IpAddr) -> Result<(), String> {
    let v4 = match ip.to_canonical() {
        IpAddr::V6(_) => return Ok(()),
        IpAddr::V4(v4) => v4,
    };
    let [a, b, c, _] = v4.octets();
    if (a, b) != (169, 254) {
        return Err(format!(
            "--dummy-if-ip {ip} is not in 169.254.0.0/16 (an IPv4 dummy address must be link-local)"
        ));
    }
    if c == 31 {
        return Err(format!(
            "--dummy-if-ip {ip} is in the reserved 169.254.31.0/24"
        ));
    }
    if v4 == Ipv4Addr::new(169, 254, 1, 1) {
        return Err(format!("--dummy-if-ip {ip} is reserved"));
    }
    Ok(())
}

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

/// The hub's local address at run time: the interface when it is up, and the host the
/// response filters inject into what pods read (YurtHub's `pkg/yurthub/filter/manager/manager.go`).
#[derive(Debug)]
pub(crate) struct LocalAddress {
    /// The interface, when it was made (or found in place) at start; None when disabled, in
    /// cloud mode, or when it could not be made.
    pub(crate) interface: Option<DummyInterface>,
    /// The dummy IP when the interface is up, else `--bind-proxy-address`: where in-cluster
    /// clients are pointed (with `--proxy-secure-port`).
    pub(crate) filter_host: IpAddr,
}

impl LocalAddress {
    /// Makes the configured interface. A failure is one log line and the hub runs on with
    /// `bind_proxy` as the filters' host, as YurtHub does without CAP_NET_ADMIN; a missing
    /// permission or kernel module is a warning, anything else an error (the hub still serves
    /// the node on its other addresses).
    pub(crate) fn start(wanted: Option<&DummyInterface>, bind_proxy: IpAddr) -> LocalAddress {
        let fallback = LocalAddress {
            interface: None,
            filter_host: bind_proxy,
        };
        let Some(wanted) = wanted else {
            return fallback;
        };
        match wanted.ensure() {
            Ok(done) => {
                log::info!(
                    "dummy interface {} carries {}{}",
                    wanted.name,
                    wanted.ip,
                    if done.created { " (created)" } else { "" }
                );
                LocalAddress {
                    interface: Some(wanted.clone()),
                    filter_host: wanted.ip,
                }
            }
            Err(e) => {
                let line = format!(
                    "{e}; the hub runs without its local address {}: in-cluster clients are \
                     pointed at --bind-proxy-address {bind_proxy}",
                    wanted.ip
                );
                match e {
                    NetifError::NoPermission { .. } | NetifError::KindMissing { .. } => {
                        log::warn!("{line}")
                    }
                    _ => log::error!("{line}"),
                }
                fallback
            }
        }
    }

    /// The address the proxy ports also listen on: the dummy IP when the interface is up,
    /// unless `bind_proxy` already covers it (the same address, or an unspecified one that
    /// takes it, which a second bind of the port would collide with).
    pub(crate) fn extra_listen_ip(&self, bind_proxy: IpAddr) -> Option<IpAddr> {
        let ip = self.interface.as_ref()?.ip;
        // `::` takes IPv4 too: std leaves IPV6_V6ONLY at Linux's default (off).
        let covered = bind_proxy == ip
            || (bind_proxy.is_unspecified() && (bind_proxy.is_ipv6() || ip.is_ipv4()));
        (!covered).then_some(ip)
    }

    /// Re-checks the interface every [`RECHECK_PERIOD`] until `stop` is disconnected; a repair
    /// is one info line, a failure one warning until it changes or ends.
    pub(crate) fn spawn_recheck(
        &self,
        stop: crossbeam_channel::Receiver<()>,
    ) -> Result<Option<std::thread::JoinHandle<()>>, crate::error::StartupError> {
        let Some(interface) = self.interface.clone() else {
            return Ok(None);
        };
        crate::spawn("dummy-if-check", move || {
            recheck_loop(&interface, &stop, RECHECK_PERIOD)
        })
        .map(Some)
    }

    /// Deletes the interface at exit; a failure is logged (the next start re-uses it).
    pub(crate) fn remove(&self) {
        let Some(interface) = &self.interface else {
            return;
        };
        match interface.remove() {
            Ok(()) => log::info!("dummy interface {} removed", interface.name),
            Err(e) => log::warn!("{e}; the dummy interface stays until the next start re-uses it"),
        }
    }
}

/// The re-check thread's body: one [`DummyInterface::recheck`] per `period` until `stop` is
/// disconnected (a message on it also ends the loop).
fn recheck_loop(
    interface: &DummyInterface,
    stop: &crossbeam_channel::Receiver<()>,
    period: Duration,
) {
    let mut failing: Option<String> = None;
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stop.recv_timeout(period) {
        match interface.ensure() {
            Ok(done) => {
                if done.changed() {
                    log::info!(
                        "dummy interface {} repaired:{}{}{}",
                        interface.name,
                        if done.created { " created" } else { "" },
                        if done.brought_up { " brought up" } else { "" },
                        if done.address_added {
                            " address re-added"
                        } else {
                            ""
                        },
                    );
                } else if failing.is_some() {
                    log::info!("dummy interface {} is in place again", interface.name);
                }
                failing = None;
            }
            Err(e) => {
                let text = e.to_string();
                if failing.as_deref() != Some(text.as_str()) {
                    log::warn!("re-checking the dummy interface: {text}");
                }
                failing = Some(text);
            }
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

/// rtnetlink messages as bytes: builders for the requests, parsers for the answers. No I/O.
///
/// Layouts, from the kernel's uapi headers, all fields in host byte order:
///
/// ```text
/// nlmsghdr (linux/netlink.h), 16 bytes:
///   u32 nlmsg_len (header included)  u16 nlmsg_type  u16 nlmsg_flags  u32 nlmsg_seq  u32 nlmsg_pid
/// ifinfomsg (linux/rtnetlink.h), 16 bytes:
///   u8 ifi_family  u8 pad  u16 ifi_type  i32 ifi_index  u32 ifi_flags  u32 ifi_change
/// ifaddrmsg (linux/if_addr.h), 8 bytes:
///   u8 ifa_family  u8 ifa_prefixlen  u8 ifa_flags  u8 ifa_scope  u32 ifa_index
/// rtattr (linux/rtnetlink.h), 4 bytes, then the data, then padding to RTA_ALIGN (4):
///   u16 rta_len (header and data, not the padding)  u16 rta_type
/// nlmsgerr (linux/netlink.h): i32 error (negative errno, 0 for an ack), then the request's
///   nlmsghdr (and, without NETLINK_CAP_ACK, its payload)
/// ```
///
/// A message's payload starts at NLMSG_ALIGN(16) and the next message at
/// NLMSG_ALIGN(nlmsg_len); NLMSG_ALIGNTO and RTA_ALIGNTO are both 4.
mod wire {
    use std::net::IpAddr;

    /// NLMSG_NOOP (linux/netlink.h).
    pub(super) const NLMSG_NOOP: u16 = libc::NLMSG_NOOP as u16;
    /// NLMSG_ERROR: an errno or, when 0, an ack.
    pub(super) const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
    /// NLMSG_DONE: the end of a dump, with an i32 status.
    pub(super) const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
    /// sizeof(struct nlmsghdr).
    const HEADER: usize = 16;
    /// sizeof(struct ifinfomsg).
    const IFINFOMSG: usize = 16;
    /// sizeof(struct ifaddrmsg).
    const IFADDRMSG: usize = 8;
    /// sizeof(struct rtattr).
    const RTA_HEADER: usize = 4;
    /// NLA_F_NESTED | NLA_F_NET_BYTEORDER, which the kernel may set on rta_type.
    const NLA_TYPE_MASK: u16 = !(libc::NLA_F_NESTED as u16 | libc::NLA_F_NET_BYTEORDER as u16);
    /// IFA_F_NODAD (linux/if_addr.h): no duplicate address detection, so an IPv6 address is
    /// usable at once (a dummy is NOARP and skips DAD anyway).
    const IFA_F_NODAD: u8 = 0x02;

    /// NLMSG_ALIGN / RTA_ALIGN: both round up to 4.
    pub(super) fn align(len: usize) -> usize {
        (len + 3) & !3
    }

    /// A request under construction: header, fixed part, attributes.
    struct Request {
        buf: Vec<u8>,
    }

    impl Request {
        /// A header of type `kind`, NLM_F_REQUEST added to `flags`; the length is set by
        /// `finish`, the pid left 0 (the kernel fills in the socket's).
        fn new(kind: u16, flags: u16, seq: u32) -> Self {
            let mut buf = Vec::with_capacity(64);
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&kind.to_ne_bytes());
            buf.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
            buf.extend_from_slice(&seq.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            Request { buf }
        }

        /// An ifinfomsg, AF_UNSPEC, type 0.
        fn ifinfomsg(mut self, index: u32, flags: u32, change: u32) -> Self {
            self.buf
                .extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
            self.buf.extend_from_slice(&index.to_ne_bytes());
            self.buf.extend_from_slice(&flags.to_ne_bytes());
            self.buf.extend_from_slice(&change.to_ne_bytes());
            self
        }

        /// An ifaddrmsg, scope universe.
        fn ifaddrmsg(mut self, family: u8, prefix: u8, flags: u8, index: u32) -> Self {
            self.buf.extend_from_slice(&[family, prefix, flags, 0]);
            self.buf.extend_from_slice(&index.to_ne_bytes());
            self
        }

        /// An attribute with its data, padded to RTA_ALIGN.
        fn attr(mut self, kind: u16, data: &[u8]) -> Self {
            let start = self.begin(kind);
            self.buf.extend_from_slice(data);
            self.end(start);
            self
        }

        /// Opens a nested attribute; `end` closes it.
        fn begin(&mut self, kind: u16) -> usize {
            let start = self.buf.len();
            self.buf.extend_from_slice(&0u16.to_ne_bytes());
            self.buf.extend_from_slice(&kind.to_ne_bytes());
            start
        }

        /// Writes rta_len of the attribute opened at `start`, then pads.
        fn end(&mut self, start: usize) {
            // Attributes here are a name (<= 16 bytes) or a few nested ones: far below 64 KiB.
            let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
            self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
            self.buf.resize(align(self.buf.len()), 0);
        }

        /// The message, nlmsg_len filled in.
        fn finish(mut self) -> Vec<u8> {
            // Requests are a few dozen bytes: the length fits u32.
            let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
            self.buf[..4].copy_from_slice(&len.to_ne_bytes());
            self.buf
        }
    }

    /// The name as IFLA_IFNAME data: NUL-terminated, as iproute2 sends it.
    fn c_name(name: &str) -> Vec<u8> {
        let mut data = name.as_bytes().to_vec();
        data.push(0);
        data
    }

    /// RTM_GETLINK for one link by name; answered by one RTM_NEWLINK or an error (ENODEV).
    pub(super) fn get_link(seq: u32, name: &str) -> Vec<u8> {
        Request::new(libc::RTM_GETLINK, 0, seq)
            .ifinfomsg(0, 0, 0)
            .attr(libc::IFLA_IFNAME, &c_name(name))
            .finish()
    }

    /// RTM_NEWLINK creating link `name` of `kind`, up: `ip link add NAME up type KIND`.
    /// NLM_F_EXCL makes an existing link EEXIST rather than a silent change.
    pub(super) fn new_link(seq: u32, name: &str, kind: &str) -> Vec<u8> {
        let up = libc::IFF_UP as u32;
        let flags = (libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
        let mut request = Request::new(libc::RTM_NEWLINK, flags, seq)
            .ifinfomsg(0, up, up)
            .attr(libc::IFLA_IFNAME, &c_name(name));
        let info = request.begin(libc::IFLA_LINKINFO);
        // IFLA_INFO_KIND without a NUL, as iproute2 sends it; the kernel accepts both.
        request = request.attr(libc::IFLA_INFO_KIND, kind.as_bytes());
        request.end(info);
        request.finish()
    }

    /// RTM_NEWLINK setting IFF_UP on link `index`: `ip link set DEV up`.
    pub(super) fn set_up(seq: u32, index: u32) -> Vec<u8> {
        let up = libc::IFF_UP as u32;
        Request::new(libc::RTM_NEWLINK, libc::NLM_F_ACK as u16, seq)
            .ifinfomsg(index, up, up)
            .finish()
    }

    /// RTM_DELLINK of link `index`.
    pub(super) fn del_link(seq: u32, index: u32) -> Vec<u8> {
        Request::new(libc::RTM_DELLINK, libc::NLM_F_ACK as u16, seq)
            .ifinfomsg(index, 0, 0)
            .finish()
    }

    /// RTM_GETADDR dump of one family's addresses on all links.
    pub(super) fn get_addrs(seq: u32, family: u8) -> Vec<u8> {
        Request::new(libc::RTM_GETADDR, libc::NLM_F_DUMP as u16, seq)
            .ifaddrmsg(family, 0, 0, 0)
            .finish()
    }

    /// RTM_NEWADDR of `ip` as a host address (/32 or /128) on link `index`:
    /// `ip addr add IP/32 dev DEV`, with IFA_LOCAL and IFA_ADDRESS both the address, as
    /// iproute2 sends them without a peer.
    pub(super) fn new_addr(seq: u32, index: u32, ip: IpAddr) -> Vec<u8> {
        let flags = (libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
        let request = Request::new(libc::RTM_NEWADDR, flags, seq);
        match ip {
            IpAddr::V4(v4) => request
                .ifaddrmsg(libc::AF_INET as u8, 32, 0, index)
                .attr(libc::IFA_LOCAL, &v4.octets())
                .attr(libc::IFA_ADDRESS, &v4.octets()),
            IpAddr::V6(v6) => request
                .ifaddrmsg(libc::AF_INET6 as u8, 128, IFA_F_NODAD, index)
                .attr(libc::IFA_LOCAL, &v6.octets())
                .attr(libc::IFA_ADDRESS, &v6.octets()),
        }
        .finish()
    }

    /// One message of an answer.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) struct Message<'a> {
        /// nlmsg_type.
        pub(super) kind: u16,
        /// nlmsg_seq: the request's.
        pub(super) seq: u32,
        /// What follows the header, up to nlmsg_len.
        pub(super) payload: &'a [u8],
    }

    /// The messages of one datagram, in order; a bad length ends it with an error.
    pub(super) struct Messages<'a> {
        rest: &'a [u8],
    }

    impl<'a> Messages<'a> {
        /// The messages in `buf`.
        pub(super) fn new(buf: &'a [u8]) -> Self {
            Messages { rest: buf }
        }
    }

    impl<'a> Iterator for Messages<'a> {
        type Item = Result<Message<'a>, &'static str>;

        fn next(&mut self) -> Option<Self::Item> {
            if self.rest.is_empty() {
                return None;
            }
            let rest = std::mem::take(&mut self.rest);
            if rest.len() < HEADER {
                return Some(Err("truncated message header"));
            }
            let len = u32_at(rest, 0) as usize;
            if len < HEADER || len > rest.len() {
                return Some(Err("bad message length"));
            }
            self.rest = rest.get(align(len)..).unwrap_or_default();
            Some(Ok(Message {
                kind: u16_at(rest, 4),
                seq: u32_at(rest, 8),
                payload: &rest[HEADER..len],
            }))
        }
    }

    /// The status of NLMSG_ERROR (nlmsgerr.error) or NLMSG_DONE, as a positive errno; 0 for
    /// an ack or a clean end.
    pub(super) fn parse_errno(kind: u16, payload: &[u8]) -> Result<i32, &'static str> {
        match payload.get(..4) {
            Some(bytes) => {
                // Only the first 4 bytes were taken: the conversion cannot fail.
                let status = i32::from_ne_bytes(bytes.try_into().unwrap_or([0; 4]));
                Ok(status.checked_neg().unwrap_or(i32::MAX).max(0))
            }
            // Old kernels end a dump with an empty NLMSG_DONE.
            None if kind == NLMSG_DONE => Ok(0),
            None => Err("truncated error message"),
        }
    }

    /// A link from an RTM_NEWLINK payload.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) struct Link {
        /// ifi_index.
        pub(super) index: u32,
        /// ifi_flags (IFF_UP and the rest).
        pub(super) flags: u32,
        /// IFLA_LINKINFO / IFLA_INFO_KIND, without the kernel's trailing NUL.
        pub(super) kind: Option<String>,
    }

    /// Parses an RTM_NEWLINK payload: ifinfomsg, then attributes.
    pub(super) fn parse_link(payload: &[u8]) -> Result<Link, &'static str> {
        if payload.len() < IFINFOMSG {
            return Err("truncated ifinfomsg");
        }
        let mut link = Link {
            index: u32_at(payload, 4),
            flags: u32_at(payload, 8),
            kind: None,
        };
        for attr in Attrs(&payload[IFINFOMSG..]) {
            let (kind, data) = attr?;
            if kind != libc::IFLA_LINKINFO {
                continue;
            }
            for inner in Attrs(data) {
                let (inner_kind, inner_data) = inner?;
                if inner_kind == libc::IFLA_INFO_KIND {
                    let text = inner_data.split(|&b| b == 0).next().unwrap_or_default();
                    link.kind = Some(String::from_utf8_lossy(text).into_owned());
                }
            }
        }
        Ok(link)
    }

    /// Parses an RTM_NEWADDR payload: the link index and the local address (IFA_LOCAL, else
    /// IFA_ADDRESS: IPv6 sends only the latter), if any.
    pub(super) fn parse_addr(payload: &[u8]) -> Result<(u32, Option<IpAddr>), &'static str> {
        if payload.len() < IFADDRMSG {
            return Err("truncated ifaddrmsg");
        }
        let index = u32_at(payload, 4);
        let (mut local, mut address) = (None, None);
        for attr in Attrs(&payload[IFADDRMSG..]) {
            let (kind, data) = attr?;
            let ip = match data.len() {
                4 => <[u8; 4]>::try_from(data).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(data).ok().map(IpAddr::from),
                _ => None,
            };
            match kind {
                libc::IFA_LOCAL => local = ip,
                libc::IFA_ADDRESS => address = ip,
                _ => {}
            }
        }
        Ok((index, local.or(address)))
    }

    /// The attributes of a buffer: (type without the NLA_F_ flags, data).
    struct Attrs<'a>(&'a [u8]);

    impl<'a> Iterator for Attrs<'a> {
        type Item = Result<(u16, &'a [u8]), &'static str>;

        fn next(&mut self) -> Option<Self::Item> {
            if self.0.is_empty() {
                return None;
            }
            let rest = std::mem::take(&mut self.0);
            if rest.len() < RTA_HEADER {
                return Some(Err("truncated attribute header"));
            }
            let len = usize::from(u16_at(rest, 0));
            if len < RTA_HEADER || len > rest.len() {
                return Some(Err("bad attribute length"));
            }
            self.0 = rest.get(align(len)..).unwrap_or_default();
            Some(Ok((
                u16_at(rest, 2) & NLA_TYPE_MASK,
                &rest[RTA_HEADER..len],
            )))
        }
    }

    /// The u16 at `at`; the caller has checked the length.
    fn u16_at(buf: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([buf[at], buf[at + 1]])
    }

    /// The u32 at `at`; the caller has checked the length.
    fn u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
    }
}

/// The socket calls: the module's only unsafe code.
#[allow(unsafe_code)]
mod sys {
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
        let rc =
            unsafe { libc::setresgid(65534, 65534, 65534) | libc::setresuid(65534, 65534, 65534) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
