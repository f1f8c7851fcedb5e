//! Response heads, as bytes: the status line with its reason phrase, the caller's headers,
//! and the framing headers the hub owns (`Content-Length`, `Transfer-Encoding`,
//! `Connection`), rendered into a buffer; chunk framing likewise; the `101 Switching
//! Protocols` head of a tunnel. Pure: `server` sends them. And the other way, a server's
//! response head read from a `BufRead` ([`read_response_head`]): the cloud's answer to an
//! upgrade, which the hub reads itself (ureq keeps the socket behind a 101).

use std::io::{self, BufRead, Write as _};
use std::mem::MaybeUninit;

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
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, status.into());
    out.push(b' ');
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        // memchr, not `contains([..])` with a char array: that decodes and compares a
        // character at a time, and these run over every header of every answer.
        let (name, value) = (name.as_bytes(), value.as_bytes());
        if memchr::memchr2(b'\r', b'\n', value).is_some()
            || memchr::memchr3(b'\r', b'\n', b':', name).is_some()
        {
            continue; // never let a header split the response
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match (length, framing) {
        (Some(n), _) => {
            out.extend_from_slice(b"Content-Length: ");
            push_decimal(out, n);
            out.extend_from_slice(b"\r\n");
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

/// Appends `n` in decimal: `write!` takes the formatting machinery, a few hundred
/// instructions a number, and every answer's head has two.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
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

/// Appends the head of a `101 Switching Protocols` to `out`: `headers` (the cloud's, its
/// `Upgrade`, `Connection` and protocol headers among them) as they are, no framing: what
/// follows is the new protocol's.
pub(crate) fn write_switching_head<N: AsRef<str>, V: AsRef<str>>(
    out: &mut Vec<u8>,
    headers: &[(N, V)],
) {
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        if value.contains(['\r', '\n']) || name.contains(['\r', '\n', ':']) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Largest response head [`read_response_head`] reads (an apiserver's is well under 1 KiB).
pub(crate) const MAX_RESPONSE_HEAD: usize = 8 * 1024;

/// A response head as a server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
}

/// How the body of a server's answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerFraming {
    /// Exactly this many bytes (none for 1xx, 204 and 304).
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

impl ResponseHead {
    /// The first header named `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        super::find_header(&self.headers, name)
    }

    /// How the body that follows is delimited (RFC 9112 §6.3): none after a 1xx, 204 or
    /// 304; chunked when the last transfer coding says so; else `Content-Length`, and else
    /// the close of the connection. Conflicting lengths are an error, as a client must
    /// take them.
    pub(crate) fn framing(&self) -> io::Result<AnswerFraming> {
        if self.status < 200 || self.status == 204 || self.status == 304 {
            return Ok(AnswerFraming::Length(0));
        }
        if let Some(te) = self.header("transfer-encoding") {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            return Ok(if crate::ascii::eq_ignore_ascii_case(last, "chunked") {
                AnswerFraming::Chunked
            } else {
                AnswerFraming::Close
            });
        }
        let mut lengths = self
            .headers
            .iter()
            .filter(|(n, _)| crate::ascii::eq_ignore_ascii_case(n, "content-length"))
            .map(|(_, v)| {
                // Digits only (RFC 9110 §8.6): `parse` would take a sign as well.
                let v = v.trim();
                (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| v.parse::<u64>().ok())
                    .flatten()
            });
        match lengths.next() {
            None => Ok(AnswerFraming::Close),
            Some(Some(n)) if lengths.all(|m| m == Some(n)) => Ok(AnswerFraming::Length(n)),
            Some(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the answer's Content-Length is malformed",
            )),
        }
    }
}

/// Reads the final response head from `input` (interim 1xx answers, 100 or 103, are
/// passed over, as every client must; a 101 is final), each at most [`MAX_RESPONSE_HEAD`]
/// bytes and [`MAX_HEADERS`](super::MAX_HEADERS) headers, leaving what follows it unread
/// in `input`. The caller's deadline bounds a server that sends interim answers without
/// end.
pub(crate) fn read_response_head(input: &mut dyn BufRead) -> io::Result<ResponseHead> {
    loop {
        let head = read_one_head(input)?;
        if !(100..200).contains(&head.status) || head.status == 101 {
            return Ok(head);
        }
    }
}

/// One response head, interim or final. A head that came whole in one read (nearly always)
/// is parsed where it lies in `input`'s buffer; else it is gathered first.
fn read_one_head(input: &mut dyn BufRead) -> io::Result<ResponseHead> {
    let too_large = || malformed("the response head is too large");
    let mut head = Vec::new();
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before a whole response head",
            ));
        }
        if head.is_empty()
            && let Some(end) = head_end(available, 0)
        {
            if end > MAX_RESPONSE_HEAD {
                return Err(too_large());
            }
            let parsed = parse_head(&available[..end]);
            input.consume(end);
            return parsed;
        }
        // Up to the blank line, which may span two reads: what follows stays in `input`.
        let before = head.len();
        let take = available.len().min(MAX_RESPONSE_HEAD + 1 - before);
        head.extend_from_slice(&available[..take]);
        match head_end(&head, before.saturating_sub(3)) {
            Some(end) => {
                input.consume(end - before);
                if end > MAX_RESPONSE_HEAD {
                    return Err(too_large());
                }
                head.truncate(end);
                return parse_head(&head);
            }
            None => {
                input.consume(take);
                if head.len() > MAX_RESPONSE_HEAD {
                    return Err(too_large());
                }
            }
        }
    }
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// The length of the head at the start of `buf` through its blank line (`\r\n\r\n`, or a
/// bare `\n\n`), looking for it from `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = memchr::memchr(b'\n', &buf[at..]) {
        let i = at + i;
        if buf.get(i + 1) == Some(&b'\n') {
            return Some(i + 2);
        }
        if i >= 1 && buf[i - 1] == b'\r' && buf.get(i + 1..i + 3) == Some(b"\r\n") {
            return Some(i + 3);
        }
        at = i + 1;
    }
    None
}

/// A whole response head (through its blank line) parsed.
fn parse_head(head: &[u8]) -> io::Result<ResponseHead> {
    // Left uninitialised: httparse writes the ones it fills (zeroing all of them was a
    // kilo-instruction per answer).
    let mut headers = [MaybeUninit::<httparse::Header<'_>>::uninit(); super::MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        head,
        &mut headers,
    );
    match parsed {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(malformed("a partial response head")),
        Err(e) => return Err(malformed(&format!("a malformed response head: {e}"))),
    }
    let status = response.code.ok_or_else(|| malformed("no status code"))?;
    let headers = response
        .headers
        .iter()
        .map(|h| (h.name.to_owned(), super::lossy_string(h.value)))
        .collect();
    Ok(ResponseHead { status, headers })
}

#[cfg(test)]
mod tests;
