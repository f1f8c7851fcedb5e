use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::*;
use crate::cache::temp_dir::TempDir;

const NOW: i64 = 1_800_000_000;
const LATER: i64 = NOW + 3600;

fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    <[u8; 32]>::try_from(d.as_ref()).unwrap()
}

fn grants() -> Grants {
    Grants::with_key([7; 32])
}

fn services(ns: Option<&str>, label: Option<&str>) -> Scope {
    Scope::list("", "services", ns, label, None)
}

fn secret(ns: &str, name: &str) -> Scope {
    Scope::object("", "secrets", Some(ns), name)
}

#[test]
fn a_list_grant_covers_its_own_scope_narrower_namespaces_and_any_selectors_only_when_it_has_none() {
    let g = grants();
    let t = digest("Bearer t");
    g.record(&t, services(None, None), LATER, NOW);
    assert!(g.allows_list(&t, &services(None, None), NOW));
    assert!(g.allows_list(&t, &services(Some("kube-system"), None), NOW));
    assert!(g.allows_list(&t, &services(None, Some("app=x")), NOW));
    // Another resource, another group, another credential: nothing.
    assert!(!g.allows_list(&t, &Scope::list("", "secrets", None, None, None), NOW));
    assert!(!g.allows_list(&t, &Scope::list("apps", "services", None, None, None), NOW));
    assert!(!g.allows_list(&digest("Bearer u"), &services(None, None), NOW));

    let g = grants();
    g.record(&t, services(Some("a"), Some("app=x")), LATER, NOW);
    assert!(g.allows_list(&t, &services(Some("a"), Some(" app=x ")), NOW));
    assert!(
        !g.allows_list(&t, &services(Some("a"), None), NOW),
        "wider selectors"
    );
    assert!(!g.allows_list(&t, &services(Some("a"), Some("app=y")), NOW));
    assert!(!g.allows_list(&t, &services(Some("b"), Some("app=x")), NOW));
    assert!(
        !g.allows_list(&t, &services(None, Some("app=x")), NOW),
        "all namespaces"
    );
}

#[test]
fn an_object_is_covered_by_its_own_grant_or_a_list_that_holds_it() {
    let g = grants();
    let t = digest("Bearer t");
    g.record(&t, secret("a", "s"), LATER, NOW);
    assert_eq!(
        g.object_cover(&t, &secret("a", "s"), NOW),
        ObjectCover::Whole
    );
    assert_eq!(
        g.object_cover(&t, &secret("a", "other"), NOW),
        ObjectCover::Nothing
    );
    assert_eq!(
        g.object_cover(&t, &secret("b", "s"), NOW),
        ObjectCover::Nothing
    );
    // An object grant is no list grant.
    assert!(!g.allows_list(&t, &Scope::list("", "secrets", Some("a"), None, None), NOW));

    g.record(
        &t,
        Scope::list("", "secrets", None, Some("k=v"), None),
        LATER,
        NOW,
    );
    assert_eq!(
        g.object_cover(&t, &secret("b", "x"), NOW),
        ObjectCover::Selected(vec![("k=v".to_owned(), String::new())])
    );
    g.record(
        &t,
        Scope::list("", "secrets", Some("b"), None, None),
        LATER,
        NOW,
    );
    assert_eq!(
        g.object_cover(&t, &secret("b", "x"), NOW),
        ObjectCover::Whole
    );
}

#[test]
fn grants_end_with_the_tokens_own_exp() {
    let g = grants();
    let t = digest("Bearer t");
    g.record(&t, services(None, None), NOW + 10, NOW);
    assert!(g.allows_list(&t, &services(None, None), NOW + 9));
    assert!(!g.allows_list(&t, &services(None, None), NOW + 10));
    // Already expired: never kept.
    let g = grants();
    g.record(&t, secret("a", "s"), NOW, NOW);
    assert_eq!(g.len(), 0);

    let jwt = |exp: i64| {
        let claims = URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"x","exp":{exp}}}"#));
        format!("Bearer eyJhbGciOiJSUzI1NiJ9.{claims}.c2ln")
    };
    assert_eq!(expiry_of(&jwt(NOW + 99), NOW), NOW + 99);
    assert_eq!(expiry_of(&format!(" {} ", jwt(5)), NOW), 5);
    assert_eq!(expiry_of("Bearer opaque", NOW), NOW + DEFAULT_LIFETIME);
    assert_eq!(expiry_of("Basic dTpw", NOW), NOW + DEFAULT_LIFETIME);
}

#[test]
fn grants_are_bounded_and_the_one_seen_longest_ago_goes_first() {
    let g = grants();
    // Each credential up to its own bound, together the whole bound.
    let holder = |i: i64| {
        digest(&format!(
            "Bearer t{}",
            i as usize / MAX_GRANTS_PER_CREDENTIAL
        ))
    };
    for i in 0..MAX_GRANTS as i64 {
        g.record(
            &holder(i),
            secret("a", &format!("s{i}")),
            NOW + 100_000,
            NOW + i,
        );
    }
    let t = holder(0);
    let u = digest("Bearer u");
    assert_eq!(g.len(), MAX_GRANTS);
    // Seen again: now the newest; the next new grant pushes out s1.
    g.record(&t, secret("a", "s0"), NOW + 100_000, NOW + 5000);
    g.record(&u, secret("a", "new"), NOW + 100_000, NOW + 5001);
    assert_eq!(g.len(), MAX_GRANTS);
    assert_eq!(
        g.object_cover(&t, &secret("a", "s0"), NOW),
        ObjectCover::Whole
    );
    assert_eq!(
        g.object_cover(&t, &secret("a", "s1"), NOW),
        ObjectCover::Nothing
    );
    assert_eq!(
        g.object_cover(&u, &secret("a", "new"), NOW),
        ObjectCover::Whole
    );
    // Expired grants go before any live one.
    g.record(&t, secret("a", "late"), NOW + 200_000, NOW + 100_000);
    assert_eq!(g.len(), 1, "every other grant had expired");
    // Selectors past the bound are not remembered.
    let long = "a".repeat(MAX_SCOPE_TEXT + 1);
    g.record(&t, services(None, Some(&long)), LATER, NOW);
    assert!(!g.allows_list(&t, &services(None, Some(&long)), NOW));
}

#[test]
fn grants_survive_a_restart_without_the_credential_on_disk() {
    let dir = TempDir::new("grants");
    let now = unix_now();
    let t = digest("Bearer the-secret-token");
    {
        let (store, _) = Store::open(&dir.root()).unwrap();
        let g = Grants::load(&store);
        g.record(&t, services(None, None), now + 600, now);
        g.record(&t, secret("a", "gone"), now + 1, now - 10); // expires before the restart
        assert!(g.take_persist_turn());
        assert!(!g.take_persist_turn(), "one message queued at a time");
        g.persist(&store);
        assert!(!g.take_persist_turn(), "nothing unsaved");
    }
    let file = std::fs::read(dir.root().join(".grants")).unwrap();
    let text = String::from_utf8_lossy(&file);
    assert!(!text.contains("the-secret-token"));
    for plain in [&t[..], &digest("the-secret-token")[..]] {
        let encoded = base64::engine::general_purpose::STANDARD.encode(plain);
        assert!(!text.contains(&encoded), "no plain digest on disk");
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.root().join(".grants"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (store, _) = Store::open(&dir.root()).unwrap();
    let g = Grants::load(&store);
    assert!(g.allows_list(&t, &services(Some("x"), None), unix_now()));
    assert_eq!(g.len(), 1, "the expired grant is forgotten");
    assert!(!g.allows_list(&digest("Bearer other"), &services(None, None), unix_now()));

    // An unreadable file: a new key, no grants.
    std::fs::write(dir.root().join(".grants"), b"{garbage").unwrap();
    let g = Grants::load(&store);
    assert!(!g.allows_list(&t, &services(None, None), unix_now()));
}

#[test]
fn a_change_after_the_snapshot_queues_another_write() {
    let g = grants();
    let t = digest("Bearer t");
    g.record(&t, services(None, None), LATER, NOW);
    assert!(g.take_persist_turn());
    // The writer clears the flags before it snapshots; a change after it is unsaved again.
    g.queued.store(false, Ordering::SeqCst);
    g.unsaved.store(false, Ordering::SeqCst);
    g.record(&t, secret("a", "s"), LATER, NOW);
    assert!(g.take_persist_turn());
    // Seen again with the same exp: nothing to write.
    g.not_queued();
    g.unsaved.store(false, Ordering::SeqCst);
    g.record(&t, secret("a", "s"), LATER, NOW + 1);
    assert!(!g.take_persist_turn());
}

#[test]
fn one_credential_pushes_out_only_its_own_grants() {
    let g = grants();
    let other = digest("Bearer kube-proxy");
    g.record(&other, services(None, None), LATER, NOW);
    // A client listing with ever new selectors: its own oldest goes, never another's.
    let flood = digest("Bearer flood");
    for i in 0..(MAX_GRANTS_PER_CREDENTIAL as i64 + 10) {
        g.record(&flood, secret("a", &format!("s{i}")), LATER, NOW + 1 + i);
    }
    assert_eq!(g.len(), MAX_GRANTS_PER_CREDENTIAL + 1);
    assert!(g.allows_list(&other, &services(None, None), NOW));
    assert_eq!(
        g.object_cover(&flood, &secret("a", "s0"), NOW),
        ObjectCover::Nothing
    );
}
