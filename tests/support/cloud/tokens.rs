//! TokenRequests (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`), answered as
//! the apiserver answers them: 201 with the request's spec (audiences defaulted to the API's
//! own) and a status holding a new token and its expiry. Tokens are opaque random strings:
//! nothing here verifies them. Unlike the apiserver, any `expirationSeconds` is honoured (no
//! 10-minute floor), so tests can have a token that expires soon.

use serde_json::{Value, json};

use super::super::util::{new_uid, rfc3339, unix_now};
use super::status::ApiError;

/// The audience the apiserver gives a TokenRequest that names none.
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// Lifetime of a token whose request gives no `expirationSeconds`.
const DEFAULT_SECONDS: u64 = 3600;

/// The answer to a TokenRequest for `namespace/name` with this body.
pub fn token_request(namespace: &str, name: &str, body: &[u8]) -> Result<Value, ApiError> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let mut spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec.is_object() {
        return Err(ApiError::bad_request("spec must be an object"));
    }
    let audiences_empty = spec
        .get("audiences")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if audiences_empty {
        spec["audiences"] = json!([API_AUDIENCE]);
    }
    let seconds = spec
        .get("expirationSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_SECONDS);
    spec["expirationSeconds"] = seconds.into();
    let now = unix_now();
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(now)},
        "spec": spec,
        "status": {
            "token": format!("cloud-token-{}", new_uid()),
            "expirationTimestamp": rfc3339(now + seconds),
        },
    }))
}
