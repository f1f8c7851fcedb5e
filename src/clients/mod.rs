//! The hub's own clients of the cloud: background jobs that make requests of their own, on
//! the hub's credentials, through the same routing and upstream as any client, and feed what
//! they read to the cache. They sit above the cache, which knows nothing of them.
//!
//! - [`refill`]: fetches again the answers whose cache session the writer had to drop.
//! - [`agents_watch`]: keeps the cache-agent set in step with the `yurt-hub-cfg` ConfigMap.

pub(crate) mod agents_watch;
pub(crate) mod refill;

use std::fmt;
use std::io;

use crate::cache::decode::DecodeError;
use crate::route::NoCacheReason;
use crate::upstream::UpstreamError;

/// Why one request of a background client came to nothing; the job logs it and tries again
/// later (the next refill, the next list-then-watch round).
#[derive(Debug)]
pub(crate) enum ClientError {
    /// The hub's own rules refuse the request the job built (the text says which rule).
    Refused(String),
    /// Routing would not cache the answer, so there is nothing to fetch it for.
    NotCacheable(NoCacheReason),
    /// The exchange with the cloud failed.
    Upstream(UpstreamError),
    /// The cloud answered with another status than the job needs.
    Status(u16),
    /// Reading the answer's body failed.
    Read(io::Error),
    /// The answer is not the JSON it should be.
    Json(serde_json::Error),
    /// The watch stream could not be decoded.
    Decode(DecodeError),
    /// The answer is well-formed but not usable (the text says how).
    Answer(&'static str),
    /// The cache writer's queue stayed full.
    QueueFull,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Refused(why) => f.write_str(why),
            ClientError::NotCacheable(reason) => write!(f, "not cacheable: {}", reason.as_str()),
            ClientError::Upstream(e) => e.fmt(f),
            ClientError::Status(status) => write!(f, "the cloud answered {status}"),
            ClientError::Read(e) => e.fmt(f),
            ClientError::Json(e) => e.fmt(f),
            ClientError::Decode(e) => e.fmt(f),
            ClientError::Answer(why) => f.write_str(why),
            ClientError::QueueFull => f.write_str("the writer queue stayed full"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<UpstreamError> for ClientError {
    fn from(e: UpstreamError) -> ClientError {
        ClientError::Upstream(e)
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Read(e)
    }
}

#[cfg(test)]
mod tests;
