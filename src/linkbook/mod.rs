//! The link totals that survive restarts: what the cloud link carried (and what gzip and the
//! pool saved it) per (component, resource, verb), for the node's lifetime, today, this month,
//! the last 35 days and the last 13 months, kept in `<root-dir>/link-totals.json`.
//!
//! `link` counts in memory since the process started (atomics, no lock on the request path);
//! the [`Book`] folds their change since its last look in ([`Book::absorb`]), by UTC day. The
//! `linkbook` thread does that every 60 s and writes the file only when something changed;
//! the drain does it once more. A read (`/v1/link`, `/metrics`) folds the live change into a
//! copy, so it is exact without writing.
//!
//! Flash: at most 60 writes an hour while anything moves (lease renewals move it every 10 s)
//! and one at exit; each one file of at most 64 KiB at the caps (about 10 KB for a node's 45
//! keys), a rename and a directory sync. A `kill -9` or a power cut loses at most the last
//! interval.
//!
//! The clock: a clock before 2020 (a board without RTC, before NTP) adds to the last day
//! counted, or, on a first start, waits (the counts stay in `link`, nothing is lost) until
//! the clock is set: `since` is the first count with a sane clock. A clock a day or less
//! behind the last day counted adds to that day; one further behind is followed (a clock
//! that was once far ahead does not pin the counts to its future day).
//!
//! Memory and the file: at most [`MAX_TOTALS`] keys (plus `_other`) in each of lifetime,
//! today and month, and [`COMPONENTS`] components (plus `_other`) in each of 35 days and 13
//! months; counts stop at 2^53 − 1 (what every JSON reader keeps exact); labels are at most
//! 32 bytes needing no escape. A lifetime key not counted for 13 months goes to `_other`, so
//! clients that change their names cannot fill the keys for good. At the caps the file is
//! under 64 KiB (a unit test builds the largest one).

mod file;
mod render;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::link::{self, LINK, MAX_TOTALS, OTHER, Totals};
use crate::lock;
use crate::logging::civil_from_days;
#[cfg(test)]
use crate::logging::days_from_civil;

pub(crate) use render::{render_json, render_series};

/// The file's name in `--root-dir`.
pub(crate) const FILE_NAME: &str = "link-totals.json";

/// Days kept per component.
pub(crate) const DAYS: usize = 35;

/// Months kept per component.
pub(crate) const MONTHS: usize = 13;

/// Components kept per day or month; more count as `_other` (the day and month history is
/// most of the file: 48 periods).
pub(crate) const COMPONENTS: usize = 4;

/// The largest count kept: 2^53 − 1, exact in every JSON reader.
pub(crate) const MAX_COUNT: u64 = (1 << 53) - 1;

/// 2020-01-01T00:00:00Z: a clock before it has not been set.
const EPOCH_2020: i64 = 1_577_836_800;

/// (component, resource, verb).
pub(crate) type Key = (String, String, String);

/// Rows of the totals table, in key order.
pub(crate) type Rows = Vec<(Key, Totals)>;

/// What is counted of one day or month, per component.
pub(crate) type ByComponent = BTreeMap<String, Totals>;

/// The totals on the books.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Book {
    /// When counting began (Unix seconds); `None` until a count with a clock after 2020.
    pub(crate) since: Option<i64>,
    /// When the file was last written (Unix seconds), if ever.
    pub(crate) written_at: Option<i64>,
    /// The day (days since 1970-01-01) of the last count: `today` and `month` are of it.
    pub(crate) last_day: Option<i64>,
    /// Since `since`.
    pub(crate) lifetime: BTreeMap<Key, Totals>,
    /// The day each lifetime key was last counted (not `_other`).
    pub(crate) last_seen: BTreeMap<Key, i64>,
    /// The day `last_day`.
    pub(crate) today: BTreeMap<Key, Totals>,
    /// The month of `last_day`.
    pub(crate) month: BTreeMap<Key, Totals>,
    /// The last [`DAYS`] days, by day number.
    pub(crate) days: BTreeMap<i64, ByComponent>,
    /// The last [`MONTHS`] months, by month number (year × 12 + month − 1).
    pub(crate) months: BTreeMap<i64, ByComponent>,
}

impl Book {
    /// Nothing counted yet, counting from `since` (`None`: from the first count).
    pub(crate) const fn new(since: Option<i64>) -> Book {
        Book {
            since,
            written_at: None,
            last_day: None,
            lifetime: BTreeMap::new(),
            last_seen: BTreeMap::new(),
            today: BTreeMap::new(),
            month: BTreeMap::new(),
            days: BTreeMap::new(),
            months: BTreeMap::new(),
        }
    }

    /// The day `now` counts on: its UTC day; the last day counted when the clock is before
    /// 2020 or at most a day behind it; `None` for a clock before 2020 and no day counted.
    pub(crate) fn day_for(&self, now: i64) -> Option<i64> {
        let day = now.div_euclid(86_400);
        match self.last_day {
            Some(last) if now < EPOCH_2020 || (day < last && day >= last - 1) => Some(last),
            None if now < EPOCH_2020 => None,
            _ => Some(day),
        }
    }

    /// Adds `delta` (what `link` counted since the last look) on the day `now` counts on: a
    /// new day empties `today`, a new month `month`; days and months past what is kept go,
    /// and lifetime keys not counted for 13 months go to `_other`. False, and nothing added,
    /// while the clock is before 2020 and no day was counted yet (the delta waits).
    pub(crate) fn absorb(&mut self, delta: &[(Key, Totals)], now: i64) -> bool {
        let Some(day) = self.day_for(now) else {
            return false;
        };
        if now >= EPOCH_2020 && self.since.is_none() {
            self.since = Some(now);
        }
        if let Some(last) = self.last_day
            && last != day
        {
            self.today.clear();
            if month_of(last) != month_of(day) {
                self.month.clear();
            }
            self.fold_unseen(day);
        }
        self.last_day = Some(day);
        for (key, totals) in delta {
            if totals.iter().all(|&n| n == 0) {
                continue;
            }
            // One decision for the three: today's and the month's keys are lifetime's.
            let key = if self.lifetime.contains_key(key)
                || self.lifetime.keys().filter(|k| k.0 != OTHER).count() < MAX_TOTALS
            {
                self.last_seen.insert(key.clone(), day);
                key.clone()
            } else {
                other_key()
            };
            add(self.lifetime.entry(key.clone()).or_default(), totals);
            add(self.today.entry(key.clone()).or_default(), totals);
            add(self.month.entry(key.clone()).or_default(), totals);
            add_component(self.days.entry(day).or_default(), &key.0, totals);
            add_component(
                self.months.entry(month_of(day)).or_default(),
                &key.0,
                totals,
            );
        }
        while self.days.len() > DAYS {
            self.days.pop_first();
        }
        while self.months.len() > MONTHS {
            self.months.pop_first();
        }
        true
    }

    /// Moves the lifetime keys last counted 13 months or more before `day` to `_other`.
    fn fold_unseen(&mut self, day: i64) {
        let oldest = month_of(day) - MONTHS as i64;
        let gone: Vec<Key> = self
            .last_seen
            .iter()
            .filter(|(_, seen)| month_of(**seen) <= oldest)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            self.last_seen.remove(&key);
            if let Some(totals) = self.lifetime.remove(&key) {
                add(self.lifetime.entry(other_key()).or_default(), &totals);
            }
        }
    }
}

/// The `_other` key.
fn other_key() -> Key {
    (OTHER.to_owned(), OTHER.to_owned(), OTHER.to_owned())
}

/// Adds `totals` to `component`'s row, or to `_other` once [`COMPONENTS`] are kept.
fn add_component(map: &mut ByComponent, component: &str, totals: &Totals) {
    let kept = map.keys().filter(|c| *c != OTHER).count();
    let component = if map.contains_key(component) || kept < COMPONENTS {
        component
    } else {
        OTHER
    };
    add(map.entry(component.to_owned()).or_default(), totals);
}

/// Adds `totals` to `row`, each count stopping at [`MAX_COUNT`].
fn add(row: &mut Totals, totals: &Totals) {
    for (a, b) in row.iter_mut().zip(totals) {
        *a = a.saturating_add(*b).min(MAX_COUNT);
    }
}

/// The month number of a day: year × 12 + month − 1.
pub(crate) fn month_of(day: i64) -> i64 {
    let (year, month, _) = civil_from_days(day);
    year * 12 + i64::from(month) - 1
}

/// `YYYY-MM-DD` of a day number.
pub(crate) fn date_of(day: i64) -> String {
    let (year, month, day) = civil_from_days(day);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `YYYY-MM` of a month number.
pub(crate) fn month_name(month: i64) -> String {
    format!(
        "{:04}-{:02}",
        month.div_euclid(12),
        month.rem_euclid(12) + 1
    )
}

/// The day number of the first day of a month number (for tests and the render).
#[cfg(test)]
fn first_day(month: i64) -> i64 {
    days_from_civil(month.div_euclid(12), (month.rem_euclid(12) + 1) as u32, 1)
}

/// `now` when the clock is set (after 2020).
fn sane(now: i64) -> Option<i64> {
    (now >= EPOCH_2020).then_some(now)
}

/// Unix seconds now (0 for a clock before 1970).
pub(crate) fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The book of the process and its file.
pub(crate) struct Linkbook {
    state: Mutex<State>,
    /// Held while a file is written: the thread's and the drain's writes never overlap.
    writing: Mutex<()>,
    /// Files written by this process.
    writes: AtomicU64,
    /// Bytes of the files written by this process.
    written_bytes: AtomicU64,
    /// The last write failed: the next failure is not warned about again.
    failing: AtomicBool,
}

struct State {
    book: Book,
    /// `link`'s totals at the last absorb.
    seen: BTreeMap<Key, Totals>,
    /// The file; `None` before [`Linkbook::open`] (then nothing is written).
    path: Option<PathBuf>,
    /// Something was absorbed that the file does not have.
    dirty: bool,
}

/// The process's book.
pub(crate) static BOOK: Linkbook = Linkbook::new();

impl Linkbook {
    /// Empty, with no file.
    pub(crate) const fn new() -> Linkbook {
        Linkbook {
            state: Mutex::new(State {
                book: Book::new(None),
                seen: BTreeMap::new(),
                path: None,
                dirty: false,
            }),
            writing: Mutex::new(()),
            writes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        }
    }

    /// Loads `<root_dir>/link-totals.json`. None there: counting starts now. One that
    /// cannot be read is renamed `.bad` with one warning, and counting starts afresh (the
    /// hub's job does not depend on it).
    pub(crate) fn open(&self, root_dir: &Path) {
        let path = root_dir.join(FILE_NAME);
        let book = match file::load(&path) {
            Ok(Some(book)) => book,
            Ok(None) => Book::new(sane(now_secs())),
            Err(why) => {
                let bad = path.with_extension("json.bad");
                let kept = match std::fs::rename(&path, &bad) {
                    Ok(()) => format!("kept as {}", bad.display()),
                    Err(e) => format!("cannot keep it as {}: {e}", bad.display()),
                };
                log::warn!(
                    "the link totals in {} cannot be read ({why}); {kept}; counting starts afresh",
                    path.display()
                );
                Book::new(sane(now_secs()))
            }
        };
        let mut state = lock(&self.state);
        state.book = book;
        state.path = Some(path);
    }

    /// `link`'s change since the last look, and the totals it is the change to.
    fn delta(seen: &BTreeMap<Key, Totals>) -> (Rows, Rows) {
        let live: Rows = LINK
            .totals()
            .into_iter()
            .map(|(c, r, v, t)| ((c, r, v.to_owned()), t))
            .collect();
        let delta = live
            .iter()
            .map(|(key, now)| {
                let before = seen.get(key).copied().unwrap_or_default();
                let d: Totals = std::array::from_fn(|i| now[i].saturating_sub(before[i]));
                (key.clone(), d)
            })
            .filter(|(_, d)| d.iter().any(|&n| n > 0))
            .collect();
        (delta, live)
    }

    /// The book as of now, the live counts folded into a copy.
    pub(crate) fn view(&self) -> Book {
        let state = lock(&self.state);
        let (delta, _) = Linkbook::delta(&state.seen);
        let mut book = state.book.clone();
        if !delta.is_empty() {
            // Before a sane clock the view has nothing yet: the counts wait in `link`.
            book.absorb(&delta, now_secs());
        }
        book
    }

    /// Folds the live counts in and writes the file when anything changed since it was last
    /// written (the `linkbook` thread every interval, and the drain).
    pub(crate) fn save(&self) {
        let _writing = lock(&self.writing);
        let (bytes, path, at) = {
            let mut state = lock(&self.state);
            let (delta, live) = Linkbook::delta(&state.seen);
            // Not absorbed (no sane clock yet): `seen` stays, the delta is taken next time.
            if !delta.is_empty() && state.book.absorb(&delta, now_secs()) {
                state.seen = live.into_iter().collect();
                state.dirty = true;
            }
            let Some(path) = state.path.clone().filter(|_| state.dirty) else {
                return;
            };
            let mut book = state.book.clone();
            let at = now_secs();
            book.written_at = Some(at);
            (file::encode(&book), path, at)
        };
        match file::write(&path, &bytes) {
            Ok(()) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.written_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let mut state = lock(&self.state);
                state.book.written_at = Some(at);
                state.dirty = false;
                if self.failing.swap(false, Ordering::Relaxed) {
                    log::info!("the link totals are written to {} again", path.display());
                }
            }
            // Tried again at the next interval; the counts stay in memory. One warning for a
            // run of failures (a full or read-only disk would otherwise say it every minute).
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => log::warn!(
                "cannot write the link totals to {}: {e}; counting goes on in memory",
                path.display()
            ),
            Err(e) => log::debug!("cannot write the link totals to {}: {e}", path.display()),
        }
    }

    /// Files written by this process and their bytes.
    pub(crate) fn writes(&self) -> (u64, u64) {
        (
            self.writes.load(Ordering::Relaxed),
            self.written_bytes.load(Ordering::Relaxed),
        )
    }
}

/// The `linkbook` thread: saves the book every `interval` until `stop` closes (the drain then
/// saves once more).
pub(crate) fn run(interval: Duration, stop: &crossbeam_channel::Receiver<()>) {
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
        BOOK.save();
    }
}

/// The series of `tinyhub_link_*` for `/metrics` (a `metrics::Source`).
pub(crate) fn series(out: &mut String) {
    let (writes, bytes) = BOOK.writes();
    render_series(&BOOK.view(), writes, bytes, out);
}

/// The verb names `link` counts, for the parse's check.
fn known_verb(verb: &str) -> bool {
    verb == OTHER || link::VERBS.contains(&verb)
}

#[cfg(test)]
mod tests;
