//! The node Lease object as the hub sends it (YurtHub's `newLease`, YurtHub's
//! `pkg/yurthub/healthchecker/cloudapiserver`).
//!
//! Works on `serde_json::Value` so that fields the hub does not know (kubelet's, a newer
//! API's) survive a renewal untouched; the caller's object is never changed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::protobuf::{open_envelope, try_fields};

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
    stamp_type(&mut lease);
    // Invariant: both arms above give an object.
    let object = lease.as_object_mut().expect("a lease is an object");

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

/// Sets a lease's `apiVersion` and `kind` (an answer of the apiserver may leave them out, and
/// kubelet's answers and the disk copy need them); nothing for a non-object.
pub(crate) fn stamp_type(lease: &mut Value) {
    if let Some(object) = lease.as_object_mut() {
        object.insert("apiVersion".into(), Value::from(LEASE_API_VERSION));
        object.insert("kind".into(), Value::from("Lease"));
    }
}

/// Whether `answer` is a Lease of `node` in the node-lease namespace with a spec: what an
/// apiserver answers a renewal with (a proxy or portal on the way may answer 200 otherwise).
pub(crate) fn is_node_lease(answer: &Value, node: &str) -> bool {
    answer.pointer("/metadata/name").and_then(Value::as_str) == Some(node)
        && answer
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            == Some(LEASE_NAMESPACE)
        && answer.get("spec").is_some_and(Value::is_object)
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

// kubelet creates its lease in protobuf by default; the hub answers that create itself and
// keeps the lease as JSON. Field numbers, read from the sources, not from memory:
// k8s.io/api coordination/v1/generated.proto (Lease {metadata 1, spec 2}, LeaseSpec),
// k8s.io/apimachinery pkg/apis/meta/v1/generated.proto (ObjectMeta, OwnerReference,
// MicroTime {seconds 1 int64, nanos 2 int32}; a map field's entries are {key 1, value 2}),
// and pkg/runtime/generated.proto (Unknown, in `crate::protobuf::open_envelope`).

/// Latest second RFC 3339 can write (9999-12-31T23:59:59Z); Go refuses to marshal later ones.
const LAST_RFC3339_SECOND: u64 = 253_402_300_799;

/// A coordination.k8s.io/v1 Lease in a Kubernetes protobuf body (`k8s\0` + runtime.Unknown
/// of kind Lease or none) as the JSON the apiserver would give for it: apiVersion, kind,
/// metadata {name, namespace, uid, resourceVersion, labels, annotations, ownerReferences},
/// spec {holderIdentity, leaseDurationSeconds, acquireTime, renewTime, leaseTransitions,
/// strategy, preferredHolder}, each only when present (metadata's strings and collections
/// only when not empty, as their `omitempty` says). Other fields are skipped. `None` for
/// another kind, an encoded payload, or a malformed message: a known field of the wrong wire
/// type, a string that is not UTF-8, a time before 1970 or after 9999.
pub(crate) fn lease_from_protobuf(body: &[u8]) -> Option<Value> {
    let raw = open_envelope(body, "Lease")?;
    let mut metadata = Map::new();
    let mut spec = Map::new();
    // A message field given twice merges, as protobuf does.
    try_fields(raw, |n, v| match n {
        1 => proto_object_meta(v.bytes()?, &mut metadata),
        2 => proto_lease_spec(v.bytes()?, &mut spec),
        _ => Some(()),
    })?;
    Some(json!({
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }))
}

/// The ObjectMeta fields a lease needs, into `metadata`.
fn proto_object_meta(message: &[u8], metadata: &mut Map<String, Value>) -> Option<()> {
    try_fields(message, |n, v| {
        match n {
            1 | 3 | 5 | 6 => {
                let key = match n {
                    1 => "name",
                    3 => "namespace",
                    5 => "uid",
                    _ => "resourceVersion",
                };
                // Go writes these strings even when empty; JSON leaves empty ones out.
                let value = v.string()?;
                if value.is_empty() {
                    metadata.remove(key);
                } else {
                    metadata.insert(key.into(), value.into());
                }
            }
            11 | 12 => {
                let (key, value) = proto_map_entry(v.bytes()?)?;
                let map = if n == 11 { "labels" } else { "annotations" };
                object_field(metadata, map).insert(key, value.into());
            }
            13 => {
                let owner = proto_owner_reference(v.bytes()?)?;
                match metadata.get_mut("ownerReferences") {
                    Some(Value::Array(owners)) => owners.push(owner),
                    _ => {
                        metadata.insert("ownerReferences".into(), json!([owner]));
                    }
                }
            }
            _ => {}
        }
        Some(())
    })
}

/// One entry of a `map<string, string>`: {key 1, value 2}, either may be absent (empty).
fn proto_map_entry(message: &[u8]) -> Option<(String, String)> {
    let (mut key, mut value) = (String::new(), String::new());
    try_fields(message, |n, v| {
        match n {
            1 => key = v.string()?,
            2 => value = v.string()?,
            _ => {}
        }
        Some(())
    })?;
    Some((key, value))
}

/// An OwnerReference as JSON: its four strings always (they have no `omitempty`), the two
/// flags when present.
fn proto_owner_reference(message: &[u8]) -> Option<Value> {
    let mut owner = Map::new();
    for key in ["apiVersion", "kind", "name", "uid"] {
        owner.insert(key.into(), Value::from(""));
    }
    try_fields(message, |n, v| {
        let (key, value) = match n {
            5 => ("apiVersion", Value::from(v.string()?)),
            1 => ("kind", Value::from(v.string()?)),
            3 => ("name", Value::from(v.string()?)),
            4 => ("uid", Value::from(v.string()?)),
            6 => ("controller", Value::from(v.number()? != 0)),
            7 => ("blockOwnerDeletion", Value::from(v.number()? != 0)),
            _ => return Some(()),
        };
        owner.insert(key.into(), value);
        Some(())
    })?;
    Some(Value::Object(owner))
}

/// The LeaseSpec fields, into `spec`; all are pointers in Go, so present means set.
fn proto_lease_spec(message: &[u8], spec: &mut Map<String, Value>) -> Option<()> {
    try_fields(message, |n, v| {
        let (key, value) = match n {
            1 => ("holderIdentity", Value::from(v.string()?)),
            2 => ("leaseDurationSeconds", Value::from(v.int32()?)),
            3 => ("acquireTime", proto_micro_time(v.bytes()?)?),
            4 => ("renewTime", proto_micro_time(v.bytes()?)?),
            5 => ("leaseTransitions", Value::from(v.int32()?)),
            6 => ("strategy", Value::from(v.string()?)),
            7 => ("preferredHolder", Value::from(v.string()?)),
            _ => return Some(()),
        };
        spec.insert(key.into(), value);
        Some(())
    })
}

/// A MicroTime {seconds 1, nanos 2} as [`micro_time`] writes it. An empty message is Go's
/// zero time, which its JSON writes as `null`. Times before 1970 (which `micro_time` cannot
/// write and no lease holds), after 9999, or with nanos outside a second are malformed.
fn proto_micro_time(message: &[u8]) -> Option<Value> {
    if message.is_empty() {
        return Some(Value::Null);
    }
    let (mut seconds, mut nanos) = (0u64, 0u64);
    try_fields(message, |n, v| {
        match n {
            1 => seconds = v.number()?,
            2 => nanos = v.number()?,
            _ => {}
        }
        Some(())
    })?;
    // int64 as is; a negative one reads as a huge u64 and is refused with it.
    let seconds = Some(seconds).filter(|s| *s <= LAST_RFC3339_SECOND)?;
    let nanos = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
    let at = UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))?;
    Some(Value::from(micro_time(at)))
}

// The integration tests' encoder, checked here against the decoder it feeds.
#[cfg(test)]
#[allow(unreachable_pub)]
#[path = "../../tests/support/proto_lease.rs"]
pub(super) mod proto_lease;

#[cfg(test)]
mod protobuf_tests {
    use super::*;

    use super::proto_lease::{bytes as b, number as num};

    /// A string field.
    fn s(field: u64, value: &str) -> Vec<u8> {
        b(field, value.as_bytes())
    }

    /// A MicroTime message.
    fn time(seconds: i64, nanos: i32) -> Vec<u8> {
        [num(1, seconds as u64), num(2, i64::from(nanos) as u64)].concat()
    }

    /// The whole body around a Lease message: as Go writes runtime.Unknown, with empty
    /// contentEncoding and contentType last.
    fn body(kind: Option<&str>, lease: &[u8], encoding: &str) -> Vec<u8> {
        let mut type_meta = s(1, "coordination.k8s.io/v1");
        if let Some(kind) = kind {
            type_meta.extend(s(2, kind));
        }
        [
            b"k8s\0".to_vec(),
            b(1, &type_meta),
            b(2, lease),
            s(3, encoding),
            s(4, ""),
        ]
        .concat()
    }

    /// Every field the decoder reads, and some it skips, as Go writes them.
    fn full_lease() -> Vec<u8> {
        let metadata = [
            s(1, "edge-1"),
            s(2, ""),
            s(3, "kube-node-lease"),
            s(4, ""),
            s(5, "lease-uid"),
            s(6, "4242"),
            num(7, 3),
            b(8, &time(1_700_000_000, 0)),
            num(10, 30),
            b(11, &[s(1, "team"), s(2, "edge")].concat()),
            b(11, &s(1, "empty-value")),
            b(12, &[s(1, "note"), s(2, "hi")].concat()),
            b(
                13,
                &[s(1, "Node"), s(3, "edge-1"), s(4, "node-uid"), s(5, "v1")].concat(),
            ),
            b(
                13,
                &[
                    s(5, "apps/v1"),
                    s(1, "Thing"),
                    s(3, "t"),
                    s(4, "t-uid"),
                    num(6, 1),
                    num(7, 0),
                ]
                .concat(),
            ),
            s(14, "a-finalizer"),
            b(17, &s(1, "kubelet")),
        ]
        .concat();
        let spec = [
            s(1, "edge-1"),
            num(2, 40),
            b(3, &time(1_787_047_000, 5_000)),
            b(4, &time(1_787_047_200, 123_456_789)),
            num(5, -1i64 as u64),
            s(6, "OldestEmulationVersion"),
            s(7, "edge-2"),
            s(99, "from a newer API"),
        ]
        .concat();
        [b(1, &metadata), b(2, &spec), s(3, "status from the future")].concat()
    }

    #[test]
    fn every_field_reads_as_the_apiserver_writes_it() {
        let lease = lease_from_protobuf(&body(Some("Lease"), &full_lease(), "")).unwrap();
        assert_eq!(
            lease,
            json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                "metadata":{"name":"edge-1","namespace":"kube-node-lease","uid":"lease-uid",
                    "resourceVersion":"4242",
                    "labels":{"team":"edge","empty-value":""},
                    "annotations":{"note":"hi"},
                    "ownerReferences":[
                        {"apiVersion":"v1","kind":"Node","name":"edge-1","uid":"node-uid"},
                        {"apiVersion":"apps/v1","kind":"Thing","name":"t","uid":"t-uid",
                            "controller":true,"blockOwnerDeletion":false}]},
                "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40,
                    "acquireTime":"2026-08-18T09:56:40.000005Z",
                    "renewTime":"2026-08-18T10:00:00.123456Z",
                    "leaseTransitions":-1,"strategy":"OldestEmulationVersion",
                    "preferredHolder":"edge-2"}})
        );
        // What new_lease needs of it: a base to renew, its owner already named.
        assert!(has_owner_references(&lease));
    }

    #[test]
    fn a_bare_lease_has_only_what_was_sent() {
        let empty_strings = [s(1, ""), s(3, ""), s(5, ""), s(6, "")].concat();
        let lease = [b(1, &empty_strings), b(2, &b(4, b""))].concat();
        assert_eq!(
            lease_from_protobuf(&body(None, &lease, "")),
            Some(json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                "metadata":{},"spec":{"renewTime":null}}))
        );
        assert_eq!(
            lease_from_protobuf(&body(Some("Lease"), b"", "")),
            Some(json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                "metadata":{},"spec":{}}))
        );
        // A message field given twice merges.
        let twice = [b(1, &s(1, "n")), b(1, &s(3, "ns")), b(2, &num(2, 9))].concat();
        let lease = lease_from_protobuf(&body(Some("Lease"), &twice, "")).unwrap();
        assert_eq!(lease["metadata"], json!({"name":"n","namespace":"ns"}));
        assert_eq!(lease["spec"], json!({"leaseDurationSeconds":9}));
    }

    #[test]
    fn other_kinds_and_encoded_payloads_are_not_leases() {
        let lease = full_lease();
        assert!(lease_from_protobuf(&body(Some("Lease"), &lease, "")).is_some());
        assert_eq!(lease_from_protobuf(&body(Some("Event"), &lease, "")), None);
        assert_eq!(
            lease_from_protobuf(&body(Some("Lease"), &lease, "gzip")),
            None
        );
        // JSON is not this function's business.
        assert_eq!(
            lease_from_protobuf(br#"{"kind":"Lease","metadata":{"name":"n"}}"#),
            None
        );
    }

    #[test]
    fn malformed_fields_refuse_the_whole_lease() {
        let spec = |fields: Vec<u8>| body(Some("Lease"), &b(2, &fields), "");
        let meta = |fields: Vec<u8>| body(Some("Lease"), &b(1, &fields), "");
        for bad in [
            spec(num(1, 7)),                                  // holderIdentity as a varint
            spec(s(2, "40")),                                 // leaseDurationSeconds as bytes
            spec(num(4, 1)),                                  // renewTime as a varint
            spec(b(4, &time(-1, 0))),                         // before 1970
            spec(b(4, &time(253_402_300_800, 0))),            // after 9999
            spec(b(4, &time(0, 1_000_000_000))),              // nanos past a second
            spec(b(4, &time(0, -1))),                         // negative nanos
            spec(b(1, b"\xff\xfe")),                          // not UTF-8
            meta(num(1, 1)),                                  // name as a varint
            meta(b(11, &num(1, 1))),                          // a label's key as a varint
            meta(b(13, &[s(1, "Node"), s(6, "x")].concat())), // controller as bytes
            body(Some("Lease"), &num(1, 5), ""),              // metadata as a varint
        ] {
            assert_eq!(lease_from_protobuf(&bad), None, "{bad:?}");
        }
        // The edges of what a MicroTime holds.
        let at = |seconds, nanos| {
            lease_from_protobuf(&spec(b(4, &time(seconds, nanos)))).unwrap()["spec"]["renewTime"]
                .clone()
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            at(253_402_300_799, 999_999_999),
            "9999-12-31T23:59:59.999999Z"
        );
    }

    #[test]
    fn cut_or_garbled_bodies_never_panic() {
        let whole = body(Some("Lease"), &full_lease(), "");
        let n = whole.len();
        for cut in 0..=n {
            // Only a cut between the envelope's fields after raw leaves a readable body.
            let read = lease_from_protobuf(&whole[..cut]).is_some();
            assert_eq!(read, [n - 4, n - 2, n].contains(&cut), "cut at {cut}");
        }
        // Every byte changed every way: decoded or refused, never a panic.
        let mut read = 0;
        for i in 4..n {
            for byte in [0x00, 0x01, 0x7f, 0x80, 0xff, whole[i] ^ 0x08] {
                let mut garbled = whole.clone();
                garbled[i] = byte;
                read += usize::from(lease_from_protobuf(&garbled).is_some());
            }
        }
        assert!(read > 0, "some changes (inside strings) still read");
        // Noise after the magic.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in 0..2000 {
            let mut noise = b"k8s\0".to_vec();
            for _ in 0..len % 97 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                noise.push(state as u8);
            }
            let _ = lease_from_protobuf(&noise);
        }
    }

    #[test]
    fn the_integration_tests_encoder_gives_kubelets_lease() {
        let body = super::proto_lease::encode_lease(
            "edge-1",
            "kube-node-lease",
            "edge-1",
            40,
            1_787_047_200,
            123_456_000,
            Some("node-uid"),
        );
        assert_eq!(
            lease_from_protobuf(&body),
            Some(json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                "metadata":{"name":"edge-1","namespace":"kube-node-lease",
                    "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"edge-1",
                        "uid":"node-uid"}]},
                "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40,
                    "renewTime":"2026-08-18T10:00:00.123456Z"}}))
        );
        let unowned = super::proto_lease::encode_lease("n", "kube-node-lease", "n", 40, 0, 0, None);
        let lease = lease_from_protobuf(&unowned).unwrap();
        assert!(!has_owner_references(&lease));
        assert_eq!(lease["spec"]["renewTime"], "1970-01-01T00:00:00.000000Z");
    }
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
