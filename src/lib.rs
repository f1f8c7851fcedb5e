//! tinyhub: a node-local Kubernetes API proxy for edge gateways. Node components talk to it
//! on loopback; it forwards to the cloud apiserver, persists what they read, and answers from
//! that cache while the cloud is unreachable. See ARCHITECTURE.md for the code map.

// Unsafe code is limited to what has no safe std equivalent (sigwait, syncfs, the counting
// global allocator, the netlink socket of the dummy interface, the open-file limit); each is allowed locally with a SAFETY comment.
#![deny(unsafe_code)]
// The library serves the binary, the benches and the fuzz targets: what they do not use is
// crate-private, and a `pub` that nothing outside can reach is flagged.
#![warn(unreachable_pub)]

pub mod alloc;
pub mod app;
mod ascii;
mod atomic_file;
mod cache;
pub mod cachectl;
#[cfg(test)]
mod child_test;
mod clients;
mod cloud_error;
pub mod config;
mod dir_lock;
pub mod error;
mod filters;
// Only for tests and the fuzz crate (the `fuzzing` feature): not in the library the binary links.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod hashing;
mod health;
pub(crate) mod heartbeat;
mod http1;
mod link;
mod linkbook;
pub mod logging;
mod metrics;
mod mode;
mod names;
mod netif;
mod offline;
mod overlay;
mod pki;
mod pool;
mod procfs;
mod protobuf;
mod proxy;
mod reaper;
mod request;
mod requester;
mod rlimit;
mod route;
mod selector;
mod serve;
mod server;
mod signals;
mod status;
mod stream;
mod text_pages;
mod thread_dump;
mod tls;
mod tokens;
mod tunnel;
mod upstream;
mod watchcache;
mod x509;

/// Stack of the hub's own threads (request threads, health checkers, the writer). Measured:
/// a TLS handshake with ring plus JSON decoding stays well under it; see BENCHMARKS.md.
pub(crate) const SMALL_STACK: usize = 256 * 1024;

/// Locks `m`, also after a panic elsewhere poisoned it: the hub's shared state is plain values
/// that stay usable, and one failed thread must not stop the others.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts a named thread with [`SMALL_STACK`]; a failure says which thread.
pub(crate) fn spawn<F>(name: &str, f: F) -> Result<std::thread::JoinHandle<()>, error::StartupError>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(SMALL_STACK)
        .spawn(f)
        .map_err(|e| {
            error::StartupError::new(e.to_string())
                .context(format!("cannot start the {name} thread"))
        })
}

/// Seconds since the Unix epoch by the system clock (0 before it): the one reading of
/// wall-clock seconds for expiries (read grants, cached tokens) and notes.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// [`unix_now`] unsigned: the cache's sync times and ages (0 before the epoch).
pub(crate) fn unix_secs() -> u64 {
    u64::try_from(unix_now()).unwrap_or(0)
}

/// A number in `low..=high`, different for calls in the same instant (no crate for this:
/// spreading watch lengths needs no quality): the offline watch hold, the pool
/// caches' watches and their feeders.
pub(crate) fn random_between(low: u64, high: u64) -> u64 {
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(nanos)
        ^ SEQUENCE
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    low + x % (high.saturating_sub(low) + 1)
}
