//! The stand-in cloud's node leases (issue 15), tested on their own over HTTPS as a lease
//! writer sees them, so the heartbeat tests can trust what they renew against (YurtHub's
//! `pkg/yurthub/healthchecker/cloudapiserver`): resourceVersions and conflicts,
//! create-on-update, the refusal and conflict switches, a Node's deletion, watches of leases.

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::CloudClient;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const HUB_UA: &str = "tinyhub/v0.1.0 (linux/arm) leases";
const KUBELET_UA: &str = "kubelet/v1.30.0 (linux/arm) kubernetes/7c48c2b";

/// A client of the cloud with its own User-Agent, answering status and JSON body.
struct Writer(CloudClient);

impl Writer {
    fn new(cloud: &Cloud, user: &str, ua: &'static str) -> Writer {
        Writer(CloudClient::new(cloud, user).with_user_agent(ua))
    }

    /// One request with a JSON body of `content_type`; the status and the body as JSON.
    fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| b.to_string().into_bytes());
        let reply = self.0.call(method, path, content_type, body.as_deref());
        let v = serde_json::from_slice(&reply.body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", reply.text()));
        (reply.status, v)
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, "application/json", None)
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("POST", path, "application/json", Some(body))
    }

    fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("PUT", path, "application/json", Some(body))
    }
}

fn lease_path(node: &str) -> String {
    format!("{LEASES}/{node}")
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
}

/// The lease tinyhub creates for a fresh node (YurtHub's
/// `pkg/yurthub/healthchecker/cloudapiserver`), owned by Node `uid`.
fn new_lease(node: &str, uid: &str, renew: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": node, "namespace": "kube-node-lease",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                             "name": node, "uid": uid}]},
           "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew}})
}

/// A registered Node and its lease created over HTTP; the lease as created.
fn node_with_lease(cloud: &Cloud, w: &Writer, node: &str) -> Value {
    cloud.node(node, None, &[]);
    let uid = cloud.node_uid(node).expect("the node has a uid");
    let (code, lease) = w.post(
        LEASES,
        &new_lease(node, &uid, "2026-08-18T10:00:00.123456Z"),
    );
    assert_eq!(code, 201, "{lease}");
    lease
}

fn renewed(lease: &Value, renew: &str) -> Value {
    let mut l = lease.clone();
    l["spec"]["renewTime"] = json!(renew);
    l
}

fn assert_status(v: &Value, code: u16, reason: &str) {
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
}

#[test]
fn a_lease_is_created_read_and_renewed_under_optimistic_concurrency() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    assert_eq!(
        w.get(&lease_path("edge-1")).0,
        404,
        "no lease before it is created"
    );

    let uid = {
        cloud.node("edge-1", None, &[]);
        let (code, node) = w.get("/api/v1/nodes/edge-1");
        assert_eq!(code, 200, "{node}");
        node["metadata"]["uid"].as_str().expect("uid").to_string()
    };
    assert!(!uid.is_empty());
    let (code, created) = w.post(
        LEASES,
        &new_lease("edge-1", &uid, "2026-08-18T10:00:00.123456Z"),
    );
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["kind"], "Lease");
    assert_eq!(created["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(created["metadata"]["namespace"], "kube-node-lease");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );
    // MicroTime is kept as sent, to the microsecond.
    assert_eq!(created["spec"]["renewTime"], "2026-08-18T10:00:00.123456Z");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 40);

    let (code, got) = w.get(&lease_path("edge-1"));
    assert_eq!(code, 200);
    assert_eq!(got, created, "a GET answers the lease as created");
    assert_eq!(cloud.lease("edge-1"), Some(created.clone()));

    let r1 = rv(&created);
    let (code, second) = w.put(
        &lease_path("edge-1"),
        &renewed(&created, "2026-08-18T10:00:10.000001Z"),
    );
    assert_eq!(code, 200, "{second}");
    assert!(rv(&second) > r1, "an update gets a newer resourceVersion");
    assert_eq!(second["spec"]["renewTime"], "2026-08-18T10:00:10.000001Z");
    assert_eq!(second["metadata"]["uid"], created["metadata"]["uid"]);

    // The first lease's resourceVersion is stale now.
    let (code, status) = w.put(
        &lease_path("edge-1"),
        &renewed(&created, "2026-08-18T10:00:20.000000Z"),
    );
    assert_eq!(code, 409);
    assert_status(&status, 409, "Conflict");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"edge-1\": the object has \
         been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(status["details"]["name"], "edge-1");
    assert_eq!(status["details"]["group"], "coordination.k8s.io");
    assert_eq!(status["details"]["kind"], "leases");
    assert_eq!(
        cloud.lease("edge-1").expect("lease")["spec"]["renewTime"],
        "2026-08-18T10:00:10.000001Z",
        "a refused update changes nothing"
    );

    // Creating it again is AlreadyExists, not a Conflict.
    let (code, status) = w.post(
        LEASES,
        &new_lease("edge-1", &uid, "2026-08-18T10:00:30.000000Z"),
    );
    assert_eq!(code, 409);
    assert_status(&status, 409, "AlreadyExists");
    assert_eq!(
        status["message"],
        "leases.coordination.k8s.io \"edge-1\" already exists"
    );
}

#[test]
fn a_put_without_resource_version_is_invalid_and_a_put_of_a_missing_lease_creates_it() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    // The lease strategy allows create-on-update: a PUT of a missing lease creates it, even
    // with a resourceVersion from a deleted one.
    let mut body = new_lease("edge-1", "uid-1", "2026-08-18T10:00:00.000000Z");
    body["metadata"]["resourceVersion"] = json!("12345");
    let (code, created) = w.put(&lease_path("edge-1"), &body);
    assert_eq!(code, 201, "{created}");
    assert_ne!(created["metadata"]["resourceVersion"], "12345");
    assert!(cloud.lease("edge-1").is_some());

    // It forbids unconditional updates: no resourceVersion on an existing lease is 422.
    let mut body = renewed(&created, "2026-08-18T10:00:10.000000Z");
    body["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    let (code, status) = w.put(&lease_path("edge-1"), &body);
    assert_eq!(code, 422);
    assert_status(&status, 422, "Invalid");
    assert_eq!(
        status["message"],
        "leases.coordination.k8s.io \"edge-1\" is invalid: metadata.resourceVersion: Invalid \
         value: 0x0: must be specified for an update"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    assert_eq!(
        cloud.lease("edge-1").expect("lease")["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"],
        "nothing was written"
    );

    // A name in the body other than the URL's is refused.
    let (code, status) = w.put(&lease_path("edge-2"), &body);
    assert_eq!(code, 400, "{status}");
    assert!(cloud.lease("edge-2").is_none());
}

#[test]
fn leases_are_patched_as_json_merge_and_deleted() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    let lease = node_with_lease(&cloud, &w, "edge-1");
    let path = lease_path("edge-1");

    let patch = json!({"spec": {"renewTime": "2026-08-18T10:00:10.000000Z"}});
    let (code, merged) = w.call("PATCH", &path, "application/merge-patch+json", Some(&patch));
    assert_eq!(code, 200, "{merged}");
    assert!(rv(&merged) > rv(&lease));
    assert_eq!(merged["spec"]["renewTime"], "2026-08-18T10:00:10.000000Z");
    assert_eq!(
        merged["spec"]["holderIdentity"], "edge-1",
        "other fields are kept"
    );

    let patch = json!({"spec": {"renewTime": "2026-08-18T10:00:20.000000Z",
                                "leaseDurationSeconds": 50}});
    let ct = "application/strategic-merge-patch+json";
    let (code, strategic) = w.call("PATCH", &path, ct, Some(&patch));
    assert_eq!(code, 200, "{strategic}");
    assert!(rv(&strategic) > rv(&merged));
    assert_eq!(strategic["spec"]["leaseDurationSeconds"], 50);

    // A resourceVersion in the patch is a precondition.
    let patch = json!({"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                       "spec": {"renewTime": "2026-08-18T10:00:30.000000Z"}});
    let (code, status) = w.call("PATCH", &path, "application/merge-patch+json", Some(&patch));
    assert_eq!(code, 409);
    assert_status(&status, 409, "Conflict");

    let (code, gone) = w.call("DELETE", &path, "application/json", None);
    assert_eq!(code, 200, "{gone}");
    assert_eq!(gone["metadata"]["name"], "edge-1");
    assert_eq!(w.get(&path).0, 404);
    assert!(cloud.lease("edge-1").is_none());
    let (code, status) = w.call("PATCH", &path, "application/merge-patch+json", Some(&patch));
    assert_eq!(code, 404);
    assert_status(&status, 404, "NotFound");
}

#[test]
fn lease_writes_can_be_refused_for_a_while_then_pass_again() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    let lease = node_with_lease(&cloud, &w, "edge-1");
    let path = lease_path("edge-1");

    cloud.refuse_lease_writes(403, Some(2));
    for i in 0..2 {
        let (code, status) = w.put(&path, &renewed(&lease, "2026-08-18T10:00:10.000000Z"));
        assert_eq!(code, 403, "write {i}");
        assert_status(&status, 403, "Forbidden");
        assert_eq!(
            status["message"],
            "leases.coordination.k8s.io \"edge-1\" is forbidden: User \"system:node:edge-1\" \
             cannot update resource \"leases\" in API group \"coordination.k8s.io\" in the \
             namespace \"kube-node-lease\": can only access node lease with the same name as \
             the requesting node"
        );
        assert_eq!(status["details"]["kind"], "leases");
        // Reads are not refused.
        assert_eq!(w.get(&path).0, 200);
    }
    assert_eq!(
        cloud.lease("edge-1"),
        Some(lease.clone()),
        "no refused write landed"
    );
    let (code, after) = w.put(&path, &renewed(&lease, "2026-08-18T10:00:10.000000Z"));
    assert_eq!(code, 200, "the third write passes: {after}");

    // Every lease request, until cleared; other kinds are served.
    cloud.refuse_leases(500, None);
    for _ in 0..3 {
        let (code, status) = w.get(&path);
        assert_eq!(code, 500);
        assert_status(&status, 500, "InternalError");
        assert_eq!(
            w.put(&path, &renewed(&after, "2026-08-18T10:00:20.000000Z"))
                .0,
            500
        );
    }
    assert_eq!(w.get("/api/v1/nodes/edge-1").0, 200);
    assert_eq!(cloud.lease("edge-1"), Some(after.clone()));
    cloud.clear_lease_refusals();
    assert_eq!(w.get(&path).0, 200);
    let (code, third) = w.put(&path, &renewed(&after, "2026-08-18T10:00:20.000000Z"));
    assert_eq!(code, 200, "{third}");
    assert_eq!(
        cloud.lease("edge-1").expect("lease")["spec"]["renewTime"],
        "2026-08-18T10:00:20.000000Z"
    );
}

#[test]
fn a_forced_conflict_is_another_writers_update_and_a_fresh_get_recovers() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    let lease = node_with_lease(&cloud, &w, "edge-1");
    let path = lease_path("edge-1");

    cloud.conflict_leases(2);
    let mut held = lease.clone();
    for i in 0..2 {
        let (code, status) = w.put(&path, &renewed(&held, "2026-08-18T10:00:10.000000Z"));
        assert_eq!(code, 409, "PUT {i}");
        assert_status(&status, 409, "Conflict");
        // The other writer moved the resourceVersion on; the content is what it was.
        let (code, fresh) = w.get(&path);
        assert_eq!(code, 200);
        assert!(rv(&fresh) > rv(&held), "PUT {i}: {fresh}");
        assert_eq!(fresh["spec"], lease["spec"]);
        held = fresh;
    }
    let (code, ok) = w.put(&path, &renewed(&held, "2026-08-18T10:00:10.000000Z"));
    assert_eq!(code, 200, "the conflicts are used up: {ok}");
    assert_eq!(ok["spec"]["renewTime"], "2026-08-18T10:00:10.000000Z");
}

#[test]
fn deleting_a_node_makes_it_404_and_collects_the_lease_it_owns() {
    let cloud = Cloud::start();
    let admin = Writer::new(&cloud, "kubernetes-admin", KUBELET_UA);
    node_with_lease(&cloud, &admin, "edge-1");
    node_with_lease(&cloud, &admin, "edge-2");
    // A lease without an owner is not collected.
    let (code, _) = admin.post(
        LEASES,
        &json!({"metadata": {"name": "orphan"},
                                              "spec": {"holderIdentity": "orphan"}}),
    );
    assert_eq!(code, 201);

    let (code, gone) = admin.call("DELETE", "/api/v1/nodes/edge-1", "application/json", None);
    assert_eq!(code, 200, "{gone}");
    let (code, status) = admin.get("/api/v1/nodes/edge-1");
    assert_eq!(code, 404);
    assert_status(&status, 404, "NotFound");
    assert_eq!(status["message"], "nodes \"edge-1\" not found");
    assert!(cloud.node_uid("edge-1").is_none());
    assert_eq!(
        admin.get(&lease_path("edge-1")).0,
        404,
        "the owned lease went"
    );
    assert!(cloud.lease("edge-2").is_some());
    assert!(cloud.lease("orphan").is_some());

    // A node registered again under the same name is a new object.
    cloud.node("edge-1", None, &[]);
    let uid = cloud.node_uid("edge-1").expect("registered again");
    assert_ne!(Some(uid.as_str()), gone["metadata"]["uid"].as_str());
}

#[test]
fn a_lease_watch_sees_creation_renewals_and_deletion() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    cloud.node("edge-1", None, &[]);
    let watcher = CloudClient::new(&cloud, "kubernetes-admin");
    // The stream ends by itself, so a missing event fails the test instead of hanging it.
    let (code, mut events) = watcher.watch(&format!(
        "{LEASES}?watch=true&timeoutSeconds=20&fieldSelector=metadata.name%3Dedge-1"
    ));
    assert_eq!(code, 200);
    assert!(cloud.wait_for_watchers("leases", 1, std::time::Duration::from_secs(10)));

    let uid = cloud.node_uid("edge-1").expect("uid");
    let (_, created) = w.post(
        LEASES,
        &new_lease("edge-1", &uid, "2026-08-18T10:00:00.000000Z"),
    );
    let ev = events.next_event().expect("ADDED");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"], created);

    let (code, second) = w.put(
        &lease_path("edge-1"),
        &renewed(&created, "2026-08-18T10:00:10.000000Z"),
    );
    assert_eq!(code, 200);
    let ev = events.next_event().expect("MODIFIED");
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(
        ev["object"]["metadata"]["resourceVersion"],
        second["metadata"]["resourceVersion"]
    );
    assert_eq!(
        ev["object"]["spec"]["renewTime"],
        "2026-08-18T10:00:10.000000Z"
    );

    // Another writer's update (a forced conflict) is an event too.
    cloud.conflict_leases(1);
    assert_eq!(w.put(&lease_path("edge-1"), &second).0, 409);
    let ev = events.next_event().expect("MODIFIED by the other writer");
    assert_eq!(ev["type"], "MODIFIED");
    assert!(rv(&ev["object"]) > rv(&second));

    cloud.delete("nodes", "", "edge-1");
    let ev = events.next_event().expect("DELETED by the collector");
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(ev["object"]["metadata"]["name"], "edge-1");
}

#[test]
fn kube_node_lease_is_listed_and_lease_writes_are_counted_by_user_agent() {
    let cloud = Cloud::start();
    let hub = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    let kubelet = Writer::new(&cloud, "system:node:edge-1", KUBELET_UA);
    let (code, list) = hub.get("/api/v1/namespaces");
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&"kube-node-lease"), "{names:?}");
    assert_eq!(hub.get("/api/v1/namespaces/kube-node-lease").0, 200);

    let lease = node_with_lease(&cloud, &hub, "edge-1");
    let (_, second) = hub.put(
        &lease_path("edge-1"),
        &renewed(&lease, "2026-08-18T10:00:10.000000Z"),
    );
    let (_, third) = kubelet.put(
        &lease_path("edge-1"),
        &renewed(&second, "2026-08-18T10:00:20.000000Z"),
    );
    cloud.refuse_lease_writes(403, Some(1));
    assert_eq!(kubelet.put(&lease_path("edge-1"), &third).0, 403);
    kubelet.get(&lease_path("edge-1"));

    let by_hub = cloud.lease_writes("tinyhub");
    assert_eq!(
        by_hub.iter().map(|r| r.method.as_str()).collect::<Vec<_>>(),
        ["POST", "PUT"]
    );
    assert!(
        by_hub
            .iter()
            .all(|r| r.status == Some(201) || r.status == Some(200))
    );
    let by_kubelet = cloud.lease_writes("kubelet/");
    assert_eq!(
        by_kubelet.iter().map(|r| r.status).collect::<Vec<_>>(),
        [Some(200), Some(403)],
        "refused writes are counted with their status; reads are not"
    );
    assert_eq!(cloud.lease_writes("").len(), 4);
}

#[test]
fn lease_bodies_are_decoded_and_validated_as_the_apiserver_does() {
    let cloud = Cloud::start();
    let w = Writer::new(&cloud, "system:node:edge-1", HUB_UA);
    // MicroTime needs exactly six fractional digits.
    for bad in [
        "2026-08-18T10:00:00Z",
        "2026-08-18T10:00:00.123Z",
        "2026-08-18T10:00:00.123456789Z",
        "2026-08-18 10:00:00.123456Z",
        "2026-13-18T10:00:00.123456Z",
    ] {
        let (code, status) = w.post(LEASES, &new_lease("edge-1", "uid-1", bad));
        assert_eq!(code, 400, "{bad}: {status}");
        assert_status(&status, 400, "BadRequest");
        assert!(
            status["message"].as_str().is_some_and(|m| m.contains(bad)),
            "{status}"
        );
    }
    assert!(cloud.lease("edge-1").is_none());

    let mut zero = new_lease("edge-1", "uid-1", "2026-08-18T10:00:00.123456Z");
    zero["spec"]["leaseDurationSeconds"] = json!(0);
    let (code, status) = w.post(LEASES, &zero);
    assert_eq!(code, 422);
    assert_status(&status, 422, "Invalid");
    assert_eq!(
        status["message"],
        "Lease.coordination.k8s.io \"edge-1\" is invalid: spec.leaseDurationSeconds: Invalid \
         value: 0: must be greater than 0"
    );
    assert_eq!(status["details"]["kind"], "Lease");

    // An offset is a valid MicroTime too; it is kept as sent.
    let (code, lease) = w.post(
        LEASES,
        &new_lease("edge-1", "uid-1", "2026-08-18T12:00:00.123456+02:00"),
    );
    assert_eq!(code, 201, "{lease}");
    assert_eq!(
        lease["spec"]["renewTime"],
        "2026-08-18T12:00:00.123456+02:00"
    );

    // Updates and patches are checked the same way, and nothing is written.
    let (code, _) = w.put(&lease_path("edge-1"), &renewed(&lease, "yesterday"));
    assert_eq!(code, 400);
    let patch = json!({"spec": {"renewTime": "2026-08-18T10:00:10Z"}});
    let (code, _) = w.call(
        "PATCH",
        &lease_path("edge-1"),
        "application/merge-patch+json",
        Some(&patch),
    );
    assert_eq!(code, 400);
    assert_eq!(cloud.lease("edge-1"), Some(lease));
}
