//! Response heads, as bytes: the status line with its reason phrase, the caller's headers,
//! and the framing headers the hub owns (`Content-Length`, `Transfer-Encoding`,
//! `Connection`), rendered into a buffer; chunk framing likewise. Pure: `server` sends them.

use std::io::Write as _;

/// The interim answer to `Expect: 100-continue`, sent before the body is read.
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// The end of a chunked body: the last chunk and an empty trailer section.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
/// The longest chunk-size line [`chunk_size_line`] writes: 16 hex digits and CRLF.
pub(crate) const CHUNK_SIZE_LINE: usize = 18;

/// How the body of an answer is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseFraming {
    /// Exactly this many bytes follow.
    Known(u64),
    /// Chunks, each flushed as it comes.
    Chunked,
    /// Bytes until the connection closes (an HTTP/1.0 client of a streamed answer).
    Close,
}

/// True when an answer carries no body whatever its headers say: an answer to HEAD, and
/// 204 and 304 (RFC 9110 §6.4.1).
pub(crate) fn bodiless(method: &str, status: u16) -> bool {
    method == "HEAD" || status == 204 || status == 304
}

/// The framing of an answer: `length` when it is known; a streamed one is chunked, or
/// close-delimited for an HTTP/1.0 client, and has no bytes at all when `bodiless`.
pub(crate) fn framing(length: Option<u64>, bodiless: bool, http10: bool) -> ResponseFraming {
    match length {
        Some(n) => ResponseFraming::Known(n),
        None if bodiless => ResponseFraming::Known(0),
        None if http10 => ResponseFraming::Close,
        None => ResponseFraming::Chunked,
    }
}

/// Appends a response head to `out`: the status line, `headers` (a header whose name or
/// value could split the head is left out), `Content-Length` when `length` is given, else
/// `Transfer-Encoding: chunked` for chunked framing, and `Connection: close` when `close`
/// or when the body is close-delimited.
pub(crate) fn write_head<N: AsRef<str>, V: AsRef<str>>(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(N, V)],
    length: Option<u64>,
    framing: ResponseFraming,
    close: bool,
) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        if value.contains(['\r', '\n']) || name.contains(['\r', '\n', ':']) {
            continue; // never let a header split the response
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match (length, framing) {
        (Some(n), _) => {
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        (None, ResponseFraming::Chunked) => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n")
        }
        _ => {}
    }
    if close || framing == ResponseFraming::Close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The size line of a chunk of `len` bytes, written into `buf`.
pub(crate) fn chunk_size_line(len: usize, buf: &mut [u8; CHUNK_SIZE_LINE]) -> &[u8] {
    let mut cursor = &mut buf[..];
    // At most 16 hex digits and CRLF: always fits.
    let _ = write!(cursor, "{len:x}\r\n");
    let left = cursor.len();
    &buf[..CHUNK_SIZE_LINE - left]
}

/// The standard reason phrase of a status code (`http`'s table), or "Status" for a code
/// it does not name.
pub(crate) fn reason_phrase(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("Status")
}

#[cfg(test)]
mod tests;
