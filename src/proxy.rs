//! The request path. [`Hub::handle`] reads top to bottom: classify the request, route it,
//! then either forward it to the cloud — streaming the answer back while a copy goes to the
//! cache writer — or answer it from the cache when the cloud is unreachable, and log it.
//!
//! Failures carry where they came from ([`Failure`]): an unreachable cloud is the one origin
//! that turns into an offline answer; everything else becomes a `Status` in one place.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::Instant;

use crate::cache::agents::CacheAgents;
use crate::cache::writer::{CacheTx, Refill};
use crate::config::WorkingMode;
use crate::metrics::{InFlight, METRICS};
use crate::offline::Offline;
use crate::reaper::Reaper;
use crate::request::{self, ApiRequest};
use crate::route::{self, CacheTarget, Local, NoCacheReason, Route, TokenTarget};
use crate::server::{Exchange, Length};
use crate::status::Status;
use crate::upstream::{Answer, BodySource, Deadline, Identity, Outgoing, Upstream, UpstreamError};

/// Bodies up to this size with a known length are received whole before the client gets
/// anything, so a cloud that breaks off mid-body can still be answered from the cache.
const SMALL_BODY: u64 = 64 * 1024;
/// Relay buffer of a streaming request at first, and at most (a TLS record's worth).
const RELAY_BUFFER_START: usize = 4 * 1024;
const RELAY_BUFFER: usize = 16 * 1024;

/// Everything a request thread needs.
pub struct Hub {
    /// Edge or cloud.
    pub mode: WorkingMode,
    /// The cloud client.
    pub upstream: Arc<Upstream>,
    /// Who is cached.
    pub agents: Arc<CacheAgents>,
    /// The writer queue (edge mode).
    pub cache: Option<CacheTx>,
    /// Offline answers (edge mode).
    pub offline: Option<Offline>,
    /// Ends streams whose client left.
    pub reaper: Arc<Reaper>,
}

/// Where the cache stood for a request, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Forwarded; the answer is being persisted.
    Stored,
    /// Forwarded; not cached, for this reason.
    Bypass(NoCacheReason),
    /// Forwarded; cacheable, but the writer queue was full.
    Dropped,
    /// Answered from the cache: the cloud was unreachable.
    Offline,
    /// Refused before anything else.
    Rejected,
    /// The client went away before its answer was complete.
    ClientGone,
}

impl CacheStatus {
    /// Short text for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Stored => "stored",
            CacheStatus::Bypass(reason) => reason.as_str(),
            CacheStatus::Dropped => "dropped",
            CacheStatus::Offline => "offline",
            CacheStatus::Rejected => "rejected",
            CacheStatus::ClientGone => "client-gone",
        }
    }
}

/// True for a route whose offline answer stands in for a write (create, update, delete,
/// token): one the cloud must get whenever it may be up.
fn is_write(local: &Local) -> bool {
    matches!(
        local,
        Local::Create | Local::Echo | Local::Token | Local::Update | Local::Forbidden
    )
}

/// Why a forwarded request failed, by origin.
enum Failure {
    /// The cloud could not be reached or broke off before the client got anything: the cache
    /// may answer.
    Unreachable(UpstreamError),
    /// The request cannot be forwarded (the hub could not build it, or the client's body
    /// went past its limit): answer with this status.
    Refused(Status),
    /// The client went away or its connection broke; nothing more to send.
    Downstream(io::Error),
}

impl Hub {
    /// Serves one request to the end.
    pub fn handle(&self, ex: Exchange<'_>) {
        let started = Instant::now();
        let req = match request::classify(ex.method(), ex.url(), ex.headers()) {
            Ok(req) => req,
            Err(e) if self.mode == WorkingMode::Edge => {
                log::info!(
                    "refused method={} path=\"{}\" err=\"{e}\"",
                    ex.method(),
                    request::truncate(ex.url())
                );
                let _ = ex.send_status(&Status::bad_request(e.to_string()));
                return;
            }
            // A pure proxy passes on what it does not understand; the cloud judges it.
            Err(_) => {
                let route = passthrough_route(ex.header("authorization").is_some());
                self.forward_and_relay(ex, None, &route, None);
                return;
            }
        };
        let labels = (
            req.verb.as_str(),
            req.resource()
                .map(|r| r.resource.clone())
                .unwrap_or_default(),
            req.resource()
                .and_then(|r| r.subresource.clone())
                .unwrap_or_default(),
            req.component.clone(),
        );
        let in_flight = METRICS.start_request(labels);
        let (status, cache) = self.serve(ex, &req, &in_flight);
        let elapsed = started.elapsed();
        let path = match &req.target {
            request::Target::Resource(r) => r.resource.as_str(),
            request::Target::NonResource(p) => p.as_str(),
        };
        let level = if cache == CacheStatus::Offline || status >= 500 {
            log::Level::Info
        } else {
            log::Level::Debug
        };
        log::log!(
            level,
            "verb={} resource=\"{}\" component=\"{}\" status={status} cache={} duration={elapsed:?}",
            req.verb.as_str(),
            path,
            req.component,
            cache.as_str()
        );
    }

    fn serve(
        &self,
        ex: Exchange<'_>,
        req: &ApiRequest,
        in_flight: &InFlight,
    ) -> (u16, CacheStatus) {
        if req.upgrade {
            // exec, attach and port-forward need the raw connection spliced to the cloud's, which
            // the hub does not do.
            let status = Status::not_implemented(
                "tinyhub does not carry connection upgrades (exec, attach, port-forward): talk to the apiserver directly",
            );
            let _ = ex.send_status(&status);
            return (501, CacheStatus::Rejected);
        }
        let is_agent = self.agents.is_agent(&req.component);
        let route = match route::route(req, is_agent, self.mode) {
            Ok(route) => route,
            Err(status) => {
                let _ = ex.send_status(&status);
                return (status.code, CacheStatus::Rejected);
            }
        };
        // A write still goes to a server healthy by its last probe, even one suspect since a
        // request failed: a write is never answered here while the cloud may take it.
        let backends = self.upstream.backends();
        let online = if is_write(&route.local) {
            backends.any_probed_healthy()
        } else {
            backends.any_healthy()
        };
        if self.mode == WorkingMode::Edge && !online {
            return (self.answer_locally(ex, req, &route), CacheStatus::Offline);
        }
        self.forward_and_relay(ex, Some(req), &route, Some(in_flight))
    }

    fn forward_and_relay(
        &self,
        mut ex: Exchange<'_>,
        req: Option<&ApiRequest>,
        route: &Route,
        in_flight: Option<&InFlight>,
    ) -> (u16, CacheStatus) {
        // A TokenRequest answer is kept under what was asked, which only its body says.
        let mut request_copy = matches!(route.cache, Ok(CacheTarget::Token(_))).then(Vec::new);
        match self.forward(&mut ex, route, request_copy.as_mut()) {
            Ok(answer) => {
                let status = answer.status;
                match self.relay(
                    ex,
                    route,
                    req.map(|r| r.component.as_str()),
                    answer,
                    in_flight,
                    request_copy.as_deref(),
                ) {
                    Ok(cache) => (status, cache),
                    Err((ex, Failure::Unreachable(e))) => self.fallback(ex, req, route, e),
                    // The client hung up: nothing left to tell it.
                    Err((_, Failure::Downstream(e))) => {
                        log::debug!("the client went away mid-answer: {e}");
                        (status, CacheStatus::ClientGone)
                    }
                    Err((ex, Failure::Refused(status))) => {
                        if let Some(ex) = ex {
                            let _ = ex.send_status(&status);
                        }
                        (status.code, CacheStatus::Rejected)
                    }
                }
            }
            Err(Failure::Unreachable(e)) => self.fallback(Some(ex), req, route, e),
            Err(Failure::Refused(status)) => {
                let _ = ex.send_status(&status);
                (status.code, CacheStatus::Rejected)
            }
            Err(Failure::Downstream(e)) => {
                log::debug!("the client went away: {e}");
                (499, CacheStatus::ClientGone)
            }
        }
    }

    /// The cloud failed before the client got anything: answer from the cache when the
    /// route allows it, else say the cloud is unreachable.
    fn fallback(
        &self,
        ex: Option<Exchange<'_>>,
        req: Option<&ApiRequest>,
        route: &Route,
        error: UpstreamError,
    ) -> (u16, CacheStatus) {
        let Some(ex) = ex else {
            return (502, CacheStatus::Rejected);
        };
        // A write that may have reached the cloud must not be answered as if it had not: the
        // client would believe a create or delete that happened, or one that did not.
        let write = is_write(&route.local);
        let answerable = self.mode == WorkingMode::Edge
            && route.local != Local::Unavailable
            && (!write || error.never_sent());
        if let Some(req) = req.filter(|_| answerable) {
            log::info!("cloud unreachable ({error}); answering from the cache");
            return (self.answer_locally(ex, req, route), CacheStatus::Offline);
        }
        let status = match &error {
            UpstreamError::Transport { timeout: true, .. } => {
                Status::timeout(format!("the cloud did not answer in time: {error}"))
            }
            UpstreamError::Request(_) => Status::bad_gateway(error.to_string()),
            _ => {
                Status::service_unavailable(format!("the cloud apiserver is unreachable: {error}"))
            }
        };
        let _ = ex.send_status(&status);
        (status.code, CacheStatus::Rejected)
    }

    fn answer_locally(&self, ex: Exchange<'_>, req: &ApiRequest, route: &Route) -> u16 {
        match &self.offline {
            Some(offline) => {
                METRICS
                    .offline_answers
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                offline.answer(ex, req, route)
            }
            None => {
                let status = Status::service_unavailable("the cloud apiserver is unreachable");
                let _ = ex.send_status(&status);
                status.code
            }
        }
    }

    /// Sends the request to the cloud and returns its answer's head. With `request_copy`,
    /// the first bytes of the request body are copied there as they go.
    fn forward(
        &self,
        ex: &mut Exchange<'_>,
        route: &Route,
        request_copy: Option<&mut Vec<u8>>,
    ) -> Result<Answer, Failure> {
        let length = ex.body_length();
        let has_body = ex.has_body();
        let (head, mut body) = ex.parts();
        let mut capture;
        let reader: &mut dyn Read = match request_copy {
            Some(copy) => {
                capture = Capture {
                    inner: &mut body,
                    copy,
                };
                &mut capture
            }
            None => &mut body,
        };
        let outgoing = Outgoing {
            method: &head.method,
            path_and_query: &head.target,
            headers: &head.headers,
            accept: route.upstream_accept,
            body: has_body.then_some(BodySource { reader, length }),
            deadline: route.deadline,
            identity: route.identity,
        };
        let sent = self.upstream.send(outgoing);
        if let Err(UpstreamError::ClientTooSlow(detail)) = &sent {
            ex.fail_body(Status::request_timeout(format!(
                "the request body was not sent whole within the request's time: {detail}"
            )));
        }
        sent.map_err(|e| match (e, ex.body_failure()) {
            // Reading the client's body failed, not the cloud: never a cloud failure nor an
            // answer from the cache.
            (_, Some(status)) => Failure::Refused(status),
            (UpstreamError::ClientBody(detail), None) => {
                Failure::Refused(Status::bad_request(detail))
            }
            (UpstreamError::Request(detail), None) => Failure::Refused(Status::internal(detail)),
            (e, None) => Failure::Unreachable(e),
        })
    }

    /// Streams the cloud's answer to the client, teeing it into the cache. On a failure before
    /// the client got any byte, the exchange is handed back for a fallback answer.
    fn relay<'c>(
        &self,
        ex: Exchange<'c>,
        route: &Route,
        component: Option<&str>,
        mut answer: Answer,
        in_flight: Option<&InFlight>,
        request_body: Option<&[u8]>,
    ) -> Result<CacheStatus, (Option<Exchange<'c>>, Failure)> {
        let mut session = None;
        let answer_target = route
            .cache
            .as_ref()
            .ok()
            .and_then(|t| wants_cache(t, &answer));
        let cache_status = match (&route.cache, &self.cache, answer_target) {
            (Ok(_), Some(cache), Some(target)) => {
                // Should the disk fall behind, the hub reads the answer again itself: reads
                // only, and only on its own credentials, which the client's did not replace.
                let refill = component
                    .filter(|_| route.identity == Identity::Hub && ex.method() == "GET")
                    .map(|component| Refill {
                        path_and_query: ex.url().to_owned(),
                        component: component.to_owned(),
                    });
                let target = keyed(target, request_body);
                session = cache.begin(target, answer.status, answer.is_gzip(), refill);
                if session.is_some() {
                    CacheStatus::Stored
                } else {
                    CacheStatus::Dropped
                }
            }
            (Ok(_), Some(_), None) => CacheStatus::Bypass(NoCacheReason::Answer),
            (Ok(_), None, _) => CacheStatus::Bypass(NoCacheReason::CacheUnavailable),
            (Err(reason), _, _) => CacheStatus::Bypass(*reason),
        };
        let mut traffic = Traffic(in_flight, 0);

        // HEAD, 204 and 304 carry no body, whatever their Content-Length says.
        // (Never cached: routes do not cache HEAD, `wants_cache` refuses these statuses.)
        if ex.method() == "HEAD" || matches!(answer.status, 100..=199 | 204 | 304) {
            let length = Length::Known(answer.length.unwrap_or(0));
            return ex
                .start(answer.status, &answer.headers, length)
                .and_then(|w| w.finish())
                .map(|()| cache_status)
                .map_err(|e| (None, Failure::Downstream(e)));
        }

        if let Some(length) = answer.length.filter(|&l| l <= SMALL_BODY) {
            let mut body = Vec::with_capacity(length as usize);
            // Read to the end, not just `length` bytes: only a read that sees the end returns
            // the connection to ureq's pool (else every small answer costs a TLS handshake).
            let read = (&mut answer.body).take(length + 1).read_to_end(&mut body);
            traffic.1 += body.len() as u64;
            if let Err(e) = read.and_then(|n| {
                if n as u64 == length {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("body ended after {n} of {length} bytes"),
                    ))
                }
            }) {
                if let Some(s) = session {
                    s.finish(false);
                }
                let error = UpstreamError::Transport {
                    server: self.upstream.backends().get(answer.backend).base.clone(),
                    detail: format!("the answer broke off: {e}"),
                    timeout: e.kind() == io::ErrorKind::TimedOut,
                    maybe_sent: true,
                };
                return Err((Some(ex), Failure::Unreachable(error)));
            }
            let sent = ex.send(answer.status, &answer.headers, &body);
            // The client has its answer; the body moves to the writer without a copy.
            if let Some(mut s) = session {
                s.chunk_owned(body);
                s.finish(true);
            }
            return sent
                .map(|()| cache_status)
                .map_err(|e| (None, Failure::Downstream(e)));
        }

        let mut writer = ex
            .start(answer.status, &answer.headers, Length::Streamed)
            .map_err(|e| (None, Failure::Downstream(e)))?;
        // A watch may stay open for hours: its answer's headers are not needed past here.
        answer.headers = Vec::new();
        // A stream whose client hangs up while the cloud is silent is ended by the reaper.
        // (Only a stream has a cancel handle: no socket handle is taken for a plain answer.)
        let _watched = answer
            .cancel
            .take()
            .and_then(|cancel| Some(self.reaper.watch(writer.probe()?, cancel)));
        // Start small (a watch's events are small, and a thousand watches may be open) and
        // grow to a TLS record's size when reads fill the buffer (a big list).
        let mut buf = vec![0u8; RELAY_BUFFER_START];
        loop {
            let n = match answer.body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // The cloud broke off mid-body (or the reaper cut a stream whose client
                    // left): tell the client its answer is incomplete and commit nothing
                    // partial (a list is dropped, a watch keeps whole events).
                    log::info!("the cloud's answer broke off mid-body: {e}");
                    if let Some(s) = session.take() {
                        s.finish(false);
                    }
                    writer.abort();
                    return Ok(cache_status);
                }
            };
            traffic.1 += n as u64;
            let full = n == buf.len();
            if let Err(e) = writer.write(&buf[..n]) {
                if let Some(s) = session.take() {
                    s.finish(false);
                }
                return Err((None, Failure::Downstream(e)));
            }
            if let Some(s) = session.as_mut()
                && !s.chunk(&buf[..n])
            {
                session = None;
            }
            if full && buf.len() < RELAY_BUFFER {
                buf.resize(RELAY_BUFFER, 0);
            }
        }
        if let Some(s) = session {
            s.finish(true);
        }
        writer
            .finish()
            .map_err(|e| (None, Failure::Downstream(e)))?;
        Ok(cache_status)
    }
}

/// A request body reader that copies what passes, up to a TokenRequest's limit (past it the
/// copy is useless: one byte more is kept so that the overflow shows).
struct Capture<'r> {
    inner: &'r mut dyn Read,
    copy: &'r mut Vec<u8>,
}

impl Read for Capture<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let room = (crate::tokens::MAX_REQUEST_BYTES + 1).saturating_sub(self.copy.len());
        self.copy.extend_from_slice(&buf[..n.min(room)]);
        Ok(n)
    }
}

/// The cache target with what only the request body tells: a TokenRequest's digest (none
/// when the body is not a readable TokenRequest, and then nothing is kept).
fn keyed(target: CacheTarget, request_body: Option<&[u8]>) -> CacheTarget {
    match target {
        CacheTarget::Token(token) => CacheTarget::Token(TokenTarget {
            digest: request_body
                .filter(|b| b.len() <= crate::tokens::MAX_REQUEST_BYTES)
                .and_then(crate::tokens::TokenSpec::parse)
                .map(|spec| spec.digest()),
            ..token
        }),
        other => other,
    }
}

/// Bytes the cloud sent for one request, counted once when the request ends (one metrics
/// lock per request, not per chunk).
struct Traffic<'a>(Option<&'a InFlight>, u64);

impl Drop for Traffic<'_> {
    fn drop(&mut self) {
        if let Some(in_flight) = self.0 {
            in_flight.add_traffic(self.1);
        }
    }
}

/// What an answer is cached as, when its status is worth a cache session (a discovery
/// document goes to the file of the form the cloud answered in).
fn wants_cache(target: &CacheTarget, answer: &Answer) -> Option<CacheTarget> {
    let worth = match answer.status {
        200 | 201 => answer.is_json(),
        // A 404 for a list prunes the kind; for a get it removes the object.
        404 => matches!(
            target,
            CacheTarget::List { .. } | CacheTarget::Object { name: Some(_), .. }
        ),
        _ => false,
    };
    worth
        .then(|| target.for_answer(answer.header("content-type")))
        .flatten()
}

fn passthrough_route(has_authorization: bool) -> Route {
    Route {
        cache: Err(NoCacheReason::CloudMode),
        local: Local::Unavailable,
        upstream_accept: None,
        deadline: Deadline::Bounded(route::REQUEST_DEADLINE),
        identity: if has_authorization {
            Identity::Client
        } else {
            Identity::Hub
        },
        selectors: crate::selector::Selectors::everything(),
    }
}
