//! The end of the hub: the wait for the first SIGTERM/SIGINT, then the drain within procd's
//! 5 s: readiness fails at once, the hub's own clients stop, the listeners close, in-flight
//! requests get [`DRAIN`], the cache writer drains its queue, the link totals are saved, the
//! dummy interface goes. A
//! second signal exits 1 at once.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::Running;
use crate::error::StartupError;
use crate::server;
use crate::{signals, spawn};

/// Time in-flight requests get to finish after the first signal.
const DRAIN: Duration = Duration::from_secs(3);

/// Waits for the first signal, and says which came.
pub(super) fn wait(signals: &crossbeam_channel::Receiver<i32>) -> Result<(), StartupError> {
    let first = signals
        .recv()
        .map_err(|_| StartupError::new("the signal thread stopped"))?;
    log::info!(
        "{} received: shutting down (a second signal exits at once)",
        signals::name(first)
    );
    Ok(())
}

/// Shuts the started hub down, in order: readiness and the hub's clients, a second signal's
/// watcher, the listeners (woken from their accept), the multiplexer port, the in-flight
/// requests' grace, the cache writer, the dummy interface.
pub(super) fn drain(running: Running) -> Result<(), StartupError> {
    let Running {
        signals,
        readiness,
        shutdown,
        stop,
        ports,
        multiplexer,
        writer_stop,
        writer_thread,
        dummy_check,
        local,
        _store: store,
        _root_lock: root_lock,
    } = running;
    readiness.shutting_down.store(true, Ordering::Release);
    shutdown.store(true, Ordering::Release);
    drop(stop);
    spawn("second-signal", move || {
        if let Ok(second) = signals.recv() {
            log::warn!("{} received again: exiting now", signals::name(second));
            std::process::exit(1);
        }
    })?;
    for addr in [
        ports.plain_addr.as_ref(),
        ports.secure_addr.get(),
        ports.dummy_secure.get(),
    ]
    .into_iter()
    .flatten()
    {
        server::wake(*addr);
    }
    if let Some((addr, thread)) = ports.dummy_plain {
        server::wake(addr);
        let _ = thread.join();
    }
    // The lock guards one Option: a panicking holder cannot leave it torn.
    let port = multiplexer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(port) = port {
        port.stop();
    }
    if let Some(thread) = ports.plain_thread {
        let _ = thread.join();
    }
    let load = ports.load;
    let deadline = Instant::now() + DRAIN;
    while load.in_flight() > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    if load.in_flight() > 0 {
        log::info!(
            "{} requests still open at shutdown (watches); closing them",
            load.in_flight()
        );
    }
    writer_stop.store(true, Ordering::Release);
    if let Some(writer) = writer_thread {
        let _ = writer.join();
    }
    // The link's last counts, after every request has ended.
    crate::linkbook::BOOK.save();
    // After the listeners closed, and with the check stopped (dropping `stop` ended it),
    // so that it cannot make the interface again.
    if let Some(check) = dummy_check {
        let _ = check.join();
    }
    local.remove();
    log::info!("tinyhub stopped");
    // As when `run` held them: the cache, then the root directory's lock, go last.
    drop(store);
    drop(root_lock);
    Ok(())
}
