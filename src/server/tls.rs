//! The HTTPS proxy port's TLS: the serving certificate, reloadable while the port serves
//! (a new handshake uses the new certificate at once; live connections keep theirs), and
//! the rustls server configuration. The handshake and the stream itself are
//! `stream::TlsStream`, run on each connection's own thread.
//!
//! Like YurtHub's port 10268 it serves HTTP/1.1 only and *asks* for a client certificate
//! without requiring one. Unlike YurtHub, which never verifies it and lends the node's
//! identity to everyone on this port, a certificate offered here is verified against the
//! cluster CA of the moment ([`ClusterCaClients`]), and only one naming this node makes a
//! request the node's (`requester.rs`); a client's bearer token goes upstream as on the
//! plain port, and a request with neither goes anonymous (issue 28).

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

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
    ) -> Result<(), ServingCertError> {
        if chain.is_empty() {
            return Err(ServingCertError::EmptyChain);
        }
        let provider = rustls::crypto::ring::default_provider();
        let certified =
            CertifiedKey::from_der(chain, key, &provider).map_err(ServingCertError::KeyMismatch)?;
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

/// Why a serving certificate was refused (the one in use stays).
#[derive(Debug)]
pub(crate) enum ServingCertError {
    /// The chain has no certificate.
    EmptyChain,
    /// The key does not belong to the leaf (or rustls cannot use it).
    KeyMismatch(rustls::Error),
}

impl fmt::Display for ServingCertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServingCertError::EmptyChain => f.write_str("the serving certificate chain is empty"),
            ServingCertError::KeyMismatch(e) => write!(
                f,
                "the serving certificate and key do not belong together: {e}"
            ),
        }
    }
}

impl std::error::Error for ServingCertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServingCertError::EmptyChain => None,
            ServingCertError::KeyMismatch(e) => Some(e),
        }
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

/// The cluster CA's certificates as they are now (`Upstream::cluster_ca`).
pub(crate) type CaSource = Box<dyn Fn() -> Vec<CertificateDer<'static>> + Send + Sync>;

/// A verifier and the CA certificates it was built from.
type Built = (Vec<CertificateDer<'static>>, Arc<dyn ClientCertVerifier>);

/// The HTTPS port's client certificates: asked for in every handshake, never required, and
/// verified against the cluster CA as it is at that handshake (in token mode the CA is
/// learnt after start, and it may rotate). A certificate the CA did not sign ends the
/// handshake; no certificate is fine. No CA hints are sent: an empty list makes a client
/// offer whatever certificate it has (Go's does), which is what kubelet's kubeconfig gives.
pub(crate) struct ClusterCaClients {
    roots: CaSource,
    /// The verifier of the last roots seen, rebuilt when they change.
    current: RwLock<Option<Built>>,
}

impl ClusterCaClients {
    /// Verifies against what `roots` gives at each handshake.
    pub(crate) fn new(roots: CaSource) -> ClusterCaClients {
        ClusterCaClients {
            roots,
            current: RwLock::new(None),
        }
    }

    /// The verifier for the CA of now; None while there is no usable CA certificate.
    fn verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        let roots = (self.roots)();
        if let Some((seen, verifier)) =
            &*self.current.read().unwrap_or_else(PoisonError::into_inner)
            && *seen == roots
        {
            return Some(Arc::clone(verifier));
        }
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(roots.iter().cloned());
        if added == 0 {
            return None;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
            .allow_unauthenticated()
            .build()
            .inspect_err(|e| {
                log::error!("cannot verify client certificates with the cluster CA: {e}")
            })
            .ok()?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Some((roots, Arc::clone(&verifier)));
        Some(verifier)
    }
}

impl fmt::Debug for ClusterCaClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCaClients").finish_non_exhaustive()
    }
}

/// No CA to verify with: a certificate cannot be taken (the handshake ends); none is asked for.
fn no_ca() -> rustls::Error {
    rustls::Error::General("the hub has no cluster CA to verify client certificates with".into())
}

impl ClientCertVerifier for ClusterCaClients {
    fn offer_client_auth(&self) -> bool {
        self.verifier().is_some()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier()
            .ok_or_else(no_ca)?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()
            .ok_or_else(no_ca)?
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier()
            .ok_or_else(no_ca)?
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The HTTPS port's rustls configuration: ring (the provider already in the tree), TLS 1.2
/// and 1.3, ALPN `http/1.1` only — a client that offers only `h2` is refused in the
/// handshake (`no_application_protocol`), as HTTP/2 is not served — and client
/// certificates asked for and checked by `clients` (see the module comment).
pub(crate) fn server_config(
    cert: Arc<ServingCert>,
    clients: Arc<ClusterCaClients>,
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        // ring's default provider supports both versions: this cannot fail.
        .expect("ring supports TLS 1.2 and 1.3")
        .with_client_cert_verifier(clients)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session tickets: client-go never resumes, and each would cost a router two records
    // and a cache entry per connection.
    config.send_tls13_tickets = 0;
    Arc::new(config)
}

#[cfg(test)]
pub(crate) mod tests;
