//! The HTTPS proxy port's TLS: the serving certificate, reloadable while the port serves
//! (a new handshake uses the new certificate at once; live connections keep theirs), and
//! the rustls server configuration. The handshake and the stream itself are
//! `stream::TlsStream`, run on each connection's own thread.
//!
//! Like YurtHub's port 10268 it serves HTTP/1.1 only, and it authenticates nobody: YurtHub
//! only *requests* client certificates and never verifies them, and the hub has no
//! authentication of its own — a client's bearer token goes upstream as on the plain port,
//! and everything else goes with the hub's identity.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The hub's serving certificate, as the HTTPS port presents it; empty until the first one
/// is set (a handshake then fails: the client sees an alert, the hub a debug line).
pub(crate) struct ServingCert {
    /// Replaced whole by [`ServingCert::set`]; each handshake takes a clone of the `Arc`.
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ServingCert {
    /// No certificate yet.
    pub(crate) fn new() -> ServingCert {
        ServingCert {
            current: RwLock::new(None),
        }
    }

    /// Serves `chain` (leaf first) with `key` from the next handshake on. A key that does
    /// not belong to the leaf is refused and the certificate in use stays.
    pub(crate) fn set(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<(), String> {
        if chain.is_empty() {
            return Err("the serving certificate chain is empty".into());
        }
        let provider = rustls::crypto::ring::default_provider();
        let certified = CertifiedKey::from_der(chain, key, &provider)
            .map_err(|e| format!("the serving certificate and key do not belong together: {e}"))?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(certified));
        Ok(())
    }

    /// A certificate has been set.
    pub(crate) fn is_set(&self) -> bool {
        self.current().is_some()
    }

    /// The certificate in use, if any.
    fn current(&self) -> Option<Arc<CertifiedKey>> {
        // A plain swap of an Arc: a panicking writer cannot leave it half-written.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl fmt::Debug for ServingCert {
    // The key never shows: only whether there is a certificate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingCert")
            .field("set", &self.is_set())
            .finish()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// The HTTPS port's rustls configuration: ring (the provider already in the tree), TLS 1.2
/// and 1.3, ALPN `http/1.1` only — a client that offers only `h2` is refused in the
/// handshake (`no_application_protocol`), as HTTP/2 is not served — and no client
/// certificates (see the module comment: the hub authenticates nobody).
pub(crate) fn server_config(cert: Arc<ServingCert>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        // ring's default provider supports both versions: this cannot fail.
        .expect("ring supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session tickets: client-go never resumes, and each would cost a router two records
    // and a cache entry per connection.
    config.send_tls13_tickets = 0;
    Arc::new(config)
}

#[cfg(test)]
pub(crate) mod tests;
