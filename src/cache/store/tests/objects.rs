//! Single objects: layout and modes, gets, lists, puts, deletes, hostile keys and
//! symlinks, non-resource documents, concurrent readers, a full disk.

use super::*;

#[test]
fn layout_and_modes() {
    let dir = TempDir::new("layout");
    let store = open(&dir);
    let root = dir.root();
    put(&store, &pods(), Some("default"), "web", 1, "web");
    put(&store, &nodes(), None, "edge-1", 1, "node");
    store
        .put(
            &key(
                &CollectionKey::new("kube-proxy", "endpointslices", "v1", "discovery.k8s.io"),
                Some("default"),
                "kubernetes",
            ),
            b"{}",
            None,
        )
        .unwrap();

    let snap = snapshot(&root);
    let paths: Vec<&str> = snap.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "kube-proxy",
            "kube-proxy/endpointslices.v1.discovery.k8s.io",
            "kube-proxy/endpointslices.v1.discovery.k8s.io/default",
            "kube-proxy/endpointslices.v1.discovery.k8s.io/default/kubernetes",
            "kubelet",
            "kubelet/nodes.v1.core",
            "kubelet/nodes.v1.core/edge-1",
            "kubelet/pods.v1.core",
            "kubelet/pods.v1.core/default",
            "kubelet/pods.v1.core/default/web",
        ]
    );
    assert_eq!(
        snap["kubelet/pods.v1.core/default/web"],
        Some(object(Some("default"), "web", 1, "web"))
    );
    assert_eq!(
        snap["kubelet/nodes.v1.core/edge-1"],
        Some(object(None, "edge-1", 1, "node"))
    );
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join(STAGING)), 0o700);
    for (path, content) in &snap {
        let expected = if content.is_some() { 0o600 } else { 0o700 };
        assert_eq!(mode(&root.join(path)), expected, "{path}");
    }
    assert!(staging_entries(&root).is_empty());
    assert_eq!(store.root(), root);
}

#[test]
fn get_finds_only_what_was_put() {
    let dir = TempDir::new("get");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "web", 1, "web");
    put(&store, &nodes(), None, "edge-1", 1, "node");
    assert_eq!(
        get(&store, &pods(), Some("a"), "web"),
        Some(object(Some("a"), "web", 1, "web"))
    );
    assert_eq!(
        get(&store, &nodes(), None, "edge-1"),
        Some(object(None, "edge-1", 1, "node"))
    );
    assert_eq!(get(&store, &pods(), Some("b"), "web"), None);
    assert_eq!(get(&store, &pods(), None, "web"), None);
    assert_eq!(get(&store, &pods(), Some("a"), "db"), None);
    assert_eq!(
        get(
            &store,
            &CollectionKey::new("coredns", "pods", "v1", ""),
            Some("a"),
            "web"
        ),
        None
    );
    assert_eq!(
        get(
            &store,
            &CollectionKey::new("kubelet", "pods", "v1", "apps"),
            Some("a"),
            "web"
        ),
        None
    );
}

#[test]
fn list_is_sorted_resumable_and_scoped() {
    let dir = TempDir::new("list");
    let store = open(&dir);
    for (ns, name) in [
        ("b", "web"),
        ("a", "zed"),
        ("a", "api"),
        ("kube-system", "dns"),
        ("a-b", "x"),
    ] {
        put(&store, &pods(), Some(ns), name, 1, "web");
    }
    // Leftovers from other tools are not objects.
    let kind_dir = dir.root().join("kubelet/pods.v1.core");
    fs::write(kind_dir.join(".partial"), b"{").unwrap();
    fs::write(kind_dir.join("a/.partial"), b"{").unwrap();
    fs::create_dir(kind_dir.join("a/subdir")).unwrap();

    let check = |namespace: Option<&str>, after: Option<(&str, &str)>, expected: &[&str]| {
        assert_eq!(
            names(&store, &pods(), namespace, after).unwrap(),
            expected,
            "{namespace:?} after {after:?}"
        );
    };
    // (namespace, name) order: "a" < "a-b" < "aa", unlike the joined path "a-b/x" < "a/api".
    check(
        None,
        None,
        &["a/api", "a/zed", "a-b/x", "b/web", "kube-system/dns"],
    );
    check(
        None,
        Some(("a", "api")),
        &["a/zed", "a-b/x", "b/web", "kube-system/dns"],
    );
    check(
        None,
        Some(("a", "zed")),
        &["a-b/x", "b/web", "kube-system/dns"],
    );
    check(None, Some(("aa", "")), &["b/web", "kube-system/dns"]);
    check(
        None,
        Some(("", "zzz")),
        &["a/api", "a/zed", "a-b/x", "b/web", "kube-system/dns"],
    );
    check(None, Some(("kube-system", "dns")), &[]);
    check(Some("a"), None, &["a/api", "a/zed"]);
    check(Some("a"), Some(("a", "api")), &["a/zed"]);
    check(Some("a"), Some(("", "x")), &["a/api", "a/zed"]);
    check(Some("a"), Some(("b", "")), &[]);
    check(Some("never-used"), None, &[]);
    assert_eq!(names(&store, &nodes(), None, None), None);
    assert_eq!(names(&store, &nodes(), Some("a"), None), None);

    for name in ["edge-2", "edge-1", "edge-10"] {
        put(&store, &nodes(), None, name, 1, "node");
    }
    let check = |after: Option<(&str, &str)>, expected: &[&str]| {
        assert_eq!(
            names(&store, &nodes(), None, after).unwrap(),
            expected,
            "after {after:?}"
        );
    };
    check(None, &["/edge-1", "/edge-10", "/edge-2"]);
    check(Some(("", "edge-10")), &["/edge-2"]);
    check(Some(("default", "")), &[]);

    let first = store
        .list(&pods(), Some("b"), None)
        .unwrap()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let expected = StoredObject {
        namespace: Some("b".into()),
        name: "web".into(),
        bytes: object(Some("b"), "web", 1, "web"),
        head: Some(StoredHead {
            kind: None,
            resource_version: Some("1".into()),
        }),
    };
    assert_eq!(first, expected);
    let node = store
        .list(&nodes(), None, None)
        .unwrap()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!((node.namespace, node.name), (None, "edge-1".to_owned()));
}

#[test]
fn list_reads_lazily_and_skips_vanished_files() {
    let dir = TempDir::new("lazy");
    let store = open(&dir);
    for (ns, name) in [("a", "one"), ("a", "three"), ("a", "two"), ("b", "four")] {
        put(&store, &pods(), Some(ns), name, 1, "web");
    }
    let mut objects = store.list(&pods(), None, None).unwrap().unwrap();
    assert_eq!(objects.next().unwrap().unwrap().name, "one");
    // "a" has been listed: its deleted file is skipped. "b" has not been read yet.
    assert!(
        store
            .delete(&key(&pods(), Some("a"), "three"), None)
            .unwrap()
    );
    assert!(
        store
            .delete(&key(&pods(), Some("b"), "four"), None)
            .unwrap()
    );
    put(&store, &pods(), Some("b"), "five", 1, "web");
    let rest: Vec<String> = objects.map(|o| o.unwrap().name).collect();
    assert_eq!(rest, ["two", "five"]);
}

#[test]
fn put_writes_only_what_is_new() {
    let dir = TempDir::new("put");
    let store = open(&dir);
    let k = key(&pods(), Some("a"), "web");
    let path = dir.root().join("kubelet/pods.v1.core/a/web");
    let v5 = object(Some("a"), "web", 5, "web");
    assert_eq!(
        store.put(&k, &v5, Some("5")).unwrap(),
        PutOutcome::Written {
            bytes: v5.len() as u64
        }
    );
    let before = fs::metadata(&path).unwrap();

    assert_eq!(
        store.put(&k, &v5, Some("5")).unwrap(),
        PutOutcome::Identical
    );
    assert_eq!(store.put(&k, &v5, None).unwrap(), PutOutcome::Identical);
    let v4 = object(Some("a"), "web", 4, "changed");
    assert_eq!(store.put(&k, &v4, Some("4")).unwrap(), PutOutcome::Stale);
    let after = fs::metadata(&path).unwrap();
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec()),
        (before.ino(), before.mtime(), before.mtime_nsec())
    );
    assert_eq!(fs::read(&path).unwrap(), v5);

    let v6 = object(Some("a"), "web", 6, "web");
    assert_eq!(
        store.put(&k, &v6, Some("6")).unwrap(),
        PutOutcome::Written {
            bytes: v6.len() as u64
        }
    );
    assert_ne!(fs::metadata(&path).unwrap().ino(), before.ino());
    assert_eq!(fs::read(&path).unwrap(), v6);

    // The same version with other bytes is not older: written.
    let v6b = object(Some("a"), "web", 6, "other");
    assert!(matches!(
        store.put(&k, &v6b, Some("6")).unwrap(),
        PutOutcome::Written { .. }
    ));
    // Without a version there is no guard.
    let v1 = object(Some("a"), "web", 1, "web");
    assert!(matches!(
        store.put(&k, &v1, None).unwrap(),
        PutOutcome::Written { .. }
    ));
    // An opaque stored version never blocks.
    let opaque = br#"{"metadata":{"resourceVersion":"abc"}}"#;
    assert!(matches!(
        store.put(&k, opaque, Some("1")).unwrap(),
        PutOutcome::Written { .. }
    ));
    assert!(matches!(
        store.put(&k, &v1, Some("1")).unwrap(),
        PutOutcome::Written { .. }
    ));
    assert_eq!(get(&store, &pods(), Some("a"), "web"), Some(v1));
    assert!(staging_entries(&dir.root()).is_empty());
}

#[test]
fn corrupt_file_is_returned_as_is_and_replaced_by_put() {
    let dir = TempDir::new("corrupt");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "web", 5, "web");
    let path = dir.root().join("kubelet/pods.v1.core/a/web");
    // Truncated JSON whose prefix claims a newer version: still unreadable, so older.
    let corrupt: &[u8] = br#"{"metadata":{"resourceVersion":"99""#;
    fs::write(&path, corrupt).unwrap();
    assert_eq!(
        get(&store, &pods(), Some("a"), "web").as_deref(),
        Some(corrupt)
    );
    let listed: Vec<Vec<u8>> = store
        .list(&pods(), None, None)
        .unwrap()
        .unwrap()
        .map(|o| o.unwrap().bytes)
        .collect();
    assert_eq!(listed, [corrupt]);
    assert!(matches!(
        put(&store, &pods(), Some("a"), "web", 1, "web"),
        PutOutcome::Written { .. }
    ));
    assert_eq!(
        get(&store, &pods(), Some("a"), "web"),
        Some(object(Some("a"), "web", 1, "web"))
    );
}

#[test]
fn any_damaged_file_is_older_than_an_answer_single_or_listed() {
    let dir = TempDir::new("damaged");
    let store = open(&dir);
    let path = dir.root().join("kubelet/pods.v1.core/a/web");
    let damaged: [&[u8]; 4] = [
        br#"{"metadata":{"resourceVersion":"99""#,
        b"",
        b"\x00\xff garbage",
        // An array fills a derived struct field by field: it must not pass for an
        // object whose resourceVersion is 99.
        br#"[null,{"name":"web","resourceVersion":"99"}]"#,
    ];
    for (i, bad) in damaged.into_iter().enumerate() {
        put(&store, &pods(), Some("a"), "web", 1, "web");
        fs::write(&path, bad).unwrap();
        assert!(
            matches!(
                put(&store, &pods(), Some("a"), "web", 2, "web"),
                PutOutcome::Written { .. }
            ),
            "put over damaged file {i}"
        );
        assert_eq!(
            get(&store, &pods(), Some("a"), "web"),
            Some(object(Some("a"), "web", 2, "web"))
        );
        fs::write(&path, bad).unwrap();
        let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
        let listed = object(Some("a"), "web", 3, "web");
        assert!(
            matches!(
                replace.put(Some("a"), "web", &listed, Some("3")).unwrap(),
                PutOutcome::Written { .. }
            ),
            "list over damaged file {i}"
        );
        replace.commit(&mut |_| true, Some("3")).unwrap();
        assert_eq!(get(&store, &pods(), Some("a"), "web"), Some(listed));
    }
}

#[test]
fn unsafe_keys_are_refused_without_touching_the_disk() {
    let dir = TempDir::new("unsafe");
    let store = open(&dir);
    let bad = [
        "", ".", "..", "../x", "a/b", "/etc", "a\0b", ".hidden", ".staging", "a\\b", "%2e%2e",
        "a\nb",
    ];
    let refused = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::UnsafeKey { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    for b in bad {
        // A component is checked when it is made: no key can hold this one.
        assert_eq!(crate::names::Component::new(b), None, "{b:?}");
        let mut collections = vec![
            CollectionKey::new("kubelet", b, "v1", ""),
            CollectionKey::new("kubelet", "pods", b, ""),
        ];
        if !b.is_empty() {
            collections.push(CollectionKey::new("kubelet", "pods", "v1", b));
        }
        let mut keys: Vec<ObjectKey> = collections
            .iter()
            .map(|c| key(c, Some("default"), "web"))
            .collect();
        keys.push(key(&pods(), Some(b), "web"));
        keys.push(key(&pods(), Some("default"), b));
        keys.push(key(&pods(), None, b));
        for k in &keys {
            refused(store.put(k, b"{}", None).map(drop), &format!("put {k:?}"));
            refused(store.get(k).map(drop), &format!("get {k:?}"));
            refused(store.delete(k, None).map(drop), &format!("delete {k:?}"));
        }
        for c in &collections {
            assert!(!store.has_collection(c));
            refused(store.list(c, None, None).map(drop), &format!("list {c:?}"));
            refused(
                store.delete_collection(c).map(drop),
                &format!("delete_collection {c:?}"),
            );
            refused(
                store.begin_replace(c, None).map(drop),
                &format!("begin_replace {c:?}"),
            );
        }
        refused(
            store.list(&pods(), Some(b), None).map(drop),
            "list namespace",
        );
        refused(
            store.begin_replace(&pods(), Some(b)).map(drop),
            "begin_replace namespace",
        );
        let mut replace = store.begin_replace(&pods(), None).unwrap();
        refused(
            replace.put(Some(b), "web", b"{}", None).map(drop),
            "replace namespace",
        );
        refused(replace.put(None, b, b"{}", None).map(drop), "replace name");
        drop(replace);
        refused(
            store.put_non_resource(b, b"{}").map(drop),
            "put_non_resource",
        );
        refused(store.get_non_resource(b).map(drop), "get_non_resource");
    }
    assert_eq!(snapshot(&dir.root()), BTreeMap::new());
    assert!(staging_entries(&dir.root()).is_empty());
    let beside: Vec<_> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["cache"]);
}

#[test]
fn symlinks_are_never_followed() {
    let dir = TempDir::new("symlink");
    let store = open(&dir);
    let root = dir.root();
    let outside = dir.0.join("outside");
    fs::create_dir_all(outside.join("pods.v1.core/a")).unwrap();
    fs::write(outside.join("secret"), b"secret").unwrap();
    fs::write(outside.join("pods.v1.core/a/web"), b"secret").unwrap();
    put(&store, &pods(), Some("a"), "web", 1, "web");
    let kind_dir = root.join("kubelet/pods.v1.core");

    // A symlinked object file.
    symlink(outside.join("secret"), kind_dir.join("a/link")).unwrap();
    assert_eq!(get(&store, &pods(), Some("a"), "link"), None);
    assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/web"]);
    // A symlinked namespace directory.
    symlink(&outside, kind_dir.join("evil")).unwrap();
    assert_eq!(get(&store, &pods(), Some("evil"), "secret"), None);
    assert_eq!(
        names(&store, &pods(), Some("evil"), None).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/web"]);
    assert!(
        store
            .put(&key(&pods(), Some("evil"), "new"), b"{}", None)
            .is_err()
    );
    assert!(
        !store
            .delete(&key(&pods(), Some("evil"), "secret"), None)
            .unwrap()
    );
    // A symlinked component directory.
    symlink(&outside, root.join("proxy")).unwrap();
    let proxy_pods = CollectionKey::new("proxy", "pods", "v1", "");
    assert!(!store.has_collection(&proxy_pods));
    assert_eq!(names(&store, &proxy_pods, None, None), None);
    assert_eq!(get(&store, &proxy_pods, Some("a"), "web"), None);
    assert!(
        !store
            .delete(&key(&proxy_pods, Some("a"), "web"), None)
            .unwrap()
    );
    assert!(
        store
            .put(&key(&proxy_pods, Some("a"), "new"), b"{}", None)
            .is_err()
    );
    assert!(!store.delete_collection(&proxy_pods).unwrap());
    // Writing over a symlinked object replaces the link, not its target.
    assert!(matches!(
        put(&store, &pods(), Some("a"), "link", 1, "web"),
        PutOutcome::Written { .. }
    ));
    assert!(
        fs::symlink_metadata(kind_dir.join("a/link"))
            .unwrap()
            .is_file()
    );

    let mut left: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["pods.v1.core", "secret"]);
    assert_eq!(fs::read(outside.join("secret")).unwrap(), b"secret");
    assert_eq!(
        fs::read(outside.join("pods.v1.core/a/web")).unwrap(),
        b"secret"
    );
    assert_eq!(
        fs::read_dir(outside.join("pods.v1.core/a"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn delete_and_delete_collection() {
    let dir = TempDir::new("delete");
    let store = open(&dir);
    put(&store, &pods(), Some("a"), "web", 1, "web");
    put(&store, &pods(), Some("a"), "db", 1, "db");
    put(&store, &nodes(), None, "edge-1", 1, "node");
    assert!(store.delete(&key(&pods(), Some("a"), "web"), None).unwrap());
    assert!(!store.delete(&key(&pods(), Some("a"), "web"), None).unwrap());
    assert!(
        !store
            .delete(&key(&pods(), Some("zzz"), "web"), None)
            .unwrap()
    );
    assert_eq!(get(&store, &pods(), Some("a"), "web"), None);
    assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/db"]);

    assert!(store.delete_collection(&pods()).unwrap());
    assert!(!store.has_collection(&pods()));
    assert_eq!(names(&store, &pods(), None, None), None);
    assert_eq!(get(&store, &pods(), Some("a"), "db"), None);
    assert!(!store.delete_collection(&pods()).unwrap());
    assert!(staging_entries(&dir.root()).is_empty());
    assert_eq!(names(&store, &nodes(), None, None).unwrap(), ["/edge-1"]);
}

#[test]
fn non_resource_documents() {
    let dir = TempDir::new("nonresource");
    let store = open(&dir);
    let version = non_resource_file_name("/version").unwrap();
    let discovery = non_resource_file_name("/apis/discovery.k8s.io/v1").unwrap();
    let body: &[u8] = br#"{"gitVersion":"v1.30.0"}"#;
    assert_eq!(
        store.put_non_resource(&version, body).unwrap(),
        PutOutcome::Written {
            bytes: body.len() as u64
        }
    );
    assert_eq!(
        store.put_non_resource(&version, body).unwrap(),
        PutOutcome::Identical
    );
    assert_eq!(
        store.get_non_resource(&version).unwrap().as_deref(),
        Some(body)
    );
    assert_eq!(store.get_non_resource(&discovery).unwrap(), None);
    store.put_non_resource(&discovery, b"{}").unwrap();
    assert_eq!(
        fs::read(dir.root().join("_apis_discovery.k8s.io_v1")).unwrap(),
        b"{}"
    );
    assert_eq!(fs::read(dir.root().join("version")).unwrap(), body);
    assert_eq!(mode(&dir.root().join("version")), 0o600);
    let newer: &[u8] = br#"{"gitVersion":"v1.31.0"}"#;
    assert!(matches!(
        store.put_non_resource(&version, newer).unwrap(),
        PutOutcome::Written { .. }
    ));
    assert_eq!(
        store.get_non_resource(&version).unwrap().as_deref(),
        Some(newer)
    );
    assert!(staging_entries(&dir.root()).is_empty());
}

#[test]
fn full_disk_and_used_up_quota_are_disk_full() {
    let io = |errno| StoreError::Io {
        op: StoreOp::Write,
        path: PathBuf::from("x"),
        source: io::Error::from_raw_os_error(errno),
    };
    assert!(io(libc::ENOSPC).is_disk_full());
    assert!(io(libc::EDQUOT).is_disk_full());
    assert!(!io(libc::EACCES).is_disk_full());
}

/// Each version pads the object to a length of its own, so a torn read cannot pass.
fn versioned(name: &str, version: usize) -> Vec<u8> {
    let pad = "p".repeat(version * 37 % 5000);
    format!(r#"{{"metadata":{{"name":"{name}","namespace":"a","resourceVersion":"{version}"}},"pad":"{pad}"}}"#)
        .into_bytes()
}

fn check_whole(bytes: &[u8]) {
    let value: serde_json::Value = serde_json::from_slice(bytes).expect("a whole JSON object");
    let version: usize = value["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(value["pad"].as_str().unwrap().len(), version * 37 % 5000);
}

#[test]
fn readers_never_see_a_torn_object() {
    let dir = TempDir::new("concurrent");
    let store = open(&dir);
    let x = key(&pods(), Some("a"), "x");
    store.put(&x, &versioned("x", 1), Some("1")).unwrap();
    let done = AtomicBool::new(false);
    let (started, first_read) = mpsc::channel();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0usize;
            while !done.load(Ordering::Acquire) {
                check_whole(&store.get(&x).unwrap().expect("x is never absent"));
                for object in store.list(&pods(), Some("a"), None).unwrap().unwrap() {
                    check_whole(&object.unwrap().bytes);
                }
                reads += 1;
                if reads == 1 {
                    started.send(()).unwrap();
                }
            }
            reads
        });
        first_read.recv().unwrap();
        for version in 2..300 {
            if version % 10 == 0 {
                let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
                let rv = version.to_string();
                replace
                    .put(Some("a"), "x", &versioned("x", version), Some(&rv))
                    .unwrap();
                replace
                    .put(Some("a"), "y", &versioned("y", version), Some(&rv))
                    .unwrap();
                replace.commit(&mut |_| true, Some(&rv)).unwrap();
            } else {
                store
                    .put(&x, &versioned("x", version), Some(&version.to_string()))
                    .unwrap();
            }
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() >= 1);
    });
    assert_eq!(store.get(&x).unwrap(), Some(versioned("x", 299)));
}

const FULL_DISK_ROOT: &str = "TINYHUB_STORE_TEST_FULL_DISK_ROOT";

/// A file-size limit (`ulimit -f`, with SIGXFSZ ignored) makes writes fail part-way,
/// as a full disk does, in a child process running `full_disk_child`.
#[test]
fn failed_writes_keep_the_old_files() {
    let dir = TempDir::new("full-disk");
    let root = dir.root();
    {
        let store = open(&dir);
        put(&store, &pods(), Some("a"), "x", 5, "web");
        store.put_non_resource("version", b"{}").unwrap();
    }
    let before = snapshot(&root);
    crate::child_test::run(
        module_path!(),
        "full_disk_child",
        &[
            "/bin/sh",
            "-c",
            r#"trap '' XFSZ; ulimit -f 8 && exec "$0" "$@""#,
        ],
        (FULL_DISK_ROOT, root.as_os_str()),
    );
    // Checked before any recovery could hide leftovers.
    assert!(staging_entries(&root).is_empty());
    assert_eq!(snapshot(&root), before);
}

#[test]
#[ignore = "run by failed_writes_keep_the_old_files in a child process with a file size limit"]
fn full_disk_child() {
    let root = PathBuf::from(
        std::env::var_os(FULL_DISK_ROOT).expect("run by failed_writes_keep_the_old_files"),
    );
    let (store, _) = Store::open(&root).unwrap();
    let old = object(Some("a"), "x", 5, "web");
    let big = object(Some("a"), "x", 6, &"y".repeat(64 * 1024));
    match store.put(&key(&pods(), Some("a"), "x"), &big, Some("6")) {
        Err(StoreError::Io {
            op: StoreOp::Write,
            path,
            ..
        }) => assert!(path.starts_with(root.join(STAGING))),
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&store, &pods(), Some("a"), "x"), Some(old.clone()));
    assert!(staging_entries(&root).is_empty());
    assert!(store.put_non_resource("version", &big).is_err());
    assert_eq!(
        store.get_non_resource("version").unwrap().as_deref(),
        Some(&b"{}"[..])
    );

    // A replacement whose object, then whose journal, cannot be written.
    let mut replace = store.begin_replace(&pods(), Some("a")).unwrap();
    assert!(replace.put(Some("a"), "x", &big, Some("6")).is_err());
    for i in 0..300 {
        let name = format!("new-{i:03}");
        replace
            .put(
                Some("a"),
                &name,
                &object(Some("a"), &name, 6, "web"),
                Some("6"),
            )
            .unwrap();
    }
    match replace.commit(&mut |_| true, Some("6")) {
        Err(StoreError::Io {
            op: StoreOp::Write,
            path,
            ..
        }) => assert!(path.starts_with(root.join(STAGING))),
        other => panic!("{other:?}"),
    }
    assert!(staging_entries(&root).is_empty());
    assert_eq!(names(&store, &pods(), None, None).unwrap(), ["a/x"]);
    assert_eq!(get(&store, &pods(), Some("a"), "x"), Some(old));
}

#[test]
fn names_in_order_without_reading_files() {
    let dir = TempDir::new("names");
    let store = open(&dir);
    assert!(store.names(&pods(), None).unwrap().is_none());
    for (ns, name) in [("b", "web"), ("a", "zed"), ("a", "api"), ("a-b", "x")] {
        put(&store, &pods(), Some(ns), name, 1, "web");
    }
    fs::write(dir.root().join("kubelet/pods.v1.core/a/.partial"), b"{").unwrap();
    let all = |namespace: Option<&str>| -> Vec<(Option<String>, String)> {
        let names = store.names(&pods(), namespace).unwrap().unwrap();
        names.map(Result::unwrap).collect()
    };
    let pair = |ns: &str, name: &str| (Some(ns.to_owned()), name.to_owned());
    assert_eq!(
        all(None),
        [
            pair("a", "api"),
            pair("a", "zed"),
            pair("a-b", "x"),
            pair("b", "web")
        ]
    );
    assert_eq!(all(Some("a")), [pair("a", "api"), pair("a", "zed")]);
    assert_eq!(all(Some("never-used")), []);
    assert!(store.names(&pods(), Some("../a")).is_err());

    // A file removed after its directory was read is still named: names open no file
    // (a listing skips it, since it reads each one).
    let mut names = store.names(&pods(), None).unwrap().unwrap();
    assert_eq!(names.next().unwrap().unwrap(), pair("a", "api"));
    assert!(store.delete(&key(&pods(), Some("a"), "zed"), None).unwrap());
    assert_eq!(names.next().unwrap().unwrap(), pair("a", "zed"));
    assert_eq!(names.next().unwrap().unwrap(), pair("a-b", "x"));

    for name in ["edge-2", "edge-1"] {
        put(&store, &nodes(), None, name, 1, "node");
    }
    let nodes: Vec<_> = store.names(&nodes(), None).unwrap().unwrap().collect();
    let nodes: Vec<_> = nodes.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        nodes,
        [(None, "edge-1".to_owned()), (None, "edge-2".to_owned())]
    );
}

#[test]
fn removed_after_names_what_deletions_buried_above_a_version() {
    let dir = TempDir::new("removed-after");
    let store = open(&dir);
    for (ns, name) in [("a", "old"), ("a", "new"), ("b", "new"), ("a", "kept")] {
        put(&store, &pods(), Some(ns), name, 5, "web");
    }
    put(&store, &nodes(), None, "n1", 5, "node");
    store
        .delete(&key(&pods(), Some("a"), "old"), Some("8"))
        .unwrap();
    store
        .delete(&key(&pods(), Some("b"), "new"), Some("12"))
        .unwrap();
    store
        .delete(&key(&pods(), Some("a"), "new"), Some("11"))
        .unwrap();
    store
        .delete(&key(&nodes(), None, "n1"), Some("13"))
        .unwrap();
    // A deletion whose version is unknown (a 404) buries nothing.
    store
        .delete(&key(&pods(), Some("a"), "kept"), None)
        .unwrap();
    let pair = |ns: &str, name: &str| (Some(ns.to_owned()), name.to_owned());
    assert_eq!(
        store.removed_after(&pods(), None, 8),
        [pair("a", "new"), pair("b", "new")]
    );
    assert_eq!(
        store.removed_after(&pods(), Some("a"), 8),
        [pair("a", "new")]
    );
    assert_eq!(store.removed_after(&pods(), None, 7).len(), 3);
    assert_eq!(store.removed_after(&pods(), None, 12), []);
    assert_eq!(
        store.removed_after(&nodes(), None, 0),
        [(None, "n1".to_owned())]
    );
}
