//! The fallback policy: which failure the cache may answer, and the status of the others.
//! Pure functions of the working mode, the route's local answer and where the failure came
//! from ([`Failure`]); the cloud's health comes through the [`Cloud`] trait.
//!
//! - Only edge mode answers from the cache, and only a request route gave a local answer.
//! - No server usable before sending: answered from the cache at once (a write still goes to
//!   a server suspect since a request failed, until its probe rules).
//! - A read answers from the cache whatever the cloud did (refused, timed out, broke off).
//! - A write (create, update, patch, delete, TokenRequest) only when it never left the hub:
//!   one that may have reached the cloud must not be answered as if it had not.
//! - A client whose body broke is answered with its own error (400, 408, 413), never from the
//!   cache; a request the hub could not build is a 500.

use crate::mode::WorkingMode;
use crate::route::Local;
use crate::status::Status;
use crate::upstream::{Cloud, UpstreamError};

/// Why a forwarded request failed, by origin.
#[derive(Debug)]
pub(super) enum Failure {
    /// The cloud could not be reached or broke off before the client got anything: the cache
    /// may answer.
    Cloud(UpstreamError),
    /// The client's body failed (malformed, stalled, too large): its own error.
    Client(Status),
    /// The hub could not build the request.
    Internal(Status),
}

/// What to answer after a failure.
#[derive(Debug)]
pub(super) enum Fallback {
    /// From the cache: the cloud failed so (for the log line).
    FromCache(UpstreamError),
    /// With this status.
    Answer(Status),
}

/// The hub answers from the cache without trying the cloud: edge mode, and no server usable.
/// A write still goes to a server healthy by its last probe, even one suspect since a request
/// failed: a write is never answered here while the cloud may take it. A request with no
/// local answer gains nothing from deciding early either: the cloud's own server choice
/// (writes to a suspect server, reads not) says whether it can go.
pub(super) fn offline(mode: WorkingMode, local: &Local, cloud: &dyn Cloud) -> bool {
    let online = if local.is_write() || *local == Local::Unavailable {
        cloud.any_probed_healthy()
    } else {
        cloud.any_healthy()
    };
    mode == WorkingMode::Edge && !online
}

/// Where a failed send came from. `body_failure` is the server's reading of the client's
/// body, when reading it failed: that, not the cloud, is then the cause.
pub(super) fn sort(error: UpstreamError, body_failure: Option<Status>) -> Failure {
    match (error, body_failure) {
        (_, Some(status)) => Failure::Client(status),
        (UpstreamError::ClientBody(detail), None) => Failure::Client(Status::bad_request(detail)),
        (UpstreamError::Request(detail), None) => Failure::Internal(Status::internal(detail)),
        (e, None) => Failure::Cloud(e),
    }
}

/// What to answer after `failure`, for a request whose local answer is `local`.
pub(super) fn after(mode: WorkingMode, local: &Local, failure: Failure) -> Fallback {
    let error = match failure {
        Failure::Cloud(error) => error,
        Failure::Client(status) | Failure::Internal(status) => return Fallback::Answer(status),
    };
    // A write that may have reached the cloud must not be answered as if it had not: the
    // client would believe a create or delete that happened, or one that did not.
    let answerable = mode == WorkingMode::Edge
        && *local != Local::Unavailable
        && (!local.is_write() || error.never_sent());
    if answerable {
        Fallback::FromCache(error)
    } else {
        Fallback::Answer(status_of(&error))
    }
}

/// The status of a cloud failure the cache does not answer: 504 for a timeout, else 503
/// (502 for a request the hub could not build; the 503 of a hub without credentials for
/// the cloud says so).
pub(super) fn status_of(error: &UpstreamError) -> Status {
    match error {
        UpstreamError::Transport { timeout: true, .. } => {
            Status::timeout(format!("the cloud did not answer in time: {error}"))
        }
        UpstreamError::Request(_) => Status::bad_gateway(error.to_string()),
        // Not that the cloud is down: the hub cannot talk to it yet, and says why.
        UpstreamError::NoCredentials(_) => Status::service_unavailable(error.to_string()),
        _ => Status::service_unavailable(format!("the cloud apiserver is unreachable: {error}")),
    }
}

#[cfg(test)]
mod tests;
