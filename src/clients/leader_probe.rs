//! The follower's probe of its pool leaders (issue 32, "only fresh leaders"): a GET of the
//! leader's `/v1/pool/freshness` on its multiplexer port (`proxy::multiplexer`), which tells
//! whether it reaches the cloud and how long ago its cloud watch of each pool-scope resource
//! last brought an event or a bookmark. `pool::health` judges the answer.
//!
//! Design decisions:
//! - **Over the feeders' own client** (`Upstream::send_to_base`: the hub's client
//!   certificate, the leader's certificate checked against the cluster CA and its IP, pooled
//!   connections kept 85 s, so a probe every 20 s costs no handshake), with a 2 s deadline.
//! - **What an answer means**: a TLS refusal = reachable, freshness unknown (the feeders'
//!   refusal backoff governs the leader, and `pool::health` only dials a leader that
//!   refused this node until it serves it again); any other failure (no credentials yet, no
//!   answer within the 2 s, a broken connection) = the TCP dial YurtHub makes decides, never
//!   stricter than it: a loaded leader is not dead. One that listens but did not answer in
//!   time is [`Probe::Slow`] (`pool::health` asks one not yet known to tell no more: a
//!   YurtHub leader forwarding the path to its cloud over a slow link). A status other than
//!   200 (a tinyhub leader answers 200, or 403 to a node it does not serve; a YurtHub
//!   leader forwards the path to its cloud, which may answer 404, 401, 429, 5xx) or a whole
//!   body that is not the freshness JSON = it does not tell, asked no more until the leader
//!   list changes. A 200 whose body breaks off = reachable, unknown this time.
//! - Memory: the answer is read up to 64 KiB (a few dozen bytes per pool-scope resource).

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::pool::health::{DIAL_TIMEOUT, Freshness, Probe, Prober, TcpDialer, leader_url};
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
            // Reachable; the feeders' own requests set it aside for their backoff.
            Err(e) if e.is_tls_refusal() => return Probe::Reachable,
            // No answer in time (a loaded leader; a YurtHub leader forwarding the path to
            // its cloud over a slow link), no certificate yet, a broken connection: whether
            // it listens is all this round learns, as the TCP dial YurtHub makes.
            Err(e) => {
                log::debug!("the freshness probe of the leader hub {addr} failed: {e}");
                let timeout = matches!(e, UpstreamError::Transport { timeout: true, .. });
                return match TcpDialer.probe(addr, false) {
                    Probe::Reachable if timeout => Probe::Slow,
                    probe => probe,
                };
            }
        };
        if answer.status != 200 {
            // A tinyhub leader answers this path 200, or 403 to a node it does not serve:
            // anything else (404, a 401, 429 or 5xx of a cloud a YurtHub leader forwarded
            // the path to) is from a leader that does not tell.
            return Probe::Silent;
        }
        let mut body = Vec::new();
        match (&mut answer.body).take(MAX_ANSWER).read_to_end(&mut body) {
            // Cut off: it tells, but this answer did not arrive whole.
            Err(e) => {
                log::debug!("the freshness answer of the leader hub {addr} broke off: {e}");
                Probe::Reachable
            }
            Ok(_) => Freshness::parse(&body).map_or(Probe::Silent, Probe::Told),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;
    use crate::clients::pool_watch::tests::{Fake, upstream_of};
    use crate::server::tls::tests::TestCa;

    const TOLD: &str = r#"{"cloud":true,"resources":[{"resource":"services.v1.core","ageSeconds":3,"bookmarks":true}]}"#;

    /// The probe's answers, in order, from a leader answering `script`.
    fn probes(script: &[(u16, &'static str)]) -> Vec<Probe> {
        let ca = TestCa::new();
        let leader = Fake::start(&ca, "127.0.0.1", script);
        let probe = LeaderProbe {
            upstream: upstream_of(&ca, None),
            user_agent: "multiplexer-proxy-edge-2".into(),
        };
        script
            .iter()
            .map(|_| probe.probe(leader.addr, true))
            .collect()
    }

    #[test]
    fn a_leader_tells_or_does_not_by_its_whole_answer() {
        let probes = probes(&[
            (200, TOLD),
            (200, "<html>"),
            (404, "{}"),
            (403, "{}"),
            // A YurtHub leader's cloud, the path forwarded to it.
            (401, "{}"),
            (429, "{}"),
            (503, "{}"),
            (3, TOLD),
        ]);
        let Probe::Told(told) = &probes[0] else {
            panic!("{probes:?}");
        };
        assert_eq!(
            told.resources[0].age,
            Some(std::time::Duration::from_secs(3))
        );
        assert!(
            probes[1..7].iter().all(|p| *p == Probe::Silent),
            "{probes:?}"
        );
        assert_eq!(probes[7], Probe::Reachable, "broken off: unknown this time");
    }

    #[test]
    fn a_leader_that_listens_but_does_not_answer_in_time_is_slow_not_unreachable() {
        assert_eq!(probes(&[(2, "")]), [Probe::Slow]);
        // Nothing listens: unreachable.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let probe = LeaderProbe {
            upstream: upstream_of(&TestCa::new(), None),
            user_agent: "multiplexer-proxy-edge-2".into(),
        };
        assert_eq!(probe.probe(closed, true), Probe::Unreachable);
    }
}
