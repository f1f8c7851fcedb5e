//! One EndpointSlice (v1, v1beta1) or core Endpoints rewritten to this node's pods as the
//! overlay holds them.
//!
//! Which endpoints are this node's pods': with a `targetRef`, kind `Pod` whose namespace (the
//! object's when it names none) and name name an overlaid pod, on this node or no node
//! (`nodeName`; a v1beta1 slice's `topology["kubernetes.io/hostname"]`), with the same uid
//! when both carry one; without a targetRef, an endpoint on this node with an address equal
//! to one of the IPs the cloud last knew of a pod in the object's own namespace.
//!
//! What changes: a slice endpoint's `addresses` become its pod's IP of the slice's
//! `addressType` (a pod with no IP of that family keeps the address and is not ready), and
//! `conditions.ready`/`serving` follow the pod (`ready` also stays false while the cloud says
//! `terminating`, as the EndpointSlice controller writes it); an Endpoints address takes its
//! pod's IP and sits in `addresses` or `notReadyAddresses` by the pod's readiness. A pod
//! kubelet deleted loses its endpoint, and an Endpoints subset left empty is dropped. Nothing
//! else changes, `metadata.resourceVersion` included; the object is written again with sorted
//! keys (no field order is meaningful to a client).
//!
//! What it does not do: choose which objects to rewrite or remember what was sent
//! (`mod.rs`, `view.rs`).

use memchr::memmem::Finder;
use serde_json::{Map, Value};

use super::{EndpointKind, PodState, Pods};

/// An object rewritten, with the namespace and name it carries.
pub(super) struct Rewritten {
    /// The rewritten object.
    pub bytes: Vec<u8>,
    /// Its `metadata.namespace`.
    pub namespace: String,
    /// Its `metadata.name`.
    pub name: String,
}

/// `object` rewritten to `pods` on node `node`; None when it names none of them or nothing
/// changes. `needles` are the quoted pod names and former IPs: an object containing none of
/// them cannot match and is not parsed.
pub(super) fn rewrite(
    kind: EndpointKind,
    object: &[u8],
    node: &str,
    pods: &Pods,
    needles: &[Finder<'static>],
) -> Option<Rewritten> {
    if !needles.iter().any(|n| n.find(object).is_some()) {
        return None;
    }
    let mut value: Value = serde_json::from_slice(object).ok()?;
    let meta = |field: &str| {
        value
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (namespace, name) = (meta("namespace"), meta("name"));
    let on = Scope {
        namespace: &namespace,
        node,
        pods,
    };
    let changed = match kind {
        EndpointKind::Slice => slice(&mut value, &on),
        EndpointKind::Endpoints => endpoints(&mut value, &on),
    };
    if !changed {
        return None;
    }
    let bytes = serde_json::to_vec(&value).ok()?;
    Some(Rewritten {
        bytes,
        namespace,
        name,
    })
}

/// What an endpoint is matched against.
struct Scope<'a> {
    /// The object's namespace.
    namespace: &'a str,
    /// This node.
    node: &'a str,
    pods: &'a Pods,
}

impl Scope<'_> {
    /// The overlaid pod endpoint (or address) `entry` names, if any; `addresses` are its
    /// addresses, for the match without a targetRef.
    fn pod_of<'s, 'e>(
        &'s self,
        entry: &Value,
        mut addresses: impl Iterator<Item = &'e str>,
    ) -> Option<&'s PodState> {
        let on_node = match entry.get("nodeName").and_then(Value::as_str) {
            Some(node) => node,
            None => text(
                entry
                    .get("topology")
                    .and_then(|t| t.get("kubernetes.io/hostname")),
            ),
        };
        match entry.get("targetRef") {
            Some(target) if !target.is_null() => {
                if text(target.get("kind")) != "Pod" {
                    return None;
                }
                let namespace = match text(target.get("namespace")) {
                    "" => self.namespace,
                    ns => ns,
                };
                let pod = self.pods.get(namespace)?.get(text(target.get("name")))?;
                let uid = text(target.get("uid"));
                let node_ok = on_node.is_empty() || on_node == self.node;
                let uid_ok = uid.is_empty() || pod.uid.is_empty() || uid == pod.uid;
                (node_ok && uid_ok).then_some(pod)
            }
            _ => {
                if on_node != self.node {
                    return None;
                }
                let pods = self.pods.get(self.namespace)?;
                addresses.find_map(|a| pods.values().find(|p| p.old_ips.iter().any(|o| o == a)))
            }
        }
    }
}

/// The string `v` holds, "" when none.
fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or_default()
}

/// Whether `ip` is IPv6 (kubernetes writes IPs canonical: only v6 has a colon).
fn is_v6(ip: &str) -> bool {
    ip.contains(':')
}

/// The pod's IP of the family `v6` says.
fn ip_of(pod: &PodState, v6: bool) -> Option<&str> {
    pod.ips
        .iter()
        .map(String::as_str)
        .find(|ip| is_v6(ip) == v6)
}

/// Whether an endpoint of `pod` is ready: Ready and not finished.
fn serving(pod: &PodState) -> bool {
    pod.ready && !pod.terminal
}

/// Rewrites an EndpointSlice's endpoints; whether anything changed.
fn slice(object: &mut Value, on: &Scope<'_>) -> bool {
    let v6 = match object.get("addressType").and_then(Value::as_str) {
        Some("IPv4") => false,
        Some("IPv6") => true,
        // FQDN slices name no pod IPs.
        _ => return false,
    };
    let Some(Value::Array(endpoints)) = object.get_mut("endpoints") else {
        return false;
    };
    let mut changed = false;
    let mut kept = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints.drain(..) {
        let addresses = endpoint
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        let Some(pod) = on.pod_of(&endpoint, addresses) else {
            kept.push(endpoint);
            continue;
        };
        if pod.gone {
            changed = true;
            continue;
        }
        let mut fresh = endpoint.clone();
        let mut ready = serving(pod);
        if let Value::Object(fields) = &mut fresh {
            match ip_of(pod, v6) {
                Some(ip) => {
                    let address = Value::Array(vec![Value::from(ip)]);
                    fields.insert("addresses".into(), address);
                }
                None => ready = false,
            }
            let conditions = fields
                .entry("conditions")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(conditions) = conditions {
                let terminating = conditions.get("terminating") == Some(&Value::Bool(true));
                conditions.insert("ready".into(), Value::Bool(ready && !terminating));
                conditions.insert("serving".into(), Value::Bool(ready));
            }
        }
        changed |= fresh != endpoint;
        kept.push(fresh);
    }
    *endpoints = kept;
    changed
}

/// Rewrites a core Endpoints' subsets; whether anything changed.
fn endpoints(object: &mut Value, on: &Scope<'_>) -> bool {
    let Some(Value::Array(subsets)) = object.get_mut("subsets") else {
        return false;
    };
    let mut changed = false;
    for subset in subsets.iter_mut() {
        let Value::Object(fields) = subset else {
            continue;
        };
        let mut take = |list: &str| match fields.remove(list) {
            Some(Value::Array(addresses)) => addresses,
            _ => Vec::new(),
        };
        let (was_ready, was_not_ready) = (take("addresses"), take("notReadyAddresses"));
        let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
        let all = was_ready
            .into_iter()
            .map(|a| (a, true))
            .chain(was_not_ready.into_iter().map(|a| (a, false)));
        for (address, listed_ready) in all {
            let ip = address
                .get("ip")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(pod) = on.pod_of(&address, std::iter::once(ip)) else {
                (if listed_ready {
                    &mut ready
                } else {
                    &mut not_ready
                })
                .push(address);
                continue;
            };
            if pod.gone {
                changed = true;
                continue;
            }
            let mut fresh = address.clone();
            let mut is_ready = serving(pod);
            match (ip_of(pod, is_v6(ip)), &mut fresh) {
                (Some(new), Value::Object(fields)) => {
                    fields.insert("ip".into(), Value::from(new));
                }
                _ => is_ready = false,
            }
            changed |= fresh != address || is_ready != listed_ready;
            (if is_ready { &mut ready } else { &mut not_ready }).push(fresh);
        }
        for (list, addresses) in [("addresses", ready), ("notReadyAddresses", not_ready)] {
            if !addresses.is_empty() {
                fields.insert(list.into(), Value::Array(addresses));
            }
        }
    }
    if changed {
        // As the apiserver stores it: a subset with no address is no subset, and no subsets
        // is no `subsets` field.
        subsets.retain(|s| s.get("addresses").is_some() || s.get("notReadyAddresses").is_some());
        if subsets.is_empty()
            && let Value::Object(fields) = object
        {
            fields.remove("subsets");
        }
    }
    changed
}
