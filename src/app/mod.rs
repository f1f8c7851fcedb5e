//! Wiring and lifecycle: builds the parts from a validated [`Config`], starts the threads,
//! and shuts down on the first SIGTERM/SIGINT within procd's 5 s (readiness fails at once,
//! listeners close, in-flight requests get a few seconds, the cache writer drains its queue);
//! a second signal exits 1 at once.
//!
//! [`run`] reads as its four phases, a file each:
//!
//! - `build.rs`: from the flags to the parts, before any thread but the signal handler runs
//!   (the start-up lines, the root directory's lock, the disk cache, the identity on disk, the
//!   bound listeners, the cloud's client);
//! - `start.rs`: the threads, in the order each needs the last (the serve port, the cache, the
//!   health checker, the proxy ports, the identity's rotation);
//! - `shutdown.rs`: the wait for the first signal, then the drain;
//!
//! with the parts `start` wires in files of their own: `pool.rs` (the pool caches, the
//! leader's ConfigMap and multiplexer port), `filters.rs` (the response filters from the flags)
//! and `listeners.rs` (the serve and proxy ports, the dummy interface's second addresses).

mod build;
mod filters;
mod listeners;
mod pool;
mod shutdown;
mod start;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::cache::store::Store;
use crate::config::Config;
use crate::dir_lock::DirLock;
use crate::error::StartupError;
use crate::netif::LocalAddress;
use crate::proxy::multiplexer::MultiplexerPort;
use crate::serve::Readiness;

/// Runs the hub until a signal ends it.
pub fn run(config: Config) -> Result<(), StartupError> {
    let parts = build::build(&config)?;
    let running = start::start(&config, parts)?;
    shutdown::wait(&running.signals)?;
    shutdown::drain(running)
}

/// What the started hub holds until the drain: what the shutdown flips, wakes, stops and joins,
/// in the order [`shutdown::drain`] does it.
struct Running {
    /// The signals after the first: a second one exits at once.
    signals: crossbeam_channel::Receiver<i32>,
    /// `/readyz` fails from the first signal.
    readiness: Arc<Readiness>,
    /// Set at the first signal: the accept loops and the offline answers see it.
    shutdown: Arc<AtomicBool>,
    /// Dropped at the first signal: the hub's own clients (watches, health, rotation) end.
    stop: crossbeam_channel::Sender<()>,
    /// The proxy ports, woken and joined in the drain.
    ports: listeners::ProxyPorts,
    /// A leader's multiplexer port, once open.
    multiplexer: Arc<Mutex<Option<MultiplexerPort>>>,
    /// Set after the drain's wait for in-flight requests: the cache writer drains its queue.
    writer_stop: Arc<AtomicBool>,
    /// The cache writer, joined last but one.
    writer_thread: Option<JoinHandle<()>>,
    /// The dummy interface's re-check, joined before the interface is removed.
    dummy_check: Option<JoinHandle<()>>,
    /// The local address, whose dummy interface the drain removes.
    local: LocalAddress,
    /// The disk cache, open (and locked) until `run` returns.
    _store: Option<Arc<Store>>,
    /// The root directory's lock, held until `run` returns (None when the cache's covers it).
    _root_lock: Option<DirLock>,
}
