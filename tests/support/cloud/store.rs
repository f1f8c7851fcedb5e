//! The stand-in cloud's data: objects per kind in key order (namespace, name), one global
//! resourceVersion counter, a log of watch events with a settable compaction point, and
//! the live watchers each mutation is broadcast to.
//!
//! Objects are kept serialised (without `kind`/`apiVersion`) plus the few fields selectors
//! need, so a 50 MB list costs about 50 MB. The store knows nothing of HTTP; it answers
//! with `ApiError` values that the HTTP layer turns into `Status` answers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use serde_json::{Map, Value, json};

use super::super::util::{lock, merge_patch, name_suffix, new_uid, rfc3339, unix_now};
use super::kinds::{KINDS, Kind, KindId};
use super::status::ApiError;

/// One stored object.
#[derive(Clone, Debug)]
pub struct Obj {
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// `metadata.namespace` ("" for cluster-scoped kinds).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels` (string values).
    pub labels: Vec<(String, String)>,
    /// `spec.nodeName`, "" when absent.
    pub node_name: String,
    /// `status.phase`, "" when absent.
    pub phase: String,
    /// `metadata.creationTimestamp`.
    pub created: String,
    /// The object as JSON, without `kind` and `apiVersion`.
    pub body: String,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

impl Obj {
    /// Builds an object from its JSON value (any `kind`/`apiVersion` is dropped).
    pub fn from_value(mut v: Value) -> Obj {
        if let Some(m) = v.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        let labels = v["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Obj {
            rv: str_at(&v, &["metadata", "resourceVersion"])
                .parse()
                .unwrap_or(0),
            namespace: str_at(&v, &["metadata", "namespace"]).to_string(),
            name: str_at(&v, &["metadata", "name"]).to_string(),
            labels,
            node_name: str_at(&v, &["spec", "nodeName"]).to_string(),
            phase: str_at(&v, &["status", "phase"]).to_string(),
            created: str_at(&v, &["metadata", "creationTimestamp"]).to_string(),
            body: v.to_string(),
        }
    }

    /// The stored JSON, parsed (without `kind`/`apiVersion`).
    pub fn value(&self) -> Value {
        // The body was produced by serde_json from a Value, so it always parses.
        serde_json::from_str(&self.body).expect("stored body is valid JSON")
    }

    /// The object with `kind` and `apiVersion`, as a get answers it.
    pub fn value_with_kind(&self, kind: &Kind) -> Value {
        let mut v = self.value();
        if let Some(m) = v.as_object_mut() {
            m.insert("kind".into(), json!(kind.kind));
            m.insert("apiVersion".into(), json!(kind.api_version()));
        }
        v
    }

    /// Appends the JSON, with `kind`/`apiVersion` first when `typed`, without re-parsing.
    pub fn write_json(&self, kind: &Kind, typed: bool, out: &mut Vec<u8>) {
        if !typed {
            out.extend_from_slice(self.body.as_bytes());
            return;
        }
        out.extend_from_slice(b"{\"apiVersion\":\"");
        out.extend_from_slice(kind.api_version().as_bytes());
        out.extend_from_slice(b"\",\"kind\":\"");
        out.extend_from_slice(kind.kind.as_bytes());
        out.push(b'"');
        let rest = &self.body[1..];
        if rest.trim_start() != "}" {
            out.push(b',');
        }
        out.extend_from_slice(rest.as_bytes());
    }

    /// A field selector's view of the object ("" for fields it does not have).
    pub fn field(&self, path: &str) -> String {
        match path {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "spec.nodeName" => self.node_name.clone(),
            "status.phase" => self.phase.clone(),
            // Rarely selected fields: read from the body (events' involvedObject.*, ...).
            path => {
                let v = self.value();
                let mut cur = &v;
                for p in path.split('.') {
                    match cur.get(p) {
                        Some(next) => cur = next,
                        None => return String::new(),
                    }
                }
                match cur {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    _ => String::new(),
                }
            }
        }
    }

    /// The same object with a new resourceVersion (for DELETED events).
    fn with_rv(&self, rv: u64) -> Obj {
        let mut v = self.value();
        v["metadata"]["resourceVersion"] = json!(rv.to_string());
        Obj {
            rv,
            body: v.to_string(),
            ..self.clone()
        }
    }
}

/// Watch event types the store produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as logged and broadcast.
#[derive(Debug)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Kind changed.
    pub kind: KindId,
    /// What happened.
    pub etype: EventType,
    /// The object after the change (the last state, with the deletion's RV, for DELETED).
    pub obj: Arc<Obj>,
    /// The object before a MODIFIED change (selectors turn transitions into ADDED/DELETED).
    pub prev: Option<Arc<Obj>>,
}

/// Which part of an object a write replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The object; `status` is kept from the stored object for kinds with a status
    /// subresource.
    Main,
    /// Only `status` (the `/status` subresource).
    Status,
}

type Key = (String, String);

struct Watcher {
    id: u64,
    kind: KindId,
    tx: Sender<Arc<Event>>,
}

struct State {
    rv: u64,
    compacted: u64,
    objects: Vec<BTreeMap<Key, Arc<Obj>>>,
    removed: Vec<bool>,
    log: VecDeque<Arc<Event>>,
    watchers: Vec<Watcher>,
    next_watcher: u64,
    /// In-process observers (the cloud's own controllers): fed like watchers, not counted.
    taps: Vec<(KindId, Sender<Arc<Event>>)>,
}

/// The object store. Shared (`Arc`) by every apiserver instance of one cloud.
pub struct Store {
    state: Mutex<State>,
    /// Notified when watchers come or go.
    watchers_changed: Condvar,
}

/// One page of a list.
pub struct ListPage {
    /// Matching objects of this page, in key order.
    pub items: Vec<Arc<Obj>>,
    /// The store's resourceVersion when the list was taken.
    pub rv: u64,
    /// Key of the last item when more matching items follow.
    pub next: Option<(String, String)>,
    /// How many matching items follow this page.
    pub remaining: usize,
}

/// A registered watch: what to replay first, then live events on `rx`.
pub struct Subscription {
    /// Events to send before live ones (synthetic ADDED for a start from "now").
    pub initial: Vec<Arc<Event>>,
    /// Live events of this kind; disconnected when the kind is removed.
    pub rx: Receiver<Arc<Event>>,
    /// The resourceVersion the watch starts after.
    pub from: u64,
    _guard: WatchGuard,
}

struct WatchGuard {
    store: Arc<Store>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        lock(&self.store.state).watchers.retain(|w| w.id != self.id);
        self.store.watchers_changed.notify_all();
    }
}

impl State {
    fn check_kind(&self, kind: KindId) -> Result<&'static Kind, ApiError> {
        if self.removed[kind] {
            Err(ApiError::no_route())
        } else {
            Ok(&KINDS[kind])
        }
    }

    fn publish(&mut self, kind: KindId, etype: EventType, obj: Arc<Obj>, prev: Option<Arc<Obj>>) {
        let ev = Arc::new(Event {
            rv: obj.rv,
            kind,
            etype,
            obj,
            prev,
        });
        self.log.push_back(ev.clone());
        for w in self.watchers.iter().filter(|w| w.kind == kind) {
            // A watcher whose handler has gone unregisters itself through its guard.
            let _ = w.tx.send(ev.clone());
        }
        for (_, tx) in self.taps.iter().filter(|(k, _)| *k == kind) {
            let _ = tx.send(ev.clone());
        }
    }

    fn key(kind: &Kind, ns: &str, name: &str) -> Key {
        let ns = if kind.namespaced { ns } else { "" };
        (ns.to_string(), name.to_string())
    }

    /// Replaces `key`'s object with `v` (already validated), bumping the resourceVersion.
    fn commit(&mut self, kind: KindId, key: Key, mut v: Value, dry_run: bool) -> Arc<Obj> {
        let rv = self.rv + 1;
        v["metadata"]["resourceVersion"] = json!(rv.to_string());
        let obj = Arc::new(Obj::from_value(v));
        if dry_run {
            return obj;
        }
        self.rv = rv;
        let prev = self.objects[kind].insert(key, obj.clone());
        let etype = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.publish(kind, etype, obj.clone(), prev);
        obj
    }

    fn replace(
        &mut self,
        kind_id: KindId,
        ns: &str,
        name: &str,
        mut v: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        let kind = self.check_kind(kind_id)?;
        let key = Self::key(kind, ns, name);
        let Some(old) = self.objects[kind_id].get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        if !v.is_object() || !v["metadata"].is_object() {
            return Err(ApiError::bad_request(
                "the object must be a JSON object with metadata",
            ));
        }
        let body_name = str_at(&v, &["metadata", "name"]);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_rv = str_at(&v, &["metadata", "resourceVersion"]);
        if !body_rv.is_empty() && body_rv != old.rv.to_string() {
            return Err(ApiError::conflict(kind, name));
        }
        let old_v = old.value();
        if kind.has_status {
            match target {
                Target::Main => match old_v.get("status") {
                    Some(s) => v["status"] = s.clone(),
                    None => {
                        if let Some(m) = v.as_object_mut() {
                            m.remove("status");
                        }
                    }
                },
                Target::Status => {
                    let status = v.get("status").cloned();
                    v = old_v.clone();
                    match status {
                        Some(s) => v["status"] = s,
                        None => {
                            if let Some(m) = v.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
            }
        }
        if let Some(m) = v.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        let meta = &mut v["metadata"];
        meta["name"] = json!(name);
        if kind.namespaced {
            meta["namespace"] = json!(ns);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        for k in ["uid", "creationTimestamp"] {
            meta[k] = old_v["metadata"][k].clone();
        }
        meta["resourceVersion"] = json!(old.rv.to_string());
        if let Some(g) = old_v["metadata"]["generation"].as_u64() {
            let changed = v.get("spec") != old_v.get("spec");
            v["metadata"]["generation"] = json!(if changed { g + 1 } else { g });
        }
        if v == old_v {
            // A no-op write keeps the resourceVersion and emits nothing, as the real one.
            return Ok(old);
        }
        Ok(self.commit(kind_id, key, v, dry_run))
    }
}

impl State {
    /// The garbage collector's part on a Node's deletion: the Leases it owns (an
    /// ownerReference to its uid) go too. The real collector does it a moment later; here
    /// it is at once, each with its own DELETED event.
    fn collect_node_leases(&mut self, node: &Obj) {
        let uid = node.value()["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let Some(leases) = super::kinds::find("coordination.k8s.io", "v1", "leases") else {
            return;
        };
        if uid.is_empty() || self.removed[leases] {
            return;
        }
        let owned: Vec<(Key, Arc<Obj>)> = self.objects[leases]
            .iter()
            .filter(|(_, o)| {
                o.value()["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str()))
            })
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, old) in owned {
            self.rv += 1;
            let gone = Arc::new(old.with_rv(self.rv));
            self.objects[leases].remove(&key);
            self.publish(leases, EventType::Deleted, gone, Some(old));
        }
    }
}

impl Store {
    /// An empty store with the namespaces a fresh cluster has.
    pub fn new() -> Store {
        let store = Store {
            state: Mutex::new(State {
                rv: 0,
                compacted: 0,
                objects: KINDS.iter().map(|_| BTreeMap::new()).collect(),
                removed: vec![false; KINDS.len()],
                log: VecDeque::new(),
                watchers: Vec::new(),
                next_watcher: 0,
                taps: Vec::new(),
            }),
            watchers_changed: Condvar::new(),
        };
        let ns = super::kinds::find("", "v1", "namespaces").expect("namespaces is registered");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let v = json!({"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]},
                           "status": {"phase": "Active"}});
            // Creating these fixed names in an empty store cannot conflict.
            store.create(ns, "", v, false).expect("seed namespace");
        }
        store
    }

    /// Whether the kind is served (CRDs can be removed).
    pub fn present(&self, kind: KindId) -> bool {
        !lock(&self.state).removed[kind]
    }

    /// Serves or stops serving a kind. Removing deletes its objects and ends its watches.
    pub fn set_present(&self, kind: KindId, present: bool) {
        let mut st = lock(&self.state);
        st.removed[kind] = !present;
        if !present {
            st.objects[kind].clear();
            st.watchers.retain(|w| w.kind != kind);
            st.log.retain(|e| e.kind != kind);
        }
        self.watchers_changed.notify_all();
    }

    /// The current (highest) resourceVersion.
    pub fn current_rv(&self) -> u64 {
        lock(&self.state).rv
    }

    /// The compaction point: watches and continue tokens from before it get 410.
    pub fn compacted(&self) -> u64 {
        lock(&self.state).compacted
    }

    /// Drops logged events up to `rv` (at most the current resourceVersion).
    pub fn compact_to(&self, rv: u64) {
        let mut st = lock(&self.state);
        let rv = rv.min(st.rv);
        st.compacted = st.compacted.max(rv);
        let c = st.compacted;
        st.log.retain(|e| e.rv > c);
    }

    /// One object.
    pub fn get(&self, kind: KindId, ns: &str, name: &str) -> Result<Arc<Obj>, ApiError> {
        let st = lock(&self.state);
        let k = st.check_kind(kind)?;
        st.objects[kind]
            .get(&State::key(k, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(k, name))
    }

    /// Objects of a kind in `ns` (all namespaces for `None`) after `after`, filtered,
    /// at most `limit` of them.
    pub fn list(
        &self,
        kind: KindId,
        ns: Option<&str>,
        after: Option<&(String, String)>,
        filter: &dyn Fn(&Obj) -> bool,
        limit: Option<usize>,
    ) -> Result<ListPage, ApiError> {
        let st = lock(&self.state);
        st.check_kind(kind)?;
        let mut items = Vec::new();
        let mut remaining = 0;
        let mut next = None;
        let range = st.objects[kind]
            .iter()
            .filter(|((n, _), _)| ns.is_none_or(|ns| n == ns));
        for (key, obj) in range {
            if after.is_some_and(|a| key <= a) || !filter(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                if next.is_none() {
                    next = items
                        .last()
                        .map(|o: &Arc<Obj>| (o.namespace.clone(), o.name.clone()));
                }
                remaining += 1;
            } else {
                items.push(obj.clone());
            }
        }
        Ok(ListPage {
            items,
            rv: st.rv,
            next,
            remaining,
        })
    }

    /// Creates an object in `ns` (ignored for cluster-scoped kinds).
    pub fn create(
        &self,
        kind_id: KindId,
        ns: &str,
        mut v: Value,
        dry_run: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut st = lock(&self.state);
        let kind = st.check_kind(kind_id)?;
        if !v.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        if !v["metadata"].is_object() {
            v["metadata"] = Value::Object(Map::new());
        }
        let meta = &mut v["metadata"];
        let mut name = str_at(meta, &["name"]).to_string();
        if name.is_empty() {
            let generate = str_at(meta, &["generateName"]);
            if generate.is_empty() {
                return Err(ApiError::invalid(
                    kind,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = format!("{generate}{}", name_suffix());
        }
        let body_ns = str_at(meta, &["namespace"]);
        if kind.namespaced {
            if ns.is_empty() {
                return Err(ApiError::bad_request(
                    "a namespace is required for namespaced kinds",
                ));
            }
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta["namespace"] = json!(ns);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        meta["name"] = json!(name);
        meta["uid"] = json!(new_uid());
        meta["creationTimestamp"] = json!(rfc3339(unix_now()));
        if !kind.group.is_empty() && kind.has_status {
            meta["generation"] = json!(1);
        }
        let key = State::key(kind, ns, &name);
        if st.objects[kind_id].contains_key(&key) {
            return Err(ApiError::already_exists(kind, &name));
        }
        Ok(st.commit(kind_id, key, v, dry_run))
    }

    /// Replaces an object (PUT); 409 when the body's resourceVersion is set and stale.
    pub fn update(
        &self,
        kind: KindId,
        ns: &str,
        name: &str,
        v: Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        lock(&self.state).replace(kind, ns, name, v, target, dry_run)
    }

    /// Applies a JSON merge patch to an object.
    pub fn patch(
        &self,
        kind_id: KindId,
        ns: &str,
        name: &str,
        patch: &Value,
        target: Target,
        dry_run: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut st = lock(&self.state);
        let kind = st.check_kind(kind_id)?;
        let old = st.objects[kind_id]
            .get(&State::key(kind, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let mut v = old.value();
        // The stored version is the precondition unless the patch names one itself.
        merge_patch(&mut v, patch);
        st.replace(kind_id, ns, name, v, target, dry_run)
    }

    /// Deletes an object, answering its last state with the deletion's resourceVersion.
    pub fn delete(
        &self,
        kind_id: KindId,
        ns: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut st = lock(&self.state);
        let kind = st.check_kind(kind_id)?;
        let key = State::key(kind, ns, name);
        let Some(old) = st.objects[kind_id].get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        let gone = Arc::new(old.with_rv(st.rv + 1));
        if dry_run {
            return Ok(gone);
        }
        st.rv += 1;
        st.objects[kind_id].remove(&key);
        st.publish(kind_id, EventType::Deleted, gone.clone(), Some(old.clone()));
        if kind.resource == "nodes" {
            st.collect_node_leases(&old);
        }
        Ok(gone)
    }

    /// Rewrites an object unchanged under a new resourceVersion (a MODIFIED event): what
    /// another writer's update looks like to a client holding the old resourceVersion.
    pub fn touch(&self, kind_id: KindId, ns: &str, name: &str) -> Result<Arc<Obj>, ApiError> {
        let mut st = lock(&self.state);
        let kind = st.check_kind(kind_id)?;
        let key = State::key(kind, ns, name);
        let Some(old) = st.objects[kind_id].get(&key).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        Ok(st.commit(kind_id, key, old.value(), false))
    }

    /// Inserts `count` ready-made objects quickly (synthetic bulk data); `make(i, rv)`
    /// builds the i-th object with the resourceVersion it will get.
    pub fn insert_many(&self, kind: KindId, count: usize, make: &mut dyn FnMut(usize, u64) -> Obj) {
        let mut st = lock(&self.state);
        for i in 0..count {
            let rv = st.rv + 1;
            let obj = Arc::new(make(i, rv));
            st.rv = rv;
            let key = (obj.namespace.clone(), obj.name.clone());
            let prev = st.objects[kind].insert(key, obj.clone());
            let etype = if prev.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            st.publish(kind, etype, obj, prev);
        }
    }

    /// Registers a watcher of `kind`. `since` None: replay the current objects as ADDED;
    /// `Some(n)`: replay the logged events after `n`, or 410 Expired when `n` is before the
    /// compaction point.
    pub fn watch(
        self: &Arc<Self>,
        kind: KindId,
        since: Option<u64>,
    ) -> Result<Subscription, ApiError> {
        let mut st = lock(&self.state);
        st.check_kind(kind)?;
        let initial: Vec<Arc<Event>> = match since {
            None => st.objects[kind]
                .values()
                .map(|o| {
                    Arc::new(Event {
                        rv: o.rv,
                        kind,
                        etype: EventType::Added,
                        obj: o.clone(),
                        prev: None,
                    })
                })
                .collect(),
            Some(n) if n < st.compacted => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {n} ({})",
                    st.compacted
                )));
            }
            Some(n) => st
                .log
                .iter()
                .filter(|e| e.kind == kind && e.rv > n)
                .cloned()
                .collect(),
        };
        let (tx, rx) = unbounded();
        let id = st.next_watcher;
        st.next_watcher += 1;
        st.watchers.push(Watcher { id, kind, tx });
        self.watchers_changed.notify_all();
        let from = since.unwrap_or(st.rv);
        Ok(Subscription {
            initial,
            rx,
            from,
            _guard: WatchGuard {
                store: self.clone(),
                id,
            },
        })
    }

    /// Every later event of `kind`, for the cloud's own controllers (not a watcher: it is
    /// not counted, has no replay and lives as long as the store).
    pub fn tap(&self, kind: KindId) -> Receiver<Arc<Event>> {
        let (tx, rx) = unbounded();
        lock(&self.state).taps.push((kind, tx));
        rx
    }

    /// How many watchers are registered, for one kind or all.
    pub fn watcher_count(&self, kind: Option<KindId>) -> usize {
        let st = lock(&self.state);
        st.watchers
            .iter()
            .filter(|w| kind.is_none_or(|k| k == w.kind))
            .count()
    }

    /// Blocks until the number of watchers of `kind` satisfies `pred`; false on timeout.
    pub fn wait_watchers(
        &self,
        kind: KindId,
        pred: &dyn Fn(usize) -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if pred(st.watchers.iter().filter(|w| w.kind == kind).count()) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            st = self
                .watchers_changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
