//! TokenRequest answers.

use super::*;

#[test]
fn token_answers_live_outside_every_collection() {
    let dir = TempDir::new("tokens");
    let store = open(&dir);
    let key = TokenKey {
        component: crate::names::Component::KUBELET,
        namespace: "default".into(),
        name: "builder".into(),
        digest: "ab".repeat(32),
    };
    assert_eq!(store.get_token(&key).unwrap(), None);
    store.put_token(&key, b"{\"status\":{}}").unwrap();
    assert_eq!(
        store.put_token(&key, b"{\"status\":{}}").unwrap(),
        PutOutcome::Identical
    );
    assert_eq!(
        store.get_token(&key).unwrap().as_deref(),
        Some(&b"{\"status\":{}}"[..])
    );
    let file = dir
        .root()
        .join("kubelet/tokens/default/builder")
        .join("ab".repeat(32));
    assert_eq!(mode(&file), 0o600);
    // A service account list does not see it.
    let accounts = CollectionKey::new("kubelet", "serviceaccounts", "v1", "");
    assert_eq!(names(&store, &accounts, None, None), None);
    // Another pod's answer, not renewed for longer than TOKEN_STALE, goes at the next
    // put; a recent one stays.
    let account = dir.root().join("kubelet/tokens/default/builder");
    let other = |digest: &str| TokenKey {
        digest: digest.repeat(32),
        ..key.clone()
    };
    store.put_token(&other("cd"), b"{}").unwrap();
    store.put_token(&other("ef"), b"{}").unwrap();
    let old = SystemTime::now() - TOKEN_STALE - Duration::from_secs(60);
    File::options()
        .write(true)
        .open(account.join("cd".repeat(32)))
        .unwrap()
        .set_modified(old)
        .unwrap();
    store
        .put_token(&key, b"{\"status\":{\"renewed\":1}}")
        .unwrap();
    assert_eq!(store.get_token(&other("cd")).unwrap(), None);
    assert!(store.get_token(&other("ef")).unwrap().is_some());
    assert!(store.get_token(&key).unwrap().is_some());
    let hostile = TokenKey {
        name: "../x".into(),
        ..key
    };
    assert!(store.get_token(&hostile).is_err());
    assert!(store.put_token(&hostile, b"{}").is_err());
}

#[test]
fn a_service_accounts_token_answers_are_capped_oldest_first() {
    let dir = TempDir::new("token-cap");
    let store = open(&dir);
    let account = dir.root().join("kubelet/tokens/default/cron");
    let key = |i: usize| TokenKey {
        component: crate::names::Component::KUBELET,
        namespace: "default".into(),
        name: "cron".into(),
        digest: format!("{i:064x}"),
    };
    // A CronJob's pods, one a minute, each with its own answer; none is stale yet.
    let start = SystemTime::now() - Duration::from_secs(3600);
    for i in 0..TOKEN_CAP + 10 {
        store.put_token(&key(i), b"{}").unwrap();
        File::options()
            .write(true)
            .open(account.join(&key(i).digest))
            .unwrap()
            .set_modified(start + Duration::from_secs(60 * i as u64))
            .unwrap();
    }
    // A put keeps its own answer and the newest others.
    store.put_token(&key(3), b"{\"renewed\":1}").unwrap();
    let left = fs::read_dir(&account).unwrap().count();
    assert_eq!(left, TOKEN_CAP);
    assert!(store.get_token(&key(3)).unwrap().is_some(), "just written");
    for i in [0, 1, 2, 4, 10] {
        assert_eq!(
            store.get_token(&key(i)).unwrap(),
            None,
            "{i} is among the oldest"
        );
    }
    for i in 11..TOKEN_CAP + 10 {
        assert!(store.get_token(&key(i)).unwrap().is_some(), "{i} is recent");
    }
}
