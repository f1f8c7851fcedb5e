//! Frees online watches whose client hung up. A relay thread blocks reading the cloud's
//! stream and would only notice a vanished client at the next event — minutes away for a
//! quiet watch — holding its thread, its request slot and a cloud connection meanwhile. The
//! reaper looks at the clients of open streams once a second and cancels the cloud side of
//! those that are gone, which unblocks the relay at once.
//!
//! It knows client connections only as [`ClientProbe`]s and cloud streams only as
//! [`Cancel`] handles.

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

struct Entry {
    id: u64,
    probe: ClientProbe,
    cancel: Cancel,
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
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Entry { id, probe, cancel });
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
                let alive = !e.probe.gone();
                if !alive {
                    gone.push(e.cancel.clone());
                }
                alive
            });
            gone
        };
        for cancel in gone {
            log::debug!("a watch's client went away: ending its cloud stream");
            cancel.cancel();
        }
    }
}
