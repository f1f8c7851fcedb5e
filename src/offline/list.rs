//! Offline lists: the cached collection, filtered by the request's label and field
//! selectors, for a scope the component listed whole (`cache/synced.rs`), streamed object by
//! object (an offline list of thousands of pods never sits whole in memory), with the hub's
//! own continue tokens for `limit`. Kubelet's pod list that
//! finds nothing is a 404, never an empty list. EndpointSlices and Endpoints go out through
//! the endpoints overlay (issue 30): each item rewritten to this node's pods as kubelet
//! reports them, after the selectors chose it by the cloud's object. The same iteration
//! gives a held watch of those kinds its objects, one at a time (`Offline::watched_objects`).

use super::{Answered, Offline, not_cached, not_listed, qualified, send_json};
use crate::cache::key::{CollectionKey, METADATA_KIND, ObjectKey, View, rv_newer};

use crate::cache::store::{ObjectIter, Store, StoreError, StoredObject};
use crate::overlay::{EndpointKind, Snapshot};
use crate::request::{self, ApiRequest, DiscoveryForm, ResourcePath};
use crate::route::{Route, collection_key, document_file};
use crate::selector::Selectors;
use crate::server::{self, Exchange, Length};
use crate::status::Status;

/// The `apiVersion` of a metadata-only answer and of its objects.
const METADATA_API_VERSION: &str = "meta.k8s.io/v1";
/// Bytes of list output gathered before a write (and of a held watch's pass).
pub(super) const LIST_FLUSH: usize = 32 * 1024;
/// Prefix of the continue tokens the hub issues offline.
const CONTINUE_PREFIX: &str = "tinyhub1.";

/// What a list that finds nothing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenEmpty {
    /// As the proxy port answers: a collection never cached is a 404, and so is kubelet's
    /// pod list that finds nothing (see [`empty_is_not_found`]).
    AsProxy,
    /// An empty list of this kind, cached or not (the serve port's `/pods`).
    List(&'static str),
}

impl Offline {
    /// A list from the cache: the collection's files in name order, filtered by the
    /// request's selectors and paged by `limit`/`continue`, streamed without holding them all
    /// — only for a scope the component listed whole (`cache/synced.rs`), else the 404 of a
    /// list not cached.
    pub(super) fn list<'c>(
        &self,
        ex: Exchange<'c>,
        req: &ApiRequest,
        path: &ResourcePath,
        collection: &CollectionKey,
        route: &Route,
    ) -> Answered<'c> {
        let namespace = path.namespace.as_deref();
        if !self.synced.covers(collection, namespace, &route.selectors)
            && !self.holds_named(collection, namespace, &route.selectors)
        {
            // A name its list found absent: empty, as the cloud said (kubelet starts a pod
            // whose optional ConfigMap or Secret does not exist only after such an answer).
            if let Some(rv) = self
                .synced
                .known_absent(collection, namespace, &route.selectors)
            {
                return self.absent_list(ex, path, collection, &rv);
            }
            if self.store.has_collection(collection) {
                log::debug!(
                    "offline: {}/{} was never listed whole in this scope; not answered",
                    collection.component,
                    collection.dir_name()
                );
                return Err((ex, not_listed(req, path)));
            }
        }
        let snapshot = self.endpoints_snapshot(path, collection);
        let list = CachedList {
            req,
            path,
            collection,
            selectors: &route.selectors,
            when_empty: WhenEmpty::AsProxy,
            overlay: snapshot.as_ref().map(|(kind, s)| (*kind, &**s)),
            age: self.age(collection),
        };
        list.stream(&self.store, ex)
    }

    /// Whether a list of one object by name (`fieldSelector=metadata.name=<name>`, kubelet's
    /// list of each ConfigMap and Secret its pods use) finds that object cached in its
    /// namespace: then the list holds at most it, as the cloud last said it (its other
    /// selectors still filter it). One not cached is not known to be gone.
    fn holds_named(
        &self,
        collection: &CollectionKey,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) -> bool {
        let Some(name) = selectors.field.object_name() else {
            return false;
        };
        let key = ObjectKey {
            collection: collection.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        // Whether it is stored, without reading it (the list reads it next).
        matches!(self.store.version_of(&key), Ok(Some(_)))
    }

    /// The empty list of a name its last list by name found absent (`cache/synced.rs`,
    /// "Known absent"), with that list's resourceVersion.
    fn absent_list<'c>(
        &self,
        ex: Exchange<'c>,
        path: &ResourcePath,
        collection: &CollectionKey,
        rv: &str,
    ) -> Answered<'c> {
        let (api_version, kind) = match collection.view {
            View::Full => (
                path.gvr.api_version(),
                kind_from_discovery(&self.store, path),
            ),
            View::Metadata => (
                METADATA_API_VERSION.to_owned(),
                Some(METADATA_KIND.to_owned()),
            ),
        };
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"{\"apiVersion\":");
        push_json_str(&mut buf, &api_version);
        buf.extend_from_slice(b",\"items\":[");
        close_list(&mut buf, kind, Some(rv).filter(|rv| !rv.is_empty()), None);
        send_json(ex, 200, &buf, self.age(collection).as_deref())
    }

    /// The stored objects a watch of `path` lists now (its namespace and name, and
    /// `selectors`), read as a list reads them, in name order, one at a time from disk as
    /// the iterator is advanced: what a held watch of EndpointSlices or Endpoints passes the
    /// overlay over, never the whole collection in memory. Damaged files are left out (and
    /// warned of, as a list does).
    pub(super) fn watched_objects<'a>(
        &self,
        req: &'a ApiRequest,
        path: &'a ResourcePath,
        collection: &'a CollectionKey,
        selectors: &'a Selectors,
    ) -> impl Iterator<Item = Vec<u8>> + 'a {
        let list = CachedList {
            req,
            path,
            collection,
            selectors,
            when_empty: WhenEmpty::AsProxy,
            overlay: None,
            age: None,
        };
        let selected = match list.selected(&self.store, None) {
            Ok(selected) => Some(selected),
            Err(None) => None,
            Err(Some(e)) => {
                log::warn!(
                    "an offline watch of {} cannot read the cache: {e}",
                    qualified(path)
                );
                None
            }
        };
        selected
            .into_iter()
            .flatten()
            .map(|(object, _)| object.bytes)
    }
}

/// Kubelet's cached pods, every namespace, as one `PodList` (the serve port's `/pods`, as
/// YurtHub's `otaupdate.GetPods` lists them from its disk cache): an empty list when none
/// are cached. Returns the HTTP status sent.
pub(crate) fn kubelet_pods(store: &Store, ex: Exchange<'_>) -> u16 {
    let answered = match request::on_behalf_of(KUBELET, "GET", "/api/v1/pods") {
        // (`kubelet` is a valid component: `valid()` is always Some here.)
        Ok(req) => match (req.resource(), req.component.valid()) {
            (Some(path), Some(component)) => CachedList {
                req: &req,
                path,
                collection: &collection_key(component, path),
                selectors: &Selectors::everything(),
                when_empty: WhenEmpty::List("Pod"),
                overlay: None,
                age: None,
            }
            .stream(store, ex),
            _ => Err((ex, Status::internal("/api/v1/pods names no resource"))),
        },
        Err(e) => Err((ex, Status::internal(e.to_string()))),
    };
    match answered {
        Ok(status) => status,
        Err((ex, status)) => {
            let _ = ex.send_status(&status);
            status.code
        }
    }
}

/// The component whose pods `/pods` lists.
const KUBELET: &str = "kubelet";

/// One list answered from the cache.
struct CachedList<'a> {
    req: &'a ApiRequest,
    path: &'a ResourcePath,
    collection: &'a CollectionKey,
    selectors: &'a Selectors,
    when_empty: WhenEmpty,
    /// The endpoints overlay's snapshot, for a list of a kind it rewrites while it is on.
    overlay: Option<(EndpointKind, &'a Snapshot)>,
    /// The collection's age, for its [`super::CACHE_AGE`] header (the proxy port's answers).
    age: Option<String>,
}

impl<'a> CachedList<'a> {
    /// The collection's objects after `after` that the list selects, read from disk one at a
    /// time; None when the collection was never cached.
    fn selected(
        &self,
        store: &Store,
        after: Option<(&str, &str)>,
    ) -> Result<Selected<'a>, Option<StoreError>> {
        let iter = match store.list(self.collection, self.path.namespace.as_deref(), after) {
            Ok(Some(iter)) => Some(iter),
            Ok(None) if self.when_empty != WhenEmpty::AsProxy => None,
            Ok(None) => return Err(None),
            Err(e) => return Err(Some(e)),
        };
        Ok(Selected {
            iter,
            selectors: self.selectors,
            name: self.path.name.as_deref(),
            skipped: Skipped::new(self.path),
        })
    }

    /// Streams the answer.
    fn stream<'c>(&self, store: &Store, ex: Exchange<'c>) -> Answered<'c> {
        let (req, path) = (self.req, self.path);
        let after = match continue_after(req) {
            Ok(after) => after,
            Err(status) => return Err((ex, status)),
        };
        let mut selected = match self.selected(
            store,
            after.as_ref().map(|(ns, n)| (ns.as_str(), n.as_str())),
        ) {
            Ok(selected) => selected,
            Err(None) => return Err((ex, not_cached(req, path))),
            Err(Some(e)) => return Err((ex, e.status())),
        };
        // A metadata view's list is a `meta.k8s.io/v1` `PartialObjectMetadataList`, as the
        // apiserver answers it, found or not.
        let (api_version, list_kind) = match self.collection.view {
            View::Full => (path.gvr.api_version(), None),
            View::Metadata => (METADATA_API_VERSION.to_owned(), Some(METADATA_KIND)),
        };
        // The answer starts with the first bytes to send, so that a kubelet pod list that
        // finds nothing can still be a 404.
        let mut answer = ListOut::Pending(ex, self.age.as_deref());
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
        for (object, head) in selected.by_ref() {
            if limit == Some(count) {
                // One more matches: the client gets a token to continue after the last one.
                next_token = last.as_ref().map(|(ns, name)| encode_continue(ns, name));
                break;
            }
            if count > 0 {
                buf.push(b',');
            }
            // Rewritten to this node's pods, the cloud's resourceVersion kept (so `max_rv`
            // below is the cloud's too).
            let rewritten = self.overlay.and_then(|(k, s)| s.rewrite(k, &object.bytes));
            buf.extend_from_slice(rewritten.as_deref().unwrap_or(&object.bytes));
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
        if count == 0
            && after.is_none()
            && self.when_empty == WhenEmpty::AsProxy
            && empty_is_not_found(req, path)
        {
            // Only before anything was sent: an empty answer sends nothing before its end.
            if let ListOut::Pending(ex, _) = answer {
                selected.skipped.report();
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
        let kind = list_kind
            .map(str::to_owned)
            .or(kind)
            .or_else(|| kind_from_discovery(store, path))
            .or(match self.when_empty {
                WhenEmpty::List(kind) => Some(kind.to_owned()),
                WhenEmpty::AsProxy => None,
            });
        close_list(&mut buf, kind, max_rv.as_deref(), next_token);
        // Before the answer ends, so a client that has it whole finds the warning logged.
        selected.skipped.report();
        if answer.write(&buf)
            && let ListOut::Started(writer) = answer
        {
            let _ = writer.finish();
        }
        Ok(200)
    }
}

/// The objects a list selects, in name order, each read when reached; what it skipped is
/// reported once when it ends (or is dropped).
struct Selected<'a> {
    /// None: a collection never cached, listed as empty.
    iter: Option<ObjectIter>,
    selectors: &'a Selectors,
    /// A watch of one object: only that name.
    name: Option<&'a str>,
    skipped: Skipped<'a>,
}

impl Iterator for Selected<'_> {
    type Item = (StoredObject, ListHead);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let mut object = match self.iter.as_mut()?.next()? {
                Ok(object) => object,
                Err(e) => {
                    self.skipped.unreadable(e);
                    continue;
                }
            };
            if self.name.is_some_and(|name| name != object.name) {
                continue;
            }
            let Some(head) = parse_head(&mut object, self.selectors) else {
                self.skipped
                    .damaged(object.namespace.as_deref(), &object.name);
                continue;
            };
            if head.selected {
                return Some((object, head));
            }
        }
    }
}

/// Where a list with a continue token resumes (None without one); an expired `Status` for a
/// token the hub did not make.
fn continue_after(req: &ApiRequest) -> Result<Option<(String, String)>, Status> {
    match req
        .query
        .continue_token
        .as_deref()
        .filter(|t| !t.is_empty())
    {
        None => Ok(None),
        Some(token) => match decode_continue(token) {
            Some(position) => Ok(Some(position)),
            None => Err(Status::expired(
                "the continue token is not valid for the hub's cache; list again without it",
            )),
        },
    }
}

/// Ends a list's JSON after its items: the kind (`<kind>List`, when known), the list's
/// resourceVersion (the newest item's, "0" for none) and the continue token when there is one.
fn close_list(
    buf: &mut Vec<u8>,
    kind: Option<String>,
    max_rv: Option<&str>,
    next_token: Option<String>,
) {
    buf.extend_from_slice(b"]");
    if let Some(kind) = kind {
        buf.extend_from_slice(b",\"kind\":");
        push_json_str(buf, &format!("{kind}List"));
    }
    buf.extend_from_slice(b",\"metadata\":{\"resourceVersion\":");
    push_json_str(buf, max_rv.unwrap_or("0"));
    if let Some(token) = next_token {
        buf.extend_from_slice(b",\"continue\":");
        push_json_str(buf, &token);
    }
    buf.extend_from_slice(b"}}");
}

/// The kind of `path`'s objects from a cached discovery document, for an empty list: the
/// group-version's own document, else aggregated `/api` or `/apis` (all that a client
/// with aggregated discovery, kubectl ≥ 1.26, ever reads).
fn kind_from_discovery(store: &Store, path: &ResourcePath) -> Option<String> {
    let read = |file: &str| -> Option<serde_json::Value> {
        let bytes = store.get_non_resource(file).ok()??;
        serde_json::from_slice(&bytes).ok()
    };
    let file = if path.gvr.group.is_empty() {
        format!("_api_{}", path.gvr.version)
    } else {
        format!("_apis_{}_{}", path.gvr.group, path.gvr.version)
    };
    let legacy = read(&file).and_then(|doc| {
        doc.get("resources")?
            .as_array()?
            .iter()
            .find(|r| r["name"].as_str() == Some(path.gvr.resource.as_str()))?
            .get("kind")?
            .as_str()
            .map(str::to_owned)
    });
    let root = if path.gvr.group.is_empty() {
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
                    .find(|g| g["metadata"]["name"].as_str().unwrap_or("") == path.gvr.group)?;
                let version = group["versions"]
                    .as_array()?
                    .iter()
                    .find(|v| v["version"].as_str() == Some(path.gvr.version.as_str()))?;
                version["resources"]
                    .as_array()?
                    .iter()
                    .find(|r| r["resource"].as_str() == Some(path.gvr.resource.as_str()))?
                    ["responseKind"]["kind"]
                    .as_str()
                    .map(str::to_owned)
            })
    })
}

/// An offline list answer: not started until there is something to send.
enum ListOut<'c, 'a> {
    /// Nothing sent yet; the cache's age for the head.
    Pending(Exchange<'c>, Option<&'a str>),
    /// The 200 head is out.
    Started(server::BodyWriter<'c>),
    /// The client went away.
    Gone,
}

impl ListOut<'_, '_> {
    /// Sends `bytes`, starting the answer first if need be; false once the client is gone.
    fn write(&mut self, bytes: &[u8]) -> bool {
        if let ListOut::Pending(..) = self
            && let ListOut::Pending(ex, age) = std::mem::replace(self, ListOut::Gone)
            && let Ok(writer) = ex.start(200, &super::json_head(age), Length::Streamed)
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
    req.component == "kubelet" && path.gvr.group.is_empty() && path.gvr.resource == "pods"
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

/// What an offline list needs of one cached object.
struct ListHead {
    selected: bool,
    kind: Option<String>,
    resource_version: Option<String>,
}

/// What the list needs of `object`; selectors need the whole object, plain lists only the
/// head, which the store's check read already (`StoredObject::head`).
fn parse_head(
    object: &mut StoredObject,
    selectors: &crate::selector::Selectors,
) -> Option<ListHead> {
    if selectors.is_everything() {
        let head = object.head.take()?;
        return Some(ListHead {
            selected: true,
            kind: head.kind,
            resource_version: head.resource_version,
        });
    }
    let value: serde_json::Value = serde_json::from_slice(&object.bytes).ok()?;
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

/// Appends `s` as a JSON string literal, escaped as `Status` bodies are (serde_json).
fn push_json_str(buf: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *buf, s);
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

#[cfg(test)]
mod tests;
