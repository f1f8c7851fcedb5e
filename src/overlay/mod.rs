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
//! ring, never on disk), with the cloud's own resourceVersion. The overlay is never on while
//! the cloud is usable ([`CloudState`], which every capture and snapshot is given): a server
//! usable now, or a recovery since the outage's first capture (a return shorter than a
//! tick), drops it, and no capture starts one then. The keys it rewrote are remembered a
//! while as `reverted`, so watches send the cloud's objects back.
//!
//! Pure apart from its series (`series.rs`): no I/O, no clock but the reversion window. Files:
//! `patch.rs` applies kubelet's patches (a strategic-merge subset, RFC 7386, a PUT's status),
//! `rewrite.rs` rewrites one EndpointSlice or Endpoints, `view.rs` is one watch's view
//! ([`WatchView`]), `series.rs` the metrics.

mod patch;
mod rewrite;
pub(crate) mod series;
#[cfg(test)]
mod tests;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memchr::memmem::Finder;
use serde_json::Value;

use crate::lock;
use crate::names::Gvr;

/// The kinds of object the overlay rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

    /// The resource's name, as the metrics label it.
    pub(crate) fn resource(self) -> &'static str {
        match self {
            EndpointKind::Slice => "endpointslices",
            EndpointKind::Endpoints => "endpoints",
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

/// The cloud as the overlay needs it at each capture and snapshot: the overlay lives only
/// while no server is usable, within one outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CloudState {
    /// How many times a server became usable after it was not (`Backends::recoveries`):
    /// a count past its value at the outage's first capture is a return, even one that
    /// ended again before anyone looked.
    pub recoveries: u64,
    /// Some server is usable now (`Backends::any_healthy`): the overlay is dropped, and
    /// no capture starts one.
    pub usable: bool,
}

impl CloudState {
    /// Unreachable, with `recoveries` returns so far.
    #[cfg(test)]
    pub(crate) fn down(recoveries: u64) -> CloudState {
        CloudState {
            recoveries,
            usable: false,
        }
    }
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
    /// A server of the cloud is usable: kubelet's next status reaches it, and the overlay
    /// is never on then.
    Online,
    /// Not from the node's own kubelet.
    NotKubelet,
    /// kubelet's copy of the pod is not cached: nothing to apply a patch to.
    NotCached,
    /// The patch names another pod (`metadata.uid`), or the pod is not on this node.
    NotThisPod,
    /// A body the overlay cannot read (protobuf, an apply patch, bad JSON), with why.
    Unreadable(String),
}

/// One watch's view of the overlay (`view.rs`): which of its objects it sent rewritten, so
/// that a change of the overlay (or its drop) goes out as a MODIFIED of exactly the objects
/// whose bytes differ from what the client holds.
pub(crate) type WatchView = view::WatchView;

/// How long after the drop a key the overlay rewrote stays `reverted`: longer than a watch
/// lives before the cloud's 5–10 minute timeouts end it, so a client that re-watches across
/// the drop still gets the cloud's object.
const REVERTED_FOR: Duration = Duration::from_secs(15 * 60);

/// An object the overlay rewrote: its kind, namespace and name.
type Key = (EndpointKind, String, String);

/// The overlaid pods, by namespace and name.
type Pods = BTreeMap<String, BTreeMap<String, PodState>>;

/// What an endpoint shows of one of this node's pods, as kubelet last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodState {
    /// `metadata.uid` of the cached pod ("" when it has none).
    uid: String,
    /// The pod's IPs now (`status.podIPs`, else `status.podIP`).
    ips: Vec<String>,
    /// The IPs of the cached pod: what the cloud's endpoints still list, matched when an
    /// endpoint has no targetRef.
    old_ips: Vec<String>,
    /// `conditions[type=Ready].status == "True"`.
    ready: bool,
    /// Phase Failed or Succeeded: its containers will not run again.
    terminal: bool,
    /// kubelet deleted it: no longer among kubelet's pods.
    gone: bool,
}

/// What an endpoint shows of a pod: a capture that changes it is `changed`, and logged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shown {
    ips: Vec<String>,
    ready: bool,
    terminal: bool,
    gone: bool,
}

impl PodState {
    /// What an endpoint shows of it.
    fn shown(&self) -> Shown {
        Shown {
            ips: self.ips.clone(),
            ready: self.ready,
            terminal: self.terminal,
            gone: self.gone,
        }
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ips = match self.ips.is_empty() {
            true => "none".to_owned(),
            false => self.ips.join(","),
        };
        // `10.244.1.20 ready=true`: the log line reads `ips=… (was …)`.
        write!(f, "{ips} ready={}", self.ready)?;
        if self.terminal {
            f.write_str(" terminal=true")?;
        }
        if self.gone {
            f.write_str(" gone=true")?;
        }
        Ok(())
    }
}

/// The fields of a pod an endpoint shows: its IPs, Ready, finished.
fn derive(pod: &Value) -> (Vec<String>, bool, bool) {
    let status = pod.get("status");
    let field = |name: &str| status.and_then(|s| s.get(name));
    let mut ips: Vec<String> = field("podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("ip").and_then(Value::as_str))
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned)
        .collect();
    if ips.is_empty()
        && let Some(ip) = field("podIP").and_then(Value::as_str)
        && !ip.is_empty()
    {
        ips.push(ip.to_owned());
    }
    let ready = field("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True");
    let terminal = matches!(
        field("phase").and_then(Value::as_str),
        Some("Failed" | "Succeeded")
    );
    (ips, ready, terminal)
}

/// The string at `pointer` in `value`, "" when there is none.
fn text<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The overlay: the latest state of each of this node's pods kubelet reported offline.
///
/// One lock guards the state; what readers get is an immutable [`Snapshot`], replaced as a
/// whole on every change, so taking one (every watch tick) is an `Arc` clone.
pub(crate) struct Overlay {
    node: String,
    enabled: bool,
    series: &'static series::Series,
    state: Mutex<State>,
}

/// The overlay's state under its lock.
struct State {
    /// What readers get now.
    current: Arc<Snapshot>,
    /// `recoveries` at the outage's first capture; None while no pod is overlaid.
    epoch: Option<u64>,
}

impl Overlay {
    /// The overlay of node `node`; when not `enabled`, it never rewrites anything.
    pub(crate) fn new(node: &str, enabled: bool) -> Arc<Overlay> {
        Arc::new(Overlay::with_series(node, enabled, &series::SERIES))
    }

    /// An overlay counting into `series` (the process's, or a test's own).
    fn with_series(node: &str, enabled: bool, series: &'static series::Series) -> Overlay {
        let node: Arc<str> = Arc::from(node);
        Overlay {
            node: node.to_string(),
            enabled,
            series,
            state: Mutex::new(State {
                current: Arc::new(Snapshot {
                    generation: 0,
                    node,
                    pods: Pods::new(),
                    needles: Vec::new(),
                    served_rewritten: Arc::default(),
                    reverted: Arc::default(),
                    dropped_at: None,
                    series,
                }),
                epoch: None,
            }),
        }
    }

    /// Whether it is turned on.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Applies one of kubelet's writes, with the cloud as it is now: while a server is
    /// usable nothing is applied ([`Ignored::Online`]) and the overlay is dropped; it lives
    /// until a server is usable or `cloud.recoveries` moves past its value at the outage's
    /// first capture.
    ///
    /// `Applied{changed}` says whether the pod's IPs, readiness, phase or presence differ
    /// from before: from the previous capture, or for the first, from the cached pod (the
    /// cloud's view). A first capture that changes nothing is still kept (its pod is
    /// overlaid) and still moves the generation, since the cloud's endpoints may lag behind
    /// its pod; a capture that leaves the entry as it was moves nothing.
    pub(crate) fn capture(&self, c: Capture<'_>, cloud: CloudState) -> Captured {
        // While a server is usable kubelet's status reaches the cloud: nothing is applied,
        // and an overlay left from the outage goes.
        let read = if self.enabled && cloud.usable {
            Err(Ignored::Online)
        } else {
            self.read(&c)
        };
        let outcome = match read {
            Ok((entry, cached)) => self.apply(c.namespace, c.name, entry, cached, cloud),
            Err(why) => {
                if why == Ignored::Online {
                    self.drop_if_back(&mut lock(&self.state), cloud);
                }
                log::debug!(
                    "endpoints overlay ignored a write of pod {}/{}: {why:?}",
                    c.namespace,
                    c.name
                );
                Captured::Ignored(why)
            }
        };
        self.series.captured(&outcome);
        outcome
    }

    /// The pod's state after `c` (the cached pod with this write applied to it), and the
    /// cached pod's own.
    fn read(&self, c: &Capture<'_>) -> Result<(PodState, Shown), Ignored> {
        if !self.enabled {
            return Err(Ignored::Disabled);
        }
        if !c.by_node_kubelet {
            return Err(Ignored::NotKubelet);
        }
        let cached = c.cached_pod.ok_or(Ignored::NotCached)?;
        let cached: Value = match serde_json::from_slice(cached) {
            Ok(pod @ Value::Object(_)) => pod,
            _ => {
                return Err(Ignored::Unreadable(
                    "the cached pod is not a JSON object".into(),
                ));
            }
        };
        if text(&cached, "/spec/nodeName") != self.node {
            return Err(Ignored::NotThisPod);
        }
        let uid = text(&cached, "/metadata/uid").to_owned();
        let (old_ips, was_ready, was_terminal) = derive(&cached);
        let cached_shown = Shown {
            ips: old_ips.clone(),
            ready: was_ready,
            terminal: was_terminal,
            gone: false,
        };
        let body = |bytes: &[u8]| match serde_json::from_slice(bytes) {
            Ok(body @ Value::Object(_)) => {
                // A body naming another pod (a deleted and re-created one) is not this one.
                match text(&body, "/metadata/uid") {
                    theirs if !theirs.is_empty() && !uid.is_empty() && theirs != uid.as_str() => {
                        Err(Ignored::NotThisPod)
                    }
                    _ => Ok(body),
                }
            }
            Ok(_) => Err(Ignored::Unreadable("the body is not a JSON object".into())),
            Err(e) => Err(Ignored::Unreadable(format!("the body is not JSON: {e}"))),
        };
        let mut pod = cached;
        let gone = match c.write {
            PodWrite::Patch {
                content_type,
                body: bytes,
            } => {
                let format = patch::Format::of(content_type).map_err(Ignored::Unreadable)?;
                patch::apply(format, &mut pod, &body(bytes)?);
                false
            }
            PodWrite::Put { body: bytes } => {
                let put = body(bytes)?;
                let status = put.get("status").cloned().unwrap_or(Value::Null);
                if let Value::Object(fields) = &mut pod {
                    fields.insert("status".into(), status);
                }
                false
            }
            PodWrite::Delete => true,
        };
        let (ips, ready, terminal) = derive(&pod);
        let entry = PodState {
            uid,
            ips,
            old_ips,
            ready,
            terminal,
            gone,
        };
        Ok((entry, cached_shown))
    }

    /// Puts `entry` in for `namespace/name`; `cached` is what the cached pod showed, and
    /// `cloud` is not usable (the caller looked).
    fn apply(
        &self,
        namespace: &str,
        name: &str,
        mut entry: PodState,
        cached: Shown,
        cloud: CloudState,
    ) -> Captured {
        let mut state = lock(&self.state);
        self.drop_if_back(&mut state, cloud);
        let previous = state
            .current
            .pods
            .get(namespace)
            .and_then(|pods| pods.get(name));
        if let Some(previous) = previous
            && previous.gone
            && previous.uid == entry.uid
        {
            // kubelet deleted it: a late status of the same pod does not bring it back.
            entry.gone = true;
        }
        // Against the previous capture, or for the first, the cloud's view of the pod.
        let was = previous.map_or(cached, PodState::shown);
        let now = entry.shown();
        let changed = now != was;
        if previous != Some(&entry) {
            let mut pods = state.current.pods.clone();
            pods.entry(namespace.to_owned())
                .or_default()
                .insert(name.to_owned(), entry);
            self.series.set_pods(pods.values().map(BTreeMap::len).sum());
            let next = state.current.with_pods(pods);
            state.current = Arc::new(next);
            state.epoch.get_or_insert(cloud.recoveries);
        }
        drop(state);
        if changed {
            log::info!("endpoints overlay pod={namespace}/{name} ips={now} (was {was})");
        }
        Captured::Applied { changed }
    }

    /// Drops the overlay when a server is usable now, or the cloud came back (and maybe
    /// went again) since the outage's first capture.
    fn drop_if_back(&self, state: &mut State, cloud: CloudState) {
        let Some(epoch) = state.epoch else {
            return;
        };
        if epoch == cloud.recoveries && !cloud.usable {
            return;
        }
        let now = Instant::now();
        let rewritten = std::mem::take(&mut *lock(&state.current.served_rewritten));
        let mut reverted: BTreeMap<Key, Instant> = state
            .current
            .reverted
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < REVERTED_FOR)
            .map(|(key, at)| (key.clone(), *at))
            .collect();
        let moved = rewritten.len();
        reverted.extend(rewritten.into_iter().map(|key| (key, now)));
        let pods: usize = state.current.pods.values().map(BTreeMap::len).sum();
        let current = &state.current;
        state.current = Arc::new(Snapshot {
            generation: current.generation + 1,
            node: Arc::clone(&current.node),
            pods: Pods::new(),
            needles: Vec::new(),
            served_rewritten: Arc::default(),
            reverted: Arc::new(reverted),
            dropped_at: Some(now),
            series: self.series,
        });
        state.epoch = None;
        self.series.set_pods(0);
        log::info!("endpoints overlay dropped: cloud back pods={pods} reverted={moved}");
    }

    /// What to serve now, with the cloud as it is now: the overlay is dropped first when a
    /// server is usable or `cloud.recoveries` moved past its epoch.
    pub(crate) fn snapshot(&self, cloud: CloudState) -> Arc<Snapshot> {
        let mut state = lock(&self.state);
        self.drop_if_back(&mut state, cloud);
        Arc::clone(&state.current)
    }
}

/// The overlay at one moment, shared by the answers that read it.
pub(crate) struct Snapshot {
    generation: u64,
    node: Arc<str>,
    pods: Pods,
    /// The quoted pod names and former IPs: an object containing none of them names none
    /// of the pods, and is passed without parsing.
    needles: Vec<Finder<'static>>,
    /// The keys served rewritten in this outage (shared by its snapshots): at the drop they
    /// become `reverted`.
    served_rewritten: Arc<Mutex<BTreeSet<Key>>>,
    /// The keys rewritten in outages that ended, with when they did.
    reverted: Arc<BTreeMap<Key, Instant>>,
    /// When the last outage's overlay was dropped; None before the first drop.
    dropped_at: Option<Instant>,
    series: &'static series::Series,
}

impl Snapshot {
    /// The next snapshot of this outage, with `pods`.
    fn with_pods(&self, pods: Pods) -> Snapshot {
        let mut needles = Vec::new();
        for (name, pod) in pods.values().flatten() {
            let quoted = |s: &str| Finder::new(format!("\"{s}\"").as_bytes()).into_owned();
            needles.push(quoted(name));
            needles.extend(pod.old_ips.iter().map(|ip| quoted(ip)));
        }
        Snapshot {
            generation: self.generation + 1,
            node: Arc::clone(&self.node),
            pods,
            needles,
            served_rewritten: Arc::clone(&self.served_rewritten),
            reverted: Arc::clone(&self.reverted),
            dropped_at: self.dropped_at,
            series: self.series,
        }
    }

    /// Moves with every change of what the overlay rewrites (a pod's state, the drop): a
    /// watch passes over its objects again when it sees a new one.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether any pod is overlaid.
    pub(crate) fn active(&self) -> bool {
        !self.pods.is_empty()
    }

    /// `object` (an EndpointSlice or Endpoints as the cloud sent it) rewritten to this node's
    /// pods; None when it names none of them, or the overlay is not active. The
    /// resourceVersion and every field but the endpoints' addresses and readiness are kept.
    /// Counted as served rewritten.
    pub(crate) fn rewrite(&self, kind: EndpointKind, object: &[u8]) -> Option<Vec<u8>> {
        let rewritten = self.rewrite_keyed(kind, object)?;
        self.series.rewritten(kind);
        Some(rewritten.bytes)
    }

    /// [`Snapshot::rewrite`], not counted, with the object's namespace and name; noted
    /// among the keys to revert at the drop.
    fn rewrite_keyed(&self, kind: EndpointKind, object: &[u8]) -> Option<rewrite::Rewritten> {
        if self.pods.is_empty() {
            return None;
        }
        let rewritten = rewrite::rewrite(kind, object, &self.node, &self.pods, &self.needles)?;
        let key = (kind, rewritten.namespace.clone(), rewritten.name.clone());
        lock(&self.served_rewritten).insert(key);
        Some(rewritten)
    }

    /// Whether `namespace/name` was served rewritten in the outage that just ended (kept
    /// 15 minutes after the drop): a new watch sends its cloud object once more.
    pub(crate) fn reverted(&self, kind: EndpointKind, namespace: &str, name: &str) -> bool {
        self.reverted_at(kind, namespace, name, Instant::now())
    }

    /// [`Snapshot::reverted`] at `now`.
    fn reverted_at(&self, kind: EndpointKind, namespace: &str, name: &str, now: Instant) -> bool {
        self.reverted
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .is_some_and(|at| now.saturating_duration_since(*at) < REVERTED_FOR)
    }

    /// Whether any key may still be `reverted`: within [`REVERTED_FOR`] of the last drop.
    /// After that a new watch's first pass reads nothing for it.
    pub(crate) fn reverting(&self) -> bool {
        self.reverting_at(Instant::now())
    }

    /// [`Snapshot::reverting`] at `now`.
    fn reverting_at(&self, now: Instant) -> bool {
        !self.reverted.is_empty()
            && self
                .dropped_at
                .is_some_and(|at| now.saturating_duration_since(at) < REVERTED_FOR)
    }
}
