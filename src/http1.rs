//! HTTP/1.1 request framing, as a proxy needs it: read a request head within limits, know
//! how its body is delimited, and decode a chunked body. It reads from any `BufRead` and
//! knows nothing about sockets, threads or what the request asks for.
//!
//! Limits exist because the head comes from a client: a request target longer than
//! [`MAX_TARGET`] is refused with 414, headers larger than [`MAX_HEAD`] in all or more than
//! [`MAX_HEADERS`] of them with 431, instead of growing memory.

use std::fmt;
use std::io::{self, BufRead};

/// Longest request target (path and query). Kubernetes URLs are short; the longest real
/// ones carry a label selector, and 8 KiB is what common proxies allow.
pub const MAX_TARGET: usize = 8 * 1024;
/// Largest request head (request line and headers).
pub const MAX_HEAD: usize = 64 * 1024;
/// Longest request line: the target plus room for a method and the version.
const MAX_REQUEST_LINE: usize = MAX_TARGET + 64;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 128;
/// Longest chunk-size line of a chunked body (with extensions).
const MAX_CHUNK_LINE: usize = 1024;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
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
pub enum Framing {
    /// No body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a head is refused; each maps to a status code.
#[derive(Debug)]
pub enum HeadError {
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
    /// Not HTTP/1.0 or 1.1 (505).
    Version,
}

impl HeadError {
    /// The status to answer with, if any.
    pub fn status(&self) -> Option<u16> {
        match self {
            HeadError::Closed => None,
            HeadError::Io(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Some(408)
            }
            HeadError::Io(_) => None,
            HeadError::UriTooLong => Some(414),
            HeadError::TooLarge(_) => Some(431),
            HeadError::Malformed(_) => Some(400),
            HeadError::Version => Some(505),
        }
    }
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::Closed => f.write_str("connection closed"),
            HeadError::Io(e) => write!(f, "reading the request: {e}"),
            HeadError::UriTooLong => f.write_str("request line too long"),
            HeadError::TooLarge(what) => write!(f, "request {what} too large"),
            HeadError::Malformed(what) => write!(f, "malformed request: {what}"),
            HeadError::Version => f.write_str("unsupported HTTP version"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Reads one request head. Empty lines before the request line are skipped (RFC 9112 §2.2).
pub fn read_head(input: &mut dyn BufRead) -> Result<RequestHead, HeadError> {
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
    let request_line = std::str::from_utf8(trim_crlf(&line))
        .map_err(|_| HeadError::Malformed("request line is not UTF-8"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("request line"));
    };
    if target.len() > MAX_TARGET {
        return Err(HeadError::UriTooLong);
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-') {
        return Err(HeadError::Malformed("method"));
    }
    // Origin form only (`/path?query`): the hub appends the target to a backend's URL, so
    // anything else (`@host/...`, `http://other/...`, `*`) could aim it elsewhere.
    if !target.starts_with('/')
        || target
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80)
    {
        return Err(HeadError::Malformed("request target"));
    }
    let minor_version = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        v if v.starts_with("HTTP/") => return Err(HeadError::Version),
        _ => return Err(HeadError::Malformed("version")),
    };
    // Owned now: `line` is reused for the headers.
    let (method, target) = (method.to_owned(), target.to_owned());

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
        let colon = text
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::Malformed("header without ':'"))?;
        let name = &text[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_token_char(b)) {
            return Err(HeadError::Malformed("header name"));
        }
        let value = trim_ows(&text[colon + 1..]);
        if value.iter().any(|&b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err(HeadError::Malformed("control character in a header value"));
        }
        // Names are tokens (ASCII); values may carry obs-text, read as Latin-1 would lose
        // nothing we use, so keep them lossless as UTF-8 where they are.
        headers.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    Ok(RequestHead {
        method,
        target,
        minor_version,
        headers,
    })
}

/// The first of `headers` named `name` (names compare case-insensitively).
pub fn find_header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// True when a header named `name` lists `token` among its comma-separated values.
pub fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

impl RequestHead {
    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        has_token(&self.headers, name, token)
    }

    /// How the body is delimited. Both `Transfer-Encoding` and `Content-Length`, a transfer
    /// coding other than chunked, or conflicting lengths are refused: they are how requests
    /// get smuggled past proxies.
    pub fn framing(&self) -> Result<Framing, HeadError> {
        let values = |name: &'static str| {
            self.headers
                .iter()
                .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
        };
        let mut te = values("transfer-encoding").peekable();
        let mut lengths = values("content-length");
        if te.peek().is_some() {
            if lengths.next().is_some() {
                return Err(HeadError::Malformed(
                    "both Transfer-Encoding and Content-Length",
                ));
            }
            // One coding in all the headers, and it is chunked.
            let mut codings = te.flat_map(|v| v.split(',')).map(str::trim);
            return match (codings.next(), codings.next()) {
                (Some(c), None) if c.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
                _ => Err(HeadError::Malformed("unsupported Transfer-Encoding")),
            };
        }
        let Some(first) = lengths.next() else {
            return Ok(Framing::None);
        };
        if lengths.any(|l| l != first)
            || first.is_empty()
            || !first.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(HeadError::Malformed("Content-Length"));
        }
        let n: u64 = first
            .parse()
            .map_err(|_| HeadError::Malformed("Content-Length"))?;
        Ok(if n == 0 {
            Framing::None
        } else {
            Framing::Length(n)
        })
    }

    /// True when the client keeps the connection open after this exchange.
    pub fn keep_alive(&self) -> bool {
        if self.has_token("connection", "close") {
            return false;
        }
        self.minor_version == 1 || self.has_token("connection", "keep-alive")
    }

    /// True when the client waits for `100 Continue` before sending its body.
    pub fn expects_continue(&self) -> bool {
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
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
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
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Where a request body reader stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyState {
    /// Nothing (more) to read.
    Done,
    /// This many bytes of a `Content-Length` body are left.
    Length(u64),
    /// Chunked: this many bytes are left in the current chunk (0: a size line is next).
    Chunk(u64),
}

impl BodyState {
    /// The state at the start of a body with `framing`.
    pub fn new(framing: Framing) -> BodyState {
        match framing {
            Framing::None => BodyState::Done,
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunk(0),
        }
    }

    /// Reads body bytes from `input` into `out`; 0 at the end of the body.
    pub fn read(&mut self, input: &mut dyn BufRead, out: &mut [u8]) -> io::Result<usize> {
        self.read_limited(input, out, u64::MAX)
    }

    /// [`BodyState::read`], refusing a chunk that announces more than `limit` bytes as soon
    /// as its size line is read ([`io::ErrorKind::FileTooLarge`]), not once its data came.
    pub fn read_limited(
        &mut self,
        input: &mut dyn BufRead,
        out: &mut [u8],
        limit: u64,
    ) -> io::Result<usize> {
        loop {
            match *self {
                BodyState::Done => return Ok(0),
                BodyState::Length(left) => {
                    let n = read_within(input, out, left, "the body ended early")?;
                    let left = left - n as u64;
                    *self = if left == 0 {
                        BodyState::Done
                    } else {
                        BodyState::Length(left)
                    };
                    return Ok(n);
                }
                BodyState::Chunk(0) => {
                    let size = read_chunk_size(input)?;
                    if size == 0 {
                        skip_trailers(input)?;
                        *self = BodyState::Done;
                        return Ok(0);
                    }
                    if size > limit {
                        return Err(io::Error::new(
                            io::ErrorKind::FileTooLarge,
                            "a chunk is larger than the body's limit",
                        ));
                    }
                    *self = BodyState::Chunk(size);
                }
                BodyState::Chunk(left) => {
                    let n = read_within(input, out, left, "the body ended inside a chunk")?;
                    let left = left - n as u64;
                    if left == 0 {
                        expect_crlf(input)?;
                    }
                    *self = BodyState::Chunk(left);
                    if n > 0 {
                        return Ok(n);
                    }
                }
            }
        }
    }
}

/// Reads at most `left` body bytes into `out`; input ending first is an error saying `early`.
fn read_within(
    input: &mut dyn BufRead,
    out: &mut [u8],
    left: u64,
    early: &'static str,
) -> io::Result<usize> {
    let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
    let n = input.read(&mut out[..want])?;
    if n == 0 && want > 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, early));
    }
    Ok(n)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad chunked body: {what}"),
    )
}

/// A line of chunked framing read with `read_line`, ending in CRLF as RFC 9112 §7.1 writes
/// it: a bare LF is refused, since a peer that reads the framing otherwise is how bodies
/// get smuggled. Input ending first is an error saying `early`; reading failing (a timeout)
/// stays that error.
fn framing_line(
    input: &mut dyn BufRead,
    line: &mut Vec<u8>,
    limit: usize,
    early: &'static str,
    what: &str,
) -> io::Result<()> {
    read_line(input, line, limit).map_err(|e| match e {
        LineError::Eof => io::Error::new(io::ErrorKind::UnexpectedEof, early),
        LineError::TooLong => bad(what),
        LineError::Io(e) => e,
    })?;
    if line.ends_with(b"\r\n") {
        Ok(())
    } else {
        Err(bad(what))
    }
}

fn read_chunk_size(input: &mut dyn BufRead) -> io::Result<u64> {
    let mut line = Vec::new();
    framing_line(
        input,
        &mut line,
        MAX_CHUNK_LINE,
        "the body ended before a chunk size",
        "chunk size line",
    )?;
    let text = trim_crlf(&line);
    let size = text
        .split(|&b| b == b';')
        .next()
        .map(trim_ows)
        .unwrap_or(b"");
    if size.is_empty() || !size.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad("chunk size"));
    }
    // Leading zeros say nothing; past them, at most 15 hex digits fit in u64 with room to
    // add (a larger size is past any body limit anyway).
    let digits = match size.iter().position(|&b| b != b'0') {
        Some(first) => &size[first..],
        None => return Ok(0),
    };
    if digits.len() > 15 {
        return Err(bad("chunk size too large"));
    }
    // Hex digits only: ASCII.
    let text = std::str::from_utf8(digits).map_err(|_| bad("chunk size"))?;
    u64::from_str_radix(text, 16).map_err(|_| bad("chunk size"))
}

fn expect_crlf(input: &mut dyn BufRead) -> io::Result<()> {
    let mut line = Vec::new();
    framing_line(
        input,
        &mut line,
        2,
        "the body ended inside a chunk",
        "missing CRLF after a chunk",
    )
}

fn skip_trailers(input: &mut dyn BufRead) -> io::Result<()> {
    let mut budget = MAX_HEAD;
    let mut line = Vec::new();
    for _ in 0..=MAX_HEADERS {
        line.clear();
        framing_line(
            input,
            &mut line,
            budget,
            "the body ended inside its trailers",
            "trailer",
        )?;
        if line.len() == 2 {
            return Ok(());
        }
        budget -= line.len();
    }
    Err(bad("too many trailers"))
}

/// Reads a whole body with `state` (tests and small bodies).
pub fn read_body(
    state: &mut BodyState,
    input: &mut dyn BufRead,
    limit: usize,
) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = state.read(input, &mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > limit {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn head(text: &str) -> Result<RequestHead, HeadError> {
        read_head(&mut text.as_bytes())
    }

    #[test]
    fn a_kubelet_request() {
        let h = head("GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1:10261\r\nUser-Agent: kubelet/v1.30\r\nAccept: application/json\r\n\r\n").unwrap();
        assert_eq!(
            (h.method.as_str(), h.target.as_str(), h.minor_version),
            ("GET", "/api/v1/pods?watch=1", 1)
        );
        assert_eq!(h.header("user-agent"), Some("kubelet/v1.30"));
        assert_eq!(h.framing().unwrap(), Framing::None);
        assert!(h.keep_alive());
    }

    #[test]
    fn connection_semantics() {
        assert!(
            !head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .keep_alive()
        );
        assert!(!head("GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive());
        assert!(
            head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .keep_alive()
        );
        assert!(
            head("PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
                .unwrap()
                .expects_continue()
        );
        assert!(
            head("\r\nGET / HTTP/1.1\r\n\r\n").is_ok(),
            "leading empty line skipped"
        );
    }

    #[test]
    fn framing_refuses_smuggling() {
        let f = |h: &str| head(h).unwrap().framing();
        assert_eq!(
            f("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n").unwrap(),
            Framing::Length(5)
        );
        assert_eq!(
            f("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n").unwrap(),
            Framing::Length(5)
        );
        assert_eq!(
            f("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap(),
            Framing::Chunked
        );
        for bad in [
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ] {
            assert!(f(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_heads_map_to_statuses() {
        let status = |h: &str| head(h).unwrap_err().status();
        assert_eq!(status("GET /\r\n\r\n"), Some(400));
        assert_eq!(status("GET / HTTP/2.0\r\n\r\n"), Some(505));
        assert_eq!(status("get / HTTP/1.1\r\n\r\n"), Some(400));
        for target in [
            "@127.0.0.1:1/steal",
            "http://evil/x",
            "*",
            ".evil.com/x",
            "x",
        ] {
            assert_eq!(
                status(&format!("GET {target} HTTP/1.1\r\n\r\n")),
                Some(400),
                "{target}"
            );
        }
        assert_eq!(status("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"), Some(400));
        assert_eq!(
            status("GET / HTTP/1.1\r\nX: a\r\n  folded\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status("GET / HTTP/1.1\r\nX: a\u{1}b\r\n\r\n"), Some(400));
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: x\r\n"),
            Some(400),
            "closed inside the head"
        );
        assert!(matches!(head(""), Err(HeadError::Closed)));
        let target = |len: usize| format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(len - 1));
        assert!(head(&target(MAX_TARGET)).is_ok(), "8 KiB is allowed");
        assert_eq!(status(&target(MAX_TARGET + 1)), Some(414));
        assert_eq!(status(&target(1 << 20)), Some(414));
        let blank = "\r\n".repeat(MAX_HEAD);
        assert_eq!(status(&format!("{blank}GET / HTTP/1.1\r\n\r\n")), Some(431));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(431));
        // 64 KiB of headers in all, in one header or spread over several.
        let headers = |count: usize, each: usize| -> String {
            (0..count)
                .map(|i| format!("X-{i:02}: {}\r\n", "v".repeat(each)))
                .collect()
        };
        let fits = headers(4, MAX_HEAD / 4 - 200);
        assert!(head(&format!("GET / HTTP/1.1\r\n{fits}\r\n")).is_ok());
        for big in [headers(1, MAX_HEAD), headers(8, MAX_HEAD / 8)] {
            assert_eq!(status(&format!("GET / HTTP/1.1\r\n{big}\r\n")), Some(431));
        }
    }

    #[test]
    fn chunked_bodies_decode_across_any_split() {
        let wire = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for chunk in 1..wire.len() {
            // A reader that hands out `chunk` bytes at a time.
            let mut input = io::BufReader::with_capacity(chunk, &wire[..]);
            let mut state = BodyState::new(Framing::Chunked);
            let body = read_body(&mut state, &mut input, 1024).unwrap();
            assert_eq!(body, b"hello world", "split {chunk}");
            let mut rest = String::new();
            input.read_to_string(&mut rest).unwrap();
            assert_eq!(
                rest, "NEXT",
                "the next request is left intact (split {chunk})"
            );
        }
    }

    #[test]
    fn broken_bodies_are_errors() {
        for wire in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhel",
            b"5\r\nhelloXX0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
        ] {
            let mut state = BodyState::new(Framing::Chunked);
            assert!(
                read_body(&mut state, &mut &wire[..], 1 << 20).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let mut state = BodyState::new(Framing::Length(10));
        assert!(read_body(&mut state, &mut &b"short"[..], 1 << 20).is_err());
    }

    #[test]
    fn a_chunk_past_the_limit_is_refused_at_its_size_line() {
        // 17 bytes announced, none sent yet: refused without waiting for them.
        let mut input: &[u8] = b"11\r\n";
        let mut state = BodyState::new(Framing::Chunked);
        let e = state
            .read_limited(&mut input, &mut [0u8; 64], 16)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let mut input: &[u8] = b"10\r\n0123456789abcdef\r\n0\r\n\r\n";
        let mut state = BodyState::new(Framing::Chunked);
        let mut out = [0u8; 64];
        assert_eq!(state.read_limited(&mut input, &mut out, 16).unwrap(), 16);
        assert_eq!(state.read_limited(&mut input, &mut out, 0).unwrap(), 0);
    }

    #[test]
    fn chunked_framing_is_read_strictly() {
        let read = |wire: &[u8]| {
            let mut state = BodyState::new(Framing::Chunked);
            read_body(&mut state, &mut &wire[..], 1 << 20)
        };
        // Malformed framing is InvalidData; a body cut short is UnexpectedEof.
        for (wire, kind) in [
            (
                &b"0x5\r\nhello\r\n0\r\n\r\n"[..],
                io::ErrorKind::InvalidData,
            ),
            (b"\r\nhello\r\n0\r\n\r\n", io::ErrorKind::InvalidData),
            (
                b"10000000000000000\r\nx\r\n0\r\n\r\n",
                io::ErrorKind::InvalidData,
            ),
            (b"5\nhello\r\n0\r\n\r\n", io::ErrorKind::InvalidData),
            (b"5\r\nhello\n0\r\n\r\n", io::ErrorKind::InvalidData),
            (b"5\r\nhello\r\n0\r\n\n", io::ErrorKind::InvalidData),
            (b"5\r\nhello\r\n0\r\nX: 1\n\r\n", io::ErrorKind::InvalidData),
            (b"3\r\nhello\r\n0\r\n\r\n", io::ErrorKind::InvalidData),
            (b"5\r\nhello\r\n", io::ErrorKind::UnexpectedEof),
            (b"5\r\nhello\r\n0\r\n", io::ErrorKind::UnexpectedEof),
            (b"5\r\nhello", io::ErrorKind::UnexpectedEof),
        ] {
            let e = read(wire).unwrap_err();
            assert_eq!(e.kind(), kind, "{:?}: {e}", String::from_utf8_lossy(wire));
        }
        // Leading zeros are only zeros.
        assert_eq!(
            read(b"000000000000000000005\r\nhello\r\n00\r\n\r\n").unwrap(),
            b"hello"
        );
    }

    #[test]
    fn a_timeout_inside_the_framing_stays_a_timeout() {
        /// Hands out `data`, then fails as a socket read past its timeout does.
        struct Stalls<'a>(&'a [u8]);
        impl Read for Stalls<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let n = self.0.len().min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        for wire in [
            &b"5"[..],
            b"5\r\nhello",
            b"5\r\nhello\r",
            b"5\r\nhello\r\n0\r\nX: 1",
        ] {
            let mut input = io::BufReader::with_capacity(4, Stalls(wire));
            let mut state = BodyState::new(Framing::Chunked);
            let e = read_body(&mut state, &mut input, 1024).unwrap_err();
            assert_eq!(
                e.kind(),
                io::ErrorKind::WouldBlock,
                "{:?}: {e}",
                String::from_utf8_lossy(wire)
            );
        }
    }
}
