//! tinyhub: a node-local Kubernetes API proxy for edge gateways. Node components talk to it
//! on loopback; it forwards to the cloud apiserver, persists what they read, and answers from
//! that cache while the cloud is unreachable. See ARCHITECTURE.md for the code map.

// Unsafe code is limited to what has no safe std equivalent (sigwait, syncfs, the counting
// global allocator); each is allowed locally with a SAFETY comment.
#![deny(unsafe_code)]

pub mod alloc;
pub mod app;
pub mod cache;
pub mod config;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod http1;
pub mod logging;
pub mod metrics;
pub mod offline;
pub mod proxy;
pub mod reaper;
pub mod request;
pub mod route;
pub mod selector;
pub mod serve;
pub mod server;
pub mod signals;
pub mod status;
pub mod tls;
pub mod tokens;
pub mod upstream;

/// Stack of the hub's own threads (request threads, health checkers, the writer). Measured:
/// a TLS handshake with ring plus JSON decoding stays well under it; see BENCHMARKS.md.
pub const SMALL_STACK: usize = 256 * 1024;
