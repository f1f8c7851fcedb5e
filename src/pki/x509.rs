// placeholder until the crypto branch lands
//! The certificate fields the hub reads (placeholder: only `spki_sha256` is filled; the
//! crypto branch's file replaces this one at merge).

#![allow(dead_code)] // wired by the lead in src/app.rs

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use ring::digest;

/// What the hub reads from a certificate.
pub(crate) struct CertInfo {
    /// Start of validity (placeholder: the epoch).
    pub not_before: SystemTime,
    /// End of validity (placeholder: the epoch).
    pub not_after: SystemTime,
    /// Subject CN (placeholder: empty).
    pub common_name: String,
    /// Subject O values (placeholder: empty).
    pub organizations: Vec<String>,
    /// DNS SANs (placeholder: empty).
    pub dns_names: Vec<String>,
    /// IP SANs (placeholder: empty).
    pub ip_addresses: Vec<IpAddr>,
    /// SHA-256 of the DER SubjectPublicKeyInfo (kubeadm's CA pin).
    pub spki_sha256: [u8; 32],
}

/// Reads a DER certificate: `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, .. }
/// .. }` (RFC 5280 §4.1). None for anything else.
pub(crate) fn parse(der: &[u8]) -> Option<CertInfo> {
    let (cert, _) = tlv(der, 0x30)?;
    let (mut tbs, _) = tlv(cert.1, 0x30)?;
    let mut rest = tbs.1;
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest, 0xa0)?.1;
    }
    for tag in [0x02, 0x30, 0x30, 0x30, 0x30] {
        // serial, signature, issuer, validity, subject
        rest = tlv(rest, tag)?.1;
    }
    tbs = tlv(rest, 0x30)?.0;
    let mut spki_sha256 = [0u8; 32];
    spki_sha256.copy_from_slice(digest::digest(&digest::SHA256, tbs.0).as_ref());
    Some(CertInfo {
        not_before: UNIX_EPOCH,
        not_after: UNIX_EPOCH,
        common_name: String::new(),
        organizations: Vec::new(),
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        spki_sha256,
    })
}

/// One DER element with tag `want`: ((whole element, contents), what follows).
#[allow(clippy::type_complexity)] // a throw-away placeholder; the real file has its own reader
fn tlv(input: &[u8], want: u8) -> Option<((&[u8], &[u8]), &[u8])> {
    let (&tag, after) = input.split_first()?;
    if tag != want {
        return None;
    }
    let (&first, mut after) = after.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || after.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &after[..n] {
            len = (len << 8) | usize::from(b);
        }
        after = &after[n..];
        len
    };
    let header = input.len() - after.len();
    let contents = after.get(..len)?;
    Some(((&input[..header + len], contents), &after[len..]))
}
