//! The test PKI: one CA, a serving certificate for `127.0.0.1`/`localhost`, and client or
//! server certificates issued on demand, remembered so the stand-in cloud can tell who
//! presented which certificate.
//!
//! It does not load or store anything on disk (see `kubeconfig.rs` for that) and has no
//! notion of TLS connections.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};

use super::util::{base64_decode, base64_encode, lock, random_u64};

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

// ---- X.509 by hand: rcgen keeps one value per attribute type, so it cannot write or read
// the several `O=` a Kubernetes node certificate carries (Go puts them in one multi-valued
// RDN). The few DER structures the certificate API needs are built and read here. ----

/// The subject, names and validity of a certificate [`Pki::sign_key`] makes.
#[derive(Clone, Debug, Default)]
pub struct CertSpec {
    /// Common name (the user).
    pub cn: String,
    /// Organizations (the groups), in order.
    pub orgs: Vec<String>,
    /// DNS subject alternative names.
    pub dns: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// Extended key usage serverAuth (true) or clientAuth (false).
    pub server: bool,
    /// Unix seconds.
    pub not_before: u64,
    /// Unix seconds.
    pub not_after: u64,
}

/// What a certificate signing request asks for, once its signature has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCsr {
    /// Subject common name ("" when absent).
    pub cn: String,
    /// Subject organizations, in order.
    pub orgs: Vec<String>,
    /// DNS names of the requested subjectAltName extension.
    pub dns: Vec<String>,
    /// IP addresses of the requested subjectAltName extension.
    pub ips: Vec<IpAddr>,
    /// The requester's SubjectPublicKeyInfo, DER.
    pub spki: Vec<u8>,
}

impl Pki {
    /// Signs a certificate for the public key `spki` (SubjectPublicKeyInfo DER) as
    /// kube-controller-manager's signer does (key usages digitalSignature and
    /// keyEncipherment, not a CA) and records it as user `cn` in groups `orgs`. Returns DER.
    pub fn sign_key(&self, spki: &[u8], spec: &CertSpec) -> Vec<u8> {
        let ca = &self.inner.ca;
        let ca_tbs = der::children(&ca.cert_der)
            .and_then(|c| der::children(c.first()?.whole))
            .expect("the test CA certificate is well-formed DER");
        // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, spki.
        let issuer = ca_tbs[3].whole;
        let mut serial = random_u64().to_be_bytes().to_vec();
        serial[0] &= 0x7f;
        serial[0] |= 0x01;
        let validity = der::seq(&[
            &der::utc_time(spec.not_before),
            &der::utc_time(spec.not_after),
        ]);
        let mut exts = vec![
            der::extension(
                der::OID_KEY_USAGE,
                true,
                // digitalSignature (bit 0) and keyEncipherment (bit 2).
                &der::tlv(0x03, &[0x05, 0xa0]),
            ),
            der::extension(
                der::OID_EXT_KEY_USAGE,
                false,
                &der::seq(&[&der::tlv(
                    0x06,
                    if spec.server {
                        der::OID_SERVER_AUTH
                    } else {
                        der::OID_CLIENT_AUTH
                    },
                )]),
            ),
            der::extension(der::OID_BASIC_CONSTRAINTS, true, &der::seq(&[])),
        ];
        if !spec.dns.is_empty() || !spec.ips.is_empty() {
            exts.push(der::extension(
                der::OID_SAN,
                false,
                &der::san(&spec.dns, &spec.ips),
            ));
        }
        let ext_refs: Vec<&[u8]> = exts.iter().map(Vec::as_slice).collect();
        let tbs = der::seq(&[
            &der::tlv(0xa0, &der::tlv(0x02, &[2])),
            &der::tlv(0x02, &serial),
            &der::seq(&[&der::tlv(0x06, der::OID_ECDSA_SHA256)]),
            issuer,
            &validity,
            &der::name(&spec.cn, &spec.orgs),
            spki,
            &der::tlv(0xa3, &der::seq(&ext_refs)),
        ]);
        let sig = ecdsa_sign(&ca.key_der, &tbs);
        let cert = der::seq(&[
            &tbs,
            &der::seq(&[&der::tlv(0x06, der::OID_ECDSA_SHA256)]),
            &der::bit_string(&sig),
        ]);
        let subject = CertSubject {
            cn: spec.cn.clone(),
            groups: spec.orgs.clone(),
        };
        lock(&self.inner.issued).insert(cert.clone(), subject);
        cert
    }

    /// A new ECDSA P-256 key and a certificate for it from [`Pki::sign_key`]; the key PEM
    /// is `EC PRIVATE KEY` (SEC 1), as kubelet and client-go write theirs.
    pub fn issue_with_key(&self, spec: &CertSpec) -> CertKey {
        // Generating a P-256 key only fails when the system RNG does.
        let key = KeyPair::generate().expect("generate key");
        let cert_der = self.sign_key(&key.subject_public_key_info(), spec);
        let key_der = key.serialize_der();
        CertKey {
            cert_pem: pem("CERTIFICATE", &cert_der),
            key_pem: pem("EC PRIVATE KEY", &der::sec1_from_pkcs8(&key_der)),
            cert_der,
            key_der,
        }
    }

    /// `sha256:<hex>` of the CA certificate's SubjectPublicKeyInfo: the pin kubeadm prints
    /// for `--discovery-token-ca-cert-hash`.
    pub fn ca_pin(&self) -> String {
        let spki = der::children(&self.inner.ca.cert_der)
            .and_then(|c| der::children(c.first()?.whole))
            .map(|tbs| tbs[6].whole.to_vec())
            .expect("the test CA certificate is well-formed DER");
        let digest = ring::digest::digest(&ring::digest::SHA256, &spki);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

/// Signs `msg` with an ECDSA P-256 PKCS#8 key (ASN.1 signature, SHA-256).
fn ecdsa_sign(pkcs8: &[u8], msg: &[u8]) -> Vec<u8> {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};
    let rng = ring::rand::SystemRandom::new();
    // The keys signed with here are P-256 keys rcgen generated in this process.
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &rng)
        .expect("a P-256 PKCS#8 key from rcgen");
    key.sign(&rng, msg)
        .expect("ECDSA signing only fails when the RNG does")
        .as_ref()
        .to_vec()
}

/// PEM armour.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64_encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out += &format!("-----END {label}-----\n");
    out
}

/// The DER inside the first PEM block labelled `label`.
pub fn pem_decode(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let b64: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64_decode(&b64)
}

/// A PEM `CERTIFICATE REQUEST` laid out as Go's `x509.CreateCertificateRequest` writes one
/// (every `O=` in one multi-valued RDN before `CN=`; SANs in an extensionRequest), signed
/// with `key` (ECDSA P-256).
pub fn csr_pem(key: &KeyPair, cn: &str, orgs: &[&str], dns: &[&str], ips: &[IpAddr]) -> String {
    let orgs: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
    let dns: Vec<String> = dns.iter().map(|d| d.to_string()).collect();
    let attributes = if dns.is_empty() && ips.is_empty() {
        der::tlv(0xa0, &[])
    } else {
        let exts = der::seq(&[&der::extension(der::OID_SAN, false, &der::san(&dns, ips))]);
        let attr = der::seq(&[
            &der::tlv(0x06, der::OID_EXTENSION_REQUEST),
            &der::tlv(0x31, &exts),
        ]);
        der::tlv(0xa0, &attr)
    };
    let info = der::seq(&[
        &der::tlv(0x02, &[0]),
        &der::name(cn, &orgs),
        &key.subject_public_key_info(),
        &attributes,
    ]);
    let sig = ecdsa_sign(&key.serialize_der(), &info);
    let csr = der::seq(&[
        &info,
        &der::seq(&[&der::tlv(0x06, der::OID_ECDSA_SHA256)]),
        &der::bit_string(&sig),
    ]);
    pem("CERTIFICATE REQUEST", &csr)
}

/// Parses a DER certificate signing request and checks its signature (ECDSA P-256/P-384,
/// Ed25519, RSA PKCS#1 SHA-256); the error says what is wrong.
pub fn parse_csr(csr: &[u8]) -> Result<ParsedCsr, String> {
    use ring::signature as sig;
    let bad = |what: &str| format!("malformed certificate request: {what}");
    let top = der::children(csr).ok_or_else(|| bad("not a DER SEQUENCE"))?;
    let [info, alg, signature] = top.as_slice() else {
        return Err(bad("not three parts"));
    };
    let fields = der::children(info.whole).ok_or_else(|| bad("request info"))?;
    if fields.len() < 3 {
        return Err(bad("request info too short"));
    }
    let (subject, spki) = (&fields[1], &fields[2]);
    let alg_oid = der::children(alg.whole)
        .and_then(|a| a.first().map(|o| o.content.to_vec()))
        .ok_or_else(|| bad("signature algorithm"))?;
    let spki_parts = der::children(spki.whole).ok_or_else(|| bad("public key"))?;
    let [key_alg, key_bits] = spki_parts.as_slice() else {
        return Err(bad("public key parts"));
    };
    let key_alg = der::children(key_alg.whole).ok_or_else(|| bad("public key algorithm"))?;
    let curve = key_alg.get(1).map(|p| p.content).unwrap_or(&[]);
    let key = key_bits
        .content
        .get(1..)
        .ok_or_else(|| bad("public key bits"))?;
    let p256 = curve == der::OID_P256;
    let algorithm: &dyn sig::VerificationAlgorithm = match alg_oid.as_slice() {
        der::OID_ECDSA_SHA256 if p256 => &sig::ECDSA_P256_SHA256_ASN1,
        der::OID_ECDSA_SHA256 => &sig::ECDSA_P384_SHA256_ASN1,
        der::OID_ECDSA_SHA384 if p256 => &sig::ECDSA_P256_SHA384_ASN1,
        der::OID_ECDSA_SHA384 => &sig::ECDSA_P384_SHA384_ASN1,
        der::OID_ED25519 => &sig::ED25519,
        der::OID_RSA_SHA256 => &sig::RSA_PKCS1_2048_8192_SHA256,
        _ => return Err("unsupported signature algorithm".into()),
    };
    let signature = signature.content.get(1..).ok_or_else(|| bad("signature"))?;
    sig::UnparsedPublicKey::new(algorithm, key)
        .verify(info.whole, signature)
        .map_err(|_| "the certificate request's signature is invalid".to_string())?;
    let mut out = ParsedCsr {
        cn: String::new(),
        orgs: Vec::new(),
        dns: Vec::new(),
        ips: Vec::new(),
        spki: spki.whole.to_vec(),
    };
    for rdn in der::children(subject.whole).ok_or_else(|| bad("subject"))? {
        for atv in der::children(rdn.whole).ok_or_else(|| bad("subject RDN"))? {
            let parts = der::children(atv.whole).ok_or_else(|| bad("subject attribute"))?;
            let [oid, value] = parts.as_slice() else {
                return Err(bad("subject attribute parts"));
            };
            let value = String::from_utf8_lossy(value.content).into_owned();
            match oid.content {
                der::OID_CN => out.cn = value,
                der::OID_O => out.orgs.push(value),
                _ => {}
            }
        }
    }
    let attrs = fields.get(3).filter(|a| a.tag == 0xa0);
    for attr in attrs
        .and_then(|a| der::children_of(a.content))
        .unwrap_or_default()
    {
        let parts = der::children(attr.whole).ok_or_else(|| bad("attribute"))?;
        if parts.first().map(|o| o.content) != Some(der::OID_EXTENSION_REQUEST) {
            continue;
        }
        let values = parts.get(1).ok_or_else(|| bad("extensionRequest"))?;
        for exts in der::children_of(values.content).ok_or_else(|| bad("extensions"))? {
            for ext in der::children(exts.whole).ok_or_else(|| bad("extensions"))? {
                let e = der::children(ext.whole).ok_or_else(|| bad("extension"))?;
                if e.first().map(|o| o.content) != Some(der::OID_SAN) {
                    continue;
                }
                let value = e.last().ok_or_else(|| bad("extension value"))?;
                let names = der::children(value.content).ok_or_else(|| bad("subjectAltName"))?;
                for n in names {
                    match (n.tag, n.content.len()) {
                        (0x82, _) => out
                            .dns
                            .push(String::from_utf8_lossy(n.content).into_owned()),
                        (0x87, 4) => {
                            let b: [u8; 4] = n.content.try_into().map_err(|_| bad("IP"))?;
                            out.ips.push(IpAddr::from(b));
                        }
                        (0x87, 16) => {
                            let b: [u8; 16] = n.content.try_into().map_err(|_| bad("IP"))?;
                            out.ips.push(IpAddr::from(b));
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Minimal DER reading and writing for the structures above.
mod der {
    use std::net::IpAddr;

    use super::super::util::rfc3339;

    /// 2.5.4.3 commonName.
    pub const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
    /// 2.5.4.10 organizationName.
    pub const OID_O: &[u8] = &[0x55, 0x04, 0x0a];
    /// 2.5.29.15 keyUsage.
    pub const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
    /// 2.5.29.37 extKeyUsage.
    pub const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
    /// 2.5.29.19 basicConstraints.
    pub const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
    /// 2.5.29.17 subjectAltName.
    pub const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
    /// 1.3.6.1.5.5.7.3.1 serverAuth.
    pub const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
    /// 1.3.6.1.5.5.7.3.2 clientAuth.
    pub const OID_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
    /// 1.2.840.10045.4.3.2 ecdsa-with-SHA256.
    pub const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    /// 1.2.840.10045.4.3.3 ecdsa-with-SHA384.
    pub const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
    /// 1.3.101.112 Ed25519.
    pub const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
    /// 1.2.840.113549.1.1.11 sha256WithRSAEncryption.
    pub const OID_RSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
    /// 1.2.840.10045.3.1.7 prime256v1.
    pub const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    /// 1.2.840.113549.1.9.14 extensionRequest.
    pub const OID_EXTENSION_REQUEST: &[u8] =
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];

    /// One element: its tag, its content, and all its bytes.
    pub struct Tlv<'a> {
        /// The identifier octet.
        pub tag: u8,
        /// The content octets.
        pub content: &'a [u8],
        /// Identifier, length and content.
        pub whole: &'a [u8],
    }

    /// The first element of `input` and what follows it.
    fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
        let tag = *input.first()?;
        let first = *input.get(1)?;
        let (len, head) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return None;
            }
            let len = input
                .get(2..2 + n)?
                .iter()
                .fold(0usize, |a, b| (a << 8) | usize::from(*b));
            (len, 2 + n)
        };
        let end = head.checked_add(len)?;
        let content = input.get(head..end)?;
        Some((
            Tlv {
                tag,
                content,
                whole: &input[..end],
            },
            &input[end..],
        ))
    }

    /// Every element of a concatenation; `None` when it does not parse to the end.
    pub fn children_of(mut input: &[u8]) -> Option<Vec<Tlv<'_>>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (t, rest) = read(input)?;
            out.push(t);
            input = rest;
        }
        Some(out)
    }

    /// The elements inside the constructed element that is the whole of `input`.
    pub fn children(input: &[u8]) -> Option<Vec<Tlv<'_>>> {
        let (t, rest) = read(input)?;
        if !rest.is_empty() || t.tag & 0x20 == 0 {
            return None;
        }
        children_of(t.content)
    }

    /// Tag, length, content.
    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes: Vec<u8> = n
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(content);
        out
    }

    /// A SEQUENCE of already encoded parts.
    pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    /// A BIT STRING with no unused bits.
    pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
        tlv(0x03, &[&[0u8][..], bytes].concat())
    }

    /// UTCTime (years before 2050, as RFC 5280 requires).
    pub fn utc_time(secs: u64) -> Vec<u8> {
        let t = rfc3339(secs); // 2026-12-02T03:39:43Z
        let s: String = t[2..].chars().filter(char::is_ascii_digit).collect();
        tlv(0x17, format!("{s}Z").as_bytes())
    }

    /// A Name as Go writes it: the organizations in one (DER-sorted) multi-valued RDN,
    /// then the common name.
    pub fn name(cn: &str, orgs: &[String]) -> Vec<u8> {
        let mut rdns = Vec::new();
        if !orgs.is_empty() {
            let mut atvs: Vec<Vec<u8>> = orgs
                .iter()
                .map(|o| seq(&[&tlv(0x06, OID_O), &tlv(0x0c, o.as_bytes())]))
                .collect();
            atvs.sort();
            rdns.push(tlv(0x31, &atvs.concat()));
        }
        if !cn.is_empty() {
            rdns.push(tlv(
                0x31,
                &seq(&[&tlv(0x06, OID_CN), &tlv(0x0c, cn.as_bytes())]),
            ));
        }
        tlv(0x30, &rdns.concat())
    }

    /// An Extension.
    pub fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
        let mut parts = vec![tlv(0x06, oid)];
        if critical {
            parts.push(tlv(0x01, &[0xff]));
        }
        parts.push(tlv(0x04, value));
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        seq(&refs)
    }

    /// A subjectAltName value: DNS names then IP addresses.
    pub fn san(dns: &[String], ips: &[IpAddr]) -> Vec<u8> {
        let mut names: Vec<Vec<u8>> = dns.iter().map(|d| tlv(0x82, d.as_bytes())).collect();
        for ip in ips {
            names.push(match ip {
                IpAddr::V4(v4) => tlv(0x87, &v4.octets()),
                IpAddr::V6(v6) => tlv(0x87, &v6.octets()),
            });
        }
        tlv(0x30, &names.concat())
    }

    /// The SEC 1 `ECPrivateKey` inside a P-256 PKCS#8 key, with the curve named, as Go's
    /// `x509.MarshalECPrivateKey` writes it.
    pub fn sec1_from_pkcs8(pkcs8: &[u8]) -> Vec<u8> {
        // PrivateKeyInfo: version, algorithm, OCTET STRING(ECPrivateKey); rcgen wrote it.
        let outer = children(pkcs8).expect("PKCS#8 from rcgen");
        let inner = children(outer[2].content).expect("ECPrivateKey in PKCS#8");
        let mut parts: Vec<Vec<u8>> = vec![inner[0].whole.to_vec(), inner[1].whole.to_vec()];
        parts.push(tlv(0xa0, &tlv(0x06, OID_P256)));
        if let Some(public) = inner.iter().find(|t| t.tag == 0xa1) {
            parts.push(public.whole.to_vec());
        }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        seq(&refs)
    }
}
