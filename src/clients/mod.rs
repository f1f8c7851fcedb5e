//! The hub's own clients of the cloud: background jobs that make requests of their own, on
//! the hub's credentials, through the same routing and upstream as any client, and feed what
//! they read to the cache. They sit above the cache, which knows nothing of them.
//!
//! - [`refill`]: fetches again the answers whose cache session the writer had to drop.
//! - [`agents_watch`]: keeps the cache-agent set in step with the `yurt-hub-cfg` ConfigMap.

pub mod agents_watch;
pub mod refill;
