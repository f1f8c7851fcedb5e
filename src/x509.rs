//! The few fields of an X.509 certificate (RFC 5280 §4.1) the hub reads: validity, subject
//! CN and O, subjectAltName DNS names and IP addresses, and the SHA-256 of the subject public
//! key info (kubeadm's CA pin).
//!
//! It verifies nothing: signatures and chains are rustls's job. It never panics, whatever the
//! bytes; anything it cannot read as a certificate is None. `der.rs` reads and writes the DER
//! underneath (the CSRs of `pki/csr.rs` are written with it). Pure: beside `tls.rs`, below
//! every module that reads a certificate.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) mod der;

/// id-at-commonName (2.5.4.3).
pub(crate) const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// id-at-organizationName (2.5.4.10).
pub(crate) const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
/// id-ce-subjectAltName (2.5.29.17).
pub(crate) const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
/// GeneralName `dNSName [2] IA5String`.
pub(crate) const SAN_DNS: u8 = der::context_primitive(2);
/// GeneralName `iPAddress [7] OCTET STRING`.
pub(crate) const SAN_IP: u8 = der::context_primitive(7);

/// What the hub reads from a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertInfo {
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// The subject's CN (the last one, as Go reads it), if any.
    pub common_name: Option<String>,
    /// The subject's O values, in the order of the encoding.
    pub organizations: Vec<String>,
    /// subjectAltName dNSName entries.
    pub dns_names: Vec<String>,
    /// subjectAltName iPAddress entries.
    pub ip_addresses: Vec<IpAddr>,
    /// SHA-256 of the whole SubjectPublicKeyInfo element, as kubeadm pins a CA.
    pub spki_sha256: [u8; 32],
}

/// Reads a DER certificate: `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm,
/// signature }`, `TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber,
/// signature, issuer, validity, subject, subjectPublicKeyInfo, [1] [2] unique IDs OPTIONAL,
/// [3] extensions OPTIONAL }`. None for anything else; bytes after the certificate are
/// ignored.
pub(crate) fn parse(der: &[u8]) -> Option<CertInfo> {
    let (cert, _) = der::read(der, der::SEQUENCE)?;
    let (tbs, rest) = der::read(cert, der::SEQUENCE)?;
    let (_, rest) = der::read(rest, der::SEQUENCE)?; // signatureAlgorithm
    der::read(rest, der::BIT_STRING)?; // signature

    let tbs = match der::read(tbs, der::context(0)) {
        Some((_, rest)) => rest, // version
        None => tbs,
    };
    let (_, rest) = der::read(tbs, der::INTEGER)?; // serialNumber
    let (_, rest) = der::read(rest, der::SEQUENCE)?; // signature
    let (_, rest) = der::read(rest, der::SEQUENCE)?; // issuer
    let (validity, rest) = der::read(rest, der::SEQUENCE)?;
    let (subject, rest) = der::read(rest, der::SEQUENCE)?;
    let (spki, _, mut rest) = der::read_element(rest, der::SEQUENCE)?;

    let (not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    let mut info = CertInfo {
        not_before,
        not_after,
        common_name: None,
        organizations: Vec::new(),
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        spki_sha256: sha256(spki),
    };
    read_subject(subject, &mut info)?;

    for unique_id in [der::context_primitive(1), der::context_primitive(2)] {
        if let Some((_, after)) = der::read(rest, unique_id) {
            rest = after;
        }
    }
    if let Some((extensions, _)) = der::read(rest, der::context(3)) {
        let (mut list, _) = der::read(extensions, der::SEQUENCE)?;
        while !list.is_empty() {
            let (extension, after) = der::read(list, der::SEQUENCE)?;
            list = after;
            let (oid, rest) = der::read(extension, der::OID)?;
            let rest = der::read(rest, der::BOOLEAN).map_or(rest, |(_, after)| after); // critical
            let (value, _) = der::read(rest, der::OCTET_STRING)?;
            if oid == OID_SUBJECT_ALT_NAME {
                read_alt_names(value, &mut info)?;
            }
        }
    }
    Some(info)
}

/// `"sha256:<64 lowercase hex>"` of the certificate's SubjectPublicKeyInfo: the format of
/// kubeadm's `--discovery-token-ca-cert-hash`. None when `der` is not a certificate.
pub(crate) fn pin(der: &[u8]) -> Option<String> {
    let digest = parse(der)?.spki_sha256;
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref()); // SHA-256 is 32 bytes
    out
}

/// `Name ::= SEQUENCE OF RelativeDistinguishedName`, each a `SET OF AttributeTypeAndValue`
/// (Go puts all O values into one multi-valued RDN; others write one RDN each).
fn read_subject(mut rdns: &[u8], info: &mut CertInfo) -> Option<()> {
    while !rdns.is_empty() {
        let (mut rdn, after) = der::read(rdns, der::SET)?;
        rdns = after;
        while !rdn.is_empty() {
            let (attribute, after) = der::read(rdn, der::SEQUENCE)?;
            rdn = after;
            let (oid, value) = der::read(attribute, der::OID)?;
            if oid == OID_COMMON_NAME {
                info.common_name = Some(directory_string(value)?);
            } else if oid == OID_ORGANIZATION {
                info.organizations.push(directory_string(value)?);
            }
        }
    }
    Some(())
}

/// A DirectoryString value as text; the string types Go's parser accepts.
fn directory_string(element: &[u8]) -> Option<String> {
    let (tag, bytes, _) = der::read_any(element)?;
    match tag {
        der::UTF8_STRING | der::PRINTABLE_STRING | der::IA5_STRING => {
            String::from_utf8(bytes.to_vec()).ok()
        }
        der::T61_STRING => Some(bytes.iter().map(|&b| char::from(b)).collect()), // as Latin-1
        der::BMP_STRING if bytes.len() % 2 == 0 => {
            let units = bytes.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]));
            char::decode_utf16(units).collect::<Result<_, _>>().ok()
        }
        _ => None,
    }
}

/// `GeneralNames ::= SEQUENCE OF GeneralName`: the DNS names and IP addresses; other kinds
/// are skipped. An IP address of another length than 4 or 16 bytes makes the certificate
/// unreadable, as in Go.
fn read_alt_names(value: &[u8], info: &mut CertInfo) -> Option<()> {
    let (mut names, _) = der::read(value, der::SEQUENCE)?;
    while !names.is_empty() {
        let (tag, bytes, after) = der::read_any(names)?;
        names = after;
        match tag {
            SAN_DNS => info.dns_names.push(String::from_utf8(bytes.to_vec()).ok()?),
            SAN_IP => info.ip_addresses.push(match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
                16 => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
                _ => return None,
            }),
            _ => {}
        }
    }
    Some(())
}

/// One Time (`UTCTime` or `GeneralizedTime`) at the start of `input`, and what follows.
fn time(input: &[u8]) -> Option<(SystemTime, &[u8])> {
    let (tag, text, rest) = der::read_any(input)?;
    Some((der_time(tag, text)?, rest))
}

/// A UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as a point in time
/// (RFC 5280 §4.1.2.5: always UTC, with seconds, no fractions).
fn der_time(tag: u8, text: &[u8]) -> Option<SystemTime> {
    // ASCII first: the slicing below must never split a character.
    if !text.is_ascii() {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let digits = |s: &str| -> Option<i64> {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (year, rest) = match tag {
        der::UTC_TIME if text.len() == 12 => {
            let yy = digits(&text[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        der::GENERALIZED_TIME if text.len() == 14 => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| digits(&rest[i..i + 2]);
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = crate::logging::days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    // A UTCTime reaches back to 1950: before the epoch is a valid notBefore.
    let offset = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH.checked_add(offset)
    } else {
        UNIX_EPOCH.checked_sub(offset)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use rcgen::{DnType, PublicKeyData, SanType};

    use super::*;
    use crate::pki::csr::tests::shell;

    fn day(year: i64, month: u32, day: u32) -> SystemTime {
        let days = crate::logging::days_from_civil(year, month, day);
        if days >= 0 {
            UNIX_EPOCH + Duration::from_secs(days as u64 * 86_400)
        } else {
            UNIX_EPOCH - Duration::from_secs(days.unsigned_abs() * 86_400)
        }
    }

    /// A certificate with every field the hub reads, and its key.
    fn certificate(
        not_before: (i32, u8, u8),
        not_after: (i32, u8, u8),
    ) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["kubernetes".into(), "hub.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        for ip in ["10.96.0.1", "fd00::a"] {
            params
                .subject_alt_names
                .push(SanType::IpAddress(ip.parse().unwrap()));
        }
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(DnType::OrganizationName, "system:nodes");
        dn.push(DnType::CommonName, "system:node:edge-1");
        // rcgen keeps one value per type: a second O needs the OID spelt out.
        dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), "openyurt:yurthub");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        (cert, key)
    }

    #[test]
    fn reads_every_field_of_an_rcgen_certificate() {
        // 2049 is a UTCTime, 2050 on a GeneralizedTime (RFC 5280 §4.1.2.5).
        for (from, to) in [
            ((2024, 2, 29), (2049, 12, 31)),
            ((2026, 1, 1), (2050, 1, 1)),
        ] {
            let (cert, key) = certificate(from, to);
            let info = parse(cert.der()).expect("readable");
            let expected = CertInfo {
                not_before: day(from.0.into(), from.1.into(), from.2.into()),
                not_after: day(to.0.into(), to.1.into(), to.2.into()),
                common_name: Some("system:node:edge-1".into()),
                organizations: vec!["system:nodes".into(), "openyurt:yurthub".into()],
                dns_names: vec!["kubernetes".into(), "hub.example".into()],
                ip_addresses: vec![
                    "10.96.0.1".parse::<IpAddr>().unwrap(),
                    "fd00::a".parse().unwrap(),
                ],
                spki_sha256: sha256(&key.subject_public_key_info()),
            };
            assert_eq!(info, expected);
        }
    }

    #[test]
    fn a_not_before_ahead_of_1970_is_read() {
        let (cert, _) = certificate((1960, 6, 1), (2030, 1, 1));
        assert_eq!(parse(cert.der()).unwrap().not_before, day(1960, 6, 1));
    }

    #[test]
    fn the_pin_is_kubeadm_s_ca_cert_hash() {
        let (cert, _) = certificate((2025, 1, 1), (2035, 1, 1));
        let out = shell(
            "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum",
            cert.pem().as_bytes(),
        );
        assert!(out.status.success(), "{out:?}");
        let hex = String::from_utf8(out.stdout).unwrap();
        let hex = hex.split_whitespace().next().unwrap();
        assert_eq!(hex.len(), 64);
        assert_eq!(pin(cert.der()), Some(format!("sha256:{hex}")));
        let (other, _) = certificate((2025, 1, 1), (2035, 1, 1));
        assert_ne!(pin(other.der()), pin(cert.der()));
        assert_eq!(pin(b"\x30\x00"), None);
    }

    #[test]
    fn a_bad_san_ip_length_or_a_bad_time_makes_it_unreadable() {
        assert_eq!(
            der_time(der::UTC_TIME, b"491231235959Z"),
            Some(day(2050, 1, 1) - Duration::from_secs(1))
        );
        assert_eq!(
            der_time(der::UTC_TIME, b"500101000000Z"),
            Some(day(1950, 1, 1))
        );
        for bad in [
            &b"4912312359Z"[..],    // no seconds
            b"491231235959",        // no Z
            b"491331235959Z",       // month 13
            b"49123123595\xc3\xa9", // not ASCII: must not split a character
            b"4912312359+0Z",
        ] {
            assert_eq!(der_time(der::UTC_TIME, bad), None, "{bad:?}");
        }
        assert_eq!(der_time(der::GENERALIZED_TIME, b"491231235959Z"), None);

        let mut info = parse(certificate((2025, 1, 1), (2035, 1, 1)).0.der()).unwrap();
        let names = |entries: &[&[u8]]| der::write_all(der::SEQUENCE, entries);
        let five = der::write(SAN_IP, &[10, 0, 0, 1, 0]);
        assert_eq!(read_alt_names(&names(&[&five]), &mut info), None);
        let uri = der::write(der::context_primitive(6), b"spiffe://x");
        let dns = der::write(SAN_DNS, b"a.example");
        info.dns_names.clear();
        assert_eq!(read_alt_names(&names(&[&uri, &dns]), &mut info), Some(()));
        assert_eq!(info.dns_names, ["a.example"]);
    }

    #[test]
    fn directory_strings_of_each_type_are_read() {
        for (tag, bytes, text) in [
            (der::UTF8_STRING, &b"n\xc5\x93ud"[..], "nœud"),
            (der::PRINTABLE_STRING, b"system:nodes", "system:nodes"),
            (der::IA5_STRING, b"a@b", "a@b"),
            (der::T61_STRING, b"caf\xe9", "café"),
            (der::BMP_STRING, b"\x00n\x01\x53", "nœ"),
        ] {
            assert_eq!(
                directory_string(&der::write(tag, bytes)).as_deref(),
                Some(text)
            );
        }
        assert_eq!(
            directory_string(&der::write(der::BMP_STRING, b"\x00")),
            None
        );
        assert_eq!(
            directory_string(&der::write(der::UTF8_STRING, b"\xff")),
            None
        );
        assert_eq!(directory_string(&der::write(der::OCTET_STRING, b"x")), None);
    }

    #[test]
    fn truncated_or_corrupted_certificates_never_panic() {
        let (cert, _) = certificate((2025, 1, 1), (2035, 1, 1));
        let der = cert.der().to_vec();
        for end in 0..der.len() {
            assert_eq!(parse(&der[..end]), None, "cut at {end}");
        }
        let mut unreadable = 0;
        for at in 0..der.len() {
            for value in [0x00, 0xff, der[at] ^ 0x01, der[at] ^ 0x80, 0x30, 0xa3] {
                let mut changed = der.clone();
                changed[at] = value;
                unreadable += usize::from(parse(&changed).is_none());
            }
        }
        // Bytes of the key or the signature may change and leave a readable certificate;
        // tags and lengths may not.
        assert!(unreadable > der.len(), "{unreadable} of {}", der.len() * 6);
        let mut bad_length = der.clone();
        bad_length[1] ^= 0x01;
        assert_eq!(parse(&bad_length), None);
    }
}
