//! Unit tests of request heads: limits, statuses, smuggling refusals.

use super::*;
use crate::status::Status;

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
        !head("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
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
        head("PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
            .unwrap()
            .expects_continue()
    );
    assert!(
        head("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n").is_ok(),
        "leading empty line skipped"
    );
}

#[test]
fn framing_refuses_smuggling() {
    let f = |h: &str| head(h).unwrap().framing();
    assert_eq!(
        f("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").unwrap(),
        Framing::Length(5)
    );
    assert_eq!(
        f("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap(),
        Framing::Chunked
    );
    for bad in [
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    ] {
        assert!(f(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bad_heads_map_to_statuses() {
    let status = |h: &str| Status::for_head(&head(h).unwrap_err()).map(|s| s.code);
    assert_eq!(status("GET /\r\n\r\n"), Some(400));
    assert_eq!(status("GET / HTTP/2.0\r\n\r\n"), Some(505));
    assert_eq!(status("get / HTTP/1.1\r\nHost: x\r\n\r\n"), Some(400));
    for target in [
        "@127.0.0.1:1/steal",
        "http://evil/x",
        "*",
        ".evil.com/x",
        "x",
    ] {
        assert_eq!(
            status(&format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n")),
            Some(400),
            "{target}"
        );
    }
    assert_eq!(
        status("GET / HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n"),
        Some(400)
    );
    assert_eq!(
        status("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n  folded\r\n\r\n"),
        Some(400)
    );
    assert_eq!(
        status("GET / HTTP/1.1\r\nHost: x\r\nX: a\u{1}b\r\n\r\n"),
        Some(400)
    );
    assert_eq!(
        status("GET / HTTP/1.1\r\nHost: x\r\n"),
        Some(400),
        "closed inside the head"
    );
    assert!(matches!(head(""), Err(HeadError::Closed)));
    let target = |len: usize| format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(len - 1));
    assert!(head(&target(MAX_TARGET)).is_ok(), "8 KiB is allowed");
    assert_eq!(status(&target(MAX_TARGET + 1)), Some(414));
    assert_eq!(status(&target(1 << 20)), Some(414));
    let blank = "\r\n".repeat(MAX_HEAD);
    assert_eq!(
        status(&format!("{blank}GET / HTTP/1.1\r\nHost: x\r\n\r\n")),
        Some(431)
    );
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
    assert_eq!(
        status(&format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n")),
        Some(431)
    );
    // 64 KiB of headers in all, in one header or spread over several.
    let headers = |count: usize, each: usize| -> String {
        (0..count)
            .map(|i| format!("X-{i:02}: {}\r\n", "v".repeat(each)))
            .collect()
    };
    let fits = headers(4, MAX_HEAD / 4 - 200);
    assert!(head(&format!("GET / HTTP/1.1\r\nHost: x\r\n{fits}\r\n")).is_ok());
    for big in [headers(1, MAX_HEAD), headers(8, MAX_HEAD / 8)] {
        assert_eq!(
            status(&format!("GET / HTTP/1.1\r\nHost: x\r\n{big}\r\n")),
            Some(431)
        );
    }
}

#[test]
fn refusals_on_top_of_httparse_keep_their_order_and_names() {
    let error = |h: &str| head(h).unwrap_err().to_string();
    let long = "a".repeat(MAX_TARGET);
    // A target past the limit is 414 whatever else is wrong with the line.
    for line in [
        format!("get /{long} HTTP/1.1"),
        format!("GET /{long}\u{1} HTTP/2.0"),
    ] {
        assert!(matches!(
            head(&format!("{line}\r\n\r\n")),
            Err(HeadError::UriTooLong)
        ));
    }
    for (line, what) in [
        ("G@T / HTTP/1.1", "malformed request: method"),
        (
            "GET /a\u{7f}b HTTP/1.1",
            "malformed request: request target",
        ),
        ("GET /a\u{e9} HTTP/1.1", "malformed request: request target"),
        ("GET / HTTP/1.1 x", "malformed request: request line"),
        ("GET  / HTTP/1.1", "malformed request: request line"),
        ("GET / FTP/1.1", "malformed request: version"),
        ("GET / HTTP/1.2", "unsupported HTTP version"),
    ] {
        assert_eq!(error(&format!("{line}\r\n\r\n")), what, "{line:?}");
    }
    for (header, what) in [
        ("X-A b: v", "malformed request: header name"),
        ("X-A", "malformed request: header without ':'"),
        (
            "X-A: a\u{7f}",
            "malformed request: control character in a header value",
        ),
    ] {
        let h = format!("GET / HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n");
        assert_eq!(error(&h), what, "{header:?}");
    }
    // Values lose their surrounding whitespace, and keep obs-text.
    let h = head("GET / HTTP/1.1\r\nHost: x\r\nX:  \tv \u{e9}\t \r\nY:\r\n\r\n").unwrap();
    assert_eq!(h.header("x"), Some("v \u{e9}"));
    assert_eq!(h.header("y"), Some(""));
}

/// Issue 28 item 6: what nginx refuses and the hub accepted, each answered as nginx does.
#[test]
fn heads_nginx_refuses_are_refused() {
    let status = |h: &str| match head(h).and_then(|h| h.framing()) {
        Ok(_) => None,
        Err(e) => Status::for_head(&e).map(|s| s.code),
    };
    for (what, text, want) in [
        (
            "a tab before chunked",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n",
            501,
        ),
        (
            "a tab after chunked",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n",
            501,
        ),
        (
            "a coding other than chunked",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            "two Transfer-Encoding lines",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            "two equal Content-Length lines",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            400,
        ),
        ("HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n", 400),
        (
            "two Host lines",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            400,
        ),
        (
            "two Host lines in HTTP/1.0",
            "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n",
            400,
        ),
    ] {
        assert_eq!(status(text), Some(want), "{what}: {text:?}");
    }
    // What stays accepted: spaces around chunked, any case, HTTP/1.0 without Host.
    for text in [
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  Chunked  \r\n\r\n",
        "POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: x\r\n\r\n",
    ] {
        assert_eq!(status(text), None, "{text:?}");
    }
    let error = |h: &str| head(h).and_then(|h| h.framing()).unwrap_err().to_string();
    assert_eq!(
        error("GET / HTTP/1.1\r\n\r\n"),
        "malformed request: HTTP/1.1 without Host"
    );
    assert_eq!(
        error("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\n\r\n"),
        "not implemented: a Transfer-Encoding other than chunked"
    );
}
