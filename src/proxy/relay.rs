//! The relay: the cloud's answer streamed to the client while a copy goes to the cache
//! writer (the tee only `try_send`s: the client never waits for the disk). A small answer of
//! known length is read whole first, so a cloud that breaks off within it can still be
//! answered from the cache; a larger one streams through a buffer that grows with the reads.

use std::io::{self, Read};

use super::call::{Call, Relayed};
use super::filter_body::{self, BodyFilter, Filtered, StageTime};
use super::{CacheStatus, Filters};
use crate::cache::decode::{BodyShape, DecodeError};
use crate::cache::target::{CacheTarget, TokenTarget};
use crate::cache::writer::{MAX_OBJECT_BYTES, Refill, Session};
use crate::metrics::InFlight;
use crate::reaper::Watched;
use crate::request::Verb;
use crate::route::{self, Identity, NoCacheReason};
use crate::server::{BodyWriter, Exchange, Length};
use crate::upstream::{Answer, UpstreamError};

/// Bodies up to this size with a known length are received whole before the client gets
/// anything, so a cloud that breaks off mid-body can still be answered from the cache.
const SMALL_BODY: u64 = 64 * 1024;
/// Relay buffer of a streaming request at first, and at most (a TLS record's worth).
const RELAY_BUFFER_START: usize = 4 * 1024;
const RELAY_BUFFER: usize = 16 * 1024;
/// A streamed filtered body is kept raw until its first filtered output, up to this much, so
/// a body found undecodable at its start can still pass unchanged.
const HOLD_RAW: usize = 64 * 1024;
/// A filter output buffer that grew past this (a huge item) is released rather than kept.
const KEEP_OUT: usize = 1 << 20;

impl Call<'_> {
    /// Streams the cloud's answer to the client, teeing it into the cache. `request_body` is
    /// the copy of a TokenRequest's body, which names the cache key of its answer.
    pub(super) fn relay<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        request_body: Option<&[u8]>,
    ) -> Relayed<'c> {
        let route = &self.route;
        let mut session = None;
        // Filtered answers are decoded, so they are cached as the plain JSON the client gets.
        let filtering = self.filtering(&answer);
        let answer_target = route
            .cache
            .as_ref()
            .ok()
            .and_then(|t| wants_cache(t, &answer));
        let cache_status = match (&route.cache, &self.hub.cache, answer_target) {
            (Ok(_), Some(cache), Some(target)) => {
                // Should the disk fall behind, the hub reads the answer again itself: reads
                // only, and only on its own credentials, which the client's did not replace.
                // (A refill filters like the relay: it computes the same chain.)
                let refill = self
                    .component()
                    .filter(|_| route.identity == Identity::Hub && ex.method() == "GET")
                    .map(|component| Refill {
                        path_and_query: ex.url().to_owned(),
                        component: component.to_owned(),
                    });
                let target = keyed(target, request_body);
                let gzip = answer.is_gzip() && filtering.is_none();
                session = cache.begin(target, answer.status, gzip, refill);
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
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        let done = |sent: io::Result<()>| match sent {
            Ok(()) => Relayed::Done(cache_status),
            Err(e) => Relayed::ClientGone(e),
        };

        // HEAD, 204 and 304 carry no body, whatever their Content-Length says.
        // (Never cached: routes do not cache HEAD, `wants_cache` refuses these statuses.)
        if ex.method() == "HEAD" || matches!(answer.status, 100..=199 | 204 | 304) {
            let length = Length::Known(answer.length.unwrap_or(0));
            return done(
                ex.start(answer.status, &answer.headers, length)
                    .and_then(|w| w.finish()),
            );
        }

        if let Some((filters, shape)) = filtering {
            return self.relay_filtered(ex, answer, session, cache_status, filters, shape);
        }

        if let Some(length) = answer.length.filter(|&l| l <= SMALL_BODY) {
            let body = match read_small(&mut answer.body, Some(length), length, &mut traffic.1) {
                Ok(body) => body,
                Err(e) => return self.broke_off(ex, &answer, e, session),
            };
            let sent = ex.send(answer.status, &answer.headers, &body);
            // The client has its answer; the body moves to the writer without a copy.
            if let Some(mut s) = session {
                s.chunk_owned(body);
                s.finish(true);
            }
            return done(sent);
        }

        let headers = std::mem::take(&mut answer.headers);
        let (mut writer, _watched) = match self.start_stream(ex, &headers, &mut answer) {
            Ok(started) => started,
            Err(e) => return Relayed::ClientGone(e),
        };
        drop(headers);
        let mut reads = BodyReads::new(RELAY_BUFFER_START);
        loop {
            let chunk = match reads.next(&mut answer.body, &mut traffic.1) {
                Chunk::Data(chunk) => chunk,
                Chunk::End => break,
                Chunk::BrokeOff => {
                    // Tell the client its answer is incomplete and commit nothing partial (a
                    // list is dropped, a watch keeps whole events).
                    uncommitted(session.take());
                    writer.abort();
                    return Relayed::Done(cache_status);
                }
            };
            if let Err(e) = writer.write(chunk) {
                uncommitted(session.take());
                return Relayed::ClientGone(e);
            }
            if let Some(s) = session.as_mut()
                && !s.chunk(chunk)
            {
                session = None;
            }
        }
        if let Some(s) = session {
            s.finish(true);
        }
        done(writer.finish())
    }
}

impl Call<'_> {
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
        let error = UpstreamError::Transport {
            server: self.hub.cloud.server(answer.backend).to_owned(),
            detail: format!("the answer broke off: {e}"),
            timeout: e.kind() == io::ErrorKind::TimedOut,
            maybe_sent: true,
        };
        Relayed::CloudBrokeOff(ex, error)
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
        let shape = match self.req.as_ref()?.verb {
            Verb::List => BodyShape::List,
            Verb::Watch => BodyShape::WatchStream,
            _ => BodyShape::Object,
        };
        Some((filters, shape))
    }

    /// The relay of a filtered answer (YurtHub's `pkg/yurthub/filter/responsefilter`): filtered
    /// before the tee, so the cache holds what the client got. A get or a small answer is filtered
    /// whole and sent with its new length; a larger list or a watch is filtered as it streams,
    /// chunked. An answer that cannot be decoded passes unchanged, with one log line, and is not
    /// cached.
    fn relay_filtered<'c>(
        &self,
        ex: Exchange<'c>,
        mut answer: Answer,
        mut session: Option<Session>,
        mut cache_status: CacheStatus,
        filters: &Filters,
        shape: BodyShape,
    ) -> Relayed<'c> {
        let chain = self.route.filters;
        let gzip = answer.is_gzip();
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
        let mut traffic = Traffic(self.in_flight.as_ref(), 0);
        let done = |sent: io::Result<()>, status| match sent {
            Ok(()) => Relayed::Done(status),
            Err(e) => Relayed::ClientGone(e),
        };
        let not_cached = CacheStatus::Bypass(NoCacheReason::Answer);
        // For the log line of an undecodable answer (the exchange is gone by then).
        let path = crate::request::truncate(ex.url()).to_string();
        let undecodable = |e: &DecodeError| {
            log::info!(
                "cannot decode the answer for the response filters: {e}; passed unchanged and not cached path=\"{path}\""
            );
        };
        // An object serde cannot read inside a streamed answer: it went out unfiltered, the
        // rest is still filtered, and none of it is cached.
        let unreadable = |e: DecodeError, session: &mut Option<Session>| {
            log::info!("{e}; passed unfiltered and the answer is not cached path=\"{path}\"");
            uncommitted(session.take());
            not_cached
        };

        // A small gzip list may inflate a thousandfold: lists in gzip always stream.
        let small = !gzip && answer.length.is_some_and(|l| l <= SMALL_BODY);
        let whole = shape == BodyShape::Object || small;
        if whole {
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
                return done(
                    pass_rest(writer, &body, &mut answer, &mut traffic),
                    not_cached,
                );
            }
            let mut stage = StageTime::new(chain);
            let filtered = stage.time(|| {
                filter_body::filter_whole(
                    &body,
                    shape,
                    gzip,
                    chain,
                    &filters.ctx,
                    &*filters.lookups,
                )
            });
            drop(stage);
            return match filtered {
                Ok(Filtered {
                    body: out,
                    unreadable: odd,
                }) => {
                    let sent = ex.send(answer.status, &headers, &out);
                    if let Some(e) = odd {
                        cache_status = unreadable(e, &mut session);
                    }
                    if let Some(mut s) = session {
                        s.chunk_owned(out);
                        s.finish(true);
                    }
                    done(sent, cache_status)
                }
                Err(e) => {
                    undecodable(&e);
                    uncommitted(session);
                    done(ex.send(answer.status, &answer.headers, &body), not_cached)
                }
            };
        }

        answer.headers = Vec::new();
        let (mut writer, _watched) = match self.start_stream(ex, &headers, &mut answer) {
            Ok(started) => started,
            Err(e) => return Relayed::ClientGone(e),
        };
        drop(headers);
        let mut filter = BodyFilter::new(shape, gzip, chain, &filters.ctx, &*filters.lookups);
        // Recorded once, whichever way the relay ends (a watch: when it ends).
        let mut stage = StageTime::new(chain);
        let mut reads = BodyReads::new(RELAY_BUFFER_START);
        let mut out = Vec::new();
        // Raw bytes until the first output: a body undecodable from its start passes as it
        // came. (Not for gzip: its header is already gone, the raw bytes would not read.)
        let mut held = (!gzip).then(Vec::new);
        loop {
            let chunk = match reads.next(&mut answer.body, &mut traffic.1) {
                Chunk::Data(chunk) => chunk,
                Chunk::End => break,
                Chunk::BrokeOff => {
                    uncommitted(session.take());
                    writer.abort();
                    return Relayed::Done(cache_status);
                }
            };
            if let Some(raw) = held.as_mut() {
                raw.extend_from_slice(chunk);
                if raw.len() > HOLD_RAW {
                    held = None;
                }
            }
            if let Err(e) = stage.time(|| filter.feed(chunk, &mut out)) {
                undecodable(&e);
                uncommitted(session.take());
                return match held {
                    Some(raw) => done(
                        pass_rest(writer, &raw, &mut answer, &mut traffic),
                        not_cached,
                    ),
                    None => {
                        writer.abort();
                        Relayed::Done(not_cached)
                    }
                };
            }
            if let Some(e) = filter.take_unreadable() {
                cache_status = unreadable(e, &mut session);
            }
            if !out.is_empty() {
                held = None;
                if let Err(e) = writer.write(&out) {
                    uncommitted(session.take());
                    return Relayed::ClientGone(e);
                }
                if let Some(s) = session.as_mut()
                    && !s.chunk(&out)
                {
                    session = None;
                }
                out.clear();
                if out.capacity() > KEEP_OUT {
                    out = Vec::new();
                }
            }
        }
        let finished = stage.time(|| filter.finish(&mut out));
        if let Some(e) = filter.take_unreadable() {
            cache_status = unreadable(e, &mut session);
        }
        if let Err(e) = finished {
            undecodable(&e);
            uncommitted(session.take());
            cache_status = not_cached;
            match held {
                Some(raw) => {
                    if let Err(e) = writer.write(&raw) {
                        return Relayed::ClientGone(e);
                    }
                }
                None => {
                    writer.abort();
                    return Relayed::Done(not_cached);
                }
            }
        } else if let Err(e) = writer.write(&out) {
            uncommitted(session.take());
            return Relayed::ClientGone(e);
        } else if let Some(mut s) = session {
            s.chunk(&out);
            s.finish(true);
        }
        // Recorded before the last chunk: a client that read the answer sees it counted.
        drop(stage);
        done(writer.finish(), cache_status)
    }
}

/// A body of `length` bytes when known, read whole up to `limit` + 1 bytes (so one longer
/// than `limit` shows by its size). Read to the end, not just `length` bytes: only a read that
/// sees the end returns the connection to ureq's pool (else every small answer costs a TLS
/// handshake). One shorter than it said is an error: the cloud broke off.
fn read_small(
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
    mut writer: BodyWriter<'_>,
    prefix: &[u8],
    answer: &mut Answer,
    traffic: &mut Traffic<'_>,
) -> io::Result<()> {
    writer.write(prefix)?;
    let mut reads = BodyReads::new(RELAY_BUFFER);
    loop {
        match reads.next(&mut answer.body, &mut traffic.1) {
            Chunk::Data(chunk) => writer.write(chunk)?,
            Chunk::End => return writer.finish(),
            Chunk::BrokeOff => {
                writer.abort();
                return Ok(());
            }
        }
    }
}

/// The relay's reads of the cloud's body. The buffer starts small (a watch's events are
/// small, and a thousand watches may be open) and grows to a TLS record's size once a read
/// fills it (a big list); every byte is counted for the traffic metric.
struct BodyReads {
    buf: Vec<u8>,
    /// The last read filled the buffer.
    filled: bool,
}

/// What one read of the cloud's body gave.
enum Chunk<'b> {
    /// Bytes of the body.
    Data(&'b [u8]),
    /// The body ended.
    End,
    /// The cloud broke off mid-body, or the reaper cut a stream whose client left (logged).
    BrokeOff,
}

impl BodyReads {
    fn new(start: usize) -> BodyReads {
        BodyReads {
            buf: vec![0u8; start],
            filled: false,
        }
    }

    /// The next chunk of `body`; its length is added to `traffic`.
    fn next(&mut self, body: &mut impl Read, traffic: &mut u64) -> Chunk<'_> {
        if self.filled && self.buf.len() < RELAY_BUFFER {
            self.buf.resize(RELAY_BUFFER, 0);
        }
        loop {
            match body.read(&mut self.buf) {
                Ok(0) => return Chunk::End,
                Ok(n) => {
                    *traffic += n as u64;
                    self.filled = n == self.buf.len();
                    return Chunk::Data(&self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::info!("the cloud's answer broke off mid-body: {e}");
                    return Chunk::BrokeOff;
                }
            }
        }
    }
}

/// Ends `session`, if any, as incomplete: nothing of the answer is committed.
fn uncommitted(session: Option<Session>) {
    if let Some(s) = session {
        s.finish(false);
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
        .then(|| route::target_for_answer(target, answer.header("content-type")))
        .flatten()
}
