//! servicetopology (YurtHub's `pkg/yurthub/filter/servicetopology`): keeps only the endpoints on
//! this node, or in this node's pool, of Services annotated `openyurt.io/topologyKeys`, so
//! kube-proxy, CoreDNS and ingress controllers route to nearby backends.
//!
//! Handles EndpointSlices `discovery.k8s.io/v1` (`nodeName`) and `v1beta1`
//! (`topology["kubernetes.io/hostname"]`), and core v1 Endpoints (each address's `nodeName`),
//! which YurtHub leaves unfiltered (#2613). The object is never dropped: a slice may end with
//! no endpoints (#1028). Pool members come through [`Lookups`], the NodePool looked up by name
//! (YurtHub's label-selected informer finds none, see §2.8).

use serde_json::Value;

use super::{FilterContext, Lookups, Outcome, namespace_name, node_pool};

/// The Service annotation naming the topology.
pub(super) const TOPOLOGY_ANNOTATION: &str = "openyurt.io/topologyKeys";
/// What yurt-manager's servicetopology controllers patch, with the unix time, on a Service's
/// EndpointSlices and Endpoints when its topology or its pool's members changed, so node
/// proxies filter them again (openyurt pkg/yurtmanager/controller/servicetopology/adapter).
const UPDATE_TRIGGER: &str = "openyurt.io/update-trigger";
/// The label of an EndpointSlice naming its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The v1beta1 topology key of the endpoint's node.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// What the object is, as far as this filter cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Core v1 Endpoints.
    Endpoints,
    /// `discovery.k8s.io/v1` EndpointSlice.
    SliceV1,
    /// `discovery.k8s.io/v1beta1` EndpointSlice.
    SliceV1beta1,
    /// An EndpointSlice without `apiVersion` (a list item): `nodeName`, else the v1beta1
    /// hostname topology. The endpointslice controller fills both with the same node, so this
    /// agrees with either version.
    SliceUnknown,
}

impl Form {
    /// The form of `obj`, by its `apiVersion`, else `api_version` (its list's), else its shape.
    fn of(obj: &Value, api_version: Option<&str>) -> Option<Form> {
        let own = obj.get("apiVersion").and_then(Value::as_str);
        match own.or(api_version) {
            Some("discovery.k8s.io/v1") => return Some(Form::SliceV1),
            Some("discovery.k8s.io/v1beta1") => return Some(Form::SliceV1beta1),
            _ => {}
        }
        let kind = obj.get("kind").and_then(Value::as_str);
        if kind == Some("Endpoints") || obj.get("subsets").is_some() {
            Some(Form::Endpoints)
        } else if kind == Some("EndpointSlice")
            || obj.get("addressType").is_some()
            || obj.get("endpoints").is_some()
        {
            Some(Form::SliceUnknown)
        } else {
            None
        }
    }
}

/// Filters one EndpointSlice or Endpoints object; `api_version` is its list's, for a list item.
pub(super) fn filter(
    obj: &Value,
    api_version: Option<&str>,
    ctx: &FilterContext,
    lookups: &dyn Lookups,
) -> Outcome {
    let Some(form) = Form::of(obj, api_version) else {
        return Outcome::Unchanged;
    };
    let (namespace, name) = namespace_name(obj);
    let service = match form {
        Form::Endpoints => name,
        _ => obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .and_then(Value::as_str)
            .unwrap_or(""),
    };
    if service.is_empty() {
        return Outcome::Unchanged;
    }
    if let Some(trigger) = super::annotation(obj, UPDATE_TRIGGER) {
        lookups.saw_update_trigger(namespace, service, trigger);
    }
    let Some(Some(topology)) = lookups.service_topology(namespace, service) else {
        return Outcome::Unchanged;
    };
    let nodes: Vec<String> = match topology.as_str() {
        HOSTNAME => vec![ctx.node_name.clone()],
        "openyurt.io/nodepool" | "kubernetes.io/zone" => match node_pool(ctx, lookups) {
            // A node in no pool falls back to node topology, as YurtHub does.
            None => vec![ctx.node_name.clone()],
            Some(pool) => match lookups.pool_members(&pool) {
                Some(members) => members,
                None => return Outcome::Unchanged,
            },
        },
        _ => return Outcome::Unchanged,
    };
    let keep = |node: Option<&str>| node.is_some_and(|n| nodes.iter().any(|m| m == n));
    match form {
        Form::Endpoints => filter_endpoints(obj, keep),
        _ => filter_slice(obj, form, keep),
    }
}

/// The node of one slice endpoint under `form`.
fn endpoint_node(endpoint: &Value, form: Form) -> Option<&str> {
    let node_name = || endpoint.get("nodeName").and_then(Value::as_str);
    let hostname = || {
        endpoint
            .get("topology")
            .and_then(|t| t.get(HOSTNAME))
            .and_then(Value::as_str)
    };
    match form {
        Form::SliceV1 => node_name(),
        Form::SliceV1beta1 => hostname(),
        Form::SliceUnknown => node_name().or_else(hostname),
        Form::Endpoints => None,
    }
}

fn filter_slice(obj: &Value, form: Form, keep: impl Fn(Option<&str>) -> bool) -> Outcome {
    let Some(endpoints) = obj.get("endpoints").and_then(Value::as_array) else {
        return Outcome::Unchanged;
    };
    if endpoints.iter().all(|e| keep(endpoint_node(e, form))) {
        return Outcome::Unchanged;
    }
    let kept: Vec<Value> = endpoints
        .iter()
        .filter(|e| keep(endpoint_node(e, form)))
        .cloned()
        .collect();
    let mut new = obj.clone();
    new["endpoints"] = Value::Array(kept);
    Outcome::Changed(new)
}

/// The address lists of an Endpoints subset that name nodes.
const ADDRESS_LISTS: [&str; 2] = ["addresses", "notReadyAddresses"];

fn filter_endpoints(obj: &Value, keep: impl Fn(Option<&str>) -> bool) -> Outcome {
    let Some(subsets) = obj.get("subsets").and_then(Value::as_array) else {
        return Outcome::Unchanged;
    };
    let kept = |a: &Value| keep(a.get("nodeName").and_then(Value::as_str));
    let all_kept = subsets.iter().all(|s| {
        ADDRESS_LISTS
            .iter()
            .all(|list| address_list(s, list).all(kept))
    });
    if all_kept {
        return Outcome::Unchanged;
    }
    let mut new_subsets = Vec::with_capacity(subsets.len());
    for subset in subsets {
        let Some(fields) = subset.as_object() else {
            continue;
        };
        let mut fields = fields.clone();
        let mut any_left = false;
        for list in ADDRESS_LISTS {
            let left: Vec<Value> = address_list(subset, list)
                .filter(|a| kept(a))
                .cloned()
                .collect();
            // Empty lists are left out, as the apiserver serialises them.
            if left.is_empty() {
                fields.remove(list);
            } else {
                any_left = true;
                fields.insert(list.into(), Value::Array(left));
            }
        }
        // A subset with no address left says nothing: Endpoints never carry one.
        if any_left {
            new_subsets.push(Value::Object(fields));
        }
    }
    let mut new = obj.clone();
    new["subsets"] = Value::Array(new_subsets);
    Outcome::Changed(new)
}

/// The entries of `subset[list]` (none when absent).
fn address_list<'a>(subset: &'a Value, list: &str) -> impl Iterator<Item = &'a Value> {
    subset
        .get(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{FakeLookups, changed, ctx, run_pure};

    fn lookups(topology: Option<&str>) -> FakeLookups {
        let mut l = FakeLookups::default();
        l.services
            .insert("default/web".into(), topology.map(str::to_owned));
        l
    }

    fn slice_v1() -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"namespace": "default", "name": "web-abc",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "nodeName": "node-a"},
                {"addresses": ["10.0.0.2"], "nodeName": "node-b"},
                {"addresses": ["10.0.0.3"], "nodeName": "node-c"},
                {"addresses": ["10.0.0.4"]}
            ],
            "ports": [{"port": 80}]
        })
    }

    fn slice_v1beta1() -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1beta1",
            "kind": "EndpointSlice",
            "metadata": {"namespace": "default", "name": "web-abc",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "topology": {"kubernetes.io/hostname": "node-a"}},
                // v1beta1 reads only the topology, never nodeName
                {"addresses": ["10.0.0.2"], "nodeName": "node-a",
                 "topology": {"kubernetes.io/hostname": "node-b"}},
                {"addresses": ["10.0.0.3"]}
            ]
        })
    }

    fn endpoints() -> Value {
        json!({
            "metadata": {"namespace": "default", "name": "web"},
            "subsets": [
                {"addresses": [
                    {"ip": "10.0.0.1", "nodeName": "node-a"},
                    {"ip": "10.0.0.2", "nodeName": "node-b"}
                 ],
                 "notReadyAddresses": [{"ip": "10.0.0.5", "nodeName": "node-b"}],
                 "ports": [{"port": 80}]},
                {"addresses": [{"ip": "10.0.0.3", "nodeName": "node-c"}], "ports": [{"port": 81}]}
            ]
        })
    }

    fn addresses(slice: &Value) -> Vec<&str> {
        slice["endpoints"]
            .as_array()
            .expect("endpoints")
            .iter()
            .map(|e| e["addresses"][0].as_str().expect("address"))
            .collect()
    }

    #[test]
    fn an_update_trigger_on_a_slice_is_reported() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut slice = slice_v1();
        slice["metadata"]["annotations"] = json!({UPDATE_TRIGGER: "1700000000"});
        run_pure(&slice, |s| filter(s, None, &ctx(), &l));
        assert_eq!(*l.triggers.borrow(), ["default/web@1700000000"]);
        run_pure(&slice_v1(), |s| filter(s, None, &ctx(), &l));
        assert_eq!(
            l.triggers.borrow().len(),
            1,
            "no annotation, nothing reported"
        );
    }

    #[test]
    fn node_topology_keeps_this_nodes_v1_endpoints() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let s = slice_v1();
        let out = changed(run_pure(&s, |o| filter(o, None, &ctx(), &l)));
        assert_eq!(addresses(&out), ["10.0.0.1"], "nil nodeName is dropped too");
        assert_eq!(out["metadata"], s["metadata"]);
        assert_eq!(out["ports"], s["ports"]);
    }

    #[test]
    fn node_topology_reads_v1beta1_topology() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let s = slice_v1beta1();
        let out = changed(run_pure(&s, |o| filter(o, None, &ctx(), &l)));
        assert_eq!(addresses(&out), ["10.0.0.1"]);
    }

    #[test]
    fn a_list_item_without_api_version_reads_either_field() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut s = slice_v1();
        s.as_object_mut().expect("object").remove("apiVersion");
        s.as_object_mut().expect("object").remove("kind");
        assert_eq!(
            addresses(&changed(filter(&s, None, &ctx(), &l))),
            ["10.0.0.1"]
        );
        let mut s = slice_v1beta1();
        s.as_object_mut().expect("object").remove("apiVersion");
        s["endpoints"][1]
            .as_object_mut()
            .expect("object")
            .remove("nodeName");
        assert_eq!(
            addresses(&changed(filter(&s, None, &ctx(), &l))),
            ["10.0.0.1"]
        );
    }

    #[test]
    fn a_list_item_reads_the_field_of_its_lists_version() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut s = slice_v1beta1();
        s.as_object_mut().expect("object").remove("apiVersion");
        // The second endpoint's nodeName says node-a, its topology node-b: v1beta1 reads the
        // topology only.
        let out = changed(run_pure(&s, |o| {
            filter(o, Some("discovery.k8s.io/v1beta1"), &ctx(), &l)
        }));
        assert_eq!(addresses(&out), ["10.0.0.1"]);
        let out = changed(filter(&s, Some("discovery.k8s.io/v1"), &ctx(), &l));
        assert_eq!(addresses(&out), ["10.0.0.2"], "v1 reads nodeName only");
        // The object's own apiVersion wins over the list's.
        let s = slice_v1beta1();
        let out = changed(filter(&s, Some("discovery.k8s.io/v1"), &ctx(), &l));
        assert_eq!(addresses(&out), ["10.0.0.1"]);
    }

    #[test]
    fn the_slice_is_never_dropped() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut s = slice_v1();
        s["endpoints"] = json!([{"addresses": ["10.0.0.2"], "nodeName": "node-b"}]);
        let out = changed(run_pure(&s, |o| filter(o, None, &ctx(), &l)));
        assert_eq!(out["endpoints"], json!([]));
    }

    #[test]
    fn all_local_endpoints_leave_the_slice_unchanged() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut s = slice_v1();
        s["endpoints"] = json!([{"addresses": ["10.0.0.1"], "nodeName": "node-a"}]);
        assert_eq!(
            run_pure(&s, |o| filter(o, None, &ctx(), &l)),
            Outcome::Unchanged
        );
        let mut s = slice_v1();
        s["endpoints"] = json!([]);
        assert_eq!(filter(&s, None, &ctx(), &l), Outcome::Unchanged);
    }

    #[test]
    fn core_endpoints_are_filtered_too() {
        let l = lookups(Some("kubernetes.io/hostname"));
        let e = endpoints();
        let out = changed(run_pure(&e, |o| filter(o, None, &ctx(), &l)));
        assert_eq!(
            out["subsets"],
            json!([{"addresses": [{"ip": "10.0.0.1", "nodeName": "node-a"}], "ports": [{"port": 80}]}]),
            "other nodes' addresses and emptied subsets are gone"
        );
        let mut e = endpoints();
        e["kind"] = json!("Endpoints");
        e["apiVersion"] = json!("v1");
        e["subsets"] = json!([{"addresses": [{"ip": "10.0.0.1", "nodeName": "node-a"}]}]);
        assert_eq!(filter(&e, None, &ctx(), &l), Outcome::Unchanged);
    }

    #[test]
    fn pool_topology_keeps_pool_members() {
        for key in ["openyurt.io/nodepool", "kubernetes.io/zone"] {
            let mut l = lookups(Some(key));
            l.node_pool = Some("hangzhou".into());
            l.pools
                .insert("hangzhou".into(), vec!["node-a".into(), "node-b".into()]);
            let s = slice_v1();
            let out = changed(run_pure(&s, |o| filter(o, None, &ctx(), &l)));
            assert_eq!(addresses(&out), ["10.0.0.1", "10.0.0.2"], "{key}");
            let e = endpoints();
            let out = changed(run_pure(&e, |o| filter(o, None, &ctx(), &l)));
            assert_eq!(out["subsets"][0], e["subsets"][0], "{key}");
            assert_eq!(out["subsets"].as_array().map(Vec::len), Some(1), "{key}");
        }
    }

    #[test]
    fn the_pool_flag_wins_over_the_node_label() {
        let mut l = lookups(Some("openyurt.io/nodepool"));
        l.node_pool = Some("hangzhou".into());
        l.pools.insert("hangzhou".into(), vec!["node-a".into()]);
        l.pools.insert("shanghai".into(), vec!["node-c".into()]);
        let c = FilterContext {
            pool_name: Some("shanghai".into()),
            ..ctx()
        };
        assert_eq!(
            addresses(&changed(filter(&slice_v1(), None, &c, &l))),
            ["10.0.0.3"]
        );
    }

    #[test]
    fn pool_topology_without_a_pool_is_node_topology() {
        let l = lookups(Some("openyurt.io/nodepool"));
        assert_eq!(
            addresses(&changed(filter(&slice_v1(), None, &ctx(), &l))),
            ["10.0.0.1"]
        );
    }

    #[test]
    fn unknown_members_leave_the_slice_unchanged() {
        let mut l = lookups(Some("openyurt.io/nodepool"));
        l.node_pool = Some("hangzhou".into());
        assert_eq!(filter(&slice_v1(), None, &ctx(), &l), Outcome::Unchanged);
    }

    #[test]
    fn no_service_no_annotation_or_another_key_leave_it_unchanged() {
        for l in [
            FakeLookups::default(),
            lookups(None),
            lookups(Some("topology.kubernetes.io/region")),
            lookups(Some("kubernetes.io/hostname,openyurt.io/nodepool")),
        ] {
            assert_eq!(
                run_pure(&slice_v1(), |o| filter(o, None, &ctx(), &l)),
                Outcome::Unchanged
            );
            assert_eq!(
                run_pure(&endpoints(), |o| filter(o, None, &ctx(), &l)),
                Outcome::Unchanged
            );
        }
        let l = lookups(Some("kubernetes.io/hostname"));
        let mut unlabelled = slice_v1();
        unlabelled["metadata"]["labels"] = json!({});
        assert_eq!(filter(&unlabelled, None, &ctx(), &l), Outcome::Unchanged);
        assert_eq!(
            filter(&json!({"metadata": {}}), None, &ctx(), &l),
            Outcome::Unchanged
        );
        assert_eq!(filter(&json!(7), None, &ctx(), &l), Outcome::Unchanged);
    }
}
