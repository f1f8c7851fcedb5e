//! kubelet's offline pod writes, read for the endpoints overlay (issue 30) before their 503.
//!
//! Offline every write is refused (503, nothing stored), and kubelet sends its pod status
//! again at each sync; the node's own kubelet's `PATCH|PUT …/pods/<n>/status` and final
//! `DELETE …/pods/<n>` are read here first and handed to the overlay with kubelet's cached
//! copy of the pod (the patch is a diff against it). Who may change the overlay is the
//! overlay's rule on [`Capture::by_node_kubelet`]: this file only says who sent the write.
//! The answer does not change: whatever happens here, the caller sends the 503.

use super::{Offline, read_body};
use crate::cache::key::ObjectKey;
use crate::overlay::{Capture, Captured, Ignored, PodWrite};
use crate::request::{ApiRequest, ResourcePath, Verb};
use crate::route::collection_key;
use crate::server::Exchange;
use crate::status::Status;

/// Body bytes read of a pod write: a pod's status patch is a few KiB; a longer body is cut
/// here, fails to parse, and is counted unreadable by the overlay.
const CAPTURE_LIMIT: u64 = 64 * 1024;

/// Which of kubelet's pod writes the overlay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodOp {
    /// `PATCH …/pods/<n>/status`: kubelet's status manager.
    PatchStatus,
    /// `PUT …/pods/<n>/status`: an older kubelet's UpdateStatus.
    PutStatus,
    /// `DELETE …/pods/<n>`: kubelet's final delete of a pod it stopped.
    Delete,
}

impl PodOp {
    fn as_str(self) -> &'static str {
        match self {
            PodOp::PatchStatus => "status patch",
            PodOp::PutStatus => "status update",
            PodOp::Delete => "delete",
        }
    }
}

/// The pod write `req` is, with its path, namespace and name; None for any other request
/// (another resource or subresource, a pod create, a status of a pod with no namespace).
fn pod_write(req: &ApiRequest) -> Option<(PodOp, &ResourcePath, &str, &str)> {
    let path = req.resource()?;
    let gvr = &path.gvr;
    if !(gvr.group.is_empty() && gvr.version == "v1" && gvr.resource == "pods") {
        return None;
    }
    let op = match (req.verb, path.subresource.as_deref()) {
        (Verb::Patch, Some("status")) => PodOp::PatchStatus,
        (Verb::Update, Some("status")) => PodOp::PutStatus,
        (Verb::Delete, None) => PodOp::Delete,
        _ => return None,
    };
    let namespace = path.namespace.as_deref().filter(|ns| !ns.is_empty())?;
    Some((op, path, namespace, path.name.as_deref()?))
}

/// Whether the node's own kubelet sent `req`: the node's identity (`Requester::is_node`)
/// and component `kubelet`. kubelet's User-Agent with a pod's token is not the node, and
/// kube-proxy is the node but not kubelet: neither moves the node's endpoints.
fn by_node_kubelet(req: &ApiRequest) -> bool {
    req.requester.is_node() && req.component == "kubelet"
}

impl Offline {
    /// Hands a write of a pod's status, or a pod's delete, to the endpoints overlay when it
    /// is on and the write was refused because the cloud is gone; the caller answers 503
    /// whatever happens (a body that cannot be read included). Why a write changed nothing
    /// is logged at debug (the overlay counts it).
    pub(super) fn capture_pod(&self, ex: &mut Exchange<'_>, req: &ApiRequest) {
        let content_type = ex.header("Content-Type").unwrap_or("").to_owned();
        self.capture_pod_with(req, &content_type, &mut || read_body(ex, CAPTURE_LIMIT));
    }

    /// [`Offline::capture_pod`] with the request's `Content-Type` and its body, read only
    /// when the overlay is to get it; the overlay's outcome, None when it was not asked.
    ///
    /// Only while no server is healthy by its last probe (`Backends::any_probed_healthy`,
    /// the rule that sends a write offline: `proxy::fallback::offline`): a write refused for
    /// another reason (a connection to one of several servers failed while another is up,
    /// or the cloud came back while the write was on its way) is not the cloud being gone,
    /// and the overlay must never turn on while it is usable. kubelet sends the status
    /// again at its next sync, by when the probe has ruled.
    fn capture_pod_with(
        &self,
        req: &ApiRequest,
        content_type: &str,
        read: &mut dyn FnMut() -> Result<Vec<u8>, Status>,
    ) -> Option<Captured> {
        if !self.overlay.enabled() || self.backends.any_probed_healthy() {
            return None;
        }
        let (op, path, namespace, name) = pod_write(req)?;
        let by_node_kubelet = by_node_kubelet(req);
        // A delete's body (DeleteOptions) says nothing the overlay reads, and a write not
        // from the node's kubelet changes nothing whatever it says: neither is read.
        let body = match op {
            _ if !by_node_kubelet => Vec::new(),
            PodOp::Delete => Vec::new(),
            PodOp::PatchStatus | PodOp::PutStatus => match read() {
                Ok(body) => body,
                Err(status) => {
                    log::debug!(
                        "endpoints overlay: the {} of pod {namespace}/{name} was not read: {}",
                        op.as_str(),
                        status.message
                    );
                    return None;
                }
            },
        };
        // kubelet's copy, which its patch is a diff against; read only for kubelet.
        let cached = if by_node_kubelet {
            self.kubelet_pod(req, path, namespace, name)
        } else {
            None
        };
        let write = match op {
            PodOp::PatchStatus => PodWrite::Patch {
                content_type,
                body: &body,
            },
            PodOp::PutStatus => PodWrite::Put { body: &body },
            PodOp::Delete => PodWrite::Delete,
        };
        let capture = Capture {
            by_node_kubelet,
            namespace,
            name,
            write,
            cached_pod: cached.as_deref(),
        };
        let captured = self.overlay.capture(capture, self.cloud());
        if let Captured::Ignored(why) = &captured {
            log::debug!(
                "endpoints overlay: the {} of pod {namespace}/{name} from {} changed nothing: {}",
                op.as_str(),
                req.component,
                ignored_text(why)
            );
        }
        Some(captured)
    }

    /// kubelet's cached pod `namespace/name`, as the route keys kubelet's reads of it.
    fn kubelet_pod(
        &self,
        req: &ApiRequest,
        path: &ResourcePath,
        namespace: &str,
        name: &str,
    ) -> Option<Vec<u8>> {
        let key = ObjectKey {
            collection: collection_key(req.component.valid()?, path),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        };
        match self.store.get(&key) {
            Ok(pod) => pod,
            Err(e) => {
                log::debug!("endpoints overlay: kubelet's pod {namespace}/{name} unread: {e}");
                None
            }
        }
    }
}

/// Why a capture changed nothing, for the debug line.
fn ignored_text(why: &Ignored) -> std::borrow::Cow<'_, str> {
    match why {
        Ignored::Disabled => "the overlay is off".into(),
        Ignored::Online => "a server of the cloud is usable".into(),
        Ignored::NotKubelet => "not the node's kubelet".into(),
        Ignored::NotCached => "kubelet's copy of the pod is not cached".into(),
        Ignored::NotThisPod => "another pod (uid), or not on this node".into(),
        Ignored::Unreadable(detail) => format!("unreadable body: {detail}").into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::classify;
    use crate::requester::{Port, Requester};

    /// `method url` from `ua` on the plain port, with `authorization` if any.
    fn req(method: &str, url: &str, ua: &str, authorization: Option<&str>) -> ApiRequest {
        let mut headers = vec![("User-Agent".to_owned(), ua.to_owned())];
        if let Some(a) = authorization {
            headers.push(("Authorization".to_owned(), a.to_owned()));
        }
        let mut req = classify(method, url, &headers).unwrap();
        req.requester = Requester::new(Port::Plain, authorization, None, "node-1");
        req
    }

    const KUBELET: &str = "kubelet/v1.30.2 (linux/amd64) kubernetes/3c8a5a4";

    #[test]
    fn only_pod_status_writes_and_pod_deletes_are_read() {
        let op = |method: &str, url: &str| {
            pod_write(&req(method, url, KUBELET, None))
                .map(|(op, _, ns, n)| (op, ns.to_owned(), n.to_owned()))
        };
        let status = "/api/v1/namespaces/default/pods/web-a/status";
        assert_eq!(
            op("PATCH", status),
            Some((PodOp::PatchStatus, "default".into(), "web-a".into()))
        );
        assert_eq!(
            op("PUT", status),
            Some((PodOp::PutStatus, "default".into(), "web-a".into()))
        );
        assert_eq!(
            op("DELETE", "/api/v1/namespaces/default/pods/web-a"),
            Some((PodOp::Delete, "default".into(), "web-a".into()))
        );
        for (method, url) in [
            ("PATCH", "/api/v1/namespaces/default/pods/web-a"),
            ("DELETE", status),
            ("POST", "/api/v1/namespaces/default/pods"),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/web-a/ephemeralcontainers",
            ),
            ("PATCH", "/api/v1/nodes/node-1/status"),
            (
                "PATCH",
                "/apis/example.com/v1/namespaces/default/pods/web-a/status",
            ),
            ("GET", "/api/v1/namespaces/default/pods/web-a"),
        ] {
            assert_eq!(op(method, url), None, "{method} {url}");
        }
    }

    /// kubelet's copy of the pod is read where kubelet's reads of it are stored, and a
    /// capture from a client that is not the node's kubelet changes nothing, with the same
    /// body and copy that move the pod when kubelet sends them.
    #[test]
    fn kubelets_cached_pod_is_read_and_only_kubelet_moves_it() {
        use crate::cache::key::CollectionKey;
        use crate::offline::tests::{offline_in, pod, scratch, status_patch};
        use crate::overlay::Captured;

        let dir = scratch("capture");
        let offline = offline_in(&dir);
        let cached = pod("web-a", "ua", "10.244.1.10");
        let key = ObjectKey {
            collection: CollectionKey::new("kubelet", "pods", "v1", ""),
            namespace: Some("default".to_owned()),
            name: "web-a".to_owned(),
        };
        offline.store.put(&key, &cached, Some("41")).unwrap();
        let url = "/api/v1/namespaces/default/pods/web-a/status";
        let body = status_patch("ua", "10.244.1.10", "10.244.1.20");
        let capture = |req: &ApiRequest| {
            let (_, path, namespace, name) = pod_write(req).unwrap();
            let read = offline.kubelet_pod(req, path, namespace, name);
            assert_eq!(read.as_deref(), Some(&cached[..]), "the route's key");
            let write = PodWrite::Patch {
                content_type: "application/strategic-merge-patch+json",
                body: &body,
            };
            let capture = Capture {
                by_node_kubelet: by_node_kubelet(req),
                namespace,
                name,
                write,
                cached_pod: read.as_deref(),
            };
            offline.overlay.capture(capture, offline.cloud())
        };
        let token = req("PATCH", url, KUBELET, Some("Bearer a-pods-token"));
        assert_eq!(capture(&token), Captured::Ignored(Ignored::NotKubelet));
        let snapshot = offline.overlay.snapshot(offline.cloud());
        assert!(!snapshot.active(), "nothing overlaid");
        let kubelet = req("PATCH", url, KUBELET, None);
        assert_eq!(capture(&kubelet), Captured::Applied { changed: true });
        assert!(offline.overlay.snapshot(offline.cloud()).active());
    }

    /// A pod status write refused while a server is healthy by its last probe (one of two
    /// servers failed a connection, or the cloud came back while the write was on its way)
    /// is not read, and overlays nothing; the same write with every server down is.
    #[test]
    fn a_write_refused_while_a_server_is_probed_healthy_captures_nothing() {
        use crate::cache::key::CollectionKey;
        use crate::offline::tests::{offline_in, pod, scratch, status_patch};

        let dir = scratch("capture-online");
        let offline = offline_in(&dir);
        let key = ObjectKey {
            collection: CollectionKey::new("kubelet", "pods", "v1", ""),
            namespace: Some("default".to_owned()),
            name: "web-a".to_owned(),
        };
        let cached = pod("web-a", "ua", "10.244.1.10");
        offline.store.put(&key, &cached, Some("41")).unwrap();
        let kubelet = req(
            "PATCH",
            "/api/v1/namespaces/default/pods/web-a/status",
            KUBELET,
            None,
        );
        let body = status_patch("ua", "10.244.1.10", "10.244.1.20");
        let mut reads = 0;
        let mut read = || {
            reads += 1;
            Ok(body.clone())
        };
        let smp = "application/strategic-merge-patch+json";
        offline.backends.set_healthy(0, true);
        assert_eq!(offline.capture_pod_with(&kubelet, smp, &mut read), None);
        // Suspect after a failed connection, yet healthy by its probe: still not offline.
        offline.backends.report_failure(0);
        assert!(!offline.backends.any_healthy());
        assert_eq!(offline.capture_pod_with(&kubelet, smp, &mut read), None);
        assert!(!offline.overlay.snapshot(offline.cloud()).active());
        offline.backends.set_healthy(0, false);
        assert_eq!(
            offline.capture_pod_with(&kubelet, smp, &mut read),
            Some(Captured::Applied { changed: true })
        );
        assert_eq!(reads, 1, "the body is read only when the overlay gets it");
        assert!(offline.overlay.snapshot(offline.cloud()).active());
    }

    /// A pod's token with kubelet's User-Agent is not the node, and the node's kube-proxy
    /// is not kubelet: neither is handed to the overlay as kubelet.
    #[test]
    fn only_the_nodes_own_kubelet_is_kubelet() {
        let url = "/api/v1/namespaces/default/pods/web-a/status";
        assert!(by_node_kubelet(&req("PATCH", url, KUBELET, None)));
        assert!(!by_node_kubelet(&req(
            "PATCH",
            url,
            KUBELET,
            Some("Bearer a-pods-token")
        )));
        assert!(!by_node_kubelet(&req(
            "PATCH",
            url,
            "kube-proxy/v1.30.2 (linux/amd64) kubernetes/3c8a5a4",
            None
        )));
    }
}
