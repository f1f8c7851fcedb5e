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
//! A drop for a full queue waits while a list or get of the same request is in flight (the
//! dropped one's client is still being answered, or another client's answer is on its way:
//! each may bring the list whole) and [`LINGER`] after the last of them ended: a client
//! listing in a loop asks again within it. So a client listing faster than the disk has its
//! lists fetched once: each of its lists that goes whole makes the drops before it needless,
//! and when it stops, only a drop no later list brought is fetched, once. Another request's
//! load holds nothing back. A request listed back to back for good (never a moment without
//! an answer in flight) still has its drop refilled after [`PATIENCE`], and a request is
//! refilled again only [`SPACING`] after its last refill: the cache is then never more than
//! that (and a refill) behind what such a client sees. A relist's hand-off
//! (`cache/relist.rs`) is no overload: it goes at once.
//!
//! While no cloud server is healthy a due drop keeps waiting (with its patience spent, it
//! goes as soon as one is back): a link that flaps loses no list.
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
use crate::stream::{BodyReads, FilterStage, Pumped, Stop, ToCache, pump};
use crate::upstream::{Outgoing, Upstream};

/// The least time between two refills of one request.
const SPACING: Duration = Duration::from_secs(5);
/// How long a drop still waits once no answer to its request is in flight: a client listing
/// in a loop sends its next list (which begins its session once the cloud answers) within it.
/// Seconds, not milliseconds, and longer than a loaded gateway's list: a session refused at
/// its start or abandoned mid-answer for a full queue counts as ended at once, not when its
/// client is answered, so a 12 MB list that took 5 s on a loaded 2-core machine left the ledger
/// idle for as long. A refill ten seconds later costs nothing.
const LINGER: Duration = Duration::from_secs(10);
/// How often a drop waiting for answers in flight, or for a healthy cloud, is looked at again.
const LOOK: Duration = Duration::from_millis(100);
/// The longest a drop waits for the answers in flight: a request listed back to back for
/// good still has its cache refilled this often.
const PATIENCE: Duration = Duration::from_secs(30);

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

/// What the ledger says of a waiting drop's request.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// An answer begun after the drop reached the writer whole.
    brought: bool,
    /// Since when none of its lists and gets is in flight (None: one is).
    idle_since: Option<Instant>,
}

/// What the refill thread does next.
#[derive(Debug)]
enum Next {
    /// Refill this now (boxed: a drop is the largest by far, and rare).
    Refill(Box<Dropped>),
    /// Let this go: a later answer brought it.
    LetGo(Box<Dropped>),
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
            Some(w) => {
                w.dropped.since = w.dropped.since.max(dropped.since);
                w.dropped.relist |= dropped.relist;
            }
            None => self.waiting.push(Waiting {
                dropped,
                first: now,
            }),
        }
    }

    /// The first waiting request a later answer brought, or whose last refill is
    /// [`SPACING`] behind `now` and which is settled (nothing of it in flight for
    /// [`LINGER`], a relist, or its [`PATIENCE`] spent) while the cloud is `healthy`.
    /// `seen` reads the ledger.
    fn next(&mut self, now: Instant, healthy: bool, seen: impl Fn(&Dropped) -> Seen) -> Next {
        let mut soonest = None::<Duration>;
        for (i, w) in self.waiting.iter().enumerate() {
            let seen = seen(&w.dropped);
            if seen.brought {
                return Next::LetGo(Box::new(self.waiting.remove(i).dropped));
            }
            let spaced = self
                .last_refill
                .get(&w.dropped.refill)
                .map_or(Duration::ZERO, |&at| {
                    (at + SPACING).saturating_duration_since(now)
                });
            let settled = match seen.idle_since {
                _ if w.dropped.relist => Duration::ZERO,
                Some(at) => (at + LINGER).saturating_duration_since(now),
                // Looked at again soon: it may have ended by then.
                None => LOOK,
            };
            let patience = (w.first + PATIENCE).saturating_duration_since(now);
            let wait = spaced.max(settled.min(patience));
            if wait.is_zero() {
                if healthy {
                    return Next::Refill(Box::new(self.waiting.remove(i).dropped));
                }
                // Kept, its `first` too: refilled as soon as the cloud is back.
                soonest = Some(soonest.map_or(LOOK, |s| s.min(LOOK)));
                continue;
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
    let tx = refills.tx();
    loop {
        for dropped in refills.rx().try_iter() {
            schedule.add(dropped, Instant::now());
        }
        let healthy = upstream.backends().any_healthy();
        let next = schedule.next(Instant::now(), healthy, |d| Seen {
            brought: tx.brought(&d.refill, d.since),
            idle_since: tx.idle_since(&d.refill),
        });
        // The drops still in the queue, those waiting (while the cloud is reachable: nothing
        // comes of them before it is back) and one more while a refill runs: 0 only once
        // nothing is left to fetch.
        let running = usize::from(matches!(next, Next::Refill(_)));
        let waiting = if healthy { schedule.waiting.len() } else { 0 };
        METRICS.cache_refills_waiting.store(
            (refills.rx().len() + waiting + running) as i64,
            Ordering::Relaxed,
        );
        let wait = match next {
            Next::Refill(dropped) => {
                let refill = dropped.refill.clone();
                refill_now(&upstream, &cache, filters.as_ref(), tx, *dropped);
                schedule.refilled(refill, Instant::now());
                continue;
            }
            Next::LetGo(dropped) => {
                Metrics::inc(&METRICS.cache_refills_coalesced);
                log::debug!(
                    "cache: not refilling {} for {}: a later answer brought it",
                    dropped.refill.sent_as,
                    dropped.refill.request.component
                );
                continue;
            }
            Next::Wait(wait) => wait,
            Next::Idle => Duration::from_secs(3600),
        };
        crossbeam_channel::select! {
            recv(stop) -> _ => return,
            recv(refills.rx()) -> dropped => match dropped {
                Ok(dropped) => schedule.add(dropped, Instant::now()),
                Err(_) => return,
            },
            default(wait) => {}
        }
    }
}

/// Refills `dropped`: the cloud is asked again, and a whole answer noted in the ledger.
fn refill_now(
    upstream: &Upstream,
    cache: &CacheTx,
    filters: Option<&Filters>,
    tx: &RefillTx,
    dropped: Dropped,
) {
    let refill = dropped.refill;
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
        Verb::Watch => route
            .cache
            .as_deref()
            .cloned()
            .map_err(|e| ClientError::NotCacheable(*e))?,
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
    let target = std::sync::Arc::new(target);
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
    let mut reads = BodyReads::bulk();
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
            target: Arc::unwrap_or_clone(target),
            sent_as: path.to_owned(),
        }
    }

    /// The path and query the hub sends to refill what a request to `url` brought.
    fn list_of_watch_url(url: &str) -> String {
        let req = crate::request::on_behalf_of("kubelet", "GET", url).unwrap();
        path_and_query(&list_of_watch(&req)).unwrap()
    }

    fn drop_of(refill: &Refill, since: u64) -> Dropped {
        Dropped {
            refill: refill.clone(),
            since,
            relist: false,
        }
    }

    /// What the ledger says when nothing was brought and nothing is in flight since `at`.
    fn idle(at: Instant) -> impl Fn(&Dropped) -> Seen {
        move |_| Seen {
            brought: false,
            idle_since: Some(at),
        }
    }

    #[test]
    fn a_drop_is_let_go_once_a_later_answer_went_whole_and_not_for_an_earlier_one() {
        let refills = Refills::new();
        let tx = refills.sender();
        let pods = request("/api/v1/pods");
        let (earlier, dropped, later) = (tx.begun(), tx.begun(), tx.begun());
        assert!(tx.dropped(pods.clone(), dropped, false));
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
    fn the_ledger_knows_which_answers_to_a_followed_request_are_in_flight() {
        let refills = Refills::new();
        let tx = refills.sender();
        let (pods, services) = (request("/api/v1/pods"), request("/api/v1/services"));
        // Not followed yet: nothing is counted (a session then costs an atomic load).
        let before = tx.open(&pods, false);
        let dropped = tx.open(&pods, false);
        assert!(tx.dropped(pods.clone(), dropped, false));
        // The dropped session answers its client still; the one begun before the drop was
        // not counted.
        assert_eq!(tx.idle_since(&pods), None);
        tx.ended(&pods, before);
        assert_eq!(
            tx.idle_since(&pods),
            None,
            "the dropped one is still in flight"
        );
        tx.ended(&pods, dropped);
        let idle = tx.idle_since(&pods).expect("none in flight");
        // The client's next list, and another client's; a watch never counts.
        let next = tx.open(&pods, false);
        let other = tx.open(&pods, false);
        let watch = tx.open(&pods, true);
        assert_eq!(tx.idle_since(&pods), None);
        tx.whole(&pods, next);
        assert!(tx.brought(&pods, dropped));
        assert_eq!(tx.idle_since(&pods), None, "another is still in flight");
        tx.ended(&pods, other);
        tx.ended(&pods, watch);
        assert!(tx.idle_since(&pods).is_some_and(|at| at >= idle));
        // A dropped watch is not in flight for its refill: it brings no list.
        let watch = tx.open(&services, true);
        assert!(tx.dropped(services.clone(), watch, true));
        assert!(tx.idle_since(&services).is_some());
        // Another request's answers are not this one's.
        let unrelated = tx.open(&services, false);
        assert!(tx.idle_since(&pods).is_some());
        tx.ended(&services, unrelated);
        // A relist hand-off opens nothing, and only answers begun after it bring it.
        assert!(tx.relist(services.clone()));
        assert!(tx.idle_since(&services).is_some());
        let handed = refills.rx().try_iter().last().expect("handed over");
        assert!(handed.relist && !tx.brought(&services, handed.since));
    }

    #[test]
    fn drops_of_one_request_wait_as_one_and_a_refill_again_waits_its_spacing() {
        let mut schedule = Schedule::default();
        let (pods, services) = (request("/api/v1/pods"), request("/api/v1/services"));
        let t0 = Instant::now();
        let settled = idle(t0 - LINGER);
        for since in [1, 3, 2] {
            schedule.add(drop_of(&pods, since), t0);
        }
        let Next::Refill(first) = schedule.next(t0, true, &settled) else {
            panic!("a first drop is refilled once nothing of it is in flight");
        };
        assert_eq!(
            (&first.refill, first.since),
            (&pods, 3),
            "the latest drop's"
        );
        assert!(matches!(schedule.next(t0, true, &settled), Next::Idle));
        schedule.refilled(pods.clone(), t0);
        schedule.add(drop_of(&pods, 4), t0);
        schedule.add(drop_of(&services, 5), t0);
        // Another request does not wait for this one's spacing.
        let Next::Refill(other) = schedule.next(t0, true, &settled) else {
            panic!("services is due");
        };
        assert_eq!(other.refill, services);
        match schedule.next(t0 + Duration::from_secs(1), true, &settled) {
            Next::Wait(wait) => assert_eq!(wait, SPACING - Duration::from_secs(1)),
            next => panic!("pods waits its spacing: {next:?}"),
        }
        assert!(
            matches!(schedule.next(t0 + SPACING, true, &settled), Next::Refill(d) if d.refill == pods)
        );
    }

    #[test]
    fn a_drop_waits_for_the_answers_in_flight_or_its_patience_and_a_relist_does_not() {
        let mut schedule = Schedule::default();
        let (pods, services) = (request("/api/v1/pods"), request("/api/v1/services"));
        let t0 = Instant::now();
        schedule.add(drop_of(&pods, 1), t0);
        let busy = |_: &Dropped| Seen {
            brought: false,
            idle_since: None,
        };
        // While a list of it is in flight (a client listing in a loop), looked at again soon.
        assert!(matches!(schedule.next(t0, true, busy), Next::Wait(w) if w == LOOK));
        // Its last answer ended: it waits LINGER for the client's next list.
        let ended = t0 + Duration::from_millis(300);
        assert!(matches!(
            schedule.next(ended + Duration::from_millis(100), true, idle(ended)),
            Next::Wait(w) if w == LINGER - Duration::from_millis(100)
        ));
        // A later list went whole: let go, never fetched.
        let brought = |_: &Dropped| Seen {
            brought: true,
            idle_since: None,
        };
        assert!(matches!(schedule.next(ended, true, brought), Next::LetGo(d) if d.since == 1));
        assert!(matches!(schedule.next(ended, true, busy), Next::Idle));

        // A later drop of the same request does not push its patience back.
        schedule.add(drop_of(&pods, 2), t0);
        schedule.add(drop_of(&pods, 3), t0 + Duration::from_secs(20));
        assert!(matches!(
            schedule.next(t0 + PATIENCE - Duration::from_millis(50), true, busy),
            Next::Wait(w) if w == Duration::from_millis(50)
        ));
        assert!(
            matches!(schedule.next(t0 + PATIENCE, true, busy), Next::Refill(d) if d.since == 3),
            "a request listed back to back for good still has it refilled"
        );

        // A relist's hand-off goes at once, whatever is in flight.
        schedule.add(
            Dropped {
                refill: services.clone(),
                since: 4,
                relist: true,
            },
            t0,
        );
        assert!(matches!(schedule.next(t0, true, busy), Next::Refill(d) if d.refill == services));
    }

    #[test]
    fn a_due_drop_waits_for_a_healthy_cloud_with_its_patience_kept() {
        let mut schedule = Schedule::default();
        let pods = request("/api/v1/pods");
        let t0 = Instant::now();
        schedule.add(drop_of(&pods, 1), t0);
        let later = t0 + PATIENCE + Duration::from_secs(60);
        // The link is down when it is due: it keeps waiting, looked at again soon.
        assert!(matches!(
            schedule.next(t0 + LINGER, false, idle(t0)),
            Next::Wait(w) if w == LOOK
        ));
        assert_eq!(schedule.waiting.len(), 1);
        // Back, with answers in flight again: its patience is spent, it goes at once.
        let busy = |_: &Dropped| Seen {
            brought: false,
            idle_since: None,
        };
        assert!(matches!(schedule.next(later, false, busy), Next::Wait(w) if w == LOOK));
        assert!(matches!(schedule.next(later, true, busy), Next::Refill(d) if d.refill == pods));
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
