//! Issue 34: watches at the cost of a socket. An idle forwarded watch gives back what it
//! does not use while it waits (the stack pages its thread touched in the TLS handshake, the
//! read buffers a burst grew, its cloud connection's buffers): none of that may cost an
//! event. Many watches through one hub get every event of a burst of large objects, then,
//! after waiting with their buffers let go, every later event, an object nested as deep as
//! an event can be parsed whole included, which is also cached whole. (Memory is measured
//! by `make bench`, not here.)

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Cloud;
use crate::support::hub::*;

/// Open watches at once.
const WATCHES: usize = 12;

/// serde_json's recursion limit: the deepest parse on a watch's thread, where the stack is
/// trimmed, is serde's (an event's head parsed whole when it cannot be located:
/// `stream/events.rs`; the cache's decoder, to 256, does not recurse), and so is this
/// test's own reading of the events.
const SERDE_LIMIT: usize = 128;

/// The containers around an event's `nested` value: the event, its object.
const ENVELOPE: usize = 2;

/// As deep as a watch event can nest and still be parsed whole: serde refuses a
/// container at the limit's depth.
const DEEPEST: usize = SERDE_LIMIT - 1 - ENVELOPE;

/// A value nested `depth` objects deep.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, _| json!({ "in": inner }))
}

/// How deep `value` nests through `in`.
fn depth_of(mut value: &Value) -> usize {
    let mut depth = 0;
    while let Some(inner) = value.get("in") {
        depth += 1;
        value = inner;
    }
    depth
}

#[test]
fn idle_watches_get_every_event_after_a_burst_and_a_wait_a_deep_object_too() {
    let cloud = Cloud::start();
    let dir = TempDir::new("watch-footprint");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let before = cloud.watchers("configmaps");
    let url = format!(
        "{}/api/v1/namespaces/fp/configmaps?watch=1&resourceVersion={}",
        hub.url(),
        cloud.resource_version()
    );
    let mut watches: Vec<Events> = (0..WATCHES)
        .map(|_| {
            let (status, body) = stream(&url, KUBELET);
            assert_eq!(status, 200);
            Events::new(body)
        })
        .collect();
    assert!(cloud.wait_for_watchers("configmaps", before + WATCHES, Duration::from_secs(20)));

    // A burst of objects larger than a stream's largest read buffer (16 KiB).
    let pad = "x".repeat(40_000);
    for i in 0..6 {
        cloud.create(
            "configmaps",
            json!({"metadata": {"name": format!("big-{i}"), "namespace": "fp"}, "data": {"pad": pad}}),
        );
    }
    for events in &mut watches {
        for i in 0..6 {
            let event = events.next_event().expect("an event of the burst");
            assert_eq!(event["object"]["metadata"]["name"], format!("big-{i}"));
            assert_eq!(
                event["object"]["data"]["pad"].as_str().map(str::len),
                Some(40_000)
            );
        }
    }

    // Every watch now waits, its buffers let go; the hub's own work meanwhile (a list, the
    // health checks) does not disturb them.
    assert_eq!(
        get(
            &format!("{}/api/v1/namespaces/fp/configmaps", hub.url()),
            KUBELET
        )
        .status,
        200
    );
    // The margin shown: one level deeper would not parse.
    let event = |depth| json!({"type": "ADDED", "object": {"nested": nested(depth)}});
    assert!(serde_json::from_str::<Value>(&event(DEEPEST).to_string()).is_ok());
    assert!(serde_json::from_str::<Value>(&event(DEEPEST + 1).to_string()).is_err());
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "deep", "namespace": "fp"}, "data": {"k": "v"}, "nested": nested(DEEPEST)}),
    );
    cloud.create(
        "configmaps",
        json!({"metadata": {"name": "small", "namespace": "fp"}, "data": {"k": "v"}}),
    );
    for events in &mut watches {
        let deep = events.next_event().expect("the deep object's event");
        assert_eq!(deep["object"]["metadata"]["name"], "deep");
        assert_eq!(depth_of(&deep["object"]["nested"]), DEEPEST);
        let small = events.next_event().expect("the next event");
        assert_eq!(small["object"]["metadata"]["name"], "small");
    }
    let cached = hub
        .spec
        .cache_dir
        .join("kubelet/configmaps.v1.core/fp/deep");
    assert!(hub.wait_cached(
        &["kubelet/configmaps.v1.core/fp/deep"],
        Duration::from_secs(10)
    ));
    let stored = eventually(Duration::from_secs(10), || {
        read_json(&cached).is_some_and(|o| depth_of(&o["nested"]) == DEEPEST)
    });
    assert!(
        stored,
        "the deep object is cached whole: {:?}",
        read_json(&cached)
    );
}
