//! The node heartbeat in edge mode (issue 15, YURTHUB.md §1): the hub answers kubelet's
//! lease requests itself and renews `kube-node-lease/<node>` in the cloud, and that renewal
//! is its health probe of each server.
//!
//! The parts, each without I/O of its own:
//! - [`lease`]: the Lease object the hub sends (`newLease`), MicroTime stamps, paths.
//! - [`renew`]: one probe against one server over [`renew::LeaseApi`] (PUT, 409 → GET and
//!   retry, 404 → POST, backoff), and the deleted-Node rule ([`renew::Renewal::NodeGone`]).
//! - [`kubelet`]: "is kubelet alive", from the time of its last lease request.
//! - [`local`]: the current lease answering kubelet, and when it is written to disk.
//! - [`api`]: [`renew::LeaseApi`] over one server, on `Upstream::exchange_with` (the same
//!   per-server exchange the /readyz probe now uses).
//!
//! # Wiring (the next session)
//!
//! Only in edge mode with `--heartbeat-mode=lease` (`Config::heartbeat_mode`, already
//! `Readyz` in cloud mode). Shared state, made once in `app.rs`: a [`local::LocalLease`]
//! (loaded from the disk key `kubelet/leases.v1.coordination.k8s.io/kube-node-lease/<node>`
//! at start, then `PersistPolicy::persisted` with it), a [`kubelet::KubeletLiveness`], and
//! one `Mutex<renew::Renewer>` for all servers (the Node's state is cluster-wide), with
//! `node_gone_after: renew::NODE_GONE_AFTER` and `Config::kubelet_health_grace_period`.
//!
//! Request path (`proxy`): before forwarding, a request from component `kubelet` for
//! resource `leases` (any namespace, name, verb) calls `KubeletLiveness::record(now)` and is
//! answered by `LocalLease::answer`, online and offline; never forwarded. Map
//! `LocalAnswer::Object` to its code with `application/json`, `Status` with
//! `Status::to_json`, `Held` to the existing held-watch path (no events, ends at
//! `timeoutSeconds` or when the cloud is healthy). List and other verbs: 404 or forward,
//! kubelet does not use them. The response must not go through the cache writer
//! (the hub's renewal owns that key).
//!
//! Health checker (`health.rs`): in lease mode the probe of a server is, instead of
//! `GET /readyz`:
//! 1. `kubelet.stopped(now, grace)` → do NOT renew, and judge the server by `/readyz` as
//!    today, so kube-proxy and the others stay online (YurtHub marks every server unhealthy
//!    here, #420 — tinyhub deliberately does not). The node goes NotReady because the lease
//!    expires.
//! 2. else `renewer.probe(&api, local.current().as_deref())` with a `LeaseApi` over that
//!    server's direct client (hub identity, `--heartbeat-timeout-seconds` per request, also
//!    as `?timeout=`): map 404 on GET to `Ok(None)`, 409 → `Conflict`, 404 on PUT/POST →
//!    `NotFound`, 403 → `Forbidden`, other statuses → `Status`, no answer → `Transport`.
//!    - `Renewed(lease)` → healthy (same thresholds as today: one failure → unhealthy,
//!      `--heartbeat-healthy-threshold` successes → healthy); `local.set(lease)`; when
//!      `persist.after_renewal(&lease, now)` send it to the cache writer under component
//!      `kubelet` (on a failed write, `persist.forget()`).
//!    - `Failed(e)` → unhealthy; log `e` (a `Forbidden` suggests `--heartbeat-mode=readyz`).
//!    - `NodeMissing` / `NodeGone` → the server answered but the Node is deleted: judge the
//!      server by `/readyz` like case 1 (the renewer logs the transition to gone).
//!
//!    Rotation as YurtHub: start at the next server each tick, stop at the first renewal, so
//!    the lease is renewed at most once per tick; servers not probed keep their state.
//! 3. The init probe at start-up is the same probe (a renewal through the first server that
//!    works); a server whose init renewal fails is unhealthy until it passes the threshold.
//!
//! Timings with the defaults: a black-holed server fails one probe after 3 PUTs × 2 s +
//! 4 GETs × 2 s + 1.4 s of backoff ≈ 15.4 s (the tick is late, not doubled).

pub(crate) mod api;
pub(crate) mod kubelet;
pub(crate) mod lease;
pub(crate) mod local;
pub(crate) mod renew;
