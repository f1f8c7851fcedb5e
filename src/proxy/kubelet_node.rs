//! kubelet's `GET` of this node (edge mode; YurtHub's `pkg/yurthub/proxy/autonomy`): the node
//! goes back to kubelet with its `Autonomy` condition as `autonomy.rs` wants it, and a change
//! is written to the cloud.
//!
//! Online the GET goes as any forwarded one (the node's identity, the route's `Accept`) and
//! its answer, a few KiB, is read whole. When the condition must change, the node's status is
//! PUT with the hub's identity (a 409 reads the node again and tries again, 5 tries in all, as
//! YurtHub); kubelet gets the node the PUT answered, or, when the PUT failed, the cloud's node
//! with the condition set (one log line). The writes share one budget: kubelet's own
//! `timeout` (10 s when it names none) from its GET's arrival, less a second for the answer;
//! when it runs out, kubelet gets the node unwritten, as after a failed PUT, rather than
//! nothing in time. The cache keeps the cloud's node only: the PUT's answer, or the node the
//! GET read. YurtHub answers from its cache first and asks the cloud only after; tinyhub
//! answers the cloud's node. An answer that is not a 200 in plain JSON is relayed as any
//! forwarded GET's (`relay.rs`); a failure before kubelet got anything falls back as any
//! (`call.rs`), to the offline answer below.
//!
//! Offline kubelet gets the cached node with the condition set in its answer only: nothing is
//! stored and nothing is sent (YurtHub answers 500 when the condition would change). No
//! cached node: the offline answer any GET gets.

mod autonomy;

use std::fmt;
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use self::autonomy::{Setting, Wanted};
use super::call::Call;
use super::fallback::Failure;
use super::relay::{self, Traffic};
use super::{CacheStatus, Hub};
use crate::cache::key::ObjectKey;
use crate::cache::object::ObjectHead;
use crate::cache::writer::failing_keys;
use crate::metrics::METRICS;
use crate::mode::WorkingMode;
use crate::offline;
use crate::request::{ApiRequest, Verb};
use crate::route::{self, Deadline, Identity, Route};
use crate::server::Exchange;
use crate::upstream::{BodySource, HUB_USER_AGENT, Outgoing, UpstreamError};

/// Largest node read whole: etcd keeps objects up to 1.5 MiB, so any real node fits.
const MAX_NODE_BYTES: u64 = 4 * 1024 * 1024;
/// PUTs of the condition per GET, the first included (YurtHub's `nodeStatusUpdateRetry`).
const WRITE_TRIES: usize = 5;
/// kubelet's time for its GET when its `timeout` names none (client-go sends `timeout=10s`,
/// and kubelet's heartbeat gives up after about that).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time kept back from kubelet's: the answer must still reach kubelet once the write phase
/// ends.
const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// `req` is kubelet's GET of this node, routed to the cache: the GET whose answer carries the
/// Autonomy condition. A route with response filters keeps the ordinary path (none filters
/// nodes today).
pub(super) fn is_kubelet_node(hub: &Hub, req: &ApiRequest, route: &Route) -> bool {
    let Some(path) = req.resource() else {
        return false;
    };
    hub.mode == WorkingMode::Edge
        && req.requester.is_node()
        && req.component.as_str() == "kubelet"
        && req.verb == Verb::Get
        && path.gvr.group.is_empty()
        && path.gvr.version == "v1"
        && path.gvr.resource == "nodes"
        && path.namespace.is_none()
        && path.subresource.is_none()
        && !path.extra_path
        && path.name.as_deref() == Some(&*hub.node_name)
        && route.cache.is_ok()
        && route.filters.is_empty()
}

/// What the cloud holds after the condition was written, or not.
enum Written {
    /// The cloud's node with the condition: the PUT's answer, or a node read again that
    /// already had it.
    Stored(Vec<u8>),
    /// The write failed: the last node read from the cloud, and it with the condition set.
    Unwritten { cloud: Vec<u8>, answer: Vec<u8> },
}

impl Call<'_> {
    /// Online: forwards kubelet's GET, sets the condition, writes a change to the cloud, and
    /// answers (see the module's text).
    pub(super) fn forward_node(&mut self, mut ex: Exchange<'_>) {
        let write_by = self.write_by();
        // kubelet asks for gzip, so the hub does too: the node is read plain, as the filters read.
        let mut answer = match self.send(&mut ex, None) {
            Ok(answer) => answer.inflate(None),
            Err(failure) => return self.fall_back(ex, failure, Call::answer_node_locally),
        };
        let readable = answer.status == 200
            && answer.is_json()
            && answer.header("content-encoding").is_none()
            && answer.length.is_none_or(|l| l <= MAX_NODE_BYTES);
        if !readable {
            return self.hand_on(ex, answer, None, Call::answer_node_locally);
        }
        // Counted as the relay counts the cloud's bytes of a forwarded answer.
        let read = {
            let mut traffic = Traffic(self.in_flight.as_ref(), 0);
            let limit = MAX_NODE_BYTES;
            relay::read_small(&mut answer.body, answer.length, limit, &mut traffic.1)
                .and_then(|bytes| within(bytes, limit))
        };
        let cloud = match read {
            Ok(cloud) => cloud,
            Err(e) => {
                let error = self.broken_answer(&answer, &e);
                return self.fall_back(ex, Failure::Cloud(error), Call::answer_node_locally);
            }
        };
        let headers: Vec<(String, String)> = std::mem::take(&mut answer.headers)
            .into_iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length"))
            .collect();
        let mut node = match serde_json::from_slice::<Value>(&cloud) {
            Ok(node) if node.is_object() => node,
            // Not a node: passed as it came (the writer judges it as it would have).
            _ => return self.answer_node(ex, &headers, cloud, None),
        };
        let now = now_rfc3339();
        let changed = self
            .wanted(&node)
            .filter(|wanted| autonomy::apply(&mut node, wanted, &now));
        let Some(wanted) = changed else {
            return self.answer_node(ex, &headers, cloud, None);
        };
        match self.write_condition(cloud, node, &wanted, &now, write_by) {
            Written::Stored(node) => self.answer_node(ex, &headers, node, None),
            Written::Unwritten { cloud, answer } => {
                self.answer_node(ex, &headers, answer, Some(cloud));
            }
        }
    }

    /// When the write phase must end: kubelet's own `timeout` from its arrival, less the time
    /// its answer needs ([`ANSWER_MARGIN`]).
    fn write_by(&self) -> Instant {
        let asked = self
            .req
            .as_ref()
            .and_then(|req| req.query.timeout)
            // 0 (or under a second) is no time the apiserver would keep: as none.
            .filter(|&secs| secs > 0)
            .map_or(CLIENT_TIMEOUT, Duration::from_secs);
        self.started() + asked.saturating_sub(ANSWER_MARGIN)
    }

    /// Offline: the cached node with the condition set, in the answer only; no cached node,
    /// the ordinary offline answer.
    pub(super) fn answer_node_locally(&mut self, ex: Exchange<'_>) {
        let Some(mut node) = self.cached_node() else {
            return self.answer_locally(ex);
        };
        if let Some(wanted) = self.wanted(&node) {
            autonomy::apply(&mut node, &wanted, &now_rfc3339());
        }
        // A Value always serialises.
        let body = serde_json::to_vec(&node).unwrap_or_default();
        METRICS.offline_answers.fetch_add(1, Ordering::Relaxed);
        // How old the cached node is, as every offline answer says it.
        let age = self
            .hub
            .offline
            .as_ref()
            .zip(self.route.collection())
            .and_then(|(offline, collection)| offline.age(collection));
        let _ = ex.send(200, &offline::json_head(age.as_deref()), &body);
        self.done(200, CacheStatus::Offline);
    }

    /// The condition this check wants for `node` (one check: it counts in the hub's run of
    /// checks that found cache keys failing).
    fn wanted(&self, node: &Value) -> Option<Wanted> {
        let failing = failing_keys();
        autonomy::want(
            Setting::of(node),
            failing.as_deref(),
            &self.hub.autonomy_checks,
        )
    }

    /// This node as the cache holds it, when it is a readable object.
    fn cached_node(&self) -> Option<Value> {
        let offline = self.hub.offline.as_ref()?;
        let key = ObjectKey {
            collection: self.route.collection()?.clone(),
            namespace: None,
            name: self.hub.node_name.to_string(),
        };
        let bytes = offline.store.get(&key).ok()??;
        serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(Value::is_object)
    }

    /// PUTs `node` (the cloud's node `cloud` with `wanted` set) as the node's status; a 409
    /// reads the node again and sets the condition again, up to [`WRITE_TRIES`] PUTs, all of
    /// them done by `write_by` (kubelet would give up waiting).
    fn write_condition(
        &self,
        mut cloud: Vec<u8>,
        mut node: Value,
        wanted: &Wanted,
        now: &str,
        write_by: Instant,
    ) -> Written {
        let name = &*self.hub.node_name;
        let status_path = format!("/api/v1/nodes/{name}/status");
        let node_path = format!("/api/v1/nodes/{name}");
        for tried in 1..=WRITE_TRIES {
            // A Value always serialises.
            let body = serde_json::to_vec(&node).unwrap_or_default();
            let failed =
                match self.exchange("PUT", Verb::Update, &status_path, Some(&body), write_by) {
                    Ok((200, written)) if ObjectHead::parse(&written).is_some() => {
                        return Written::Stored(written);
                    }
                    Ok((409, _)) if tried < WRITE_TRIES => {
                        match self.exchange("GET", Verb::Get, &node_path, None, write_by) {
                            Ok((200, again)) => match serde_json::from_slice::<Value>(&again) {
                                Ok(mut fresh) if fresh.is_object() => {
                                    if !autonomy::apply(&mut fresh, wanted, now) {
                                        return Written::Stored(again);
                                    }
                                    (cloud, node) = (again, fresh);
                                    continue;
                                }
                                _ => "the node read again is not an object".to_owned(),
                            },
                            Ok((status, _)) => {
                                format!("reading the node again after a conflict: {status}")
                            }
                            Err(e) => format!("reading the node again after a conflict: {e}"),
                        }
                    }
                    Ok((status, body)) => format!(
                        "the cloud answered {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ),
                    Err(e) => e.to_string(),
                };
            log::warn!(
                "cannot write the node's Autonomy condition ({}) to the cloud: {failed}; kubelet gets it unwritten",
                wanted.status
            );
            break;
        }
        Written::Unwritten {
            cloud,
            // A Value always serialises.
            answer: serde_json::to_vec(&node).unwrap_or_default(),
        }
    }

    /// One of the hub's own requests for the node, with the hub's identity, bounded by
    /// `write_by`: the status and the body, read whole.
    fn exchange(
        &self,
        method: &str,
        verb: Verb,
        path: &str,
        body: Option<&[u8]>,
        write_by: Instant,
    ) -> Result<(u16, Vec<u8>), Unanswered> {
        let left = write_by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unanswered::OutOfTime);
        }
        let headers = [
            ("user-agent".to_owned(), HUB_USER_AGENT.to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        let mut reader = body.unwrap_or_default();
        let outgoing = Outgoing {
            method,
            verb,
            path_and_query: path,
            headers: if body.is_some() {
                &headers
            } else {
                &headers[..1]
            },
            accept: Some("application/json"),
            // A GET asks for gzip as the hub's reads do, and is inflated here (no permit: the
            // hub's own read, one per kubelet GET at most).
            encoding: if body.is_none() {
                crate::upstream::Encoding::Gzip
            } else {
                crate::upstream::Encoding::AsClient
            },
            body: body.map(|b| BodySource {
                reader: &mut reader,
                length: Some(b.len() as u64),
            }),
            deadline: Deadline::Bounded(left),
            identity: Identity::Hub,
            affinity: None,
        };
        let mut answer = self
            .hub
            .cloud
            .send(outgoing)
            .map_err(Unanswered::Cloud)?
            .inflate(None);
        let read = if answer.header("content-encoding").is_some() {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an encoded answer the hub did not ask for",
            ))
        } else {
            // The hub's own bytes: not counted as kubelet's traffic.
            let limit = MAX_NODE_BYTES;
            relay::read_small(&mut answer.body, answer.length, limit, &mut 0)
                .and_then(|bytes| within(bytes, limit))
        };
        match read {
            Ok(bytes) => Ok((answer.status, bytes)),
            Err(e) => Err(Unanswered::Cloud(self.broken_answer(&answer, &e))),
        }
    }

    /// Sends `body` to kubelet with the cloud's `headers`, then gives the cache the cloud's
    /// node as the relay would have kept the GET's answer: `cloud`, or `body` when it is the
    /// cloud's node.
    fn answer_node(
        &mut self,
        ex: Exchange<'_>,
        headers: &[(String, String)],
        body: Vec<u8>,
        cloud: Option<Vec<u8>>,
    ) {
        let target = self
            .route
            .cache
            .as_ref()
            .ok()
            .and_then(|routed| route::target_for_answer(routed, Some("application/json")));
        let (session, cache_status) = self.cache_session(&ex, target, 200, false, false);
        let sent = ex.send(200, headers, &body);
        // kubelet has its answer; the node moves to the writer without a copy.
        if let Some(mut session) = session {
            session.chunk_owned(cloud.unwrap_or(body));
            session.finish(true);
        }
        let status = match sent {
            Ok(()) => cache_status,
            Err(e) => {
                log::debug!("the client went away before its node: {e}");
                CacheStatus::ClientGone
            }
        };
        self.done(200, status);
    }
}

/// Why one of the hub's own requests for the node has no answer.
enum Unanswered {
    /// kubelet would give up before it came.
    OutOfTime,
    /// The cloud failed.
    Cloud(UpstreamError),
}

impl fmt::Display for Unanswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unanswered::OutOfTime => f.write_str("no time left before kubelet's GET times out"),
            Unanswered::Cloud(e) => e.fmt(f),
        }
    }
}

/// `bytes` when they are no more than `limit` (`relay::read_small` reads one byte past it).
fn within(bytes: Vec<u8>, limit: u64) -> io::Result<Vec<u8>> {
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a node larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// Now as Kubernetes writes a condition's times.
fn now_rfc3339() -> String {
    crate::logging::time_rfc3339(SystemTime::now())
}
