//! [`EventCut`], the outermost stage of a resumable watch (issue 29): the client's stream
//! outlives the cloud's legs, so only whole events may reach it (a leg broken inside an event
//! leaves nothing of it), and the stage keeps what the next leg resumes from: the
//! resourceVersion of the last event or bookmark the client was sent, and the kind and
//! apiVersion of the last object (for the bookmarks the hub makes while it holds the watch).
//!
//! Events are cut by the cache's own scanner (`BodyDecoder` locating [`CUT_PATHS`]), the same
//! located spans the writer reads: no serde per event. A BOOKMARK is parsed with serde only
//! while the watch still waits for its `k8s.io/initial-events-end` bookmark (its annotation
//! lies deeper than the scanner locates), and an event whose names the scanner could not be
//! sure of is parsed whole.
//!
//! A bookmark the client did not ask for is not sent to it, but goes to the cache's session
//! only ([`Sink::session_only`]): the disk cache still notes that the cloud was heard.
//!
//! What the cloud says because of an outage is not the client's: an ERROR with code 410
//! (history gone), 5xx or 429, and a body that is not a watch stream end the leg silently
//! ([`LegEnd`]); any other ERROR is passed on and ends the watch, as the cloud meant it. The
//! exception is the client's own first leg before anything was delivered on it: an ERROR
//! there answers the client's own request (its resourceVersion is too old, its selector is
//! refused), and passes as it did before resumable watches.
//!
//! `finish` and `abort` of a leg never end the stages inside: the resumable watch's loop
//! starts the next leg with [`EventCut::new_leg`] and ends the client once, with
//! [`EventCut::end`]. The stage never logs: the caught-up count of a resumed leg goes to the
//! caller's note.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ClientEnd, Sink, Stop, Uncached};
use crate::cache::decode::{BodyDecoder, BodyShape, DecodeError, Located, Path, Unit};
use crate::cache::object::located_str;
use crate::cache::writer::MAX_OBJECT_BYTES;
use crate::request::Query;
use crate::server::ClientProbe;

/// The paths located in each event (the indexes are fixed: see `Head::read`). The prefixes
/// `object` and `object.metadata` are paths too, each before the longer ones (the scanner
/// follows the first path a name leads along), so that a member repeated on the way is
/// noticed: the spans are then not trusted and the event is parsed whole.
pub(crate) const CUT_PATHS: &[Path] = &[
    &["type"],
    &["object"],
    &["object", "metadata"],
    &["object", "metadata", "resourceVersion"],
    &["object", "kind"],
    &["object", "apiVersion"],
    // An ERROR's Status.
    &["object", "code"],
];

/// The annotation of the bookmark that ends a watch's initial events (`sendInitialEvents`).
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// An output buffer that grew past this (a huge event) is released rather than kept.
const KEEP_OUT: usize = 1 << 20;

/// What the client has been sent so far, across legs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The resourceVersion of the last event or bookmark delivered (the cloud's or the
    /// hub's); "" until one is known. Its buffer is reused: no allocation per event.
    pub last_rv: String,
    /// `kind` of the last object delivered ("" until one was).
    pub kind: String,
    /// `apiVersion` of the last object delivered.
    pub api_version: String,
    /// Events (not bookmarks) that came from the cloud and were delivered since the last
    /// [`EventCut::mark_resumed`] (or the start).
    pub since_mark: u64,
    /// The watch's initial state passed, or it has none: resuming is safe only after it (the
    /// initial objects come as ADDED in key order, each with its own resourceVersion, so a
    /// leg broken mid-way would resume past objects not yet sent).
    pub initial_done: bool,
    /// Only a bookmark with the `k8s.io/initial-events-end` annotation ends the initial
    /// state (`sendInitialEvents=true`); else any bookmark does (a watch from "now" or "any":
    /// the apiserver sends its synthetic ADDEDs first, and bookmarks only after them).
    pub initial_end_annotated: bool,
}

impl Progress {
    /// Where a client's watch starts: its own resourceVersion when it is a number other than
    /// 0, and then no initial state unless it asked for initial events; a watch from "now" or
    /// "any" (unset, "0") gets the current objects first, and has nothing to resume from
    /// until a bookmark says they all went.
    pub(crate) fn from_query(query: &Query) -> Progress {
        let last_rv = match query.resource_version.as_deref() {
            Some(rv) if rv.parse::<u64>().is_ok_and(|n| n != 0) => rv.to_owned(),
            _ => String::new(),
        };
        let annotated = query.send_initial_events == Some(true);
        Progress {
            initial_done: !annotated && !last_rv.is_empty(),
            initial_end_annotated: annotated,
            last_rv,
            ..Progress::default()
        }
    }
}

/// How the current leg ended, as the stage saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegEnd {
    /// The source ended between events.
    Ended,
    /// The source ended or broke inside an event (the partial event was dropped), or broke
    /// off.
    BrokeOff,
    /// An ERROR with code 410: the cloud's history no longer reaches the last delivered
    /// resourceVersion (swallowed).
    Expired,
    /// An ERROR with code 5xx or 429 (its code), or a body that is not a watch stream (0):
    /// swallowed.
    CloudTrouble(u16),
    /// Any other ERROR (its code; 0 when it had none): passed to the client, the watch ends.
    Refused(u16),
}

/// Cuts a watch's legs into whole events for `inner` and keeps the watch's [`Progress`].
pub(crate) struct EventCut<'n, S> {
    inner: S,
    /// Told the caught-up count of a resumed leg, once.
    note: &'n dyn Fn(u64),
    /// A resumed leg's window (until when) and the events counted in it so far.
    catch_up: Option<(Instant, u64)>,
    /// The current leg's scanner.
    decoder: BodyDecoder,
    cut: Cutter,
    progress: Progress,
    leg_end: Option<LegEnd>,
}

/// What one chunk of a leg made: the whole events for the client and what they tell.
#[derive(Default)]
struct Cutter {
    /// The chunk's whole events to pass, each followed by a newline (one inner write).
    out: Vec<u8>,
    /// What the chunk's events say, moved into the progress once the client took them.
    noted: Noted,
    /// The chunk's bookmarks the client did not ask for, each followed by a newline: for the
    /// cache's session only ([`Sink::session_only`]), which notes the cloud was heard.
    session_out: Vec<u8>,
    /// The client asked for bookmarks (`allowWatchBookmarks`).
    pass_bookmarks: bool,
    /// ERRORs are the outage's, not the client's: a leg the hub made, or something was
    /// delivered on this one.
    intercept: bool,
    /// On a leg the hub made: events at or below this resourceVersion were delivered
    /// already (a server replaying its start) and are dropped.
    floor: Option<u64>,
    /// The initial-events-end bookmark is still to come (copied from the progress).
    initial_pending: bool,
    /// Only the annotated bookmark ends the initial state ([`Progress::initial_end_annotated`]).
    initial_end_annotated: bool,
    /// How the leg ends, decided by an event of this chunk.
    verdict: Option<LegEnd>,
}

/// The last resourceVersion, kind and apiVersion of a chunk's events (reused buffers).
#[derive(Default)]
struct Noted {
    rv: String,
    has_rv: bool,
    kind: String,
    api_version: String,
    has_object: bool,
    events: u64,
    initial_end: bool,
}

impl Noted {
    fn clear(&mut self) {
        self.has_rv = false;
        self.has_object = false;
        self.events = 0;
        self.initial_end = false;
    }
}

/// An event's type and what the cut needs of its object.
#[derive(Default)]
struct Head<'a> {
    kind: Option<Cow<'a, str>>,
    rv: Option<Cow<'a, str>>,
    object_kind: Option<Cow<'a, str>>,
    api_version: Option<Cow<'a, str>>,
    code: Option<u16>,
}

impl<'a> Head<'a> {
    /// From the located spans; parsed whole when they cannot be trusted.
    fn read(ev: &'a [u8], found: &Located) -> Head<'a> {
        let text = |i: usize| -> Result<Option<Cow<'a, str>>, ()> {
            Ok(located_str(ev, found.span(i)?).flatten())
        };
        let located = || -> Result<Head<'a>, ()> {
            Ok(Head {
                kind: text(0)?,
                rv: text(3)?,
                object_kind: text(4)?,
                api_version: text(5)?,
                code: found.span(6)?.and_then(|(a, b)| code(&ev[a..b])),
            })
        };
        located().unwrap_or_else(|()| Head::parsed(ev))
    }

    /// Parsed with serde (rare: a name with an escape, or a member twice).
    fn parsed(ev: &[u8]) -> Head<'static> {
        let Ok(v) = serde_json::from_slice::<Value>(ev) else {
            return Head::default();
        };
        let text = |v: &Value| v.as_str().map(|s| Cow::Owned(s.to_owned()));
        let object = &v["object"];
        Head {
            kind: text(&v["type"]),
            rv: text(&object["metadata"]["resourceVersion"]),
            object_kind: text(&object["kind"]),
            api_version: text(&object["apiVersion"]),
            code: object["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
        }
    }
}

/// A Status code as the scanner located it (a JSON number).
fn code(raw: &[u8]) -> Option<u16> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// Whether a BOOKMARK carries the initial-events-end annotation.
fn ends_initial_events(ev: &[u8]) -> bool {
    serde_json::from_slice::<Value>(ev).is_ok_and(|v| {
        v["object"]["metadata"]["annotations"][INITIAL_EVENTS_END].as_str() == Some("true")
    })
}

impl Cutter {
    /// One whole event of the leg.
    fn event(&mut self, ev: &[u8], found: &Located) {
        if self.verdict.is_some() {
            return;
        }
        let head = Head::read(ev, found);
        match head.kind.as_deref() {
            Some("BOOKMARK") => {
                self.note_rv(head.rv.as_deref());
                if self.initial_pending && (!self.initial_end_annotated || ends_initial_events(ev))
                {
                    self.noted.initial_end = true;
                    self.initial_pending = false;
                }
                self.intercept = true;
                if self.pass_bookmarks {
                    self.copy(ev);
                } else {
                    self.session_out.extend_from_slice(ev);
                    self.session_out.push(b'\n');
                }
            }
            Some("ERROR") => {
                let code = head.code.unwrap_or(0);
                let verdict = match code {
                    410 if self.intercept => LegEnd::Expired,
                    429 | 500.. if self.intercept => LegEnd::CloudTrouble(code),
                    _ => {
                        self.copy(ev);
                        LegEnd::Refused(code)
                    }
                };
                self.verdict = Some(verdict);
            }
            // Not a watch event: the body is not the watch stream it claims to be.
            None => self.verdict = Some(LegEnd::CloudTrouble(0)),
            Some(_) => {
                let rv = head.rv.as_deref();
                if let (Some(floor), Some(n)) = (self.floor, rv.and_then(|r| r.parse::<u64>().ok()))
                    && n <= floor
                {
                    return;
                }
                self.note_rv(rv);
                if let Some(kind) = head.object_kind.as_deref() {
                    self.noted.has_object = true;
                    self.noted.kind.clear();
                    self.noted.kind.push_str(kind);
                    self.noted.api_version.clear();
                    self.noted
                        .api_version
                        .push_str(head.api_version.as_deref().unwrap_or(""));
                }
                self.noted.events += 1;
                self.intercept = true;
                self.copy(ev);
            }
        }
    }

    fn note_rv(&mut self, rv: Option<&str>) {
        if let Some(rv) = rv.filter(|r| !r.is_empty()) {
            self.noted.has_rv = true;
            self.noted.rv.clear();
            self.noted.rv.push_str(rv);
        }
    }

    fn copy(&mut self, ev: &[u8]) {
        self.out.extend_from_slice(ev);
        self.out.push(b'\n');
    }
}

impl<'n, S: Sink> EventCut<'n, S> {
    /// Cuts the client's own first leg for `inner`; `pass_bookmarks`: the client asked for
    /// bookmarks; `start`: where its watch starts ([`Progress::from_query`]); `note` is told
    /// the caught-up count of a resumed leg ([`EventCut::mark_resumed`]).
    pub(crate) fn new(
        inner: S,
        pass_bookmarks: bool,
        start: Progress,
        note: &'n dyn Fn(u64),
    ) -> EventCut<'n, S> {
        let mut cut = EventCut {
            inner,
            note,
            catch_up: None,
            decoder: leg_decoder(),
            cut: Cutter {
                pass_bookmarks,
                ..Cutter::default()
            },
            progress: start,
            leg_end: None,
        };
        cut.new_leg(false);
        cut
    }

    /// A resumed leg began: its events are counted for `window` (the backlog a resumed
    /// watch is sent at once), then the count goes to the note — at the first write after
    /// the window closed, or when the leg ends.
    pub(crate) fn mark_resumed(&mut self, window: Duration) {
        self.catch_up = Some((Instant::now() + window, 0));
        self.progress.since_mark = 0;
    }

    /// A new leg begins: a fresh scanner, the last leg's end forgotten. `hub_leg`: a resume
    /// the hub made (its ERRORs are the outage's from its first event); false only for the
    /// client's own first leg. Never inlined, as [`EventCut::end`] and the sink's methods:
    /// a resumable watch waits in the frame that calls them, and a fresh decoder is large.
    #[inline(never)]
    pub(crate) fn new_leg(&mut self, hub_leg: bool) {
        self.decoder = leg_decoder();
        self.leg_end = None;
        self.cut.intercept = hub_leg;
        self.cut.floor = if hub_leg {
            self.progress.last_rv.parse().ok()
        } else {
            None
        };
        self.cut.initial_pending = !self.progress.initial_done;
        self.cut.initial_end_annotated = self.progress.initial_end_annotated;
        self.cut.verdict = None;
        self.cut.out.clear();
        self.cut.noted.clear();
    }

    /// How the last leg ended (set by `write`, `finish`, `abort`); None while it runs.
    pub(crate) fn leg_end(&self) -> Option<LegEnd> {
        self.leg_end
    }

    /// What the client has been sent.
    pub(crate) fn progress(&self) -> &Progress {
        &self.progress
    }

    /// What the client has been sent, for a difference that moves it to its list.
    pub(crate) fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }

    /// Writes one event the hub made (an ADDED, MODIFIED or DELETED of a difference, a
    /// BOOKMARK while held; JSON with no newline) through the chain, and records `rv` as the
    /// last delivered once the write succeeded.
    pub(crate) fn emit(&mut self, event: &[u8], rv: &str) -> Result<(), Stop> {
        let out = &mut self.cut.out;
        out.clear();
        out.extend_from_slice(event);
        out.push(b'\n');
        let written = self.inner.write(out);
        out.clear();
        written?;
        self.progress.last_rv.clear();
        self.progress.last_rv.push_str(rv);
        if self.progress.kind.is_empty() {
            // The first object the client is sent may be the hub's (a difference before any
            // cloud event): its kind is read once, with serde.
            let head = Head::parsed(event);
            if let Some(kind) = head.object_kind {
                self.progress.kind = kind.into_owned();
                self.progress.api_version = head.api_version.unwrap_or_default().into_owned();
            }
        }
        Ok(())
    }

    /// Ends the client's answer for real: cleanly (`finish` of the stages inside: the
    /// terminal chunk, the cache session whole) or not (`abort`: a client gone).
    #[inline(never)]
    pub(crate) fn end(&mut self, clean: bool) -> Result<(), Stop> {
        self.close_catch_up();
        if clean {
            self.inner.finish()
        } else {
            self.inner.abort();
            Ok(())
        }
    }

    /// The sink it wraps.
    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Passes the chunk's whole events on; once the client took them, what they say becomes
    /// the progress. An event that ended the leg then stops the stream.
    fn deliver(&mut self) -> Result<(), Stop> {
        if !self.cut.out.is_empty() {
            let written = self.inner.write(&self.cut.out);
            self.cut.out.clear();
            if self.cut.out.capacity() > KEEP_OUT {
                self.cut.out = Vec::new();
            }
            if let Err(stop) = written {
                // The client did not take them: nothing of the chunk counts as delivered.
                self.cut.noted.clear();
                self.cut.verdict = None;
                self.cut.session_out.clear();
                return Err(stop);
            }
        }
        if !self.cut.session_out.is_empty() {
            let written = self.inner.session_only(&self.cut.session_out);
            self.cut.session_out.clear();
            written?;
        }
        self.commit();
        match self.cut.verdict.take() {
            Some(end) => {
                self.end_leg(end);
                Err(Stop::EndOfLeg)
            }
            None => Ok(()),
        }
    }

    /// Moves what the delivered chunk said into the progress.
    fn commit(&mut self) {
        let noted = &mut self.cut.noted;
        let progress = &mut self.progress;
        if noted.has_rv {
            progress.last_rv.clear();
            progress.last_rv.push_str(&noted.rv);
        }
        if noted.has_object {
            progress.kind.clear();
            progress.kind.push_str(&noted.kind);
            progress.api_version.clear();
            progress.api_version.push_str(&noted.api_version);
        }
        if noted.initial_end {
            progress.initial_done = true;
        }
        progress.since_mark += noted.events;
        if let Some((until, count)) = self.catch_up.as_mut()
            && (noted.events > 0 || noted.has_rv)
        {
            if Instant::now() >= *until {
                let count = *count;
                self.catch_up = None;
                (self.note)(count);
            } else {
                *count += noted.events;
            }
        }
        noted.clear();
    }

    /// The leg ended as `end` says (the first verdict stands). A resumed leg that met a 410
    /// was no resume: its count is dropped, not noted.
    fn end_leg(&mut self, end: LegEnd) {
        let end = *self.leg_end.get_or_insert(end);
        if end == LegEnd::Expired {
            self.catch_up = None;
        }
        self.close_catch_up();
    }

    /// A resumed leg's count goes to the note now, if it has not yet.
    fn close_catch_up(&mut self) {
        if let Some((_, count)) = self.catch_up.take() {
            (self.note)(count);
        }
    }
}

/// A leg's scanner: a watch stream, never gzip (a resumable watch's answer is not
/// compressed), events at most as large as the cache keeps.
fn leg_decoder() -> BodyDecoder {
    BodyDecoder::new(BodyShape::WatchStream, false, MAX_OBJECT_BYTES).locating(CUT_PATHS)
}

/// How a scanner's error ends a leg.
fn leg_end_of(e: &DecodeError) -> LegEnd {
    match e {
        DecodeError::Truncated => LegEnd::BrokeOff,
        _ => LegEnd::CloudTrouble(0),
    }
}

impl<S: Sink> Sink for EventCut<'_, S> {
    #[inline(never)]
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        if self.leg_end.is_some() {
            return Err(Stop::EndOfLeg);
        }
        let cut = &mut self.cut;
        let fed = self.decoder.feed_located(data, &mut |unit, found| {
            if let Unit::WatchEvent(ev) = unit {
                cut.event(ev, found);
            }
        });
        if let Err(e) = fed {
            cut.verdict.get_or_insert(leg_end_of(&e));
        }
        self.deliver()
    }

    /// The leg ended: whole (between events) or inside one. The stages inside stay open.
    #[inline(never)]
    fn finish(&mut self) -> Result<(), Stop> {
        if self.leg_end.is_some() {
            return Ok(());
        }
        let cut = &mut self.cut;
        let finished = self.decoder.finish_located(&mut |unit, found| {
            if let Unit::WatchEvent(ev) = unit {
                cut.event(ev, found);
            }
        });
        let end = match &finished {
            Ok(()) => LegEnd::Ended,
            Err(e) => leg_end_of(e),
        };
        cut.verdict.get_or_insert(end);
        match self.deliver() {
            Err(Stop::EndOfLeg) => Ok(()),
            other => other,
        }
    }

    /// The leg broke off (or a stage stopped it): the stages inside stay open.
    fn abort(&mut self) {
        self.cut.out.clear();
        self.cut.session_out.clear();
        self.cut.noted.clear();
        self.end_leg(LegEnd::BrokeOff);
    }

    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        self.inner.uncache(why)
    }
}

impl<S: ClientEnd> ClientEnd for EventCut<'_, S> {
    fn client_gone(&mut self, wait: Duration) -> bool {
        self.inner.client_gone(wait)
    }

    fn probe(&self) -> Option<ClientProbe> {
        self.inner.probe()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::io;

    use super::*;
    use crate::stream::{BodyReads, Pumped, pump};

    /// An end that records what reached it, and can refuse writes (a client gone).
    #[derive(Default)]
    struct Client {
        bytes: Vec<u8>,
        /// What reached it for the cache's session only.
        session: Vec<u8>,
        finished: bool,
        aborted: bool,
        refuse: bool,
    }

    impl Sink for Client {
        fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
            if self.refuse {
                return Err(Stop::Gone(io::Error::other("gone")));
            }
            self.bytes.extend_from_slice(data);
            Ok(())
        }
        fn finish(&mut self) -> Result<(), Stop> {
            self.finished = true;
            Ok(())
        }
        fn abort(&mut self) {
            self.aborted = true;
        }
        fn uncache(&mut self, _why: Uncached) -> Result<(), Stop> {
            Ok(())
        }
        fn session_only(&mut self, events: &[u8]) -> Result<(), Stop> {
            self.session.extend_from_slice(events);
            Ok(())
        }
    }

    impl Client {
        /// The events it got, as (type, resourceVersion).
        fn events(&self) -> Vec<(String, String)> {
            self.bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let v: Value = serde_json::from_slice(l).expect("a whole event per line");
                    let rv = v["object"]["metadata"]["resourceVersion"].as_str();
                    (
                        v["type"].as_str().unwrap_or("").to_owned(),
                        rv.unwrap_or("").to_owned(),
                    )
                })
                .collect()
        }
    }

    fn ev(kind: &str, rv: u64) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"p{rv}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"edge-1"}}}}}}"#
        ) + "\n"
    }

    fn bookmark(rv: u64) -> String {
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}}}}}}"#
        ) + "\n"
    }

    fn error(code: u16) -> String {
        format!(
            r#"{{"type":"ERROR","object":{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"m","code":{code}}}}}"#
        ) + "\n"
    }

    fn no_note(_: u64) {}

    fn start(rv: &str) -> Progress {
        Progress {
            last_rv: rv.to_owned(),
            initial_done: true,
            ..Progress::default()
        }
    }

    /// Feeds `body` in chunks of `size` bytes.
    fn feed<S: Sink>(cut: &mut EventCut<'_, S>, body: &str, size: usize) -> Result<(), Stop> {
        for chunk in body.as_bytes().chunks(size) {
            cut.write(chunk)?;
        }
        Ok(())
    }

    /// A source that gives `body`, then breaks off.
    struct Breaks<'a>(&'a [u8]);

    impl io::Read for Breaks<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
            }
            let n = buf.len().min(self.0.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn cuts_events_across_chunks() {
        let body = ev("ADDED", 5) + &ev("MODIFIED", 6) + &ev("DELETED", 7);
        for size in [1, 3, 50, body.len()] {
            let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
            feed(&mut cut, &body, size).expect("whole events pass");
            // Only whole events ever reach the client, each on its own line.
            assert_eq!(
                cut.inner_mut().events(),
                [("ADDED", "5"), ("MODIFIED", "6"), ("DELETED", "7")]
                    .map(|(t, r)| (t.to_owned(), r.to_owned())),
                "chunks of {size}"
            );
            cut.finish().expect("a clean end");
            assert_eq!(cut.leg_end(), Some(LegEnd::Ended));
            let p = cut.progress();
            assert_eq!(
                (p.last_rv.as_str(), p.kind.as_str(), p.api_version.as_str()),
                ("7", "Pod", "v1")
            );
            assert_eq!(p.since_mark, 3);
        }
    }

    #[test]
    fn a_leg_broken_inside_an_event_sends_nothing_of_it() {
        let body = ev("ADDED", 5) + &ev("MODIFIED", 6);
        let broken = &body.as_bytes()[..body.len() - 20];
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        let pumped = pump(
            &mut Breaks(broken),
            &mut BodyReads::watch(),
            &mut 0,
            &mut cut,
        );
        assert!(matches!(pumped, Pumped::BrokeOff(_)));
        assert_eq!(cut.leg_end(), Some(LegEnd::BrokeOff));
        assert_eq!(
            cut.inner_mut().events(),
            [("ADDED".to_owned(), "5".to_owned())]
        );
        assert_eq!(cut.progress().last_rv, "5");

        // The same cut at a clean end of the source (EOF inside an event).
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        let pumped = pump(&mut &broken[..], &mut BodyReads::watch(), &mut 0, &mut cut);
        assert!(matches!(pumped, Pumped::Whole));
        assert_eq!(cut.leg_end(), Some(LegEnd::BrokeOff));
        assert_eq!(cut.inner_mut().events().len(), 1);
        assert!(!cut.inner_mut().finished, "the client's answer goes on");

        // The next leg starts clean: the half event is gone, not glued to the next one.
        cut.new_leg(true);
        feed(&mut cut, &ev("MODIFIED", 6), 4).expect("the next leg passes");
        assert_eq!(cut.inner_mut().events().len(), 2);
        assert_eq!(cut.progress().last_rv, "6");
    }

    #[test]
    fn bookmarks_tracked_but_passed_only_when_asked() {
        let body = ev("ADDED", 5) + &bookmark(9);
        for asked in [false, true] {
            let mut cut = EventCut::new(Client::default(), asked, start("4"), &no_note);
            feed(&mut cut, &body, 10).expect("passes");
            let types: Vec<String> = cut.inner_mut().events().into_iter().map(|e| e.0).collect();
            let expected: &[&str] = if asked {
                &["ADDED", "BOOKMARK"]
            } else {
                &["ADDED"]
            };
            assert_eq!(types, expected);
            // Unasked, it still reaches the cache's session: the cloud was heard.
            let session = String::from_utf8(cut.inner_mut().session.clone()).unwrap();
            let expected = if asked { String::new() } else { bookmark(9) };
            assert_eq!(session, expected);
            assert_eq!(
                cut.progress().last_rv,
                "9",
                "a bookmark moves the resume point"
            );
            assert_eq!(cut.progress().since_mark, 1, "bookmarks are not events");
        }
    }

    #[test]
    fn error_410_is_swallowed_as_expired() {
        let mut cut = EventCut::new(Client::default(), true, start("4"), &no_note);
        let body = ev("ADDED", 5) + &error(410) + &ev("ADDED", 6);
        let pumped = pump(
            &mut body.as_bytes(),
            &mut BodyReads::watch(),
            &mut 0,
            &mut cut,
        );
        assert!(matches!(pumped, Pumped::Stopped(Stop::EndOfLeg)));
        assert_eq!(cut.leg_end(), Some(LegEnd::Expired));
        assert_eq!(
            cut.inner_mut().events(),
            [("ADDED".to_owned(), "5".to_owned())]
        );
        assert_eq!(cut.progress().last_rv, "5");
        assert!(!cut.inner_mut().aborted && !cut.inner_mut().finished);

        // On a leg the hub made, from its first event.
        cut.new_leg(true);
        assert_eq!(
            cut.write(error(410).as_bytes())
                .err()
                .map(|s| s.to_string()),
            Some(Stop::EndOfLeg.to_string())
        );
        assert_eq!(cut.leg_end(), Some(LegEnd::Expired));
        assert_eq!(
            cut.inner_mut().events().len(),
            1,
            "nothing of the ERROR went out"
        );
    }

    #[test]
    fn error_500_is_swallowed_as_trouble() {
        for code in [500, 503, 429] {
            let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
            cut.new_leg(true);
            let _ = feed(&mut cut, &(ev("ADDED", 5) + &error(code)), 9);
            assert_eq!(cut.leg_end(), Some(LegEnd::CloudTrouble(code)));
            assert_eq!(cut.inner_mut().events().len(), 1);
        }
        // A body that is not a watch stream: nothing of it goes out.
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        cut.new_leg(true);
        assert!(matches!(
            cut.write(b"<html>oops</html>"),
            Err(Stop::EndOfLeg)
        ));
        assert_eq!(cut.leg_end(), Some(LegEnd::CloudTrouble(0)));
        cut.new_leg(true);
        assert!(matches!(
            cut.write(b"{\"kind\":\"Status\"}\n"),
            Err(Stop::EndOfLeg)
        ));
        assert_eq!(cut.leg_end(), Some(LegEnd::CloudTrouble(0)));
        assert!(cut.inner_mut().bytes.is_empty());
        assert_eq!(cut.progress().last_rv, "4");
    }

    #[test]
    fn error_403_passes_and_ends() {
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        cut.new_leg(true);
        let body = ev("ADDED", 5) + &error(403) + &ev("ADDED", 6);
        assert!(matches!(
            feed(&mut cut, &body, body.len()),
            Err(Stop::EndOfLeg)
        ));
        assert_eq!(cut.leg_end(), Some(LegEnd::Refused(403)));
        let events = cut.inner_mut().events();
        assert_eq!(
            events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["ADDED", "ERROR"]
        );

        // The client's own first leg before anything was delivered: even a 410 is the
        // cloud's answer to the client's request, passed as before.
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        assert!(matches!(
            cut.write(error(410).as_bytes()),
            Err(Stop::EndOfLeg)
        ));
        assert_eq!(cut.leg_end(), Some(LegEnd::Refused(410)));
        assert_eq!(cut.inner_mut().events()[0].0, "ERROR");
    }

    #[test]
    fn a_watch_from_now_is_resumable_only_after_its_initial_objects() {
        // The apiserver's synthetic ADDEDs come in key order with their own versions: a
        // resume from the last of them could skip one not yet sent.
        for rv in [None, Some("0")] {
            let query = Query {
                resource_version: rv.map(str::to_owned),
                ..Query::default()
            };
            let begin = Progress::from_query(&query);
            assert!(
                !begin.initial_done && !begin.initial_end_annotated,
                "{rv:?}"
            );
            let mut cut = EventCut::new(Client::default(), false, begin, &no_note);
            feed(&mut cut, &(ev("ADDED", 7) + &ev("ADDED", 3)), 9).expect("passes");
            assert!(!cut.progress().initial_done, "{rv:?}: mid initial state");
            feed(&mut cut, &bookmark(9), 9).expect("passes");
            assert!(cut.progress().initial_done, "{rv:?}: a bookmark ends it");
            assert_eq!(cut.progress().last_rv, "9");
        }
        // A watch from a version of its own has no initial state.
        let query = Query {
            resource_version: Some("12".into()),
            ..Query::default()
        };
        assert!(Progress::from_query(&query).initial_done);
    }

    #[test]
    fn initial_events_end_is_noted() {
        let query = Query {
            resource_version: Some("0".into()),
            send_initial_events: Some(true),
            ..Query::default()
        };
        let begin = Progress::from_query(&query);
        assert_eq!((begin.last_rv.as_str(), begin.initial_done), ("", false));
        let mut cut = EventCut::new(Client::default(), true, begin, &no_note);
        feed(&mut cut, &(ev("ADDED", 3) + &bookmark(8)), 11).expect("passes");
        assert!(
            !cut.progress().initial_done,
            "a bookmark without the annotation"
        );
        let end = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        feed(&mut cut, &(end.to_owned() + "\n"), 13).expect("passes");
        assert!(cut.progress().initial_done);
        assert_eq!(cut.progress().last_rv, "9");
        assert_eq!(cut.inner_mut().events().len(), 3);

        let query = Query {
            resource_version: Some("12".into()),
            ..Query::default()
        };
        assert_eq!(Progress::from_query(&query), start("12"));
    }

    #[test]
    fn finish_and_abort_leave_the_inner_sink_open() {
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        feed(&mut cut, &ev("ADDED", 5), 8).expect("passes");
        cut.finish().expect("a leg's end");
        cut.abort();
        assert!(!cut.inner_mut().finished && !cut.inner_mut().aborted);
        assert_eq!(
            cut.leg_end(),
            Some(LegEnd::Ended),
            "the first verdict stands"
        );
        assert!(matches!(
            cut.write(ev("ADDED", 6).as_bytes()),
            Err(Stop::EndOfLeg)
        ));

        cut.new_leg(true);
        cut.abort();
        assert_eq!(cut.leg_end(), Some(LegEnd::BrokeOff));
        assert!(!cut.inner_mut().aborted);

        cut.end(true).expect("the real end");
        assert!(cut.inner_mut().finished);
        let mut gone = EventCut::new(Client::default(), false, start("4"), &no_note);
        gone.end(false).expect("the real end");
        assert!(gone.inner_mut().aborted && !gone.inner_mut().finished);
    }

    #[test]
    fn emit_records_rv_only_after_the_write() {
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        let deleted = ev("DELETED", 20);
        cut.emit(deleted.trim_end().as_bytes(), "30")
            .expect("written");
        assert_eq!(cut.progress().last_rv, "30");
        assert_eq!(
            cut.progress().kind,
            "Pod",
            "the first object's kind is read"
        );
        assert_eq!(cut.inner_mut().bytes, deleted.as_bytes());

        cut.inner_mut().refuse = true;
        assert!(matches!(
            cut.emit(ev("ADDED", 31).trim_end().as_bytes(), "31"),
            Err(Stop::Gone(_))
        ));
        assert_eq!(cut.progress().last_rv, "30");
        // Nor does a cloud event the client did not take count.
        assert!(matches!(
            cut.write(ev("ADDED", 32).as_bytes()),
            Err(Stop::Gone(_))
        ));
        cut.abort();
        assert_eq!(cut.progress().last_rv, "30");
        assert_eq!(cut.progress().since_mark, 0);
    }

    #[test]
    fn a_resumed_leg_drops_a_replay_and_notes_its_catch_up() {
        let seen = Cell::new(None);
        let note = |n: u64| seen.set(Some(n));
        let mut cut = EventCut::new(Client::default(), false, start("6"), &note);
        cut.new_leg(true);
        cut.mark_resumed(Duration::from_secs(60));
        let body = ev("MODIFIED", 5) + &ev("MODIFIED", 6) + &ev("ADDED", 7) + &ev("DELETED", 8);
        feed(&mut cut, &body, 30).expect("passes");
        assert_eq!(
            cut.inner_mut()
                .events()
                .into_iter()
                .map(|e| e.1)
                .collect::<Vec<_>>(),
            ["7", "8"],
            "events at or below the resume point were delivered already"
        );
        assert_eq!(seen.get(), None, "the window is still open");
        cut.finish().expect("the leg ends");
        assert_eq!(seen.get(), Some(2));

        // A window that closed: the next write notes what came within it.
        let notes = RefCell::new(Vec::new());
        let note = |n: u64| notes.borrow_mut().push(n);
        let mut cut = EventCut::new(Client::default(), false, start("6"), &note);
        cut.new_leg(true);
        cut.mark_resumed(Duration::ZERO);
        feed(&mut cut, &(ev("ADDED", 7) + &ev("ADDED", 8)), 1000).expect("passes");
        cut.end(true).expect("ends");
        assert_eq!(*notes.borrow(), [0], "noted once");
    }

    #[test]
    fn a_resumed_leg_that_meets_a_410_is_not_noted_as_a_resume() {
        let seen = Cell::new(None);
        let note = |n: u64| seen.set(Some(n));
        let mut cut = EventCut::new(Client::default(), false, start("6"), &note);
        cut.new_leg(true);
        cut.mark_resumed(Duration::from_secs(60));
        let stopped = feed(&mut cut, &error(410), 30);
        assert!(matches!(stopped, Err(Stop::EndOfLeg)), "{stopped:?}");
        assert_eq!(cut.leg_end(), Some(LegEnd::Expired));
        cut.end(true).expect("ends");
        assert_eq!(
            seen.get(),
            None,
            "the round that follows logs and counts itself"
        );
    }

    #[test]
    fn a_repeated_object_is_read_whole_as_a_parser_would() {
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        // serde takes the last member: the object it reads has no resourceVersion.
        let first = concat!(
            r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"resourceVersion":"5"}},"#,
            r#""object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"p"}}}"#,
            "\n",
        );
        feed(&mut cut, first, 9).expect("passes");
        let p = cut.progress();
        assert_eq!((p.last_rv.as_str(), p.kind.as_str()), ("4", "Node"));
        let second = concat!(
            r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"resourceVersion":"7"},"#,
            r#""metadata":{"name":"q"}}}"#,
            "\n",
        );
        feed(&mut cut, second, 9).expect("passes");
        assert_eq!(cut.progress().last_rv, "4");
        assert_eq!(cut.progress().since_mark, 2);
    }

    #[test]
    fn an_escaped_name_is_read_whole() {
        let mut cut = EventCut::new(Client::default(), false, start("4"), &no_note);
        let body = r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersio\u006e":"11"}}}"#;
        feed(&mut cut, &(body.to_owned() + "\n"), 7).expect("passes");
        assert_eq!(cut.progress().last_rv, "11");
        assert_eq!(cut.inner_mut().events().len(), 1);
    }
}
