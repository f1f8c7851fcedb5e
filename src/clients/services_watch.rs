//! Keeps [`TopologyIndex`] current: one list of all Services, streamed item by item, then a
//! watch from its resourceVersion, renewed from the last one seen; a list again when the
//! watch cannot resume (410 Gone, an ERROR event). YurtHub keeps an informer of every Service
//! for servicetopology (YurtHub's `pkg/yurthub/filter/servicetopology`); this keeps only the
//! annotated ones, and spares the filter a round trip to the cloud per EndpointSlice.
//!
//! The hub's own requests (component `tinyhub`): never filtered and not cached. Offline the
//! index keeps what it knew; nothing is filtered then anyway (offline answers come from the
//! cache, filtered when they were stored).
//!
//! In edge mode, when Services are a pool-scope resource, the node already keeps one list
//! and watch of every Service for its watch cache (`pool_watch`): [`run_from_cache`] then
//! feeds the index from that cache (a local watcher with no selector) instead of a second
//! list and watch over the link, and falls back to [`run`]'s own while that cache serves
//! none (Services left the run-time pool-scope set, or it cannot hold them). [`run`] is for
//! cloud mode, or a start-up pool scope without Services.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;

use super::{ClientError, get_as_hub, read_list_items, read_object_events, watch_deadline};
use crate::filters::topology_index::{self, TopologyIndex};
use crate::names::Gvr;
use crate::request::Accept;
use crate::route::Deadline;
use crate::selector::Selectors;
use crate::upstream::Upstream;
use crate::watchcache::{EventType, WatchCache, WatchEvent, WatchNext};
use crate::watchcache::{PoolCaches, Unserved};

/// The collection watched: every Service of the cluster.
const SERVICES: &str = "/api/v1/services";
/// How long one watch lasts before it is renewed from the last resourceVersion.
const WATCH_SECONDS: u64 = 300;
/// A list of all Services: time for a large cluster over a slow link.
const LIST_DEADLINE: Duration = Duration::from_secs(300);
/// A watch that ends sooner than this is resumed only after the retry pause.
const MIN_WATCH: Duration = Duration::from_secs(1);

/// Lists and watches the Services until `stop` fires or closes; `retry` apart after a failure.
pub(crate) fn run(
    upstream: Arc<Upstream>,
    index: Arc<TopologyIndex>,
    retry: Duration,
    stop: Receiver<()>,
) {
    run_until(&upstream, &index, retry, &stop, &|| false);
}

/// [`run`] until `stop` fires or closes (then true), or until `done` says so (then false):
/// `done` is asked before each list and watch, so up to a watch's length ([`WATCH_SECONDS`])
/// after it turns true.
fn run_until(
    upstream: &Upstream,
    index: &TopologyIndex,
    retry: Duration,
    stop: &Receiver<()>,
    done: &dyn Fn() -> bool,
) -> bool {
    let mut resume: Option<String> = None;
    let mut failed_lists = 0u32;
    loop {
        if done() {
            return false;
        }
        let mut pause = true;
        if upstream.backends().any_healthy() {
            let rv = match resume.take() {
                Some(rv) => Ok(Some(rv)),
                None => list(upstream, index, stop),
            };
            match rv {
                Ok(None) => return true,
                Ok(Some(rv)) => {
                    failed_lists = 0;
                    let began = Instant::now();
                    match watch(upstream, index, &rv, stop) {
                        Watched::Stopped => return true,
                        Watched::Ended(last) => {
                            resume = Some(last);
                            // A server that ends watches at once must not make a busy loop.
                            pause = began.elapsed() < MIN_WATCH;
                        }
                        Watched::Broke(last, e) => {
                            // A dropped connection: resume where it was, as an informer does.
                            log::debug!("watch of Services broke off: {e}");
                            resume = Some(last);
                        }
                        Watched::Expired(e) => log::debug!("watch of Services ended: {e}"),
                    }
                }
                Err(e) => {
                    index.list_failed();
                    failed_lists += 1;
                    let line = format!("list of Services for servicetopology failed: {e}");
                    // The first failure is news; the retries every `retry` are not.
                    if failed_lists == 1 {
                        log::info!("{line}");
                    } else {
                        log::debug!("{line} ({failed_lists} times)");
                    }
                }
            }
        } else {
            // Offline at start: the lookups need not wait for a list that cannot come.
            index.list_failed();
        }
        let wait = if pause { retry } else { Duration::ZERO };
        if !sleep(stop, wait) {
            return true;
        }
    }
}

/// How often [`run_from_cache`] looks at `stop` and, before the cache is filled, at the cache.
const CACHE_TICK: Duration = Duration::from_secs(1);

/// Waits `wait` unless `stop` fires or closes first (then false).
fn sleep(stop: &Receiver<()>, wait: Duration) -> bool {
    matches!(
        stop.recv_timeout(wait),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    )
}

/// Keeps `index` from the node-local Services watch cache of `pool` until `stop` fires or
/// closes: once the cache is filled, a watch of it with `sendInitialEvents` (every Service,
/// then the end marker) replaces the index whole, and each later event updates it. A watch
/// the cache ends (410: this thread fell behind the history, or the cache was reset) starts
/// over the same way. Nothing goes over the link. Each event's Service is decoded once here,
/// as [`run`] decodes what it reads; only the annotated ones are kept.
///
/// - While the cache's feed fails (its data frozen), the index keeps what it has and the
///   cache is looked at again after a pause doubling from [`CACHE_TICK`] to `retry`: each
///   look would decode every Service again.
/// - While the cache serves nothing — Services left the run-time pool-scope set (the leader
///   ConfigMap's), its list was too large, or it is not filled past the warming time — the
///   index is kept by [`run`]'s own list and watch of the cloud, until the cache serves
///   again (noticed at that watch's end, within [`WATCH_SECONDS`]).
pub(crate) fn run_from_cache(
    pool: Arc<PoolCaches>,
    upstream: Arc<Upstream>,
    index: Arc<TopologyIndex>,
    retry: Duration,
    stop: Receiver<()>,
) {
    let stopped = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    // The cache as local clients see it (`PoolCaches::servable`'s rule).
    let services = Gvr::new("", "v1", "services");
    let cache = || pool.servable(&services, Accept::Json);
    let serving = || cache().is_ok_and(WatchCache::is_ready);
    let mut backoff = CACHE_TICK;
    loop {
        if stopped() {
            return;
        }
        let cache = match cache() {
            Err(Unserved::Failing) => {
                log::debug!(
                    "the Services cache's feed fails: servicetopology's index waits {backoff:?}"
                );
                if !sleep(&stop, backoff) {
                    return;
                }
                backoff = (backoff * 2).min(retry.max(CACHE_TICK));
                continue;
            }
            Ok(cache) if cache.is_ready() => cache,
            // Not filled yet: its feeder lists at start; the lookups wait for the index
            // within their patience, then look Services up one by one.
            Ok(_) if pool.warming() => {
                if !sleep(&stop, CACHE_TICK) {
                    return;
                }
                continue;
            }
            // Out of the set, too large, or not filled past the warming time.
            _ => {
                log::info!(
                    "servicetopology reads Services from the cloud: the node-local cache of /v1/services serves none"
                );
                if run_until(&upstream, &index, retry, &stop, &serving) {
                    return;
                }
                log::info!("servicetopology reads Services from the node-local cache again");
                continue;
            }
        };
        backoff = CACHE_TICK;
        if !follow(cache, &index, &stop) {
            return;
        }
    }
}

/// Feeds `index` from a watch of `cache` (every Service, then its events) until the cache
/// ends the watch (true, after a [`CACHE_TICK`]) or `stop` fires (false).
fn follow(cache: &WatchCache, index: &TopologyIndex, stop: &Receiver<()>) -> bool {
    let stopped = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    let Ok(mut watcher) = cache.watch_from(None, Some(true), None, Selectors::everything()) else {
        return sleep(stop, CACHE_TICK);
    };
    let mut initial: Option<HashMap<String, String>> = Some(HashMap::new());
    loop {
        if stopped() {
            return false;
        }
        let events = match watcher.next(CACHE_TICK) {
            Ok(WatchNext::Events(events)) => events,
            Ok(WatchNext::Idle) => continue,
            Err(status) => {
                log::debug!(
                    "servicetopology's watch of the Services cache ended ({}); starting over",
                    status.message
                );
                // Not at once: a cache whose feed fails ends every watch at once.
                return sleep(stop, CACHE_TICK);
            }
        };
        for event in events {
            match (&event, initial.as_mut()) {
                (WatchEvent::InitialEventsEnd(_), Some(annotated)) => {
                    log::debug!("{} Services carry a topology annotation", annotated.len());
                    index.replace(std::mem::take(annotated));
                    initial = None;
                }
                (WatchEvent::Object { kind, object, .. }, annotated) => {
                    let service = match serde_json::from_slice::<Value>(object.json()) {
                        Ok(service) => service,
                        Err(e) => {
                            log::debug!("a Service in the cache cannot be read: {e}");
                            continue;
                        }
                    };
                    match annotated {
                        Some(annotated) => {
                            if let Some((key, Some(keys))) = topology_index::entry(&service) {
                                annotated.insert(key, keys);
                            }
                        }
                        None => index.apply(&service, *kind == EventType::Deleted),
                    }
                }
                _ => {}
            }
        }
    }
}

/// Lists every Service into a new index; its resourceVersion, None when `stop` fired.
fn list(
    upstream: &Upstream,
    index: &TopologyIndex,
    stop: &Receiver<()>,
) -> Result<Option<String>, ClientError> {
    let mut answer = get_as_hub(upstream, SERVICES, Deadline::Bounded(LIST_DEADLINE))?;
    let mut annotated = HashMap::new();
    let rv = read_list_items(&mut answer, stop, &mut |raw| {
        match serde_json::from_slice::<Value>(raw) {
            Ok(service) => {
                if let Some((key, Some(keys))) = topology_index::entry(&service) {
                    annotated.insert(key, keys);
                }
            }
            // One odd Service does not cost the others their topology.
            Err(e) => log::debug!("a Service in the list cannot be read: {e}"),
        }
        Ok(())
    })?;
    let Some(rv) = rv else {
        return Ok(None);
    };
    log::debug!("{} Services carry a topology annotation", annotated.len());
    index.replace(annotated);
    Ok(Some(rv))
}

/// How one watch ended.
enum Watched {
    /// `stop` fired.
    Stopped,
    /// By its time: resume from this resourceVersion.
    Ended(String),
    /// The connection failed: resume from this resourceVersion.
    Broke(String, ClientError),
    /// An ERROR event (410 Gone: the resourceVersion is too old), an unreadable stream or
    /// a status the watch cannot resume from: list again.
    Expired(ClientError),
}

/// Watches from `rv`, applying each event.
fn watch(upstream: &Upstream, index: &TopologyIndex, rv: &str, stop: &Receiver<()>) -> Watched {
    let path = format!(
        "{SERVICES}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}"
    );
    let mut answer = match get_as_hub(upstream, &path, watch_deadline(WATCH_SECONDS)) {
        Ok(answer) => answer,
        Err(e @ ClientError::Status(410)) => return Watched::Expired(e),
        Err(e) => return Watched::Broke(rv.to_owned(), e),
    };
    let mut last = rv.to_owned();
    let ended = read_object_events(&mut answer, stop, &mut last, &mut |object, deleted| {
        index.apply(object, deleted);
    });
    match ended {
        Ok(true) => Watched::Ended(last),
        Ok(false) => Watched::Stopped,
        Err(e @ (ClientError::Upstream(_) | ClientError::Read(_))) => Watched::Broke(last, e),
        Err(e) => Watched::Expired(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LbMode;
    use crate::health::Backends;
    use crate::pool::resources::PoolScope;
    use crate::watchcache::CacheOptions;

    fn service(name: &str, rv: u64, keys: Option<&str>) -> Vec<u8> {
        let mut svc = serde_json::json!({"metadata": {"namespace": "shop", "name": name,
                                         "resourceVersion": rv.to_string()}});
        if let Some(keys) = keys {
            svc["metadata"]["annotations"] = serde_json::json!({"openyurt.io/topologyKeys": keys});
        }
        serde_json::to_vec(&svc).unwrap()
    }

    #[test]
    fn the_index_follows_the_services_cache_without_a_watch_of_its_own() {
        let scope = PoolScope::with_defaults([]);
        let (pool, _) = PoolCaches::new(scope, "edge-1", &CacheOptions::default());
        let pool = Arc::new(pool);
        let cache = pool.services().unwrap().clone();
        // No cloud: nothing is to be read from one.
        let backends = Arc::new(Backends::new(Vec::new(), LbMode::RoundRobin));
        let upstream = Arc::new(Upstream::new(backends, None, None, 16).unwrap());
        let index = Arc::new(TopologyIndex::new(Duration::from_secs(5)));
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let thread = {
            let (pool, index) = (Arc::clone(&pool), Arc::clone(&index));
            let retry = Duration::from_secs(1);
            std::thread::spawn(move || run_from_cache(pool, upstream, index, retry, stop))
        };
        // Filled after the thread started: it waits for the cache, then reads it whole.
        let objects = [
            service("web", 3, Some("kubernetes.io/hostname")),
            service("db", 4, None),
        ]
        .iter()
        .map(|b| cache.parse(b).unwrap())
        .collect();
        cache.replace("10", objects).unwrap();
        assert_eq!(
            index.get("shop", "web"),
            Some(Some("kubernetes.io/hostname".to_owned()))
        );
        assert_eq!(index.get("shop", "db"), Some(None));
        // Later events reach it.
        let annotated = cache
            .parse(&service("db", 11, Some("openyurt.io/nodepool")))
            .unwrap();
        cache.apply(EventType::Modified, annotated).unwrap();
        let gone = cache.parse(&service("web", 12, None)).unwrap();
        cache.apply(EventType::Deleted, gone).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while index.get("shop", "db") != Some(Some("openyurt.io/nodepool".to_owned()))
            || index.get("shop", "web") != Some(None)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the index did not follow"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The feed fails: the index keeps what it has and is not rebuilt from the frozen
        // cache every second (a decode of every Service each time).
        while !cache.feeder_failing() {
            cache.feeder_failed();
        }
        index.set(
            "shop/marker".to_owned(),
            Some("kubernetes.io/zone".to_owned()),
        );
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(
            index.get("shop", "marker"),
            Some(Some("kubernetes.io/zone".to_owned())),
            "the index was rebuilt from a cache whose feed fails"
        );
        // The feed recovers: the index follows the cache again, whole.
        cache.feeder_ok();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while index.get("shop", "marker") != Some(None) {
            assert!(std::time::Instant::now() < deadline, "not rebuilt");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            index.get("shop", "db"),
            Some(Some("openyurt.io/nodepool".to_owned()))
        );
        drop(stop_tx);
        thread.join().unwrap();
    }
}
