//! The kinds the stand-in cloud serves (a fixed registry, one CRD among them) and the
//! discovery documents built from it: `/api`, `/apis`, `/apis/{g}`, `/api/v1`,
//! `/apis/{g}/{v}`.
//!
//! Which CRDs are currently installed is the store's business; functions here take that
//! as a predicate and hold no state.

use serde_json::{Value, json};

/// One served resource.
#[derive(Debug)]
pub struct Kind {
    /// API group, "" for core.
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural resource name as in URLs.
    pub resource: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// `kind`.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: &'static [&'static str],
    /// Has a `status` subresource (the main resource ignores status writes).
    pub has_status: bool,
    /// A CustomResourceDefinition tests can remove and re-add.
    pub crd: bool,
    /// Discovery categories (`all`).
    pub categories: &'static [&'static str],
    /// Served by converting the objects of the group's first-listed version of the same
    /// resource (its storage version), as the apiserver serves older versions.
    pub converted: bool,
}

/// Index of a kind in [`KINDS`].
pub type KindId = usize;

const fn k(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    has_status: bool,
) -> Kind {
    let version = "v1";
    Kind {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        short_names,
        has_status,
        crd: false,
        categories: &[],
        converted: false,
    }
}

/// Every kind the cloud knows, CRDs included.
pub static KINDS: &[Kind] = &[
    Kind {
        categories: &["all"],
        ..k("", "pods", "pod", "Pod", true, &["po"], true)
    },
    k(
        "",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        false,
    ),
    k("", "secrets", "secret", "Secret", true, &[], false),
    Kind {
        categories: &["all"],
        ..k("", "services", "service", "Service", true, &["svc"], true)
    },
    k(
        "",
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        false,
    ),
    k("", "events", "event", "Event", true, &["ev"], false),
    k("", "nodes", "node", "Node", false, &["no"], true),
    k(
        "",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        &["ns"],
        true,
    ),
    Kind {
        categories: &["all"],
        ..k(
            "apps",
            "deployments",
            "deployment",
            "Deployment",
            true,
            &["deploy"],
            true,
        )
    },
    k(
        "discovery.k8s.io",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
        &[],
        false,
    ),
    // Removed from real apiservers in 1.25; OpenYurt's servicetopology still reads it.
    Kind {
        version: "v1beta1",
        converted: true,
        ..k(
            "discovery.k8s.io",
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
            &[],
            false,
        )
    },
    k(
        "coordination.k8s.io",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        false,
    ),
    k(
        "certificates.k8s.io",
        "certificatesigningrequests",
        "certificatesigningrequest",
        "CertificateSigningRequest",
        false,
        &["csr"],
        true,
    ),
    Kind {
        crd: true,
        ..k(
            "example.com",
            "widgets",
            "widget",
            "Widget",
            true,
            &["wd"],
            true,
        )
    },
    // OpenYurt's NodePool CRD (yurt-manager serves v1alpha1/v1beta1 too; the hub reads
    // v1beta2 only).
    Kind {
        version: "v1beta2",
        crd: true,
        ..k(
            "apps.openyurt.io",
            "nodepools",
            "nodepool",
            "NodePool",
            false,
            &["np"],
            true,
        )
    },
];

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl Kind {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`, as error messages name a resource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// Fields a field selector may name for this kind.
    pub fn selectable_field(&self, field: &str) -> bool {
        // The field sets the real apiserver accepts for these kinds.
        let extra: &[&str] = match (self.group, self.resource) {
            ("", "pods") => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            ("", "events") => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("", "secrets") => &["type"],
            ("", "nodes") => &["spec.unschedulable"],
            ("", "namespaces") => &["status.phase"],
            _ => &[],
        };
        match field {
            "metadata.name" => true,
            "metadata.namespace" => self.namespaced,
            f => extra.contains(&f),
        }
    }

    fn verbs(&self) -> &'static [&'static str] {
        if self.resource == "namespaces" && self.group.is_empty() {
            // The real apiserver has no deletecollection for namespaces.
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        } else {
            VERBS
        }
    }
}

/// The kind whose store holds `id`'s objects: itself, or for a [`Kind::converted`] kind
/// the first-listed version of its group and resource.
pub fn storage(id: KindId) -> KindId {
    let k = &KINDS[id];
    if !k.converted {
        return id;
    }
    KINDS
        .iter()
        .position(|s| !s.converted && s.group == k.group && s.resource == k.resource)
        .unwrap_or(id)
}

/// Finds a kind by group, version and plural resource.
pub fn find(group: &str, version: &str, resource: &str) -> Option<KindId> {
    KINDS
        .iter()
        .position(|k| k.group == group && k.version == version && k.resource == resource)
}

/// Finds a kind by plural resource, optionally qualified by group (`deployments.apps`,
/// `widgets.example.com`): the name the cloud's Rust API takes.
pub fn find_by_name(name: &str) -> Option<KindId> {
    KINDS
        .iter()
        .position(|k| k.resource == name || k.group_resource() == name)
}

/// `/api`.
pub fn api_versions(server_addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_addr}],
    })
}

fn groups(present: &dyn Fn(KindId) -> bool) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for (id, k) in KINDS.iter().enumerate() {
        if !k.group.is_empty() && present(id) && !out.contains(&k.group) {
            out.push(k.group);
        }
    }
    out
}

/// The versions served in `group`, preferred (first registered) first.
fn group_versions(group: &str, present: &dyn Fn(KindId) -> bool) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for (id, k) in KINDS.iter().enumerate() {
        if k.group == group && present(id) && !out.contains(&k.version) {
            out.push(k.version);
        }
    }
    out
}

fn group_doc(group: &str, present: &dyn Fn(KindId) -> bool) -> Value {
    let versions: Vec<Value> = group_versions(group, present)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`: every group with at least one served kind.
pub fn api_group_list(present: &dyn Fn(KindId) -> bool) -> Value {
    let groups: Vec<Value> = groups(present)
        .into_iter()
        .map(|g| group_doc(g, present))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or `None` when no kind of that group is served.
pub fn api_group(group: &str, present: &dyn Fn(KindId) -> bool) -> Option<Value> {
    if !groups(present).contains(&group) {
        return None;
    }
    let mut doc = group_doc(group, present);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `/api/v1` or `/apis/{group}/{version}`, or `None` when nothing is served there.
pub fn api_resource_list(
    group: &str,
    version: &str,
    present: &dyn Fn(KindId) -> bool,
) -> Option<Value> {
    let mut resources = Vec::new();
    for (id, k) in KINDS.iter().enumerate() {
        if k.group != group || k.version != version || !present(id) {
            continue;
        }
        let mut r = json!({
            "name": k.resource,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": k.verbs(),
        });
        if !k.short_names.is_empty() {
            r["shortNames"] = json!(k.short_names);
        }
        if !k.categories.is_empty() {
            r["categories"] = json!(k.categories);
        }
        resources.push(r);
        if k.has_status {
            resources.push(json!({
                "name": format!("{}/status", k.resource),
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": k.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

/// `/api` (`core`) or `/apis` in aggregated form: an `APIGroupDiscoveryList` of
/// `apidiscovery.k8s.io/<discovery_version>` (`v2` or `v2beta1`), every served resource of
/// each group inline, as an apiserver answers clients that ask for it (kubectl ≥ 1.26).
pub fn aggregated_discovery(
    core: bool,
    discovery_version: &str,
    present: &dyn Fn(KindId) -> bool,
) -> Value {
    let names: Vec<&str> = if core { vec![""] } else { groups(present) };
    let items: Vec<Value> = names
        .into_iter()
        .map(|group| {
            let versions: Vec<Value> = group_versions(group, present)
                .into_iter()
                .map(|version| {
                    let resources = discovery_resources(group, version, present);
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{discovery_version}"),
        "metadata": {},
        "items": items,
    })
}

/// The aggregated-discovery resources of one group-version.
fn discovery_resources(group: &str, version: &str, present: &dyn Fn(KindId) -> bool) -> Vec<Value> {
    let mut resources = Vec::new();
    for (id, k) in KINDS.iter().enumerate() {
        if k.group != group || k.version != version || !present(id) {
            continue;
        }
        let response_kind = json!({"group": k.group, "version": k.version, "kind": k.kind});
        let mut r = json!({
            "resource": k.resource,
            "responseKind": response_kind,
            "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": k.singular,
            "verbs": k.verbs(),
        });
        if !k.short_names.is_empty() {
            r["shortNames"] = json!(k.short_names);
        }
        if !k.categories.is_empty() {
            r["categories"] = json!(k.categories);
        }
        if k.has_status {
            r["subresources"] = json!([{
                "subresource": "status",
                "responseKind": response_kind,
                "verbs": ["get", "patch", "update"],
            }]);
        }
        resources.push(r);
    }
    resources
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "30",
        "gitVersion": "v1.30.0",
        "gitCommit": "7c48c2bd72b9bf5c44d21d7338cc7bea77d0ad2a",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T17:27:03Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/openapi/v3/<gv path>` for a group-version: only the PATCH operation of each kind, with
/// its GroupVersionKind and the `fieldValidation` parameter. That is all kubectl reads
/// before choosing server-side field validation for `apply`/`create` (else it demands
/// `--validate=false`); there are no schemas.
pub fn openapi_v3_doc(
    group: &str,
    version: &str,
    present: &dyn Fn(KindId) -> bool,
) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for (id, k) in KINDS.iter().enumerate() {
        if k.group != group || k.version != version || !present(id) {
            continue;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if k.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.resource)
        } else {
            format!("{prefix}/{}/{{name}}", k.resource)
        };
        let op = json!({"patch": {
            "operationId": format!("patch{}", k.kind),
            "parameters": [
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": k.group, "version": k.version, "kind": k.kind},
        }});
        paths.insert(path, op);
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.30.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// `/openapi/v3`: where each served group-version's document is, with a content hash.
pub fn openapi_v3_root(present: &dyn Fn(KindId) -> bool) -> Value {
    let mut gvs: Vec<(&str, &str)> = Vec::new();
    for (id, k) in KINDS.iter().enumerate() {
        if present(id) && !gvs.contains(&(k.group, k.version)) {
            gvs.push((k.group, k.version));
        }
    }
    let mut paths = serde_json::Map::new();
    for (g, v) in gvs {
        let Some(doc) = openapi_v3_doc(g, v, present) else {
            continue;
        };
        let rel = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        // FNV-1a of the document: changes when a CRD comes or goes, as the real hash does.
        let hash = doc
            .to_string()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        paths.insert(
            rel.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{rel}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}
