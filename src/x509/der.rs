//! DER (X.690) reading and writing: just the definite-length, single-byte-tag subset that
//! certificates, PKCS#10 requests and SEC1 keys use.
//!
//! Reading never panics and never allocates: a reader returns None on anything it does not
//! understand. Writing builds one `Vec` per element; the hub writes a few small requests a
//! year, so clarity wins over avoiding copies. Nothing here knows what the elements mean.

/// Universal tag of BOOLEAN.
pub(crate) const BOOLEAN: u8 = 0x01;
/// Universal tag of INTEGER.
pub(crate) const INTEGER: u8 = 0x02;
/// Universal tag of BIT STRING.
pub(crate) const BIT_STRING: u8 = 0x03;
/// Universal tag of OCTET STRING.
pub(crate) const OCTET_STRING: u8 = 0x04;
/// Universal tag of OBJECT IDENTIFIER.
pub(crate) const OID: u8 = 0x06;
/// Universal tag of UTF8String.
pub(crate) const UTF8_STRING: u8 = 0x0c;
/// Universal tag of PrintableString.
pub(crate) const PRINTABLE_STRING: u8 = 0x13;
/// Universal tag of T61String (TeletexString).
pub(crate) const T61_STRING: u8 = 0x14;
/// Universal tag of IA5String.
pub(crate) const IA5_STRING: u8 = 0x16;
/// Universal tag of UTCTime.
pub(crate) const UTC_TIME: u8 = 0x17;
/// Universal tag of GeneralizedTime.
pub(crate) const GENERALIZED_TIME: u8 = 0x18;
/// Universal tag of BMPString (UTF-16BE).
pub(crate) const BMP_STRING: u8 = 0x1e;
/// SEQUENCE (constructed).
pub(crate) const SEQUENCE: u8 = 0x30;
/// SET (constructed).
pub(crate) const SET: u8 = 0x31;

/// Tag of a constructed context-specific element `[n]` (EXPLICIT tags, IMPLICIT SETs).
pub(crate) const fn context(n: u8) -> u8 {
    0xa0 | n
}

/// Tag of a primitive context-specific element `[n]` (IMPLICIT strings, as in GeneralName).
pub(crate) const fn context_primitive(n: u8) -> u8 {
    0x80 | n
}

/// One element with tag `tag` at the start of `input`: (contents, what follows). None when
/// the tag differs, the length is indefinite, longer than 4 bytes or runs past the input.
pub(crate) fn read(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match read_any(input)? {
        (t, contents, rest) if t == tag => Some((contents, rest)),
        _ => None,
    }
}

/// One element of any single-byte tag: (tag, contents, what follows).
pub(crate) fn read_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // a multi-byte tag: none of the formats read here has one
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // 0x80 is BER's indefinite length; more than 4 length bytes would not fit 32 bits.
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        (usize::try_from(len).ok()?, rest)
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Like `read`, but also returns the whole element, tag and length included (what a digest
/// or a signature covers): (element, contents, what follows).
pub(crate) fn read_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8], &[u8])> {
    let (contents, rest) = read(input, tag)?;
    Some((&input[..input.len() - rest.len()], contents, rest))
}

/// One element with a definite length in its shortest form.
pub(crate) fn write(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut out = Vec::with_capacity(contents.len() + 6);
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8); // < 0x80: fits
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8); // at most 8 length bytes
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// An element whose contents are `parts` one after another.
pub(crate) fn write_all(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    write(tag, &parts.concat())
}

/// A SEQUENCE of the given encoded elements, in order.
pub(crate) fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    write_all(SEQUENCE, parts)
}

/// A SET OF the given encoded elements, sorted by their encodings as DER requires (X.690
/// §11.6; Go's encoding/asn1 sorts the same way).
pub(crate) fn set_of(mut parts: Vec<Vec<u8>>) -> Vec<u8> {
    parts.sort();
    write(SET, &parts.concat())
}

/// An OBJECT IDENTIFIER from its encoded contents (the arcs as DER packs them).
pub(crate) fn oid(encoded: &[u8]) -> Vec<u8> {
    write(OID, encoded)
}

/// A small non-negative INTEGER (versions).
pub(crate) fn small_integer(value: u8) -> Vec<u8> {
    if value < 0x80 {
        write(INTEGER, &[value])
    } else {
        write(INTEGER, &[0, value]) // a leading zero keeps it positive
    }
}

/// A UTF8String.
pub(crate) fn utf8_string(text: &str) -> Vec<u8> {
    write(UTF8_STRING, text.as_bytes())
}

/// A BIT STRING of whole bytes (no unused bits), as keys and signatures are.
pub(crate) fn bit_string(bytes: &[u8]) -> Vec<u8> {
    write_all(BIT_STRING, &[&[0], bytes])
}

/// An OCTET STRING.
pub(crate) fn octet_string(bytes: &[u8]) -> Vec<u8> {
    write(OCTET_STRING, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip_in_their_shortest_form() {
        for (len, head) in [
            (0usize, vec![0x04, 0x00]),
            (127, vec![0x04, 0x7f]),
            (128, vec![0x04, 0x81, 0x80]),
            (255, vec![0x04, 0x81, 0xff]),
            (256, vec![0x04, 0x82, 0x01, 0x00]),
            (70_000, vec![0x04, 0x83, 0x01, 0x11, 0x70]),
        ] {
            let contents = vec![0x5a; len];
            let mut der = octet_string(&contents);
            assert_eq!(der[..head.len()], head[..], "{len}");
            assert_eq!(der.len(), head.len() + len);
            der.extend_from_slice(b"next");
            let (read_back, rest) = read(&der, OCTET_STRING).expect("readable");
            assert_eq!((read_back, rest), (&contents[..], &b"next"[..]), "{len}");
            assert_eq!(read(&der, SEQUENCE), None, "another tag");
        }
    }

    #[test]
    fn malformed_elements_are_refused() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x01",                         // contents missing
            b"\x30\x80\x00\x00",                 // indefinite length (BER only)
            b"\x30\x85\x00\x00\x00\x00\x01\x00", // 5 length bytes
            b"\x30\x84\xff\xff\xff\xff\x00",     // longer than the input
            b"\x30\x82\x01",                     // length bytes cut
            b"\x1f\x01\x01\x00",                 // multi-byte tag
        ] {
            assert_eq!(read_any(bad), None, "{bad:02x?}");
        }
        assert_eq!(read_any(b"\x30\x00"), Some((SEQUENCE, &b""[..], &b""[..])));
    }

    #[test]
    fn read_element_returns_what_a_digest_covers() {
        let inner = sequence(&[&small_integer(1), &small_integer(200)]);
        let both = [inner.clone(), b"\x05\x00".to_vec()].concat();
        let (whole, contents, rest) = read_element(&both, SEQUENCE).unwrap();
        assert_eq!(whole, &inner[..]);
        assert_eq!(contents, b"\x02\x01\x01\x02\x02\x00\xc8");
        assert_eq!(rest, b"\x05\x00");
    }

    #[test]
    fn set_of_is_sorted_by_encoding() {
        let long = utf8_string("openyurt:yurthub");
        let short = utf8_string("system:nodes");
        let set = set_of(vec![long.clone(), short.clone()]);
        assert_eq!(set, write_all(SET, &[&short, &long]));
        assert_eq!(set_of(vec![short.clone(), long.clone()]), set);
    }

    #[test]
    fn strings_and_bit_strings_have_their_tags() {
        assert_eq!(utf8_string("é"), b"\x0c\x02\xc3\xa9");
        assert_eq!(bit_string(b"\x04\x01"), b"\x03\x03\x00\x04\x01");
        assert_eq!(oid(b"\x55\x04\x03"), b"\x06\x03\x55\x04\x03");
        assert_eq!(context(3), 0xa3);
        assert_eq!(context_primitive(2), 0x82);
    }
}
