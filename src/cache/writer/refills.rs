//! What dropped cache sessions tell the refill thread (`clients::refill`), and which answers
//! reached the writer whole since, so that a drop a later answer made needless is not fetched
//! again.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
}

/// The cache queue's side of the refills, cloned into every connection thread.
#[derive(Clone)]
pub(crate) struct RefillTx {
    tx: Sender<Dropped>,
    ledger: Arc<Ledger>,
}

impl RefillTx {
    /// The order of a session beginning now, among all sessions that may be refilled.
    pub(crate) fn begun(&self) -> u64 {
        self.ledger.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The answer to `refill` of the session begun at `since` reached the writer whole.
    pub(crate) fn whole(&self, refill: &Refill, since: u64) {
        self.ledger.whole(refill, since);
    }

    /// The answer to `refill` of the session begun at `since` was dropped: fetch it again.
    /// False when the refill queue is full.
    pub(crate) fn dropped(&self, refill: Refill, since: u64) -> bool {
        self.ledger.follow(&refill);
        self.tx.try_send(Dropped { refill, since }).is_ok()
    }

    /// Whether an answer to `refill` that began at or after `since` reached the writer whole.
    pub(crate) fn brought(&self, refill: &Refill, since: u64) -> bool {
        self.ledger.brought(refill, since)
    }
}

/// For each request with a dropped answer, the latest session since then whose answer reached
/// the writer whole. Empty until the first drop: a whole answer then costs one atomic load.
#[derive(Default)]
struct Ledger {
    next: AtomicU64,
    any: AtomicBool,
    /// Request → the `since` of its latest whole answer (0: none seen yet).
    latest_whole: Mutex<HashMap<Refill, u64>>,
}

impl Ledger {
    fn entries(&self) -> MutexGuard<'_, HashMap<Refill, u64>> {
        self.latest_whole
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes the whole answers to `refill` from now on.
    fn follow(&self, refill: &Refill) {
        let mut entries = self.entries();
        if !entries.contains_key(refill) {
            if entries.len() >= LEDGER_CAP {
                entries.clear();
            }
            entries.insert(refill.clone(), 0);
        }
        self.any.store(true, Ordering::Release);
    }

    fn whole(&self, refill: &Refill, since: u64) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        if let Some(latest) = self.entries().get_mut(refill) {
            *latest = (*latest).max(since);
        }
    }

    fn brought(&self, refill: &Refill, since: u64) -> bool {
        self.entries()
            .get(refill)
            .is_some_and(|&latest| latest >= since)
    }
}
