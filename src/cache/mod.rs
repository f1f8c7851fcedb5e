//! The disk cache: who is cached ([`agents`]), what each client credential read online
//! ([`grants`]), what to keep of an answer ([`target`]), how
//! response bodies are decoded ([`decode`]), where objects live on disk ([`key`], [`store`]),
//! the writer thread that persists them ([`writer`]), when each kind last heard the cloud
//! ([`synced`]) and which collections wait for a whole relist ([`relist`]).
//!
//! The cache sits below routing and the cloud client: nothing here imports `route`,
//! `upstream` or `proxy`, and of `request` only `ApiRequest`, which a dropped session's
//! refill carries to the refill thread unread (`writer/refills.rs`). The hub's own requests that feed it (the refill, the
//! `yurt-hub-cfg` watch) are in `clients/`.

pub(crate) mod agents;
pub(crate) mod decode;
pub(crate) mod grants;
pub(crate) mod key;
pub(crate) mod object;
pub(crate) mod protect;
pub(crate) mod relist;
pub(crate) mod store;
pub(crate) mod synced;
pub(crate) mod target;
#[cfg(test)]
mod temp_dir;
pub(crate) mod writer;
