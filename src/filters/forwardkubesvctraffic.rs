//! forwardkubesvctraffic (YurtHub's `pkg/yurthub/filter/forwardkubesvctraffic`): in kube-proxy's
//! view, EndpointSlice
//! `default/kubernetes` has one endpoint, the hub's HTTPS listener, so pods' traffic to the
//! `kubernetes` ClusterIP is DNAT-ed to the hub. A slice of the other address family than
//! the hub's address is left alone.

use serde_json::{Value, json};

use super::{FilterContext, Outcome, namespace_name, set_https_port};

/// Filters one EndpointSlice.
pub(super) fn filter(obj: &Value, ctx: &FilterContext) -> Outcome {
    // Matched by object name, as YurtHub does (`filter.go:80-118`), not by the service label.
    if namespace_name(obj) != ("default", "kubernetes") {
        return Outcome::Unchanged;
    }
    let family = if ctx.host.is_ipv6() { "IPv6" } else { "IPv4" };
    if obj.get("addressType").and_then(Value::as_str) != Some(family) {
        log::debug!("forwardkubesvctraffic: default/kubernetes slice is not {family}, left as is");
        return Outcome::Unchanged;
    }
    let Some(fields) = obj.as_object() else {
        return Outcome::Unchanged;
    };
    let mut new = fields.clone();
    set_https_port(new.get_mut("ports"), ctx.secure_port.get());
    new.insert(
        "endpoints".into(),
        json!([{"addresses": [ctx.host.to_string()], "conditions": {"ready": true}}]),
    );
    if new == *fields {
        return Outcome::Unchanged;
    }
    Outcome::Changed(Value::Object(new))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{changed, ctx, ctx_with_host, run_pure};

    fn slice(address_type: &str) -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"namespace": "default", "name": "kubernetes",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": address_type,
            "endpoints": [
                {"addresses": ["192.168.0.10"], "conditions": {"ready": true}, "nodeName": "master-1"},
                {"addresses": ["192.168.0.11"], "conditions": {"ready": true}, "nodeName": "master-2"}
            ],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
        })
    }

    #[test]
    fn points_the_kubernetes_slice_at_the_hub() {
        let s = slice("IPv4");
        let out = changed(run_pure(&s, |o| filter(o, &ctx())));
        assert_eq!(
            out["endpoints"],
            json!([{"addresses": ["169.254.2.1"], "conditions": {"ready": true}}])
        );
        assert_eq!(out["ports"][0]["port"], 10268);
        assert_eq!(out["ports"][0]["protocol"], "TCP");
        assert_eq!(out["metadata"], s["metadata"]);
    }

    #[test]
    fn the_family_follows_the_host() {
        let v6 = slice("IPv6");
        assert_eq!(run_pure(&v6, |o| filter(o, &ctx())), Outcome::Unchanged);
        let out = changed(run_pure(&v6, |o| filter(o, &ctx_with_host("fd00::2:1"))));
        assert_eq!(out["endpoints"][0]["addresses"], json!(["fd00::2:1"]));
        let v4 = slice("IPv4");
        assert_eq!(
            run_pure(&v4, |o| filter(o, &ctx_with_host("fd00::2:1"))),
            Outcome::Unchanged
        );
        assert_eq!(
            run_pure(&slice("FQDN"), |o| filter(o, &ctx())),
            Outcome::Unchanged
        );
    }

    #[test]
    fn other_slices_pass() {
        let mut s = slice("IPv4");
        s["metadata"]["name"] = json!("kubernetes-abcde");
        assert_eq!(run_pure(&s, |o| filter(o, &ctx())), Outcome::Unchanged);
        let mut s = slice("IPv4");
        s["metadata"]["namespace"] = json!("kube-system");
        assert_eq!(run_pure(&s, |o| filter(o, &ctx())), Outcome::Unchanged);
    }

    #[test]
    fn an_already_filtered_slice_is_unchanged() {
        let once = changed(filter(&slice("IPv4"), &ctx()));
        assert_eq!(filter(&once, &ctx()), Outcome::Unchanged);
    }
}
