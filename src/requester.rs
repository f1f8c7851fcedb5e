//! Who sent a request: the port it came in on and the credential it showed, decided once
//! per request from what the server saw (the listener, the TLS client certificate rustls
//! verified) and the request's `Authorization` header. Pure values; the one rule that
//! matters most lives here — [`Requester::is_node`], who may use the node's identity and
//! its cache.
//!
//! The rule (issue 28; README.md, "Who may use the node's identity"):
//! - the plain proxy port at `--bind-address` (loopback by default) lends the node's
//!   identity to a request without credentials, as YurtHub's 10261 does: node components
//!   (kubelet, kube-proxy, flanneld, …) talk to it from the host;
//! - the plain port's second address on the dummy interface, and the HTTPS port on either
//!   address, are where pods reach the hub (the filters point in-cluster clients at them):
//!   there a request without credentials is anonymous, and only a client certificate of
//!   the cluster CA naming `system:node:<this node>` (O `system:nodes`) is the node;
//! - a request with its own `Authorization` is its own: it goes to the cloud with that
//!   credential, never with the node's.
//!
//! This module knows nothing of sockets or TLS: the server hands it a [`Port`] and the
//! verified leaf certificate's subject, already read.

use std::fmt;

/// The listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Port {
    /// Not from a client of the hub's ports, and not the hub's own: lends nothing.
    Unknown,
    /// A request the hub makes itself, for the node (a cache refill, its ConfigMap watch).
    Hub,
    /// The plain proxy port at `--bind-address`: the node's own components.
    Plain,
    /// The plain proxy port's address on the dummy interface, which pods reach.
    PlainDummy,
    /// The HTTPS proxy port (at `--bind-address` or on the dummy interface).
    Secure,
}

impl Port {
    /// Short name for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Port::Unknown => "none",
            Port::Hub => "hub",
            Port::Plain => "plain",
            Port::PlainDummy => "plain-dummy",
            Port::Secure => "https",
        }
    }
}

/// The credential a request showed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Credential {
    /// None at all.
    None,
    /// Its own `Authorization` header (a bearer token, basic credentials, …), which goes to
    /// the cloud as it is. `digest` is the SHA-256 of the header's value: what the hub keeps
    /// to tell one credential from another, never the credential itself.
    Authorization { digest: [u8; 32] },
    /// A TLS client certificate the cluster CA signed, without an `Authorization` header.
    /// `node` when it names this node (CN `system:node:<node>`, O `system:nodes`);
    /// `digest` is the SHA-256 of the leaf certificate.
    Certificate { node: bool, digest: [u8; 32] },
}

impl fmt::Debug for Credential {
    // Digests are not secrets, but they are noise in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Credential {
    /// Short name for logs.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Credential::None => "none",
            Credential::Authorization { .. } => "token",
            Credential::Certificate { node: true, .. } => "node-cert",
            Credential::Certificate { node: false, .. } => "cert",
        }
    }

    /// The SHA-256 that tells this credential from others, when there is one.
    pub(crate) fn digest(&self) -> Option<&[u8; 32]> {
        match self {
            Credential::None => None,
            Credential::Authorization { digest } | Credential::Certificate { digest, .. } => {
                Some(digest)
            }
        }
    }
}

/// The CN prefix of a node's certificate, before the node's name.
pub(crate) const NODE_CN_PREFIX: &str = "system:node:";
/// The group every node's certificate carries.
pub(crate) const NODES_GROUP: &str = "system:nodes";

/// Who sent one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requester {
    /// The listener it came in on.
    pub port: Port,
    /// The credential it showed.
    pub credential: Credential,
}

impl Requester {
    /// A requester the hub knows nothing of: lends nothing, opens no cache.
    pub(crate) fn unknown(authorization: Option<&str>) -> Requester {
        Requester {
            port: Port::Unknown,
            credential: authorization_credential(authorization).unwrap_or(Credential::None),
        }
    }

    /// The hub itself, asking for the node.
    pub(crate) fn hub() -> Requester {
        Requester {
            port: Port::Hub,
            credential: Credential::None,
        }
    }

    /// The requester of a request that came in on `port` with `authorization` (the header's
    /// value, if any) and, on the HTTPS port, a verified client certificate: its DER and its
    /// subject's CN and O values. `node` is this node's name.
    pub(crate) fn new(
        port: Port,
        authorization: Option<&str>,
        certificate: Option<ClientCertificate<'_>>,
        node: &str,
    ) -> Requester {
        let credential = authorization_credential(authorization)
            .or_else(|| {
                certificate.map(|cert| Credential::Certificate {
                    node: cert.names_node(node),
                    digest: sha256(cert.der),
                })
            })
            .unwrap_or(Credential::None);
        Requester { port, credential }
    }

    /// The request may use the node's identity with the cloud and the node's cache: no
    /// credential of its own on the plain port at `--bind-address`, or a client certificate
    /// naming this node.
    pub(crate) fn is_node(&self) -> bool {
        match &self.credential {
            Credential::None => matches!(self.port, Port::Plain | Port::Hub),
            Credential::Certificate { node, .. } => *node,
            Credential::Authorization { .. } => false,
        }
    }

    /// The request has no credential and may not use the node's: the cloud sees it
    /// anonymous, and the cache answers it nothing.
    pub(crate) fn is_anonymous(&self) -> bool {
        !self.is_node() && !matches!(self.credential, Credential::Authorization { .. })
    }
}

/// What the server read of a verified TLS client certificate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientCertificate<'a> {
    /// The leaf certificate, DER.
    pub der: &'a [u8],
    /// Its subject's CN.
    pub common_name: Option<&'a str>,
    /// Its subject's O values.
    pub organizations: &'a [String],
}

impl ClientCertificate<'_> {
    /// CN `system:node:<node>` and O `system:nodes`, as kubelet's client certificate has.
    fn names_node(&self, node: &str) -> bool {
        self.common_name
            .and_then(node_of_cn)
            .is_some_and(|name| name == node)
            && self.organizations.iter().any(|o| o == NODES_GROUP)
    }
}

/// The node a certificate's CN `system:node:<node>` names (kubelet's, a follower hub's).
pub(crate) fn node_of_cn(cn: &str) -> Option<&str> {
    cn.strip_prefix(NODE_CN_PREFIX)
}

/// The credential of an `Authorization` header; a blank one is none (the request goes
/// without, as client-go sends none).
fn authorization_credential(value: Option<&str>) -> Option<Credential> {
    let value = value.map(str::trim).filter(|v| !v.is_empty())?;
    Some(Credential::Authorization {
        digest: sha256(value.as_bytes()),
    })
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref()); // SHA-256 is 32 bytes
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert<'a>(cn: &'a str, orgs: &'a [String]) -> ClientCertificate<'a> {
        ClientCertificate {
            der: b"leaf",
            common_name: Some(cn),
            organizations: orgs,
        }
    }

    #[test]
    fn only_the_plain_port_lends_the_node_to_a_request_without_credentials() {
        let none = |port| Requester::new(port, None, None, "edge-1");
        assert!(none(Port::Plain).is_node());
        for port in [Port::PlainDummy, Port::Secure, Port::Unknown] {
            assert!(!none(port).is_node(), "{port:?}");
            assert!(none(port).is_anonymous(), "{port:?}");
        }
        // A blank Authorization is no credential.
        assert!(Requester::new(Port::Plain, Some("  "), None, "edge-1").is_node());
        assert!(Requester::new(Port::Secure, Some(""), None, "edge-1").is_anonymous());
    }

    #[test]
    fn a_token_is_its_own_never_the_node() {
        for port in [Port::Plain, Port::PlainDummy, Port::Secure] {
            let r = Requester::new(port, Some("Bearer abc"), None, "edge-1");
            assert!(!r.is_node() && !r.is_anonymous(), "{port:?}");
            assert_eq!(r.credential.as_str(), "token");
        }
        let a = Requester::new(Port::Secure, Some("Bearer a"), None, "n");
        let b = Requester::new(Port::Secure, Some("Bearer b"), None, "n");
        assert_ne!(a.credential.digest(), b.credential.digest());
        // The token wins over a certificate: it is what goes to the cloud.
        let orgs = vec![NODES_GROUP.to_owned()];
        let both = Requester::new(
            Port::Secure,
            Some("Bearer a"),
            Some(cert("system:node:n", &orgs)),
            "n",
        );
        assert!(!both.is_node());
    }

    #[test]
    fn only_a_certificate_naming_this_node_in_the_nodes_group_is_the_node() {
        let nodes = vec![NODES_GROUP.to_owned()];
        let other = vec!["system:masters".to_owned()];
        let is_node = |cn, orgs: &[String]| {
            Requester::new(Port::Secure, None, Some(cert(cn, orgs)), "edge-1").is_node()
        };
        assert!(is_node("system:node:edge-1", &nodes));
        assert!(!is_node("system:node:edge-2", &nodes));
        assert!(!is_node("system:node:edge-1", &other));
        assert!(!is_node("system:node:edge-10", &nodes));
        assert!(!is_node("edge-1", &nodes));
        let stranger = Requester::new(
            Port::Secure,
            None,
            Some(cert("system:node:edge-2", &nodes)),
            "edge-1",
        );
        assert!(
            stranger.is_anonymous(),
            "a certificate cannot go on to the cloud"
        );
    }
}
