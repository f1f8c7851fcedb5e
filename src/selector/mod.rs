//! Kubernetes label and field selectors: parse the `labelSelector` and `fieldSelector` query
//! parameters of a list or watch, and decide whether a cached JSON object matches them.
//!
//! The grammar and the matching rules are those of k8s.io/apimachinery (`labels.Parse` and
//! `fields.ParseSelector`), so an offline list answers what the apiserver would have answered:
//! `!=` and `notin` match objects without the label, `spec.nodeName=` selects unscheduled pods,
//! `x in ()` means "x is the empty string". The few field labels whose value the apiserver
//! computes rather than copies from the object (boolean fields defaulting to `false`, an event's
//! `source`, a job's `status.successful`) are resolved the same way here.
//!
//! This module does no I/O and knows nothing of requests or of the cache layout. Parsing caps
//! the text at [`MAX_SELECTOR_BYTES`] and the number of terms at [`MAX_TERMS`], failing fast on
//! hostile input; matching borrows from the object and allocates nothing.

use std::fmt;

use serde_json::{Map, Number, Value};

mod label_parse;

use label_parse::LabelParser;

/// Longest selector text accepted, in bytes; longer ones are refused before parsing.
pub(crate) const MAX_SELECTOR_BYTES: usize = 16 * 1024;

/// Most terms accepted in one selector: label requirements plus the values of their sets, or
/// field terms.
pub(crate) const MAX_TERMS: usize = 256;

/// Longest label name part and label value (Kubernetes' limit).
const MAX_NAME_LEN: usize = 63;

/// Longest label key prefix, a DNS subdomain (Kubernetes' limit).
const MAX_PREFIX_LEN: usize = 253;

/// Which of the two selectors an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SelectorKind {
    /// The `labelSelector` parameter.
    Label,
    /// The `fieldSelector` parameter.
    Field,
}

impl SelectorKind {
    /// The query parameter's name, for messages.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SelectorKind::Label => "labelSelector",
            SelectorKind::Field => "fieldSelector",
        }
    }
}

/// Why a selector was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum SelectorError {
    /// The text is longer than [`MAX_SELECTOR_BYTES`].
    TooLong {
        /// Which selector.
        kind: SelectorKind,
        /// Its length in bytes.
        len: usize,
    },
    /// The selector has more than [`MAX_TERMS`] terms.
    TooManyTerms {
        /// Which selector.
        kind: SelectorKind,
    },
    /// One term is malformed.
    Invalid {
        /// Which selector.
        kind: SelectorKind,
        /// The offending term, as far as it was read.
        term: String,
        /// What is wrong with it.
        problem: Problem,
    },
}

/// What is wrong with a selector term.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Problem {
    /// A token that the grammar does not allow here.
    Unexpected {
        /// The token found (empty at the end of the text).
        found: String,
        /// What the grammar allows.
        expected: &'static str,
    },
    /// A label key that is not a qualified name.
    InvalidKey {
        /// The key.
        key: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// A label value that is not a valid label value.
    InvalidValue {
        /// The value.
        value: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// The value of `>` or `<` is not a 64-bit integer.
    NotAnInteger(String),
    /// A NUL byte, which Kubernetes would silently treat as the end of the text.
    NulByte,
    /// A field term without `=`, `==` or `!=`.
    NoOperator,
    /// A field path that is not dot-separated names (`metadata.name`, `spec.nodeName`).
    InvalidPath(String),
    /// A backslash in a field value that is not `\\`, `\,` or `\=`.
    InvalidEscape(String),
    /// A `,` or `=` in a field value that is not escaped with a backslash.
    UnescapedChar(char),
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorError::TooLong { kind, len } => write!(
                f,
                "{} is {len} bytes long, more than the {MAX_SELECTOR_BYTES} accepted",
                kind.as_str()
            ),
            SelectorError::TooManyTerms { kind } => write!(
                f,
                "{} has more than the {MAX_TERMS} terms accepted",
                kind.as_str()
            ),
            SelectorError::Invalid {
                kind,
                term,
                problem,
            } => write!(f, "{} term {term:?}: {problem}", kind.as_str()),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unexpected { found, expected } if found.is_empty() => {
                write!(f, "found the end of the text, expected {expected}")
            }
            Problem::Unexpected { found, expected } => {
                write!(f, "found {found:?}, expected {expected}")
            }
            Problem::InvalidKey { key, why } => write!(f, "invalid label key {key:?}: {why}"),
            Problem::InvalidValue { value, why } => {
                write!(f, "invalid label value {value:?}: {why}")
            }
            Problem::NotAnInteger(value) => {
                write!(f, "{value:?} is not an integer, as '>' and '<' require")
            }
            Problem::NulByte => f.write_str("contains a NUL byte"),
            Problem::NoOperator => f.write_str("no operator: expected '=', '==' or '!='"),
            Problem::InvalidPath(path) => write!(
                f,
                "{path:?} is not a field path (dot-separated names such as metadata.name)"
            ),
            Problem::InvalidEscape(seq) => write!(
                f,
                "invalid escape sequence {seq:?}: only \\\\, \\, and \\= are allowed"
            ),
            Problem::UnescapedChar(c) => {
                write!(f, "unescaped {c:?} in the value: write \\{c} instead")
            }
        }
    }
}

impl std::error::Error for SelectorError {}

/// A parsed `labelSelector`: every requirement must hold (logical AND).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: LabelOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    /// `=` and `==`.
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    GreaterThan(i64),
    LessThan(i64),
}

impl LabelSelector {
    /// The selector that matches every object (an absent or empty `labelSelector`).
    pub(crate) fn everything() -> Self {
        Self::default()
    }

    /// Parses `labelSelector` text as `labels.Parse` does; empty or blank text is everything.
    pub(crate) fn parse(text: &str) -> Result<Self, SelectorError> {
        check_size(SelectorKind::Label, text)?;
        LabelParser::new(text).parse()
    }

    /// Whether this selector lets every object through.
    pub(crate) fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let labels = object
            .get("metadata")
            .and_then(|metadata| metadata.get("labels"))
            .and_then(Value::as_object);
        self.matches_with(|key| label_in(labels, key))
    }

    /// Whether labels read through `label` satisfy every requirement, for objects whose
    /// labels were extracted once (the watch cache): `label(key)` is `None` when the object
    /// has no such label and `Some(None)` when its value is not a string.
    pub(crate) fn matches_with<'v>(&self, label: impl Fn(&str) -> Option<Option<&'v str>>) -> bool {
        self.requirements.iter().all(|r| r.matches(label(&r.key)))
    }
}

/// A label of a JSON `metadata.labels` map as [`LabelSelector::matches_with`] reads it.
fn label_in<'v>(labels: Option<&'v Map<String, Value>>, key: &str) -> Option<Option<&'v str>> {
    labels.and_then(|labels| labels.get(key)).map(Value::as_str)
}

impl Requirement {
    /// `present` is the label: absent, or present with a string value or another value.
    fn matches(&self, present: Option<Option<&str>>) -> bool {
        // A label that is not a string cannot come from the apiserver; it equals no value.
        let value = present.flatten();
        match &self.op {
            LabelOp::Exists => present.is_some(),
            LabelOp::DoesNotExist => present.is_none(),
            LabelOp::Equals(want) => value == Some(want.as_str()),
            LabelOp::NotEquals(want) => value != Some(want.as_str()),
            LabelOp::In(set) => value.is_some_and(|v| set.iter().any(|s| s == v)),
            LabelOp::NotIn(set) => !value.is_some_and(|v| set.iter().any(|s| s == v)),
            LabelOp::GreaterThan(bound) => label_integer(value).is_some_and(|v| v > *bound),
            LabelOp::LessThan(bound) => label_integer(value).is_some_and(|v| v < *bound),
        }
    }
}

/// A label value read as Go's `strconv.ParseInt(v, 10, 64)` reads it (sign allowed).
fn label_integer(value: Option<&str>) -> Option<i64> {
    value.and_then(|v| v.parse::<i64>().ok())
}

/// A parsed `fieldSelector`: every term must hold (logical AND).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    path: String,
    equal: bool,
    value: String,
}

impl FieldSelector {
    /// The selector that matches every object (an absent or empty `fieldSelector`).
    pub(crate) fn everything() -> Self {
        Self::default()
    }

    /// Parses `fieldSelector` text as `fields.ParseSelector` does; empty text is everything.
    pub(crate) fn parse(text: &str) -> Result<Self, SelectorError> {
        check_size(SelectorKind::Field, text)?;
        let mut terms = Vec::new();
        for term in split_field_terms(text) {
            // Kubernetes skips empty terms, so `a=b,,c=d` and a trailing comma are fine.
            if term.is_empty() {
                continue;
            }
            if terms.len() == MAX_TERMS {
                return Err(SelectorError::TooManyTerms {
                    kind: SelectorKind::Field,
                });
            }
            terms.push(
                parse_field_term(term).map_err(|problem| SelectorError::Invalid {
                    kind: SelectorKind::Field,
                    term: term.to_owned(),
                    problem,
                })?,
            );
        }
        Ok(FieldSelector { terms })
    }

    /// Whether this selector lets every object through.
    pub(crate) fn is_everything(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether every term holds for the object.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.terms
            .iter()
            .all(|t| field_equals(object, &t.path, &t.value) == t.equal)
    }

    /// The name a `metadata.name=<name>` term asks for: a list of at most that one object
    /// (kubelet reads each ConfigMap and Secret of its pods so).
    pub(crate) fn object_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.path == "metadata.name")
            .map(|t| t.value.as_str())
    }

    /// The field paths the terms name, in order (with repeats), for a caller that accepts
    /// only the field labels its resource declares.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.path.as_str())
    }

    /// Whether every term holds for fields read through `field`, for objects whose fields
    /// were extracted once (the watch cache): `field(path)` is the field rendered as
    /// [`field_text`] renders it, `None` for a structure, which equals no value.
    pub(crate) fn matches_with<'v>(&self, field: impl Fn(&str) -> Option<&'v str>) -> bool {
        self.terms
            .iter()
            .all(|t| (field(&t.path) == Some(t.value.as_str())) == t.equal)
    }
}

/// The text of field `path` of `object` as the apiserver renders field labels (strings as
/// they are, booleans and numbers as their JSON text, absent or null as the Go zero value);
/// `None` for a structure, which equals no value. What [`FieldSelector::matches`] compares for
/// a plain path (not the computed labels, an event's `source` or a job's `status.successful`).
pub(crate) fn field_text(object: &Value, path: &str) -> Option<String> {
    match resolve(object, path) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        None | Some(Value::Null) => Some(missing_field_text(path).to_owned()),
        Some(Value::Object(_) | Value::Array(_)) => None,
    }
}

/// Both selectors of a list or watch request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Selectors {
    /// From `labelSelector`.
    pub label: LabelSelector,
    /// From `fieldSelector`.
    pub field: FieldSelector,
}

impl Selectors {
    /// Parses the two query parameters; an absent one selects everything.
    pub(crate) fn parse(label: Option<&str>, field: Option<&str>) -> Result<Self, SelectorError> {
        Ok(Selectors {
            label: label.map_or_else(|| Ok(LabelSelector::everything()), LabelSelector::parse)?,
            field: field.map_or_else(|| Ok(FieldSelector::everything()), FieldSelector::parse)?,
        })
    }

    /// The selectors of a request that has neither parameter.
    pub(crate) fn everything() -> Self {
        Self::default()
    }

    /// Whether both selectors let every object through.
    pub(crate) fn is_everything(&self) -> bool {
        self.label.is_everything() && self.field.is_everything()
    }

    /// Whether the object satisfies both selectors.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.label.matches(object) && self.field.matches(object)
    }

    /// Whether every object these selectors match is also matched by `wider`: each of
    /// `wider`'s requirements and terms is one of these (both are conjunctions). Judged by
    /// their text, so it may say no where sets would say yes (`a in (x)` against `a=x`),
    /// never yes where they would say no: an offline list is answered from a whole list of
    /// `wider` only when this holds (`cache/synced.rs`).
    pub(crate) fn narrows(&self, wider: &Selectors) -> bool {
        wider
            .label
            .requirements
            .iter()
            .all(|r| self.label.requirements.contains(r))
            && wider
                .field
                .terms
                .iter()
                .all(|t| self.field.terms.contains(t))
    }
}

/// `labelSelector` text that parses back to the same selector (`key`, `!key`, `key=v`,
/// `key!=v`, `key in (a,b)`, `key notin (a,b)`, `key>n`, `key<n`, joined by commas).
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let key = &r.key;
            match &r.op {
                LabelOp::Exists => write!(f, "{key}")?,
                LabelOp::DoesNotExist => write!(f, "!{key}")?,
                LabelOp::Equals(v) => write!(f, "{key}={v}")?,
                LabelOp::NotEquals(v) => write!(f, "{key}!={v}")?,
                LabelOp::In(set) => write!(f, "{key} in ({})", set.join(","))?,
                LabelOp::NotIn(set) => write!(f, "{key} notin ({})", set.join(","))?,
                LabelOp::GreaterThan(n) => write!(f, "{key}>{n}")?,
                LabelOp::LessThan(n) => write!(f, "{key}<{n}")?,
            }
        }
        Ok(())
    }
}

/// `fieldSelector` text that parses back to the same selector (values escaped as
/// `fields.EscapeValue` escapes them).
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&t.path)?;
            f.write_str(if t.equal { "=" } else { "!=" })?;
            for c in t.value.chars() {
                if matches!(c, '\\' | ',' | '=') {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

fn check_size(kind: SelectorKind, text: &str) -> Result<(), SelectorError> {
    if text.len() > MAX_SELECTOR_BYTES {
        return Err(SelectorError::TooLong {
            kind,
            len: text.len(),
        });
    }
    Ok(())
}
// ---------------------------------------------------------------------------------------------
// Field selector parsing.

/// Splits at commas that are not escaped by a backslash, as Kubernetes' `splitTerms` does.
fn split_field_terms(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let s = rest?;
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b',' => {
                    rest = Some(&s[i + 1..]);
                    return Some(&s[..i]);
                }
                _ => i += 1,
            }
        }
        rest = None;
        Some(s)
    })
}

fn parse_field_term(term: &str) -> Result<FieldTerm, Problem> {
    if term.as_bytes().contains(&0) {
        return Err(Problem::NulByte);
    }
    // The first operator wins; `!=` and `==` are tried before `=` at each position so that no
    // stray '=' is left at the start of the value.
    let bytes = term.as_bytes();
    let (at, len, equal) = (0..bytes.len())
        .find_map(|i| match (bytes[i], bytes.get(i + 1)) {
            (b'!', Some(b'=')) => Some((i, 2, false)),
            (b'=', Some(b'=')) => Some((i, 2, true)),
            (b'=', _) => Some((i, 1, true)),
            _ => None,
        })
        .ok_or(Problem::NoOperator)?;
    let path = &term[..at];
    if !is_field_path(path) {
        return Err(Problem::InvalidPath(path.to_owned()));
    }
    Ok(FieldTerm {
        path: path.to_owned(),
        equal,
        value: unescape_field_value(&term[at + len..])?,
    })
}

/// Dot-separated names of ASCII alphanumerics, `_` and `-`. The apiserver accepts only the
/// field labels a kind declares, all of this form; anything else it refuses, and so do we.
fn is_field_path(path: &str) -> bool {
    path.split('.').all(|segment| {
        !segment.is_empty()
            && segment
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    })
}

fn unescape_field_value(raw: &str) -> Result<String, Problem> {
    let mut value = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => value.push(escaped),
                Some(other) => return Err(Problem::InvalidEscape(format!("\\{other}"))),
                None => return Err(Problem::InvalidEscape("\\".to_owned())),
            },
            ',' | '=' => return Err(Problem::UnescapedChar(c)),
            other => value.push(other),
        }
    }
    Ok(value)
}

// ---------------------------------------------------------------------------------------------
// Field matching.

/// Whether the object's field `path` reads as `want`, the way the apiserver renders field
/// labels: strings as they are, booleans and numbers as their JSON text, absent or null as "".
fn field_equals(object: &Value, path: &str, want: &str) -> bool {
    let found = match path {
        // A core/v1 Event's `source` label is `source.component`, or `reportingComponent` when
        // that is empty (Kubernetes' EventToSelectableFields).
        "source" => match object.get("source") {
            Some(Value::Object(source)) => match source.get("component").and_then(Value::as_str) {
                Some(component) if !component.is_empty() => source.get("component"),
                _ => object.get("reportingComponent"),
            },
            None | Some(Value::Null) => object.get("reportingComponent"),
            other => other,
        },
        // A Job's label `status.successful` is its `status.succeeded` count.
        "status.successful" => {
            resolve(object, path).or_else(|| resolve(object, "status.succeeded"))
        }
        _ => resolve(object, path),
    };
    match found {
        Some(Value::String(s)) => s == want,
        Some(Value::Bool(b)) => want == if *b { "true" } else { "false" },
        Some(Value::Number(n)) => number_text_is(n, want),
        None | Some(Value::Null) => want == missing_field_text(path),
        // No field label is a structure; it equals no value.
        Some(Value::Object(_) | Value::Array(_)) => false,
    }
}

fn resolve<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(object, |v, segment| v.get(segment))
}

/// What the apiserver reports for a field the JSON omits: Go's zero value, printed. Boolean
/// and counter labels are printed from non-pointer fields, so they read `false` and `0`.
fn missing_field_text(path: &str) -> &'static str {
    match path {
        // Pod `spec.hostNetwork`, Node `spec.unschedulable`: `omitempty` booleans.
        "spec.hostNetwork" | "spec.unschedulable" => "false",
        // Job `status.succeeded`: an `omitempty` counter.
        "status.successful" => "0",
        _ => "",
    }
}

/// Compares a JSON number's text with `want` without allocating.
fn number_text_is(n: &Number, want: &str) -> bool {
    use std::fmt::Write;

    struct StackText {
        buf: [u8; 40],
        len: usize,
    }
    impl Write for StackText {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.len + s.len();
            let dest = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
            dest.copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }

    if want.len() > 40 {
        return false;
    }
    let mut text = StackText {
        buf: [0; 40],
        len: 0,
    };
    // Every i64, u64 and shortest f64 text fits in 40 bytes; if one did not, it is not `want`.
    write!(text, "{n}").is_ok() && &text.buf[..text.len] == want.as_bytes()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-0",
                "namespace": "default",
                "labels": {
                    "app": "web",
                    "tier": "frontend",
                    "example.com/role": "primary",
                    "empty": "",
                    "weight": "10",
                }
            },
            "spec": { "nodeName": "edge-1", "restartPolicy": "Always", "priority": 3 },
            "status": { "phase": "Running", "podIP": "10.0.0.7" }
        })
    }

    fn unscheduled_pod() -> Value {
        json!({
            "metadata": { "name": "pending-0", "namespace": "kube-system" },
            "spec": { "hostNetwork": true, "nodeName": null },
            "status": { "phase": "Pending" }
        })
    }

    fn node(unschedulable: Option<bool>) -> Value {
        let mut node = json!({ "metadata": { "name": "edge-1" }, "spec": {} });
        if let Some(u) = unschedulable {
            node["spec"]["unschedulable"] = json!(u);
        }
        node
    }

    fn check_label(selector: &str, object: &Value, expected: bool) {
        let parsed = LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(
            parsed.matches(object),
            expected,
            "labelSelector {selector:?}"
        );
    }

    fn check_field(selector: &str, object: &Value, expected: bool) {
        let parsed = FieldSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"));
        assert_eq!(
            parsed.matches(object),
            expected,
            "fieldSelector {selector:?}"
        );
    }

    #[test]
    fn label_selectors_match_as_kubernetes_does() {
        let pod = pod();
        let bare = unscheduled_pod();
        let table: &[(&str, &Value, bool)] = &[
            ("", &pod, true),
            ("  \t ", &pod, true),
            ("app", &pod, true),
            ("app", &bare, false),
            ("!app", &pod, false),
            ("!app", &bare, true),
            ("app=web", &pod, true),
            ("app==web", &pod, true),
            ("app=db", &pod, false),
            ("app=web", &bare, false),
            ("app!=db", &pod, true),
            ("app!=web", &pod, false),
            // `!=` and `notin` match objects that lack the label.
            ("app!=web", &bare, true),
            ("app notin (web)", &bare, true),
            ("app in (db,web)", &pod, true),
            ("app in (db)", &pod, false),
            ("app in (web)", &bare, false),
            ("app notin (db,web)", &pod, false),
            ("app notin (db)", &pod, true),
            ("example.com/role=primary", &pod, true),
            ("example.com/role in (primary, secondary)", &pod, true),
            // Empty values: `=` with nothing, `in ()`, and commas around nothing.
            ("empty=", &pod, true),
            ("empty=,app", &pod, true),
            ("empty!=", &pod, false),
            ("app=", &pod, false),
            ("empty in ()", &pod, true),
            ("app in ()", &pod, false),
            ("app notin ()", &pod, true),
            ("empty notin ()", &pod, false),
            ("empty in (a,)", &pod, true),
            ("empty in (,a)", &pod, true),
            ("empty in (a,,b)", &pod, true),
            ("app in (a,,b)", &pod, false),
            ("empty in (,)", &pod, true),
            // Numeric comparisons.
            ("weight>9", &pod, true),
            ("weight>10", &pod, false),
            ("weight<11", &pod, true),
            ("weight<010", &pod, false),
            ("app>1", &pod, false),
            ("weight>1", &bare, false),
            // Conjunctions and whitespace.
            ("app=web,tier=frontend", &pod, true),
            ("app=web,tier=backend", &pod, false),
            (" app = web ,\ttier\n!=\rbackend , !missing ", &pod, true),
            ("app in(web),tier notin(backend)", &pod, true),
            ("!missing,!app", &pod, false),
            // `in` and `notin` are plain words where a key or value is expected.
            ("in", &pod, false),
            ("!notin", &pod, true),
            ("app notin (in,notin)", &pod, true),
        ];
        for (selector, object, expected) in table {
            check_label(selector, object, *expected);
        }
    }

    #[test]
    fn labels_of_odd_objects() {
        check_label("app", &json!({}), false);
        check_label("!app", &json!({}), true);
        check_label("app!=web", &json!({"metadata": {"labels": null}}), true);
        check_label("app", &json!([1, 2]), false);
        // A non-string label cannot come from the apiserver: present, but equal to nothing.
        let odd = json!({"metadata": {"labels": {"app": 5}}});
        check_label("app", &odd, true);
        check_label("app=5", &odd, false);
        check_label("app!=5", &odd, true);
    }

    #[test]
    fn field_selectors_match_as_kubernetes_does() {
        let pod = pod();
        let pending = unscheduled_pod();
        let table: &[(&str, &Value, bool)] = &[
            ("", &pod, true),
            ("metadata.name=web-0", &pod, true),
            ("metadata.name==web-0", &pod, true),
            ("metadata.name!=web-0", &pod, false),
            ("metadata.name=web-1", &pod, false),
            (
                "metadata.namespace=default,spec.nodeName=edge-1",
                &pod,
                true,
            ),
            (
                "metadata.namespace=default,spec.nodeName=edge-2",
                &pod,
                false,
            ),
            ("status.phase!=Succeeded,status.phase!=Failed", &pod, true),
            // Empty terms are skipped.
            (",metadata.name=web-0,,", &pod, true),
            // A missing or null field reads as "": `spec.nodeName=` finds unscheduled pods.
            ("spec.nodeName=", &pending, true),
            ("spec.nodeName=", &pod, false),
            ("spec.nodeName!=", &pending, false),
            ("spec.schedulerName=", &pod, true),
            ("no.such.field=", &pod, true),
            ("no.such.field!=x", &pod, true),
            ("metadata.name.deeper=", &pod, true),
            // Booleans and numbers by their JSON text.
            ("spec.hostNetwork=true", &pending, true),
            ("spec.hostNetwork=false", &pending, false),
            ("spec.priority=3", &pod, true),
            ("spec.priority=3.0", &pod, false),
            ("spec.priority!=4", &pod, true),
            // Omitted booleans read as `false`, as the apiserver prints Go's zero value.
            ("spec.hostNetwork=false", &pod, true),
            ("spec.hostNetwork=", &pod, false),
            // Structures equal no value.
            ("spec=", &pod, false),
            ("spec!=x", &pod, true),
            // Values are compared as is: spaces are data.
            ("metadata.name= web-0", &pod, false),
        ];
        for (selector, object, expected) in table {
            check_field(selector, object, *expected);
        }
    }

    #[test]
    fn field_values_unescape_backslash_sequences() {
        let object = json!({"metadata": {"name": "a,b=c\\d"}});
        check_field(r"metadata.name=a\,b\=c\\d", &object, true);
        check_field(r"metadata.name=a\,b\=c\\d,metadata.name!=x", &object, true);
        check_field(r"metadata.name!=a\,b\=c\\d", &object, false);
        // `\\` then an unescaped ',' ends the term.
        check_field(
            r"metadata.name=x\\,metadata.name!=y",
            &json!({"metadata": {"name": "x\\"}}),
            true,
        );
    }

    #[test]
    fn computed_field_labels() {
        check_field("spec.unschedulable=false", &node(None), true);
        check_field("spec.unschedulable=false", &node(Some(false)), true);
        check_field("spec.unschedulable=true", &node(Some(true)), true);
        check_field("spec.unschedulable!=true", &node(None), true);
        check_field("spec.unschedulable=", &node(None), false);

        let event = json!({
            "source": {"component": "kubelet", "host": "edge-1"},
            "reportingComponent": "other",
            "involvedObject": {"kind": "Pod", "name": "web-0"},
            "type": "Warning"
        });
        check_field("source=kubelet", &event, true);
        check_field("source=other", &event, false);
        check_field("involvedObject.kind=Pod,type=Warning", &event, true);
        let new_style = json!({"source": {}, "reportingComponent": "controller"});
        check_field("source=controller", &new_style, true);
        check_field(
            "source=controller",
            &json!({"reportingComponent": "controller"}),
            true,
        );
        check_field("source=", &json!({}), true);

        check_field("status.successful=0", &json!({"status": {}}), true);
        check_field(
            "status.successful=2",
            &json!({"status": {"succeeded": 2}}),
            true,
        );
        check_field(
            "status.successful=1",
            &json!({"status": {"succeeded": 2}}),
            false,
        );
    }

    #[test]
    fn selectors_combine_both() {
        let pod = pod();
        let both = Selectors::parse(Some("app=web"), Some("spec.nodeName=edge-1")).unwrap();
        assert!(both.matches(&pod));
        assert!(!both.is_everything());
        let wrong_node = Selectors::parse(Some("app=web"), Some("spec.nodeName=edge-2")).unwrap();
        assert!(!wrong_node.matches(&pod));
        let wrong_label = Selectors::parse(Some("app=db"), None).unwrap();
        assert!(!wrong_label.matches(&pod));
        assert!(Selectors::parse(None, None).unwrap().is_everything());
        assert!(
            Selectors::parse(Some(""), Some(""))
                .unwrap()
                .is_everything()
        );
        assert_eq!(
            Selectors::parse(None, None).unwrap(),
            Selectors::everything()
        );
        assert!(Selectors::everything().matches(&json!(null)));
        let err = Selectors::parse(Some("app"), Some("nope")).unwrap_err();
        assert!(matches!(
            err,
            SelectorError::Invalid {
                kind: SelectorKind::Field,
                ..
            }
        ));
    }

    #[test]
    fn invalid_label_selectors_say_which_term_and_why() {
        let long_name = "a".repeat(64);
        let long_value = format!("app={}", "v".repeat(64));
        let table: &[(&str, &str)] = &[
            (
                "app=web,",
                r#"labelSelector term "app=web,": found the end of the text, expected '!' or a label key after ','"#,
            ),
            (
                ",app",
                r#"labelSelector term ",": found ",", expected '!', a label key or the end"#,
            ),
            (
                "app,,tier",
                r#"labelSelector term "app,,": found ",", expected '!' or a label key after ','"#,
            ),
            (
                "app web",
                r#"labelSelector term "app web": found "web", expected one of in, notin, =, ==, !=, >, <"#,
            ),
            (
                "app in web",
                r#"labelSelector term "app in web": found "web", expected '('"#,
            ),
            (
                "app in (a b)",
                r#"labelSelector term "app in (a b": found "b", expected ',' or ')'"#,
            ),
            (
                "app in (a",
                r#"labelSelector term "app in (a": found the end of the text, expected ',' or ')'"#,
            ),
            (
                "app in (,",
                r#"labelSelector term "app in (,": found the end of the text, expected ',' or a label value"#,
            ),
            (
                "app in (=)",
                r#"labelSelector term "app in (=": found "=", expected ',', ')' or a label value"#,
            ),
            (
                "app notin",
                r#"labelSelector term "app notin": found the end of the text, expected '('"#,
            ),
            (
                "app=(x)",
                r#"labelSelector term "app=(": found "(", expected a label value"#,
            ),
            (
                "app=a=b",
                r#"labelSelector term "app=a=": found "=", expected ',' or the end"#,
            ),
            (
                "app===b",
                r#"labelSelector term "app===": found "=", expected a label value"#,
            ),
            (
                "app>=1",
                r#"labelSelector term "app>=": found "=", expected a label value"#,
            ),
            (
                "!app=web",
                r#"labelSelector term "!app=": found "=", expected ',' or the end"#,
            ),
            (
                "!!app",
                r#"labelSelector term "!!": found "!", expected a label key"#,
            ),
            (
                "!",
                r#"labelSelector term "!": found the end of the text, expected a label key"#,
            ),
            (
                "app!",
                r#"labelSelector term "app!": found "!", expected one of in, notin, =, ==, !=, >, <"#,
            ),
            (
                "=web",
                r#"labelSelector term "=": found "=", expected '!', a label key or the end"#,
            ),
            (
                "app>x",
                r#"labelSelector term "app>x": "x" is not an integer, as '>' and '<' require"#,
            ),
            (
                "app<",
                r#"labelSelector term "app<": "" is not an integer, as '>' and '<' require"#,
            ),
            (
                "app>99999999999999999999",
                r#"labelSelector term "app>99999999999999999999": "99999999999999999999" is not an integer, as '>' and '<' require"#,
            ),
            (
                "app>-1",
                r#"labelSelector term "app>-1": invalid label value "-1": must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"#,
            ),
            (
                "-app",
                r#"labelSelector term "-app": invalid label key "-app": the name part must consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"#,
            ),
            (
                "a/b/c",
                r#"labelSelector term "a/b/c": invalid label key "a/b/c": at most one '/' (between a DNS subdomain prefix and a name)"#,
            ),
            (
                "/app",
                r#"labelSelector term "/app": invalid label key "/app": the prefix before '/' is empty"#,
            ),
            (
                "Example.com/app",
                r#"labelSelector term "Example.com/app": invalid label key "Example.com/app": the prefix must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; starting and ending alphanumeric)"#,
            ),
            (
                "example..com/app",
                r#"labelSelector term "example..com/app": invalid label key "example..com/app": the prefix must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; starting and ending alphanumeric)"#,
            ),
            (
                "example.com/",
                r#"labelSelector term "example.com/": invalid label key "example.com/": the name part is empty"#,
            ),
            (
                &long_name,
                &format!(
                    r#"labelSelector term "{long_name}": invalid label key "{long_name}": the name part is longer than 63 bytes"#
                ),
            ),
            (
                &long_value,
                &format!(
                    r#"labelSelector term "{long_value}": invalid label value "{}": longer than 63 bytes"#,
                    "v".repeat(64)
                ),
            ),
            (
                "app=we b",
                r#"labelSelector term "app=we b": found "b", expected ',' or the end"#,
            ),
            (
                "app=wéb",
                r#"labelSelector term "app=wéb": invalid label value "wéb": must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"#,
            ),
            (
                "app in (ok,bad_)",
                r#"labelSelector term "app in (ok,bad_": invalid label value "bad_": must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric"#,
            ),
            (
                "app,tier=x\0y",
                r#"labelSelector term "tier=x\0": contains a NUL byte"#,
            ),
        ];
        for (selector, expected) in table {
            match LabelSelector::parse(selector) {
                Ok(parsed) => panic!("{selector:?} parsed as {parsed:?}, expected an error"),
                Err(err) => assert_eq!(err.to_string(), *expected, "labelSelector {selector:?}"),
            }
        }
    }

    #[test]
    fn valid_label_keys_and_values_at_the_limits() {
        let name = "a".repeat(63);
        let prefix = format!("{}.example.com", "p".repeat(241));
        assert_eq!(prefix.len(), 253);
        for selector in [
            format!("{name}={name}"),
            format!("{prefix}/{name}"),
            "A_b-c.D".to_owned(),
            "1=2".to_owned(),
            "x.y/Z".to_owned(),
            "app=A_b.c-9".to_owned(),
        ] {
            assert!(
                LabelSelector::parse(&selector).is_ok(),
                "{selector:?} should parse"
            );
        }
        let too_long_prefix = format!("p{prefix}/app");
        assert!(LabelSelector::parse(&too_long_prefix).is_err());
    }

    #[test]
    fn invalid_field_selectors_say_which_term_and_why() {
        let table: &[(&str, &str)] = &[
            (
                "metadata.name",
                r#"fieldSelector term "metadata.name": no operator: expected '=', '==' or '!='"#,
            ),
            (
                "a=b,nope",
                r#"fieldSelector term "nope": no operator: expected '=', '==' or '!='"#,
            ),
            (
                "=x",
                r#"fieldSelector term "=x": "" is not a field path (dot-separated names such as metadata.name)"#,
            ),
            (
                "metadata..name=x",
                r#"fieldSelector term "metadata..name=x": "metadata..name" is not a field path (dot-separated names such as metadata.name)"#,
            ),
            (
                "metadata.name =x",
                r#"fieldSelector term "metadata.name =x": "metadata.name " is not a field path (dot-separated names such as metadata.name)"#,
            ),
            (
                "metadata.name<x",
                r#"fieldSelector term "metadata.name<x": no operator: expected '=', '==' or '!='"#,
            ),
            (
                "metadata.name=a=b",
                r#"fieldSelector term "metadata.name=a=b": unescaped '=' in the value: write \= instead"#,
            ),
            (
                "metadata.name===b",
                r#"fieldSelector term "metadata.name===b": unescaped '=' in the value: write \= instead"#,
            ),
            (
                r"metadata.name=a\b",
                r#"fieldSelector term "metadata.name=a\\b": invalid escape sequence "\\b": only \\, \, and \= are allowed"#,
            ),
            (
                r"metadata.name=a\",
                r#"fieldSelector term "metadata.name=a\\": invalid escape sequence "\\": only \\, \, and \= are allowed"#,
            ),
            (
                "metadata.name=a\0",
                r#"fieldSelector term "metadata.name=a\0": contains a NUL byte"#,
            ),
        ];
        for (selector, expected) in table {
            match FieldSelector::parse(selector) {
                Ok(parsed) => panic!("{selector:?} parsed as {parsed:?}, expected an error"),
                Err(err) => assert_eq!(err.to_string(), *expected, "fieldSelector {selector:?}"),
            }
        }
    }

    #[test]
    fn term_limits() {
        let at_limit = vec!["a"; MAX_TERMS].join(",");
        assert!(LabelSelector::parse(&at_limit).is_ok());
        let over = vec!["a"; MAX_TERMS + 1].join(",");
        assert_eq!(
            LabelSelector::parse(&over),
            Err(SelectorError::TooManyTerms {
                kind: SelectorKind::Label
            })
        );
        // Set values count as terms too.
        let big_set = format!("a in ({})", vec!["v"; MAX_TERMS].join(","));
        assert!(matches!(
            LabelSelector::parse(&big_set),
            Err(SelectorError::TooManyTerms { .. })
        ));
        let fields_over = vec!["a=b"; MAX_TERMS + 1].join(",");
        assert_eq!(
            FieldSelector::parse(&fields_over),
            Err(SelectorError::TooManyTerms {
                kind: SelectorKind::Field
            })
        );
        let fields_at = vec!["a=b"; MAX_TERMS].join(",");
        assert!(FieldSelector::parse(&fields_at).is_ok());
        let too_long = "a".repeat(MAX_SELECTOR_BYTES + 1);
        assert_eq!(
            LabelSelector::parse(&too_long),
            Err(SelectorError::TooLong {
                kind: SelectorKind::Label,
                len: MAX_SELECTOR_BYTES + 1
            })
        );
        assert_eq!(
            SelectorError::TooManyTerms {
                kind: SelectorKind::Field
            }
            .to_string(),
            "fieldSelector has more than the 256 terms accepted"
        );
    }

    #[test]
    fn ten_thousand_terms_are_refused_fast() {
        let labels = vec!["app=web"; 10_000].join(",");
        let fields = vec!["metadata.name=x"; 10_000].join(",");
        // Under the byte limit, refusal must come from the term count, not from the length.
        let short_labels = vec!["a"; 10_000].join(",")[..MAX_SELECTOR_BYTES - 1].to_owned();
        let short_fields = vec!["a=b"; 10_000].join(",")[..MAX_SELECTOR_BYTES - 1].to_owned();
        // The best of several rounds, so a preempted round on a busy machine does not count;
        // a debug build needs about a tenth of a millisecond per round.
        let mut best = Duration::MAX;
        for _ in 0..10 {
            let start = Instant::now();
            assert!(LabelSelector::parse(&labels).is_err());
            assert!(FieldSelector::parse(&fields).is_err());
            assert!(matches!(
                LabelSelector::parse(&short_labels),
                Err(SelectorError::TooManyTerms { .. })
            ));
            assert!(matches!(
                FieldSelector::parse(&short_fields),
                Err(SelectorError::TooManyTerms { .. })
            ));
            best = best.min(start.elapsed());
        }
        assert!(
            best < Duration::from_millis(1),
            "four refusals took {best:?}"
        );
    }

    #[test]
    fn matching_extracted_parts_agrees_with_matching_the_object() {
        let mut pod = pod();
        pod["metadata"]["labels"]["count"] = json!(3);
        pod["spec"]["hostNetwork"] = json!(true);
        let labels = pod["metadata"]["labels"].as_object().cloned();
        let field = |path: &str| field_text(&pod, path);
        for label in [
            "app=web",
            "app!=web",
            "count",
            "count=3",
            "!count",
            "missing notin (a)",
            "weight>9,tier in (frontend)",
        ] {
            let s = LabelSelector::parse(label).unwrap();
            let extracted = s.matches_with(|key| label_in(labels.as_ref(), key));
            assert_eq!(extracted, s.matches(&pod), "{label}");
        }
        for text in [
            "spec.nodeName=edge-1",
            "spec.nodeName!=edge-1",
            "spec.priority=3",
            "spec.hostNetwork=true",
            "spec.missing=",
            "spec=x",
            "spec!=x",
            "status.phase=Running,metadata.name=web-0",
        ] {
            let s = FieldSelector::parse(text).unwrap();
            let texts: Vec<Option<String>> = s.paths().map(field).collect();
            let paths: Vec<&str> = s.paths().collect();
            let extracted = s.matches_with(|path| {
                let i = paths.iter().position(|p| *p == path)?;
                texts[i].as_deref()
            });
            assert_eq!(extracted, s.matches(&pod), "{text}");
        }
        assert_eq!(
            field_text(&pod, "spec.unschedulable").as_deref(),
            Some("false")
        );
        assert_eq!(field_text(&pod, "spec.schedulerName").as_deref(), Some(""));
        assert_eq!(
            field_text(&pod, "spec.hostNetwork").as_deref(),
            Some("true")
        );
        assert_eq!(field_text(&pod, "spec").as_deref(), None);
    }

    #[test]
    fn everything_matches_anything() {
        assert!(LabelSelector::everything().is_everything());
        assert!(FieldSelector::everything().is_everything());
        assert!(LabelSelector::parse(" ").unwrap().is_everything());
        assert!(FieldSelector::parse(",").unwrap().is_everything());
        assert!(!LabelSelector::parse("a").unwrap().is_everything());
        assert!(LabelSelector::everything().matches(&json!(42)));
        assert!(FieldSelector::everything().matches(&json!(42)));
    }

    #[test]
    fn number_text_comparison() {
        assert!(number_text_is(&Number::from(-12), "-12"));
        assert!(number_text_is(
            &Number::from(u64::MAX),
            "18446744073709551615"
        ));
        assert!(!number_text_is(&Number::from(1), "01"));
        let float = Number::from_f64(-1.7976931348623157e308).unwrap();
        assert!(number_text_is(&float, &float.to_string()));
        assert!(!number_text_is(&Number::from(1), &"1".repeat(41)));
    }

    #[test]
    fn selectors_print_as_they_parse_and_narrow_by_their_requirements() {
        for (label, field) in [
            ("", ""),
            (
                "app=web,!gone,tier,env in (a,b),x notin (c),w>3,v<2,k!=z",
                "",
            ),
            ("", "spec.nodeName=edge-1,status.phase!=Failed"),
            ("app", r"metadata.name=a\,b\=c\\d"),
        ] {
            let s = Selectors::parse(Some(label), Some(field)).unwrap();
            let (l, f) = (s.label.to_string(), s.field.to_string());
            assert_eq!(
                Selectors::parse(Some(&l), Some(&f)).unwrap(),
                s,
                "{label:?} {field:?} printed as {l:?} {f:?}"
            );
        }
        let sel = |l: &str, f: &str| Selectors::parse(Some(l), Some(f)).unwrap();
        let node = sel("", "spec.nodeName=edge-1");
        assert!(sel("", "").narrows(&Selectors::everything()));
        assert!(
            node.narrows(&Selectors::everything()),
            "a whole list holds every selection"
        );
        assert!(
            !Selectors::everything().narrows(&node),
            "a selection never holds it all"
        );
        assert!(sel("app=web", "spec.nodeName=edge-1").narrows(&node));
        assert!(!sel("app=web", "").narrows(&node));
        assert!(!sel("", "spec.nodeName=edge-2").narrows(&node));
        assert!(!sel("", "spec.nodeName!=edge-1").narrows(&node));
        assert_eq!(
            sel("", "a=b,metadata.name=x").field.object_name(),
            Some("x")
        );
        assert_eq!(sel("", "metadata.name!=x").field.object_name(), None);
    }
}
