//! `Synced`: what it records, the ages it gives, and `.synced` across a restart.

use std::sync::Arc;

use super::*;
use crate::cache::key::CollectionKey;
use crate::cache::store::Store;
use crate::cache::temp_dir::TempDir;

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

fn services() -> CollectionKey {
    CollectionKey::new("kube-proxy", "services", "v1", "")
}

fn open(dir: &TempDir) -> Store {
    Store::open(&dir.root()).unwrap().0
}

#[test]
fn a_note_gives_an_age_and_the_clock_behind_gives_none() {
    let synced = Synced::default();
    assert_eq!(synced.age(&pods()), None, "no record, no age");
    let now = u64::try_from(crate::unix_now()).unwrap();
    synced.note(&pods(), now - 42);
    let age = synced.age(&pods()).unwrap();
    assert!((42..=44).contains(&age), "{age}");
    synced.note(&pods(), now + 3600);
    assert_eq!(
        synced.age(&pods()),
        None,
        "a clock behind the sync: unknown"
    );
    assert_eq!(age_at(100, 99), None);
    assert_eq!(age_at(100, 130), Some(30));
    // The metadata view is its own kind directory.
    synced.note(&pods().metadata(), now);
    let mut kinds: Vec<String> = synced.entries().into_iter().map(|e| e.1).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core",
            "pods.v1.core"
        ]
    );
    synced.forget(&pods());
    assert_eq!(synced.last(&pods()), None);
}

#[test]
fn a_relayed_word_is_as_old_as_its_source() {
    assert_eq!(Word::Cloud.at(500), Some(500));
    assert_eq!(Word::Relayed(Arc::new(|| Some(120))).at(500), Some(120));
    assert_eq!(Word::Relayed(Arc::new(|| None)).at(500), None);
}

#[test]
fn kinds_past_the_cap_push_out_the_least_recent() {
    let synced = Synced::default();
    for n in 0..MAX_KINDS + 5 {
        synced.note(&CollectionKey::new("c", &format!("r{n}"), "v1", "g"), 1);
    }
    assert_eq!(synced.entries().len(), MAX_KINDS);
    // One already recorded still moves.
    synced.note(&CollectionKey::new("c", "r0", "v1", "g"), 7);
    assert_eq!(
        synced.last(&CollectionKey::new("c", "r0", "v1", "g")),
        Some(7)
    );
}

#[test]
fn the_record_is_written_when_due_and_at_the_drain_and_read_back() {
    let dir = TempDir::new("synced-file");
    let store = open(&dir);
    let file = dir.root().join(".synced");
    let synced = Synced::load(&store);
    synced.persist(&store, false);
    assert!(!file.exists(), "nothing changed: nothing written");

    synced.note(&pods(), 1_000);
    synced.persist(&store, false);
    assert!(
        !file.exists(),
        "within 5 minutes of the start, a change waits"
    );
    synced.persist(&store, true);
    let first = std::fs::read(&file).expect("the drain writes it");
    synced.note(&pods(), 2_000);
    synced.persist(&store, false);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        first,
        "within 5 minutes of the last write, a change waits"
    );
    // Five minutes later it is due.
    synced.due.store(0, Ordering::Relaxed);
    synced.note(&services(), 3_000);
    synced.persist(&store, false);
    assert_ne!(std::fs::read(&file).unwrap(), first);
    synced.note(&pods(), 4_000);
    synced.persist(&store, true);

    drop(store);
    let store = open(&dir);
    let again = Synced::load(&store);
    assert_eq!(again.last(&pods()), Some(4_000), "the drain's write");
    assert_eq!(again.last(&services()), Some(3_000));
    let bytes = std::fs::read(&file).unwrap();
    assert!(bytes.len() < 20 * 1024);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains(r#""resource":"pods.v1.core""#), "{text}");
}

#[test]
fn only_a_cache_without_the_file_takes_directory_times() {
    let dir = TempDir::new("synced-mtime");
    let store = open(&dir);
    let key = crate::cache::key::ObjectKey {
        collection: pods(),
        namespace: Some("ns".to_owned()),
        name: "a".to_owned(),
    };
    store
        .put(&key, br#"{"metadata":{"name":"a","namespace":"ns"}}"#, None)
        .unwrap();
    // Token answers have no kind directory: no entry.
    std::fs::create_dir_all(dir.root().join("kubelet/tokens/ns")).unwrap();
    let now = crate::unix_secs();
    let synced = Synced::load(&store);
    let at = synced
        .last(&pods())
        .expect("no .synced at all: the directory's time");
    assert!(at <= now && now - at < 60, "{at} vs {now}");
    assert_eq!(synced.entries().len(), 1, "{:?}", synced.entries());

    // An entry in the file wins over the directory.
    let bytes =
        br#"{"version":1,"kinds":[{"component":"kubelet","resource":"pods.v1.core","at":5}]}"#;
    std::fs::write(dir.root().join(".synced"), bytes).unwrap();
    assert_eq!(Synced::load(&store).last(&pods()), Some(5));

    // A kind the file lacks was noted after its last write and lost (a crash), or never
    // synced (only the heartbeat's writes): its directory, written later than any sync it
    // had, would read younger than the truth. No age.
    let bytes = br#"{"version":1,"kinds":[{"component":"kube-proxy","resource":"services.v1.core","at":5}]}"#;
    std::fs::write(dir.root().join(".synced"), bytes).unwrap();
    let synced = Synced::load(&store);
    assert_eq!(synced.last(&pods()), None);
    assert_eq!(synced.last(&services()), Some(5));

    // A file that does not parse is no record, and no licence for directory times either.
    std::fs::write(dir.root().join(".synced"), b"{not json").unwrap();
    assert_eq!(Synced::load(&store).entries(), []);
}

#[test]
fn file_entries_map_back_to_their_keys() {
    let meta = pods().metadata();
    let lease = CollectionKey::new("tinyhub", "leases", "v1", "coordination.k8s.io");
    for key in [pods(), meta, lease] {
        assert_eq!(
            key_of(key.component.as_str(), &key.dir_name()),
            Some(key.clone())
        );
    }
    assert_eq!(key_of("kubelet", "tokens"), None);
    assert_eq!(key_of("kubelet", "pods.v1"), None);
    assert_eq!(key_of("Kube let", "pods.v1.core"), None);
    assert_eq!(key_of("kubelet", "../pods.v1.core"), None);
}

#[test]
fn the_readyz_lines_name_component_and_kind() {
    let synced = Synced::default();
    synced.note(&pods(), 1_700_000_000);
    let mut lines = String::new();
    readyz_lines(&synced, &mut lines);
    assert!(
        lines.starts_with("[+]synced kubelet/pods.v1.core "),
        "{lines}"
    );
    assert!(lines.trim_end().ends_with("s ago"), "{lines}");
    synced.note(&pods(), u64::MAX / 2);
    lines.clear();
    readyz_lines(&synced, &mut lines);
    assert_eq!(
        lines,
        "[+]synced kubelet/pods.v1.core age unknown (clock behind the last sync)\n"
    );
}

fn sel(label: &str, field: &str) -> crate::selector::Selectors {
    crate::selector::Selectors::parse(Some(label), Some(field)).unwrap()
}

#[test]
fn only_a_scope_listed_whole_covers_an_offline_list() {
    let synced = Synced::default();
    let all = sel("", "");
    assert!(!synced.covers(&pods(), None, &all), "no record: nothing");
    // A get (or a watch event, or a page) notes the kind: no list is whole.
    synced.note(&pods(), 10);
    assert!(!synced.covers(&pods(), None, &all));
    assert!(!synced.covers(&pods(), Some("default"), &all));
    assert!(!synced.absent_as_listed(&pods(), Some("default")));

    // kubelet's list: its own selector and narrower ones, every namespace.
    let node = sel("", "spec.nodeName=edge-1");
    synced.listed_whole(&pods(), None, &node, 1, Some("7"));
    assert!(synced.covers(&pods(), None, &node));
    assert!(synced.covers(&pods(), Some("kube-system"), &node));
    assert!(synced.covers(&pods(), None, &sel("app=web", "spec.nodeName=edge-1")));
    assert!(
        !synced.covers(&pods(), None, &all),
        "a selection is not all pods"
    );
    assert!(!synced.covers(&pods(), None, &sel("app=web", "")));
    assert!(
        !synced.absent_as_listed(&pods(), None),
        "a selection says nothing of objects outside it"
    );

    // One namespace, whole: that namespace only.
    synced.listed_whole(&pods(), Some("default"), &all, 1, Some("7"));
    assert!(synced.covers(&pods(), Some("default"), &sel("app=web", "")));
    assert!(!synced.covers(&pods(), Some("other"), &all));
    assert!(!synced.covers(&pods(), None, &all));
    assert!(synced.absent_as_listed(&pods(), Some("default")));
    assert!(!synced.absent_as_listed(&pods(), Some("other")));

    // Across namespaces without selectors: everything, and it replaces what it covers.
    synced.listed_whole(&pods(), None, &all, 1, Some("7"));
    assert!(synced.covers(&pods(), Some("other"), &sel("a", "")));
    assert_eq!(
        lock(&synced.kinds)[&pods()].lists.as_ref().map(Vec::len),
        Some(1)
    );

    // A list of one object by name is not recorded (the object answers for it).
    synced.not_whole(&pods());
    synced.listed_whole(
        &pods(),
        Some("default"),
        &sel("", "metadata.name=a"),
        1,
        Some("7"),
    );
    assert_eq!(
        lock(&synced.kinds)[&pods()].lists.as_ref().map(Vec::len),
        Some(0)
    );
    synced.listed_whole(&pods(), None, &all, 1, Some("7"));

    // An object evicted: no list is whole any more. A kind forgotten: nothing.
    synced.not_whole(&pods());
    assert!(!synced.covers(&pods(), Some("default"), &all));
    synced.listed_whole(&pods(), None, &all, 1, Some("7"));
    synced.forget(&pods());
    assert!(!synced.covers(&pods(), None, &all));
}

#[test]
fn scopes_are_bounded_and_kept_across_a_restart_and_an_old_record_covers_all() {
    let dir = TempDir::new("synced-lists");
    let store = open(&dir);
    let synced = Synced::load(&store);
    synced.note(&services(), 1_000);
    for n in 0..MAX_LISTS + 2 {
        synced.listed_whole(
            &services(),
            None,
            &sel(&format!("app=a{n}"), ""),
            1,
            Some("7"),
        );
    }
    synced.listed_whole(
        &services(),
        Some("ns"),
        &sel("", r"spec.nodeName=a\,b"),
        1,
        Some("7"),
    );
    // A new scope is written at the next turn, not 5 minutes later.
    synced.persist(&store, false);
    let file = dir.root().join(".synced");
    assert!(file.exists(), "a new scope is written at once");
    drop(store);
    let store = open(&dir);
    let again = Synced::load(&store);
    let scope = sel("", r"spec.nodeName=a\,b");
    assert!(again.covers(&services(), Some("ns"), &scope));
    assert!(!again.covers(&services(), Some("other"), &scope));
    assert!(
        !again.covers(&services(), None, &sel("app=a0", "")),
        "the oldest went"
    );
    assert!(again.covers(&services(), None, &sel("app=a9", "")));
    assert_eq!(
        lock(&again.kinds)[&services()].lists.as_ref().map(Vec::len),
        Some(MAX_LISTS)
    );

    // A record written before scopes were kept answers its kinds' lists as before, until
    // the kind is listed whole.
    let bytes =
        br#"{"version":1,"kinds":[{"component":"kubelet","resource":"pods.v1.core","at":5}]}"#;
    std::fs::write(&file, bytes).unwrap();
    let old = Synced::load(&store);
    assert!(old.covers(&pods(), None, &sel("", "")));
    old.listed_whole(
        &pods(),
        None,
        &sel("", "spec.nodeName=edge-1"),
        1,
        Some("7"),
    );
    assert!(!old.covers(&pods(), None, &sel("", "")));
    let mut written = String::new();
    old.persist(&store, true);
    std::io::Read::read_to_string(&mut std::fs::File::open(&file).unwrap(), &mut written).unwrap();
    assert!(
        written.contains(r#""lists":[{"field":"spec.nodeName=edge-1"}]"#),
        "{written}"
    );
}
