//! gzip inflated by the hub (issue 32): the hub asks the cloud for gzip on its lists and gets
//! whoever asked, and inflates an answer itself for a client that did not ask, streaming
//! (a 32 KiB window and its tables, about 52 KB a stream, whatever the answer's size) and at
//! most [`MAX_INFLATING`] streams at once for clients; past that a request goes as its client
//! asked. The hub's own readers inflate here too, without a permit (their number is fixed).
//!
//! ureq cannot do it: its `gzip` feature inflates every answer by its `Content-Encoding`, those
//! a client asked to get compressed included, and the link would count inflated bytes. flate2
//! (miniz's inflater, linked already by the cache's decoder) stays inside this file.
//!
//! A corrupt or cut gzip stream is an `io::Error` from `read`: a relay reports the answer
//! broken off (the chunked answer cut, nothing committed).

use std::io::{self, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use flate2::bufread::GzDecoder;

use crate::link::{Link, Tally};

/// `--upstream-gzip`, set once at start ([`set_ask_gzip`]): the hub asks the cloud for gzip
/// where it decides (requests, its short exchanges, the identity's reads). One process-wide
/// switch, so every client of the cloud follows the flag without carrying it.
static ASK_GZIP: AtomicBool = AtomicBool::new(true);

/// Sets `--upstream-gzip` (at start, before any request).
pub(crate) fn set_ask_gzip(on: bool) {
    ASK_GZIP.store(on, Ordering::Relaxed);
}

/// Whether the hub asks the cloud for gzip where it decides (`--upstream-gzip`).
pub(crate) fn ask_gzip() -> bool {
    ASK_GZIP.load(Ordering::Relaxed)
}

/// The most answers inflated at once for clients (about 0.8 MB of inflate state).
pub(crate) const MAX_INFLATING: usize = 16;

/// The permits of the request path: [`MAX_INFLATING`] inflating streams for clients.
pub(crate) static CLIENT_PERMITS: Permits = Permits::new(MAX_INFLATING);

/// The most inflated bytes one of the hub's own reads takes (a list of its own readers:
/// Services, ConfigMaps): a small gzip body from a hostile or broken cloud may inflate a
/// thousandfold, and each object's own bound does not bound the list. Far above any list
/// those readers make (a 100k-Service cluster's is about 100 MB).
pub(crate) const MAX_HUB_READ: u64 = 256 * 1024 * 1024;

/// Bytes read past a gzip stream's end, at most, so that its connection goes back to the pool
/// (the chunked body's last chunk; a server's trailing bytes beyond this are not waited for).
const DRAIN: u64 = 64 * 1024;

/// The client's `Accept-Encoding` takes gzip (RFC 9110 §12.5.3): where `gzip` is listed, its
/// q-value decides (above 0); else `*` with a q-value above 0; in any of its headers.
pub(crate) fn accepts_gzip(headers: &[(String, String)]) -> bool {
    let codings = || {
        headers
            .iter()
            .filter(|(name, _)| crate::ascii::eq_ignore_ascii_case(name, "accept-encoding"))
            .flat_map(|(_, value)| value.split(','))
            .map(|coding| {
                let mut parts = coding.split(';');
                let name = parts.next().unwrap_or("").trim();
                let weighted = parts
                    .filter_map(|p| p.trim().split_once('='))
                    .find(|(k, _)| crate::ascii::eq_ignore_ascii_case(k.trim(), "q"))
                    .is_none_or(|(_, q)| q.trim().parse::<f32>().is_ok_and(|q| q > 0.0));
                (name, weighted)
            })
    };
    let mut gzip = codings().filter(|(name, _)| crate::ascii::eq_ignore_ascii_case(name, "gzip"));
    match gzip.next() {
        Some((_, weighted)) => weighted,
        None => codings().any(|(name, weighted)| name == "*" && weighted),
    }
}

/// A bound on the streams inflating at once.
pub(crate) struct Permits {
    taken: AtomicUsize,
    max: usize,
}

impl Permits {
    /// `max` permits, none taken.
    pub(crate) const fn new(max: usize) -> Permits {
        Permits {
            taken: AtomicUsize::new(0),
            max,
        }
    }

    /// One permit, or None when all are taken (then the request goes as its client asked).
    pub(crate) fn take(&'static self) -> Option<Permit> {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(self))
    }

    /// Permits taken now.
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

/// One inflating stream's place under its [`Permits`], given back when dropped.
pub(crate) struct Permit(&'static Permits);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A gzip body read inflated: as the cloud's bytes arrive, never more than the decoder's
/// window and one 8 KiB buffer held. At its end its link is told both sizes, once
/// ([`Link::inflated`]: what gzip saved).
pub(crate) struct Inflating<R: Read> {
    decoder: GzDecoder<BufReader<Tally<R>>>,
    plain: u64,
    /// The most plain bytes read before the read fails ([`MAX_HUB_READ`] for the hub's own).
    limit: u64,
    ended: bool,
    link: Option<Link>,
    _permit: Option<Permit>,
}

impl<R: Read> Inflating<R> {
    /// `inner` (gzip) read inflated, holding `permit` (None: not a client's stream) until
    /// dropped; the sizes are told for `link`. Past `limit` plain bytes a read fails.
    pub(crate) fn new(
        inner: R,
        link: Option<Link>,
        permit: Option<Permit>,
        limit: u64,
    ) -> Inflating<R> {
        Inflating {
            decoder: GzDecoder::new(BufReader::new(Tally::new(inner))),
            plain: 0,
            limit,
            ended: false,
            link,
            _permit: permit,
        }
    }
}

impl<R: Read> Read for Inflating<R> {
    /// Never inlined: its frame is over 8 KiB (the drain's copy buffer, the inflater's
    /// state), and inlined into `AnswerBody::read` it was made (its pages touched) on every
    /// read of a plain body too: a watch's read, which then waits for hours, kept two more
    /// stack pages resident.
    #[inline(never)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.decoder.read(buf)?;
        self.plain += n as u64;
        if self.plain > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the gzip answer inflates past {} bytes", self.limit),
            ));
        }
        if n == 0 && !buf.is_empty() && !self.ended {
            self.ended = true;
            // The gzip stream ended: read the body's own end, so its connection is pooled.
            io::copy(&mut self.decoder.get_mut().take(DRAIN), &mut io::sink())?;
            let compressed = self.decoder.get_ref().get_ref().bytes;
            if let Some(link) = &self.link {
                link.inflated(compressed, self.plain);
            }
        }
        Ok(n)
    }
}

/// The `Content-Encoding` header's value names gzip.
pub(crate) fn is_gzip(content_encoding: Option<&[u8]>) -> bool {
    content_encoding.is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"gzip"))
}

/// A whole answer's `body`, as it came with `content_encoding`, made plain, at most `limit`
/// bytes of it kept: the hub's short exchanges, whose answers are read whole. Counted on
/// `link` when given: the bytes received and, for gzip, what it saved. A gzip body that does
/// not inflate is an error.
pub(crate) fn plain_body(
    mut body: Vec<u8>,
    content_encoding: Option<&[u8]>,
    limit: u64,
    link: Option<&Link>,
) -> io::Result<Vec<u8>> {
    let gzip = is_gzip(content_encoding);
    if let Some(link) = link {
        link.received(body.len() as u64, gzip);
    }
    if !gzip {
        // Plain: kept as it came, cut to the bound.
        body.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        return Ok(body);
    }
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .take(limit)
        .read_to_end(&mut plain)?;
    if let Some(link) = link {
        link.inflated(body.len() as u64, plain.len() as u64);
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn plain() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..20_000 {
            write!(v, "{{\"metadata\":{{\"name\":\"pod-{i}\"}}}},").unwrap();
        }
        v
    }

    /// Reads `r` to its end in small reads, as a relay does.
    fn read_all(r: &mut impl Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf)? {
                0 => return Ok(out),
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn a_whole_gzip_body_inflates_to_what_was_compressed_and_its_end_is_read() {
        let data = plain();
        let mut body = gzip(&data);
        // A server's trailing bytes within the drain are read, so the connection can be pooled.
        body.extend_from_slice(b"trailing");
        let mut inflating = Inflating::new(&body[..], None, None, u64::MAX);
        assert_eq!(read_all(&mut inflating).unwrap(), data);
        let tally = inflating.decoder.get_ref().get_ref();
        assert!(
            tally.inner().is_empty(),
            "{} bytes left unread",
            tally.inner().len()
        );
        assert_eq!(tally.bytes as usize, body.len());
    }

    #[test]
    fn a_corrupt_gzip_body_is_an_error_not_an_end() {
        let data = plain();
        let mut body = gzip(&data);
        let mid = body.len() / 2;
        for b in &mut body[mid..mid + 64] {
            *b ^= 0x5a;
        }
        let mut inflating = Inflating::new(&body[..], None, None, u64::MAX);
        assert!(read_all(&mut inflating).is_err());
        // Not gzip at all.
        let mut inflating = Inflating::new(&b"{\"kind\":\"PodList\"}"[..], None, None, u64::MAX);
        assert!(read_all(&mut inflating).is_err());
    }

    #[test]
    fn a_gzip_body_cut_short_is_an_error_not_an_end() {
        let data = plain();
        let body = gzip(&data);
        for cut in [body.len() / 2, body.len() - 4] {
            let mut inflating = Inflating::new(&body[..cut], None, None, u64::MAX);
            let err = read_all(&mut inflating).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::UnexpectedEof,
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn permits_are_bounded_and_given_back_when_dropped() {
        static PERMITS: Permits = Permits::new(3);
        let held: Vec<Permit> = (0..3).map(|_| PERMITS.take().unwrap()).collect();
        assert!(PERMITS.take().is_none(), "a fourth stream past the bound");
        assert_eq!(PERMITS.taken(), 3);
        drop(held);
        assert_eq!(PERMITS.taken(), 0);
        let again = PERMITS.take();
        assert!(again.is_some());
        assert_eq!(CLIENT_PERMITS.max, MAX_INFLATING);
    }

    #[test]
    fn a_permit_inside_an_inflating_stream_is_given_back_with_it() {
        static PERMITS: Permits = Permits::new(1);
        let body = gzip(b"{}");
        let inflating = Inflating::new(&body[..], None, PERMITS.take(), u64::MAX);
        assert!(PERMITS.take().is_none());
        drop(inflating);
        assert!(PERMITS.take().is_some());
    }

    #[test]
    fn who_accepts_gzip() {
        let h = |v: &str| vec![("Accept-Encoding".to_owned(), v.to_owned())];
        assert!(accepts_gzip(&h("gzip")));
        assert!(accepts_gzip(&h("deflate, GZIP;q=0.5")));
        assert!(accepts_gzip(&h("*")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        // Listed, gzip's own q-value decides; `*` only covers what is not listed.
        assert!(!accepts_gzip(&h("gzip;q=0, *")));
        assert!(!accepts_gzip(&h("*, gzip;q=0")));
        assert!(accepts_gzip(&h("gzip, *;q=0")));
        assert!(!accepts_gzip(&h("*;q=0")));
        assert!(!accepts_gzip(&h("identity")));
        assert!(!accepts_gzip(&h("br, deflate")));
        assert!(!accepts_gzip(&[]));
    }

    #[test]
    fn a_bounded_read_keeps_at_most_the_limit_of_inflated_bytes() {
        let data = plain();
        let body = gzip(&data);
        assert_eq!(
            plain_body(body.clone(), Some(b"gzip"), 1 << 30, None).unwrap(),
            data
        );
        assert_eq!(
            plain_body(body.clone(), Some(b"gzip"), 100, None).unwrap(),
            &data[..100]
        );
        assert_eq!(
            plain_body(b"plain".to_vec(), None, 3, None).unwrap(),
            b"pla"
        );
        assert!(
            plain_body(
                body[..body.len() / 2].to_vec(),
                Some(b"gzip"),
                1 << 30,
                None
            )
            .is_err()
        );
        // By the header, as the hub's exchanges read it.
        assert_eq!(
            plain_body(body.clone(), Some(b" GZIP"), 1 << 30, None).unwrap(),
            data
        );
        assert_eq!(
            plain_body(body.clone(), Some(b"br"), 5, None).unwrap(),
            &body[..5]
        );
        assert_eq!(plain_body(body.clone(), None, 5, None).unwrap(), &body[..5]);
    }

    #[test]
    fn an_inflating_read_past_its_limit_fails_instead_of_growing() {
        // A thousandfold: 1 MB of zeros is about 1 KB of gzip.
        let body = gzip(&vec![0u8; 1 << 20]);
        assert!(body.len() < 8 * 1024, "{}", body.len());
        let mut inflating = Inflating::new(&body[..], None, None, 64 * 1024);
        let err = read_all(&mut inflating).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(inflating.plain <= 64 * 1024 + 4096, "{}", inflating.plain);
        let mut whole = Inflating::new(&body[..], None, None, 1 << 20);
        assert_eq!(read_all(&mut whole).unwrap().len(), 1 << 20);
    }
}
