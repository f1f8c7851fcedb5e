//! Fetches again the answers whose cache session was dropped because the disk fell more than
//! the writer's budget behind the network (a big list over a fast link, a slow flash). The
//! client got its answer at full speed; this thread repeats the request on the hub's own
//! credentials and feeds it to the writer at the disk's pace, so the cache still ends up
//! holding it. A dropped watch is refilled as a list of the same scope.
//!
//! One request at a time, and a request is never fetched for an answer that a later one
//! already brought: drops of one request wait as one ([`Schedule`]); one is let go when an
//! answer to the same request that began after it reached the writer whole, a client's or a
//! refill's (the writer queue's ledger, [`RefillTx`]).
//!
//! A drop is weighed only once the writer is quiet (its queue empty for [`QUIET`]): a client
//! listing in a loop faster than the disk keeps the queue full, and each of its lists that
//! goes whole makes the drops before it needless, so while it lists the cloud is not asked
//! again; when it stops, the writer drains, and only a drop no later list brought is
//! fetched, once. Deciding at the drop instead raced the very next client list, which the
//! ledger could not yet count, and doubled the cloud's lists under a steady load. A load that
//! never lets the writer rest waits at most [`PATIENCE`] per drop, and a request is
//! refilled again only [`SPACING`] after its last refill: the cache is then never more than
//! that (and a refill) behind what such a client sees.
//!
//! The refill is sent as the node's own reads are (`Identity::Hub`, a bounded read): on the
//! pooled connections the client lists use, never one of its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::ClientError;
use crate::cache::writer::{CacheTx, Dropped, Refill, RefillTx, Refills};
use crate::filters::Chain;
use crate::filters::Filters;
use crate::filters::body::{BodyFilter, StageTime};
use crate::metrics::{METRICS, Metrics};
use crate::mode::WorkingMode;
use crate::request::{
    Accept, ApiRequest, LegacyPrefix, PATH_SAFE, QUERY_SAFE, Target, Verb, escape,
};
use crate::requester::Requester;
use crate::route::{self, Deadline, Identity};
use crate::stream::{self, BodyReads, FilterStage, Pumped, Stop, ToCache, pump};
use crate::upstream::{Outgoing, Upstream};

/// The least time between two refills of one request.
const SPACING: Duration = Duration::from_secs(5);
/// How long the writer's queue must have been seen empty before a drop is weighed: between
/// the lists of a client listing back to back the queue of a writer that fell behind never
/// empties, and a list in flight hands the writer a chunk at least every 32 KiB.
const QUIET: Duration = Duration::from_millis(500);
/// How often the queue is looked at while a drop waits for it to be quiet.
const LOOK: Duration = Duration::from_millis(100);
/// The longest a drop waits for a quiet writer: a load that keeps the queue full for good
/// (a list larger than the queue, listed in a loop) still has the cache refilled this often.
const PATIENCE: Duration = Duration::from_secs(30);

/// Since when the writer's queue has been seen empty, from looks at its depth.
#[derive(Debug, Default, Clone, Copy)]
struct Quiet(Option<Instant>);

impl Quiet {
    /// The queue held `depth` messages at `now`.
    fn look(&mut self, depth: i64, now: Instant) {
        if depth > 0 {
            self.0 = None;
        } else if self.0.is_none() {
            self.0 = Some(now);
        }
    }

    /// Seen empty for at least [`QUIET`] by `now`.
    fn quiet(&self, now: Instant) -> bool {
        self.0
            .is_some_and(|since| now.saturating_duration_since(since) >= QUIET)
    }
}

/// A drop waiting for its refill.
#[derive(Debug)]
struct Waiting {
    /// The request and its latest drop's `since`.
    dropped: Dropped,
    /// When its first drop (since its last refill) arrived: [`PATIENCE`] counts from it.
    first: Instant,
}

/// The drops waiting for their refill, one per request, and when each request was last
/// refilled.
#[derive(Default)]
struct Schedule {
    /// In arrival order.
    waiting: Vec<Waiting>,
    last_refill: HashMap<Refill, Instant>,
}

/// What the refill thread does next.
#[derive(Debug)]
enum Next {
    /// Refill this now (boxed: a drop is the largest by far, and rare).
    Refill(Box<Dropped>),
    /// Nothing is due before this long.
    Wait(Duration),
    /// Nothing waits.
    Idle,
}

impl Schedule {
    /// `dropped` arrived at `now`.
    fn add(&mut self, dropped: Dropped, now: Instant) {
        match self
            .waiting
            .iter_mut()
            .find(|w| w.dropped.refill == dropped.refill)
        {
            Some(w) => w.dropped.since = w.dropped.since.max(dropped.since),
            None => self.waiting.push(Waiting {
                dropped,
                first: now,
            }),
        }
    }

    /// The first waiting request whose last refill is [`SPACING`] behind `now`, once the
    /// writer is `quiet` or the drop waited [`PATIENCE`].
    fn next(&mut self, now: Instant, quiet: bool) -> Next {
        let due = |w: &Waiting| {
            let spaced = self
                .last_refill
                .get(&w.dropped.refill)
                .map_or(Duration::ZERO, |&at| {
                    (at + SPACING).saturating_duration_since(now)
                });
            let settled = if quiet {
                Duration::ZERO
            } else {
                // Looked at again soon: the queue may be quiet by then.
                (w.first + PATIENCE)
                    .saturating_duration_since(now)
                    .min(LOOK)
            };
            spaced.max(settled)
        };
        let mut soonest = None::<Duration>;
        for (i, w) in self.waiting.iter().enumerate() {
            let wait = due(w);
            if wait.is_zero() {
                return Next::Refill(Box::new(self.waiting.remove(i).dropped));
            }
            soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
        }
        soonest.map_or(Next::Idle, Next::Wait)
    }

    /// `refill` was just refilled (or tried): the next one waits [`SPACING`].
    fn refilled(&mut self, refill: Refill, now: Instant) {
        self.last_refill
            .retain(|_, &mut at| now.saturating_duration_since(at) < SPACING);
        self.last_refill.insert(refill, now);
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
    let mut schedule = Schedule::default();
    let mut quiet = Quiet::default();
    loop {
        for dropped in refills.rx().try_iter() {
            // A drop says the queue was full a moment ago, whatever the last look saw.
            quiet = Quiet::default();
            schedule.add(dropped, Instant::now());
        }
        let now = Instant::now();
        quiet.look(
            METRICS.cache_writer_queue_depth.load(Ordering::Relaxed),
            now,
        );
        let next = schedule.next(now, quiet.quiet(now));
        // One more while a refill runs: the gauge is 0 only once nothing is left to fetch.
        let running = i64::from(matches!(next, Next::Refill(_)));
        METRICS
            .cache_refills_waiting
            .store(schedule.waiting.len() as i64 + running, Ordering::Relaxed);
        let wait = match next {
            Next::Refill(dropped) => {
                let refill = dropped.refill.clone();
                if refill_if_needed(&upstream, &cache, filters.as_ref(), refills.tx(), *dropped) {
                    schedule.refilled(refill, Instant::now());
                    // Its answer went to the queue, unlooked at: the queue is quiet again
                    // only once looked at.
                    quiet = Quiet::default();
                }
                continue;
            }
            Next::Wait(wait) => wait,
            Next::Idle => Duration::from_secs(3600),
        };
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(refills.rx()) -> dropped => match dropped {
                Ok(dropped) => {
                    quiet = Quiet::default();
                    schedule.add(dropped, Instant::now());
                }
                Err(_) => return,
            },
            default(wait) => {}
        }
    }
}

/// Refills `dropped` unless an answer that began after it reached the writer whole, or the
/// cloud is unreachable; true when it asked the cloud.
fn refill_if_needed(
    upstream: &Upstream,
    cache: &CacheTx,
    filters: Option<&Filters>,
    tx: &RefillTx,
    dropped: Dropped,
) -> bool {
    let Dropped { refill, since } = dropped;
    if tx.brought(&refill, since) {
        Metrics::inc(&METRICS.cache_refills_coalesced);
        log::debug!(
            "cache: not refilling {} for {}: a later answer brought it",
            refill.sent_as,
            refill.request.component
        );
        return false;
    }
    if !upstream.backends().any_healthy() {
        log::info!(
            "cache: not refilling {} for {}: the cloud is unreachable",
            refill.sent_as,
            refill.request.component
        );
        return false;
    }
    let begun = tx.begun();
    match refill_one(upstream, cache, filters, &refill) {
        Ok(()) => {
            tx.whole(&refill, begun);
            Metrics::inc(&METRICS.cache_refills);
            log::info!(
                "cache: refilled {} for {}",
                refill.sent_as,
                refill.request.component
            );
        }
        Err(e) => log::info!(
            "cache: refilling {} for {} failed: {e}",
            refill.sent_as,
            refill.request.component
        ),
    }
    true
}

/// Reads the request again and feeds its answer to the writer, through the response filters
/// the component's request had (the cache holds what the component was given).
fn refill_one(
    upstream: &Upstream,
    cache: &CacheTx,
    filters: Option<&Filters>,
    refill: &Refill,
) -> Result<(), ClientError> {
    let req = list_of_watch(&refill.request);
    // Routed as the component's own read is, with its response filters: the Accept it was
    // sent with and the filters its answer went through are the route's.
    let chain = filters.map_or(Chain::EMPTY, |f| f.chain_for(&req));
    let route = route::route(&req, true, WorkingMode::Edge)
        .map_err(|s| ClientError::Refused(s.message))?
        .with_filters(chain, req.accept);
    let target = match refill.request.verb {
        // A watch's events were cached as such: its list is cached as the list of that scope.
        Verb::Watch => route.cache.clone().map_err(ClientError::NotCacheable)?,
        Verb::List | Verb::Get => refill.target.clone(),
        verb => return Err(ClientError::Refused(format!("not a read: {verb:?}"))),
    };
    let path = path_and_query(&req)?;
    // The form the client's answer was cached in (a client that takes only plain JSON is
    // sent its own Accept, which is that).
    let accept = route.upstream_accept.unwrap_or("application/json");
    // The cloud's logs name who asked: the hub, for this component.
    let headers = [(
        "User-Agent".to_owned(),
        format!("{}/tinyhub-refill", req.component),
    )];
    let mut answer = upstream
        .send(Outgoing {
            method: "GET",
            verb: req.verb,
            path_and_query: &path,
            headers: &headers,
            accept: Some(accept),
            encoding: crate::upstream::Encoding::Gzip,
            body: None,
            deadline: Deadline::Bounded(route::REQUEST_DEADLINE),
            identity: Identity::Hub,
            affinity: None,
        })?
        // Inflated here, where the link is told what gzip saved; the cache takes it plain.
        .inflate(None);
    if answer.status != 200 || !answer.is_json() {
        return Err(ClientError::Status(answer.status));
    }
    let target = route::target_for_answer(&target, answer.header("content-type")).ok_or(
        ClientError::Answer("the answer is in a form the cache does not keep"),
    )?;
    let shape = route::body_shape(&req);
    // The filter stage, timed as the relay's is; what it gives goes to the cache only.
    let chain = route.filters;
    let filters = filters.filter(|_| !chain.is_empty());
    let session = cache
        .begin_paced(target, 200, false)
        .ok_or(ClientError::QueueFull)?;
    let mut sink = match filters {
        Some(f) => {
            let body = BodyFilter::new(shape, false, chain, &f.ctx, &*f.lookups);
            FilterStage::new(ToCache::new(session), body, StageTime::new(chain), false)
        }
        None => FilterStage::none(ToCache::new(session)),
    };
    let mut reads = BodyReads::new(stream::BUFFER);
    match pump(&mut answer.body, &mut reads, &mut 0, &mut sink) {
        Pumped::Whole => Ok(()),
        Pumped::BrokeOff(e) => Err(ClientError::Read(e)),
        Pumped::Stopped(Stop::QueueFull) => Err(ClientError::QueueFull),
        Pumped::Stopped(Stop::Uncacheable(e)) => Err(ClientError::Decode(e)),
        Pumped::Stopped(stop) => Err(ClientError::Read(stop.into())),
    }
}

/// The list of the same scope as a watch (or the read itself when it is not one), as the hub
/// sends it: the watch-only parameters (`watch`, `resourceVersion`, `timeoutSeconds`) and the
/// legacy `/watch/` prefix are dropped; a watch of one object by the legacy prefix becomes its
/// get.
pub(crate) fn list_of_watch(req: &ApiRequest) -> ApiRequest {
    let mut list = req.clone();
    list.requester = Requester::hub();
    list.query.watch = false;
    list.query.resource_version = None;
    list.query.timeout_seconds = None;
    if let Target::Resource(r) = &mut list.target {
        if r.legacy_prefix == Some(LegacyPrefix::Watch) {
            r.legacy_prefix = None;
        }
        if matches!(req.verb, Verb::Watch | Verb::List | Verb::Get) {
            list.verb = if r.name.is_some() {
                Verb::Get
            } else {
                Verb::List
            };
            // A metadata watch's list asks for the list's form of its metadata.
            if let Accept::Metadata { json, .. } = req.accept {
                list.accept = Accept::Metadata {
                    list: list.verb == Verb::List,
                    json,
                };
            }
        }
    }
    list
}

/// The path and query of a read as the hub sends it, rendered from the classified request:
/// the path from its parts, the query from the parameters a read of the cache's keeps (the
/// selectors, `limit`, `continue`, `timeout`), escaped as Go's `url.Values` does.
fn path_and_query(req: &ApiRequest) -> Result<String, ClientError> {
    let mut out = String::new();
    match &req.target {
        Target::NonResource(path) => escape(path, PATH_SAFE, &mut out),
        Target::Resource(r) => {
            if r.extra_path || r.legacy_prefix.is_some() {
                return Err(ClientError::Refused(format!(
                    "not a read of the cache: {r:?}"
                )));
            }
            // `/` is path-safe: only the group and version are escaped.
            escape(&r.gvr.api_path(), PATH_SAFE, &mut out);
            if let Some(namespace) = &r.namespace {
                out.push_str("/namespaces/");
                escape(namespace, PATH_SAFE, &mut out);
            }
            for segment in [
                Some(&r.gvr.resource),
                r.name.as_ref(),
                r.subresource.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                out.push('/');
                escape(segment, PATH_SAFE, &mut out);
            }
        }
    }
    let q = &req.query;
    let timeout = q.timeout.map(|t| format!("{t}s"));
    let limit = q.limit.map(|l| l.to_string());
    let params = [
        ("labelSelector", q.label_selector.as_deref()),
        ("fieldSelector", q.field_selector.as_deref()),
        ("limit", limit.as_deref()),
        ("continue", q.continue_token.as_deref()),
        ("timeout", timeout.as_deref()),
    ];
    let mut sep = '?';
    for (key, value) in params {
        if let Some(value) = value {
            out.push(sep);
            out.push_str(key);
            out.push('=');
            escape(value, QUERY_SAFE, &mut out);
            sep = '&';
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str) -> Refill {
        let request = crate::request::on_behalf_of("kubelet", "GET", path).unwrap();
        let target = route::route(&request, true, WorkingMode::Edge)
            .unwrap()
            .cache
            .unwrap();
        Refill {
            request: Box::new(request),
            target,
            sent_as: path.to_owned(),
        }
    }

    /// The path and query the hub sends to refill what a request to `url` brought.
    fn list_of_watch_url(url: &str) -> String {
        let req = crate::request::on_behalf_of("kubelet", "GET", url).unwrap();
        path_and_query(&list_of_watch(&req)).unwrap()
    }

    #[test]
    fn a_drop_is_let_go_once_a_later_answer_went_whole_and_not_for_an_earlier_one() {
        let refills = Refills::new();
        let tx = refills.sender();
        let pods = request("/api/v1/pods");
        let (earlier, dropped, later) = (tx.begun(), tx.begun(), tx.begun());
        assert!(tx.dropped(pods.clone(), dropped));
        tx.whole(&pods, earlier);
        assert!(
            !tx.brought(&pods, dropped),
            "an answer begun before the drop is older"
        );
        tx.whole(&request("/api/v1/services"), later);
        assert!(!tx.brought(&pods, dropped), "another request");
        tx.whole(&pods, later);
        assert!(tx.brought(&pods, dropped));
        let queued = refills.rx().try_recv().unwrap();
        assert_eq!((queued.refill, queued.since), (pods, dropped));
    }

    #[test]
    fn drops_of_one_request_wait_as_one_and_a_refill_again_waits_its_spacing() {
        let mut schedule = Schedule::default();
        let (pods, services) = (request("/api/v1/pods"), request("/api/v1/services"));
        let t0 = Instant::now();
        for since in [1, 3, 2] {
            schedule.add(
                Dropped {
                    refill: pods.clone(),
                    since,
                },
                t0,
            );
        }
        let Next::Refill(first) = schedule.next(t0, true) else {
            panic!("a first drop is refilled once the writer is quiet");
        };
        assert_eq!(
            (&first.refill, first.since),
            (&pods, 3),
            "the latest drop's"
        );
        assert!(matches!(schedule.next(t0, true), Next::Idle));
        schedule.refilled(pods.clone(), t0);
        schedule.add(
            Dropped {
                refill: pods.clone(),
                since: 4,
            },
            t0,
        );
        schedule.add(
            Dropped {
                refill: services.clone(),
                since: 5,
            },
            t0,
        );
        // Another request does not wait for this one's spacing.
        let Next::Refill(other) = schedule.next(t0, true) else {
            panic!("services is due");
        };
        assert_eq!(other.refill, services);
        match schedule.next(t0 + Duration::from_secs(1), true) {
            Next::Wait(wait) => assert_eq!(wait, SPACING - Duration::from_secs(1)),
            next => panic!("pods waits its spacing: {next:?}"),
        }
        assert!(matches!(schedule.next(t0 + SPACING, true), Next::Refill(d) if d.refill == pods));
    }

    #[test]
    fn a_drop_waits_for_a_quiet_writer_or_its_patience() {
        let mut schedule = Schedule::default();
        let pods = request("/api/v1/pods");
        let t0 = Instant::now();
        schedule.add(
            Dropped {
                refill: pods.clone(),
                since: 1,
            },
            t0,
        );
        // While the writer is busy (a client listing in a loop), it is looked at again soon.
        assert!(matches!(schedule.next(t0, false), Next::Wait(w) if w == LOOK));
        // A later drop of the same request does not push its patience back.
        schedule.add(
            Dropped {
                refill: pods.clone(),
                since: 2,
            },
            t0 + Duration::from_secs(20),
        );
        assert!(matches!(
            schedule.next(t0 + PATIENCE - Duration::from_millis(50), false),
            Next::Wait(w) if w == Duration::from_millis(50)
        ));
        assert!(
            matches!(schedule.next(t0 + PATIENCE, false), Next::Refill(d) if d.since == 2),
            "a writer that never rests still has it refilled"
        );

        // The queue is quiet only once seen empty for QUIET, every look in between empty.
        let mut quiet = Quiet::default();
        quiet.look(0, t0);
        assert!(!quiet.quiet(t0 + QUIET - Duration::from_millis(1)));
        quiet.look(3, t0 + Duration::from_millis(200));
        quiet.look(0, t0 + Duration::from_millis(300));
        assert!(!quiet.quiet(t0 + QUIET));
        assert!(quiet.quiet(t0 + Duration::from_millis(300) + QUIET));
    }

    #[test]
    fn the_path_sent_reads_back_as_the_request_it_was_rendered_from() {
        for url in [
            "/api/v1/pods?labelSelector=app%20in%20(a%2Cb),tier!%3Dweb&fieldSelector=spec.nodeName%3Dn%C3%A9&limit=500&continue=eyJ2Ijo%2BIn0%3D&timeout=30s",
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?watch=1&labelSelector=a+b",
            "/api/v1/namespaces/a/configmaps/x:y",
            "/api/v1/nodes/n1/status",
        ] {
            let list = list_of_watch(&crate::request::on_behalf_of("kubelet", "GET", url).unwrap());
            let sent = path_and_query(&list).unwrap();
            let back = crate::request::on_behalf_of("kubelet", "GET", &sent).unwrap();
            assert_eq!(
                (&back.verb, &back.target, &back.query),
                (&list.verb, &list.target, &list.query),
                "{url} sent as {sent}"
            );
        }
    }

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
            assert_eq!(list_of_watch_url(watch), list, "{watch}");
        }
    }

    #[test]
    fn a_metadata_watch_is_refilled_as_its_metadata_list() {
        let watch_accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        let headers = [
            ("User-Agent".to_owned(), "coredns/1.11".to_owned()),
            ("Accept".to_owned(), watch_accept.to_owned()),
        ];
        let watch = crate::request::classify("GET", "/api/v1/pods?watch=1", &headers).unwrap();
        let list = list_of_watch(&watch);
        assert_eq!(
            list.accept,
            Accept::Metadata {
                list: true,
                json: true
            }
        );
        // Its list is cached in the metadata view, asked for in the list's JSON form.
        let route = route::route(&list, true, WorkingMode::Edge).unwrap();
        let collection = route.collection().unwrap();
        assert_eq!(collection.view, crate::cache::key::View::Metadata);
        assert_eq!(
            route.upstream_accept,
            Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )
        );
        // A watch of one object by the legacy prefix is refilled by its get, in the object's
        // form.
        let one = crate::request::classify("GET", "/api/v1/watch/namespaces/a/pods/web", &headers)
            .unwrap();
        assert_eq!(
            list_of_watch(&one).accept,
            Accept::Metadata {
                list: false,
                json: true
            }
        );
    }
}
