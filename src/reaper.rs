//! Frees online watches whose client hung up. A relay thread blocks reading the cloud's
//! stream and would only notice a vanished client at the next event — minutes away for a
//! quiet watch — holding its thread, its request slot and a cloud connection meanwhile. The
//! reaper looks at the clients of open streams once a second and cancels the cloud side of
//! those that are gone, which unblocks the relay at once.
//!
//! A resumable watch's leg (`proxy/resume/`) is also cancelled when it goes stale — its
//! server found unhealthy, or silent long past its bookmarks — so the watch resumes
//! elsewhere instead of waiting on a black-holed connection (a stream's reads have no timeout).
//!
//! It knows client connections only as [`ClientProbe`]s, cloud streams only as [`Cancel`]
//! handles, and staleness only as the predicate the leg's owner gave.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::Duration;

use crate::server::ClientProbe;
use crate::upstream::Cancel;

/// How often clients of open streams are looked at.
const TICK: Duration = Duration::from_secs(1);

/// The streams being watched over.
pub(crate) struct Reaper {
    entries: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
}

/// Whether a leg went stale: asked once a tick, on the reaper's thread.
pub(crate) type Stale = Box<dyn Fn() -> bool + Send>;

struct Entry {
    id: u64,
    /// None: the client cannot be probed (only staleness ends the stream).
    probe: Option<ClientProbe>,
    cancel: Cancel,
    stale: Option<Stale>,
}

impl Entry {
    /// The stream should end: its client is gone, or (a leg) it went stale.
    fn over(&self) -> bool {
        self.probe.as_ref().is_some_and(ClientProbe::gone)
            || self.stale.as_ref().is_some_and(|s| s())
    }
}

/// Keeps a stream under watch; dropping it (the relay ended) forgets the stream.
pub(crate) struct Watched {
    reaper: Arc<Reaper>,
    id: u64,
}

impl Reaper {
    /// Starts the reaper thread; it ends when the last `Arc` is dropped.
    pub(crate) fn start() -> Arc<Reaper> {
        let reaper = Arc::new(Reaper {
            entries: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        });
        let weak = Arc::downgrade(&reaper);
        let spawned = thread::Builder::new()
            .name("reaper".into())
            .stack_size(crate::SMALL_STACK)
            .spawn(move || run(&weak));
        if let Err(e) = spawned {
            // Without it, watches of vanished clients end at their next event or timeout.
            log::error!("cannot start the watch reaper: {e}");
        }
        reaper
    }

    /// Watches over one stream until the returned guard is dropped.
    pub(crate) fn watch(self: &Arc<Self>, probe: ClientProbe, cancel: Cancel) -> Watched {
        self.enter(Some(probe), cancel, None)
    }

    /// Watches over one leg of a resumable watch until the returned guard is dropped: it is
    /// cancelled when its client is gone or when `stale` says so.
    pub(crate) fn watch_leg(
        self: &Arc<Self>,
        probe: Option<ClientProbe>,
        cancel: Cancel,
        stale: Stale,
    ) -> Watched {
        self.enter(probe, cancel, Some(stale))
    }

    fn enter(
        self: &Arc<Self>,
        probe: Option<ClientProbe>,
        cancel: Cancel,
        stale: Option<Stale>,
    ) -> Watched {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Entry {
            id,
            probe,
            cancel,
            stale,
        });
        Watched {
            reaper: Arc::clone(self),
            id,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // Entries are plain handles; a panic elsewhere leaves them usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Watched {
    /// Whether the reaper ended this stream (its client was gone, or a leg went stale): then
    /// the cloud side's read failed because the hub cut it, not because the cloud broke off.
    pub(crate) fn reaped(&self) -> bool {
        !self.reaper.lock().iter().any(|e| e.id == self.id)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.reaper.lock().retain(|e| e.id != self.id);
    }
}

fn run(reaper: &Weak<Reaper>) {
    loop {
        thread::sleep(TICK);
        let Some(reaper) = reaper.upgrade() else {
            return;
        };
        let gone: Vec<Cancel> = {
            let mut entries = reaper.lock();
            let mut gone = Vec::new();
            entries.retain(|e| {
                let alive = !e.over();
                if !alive {
                    gone.push(e.cancel.clone());
                }
                alive
            });
            gone
        };
        for cancel in gone {
            log::debug!(
                "a watch's client went away or its leg went stale: ending its cloud stream"
            );
            cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use ureq::unversioned::transport::ShutdownHandle;

    use super::*;

    /// A stream that records being shut down.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl ShutdownHandle for Flag {
        fn shutdown(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_stale_leg_is_cancelled() {
        let reaper = Reaper::start();
        let fresh: Arc<Flag> = Arc::default();
        let stale: Arc<Flag> = Arc::default();
        let fresh_handle: Arc<dyn ShutdownHandle> = fresh.clone();
        let stale_handle: Arc<dyn ShutdownHandle> = stale.clone();
        let went_stale = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&went_stale);
        let _fresh = reaper.watch_leg(None, Cancel::of(&fresh_handle), Box::new(|| false));
        let _stale = reaper.watch_leg(
            None,
            Cancel::of(&stale_handle),
            Box::new(move || seen.load(Ordering::SeqCst)),
        );
        thread::sleep(TICK + TICK / 2);
        assert!(!stale.0.load(Ordering::SeqCst), "not stale yet");
        went_stale.store(true, Ordering::SeqCst);
        let until = std::time::Instant::now() + 5 * TICK;
        while !stale.0.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            thread::sleep(TICK / 10);
        }
        assert!(stale.0.load(Ordering::SeqCst), "the stale leg is cancelled");
        assert!(!fresh.0.load(Ordering::SeqCst), "the other leg stays");
        assert_eq!(reaper.lock().len(), 1, "the cancelled leg is forgotten");
    }
}
