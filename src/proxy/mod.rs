//! The request path. [`Hub::handle`] reads top to bottom as the phases a request passes:
//! classify it, route it, then either forward it to the cloud — streaming the answer back
//! while a copy goes to the cache writer — or answer it from the cache when the cloud is
//! unreachable, and log it. One `Call` per request carries what the phases decided.
//!
//! - `call.rs`: the request's context and its phases (forward, fall back, answer locally, log);
//! - `relay.rs`: the cloud's answer streamed to the client and teed into the cache;
//! - `fallback.rs`: the policy on failures by origin — which one the cache may answer;
//! - `kubelet_lease.rs`: kubelet's lease requests, answered by the hub (edge mode, lease
//!   heartbeat).
//! - `kubelet_node.rs`: kubelet's GET of this node, with its Autonomy condition set and a
//!   change written to the cloud (edge mode).
//! - `pool_local.rs`: lists and watches of pool-scope resources answered from the node's
//!   shared watch cache (edge mode).
//! - `multiplexer.rs`: a leader hub's port, serving those caches to the pool's followers.
//! - `tunnel.rs`: connection upgrades (exec, attach, port-forward) spliced to the cloud.
//!
//! The cloud is reached through the [`Cloud`] trait, so the policy is tested without one.
//! This module knows nothing of sockets (`server/`) or of ureq (`upstream.rs`).

mod call;
mod fallback;
mod grant;
mod kubelet_lease;
mod kubelet_node;
pub(crate) mod multiplexer;
pub(crate) mod pool_local;
mod relay;
pub(crate) mod resume;
mod tunnel;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use self::call::{Call, Counted};
use crate::cache::agents::CacheAgents;
use crate::cache::writer::CacheTx;
use crate::filters::Filters;
use crate::heartbeat::NodeHeartbeat;
use crate::heartbeat::local::KubeletVerb;
use crate::mode::WorkingMode;
use crate::offline::Offline;
use crate::overlay::Overlay;
use crate::reaper::Reaper;
use crate::request::{self, ApiRequest, Verb};
use crate::requester::{ClientCertificate, Credential, Requester};
use crate::route::{self, NoCacheReason, Route};
use crate::server::{Admission, Exchange};
use crate::status::Status;
use crate::upstream::Cloud;
use crate::watchcache::{PoolCaches, WatchCache};
use crate::x509;

/// Everything a request thread needs.
pub(crate) struct Hub {
    /// Edge or cloud.
    pub mode: WorkingMode,
    /// The cloud client ([`Upstream`](crate::upstream::Upstream)).
    pub cloud: Arc<dyn Cloud>,
    /// Who is cached.
    pub agents: Arc<CacheAgents>,
    /// The writer queue (edge mode).
    pub cache: Option<CacheTx>,
    /// Offline answers (edge mode).
    pub offline: Option<Offline>,
    /// Ends streams whose client left.
    pub reaper: Arc<Reaper>,
    /// The response filters (YurtHub's `pkg/yurthub/filter`); None when filtering is off.
    pub filters: Option<Filters>,
    /// The node heartbeat, which answers kubelet's lease requests (edge mode with
    /// `--heartbeat-mode=lease`).
    pub heartbeat: Option<Arc<NodeHeartbeat>>,
    /// The node-local watch caches of the pool-scope resources (edge mode), which answer
    /// every local client's list and watch of them.
    pub pool: Option<Arc<PoolCaches>>,
    /// Set at shutdown: ends the watches served from `pool`.
    pub shutdown: Arc<std::sync::atomic::AtomicBool>,
    /// This node's name: a client certificate naming it is the node (`requester.rs`).
    pub node_name: Arc<str>,
    /// The list rounds of resumed watches whose history was gone: one list per scope.
    pub rounds: Arc<resume::rounds::ListRounds>,
    /// The endpoints overlay (issue 30), which the pool caches' answers to local clients
    /// apply (disabled in cloud mode and with `--offline-endpoints-overlay=false`).
    pub overlay: Arc<Overlay>,
    /// The limits of tunnels (exec, attach, port-forward): the idle limit, the time the
    /// cloud has to answer an upgrade.
    pub tunnel: crate::tunnel::Limits,
    /// kubelet's GETs of this node in a row that found cache keys failing: past 3 the node's
    /// Autonomy condition says Unknown (`kubelet_node.rs`).
    pub autonomy_checks: AtomicU32,
}

/// Where the cache stood for a request, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheStatus {
    /// Forwarded; the answer is being persisted.
    Stored,
    /// Forwarded; not cached, for this reason.
    Bypass(NoCacheReason),
    /// Forwarded; cacheable, but the writer queue was full.
    Dropped,
    /// Answered from the cache: the cloud was unreachable.
    Offline,
    /// kubelet's lease request, answered by the hub's heartbeat.
    LocalLease,
    /// A pool-scope list or watch, answered from the node's shared watch cache.
    PoolLocal,
    /// Refused before anything else.
    Rejected,
    /// The client went away before its answer was complete.
    ClientGone,
}

impl CacheStatus {
    /// Short text for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Stored => "stored",
            CacheStatus::Bypass(reason) => reason.as_str(),
            CacheStatus::Dropped => "dropped",
            CacheStatus::Offline => "offline",
            CacheStatus::LocalLease => "local-lease",
            CacheStatus::PoolLocal => "pool-local",
            CacheStatus::Rejected => "rejected",
            CacheStatus::ClientGone => "client-gone",
        }
    }
}

/// The fairness key of `req` when it is long-running, as the apiserver counts them apart
/// from max-in-flight: a watch, the `proxy` verb, a followed log, a connection upgrade
/// (exec, attach, port-forward: a tunnel held for as long as its session). The key is the
/// port, the credential's digest (its first 8 bytes: enough to tell credentials apart, and
/// not the credential) and, for the node's own requests only, the component, up to 64
/// bytes of it.
fn long_running_key(req: &ApiRequest) -> Option<String> {
    let followed_log = req.query.follow
        && req
            .resource()
            .is_some_and(|r| r.subresource.as_deref() == Some("log"));
    if !matches!(req.verb, Verb::Watch | Verb::Proxy) && !followed_log && !req.upgrade {
        return None;
    }
    Some(fairness_key(&req.requester, req.component.as_str()))
}

/// The fairness key of a long-running request from `requester` (see [`long_running_key`]);
/// `component` counts for the node's own requests only.
fn fairness_key(requester: &Requester, component: &str) -> String {
    let mut key = String::with_capacity(96);
    key.push_str(requester.port.as_str());
    key.push('/');
    match requester.credential.digest() {
        Some(digest) => digest[..8].iter().for_each(|b| {
            let _ = write!(key, "{b:02x}");
        }),
        None => key.push_str("none"),
    }
    // The component is the client's own word (its User-Agent): it tells the node's
    // components apart, but anyone else changing it would be a new key at each watch.
    if !requester.is_node() {
        return key;
    }
    key.push('/');
    let end = (0..=component.len().min(64))
        .rev()
        .find(|&i| component.is_char_boundary(i))
        .unwrap_or(0);
    key.push_str(&component[..end]);
    key
}

/// The line of a request refused a slot: a watch refused is a client past its share (info);
/// a short request refused is the hub at --max-requests-in-flight, counted by the metric
/// (debug).
fn refused_log(req: &ApiRequest, url: &str, long_running: bool, status: &Status) {
    let level = if long_running {
        log::Level::Info
    } else {
        log::Level::Debug
    };
    log::log!(
        level,
        "refused verb={} path=\"{}\" component=\"{}\" port={} credential={} status={} reason=\"{}\"",
        req.verb.as_str(),
        request::truncate(url),
        req.component,
        req.requester.port.as_str(),
        req.requester.credential.as_str(),
        status.code,
        status.message
    );
}

/// What the hub does with one request, decided once ([`Hub::plan`]) from what the request is
/// and who sent it; each kind of answer is one variant, carried out by [`Hub::carry_out`]. A
/// new kind of answer is a new variant here, not a new branch in [`Hub::handle`].
// One plan per request, on the stack and moved once: boxing the large variants would add an
// allocation to every request.
#[allow(clippy::large_enum_variant)]
enum Plan<'h> {
    /// Refused before it was understood: 400 (edge mode: what the hub cannot read it cannot
    /// cache or answer). The classifier logged why.
    Unreadable(Status),
    /// Refused by its route (a bad selector); its log line says so.
    Refuse(ApiRequest, Status),
    /// kubelet's lease, answered by the node heartbeat (edge, lease mode): never forwarded,
    /// never cached, and never waiting for a slot — for the node's kubelet only.
    KubeletLease(ApiRequest, &'h NodeHeartbeat, KubeletVerb),
    /// A pool-scope list or watch from the node's shared watch cache (`pool_local.rs`), or
    /// its "initializing" 503 while the cache fills and the cloud is up.
    PoolLocal(ApiRequest, &'h WatchCache),
    /// Forwarded by its route, or answered from the disk cache when the cloud is
    /// unreachable (`call.rs`).
    Forward(ApiRequest, Route),
    /// kubelet's GET of this node (edge mode): forwarded or answered from the cache as a
    /// `Forward`, with the node's Autonomy condition set (`kubelet_node.rs`).
    KubeletNode(ApiRequest, Route),
    /// Passed on unread (cloud mode): the cloud judges it.
    PassOn(Route),
    /// A connection upgrade (exec, attach, port-forward), spliced to the cloud
    /// (`tunnel.rs`): never cached, never filtered, long-running.
    Tunnel(tunnel::Upgrade),
}

impl Plan<'_> {
    /// The request, when the hub understood it.
    fn request(&self) -> Option<&ApiRequest> {
        match self {
            Plan::Unreadable(_) | Plan::PassOn(_) => None,
            Plan::Tunnel(upgrade) => upgrade.req.as_ref(),
            Plan::Refuse(req, _)
            | Plan::KubeletLease(req, ..)
            | Plan::PoolLocal(req, _)
            | Plan::Forward(req, _)
            | Plan::KubeletNode(req, _) => Some(req),
        }
    }

    /// Carrying it out waits on a cache or the cloud, so it takes a slot; kubelet's lease and
    /// a refusal wait for nothing.
    fn waits(&self) -> bool {
        matches!(
            self,
            Plan::PoolLocal(..)
                | Plan::Forward(..)
                | Plan::KubeletNode(..)
                | Plan::PassOn(_)
                | Plan::Tunnel(_)
        )
    }

    /// The fairness key of a long-running plan: a tunnel passed on unread counts as one too.
    fn long_running_key(&self) -> Option<String> {
        match self {
            Plan::Tunnel(tunnel::Upgrade {
                req: None,
                requester,
            }) => Some(fairness_key(requester, "")),
            plan => plan.request().and_then(long_running_key),
        }
    }

    /// Who sent it, when the hub knows: a tunnel the classifier could not read has its
    /// requester too.
    fn requester(&self) -> Option<&Requester> {
        match self {
            Plan::Tunnel(upgrade) => Some(&upgrade.requester),
            plan => plan.request().map(|req| &req.requester),
        }
    }
}

impl Hub {
    /// Serves one request to the end: who sent what ([`Hub::plan`]), then a slot for it
    /// (watches apart, per fairness key; kubelet's lease and refusals take none), then the
    /// answer.
    pub(crate) fn handle(&self, ex: Exchange<'_>) {
        let started = Instant::now();
        let plan = self.plan(&ex);
        self.carry_out(plan, ex, started);
    }

    /// Decides what the hub does with the request on `ex` (no I/O but what the plan's parts
    /// read: the heartbeat's intercept, the pool caches' readiness, the cloud's health).
    /// Never inlined: its frame is gone before the answer, which may wait for hours.
    #[inline(never)]
    fn plan(&self, ex: &Exchange<'_>) -> Plan<'_> {
        let mut req = match request::classify(ex.method(), ex.url(), ex.headers()) {
            Ok(req) => req,
            Err(e) if self.mode == WorkingMode::Edge => {
                log::info!(
                    "refused method={} path=\"{}\" err=\"{e}\"",
                    ex.method(),
                    request::truncate(ex.url())
                );
                return Plan::Unreadable(Status::bad_request(e.to_string()));
            }
            // A pure proxy passes on what it does not understand; the cloud judges it.
            Err(_) => {
                let requester = self.requester(ex, Requester::unknown(ex.header("authorization")));
                if crate::http1::has_token(ex.headers(), "connection", "upgrade") {
                    return Plan::Tunnel(tunnel::Upgrade {
                        req: None,
                        requester,
                    });
                }
                return Plan::PassOn(Route::pass_on(&requester));
            }
        };
        req.requester = self.requester(ex, std::mem::replace(&mut req.requester, Requester::hub()));
        if req.upgrade {
            let requester = req.requester.clone();
            return Plan::Tunnel(tunnel::Upgrade {
                req: Some(req),
                requester,
            });
        }
        // Only the node's own kubelet renews the node's lease through the hub.
        let lease = self
            .heartbeat
            .as_deref()
            .filter(|_| req.requester.is_node())
            .zip(NodeHeartbeat::intercepts(&req));
        if let Some((heartbeat, verb)) = lease {
            return Plan::KubeletLease(req, heartbeat, verb);
        }
        // The node's shared watch caches serve what the node may read, and a client with its
        // own credential what the cloud let that credential list (`grant.rs`); the others go
        // to the cloud, which judges them (and a 200 lets the caches serve them next time).
        // Never filled and the cloud unreachable: the ordinary path answers from disk; never
        // filled past the warming time: forwarded as before. Filled once, the cache serves
        // what it holds, online or not.
        let pooled = self.pool.as_ref().and_then(|pool| {
            let cache = pool.cache_for(&req, ex.header("user-agent").unwrap_or(""))?;
            let servable = cache.is_ready() || (pool.warming() && self.cloud.any_healthy());
            (servable && grant::may_use_pool(self, &req)).then_some(cache)
        });
        if let Some(cache) = pooled {
            return Plan::PoolLocal(req, cache);
        }
        match self.route(&req) {
            Ok(route) if kubelet_node::is_kubelet_node(self, &req, &route) => {
                Plan::KubeletNode(req, route)
            }
            Ok(route) => Plan::Forward(req, route),
            Err(status) => Plan::Refuse(req, status),
        }
    }

    /// Carries out `plan` on `ex`; the request's log line says how it ended.
    fn carry_out(&self, plan: Plan<'_>, ex: Exchange<'_>, started: Instant) {
        // What waits on a cache or the cloud takes a slot: a watch one of its fairness key,
        // anything else one of --max-requests-in-flight (issue 28).
        let _admitted = if plan.waits() {
            let key = plan.long_running_key();
            // The slots kept for the node's components are the node's alone.
            let node = plan.requester().is_some_and(Requester::is_node);
            let admission = key
                .as_deref()
                .map_or(Admission::Short, |key| Admission::LongRunning { key, node });
            match ex.admit(admission) {
                Ok(admitted) => Some(admitted),
                Err(status) => {
                    if let Some(req) = plan.request() {
                        refused_log(req, ex.url(), key.is_some(), &status);
                    }
                    let _ = ex.send_status(&status);
                    return;
                }
            }
        } else {
            None
        };
        match plan {
            Plan::Forward(req, route) => self.forward(req, route, ex, started),
            plan => self.carry_out_other(plan, ex, started),
        }
    }

    /// Carries out a [`Plan::Forward`]. Never inlined, nor is [`Hub::carry_out_other`]: a
    /// forwarded watch waits for hours below this frame, and a thread's stack holds what
    /// every frame above the wait reserved (the other plans' locals, 11 KiB, when they
    /// shared one frame).
    #[inline(never)]
    fn forward(&self, req: ApiRequest, route: Route, ex: Exchange<'_>, started: Instant) {
        let offline = fallback::offline(self.mode, &route.local, self.cloud.as_ref());
        Call::run(self, req, route, Counted::Proxied, started, |call| {
            if offline {
                call.answer_locally(ex);
            } else {
                call.forward(ex);
            }
        });
    }

    /// Carries out any plan but [`Plan::Forward`] (which [`Hub::forward`] carries out).
    #[inline(never)]
    fn carry_out_other(&self, plan: Plan<'_>, ex: Exchange<'_>, started: Instant) {
        match plan {
            Plan::Unreadable(status) => {
                let _ = ex.send_status(&status);
            }
            Plan::PassOn(route) => Call::pass_on(self, route).forward(ex),
            Plan::Tunnel(upgrade) => self.tunnel(&upgrade, ex, started),
            Plan::Refuse(req, status) => {
                Call::run(self, req, (), Counted::Proxied, started, |call| {
                    call.refuse(ex, &status);
                });
            }
            Plan::KubeletLease(req, heartbeat, verb) => {
                Call::run(self, req, (), Counted::Proxied, started, |call| {
                    call.answered(|req| {
                        let offline = self.offline.as_ref();
                        let status = kubelet_lease::answer(heartbeat, offline, ex, req, verb);
                        (status, CacheStatus::LocalLease)
                    });
                });
            }
            // Counted apart, as YurtHub counts what its multiplexer serves.
            Plan::PoolLocal(req, cache) => {
                Call::run(self, req, (), Counted::Aggregated, started, |call| {
                    call.answered(|req| {
                        let status = if cache.is_ready() {
                            let shutdown = || self.shutdown.load(Ordering::Relaxed);
                            let session = self.pool_session(req, cache);
                            let filters = self.filters.as_ref();
                            let overlaid = pool_local::LocalOverlay {
                                overlay: &self.overlay,
                                cloud: self.cloud.as_ref(),
                            };
                            let overlaid = Some(&overlaid);
                            pool_local::answer(
                                cache, filters, overlaid, ex, req, &shutdown, session,
                            )
                        } else {
                            let status = cache.initializing();
                            let _ = ex.send_status(&status);
                            status.code
                        };
                        (status, CacheStatus::PoolLocal)
                    });
                });
            }
            // `carry_out` takes every `Forward` to `Hub::forward` and only the other plans
            // here; a separate type for them would repeat the whole of `Plan`.
            Plan::Forward(..) => unreachable!("a forwarded plan is carried out by `forward`"),
            Plan::KubeletNode(req, route) => {
                let offline = fallback::offline(self.mode, &route.local, self.cloud.as_ref());
                Call::run(self, req, route, Counted::Proxied, started, |call| {
                    if offline {
                        call.answer_node_locally(ex);
                    } else {
                        call.forward_node(ex);
                    }
                });
            }
        }
    }

    /// Who sent the request on `ex`: its port, the `Authorization` the classifier already
    /// read into `read` (hashed once), and else, on the HTTPS port, the client certificate
    /// rustls verified against the cluster CA (`server::tls`), parsed only then.
    fn requester(&self, ex: &Exchange<'_>, read: Requester) -> Requester {
        if matches!(read.credential, Credential::Authorization { .. }) {
            return Requester {
                port: ex.port(),
                ..read
            };
        }
        let leaf = ex.peer_certificates().and_then(<[_]>::first);
        let info = leaf.and_then(|der| x509::parse(der));
        let certificate = leaf
            .zip(info.as_ref())
            .map(|(der, info)| ClientCertificate {
                der,
                common_name: info.common_name.as_deref(),
                organizations: &info.organizations,
            });
        Requester::new(ex.port(), None, certificate, &self.node_name)
    }

    /// The cache writer's session for a pool-scope answer to `req`, when its route caches it
    /// (a cache agent's list or watch): what the client gets from the shared cache is kept
    /// on disk as a forwarded answer would be, for offline answers after a restart; as old as
    /// `cache` last heard the cloud, not as of now.
    fn pool_session(
        &self,
        req: &ApiRequest,
        cache: &crate::watchcache::WatchCache,
    ) -> Option<crate::cache::writer::Session> {
        let route = self.route(req).ok()?;
        let target = route.cache.ok()?;
        let target = route::target_for_answer(&target, Some("application/json"))?;
        let tx = self.cache.as_ref()?;
        tx.begin_relayed(target, 200, false, pool_local::word_of(cache))
    }

    /// Decides what the hub does with `req` (pure), or the status that refuses it.
    fn route(&self, req: &ApiRequest) -> Result<Route, Status> {
        let is_agent = self.agents.is_agent(req.component.as_str());
        let route = route::route(req, is_agent, self.mode)?;
        Ok(match &self.filters {
            Some(filters) => route.with_filters(filters.chain_for(req), req.accept),
            None => route,
        })
    }
}
