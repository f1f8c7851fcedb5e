//! The cloud side: the only module that touches ureq. It turns a request the proxy wants to
//! send into an HTTPS exchange with a healthy backend, with the hub's credentials (client
//! certificate, bearer token) or the client's own bearer token, and hands back the status,
//! headers and a streaming body reader. It also probes backends for the health checker.
//! The request path sees it through the [`Cloud`] trait, so its policy is tested without it.
//!
//! It does not decide what to send or what to do with the answer (that is `proxy/`), and
//! never buffers a body: bodies stream in both directions.

use std::cell::RefCell;
use std::fmt;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use ureq::config::AutoHeaderValue;
use ureq::http;
use ureq::tls::{Certificate, ClientCert, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, RustlsConnector, ShutdownHandle, Transport,
};
use ureq::{Agent, SendBody};

use crate::config::Token;
use crate::health::{Backends, Probe};
use crate::http1;
use crate::link::{self, Counted, LINK};
use crate::metrics::{METRICS, Metrics, OpenConn};
use crate::route::{Deadline, Identity};
use crate::tls::{ClientIdentity, TlsMaterial};

mod socket;

use socket::{Socket, TcpConnector};

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
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
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
    /// Path and query, as received.
    pub path_and_query: &'a str,
    /// Client headers; hop-by-hop ones are dropped here.
    pub headers: &'a [(String, String)],
    /// Replaces the client's `Accept` (the hub asks for JSON when it will cache).
    pub accept: Option<&'static str>,
    /// The body, when the client sent one.
    pub body: Option<BodySource<'a>>,
    /// Time allowed.
    pub deadline: Deadline,
    /// Whose credentials.
    pub identity: Identity,
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
        self.header("content-encoding")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"))
    }
}

thread_local! {
    /// The shutdown handle of the last connection this thread opened (see [`Recording`]).
    static LAST_CONNECTION: RefCell<Option<Weak<dyn ShutdownHandle>>> = const { RefCell::new(None) };
}

/// ureq's TCP connector, noting on the calling thread the shutdown handle of each new
/// connection. Streams use an agent that never reuses connections, so the handle noted
/// during a stream's request is its connection's. Each connection counts as open to its
/// server ([`Metrics::open_conn`]) until ureq drops it: pooled, streaming, to a cloud server
/// or a leader hub alike.
#[derive(Debug, Default)]
struct Recording(TcpConnector);

impl Connector<()> for Recording {
    type Out = Hooked<Socket, OpenConn>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let register = Arc::clone(&details.register_shutdown);
        let noting = Arc::new(move |handle: Weak<dyn ShutdownHandle>| {
            LAST_CONNECTION.with(|last| *last.borrow_mut() = Some(handle.clone()));
            register(handle)
        });
        let details = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: Arc::clone(&details.current_time),
            run_connector: Arc::clone(&details.run_connector),
            register_shutdown: noting,
        };
        let server = conn_server(details.uri);
        Ok(self.0.connect(&details, chained)?.map(|inner| Hooked {
            inner,
            hook: METRICS.open_conn(&server, details.needs_tls()),
        }))
    }
}

/// The server of a connection as YurtHub labels its connections: `host:port`.
fn conn_server(uri: &http::Uri) -> String {
    let host = uri.host().unwrap_or_default();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    format!("{host}:{port}")
}

/// What the hub keeps with one of its connections, for as long as the connection lives,
/// and its say in whether the connection may be used (again).
trait ConnHook: Send + Sync + 'static {
    /// Whether the connection is open to use; `inner_open` asks the transport below.
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool;
}

/// An open connection counted to its server: open as the transport says.
impl ConnHook for OpenConn {
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool {
        inner_open()
    }
}

/// A transport passed through, with `hook` beside it.
struct Hooked<T, H> {
    inner: T,
    hook: H,
}

impl<T: fmt::Debug, H> fmt::Debug for Hooked<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T: Transport, H: ConnHook> Transport for Hooked<T, H> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.inner.transmit_output(amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        let inner = &mut self.inner;
        self.hook.is_open(&mut || inner.is_open())
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// The client's body as ureq reads it, noting a failed read and the body's end: ureq's
/// error is the client's, not the cloud's, when a read failed, and when the request ran out
/// of time before the body was all read (a client trickling it in).
struct NotingBody<'r, 'b> {
    reader: &'r mut &'b mut dyn Read,
    failed: bool,
    /// The end was read (a chunked body), or `length` bytes were (ureq reads no further).
    ended: bool,
    length: Option<u64>,
    sent: u64,
}

impl<'r, 'b> NotingBody<'r, 'b> {
    /// Wraps a body of `length` bytes (`None`: chunked); an empty one has ended already.
    fn new(reader: &'r mut &'b mut dyn Read, length: Option<u64>) -> Self {
        NotingBody {
            reader,
            failed: false,
            ended: length == Some(0),
            length,
            sent: 0,
        }
    }
}

impl Read for NotingBody<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.reader.read(buf);
        self.failed |= matches!(&result, Err(e) if e.kind() != io::ErrorKind::Interrupted);
        if let Ok(n) = result {
            self.sent += n as u64;
            self.ended |= (n == 0 && !buf.is_empty()) || self.length == Some(self.sent);
        }
        result
    }
}

/// A streaming response body; reads return as soon as bytes arrive. Each read's bytes are
/// counted on the link at once (a watch's too, while it lasts): one relaxed atomic add.
pub(crate) struct AnswerBody(Counted<ureq::BodyReader<'static>>);

impl Read for AnswerBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

/// Why a request did not get an answer from the cloud.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    /// Every backend is unhealthy.
    NoHealthyBackend,
    /// Connecting, sending or waiting for the answer failed: the cloud is unreachable or slow.
    Transport {
        /// The backend tried last.
        server: String,
        /// What happened.
        detail: String,
        /// It was a timeout.
        timeout: bool,
        /// The request may have reached the cloud (it failed after connecting), so a write
        /// may have been applied.
        maybe_sent: bool,
    },
    /// The hub could not build the request (a bug or a header ureq refuses).
    Request(String),
    /// Reading the client's request body failed (malformed, stalled, too large): the
    /// client's error, not the cloud's. The cloud never got the request whole.
    ClientBody(String),
    /// The request's time ran out while the client's body was still arriving: the client's
    /// delay, not the cloud's. The cloud never got the request whole.
    ClientTooSlow(String),
    /// The hub has no TLS material for the cloud yet (token mode before discovery or the
    /// first certificate): nothing is sent, under any identity.
    NoCredentials(String),
}

impl UpstreamError {
    /// True when the request certainly did not reach the cloud.
    pub(crate) fn never_sent(&self) -> bool {
        match self {
            UpstreamError::NoHealthyBackend | UpstreamError::NoCredentials(_) => true,
            UpstreamError::Transport { maybe_sent, .. } => !maybe_sent,
            UpstreamError::Request(_)
            | UpstreamError::ClientBody(_)
            | UpstreamError::ClientTooSlow(_) => true,
        }
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::NoHealthyBackend => f.write_str("no cloud server is healthy"),
            UpstreamError::Transport { server, detail, .. } => write!(f, "{server}: {detail}"),
            UpstreamError::Request(detail) => write!(f, "cannot build the request: {detail}"),
            UpstreamError::ClientBody(detail) => {
                write!(f, "reading the client's request body failed: {detail}")
            }
            UpstreamError::ClientTooSlow(detail) => write!(
                f,
                "the client's request body did not arrive within the request's time: {detail}"
            ),
            UpstreamError::NoCredentials(why) => {
                write!(f, "the hub has no credentials for the cloud yet: {why}")
            }
        }
    }
}

impl std::error::Error for UpstreamError {}

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
}

/// The cloud client.
pub(crate) struct Upstream {
    backends: Arc<Backends>,
    /// The agents of the current TLS material (`None`: none yet), replaced whole by
    /// [`Upstream::set_tls`]. A request takes a snapshot for as long as it waits for its
    /// answer's head; see [`Upstream::set_tls`] for what happens to the old connections.
    agents: RwLock<Option<Arc<Agents>>>,
    token: Option<TokenSource>,
    /// Idle connections each pooled agent keeps (see [`agent`]).
    pool: usize,
}

/// ureq agents over one set of TLS material: with and without the hub's client certificate,
/// pooled for short exchanges and unpooled for streams.
struct Agents {
    hub: Agent,
    client: Agent,
    /// For streams: a connection each, never reused, so each can be cancelled.
    hub_stream: Agent,
    client_stream: Agent,
    /// The connections of the two pooled agents, for [`Upstream::set_tls`] to retire.
    pooled: Arc<Generation>,
    /// The cluster CA these agents trust (a leader verifies its followers with it).
    roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl Agents {
    /// Agents trusting `tls.roots`, the hub's ones presenting `tls.client` when there is one,
    /// each pooled one keeping up to `pool` idle connections.
    fn new(tls: &TlsMaterial, pool: usize) -> Result<Agents, String> {
        let roots: Vec<Certificate<'static>> = tls
            .roots
            .iter()
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let client_cert = tls
            .client
            .as_ref()
            .map(ClientIdentity::ureq_cert)
            .transpose()?;
        let hub_tls = tls_config(&roots, client_cert);
        let client_tls = tls_config(&roots, None);
        let pooled = Arc::new(Generation::default());
        Ok(Agents {
            hub: agent(hub_tls.clone(), Some((&pooled, pool))),
            client: agent(client_tls.clone(), Some((&pooled, pool))),
            hub_stream: agent(hub_tls, None),
            client_stream: agent(client_tls, None),
            pooled,
            roots: tls.roots.clone(),
        })
    }
}

/// Why nothing can be sent before [`Upstream::set_tls`].
const NO_TLS_YET: &str = "the cluster CA and the hub's certificate are not known yet";

/// Time allowed to connect (TCP and TLS) to a backend.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed between two reads of a bounded answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle pooled connection is kept: a little under kube-apiserver's 90 s idle
/// timeout (`IdleTimeout` of its secure server), so the hub is not the one to send a request
/// on a connection the server is closing. ureq's default is 15 s.
const IDLE_AGE: Duration = Duration::from_secs(85);

impl Upstream {
    /// The cloud client over `backends`, with the agents of `tls` (with and without the
    /// hub's client certificate). Without TLS material (token mode before discovery or the
    /// first certificate) every send fails with [`UpstreamError::NoCredentials`] until
    /// [`Upstream::set_tls`]. `pool` is the most requests the hub has in flight at once
    /// (`--max-requests-in-flight`): as many connections may be wanted again at once, so as
    /// many are kept idle (see [`agent`]).
    pub(crate) fn new(
        backends: Arc<Backends>,
        tls: Option<&TlsMaterial>,
        token: Option<Token>,
        pool: usize,
    ) -> Result<Upstream, String> {
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
    pub(crate) fn set_tls(&self, tls: &TlsMaterial) -> Result<(), String> {
        let agents = Arc::new(Agents::new(tls, self.pool)?);
        let old = self
            .agents
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(agents);
        // Outside the lock: closing connections makes system calls. ureq's pool closes its
        // idle connections only when its agent goes, and a request waiting for its answer
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

    /// Sends `req` to a healthy backend. An idempotent request without a body whose exchange
    /// fails before an answer is retried once on another healthy backend (or the same one
    /// when it is the only one and the failure came after connecting: a pooled connection
    /// the cloud closed looks like this too).
    ///
    /// A backend that could not be connected to (refused, or timed out connecting), or failed
    /// this request twice, is reported to its health checker ([`Backends::report_failure`]):
    /// reads stop going there until a probe, made at once, has ruled. Writes still go to a
    /// suspect server: none is answered from the cache while the cloud may take it.
    pub(crate) fn send(&self, mut req: Outgoing<'_>) -> Result<Answer, UpstreamError> {
        let agents = self.current()?;
        let write = !matches!(req.method, "GET" | "HEAD");
        let first = self
            .backends
            .pick(None, write)
            .ok_or(UpstreamError::NoHealthyBackend)?;
        let retryable = req.body.is_none() && !write;
        match self.send_to(&agents, first, &mut req) {
            // Not the cloud's failure: no error counted, no retry.
            Err(err @ (UpstreamError::ClientBody(_) | UpstreamError::ClientTooSlow(_))) => Err(err),
            Err(err @ UpstreamError::Transport { .. }) => {
                Metrics::inc(&METRICS.upstream_errors);
                // A connection that could not be made says the server may be down. An answer
                // slow to come does not (a live apiserver may take long over a big list: the
                // periodic probe judges), nor does a pooled connection that broke (the cloud
                // closed it while idle), until it happens twice.
                let down = err.never_sent();
                let slow = matches!(err, UpstreamError::Transport { timeout: true, .. });
                if down {
                    self.backends.report_failure(first);
                }
                if !retryable {
                    return Err(err);
                }
                // The same server again only for a broken pooled connection.
                let second = match self.backends.pick(Some(first), false) {
                    Some(other) => other,
                    None if !down && !slow => first,
                    None => return Err(err),
                };
                log::info!("retrying on another cloud server after: {err}");
                Metrics::inc(&METRICS.upstream_retries);
                // The agents of now: TLS material may have changed meanwhile.
                let agents = self.current().unwrap_or(agents);
                self.send_to(&agents, second, &mut req).inspect_err(|err| {
                    Metrics::inc(&METRICS.upstream_errors);
                    let slow = matches!(err, UpstreamError::Transport { timeout: true, .. });
                    if matches!(err, UpstreamError::Transport { .. }) && (err.never_sent() || !slow)
                    {
                        self.backends.report_failure(second);
                    }
                })
            }
            Err(err) => {
                Metrics::inc(&METRICS.upstream_errors);
                Err(err)
            }
            ok => ok,
        }
    }

    /// Sends `req` to the pool's leader hub at `base` (`https://<ip>:<port>`), whatever the
    /// cloud's health, with the hub's agents (its client certificate; the leader's
    /// certificate verified against the cluster CA and the IP in `base`), counted on the
    /// link with `base` as the server. No retry, no health report: the caller (a feeder)
    /// marks the leader and goes on from the cloud. [`Answer::backend`] is
    /// [`LEADER_BACKEND`]. Never the hub's bearer token: a leader is another node, which
    /// needs only the client certificate, and must not collect the pool's cloud tokens.
    pub(crate) fn send_to_base(
        &self,
        base: &str,
        mut req: Outgoing<'_>,
    ) -> Result<Answer, UpstreamError> {
        let agents = self.current()?;
        self.send_via(&agents, base, LEADER_BACKEND, &mut req, false)
    }

    fn send_to(
        &self,
        agents: &Agents,
        backend: usize,
        req: &mut Outgoing<'_>,
    ) -> Result<Answer, UpstreamError> {
        self.send_via(agents, &self.backends.get(backend).base, backend, req, true)
    }

    /// Sends `req` to `server`, reporting `backend` in the answer; with the hub's bearer
    /// token (for [`Identity::Hub`]) only when `cloud`.
    fn send_via(
        &self,
        agents: &Agents,
        server: &str,
        backend: usize,
        req: &mut Outgoing<'_>,
        cloud: bool,
    ) -> Result<Answer, UpstreamError> {
        // The series is resolved once, before sending: the body reader only adds to it.
        let link = LINK.link(
            server,
            link::component_of(req.headers),
            link::resource_of(req.path_and_query),
        );
        let url = format!("{server}{}", req.path_and_query);
        let mut builder = http::Request::builder().method(req.method).uri(&url);
        // ureq writes the request head a line at a time through its output buffer: the
        // longest line must fit (the request line, with room for the version).
        let mut longest_line = req.method.len() + url.len() + 12;
        // Headers the client named in `Connection` are hop-by-hop too (RFC 9110 §7.6.1).
        // Most clients send no `Connection` header: then nothing is collected.
        let connection_tokens: Vec<&str> = req
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .collect();
        for (name, value) in req.headers {
            if is_hop_by_hop(name)
                || connection_tokens
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(name))
                || (req.accept.is_some() && name.eq_ignore_ascii_case("accept"))
                || (req.identity != Identity::Client && name.eq_ignore_ascii_case("authorization"))
            {
                continue;
            }
            longest_line = longest_line.max(name.len() + value.len() + 4);
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(accept) = req.accept {
            builder = builder.header("accept", accept);
        }
        if req.identity == Identity::Hub
            && cloud
            && let Some(token) = self.token.as_ref().and_then(TokenSource::current)
        {
            longest_line = longest_line.max(token.len() + 24);
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(length) = req.body.as_ref().and_then(|b| b.length) {
            builder = builder.header("content-length", length);
        }
        // A stream gets a connection of its own, which can be shut down from another thread
        // when its client goes away; short exchanges share pooled connections.
        let streaming = matches!(req.deadline, Deadline::Stream(_));
        let agent = match (streaming, req.identity) {
            (true, Identity::Hub) => &agents.hub_stream,
            (true, Identity::Client | Identity::Anonymous) => &agents.client_stream,
            (false, Identity::Hub) => &agents.hub,
            (false, Identity::Client | Identity::Anonymous) => &agents.client,
        };
        // A line too long for the small buffer gets a large one for this request; ureq then
        // gives it a connection of its own, never pooled, so the buffer goes with it.
        let output_buffer = (longest_line > OUTPUT_BUFFER).then_some(LARGE_OUTPUT_BUFFER);
        if streaming {
            LAST_CONNECTION.with(|last| last.borrow_mut().take());
        }
        let request_error = |e: http::Error| UpstreamError::Request(e.to_string());
        let result = match req.body.as_mut() {
            Some(body) => {
                let mut reader = NotingBody::new(&mut body.reader, body.length);
                let request = builder
                    .body(SendBody::from_reader(&mut reader))
                    .map_err(request_error)?;
                let result = agent.run(configure(agent, request, req.deadline, output_buffer));
                if on_the_link(&result) {
                    link.request(reader.sent);
                }
                if reader.failed {
                    // ureq stopped because the client's body did: its error says why.
                    return Err(UpstreamError::ClientBody(
                        result.err().map(|e| e.to_string()).unwrap_or_default(),
                    ));
                }
                // The request's time ran out before the client had sent its whole body.
                let whole_request = matches!(
                    result,
                    Err(ureq::Error::Timeout(
                        ureq::Timeout::Global | ureq::Timeout::PerCall | ureq::Timeout::SendBody
                    ))
                );
                match result {
                    Err(ureq::Error::Timeout(t)) if whole_request && !reader.ended => {
                        return Err(UpstreamError::ClientTooSlow(t.to_string()));
                    }
                    result => result,
                }
            }
            None => {
                let request = builder.body(()).map_err(request_error)?;
                let result = agent.run(configure(agent, request, req.deadline, output_buffer));
                if on_the_link(&result) {
                    link.request(0);
                }
                result
            }
        };
        let response = result.map_err(|e| transport_error(server, e))?;
        let cancel = if streaming {
            LAST_CONNECTION
                .with(|last| last.borrow_mut().take())
                .map(Cancel)
        } else {
            None
        };
        let (parts, body) = response.into_parts();
        let gzip = parts
            .headers
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"));
        let mut length = None;
        let headers = parts
            .headers
            .iter()
            .filter_map(|(name, value)| {
                if name.as_str() == "content-length" {
                    length = value.to_str().ok().and_then(|v| v.trim().parse().ok());
                }
                (!is_hop_by_hop(name.as_str())).then(|| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
            })
            .collect();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers,
            length,
            body: AnswerBody(Counted::new(body.into_reader(), link, gzip)),
            backend,
            cancel,
        })
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

impl Upstream {
    /// `method path` against `base` (one server) with the hub's credentials, a JSON body when
    /// given, bounded by `timeout` as a whole; `Err` when there is no answer.
    pub(crate) fn exchange_with(
        &self,
        base: &str,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Exchanged, String> {
        // No material yet: the server cannot be reached as the hub.
        let agents = self.current().map_err(|e| e.to_string())?;
        let link = LINK.link(base, link::HUB_COMPONENT, link::resource_of(path));
        let sent = body.as_ref().map_or(0, |b| b.len() as u64);
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("{base}{path}"))
            .header("user-agent", HUB_USER_AGENT)
            .header("accept", "application/json");
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(token) = self.token.as_ref().and_then(TokenSource::current) {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let request = builder
            .body(body.unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let request = agents
            .hub
            .configure_request(request)
            .timeout_global(Some(timeout))
            // A 4xx or 5xx is an answer here, not an error.
            .http_status_as_error(false)
            .build();
        let result = agents.hub.run(request);
        if on_the_link(&result) {
            link.request(sent);
        }
        let response = result.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let gzip = response
            .headers()
            .get("content-encoding")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let mut kept = Vec::new();
        // Read to the end (within the cap) so the connection goes back to the pool.
        let read = response
            .into_body()
            .into_reader()
            .take(MAX_EXCHANGE_BODY)
            .read_to_end(&mut kept);
        link.received(kept.len() as u64, gzip);
        read.map_err(|e| e.to_string())?;
        Ok(Exchanged { status, body: kept })
    }
}

impl Probe for Upstream {
    /// `GET /readyz` with the hub's credentials; a server without it (404) is asked
    /// `/healthz` instead. 2xx is healthy.
    fn probe(&self, base: &str, timeout: Duration) -> Result<(), String> {
        let mut status = 0;
        for path in ["/readyz", "/healthz"] {
            status = self.exchange_with(base, "GET", path, None, timeout)?.status;
            if status != 404 {
                break;
            }
        }
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(format!("health probe answered {status}"))
        }
    }
}

fn tls_config(roots: &[Certificate<'static>], client_cert: Option<ClientCert>) -> TlsConfig {
    TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::new_with_certs(roots))
        .client_cert(client_cert)
        .build()
}

/// ureq's 128 KiB default input and output buffers, at its TCP and again at its TLS layer,
/// would make each open watch cost half a megabyte. A response head must fit the input
/// buffer (an apiserver's is well under 1 KiB), a request head the output buffer; bodies
/// stream through in pieces.
const INPUT_BUFFER: usize = 8 * 1024;
const OUTPUT_BUFFER: usize = 4 * 1024;
const MAX_RESPONSE_HEAD: usize = 8 * 1024;
/// Output buffer for a request with a header line longer than [`OUTPUT_BUFFER`]: the
/// largest head a client may send, with room for the hub's own headers.
const LARGE_OUTPUT_BUFFER: usize = http1::MAX_HEAD + 16 * 1024;

/// An agent over `tls`: pooled, with its connections in the generation `pooled` and up to
/// `idle` of them kept, or one connection per request (streams, see [`Recording`]).
///
/// A pool smaller than the requests in flight at once turns every burst into handshakes: with
/// 4 kept and 16 clients, 134 of every 1,000 gets opened a new TLS connection (each ~0.4 ms of
/// the cloud's CPU). The pool holds only connections a burst made, so sizing it to the
/// concurrency bound costs nothing until the concurrency is seen, and an idle one is kept as
/// long as kube-apiserver keeps it (see [`IDLE_AGE`]).
fn agent(tls: TlsConfig, pooled: Option<(&Arc<Generation>, usize)>) -> Agent {
    let idle = pooled.map_or(0, |(_, idle)| idle.max(1));
    let config = Agent::config_builder()
        // A proxy passes every status through with its body.
        .http_status_as_error(false)
        .max_redirects(0)
        // Never pick up HTTPS_PROXY & co. from the environment: the hub talks to its cloud.
        .proxy(None)
        .user_agent(AutoHeaderValue::None)
        .accept(AutoHeaderValue::None)
        .accept_encoding(AutoHeaderValue::None)
        .tls_config(tls)
        .input_buffer_size(INPUT_BUFFER)
        .output_buffer_size(OUTPUT_BUFFER)
        .max_response_header_size(MAX_RESPONSE_HEAD)
        // Per host as many as in all: the bound is on requests, whatever their backend.
        .max_idle_connections_per_host(idle)
        .max_idle_connections(idle)
        .max_idle_age(IDLE_AGE)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .build();
    let resolver = LiteralFirst(DefaultResolver::default());
    // Every connection's socket is noted (see [`Recording`]): a stream's for its cancel
    // handle, a pooled one's for its generation to close it when idle.
    if let Some((generation, _)) = pooled {
        let connector =
            ().chain(Recording::default())
                .chain(RustlsConnector::default())
                .chain(Retirable(Arc::clone(generation)));
        Agent::with_parts(config, connector, resolver)
    } else {
        let connector = ().chain(Recording::default()).chain(RustlsConnector::default());
        Agent::with_parts(config, connector, resolver)
    }
}

/// The pooled connections of one set of agents. Retired when the TLS material changes: its
/// idle connections are shut down at once, and one in use is not pooled again when its
/// answer ends (it says it is closed), so none outlives the material it was made with.
#[derive(Debug, Default)]
struct Generation {
    retired: AtomicBool,
    conns: Mutex<Vec<Weak<PooledConn>>>,
}

impl Generation {
    /// Shuts down every idle connection, and keeps the others from being pooled again.
    fn retire(&self) {
        // Set before looking at the state, which a connection going back to the pool sets
        // before looking at this: one of the two sides sees the other (SeqCst).
        self.retired.store(true, Ordering::SeqCst);
        let conns = std::mem::take(&mut *self.conns.lock().unwrap_or_else(PoisonError::into_inner));
        for conn in conns.iter().filter_map(Weak::upgrade) {
            // Only a connection still in the pool: one a request has just taken is its.
            if conn
                .state
                .compare_exchange(IDLE, CLOSED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
                && let Some(socket) = conn.socket.as_ref().and_then(Weak::upgrade)
            {
                socket.shutdown();
            }
        }
    }
}

/// A pooled connection in use: made, or taken from the pool, for a request.
const BUSY: u8 = 0;
/// A pooled connection in the pool.
const IDLE: u8 = 1;
/// A pooled connection shut down by [`Generation::retire`] while in the pool.
const CLOSED: u8 = 2;

/// What a generation knows of one pooled connection.
struct PooledConn {
    /// [`BUSY`], [`IDLE`] or [`CLOSED`]: who may close it, the request or the swap.
    state: AtomicU8,
    /// Its socket, as ureq's TCP connector registered it.
    socket: Option<Weak<dyn ShutdownHandle>>,
}

impl PooledConn {
    /// A connection just made for a request, with its socket.
    fn new(socket: Option<Weak<dyn ShutdownHandle>>) -> PooledConn {
        PooledConn {
            state: AtomicU8::new(BUSY),
            socket,
        }
    }
}

/// The last link of a pooled agent's connector chain: wraps each connection into its
/// generation.
#[derive(Debug)]
struct Retirable(Arc<Generation>);

impl<In: Transport> Connector<In> for Retirable {
    type Out = RetirableTransport<In>;

    fn connect(
        &self,
        _: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(inner) = chained else {
            return Ok(None);
        };
        // Noted by `Recording` in this same call, on this thread.
        let conn = Arc::new(PooledConn::new(
            LAST_CONNECTION.with(|last| last.borrow_mut().take()),
        ));
        let mut conns = self.0.conns.lock().unwrap_or_else(PoisonError::into_inner);
        conns.retain(|c| c.strong_count() > 0);
        conns.push(Arc::downgrade(&conn));
        Ok(Some(Hooked {
            inner,
            hook: Retiring {
                conn,
                generation: Arc::clone(&self.0),
            },
        }))
    }
}

/// A pooled connection.
type RetirableTransport<T> = Hooked<T, Retiring>;

/// A pooled connection's place in its generation. ureq 3.5 asks whether it is open at two
/// moments only (pool.rs): when its answer ended, before putting it back in the pool (it
/// becomes idle), and when a request takes it from the pool (it becomes busy again, unless a
/// swap closed it first). A swap closes only an idle one, so never one a request has just
/// taken. Only the taking asks the socket: a connection whose answer has just been read whole
/// is open, and one the server closes meanwhile is found closed when taken (one system call
/// per request instead of two probes).
struct Retiring {
    conn: Arc<PooledConn>,
    generation: Arc<Generation>,
}

impl ConnHook for Retiring {
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool {
        let state = &self.conn.state;
        match state.load(Ordering::SeqCst) {
            // Its answer ended: into the pool, unless retired (see `Generation::retire`). Only
            // this thread changes a busy connection's state.
            BUSY => {
                state.store(IDLE, Ordering::SeqCst);
                return !self.generation.retired.load(Ordering::SeqCst);
            }
            // Being taken from the pool: the request's, unless a swap closed it first.
            IDLE => {
                if state
                    .compare_exchange(IDLE, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    return false;
                }
            }
            _ => return false,
        }
        !self.generation.retired.load(Ordering::SeqCst) && inner_open()
    }
}

/// Resolves IP literals (what `--server-addr` usually holds) directly: ureq's own resolver
/// starts a thread for every lookup made under a timeout, literal or not.
#[derive(Debug)]
struct LiteralFirst(DefaultResolver);

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        match literal_addr(uri) {
            Some(addr) => {
                let mut out = self.0.empty();
                out.push(addr);
                Ok(out)
            }
            None => self.0.resolve(uri, config, timeout),
        }
    }
}

/// The address of a URI whose host is an IP literal, with the scheme's port when it names
/// none.
fn literal_addr(uri: &http::Uri) -> Option<std::net::SocketAddr> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = host.parse().ok()?;
    let default_port = if uri.scheme_str() == Some("http") {
        80
    } else {
        443
    };
    Some(std::net::SocketAddr::new(
        ip,
        uri.port_u16().unwrap_or(default_port),
    ))
}

fn configure<S: ureq::AsSendBody>(
    agent: &Agent,
    request: http::Request<S>,
    deadline: Deadline,
    output_buffer: Option<usize>,
) -> http::Request<S> {
    let mut builder = agent.configure_request(request);
    if let Some(size) = output_buffer {
        builder = builder.output_buffer_size(size);
    }
    match deadline {
        Deadline::Bounded(total) => builder
            .timeout_global(Some(total))
            .timeout_per_read(Some(READ_TIMEOUT))
            .build(),
        // A watch may be silent for minutes; only the stream's own lifetime bounds it.
        Deadline::Stream(total) => builder
            .timeout_global(Some(total))
            .timeout_recv_response(Some(READ_TIMEOUT))
            .build(),
    }
}

/// The request went on the link: it was answered, or failed after connecting (it may have
/// been sent whole or in part). A failure to connect sent nothing.
fn on_the_link<T>(result: &Result<T, ureq::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => !never_connected(e),
    }
}

/// The failure came before a connection existed: the request cannot have been delivered.
fn never_connected(error: &ureq::Error) -> bool {
    matches!(
        error,
        ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
    ) || matches!(error, ureq::Error::Io(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotConnected))
}

fn transport_error(server: &str, error: ureq::Error) -> UpstreamError {
    let timeout = matches!(error, ureq::Error::Timeout(_))
        || matches!(&error, ureq::Error::Io(e) if e.kind() == io::ErrorKind::TimedOut);
    // Failures before a connection exists cannot have delivered the request.
    let before_connecting = never_connected(&error);
    UpstreamError::Transport {
        server: server.to_owned(),
        detail: error.to_string(),
        timeout,
        maybe_sent: !before_connecting,
    }
}

/// The hub's bearer token; a `tokenFile` is re-read when it changes (projected service
/// account tokens rotate), checked at most every few seconds.
struct TokenSource {
    source: Token,
    cache: Mutex<CachedToken>,
}

struct CachedToken {
    value: Option<String>,
    modified: Option<SystemTime>,
    checked: Option<Instant>,
}

const TOKEN_RECHECK: Duration = Duration::from_secs(10);

impl TokenSource {
    fn new(source: Token) -> TokenSource {
        TokenSource {
            source,
            cache: Mutex::new(CachedToken {
                value: None,
                modified: None,
                checked: None,
            }),
        }
    }

    fn current(&self) -> Option<String> {
        let path: &PathBuf = match &self.source {
            Token::Inline(token) => return Some(token.clone()),
            Token::File(path) => path,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let due = cache.checked.is_none_or(|t| t.elapsed() >= TOKEN_RECHECK);
        if due {
            cache.checked = Some(Instant::now());
            let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
            if modified != cache.modified || cache.value.is_none() {
                match std::fs::read_to_string(path) {
                    Ok(text) => {
                        cache.value = Some(text.trim().to_owned());
                        cache.modified = modified;
                    }
                    // Keep the last good token: a rotation writes a new file atomically.
                    Err(e) => log::warn!("cannot read tokenFile {}: {e}", path.display()),
                }
            }
        }
        cache.value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_resolve_to_the_scheme_port_when_none_is_given() {
        let addr = |uri: &str| literal_addr(&uri.parse().unwrap()).map(|a| a.to_string());
        assert_eq!(addr("http://10.0.0.1/api").as_deref(), Some("10.0.0.1:80"));
        assert_eq!(
            addr("https://10.0.0.1/api").as_deref(),
            Some("10.0.0.1:443")
        );
        assert_eq!(
            addr("https://10.0.0.1:6443/").as_deref(),
            Some("10.0.0.1:6443")
        );
        assert_eq!(addr("http://[::1]:8080/").as_deref(), Some("[::1]:8080"));
        assert_eq!(
            addr("https://apiserver.local/"),
            None,
            "names go to the resolver"
        );
    }

    #[test]
    fn a_body_read_whole_is_ended_with_or_without_a_last_empty_read() {
        let mut buf = [0u8; 8];
        // A declared length: ureq stops reading once it has that many bytes.
        let mut source: &[u8] = b"hello";
        let mut reader: &mut dyn Read = &mut source;
        let mut body = NotingBody::new(&mut reader, Some(5));
        assert_eq!(body.read(&mut buf[..3]).unwrap(), 3);
        assert!(!body.ended, "2 bytes still to come");
        assert_eq!(body.read(&mut buf).unwrap(), 2);
        assert!(body.ended);
        // Chunked: the end is the empty read.
        let mut source: &[u8] = b"hello";
        let mut reader: &mut dyn Read = &mut source;
        let mut body = NotingBody::new(&mut reader, None);
        assert_eq!(body.read(&mut buf).unwrap(), 5);
        assert!(!body.ended);
        assert_eq!(body.read(&mut buf).unwrap(), 0);
        assert!(body.ended && !body.failed);
    }

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

    #[test]
    fn token_file_is_reread_when_it_changes() {
        let path = std::env::temp_dir().join(format!("tinyhub-token-{}", std::process::id()));
        std::fs::write(&path, "one\n").unwrap();
        let source = TokenSource::new(Token::File(path.clone()));
        assert_eq!(source.current().as_deref(), Some("one"));
        std::fs::write(&path, "two").unwrap();
        // Force the next call to look again, and make the change visible by mtime.
        {
            let mut c = source.cache.lock().unwrap();
            c.checked = None;
            c.modified = None;
        }
        assert_eq!(source.current().as_deref(), Some("two"));
        std::fs::remove_file(&path).unwrap();
        source.cache.lock().unwrap().checked = None;
        assert_eq!(
            source.current().as_deref(),
            Some("two"),
            "keeps the last good token"
        );
    }
}

#[cfg(test)]
mod tls_tests;

#[cfg(test)]
mod pool_tests;
