//! Offline answers: what the hub says from its disk cache while the cloud is unreachable
//! (DESIGN.md §4). Gets return the cached object, lists the cached collection filtered by the
//! request's label and field selectors (which YurtHub ignores), watches are held open without
//! events, writes are answered as YurtHub does, and everything else gets a `Status`.
//! Two answers keep a rebooted node's pods: a TokenRequest gets the cached token or a
//! one-minute token made here (`tokens.rs`), and kubelet's pod list that finds nothing is a
//! 404, never an empty list. Event creates are echoed and never stored.
//!
//! Lists stream: objects are read from disk one at a time and written out as they pass the
//! selectors, so an offline list of thousands of pods never sits whole in memory. Only the
//! collection's own directory is read. Nothing here writes the cache directly: an offline
//! create goes to the cache writer like any other object.

use std::borrow::Cow;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cache::key::{CollectionKey, ObjectKey, TokenKey, rv_newer};
use crate::cache::object::{ObjectHead, starts_object};
use crate::cache::store::{Store, StoreError};
use crate::cache::writer::CacheTx;
use crate::health::Backends;
use crate::request::{self, ApiRequest, DiscoveryForm, ResourcePath, Target};
use crate::route::{Local, Route, document_file};
use crate::server::{self, Exchange, Length};
use crate::status::Status;
use crate::tokens::{self, TokenSpec};

/// How often a held watch checks for the cloud and shutdown (a vanished client is noticed at
/// once).
const WATCH_TICK: Duration = Duration::from_secs(1);
/// Bytes of list output gathered before a write.
const LIST_FLUSH: usize = 32 * 1024;
/// Prefix of the continue tokens the hub issues offline.
const CONTINUE_PREFIX: &str = "tinyhub1.";

/// The offline answerer.
pub struct Offline {
    /// The disk cache, read only here.
    pub store: Arc<Store>,
    /// Where offline creates go to be persisted.
    pub cache: CacheTx,
    /// To end held watches when the cloud is back.
    pub backends: Arc<Backends>,
    /// To end held watches on shutdown.
    pub shutdown: Arc<AtomicBool>,
}

impl Offline {
    /// Answers `req` from the cache, in the collection `route` keyed; returns the HTTP
    /// status sent.
    pub fn answer(&self, ex: Exchange<'_>, req: &ApiRequest, route: &Route) -> u16 {
        let result = match (&route.local, req.resource(), route.collection()) {
            (Local::NonResource(file), _, _) => self.document(ex, req, file),
            (Local::Forbidden, _, _) => Err((
                ex,
                Status::forbidden(
                    "the cloud apiserver is unreachable: deletes are refused until it is back",
                ),
            )),
            (Local::Get | Local::Update, Some(path), Some(collection)) => {
                self.get(ex, path, collection)
            }
            (Local::List, Some(path), Some(collection)) => {
                self.list(ex, req, path, collection, route)
            }
            (Local::Watch, Some(path), Some(collection)) => self.watch(ex, req, path, collection),
            (Local::Create, Some(path), Some(collection)) => {
                self.create(ex, path, Some(collection))
            }
            (Local::Echo, Some(path), _) => self.create(ex, path, None),
            (Local::Token, Some(path), _) => self.token(ex, req, path),
            _ => Err((
                ex,
                Status::service_unavailable(format!(
                    "the cloud apiserver is unreachable and the cache cannot answer this request (component {:?})",
                    req.component
                )),
            )),
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
    /// apiserver says it; `/api` or `/apis` not cached at all is a 503 (a 404 would tell
    /// client-go that the server has no such API).
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
                Err(e) => return Err((ex, Status::internal(format!("reading the cache: {e}")))),
            }
        }
        let mut cached = Vec::new();
        for form in DiscoveryForm::ALL {
            match read(form) {
                Ok(Some(_)) => cached.push(form.content_type()),
                Ok(None) => {}
                Err(e) => return Err((ex, Status::internal(format!("reading the cache: {e}")))),
            }
        }
        let root = document_file(file, DiscoveryForm::V2).is_some();
        let status = if !cached.is_empty() {
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

    fn get<'c>(
        &self,
        ex: Exchange<'c>,
        path: &ResourcePath,
        collection: &CollectionKey,
    ) -> Answered<'c> {
        let Some(name) = path.name.clone() else {
            return Err((ex, Status::bad_request("no object name")));
        };
        let key = ObjectKey {
            collection: collection.clone(),
            namespace: path.namespace.clone(),
            name,
        };
        match self.store.get(&key) {
            Ok(Some(bytes)) if is_json_object(&bytes) => send_json(ex, 200, &bytes),
            Ok(Some(_)) => {
                log::warn!("cache file of {key:?} is not valid JSON; not serving it");
                Err((
                    ex,
                    Status::internal(format!("the cached copy of {} is damaged", key.name)),
                ))
            }
            Ok(None) => Err((
                ex,
                Status::not_found(&path.group, &path.resource, &key.name),
            )),
            Err(e) => Err((ex, Status::internal(format!("reading the cache: {e}")))),
        }
    }

    fn list<'c>(
        &self,
        ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
        collection: &CollectionKey,
        route: &Route,
    ) -> Answered<'c> {
        let after = match req
            .query
            .continue_token
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            None => None,
            Some(token) => match decode_continue(token) {
                Some(position) => Some(position),
                None => {
                    return Err((
                        ex,
                        Status::expired(
                            "the continue token is not valid for the hub's cache; list again without it",
                        ),
                    ));
                }
            },
        };
        let namespace = path.namespace.as_deref();
        let iter = match self.store.list(
            collection,
            namespace,
            after.as_ref().map(|(ns, n)| (ns.as_str(), n.as_str())),
        ) {
            Ok(Some(iter)) => iter,
            Ok(None) => {
                return Err((ex, not_cached(req, path)));
            }
            Err(e) => return Err((ex, Status::internal(format!("reading the cache: {e}")))),
        };
        let api_version = if path.group.is_empty() {
            path.version.clone()
        } else {
            format!("{}/{}", path.group, path.version)
        };
        // The answer starts with the first bytes to send, so that a kubelet pod list that
        // finds nothing can still be a 404.
        let mut answer = ListOut::Pending(ex);
        let limit = req
            .query
            .limit
            .filter(|&l| l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut buf = Vec::with_capacity(LIST_FLUSH + 8192);
        buf.extend_from_slice(b"{\"apiVersion\":");
        push_json_str(&mut buf, &api_version);
        buf.extend_from_slice(b",\"items\":[");
        let mut count = 0usize;
        let mut max_rv: Option<String> = None;
        let mut kind: Option<String> = None;
        let mut last: Option<(String, String)> = None;
        let mut next_token = None;
        let mut skipped = Skipped::new(path);
        for item in iter {
            let object = match item {
                Ok(object) => object,
                Err(e) => {
                    skipped.unreadable(e);
                    continue;
                }
            };
            let Some(head) = parse_head(&object.bytes, &route.selectors) else {
                skipped.damaged(object.namespace.as_deref(), &object.name);
                continue;
            };
            if !head.selected {
                continue;
            }
            if limit == Some(count) {
                // One more matches: the client gets a token to continue after the last one.
                next_token = last.as_ref().map(|(ns, name)| encode_continue(ns, name));
                break;
            }
            if count > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(&object.bytes);
            count += 1;
            if kind.is_none() {
                kind = head.kind;
            }
            if let Some(rv) = head.resource_version
                && max_rv.as_deref().is_none_or(|m| rv_newer(&rv, m))
            {
                max_rv = Some(rv);
            }
            last = Some((object.namespace.unwrap_or_default(), object.name));
            if buf.len() >= LIST_FLUSH {
                if !answer.write(&buf) {
                    return Ok(200); // the client went away
                }
                buf.clear();
            }
        }
        if count == 0 && after.is_none() && empty_is_not_found(req, path) {
            // Only before anything was sent: an empty answer sends nothing before its end.
            if let ListOut::Pending(ex) = answer {
                skipped.report();
                return Err((
                    ex,
                    Status::not_found_message(format!(
                        "no pods are cached for {} that match the request; the node's pods are \
                         not known while the cloud apiserver is unreachable",
                        req.component
                    )),
                ));
            }
        }
        let kind = kind.or_else(|| self.kind_from_discovery(path));
        buf.extend_from_slice(b"]");
        if let Some(kind) = kind {
            buf.extend_from_slice(b",\"kind\":");
            push_json_str(&mut buf, &format!("{kind}List"));
        }
        buf.extend_from_slice(b",\"metadata\":{\"resourceVersion\":");
        push_json_str(&mut buf, max_rv.as_deref().unwrap_or("0"));
        if let Some(token) = next_token {
            buf.extend_from_slice(b",\"continue\":");
            push_json_str(&mut buf, &token);
        }
        buf.extend_from_slice(b"}}");
        // Before the answer ends, so a client that has it whole finds the warning logged.
        skipped.report();
        if answer.write(&buf)
            && let ListOut::Started(writer) = answer
        {
            let _ = writer.finish();
        }
        Ok(200)
    }

    /// The kind of `path`'s objects from a cached discovery document, for an empty list: the
    /// group-version's own document, else aggregated `/api` or `/apis` (all that a client
    /// with aggregated discovery, kubectl ≥ 1.26, ever reads).
    fn kind_from_discovery(&self, path: &ResourcePath) -> Option<String> {
        let read = |file: &str| -> Option<serde_json::Value> {
            let bytes = self.store.get_non_resource(file).ok()??;
            serde_json::from_slice(&bytes).ok()
        };
        let file = if path.group.is_empty() {
            format!("_api_{}", path.version)
        } else {
            format!("_apis_{}_{}", path.group, path.version)
        };
        let legacy = read(&file).and_then(|doc| {
            doc.get("resources")?
                .as_array()?
                .iter()
                .find(|r| r["name"].as_str() == Some(path.resource.as_str()))?
                .get("kind")?
                .as_str()
                .map(str::to_owned)
        });
        let root = if path.group.is_empty() {
            "_api"
        } else {
            "_apis"
        };
        legacy.or_else(|| {
            [DiscoveryForm::V2, DiscoveryForm::V2Beta1]
                .into_iter()
                .find_map(|form| {
                    let doc = read(&document_file(root, form)?)?;
                    // The core group's item has no name.
                    let group = doc["items"]
                        .as_array()?
                        .iter()
                        .find(|g| g["metadata"]["name"].as_str().unwrap_or("") == path.group)?;
                    let version = group["versions"]
                        .as_array()?
                        .iter()
                        .find(|v| v["version"].as_str() == Some(path.version.as_str()))?;
                    version["resources"]
                        .as_array()?
                        .iter()
                        .find(|r| r["resource"].as_str() == Some(path.resource.as_str()))?
                        ["responseKind"]["kind"]
                        .as_str()
                        .map(str::to_owned)
                })
        })
    }

    fn watch<'c>(
        &self,
        ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
        collection: &CollectionKey,
    ) -> Answered<'c> {
        if !self.store.has_collection(collection) {
            return Err((ex, not_cached(req, path)));
        }
        let Ok(mut writer) = ex.start(
            200,
            &[("Content-Type", "application/json")],
            Length::Streamed,
        ) else {
            return Ok(200);
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
            if usable_already || self.backends.recoveries() != recoveries {
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
        Ok(200)
    }

    /// Answers a create with its body; with `persist`, the object is cached there (events
    /// are not).
    fn create<'c>(
        &self,
        mut ex: Exchange<'c>,
        path: &ResourcePath,
        persist: Option<&CollectionKey>,
    ) -> Answered<'c> {
        // The server refused a declared length past its limit; a chunked body is cut off
        // there while it is read.
        let body = match read_body(&mut ex, u64::MAX) {
            Ok(body) => body,
            Err(status) => return Err((ex, status)),
        };
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
        // The name becomes a file name in the cache: one the apiserver would not accept, or
        // the store would not write, is refused now rather than answered 201 and dropped.
        if let Some(bad) = unusable_name(&object) {
            return Err((ex, Status::bad_request(bad)));
        }
        let has_name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .is_some_and(|n| !n.is_empty());
        if let Some(collection) = persist.filter(|_| has_name) {
            let queued = serde_json::to_vec(&object)
                .is_ok_and(|bytes| self.cache.put(collection.clone(), bytes));
            if !queued {
                log::info!(
                    "offline create of {} answered but not cached (writer busy)",
                    qualified(path)
                );
            }
        }
        send_json(ex, 201, &body)
    }
}

impl Offline {
    /// A TokenRequest: 201 with the cached answer while its token is valid for at least
    /// [`tokens::MIN_VALIDITY`], else with a token made here that expires in a minute —
    /// never an empty token (YURTHUB.md §5.1 a). Nothing is written.
    fn token<'c>(
        &self,
        mut ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
    ) -> Answered<'c> {
        let (Some(namespace), Some(name)) = (path.namespace.as_deref(), path.name.as_deref())
        else {
            return Err((ex, Status::bad_request("no service account named")));
        };
        let body = match read_body(&mut ex, tokens::MAX_REQUEST_BYTES as u64 + 1) {
            Ok(body) => body,
            Err(status) => return Err((ex, status)),
        };
        let spec = match TokenSpec::parse(&body) {
            Some(spec) if body.len() <= tokens::MAX_REQUEST_BYTES => spec,
            _ => {
                return Err((
                    ex,
                    Status::bad_request("the request body is not a TokenRequest"),
                ));
            }
        };
        let key = TokenKey {
            component: req.component.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            digest: spec.digest(),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let why = match self.store.get_token(&key) {
            Ok(Some(cached)) if tokens::still_valid(&cached, now) => {
                return send_json(ex, 201, &cached);
            }
            Ok(Some(_)) => "the cached token expires within a minute",
            Ok(None) => "no token is cached for this audience set",
            Err(e) => {
                log::warn!("reading the cached token of {namespace}/{name}: {e}");
                "the cached token cannot be read"
            }
        };
        let Some(answer) = tokens::local_answer(namespace, name, &spec, now) else {
            return Err((
                ex,
                Status::service_unavailable(
                    "the cloud apiserver is unreachable and the hub cannot make a token (no random source)",
                ),
            ));
        };
        log::info!(
            "offline TokenRequest for serviceaccount {namespace}/{name}: {why}; answering with a one-minute token made by the hub"
        );
        send_json(ex, 201, &answer)
    }
}

/// An offline list answer: not started until there is something to send.
enum ListOut<'c> {
    /// Nothing sent yet.
    Pending(Exchange<'c>),
    /// The 200 head is out.
    Started(server::BodyWriter<'c>),
    /// The client went away.
    Gone,
}

impl ListOut<'_> {
    /// Sends `bytes`, starting the answer first if need be; false once the client is gone.
    fn write(&mut self, bytes: &[u8]) -> bool {
        if let ListOut::Pending(_) = self
            && let ListOut::Pending(ex) = std::mem::replace(self, ListOut::Gone)
            && let Ok(writer) = ex.start(
                200,
                &[("Content-Type", "application/json")],
                Length::Streamed,
            )
        {
            *self = ListOut::Started(writer);
        }
        match self {
            ListOut::Started(writer) => writer.write(bytes).is_ok(),
            _ => false,
        }
    }
}

/// An offline list of `pods` by kubelet that finds nothing is a 404, not an empty list: an
/// empty list would tell kubelet that the node has no pods, and it would stop them all
/// (YurtHub does the same, `cache_manager.go`).
fn empty_is_not_found(req: &ApiRequest, path: &ResourcePath) -> bool {
    req.component == "kubelet" && path.group.is_empty() && path.resource == "pods"
}

/// Reads up to `limit` bytes of the request body; a broken body is answered with the
/// status its failure calls for (400 malformed, 408 stalled, 413 too large).
fn read_body(ex: &mut Exchange<'_>, limit: u64) -> Result<Vec<u8>, Status> {
    let mut body = Vec::new();
    match ex.body().take(limit).read_to_end(&mut body) {
        Ok(_) => Ok(body),
        Err(e) => Err(ex
            .body_failure()
            .unwrap_or_else(|| Status::bad_request(format!("cannot read the request body: {e}")))),
    }
}

/// Why the name an offline create gives its object (`metadata.name`, else the name
/// `metadata.generateName` leads to) cannot be used: there must be one, a DNS subdomain as
/// the apiserver requires of the kinds node components create, and a safe cache path
/// segment.
fn unusable_name(object: &serde_json::Value) -> Option<String> {
    let field = |name: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(name))
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let usable = |name: &str| request::is_dns_subdomain(name) && request::is_object_name(name);
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

fn send_json<'c>(ex: Exchange<'c>, status: u16, body: &[u8]) -> Answered<'c> {
    let _ = ex.send(status, &[("Content-Type", "application/json")], body);
    Ok(status)
}

/// 404 for a collection the component never read.
fn not_cached(req: &ApiRequest, path: &ResourcePath) -> Status {
    Status::not_found_message(format!(
        "{} is not cached for {}",
        qualified(path),
        req.component
    ))
}

/// Cache files an offline list left out, reported in one warning per answer when it ends
/// (also when the client hung up): a damaged collection that a component relists every
/// few seconds must not flood the log with a line per file.
struct Skipped<'p> {
    path: &'p ResourcePath,
    /// Files that are not a JSON object; the first few named `namespace/name` (`name` when
    /// cluster-scoped).
    damaged: usize,
    named: Vec<String>,
    /// Files that could not be read, and the first error (it names the file).
    unreadable: usize,
    first_error: Option<StoreError>,
}

/// How many damaged files a warning names.
const SKIPPED_NAMED: usize = 5;

impl<'p> Skipped<'p> {
    fn new(path: &'p ResourcePath) -> Skipped<'p> {
        Skipped {
            path,
            damaged: 0,
            named: Vec::new(),
            unreadable: 0,
            first_error: None,
        }
    }

    fn damaged(&mut self, namespace: Option<&str>, name: &str) {
        self.damaged += 1;
        if self.named.len() < SKIPPED_NAMED {
            self.named.push(match namespace {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_owned(),
            });
        }
    }

    fn unreadable(&mut self, e: StoreError) {
        self.unreadable += 1;
        self.first_error.get_or_insert(e);
    }

    /// The warning, `None` when nothing was skipped.
    fn message(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.damaged > 0 {
            let mut part = format!(
                "{} damaged cache file{}: {}",
                self.damaged,
                if self.damaged == 1 { "" } else { "s" },
                self.named.join(", ")
            );
            if self.damaged > self.named.len() {
                part.push_str(&format!(" and {} more", self.damaged - self.named.len()));
            }
            parts.push(part);
        }
        if let Some(e) = &self.first_error {
            parts.push(format!("{} unreadable (first: {e})", self.unreadable));
        }
        if parts.is_empty() {
            return None;
        }
        Some(format!(
            "offline list of {}: skipped {}",
            qualified(self.path),
            parts.join("; ")
        ))
    }

    /// Logs the warning, once.
    fn report(&mut self) {
        if let Some(message) = self.message() {
            log::warn!("{message}");
        }
        (self.damaged, self.unreadable) = (0, 0);
        self.named.clear();
        self.first_error = None;
    }
}

impl Drop for Skipped<'_> {
    /// An answer cut short (the client hung up) still reports what it skipped.
    fn drop(&mut self) {
        self.report();
    }
}

fn qualified(path: &ResourcePath) -> String {
    crate::status::qualified(&path.group, &path.resource)
}

fn is_json_object(bytes: &[u8]) -> bool {
    // JSON whitespace is narrower than ASCII's (no form feed), but a leading form feed
    // fails the parse anyway.
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() && starts_object(bytes)
}

/// What an offline list needs of one cached object.
struct ListHead {
    selected: bool,
    kind: Option<String>,
    resource_version: Option<String>,
}

/// Parses what the list needs; selectors need the whole object, plain lists only the head.
fn parse_head(bytes: &[u8], selectors: &crate::selector::Selectors) -> Option<ListHead> {
    if selectors.is_everything() {
        let head = ObjectHead::parse(bytes)?;
        return Some(ListHead {
            selected: true,
            kind: head.kind.map(Cow::into_owned),
            resource_version: head
                .metadata
                .and_then(|m| m.resource_version)
                .map(Cow::into_owned),
        });
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    if !value.is_object() {
        return None;
    }
    let text = |p: &str| value.pointer(p).and_then(|v| v.as_str()).map(str::to_owned);
    Some(ListHead {
        selected: selectors.matches(&value),
        kind: text("/kind"),
        resource_version: text("/metadata/resourceVersion"),
    })
}

fn push_json_str(buf: &mut Vec<u8>, s: &str) {
    let mut text = String::with_capacity(s.len() + 2);
    crate::status::push_json_string(&mut text, s);
    buf.extend_from_slice(text.as_bytes());
}

/// A continue token naming the last object sent: `tinyhub1.<hex ns>.<hex name>`.
fn encode_continue(namespace: &str, name: &str) -> String {
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{CONTINUE_PREFIX}{}.{}", hex(namespace), hex(name))
}

/// The position a token of ours names; None for anything else.
fn decode_continue(token: &str) -> Option<(String, String)> {
    let rest = token.strip_prefix(CONTINUE_PREFIX)?;
    let (ns, name) = rest.split_once('.')?;
    let unhex = |s: &str| -> Option<String> {
        if !s.len().is_multiple_of(2) || s.len() > 2 * 253 {
            return None;
        }
        let bytes = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        String::from_utf8(bytes).ok()
    };
    let (ns, name) = (unhex(ns)?, unhex(name)?);
    (!name.is_empty()).then_some((ns, name))
}

/// A watch with no `timeoutSeconds` is held 30–60 minutes, as the apiserver does, so a node's
/// watches do not all end at once.
fn random_watch_duration() -> Duration {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Mix in a sequence number so watches opened in the same instant differ too.
    let mut x = u64::from(nanos)
        ^ SEQUENCE
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    Duration::from_secs(1800 + x % 1800)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_creates_need_a_name_the_apiserver_and_the_store_accept() {
        let check =
            |meta: serde_json::Value| unusable_name(&serde_json::json!({ "metadata": meta }));
        for meta in [
            serde_json::json!({"name": "web-1"}),
            serde_json::json!({"name": "kubelet.17a8b2c3d4e5f6a7"}),
            serde_json::json!({"generateName": "csr-"}),
            serde_json::json!({"generateName": "a".repeat(100)}),
            serde_json::json!({"name": "", "generateName": "web-"}),
        ] {
            assert_eq!(check(meta.clone()), None, "{meta}");
        }
        for meta in [
            serde_json::json!({"name": "../x"}),
            serde_json::json!({"name": "a/b"}),
            serde_json::json!({"name": "Upper"}),
            serde_json::json!({"name": ".hidden"}),
            serde_json::json!({"name": "a%2F"}),
            serde_json::json!({"name": "x".repeat(254)}),
            serde_json::json!({"generateName": "../"}),
            serde_json::json!({"name": "", "generateName": "A-"}),
            serde_json::json!({}),
            serde_json::json!({"name": ""}),
        ] {
            assert!(check(meta.clone()).is_some(), "{meta}");
        }
    }

    #[test]
    fn continue_tokens_round_trip_and_foreign_ones_are_refused() {
        let token = encode_continue("kube-system", "coredns-1");
        assert_eq!(
            decode_continue(&token),
            Some(("kube-system".into(), "coredns-1".into()))
        );
        assert_eq!(
            decode_continue(&encode_continue("", "node-1")),
            Some(("".into(), "node-1".into()))
        );
        for foreign in [
            "",
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ",
            "tinyhub1.zz.00",
            "tinyhub1.6161",
            "tinyhub1.61.",
            "tinyhub1.6.61",
        ] {
            assert_eq!(decode_continue(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn skipped_files_make_one_warning_per_list() {
        let path = ResourcePath {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            subresource: None,
            namespace: None,
            name: None,
            legacy_prefix: None,
            extra_path: false,
        };
        let mut skipped = Skipped::new(&path);
        assert_eq!(skipped.message(), None);
        skipped.damaged(Some("default"), "web-1");
        assert_eq!(
            skipped.message().as_deref(),
            Some("offline list of pods: skipped 1 damaged cache file: default/web-1")
        );
        for i in 0..6 {
            skipped.damaged(None, &format!("n{i}"));
        }
        let error = |name: &str| StoreError::Io {
            op: crate::cache::store::StoreOp::Read,
            path: name.into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        skipped.unreadable(error("/cache/a"));
        skipped.unreadable(error("/cache/b"));
        let message = skipped.message().unwrap();
        assert!(
            message.starts_with(
                "offline list of pods: skipped 7 damaged cache files: default/web-1, n0, n1, n2, n3 and 2 more; 2 unreadable (first: cache: cannot read /cache/a: "
            ),
            "{message}"
        );
        skipped.report();
        assert_eq!(skipped.message(), None, "reported once");
    }

    #[test]
    fn watch_hold_is_between_30_and_60_minutes() {
        let d = random_watch_duration();
        assert!(
            d >= Duration::from_secs(1800) && d < Duration::from_secs(3600),
            "{d:?}"
        );
    }

    #[test]
    fn list_heads_filter_by_selector() {
        let pod = br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"7","labels":{"app":"web"}},"spec":{"nodeName":"n1"}}"#;
        let web =
            crate::selector::Selectors::parse(Some("app=web"), Some("spec.nodeName=n1")).unwrap();
        let db = crate::selector::Selectors::parse(Some("app=db"), None).unwrap();
        let everything = crate::selector::Selectors::everything();
        let head = parse_head(pod, &web).unwrap();
        assert!(head.selected);
        assert_eq!(head.resource_version.as_deref(), Some("7"));
        assert!(!parse_head(pod, &db).unwrap().selected);
        assert_eq!(
            parse_head(pod, &everything).unwrap().kind.as_deref(),
            Some("Pod")
        );
        assert!(parse_head(b"{not json", &everything).is_none());
    }
}
