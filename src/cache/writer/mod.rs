//! The cache write path: connection threads tee response bodies into a bounded channel
//! ([`CacheTx`], [`Session`]) and one writer thread ([`run()`]) decodes them incrementally
//! and persists each object through the store. The writer is the only code that writes the
//! cache.
//!
//! The client never waits for the disk: every send is a `try_send`. When the queue is full
//! the response's session is abandoned (counted in `tinyhub_cache_sessions_abandoned_total`)
//! and nothing half-received is committed: a list's staged objects are dropped, a watch keeps
//! the events that arrived whole.
//!
//! Files: `tee.rs` the channel and the sessions connection threads feed; `run.rs` the writer
//! loop and what each answer does to the store; `failures.rs` the failure log; `rules.rs` the Kubernetes
//! rules for objects (what is stored and under which key, watch events, list items, tokens);
//! `error_keys.rs` the keys whose write failed, until they are stored; `refills.rs` what dropped
//! sessions tell the refill thread, and the ledger of answers that went whole since;
//! `identical.rs` a get's answer stored exactly so already (proven by the connection thread
//! itself when the writer allows it: no message at all);
//! `unchanged.rs` the memos of whole lists that prove a repeat unchanged (read only up to
//! its `metadata`).

mod error_keys;
mod evict;
mod failures;
mod identical;
#[cfg(test)]
mod list_cost;
mod refills;
mod rules;
mod run;
mod tee;
#[cfg(test)]
mod tests;
mod unchanged;

pub(crate) use error_keys::failing_keys;
pub(crate) use evict::{BoundStats, export as export_bound};
pub(crate) use identical::Direct;
pub(crate) use refills::{Dropped, Refill, RefillTx, Refills};
pub(crate) use run::{WriterOptions, run};
pub(crate) use tee::Session;
pub(crate) use tee::{CacheTx, channel};

/// Largest single object (or watch event) the writer assembles; etcd refuses objects above
/// 1.5 MiB, so this leaves room for any real one.
pub(crate) const MAX_OBJECT_BYTES: usize = 8 * 1024 * 1024;
