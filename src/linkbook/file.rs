//! `link-totals.json`, version 1: compact rows (`[component, resource, verb, [requests, up,
//! down, downGzip, gzipSaved, poolSaved]]`), written as a temp file (0600), synced, renamed
//! over the old one, and the directory synced: a crash leaves the old file or the new one.

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

/// One (component, resource, verb) row.
type Row = (String, String, String, Totals);

/// One day or month: its number and its components.
type Period = (i64, Vec<(String, Totals)>);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileV1 {
    version: u32,
    since: i64,
    written_at: Option<i64>,
    last_day: Option<i64>,
    lifetime: Vec<Row>,
    today: Vec<Row>,
    month: Vec<Row>,
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
    let rows = |map: &BTreeMap<Key, Totals>| -> Vec<Row> {
        map.iter()
            .map(|((c, r, v), t)| (c.clone(), r.clone(), v.clone(), *t))
            .collect()
    };
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
        lifetime: rows(&book.lifetime),
        today: rows(&book.today),
        month: rows(&book.month),
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
    let rows = |rows: Vec<Row>| -> Result<BTreeMap<Key, Totals>, Unreadable> {
        rows.into_iter()
            .map(|(c, r, v, t)| {
                if known_verb(&v) {
                    Ok(((c, r, v), t))
                } else {
                    Err(Unreadable(format!("unknown verb {v:?}")))
                }
            })
            .collect()
    };
    let periods = |periods: Vec<Period>| -> BTreeMap<i64, ByComponent> {
        periods
            .into_iter()
            .map(|(at, by)| (at, by.into_iter().collect()))
            .collect()
    };
    Ok(Book {
        since: file.since,
        written_at: file.written_at,
        last_day: file.last_day,
        lifetime: rows(file.lifetime)?,
        today: rows(file.today)?,
        month: rows(file.month)?,
        days: periods(file.days),
        months: periods(file.months),
    })
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
