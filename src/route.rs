//! Routing: for one classified request, decide what the hub will do with it before any I/O —
//! whether its answer is cached (and how), how to answer it when the cloud is unreachable,
//! what `Accept` to ask the cloud for, how long it may take and whose credentials it carries.
//! Pure functions from values to decisions; `proxy/` carries them out. The decisions' value
//! types are defined here ([`Deadline`], [`Identity`]; the cache's [`CacheTarget`] comes from
//! `cache/target.rs`), so routing imports nothing from `upstream` or `proxy`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::decode::BodyShape;
use crate::cache::key::{CollectionKey, View, non_resource_file_name};
use crate::cache::target::{CacheTarget, TokenTarget};
use crate::filters::Chain;
use crate::mode::WorkingMode;
use crate::names::Component;
use crate::request::{Accept, ApiRequest, DiscoveryForm, Method, ResourcePath, Target, Verb};
use crate::requester::Requester;
use crate::selector::Selectors;
use crate::status::Status;

/// Why a response is not cached; logged with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoCacheReason {
    /// `--working-mode=cloud`.
    CloudMode,
    /// The component is not a cache agent.
    NotAgent,
    /// The User-Agent does not give a usable component name.
    BadComponent,
    /// The verb is not cached (delete, proxy, ...).
    Verb,
    /// The subresource is not cached (only `status` is).
    Subresource,
    /// The client asked for a Table, or partial metadata in a form the cache does not keep
    /// (protobuf only, `v1beta1`, a list's form for a get).
    Transformed,
    /// A metadata-only list or watch with a field selector on more than `metadata.name` and
    /// `metadata.namespace`: the cached metadata has no other field to match.
    MetadataField,
    /// The cache key is not one the store takes: a full read of
    /// `meta.k8s.io/v1` `partialobjectmetadatas`, whose directory is the metadata views'
    /// ([`CollectionKey::unsafe_field`]).
    UnsafeKey,
    /// The client does not accept JSON.
    NotJson,
    /// A non-resource path other than `/version` and discovery.
    NonResource,
    /// The answer's status or content type is not one the cache keeps.
    Answer,
    /// The disk cache could not be opened at start-up.
    CacheUnavailable,
    /// Events (core and `events.k8s.io`): written all the time, never read back; caching
    /// them would only wear the flash.
    Event,
    /// No credential, on a port where the node's identity is not lent: its User-Agent opens
    /// no component's cache (`requester.rs`).
    Anonymous,
}

impl NoCacheReason {
    /// Short name for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NoCacheReason::CloudMode => "cloud-mode",
            NoCacheReason::NotAgent => "not-agent",
            NoCacheReason::BadComponent => "bad-component",
            NoCacheReason::Verb => "verb",
            NoCacheReason::Subresource => "subresource",
            NoCacheReason::Transformed => "table-or-partial",
            NoCacheReason::MetadataField => "metadata-field-selector",
            NoCacheReason::UnsafeKey => "unsafe-key",
            NoCacheReason::NotJson => "not-json",
            NoCacheReason::NonResource => "non-resource",
            NoCacheReason::Answer => "answer",
            NoCacheReason::CacheUnavailable => "cache-unavailable",
            NoCacheReason::Event => "event",
            NoCacheReason::Anonymous => "anonymous",
        }
    }
}

/// How long an exchange may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// A get, list or write: bounded end to end.
    Bounded(Duration),
    /// A watch: may stream this long (its `timeoutSeconds` plus a margin), with no limit on
    /// the silence between events.
    Stream(Duration),
}

/// Whose identity the cloud sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The hub's client certificate and token: the node's (`Requester::is_node`).
    Hub,
    /// The client's own `Authorization` header; no client certificate is presented.
    Client,
    /// Nobody: no client certificate, no `Authorization` (a request without credentials
    /// where the node's identity is not lent). The cloud judges it as anonymous.
    Anonymous,
}

impl Identity {
    /// The identity `requester`'s request goes to the cloud with: its own credential, the
    /// node's when it may use it, else none.
    pub(crate) fn of(requester: &Requester) -> Identity {
        if requester.is_node() {
            Identity::Hub
        } else if requester.is_anonymous() {
            Identity::Anonymous
        } else {
            Identity::Client
        }
    }
}

/// How to answer when the cloud cannot be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Local {
    /// The cached object.
    Get,
    /// The cached collection, filtered by the request's selectors.
    List,
    /// Hold the watch open with no events.
    Watch,
    /// Echo the body with 201 and cache nothing (events).
    Echo,
    /// 201 with the cached token, or a one-minute token made here (`tokens.rs`); only for
    /// the node's identity.
    Token,
    /// 503: a create, update, patch or delete waits for the cloud. Nothing a client sends is
    /// ever stored as the cloud's truth (issue 28: an offline create once planted a pod in
    /// kubelet's cache).
    WriteRefused,
    /// A cached non-resource document.
    NonResource(String),
    /// 503: the cache cannot answer this.
    Unavailable,
}

impl Local {
    /// The request writes (create, update, patch, delete, TokenRequest): one that may have
    /// reached the cloud must never be answered as if it had not.
    pub(crate) fn is_write(&self) -> bool {
        matches!(self, Local::Echo | Local::Token | Local::WriteRefused)
    }
}

/// The decisions for one request.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// What to cache, or why not (shared: the relay's cache session carries it to the
    /// writer without a copy, issue 34).
    pub cache: Result<Arc<CacheTarget>, NoCacheReason>,
    /// How to answer offline.
    pub local: Local,
    /// The `Accept` to send upstream instead of the client's.
    pub upstream_accept: Option<&'static str>,
    /// The hub asks the cloud for gzip whoever asked (issue 32): a GET of an object, a list
    /// or a non-resource path, not a watch, a log, a proxy or an upgrade (streams the
    /// apiserver never compresses, or bodies the hub must pass as they come).
    pub upstream_gzip: bool,
    /// How long the exchange may take.
    pub deadline: Deadline,
    /// Whose credentials go upstream.
    pub identity: Identity,
    /// The request's selectors, parsed (lists and watches).
    pub selectors: Selectors,
    /// The collection a local answer reads or writes when the cache target does not name it
    /// (a Table list, an event read, a HEAD); read it through [`Route::collection`].
    pub local_collection: Option<CollectionKey>,
    /// The response filters the answer passes (YurtHub's `pkg/yurthub/filter`); empty for most
    /// requests.
    pub filters: Chain,
    /// How a watch outlives a broken upstream (`proxy/resume/`); None: relayed as it comes and
    /// ended with its upstream.
    pub resume: Option<Resume>,
}

/// How a watch outlives a broken upstream (issue 29): the hub resumes it from the last
/// resourceVersion it delivered, in the same client stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Resumed from the last delivered resourceVersion; after a 410, one list and the
    /// difference against the component's disk cache, which holds what the client was sent.
    Rebuild,
    /// Resumed from the last delivered resourceVersion; after a 410 ended cleanly, as
    /// before (the hub has no copy of what the client holds).
    ResumeOnly,
}

impl Route {
    /// The collection the local answer reads or writes (gets, lists, watches, creates,
    /// updates), computed once here: the cache target's, else its own.
    pub(crate) fn collection(&self) -> Option<&CollectionKey> {
        self.cache
            .as_deref()
            .ok()
            .and_then(CacheTarget::collection)
            .or(self.local_collection.as_ref())
    }

    /// The route with the response filters of `chain` for a client that accepts `accept`.
    /// Filters read JSON: the cloud is asked for JSON as for a cacheable request; a client
    /// that takes no plain JSON (protobuf only, a Table) gets no filter, as YurtHub's filters
    /// pass what they cannot decode.
    pub(crate) fn with_filters(mut self, chain: Chain, accept: Accept) -> Route {
        match accept {
            Accept::Json => self.filters = chain,
            Accept::JsonOrProtobuf => {
                self.filters = chain;
                if !chain.is_empty() {
                    self.upstream_accept = Some("application/json");
                }
            }
            _ => {}
        }
        self
    }

    /// The route of a request the hub passes on unclassified (cloud mode): nothing cached,
    /// nothing answered locally.
    pub(crate) fn pass_on(requester: &Requester) -> Route {
        Route {
            cache: Err(NoCacheReason::CloudMode),
            local: Local::Unavailable,
            upstream_accept: None,
            upstream_gzip: false,
            deadline: Deadline::Bounded(REQUEST_DEADLINE),
            identity: Identity::of(requester),
            selectors: Selectors::everything(),
            local_collection: None,
            filters: Chain::EMPTY,
            resume: None,
        }
    }
}

/// Extra time a watch may stream beyond its `timeoutSeconds`.
pub(crate) const WATCH_MARGIN: Duration = Duration::from_secs(60);
/// How long a watch without `timeoutSeconds` may last: the apiserver ends such a watch within
/// 30–60 minutes.
pub(crate) const WATCH_DEFAULT: Duration = Duration::from_secs(3600);
/// Deadline of a get, list or write.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(600);
/// Deadline of a followed log or other long stream.
pub(crate) const STREAM_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// Decides the route of `req`. `is_agent` tells whether its component is a cache agent.
/// An invalid selector on a cacheable list or watch is a 400.
pub(crate) fn route(req: &ApiRequest, is_agent: bool, mode: WorkingMode) -> Result<Route, Status> {
    // Selectors matter only for what the hub caches or answers itself; anything else is the
    // cloud's to judge.
    let selectors = match req.verb {
        Verb::List | Verb::Watch if mode == WorkingMode::Edge && is_agent => Selectors::parse(
            req.query.label_selector.as_deref(),
            req.query.field_selector.as_deref(),
        )
        .map_err(|e| Status::bad_request(format!("invalid selector: {e}")))?,
        _ => Selectors::everything(),
    };
    // The view and whether it can match the selectors are judged once, for the cache, the
    // resumption and the local answer alike.
    let view = view_of(req);
    let selectable = metadata_selectable(&selectors);
    let cache = cache_target(req, is_agent, mode, &selectors, view, selectable).map(Arc::new);
    let resume = resume(req, mode, &cache);
    // A cached or resumable answer is read by the hub: JSON, when the client takes it (a
    // metadata-only client's own JSON form: the hub reads no protobuf).
    let read_by_hub = cache.is_ok() || resume.is_some();
    let upstream_accept = match req.accept {
        Accept::JsonOrProtobuf if read_by_hub => Some("application/json"),
        Accept::Metadata { list, json: true } if read_by_hub => Some(metadata_accept(list)),
        _ => None,
    };
    let local = local_answer(req, is_agent, mode, view, selectable);
    // The key is made once: the cache target carries it when there is one.
    let keyed_by_cache = cache.as_ref().is_ok_and(|t| t.collection().is_some());
    let local_collection = match (&local, req.resource(), req.component.valid()) {
        (Local::Get | Local::List | Local::Watch, Some(path), Some(component))
            if !keyed_by_cache =>
        {
            Some(keyed(component, path, view.unwrap_or(View::Full)))
        }
        _ => None,
    };
    Ok(Route {
        local,
        local_collection,
        cache,
        upstream_accept,
        upstream_gzip: upstream_gzip(req),
        deadline: deadline(req),
        identity: Identity::of(&req.requester),
        selectors,
        filters: Chain::EMPTY,
        resume,
    })
}

/// The hub asks for gzip: a GET of an object, a list or a non-resource path, but not a watch,
/// a followed or any log (its bytes are the container's, passed as they come), a proxy or an
/// upgrade.
fn upstream_gzip(req: &ApiRequest) -> bool {
    let log = req
        .resource()
        .is_some_and(|r| r.subresource.as_deref() == Some("log"));
    req.method == Method::Get
        && matches!(req.verb, Verb::Get | Verb::List | Verb::Other)
        && !req.upgrade
        && !req.query.follow
        && !log
}

/// The JSON form of a metadata-only list: the one spelling of it, for [`metadata_accept`]
/// and [`rebuild_list_accept`] (a macro, so `concat!` can build on it).
macro_rules! metadata_list_form {
    () => {
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    };
}

/// The `Accept` the hub sends for a metadata-only client's read it caches or resumes: the
/// JSON form of what it asked for, which it listed (client-go lists protobuf first), then
/// plain JSON, which it listed too: a server that cannot convert answers whole objects, as
/// it would have the client (client-go's metadata client reads them), not 406. The writer
/// keeps only `PartialObjectMetadata` in a metadata view.
pub(crate) fn metadata_accept(list: bool) -> &'static str {
    if list {
        concat!(metadata_list_form!(), ",application/json")
    } else {
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    }
}

/// The `Accept` of the list that rebuilds a cached watch after a 410 ([`Resume::Rebuild`]):
/// the list form of the view its answer is cached in, alone (whole objects would be no
/// difference against a metadata view: a server that cannot convert ends the watch, 406).
pub(crate) fn rebuild_list_accept(accept: Accept) -> &'static str {
    match accept {
        Accept::Metadata { json: true, .. } => metadata_list_form!(),
        _ => "application/json",
    }
}

/// The view a read is cached and answered in: whole objects for a client that takes plain
/// JSON, their metadata for one that asked for the JSON metadata form of its verb (a list's
/// `PartialObjectMetadataList`, a get's or a watch's `PartialObjectMetadata`, of a resource);
/// None for anything else (a metadata write's answer is not kept either).
fn view_of(req: &ApiRequest) -> Option<View> {
    match req.accept {
        Accept::Json | Accept::JsonOrProtobuf => Some(View::Full),
        Accept::Metadata { list, json: true } if matches!(req.target, Target::Resource(_)) => {
            match req.verb {
                Verb::List if list => Some(View::Metadata),
                Verb::Get | Verb::Watch if !list => Some(View::Metadata),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether the metadata view can answer these selectors: its objects have only metadata,
/// so a field selector may name only `metadata.name` and `metadata.namespace`.
fn metadata_selectable(selectors: &Selectors) -> bool {
    selectors
        .field
        .paths()
        .all(|path| matches!(path, "metadata.name" | "metadata.namespace"))
}

/// Whether and how a watch outlives a broken upstream (issue 29): an edge-mode watch of a
/// resource collection whose events the hub can read (JSON, or a Table, whose rows carry the
/// event's resourceVersion); rebuilt after a 410 when its answer is cached (a cache agent's
/// JSON or JSON metadata watch: the cache holds what it was sent, and the rebuild lists in
/// that form, [`rebuild_list_accept`]). Protobuf frames are not cut: such a watch ends with
/// its upstream, as before. Cloud mode passes on what it does not read.
fn resume(
    req: &ApiRequest,
    mode: WorkingMode,
    cache: &Result<Arc<CacheTarget>, NoCacheReason>,
) -> Option<Resume> {
    let Target::Resource(path) = &req.target else {
        return None;
    };
    let readable = matches!(
        req.accept,
        Accept::Json
            | Accept::JsonOrProtobuf
            | Accept::Transformed { .. }
            | Accept::Metadata { json: true, .. }
    );
    let collection = path.subresource.is_none() && !path.extra_path;
    if mode != WorkingMode::Edge || req.verb != Verb::Watch || !readable || !collection {
        return None;
    }
    Some(match cache {
        Ok(_) => Resume::Rebuild,
        Err(_) => Resume::ResumeOnly,
    })
}

/// What the hub caches of `req`'s answer, in `view` (`selectable`: whether the metadata view
/// can match the selectors), or why nothing.
fn cache_target(
    req: &ApiRequest,
    is_agent: bool,
    mode: WorkingMode,
    selectors: &Selectors,
    view: Option<View>,
    selectable: bool,
) -> Result<CacheTarget, NoCacheReason> {
    if mode == WorkingMode::Cloud {
        return Err(NoCacheReason::CloudMode);
    }
    if !is_agent {
        return Err(NoCacheReason::NotAgent);
    }
    if req.requester.is_anonymous() {
        return Err(NoCacheReason::Anonymous);
    }
    let Some(component) = req.component.valid() else {
        return Err(NoCacheReason::BadComponent);
    };
    let view = match (view, req.accept) {
        (Some(View::Metadata), _) if !selectable => return Err(NoCacheReason::MetadataField),
        (Some(view), _) => view,
        // The cloud answers discovery in the form the client asks for; each form is kept.
        (None, Accept::Discovery(_)) if matches!(req.target, Target::NonResource(_)) => View::Full,
        (None, Accept::ProtobufOnly | Accept::Other) => return Err(NoCacheReason::NotJson),
        (None, _) => return Err(NoCacheReason::Transformed),
    };
    let path = match &req.target {
        Target::Resource(path) => path,
        Target::NonResource(path) => {
            return match (req.method, non_resource_document(path)) {
                (Method::Get, Some(file)) => Ok(CacheTarget::NonResource { file }),
                _ => Err(NoCacheReason::NonResource),
            };
        }
    };
    if is_event(path) {
        return Err(NoCacheReason::Event);
    }
    if let Some(target) = token_target(component, req, path) {
        return Ok(CacheTarget::Token(target));
    }
    let collection = keyed(component, path, view);
    // A key the store refuses would fail every write of its answers (a 404's prune among
    // them): it is not cached at all.
    if collection.unsafe_field().is_some() {
        return Err(NoCacheReason::UnsafeKey);
    }
    let status_or_none = object_or_status(path);
    match req.verb {
        Verb::Get | Verb::Update | Verb::Patch if req.method != Method::Head => {
            if !status_or_none {
                return Err(NoCacheReason::Subresource);
            }
            Ok(CacheTarget::Object {
                collection,
                namespace: path.namespace.clone(),
                name: path.name.clone(),
            })
        }
        Verb::Create if path.subresource.is_none() => Ok(CacheTarget::Object {
            collection,
            namespace: path.namespace.clone(),
            name: None,
        }),
        Verb::List if req.method == Method::Get => Ok(CacheTarget::List {
            collection,
            namespace: path.namespace.clone(),
            selectors: selectors.clone(),
            paged: req.query.ambiguous
                || req
                    .query
                    .continue_token
                    .as_deref()
                    .is_some_and(|c| !c.is_empty()),
        }),
        Verb::Watch if req.method == Method::Get => Ok(CacheTarget::Watch { collection }),
        Verb::Create => Err(NoCacheReason::Subresource),
        _ => Err(NoCacheReason::Verb),
    }
}

/// Whether and how the hub answers `req` from its cache offline, in `view` (`selectable`:
/// whether the metadata view can match the selectors).
fn local_answer(
    req: &ApiRequest,
    is_agent: bool,
    mode: WorkingMode,
    view: Option<View>,
    selectable: bool,
) -> Local {
    let component = match req.component.valid() {
        Some(component) if mode == WorkingMode::Edge && is_agent => component,
        _ => return Local::Unavailable,
    };
    if req.requester.is_anonymous() {
        return Local::Unavailable;
    }
    // The cache holds JSON; a client that cannot read plain JSON cannot be answered from it.
    // A metadata-only client is answered from the metadata view, which holds its form, when
    // that view can answer it.
    let plain_json = match req.accept {
        Accept::Json | Accept::JsonOrProtobuf => true,
        Accept::Metadata { .. } => view.is_some() && selectable,
        Accept::Transformed { plain_json_too } => plain_json_too,
        Accept::Discovery(forms) => forms.takes(DiscoveryForm::Legacy),
        Accept::ProtobufOnly | Accept::Other => false,
    };
    let path = match &req.target {
        Target::Resource(path) => path,
        Target::NonResource(path) => {
            // An aggregated-discovery client is answered in a form it takes, or told which
            // forms there are (406).
            let answerable = plain_json || matches!(req.accept, Accept::Discovery(_));
            return match non_resource_document(path) {
                Some(file) if answerable && req.method == Method::Get => Local::NonResource(file),
                _ => Local::Unavailable,
            };
        }
    };
    let status_or_none = object_or_status(path);
    match req.verb {
        // Only the node's own TokenRequests are answered offline: a cached token is the
        // node's to hand out (kubelet asks for its pods' tokens).
        Verb::Create if token_target(component, req, path).is_some() && req.requester.is_node() => {
            if plain_json {
                Local::Token
            } else {
                Local::Unavailable
            }
        }
        Verb::Create if path.subresource.is_none() && is_event(path) && plain_json => Local::Echo,
        _ if req.is_write() => Local::WriteRefused,
        _ if !plain_json || !status_or_none => Local::Unavailable,
        Verb::Get => Local::Get,
        Verb::List => Local::List,
        Verb::Watch => Local::Watch,
        _ => Local::Unavailable,
    }
}

/// What a successful answer to `req` holds, for whatever reads it as it streams (the
/// filters, the cache's tee): a list, a watch's stream of events, or one object.
pub(crate) fn body_shape(req: &ApiRequest) -> BodyShape {
    match req.verb {
        Verb::List => BodyShape::List,
        Verb::Watch => BodyShape::WatchStream,
        _ => BodyShape::Object,
    }
}

fn deadline(req: &ApiRequest) -> Deadline {
    match req.verb {
        Verb::Watch => Deadline::Stream(
            req.query
                .timeout_seconds
                .map(Duration::from_secs)
                .unwrap_or(WATCH_DEFAULT)
                .saturating_add(WATCH_MARGIN),
        ),
        _ if req.query.follow => Deadline::Stream(STREAM_DEADLINE),
        _ => Deadline::Bounded(
            req.query
                .timeout
                .map(|s| Duration::from_secs(s).saturating_add(Duration::from_secs(15)))
                .unwrap_or(REQUEST_DEADLINE)
                .min(REQUEST_DEADLINE),
        ),
    }
}

/// True when `path` names an object or its `status`, the only subresource cached and
/// answered offline.
fn object_or_status(path: &ResourcePath) -> bool {
    matches!(path.subresource.as_deref(), None | Some("status")) && !path.extra_path
}

/// True for events, in the core group and in `events.k8s.io`.
fn is_event(path: &ResourcePath) -> bool {
    path.gvr.resource == "events" && matches!(path.gvr.group.as_str(), "" | "events.k8s.io")
}

/// The target of a TokenRequest (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`),
/// digest not yet known; `None` for anything else.
fn token_target(
    component: &Component,
    req: &ApiRequest,
    path: &ResourcePath,
) -> Option<TokenTarget> {
    let token_request = req.method == Method::Post
        && path.gvr.is("", "v1", "serviceaccounts")
        && path.subresource.as_deref() == Some("token")
        && !path.extra_path;
    if !token_request {
        return None;
    }
    Some(TokenTarget {
        component: component.clone(),
        namespace: path.namespace.clone()?,
        name: path.name.clone()?,
        digest: None,
    })
}

/// The cache directory of `component`'s view of a resource's whole objects.
pub(crate) fn collection_key(component: &Component, path: &ResourcePath) -> CollectionKey {
    keyed(component, path, View::Full)
}

/// The cache directory of `component`'s `view` of a resource.
fn keyed(component: &Component, path: &ResourcePath, view: View) -> CollectionKey {
    CollectionKey {
        component: component.clone(),
        gvr: path.gvr.clone(),
        view,
    }
}

/// The cache file of a cacheable non-resource path: `/version` and discovery documents.
pub(crate) fn non_resource_document(path: &str) -> Option<String> {
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    let discovery = matches!(
        segments.as_slice(),
        ["version"] | ["api"] | ["apis"] | ["api", _] | ["apis", _] | ["apis", _, _]
    );
    if discovery {
        non_resource_file_name(trimmed)
    } else {
        None
    }
}

/// The cache file of one form of a cached non-resource document named `file` (by
/// [`non_resource_document`]): the legacy form is `file` itself (the names of README.md's
/// cache layout); `/api` and `/apis` are also kept in each aggregated form apart, behind a
/// suffix no legacy name has (`_apis.aggregated.v2`, `_apis.aggregated.v2beta1`). None for a
/// form the document does not have.
pub(crate) fn document_file(file: &str, form: DiscoveryForm) -> Option<Cow<'_, str>> {
    let version = match form {
        DiscoveryForm::Legacy => return Some(Cow::Borrowed(file)),
        DiscoveryForm::V2 => "v2",
        DiscoveryForm::V2Beta1 => "v2beta1",
    };
    matches!(file, "_api" | "_apis").then(|| Cow::Owned(format!("{file}.aggregated.{version}")))
}

/// The target of an answer with this `Content-Type`: a document goes to the file of the
/// form the cloud answered in ([`document_file`]); None when the document has no such
/// form (an aggregated `/version`, a Table, protobuf).
pub(crate) fn target_for_answer(
    target: &Arc<CacheTarget>,
    content_type: Option<&str>,
) -> Option<Arc<CacheTarget>> {
    match &**target {
        CacheTarget::NonResource { file } => {
            let form = DiscoveryForm::of_content_type(content_type?)?;
            let file = document_file(file, form)?.into_owned();
            Some(Arc::new(CacheTarget::NonResource { file }))
        }
        _ => Some(Arc::clone(target)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::classify;
    use crate::requester::Port;

    fn req(method: &str, url: &str, ua: &str, accept: Option<&str>) -> ApiRequest {
        let mut headers = vec![("User-Agent".to_owned(), ua.to_owned())];
        if let Some(a) = accept {
            headers.push(("Accept".to_owned(), a.to_owned()));
        }
        let mut r = classify(method, url, &headers).unwrap();
        // kubelet on the plain port at --bind-address: the node.
        r.requester = Requester::new(Port::Plain, None, None, "edge-1");
        r
    }

    fn edge(r: &ApiRequest) -> Route {
        route(r, true, WorkingMode::Edge).unwrap()
    }

    const KUBELET: &str = "kubelet/v1.30.0 (linux/arm) kubernetes/abc";
    const PROTO_JSON: &str = "application/vnd.kubernetes.protobuf,application/json";

    #[test]
    fn a_filtered_request_asks_the_cloud_for_json() {
        use crate::filters::FilterName;
        let chain = Chain::EMPTY.with(FilterName::MasterService);
        // A non-agent's list is not cached: only its filters make the hub ask for JSON.
        let r = req("GET", "/api/v1/services", "custom/1.0", Some(PROTO_JSON));
        let plain = route(&r, false, WorkingMode::Edge).unwrap();
        assert_eq!(plain.upstream_accept, None);
        let filtered = plain.with_filters(chain, r.accept);
        assert_eq!(filtered.upstream_accept, Some("application/json"));
        assert_eq!(filtered.filters, chain);

        // A client that takes protobuf only (or a Table) gets what it asked, unfiltered.
        let r = req(
            "GET",
            "/api/v1/services",
            "custom/1.0",
            Some("application/vnd.kubernetes.protobuf"),
        );
        let route = route(&r, false, WorkingMode::Edge)
            .unwrap()
            .with_filters(chain, r.accept);
        assert_eq!(route.upstream_accept, None);
        assert!(route.filters.is_empty());

        // An empty chain changes nothing.
        let r = req("GET", "/api/v1/services", "custom/1.0", Some(PROTO_JSON));
        let route = edge(&r).with_filters(Chain::EMPTY, r.accept);
        assert!(route.filters.is_empty());
    }

    #[test]
    fn kubelet_pod_list_is_cached_as_json_with_its_selector_scope() {
        let r = req(
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
            KUBELET,
            Some(PROTO_JSON),
        );
        let route = edge(&r);
        assert_eq!(route.upstream_accept, Some("application/json"));
        match Arc::unwrap_or_clone(route.cache.unwrap()) {
            CacheTarget::List {
                collection,
                namespace,
                paged,
                ..
            } => {
                assert_eq!(collection.dir_name(), "pods.v1.core");
                assert_eq!(collection.component, "kubelet");
                assert_eq!(namespace, None);
                assert!(!paged);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(route.local, Local::List);
        assert_eq!(route.identity, Identity::Hub);
    }

    #[test]
    fn what_is_not_cached_and_why() {
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a str,
            Option<&'a str>,
            bool,
            NoCacheReason,
        );
        let cases: &[Case<'_>] = &[
            (
                "GET",
                "/api/v1/pods",
                "curl/8",
                None,
                false,
                NoCacheReason::NotAgent,
            ),
            (
                "GET",
                "/api/v1/pods",
                "kubectl/v1.32",
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
                true,
                NoCacheReason::Transformed,
            ),
            (
                "GET",
                "/api/v1/pods",
                KUBELET,
                Some("application/vnd.kubernetes.protobuf"),
                true,
                NoCacheReason::NotJson,
            ),
            (
                "DELETE",
                "/api/v1/namespaces/a/pods/p",
                KUBELET,
                None,
                true,
                NoCacheReason::Verb,
            ),
            (
                "GET",
                "/api/v1/namespaces/a/pods/p/log",
                KUBELET,
                None,
                true,
                NoCacheReason::Subresource,
            ),
            (
                "GET",
                "/healthz",
                KUBELET,
                None,
                true,
                NoCacheReason::NonResource,
            ),
            (
                "GET",
                "/api/v1/namespaces/a/pods/p/status/x",
                KUBELET,
                None,
                true,
                NoCacheReason::Subresource,
            ),
            (
                "GET",
                "/api/v1/pods",
                "",
                None,
                true,
                NoCacheReason::BadComponent,
            ),
        ];
        for (method, url, ua, accept, agent, want) in cases {
            let r = req(method, url, ua, *accept);
            let got = route(&r, *agent, WorkingMode::Edge)
                .unwrap()
                .cache
                .unwrap_err();
            assert_eq!(got, *want, "{method} {url} {ua}");
        }
        let r = req("GET", "/api/v1/pods", KUBELET, None);
        assert_eq!(
            route(&r, true, WorkingMode::Cloud)
                .unwrap()
                .cache
                .unwrap_err(),
            NoCacheReason::CloudMode
        );
        assert_eq!(
            route(&r, true, WorkingMode::Cloud).unwrap().local,
            Local::Unavailable
        );
    }

    #[test]
    fn an_unusable_component_is_forwarded_and_never_keyed() {
        for ua in ["../x", ".hidden/1", "version/1", "two words/1", "a\\b/1"] {
            let r = req("GET", "/api/v1/pods", ua, None);
            assert!(r.component.valid().is_none(), "{ua}");
            let route = edge(&r);
            assert_eq!(
                route.cache.clone().unwrap_err(),
                NoCacheReason::BadComponent,
                "{ua}"
            );
            assert_eq!(route.local, Local::Unavailable, "{ua}");
            assert_eq!(route.collection(), None, "{ua}");
        }
        let r = req("GET", "/api/v1/pods", "Kube-Proxy/1.30", None);
        assert_eq!(r.component, "kube-proxy");
        let route = edge(&r);
        assert_eq!(route.collection().unwrap().component, "kube-proxy");
    }

    #[test]
    fn the_body_shape_and_writes_follow_the_verb() {
        let shape = |method: &str, url: &str| body_shape(&req(method, url, KUBELET, None));
        assert_eq!(shape("GET", "/api/v1/pods"), BodyShape::List);
        assert_eq!(shape("GET", "/api/v1/pods?watch=1"), BodyShape::WatchStream);
        assert_eq!(shape("GET", "/api/v1/watch/pods"), BodyShape::WatchStream);
        assert_eq!(
            shape("GET", "/api/v1/namespaces/a/pods/p"),
            BodyShape::Object
        );
        assert_eq!(
            shape("POST", "/api/v1/namespaces/a/pods"),
            BodyShape::Object
        );
        let writes = |method: &str, url: &str| req(method, url, KUBELET, None).is_write();
        for (method, url) in [
            ("POST", "/api/v1/namespaces/a/pods"),
            ("PUT", "/api/v1/namespaces/a/pods/p"),
            ("PATCH", "/api/v1/nodes/n/status"),
            ("DELETE", "/api/v1/namespaces/a/pods/p"),
            ("DELETE", "/api/v1/namespaces/a/pods"),
        ] {
            assert!(writes(method, url), "{method} {url}");
            assert_eq!(
                edge(&req(method, url, KUBELET, None)).local,
                Local::WriteRefused
            );
        }
        for (method, url) in [
            ("GET", "/api/v1/pods"),
            ("HEAD", "/api/v1/namespaces/a/pods/p"),
            ("POST", "/api/v1/namespaces/a/pods/p/proxy/x"),
            ("POST", "/version"),
        ] {
            assert!(!writes(method, url), "{method} {url}");
        }
    }

    #[test]
    fn writes_and_status_are_cached_as_objects() {
        for (method, url) in [
            ("PUT", "/api/v1/namespaces/a/pods/p/status"),
            ("PATCH", "/api/v1/nodes/n/status"),
            ("POST", "/api/v1/namespaces/a/configmaps"),
            ("GET", "/api/v1/namespaces/a/pods/p/status"),
        ] {
            let r = req(method, url, KUBELET, None);
            assert!(
                matches!(edge(&r).cache.as_deref(), Ok(CacheTarget::Object { .. })),
                "{method} {url}"
            );
        }
    }

    #[test]
    fn offline_answers_by_verb() {
        let cases: &[(&str, &str, Option<&str>, Local)] = &[
            ("GET", "/api/v1/namespaces/a/pods/p", None, Local::Get),
            ("GET", "/api/v1/pods?watch=true", None, Local::Watch),
            (
                "POST",
                "/api/v1/namespaces/a/configmaps",
                None,
                Local::WriteRefused,
            ),
            (
                "PUT",
                "/api/v1/namespaces/a/configmaps/c",
                None,
                Local::WriteRefused,
            ),
            (
                "PATCH",
                "/api/v1/namespaces/a/configmaps/c",
                None,
                Local::WriteRefused,
            ),
            (
                "DELETE",
                "/api/v1/namespaces/a/configmaps/c",
                None,
                Local::WriteRefused,
            ),
            (
                "DELETE",
                "/api/v1/namespaces/a/configmaps",
                None,
                Local::WriteRefused,
            ),
            (
                "GET",
                "/version",
                None,
                Local::NonResource("version".into()),
            ),
            (
                "GET",
                "/apis/discovery.k8s.io/v1",
                None,
                Local::NonResource("_apis_discovery.k8s.io_v1".into()),
            ),
            (
                "GET",
                "/api/v1/pods",
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
                Local::List,
            ),
            (
                "GET",
                "/api/v1/pods",
                Some("application/vnd.kubernetes.protobuf"),
                Local::Unavailable,
            ),
            (
                "GET",
                "/api/v1/namespaces/a/pods/p/log",
                None,
                Local::Unavailable,
            ),
            ("GET", "/openapi/v2", None, Local::Unavailable),
        ];
        for (method, url, accept, want) in cases {
            let r = req(method, url, KUBELET, *accept);
            assert_eq!(edge(&r).local, *want, "{method} {url}");
        }
        let r = req("GET", "/api/v1/pods", "curl/8", None);
        assert_eq!(
            route(&r, false, WorkingMode::Edge).unwrap().local,
            Local::Unavailable
        );
    }

    #[test]
    fn aggregated_discovery_is_forwarded_as_asked_and_kept_per_form() {
        const KUBECTL: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let v2 = DiscoveryForm::V2.content_type();
        let beta = DiscoveryForm::V2Beta1.content_type();
        let file_of =
            |target: &Arc<CacheTarget>, content_type| match target_for_answer(target, content_type)
                .map(Arc::unwrap_or_clone)
            {
                Some(CacheTarget::NonResource { file }) => Some(file),
                other => {
                    assert!(other.is_none(), "{other:?}");
                    None
                }
            };
        for (url, file) in [("/api", "_api"), ("/apis/", "_apis")] {
            let route = edge(&req("GET", url, KUBELET, Some(KUBECTL)));
            // The client's Accept goes upstream as it is; the answer's form picks the file.
            assert_eq!(route.upstream_accept, None);
            assert_eq!(route.local, Local::NonResource(file.into()));
            let target = route.cache.unwrap();
            assert_eq!(
                file_of(&target, Some(v2)).as_deref(),
                Some(&*format!("{file}.aggregated.v2"))
            );
            assert_eq!(
                file_of(&target, Some(beta)).as_deref(),
                Some(&*format!("{file}.aggregated.v2beta1"))
            );
            assert_eq!(
                file_of(&target, Some("application/json")).as_deref(),
                Some(file)
            );
            assert_eq!(
                file_of(&target, Some("application/vnd.kubernetes.protobuf")),
                None
            );
            assert_eq!(file_of(&target, None), None);
            // A client that takes only the aggregated form is answered offline (or told 406).
            let only = edge(&req("GET", url, KUBELET, Some(v2)));
            assert_eq!(only.local, Local::NonResource(file.into()));
        }
        // Other documents have only the legacy form.
        let route = edge(&req("GET", "/api/v1", KUBELET, Some(KUBECTL)));
        let target = route.cache.unwrap();
        assert_eq!(file_of(&target, Some(v2)), None);
        assert_eq!(
            file_of(&target, Some("application/json")).as_deref(),
            Some("_api_v1")
        );
        assert_eq!(document_file("version", DiscoveryForm::V2), None);
        assert_eq!(document_file("_apis_apps", DiscoveryForm::V2Beta1), None);
        // The same Accept on a resource is a transformation the cache does not keep.
        let pods = edge(&req("GET", "/api/v1/pods", KUBELET, Some(KUBECTL)));
        assert_eq!(pods.cache.unwrap_err(), NoCacheReason::Transformed);
        assert_eq!(pods.local, Local::List);
        // Resource answers are cached whatever their Content-Type says.
        let list = edge(&req("GET", "/api/v1/pods", KUBELET, None))
            .cache
            .unwrap();
        assert!(matches!(
            target_for_answer(&list, None).as_deref(),
            Some(CacheTarget::List { .. })
        ));
    }

    #[test]
    fn a_full_read_of_the_metadata_views_directory_is_not_cached() {
        // `meta.k8s.io/v1` `partialobjectmetadatas` would be cached in the directory of every
        // metadata view; the cloud's 404 would prune them, and the store refuses the key.
        for url in [
            "/apis/meta.k8s.io/v1/partialobjectmetadatas",
            "/apis/meta.k8s.io/v1/partialobjectmetadatas?watch=1",
            "/apis/meta.k8s.io/v1/namespaces/a/partialobjectmetadatas/x",
        ] {
            let r = edge(&req("GET", url, KUBELET, Some("application/json")));
            assert_eq!(r.cache.unwrap_err(), NoCacheReason::UnsafeKey, "{url}");
        }
        // Another version is only a kind whose name looks alike.
        let other = edge(&req(
            "GET",
            "/apis/meta.k8s.io/v1beta1/partialobjectmetadatas",
            KUBELET,
            Some("application/json"),
        ));
        assert!(other.cache.is_ok(), "{other:?}");
    }

    #[test]
    fn metadata_reads_are_cached_and_answered_in_their_view() {
        let list_accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        let get_accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        let ua = "coredns/1.11";
        let metadata_view = |route: &Route| {
            let c = route.collection().expect("a collection");
            (c.view, c.dir_name())
        };
        let meta_pods = (
            View::Metadata,
            "partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core".to_owned(),
        );

        let list = edge(&req(
            "GET",
            "/api/v1/pods?labelSelector=app%3Dweb",
            ua,
            Some(list_accept),
        ));
        assert!(
            matches!(list.cache.as_deref(), Ok(CacheTarget::List { .. })),
            "{list:?}"
        );
        assert_eq!(metadata_view(&list), meta_pods);
        assert_eq!(
            list.upstream_accept,
            Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )
        );
        assert_eq!(list.local, Local::List);
        assert!(list.filters.is_empty());

        let one = edge(&req(
            "GET",
            "/api/v1/namespaces/a/pods/web",
            ua,
            Some(get_accept),
        ));
        assert!(
            matches!(one.cache.as_deref(), Ok(CacheTarget::Object { .. })),
            "{one:?}"
        );
        assert_eq!(metadata_view(&one), meta_pods);
        assert_eq!(
            one.upstream_accept,
            Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")
        );
        assert_eq!(one.local, Local::Get);

        // A watch is cached, and rebuilt after a 410 from a list in the metadata form.
        let watch = edge(&req("GET", "/api/v1/pods?watch=1", ua, Some(get_accept)));
        assert!(
            matches!(watch.cache.as_deref(), Ok(CacheTarget::Watch { .. })),
            "{watch:?}"
        );
        assert_eq!(metadata_view(&watch), meta_pods);
        assert_eq!(watch.resume, Some(Resume::Rebuild));
        assert_eq!(watch.local, Local::Watch);

        // The name and namespace are in the metadata; anything else is the cloud's to match.
        let by_name = edge(&req(
            "GET",
            "/api/v1/pods?fieldSelector=metadata.name%3Dweb,metadata.namespace%3Da",
            ua,
            Some(list_accept),
        ));
        assert!(by_name.cache.is_ok());
        assert_eq!(by_name.local, Local::List);
        let by_node = edge(&req(
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
            ua,
            Some(list_accept),
        ));
        assert_eq!(by_node.cache.unwrap_err(), NoCacheReason::MetadataField);
        assert_eq!(by_node.local, Local::Unavailable);
        assert_eq!(
            by_node.upstream_accept, None,
            "neither cached nor resumed: passed on as asked"
        );

        // A list's form for a get (and the other way round) is the apiserver's 406.
        let mismatched = edge(&req(
            "GET",
            "/api/v1/namespaces/a/pods/web",
            ua,
            Some(list_accept),
        ));
        assert_eq!(mismatched.cache.unwrap_err(), NoCacheReason::Transformed);
        assert_eq!(mismatched.local, Local::Unavailable);
        // Protobuf only: passed through, never answered from a cache of JSON.
        let proto = edge(&req(
            "GET",
            "/api/v1/pods",
            ua,
            Some(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            ),
        ));
        assert_eq!(proto.cache.unwrap_err(), NoCacheReason::Transformed);
        assert_eq!(
            (proto.local, proto.upstream_accept),
            (Local::Unavailable, None)
        );
        // Its watch's protobuf frames are not cut into events: it ends with its upstream.
        let proto_watch = edge(&req(
            "GET",
            "/api/v1/pods?watch=1",
            ua,
            Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
        ));
        assert_eq!(proto_watch.resume, None);

        // The same component's plain JSON read: the full view.
        let full = edge(&req("GET", "/api/v1/pods", ua, Some(PROTO_JSON)));
        assert_eq!(full.collection().map(|c| c.view), Some(View::Full));
        assert_eq!(
            full.collection().map(|c| c.dir_name()).as_deref(),
            Some("pods.v1.core")
        );

        // A non-agent's metadata read is the cloud's alone; offline, nothing answers it.
        let stranger = route(
            &req("GET", "/api/v1/pods", ua, Some(list_accept)),
            false,
            WorkingMode::Edge,
        )
        .unwrap();
        assert_eq!(stranger.cache.unwrap_err(), NoCacheReason::NotAgent);
        assert_eq!(
            (stranger.local, stranger.upstream_accept),
            (Local::Unavailable, None)
        );
    }

    #[test]
    fn resume_mode_by_agent_accept_and_mode() {
        let watch = "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dedge-1";
        // A cache agent's JSON watch is rebuilt from its cache after a 410.
        let r = req("GET", watch, KUBELET, None);
        assert_eq!(edge(&r).resume, Some(Resume::Rebuild));
        let r = req("GET", watch, KUBELET, Some(PROTO_JSON));
        let agent = edge(&r);
        assert_eq!(agent.resume, Some(Resume::Rebuild));
        assert_eq!(agent.upstream_accept, Some("application/json"));
        // A Table watch is not cached: resumed only.
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        let r = req("GET", watch, KUBELET, Some(table));
        assert_eq!(edge(&r).resume, Some(Resume::ResumeOnly));
        // A non-agent is resumed only, and asks the cloud for JSON to follow its events.
        let r = req("GET", watch, "my-controller/1.0", Some(PROTO_JSON));
        let other = route(&r, false, WorkingMode::Edge).unwrap();
        assert_eq!(other.resume, Some(Resume::ResumeOnly));
        assert_eq!(other.upstream_accept, Some("application/json"));
        // Its plain list is not resumable, and asks for what the client asked.
        let r = req("GET", "/api/v1/pods", "my-controller/1.0", Some(PROTO_JSON));
        let list = route(&r, false, WorkingMode::Edge).unwrap();
        assert_eq!((list.resume, list.upstream_accept), (None, None));
        // Protobuf frames are not cut: as before.
        let proto = Some("application/vnd.kubernetes.protobuf;type=watch");
        let r = req("GET", watch, KUBELET, proto);
        assert_eq!(edge(&r).resume, None);
        // A list of an agent is no watch.
        let r = req("GET", "/api/v1/pods", KUBELET, None);
        assert_eq!(edge(&r).resume, None);
        // Cloud mode passes watches on as they come.
        let r = req("GET", watch, KUBELET, None);
        assert_eq!(route(&r, true, WorkingMode::Cloud).unwrap().resume, None);
    }

    #[test]
    fn the_hub_asks_for_gzip_on_gets_and_lists_only() {
        for url in [
            "/api/v1/pods",
            "/api/v1/namespaces/default/pods/p",
            "/api/v1/namespaces/default/pods/p/status",
            "/version",
            "/openapi/v2",
        ] {
            assert!(edge(&req("GET", url, KUBELET, None)).upstream_gzip, "{url}");
        }
        for (method, url) in [
            ("GET", "/api/v1/pods?watch=1"),
            ("GET", "/api/v1/watch/pods"),
            ("GET", "/api/v1/namespaces/default/pods/p/log"),
            ("GET", "/api/v1/namespaces/default/pods/p/log?follow=true"),
            ("GET", "/api/v1/namespaces/default/pods/p/proxy/metrics"),
            ("GET", "/api/v1/nodes/n/proxy/stats"),
            ("HEAD", "/api/v1/pods"),
            ("POST", "/api/v1/namespaces/default/pods"),
            ("DELETE", "/api/v1/namespaces/default/pods/p"),
        ] {
            assert!(
                !edge(&req(method, url, KUBELET, None)).upstream_gzip,
                "{method} {url}"
            );
        }
        let mut upgrade = req(
            "GET",
            "/api/v1/namespaces/default/pods/p/exec",
            KUBELET,
            None,
        );
        upgrade.upgrade = true;
        assert!(!edge(&upgrade).upstream_gzip);
    }

    #[test]
    fn deadlines_follow_the_request() {
        let w = req(
            "GET",
            "/api/v1/pods?watch=1&timeoutSeconds=300",
            KUBELET,
            None,
        );
        assert_eq!(
            edge(&w).deadline,
            Deadline::Stream(Duration::from_secs(360))
        );
        let w = req("GET", "/api/v1/pods?watch=1", KUBELET, None);
        assert_eq!(
            edge(&w).deadline,
            Deadline::Stream(WATCH_DEFAULT + WATCH_MARGIN)
        );
        let g = req("GET", "/api/v1/pods?timeout=30s", KUBELET, None);
        assert_eq!(
            edge(&g).deadline,
            Deadline::Bounded(Duration::from_secs(45))
        );
        let g = req("GET", "/api/v1/pods", KUBELET, None);
        assert_eq!(edge(&g).deadline, Deadline::Bounded(REQUEST_DEADLINE));
        // Absurd timeouts are clamped (no overflow), and 0 means the default.
        for url in [
            "/api/v1/pods?watch=1&timeoutSeconds=18446744073709551615",
            "/version?timeout=99999999999999999999h",
            "/api/v1/pods?timeout=1e400s",
        ] {
            let r = req("GET", url, KUBELET, None);
            let _ = edge(&r).deadline;
        }
        let w = req(
            "GET",
            "/api/v1/pods?watch=1&timeoutSeconds=18446744073709551615",
            KUBELET,
            None,
        );
        assert_eq!(
            w.query.timeout_seconds,
            Some(crate::request::MAX_TIMEOUT_SECONDS)
        );
        let w = req(
            "GET",
            "/api/v1/pods?watch=1&timeoutSeconds=0",
            KUBELET,
            None,
        );
        assert_eq!(
            edge(&w).deadline,
            Deadline::Stream(WATCH_DEFAULT + WATCH_MARGIN)
        );
        let f = req(
            "GET",
            "/api/v1/namespaces/a/pods/p/log?follow=true",
            KUBELET,
            None,
        );
        assert_eq!(edge(&f).deadline, Deadline::Stream(STREAM_DEADLINE));
    }

    #[test]
    fn events_are_never_cached_and_created_offline_without_a_trace() {
        for (method, url) in [
            ("POST", "/api/v1/namespaces/a/events"),
            ("PATCH", "/api/v1/namespaces/a/events/e"),
            ("PUT", "/api/v1/namespaces/a/events/e"),
            ("GET", "/api/v1/namespaces/a/events/e"),
            ("GET", "/api/v1/events"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/a/events"),
            ("PATCH", "/apis/events.k8s.io/v1/namespaces/a/events/e"),
        ] {
            let r = req(method, url, KUBELET, None);
            assert_eq!(
                edge(&r).cache.unwrap_err(),
                NoCacheReason::Event,
                "{method} {url}"
            );
        }
        for url in [
            "/api/v1/namespaces/a/events",
            "/apis/events.k8s.io/v1/namespaces/a/events",
        ] {
            assert_eq!(edge(&req("POST", url, KUBELET, None)).local, Local::Echo);
        }
        // Another group's kind of the same name is an ordinary kind.
        let r = req(
            "POST",
            "/apis/example.com/v1/namespaces/a/events",
            KUBELET,
            None,
        );
        assert!(matches!(
            edge(&r).cache.as_deref(),
            Ok(CacheTarget::Object { .. })
        ));
        assert_eq!(edge(&r).local, Local::WriteRefused);
    }

    #[test]
    fn token_requests_are_kept_and_answered_offline() {
        let url = "/api/v1/namespaces/a/serviceaccounts/builder/token";
        let r = req(
            "POST",
            url,
            KUBELET,
            Some("application/vnd.kubernetes.protobuf, */*"),
        );
        let route = edge(&r);
        match Arc::unwrap_or_clone(route.cache.unwrap()) {
            CacheTarget::Token(t) => assert_eq!(
                t,
                TokenTarget {
                    component: Component::KUBELET,
                    namespace: "a".into(),
                    name: "builder".into(),
                    digest: None
                }
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(route.local, Local::Token);
        assert_eq!(route.upstream_accept, Some("application/json"));
        // Not a TokenRequest: other verbs and subresources of service accounts.
        for (method, url) in [
            ("GET", url),
            ("POST", "/api/v1/namespaces/a/serviceaccounts/builder/other"),
            ("POST", "/api/v1/namespaces/a/pods/p/token"),
        ] {
            let r = req(method, url, KUBELET, None);
            assert!(
                !matches!(edge(&r).cache.as_deref(), Ok(CacheTarget::Token(_))),
                "{method} {url}"
            );
            assert_ne!(edge(&r).local, Local::Token, "{method} {url}");
        }
        let r = req(
            "POST",
            url,
            KUBELET,
            Some("application/vnd.kubernetes.protobuf"),
        );
        assert_eq!(edge(&r).local, Local::Unavailable, "cannot read JSON");
        let r = req("POST", url, "curl/8", None);
        assert_eq!(
            route_for(&r, false).cache.unwrap_err(),
            NoCacheReason::NotAgent
        );
    }

    fn route_for(r: &ApiRequest, agent: bool) -> Route {
        route(r, agent, WorkingMode::Edge).unwrap()
    }

    #[test]
    fn the_local_answer_reads_the_key_route_made_once() {
        let key = |url: &str, accept: Option<&str>, method: &str| {
            let route = edge(&req(method, url, KUBELET, accept));
            let made_by_cache = route.cache.as_ref().is_ok_and(|t| t.collection().is_some());
            let collection = route.collection().map(CollectionKey::dir_name);
            (collection, made_by_cache, route.local_collection.is_some())
        };
        let table = Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
        let pods = Some("pods.v1.core".to_owned());
        // A cached answer's key is the cache target's; no second copy is made.
        assert_eq!(
            key("/api/v1/pods", None, "GET"),
            (pods.clone(), true, false)
        );
        assert_eq!(
            key("/api/v1/namespaces/a/pods/p", None, "PUT"),
            (pods.clone(), true, false)
        );
        // An answer not cached but answered locally has its own.
        assert_eq!(
            key("/api/v1/pods", table, "GET"),
            (pods.clone(), false, true)
        );
        assert_eq!(
            key("/api/v1/namespaces/a/pods/p", None, "HEAD"),
            (pods, false, true)
        );
        assert_eq!(
            key("/api/v1/namespaces/a/events/e", None, "GET"),
            (Some("events.v1.core".to_owned()), false, true)
        );
        // What needs no collection has none.
        for (method, url) in [
            ("POST", "/api/v1/namespaces/a/events"),
            ("DELETE", "/api/v1/namespaces/a/pods/p"),
            ("POST", "/api/v1/namespaces/a/serviceaccounts/s/token"),
            ("GET", "/version"),
            ("GET", "/api/v1/namespaces/a/pods/p/log"),
        ] {
            assert_eq!(key(url, None, method).0, None, "{method} {url}");
        }
        let r = req("GET", "/api/v1/pods", "curl/8", None);
        assert_eq!(
            route(&r, false, WorkingMode::Edge).unwrap().collection(),
            None
        );
    }

    #[test]
    fn a_request_without_credentials_off_the_plain_port_opens_no_cache() {
        for port in [Port::PlainDummy, Port::Secure] {
            let mut r = req("GET", "/api/v1/namespaces/a/secrets/s", KUBELET, None);
            r.requester = Requester::new(port, None, None, "edge-1");
            let route = edge(&r);
            assert_eq!(route.identity, Identity::Anonymous, "{port:?}");
            assert!(
                matches!(route.cache, Err(NoCacheReason::Anonymous)),
                "{port:?}"
            );
            assert_eq!(route.local, Local::Unavailable, "{port:?}");
        }
        // On the plain port at --bind-address the same request is the node's.
        let r = req("GET", "/api/v1/namespaces/a/secrets/s", KUBELET, None);
        assert_eq!(edge(&r).identity, Identity::Hub);
        assert_eq!(edge(&r).local, Local::Get);
    }

    #[test]
    fn offline_token_requests_are_the_nodes_alone() {
        let url = "/api/v1/namespaces/a/serviceaccounts/builder/token";
        let mut r = req("POST", url, KUBELET, None);
        assert_eq!(edge(&r).local, Local::Token);
        r.requester = Requester::new(Port::Plain, Some("Bearer pod"), None, "edge-1");
        assert_eq!(edge(&r).local, Local::WriteRefused);
        r.requester = Requester::new(Port::Secure, None, None, "edge-1");
        assert_eq!(edge(&r).local, Local::Unavailable);
    }

    #[test]
    fn bearer_requests_keep_their_identity() {
        let mut r = req("GET", "/api/v1/pods", KUBELET, None);
        r.requester = Requester::new(Port::Plain, Some("Bearer t"), None, "edge-1");
        assert_eq!(edge(&r).identity, Identity::Client);
    }

    #[test]
    fn later_pages_delete_nothing() {
        // kubelet asks for limit=500&resourceVersion=0 and gets the whole list: not paged.
        let r = req(
            "GET",
            "/api/v1/pods?limit=500&resourceVersion=0",
            KUBELET,
            None,
        );
        assert!(matches!(
            edge(&r).cache.as_deref(),
            Ok(CacheTarget::List { paged: false, .. })
        ));
        assert_paged("/api/v1/pods?limit=500&continue=abc");
        // The apiserver reads an escaped key as the key (issue 11, item 7).
        assert_paged("/api/v1/pods?limit=500&c%6Fntinue=abc");
    }

    /// A kubelet list of `url` is cached as one that deletes nothing.
    fn assert_paged(url: &str) {
        let r = req("GET", url, KUBELET, None);
        assert!(
            matches!(
                edge(&r).cache.as_deref(),
                Ok(CacheTarget::List { paged: true, .. })
            ),
            "{url}"
        );
    }

    #[test]
    fn a_list_the_cloud_may_read_otherwise_deletes_nothing() {
        assert_paged("/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1;x=y");
    }

    #[test]
    fn an_escaped_selector_key_is_the_list_scope() {
        let r = req(
            "GET",
            "/api/v1/pods?field%53elector=spec.nodeName%3Dnowhere",
            KUBELET,
            None,
        );
        let Ok(CacheTarget::List { selectors, .. }) = edge(&r).cache.map(Arc::unwrap_or_clone)
        else {
            panic!("a cached list");
        };
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"nodeName": "edge-1"}});
        assert!(
            !selectors.matches(&pod),
            "edge-1 is outside spec.nodeName=nowhere"
        );
    }

    #[test]
    fn bad_selectors_are_refused() {
        let r = req(
            "GET",
            "/api/v1/pods?labelSelector=a%20in%20(",
            KUBELET,
            None,
        );
        assert_eq!(route(&r, true, WorkingMode::Edge).unwrap_err().code, 400);
        let mut r = req("GET", "/api/v1/pods", KUBELET, None);
        let many: Vec<String> = (0..10_000).map(|i| format!("k{i}=v")).collect();
        r.query.label_selector = Some(many.join(","));
        assert_eq!(route(&r, true, WorkingMode::Edge).unwrap_err().code, 400);
    }
}
