//! Issue 30 (OpenYurt #2809/#2810): while the cloud is unreachable, the Services of this
//! node's pods point at where those pods really are. kubelet (emulated by its real request
//! shapes: the strategic merge patch of its status manager, a JSON merge patch, its final
//! delete) reports its pods' new IPs and readiness to the hub, which answers 503 as to every
//! offline write and serves kube-proxy's EndpointSlices and CoreDNS's Endpoints rewritten:
//! as MODIFIED events on the watches they hold, in fresh lists, with the cloud's own
//! resourceVersion, never on disk, never from a client that is not the node's kubelet, and
//! the cloud's objects again once it is back.
//!
//! The watches are read as the raw stream (`Feed`), as an informer's reflector reads it:
//! every MODIFIED the hub sends is seen, at the cloud's resourceVersion. Whether a client's
//! handlers are then called for it is client-go's choice, which no test here can show: a
//! shared informer hands an update at an unchanged resourceVersion only to handlers due a
//! resync (kube-proxy's always are; CoreDNS's informers do not compare; see the README's
//! "Services after an offline reboot").
//!
//! Fixtures: node `edge-1` runs `app/web-a` (10.244.1.10) and `app/web-b` (10.244.1.11) of
//! Service `app/web`; its EndpointSlice `web-x` and Endpoints `web` list both and `web-c`
//! (10.244.2.7) on node `edge-2`, which must never change.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::feed::Feed;
use crate::support::hub::*;
use crate::support::kubelet::{
    self, KubeletClient, MERGE, Reported, STRATEGIC, merge_patch, restarted_patch,
};
use crate::support::pool::{list_when_warm, service_in};

/// This node (the test hubs' `--node-name`).
const NODE: &str = "edge-1";
/// The Service's namespace.
const NS: &str = "app";
/// kube-proxy's User-Agent.
const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// CoreDNS's User-Agent.
const COREDNS: &str = "coredns/1.11.1 (linux/arm) kubernetes/xyz";
/// kube-proxy's label selector (no headless Services, none another proxy serves), encoded.
const PROXY_SELECTOR: &str = "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";
/// kube-proxy's EndpointSlices.
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
/// The v1beta1 EndpointSlices an older client reads.
const SLICES_V1BETA1: &str = "/apis/discovery.k8s.io/v1beta1/endpointslices";
/// CoreDNS's (and older kube-proxies') core Endpoints.
const ENDPOINTS: &str = "/api/v1/endpoints";
/// kube-proxy's cached copy of the slice, under the cache root.
const SLICE_FILE: &str = "kube-proxy/endpointslices.v1.discovery.k8s.io/app/web-x";
/// CoreDNS's cached copy of the Endpoints, under the cache root.
const ENDPOINTS_FILE: &str = "coredns/endpoints.v1.core/app/web";
/// How soon a change kubelet reported must reach an open watch (the bound).
const DELIVERY: Duration = Duration::from_secs(2);
/// How long a watch must stay quiet after a write that may change nothing.
const QUIET: Duration = Duration::from_secs(3);
/// How long the hub may take to see the cloud gone or back (1 s probes in tests).
const HEALTH: Duration = Duration::from_secs(15);
/// The pods' IPs before and after the reboot, and the endpoint on the other node.
const IP_A: &str = "10.244.1.10";
const IP_B: &str = "10.244.1.11";
const NEW_IP_A: &str = "10.244.1.20";
const OTHER_IP: &str = "10.244.2.7";

/// The cloud with the Service, its two pods on this node, its slice and Endpoints.
struct Fixture {
    cloud: Cloud,
    /// What kubelet reported of `web-a` and `web-b` before the outage.
    reported: [Reported; 2],
    /// `web-a`'s and `web-b`'s uids.
    uids: [String; 2],
    /// The slice and the Endpoints as the cloud holds them.
    slice: Value,
    endpoints: Value,
}

fn fixture() -> Fixture {
    let cloud = Cloud::start();
    cloud.create("services", service_in(NS, "web", "10.96.0.10"));
    let reported = [Reported::running(IP_A, true), Reported::running(IP_B, true)];
    let mut uids = Vec::new();
    for (name, r) in ["web-a", "web-b"].iter().zip(&reported) {
        let pod = cloud.create("pods", kubelet::pod(NS, name, "web", NODE, r));
        assert_eq!(
            pod["status"]["podIP"], r.ips[0],
            "the cloud keeps the status"
        );
        uids.push(pod["metadata"]["uid"].as_str().expect("a uid").to_owned());
    }
    let uids: [String; 2] = uids.try_into().expect("two pods");
    let other_uid = "5c1e4c1c-0000-4000-8000-00000000000c";
    let target =
        |name: &str, uid: &str| json!({"kind": "Pod", "namespace": NS, "name": name, "uid": uid});
    let conditions = json!({"ready": true, "serving": true, "terminating": false});
    let slice = cloud.create(
        "endpointslices",
        json!({
            "metadata": {"name": "web-x", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": "web",
                                    "endpointslice.kubernetes.io/managed-by":
                                        "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [IP_A], "conditions": conditions, "nodeName": NODE,
                 "targetRef": target("web-a", &uids[0])},
                {"addresses": [IP_B], "conditions": conditions, "nodeName": NODE,
                 "targetRef": target("web-b", &uids[1])},
                {"addresses": [OTHER_IP], "conditions": conditions, "nodeName": "edge-2",
                 "targetRef": target("web-c", other_uid)},
            ],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }),
    );
    let endpoints = cloud.create(
        "endpoints",
        json!({
            "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
            "subsets": [{
                "addresses": [
                    {"ip": IP_A, "nodeName": NODE, "targetRef": target("web-a", &uids[0])},
                    {"ip": IP_B, "nodeName": NODE, "targetRef": target("web-b", &uids[1])},
                    {"ip": OTHER_IP, "nodeName": "edge-2", "targetRef": target("web-c", other_uid)},
                ],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }],
        }),
    );
    Fixture {
        cloud,
        reported,
        uids,
        slice,
        endpoints,
    }
}

/// kubelet, online, as it starts: it lists its pods and gets each; they are cached.
fn kubelet_reads_its_pods(hub: &Hub) {
    let kubelet = KubeletClient::node(hub);
    let list = kubelet.list_pods(NODE);
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(item_names(&list.json()).len(), 2, "{}", list.text());
    for name in ["web-a", "web-b"] {
        assert_eq!(kubelet.get_pod(NS, name).status, 200);
    }
    assert!(
        hub.wait_cached(
            &[
                "kubelet/pods.v1.core/app/web-a",
                "kubelet/pods.v1.core/app/web-b"
            ],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
}

/// The cloud goes away and the hub restarts without it (the node rebooted offline).
fn reboot_offline(cloud: &Cloud, hub: Hub) -> Hub {
    hub.wait_cache_quiet();
    cloud.stop();
    let hub = hub.restart();
    assert!(hub.wait_healthy(cloud, false, HEALTH), "{}", hub.logs());
    hub
}

/// The list at `path` as `ua`, which must be answered 200.
fn list(hub: &Hub, path: &str, ua: &str) -> Value {
    let reply = get(&format!("{}{path}", hub.url()), ua);
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.json()
}

/// The object `name` of a list.
fn item<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// An object's (or a list's) `metadata.resourceVersion`.
fn rv_of(object: &Value) -> &str {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

/// A watch of `path` as `ua` from `rv` (with bookmarks, as informers ask).
fn watch_from(hub: &Hub, path: &str, query: &str, rv: &str, ua: &str) -> Feed {
    let sep = if query.is_empty() { "" } else { "&" };
    Feed::open_as(
        &format!(
            "{}{path}?{query}{sep}watch=true&resourceVersion={rv}&allowWatchBookmarks=true\
             &timeoutSeconds=600",
            hub.url()
        ),
        ua,
    )
}

/// The endpoint of a slice whose targetRef names pod `pod`.
fn endpoint<'a>(slice: &'a Value, pod: &str) -> Option<&'a Value> {
    slice["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["targetRef"]["name"] == pod)
}

/// `pod`'s endpoint in `slice` as (addresses, ready, serving); None when it has none.
fn shown(slice: &Value, pod: &str) -> Option<(Value, Value, Value)> {
    endpoint(slice, pod).map(|e| {
        (
            e["addresses"].clone(),
            e["conditions"]["ready"].clone(),
            e["conditions"]["serving"].clone(),
        )
    })
}

/// Where core Endpoints list `pod`: (ip, ready: in `addresses` rather than
/// `notReadyAddresses`); None when they do not.
fn listed(endpoints: &Value, pod: &str) -> Option<(String, bool)> {
    let subsets = endpoints["subsets"].as_array()?;
    subsets.iter().find_map(|s| {
        [("addresses", true), ("notReadyAddresses", false)]
            .iter()
            .find_map(|(field, ready)| {
                s[*field].as_array()?.iter().find_map(|a| {
                    (a["targetRef"]["name"] == pod)
                        .then(|| (a["ip"].as_str().unwrap_or_default().to_owned(), *ready))
                })
            })
    })
}

/// The other node's address of core Endpoints, as it stands.
fn other_address(endpoints: &Value) -> Value {
    endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["addresses"].as_array().into_iter().flatten())
        .find(|a| a["nodeName"] == "edge-2")
        .cloned()
        .unwrap_or(Value::Null)
}

/// `object` without `kind` and `apiVersion`, which a list's items do not carry and a watch
/// event's object does.
fn content(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("kind");
        map.remove("apiVersion");
    }
    object
}

/// A MODIFIED event of object `name` (of the resource watched) that satisfies `pred`.
fn modified(name: &'static str, pred: impl Fn(&Value) -> bool) -> impl Fn(&Value) -> bool {
    move |e: &Value| {
        e["type"] == "MODIFIED" && e["object"]["metadata"]["name"] == name && pred(&e["object"])
    }
}

/// No event but bookmarks for `wait` (the stream must not end either).
fn stays_quiet(feed: &Feed, wait: Duration) {
    let until = Instant::now() + wait;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match feed.quiet(left) {
            None => return,
            Some(Some(e)) if e["type"] == "BOOKMARK" => continue,
            Some(other) => panic!("the watch did not stay quiet: {other:?}"),
        }
    }
}

/// An offline watch held until the cloud came back ends after its last event: the end of the
/// stream within [`HEALTH`], with no ERROR (which would make an informer list again) and no
/// other change before it.
fn ends_cleanly(feed: &Feed, hub: &Hub) {
    let rest = feed.rest_until_end(Instant::now() + HEALTH, hub);
    assert!(rest.is_empty(), "events before the end: {rest:#?}");
}

/// The status manager's round for pod `name`: its GET (answered from kubelet's cache
/// offline), then its patch built from what it got, which offline is answered 503.
fn kubelet_reports(
    hub: &Hub,
    client: &KubeletClient<'_>,
    name: &str,
    content_type: &str,
    patch: impl Fn(&Value) -> Vec<u8>,
) {
    let got = KubeletClient::node(hub).get_pod(NS, name);
    assert_eq!(got.status, 200, "{}", got.text());
    let reply = client.patch_status(NS, name, content_type, &patch(&got.json()));
    assert_eq!(reply.status, 503, "{}", reply.text());
}

/// `client`'s status patch of `web-a` after a restart of its sandbox, with `restarted`.
fn web_a_restarts(hub: &Hub, client: &KubeletClient<'_>, restarted: &Reported) {
    kubelet_reports(hub, client, "web-a", STRATEGIC, |cached| {
        restarted_patch(cached, restarted)
    });
}

/// kubelet's final delete of pod `name` with uid `uid`, answered 503 offline.
fn kubelet_deletes(kubelet: &KubeletClient<'_>, name: &str, uid: &str) {
    let reply = kubelet.delete_pod(NS, name, uid);
    assert_eq!(reply.status, 503, "{}", reply.text());
}

fn now() -> String {
    crate::support::rfc3339(crate::support::unix_now())
}

/// What a test's client reads: kube-proxy's EndpointSlices or CoreDNS's core Endpoints,
/// each with the Service's one object.
#[derive(Clone, Copy)]
enum Kind {
    Slices,
    Endpoints,
}

impl Kind {
    /// The resource's path.
    fn path(self) -> &'static str {
        match self {
            Kind::Slices => SLICES,
            Kind::Endpoints => ENDPOINTS,
        }
    }

    /// The client's query of its lists and watches.
    fn query(self) -> &'static str {
        match self {
            Kind::Slices => PROXY_SELECTOR,
            Kind::Endpoints => "",
        }
    }

    /// The client's list request.
    fn list_path(self) -> String {
        match self.query() {
            "" => self.path().to_owned(),
            query => format!("{}?{query}", self.path()),
        }
    }

    /// The client's User-Agent.
    fn ua(self) -> &'static str {
        match self {
            Kind::Slices => KUBE_PROXY,
            Kind::Endpoints => COREDNS,
        }
    }

    /// The Service's object of this kind.
    fn name(self) -> &'static str {
        match self {
            Kind::Slices => "web-x",
            Kind::Endpoints => "web",
        }
    }

    /// The client's cached copy of the object, under the cache root.
    fn file(self) -> &'static str {
        match self {
            Kind::Slices => SLICE_FILE,
            Kind::Endpoints => ENDPOINTS_FILE,
        }
    }

    /// The field that lists the object's addresses.
    fn addresses(self) -> &'static str {
        match self {
            Kind::Slices => "endpoints",
            Kind::Endpoints => "subsets",
        }
    }

    /// Whether `object` lists pod `pod` at `ip` (and at no other address).
    fn lists_at(self, object: &Value, pod: &str, ip: &str) -> bool {
        match self {
            Kind::Slices => {
                shown(object, pod).is_some_and(|(addresses, ..)| addresses == json!([ip]))
            }
            Kind::Endpoints => listed(object, pod).is_some_and(|(at, _)| at == ip),
        }
    }

    /// Whether `object` lists pod `pod` as ready; None when it does not list it.
    fn ready(self, object: &Value, pod: &str) -> Option<bool> {
        match self {
            Kind::Slices => shown(object, pod).and_then(|(_, ready, _)| ready.as_bool()),
            Kind::Endpoints => listed(object, pod).map(|(_, ready)| ready),
        }
    }

    /// Whether `object` lists pod `pod` at all.
    fn lists(self, object: &Value, pod: &str) -> bool {
        match self {
            Kind::Slices => endpoint(object, pod).is_some(),
            Kind::Endpoints => listed(object, pod).is_some(),
        }
    }
}

/// The client's list of `kind` now, answered 200.
fn list_of(hub: &Hub, kind: Kind) -> Value {
    list(hub, &kind.list_path(), kind.ua())
}

/// The client's watch of `kind` from `rv`.
fn watch_of(hub: &Hub, kind: Kind, rv: &str) -> Feed {
    watch_from(hub, kind.path(), kind.query(), rv, kind.ua())
}

/// The bytes of the client's cached copy of `kind` on disk, once written and settled.
fn on_disk_when_cached(hub: &Hub, dir: &TempDir, kind: Kind) -> Vec<u8> {
    assert!(
        hub.wait_cached(&[kind.file()], Duration::from_secs(10)),
        "{}",
        hub.logs()
    );
    hub.wait_cache_quiet();
    std::fs::read(dir.path().join("cache").join(kind.file())).expect("cached")
}

/// The disk cache of `kind` still holds `on_disk` (the cloud's bytes) once settled.
fn disk_still_holds(hub: &Hub, dir: &TempDir, kind: Kind, on_disk: &[u8]) {
    hub.wait_cache_quiet();
    let now_on_disk = std::fs::read(dir.path().join("cache").join(kind.file())).expect("cached");
    assert!(
        now_on_disk == on_disk,
        "the disk cache changed: {}\nwas: {}",
        String::from_utf8_lossy(&now_on_disk),
        String::from_utf8_lossy(on_disk)
    );
}

/// A fresh list of `kind` holds `object` as the watch sent it.
fn a_fresh_list_agrees(hub: &Hub, kind: Kind, object: &Value, why: &str) {
    let fresh = list_of(hub, kind);
    assert_eq!(content(item(&fresh, kind.name())), content(object), "{why}");
}

/// Online, kubelet reads its pods and the client of `kind` lists (kube-proxy from the
/// hub's pool cache, and watches from there), which lands in its disk cache; then the node
/// reboots with the cloud gone. The hub after the reboot and the cached bytes.
fn cached_then_rebooted_offline(cloud: &Cloud, dir: &TempDir, kind: Kind) -> (Hub, Vec<u8>) {
    let hub = Hub::start(&HubSpec::for_cloud(cloud, dir.path()));
    kubelet_reads_its_pods(&hub);
    let online_watch = match kind {
        Kind::Slices => {
            let online = list_when_warm(&hub, &kind.list_path(), kind.ua());
            Some(watch_of(&hub, kind, rv_of(&online)))
        }
        Kind::Endpoints => {
            list_of(&hub, kind);
            None
        }
    };
    let on_disk = on_disk_when_cached(&hub, dir, kind);
    drop(online_watch);
    (reboot_offline(cloud, hub), on_disk)
}

/// The object of the MODIFIED of `kind`'s object satisfying `pred` that `write` must bring
/// to `feed` within [`DELIVERY`].
fn modified_after(
    feed: &Feed,
    hub: &Hub,
    kind: Kind,
    write: impl FnOnce(),
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let sent = Instant::now();
    write();
    let event = feed.change_until(sent + DELIVERY, hub, modified(kind.name(), pred));
    event["object"].clone()
}

/// kubelet reports web-a's restart (`restarted`, at [`NEW_IP_A`]): the object of the
/// MODIFIED that shows it, within [`DELIVERY`].
fn web_a_moves(
    feed: &Feed,
    hub: &Hub,
    kind: Kind,
    kubelet: &KubeletClient<'_>,
    restarted: &Reported,
) -> Value {
    modified_after(
        feed,
        hub,
        kind,
        || web_a_restarts(hub, kubelet, restarted),
        |o| kind.lists_at(o, "web-a", NEW_IP_A),
    )
}

/// kubelet's merge patch makes web-b (`reported` before) unready: the object of the
/// MODIFIED that shows it, within [`DELIVERY`].
fn web_b_turns_unready(
    feed: &Feed,
    hub: &Hub,
    kind: Kind,
    kubelet: &KubeletClient<'_>,
    reported: &Reported,
) -> Value {
    let write = || {
        kubelet_reports(hub, kubelet, "web-b", MERGE, |cached| {
            merge_patch(cached, &reported.with_ready(false, &now()))
        })
    };
    modified_after(feed, hub, kind, write, |o| {
        kind.ready(o, "web-b") == Some(false)
    })
}

/// kubelet's final delete of web-b (uid `uid`): the object of the MODIFIED without it,
/// within [`DELIVERY`].
fn web_b_is_deleted(
    feed: &Feed,
    hub: &Hub,
    kind: Kind,
    kubelet: &KubeletClient<'_>,
    uid: &str,
) -> Value {
    modified_after(
        feed,
        hub,
        kind,
        || kubelet_deletes(kubelet, "web-b", uid),
        |o| !kind.lists(o, "web-b"),
    )
}

/// The cloud comes back: the held offline watch gets the cloud's object (listing `web-b`
/// again) with its addresses, then ends cleanly, and the hub sees the cloud healthy.
fn the_clouds_object_once_back(cloud: &Cloud, hub: &Hub, feed: &Feed, kind: Kind, clouds: &Value) {
    cloud.restart();
    let event = feed.change_until(
        Instant::now() + HEALTH,
        hub,
        modified(kind.name(), |o| kind.lists(o, "web-b")),
    );
    assert_eq!(event["object"][kind.addresses()], clouds[kind.addresses()]);
    ends_cleanly(feed, hub);
    assert!(hub.wait_healthy(cloud, true, HEALTH), "{}", hub.logs());
}

#[test]
fn after_an_offline_reboot_kube_proxys_slice_follows_the_nodes_pods_until_the_cloud_is_back() {
    let kind = Kind::Slices;
    let Fixture {
        cloud,
        reported,
        uids,
        slice: cloud_slice,
        ..
    } = fixture();
    let other = endpoint(&cloud_slice, "web-c").cloned();
    let dir = TempDir::new("endpoints-overlay-reboot");

    // 1. Online: kubelet reads its pods; kube-proxy lists and watches the slices (from the
    //    hub's pool cache), which lands in its disk cache.
    // 2. The node reboots with the cloud gone.
    let (hub, on_disk) = cached_then_rebooted_offline(&cloud, &dir, kind);

    // 3. kube-proxy starts: its list (the old IPs, from disk) and its watch from there.
    let offline = list_of(&hub, kind);
    let slice = item(&offline, "web-x");
    assert_eq!(shown(slice, "web-a").unwrap().0, json!([IP_A]));
    assert_eq!(rv_of(slice), rv_of(&cloud_slice));
    let feed = watch_of(&hub, kind, rv_of(&offline));

    // 4. kubelet reports web-a's new IP after the restart of its sandbox: 503, and within
    //    2 s kube-proxy's watch gets the slice with it, at the cloud's resourceVersion.
    let kubelet = KubeletClient::node(&hub);
    let restarted = reported[0].restarted(NEW_IP_A, &now());
    let object = &web_a_moves(&feed, &hub, kind, &kubelet, &restarted);
    assert_eq!(
        rv_of(object),
        rv_of(&cloud_slice),
        "the cloud's resourceVersion"
    );
    assert_eq!(
        shown(object, "web-a"),
        Some((json!([NEW_IP_A]), json!(true), json!(true)))
    );
    assert_eq!(
        shown(object, "web-b"),
        Some((json!([IP_B]), json!(true), json!(true)))
    );
    assert_eq!(endpoint(object, "web-c").cloned(), other);
    a_fresh_list_agrees(&hub, kind, object, "a fresh list agrees");

    // 5. A merge patch makes web-b unready: neither ready nor serving.
    let object = &web_b_turns_unready(&feed, &hub, kind, &kubelet, &reported[1]);
    assert_eq!(
        shown(object, "web-b"),
        Some((json!([IP_B]), json!(false), json!(false)))
    );
    assert_eq!(shown(object, "web-a").unwrap().0, json!([NEW_IP_A]));
    assert_eq!(endpoint(object, "web-c").cloned(), other);
    assert_eq!(rv_of(object), rv_of(&cloud_slice));

    // 6. The same patch (web-a to yet another IP) from clients that are not the node's
    //    kubelet: a pod's token with kubelet's User-Agent, and kube-proxy with the node's
    //    credential. Both 503, nothing changes.
    let moved = reported[0].restarted("10.244.1.66", &now());
    web_a_restarts(
        &hub,
        &KubeletClient::with_token(&hub, "a-pods-token"),
        &moved,
    );
    web_a_restarts(&hub, &KubeletClient::as_component(&hub, KUBE_PROXY), &moved);
    a_fresh_list_agrees(&hub, kind, object, "a client not kubelet changed the slice");
    assert_eq!(
        hub.metric("tinyhub_endpoints_overlay_captures_total{outcome=\"not_kubelet\"}"),
        Some(2.0),
        "both refused writes counted on the metrics page"
    );
    stays_quiet(&feed, QUIET);

    // 7. kubelet's final delete of web-b: its endpoint is gone.
    let object = &web_b_is_deleted(&feed, &hub, kind, &kubelet, &uids[1]);
    assert_eq!(shown(object, "web-a").unwrap().0, json!([NEW_IP_A]));
    assert_eq!(endpoint(object, "web-c").cloned(), other);
    assert_eq!(object["endpoints"].as_array().map(Vec::len), Some(2));

    // 8. The disk cache still holds the cloud's bytes.
    disk_still_holds(&hub, &dir, kind, &on_disk);

    // 9. The cloud is back: the watch gets the cloud's slice (the old IPs, both pods), then
    //    ends cleanly (the hold of an offline watch ends at the recovery, and kube-proxy's
    //    informer watches again, now from the cloud); a new list is the cloud's; kubelet's
    //    next patch reaches the cloud.
    cloud.reset_requests();
    the_clouds_object_once_back(&cloud, &hub, &feed, kind, &cloud_slice);
    let back = list_when_warm(&hub, &kind.list_path(), KUBE_PROXY);
    assert_eq!(
        item(&back, "web-x")["endpoints"],
        cloud.get("endpointslices", NS, "web-x").unwrap()["endpoints"]
    );
    kubelet_reports_online(&hub, &cloud, &restarted);
}

/// Online again, kubelet's status patch goes to the cloud (nothing captured).
fn kubelet_reports_online(hub: &Hub, cloud: &Cloud, reported: &Reported) {
    let kubelet = KubeletClient::node(hub);
    let got = kubelet.get_pod(NS, "web-a");
    assert_eq!(got.status, 200, "{}", got.text());
    let _ = kubelet.patch_status(
        NS,
        "web-a",
        STRATEGIC,
        &restarted_patch(&got.json(), reported),
    );
    assert!(
        cloud
            .wait_for_request(
                |r| r.method == "PATCH" && r.path == "/api/v1/namespaces/app/pods/web-a/status",
                Duration::from_secs(5)
            )
            .is_some(),
        "{:#?}",
        cloud.requests()
    );
}

#[test]
fn after_an_offline_reboot_coredns_endpoints_follow_the_nodes_pods_until_the_cloud_is_back() {
    let kind = Kind::Endpoints;
    let Fixture {
        cloud,
        reported,
        uids,
        endpoints: cloud_endpoints,
        ..
    } = fixture();
    let other = other_address(&cloud_endpoints);
    let dir = TempDir::new("endpoints-overlay-core");
    let (hub, on_disk) = cached_then_rebooted_offline(&cloud, &dir, kind);

    // CoreDNS starts offline: its list from disk, its watch from there.
    let offline = list_of(&hub, kind);
    assert_eq!(
        listed(item(&offline, "web"), "web-a"),
        Some((IP_A.to_owned(), true))
    );
    let feed = watch_of(&hub, kind, rv_of(&offline));

    // web-a's new IP, by kubelet's strategic merge patch.
    let kubelet = KubeletClient::node(&hub);
    let restarted = reported[0].restarted(NEW_IP_A, &now());
    let object = &web_a_moves(&feed, &hub, kind, &kubelet, &restarted);
    assert_eq!(listed(object, "web-a"), Some((NEW_IP_A.to_owned(), true)));
    assert_eq!(listed(object, "web-b"), Some((IP_B.to_owned(), true)));
    assert_eq!(other_address(object), other);
    assert_eq!(
        rv_of(object),
        rv_of(&cloud_endpoints),
        "the cloud's resourceVersion"
    );
    a_fresh_list_agrees(&hub, kind, object, "a fresh list agrees");

    // web-b unready, by a merge patch: it moves to notReadyAddresses.
    let object = &web_b_turns_unready(&feed, &hub, kind, &kubelet, &reported[1]);
    assert_eq!(listed(object, "web-b"), Some((IP_B.to_owned(), false)));
    assert_eq!(listed(object, "web-a"), Some((NEW_IP_A.to_owned(), true)));
    assert_eq!(other_address(object), other);
    a_fresh_list_agrees(&hub, kind, object, "a fresh list agrees");

    // A pod's token with kubelet's User-Agent changes nothing.
    kubelet_reports(
        &hub,
        &KubeletClient::with_token(&hub, "a-pods-token"),
        "web-b",
        MERGE,
        |cached| merge_patch(cached, &reported[1].with_ready(true, &now())),
    );
    a_fresh_list_agrees(
        &hub,
        kind,
        object,
        "a client not kubelet changed the Endpoints",
    );

    // kubelet's final delete of web-b: its address is gone.
    let object = &web_b_is_deleted(&feed, &hub, kind, &kubelet, &uids[1]);
    assert_eq!(listed(object, "web-a"), Some((NEW_IP_A.to_owned(), true)));
    assert_eq!(other_address(object), other);

    disk_still_holds(&hub, &dir, kind, &on_disk);

    // The cloud is back: its Endpoints again, on the watch (which then ends cleanly) and in
    // a new list.
    the_clouds_object_once_back(&cloud, &hub, &feed, kind, &cloud_endpoints);
    let back = list_of(&hub, kind);
    assert_eq!(item(&back, "web")["subsets"], cloud_endpoints["subsets"]);
}

#[test]
fn without_a_reboot_the_pool_caches_watch_gets_the_change_and_then_the_clouds_slice() {
    let Fixture {
        cloud,
        reported,
        slice: cloud_slice,
        ..
    } = fixture();
    let other = endpoint(&cloud_slice, "web-c").cloned();
    let kind = Kind::Slices;
    let dir = TempDir::new("endpoints-overlay-pool");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    kubelet_reads_its_pods(&hub);
    // kube-proxy's informer, served from the hub's pool cache, opened online.
    let online = list_when_warm(&hub, &kind.list_path(), KUBE_PROXY);
    let feed = watch_of(&hub, kind, rv_of(&online));
    let on_disk = on_disk_when_cached(&hub, &dir, kind);

    cloud.stop();
    assert!(hub.wait_healthy(&cloud, false, HEALTH), "{}", hub.logs());
    let restarted = reported[0].restarted(NEW_IP_A, &now());
    let object = &web_a_moves(&feed, &hub, kind, &KubeletClient::node(&hub), &restarted);
    assert_eq!(
        rv_of(object),
        rv_of(&cloud_slice),
        "the cloud's resourceVersion"
    );
    assert_eq!(shown(object, "web-b").unwrap().0, json!([IP_B]));
    assert_eq!(endpoint(object, "web-c").cloned(), other);
    a_fresh_list_agrees(&hub, kind, object, "a fresh list agrees");
    disk_still_holds(&hub, &dir, kind, &on_disk);

    // The cloud is back: the cloud's slice on the same stream at its resourceVersion, then
    // the cloud's own next change at a new one (a pool-cache watch is not held: it goes on).
    cloud.restart();
    let event = feed.change_until(
        Instant::now() + HEALTH,
        &hub,
        modified("web-x", |s| shown(s, "web-a").unwrap().0 == json!([IP_A])),
    );
    assert_eq!(event["object"]["endpoints"], cloud_slice["endpoints"]);
    assert_eq!(rv_of(&event["object"]), rv_of(&cloud_slice));
    assert!(hub.wait_healthy(&cloud, true, HEALTH), "{}", hub.logs());
    let changed = cloud.patch(
        "endpointslices",
        NS,
        "web-x",
        json!({"metadata": {"labels": {"v": "2"}}}),
    );
    let event = feed.change_until(
        Instant::now() + HEALTH,
        &hub,
        modified("web-x", |s| s["metadata"]["labels"]["v"] == "2"),
    );
    assert_eq!(rv_of(&event["object"]), rv_of(&changed));
    assert_eq!(event["object"]["endpoints"], cloud_slice["endpoints"]);
}

#[test]
fn with_the_overlay_turned_off_kubelets_patch_changes_nothing() {
    let Fixture {
        cloud,
        reported,
        slice: cloud_slice,
        ..
    } = fixture();
    let dir = TempDir::new("endpoints-overlay-off");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&["--offline-endpoints-overlay=false"]);
    let hub = Hub::start(&spec);
    kubelet_reads_its_pods(&hub);
    let kind = Kind::Slices;
    list_when_warm(&hub, &kind.list_path(), KUBE_PROXY);
    on_disk_when_cached(&hub, &dir, kind);
    let hub = reboot_offline(&cloud, hub);
    let before = list_of(&hub, kind);
    let feed = watch_of(&hub, kind, rv_of(&before));
    let restarted = reported[0].restarted(NEW_IP_A, &now());
    web_a_restarts(&hub, &KubeletClient::node(&hub), &restarted);
    // The capture, had there been one, is done before the 503: a list now would show it.
    let offline = list_of(&hub, kind);
    assert_eq!(
        item(&offline, "web-x")["endpoints"],
        cloud_slice["endpoints"]
    );
    // kube-proxy's open watch gets no MODIFIED either.
    stays_quiet(&feed, QUIET);
}

#[test]
fn with_one_of_two_servers_stopped_kubelets_patch_turns_no_overlay_on() {
    // Two apiservers; the first stops and kubelet's status patch follows at once, while the
    // first is still healthy by its last probe: the write may go to it and fail before it
    // connects. The second serves all along: the overlay must not turn on (review M1).
    let Fixture {
        cloud,
        reported,
        slice: cloud_slice,
        ..
    } = fixture();
    let peer = cloud.start_peer();
    let dir = TempDir::new("endpoints-overlay-two-servers");
    let servers = format!("--server-addr={},{}", cloud.url(), peer.url());
    // Priority: every request goes to the first server while it is healthy.
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[&servers, "--lb-mode=priority"]);
    let hub = Hub::start(&spec);
    kubelet_reads_its_pods(&hub);
    // kube-proxy's list, from the hub's pool cache.
    let lists = Kind::Slices.list_path();
    list_when_warm(&hub, &lists, KUBE_PROXY);
    let kubelet = KubeletClient::node(&hub);
    let got = kubelet.get_pod(NS, "web-a");
    assert_eq!(got.status, 200, "{}", got.text());
    let patch = restarted_patch(&got.json(), &reported[0].restarted(NEW_IP_A, &now()));

    cloud.stop();
    let mut replies = vec![kubelet.patch_status(NS, "web-a", STRATEGIC, &patch).status];
    // kubelet sends it again at each sync; a few rounds over ~3 s.
    let until = Instant::now() + QUIET;
    loop {
        assert_eq!(
            hub.metric("tinyhub_endpoints_overlay_pods"),
            Some(0.0),
            "the overlay turned on with a server usable; replies {replies:?}; hub log:\n{}",
            hub.logs()
        );
        let fresh = list(&hub, &lists, KUBE_PROXY);
        assert_eq!(
            item(&fresh, "web-x")["endpoints"],
            cloud_slice["endpoints"],
            "kube-proxy's list is not the cloud's; replies {replies:?}"
        );
        if Instant::now() >= until {
            break;
        }
        // kubelet's pace, shortened: the patch again after a while.
        std::thread::sleep(Duration::from_millis(500));
        replies.push(kubelet.patch_status(NS, "web-a", STRATEGIC, &patch).status);
    }
    assert!(
        peer.count(|r| r.method == "PATCH" && r.path == "/api/v1/namespaces/app/pods/web-a/status")
            > 0,
        "no patch reached the server still up; replies {replies:?}"
    );
}

#[test]
fn after_an_offline_reboot_v1beta1_slices_and_endpoints_without_a_target_are_rewritten_too() {
    let Fixture {
        cloud, reported, ..
    } = fixture();
    // Slices a controller other than the EndpointSlice controller keeps, with no targetRef:
    // an endpoint is this node's pod's by the node's name and the pod's IP before, within
    // the slice's own namespace.
    let manual = |ns: &str, name: &str, node: &str| {
        json!({
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"kubernetes.io/service-name": "web-manual"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [IP_A], "conditions": {"ready": true},
                           "nodeName": node}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        })
    };
    cloud.create("endpointslices", manual(NS, "web-manual", NODE));
    cloud.create(
        "endpointslices",
        manual(NS, "web-manual-elsewhere", "edge-2"),
    );
    cloud.create("endpointslices", manual("other", "web-manual", NODE));
    let dir = TempDir::new("endpoints-overlay-v1beta1");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    kubelet_reads_its_pods(&hub);
    let online = list(&hub, SLICES_V1BETA1, KUBE_PROXY);
    let cloud_beta = item(&online, "web-x").clone();
    assert_eq!(
        endpoint(&cloud_beta, "web-a").unwrap()["topology"]["kubernetes.io/hostname"],
        NODE,
        "v1beta1 names the node in its topology"
    );
    assert!(
        hub.wait_cached(
            &["kube-proxy/endpointslices.v1beta1.discovery.k8s.io/app/web-x"],
            Duration::from_secs(10)
        ),
        "{}",
        hub.logs()
    );
    let hub = reboot_offline(&cloud, hub);
    let restarted = reported[0].restarted(NEW_IP_A, &now());
    web_a_restarts(&hub, &KubeletClient::node(&hub), &restarted);
    let offline = list(&hub, SLICES_V1BETA1, KUBE_PROXY);
    let slice = item(&offline, "web-x");
    assert_eq!(
        endpoint(slice, "web-a").unwrap()["addresses"],
        json!([NEW_IP_A])
    );
    assert_eq!(endpoint(slice, "web-b"), endpoint(&cloud_beta, "web-b"));
    assert_eq!(endpoint(slice, "web-c"), endpoint(&cloud_beta, "web-c"));
    assert_eq!(rv_of(slice), rv_of(&cloud_beta));
    // Without a targetRef: this node's endpoint at the pod's old IP in the pod's namespace
    // follows it; one on another node, or in another namespace, does not.
    let addresses = |ns: &str, name: &str| {
        offline["items"]
            .as_array()
            .and_then(|items| {
                items
                    .iter()
                    .find(|i| i["metadata"]["namespace"] == ns && i["metadata"]["name"] == name)
            })
            .map(|i| i["endpoints"][0]["addresses"].clone())
            .unwrap_or_else(|| panic!("no {ns}/{name} in {offline}"))
    };
    assert_eq!(addresses(NS, "web-manual"), json!([NEW_IP_A]));
    assert_eq!(addresses(NS, "web-manual-elsewhere"), json!([IP_A]));
    assert_eq!(addresses("other", "web-manual"), json!([IP_A]));
}
