//! The root's lock (`src/dir_lock.rs`): one store per root at a time, a stale note blocks
//! nothing, and the note is never taken for a cache entry.

use super::*;
use crate::dir_lock::{LockError, NOTE_FILE as LOCK_FILE};

#[test]
fn a_second_open_of_a_locked_root_is_refused_naming_the_holder() {
    let dir = TempDir::new("lock-twice");
    let first = open(&dir);
    let refused = Store::open(&dir.root()).unwrap_err();
    let pid = std::process::id();
    match &refused {
        StoreError::Lock(LockError::Held {
            dir: locked,
            holder,
        }) => {
            assert_eq!(locked, &dir.root());
            let note = holder.as_deref().unwrap_or_default();
            assert!(note.starts_with(&format!("pid {pid} on ")), "{note}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        refused.to_string().contains(&format!("pid {pid} on ")),
        "{refused}"
    );
    // The refused open changed nothing of the holder's.
    put(&first, &pods(), Some("a"), "web", 1, "web");
    drop(first);
    let again = open(&dir);
    assert!(get(&again, &pods(), Some("a"), "web").is_some());
}

#[test]
fn a_stale_lock_file_is_taken_over_and_never_served_or_removed() {
    let dir = TempDir::new("lock-stale");
    let root = dir.root();
    fs::create_dir_all(&root).unwrap();
    // Left by a hub that was killed: a file, but no lock.
    fs::write(root.join(LOCK_FILE), "4194301\n").unwrap();
    let store = open(&dir);
    let note = fs::read_to_string(root.join(LOCK_FILE)).unwrap();
    assert!(
        note.starts_with(&format!("pid {} on ", std::process::id())),
        "{note}"
    );
    // Not a document the store would read or write.
    assert!(matches!(
        store.get_non_resource(LOCK_FILE),
        Err(StoreError::UnsafeKey { .. })
    ));
    drop(store);
    // Recovery leaves it alone.
    let (_, report) = Store::open(&root).unwrap();
    assert_eq!(report, RecoveryReport::default());
    assert!(root.join(LOCK_FILE).exists());
}

#[test]
fn a_root_that_is_a_file_is_refused_with_why() {
    let dir = TempDir::new("lock-file-root");
    fs::write(dir.root(), "x").unwrap();
    let e = Store::open(&dir.root()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&dir.root().display().to_string()) && text.contains("not a directory"),
        "{text}"
    );
    assert!(!e.is_disk_full());
}
