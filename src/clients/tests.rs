use super::*;

#[test]
fn errors_read_as_the_log_lines_did() {
    let cases = [
        (ClientError::Status(503), "the cloud answered 503"),
        (ClientError::QueueFull, "the writer queue stayed full"),
        (
            ClientError::NotCacheable(NoCacheReason::Event),
            "not cacheable: event",
        ),
        (
            ClientError::Answer("the list has no resourceVersion"),
            "the list has no resourceVersion",
        ),
        (
            ClientError::Refused("not a read: Watch".into()),
            "not a read: Watch",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}

/// A plain HTTP server on loopback answering `GET <path>` by `answer(path)`, one request per
/// connection.
fn plain_server(answer: fn(&str) -> &'static str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut sock in listener.incoming().flatten() {
            let mut reader = BufReader::new(sock.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let path = first.split(' ').nth(1).unwrap_or("");
            let _ = sock.write_all(answer(path).as_bytes());
        }
    });
    base
}

#[test]
fn a_filter_lookup_tells_absent_from_refused_from_unreadable_from_unreachable() {
    use std::sync::Arc;

    use crate::cloud_error::UpstreamError;
    use crate::config::LbMode;
    use crate::filters::lookups::{FetchError, FetchObject};
    use crate::health::Backends;

    let base = plain_server(|path| match path {
        "/api/v1/nodes/a" => {
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"kind\":\"N\"}\n"
        }
        "/api/v1/nodes/gone" => {
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        }
        "/api/v1/nodes/html" => {
            "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\n<html>"
        }
        _ => "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    });
    let ca = crate::server::tls::tests::TestCa::new();
    let tls = crate::tls::load(ca.pem.as_bytes(), None).unwrap();
    let upstream = |base: &str| {
        let backends = Arc::new(Backends::new(vec![base.to_owned()], LbMode::RoundRobin));
        Upstream::new(backends, Some(&tls), None, 4).unwrap()
    };
    let cloud = upstream(&base);

    let found = cloud.fetch("/api/v1/nodes/a").unwrap();
    assert_eq!(found, Some(serde_json::json!({"kind": "N"})));
    assert!(cloud.fetch("/api/v1/nodes/gone").unwrap().is_none());
    let failed = cloud.fetch("/api/v1/nodes/broken").unwrap_err();
    assert!(matches!(failed, FetchError::Status(500)), "{failed:?}");
    assert_eq!(failed.to_string(), "the cloud answered 500");
    let html = cloud.fetch("/api/v1/nodes/html").unwrap_err();
    assert!(matches!(html, FetchError::Json(_)), "{html:?}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = upstream(&refused).fetch("/api/v1/nodes/a").unwrap_err();
    assert!(
        matches!(
            unreachable,
            FetchError::NoAnswer(UpstreamError::Transport {
                maybe_sent: false,
                ..
            })
        ),
        "{unreachable:?}"
    );
}
