//! The hub's own short exchanges with one server, whatever its health (the health probe's and
//! the lease heartbeat's requests, on the hub's credentials), and the health probe made of them.
use std::io::Read;
use std::time::Duration;

use super::inflate;
use super::plain::{Head, Limits};
use super::token::TokenSource;
use super::{Exchanged, HUB_USER_AGENT, MAX_EXCHANGE_BODY, Upstream, UpstreamError};
use crate::health::{Probe, ProbeError};
use crate::link::{self, LINK};
use crate::request::Verb;

impl Upstream {
    /// `method path` (of `verb`, the link totals' key) against `base` (one server) with the
    /// hub's credentials, a body when
    /// given (its media type, JSON or a merge patch, and its bytes), bounded by `timeout` as
    /// a whole; `Err` when there is no answer (or it broke off while its body was read), by
    /// origin as the request path sees it.
    pub(crate) fn exchange_with(
        &self,
        base: &str,
        method: &str,
        verb: Verb,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<Exchanged, UpstreamError> {
        // No material yet: the server cannot be reached as the hub.
        let agents = self.current()?;
        let link = LINK.link(base, verb.as_str(), link::HUB_COMPONENT, path, false);
        let mut head = Head::new(method, base, path)?;
        head.add("user-agent", HUB_USER_AGENT)?;
        head.add("accept", "application/json")?;
        if inflate::ask_gzip() {
            // A Node with many images, a large Status: the link carries it compressed.
            head.add("accept-encoding", "gzip")?;
        }
        if let Some((content_type, bytes)) = &body {
            head.add("content-type", content_type)?;
            head.add("content-length", &bytes.len().to_string())?;
        }
        if let Some(token) = self.token.as_ref().and_then(TokenSource::current) {
            head.add("authorization", &format!("Bearer {token}"))?;
        }
        let mut bytes = body.as_ref().map_or(&[][..], |(_, b)| b.as_slice());
        let (answer, body) = agents.hub.exchange(
            base,
            &head.finish(),
            method == "HEAD",
            body.is_some()
                .then_some((&mut bytes as &mut dyn Read, false)),
            // Bounded by the whole exchange's time alone, not a read's.
            Limits::new(timeout, None),
            &mut |sent| link.request(sent),
        )?;
        // A 4xx or 5xx is an answer here, not an error.
        let status = answer.status;
        let encoding = answer.header("content-encoding").map(str::to_owned);
        let mut kept = Vec::new();
        // Read to the end (within the cap) so the connection goes back to the pool.
        let read = body.take(MAX_EXCHANGE_BODY).read_to_end(&mut kept);
        // The answer broke off after its head, or its gzip does not inflate: the server's
        // failure, after the request went. At most as many inflated bytes as plain ones.
        let broke_off = |e: std::io::Error| UpstreamError::Transport {
            server: base.to_owned(),
            detail: e.to_string(),
            timeout: matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            maybe_sent: true,
        };
        let encoding = encoding.as_ref().map(|v| v.as_bytes());
        if let Err(e) = read {
            link.received(kept.len() as u64, inflate::is_gzip(encoding));
            return Err(broke_off(e));
        }
        let body = inflate::plain_body(kept, encoding, MAX_EXCHANGE_BODY, Some(&link))
            .map_err(broke_off)?;
        Ok(Exchanged { status, body })
    }
}

impl Probe for Upstream {
    /// `GET /readyz` with the hub's credentials; a server without it (404) is asked
    /// `/healthz` instead. 2xx is healthy.
    fn probe(&self, base: &str, timeout: Duration) -> Result<(), ProbeError> {
        let mut status = 0;
        for path in ["/readyz", "/healthz"] {
            status = self
                .exchange_with(base, "GET", Verb::Other, path, None, timeout)
                .map_err(ProbeError::NoAnswer)?
                .status;
            if status != 404 {
                break;
            }
        }
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(ProbeError::Answered(status))
        }
    }
}
