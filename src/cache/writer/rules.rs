//! The Kubernetes rules for objects the writer applies: what is stored and under which key
//! (no `Status`, a name, a namespace if the kind is namespaced, a pod only once bound to a
//! node), what a watch event does, the list's `kind` and `apiVersion` given to its items,
//! units that are not JSON objects (skipped and counted), and which TokenRequest answers
//! are kept.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::failures::{FailureLog, count_put};
use crate::cache::decode::{BodyShape, Located, Path};
use crate::cache::key::{CollectionKey, METADATA_KIND, ObjectKey, TokenKey, View};
use crate::cache::object::{
    EVENT_PATHS, HEAD_PATHS, ObjectHead, ObjectMeta, from_map, located_str, starts_object,
};
use crate::cache::store::{Replace, Store};
use crate::cache::target::TokenTarget;
use crate::metrics::{METRICS, Metrics};

/// What a list answer has told so far.
pub(super) struct ListState<'s> {
    pub(super) replace: Replace<'s>,
    pub(super) item_kind: Option<String>,
    pub(super) api_version: Option<String>,
    pub(super) resource_version: Option<String>,
    pub(super) continue_token: bool,
    /// The answer's `kind` says it is a list (`...List`).
    pub(super) is_list: bool,
    /// Keys of staged objects whose last write had failed: stored once the list commits.
    pub(super) failed_keys: Vec<String>,
    /// The kind is namespaced (see [`namespaced`]): an item without a namespace is refused.
    pub(super) namespaced: bool,
    /// Items refused for having no namespace.
    pub(super) no_namespace: u64,
    /// An item came: a `metadata` after it proves nothing (`unchanged.rs`).
    pub(super) items_seen: bool,
}

impl ListState<'_> {
    /// Whether the answer says which objects are gone, so that its commit may delete what
    /// it left out. Only a whole list does; one page of it says nothing, and neither does an
    /// answer that is not evidently a list or held items the hub could not read or file (an
    /// unreadable item may be an object the cloud still has).
    pub(super) fn is_whole(&self, paged: bool, not_objects: u64) -> bool {
        !paged && !self.continue_token && self.is_list && not_objects == 0 && self.no_namespace == 0
    }
}

/// The built-in namespaced resources, by group. Which kinds are namespaced is the
/// apiserver's discovery; the hub does not keep it, so beyond these a kind counts as
/// namespaced only when its request names a namespace (a custom resource listed across all
/// namespaces, or watched, is filed as its objects say).
const NAMESPACED: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "bindings",
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "persistentvolumeclaims",
            "pods",
            "podtemplates",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "serviceaccounts",
            "services",
        ],
    ),
    (
        "apps",
        &[
            "controllerrevisions",
            "daemonsets",
            "deployments",
            "replicasets",
            "statefulsets",
        ],
    ),
    ("autoscaling", &["horizontalpodautoscalers"]),
    ("batch", &["cronjobs", "jobs"]),
    ("coordination.k8s.io", &["leases"]),
    ("discovery.k8s.io", &["endpointslices"]),
    ("events.k8s.io", &["events"]),
    ("networking.k8s.io", &["ingresses", "networkpolicies"]),
    ("policy", &["poddisruptionbudgets"]),
    ("rbac.authorization.k8s.io", &["rolebindings", "roles"]),
    ("storage.k8s.io", &["csistoragecapacities"]),
];

/// Whether objects of `collection` live in namespaces: the request named one
/// (`request_namespace`, from `/namespaces/<ns>/...`), or the kind is a built-in namespaced
/// one. An object of such a kind without a namespace is never stored: its file would lie
/// where the directory of a namespace of that name belongs, and that namespace's objects
/// could then not be cached.
pub(super) fn namespaced(collection: &CollectionKey, request_namespace: Option<&str>) -> bool {
    request_namespace.is_some()
        || NAMESPACED.iter().any(|(group, resources)| {
            *group == collection.gvr.group && resources.contains(&collection.gvr.resource.as_str())
        })
}

/// Whether `key` lacks the namespace its kind needs; says why it is not stored when `log`.
fn lacks_namespace(key: &ObjectKey, namespaced: bool, log: bool) -> bool {
    let lacks = namespaced && key.namespace.is_none();
    if lacks {
        Metrics::inc(&METRICS.cache_errors);
        if log {
            log::warn!(
                "cache: {}/{} object {:?} has no namespace, but the kind is namespaced; \
                 not stored (counted in tinyhub_cache_errors_total)",
                key.collection.component,
                key.collection.dir_name(),
                key.name
            );
        }
    }
    lacks
}

/// A watch event. Only a JSON object is one, as for object heads: a derived struct would
/// also read `["ADDED",{…}]` field by field.
struct Event<'a> {
    kind: Cow<'a, str>,
    object: &'a RawValue,
}

impl<'de: 'a, 'a> Deserialize<'de> for Event<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, rename = "type")]
            kind: Cow<'a, str>,
            #[serde(borrow)]
            object: &'a RawValue,
        }
        let Fields { kind, object } = from_map(d)?;
        Ok(Event { kind, object })
    }
}

/// What the decoder locates in the units of a body of `shape`, for the rules below: the heads
/// of objects and list items, and the type and object head of watch events.
pub(super) fn located_paths(shape: BodyShape) -> &'static [Path] {
    match shape {
        BodyShape::Object | BodyShape::List => HEAD_PATHS,
        BodyShape::WatchStream => EVENT_PATHS,
    }
}

/// The head of the object `bytes`: from what the decoder located in it when it can be
/// trusted (one pass over the bytes), else parsed.
fn head_of<'a>(
    bytes: &'a [u8],
    found: Option<&Located>,
) -> Result<ObjectHead<'a>, serde_json::Error> {
    match found.and_then(|f| ObjectHead::located(bytes, f, 0, 0)) {
        Some(head) => Ok(head),
        None => ObjectHead::read(bytes),
    }
}

/// Whether an object of `kind` (its own, or for a list item without one, its list's items')
/// is in the form `collection` holds: a metadata view keeps only `PartialObjectMetadata`. A
/// cloud that ignores `as=` answers whole objects as plain JSON, which the client takes too;
/// they are not stored in its view (unbound pods among them: that view has no spec to judge).
/// Said at debug level: a watch says it for each event.
fn in_view_form(collection: &CollectionKey, kind: Option<&str>) -> bool {
    let fits = collection.view == View::Full || kind == Some(METADATA_KIND);
    if !fits {
        log::debug!(
            "cache: the cloud answered {}/{} with {} objects, not metadata only; not stored",
            collection.component,
            collection.dir_name(),
            kind.unwrap_or("untyped")
        );
    }
    fits
}

/// Where an object goes, or why it is not stored.
fn object_key(
    collection: &CollectionKey,
    head: &ObjectHead<'_>,
) -> Option<(ObjectKey, Option<String>)> {
    if head.kind.as_deref() == Some("Status") {
        return None;
    }
    let meta = head.metadata.as_ref()?;
    let name = meta.name.as_deref().filter(|n| !n.is_empty())?;
    // A pod not bound to a node is of no use to a node (as in YurtHub). A metadata view's
    // pod has no spec to tell: it is kept as the cloud sent it.
    let full_pod = collection.view == View::Full
        && collection.gvr.group.is_empty()
        && collection.gvr.resource == "pods";
    if full_pod {
        let bound = head
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if !bound {
            return None;
        }
    }
    Some((
        ObjectKey {
            collection: collection.clone(),
            namespace: meta
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            name: name.to_owned(),
        },
        meta.resource_version.as_deref().map(str::to_owned),
    ))
}

/// Counts a unit of an answer that is not a JSON object (it is skipped), and logs the first
/// of each answer: a broken answer may hold thousands.
fn not_an_object(
    not_objects: &mut u64,
    collection: &CollectionKey,
    what: &str,
    e: &serde_json::Error,
) {
    Metrics::inc(&METRICS.cache_errors);
    *not_objects += 1;
    if *not_objects == 1 {
        log::warn!(
            "cache: {what} in an answer for {}/{} is not a JSON object ({e}); skipped, as is \
             any other in this answer (counted in tinyhub_cache_errors_total)",
            collection.component,
            collection.dir_name()
        );
    }
}

/// Stores one object an answer carried (a get, or a write's answer): only a JSON object,
/// only where `object_key` files it, never over a newer resourceVersion. `found` is what the
/// decoder located in it for [`HEAD_PATHS`], if it did; `request_namespace` the namespace
/// the request named. False only when the store failed (a skipped non-object is no failure).
pub(super) fn put_object(
    store: &Store,
    failures: &mut FailureLog,
    collection: &CollectionKey,
    request_namespace: Option<&str>,
    bytes: &[u8],
    found: Option<&Located>,
    not_objects: &mut u64,
) -> bool {
    store_object(
        store,
        failures,
        collection,
        namespaced(collection, request_namespace),
        bytes,
        head_of(bytes, found),
        not_objects,
    )
}

fn store_object(
    store: &Store,
    failures: &mut FailureLog,
    collection: &CollectionKey,
    namespaced: bool,
    bytes: &[u8],
    head: Result<ObjectHead<'_>, serde_json::Error>,
    not_objects: &mut u64,
) -> bool {
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            not_an_object(not_objects, collection, "an object", &e);
            return true;
        }
    };
    if in_view_form(collection, head.kind.as_deref())
        && let Some((key, rv)) = object_key(collection, &head)
        && !lacks_namespace(&key, namespaced, true)
    {
        return count_put(
            failures,
            store.put(&key, bytes, rv.as_deref()),
            "object",
            &key,
        );
    }
    true
}

/// Keeps a TokenRequest answer for offline TokenRequests; one without a token or a readable
/// expiry could never be served, so it is not kept. (The token itself is never logged.)
pub(super) fn put_token(
    store: &Store,
    failures: &mut FailureLog,
    target: &TokenTarget,
    bytes: &[u8],
) {
    let Some(digest) = &target.digest else {
        return;
    };
    if crate::tokens::expiry(bytes).is_none() {
        log::debug!(
            "cache: the TokenRequest answer for {}/{} has no token or expiry; not kept",
            target.namespace,
            target.name
        );
        return;
    }
    let key = TokenKey {
        component: target.component.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        digest: digest.clone(),
    };
    let _ = count_put(failures, store.put_token(&key, bytes), "token answer", &key);
}

/// Applies one watch event: ADDED and MODIFIED store the object, DELETED removes it (and
/// leaves a tombstone); BOOKMARK and ERROR change nothing; a non-object is counted.
/// `found` is what the decoder located in it for [`EVENT_PATHS`]. False only when the store
/// failed.
pub(super) fn watch_event(
    store: &Store,
    failures: &mut FailureLog,
    collection: &CollectionKey,
    bytes: &[u8],
    found: Option<&Located>,
    not_objects: &mut u64,
) -> bool {
    // The event's type and object as located, when serde would read the same.
    let located = found.and_then(|f| {
        let kind = located_str(bytes, f.span(0).ok()?)??;
        let (start, stop) = f.span(1).ok()??;
        Some((kind, start, stop, f))
    });
    let (kind, object, head) = match located {
        Some((kind, start, stop, f)) => {
            let head = ObjectHead::located(bytes, f, 2, start);
            (kind, &bytes[start..stop], head)
        }
        None => match serde_json::from_slice::<Event<'_>>(bytes) {
            Ok(e) => (e.kind, e.object.get().as_bytes(), None),
            Err(e) if !starts_object(bytes) => {
                not_an_object(not_objects, collection, "a watch event", &e);
                return true;
            }
            Err(e) => {
                log::warn!(
                    "cache: a watch event for {} does not parse: {e}",
                    collection.dir_name()
                );
                Metrics::inc(&METRICS.cache_errors);
                return true;
            }
        },
    };
    let head = head.map_or_else(|| ObjectHead::read(object), Ok);
    // A watch's request names its namespace or not; the writer is not told which.
    let namespaced = namespaced(collection, None);
    match kind.as_ref() {
        "ADDED" | "MODIFIED" => store_object(
            store,
            failures,
            collection,
            namespaced,
            object,
            head,
            not_objects,
        ),
        "DELETED" => {
            let head = match head {
                Ok(h) => h,
                Err(e) => {
                    not_an_object(not_objects, collection, "a watch object", &e);
                    return true;
                }
            };
            if !in_view_form(collection, head.kind.as_deref()) {
                return true;
            }
            let Some((key, rv)) = object_key(collection, &head) else {
                return true;
            };
            if lacks_namespace(&key, namespaced, true) {
                return true;
            }
            // The store keeps a newer object (a late DELETED from an older stream) and
            // refuses every older version from now on.
            match store.delete(&key, rv.as_deref()) {
                Ok(deleted) => {
                    if deleted {
                        Metrics::inc(&METRICS.cache_objects_deleted);
                    }
                    failures.stored(&key);
                    true
                }
                Err(e) => {
                    failures.error("delete", &key, &e);
                    false
                }
            }
        }
        // BOOKMARK carries no object change; ERROR ends the stream (the client re-lists).
        _ => true,
    }
}

/// Notes a list's own members as they stream past: its kind (is it a `…List`?), apiVersion,
/// resourceVersion and continue token, which decide how its items are filed and whether it
/// may delete.
pub(super) fn list_member(list: &mut ListState<'_>, key: &str, value: &[u8]) {
    match key {
        "kind" => {
            if let Ok(kind) = serde_json::from_slice::<String>(value) {
                list.is_list = kind.ends_with("List");
                list.item_kind = Some(kind.strip_suffix("List").unwrap_or(&kind).to_owned());
            }
        }
        "apiVersion" => list.api_version = serde_json::from_slice::<String>(value).ok(),
        "metadata" => {
            if let Ok(meta) = serde_json::from_slice::<ObjectMeta<'_>>(value) {
                list.resource_version = meta.resource_version.map(Cow::into_owned);
                list.replace.set_list_rv(list.resource_version.as_deref());
                list.continue_token = meta.continue_token.is_some_and(|c| !c.is_empty());
            }
        }
        _ => {}
    }
}

/// Stages one list item with `kind` and `apiVersion` set from the list (the apiserver leaves
/// them out of items). False when the list can no longer commit. `found` is what the decoder
/// located in it for [`HEAD_PATHS`].
pub(super) fn list_item(
    failures: &mut FailureLog,
    collection: &CollectionKey,
    list: &mut ListState<'_>,
    bytes: &[u8],
    found: &Located,
    not_objects: &mut u64,
) -> bool {
    let head = match head_of(bytes, Some(found)) {
        Ok(h) => h,
        // The rest of the list is still cached; the list then deletes nothing (see `end`).
        Err(e) => {
            not_an_object(not_objects, collection, "a list item", &e);
            return true;
        }
    };
    // Whole objects in a metadata view: none of the answer is kept (it must not commit, or
    // it would delete every object of the view it left out).
    let kind = head.kind.as_deref().or(list.item_kind.as_deref());
    if !in_view_form(collection, kind) {
        return false;
    }
    let Some((key, rv)) = object_key(collection, &head) else {
        return true;
    };
    // Like an unreadable item, it leaves the list not whole (see `ListState::is_whole`);
    // said once an answer.
    if lacks_namespace(&key, list.namespaced, list.no_namespace == 0) {
        list.no_namespace += 1;
        return true;
    }
    let owned;
    let object: &[u8] = if head.kind.is_none() {
        let (Some(kind), Some(api_version)) = (&list.item_kind, &list.api_version) else {
            log::warn!(
                "cache: a {} list gave items before its kind; not cached",
                collection.dir_name()
            );
            return false;
        };
        // An item may carry its `apiVersion` all the same: named twice, the file could
        // not be read back (a head refuses a repeated member) and would never be served.
        let api_version = head.api_version.is_none().then_some(api_version.as_str());
        owned = with_type_meta(bytes, kind, api_version);
        &owned
    } else {
        bytes
    };
    let result = list
        .replace
        .put(key.namespace.as_deref(), &key.name, object, rv.as_deref());
    match result {
        Ok(_) => {
            // Stored when the list commits: a key that failed before leaves the list then.
            if let Some(failed) = failures.error_keys.contains(&key) {
                list.failed_keys.push(failed);
            }
            true
        }
        Err(e) => {
            failures.error("stage", &key, &e);
            false
        }
    }
}

/// `{...}` with `"kind":..` and, when given (the item lacks its own), `"apiVersion":..`
/// inserted at the front.
fn with_type_meta(object: &[u8], kind: &str, api_version: Option<&str>) -> Vec<u8> {
    let extra = kind.len() + api_version.map_or(0, str::len) + 32;
    let mut out = Vec::with_capacity(object.len() + extra);
    out.extend_from_slice(b"{\"kind\":");
    // Kinds and versions are plain identifiers; serde_json escapes anything odd.
    out.extend_from_slice(&serde_json::to_vec(kind).unwrap_or_default());
    if let Some(api_version) = api_version {
        out.extend_from_slice(b",\"apiVersion\":");
        out.extend_from_slice(&serde_json::to_vec(api_version).unwrap_or_default());
    }
    let start = object
        .iter()
        .position(|&b| b == b'{')
        .map_or(object.len(), |i| i + 1);
    let rest = &object[start..];
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests;
