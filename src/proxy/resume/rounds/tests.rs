//! Rounds led by hand (no cloud) and list bodies read from bytes.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn key(path: &str) -> ScopeKey {
    ScopeKey {
        identity: None,
        path: path.to_owned(),
        label_selector: String::new(),
        field_selector: "spec.nodeName=edge-1".to_owned(),
        accept: "application/json",
    }
}

fn item(name: &str, rv: u64) -> ListedItem {
    ListedItem {
        namespace: Some("a".to_owned()),
        name: name.to_owned(),
        rv: rv.to_string(),
        object: format!(r#"{{"kind":"Pod","metadata":{{"name":"{name}"}}}}"#)
            .into_bytes()
            .into_boxed_slice(),
    }
}

fn end(rv: u64) -> ListEnd {
    ListEnd {
        rv: rv.to_string(),
        kind: "Pod".to_owned(),
        api_version: "v1".to_owned(),
    }
}

/// What one watch of a round received: item names, then `end:<rv>` or `failed`.
fn drain(rx: &Receiver<Listed>) -> Vec<String> {
    rx.iter()
        .map(|listed| match listed {
            Listed::Item(item) => item.name.clone(),
            Listed::End(end) => format!("end:{}", end.rv),
            Listed::Failed(_) => "failed".to_owned(),
        })
        .collect()
}

#[test]
fn two_joins_within_the_window_share_one_list() {
    let rounds = ListRounds::new(Duration::ZERO);
    let pods = key("/api/v1/pods");
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("the first join leads");
    };
    let Joined::Follow(rx) = rounds.join(pods.clone()) else {
        panic!("the second join follows");
    };
    // Another scope (another selector) is another round.
    assert!(matches!(
        rounds.join(key("/api/v1/namespaces/a/pods")),
        Joined::Lead(_)
    ));
    let lists = AtomicUsize::new(0);
    let mut led = Vec::new();
    leader.run(
        &mut |each| {
            lists.fetch_add(1, Ordering::Relaxed);
            assert!(each(item("web", 5)));
            assert!(each(item("db", 6)));
            Ok(end(9))
        },
        &mut |listed| {
            led.push(matches!(listed, Listed::Item(_)));
            true
        },
    );
    assert_eq!(lists.load(Ordering::Relaxed), 1);
    assert_eq!(led, [true, true, false]);
    assert_eq!(drain(&rx), ["web", "db", "end:9"]);
}

#[test]
fn a_join_after_listing_began_opens_a_new_round() {
    let rounds = ListRounds::new(Duration::ZERO);
    let pods = key("/api/v1/pods");
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("the first join leads");
    };
    leader.run(
        &mut |each| {
            // Listing: the round is closed, a newcomer leads a round of its own.
            assert!(matches!(rounds.join(pods.clone()), Joined::Lead(_)));
            assert!(each(item("web", 5)));
            Ok(end(9))
        },
        &mut |_| true,
    );
    assert!(matches!(rounds.join(pods.clone()), Joined::Lead(_)));
}

#[test]
fn a_follower_that_stalls_is_dropped() {
    let mut rounds = ListRounds::new(Duration::ZERO);
    // Long enough for the reading follower's thread to be scheduled under any CI load (it
    // is waited on for each item it has not taken yet); paid once, for the stalled one.
    rounds.follower_wait = Duration::from_secs(2);
    let pods = key("/api/v1/pods");
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("the first join leads");
    };
    let Joined::Follow(stalled) = rounds.join(pods.clone()) else {
        panic!("follows");
    };
    let Joined::Follow(reading) = rounds.join(pods.clone()) else {
        panic!("follows");
    };
    let names = std::thread::scope(|s| {
        let reader = s.spawn(|| drain(&reading));
        let mut led = 0;
        leader.run(
            &mut |each| {
                for i in 0..FOLLOWER_QUEUE as u64 + 10 {
                    assert!(each(item(&format!("pod-{i}"), i)));
                }
                Ok(end(1000))
            },
            &mut |_| {
                led += 1;
                true
            },
        );
        assert_eq!(led, FOLLOWER_QUEUE + 11);
        reader.join().unwrap()
    });
    // The reading follower got everything; the stalled one its queue's worth, then its
    // channel closed with no end: its watch ends (or retries), never takes half a list
    // for whole.
    assert_eq!(names.len(), FOLLOWER_QUEUE + 11);
    assert_eq!(names.last().map(String::as_str), Some("end:1000"));
    let got = drain(&stalled);
    assert_eq!(got.len(), FOLLOWER_QUEUE);
    assert!(got.iter().all(|n| n.starts_with("pod-")));
}

#[test]
fn a_leader_whose_client_left_lists_on_for_its_followers() {
    let rounds = ListRounds::new(Duration::ZERO);
    let pods = key("/api/v1/pods");
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("leads");
    };
    let Joined::Follow(rx) = rounds.join(pods.clone()) else {
        panic!("follows");
    };
    let mut calls = 0;
    leader.run(
        &mut |each| {
            assert!(each(item("web", 5)));
            assert!(each(item("db", 6)));
            Ok(end(9))
        },
        &mut |_| {
            calls += 1;
            false
        },
    );
    assert_eq!(calls, 1);
    assert_eq!(drain(&rx), ["web", "db", "end:9"]);

    // Alone, a leader whose client left stops the list.
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("leads");
    };
    leader.run(
        &mut |each| {
            assert!(!each(item("web", 5)));
            Err(RoundFailure::Unusable("stopped".to_owned()))
        },
        &mut |_| false,
    );
}

#[test]
fn a_failed_list_or_a_leader_gone_reaches_the_followers() {
    let rounds = ListRounds::new(Duration::ZERO);
    let pods = key("/api/v1/pods");
    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("leads");
    };
    let Joined::Follow(rx) = rounds.join(pods.clone()) else {
        panic!("follows");
    };
    leader.run(
        &mut |_| Err(RoundFailure::Cloud("503".to_owned())),
        &mut |listed| {
            assert!(matches!(listed, Listed::Failed(RoundFailure::Cloud(_))));
            true
        },
    );
    assert_eq!(drain(&rx), ["failed"]);

    let Joined::Lead(leader) = rounds.join(pods.clone()) else {
        panic!("leads");
    };
    let Joined::Follow(rx) = rounds.join(pods.clone()) else {
        panic!("follows");
    };
    rounds.wait_for_followers(&pods, 1);
    drop(leader);
    assert_eq!(drain(&rx), Vec::<String>::new());
    assert!(matches!(rounds.join(pods), Joined::Lead(_)));
}

const POD_LIST: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[
 {"metadata":{"name":"web","namespace":"a","resourceVersion":"40"},"spec":{}},
 {"metadata":{"name":"n\u0031","resourceVersion":"41"}}]}"#;

fn read(
    body: &[u8],
    gzip: bool,
    hint: Option<(&str, &str)>,
) -> Result<(Vec<ListedItem>, ListEnd), RoundFailure> {
    let mut items = Vec::new();
    let end = read_list(&mut &body[..], gzip, hint, &mut |item| {
        items.push(item);
        true
    })?;
    Ok((items, end))
}

#[test]
fn a_list_is_read_item_by_item_with_kind_put_in() {
    let (items, end) = read(POD_LIST.as_bytes(), false, None).unwrap();
    assert_eq!(end, self::end(42));
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].namespace.as_deref(), Some("a"));
    assert_eq!(
        (items[0].name.as_str(), items[0].rv.as_str()),
        ("web", "40")
    );
    let object: serde_json::Value = serde_json::from_slice(&items[0].object).unwrap();
    assert_eq!(
        object,
        serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web", "namespace": "a", "resourceVersion": "40"}, "spec": {}})
    );
    // Cluster-scoped, an escaped name.
    assert_eq!(
        (items[1].namespace.as_deref(), items[1].name.as_str()),
        (None, "n1")
    );

    // Gzip, as the round asks for it.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(POD_LIST.as_bytes()).unwrap();
    let (zipped, end) = read(&gz.finish().unwrap(), true, None).unwrap();
    assert_eq!((zipped, end), (items, self::end(42)));
}

#[test]
fn a_list_that_cannot_be_made_into_events_fails_the_round() {
    // Cut short, garbage, no resourceVersion: the cloud's trouble, retried.
    let cut = &POD_LIST.as_bytes()[..POD_LIST.len() - 10];
    assert!(matches!(
        read(cut, false, None),
        Err(RoundFailure::Cloud(_))
    ));
    assert!(matches!(
        read(b"<html>oops", false, None),
        Err(RoundFailure::Cloud(_))
    ));
    let no_rv = r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#;
    assert!(matches!(
        read(no_rv.as_bytes(), false, None),
        Err(RoundFailure::Cloud(_))
    ));
    // Items before the list names its kind: the watch's own kind, else unusable.
    let items_first = r#"{"items":[{"metadata":{"name":"web","resourceVersion":"4"}}],"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"}}"#;
    assert!(matches!(
        read(items_first.as_bytes(), false, None),
        Err(RoundFailure::Unusable(_))
    ));
    let (items, end) = read(items_first.as_bytes(), false, Some(("Pod", "v1"))).unwrap();
    assert!(
        items[0]
            .object
            .starts_with(br#"{"kind":"Pod","apiVersion":"v1","metadata""#)
    );
    assert_eq!(end, self::end(5));
    // An item with no name cannot be keyed.
    let nameless = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{}}]}"#;
    assert!(read(nameless.as_bytes(), false, None).is_err());
}

#[test]
fn with_kind_keeps_the_object_whole() {
    assert_eq!(
        &*with_kind(b" {}", "Pod", "v1").unwrap(),
        br#"{"kind":"Pod","apiVersion":"v1"}"#
    );
    assert_eq!(
        &*with_kind(br#"{"a":1}"#, "Pod", "v1").unwrap(),
        br#"{"kind":"Pod","apiVersion":"v1","a":1}"#
    );
    assert!(with_kind(b"[1]", "Pod", "v1").is_none());
}

#[test]
fn the_list_deadline_is_cut_to_the_clients_time() {
    let now = Instant::now();
    assert_eq!(list_deadline(None, now), LIST_DEADLINE);
    assert_eq!(
        list_deadline(Some(now + Duration::from_secs(20)), now),
        Duration::from_secs(20)
    );
    assert_eq!(
        list_deadline(Some(now + Duration::from_secs(3600)), now),
        LIST_DEADLINE
    );
    // Due already: one second, so the list asked for is tried.
    assert_eq!(list_deadline(Some(now), now), Duration::from_secs(1));
}
