//! Offline TokenRequests: the cached answer while its token is still valid, else a
//! one-minute token made by the hub (`tokens.rs`), never an empty one.

use super::{Answered, Offline, read_body, send_json};
use crate::cache::key::TokenKey;
use crate::request::{ApiRequest, ResourcePath};
use crate::server::Exchange;
use crate::status::Status;
use crate::tokens::{self, TokenSpec};

impl Offline {
    /// A TokenRequest: 201 with the cached answer while its token is valid for at least
    /// [`tokens::MIN_VALIDITY`] by its own `exp` (said to expire in a minute, so kubelet keeps
    /// asking), else with a token made here that expires in a minute —
    /// never an empty token (YurtHub's `pkg/yurthub/proxy/local/faketoken.go`). Nothing is written.
    pub(super) fn token<'c>(
        &self,
        mut ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
    ) -> Answered<'c> {
        let (Some(namespace), Some(name)) = (path.namespace.as_deref(), path.name.as_deref())
        else {
            return Err((ex, Status::bad_request("no service account named")));
        };
        let body = match read_body(&mut ex, tokens::MAX_REQUEST_BYTES as u64 + 1) {
            Ok(body) => body,
            Err(status) => return Err((ex, status)),
        };
        let spec = match TokenSpec::parse(&body) {
            Some(spec) if body.len() <= tokens::MAX_REQUEST_BYTES => spec,
            _ => {
                return Err((
                    ex,
                    Status::bad_request("the request body is not a TokenRequest"),
                ));
            }
        };
        // A token is answered only to a valid component (`route::Local::Token`).
        let Some(component) = req.component.valid() else {
            return Err((
                ex,
                Status::service_unavailable(
                    "the cloud apiserver is unreachable and this client has no cache",
                ),
            ));
        };
        let key = TokenKey {
            component: component.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            digest: spec.digest(),
        };
        let now = crate::unix_now();
        let why = match self.store.get_token(&key) {
            Ok(Some(cached)) => match tokens::offline_answer(&cached, now) {
                Some(answer) => return send_json(ex, 201, &answer, None),
                None => "the cached token expires within a minute",
            },
            Ok(None) => "no token is cached for this audience set",
            Err(e) => {
                log::warn!("reading the cached token of {namespace}/{name}: {e}");
                "the cached token cannot be read"
            }
        };
        let Some(answer) = tokens::local_answer(namespace, name, &spec, now) else {
            return Err((
                ex,
                Status::service_unavailable(
                    "the cloud apiserver is unreachable and the hub cannot make a token (no random source)",
                ),
            ));
        };
        log::info!(
            "offline TokenRequest for serviceaccount {namespace}/{name}: {why}; answering with a one-minute token made by the hub"
        );
        send_json(ex, 201, &answer, None)
    }
}
