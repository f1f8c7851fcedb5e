//! Kubernetes `Status` errors: the one place where a failure becomes an HTTP status code, a
//! `reason` and the JSON body clients such as client-go and kubectl decode.
//!
//! It knows nothing about where the failure came from; callers pick the constructor. The
//! one failure type it maps itself is the HTTP layer's [`HeadError`] (400, 408, 414, 431,
//! 505), so the server only asks for the answer.

use std::io;

use serde::Serialize;

use crate::http1::HeadError;

/// A `metav1.Status` failure answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Status {
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
pub(crate) struct Details {
    /// Object name.
    pub name: String,
    /// API group ("" for core).
    pub group: String,
    /// Resource (plural), which Kubernetes puts in `details.kind`.
    pub kind: String,
    /// `details.causes`: what client-go looks for by type (`ResourceVersionTooLarge`) or
    /// shows per field (`Invalid`).
    pub causes: Vec<Cause>,
}

/// One `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Cause {
    /// The cause's type, which the wire names `reason`.
    #[serde(rename = "reason")]
    pub kind: &'static str,
    /// Human-readable text.
    pub message: String,
    /// The field concerned, if any.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub field: String,
}

impl Status {
    /// A failure with any code and reason.
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Status {
        Status {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400: the request cannot be served as written (bad path, selector, parameter).
    pub(crate) fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message)
    }

    /// 409: the operation collides with one under way (a `/v1/token` update).
    pub(crate) fn conflict(message: impl Into<String>) -> Status {
        Status::new(409, "Conflict", message)
    }

    /// 403: refused by policy (a credential asking offline for what it never read online, a
    /// stranger on the multiplexer port).
    pub(crate) fn forbidden(message: impl Into<String>) -> Status {
        Status::new(403, "Forbidden", message)
    }

    /// 404 in the Kubernetes form `<resource> "<name>" not found`.
    pub(crate) fn not_found(group: &str, resource: &str, name: &str) -> Status {
        let qualified = qualified(group, resource);
        let mut status = Status::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        status.details = Some(Box::new(Details {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            causes: Vec::new(),
        }));
        status
    }

    /// 504 with the cause client-go's reflector looks for to fall back to a list from
    /// "any" resourceVersion: the apiserver's `storage.NewTooLargeResourceVersionError`
    /// (the watch cache asks for a retry after 1 s).
    pub(crate) fn too_large_resource_version(wanted: u64, current: u64) -> Status {
        let mut status = Status::timeout(format!(
            "Timeout: Too large resource version: {wanted}, current: {current}"
        ));
        status.retry_after = Some(1);
        status.details = Some(Box::new(Details {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            causes: vec![Cause {
                kind: "ResourceVersionTooLarge",
                message: "Too large resource version".to_owned(),
                field: String::new(),
            }],
        }));
        status
    }

    /// 422 for list options the apiserver's validation forbids (`errors.NewInvalid` of
    /// `ListOptions.meta.k8s.io`): each `(field, detail)` a `FieldValueForbidden` cause.
    pub(crate) fn invalid_list_options(forbidden: &[(&str, &str)]) -> Status {
        let errors: Vec<String> = forbidden
            .iter()
            .map(|(field, detail)| format!("{field}: Forbidden: {detail}"))
            .collect();
        let aggregate = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut status = Status::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {aggregate}"),
        );
        status.details = Some(Box::new(Details {
            name: String::new(),
            group: "meta.k8s.io".to_owned(),
            kind: "ListOptions".to_owned(),
            causes: forbidden
                .iter()
                .map(|(field, detail)| Cause {
                    kind: "FieldValueForbidden",
                    message: format!("Forbidden: {detail}"),
                    field: (*field).to_owned(),
                })
                .collect(),
        }));
        status
    }

    /// 404 for something that is not one named object (a collection, a document).
    pub(crate) fn not_found_message(message: impl Into<String>) -> Status {
        Status::new(404, "NotFound", message)
    }

    /// 406: the answer exists only in a form the client does not take.
    pub(crate) fn not_acceptable(message: impl Into<String>) -> Status {
        Status::new(406, "NotAcceptable", message)
    }

    /// 408: the client did not send its request (its body) within the read timeout.
    pub(crate) fn request_timeout(message: impl Into<String>) -> Status {
        Status::new(408, "Timeout", message)
    }

    /// 410: a continue token or resourceVersion that can no longer be served.
    pub(crate) fn expired(message: impl Into<String>) -> Status {
        Status::new(410, "Expired", message)
    }

    /// 429 with a retry hint: the hub is at its concurrency cap.
    pub(crate) fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Status {
        let mut status = Status::new(429, "TooManyRequests", message);
        status.retry_after = Some(retry_after);
        status
    }

    /// 500: the hub itself failed.
    pub(crate) fn internal(message: impl Into<String>) -> Status {
        Status::new(500, "InternalError", message)
    }

    /// 501: a request kind the hub does not carry (transfer codings other than chunked).
    pub(crate) fn not_implemented(message: impl Into<String>) -> Status {
        Status::new(501, "NotImplemented", message)
    }

    /// 502: the cloud answered something the hub could not pass on.
    pub(crate) fn bad_gateway(message: impl Into<String>) -> Status {
        Status::new(502, "InternalError", message)
    }

    /// 503: the cloud cannot be reached and the cache cannot answer.
    pub(crate) fn service_unavailable(message: impl Into<String>) -> Status {
        let mut status = Status::new(503, "ServiceUnavailable", message);
        status.retry_after = Some(1);
        status
    }

    /// 504: the cloud did not answer in time.
    pub(crate) fn timeout(message: impl Into<String>) -> Status {
        Status::new(504, "Timeout", message)
    }

    /// The answer to a request head (or its body framing) that is refused, or `None` when
    /// there is no one to answer: the connection closed, or reading failed other than by
    /// timing out.
    pub(crate) fn for_head(e: &HeadError) -> Option<Status> {
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
            HeadError::NotImplemented(_) => Status::not_implemented(e.to_string()),
            // The apiserver has no reason of its own for it; clients read the code.
            HeadError::Version => Status::new(505, "BadRequest", e.to_string()),
        };
        Some(status)
    }

    /// 413: a request body larger than `limit` bytes.
    pub(crate) fn body_too_large(limit: u64) -> Status {
        Status::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body is larger than its limit of {limit} bytes"),
        )
    }

    /// The JSON body, as the apiserver writes it.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let details = match (&self.details, self.retry_after) {
            (None, None) => None,
            (details, retry_after_seconds) => Some(WireDetails {
                name: details
                    .as_ref()
                    .map(|d| d.name.as_str())
                    .filter(|n| !n.is_empty()),
                group: details
                    .as_ref()
                    .map(|d| d.group.as_str())
                    .filter(|g| !g.is_empty()),
                kind: details
                    .as_ref()
                    .map(|d| d.kind.as_str())
                    .filter(|k| !k.is_empty()),
                causes: details.as_ref().map_or(&[][..], |d| d.causes.as_slice()),
                retry_after_seconds,
            }),
        };
        let wire = Wire {
            kind: "Status",
            api_version: "v1",
            metadata: Metadata {},
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details,
            code: self.code,
        };
        let mut out = Vec::with_capacity(160 + self.message.len());
        // Writing plain strings and numbers into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &wire);
        out
    }
}

/// A `metav1.Status` as it goes on the wire: the apiserver's field names and order, which
/// clients do not depend on but tests and captures compare. Only for writing bodies.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata,
    status: &'static str,
    message: &'a str,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<WireDetails<'a>>,
    code: u16,
}

/// The empty `metadata: {}` of a `Status`.
#[derive(Serialize)]
struct Metadata {}

/// `details` of a `Status`: the object it is about and the retry hint; absent fields are
/// left out, as the apiserver leaves them out.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireDetails<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    #[serde(skip_serializing_if = "<[Cause]>::is_empty")]
    causes: &'a [Cause],
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u32>,
}

/// `resource.group` as Kubernetes messages name a resource (`pods`, `deployments.apps`).
pub(crate) fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
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
    fn bodies_are_byte_for_byte_the_apiservers() {
        let check = |status: Status, want: &str| {
            assert_eq!(String::from_utf8(status.to_json()).unwrap(), want);
        };
        check(
            Status::bad_request("bad \"name\" \\ \n\r\t\u{1}\u{1f} é"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"bad \"name\" \\ \n\r\t\u0001\u001f é","reason":"BadRequest","code":400}"#,
        );
        check(
            Status::not_found("", "pods", "web-1"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"web-1\" not found","reason":"NotFound","details":{"name":"web-1","kind":"pods"},"code":404}"#,
        );
        check(
            Status::not_found("apps", "deployments", "d"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"d\" not found","reason":"NotFound","details":{"name":"d","group":"apps","kind":"deployments"},"code":404}"#,
        );
        check(
            Status::service_unavailable("down"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"down","reason":"ServiceUnavailable","details":{"retryAfterSeconds":1},"code":503}"#,
        );
        let mut both = Status::not_found("", "pods", "p");
        both.retry_after = Some(7);
        check(
            both,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" not found","reason":"NotFound","details":{"name":"p","kind":"pods","retryAfterSeconds":7},"code":404}"#,
        );
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
        check(
            HeadError::NotImplemented("x"),
            Some((501, "NotImplemented")),
        );
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
