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

/// Stores the pod `ns/a` (a kind directory that exists, for the record's fallbacks).
fn put_pod_a(store: &Store) {
    let key = crate::cache::key::ObjectKey {
        collection: pods(),
        namespace: Some("ns".to_owned()),
        name: "a".to_owned(),
    };
    store
        .put(&key, br#"{"metadata":{"name":"a","namespace":"ns"}}"#, None)
        .unwrap();
}

#[test]
fn only_a_cache_without_the_file_takes_directory_times() {
    let dir = TempDir::new("synced-mtime");
    let store = open(&dir);
    put_pod_a(&store);
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

fn configmaps() -> CollectionKey {
    CollectionKey::new("kubelet", "configmaps", "v1", "")
}

/// The record as written: the file's text.
fn written(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.root().join(".synced")).unwrap_or_default()
}

#[test]
fn a_name_listed_absent_is_known_absent_apart_from_the_scopes_until_superseded() {
    let dir = TempDir::new("synced-absent");
    let store = open(&dir);
    let synced = Synced::load(&store);
    let by_name = |name: &str| sel("", &format!("metadata.name={name}"));
    synced.note(&configmaps(), 10);
    synced.listed_whole(&configmaps(), None, &sel("", "spec.x=y"), 3, Some("5"));
    // kubelet's list of an optional ConfigMap that does not exist: known absent, written at
    // once (the first absence of the kind).
    synced.listed_whole(&configmaps(), Some("ns"), &by_name("opt"), 0, Some("42"));
    let absent =
        |s: &Synced, ns: &str, name: &str| s.known_absent(&configmaps(), Some(ns), &by_name(name));
    assert_eq!(absent(&synced, "ns", "opt").as_deref(), Some("42"));
    assert_eq!(absent(&synced, "other", "opt"), None, "another namespace");
    assert_eq!(absent(&synced, "ns", "never"), None, "a name never listed");
    assert_eq!(
        synced.known_absent(&configmaps(), Some("ns"), &sel("", "")),
        None,
        "not a list by name"
    );
    assert!(
        !synced.covers(&configmaps(), Some("ns"), &by_name("opt")),
        "no scope"
    );
    synced.persist(&store, false);
    assert!(
        written(&dir).contains(r#""absent":[{"namespace":"ns","name":"opt","rv":"42"}]"#),
        "{}",
        written(&dir)
    );
    // Across a restart.
    drop(store);
    let store = open(&dir);
    let again = Synced::load(&store);
    assert_eq!(absent(&again, "ns", "opt").as_deref(), Some("42"));

    // Another selector beside the name proves nothing absent; a list that found it, or
    // another selector's list of it, supersedes.
    synced.listed_whole(
        &configmaps(),
        Some("ns"),
        &sel("a=b", "metadata.name=other"),
        0,
        Some("43"),
    );
    assert_eq!(absent(&synced, "ns", "other"), None);
    synced.listed_whole(&configmaps(), Some("ns"), &by_name("opt"), 1, Some("44"));
    assert_eq!(absent(&synced, "ns", "opt"), None, "found since");

    // Bounded apart from the scopes: the oldest absence goes, never a scope.
    for n in 0..MAX_ABSENT + 3 {
        synced.listed_whole(
            &configmaps(),
            Some("ns"),
            &by_name(&format!("n{n}")),
            0,
            Some("50"),
        );
    }
    assert_eq!(absent(&synced, "ns", "n0"), None, "the oldest went");
    assert!(absent(&synced, "ns", &format!("n{}", MAX_ABSENT + 2)).is_some());
    assert_eq!(lock(&synced.kinds)[&configmaps()].absent.len(), MAX_ABSENT);
    assert!(
        synced.covers(&configmaps(), None, &sel("", "spec.x=y")),
        "the scope stays"
    );

    // A whole list without selectors holding the namespace supersedes (it answers now).
    synced.listed_whole(&configmaps(), Some("ns"), &sel("", ""), 0, Some("60"));
    assert_eq!(lock(&synced.kinds)[&configmaps()].absent.len(), 0);
    // An eviction drops every absence with the scopes.
    synced.listed_whole(&configmaps(), Some("ns"), &by_name("opt"), 0, Some("61"));
    synced.not_whole(&configmaps());
    assert_eq!(absent(&synced, "ns", "opt"), None);
}

#[test]
fn an_eviction_or_a_forgotten_kind_reaches_the_disk_at_once() {
    let dir = TempDir::new("synced-narrow");
    let store = open(&dir);
    let synced = Synced::load(&store);
    synced.note(&pods(), 10);
    synced.note(&services(), 10);
    synced.listed_whole(&pods(), None, &sel("", ""), 2, Some("5"));
    synced.listed_whole(&services(), None, &sel("", ""), 2, Some("5"));
    synced.persist(&store, false);
    assert!(
        written(&dir).contains(r#""lists":[{}]"#),
        "{}",
        written(&dir)
    );
    // The next write is 5 minutes away, but an eviction may not wait for it.
    synced.not_whole(&pods());
    synced.persist(&store, false);
    let after = Synced::load(&store);
    assert!(
        !after.covers(&pods(), None, &sel("", "")),
        "{}",
        written(&dir)
    );
    synced.forget(&services());
    synced.persist(&store, false);
    assert_eq!(
        Synced::load(&store).last(&services()),
        None,
        "{}",
        written(&dir)
    );
}

#[test]
fn an_entry_from_before_scopes_proves_nothing_once_the_cloud_is_heard() {
    let dir = TempDir::new("synced-upgrade");
    let store = open(&dir);
    let bytes = br#"{"version":1,"kinds":[{"component":"kubelet","resource":"pods.v1.core","at":5},{"component":"kube-proxy","resource":"services.v1.core","at":5}]}"#;
    std::fs::write(dir.root().join(".synced"), bytes).unwrap();
    let synced = Synced::load(&store);
    // An upgrade during an outage keeps answering.
    assert!(synced.covers(&pods(), None, &sel("", "")));
    // The cloud's first word on it: nothing proved whole yet, written at once.
    synced.note(&pods(), 5);
    assert!(!synced.covers(&pods(), None, &sel("", "")));
    assert!(
        synced.covers(&services(), None, &sel("", "")),
        "not heard of yet"
    );
    synced.persist(&store, false);
    let again = Synced::load(&store);
    assert!(
        !again.covers(&pods(), None, &sel("", "")),
        "{}",
        written(&dir)
    );
}

#[test]
fn a_record_that_exists_but_does_not_read_proves_nothing() {
    let dir = TempDir::new("synced-damaged");
    let store = open(&dir);
    put_pod_a(&store);
    let file = dir.root().join(".synced");
    // No file at all: a cache from before it, which answers as before.
    assert!(Synced::load(&store).covers(&pods(), None, &sel("", "")));
    // Too large, a symlink, a directory: damaged, not old.
    let huge = vec![b' '; usize::try_from(crate::cache::store::check::MAX_FILE).unwrap() + 1];
    std::fs::write(&file, huge).unwrap();
    assert!(
        !Synced::load(&store).covers(&pods(), None, &sel("", "")),
        "too large"
    );
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(dir.root().join("elsewhere"), &file).unwrap();
    assert!(
        !Synced::load(&store).covers(&pods(), None, &sel("", "")),
        "a symlink"
    );
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    assert!(
        !Synced::load(&store).covers(&pods(), None, &sel("", "")),
        "a directory"
    );
}

#[test]
fn the_fullest_record_reads_back() {
    // Scopes are bounded as written: control characters escape to six bytes each.
    let synced = Synced::default();
    synced.note(&pods(), 1);
    let control: String = std::iter::repeat_n('\u{1}', 300).collect();
    synced.listed_whole(
        &pods(),
        None,
        &sel(&format!("a={}", "b".repeat(60)), &format!("x={control}")),
        1,
        None,
    );
    assert!(!synced.covers(&pods(), None, &sel("", "")));
    assert_eq!(
        lock(&synced.kinds)[&pods()].lists.as_ref().map(Vec::len),
        Some(0),
        "over the bound"
    );

    // Every kind full of the longest scopes and absences: under the file bound.
    let scope = ListedScope {
        namespace: Some("n".repeat(63)),
        label: String::new(),
        field: "\u{1}".repeat(MAX_LIST_TEXT / 6),
    };
    assert!(serde_json::to_vec(&scope).unwrap().len() <= MAX_LIST_TEXT + 100);
    let absent = AbsentName {
        namespace: Some("n".repeat(63)),
        name: "x".repeat(253),
        rv: "9".repeat(MAX_RV),
    };
    let kinds = (0..MAX_KINDS)
        .map(|n| SyncedEntry {
            component: "c".repeat(64),
            resource: format!("{}{n}.v1.{}", "r".repeat(60), "g".repeat(60)),
            at: u64::MAX,
            lists: Some(vec![scope.clone(); MAX_LISTS]),
            absent: vec![absent.clone(); MAX_ABSENT],
        })
        .collect();
    let bytes = synced_bytes(kinds).unwrap();
    assert!(
        (bytes.len() as u64) < crate::cache::store::check::MAX_FILE,
        "{} bytes",
        bytes.len()
    );
}

#[test]
fn a_kinds_first_scope_is_written_at_once_and_the_next_ones_in_turn() {
    let dir = TempDir::new("synced-cadence");
    let store = open(&dir);
    let synced = Synced::load(&store);
    synced.note(&services(), 1);
    synced.listed_whole(&services(), None, &sel("app=a", ""), 1, None);
    synced.persist(&store, false);
    let first = written(&dir);
    assert!(first.contains("app=a"), "the first scope at once: {first}");
    // A client cycling selectors: no write a list.
    for n in 0..MAX_LISTS + 4 {
        synced.listed_whole(&services(), None, &sel(&format!("app=b{n}"), ""), 1, None);
        synced.persist(&store, false);
    }
    assert_eq!(written(&dir), first, "later scopes wait their turn");
    // One covering all of the kind is worth a write.
    synced.listed_whole(&services(), None, &sel("", ""), 1, None);
    synced.persist(&store, false);
    assert!(
        written(&dir).contains(r#""lists":[{}]"#),
        "{}",
        written(&dir)
    );
}

#[test]
fn a_new_kind_past_the_cap_pushes_out_the_least_recent_never_kubelets_first() {
    let synced = Synced::default();
    let kind = |c: &str, n: usize| CollectionKey::new(c, &format!("r{n}"), "v1", "g");
    synced.note(&kind("kubelet", 0), 1);
    for n in 1..MAX_KINDS {
        synced.note(&kind("other", n), 10 + n as u64);
    }
    // Full: the next kind is recorded, the least recent that is not kubelet's goes.
    synced.note(&kind("new", 0), 1_000);
    assert_eq!(synced.last(&kind("new", 0)), Some(1_000));
    assert_eq!(synced.last(&kind("kubelet", 0)), Some(1), "kubelet's stays");
    assert_eq!(
        synced.last(&kind("other", 1)),
        None,
        "the least recent went"
    );
    assert_eq!(synced.entries().len(), MAX_KINDS);

    // A record past the cap loads kubelet's, then the most recent.
    let dir = TempDir::new("synced-cap");
    let store = open(&dir);
    let mut kinds: Vec<SyncedEntry> = (0..MAX_KINDS + 10)
        .map(|n| SyncedEntry {
            component: "a".to_owned(),
            resource: format!("r{n}.v1.g"),
            at: 100 + n as u64,
            lists: Some(Vec::new()),
            absent: Vec::new(),
        })
        .collect();
    kinds.push(SyncedEntry {
        component: "kubelet".to_owned(),
        resource: "pods.v1.core".to_owned(),
        at: 1,
        lists: Some(Vec::new()),
        absent: Vec::new(),
    });
    store.put_synced(&synced_bytes(kinds).unwrap()).unwrap();
    let loaded = Synced::load(&store);
    assert_eq!(loaded.entries().len(), MAX_KINDS);
    assert_eq!(
        loaded.last(&pods()),
        Some(1),
        "kubelet's, though oldest and last in key order"
    );
    assert_eq!(
        loaded.last(&kind("a", MAX_KINDS + 9)),
        Some(100 + MAX_KINDS as u64 + 9)
    );
    assert_eq!(
        loaded.last(&kind("a", 0)),
        None,
        "the least recent left out"
    );
}
