//! `link-totals.json`, version 1: one compact row per key (`[component, resource, verb,
//! lastSeenDay, lifetime, month, today]`, each of the three `[requests, up, down, downGzip,
//! gzipSaved, poolSaved]`: the key's labels once), written as a temp file (0600), synced,
//! renamed over the old one, and the directory synced: a crash leaves the old file or the
//! new one.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Book, ByComponent, Key, known_verb};
use crate::link::Totals;

/// The format this code writes and reads.
const VERSION: u32 = 1;

/// Largest file read: well above what the caps allow (a larger one is not ours).
const MAX_FILE: u64 = 1024 * 1024;

/// One (component, resource, verb) row: the day it was last counted, its lifetime, month and
/// today.
type Row = (String, String, String, Option<i64>, Totals, Totals, Totals);

/// One day or month: its number and its components.
type Period = (i64, Vec<(String, Totals)>);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileV1 {
    version: u32,
    since: Option<i64>,
    written_at: Option<i64>,
    last_day: Option<i64>,
    keys: Vec<Row>,
    days: Vec<Period>,
    months: Vec<Period>,
}

/// Why a file cannot be read.
#[derive(Debug)]
pub(super) struct Unreadable(String);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The file's bytes for `book`.
pub(super) fn encode(book: &Book) -> Vec<u8> {
    let of = |map: &BTreeMap<Key, Totals>, key: &Key| map.get(key).copied().unwrap_or_default();
    // Today's and the month's keys are lifetime's (`Book::absorb`).
    let keys = book
        .lifetime
        .iter()
        .map(|(key, lifetime)| {
            let (c, r, v) = key.clone();
            let seen = book.last_seen.get(key).copied();
            (
                c,
                r,
                v,
                seen,
                *lifetime,
                of(&book.month, key),
                of(&book.today, key),
            )
        })
        .collect();
    let periods = |map: &BTreeMap<i64, ByComponent>| -> Vec<Period> {
        map.iter()
            .map(|(at, by)| (*at, by.iter().map(|(c, t)| (c.clone(), *t)).collect()))
            .collect()
    };
    let file = FileV1 {
        version: VERSION,
        since: book.since,
        written_at: book.written_at,
        last_day: book.last_day,
        keys,
        days: periods(&book.days),
        months: periods(&book.months),
    };
    // Plain data (strings, integers, vectors): serializing it cannot fail.
    let mut bytes = serde_json::to_vec(&file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The book in `bytes`, or why not.
pub(super) fn decode(bytes: &[u8]) -> Result<Book, Unreadable> {
    let file: FileV1 =
        serde_json::from_slice(bytes).map_err(|e| Unreadable(format!("not version 1: {e}")))?;
    if file.version != VERSION {
        return Err(Unreadable(format!(
            "version {}, not {VERSION}",
            file.version
        )));
    }
    let periods = |periods: Vec<Period>| -> BTreeMap<i64, ByComponent> {
        periods
            .into_iter()
            .map(|(at, by)| (at, by.into_iter().collect()))
            .collect()
    };
    let mut book = Book::new(file.since);
    book.written_at = file.written_at;
    book.last_day = file.last_day;
    book.days = periods(file.days);
    book.months = periods(file.months);
    for (c, r, v, seen, lifetime, month, today) in file.keys {
        if !known_verb(&v) {
            return Err(Unreadable(format!("unknown verb {v:?}")));
        }
        let key = (c, r, v);
        let counted = |t: &Totals| t.iter().any(|&n| n > 0);
        if let Some(seen) = seen {
            book.last_seen.insert(key.clone(), seen);
        }
        if counted(&month) {
            book.month.insert(key.clone(), month);
        }
        if counted(&today) {
            book.today.insert(key.clone(), today);
        }
        book.lifetime.insert(key, lifetime);
    }
    Ok(book)
}

/// The book in the file at `path`; `None` when there is none.
pub(super) fn load(path: &Path) -> Result<Option<Book>, Unreadable> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Unreadable(e.to_string())),
    };
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(file, MAX_FILE + 1), &mut bytes)
        .map_err(|e| Unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Unreadable(format!("larger than {MAX_FILE} bytes")));
    }
    decode(&bytes).map(Some)
}

/// Writes `bytes` as the file at `path`, as every file under `--root-dir` is written: a
/// temp file beside it (0600), synced, renamed over it, and the directory synced.
pub(super) fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    crate::atomic_file::write_atomic(path, bytes)
}
