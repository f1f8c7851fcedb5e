//! Issue 34 item 3: an answer no filter of its chain can change skips the filter stage,
//! decided from the request. A kubelet get of any ConfigMap but `kube-system/kube-proxy` is
//! neither parsed nor timed by the filters; kube-proxy's is still filtered.

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;

fn filtered_answers(hub: &Hub) -> f64 {
    hub.metric("tinyhub_filter_seconds_count{filter_chain=\"inclusterconfig\"}")
        .unwrap_or(0.0)
}

#[test]
fn a_kubelet_get_of_another_configmap_skips_the_filter_stage_and_kube_proxys_does_not() {
    let cloud = Cloud::start();
    cloud.kube_proxy_configmap();
    // Another ConfigMap with a `kubeconfig:` line inclusterconfig would comment out, were it
    // kube-proxy's: it must come back as the cloud holds it.
    let conf = "kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n";
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "kube-proxy", "namespace": "default"},
               "data": {"config.conf": conf}}),
    );
    let dir = TempDir::new("filter-skip");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()).with(&["--working-mode=cloud"]));
    let url = |path: &str| format!("{}{path}", hub.url());

    let other = get(
        &url("/api/v1/namespaces/default/configmaps/kube-proxy"),
        KUBELET,
    );
    assert_eq!(other.status, 200, "{}", other.text());
    assert_eq!(other.json()["data"]["config.conf"], conf, "left as it is");
    assert_eq!(filtered_answers(&hub), 0.0, "no filter stage for it");

    let theirs = get(
        &url("/api/v1/namespaces/kube-system/configmaps/kube-proxy"),
        KUBELET,
    );
    assert_eq!(theirs.status, 200, "{}", theirs.text());
    let filtered = theirs.json()["data"]["config.conf"]
        .as_str()
        .expect("config.conf")
        .to_owned();
    assert!(filtered.contains("#kubeconfig:"), "{filtered}");
    assert_eq!(filtered_answers(&hub), 1.0, "kube-proxy's passes the stage");
}
