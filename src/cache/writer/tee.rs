//! The tee's side of the cache: connection threads copy response bodies into a bounded
//! channel ([`CacheTx`], [`Session`]) and never wait for the disk; the refill thread sends
//! at the disk's pace. Nothing here decodes or touches the store (a small get's answer stored
//! already is proven by `identical.rs`, [`CacheTx::stored_already`]).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::identical::Direct;
use super::refills::{Refill, RefillTx};
use crate::cache::grants::Grants;
use crate::cache::key::CollectionKey;
use crate::cache::relist::Relist;
use crate::cache::synced::Word;
use crate::cache::target::CacheTarget;
use crate::metrics::{METRICS, Metrics};

/// Messages from connection threads to the writer.
pub(crate) enum CacheMsg {
    /// A response to persist begins.
    Begin {
        /// Session id.
        id: u64,
        /// What to persist (behind a pointer: the queue's slots are all allocated and written
        /// when it is made, so each byte of a message costs the queue's length in resident
        /// memory; shared: the route's own, not a copy of it).
        target: Arc<CacheTarget>,
        /// HTTP status of the answer.
        status: u16,
        /// The body is gzip-encoded.
        gzip: bool,
        /// As of when the body is the cloud's word (`cache/synced.rs`).
        word: Word,
        /// Set by the connection thread when it gives the session up.
        abandoned: Arc<AtomicBool>,
        /// What the body is a function of ([`Session::reproducible`]); `None`: unknown.
        form: Option<u64>,
        /// For a list of a known `form`: set by the writer once it needs no more of the body
        /// (the list is proven unchanged, `unchanged.rs`), and the session then stops
        /// copying it. `None`: the writer reads it all.
        enough: Option<Arc<AtomicBool>>,
    },
    /// The next bytes of that response's body.
    Chunk {
        /// Session id.
        id: u64,
        /// Body bytes, in order.
        data: Vec<u8>,
    },
    /// The body ended; `complete` is false when it broke off.
    End {
        /// Session id.
        id: u64,
        /// The body arrived whole.
        complete: bool,
    },
    /// A whole answer in one message: what `Begin`, one `Chunk` and a complete `End` would
    /// say. A small answer read whole is handed over once (three messages cost the writer
    /// three wake-ups, and the connection thread three sends).
    Whole {
        /// What to persist (behind a pointer: the queue's slots are all allocated and written
        /// when it is made, so each byte of a message costs the queue's length in resident
        /// memory; shared: the route's own, not a copy of it).
        target: Arc<CacheTarget>,
        /// HTTP status of the answer.
        status: u16,
        /// The body is gzip-encoded.
        gzip: bool,
        /// As of when the body is the cloud's word (`cache/synced.rs`).
        word: Word,
        /// What the body is a function of ([`Session::reproducible`]); `None`: unknown.
        form: Option<u64>,
        /// The whole body.
        body: Vec<u8>,
    },
    /// One whole object to store: the hub's own lease as the cloud took it (never a client's
    /// object: nothing a client sends is stored).
    Put {
        /// Where it belongs (boxed, as [`CacheMsg::Begin`]'s target).
        collection: Box<CollectionKey>,
        /// The object's JSON.
        bytes: Vec<u8>,
    },
    /// The read grants changed: write them (`cache/grants.rs`). At most one is queued.
    Grants(Arc<Grants>),
    /// Acknowledged once every message before it was handled: messages are handled in
    /// order, so the ack means a session's earlier chunks are applied (a resumable watch's
    /// difference reads the store only after the events it delivered are on it).
    Barrier(Sender<()>),
}

/// The bounds shared by senders and the writer: messages waiting in the channel, and their
/// body bytes whatever the chunk sizes are.
///
/// The channel itself is crossbeam's unbounded one, bounded here: a bounded channel makes
/// and writes all its slots at once (1,024 of 72 bytes: 80 KiB resident from the start, on a
/// hub that is idle most of its life), the unbounded one a block of 31 as messages come.
pub(super) struct Queue {
    pub(super) queued_bytes: AtomicUsize,
    budget: usize,
    /// The most messages waiting.
    messages: usize,
    /// What the writer waits on when the channel is empty.
    pub(super) doorbell: Doorbell,
    /// Set by the writer while connection threads may take answers stored already
    /// themselves ([`Direct::allow`]); false until it starts.
    pub(super) direct: AtomicBool,
}

/// Wakes the writer when a message arrives while it waits. The writer blocks here rather than
/// in the channel's receive, which spins and then yields the CPU four times (crossbeam's
/// backoff) before it sleeps: once per answer when answers come one at a time, measured at 3
/// `sched_yield` per small get. A sender rings only when the writer waits: one atomic load
/// otherwise.
///
/// Small answers are handed over in batches: after the writer has emptied the queue it first
/// lingers ([`Doorbell::linger`], [`LINGER`]) and only then sleeps. While it lingers a sender
/// of a small answer does not ring (no futex call, no wake-up per answer: under load many
/// answers ride one wake-up); a sender rings at once for what must not wait — a large or
/// streaming session's bytes, its end, a barrier, a queue half full — and always when the
/// writer sleeps with nothing pending.
#[derive(Default)]
pub(super) struct Doorbell {
    /// [`BUSY`], [`LINGERING`] or [`ASLEEP`].
    state: AtomicU8,
    /// Set by a sender of an urgent message; cuts a linger short.
    urgent: AtomicBool,
    rung: Mutex<bool>,
    bell: Condvar,
    /// Times a sender woke the writer (for the tests of batching).
    #[cfg(test)]
    pub(super) rings: AtomicU64,
}

/// The writer handles messages: nobody rings.
const BUSY: u8 = 0;
/// The writer waits a short window for more small answers: only urgent sends ring.
const LINGERING: u8 = 1;
/// The writer sleeps until a ring: every send rings.
const ASLEEP: u8 = 2;

/// How long the writer waits for more answers after emptying the queue before it sleeps.
/// 2 ms gathers tens of small answers per wake-up at thousands of gets per second (16
/// clients), costs the writer at most 500 timed wake-ups a second under load, and delays a
/// small answer's copy on disk by no more than a client could notice: the cache serves
/// only after the link is lost. Everything urgent cuts it short.
pub(super) const LINGER: Duration = Duration::from_millis(2);

impl Doorbell {
    /// After a send: wakes the writer if it sleeps, or if it lingers and `urgent`.
    fn ring(&self, urgent: bool) {
        if urgent {
            self.urgent.store(true, Ordering::SeqCst);
        }
        // SeqCst here and in `wait`/`linger`: either the writer sees the message (or the
        // urgent mark), or this sees it waiting (and then takes the lock, which the writer
        // holds until it sleeps).
        let state = self.state.load(Ordering::SeqCst);
        if state == ASLEEP || (urgent && state == LINGERING) {
            *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
            self.bell.notify_one();
            #[cfg(test)]
            self.rings.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sleeps until a ring or `timeout`, unless `ready` says a message is already there.
    pub(super) fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        self.sleep(ASLEEP, timeout, ready);
    }

    /// Waits up to `window` for more messages, woken early only by an urgent send (or a
    /// queue half full). Messages sent meanwhile are handled after it, all in one go.
    pub(super) fn linger(&self, window: Duration) {
        self.sleep(LINGERING, window, || self.urgent.load(Ordering::SeqCst));
    }

    fn sleep(&self, state: u8, timeout: Duration, ready: impl Fn() -> bool) {
        let mut rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        self.state.store(state, Ordering::SeqCst);
        if !*rung && !ready() {
            // A spurious wake-up only sends the writer round its loop once more.
            rung = self
                .bell
                .wait_timeout(rung, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *rung = false;
        self.state.store(BUSY, Ordering::SeqCst);
        // Whatever was urgent is in the channel now, and the writer drains it next.
        self.urgent.store(false, Ordering::SeqCst);
    }
}

/// What a sent message is, for whether it may wait for the writer's next round.
#[derive(PartialEq, Eq)]
enum Kind {
    /// A small answer read whole, or one object: may ride the next batch.
    Small,
    /// Anything else: a session's bytes or end, grants, a barrier.
    Other,
}

/// How a sender behaves when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Give up at once: a client is waiting (connection threads).
    NeverWait,
    /// Wait for room: nobody is waiting (the refill thread), so it goes at the disk's pace.
    Wait,
}

/// The longest a paced sender waits for room before it gives up.
const PACED_PATIENCE: Duration = Duration::from_secs(120);

impl Queue {
    /// Whether `tx` holds as many messages as the queue takes.
    fn full(&self, tx: &Sender<CacheMsg>) -> bool {
        tx.len() >= self.messages
    }

    /// Waits until `room` (polled: only a paced sender or a barrier waits, and only when the
    /// writer is that far behind), up to `patience`; at once with None.
    fn wait_for(room: impl Fn() -> bool, patience: Option<Duration>) -> bool {
        let mut deadline = None;
        while !room() {
            let Some(patience) = patience else {
                return false;
            };
            let now = std::time::Instant::now();
            if now >= *deadline.get_or_insert(now + patience) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Queues `msg` on `tx`. With [`Pace::NeverWait`] it gives up at once when the channel
    /// or the byte budget is full; with [`Pace::Wait`] it waits for room, up to a bound.
    fn send(&self, tx: &Sender<CacheMsg>, msg: CacheMsg, pace: Pace) -> bool {
        let len = msg.payload_len();
        let kind = match msg {
            CacheMsg::Whole { .. } | CacheMsg::Put { .. } => Kind::Small,
            _ => Kind::Other,
        };
        let patience = (pace == Pace::Wait).then_some(PACED_PATIENCE);
        // Senders race, so either bound can be overshot by one message per sender: still
        // bounded.
        let room =
            || self.queued_bytes.load(Ordering::Relaxed) + len <= self.budget && !self.full(tx);
        if !Queue::wait_for(room, patience) {
            return false;
        }
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        // Never fails while a receiver lives (the channel is unbounded); false once the
        // writer is gone.
        let sent = tx.send(msg).is_ok();
        if sent {
            METRICS
                .cache_writer_queue_depth
                .fetch_add(1, Ordering::Relaxed);
            self.doorbell.ring(self.urgent(tx, &kind));
        } else {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
        }
        sent
    }

    /// Whether a message just sent must wake a lingering writer: anything but a small
    /// answer or object, and anything once the queue is half full (the writer then has
    /// enough to do, and senders must not find it full).
    fn urgent(&self, tx: &Sender<CacheMsg>, kind: &Kind) -> bool {
        *kind == Kind::Other
            || tx.len() * 2 >= self.messages
            || self.queued_bytes.load(Ordering::Relaxed) * 2 >= self.budget
    }
}

impl Queue {
    /// Queues a message that carries no bytes, waiting up to `wait` for room in the channel
    /// (the byte budget does not apply: it adds none).
    fn send_within(&self, tx: &Sender<CacheMsg>, msg: CacheMsg, wait: Duration) -> bool {
        debug_assert_eq!(msg.payload_len(), 0);
        let sent = Queue::wait_for(|| !self.full(tx), Some(wait)) && tx.send(msg).is_ok();
        if sent {
            METRICS
                .cache_writer_queue_depth
                .fetch_add(1, Ordering::Relaxed);
            // Nothing sent without a payload can wait: a barrier's sender waits for its ack.
            self.doorbell.ring(true);
        }
        sent
    }
}

impl CacheMsg {
    pub(super) fn payload_len(&self) -> usize {
        match self {
            CacheMsg::Chunk { data, .. } => data.len(),
            CacheMsg::Put { bytes, .. } => bytes.len(),
            CacheMsg::Whole { body, .. } => body.len(),
            CacheMsg::Begin { .. }
            | CacheMsg::End { .. }
            | CacheMsg::Grants(_)
            | CacheMsg::Barrier(_) => 0,
        }
    }
}

/// The sending side, cloned into every connection thread.
#[derive(Clone)]
pub(crate) struct CacheTx {
    tx: Sender<CacheMsg>,
    queue: Arc<Queue>,
    next_id: Arc<AtomicU64>,
    /// Where responses dropped for a full queue are sent to be fetched again.
    refills: Option<RefillTx>,
    /// The collections to relist when a watch of them begins (`cache/relist.rs`).
    relist: Option<Arc<Relist>>,
    /// Proves small gets' answers stored already without the writer (`identical.rs`).
    direct: Option<Arc<Direct>>,
}

/// The writer's side of the queue.
pub(crate) struct CacheRx {
    pub(super) rx: Receiver<CacheMsg>,
    pub(super) queue: Arc<Queue>,
}

/// Creates the queue: at most `messages` messages holding at most `budget` body bytes.
pub(crate) fn channel(messages: usize, budget: usize) -> (CacheTx, CacheRx) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let queue = Arc::new(Queue {
        queued_bytes: AtomicUsize::new(0),
        budget,
        messages,
        doorbell: Doorbell::default(),
        direct: AtomicBool::new(false),
    });
    (
        CacheTx {
            tx,
            queue: Arc::clone(&queue),
            next_id: Arc::new(AtomicU64::new(1)),
            refills: None,
            relist: None,
            direct: None,
        },
        CacheRx { rx, queue },
    )
}

/// The scope a watch's refill lists (its namespace and selectors, never its
/// resourceVersion), as the relist marks' thrash guard tells scopes apart.
fn scope_of(refill: &Refill) -> String {
    let request = &refill.request;
    let namespace = match &request.target {
        crate::request::Target::Resource(path) => path.namespace.as_deref(),
        crate::request::Target::NonResource(_) => None,
    };
    format!(
        "{:?} {:?} {:?}",
        namespace, request.query.label_selector, request.query.field_selector
    )
}

/// Bytes a list or get session gathers before handing them to the writer: fewer, larger
/// messages. Watch sessions send each read at once, so an event is on disk promptly.
const COALESCE: usize = 32 * 1024;

impl CacheTx {
    /// Sends responses dropped for a full queue to `refills` from now on.
    pub(crate) fn with_refills(mut self, refills: RefillTx) -> CacheTx {
        self.refills = Some(refills);
        self
    }

    /// Hands a watch's refill to the refill thread at once when its collection is marked
    /// for a relist (`cache/relist.rs`) from now on.
    pub(crate) fn with_relist(mut self, relist: Arc<Relist>) -> CacheTx {
        self.relist = Some(relist);
        self
    }

    /// Proves small gets' answers stored already with `direct` from now on, without the
    /// writer ([`CacheTx::stored_already`]).
    pub(crate) fn with_direct(mut self, direct: Direct) -> CacheTx {
        self.direct = Some(Arc::new(direct));
        self
    }

    /// Whether the whole answer `body` of `status` to `target` (a small get's, read whole) is
    /// stored exactly so already and was accounted for here (`identical.rs`): then it needs
    /// no session, and the writer never sees it. Only while the writer allows it, and while
    /// no refill ledger must hear of the answer (it follows none).
    pub(crate) fn stored_already(
        &self,
        target: &CacheTarget,
        status: u16,
        gzip: bool,
        body: &[u8],
    ) -> bool {
        let Some(direct) = &self.direct else {
            return false;
        };
        self.queue.direct.load(Ordering::Acquire)
            && self.refills.as_ref().is_none_or(|tx| !tx.following())
            && direct.took(target, (status, gzip), body)
    }

    /// Starts persisting a response, or None when the queue is full right now. `refill`
    /// says how to fetch it again should the session be dropped for a full queue; for a
    /// watch of a collection marked for a relist it is also handed over at once (at most
    /// once per collection per [`REFILL_EVERY`](crate::cache::relist::REFILL_EVERY)).
    pub(crate) fn begin(
        &self,
        target: impl Into<Arc<CacheTarget>>,
        status: u16,
        gzip: bool,
        refill: Option<Refill>,
    ) -> Option<Session> {
        let target = target.into();
        let streaming = matches!(*target, CacheTarget::Watch { .. });
        let refill = refill.and_then(|refill| {
            let tx = self.refills.clone()?;
            // In flight, for the ledger, until the session ends (its `Drop` at the latest).
            let since = tx.open(&refill, streaming);
            Some(Box::new(Refillable {
                tx,
                refill,
                since,
                handed: false,
            }))
        });
        if let (CacheTarget::Watch { collection }, Some(relist), Some(r), 200) =
            (&*target, &self.relist, &refill, status)
            && let Some(due) = relist.refill_due(collection, &scope_of(&r.refill), Instant::now())
        {
            // Its own place in the ledger, after the watch's: the watch's end, whole, must
            // not count as the relist.
            let handed = r.tx.relist(r.refill.clone());
            log::info!(
                "cache: {}/{} is marked for a relist ({}): {}",
                collection.component,
                collection.dir_name(),
                due.reason.as_str(),
                if handed {
                    "its watch began, the refill lists its scope"
                } else {
                    "the refill queue is full; the next watch lists it"
                }
            );
            if handed {
                relist.handed(due, Instant::now());
            }
        }
        self.start(target, status, gzip, Pace::NeverWait, refill, Word::Cloud)
    }

    /// [`CacheTx::begin`] for a small answer read whole, whose refill is made only if it is
    /// wanted (`make`, from the request's path and query as sent, `sent_as`): when the
    /// session is dropped for a full queue, or when the ledger follows requests (then now,
    /// as `begin` would). Most small gets are never dropped, and their refill (a copy of
    /// the classified request and the target) was made and freed for nothing. Finish it
    /// with [`Session::finish_refilling`].
    pub(crate) fn begin_deferred(
        &self,
        target: Arc<CacheTarget>,
        status: u16,
        gzip: bool,
        sent_as: &str,
        make: impl FnOnce(String) -> Option<Refill>,
    ) -> Option<Session> {
        let Some(tx) = self.refills.as_ref().filter(|tx| !tx.following()) else {
            return self.begin(target, status, gzip, make(sent_as.to_owned()));
        };
        let since = tx.begun();
        let Some(mut session) =
            self.start(target, status, gzip, Pace::NeverWait, None, Word::Cloud)
        else {
            // Dropped at its start (the queue is full): fetched again, as `begin`'s would be.
            if let Some(refill) = make(sent_as.to_owned()) {
                tx.dropped(refill.clone(), since, false);
                tx.ended(&refill, since);
            }
            return None;
        };
        session.deferred = Some(Deferred {
            tx: tx.clone(),
            since,
            sent_as: sent_as.to_owned(),
        });
        Some(session)
    }

    /// [`CacheTx::begin`] for an answer relayed from a pool cache rather than the cloud:
    /// `word` says as of when it is the cloud's (that cache's own last sync). Never refilled:
    /// the pool cache answers it again.
    pub(crate) fn begin_relayed(
        &self,
        target: impl Into<Arc<CacheTarget>>,
        status: u16,
        gzip: bool,
        word: Word,
    ) -> Option<Session> {
        self.start(target.into(), status, gzip, Pace::NeverWait, None, word)
    }

    /// Starts persisting a response that no client waits for: every send waits for room.
    pub(crate) fn begin_paced(
        &self,
        target: impl Into<Arc<CacheTarget>>,
        status: u16,
        gzip: bool,
    ) -> Option<Session> {
        self.start(target.into(), status, gzip, Pace::Wait, None, Word::Cloud)
    }

    fn start(
        &self,
        target: Arc<CacheTarget>,
        status: u16,
        gzip: bool,
        pace: Pace,
        refill: Option<Box<Refillable>>,
        word: Word,
    ) -> Option<Session> {
        let streaming = matches!(*target, CacheTarget::Watch { .. });
        let mut session = Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            tx: self.tx.clone(),
            queue: Arc::clone(&self.queue),
            unsent: Some(Start {
                target,
                status,
                gzip,
                word,
                form: None,
            }),
            abandoned: None,
            enough: None,
            done: false,
            streaming,
            pending: Vec::new(),
            pace,
            refill,
            deferred: None,
        };
        // A watch's events go to disk as they come: its writer session starts now. Any other
        // answer starts with its first chunk, or goes whole in one message when it is small.
        // A client's answer is not begun when the queue is full now.
        let begun = if streaming {
            session.send_begin()
        } else {
            pace == Pace::Wait || !self.queue.full(&self.tx)
        };
        if !begun {
            session.abandon();
            return None;
        }
        Some(session)
    }

    /// Stores one whole object; false when the queue is full.
    pub(crate) fn put(&self, collection: CollectionKey, bytes: Vec<u8>) -> bool {
        self.queue.send(
            &self.tx,
            CacheMsg::Put {
                collection: Box::new(collection),
                bytes,
            },
            Pace::NeverWait,
        )
    }

    /// Has the writer write the read grants; false when the queue is full.
    pub(crate) fn persist_grants(&self, grants: Arc<Grants>) -> bool {
        self.queue
            .send(&self.tx, CacheMsg::Grants(grants), Pace::NeverWait)
    }
}

/// One response being persisted, owned by the connection thread that forwards it.
pub(crate) struct Session {
    id: u64,
    tx: Sender<CacheMsg>,
    queue: Arc<Queue>,
    /// The session's start, until sent: with the first chunk, or with the whole body.
    unsent: Option<Start>,
    /// Set once the writer has the session (`Begin` sent).
    abandoned: Option<Arc<AtomicBool>>,
    /// Set by the writer when it needs no more of the body (`CacheMsg::Begin`'s `enough`).
    enough: Option<Arc<AtomicBool>>,
    done: bool,
    streaming: bool,
    pending: Vec<u8>,
    pace: Pace,
    /// Boxed, as the start's target: a session is moved by value from its start to its
    /// relay, and most have none.
    refill: Option<Box<Refillable>>,
    /// A refill not made yet ([`CacheTx::begin_deferred`]).
    deferred: Option<Deferred>,
}

/// What a deferred refill is made with: the refill queue, the session's order
/// ([`RefillTx::begun`]) and the request's path and query as sent.
struct Deferred {
    tx: RefillTx,
    since: u64,
    sent_as: String,
}

/// What a `Begin` says, held until it is sent.
struct Start {
    /// As the message carries it.
    target: Arc<CacheTarget>,
    status: u16,
    gzip: bool,
    word: Word,
    /// [`Session::reproducible`].
    form: Option<u64>,
}

/// How a session's answer is fetched again should it be dropped.
struct Refillable {
    tx: RefillTx,
    refill: Refill,
    /// When the session began ([`RefillTx::open`]).
    since: u64,
    /// Handed to the refill thread already (dropped for a full queue).
    handed: bool,
}

impl Session {
    /// Says what the body is a function of: the cloud's answer alone, as sent (`form` 0),
    /// or rewritten by filters that read nothing but the object and fixed settings (`form`
    /// names the rewrite, [`Chain::reproducible_form`](crate::filters::Chain::reproducible_form)).
    /// Two such answers of one list at one resourceVersion with one form are the same, so a
    /// list may be proven unchanged by its resourceVersion (`unchanged.rs`), and the session
    /// then stops copying what the writer will not read. Called before the first chunk;
    /// later it changes nothing.
    pub(crate) fn reproducible(&mut self, form: u64) {
        if let Some(start) = self.unsent.as_mut() {
            start.form = Some(form);
        }
    }

    /// Whether the writer said it needs no more of the body: what follows is not copied.
    fn enough(&self) -> bool {
        self.enough
            .as_ref()
            .is_some_and(|e| e.load(Ordering::Relaxed))
    }

    /// Copies `data` to the writer; false once the session is abandoned (queue full).
    pub(crate) fn chunk(&mut self, data: &[u8]) -> bool {
        if self.done {
            return false;
        }
        if self.enough() {
            // Proven unchanged: the rest is not read. Only the end still goes.
            self.pending = Vec::new();
            return true;
        }
        if self.streaming {
            return self.send_data(data.to_vec());
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(COALESCE.max(data.len()));
        }
        self.pending.extend_from_slice(data);
        if self.pending.len() >= COALESCE {
            let data = std::mem::take(&mut self.pending);
            return self.send_data(data);
        }
        true
    }

    /// Hands over a whole buffer (a small answer) without copying it.
    pub(crate) fn chunk_owned(&mut self, data: Vec<u8>) -> bool {
        if self.done {
            return false;
        }
        if self.enough() {
            self.pending = Vec::new();
            return true;
        }
        if self.pending.is_empty() {
            // Held for `finish`, which sends it with the start as one message.
            if self.unsent.is_some() && !self.streaming && data.len() < COALESCE {
                self.pending = data;
                return true;
            }
            return self.send_data(data);
        }
        self.chunk(&data)
    }

    /// Sends the session's `Begin`; false when the queue is full.
    fn send_begin(&mut self) -> bool {
        let Some(Start {
            target,
            status,
            gzip,
            word,
            form,
        }) = self.unsent.take()
        else {
            return true;
        };
        let abandoned = Arc::new(AtomicBool::new(false));
        self.abandoned = Some(Arc::clone(&abandoned));
        // Only a list can be proven unchanged (and only one of a known form).
        let enough = (form.is_some() && matches!(*target, CacheTarget::List { .. }))
            .then(|| Arc::new(AtomicBool::new(false)));
        self.enough = enough.clone();
        let msg = CacheMsg::Begin {
            id: self.id,
            target,
            status,
            gzip,
            word,
            abandoned,
            form,
            enough,
        };
        self.queue.send(&self.tx, msg, self.pace)
    }

    fn send_data(&mut self, data: Vec<u8>) -> bool {
        if !self.send_begin()
            || !self
                .queue
                .send(&self.tx, CacheMsg::Chunk { id: self.id, data }, self.pace)
        {
            self.abandon();
            return false;
        }
        true
    }

    /// The session was given up (the queue was full): nothing more reaches the writer.
    pub(crate) fn dropped(&self) -> bool {
        self.done
    }

    /// Hands what is pending to the writer and waits until it handled every message this
    /// session sent so far (the body's bytes are then applied to the store); false when
    /// `wait` passed first, or the session is abandoned or over.
    pub(crate) fn sync(&mut self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        if self.done
            || self
                .abandoned
                .as_ref()
                .is_some_and(|a| a.load(Ordering::Acquire))
        {
            return false;
        }
        if !self.pending.is_empty() && !self.enough() {
            let data = std::mem::take(&mut self.pending);
            if !self.send_data(data) {
                return false;
            }
        } else if !self.send_begin() {
            self.abandon();
            return false;
        }
        let (ack, acked) = crossbeam_channel::bounded(1);
        if !self
            .queue
            .send_within(&self.tx, CacheMsg::Barrier(ack), wait)
        {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        acked.recv_timeout(left).is_ok()
    }

    /// The body is over: whole (`complete`) or broken off.
    pub(crate) fn finish(self, complete: bool) {
        self.finish_refilling(complete, |_| None);
    }

    /// [`Session::finish`] for a session begun by [`CacheTx::begin_deferred`]: `make` makes
    /// its refill (from the path and query as sent) when it is wanted after all: the answer
    /// was dropped for a full queue, or the ledger now follows requests and must hear it
    /// went whole.
    pub(crate) fn finish_refilling(
        mut self,
        complete: bool,
        make: impl FnOnce(String) -> Option<Refill>,
    ) {
        if self.done {
            return;
        }
        self.done = true;
        let sent = match self.unsent.take() {
            // Nothing reached the writer: a broken-off body leaves nothing to undo.
            Some(_) if !complete => return,
            Some(Start {
                target,
                status,
                gzip,
                word,
                form,
            }) => {
                let body = std::mem::take(&mut self.pending);
                let msg = CacheMsg::Whole {
                    target,
                    status,
                    gzip,
                    word,
                    form,
                    body,
                };
                self.queue.send(&self.tx, msg, self.pace)
            }
            None => {
                if complete && !self.pending.is_empty() && !self.enough() {
                    let data = std::mem::take(&mut self.pending);
                    if !self.send_data(data) {
                        return;
                    }
                }
                let msg = CacheMsg::End {
                    id: self.id,
                    complete,
                };
                self.queue.send(&self.tx, msg, self.pace)
            }
        };
        if let Some(d) = self.deferred.take()
            && (!sent || d.tx.following())
            && let Some(refill) = make(d.sent_as)
        {
            // Wanted after all: the session goes on as one begun with it, not counted in
            // flight by the ledger (it followed no request when it began).
            self.refill = Some(Box::new(Refillable {
                tx: d.tx,
                refill,
                since: d.since,
                handed: false,
            }));
        }
        if !sent {
            self.abandon();
        } else if complete && let Some(r) = self.refill.take() {
            // Whole in the queue: a drop of the same request begun before is made needless.
            r.tx.whole(&r.refill, r.since);
        }
        // Otherwise the session's end is told by its `Drop`, right after.
    }

    fn abandon(&mut self) {
        self.done = true;
        let first = self
            .abandoned
            .as_ref()
            .is_none_or(|a| !a.swap(true, Ordering::AcqRel));
        if first {
            Metrics::inc(&METRICS.cache_sessions_abandoned);
            // The answer is still wanted on disk: have it fetched again at the disk's pace.
            // The session stays in flight for the ledger until its `Drop`: the client is
            // still being answered, and asks again only after.
            let refilled = self.refill.as_mut().is_some_and(|r| {
                if !r.handed {
                    r.handed = r.tx.dropped(r.refill.clone(), r.since, self.streaming);
                }
                r.handed
            });
            log::debug!(
                "cache session {} abandoned: the writer queue is full{}",
                self.id,
                if refilled {
                    "; it will be fetched again"
                } else {
                    ""
                }
            );
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Not whole (that took it): the answer's end, for the ledger of refills.
        if let Some(r) = self.refill.take() {
            r.tx.ended(&r.refill, r.since);
        }
        if self.done {
            return;
        }
        // The connection thread gave up (client gone, error) without finishing: the writer
        // drops what it staged, if it has the session at all.
        self.done = true;
        if let Some(abandoned) = &self.abandoned
            && !self.queue.send(
                &self.tx,
                CacheMsg::End {
                    id: self.id,
                    complete: false,
                },
                Pace::NeverWait,
            )
        {
            abandoned.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::key::CollectionKey;

    fn whole(name: &str) -> CacheMsg {
        CacheMsg::Whole {
            target: Arc::new(CacheTarget::Object {
                collection: CollectionKey::new("kubelet", "configmaps", "v1", ""),
                namespace: Some("ns".into()),
                name: Some(name.into()),
            }),
            status: 200,
            gzip: false,
            word: Word::Cloud,
            form: None,
            body: b"{}".to_vec(),
        }
    }

    fn rings(queue: &Queue) -> u64 {
        queue.doorbell.rings.load(Ordering::Relaxed)
    }

    #[test]
    fn a_lingering_writer_is_woken_by_a_half_full_queue_and_by_urgent_messages_only() {
        let (tx, rx) = channel(8, 1 << 20);
        let queue = &rx.queue;
        queue.doorbell.state.store(LINGERING, Ordering::SeqCst);
        for name in ["a", "b", "c"] {
            assert!(queue.send(&tx.tx, whole(name), Pace::NeverWait));
        }
        assert_eq!(rings(queue), 0, "small answers ride the next batch");
        assert!(queue.send(&tx.tx, whole("d"), Pace::NeverWait));
        assert_eq!(rings(queue), 1, "a half full queue wakes it at once");
        // A session's bytes wake it at once, whatever the queue holds.
        while rx.rx.try_recv().is_ok() {}
        let chunk = CacheMsg::Chunk {
            id: 1,
            data: vec![b' '; 10],
        };
        assert!(queue.send(&tx.tx, chunk, Pace::NeverWait));
        assert_eq!(rings(queue), 2);
        // Asleep, any message wakes it; busy, none does.
        queue.doorbell.state.store(ASLEEP, Ordering::SeqCst);
        assert!(queue.send(&tx.tx, whole("e"), Pace::NeverWait));
        assert_eq!(rings(queue), 3);
        queue.doorbell.state.store(BUSY, Ordering::SeqCst);
        assert!(queue.send(&tx.tx, whole("f"), Pace::NeverWait));
        assert_eq!(rings(queue), 3);
    }

    #[test]
    fn the_queue_takes_as_many_messages_as_it_is_made_for_and_a_paced_sender_waits_for_room() {
        let (tx, rx) = channel(2, 1 << 20);
        let queue = &rx.queue;
        assert!(queue.send(&tx.tx, whole("a"), Pace::NeverWait));
        assert!(queue.send(&tx.tx, whole("b"), Pace::NeverWait));
        assert!(
            !queue.send(&tx.tx, whole("c"), Pace::NeverWait),
            "a client's answer is not queued past the bound"
        );
        assert!(
            !queue.send_within(
                &tx.tx,
                CacheMsg::Barrier(crossbeam_channel::bounded(1).0),
                Duration::from_millis(20)
            ),
            "a barrier waits for room, then gives up"
        );
        // A paced sender (the refill thread) waits until the writer takes one.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                rx.rx.recv().expect("a message");
            });
            assert!(queue.send(&tx.tx, whole("d"), Pace::Wait));
        });
        assert_eq!(rx.rx.len(), 2);
    }

    #[test]
    fn an_urgent_send_just_before_a_linger_cuts_it_short() {
        let (tx, rx) = channel(8, 1 << 20);
        let chunk = CacheMsg::Chunk {
            id: 1,
            data: vec![b' '; 10],
        };
        // Sent while the writer is busy: no ring, but the linger must not sleep past it.
        assert!(rx.queue.send(&tx.tx, chunk, Pace::NeverWait));
        let started = Instant::now();
        rx.queue.doorbell.linger(Duration::from_secs(30));
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

#[cfg(test)]
mod size_tests {
    use super::CacheMsg;

    /// The writer's queue holds blocks of 31 messages while they wait (it held 1,024 slots
    /// from the start, 240 bytes each before the targets were boxed).
    #[test]
    fn a_queued_message_is_small() {
        let size = std::mem::size_of::<CacheMsg>();
        assert!(size <= 80, "CacheMsg is {size} bytes");
    }

    /// A session is moved by value from its start to the relay that finishes it, once per
    /// cached answer: its start's target and its refill are boxed (616 bytes before).
    #[test]
    fn a_session_is_small() {
        let size = std::mem::size_of::<super::Session>();
        assert!(size <= 256, "Session is {size} bytes");
    }
}
