//! The resumable watches' counters, per resource (`resource[.group]`):
//!
//! ```text
//! tinyhub_watch_resumed_total{resource}             legs resumed (200 to a resume request)
//! tinyhub_watch_relists_total{resource}             lists sent by rounds after a 410
//! tinyhub_watch_events_synthesized_total{resource}  ADDED/MODIFIED/DELETED sent by differences
//! ```
//!
//! Kept here and rendered by `metrics` as a source, as the filters' series are.
