//! The test PKI: one CA, a serving certificate for `127.0.0.1`/`localhost`, and client or
//! server certificates issued on demand, remembered so the stand-in cloud can tell who
//! presented which certificate.
//!
//! It does not load or store anything on disk (see `kubeconfig.rs` for that) and has no
//! notion of TLS connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::util::lock;

/// A certificate with its private key, in PEM and DER (the key as PKCS#8).
#[derive(Clone, Debug)]
pub struct CertKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
}

/// A client certificate issued by a [`Pki`], with the identity it stands for.
#[derive(Clone, Debug)]
pub struct ClientCert {
    /// Common name: the Kubernetes user name.
    pub cn: String,
    /// Groups (the first is also the certificate's O; all are recorded as the identity).
    pub groups: Vec<String>,
    /// Certificate and key.
    pub pair: CertKey,
}

/// The identity a certificate from this PKI stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSubject {
    /// Common name.
    pub cn: String,
    /// Groups given when it was issued.
    pub groups: Vec<String>,
}

/// A test certificate authority. Cheap to clone; clones share the CA and the record of
/// issued certificates.
#[derive(Clone)]
pub struct Pki {
    inner: Arc<PkiInner>,
}

struct PkiInner {
    ca: CertKey,
    issuer: Issuer<'static, KeyPair>,
    server: CertKey,
    issued: Mutex<HashMap<Vec<u8>, CertSubject>>,
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

impl Pki {
    /// A fresh CA (ECDSA P-256) and a serving certificate for 127.0.0.1, ::1 and localhost.
    pub fn new() -> Pki {
        // rcgen only fails on malformed parameters; the ones below are fixed and valid.
        let key = KeyPair::generate().expect("generate CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(DnType::CommonName, "tinyhub-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign CA");
        let ca = CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        };
        let issuer = Issuer::new(params, key);
        let server = sign(
            &issuer,
            "kube-apiserver",
            &[],
            &["127.0.0.1", "::1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        Pki {
            inner: Arc::new(PkiInner {
                ca,
                issuer,
                server,
                issued: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.inner.ca.cert_pem
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &[u8] {
        &self.inner.ca.cert_der
    }

    /// The cloud's serving certificate (127.0.0.1, ::1, localhost).
    pub fn server(&self) -> &CertKey {
        &self.inner.server
    }

    /// Issues a client certificate (`CN=cn`, `O=groups[0]`, clientAuth) and remembers it.
    pub fn issue_client(&self, cn: &str, groups: &[&str]) -> ClientCert {
        let pair = sign(
            &self.inner.issuer,
            cn,
            groups,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let subject = CertSubject {
            cn: cn.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        lock(&self.inner.issued).insert(pair.cert_der.clone(), subject.clone());
        ClientCert {
            cn: subject.cn,
            groups: subject.groups,
            pair,
        }
    }

    /// Issues a serving certificate for the given DNS names or IP addresses (for example
    /// for the hub's HTTPS port), signed by this CA.
    pub fn issue_server(&self, names: &[&str]) -> CertKey {
        sign(
            &self.inner.issuer,
            names.first().copied().unwrap_or("server"),
            &[],
            names,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// Who a certificate (DER) issued by this PKI stands for.
    pub fn lookup(&self, cert_der: &[u8]) -> Option<CertSubject> {
        lock(&self.inner.issued).get(cert_der).cloned()
    }
}

fn sign(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
    groups: &[&str],
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> CertKey {
    // As in `Pki::new`: these parameters are well-formed, so rcgen cannot fail on them,
    // except for a SAN that is not a DNS name or IP, which is a bug in the calling test.
    let key = KeyPair::generate().expect("generate key");
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).expect("certificate SANs must be valid");
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(g) = groups.first() {
        params.distinguished_name.push(DnType::OrganizationName, *g);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer).expect("sign certificate");
    CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}
