//! A watch's use of the endpoints overlay's [`WatchView`], shared by the offline held
//! watches and the pool caches' watches: its objects are read for a pass only when the pass
//! can send something, so that a watch of EndpointSlices does not copy its whole scope at
//! each start while the overlay holds nothing.

use std::borrow::Cow;

use crate::overlay::{EndpointKind, Snapshot, WatchView};

/// One watch's view of the overlay, and when a pass needs the watch's objects.
pub(crate) struct OverlayWatch {
    view: WatchView,
    /// A pass ran.
    passed: bool,
    /// The client may hold an object rewritten: an event or a pass sent one, and no pass
    /// has run since the overlay went inactive.
    holds_rewritten: bool,
}

impl OverlayWatch {
    /// The view of a watch of `kind`.
    pub(crate) fn new(kind: EndpointKind) -> OverlayWatch {
        OverlayWatch {
            view: WatchView::new(kind),
            passed: false,
            holds_rewritten: false,
        }
    }

    /// An event's object through the view ([`WatchView::outgoing`]).
    pub(crate) fn outgoing<'b>(
        &mut self,
        snapshot: &Snapshot,
        deleted: bool,
        object: &'b [u8],
    ) -> Cow<'b, [u8]> {
        let out = self.view.outgoing(snapshot, deleted, object);
        self.holds_rewritten |= matches!(out, Cow::Owned(_));
        out
    }

    /// Whether to read the watch's objects for a pass now: the overlay moved since the last
    /// pass (or none ran yet), and a pass can send something — the overlay holds pods, the
    /// client may hold a rewritten object, or it is the watch's first pass after the overlay
    /// held pods in this process (a first pass sends back the objects rewritten in an outage
    /// that ended lately: [`WatchView::pass`]). Generation 0: the overlay never held a pod.
    pub(crate) fn pass_wanted(&self, snapshot: &Snapshot) -> bool {
        self.view.pass_due(snapshot)
            && snapshot.generation() != 0
            && (snapshot.active() || self.holds_rewritten || !self.passed)
    }

    /// One pass over the watch's objects ([`WatchView::pass`]): the objects to send as
    /// MODIFIED.
    pub(crate) fn pass<'o>(
        &mut self,
        snapshot: &Snapshot,
        objects: impl Iterator<Item = &'o [u8]>,
    ) -> Vec<Cow<'o, [u8]>> {
        let out = self.view.pass(snapshot, objects);
        self.passed = true;
        if snapshot.active() {
            self.holds_rewritten |= out.iter().any(|o| matches!(o, Cow::Owned(_)));
        } else {
            // The pass gave back the cloud's object of everything sent rewritten.
            self.holds_rewritten = false;
        }
        out
    }
}
