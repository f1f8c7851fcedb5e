//! Turns stored objects into wire bytes: content negotiation (JSON, `as=Table`,
//! `as=PartialObjectMetadata[List]`, 406), `…List` documents written item by item,
//! `meta.k8s.io/v1` Tables with Name and Age columns, metadata-only objects and lists, watch
//! event lines, and opaque continue tokens.
//!
//! It writes into any `io::Write`; framing (chunks, gzip, Content-Length) is `respond.rs`'s.

use std::io::{self, Write};
use std::sync::Arc;

use serde_json::{Value, json};

use super::super::util::{base64_decode, base64_encode, human_age, parse_rfc3339, unix_now};
use super::kinds::Kind;
use super::status::ApiError;
use super::store::{Event, EventType, Obj};

/// What the client accepts, as far as this server distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Plain JSON objects.
    Json,
    /// A `meta.k8s.io` Table of the given version (`v1` or `v1beta1`).
    Table(&'static str),
    /// `meta.k8s.io/v1` metadata only: `PartialObjectMetadata` objects (gets, watch events) in
    /// a `PartialObjectMetadataList` (lists), as client-go's metadata client reads them.
    /// `list` is the form asked for; the stand-in answers the form of the verb whichever it is
    /// (the apiserver answers 406 to the other).
    Metadata {
        /// `as=PartialObjectMetadataList` was asked for.
        list: bool,
    },
}

/// The `includeObject` option of Tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No `rows[].object`.
    None,
    /// `rows[].object` is a PartialObjectMetadata (the default).
    Metadata,
    /// `rows[].object` is the full object.
    Object,
}

impl Include {
    /// From the `includeObject` query parameter.
    pub fn parse(v: Option<&str>) -> Include {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// Picks the answer shape from an Accept header, in the header's order; 406 when nothing
/// offered is JSON or a JSON Table (for example protobuf only).
pub fn negotiate(accept: &str) -> Result<Shape, ApiError> {
    if accept.trim().is_empty() {
        return Ok(Shape::Json);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        let (mut as_, mut g, mut v) = ("", "", "");
        for p in parts {
            match p.split_once('=') {
                Some(("as", x)) => as_ = x,
                Some(("g", x)) => g = x,
                Some(("v", x)) => v = x,
                _ => {}
            }
        }
        match (as_, g, v) {
            ("", _, _) => return Ok(Shape::Json),
            ("Table", "meta.k8s.io", "v1") => return Ok(Shape::Table("v1")),
            ("Table", "meta.k8s.io", "v1beta1") => return Ok(Shape::Table("v1beta1")),
            ("PartialObjectMetadata", "meta.k8s.io", "v1") => {
                return Ok(Shape::Metadata { list: false });
            }
            ("PartialObjectMetadataList", "meta.k8s.io", "v1") => {
                return Ok(Shape::Metadata { list: true });
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable())
}

/// The form of `/api` and `/apis` an Accept header gets from an apiserver: `Some("v2")` or
/// `Some("v2beta1")` for aggregated discovery, `None` for the legacy document; 406 when no
/// range is acceptable. Ranges are taken as the apiserver takes them: by `q` (a `q` that does
/// not parse is 0), specific types before wildcards, else in the header's order.
pub fn negotiate_discovery(accept: &str) -> Result<Option<&'static str>, ApiError> {
    if accept.trim().is_empty() {
        return Ok(None);
    }
    // (q, type is `*`, subtype is `*`, what the range gets)
    let mut ranges: Vec<(f64, bool, bool, Option<Option<&'static str>>)> = Vec::new();
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let (ty, sub) = match media.split_once('/') {
            Some((t, s)) => (t.trim(), s.trim()),
            None if media == "*" => ("*", "*"),
            None => continue,
        };
        let (mut q, mut as_, mut g, mut v) = (1.0, None, None, None);
        for p in parts {
            match p.split_once('=').map(|(k, x)| (k.trim(), x.trim())) {
                Some(("q", x)) => q = x.parse().unwrap_or(0.0),
                Some(("as", x)) => as_ = Some(x),
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                _ => {}
            }
        }
        let served = matches!(
            (ty, sub),
            (
                "application",
                "json" | "yaml" | "vnd.kubernetes.protobuf" | "*"
            ) | ("*", "*")
        );
        let gets = match (as_, g, v) {
            _ if !served => None,
            (None, None, None) => Some(None),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
                Some(Some("v2"))
            }
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2beta1")) => {
                Some(Some("v2beta1"))
            }
            _ => None,
        };
        ranges.push((q, ty == "*", sub == "*", gets));
    }
    // Go's sort.Sort over so few ranges is an insertion sort with this order.
    let less = |a: &(f64, bool, bool, _), b: &(f64, bool, bool, _)| {
        a.0 > b.0 || (!a.1 && b.1) || (!a.2 && b.2)
    };
    for i in 1..ranges.len() {
        let mut j = i;
        while j > 0 && less(&ranges[j], &ranges[j - 1]) {
            ranges.swap(j, j - 1);
            j -= 1;
        }
    }
    ranges
        .into_iter()
        .find_map(|r| r.3)
        .ok_or_else(ApiError::discovery_not_acceptable)
}

/// An opaque continue token for a list taken at `rv`, resuming after `key`.
pub fn continue_token(rv: u64, key: &(String, String)) -> String {
    let doc = json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": key.0, "name": key.1});
    base64_encode(doc.to_string().as_bytes())
}

/// Decodes a continue token into (list resourceVersion, key to resume after).
pub fn parse_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let bytes = base64_decode(token).ok_or_else(bad)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

/// `metadata` of a list or Table.
pub struct ListMeta {
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token when more items follow.
    pub cont: Option<String>,
    /// Items after this page, when known.
    pub remaining: Option<usize>,
}

impl ListMeta {
    fn to_json(&self) -> Value {
        let mut m = json!({"resourceVersion": self.rv.to_string()});
        if let Some(c) = &self.cont {
            m["continue"] = json!(c);
        }
        if let Some(r) = self.remaining {
            m["remainingItemCount"] = json!(r);
        }
        m
    }
}

/// Writes a `<Kind>List`, one item at a time (items untyped as the real server writes
/// them, except custom resources which carry kind/apiVersion).
pub fn write_list(
    out: &mut dyn Write,
    kind: &Kind,
    meta: &ListMeta,
    items: &[Arc<Obj>],
) -> io::Result<()> {
    write!(
        out,
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        kind.kind,
        kind.api_version(),
        meta.to_json()
    )?;
    let mut buf = Vec::with_capacity(8192);
    for (i, o) in items.iter().enumerate() {
        buf.clear();
        if i > 0 {
            buf.push(b',');
        }
        o.write_json(kind, kind.crd, &mut buf);
        out.write_all(&buf)?;
    }
    out.write_all(b"]}")
}

/// `o` as a `meta.k8s.io/v1` `PartialObjectMetadata`: kind, apiVersion and metadata only.
pub fn partial_metadata(o: &Obj) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": o.value()["metadata"],
    })
}

/// Writes one object as a `PartialObjectMetadata`.
pub fn write_metadata(out: &mut dyn Write, o: &Obj) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &partial_metadata(o))?;
    Ok(())
}

/// Writes a `meta.k8s.io/v1` `PartialObjectMetadataList`, one item at a time, each item
/// typed as the apiserver types them.
pub fn write_metadata_list(
    out: &mut dyn Write,
    meta: &ListMeta,
    items: &[Arc<Obj>],
) -> io::Result<()> {
    write!(
        out,
        "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{},\"items\":[",
        meta.to_json()
    )?;
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write_metadata(out, o)?;
    }
    out.write_all(b"]}")
}

fn columns() -> Value {
    json!([
        {"name": "Name", "type": "string", "format": "name", "priority": 0,
         "description": "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"},
        {"name": "Age", "type": "date", "format": "", "priority": 0,
         "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
    ])
}

fn row(kind: &Kind, o: &Obj, include: Include, version: &str) -> Value {
    let age = parse_rfc3339(&o.created)
        .map(|t| human_age(unix_now().saturating_sub(t)))
        .unwrap_or_else(|| "<unknown>".into());
    let mut r = json!({"cells": [o.name, age]});
    match include {
        Include::None => {}
        Include::Metadata => {
            let v = o.value();
            r["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": v["metadata"],
            });
        }
        Include::Object => r["object"] = o.value_with_kind(kind),
    }
    r
}

/// Writes a Table of `items` (rows are built one at a time).
pub fn write_table(
    out: &mut dyn Write,
    kind: &Kind,
    version: &str,
    meta: &ListMeta,
    items: &[Arc<Obj>],
    include: Include,
) -> io::Result<()> {
    write!(
        out,
        "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/{version}\",\"metadata\":{},\"columnDefinitions\":{},\"rows\":[",
        meta.to_json(),
        columns()
    )?;
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, &row(kind, o, include, version))?;
    }
    out.write_all(b"]}")
}

/// The event a watcher with `matches` sees for `ev`: selector transitions turn MODIFIED into
/// ADDED (now matches) or DELETED (no longer matches, carrying the previous state).
pub fn visible(ev: &Event, matches: &dyn Fn(&Obj) -> bool) -> Option<(EventType, Arc<Obj>)> {
    match ev.etype {
        EventType::Added | EventType::Deleted => {
            matches(&ev.obj).then(|| (ev.etype, ev.obj.clone()))
        }
        EventType::Modified => {
            let before = ev.prev.as_deref().filter(|p| matches(p));
            match (matches(&ev.obj), before) {
                (true, Some(_)) => Some((EventType::Modified, ev.obj.clone())),
                (true, None) => Some((EventType::Added, ev.obj.clone())),
                (false, Some(prev)) => {
                    let mut v = prev.value();
                    v["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                    let mut o = Obj::from_value(v);
                    o.rv = ev.rv;
                    Some((EventType::Deleted, Arc::new(o)))
                }
                (false, None) => None,
            }
        }
    }
}

/// One watch line: `{"type":"ADDED","object":{...}}\n`.
pub fn event_line(kind: &Kind, etype: &str, o: &Obj, shape: Shape, include: Include) -> Vec<u8> {
    let mut line = Vec::with_capacity(o.body.len() + 64);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(etype.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    match shape {
        Shape::Json => o.write_json(kind, true, &mut line),
        Shape::Table(version) => {
            let table = json!({
                "kind": "Table",
                "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": {"resourceVersion": o.rv.to_string()},
                "columnDefinitions": columns(),
                "rows": [row(kind, o, include, version)],
            });
            line.extend_from_slice(table.to_string().as_bytes());
        }
        Shape::Metadata { .. } => {
            line.extend_from_slice(partial_metadata(o).to_string().as_bytes());
        }
    }
    line.extend_from_slice(b"}\n");
    line
}

/// A BOOKMARK line at `rv`; `initial_end` marks the end of `sendInitialEvents`.
pub fn bookmark_line(kind: &Kind, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let ev = json!({"type": "BOOKMARK", "object": {
        "kind": kind.kind, "apiVersion": kind.api_version(), "metadata": meta}});
    let mut line = ev.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// An ERROR line carrying a Status.
pub fn error_line(err: &ApiError) -> Vec<u8> {
    let mut line = json!({"type": "ERROR", "object": err.to_status()})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(accept: &str, want: Result<Shape, u16>) {
        assert_eq!(negotiate(accept).map_err(|e| e.code), want, "{accept:?}");
    }

    #[test]
    fn accept_headers_pick_json_table_or_406() {
        check("", Ok(Shape::Json));
        check("application/json", Ok(Shape::Json));
        check("application/vnd.kubernetes.protobuf, */*", Ok(Shape::Json));
        check(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            Ok(Shape::Table("v1")),
        );
        check(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
            Ok(Shape::Json),
        );
        check("application/vnd.kubernetes.protobuf", Err(406));
        // client-go's metadata client: protobuf first, which this server does not speak.
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            Ok(Shape::Metadata { list: true }),
        );
        check(
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            Ok(Shape::Metadata { list: false }),
        );
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            Err(406),
        );
        check(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1",
            Err(406),
        );
    }

    #[test]
    fn discovery_accept_picks_aggregated_or_legacy_as_an_apiserver_does() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        let pick = |h: &str| negotiate_discovery(h).map_err(|e| e.code);
        assert_eq!(pick(""), Ok(None));
        assert_eq!(pick("application/json"), Ok(None));
        assert_eq!(
            pick(&format!("{v2},{v2beta1},application/json")),
            Ok(Some("v2"))
        );
        assert_eq!(pick(&format!("{v2beta1},{v2}")), Ok(Some("v2beta1")));
        assert_eq!(pick(&format!("{v2};q=0.5,application/json")), Ok(None));
        assert_eq!(pick(&format!("*/*,{v2}")), Ok(Some("v2")));
        assert_eq!(
            pick("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
            Err(406)
        );
    }

    #[test]
    fn continue_tokens_round_trip() {
        let key = ("ns-1".to_string(), "pod-7".to_string());
        let t = continue_token(42, &key);
        assert_eq!(parse_continue(&t).unwrap(), (42, key));
        assert_eq!(parse_continue("not a token").unwrap_err().code, 400);
    }
}
