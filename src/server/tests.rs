//! Whole exchanges over an in-memory stream: the connection loop, request bodies and
//! response framing as a client sees them on the wire, without sockets.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::admission::{BUSY, Load, Tracked};
use super::connection::serve_connection;
use super::stream::ClientStream;
use super::{ClientProbe, Exchange, Handler, Length, Limits};
use crate::requester::Port;
use crate::status::Status;

/// What a test client sent, what the server wrote back, and whether the server closed.
#[derive(Debug, Default)]
struct Wire {
    input: Vec<u8>,
    read: usize,
    /// Most bytes one read hands out, so framing is read across many reads.
    step: usize,
    output: Vec<u8>,
    shut: bool,
    /// Calls that set the read timeout (each a system call on a socket).
    read_timeouts_set: usize,
}

/// A client connection in memory: reads hand out the client's bytes, then the end of the
/// stream (the client has sent everything and waits).
#[derive(Debug, Clone)]
struct MemoryStream(Arc<Mutex<Wire>>);

impl MemoryStream {
    fn new(input: &[u8], step: usize) -> MemoryStream {
        MemoryStream(Arc::new(Mutex::new(Wire {
            input: input.to_vec(),
            step,
            ..Wire::default()
        })))
    }

    fn wire(&self) -> std::sync::MutexGuard<'_, Wire> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Read for MemoryStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut wire = self.wire();
        if wire.shut {
            return Ok(0);
        }
        let n = (wire.input.len() - wire.read).min(out.len()).min(wire.step);
        out[..n].copy_from_slice(&wire.input[wire.read..wire.read + n]);
        wire.read += n;
        Ok(n)
    }
}

impl Write for MemoryStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut wire = self.wire();
        if wire.shut {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        wire.output.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ClientStream for MemoryStream {
    fn set_read_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        self.wire().read_timeouts_set += 1;
        Ok(())
    }

    fn set_write_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }

    fn shutdown(&self) -> io::Result<()> {
        self.wire().shut = true;
        Ok(())
    }

    fn probe(&self) -> Option<ClientProbe> {
        None
    }
}

const LIMITS: Limits = Limits {
    max_connections: 4,
    max_in_flight: 4,
    stack_size: 0,
    io_timeout: Duration::from_secs(1),
    long_running: None,
};

/// What the client read back, and whether the server closed the connection.
struct Seen {
    output: String,
    closed: bool,
    read_timeouts_set: usize,
}

impl Seen {
    /// The answers, split at each status line.
    fn answers(&self) -> Vec<&str> {
        self.output
            .match_indices("HTTP/1.1 ")
            .map(|(i, _)| i)
            .chain([self.output.len()])
            .collect::<Vec<_>>()
            .windows(2)
            .map(|w| &self.output[w[0]..w[1]])
            .collect()
    }
}

/// Serves `input`, handed out `step` bytes per read, on one connection with `handler`.
fn serve(input: &str, step: usize, handler: impl Fn(Exchange<'_>) + Send + Sync + 'static) -> Seen {
    let stream = MemoryStream::new(input.as_bytes(), step);
    let load = Load::default();
    let tracked: Arc<Tracked> = Arc::new(Tracked {
        rank: AtomicU64::new(BUSY),
        stream: stream.clone(),
    });
    tracked.waiting(&load, false);
    let handler: Handler = Arc::new(handler);
    let peer = "127.0.0.1:1".parse().unwrap();
    let shutdown = AtomicBool::new(false);
    let conn = Box::new(stream.clone());
    serve_connection(
        conn,
        (peer, Port::Plain),
        &handler,
        LIMITS,
        (&load, &tracked),
        &shutdown,
    );
    assert_eq!(load.in_flight(), 0, "every request slot given back");
    let wire = stream.wire();
    Seen {
        output: String::from_utf8_lossy(&wire.output).into_owned(),
        closed: wire.shut,
        read_timeouts_set: wire.read_timeouts_set,
    }
}

/// Reads the whole body and answers with it, or with the body's failure.
fn echo(mut ex: Exchange<'_>) {
    let mut body = Vec::new();
    match ex.body().read_to_end(&mut body) {
        Ok(_) => {
            let _ = ex.send(200, &[("Content-Type", "text/plain")], &body);
        }
        Err(_) => {
            let failure = ex.body_failure().unwrap();
            let _ = ex.send_status(&failure);
        }
    }
}

#[test]
fn keep_alive_serves_requests_one_after_another() {
    let seen = serve(
        "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
        7,
        |ex| {
            let url = ex.url().to_owned();
            let _ = ex.send(200, &[("X-Url", url.as_str())], url.as_bytes());
        },
    );
    assert_eq!(
        seen.answers(),
        [
            "HTTP/1.1 200 OK\r\nX-Url: /a\r\nContent-Length: 2\r\n\r\n/a",
            "HTTP/1.1 200 OK\r\nX-Url: /b\r\nContent-Length: 2\r\n\r\n/b",
        ]
    );
    assert!(
        !seen.closed,
        "the client ended the connection, not the server"
    );
}

#[test]
fn connection_close_ends_the_connection_after_the_answer() {
    let seen = serve(
        "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
        64,
        |ex| {
            let _ = ex.send(200, &[] as &[(&str, &str)], b"ok");
        },
    );
    assert_eq!(
        seen.answers(),
        ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"]
    );
    assert!(seen.closed);
}

#[test]
fn a_chunked_request_body_is_decoded_and_the_next_request_read() {
    let input = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n\
                 POST /y HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
    for step in [1, 3, 4096] {
        let seen = serve(input, step, echo);
        assert_eq!(
            seen.answers(),
            [
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world",
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc",
            ],
            "step {step}"
        );
        assert!(!seen.closed);
    }
}

#[test]
fn a_broken_chunked_body_is_400_and_closes_the_connection() {
    let input = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5\r\nhelloXX0\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n";
    let seen = serve(input, 4096, echo);
    let answers = seen.answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        answers[0].starts_with("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"),
        "{answers:?}"
    );
    assert!(
        answers[0].contains("\r\nConnection: close\r\n\r\n{"),
        "{answers:?}"
    );
    assert!(seen.closed);

    // A handler that never reads the body (an answer from the cache): the broken body is
    // found while draining it, and the client gets its 400, not the answer meant for it.
    let seen = serve(input, 4096, |ex| {
        let _ = ex.send(200, &[] as &[(&str, &str)], b"cached");
    });
    let answers = seen.answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(answers[0].starts_with("HTTP/1.1 400 "), "{answers:?}");
    assert!(!answers[0].contains("cached"));
    assert!(seen.closed);
}

#[test]
fn head_204_and_304_answers_carry_no_body() {
    let input = "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /204 HTTP/1.1\r\nHost: x\r\n\r\nGET /304 HTTP/1.1\r\nHost: x\r\n\r\n\
                 HEAD /streamed HTTP/1.1\r\nHost: x\r\n\r\nGET /last HTTP/1.1\r\nHost: x\r\n\r\n";
    let seen = serve(input, 4096, |ex| {
        let none: &[(&str, &str)] = &[];
        let _ = match ex.url() {
            "/a" | "/last" => ex.send(200, none, b"body"),
            "/204" => ex.start(204, none, Length::Streamed).and_then(|mut w| {
                w.write(b"dropped")?;
                w.finish()
            }),
            "/304" => ex.send(304, &[("ETag", "\"1\"")], b""),
            _ => ex.start(200, none, Length::Streamed).and_then(|mut w| {
                w.write(b"dropped")?;
                w.finish()
            }),
        };
    });
    assert_eq!(
        seen.answers(),
        [
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
            "HTTP/1.1 304 Not Modified\r\nETag: \"1\"\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody",
        ]
    );
    assert!(!seen.closed);
}

/// Answers with "ab" and "cde" as two writes of a streamed body.
fn stream_two_writes(ex: Exchange<'_>) {
    let none: &[(&str, &str)] = &[];
    let _ = ex
        .start(200, none, Length::Streamed)
        .and_then(|mut writer| {
            writer.write(b"ab")?;
            writer.write(b"")?;
            writer.write(b"cde")?;
            writer.finish()
        });
}

#[test]
fn a_streamed_answer_is_chunked_or_close_delimited() {
    let seen = serve(
        "GET /w HTTP/1.1\r\nHost: x\r\n\r\nGET /w HTTP/1.1\r\nHost: x\r\n\r\n",
        4096,
        stream_two_writes,
    );
    let chunked =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n";
    assert_eq!(seen.answers(), [chunked, chunked]);
    assert!(!seen.closed);

    // HTTP/1.0 knows no chunks: the body ends with the connection.
    let seen = serve(
        "GET /w HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        4096,
        stream_two_writes,
    );
    assert_eq!(
        seen.answers(),
        ["HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabcde"]
    );
    assert!(seen.closed);
}

#[test]
fn an_aborted_answer_closes_without_the_end_of_the_body() {
    let seen = serve(
        "GET /w HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n",
        4096,
        |ex| {
            let none: &[(&str, &str)] = &[];
            if let Ok(mut writer) = ex.start(200, none, Length::Streamed) {
                let _ = writer.write(b"ab");
                writer.abort();
            }
        },
    );
    assert_eq!(
        seen.answers(),
        ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"]
    );
    assert!(seen.closed);
}

#[test]
fn expect_100_continue_is_answered_when_the_body_is_read() {
    let input = "PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc\
                 GET /next HTTP/1.1\r\nHost: x\r\n\r\n";
    let seen = serve(input, 4096, echo);
    assert_eq!(
        seen.answers(),
        [
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
        ]
    );
    assert!(!seen.closed);

    // Answered without reading the body: no 100, and the connection closes (the client may
    // or may not send the body now).
    let seen = serve(input, 4096, |ex| {
        let _ = ex.send_status(&Status::new(403, "Forbidden", "no"));
    });
    let answers = seen.answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        answers[0].starts_with("HTTP/1.1 403 Forbidden\r\n")
            && answers[0].contains("\r\nConnection: close\r\n"),
        "{answers:?}"
    );
    assert!(seen.closed);
}

#[test]
fn a_bad_head_gets_a_closing_answer() {
    for (input, status) in [
        ("GET / HTTP/2.0\r\n\r\n", "505 HTTP Version Not Supported"),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n  folded\r\n\r\n",
            "400 Bad Request",
        ),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "400 Bad Request",
        ),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n",
            "413 Payload Too Large",
        ),
    ] {
        let seen = serve(input, 4096, |_| panic!("not served"));
        let answers = seen.answers();
        assert_eq!(answers.len(), 1, "{input:?}");
        let expected =
            format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: ");
        assert!(answers[0].starts_with(&expected), "{input:?}: {answers:?}");
        assert!(
            answers[0].contains("\r\nConnection: close\r\n\r\n{"),
            "{answers:?}"
        );
        assert!(seen.closed);
    }
}

#[test]
fn a_request_left_unanswered_gets_500() {
    let seen = serve(
        "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
        4096,
        |_| {},
    );
    let answers = seen.answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(answers[0].starts_with("HTTP/1.1 500 Internal Server Error\r\n"));
    assert!(seen.closed);
}

#[test]
fn body_reads_one_after_another_keep_the_read_timeout_already_set() {
    // The same body in one chunk and in 200: each body read arms a fresh deadline, but the
    // socket's timeout is set again only when it differs, not once per read.
    let request = |chunks: usize| {
        let mut input =
            String::from("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
        let piece = "a".repeat(1000 / chunks);
        for _ in 0..chunks {
            input.push_str(&format!("{:x}\r\n{piece}\r\n", piece.len()));
        }
        input.push_str("0\r\n\r\n");
        input
    };
    let one = serve(&request(1), 16, echo);
    let many = serve(&request(200), 16, echo);
    assert!(one.output.starts_with("HTTP/1.1 200 OK"), "{}", one.output);
    assert!(
        many.output.starts_with("HTTP/1.1 200 OK"),
        "{}",
        many.output
    );
    assert_eq!(many.read_timeouts_set, one.read_timeouts_set);
}
