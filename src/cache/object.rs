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

use crate::cache::decode::{Located, Path};

/// The paths of an object's head, for the decoder to locate as it scans (see
/// [`ObjectHead::located`]). Every prefix is a path too, so that a repeated member is noticed.
pub(crate) const HEAD_PATHS: &[Path] = &[
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "resourceVersion"],
    &["metadata", "continue"],
    &["spec"],
    &["spec", "nodeName"],
    &["apiVersion"],
];

/// A watch event's `type` and `object`, then [`HEAD_PATHS`] within its object (from index 2).
pub(crate) const EVENT_PATHS: &[Path] = &[
    &["type"],
    &["object"],
    &["object", "kind"],
    &["object", "metadata"],
    &["object", "metadata", "name"],
    &["object", "metadata", "namespace"],
    &["object", "metadata", "resourceVersion"],
    &["object", "metadata", "continue"],
    &["object", "spec"],
    &["object", "spec", "nodeName"],
    &["object", "apiVersion"],
];

/// The string value at `span` of `unit` as serde reads an `Option<Cow<str>>`: `Some(None)`
/// for no value or null, None where serde would refuse it (not a string, not UTF-8).
pub(crate) fn located_str(
    unit: &[u8],
    span: Option<(usize, usize)>,
) -> Option<Option<Cow<'_, str>>> {
    let Some((start, stop)) = span else {
        return Some(None);
    };
    let raw = unit.get(start..stop)?;
    match raw.first()? {
        b'n' => Some(None),
        b'"' => {
            let inner = &raw[1..raw.len() - 1];
            if inner.contains(&b'\\') {
                serde_json::from_slice::<String>(raw)
                    .ok()
                    .map(|s| Some(Cow::Owned(s)))
            } else {
                std::str::from_utf8(inner)
                    .ok()
                    .map(|s| Some(Cow::Borrowed(s)))
            }
        }
        _ => None,
    }
}

/// Whether the value at `span` is an object (true) or absent or null (false); None for
/// anything else, which serde refuses.
fn located_map(unit: &[u8], span: Option<(usize, usize)>) -> Option<bool> {
    let Some((start, _)) = span else {
        return Some(false);
    };
    match unit.get(start)? {
        b'{' => Some(true),
        b'n' => Some(false),
        _ => None,
    }
}

/// The head of an object (or of a list, whose `metadata` has the same fields).
#[derive(Default)]
pub(crate) struct ObjectHead<'a> {
    /// `kind`.
    pub kind: Option<Cow<'a, str>>,
    /// `apiVersion`: a stored file is served only under the kind directory it names.
    pub api_version: Option<Cow<'a, str>>,
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
            #[serde(borrow, default, rename = "apiVersion")]
            api_version: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            metadata: Option<ObjectMeta<'a>>,
            #[serde(borrow, default)]
            spec: Option<ObjectSpec<'a>>,
        }
        let Fields {
            kind,
            api_version,
            metadata,
            spec,
        } = from_map(d)?;
        Ok(ObjectHead {
            kind,
            api_version,
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

    /// The head of the object starting at `root` in `unit`, from the spans the decoder
    /// located for [`HEAD_PATHS`] (from index `first` of `found`): the very head
    /// [`ObjectHead::read`] gives, without a second pass over the bytes. None when the spans
    /// cannot be trusted or serde would refuse the object: parse it then.
    pub(crate) fn located(
        unit: &'a [u8],
        found: &Located,
        first: usize,
        root: usize,
    ) -> Option<ObjectHead<'a>> {
        if unit.get(root) != Some(&b'{') {
            return None;
        }
        let span = |i: usize| found.span(first + i).ok();
        let str_at = |i: usize| located_str(unit, span(i)?);
        let metadata = match located_map(unit, span(1)?)? {
            true => Some(ObjectMeta {
                name: str_at(2)?,
                namespace: str_at(3)?,
                resource_version: str_at(4)?,
                continue_token: str_at(5)?,
            }),
            false => None,
        };
        let spec = match located_map(unit, span(6)?)? {
            true => Some(ObjectSpec {
                node_name: str_at(7)?,
            }),
            false => None,
        };
        Some(ObjectHead {
            kind: str_at(0)?,
            api_version: str_at(8)?,
            metadata,
            spec,
        })
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

/// What a head says, owned, to compare heads found two ways.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn head_fields(head: &ObjectHead<'_>) -> [Option<String>; 7] {
    let text = |s: &Option<Cow<'_, str>>| s.as_deref().map(str::to_owned);
    let meta = head.metadata.as_ref();
    [
        text(&head.kind),
        meta.and_then(|m| text(&m.name)),
        meta.and_then(|m| text(&m.namespace)),
        meta.and_then(|m| text(&m.resource_version)),
        meta.and_then(|m| text(&m.continue_token)),
        head.spec.as_ref().and_then(|s| text(&s.node_name)),
        text(&head.api_version),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::decode::{BodyDecoder, BodyShape, Unit};

    type Fields = [Option<String>; 7];

    /// Each list item and its head as located while decoding `body` in chunks of `chunk`
    /// bytes: `Some(fields)` located, `None` left to the parser.
    fn located_items(body: &[u8], chunk: usize) -> Vec<(Vec<u8>, Option<Fields>)> {
        let mut decoder = BodyDecoder::new(BodyShape::List, false, 1 << 20).locating(HEAD_PATHS);
        let mut items = Vec::new();
        let mut sink = |unit: Unit<'_>, found: &Located| {
            if let Unit::ListItem(raw) = unit {
                let head = ObjectHead::located(raw, found, 0, 0);
                items.push((raw.to_vec(), head.as_ref().map(head_fields)));
            }
        };
        for piece in body.chunks(chunk) {
            decoder.feed_located(piece, &mut sink).unwrap();
        }
        decoder.finish_located(&mut sink).unwrap();
        items
    }

    /// The head of each item, where located, must be what serde reads, at every chunking;
    /// says which were located.
    fn check_items(items: &[&str]) -> Vec<bool> {
        let body = format!(r#"{{"kind":"PodList","items":[{}]}}"#, items.join(","));
        let whole = located_items(body.as_bytes(), body.len());
        assert_eq!(whole.len(), items.len());
        for chunk in [1, 2, 3, 7, 16] {
            assert_eq!(
                located_items(body.as_bytes(), chunk),
                whole,
                "chunks of {chunk}"
            );
        }
        whole
            .iter()
            .map(|(raw, located)| {
                let parsed = ObjectHead::read(raw).ok().map(|h| head_fields(&h));
                if located.is_some() {
                    assert_eq!(*located, parsed, "{}", String::from_utf8_lossy(raw));
                }
                located.is_some()
            })
            .collect()
    }

    #[test]
    fn located_heads_are_the_parsed_heads() {
        let located = check_items(&[
            // The head after a long spec, with a `metadata` nested in spec and a `name` label.
            r#"{"spec":{"template":{"metadata":{"name":"inner","resourceVersion":"1"}},"nodeName":"n1"},"metadata":{"labels":{"name":"x"},"name":"a","namespace":"ns","resourceVersion":"7"},"kind":"Pod"}"#,
            // No resourceVersion; no metadata at all; null metadata and kind.
            r#"{"metadata":{"name":"b"},"apiVersion":"apps/v1"}"#,
            r#"{"spec":{}}"#,
            r#"{"metadata":null,"kind":null,"spec":null}"#,
            // Escaped values are decoded.
            r#"{"metadata":{"name":"c\u0064\"e","namespace":"n\\s"}}"#,
            // Whitespace everywhere, numbers and literals before the head.
            " { \"x\" : [1, -2.5e3, true] , \"metadata\" : { \"name\" : \"d\" } } ",
        ]);
        assert!(located.iter().all(|&l| l), "{located:?}");
        // Left to the parser: non-object items, an escaped name that spells `metadata`, a
        // repeated member, a head field that is not a string, metadata that is an array, a
        // non-ASCII name beside the head.
        let located = check_items(&[
            "5",
            r#""pod""#,
            r#"["Pod",{"name":"evil"}]"#,
            r#"{"m\u0065tadata":{"name":"e"}}"#,
            r#"{"metadata":{"name":"f"},"metadata":{"name":"g"}}"#,
            r#"{"metadata":{"name":"h","name":"i"}}"#,
            r#"{"metadata":{"name":7}}"#,
            r#"{"metadata":["j"]}"#,
            r#"{"kind":{},"metadata":{"name":"k"}}"#,
            r#"{"apiVersion":1,"metadata":{"name":"m"}}"#,
            "{\"n\u{e9}\":1,\"metadata\":{\"name\":\"l\"}}",
        ]);
        assert!(located.iter().all(|&l| !l), "{located:?}");
    }

    #[test]
    fn located_event_heads_are_the_parsed_heads() {
        let body = concat!(
            r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"},"spec":{"nodeName":"n"}}}"#,
            "\n",
            r#"{"object":{"metadata":{"name":"b"}},"type":"DELETED"}"#,
            "\n",
        );
        for chunk in [1, 5, body.len()] {
            let mut decoder =
                BodyDecoder::new(BodyShape::WatchStream, false, 1 << 20).locating(EVENT_PATHS);
            let mut heads = Vec::new();
            let mut sink = |unit: Unit<'_>, found: &Located| {
                let Unit::WatchEvent(raw) = unit else {
                    panic!("not an event: {unit:?}");
                };
                let kind = located_str(raw, found.span(0).unwrap()).unwrap();
                let (start, _) = found.span(1).unwrap().unwrap();
                let head = ObjectHead::located(raw, found, 2, start).unwrap();
                heads.push((kind.unwrap().into_owned(), head_fields(&head)));
            };
            for piece in body.as_bytes().chunks(chunk) {
                decoder.feed_located(piece, &mut sink).unwrap();
            }
            decoder.finish_located(&mut sink).unwrap();
            let name = |n: &str| Some(n.to_owned());
            let added = [
                name("Pod"),
                name("a"),
                None,
                name("3"),
                None,
                name("n"),
                name("v1"),
            ];
            let deleted = [None, name("b"), None, None, None, None, None];
            assert_eq!(
                heads,
                [("ADDED".to_owned(), added), ("DELETED".to_owned(), deleted)],
                "chunks of {chunk}"
            );
        }
    }

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
