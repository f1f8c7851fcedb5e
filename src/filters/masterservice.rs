//! masterservice (YurtHub's `pkg/yurthub/filter/masterservice`): in kubelet's view, Service
//! `default/kubernetes` points at the hub's HTTPS listener, so the `KUBERNETES_SERVICE_*` env vars
//! kubelet gives every pod lead in-cluster clients to the hub. Sets `clusterIP` and `clusterIPs`
//! (CoreDNS reads the latter, #2173) and the port named `https`; `targetPort` is left alone.

use serde_json::Value;

use super::{FilterContext, Outcome, namespace_name, set_https_port};

/// Filters one Service.
pub(super) fn filter(obj: &Value, ctx: &FilterContext) -> Outcome {
    if namespace_name(obj) != ("default", "kubernetes") {
        return Outcome::Unchanged;
    }
    let Some(spec) = obj.get("spec").and_then(Value::as_object) else {
        return Outcome::Unchanged;
    };
    let host = ctx.host.to_string();
    let mut new_spec = spec.clone();
    new_spec.insert("clusterIP".into(), Value::String(host.clone()));
    new_spec.insert("clusterIPs".into(), Value::Array(vec![Value::String(host)]));
    set_https_port(new_spec.get_mut("ports"), ctx.secure_port.get());
    if new_spec == *spec {
        return Outcome::Unchanged;
    }
    let mut new = obj.clone();
    new["spec"] = Value::Object(new_spec);
    Outcome::Changed(new)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{changed, ctx, ctx_with_host, run_pure};

    fn kubernetes_service() -> Value {
        json!({
            "metadata": {"namespace": "default", "name": "kubernetes", "resourceVersion": "7"},
            "spec": {
                "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"],
                "type": "ClusterIP",
                "ports": [
                    {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443},
                    {"name": "metrics", "port": 8080, "targetPort": 8080}
                ]
            }
        })
    }

    #[test]
    fn points_the_kubernetes_service_at_the_hub() {
        let svc = kubernetes_service();
        let out = changed(run_pure(&svc, |o| filter(o, &ctx())));
        assert_eq!(out["spec"]["clusterIP"], "169.254.2.1");
        assert_eq!(out["spec"]["clusterIPs"], json!(["169.254.2.1"]));
        assert_eq!(out["spec"]["ports"][0]["port"], 10268);
        assert_eq!(
            out["spec"]["ports"][0]["targetPort"], 6443,
            "targetPort untouched"
        );
        assert_eq!(
            out["spec"]["ports"][1]["port"], 8080,
            "other ports untouched"
        );
        assert_eq!(out["metadata"], svc["metadata"]);
        assert_eq!(out["spec"]["type"], "ClusterIP");
    }

    #[test]
    fn sets_cluster_ips_even_when_absent_and_uses_ipv6_hosts() {
        let mut svc = kubernetes_service();
        svc["spec"]
            .as_object_mut()
            .expect("object")
            .remove("clusterIPs");
        let out = changed(run_pure(&svc, |o| filter(o, &ctx_with_host("fd00::2:1"))));
        assert_eq!(out["spec"]["clusterIP"], "fd00::2:1");
        assert_eq!(out["spec"]["clusterIPs"], json!(["fd00::2:1"]));
    }

    #[test]
    fn other_services_and_odd_shapes_pass() {
        let mut other = kubernetes_service();
        other["metadata"]["namespace"] = json!("kube-system");
        assert_eq!(run_pure(&other, |o| filter(o, &ctx())), Outcome::Unchanged);
        let mut named = kubernetes_service();
        named["metadata"]["name"] = json!("kubernetes-2");
        assert_eq!(run_pure(&named, |o| filter(o, &ctx())), Outcome::Unchanged);
        let no_spec = json!({"metadata": {"namespace": "default", "name": "kubernetes"}});
        assert_eq!(
            run_pure(&no_spec, |o| filter(o, &ctx())),
            Outcome::Unchanged
        );
        assert_eq!(filter(&json!("not an object"), &ctx()), Outcome::Unchanged);
    }

    #[test]
    fn an_already_filtered_service_is_unchanged() {
        let svc = kubernetes_service();
        let once = changed(filter(&svc, &ctx()));
        assert_eq!(filter(&once, &ctx()), Outcome::Unchanged);
    }
}
