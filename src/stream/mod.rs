//! One stream engine for every body the hub passes on: [`pump`] reads a source in chunks and
//! pushes each into a [`Sink`]; the stages of the way are sinks that wrap sinks. The relay of
//! a forwarded answer, the refill of a dropped one, the answers from the pool's watch caches
//! and the rest of an answer passed unchanged are compositions of the same parts:
//!
//! ```text
//! source ──pump──> FilterStage ──> Tee ──> ToClient      relay (filtered), pool caches
//!                                    └──> Session (try_send: never waits)
//! source ──pump──> Tee ──> ToClient                      relay (plain)
//! source ──pump──> FilterStage ──> ToCache               refill (sends wait for the disk)
//! source ──pump──> ToClient                              the rest of an answer passed unchanged
//! legs ──pump──> EventCut ──> FilterStage ──> Tee ──> ToClient   a resumable watch
//! ```
//!
//! The layers, from the outside in:
//!
//! - [`pump`] and [`BodyReads`]: one read buffer per stream, 16 KiB (a TLS record's worth) for
//!   an answer with an end (a big list: 1,000 pods are 5 MB); for a watch 4 KiB at first (its
//!   events are small, and a thousand watches may be open), 16 KiB once a read fills it, none
//!   while it waits between bursts; every byte counted for the traffic metric. A read that
//!   fails mid-body is the source breaking off: every sink is aborted.
//! - [`FilterStage`] (`filter.rs`): the response filters (`filters::body::BodyFilter`) between
//!   the source and the rest, so the client and the cache get the same filtered bytes. Its
//!   output buffer is reused from chunk to chunk. A body it cannot decode passes unchanged
//!   when nothing filtered went out yet and its start is still held (the relay's; not gzip),
//!   else the stream is cut.
//! - [`Tee`] (`tee.rs`): what passed to the sink it wraps is copied to a cache [`Session`]
//!   (`cache/writer/tee.rs`), which only `try_send`s: a full queue drops the session (the
//!   refill thread fetches the answer again), a stream that breaks off ends it uncommitted,
//!   and an answer the filters could not wholly read is not cached. Its [`TeeMode`] sends
//!   whole events to the client only or the session only (the endpoints overlay's).
//! - [`EventCut`] (`events.rs`), the outermost stage of a resumable watch: only whole events
//!   pass (a leg broken inside one leaves nothing of it), what the client was sent is kept
//!   ([`Progress`]: the resourceVersion the next leg resumes from), the ERRORs an outage
//!   causes end the leg unseen ([`LegEnd`]), and a leg's end never ends the stages inside.
//!   [`ClientEnd`] lets the watch's loop wait on the client while no leg is open.
//! - The ends: [`ToClient`], the client's body writer; [`ToCache`], a session that must
//!   keep everything (the refill's: its sends wait, and a full queue or an unreadable object
//!   fails the refill).
//!
//! Every sink is static (generics): a chunk passes the stages with no allocation and no copy
//! beyond those the stages exist for (the filter's output, the cache's own copy).
//!
//! What it does not do: decide whether to filter or cache (`route`, the relay), read whole
//! small answers (the relay does, to answer from the cache when the cloud breaks off), or
//! log (the caller knows which request it is; the tee takes its note).

mod events;
mod filter;
mod tee;

use std::fmt;
use std::io::{self, Read};
use std::time::Duration;

pub(crate) use events::{EventCut, LegEnd, Progress};
pub(crate) use filter::FilterStage;
pub(crate) use tee::{Tee, TeeMode, ToCache};

use crate::cache::decode::DecodeError;
use crate::server::{BodyWriter, ClientProbe};

/// A stream's read buffer at first (a watch's events are small; many watches may be open).
pub(crate) const BUFFER_START: usize = 4 * 1024;
/// A stream's read buffer once a read filled it, and at most (a TLS record's worth).
pub(crate) const BUFFER: usize = 16 * 1024;

/// Where the bytes of a stream go, one stage of the way. A stage that wraps another passes
/// on what it makes of each chunk; `finish` and `abort` end the stages from the outside in.
pub(crate) trait Sink {
    /// Takes the next bytes of the body.
    fn write(&mut self, data: &[u8]) -> Result<(), Stop>;
    /// The body ended whole: the stage ends its own output, then the one it wraps.
    fn finish(&mut self) -> Result<(), Stop>;
    /// The body broke off or a stage stopped it: nothing of it counts as whole. Called after
    /// a failed `write` or `finish` too; a second call does nothing.
    fn abort(&mut self);
    /// What the answer holds is not for the cache (`why`). A stage with no cache copy passes
    /// it on; a tee drops its session; the end of a chain ignores it, or fails when keeping
    /// the answer is its whole job.
    fn uncache(&mut self, why: Uncached) -> Result<(), Stop>;
    /// Whole events for the cache's session only, never the client: the cloud's bookmarks a
    /// client did not ask for, which still tell the disk cache the cloud was heard
    /// (`cache/synced.rs`). A stage passes them on unchanged; a tee copies them to its
    /// session; any other end drops them.
    fn session_only(&mut self, events: &[u8]) -> Result<(), Stop> {
        let _ = events;
        Ok(())
    }
}

/// Why an answer is not for the cache, found by the filter stage.
#[derive(Debug)]
pub(crate) enum Uncached {
    /// An object went out unfiltered because serde could not read it (the scanner could):
    /// the client gets it, the rest is still filtered.
    Unreadable(DecodeError),
    /// The filter stage cannot decode the body: the rest passes unchanged, or is cut.
    Undecodable(DecodeError),
}

impl Uncached {
    /// The decode error behind it.
    pub(crate) fn into_error(self) -> DecodeError {
        match self {
            Uncached::Unreadable(e) | Uncached::Undecodable(e) => e,
        }
    }
}

/// Why a stage stopped the stream.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The receiver failed: the client hung up, or a write timed out.
    Gone(io::Error),
    /// The filter stage could not decode the body, and could not pass it unchanged: the
    /// stream is cut.
    Undecodable,
    /// A session that must keep everything found the writer's queue full.
    QueueFull,
    /// A session that must keep everything got an answer the cache must not keep.
    Uncacheable(DecodeError),
    /// The watch's upstream leg ended (`EventCut`: an ERROR or a body that is not a watch
    /// stream); the client's stream goes on with the next leg, or ends as the loop decides.
    EndOfLeg,
}

/// A chain whose end is a client: the resumable watch waits on it while no leg is open.
pub(crate) trait ClientEnd {
    /// Whether the client hung up (waits up to `wait`); true once its answer has ended.
    fn client_gone(&mut self, wait: Duration) -> bool;
    /// A probe of the client's connection for the reaper (None when there is none).
    fn probe(&self) -> Option<ClientProbe>;
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Gone(e) => e.fmt(f),
            Stop::Undecodable => f.write_str("the filter stage cannot decode the body"),
            Stop::QueueFull => f.write_str("the cache writer's queue stayed full"),
            Stop::Uncacheable(e) => e.fmt(f),
            Stop::EndOfLeg => f.write_str("the watch's upstream leg ended"),
        }
    }
}

impl From<Stop> for io::Error {
    fn from(stop: Stop) -> io::Error {
        match stop {
            Stop::Gone(e) => e,
            other => io::Error::other(other.to_string()),
        }
    }
}

/// How a pumped stream ended.
#[derive(Debug)]
pub(crate) enum Pumped {
    /// The source ended and every stage finished.
    Whole,
    /// The source broke off mid-body (or the reaper cut it): every stage was aborted.
    BrokeOff(io::Error),
    /// A stage stopped the stream: every stage was aborted.
    Stopped(Stop),
}

/// Reads `source` to its end into `sink`, through `reads`' buffer, adding every byte read to
/// `traffic`; finishes the sink at the end, aborts it when the source breaks off or a stage
/// stops.
pub(crate) fn pump(
    source: &mut impl Read,
    reads: &mut BodyReads,
    traffic: &mut u64,
    sink: &mut impl Sink,
) -> Pumped {
    // A stream may wait for its next chunk for hours (a watch): the stack pages its thread
    // touched before (the connection's TLS handshake) are given back first.
    crate::alloc::trim_stack();
    let stopped = loop {
        match reads.next(source, traffic) {
            Ok(Some(chunk)) => {
                if let Err(stop) = sink.write(chunk) {
                    break stop;
                }
            }
            Ok(None) => match sink.finish() {
                Ok(()) => return Pumped::Whole,
                Err(stop) => break stop,
            },
            Err(e) => {
                sink.abort();
                return Pumped::BrokeOff(e);
            }
        }
    };
    sink.abort();
    Pumped::Stopped(stopped)
}

/// The reads of one stream's source, in one of two ways:
///
/// - a watch's ([`BodyReads::watch`]) holds no buffer between bursts: the wait for the next
///   bytes (for hours) is a read of [`IDLE_READ`] bytes into the reads themselves, and the
///   buffer is made again for the reads that follow, at [`BUFFER_START`], grown to [`BUFFER`]
///   once a read fills it, and let go after a read of less than [`BUFFER_START`] (a burst's
///   end).
/// - an answer's with an end ([`BodyReads::bulk`]: a list, a get, a refill) keeps one buffer
///   of [`BUFFER`] from its first read to its end. Short reads are common there (the rest of
///   a TLS record; a cloud writing small records): letting the buffer go at each made a
///   5 MB list's reads alternate 64 and 4,032 bytes, twice the hub's CPU per list.
pub(crate) struct BodyReads {
    buf: Vec<u8>,
    /// The size the buffer is made at.
    start: usize,
    /// What an idle read got.
    first: [u8; IDLE_READ],
    /// The last read filled the buffer.
    filled: bool,
    /// The last read was shorter than [`BUFFER_START`] (or none was made yet at that size):
    /// the next one waits without a buffer. Never for bulk reads.
    short: bool,
    /// A watch's reads: a short read lets the buffer go.
    watch: bool,
}

/// The read a stream waits in between bursts: the start of an event at most.
const IDLE_READ: usize = 64;

impl BodyReads {
    /// A watch's reads: the first waits without a buffer (a watch may see nothing for hours).
    pub(crate) fn watch() -> BodyReads {
        BodyReads {
            buf: Vec::new(),
            start: BUFFER_START,
            first: [0u8; IDLE_READ],
            filled: false,
            short: true,
            watch: true,
        }
    }

    /// The reads of an answer with an end: one buffer of [`BUFFER`], made at the first read.
    pub(crate) fn bulk() -> BodyReads {
        BodyReads {
            buf: Vec::new(),
            start: BUFFER,
            first: [0u8; IDLE_READ],
            filled: false,
            short: false,
            watch: false,
        }
    }

    /// A watch's reads when `watch`, else an answer's with an end.
    pub(crate) fn for_stream(watch: bool) -> BodyReads {
        if watch {
            BodyReads::watch()
        } else {
            BodyReads::bulk()
        }
    }

    /// The next chunk of `source` (None at its end); its length is added to `traffic`.
    pub(crate) fn next(
        &mut self,
        source: &mut impl Read,
        traffic: &mut u64,
    ) -> io::Result<Option<&[u8]>> {
        let idle = self.short;
        if idle {
            self.buf = Vec::new();
        } else if self.buf.is_empty() {
            self.buf = vec![0u8; self.start];
        } else if self.filled && self.buf.len() < BUFFER {
            self.buf.resize(BUFFER, 0);
        }
        let into = if idle {
            &mut self.first[..]
        } else {
            &mut self.buf[..]
        };
        loop {
            match source.read(into) {
                Ok(0) => return Ok(None),
                Ok(n) => {
                    *traffic += n as u64;
                    self.filled = !idle && n == into.len();
                    self.short = self.watch && !idle && n < BUFFER_START;
                    return Ok(Some(&into[..n]));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The client's end of a stream: its body writer, until finished or aborted.
pub(crate) struct ToClient<'c> {
    writer: Option<BodyWriter<'c>>,
}

impl<'c> ToClient<'c> {
    /// The end that writes to `writer`.
    pub(crate) fn new(writer: BodyWriter<'c>) -> ToClient<'c> {
        ToClient {
            writer: Some(writer),
        }
    }

    /// Whether the client hung up (waits up to `wait`); true once the body has ended.
    pub(crate) fn client_gone(&mut self, wait: Duration) -> bool {
        self.writer.as_mut().is_none_or(|w| w.client_gone(wait))
    }
}

impl ClientEnd for ToClient<'_> {
    fn client_gone(&mut self, wait: Duration) -> bool {
        ToClient::client_gone(self, wait)
    }

    fn probe(&self) -> Option<ClientProbe> {
        self.writer.as_ref().and_then(BodyWriter::probe)
    }
}

impl Sink for ToClient<'_> {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        match self.writer.as_mut() {
            Some(writer) => writer.write(data).map_err(Stop::Gone),
            None => Err(Stop::Gone(io::Error::other("the answer has ended"))),
        }
    }

    fn finish(&mut self) -> Result<(), Stop> {
        match self.writer.take() {
            Some(writer) => writer.finish().map_err(Stop::Gone),
            None => Ok(()),
        }
    }

    fn abort(&mut self) {
        if let Some(writer) = self.writer.take() {
            writer.abort();
        }
    }

    fn uncache(&mut self, _why: Uncached) -> Result<(), Stop> {
        Ok(())
    }
}

/// A sink as an `io::Write`, for sources that write rather than get read (the pool caches'
/// pages and watch batches). A stop reads as an error.
pub(crate) struct SinkWrite<'s, S>(pub &'s mut S);

impl<S: Sink> io::Write for SinkWrite<'_, S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.write(data)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
