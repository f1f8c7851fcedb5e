//! Just enough protobuf to read the few bodies kubelet sends in protobuf (its default
//! `--kube-api-content-type=application/vnd.kubernetes.protobuf`): a TokenRequest, its node
//! Lease. No code generation and no crate: these are a handful of fields, read in place.
//!
//! A Kubernetes protobuf body is [`PROTOBUF_MAGIC`] then a `runtime.Unknown`
//! (k8s.io/apimachinery/pkg/runtime/generated.proto: typeMeta 1 {apiVersion 1, kind 2},
//! raw 2, contentEncoding 3, contentType 4); [`open_envelope`] gives its `raw` message.

/// How a Kubernetes protobuf body starts: `k8s` and a NUL, then a `runtime.Unknown`.
pub(crate) const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// One field's value.
pub(crate) enum Wire<'a> {
    /// Wire type 0: int32, int64, bool, enum.
    Varint(u64),
    /// Wire type 2: a string, bytes or an embedded message.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (fixed64, fixed32): no Kubernetes field read here uses them.
    Fixed,
}

impl<'a> Wire<'a> {
    /// A length-delimited value, else `None` (a known field of the wrong wire type).
    pub(crate) fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Wire::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// A string value: length-delimited UTF-8.
    pub(crate) fn string(self) -> Option<String> {
        text(self.bytes()?)
    }

    /// A varint value, else `None`.
    pub(crate) fn number(self) -> Option<u64> {
        match self {
            Wire::Varint(x) => Some(x),
            _ => None,
        }
    }

    /// An int32 value: sent sign-extended to 64 bits; Go keeps the low 32.
    pub(crate) fn int32(self) -> Option<i32> {
        Some(self.number()? as u32 as i32)
    }
}

/// Calls `f` with each (field number, value) of a message; `None` if it is malformed.
pub(crate) fn fields<'a>(buf: &'a [u8], mut f: impl FnMut(u64, Wire<'a>)) -> Option<()> {
    try_fields(buf, |n, v| {
        f(n, v);
        Some(())
    })
}

/// [`fields`] with a callback that may refuse a value (`None`), which ends the walk with
/// `None`: a field of the wrong wire type or an unreadable string makes the message malformed.
pub(crate) fn try_fields<'a>(
    mut buf: &'a [u8],
    mut f: impl FnMut(u64, Wire<'a>) -> Option<()>,
) -> Option<()> {
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let value = match tag & 7 {
            0 => Wire::Varint(varint(&mut buf)?),
            1 => {
                buf = buf.get(8..)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (bytes, rest) = (buf.get(..len)?, buf.get(len..)?);
                buf = rest;
                Wire::Bytes(bytes)
            }
            5 => {
                buf = buf.get(4..)?;
                Wire::Fixed
            }
            // Groups (3, 4) are proto1 and unused by Kubernetes; 6 and 7 do not exist.
            _ => return None,
        };
        f(tag >> 3, value)?;
    }
    Some(())
}

/// Reads a base-128 varint off the front of `buf`; `None` when it is cut short or longer
/// than ten bytes.
pub(crate) fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The only field of `message` numbered `number` that holds bytes (the last wins, as in
/// protobuf); `None` if the message is malformed, `Some(None)` if it has no such field.
pub(crate) fn bytes_field(message: &[u8], number: u64) -> Option<Option<&[u8]>> {
    let mut found = None;
    fields(message, |n, v| {
        if let (true, Wire::Bytes(b)) = (n == number, v) {
            found = Some(b);
        }
    })?;
    Some(found)
}

/// A string field's value; `None` when it is not UTF-8.
pub(crate) fn text(bytes: &[u8]) -> Option<String> {
    String::from_utf8(bytes.to_vec()).ok()
}

/// The `raw` message of a Kubernetes protobuf body (`PROTOBUF_MAGIC` + `runtime.Unknown`)
/// when its typeMeta names `kind` or no kind, and it is not encoded (`contentEncoding` empty:
/// no Kubernetes client compresses it); `None` for anything else, a truncated body included.
pub(crate) fn open_envelope<'a>(body: &'a [u8], kind: &str) -> Option<&'a [u8]> {
    let envelope = body.strip_prefix(PROTOBUF_MAGIC)?;
    let mut raw = None;
    try_fields(envelope, |n, v| match (n, v) {
        (1, Wire::Bytes(type_meta)) => {
            let named = bytes_field(type_meta, 2)?;
            named.is_none_or(|k| k == kind.as_bytes()).then_some(())
        }
        (2, Wire::Bytes(bytes)) => {
            raw = Some(bytes);
            Some(())
        }
        (3, Wire::Bytes(encoding)) => encoding.is_empty().then_some(()),
        (4, Wire::Bytes(_)) => Some(()),
        // A known field of the wrong wire type: not a runtime.Unknown.
        (1..=4, _) => None,
        _ => Some(()),
    })?;
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field whose length fits one byte.
    fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![n << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    fn envelope(kind: Option<&str>, raw: &[u8], encoding: Option<&str>) -> Vec<u8> {
        let mut type_meta = field(1, b"coordination.k8s.io/v1");
        if let Some(kind) = kind {
            type_meta.extend(field(2, kind.as_bytes()));
        }
        let mut out = [PROTOBUF_MAGIC.to_vec(), field(1, &type_meta), field(2, raw)].concat();
        if let Some(encoding) = encoding {
            out.extend(field(3, encoding.as_bytes()));
        }
        out.extend(field(4, b""));
        out
    }

    #[test]
    fn varints_read_up_to_ten_bytes() {
        let mut buf = &[0x96, 0x01, 0x05][..];
        assert_eq!(varint(&mut buf), Some(150));
        assert_eq!(buf, [0x05]);
        let mut max = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..];
        assert_eq!(varint(&mut max), Some(u64::MAX));
        let mut long = &[0xff; 11][..];
        assert_eq!(varint(&mut long), None);
        assert_eq!(varint(&mut &[0x80][..]), None);
    }

    #[test]
    fn fields_walk_every_wire_type_and_refuse_broken_messages() {
        let mut message = vec![1 << 3, 7, 2 << 3 | 1];
        message.extend([0; 8]);
        message.extend([3 << 3 | 5, 0, 0, 0, 0]);
        message.extend(field(4, b"hi"));
        let mut seen = Vec::new();
        fields(&message, |n, v| {
            seen.push(match v {
                Wire::Varint(x) => (n, x.to_string()),
                Wire::Bytes(b) => (n, String::from_utf8_lossy(b).into_owned()),
                Wire::Fixed => (n, "fixed".to_owned()),
            })
        })
        .unwrap();
        let expected = [(1, "7"), (2, "fixed"), (3, "fixed"), (4, "hi")];
        assert_eq!(seen, expected.map(|(n, s)| (n, s.to_owned())));
        for cut in 0..message.len() {
            let whole = fields(&message[..cut], |_, _| {}).is_some();
            // Only the boundaries between fields leave a whole message.
            assert_eq!(whole, [0, 2, 11, 16].contains(&cut), "cut at {cut}");
        }
        assert_eq!(fields(&[1 << 3 | 3], |_, _| {}), None, "a group");
        assert_eq!(try_fields(&message, |n, _| (n != 3).then_some(())), None);
        assert_eq!(bytes_field(&message, 4), Some(Some(&b"hi"[..])));
        assert_eq!(bytes_field(&message, 1), Some(None), "a varint is no bytes");
        assert_eq!(text(b"\xff"), None);
    }

    #[test]
    fn envelopes_open_for_their_kind_or_none_named() {
        let raw = field(1, b"lease");
        assert_eq!(
            open_envelope(&envelope(Some("Lease"), &raw, None), "Lease"),
            Some(&raw[..])
        );
        assert_eq!(
            open_envelope(&envelope(None, &raw, Some("")), "Lease"),
            Some(&raw[..])
        );
        assert_eq!(
            open_envelope(&envelope(Some("Pod"), &raw, None), "Lease"),
            None
        );
        assert_eq!(
            open_envelope(&envelope(Some("Lease"), &raw, Some("gzip")), "Lease"),
            None
        );
        let whole = envelope(Some("Lease"), &raw, None);
        assert_eq!(open_envelope(&whole[4..], "Lease"), None, "no magic");
        for cut in 0..whole.len() {
            // Only the body cut right after its raw field (before contentType) opens.
            let opened = open_envelope(&whole[..cut], "Lease");
            assert_eq!(opened.is_some(), cut == whole.len() - 2, "cut at {cut}");
        }
        let no_raw = [PROTOBUF_MAGIC, &field(1, &field(2, b"Lease"))].concat();
        assert_eq!(open_envelope(&no_raw, "Lease"), None);
    }
}
