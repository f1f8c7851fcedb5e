//! kubelet's requests about its pods as kubelet sends them, for the endpoints overlay's tests
//! (issue 30): the running pod the cloud holds, the status patch of kubelet's status manager,
//! a JSON merge patch, the final delete, and the request shape that makes the hub take a
//! request as the node's own kubelet.
//!
//! The status patch is what kubelet 1.30's `statusutil.PatchPodStatus` sends:
//! `CreateTwoWayMergePatch` of `{"metadata":{"uid":U},"status":<cached>}` against
//! `{"metadata":{"uid":U},"status":<new>}`, where `<cached>` is the pod as kubelet just got it
//! from the API (offline: from the hub's cache). The diff here follows the strategic-merge
//! rules for the lists of a pod's status: `conditions` merge by `type`, `podIPs` and
//! `hostIPs` by `ip` (the container statuses have no patch strategy in core/v1: a changed
//! one is sent whole, as any other list); such a list that changed gets a
//! `$setElementOrder/<list>` with every element's key in the new order, its changed and new
//! elements (key plus changed fields), then `{"$patch":"delete", <key>: …}` for each element
//! gone. Maps are diffed field by field (`null` for a field gone); other values are replaced.
//! Keys come out sorted, as Go's encoder writes them.

use serde_json::{Map, Value, json};

use super::hub::{Hub, Reply, call};
use super::util::{rfc3339, unix_now};

/// kubelet's User-Agent.
pub const KUBELET_UA: &str = "kubelet/v1.30.0 (linux/arm) kubernetes/abc";
/// The `Content-Type` of kubelet's status patches.
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// The `Content-Type` of a JSON merge patch (RFC 7386).
pub const MERGE: &str = "application/merge-patch+json";
/// A running pod's condition types, in the order kubelet 1.30 keeps them.
pub const CONDITION_TYPES: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

/// What kubelet reports of one pod: its IPs (the first is `podIP`), Ready, and its phase.
#[derive(Debug, Clone)]
pub struct Reported {
    /// `status.podIPs`, the first also `status.podIP`.
    pub ips: Vec<String>,
    /// The Ready and ContainersReady conditions are `True`.
    pub ready: bool,
    /// `status.phase`.
    pub phase: &'static str,
    /// When the pod's sandbox started (`startTime`, the other conditions' transition time,
    /// the container's `startedAt`).
    pub started: String,
    /// When Ready and ContainersReady took their status.
    pub ready_since: String,
}

impl Reported {
    /// A Running pod at `ip`, Ready or not, started now.
    pub fn running(ip: &str, ready: bool) -> Reported {
        let now = rfc3339(unix_now());
        Reported {
            ips: vec![ip.to_owned()],
            ready,
            phase: "Running",
            started: now.clone(),
            ready_since: now,
        }
    }

    /// This pod after a restart (a new sandbox) at `at`, with IP `ip`, Ready.
    pub fn restarted(&self, ip: &str, at: &str) -> Reported {
        Reported {
            ips: vec![ip.to_owned()],
            ready: true,
            started: at.to_owned(),
            ready_since: at.to_owned(),
            ..self.clone()
        }
    }

    /// This pod with Ready `ready` since `at`, same sandbox and IPs.
    pub fn with_ready(&self, ready: bool, at: &str) -> Reported {
        Reported {
            ready,
            ready_since: at.to_owned(),
            ..self.clone()
        }
    }
}

/// Pod `ns/name` on `node` with label `app=<app>`, as the cloud holds it once kubelet has
/// reported `reported` (node IP 192.168.1.5; one container `c`).
pub fn pod(ns: &str, name: &str, app: &str, node: &str, reported: &Reported) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx:1.27"}]},
        "status": status(reported, "containerd://0001"),
    })
}

/// A pod's `status` with `reported`, its container `c` running as `container_id`.
pub fn status(reported: &Reported, container_id: &str) -> Value {
    let at = &reported.started;
    let truth = |on: bool| if on { "True" } else { "False" };
    let conditions: Vec<Value> = CONDITION_TYPES
        .iter()
        .map(|t| {
            let (on, since) = match *t {
                "Ready" | "ContainersReady" => (reported.ready, &reported.ready_since),
                _ => (true, at),
            };
            json!({"lastProbeTime": null, "lastTransitionTime": since, "status": truth(on),
                   "type": t})
        })
        .collect();
    let ips: Vec<Value> = reported.ips.iter().map(|ip| json!({"ip": ip})).collect();
    json!({
        "conditions": conditions,
        "containerStatuses": [{
            "containerID": container_id, "image": "docker.io/library/nginx:1.27",
            "imageID": "docker.io/library/nginx@sha256:0123", "lastState": {},
            "name": "c", "ready": reported.ready, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": at}},
        }],
        "hostIP": "192.168.1.5",
        "hostIPs": [{"ip": "192.168.1.5"}],
        "phase": reported.phase,
        "podIP": reported.ips.first(),
        "podIPs": ips,
        "qosClass": "BestEffort",
        "startTime": at,
    })
}

/// The strategic merge patch kubelet's status manager sends to turn `cached` (the pod as
/// kubelet got it) into a pod with status `new`: `CreateTwoWayMergePatch` of the two
/// `{"metadata":{"uid"},"status"}` documents.
pub fn status_patch(cached: &Value, new: &Value) -> Vec<u8> {
    let uid = &cached["metadata"]["uid"];
    let old_doc = json!({"metadata": {"uid": uid}, "status": cached["status"]});
    let new_doc = json!({"metadata": {"uid": uid}, "status": new});
    let patch = Value::Object(diff_map(
        old_doc.as_object().expect("an object"),
        new_doc.as_object().expect("an object"),
    ));
    // A patch with no change still names the pod, as kubelet's does.
    let mut patch = patch;
    patch["metadata"] = json!({"uid": uid});
    serde_json::to_vec(&patch).expect("JSON")
}

/// kubelet's status patch after a restart of the pod with `reported` (a new sandbox: a new
/// container ID, its conditions and container state since `reported.started`).
pub fn restarted_patch(cached: &Value, reported: &Reported) -> Vec<u8> {
    status_patch(cached, &status(reported, "containerd://0002"))
}

/// A JSON merge patch (RFC 7386) setting the pod's status to `reported`: `podIP`, `podIPs`,
/// `phase` and the whole `conditions` list (lists are replaced whole in a merge patch).
pub fn merge_patch(cached: &Value, reported: &Reported) -> Vec<u8> {
    let new = status(reported, "containerd://0001");
    let patch = json!({
        "metadata": {"uid": cached["metadata"]["uid"]},
        "status": {"conditions": new["conditions"], "phase": new["phase"],
                   "podIP": new["podIP"], "podIPs": new["podIPs"]},
    });
    serde_json::to_vec(&patch).expect("JSON")
}

/// The `DeleteOptions` of kubelet's final delete of a pod whose containers are gone (grace
/// 0, the pod's uid as precondition).
pub fn final_delete_options(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "DeleteOptions", "apiVersion": "v1",
        "gracePeriodSeconds": 0, "preconditions": {"uid": uid},
    }))
    .expect("JSON")
}

/// The merge key of a list in a pod's status document, if it merges by one.
fn merge_key(list: &str) -> Option<&'static str> {
    match list {
        "conditions" => Some("type"),
        "podIPs" | "hostIPs" => Some("ip"),
        _ => None,
    }
}

/// The two-way strategic merge patch of map `old` to map `new`.
fn diff_map(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in new {
        let before = old.get(key);
        if before == Some(value) {
            continue;
        }
        match (before, value) {
            (Some(Value::Object(a)), Value::Object(b)) => {
                let d = diff_map(a, b);
                if !d.is_empty() {
                    out.insert(key.clone(), Value::Object(d));
                }
            }
            (Some(Value::Array(a)), Value::Array(b)) if merge_key(key).is_some() => {
                let mk = merge_key(key).expect("checked above");
                let (order, elements) = diff_list(a, b, mk);
                if !elements.is_empty() {
                    out.insert(format!("$setElementOrder/{key}"), Value::Array(order));
                    out.insert(key.clone(), Value::Array(elements));
                }
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        out.insert(key.clone(), Value::Null);
    }
    out
}

/// The patch of list `old` to `new`, merged by `mk`: the new order of keys, and the changed,
/// added and deleted elements.
fn diff_list(old: &[Value], new: &[Value], mk: &str) -> (Vec<Value>, Vec<Value>) {
    let key_of = |v: &Value| v.get(mk).cloned().unwrap_or(Value::Null);
    let find = |list: &[Value], k: &Value| list.iter().find(|e| &key_of(e) == k).cloned();
    let order: Vec<Value> = new.iter().map(|e| json!({mk: key_of(e)})).collect();
    let mut elements = Vec::new();
    for element in new {
        let k = key_of(element);
        match (find(old, &k), element) {
            (Some(Value::Object(a)), Value::Object(b)) => {
                let d = diff_map(&a, b);
                if !d.is_empty() {
                    let mut d = d;
                    d.insert(mk.to_owned(), k);
                    elements.push(Value::Object(d));
                }
            }
            _ => elements.push(element.clone()),
        }
    }
    for element in old {
        let k = key_of(element);
        if find(new, &k).is_none() {
            elements.push(json!({"$patch": "delete", mk: k}));
        }
    }
    (order, elements)
}

/// A client of the hub's plain port on the node: by default kubelet as the hub takes it for
/// the node's own (its User-Agent and no credential of its own on the plain port: the
/// node's, as `Requester::is_node` reads it).
pub struct KubeletClient<'a> {
    hub: &'a Hub,
    ua: String,
    authorization: Option<String>,
}

impl<'a> KubeletClient<'a> {
    /// The node's kubelet.
    pub fn node(hub: &'a Hub) -> KubeletClient<'a> {
        KubeletClient {
            hub,
            ua: KUBELET_UA.to_owned(),
            authorization: None,
        }
    }

    /// kubelet's User-Agent with a bearer token of its own (a pod's): not the node.
    pub fn with_token(hub: &'a Hub, token: &str) -> KubeletClient<'a> {
        KubeletClient {
            authorization: Some(format!("Bearer {token}")),
            ..KubeletClient::node(hub)
        }
    }

    /// Another component (`ua`) with the node's credential: the node, but not kubelet.
    pub fn as_component(hub: &'a Hub, ua: &str) -> KubeletClient<'a> {
        KubeletClient {
            ua: ua.to_owned(),
            ..KubeletClient::node(hub)
        }
    }

    fn send(&self, method: &str, path: &str, content_type: &str, body: Option<&[u8]>) -> Reply {
        let mut headers = vec![("Accept", "application/json")];
        if body.is_some() {
            headers.push(("Content-Type", content_type));
        }
        if let Some(a) = &self.authorization {
            headers.push(("Authorization", a));
        }
        call(
            method,
            &format!("{}{path}", self.hub.url()),
            &self.ua,
            &headers,
            body,
        )
    }

    /// kubelet's list of its pods (`fieldSelector=spec.nodeName=<node>`).
    pub fn list_pods(&self, node: &str) -> Reply {
        self.send(
            "GET",
            &format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}&limit=500"),
            "",
            None,
        )
    }

    /// The status manager's GET of pod `ns/name` before it patches.
    pub fn get_pod(&self, ns: &str, name: &str) -> Reply {
        self.send(
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods/{name}"),
            "",
            None,
        )
    }

    /// `PATCH /api/v1/namespaces/<ns>/pods/<name>/status` with `body` of `content_type`.
    pub fn patch_status(&self, ns: &str, name: &str, content_type: &str, body: &[u8]) -> Reply {
        self.send(
            "PATCH",
            &format!("/api/v1/namespaces/{ns}/pods/{name}/status"),
            content_type,
            Some(body),
        )
    }

    /// kubelet's final delete of pod `ns/name` with uid `uid`.
    pub fn delete_pod(&self, ns: &str, name: &str, uid: &str) -> Reply {
        self.send(
            "DELETE",
            &format!("/api/v1/namespaces/{ns}/pods/{name}"),
            "application/json",
            Some(&final_delete_options(uid)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ip_change_is_patched_as_kubelet_does() {
        let old =
            Reported::running("10.244.1.10", true).restarted("10.244.1.10", "2026-12-01T10:00:00Z");
        let mut cached = pod("app", "web-a", "web", "edge-1", &old);
        cached["metadata"]["uid"] = json!("u-1");
        let new = old.restarted("10.244.1.20", "2026-12-06T10:00:00Z");
        let patch: Value = serde_json::from_slice(&restarted_patch(&cached, &new)).unwrap();
        let status = &patch["status"];
        assert_eq!(patch["metadata"], json!({"uid": "u-1"}));
        assert_eq!(status["podIP"], "10.244.1.20");
        assert_eq!(
            status["podIPs"],
            json!([{"ip": "10.244.1.20"}, {"$patch": "delete", "ip": "10.244.1.10"}])
        );
        assert_eq!(
            status["$setElementOrder/podIPs"],
            json!([{"ip": "10.244.1.20"}])
        );
        assert_eq!(
            status["$setElementOrder/conditions"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        // Every condition changed its transition time only: no status in the elements.
        assert_eq!(
            status["conditions"][2],
            json!({"lastTransitionTime": "2026-12-06T10:00:00Z", "type": "Ready"})
        );
        assert!(status.get("hostIP").is_none());
    }

    #[test]
    fn a_readiness_flip_names_the_two_conditions_with_their_status() {
        let old = Reported::running("10.244.1.11", true);
        let cached = pod("app", "web-b", "web", "edge-1", &old);
        let new = old.with_ready(false, "2030-01-01T00:00:00Z");
        let patch: Value =
            serde_json::from_slice(&status_patch(&cached, &status(&new, "containerd://0001")))
                .unwrap();
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        let types: Vec<&Value> = conditions.iter().map(|c| &c["type"]).collect();
        assert_eq!(types, ["Ready", "ContainersReady"]);
        assert_eq!(
            conditions[0],
            json!({"lastTransitionTime": "2030-01-01T00:00:00Z", "status": "False", "type": "Ready"})
        );
        assert!(patch["status"].get("podIPs").is_none());
    }

    #[test]
    fn a_changed_container_status_is_sent_whole() {
        let old = Reported::running("10.244.1.11", true);
        let cached = pod("app", "web-b", "web", "edge-1", &old);
        let new = status(
            &old.with_ready(false, "2030-01-01T00:00:00Z"),
            "containerd://0001",
        );
        let patch: Value = serde_json::from_slice(&status_patch(&cached, &new)).unwrap();
        assert_eq!(
            patch["status"]["containerStatuses"],
            new["containerStatuses"]
        );
        assert!(
            patch["status"]
                .get("$setElementOrder/containerStatuses")
                .is_none()
        );
    }
}
