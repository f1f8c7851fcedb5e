use super::*;

#[test]
fn names() {
    assert!(is_component_name("kube-proxy"));
    assert!(is_component_name("go-http-client"));
    assert!(!is_component_name(".."));
    assert!(!is_component_name("version"));
    assert!(!is_component_name("a/b"));
    assert!(is_object_name("system:node:edge-1"));
    assert!(!is_object_name("a\u{7}b"));
}

#[test]
fn a_component_is_made_only_from_a_name_safe_as_its_cache_directory() {
    assert_eq!(Component::new("kube-proxy").unwrap().as_str(), "kube-proxy");
    for unsafe_name in [
        "", "..", ".hidden", "a/b", "a\\b", "a%2f", "a\0b", "version", "Kubelet", "a b",
    ] {
        assert!(Component::new(unsafe_name).is_none(), "{unsafe_name:?}");
    }
    assert!(Component::new(&"a".repeat(64)).is_none());
    for known in [Component::KUBELET, Component::TINYHUB] {
        assert_eq!(Component::new(known.as_str()), Some(known.clone()));
    }
}

#[test]
fn safe_segments() {
    let check = |s: &str, expected: bool| assert_eq!(is_safe_segment(s), expected, "{s:?}");
    check("kube-system", true);
    check("coredns-5d78c9869d-abcde", true);
    check("system:node:edge-1", true);
    check("with space", true);
    check(&"a".repeat(253), true);
    check(&"a".repeat(254), false);
    check("", false);
    check(".", false);
    check("..", false);
    check(".hidden", false);
    check(".staging", false);
    check("a/b", false);
    check("/", false);
    check("a\\b", false);
    check("a%2Fb", false);
    check("a\0b", false);
    check("a\nb", false);
    check("a\tb", false);
    check("a\u{7f}b", false);
    check("a\u{85}b", false);
    check("\u{80}", false);
    check("a\u{9f}", false);
    check("a\u{a0}b", true);
    check("\u{c0}\u{7ff}", true);
    check("ü", true);
    // Read by bytes, it is the rule on chars: every char of the first planes (and some
    // beyond) inside a name.
    for c in (0..0x3000)
        .chain([0xfeff, 0x1_0000, 0x10_ffff])
        .filter_map(char::from_u32)
    {
        let expected = !(matches!(c, '/' | '\\' | '%') || c.is_control());
        check(&format!("a{c}b"), expected);
    }
}
