//! The ureq agents over one set of TLS material: with and without the hub's client
//! certificate, pooled for short exchanges and one connection per stream; their buffers, pool
//! and timeouts, and the resolver that answers IP literals itself.
use std::sync::Arc;
use std::time::Duration;

use ureq::Agent;
use ureq::config::AutoHeaderValue;
use ureq::http;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{ConnectionDetails, Connector, NextTimeout, Transport};

use super::conn::{Recording, host_and_port};
use super::plain::Plain;
use super::retire::{Generation, Retirable};
use super::tls_conn::SharedTls;
use crate::http1;
use crate::route::Identity;
use crate::tls::{ClientIdentity, ClientKeyError, TlsMaterial};

/// The connections over one set of TLS material, with and without the hub's client
/// certificate: pooled for bounded exchanges (`plain.rs`), ureq agents for streams.
pub(super) struct Agents {
    pub(super) hub: Plain,
    pub(super) client: Plain,
    /// For streams: a connection each, never reused, so each can be cancelled.
    pub(super) hub_stream: Agent,
    pub(super) client_stream: Agent,
    /// The connections of the two pools, for [`Upstream::set_tls`] to retire.
    pub(super) pooled: Arc<Generation>,
    /// The cluster CA these agents trust (a leader verifies its followers with it).
    pub(super) roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// The agents' rustls configurations, which the tunnels the hub dials itself
    /// (`tunnel.rs`) share: with the hub's client certificate, and without.
    pub(super) tunnel_hub: Arc<rustls::ClientConfig>,
    pub(super) tunnel_client: Arc<rustls::ClientConfig>,
}

/// One identity's share of the [`Agents`] ([`Agents::of`]).
pub(super) struct Side<'a> {
    /// Bounded exchanges' pooled connections.
    pub(super) pooled: &'a Plain,
    /// Streams' agent.
    pub(super) stream: &'a Agent,
    /// The tunnels' rustls configuration.
    pub(super) tunnel: &'a Arc<rustls::ClientConfig>,
}

impl Agents {
    /// What the requests of `identity` go through: with the hub's client certificate, or
    /// without.
    pub(super) fn of(&self, identity: Identity) -> Side<'_> {
        match identity {
            Identity::Hub => Side {
                pooled: &self.hub,
                stream: &self.hub_stream,
                tunnel: &self.tunnel_hub,
            },
            Identity::Client | Identity::Anonymous => Side {
                pooled: &self.client,
                stream: &self.client_stream,
                tunnel: &self.tunnel_client,
            },
        }
    }

    /// Agents trusting `tls.roots`, the hub's ones presenting `tls.client` when there is one,
    /// each pooled one keeping up to `pool` idle connections.
    pub(super) fn new(tls: &TlsMaterial, pool: usize) -> Result<Agents, ClientKeyError> {
        let pooled = Arc::new(Generation::default());
        // One rustls configuration per identity, its session cache shared by every
        // connection and tunnel (`tls_conn.rs`); a client key rustls cannot take is refused
        // here, before any agent exists.
        let hub_rustls =
            tunnel_config(&tls.roots, tls.client.as_ref()).map_err(ClientKeyError::rustls)?;
        let client_rustls = tunnel_config(&tls.roots, None).map_err(ClientKeyError::rustls)?;
        Ok(Agents {
            hub: plain(&hub_rustls, &pooled, pool),
            client: plain(&client_rustls, &pooled, pool),
            hub_stream: stream_agent(&hub_rustls),
            client_stream: stream_agent(&client_rustls),
            pooled,
            roots: tls.roots.clone(),
            tunnel_hub: hub_rustls,
            tunnel_client: client_rustls,
        })
    }
}

/// A rustls client configuration trusting `roots`, presenting `client` when given, speaking
/// HTTP/1.1 only (an upgrade is HTTP/1.1's): ring, as ureq's agents use.
fn tunnel_config(
    roots: &[rustls::pki_types::CertificateDer<'static>],
    client: Option<&ClientIdentity>,
) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let mut store = rustls::RootCertStore::empty();
    // A CA rustls cannot take is left out here as ureq's agents leave it out: the
    // handshake with a server it signed fails and says so.
    let _ = store.add_parsable_certificates(roots.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(store);
    let mut config = match client {
        Some(id) => builder.with_client_auth_cert(id.chain.clone(), id.key.clone_key())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Time allowed to connect (TCP and TLS) to a backend.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection is kept: a little under kube-apiserver's 90 s idle
/// timeout (`IdleTimeout` of its secure server), so the hub is not the one to send a request
/// on a connection the server is closing. ureq's default is 15 s.
const IDLE_AGE: Duration = Duration::from_secs(85);

/// ureq's 128 KiB default input and output buffers, at its TCP and again at its TLS layer,
/// would make each open watch cost half a megabyte. A response head must fit the input
/// buffer (an apiserver's is well under 1 KiB), a request head the output buffer; bodies
/// stream through in pieces.
const INPUT_BUFFER: usize = 8 * 1024;
pub(super) const OUTPUT_BUFFER: usize = 4 * 1024;

/// Time allowed between two reads of a bounded answer.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Output buffer for a request with a header line longer than [`OUTPUT_BUFFER`]: the
/// largest head a client may send, with room for the hub's own headers.
pub(super) const LARGE_OUTPUT_BUFFER: usize = http1::MAX_HEAD + 16 * 1024;

/// The configuration of every connection: ureq's for a stream's request, the connector
/// chain's for a pooled one (buffer sizes, no-delay).
fn config() -> ureq::config::Config {
    Agent::config_builder()
        // A proxy passes every status through with its body.
        .http_status_as_error(false)
        .max_redirects(0)
        // Never pick up HTTPS_PROXY & co. from the environment: the hub talks to its cloud.
        .proxy(None)
        .user_agent(AutoHeaderValue::None)
        .accept(AutoHeaderValue::None)
        .accept_encoding(AutoHeaderValue::None)
        .input_buffer_size(INPUT_BUFFER)
        .output_buffer_size(OUTPUT_BUFFER)
        .max_response_header_size(http1::response::MAX_RESPONSE_HEAD)
        // One connection per stream: none kept.
        .max_idle_connections_per_host(0)
        .max_idle_connections(0)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .build()
}

/// A ureq agent over the rustls configuration `rustls` for streams: one connection per
/// request, never reused, its socket noted (see [`Recording`]) for its cancel handle.
fn stream_agent(rustls: &Arc<rustls::ClientConfig>) -> Agent {
    let connector = ().chain(Recording::default()).chain(SharedTls::new(rustls, true));
    Agent::with_parts(
        config(),
        connector,
        LiteralFirst(DefaultResolver::default()),
    )
}

/// The pooled connections over the rustls configuration `rustls`, in the generation
/// `generation`, up to `idle` of them kept idle.
///
/// A pool smaller than the requests in flight at once turns every burst into handshakes: with
/// 4 kept and 16 clients, 134 of every 1,000 gets opened a new TLS connection (each ~0.4 ms of
/// the cloud's CPU). The pool holds only connections a burst made, so sizing it to the
/// concurrency bound costs nothing until the concurrency is seen, and an idle one is kept as
/// long as kube-apiserver keeps it (see [`IDLE_AGE`]).
fn plain(rustls: &Arc<rustls::ClientConfig>, generation: &Arc<Generation>, idle: usize) -> Plain {
    // Every connection's socket is noted (see [`Recording`]) for its generation to close it
    // when idle.
    let chain =
        ().chain(Recording::default())
            .chain(SharedTls::new(rustls, false))
            .chain(Retirable(Arc::clone(generation)));
    let connect = Box::new(move |details: &ConnectionDetails| {
        chain
            .connect(details, None)?
            .map(|t| Box::new(t) as Box<dyn Transport>)
            .ok_or(ureq::Error::ConnectionFailed)
    });
    Plain::new(
        connect,
        config(),
        Box::new(LiteralFirst(DefaultResolver::default())),
        idle.max(1),
        IDLE_AGE,
        CONNECT_TIMEOUT,
    )
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
        match cached_literal_addr(uri) {
            Some(addr) => {
                let mut out = self.0.empty();
                out.push(addr);
                Ok(out)
            }
            None => self.0.resolve(uri, config, timeout),
        }
    }
}

thread_local! {
    /// The last URI authority this thread resolved, whether it was an IP literal, and the
    /// address: ureq resolves on every request, pooled connection or not, and a thread
    /// (one client connection) asks for the same server again and again.
    static LAST_LITERAL: std::cell::RefCell<Option<(String, bool, Option<std::net::SocketAddr>)>> =
        const { std::cell::RefCell::new(None) };
}

/// [`literal_addr`], remembered per thread for the last authority and scheme asked.
fn cached_literal_addr(uri: &http::Uri) -> Option<std::net::SocketAddr> {
    let authority = uri.authority().map_or("", |a| a.as_str());
    // The scheme only matters for its default port: http's or any other's.
    let http = uri.scheme_str() == Some("http");
    LAST_LITERAL.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((a, h, addr)) = last.as_ref()
            && a == authority
            && *h == http
        {
            return *addr;
        }
        let addr = literal_addr(uri);
        *last = Some((authority.to_owned(), http, addr));
        addr
    })
}

/// The address of a URI whose host is an IP literal, with the scheme's port when it names
/// none.
fn literal_addr(uri: &http::Uri) -> Option<std::net::SocketAddr> {
    let (host, port) = host_and_port(uri)?;
    Some(std::net::SocketAddr::new(host.parse().ok()?, port))
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
    fn a_remembered_literal_is_the_one_of_the_same_authority_and_scheme() {
        let addr = |uri: &str| cached_literal_addr(&uri.parse().unwrap()).map(|a| a.to_string());
        for _ in 0..2 {
            assert_eq!(addr("https://10.0.0.1/a").as_deref(), Some("10.0.0.1:443"));
            assert_eq!(addr("http://10.0.0.1/b").as_deref(), Some("10.0.0.1:80"));
            assert_eq!(
                addr("https://10.0.0.1:6443/").as_deref(),
                Some("10.0.0.1:6443")
            );
            assert_eq!(addr("https://apiserver.local/"), None);
            assert_eq!(addr("https://apiserver.local/x"), None);
            assert_eq!(addr("https://10.0.0.2/").as_deref(), Some("10.0.0.2:443"));
        }
    }
}
