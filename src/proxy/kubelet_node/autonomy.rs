//! The node's `Autonomy` condition (YurtHub's `pkg/yurthub/proxy/autonomy/autonomy.go`), pure:
//! whether autonomy is on for a node ([`Setting::of`]), the condition wanted at one check
//! ([`want`], with YurtHub's count of checks that found cache keys failing), and the
//! condition set in the node ([`apply`]).
//!
//! | node | condition |
//! |---|---|
//! | autonomy off, or not an edge worker | False "autonomy disabled" |
//! | on, no cache key failing (the count starts again) | True "autonomy enabled successfully" |
//! | on, keys failing at more than 3 checks in a row | Unknown "cache failed", their messages |
//! | on, keys failing at 3 checks or fewer | as it is |
//!
//! Autonomy is on with `node.beta.openyurt.io/autonomy: "true"` (all YurtHub reads) or a
//! `node.openyurt.io/autonomy-duration` Go's `ParseDuration` reads (yurt-manager's other
//! annotation: 0 is unlimited, one it cannot read is off); the label
//! `openyurt.io/is-edge-worker: "false"` turns it off.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Map, Value, json};

/// The annotation YurtHub reads: autonomy on when "true".
pub(crate) const AUTONOMY_ANNOTATION: &str = "node.beta.openyurt.io/autonomy";
/// yurt-manager's annotation: autonomy on for this long after the cloud is lost (0: always).
pub(crate) const DURATION_ANNOTATION: &str = "node.openyurt.io/autonomy-duration";
/// The label that says a node is no edge worker when "false".
pub(crate) const EDGE_WORKER_LABEL: &str = "openyurt.io/is-edge-worker";
/// The condition's type (`apps.openyurt.io/v1beta1` `NodeAutonomy`).
pub(crate) const CONDITION_TYPE: &str = "Autonomy";
/// Checks that may find keys failing before the condition says Unknown (YurtHub's
/// `maxCacheFailures`).
const MAX_CACHE_FAILURES: u32 = 3;

/// Whether autonomy is on for a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    /// Off, or the node is not an edge worker.
    Disabled,
    /// On.
    Enabled,
}

impl Setting {
    /// The setting `node` carries in its annotations and labels.
    pub(crate) fn of(node: &Value) -> Setting {
        let metadata = &node["metadata"];
        let annotation = |name: &str| metadata["annotations"][name].as_str();
        if metadata["labels"][EDGE_WORKER_LABEL].as_str() == Some("false") {
            return Setting::Disabled;
        }
        let flagged = annotation(AUTONOMY_ANNOTATION) == Some("true");
        let lasting = annotation(DURATION_ANNOTATION).is_some_and(is_go_duration);
        if flagged || lasting {
            Setting::Enabled
        } else {
            Setting::Disabled
        }
    }
}

/// `text` is a duration Go's `ParseDuration` accepts. yurt-manager reads a negative one as
/// unlimited, like 0, so a sign does not make it unreadable; Go takes one sign, no more.
fn is_go_duration(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    !unsigned.starts_with(['-', '+']) && crate::config::parse_go_duration(unsigned).is_ok()
}

/// A condition's status, reason and message as YurtHub words them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// "True", "False" or "Unknown".
    pub status: &'static str,
    /// Its reason.
    pub reason: &'static str,
    /// Its message.
    pub message: String,
}

/// The condition wanted at one check of a node with `setting`, while `failing` names the
/// failing cache keys' messages (None when none fails); `checks` counts the checks in a row
/// that found keys failing. None: leave the condition as it is (keys have failed at 3 checks
/// or fewer).
pub(crate) fn want(setting: Setting, failing: Option<&str>, checks: &AtomicU32) -> Option<Wanted> {
    if setting == Setting::Disabled {
        return Some(Wanted {
            status: "False",
            reason: "autonomy disabled",
            message: "The autonomy is disabled or this node is not edge node".to_owned(),
        });
    }
    let Some(messages) = failing else {
        checks.store(0, Ordering::Relaxed);
        return Some(Wanted {
            status: "True",
            reason: "autonomy enabled successfully",
            message: "The autonomy is enabled and it works fine".to_owned(),
        });
    };
    let previous = checks
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(1))
        })
        // The closure always gives a value.
        .unwrap_or(u32::MAX);
    (previous.saturating_add(1) > MAX_CACHE_FAILURES).then(|| Wanted {
        status: "Unknown",
        reason: "cache failed",
        message: messages.to_owned(),
    })
}

/// Sets `wanted` as the Autonomy condition of `node` at `now` (RFC 3339); true when the node
/// changed. A condition already at the wanted status is left as it is, its times and words
/// too; a changed one gets both times new (YurtHub's `autonomy.go` sets `LastHeartbeatTime`
/// and `LastTransitionTime`); a missing one is added. A node whose status or conditions are not what
/// a Node has is left alone.
pub(crate) fn apply(node: &mut Value, wanted: &Wanted, now: &str) -> bool {
    let Some(node) = node.as_object_mut() else {
        return false;
    };
    let status = node
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if status.is_null() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return false;
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if conditions.is_null() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return false;
    };
    let found = conditions
        .iter_mut()
        .find(|c| c["type"].as_str() == Some(CONDITION_TYPE));
    match found {
        Some(condition) if condition["status"].as_str() == Some(wanted.status) => false,
        Some(condition) => {
            let Some(fields) = condition.as_object_mut() else {
                return false;
            };
            fields.insert("status".into(), json!(wanted.status));
            fields.insert("reason".into(), json!(wanted.reason));
            fields.insert("message".into(), json!(wanted.message));
            fields.insert("lastHeartbeatTime".into(), json!(now));
            fields.insert("lastTransitionTime".into(), json!(now));
            true
        }
        None => {
            conditions.push(json!({
                "type": CONDITION_TYPE,
                "status": wanted.status,
                "reason": wanted.reason,
                "message": wanted.message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-12-06T13:00:00Z";

    fn node(annotations: Value, labels: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "edge-1", "annotations": annotations, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })
    }

    fn annotated(name: &str, value: &str) -> Value {
        node(json!({ name: value }), json!({}))
    }

    #[test]
    fn either_annotation_turns_autonomy_on_and_the_label_off() {
        let of = |node: &Value| Setting::of(node);
        assert_eq!(of(&node(json!({}), json!({}))), Setting::Disabled);
        assert_eq!(of(&json!({})), Setting::Disabled);
        assert_eq!(
            of(&annotated(AUTONOMY_ANNOTATION, "true")),
            Setting::Enabled
        );
        // YurtHub's own annotation is on only when "true".
        for off in ["false", "", "yes", "True"] {
            assert_eq!(of(&annotated(AUTONOMY_ANNOTATION, off)), Setting::Disabled);
        }
        for on in ["0", "10m", "1h30m", "1.5h", "300ms", "-5m", "+5m", "-0"] {
            assert_eq!(
                of(&annotated(DURATION_ANNOTATION, on)),
                Setting::Enabled,
                "{on}"
            );
        }
        // Go takes one sign only.
        for off in [
            "bogus", "", "10", "5 m", "-", "+", "-+5m", "+-5m", "--5m", "++5m",
        ] {
            assert_eq!(
                of(&annotated(DURATION_ANNOTATION, off)),
                Setting::Disabled,
                "{off:?}"
            );
        }
        // Not an edge worker: off whatever the annotations say.
        let worker = |value: &str| {
            node(
                json!({AUTONOMY_ANNOTATION: "true", DURATION_ANNOTATION: "0"}),
                json!({ EDGE_WORKER_LABEL: value }),
            )
        };
        assert_eq!(of(&worker("false")), Setting::Disabled);
        assert_eq!(of(&worker("true")), Setting::Enabled);
    }

    #[test]
    fn failing_keys_say_unknown_only_after_three_checks_and_clear_at_once() {
        let checks = AtomicU32::new(0);
        let on = Setting::Enabled;
        let wanted = want(on, None, &checks).unwrap();
        assert_eq!(
            (wanted.status, wanted.reason, wanted.message.as_str()),
            (
                "True",
                "autonomy enabled successfully",
                "The autonomy is enabled and it works fine"
            )
        );
        // Checks 1 to 3 that find keys failing leave the condition as it is.
        for _ in 0..3 {
            assert_eq!(want(on, Some("a\nb"), &checks), None);
        }
        let wanted = want(on, Some("a\nb"), &checks).unwrap();
        assert_eq!(
            (wanted.status, wanted.reason, wanted.message.as_str()),
            ("Unknown", "cache failed", "a\nb")
        );
        assert_eq!(want(on, Some("a"), &checks).unwrap().status, "Unknown");
        // No key failing: True, and the count starts again.
        assert_eq!(want(on, None, &checks).unwrap().status, "True");
        assert_eq!(want(on, Some("a"), &checks), None);
        // Off is False whatever fails, and counts nothing.
        let off = want(Setting::Disabled, Some("a"), &checks).unwrap();
        assert_eq!(
            (off.status, off.reason, off.message.as_str()),
            (
                "False",
                "autonomy disabled",
                "The autonomy is disabled or this node is not edge node"
            )
        );
        assert_eq!(checks.load(Ordering::Relaxed), 1);
        // The count stops at its end rather than wrapping to "fine".
        checks.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(want(on, Some("a"), &checks).unwrap().status, "Unknown");
    }

    #[test]
    fn apply_adds_changes_or_leaves_the_condition() {
        let checks = AtomicU32::new(0);
        let enabled = want(Setting::Enabled, None, &checks).unwrap();
        let disabled = want(Setting::Disabled, None, &checks).unwrap();
        let mut n = annotated(AUTONOMY_ANNOTATION, "true");
        assert!(apply(&mut n, &enabled, NOW));
        let conditions = n["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0]["type"], "Ready");
        assert_eq!(
            conditions[1],
            json!({"type": "Autonomy", "status": "True",
                   "reason": "autonomy enabled successfully",
                   "message": "The autonomy is enabled and it works fine",
                   "lastHeartbeatTime": NOW, "lastTransitionTime": NOW})
        );
        // The same status again: nothing changes, not even the times.
        let before = n.clone();
        assert!(!apply(&mut n, &enabled, "2026-12-06T14:00:00Z"));
        assert_eq!(n, before);
        // Another status: the words and both times change in place.
        let later = "2026-12-06T15:00:00Z";
        assert!(apply(&mut n, &disabled, later));
        let condition = &n["status"]["conditions"][1];
        assert_eq!(n["status"]["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "autonomy disabled");
        assert_eq!(condition["lastTransitionTime"], later);
        assert_eq!(condition["lastHeartbeatTime"], later);

        // A node without status or conditions gets them.
        let mut bare = json!({"metadata": {"name": "edge-1"}});
        assert!(apply(&mut bare, &disabled, NOW));
        assert_eq!(bare["status"]["conditions"][0]["status"], "False");
        let mut null = json!({"metadata": {}, "status": {"conditions": null}});
        assert!(apply(&mut null, &disabled, NOW));
        // What is not a Node's shape is left alone.
        for odd in [
            json!([]),
            json!({"status": 3}),
            json!({"status": {"conditions": {}}}),
        ] {
            let mut changed = odd.clone();
            assert!(!apply(&mut changed, &disabled, NOW));
            assert_eq!(changed, odd);
        }
    }
}
