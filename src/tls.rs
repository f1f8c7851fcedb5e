//! The hub's TLS material for the cloud: the CA bundle to trust and the optional client
//! certificate, parsed from PEM and checked at start-up so a bad file fails fast with a clear
//! line instead of a panic on the first connection (ureq panics on a key that does not match
//! its certificate).
//!
//! It builds no connections; `upstream/agents.rs` turns this material into ureq's TLS configuration
//! (a client certificate in ureq's form, [`ClientIdentity::ureq_cert`], is made here: the
//! identity's own cloud calls, `pki/csr_api.rs`, need it too).

use std::fmt;
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use ureq::tls::{Certificate, ClientCert, PrivateKey};

use crate::error::StartupError;

/// Parsed, validated TLS material.
#[derive(Clone)]
pub(crate) struct TlsMaterial {
    /// Every certificate of the CA bundle (not just the first, unlike `Certificate::from_pem`).
    pub roots: Vec<CertificateDer<'static>>,
    /// The hub's client certificate chain and key, when the kubeconfig has one.
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain with its private key.
pub(crate) struct ClientIdentity {
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

impl ClientIdentity {
    /// The chain and key as ureq takes them.
    pub(crate) fn ureq_cert(&self) -> Result<ClientCert, ClientKeyError> {
        let chain: Vec<Certificate<'static>> = self
            .chain
            .iter()
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let key = PrivateKey::from_pem(&self.key_pem).map_err(ClientKeyError)?;
        Ok(ClientCert::new_with_certs(&chain, key))
    }
}

/// ureq cannot read the client key (rustls could: [`load`] parsed it), so no agent can
/// present the certificate.
#[derive(Debug)]
pub(crate) struct ClientKeyError(ureq::Error);

impl ClientKeyError {
    /// rustls cannot take the client certificate and key for a configuration.
    pub(crate) fn rustls(e: rustls::Error) -> ClientKeyError {
        ClientKeyError(ureq::Error::Rustls(e))
    }
}

impl fmt::Display for ClientKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client key: {}", self.0)
    }
}

impl std::error::Error for ClientKeyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
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

/// Parses and cross-checks the CA bundle and the optional client certificate and key.
pub(crate) fn load(
    ca_pem: &[u8],
    client: Option<(&[u8], &[u8])>,
) -> Result<TlsMaterial, StartupError> {
    let roots = certificates(ca_pem, "certificate authority")?;
    // rustls accepts a root it cannot parse only to fail later; check each now.
    let mut store = rustls::RootCertStore::empty();
    let (added, ignored) = store.add_parsable_certificates(roots.iter().cloned());
    if ignored > 0 || added == 0 {
        return Err(StartupError::new(format!(
            "{ignored} of {} certificates cannot be used as roots",
            roots.len()
        ))
        .context("certificate authority"));
    }
    let client = match client {
        Some((cert_pem, key_pem)) => Some(identity(cert_pem, key_pem)?),
        None => None,
    };
    Ok(TlsMaterial { roots, client })
}

/// Parses a client certificate chain and its key, and checks that they belong together.
pub(crate) fn identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, StartupError> {
    let chain = certificates(cert_pem, "client certificate")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        StartupError::new(format!("no usable private key in PEM ({e})")).context("client key")
    })?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider).map_err(
        |e| {
            StartupError::new(format!(
                "client certificate and key do not belong together: {e}"
            ))
        },
    )?;
    Ok(ClientIdentity {
        chain,
        key,
        key_pem: key_pem.to_vec(),
    })
}

impl TlsMaterial {
    /// When the hub's client certificate stops being valid (None: no client certificate, or
    /// its validity cannot be read).
    pub(crate) fn client_not_after(&self) -> Option<SystemTime> {
        not_after(self.client.as_ref()?.chain.first()?.as_ref())
    }
}

/// `notAfter` of a DER certificate (RFC 5280 §4.1); None for anything else.
pub(crate) fn not_after(der: &[u8]) -> Option<SystemTime> {
    crate::x509::parse(der).map(|cert| cert.not_after)
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, StartupError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartupError::new(format!("bad PEM ({e})")).context(what))?;
    if certs.is_empty() {
        return Err(StartupError::new("no certificate found in PEM").context(what));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

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
    fn reads_the_expiry_of_a_certificate() {
        for (expiry, date) in [((2031, 4, 5), "2031-04-05"), ((2061, 1, 1), "2061-01-01")] {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(vec!["c".to_owned()]).unwrap();
            params.not_after = rcgen::date_time_ymd(expiry.0, expiry.1, expiry.2);
            let cert = params.self_signed(&key).unwrap();
            let at = not_after(cert.der()).expect("readable");
            let days = at.duration_since(UNIX_EPOCH).unwrap().as_secs() / 86_400;
            assert_eq!(
                crate::logging::civil_from_days(days as i64),
                (expiry.0 as i64, expiry.1 as u32, expiry.2 as u32),
                "{date}"
            );
        }
        assert_eq!(not_after(b"\x30\x03\x02\x01\x00"), None);
        assert_eq!(not_after(b""), None);
    }

    #[test]
    fn mismatched_key_is_refused_at_load() {
        let (ca, _) = issue("ca");
        let (cert, _) = issue("client");
        let (_, other_key) = issue("other");
        let err = load(ca.as_bytes(), Some((cert.as_bytes(), other_key.as_bytes()))).unwrap_err();
        assert!(err.to_string().contains("do not belong together"), "{err}");
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
                .to_string()
                .contains("certificate authority")
        );
        let (ca, _) = issue("ca");
        let err = load(ca.as_bytes(), Some((ca.as_bytes(), b"nope"))).unwrap_err();
        assert!(err.to_string().contains("client key"), "{err}");
        let bad_root = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(load(bad_root.as_bytes(), None).is_err());
    }
}
