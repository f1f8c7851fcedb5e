//! Issue 33: the hub never serves a cache file whose content names another object, nor one
//! past the size bound. A hand copy `ghost-pod` holding `app-000000` made kubelet's offline
//! pod list show that pod twice; an editor's `settings.tmp` answered a
//! `metadata.name=settings` list; a YurtHub `tmp_<name>` leftover did the same; a planted
//! 100 MB file was read whole into the heap by every offline list.

use std::fs::{self, File};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, PodFill};

/// kubelet's pod list, as it asks for it.
const PODS: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0";

/// A hub whose kubelet cache holds pods `app-000000..2` (namespace `app-0`) and `default/web`
/// on `node-0`, and the ConfigMap `default/settings`; the cloud still up, the writer quiet.
struct Scene {
    cloud: Cloud,
    hub: Hub,
    _dir: TempDir,
}

impl Scene {
    fn new(tag: &str) -> Scene {
        let cloud = Cloud::start();
        cloud.populate_pods(&PodFill {
            count: 3,
            namespaces: 1,
            nodes: 1,
            body_bytes: 1_000,
            prefix: "app".into(),
        });
        cloud.create(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "web", "namespace": "default"},
                   "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "busybox"}]}}),
        );
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
        );
        let dir = TempDir::new(tag);
        let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
        for path in [PODS, "/api/v1/namespaces/default/configmaps"] {
            assert_eq!(
                get(&format!("{}{path}", hub.url()), KUBELET).status,
                200,
                "{path}"
            );
        }
        assert!(
            hub.wait_cached(
                &[
                    "kubelet/pods.v1.core/app-0/app-000000",
                    "kubelet/pods.v1.core/default/web",
                    "kubelet/configmaps.v1.core/default/settings",
                ],
                Duration::from_secs(10)
            ),
            "{}",
            hub.logs()
        );
        // A list's commit removes what it did not hold: plant only after the last one.
        hub.wait_cache_quiet();
        Scene {
            cloud,
            hub,
            _dir: dir,
        }
    }

    fn file(&self, rel: &str) -> PathBuf {
        self.hub.spec.cache_dir.join(rel)
    }

    /// Stops the cloud and waits until the hub knows.
    fn offline(&self) {
        self.cloud.stop();
        assert!(
            self.hub
                .wait_healthy(&self.cloud, false, Duration::from_secs(15)),
            "{}",
            self.hub.logs()
        );
    }

    fn list(&self, path: &str) -> Value {
        let r = get(&format!("{}{path}", self.hub.url()), KUBELET);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.json()
    }

    fn status_of(&self, path: &str) -> u16 {
        get(&format!("{}{path}", self.hub.url()), KUBELET).status
    }

    fn refused(&self, reason: &str) -> f64 {
        self.hub
            .metric(&format!(
                "tinyhub_cache_refused_files_total{{reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    }

    /// The hub's warnings naming `rel` as not served.
    fn warnings(&self, rel: &str) -> usize {
        self.hub
            .log_lines(|l| l.starts_with('W') && l.contains("not serving") && l.contains(rel))
    }
}

/// The names of a list's items, sorted, duplicates kept.
fn names(list: &Value) -> Vec<String> {
    let mut names = names_in_order(list);
    names.sort();
    names
}

#[test]
fn a_copy_under_another_name_is_not_a_second_pod() {
    let scene = Scene::new("ghost-pod");
    fs::copy(
        scene.file("kubelet/pods.v1.core/app-0/app-000000"),
        scene.file("kubelet/pods.v1.core/app-0/ghost-pod"),
    )
    .unwrap();
    // A file that names its own path is a cached object like any other (a restored
    // backup, say): still served.
    let mut own: Value =
        serde_json::from_slice(&fs::read(scene.file("kubelet/pods.v1.core/default/web")).unwrap())
            .unwrap();
    own["metadata"]["name"] = json!("restored");
    fs::write(
        scene.file("kubelet/pods.v1.core/default/restored"),
        serde_json::to_vec(&own).unwrap(),
    )
    .unwrap();
    scene.offline();
    let expected = ["app-000000", "app-000001", "app-000002", "restored", "web"];
    for round in 0..2 {
        assert_eq!(names(&scene.list(PODS)), expected, "round {round}");
        // kubelet's pods on the serve port read the same way.
        let served = get(&format!("{}/pods", scene.hub.serve_url()), "test");
        assert_eq!(served.status, 200, "{}", served.text());
        assert_eq!(names(&served.json()), expected, "/pods round {round}");
    }
    // A get by the copy's own name finds nothing: the file is not that pod.
    assert_eq!(
        scene.status_of("/api/v1/namespaces/app-0/pods/ghost-pod"),
        404
    );
    assert_eq!(
        scene.status_of("/api/v1/namespaces/default/pods/restored"),
        200
    );
    // Counted each time, warned of once.
    assert!(scene.refused("names_other") >= 5.0, "{}", scene.hub.logs());
    assert_eq!(scene.warnings("app-0/ghost-pod"), 1, "{}", scene.hub.logs());
}

#[test]
fn an_editors_temporary_copy_never_answers_for_the_object() {
    let scene = Scene::new("settings-tmp");
    fs::write(
        scene.file("kubelet/configmaps.v1.core/default/settings.tmp"),
        br#"{"metadata":{"name":"settings","namespace":"default","resourceVersion":"1"},"data":{"a":"edited"}}"#,
    )
    .unwrap();
    scene.offline();
    let list =
        scene.list("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dsettings");
    assert_eq!(names(&list), ["settings"], "{list}");
    assert_eq!(list["items"][0]["data"]["a"], "1", "{list}");
    assert_eq!(
        scene.status_of("/api/v1/namespaces/default/configmaps/settings.tmp"),
        404
    );
}

#[test]
fn a_yurthub_temporary_leftover_is_not_served() {
    let scene = Scene::new("tmp-web");
    // YurtHub writes `tmp_<name>` beside the target and renames it; a crash leaves it.
    fs::copy(
        scene.file("kubelet/pods.v1.core/default/web"),
        scene.file("kubelet/pods.v1.core/default/tmp_web"),
    )
    .unwrap();
    scene.offline();
    assert_eq!(
        names(&scene.list(PODS)),
        ["app-000000", "app-000001", "app-000002", "web"]
    );
    assert_eq!(
        names(&scene.list("/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dnode-0")),
        ["web"]
    );
    assert_eq!(
        scene.status_of("/api/v1/namespaces/default/pods/tmp_web"),
        404
    );
}

#[test]
fn a_huge_file_among_the_pods_is_never_read() {
    let scene = Scene::new("huge-file");
    // Sparse: 100 MB to anyone who reads it, no disk used.
    File::create(scene.file("kubelet/pods.v1.core/app-0/huge"))
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    scene.offline();
    let before = proc_status(scene.hub.pid(), "VmHWM:");
    for _ in 0..2 {
        assert_eq!(
            names(&scene.list(PODS)),
            ["app-000000", "app-000001", "app-000002", "web"]
        );
    }
    let after = proc_status(scene.hub.pid(), "VmHWM:");
    assert!(
        after - before < 8 * 1024,
        "offline lists beside a 100 MB file raised the peak RSS from {before} to {after} KiB"
    );
    assert_eq!(scene.status_of("/api/v1/namespaces/app-0/pods/huge"), 404);
    assert!(scene.refused("size") >= 3.0, "{}", scene.hub.logs());
    assert_eq!(scene.warnings("app-0/huge"), 1, "{}", scene.hub.logs());
}
