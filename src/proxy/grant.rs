//! Read grants on the request path (issue 28; `cache/grants.rs`): what the cloud answered
//! 200 to a client's own credential is recorded, and the node's shared watch caches serve a
//! client with its own credential once the cloud accepted it for that scope. Edge mode
//! only: the grants live beside the offline answerer, which reads them.

use std::sync::Arc;

use super::Hub;
use crate::cache::grants::{self, Reach};
use crate::offline::scope_of;
use crate::request::ApiRequest;
use crate::requester::Credential;

/// The cloud answered `status` to `req`, which carried `authorization`: on a 200 to a get,
/// list or watch of a resource (not a subresource) with the client's own credential, the
/// credential may read that scope from the cache, offline too, until its token expires.
pub(super) fn record(hub: &Hub, req: &ApiRequest, authorization: Option<&str>, status: u16) {
    let (Some(offline), Some(authorization)) = (hub.offline.as_ref(), authorization) else {
        return;
    };
    let Credential::Authorization { digest } = &req.requester.credential else {
        return;
    };
    if status != 200 || req.resource().is_none_or(|r| r.subresource.is_some()) {
        return;
    }
    let Some(scope) = scope_of(req) else {
        return;
    };
    let now = crate::unix_now();
    let grants = &offline.grants;
    grants.record(digest, scope, grants::expiry_of(authorization, now), now);
    if grants.take_persist_turn() {
        let queued = hub
            .cache
            .as_ref()
            .is_some_and(|cache| cache.persist_grants(Arc::clone(grants)));
        if !queued {
            // The queue is full: the next change asks again.
            grants.not_queued();
        }
    }
}

/// `req` may be answered from the node's shared watch caches: it is the node's, or its own
/// credential listed this scope (or a covering one) from the cloud and the grant holds.
pub(super) fn may_use_pool(hub: &Hub, req: &ApiRequest) -> bool {
    if req.requester.is_node() {
        return true;
    }
    let (Some(offline), Credential::Authorization { digest }) =
        (hub.offline.as_ref(), &req.requester.credential)
    else {
        return false;
    };
    scope_of(req).is_some_and(|scope| {
        matches!(scope.reach, Reach::List { .. })
            && offline
                .grants
                .allows_list(digest, &scope, crate::unix_now())
    })
}
