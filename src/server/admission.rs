//! Admission and eviction: the connection and request counts, the list of open connections
//! the accept thread picks from at the cap (the one waiting longest for a head goes first,
//! one that never sent a request before an idle keep-alive one, a busy one never), and the
//! slots that give a count back however a connection or a request ends.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::stream::ClientStream;
use crate::metrics::{METRICS, Metrics};

/// Connections and requests being served, shared with whoever waits for them to drain.
#[derive(Debug, Default)]
pub(crate) struct Load {
    pub(super) connections: AtomicUsize,
    pub(super) in_flight: AtomicUsize,
    /// Every open connection, for the accept thread to pick one to evict at the cap.
    open: Mutex<Vec<Arc<Tracked>>>,
    /// Counts the times a connection started waiting for a head: the order to evict in.
    waits: AtomicU64,
}

impl Load {
    /// Requests being served now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(super) fn open(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Tracked>>> {
        // The list stays consistent whatever a panicking holder did: each step is one push,
        // one swap_remove or one scan.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the open connection that has waited longest for a request head, preferring one
    /// that never sent a request; false when every connection is serving a request.
    fn evict_one(&self) -> bool {
        let mut open = self.open();
        let Some((index, _)) = open
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.rank.load(Ordering::Acquire)))
            .filter(|&(_, rank)| rank != BUSY)
            .min_by_key(|&(_, rank)| rank)
        else {
            return false;
        };
        let victim = open.swap_remove(index);
        drop(open);
        victim.rank.store(BUSY, Ordering::Release);
        // Its thread, blocked reading a head, sees the end of the stream and exits.
        let _ = victim.stream.shutdown();
        Metrics::inc(&METRICS.evicted_connections);
        true
    }

    fn forget(&self, tracked: &Arc<Tracked>) {
        let mut open = self.open();
        if let Some(i) = open.iter().position(|t| Arc::ptr_eq(t, tracked)) {
            open.swap_remove(i);
        }
    }
}

/// Rank of a connection serving a request: never evicted.
pub(super) const BUSY: u64 = u64::MAX;
/// Added to the rank of a connection idle between requests, so connections that never sent
/// a request (a slow-header flood) are evicted before a component's keep-alive connection.
const IDLE_RANK: u64 = 1 << 62;

/// What the accept thread knows of an open connection.
#[derive(Debug)]
pub(super) struct Tracked<S: ?Sized = dyn ClientStream> {
    /// [`BUSY`], or the order to evict in while waiting for a head: when it started
    /// waiting (a [`Load::waits`] count), plus [`IDLE_RANK`] after a first request.
    pub(super) rank: AtomicU64,
    /// A handle on the connection's socket: shutting it down ends the connection. Last: the
    /// type is erased behind the `Arc` (`Tracked<TcpStream>` becomes `Tracked`).
    pub(super) stream: S,
}

impl<S: ?Sized> Tracked<S> {
    pub(super) fn waiting(&self, load: &Load, served_before: bool) {
        let since = load.waits.fetch_add(1, Ordering::Relaxed);
        let rank = if served_before {
            IDLE_RANK + since
        } else {
            since
        };
        self.rank.store(rank, Ordering::Release);
    }

    /// Marks the connection serving a request; false when the accept thread evicted it
    /// meanwhile (its socket is shut down: the request must not be served).
    pub(super) fn busy(&self) -> bool {
        self.rank.swap(BUSY, Ordering::AcqRel) != BUSY
    }
}

/// Connections served past the cap while the ones evicted for them close: their threads
/// exit as soon as they see the shutdown, so a small margin keeps threads bounded.
fn eviction_margin(max_connections: usize) -> usize {
    max_connections / 4 + 1
}

/// Longest the accept thread waits for evicted connections to close before it refuses one.
const ADMIT_WAIT: Duration = Duration::from_millis(500);

/// Takes a connection slot for a new connection: a free one, or one freed by evicting the
/// connection that waited longest for a head. False when every connection is serving a
/// request. Only the accept thread adds connections, so the count it reads cannot grow
/// behind its back.
pub(super) fn admit(load: &Load, max_connections: usize) -> bool {
    let ceiling = max_connections + eviction_margin(max_connections);
    let deadline = Instant::now() + ADMIT_WAIT;
    loop {
        let open = load.connections.load(Ordering::Acquire);
        if open < max_connections || (open < ceiling && load.evict_one()) {
            load.connections.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        // Below the ceiling with nothing to evict: every connection is serving a request.
        // At the ceiling, evicted threads are still on their way out (a flood of
        // connections outruns them): wait for them, the kernel's backlog holds the rest.
        if open < ceiling || Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Frees a connection slot, and forgets the connection, when its thread ends however it ends.
pub(super) struct ConnectionSlot {
    pub(super) load: Arc<Load>,
    pub(super) tracked: Arc<Tracked>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.load.forget(&self.tracked);
        self.load.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Frees a request slot when the request ends.
pub(super) struct RequestSlot<'a>(pub(super) &'a Load);

impl Drop for RequestSlot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
