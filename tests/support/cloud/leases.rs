//! `coordination.k8s.io/v1` Leases as the kube-apiserver's lease strategy serves them, and
//! the lease fault switches of [`super::Cloud`] (refusals, forced conflicts).
//!
//! Gets, lists, watches, creates, patches and deletes are the generic verbs of `server.rs`;
//! only PUT differs, because the lease strategy allows create-on-update and forbids
//! unconditional updates (`pkg/registry/coordination/lease/strategy.go`): a PUT of a missing
//! lease creates it (201), a PUT without `metadata.resourceVersion` of an existing one is
//! 422 Invalid, a stale one 409 Conflict (the generic store check). Bodies (and merge
//! patches) are checked as decoding and validation would: MicroTimes with exactly six
//! fractional digits, a positive `leaseDurationSeconds`. They are stored as sent (the real
//! one re-renders MicroTimes in UTC; the two agree for the `Z` form clients send).

use std::sync::Arc;

use serde_json::{Value, json};

use super::kinds::{self, KINDS, KindId};
use super::status::ApiError;
use super::store::{Obj, Store, Target};

/// The lease API group.
const GROUP: &str = "coordination.k8s.io";

/// A refusal of lease requests, set by [`super::Cloud::refuse_leases`] and
/// [`super::Cloud::refuse_lease_writes`].
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The status answered.
    pub status: u16,
    /// Only writes (POST, PUT, PATCH, DELETE) are refused; reads pass.
    pub writes_only: bool,
    /// How many more requests are refused; `None` until cleared.
    pub left: Option<usize>,
}

/// Per-instance lease faults.
#[derive(Clone, Debug, Default)]
pub struct LeaseFaults {
    /// The active refusal, if any.
    pub refusal: Option<Refusal>,
    /// The next PUTs of a named lease answered 409 after another writer's update.
    pub conflicts: usize,
}

/// What a request addresses when it is a lease request: namespace and name, each if given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseTarget {
    /// `namespaces/<ns>` of the URL.
    pub ns: Option<String>,
    /// The lease name of the URL.
    pub name: Option<String>,
}

/// The lease a path names (`/apis/coordination.k8s.io/v1[/watch][/namespaces/<ns>]/leases[/<name>]`),
/// `None` for any other path.
pub fn target(path: &str) -> Option<LeaseTarget> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["apis", GROUP, "v1", "watch", rest @ ..] | ["apis", GROUP, "v1", rest @ ..] => rest,
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    match rest {
        ["leases"] => Some(LeaseTarget { ns, name: None }),
        ["leases", name] => Some(LeaseTarget {
            ns,
            name: Some(name.to_string()),
        }),
        _ => None,
    }
}

/// Whether a method writes.
pub fn is_write(method: &str) -> bool {
    matches!(method, "POST" | "PUT" | "PATCH" | "DELETE")
}

/// The authorizer's verb for a request.
fn verb(method: &str, named: bool, watch: bool) -> &'static str {
    match method {
        "GET" if watch => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        _ => "unknown",
    }
}

/// The error a refusal with `status` answers to `user`'s request, worded as the apiserver
/// would: 403 as the Node authorizer denies another node's lease, 429 as the max-in-flight
/// filter, 500 as a failing etcd, 503 as an apiserver shutting down.
pub fn refusal_error(
    status: u16,
    user: &str,
    method: &str,
    watch: bool,
    t: &LeaseTarget,
) -> ApiError {
    let name = t.name.as_deref().unwrap_or("");
    match status {
        403 => {
            let subject = match name {
                "" => format!("leases.{GROUP}"),
                n => format!("leases.{GROUP} \"{n}\""),
            };
            let scope = match &t.ns {
                Some(ns) => format!(" in the namespace \"{ns}\""),
                None => " at the cluster scope".into(),
            };
            ApiError::forbidden(
                format!(
                    "{subject} is forbidden: User \"{user}\" cannot {} resource \"leases\" in API \
                     group \"{GROUP}\"{scope}: can only access node lease with the same name as \
                     the requesting node",
                    verb(method, !name.is_empty(), watch)
                ),
                "leases",
                GROUP,
                name,
            )
        }
        429 => ApiError::with_code(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ApiError::internal("Internal error occurred: etcdserver: request timed out"),
        503 => ApiError::with_code(503, "ServiceUnavailable", "apiserver is shutting down"),
        code => ApiError::with_code(code, "", format!("lease request refused with {code}")),
    }
}

/// The lease kind's id.
pub fn lease_kind() -> KindId {
    kinds::find(GROUP, "v1", "leases").expect("leases are registered")
}

/// 422 for a PUT of an existing lease without `metadata.resourceVersion`, worded as the
/// generic registry words it.
fn rv_required(name: &str) -> ApiError {
    let kind = &KINDS[lease_kind()];
    let cause = "Invalid value: 0x0: must be specified for an update";
    let mut e = ApiError::invalid(
        kind,
        name,
        format!("leases.{GROUP} \"{name}\" is invalid: metadata.resourceVersion: {cause}"),
    );
    if let Some(d) = e.details.as_mut() {
        d["causes"] = json!([{"reason": "FieldValueInvalid", "message": cause,
                               "field": "metadata.resourceVersion"}]);
    }
    e
}

/// A PUT of lease `ns/name` with body `v`: create-on-update (201) when it is missing, 422
/// without a resourceVersion, 409 with a stale one, else the update (200). A `metadata.uid`
/// in the body is a precondition, as the apiserver makes it (`DefaultUpdatedObjectInfo`):
/// 409 when the stored lease has another uid, or none because it is missing (a lease whose
/// Node was deleted is not re-created by a renewal of the old one).
pub fn put(
    store: &Store,
    ns: &str,
    name: &str,
    mut v: Value,
    dry_run: bool,
) -> Result<(u16, Arc<Obj>), ApiError> {
    let id = lease_kind();
    let has_rv = v["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|s| !s.is_empty());
    if !v.is_object() || !v["metadata"].is_object() {
        return Err(ApiError::bad_request(
            "the object must be a JSON object with metadata",
        ));
    }
    // The handler compares names before the storage layer looks at anything.
    let body_name = v["metadata"]["name"].as_str().unwrap_or("");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let stored = store.get(id, ns, name).ok();
    if let Some(uid) = v["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
        let held = stored
            .as_ref()
            .and_then(|o| o.value()["metadata"]["uid"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if held != uid {
            return Err(ApiError::conflict_because(
                &KINDS[id],
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {held}"
                ),
            ));
        }
    }
    if stored.is_none() {
        v["metadata"]["name"] = json!(name);
        // The storage layer clears a resourceVersion the body carries before it creates.
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        return store.create(id, ns, v, dry_run).map(|o| (201, o));
    }
    if !has_rv {
        return Err(rv_required(name));
    }
    store
        .update(id, ns, name, v, Target::Main, dry_run)
        .map(|o| (200, o))
}

/// What a forced conflict does before answering 409: another writer's update of the lease
/// (same content, a new resourceVersion, a MODIFIED event) when it exists.
pub fn forced_conflict(store: &Store, t: &LeaseTarget) -> ApiError {
    let (ns, name) = (
        t.ns.as_deref().unwrap_or(""),
        t.name.as_deref().unwrap_or(""),
    );
    let id = lease_kind();
    let _ = store.touch(id, ns, name);
    ApiError::conflict(&KINDS[id], name)
}

/// Go's `RFC3339Micro` layout, as decoding errors name it.
const MICRO_LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

/// Whether `s` parses with [`MICRO_LAYOUT`] as Go's `time.Parse` does: exactly six
/// fractional digits, then `Z` or a `±hh:mm` offset, fields in range.
fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = b.get(from..from + len)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let date_time = at(4, b'-')
        && at(7, b'-')
        && at(10, b'T')
        && at(13, b':')
        && at(16, b':')
        && at(19, b'.')
        && num(0, 4).is_some()
        && num(5, 2).is_some_and(|m| (1..=12).contains(&m))
        && num(8, 2).is_some_and(|d| (1..=31).contains(&d))
        && num(11, 2).is_some_and(|h| h < 24)
        && num(14, 2).is_some_and(|m| m < 60)
        && num(17, 2).is_some_and(|s| s < 60)
        && num(20, 6).is_some();
    let zone = match b.get(26..) {
        Some(b"Z") => true,
        Some(z) if z.len() == 6 && matches!(z[0], b'+' | b'-') && z[3] == b':' => {
            num(27, 2).is_some_and(|h| h < 24) && num(30, 2).is_some_and(|m| m < 60)
        }
        _ => false,
    };
    date_time && zone
}

/// The checks a Lease body (or a merge patch of one) passes before it is stored: its
/// MicroTimes decode (400 BadRequest, as a decoding error), `spec.leaseDurationSeconds` is
/// positive and `spec.leaseTransitions` not negative (422 Invalid, as validation words it).
pub fn validate(v: &Value) -> Result<(), ApiError> {
    let spec = &v["spec"];
    for field in ["renewTime", "acquireTime"] {
        match &spec[field] {
            Value::Null => {}
            Value::String(s) if is_micro_time(s) => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "Lease in version \"v1\" cannot be handled as a Lease: parsing time {other} \
                     as \"{MICRO_LAYOUT}\": cannot parse {other} as \"{MICRO_LAYOUT}\""
                )));
            }
        }
    }
    let name = v["metadata"]["name"].as_str().unwrap_or("");
    let invalid = |field: &str, value: i64, why: &str| {
        let cause = format!("Invalid value: {value}: {why}");
        let mut e = ApiError::invalid(
            &KINDS[lease_kind()],
            name,
            format!("Lease.{GROUP} \"{name}\" is invalid: {field}: {cause}"),
        );
        if let Some(d) = e.details.as_mut() {
            // Validation names the kind, not the resource.
            d["kind"] = json!("Lease");
            d["causes"] =
                json!([{"reason": "FieldValueInvalid", "message": cause, "field": field}]);
        }
        e
    };
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        return Err(invalid(
            "spec.leaseDurationSeconds",
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        return Err(invalid(
            "spec.leaseTransitions",
            t,
            "must be greater than or equal to 0",
        ));
    }
    Ok(())
}
