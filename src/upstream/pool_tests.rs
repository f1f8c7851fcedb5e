//! A pooled connection's life as ureq 3.5 drives it (`is_open` when its answer ends, and
//! when a request takes it from the pool), against a swap of the TLS material, step by step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use ureq::unversioned::transport::{Buffers, LazyBuffers, NextTimeout, ShutdownHandle, Transport};

use super::conn::Hooked;
use super::retire::{Generation, PooledConn, RetirableTransport, Retiring};

/// A socket: open until shut down.
#[derive(Debug, Default)]
struct Socket(AtomicBool);

impl ShutdownHandle for Socket {
    fn shutdown(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A transport over a [`Socket`].
#[derive(Debug)]
struct Fake(Arc<Socket>, LazyBuffers);

impl Transport for Fake {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.1
    }

    fn transmit_output(&mut self, _: usize, _: NextTimeout) -> Result<(), ureq::Error> {
        Ok(())
    }

    fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
        Ok(false)
    }

    fn is_open(&mut self) -> bool {
        !self.0.0.load(Ordering::SeqCst)
    }
}

/// A new connection of `generation` (in use, as just made) and its socket.
fn connection(generation: &Arc<Generation>) -> (RetirableTransport<Fake>, Arc<Socket>) {
    let socket = Arc::new(Socket::default());
    let handle: Weak<dyn ShutdownHandle> = Arc::downgrade(&socket) as Weak<Socket>;
    let conn = Arc::new(PooledConn::new(Some(handle)));
    generation.conns.lock().unwrap().push(Arc::downgrade(&conn));
    let transport = Hooked {
        inner: Fake(Arc::clone(&socket), LazyBuffers::new(64, 64)),
        hook: Retiring {
            conn,
            generation: Arc::clone(generation),
        },
    };
    (transport, socket)
}

#[test]
fn a_swap_right_after_a_take_leaves_the_taken_connection_open_and_unpooled_after() {
    let generation = Arc::new(Generation::default());
    let (mut conn, socket) = connection(&generation);
    assert!(conn.is_open(), "its answer ended: back to the pool");
    assert!(conn.is_open(), "a request takes it from the pool");
    // The swap, before the request's first write.
    generation.retire();
    assert!(
        !socket.0.load(Ordering::SeqCst),
        "the request's connection stays open"
    );
    assert!(!conn.is_open(), "its answer ended: not pooled again");
}

#[test]
fn a_swap_closes_a_pooled_connection_and_it_is_never_taken() {
    let generation = Arc::new(Generation::default());
    let (mut conn, socket) = connection(&generation);
    assert!(conn.is_open(), "its answer ended: back to the pool");
    generation.retire();
    assert!(
        socket.0.load(Ordering::SeqCst),
        "an idle connection is shut down"
    );
    assert!(!conn.is_open(), "a request does not take it");
}

#[test]
fn a_connection_in_use_at_a_swap_is_left_open_and_not_pooled() {
    let generation = Arc::new(Generation::default());
    let (mut conn, socket) = connection(&generation);
    generation.retire();
    assert!(!socket.0.load(Ordering::SeqCst));
    assert!(!conn.is_open(), "its answer ended: not pooled again");
}
