//! Writes HTTP/1.1 responses on the internal connection's raw stream.
//!
//! A body is buffered up to the gzip threshold: a small one goes out with Content-Length,
//! a larger one chunked (gzip-compressed when the client accepts gzip, as the real
//! apiserver does). Watches get a chunk and a flush per event. The `drop_mid_body` fault
//! sends headers and half the body, then has the front cut the connection.
//!
//! It knows nothing about routing or Kubernetes objects beyond `Status` errors.

use std::io::{self, Write};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;

use super::status::{ApiError, reason_phrase};

/// Called once with the status code when the status line is written.
pub type StatusHook = Box<dyn FnOnce(u16) + Send>;
/// Cuts the connection abruptly (after the bytes written so far reach the client).
pub type CutHook = Box<dyn FnOnce() + Send>;

/// The response side of one request.
pub struct Reply {
    w: Box<dyn Write + Send>,
    /// The request asked for `Connection: close`.
    pub close: bool,
    /// The request accepts gzip.
    pub gzip_ok: bool,
    /// Bodies larger than this are gzip-compressed (when accepted) and sent chunked.
    pub gzip_threshold: usize,
    /// Send headers and half the body, then cut.
    pub drop_mid: bool,
    on_status: Option<StatusHook>,
    on_cut: Option<CutHook>,
}

enum Mode {
    Buffering(Vec<u8>),
    Chunked(ChunkOut),
    Gzip(GzEncoder<ChunkOut>),
    Collect(Vec<u8>),
}

/// A response body being written; call [`Body::finish`] at the end.
pub struct Body {
    reply: Reply,
    code: u16,
    content_type: &'static str,
    mode: Mode,
}

/// Chunked transfer encoding over the raw writer, emitting chunks of up to 32 KiB.
struct ChunkOut {
    w: Box<dyn Write + Send>,
    buf: Vec<u8>,
}

const CHUNK: usize = 32 * 1024;

impl ChunkOut {
    fn emit(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            write!(self.w, "{:x}\r\n", self.buf.len())?;
            self.w.write_all(&self.buf)?;
            self.w.write_all(b"\r\n")?;
            self.buf.clear();
        }
        Ok(())
    }

    fn end(mut self) -> io::Result<()> {
        self.emit()?;
        self.w.write_all(b"0\r\n\r\n")?;
        self.w.flush()
    }
}

impl Write for ChunkOut {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.emit()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit()?;
        self.w.flush()
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

impl Reply {
    /// Wraps the connection's writer.
    pub fn new(w: Box<dyn Write + Send>, on_status: StatusHook, on_cut: CutHook) -> Reply {
        Reply {
            w,
            close: false,
            gzip_ok: false,
            gzip_threshold: 128 * 1024,
            drop_mid: false,
            on_status: Some(on_status),
            on_cut: Some(on_cut),
        }
    }

    fn head(
        &mut self,
        code: u16,
        content_type: &str,
        framing: Framing,
        gzip: bool,
    ) -> io::Result<()> {
        if let Some(h) = self.on_status.take() {
            h(code);
        }
        let mut h = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nCache-Control: no-cache, private\r\n",
            reason_phrase(code)
        );
        if gzip {
            // As the apiserver: the answer depends on the request's Accept-Encoding.
            h.push_str("Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
        }
        match framing {
            Framing::Length(n) => h.push_str(&format!("Content-Length: {n}\r\n")),
            Framing::Chunked => h.push_str("Transfer-Encoding: chunked\r\n"),
        }
        if self.close {
            h.push_str("Connection: close\r\n");
        }
        h.push_str("\r\n");
        self.w.write_all(h.as_bytes())
    }

    /// Starts a body with status `code`; framing and compression are decided by its size.
    pub fn body(self, code: u16, content_type: &'static str) -> Body {
        let mode = if self.drop_mid {
            Mode::Collect(Vec::new())
        } else {
            Mode::Buffering(Vec::new())
        };
        Body {
            reply: self,
            code,
            content_type,
            mode,
        }
    }

    /// A whole JSON answer.
    pub fn json(self, code: u16, v: &Value) -> io::Result<()> {
        let mut b = self.body(code, "application/json");
        serde_json::to_writer(&mut b, v)?;
        b.finish()
    }

    /// A whole text answer.
    pub fn text(self, code: u16, text: &str) -> io::Result<()> {
        let mut b = self.body(code, "text/plain; charset=utf-8");
        b.write_all(text.as_bytes())?;
        b.finish()
    }

    /// A `Status` answer for an error.
    pub fn error(self, e: &ApiError) -> io::Result<()> {
        self.json(e.code, &e.to_status())
    }

    /// Starts a watch stream: 200, chunked, never compressed.
    pub fn watch(mut self) -> io::Result<WatchStream> {
        self.head(200, "application/json", Framing::Chunked, false)?;
        self.w.flush()?;
        Ok(WatchStream { w: self.w })
    }
}

impl Write for Body {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.mode {
            Mode::Collect(buf) => buf.extend_from_slice(data),
            Mode::Chunked(c) => c.write_all(data)?,
            Mode::Gzip(g) => g.write_all(data)?,
            Mode::Buffering(buf) => {
                buf.extend_from_slice(data);
                if buf.len() > self.reply.gzip_threshold {
                    let pending = std::mem::take(buf);
                    self.start_streaming(&pending)?;
                }
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Body {
    fn start_streaming(&mut self, pending: &[u8]) -> io::Result<()> {
        let gzip = self.reply.gzip_ok;
        self.reply
            .head(self.code, self.content_type, Framing::Chunked, gzip)?;
        let w = std::mem::replace(&mut self.reply.w, Box::new(io::sink()));
        let mut out = ChunkOut {
            w,
            buf: Vec::with_capacity(CHUNK + 1024),
        };
        self.mode = if gzip {
            let mut g = GzEncoder::new(out, Compression::fast());
            g.write_all(pending)?;
            Mode::Gzip(g)
        } else {
            out.write_all(pending)?;
            Mode::Chunked(out)
        };
        Ok(())
    }

    /// Ends the body (terminal chunk, or the whole buffered body with Content-Length).
    pub fn finish(mut self) -> io::Result<()> {
        match std::mem::replace(&mut self.mode, Mode::Collect(Vec::new())) {
            Mode::Buffering(buf) => {
                self.reply.head(
                    self.code,
                    self.content_type,
                    Framing::Length(buf.len()),
                    false,
                )?;
                self.reply.w.write_all(&buf)?;
                self.reply.w.flush()
            }
            Mode::Chunked(c) => c.end(),
            Mode::Gzip(g) => g.finish()?.end(),
            Mode::Collect(buf) => {
                let gzip = self.reply.gzip_ok && buf.len() > self.reply.gzip_threshold;
                let buf = if gzip {
                    let mut g = GzEncoder::new(Vec::new(), Compression::fast());
                    g.write_all(&buf)?;
                    g.finish()?
                } else {
                    buf
                };
                self.reply.head(
                    self.code,
                    self.content_type,
                    Framing::Length(buf.len()),
                    gzip,
                )?;
                self.reply.w.write_all(&buf[..buf.len() / 2])?;
                self.reply.w.flush()?;
                if let Some(cut) = self.reply.on_cut.take() {
                    cut();
                }
                Ok(())
            }
        }
    }
}

/// An open watch response: one chunk per event.
pub struct WatchStream {
    w: Box<dyn Write + Send>,
}

impl WatchStream {
    /// Writes one event as its own chunk; `flush` sends it at once.
    pub fn send(&mut self, line: &[u8], flush: bool) -> io::Result<()> {
        write!(self.w, "{:x}\r\n", line.len())?;
        self.w.write_all(line)?;
        self.w.write_all(b"\r\n")?;
        if flush { self.w.flush() } else { Ok(()) }
    }

    /// Sends what was written without a flush.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// Ends the stream cleanly (terminal chunk).
    pub fn end(mut self) -> io::Result<()> {
        self.w.write_all(b"0\r\n\r\n")?;
        self.w.flush()
    }
}
