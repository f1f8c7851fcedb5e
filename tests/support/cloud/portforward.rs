//! Port-forward as the stand-in answers it: a minimal SPDY/3.1 server (the frames kubectl's
//! spdystream client sends) that echoes every stream's data back on the same stream. It runs
//! on a plain `Upgrade: SPDY/3.1` connection or inside a WebSocket with the subprotocol
//! `SPDY/3.1+portforward.k8s.io` (kubectl ≥ 1.31), whose binary messages carry the SPDY
//! bytes as one stream.
//!
//! kubectl opens two streams per local connection, an error stream it half-closes at once
//! and a data stream: echoing both (data and FIN) by stream id gives it an empty error stream
//! (no error) and its own bytes back, without reading the stream headers. Those are
//! zlib-compressed with a shared state over the connection, so they are skipped, never
//! decoded. The SYN_REPLY header blocks sent are zlib too, as stored blocks (no compression,
//! so no need of SPDY's dictionary: Go's `zlib.NewReaderDict` takes a stream without the
//! FDICT flag, and stored blocks never refer to the dictionary), each block followed by an
//! empty one as a sync flush does, or Go's inflater holds the bytes back.

use std::io::{self, Read, Write};

use super::http1::Request;
use super::websocket;

/// The WebSocket subprotocol of SPDY tunnelled in WebSocket.
const TUNNELED: &str = "SPDY/3.1+portforward.k8s.io";
/// The port-forward protocol kubectl names in `X-Stream-Protocol-Version`.
const PORTFORWARD_V1: &str = "portforward.k8s.io";
/// Largest frame payload accepted (SPDY lengths are 24 bits).
const MAX_FRAME: usize = 1 << 24;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 1;

/// Serves `req` when it asks to port-forward (a `…/portforward` path, a WebSocket or SPDY
/// upgrade) and returns true; false (nothing written) for any other request.
pub(super) fn serve(req: &Request, r: &mut dyn Read, w: &mut dyn Write) -> io::Result<bool> {
    let path = req.url.split('?').next().unwrap_or("");
    if !path.ends_with("/portforward") || !websocket::is_streaming_upgrade(req) {
        return Ok(false);
    }
    if websocket::is_websocket(req) {
        if let Some(mut ws) = websocket::accept(req, &[TUNNELED], r, w)? {
            echo(&mut ws)?;
            ws.close()?;
        }
    } else if switch_to_spdy(req, &[PORTFORWARD_V1], w)? {
        echo(&mut Plain { r, w })?;
    }
    Ok(true)
}

/// Answers a plain SPDY upgrade: a 101 naming the first `X-Stream-Protocol-Version` the
/// client offers that `supported` lists (true), or a 400 (false).
pub(super) fn switch_to_spdy(
    req: &Request,
    supported: &[&str],
    w: &mut dyn Write,
) -> io::Result<bool> {
    let offered = websocket::offered(req, "X-Stream-Protocol-Version");
    let chosen = offered.iter().find(|p| supported.contains(&p.as_str()));
    match chosen {
        Some(p) => {
            write!(
                w,
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
                 X-Stream-Protocol-Version: {p}\r\n\r\n"
            )?;
            w.flush()?;
            Ok(true)
        }
        None => {
            websocket::bad_request(w, "no stream protocol the server supports")?;
            Ok(false)
        }
    }
}

/// Echoes every stream until the client goes away.
fn echo(conn: &mut dyn Conn) -> io::Result<()> {
    let mut spdy = Spdy::default();
    while let Some(frame) = read_frame(conn)? {
        match frame {
            Frame::Syn { stream, fin } => spdy.reply(conn, stream, fin)?,
            Frame::Data { stream, fin, data } => spdy.data(conn, stream, &data, fin)?,
            Frame::Ping(id) => spdy.ping(conn, id)?,
            Frame::GoAway => break,
            Frame::Other => {}
        }
    }
    Ok(())
}

/// A byte stream SPDY runs on.
pub(super) trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

/// SPDY on the upgraded connection itself.
pub(super) struct Plain<'a> {
    pub r: &'a mut dyn Read,
    pub w: &'a mut dyn Write,
}

impl Read for Plain<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.r.read(buf)
    }
}

impl Write for Plain<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.w.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// The frames the stand-in tells apart.
pub(super) enum Frame {
    /// SYN_STREAM: a stream the client opens (its header block skipped).
    Syn { stream: u32, fin: bool },
    /// A data frame (FIN: the client sends no more on the stream).
    Data {
        stream: u32,
        fin: bool,
        data: Vec<u8>,
    },
    /// PING with its id.
    Ping(u32),
    /// GOAWAY: the client is done.
    GoAway,
    /// Anything else (RST_STREAM, SETTINGS, WINDOW_UPDATE, HEADERS): ignored.
    Other,
}

/// The next frame; `None` when the connection ends between frames.
pub(super) fn read_frame(r: &mut dyn Conn) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        res => res?,
    }
    let word = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let (first, flags, len) = (word(0), head[4], (word(4) & 0x00ff_ffff) as usize);
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SPDY frame too large",
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    let fin = flags & FLAG_FIN != 0;
    if first & 0x8000_0000 == 0 {
        return Ok(Some(Frame::Data {
            stream: first,
            fin,
            data: payload,
        }));
    }
    let id = || {
        payload
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "short SPDY control frame"))
    };
    Ok(Some(match (first & 0xffff) as u16 {
        SYN_STREAM => Frame::Syn { stream: id()?, fin },
        PING => Frame::Ping(id()?),
        GOAWAY => Frame::GoAway,
        _ => Frame::Other,
    }))
}

/// The server's writing side of one SPDY connection: its header blocks are one zlib stream.
#[derive(Default)]
pub(super) struct Spdy {
    /// The zlib header went out with the first header block.
    zlib_started: bool,
}

impl Spdy {
    /// SYN_REPLY for `stream`, with no headers (kubectl reads none); FIN when `fin`.
    pub fn reply(&mut self, w: &mut dyn Conn, stream: u32, fin: bool) -> io::Result<()> {
        // The header block: a count of 0 pairs, in a stored (uncompressed) deflate block,
        // then an empty one, the sync flush after which Go's inflater hands the bytes over
        // (it keeps a stored block's bytes until the next block begins). Neither is the
        // last: the zlib stream goes on in the next reply.
        let block = 0u32.to_be_bytes();
        let mut payload = stream.to_be_bytes().to_vec();
        if !std::mem::replace(&mut self.zlib_started, true) {
            payload.extend_from_slice(&[0x78, 0x01]);
        }
        for data in [&block[..], &[]] {
            let len = data.len() as u16;
            payload.push(0x00);
            payload.extend_from_slice(&len.to_le_bytes());
            payload.extend_from_slice(&(!len).to_le_bytes());
            payload.extend_from_slice(data);
        }
        control(w, SYN_REPLY, if fin { FLAG_FIN } else { 0 }, &payload)
    }

    /// A data frame on `stream`.
    pub fn data(
        &mut self,
        w: &mut dyn Conn,
        stream: u32,
        data: &[u8],
        fin: bool,
    ) -> io::Result<()> {
        let mut frame = (stream & 0x7fff_ffff).to_be_bytes().to_vec();
        frame.extend_from_slice(&length_word(if fin { FLAG_FIN } else { 0 }, data.len()));
        frame.extend_from_slice(data);
        w.write_all(&frame)?;
        w.flush()
    }

    /// The answer to the client's PING `id`: the same frame back.
    pub fn ping(&mut self, w: &mut dyn Conn, id: u32) -> io::Result<()> {
        control(w, PING, 0, &id.to_be_bytes())
    }
}

fn length_word(flags: u8, len: usize) -> [u8; 4] {
    let [_, a, b, c] = (len as u32).to_be_bytes();
    [flags, a, b, c]
}

/// One control frame of SPDY version 3.
fn control(w: &mut dyn Conn, kind: u16, flags: u8, payload: &[u8]) -> io::Result<()> {
    let mut frame = vec![0x80, 0x03];
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.extend_from_slice(&length_word(flags, payload.len()));
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()
}
