//! Kubernetes `Status` errors: the one place where a failure becomes an HTTP status code, a
//! `reason` and the JSON body clients such as client-go and kubectl decode.
//!
//! It knows nothing about where the failure came from; callers pick the constructor. The
//! one failure type it maps itself is the HTTP layer's [`HeadError`] (400, 408, 414, 431,
//! 505), so the server only asks for the answer.

use std::fmt::Write as _;
use std::io;

use crate::http1::HeadError;

/// A `metav1.Status` failure answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// HTTP status code, also `code` in the body.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `ServiceUnavailable`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details.name`, `details.group` and `details.kind` when the failure concerns one object.
    pub details: Option<Box<Details>>,
    /// Seconds a client should wait before retrying (429, 503).
    pub retry_after: Option<u32>,
}

/// The object a [`Status`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// Object name.
    pub name: String,
    /// API group ("" for core).
    pub group: String,
    /// Resource (plural), which Kubernetes puts in `details.kind`.
    pub kind: String,
}

impl Status {
    /// A failure with any code and reason.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Status {
        Status {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400: the request cannot be served as written (bad path, selector, parameter).
    pub fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message)
    }

    /// 403: refused by policy (deletes while offline).
    pub fn forbidden(message: impl Into<String>) -> Status {
        Status::new(403, "Forbidden", message)
    }

    /// 404 in the Kubernetes form `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Status {
        let qualified = qualified(group, resource);
        let mut status = Status::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        status.details = Some(Box::new(Details {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
        }));
        status
    }

    /// 404 for something that is not one named object (a collection, a document).
    pub fn not_found_message(message: impl Into<String>) -> Status {
        Status::new(404, "NotFound", message)
    }

    /// 408: the client did not send its request (its body) within the read timeout.
    pub fn request_timeout(message: impl Into<String>) -> Status {
        Status::new(408, "Timeout", message)
    }

    /// 410: a continue token or resourceVersion that can no longer be served.
    pub fn expired(message: impl Into<String>) -> Status {
        Status::new(410, "Expired", message)
    }

    /// 429 with a retry hint: the hub is at its concurrency cap.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Status {
        let mut status = Status::new(429, "TooManyRequests", message);
        status.retry_after = Some(retry_after);
        status
    }

    /// 500: the hub itself failed.
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(500, "InternalError", message)
    }

    /// 501: a request kind the hub does not carry (connection upgrades).
    pub fn not_implemented(message: impl Into<String>) -> Status {
        Status::new(501, "NotImplemented", message)
    }

    /// 502: the cloud answered something the hub could not pass on.
    pub fn bad_gateway(message: impl Into<String>) -> Status {
        Status::new(502, "InternalError", message)
    }

    /// 503: the cloud cannot be reached and the cache cannot answer.
    pub fn service_unavailable(message: impl Into<String>) -> Status {
        let mut status = Status::new(503, "ServiceUnavailable", message);
        status.retry_after = Some(1);
        status
    }

    /// 504: the cloud did not answer in time.
    pub fn timeout(message: impl Into<String>) -> Status {
        Status::new(504, "Timeout", message)
    }

    /// The answer to a request head (or its body framing) that is refused, or `None` when
    /// there is no one to answer: the connection closed, or reading failed other than by
    /// timing out.
    pub fn for_head(e: &HeadError) -> Option<Status> {
        let status = match e {
            HeadError::Closed => return None,
            HeadError::Io(io)
                if matches!(
                    io.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Status::request_timeout("the request head did not arrive in time")
            }
            HeadError::Io(_) => return None,
            HeadError::UriTooLong => Status::new(414, "RequestURITooLong", e.to_string()),
            HeadError::TooLarge(_) => {
                Status::new(431, "RequestHeaderFieldsTooLarge", e.to_string())
            }
            HeadError::Malformed(_) => Status::bad_request(e.to_string()),
            // The apiserver has no reason of its own for it; clients read the code.
            HeadError::Version => Status::new(505, "BadRequest", e.to_string()),
        };
        Some(status)
    }

    /// 413: a request body larger than `limit` bytes.
    pub fn body_too_large(limit: u64) -> Status {
        Status::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body is larger than its limit of {limit} bytes"),
        )
    }

    /// The JSON body, as the apiserver writes it.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = String::with_capacity(160 + self.message.len());
        out.push_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#,
        );
        push_json_string(&mut out, &self.message);
        out.push_str(r#","reason":"#);
        push_json_string(&mut out, self.reason);
        let has_details = self.details.is_some() || self.retry_after.is_some();
        if has_details {
            out.push_str(r#","details":{"#);
            let mut first = true;
            if let Some(details) = &self.details {
                out.push_str(r#""name":"#);
                push_json_string(&mut out, &details.name);
                if !details.group.is_empty() {
                    out.push_str(r#","group":"#);
                    push_json_string(&mut out, &details.group);
                }
                out.push_str(r#","kind":"#);
                push_json_string(&mut out, &details.kind);
                first = false;
            }
            if let Some(seconds) = self.retry_after {
                if !first {
                    out.push(',');
                }
                let _ = write!(out, r#""retryAfterSeconds":{seconds}"#);
            }
            out.push('}');
        }
        let _ = write!(out, r#","code":{}}}"#, self.code);
        out.into_bytes()
    }
}

/// `resource.group` as Kubernetes messages name a resource (`pods`, `deployments.apps`).
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// Appends `s` as a JSON string literal.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(status: &Status) -> serde_json::Value {
        serde_json::from_slice(&status.to_json()).expect("Status JSON must parse")
    }

    #[test]
    fn not_found_has_kubernetes_message_and_details() {
        let v = parsed(&Status::not_found("", "pods", "web-1"));
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NotFound");
        assert_eq!(v["code"], 404);
        assert_eq!(v["message"], r#"pods "web-1" not found"#);
        assert_eq!(v["details"]["name"], "web-1");
        assert_eq!(v["details"]["kind"], "pods");
        let grouped = parsed(&Status::not_found("apps", "deployments", "d"));
        assert_eq!(grouped["message"], r#"deployments.apps "d" not found"#);
        assert_eq!(grouped["details"]["group"], "apps");
    }

    #[test]
    fn hostile_text_stays_valid_json() {
        let v = parsed(&Status::bad_request("bad \"name\" \\ \n\u{1} x"));
        assert_eq!(v["message"], "bad \"name\" \\ \n\u{1} x");
    }

    #[test]
    fn head_errors_map_to_code_and_reason() {
        let check = |e: HeadError, want: Option<(u16, &str)>| {
            let got = Status::for_head(&e);
            assert_eq!(got.as_ref().map(|s| (s.code, s.reason)), want, "{e}");
        };
        check(HeadError::Closed, None);
        check(HeadError::Io(io::ErrorKind::ConnectionReset.into()), None);
        check(
            HeadError::Io(io::ErrorKind::WouldBlock.into()),
            Some((408, "Timeout")),
        );
        check(
            HeadError::Io(io::ErrorKind::TimedOut.into()),
            Some((408, "Timeout")),
        );
        check(HeadError::UriTooLong, Some((414, "RequestURITooLong")));
        check(
            HeadError::TooLarge("head"),
            Some((431, "RequestHeaderFieldsTooLarge")),
        );
        check(HeadError::Malformed("x"), Some((400, "BadRequest")));
        check(HeadError::Version, Some((505, "BadRequest")));
        let malformed = Status::for_head(&HeadError::Malformed("Content-Length")).unwrap();
        assert_eq!(malformed.message, "malformed request: Content-Length");
    }

    #[test]
    fn retry_after_goes_into_details() {
        let v = parsed(&Status::too_many_requests("busy", 1));
        assert_eq!(v["code"], 429);
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
    }
}
