//! What the cache needs to know of an object, read straight from its JSON: kind, name,
//! namespace, resourceVersion, a list's continue token and a pod's node. Borrowed from the
//! bytes, so reading it allocates nothing for ordinary values; everything else in the
//! object is skipped.
//!
//! Only a JSON object is an object, at every level: serde's derived structs also accept a
//! JSON array, field by field, so `["Pod",{"name":"evil","resourceVersion":"99"}]` would
//! pass for a pod. The heads here deserialize from maps only, whoever parses them.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};

/// The head of an object (or of a list, whose `metadata` has the same fields).
#[derive(Default)]
pub(crate) struct ObjectHead<'a> {
    /// `kind`.
    pub kind: Option<Cow<'a, str>>,
    /// `metadata`.
    pub metadata: Option<ObjectMeta<'a>>,
    /// `spec`, for `spec.nodeName`.
    pub spec: Option<ObjectSpec<'a>>,
}

/// The fields of `metadata` the cache reads.
#[derive(Default)]
pub(crate) struct ObjectMeta<'a> {
    /// `metadata.name`.
    pub name: Option<Cow<'a, str>>,
    /// `metadata.namespace`.
    pub namespace: Option<Cow<'a, str>>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<Cow<'a, str>>,
    /// `metadata.continue` (lists).
    pub continue_token: Option<Cow<'a, str>>,
}

/// The field of `spec` the cache reads.
#[derive(Default)]
pub(crate) struct ObjectSpec<'a> {
    /// `spec.nodeName` (pods).
    pub node_name: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectHead<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, default)]
            kind: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            metadata: Option<ObjectMeta<'a>>,
            #[serde(borrow, default)]
            spec: Option<ObjectSpec<'a>>,
        }
        let Fields {
            kind,
            metadata,
            spec,
        } = from_map(d)?;
        Ok(ObjectHead {
            kind,
            metadata,
            spec,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectMeta<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, default)]
            name: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            namespace: Option<Cow<'a, str>>,
            #[serde(borrow, default, rename = "resourceVersion")]
            resource_version: Option<Cow<'a, str>>,
            #[serde(borrow, default, rename = "continue")]
            continue_token: Option<Cow<'a, str>>,
        }
        let Fields {
            name,
            namespace,
            resource_version,
            continue_token,
        } = from_map(d)?;
        Ok(ObjectMeta {
            name,
            namespace,
            resource_version,
            continue_token,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectSpec<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, default, rename = "nodeName")]
            node_name: Option<Cow<'a, str>>,
        }
        let Fields { node_name } = from_map(d)?;
        Ok(ObjectSpec { node_name })
    }
}

/// Deserializes `T` from a JSON object and nothing else (an array is an error).
pub(crate) fn from_map<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    struct MapOnly<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOnly<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(MapOnly(PhantomData))
}

impl<'a> ObjectHead<'a> {
    /// Reads the head of `bytes`; None when they are not a JSON object.
    pub(crate) fn parse(bytes: &'a [u8]) -> Option<ObjectHead<'a>> {
        Self::read(bytes).ok()
    }

    /// Reads the head of `bytes`, saying why it cannot. Any other way of deserializing an
    /// [`ObjectHead`] is guarded the same: the type refuses anything but a JSON object, at
    /// every level.
    pub(crate) fn read(bytes: &'a [u8]) -> Result<ObjectHead<'a>, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// `metadata.resourceVersion`.
    #[cfg(test)]
    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.metadata.as_ref()?.resource_version.as_deref()
    }
}

/// Whether the first byte after JSON whitespace is `{`: the text can only be an object. A
/// check of the first value's type only; the rest may still not parse.
pub(crate) fn starts_object(bytes: &[u8]) -> bool {
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
    fn every_way_of_deserializing_a_head_refuses_an_array() {
        let evil = br#"["Pod",{"name":"evil","namespace":"ns","resourceVersion":"99"}]"#;
        assert!(serde_json::from_slice::<ObjectHead<'_>>(evil).is_err());
        assert!(serde_json::from_slice::<ObjectMeta<'_>>(br#"["a","ns","9"]"#).is_err());
        let err = ObjectHead::read(evil).err().unwrap();
        assert!(err.to_string().contains("a JSON object"), "{err}");
        let head =
            ObjectHead::read(br#"{"metadata":{"name":"a\u0062","resourceVersion":"7"}}"#).unwrap();
        let meta = head.metadata.unwrap();
        assert_eq!(meta.name.as_deref(), Some("ab"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
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
            // Arrays one level down are refused the same.
            br#"{"kind":"Pod","metadata":["evil","ns","99"]}"#,
            br#"{"metadata":{"name":"a"},"spec":["edge-1"]}"#,
        ] {
            assert!(
                ObjectHead::parse(garbage).is_none(),
                "{}",
                String::from_utf8_lossy(garbage)
            );
        }
    }
}
