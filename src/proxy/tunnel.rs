//! Connection upgrades (exec, attach, port-forward, `kubectl cp`; any upgrade in cloud
//! mode): passed to the cloud on a connection of their own with the credentials the trust
//! rules give the client (`route::Identity`), the cloud's `101 Switching Protocols` passed
//! back with its headers, then the bytes both ways (`tunnel::splice`) until either side
//! has closed and the other has followed. Never cached, never filtered: no `Route` is
//! built. One log line per tunnel, with the bytes each way and how it ended.
//!
//! | situation | answer |
//! |---|---|
//! | no `Upgrade` header, or a request body that is not empty | 400 |
//! | no cloud server usable | 503: exec, attach and port-forward need the cloud |
//! | the cloud does not answer the upgrade in time | 504 |
//! | the cloud answers other than 101 | its answer, as it is (kubectl falls back to SPDY) |

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Hub;
use super::call::labels;
use super::fallback::status_of;
use crate::metrics::METRICS;
use crate::request::{self, ApiRequest};
use crate::requester::Requester;
use crate::route::Identity;
use crate::server::Exchange;
use crate::status::Status;
use crate::tunnel::{self, Spliced};
use crate::upstream::{TunnelRequest, UpstreamError, is_framing_header, is_hop_by_hop};

/// What an upgrade request is, for the plan: classified (its log line names it) or, in
/// cloud mode, passed on unread; and who sent it.
pub(super) struct Upgrade {
    /// The request, when the classifier understood it.
    pub req: Option<ApiRequest>,
    /// Who sent it.
    pub requester: Requester,
}

/// How one upgrade ended, for its log line.
struct Outcome {
    status: u16,
    spliced: Option<Spliced>,
}

impl Hub {
    /// Answers the upgrade request on `ex`: refused, relayed, or tunnelled to its end.
    pub(super) fn tunnel(&self, upgrade: &Upgrade, ex: Exchange<'_>, started: Instant) {
        let _in_flight = upgrade
            .req
            .as_ref()
            .map(|req| METRICS.start_request(labels(req)));
        let url = request::truncate(ex.url()).to_owned();
        let outcome = self.open(upgrade, ex);
        log_line(upgrade, &url, &outcome, started);
    }

    fn open(&self, upgrade: &Upgrade, mut ex: Exchange<'_>) -> Outcome {
        let refuse = |ex: Exchange<'_>, status: Status| {
            log::debug!("upgrade refused: {}", status.message);
            let _ = ex.send_status(&status);
            Outcome {
                status: status.code,
                spliced: None,
            }
        };
        if ex.header("upgrade").is_none_or(|p| p.trim().is_empty()) {
            return refuse(
                ex,
                Status::bad_request("a connection upgrade needs an Upgrade header"),
            );
        }
        // An empty body is no body (a client may frame it chunked); the first byte of
        // one is a refusal: after its head, the connection is the new protocol's.
        if ex.has_body() && !matches!(ex.body().read(&mut [0u8; 1]), Ok(0)) {
            return refuse(
                ex,
                Status::bad_request("a connection upgrade carries no request body"),
            );
        }
        let opened = self.cloud.open_tunnel(&TunnelRequest {
            method: ex.method(),
            verb: upgrade
                .req
                .as_ref()
                .map_or(crate::request::Verb::Other, |r| r.verb),
            target: ex.url(),
            headers: ex.headers(),
            identity: Identity::of(&upgrade.requester),
            answer: self.tunnel.answer,
        });
        let mut opened = match opened {
            Ok(opened) => opened,
            Err(UpstreamError::NoHealthyBackend) => {
                return refuse(
                    ex,
                    Status::service_unavailable(
                        "the cloud apiserver is unreachable: exec, attach and port-forward need it",
                    ),
                );
            }
            Err(e) => {
                log::info!("opening a tunnel failed: {e}");
                return refuse(ex, status_of(&e));
            }
        };
        let status = opened.head.status;
        if status != 101 {
            // Relayed as it is, body and all: kubectl falls back from WebSocket to SPDY on
            // any answer but a 101, and shows a refusal's Status.
            let body = match opened.read_body() {
                Ok(body) => body,
                Err(e) => {
                    return refuse(
                        ex,
                        Status::bad_gateway(format!(
                            "the cloud's answer to the upgrade broke off: {e}"
                        )),
                    );
                }
            };
            let headers: Vec<(&str, &str)> = opened
                .head
                .headers
                .iter()
                .filter(|(name, _)| !is_hop_by_hop(name))
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let _ = ex.send(status, &headers, &body);
            return Outcome {
                status,
                spliced: None,
            };
        }
        // The 101 with the cloud's headers (its Upgrade, Connection, protocol and
        // WebSocket accept headers), and no framing: what follows is the new protocol's.
        let headers: Vec<(&str, &str)> = opened
            .head
            .headers
            .iter()
            .filter(|(name, _)| !is_framing_header(name))
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let mut upgraded = match ex.upgrade(&headers) {
            Ok(upgraded) => upgraded,
            Err(e) => {
                log::debug!("the client went away before its 101: {e}");
                return Outcome {
                    status,
                    spliced: None,
                };
            }
        };
        let spliced = (|| {
            let (early, client) = upgraded.end()?;
            let cloud = opened.end.for_splice()?;
            let stop = || self.shutdown.load(Ordering::Relaxed);
            Ok::<_, std::io::Error>(tunnel::splice(
                client,
                early,
                cloud,
                &opened.early,
                self.tunnel.idle,
                &stop,
            ))
        })();
        match spliced {
            Ok(spliced) => Outcome {
                status,
                spliced: Some(spliced),
            },
            Err(e) => {
                log::info!("a tunnel could not start: {e}");
                Outcome {
                    status,
                    spliced: None,
                }
            }
        }
    }
}

/// The one line of a tunnel: who, what, the bytes each way and how it ended. At info:
/// tunnels are few and long, and what a node's operator looks for after an exec.
fn log_line(upgrade: &Upgrade, url: &str, outcome: &Outcome, started: Instant) {
    let (verb, resource, component) = match &upgrade.req {
        Some(req) => (
            req.verb.as_str(),
            match &req.target {
                request::Target::Resource(r) => r.gvr.resource.as_str(),
                request::Target::NonResource(p) => p.as_str(),
            },
            req.component.to_string(),
        ),
        // The path only: an exec's query holds its command's arguments, which can be
        // secrets, and info lines are kept.
        None => (
            "unknown",
            url.split_once('?').map_or(url, |(path, _)| path),
            String::new(),
        ),
    };
    let (up, down, how) = outcome
        .spliced
        .map_or((0, 0, "none"), |s| (s.up, s.down, s.how.as_str()));
    log::info!(
        "verb={verb} resource=\"{resource}\" component=\"{component}\" port={} credential={} status={} cache=tunnel up={up} down={down} ended={how} duration={:?}",
        upgrade.requester.port.as_str(),
        upgrade.requester.credential.as_str(),
        outcome.status,
        started.elapsed()
    );
}
