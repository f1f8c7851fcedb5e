//! The follower's probe of its pool leaders (issue 32, "only fresh leaders"): a GET of the
//! leader's `/v1/pool/freshness` on its multiplexer port (`proxy::multiplexer`), which tells
//! whether it reaches the cloud and how long ago its cloud watch of each pool-scope resource
//! last brought an event or a bookmark. `pool::health` judges the answer.
//!
//! Design decisions:
//! - **Over the feeders' own client** (`Upstream::send_to_base`: the hub's client
//!   certificate, the leader's certificate checked against the cluster CA and its IP, pooled
//!   connections kept 85 s, so a probe every 20 s costs no handshake), with a 2 s deadline.
//! - **What an answer means**: no connection = unreachable; no credentials yet = a TCP dial
//!   instead; a TLS refusal = reachable, freshness unknown (the feeders' refusal backoff
//!   governs the leader, and `pool::health` only dials a leader that refused this node
//!   until it serves it again); 404, 403 or a body that is not the freshness JSON (a
//!   YurtHub leader, an older tinyhub) = it does not tell, and `pool::health` asks no more
//!   until the leader list changes (a YurtHub leader would forward the path to its cloud).
//!   Another status (a 5xx, a 429 of a full port) = reachable, unknown this time.
//! - Memory: the answer is read up to 64 KiB (a few dozen bytes per pool-scope resource).

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::pool::health::{DIAL_TIMEOUT, Dialer, Freshness, Probe, Prober, TcpDialer, leader_url};
use crate::proxy::multiplexer::FRESHNESS_PATH;
use crate::route::{Deadline, Identity};
use crate::upstream::{Outgoing, Upstream, UpstreamError};

/// The most of an answer read.
const MAX_ANSWER: u64 = 64 * 1024;

/// The real [`Prober`]: the freshness GET, as the hub, with `user_agent`
/// (`multiplexer-proxy-<node>`).
pub(crate) struct LeaderProbe {
    /// The client the feeders use.
    pub upstream: Arc<Upstream>,
    /// The multiplexer's User-Agent.
    pub user_agent: String,
}

impl Prober for LeaderProbe {
    fn probe(&self, addr: SocketAddr, ask: bool) -> Probe {
        if !ask {
            return TcpDialer.probe(addr, false);
        }
        let headers = [("User-Agent".to_owned(), self.user_agent.clone())];
        let outgoing = Outgoing {
            method: "GET",
            verb: crate::request::Verb::Get,
            path_and_query: FRESHNESS_PATH,
            headers: &headers,
            accept: Some("application/json"),
            body: None,
            deadline: Deadline::Bounded(DIAL_TIMEOUT),
            identity: Identity::Hub,
            affinity: None,
            encoding: crate::upstream::Encoding::AsClient,
        };
        let mut answer = match self.upstream.send_to_base(&leader_url(addr), outgoing) {
            Ok(answer) => answer,
            // No certificate yet to ask with: whether it listens is all there is to know.
            Err(UpstreamError::NoCredentials(_)) => {
                return if TcpDialer.reachable(addr, DIAL_TIMEOUT) {
                    Probe::Reachable
                } else {
                    Probe::Unreachable
                };
            }
            // Reachable; the feeders' own requests set it aside for their backoff.
            Err(e) if tls_refusal(&e) => return Probe::Reachable,
            Err(e) => {
                log::debug!("the freshness probe of the leader hub {addr} failed: {e}");
                return Probe::Unreachable;
            }
        };
        let mut body = Vec::new();
        let read = (&mut answer.body).take(MAX_ANSWER).read_to_end(&mut body);
        match answer.status {
            200 => match read.ok().and_then(|_| Freshness::parse(&body)) {
                Some(freshness) => Probe::Told(freshness),
                None => Probe::Silent,
            },
            403 | 404 => Probe::Silent,
            _ => Probe::Reachable,
        }
    }
}

/// Whether a failure is the TLS handshake refusing (the leader listens: reachable).
fn tls_refusal(e: &UpstreamError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    ["certificate", "rustls", "alert", "handshake"]
        .iter()
        .any(|w| text.contains(w))
}
