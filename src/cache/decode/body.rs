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
        }
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
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = match &mut self.gzip {
            None => self.json.feed_located(raw, sink),
            // Writing to the gzip decoder after `try_finish` may panic: refuse instead.
            Some(_) if self.finished => Err(DecodeError::Syntax {
                offset: self.json.offset,
                what: "data after the end of the body",
            }),
            Some(gzip) => inflate(gzip, &mut self.json, raw, sink),
        };
        result.inspect_err(|err| self.failed = Some(err.clone()))
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
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let mut result = Ok(());
        match &mut self.gzip {
            // `try_finish` twice would be harmless, but there is nothing left to inflate.
            Some(gzip) if !self.finished => {
                result = match gzip.try_finish() {
                    Ok(()) => drain(gzip, &mut self.json, sink),
                    Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => {
                        Err(DecodeError::Truncated)
                    }
                    Err(err) => Err(DecodeError::Gzip(err.to_string())),
                };
            }
            _ => {}
        }
        self.finished = true;
        result = result.and_then(|()| self.json.finish());
        result.inspect_err(|err| self.failed = Some(err.clone()))
    }
}

fn inflate(
    gzip: &mut GzDecoder<Vec<u8>>,
    json: &mut JsonStream,
    mut raw: &[u8],
    sink: &mut dyn FnMut(Unit<'_>, &Located),
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
        drain(gzip, json, sink)?;
    }
    // Hand out what this chunk inflated now: a watch event must not wait for the next chunk.
    gzip.flush().map_err(gzip_error)?;
    drain(gzip, json, sink)
}

fn drain(
    gzip: &mut GzDecoder<Vec<u8>>,
    json: &mut JsonStream,
    sink: &mut dyn FnMut(Unit<'_>, &Located),
) -> Result<(), DecodeError> {
    let out = gzip.get_mut();
    if out.is_empty() {
        return Ok(());
    }
    let result = json.feed_located(out, sink);
    out.clear();
    result
}
