//! Keeps the cache-agent set and the response filters' components in step with the ConfigMap
//! `kube-system/yurt-hub-cfg`: a thread lists it and then watches it through the cloud (as
//! component `tinyhub`, so in edge mode its answers are cached like any other and the setting
//! survives a restart while the cloud is down), and applies its `cache_agents` and filter keys
//! at once, without a restart. In cloud mode there is no cache; it runs for the filters only.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::{ClientError, get_as_hub, read_units, watch_deadline};
use crate::cache::agents::{CONFIG_NAME, CONFIG_NAMESPACE, CacheAgents, cache_agents_of};
use crate::cache::decode::{BodyShape, Unit};
use crate::cache::key::{CollectionKey, ObjectKey, View};
use crate::cache::store::Store;
use crate::cache::target::CacheTarget;
use crate::cache::writer::CacheTx;
use crate::filters::FilterReload;
use crate::mode::WorkingMode;
use crate::names::{Component, Gvr};
use crate::request;
use crate::requester::Requester;
use crate::route::{self, Deadline};
use crate::upstream::Upstream;

/// How long one watch of the ConfigMap lasts before it is renewed.
const WATCH_SECONDS: u64 = 300;
/// Largest ConfigMap list the watcher reads.
const MAX_LIST_BYTES: u64 = 4 * 1024 * 1024;

fn collection() -> CollectionKey {
    CollectionKey {
        component: Component::TINYHUB,
        gvr: Gvr::new("", "v1", "configmaps"),
        view: View::Full,
    }
}

/// Applies the copy cached by an earlier run, so the setting holds while the cloud is down.
pub(crate) fn load_cached(store: &Store, agents: &CacheAgents, filters: Option<&FilterReload>) {
    let key = ObjectKey {
        collection: collection(),
        namespace: Some(CONFIG_NAMESPACE.into()),
        name: CONFIG_NAME.into(),
    };
    if let Ok(Some(bytes)) = store.get(&key)
        && let Ok(cm) = serde_json::from_slice::<serde_json::Value>(&bytes)
    {
        agents.set_from_config(cache_agents_of(&cm));
        if let Some(filters) = filters {
            filters.apply(Some(&cm));
        }
    }
}

/// Runs the list-then-watch loop until `stop` fires or closes; `cache`: None in cloud mode.
pub(crate) fn run(
    upstream: Arc<Upstream>,
    agents: Arc<CacheAgents>,
    filters: Option<FilterReload>,
    cache: Option<CacheTx>,
    retry: Duration,
    stop: Receiver<()>,
) {
    let (filters, cache) = (filters.as_ref(), cache.as_ref());
    let base = format!(
        "/api/v1/namespaces/{CONFIG_NAMESPACE}/configmaps?fieldSelector=metadata.name%3D{CONFIG_NAME}"
    );
    loop {
        if upstream.backends().any_healthy() {
            match list(&upstream, &agents, filters, cache, &base) {
                Ok(rv) => {
                    if let Err(e) = watch(&upstream, &agents, filters, cache, &base, &rv, &stop) {
                        log::debug!("watch of {CONFIG_NAMESPACE}/{CONFIG_NAME} ended: {e}");
                    }
                }
                Err(e) => log::debug!("list of {CONFIG_NAMESPACE}/{CONFIG_NAME} failed: {e}"),
            }
        }
        match stop.recv_timeout(retry) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// The cache target of one of the watcher's own requests, as any request would get it.
fn cache_target(path: &str) -> Option<CacheTarget> {
    let headers = [("User-Agent".to_owned(), super::user_agent())];
    let mut req = request::classify("GET", path, &headers).ok()?;
    req.requester = Requester::hub();
    route::route(&req, true, WorkingMode::Edge)
        .ok()?
        .cache
        .ok()
        .map(std::sync::Arc::unwrap_or_clone)
}

/// Lists the ConfigMap, applies it, caches the answer; returns the list's resourceVersion.
fn list(
    upstream: &Upstream,
    agents: &CacheAgents,
    filters: Option<&FilterReload>,
    cache: Option<&CacheTx>,
    path: &str,
) -> Result<String, ClientError> {
    let mut answer = get_as_hub(upstream, path, Deadline::Bounded(Duration::from_secs(60)))?;
    let mut body = Vec::new();
    (&mut answer.body)
        .take(MAX_LIST_BYTES)
        .read_to_end(&mut body)?;
    let list: serde_json::Value = serde_json::from_slice(&body).map_err(ClientError::Json)?;
    let item = list
        .get("items")
        .and_then(|i| i.as_array())
        .and_then(|i| i.first());
    agents.set_from_config(item.and_then(cache_agents_of));
    if let Some(filters) = filters {
        filters.apply(item);
    }
    if let Some(mut session) = cache
        .zip(cache_target(path))
        .and_then(|(c, t)| c.begin(t, 200, false, None))
    {
        session.chunk(&body);
        session.finish(true);
    }
    list.pointer("/metadata/resourceVersion")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .ok_or(ClientError::Answer("the list has no resourceVersion"))
}

fn watch(
    upstream: &Upstream,
    agents: &CacheAgents,
    filters: Option<&FilterReload>,
    cache: Option<&CacheTx>,
    base: &str,
    rv: &str,
    stop: &Receiver<()>,
) -> Result<(), ClientError> {
    let path = format!("{base}&watch=1&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}");
    let mut answer = get_as_hub(upstream, &path, watch_deadline(WATCH_SECONDS))?;
    let mut session = cache
        .zip(cache_target(&path))
        .and_then(|(c, t)| c.begin(t, 200, false, None));
    let ended = read_units(
        &mut answer,
        BodyShape::WatchStream,
        stop,
        &mut |chunk| {
            if let Some(s) = session.as_mut()
                && !s.chunk(chunk)
            {
                session = None;
            }
        },
        &mut |unit| match unit {
            Unit::WatchEvent(bytes) => match apply_event(agents, filters, bytes) {
                EventOutcome::Applied => Ok(()),
                EventOutcome::Error => {
                    Err(ClientError::Answer("the watch ended with an ERROR event"))
                }
            },
            _ => Ok(()),
        },
    )?;
    if ended && let Some(s) = session {
        s.finish(true);
    }
    Ok(())
}

enum EventOutcome {
    Applied,
    Error,
}

fn apply_event(agents: &CacheAgents, filters: Option<&FilterReload>, bytes: &[u8]) -> EventOutcome {
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return EventOutcome::Applied;
    };
    match event.get("type").and_then(|t| t.as_str()) {
        Some("ADDED") | Some("MODIFIED") => {
            if let Some(object) = event.get("object") {
                agents.set_from_config(cache_agents_of(object));
                if let Some(filters) = filters {
                    filters.apply(Some(object));
                }
            }
        }
        Some("DELETED") => {
            agents.set_from_config(None);
            if let Some(filters) = filters {
                filters.apply(None);
            }
        }
        Some("ERROR") => return EventOutcome::Error,
        _ => {}
    }
    EventOutcome::Applied
}
