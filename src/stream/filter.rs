//! The filter stage as a sink: each chunk goes through the response filters
//! (`filters::body::BodyFilter`) and what it completes goes on to the sink wrapped, so the
//! client and the cache get the same filtered bytes.

use std::time::Duration;

use super::{ClientEnd, Sink, Stop, Uncached};
use crate::cache::decode::DecodeError;
use crate::filters::body::{BodyFilter, StageTime};
use crate::server::ClientProbe;

/// A body is kept raw until its first filtered output, up to this much, so one found
/// undecodable at its start can still pass unchanged.
const HOLD_RAW: usize = 64 * 1024;
/// An output buffer that grew past this (a huge item) is released rather than kept.
const KEEP_OUT: usize = 1 << 20;

/// Filters what passes to `inner`; with no filter, passes it as it comes.
pub(crate) struct FilterStage<'f, S> {
    inner: S,
    /// The filter and its time on this answer (recorded once, when dropped: before the
    /// inner stage finishes, so a client that read the answer sees it counted). None: no
    /// filter, or the body passes unchanged since it was found undecodable.
    stage: Option<(BodyFilter<'f>, StageTime)>,
    /// What the filter completed of the last chunk, reused from chunk to chunk.
    out: Vec<u8>,
    /// The raw body until the first output, when it may pass unchanged.
    held: Option<Vec<u8>>,
}

impl<'f, S: Sink> FilterStage<'f, S> {
    /// Filters what passes to `inner` through `filter`, timed by `time`. With `hold_raw`, a
    /// body undecodable before any output passes unchanged instead of being cut (not for
    /// gzip: its header is gone by then, the raw bytes would not read; nor for the caches'
    /// own JSON, where it would be a bug).
    pub(crate) fn new(
        inner: S,
        filter: BodyFilter<'f>,
        time: StageTime,
        hold_raw: bool,
    ) -> FilterStage<'f, S> {
        FilterStage {
            inner,
            stage: Some((filter, time)),
            out: Vec::new(),
            held: hold_raw.then(Vec::new),
        }
    }

    /// Passes everything to `inner` unchanged.
    pub(crate) fn none(inner: S) -> FilterStage<'f, S> {
        FilterStage {
            inner,
            stage: None,
            out: Vec::new(),
            held: None,
        }
    }

    /// The sink it wraps.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    /// The sink it wraps.
    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Sends what the filter completed on.
    fn send_out(&mut self) -> Result<(), Stop> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.held = None;
        self.inner.write(&self.out)?;
        self.out.clear();
        if self.out.capacity() > KEEP_OUT {
            self.out = Vec::new();
        }
        Ok(())
    }

    /// An object went out unfiltered: the answer is not for the cache.
    fn check_readable(&mut self) -> Result<(), Stop> {
        match self.stage.as_mut().and_then(|(f, _)| f.take_unreadable()) {
            Some(e) => self.inner.uncache(Uncached::Unreadable(e)),
            None => Ok(()),
        }
    }

    /// The body cannot be decoded: not for the cache, and the rest passes unchanged when
    /// its start is still held, else the stream is cut.
    fn undecodable(&mut self, e: DecodeError) -> Result<(), Stop> {
        self.stage = None;
        self.inner.uncache(Uncached::Undecodable(e))?;
        match self.held.take() {
            Some(raw) => self.inner.write(&raw),
            None => Err(Stop::Undecodable),
        }
    }
}

impl<S: Sink> Sink for FilterStage<'_, S> {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        let Some((filter, time)) = self.stage.as_mut() else {
            return self.inner.write(data);
        };
        // The rest of a list proven unchanged: sent on as it came, without a copy.
        if filter.passes_raw() {
            self.send_out()?;
            return self.inner.write(data);
        }
        if let Some(raw) = self.held.as_mut() {
            raw.extend_from_slice(data);
            if raw.len() > HOLD_RAW {
                self.held = None;
            }
        }
        let out = &mut self.out;
        if let Err(e) = time.time(|| filter.feed(data, out)) {
            return self.undecodable(e);
        }
        self.check_readable()?;
        self.send_out()
    }

    fn finish(&mut self) -> Result<(), Stop> {
        if let Some((filter, time)) = self.stage.as_mut() {
            let out = &mut self.out;
            let finished = time.time(|| filter.finish(out));
            self.check_readable()?;
            match finished {
                Ok(()) => self.send_out()?,
                Err(e) => self.undecodable(e)?,
            }
            // The stage's time is recorded now, before the client's last chunk.
            self.stage = None;
        }
        self.inner.finish()
    }

    fn abort(&mut self) {
        self.inner.abort();
    }

    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        self.inner.uncache(why)
    }

    fn session_only(&mut self, events: &[u8]) -> Result<(), Stop> {
        self.inner.session_only(events)
    }
}

impl<S: ClientEnd> ClientEnd for FilterStage<'_, S> {
    fn client_gone(&mut self, wait: Duration) -> bool {
        self.inner.client_gone(wait)
    }

    fn probe(&self) -> Option<ClientProbe> {
        self.inner.probe()
    }
}
