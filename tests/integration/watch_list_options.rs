//! Issue 27 item 2: the watch-list options (`sendInitialEvents`, `allowWatchBookmarks`,
//! `resourceVersionMatch`) are read with the rest of the query, once, as the apiserver
//! reads them: a boolean is false only for `0` or `false` (any case) and true for anything
//! else, never an error (`runtime.Convert_Slice_string_To_Pointer_bool`), and keys are
//! unescaped as Go's `url.ParseQuery` unescapes them.

use std::time::Duration;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::pool::{list_when_warm_within, service_in as service};

const KUBE_PROXY: &str = "kube-proxy/v1.30.0 (linux/arm) kubernetes/abcdef0";

#[test]
fn a_watch_list_takes_any_boolean_spelling_the_apiserver_takes() {
    let cloud = Cloud::start();
    cloud.create("services", service("shop", "web", "10.96.0.10"));
    let dir = TempDir::new("watch-list-options");
    let spec = HubSpec::for_cloud(&cloud, dir.path()).with(&[
        "--bind-proxy-address=127.0.0.1",
        "--proxy-secure-port=10268",
    ]);
    let hub = Hub::start(&spec);
    list_when_warm_within(
        &hub,
        "/api/v1/namespaces/shop/services",
        KUBE_PROXY,
        Duration::from_secs(20),
    );
    // `x` and `yes` are true to the apiserver (a 400 before), and an escaped key is the key.
    let url = format!(
        "{}/api/v1/namespaces/shop/services?watch=1&sendInitialEvents=x&allowWatch%42ookmarks=yes&resourceVersionMatch=NotOlderThan&timeoutSeconds=30",
        hub.url()
    );
    let (status, body) = stream(&url, KUBE_PROXY);
    assert_eq!(status, 200);
    let mut events = Events::new(body);
    let first = events.next_event().expect("ADDED");
    assert_eq!(first["type"], "ADDED", "{first}");
    assert_eq!(first["object"]["metadata"]["name"], "web", "{first}");
    let end = events.next_event().expect("the end bookmark");
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    // `FALSE` is false, and a false bookmark request is the apiserver's 422.
    let reply = get(
        &format!(
            "{}/api/v1/services?watch=1&sendInitialEvents=x&allowWatchBookmarks=FALSE&resourceVersionMatch=NotOlderThan",
            hub.url()
        ),
        KUBE_PROXY,
    );
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert!(
        reply.text().contains("allowWatchBookmarks"),
        "{}",
        reply.text()
    );
}
