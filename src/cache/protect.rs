//! What `--cache-max-bytes` never evicts: what this node's pods need to start again without
//! the cloud (pure, no I/O).
//!
//! Read from kubelet's cached pods (the cloud's copies: kubelet lists its pods by
//! `spec.nodeName`), the set holds the Secrets, ConfigMaps and PersistentVolumeClaims they
//! name — volumes (projected sources too, which covers `kube-root-ca.crt`, and the
//! `secretRef`s of CSI's `nodePublishSecretRef` and the in-tree drivers), `env[].valueFrom`,
//! `envFrom` and `imagePullSecrets`, for containers, init containers and ephemeral
//! containers alike — and the PersistentVolumes those claims are bound to
//! ([`Protected::bind_volumes`], from the cached claims), with the Secrets those volumes
//! name (CSI's `nodePublishSecretRef` and `nodeStageSecretRef`, the in-tree drivers'
//! `secretRef`s, each with its own namespace: [`Protected::volume_secrets`], from the cached
//! volumes). Besides the set, whole kinds of kubelet's are kept ([`Rule::Whole`]): its pods;
//! its Services, which kubelet waits for before it starts a pod (the service environment
//! variables); its CSIDrivers, which it reads to mount a CSI volume, and its RuntimeClasses,
//! which a pod's `runtimeClassName` needs to start (a few small cluster-scoped objects); and
//! single objects: its Node and its Lease (`kube-node-lease/<node>`). Token answers, documents and the dot records
//! are not collections, and the eviction never looks at them.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// The kinds of kubelet's that the set names members of, by kind directory.
pub(crate) const MEMBER_KINDS: [&str; 6] = [SECRETS, CONFIGMAPS, CLAIMS, VOLUMES, NODES, LEASES];

const PODS: &str = "pods.v1.core";
const SERVICES: &str = "services.v1.core";
const SECRETS: &str = "secrets.v1.core";
const CONFIGMAPS: &str = "configmaps.v1.core";
const CLAIMS: &str = "persistentvolumeclaims.v1.core";
const VOLUMES: &str = "persistentvolumes.v1.core";
const NODES: &str = "nodes.v1.core";
const LEASES: &str = "leases.v1.coordination.k8s.io";
const CSI_DRIVERS: &str = "csidrivers.v1.storage.k8s.io";
const RUNTIME_CLASSES: &str = "runtimeclasses.v1.node.k8s.io";
/// The in-tree volume sources that read a Secret to mount, by its `secretRef`.
const SECRET_REF_DRIVERS: [&str; 7] = [
    "cephfs",
    "rbd",
    "iscsi",
    "flexVolume",
    "scaleIO",
    "storageos",
    "cinder",
];
/// Where node leases live.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// How the bound treats one of kubelet's kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Kept whole: kubelet's pods, its Services, CSIDrivers and RuntimeClasses.
    Whole,
    /// Only the set's members are kept; the others may go, oldest first.
    Members,
    /// Nothing of it is needed offline: an "old kind", evicted whole before any member.
    None,
}

/// How the bound treats kubelet's kind directory `kind` (`pods.v1.core`; a metadata view's
/// `partialobjectmetadatas.v1.meta.k8s.io/…` is never needed by kubelet).
pub(crate) fn rule_of(kind: &str) -> Rule {
    match kind {
        PODS | SERVICES | CSI_DRIVERS | RUNTIME_CLASSES => Rule::Whole,
        kind if MEMBER_KINDS.contains(&kind) => Rule::Members,
        _ => Rule::None,
    }
}

/// The objects the node's pods need, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Protected {
    node: String,
    secrets: HashSet<(String, String)>,
    configmaps: HashSet<(String, String)>,
    claims: HashSet<(String, String)>,
    /// Volumes, with the namespace of the claim bound to each (the pods').
    volumes: HashMap<String, String>,
}

impl Protected {
    /// The set named by `pods` (kubelet's cached pods; those bound to another node are
    /// skipped) on node `node`. Pods that do not parse as pods name nothing.
    pub(crate) fn from_pods<'p>(
        node: &str,
        pods: impl IntoIterator<Item = &'p Value>,
    ) -> Protected {
        let mut set = Protected {
            node: node.to_owned(),
            ..Protected::default()
        };
        for pod in pods {
            let spec = &pod["spec"];
            if spec["nodeName"].as_str().is_some_and(|n| n != node) {
                continue;
            }
            let Some(ns) = pod["metadata"]["namespace"].as_str() else {
                continue;
            };
            set.add_pod(ns, pod["metadata"]["name"].as_str().unwrap_or(""), spec);
        }
        set
    }

    /// Adds the PersistentVolumes that the set's claims among `claims` (cached
    /// PersistentVolumeClaims) are bound to (`spec.volumeName`).
    pub(crate) fn bind_volumes<'c>(&mut self, claims: impl IntoIterator<Item = &'c Value>) {
        for claim in claims {
            let meta = &claim["metadata"];
            let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
                continue;
            };
            if self.claims.contains(&(ns.to_owned(), name.to_owned()))
                && let Some(volume) = claim["spec"]["volumeName"].as_str()
                && !volume.is_empty()
            {
                self.volumes.insert(volume.to_owned(), ns.to_owned());
            }
        }
    }

    /// Adds what `object`, one of kubelet's pods or claims about to be written, names: a pod
    /// of this node its needs, a claim of the set its volume.
    pub(crate) fn add_pending(&mut self, object: &Value) {
        let node = self.node.clone();
        let added = Protected::from_pods(&node, [object]);
        self.secrets.extend(added.secrets);
        self.configmaps.extend(added.configmaps);
        self.claims.extend(added.claims);
        self.volumes.extend(added.volumes);
        self.bind_volumes([object]);
    }

    /// Adds the Secrets that the set's PersistentVolumes among `volumes` (cached
    /// PersistentVolumes) need to be mounted: CSI's node publish and stage Secrets, the
    /// in-tree drivers' `secretRef`s (in the namespace they name; the pod's, as kubelet reads
    /// them, when they name none) and Azure File's `secretName` in `secretNamespace`.
    pub(crate) fn volume_secrets<'v>(&mut self, volumes: impl IntoIterator<Item = &'v Value>) {
        for volume in volumes {
            let Some(name) = volume["metadata"]["name"].as_str() else {
                continue;
            };
            let Some(pod_ns) = self.volumes.get(name).cloned() else {
                continue;
            };
            let spec = &volume["spec"];
            let mut secret = |reference: &Value, name_field: &str, ns_field: &str| {
                let ns = reference[ns_field]
                    .as_str()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or(&pod_ns);
                add(&mut self.secrets, ns, &reference[name_field]);
            };
            for field in ["nodePublishSecretRef", "nodeStageSecretRef"] {
                secret(&spec["csi"][field], "name", "namespace");
            }
            for driver in SECRET_REF_DRIVERS {
                secret(&spec[driver]["secretRef"], "name", "namespace");
            }
            secret(&spec["azureFile"], "secretName", "secretNamespace");
        }
    }

    /// Whether the set names any volume (then the bound reads the cached volumes).
    pub(crate) fn has_volumes(&self) -> bool {
        !self.volumes.is_empty()
    }

    /// Whether the set names any claim (then the bound reads the cached claims).
    pub(crate) fn has_claims(&self) -> bool {
        !self.claims.is_empty()
    }

    /// Whether the object `namespace/name` of kubelet's kind directory `kind` must stay.
    pub(crate) fn holds(&self, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        let pair = || (namespace.unwrap_or("").to_owned(), name.to_owned());
        match kind {
            SECRETS => self.secrets.contains(&pair()),
            CONFIGMAPS => self.configmaps.contains(&pair()),
            CLAIMS => self.claims.contains(&pair()),
            VOLUMES => namespace.is_none() && self.volumes.contains_key(name),
            NODES => namespace.is_none() && name == self.node,
            LEASES => namespace == Some(LEASE_NAMESPACE) && name == self.node,
            kind => rule_of(kind) == Rule::Whole,
        }
    }

    /// Objects named: (Secrets, ConfigMaps, claims, volumes).
    #[cfg(test)]
    fn counts(&self) -> (usize, usize, usize, usize) {
        (
            self.secrets.len(),
            self.configmaps.len(),
            self.claims.len(),
            self.volumes.len(),
        )
    }

    fn add_pod(&mut self, ns: &str, pod: &str, spec: &Value) {
        let mut secret = |name: &Value| add(&mut self.secrets, ns, name);
        for pull in items(&spec["imagePullSecrets"]) {
            secret(&pull["name"]);
        }
        for volume in items(&spec["volumes"]) {
            self.add_volume(ns, pod, volume);
        }
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            for container in items(&spec[list]) {
                for env in items(&container["env"]) {
                    let from = &env["valueFrom"];
                    add(&mut self.secrets, ns, &from["secretKeyRef"]["name"]);
                    add(&mut self.configmaps, ns, &from["configMapKeyRef"]["name"]);
                }
                for from in items(&container["envFrom"]) {
                    add(&mut self.secrets, ns, &from["secretRef"]["name"]);
                    add(&mut self.configmaps, ns, &from["configMapRef"]["name"]);
                }
            }
        }
    }

    fn add_volume(&mut self, ns: &str, pod: &str, volume: &Value) {
        add(&mut self.secrets, ns, &volume["secret"]["secretName"]);
        add(&mut self.configmaps, ns, &volume["configMap"]["name"]);
        add(
            &mut self.claims,
            ns,
            &volume["persistentVolumeClaim"]["claimName"],
        );
        // A generic ephemeral volume's claim is named `<pod>-<volume>`.
        if volume["ephemeral"].is_object()
            && let Some(name) = volume["name"].as_str()
        {
            self.claims.insert((ns.to_owned(), format!("{pod}-{name}")));
        }
        for source in items(&volume["projected"]["sources"]) {
            add(&mut self.secrets, ns, &source["secret"]["name"]);
            add(&mut self.configmaps, ns, &source["configMap"]["name"]);
        }
        add(
            &mut self.secrets,
            ns,
            &volume["csi"]["nodePublishSecretRef"]["name"],
        );
        // The in-tree drivers that read a Secret of the pod's namespace to mount.
        for driver in SECRET_REF_DRIVERS {
            add(&mut self.secrets, ns, &volume[driver]["secretRef"]["name"]);
        }
        add(&mut self.secrets, ns, &volume["azureFile"]["secretName"]);
    }
}

/// The elements of `list` when it is an array.
fn items(list: &Value) -> impl Iterator<Item = &Value> {
    list.as_array().into_iter().flatten()
}

/// Adds `(ns, name)` when `name` is a non-empty string.
fn add(set: &mut HashSet<(String, String)>, ns: &str, name: &Value) {
    if let Some(name) = name.as_str()
        && !name.is_empty()
    {
        set.insert((ns.to_owned(), name.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, spec: Value) -> Value {
        let mut spec = spec;
        spec["nodeName"] = json!(node);
        json!({"metadata": {"namespace": "app", "name": "web"}, "spec": spec})
    }

    #[test]
    fn every_reference_form_is_protected() {
        let p = pod(
            "edge-1",
            json!({
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "vol-secret"}},
                    {"name": "b", "configMap": {"name": "vol-cm"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "d", "projected": {"sources": [
                        {"secret": {"name": "proj-secret"}},
                        {"configMap": {"name": "kube-root-ca.crt"}},
                        {"serviceAccountToken": {"path": "token"}}
                    ]}},
                    {"name": "e", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
                    {"name": "f", "rbd": {"secretRef": {"name": "rbd-secret"}}},
                    {"name": "g", "azureFile": {"secretName": "azure-secret"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                    {"name": "h", "emptyDir": {}}
                ],
                "containers": [{
                    "env": [
                        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                        {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                        {"name": "Z", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "W", "value": "plain"}
                    ],
                    "envFrom": [{"secretRef": {"name": "from-secret"}}, {"configMapRef": {"name": "from-cm"}}]
                }],
                "initContainers": [{"envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                "ephemeralContainers": [{"env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "debug-secret"}}}]}]
            }),
        );
        let mut set = Protected::from_pods("edge-1", [&p]);
        for secret in [
            "pull",
            "vol-secret",
            "proj-secret",
            "csi-secret",
            "rbd-secret",
            "azure-secret",
            "env-secret",
            "from-secret",
            "debug-secret",
        ] {
            assert!(set.holds(SECRETS, Some("app"), secret), "{secret}");
            assert!(
                !set.holds(SECRETS, Some("other"), secret),
                "{secret} elsewhere"
            );
        }
        for cm in ["vol-cm", "kube-root-ca.crt", "env-cm", "from-cm", "init-cm"] {
            assert!(set.holds(CONFIGMAPS, Some("app"), cm), "{cm}");
        }
        assert!(set.holds(CLAIMS, Some("app"), "data"));
        assert!(set.holds(CLAIMS, Some("app"), "web-scratch"));
        assert_eq!(set.counts(), (9, 5, 2, 0));
        assert!(set.has_claims());
        set.bind_volumes([
            &json!({"metadata": {"namespace": "app", "name": "data"}, "spec": {"volumeName": "pv-1"}}),
            &json!({"metadata": {"namespace": "app", "name": "unused"}, "spec": {"volumeName": "pv-2"}}),
            &json!({"metadata": {"namespace": "other", "name": "data"}, "spec": {"volumeName": "pv-3"}}),
            &json!({"metadata": {"namespace": "app", "name": "web-scratch"}, "spec": {}}),
        ]);
        assert!(set.holds(VOLUMES, None, "pv-1"));
        assert!(!set.holds(VOLUMES, None, "pv-2") && !set.holds(VOLUMES, None, "pv-3"));
        // The node and its lease, never another's.
        assert!(set.holds(NODES, None, "edge-1") && !set.holds(NODES, None, "edge-2"));
        assert!(set.holds(LEASES, Some("kube-node-lease"), "edge-1"));
        assert!(!set.holds(LEASES, Some("kube-node-lease"), "edge-2"));
        assert!(!set.holds(LEASES, Some("app"), "edge-1"));
        // Whole kinds hold everything; an unrelated Secret is not held.
        assert!(set.holds(PODS, Some("any"), "thing") && set.holds(SERVICES, Some("a"), "b"));
        assert!(!set.holds(SECRETS, Some("app"), "unrelated"));
        assert!(!set.holds("deployments.v1.apps", Some("app"), "web"));
    }

    #[test]
    fn other_nodes_pods_and_garbage_name_nothing() {
        let other = pod(
            "edge-2",
            json!({"volumes": [{"name": "a", "secret": {"secretName": "s"}}]}),
        );
        let garbage = [
            json!("not a pod"),
            json!({"metadata": {"name": "no-namespace"}, "spec": {"volumes": [{"secret": {"secretName": "s"}}]}}),
            json!({"metadata": {"namespace": "app"}, "spec": {"volumes": "not a list", "containers": [{"env": 3}]}}),
            pod(
                "edge-1",
                json!({"volumes": [{"secret": {"secretName": ""}}, {"secret": {"secretName": 7}}]}),
            ),
        ];
        let set = Protected::from_pods("edge-1", [&other].into_iter().chain(&garbage));
        assert_eq!(set.counts(), (0, 0, 0, 0));
        assert!(!set.has_claims());
    }

    #[test]
    fn a_bound_volumes_own_secrets_are_protected() {
        let p = pod(
            "edge-1",
            json!({"volumes": [
                {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "o", "cinder": {"volumeID": "v", "secretRef": {"name": "cinder-secret"}}}
            ]}),
        );
        let mut set = Protected::from_pods("edge-1", [&p]);
        assert!(set.holds(SECRETS, Some("app"), "cinder-secret"));
        assert!(!set.has_volumes());
        set.bind_volumes([
            &json!({"metadata": {"namespace": "app", "name": "data"}, "spec": {"volumeName": "pv-csi"}}),
        ]);
        assert!(set.has_volumes());
        let csi = json!({"metadata": {"name": "pv-csi"}, "spec": {"csi": {
            "driver": "x",
            "nodePublishSecretRef": {"name": "publish", "namespace": "storage"},
            "nodeStageSecretRef": {"name": "stage", "namespace": "storage"}
        }, "cephfs": {"secretRef": {"name": "ceph"}},
           "azureFile": {"secretName": "azure", "secretNamespace": "files"}}});
        let other = json!({"metadata": {"name": "pv-other"}, "spec": {"csi": {
            "nodePublishSecretRef": {"name": "not-ours", "namespace": "storage"}}}});
        set.volume_secrets([&csi, &other]);
        assert!(set.holds(SECRETS, Some("storage"), "publish"));
        assert!(set.holds(SECRETS, Some("storage"), "stage"));
        assert!(
            set.holds(SECRETS, Some("app"), "ceph"),
            "the pod's namespace"
        );
        assert!(set.holds(SECRETS, Some("files"), "azure"));
        assert!(!set.holds(SECRETS, Some("storage"), "not-ours"));
        assert!(!set.holds(SECRETS, Some("app"), "publish"));
    }

    #[test]
    fn kinds_have_rules() {
        assert_eq!(rule_of("pods.v1.core"), Rule::Whole);
        assert_eq!(rule_of("services.v1.core"), Rule::Whole);
        // What kubelet reads to mount a CSI volume, and to start a pod of a runtime class.
        assert_eq!(rule_of("csidrivers.v1.storage.k8s.io"), Rule::Whole);
        assert_eq!(rule_of("runtimeclasses.v1.node.k8s.io"), Rule::Whole);
        for kind in MEMBER_KINDS {
            assert_eq!(rule_of(kind), Rule::Members, "{kind}");
        }
        assert_eq!(rule_of("endpointslices.v1.discovery.k8s.io"), Rule::None);
        assert_eq!(
            rule_of("partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core"),
            Rule::None
        );
    }
}
