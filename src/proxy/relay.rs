//! The relay: the cloud's answer streamed to the client while a copy goes to the cache
//! writer (the tee only `try_send`s: the client never waits for the disk). A small answer of
//! known length is read whole first, so a cloud that breaks off within it can still be
//! answered from the cache; a larger one streams through a buffer that grows with the reads.
//! Every stream here is a composition of `stream`'s pump and sinks: the filter stage when the
//! route has filters, the tee when the answer is cached, the client.

use std::io::{self, Read};
use std::sync::Arc;

use super::CacheStatus;
use super::call::{Call, Relayed};
use crate::cache::decode::{BodyShape, DecodeError};
use crate::cache::target::{CacheTarget, TokenTarget};
use crate::cache::writer::{MAX_OBJECT_BYTES, Refill, Session};
use crate::filters::Filters;
use crate::filters::body::{self, BodyFilter, Filtered, StageTime};
use crate::filters::list_memo::Recall;
use crate::metrics::InFlight;
use crate::reaper::Watched;
use crate::route::{self, Identity, NoCacheReason};
use crate::server::{BodyWriter, Exchange, Length};
use crate::stream::{BodyReads, FilterStage, Pumped, Sink, Stop, Tee, ToClient, Uncached, pump};
use crate::upstream::{Answer, UpstreamError};

/// Bodies up to this size with a known length are received whole before the client gets
/// anything, so a cloud that breaks off mid-body can still be answered from the cache.
const SMALL_BODY: u64 = 64 * 1024;

impl Call<'_> {
    /// Streams the cloud's answer to the client, teeing it into the cache. `request_body` is
    /// the copy of a TokenRequest's body, which names the cache key of its answer.
    ///
    /// Never inlined, and each kind of answer relayed in a frame of its own: a watch waits
    /// for hours below this frame, which holds only what picks the kind.
    #[inline(never)]
    pub(super) fn relay<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        request_body: Option<&[u8]>,
    ) -> Relayed<'c> {
        // Filtered answers are decoded, so they are cached as the plain JSON the client gets;
        // a gzip one is inflated here, where the link is told what gzip saved (the filters
        // then read it plain, as the client and the cache get it).
        let filtering = self.filtering(&answer);
        if filtering.is_some() {
            answer = answer.inflate(None);
        }
        let answer_target = self
            .route
            .cache
            .as_ref()
            .ok()
            .and_then(|t| wants_cache(t, &answer))
            .map(|t| keyed(t, request_body));
        let gzip = answer.is_gzip() && filtering.is_none();
        // Read whole and finished by `relay_small`, which makes its refill only if wanted.
        let small = filtering.is_none()
            && self.route.resume.is_none()
            && answer.length.is_some_and(|l| l <= SMALL_BODY);
        // HEAD, 204 and 304 carry no body, whatever their Content-Length says.
        // (Never cached: routes do not cache HEAD, `wants_cache` refuses these statuses.)
        let bodiless = ex.method() == "HEAD" || matches!(answer.status, 100..=199 | 204 | 304);
        if small && !bodiless {
            return self.relay_small(ex, answer, answer_target, gzip);
        }
        // Not small from here on (a bodiless answer is never cached).
        let (mut session, cache_status) =
            self.cache_session(&ex, answer_target, answer.status, gzip, false);
        // The cloud's bytes as sent, or rewritten by filters that read nothing else: a list
        // of them may be proven unchanged by its resourceVersion (`cache/writer/unchanged.rs`).
        let form = match &filtering {
            None => Some(0),
            Some((filters, _)) => self.route.filters.reproducible_form(&filters.ctx),
        };
        if let (Some(form), Some(s)) = (form, session.as_mut()) {
            s.reproducible(form);
        }

        if bodiless {
            let length = Length::Known(answer.length.unwrap_or(0));
            return done(
                ex.start(answer.status, &answer.headers, length)
                    .and_then(|w| w.finish()),
                cache_status,
            );
        }

        // A watch that outlives its upstream (issue 29), filtered or not.
        if let Some(watch) = super::resume::resumable(self, &answer) {
            let filters = filtering.map(|(filters, _)| filters);
            return self.relay_resumable(ex, answer, session, cache_status, filters, watch);
        }

        if let Some((filters, shape)) = filtering {
            return self.relay_filtered(ex, answer, session, cache_status, filters, shape);
        }
        self.relay_plain(ex, answer, session, cache_status)
    }

    /// The relay of a small answer of known length passed unchanged, read whole: its cache
    /// session (for `target`, when it is for the cache) is begun once it is read, and only if
    /// the store does not hold it exactly so already (`cache/writer/identical.rs`): most of a
    /// node's gets read back what did not change, and those need no session, no message to
    /// the writer and no wake-up of it.
    #[inline(never)]
    fn relay_small<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        target: Option<Arc<CacheTarget>>,
        gzip: bool,
    ) -> Relayed<'c> {
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        let length = answer.length.unwrap_or(0);
        let read = read_small(&mut answer.body, Some(length), length, &mut traffic.1);
        let stored = read.as_ref().is_ok_and(|body| {
            let cache = self.route.cache.as_ref().ok().and(self.hub.cache.as_ref());
            cache
                .zip(target.as_deref())
                .is_some_and(|(cache, t)| cache.stored_already(t, answer.status, gzip, body))
        });
        if stored && let Ok(body) = &read {
            let sent = ex.send(answer.status, &answer.headers, body);
            return done(sent, CacheStatus::Stored);
        }
        let (mut session, cache_status) =
            self.cache_session(&ex, target, answer.status, gzip, true);
        // The cloud's bytes as sent (`Session::reproducible`).
        if let Some(s) = session.as_mut() {
            s.reproducible(0);
        }
        self.send_small(ex, &answer, read, session, cache_status)
    }

    /// Sends a small answer `read` whole to the client, then hands it to `session`.
    fn send_small<'c>(
        &self,
        ex: Exchange<'c>,
        answer: &Answer,
        read: io::Result<Vec<u8>>,
        session: Option<Session>,
        cache_status: CacheStatus,
    ) -> Relayed<'c> {
        let body = match read {
            Ok(body) => body,
            Err(e) => return self.broke_off(ex, answer, e, session),
        };
        let sent = ex.send(answer.status, &answer.headers, &body);
        // The client has its answer; the body moves to the writer without a copy.
        if let Some(mut s) = session {
            s.chunk_owned(body);
            s.finish_refilling(true, |sent_as| self.refill(sent_as));
        }
        done(sent, cache_status)
    }

    /// The relay of an answer passed unchanged: a small one read whole, any other streamed.
    #[inline(never)]
    fn relay_plain<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        session: Option<Session>,
        cache_status: CacheStatus,
    ) -> Relayed<'c> {
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        if let Some(length) = answer.length.filter(|&l| l <= SMALL_BODY) {
            let read = read_small(&mut answer.body, Some(length), length, &mut traffic.1);
            return self.send_small(ex, &answer, read, session, cache_status);
        }

        let headers = std::mem::take(&mut answer.headers);
        let (writer, watched) = match self.start_stream(ex, &headers, &mut answer) {
            Ok(started) => started,
            Err(e) => return Relayed::ClientGone(e),
        };
        drop(headers);
        // Nothing here finds an answer not for the cache: the note is never called.
        let note = |_: &Uncached, _: bool| {};
        let mut sink = Tee::new(ToClient::new(writer), session, &note);
        let mut reads = BodyReads::for_stream(watched.is_some());
        let pumped = pump(&mut answer.body, &mut reads, &mut traffic.1, &mut sink);
        relayed(pumped, cache_status, watched.as_ref())
    }
}

impl Call<'_> {
    /// The cache writer's session for an answer of `status` to `ex`'s request, to be kept as
    /// `target` (None: the answer is not for the cache), and where the cache stands for the
    /// log line. A `small` answer is read whole and finished with
    /// [`Session::finish_refilling`] and [`Call::refill`]: its refill is made only if wanted.
    pub(super) fn cache_session(
        &self,
        ex: &Exchange<'_>,
        target: Option<Arc<CacheTarget>>,
        status: u16,
        gzip: bool,
        small: bool,
    ) -> (Option<Session>, CacheStatus) {
        let cache = match (&self.route.cache, &self.hub.cache) {
            (Ok(_), Some(cache)) => cache,
            (Ok(_), None) => return (None, CacheStatus::Bypass(NoCacheReason::CacheUnavailable)),
            (Err(reason), _) => return (None, CacheStatus::Bypass(*reason)),
        };
        let Some(target) = target else {
            return (None, CacheStatus::Bypass(NoCacheReason::Answer));
        };
        // Should the disk fall behind, the hub reads the answer again itself: reads only, and
        // only on its own credentials, which the client's did not replace. (A refill filters
        // like the relay: it computes the same chain.)
        let refillable =
            self.req.is_some() && self.route.identity == Identity::Hub && ex.method() == "GET";
        let session = if refillable && small {
            cache.begin_deferred(target, status, gzip, ex.url(), |sent_as| {
                self.refill(sent_as)
            })
        } else {
            let refill = refillable
                .then(|| self.refill(ex.url().to_owned()))
                .flatten();
            cache.begin(target, status, gzip, refill)
        };
        let cache_status = if session.is_some() {
            CacheStatus::Stored
        } else {
            CacheStatus::Dropped
        };
        (session, cache_status)
    }

    /// How this request's answer is fetched again should its cache session be dropped (its
    /// path and query as sent: `sent_as`); `None` for a request not classified or not cached.
    /// (Only for a read on the hub's own credentials: [`Call::cache_session`] judges that.)
    fn refill(&self, sent_as: String) -> Option<Refill> {
        let (Some(req), Ok(target)) = (self.req.as_ref(), self.route.cache.as_ref()) else {
            return None;
        };
        Some(Refill {
            request: Box::new(req.clone()),
            target: CacheTarget::clone(target),
            sent_as,
        })
    }

    /// Starts a streamed answer to the client with `headers`. A watch may stay open for hours:
    /// the caller has already dropped the cloud's headers. A stream whose client hangs up
    /// while the cloud is silent is ended by the reaper as long as the guard lives (only a
    /// stream has a cancel handle: no socket handle is taken for a plain answer).
    fn start_stream<'c>(
        &self,
        ex: Exchange<'c>,
        headers: &[(String, String)],
        answer: &mut Answer,
    ) -> io::Result<(BodyWriter<'c>, Option<Watched>)> {
        let writer = ex.start(answer.status, headers, Length::Streamed)?;
        let watched = answer
            .cancel
            .take()
            .and_then(|cancel| Some(self.hub.reaper.watch(writer.probe()?, cancel)));
        Ok((writer, watched))
    }

    /// The cloud broke off within a small answer read whole: nothing was sent yet, so the
    /// caller may still answer the client from the cache; nothing of it is committed.
    fn broke_off<'c>(
        &self,
        ex: Exchange<'c>,
        answer: &Answer,
        e: io::Error,
        session: Option<Session>,
    ) -> Relayed<'c> {
        uncommitted(session);
        Relayed::CloudBrokeOff(ex, self.broken_answer(answer, &e))
    }

    /// The failure of a cloud whose `answer` broke off with `e` while it was read.
    pub(super) fn broken_answer(&self, answer: &Answer, e: &io::Error) -> UpstreamError {
        UpstreamError::Transport {
            server: self.hub.cloud.server(answer.backend).to_owned(),
            detail: format!("the answer broke off: {e}"),
            timeout: e.kind() == io::ErrorKind::TimedOut,
            maybe_sent: true,
        }
    }

    /// The filters and body shape when the answer passes the filter stage: a request with a
    /// chain, answered 200 in JSON, plain or gzip.
    fn filtering(&self, answer: &Answer) -> Option<(&Filters, BodyShape)> {
        let filters = self.hub.filters.as_ref()?;
        if self.route.filters.is_empty() || answer.status != 200 || !answer.is_json() {
            return None;
        }
        if answer.header("content-encoding").is_some() && !answer.is_gzip() {
            return None;
        }
        Some((filters, route::body_shape(self.req.as_ref()?)))
    }

    /// The relay of a filtered answer (YurtHub's `pkg/yurthub/filter/responsefilter`): filtered
    /// before the tee, so the cache holds what the client got. A get or a small answer is filtered
    /// whole and sent with its new length; a larger list or a watch is filtered as it streams,
    /// chunked. An answer that cannot be decoded passes unchanged, with one log line, and is not
    /// cached.
    #[inline(never)]
    fn relay_filtered<'c>(
        &self,
        ex: Exchange<'c>,
        answer: Answer,
        session: Option<Session>,
        cache_status: CacheStatus,
        filters: &Filters,
        shape: BodyShape,
    ) -> Relayed<'c> {
        let gzip = answer.is_gzip();
        // The filtered body has another length, and is plain JSON.
        let headers: Vec<(String, String)> = answer
            .headers
            .iter()
            .filter(|(name, _)| {
                let length = name.eq_ignore_ascii_case("content-length");
                let encoding = gzip && name.eq_ignore_ascii_case("content-encoding");
                !(length || encoding)
            })
            .cloned()
            .collect();
        // For the log lines (the exchange is gone by then).
        let path = crate::request::truncate(ex.url()).to_string();
        let filtered = FilteredAnswer {
            filters,
            shape,
            gzip,
            headers,
            path,
            cache_status,
        };
        // A small gzip list may inflate a thousandfold: lists in gzip always stream.
        let small = !gzip && answer.length.is_some_and(|l| l <= SMALL_BODY);
        if shape == BodyShape::Object || small {
            self.relay_filtered_whole(ex, answer, session, filtered)
        } else {
            self.relay_filtered_stream(ex, answer, session, filtered)
        }
    }

    /// A filtered answer read whole, filtered at once, and sent with its length.
    fn relay_filtered_whole<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        session: Option<Session>,
        filtered: FilteredAnswer<'_>,
    ) -> Relayed<'c> {
        let FilteredAnswer {
            filters,
            shape,
            gzip,
            headers,
            path,
            mut cache_status,
        } = filtered;
        let chain = self.route.filters;
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        let limit = answer
            .length
            .unwrap_or(u64::MAX)
            .min(MAX_OBJECT_BYTES as u64);
        // One declared larger than any object is passed without reading it first.
        let declared_too_large = answer.length.is_some_and(|l| l > limit);
        let body = if declared_too_large {
            Vec::new()
        } else {
            match read_small(&mut answer.body, answer.length, limit, &mut traffic.1) {
                Ok(body) => body,
                Err(e) => return self.broke_off(ex, &answer, e, session),
            }
        };
        if declared_too_large || body.len() as u64 > limit {
            // Larger than any object the filters (and the cache) take: passed unchanged.
            log::info!(
                "an answer larger than {MAX_OBJECT_BYTES} bytes is passed unchanged and not cached path=\"{path}\""
            );
            uncommitted(session);
            let writer = match ex.start(answer.status, &answer.headers, Length::Streamed) {
                Ok(writer) => writer,
                Err(e) => return Relayed::ClientGone(e),
            };
            let pumped = pass_rest(writer, &body, &mut answer, &mut traffic);
            return relayed(pumped, NOT_CACHED, None);
        }
        let mut stage = StageTime::new(chain);
        let outcome = stage.time(|| {
            body::filter_whole(&body, shape, gzip, chain, &filters.ctx, &*filters.lookups)
        });
        drop(stage);
        match outcome {
            Ok(Filtered {
                body: out,
                unreadable: odd,
            }) => {
                let sent = ex.send(answer.status, &headers, &out);
                let mut session = session;
                if let Some(e) = odd {
                    log_unreadable(&e, &path);
                    uncommitted(session.take());
                    cache_status = NOT_CACHED;
                }
                if let Some(mut s) = session {
                    s.chunk_owned(out);
                    s.finish(true);
                }
                done(sent, cache_status)
            }
            Err(e) => {
                log_undecodable(&e, &path);
                uncommitted(session);
                done(ex.send(answer.status, &answer.headers, &body), NOT_CACHED)
            }
        }
    }

    /// A filtered answer filtered as it streams, chunked: pumped through the filter stage,
    /// then the tee, to the client.
    fn relay_filtered_stream<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        session: Option<Session>,
        filtered: FilteredAnswer<'_>,
    ) -> Relayed<'c> {
        let FilteredAnswer {
            filters,
            shape,
            gzip,
            headers,
            path,
            cache_status,
        } = filtered;
        let chain = self.route.filters;
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        answer.headers = Vec::new();
        // A list's repeat at one resourceVersion may pass unscanned (`filters/list_memo.rs`).
        let recall = (shape == BodyShape::List)
            .then(|| chain.reproducible_form(&filters.ctx))
            .flatten()
            .map(|form| {
                // The Accept the cloud got: the route's when it sets one.
                let accept = self.route.upstream_accept.or_else(|| ex.header("accept"));
                Recall::new(&filters.memos, accept.unwrap_or_default(), ex.url(), form)
            });
        let (writer, watched) = match self.start_stream(ex, &headers, &mut answer) {
            Ok(started) => started,
            Err(e) => return Relayed::ClientGone(e),
        };
        drop(headers);
        let note = |why: &Uncached, _: bool| match why {
            Uncached::Unreadable(e) => log_unreadable(e, &path),
            Uncached::Undecodable(e) => log_undecodable(e, &path),
        };
        let tee = Tee::new(ToClient::new(writer), session, &note);
        let mut filter = BodyFilter::new(shape, gzip, chain, &filters.ctx, &*filters.lookups);
        if let Some(recall) = recall {
            filter = filter.recalling(recall);
        }
        // Raw bytes until the first output: a body undecodable from its start passes as it
        // came. (Not for gzip: its header is already gone, the raw bytes would not read.)
        let mut sink = FilterStage::new(tee, filter, StageTime::new(chain), !gzip);
        let mut reads = BodyReads::for_stream(watched.is_some());
        let pumped = pump(&mut answer.body, &mut reads, &mut traffic.1, &mut sink);
        let status = if sink.inner().uncached() {
            NOT_CACHED
        } else {
            cache_status
        };
        relayed(pumped, status, watched.as_ref())
    }
}

/// What the relay of a filtered answer carries from its start to its body's relay.
struct FilteredAnswer<'f> {
    filters: &'f Filters,
    shape: BodyShape,
    gzip: bool,
    /// The cloud's headers but its length (and encoding, for gzip).
    headers: Vec<(String, String)>,
    /// The request's path, for the log lines.
    path: String,
    cache_status: CacheStatus,
}

/// An answer found not for the cache after the tee began.
const NOT_CACHED: CacheStatus = CacheStatus::Bypass(NoCacheReason::Answer);

/// What the relay did, once the client's answer is sent (or not).
fn done<'c>(sent: io::Result<()>, status: CacheStatus) -> Relayed<'c> {
    match sent {
        Ok(()) => Relayed::Done(status),
        Err(e) => Relayed::ClientGone(e),
    }
}

/// What the relay did, once a stream is pumped; `watched`: the reaper's guard of a stream
/// it watches over.
fn relayed<'c>(pumped: Pumped, status: CacheStatus, watched: Option<&Watched>) -> Relayed<'c> {
    match pumped {
        Pumped::Whole => Relayed::Done(status),
        // The reaper cut the cloud's side because the client hung up: the read failed for
        // that, not because the cloud broke off (issue 35).
        Pumped::BrokeOff(e) if watched.is_some_and(Watched::reaped) => Relayed::ClientGone(e),
        // The client was told its answer is incomplete and nothing partial is committed (a
        // list is dropped, a watch keeps whole events).
        Pumped::BrokeOff(e) => {
            log::info!("the cloud's answer broke off mid-body: {e}");
            Relayed::Done(status)
        }
        Pumped::Stopped(Stop::Gone(e)) => Relayed::ClientGone(e),
        // Cut by the filter stage (its note logged why).
        Pumped::Stopped(_) => Relayed::Done(status),
    }
}

/// The answer could not be decoded for the filters: passed unchanged, not cached.
fn log_undecodable(e: &DecodeError, path: &str) {
    log::info!(
        "cannot decode the answer for the response filters: {e}; passed unchanged and not cached path=\"{path}\""
    );
}

/// An object serde cannot read inside an answer: it went out unfiltered, the rest is still
/// filtered, and none of it is cached.
fn log_unreadable(e: &DecodeError, path: &str) {
    log::info!("{e}; passed unfiltered and the answer is not cached path=\"{path}\"");
}

/// A body of `length` bytes when known, read whole up to `limit` + 1 bytes (so one longer
/// than `limit` shows by its size). Read to the end, not just `length` bytes: only a read that
/// sees the end returns the connection to ureq's pool (else every small answer costs a TLS
/// handshake). One shorter than it said is an error: the cloud broke off.
pub(super) fn read_small(
    body: &mut impl Read,
    length: Option<u64>,
    limit: u64,
    traffic: &mut u64,
) -> io::Result<Vec<u8>> {
    let mut buf =
        Vec::with_capacity(length.unwrap_or(SMALL_BODY).min(limit).min(SMALL_BODY) as usize);
    let read = body.take(limit + 1).read_to_end(&mut buf);
    *traffic += buf.len() as u64;
    read?;
    let n = buf.len() as u64;
    match length {
        Some(length) if length <= limit && n != length => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("body ended after {n} of {length} bytes"),
        )),
        _ => Ok(buf),
    }
}

/// Sends `prefix` and then the rest of the cloud's body as it comes, unchanged.
fn pass_rest(
    writer: BodyWriter<'_>,
    prefix: &[u8],
    answer: &mut Answer,
    traffic: &mut Traffic<'_>,
) -> Pumped {
    let mut client = ToClient::new(writer);
    if let Err(stop) = client.write(prefix) {
        return Pumped::Stopped(stop);
    }
    let mut reads = BodyReads::bulk();
    pump(&mut answer.body, &mut reads, &mut traffic.1, &mut client)
}

/// Ends `session`, if any, as incomplete: nothing of the answer is committed.
fn uncommitted(session: Option<Session>) {
    if let Some(s) = session {
        s.finish(false);
    }
}

/// The cache target with what only the request body tells: a TokenRequest's digest (none
/// when the body is not a readable TokenRequest, and then nothing is kept).
fn keyed(target: Arc<CacheTarget>, request_body: Option<&[u8]>) -> Arc<CacheTarget> {
    match &*target {
        CacheTarget::Token(token) => Arc::new(CacheTarget::Token(TokenTarget {
            digest: request_body
                .filter(|b| b.len() <= crate::tokens::MAX_REQUEST_BYTES)
                .and_then(crate::tokens::TokenSpec::parse)
                .map(|spec| spec.digest()),
            ..token.clone()
        })),
        _ => target,
    }
}

/// Bytes the cloud sent for one request (the in-flight count it goes to, and the bytes),
/// counted once when the request ends (one metrics lock per request, not per chunk).
pub(super) struct Traffic<'a>(pub(super) Option<&'a InFlight>, pub(super) u64);

impl Drop for Traffic<'_> {
    fn drop(&mut self) {
        if let Some(in_flight) = self.0 {
            in_flight.add_traffic(self.1);
        }
    }
}

/// What an answer is cached as, when its status is worth a cache session (a discovery
/// document goes to the file of the form the cloud answered in).
fn wants_cache(target: &Arc<CacheTarget>, answer: &Answer) -> Option<Arc<CacheTarget>> {
    let worth = match answer.status {
        200 | 201 => answer.is_json(),
        // A 404 for a list prunes the kind; for a get it removes the object.
        404 => matches!(
            **target,
            CacheTarget::List { .. } | CacheTarget::Object { name: Some(_), .. }
        ),
        _ => false,
    };
    // Only a discovery document's file depends on the form: the header is read for it alone.
    let discovery = matches!(**target, CacheTarget::NonResource { .. });
    worth
        .then(|| {
            let content_type = discovery.then(|| answer.header("content-type")).flatten();
            route::target_for_answer(target, content_type)
        })
        .flatten()
}
