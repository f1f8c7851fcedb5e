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
    /// is on; the caller answers 503 whatever happens (a body that cannot be read included).
    /// Why a write changed nothing is logged at debug (the overlay counts it).
    pub(super) fn capture_pod(&self, ex: &mut Exchange<'_>, req: &ApiRequest) {
        if !self.overlay.enabled() {
            return;
        }
        let Some((op, path, namespace, name)) = pod_write(req) else {
            return;
        };
        let content_type = ex.header("Content-Type").unwrap_or("").to_owned();
        // A delete's body (DeleteOptions) says nothing the overlay reads.
        let body = match op {
            PodOp::Delete => Vec::new(),
            PodOp::PatchStatus | PodOp::PutStatus => match read_body(ex, CAPTURE_LIMIT) {
                Ok(body) => body,
                Err(status) => {
                    log::debug!(
                        "endpoints overlay: the {} of pod {namespace}/{name} was not read: {}",
                        op.as_str(),
                        status.message
                    );
                    return;
                }
            },
        };
        let by_node_kubelet = by_node_kubelet(req);
        // kubelet's copy, which its patch is a diff against; read only for kubelet.
        let cached = if by_node_kubelet {
            self.kubelet_pod(req, path, namespace, name)
        } else {
            None
        };
        let write = match op {
            PodOp::PatchStatus => PodWrite::Patch {
                content_type: &content_type,
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
        if let Captured::Ignored(why) = self.overlay.capture(capture, self.backends.recoveries()) {
            log::debug!(
                "endpoints overlay: the {} of pod {namespace}/{name} from {} changed nothing: {}",
                op.as_str(),
                req.component,
                ignored_text(&why)
            );
        }
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
