//! What the store serves: the bound on a file read and the object a file must hold.

use super::super::check::{
    Expect, FileRead, MAX_FILE, Refusal, api_version_of_kind_dir, check_object, read_bounded,
};
use super::*;

#[test]
fn the_read_bound_is_the_largest_object_and_some_room() {
    assert_eq!(
        MAX_FILE,
        crate::cache::writer::MAX_OBJECT_BYTES as u64 + 64 * 1024
    );
}

#[test]
fn a_kind_directory_names_its_api_version() {
    let of = |rel: &str| api_version_of_kind_dir(rel);
    assert_eq!(of("pods.v1.core").as_deref(), Some("v1"));
    assert_eq!(of("deployments.v1.apps").as_deref(), Some("apps/v1"));
    assert_eq!(
        of("endpointslices.v1.discovery.k8s.io").as_deref(),
        Some("discovery.k8s.io/v1")
    );
    assert_eq!(
        of("partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core").as_deref(),
        Some("meta.k8s.io/v1")
    );
    for unparsable in [
        "tokens",
        "pods.v1",
        ".v1.core",
        "pods..core",
        "partialobjectmetadatas.v1.meta.k8s.io/tokens",
        "kubelet/pods.v1.core",
        "partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core/x",
        "",
    ] {
        assert_eq!(of(unparsable), None, "{unparsable}");
    }
    let key = key(&pods(), Some("ns"), "web");
    assert_eq!(
        Expect::for_key(&key),
        Expect::for_kind_dir("pods.v1.core", Some("ns"), "web")
    );
    let deployments = CollectionKey::new("kubelet", "deployments", "v1", "apps").metadata();
    let key = super::key(&deployments, Some("ns"), "d");
    assert_eq!(
        Expect::for_key(&key),
        Expect::for_kind_dir(&deployments.dir_name(), Some("ns"), "d")
    );
}

#[test]
fn a_file_is_served_only_as_the_object_its_path_names() {
    fn pod<'a>(ns: Option<&'a str>, name: &'a str) -> Expect<'a> {
        Expect::for_kind_dir("pods.v1.core", ns, name)
    }
    let ok = |bytes: &str, expect: &Expect<'_>| check_object(bytes.as_bytes(), expect);
    let code = |bytes: &str, expect: &Expect<'_>| {
        check_object(bytes.as_bytes(), expect)
            .err()
            .map(|r| r.code())
    };
    // What the writer stores: with or without apiVersion/kind (list items have none).
    let web = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"ns"}}"#;
    assert_eq!(ok(web, &pod(Some("ns"), "web")), Ok(()));
    assert_eq!(
        ok(
            r#"{"metadata":{"name":"web","namespace":"ns"}}"#,
            &pod(Some("ns"), "web")
        ),
        Ok(())
    );
    let node = r#"{"metadata":{"name":"n1","namespace":""}}"#;
    assert_eq!(
        ok(node, &Expect::for_kind_dir("nodes.v1.core", None, "n1")),
        Ok(())
    );
    // The issue's ghosts: another name, another namespace, a leftover beside the real one.
    assert_eq!(
        code(web, &pod(Some("ns"), "ghost-pod")),
        Some("names-other")
    );
    assert_eq!(code(web, &pod(Some("other"), "web")), Some("names-other"));
    assert_eq!(code(web, &pod(None, "web")), Some("names-other"));
    assert_eq!(
        code(r#"{"metadata":{"name":"web"}}"#, &pod(Some("ns"), "web")),
        Some("names-other")
    );
    assert_eq!(code(web, &pod(Some("ns"), "tmp_web")), Some("names-other"));
    // Another kind's object (apiVersion), where it says one.
    let deployment = r#"{"apiVersion":"apps/v1","metadata":{"name":"web","namespace":"ns"}}"#;
    assert_eq!(
        code(deployment, &pod(Some("ns"), "web")),
        Some("names-other")
    );
    assert_eq!(
        ok(
            deployment,
            &Expect::for_kind_dir("deployments.v1.apps", Some("ns"), "web")
        ),
        Ok(())
    );
    let unknown_kind = Expect::for_kind_dir("odd", Some("ns"), "web");
    assert_eq!(ok(deployment, &unknown_kind), Ok(()));
    // Not an object at all.
    for torn in [
        "",
        "{\"metadata\":{\"name\":\"web\"",
        "[1]",
        "null",
        "{}",
        r#"{"metadata":{"name":""}}"#,
    ] {
        assert_eq!(
            code(torn, &pod(Some("ns"), "web")),
            Some("not-object"),
            "{torn}"
        );
    }
    let refusal = check_object(web.as_bytes(), &pod(Some("ns"), "ghost-pod")).unwrap_err();
    assert_eq!(refusal.to_string(), r#"holds "web", not "ghost-pod""#);
}

#[test]
fn only_regular_files_within_the_bound_are_read() {
    let dir = TempDir::new("check-read");
    let root = dir.root();
    fs::create_dir_all(&root).unwrap();
    let file = root.join("f");
    fs::write(&file, b"{}").unwrap();
    assert_eq!(
        read_bounded(&file).unwrap(),
        FileRead::Bytes(b"{}".to_vec())
    );
    assert_eq!(
        read_bounded(&root.join("missing")).unwrap(),
        FileRead::Missing
    );
    assert_eq!(
        read_bounded(&file.join("below")).unwrap(),
        FileRead::Missing
    );
    symlink(&file, root.join("link")).unwrap();
    assert_eq!(read_bounded(&root.join("link")).unwrap(), FileRead::Symlink);
    assert_eq!(read_bounded(&root).unwrap(), FileRead::NotFile);
    // A sparse file past the bound is never read: its size comes from fstat.
    let big = File::create(root.join("big")).unwrap();
    big.set_len(2 << 30).unwrap();
    assert_eq!(
        read_bounded(&root.join("big")).unwrap(),
        FileRead::TooLarge { size: 2 << 30 }
    );
    let edge = File::create(root.join("edge")).unwrap();
    edge.set_len(MAX_FILE).unwrap();
    assert!(
        matches!(read_bounded(&root.join("edge")).unwrap(), FileRead::Bytes(b) if b.len() as u64 == MAX_FILE)
    );
    let refusal = Refusal::TooLarge { size: 2 << 30 };
    assert_eq!(refusal.code(), "too-large");
}

#[test]
fn a_ghost_file_decides_no_put_version_or_delete() {
    // A file at `a/web` that names another object, with a newer resourceVersion than the
    // real `web` that the cloud sends next.
    let ghost = object(Some("a"), "other", 999, "ghost");
    let web = key(&pods(), Some("a"), "web");
    for background in [false, true] {
        let dir = TempDir::new("check-ghost-put");
        {
            let store = open(&dir);
            put(&store, &pods(), Some("a"), "keep", 1, "x");
        }
        let path = dir.root().join("kubelet/pods.v1.core/a/web");
        fs::write(&path, &ghost).unwrap();
        // Built at open (the index's path), or not at all (the disk's).
        let options = StoreOptions {
            background_index: background,
            ..StoreOptions::default()
        };
        let (store, _) = Store::open_with(&dir.root(), options).unwrap();
        assert_eq!(store.version_of(&web).unwrap(), None, "{background}");
        // A DELETED at rv 6: the ghost's 999 does not make it "newer, kept".
        fs::write(&path, &ghost).unwrap();
        assert!(store.delete(&web, Some("6")).unwrap(), "{background}");
        fs::write(&path, &ghost).unwrap();
        assert_eq!(
            put(&store, &pods(), Some("a"), "web", 7, "real"),
            PutOutcome::Written {
                bytes: object(Some("a"), "web", 7, "real").len() as u64
            },
            "{background}"
        );
        assert_eq!(store.version_of(&web).unwrap(), Some(7));
        assert_eq!(
            get(&store, &pods(), Some("a"), "web"),
            Some(object(Some("a"), "web", 7, "real"))
        );
    }
}
