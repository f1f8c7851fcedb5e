//! A stand-in for Part B's `stream::EventCut` (design §4.1), with its signature, until that
//! stage is merged: whole events only, the last delivered resourceVersion, bookmarks passed
//! only when asked, ERRORs of an outage swallowed, the source's end absorbed. It cuts at
//! newlines and reads each event with serde (the cloud writes one event a line); the real
//! stage cuts with the cache's scanner. Deleted when `stream::EventCut` lands.

use std::time::{Duration, Instant};

use crate::request::Query;
use crate::stream::{Sink, Stop, Uncached};

/// The `k8s.io/initial-events-end` annotation of a watch-list's bookmark.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What the client has been sent so far, across legs.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The resourceVersion of the last event or bookmark delivered; "" until one is known.
    pub last_rv: String,
    /// kind and apiVersion of the last object delivered (for hub-made bookmarks).
    pub kind: String,
    pub api_version: String,
    /// Events (not bookmarks) delivered since the start.
    pub since_mark: u64,
    /// The initial-events-end bookmark passed (or the watch never asked for initial events).
    pub initial_done: bool,
}

impl Progress {
    /// Where a client's watch starts: its own resourceVersion when it is a number other
    /// than 0 (else nothing to resume from until something is delivered).
    pub(crate) fn from_query(query: &Query) -> Progress {
        let rv = query
            .resource_version
            .as_deref()
            .filter(|rv| rv.parse::<u64>().is_ok_and(|n| n != 0))
            .unwrap_or("");
        Progress {
            last_rv: rv.to_owned(),
            initial_done: query.send_initial_events != Some(true),
            ..Progress::default()
        }
    }
}

/// How the current leg ended, as the stage saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegEnd {
    /// The source ended between events.
    Ended,
    /// The source ended or broke inside an event, or broke off.
    BrokeOff,
    /// ERROR with code 410 (swallowed).
    Expired,
    /// ERROR with code 5xx or 429, or a body that is not a watch stream (swallowed).
    CloudTrouble(u16),
    /// Any other ERROR: passed to the client, the watch ends.
    Refused(u16),
}

/// Whole events of the legs of one watch to `inner`.
pub(crate) struct EventCut<'n, S> {
    inner: S,
    note: &'n dyn Fn(u64),
    catch_up: Option<(Instant, u64)>,
    partial: Vec<u8>,
    out: Vec<u8>,
    progress: Progress,
    pass_bookmarks: bool,
    leg_end: Option<LegEnd>,
    /// ERRORs are the outage's (swallowed), not the cloud's answer to the client.
    intercept: bool,
    /// The numeric resourceVersion below which a resumed leg's events are replays.
    floor: Option<u64>,
}

impl<'n, S: Sink> EventCut<'n, S> {
    /// Whole events to `inner`, from `start`; bookmarks passed when `pass_bookmarks`.
    pub(crate) fn new(
        inner: S,
        pass_bookmarks: bool,
        start: Progress,
        note: &'n dyn Fn(u64),
    ) -> Self {
        EventCut {
            inner,
            note,
            catch_up: None,
            partial: Vec::new(),
            out: Vec::new(),
            progress: start,
            pass_bookmarks,
            leg_end: None,
            intercept: false,
            floor: None,
        }
    }

    /// A resumed leg began: count its events for `window`, then `note` the count.
    pub(crate) fn mark_resumed(&mut self, window: Duration) {
        self.catch_up = Some((Instant::now() + window, 0));
    }

    /// A new leg begins; `hub_leg`: one the hub made (its ERRORs are intercepted).
    pub(crate) fn new_leg(&mut self, hub_leg: bool) {
        self.partial.clear();
        self.leg_end = None;
        self.intercept = hub_leg;
        self.floor = hub_leg
            .then(|| self.progress.last_rv.parse().ok())
            .flatten();
    }

    /// How the last leg ended.
    pub(crate) fn leg_end(&self) -> Option<LegEnd> {
        self.leg_end
    }

    /// What the client has been sent.
    pub(crate) fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Writes one synthesized event line through the chain, `rv` delivered once written.
    pub(crate) fn emit(&mut self, event: &[u8], rv: &str) -> Result<(), Stop> {
        self.out.clear();
        self.out.extend_from_slice(event);
        self.out.push(b'\n');
        self.inner.write(&self.out)?;
        rv.clone_into(&mut self.progress.last_rv);
        Ok(())
    }

    /// Ends the client's answer for real: finished (clean) or aborted.
    pub(crate) fn end(&mut self, clean: bool) -> Result<(), Stop> {
        self.count_caught_up(true);
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

    fn count_caught_up(&mut self, leg_over: bool) {
        if let Some((until, n)) = self.catch_up
            && (leg_over || Instant::now() >= until)
        {
            self.catch_up = None;
            (self.note)(n);
        }
    }

    /// One whole event line: copied to `out` or swallowed; an end of the leg as `Err`.
    fn unit(&mut self, line: &[u8], noted: &mut Option<String>) -> Result<(), LegEnd> {
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) else {
            return Err(LegEnd::CloudTrouble(0));
        };
        let object = &event["object"];
        let rv = object["metadata"]["resourceVersion"].as_str();
        match event["type"].as_str() {
            Some("BOOKMARK") => {
                if !self.progress.initial_done
                    && object["metadata"]["annotations"][INITIAL_EVENTS_END] == "true"
                {
                    self.progress.initial_done = true;
                }
                if self.pass_bookmarks {
                    self.out.extend_from_slice(line);
                    self.out.push(b'\n');
                }
                *noted = rv.map(str::to_owned).or(noted.take());
            }
            Some("ERROR") => {
                let code = object["code"].as_u64().unwrap_or(0) as u16;
                let delivered = !self.progress.last_rv.is_empty() || noted.is_some();
                if self.intercept || delivered {
                    match code {
                        410 => return Err(LegEnd::Expired),
                        429 | 500..=599 => return Err(LegEnd::CloudTrouble(code)),
                        _ => {}
                    }
                }
                self.out.extend_from_slice(line);
                self.out.push(b'\n');
                return Err(LegEnd::Refused(code));
            }
            Some(_) => {
                // A server that replays its start after a resume: sent already.
                let n = rv.and_then(|rv| rv.parse::<u64>().ok());
                if let (Some(n), Some(floor)) = (n, self.floor)
                    && n <= floor
                {
                    return Ok(());
                }
                self.out.extend_from_slice(line);
                self.out.push(b'\n');
                if let Some(kind) = object["kind"].as_str() {
                    kind.clone_into(&mut self.progress.kind);
                }
                if let Some(v) = object["apiVersion"].as_str() {
                    v.clone_into(&mut self.progress.api_version);
                }
                self.progress.since_mark += 1;
                if let Some((_, count)) = self.catch_up.as_mut() {
                    *count += 1;
                }
                *noted = rv.map(str::to_owned).or(noted.take());
            }
            None => return Err(LegEnd::CloudTrouble(0)),
        }
        Ok(())
    }
}

impl<S: Sink> Sink for EventCut<'_, S> {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        self.partial.extend_from_slice(data);
        self.out.clear();
        let mut noted = None;
        let mut ended = None;
        let mut start = 0;
        let partial = std::mem::take(&mut self.partial);
        while let Some(at) = partial[start..].iter().position(|&b| b == b'\n') {
            let line = partial[start..start + at].trim_ascii();
            start += at + 1;
            if line.is_empty() {
                continue;
            }
            if let Err(end) = self.unit(line, &mut noted) {
                ended = Some(end);
                break;
            }
        }
        self.partial = partial;
        self.partial.drain(..start);
        if !self.out.is_empty()
            && let Err(stop) = self.inner.write(&self.out)
        {
            // A stage inside cut the stream (the filters could not read it): the watch ends.
            if !matches!(stop, Stop::Gone(_)) {
                self.leg_end = Some(LegEnd::Refused(0));
            }
            return Err(stop);
        }
        if let Some(rv) = noted {
            self.progress.last_rv = rv;
        }
        self.count_caught_up(false);
        match ended {
            Some(end) => {
                self.leg_end = Some(end);
                // The stand-in's "end of leg" (Part B's `Stop::EndOfLeg`).
                Err(Stop::Undecodable)
            }
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<(), Stop> {
        let whole = self.partial.trim_ascii().is_empty();
        self.leg_end = Some(if whole { LegEnd::Ended } else { LegEnd::BrokeOff });
        self.count_caught_up(true);
        Ok(())
    }

    fn abort(&mut self) {
        self.leg_end.get_or_insert(LegEnd::BrokeOff);
        self.count_caught_up(true);
    }

    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        self.inner.uncache(why)
    }
}
