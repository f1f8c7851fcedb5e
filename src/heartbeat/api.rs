//! [`LeaseApi`] over one cloud server, with the hub's credentials ([`Upstream::exchange_with`]):
//! what a renewal asks of the server it probes, each request bounded by the heartbeat timeout
//! and telling the apiserver the same through `?timeout=`, as client-go does.
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::lease::{LEASE_NAMESPACE, is_node_lease, lease_path, node_path};
use super::renew::{LeaseApi, LeaseError};
use crate::request::Verb;
use crate::upstream::{Exchanged, Upstream};

/// The lease requests of this node against the server at `base`.
pub(crate) struct ServerLeaseApi {
    upstream: Arc<Upstream>,
    base: String,
    node: String,
    timeout: Duration,
}

impl ServerLeaseApi {
    /// Requests of node `node` to `base` (one `--server-addr`), each within `timeout`.
    pub(crate) fn new(
        upstream: Arc<Upstream>,
        base: String,
        node: String,
        timeout: Duration,
    ) -> ServerLeaseApi {
        ServerLeaseApi {
            upstream,
            base,
            node,
            timeout,
        }
    }

    fn send(
        &self,
        method: &str,
        verb: Verb,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Exchanged, LeaseError> {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        // The apiserver gives up when the hub does (client-go adds the same).
        let path = format!("{path}?timeout={}s", self.timeout.as_secs().max(1));
        self.upstream
            .exchange_with(&self.base, method, verb, &path, body, self.timeout)
            .map_err(LeaseError::Transport)
    }

    /// `answer` when it is this node's Lease: anything else would become the base of the
    /// next renewal, kubelet's answers and the disk copy.
    fn checked(&self, answer: Value) -> Result<Value, LeaseError> {
        if is_node_lease(&answer, &self.node) {
            Ok(answer)
        } else {
            Err(LeaseError::Unreadable {
                code: 200,
                message: format!(
                    "the answer is not the Lease of node {}: {}",
                    self.node,
                    answer.to_string().chars().take(200).collect::<String>()
                ),
            })
        }
    }
}

impl LeaseApi for ServerLeaseApi {
    fn get_lease(&self) -> Result<Option<Value>, LeaseError> {
        match found(self.send("GET", Verb::Get, &lease_path(&self.node), None)?)? {
            Some(lease) => self.checked(lease).map(Some),
            None => Ok(None),
        }
    }

    fn create_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
        let collection =
            format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases");
        self.checked(stored(self.send(
            "POST",
            Verb::Create,
            &collection,
            Some(lease),
        )?)?)
    }

    fn update_lease(&self, lease: &Value) -> Result<Value, LeaseError> {
        self.checked(stored(self.send(
            "PUT",
            Verb::Update,
            &lease_path(&self.node),
            Some(lease),
        )?)?)
    }

    fn get_node(&self) -> Result<Option<Value>, LeaseError> {
        found(self.send("GET", Verb::Get, &node_path(&self.node), None)?)
    }
}

/// A GET's answer: the object, None on 404.
fn found(answer: Exchanged) -> Result<Option<Value>, LeaseError> {
    if answer.status == 404 {
        return Ok(None);
    }
    stored(answer).map(Some)
}

/// A 2xx answer's object, else the error its status means.
fn stored(answer: Exchanged) -> Result<Value, LeaseError> {
    match answer.status {
        200..=299 => serde_json::from_slice(&answer.body).map_err(|e| LeaseError::Unreadable {
            code: answer.status,
            message: format!("the answer is not JSON: {e}"),
        }),
        code => Err(error_of(code, &answer.body)),
    }
}

/// The [`LeaseError`] of a failed answer, with the Status message when the body is one.
fn error_of(code: u16, body: &[u8]) -> LeaseError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            text.chars().take(200).collect()
        });
    match code {
        409 => LeaseError::Conflict(message),
        404 => LeaseError::NotFound(message),
        403 => LeaseError::Forbidden(message),
        code => LeaseError::Status { code, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Exchanged {
        Exchanged {
            status,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn statuses_become_the_errors_a_renewal_acts_on() {
        let status = |code: u16, message: &str| {
            format!(r#"{{"kind":"Status","code":{code},"message":"{message}"}}"#)
        };
        assert_eq!(
            stored(answer(409, &status(409, "the object has been modified"))),
            Err(LeaseError::Conflict("the object has been modified".into()))
        );
        assert_eq!(
            stored(answer(403, &status(403, "can only access node lease"))),
            Err(LeaseError::Forbidden("can only access node lease".into()))
        );
        assert_eq!(
            stored(answer(404, &status(404, "not found"))),
            Err(LeaseError::NotFound("not found".into()))
        );
        assert_eq!(
            stored(answer(503, "upstream connect error")),
            Err(LeaseError::Status {
                code: 503,
                message: "upstream connect error".into()
            })
        );
        // A GET's 404 is no error: the lease or Node is absent.
        assert_eq!(found(answer(404, &status(404, "not found"))), Ok(None));
        let lease = r#"{"kind":"Lease","metadata":{"name":"edge-1","resourceVersion":"7"}}"#;
        assert_eq!(
            found(answer(200, lease)).map(|l| l.map(|l| l["metadata"]["resourceVersion"].clone())),
            Ok(Some(Value::from("7")))
        );
        let unreadable = stored(answer(200, "<html>"));
        assert!(
            matches!(unreadable, Err(LeaseError::Unreadable { code: 200, .. })),
            "{unreadable:?}"
        );
        let text = unreadable.unwrap_err().to_string();
        assert!(
            text.starts_with("HTTP 200: the answer is not JSON: "),
            "{text}"
        );
    }
}
