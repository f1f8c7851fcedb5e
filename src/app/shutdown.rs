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
use crate::{signals, spawn, text_pages};

/// Time in-flight requests get to finish after the first signal.
const DRAIN: Duration = Duration::from_secs(3);

/// How often the main thread looks whether the start-up has settled.
const SETTLE_STEP: Duration = Duration::from_secs(1);
/// CPU time under which a [`SETTLE_STEP`] counts as idle (1 % of a core): the start-up's
/// lists, handshakes and certificates are over, the hub only waits.
const QUIET_CPU: Duration = Duration::from_millis(10);
/// The start-up's code is let go by then even if the hub was never idle for a step.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// Waits for the first signal, and says which came. Before it, once the start-up has
/// settled, the executable's pages it made resident are let go (`text_pages`).
pub(super) fn wait(signals: &crossbeam_channel::Receiver<i32>) -> Result<(), StartupError> {
    let first = match wait_settled(signals) {
        Some(first) => first,
        None => signals.recv(),
    }
    .map_err(|_| StartupError::new("the signal thread stopped"))?;
    log::info!(
        "{} received: shutting down (a second signal exits at once)",
        signals::name(first)
    );
    Ok(())
}

/// Waits for a signal until the start-up has settled: the first [`SETTLE_STEP`] in which the
/// hub used under [`QUIET_CPU`], or [`SETTLE_LIMIT`]. Then lets the start-up's code go
/// (`text_pages::release`) and returns None; the signal if one came first (its error if the
/// signal thread stopped).
fn wait_settled(
    signals: &crossbeam_channel::Receiver<i32>,
) -> Option<Result<i32, crossbeam_channel::RecvError>> {
    let started = Instant::now();
    let mut cpu = text_pages::cpu_time();
    loop {
        match signals.recv_timeout(SETTLE_STEP) {
            Ok(signal) => return Some(Ok(signal)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Some(Err(crossbeam_channel::RecvError));
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        let now = text_pages::cpu_time();
        if now.saturating_sub(cpu) < QUIET_CPU || started.elapsed() >= SETTLE_LIMIT {
            break;
        }
        cpu = now;
    }
    match text_pages::release() {
        Ok(bytes) => log::debug!("start-up over: {} KiB of code let go", bytes / 1024),
        Err(e) => log::debug!("start-up over: its code stays resident: {e}"),
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_during_the_start_ups_settling_is_the_one_the_hub_shuts_down_on() {
        let (tx, rx) = crossbeam_channel::unbounded();
        tx.send(libc::SIGTERM).expect("the channel is open");
        assert_eq!(wait_settled(&rx), Some(Ok(libc::SIGTERM)));
    }

    #[test]
    fn a_stopped_signal_thread_during_the_settling_is_an_error_not_a_wait() {
        let (tx, rx) = crossbeam_channel::unbounded::<i32>();
        drop(tx);
        assert_eq!(wait_settled(&rx), Some(Err(crossbeam_channel::RecvError)));
        assert!(wait(&rx).is_err());
    }
}
