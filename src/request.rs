//! Request information: what a request asks for, read from its method, path, query and a
//! few headers, the way kube-apiserver's `RequestInfoFactory` reads it. Pure: no I/O, no
//! knowledge of caching or routing.
//!
//! Every path segment that could become part of a cache path is percent-decoded and
//! validated here (namespaces as DNS labels, names as Kubernetes path segment names, with no
//! `/`, `..`, NUL or leading dot), so later stages never see a hostile segment.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use crate::names::{
    Component, Gvr, is_dns_label, is_dns_subdomain, is_object_name, is_resource_name, is_version,
};
use crate::requester::Requester;

mod accept;

use accept::classify_accept;
pub(crate) use accept::{Accept, DiscoveryForm};

/// The HTTP method, as far as the hub cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
    /// Anything else (OPTIONS, CONNECT, ...): forwarded as is.
    Other,
}

impl Method {
    /// Reads an HTTP method name.
    pub(crate) fn parse(text: &str) -> Method {
        match text {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            _ => Method::Other,
        }
    }
}

/// The Kubernetes verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// Read one object.
    Get,
    /// Read a collection.
    List,
    /// Stream changes.
    Watch,
    /// POST to a collection.
    Create,
    /// PUT one object.
    Update,
    /// PATCH one object.
    Patch,
    /// DELETE one object.
    Delete,
    /// DELETE a collection.
    DeleteCollection,
    /// The `proxy` verb or subresource.
    Proxy,
    /// A non-resource request or a method the hub does not classify.
    Other,
}

impl Verb {
    /// The verb as Kubernetes and the metrics name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Proxy => "proxy",
            Verb::Other => "other",
        }
    }
}

/// A resource URL, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    /// API group ("" for core), version and resource (plural).
    pub gvr: Gvr,
    /// Subresource such as `status`.
    pub subresource: Option<String>,
    /// Namespace of a namespaced request.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// The legacy `/watch/` or `/proxy/` prefix preceded the resource.
    pub legacy_prefix: Option<LegacyPrefix>,
    /// More path followed the subresource (`.../pods/p/proxy/x`, `.../log/extra`).
    pub extra_path: bool,
}

/// The legacy prefixes of `/api/v1/watch/...` and `/api/v1/proxy/...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegacyPrefix {
    /// `/watch/`: a watch.
    Watch,
    /// `/proxy/`: the proxy verb.
    Proxy,
}

/// What the path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A Kubernetes resource URL.
    Resource(ResourcePath),
    /// Any other path (`/version`, discovery, `/healthz`, ...), decoded.
    NonResource(String),
}

/// The query parameters the hub acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Query {
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `limit`.
    pub limit: Option<u64>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `watch`, read as the apiserver reads a boolean ([`go_bool`]).
    pub watch: bool,
    /// `timeout` (a Go duration) on non-watch requests, in seconds when it parses.
    pub timeout: Option<u64>,
    /// `follow`, read the same (a followed log: a long stream).
    pub follow: bool,
    /// `allowWatchBookmarks`, read the same.
    pub allow_watch_bookmarks: bool,
    /// `resourceVersionMatch`, when given and not empty (empty is unset, as the apiserver
    /// reads it).
    pub resource_version_match: Option<String>,
    /// `sendInitialEvents` (a watch-list), read the same when given: the apiserver's
    /// `*bool`, nil when absent.
    pub send_initial_events: Option<bool>,
    /// The query holds a `;`, which the cloud reads one way or another depending on its Go
    /// version: what the hub read may not be what the cloud read, so a list answer to it
    /// adds and updates but deletes nothing.
    pub ambiguous: bool,
}

/// One classified request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiRequest {
    /// HTTP method.
    pub method: Method,
    /// Kubernetes verb.
    pub verb: Verb,
    /// Resource or not.
    pub target: Target,
    /// Parameters.
    pub query: Query,
    /// The component it names: User-Agent up to the first `/`, lower-cased ("" when absent).
    pub component: ComponentName,
    /// Accept header, classified.
    pub accept: Accept,
    /// `Connection: Upgrade` (exec, attach, port-forward).
    pub upgrade: bool,
    /// Who sent it: the port and credential. [`classify`] knows only the `Authorization`
    /// header (the port is unknown, which lends nothing); the proxy sets the rest from what
    /// the server saw.
    pub requester: Requester,
}

impl ApiRequest {
    /// The request writes to a resource: create, update, patch, delete, deletecollection.
    /// Offline, such a request is refused, never stored (`route::Local::WriteRefused`).
    pub(crate) fn is_write(&self) -> bool {
        matches!(
            self.verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }

    /// The resource path, when the request names a resource.
    pub(crate) fn resource(&self) -> Option<&ResourcePath> {
        match &self.target {
            Target::Resource(r) => Some(r),
            Target::NonResource(_) => None,
        }
    }
}

/// The component a request names, as read from the client (for logs, metrics, filters and
/// the cache agents' list), and as a [`Component`] when that is a valid one: only such a
/// component has a cache (`route.rs` gives the others none, `NoCacheReason::BadComponent`:
/// they are forwarded uncached). Made only here, by [`classify`] and [`on_behalf_of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ComponentName(Result<Component, String>);

impl ComponentName {
    /// `name` (already lower-cased), checked once.
    fn new(name: &str) -> ComponentName {
        ComponentName(Component::new(name).ok_or_else(|| name.to_owned()))
    }

    /// The component of a `User-Agent` value: up to the first `/`, trimmed, lower-cased
    /// (`kubelet` of `kubelet/v1.30.0 (linux/arm64) kubernetes/abc`).
    fn of_user_agent(value: &str) -> ComponentName {
        let first = crate::ascii::user_agent_product(value);
        // Most agents name themselves in lower case already: no copy to lower it.
        if first.bytes().any(|b| b.is_ascii_uppercase()) {
            ComponentName::new(&first.to_ascii_lowercase())
        } else {
            ComponentName::new(first)
        }
    }

    /// The name as read from the client (lower-cased), valid or not.
    pub(crate) fn as_str(&self) -> &str {
        match &self.0 {
            Ok(component) => component.as_str(),
            Err(name) => name,
        }
    }

    /// The component, when the name is a valid one.
    pub(crate) fn valid(&self) -> Option<&Component> {
        self.0.as_ref().ok()
    }
}

impl Default for ComponentName {
    /// No `User-Agent`: "", no component.
    fn default() -> ComponentName {
        ComponentName(Err(String::new()))
    }
}

impl fmt::Display for ComponentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ComponentName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ComponentName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Why a request's path or query is unusable; the proxy answers 400 with its text. Each
/// variant quotes at most what the client sent that is wrong (truncated where it can be long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestError {
    /// The target is longer than [`MAX_URL_BYTES`].
    TooLong,
    /// A `%` escape that is not two hex digits, in the path (`segment` false) or one of its
    /// segments.
    BadEscape {
        /// In one segment, not the whole path.
        segment: bool,
        /// The path or segment as sent.
        text: String,
    },
    /// A path segment that decodes to a `/` or NUL, which no name may hold.
    SlashOrNul(String),
    /// `..` in a non-resource path.
    DotDot,
    /// A part of a resource path that is not a valid name of its kind.
    Invalid {
        /// Which part: "API group", "API version", "namespace", "resource", …
        part: &'static str,
        /// The part as sent.
        text: String,
    },
    /// A query parameter whose value is not UTF-8 once unescaped.
    NotUtf8 {
        /// The parameter.
        key: String,
    },
    /// A numeric query parameter (`limit`, `timeoutSeconds`) that is not a number.
    NotANumber {
        /// The parameter.
        key: String,
        /// Its value.
        text: String,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::TooLong => {
                write!(f, "request URL is longer than {MAX_URL_BYTES} bytes")
            }
            RequestError::BadEscape { segment, text } => {
                let what = if *segment { "path segment" } else { "path" };
                write!(f, "{what} {text:?} has a bad percent-escape")
            }
            RequestError::SlashOrNul(text) => {
                write!(f, "path segment {text:?} decodes to a '/' or NUL")
            }
            RequestError::DotDot => f.write_str("path must not contain '..'"),
            RequestError::Invalid { part, text } => write!(f, "invalid {part} {text:?}"),
            RequestError::NotUtf8 { key } => {
                write!(f, "query parameter {key} is not UTF-8 once unescaped")
            }
            RequestError::NotANumber { key, text } => {
                write!(f, "query parameter {key}={text:?} is not a number")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Longest timeout a request may ask for (a day); longer ones are clamped.
pub(crate) const MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// Longest request target accepted for classification: what the server reads (a target
/// the hub builds itself, for a refill or its ConfigMap watch, is far shorter).
pub(crate) const MAX_URL_BYTES: usize = crate::http1::MAX_TARGET;

/// Classifies one request. `headers` are (name, value) pairs as received.
pub(crate) fn classify(
    method: &str,
    url: &str,
    headers: &[(String, String)],
) -> Result<ApiRequest, RequestError> {
    if url.len() > MAX_URL_BYTES {
        return Err(RequestError::TooLong);
    }
    let method = Method::parse(method);
    let (raw_path, raw_query) = url.split_once('?').unwrap_or((url, ""));
    let query = parse_query(raw_query)?;

    let mut component = ComponentName::default();
    let mut accept_header: Option<&str> = None;
    let mut upgrade = false;
    let mut authorization: Option<&str> = None;
    for (name, value) in headers {
        if crate::ascii::eq_ignore_ascii_case(name, "user-agent") {
            component = ComponentName::of_user_agent(value);
        } else if crate::ascii::eq_ignore_ascii_case(name, "accept") {
            accept_header = Some(value);
        } else if crate::ascii::eq_ignore_ascii_case(name, "connection") {
            upgrade |= value
                .split(',')
                .any(|t| crate::ascii::eq_ignore_ascii_case(t.trim(), "upgrade"));
        } else if crate::ascii::eq_ignore_ascii_case(name, "authorization") {
            authorization = Some(value);
        }
    }

    let target = parse_path(raw_path)?;
    let verb = match &target {
        Target::Resource(r) => resource_verb(method, r, &query),
        Target::NonResource(_) => Verb::Other,
    };
    Ok(ApiRequest {
        method,
        verb,
        target,
        query,
        component,
        accept: classify_accept(accept_header),
        upgrade,
        requester: Requester::unknown(authorization),
    })
}

/// Classifies a request the hub makes itself on behalf of `component` (a cache refill):
/// there are no client headers to read, so the component is given, not parsed from a
/// User-Agent, and nothing else is asked (any `Accept`, no upgrade, the hub's credentials).
pub(crate) fn on_behalf_of(
    component: &str,
    method: &str,
    url: &str,
) -> Result<ApiRequest, RequestError> {
    let mut req = classify(method, url, &[])?;
    req.component = ComponentName::new(component);
    req.requester = Requester::hub();
    Ok(req)
}

fn resource_verb(method: Method, r: &ResourcePath, query: &Query) -> Verb {
    if r.subresource.as_deref() == Some("proxy") || r.legacy_prefix == Some(LegacyPrefix::Proxy) {
        return Verb::Proxy;
    }
    match method {
        Method::Get | Method::Head => {
            if r.legacy_prefix == Some(LegacyPrefix::Watch) || query.watch {
                Verb::Watch
            } else if r.name.is_some() {
                Verb::Get
            } else {
                Verb::List
            }
        }
        Method::Post => Verb::Create,
        Method::Put => Verb::Update,
        Method::Patch => Verb::Patch,
        Method::Delete if r.name.is_some() => Verb::Delete,
        Method::Delete => Verb::DeleteCollection,
        Method::Other => Verb::Other,
    }
}

/// Splits and validates the path.
fn parse_path(raw_path: &str) -> Result<Target, RequestError> {
    let decoded = unescape(raw_path, false).map_err(|_| RequestError::BadEscape {
        segment: false,
        text: raw_path.to_owned(),
    })?;
    let segments = segments(raw_path)?;
    let (group, version, rest) = match segments.first().map(|s| s.as_ref()) {
        Some("api") if segments.len() >= 3 => (String::new(), &segments[1], &segments[2..]),
        Some("apis") if segments.len() >= 4 => {
            (segments[1].to_string(), &segments[2], &segments[3..])
        }
        Some("api") | Some("apis") => {
            // Discovery documents: validate the group and version segments they name.
            for (i, seg) in segments.iter().enumerate().skip(1) {
                let ok = if segments[0] == "apis" && i == 1 {
                    is_dns_subdomain(seg)
                } else {
                    is_version(seg)
                };
                if !ok {
                    return Err(RequestError::Invalid {
                        part: "API group or version",
                        text: seg.to_string(),
                    });
                }
            }
            return Ok(Target::NonResource(decoded.into_owned()));
        }
        _ => {
            if decoded.split('/').any(|s| s == "..") {
                return Err(RequestError::DotDot);
            }
            return Ok(Target::NonResource(decoded.into_owned()));
        }
    };
    if !group.is_empty() && !is_dns_subdomain(&group) {
        return Err(RequestError::Invalid {
            part: "API group",
            text: group.to_string(),
        });
    }
    if !is_version(version) {
        return Err(RequestError::Invalid {
            part: "API version",
            text: version.to_string(),
        });
    }

    resource_path(group, version, rest).map(Target::Resource)
}

/// The path's segments, each percent-decoded on its own (a decoded `/` or NUL refused).
fn segments(raw_path: &str) -> Result<Vec<Cow<'_, str>>, RequestError> {
    let trimmed = raw_path.trim_start_matches('/');
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    // Room for a namespaced object's subresource (`api/v1/namespaces/ns/pods/name/status`)
    // from the start: a collected Vec grows from four.
    let mut out = Vec::with_capacity(8);
    for raw in crate::ascii::split_ascii(trimmed.trim_end_matches('/'), b'/') {
        let seg = unescape(raw, false).map_err(|_| RequestError::BadEscape {
            segment: true,
            text: raw.to_string(),
        })?;
        if memchr::memchr2(b'/', 0, seg.as_bytes()).is_some() {
            return Err(RequestError::SlashOrNul(raw.to_string()));
        }
        out.push(seg);
    }
    Ok(out)
}

/// The resource path after `/api/<version>` or `/apis/<group>/<version>` (both checked):
/// a legacy prefix, the namespace, the resource, the name and the subresource, each checked.
fn resource_path(
    group: String,
    version: &str,
    rest: &[Cow<'_, str>],
) -> Result<ResourcePath, RequestError> {
    let mut rest = rest;
    // Legacy prefixes: `/api/v1/watch/...` and `/api/v1/proxy/...` (decoded, as the
    // apiserver reads them); the verb notes them.
    let legacy_prefix = match rest.first().map(|s| s.as_ref()) {
        Some("watch") if rest.len() > 1 => Some(LegacyPrefix::Watch),
        Some("proxy") if rest.len() > 1 => Some(LegacyPrefix::Proxy),
        _ => None,
    };
    if legacy_prefix.is_some() {
        rest = &rest[1..];
    }
    let mut namespace = None;
    if rest.first().map(|s| s.as_ref()) == Some("namespaces") && rest.len() > 1 {
        let ns: &str = &rest[1];
        if !is_dns_label(ns) {
            return Err(RequestError::Invalid {
                part: "namespace",
                text: ns.to_string(),
            });
        }
        // `/namespaces/{ns}` alone (or with status/finalize) is the Namespace object itself.
        if rest.len() > 2 && !matches!(rest[2].as_ref(), "status" | "finalize") {
            namespace = Some(ns.to_owned());
            rest = &rest[2..];
        }
    }
    let resource = rest.first().map_or("", |s| s.as_ref());
    if !is_resource_name(resource) {
        return Err(RequestError::Invalid {
            part: "resource",
            text: resource.to_string(),
        });
    }
    let name = match rest.get(1) {
        Some(n) if is_object_name(n) => Some(n.to_string()),
        Some(n) => {
            return Err(RequestError::Invalid {
                part: "object name",
                text: truncate(n).to_owned(),
            });
        }
        None => None,
    };
    let subresource = match rest.get(2) {
        Some(s) if is_resource_name(s) => Some(s.to_string()),
        Some(s) => {
            return Err(RequestError::Invalid {
                part: "subresource",
                text: truncate(s).to_owned(),
            });
        }
        None => None,
    };
    Ok(ResourcePath {
        gvr: Gvr {
            group,
            version: version.to_string(),
            resource: resource.to_owned(),
        },
        subresource,
        namespace,
        name,
        legacy_prefix,
        extra_path: rest.len() > 3,
    })
}

/// At most the first 64 characters of `s`, for messages that quote client input.
pub(crate) fn truncate(s: &str) -> &str {
    // 64 bytes or fewer are 64 characters or fewer: most paths, with no walk over them.
    if s.len() <= 64 {
        return s;
    }
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Reads the query as the apiserver does: Go's `url.ParseQuery` (Go 1.17 and later), then
/// its conversion to list options. Keys and values are unescaped (`%XX`, `+` as a space); a
/// pair with a malformed escape is dropped, as Go drops it; of repeated keys the first pair
/// Go keeps counts (`url.Values` conversion takes `values[0]`); unknown keys are ignored.
///
/// A pair holding a `;` is read the way Go 1.17 and later read it (dropped), but whether the
/// cloud does depends on its Go version (before 1.17, `;` separated pairs), so the query is
/// marked [`Query::ambiguous`] and a list answer to it deletes nothing.
fn parse_query(raw: &str) -> Result<Query, RequestError> {
    let mut q = Query::default();
    let mut seen: u16 = 0;
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        if pair.contains(';') {
            q.ambiguous = true;
            continue;
        }
        let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        // A key that does not unescape, or not to UTF-8, is none the hub knows.
        let Ok(k) = unescape(raw_key, true) else {
            continue;
        };
        let bit = match k.as_ref() {
            "labelSelector" => 1,
            "fieldSelector" => 2,
            "resourceVersion" => 4,
            "continue" => 8,
            "timeoutSeconds" => 16,
            "limit" => 32,
            "watch" => 64,
            "follow" => 128,
            "timeout" => 256,
            "allowWatchBookmarks" => 512,
            "resourceVersionMatch" => 1024,
            "sendInitialEvents" => 2048,
            _ => continue,
        };
        if seen & bit != 0 {
            continue;
        }
        let v = match unescape(raw_value, true) {
            Ok(v) => v.into_owned(),
            // Go drops the pair: a later one with the same key may count.
            Err(Unescape::BadEscape) => continue,
            Err(Unescape::NotUtf8) => {
                return Err(RequestError::NotUtf8 {
                    key: k.into_owned(),
                });
            }
        };
        seen |= bit;
        // Go's strconv.ParseInt(v, 10, 64), which the apiserver's conversion uses; beyond
        // its range the hub clamps rather than refuses.
        let number = |text: &str| -> Result<i64, RequestError> {
            text.parse().or_else(|_| {
                let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(RequestError::NotANumber {
                        key: k.to_string(),
                        text: text.to_owned(),
                    });
                }
                Ok(if text.starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                })
            })
        };
        match bit {
            1 => q.label_selector = Some(v),
            2 => q.field_selector = Some(v),
            4 => q.resource_version = Some(v),
            8 => q.continue_token = Some(v),
            // 0 (or less) means "the server's default", as the apiserver reads it; absurd
            // values are clamped so no deadline arithmetic can overflow.
            16 => {
                q.timeout_seconds = u64::try_from(number(&v)?)
                    .ok()
                    .filter(|&t| t > 0)
                    .map(|t| t.min(MAX_TIMEOUT_SECONDS))
            }
            32 => q.limit = Some(u64::try_from(number(&v)?).unwrap_or(0)),
            64 => q.watch = go_bool(&v),
            128 => q.follow = go_bool(&v),
            256 => q.timeout = parse_go_duration_secs(&v),
            512 => q.allow_watch_bookmarks = go_bool(&v),
            1024 => q.resource_version_match = Some(v).filter(|v| !v.is_empty()),
            _ => q.send_initial_events = Some(go_bool(&v)),
        }
    }
    Ok(q)
}

/// A boolean query parameter as the apiserver's conversion reads one that is present
/// (`runtime.Convert_Slice_string_To_bool`, and `Convert_Slice_string_To_Pointer_bool` for
/// a `*bool`): only `0` and `false` in any case are false — Go's `strings.EqualFold`, under
/// which `ſ` (U+017F) is an `s` — and anything else, even empty, is true; never an error.
/// (Go's `strconv.ParseBool`, which refuses other words, is for flags: `config::flags`.)
fn go_bool(value: &str) -> bool {
    let is_false = value.chars().count() == 5
        && value
            .chars()
            .zip("false".chars())
            .all(|(c, f)| c.to_ascii_lowercase() == f || (f == 's' && c == 'ſ'));
    !(value == "0" || is_false)
}

/// Why a query key or value does not unescape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unescape {
    /// A `%` not followed by two hex digits: Go's `url.QueryUnescape` fails.
    BadEscape,
    /// Well formed, but the bytes are not UTF-8 (Go would keep them).
    NotUtf8,
}

/// Bytes a path keeps unescaped besides letters and digits (RFC 3986's `pchar` and `/`).
pub(crate) const PATH_SAFE: &[u8] = b"-._~!$&'()*+,;=:@/";
/// Bytes a query value keeps unescaped besides letters and digits (Go's `QueryEscape`).
pub(crate) const QUERY_SAFE: &[u8] = b"-._~";

/// `text` percent-encoded into `out`, but letters, digits and `safe`; a space in a query
/// value is `+`, as Go writes it.
pub(crate) fn escape(text: &str, safe: &[u8], out: &mut String) {
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || safe.contains(&b) {
            out.push(char::from(b));
        } else if b == b' ' && safe == QUERY_SAFE {
            out.push('+');
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Decodes `%XX` escapes, and `+` as a space when `plus_is_space` (a query: Go's
/// `url.QueryUnescape`; a path keeps its `+`); borrowed when there is nothing to decode.
fn unescape(s: &str, plus_is_space: bool) -> Result<Cow<'_, str>, Unescape> {
    // memchr, not `contains` with a char (a searcher set up per call) nor a byte loop (at
    // opt-level z, slower still): this runs on the path and on each of its segments.
    let special = if plus_is_space {
        memchr::memchr2(b'%', b'+', s.as_bytes())
    } else {
        memchr::memchr(b'%', s.as_bytes())
    };
    if special.is_none() {
        return Ok(Cow::Borrowed(s));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(Unescape::BadEscape)?;
                let digit = |b: u8| (b as char).to_digit(16).ok_or(Unescape::BadEscape);
                out.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| Unescape::NotUtf8)
}

/// Seconds of a simple Go duration (`30s`, `1m`, `1m30s`); None when it does not parse.
fn parse_go_duration_secs(text: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut number = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        let unit = match c {
            'h' => 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                0.001
            }
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
        total += n * unit;
    }
    if !number.is_empty() || !total.is_finite() {
        return None;
    }
    Some(total.ceil().min(MAX_TIMEOUT_SECONDS as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::accept::DiscoveryAccept;
    use super::*;

    fn headers(ua: &str) -> Vec<(String, String)> {
        vec![("User-Agent".into(), ua.into())]
    }

    /// (group, version, resource, namespace, name, subresource)
    type Want<'a> = (
        &'a str,
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );

    fn check(method: &str, url: &str, verb: Verb, want: Option<Want<'_>>) {
        let r = classify(method, url, &headers("kubelet/v1.30"))
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(r.verb, verb, "{method} {url}");
        match (r.target, want) {
            (Target::Resource(p), Some((g, v, res, ns, name, sub))) => {
                assert_eq!(
                    (
                        p.gvr.group.as_str(),
                        p.gvr.version.as_str(),
                        p.gvr.resource.as_str(),
                        p.namespace.as_deref(),
                        p.name.as_deref(),
                        p.subresource.as_deref()
                    ),
                    (g, v, res, ns, name, sub),
                    "{url}"
                );
            }
            (Target::NonResource(_), None) => {}
            (t, w) => panic!("{url}: got {t:?}, want {w:?}"),
        }
    }

    #[test]
    fn resource_urls() {
        check(
            "GET",
            "/api/v1/namespaces/default/pods/web",
            Verb::Get,
            Some(("", "v1", "pods", Some("default"), Some("web"), None)),
        );
        check(
            "GET",
            "/api/v1/namespaces/default/pods",
            Verb::List,
            Some(("", "v1", "pods", Some("default"), None, None)),
        );
        check(
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
            Verb::List,
            Some(("", "v1", "pods", None, None, None)),
        );
        check(
            "GET",
            "/api/v1/pods?watch=true",
            Verb::Watch,
            Some(("", "v1", "pods", None, None, None)),
        );
        check(
            "GET",
            "/api/v1/watch/namespaces/kube-system/configmaps",
            Verb::Watch,
            Some(("", "v1", "configmaps", Some("kube-system"), None, None)),
        );
        // Decoded as the apiserver decodes it.
        check(
            "GET",
            "/api/v1/%77atch/namespaces/kube-system/configmaps",
            Verb::Watch,
            Some(("", "v1", "configmaps", Some("kube-system"), None, None)),
        );
        check(
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            Verb::Get,
            Some((
                "apps",
                "v1",
                "deployments",
                Some("a"),
                Some("d"),
                Some("scale"),
            )),
        );
        check(
            "PUT",
            "/api/v1/namespaces/a/pods/p/status",
            Verb::Update,
            Some(("", "v1", "pods", Some("a"), Some("p"), Some("status"))),
        );
        check(
            "GET",
            "/api/v1/nodes/edge-1",
            Verb::Get,
            Some(("", "v1", "nodes", None, Some("edge-1"), None)),
        );
        check(
            "GET",
            "/api/v1/namespaces/kube-system",
            Verb::Get,
            Some(("", "v1", "namespaces", None, Some("kube-system"), None)),
        );
        check(
            "POST",
            "/api/v1/namespaces/a/configmaps",
            Verb::Create,
            Some(("", "v1", "configmaps", Some("a"), None, None)),
        );
        check(
            "PATCH",
            "/api/v1/nodes/n/status",
            Verb::Patch,
            Some(("", "v1", "nodes", None, Some("n"), Some("status"))),
        );
        check(
            "DELETE",
            "/api/v1/namespaces/a/pods/p",
            Verb::Delete,
            Some(("", "v1", "pods", Some("a"), Some("p"), None)),
        );
        check(
            "DELETE",
            "/api/v1/namespaces/a/pods",
            Verb::DeleteCollection,
            Some(("", "v1", "pods", Some("a"), None, None)),
        );
        check(
            "GET",
            "/api/v1/namespaces/a/pods/p/proxy/x",
            Verb::Proxy,
            Some(("", "v1", "pods", Some("a"), Some("p"), Some("proxy"))),
        );
        check(
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:node",
            Verb::Get,
            Some((
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                None,
                Some("system:node"),
                None,
            )),
        );
    }

    #[test]
    fn non_resource_urls() {
        for url in [
            "/version",
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps",
            "/apis/discovery.k8s.io/v1",
            "/healthz",
            "/openapi/v2",
            "/",
        ] {
            check("GET", url, Verb::Other, None);
        }
    }

    #[test]
    fn hostile_paths_are_refused() {
        for url in [
            "/api/v1/namespaces/../pods",
            "/api/v1/namespaces/default/pods/..",
            "/api/v1/namespaces/default/pods/%2e%2e",
            "/api/v1/namespaces/default/pods/a%2Fb",
            "/api/v1/namespaces/%2e%2e%2fetc/pods",
            "/api/v1/namespaces/default/pods/a%00b",
            "/api/v1/namespaces/default/pods/.hidden",
            "/api/v1/namespaces/Default/pods",
            "/api/v1/namespaces/default/pods/a%zz",
            "/apis/../v1/pods",
            "/apis/apps/V1/deployments",
            "/../../etc/passwd",
        ] {
            assert!(
                classify("GET", url, &[]).is_err(),
                "{url} should be refused"
            );
        }
        let long = format!("/api/v1/namespaces/default/pods/{}", "a".repeat(300));
        assert!(classify("GET", &long, &[]).is_err());
        let huge = format!("/api/v1/pods?x={}", "a".repeat(MAX_URL_BYTES));
        assert!(classify("GET", &huge, &[]).is_err());
    }

    #[test]
    fn query_parameters() {
        let r = classify(
            "GET",
            "/api/v1/pods?labelSelector=app+in+(a%2Cb)&fieldSelector=spec.nodeName%3Dn1&resourceVersion=42&timeoutSeconds=300&limit=500&continue=abc&watch=1",
            &[],
        )
        .unwrap();
        assert_eq!(r.verb, Verb::Watch);
        assert_eq!(r.query.label_selector.as_deref(), Some("app in (a,b)"));
        assert_eq!(r.query.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(r.query.resource_version.as_deref(), Some("42"));
        assert_eq!(r.query.timeout_seconds, Some(300));
        assert_eq!(r.query.limit, Some(500));
        assert_eq!(r.query.continue_token.as_deref(), Some("abc"));
        assert!(classify("GET", "/api/v1/pods?limit=x", &[]).is_err());
        assert_eq!(
            classify("GET", "/api/v1/pods?timeout=1m30s", &[])
                .unwrap()
                .query
                .timeout,
            Some(90)
        );
        // Repeated parameters: the first counts, as in the apiserver.
        let r = classify(
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&fieldSelector=&watch=1&watch=0",
            &[],
        )
        .unwrap();
        assert_eq!(r.query.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert!(r.query.watch);
    }

    fn query(raw: &str) -> Query {
        parse_query(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    #[test]
    fn a_plus_is_a_space_in_a_query_and_itself_in_a_path() {
        assert_eq!(unescape("a+b%2Fc", true).as_deref(), Ok("a b/c"));
        assert_eq!(unescape("a+b%2Fc", false).as_deref(), Ok("a+b/c"));
        assert!(matches!(unescape("a+b", false), Ok(Cow::Borrowed("a+b"))));
        assert_eq!(unescape("%zz", false), Err(Unescape::BadEscape));
        assert_eq!(unescape("%ff", true), Err(Unescape::NotUtf8));
    }

    #[test]
    fn query_keys_and_values_are_unescaped_as_go_does() {
        // Escaped keys are the keys the apiserver reads (issue 11, item 7).
        let q = query("field%53elector=spec.nodeName%3Dnowhere&label%53elector=a%3Db&c%6Fntinue=x");
        assert_eq!(q.field_selector.as_deref(), Some("spec.nodeName=nowhere"));
        assert_eq!(q.label_selector.as_deref(), Some("a=b"));
        assert_eq!(q.continue_token.as_deref(), Some("x"));
        assert!(!q.ambiguous);
        // `+` is a space in keys and values; `%2B` is a plus.
        let q = query("labelSelector=app+in+(a,b)&resource%56ersion=1%2B2&field+Selector=x");
        assert_eq!(q.label_selector.as_deref(), Some("app in (a,b)"));
        assert_eq!(q.resource_version.as_deref(), Some("1+2"));
        assert_eq!(q.field_selector, None, "`field Selector` is no known key");
        // Keys are case-sensitive; unknown ones are ignored.
        let q = query("FieldSelector=a%3Db&x=%zz&=v&&watch");
        assert_eq!(q.field_selector, None);
    }

    #[test]
    fn the_first_pair_go_keeps_counts() {
        let q = query("field%53elector=a%3D1&fieldSelector=a%3D2&fieldSelector=");
        assert_eq!(q.field_selector.as_deref(), Some("a=1"));
        // A malformed escape drops its pair (Go's url.ParseQuery), so the next one counts.
        let q = query("labelSelector=a%3D%zz&labelSelector=b%3D1&labelSelector=c");
        assert_eq!(q.label_selector.as_deref(), Some("b=1"));
        let q = query("limit=%&limit=5&continue=%4&continue=t");
        assert_eq!((q.limit, q.continue_token.as_deref()), (Some(5), Some("t")));
        // Not UTF-8 once unescaped: the hub cannot hold it, so it refuses the request.
        assert!(parse_query("fieldSelector=a%3D%ff").is_err());
        assert!(!query("x%ff=1").ambiguous, "an unknown key is ignored");
    }

    #[test]
    fn a_semicolon_makes_the_query_ambiguous() {
        // Go 1.17 and later drop the pair; earlier Go split on `;`. The hub reads it as the
        // later do and marks the query so that no list answer to it deletes anything.
        let q = query("labelSelector=a%3Db;fieldSelector=spec.nodeName%3Dx&limit=5");
        assert!(q.ambiguous);
        assert_eq!((q.label_selector, q.field_selector), (None, None));
        assert_eq!(q.limit, Some(5));
        assert!(!query("x=%3B").ambiguous, "an escaped `;` is just a byte");
    }

    #[test]
    fn booleans_and_numbers_as_the_apiserver_converts_them() {
        for (raw, want) in [
            ("watch=true", true),
            ("watch=1", true),
            ("watch=True", true),
            ("watch=yes", true),
            ("watch=", true),
            ("watch", true),
            ("watch=0", false),
            ("watch=false", false),
            ("watch=FALSE", false),
            ("", false),
            ("watch=0&watch=1", false),
        ] {
            assert_eq!(query(raw).watch, want, "{raw}");
        }
        assert!(query("follow=t").follow);
        assert_eq!(query("timeoutSeconds=%2B30").timeout_seconds, Some(30));
        assert_eq!(query("timeoutSeconds=-1").timeout_seconds, None);
        assert_eq!(query("limit=-1").limit, Some(0));
        // `+` is a space, and Go's ParseInt takes no space.
        for bad in [
            "timeoutSeconds=",
            "timeoutSeconds=+30",
            "limit=x",
            "limit=5_0",
        ] {
            assert!(parse_query(bad).is_err(), "{bad}");
        }
        assert_eq!(
            classify("GET", "/api/v1/pods?watch", &[]).unwrap().verb,
            Verb::Watch
        );
    }

    #[test]
    fn watch_list_options_are_read_with_the_query_as_the_apiserver_converts_them() {
        // runtime.Convert_Slice_string_To_Pointer_bool: any value but `0` or `false` is true,
        // never an error; absent is nil.
        for (raw, want) in [
            ("sendInitialEvents=true", Some(true)),
            ("sendInitialEvents=x", Some(true)),
            ("sendInitialEvents=", Some(true)),
            ("sendInitialEvents=f", Some(true)),
            ("sendInitialEvents=0", Some(false)),
            ("sendInitialEvents=FaLsE", Some(false)),
            // strings.EqualFold folds `ſ` to `s`.
            ("sendInitialEvents=fal%C5%BFe", Some(false)),
            ("sendInitialEvents=%20false", Some(true)),
            ("sendInitialEvents=0&sendInitialEvents=1", Some(false)),
            ("watch=1", None),
        ] {
            assert_eq!(query(raw).send_initial_events, want, "{raw}");
        }
        assert!(query("watch=1&allowWatchBookmarks=true").allow_watch_bookmarks);
        let q = query("allowWatchBookmarks=false&resourceVersionMatch=Exact");
        assert!(!q.allow_watch_bookmarks);
        assert_eq!(q.resource_version_match.as_deref(), Some("Exact"));
        assert!(query("allowWatchBookmarks=yes").allow_watch_bookmarks);
        assert!(!query("allowWatchBookmarks=0").allow_watch_bookmarks);
        assert!(!query("").allow_watch_bookmarks);
        let q = query("resourceVersionMatch=Not%4FlderThan&resourceVersionMatch=Exact");
        assert_eq!(q.resource_version_match.as_deref(), Some("NotOlderThan"));
        assert_eq!(query("resourceVersionMatch=").resource_version_match, None);
    }

    #[test]
    fn component_accept_upgrade_and_auth() {
        let hdrs = vec![
            (
                "user-agent".into(),
                "Kubelet/v1.30.0 (linux/arm) kubernetes/abc".into(),
            ),
            (
                "Accept".into(),
                "application/vnd.kubernetes.protobuf,application/json".into(),
            ),
            ("Connection".into(), "Upgrade".into()),
            ("Authorization".into(), "Bearer x".into()),
        ];
        let r = classify("GET", "/api/v1/pods", &hdrs).unwrap();
        assert_eq!(r.component, "kubelet");
        assert_eq!(r.accept, Accept::JsonOrProtobuf);
        assert!(r.upgrade);
        assert_eq!(r.requester.credential.as_str(), "token");
        assert_eq!(classify("GET", "/api", &[]).unwrap().component, "");
    }

    #[test]
    fn refusals_say_what_was_wrong_in_the_clients_own_words() {
        let refused = |url: &str| classify("GET", url, &[]).unwrap_err();
        let cases = [
            (
                "/api/v1/namespaces/Bad_NS/pods",
                r#"invalid namespace "Bad_NS""#,
            ),
            (
                "/apis/Not..A.Group/v1/pods",
                r#"invalid API group "Not..A.Group""#,
            ),
            (
                "/api/v1/namespaces/a%2Fb/pods",
                r#"path segment "a%2Fb" decodes to a '/' or NUL"#,
            ),
            (
                "/api/v1/pods?limit=many",
                r#"query parameter limit="many" is not a number"#,
            ),
        ];
        for (url, want) in cases {
            assert_eq!(refused(url).to_string(), want, "{url}");
        }
        assert_eq!(
            refused("/api/v1/namespaces/a%zz/pods").to_string(),
            r#"path "/api/v1/namespaces/a%zz/pods" has a bad percent-escape"#
        );
        let long = format!("/api/v1/pods?labelSelector={}", "x".repeat(MAX_URL_BYTES));
        assert_eq!(refused(&long), RequestError::TooLong);
    }

    #[test]
    fn the_hub_asks_on_behalf_of_a_component() {
        // What a refill asked before: its User-Agent was `<component>/tinyhub-refill`.
        let url = "/api/v1/namespaces/a/configmaps?labelSelector=x";
        let ua = vec![("User-Agent".into(), "kubelet/tinyhub-refill".into())];
        let asked = on_behalf_of("kubelet", "GET", url).unwrap();
        let mut classified = classify("GET", url, &ua).unwrap();
        // The same request, asked by the hub itself: for the node.
        assert!(asked.requester.is_node() && !classified.requester.is_node());
        classified.requester = Requester::hub();
        assert_eq!(asked, classified);
        assert!(on_behalf_of("kubelet", "GET", "/api/v1/namespaces/../pods").is_err());
    }

    #[test]
    fn accept_kinds() {
        let cases: &[(Option<&str>, Accept)] = &[
            (None, Accept::Json),
            (Some("*/*"), Accept::Json),
            (Some("application/json, */*"), Accept::Json),
            (Some("application/json;stream=watch"), Accept::Json),
            (
                Some("application/vnd.kubernetes.protobuf"),
                Accept::ProtobufOnly,
            ),
            (
                Some(
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
                ),
                Accept::Transformed {
                    plain_json_too: true,
                },
            ),
            (
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Accept::Metadata {
                    list: true,
                    json: true,
                },
            ),
            (Some("application/yaml"), Accept::Other),
        ];
        for (header, want) in cases {
            assert_eq!(classify_accept(*header), *want, "{header:?}");
        }
    }

    #[test]
    fn discovery_forms_in_the_order_the_apiserver_picks_them() {
        use DiscoveryForm::{Legacy, V2, V2Beta1};
        const V2_RANGE: &str =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        const BETA_RANGE: &str =
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        let forms = |header: &str| -> Vec<DiscoveryForm> {
            classify_accept(Some(header)).discovery().forms().collect()
        };
        // kubectl 1.26 to 1.34 and client-go.
        assert_eq!(
            forms(&format!("{V2_RANGE},{BETA_RANGE},application/json")),
            [V2, V2Beta1, Legacy]
        );
        assert_eq!(forms(&format!("{BETA_RANGE},{V2_RANGE}")), [V2Beta1, V2]);
        assert_eq!(forms(V2_RANGE), [V2]);
        // Parameters in any order; a profile the hub does not know is ignored.
        assert_eq!(
            forms(
                "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io;profile=nopeer"
            ),
            [V2]
        );
        // q orders first (a q that does not parse is 0), then specific types before wildcards.
        assert_eq!(
            forms(&format!("{V2_RANGE};q=0.5,application/json")),
            [Legacy, V2]
        );
        assert_eq!(forms(&format!("*/*,{V2_RANGE}")), [V2, Legacy]);
        assert_eq!(
            forms(&format!("{V2_RANGE};q=x,{BETA_RANGE};q=0.1")),
            [V2Beta1, V2]
        );
        // Unknown versions, protobuf and Tables take no form; repeats count once.
        assert_eq!(
            forms(&format!(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,\
                 application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                 application/json;as=Table;g=meta.k8s.io;v=v1,{V2_RANGE},{V2_RANGE}"
            )),
            [V2]
        );
        // Without aggregated discovery, the classification is what it always was.
        assert_eq!(
            Accept::Json.discovery().forms().collect::<Vec<_>>(),
            [Legacy]
        );
        assert_eq!(Accept::ProtobufOnly.discovery(), DiscoveryAccept::NONE);
    }

    #[test]
    fn discovery_form_of_a_content_type() {
        for form in DiscoveryForm::ALL {
            assert_eq!(
                DiscoveryForm::of_content_type(form.content_type()),
                Some(form)
            );
        }
        let cases: &[(&str, Option<DiscoveryForm>)] = &[
            (
                "application/json; charset=utf-8",
                Some(DiscoveryForm::Legacy),
            ),
            (
                "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io",
                Some(DiscoveryForm::V2),
            ),
            ("application/json;as=Table;v=v1;g=meta.k8s.io", None),
            ("application/vnd.kubernetes.protobuf", None),
            ("*/*", None),
            ("", None),
        ];
        for (content_type, want) in cases {
            assert_eq!(
                DiscoveryForm::of_content_type(content_type),
                *want,
                "{content_type:?}"
            );
        }
    }
}
