//! Unit tests of request bodies: chunked decoding, strict framing, timeouts.

use std::io::{self, Read};

use super::*;
use crate::http1::Framing;

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
        // Issue 28: whitespace before a size, which nginx refuses.
        b" 5\r\nhello\r\n0\r\n\r\n",
        b"\t5\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\n 0\r\n\r\n",
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

#[test]
fn chunk_size_lines_read_by_httparse_keep_the_rules_on_top() {
    let read = |wire: &[u8]| {
        let mut state = BodyState::new(Framing::Chunked);
        read_body(&mut state, &mut &wire[..], 1 << 20)
    };
    // Whitespace after the size (not before it), extensions holding any bytes, upper-case
    // hex.
    for wire in [
        &b"5 \t;a=\"b\"\r\nhello\r\n0\r\n\r\n"[..],
        b"5;\x01\xff\r\nhello\r\n0;x\r\n\r\n",
        b"00000000000000000000000000000000005\r\nhello\r\n0\r\n\r\n",
    ] {
        assert_eq!(read(wire).unwrap(), b"hello", "{wire:?}");
    }
    assert_eq!(
        read(b"A\r\n0123456789\r\n0\r\n\r\n").unwrap(),
        b"0123456789"
    );
    // 15 significant hex digits are a size (past any body: the data ends first); 16 are not.
    let e = read(b"00fffffffffffffff\r\nx").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    for wire in [&b"ffffffffffffffff\r\nx"[..], b"1000000000000000\r\nx"] {
        let e = read(wire).unwrap_err();
        assert_eq!(e.to_string(), "bad chunked body: chunk size too large");
    }
    for wire in [&b";ext\r\nx"[..], b"5 5\r\nhello", b"5\rx\r\nhello"] {
        let e = read(wire).unwrap_err();
        assert_eq!(e.to_string(), "bad chunked body: chunk size", "{wire:?}");
    }
}
