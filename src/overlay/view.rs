//! One watch's view of the overlay ([`WatchView`]): which of its objects the client holds
//! rewritten, so that a change of the overlay, or its drop, goes out as a MODIFIED of exactly
//! the objects whose bytes differ from what the client holds.
//!
//! The view keeps, per object it sent rewritten, a hash of the bytes sent; an object sent as
//! the cloud's bytes is not kept. A watch writes every event's object through
//! [`WatchView::outgoing`], and when [`WatchView::pass_due`] says the overlay moved (and the
//! client has seen every event), starts a [`WatchView::pass`] and hands it the watch's
//! objects one at a time ([`Pass::object`]), writing each it returns as a MODIFIED event:
//! a pass holds one object, never the watch's scope.
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
        match snapshot.rewrite_keyed(self.kind, object) {
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

    /// Starts a pass over the watch's objects now (in its scope, as the cloud sent them, when
    /// the client has seen every event): the caller hands each object to [`Pass::object`] as
    /// it reads it, and sends each it returns as a MODIFIED at once, so a pass holds one
    /// object and the caller's batch, never the scope. None when the pass cannot send
    /// anything (the overlay holds no pod, the client holds nothing rewritten, and it is not
    /// a first pass while keys are `reverted`): the caller reads nothing. Either way the
    /// view has passed this generation.
    pub(crate) fn pass<'v>(&'v mut self, snapshot: &'v Snapshot) -> Option<Pass<'v>> {
        let first = self.passed.is_none();
        self.passed = Some(snapshot.generation());
        let reverting = first && snapshot.reverting();
        if !snapshot.active() && self.sent.is_empty() && !reverting {
            return None;
        }
        Some(Pass {
            view: self,
            snapshot,
            reverting,
            sent: 0,
        })
    }
}

/// One pass of a [`WatchView`] over the watch's objects ([`WatchView::pass`]), fed one object
/// at a time; the MODIFIED events it called for are counted when it is dropped.
pub(crate) struct Pass<'v> {
    view: &'v mut WatchView,
    snapshot: &'v Snapshot,
    /// The view's first pass while keys are `reverted`: the cloud's bytes of those go out.
    reverting: bool,
    /// The objects it returned so far.
    sent: usize,
}

impl Pass<'_> {
    /// What to send as a MODIFIED for `object` (one of the watch's objects as the cloud sent
    /// it): its bytes when they differ from what the client was last sent — rewritten, or
    /// the cloud's again after the drop — else None. A view's first pass also sends the
    /// cloud's bytes of an object the overlay rewrote in an outage that ended lately
    /// ([`Snapshot::reverted`]): the client may hold a rewritten copy from a watch before
    /// this one.
    pub(crate) fn object<'o>(&mut self, object: &'o [u8]) -> Option<Cow<'o, [u8]>> {
        let (view, snapshot) = (&mut *self.view, self.snapshot);
        if let Some(rewritten) = snapshot.rewrite_keyed(view.kind, object) {
            let hash = view.hasher.hash_one(&rewritten.bytes[..]);
            let key = key(&rewritten.namespace, &rewritten.name);
            if view.sent.get(&key) == Some(&hash) {
                return None;
            }
            view.sent.insert(key, hash);
            snapshot.series.rewritten(view.kind);
            self.sent += 1;
            return Some(Cow::Owned(rewritten.bytes));
        }
        if view.sent.is_empty() && !self.reverting {
            return None;
        }
        let head = ObjectHead::parse(object)?;
        let meta = head.metadata?;
        let (namespace, name) = (meta.namespace.as_deref().unwrap_or(""), meta.name?);
        let held_rewritten = view.sent.remove(&key(namespace, &name)).is_some();
        if held_rewritten || (self.reverting && snapshot.reverted(view.kind, namespace, &name)) {
            self.sent += 1;
            return Some(Cow::Borrowed(object));
        }
        None
    }
}

impl Drop for Pass<'_> {
    /// Counts the pass's MODIFIED events, however far it went.
    fn drop(&mut self) {
        self.snapshot.series.events(self.view.kind, self.sent);
    }
}
