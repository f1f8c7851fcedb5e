//! Watches that outlive outages (issue 29): the relay of a resumable watch keeps the client's
//! stream open across upstream legs. When a leg breaks, the hub holds the client (bookmarks if
//! it asked), waits until a cloud server is usable again (plus a jitter after an outage), and
//! watches again from the last resourceVersion it delivered, splicing the events into the
//! same stream; after a 410 a cache agent's view is rebuilt by one list and the difference
//! against its disk cache (`diff.rs`, `rounds.rs`), anyone else's watch ends cleanly.
//!
//! - `leg.rs`: the legs as values (targets, headers, the answer's reading, backoff, jitter);
//! - `series.rs`: the `tinyhub_watch_*` counters.

mod leg;
pub(crate) mod series;
// Part C's difference and list rounds join here:
// mod diff;
// mod rounds;
