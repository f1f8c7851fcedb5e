//! One watch's view of the overlay ([`WatchView`]): which of its objects the client holds
//! rewritten, so that a change of the overlay, or its drop, goes out as a MODIFIED of exactly
//! the objects whose bytes differ from what the client holds.
//!
//! The view keeps, per object it sent rewritten, a hash of the bytes sent; an object sent as
//! the cloud's bytes is not kept. A watch writes every event's object through
//! [`WatchView::outgoing`], and when [`WatchView::pass_due`] says the overlay moved (and the
//! client has seen every event), writes [`WatchView::pass`]'s objects as MODIFIED events.
//! While the overlay is inactive and nothing was sent rewritten, both cost nothing: no parse.
//!
//! What it does not do: write events, or choose the objects of a pass (the watch's caller).

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use super::{EndpointKind, Snapshot};
use crate::cache::object::ObjectHead;

/// One watch's view of the overlay: which of its objects it sent rewritten, so that a change
/// of the overlay (or its drop) goes out as a MODIFIED of exactly the objects whose bytes
/// differ from what the client holds.
pub(crate) struct WatchView {
    kind: EndpointKind,
    /// `namespace/name` of each object the client holds rewritten: the hash of the bytes.
    sent: HashMap<String, u64>,
    /// The generation of the last pass; None before the first.
    passed: Option<u64>,
    hasher: RandomState,
}

/// An object's `namespace/name` (names hold no `/`, so the pair is one key), if it has one.
fn key_of(object: &[u8]) -> Option<String> {
    let head = ObjectHead::parse(object)?;
    let meta = head.metadata?;
    Some(key(
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref()?,
    ))
}

/// `namespace/name`.
fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl WatchView {
    /// A view for a watch of `kind`.
    pub(crate) fn new(kind: EndpointKind) -> WatchView {
        WatchView {
            kind,
            sent: HashMap::new(),
            passed: None,
            hasher: RandomState::new(),
        }
    }

    /// The object of an event the watch is about to send (`deleted` for a DELETED event):
    /// rewritten when the snapshot rewrites it, and noted as sent.
    pub(crate) fn outgoing<'b>(
        &mut self,
        snapshot: &Snapshot,
        deleted: bool,
        object: &'b [u8],
    ) -> Cow<'b, [u8]> {
        if deleted && self.sent.is_empty() || self.passes_through(snapshot) {
            return Cow::Borrowed(object);
        }
        if deleted {
            // The client drops its copy, whatever it was.
            if let Some(key) = key_of(object) {
                self.sent.remove(&key);
            }
            return Cow::Borrowed(object);
        }
        match snapshot.rewritten(self.kind, object) {
            Some(rewritten) => {
                snapshot.series.rewritten(self.kind);
                let hash = self.hasher.hash_one(&rewritten.bytes[..]);
                self.sent
                    .insert(key(&rewritten.namespace, &rewritten.name), hash);
                Cow::Owned(rewritten.bytes)
            }
            None => {
                if !self.sent.is_empty()
                    && let Some(key) = key_of(object)
                {
                    self.sent.remove(&key);
                }
                Cow::Borrowed(object)
            }
        }
    }

    /// Whether every object goes out as it is: the overlay holds no pod and the client holds
    /// nothing sent rewritten (online, and offline until kubelet reports a pod). The caller
    /// may then skip [`WatchView::outgoing`] altogether.
    pub(crate) fn passes_through(&self, snapshot: &Snapshot) -> bool {
        self.sent.is_empty() && !snapshot.active()
    }

    /// Whether to read the watch's objects for a pass now: the overlay moved since the last
    /// pass, and a pass can send something — the overlay holds pods, the client holds an
    /// object sent rewritten, or it is the view's first pass while keys are `reverted` (an
    /// outage ended lately). Never at generation 0 (the overlay never held a pod in this
    /// process): a watch of EndpointSlices does not copy its scope at each start for nothing.
    pub(crate) fn pass_due(&self, snapshot: &Snapshot) -> bool {
        let generation = snapshot.generation();
        generation != 0
            && self.passed != Some(generation)
            && (snapshot.active()
                || !self.sent.is_empty()
                || (self.passed.is_none() && snapshot.reverting()))
    }

    /// Passes over the watch's objects now (in its scope, as the cloud sent them, when the
    /// client has seen every event): the objects to send as MODIFIED, each whose bytes differ
    /// from what the client was last sent (rewritten, or the cloud's again after the drop).
    ///
    /// A view's first pass also sends the cloud's bytes of the objects the overlay rewrote in
    /// an outage that ended lately ([`Snapshot::reverted`]): the client may hold a rewritten
    /// copy from a watch before this one.
    pub(crate) fn pass<'o>(
        &mut self,
        snapshot: &Snapshot,
        objects: impl Iterator<Item = &'o [u8]>,
    ) -> Vec<Cow<'o, [u8]>> {
        let first = self.passed.is_none();
        self.passed = Some(snapshot.generation());
        let reverting = first && snapshot.reverting();
        let mut out = Vec::new();
        if !snapshot.active() && self.sent.is_empty() && !reverting {
            return out;
        }
        for object in objects {
            if let Some(rewritten) = snapshot.rewritten(self.kind, object) {
                let hash = self.hasher.hash_one(&rewritten.bytes[..]);
                let key = key(&rewritten.namespace, &rewritten.name);
                if self.sent.get(&key) != Some(&hash) {
                    self.sent.insert(key, hash);
                    snapshot.series.rewritten(self.kind);
                    out.push(Cow::Owned(rewritten.bytes));
                }
                continue;
            }
            if self.sent.is_empty() && !reverting {
                continue;
            }
            let Some(head) = ObjectHead::parse(object) else {
                continue;
            };
            let Some(meta) = head.metadata else {
                continue;
            };
            let (namespace, Some(name)) = (meta.namespace.as_deref().unwrap_or(""), meta.name)
            else {
                continue;
            };
            let held_rewritten = self.sent.remove(&key(namespace, &name)).is_some();
            if held_rewritten || (reverting && snapshot.reverted(self.kind, namespace, &name)) {
                out.push(Cow::Borrowed(object));
            }
        }
        snapshot.series.events(self.kind, out.len());
        out
    }
}
