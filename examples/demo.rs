//! `make demo`: tinyhub's main job, end to end, on this machine. A stand-in cloud apiserver
//! (TLS, client certificates) runs in this process; the real `tinyhub` binary runs beside it;
//! a kubelet-like client and kubectl read through the hub; the cloud is stopped and the same
//! reads are answered from the hub's disk cache; the cloud comes back and the hub forwards
//! again. Each step is printed, and at the end where the cache was and what it held.

#[path = "../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::pod;
use serde_json::Value;
use support::hub::{Events, Hub, KUBELET, TempDir, files_under, get, kubectl_command, stream};
use support::{Cloud, write_plain_kubeconfig};

fn step(n: u32, text: &str) {
    println!("\n== {n}. {text}");
}

fn names(list: &Value) -> String {
    let items: Vec<&str> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    items.join(", ")
}

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) {
    println!("   $ kubectl {}", args.join(" "));
    let out = kubectl_command(kubeconfig, cache, cache)
        .args(args)
        .output();
    match out {
        Ok(out) => {
            for line in String::from_utf8_lossy(&out.stdout)
                .lines()
                .chain(String::from_utf8_lossy(&out.stderr).lines())
            {
                println!("     {line}");
            }
            assert!(out.status.success(), "kubectl failed");
        }
        Err(e) => {
            panic!("kubectl cannot run ({e}): install it (Debian package kubectl; `make tools`)")
        }
    }
}

fn read_through(hub: &Hub, what: &str, path: &str) -> Value {
    let reply = get(&format!("{}{path}", hub.url()), KUBELET);
    let body = reply.json();
    let summary = if body["items"].is_array() {
        format!(
            "{} items: {}",
            body["items"].as_array().map_or(0, Vec::len),
            names(&body)
        )
    } else {
        format!(
            "{} {}",
            body["kind"].as_str().unwrap_or("?"),
            body["metadata"]["name"].as_str().unwrap_or("")
        )
    };
    println!(
        "   {what:<34} GET {path}\n   {:<34} -> {} {summary}",
        "", reply.status
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    body
}

/// What a kubelet reads at start: its pods, its node, a configmap.
fn kubelet_reads(hub: &Hub) {
    for (what, path) in [
        (
            "kubelet lists its pods",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
        ),
        ("kubelet reads its node", "/api/v1/nodes/edge-1"),
        (
            "kubelet reads a configmap",
            "/api/v1/namespaces/default/configmaps/settings",
        ),
    ] {
        read_through(hub, what, path);
    }
}

/// What a file of the cache holds, by its path under the cache root (README.md, "What it
/// caches and what it answers offline", has the layout).
fn describe(rel: &str) -> String {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["version"] => {
            "the cloud's /version: its Kubernetes version, asked by kubectl first".into()
        }
        [doc] => match doc.split_once(".aggregated.") {
            Some(("_api", form)) => {
                format!("/api: the core group's resources in one answer (aggregated, {form})")
            }
            Some((_, form)) => {
                format!("/apis: every group's resources in one answer (aggregated, {form})")
            }
            None => document(doc),
        },
        [component, "tokens", ..] => format!("a service-account token {component} asked for"),
        ["kubelet", kind, "kube-node-lease", node] if kind.starts_with("leases.") => {
            format!("node {node}'s lease: the hub renews it and answers kubelet with it")
        }
        [component, kind, rest @ ..] => {
            let resource = kind.split('.').next().unwrap_or(kind);
            format!("{component}'s read of {resource} {}", rest.join("/"))
        }
        _ => String::new(),
    }
}

/// What a legacy discovery document is, by its file name (its path, `/` turned into `_`).
fn document(file: &str) -> String {
    let path = file.replace('_', "/");
    match path.as_str() {
        "/api" => "/api: the core group's versions".into(),
        "/apis" => "/apis: the API groups and their versions".into(),
        _ => format!("{path}: the resources of that group version"),
    }
}

fn main() {
    let started = Instant::now();
    let dir = TempDir::new("demo");

    step(
        1,
        "Start a stand-in cloud apiserver (TLS, client-certificate auth) and seed it",
    );
    let cloud = Cloud::start();
    common::seed(&cloud);
    println!("   cloud at {} with {}", cloud.url(), common::SEEDED);

    step(
        2,
        "Start tinyhub in front of it (kubectl is a cache agent too, for this demo)",
    );
    let hub = Hub::start(&common::hub_spec(&cloud, dir.path()));
    println!(
        "   tinyhub proxy at {}, health and metrics at {}",
        hub.url(),
        hub.serve_url()
    );
    println!("   cache at {}", hub.spec.cache_dir.display());
    let kubeconfig = write_plain_kubeconfig(dir.path(), "kubectl.kubeconfig", &hub.url());
    let kubectl_cache = dir.path().join("kubectl");
    std::fs::create_dir_all(&kubectl_cache).expect("kubectl cache dir");

    step(
        3,
        "Online: a kubelet and kubectl read through the hub, which forwards to the cloud",
    );
    kubelet_reads(&hub);
    // Tables (plain `kubectl get`) are computed by the apiserver and not cached; these reads
    // return objects, which the hub persists for the kubectl component.
    kubectl(
        &kubeconfig,
        &kubectl_cache,
        &["get", "pods", "-A", "-o", "name"],
    );
    kubectl(
        &kubeconfig,
        &kubectl_cache,
        &["get", "configmap", "settings", "-o", "yaml"],
    );
    let cache = hub.spec.cache_dir.clone();
    assert!(hub.wait_cached(
        &[
            "kubelet/pods.v1.core/default/web-1",
            "kubelet/nodes.v1.core/edge-1",
            "kubectl/configmaps.v1.core/default/settings",
            "kubectl/pods.v1.core/default/db-1",
        ],
        Duration::from_secs(10)
    ));

    step(
        4,
        "What the hub persisted (YurtHub's layout: component/resource.version.group/namespace/name)",
    );
    let listed = cached_files(&cache);
    let width = listed.iter().map(String::len).max().unwrap_or(0);
    let (objects, documents): (Vec<String>, Vec<String>) =
        listed.into_iter().partition(|rel| rel.contains('/'));
    println!("   Objects, one JSON file each, under the component that read them:");
    for rel in &objects {
        print_file(&cache, rel, width);
    }
    println!(
        "   Discovery documents: what kubectl asks first, to learn which resources and versions\n   \
         the cloud serves; cached so that kubectl works offline too (the file name is the path\n   \
         with `/` turned into `_`):"
    );
    for rel in &documents {
        print_file(&cache, rel, width);
    }

    step(5, "Cut the cloud off");
    cloud.stop();
    let cut = Instant::now();
    assert!(hub.wait_healthy(&cloud, false, Duration::from_secs(20)));
    println!(
        "   the cloud is stopped; the hub's health check marked it unhealthy after {:.1} s",
        cut.elapsed().as_secs_f64()
    );

    step(6, "Offline: the same reads are answered from the cache");
    kubelet_reads(&hub);
    read_through(
        &hub,
        "its pods with a label selector",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&labelSelector=app%3Dweb",
    );
    kubectl(&kubeconfig, &kubectl_cache, &["get", "pods", "-A"]);
    kubectl(
        &kubeconfig,
        &kubectl_cache,
        &[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.greeting}{\"\\n\"}",
        ],
    );
    let watch_started = Instant::now();
    let (status, body) = stream(
        &format!("{}/api/v1/pods?watch=1&timeoutSeconds=2", hub.url()),
        KUBELET,
    );
    let event = Events::new(body).next_event();
    println!(
        "   a watch is held open without events and ends cleanly: status {status}, {} event(s), {:.1} s",
        usize::from(event.is_some()),
        watch_started.elapsed().as_secs_f64()
    );
    let delete = support::hub::call(
        "DELETE",
        &format!("{}/api/v1/namespaces/default/pods/web-1", hub.url()),
        KUBELET,
        &[],
        None,
    );
    println!(
        "   a delete while offline is refused: {} {}",
        delete.status,
        delete.json()["reason"].as_str().unwrap_or("")
    );
    println!(
        "   answers served from the cache so far: {}",
        hub.metric("tinyhub_offline_answers_total").unwrap_or(0.0)
    );

    step(7, "The cloud comes back: the hub forwards again");
    cloud.restart();
    let back = Instant::now();
    assert!(hub.wait_healthy(&cloud, true, Duration::from_secs(30)));
    println!(
        "   healthy again after {:.1} s",
        back.elapsed().as_secs_f64()
    );
    cloud.reset_requests();
    cloud.create("pods", pod("default", "web-4", "edge-1", "web"));
    read_through(
        &hub,
        "kubelet lists its pods",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
    );
    println!(
        "   the cloud saw {} request(s) for it",
        cloud.count(|r| r.path == "/api/v1/pods")
    );

    let files = cached_files(&cache);
    let documents = files.iter().filter(|rel| !rel.contains('/')).count();
    let mut by_component: BTreeMap<&str, usize> = BTreeMap::new();
    for (component, _) in files.iter().filter_map(|rel| rel.split_once('/')) {
        *by_component.entry(component).or_default() += 1;
    }
    let components: Vec<String> = by_component
        .iter()
        .map(|(component, n)| format!("{component} {n}"))
        .collect();
    println!(
        "\nDone in {:.1} s: the hub served the same reads online and offline.\n\
         The cache was {}\n\
         holding {} objects (by component: {}) and {documents} discovery documents, one JSON\n\
         file each, mode 0600. The demo removes it now; a hub keeps its cache in\n\
         --disk-cache-path (default /etc/kubernetes/cache) across restarts.",
        started.elapsed().as_secs_f64(),
        cache.display(),
        files.len() - documents,
        components.join(", ")
    );
}

/// The cache's files, relative to its root, without the store's own (dot-named) ones.
fn cached_files(cache: &Path) -> Vec<String> {
    files_under(cache)
        .iter()
        .map(|path| {
            path.strip_prefix(cache)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .filter(|rel| !rel.starts_with('.'))
        .collect()
}

/// One line of the listing: the file (in a column `width` wide), its size, what it is.
fn print_file(cache: &Path, rel: &str, width: usize) {
    let size = std::fs::metadata(cache.join(rel)).map_or(0, |m| m.len());
    println!("     {rel:<width$} {size:>5} bytes  {}", describe(rel));
}
