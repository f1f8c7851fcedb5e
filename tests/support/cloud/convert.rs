//! Conversion between a stored version and an older served one, as the apiserver's
//! conversion functions do. Only `discovery.k8s.io` EndpointSlices have one: v1 is stored,
//! v1beta1 is served by converting each endpoint (`pkg/apis/discovery/v1beta1/conversion.go`).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::kinds::Kind;
use super::store::Obj;

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// `o` (stored form) as `served` shows it; the same object when no conversion applies.
pub fn to_served(served: &Kind, o: &Arc<Obj>) -> Arc<Obj> {
    if !is_v1beta1_slice(served) {
        return o.clone();
    }
    let mut v = o.value();
    for_each_endpoint(&mut v, endpoint_to_v1beta1);
    let mut out = Obj::from_value(v);
    // The body's resourceVersion is the stored one; keep the event's (DELETED bumps it).
    out.rv = o.rv;
    Arc::new(out)
}

/// A request body in `served`'s version, in the stored version.
pub fn to_storage(served: &Kind, mut v: Value) -> Value {
    if is_v1beta1_slice(served) {
        for_each_endpoint(&mut v, endpoint_from_v1beta1);
    }
    v
}

fn is_v1beta1_slice(k: &Kind) -> bool {
    k.converted && k.group == "discovery.k8s.io" && k.resource == "endpointslices"
}

fn for_each_endpoint(v: &mut Value, f: fn(&mut Map<String, Value>)) {
    if let Some(eps) = v.get_mut("endpoints").and_then(Value::as_array_mut) {
        eps.iter_mut().filter_map(Value::as_object_mut).for_each(f);
    }
}

/// v1 → v1beta1: `deprecatedTopology` becomes `topology`, to which `nodeName` (kept too)
/// and `zone` (dropped) are added under their well-known labels.
fn endpoint_to_v1beta1(ep: &mut Map<String, Value>) {
    let mut topology = match ep.remove("deprecatedTopology") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Some(node) = ep.get("nodeName").and_then(Value::as_str) {
        topology.insert(HOSTNAME.into(), json!(node));
    }
    if let Some(Value::String(zone)) = ep.remove("zone") {
        topology.insert(ZONE.into(), json!(zone));
    }
    if !topology.is_empty() {
        ep.insert("topology".into(), Value::Object(topology));
    }
}

/// v1beta1 → v1: `topology` becomes `deprecatedTopology` minus the hostname (moved to
/// `nodeName` unless set) and the zone (moved to `zone`).
fn endpoint_from_v1beta1(ep: &mut Map<String, Value>) {
    let Some(Value::Object(mut topology)) = ep.remove("topology") else {
        return;
    };
    if let Some(host) = topology.remove(HOSTNAME)
        && !ep.get("nodeName").is_some_and(Value::is_string)
    {
        ep.insert("nodeName".into(), host);
    }
    if let Some(zone) = topology.remove(ZONE) {
        ep.insert("zone".into(), zone);
    }
    if !topology.is_empty() {
        ep.insert("deprecatedTopology".into(), Value::Object(topology));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_round_trip_between_v1_and_v1beta1() {
        let v1 = json!({"endpoints": [
            {"addresses": ["10.0.0.1"], "nodeName": "n1", "zone": "z",
             "deprecatedTopology": {"rack": "r1"}},
            {"addresses": ["10.0.0.2"]},
        ]});
        let mut beta = v1.clone();
        for_each_endpoint(&mut beta, endpoint_to_v1beta1);
        assert_eq!(
            beta["endpoints"][0],
            json!({"addresses": ["10.0.0.1"], "nodeName": "n1",
                   "topology": {"rack": "r1", HOSTNAME: "n1", ZONE: "z"}})
        );
        assert_eq!(beta["endpoints"][1], json!({"addresses": ["10.0.0.2"]}));
        for_each_endpoint(&mut beta, endpoint_from_v1beta1);
        assert_eq!(beta, v1);
    }
}
