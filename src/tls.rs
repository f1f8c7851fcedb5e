//! The hub's TLS material for the cloud: the CA bundle to trust and the optional client
//! certificate, parsed from PEM and checked at start-up so a bad file fails fast with a clear
//! line instead of a panic on the first connection (ureq panics on a key that does not match
//! its certificate).
//!
//! It builds no connections; `upstream.rs` turns this material into ureq's TLS configuration.

use std::fmt;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Parsed, validated TLS material.
pub struct TlsMaterial {
    /// Every certificate of the CA bundle (not just the first, unlike `Certificate::from_pem`).
    pub roots: Vec<CertificateDer<'static>>,
    /// The hub's client certificate chain and key, when the kubeconfig has one.
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain with its private key.
pub struct ClientIdentity {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The key of the leaf.
    pub key: PrivateKeyDer<'static>,
    /// The same key as PEM (ureq takes keys as PEM or as DER of a kind it does not export).
    pub key_pem: Vec<u8>,
}

impl fmt::Debug for ClientIdentity {
    // Never print the key: configurations are logged at high verbosity.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("chain_len", &self.chain.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Clone for ClientIdentity {
    fn clone(&self) -> Self {
        ClientIdentity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            key_pem: self.key_pem.clone(),
        }
    }
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("roots", &self.roots.len())
            .field("client", &self.client)
            .finish()
    }
}

/// Why TLS material is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// Parses and cross-checks the CA bundle and the optional client certificate and key.
pub fn load(ca_pem: &[u8], client: Option<(&[u8], &[u8])>) -> Result<TlsMaterial, TlsError> {
    let roots = certificates(ca_pem, "certificate authority")?;
    // rustls accepts a root it cannot parse only to fail later; check each now.
    let mut store = rustls::RootCertStore::empty();
    let (added, ignored) = store.add_parsable_certificates(roots.iter().cloned());
    if ignored > 0 || added == 0 {
        return Err(TlsError(format!(
            "certificate authority: {ignored} of {} certificates cannot be used as roots",
            roots.len()
        )));
    }
    let client = match client {
        Some((cert_pem, key_pem)) => {
            let chain = certificates(cert_pem, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| TlsError(format!("client key: no usable private key in PEM ({e})")))?;
            let provider = rustls::crypto::ring::default_provider();
            rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
                .map_err(|e| {
                    TlsError(format!(
                        "client certificate and key do not belong together: {e}"
                    ))
                })?;
            Some(ClientIdentity {
                chain,
                key,
                key_pem: key_pem.to_vec(),
            })
        }
        None => None,
    };
    Ok(TlsMaterial { roots, client })
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{what}: bad PEM ({e})")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{what}: no certificate found in PEM")));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![cn.to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn bundle_with_several_roots_and_a_matching_client_pair() {
        let (ca1, _) = issue("ca1");
        let (ca2, _) = issue("ca2");
        let (cert, key) = issue("client");
        let bundle = format!("{ca1}{ca2}");
        let m = load(bundle.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).unwrap();
        assert_eq!(m.roots.len(), 2);
        assert!(m.client.is_some());
    }

    #[test]
    fn mismatched_key_is_refused_at_load() {
        let (ca, _) = issue("ca");
        let (cert, _) = issue("client");
        let (_, other_key) = issue("other");
        let err = load(ca.as_bytes(), Some((cert.as_bytes(), other_key.as_bytes()))).unwrap_err();
        assert!(err.0.contains("do not belong together"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let (ca, _) = issue("ca");
        let (cert, key) = issue("client");
        let m = load(ca.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).unwrap();
        let text = format!("{m:?}");
        let body = key.lines().nth(1).unwrap();
        assert!(
            !text.contains(body) && !text.contains("PRIVATE") && !text.contains("45, 45"),
            "{text}"
        );
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn garbage_is_refused_with_what() {
        assert!(
            load(b"not pem", None)
                .unwrap_err()
                .0
                .contains("certificate authority")
        );
        let (ca, _) = issue("ca");
        let err = load(ca.as_bytes(), Some((ca.as_bytes(), b"nope"))).unwrap_err();
        assert!(err.0.contains("client key"), "{err}");
        let bad_root = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(load(bad_root.as_bytes(), None).is_err());
    }
}
