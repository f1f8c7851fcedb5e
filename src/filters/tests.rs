//! Tests of the table, the switches, `yurt-hub-cfg` and the chain runner.

use serde_json::{Value, json};

use super::testing::{FakeLookups, changed, ctx, run_pure};
use super::*;

fn defaults() -> FilterConfig {
    FilterConfig::new(Switches::new(true, &[], false))
}

fn names(chain: Chain) -> Vec<&'static str> {
    chain.iter().map(FilterName::name).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn data(value: Value) -> serde_json::Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("test data is not an object: {other}"),
    }
}

#[test]
fn names_round_trip_in_registration_order() {
    let all: Vec<&str> = FilterName::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(
        all,
        [
            "servicetopology",
            "masterservice",
            "discardcloudservice",
            "inclusterconfig",
            "nodeportisolation",
            "forwardkubesvctraffic",
            "serviceenvupdater"
        ]
    );
    for f in FilterName::ALL {
        assert_eq!(FilterName::parse(f.name()), Some(f));
    }
    assert_eq!(FilterName::parse("MasterService"), None);
    assert_eq!(FilterName::parse("hostnetworkpropagation"), None);
    assert_eq!(FilterName::parse("filter_masterservice"), None);
}

#[test]
fn the_default_table() {
    let c = defaults();
    let check = |component: &str, verb: &str, resource: &str, want: &[&str]| {
        assert_eq!(
            names(c.chain_for(component, verb, resource)),
            want,
            "{component}/{verb}/{resource}"
        );
    };
    for verb in ["list", "watch"] {
        check("kubelet", verb, "services", &["masterservice"]);
        check(
            "kube-proxy",
            verb,
            "services",
            &["discardcloudservice", "nodeportisolation"],
        );
        check(
            "kube-proxy",
            verb,
            "endpointslices",
            &["servicetopology", "forwardkubesvctraffic"],
        );
        check("kube-proxy", verb, "endpoints", &["servicetopology"]);
        check("coredns", verb, "endpointslices", &["servicetopology"]);
        check(
            "nginx-ingress-controller",
            verb,
            "endpoints",
            &["servicetopology"],
        );
        check("coredns", verb, "services", &[]);
        check("kubelet", verb, "configmaps", &["inclusterconfig"]);
        check("kubelet", verb, "pods", &["serviceenvupdater"]);
    }
    check("kubelet", "get", "configmaps", &["inclusterconfig"]);
    check("kubelet", "get", "pods", &["serviceenvupdater"]);
    check("kubelet", "patch", "pods", &["serviceenvupdater"]);
    check("kubelet", "get", "services", &[]);
    check("kube-proxy", "get", "endpointslices", &[]);
    check("kubelet", "patch", "configmaps", &[]);
    check("kubelet", "update", "pods", &[]);
    check("kubelet", "create", "pods", &[]);
    check("kubelet", "list", "nodes", &[]);
    check("kube-proxy", "list", "configmaps", &[]);
    check("flanneld", "list", "services", &[]);
    check("", "list", "services", &[]);
}

#[test]
fn classified_requests_map_to_the_table() {
    let c = defaults();
    let check = |ua: &str, method: &str, url: &str, want: &[&str]| {
        let headers = [("User-Agent".to_owned(), ua.to_owned())];
        let req = crate::request::classify(method, url, &headers).expect("valid request");
        assert_eq!(
            names(c.chain_for_request(&req)),
            want,
            "{ua} {method} {url}"
        );
    };
    let kubelet = "kubelet/v1.28.2 (linux/arm) kubernetes/abc";
    check(
        kubelet,
        "GET",
        "/api/v1/services?limit=500",
        &["masterservice"],
    );
    check(
        kubelet,
        "GET",
        "/api/v1/services?watch=true",
        &["masterservice"],
    );
    check(kubelet, "GET", "/api/v1/watch/services", &["masterservice"]);
    check(
        kubelet,
        "GET",
        "/api/v1/namespaces/default/services/kubernetes",
        &[],
    );
    check(
        kubelet,
        "GET",
        "/api/v1/namespaces/kube-system/configmaps/kube-proxy",
        &["inclusterconfig"],
    );
    check(
        kubelet,
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        &["serviceenvupdater"],
    );
    check(
        kubelet,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn",
        &["serviceenvupdater"],
    );
    check(kubelet, "PUT", "/api/v1/namespaces/default/pods/p", &[]);
    check(
        kubelet,
        "GET",
        "/api/v1/namespaces/default/pods/p/status",
        &["serviceenvupdater"],
    );
    check(kubelet, "GET", "/api/v1/namespaces/default/pods/p/log", &[]);
    check(
        kubelet,
        "POST",
        "/api/v1/namespaces/default/pods/p/eviction",
        &[],
    );
    check(
        "kube-proxy/v1.28.2",
        "GET",
        "/apis/discovery.k8s.io/v1/endpointslices?watch=1",
        &["servicetopology", "forwardkubesvctraffic"],
    );
    check(
        "Kube-Proxy/v1.28.2",
        "GET",
        "/api/v1/endpoints",
        &["servicetopology"],
    );
    check(
        "kube-proxy/v1.28.2",
        "GET",
        "/api/v1/services/x/proxy/y",
        &[],
    );
    check(kubelet, "GET", "/version", &[]);
}

#[test]
fn a_request_confined_away_from_a_filters_only_object_skips_that_filter() {
    let c = defaults();
    let check = |ua: &str, url: &str, want: &[&str]| {
        let headers = [("User-Agent".to_owned(), ua.to_owned())];
        let req = crate::request::classify("GET", url, &headers).expect("valid request");
        assert_eq!(names(c.chain_for_request(&req)), want, "{ua} {url}");
    };
    let kubelet = "kubelet/v1.28.2 (linux/arm) kubernetes/abc";
    let kube_proxy = "kube-proxy/v1.28.2";
    // inclusterconfig changes kube-system/kube-proxy only.
    check(
        kubelet,
        "/api/v1/namespaces/default/configmaps/peer-small",
        &[],
    );
    check(
        kubelet,
        "/api/v1/namespaces/kube-system/configmaps/other",
        &[],
    );
    check(
        kubelet,
        "/api/v1/namespaces/default/configmaps/kube-proxy",
        &[],
    );
    check(kubelet, "/api/v1/namespaces/default/configmaps", &[]);
    check(
        kubelet,
        "/api/v1/namespaces/kube-system/configmaps",
        &["inclusterconfig"],
    );
    check(
        kubelet,
        "/api/v1/namespaces/kube-system/configmaps?watch=1&fieldSelector=metadata.name%3Dkube-proxy",
        &["inclusterconfig"],
    );
    check(
        kubelet,
        "/api/v1/namespaces/kube-%73ystem/configmaps/kube-proxy",
        &["inclusterconfig"],
    );
    check(kubelet, "/api/v1/configmaps", &["inclusterconfig"]);
    // masterservice and forwardkubesvctraffic change default/kubernetes only.
    check(
        kubelet,
        "/api/v1/namespaces/default/services",
        &["masterservice"],
    );
    check(kubelet, "/api/v1/namespaces/kube-system/services", &[]);
    check(
        kube_proxy,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
        &["servicetopology", "forwardkubesvctraffic"],
    );
    check(
        kube_proxy,
        "/apis/discovery.k8s.io/v1/namespaces/apps/endpointslices",
        &["servicetopology"],
    );
    // The others may change any object of their kind.
    check(
        kubelet,
        "/api/v1/namespaces/apps/pods/p",
        &["serviceenvupdater"],
    );
    check(
        kube_proxy,
        "/api/v1/namespaces/apps/services?watch=1",
        &["discardcloudservice", "nodeportisolation"],
    );
}

#[test]
fn the_hub_and_the_multiplexer_are_never_filtered() {
    let c = FilterConfig::with_config_data(
        Switches::new(true, &[], false),
        Some(&data(
            json!({"masterservice": "yurthub, tinyhub, multiplexer-proxy-node-a"}),
        )),
    );
    for component in ["yurthub", "tinyhub", "multiplexer-proxy-node-a"] {
        assert!(
            c.chain_for(component, "list", "services").is_empty(),
            "{component}"
        );
    }
}

#[test]
fn an_unfiltered_request_gets_an_empty_chain_that_owns_nothing() {
    // A bit set in one byte: an empty chain cannot hold an allocation.
    assert_eq!(std::mem::size_of::<Chain>(), 1);
    let chain = defaults().chain_for("kubectl", "get", "nodes");
    assert!(chain.is_empty());
    assert_eq!(chain, Chain::EMPTY);
    assert_eq!(chain.iter().count(), 0);
}

#[test]
fn switches_turn_filters_off() {
    let off = FilterConfig::new(Switches::new(false, &[], false));
    assert!(off.chain_for("kubelet", "list", "services").is_empty());
    let star = FilterConfig::new(Switches::new(true, &strings(&["*"]), false));
    assert!(
        star.chain_for("kube-proxy", "list", "endpointslices")
            .is_empty()
    );
    assert!(star.chain_for("kubelet", "get", "pods").is_empty());

    let some = Switches::new(
        true,
        &strings(&["masterservice", " nodeportisolation ,", "bogus"]),
        false,
    );
    assert_eq!(some.unknown, ["bogus"]);
    let some = FilterConfig::new(some);
    assert!(some.chain_for("kubelet", "list", "services").is_empty());
    assert_eq!(
        names(some.chain_for("kube-proxy", "list", "services")),
        ["discardcloudservice"]
    );
}

#[test]
fn cloud_mode_keeps_only_the_filters_a_cloud_node_needs() {
    let cloud = FilterConfig::new(Switches::new(true, &[], true));
    assert_eq!(
        names(cloud.chain_for("kube-proxy", "list", "services")),
        ["nodeportisolation"]
    );
    assert_eq!(
        names(cloud.chain_for("kube-proxy", "watch", "endpointslices")),
        ["servicetopology"]
    );
    assert!(cloud.chain_for("kubelet", "list", "pods").is_empty());
    assert_eq!(
        names(cloud.chain_for("kubelet", "list", "services")),
        ["masterservice"]
    );
    assert_eq!(
        names(cloud.chain_for("kubelet", "get", "configmaps")),
        ["inclusterconfig"]
    );
}

#[test]
fn a_comma_list_in_one_flag_value_is_read_too() {
    let s = Switches::new(true, &strings(&["masterservice, serviceenvupdater"]), false);
    assert!(!s.is_enabled(FilterName::MasterService));
    assert!(!s.is_enabled(FilterName::ServiceEnvUpdater));
    assert!(s.is_enabled(FilterName::ServiceTopology));
    assert!(s.unknown.is_empty());
}

#[test]
fn reads_the_configmap_data() {
    let cm = json!({"metadata": {"name": "yurt-hub-cfg"}, "data": {"masterservice": "a"}});
    let c = FilterConfig::with_config_data(Switches::new(true, &[], false), config_data_of(&cm));
    assert_eq!(
        names(c.chain_for("a", "list", "services")),
        ["masterservice"]
    );
    assert_eq!(config_data_of(&json!({"metadata": {}})), None);
}

#[test]
fn yurt_hub_cfg_adds_components() {
    let c = FilterConfig::with_config_data(
        Switches::new(true, &[], false),
        Some(&data(json!({
            "servicetopology": " Traefik/v2.10 , envoy,,",
            "filter_masterservice": "kubectl/v1.28.2",
            "discardcloudservice": "",
            "cache_agents": "curl",
            "filter_bogus": "curl",
            "nodeportisolation": 7
        }))),
    );
    assert_eq!(
        names(c.chain_for("traefik", "watch", "endpoints")),
        ["servicetopology"]
    );
    assert_eq!(
        names(c.chain_for("envoy", "list", "endpointslices")),
        ["servicetopology"]
    );
    assert_eq!(
        names(c.chain_for("kubectl", "list", "services")),
        ["masterservice"]
    );
    // The verbs and resources of the table still apply to an added component.
    assert!(c.chain_for("traefik", "get", "endpoints").is_empty());
    assert!(c.chain_for("kubectl", "list", "pods").is_empty());
    assert!(c.chain_for("curl", "list", "services").is_empty());
    assert!(
        c.chain_for("", "list", "services").is_empty(),
        "empty entries add nothing"
    );
    // Additions only: the defaults stay.
    assert_eq!(
        names(c.chain_for("kubelet", "list", "services")),
        ["masterservice"]
    );
    assert_eq!(
        names(c.chain_for("kube-proxy", "list", "services")),
        ["discardcloudservice", "nodeportisolation"]
    );
    assert_eq!(
        c.components(FilterName::ServiceTopology),
        [
            "kube-proxy",
            "coredns",
            "nginx-ingress-controller",
            "traefik",
            "envoy"
        ]
    );
    // The ConfigMap gone: back to the defaults.
    let gone = FilterConfig::with_config_data(Switches::new(true, &[], false), None);
    assert_eq!(gone, defaults());
    assert!(gone.chain_for("traefik", "watch", "endpoints").is_empty());
}

#[test]
fn switches_win_over_yurt_hub_cfg() {
    let c = FilterConfig::with_config_data(
        Switches::new(true, &strings(&["servicetopology"]), false),
        Some(&data(json!({"servicetopology": "traefik"}))),
    );
    assert!(c.chain_for("traefik", "list", "endpoints").is_empty());
}

/// Lookups that make every filter act.
fn acting_lookups() -> FakeLookups {
    let mut l = FakeLookups {
        node_pool: Some("hangzhou".into()),
        ..FakeLookups::default()
    };
    l.services.insert(
        "default/kubernetes".into(),
        Some("kubernetes.io/hostname".into()),
    );
    l
}

#[test]
fn a_chain_applies_its_filters_in_order_without_touching_the_input() {
    // servicetopology then forwardkubesvctraffic: the second sees the first's result.
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"namespace": "default", "name": "kubernetes",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.168.0.10"], "nodeName": "master"}],
        "ports": [{"name": "https", "port": 6443}]
    });
    let chain = defaults().chain_for("kube-proxy", "watch", "endpointslices");
    let l = acting_lookups();
    let out = changed(run_pure(&slice, |o| apply(&chain, o, &ctx(), &l)));
    assert_eq!(
        out["endpoints"],
        json!([{"addresses": ["169.254.2.1"], "conditions": {"ready": true}}])
    );
    assert_eq!(out["ports"][0]["port"], 10268);
}

#[test]
fn a_list_item_is_filtered_per_its_lists_version() {
    let item = json!({
        "metadata": {"namespace": "default", "name": "kubernetes-x",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.0.1"], "nodeName": "node-a",
             "topology": {"kubernetes.io/hostname": "node-b"}},
            {"addresses": ["10.0.0.2"], "topology": {"kubernetes.io/hostname": "node-a"}}
        ]
    });
    let chain = defaults().chain_for("coredns", "list", "endpointslices");
    let l = acting_lookups();
    let beta = changed(run_pure(&item, |o| {
        apply_item(&chain, o, Some("discovery.k8s.io/v1beta1"), &ctx(), &l)
    }));
    assert_eq!(beta["endpoints"][0]["addresses"], json!(["10.0.0.2"]));
    let v1 = changed(apply_item(
        &chain,
        &item,
        Some("discovery.k8s.io/v1"),
        &ctx(),
        &l,
    ));
    assert_eq!(v1["endpoints"][0]["addresses"], json!(["10.0.0.1"]));
    assert_eq!(v1["endpoints"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_drop_stops_the_chain() {
    let svc = json!({
        "metadata": {"namespace": "default", "name": "lb",
                     "annotations": {"svc.openyurt.io/discard": "true",
                                     "nodeport.openyurt.io/listen": "hangzhou"}},
        "spec": {"type": "LoadBalancer"}
    });
    let chain = defaults().chain_for("kube-proxy", "list", "services");
    let l = acting_lookups();
    assert_eq!(
        run_pure(&svc, |o| apply(&chain, o, &ctx(), &l)),
        Outcome::Dropped
    );
    assert_eq!(l.calls.get(), 0, "nodeportisolation did not run");
    // The only test that drops through `apply`, so the count is at least this drop.
    assert!(
        FILTER_STATS
            .of(FilterName::DiscardCloudService)
            .dropped
            .load(Ordering::Relaxed)
            >= 1
    );
}

#[test]
fn an_empty_chain_or_an_untouched_object_is_unchanged() {
    let svc =
        json!({"metadata": {"namespace": "default", "name": "web"}, "spec": {"type": "ClusterIP"}});
    let l = acting_lookups();
    assert_eq!(apply(&Chain::EMPTY, &svc, &ctx(), &l), Outcome::Unchanged);
    let chain = defaults().chain_for("kube-proxy", "list", "services");
    assert_eq!(
        run_pure(&svc, |o| apply(&chain, o, &ctx(), &l)),
        Outcome::Unchanged
    );
}

#[test]
fn counters_count_what_filters_did() {
    let cm = json!({
        "metadata": {"namespace": "kube-system", "name": "kube-proxy"},
        "data": {"config.conf": "kubeconfig: /x"}
    });
    let stats = FILTER_STATS.of(FilterName::InClusterConfig);
    let (seen, changed_before) = (
        stats.seen.load(Ordering::Relaxed),
        stats.changed.load(Ordering::Relaxed),
    );
    let chain = defaults().chain_for("kubelet", "get", "configmaps");
    let out = changed(apply(&chain, &cm, &ctx(), &FakeLookups::default()));
    assert_eq!(out["data"]["config.conf"], "#kubeconfig: /x");
    // At least this call's: another test running a filter at the same time adds its own.
    assert!(stats.seen.load(Ordering::Relaxed) > seen);
    assert!(stats.changed.load(Ordering::Relaxed) > changed_before);
    assert_eq!(
        stats.dropped.load(Ordering::Relaxed),
        0,
        "inclusterconfig never drops"
    );
}

#[test]
fn a_reload_swaps_in_what_yurt_hub_cfg_adds_and_drops_it_when_gone() {
    let switches = Switches::new(true, &[], false);
    let reload = FilterReload {
        config: std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(
            FilterConfig::new(switches.clone()),
        ))),
    };
    let chain = |r: &FilterReload| {
        r.config
            .read()
            .expect("not poisoned")
            .chain_for("custom", "list", "services")
    };
    assert!(chain(&reload).is_empty());
    reload.apply(Some(&json!({"data": {"masterservice": "custom/v1"}})));
    assert!(chain(&reload).contains(FilterName::MasterService));
    reload.apply(None);
    assert!(chain(&reload).is_empty());
}
