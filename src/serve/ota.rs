//! YurtHub's OTA endpoints on the serve port (`pkg/yurthub/otaupdate/ota.go`, issue 31):
//! `POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade` and `…/imagepull`, which
//! yurt-manager's OTA DaemonSet upgrades leave to the node (a user, or a tool on the node,
//! calls them).
//!
//! Both read the pod from a healthy cloud server as the hub, and act only on a pod of this
//! node that the cloud marked for an update (condition `PodNeedUpgrade` True, its message
//! `controllerrevision: <hash>` naming the next revision):
//! - `upgrade` deletes a DaemonSet's pod, so the DaemonSet brings the new revision; when
//!   the image pre-pull has run (condition `PodImageReady`), only once it is True for that
//!   revision.
//! - `imagepull` sets `PodImageReady` False for that revision with a merge patch of the
//!   pod's status, which yurt-manager's image pre-pull controller acts on.
//!
//! The status codes and words are YurtHub's; where YurtHub writes them as plain text, the
//! refusals here are Kubernetes `Status` JSON. A static pod (owner `Node`, a YurtStaticSet's)
//! gets YurtHub's ConfigMap check, then 501: YurtHub rewrites its manifest on the node
//! through node-servant, which tinyhub does not carry. Nothing here is cached or written to
//! disk; offline (no healthy server) both answer 503, as YurtHub's.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cloud_error::UpstreamError;
use crate::health::Backends;
use crate::logging::rfc3339;
use crate::names::{is_dns_label, is_dns_subdomain};
use crate::request::Verb;
use crate::server::Exchange;
use crate::status::Status;
use crate::unix_now;
use crate::upstream::{Exchanged, Upstream};

/// Time each request to the cloud may take.
const CLOUD_TIMEOUT: Duration = Duration::from_secs(10);

/// The condition yurt-manager sets True on a pod that has a newer revision to go to, its
/// message `controllerrevision: <hash>`.
const NEED_UPGRADE: &str = "PodNeedUpgrade";

/// The condition of the image pre-pull: False asks for it, True says it is done, each for
/// the revision its message names.
const IMAGE_READY: &str = "PodImageReady";

/// What the two conditions' messages put before the revision's hash.
const VERSION_PREFIX: &str = "controllerrevision: ";

/// The field manager of the pre-pull's status patch, YurtHub's.
const FIELD_MANAGER: &str = "yurthub-ota";

/// What YurtStaticSet's ConfigMap of a static pod's manifest is named after.
const STATIC_SET_PREFIX: &str = "yurt-static-set-";

/// One of the two endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// `…/upgrade`: delete the pod so its DaemonSet brings the next revision.
    Upgrade,
    /// `…/imagepull`: ask for the next revision's images to be pulled.
    ImagePull,
}

impl Action {
    /// The path's last segment.
    fn as_str(self) -> &'static str {
        match self {
            Action::Upgrade => "upgrade",
            Action::ImagePull => "imagepull",
        }
    }
}

/// The pod an OTA path names, and what to do with it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target<'a> {
    action: Action,
    namespace: &'a str,
    pod: &'a str,
}

impl Target<'_> {
    /// `ns/name`, as YurtHub's messages name the pod.
    fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }

    /// The pod's path on the apiserver.
    fn pod_path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods/{}", self.namespace, self.pod)
    }
}

/// The target of `/openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade` or `…/imagepull`
/// with non-empty segments (YurtHub's OTA endpoints, whatever the names say), its names
/// unchecked; None for any other path.
pub(super) fn target_of(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.split('/').collect();
    let [
        "",
        "openyurt.io",
        "v1",
        "namespaces",
        namespace,
        "pods",
        pod,
        action,
    ] = parts[..]
    else {
        return None;
    };
    let action = match action {
        "upgrade" => Action::Upgrade,
        "imagepull" => Action::ImagePull,
        _ => return None,
    };
    (!namespace.is_empty() && !pod.is_empty()).then_some(Target {
        action,
        namespace,
        pod,
    })
}

/// 400 when the path's names are not names the apiserver could hold: a namespace that is
/// no RFC 1123 label, or a pod name that is no RFC 1123 subdomain (the apiserver's rules,
/// [`crate::names`]). So what goes to the cloud is always one pod's path.
fn check_names(target: &Target<'_>) -> Result<(), Status> {
    if !is_dns_label(target.namespace) {
        return Err(Status::bad_request(format!(
            "invalid namespace {:?}: a lowercase RFC 1123 label must consist of lower case \
             alphanumeric characters or '-', and must start and end with an alphanumeric \
             character",
            target.namespace
        )));
    }
    if !is_dns_subdomain(target.pod) {
        return Err(Status::bad_request(format!(
            "invalid pod name {:?}: a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
             character",
            target.pod
        )));
    }
    Ok(())
}

/// The pod's condition of type `kind`, if any.
fn condition<'p>(pod: &'p Value, kind: &str) -> Option<&'p Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// A condition's text field (`status`, `reason`, `message`), "" when absent.
fn field<'c>(condition: &'c Value, name: &str) -> &'c str {
    condition[name].as_str().unwrap_or("")
}

/// The revision the pod is to go to: `PodNeedUpgrade`'s message without its prefix, ""
/// without the condition (YurtHub's `GetPodNextHashVersion`).
fn next_revision(pod: &Value) -> &str {
    condition(pod, NEED_UPGRADE).map_or("", |c| {
        let message = field(c, "message");
        message.strip_prefix(VERSION_PREFIX).unwrap_or(message)
    })
}

/// Why the pod may not be updated from this node, or None when it may (YurtHub's
/// `checkPodStatus`): it is being deleted, runs on another node, or has no pending update.
fn why_not_updatable(pod: &Value, node: &str) -> Option<String> {
    let id = pod_id(pod);
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return Some(format!("Pod {id} is deleting, can not be updated"));
    }
    let runs_on = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if runs_on != node {
        return Some(format!(
            "Pod: {id} is running on {runs_on}, can not be updated"
        ));
    }
    let pending = condition(pod, NEED_UPGRADE).is_some_and(|c| field(c, "status") == "True");
    if !pending {
        return Some(format!(
            "Pod: {id} update status is False, can not be updated"
        ));
    }
    None
}

/// Why the next revision's images are not ready, or None when they are or no pre-pull was
/// asked (YurtHub's `checkPodImageReady`): `PodImageReady`, when present, must be True
/// and name the next revision.
fn why_image_not_ready(pod: &Value) -> Option<String> {
    let c = condition(pod, IMAGE_READY)?;
    let message = field(c, "message");
    let ready = field(c, "status") == "True"
        && message.strip_prefix(VERSION_PREFIX).unwrap_or(message) == next_revision(pod);
    (!ready).then(|| {
        format!(
            "Pod: {} image is not ready, reason: {}, message: {message}",
            pod_id(pod),
            field(c, "reason"),
        )
    })
}

/// The pod's `namespace/name` as its metadata says.
fn pod_id(pod: &Value) -> String {
    let meta = &pod["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("")
    )
}

/// The kind of the pod's first owner (YurtHub reads the first only), None without owners.
fn owner_kind(pod: &Value) -> Option<&str> {
    let first = pod["metadata"]["ownerReferences"].as_array()?.first()?;
    Some(first["kind"].as_str().unwrap_or(""))
}

/// The YurtStaticSet's name of a static pod (`<name>-<node>`), None when the pod's name
/// does not end with `-<node>` (YurtHub's `RemoveNodeNameFromStaticPod`: what comes before
/// the first `-<node>`).
fn static_set_name<'a>(pod: &'a str, node: &str) -> Option<&'a str> {
    let suffix = format!("-{node}");
    if !pod.ends_with(&suffix) {
        return None;
    }
    pod.split(suffix.as_str()).next()
}

/// The merge patch of the pod's status that asks for the next revision's images: its
/// conditions, with `PodImageReady` set False for that revision (YurtHub's
/// `UpdatePodCondition`: a new condition, its transition time `now` unless it was False
/// already; reason and probe time cleared). A merge patch replaces the whole list, so the
/// other conditions go as they came.
fn image_pull_patch(pod: &Value, now: &str) -> Value {
    let mut conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let old = conditions.iter().position(|c| c["type"] == IMAGE_READY);
    let transition = match old.map(|i| &conditions[i]) {
        Some(c) if field(c, "status") == "False" => c["lastTransitionTime"].clone(),
        _ => Value::from(now),
    };
    let wanted = json!({
        "type": IMAGE_READY,
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": transition,
        "message": format!("{VERSION_PREFIX}{}", next_revision(pod)),
    });
    match old {
        Some(i) => conditions[i] = wanted,
        None => conditions.push(wanted),
    }
    json!({"status": {"conditions": conditions}})
}

/// Why a request to the cloud did not succeed.
enum CloudFailure {
    /// No answer.
    NoAnswer(UpstreamError),
    /// An answer other than 2xx, with the message of its `Status` when it has one.
    Answered { code: u16, message: Option<String> },
}

impl CloudFailure {
    /// The cloud's answer to `result`: the answer when 2xx, else why not.
    fn check(result: Result<Exchanged, UpstreamError>) -> Result<Exchanged, CloudFailure> {
        let answer = result.map_err(CloudFailure::NoAnswer)?;
        if (200..300).contains(&answer.status) {
            return Ok(answer);
        }
        let message = serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned));
        Err(CloudFailure::Answered {
            code: answer.status,
            message,
        })
    }
}

impl fmt::Display for CloudFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloudFailure::NoAnswer(e) => write!(f, "{e}"),
            CloudFailure::Answered {
                message: Some(message),
                ..
            } => f.write_str(message),
            CloudFailure::Answered {
                code,
                message: None,
            } => write!(f, "the cloud answered {code}"),
        }
    }
}

/// The one OTA call being answered: taken from [`Ota::busy`], given back when dropped.
struct Slot<'a>(&'a AtomicBool);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The OTA endpoints: the hub's client of the cloud, and the node whose pods they update.
pub(crate) struct Ota {
    upstream: Arc<Upstream>,
    node: String,
    /// An OTA call is being answered. One at a time: each may wait twice
    /// [`CLOUD_TIMEOUT`] on a slow cloud, and the serve port's few request slots must stay
    /// free for its health checks.
    busy: AtomicBool,
}

impl Ota {
    /// The endpoints of node `node`, through `upstream` as the hub.
    pub(crate) fn new(upstream: Arc<Upstream>, node: &str) -> Ota {
        Ota {
            upstream,
            node: node.to_owned(),
            busy: AtomicBool::new(false),
        }
    }

    /// The cloud's servers and their health: the ones the endpoints ask, which the serve
    /// port's `/metrics` reports.
    pub(crate) fn backends(&self) -> &Backends {
        self.upstream.backends()
    }

    /// Answers one `POST` on an OTA path (its [`target_of`]): 200 with YurtHub's words, or
    /// a `Status` with YurtHub's code; one log line either way.
    pub(super) fn handle(&self, ex: Exchange<'_>, target: &Target<'_>) {
        let (action, id) = (target.action.as_str(), target.id());
        let _ = match self.answer(target) {
            Ok(text) => {
                log::info!("OTA {action} of pod {id}: {text}");
                let plain = [("Content-Type", "text/plain; charset=utf-8")];
                ex.send(200, &plain, text.as_bytes())
            }
            Err(status) => {
                log::warn!(
                    "OTA {action} of pod {id} refused with {}: {}",
                    status.code,
                    status.message
                );
                ex.send_status(&status)
            }
        };
    }

    /// The answer to `target`: YurtHub's 200 text, or the refusal.
    fn answer(&self, target: &Target<'_>) -> Result<String, Status> {
        check_names(target)?;
        let _slot = self.take_slot()?;
        let base = self.server()?;
        let pod = self.get_pod(&base, target)?;
        match target.action {
            Action::Upgrade => self.upgrade(&base, target, &pod),
            Action::ImagePull => self.image_pull(&base, target, &pod),
        }
    }

    /// The one OTA call's slot; 429 with `Retry-After` (as the serve port's other 429s)
    /// while another call has it.
    fn take_slot(&self) -> Result<Slot<'_>, Status> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| Slot(&self.busy))
            .map_err(|_| {
                Status::too_many_requests(
                    "another OTA upgrade or image pre-pull is being answered; retry shortly",
                    1,
                )
            })
    }

    /// A healthy cloud server's base URL; 503 without one (YurtHub's `HealthyCheck`).
    fn server(&self) -> Result<String, Status> {
        let backends = self.upstream.backends();
        match backends.pick(None, false, 0) {
            Some(i) => Ok(backends.get(i).base.clone()),
            None => Err(Status::service_unavailable(
                "OTA upgrade is not allowed when node is disconnected to cloud",
            )),
        }
    }

    /// `method path` to `base` as the hub.
    fn send(
        &self,
        base: &str,
        method: &str,
        verb: Verb,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Exchanged, CloudFailure> {
        CloudFailure::check(self.upstream.exchange_with(
            base,
            method,
            verb,
            path,
            body,
            CLOUD_TIMEOUT,
        ))
    }

    /// The pod from the cloud; any failure, a 404 included, is 500 (YurtHub's).
    fn get_pod(&self, base: &str, target: &Target<'_>) -> Result<Value, Status> {
        let failed = |why: &dyn fmt::Display| Status::internal(format!("Get pod failed, {why}"));
        let answer = self
            .send(base, "GET", Verb::Get, &target.pod_path(), None)
            .map_err(|e| failed(&e))?;
        let pod: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| failed(&format!("the answer is not JSON: {e}")))?;
        if pod["kind"] != "Pod" {
            return Err(failed(&"the answer is not a Pod"));
        }
        Ok(pod)
    }

    /// `…/upgrade`: the checks (403), then by the first owner's kind: a DaemonSet's pod is
    /// deleted, a static pod is checked and refused with 501, any other is 400.
    fn upgrade(&self, base: &str, target: &Target<'_>, pod: &Value) -> Result<String, Status> {
        let id = target.id();
        let checks = [
            (why_not_updatable(pod, &self.node), "status"),
            (why_image_not_ready(pod), "image ready"),
        ];
        if let Some((why, what)) = checks
            .into_iter()
            .find_map(|(why, what)| why.map(|why| (why, what)))
        {
            return Err(Status::forbidden(format!(
                "Pre check update pod failed, Failed to check pod {id} {what}, error: {why}"
            )));
        }
        match owner_kind(pod) {
            None => Err(Status::bad_request("Pod has no owner references")),
            Some("DaemonSet") => {
                match self.send(base, "DELETE", Verb::Delete, &target.pod_path(), None) {
                    Ok(_) => Ok(format!("Start updating pod {id}")),
                    Err(e) => Err(Status::internal(format!("Apply update failed: {e}"))),
                }
            }
            Some("Node") => self.static_pod(base, target),
            Some(kind) => Err(Status::bad_request(format!(
                "Not support ota upgrade pod type {kind}"
            ))),
        }
    }

    /// A static pod: YurtHub's pre-check (its YurtStaticSet's ConfigMap must exist: 403
    /// when it does not, 500 when it cannot be read or the name is no static pod's), then
    /// 501, since the manifest rewrite is node-servant's.
    fn static_pod(&self, base: &str, target: &Target<'_>) -> Result<String, Status> {
        let pre_check_failed = |why: &dyn fmt::Display| {
            Status::internal(format!("Static pod pre-check failed: {why}"))
        };
        let Some(set) = static_set_name(target.pod, &self.node) else {
            return Err(pre_check_failed(
                &"pod name doesn't meet static pod's format",
            ));
        };
        let path = format!(
            "/api/v1/namespaces/{}/configmaps/{STATIC_SET_PREFIX}{set}",
            target.namespace
        );
        match self.send(base, "GET", Verb::Get, &path, None) {
            Ok(_) => Err(Status::not_implemented(format!(
                "the upgrade of static pod {} (YurtStaticSet {set}) is not supported by \
                 tinyhub: YurtHub rewrites its manifest through node-servant; upgrade it \
                 through the cloud apiserver",
                target.id()
            ))),
            Err(CloudFailure::Answered { code: 404, .. }) => {
                Err(Status::forbidden("Configmap for static pod does not exist"))
            }
            Err(e) => Err(pre_check_failed(&e)),
        }
    }

    /// `…/imagepull`: the status checks (403), then `PodImageReady` False for the next
    /// revision, patched into the pod's status as the hub.
    fn image_pull(&self, base: &str, target: &Target<'_>, pod: &Value) -> Result<String, Status> {
        let id = target.id();
        if let Some(why) = why_not_updatable(pod, &self.node) {
            return Err(Status::forbidden(format!(
                "Failed to check pod status {id}, error: {why}"
            )));
        }
        let patch = image_pull_patch(pod, &rfc3339(unix_now()));
        let path = format!("{}/status?fieldManager={FIELD_MANAGER}", target.pod_path());
        let body = (
            "application/merge-patch+json",
            patch.to_string().into_bytes(),
        );
        match self.send(base, "PATCH", Verb::Patch, &path, Some(body)) {
            Ok(_) => Ok(format!("Image pre-pull requested for pod {id}")),
            Err(e) => Err(Status::internal(format!(
                "Patch pod status for imagepull failed: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod of `node` with `conditions` (type, status, message).
    fn pod(node: &str, conditions: &[(&str, &str, &str)]) -> Value {
        let conditions: Vec<Value> = conditions
            .iter()
            .map(|(kind, status, message)| {
                json!({"type": kind, "status": status, "message": message,
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        json!({
            "kind": "Pod",
            "metadata": {"namespace": "default", "name": "web",
                         "ownerReferences": [{"kind": "DaemonSet", "name": "ds"}]},
            "spec": {"nodeName": node},
            "status": {"conditions": conditions},
        })
    }

    const NEXT: (&str, &str, &str) = (NEED_UPGRADE, "True", "controllerrevision: abc");

    #[test]
    fn ota_paths_are_yurthubs_two_pod_endpoints() {
        for (path, want) in [
            (
                "/openyurt.io/v1/namespaces/default/pods/web/upgrade",
                Some(Action::Upgrade),
            ),
            (
                "/openyurt.io/v1/namespaces/kube-system/pods/p-1/imagepull",
                Some(Action::ImagePull),
            ),
            ("/openyurt.io/v1/namespaces//pods/web/upgrade", None),
            ("/openyurt.io/v1/namespaces/default/pods//upgrade", None),
            ("/openyurt.io/v1/namespaces/default/pods/web/status", None),
            (
                "/openyurt.io/v1/namespaces/default/pods/web/upgrade/x",
                None,
            ),
            ("/api/v1/namespaces/default/pods/web/upgrade", None),
        ] {
            assert_eq!(target_of(path).map(|t| t.action), want, "{path}");
        }
    }

    #[test]
    fn names_must_be_what_the_apiserver_could_hold() {
        fn check(namespace: &str, pod: &str) -> Result<(), (u16, String)> {
            check_names(&Target {
                action: Action::Upgrade,
                namespace,
                pod,
            })
            .map_err(|s| (s.code, s.message))
        }
        assert!(check("kube-system", "node-exporter-x7k2p").is_ok());
        assert!(check("default", "web.v1-0").is_ok());
        for (namespace, pod) in [
            ("Default", "web"),
            ("default", "Web"),
            ("-default", "web"),
            ("default", "web-"),
            ("default", ".."),
            ("default", "web%2Fx"),
            ("kube.system", "web"),
            ("default", "a..b"),
        ] {
            let refused = check(namespace, pod).expect_err(&format!("{namespace}/{pod}"));
            assert_eq!(refused.0, 400, "{namespace}/{pod}");
        }
        assert!(check(&"n".repeat(63), "web").is_ok());
        assert!(check(&"n".repeat(64), "web").is_err());
        assert!(check("default", &vec!["p".repeat(63); 3].join(".")).is_ok());
        // The apiserver limits a pod's name as a whole, not each dot-part.
        assert!(check("default", &"p".repeat(64)).is_ok());
        assert!(check("default", &"p".repeat(253)).is_ok());
        assert!(check("default", &"p".repeat(254)).is_err());
    }

    #[test]
    fn a_pod_is_updatable_on_this_node_with_a_pending_update_only() {
        assert_eq!(why_not_updatable(&pod("edge-1", &[NEXT]), "edge-1"), None);
        let why = |p: &Value| why_not_updatable(p, "edge-1").unwrap_or_default();
        assert_eq!(
            why(&pod("edge-2", &[NEXT])),
            "Pod: default/web is running on edge-2, can not be updated"
        );
        let mut deleting = pod("edge-1", &[NEXT]);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            why(&deleting),
            "Pod default/web is deleting, can not be updated"
        );
        for conditions in [&[][..], &[(NEED_UPGRADE, "False", "")][..]] {
            assert_eq!(
                why(&pod("edge-1", conditions)),
                "Pod: default/web update status is False, can not be updated"
            );
        }
    }

    #[test]
    fn the_image_is_ready_without_a_pre_pull_or_once_pulled_for_the_next_revision() {
        let ready = |image: Option<(&str, &str)>| {
            let mut conditions = vec![NEXT];
            if let Some((status, message)) = image {
                conditions.push((IMAGE_READY, status, message));
            }
            why_image_not_ready(&pod("edge-1", &conditions))
        };
        assert_eq!(ready(None), None);
        assert_eq!(ready(Some(("True", "controllerrevision: abc"))), None);
        let not_ready = ready(Some(("False", "controllerrevision: abc")));
        assert_eq!(
            not_ready.as_deref(),
            Some("Pod: default/web image is not ready, reason: , message: controllerrevision: abc")
        );
        // Pulled, but for another revision.
        assert!(ready(Some(("True", "controllerrevision: old"))).is_some());
    }

    #[test]
    fn the_first_owner_decides_and_a_static_pod_is_named_after_its_node() {
        let mut p = pod("edge-1", &[NEXT]);
        assert_eq!(owner_kind(&p), Some("DaemonSet"));
        p["metadata"]["ownerReferences"] = json!([{"kind": "Node"}, {"kind": "DaemonSet"}]);
        assert_eq!(owner_kind(&p), Some("Node"));
        p["metadata"]["ownerReferences"] = json!([]);
        assert_eq!(owner_kind(&p), None);
        if let Some(meta) = p["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        assert_eq!(owner_kind(&p), None);

        assert_eq!(static_set_name("nginx-edge-1", "edge-1"), Some("nginx"));
        assert_eq!(
            static_set_name("a-edge-1-b-edge-1", "edge-1"),
            Some("a"),
            "before the first -<node>, as YurtHub splits"
        );
        assert_eq!(static_set_name("nginx", "edge-1"), None);
        assert_eq!(static_set_name("nginx-edge-10", "edge-1"), None);
    }

    #[test]
    fn a_cloud_refusal_is_told_by_its_status_message_and_a_success_passes() {
        let answer = |status: u16, body: &[u8]| {
            CloudFailure::check(Ok(Exchanged {
                status,
                body: body.to_vec(),
            }))
        };
        assert!(answer(200, b"{}").is_ok());
        assert!(answer(202, b"").is_ok());
        let not_found = br#"{"kind":"Status","code":404,"message":"pods \"web\" not found"}"#;
        match answer(404, not_found) {
            Err(e @ CloudFailure::Answered { code: 404, .. }) => {
                assert_eq!(e.to_string(), r#"pods "web" not found"#);
            }
            _ => panic!("a 404 is a refusal"),
        }
        let garbage = answer(502, b"<html>").err().map(|e| e.to_string());
        assert_eq!(garbage.as_deref(), Some("the cloud answered 502"));
    }

    #[test]
    fn the_pre_pull_patch_sets_image_ready_false_for_the_next_revision() {
        let now = "2026-12-06T13:00:00Z";
        // No pre-pull yet: the condition is added, the others kept as they came.
        let patch = image_pull_patch(&pod("edge-1", &[NEXT]), now);
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2, "{patch}");
        assert_eq!(conditions[0]["type"], NEED_UPGRADE);
        assert_eq!(conditions[0]["message"], "controllerrevision: abc");
        assert_eq!(
            conditions[1],
            json!({"type": IMAGE_READY, "status": "False", "lastProbeTime": null,
                   "lastTransitionTime": now, "message": "controllerrevision: abc"})
        );
        assert_eq!(patch.as_object().unwrap().len(), 1, "status only: {patch}");

        // A condition of an older pull is replaced in place; one already False keeps its
        // transition time.
        for (status, transition) in [("True", now), ("False", "2026-01-01T00:00:00Z")] {
            let p = pod(
                "edge-1",
                &[(IMAGE_READY, status, "controllerrevision: old"), NEXT],
            );
            let patch = image_pull_patch(&p, now);
            let conditions = patch["status"]["conditions"].as_array().unwrap();
            assert_eq!(conditions.len(), 2, "{patch}");
            assert_eq!(conditions[0]["type"], IMAGE_READY);
            assert_eq!(conditions[0]["status"], "False");
            assert_eq!(conditions[0]["message"], "controllerrevision: abc");
            assert_eq!(conditions[0]["lastTransitionTime"], transition, "{status}");
        }
    }
}
