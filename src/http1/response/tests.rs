//! Unit tests of response heads: framing headers, bodiless answers, chunk lines, reasons.

use super::*;

fn head(
    status: u16,
    headers: &[(&str, &str)],
    length: Option<u64>,
    framing: ResponseFraming,
    close: bool,
) -> String {
    let mut out = Vec::new();
    write_head(&mut out, status, headers, length, framing, close);
    String::from_utf8(out).unwrap()
}

#[test]
fn a_known_length_answer() {
    assert_eq!(
        head(
            200,
            &[("Content-Type", "application/json")],
            Some(12),
            ResponseFraming::Known(12),
            false
        ),
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"
    );
}

#[test]
fn a_streamed_answer_is_chunked_or_close_delimited() {
    assert_eq!(framing(None, false, false), ResponseFraming::Chunked);
    assert_eq!(framing(None, false, true), ResponseFraming::Close);
    assert_eq!(
        head(200, &[], None, ResponseFraming::Chunked, false),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    assert_eq!(
        head(200, &[], None, ResponseFraming::Close, false),
        "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn bodiless_answers_declare_what_they_would_have_sent() {
    assert!(bodiless("HEAD", 200));
    assert!(bodiless("GET", 204));
    assert!(bodiless("GET", 304));
    assert!(!bodiless("GET", 200));
    // A streamed bodiless answer sends nothing and declares no framing.
    assert_eq!(framing(None, true, false), ResponseFraming::Known(0));
    assert_eq!(
        head(204, &[], None, ResponseFraming::Known(0), false),
        "HTTP/1.1 204 No Content\r\n\r\n"
    );
    // A HEAD answer of known length says the length of the GET answer.
    assert_eq!(framing(Some(7), true, false), ResponseFraming::Known(7));
    assert_eq!(
        head(200, &[], Some(7), ResponseFraming::Known(7), false),
        "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n"
    );
}

#[test]
fn closing_and_splitting_headers() {
    assert_eq!(
        head(
            429,
            &[
                ("Retry-After", "1"),
                ("X-Bad", "a\r\nSet-Cookie: x"),
                ("X:Y", "v")
            ],
            Some(0),
            ResponseFraming::Known(0),
            true
        ),
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn chunk_size_lines() {
    let mut buf = [0u8; CHUNK_SIZE_LINE];
    assert_eq!(chunk_size_line(5, &mut buf), b"5\r\n");
    assert_eq!(chunk_size_line(0x1f00, &mut buf), b"1f00\r\n");
    assert_eq!(
        chunk_size_line(usize::MAX, &mut buf).len(),
        2 * size_of::<usize>() + 2
    );
}

#[test]
fn reason_phrases_come_from_the_standard_table() {
    for (code, reason) in [
        (200, "OK"),
        (404, "Not Found"),
        (413, "Payload Too Large"),
        (414, "URI Too Long"),
        (429, "Too Many Requests"),
        (431, "Request Header Fields Too Large"),
        (505, "HTTP Version Not Supported"),
        (299, "Status"),
        (42, "Status"),
    ] {
        assert_eq!(reason_phrase(code), reason, "{code}");
    }
}

#[test]
fn a_response_head_is_read_and_what_follows_it_stays_unread() {
    let wire = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n\x80\x03first frame";
    let mut input = std::io::BufReader::with_capacity(16, &wire[..]);
    let head = read_response_head(&mut input).unwrap();
    assert_eq!(head.status, 101);
    assert_eq!(head.header("upgrade"), Some("SPDY/3.1"));
    assert_eq!(head.headers.len(), 3);
    assert_eq!(head.framing().unwrap(), AnswerFraming::Length(0));
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut input, &mut rest).unwrap();
    assert_eq!(rest, b"\x80\x03first frame");
}

#[test]
fn an_answer_is_framed_by_its_coding_its_length_or_the_close() {
    let framing = |head: &[u8]| read_response_head(&mut &head[..]).unwrap().framing();
    assert_eq!(
        framing(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 12\r\n\r\n").unwrap(),
        AnswerFraming::Length(12)
    );
    assert_eq!(
        framing(b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap(),
        AnswerFraming::Chunked
    );
    assert_eq!(
        framing(b"HTTP/1.1 500 Oops\r\n\r\n").unwrap(),
        AnswerFraming::Close
    );
    assert!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err());
    assert!(framing(b"HTTP/1.1 403 Forbidden\r\nContent-Length: +5\r\n\r\n").is_err());
}

#[test]
fn a_response_head_that_ends_early_or_grows_too_large_is_an_error() {
    assert!(read_response_head(&mut &b"HTTP/1.1 101 Switching"[..]).is_err());
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    while big.len() <= MAX_RESPONSE_HEAD {
        big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    big.extend_from_slice(b"\r\n");
    assert!(read_response_head(&mut &big[..]).is_err());
    assert!(read_response_head(&mut &b"NOT HTTP\r\n\r\n"[..]).is_err());
}

#[test]
fn the_switching_head_carries_the_servers_headers_and_no_framing() {
    let mut out = Vec::new();
    write_switching_head(
        &mut out,
        &[
            ("Upgrade", "SPDY/3.1"),
            ("Connection", "Upgrade"),
            ("Bad\r\n", "x"),
        ],
    );
    assert_eq!(
        out,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\n\r\n"
    );
}

#[test]
fn interim_answers_before_the_final_head_are_passed_over() {
    let mut input: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\
        HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
        HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\nfirst";
    let head = read_response_head(&mut input).unwrap();
    assert_eq!(head.status, 101);
    assert_eq!(
        head.headers,
        [("Upgrade".to_owned(), "SPDY/3.1".to_owned())]
    );
    assert_eq!(input, b"first");
    let mut input: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 403 Forbidden\r\n\r\n";
    assert_eq!(read_response_head(&mut input).unwrap().status, 403);
}

#[test]
fn a_head_read_in_pieces_of_any_size_ends_at_its_blank_line() {
    for wire in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A: b\r\n\r\nbody"[..],
        &b"HTTP/1.1 200 OK\nContent-Length: 4\nX-A: b\n\nbody"[..],
    ] {
        for size in 1..=wire.len() {
            let mut input = std::io::BufReader::with_capacity(size, wire);
            let head = read_response_head(&mut input).unwrap();
            assert_eq!(
                (head.status, head.headers.len()),
                (200, 2),
                "pieces of {size}"
            );
            assert_eq!(head.header("x-a"), Some("b"));
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut input, &mut rest).unwrap();
            assert_eq!(rest, b"body", "pieces of {size}");
        }
    }
}
