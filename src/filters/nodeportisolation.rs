//! nodeportisolation (YurtHub's `pkg/yurthub/filter/nodeportisolation`): hides from kube-proxy the
//! NodePort and LoadBalancer Services whose `nodeport.openyurt.io/listen` annotation does not name
//! this node's pool, so their node ports are not opened here. Services without the annotation pass.

use serde_json::Value;

use super::{FilterContext, Lookups, Outcome, annotation, node_pool};

/// The annotation listing the pools that listen on the node ports.
const LISTEN_ANNOTATION: &str = "nodeport.openyurt.io/listen";

/// Filters one Service.
pub(super) fn filter(obj: &Value, ctx: &FilterContext, lookups: &dyn Lookups) -> Outcome {
    let kind = obj
        .get("spec")
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str);
    if !matches!(kind, Some("NodePort" | "LoadBalancer")) {
        return Outcome::Unchanged;
    }
    let Some(listen) = annotation(obj, LISTEN_ANNOTATION) else {
        return Outcome::Unchanged;
    };
    // Pool unknown (lookup failed) or node in no pool: keep, as YurtHub does.
    let Some(pool) = node_pool(ctx, lookups) else {
        return Outcome::Unchanged;
    };
    if listens(listen, &pool) {
        Outcome::Unchanged
    } else {
        Outcome::Dropped
    }
}

/// Whether pool `pool` listens, per the annotation value (`filter.go:125-155`): entries `name`,
/// `-name` or `*`, comma-separated and trimmed, de-duplicated on the name without its `-` (first
/// occurrence wins), empty names skipped. `pool` listens if named, not if excluded, else if `*` is
/// there; otherwise (an empty annotation too) it does not.
fn listens(annotation: &str, pool: &str) -> bool {
    let mut entries: Vec<&str> = Vec::new();
    for entry in annotation.split(',').map(str::trim) {
        let name = entry.strip_prefix('-').unwrap_or(entry);
        if !name.is_empty()
            && !entries
                .iter()
                .any(|e| e.strip_prefix('-').unwrap_or(e) == name)
        {
            entries.push(entry);
        }
    }
    let has = |wanted: &str| entries.contains(&wanted);
    if has(pool) {
        return true;
    }
    if entries.iter().any(|e| e.strip_prefix('-') == Some(pool)) {
        return false;
    }
    has("*")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{FakeLookups, ctx, run_pure};

    fn service(kind: &str, listen: Option<&str>) -> Value {
        let mut svc = json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"type": kind, "ports": [{"port": 80, "nodePort": 30080}]}
        });
        if let Some(l) = listen {
            svc["metadata"]["annotations"] = json!({ LISTEN_ANNOTATION: l });
        }
        svc
    }

    fn in_pool(pool: &str) -> FilterContext {
        FilterContext {
            pool_name: Some(pool.into()),
            ..ctx()
        }
    }

    #[test]
    fn the_annotation_rules() {
        for (listen, kept) in [
            ("hangzhou", true),
            ("shanghai,hangzhou", true),
            (" shanghai , hangzhou ", true),
            ("-hangzhou", false),
            ("*,-hangzhou", false),
            ("-hangzhou,*", false),
            ("*", true),
            ("shanghai,*", true),
            ("-shanghai,*", true),
            ("shanghai", false),
            ("-shanghai", false),
            ("", false),
            // first occurrence wins
            ("hangzhou,-hangzhou", true),
            ("-hangzhou,hangzhou", false),
            ("hangzhou-x", false),
            (",-,", false),
            ("-, hangzhou", true),
            ("--hangzhou", false),
        ] {
            assert_eq!(listens(listen, "hangzhou"), kept, "{listen:?}");
        }
    }

    #[test]
    fn drops_services_not_for_this_pool() {
        let none = FakeLookups::default();
        let svc = service("NodePort", Some("shanghai"));
        assert_eq!(
            run_pure(&svc, |o| filter(o, &in_pool("hangzhou"), &none)),
            Outcome::Dropped
        );
        let svc = service("LoadBalancer", Some("-hangzhou"));
        assert_eq!(
            run_pure(&svc, |o| filter(o, &in_pool("hangzhou"), &none)),
            Outcome::Dropped
        );
        let svc = service("NodePort", Some("hangzhou"));
        assert_eq!(
            run_pure(&svc, |o| filter(o, &in_pool("hangzhou"), &none)),
            Outcome::Unchanged
        );
    }

    #[test]
    fn only_annotated_node_ports_and_load_balancers_are_judged() {
        let none = FakeLookups::default();
        for svc in [
            service("ClusterIP", Some("shanghai")),
            service("ExternalName", Some("")),
            service("NodePort", None),
            service("LoadBalancer", None),
        ] {
            assert_eq!(
                run_pure(&svc, |o| filter(o, &in_pool("hangzhou"), &none)),
                Outcome::Unchanged,
                "{svc}"
            );
        }
        assert_eq!(
            none.calls.get(),
            0,
            "no lookup for Services that do not need one"
        );
    }

    #[test]
    fn the_pool_comes_from_the_node_label_when_the_flag_is_unset() {
        let labelled = FakeLookups {
            node_pool: Some("shanghai".into()),
            ..FakeLookups::default()
        };
        let svc = service("NodePort", Some("shanghai"));
        assert_eq!(filter(&svc, &ctx(), &labelled), Outcome::Unchanged);
        let svc = service("NodePort", Some("hangzhou"));
        assert_eq!(filter(&svc, &ctx(), &labelled), Outcome::Dropped);
        // The flag wins over the label.
        assert_eq!(
            filter(&svc, &in_pool("hangzhou"), &labelled),
            Outcome::Unchanged
        );
    }

    #[test]
    fn an_unknown_or_empty_pool_keeps_the_service() {
        let svc = service("NodePort", Some("hangzhou"));
        assert_eq!(
            filter(&svc, &ctx(), &FakeLookups::default()),
            Outcome::Unchanged
        );
        let empty = FakeLookups {
            node_pool: Some(String::new()),
            ..FakeLookups::default()
        };
        assert_eq!(filter(&svc, &ctx(), &empty), Outcome::Unchanged);
    }
}
