//! The pooled connections of one set of agents, retired when the TLS material changes: the idle
//! ones shut down at once, the ones in use never pooled again, so none outlives the material it
//! was made with, and none a request has just taken is closed under it.
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use ureq::unversioned::transport::{ConnectionDetails, Connector, ShutdownHandle, Transport};

use super::conn::{ConnHook, Hooked, LAST_CONNECTION};

/// The pooled connections of one set of agents. Retired when the TLS material changes: its
/// idle connections are shut down at once, and one in use is not pooled again when its
/// answer ends (it says it is closed), so none outlives the material it was made with.
#[derive(Debug, Default)]
pub(super) struct Generation {
    retired: AtomicBool,
    pub(super) conns: Mutex<Vec<Weak<PooledConn>>>,
}

impl Generation {
    /// Shuts down every idle connection, and keeps the others from being pooled again.
    pub(super) fn retire(&self) {
        // Set before looking at the state, which a connection going back to the pool sets
        // before looking at this: one of the two sides sees the other (SeqCst).
        self.retired.store(true, Ordering::SeqCst);
        let conns = std::mem::take(&mut *self.conns.lock().unwrap_or_else(PoisonError::into_inner));
        for conn in conns.iter().filter_map(Weak::upgrade) {
            // Only a connection still in the pool: one a request has just taken is its.
            if conn
                .state
                .compare_exchange(IDLE, CLOSED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
                && let Some(socket) = conn.socket.as_ref().and_then(Weak::upgrade)
            {
                socket.shutdown();
            }
        }
    }
}

/// A pooled connection in use: made, or taken from the pool, for a request.
const BUSY: u8 = 0;
/// A pooled connection in the pool.
const IDLE: u8 = 1;
/// A pooled connection shut down by [`Generation::retire`] while in the pool.
const CLOSED: u8 = 2;

/// What a generation knows of one pooled connection.
pub(super) struct PooledConn {
    /// [`BUSY`], [`IDLE`] or [`CLOSED`]: who may close it, the request or the swap.
    state: AtomicU8,
    /// Its socket, as ureq's TCP connector registered it.
    socket: Option<Weak<dyn ShutdownHandle>>,
}

impl PooledConn {
    /// A connection just made for a request, with its socket.
    pub(super) fn new(socket: Option<Weak<dyn ShutdownHandle>>) -> PooledConn {
        PooledConn {
            state: AtomicU8::new(BUSY),
            socket,
        }
    }
}

/// The last link of the pooled connections' connector chain: wraps each connection into its
/// generation.
#[derive(Debug)]
pub(super) struct Retirable(pub(super) Arc<Generation>);

impl<In: Transport> Connector<In> for Retirable {
    type Out = RetirableTransport<In>;

    fn connect(
        &self,
        _: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(inner) = chained else {
            return Ok(None);
        };
        // Noted by `Recording` in this same call, on this thread.
        let conn = Arc::new(PooledConn::new(
            LAST_CONNECTION.with(|last| last.borrow_mut().take()),
        ));
        let mut conns = self.0.conns.lock().unwrap_or_else(PoisonError::into_inner);
        conns.retain(|c| c.strong_count() > 0);
        conns.push(Arc::downgrade(&conn));
        Ok(Some(Hooked {
            inner,
            hook: Retiring {
                conn,
                generation: Arc::clone(&self.0),
            },
        }))
    }
}

/// A pooled connection.
pub(super) type RetirableTransport<T> = Hooked<T, Retiring>;

/// A pooled connection's place in its generation. Its pool (`plain.rs`) asks whether it is
/// open at two moments only: when its answer ended, before putting it back in the pool (it
/// becomes idle), and when a request takes it from the pool (it becomes busy again, unless a
/// swap closed it first). A swap closes only an idle one, so never one a request has just
/// taken. Only the taking asks the socket: a connection whose answer has just been read whole
/// is open, and one the server closes meanwhile is found closed when taken (one system call
/// per request instead of two probes).
pub(super) struct Retiring {
    pub(super) conn: Arc<PooledConn>,
    pub(super) generation: Arc<Generation>,
}

impl ConnHook for Retiring {
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool {
        let state = &self.conn.state;
        match state.load(Ordering::SeqCst) {
            // Its answer ended: into the pool, unless retired (see `Generation::retire`). Only
            // this thread changes a busy connection's state.
            BUSY => {
                state.store(IDLE, Ordering::SeqCst);
                return !self.generation.retired.load(Ordering::SeqCst);
            }
            // Being taken from the pool: the request's, unless a swap closed it first.
            IDLE => {
                if state
                    .compare_exchange(IDLE, BUSY, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    return false;
                }
            }
            _ => return false,
        }
        !self.generation.retired.load(Ordering::SeqCst) && inner_open()
    }
}
