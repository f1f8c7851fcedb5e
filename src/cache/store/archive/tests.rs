//! Unit tests of the archive format (round trip, truncation, hostile entries) and of export
//! and import against a real store (refusals leave the cache as it was, crashes leave it
//! wholly old or wholly new).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use super::super::check::MAX_FILE;
use super::super::journal::CommitStep;
use super::super::tests::snapshot;
use super::super::{Store, StoreError, StoreOptions};
use super::import::ImportError;
use super::*;
use crate::cache::key::{CollectionKey, ObjectKey};
use crate::cache::temp_dir::TempDir;

fn manifest(files: u64, bytes: u64) -> Manifest {
    Manifest {
        node_name: "edge-1".to_owned(),
        created_at: 1_765_000_000,
        tinyhub: "0.1.0".to_owned(),
        with_credentials: false,
        files,
        bytes,
    }
}

/// Reads every entry, or the first refusal.
fn read_all(bytes: &[u8]) -> Result<(Manifest, Vec<Entry>), ArchiveError> {
    let mut reader = ArchiveReader::open(bytes, MAX_FILE)?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry()? {
        entries.push(entry);
    }
    Ok((reader.manifest().clone(), entries))
}

fn gzip(tar: &[u8]) -> Vec<u8> {
    let mut out = GzEncoder::new(Vec::new(), Compression::fast());
    out.write_all(tar).unwrap();
    out.finish().unwrap()
}

/// One raw tar entry: an optional pax record of `pax` lines, then the header and body.
fn raw(path: &str, kind: u8, body: &[u8], pax: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    if !pax.is_empty() {
        let records: String = pax.iter().map(|(k, v)| pax_record(k, v)).collect();
        out.extend_from_slice(&header("PaxHeaders/x", b'x', records.len(), 0));
        out.extend_from_slice(records.as_bytes());
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    out.extend_from_slice(&header(path, kind, body.len(), 0));
    out.extend_from_slice(body);
    out.resize(out.len().next_multiple_of(BLOCK), 0);
    out
}

/// A tar of the manifest (saying `files`, `bytes`) and `entries`, with its end blocks.
fn tar(files: u64, bytes: u64, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = raw(MANIFEST_PATH, b'0', &manifest(files, bytes).to_json(), &[]);
    for entry in entries {
        out.extend_from_slice(entry);
    }
    out.extend_from_slice(&[0; 2 * BLOCK]);
    out
}

const POD: &[u8] =
    br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default"}}"#;

#[test]
fn what_is_written_reads_back_entry_for_entry() {
    let long_ns = "n".repeat(63);
    let long_name = "a".repeat(253);
    let long = ArchivePath::cache(format!(
        "kubelet/partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core/{long_ns}/{long_name}"
    ));
    let mid = ArchivePath::cache(format!("kubelet/pods.v1.core/default/{}", "b".repeat(120)));
    let files = [
        (ArchivePath::cache(".synced"), b"{}".to_vec()),
        (
            ArchivePath::cache("kubelet/pods.v1.core/default/web-0"),
            POD.to_vec(),
        ),
        (mid, vec![b'x'; 1000]),
        (long, Vec::new()),
        (ArchivePath::root("pki/ca.crt"), b"pem".to_vec()),
    ];
    let bytes: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let mut writer = ArchiveWriter::new(Vec::new(), &manifest(5, bytes)).unwrap();
    writer.dir(&ArchivePath::cache("kubelet")).unwrap();
    for (path, body) in &files {
        writer.file(path, body).unwrap();
    }
    let archive = writer.finish().unwrap();

    let (read_manifest, entries) = read_all(&archive).unwrap();
    assert_eq!(read_manifest, manifest(5, bytes));
    let mut want = vec![Entry::Dir(ArchivePath::cache("kubelet"))];
    want.extend(files.iter().map(|(p, b)| Entry::File(p.clone(), b.clone())));
    assert_eq!(entries, want);
}

#[test]
fn an_archive_cut_anywhere_is_refused() {
    let mut writer = ArchiveWriter::new(Vec::new(), &manifest(2, 2 * POD.len() as u64)).unwrap();
    writer
        .file(
            &ArchivePath::cache("kubelet/pods.v1.core/default/web-0"),
            POD,
        )
        .unwrap();
    writer
        .file(
            &ArchivePath::cache("kubelet/pods.v1.core/default/web-1"),
            POD,
        )
        .unwrap();
    let archive = writer.finish().unwrap();
    assert!(read_all(&archive).is_ok());
    for cut in 0..archive.len() {
        assert!(
            read_all(&archive[..cut]).is_err(),
            "cut at {cut} of {} read whole",
            archive.len()
        );
    }
    // The tar cut after a whole entry, gzip'd whole: the end blocks or the counts tell.
    let whole = tar(
        2,
        2 * POD.len() as u64,
        &[raw(
            "cache/kubelet/pods.v1.core/default/web-0",
            b'0',
            POD,
            &[],
        )],
    );
    let cut = &whole[..whole.len() - 2 * BLOCK];
    assert!(matches!(
        read_all(&gzip(cut)),
        Err(ArchiveError::Damaged(_))
    ));
    assert!(matches!(
        read_all(&gzip(&whole)),
        Err(ArchiveError::Counts { .. })
    ));
}

#[test]
fn hostile_entries_are_refused_each_with_its_reason() {
    let file = |path: &str| raw(path, b'0', b"{}", &[]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("dot-dot", file("cache/../x"), "\"..\""),
        ("dot-dot inside", file("cache/kubelet/../../x"), "\"..\""),
        ("absolute", file("/etc/x"), "absolute"),
        ("outside", file("etc/passwd"), "outside cache/"),
        ("hidden", file("cache/kubelet/.x/y"), "cannot hold"),
        ("too deep", file("cache/a/b.c/d/e/f/g"), "cannot hold"),
        ("root file", file("root/etc/shadow"), "cannot hold"),
        (
            "symlink",
            raw("cache/kubelet/pods.v1.core/x", b'2', b"", &[]),
            "symlink",
        ),
        (
            "hard link",
            raw("cache/kubelet/pods.v1.core/x", b'1', b"", &[]),
            "hard link",
        ),
        (
            "char device",
            raw("cache/kubelet/pods.v1.core/x", b'3', b"", &[]),
            "device",
        ),
        (
            "block device",
            raw("cache/kubelet/pods.v1.core/x", b'4', b"", &[]),
            "device",
        ),
        (
            "fifo",
            raw("cache/kubelet/pods.v1.core/x", b'6', b"", &[]),
            "FIFO",
        ),
        (
            "gnu long name",
            raw("././@LongLink", b'L', b"x", &[]),
            "GNU",
        ),
        ("global pax", raw("g", b'g', b"", &[]), "global pax"),
        (
            "pax linkpath",
            raw(
                "cache/kubelet/pods.v1.core/x",
                b'0',
                b"{}",
                &[("linkpath", "/etc/passwd")],
            ),
            "linkpath",
        ),
        (
            "pax path escaping",
            raw("cache/ok", b'0', b"{}", &[("path", "cache/../../etc/x")]),
            "\"..\"",
        ),
        (
            "twice",
            [file("cache/version"), file("cache/version")].concat(),
            "twice",
        ),
        (
            "below a file",
            [file("cache/kubelet/x"), file("cache/kubelet/x/y")].concat(),
            "below a file",
        ),
    ];
    for (what, entry, reason) in cases {
        let archive = gzip(&tar(2, 4, &[entry]));
        match read_all(&archive) {
            Err(e) => assert!(e.to_string().contains(reason), "{what}: {e}"),
            Ok(entries) => panic!("{what}: read {entries:?}"),
        }
    }
}

#[test]
fn sizes_counts_and_framing_are_checked() {
    // A file past the store's largest is refused from its header, never read.
    let mut big = header("cache/kubelet/pods.v1.core/big", b'0', 0, 0).to_vec();
    octal(&mut big[124..136], MAX_FILE + 1);
    let mut block: [u8; BLOCK] = big.try_into().unwrap();
    set_checksum(&mut block);
    let e = read_all(&gzip(&tar(1, 1, &[block.to_vec()]))).unwrap_err();
    assert!(
        e.to_string().contains("more than the cache's largest"),
        "{e}"
    );

    // Directories are bounded by what the files can need, plus spare ones: an archive of
    // nothing but directory entries is refused before it exhausts the inodes.
    let dirs = |n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| raw(&format!("cache/kubelet/d{i}/"), b'5', b"", &[]))
            .collect()
    };
    assert!(read_all(&gzip(&tar(0, 0, &dirs(100)))).is_ok());
    let e = read_all(&gzip(&tar(0, 0, &dirs(5000)))).unwrap_err();
    assert!(e.to_string().contains("directories"), "{e}");

    // A manifest lying about its counts, either way.
    let entry = raw("cache/version", b'0', b"{}", &[]);
    assert!(read_all(&gzip(&tar(1, 2, std::slice::from_ref(&entry)))).is_ok());
    for (files, bytes) in [(2, 4), (1, 3), (0, 0), (1, 1)] {
        let e = read_all(&gzip(&tar(files, bytes, std::slice::from_ref(&entry)))).unwrap_err();
        assert!(
            matches!(e, ArchiveError::Counts { .. }),
            "{files} {bytes}: {e}"
        );
    }

    // The manifest must come first.
    let mut later = entry.clone();
    later.extend_from_slice(&tar(1, 2, &[]));
    let e = read_all(&gzip(&later)).unwrap_err();
    assert!(matches!(e, ArchiveError::Manifest(_)), "{e}");

    // A damaged header checksum; data after the end; a second gzip member.
    let mut bad = tar(1, 2, std::slice::from_ref(&entry));
    bad[BLOCK * 2 + 10] ^= 1;
    assert!(
        read_all(&gzip(&bad))
            .unwrap_err()
            .to_string()
            .contains("checksum")
    );
    let mut trailing = tar(1, 2, std::slice::from_ref(&entry));
    trailing.extend_from_slice(&[0; BLOCK]);
    trailing.push(1);
    assert!(read_all(&gzip(&trailing)).is_err());
    let mut two = gzip(&tar(1, 2, std::slice::from_ref(&entry)));
    two.extend_from_slice(&gzip(b"more"));
    assert!(
        read_all(&two)
            .unwrap_err()
            .to_string()
            .contains("after the end")
    );
    // Not gzip at all.
    assert!(matches!(
        read_all(&tar(1, 2, &[entry])),
        Err(ArchiveError::Damaged(_))
    ));
}

// Export and import against a store.

fn pods() -> CollectionKey {
    CollectionKey::new("kubelet", "pods", "v1", "")
}

fn pod(ns: &str, name: &str, rv: u64) -> Vec<u8> {
    format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}}}}"#)
        .into_bytes()
}

fn put_pod(store: &Store, ns: &str, name: &str, rv: u64) {
    let key = ObjectKey {
        collection: pods(),
        namespace: Some(ns.to_owned()),
        name: name.to_owned(),
    };
    store
        .put(&key, &pod(ns, name, rv), Some(&rv.to_string()))
        .unwrap();
}

fn export_of(cache: &Path, with_credentials: bool) -> (Vec<u8>, ExportReport) {
    let opts = ExportOptions {
        cache,
        root_dir: cache,
        node_name: "edge-1",
        with_credentials,
        now: 1_765_000_000,
    };
    export(&opts, Vec::new()).unwrap()
}

fn import_opts(root_dir: &Path) -> ImportOptions<'_> {
    ImportOptions {
        node_name: "edge-1",
        allow_other_node: false,
        replace: false,
        with_credentials: false,
        root_dir,
        now: 1_765_000_100,
        max_bytes: 0,
    }
}

/// A cache with two pods, an empty collection, a document, `.synced` from the future, a
/// token answer and `.grants`; the store closed.
fn source_cache(dir: &TempDir) -> std::path::PathBuf {
    let root = dir.0.join("source");
    let (store, _) = Store::open(&root).unwrap();
    put_pod(&store, "default", "web-0", 5);
    put_pod(&store, "kube-system", "dns-0", 6);
    store
        .put_non_resource("version", br#"{"gitVersion":"v1.31.0"}"#)
        .unwrap();
    store
        .put_synced(br#"{"version":1,"kinds":[{"component":"kubelet","resource":"pods.v1.core","at":1765009999}]}"#)
        .unwrap();
    store.put_grants(br#"{"key":"secret"}"#).unwrap();
    drop(store);
    fs::create_dir_all(root.join("kubelet/configmaps.v1.core")).unwrap();
    let tokens = root.join("kubelet/tokens/default/sa");
    fs::create_dir_all(&tokens).unwrap();
    fs::write(
        tokens.join("abc"),
        br#"{"metadata":{"name":"sa","namespace":"default"}}"#,
    )
    .unwrap();
    root
}

#[test]
fn export_then_import_gives_the_same_cache_without_credentials_unless_asked() {
    let dir = TempDir::new("archive-roundtrip");
    let source = source_cache(&dir);
    let (archive, report) = export_of(&source, false);
    assert_eq!(report.files, 4, "{report:?}");
    assert!(report.left_out.is_empty(), "{:?}", report.left_out);

    let target = dir.0.join("target");
    let (store, _) = Store::open(&target).unwrap();
    let imported = store.import(&archive[..], &import_opts(&dir.0)).unwrap();
    assert_eq!(imported.files, 4);
    drop(store);
    let mut want = snapshot(&source);
    want.retain(|path, _| !path.starts_with("kubelet/tokens") && path != ".grants");
    let mut got = snapshot(&target);
    // `.synced` is kept, clamped to the export's time.
    let synced = got.remove(".synced").unwrap().unwrap();
    want.remove(".synced");
    assert!(
        String::from_utf8(synced)
            .unwrap()
            .contains(r#""at":1765000000"#)
    );
    assert_eq!(got, want);

    // With credentials: the token answer and `.grants` go too.
    let (archive, report) = export_of(&source, true);
    assert_eq!((report.files, report.credentials), (6, 2));
    let target = dir.0.join("target-creds");
    let (store, _) = Store::open(&target).unwrap();
    let mut opts = import_opts(&dir.0);
    let skipped = store.import(&archive[..], &opts).unwrap();
    assert_eq!((skipped.credentials, skipped.credentials_skipped), (0, 2));
    assert!(!target.join(".grants").exists());
    opts.replace = true;
    opts.with_credentials = true;
    let imported = store.import(&archive[..], &opts).unwrap();
    assert_eq!(imported.credentials, 2);
    assert_eq!(
        fs::read(target.join(".grants")).unwrap(),
        br#"{"key":"secret"}"#
    );
    assert!(target.join("kubelet/tokens/default/sa/abc").is_file());
}

#[test]
fn refusals_leave_the_cache_as_it_was() {
    let dir = TempDir::new("archive-refusals");
    let source = source_cache(&dir);
    let (archive, _) = export_of(&source, false);
    let target = dir.0.join("target");
    let (store, _) = Store::open(&target).unwrap();
    put_pod(&store, "default", "old", 1);
    let before = snapshot(&target);

    // Another node's; a cache that holds a component; a damaged archive.
    let mut opts = import_opts(&dir.0);
    opts.node_name = "edge-2";
    let e = store.import(&archive[..], &opts).unwrap_err();
    assert!(
        matches!(e, ImportError::OtherNode { .. }) && e.is_refusal(),
        "{e}"
    );
    let e = store
        .import(&archive[..], &import_opts(&dir.0))
        .unwrap_err();
    assert!(matches!(e, ImportError::NotEmpty(_)), "{e}");
    let mut replace = import_opts(&dir.0);
    replace.replace = true;
    // More bytes than the bound.
    let mut bounded = replace.clone();
    bounded.max_bytes = 10;
    let e = store.import(&archive[..], &bounded).unwrap_err();
    assert!(
        matches!(e, ImportError::TooLarge { bound: 10, .. }) && e.is_refusal(),
        "{e}"
    );
    let e = store
        .import(&archive[..archive.len() - 9], &replace)
        .unwrap_err();
    assert!(e.is_refusal(), "{e}");
    // A file naming another object than its path.
    let ghost = raw("cache/kubelet/pods.v1.core/default/ghost", b'0', POD, &[]);
    let e = store
        .import(&gzip(&tar(1, POD.len() as u64, &[ghost]))[..], &replace)
        .unwrap_err();
    assert!(e.to_string().contains("names-other"), "{e}");
    // A file where a kind directory belongs.
    let flat = raw("cache/kubelet/pods.v1.core", b'0', b"{}", &[]);
    let e = store
        .import(&gzip(&tar(1, 2, &[flat]))[..], &replace)
        .unwrap_err();
    assert!(e.to_string().contains("foreign"), "{e}");
    // A directory where an object belongs, or one no cache has.
    let mut with_credentials = replace.clone();
    with_credentials.with_credentials = true;
    for dir in [
        "cache/kubelet/pods.v1.core/default/web-0/",
        "cache/kubelet/notakind/",
        "cache/kubelet/tokens/default/sa/digest/",
    ] {
        let e = store
            .import(
                &gzip(&tar(0, 0, &[raw(dir, b'5', b"", &[])]))[..],
                &with_credentials,
            )
            .unwrap_err();
        assert!(e.to_string().contains("a directory where"), "{dir}: {e}");
    }
    assert_eq!(snapshot(&target), before);
    assert_eq!(fs::read_dir(target.join(".staging")).unwrap().count(), 0);

    // --replace moves the old content into the quarantine, never deletes it.
    let imported = store.import(&archive[..], &replace).unwrap();
    let moved = imported.replaced_into.unwrap();
    assert!(
        target
            .join(&moved)
            .join("kubelet/pods.v1.core/default/old")
            .is_file()
    );
    assert!(!target.join("kubelet/pods.v1.core/default/old").exists());
    assert!(target.join("kubelet/pods.v1.core/default/web-0").is_file());
}

#[test]
fn two_replacing_imports_in_one_second_each_replace() {
    let dir = TempDir::new("archive-twice");
    let source = source_cache(&dir);
    let (first, _) = export_of(&source, false);
    let (store, _) = Store::open(&source).unwrap();
    put_pod(&store, "default", "web-1", 7);
    drop(store);
    let (second, _) = export_of(&source, false);

    let target = dir.0.join("target");
    let (store, _) = Store::open(&target).unwrap();
    put_pod(&store, "default", "old", 1);
    let mut replace = import_opts(&dir.0);
    replace.replace = true;
    let one = store.import(&first[..], &replace).unwrap();
    assert!(!target.join("kubelet/pods.v1.core/default/web-1").exists());
    // The same second: the second import must not find its quarantine taken.
    let two = store.import(&second[..], &replace).unwrap();
    assert!(
        target.join("kubelet/pods.v1.core/default/web-1").is_file(),
        "the second import changed nothing: {two:?}"
    );
    let (one, two) = (one.replaced_into.unwrap(), two.replaced_into.unwrap());
    assert_ne!(one, two);
    assert!(
        target
            .join(&one)
            .join("kubelet/pods.v1.core/default/old")
            .is_file()
    );
    assert!(
        target
            .join(&two)
            .join("kubelet/pods.v1.core/default/web-0")
            .is_file()
    );
    assert!(
        !target
            .join(&two)
            .join("kubelet/pods.v1.core/default/web-1")
            .exists()
    );
    assert_eq!(fs::read_dir(target.join(".staging")).unwrap().count(), 0);
}

#[test]
fn a_crash_anywhere_in_an_import_leaves_the_cache_wholly_old_or_new() {
    let dir = TempDir::new("archive-crash");
    let source = source_cache(&dir);
    let (archive, _) = export_of(&source, false);
    // With credentials, the identity's files too: whenever the new cache is there, so are
    // they.
    let identity = dir.0.join("identity");
    fs::create_dir_all(identity.join("pki")).unwrap();
    fs::write(identity.join("yurthub.conf"), b"kubeconfig").unwrap();
    fs::write(identity.join("pki/ca.crt"), b"ca").unwrap();
    let with_identity = ExportOptions {
        cache: &source,
        root_dir: &identity,
        node_name: "edge-1",
        with_credentials: true,
        now: 1_765_000_000,
    };
    let (credentials, _) = export(&with_identity, Vec::new()).unwrap();
    let mut steps = vec![
        CommitStep::Staged,
        CommitStep::JournalWritten,
        CommitStep::Synced,
        CommitStep::JournalVisible,
        CommitStep::JournalDurable,
        CommitStep::DirsSynced,
        CommitStep::JournalRemoved,
    ];
    // Four operations: the old kubelet aside; kubelet, `.synced` and `version` in.
    steps.extend((0..4).map(CommitStep::Applied));
    let cases = steps
        .iter()
        .map(|step| (*step, false))
        .chain(steps.iter().map(|step| (*step, true)));
    for (step, with_credentials) in cases {
        let target = dir.0.join(format!("target-{step:?}-{with_credentials}"));
        let new_root = dir.0.join(format!("root-{step:?}-{with_credentials}"));
        let (store, _) = Store::open(&target).unwrap();
        put_pod(&store, "default", "old", 1);
        drop(store);
        let old = snapshot(&target);
        let options = StoreOptions {
            crash_at: Some(step),
            ..StoreOptions::default()
        };
        let (store, _) = Store::open_with(&target, options).unwrap();
        let mut replace = import_opts(&new_root);
        replace.replace = true;
        replace.with_credentials = with_credentials;
        let bytes = if with_credentials {
            &credentials
        } else {
            &archive
        };
        let e = store.import(&bytes[..], &replace).unwrap_err();
        assert!(
            matches!(e, ImportError::Store(StoreError::InjectedCrash)),
            "{step:?}: {e}"
        );
        drop(store);
        // The next open recovers.
        drop(Store::open(&target).unwrap());
        let mut after = snapshot(&target);
        let has_new = target.join("kubelet/pods.v1.core/default/web-0").exists();
        if has_new {
            assert!(
                !target.join("kubelet/pods.v1.core/default/old").exists(),
                "{step:?}"
            );
            assert!(target.join("version").exists(), "{step:?}: {after:?}");
            if with_credentials {
                assert!(target.join(".grants").is_file(), "{step:?}");
                assert_eq!(
                    fs::read(new_root.join("yurthub.conf")).ok().as_deref(),
                    Some(&b"kubeconfig"[..]),
                    "{step:?}: the new cache without its identity"
                );
                assert!(new_root.join("pki/ca.crt").is_file(), "{step:?}");
            }
        } else {
            after.retain(|p, _| !p.starts_with(".quarantine"));
            assert_eq!(after, old, "{step:?}");
        }
        // The journal's rename is the commit point.
        let committed = !matches!(
            step,
            CommitStep::Staged | CommitStep::JournalWritten | CommitStep::Synced
        );
        assert_eq!(has_new, committed, "{step:?}");
    }
}

#[test]
fn export_leaves_out_what_the_store_would_not_serve() {
    let dir = TempDir::new("archive-leftout");
    let source = source_cache(&dir);
    let pods_dir = source.join("kubelet/pods.v1.core/default");
    fs::write(pods_dir.join("ghost-pod"), pod("default", "web-0", 9)).unwrap();
    fs::write(pods_dir.join("torn"), b"{\"metadata\":{\"na").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", pods_dir.join("link")).unwrap();
    fs::write(source.join("notes.txt"), b"hello").unwrap();
    let (archive, report) = export_of(&source, false);
    let mut left: Vec<&str> = report
        .left_out
        .iter()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "kubelet/pods.v1.core/default/ghost-pod",
            "kubelet/pods.v1.core/default/torn",
            "notes.txt"
        ]
    );
    let (_, entries) = read_all(&archive).unwrap();
    assert_eq!(
        entries
            .iter()
            .filter(|e| matches!(e, Entry::File(..)))
            .count(),
        4
    );
}

#[test]
fn the_identity_files_travel_with_credentials_and_a_current_link_as_its_file() {
    let dir = TempDir::new("archive-root");
    let source = source_cache(&dir);
    let root = dir.0.join("root");
    fs::create_dir_all(root.join("pki")).unwrap();
    fs::write(root.join("yurthub.conf"), b"kubeconfig").unwrap();
    fs::write(root.join("pki/ca.crt"), b"ca").unwrap();
    fs::write(root.join("pki/yurthub-2026-01-01-00-00-00.pem"), b"pair").unwrap();
    std::os::unix::fs::symlink(
        root.join("pki/yurthub-2026-01-01-00-00-00.pem"),
        root.join("pki/yurthub-current.pem"),
    )
    .unwrap();
    // Not the identity's: never exported.
    fs::write(root.join("link-totals.json"), b"{}").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("pki/other.pem")).unwrap();
    let opts = ExportOptions {
        cache: &source,
        root_dir: &root,
        node_name: "edge-1",
        with_credentials: true,
        now: 1_765_000_000,
    };
    let (archive, report) = export(&opts, Vec::new()).unwrap();
    assert_eq!(report.credentials, 2 + 4, "{report:?}");

    let target = dir.0.join("target");
    let new_root = dir.0.join("new-root");
    let (store, _) = Store::open(&target).unwrap();
    let mut opts = import_opts(&new_root);
    opts.with_credentials = true;
    store.import(&archive[..], &opts).unwrap();
    let mut got = snapshot(&new_root);
    got.retain(|path, _| !path.is_empty());
    let want: BTreeMap<String, Option<Vec<u8>>> = [
        ("pki", None),
        ("pki/ca.crt", Some(&b"ca"[..])),
        ("pki/yurthub-2026-01-01-00-00-00.pem", Some(b"pair")),
        ("pki/yurthub-current.pem", Some(b"pair")),
        ("yurthub.conf", Some(b"kubeconfig")),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_owned(), b.map(<[u8]>::to_vec)))
    .collect();
    assert_eq!(got, want);
}
