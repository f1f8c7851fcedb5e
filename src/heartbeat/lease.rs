//! The node Lease object as the hub sends it (YurtHub's `newLease`, YURTHUB.md §1.3).
//!
//! Works on `serde_json::Value` so that fields the hub does not know (kubelet's, a newer
//! API's) survive a renewal untouched; the caller's object is never changed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// Namespace of node leases.
pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";

/// `apiVersion` of a Lease.
pub(crate) const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

/// Annotation left by YurtHub's yurt-coordinator era; YurtHub drops it before each renewal.
pub(crate) const DELEGATE_ANNOTATION: &str = "openyurt.io/delegate-heartbeat";

/// Path of the node's lease on an apiserver.
pub(crate) fn lease_path(node: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{node}")
}

/// Path of the Node object on an apiserver.
pub(crate) fn node_path(node: &str) -> String {
    format!("/api/v1/nodes/{node}")
}

/// A point in time as a Kubernetes MicroTime: `2026-08-18T10:00:00.123456Z` (UTC, exactly
/// six fractional digits, as metav1.MicroTime marshals).
pub(crate) fn micro_time(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (year, month, day) = crate::logging::civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// `metadata.uid` of a Node object, when it has one.
pub(crate) fn node_uid(node: &Value) -> Option<&str> {
    node.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())
}

/// Whether the lease already names an owner (then the renewal needs no `GET node`).
pub(crate) fn has_owner_references(lease: &Value) -> bool {
    lease
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| !refs.is_empty())
}

/// The lease to send: a copy of `base` (keeping its resourceVersion for optimistic
/// concurrency and kubelet's holderIdentity/leaseDurationSeconds, without
/// [`DELEGATE_ANNOTATION`]), or from nothing a lease held by `node` for `grace` seconds.
/// Always `spec.renewTime = now`; the Node (`node_uid`) as owner when the lease names none.
/// A `base` that is not a JSON object counts as none.
pub(crate) fn new_lease(
    base: Option<&Value>,
    node: &str,
    grace: Duration,
    now: SystemTime,
    node_uid: Option<&str>,
) -> Value {
    let mut lease = match base.filter(|b| b.is_object()) {
        Some(base) => base.clone(),
        None => json!({
            "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": grace.as_secs()},
        }),
    };
    // Invariant: both arms above give an object.
    let object = lease.as_object_mut().expect("a lease is an object");
    object.insert("apiVersion".into(), Value::from(LEASE_API_VERSION));
    object.insert("kind".into(), Value::from("Lease"));

    let metadata = object_field(object, "metadata");
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(DELEGATE_ANNOTATION);
    }
    let no_owner = metadata
        .get("ownerReferences")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_owner && let Some(uid) = node_uid {
        metadata.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]),
        );
    }

    object_field(object, "spec").insert("renewTime".into(), Value::from(micro_time(now)));
    lease
}

/// The object under `key`, made (or replacing a non-object) when needed.
fn object_field<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    // Invariant: made an object just above.
    slot.as_object_mut().expect("made an object")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, micros: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, micros * 1000)
    }

    #[test]
    fn micro_time_has_six_digits_and_utc() {
        assert_eq!(micro_time(at(0, 0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            micro_time(at(1_787_047_200, 123_456)),
            "2026-08-18T10:00:00.123456Z"
        );
        assert_eq!(micro_time(at(59, 7)), "1970-01-01T00:00:59.000007Z");
    }

    #[test]
    fn a_fresh_lease_is_the_object_yurthub_creates() {
        let lease = new_lease(
            None,
            "edge-1",
            Duration::from_secs(40),
            at(1_787_047_200, 123_456),
            Some("uid-1"),
        );
        assert_eq!(
            lease,
            json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                "metadata":{"name":"edge-1","namespace":"kube-node-lease",
                    "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"edge-1","uid":"uid-1"}]},
                "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40,
                    "renewTime":"2026-08-18T10:00:00.123456Z"}})
        );
        let unowned = new_lease(None, "edge-1", Duration::from_secs(90), at(0, 0), None);
        assert!(!has_owner_references(&unowned));
        assert_eq!(unowned["spec"]["leaseDurationSeconds"], 90);
    }

    #[test]
    fn a_copy_keeps_the_base_and_drops_the_delegate_annotation() {
        let base = json!({"metadata":{"name":"edge-1","namespace":"kube-node-lease",
                "resourceVersion":"42","uid":"l-1",
                "annotations":{"openyurt.io/delegate-heartbeat":"true","keep":"me"},
                "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"edge-1","uid":"old"}]},
            "spec":{"holderIdentity":"kubelet-id","leaseDurationSeconds":55,
                "renewTime":"2020-01-01T00:00:00.000000Z"}});
        let before = base.clone();
        let lease = new_lease(
            Some(&base),
            "edge-1",
            Duration::from_secs(40),
            at(60, 1),
            Some("new"),
        );
        assert_eq!(base, before, "the caller's lease must not change");
        assert_eq!(lease["metadata"]["resourceVersion"], "42");
        assert_eq!(lease["metadata"]["annotations"], json!({"keep": "me"}));
        assert_eq!(lease["spec"]["holderIdentity"], "kubelet-id");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 55);
        assert_eq!(lease["spec"]["renewTime"], "1970-01-01T00:01:00.000001Z");
        // An owner already named stays, even when the uid given differs.
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "old");
        assert_eq!(lease["kind"], "Lease");
        assert_eq!(lease["apiVersion"], "coordination.k8s.io/v1");
    }

    #[test]
    fn an_empty_owner_list_gets_the_node() {
        let base = json!({"metadata":{"name":"n","ownerReferences":[]},"spec":{}});
        let lease = new_lease(
            Some(&base),
            "n",
            Duration::from_secs(40),
            at(0, 0),
            Some("u"),
        );
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "u");
        assert!(has_owner_references(&lease));
    }

    #[test]
    fn odd_bases_do_not_panic() {
        for base in [json!(null), json!([1]), json!({"metadata": 3, "spec": "x"})] {
            let lease = new_lease(Some(&base), "n", Duration::from_secs(40), at(0, 0), None);
            assert_eq!(lease["spec"]["renewTime"], "1970-01-01T00:00:00.000000Z");
            assert_eq!(lease["kind"], "Lease");
        }
    }

    #[test]
    fn node_uid_and_paths() {
        assert_eq!(node_uid(&json!({"metadata":{"uid":"abc"}})), Some("abc"));
        assert_eq!(node_uid(&json!({"metadata":{"uid":""}})), None);
        assert_eq!(node_uid(&json!({})), None);
        assert_eq!(
            lease_path("n1"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        );
        assert_eq!(node_path("n1"), "/api/v1/nodes/n1");
    }
}
