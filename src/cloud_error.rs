//! Why an exchange with a cloud server failed, by origin: [`UpstreamError`]. The request path
//! (`proxy/fallback.rs` decides from it whether the cache may answer), the health probe, the
//! node heartbeat and the response filters' lookups all judge a failure by it, never by its
//! text. `upstream` makes it from ureq's errors; this leaf names no other module, so the
//! modules below `upstream` (`health`, `filters`) can name it in their traits.

use std::fmt;

/// Why a request did not get an answer from the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpstreamError {
    /// Every backend is unhealthy.
    NoHealthyBackend,
    /// Connecting, sending or waiting for the answer failed: the cloud is unreachable or slow.
    Transport {
        /// The backend tried last.
        server: String,
        /// What happened.
        detail: String,
        /// It was a timeout.
        timeout: bool,
        /// The request may have reached the cloud (it failed after connecting), so a write
        /// may have been applied.
        maybe_sent: bool,
    },
    /// The hub could not build the request (a bug or a header ureq refuses).
    Request(String),
    /// Reading the client's request body failed (malformed, stalled, too large): the
    /// client's error, not the cloud's. The cloud never got the request whole.
    ClientBody(String),
    /// The request's time ran out while the client's body was still arriving: the client's
    /// delay, not the cloud's. The cloud never got the request whole.
    ClientTooSlow(String),
    /// The hub has no TLS material for the cloud yet (token mode before discovery or the
    /// first certificate): nothing is sent, under any identity.
    NoCredentials(String),
}

impl UpstreamError {
    /// True when the request certainly did not reach the cloud.
    pub(crate) fn never_sent(&self) -> bool {
        match self {
            UpstreamError::NoHealthyBackend | UpstreamError::NoCredentials(_) => true,
            UpstreamError::Transport { maybe_sent, .. } => !maybe_sent,
            UpstreamError::Request(_)
            | UpstreamError::ClientBody(_)
            | UpstreamError::ClientTooSlow(_) => true,
        }
    }
}

impl UpstreamError {
    /// Whether it is a TLS handshake refusing (a certificate for another address or CA, no
    /// client certificate accepted): the peer listens, so to a leader hub's prober and
    /// feeders it is a refusal of this node, not an unreachable leader.
    pub(crate) fn is_tls_refusal(&self) -> bool {
        // Only a failed exchange: `NoCredentials` names certificates too, but nothing was sent.
        let UpstreamError::Transport { detail, .. } = self else {
            return false;
        };
        let text = detail.to_ascii_lowercase();
        ["certificate", "rustls", "alert", "handshake"]
            .iter()
            .any(|w| text.contains(w))
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::NoHealthyBackend => f.write_str("no cloud server is healthy"),
            UpstreamError::Transport { server, detail, .. } => write!(f, "{server}: {detail}"),
            UpstreamError::Request(detail) => write!(f, "cannot build the request: {detail}"),
            UpstreamError::ClientBody(detail) => {
                write!(f, "reading the client's request body failed: {detail}")
            }
            UpstreamError::ClientTooSlow(detail) => write!(
                f,
                "the client's request body did not arrive within the request's time: {detail}"
            ),
            UpstreamError::NoCredentials(why) => {
                write!(f, "the hub has no credentials for the cloud yet: {why}")
            }
        }
    }
}

impl std::error::Error for UpstreamError {}

impl UpstreamError {
    /// The failure without the server's name, for a line that names the server already
    /// (a probe's log line): a transport failure's detail, the whole text otherwise.
    pub(crate) fn without_server(&self) -> WithoutServer<'_> {
        WithoutServer(self)
    }
}

/// [`UpstreamError::without_server`]'s text.
pub(crate) struct WithoutServer<'e>(&'e UpstreamError);

impl fmt::Display for WithoutServer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            UpstreamError::Transport { detail, .. } => f.write_str(detail),
            other => other.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_failure_names_its_server_unless_the_line_does() {
        let refused = UpstreamError::Transport {
            server: "https://10.0.0.1:6443".into(),
            detail: "io: Connection refused".into(),
            timeout: false,
            maybe_sent: false,
        };
        assert_eq!(
            refused.to_string(),
            "https://10.0.0.1:6443: io: Connection refused"
        );
        assert_eq!(
            refused.without_server().to_string(),
            "io: Connection refused"
        );
        let none = UpstreamError::NoCredentials("no CA yet".into());
        assert_eq!(
            none.without_server().to_string(),
            "the hub has no credentials for the cloud yet: no CA yet"
        );
    }
}
