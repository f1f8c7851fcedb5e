//! Admission and eviction: the connection and request counts, the list of open connections
//! the accept thread picks from at the cap (the one waiting longest for a head goes first,
//! one that never sent a request before an idle keep-alive one, a busy one never), and the
//! slots that give a count back however a connection or a request ends.
//!
//! Requests come in two kinds (issue 28), as the apiserver's max-in-flight filter tells them
//! apart: short ones, answered in a bounded time, take one of `--max-requests-in-flight`;
//! long-running ones (watches and other streams) never take those, so a client holding
//! watches cannot make kubelet's reads wait. Long-running requests are counted apart, per
//! fairness key (on the proxy ports the port, the credential and the component; on the
//! multiplexer port the follower), under [`LongRunningLimits`]: past a fair total a key
//! still gets a slot while it holds less than the total divided by the keys holding one
//! (itself counted), so one key's watches cannot take another key's; a ceiling bounds the
//! threads whatever the number of keys.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::Limits;
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
    /// Long-running requests being served, per fairness key.
    long_running: Mutex<LongRunning>,
}

/// The caps on long-running requests of a listener whose handler admits its requests
/// ([`Exchange::admit`](super::Exchange::admit)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LongRunningLimits {
    /// Below it any key gets a slot; at or past it only a key holding less than
    /// `fair_total` divided by the keys holding a slot (itself counted).
    pub fair_total: usize,
    /// Never more long-running requests than this, whatever the keys: the threads they hold
    /// stay bounded. At least `fair_total`.
    pub ceiling: usize,
    /// Never more long-running requests of one key than this.
    pub per_key: usize,
    /// The last slots below the ceiling, kept for the node's own requests (its components on
    /// the proxy ports): anyone else is refused at `ceiling - reserve`, however many clients
    /// they come from.
    pub reserve: usize,
}

impl LongRunningLimits {
    /// The proxy ports' caps, from `--max-requests-in-flight` (`in_flight`), within
    /// connections capped at twice it (`Limits::max_connections`): a fair total of half of
    /// it (125 by default: one key alone, a watch flood from one client, gets no more)
    /// and a ceiling of all of it (250), so short requests (`in_flight`) and long-running
    /// ones together never hold every connection, and a component's new connection is not
    /// refused at accept. A key gets at most the fair total.
    pub(crate) fn for_in_flight(in_flight: usize) -> LongRunningLimits {
        let fair_total = (in_flight / 2).max(1);
        LongRunningLimits {
            fair_total,
            ceiling: in_flight.max(fair_total),
            per_key: fair_total,
            // Half a fair total (62 by default) stays for the node's components whatever
            // pods with many credentials hold (issue 28: no client starves kubelet).
            reserve: fair_total / 2,
        }
    }
}

/// The long-running requests being served: how many, and how many per key (an entry goes
/// when its count is back to 0, so the map holds at most [`LongRunningLimits::ceiling`]).
#[derive(Debug, Default)]
struct LongRunning {
    total: usize,
    held: HashMap<Box<str>, usize>,
}

/// Why a long-running request was refused (429): the text of its `Status` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LongRunningRefusal {
    /// The key holds [`LongRunningLimits::per_key`].
    PerKey { held: usize },
    /// Past the fair total, the key holds its share or more.
    Share {
        held: usize,
        total: usize,
        keys: usize,
    },
    /// At [`LongRunningLimits::ceiling`].
    Ceiling { total: usize },
    /// At the ceiling less [`LongRunningLimits::reserve`], for a request not allowed the
    /// reserve.
    Reserved { total: usize },
}

impl LongRunningRefusal {
    /// The reason, for the `Status` and the log line.
    pub(crate) fn reason(&self, limits: &LongRunningLimits) -> String {
        match self {
            LongRunningRefusal::PerKey { held } => format!(
                "this client holds {held} long-running requests (watches), its maximum of {}",
                limits.per_key
            ),
            LongRunningRefusal::Share { held, total, keys } => format!(
                "the hub serves {total} long-running requests (watches), past its fair total of {}, and this client holds {held}, its share of them among {keys} clients",
                limits.fair_total
            ),
            LongRunningRefusal::Ceiling { total } => {
                format!("the hub serves {total} long-running requests (watches), its maximum")
            }
            LongRunningRefusal::Reserved { total } => format!(
                "the hub serves {total} long-running requests (watches); the last {} are kept for the node's own components",
                limits.reserve
            ),
        }
    }
}

impl Load {
    /// A long-running slot for `key`, or why not: below the fair total any key gets one
    /// (up to `per_key`); at or past it a key gets one only while it holds less than the
    /// fair total divided by the keys holding a slot, itself counted — then another key
    /// holds more than that share, and the newcomer is not the one refused; never past the
    /// ceiling. A request of the node's own (`node`) may take the reserve and is held past
    /// the fair total only to its per-key cap; anyone else stops short of the reserve.
    pub(super) fn enter_long_running(
        &self,
        key: &str,
        node: bool,
        limits: &LongRunningLimits,
    ) -> Result<(), LongRunningRefusal> {
        // Counts only: a panicking holder cannot leave them torn.
        let mut state = self
            .long_running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held = state.held.get(key).copied().unwrap_or(0);
        let keys = state.held.len() + usize::from(held == 0);
        let total = state.total;
        if held >= limits.per_key {
            return Err(LongRunningRefusal::PerKey { held });
        }
        if total >= limits.ceiling {
            return Err(LongRunningRefusal::Ceiling { total });
        }
        if !node && total >= limits.ceiling.saturating_sub(limits.reserve) {
            return Err(LongRunningRefusal::Reserved { total });
        }
        // held < fair_total / keys, without rounding the share down.
        let past_share = held.saturating_mul(keys) >= limits.fair_total;
        if !node && total >= limits.fair_total && past_share {
            return Err(LongRunningRefusal::Share { held, total, keys });
        }
        state.total += 1;
        *state.held.entry(key.into()).or_insert(0) += 1;
        Ok(())
    }

    /// Gives back a slot [`Load::enter_long_running`] gave `key`.
    pub(super) fn leave_long_running(&self, key: &str) {
        let mut state = self
            .long_running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.total = state.total.saturating_sub(1);
        if let Some(count) = state.held.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.held.remove(key);
            }
        }
    }

    /// Long-running requests being served now.
    #[cfg(test)]
    pub(crate) fn long_running(&self) -> usize {
        self.long_running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Load {
    /// Requests being served now that hold a slot: short and long-running ones (what the
    /// hub waits for at shutdown).
    pub(crate) fn in_flight(&self) -> usize {
        let long_running = self
            .long_running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total;
        self.in_flight.load(Ordering::Acquire) + long_running
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

/// What `Exchange::admit` counts against: the listener's load and caps.
pub(super) struct Gate<'a> {
    pub(super) load: &'a Load,
    pub(super) limits: Limits,
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

/// Takes one of `max_in_flight` short-request slots, or None at the cap.
pub(super) fn enter_short(load: &Load, max_in_flight: usize) -> Option<RequestSlot<'_>> {
    if load.in_flight.fetch_add(1, Ordering::AcqRel) >= max_in_flight {
        load.in_flight.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    Some(RequestSlot(load))
}

/// Frees a long-running slot of its key when the request ends.
pub(super) struct LongRunningSlot<'a> {
    pub(super) load: &'a Load,
    pub(super) key: Box<str>,
}

impl Drop for LongRunningSlot<'_> {
    fn drop(&mut self) {
        self.load.leave_long_running(&self.key);
    }
}

#[cfg(test)]
mod tests;
