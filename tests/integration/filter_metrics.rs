//! Issue 14: the response filters' figures on /metrics move when a filtered list goes
//! through the hub, per filter and outcome, and the filter stage's time is counted once per
//! answer under its chain; a client no filter applies to moves nothing.

use std::time::Duration;

use crate::support::Cloud;
use crate::support::hub::*;

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";
/// Services beside the seeded `default/kubernetes`: enough that the list streams.
const SERVICES: usize = 300;

fn objects(hub: &Hub, filter: &str, outcome: &str) -> f64 {
    let series =
        format!("tinyhub_filter_objects_total{{filter=\"{filter}\",outcome=\"{outcome}\"}}");
    hub.metric(&series)
        .unwrap_or_else(|| panic!("{series} is not on /metrics"))
}

fn answers(hub: &Hub, chain: &str) -> Option<f64> {
    hub.metric(&format!(
        "tinyhub_filter_seconds_count{{filter_chain=\"{chain}\"}}"
    ))
}

fn list_len(hub: &Hub, path: &str, ua: &str) -> usize {
    let reply = get(&format!("{}{path}", hub.url()), ua);
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["items"].as_array().expect("a list").len()
}

#[test]
fn a_filtered_list_through_the_hub_moves_the_filter_metrics() {
    let cloud = Cloud::start();
    cloud.populate_services(SERVICES);
    cloud.kubernetes_service_fixtures();
    let dir = TempDir::new("filter-metrics");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[
        "--bind-proxy-address=127.0.0.1",
        "--proxy-secure-port=10268",
    ]);
    let hub = Hub::start(&spec);
    let total = (SERVICES + 1) as f64;

    assert_eq!(objects(&hub, "masterservice", "seen"), 0.0);
    assert_eq!(answers(&hub, "masterservice"), None);

    // A client no filter applies to: nothing moves. (Lists of Services come from the
    // node's shared watch cache, issue 16: 429 until it is warm.)
    let url = format!("{}/api/v1/services", hub.url());
    assert!(eventually(Duration::from_secs(20), || get(
        &url,
        "curl/8.5.0"
    )
    .status
        == 200));
    assert_eq!(
        list_len(&hub, "/api/v1/services", "curl/8.5.0"),
        SERVICES + 1
    );
    for filter in ["masterservice", "discardcloudservice", "nodeportisolation"] {
        assert_eq!(objects(&hub, filter, "seen"), 0.0, "{filter}");
    }

    // kubelet: masterservice sees every Service and changes default/kubernetes only.
    assert_eq!(list_len(&hub, "/api/v1/services", KUBELET), SERVICES + 1);
    assert_eq!(objects(&hub, "masterservice", "seen"), total);
    assert_eq!(objects(&hub, "masterservice", "changed"), 1.0);
    assert_eq!(objects(&hub, "masterservice", "dropped"), 0.0);
    assert_eq!(answers(&hub, "masterservice"), Some(1.0));
    let spent = hub
        .metric("tinyhub_filter_seconds_sum{filter_chain=\"masterservice\"}")
        .expect("the time of the masterservice chain");
    assert!(spent > 0.0 && spent < 60.0, "{spent}");
    assert_eq!(objects(&hub, "discardcloudservice", "seen"), 0.0);

    // kube-proxy: its two Service filters, one answer of their chain.
    assert_eq!(list_len(&hub, "/api/v1/services", KUBE_PROXY), SERVICES + 1);
    assert_eq!(objects(&hub, "discardcloudservice", "seen"), total);
    assert_eq!(objects(&hub, "nodeportisolation", "seen"), total);
    assert_eq!(
        objects(&hub, "masterservice", "seen"),
        total,
        "not kube-proxy's"
    );
    assert_eq!(
        answers(&hub, "discardcloudservice,nodeportisolation"),
        Some(1.0)
    );

    // A second kubelet list counts a second answer, and every object again.
    list_len(&hub, "/api/v1/services", KUBELET);
    assert_eq!(objects(&hub, "masterservice", "seen"), 2.0 * total);
    assert_eq!(answers(&hub, "masterservice"), Some(2.0));

    // kube-proxy's slices: forwardkubesvctraffic rewrites default/kubernetes.
    let slices = list_len(&hub, "/apis/discovery.k8s.io/v1/endpointslices", KUBE_PROXY);
    assert_eq!(
        objects(&hub, "forwardkubesvctraffic", "seen"),
        slices as f64
    );
    assert_eq!(objects(&hub, "forwardkubesvctraffic", "changed"), 1.0);
    assert_eq!(
        answers(&hub, "servicetopology,forwardkubesvctraffic"),
        Some(1.0)
    );
}
