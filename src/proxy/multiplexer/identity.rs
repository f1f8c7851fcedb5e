//! Who a leader admits on its multiplexer port (YurtHub's `pkg/yurthub/proxy/multiplexer`): a TLS
//! client certificate chained to the cluster CA (rustls and webpki check the chain in the
//! handshake), whose subject has O `system:nodes` (checked here after the handshake), and
//! only list or watch of pool-scope resources. Every refusal is a 403 `Status`.
//!
//! Design decisions:
//! - YurtHub only *requests* a client certificate on 10269 and then forwards anything to
//!   the cloud with the leader's identity, to whoever reaches the node's IP. The leader here
//!   *requires* one ([`server_config`]: no certificate, or one the cluster CA did not sign,
//!   ends the handshake), and serves nothing but pool-scope list and watch.
//! - The group is read from the certificate's subject with the hub's own DER reader
//!   (`x509`), not from a request header: a follower cannot claim it.
//! - `system:nodes` is the group every hub certificate carries (token mode asks for it with
//!   `openyurt:yurthub`; kubelet's certificate has it alone), and what the apiserver grants
//!   the pool-scope reads to.
//! - The rest of the TLS setup is the HTTPS port's (`server::tls`): ring, TLS 1.2 and 1.3,
//!   ALPN `http/1.1`, no session tickets, the serving certificate reloaded in place.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;

use crate::names::Gvr;
use crate::pool::resources::PoolScope;
use crate::request::ApiRequest;
use crate::requester::{NODES_GROUP, node_of_cn};
use crate::server::tls::ServingCert;
use crate::status::Status;
use crate::x509;

/// The subject organization (group) a follower's certificate must have: every node's.
const FOLLOWER_ORGANIZATION: &str = NODES_GROUP;

/// The multiplexer port's rustls configuration: the serving certificate `cert`, and a client
/// certificate required and verified against `client_ca` (`--multiplexer-client-ca-file`,
/// else the cluster CA; an error when none of those is usable as a root).
pub(crate) fn server_config(
    cert: Arc<ServingCert>,
    client_ca: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ServerConfig>, FollowerCaError> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(client_ca.iter().cloned());
    if added == 0 {
        return Err(FollowerCaError::NoUsableCa);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // Without `allow_unauthenticated`, a client without a certificate fails the handshake.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(FollowerCaError::Verifier)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        // ring's default provider supports both versions: this cannot fail.
        .expect("ring supports TLS 1.2 and 1.3")
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session tickets: a follower keeps its connection for its watches.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Why the multiplexer port cannot verify followers with the CA it was given.
#[derive(Debug)]
pub(crate) enum FollowerCaError {
    /// None of the certificates is usable as a root.
    NoUsableCa,
    /// rustls refused to build a verifier of those roots.
    Verifier(rustls::server::VerifierBuilderError),
}

impl std::fmt::Display for FollowerCaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FollowerCaError::NoUsableCa => {
                f.write_str("no usable CA certificate to verify followers with")
            }
            FollowerCaError::Verifier(e) => {
                write!(f, "cannot verify followers with the cluster CA: {e}")
            }
        }
    }
}

impl std::error::Error for FollowerCaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FollowerCaError::NoUsableCa => None,
            FollowerCaError::Verifier(e) => Some(e),
        }
    }
}

/// A follower admitted on the multiplexer port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Follower {
    /// Its certificate's CN.
    pub common_name: Option<String>,
    /// Its node's name, when the CN is `system:node:<name>`.
    pub node: Option<String>,
}

/// After the handshake: whether the peer's certificate (leaf first, as
/// `ServerConnection::peer_certificates` gives it; the chain is already verified) names a
/// node: its subject has O `system:nodes`. A refusal is the 403 to answer.
pub(crate) fn check_follower(peer: Option<&[CertificateDer<'_>]>) -> Result<Follower, Status> {
    let leaf = peer.and_then(<[_]>::first).ok_or_else(|| {
        Status::forbidden(
            "the multiplexer port serves only hubs of the pool: no client certificate",
        )
    })?;
    let info = x509::parse(leaf).ok_or_else(|| {
        Status::forbidden("the multiplexer port serves only hubs of the pool: the client certificate cannot be read")
    })?;
    if !info
        .organizations
        .iter()
        .any(|o| o == FOLLOWER_ORGANIZATION)
    {
        return Err(Status::forbidden(format!(
            "the multiplexer port serves only hubs of the pool: the client certificate {} has no O {FOLLOWER_ORGANIZATION}",
            info.common_name
                .as_deref()
                .map_or_else(|| "without a CN".to_owned(), |cn| format!("{cn:?}"))
        )));
    }
    let node = info
        .common_name
        .as_deref()
        .and_then(node_of_cn)
        .map(str::to_owned);
    Ok(Follower {
        common_name: info.common_name,
        node,
    })
}

/// Whether a leader serves `req` on its multiplexer port: only a list or watch of a
/// pool-scope resource (its GVR), else the 403 to answer. YurtHub forwards anything else to
/// the cloud with the leader's own identity.
pub(crate) fn check_request<'a>(scope: &'a PoolScope, req: &ApiRequest) -> Result<&'a Gvr, Status> {
    scope.target_of(req).ok_or_else(|| {
        Status::forbidden(
            "the multiplexer port serves only list and watch of the pool's pool-scope resources",
        )
    })
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, ServerConnection};

    use super::*;
    use crate::request::classify;
    use crate::server::tls::tests::TestCa;

    /// A leader serving a certificate for 10.0.0.5 from `ca`, verifying followers with `ca`.
    fn leader(ca: &TestCa) -> Arc<rustls::ServerConfig> {
        let cert = Arc::new(ServingCert::new());
        let (chain, key) = ca.issue("system:node:leader", &["10.0.0.5"]);
        cert.set(chain, key).unwrap();
        server_config(cert, std::slice::from_ref(&ca.der)).unwrap()
    }

    /// A follower trusting `ca`, presenting `identity` if any.
    fn follower(
        ca: &TestCa,
        identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der.clone()).unwrap();
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(roots);
        let mut config = match identity {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// Runs a handshake in memory; on success the certificates the leader saw.
    fn handshake(
        client: Arc<ClientConfig>,
        server: Arc<rustls::ServerConfig>,
        leader_ip: &str,
    ) -> Result<Vec<CertificateDer<'static>>, rustls::Error> {
        let name = ServerName::IpAddress(leader_ip.parse::<std::net::IpAddr>().unwrap().into());
        let mut client = ClientConnection::new(client, name)?;
        let mut server = ServerConnection::new(server)?;
        for _ in 0..10 {
            let mut bytes = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut bytes).unwrap();
            }
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                server.read_tls(&mut rest).unwrap();
                server.process_new_packets()?;
            }
            let mut bytes = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut bytes).unwrap();
            }
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                client.read_tls(&mut rest).unwrap();
                client.process_new_packets()?;
            }
            if !client.is_handshaking() && !server.is_handshaking() {
                assert_eq!(server.alpn_protocol(), Some(&b"http/1.1"[..]));
                let peer = server.peer_certificates().unwrap_or_default();
                return Ok(peer.iter().map(|c| c.clone().into_owned()).collect());
            }
        }
        panic!("the handshake did not end");
    }

    #[test]
    fn a_node_certificate_from_the_cluster_ca_is_admitted() {
        let ca = TestCa::new();
        for orgs in [&["system:nodes"][..], &["openyurt:yurthub", "system:nodes"]] {
            let id = ca.issue_in("system:node:edge-2", orgs, &[]);
            let peer =
                handshake(follower(&ca, Some(id)), leader(&ca), "10.0.0.5").expect("handshake");
            let admitted = check_follower(Some(&peer)).expect("admitted");
            assert_eq!(admitted.node.as_deref(), Some("edge-2"));
            assert_eq!(admitted.common_name.as_deref(), Some("system:node:edge-2"));
        }
    }

    #[test]
    fn a_certificate_without_system_nodes_is_refused_with_403() {
        let ca = TestCa::new();
        for orgs in [&[][..], &["openyurt:yurthub"], &["system:masters"]] {
            let id = ca.issue_in("someone", orgs, &[]);
            let peer = handshake(follower(&ca, Some(id)), leader(&ca), "10.0.0.5")
                .expect("the chain is good: the handshake succeeds");
            let refused = check_follower(Some(&peer)).expect_err("no O system:nodes");
            assert_eq!((refused.code, refused.reason), (403, "Forbidden"));
            assert!(
                refused
                    .message
                    .contains("\"someone\" has no O system:nodes"),
                "{}",
                refused.message
            );
        }
        let none = check_follower(None).unwrap_err();
        assert_eq!(none.code, 403);
        assert!(none.message.contains("no client certificate"));
        let garbage = [CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00])];
        assert!(
            check_follower(Some(&garbage))
                .unwrap_err()
                .message
                .contains("cannot be read")
        );
    }

    #[test]
    fn no_certificate_or_another_cas_ends_the_handshake() {
        let ca = TestCa::new();
        let e = handshake(follower(&ca, None), leader(&ca), "10.0.0.5").unwrap_err();
        assert!(matches!(e, rustls::Error::NoCertificatesPresented), "{e:?}");

        let stranger = TestCa::new();
        let id = stranger.issue_in("system:node:edge-2", &["system:nodes"], &[]);
        let e = handshake(follower(&ca, Some(id)), leader(&ca), "10.0.0.5").unwrap_err();
        // Both test CAs are named "test-ca": webpki finds the issuer by name, then its
        // signature fails.
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
    }

    #[test]
    fn followers_are_checked_against_a_separate_client_ca_when_given_one() {
        // k3s/RKE2: the apiserver's serving CA signs the hubs' serving certificates, a
        // client CA the nodes' client certificates.
        let serving_ca = TestCa::new();
        let client_ca = TestCa::new();
        let cert = Arc::new(ServingCert::new());
        let (chain, key) = serving_ca.issue("system:node:leader", &["10.0.0.5"]);
        cert.set(chain, key).unwrap();
        let leader = server_config(cert, std::slice::from_ref(&client_ca.der)).unwrap();
        let node = |ca: &TestCa| Some(ca.issue_in("system:node:edge-2", &["system:nodes"], &[]));
        let peer = handshake(
            follower(&serving_ca, node(&client_ca)),
            Arc::clone(&leader),
            "10.0.0.5",
        )
        .expect("a node certificate of the client CA is admitted");
        assert_eq!(
            check_follower(Some(&peer)).unwrap().node.as_deref(),
            Some("edge-2")
        );
        let e =
            handshake(follower(&serving_ca, node(&serving_ca)), leader, "10.0.0.5").unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
    }

    #[test]
    fn the_follower_verifies_the_leaders_address() {
        let ca = TestCa::new();
        let id = || Some(ca.issue_in("system:node:edge-2", &["system:nodes"], &[]));
        assert!(handshake(follower(&ca, id()), leader(&ca), "10.0.0.5").is_ok());
        let e = handshake(follower(&ca, id()), leader(&ca), "10.0.0.6").unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
    }

    #[test]
    fn the_config_needs_a_usable_cluster_ca() {
        let cert = Arc::new(ServingCert::new());
        assert!(server_config(Arc::clone(&cert), &[]).is_err());
        let junk = CertificateDer::from(vec![1, 2, 3]);
        let e = server_config(cert, &[junk]).unwrap_err();
        assert!(matches!(e, FollowerCaError::NoUsableCa), "{e:?}");
        assert!(e.to_string().contains("no usable CA certificate"), "{e}");
    }

    #[test]
    fn only_pool_scope_lists_and_watches_are_served() {
        let scope = PoolScope::with_defaults([]);
        let req = |method: &str, url: &str| classify(method, url, &[]).unwrap();
        let gvr = check_request(
            &scope,
            &req("GET", "/apis/discovery.k8s.io/v1/endpointslices?watch=1"),
        )
        .unwrap();
        assert_eq!(gvr.to_string(), "discovery.k8s.io/v1/endpointslices");
        assert!(check_request(&scope, &req("GET", "/api/v1/services")).is_ok());
        for (method, url) in [
            ("GET", "/api/v1/secrets"),
            ("GET", "/api/v1/namespaces/kube-system/services/kube-dns"),
            ("POST", "/api/v1/namespaces/default/services"),
            ("GET", "/version"),
        ] {
            let refused = check_request(&scope, &req(method, url)).unwrap_err();
            assert_eq!(refused.code, 403, "{method} {url}");
        }
    }
}
