//! Fetches again the answers whose cache session was dropped because the disk fell more than
//! the writer's budget behind the network (a big list over a fast link, a slow flash). The
//! client got its answer at full speed; this thread repeats the request on the hub's own
//! credentials and feeds it to the writer at the disk's pace, so the cache still ends up
//! holding it. A dropped watch is refilled as a list of the same scope.
//!
//! One request at a time; repeats of a request queued together collapse into one.

use std::io::Read;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::ClientError;
use crate::cache::decode::BodyShape;
use crate::cache::writer::{CacheTx, Refill};
use crate::config::WorkingMode;
use crate::metrics::{METRICS, Metrics};
use crate::proxy::Filters;
use crate::proxy::filter_body::{BodyFilter, StageTime};
use crate::request::{self, Verb};
use crate::route::{self, Deadline, Identity};
use crate::upstream::{Outgoing, Upstream};

/// Refills waiting at most; past it new ones are dropped (the next list refills anyway).
const QUEUE: usize = 32;
/// Reads from the cloud while refilling.
const READ_BUFFER: usize = 16 * 1024;

/// The sending side, given to the cache writer queue, and the pending set.
pub(crate) struct Refills {
    tx: Sender<Refill>,
    rx: Receiver<Refill>,
}

impl Refills {
    /// A refill queue.
    pub(crate) fn new() -> Refills {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        Refills { tx, rx }
    }

    /// Where dropped sessions send their refill.
    pub(crate) fn sender(&self) -> Sender<Refill> {
        self.tx.clone()
    }
}

impl Default for Refills {
    fn default() -> Self {
        Refills::new()
    }
}

/// Runs refills until `stop` fires or closes.
pub(crate) fn run(
    refills: Refills,
    upstream: Arc<Upstream>,
    cache: CacheTx,
    filters: Option<Filters>,
    stop: Receiver<()>,
) {
    loop {
        let first = crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(refills.rx) -> refill => match refill {
                Ok(refill) => refill,
                Err(_) => return,
            },
        };
        // Everything queued now, each request once: repeats collapse.
        let mut batch = vec![first];
        for refill in refills.rx.try_iter() {
            if !batch.contains(&refill) {
                batch.push(refill);
            }
        }
        for refill in batch {
            if !upstream.backends().any_healthy() {
                log::info!(
                    "cache: not refilling {} for {}: the cloud is unreachable",
                    refill.path_and_query,
                    refill.component
                );
                continue;
            }
            match refill_one(&upstream, &cache, filters.as_ref(), &refill) {
                Ok(()) => {
                    Metrics::inc(&METRICS.cache_refills);
                    log::info!(
                        "cache: refilled {} for {}",
                        refill.path_and_query,
                        refill.component
                    );
                }
                Err(e) => log::info!(
                    "cache: refilling {} for {} failed: {e}",
                    refill.path_and_query,
                    refill.component
                ),
            }
        }
    }
}

/// Reads the request again and feeds its answer to the writer, through the response filters
/// the component's request had (the cache holds what the component was given).
fn refill_one(
    upstream: &Upstream,
    cache: &CacheTx,
    filters: Option<&Filters>,
    refill: &Refill,
) -> Result<(), ClientError> {
    let path = list_of_watch(&refill.path_and_query);
    // The request as a value: the component is known, not read back from a User-Agent.
    let req = request::on_behalf_of(&refill.component, "GET", &path)
        .map_err(|e| ClientError::Refused(e.to_string()))?;
    if req.verb != Verb::List && req.verb != Verb::Get {
        return Err(ClientError::Refused(format!("not a read: {:?}", req.verb)));
    }
    let route =
        route::route(&req, true, WorkingMode::Edge).map_err(|s| ClientError::Refused(s.message))?;
    let target = route.cache.map_err(ClientError::NotCacheable)?;
    // The cloud's logs name who asked: the hub, for this component.
    let headers = [(
        "User-Agent".to_owned(),
        format!("{}/tinyhub-refill", refill.component),
    )];
    let mut answer = upstream.send(Outgoing {
        method: "GET",
        path_and_query: &path,
        headers: &headers,
        accept: Some("application/json"),
        body: None,
        deadline: Deadline::Bounded(route::REQUEST_DEADLINE),
        identity: Identity::Hub,
    })?;
    if answer.status != 200 || !answer.is_json() {
        return Err(ClientError::Status(answer.status));
    }
    let target = route::target_for_answer(&target, answer.header("content-type")).ok_or(
        ClientError::Answer("the answer is in a form the cache does not keep"),
    )?;
    let shape = if req.verb == Verb::List {
        BodyShape::List
    } else {
        BodyShape::Object
    };
    // The filter stage, timed as the relay's is.
    let mut filter = filters.and_then(|f| {
        let chain = f.chain_for(&req);
        (!chain.is_empty()).then(|| {
            let body = BodyFilter::new(shape, answer.is_gzip(), chain, &f.ctx, &*f.lookups);
            (body, StageTime::new(chain))
        })
    });
    let gzip = answer.is_gzip() && filter.is_none();
    let mut session = cache
        .begin_paced(target, 200, gzip)
        .ok_or(ClientError::QueueFull)?;
    let mut buf = vec![0u8; READ_BUFFER];
    let mut out = Vec::new();
    loop {
        let n = answer.body.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let data = match filter.as_mut() {
            Some((f, stage)) => {
                out.clear();
                stage.time(|| f.feed(&buf[..n], &mut out))?;
                readable(f)?;
                &out[..]
            }
            None => &buf[..n],
        };
        if !session.chunk(data) {
            return Err(ClientError::QueueFull);
        }
    }
    if let Some((f, stage)) = filter.as_mut() {
        out.clear();
        stage.time(|| f.finish(&mut out))?;
        readable(f)?;
        if !session.chunk(&out) {
            return Err(ClientError::QueueFull);
        }
    }
    session.finish(true);
    Ok(())
}

/// An error when a unit went out unfiltered because the filters could not read it: such an
/// answer is not for the cache.
fn readable(filter: &mut BodyFilter<'_>) -> Result<(), ClientError> {
    match filter.take_unreadable() {
        Some(e) => Err(ClientError::Decode(e)),
        None => Ok(()),
    }
}

/// The list of the same scope as a watch (or the request itself when it is not one): the
/// watch-only parameters and the legacy `/watch/` prefix are dropped.
pub(crate) fn list_of_watch(path_and_query: &str) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let mut segments: Vec<&str> = path.split('/').collect();
    // "", "api", "v1", "watch", ... or "", "apis", group, version, "watch", ...
    let prefix_at = match segments.get(1) {
        Some(&"api") => 3,
        Some(&"apis") => 4,
        _ => usize::MAX,
    };
    if segments.get(prefix_at) == Some(&"watch") && segments.len() > prefix_at + 1 {
        segments.remove(prefix_at);
    }
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let key = p.split('=').next().unwrap_or("");
            !matches!(
                key,
                "watch"
                    | "resourceVersion"
                    | "resourceVersionMatch"
                    | "timeoutSeconds"
                    | "allowWatchBookmarks"
                    | "sendInitialEvents"
            )
        })
        .collect();
    let path = segments.join("/");
    if kept.is_empty() {
        path
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_becomes_the_list_of_its_scope() {
        let cases = [
            (
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true&resourceVersion=42&timeoutSeconds=300&allowWatchBookmarks=true",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
            ),
            (
                "/api/v1/watch/namespaces/a/configmaps?labelSelector=x",
                "/api/v1/namespaces/a/configmaps?labelSelector=x",
            ),
            (
                "/apis/apps/v1/watch/deployments",
                "/apis/apps/v1/deployments",
            ),
            ("/api/v1/namespaces/a/pods", "/api/v1/namespaces/a/pods"),
            ("/api/v1/watch", "/api/v1/watch"),
        ];
        for (watch, list) in cases {
            assert_eq!(list_of_watch(watch), list, "{watch}");
        }
    }
}
