//! tinyhub's integration tests: one binary that starts the stand-in cloud (tests/support) and
//! the real `tinyhub` binary, and drives real HTTP (and kubectl) through the hub.
//!
//! `TINYHUB_TEST_BIN` and `TINYHUB_TEST_RUNNER` run the same tests against another build of the
//! binary, e.g. the armv7 one under qemu (`make cross-test`). `TINYHUB_TEST_LOG=1` echoes the
//! hub's log.

#[path = "../support/mod.rs"]
mod support;

mod autonomy;
mod bodies;
mod cache_archive;
mod cache_bound;
mod cache_cli;
mod cache_dir;
mod cache_ghosts;
mod cache_relist;
mod cache_write;
mod cli;
mod cloud_filters;
mod cloud_gzip;
mod cloud_identity;
mod cloud_leases;
mod cross;
mod discovery;
mod dummy_if;
mod endpoints_overlay;
mod exec;
mod fairness;
mod faults;
mod filter_metrics;
mod filter_skip;
mod filters;
mod forward;
mod freshness;
mod get_cost;
mod heartbeat;
mod host_untouched;
mod hostile;
mod identity;
mod join_token_file;
mod kubectl;
mod lb_hashing;
mod link_metrics;
mod link_totals;
mod list_path_cost;
mod list_scope;
mod list_unchanged;
mod messages;
mod metadata_only;
mod metrics_parity;
mod offline;
mod offline_grants;
mod offline_hold;
mod offline_node;
mod offline_scope;
mod ota;
mod pool_fresh;
mod pool_leader;
mod pool_local;
mod pool_serve;
mod power_loss;
mod refill_economy;
mod request_refusals;
mod serve_extras;
mod start_limits;
mod trust;
mod try_by_hand;
mod tunnel;
mod watch_footprint;
mod watch_list_options;
mod watch_memory;
mod watch_resume;
mod watch_resume_faults;
mod watch_resume_history;
mod watch_resume_kubectl;
mod whole_list;
mod yurthub_command_line;
