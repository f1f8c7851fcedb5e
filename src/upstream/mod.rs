//! The cloud side: the only module that touches ureq. It turns a request the proxy wants to
//! send into an HTTPS exchange with a healthy backend, with the hub's credentials (client
//! certificate, bearer token) or the client's own bearer token, and hands back the status,
//! headers and a streaming body reader. It also probes backends for the health checker.
//! The request path sees it through the [`Cloud`] trait, so its policy is tested without it.
//!
//! It does not decide what to send or what to do with the answer (that is `proxy/`), and
//! never buffers a body: bodies stream in both directions.
//!
//! This file holds what the rest of the hub sees (the [`Cloud`] trait, [`Upstream`] and its TLS
//! swap, the request and answer types, [`UpstreamError`]); the work is in files by job:
//! `send.rs` the request path (failover across backends, one exchange with one server, the
//! client's body, a stream's cancel handle), `plain.rs` a bounded exchange on a pooled
//! connection (every request but a stream's), `exchange.rs` the hub's own short exchanges and
//! the health probe, `agents.rs` the pooled connections and the streams' ureq agents over one
//! set of TLS material, `conn.rs` each
//! connection's bookkeeping (its socket noted, counted open), `retire.rs` the pooled
//! connections a TLS swap closes, `socket.rs` the TCP transport, `tls_conn.rs` the TLS layer over it (one rustls configuration per identity), `token.rs` the bearer token,
//! `tunnel.rs` the cloud's side of a tunnel (exec, attach, port-forward), on a connection the
//! hub dials itself with rustls: ureq keeps the socket behind a 101.

use std::io::{self, Read};
use std::sync::{Arc, PoisonError, RwLock, Weak};

use ureq::unversioned::transport::ShutdownHandle;

use crate::config::Token;
use crate::health::Backends;
use crate::http1;
use crate::link::{Counted, Link};
use crate::route::{Deadline, Identity};
use crate::tls::{ClientKeyError, TlsMaterial};

mod agents;
mod conn;
mod exchange;
pub(crate) mod inflate;
mod plain;
mod retire;
mod send;
mod socket;
mod tls_conn;
mod token;
mod tunnel;

use agents::Agents;
pub(crate) use inflate::{CLIENT_PERMITS, Permit, accepts_gzip};
use token::TokenSource;
pub(crate) use tunnel::{Opened, TunnelRequest};
/// Headers that belong to one connection and never cross the proxy (RFC 9110 §7.6.1), plus
/// the ones the transport sets itself.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    ];
    // Asked of every header both ways: a name no hop-by-hop name is as long as (most) is
    // ruled out by its length alone. (Each of them is shorter than 32 bytes.)
    const LENGTHS: u32 = {
        let mut mask = 0;
        let mut i = 0;
        while i < HOP.len() {
            mask |= 1 << HOP[i].len();
            i += 1;
        }
        mask
    };
    if name.len() >= 32 || LENGTHS & (1 << name.len()) == 0 {
        return false;
    }
    // The length compared here, before the call: most names pass the mask for one of the
    // twelve at most.
    HOP.iter()
        .any(|h| h.len() == name.len() && crate::ascii::eq_ignore_ascii_case(name, h))
}

/// Of a 101's headers, those that frame an HTTP body, which a switched connection has
/// none of: the hub's 101 to the client goes without them (the cloud's `Upgrade` and
/// `Connection` stay: they say what the connection switched to).
pub(crate) fn is_framing_header(name: &str) -> bool {
    ["content-length", "transfer-encoding", "keep-alive"]
        .iter()
        .any(|h| crate::ascii::eq_ignore_ascii_case(name, h))
}

/// The client's headers the cloud gets, the one trust rule for every request the hub
/// forwards (`send` and `tunnel`): none that is hop-by-hop ([`is_hop_by_hop`]) or that the
/// client's `Connection` names (RFC 9110 §7.6.1), no `Accept` when the hub sets its own
/// (`skip_accept`), and `Authorization` only under the client's own identity. The caller
/// adds what it sets itself (the hub's token, `Accept`, a length, an upgrade's
/// `Connection` and `Upgrade`).
pub(crate) fn forwarded_headers(
    headers: &[(String, String)],
    identity: Identity,
    skip_accept: bool,
) -> impl Iterator<Item = (&str, &str)> {
    // Most clients send no `Connection` header: then nothing is collected.
    let connection_tokens: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| crate::ascii::eq_ignore_ascii_case(n, "connection"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    headers
        .iter()
        .filter(move |(name, _)| {
            !(is_hop_by_hop(name)
                || connection_tokens
                    .iter()
                    .any(|t| crate::ascii::eq_ignore_ascii_case(t, name))
                || (skip_accept && crate::ascii::eq_ignore_ascii_case(name, "accept"))
                || (identity != Identity::Client
                    && crate::ascii::eq_ignore_ascii_case(name, "authorization")))
        })
        .map(|(n, v)| (n.as_str(), v.as_str()))
}

/// A request body from the client.
pub(crate) struct BodySource<'a> {
    /// The bytes, read as they are sent.
    pub reader: &'a mut dyn Read,
    /// `Content-Length` when the client gave one (else the body goes out chunked).
    pub length: Option<u64>,
}

/// One request to send to the cloud.
pub(crate) struct Outgoing<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The Kubernetes verb, as the request was classified (the link totals' key).
    pub verb: crate::request::Verb,
    /// Path and query, as received.
    pub path_and_query: &'a str,
    /// Client headers; hop-by-hop ones are dropped here.
    pub headers: &'a [(String, String)],
    /// Replaces the client's `Accept` (the hub asks for JSON when it will cache).
    pub accept: Option<&'static str>,
    /// The `Accept-Encoding` the cloud gets.
    pub encoding: Encoding,
    /// The body, when the client sent one.
    pub body: Option<BodySource<'a>>,
    /// Time allowed.
    pub deadline: Deadline,
    /// Whose credentials.
    pub identity: Identity,
    /// The client's original target when `path_and_query` is not it (a watch's legs), so
    /// that `--lb-mode=consistent-hashing` keys every leg as the client's request; None keys
    /// by `path_and_query`.
    pub affinity: Option<&'a str>,
}

/// The `Accept-Encoding` a request goes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// The client's own, if any (a watch, a write, a tunnel; the hub's readers that set it).
    AsClient,
    /// `gzip`, whatever the client sent: the hub inflates the answer where the client did not
    /// ask ([`Answer::inflate`]). With `--upstream-gzip=false` this is [`Encoding::AsClient`].
    Gzip,
}

impl Upstream {
    /// The consistent-hashing key of a request with `headers` for `target` (its original
    /// target): its User-Agent (the hub's own when it has none) and the target. 0 when no
    /// pick reads it ([`Backends::hashes`]): the key costs a hash per request.
    fn pick_key(&self, headers: &[(String, String)], target: &str) -> u64 {
        if !self.backends.hashes() {
            return 0;
        }
        let user_agent = http1::find_header(headers, "user-agent").unwrap_or(HUB_USER_AGENT);
        crate::health::affinity_key(user_agent, target)
    }
}

/// The cloud's answer: status and headers now, the body as it arrives.
pub(crate) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Headers as received, hop-by-hop ones removed.
    pub headers: Vec<(String, String)>,
    /// `Content-Length` of the body, when the cloud gave one.
    pub length: Option<u64>,
    /// Streaming body.
    pub body: AnswerBody,
    /// Which backend answered.
    pub backend: usize,
    /// For a stream: ends it from another thread (its connection is its own).
    pub cancel: Option<Cancel>,
}

/// Ends one streaming exchange from another thread: its blocked reads end at once. Used to
/// free a watch whose client hung up while the cloud was silent.
#[derive(Clone)]
pub(crate) struct Cancel(Weak<dyn ShutdownHandle>);

impl Cancel {
    /// A handle on `handle` (the reaper's tests cancel a stand-in).
    #[cfg(test)]
    pub(crate) fn of(handle: &Arc<dyn ShutdownHandle>) -> Cancel {
        Cancel(Arc::downgrade(handle))
    }

    /// Shuts the stream's connection down (nothing when it is already closed).
    pub(crate) fn cancel(self) {
        if let Some(handle) = self.0.upgrade() {
            handle.shutdown();
        }
    }
}

impl Answer {
    /// The first header named `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        http1::find_header(&self.headers, name)
    }

    /// The body is JSON (what the cache can store).
    pub(crate) fn is_json(&self) -> bool {
        self.header("content-type")
            .is_some_and(|t| t.trim_start().starts_with("application/json"))
    }

    /// The body is gzip-encoded.
    pub(crate) fn is_gzip(&self) -> bool {
        inflate::is_gzip(self.header("content-encoding").map(str::as_bytes))
    }

    /// The answer as its reader gets it plain: a gzip body is inflated as it is read (holding
    /// `permit`, None for the hub's own readers and the filters' input), without its
    /// `Content-Encoding` and length, so a relay streams it chunked; any other answer is
    /// returned as it is. A corrupt or cut gzip body fails a read: the relay's client sees its
    /// answer cut.
    pub(crate) fn inflate(self, permit: Option<Permit>) -> Answer {
        self.inflate_within(permit, u64::MAX)
    }

    /// As [`Answer::inflate`] for one of the hub's own readers: a read past
    /// [`inflate::MAX_HUB_READ`] inflated bytes fails (a small gzip body may inflate a
    /// thousandfold; its reader's bound per object does not bound the list).
    pub(crate) fn inflate_for_hub(self) -> Answer {
        self.inflate_within(None, inflate::MAX_HUB_READ)
    }

    /// As [`Answer::inflate`], a read past `limit` inflated bytes failing.
    fn inflate_within(mut self, permit: Option<Permit>, limit: u64) -> Answer {
        // Only a raw body has the header: an inflating one has lost it.
        if !self.is_gzip() {
            return self;
        }
        let AnswerBody(Body::Raw(reader)) = self.body else {
            unreachable!("an inflating body has no Content-Encoding left")
        };
        let link = reader.link().clone();
        self.body = AnswerBody(Body::Inflating(Box::new(inflate::Inflating::new(
            reader,
            Some(link),
            permit,
            limit,
        ))));
        self.headers.retain(|(name, _)| {
            !(crate::ascii::eq_ignore_ascii_case(name, "content-encoding")
                || crate::ascii::eq_ignore_ascii_case(name, "content-length"))
        });
        self.length = None;
        self
    }
}

/// A streaming response body; reads return as soon as bytes arrive. Each read's bytes are
/// counted on the link at once (a watch's too, while it lasts): one relaxed atomic add.
pub(crate) struct AnswerBody(Body);

/// The body as the link carries it, or inflated ([`Answer::inflate`]).
enum Body {
    Raw(Counted<Wire>),
    Inflating(Box<inflate::Inflating<Counted<Wire>>>),
}

/// A body as it comes off its connection: a stream's through ureq, a bounded exchange's on a
/// pooled connection (`plain.rs`).
pub(crate) enum Wire {
    Stream(ureq::BodyReader<'static>),
    Pooled(plain::PlainBody),
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Stream(reader) => reader.read(buf),
            Wire::Pooled(body) => body.read(buf),
        }
    }
}

impl AnswerBody {
    /// The body of `reader`, counted on `link`.
    fn raw(reader: Wire, link: Link, gzip: bool) -> AnswerBody {
        AnswerBody(Body::Raw(Counted::new(reader, link, gzip)))
    }
}

impl Read for AnswerBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.0 {
            Body::Raw(reader) => reader.read(buf),
            Body::Inflating(inflating) => inflating.read(buf),
        }
    }
}

pub(crate) use crate::cloud_error::UpstreamError;

/// The cloud as the request path sees it: send a request, tell whether any server is usable,
/// name a server. [`Upstream`] is the real one; the proxy's fallback tests use a fake.
pub(crate) trait Cloud: Send + Sync {
    /// Sends `req` to a healthy server ([`Upstream::send`]).
    fn send(&self, req: Outgoing<'_>) -> Result<Answer, UpstreamError>;
    /// Some server is usable ([`Backends::any_healthy`]): else the hub answers offline.
    fn any_healthy(&self) -> bool;
    /// Some server is healthy by its last probe, suspect since a failed request or not:
    /// writes still go there ([`Backends::any_probed_healthy`]).
    fn any_probed_healthy(&self) -> bool;
    /// The base URL of server `backend` (the [`Answer::backend`] that answered).
    fn server(&self, backend: usize) -> &str;
    /// Server `backend` is healthy by its last probe ([`Backends::is_healthy`]); true for
    /// an answer from no cloud server ([`LEADER_BACKEND`]), which no probe judges. A
    /// resumable watch's leg on a server found unhealthy is ended (`reaper::watch_leg`).
    fn healthy(&self, backend: usize) -> bool;
    /// How many times a server became usable after it was not ([`Backends::recoveries`]):
    /// a resumable watch's jitter is drawn per outage.
    fn recoveries(&self) -> u64;
    /// Opens a tunnel (exec, attach, port-forward) on a healthy server
    /// ([`Upstream::open_tunnel`]); the fakes of the proxy's tests have none.
    fn open_tunnel(&self, req: &TunnelRequest<'_>) -> Result<Opened, UpstreamError> {
        let _ = req;
        Err(UpstreamError::NoHealthyBackend)
    }
}

impl Cloud for Upstream {
    fn send(&self, req: Outgoing<'_>) -> Result<Answer, UpstreamError> {
        Upstream::send(self, req)
    }

    fn any_healthy(&self) -> bool {
        self.backends.any_healthy()
    }

    fn any_probed_healthy(&self) -> bool {
        self.backends.any_probed_healthy()
    }

    fn server(&self, backend: usize) -> &str {
        &self.backends.get(backend).base
    }

    fn healthy(&self, backend: usize) -> bool {
        backend >= self.backends.len() || self.backends.is_healthy(backend)
    }

    fn recoveries(&self) -> u64 {
        self.backends.recoveries()
    }

    fn open_tunnel(&self, req: &TunnelRequest<'_>) -> Result<Opened, UpstreamError> {
        Upstream::open_tunnel(self, req)
    }
}

/// The cloud client.
pub(crate) struct Upstream {
    backends: Arc<Backends>,
    /// The agents of the current TLS material (`None`: none yet), replaced whole by
    /// [`Upstream::set_tls`]. A request takes a snapshot for as long as it waits for its
    /// answer's head; see [`Upstream::set_tls`] for what happens to the old connections.
    agents: RwLock<Option<Arc<Agents>>>,
    token: Option<TokenSource>,
    /// Idle connections each pool keeps (see `agents::plain`).
    pool: usize,
}

/// Why nothing can be sent before [`Upstream::set_tls`].
const NO_TLS_YET: &str = "the cluster CA and the hub's certificate are not known yet";

impl Upstream {
    /// The cloud client over `backends`, with the agents of `tls` (with and without the
    /// hub's client certificate). Without TLS material (token mode before discovery or the
    /// first certificate) every send fails with [`UpstreamError::NoCredentials`] until
    /// [`Upstream::set_tls`]. `pool` is the most requests the hub has in flight at once
    /// (`--max-requests-in-flight`): as many connections may be wanted again at once, so as
    /// many are kept idle (see `agents::plain`).
    pub(crate) fn new(
        backends: Arc<Backends>,
        tls: Option<&TlsMaterial>,
        token: Option<Token>,
        pool: usize,
    ) -> Result<Upstream, ClientKeyError> {
        let agents = tls
            .map(|tls| Agents::new(tls, pool))
            .transpose()?
            .map(Arc::new);
        Ok(Upstream {
            backends,
            agents: RwLock::new(agents),
            token: token.map(TokenSource::new),
            pool,
        })
    }

    /// Replaces the TLS material (a rotated client certificate, a CA learnt by discovery):
    /// new agents, swapped in at once, so the next request uses them. A request already
    /// sent, and an open stream (a watch), keeps its connection to its end. The old pooled
    /// connections close at once when idle, and when their answer ends otherwise — never
    /// reused (YurtHub closes every connection within 10 s of a rotation, in use or not).
    pub(crate) fn set_tls(&self, tls: &TlsMaterial) -> Result<(), ClientKeyError> {
        let agents = Arc::new(Agents::new(tls, self.pool)?);
        let old = self
            .agents
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(agents);
        // Outside the lock: closing connections makes system calls. A pool closes its idle
        // connections only when its agents go, and a request waiting for its answer
        // may hold the old agents for minutes: the generation closes them now.
        if let Some(old) = old {
            old.pooled.retire();
        }
        Ok(())
    }

    /// The current agents, or why there are none.
    fn current(&self) -> Result<Arc<Agents>, UpstreamError> {
        // The lock guards one `Option<Arc>`: a panicking holder cannot leave it torn.
        self.agents
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| UpstreamError::NoCredentials(NO_TLS_YET.into()))
    }

    /// The cluster CA of the current TLS material (empty before there is any): what a
    /// leader's multiplexer port verifies its followers against.
    pub(crate) fn cluster_ca(&self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        self.current().map(|a| a.roots.clone()).unwrap_or_default()
    }

    /// The backends this client spreads over.
    pub(crate) fn backends(&self) -> &Arc<Backends> {
        &self.backends
    }
}

/// One short exchange with one server, whatever its health: the health probe's and the
/// lease heartbeat's requests, on the hub's own credentials.
pub(crate) struct Exchanged {
    /// HTTP status.
    pub status: u16,
    /// The body, at most [`MAX_EXCHANGE_BODY`] bytes.
    pub body: Vec<u8>,
}

/// [`Answer::backend`] of an answer from a leader hub ([`Upstream::send_to_base`]): no
/// cloud server.
pub(crate) const LEADER_BACKEND: usize = usize::MAX;

/// The User-Agent of the hub's own requests (probes, lease renewals, its clients).
pub(crate) const HUB_USER_AGENT: &str = concat!("tinyhub/", env!("CARGO_PKG_VERSION"));

/// Largest body a [`Upstream::exchange_with`] keeps (a Lease, a Node, a Status).
pub(crate) const MAX_EXCHANGE_BODY: u64 = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers() {
        for h in [
            "Connection",
            "keep-alive",
            "Transfer-Encoding",
            "Upgrade",
            "TE",
            "Trailer",
            "Proxy-Authorization",
            "Host",
            "Content-Length",
        ] {
            assert!(is_hop_by_hop(h), "{h}");
        }
        for h in [
            "Accept",
            "Authorization",
            "User-Agent",
            "Content-Type",
            "Accept-Encoding",
            "Content-Encoding",
            "Audit-Id",
        ] {
            assert!(!is_hop_by_hop(h), "{h}");
        }
    }
}

#[cfg(test)]
mod forwarded_tests {
    use super::*;

    #[test]
    fn the_client_s_headers_go_on_but_hop_by_hop_ones_and_credentials_not_its_own() {
        let headers: Vec<(String, String)> = [
            ("Host", "hub"),
            ("Connection", "keep-alive, X-Private"),
            ("X-Private", "hop"),
            ("Upgrade", "SPDY/3.1"),
            ("Accept", "application/json"),
            ("Authorization", "Bearer pod-token"),
            ("User-Agent", "kubectl"),
            ("Content-Length", "0"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let names = |identity, skip_accept| {
            forwarded_headers(&headers, identity, skip_accept)
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Identity::Client, false),
            ["Accept", "Authorization", "User-Agent"]
        );
        assert_eq!(
            names(Identity::Client, true),
            ["Authorization", "User-Agent"]
        );
        assert_eq!(names(Identity::Hub, false), ["Accept", "User-Agent"]);
        assert_eq!(names(Identity::Anonymous, true), ["User-Agent"]);
    }
}

#[cfg(test)]
mod tls_tests;

#[cfg(test)]
mod pool_tests;
