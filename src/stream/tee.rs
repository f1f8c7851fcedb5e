//! The cache's copies of a stream: [`Tee`] copies what passed to the sink it wraps into a
//! session that never waits (a client's answer), [`ToCache`] is a session that must keep
//! everything (the refill's, whose sends wait for the disk).

use std::time::Duration;

use super::{ClientEnd, Sink, Stop, Uncached};
use crate::cache::writer::Session;
use crate::server::ClientProbe;

/// Copies what passed to `inner` into a cache session, after `inner` took it. The session
/// is dropped when the writer's queue is full (the client never waits for the disk), ended
/// uncommitted when the stream breaks off or `inner` fails, and dropped with a note when
/// the answer is not for the cache.
pub(crate) struct Tee<'n, S> {
    inner: S,
    session: Option<Session>,
    /// Says why the answer is not cached; the flag: a session was still copying it.
    note: &'n dyn Fn(&Uncached, bool),
    uncached: bool,
    /// Where what passes goes now ([`Tee::set_mode`]).
    mode: TeeMode,
}

/// Where what passes through a [`Tee`] goes. The caller changes it only between whole
/// events (or a whole answer), so the client and the session each get a stream of whole
/// events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TeeMode {
    /// To the client, then the session: the ordinary answer.
    Both,
    /// To the client only: bytes the disk cache must never keep (the endpoints overlay's
    /// rewritten objects, issue 30). The session stays alive.
    ClientOnly,
    /// To the session only: what the cloud sent in place of what the client got
    /// rewritten, so the disk cache keeps the cloud's object. The client gets nothing.
    SessionOnly,
}

impl<'n, S: Sink> Tee<'n, S> {
    /// Copies what passes to `inner` into `session`, if any; `note` logs why an answer is
    /// not cached (called at most a few times per answer: no cost per chunk).
    pub(crate) fn new(
        inner: S,
        session: Option<Session>,
        note: &'n dyn Fn(&Uncached, bool),
    ) -> Tee<'n, S> {
        Tee {
            inner,
            session,
            note,
            uncached: false,
            mode: TeeMode::Both,
        }
    }

    /// Where what passes goes from now on ([`TeeMode`]); set only between whole events.
    pub(crate) fn set_mode(&mut self, mode: TeeMode) {
        self.mode = mode;
    }

    /// Whether the answer was found not for the cache ([`Sink::uncache`]).
    pub(crate) fn uncached(&self) -> bool {
        self.uncached
    }

    /// The sink it wraps.
    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The session is still copying: it was begun, and neither dropped for a full queue
    /// nor for an answer not for the cache. Once false, false for the rest of the stream.
    pub(crate) fn session_intact(&self) -> bool {
        self.session.is_some()
    }

    /// Waits until the writer applied everything copied so far ([`Session::sync`]); false
    /// without a session, or when `wait` passed first.
    pub(crate) fn sync(&mut self, wait: Duration) -> bool {
        let synced = self.session.as_mut().is_some_and(|s| s.sync(wait));
        if self.session.as_ref().is_some_and(Session::dropped) {
            // The queue was full: the session is gone, as a failed chunk would drop it.
            self.session = None;
        }
        synced
    }

    /// Copies `data` to the session unless the mode keeps it from the cache; a full queue
    /// drops the session.
    fn copy_to_session(&mut self, data: &[u8]) {
        if let Some(s) = self
            .session
            .as_mut()
            .filter(|_| self.mode != TeeMode::ClientOnly)
            && !s.chunk(data)
        {
            self.session = None;
        }
    }

    /// Ends the session, whole or not, and lets the caller end `inner` itself (a watch
    /// whose events all went whole, whatever became of its client).
    pub(crate) fn end_session(&mut self, complete: bool) {
        if let Some(s) = self.session.take() {
            s.finish(complete);
        }
    }
}

impl<S: Sink> Sink for Tee<'_, S> {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        if self.mode != TeeMode::SessionOnly {
            self.inner.write(data)?;
        }
        self.copy_to_session(data);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), Stop> {
        self.end_session(true);
        self.inner.finish()
    }

    fn abort(&mut self) {
        self.end_session(false);
        self.inner.abort();
    }

    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        (self.note)(&why, self.session.is_some());
        self.uncached = true;
        self.end_session(false);
        Ok(())
    }

    fn session_only(&mut self, events: &[u8]) -> Result<(), Stop> {
        self.copy_to_session(events);
        Ok(())
    }
}

impl<S: ClientEnd> ClientEnd for Tee<'_, S> {
    fn client_gone(&mut self, wait: Duration) -> bool {
        self.inner.client_gone(wait)
    }

    fn probe(&self) -> Option<ClientProbe> {
        self.inner.probe()
    }
}

/// A session as the end of a stream that exists to fill the cache: a full queue or an
/// answer the cache must not keep stops the stream.
pub(crate) struct ToCache(Option<Session>);

impl ToCache {
    /// The end that feeds `session`.
    pub(crate) fn new(session: Session) -> ToCache {
        ToCache(Some(session))
    }
}

impl Sink for ToCache {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        if self.0.as_mut().is_some_and(|session| session.chunk(data)) {
            Ok(())
        } else {
            Err(Stop::QueueFull)
        }
    }

    fn finish(&mut self) -> Result<(), Stop> {
        if let Some(session) = self.0.take() {
            session.finish(true);
        }
        Ok(())
    }

    fn abort(&mut self) {
        if let Some(session) = self.0.take() {
            session.finish(false);
        }
    }

    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        Err(Stop::Uncacheable(why.into_error()))
    }

    /// The session is all this end feeds: events for it only are written as any.
    fn session_only(&mut self, events: &[u8]) -> Result<(), Stop> {
        self.write(events)
    }
}
