//! A minimal HTTP/1.1 server for the cloud's internal loopback side (behind the TLS front):
//! one thread per connection, requests read one after another (keep-alive), bodies with
//! Content-Length or chunked, `Expect: 100-continue` answered.
//!
//! Why not tiny_http 0.12: its connection task pool can lose a wake-up when connections
//! arrive together (`TaskPool::spawn` counts a woken worker as still waiting, so the next
//! task is queued with a `notify_one` nobody receives); that connection's requests then
//! wait until another connection closes. kubectl's parallel discovery hit this about one
//! run in ten (a 32 s timeout). Responses are written by the caller on the raw stream.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

/// Longest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One parsed request.
pub struct Request {
    /// Method, upper case.
    pub method: String,
    /// Request target (path and query).
    pub url: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The whole body (empty when none).
    pub body: Vec<u8>,
    /// The peer (the front's end of the internal connection).
    pub remote: SocketAddr,
    /// HTTP/1.0 (no keep-alive unless asked).
    pub http10: bool,
}

impl Request {
    /// A header's value ("" when absent); names compare case-insensitively.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// Whether the connection may carry another request after this one.
    pub fn keep_alive(&self) -> bool {
        let c = self.header("Connection").to_ascii_lowercase();
        if self.http10 {
            c.contains("keep-alive")
        } else {
            !c.contains("close")
        }
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn read_line(r: &mut BufReader<TcpStream>, budget: &mut usize) -> io::Result<String> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(*budget as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n > *budget {
        return Err(bad("request head too large"));
    }
    *budget -= n;
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| bad("request head is not UTF-8"))
}

/// Reads the next request; `Ok(None)` when the peer closed between requests.
pub fn read_request(
    r: &mut BufReader<TcpStream>,
    w: &mut TcpStream,
    remote: SocketAddr,
) -> io::Result<Option<Request>> {
    let mut budget = MAX_HEAD;
    let mut first = read_line(r, &mut budget)?;
    // Tolerate blank lines between requests (RFC 9112 §2.2).
    while first.is_empty() {
        if r.fill_buf()?.is_empty() {
            return Ok(None);
        }
        first = read_line(r, &mut budget)?;
    }
    let mut parts = first.split(' ');
    let (Some(method), Some(url), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("malformed request line"));
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(bad("unsupported HTTP version")),
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(r, &mut budget)?;
        if line.is_empty() {
            break;
        }
        let (n, v) = line
            .split_once(':')
            .ok_or_else(|| bad("malformed header"))?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let mut req = Request {
        method: method.to_ascii_uppercase(),
        url: url.to_string(),
        headers,
        body: Vec::new(),
        remote,
        http10,
    };
    let chunked = req
        .header("Transfer-Encoding")
        .to_ascii_lowercase()
        .contains("chunked");
    let length = req.header("Content-Length");
    if (chunked || !length.is_empty()) && req.header("Expect").eq_ignore_ascii_case("100-continue")
    {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    if chunked {
        loop {
            let mut budget = 1024;
            let size_line = read_line(r, &mut budget)?;
            let size_hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the blank line.
                let mut budget = MAX_HEAD;
                while !read_line(r, &mut budget)?.is_empty() {}
                break;
            }
            if req.body.len() + size > MAX_BODY {
                return Err(bad("request body too large"));
            }
            let start = req.body.len();
            req.body.resize(start + size, 0);
            r.read_exact(&mut req.body[start..])?;
            let mut budget = 2;
            read_line(r, &mut budget)?;
        }
    } else if !length.is_empty() {
        let n: usize = length.parse().map_err(|_| bad("bad Content-Length"))?;
        if n > MAX_BODY {
            return Err(bad("request body too large"));
        }
        req.body.resize(n, 0);
        r.read_exact(&mut req.body)?;
    }
    Ok(Some(req))
}
