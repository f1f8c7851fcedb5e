//! One cached object in one allocation: the JSON bytes the cloud sent, behind a small index
//! of what keys, selectors and output need, extracted once when the object arrives.
//!
//! ```text
//! Arc<[u8]>:  header (24 B) | spans (8 B each) | side strings | JSON as sent
//! header:     rv u64 | json start u32 | json len u32 | fields u16 | labels u16 | flags u8 | pad
//! spans:      namespace, name, resourceVersion, the resource's field labels, then per label
//!             (key, value), labels sorted by key
//! ```
//!
//! A span is (start, length) into the same buffer. Strings without JSON escapes (nearly all)
//! point into the JSON itself and cost 8 bytes; a string with escapes, or a field rendered
//! from a number or boolean, is decoded once into the side area. The resourceVersion span
//! always lies in the JSON (a resourceVersion with escapes is refused), so that an event can
//! carry an object with another resourceVersion by splicing, without a copy. `Arc` clones
//! share the bytes between the cache, its history and every watcher.
//!
//! Per object, beyond the JSON: the `Arc` counts (2 words), header 24, 8 per span (3 +
//! fields + 2 per label), the fat pointer where the cache holds it (2 words), and the
//! allocator's header and rounding (about 2 words). An EndpointSlice with two labels: 128
//! bytes on 64-bit (measured by `memory_of_5000_endpointslices`), about 104 on 32-bit.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::io::{self, Write};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::resource::{FieldRef, Resource};
use crate::cache::object::from_map;
use crate::selector::{Selectors, field_text};

/// Size of the fixed header.
const HEADER: usize = 24;
/// Size of one span.
const SPAN: usize = 8;
/// Spans before the field labels: namespace, name, resourceVersion.
const FIXED_SPANS: usize = 3;
/// A span start that means "not a string": a label or field value that equals no text.
const NOT_TEXT: u32 = u32::MAX;
/// Flag: the JSON has `kind`.
const HAS_KIND: u8 = 1;
/// Flag: the JSON has `apiVersion`.
const HAS_API_VERSION: u8 = 2;

/// Why bytes from the cloud cannot be cached as an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ObjectError {
    /// Not a JSON object, or a field of the wrong type.
    Json(String),
    /// `metadata.name` is missing or empty.
    NoName,
    /// `metadata.resourceVersion` is missing, not a decimal number, or written with escapes.
    BadResourceVersion(String),
    /// Larger than the 4 GiB a span can address, or too many labels to count in 16 bits.
    TooLarge,
}

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectError::Json(e) => write!(f, "not an object: {e}"),
            ObjectError::NoName => f.write_str("the object has no metadata.name"),
            ObjectError::BadResourceVersion(rv) => {
                write!(
                    f,
                    "metadata.resourceVersion {rv:?} is not a plain decimal number"
                )
            }
            ObjectError::TooLarge => f.write_str("the object is too large to index"),
        }
    }
}

impl std::error::Error for ObjectError {}

/// One object of the cache, immutable and shared: cloning is a reference count.
#[derive(Clone)]
pub(crate) struct Object(Arc<[u8]>);

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Object({}/{}@{})",
            self.namespace(),
            self.name(),
            self.rv()
        )
    }
}

/// A JSON string as serde_json hands it out: borrowed from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// A label's value: a string, or anything else (which the apiserver never sends, and which
/// equals no value).
struct LabelValue<'a>(Option<Str<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for LabelValue<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = LabelValue<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a label value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(LabelValue(Some(Str(Cow::Borrowed(v)))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(LabelValue(Some(Str(Cow::Owned(v.to_owned())))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(LabelValue(Some(Str(Cow::Owned(v)))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(LabelValue(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(LabelValue(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(LabelValue(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(LabelValue(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LabelValue(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LabelValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LabelValue(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `metadata.labels` in the order sent (a later duplicate key wins, as in Go).
struct Labels<'a>(Vec<(Str<'a>, LabelValue<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Labels<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Labels(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut labels = Vec::new();
                while let Some(entry) = map.next_entry::<Str<'a>, LabelValue<'a>>()? {
                    labels.push(entry);
                }
                Ok(Labels(labels))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// What the index needs of `metadata`.
struct Meta<'a> {
    name: Option<Str<'a>>,
    namespace: Option<Str<'a>>,
    resource_version: Option<Str<'a>>,
    labels: Option<Labels<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Meta<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, default)]
            name: Option<Str<'a>>,
            #[serde(borrow, default)]
            namespace: Option<Str<'a>>,
            #[serde(borrow, default, rename = "resourceVersion")]
            resource_version: Option<Str<'a>>,
            #[serde(borrow, default)]
            labels: Option<Labels<'a>>,
        }
        let f: Fields<'a> = from_map(d)?;
        Ok(Meta {
            name: f.name,
            namespace: f.namespace,
            resource_version: f.resource_version,
            labels: f.labels,
        })
    }
}

/// What the index needs of the object's top level.
struct Head<'a> {
    has_kind: bool,
    has_api_version: bool,
    metadata: Option<Meta<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Head<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(default)]
            kind: Option<IgnoredAny>,
            #[serde(default, rename = "apiVersion")]
            api_version: Option<IgnoredAny>,
            #[serde(borrow, default)]
            metadata: Option<Meta<'a>>,
        }
        let f: Fields<'a> = from_map(d)?;
        Ok(Head {
            has_kind: f.kind.is_some(),
            has_api_version: f.api_version.is_some(),
            metadata: f.metadata,
        })
    }
}

/// Builds the buffer of one object: spans are collected against the JSON's offsets and
/// the side area, then laid out.
struct Builder<'j> {
    json: &'j [u8],
    side: Vec<u8>,
    /// (start, len) with start relative to the JSON, or `SIDE | offset` into `side`, or
    /// [`NOT_TEXT`].
    spans: Vec<(u32, u32)>,
}

/// Marks a builder span start as an offset into the side area.
const SIDE: u32 = 1 << 31;

impl<'j> Builder<'j> {
    /// Adds a string: by position when it lies in the JSON, else copied to the side area.
    fn push(&mut self, s: Option<&str>) -> Result<(), ObjectError> {
        let Some(s) = s else {
            self.spans.push((NOT_TEXT, 0));
            return Ok(());
        };
        let len = u32::try_from(s.len()).map_err(|_| ObjectError::TooLarge)?;
        match self.offset_in_json(s) {
            Some(at) => self.spans.push((at, len)),
            None => {
                let at = u32::try_from(self.side.len()).map_err(|_| ObjectError::TooLarge)?;
                if at >= SIDE {
                    return Err(ObjectError::TooLarge);
                }
                self.side.extend_from_slice(s.as_bytes());
                self.spans.push((SIDE | at, len));
            }
        }
        Ok(())
    }

    /// Where `s` starts in the JSON, when it is a slice of it.
    fn offset_in_json(&self, s: &str) -> Option<u32> {
        let base = self.json.as_ptr() as usize;
        let at = (s.as_ptr() as usize).checked_sub(base)?;
        let end = at.checked_add(s.len())?;
        if end > self.json.len() {
            return None;
        }
        let at = u32::try_from(at).ok()?;
        (at < SIDE).then_some(at)
    }

    /// Adds a string that must come from the JSON (Cow::Borrowed) or nothing.
    fn push_str(&mut self, s: &Option<Str<'_>>) -> Result<(), ObjectError> {
        self.push(Some(s.as_ref().map_or("", |s| s.0.as_ref())))
    }
}

impl Object {
    /// Indexes `json`, one object of `resource` as the cloud sent it (a list item or a
    /// watch event's object). Surrounding JSON whitespace is dropped.
    pub(crate) fn parse(json: &[u8], resource: &Resource) -> Result<Object, ObjectError> {
        let json = trim_json_space(json);
        let head: Head<'_> =
            serde_json::from_slice(json).map_err(|e| ObjectError::Json(e.to_string()))?;
        let meta = head.metadata.ok_or(ObjectError::NoName)?;
        if meta.name.as_ref().is_none_or(|n| n.0.is_empty()) {
            return Err(ObjectError::NoName);
        }
        let rv_text = meta.resource_version.as_ref().map_or("", |s| s.0.as_ref());
        let rv =
            parse_rv(rv_text).ok_or_else(|| ObjectError::BadResourceVersion(rv_text.to_owned()))?;
        let mut b = Builder {
            json,
            side: Vec::new(),
            spans: Vec::with_capacity(FIXED_SPANS + resource.extra_fields().len() + 4),
        };
        b.push_str(&meta.namespace)?;
        b.push_str(&meta.name)?;
        b.push_str(&meta.resource_version)?;
        // The resourceVersion must lie in the JSON so that events can splice another one in.
        // Index 2 exists: three spans were just pushed.
        if b.spans[2].0 & SIDE != 0 {
            return Err(ObjectError::BadResourceVersion(rv_text.to_owned()));
        }
        if !resource.extra_fields().is_empty() {
            // Only resources with field labels of their own (Services, few and small) pay
            // for a whole parse, once, here.
            let value: serde_json::Value =
                serde_json::from_slice(json).map_err(|e| ObjectError::Json(e.to_string()))?;
            for path in resource.extra_fields() {
                let text = field_text(&value, path);
                b.push(text.as_deref())?;
            }
        }
        let mut labels = meta.labels.map(|l| l.0).unwrap_or_default();
        // Sorted by key, the last of equal keys kept (Go's decoder lets a later one win).
        labels.reverse();
        labels.sort_by(|a, b| a.0.0.as_bytes().cmp(b.0.0.as_bytes()));
        labels.dedup_by(|later, earlier| later.0.0 == earlier.0.0);
        let n_labels = u16::try_from(labels.len()).map_err(|_| ObjectError::TooLarge)?;
        for (key, value) in &labels {
            b.push(Some(&key.0))?;
            b.push(value.0.as_ref().map(|v| v.0.as_ref()))?;
        }
        let n_fields =
            u16::try_from(resource.extra_fields().len()).map_err(|_| ObjectError::TooLarge)?;
        let flags = (if head.has_kind { HAS_KIND } else { 0 })
            | (if head.has_api_version {
                HAS_API_VERSION
            } else {
                0
            });
        Self::lay_out(&b, rv, n_fields, n_labels, flags)
    }

    /// Writes the header, spans, side area and JSON into one buffer.
    fn lay_out(
        b: &Builder<'_>,
        rv: u64,
        n_fields: u16,
        n_labels: u16,
        flags: u8,
    ) -> Result<Object, ObjectError> {
        let side_start = HEADER + SPAN * b.spans.len();
        let json_start = side_start + b.side.len();
        let total = json_start + b.json.len();
        let json_start32 = u32::try_from(json_start).map_err(|_| ObjectError::TooLarge)?;
        let json_len32 = u32::try_from(b.json.len()).map_err(|_| ObjectError::TooLarge)?;
        u32::try_from(total).map_err(|_| ObjectError::TooLarge)?;
        let mut buf = Vec::with_capacity(total);
        buf.extend_from_slice(&rv.to_le_bytes());
        buf.extend_from_slice(&json_start32.to_le_bytes());
        buf.extend_from_slice(&json_len32.to_le_bytes());
        buf.extend_from_slice(&n_fields.to_le_bytes());
        buf.extend_from_slice(&n_labels.to_le_bytes());
        buf.extend_from_slice(&[flags, 0, 0, 0]);
        for &(start, len) in &b.spans {
            // Every offset was checked to fit: the whole buffer fits in u32.
            let absolute = if start == NOT_TEXT {
                NOT_TEXT
            } else if start & SIDE != 0 {
                (side_start as u32) + (start & !SIDE)
            } else {
                json_start32 + start
            };
            buf.extend_from_slice(&absolute.to_le_bytes());
            buf.extend_from_slice(&len.to_le_bytes());
        }
        buf.extend_from_slice(&b.side);
        buf.extend_from_slice(b.json);
        Ok(Object(Arc::from(buf.into_boxed_slice())))
    }

    fn u32_at(&self, at: usize) -> u32 {
        self.0
            .get(at..at + 4)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map_or(0, u32::from_le_bytes)
    }

    fn u16_at(&self, at: usize) -> u16 {
        self.0
            .get(at..at + 2)
            .and_then(|s| <[u8; 2]>::try_from(s).ok())
            .map_or(0, u16::from_le_bytes)
    }

    /// The object's resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.0
            .get(..8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes)
    }

    fn json_range(&self) -> (usize, usize) {
        let start = self.u32_at(8) as usize;
        (start, start + self.u32_at(12) as usize)
    }

    /// The JSON as the cloud sent it.
    pub(crate) fn json(&self) -> &[u8] {
        let (start, end) = self.json_range();
        self.0.get(start..end).unwrap_or_default()
    }

    fn n_fields(&self) -> usize {
        usize::from(self.u16_at(16))
    }

    fn n_labels(&self) -> usize {
        usize::from(self.u16_at(18))
    }

    fn flags(&self) -> u8 {
        self.0.get(20).copied().unwrap_or(0)
    }

    /// Span `i` as (absolute start, len); `None` for a value that is not text.
    fn span(&self, i: usize) -> Option<(usize, usize)> {
        let at = HEADER + SPAN * i;
        let start = self.u32_at(at);
        (start != NOT_TEXT).then(|| (start as usize, self.u32_at(at + 4) as usize))
    }

    /// The text of span `i`; spans were cut from valid UTF-8 strings.
    fn text(&self, i: usize) -> Option<&str> {
        let (start, len) = self.span(i)?;
        let bytes = self.0.get(start..start + len)?;
        std::str::from_utf8(bytes).ok()
    }

    /// `metadata.namespace`, "" when cluster-scoped.
    pub(crate) fn namespace(&self) -> &str {
        self.text(0).unwrap_or("")
    }

    /// `metadata.name`.
    pub(crate) fn name(&self) -> &str {
        self.text(1).unwrap_or("")
    }

    /// The object's key as the apiserver orders keys: `namespace/name`, or `name` when the
    /// object has no namespace.
    pub(crate) fn key(&self) -> String {
        let (ns, name) = (self.namespace(), self.name());
        if ns.is_empty() {
            name.to_owned()
        } else {
            format!("{ns}/{name}")
        }
    }

    /// Orders this object's key against `key` (a key as [`Object::key`] makes it) without
    /// building its own.
    pub(crate) fn cmp_key(&self, key: &[u8]) -> Ordering {
        let (ns, name) = (self.namespace().as_bytes(), self.name().as_bytes());
        let slash: &[u8] = if ns.is_empty() { b"" } else { b"/" };
        ns.iter().chain(slash).chain(name).cmp(key.iter())
    }

    /// Orders two objects by key.
    pub(crate) fn cmp_keys(&self, other: &Object) -> Ordering {
        let (ns, name) = (self.namespace().as_bytes(), self.name().as_bytes());
        let slash: &[u8] = if ns.is_empty() { b"" } else { b"/" };
        let (ns2, name2) = (other.namespace().as_bytes(), other.name().as_bytes());
        let slash2: &[u8] = if ns2.is_empty() { b"" } else { b"/" };
        ns.iter()
            .chain(slash)
            .chain(name)
            .cmp(ns2.iter().chain(slash2).chain(name2))
    }

    /// The label `key`: `None` when absent, `Some(None)` when its value is not a string.
    fn label(&self, key: &str) -> Option<Option<&str>> {
        let first = FIXED_SPANS + self.n_fields();
        let n = self.n_labels();
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let k = self.text(first + 2 * mid).unwrap_or("");
            match k.as_bytes().cmp(key.as_bytes()) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(self.text(first + 2 * mid + 1)),
            }
        }
        None
    }

    /// The field `field` as field selectors compare it; `None` for a structure.
    fn field(&self, field: FieldRef) -> Option<&str> {
        match field {
            FieldRef::Name => Some(self.name()),
            FieldRef::Namespace => Some(self.namespace()),
            FieldRef::Extra(i) if i < self.n_fields() => self.text(FIXED_SPANS + i),
            FieldRef::Extra(_) => None,
        }
    }

    /// Whether the object satisfies `selectors`, whose field labels `resource` accepted
    /// (a label it does not know equals no value).
    pub(crate) fn matches(&self, selectors: &Selectors, resource: &Resource) -> bool {
        selectors.label.matches_with(|key| self.label(key))
            && selectors
                .field
                .matches_with(|path| resource.field(path).and_then(|f| self.field(f)))
    }

    /// Bytes this object holds on the heap (its one allocation, as the allocator is asked
    /// for it: the `Arc` counts and the buffer).
    pub(crate) fn heap_bytes(&self) -> usize {
        2 * std::mem::size_of::<usize>() + self.0.len()
    }

    /// Whether two handles share one allocation.
    #[cfg(test)]
    pub(crate) fn same(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The allocation's address, to count shared objects once.
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }

    /// Writes the object as a watch event carries it: with `kind` and `apiVersion` (list
    /// items come without them, as the apiserver sends them) and, when `rv` is given, with
    /// that resourceVersion in place of its own (a DELETED event carries the last state
    /// with the deletion's resourceVersion). The bytes are written in place, never copied.
    pub(crate) fn write_typed(
        &self,
        w: &mut dyn Write,
        resource: &Resource,
        rv: Option<u64>,
    ) -> io::Result<()> {
        let json = self.json();
        let (json_start, _) = self.json_range();
        let flags = self.flags();
        // The JSON starts with '{' and has at least metadata.name, so a member may be
        // inserted right after the brace, followed by a comma.
        let mut from = 0;
        if flags & (HAS_KIND | HAS_API_VERSION) != HAS_KIND | HAS_API_VERSION {
            w.write_all(b"{")?;
            if flags & HAS_KIND == 0 {
                w.write_all(b"\"kind\":")?;
                write_json_str(w, &resource.kind)?;
                w.write_all(b",")?;
            }
            if flags & HAS_API_VERSION == 0 {
                w.write_all(b"\"apiVersion\":")?;
                write_json_str(w, &resource.gvr.api_version())?;
                w.write_all(b",")?;
            }
            from = 1;
        }
        match (rv, self.span(2)) {
            (Some(rv), Some((start, len))) if start >= json_start => {
                let (start, end) = (start - json_start, start - json_start + len);
                w.write_all(json.get(from..start).unwrap_or_default())?;
                write!(w, "{rv}")?;
                w.write_all(json.get(end..).unwrap_or_default())
            }
            _ => w.write_all(json.get(from..).unwrap_or_default()),
        }
    }
}

/// A resourceVersion as the cache orders them: a decimal u64 (etcd revisions), as the
/// apiserver's own watch cache reads them.
pub(crate) fn parse_rv(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `bytes` without leading and trailing JSON whitespace.
fn trim_json_space(bytes: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |e| e + 1);
    bytes.get(start..end).unwrap_or_default()
}

/// Writes `s` as a JSON string literal.
pub(crate) fn write_json_str(w: &mut dyn Write, s: &str) -> io::Result<()> {
    serde_json::to_writer(w, s).map_err(io::Error::other)
}
