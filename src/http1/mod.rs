//! HTTP/1.1 framing, as a proxy needs it: read a request head within limits, know how its
//! body is delimited, decode a chunked body (`body.rs`), and render response heads
//! (`response.rs`). It reads from any `BufRead`, writes into buffers, and knows nothing
//! about sockets, threads or what the request asks for. httparse parses the lines; the
//! hub's own rules stand on top of it.
//!
//! Limits exist because the head comes from a client: a request target longer than
//! [`MAX_TARGET`] is refused with 414, headers larger than [`MAX_HEAD`] in all or more than
//! [`MAX_HEADERS`] of them with 431, instead of growing memory.

use std::fmt;
mod body;
pub(crate) mod response;

use std::io::{self, BufRead};

pub(crate) use body::BodyState;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use body::read_body;

/// Longest request target (path and query). Kubernetes URLs are short; the longest real
/// ones carry a label selector, and 8 KiB is what common proxies allow.
pub(crate) const MAX_TARGET: usize = 8 * 1024;
/// Largest request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// What a `Transfer-Encoding` other than exactly `chunked` is refused as.
const TE_NOT_CHUNKED: &str = "a Transfer-Encoding other than chunked";
/// Longest request line: the target plus room for a method and the version.
const MAX_REQUEST_LINE: usize = MAX_TARGET + 64;
/// Most headers in one request.
pub(crate) const MAX_HEADERS: usize = 128;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// Method, as sent.
    pub method: String,
    /// Request target (path and query), as sent.
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
}

/// How a request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a head is refused; `Status::for_head` (status.rs) maps each to its answer.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The connection closed before a request began (not an error to answer).
    Closed,
    /// Reading failed or timed out.
    Io(io::Error),
    /// The request line is too long (414).
    UriTooLong,
    /// Headers too long or too many (431).
    TooLarge(&'static str),
    /// Not a valid request (400).
    Malformed(&'static str),
    /// A valid request the hub does not carry: a transfer coding other than chunked (501,
    /// as RFC 9112 §6.1 and nginx answer it).
    NotImplemented(&'static str),
    /// Not HTTP/1.0 or 1.1 (505).
    Version,
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::Closed => f.write_str("connection closed"),
            HeadError::Io(e) => write!(f, "reading the request: {e}"),
            HeadError::UriTooLong => f.write_str("request line too long"),
            HeadError::TooLarge(what) => write!(f, "request {what} too large"),
            HeadError::Malformed(what) => write!(f, "malformed request: {what}"),
            HeadError::NotImplemented(what) => write!(f, "not implemented: {what}"),
            HeadError::Version => f.write_str("unsupported HTTP version"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Reads one request head. Empty lines before the request line are skipped (RFC 9112 §2.2).
///
/// The head is read a line at a time, so the limits hold whatever the client sends (a
/// request line past [`MAX_TARGET`] is 414 before the headers are read; headers past
/// [`MAX_HEAD`] or [`MAX_HEADERS`] are 431), and each line is parsed by httparse as it
/// arrives, so the first bad line is answered at once. On top of httparse's grammar: only
/// origin-form targets of visible ASCII, methods in upper case, 505 for an HTTP version
/// other than 1.0 and 1.1, obsolete line folding refused, a tab in `Transfer-Encoding`
/// refused, and one `Host`, which HTTP/1.1 must send (RFC 9112 §3.2).
pub(crate) fn read_head(input: &mut dyn BufRead) -> Result<RequestHead, HeadError> {
    let mut budget = MAX_HEAD;
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let n = read_line(input, &mut line, MAX_REQUEST_LINE).map_err(|e| match e {
            LineError::Eof if line.is_empty() => HeadError::Closed,
            LineError::Eof => HeadError::Malformed("the connection closed inside the head"),
            LineError::TooLong => HeadError::UriTooLong,
            LineError::Io(e) => HeadError::Io(e),
        })?;
        // Blank lines before the request count against the head, so they cannot go on
        // for ever.
        budget = budget.checked_sub(n).ok_or(HeadError::TooLarge("head"))?;
        if !trim_crlf(&line).is_empty() {
            break;
        }
    }
    let (method, target, minor_version) = parse_request_line(&mut line)?;

    let mut headers = Vec::with_capacity(16);
    loop {
        line.clear();
        let n = read_line(input, &mut line, budget).map_err(|e| match e {
            LineError::Eof => HeadError::Malformed("the connection closed inside the head"),
            LineError::TooLong => HeadError::TooLarge("head"),
            LineError::Io(e) => HeadError::Io(e),
        })?;
        budget -= n;
        let text = trim_crlf(&line);
        if text.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return Err(HeadError::TooLarge("header count"));
        }
        // Obsolete line folding is refused, as RFC 9112 §5.2 allows.
        if text[0] == b' ' || text[0] == b'\t' {
            return Err(HeadError::Malformed("folded header"));
        }
        let tab = memchr::memchr(b'\t', text).is_some();
        let header = parse_header_line(&mut line)?;
        // httparse drops tabs around a value, as RFC 9110 allows; nginx takes them as part
        // of it and answers 501 (issue 28). A proxy that reads the framing otherwise than a
        // server beside it is how requests get smuggled, so the stricter reading wins.
        if tab && crate::ascii::eq_ignore_ascii_case(&header.0, "transfer-encoding") {
            return Err(HeadError::NotImplemented(TE_NOT_CHUNKED));
        }
        headers.push(header);
    }
    match headers
        .iter()
        .filter(|(n, _)| crate::ascii::eq_ignore_ascii_case(n, "host"))
        .count()
    {
        0 if minor_version == 1 => return Err(HeadError::Malformed("HTTP/1.1 without Host")),
        0 | 1 => {}
        _ => return Err(HeadError::Malformed("duplicate Host")),
    }
    Ok(RequestHead {
        method,
        target,
        minor_version,
        headers,
    })
}

/// The method, target and minor version of a request line (`line`, through its `\n`).
fn parse_request_line(line: &mut Vec<u8>) -> Result<(String, String, u8), HeadError> {
    let end = line.len();
    // An empty header section after it makes a whole head of the line alone.
    line.extend_from_slice(b"\r\n");
    let mut no_headers = [];
    let mut request = httparse::Request::new(&mut no_headers);
    let parsed = request.parse(line);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target), Some(version)) =
        (parsed, request.method, request.path, request.version)
    else {
        return Err(request_line_refusal(&line[..end]));
    };
    if target.len() > MAX_TARGET {
        return Err(HeadError::UriTooLong);
    }
    if !is_method(method) {
        return Err(HeadError::Malformed("method"));
    }
    if !is_origin_target(target) {
        return Err(HeadError::Malformed("request target"));
    }
    Ok((method.to_owned(), target.to_owned(), version))
}

/// Why httparse refused a request line, told apart as the hub always has: 414 for a target
/// past [`MAX_TARGET`] before anything else is looked at, 505 for an HTTP version other
/// than 1.0 and 1.1, and 400 naming the part at fault.
fn request_line_refusal(line: &[u8]) -> HeadError {
    let Ok(text) = std::str::from_utf8(trim_crlf(line)) else {
        return HeadError::Malformed("request line is not UTF-8");
    };
    let mut parts = text.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return HeadError::Malformed("request line");
    };
    if target.len() > MAX_TARGET {
        HeadError::UriTooLong
    } else if !is_method(method) {
        HeadError::Malformed("method")
    } else if !is_origin_target(target) {
        HeadError::Malformed("request target")
    } else if version == "HTTP/1.1" || version == "HTTP/1.0" {
        HeadError::Malformed("request line")
    } else if version.starts_with("HTTP/") {
        HeadError::Version
    } else {
        HeadError::Malformed("version")
    }
}

/// Methods as Kubernetes clients send them: upper-case letters and `-`.
fn is_method(method: &str) -> bool {
    !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-')
}

/// Origin form only (`/path?query`) in visible ASCII: the hub appends the target to a
/// backend's URL, so anything else (`@host/...`, `http://other/...`, `*`) could aim it
/// elsewhere.
fn is_origin_target(target: &str) -> bool {
    target.starts_with('/')
        && !target
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80)
}

/// One header line (`line`, through its `\n`, not folded) as (name, value), the value
/// without surrounding whitespace.
fn parse_header_line(line: &mut Vec<u8>) -> Result<(String, String), HeadError> {
    // An empty line after it ends the header section: httparse sees a whole one.
    line.extend_from_slice(b"\r\n");
    let mut one = [httparse::EMPTY_HEADER; 1];
    match httparse::parse_headers(line, &mut one) {
        Ok(httparse::Status::Complete((_, [header]))) => Ok((
            header.name.to_owned(),
            // Values may carry obs-text; kept as UTF-8 where they are, lossily elsewhere.
            lossy_string(header.value),
        )),
        Err(httparse::Error::HeaderValue) => {
            Err(HeadError::Malformed("control character in a header value"))
        }
        _ if !line.contains(&b':') => Err(HeadError::Malformed("header without ':'")),
        _ => Err(HeadError::Malformed("header name")),
    }
}

/// The first of `headers` named `name` (names compare case-insensitively).
pub(crate) fn find_header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        // The length first, inline: most names are ruled out without a call.
        .find(|(n, _)| n.len() == name.len() && crate::ascii::eq_ignore_ascii_case(n, name))
        .map(|(_, v)| v.as_str())
}

/// True when a header named `name` lists `token` among its comma-separated values.
pub(crate) fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|(n, _)| crate::ascii::eq_ignore_ascii_case(n, name))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| crate::ascii::eq_ignore_ascii_case(t.trim(), token))
}

impl RequestHead {
    /// The first header named `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        has_token(&self.headers, name, token)
    }

    /// How the body is delimited. Both `Transfer-Encoding` and `Content-Length`, either of
    /// them twice (even with the same value), `Transfer-Encoding` in HTTP/1.0 (which has no
    /// chunked coding) are 400, a transfer coding other than chunked 501: they are how
    /// requests get smuggled past proxies, and nginx refuses each alike (issue 28).
    pub(crate) fn framing(&self) -> Result<Framing, HeadError> {
        let values = |name: &'static str| {
            self.headers
                .iter()
                .filter(move |(n, _)| crate::ascii::eq_ignore_ascii_case(n, name))
                .map(|(_, v)| v.trim())
        };
        let mut te = values("transfer-encoding");
        let mut lengths = values("content-length");
        let length = match (te.next(), lengths.next()) {
            (None, None) => return Ok(Framing::None),
            (Some(_), Some(_)) => {
                return Err(HeadError::Malformed(
                    "both Transfer-Encoding and Content-Length",
                ));
            }
            (Some(_), None) if self.minor_version == 0 => {
                return Err(HeadError::Malformed("Transfer-Encoding in HTTP/1.0"));
            }
            (Some(_), None) if te.next().is_some() => {
                return Err(HeadError::Malformed("duplicate Transfer-Encoding"));
            }
            (Some(coding), None) if crate::ascii::eq_ignore_ascii_case(coding, "chunked") => {
                return Ok(Framing::Chunked);
            }
            (Some(_), None) => return Err(HeadError::NotImplemented(TE_NOT_CHUNKED)),
            (None, Some(_)) if lengths.next().is_some() => {
                return Err(HeadError::Malformed("duplicate Content-Length"));
            }
            (None, Some(length)) => length,
        };
        if length.is_empty() || !length.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HeadError::Malformed("Content-Length"));
        }
        let n: u64 = length
            .parse()
            .map_err(|_| HeadError::Malformed("Content-Length"))?;
        Ok(if n == 0 {
            Framing::None
        } else {
            Framing::Length(n)
        })
    }

    /// True when the client keeps the connection open after this exchange.
    pub(crate) fn keep_alive(&self) -> bool {
        if self.has_token("connection", "close") {
            return false;
        }
        self.minor_version == 1 || self.has_token("connection", "keep-alive")
    }

    /// True when the client waits for `100 Continue` before sending its body.
    pub(crate) fn expects_continue(&self) -> bool {
        self.has_token("expect", "100-continue")
    }
}

enum LineError {
    Eof,
    TooLong,
    Io(io::Error),
}

/// Appends one line (through `\n`) to `out`; returns the bytes consumed.
fn read_line(input: &mut dyn BufRead, out: &mut Vec<u8>, limit: usize) -> Result<usize, LineError> {
    let mut total = 0;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if available.is_empty() {
            return Err(LineError::Eof);
        }
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if total + take > limit {
            return Err(LineError::TooLong);
        }
        out.extend_from_slice(&available[..take]);
        input.consume(take);
        total += take;
        if done {
            return Ok(total);
        }
    }
}

fn trim_crlf(line: &[u8]) -> &[u8] {
    // Compared a byte at a time: `strip_suffix` is a call to memcmp per suffix.
    let line = match line {
        [rest @ .., b'\n'] => rest,
        _ => line,
    };
    match line {
        [rest @ .., b'\r'] => rest,
        _ => line,
    }
}

/// `bytes` as a String: a copy when they are UTF-8 (checked a word at a time), else lossily
/// (`from_utf8_lossy` walks them a byte at a time even when they are ASCII).
pub(crate) fn lossy_string(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests;
