//! [`BodyDecoder`]: a [`JsonStream`] behind an optional gzip decoder, inflating at most a few
//! tens of KiB at a time and handing each inflated piece on at once.

use std::fmt;
use std::io::Write;

use flate2::write::GzDecoder;

use super::{BodyShape, DecodeError, JsonStream, Located, Path, Unit};

/// A [`JsonStream`] behind an optional gzip decoder.
pub(crate) struct BodyDecoder {
    json: JsonStream,
    /// Inflates into its inner Vec, which is drained into `json` after every write.
    gzip: Option<GzDecoder<Vec<u8>>>,
    failed: Option<DecodeError>,
    finished: bool,
    /// After the JSON halted ([`BodyDecoder::halt_after_member`]): the plain bytes not scanned,
    /// until [`BodyDecoder::resume`] or [`BodyDecoder::pass_rest`].
    rest: Option<Vec<u8>>,
}

impl fmt::Debug for BodyDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyDecoder")
            .field("json", &self.json)
            .field("gzip", &self.gzip.is_some())
            .field("failed", &self.failed)
            .finish()
    }
}

impl BodyDecoder {
    /// A decoder for a body of `shape`, gzip-compressed if `gzip`, with units of at most
    /// `max_unit_bytes` (after decompression).
    pub(crate) fn new(shape: BodyShape, gzip: bool, max_unit_bytes: usize) -> Self {
        BodyDecoder {
            json: JsonStream::new(shape, max_unit_bytes),
            gzip: gzip.then(|| GzDecoder::new(Vec::new())),
            failed: None,
            finished: false,
            rest: None,
        }
    }

    /// Makes the JSON halt once after a list's member `name` ([`JsonStream::halt_after_member`]).
    pub(crate) fn halt_after_member(mut self, name: &'static str) -> Self {
        self.json = self.json.halt_after_member(name);
        self
    }

    /// Whether the JSON halted: what it did not scan is held until [`BodyDecoder::resume`]
    /// or [`BodyDecoder::pass_rest`] (a feed meanwhile adds to it, unscanned).
    pub(crate) fn halted(&self) -> bool {
        self.rest.is_some()
    }

    /// Scans what the halt held, and what follows, as if it had not halted.
    pub(crate) fn resume(
        &mut self,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        let Some(rest) = self.rest.take() else {
            return Ok(());
        };
        let result = self.json.feed_located(&rest, sink);
        result.inspect_err(|err| self.failed = Some(err.clone()))
    }

    /// Hands what the halt held to `out` unscanned: from now on the body is only inflated
    /// ([`BodyDecoder::feed_plain`], [`BodyDecoder::finish_plain`]).
    pub(crate) fn pass_rest(&mut self, out: &mut Vec<u8>) {
        if let Some(rest) = self.rest.take() {
            out.extend_from_slice(&rest);
        }
    }

    /// Whether the body is gzip: when not, its plain bytes are the ones received.
    pub(crate) fn is_gzip(&self) -> bool {
        self.gzip.is_some()
    }

    /// The next chunk of a body passed unscanned: its plain bytes appended to `out`.
    pub(crate) fn feed_plain(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
        self.guarded(|d| {
            let offset = d.json.offset;
            plain_of(&mut d.gzip, d.finished, offset, raw, &mut |plain| {
                out.extend_from_slice(plain);
                Ok(())
            })
        })
    }

    /// The end of a body passed unscanned: checks that its gzip stream (if any) ended cleanly,
    /// appending its last plain bytes to `out`. The JSON is not checked: nothing scanned it.
    pub(crate) fn finish_plain(&mut self, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        self.guarded(|d| {
            let mut result = Ok(());
            if !d.finished {
                result = finish_gzip(&mut d.gzip, &mut |plain| {
                    out.extend_from_slice(plain);
                    Ok(())
                });
            }
            d.finished = true;
            result
        })
    }

    /// Runs `step` on the body unless it failed before (then its error again), and keeps the
    /// error `step` meets: a body that failed stays failed.
    fn guarded(
        &mut self,
        step: impl FnOnce(&mut Self) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = step(self);
        result.inspect_err(|err| self.failed = Some(err.clone()))
    }

    /// Locates the values at `paths` in every unit: see [`JsonStream::locating`].
    pub(crate) fn locating(mut self, paths: &'static [Path]) -> Self {
        self.json = self.json.locating(paths);
        self
    }

    /// Consumes the next chunk of the body as received, handing completed units to `sink`.
    pub(crate) fn feed(
        &mut self,
        raw: &[u8],
        sink: &mut dyn FnMut(Unit<'_>),
    ) -> Result<(), DecodeError> {
        self.feed_located(raw, &mut |unit, _| sink(unit))
    }

    /// As [`BodyDecoder::feed`], handing each unit with what was located in it.
    pub(crate) fn feed_located(
        &mut self,
        raw: &[u8],
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        self.guarded(|d| {
            let Self {
                json,
                gzip,
                rest,
                finished,
                ..
            } = d;
            let offset = json.offset;
            // Where plain bytes go: scanned, or held unscanned once the JSON halted.
            let mut scan = |plain: &[u8]| match rest {
                Some(held) => {
                    held.extend_from_slice(plain);
                    Ok(())
                }
                None => {
                    let result = json.feed_located(plain, sink);
                    if let Some(at) = json.take_halt() {
                        *rest = Some(plain[at..].to_vec());
                    }
                    result
                }
            };
            plain_of(gzip, *finished, offset, raw, &mut scan)
        })
    }

    /// Declares the end of the body: checks that the gzip stream (if any) and the JSON both
    /// ended cleanly, handing any last unit to `sink`.
    pub(crate) fn finish(&mut self, sink: &mut dyn FnMut(Unit<'_>)) -> Result<(), DecodeError> {
        self.finish_located(&mut |unit, _| sink(unit))
    }

    /// As [`BodyDecoder::finish`], handing a last unit with what was located in it.
    pub(crate) fn finish_located(
        &mut self,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        self.guarded(|d| {
            let BodyDecoder {
                json,
                gzip,
                rest,
                finished,
                ..
            } = d;
            // A halt not resolved by the end: what it held is scanned now.
            let mut result = match rest.take() {
                Some(held) => json.feed_located(&held, sink),
                None => Ok(()),
            };
            if result.is_ok() && !*finished {
                result = finish_gzip(gzip, &mut |plain| scan_through(json, plain, sink));
            }
            *finished = true;
            result.and_then(|()| json.finish())
        })
    }
}

/// Scans `plain` whole: a halt in it is resumed at once (the body's end leaves no choice).
fn scan_through(
    json: &mut JsonStream,
    plain: &[u8],
    sink: &mut dyn FnMut(Unit<'_>, &Located),
) -> Result<(), DecodeError> {
    json.feed_located(plain, sink)?;
    match json.take_halt() {
        Some(at) => json.feed_located(&plain[at..], sink),
        None => Ok(()),
    }
}

/// Hands the plain bytes of `raw` to `put`: as they came, or inflated by `gzip`. Refused
/// after the gzip stream's end (`finished`): writing to the decoder after `try_finish` may
/// panic. `offset`: the JSON's, for the error.
fn plain_of(
    gzip: &mut Option<GzDecoder<Vec<u8>>>,
    finished: bool,
    offset: u64,
    raw: &[u8],
    put: &mut dyn FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    match gzip {
        None => put(raw),
        Some(_) if finished => Err(after_end(offset)),
        Some(gzip) => inflate(gzip, raw, put),
    }
}

/// "data after the end of the body", at `offset`.
fn after_end(offset: u64) -> DecodeError {
    DecodeError::Syntax {
        offset,
        what: "data after the end of the body",
    }
}

/// Ends the gzip stream, if any, handing its last plain bytes to `put` (`try_finish` twice
/// would be harmless, but there is nothing left to inflate: callers do it once).
fn finish_gzip(
    gzip: &mut Option<GzDecoder<Vec<u8>>>,
    put: &mut dyn FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let Some(gzip) = gzip else {
        return Ok(());
    };
    match gzip.try_finish() {
        Ok(()) => drain(gzip, put),
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => Err(DecodeError::Truncated),
        Err(err) => Err(DecodeError::Gzip(err.to_string())),
    }
}

/// Inflates `raw` into `gzip`, handing each piece of plain bytes to `put` as it comes.
fn inflate(
    gzip: &mut GzDecoder<Vec<u8>>,
    mut raw: &[u8],
    put: &mut dyn FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let gzip_error = |err: std::io::Error| DecodeError::Gzip(err.to_string());
    while !raw.is_empty() {
        // One write inflates at most flate2's internal buffer (32 KiB), so a small compressed
        // chunk cannot balloon into megabytes held at once.
        let n = gzip.write(raw).map_err(gzip_error)?;
        if n == 0 {
            return Err(DecodeError::Gzip(
                "data after the end of the gzip stream".into(),
            ));
        }
        raw = &raw[n..];
        drain(gzip, put)?;
    }
    // Hand out what this chunk inflated now: a watch event must not wait for the next chunk.
    gzip.flush().map_err(gzip_error)?;
    drain(gzip, put)
}

/// Hands what `gzip` inflated so far to `put`.
fn drain(
    gzip: &mut GzDecoder<Vec<u8>>,
    put: &mut dyn FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let out = gzip.get_mut();
    if out.is_empty() {
        return Ok(());
    }
    let result = put(out);
    out.clear();
    result
}
