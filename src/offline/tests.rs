use super::*;

#[test]
fn offline_creates_need_a_name_the_apiserver_and_the_store_accept() {
    let check = |meta: serde_json::Value| unusable_name(&serde_json::json!({ "metadata": meta }));
    for meta in [
        serde_json::json!({"name": "web-1"}),
        serde_json::json!({"name": "kubelet.17a8b2c3d4e5f6a7"}),
        serde_json::json!({"generateName": "csr-"}),
        serde_json::json!({"generateName": "a".repeat(100)}),
        serde_json::json!({"name": "", "generateName": "web-"}),
    ] {
        assert_eq!(check(meta.clone()), None, "{meta}");
    }
    for meta in [
        serde_json::json!({"name": "../x"}),
        serde_json::json!({"name": "a/b"}),
        serde_json::json!({"name": "Upper"}),
        serde_json::json!({"name": ".hidden"}),
        serde_json::json!({"name": "a%2F"}),
        serde_json::json!({"name": "x".repeat(254)}),
        serde_json::json!({"generateName": "../"}),
        serde_json::json!({"name": "", "generateName": "A-"}),
        serde_json::json!({}),
        serde_json::json!({"name": ""}),
    ] {
        assert!(check(meta.clone()).is_some(), "{meta}");
    }
}

#[test]
fn watch_hold_is_between_30_and_60_minutes() {
    let d = random_watch_duration();
    assert!(
        d >= Duration::from_secs(1800) && d < Duration::from_secs(3600),
        "{d:?}"
    );
}
