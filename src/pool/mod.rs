//! Pool-scope resources and the pool's leader hubs (YurtHub's `pkg/yurthub/multiplexer`, issue 16):
//! the decisions a follower and a leader make, without the request path's wiring.
//!
//! - [`resources`]: the pool-scope set (flags, then the ConfigMap) and which requests are
//!   pool-scope list/watch; the hub's own multiplexer requests (its User-Agent
//!   `multiplexer-proxy-<node>`) are forwarded, never served locally.
//! - [`leader`]: the `leader-hub-<pool>` ConfigMap read into leaders, the set and the
//!   [`leader::Source`] (pool or cloud); leader URLs; state kept across watch events.
//! - [`health`]: leader health by TCP connect, round-robin picks, the fallback order
//!   leader → cloud → cache.
//! - [`route`]: where pool-scope reads go now ([`route::PoolRoute`]), shared by the
//!   ConfigMap's watcher, the leader checker and the feeders.
//!
//! What is not here: the ConfigMap's watch thread and the forwarding to a leader
//! (`clients::leader_config`, `clients::pool_watch`), the watch cache (`watchcache`), and what
//! serves it to local clients and to followers (`proxy::pool_local`, `proxy::multiplexer`, with who
//! a leader admits): this module does no I/O but the health probe's TCP connect.

pub(crate) mod health;
pub(crate) mod leader;
pub(crate) mod resources;
pub(crate) mod route;
