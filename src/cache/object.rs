//! What the cache needs to know of an object, read straight from its JSON: kind, name,
//! namespace, resourceVersion, a list's continue token and a pod's node. Borrowed from the
//! bytes, so reading it allocates nothing for ordinary values; everything else in the
//! object is skipped.

use std::borrow::Cow;

use serde::Deserialize;

/// The head of an object (or of a list, whose `metadata` has the same fields).
#[derive(Deserialize, Default)]
pub struct ObjectHead<'a> {
    /// `kind`.
    #[serde(borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    /// `metadata`.
    #[serde(borrow, default)]
    pub metadata: Option<ObjectMeta<'a>>,
    /// `spec`, for `spec.nodeName`.
    #[serde(borrow, default)]
    pub spec: Option<ObjectSpec<'a>>,
}

/// The fields of `metadata` the cache reads.
#[derive(Deserialize, Default)]
pub struct ObjectMeta<'a> {
    /// `metadata.name`.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// `metadata.namespace`.
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    /// `metadata.resourceVersion`.
    #[serde(borrow, default, rename = "resourceVersion")]
    pub resource_version: Option<Cow<'a, str>>,
    /// `metadata.continue` (lists).
    #[serde(borrow, default, rename = "continue")]
    pub continue_token: Option<Cow<'a, str>>,
}

/// The field of `spec` the cache reads.
#[derive(Deserialize, Default)]
pub struct ObjectSpec<'a> {
    /// `spec.nodeName` (pods).
    #[serde(borrow, default, rename = "nodeName")]
    pub node_name: Option<Cow<'a, str>>,
}

impl<'a> ObjectHead<'a> {
    /// Reads the head of `bytes`; None when they are not a JSON object.
    pub fn parse(bytes: &'a [u8]) -> Option<ObjectHead<'a>> {
        // serde's derived structs also accept a JSON array, field by field: a garbage cache
        // file `[null,{"resourceVersion":"9999"}]` would pass for an object (served in
        // offline lists, and "newer" than any answer that could repair it).
        if !starts_object(bytes) {
            return None;
        }
        serde_json::from_slice(bytes).ok()
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.as_ref()?.resource_version.as_deref()
    }
}

/// Whether the first byte after JSON whitespace is `{`: the text can only be an object. A
/// check of the first value's type only; the rest may still not parse.
pub fn starts_object(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        == Some(&b'{')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_head_and_skips_the_rest() {
        let pod = br#"{"kind":"Pod","metadata":{"name":"a","namespace":"n","resourceVersion":"7","labels":{"x":"y"}},"spec":{"nodeName":"edge-1","containers":[]},"status":{}}"#;
        let head = ObjectHead::parse(pod).unwrap();
        assert_eq!(head.kind.as_deref(), Some("Pod"));
        assert_eq!(head.resource_version(), Some("7"));
        assert_eq!(head.spec.unwrap().node_name.as_deref(), Some("edge-1"));
        assert!(ObjectHead::parse(b"[1]").is_none());
        assert!(ObjectHead::parse(b"{\"metadata\":").is_none());
    }

    #[test]
    fn starts_object_skips_json_whitespace_only() {
        assert!(starts_object(b" \t\r\n{"));
        assert!(starts_object(b"{}"));
        assert!(
            !starts_object(b"\x0c{}"),
            "form feed is not JSON whitespace"
        );
        assert!(!starts_object(b"[{}]"));
        assert!(!starts_object(b"  "));
    }

    #[test]
    fn only_an_object_is_an_object() {
        let pod = br#" {"kind":"Pod","metadata":{"resourceVersion":"7"}}"#;
        assert_eq!(
            ObjectHead::parse(pod).unwrap().resource_version(),
            Some("7")
        );
        // Arrays fill a derived struct field by field; none of these is an object.
        for garbage in [
            &b"[]"[..],
            b"[null]",
            b"\n[\"Pod\",{\"name\":\"x\",\"resourceVersion\":\"9999\"}]",
            b"\"Pod\"",
            b"null",
            b"",
            b"\xff\xfe{}",
        ] {
            assert!(
                ObjectHead::parse(garbage).is_none(),
                "{}",
                String::from_utf8_lossy(garbage)
            );
        }
    }
}
