//! kubelet's pod writes applied to a pod as JSON values: the subset of a strategic merge
//! patch that kubelet's status manager writes (`statusutil.PatchPodStatus`:
//! `CreateTwoWayMergePatch` of `{"metadata":{"uid":U},"status":old}` against the new
//! status), a JSON merge patch (RFC 7386), and a PUT's status.
//!
//! The strategic subset covers every field the overlay reads: maps merge recursively and
//! `null` deletes a key; the lists the pod's schema merges by a key (`status.conditions` by
//! `type`, `status.podIPs` and `status.hostIPs` by `ip`, `status.resourceClaimStatuses` by
//! `name`) merge element by element, an element carrying `"$patch":"delete"` is removed, and
//! `$setElementOrder/<list>` gives the order of the elements it names, the others kept where
//! the target had them (order, never membership: only a delete removes); every other list,
//! the container statuses among them (core/v1 gives them no patch strategy), is replaced
//! whole. `$retainKeys` and directives it does not know are ignored. A field it reads wrong
//! keeps a value the cloud once had: never an invented IP.
//!
//! What it does not do: decide which pod a write is for, or read the result (`mod.rs`).

use serde_json::{Map, Value};

/// A PATCH body's format, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
}

impl Format {
    /// The format of `content_type` (parameters such as `charset` ignored); `Err` names a
    /// type the overlay does not read (a JSON patch, an apply patch, protobuf).
    pub(super) fn of(content_type: &str) -> Result<Format, String> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/strategic-merge-patch+json") {
            Ok(Format::Strategic)
        } else if media.eq_ignore_ascii_case("application/merge-patch+json") {
            Ok(Format::Merge)
        } else {
            Err(format!("patch type {media:?} is not read"))
        }
    }
}

/// Applies `patch` in `format` to `target`.
pub(super) fn apply(format: Format, target: &mut Value, patch: &Value) {
    match format {
        Format::Strategic => strategic(target, patch, ""),
        Format::Merge => merge(target, patch),
    }
}

/// RFC 7386: an object merges key by key (`null` deletes), anything else replaces.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(into) = target else {
        return;
    };
    for (key, value) in fields {
        if value.is_null() {
            into.remove(key);
        } else {
            merge(into.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The key the pod's schema merges the list at `path` by (its `patchMergeKey`), for the
/// lists a status patch touches; None: the list is replaced whole.
fn merge_key(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" => Some("type"),
        "status.podIPs" | "status.hostIPs" => Some("ip"),
        "status.resourceClaimStatuses" => Some("name"),
        _ => None,
    }
}

/// The directive prefix of `$setElementOrder/<list>`.
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// A strategic merge of `patch` into `target`, the map at `path` (dotted field names, ""
/// for the object itself).
fn strategic(target: &mut Value, patch: &Value, path: &str) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    match fields.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            // The map replaced by the patch's own fields.
            *target = Value::Object(Map::new());
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(into) = target else {
        return;
    };
    // The keys of each list an order directive names, as the target had them: the order the
    // elements the directive does not name keep.
    let server_orders: Vec<(&str, Vec<Value>)> = fields
        .keys()
        .filter_map(|key| key.strip_prefix(SET_ELEMENT_ORDER))
        .filter_map(|list| {
            let merge_by = merge_key(&join(path, list))?;
            let keys = match into.get(list) {
                Some(Value::Array(elements)) => elements
                    .iter()
                    .filter_map(|e| e.get(merge_by).cloned())
                    .collect(),
                _ => Vec::new(),
            };
            Some((list, keys))
        })
        .collect();
    for (key, value) in fields {
        if key.starts_with('$') {
            // `$patch` is handled above, `$setElementOrder/…` after its list; `$retainKeys`
            // and unknown directives are ignored.
            continue;
        }
        let at = join(path, key);
        match value {
            Value::Null => {
                into.remove(key);
            }
            Value::Object(_) => {
                let slot = into.entry(key.clone()).or_insert(Value::Null);
                strategic(slot, value, &at);
                if slot.is_null() {
                    // `{"$patch":"delete"}` on a map field.
                    into.remove(key);
                }
            }
            Value::Array(elements) => match merge_key(&at) {
                Some(merge_by) => {
                    let slot = into.entry(key.clone()).or_insert(Value::Null);
                    merge_list(slot, elements, merge_by, &at);
                }
                None => {
                    into.insert(key.clone(), Value::Array(strip_all(elements)));
                }
            },
            _ => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
    // `$setElementOrder/<list>` orders a list merged above; a directive without its list in
    // the patch orders the target's list as it is.
    for (list, server) in &server_orders {
        let at = join(path, list);
        if let (Some(merge_by), Some(Value::Array(order))) = (
            merge_key(&at),
            fields.get(&format!("{SET_ELEMENT_ORDER}{list}")),
        ) && let Some(Value::Array(elements)) = into.get_mut(*list)
        {
            set_order(elements, order, server, merge_by);
        }
    }
}

/// The dotted path of field `key` in the map at `path`.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Merges `patch`'s elements into the list `target`, matching elements by `merge_by`.
fn merge_list(target: &mut Value, patch: &[Value], merge_by: &str, path: &str) {
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        // `{"$patch":"replace"}` among the elements: the list is the others.
        let rest: Vec<Value> = patch
            .iter()
            .filter(|e| e.get("$patch").is_none())
            .cloned()
            .collect();
        *target = Value::Array(strip_all(&rest));
        return;
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(elements) = target else {
        return;
    };
    for element in patch {
        let key = element.get(merge_by);
        let at = key.and_then(|k| elements.iter().position(|e| e.get(merge_by) == Some(k)));
        if element.get("$patch").and_then(Value::as_str) == Some("delete") {
            elements.retain(|e| key.is_none() || e.get(merge_by) != key);
            continue;
        }
        match at {
            Some(i) => strategic(&mut elements[i], element, path),
            None => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, element, path);
                elements.push(fresh);
            }
        }
    }
}

/// Orders the merged list `elements` as the apiserver does (apimachinery's
/// `normalizeElementOrder`): the elements `order` names, in its order, and the others (the
/// target's own, which the patch did not name) kept in the target's order `server`, each
/// placed before the first named element the target held after it. The directive gives
/// order, never membership: an element goes only by its `"$patch":"delete"`.
fn set_order(elements: &mut Vec<Value>, order: &[Value], server: &[Value], merge_by: &str) {
    let order: Vec<&Value> = order.iter().filter_map(|o| o.get(merge_by)).collect();
    let server: Vec<&Value> = server.iter().collect();
    let position = |keys: &[&Value], e: &Value| {
        e.get(merge_by)
            .and_then(|k| keys.iter().position(|o| *o == k))
    };
    let (mut named, mut others): (Vec<Value>, Vec<Value>) = std::mem::take(elements)
        .into_iter()
        .partition(|e| position(&order, e).is_some());
    // Stable sorts: an element of neither order stays after the ones ordered.
    named.sort_by_key(|e| position(&order, e).unwrap_or(usize::MAX));
    others.sort_by_key(|e| position(&server, e).unwrap_or(usize::MAX));
    let mut named = named.into_iter().peekable();
    let mut others = others.into_iter().peekable();
    loop {
        let take_other = match (others.peek(), named.peek()) {
            (Some(other), Some(first)) => {
                matches!((position(&server, other), position(&server, first)), (Some(o), Some(f)) if o < f)
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_other {
            others.next()
        } else {
            named.next()
        };
        elements.extend(next);
    }
}

/// The elements of a list the patch replaces, without directives.
fn strip_all(elements: &[Value]) -> Vec<Value> {
    elements.iter().map(strip).collect()
}

/// `value` with its `$` keys and `null` fields removed, as a patch leaves them when it
/// applies to nothing.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(elements) => Value::Array(strip_all(elements)),
        other => other.clone(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// The types of a pod's conditions in the order kubelet keeps them.
    pub(crate) const CONDITION_ORDER: [&str; 5] = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];

    /// A running pod's conditions, all True, in kubelet's order; Ready turned True at
    /// `ready_at`.
    pub(crate) fn conditions(ready_at: &str) -> Value {
        let condition = |kind: &str| match kind {
            "Ready" => json!({"type": kind, "status": "True", "lastTransitionTime": ready_at}),
            _ => json!({"type": kind, "status": "True"}),
        };
        CONDITION_ORDER.iter().map(|kind| condition(kind)).collect()
    }

    /// kubelet's `$setElementOrder/conditions`: every condition type, in its order.
    pub(crate) fn condition_element_order() -> Value {
        CONDITION_ORDER
            .iter()
            .map(|kind| json!({"type": kind}))
            .collect()
    }

    /// The types of `status`'s conditions, in order.
    fn condition_types(status: &Value) -> Vec<&str> {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect()
    }

    fn smp(target: Value, patch: Value) -> Value {
        let mut t = target;
        apply(Format::Strategic, &mut t, &patch);
        t
    }

    fn pod() -> Value {
        json!({
            "metadata": {"uid": "u1", "name": "web-a"},
            "spec": {"nodeName": "n1"},
            "status": {
                "phase": "Running",
                "podIP": "10.244.1.10",
                "podIPs": [{"ip": "10.244.1.10"}, {"ip": "fd00::10"}],
                "hostIPs": [{"ip": "192.168.0.5"}],
                "conditions": conditions("t0"),
                "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0}]
            }
        })
    }

    #[test]
    fn format_of_content_types() {
        assert_eq!(
            Format::of("application/strategic-merge-patch+json; charset=utf-8"),
            Ok(Format::Strategic)
        );
        assert_eq!(
            Format::of("application/merge-patch+json"),
            Ok(Format::Merge)
        );
        for other in [
            "application/json-patch+json",
            "application/apply-patch+yaml",
            "application/vnd.kubernetes.protobuf",
            "",
        ] {
            assert!(Format::of(other).is_err(), "{other}");
        }
    }

    #[test]
    fn kubelets_patch_moves_the_ip_and_keeps_the_other_conditions() {
        let patch = json!({"metadata":{"uid":"u1"},"status":{
            "$setElementOrder/conditions": condition_element_order(),
            "$setElementOrder/podIPs":[{"ip":"10.244.1.20"}],
            "conditions":[{"lastTransitionTime":"t1","status":"False","type":"Ready"}],
            "podIP":"10.244.1.20",
            "podIPs":[{"ip":"10.244.1.20"},{"$patch":"delete","ip":"10.244.1.10"},{"$patch":"delete","ip":"fd00::10"}]}});
        let out = smp(pod(), patch);
        let status = &out["status"];
        assert_eq!(status["podIP"], "10.244.1.20");
        assert_eq!(status["podIPs"], json!([{"ip": "10.244.1.20"}]));
        assert_eq!(condition_types(status), CONDITION_ORDER);
        assert_eq!(
            status["conditions"][2],
            json!({"type": "Ready", "status": "False", "lastTransitionTime": "t1"})
        );
        // Untouched fields stay.
        assert_eq!(status["hostIPs"], json!([{"ip": "192.168.0.5"}]));
        assert_eq!(out["spec"]["nodeName"], "n1");
    }

    #[test]
    fn dual_stack_ips_follow_the_element_order() {
        let patch = json!({"status":{
            "$setElementOrder/podIPs":[{"ip":"10.244.1.20"},{"ip":"fd00::20"}],
            "podIP":"10.244.1.20",
            "podIPs":[{"ip":"10.244.1.20"},{"ip":"fd00::20"},{"$patch":"delete","ip":"10.244.1.10"},{"$patch":"delete","ip":"fd00::10"}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "10.244.1.20"}, {"ip": "fd00::20"}])
        );
        // With no list in the patch, the directive orders the target's list as it is.
        let patch =
            json!({"status":{"$setElementOrder/podIPs":[{"ip":"fd00::10"},{"ip":"10.244.1.10"}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "fd00::10"}, {"ip": "10.244.1.10"}])
        );
    }

    #[test]
    fn the_element_order_gives_order_never_membership() {
        // A patch built against a copy without the IPv6 address: the apiserver keeps the
        // element the directive does not name (only a delete removes one).
        let patch = json!({"status":{
            "$setElementOrder/podIPs":[{"ip":"10.244.1.20"}],
            "podIP":"10.244.1.20",
            "podIPs":[{"ip":"10.244.1.20"},{"$patch":"delete","ip":"10.244.1.10"}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "10.244.1.20"}, {"ip": "fd00::10"}])
        );
        let patch = json!({"status":{"$setElementOrder/podIPs":[{"ip":"fd00::10"}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            out["status"]["podIPs"],
            json!([{"ip": "10.244.1.10"}, {"ip": "fd00::10"}])
        );
        // An unnamed element goes before the first named one the target held after it, as
        // apimachinery's `mergeSortedSlice` places it.
        let patch = json!({"status":{
            "$setElementOrder/conditions":[{"type":"Ready"},{"type":"PodScheduled"},{"type":"Initialized"}],
            "conditions":[{"type":"Ready","status":"False"}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            condition_types(&out["status"]),
            [
                "PodReadyToStartContainers",
                "Ready",
                "ContainersReady",
                "PodScheduled",
                "Initialized"
            ]
        );
    }

    #[test]
    fn container_statuses_are_replaced_whole() {
        // core/v1 gives them no patch strategy: the patch's list is the list.
        let patch = json!({"status":{"containerStatuses":[{"name":"sidecar","ready":false}]}});
        let out = smp(pod(), patch);
        assert_eq!(
            out["status"]["containerStatuses"],
            json!([{"name": "sidecar", "ready": false}])
        );
    }

    #[test]
    fn a_delete_directive_removes_its_element_alone() {
        let patch = json!({"status":{"podIPs":[{"$patch":"delete","ip":"fd00::10"}],
            "conditions":[{"$patch":"delete","type":"PodScheduled"}]}});
        let out = smp(pod(), patch);
        assert_eq!(out["status"]["podIPs"], json!([{"ip": "10.244.1.10"}]));
        let conditions = out["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 4);
        assert!(conditions.iter().all(|c| c["type"] != "PodScheduled"));
    }

    #[test]
    fn null_deletes_and_directives_are_not_stored() {
        let patch = json!({"status":{"podIP": null, "$retainKeys": ["phase"], "$unknown": 1,
            "containerStatuses":[{"name":"sidecar","ready":false,"$patch":"merge"}],
            "nominatedNodeName": {"$patch": "delete"}}});
        let out = smp(pod(), patch);
        assert!(out["status"].get("podIP").is_none());
        assert!(out["status"].get("$retainKeys").is_none());
        assert!(out["status"].get("nominatedNodeName").is_none());
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(
            out["status"]["containerStatuses"],
            json!([{"name": "sidecar", "ready": false}])
        );
    }

    #[test]
    fn unkeyed_lists_are_replaced_whole() {
        let target = json!({"status": {"reasons": ["a", "b"]}});
        let out = smp(target, json!({"status": {"reasons": ["c"]}}));
        assert_eq!(out["status"]["reasons"], json!(["c"]));
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = pod();
        merge(
            &mut t,
            &json!({"status": {"podIP": null, "podIPs": [{"ip": "10.244.1.30"}], "phase": "Failed"}}),
        );
        assert!(t["status"].get("podIP").is_none());
        // Lists are replaced whole, conditions included.
        assert_eq!(t["status"]["podIPs"], json!([{"ip": "10.244.1.30"}]));
        assert_eq!(t["status"]["phase"], "Failed");
        assert_eq!(t["status"]["conditions"].as_array().unwrap().len(), 5);
        // RFC 7386's own example: a non-object patch replaces.
        let mut t = json!({"a": "b"});
        merge(&mut t, &json!(["c"]));
        assert_eq!(t, json!(["c"]));
    }
}
