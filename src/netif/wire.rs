//! rtnetlink messages as bytes: builders for the requests, parsers for the answers. No I/O.
//!
//! Layouts, from the kernel's uapi headers, all fields in host byte order:
//!
//! ```text
//! nlmsghdr (linux/netlink.h), 16 bytes:
//!   u32 nlmsg_len (header included)  u16 nlmsg_type  u16 nlmsg_flags  u32 nlmsg_seq  u32 nlmsg_pid
//! ifinfomsg (linux/rtnetlink.h), 16 bytes:
//!   u8 ifi_family  u8 pad  u16 ifi_type  i32 ifi_index  u32 ifi_flags  u32 ifi_change
//! ifaddrmsg (linux/if_addr.h), 8 bytes:
//!   u8 ifa_family  u8 ifa_prefixlen  u8 ifa_flags  u8 ifa_scope  u32 ifa_index
//! rtattr (linux/rtnetlink.h), 4 bytes, then the data, then padding to RTA_ALIGN (4):
//!   u16 rta_len (header and data, not the padding)  u16 rta_type
//! nlmsgerr (linux/netlink.h): i32 error (negative errno, 0 for an ack), then the request's
//!   nlmsghdr (and, without NETLINK_CAP_ACK, its payload)
//! ```
//!
//! A message's payload starts at NLMSG_ALIGN(16) and the next message at
//! NLMSG_ALIGN(nlmsg_len); NLMSG_ALIGNTO and RTA_ALIGNTO are both 4.

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
