//! Objects OpenYurt's response filters read (YurtHub's `pkg/yurthub/filter`), created the way
//! kubeadm, the apiserver's endpoint reconciler, the EndpointSlice controller, kube-proxy's
//! manifests and yurt-manager create them, plus bulk Services and EndpointSlices for benchmarks.
//!
//! Every method creates through the store (watch events as for HTTP writes) and returns
//! the objects as a get answers them.

use serde_json::{Value, json};

use super::super::util::{new_uid, rfc3339, unix_now};
use super::store::Obj;
use super::{Cloud, kind_id};

/// The apiserver addresses [`Cloud::kubernetes_service_fixtures`] puts in the
/// `default/kubernetes` EndpointSlice and Endpoints (two control-plane nodes).
pub const APISERVER_ADDRESSES: [&str; 2] = ["192.168.56.10", "192.168.56.11"];

/// The port the apiserver listens on behind `default/kubernetes` (kubeadm's default).
pub const APISERVER_PORT: u16 = 6443;

/// Label kubelet and yurtadm put on a node of a NodePool.
pub const NODEPOOL_LABEL: &str = "apps.openyurt.io/nodepool";

/// The annotation servicetopology reads on a Service.
pub const TOPOLOGY_ANNOTATION: &str = "openyurt.io/topologyKeys";

/// The annotation nodeportisolation reads on a Service.
pub const NODEPORT_LISTEN_ANNOTATION: &str = "nodeport.openyurt.io/listen";

/// The annotation discardcloudservice reads on a LoadBalancer Service.
pub const DISCARD_ANNOTATION: &str = "svc.openyurt.io/discard";

/// kubeadm's `config.conf` of the `kube-system/kube-proxy` ConfigMap (v1.30), as
/// `kubeadm init` writes it with a pod subnet of 10.244.0.0/16.
pub const KUBE_PROXY_CONFIG_CONF: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: \"\"
  burst: 0
  contentType: \"\"
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: \"\"
  interfaceNamePrefix: \"\"
detectLocalMode: \"\"
enableProfiling: false
healthzBindAddress: \"\"
hostnameOverride: \"\"
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: \"\"
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
metricsBindAddress: \"\"
mode: \"\"
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: \"\"
showHiddenMetricsForAlpha: \"\"
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: \"\"
  rootHnsEndpointName: \"\"
  sourceVip: \"\"";

/// Hands out distinct NodePorts in the default range (30000-32767).
fn node_port(name: &str, i: usize) -> u16 {
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    30000 + ((h as usize + i * 7) % 2768) as u16
}

/// A ClusterIP in 10.96.0.0/12 derived from the name (distinct enough for tests).
fn cluster_ip(ns: &str, name: &str) -> String {
    let h = format!("{ns}/{name}")
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(131).wrapping_add(u32::from(b)));
    format!("10.96.{}.{}", (h >> 8) % 256, h % 253 + 2)
}

impl Cloud {
    /// What the apiserver's endpoint reconciler keeps beside the seeded `default/kubernetes`
    /// Service: the Endpoints `default/kubernetes` (label
    /// `endpointslice.kubernetes.io/skip-mirror=true`) and the EndpointSlice
    /// `default/kubernetes` (label `kubernetes.io/service-name=kubernetes`, addressType
    /// IPv4, port `https` [`APISERVER_PORT`], one ready endpoint per
    /// [`APISERVER_ADDRESSES`], no nodeName). Returns (Service, EndpointSlice, Endpoints).
    pub fn kubernetes_service_fixtures(&self) -> (Value, Value, Value) {
        let service = self
            .get("services", "default", "kubernetes")
            .unwrap_or_else(|| panic!("the seeded default/kubernetes Service is missing"));
        let port = json!({"name": "https", "port": APISERVER_PORT, "protocol": "TCP"});
        let endpoints: Vec<Value> = APISERVER_ADDRESSES
            .iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect();
        let slice = self.create(
            "endpointslices",
            json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes"},
                             "generation": 1},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [port],
            }),
        );
        let addresses: Vec<Value> = APISERVER_ADDRESSES
            .iter()
            .map(|ip| json!({"ip": ip}))
            .collect();
        let eps = self.create(
            "endpoints",
            json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": addresses, "ports": [port]}],
            }),
        );
        (service, slice, eps)
    }

    /// The `kube-system/kube-proxy` ConfigMap `kubeadm init` creates (label
    /// `app=kube-proxy`): `config.conf` is [`KUBE_PROXY_CONFIG_CONF`] (its
    /// `clientConnection` holds `  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf`) and
    /// `kubeconfig.conf` points at this cloud with the pod's service-account credentials.
    pub fn kube_proxy_configmap(&self) -> Value {
        let kubeconfig = format!(
            "apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: {}
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
",
            self.url()
        );
        self.create(
            "configmaps",
            json!({
                "metadata": {"name": "kube-proxy", "namespace": "kube-system",
                             "labels": {"app": "kube-proxy"},
                             "annotations": {"kubeadm.kubernetes.io/component-config.hash":
                                 "sha256:8f3c2b4e6a1d9c7b5e3f1a2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e"}},
                "data": {"config.conf": KUBE_PROXY_CONFIG_CONF, "kubeconfig.conf": kubeconfig},
            }),
        )
    }

    /// A ClusterIP Service `ns/name` (port `http` 80 → 8080, selector `app=<name>`) with
    /// annotation `openyurt.io/topologyKeys: <keys>` when `topology_keys` is set, plus what the
    /// controllers derive from its pods at `endpoints` (`(ip, node)`; node "" leaves
    /// `nodeName` unset): an EndpointSlice `<name>-<5 chars>` (label
    /// `kubernetes.io/service-name=<name>`, managed by the EndpointSlice controller, owned by
    /// the Service, endpoints with conditions, `nodeName` and a Pod `targetRef`) and the
    /// Endpoints `ns/name`. Returns (Service, EndpointSlice, Endpoints).
    pub fn topology_service(
        &self,
        ns: &str,
        name: &str,
        topology_keys: Option<&str>,
        endpoints: &[(&str, &str)],
    ) -> (Value, Value, Value) {
        let mut meta = json!({"name": name, "namespace": ns, "labels": {"app": name}});
        if let Some(keys) = topology_keys {
            meta["annotations"] = json!({TOPOLOGY_ANNOTATION: keys});
        }
        let ip = cluster_ip(ns, name);
        let service = self.create(
            "services",
            json!({
                "metadata": meta,
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
                         "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                    "targetPort": 8080}],
                         "selector": {"app": name}, "sessionAffinity": "None",
                         "type": "ClusterIP"},
                "status": {"loadBalancer": {}},
            }),
        );
        let uid = service["metadata"]["uid"].clone();
        let pods: Vec<(String, String, String)> = endpoints
            .iter()
            .enumerate()
            .map(|(i, (ip, node))| (format!("{name}-{i}"), ip.to_string(), node.to_string()))
            .collect();
        let slice_endpoints: Vec<Value> = pods
            .iter()
            .map(|(pod, ip, node)| {
                let mut ep = json!({
                    "addresses": [ip],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "targetRef": {"kind": "Pod", "namespace": ns, "name": pod, "uid": new_uid()},
                });
                if !node.is_empty() {
                    ep["nodeName"] = json!(node);
                }
                ep
            })
            .collect();
        let slice = self.create(
            "endpointslices",
            json!({
                "metadata": {
                    "generateName": format!("{name}-"), "namespace": ns,
                    "labels": {"kubernetes.io/service-name": name,
                               "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                               "app": name},
                    "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": rfc3339(unix_now())},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                         "uid": uid, "controller": true,
                                         "blockOwnerDeletion": true}],
                    "generation": 1,
                },
                "addressType": "IPv4",
                "endpoints": slice_endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }),
        );
        let addresses: Vec<Value> = pods
            .iter()
            .map(|(pod, ip, node)| {
                let mut a = json!({"ip": ip, "targetRef": {"kind": "Pod", "namespace": ns,
                                                          "name": pod}});
                if !node.is_empty() {
                    a["nodeName"] = json!(node);
                }
                a
            })
            .collect();
        let subsets = if addresses.is_empty() {
            json!([])
        } else {
            json!([{"addresses": addresses,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}])
        };
        let eps = self.create(
            "endpoints",
            json!({
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name},
                             "annotations": {"endpoints.kubernetes.io/last-change-trigger-time":
                                 rfc3339(unix_now())}},
                "subsets": subsets,
            }),
        );
        (service, slice, eps)
    }

    /// An edge NodePool `apps.openyurt.io/v1beta2` `name` as yurt-manager keeps it: spec
    /// `type: Edge` (webhook defaults, label `apps.openyurt.io/nodepool-type=edge`), status
    /// `nodes` (sorted), `readyNodeNum`, `unreadyNodeNum` (written through `/status`).
    pub fn nodepool(&self, name: &str, nodes: &[&str]) -> Value {
        self.create(
            "nodepools",
            json!({
                "metadata": {"name": name,
                             "labels": {"apps.openyurt.io/nodepool-type": "edge"}},
                "spec": {"type": "Edge", "hostNetwork": false, "interConnectivity": false,
                         "enableLeaderElection": false, "leaderElectionStrategy": "random",
                         "leaderReplicas": 1,
                         "poolScopeMetadata": [
                             {"group": "", "version": "v1", "resource": "services"},
                             {"group": "discovery.k8s.io", "version": "v1",
                              "resource": "endpointslices"}]},
            }),
        );
        self.set_nodepool_nodes(name, nodes)
    }

    /// Replaces a NodePool's `status.nodes` (and the ready count), as yurt-manager does when
    /// nodes join or leave.
    pub fn set_nodepool_nodes(&self, name: &str, nodes: &[&str]) -> Value {
        let mut sorted: Vec<&str> = nodes.to_vec();
        sorted.sort_unstable();
        let mut pool = self
            .get("nodepools", "", name)
            .unwrap_or_else(|| panic!("no NodePool {name}"));
        pool["status"] = json!({"nodes": sorted, "readyNodeNum": sorted.len(),
                                "unreadyNodeNum": 0});
        self.update_status("nodepools", pool)
    }

    /// A Ready Node `name` as kubelet registers it (well-known labels, InternalIP
    /// 192.168.1.x, capacity, node info), with `apps.openyurt.io/nodepool=<pool>` and
    /// `openyurt.io/is-edge-worker=true` when `pool` is set, plus `labels`.
    pub fn node(&self, name: &str, pool: Option<&str>, labels: &[(&str, &str)]) -> Value {
        let mut l = json!({
            "beta.kubernetes.io/arch": "arm", "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm", "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
        });
        if let Some(p) = pool {
            l[NODEPOOL_LABEL] = json!(p);
            l["openyurt.io/is-edge-worker"] = json!("true");
        }
        for (k, v) in labels {
            l[*k] = json!(v);
        }
        let n = self.list("nodes", None).len();
        let ip = format!("192.168.1.{}", n % 250 + 2);
        let now = rfc3339(unix_now());
        let node = self.create(
            "nodes",
            json!({
                "metadata": {"name": name, "labels": l,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"podCIDR": format!("10.244.{}.0/24", n % 256),
                         "podCIDRs": [format!("10.244.{}.0/24", n % 256)]},
            }),
        );
        let mut node = node;
        node["status"] = json!({
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "2", "memory": "230Mi", "pods": "110"},
            "capacity": {"cpu": "2", "memory": "256Mi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "arm", "operatingSystem": "linux",
                         "kubeletVersion": "v1.30.0", "kubeProxyVersion": "v1.30.0",
                         "containerRuntimeVersion": "containerd://1.7.13",
                         "osImage": "OpenWrt 23.05.3", "kernelVersion": "5.15.150"},
        });
        self.update_status("nodes", node)
    }

    /// A Service of `svc_type` (`NodePort` or `LoadBalancer`) `ns/name` with NodePorts on
    /// both ports (`http` 80, `https` 443), externalTrafficPolicy Cluster, and annotation
    /// `nodeport.openyurt.io/listen: <listen>` when `listen` is set (may be "").
    pub fn nodeport_service(
        &self,
        ns: &str,
        name: &str,
        listen: Option<&str>,
        svc_type: &str,
    ) -> Value {
        let mut meta = json!({"name": name, "namespace": ns, "labels": {"app": name}});
        if let Some(l) = listen {
            meta["annotations"] = json!({NODEPORT_LISTEN_ANNOTATION: l});
        }
        self.exposed_service(meta, svc_type)
    }

    /// A LoadBalancer Service `ns/name` (with NodePorts and an ingress IP in status) carrying
    /// `svc.openyurt.io/discard: <discard>` when `discard` is set (`"true"` makes
    /// discardcloudservice drop it for kube-proxy).
    pub fn lb_service_discard(&self, ns: &str, name: &str, discard: Option<&str>) -> Value {
        let mut meta = json!({"name": name, "namespace": ns, "labels": {"app": name}});
        if let Some(d) = discard {
            meta["annotations"] = json!({DISCARD_ANNOTATION: d});
        }
        self.exposed_service(meta, "LoadBalancer")
    }

    /// `kube-system/x-tunnel-server-internal-svc` as the yurt-tunnel chart creates it
    /// (ClusterIP; discardcloudservice drops it by name).
    pub fn tunnel_server_internal_service(&self) -> Value {
        let ip = cluster_ip("kube-system", "x-tunnel-server-internal-svc");
        self.create(
            "services",
            json!({
                "metadata": {"name": "x-tunnel-server-internal-svc", "namespace": "kube-system",
                             "labels": {"name": "yurt-tunnel-server"}},
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP",
                         "ports": [{"name": "https", "port": 10250, "protocol": "TCP",
                                    "targetPort": 10263},
                                   {"name": "http", "port": 10255, "protocol": "TCP",
                                    "targetPort": 10264}],
                         "selector": {"k8s-app": "yurt-tunnel-server"},
                         "sessionAffinity": "None"},
                "status": {"loadBalancer": {}},
            }),
        )
    }

    fn exposed_service(&self, meta: Value, svc_type: &str) -> Value {
        let ns = meta["namespace"].as_str().unwrap_or("default").to_string();
        let name = meta["name"].as_str().unwrap_or("").to_string();
        let ip = cluster_ip(&ns, &name);
        let mut spec = json!({
            "clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack", "externalTrafficPolicy": "Cluster",
            "internalTrafficPolicy": "Cluster", "sessionAffinity": "None", "type": svc_type,
            "selector": {"app": name},
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080,
                 "nodePort": node_port(&name, 0)},
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443,
                 "nodePort": node_port(&name, 1)},
            ],
        });
        let mut status = json!({"loadBalancer": {}});
        if svc_type == "LoadBalancer" {
            spec["allocateLoadBalancerNodePorts"] = json!(true);
            status =
                json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "VIP"}]}});
        }
        self.create(
            "services",
            json!({"metadata": meta, "spec": spec, "status": status}),
        )
    }

    /// A Running pod `ns/name` on `node` whose spec sets the in-cluster variables explicitly
    /// (as a managed cloud's admission webhook does): container `app` has
    /// `KUBERNETES_SERVICE_HOST=<host>` and `KUBERNETES_SERVICE_PORT=<port>` among other
    /// variables; container `sidecar` takes `KUBERNETES_SERVICE_HOST` from a ConfigMap
    /// (`valueFrom`) and has no `KUBERNETES_SERVICE_PORT`; the initContainer `init` has both
    /// with `host`/`port` too (serviceenvupdater must leave it alone).
    pub fn pod_with_service_env(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        host: &str,
        port: &str,
    ) -> Value {
        let sa_mount = json!([{"name": "kube-api-access", "readOnly": true,
                               "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
        let pod = self.create(
            "pods",
            json!({
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": {
                    "nodeName": node, "restartPolicy": "Always",
                    "serviceAccountName": "default", "schedulerName": "default-scheduler",
                    "initContainers": [{
                        "name": "init", "image": "registry.example.com/init:1.0",
                        "command": ["/bin/wait-for-apiserver"],
                        "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                {"name": "KUBERNETES_SERVICE_PORT", "value": port}],
                        "volumeMounts": sa_mount,
                    }],
                    "containers": [
                        {"name": "app", "image": "registry.example.com/operator:2.4.1",
                         "env": [{"name": "LOG_LEVEL", "value": "info"},
                                 {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                 {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                                 {"name": "POD_NAME", "valueFrom": {"fieldRef":
                                     {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                         "volumeMounts": sa_mount},
                        {"name": "sidecar", "image": "registry.example.com/sidecar:0.9",
                         "env": [{"name": "KUBERNETES_SERVICE_HOST", "valueFrom":
                                     {"configMapKeyRef": {"name": "apiserver-endpoint",
                                                          "key": "host"}}}],
                         "volumeMounts": sa_mount},
                    ],
                    "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420,
                        "sources": [{"serviceAccountToken": {"expirationSeconds": 3607,
                                                             "path": "token"}}]}}],
                },
            }),
        );
        let mut pod = pod;
        let now = rfc3339(unix_now());
        pod["status"] = json!({"phase": "Running", "podIP": "10.244.1.7",
            "hostIP": "192.168.1.2", "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]});
        self.update_status("pods", pod)
    }

    /// Inserts `count` ClusterIP Services fast (one ADDED event each); returns the
    /// resourceVersion after. Service `i` is `svc-<i:06>` in namespace `svc-<i % 10>`, label
    /// `app=svc-<i:06>`; its `openyurt.io/topologyKeys` annotation is `kubernetes.io/hostname`
    /// when `i % 4 == 0`, `openyurt.io/nodepool` when `i % 4 == 1`, absent otherwise.
    pub fn populate_services(&self, count: usize) -> u64 {
        self.populate_services_from(0, count)
    }

    /// [`Cloud::populate_services`] of Services `first` to `first + count - 1`: the rest of a
    /// set begun by an earlier call (the slices of [`Cloud::populate_endpointslices`] need
    /// Services `0..count`).
    pub fn populate_services_from(&self, first: usize, count: usize) -> u64 {
        let id = kind_id("services");
        let now = rfc3339(unix_now());
        let store = &self.inst.shared.store;
        store.insert_many(id, count, &mut |i, rv| {
            let i = first + i;
            let name = format!("svc-{i:06}");
            let ns = format!("svc-{}", i % 10);
            let uid = new_uid();
            let annotations = match i % 4 {
                0 => format!(r#","annotations":{{"{TOPOLOGY_ANNOTATION}":"kubernetes.io/hostname"}}"#),
                1 => format!(r#","annotations":{{"{TOPOLOGY_ANNOTATION}":"openyurt.io/nodepool"}}"#),
                _ => String::new(),
            };
            let ip = format!("10.{}.{}.{}", 96 + ((i >> 16) & 15), (i >> 8) & 255, i & 255);
            // format! rather than json!: this runs 10^4 times in debug builds. Every
            // interpolated value is alphanumeric, '-', '.', '/' or ':', so no escaping.
            let body = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{now}","labels":{{"app":"{name}"}}{annotations}}},"spec":{{"clusterIP":"{ip}","clusterIPs":["{ip}"],"ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","internalTrafficPolicy":"Cluster","ports":[{{"name":"http","port":80,"protocol":"TCP","targetPort":8080}}],"selector":{{"app":"{name}"}},"sessionAffinity":"None","type":"ClusterIP"}},"status":{{"loadBalancer":{{}}}}}}"#
            );
            Obj {
                rv,
                namespace: ns,
                name: name.clone(),
                labels: vec![("app".into(), name)],
                node_name: String::new(),
                phase: String::new(),
                created: now.clone(),
                body,
            }
        });
        store.current_rv()
    }

    /// Inserts `count` v1 EndpointSlices fast (one ADDED event each), the slices of
    /// [`Cloud::populate_services`]'s Services; returns the resourceVersion after. Slice `i`
    /// is `svc-<i:06>-ab12c` in namespace `svc-<i % 10>`, labels
    /// `kubernetes.io/service-name=svc-<i:06>` and the controller's managed-by, with 3 ready
    /// endpoints on nodes `node-<(i + k) % nodes>` (k = 0, 1, 2).
    pub fn populate_endpointslices(&self, count: usize, nodes: usize) -> u64 {
        let id = kind_id("endpointslices");
        let now = rfc3339(unix_now());
        let store = &self.inst.shared.store;
        let nodes = nodes.max(1);
        store.insert_many(id, count, &mut |i, rv| {
            let service = format!("svc-{i:06}");
            let name = format!("{service}-ab12c");
            let ns = format!("svc-{}", i % 10);
            let uid = new_uid();
            let endpoints: Vec<String> = (0..3)
                .map(|k| {
                    let n = (i + k) % nodes;
                    format!(
                        r#"{{"addresses":["10.244.{}.{}"],"conditions":{{"ready":true,"serving":true,"terminating":false}},"nodeName":"node-{n}","targetRef":{{"kind":"Pod","namespace":"{ns}","name":"{service}-{k}"}}}}"#,
                        n % 256,
                        (i * 3 + k) % 250 + 2
                    )
                })
                .collect();
            let body = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{now}","generation":1,"labels":{{"kubernetes.io/service-name":"{service}","endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}}}},"addressType":"IPv4","endpoints":[{}],"ports":[{{"name":"http","port":8080,"protocol":"TCP"}}]}}"#,
                endpoints.join(",")
            );
            Obj {
                rv,
                namespace: ns,
                name,
                labels: vec![
                    ("kubernetes.io/service-name".into(), service),
                    (
                        "endpointslice.kubernetes.io/managed-by".into(),
                        "endpointslice-controller.k8s.io".into(),
                    ),
                ],
                node_name: String::new(),
                phase: String::new(),
                created: now.clone(),
                body,
            }
        });
        store.current_rv()
    }
}
