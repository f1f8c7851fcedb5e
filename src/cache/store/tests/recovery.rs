//! Crashes at every step of a commit, journals replayed, torn or hostile, leftovers, and
//! the event collections of older versions.

use super::*;

const LIST_RV: &str = "10";

/// The crash scenario's stored state: a/x is updated, a/y is unchanged, a/d goes,
/// b/k is out of scope and b/z newer than the list (stored before it, so it goes too: the
/// whole list wins); c/n is new in a new namespace.
fn seed_crash(store: &Store) {
    put(store, &pods(), Some("a"), "x", 5, "web");
    put(store, &pods(), Some("a"), "y", 5, "web");
    put(store, &pods(), Some("a"), "d", 5, "web");
    put(store, &pods(), Some("b"), "k", 5, "other");
    put(store, &pods(), Some("b"), "z", 50, "web");
}

fn stage_crash(store: &Store) -> Replace<'_> {
    let mut replace = store.begin_replace(&pods(), None).unwrap();
    replace
        .put(Some("c"), "n", &object(Some("c"), "n", 9, "web"), Some("9"))
        .unwrap();
    replace
        .put(Some("a"), "y", &object(Some("a"), "y", 5, "web"), Some("5"))
        .unwrap();
    replace
        .put(Some("a"), "x", &object(Some("a"), "x", 8, "web"), Some("8"))
        .unwrap();
    replace
}

/// Runs the crash scenario, stopping the commit at `step`; returns the store's root.
fn crash_at(dir: &TempDir, step: CommitStep) -> Result<ReplaceReport, StoreError> {
    let store = open_crashing_at(dir, step);
    seed_crash(&store);
    let replace = stage_crash(&store);
    replace.commit(&mut app_web, Some(LIST_RV))
}

/// The stored state before and after the crash scenario's replacement.
fn crash_states() -> (Snapshot, Snapshot) {
    let dir = TempDir::new("crash-baseline");
    let store = open(&dir);
    seed_crash(&store);
    let old = snapshot(&dir.root());
    let x = object(Some("a"), "x", 8, "web");
    let n = object(Some("c"), "n", 9, "web");
    let report = stage_crash(&store)
        .commit(&mut app_web, Some(LIST_RV))
        .unwrap();
    let expected = ReplaceReport {
        written: 2,
        identical: 1,
        stale: 0,
        deleted: 2,
        kept_newer: 0,
        bytes: (x.len() + n.len()) as u64,
        deleted_meanwhile: 0,
    };
    assert_eq!(report, expected);
    let new = snapshot(&dir.root());
    assert_eq!(new["kubelet/pods.v1.core/a/x"], Some(x));
    assert_eq!(new["kubelet/pods.v1.core/c/n"], Some(n));
    assert!(!new.contains_key("kubelet/pods.v1.core/a/d"));
    assert!(!new.contains_key("kubelet/pods.v1.core/b/z"));
    assert!(new.contains_key("kubelet/pods.v1.core/b/k"));
    assert!(!old.contains_key("kubelet/pods.v1.core/c"));
    (old, new)
}

#[test]
fn crash_at_any_step_of_a_replace_recovers_all_old_or_all_new() {
    let (old, new) = crash_states();
    let report = |rolled_forward, removed_temp_files| RecoveryReport {
        rolled_forward,
        rolled_back: 0,
        removed_temp_files,
        removed_event_dirs: 0,
    };
    // The journal's operations: delete a/d, rename a/x, delete b/z, rename c/n.
    let steps = [
        (CommitStep::Staged, &old, report(0, 2)),
        (CommitStep::JournalWritten, &old, report(0, 3)),
        (CommitStep::Synced, &old, report(0, 3)),
        (CommitStep::JournalVisible, &new, report(1, 0)),
        (CommitStep::JournalDurable, &new, report(1, 0)),
        (CommitStep::DirsMade, &new, report(1, 0)),
        (CommitStep::Applied(0), &new, report(1, 0)),
        (CommitStep::Applied(1), &new, report(1, 0)),
        (CommitStep::Applied(2), &new, report(1, 0)),
        (CommitStep::Applied(3), &new, report(1, 0)),
        (CommitStep::DirsSynced, &new, report(1, 0)),
        (CommitStep::JournalRemoved, &new, report(0, 0)),
    ];
    for (step, expected, expected_report) in steps {
        let dir = TempDir::new("crash");
        match crash_at(&dir, step) {
            Err(StoreError::InjectedCrash) => {}
            other => panic!("{step:?}: no crash: {other:?}"),
        }
        let (store, report) = Store::open(&dir.root()).unwrap();
        assert_eq!(&snapshot(&dir.root()), expected, "crash at {step:?}");
        assert_eq!(report, expected_report, "crash at {step:?}");
        assert!(staging_entries(&dir.root()).is_empty(), "crash at {step:?}");
        // And the store works on.
        put(&store, &pods(), Some("a"), "after", 1, "web");
        assert!(get(&store, &pods(), Some("a"), "after").is_some());
    }
    // Those were all the steps: there is no fifth operation to crash after.
    let dir = TempDir::new("crash");
    assert!(crash_at(&dir, CommitStep::Applied(4)).is_ok());
    assert_eq!(snapshot(&dir.root()), new);
}

fn journal_path(root: &Path) -> PathBuf {
    let journals: Vec<PathBuf> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(JOURNAL_PREFIX)
        })
        .collect();
    assert_eq!(journals.len(), 1, "{journals:?}");
    journals.into_iter().next().unwrap()
}

#[test]
fn journal_replayed_twice_is_harmless() {
    let (_, new) = crash_states();
    let dir = TempDir::new("replay");
    assert!(matches!(
        crash_at(&dir, CommitStep::Applied(1)),
        Err(StoreError::InjectedCrash)
    ));
    let journal = journal_path(&dir.root());
    let text = fs::read_to_string(&journal).unwrap();
    assert!(
        text.starts_with("tinyhub-journal 1\nmkdir\tkubelet\n"),
        "{text}"
    );
    assert!(text.ends_with("end\t8\n"), "{text}");
    let (_, report) = Store::open(&dir.root()).unwrap();
    assert_eq!(report.rolled_forward, 1);
    assert_eq!(snapshot(&dir.root()), new);
    fs::write(&journal, &text).unwrap();
    let (_, report) = Store::open(&dir.root()).unwrap();
    assert_eq!(report.rolled_forward, 1);
    assert_eq!(snapshot(&dir.root()), new);
}

#[test]
fn incomplete_or_hostile_journal_is_rolled_back() {
    let (old, _) = crash_states();
    let dir = TempDir::new("torn-journal");
    let root = dir.root();
    assert!(matches!(
        crash_at(&dir, CommitStep::JournalVisible),
        Err(StoreError::InjectedCrash)
    ));
    let journal = journal_path(&root);
    let text = fs::read_to_string(&journal).unwrap();
    // Torn at every line boundary and in the middle of the end marker.
    let mut cuts: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    cuts.pop();
    cuts.push(text.len() - 2);
    for cut in cuts {
        fs::write(&journal, &text[..cut]).unwrap();
        // Keep the staged files for the next round: recovery would remove them.
        let staged: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(root.join(STAGING))
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.clone(), fs::read(&p).unwrap()))
            .collect();
        let (_, report) = Store::open(&root).unwrap();
        assert_eq!(
            (report.rolled_forward, report.rolled_back),
            (0, 1),
            "cut at {cut}"
        );
        assert_eq!(snapshot(&root), old, "cut at {cut}");
        for (path, bytes) in staged {
            fs::write(path, bytes).unwrap();
        }
    }

    let victim = dir.0.join("victim");
    fs::write(&victim, b"keep").unwrap();
    let hostile = [
        "tinyhub-journal 1\ndelete\t../victim\nend\t1\n",
        "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/../../../../victim\nend\t1\n",
        "tinyhub-journal 1\nrename\t../victim\tkubelet/pods.v1.core/a/x\nend\t1\n",
        "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nend\t2\n",
        "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nmkdir\tkubelet/x\nend\t2\n",
        "tinyhub-journal 2\ndelete\tkubelet/pods.v1.core/a/x\nend\t1\n",
        "tinyhub-journal 1\ndelete\tkubelet/pods.v1.core/a/x\nend\t1\ndelete\tkubelet/pods.v1.core/a/y\n",
    ];
    for (i, text) in hostile.iter().enumerate() {
        fs::write(root.join(format!("{JOURNAL_PREFIX}{i}")), text).unwrap();
    }
    fs::write(root.join(format!("{JOURNAL_PREFIX}junk")), b"\xff\xfe").unwrap();
    let (_, report) = Store::open(&root).unwrap();
    assert_eq!(
        (report.rolled_forward, report.rolled_back),
        (0, hostile.len() + 1)
    );
    assert_eq!(snapshot(&root), old);
    assert_eq!(fs::read(&victim).unwrap(), b"keep");
}

#[test]
fn recovery_removes_leftovers() {
    let dir = TempDir::new("leftovers");
    let root = dir.root();
    {
        let store = open(&dir);
        seed_replace(&store);
        let replace = stage_two(&store);
        // The process dies: nothing is cleaned up.
        std::mem::forget(replace);
    }
    let before = snapshot(&root);
    fs::create_dir_all(root.join(STAGING).join("d.7/a")).unwrap();
    fs::write(root.join(STAGING).join("d.7/a/x"), b"{}").unwrap();
    fs::write(root.join(STAGING).join("p.3"), b"{\"half").unwrap();
    let (_, report) = Store::open(&root).unwrap();
    assert_eq!(
        report,
        RecoveryReport {
            rolled_forward: 0,
            rolled_back: 0,
            removed_temp_files: 4,
            removed_event_dirs: 0,
        }
    );
    assert!(staging_entries(&root).is_empty());
    assert_eq!(snapshot(&root), before);
    let (_, report) = Store::open(&root).unwrap();
    assert_eq!(report, RecoveryReport::default());
}

#[test]
fn event_collections_of_older_versions_are_removed_at_start() {
    let dir = TempDir::new("events");
    let root = dir.root();
    {
        let store = open(&dir);
        for component in ["kubelet", "kube-proxy"] {
            let events = CollectionKey::new(component, "events", "v1", "");
            put(&store, &events, Some("default"), "e1", 1, "x");
        }
        let new_events = CollectionKey::new("kubelet", "events", "v1", "events.k8s.io");
        put(&store, &new_events, Some("default"), "e2", 1, "x");
        put(&store, &pods(), Some("default"), "web", 1, "web");
        // Not events: another group's kind that happens to be called so, and a pod
        // named like an event directory.
        let other = CollectionKey::new("kubelet", "events", "v1", "example.com");
        put(&store, &other, Some("default"), "e3", 1, "x");
        put(&store, &pods(), Some("default"), "events.v1.core", 1, "web");
    }
    let (store, report) = Store::open(&root).unwrap();
    assert_eq!(report.removed_event_dirs, 3);
    let paths: Vec<String> = snapshot(&root).into_keys().collect();
    assert!(
        !paths.iter().any(|p| p.contains("events.v1.core/")),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.contains("events.k8s.io")),
        "{paths:?}"
    );
    assert!(paths.contains(&"kubelet/events.v1.example.com/default/e3".to_owned()));
    assert!(get(&store, &pods(), Some("default"), "events.v1.core").is_some());
    assert!(staging_entries(&root).is_empty());
    drop(store);
    assert_eq!(Store::open(&root).unwrap().1, RecoveryReport::default());
}
