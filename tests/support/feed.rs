//! A watch's events as they arrive, read on a thread of their own so that a stream that stays
//! silent fails the test instead of hanging it (issue 29's resume tests, issue 30's overlay
//! tests).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::hub::{Events, Hub, KUBELET, stream};

/// An open watch: its events, in order, as they arrive.
pub struct Feed {
    events: Receiver<Option<Value>>,
}

impl Feed {
    /// Opens a watch of `url` as kubelet; panics unless it is answered 200.
    pub fn open(url: &str) -> Feed {
        Feed::open_as(url, KUBELET)
    }

    /// Opens a watch of `url` with User-Agent `ua`; panics unless it is answered 200.
    pub fn open_as(url: &str, ua: &str) -> Feed {
        let (status, body) = stream(url, ua);
        assert_eq!(status, 200, "{url}");
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            let mut events = Events::new(body);
            loop {
                let event = events.next_event();
                let end = event.is_none();
                if tx.send(event).is_err() || end {
                    return;
                }
            }
        });
        Feed { events }
    }

    /// The next event; panics when the stream ended or stayed silent for `wait`.
    pub fn next(&self, wait: Duration, hub: &Hub) -> Value {
        match self.events.recv_timeout(wait) {
            Ok(Some(event)) => event,
            Ok(None) => panic!("the watch ended; hub log:\n{}", hub.logs()),
            Err(e) => panic!("no event within {wait:?} ({e}); hub log:\n{}", hub.logs()),
        }
    }

    /// The next event that is no bookmark; panics on an ERROR, like an informer would list
    /// again on it.
    pub fn next_change(&self, wait: Duration, hub: &Hub) -> Value {
        loop {
            let event = self.next(wait, hub);
            assert_ne!(
                event["type"], "ERROR",
                "an ERROR reached the client: {event}"
            );
            if event["type"] != "BOOKMARK" {
                return event;
            }
        }
    }

    /// The first event before `deadline` that is no bookmark and satisfies `pred`, skipping
    /// the others (an ERROR panics); panics when the stream ends or the deadline passes.
    pub fn change_until(
        &self,
        deadline: Instant,
        hub: &Hub,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Some(event)) => {
                    assert_ne!(
                        event["type"], "ERROR",
                        "an ERROR reached the client: {event}"
                    );
                    if event["type"] != "BOOKMARK" && pred(&event) {
                        return event;
                    }
                    skipped.push(event);
                }
                Ok(None) => panic!(
                    "the watch ended; events skipped: {skipped:#?}; hub log:\n{}",
                    hub.logs()
                ),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => panic!(
                    "no such event in time; events skipped: {skipped:#?}; hub log:\n{}",
                    hub.logs()
                ),
            }
        }
    }

    /// Whether the stream is still open (no ERROR among what it read up to now).
    pub fn still_open(&self) -> bool {
        loop {
            match self.events.try_recv() {
                Ok(Some(event)) => assert_ne!(event["type"], "ERROR", "{event}"),
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => return false,
                Err(mpsc::TryRecvError::Empty) => return true,
            }
        }
    }

    /// Nothing arrives for `wait` (the stream may not end either): `None`; else what came
    /// (`Some(None)` for the end of the stream).
    pub fn quiet(&self, wait: Duration) -> Option<Option<Value>> {
        self.events.recv_timeout(wait).ok()
    }

    /// The events that are no bookmark until the stream ends, or panics when it has not
    /// ended by `deadline`.
    pub fn rest_until_end(&self, deadline: Instant, hub: &Hub) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Some(event)) => {
                    if event["type"] != "BOOKMARK" {
                        got.push(event);
                    }
                }
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return got,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "the watch did not end; events so far: {got:#?}; hub log:\n{}",
                    hub.logs()
                ),
            }
        }
    }
}
