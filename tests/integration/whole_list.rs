//! Issue 28, item 2: the cloud's whole answer wins. An object cached with a resourceVersion
//! above the cloud's (planted on disk, or left from before an etcd restore) is replaced by
//! the next whole list, and one the cloud does not have is removed, on disk and offline.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

fn pod(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": image}]},
        "status": {"phase": "Running"}
    })
}

fn pod_file(cache: &Path, name: &str) -> PathBuf {
    cache.join("kubelet/pods.v1.core/default").join(name)
}

/// Writes `object` to `path` as the store would (0600), behind the hub's back.
fn plant(path: &Path, object: &Value) {
    fs::write(path, serde_json::to_vec(object).unwrap()).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

fn image(object: &Value) -> &str {
    object["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or("")
}

const KUBELET_PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";

#[test]
fn a_whole_list_replaces_objects_cached_with_higher_resource_versions() {
    let cloud = Cloud::start();
    cloud.create("pods", pod("web-1", "nginx:1"));
    cloud.create("pods", pod("web-2", "nginx:1"));
    let dir = TempDir::new("whole-list");
    let mut hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let cache = hub.spec.cache_dir.clone();
    let (web_1, planted) = (pod_file(&cache, "web-1"), pod_file(&cache, "planted"));
    assert_eq!(
        get(&format!("{}{KUBELET_PODS}", hub.url()), KUBELET).status,
        200
    );
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/default/web-1",
                "kubelet/pods.v1.core/default/web-2"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();

    // With the hub stopped (its index is built at start), an attacker on the node, or an
    // etcd since restored to an older state, leaves web-1 with another image and a `planted`
    // pod the cloud does not have, both at a resourceVersion above any the cloud has given.
    hub.kill9();
    let mut changed = read_json(&web_1).expect("web-1 cached");
    changed["metadata"]["resourceVersion"] = json!("99999999");
    changed["spec"]["containers"][0]["image"] = json!("evil:1");
    plant(&web_1, &changed);
    let mut extra = changed.clone();
    extra["metadata"]["name"] = json!("planted");
    extra["metadata"]["uid"] = json!("planted-uid");
    plant(&planted, &extra);
    let hub = Hub::start(&hub.spec);

    // kubelet's next list is the cloud's whole answer for that scope: it wins.
    let listed = get(&format!("{}{KUBELET_PODS}", hub.url()), KUBELET);
    assert_eq!(listed.status, 200);
    let cloud_rv = listed.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!(cloud_rv < 99_999_999);
    assert!(
        eventually(Duration::from_secs(10), || {
            !planted.exists() && read_json(&web_1).is_some_and(|p| image(&p) == "nginx:1")
        }),
        "web-1: {:?}, planted there: {}\n{}",
        read_json(&web_1),
        planted.exists(),
        hub.logs()
    );
    assert_ne!(
        read_json(&web_1).unwrap()["metadata"]["resourceVersion"],
        "99999999"
    );

    // Offline, kubelet is answered with the cloud's pods only.
    cloud.stop();
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    let offline = get(&format!("{}{KUBELET_PODS}", hub.url()), KUBELET);
    assert_eq!(offline.status, 200);
    let list = offline.json();
    let items = list["items"].as_array().unwrap();
    let names: BTreeSet<&str> = items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["web-1", "web-2"]));
    assert!(items.iter().all(|p| image(p) == "nginx:1"), "{list}");
}
