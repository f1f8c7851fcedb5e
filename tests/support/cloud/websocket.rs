//! WebSocket (RFC 6455), the server side kubectl's exec and port-forward need: the
//! handshake with a subprotocol chosen from the client's offer, then whole binary messages
//! each way. Client frames are masked and may come in fragments; pings are answered; a close
//! is answered and ends the messages.
//!
//! It knows nothing of what the messages carry (see `remotecommand.rs`, `portforward.rs`).

use std::io::{self, Read, Write};

use super::super::util::base64_encode;
use super::http1::Request;

/// RFC 6455 §1.3: appended to the client's key before hashing.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest message accepted (kubectl sends at most 32 KiB of stdin per message).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

const BINARY: u8 = 2;
const CLOSE: u8 = 8;
const PING: u8 = 9;
const PONG: u8 = 10;

/// Whether `req` asks for a WebSocket (`Upgrade: websocket`).
pub(super) fn is_websocket(req: &Request) -> bool {
    req.header("Upgrade").eq_ignore_ascii_case("websocket")
}

/// Whether `req` asks for one of the two upgrades kubectl's streaming requests use:
/// WebSocket, or SPDY/3.1.
pub(super) fn is_streaming_upgrade(req: &Request) -> bool {
    is_websocket(req) || req.header("Upgrade").eq_ignore_ascii_case("SPDY/3.1")
}

/// Answers the handshake of `req`: a 101 naming the first protocol of the client's offer
/// (`Sec-WebSocket-Protocol`, as the apiserver picks) that `supported` lists, and the
/// WebSocket on `(r, w)`; or a 400 and `None` when there is no key or no such protocol.
pub(super) fn accept<'a>(
    req: &Request,
    supported: &[&str],
    r: &'a mut dyn Read,
    w: &'a mut dyn Write,
) -> io::Result<Option<WebSocket<'a>>> {
    let key = req.header("Sec-WebSocket-Key");
    let offered = offered(req, "Sec-WebSocket-Protocol");
    let Some(protocol) = offered.iter().find(|p| supported.contains(&p.as_str())) else {
        bad_request(w, "no WebSocket protocol the server supports")?;
        return Ok(None);
    };
    if key.is_empty() {
        bad_request(w, "missing Sec-WebSocket-Key")?;
        return Ok(None);
    }
    write!(
        w,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
        accept_key(key)
    )?;
    w.flush()?;
    Ok(Some(WebSocket {
        r,
        w,
        unread: Vec::new(),
        pos: 0,
        sent_close: false,
        got_close: false,
    }))
}

/// `Sec-WebSocket-Accept` for the client's `Sec-WebSocket-Key` (RFC 6455 §4.2.2).
fn accept_key(key: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{ACCEPT_GUID}").as_bytes(),
    );
    base64_encode(digest.as_ref())
}

/// The values of header `name` over all its lines, comma-separated lists split.
pub(super) fn offered(req: &Request, name: &str) -> Vec<String> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A 400 with a `Status` body, as the apiserver refuses an upgrade it cannot serve; it
/// closes the connection.
pub(super) fn bad_request(w: &mut dyn Write, why: &str) -> io::Result<()> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": why, "reason": "BadRequest", "code": 400,
    })
    .to_string();
    write!(
        w,
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

/// An open WebSocket, server side.
pub(super) struct WebSocket<'a> {
    r: &'a mut dyn Read,
    w: &'a mut dyn Write,
    /// The message [`Read`] is part-way through, and how far.
    unread: Vec<u8>,
    pos: usize,
    /// Our close is sent: the client's is its answer.
    sent_close: bool,
    /// The client's close came: nothing more to read.
    got_close: bool,
}

impl WebSocket<'_> {
    /// The next data message (fragments joined); `None` once the client closed, after the
    /// close is answered. Pings are answered on the way.
    pub fn receive(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut message = Vec::new();
        while !self.got_close {
            let mut head = [0u8; 2];
            match self.r.read_exact(&mut head) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.got_close = true;
                    return Ok(None);
                }
                r => r?,
            }
            let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
            let len = match head[1] & 0x7f {
                126 => u64::from(u16::from_be_bytes(self.read_array()?)),
                127 => u64::from_be_bytes(self.read_array()?),
                n => u64::from(n),
            };
            let mask: [u8; 4] = if head[1] & 0x80 != 0 {
                self.read_array()?
            } else {
                [0; 4]
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|&n| n <= MAX_MESSAGE - message.len())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "message too large"))?;
            let mut payload = vec![0u8; len];
            self.r.read_exact(&mut payload)?;
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
            match opcode {
                PING => self.frame(PONG, &payload)?,
                PONG => {}
                CLOSE => {
                    // Answer with the client's code (RFC 6455 §5.5.1), unless this
                    // is the answer to ours.
                    self.got_close = true;
                    if !self.sent_close {
                        let code = payload.get(..2).unwrap_or(&[0x03, 0xe8]).to_vec();
                        let _ = self.frame(CLOSE, &code);
                    }
                }
                _ => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return Ok(Some(message));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Sends `data` as one binary message.
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.frame(BINARY, data)
    }

    /// Sends a normal close (1000), unless the client closed first, and reads on to the
    /// client's answer, so the socket is not closed under data the client has yet to read.
    pub fn close(&mut self) -> io::Result<()> {
        if self.got_close {
            return Ok(());
        }
        self.frame(CLOSE, &1000u16.to_be_bytes())?;
        self.sent_close = true;
        while self.receive()?.is_some() {}
        Ok(())
    }

    fn read_array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut a = [0u8; N];
        self.r.read_exact(&mut a)?;
        Ok(a)
    }

    /// One unmasked, final frame (servers never mask, RFC 6455 §5.1).
    fn frame(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let mut head = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => head.push(n as u8),
            n if n <= usize::from(u16::MAX) => {
                head.push(126);
                head.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                head.push(127);
                head.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        head.extend_from_slice(payload);
        self.w.write_all(&head)?;
        self.w.flush()
    }
}

/// The data messages as one byte stream (for SPDY tunnelled in WebSocket, as kubectl's
/// port-forward does since 1.31); end of stream when the client closes.
impl Read for WebSocket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.unread.len() {
            match self.receive()? {
                Some(m) => (self.unread, self.pos) = (m, 0),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.unread.len() - self.pos);
        buf[..n].copy_from_slice(&self.unread[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Each write is one binary message.
impl Write for WebSocket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
