//! The relist record: load, mark, clear, the cap, and a crash-safe save.

use super::super::relist::{MAX_MARKS, RELIST_FILE, RelistMarks, RelistReason};
use super::*;
use std::time::UNIX_EPOCH;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn marks_round_trip_through_the_file() {
    let dir = TempDir::new("relist-round-trip");
    let root = dir.root();
    fs::create_dir_all(&root).unwrap();
    assert!(
        RelistMarks::load(&root).unwrap().is_empty(),
        "no file: no marks"
    );
    let mut marks = RelistMarks::default();
    marks.mark(
        "kubelet",
        "pods.v1.core",
        RelistReason::Repaired,
        at(1_765_033_200),
    );
    let view = "partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core";
    marks.mark("kube-proxy", view, RelistReason::Evicted, at(1_765_033_201));
    marks.save(&root).unwrap();
    let text = fs::read_to_string(root.join(RELIST_FILE)).unwrap();
    assert_eq!(
        text,
        r#"{"version":1,"collections":[{"component":"kubelet","kind":"pods.v1.core","reason":"repaired","at":"2025-12-06T15:00:00Z"},{"component":"kube-proxy","kind":"partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core","reason":"evicted","at":"2025-12-06T15:00:01Z"}]}"#
    );
    let mode = fs::metadata(root.join(RELIST_FILE)).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(staging_entries(&root).is_empty(), "nothing left staged");
    let loaded = RelistMarks::load(&root).unwrap();
    assert_eq!(loaded, marks);
    assert_eq!(
        loaded.contains("kubelet", "pods.v1.core"),
        Some(RelistReason::Repaired)
    );
    assert_eq!(
        loaded.contains("kube-proxy", view),
        Some(RelistReason::Evicted)
    );
    assert_eq!(loaded.contains("kubelet", view), None);
    // Cleared, saved: gone from the file too.
    let mut cleared = loaded;
    assert!(cleared.clear("kubelet", "pods.v1.core"));
    assert!(!cleared.clear("kubelet", "pods.v1.core"));
    cleared.save(&root).unwrap();
    let again = RelistMarks::load(&root).unwrap();
    assert_eq!(
        again.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        [view]
    );
    // A reader of the cache never sees the record: a dot name.
    let store = open(&dir);
    assert!(!store.has_collection(&pods()));
}

#[test]
fn a_mark_again_updates_it_and_the_oldest_goes_past_the_cap() {
    let mut marks = RelistMarks::default();
    marks.mark("kubelet", "pods.v1.core", RelistReason::Repaired, at(10));
    marks.mark("kubelet", "pods.v1.core", RelistReason::Evicted, at(20));
    assert_eq!(marks.len(), 1);
    assert_eq!(
        marks.contains("kubelet", "pods.v1.core"),
        Some(RelistReason::Evicted)
    );
    for i in 0..MAX_MARKS as u64 {
        marks.mark(
            "c",
            &format!("k{i}.v1.core"),
            RelistReason::Evicted,
            at(100 + i),
        );
    }
    assert_eq!(marks.len(), MAX_MARKS);
    assert_eq!(
        marks.contains("kubelet", "pods.v1.core"),
        None,
        "the oldest went"
    );
    assert!(marks.contains("c", "k0.v1.core").is_some());
}

#[test]
fn an_unreadable_record_is_an_error_naming_it() {
    let dir = TempDir::new("relist-bad");
    let root = dir.root();
    fs::create_dir_all(&root).unwrap();
    for bad in [
        &b"not json"[..],
        br#"{"version":2,"collections":[]}"#,
        br#"{"version":1,"collections":[{"component":"c","kind":"k","reason":"bored","at":"2025-12-06T15:00:00Z"}]}"#,
        br#"{"version":1,"collections":[{"component":"c","kind":"k","reason":"evicted","at":"yesterday"}]}"#,
    ] {
        fs::write(root.join(RELIST_FILE), bad).unwrap();
        let e = RelistMarks::load(&root).unwrap_err().to_string();
        assert!(e.contains(".relist"), "{e}");
    }
    fs::remove_file(root.join(RELIST_FILE)).unwrap();
    symlink("/etc/passwd", root.join(RELIST_FILE)).unwrap();
    let e = RelistMarks::load(&root).unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
}
