//! The hub's keys and certificate requests: ECDSA P-256 keys (ring) saved as SEC1 `EC PRIVATE
//! KEY` PEM, and PKCS#10 (RFC 2986) requests signed ecdsa-with-SHA256, both written byte for
//! byte as Go's crypto/x509 writes them, so kube-apiserver, yurt-manager and kubelet's own
//! tools read them as they read YurtHub's.
//!
//! Hand-written instead of rcgen: the format is small and stable and rcgen adds about 50 KiB
//! to the binary. It talks to nobody: sending the request is `csr_api.rs`.

use std::fmt;
use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};

use super::error::{KeyFailure, PkiError};
use crate::x509::der;
use crate::x509::{OID_COMMON_NAME, OID_ORGANIZATION, OID_SUBJECT_ALT_NAME, SAN_DNS, SAN_IP};

/// id-ecPublicKey (1.2.840.10045.2.1).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 / secp256r1 (1.2.840.10045.3.1.7).
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// ecdsa-with-SHA256 (1.2.840.10045.4.3.2).
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
/// PKCS#9 extensionRequest (1.2.840.113549.1.9.14).
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];

/// An ECDSA P-256 key pair.
pub(crate) struct KeyPair {
    signing: EcdsaKeyPair,
    /// The SEC1 `ECPrivateKey` DER, as Go's `x509.MarshalECPrivateKey` writes it.
    sec1: Vec<u8>,
}

impl fmt::Debug for KeyPair {
    // Never print the key: values get logged at high verbosity.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl KeyPair {
    /// A fresh key from the system's random source.
    pub(crate) fn generate() -> Result<KeyPair, PkiError> {
        let rng = SystemRandom::new();
        let alg = &ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng)
            .map_err(|_| PkiError::KeyGeneration(KeyFailure::NoRandomness))?;
        let signing = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
            .map_err(|_| PkiError::KeyGeneration(KeyFailure::Rejected))?;
        let scalar =
            private_scalar(pkcs8.as_ref()).ok_or(PkiError::KeyGeneration(KeyFailure::Layout))?;
        let sec1 = der::sequence(&[
            &der::small_integer(1),
            &der::octet_string(scalar),
            &der::write(der::context(0), &der::oid(OID_P256)),
            &der::write(
                der::context(1),
                &der::bit_string(signing.public_key().as_ref()),
            ),
        ]);
        Ok(KeyPair { signing, sec1 })
    }

    /// `-----BEGIN EC PRIVATE KEY-----`: SEC1 `ECPrivateKey { version 1, privateKey,
    /// [0] prime256v1, [1] publicKey }`, exactly as Go's `x509.MarshalECPrivateKey` and
    /// `pem.Encode` write it (Go's parser needs the curve; kubelet's files hold this form).
    pub(crate) fn private_key_pem(&self) -> String {
        pem("EC PRIVATE KEY", &self.sec1)
    }

    /// The uncompressed public point (65 bytes, `04 || X || Y`).
    fn public_point(&self) -> &[u8] {
        self.signing.public_key().as_ref()
    }

    /// `SubjectPublicKeyInfo { { id-ecPublicKey, prime256v1 }, point }`.
    fn subject_public_key_info(&self) -> Vec<u8> {
        der::sequence(&[
            &der::sequence(&[&der::oid(OID_EC_PUBLIC_KEY), &der::oid(OID_P256)]),
            &der::bit_string(self.public_point()),
        ])
    }
}

/// The 32-byte private scalar inside ring's PKCS#8 v1 document: `PrivateKeyInfo { 0,
/// algorithm, OCTET STRING { ECPrivateKey { 1, OCTET STRING scalar, .. } } }`.
fn private_scalar(pkcs8: &[u8]) -> Option<&[u8]> {
    let (info, _) = der::read(pkcs8, der::SEQUENCE)?;
    let (_, rest) = der::read(info, der::INTEGER)?;
    let (_, rest) = der::read(rest, der::SEQUENCE)?;
    let (wrapped, _) = der::read(rest, der::OCTET_STRING)?;
    let (ec_key, _) = der::read(wrapped, der::SEQUENCE)?;
    let (_, rest) = der::read(ec_key, der::INTEGER)?;
    let (scalar, _) = der::read(rest, der::OCTET_STRING)?;
    (scalar.len() == 32).then_some(scalar)
}

/// What the hub asks to be certified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CsrTemplate {
    /// Subject CN; empty: none.
    pub common_name: String,
    /// Subject O values, duplicates already removed by the caller.
    pub organizations: Vec<String>,
    /// subjectAltName DNS names (ASCII).
    pub dns_names: Vec<String>,
    /// subjectAltName IP addresses.
    pub ip_addresses: Vec<IpAddr>,
}

/// A PEM `CERTIFICATE REQUEST`: PKCS#10 v0 with the template's subject and SANs and the key's
/// public key, signed with the key (ecdsa-with-SHA256). Laid out as Go's
/// `x509.CreateCertificateRequest`: subject RDNs O then CN, all O values in one multi-valued
/// RDN, each string a PrintableString when its characters allow, else a UTF8String; the SANs
/// (DNS names, then IPs) in an extensionRequest attribute only when there are any.
pub(crate) fn request_pem(key: &KeyPair, template: &CsrTemplate) -> Result<String, PkiError> {
    let info = der::sequence(&[
        &der::small_integer(0),
        &subject(template),
        &key.subject_public_key_info(),
        &der::write(der::context(0), &attributes(template)?),
    ]);
    let signature = key
        .signing
        .sign(&SystemRandom::new(), &info)
        .map_err(|_| PkiError::Signing)?;
    let request = der::sequence(&[
        &info,
        &der::sequence(&[&der::oid(OID_ECDSA_SHA256)]),
        &der::bit_string(signature.as_ref()),
    ]);
    Ok(pem("CERTIFICATE REQUEST", &request))
}

/// Go's `pkix.Name.ToRDNSequence` for a name with Organization and CommonName.
fn subject(template: &CsrTemplate) -> Vec<u8> {
    let attribute = |oid: &[u8], value: &str| der::sequence(&[&der::oid(oid), &go_string(value)]);
    let mut rdns = Vec::new();
    if !template.organizations.is_empty() {
        let values = template.organizations.iter();
        rdns.push(der::set_of(
            values.map(|o| attribute(OID_ORGANIZATION, o)).collect(),
        ));
    }
    if !template.common_name.is_empty() {
        rdns.push(der::set_of(vec![attribute(
            OID_COMMON_NAME,
            &template.common_name,
        )]));
    }
    der::write(der::SEQUENCE, &rdns.concat())
}

/// A string as Go's encoding/asn1 marshals an untyped string: PrintableString when every
/// character is in its set (`*` and `&` excluded), else UTF8String.
fn go_string(text: &str) -> Vec<u8> {
    let printable = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b));
    if printable {
        der::write(der::PRINTABLE_STRING, text.as_bytes())
    } else {
        der::utf8_string(text)
    }
}

/// The request's attributes: one extensionRequest holding subjectAltName when the template
/// has SANs, else none (an empty `[0]`, which RFC 2986 requires and Go writes).
fn attributes(template: &CsrTemplate) -> Result<Vec<u8>, PkiError> {
    if template.dns_names.is_empty() && template.ip_addresses.is_empty() {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for name in &template.dns_names {
        if !name.is_ascii() {
            return Err(PkiError::NotAscii { name: name.clone() });
        }
        names.extend(der::write(SAN_DNS, name.as_bytes()));
    }
    for ip in &template.ip_addresses {
        names.extend(match ip {
            IpAddr::V4(v4) => der::write(SAN_IP, &v4.octets()),
            IpAddr::V6(v6) => der::write(SAN_IP, &v6.octets()),
        });
    }
    // Not critical: the subject is not empty (RFC 5280 §4.2.1.6); Go omits a false flag.
    let extension = der::sequence(&[
        &der::oid(OID_SUBJECT_ALT_NAME),
        &der::octet_string(&der::write(der::SEQUENCE, &names)),
    ]);
    Ok(der::sequence(&[
        &der::oid(OID_EXTENSION_REQUEST),
        &der::set_of(vec![der::sequence(&[&extension])]),
    ]))
}

/// PEM with 64-character lines, as Go's `pem.Encode` writes it.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    // Base64 is ASCII, so every 64-byte chunk is valid UTF-8.
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;
    use std::process::{Command, Output, Stdio};

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateSigningRequestDer, PrivateKeyDer};

    use super::*;
    use crate::x509;

    /// Runs `openssl` (CI installs the apt package) with `stdin` piped in.
    pub(crate) fn openssl(args: &[&str], stdin: &[u8]) -> Output {
        shell(&format!("openssl {}", args.join(" ")), stdin)
    }

    /// Runs a shell pipeline with `stdin` piped in.
    pub(crate) fn shell(script: &str, stdin: &[u8]) -> Output {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs");
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    fn text(out: &Output) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// YurtHub's client request (§3.4): two O's, no SANs.
    fn client_template() -> CsrTemplate {
        CsrTemplate {
            common_name: "system:node:edge-1".into(),
            organizations: vec!["openyurt:yurthub".into(), "system:nodes".into()],
            ..CsrTemplate::default()
        }
    }

    /// YurtHub's serving request (§3.6): one O, DNS and IP SANs.
    fn serving_template() -> CsrTemplate {
        CsrTemplate {
            common_name: "system:node:edge-1".into(),
            organizations: vec!["system:nodes".into()],
            dns_names: vec!["kubernetes".into(), "kubernetes.default.svc".into()],
            ip_addresses: vec![
                "10.96.0.1".parse().unwrap(),
                "169.254.2.1".parse().unwrap(),
                "fd00::1".parse().unwrap(),
            ],
        }
    }

    fn request_der(pem: &str) -> Vec<u8> {
        CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
            .expect("PEM CERTIFICATE REQUEST")
            .to_vec()
    }

    /// The certificate openssl issues for the request made with `key` (self-signed by it, the
    /// request's subject and SANs copied verbatim, as kube-controller-manager's signer does).
    fn openssl_signs(key: &KeyPair, template: &CsrTemplate) -> Vec<u8> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key_file =
            std::env::temp_dir().join(format!("tinyhub-csr-{}-{n}.pem", std::process::id()));
        std::fs::write(&key_file, key.private_key_pem()).unwrap();
        let out = shell(
            &format!(
                "openssl x509 -req -days 2 -copy_extensions copyall -signkey {} -outform der",
                key_file.display()
            ),
            request_pem(key, template).unwrap().as_bytes(),
        );
        let _ = std::fs::remove_file(&key_file);
        assert!(out.status.success(), "{}", text(&out));
        out.stdout
    }

    #[test]
    fn openssl_verifies_the_serving_request_and_reads_its_subject_and_sans() {
        let key = KeyPair::generate().unwrap();
        let pem = request_pem(&key, &serving_template()).unwrap();
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"),
            "{pem}"
        );
        let out = openssl(
            &["req", "-verify", "-noout", "-text", "-nameopt", "oneline"],
            pem.as_bytes(),
        );
        let text_of = text(&out);
        assert!(out.status.success(), "{text_of}");
        assert!(text_of.contains("verify OK"), "{text_of}");
        assert!(
            text_of.contains("Subject: O = system:nodes, CN = system:node:edge-1"),
            "{text_of}"
        );
        assert!(
            text_of.contains(
                "DNS:kubernetes, DNS:kubernetes.default.svc, IP Address:10.96.0.1, \
                 IP Address:169.254.2.1, IP Address:FD00:0:0:0:0:0:0:1"
            ),
            "{text_of}"
        );
        // The request carries the key it was made for.
        let out = shell(
            "openssl req -pubkey -noout | openssl pkey -pubin -outform der",
            pem.as_bytes(),
        );
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(out.stdout, key.subject_public_key_info());
    }

    #[test]
    fn a_request_changed_after_signing_fails_verification() {
        let key = KeyPair::generate().unwrap();
        let der = request_der(&request_pem(&key, &serving_template()).unwrap());
        // The last O byte ("system:nodes" → "system:nodeS") is inside the signed part.
        let at = der.windows(5).position(|w| w == b"nodes").unwrap() + 4;
        let mut changed = der.clone();
        changed[at] = b'S';
        let out = openssl(&["req", "-inform", "der", "-verify", "-noout"], &changed);
        assert!(!text(&out).contains("verify OK"), "{}", text(&out));
        let out = openssl(&["req", "-inform", "der", "-verify", "-noout"], &der);
        assert!(out.status.success() && text(&out).contains("verify OK"));
    }

    #[test]
    fn openssl_verifies_the_client_request_with_go_s_subject_layout() {
        let key = KeyPair::generate().unwrap();
        let pem = request_pem(&key, &client_template()).unwrap();
        let out = openssl(
            &["req", "-verify", "-noout", "-text", "-nameopt", "oneline"],
            pem.as_bytes(),
        );
        let text = text(&out);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("verify OK"), "{text}");
        // Go: one RDN holding every O (sorted by encoding), then CN.
        assert!(
            text.contains(
                "Subject: O = system:nodes + O = openyurt:yurthub, CN = system:node:edge-1"
            ),
            "{text}"
        );
        assert!(text.contains("Version: 1 (0x0)"), "{text}");
        assert!(text.contains("ecdsa-with-SHA256"), "{text}");
        assert!(text.contains("ASN1 OID: prime256v1"), "{text}");
        assert!(!text.contains("Subject Alternative Name"), "{text}");
        // No SANs: the attributes are an empty [0], as Go writes it.
        let der = request_der(&pem);
        let (info, _) = der::read(&der, der::SEQUENCE).unwrap();
        let (info, _) = der::read(info, der::SEQUENCE).unwrap();
        assert!(info.ends_with(&[0xa0, 0x00]));
    }

    #[test]
    fn a_certificate_with_go_s_subject_layout_reads_back_as_requested() {
        // openssl copies the request's subject and SANs verbatim into a certificate, as
        // kube-controller-manager's signer does with Go's.
        let key = KeyPair::generate().unwrap();
        let template = CsrTemplate {
            organizations: vec!["openyurt:yurthub".into(), "system:nodes".into()],
            ..serving_template()
        };
        let info = x509::parse(&openssl_signs(&key, &template)).expect("readable");
        assert_eq!(info.common_name.as_deref(), Some("system:node:edge-1"));
        // In the order of the encoding: Go's SET OF sorts the shorter value first.
        assert_eq!(info.organizations, ["system:nodes", "openyurt:yurthub"]);
        assert_eq!(info.dns_names, template.dns_names);
        assert_eq!(info.ip_addresses, template.ip_addresses);
        let validity = info.not_after.duration_since(info.not_before).unwrap();
        assert_eq!(validity.as_secs(), 2 * 86_400);
    }

    #[test]
    fn openssl_reads_the_serving_request_sans() {
        let key = KeyPair::generate().unwrap();
        let pem = request_pem(&key, &serving_template()).unwrap();
        let out = openssl(&["req", "-verify", "-noout", "-text"], pem.as_bytes());
        let text = text(&out);
        assert!(out.status.success() && text.contains("verify OK"), "{text}");
        assert!(
            text.contains(
                "DNS:kubernetes, DNS:kubernetes.default.svc, IP Address:10.96.0.1, \
                 IP Address:169.254.2.1, IP Address:FD00:0:0:0:0:0:0:1"
            ),
            "{text}"
        );
        assert!(!text.contains("critical"), "{text}");
    }

    #[test]
    fn strings_use_printable_string_only_where_go_does() {
        for (value, tag) in [
            ("system:node:a-b.c", der::PRINTABLE_STRING),
            ("openyurt:tenant:ns_1", der::UTF8_STRING), // '_'
            ("a*b", der::UTF8_STRING),
            ("a&b", der::UTF8_STRING),
            ("nœud", der::UTF8_STRING),
        ] {
            let encoded = go_string(value);
            assert_eq!(encoded[0], tag, "{value}");
            assert_eq!(der::read(&encoded, tag).unwrap().0, value.as_bytes());
        }
    }

    #[test]
    fn the_issued_certificate_and_the_key_belong_together_in_rustls() {
        let key = KeyPair::generate().unwrap();
        let template = serving_template();
        let cert = rustls::pki_types::CertificateDer::from(openssl_signs(&key, &template));

        let info = x509::parse(&cert).expect("readable");
        assert_eq!(info.common_name.as_deref(), Some("system:node:edge-1"));
        assert_eq!(info.organizations, template.organizations);
        assert_eq!(info.dns_names, template.dns_names);
        assert_eq!(info.ip_addresses, template.ip_addresses);

        let provider = rustls::crypto::ring::default_provider();
        let certified = |key: &KeyPair| {
            let der = PrivateKeyDer::from_pem_slice(key.private_key_pem().as_bytes()).unwrap();
            assert!(matches!(der, PrivateKeyDer::Sec1(_)));
            rustls::sign::CertifiedKey::from_der(vec![cert.clone()], der, &provider)
        };
        certified(&key).expect("the key of the request signs for the certificate");
        assert!(certified(&KeyPair::generate().unwrap()).is_err());
    }

    #[test]
    fn the_private_key_is_go_s_sec1_form_and_openssl_accepts_it() {
        let key = KeyPair::generate().unwrap();
        let pem = key.private_key_pem();
        assert!(pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"), "{pem}");
        assert!(pem.lines().all(|l| l.len() <= 64));

        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap();
        let (fields, rest) = der::read(der.secret_der(), der::SEQUENCE).unwrap();
        assert!(rest.is_empty());
        let (version, fields) = der::read(fields, der::INTEGER).unwrap();
        let (scalar, fields) = der::read(fields, der::OCTET_STRING).unwrap();
        let (curve, fields) = der::read(fields, der::context(0)).unwrap();
        let (public, fields) = der::read(fields, der::context(1)).unwrap();
        assert_eq!((version, scalar.len(), fields), (&[1u8][..], 32, &[][..]));
        assert_eq!(curve, der::oid(OID_P256));
        assert_eq!(public, der::bit_string(key.public_point()));

        // `openssl ec -check` exits 0 either way: its verdict is in the text.
        let out = openssl(&["ec", "-check", "-noout"], pem.as_bytes());
        assert!(text(&out).contains("EC Key valid."), "{}", text(&out));
        let out = openssl(&["ec", "-text", "-noout"], pem.as_bytes());
        assert!(
            text(&out).contains("ASN1 OID: prime256v1"),
            "{}",
            text(&out)
        );
        // A wrong scalar for the public key is what -check catches.
        let mut bad = der.secret_der().to_vec();
        let at = bad.windows(32).position(|w| w == scalar).unwrap();
        bad[at + 31] ^= 1;
        let out = openssl(&["ec", "-inform", "der", "-check", "-noout"], &bad);
        assert!(!text(&out).contains("EC Key valid."), "{}", text(&out));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = KeyPair::generate().unwrap();
        assert_eq!(format!("{key:?}"), "<redacted>");
    }

    #[test]
    fn odd_templates_are_encoded_or_refused_without_panic() {
        let key = KeyPair::generate().unwrap();
        let empty = request_pem(&key, &CsrTemplate::default()).unwrap();
        let out = openssl(&["req", "-verify", "-noout"], empty.as_bytes());
        assert!(out.status.success(), "{}", text(&out));

        let long = CsrTemplate {
            common_name: "ü".repeat(40_000), // 80 000 bytes: a 3-byte length
            organizations: vec![String::new()],
            ..CsrTemplate::default()
        };
        let pem = request_pem(&key, &long).unwrap();
        let out = openssl(&["req", "-verify", "-noout"], pem.as_bytes());
        assert!(out.status.success(), "{}", text(&out));

        let bad_dns = CsrTemplate {
            dns_names: vec!["nœud.example".into()],
            ..client_template()
        };
        let err = request_pem(&key, &bad_dns).unwrap_err().to_string();
        assert!(err.contains("nœud.example"), "{err}");
    }

    #[test]
    fn a_request_is_never_read_as_a_certificate() {
        let key = KeyPair::generate().unwrap();
        let der = request_der(&request_pem(&key, &serving_template()).unwrap());
        for end in 0..=der.len() {
            assert_eq!(x509::parse(&der[..end]), None, "cut at {end}");
        }
        for at in 0..der.len() {
            for value in [0x00, 0xff, der[at] ^ 0x01, der[at] ^ 0x80, 0x30, 0xa0] {
                let mut changed = der.clone();
                changed[at] = value;
                assert_eq!(x509::parse(&changed), None, "byte {at} = {value:#04x}");
            }
        }
    }
}
