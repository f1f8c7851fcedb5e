//! Request bodies: a `Content-Length` body or a chunked one, read through [`BodyState`], with
//! the strict chunked rules (CRLF after every framing line, no whitespace before a size,
//! sizes that fit in 64 bits, trailers within the head's limits).

use std::io::{self, BufRead};

use super::{Framing, LineError, MAX_HEAD, MAX_HEADERS, read_line};

/// Longest chunk-size line of a chunked body (with extensions).
const MAX_CHUNK_LINE: usize = 1024;

/// Where a request body reader stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyState {
    /// Nothing (more) to read.
    Done,
    /// This many bytes of a `Content-Length` body are left.
    Length(u64),
    /// Chunked: this many bytes are left in the current chunk (0: a size line is next).
    Chunk(u64),
}

impl BodyState {
    /// The state at the start of a body with `framing`.
    pub(crate) fn new(framing: Framing) -> BodyState {
        match framing {
            Framing::None => BodyState::Done,
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunk(0),
        }
    }

    /// Reads body bytes from `input` into `out`; 0 at the end of the body.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn read(&mut self, input: &mut dyn BufRead, out: &mut [u8]) -> io::Result<usize> {
        self.read_limited(input, out, u64::MAX)
    }

    /// [`BodyState::read`], refusing a chunk that announces more than `limit` bytes as soon
    /// as its size line is read ([`io::ErrorKind::FileTooLarge`]), not once its data came.
    pub(crate) fn read_limited(
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
    // Extensions say nothing to the hub, whatever bytes they hold: cut off, with the CRLF
    // put back, so that httparse reads the size alone.
    if let Some(semicolon) = line.iter().position(|&b| b == b';') {
        line.truncate(semicolon);
        line.extend_from_slice(b"\r\n");
    }
    // The size begins the line: whitespace before it is refused, as nginx refuses it
    // (issue 28; httparse would skip it). Leading zeros are skipped, which say nothing
    // however many there are (httparse counts them as digits); one is kept for a size of 0.
    if !line.first().is_some_and(u8::is_ascii_hexdigit) {
        return Err(bad("chunk size"));
    }
    let zeros = line.iter().take_while(|&&b| b == b'0').count();
    let first = match line.get(zeros) {
        Some(b) if b.is_ascii_hexdigit() => zeros,
        _ => zeros - 1,
    };
    let digits = line[first..]
        .iter()
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    match httparse::parse_chunk_size(&line[first..]) {
        // At most 15 significant hex digits: a size that fits in u64 with room to add (a
        // larger one is past any body limit anyway).
        Ok(httparse::Status::Complete((_, size))) if digits <= 15 => Ok(size),
        _ if digits > 15 => Err(bad("chunk size too large")),
        _ => Err(bad("chunk size")),
    }
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

/// Reads a whole body with `state` (tests and the fuzz bodies).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_body(
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
mod tests;
