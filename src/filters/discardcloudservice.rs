//! discardcloudservice (YurtHub's `pkg/yurthub/filter/discardcloudservice`): hides from kube-proxy
//! the Services only the cloud can serve: LoadBalancers annotated `svc.openyurt.io/discard: "true"`
//! and the tunnel server's internal Service.

use serde_json::Value;

use super::{Outcome, annotation, namespace_name};

/// The annotation that marks a LoadBalancer Service as cloud-only.
const DISCARD_ANNOTATION: &str = "svc.openyurt.io/discard";

/// Filters one Service.
pub(super) fn filter(obj: &Value) -> Outcome {
    let load_balancer = obj
        .get("spec")
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        == Some("LoadBalancer");
    if load_balancer && annotation(obj, DISCARD_ANNOTATION) == Some("true") {
        return Outcome::Dropped;
    }
    if namespace_name(obj) == ("kube-system", "x-tunnel-server-internal-svc") {
        return Outcome::Dropped;
    }
    Outcome::Unchanged
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::run_pure;

    fn service(ns: &str, name: &str, kind: &str, discard: Option<&str>) -> Value {
        let mut svc = json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"type": kind}
        });
        if let Some(d) = discard {
            svc["metadata"]["annotations"] = json!({ DISCARD_ANNOTATION: d });
        }
        svc
    }

    #[test]
    fn drops_discarded_load_balancers_and_the_tunnel_service() {
        let lb = service("default", "web", "LoadBalancer", Some("true"));
        assert_eq!(run_pure(&lb, filter), Outcome::Dropped);
        let tunnel = service(
            "kube-system",
            "x-tunnel-server-internal-svc",
            "ClusterIP",
            None,
        );
        assert_eq!(run_pure(&tunnel, filter), Outcome::Dropped);
    }

    #[test]
    fn keeps_everything_else() {
        for svc in [
            service("default", "web", "LoadBalancer", Some("false")),
            service("default", "web", "LoadBalancer", Some("True")),
            service("default", "web", "LoadBalancer", None),
            service("default", "web", "NodePort", Some("true")),
            service("default", "x-tunnel-server-internal-svc", "ClusterIP", None),
            json!({"metadata": {"annotations": {DISCARD_ANNOTATION: true}}, "spec": {"type": "LoadBalancer"}}),
            json!(null),
        ] {
            assert_eq!(run_pure(&svc, filter), Outcome::Unchanged, "{svc}");
        }
    }
}
