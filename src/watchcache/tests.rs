use std::thread;

use serde_json::{Value, json};

use super::list::CONTINUE_EXPIRED;
use super::*;

fn options() -> CacheOptions {
    CacheOptions {
        fresh_wait: Duration::from_millis(50),
        ..CacheOptions::default()
    }
}

/// A Service as a list item (no kind), with `labels`, `spec.type` and a clusterIP.
fn service(ns: &str, name: &str, rv: u64, labels: &[(&str, &str)], ty: &str) -> Vec<u8> {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::to_vec(&json!({
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                     "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"clusterIP": format!("10.96.0.{}", rv % 250), "type": ty,
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

fn obj(cache: &WatchCache, bytes: &[u8]) -> Object {
    cache.parse(bytes).unwrap()
}

/// A ready Services cache at rv 10 holding `a/web-1` (app=web, ClusterIP), `a/db-1`
/// (app=db, NodePort), `b/web-2` (app=web, NodePort), `b/zz` (no labels).
fn services() -> WatchCache {
    services_with(options())
}

fn services_with(options: CacheOptions) -> WatchCache {
    let cache = WatchCache::new(Resource::services(), options);
    let items = [
        service("a", "web-1", 3, &[("app", "web")], "ClusterIP"),
        service("a", "db-1", 4, &[("app", "db")], "NodePort"),
        service("b", "web-2", 5, &[("app", "web")], "NodePort"),
        service("b", "zz", 6, &[], "ClusterIP"),
    ];
    let objects = items.iter().map(|b| obj(&cache, b)).collect();
    cache.replace("10", objects).unwrap();
    cache
}

fn sel(label: Option<&str>, field: Option<&str>) -> Selectors {
    Selectors::parse(label, field).unwrap()
}

fn list(
    cache: &WatchCache,
    req: ListRequest<'_>,
) -> Result<(Vec<String>, u64, Option<String>), Status> {
    let page = cache.list(&req)?;
    let keys = page.items().iter().map(Object::key).collect();
    Ok((
        keys,
        page.resource_version(),
        page.continue_token().map(str::to_owned),
    ))
}

fn req<'a>(selectors: &'a Selectors) -> ListRequest<'a> {
    ListRequest {
        resource_version: None,
        namespace: None,
        selectors,
        limit: None,
        continue_token: None,
        exact: false,
    }
}

/// Every event a watcher has now, as (type, key, rv).
fn drain(w: &mut Watcher) -> Vec<(EventType, String, u64)> {
    let mut out = Vec::new();
    loop {
        match w.next(Duration::from_millis(30)).unwrap() {
            WatchNext::Events(events) => {
                assert!(!events.is_empty(), "Events is never empty");
                out.extend(events.iter().map(|e| {
                    let key = match e {
                        WatchEvent::Object { object, .. } => object.key(),
                        WatchEvent::Bookmark(_) | WatchEvent::InitialEventsEnd(_) => String::new(),
                    };
                    (e.kind(), key, e.rv())
                }));
            }
            WatchNext::Idle => return out,
        }
    }
}

fn line(cache: &WatchCache, e: &WatchEvent) -> Value {
    let mut out = Vec::new();
    e.write_line(&mut out, cache).unwrap();
    assert_eq!(out.last(), Some(&b'\n'));
    serde_json::from_slice(&out).unwrap()
}

fn modify(cache: &WatchCache, bytes: &[u8]) -> Applied {
    cache.apply(EventType::Modified, obj(cache, bytes)).unwrap()
}

#[test]
fn objects_are_indexed_once_and_written_with_their_type() {
    let cache = WatchCache::new(Resource::services(), options());
    // An escaped label value, a non-string label, a duplicate key (the later wins).
    let bytes = br#" {"metadata":{"name":"we\u0062","namespace":"a","resourceVersion":"42","labels":{"app":"x","tier":"fr\u006fnt","n":7,"app":"web"}},"spec":{"clusterIP":"None","type":"ClusterIP"}}
"#;
    let o = obj(&cache, bytes);
    assert_eq!(
        (o.namespace(), o.name(), o.rv(), o.key().as_str()),
        ("a", "web", 42, "a/web")
    );
    assert_eq!(
        o.json(),
        &bytes[1..bytes.len() - 1],
        "the JSON as sent, trimmed"
    );
    let r = cache.resource();
    for (label, field, expected) in [
        (Some("app=web"), None, true),
        (Some("app=x"), None, false),
        (Some("tier=front"), None, true),
        (Some("n"), None, true),
        (Some("n=7"), None, false),
        (Some("!missing,app in (web,db)"), None, true),
        (None, Some("spec.clusterIP=None,spec.type=ClusterIP"), true),
        (None, Some("spec.type!=ClusterIP"), false),
        (None, Some("metadata.name=web,metadata.namespace=a"), true),
        (None, Some("metadata.namespace=b"), false),
    ] {
        assert_eq!(
            o.matches(&sel(label, field), r),
            expected,
            "{label:?} {field:?}"
        );
    }
    // Written for a watch: kind and apiVersion added, the resourceVersion replaced.
    let mut out = Vec::new();
    o.write_typed(&mut out, r, Some(99)).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["kind"], "Service");
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(v["metadata"]["resourceVersion"], "99");
    assert_eq!(v["metadata"]["labels"]["tier"], "front");
    // An object that has its type is written as it came.
    let typed = br#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"x","namespace":"a","resourceVersion":"7"}}"#;
    let mut out = Vec::new();
    obj(&cache, typed).write_typed(&mut out, r, None).unwrap();
    assert_eq!(out, typed);

    for (bad, why) in [
        (
            &br#"[{"metadata":{"name":"x","resourceVersion":"1"}}]"#[..],
            "array",
        ),
        (
            br#"{"metadata":{"namespace":"a","resourceVersion":"1"}}"#,
            "no name",
        ),
        (br#"{"metadata":{"name":"x","resourceVersion":"1a"}}"#, "rv"),
        (
            br#"{"metadata":{"name":"x","resourceVersion":"\u0031"}}"#,
            "escaped rv",
        ),
        (br#"{"metadata":{"name":"x"}}"#, "no rv"),
        (
            br#"{"metadata":{"name":"x","resourceVersion":"1","labels":["a"]}}"#,
            "labels",
        ),
    ] {
        assert!(cache.parse(bad).is_err(), "{why}");
    }
}

#[test]
fn lists_filter_by_namespace_and_selectors() {
    let cache = services();
    let everything = Selectors::everything();
    let (keys, rv, token) = list(&cache, req(&everything)).unwrap();
    assert_eq!(keys, ["a/db-1", "a/web-1", "b/web-2", "b/zz"]);
    assert_eq!((rv, token), (10, None));
    let web = sel(Some("app=web"), None);
    assert_eq!(list(&cache, req(&web)).unwrap().0, ["a/web-1", "b/web-2"]);
    let nodeport = sel(None, Some("spec.type=NodePort"));
    assert_eq!(
        list(&cache, req(&nodeport)).unwrap().0,
        ["a/db-1", "b/web-2"]
    );
    let both = sel(Some("app=web"), Some("spec.type=NodePort"));
    assert_eq!(list(&cache, req(&both)).unwrap().0, ["b/web-2"]);
    let in_b = ListRequest {
        namespace: Some("b"),
        ..req(&everything)
    };
    assert_eq!(list(&cache, in_b).unwrap().0, ["b/web-2", "b/zz"]);
    let web_in_a = ListRequest {
        namespace: Some("a"),
        ..req(&web)
    };
    assert_eq!(list(&cache, web_in_a).unwrap().0, ["a/web-1"]);
    let ns_field = sel(None, Some("metadata.namespace!=a"));
    assert_eq!(list(&cache, req(&ns_field)).unwrap().0, ["b/web-2", "b/zz"]);

    // Field labels the apiserver does not know are refused with its text.
    let unknown = sel(None, Some("spec.nodeName=x"));
    let e = list(&cache, req(&unknown)).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "field label not supported: spec.nodeName")
    );
    let slices = WatchCache::new(Resource::endpointslices(), options());
    slices.replace("1", Vec::new()).unwrap();
    let e = slices
        .list(&req(&sel(None, Some("addressType=IPv4"))))
        .unwrap_err();
    assert_eq!(
        e.message,
        r#""addressType" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    let e = slices
        .watch(None, None, sel(None, Some("spec.clusterIP=x")))
        .err()
        .unwrap();
    assert_eq!(e.code, 400);

    // Any resourceVersion not newer than the cache's is served from memory at the cache's.
    for rv in ["", "0", "7", "10"] {
        let r = ListRequest {
            resource_version: Some(rv),
            ..req(&everything)
        };
        assert_eq!(list(&cache, r).unwrap().1, 10, "{rv:?}");
    }
    let newer = ListRequest {
        resource_version: Some("11"),
        ..req(&everything)
    };
    let e = list(&cache, newer).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str(), e.retry_after),
        (
            504,
            "Timeout: Too large resource version: 11, current: 10",
            Some(1)
        )
    );
    // The cause client-go's reflector looks for before it falls back to a list at "".
    let v: Value = serde_json::from_slice(&e.to_json()).unwrap();
    assert_eq!(
        v["details"],
        json!({"causes": [{"reason": "ResourceVersionTooLarge",
                           "message": "Too large resource version"}],
               "retryAfterSeconds": 1})
    );
}

#[test]
fn a_list_is_written_as_the_apiserver_writes_it() {
    let cache = services();
    let everything = Selectors::everything();
    let page = cache
        .list(&ListRequest {
            limit: Some(3),
            // A resourceVersion pages (at ""/"0" the cache answers whole).
            resource_version: Some("1"),
            ..req(&everything)
        })
        .unwrap();
    let mut out = Vec::new();
    page.write_to(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with(r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"10","continue":""#),
        "{text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["db-1", "web-1", "web-2"]);
    // Items are the bytes the cloud sent.
    assert!(text.contains(std::str::from_utf8(page.items()[0].json()).unwrap()));
    let slices = WatchCache::new(Resource::endpointslices(), options());
    slices.replace("1", Vec::new()).unwrap();
    let mut out = Vec::new();
    slices
        .list(&req(&everything))
        .unwrap()
        .write_to(&mut out)
        .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}"#
    );
}

#[test]
fn limit_and_continue_page_through_a_consistent_snapshot() {
    let cache = services();
    let everything = Selectors::everything();
    let first = ListRequest {
        limit: Some(2),
        // A resourceVersion pages (at ""/"0" the cache answers whole).
        resource_version: Some("1"),
        ..req(&everything)
    };
    let (keys, rv, token) = list(&cache, first).unwrap();
    assert_eq!(
        (keys, rv),
        (vec!["a/db-1".to_owned(), "a/web-1".to_owned()], 10)
    );
    let token = token.expect("more objects match");

    // After the first page: b/web-2 changes (and stops being NodePort), b/zz goes, b/new
    // and a/aaa come.
    modify(
        &cache,
        &service("b", "web-2", 11, &[("app", "web")], "ClusterIP"),
    );
    let zz = obj(&cache, &service("b", "zz", 12, &[], "ClusterIP"));
    cache.apply(EventType::Deleted, zz).unwrap();
    cache
        .apply(
            EventType::Added,
            obj(&cache, &service("b", "new", 13, &[], "ClusterIP")),
        )
        .unwrap();
    cache
        .apply(
            EventType::Added,
            obj(&cache, &service("a", "aaa", 14, &[], "ClusterIP")),
        )
        .unwrap();

    // The next page is the list as it was at 10.
    let next = ListRequest {
        limit: Some(10),
        continue_token: Some(&token),
        ..req(&everything)
    };
    let page = cache.list(&next).unwrap();
    let seen: Vec<(String, u64)> = page.items().iter().map(|o| (o.key(), o.rv())).collect();
    assert_eq!(seen, [("b/web-2".to_owned(), 5), ("b/zz".to_owned(), 6)]);
    assert_eq!((page.resource_version(), page.continue_token()), (10, None));
    // With a selector the old states are matched: b/web-2 was NodePort at 10.
    let nodeport = sel(None, Some("spec.type=NodePort"));
    let next_np = ListRequest {
        limit: Some(1),
        continue_token: Some(&token),
        ..req(&nodeport)
    };
    let (keys, _, more) = list(&cache, next_np).unwrap();
    assert_eq!((keys.as_slice(), more), (&["b/web-2".to_owned()][..], None));
    // A fresh list sees the present.
    assert_eq!(
        list(&cache, req(&everything)).unwrap().0,
        ["a/aaa", "a/db-1", "a/web-1", "b/new", "b/web-2"]
    );

    // Tokens the hub cannot read are the apiserver's 400.
    for bad in [
        "%%%",
        "e30",
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0IjoiIn0",
    ] {
        let r = ListRequest {
            continue_token: Some(bad),
            ..req(&everything)
        };
        let e = list(&cache, r).unwrap_err();
        assert_eq!(e.code, 400, "{bad}");
        assert!(
            e.message
                .starts_with("invalid continue token: continue key is not valid"),
            "{}",
            e.message
        );
    }
}

#[test]
fn a_continue_older_than_the_history_is_expired() {
    let cache = services_with(CacheOptions {
        max_events: 3,
        ..options()
    });
    let everything = Selectors::everything();
    let (_, _, token) = list(
        &cache,
        ListRequest {
            limit: Some(1),
            // A resourceVersion pages (at ""/"0" the cache answers whole).
            resource_version: Some("1"),
            ..req(&everything)
        },
    )
    .unwrap();
    let token = token.unwrap();
    let cont = ListRequest {
        continue_token: Some(&token),
        ..req(&everything)
    };
    for rv in 11..=13 {
        modify(
            &cache,
            &service("a", "web-1", rv, &[("app", "web")], "ClusterIP"),
        );
    }
    // Three events after 10 are all still held: the page is served at 10.
    assert_eq!(list(&cache, cont).unwrap().1, 10);
    modify(
        &cache,
        &service("a", "web-1", 14, &[("app", "web")], "ClusterIP"),
    );
    let e = list(&cache, cont).unwrap_err();
    assert_eq!(
        (e.code, e.reason, e.message.as_str()),
        (410, "Expired", CONTINUE_EXPIRED)
    );
}

#[test]
fn a_watch_from_a_resource_version_replays_exactly_the_events_after_it() {
    let cache = services_with(CacheOptions {
        max_events: 5,
        ..options()
    });
    for rv in 11..=15 {
        modify(
            &cache,
            &service("a", "web-1", rv, &[("app", "web")], "ClusterIP"),
        );
    }
    // The history holds 11..=15: a watch from 10 (or later) is served.
    for from in 10..=15u64 {
        let mut w = cache
            .watch(Some(&from.to_string()), None, Selectors::everything())
            .unwrap();
        let rvs: Vec<u64> = drain(&mut w).iter().map(|e| e.2).collect();
        assert_eq!(rvs, ((from + 1)..=15).collect::<Vec<_>>(), "from {from}");
        assert_eq!(w.resource_version(), 15);
    }
    let mut w = cache
        .watch(Some("15"), None, Selectors::everything())
        .unwrap();
    modify(
        &cache,
        &service("a", "db-1", 16, &[("app", "db")], "NodePort"),
    );
    assert_eq!(
        drain(&mut w),
        [(EventType::Modified, "a/db-1".to_owned(), 16)]
    );
    // 11 fell out of the history: a watch from 10 is too old now.
    let e = cache
        .watch(Some("10"), None, Selectors::everything())
        .err()
        .unwrap();
    assert_eq!((e.code, e.reason), (410, "Expired"));
    assert_eq!(e.message, "too old resource version: 10 (11)");
    let line = error_event_line(&e);
    let v: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410))
    );
    // Newer than the cache: waited for, then 504.
    let e = cache
        .watch(Some("17"), None, Selectors::everything())
        .err()
        .unwrap();
    assert_eq!(e.code, 504);
    let e = cache
        .watch(Some("x1"), None, Selectors::everything())
        .err()
        .unwrap();
    assert_eq!(e.code, 400);
}

#[test]
fn a_watch_that_waits_for_a_newer_resource_version_gets_it() {
    let cache = services_with(CacheOptions {
        fresh_wait: Duration::from_secs(5),
        ..options()
    });
    let feeder = cache.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        modify(
            &feeder,
            &service("a", "web-1", 11, &[("app", "web")], "ClusterIP"),
        );
        modify(
            &feeder,
            &service("a", "web-1", 12, &[("app", "web")], "ClusterIP"),
        );
    });
    let mut w = cache
        .watch(Some("11"), None, Selectors::everything())
        .unwrap();
    t.join().unwrap();
    assert_eq!(
        drain(&mut w),
        [(EventType::Modified, "a/web-1".to_owned(), 12)]
    );
}

#[test]
fn a_watch_from_now_starts_with_every_object_added() {
    let cache = services();
    let mut w = cache
        .watch(Some("0"), None, sel(Some("app=web"), None))
        .unwrap();
    assert!(
        w.bookmark().is_none(),
        "no bookmark before the initial events are out"
    );
    modify(
        &cache,
        &service("b", "zz", 11, &[("app", "web")], "ClusterIP"),
    );
    assert_eq!(
        drain(&mut w),
        [
            (EventType::Added, "a/web-1".to_owned(), 3),
            (EventType::Added, "b/web-2".to_owned(), 5),
            (EventType::Added, "b/zz".to_owned(), 11),
        ]
    );
    // Every watcher gets the cache's own bytes, never a copy.
    let mut w2 = cache.watch(None, None, Selectors::everything()).unwrap();
    let listed = cache.list(&req(&Selectors::everything())).unwrap();
    let WatchNext::Events(events) = w2.next(Duration::ZERO).unwrap() else {
        panic!("initial events")
    };
    assert_eq!(events.len(), listed.items().len());
    for (e, o) in events.iter().zip(listed.items()) {
        let WatchEvent::Object { object, .. } = e else {
            panic!("{e:?}")
        };
        assert!(object.same(o), "{object:?} shares {o:?}");
    }
    let mut all = cache
        .watch(None, Some("a"), Selectors::everything())
        .unwrap();
    let keys: Vec<String> = drain(&mut all).into_iter().map(|e| e.1).collect();
    assert_eq!(keys, ["a/db-1", "a/web-1"]);
}

#[test]
fn a_relist_becomes_the_events_it_implies() {
    let cache = services();
    let mut w = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    let mut web = cache
        .watch(Some("10"), None, sel(Some("app=web"), None))
        .unwrap();
    // The cloud's list at 20: a/web-1 unchanged, a/db-1 modified at 15, b/web-2 deleted,
    // b/zz unchanged, c/new added at 12.
    let items = [
        service("a", "web-1", 3, &[("app", "web")], "ClusterIP"),
        service("a", "db-1", 15, &[("app", "db")], "NodePort"),
        service("b", "zz", 6, &[], "ClusterIP"),
        service("c", "new", 12, &[("app", "web")], "ClusterIP"),
    ];
    let objects = items.iter().map(|b| obj(&cache, b)).collect();
    let summary = cache.replace("20", objects).unwrap();
    assert_eq!(
        summary,
        Replaced {
            added: 1,
            modified: 1,
            deleted: 1,
            reset: false
        }
    );
    assert_eq!(cache.resource_version(), 20);
    assert_eq!(
        drain(&mut w),
        [
            (EventType::Added, "c/new".to_owned(), 12),
            (EventType::Modified, "a/db-1".to_owned(), 15),
            (EventType::Deleted, "b/web-2".to_owned(), 20),
        ]
    );
    assert_eq!(w.resource_version(), 20);
    // The deletion carries the last state with the list's resourceVersion.
    let mut w2 = cache
        .watch(Some("15"), None, Selectors::everything())
        .unwrap();
    let WatchNext::Events(events) = w2.next(Duration::ZERO).unwrap() else {
        panic!("the deletion is after 15")
    };
    let v = line(&cache, &events[0]);
    assert_eq!(v["type"], "DELETED");
    assert_eq!(v["object"]["kind"], "Service");
    assert_eq!(v["object"]["metadata"]["name"], "web-2");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "20");
    assert_eq!(v["object"]["spec"]["type"], "NodePort");
    let keys: Vec<(EventType, String)> = drain(&mut web).into_iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(
        keys,
        [
            (EventType::Added, "c/new".to_owned()),
            (EventType::Deleted, "b/web-2".to_owned())
        ]
    );

    // A list older than the cache cannot be diffed: the cache resets and watchers end.
    let summary = cache.replace("5", Vec::new()).unwrap();
    assert!(summary.reset);
    let e = w.next(Duration::ZERO).unwrap_err();
    assert_eq!(e.code, 410);
    assert_eq!(
        list(&cache, req(&Selectors::everything())).unwrap(),
        (vec![], 5, None)
    );
}

#[test]
fn objects_entering_and_leaving_a_selector_are_added_and_deleted() {
    let cache = services();
    let mut w = cache
        .watch(
            Some("10"),
            None,
            sel(Some("app=web"), Some("spec.type=ClusterIP")),
        )
        .unwrap();
    // a/web-1 leaves by its label, comes back, leaves by its type; b/zz enters; a/db-1
    // changes without ever matching.
    modify(
        &cache,
        &service("a", "web-1", 11, &[("app", "api")], "ClusterIP"),
    );
    modify(
        &cache,
        &service("a", "web-1", 12, &[("app", "web")], "ClusterIP"),
    );
    modify(
        &cache,
        &service("a", "web-1", 13, &[("app", "web")], "ClusterIP"),
    );
    modify(
        &cache,
        &service("a", "web-1", 14, &[("app", "web")], "NodePort"),
    );
    modify(
        &cache,
        &service("b", "zz", 15, &[("app", "web")], "ClusterIP"),
    );
    modify(
        &cache,
        &service("a", "db-1", 16, &[("app", "db")], "ClusterIP"),
    );
    let zz = obj(
        &cache,
        &service("b", "zz", 17, &[("app", "web")], "ClusterIP"),
    );
    cache.apply(EventType::Deleted, zz).unwrap();
    let mut events = Vec::new();
    while let WatchNext::Events(batch) = w.next(Duration::from_millis(30)).unwrap() {
        events.extend(batch);
    }
    let seen: Vec<(EventType, String, u64)> = events
        .iter()
        .map(|e| {
            let WatchEvent::Object { object, .. } = e else {
                panic!("{e:?}")
            };
            (e.kind(), object.key(), e.rv())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (EventType::Deleted, "a/web-1".to_owned(), 11),
            (EventType::Added, "a/web-1".to_owned(), 12),
            (EventType::Modified, "a/web-1".to_owned(), 13),
            (EventType::Deleted, "a/web-1".to_owned(), 14),
            (EventType::Added, "b/zz".to_owned(), 15),
            (EventType::Deleted, "b/zz".to_owned(), 17),
        ]
    );
    // A DELETED for leaving carries the last matching state at the event's version.
    let v = line(&cache, &events[0]);
    assert_eq!(v["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "11");
    let v = line(&cache, &events[3]);
    assert_eq!(v["object"]["spec"]["type"], "ClusterIP");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "14");
}

#[test]
fn bookmarks_carry_the_resource_version_a_watcher_has_reached() {
    let cache = services();
    let mut w = cache
        .watch(Some("10"), None, sel(Some("app=web"), None))
        .unwrap();
    modify(
        &cache,
        &service("a", "db-1", 11, &[("app", "db")], "NodePort"),
    );
    // Nothing for this watcher, but it has reached 11.
    assert!(matches!(
        w.next(Duration::from_millis(20)).unwrap(),
        WatchNext::Idle
    ));
    assert_eq!(w.bookmark().unwrap().rv(), 11);
    cache.apply_event_json(br#"{"type":"BOOKMARK","object":{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":"30"}}}"#).unwrap();
    assert!(matches!(
        w.next(Duration::from_millis(20)).unwrap(),
        WatchNext::Idle
    ));
    let bookmark = w.bookmark().unwrap();
    assert_eq!(bookmark.rv(), 30);
    let v = line(&cache, &bookmark);
    assert_eq!(v["type"], "BOOKMARK");
    assert_eq!(v["object"]["kind"], "Service");
    assert_eq!(v["object"]["apiVersion"], "v1");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "30");
    assert_eq!(cache.resource_version(), 30);
    // The bookmark's version is a valid place to resume.
    modify(
        &cache,
        &service("a", "web-1", 31, &[("app", "web")], "ClusterIP"),
    );
    let mut resumed = cache
        .watch(Some("30"), None, Selectors::everything())
        .unwrap();
    assert_eq!(
        drain(&mut resumed),
        [(EventType::Modified, "a/web-1".to_owned(), 31)]
    );
}

#[test]
fn the_cache_is_not_ready_until_the_first_list() {
    let cache = WatchCache::new(Resource::services(), options());
    assert!(!cache.is_ready());
    let everything = Selectors::everything();
    let e = cache.list(&req(&everything)).unwrap_err();
    assert_eq!(
        (e.code, e.reason, e.retry_after),
        (429, "TooManyRequests", Some(1))
    );
    assert_eq!(
        e.message,
        "cacher for gvr(/v1, Resource=services) is initializing, please try again later."
    );
    assert_eq!(
        cache
            .watch(None, None, Selectors::everything())
            .err()
            .unwrap()
            .code,
        429
    );
    let one = obj(&cache, &service("a", "x", 3, &[], "ClusterIP"));
    assert_eq!(
        cache.apply(EventType::Added, one).unwrap_err(),
        ApplyError::NotReady
    );
    let slices = WatchCache::new(Resource::endpointslices(), options());
    assert!(
        slices
            .initializing()
            .message
            .contains("gvr(discovery.k8s.io/v1, Resource=endpointslices)")
    );
    cache.replace("7", Vec::new()).unwrap();
    assert!(cache.is_ready());
    assert_eq!(list(&cache, req(&everything)).unwrap(), (vec![], 7, None));
}

#[test]
fn events_not_newer_than_the_cache_are_ignored() {
    let cache = services();
    assert_eq!(
        modify(
            &cache,
            &service("a", "web-1", 9, &[("app", "x")], "ClusterIP")
        ),
        Applied::Stale
    );
    assert_eq!(
        modify(
            &cache,
            &service("a", "web-1", 10, &[("app", "x")], "ClusterIP")
        ),
        Applied::Stale
    );
    let web = sel(Some("app=web"), None);
    assert_eq!(list(&cache, req(&web)).unwrap().0, ["a/web-1", "b/web-2"]);
    // ADDED of a known object is a MODIFIED; a DELETED of an unknown one only moves the rv.
    let again = obj(
        &cache,
        &service("a", "web-1", 11, &[("app", "web")], "ClusterIP"),
    );
    assert_eq!(
        cache.apply(EventType::Added, again).unwrap(),
        Applied::Event(EventType::Modified)
    );
    let ghost = obj(&cache, &service("a", "ghost", 12, &[], "ClusterIP"));
    assert_eq!(
        cache.apply(EventType::Deleted, ghost).unwrap(),
        Applied::Advanced
    );
    assert_eq!(cache.resource_version(), 12);
}

#[test]
fn upstream_event_lines_are_applied() {
    let cache = services();
    let added = br#"{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"n","namespace":"c","resourceVersion":"11"},"spec":{"type":"ClusterIP","clusterIP":"10.96.0.9"}}}"#;
    assert_eq!(
        cache.apply_event_json(added).unwrap(),
        Applied::Event(EventType::Added)
    );
    let np = sel(None, Some("spec.clusterIP=10.96.0.9"));
    assert_eq!(list(&cache, req(&np)).unwrap().0, ["c/n"]);
    let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
    assert!(
        matches!(cache.apply_event_json(error), Err(ApplyError::BadEvent(m)) if m.contains("410"))
    );
    assert!(cache.apply_event_json(b"[1]").is_err());
    assert!(
        cache
            .apply_event_json(br#"{"type":"WHAT","object":{}}"#)
            .is_err()
    );
}

#[test]
fn a_watcher_that_falls_behind_the_history_is_ended() {
    let cache = services_with(CacheOptions {
        max_events: 4,
        max_batch: 2,
        ..options()
    });
    let mut slow = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    let mut fast = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    for rv in 11..=13 {
        modify(
            &cache,
            &service("a", "web-1", rv, &[("app", "web")], "ClusterIP"),
        );
    }
    // The slow one reads one batch, then stops reading while the fast one keeps up.
    assert!(matches!(slow.next(Duration::ZERO).unwrap(), WatchNext::Events(e) if e.len() == 2));
    for rv in 14..=20 {
        modify(
            &cache,
            &service("a", "web-1", rv, &[("app", "web")], "ClusterIP"),
        );
        drain(&mut fast);
    }
    assert_eq!(fast.resource_version(), 20);
    let e = slow.next(Duration::ZERO).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (410, "too old resource version: 12 (16)")
    );

    // The byte bound ends it the same way: each event keeps the replaced state alive.
    let cache = services_with(CacheOptions {
        max_history_bytes: 3 * 1024,
        ..options()
    });
    let mut slow = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    for rv in 11..=60 {
        modify(
            &cache,
            &service("a", "web-1", rv, &[("app", "web")], "ClusterIP"),
        );
    }
    assert!(cache.memory().events < 50);
    assert_eq!(slow.next(Duration::ZERO).unwrap_err().code, 410);

    // And age: with no age allowed, the history holds nothing once the next event comes.
    let cache = services_with(CacheOptions {
        max_age: Duration::ZERO,
        ..options()
    });
    let mut slow = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    modify(
        &cache,
        &service("a", "web-1", 11, &[("app", "web")], "ClusterIP"),
    );
    thread::sleep(Duration::from_millis(2));
    modify(
        &cache,
        &service("a", "web-1", 12, &[("app", "web")], "ClusterIP"),
    );
    assert_eq!(slow.next(Duration::ZERO).unwrap_err().code, 410);
}

#[test]
fn watchers_on_other_threads_see_every_event_in_order() {
    const EVENTS: u64 = 2000;
    let cache = services_with(CacheOptions {
        max_events: 100_000,
        max_history_bytes: 1 << 30,
        max_batch: 7,
        ..options()
    });
    let watchers: Vec<_> = (0..4)
        .map(|i| {
            let selectors = if i == 3 {
                sel(Some("app=web"), None)
            } else {
                Selectors::everything()
            };
            let mut w = cache.watch(Some("10"), None, selectors).unwrap();
            thread::spawn(move || {
                let mut rvs = Vec::new();
                while w.resource_version() < 10 + EVENTS {
                    if let WatchNext::Events(events) = w.next(Duration::from_secs(5)).unwrap() {
                        rvs.extend(events.iter().map(WatchEvent::rv));
                    }
                }
                rvs
            })
        })
        .collect();
    for rv in 11..=10 + EVENTS {
        let labels: &[(&str, &str)] = if rv % 2 == 0 {
            &[("app", "web")]
        } else {
            &[("app", "db")]
        };
        let name = format!("s-{}", rv % 51);
        modify(&cache, &service("a", &name, rv, labels, "ClusterIP"));
    }
    // The web watcher sees an event when the name is web after it or was before it.
    let mut was_web = std::collections::HashMap::new();
    let mut expected_web = Vec::new();
    for rv in 11..=10 + EVENTS {
        let now = rv % 2 == 0;
        if now || was_web.get(&(rv % 51)).copied().unwrap_or(false) {
            expected_web.push(rv);
        }
        was_web.insert(rv % 51, now);
    }
    for (i, t) in watchers.into_iter().enumerate() {
        let rvs = t.join().unwrap();
        if i < 3 {
            assert_eq!(rvs, (11..=10 + EVENTS).collect::<Vec<_>>(), "watcher {i}");
        } else {
            assert_eq!(rvs, expected_web, "web watcher");
        }
    }
}

/// An EndpointSlice as the stand-in cloud's `populate_endpointslices` makes it.
fn endpointslice(i: usize, rv: u64, nodes: usize) -> String {
    let service = format!("svc-{i:06}");
    let ns = format!("svc-{}", i % 10);
    let endpoints: Vec<String> = (0..3)
        .map(|k| {
            let n = (i + k) % nodes;
            format!(
                r#"{{"addresses":["10.244.{}.{}"],"conditions":{{"ready":true,"serving":true,"terminating":false}},"nodeName":"node-{n}","targetRef":{{"kind":"Pod","namespace":"{ns}","name":"{service}-{k}"}}}}"#,
                n % 256,
                (i * 3 + k) % 250 + 2
            )
        })
        .collect();
    format!(
        r#"{{"metadata":{{"name":"{service}-ab12c","namespace":"{ns}","uid":"6b0c7c4e-5f3a-4a1e-9d51-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-12-02T09:00:00Z","generation":1,"labels":{{"kubernetes.io/service-name":"{service}","endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}}}},"addressType":"IPv4","endpoints":[{}],"ports":[{{"name":"http","port":8080,"protocol":"TCP"}}]}}"#,
        endpoints.join(",")
    )
}

#[test]
fn memory_of_5000_endpointslices() {
    const N: usize = 5000;
    let cache = WatchCache::new(Resource::endpointslices(), options());
    let objects: Vec<Object> = (0..N)
        .map(|i| {
            cache
                .parse(endpointslice(i, 100 + i as u64, 50).as_bytes())
                .unwrap()
        })
        .collect();
    cache
        .replace(&(100 + N as u64).to_string(), objects)
        .unwrap();
    let m = cache.memory();
    assert_eq!((m.objects, m.events), (N, 0));
    let per_object = m.total_bytes as f64 / N as f64;
    let json = m.json_bytes as f64 / N as f64;
    let overhead = per_object - json;
    println!(
        "5000 EndpointSlices: {} bytes held, {per_object:.0} bytes per object, of which JSON \
         {json:.0} and overhead {overhead:.0} ({}-bit)",
        m.total_bytes,
        usize::BITS
    );
    assert!(overhead < 200.0, "overhead {overhead:.0} bytes per object");
    // Selecting by label reads the index, not the JSON.
    let one = sel(Some("kubernetes.io/service-name=svc-004321"), None);
    assert_eq!(
        list(&cache, req(&one)).unwrap().0,
        ["svc-1/svc-004321-ab12c"]
    );

    // A churn of modifications keeps the replaced states in the history, within its bound.
    for k in 0..1000u64 {
        let i = (k as usize * 7) % N;
        let o = cache
            .parse(endpointslice(i, 100 + N as u64 + 1 + k, 49).as_bytes())
            .unwrap();
        cache.apply(EventType::Modified, o).unwrap();
    }
    let churned = cache.memory();
    assert_eq!(churned.events, 1000);
    assert!(churned.total_bytes > m.total_bytes);
    assert!(
        churned.total_bytes - m.total_bytes
            <= CacheOptions::default().max_history_bytes + 1000 * 128
    );
}

#[test]
fn an_exact_resource_version_lists_the_state_then() {
    let cache = services_with(CacheOptions {
        max_events: 2,
        ..options()
    });
    modify(
        &cache,
        &service("a", "web-1", 11, &[("app", "api")], "ClusterIP"),
    );
    let db = obj(
        &cache,
        &service("a", "db-1", 12, &[("app", "db")], "NodePort"),
    );
    cache.apply(EventType::Deleted, db).unwrap();
    let everything = Selectors::everything();
    let at = |rv: &'static str| ListRequest {
        resource_version: Some(rv),
        exact: true,
        ..req(&everything)
    };
    let page = cache.list(&at("10")).unwrap();
    let seen: Vec<(String, u64)> = page.items().iter().map(|o| (o.key(), o.rv())).collect();
    assert_eq!(
        seen,
        [
            ("a/db-1".to_owned(), 4),
            ("a/web-1".to_owned(), 3),
            ("b/web-2".to_owned(), 5),
            ("b/zz".to_owned(), 6)
        ]
    );
    assert_eq!(page.resource_version(), 10);
    let web = sel(Some("app=web"), None);
    let web_at_11 = ListRequest {
        resource_version: Some("11"),
        exact: true,
        ..req(&web)
    };
    assert_eq!(
        list(&cache, web_at_11).unwrap(),
        (vec!["b/web-2".to_owned()], 11, None)
    );
    assert_eq!(
        list(&cache, at("12")).unwrap().0,
        ["a/web-1", "b/web-2", "b/zz"]
    );
    // Paging an exact list continues at its resourceVersion.
    let paged = ListRequest {
        limit: Some(3),
        ..at("10")
    };
    let (_, _, token) = list(&cache, paged).unwrap();
    let rest = ListRequest {
        continue_token: token.as_deref(),
        ..req(&everything)
    };
    assert_eq!(
        list(&cache, rest).unwrap(),
        (vec!["b/zz".to_owned()], 10, None)
    );
    modify(&cache, &service("b", "zz", 13, &[], "ClusterIP"));
    let e = cache.list(&at("10")).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (410, "too old resource version: 10 (11)")
    );
    assert_eq!(cache.list(&at("0")).unwrap_err().code, 400);
    assert_eq!(cache.list(&at("14")).unwrap_err().code, 504);
}

#[test]
fn a_list_from_the_cache_at_rv_0_is_whole_whatever_its_limit() {
    let cache = services();
    let everything = Selectors::everything();
    for rv in [None, Some(""), Some("0")] {
        let (keys, _, token) = list(
            &cache,
            ListRequest {
                limit: Some(1),
                resource_version: rv,
                ..req(&everything)
            },
        )
        .unwrap();
        assert_eq!(keys.len(), 4, "{rv:?}");
        assert_eq!(token, None, "{rv:?}");
    }
}

/// Every event line a watcher has now, as the client reads them.
fn drain_lines(cache: &WatchCache, w: &mut Watcher) -> Vec<Value> {
    let mut out = Vec::new();
    while let WatchNext::Events(events) = w.next(Duration::from_millis(30)).unwrap() {
        out.extend(events.iter().map(|e| line(cache, e)));
    }
    out
}

#[test]
fn send_initial_events_follows_the_apiservers_table() {
    let cache = services();
    modify(
        &cache,
        &service("a", "web-1", 11, &[("app", "web")], "ClusterIP"),
    );
    let summary = |lines: &[Value]| -> Vec<(String, String, bool)> {
        lines
            .iter()
            .map(|l| {
                let m = &l["object"]["metadata"];
                (
                    l["type"].as_str().unwrap().to_owned(),
                    format!(
                        "{}/{}",
                        m["namespace"].as_str().unwrap_or(""),
                        m["name"].as_str().unwrap_or("")
                    ),
                    m["annotations"]["k8s.io/initial-events-end"] == "true",
                )
            })
            .collect()
    };
    let web = || sel(Some("app=web"), None);
    // true, at "" or at an RV not newer than the cache: the state, then the annotated bookmark.
    for rv in [None, Some(""), Some("0"), Some("10"), Some("11")] {
        let mut w = cache.watch_from(rv, Some(true), None, web()).unwrap();
        assert!(w.bookmark().is_none(), "no bookmark before the end marker");
        let lines = drain_lines(&cache, &mut w);
        assert_eq!(
            summary(&lines),
            [
                ("ADDED".to_owned(), "a/web-1".to_owned(), false),
                ("ADDED".to_owned(), "b/web-2".to_owned(), false),
                ("BOOKMARK".to_owned(), "/".to_owned(), true),
            ],
            "{rv:?}"
        );
        assert_eq!(lines[2]["object"]["metadata"]["resourceVersion"], "11");
        assert_eq!(lines[2]["object"]["kind"], "Service");
        assert!(w.bookmark().is_some());
    }
    // Then live events follow.
    let mut w = cache
        .watch_from(Some("0"), Some(true), None, web())
        .unwrap();
    drain_lines(&cache, &mut w);
    modify(
        &cache,
        &service("b", "web-2", 12, &[("app", "web")], "ClusterIP"),
    );
    assert_eq!(
        drain(&mut w),
        [(EventType::Modified, "b/web-2".to_owned(), 12)]
    );
    // false at "": from now, nothing of the current state.
    let mut w = cache
        .watch_from(Some(""), Some(false), None, web())
        .unwrap();
    assert!(drain(&mut w).is_empty());
    modify(
        &cache,
        &service("a", "web-1", 13, &[("app", "web")], "ClusterIP"),
    );
    assert_eq!(
        drain(&mut w),
        [(EventType::Modified, "a/web-1".to_owned(), 13)]
    );
    // false (or unset) at N: the events after N.
    for initial in [Some(false), None] {
        let mut w = cache.watch_from(Some("11"), initial, None, web()).unwrap();
        assert_eq!(
            drain(&mut w),
            [
                (EventType::Modified, "b/web-2".to_owned(), 12),
                (EventType::Modified, "a/web-1".to_owned(), 13)
            ]
        );
    }
    // true at an RV the cache does not reach: the 504 a reflector falls back from.
    let e = cache
        .watch_from(Some("99"), Some(true), None, web())
        .err()
        .unwrap();
    assert_eq!(e.code, 504);
}

#[test]
fn a_watch_never_resumes_in_the_middle_of_events_sharing_a_resource_version() {
    let cache = services_with(CacheOptions {
        max_batch: 2,
        ..options()
    });
    let mut w = cache
        .watch(Some("10"), None, Selectors::everything())
        .unwrap();
    // A relist at 20 without three of the four: three DELETED events, all at 20.
    let kept = [service("b", "zz", 6, &[], "ClusterIP")];
    cache
        .replace("20", kept.iter().map(|b| obj(&cache, b)).collect())
        .unwrap();
    // The batch is not cut inside the run, though max_batch is 2.
    let WatchNext::Events(events) = w.next(Duration::ZERO).unwrap() else {
        panic!("events")
    };
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e.rv() == 20 && e.kind() == EventType::Deleted)
    );
    // A client that saw one of them (its connection broke) resumes at 20: it must relist,
    // not miss the other two.
    let e = cache
        .watch(Some("20"), None, Selectors::everything())
        .err()
        .unwrap();
    assert_eq!((e.code, e.reason), (410, "Expired"));
    // From before the run, every event of it comes.
    let mut w = cache
        .watch(Some("19"), None, Selectors::everything())
        .unwrap();
    assert_eq!(drain(&mut w).len(), 3);
    // Once a later event moves past the run, resuming after it is fine.
    modify(&cache, &service("b", "zz", 21, &[], "ClusterIP"));
    let mut w = cache
        .watch(Some("21"), None, Selectors::everything())
        .unwrap();
    assert!(drain(&mut w).is_empty());
}

/// The CPU cost of gzip on the feeder's list (issue 16 item 4): a 1,000-EndpointSlice list
/// decoded and indexed as the feeder does it (8 KiB reads), plain and gzip-compressed at
/// the apiserver's level (1, fastest). Prints the figures; asserts both give every object.
#[test]
fn decoding_a_gzip_list_of_1000_endpointslices_costs_little_more_than_plain() {
    use std::io::Write as _;
    use std::time::Instant;

    use crate::cache::decode::{BodyDecoder, BodyShape, Unit};

    const N: usize = 1000;
    let items: Vec<String> = (0..N)
        .map(|i| endpointslice(i, 100 + i as u64, 50))
        .collect();
    let body = format!(
        r#"{{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{{"resourceVersion":"2000"}},"items":[{}]}}"#,
        items.join(",")
    );
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(body.as_bytes()).unwrap();
    let zipped = encoder.finish().unwrap();
    let cache = WatchCache::new(Resource::endpointslices(), options());
    let decode = |wire: &[u8], gzip: bool| {
        let started = Instant::now();
        let mut decoder = BodyDecoder::new(BodyShape::List, gzip, 1 << 20);
        let mut objects = Vec::with_capacity(N);
        let mut sink = |unit: Unit<'_>| {
            if let Unit::ListItem(raw) = unit {
                objects.push(cache.parse(raw).unwrap());
            }
        };
        for chunk in wire.chunks(8192) {
            decoder.feed(chunk, &mut sink).unwrap();
        }
        decoder.finish(&mut sink).unwrap();
        assert_eq!(objects.len(), N);
        started.elapsed()
    };
    // The best of a few rounds: the figure is the decoder's, not the machine's noise.
    let best = |gzip: bool| {
        let wire = if gzip { &zipped[..] } else { body.as_bytes() };
        (0..5).map(|_| decode(wire, gzip)).min().unwrap()
    };
    let (plain, inflated) = (best(false), best(true));
    println!(
        "1,000 EndpointSlices: {} bytes plain, {} gzip ({:.1}x); decode and index {plain:?} \
         plain, {inflated:?} gzip ({} build)",
        body.len(),
        zipped.len(),
        body.len() as f64 / zipped.len() as f64,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    assert!(zipped.len() * 5 < body.len());
}
