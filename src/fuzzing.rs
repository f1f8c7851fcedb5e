//! Fuzz entry points: the bodies of the `cargo fuzz` targets in `fuzz/`, kept here so that
//! `tests/fuzz_corpus.rs` replays the committed corpus through exactly the same code.
//!
//! Each function takes arbitrary bytes and must not panic on any of them. Beyond "no panic",
//! each asserts only what the code under test promises in its docs, so a panic here is a bug
//! in the library (or in a promise), never an input the library may refuse.

use std::fmt;
use std::io::{BufReader, Write};
use std::sync::OnceLock;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::cache::decode::{BodyDecoder, BodyShape, DecodeError, Located, MAX_DEPTH, Unit};
use crate::cache::object::{EVENT_PATHS, HEAD_PATHS, ObjectHead, head_fields, located_str};
use crate::cache::target::CacheTarget;
use crate::http1::{self, BodyState, RequestHead};
use crate::mode::WorkingMode;
use crate::names;
use crate::names::is_safe_segment;
use crate::request::{self, ApiRequest, Target};
use crate::route;
use crate::selector::{FieldSelector, LabelSelector, SelectorError, Selectors};

/// Largest request body read after a head; the fuzzer's inputs are smaller anyway.
const MAX_BODY: usize = 1 << 16;

/// Bytes on the wire to request info: `read_head`, the body framing, `classify` and `route`.
pub fn request_head(data: &[u8]) {
    let mut whole = data;
    let head = http1::read_head(&mut whole);
    // The same bytes through a tiny buffer: a line split across reads must read the same.
    let mut split = BufReader::with_capacity(1 + data.len() % 13, data);
    let head_split = http1::read_head(&mut split);
    match (&head, &head_split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the head depends on read boundaries"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("read_head depends on read boundaries: {head:?} vs {head_split:?}"),
    }
    let Ok(head) = head else { return };

    if let Ok(framing) = head.framing() {
        let body = http1::read_body(&mut BodyState::new(framing), &mut whole, MAX_BODY);
        let body_split = http1::read_body(&mut BodyState::new(framing), &mut split, MAX_BODY);
        assert_eq!(
            body.as_ref().ok(),
            body_split.as_ref().ok(),
            "the body depends on read boundaries: {body:?} vs {body_split:?}"
        );
    }
    let _ = (head.keep_alive(), head.expects_continue());

    if let Ok(req) = request::classify(&head.method, &head.target, &head.headers) {
        check_request(&head, &req);
    }
}

/// What `request` promises of a classified request: every segment that can reach a cache
/// path is validated, and the route derives only safe file names from it.
fn check_request(head: &RequestHead, req: &ApiRequest) {
    match &req.target {
        Target::Resource(r) => {
            assert!(
                r.gvr.group.is_empty() || names::is_dns_subdomain(&r.gvr.group),
                "{r:?}"
            );
            for segment in [&r.gvr.version, &r.gvr.resource] {
                assert!(is_safe_segment(segment), "{r:?} from {:?}", head.target);
            }
            if let Some(ns) = &r.namespace {
                assert!(names::is_dns_label(ns), "{r:?}");
            }
            // The store's own rule: no '/', NUL or control character, no leading dot.
            for segment in [&r.name, &r.subresource].into_iter().flatten() {
                assert!(is_safe_segment(segment), "{r:?} from {:?}", head.target);
            }
        }
        Target::NonResource(path) => {
            assert!(
                !path.contains('\0') && !path.split('/').any(|s| s == ".."),
                "hostile non-resource path {path:?} from {:?}",
                head.target
            );
        }
    }
    let Ok(route) = route::route(req, true, WorkingMode::Edge) else {
        return;
    };
    match route.cache.as_deref() {
        Ok(CacheTarget::NonResource { file }) => assert!(is_safe_segment(file), "{file:?}"),
        Ok(target) => {
            let collection = target
                .collection()
                .expect("a resource target has a collection");
            assert_eq!(collection.unsafe_field(), None, "{:?}", head.target);
        }
        Err(_) => {}
    }
}

/// Label and field selector text: parse both (label text, then a 0xFF byte, then field text)
/// and match what parses against a few fixed objects.
pub fn selectors(data: &[u8]) {
    // 0xFF never occurs in UTF-8, so it cannot be part of either selector.
    let (label, field) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    // Selectors reach the parser percent-decoded, as UTF-8; keep the rest of a bad input.
    let label = String::from_utf8_lossy(label);
    let field = field.map(String::from_utf8_lossy);

    let parsed_label = LabelSelector::parse(&label);
    let parsed_field = field.as_deref().map(FieldSelector::parse);
    for err in [
        parsed_label.as_ref().err(),
        parsed_field.as_ref().and_then(|f| f.as_ref().err()),
    ]
    .into_iter()
    .flatten()
    {
        check_selector_error(err, &label, field.as_deref().unwrap_or(""));
    }
    // Whitespace between label tokens is insignificant, and '(', ')' and ',' always end a
    // token: spacing them out changes neither the verdict nor the selector.
    let spaced = label
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace(',', " , ");
    match (&parsed_label, LabelSelector::parse(&spaced)) {
        (Ok(a), Ok(b)) => assert_eq!(*a, b, "spacing changed {label:?}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("spacing changed {label:?}: {a:?} vs {b:?}"),
    }
    let Ok(selectors) = Selectors::parse(Some(&label), field.as_deref()) else {
        assert!(parsed_label.is_err() || parsed_field.is_some_and(|f| f.is_err()));
        return;
    };
    assert_eq!(Ok(&selectors.label), parsed_label.as_ref());
    for object in sample_objects() {
        let both = selectors.matches(object);
        assert_eq!(
            both,
            selectors.label.matches(object) && selectors.field.matches(object)
        );
        if selectors.is_everything() {
            assert!(both, "an empty selector refused {object}");
        }
    }
}

/// An error quotes the offending term as it appears in the selector text.
fn check_selector_error(err: &SelectorError, label: &str, field: &str) {
    let message = err.to_string();
    if let SelectorError::Invalid { term, .. } = err {
        assert!(
            label.contains(term.as_str()) || field.contains(term.as_str()),
            "{message}: the term is not in the text"
        );
    }
}

/// Objects to match selectors against: a pod with labels and fields of every JSON type, an
/// event (whose `source` field label is computed), and an object with nothing in it.
fn sample_objects() -> &'static [Value] {
    static OBJECTS: OnceLock<Vec<Value>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        vec![
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "web-0",
                    "namespace": "default",
                    "labels": {
                        "app": "x",
                        "tier": "a",
                        "example.com/role": "primary",
                        "empty": "",
                        "weight": "10",
                        "neg": "-5",
                        "odd": 5
                    }
                },
                "spec": {
                    "nodeName": "edge-1",
                    "hostNetwork": true,
                    "priority": 3,
                    "ratio": 1.5,
                    "schedulerName": null
                },
                "status": { "phase": "Running", "succeeded": 2 }
            }),
            json!({
                "kind": "Event",
                "metadata": { "name": "e", "namespace": "kube-system", "labels": null },
                "source": { "component": "" },
                "reportingComponent": "kubelet",
                "involvedObject": { "kind": "Pod", "name": "web-0" },
                "type": "Warning"
            }),
            json!({}),
        ]
    })
}

/// A response body: byte 0 picks the shape (bits 0-1), raw gzip (bit 2), a small unit limit
/// (bit 3) and a gzip round trip of a plain body (bit 4); byte 1 seeds the chunk sizes; the
/// rest is the body.
pub fn body_decoder(data: &[u8]) {
    let [mode, seed, body @ ..] = data else {
        return;
    };
    let shape = match mode & 3 {
        0 => BodyShape::Object,
        1 => BodyShape::List,
        _ => BodyShape::WatchStream,
    };
    let gzip = mode & 4 != 0;
    let max_unit = if mode & 8 != 0 { 64 } else { 1 << 20 };

    let whole = decode(shape, gzip, max_unit, false, [body]);
    // Chunked, a list also halts after its `metadata` and resumes (the filter stage's check
    // of its memos): neither may change what is found.
    let chunked = decode(shape, gzip, max_unit, true, chunks(body, *seed));
    for piece in &whole.units {
        check_unit(piece, max_unit);
    }
    if gzip {
        // How far a corrupt stream inflates before the error depends on the chunks, so only
        // the verdict and a successful decoding must not.
        assert_eq!(
            whole.result.is_ok(),
            chunked.result.is_ok(),
            "{whole:?} vs {chunked:?}"
        );
        if whole.result.is_ok() {
            assert_eq!(whole, chunked);
        }
        return;
    }
    // Plain JSON: units and errors (offsets included) must not depend on the chunks at all.
    assert_eq!(whole, chunked, "decoding depends on the chunks");
    // Fed one byte at a time, the decoder never takes a run of string, number, literal or
    // space bytes at once (issue 34): the runs must not change what it finds either.
    if body.len() <= 4096 {
        let singles = decode(shape, false, max_unit, false, body.chunks(1));
        assert_eq!(whole, singles, "decoding depends on the runs taken at once");
    }
    check_against_serde(shape, max_unit, body, &whole);
    // The same body compressed decodes to the same units and verdict. Optional: compressing
    // costs more than the rest, and most inputs need not pay for it.
    if mode & 16 == 0 {
        return;
    }
    let compressed = compress(body);
    let inflated = decode(shape, true, max_unit, true, chunks(&compressed, *seed));
    assert_eq!(whole, inflated, "gzip changes the decoding");
}

/// A unit, owned, to compare decodings.
#[derive(Debug, PartialEq, Eq)]
enum Piece {
    Object(Vec<u8>),
    Member(String, Vec<u8>),
    Item(Vec<u8>),
    Event(Vec<u8>),
}

impl Piece {
    fn json(&self) -> &[u8] {
        match self {
            Piece::Object(b) | Piece::Member(_, b) | Piece::Item(b) | Piece::Event(b) => b,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    units: Vec<Piece>,
    result: Result<(), DecodeError>,
}

fn decode<'a>(
    shape: BodyShape,
    gzip: bool,
    max_unit: usize,
    halt: bool,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Decoded {
    let mut units = Vec::new();
    let paths = match shape {
        BodyShape::WatchStream => EVENT_PATHS,
        BodyShape::Object | BodyShape::List => HEAD_PATHS,
    };
    let mut decoder = BodyDecoder::new(shape, gzip, max_unit).locating(paths);
    if halt {
        decoder = decoder.halt_after_member("metadata");
    }
    let mut sink = |unit: Unit<'_>, found: &Located| {
        check_located(unit, found);
        units.push(match unit {
            Unit::Object(b) => Piece::Object(b.to_vec()),
            Unit::ListMember { key, value } => Piece::Member(key.to_owned(), value.to_vec()),
            Unit::ListItem(b) => Piece::Item(b.to_vec()),
            Unit::WatchEvent(b) => Piece::Event(b.to_vec()),
        })
    };
    let mut result = Ok(());
    for chunk in chunks {
        result = decoder.feed_located(chunk, &mut sink);
        if result.is_ok() && decoder.halted() {
            result = decoder.resume(&mut sink);
        }
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = decoder.finish_located(&mut sink);
    }
    Decoded { units, result }
}

/// `data` cut into chunks of 1 to `span` bytes, `span` and the sizes drawn from `seed`.
fn chunks(data: &[u8], seed: u8) -> impl Iterator<Item = &[u8]> {
    let span = [1usize, 2, 3, 7, 16, 61, 256, 4096][usize::from(seed & 7)];
    // xorshift32 needs a non-zero state.
    let mut state = u32::from(seed) | 0x100;
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let (chunk, tail) = rest.split_at((1 + state as usize % span).min(rest.len()));
        rest = tail;
        Some(chunk)
    })
}

fn compress(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// JSON syntax as serde_json checks it without building values: no UTF-8 check inside
/// strings, no depth limit, numbers of any size — the module's own promise for units.
fn is_json(text: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(text).is_ok()
}

fn trim_json_space(mut text: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\n' | b'\r', rest @ ..] = text {
        text = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\n' | b'\r'] = text {
        text = rest;
    }
    text
}

/// Every unit is valid JSON within the limit; objects and events are JSON objects.
fn check_unit(piece: &Piece, max_unit: usize) {
    let text = piece.json();
    assert!(is_json(text), "unit is not JSON: {piece:?}");
    assert!(
        text.len() <= max_unit,
        "unit over the {max_unit} byte limit"
    );
    if let Piece::Member(key, _) = piece {
        assert!(key.len() <= max_unit, "member name over the limit");
    }
    if matches!(piece, Piece::Object(_) | Piece::Event(_)) {
        assert!(text.first() == Some(&b'{'), "not an object: {piece:?}");
    }
}

/// What the decoder located in an object, list item or watch event must be what serde reads
/// there: the cache writer stores by it without parsing the unit again.
fn check_located(unit: Unit<'_>, found: &Located) {
    let (raw, root, first, object) = match unit {
        Unit::Object(raw) | Unit::ListItem(raw) => (raw, 0, 0, raw),
        Unit::WatchEvent(raw) => {
            let Ok(Some(kind)) = found.span(0).map(|span| located_str(raw, span).flatten()) else {
                return;
            };
            let Ok(Some((start, stop))) = found.span(1) else {
                return;
            };
            // serde_json::Value refuses what a head skips (strings not UTF-8, 1e999).
            if let Ok(event) = serde_json::from_slice::<Value>(raw) {
                assert_eq!(event["type"].as_str(), Some(kind.as_ref()), "event type");
                let object = serde_json::from_slice::<Value>(&raw[start..stop]).ok();
                assert_eq!(Some(&event["object"]), object.as_ref(), "event object");
            }
            (raw, start, 2, &raw[start..stop])
        }
        Unit::ListMember { .. } => return,
    };
    if let Some(head) = ObjectHead::located(raw, found, first, root) {
        let parsed = ObjectHead::read(object)
            .map(|h| head_fields(&h))
            .map_err(|e| e.to_string());
        assert_eq!(Ok(head_fields(&head)), parsed, "located head");
    }
}

/// The decoder validates as it cuts: on a body that serde_json reads, its units must be
/// exactly the values serde_json finds there, and a body serde_json refuses must fail.
fn check_against_serde(shape: BodyShape, max_unit: usize, body: &[u8], decoded: &Decoded) {
    let expected = match shape {
        BodyShape::Object => Some(trim_json_space(body))
            .filter(|doc| doc.first() == Some(&b'{') && is_json(doc))
            .map(|doc| vec![Piece::Object(doc.to_vec())]),
        BodyShape::List => list_units(body),
        BodyShape::WatchStream => watch_units(body),
    };
    match (&decoded.result, expected) {
        (Ok(()), Some(units)) => assert_eq!(decoded.units, units, "units differ from serde_json's"),
        (Ok(()), None) => {
            // list_units also gives up on strings that are not UTF-8, which units may hold.
            let doc = trim_json_space(body);
            assert!(
                shape == BodyShape::List && doc.first() == Some(&b'{') && is_json(doc),
                "accepted a body serde_json refuses"
            );
        }
        // Valid JSON of the right shape is refused only for a unit's size or for its depth.
        (Err(err), Some(units)) => match err {
            DecodeError::UnitTooLarge { .. } => assert!(
                units.iter().any(|u| u.json().len() > max_unit)
                    || (shape == BodyShape::List && body.len() > max_unit),
                "refused for size: {err}"
            ),
            DecodeError::Syntax { what, .. } if what.starts_with("nested deeper") => {
                assert!(nesting(body) > MAX_DEPTH, "refused for depth: {err}")
            }
            _ => panic!("refused a body serde_json reads: {err}"),
        },
        (Err(_), None) => {}
    }
}

/// A list body's units as serde_json reads it: its top-level members in order (names
/// decoded, values raw), `items` cut into its elements. None when serde_json refuses the
/// body, when `items` is neither an array nor null, or when a string is not UTF-8.
fn list_units(body: &[u8]) -> Option<Vec<Piece>> {
    struct Members(Vec<(String, Box<RawValue>)>);
    impl<'de> Deserialize<'de> for Members {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct InOrder;
            impl<'de> Visitor<'de> for InOrder {
                type Value = Members;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                    let mut members = Vec::new();
                    while let Some(member) = map.next_entry()? {
                        members.push(member);
                    }
                    Ok(Members(members))
                }
            }
            d.deserialize_map(InOrder)
        }
    }

    let Members(members) = serde_json::from_slice(body).ok()?;
    let mut units = Vec::new();
    for (name, value) in members {
        let raw = value.get();
        if name != "items" {
            units.push(Piece::Member(name, raw.as_bytes().to_vec()));
        } else if raw.starts_with('[') {
            let items: Vec<Box<RawValue>> = serde_json::from_str(raw).ok()?;
            units.extend(
                items
                    .iter()
                    .map(|i| Piece::Item(i.get().as_bytes().to_vec())),
            );
        } else if raw != "null" {
            return None;
        }
    }
    Some(units)
}

/// A watch stream's events as serde_json reads them: each top-level value, which must be an
/// object. None when serde_json refuses the stream or a value is not an object.
fn watch_units(body: &[u8]) -> Option<Vec<Piece>> {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<IgnoredAny>();
    let mut units = Vec::new();
    let mut start = 0;
    while let Some(value) = values.next() {
        value.ok()?;
        let event = trim_json_space(&body[start..values.byte_offset()]);
        if event.first() != Some(&b'{') {
            return None;
        }
        units.push(Piece::Event(event.to_vec()));
        start = values.byte_offset();
    }
    Some(units)
}

/// Deepest bracket nesting outside strings (for valid JSON only).
fn nesting(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in json {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// An archive as `tinyhub cache import` reads it. Byte 0, bit 0 set: the rest is the gzip
/// stream as given; clear: the rest is a tar, gzip'd here first, so the fuzzer reaches the tar
/// reader. An archive read to its end has only paths the cache could hold and files within
/// the bound, its counts are its manifest's, and written again it reads back the same.
pub fn archive(data: &[u8]) {
    use crate::cache::store::archive::{ArchiveReader, ArchiveWriter, Entry};
    /// A small bound: the fuzzer's inputs are small, and the check is the same.
    const MAX_FILE: u64 = 1 << 16;

    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let zipped;
    let input = if flags & 1 == 1 {
        rest
    } else {
        let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        out.write_all(rest).expect("gzip into memory");
        zipped = out.finish().expect("gzip into memory");
        &zipped[..]
    };
    let read = |input: &[u8]| {
        let mut reader = ArchiveReader::open(input, MAX_FILE)?;
        let mut entries = Vec::new();
        while let Some(entry) = reader.next_entry()? {
            entries.push(entry);
        }
        Ok::<_, crate::cache::store::archive::ArchiveError>((reader.manifest().clone(), entries))
    };
    let Ok((manifest, entries)) = read(input) else {
        return;
    };
    let (mut files, mut bytes) = (0u64, 0u64);
    for entry in &entries {
        let (Entry::Dir(path) | Entry::File(path, _)) = entry;
        assert!(path.is_valid(), "{path}");
        if let Entry::File(_, body) = entry {
            assert!(body.len() as u64 <= MAX_FILE);
            files += 1;
            bytes += body.len() as u64;
        }
    }
    assert_eq!((files, bytes), (manifest.files, manifest.bytes));

    let mut writer = ArchiveWriter::new(Vec::new(), &manifest).expect("write into memory");
    for entry in &entries {
        match entry {
            Entry::Dir(path) => writer.dir(path),
            Entry::File(path, body) => writer.file(path, body),
        }
        .expect("write into memory");
    }
    let again = writer.finish().expect("write into memory");
    match read(&again) {
        Ok((_, reread)) => assert_eq!(reread, entries, "written again, read back otherwise"),
        Err(e) => panic!("written again, refused: {e}"),
    }
}
