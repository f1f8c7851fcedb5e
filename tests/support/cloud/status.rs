//! API errors of the stand-in cloud and their `Status` JSON, worded like the real
//! kube-apiserver's (`pods "x" not found`, reason NotFound, details name/kind).
//!
//! Only builds values; writing them to a connection is `respond.rs`'s job.

use std::fmt;

use serde_json::{Value, json};

use super::kinds::Kind;

/// An error answer: HTTP code, Kubernetes reason, message and optional details.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (NotFound, AlreadyExists, Conflict, Expired, ...).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, if any.
    pub details: Option<Value>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(kind: &Kind, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind.resource});
    if !kind.group.is_empty() {
        d["group"] = json!(kind.group);
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// Any code with a reason and message (fault switches answering 429, 503, ...).
    pub fn with_code(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        Self::new(code, reason, message)
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(kind: &Kind, name: &str) -> ApiError {
        ApiError {
            details: Some(details(kind, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", kind.group_resource()),
            )
        }
    }

    /// 404 for a URL that names nothing served.
    pub fn no_route() -> ApiError {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 `pods "x" already exists`.
    pub fn already_exists(kind: &Kind, name: &str) -> ApiError {
        ApiError {
            details: Some(details(kind, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", kind.group_resource()),
            )
        }
    }

    /// 409 for a stale `metadata.resourceVersion` on update.
    pub fn conflict(kind: &Kind, name: &str) -> ApiError {
        ApiError::conflict_because(
            kind,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict for `why` (a failed precondition, as the storage layer says it).
    pub fn conflict_because(kind: &Kind, name: &str, why: &str) -> ApiError {
        ApiError {
            details: Some(details(kind, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    kind.group_resource()
                ),
            )
        }
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> ApiError {
        Self::new(410, "Expired", message)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(400, "BadRequest", message)
    }

    /// 422 Invalid.
    pub fn invalid(kind: &Kind, name: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            details: Some(details(kind, name)),
            ..Self::new(422, "Invalid", message)
        }
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> ApiError {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden, as RBAC words it; `details` names the resource (and group, name).
    pub fn forbidden(message: String, resource: &str, group: &str, name: &str) -> ApiError {
        let mut d = json!({"kind": resource});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        if !name.is_empty() {
            d["name"] = json!(name);
        }
        ApiError {
            details: Some(d),
            ..Self::new(403, "Forbidden", message)
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> ApiError {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable() -> ApiError {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, \
             application/json;as=Table;v=v1;g=meta.k8s.io",
        )
    }

    /// 406 NotAcceptable from a legacy discovery document (`/api`, `/apis`), as the
    /// apiserver words it.
    pub fn discovery_not_acceptable() -> ApiError {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, \
             application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    /// 500 InternalError (used by fault switches such as a failing readyz).
    pub fn internal(message: impl Into<String>) -> ApiError {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// Reason phrase for the status line.
pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}
