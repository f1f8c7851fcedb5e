//! What dropped cache sessions tell the refill thread (`clients::refill`), and, for each
//! request with a drop, which answers to it reached the writer whole since and which are still
//! in flight: a drop a later answer made needless is not fetched again, and one is not fetched
//! while an answer to the same request is still on its way (it may bring the list whole).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::cache::target::CacheTarget;
use crate::request::ApiRequest;

/// Refills waiting at most; past it new ones are dropped (the next list refills anyway).
const QUEUE: usize = 32;
/// Requests the ledger follows at most; past it, it forgets them all (the cost: a refill that
/// a later answer made needless is fetched anyway).
const LEDGER_CAP: usize = 256;

/// A response whose cache session was dropped because the disk fell behind: the request to
/// repeat, on the hub's own credentials, at the disk's pace. It travels as the relay
/// classified and routed it (the cache carries it, never reads it): the refill thread renders
/// the request it sends from these values, and parses no URL again.
#[derive(Debug, Clone)]
pub(crate) struct Refill {
    /// The request as classified: a get, a list, or a watch (whose list of the same scope is
    /// what is fetched again). Its `component` is the cache it fills. (Boxed: a session
    /// holds its refill while it runs, and most sessions are never dropped.)
    pub request: Box<ApiRequest>,
    /// What routing caches its answer as.
    pub target: CacheTarget,
    /// Its path and query as the client sent it: what tells one request from another in the
    /// ledger and the log lines (compared, never parsed).
    pub sent_as: String,
}

/// Two refills are of one request when the same component sent the same path and query.
impl PartialEq for Refill {
    fn eq(&self, other: &Refill) -> bool {
        self.sent_as == other.sent_as && self.request.component == other.request.component
    }
}

impl Eq for Refill {}

impl Hash for Refill {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.sent_as.hash(state);
        self.request.component.as_str().hash(state);
    }
}

/// The refill queue and its ledger, until the refill thread takes them.
pub(crate) struct Refills {
    tx: RefillTx,
    rx: Receiver<Dropped>,
}

impl Refills {
    /// A refill queue.
    pub(crate) fn new() -> Refills {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let tx = RefillTx {
            tx,
            ledger: Arc::new(Ledger::default()),
        };
        Refills { tx, rx }
    }

    /// What the cache queue tells of its sessions: drops, and answers that went whole.
    pub(crate) fn sender(&self) -> RefillTx {
        self.tx.clone()
    }

    /// The refill thread's own side of the ledger.
    pub(crate) fn tx(&self) -> &RefillTx {
        &self.tx
    }

    /// The drops, in order.
    pub(crate) fn rx(&self) -> &Receiver<Dropped> {
        &self.rx
    }
}

impl Default for Refills {
    fn default() -> Self {
        Refills::new()
    }
}

/// A dropped answer: its request, and when its session began ([`RefillTx::begun`]).
#[derive(Debug)]
pub(crate) struct Dropped {
    /// The request.
    pub refill: Refill,
    /// When its session began.
    pub since: u64,
    /// Handed over for a relist (`cache/relist.rs`), not dropped for a full queue: fetched
    /// at once, whatever else of the request is in flight.
    pub relist: bool,
}

/// The cache queue's side of the refills, cloned into every connection thread.
#[derive(Clone)]
pub(crate) struct RefillTx {
    tx: Sender<Dropped>,
    ledger: Arc<Ledger>,
}

impl RefillTx {
    /// Whether the ledger follows any request (one had a drop): until then a session's
    /// refill is needed only if it is dropped itself.
    pub(crate) fn following(&self) -> bool {
        self.ledger.any.load(Ordering::Acquire)
    }

    /// The order of a session beginning now, among all sessions that may be refilled.
    pub(crate) fn begun(&self) -> u64 {
        self.ledger.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// [`RefillTx::begun`] for a client's session of `refill` beginning now; a list or get
    /// (not `streaming`) of a followed request counts as in flight until
    /// [`RefillTx::whole`] or [`RefillTx::ended`]. (A watch stays open for hours and
    /// brings no list: it never holds a refill back.)
    pub(crate) fn open(&self, refill: &Refill, streaming: bool) -> u64 {
        let since = self.begun();
        if !streaming {
            self.ledger.open(refill, since);
        }
        since
    }

    /// The answer to `refill` of the session begun at `since` reached the writer whole (and
    /// is no longer in flight).
    pub(crate) fn whole(&self, refill: &Refill, since: u64) {
        self.ledger.whole(refill, since);
    }

    /// The session of `refill` begun at `since` ended otherwise: its client's answer is over
    /// (dropped or not) or broke off.
    pub(crate) fn ended(&self, refill: &Refill, since: u64) {
        self.ledger.ended(refill, since);
    }

    /// The answer to `refill` of the session begun at `since` was dropped for a full queue:
    /// fetch it again. A list or get (not `streaming`) stays in flight until
    /// [`RefillTx::ended`]: its client is still being answered, and asks again only after.
    /// False when the refill queue is full.
    pub(crate) fn dropped(&self, refill: Refill, since: u64, streaming: bool) -> bool {
        self.ledger
            .follow(&refill, Some(since).filter(|_| !streaming));
        self.send(Dropped {
            refill,
            since,
            relist: false,
        })
    }

    /// `refill` is to be listed again for a relist: fetch it at once (unless an answer
    /// begun from now on goes whole first). False when the refill queue is full.
    pub(crate) fn relist(&self, refill: Refill) -> bool {
        self.ledger.follow(&refill, None);
        let since = self.begun();
        self.send(Dropped {
            refill,
            since,
            relist: true,
        })
    }

    fn send(&self, dropped: Dropped) -> bool {
        self.tx.try_send(dropped).is_ok()
    }

    /// Whether an answer to `refill` that began at or after `since` reached the writer whole.
    pub(crate) fn brought(&self, refill: &Refill, since: u64) -> bool {
        self.ledger.brought(refill, since)
    }

    /// Since when no list or get of `refill` is in flight (none while one is: its session,
    /// or the dropped one still answering its client). A request the ledger forgot (past its
    /// cap) reads as idle from now.
    pub(crate) fn idle_since(&self, refill: &Refill) -> Option<Instant> {
        self.ledger.idle_since(refill)
    }
}

/// For each request with a dropped answer, the latest session since then whose answer reached
/// the writer whole, and its sessions in flight. Empty until the first drop: a session then
/// costs one atomic load at its start and one at its end.
#[derive(Default)]
struct Ledger {
    next: AtomicU64,
    any: AtomicBool,
    entries: Mutex<HashMap<Refill, Followed>>,
}

/// What the ledger knows of one request.
#[derive(Debug)]
struct Followed {
    /// The `since` of its latest whole answer (0: none seen yet).
    latest_whole: u64,
    /// The `since` of its sessions in flight (a few: one per client listing it at once).
    open: Vec<u64>,
    /// When the last of them ended (when it was first followed, before any).
    last_end: Instant,
}

impl Ledger {
    fn entries(&self) -> MutexGuard<'_, HashMap<Refill, Followed>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows `refill` from now on; `open`: the dropped session still in flight (begun
    /// before the request was followed, it may not be counted yet).
    fn follow(&self, refill: &Refill, open: Option<u64>) {
        let mut entries = self.entries();
        if !entries.contains_key(refill) && entries.len() >= LEDGER_CAP {
            entries.clear();
        }
        let followed = entries.entry(refill.clone()).or_insert_with(|| Followed {
            latest_whole: 0,
            open: Vec::new(),
            last_end: Instant::now(),
        });
        if let Some(since) = open
            && !followed.open.contains(&since)
        {
            followed.open.push(since);
        }
        self.any.store(true, Ordering::Release);
    }

    fn open(&self, refill: &Refill, since: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        if let Some(followed) = self.entries().get_mut(refill) {
            followed.open.push(since);
        }
    }

    fn ended(&self, refill: &Refill, since: u64) -> Option<()> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut entries = self.entries();
        let followed = entries.get_mut(refill)?;
        let at = followed.open.iter().position(|&s| s == since)?;
        followed.open.swap_remove(at);
        followed.last_end = Instant::now();
        Some(())
    }

    fn whole(&self, refill: &Refill, since: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        if let Some(followed) = self.entries().get_mut(refill) {
            followed.latest_whole = followed.latest_whole.max(since);
            if let Some(at) = followed.open.iter().position(|&s| s == since) {
                followed.open.swap_remove(at);
                followed.last_end = Instant::now();
            }
        }
    }

    fn brought(&self, refill: &Refill, since: u64) -> bool {
        self.entries()
            .get(refill)
            .is_some_and(|f| f.latest_whole >= since)
    }

    fn idle_since(&self, refill: &Refill) -> Option<Instant> {
        match self.entries().get(refill) {
            Some(f) if f.open.is_empty() => Some(f.last_end),
            Some(_) => None,
            None => Some(Instant::now()),
        }
    }
}
