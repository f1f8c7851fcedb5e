//! The set-up `make demo` (examples/demo.rs) and `make try` (examples/try.rs) share: the
//! stand-in cloud's objects (a node, five pods, a configmap) and the hub in front of it.
//!
//! Included by each example as `mod common;` (a directory without a `main.rs` is no example
//! of its own); the stand-in cloud itself is tests/support's, never a copy.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::hub::HubSpec;
use crate::support::{Auth, Cloud, KubeconfigOptions};

/// What [`seed`] creates, as the examples tell it.
pub const SEEDED: &str = "node edge-1, 5 pods (3 on edge-1) and configmap default/settings";

/// A running pod of `app` in `ns`, scheduled on `node`.
pub fn pod(ns: &str, name: &str, node: &str, app: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
           "spec": {"nodeName": node, "containers": [{"name": "main", "image": format!("{app}:1")}]},
           "status": {"phase": "Running"}})
}

/// Creates the examples' objects in `cloud` (see [`SEEDED`]).
pub fn seed(cloud: &Cloud) {
    cloud.create(
        "nodes",
        json!({"metadata": {"name": "edge-1", "labels": {"node-role.kubernetes.io/edge": ""}}}),
    );
    for (ns, name, node, app) in [
        ("default", "web-1", "edge-1", "web"),
        ("default", "web-2", "edge-1", "web"),
        ("kube-system", "kube-proxy-edge-1", "edge-1", "kube-proxy"),
        ("default", "web-3", "edge-2", "web"),
        ("default", "db-1", "cloud-1", "db"),
    ] {
        cloud.create("pods", pod(ns, name, node, app));
    }
    cloud.create("configmaps", json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"greeting": "hello from the cloud"}}));
}

/// The real `tinyhub` binary in front of `cloud` as node edge-1 (a client certificate in
/// `dir/hub.kubeconfig`), its root in `dir/root` and its cache in `dir/cache`, kubectl a cache
/// agent too; the test defaults of [`HubSpec::command`] hold: ports chosen by the system,
/// health checks every second, no dummy interface. `Hub::start` runs it.
pub fn hub_spec(cloud: &Cloud, dir: &Path) -> HubSpec {
    let node = Auth::CertInline(cloud.issue_client("system:node:edge-1", &["system:nodes"]));
    HubSpec::with_auth(
        cloud,
        dir,
        KubeconfigOptions::from(node).named("hub.kubeconfig"),
    )
    .with(&["--cache-agents=kubectl"])
}
