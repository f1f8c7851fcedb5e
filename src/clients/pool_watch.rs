//! The feeder of one pool-scope resource's node-local watch cache (YURTHUB.md §4.5): one
//! list of the whole resource from the cloud, fed to [`WatchCache::replace`] object by
//! object as it streams, then watches from the cache's resourceVersion, each event applied
//! as it arrives. Every local client's list and watch of the resource is then served from
//! that one cache (`proxy::pool_local`), so the cloud sees one list and one watch per
//! resource per node instead of one per client.
//!
//! Design decisions:
//!
//! - **Started at start, not on the first request** (app.rs, edge mode): every edge node
//!   runs kube-proxy and coredns, which list both default resources within seconds of
//!   booting, so the memory would be spent anyway; a cache warming since start spares those
//!   first clients a 429 and the informer backoff after it; and the thread's life is the
//!   hub's (one stop channel), with no start from a request thread.
//! - **The multiplexer's identity**: the hub's credentials with the User-Agent
//!   `multiplexer-proxy-<node>`, as YurtHub's multiplexer sends (`pool::identity`). It
//!   talks to `Upstream` directly, never through the proxy, so it cannot loop into its own
//!   cache; the component is not a cache agent, so nothing is written to disk.
//! - **Bounded memory**: the list is cut by the cache's incremental decoder (one object at
//!   a time, at most `MAX_OBJECT_BYTES`); only the indexed objects (what the cache keeps
//!   anyway) are gathered until the list ends, never the body.
//! - **Resume, relist, back off**: a watch that ends by its time, or whose connection
//!   breaks (or ends inside an event), resumes from the cache's resourceVersion (every event and bookmark moves it);
//!   a 410, an ERROR event or an event the cache cannot apply lists again (the relist is a
//!   diff, so local watchers carry on); a failed list waits `retry` (the heartbeat interval)
//!   before the next try; nothing is asked of a cloud whose servers are all unhealthy.
//! - **gzip**: it asks `Accept-Encoding: gzip` (the apiserver compresses bodies over 128 KiB,
//!   lists only: its watch streams are never compressed); a gzip body is inflated by the
//!   cache's own decoder as it streams, and the link series count the compressed bytes. A
//!   1,000-EndpointSlice list is ~14x smaller on the link (954 KB → 68 KB with the stand-in)
//!   for ~1 ms more CPU on x86-64 (release) to inflate.
//! - **What is not relisted**: a watch cut inside an event (a proxy's clean EOF) resumes, as
//!   every whole event before it was applied; an object the index cannot read is left out,
//!   counted (`tinyhub_pool_cache_skipped_objects_total`), and its resourceVersion applied,
//!   since a relist would leave it out again, once per update of that object.
//! - Offline, the cache keeps what it holds and keeps serving it (see `proxy::pool_local`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{ClientError, read_units, watch_deadline};
use crate::cache::decode::{BodyShape, DecodeError, Unit};
use crate::proxy::pool_local::random_between;
use crate::route::{Deadline, Identity};
use crate::upstream::{Answer, Outgoing, Upstream};
use crate::watchcache::{ApplyError, WatchCache};

/// A list of a whole resource: time for a large cluster over a slow link.
const LIST_DEADLINE: Duration = Duration::from_secs(300);
/// Watches last a random time in this range (seconds), as client-go's reflector picks
/// them, so the watches of many nodes do not all renew at once.
const WATCH_SECONDS: (u64, u64) = (300, 600);
/// A watch that ends sooner than this is resumed only after the retry pause.
const MIN_WATCH: Duration = Duration::from_secs(1);

/// Why a list was cut: larger than [`crate::watchcache::CacheOptions::max_list_bytes`].
const TOO_LARGE: &str = "the list is larger than the node-local cache takes";

/// What one feeder needs.
pub(crate) struct Feeder {
    /// The cloud.
    pub upstream: Arc<Upstream>,
    /// The cache it fills.
    pub cache: WatchCache,
    /// `multiplexer-proxy-<node>`.
    pub user_agent: String,
    /// The pause after a failure (`--heartbeat-interval-seconds`).
    pub retry: Duration,
}

/// The collection path of the cache's resource: `/api/v1/services`,
/// `/apis/discovery.k8s.io/v1/endpointslices`.
pub(crate) fn collection_path(cache: &WatchCache) -> String {
    let r = cache.resource();
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.resource)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.resource)
    }
}

/// How one watch ended.
enum Watched {
    /// `stop` fired.
    Stopped,
    /// By its time or a broken connection: resume from the cache's resourceVersion.
    Resume { broke: Option<ClientError> },
    /// A 410, an ERROR event or an event the cache refused: list again.
    Relist(String),
}

impl Feeder {
    /// Lists and watches until `stop` fires or closes.
    pub(crate) fn run(self, stop: Receiver<()>) {
        let path = collection_path(&self.cache);
        let mut listed = false;
        let mut failed_lists = 0u32;
        loop {
            let mut pause = true;
            if self.upstream.backends().any_healthy() {
                if !listed {
                    match self.list(&path, &stop) {
                        Ok(false) => return,
                        Ok(true) => {
                            listed = true;
                            failed_lists = 0;
                        }
                        Err(e) => {
                            failed_lists += 1;
                            let line = format!("list of {path} for the pool cache failed: {e}");
                            // The first failure is news; the retries every `retry` are not.
                            if failed_lists == 1 {
                                log::info!("{line}");
                            } else {
                                log::debug!("{line} ({failed_lists} times)");
                            }
                        }
                    }
                }
                if listed {
                    let began = Instant::now();
                    match self.watch(&path, &stop) {
                        Watched::Stopped => return,
                        Watched::Resume { broke: None } => {
                            // A server that ends watches at once must not make a busy loop.
                            pause = began.elapsed() < MIN_WATCH;
                        }
                        Watched::Resume { broke: Some(e) } => {
                            log::debug!("watch of {path} for the pool cache broke off: {e}");
                        }
                        Watched::Relist(why) => {
                            log::info!(
                                "watch of {path} for the pool cache ended ({why}); listing again"
                            );
                            listed = false;
                            // At once, unless the cloud ends every watch at once.
                            pause = began.elapsed() < MIN_WATCH;
                        }
                    }
                }
            }
            let wait = if pause { self.retry } else { Duration::ZERO };
            match stop.recv_timeout(wait) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    /// A GET of `path` with the multiplexer's User-Agent; a status other than 200 is an error.
    fn get(&self, path: &str, deadline: Deadline) -> Result<Answer, ClientError> {
        let headers = [
            ("User-Agent".to_owned(), self.user_agent.clone()),
            ("Accept-Encoding".to_owned(), "gzip".to_owned()),
        ];
        let answer = self.upstream.send(Outgoing {
            method: "GET",
            path_and_query: path,
            headers: &headers,
            accept: Some("application/json"),
            body: None,
            deadline,
            identity: Identity::Hub,
        })?;
        match answer.status {
            200 => Ok(answer),
            status => Err(ClientError::Status(status)),
        }
    }

    /// Lists the whole resource into the cache; Ok(false) when `stop` fired. Tells the cache
    /// whether the cloud's answer was usable ([`WatchCache::feeder_failing`]).
    fn list(&self, path: &str, stop: &Receiver<()>) -> Result<bool, ClientError> {
        if self.cache.list_paused() {
            return Err(ClientError::Answer(
                "the last list was larger than the cache takes; its requests are forwarded",
            ));
        }
        let listed = self.list_once(path, stop);
        if let Err(ClientError::Answer(TOO_LARGE)) = listed {
            log::warn!(
                "the list of {path} is larger than the {} bytes the node-local cache takes: its lists and watches are forwarded, listed again in {} s",
                self.cache.max_list_bytes(),
                crate::watchcache::LIST_TOO_LARGE_PAUSE.as_secs()
            );
            self.cache.list_too_large();
            return listed;
        }
        match &listed {
            Ok(_) => self.cache.feeder_ok(),
            Err(e) => self.note_failure(e),
        }
        listed
    }

    /// Counts an unusable answer of the cloud against the cache's feed; a connection that
    /// failed (offline, or a server going down) does not count.
    fn note_failure(&self, e: &ClientError) {
        if !matches!(e, ClientError::Upstream(_) | ClientError::Read(_)) {
            self.cache.feeder_failed();
        }
    }

    /// [`Feeder::list`] itself.
    fn list_once(&self, path: &str, stop: &Receiver<()>) -> Result<bool, ClientError> {
        let mut answer = self.get(path, Deadline::Bounded(LIST_DEADLINE))?;
        let mut objects = Vec::new();
        let mut rv: Option<String> = None;
        let mut skipped = 0usize;
        let (mut bytes, cap) = (0usize, self.cache.max_list_bytes());
        let whole = read_units(
            &mut answer,
            BodyShape::List,
            stop,
            &mut |_| {},
            &mut |unit| {
                match unit {
                    // Past the cap the read stops: nothing more is gathered or downloaded.
                    Unit::ListItem(raw) if bytes.saturating_add(raw.len()) > cap => {
                        return Err(ClientError::Answer(TOO_LARGE));
                    }
                    Unit::ListItem(raw) => match self.cache.parse(raw) {
                        Ok(object) => {
                            bytes += raw.len();
                            objects.push(object);
                        }
                        // One odd object does not cost every client the rest.
                        Err(e) => {
                            skipped += 1;
                            self.cache.note_skipped();
                            log::info!("an object of {path} cannot be cached and is left out: {e}");
                        }
                    },
                    Unit::ListMember {
                        key: "metadata",
                        value,
                    } => {
                        #[derive(serde::Deserialize)]
                        struct Meta {
                            #[serde(rename = "resourceVersion")]
                            resource_version: Option<String>,
                        }
                        rv = serde_json::from_slice::<Meta>(value)?.resource_version;
                    }
                    _ => {}
                }
                Ok(())
            },
        )?;
        if !whole {
            return Ok(false);
        }
        let rv = rv.ok_or(ClientError::Answer("the list has no resourceVersion"))?;
        let count = objects.len();
        match self.cache.replace(&rv, objects) {
            Ok(replaced) => {
                log::debug!(
                    "pool cache of {path} listed at {rv}: {count} objects ({skipped} left out), {} added, {} modified, {} deleted{}",
                    replaced.added,
                    replaced.modified,
                    replaced.deleted,
                    if replaced.reset { ", reset" } else { "" }
                );
                Ok(true)
            }
            Err(ApplyError::BadResourceVersion(_)) => Err(ClientError::Answer(
                "the list's resourceVersion is not a number",
            )),
            Err(_) => Err(ClientError::Answer("the list could not be applied")),
        }
    }

    /// Watches from the cache's resourceVersion, applying each event.
    fn watch(&self, path: &str, stop: &Receiver<()>) -> Watched {
        let rv = self.cache.resource_version();
        let seconds = random_between(WATCH_SECONDS.0, WATCH_SECONDS.1);
        let url = format!(
            "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={seconds}"
        );
        let mut answer = match self.get(&url, watch_deadline(seconds)) {
            Ok(answer) => answer,
            Err(ClientError::Status(410)) => return Watched::Relist("410 Gone".to_owned()),
            Err(e) => {
                self.note_failure(&e);
                return Watched::Resume { broke: Some(e) };
            }
        };
        self.cache.feeder_ok();
        let mut refused: Option<ApplyError> = None;
        let ended = read_units(
            &mut answer,
            BodyShape::WatchStream,
            stop,
            &mut |_| {},
            &mut |unit| {
                let Unit::WatchEvent(raw) = unit else {
                    return Ok(());
                };
                // An object the index cannot read is left out and the watch goes on past it:
                // a relist would leave it out again, once per update of that object.
                let applied = match self.cache.apply_event_json(raw) {
                    Err(ApplyError::Object(e)) => {
                        log::info!("an object of {path} cannot be cached and is left out: {e}");
                        self.cache.skip_unreadable(raw)
                    }
                    other => other,
                };
                match applied {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        refused = Some(e);
                        Err(ClientError::Answer("a watch event was not applied"))
                    }
                }
            },
        );
        match (ended, refused) {
            (_, Some(e)) => Watched::Relist(e.to_string()),
            (Ok(true), None) => Watched::Resume { broke: None },
            (Ok(false), None) => Watched::Stopped,
            // A stream that ends inside an event (a clean EOF from a proxy, a cut line) lost
            // nothing applied: every whole event before it moved the cache's resourceVersion.
            (
                Err(
                    e @ (ClientError::Upstream(_)
                    | ClientError::Read(_)
                    | ClientError::Decode(DecodeError::Truncated)),
                ),
                None,
            ) => Watched::Resume { broke: Some(e) },
            (Err(e), None) => Watched::Relist(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchcache::{CacheOptions, Resource};

    #[test]
    fn collection_paths_are_the_apiservers() {
        let services = WatchCache::new(Resource::services(), CacheOptions::default());
        assert_eq!(collection_path(&services), "/api/v1/services");
        let slices = WatchCache::new(Resource::endpointslices(), CacheOptions::default());
        assert_eq!(
            collection_path(&slices),
            "/apis/discovery.k8s.io/v1/endpointslices"
        );
    }
}
