//! Offline answers: what the hub says from its disk cache while the cloud is unreachable
//! (README.md's offline table). Gets return the cached object (a 404 that says whether the
//! object was never cached for the component or is gone as of its last whole list), lists the
//! cached collection filtered by the request's label and field selectors (which YurtHub
//! ignores) — only for a scope the component listed whole (`cache/synced.rs`: a get caches
//! one object, never that there are no others) — watches are held open
//! without events, a create, update, patch or delete is a 503 and nothing is stored (unlike
//! YurtHub: nothing a client sends is kept as the cloud's truth), and everything else gets a
//! `Status`. Two answers keep a rebooted node's pods: the node's TokenRequest gets the cached
//! token or a one-minute token made here (`tokens.rs`), and kubelet's pod list that finds
//! nothing is a 404, never an empty list. Event creates are echoed and never stored.
//!
//! Who is answered: the node (`Requester::is_node`) everything cached; a client with its own
//! credential only what that credential read from the cloud while online (`grants.rs`),
//! decided before the cache is read; a client without credentials where the node's identity
//! is not lent nothing (its route has no local answer).
//!
//! Lists stream: objects are read from disk one at a time and written out as they pass the
//! selectors, so an offline list of thousands of pods never sits whole in memory. Only the
//! collection's own directory is read. Nothing here writes the cache.
//!
//! The endpoints overlay (issue 30, `overlay/`): kubelet's pod status writes are read before
//! their 503 (`capture.rs`), and EndpointSlices and Endpoints are served rewritten to this
//! node's pods as kubelet reports them — gets, lists, and held watches, which get a MODIFIED
//! of each object the overlay changes and, when the cloud is back, the cloud's object again.
//! Nothing of it is ever written to the cache.
//!
//! Every answer read from a cached collection (a get, a list, a held watch) says how old the
//! collection is: `X-Tinyhub-Cache-Age: <seconds>` since it last heard the cloud's word
//! (`cache/synced.rs`), left off when that is unknown (no record, a clock behind it).
//!
//! The keys come from the route (`Route::collection`), made once. `mod.rs` dispatches and
//! answers gets, watches, writes and documents; `list.rs` streams lists; `token.rs` answers
//! TokenRequests; `grants.rs` what a client with its own credential may be answered;
//! `capture.rs` hands kubelet's pod writes to the overlay.

mod capture;
mod grants;
mod list;

pub(crate) use grants::scope_of;
pub(crate) use list::kubelet_pods;
mod token;

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cache::grants::{Grants, Scope};
use crate::cache::key::{CollectionKey, ObjectKey, View};
use crate::cache::object::starts_object;
use crate::cache::store::{Store, StoreError};
use crate::cache::synced::Synced;
use crate::health::Backends;
use crate::names;
use crate::overlay::{CloudState, EndpointKind, Overlay, Snapshot, WatchView};
use crate::request::{self, ApiRequest, DiscoveryForm, ResourcePath, Target};
use crate::route::{Local, NoCacheReason, Route, document_file};
use crate::selector::Selectors;
use crate::server::{BodyWriter, Exchange, Length};
use crate::status::Status;
use crate::watchcache::push_event_line;
use grants::Allowed;

/// How often a held watch checks for the cloud and shutdown (a vanished client is noticed at
/// once).
const WATCH_TICK: Duration = Duration::from_secs(1);

/// The offline answerer.
pub(crate) struct Offline {
    /// The disk cache, read only here.
    pub store: Arc<Store>,
    /// To end held watches when the cloud is back.
    pub backends: Arc<Backends>,
    /// To end held watches on shutdown.
    pub shutdown: Arc<AtomicBool>,
    /// What each client credential read online: all it is answered offline (`grants.rs`).
    pub grants: Arc<Grants>,
    /// The endpoints overlay: kubelet's offline pod writes feed it, EndpointSlices and
    /// Endpoints are served through it.
    pub overlay: Arc<Overlay>,
    /// When each cached kind last heard the cloud: the age each answer carries.
    pub synced: Arc<Synced>,
}

/// The header an answer from the cache says its age in, in whole seconds.
pub(crate) const CACHE_AGE: &str = "X-Tinyhub-Cache-Age";

/// A JSON answer's head fields: its content type, and the cache's age when known.
pub(crate) fn json_head(age: Option<&str>) -> JsonHead<'_> {
    let json = ("Content-Type", "application/json");
    match age {
        Some(age) => JsonHead {
            fields: [json, (CACHE_AGE, age)],
            len: 2,
        },
        None => JsonHead {
            fields: [json, json],
            len: 1,
        },
    }
}

/// [`json_head`]'s fields, without an allocation per answer: a slice of them by deref.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JsonHead<'a> {
    fields: [(&'static str, &'a str); 2],
    len: usize,
}

impl<'a> std::ops::Deref for JsonHead<'a> {
    type Target = [(&'static str, &'a str)];

    fn deref(&self) -> &Self::Target {
        &self.fields[..self.len]
    }
}

impl Offline {
    /// Answers `req` from the cache, in the collection `route` keyed; returns the HTTP
    /// status sent.
    pub(crate) fn answer(&self, ex: Exchange<'_>, req: &ApiRequest, route: &Route) -> u16 {
        // A client with its own credential reads only what that credential read online;
        // decided before anything is read.
        let allowed = match route.local {
            Local::Get | Local::List | Local::Watch => self.allowed(req),
            _ => Allowed::All,
        };
        let only = match allowed {
            Allowed::All => None,
            Allowed::IfMatches(selectors) => Some(selectors),
            Allowed::Refused(status) => {
                // The request's own log line says 403; this says why.
                log::debug!(
                    "offline: refused a {} of {} to a credential that did not read it online",
                    req.verb.as_str(),
                    req.resource().map_or("", |r| r.gvr.resource.as_str())
                );
                let _ = ex.send_status(&status);
                return status.code;
            }
        };
        let result = match (&route.local, req.resource(), route.collection()) {
            (Local::NonResource(file), _, _) => self.document(ex, req, file),
            (Local::WriteRefused, _, _) => {
                // kubelet's pod status is read for the endpoints overlay first; the answer
                // stays the 503 (kubelet keeps the status and sends it again).
                let mut ex = ex;
                self.capture_pod(&mut ex, req);
                Err((
                    ex,
                    Status::service_unavailable(
                        "the cloud apiserver is unreachable: writes wait until it is back (nothing is stored)",
                    ),
                ))
            }
            (Local::Get, Some(path), Some(collection)) => {
                self.get(ex, path, collection, only.as_deref())
            }
            (Local::List, Some(path), Some(collection)) => {
                self.list(ex, req, path, collection, route)
            }
            (Local::Watch, Some(path), Some(collection)) => {
                self.watch(ex, req, path, collection, route)
            }
            (Local::Echo, Some(path), _) => self.echo_event(ex, path),
            (Local::Token, Some(path), _) => self.token(ex, req, path),
            _ => Err((ex, unanswerable(req, route))),
        };
        match result {
            Ok(status) => status,
            Err((ex, status)) => {
                let _ = ex.send_status(&status);
                status.code
            }
        }
    }

    /// A cached document in the first form the client takes that is cached, as the apiserver
    /// picks from the `Accept` (`/api` and `/apis` are kept in legacy and aggregated forms).
    /// A document cached only in forms the client does not take is a 406 naming them, as the
    /// apiserver says it, unless the client takes the legacy form (which an apiserver always
    /// has); `/api` or `/apis` not cached in a form the client takes is then a 503 (a 404
    /// would tell client-go that the server has no such API).
    fn document<'c>(&self, ex: Exchange<'c>, req: &ApiRequest, file: &str) -> Answered<'c> {
        let read = |form| -> Result<Option<Vec<u8>>, StoreError> {
            match document_file(file, form) {
                Some(name) => self.store.get_non_resource(&name),
                None => Ok(None),
            }
        };
        let accept = req.accept.discovery();
        for form in accept.forms() {
            match read(form) {
                Ok(Some(bytes)) => {
                    let _ = ex.send(
                        200,
                        &[("Content-Type", form.content_type()), ("Vary", "Accept")],
                        &bytes,
                    );
                    return Ok(200);
                }
                Ok(None) => {}
                Err(e) => return Err((ex, e.status())),
            }
        }
        let mut cached = Vec::new();
        for form in DiscoveryForm::ALL {
            match read(form) {
                Ok(Some(_)) => cached.push(form.content_type()),
                Ok(None) => {}
                Err(e) => return Err((ex, e.status())),
            }
        }
        let root = document_file(file, DiscoveryForm::V2).is_some();
        // An apiserver always has the legacy form: a client that takes it is never refused,
        // the hub only lacks the document (below). One that takes only aggregated forms
        // gets what an apiserver without them says, and client-go falls back.
        let status = if !cached.is_empty() && !accept.takes(DiscoveryForm::Legacy) {
            Status::new(
                406,
                "NotAcceptable",
                format!(
                    "only the following media types are accepted: {}",
                    cached.join(", ")
                ),
            )
        } else if root {
            let path = match &req.target {
                Target::NonResource(path) => path.as_str(),
                Target::Resource(_) => file,
            };
            Status::service_unavailable(format!(
                "the cloud apiserver is unreachable and {path} is not cached"
            ))
        } else {
            Status::not_found_message(format!("{file} is not cached"))
        };
        Err((ex, status))
    }

    /// A cached object; with `only`, only when it matches one of those selectors (else the
    /// refusal of a credential that did not read it).
    fn get<'c>(
        &self,
        ex: Exchange<'c>,
        path: &ResourcePath,
        collection: &CollectionKey,
        only: Option<&[Selectors]>,
    ) -> Answered<'c> {
        let Some(name) = path.name.clone() else {
            return Err((ex, Status::bad_request("no object name")));
        };
        let key = ObjectKey {
            collection: collection.clone(),
            namespace: path.namespace.clone(),
            name,
        };
        let refused = || {
            let scope = Scope::object(
                &path.gvr.group,
                &path.gvr.resource,
                path.namespace.as_deref(),
                &key.name,
            );
            grants::forbidden(&scope)
        };
        let found = self.store.get(&key);
        if let Some(only) = only {
            let matches = |bytes: &[u8]| {
                serde_json::from_slice::<serde_json::Value>(bytes)
                    .is_ok_and(|v| only.iter().any(|s| s.matches(&v)))
            };
            if !matches!(&found, Ok(Some(bytes)) if matches(bytes)) {
                return Err((ex, refused()));
            }
        }
        match found {
            Ok(Some(bytes)) if is_json_object(&bytes) => {
                let rewritten = self
                    .endpoints_snapshot(path, collection)
                    .and_then(|(kind, snapshot)| snapshot.rewrite(kind, &bytes));
                let age = self.age(collection);
                let body = rewritten.as_deref().unwrap_or(&bytes);
                send_json(ex, 200, body, age.as_deref())
            }
            Ok(Some(_)) => {
                log::warn!("cache file of {key:?} is not valid JSON; not serving it");
                Err((
                    ex,
                    Status::internal(format!("the cached copy of {} is damaged", key.name)),
                ))
            }
            Ok(None) => Err((ex, self.not_in_cache(path, collection, &key.name))),
            Err(e) => Err((ex, e.status())),
        }
    }

    /// The 404 of a get the cache cannot answer (YurtHub's status): the apiserver's message
    /// when a whole list without selectors holding the object was cached without it (it did
    /// not exist as of that list: what the apiserver said then), else one that says it was
    /// never cached for the component — not that the cloud deleted it.
    fn not_in_cache(&self, path: &ResourcePath, collection: &CollectionKey, name: &str) -> Status {
        let mut status = Status::not_found(&path.gvr.group, &path.gvr.resource, name);
        let component = &collection.component;
        // Known gone: the apiserver's own words, which were true as of that list.
        if !self
            .synced
            .absent_as_listed(collection, path.namespace.as_deref())
        {
            status.message = format!(
                "{}: it was never cached for {component}, and the cloud apiserver is unreachable",
                status.message
            );
        }
        status
    }

    fn watch<'c>(
        &self,
        ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
        collection: &CollectionKey,
        route: &Route,
    ) -> Answered<'c> {
        if !self.store.has_collection(collection) {
            return Err((ex, not_cached(req, path)));
        }
        match self.overlaid_kind(path, collection) {
            Some(kind) => {
                let scope = WatchScope {
                    req,
                    path,
                    collection,
                    selectors: &route.selectors,
                };
                Ok(self.hold_overlaid(ex, &scope, kind))
            }
            None => Ok(self.hold(ex, req, Duration::ZERO, self.age(collection))),
        }
    }

    /// How old the cached `collection` is, as [`CACHE_AGE`] says it; None when unknown.
    pub(crate) fn age(&self, collection: &CollectionKey) -> Option<String> {
        self.synced.age(collection).map(|age| age.to_string())
    }

    /// The overlay's snapshot for an answer of `path` from `collection`, when it is of a kind
    /// the overlay rewrites, the overlay is on, and the answer holds whole objects (a
    /// metadata view has no endpoints to rewrite).
    fn endpoints_snapshot(
        &self,
        path: &ResourcePath,
        collection: &CollectionKey,
    ) -> Option<(EndpointKind, Arc<Snapshot>)> {
        let kind = self.overlaid_kind(path, collection)?;
        Some((kind, self.overlay.snapshot(self.cloud())))
    }

    /// The endpoints kind of `path` when the overlay rewrites its answers from `collection`:
    /// it is on and the collection holds whole objects (a metadata view has no endpoints).
    fn overlaid_kind(
        &self,
        path: &ResourcePath,
        collection: &CollectionKey,
    ) -> Option<EndpointKind> {
        let overlaid = collection.view == View::Full && self.overlay.enabled();
        EndpointKind::of(&path.gvr).filter(|_| overlaid)
    }

    /// The cloud as the overlay needs it now: its returns so far, and whether a server is
    /// usable (the overlay is never on then).
    fn cloud(&self) -> CloudState {
        CloudState {
            recoveries: self.backends.recoveries(),
            usable: self.backends.any_healthy(),
        }
    }

    /// Holds a watch of EndpointSlices or Endpoints as [`Offline::hold`] does, and sends
    /// the overlay's changes on it: at its start and at each tick where the overlay moved, a
    /// MODIFIED (at the object's own cloud resourceVersion) of each stored object in its
    /// scope whose bytes differ from what the client was last sent ([`WatchView::pass`]).
    /// When the cloud is back, the tick's snapshot is the dropped overlay: its pass gives back
    /// the cloud's object of every one sent rewritten, before the end.
    fn hold_overlaid(&self, ex: Exchange<'_>, scope: &WatchScope<'_>, kind: EndpointKind) -> u16 {
        let mut view = WatchView::new(kind);
        let mut tick = |writer: &mut BodyWriter<'_>, recoveries: u64| {
            let cloud = CloudState {
                recoveries,
                ..self.cloud()
            };
            let snapshot = self.overlay.snapshot(cloud);
            !view.pass_due(&snapshot) || self.pass(writer, scope, &mut view, &snapshot)
        };
        let age = self.age(scope.collection);
        self.hold_with(ex, scope.req, Duration::ZERO, age, &mut tick)
    }

    /// One pass of `view` over the stored objects of `scope`, read from disk one at a time
    /// (none when the pass can send nothing): the MODIFIED events it calls for, written in
    /// batches of about [`list::LIST_FLUSH`] as they are found; false when the client is gone.
    fn pass(
        &self,
        writer: &mut BodyWriter<'_>,
        scope: &WatchScope<'_>,
        view: &mut WatchView,
        snapshot: &Snapshot,
    ) -> bool {
        let Some(mut pass) = view.pass(snapshot) else {
            return true;
        };
        let mut lines = Vec::new();
        let objects =
            self.watched_objects(scope.req, scope.path, scope.collection, scope.selectors);
        for object in objects {
            if let Some(modified) = pass.object(&object) {
                push_event_line(&mut lines, "MODIFIED", &modified);
            }
            if lines.len() >= list::LIST_FLUSH {
                if writer.write(&lines).is_err() {
                    return false;
                }
                lines.clear();
            }
        }
        lines.is_empty() || writer.write(&lines).is_ok()
    }

    /// Holds a watch open with no events (status 200): until its `timeoutSeconds` (else a
    /// random 30–60 minutes), shutdown, or a server usable again; at once when one is usable
    /// already — but not before `at_least` (a client that watches again at once must not
    /// spin). kubelet's lease watches are held so online and offline (YurtHub's local watch).
    /// `age`: the cache's, for the head, when the watch is of a cached collection.
    pub(crate) fn hold(
        &self,
        ex: Exchange<'_>,
        req: &ApiRequest,
        at_least: Duration,
        age: Option<String>,
    ) -> u16 {
        self.hold_with(ex, req, at_least, age, &mut |_, _| true)
    }

    /// [`Offline::hold`], with the cache's `age` in its head when it holds a cached
    /// collection, calling `tick` with the writer and the cloud's recoveries at the start and
    /// every [`WATCH_TICK`], before the hold may end; `tick` says false when the client is
    /// gone.
    fn hold_with(
        &self,
        ex: Exchange<'_>,
        req: &ApiRequest,
        at_least: Duration,
        age: Option<String>,
        tick: &mut dyn FnMut(&mut BodyWriter<'_>, u64) -> bool,
    ) -> u16 {
        let Ok(mut writer) = ex.start(200, &json_head(age.as_deref()), Length::Streamed) else {
            return 200;
        };
        let hold = req
            .query
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or_else(random_watch_duration);
        let started = Instant::now();
        // The hold ends when a server becomes usable after it started, not whenever a flag
        // says healthy: a flag not probed since the cloud died still does. A server usable
        // already (it came back while this request was on its way, or another one is up)
        // ends it at once: the client's next watch goes there.
        let recoveries = self.backends.recoveries();
        let usable_already = self.backends.any_healthy();
        let ended_cleanly = loop {
            let left = hold.saturating_sub(started.elapsed());
            if left.is_zero() || self.shutdown.load(Ordering::Relaxed) {
                break true;
            }
            let now = self.backends.recoveries();
            if !tick(&mut writer, now) {
                break false;
            }
            let cloud_back = usable_already || now != recoveries;
            if cloud_back && started.elapsed() >= at_least {
                // End now so the client re-lists and re-watches through the cloud.
                break true;
            }
            // Waiting on the socket notices at once a client that hung up, freeing this thread.
            if writer.client_gone(left.min(WATCH_TICK)) {
                break false;
            }
        };
        if ended_cleanly {
            let _ = writer.finish();
        }
        200
    }

    /// Answers an event's create with its body, storing nothing (a protobuf event is echoed
    /// unread).
    fn echo_event<'c>(&self, mut ex: Exchange<'c>, path: &ResourcePath) -> Answered<'c> {
        // The server refused a declared length past its limit; a chunked body is cut off
        // there while it is read.
        let body = match read_body(&mut ex, u64::MAX) {
            Ok(body) => body,
            Err(status) => return Err((ex, status)),
        };
        // kubelet and kube-proxy send events in protobuf by default, and take it back (their
        // Accept). Nothing is stored, so the body goes back as it came: a 400 would make
        // kubelet drop the event for good.
        if body.starts_with(crate::protobuf::PROTOBUF_MAGIC) {
            let content_type = ex
                .header("Content-Type")
                .unwrap_or("application/vnd.kubernetes.protobuf")
                .to_owned();
            let _ = ex.send(201, &[("Content-Type", content_type.as_str())], &body);
            return Ok(201);
        }
        let Ok(mut object) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return Err((
                ex,
                Status::bad_request("the request body is not a JSON object"),
            ));
        };
        if !object.is_object() {
            return Err((
                ex,
                Status::bad_request("the request body is not a JSON object"),
            ));
        }
        // The object belongs where it was posted, as the apiserver would record it; one that
        // names another namespace is refused as the apiserver refuses it.
        if let (Some(ns), Some(meta)) = (
            path.namespace.as_deref(),
            object.get_mut("metadata").and_then(|m| m.as_object_mut()),
        ) {
            // Missing, null or empty means "where it was posted", as the apiserver reads it.
            let given = meta.entry("namespace").or_insert(serde_json::Value::Null);
            if given.is_null() || given.as_str() == Some("") {
                *given = ns.into();
            } else if given.as_str() != Some(ns) {
                return Err((
                    ex,
                    Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ),
                ));
            }
        }
        // A name the apiserver would not accept is refused, not echoed as if created.
        if let Some(bad) = unusable_name(&object) {
            return Err((ex, Status::bad_request(bad)));
        }
        send_json(ex, 201, &body, None)
    }
}

/// What a held watch of EndpointSlices or Endpoints lists for the overlay's passes.
struct WatchScope<'a> {
    req: &'a ApiRequest,
    path: &'a ResourcePath,
    collection: &'a CollectionKey,
    /// The request's selectors, as a list applies them.
    selectors: &'a Selectors,
}

/// Reads up to `limit` bytes of the request body; a broken body is answered with the
/// status its failure calls for (400 malformed, 408 stalled, 413 too large).
pub(crate) fn read_body(ex: &mut Exchange<'_>, limit: u64) -> Result<Vec<u8>, Status> {
    let mut body = Vec::new();
    match ex.body().take(limit).read_to_end(&mut body) {
        Ok(_) => Ok(body),
        Err(e) => Err(ex
            .body_failure()
            .unwrap_or_else(|| Status::bad_request(format!("cannot read the request body: {e}")))),
    }
}

/// Why the name an offline event gives itself (`metadata.name`, else the name
/// `metadata.generateName` leads to) cannot be used: there must be one, a DNS subdomain as
/// the apiserver requires, and a safe path segment.
fn unusable_name(object: &serde_json::Value) -> Option<String> {
    let field = |name: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(name))
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let usable = |name: &str| names::is_dns_subdomain(name) && names::is_object_name(name);
    if let Some(name) = field("name") {
        return (!usable(name)).then(|| {
            format!(
                "metadata.name {:?} is not a lowercase RFC 1123 subdomain",
                request::truncate(name)
            )
        });
    }
    // The apiserver cuts the prefix to 58 bytes and appends five random characters.
    let Some(prefix) = field("generateName") else {
        return Some("metadata.name or metadata.generateName is required".to_owned());
    };
    let kept = prefix.get(..prefix.len().min(58)).unwrap_or(prefix);
    (!usable(&format!("{kept}x0000"))).then(|| {
        format!(
            "metadata.generateName {:?} does not lead to a lowercase RFC 1123 subdomain",
            request::truncate(prefix)
        )
    })
}

/// The status sent, or the exchange back with the `Status` to answer.
type Answered<'c> = Result<u16, (Exchange<'c>, Status)>;

/// Sends `body` as JSON with `status`, and the cache's `age` when it is from the cache.
fn send_json<'c>(ex: Exchange<'c>, status: u16, body: &[u8], age: Option<&str>) -> Answered<'c> {
    let _ = ex.send(status, &json_head(age), body);
    Ok(status)
}

/// The 503 of a request the cache has no answer for; one of a component that is not a
/// cache agent says how to make it one (issue 35).
fn unanswerable(req: &ApiRequest, route: &Route) -> Status {
    let hint = match (&route.cache, req.component.valid()) {
        (Err(NoCacheReason::NotAgent), Some(component)) => format!(
            ": {component} is not a cache agent, so nothing of it was cached \
             (--cache-agents={component} makes the hub cache it)"
        ),
        _ => String::new(),
    };
    Status::service_unavailable(format!(
        "the cloud apiserver is unreachable and the cache cannot answer this request (component {:?}){hint}",
        req.component.as_str()
    ))
}

/// 404 for a list of a scope the component never listed whole (`cache/synced.rs`): its
/// cached objects may be a few it got by name, never known to be all there are.
fn not_listed(req: &ApiRequest, path: &ResourcePath) -> Status {
    let scope = match &path.namespace {
        Some(ns) => format!("namespace {ns:?} or all namespaces"),
        None => "all namespaces".to_owned(),
    };
    Status::not_found_message(format!(
        "{} is not cached for {}: offline, a list is answered only for a scope {} listed \
         whole while the cloud apiserver was reachable ({scope}; no selectors, or these)",
        qualified(path),
        req.component,
        req.component
    ))
}

/// 404 for a collection the component never read.
fn not_cached(req: &ApiRequest, path: &ResourcePath) -> Status {
    Status::not_found_message(format!(
        "{} is not cached for {}",
        qualified(path),
        req.component
    ))
}

fn qualified(path: &ResourcePath) -> String {
    crate::status::qualified(&path.gvr.group, &path.gvr.resource)
}

fn is_json_object(bytes: &[u8]) -> bool {
    // JSON whitespace is narrower than ASCII's (no form feed), but a leading form feed
    // fails the parse anyway.
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() && starts_object(bytes)
}

/// A watch with no `timeoutSeconds` is held 30–60 minutes, as the apiserver does, so a node's
/// watches do not all end at once.
fn random_watch_duration() -> Duration {
    Duration::from_secs(crate::random_between(1800, 3599))
}

#[cfg(test)]
mod tests;
