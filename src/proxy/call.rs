//! One request on its way through the hub: the [`Call`] carries the classified request, what
//! its plan carries (a forwarded request's route), its in-flight count and what the log line
//! will say, and has a method per phase after routing — forward to the cloud, fall back,
//! answer locally, log.
//!
//! Every plan that understood its request runs through [`Call::run`], the only way to make a
//! `Call` with a request: it counts the request in flight, lets the plan answer, and writes
//! the log line, so no kind of answer can forget them.
//!
//! The client's [`Exchange`] is not part of the context: it moves from phase to phase (a
//! phase that answers consumes it), so an answer cannot be sent twice.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::fallback::{self, Failure, Fallback};
use super::{CacheStatus, Hub};
use crate::cache::target::CacheTarget;
use crate::metrics::{Entered, InFlight, METRICS, RequestLabels};
use crate::request::{ApiRequest, Target, Verb};
use crate::route::Route;
use crate::server::Exchange;
use crate::status::Status;
use crate::upstream::{
    Answer, BodySource, CLIENT_PERMITS, Encoding, Outgoing, Permit, UpstreamError, accepts_gzip,
};

/// How a relay ended (`relay.rs` streams the answer; the call decides what follows).
pub(super) enum Relayed<'c> {
    /// The client has the answer (or, when the cloud broke off mid-stream, knows it is
    /// incomplete); the cache stood so.
    Done(CacheStatus),
    /// The cloud broke off before the client got anything: the exchange comes back for a
    /// fallback answer.
    CloudBrokeOff(Exchange<'c>, UpstreamError),
    /// The client went away or its connection broke; nothing more to send.
    ClientGone(std::io::Error),
}

/// How a forwarded call answers from the cache when the cloud fails: [`Call::answer_locally`],
/// or its plan's own (kubelet's GET of its node sets the node's condition).
pub(super) type LocalAnswer<'h> = fn(&mut Call<'h>, Exchange<'_>);

/// Which in-flight series counts a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// With the proxied requests (`node_yurthub_in_flight_requests_*`, and the cloud's
    /// traffic under the same labels).
    Proxied,
    /// Apart (`node_yurthub_aggregated_in_flight_requests_*`), as YurtHub counts what its
    /// multiplexer serves from the shared caches.
    Aggregated,
}

/// One request's context. `R` is what its plan carries besides the request: a forwarded
/// request's [`Route`]; nothing for an answer the hub makes itself.
pub(super) struct Call<'h, R = Route> {
    /// The hub serving it.
    pub(super) hub: &'h Hub,
    /// The classified request; `None` for one passed on unclassified (cloud mode), which is
    /// neither counted nor logged.
    pub(super) req: Option<ApiRequest>,
    /// What its plan carries: what route decided for a forwarded request.
    pub(super) route: R,
    /// Its place in the in-flight metrics (`None` when passed on unclassified, or counted
    /// apart in `_aggregated`).
    pub(super) in_flight: Option<InFlight>,
    /// Its place in the aggregated in-flight series ([`Counted::Aggregated`]), held until the
    /// call ends.
    _aggregated: Option<Entered<RequestLabels>>,
    /// When it arrived.
    started: Instant,
    /// For the log line: the status sent and where the cache stood.
    status: u16,
    cache: CacheStatus,
}

impl<'h, R> Call<'h, R> {
    /// Runs one classified request to its end: counted in flight in the series `counted`
    /// names from now until after its log line, answered by `answer` (which records how it
    /// ended: [`Call::answered`], [`Call::refuse`], the forwarding phases), then logged.
    pub(super) fn run(
        hub: &'h Hub,
        req: ApiRequest,
        route: R,
        counted: Counted,
        started: Instant,
        answer: impl FnOnce(&mut Call<'h, R>),
    ) {
        let labels = labels(&req);
        let (in_flight, aggregated) = match counted {
            Counted::Proxied => (Some(METRICS.start_request(labels)), None),
            Counted::Aggregated => (None, Some(METRICS.start_aggregated(labels))),
        };
        let mut call = Call {
            hub,
            req: Some(req),
            route,
            in_flight,
            _aggregated: aggregated,
            started,
            status: 0,
            cache: CacheStatus::Rejected,
        };
        answer(&mut call);
        call.log();
    }

    /// Lets `answer` answer the request; it returns the status it sent and where the cache
    /// stood. (Only a call passed on unclassified has no request, and it is only forwarded.)
    pub(super) fn answered(&mut self, answer: impl FnOnce(&ApiRequest) -> (u16, CacheStatus)) {
        if let Some(req) = &self.req {
            let (status, cache) = answer(req);
            self.done(status, cache);
        }
    }

    /// Answers with `status`, nothing else done.
    pub(super) fn refuse(&mut self, ex: Exchange<'_>, status: &Status) {
        let _ = ex.send_status(status);
        self.done(status.code, CacheStatus::Rejected);
    }

    /// When the request arrived.
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// Records how the request ended, for its log line.
    pub(super) fn done(&mut self, status: u16, cache: CacheStatus) {
        (self.status, self.cache) = (status, cache);
    }

    /// Logs the request (a request passed on unclassified is not logged).
    fn log(&self) {
        if let Some(req) = &self.req {
            log(req, self.status, self.cache, self.started.elapsed());
        }
    }
}

impl<'h> Call<'h> {
    /// A request passed on unclassified: neither counted nor logged.
    pub(super) fn pass_on(hub: &'h Hub, route: Route) -> Call<'h> {
        Call {
            hub,
            req: None,
            route,
            in_flight: None,
            _aggregated: None,
            started: Instant::now(),
            status: 0,
            cache: CacheStatus::Rejected,
        }
    }

    /// Forwards the request and relays the cloud's answer; falls back when the cloud fails
    /// before the client got anything.
    pub(super) fn forward(&mut self, mut ex: Exchange<'_>) {
        // A TokenRequest answer is kept under what was asked, which only its body says.
        let mut request_copy =
            matches!(self.route.cache.as_deref(), Ok(CacheTarget::Token(_))).then(Vec::new);
        let answer = match self.send(&mut ex, request_copy.as_mut()) {
            Ok(answer) => answer,
            Err(failure) => return self.fall_back(ex, failure, Call::answer_locally),
        };
        self.hand_on(ex, answer, request_copy.as_deref(), Call::answer_locally);
    }

    /// Relays the cloud's `answer` to the client (`request_copy`: the start of the request's
    /// body, when its answer is keyed by it); falls back to `local` when the cloud breaks off
    /// before the client got anything.
    pub(super) fn hand_on(
        &mut self,
        ex: Exchange<'_>,
        answer: Answer,
        request_copy: Option<&[u8]>,
        local: LocalAnswer<'h>,
    ) {
        let status = answer.status;
        if let Some(req) = &self.req {
            super::grant::record(self.hub, req, ex.header("authorization"), status);
        }
        match self.relay(ex, answer, request_copy) {
            Relayed::Done(cache) => self.done(status, cache),
            Relayed::CloudBrokeOff(ex, error) => self.fall_back(ex, Failure::Cloud(error), local),
            // The client hung up: nothing left to tell it.
            Relayed::ClientGone(e) => {
                log::debug!("the client went away mid-answer: {e}");
                self.done(status, CacheStatus::ClientGone);
            }
        }
    }

    /// Sends the request to the cloud and returns its answer's head. With `request_copy`,
    /// the first bytes of the request body are copied there as they go.
    pub(super) fn send(
        &self,
        ex: &mut Exchange<'_>,
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
        // A resumable watch asks the cloud for bookmarks, and plain bytes it can follow
        // (`proxy/resume/`); any other request goes as it came.
        let resumable;
        let (path_and_query, headers) = if self.route.resume.is_some() {
            resumable = (
                super::resume::leg::first_target(&head.target),
                super::resume::leg::leg_headers(&head.headers),
            );
            (resumable.0.as_str(), resumable.1.as_slice())
        } else {
            (head.target.as_str(), head.headers.as_slice())
        };
        let (encoding, permit) = self.encoding(&head.headers);
        let outgoing = Outgoing {
            method: &head.method,
            verb: self.req.as_ref().map_or(Verb::Other, |r| r.verb),
            path_and_query,
            headers,
            accept: self.route.upstream_accept,
            encoding,
            body: has_body.then_some(BodySource { reader, length }),
            deadline: self.route.deadline,
            identity: self.route.identity,
            // A resumable watch's first leg has its own target; key it as the client's.
            affinity: Some(&head.target),
        };
        match self.hub.cloud.send(outgoing) {
            // Gzip the client did not ask for is inflated for it (the permit goes with the
            // stream); the cache and the filters read the same plain bytes.
            Ok(answer) if permit.is_some() => Ok(answer.inflate(permit)),
            Ok(answer) => Ok(answer),
            Err(e) => {
                if let UpstreamError::ClientTooSlow(detail) = &e {
                    ex.fail_body(Status::request_timeout(format!(
                        "the request body was not sent whole within the request's time: {detail}"
                    )));
                }
                Err(fallback::sort(e, ex.body_failure()))
            }
        }
    }

    /// How the request asks for its answer's encoding (`--upstream-gzip`, issue 32): gzip for a
    /// read the route lets the hub compress, whoever asked; for a client that did not ask,
    /// with one of the [`CLIENT_PERMITS`] to inflate it. With none left the request goes as
    /// the client asked: plain, as without the flag.
    fn encoding(&self, headers: &[(String, String)]) -> (Encoding, Option<Permit>) {
        if !crate::upstream::inflate::ask_gzip() || !self.route.upstream_gzip {
            return (Encoding::AsClient, None);
        }
        if accepts_gzip(headers) {
            return (Encoding::Gzip, None);
        }
        match CLIENT_PERMITS.take() {
            Some(permit) => (Encoding::Gzip, Some(permit)),
            None => {
                log::debug!(
                    "{} answers are being inflated already: this one is asked for plain",
                    CLIENT_PERMITS.taken()
                );
                (Encoding::AsClient, None)
            }
        }
    }

    /// The request failed before the client got anything: answer from the cache (`local`:
    /// [`Call::answer_locally`], or the plan's own) when the policy allows it, else with the
    /// status the failure calls for.
    pub(super) fn fall_back(&mut self, ex: Exchange<'_>, failure: Failure, local: LocalAnswer<'h>) {
        match fallback::after(self.hub.mode, &self.route.local, failure) {
            Fallback::FromCache(error) if self.req.is_some() => {
                log::info!("cloud unreachable ({error}); answering from the cache");
                local(self, ex);
            }
            // (A request passed on unclassified has no local answer: its route says so.)
            Fallback::FromCache(error) => self.refuse(ex, &fallback::status_of(&error)),
            Fallback::Answer(status) => self.refuse(ex, &status),
        }
    }

    /// Answers from the cache (edge mode), or says the cloud is unreachable.
    pub(super) fn answer_locally(&mut self, ex: Exchange<'_>) {
        let status = match (&self.hub.offline, &self.req) {
            (Some(offline), Some(req)) => {
                let status = offline.answer(ex, req, &self.route);
                // Answers the cache had, apart from its refusals (issue 35: 503s were counted
                // as answers).
                let counter = if status < 400 {
                    &METRICS.offline_answers
                } else {
                    &METRICS.offline_refusals
                };
                counter.fetch_add(1, Ordering::Relaxed);
                status
            }
            _ => {
                let status = Status::service_unavailable("the cloud apiserver is unreachable");
                let _ = ex.send_status(&status);
                status.code
            }
        };
        self.done(status, CacheStatus::Offline);
    }
}

/// The log line of a request: offline answers and 5xx at info, the rest at debug.
fn log(req: &ApiRequest, status: u16, cache: CacheStatus, elapsed: Duration) {
    let path = match &req.target {
        Target::Resource(r) => r.gvr.resource.as_str(),
        Target::NonResource(p) => p.as_str(),
    };
    let level = if cache == CacheStatus::Offline || status >= 500 {
        log::Level::Info
    } else {
        log::Level::Debug
    };
    log::log!(
        level,
        "verb={} resource=\"{}\" component=\"{}\" port={} credential={} status={status} cache={} duration={elapsed:?}",
        req.verb.as_str(),
        path,
        req.component,
        req.requester.port.as_str(),
        req.requester.credential.as_str(),
        cache.as_str()
    );
}

/// The in-flight metric's labels of `req` (the multiplexer's port counts its followers' too).
pub(super) fn labels(req: &ApiRequest) -> RequestLabels {
    (
        req.verb.as_str(),
        req.resource()
            .map(|r| r.gvr.resource.clone())
            .unwrap_or_default(),
        req.resource()
            .and_then(|r| r.subresource.clone())
            .unwrap_or_default(),
        req.component.as_str().to_owned(),
    )
}

/// A request body reader that copies what passes, up to a TokenRequest's limit (past it the
/// copy is useless: one byte more is kept so that the overflow shows).
struct Capture<'r> {
    inner: &'r mut dyn Read,
    copy: &'r mut Vec<u8>,
}

impl Read for Capture<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let room = (crate::tokens::MAX_REQUEST_BYTES + 1).saturating_sub(self.copy.len());
        self.copy.extend_from_slice(&buf[..n.min(room)]);
        Ok(n)
    }
}
