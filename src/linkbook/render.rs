//! The book as `/v1/link` answers it (JSON) and as `/metrics` shows it (the lifetime rows as
//! `tinyhub_link_*_total` counters, which carry on across restarts).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::{Book, ByComponent, Key, date_of, month_name, month_of};
use crate::link::{T_DOWN, T_GZIP_SAVED, T_POOL_SAVED, T_REQUESTS, T_UP, Totals, escape};
use crate::logging::rfc3339;

/// The JSON names of [`Totals`]' fields, in order.
const FIELDS: [&str; 6] = [
    "requests",
    "upBytes",
    "downBytes",
    "downGzipBytes",
    "gzipSavedBytes",
    "poolSavedBytes",
];

/// The counters of `/metrics`: (name, index into [`Totals`], help).
const SERIES: [(&str, usize, &str); 5] = [
    (
        "requests",
        T_REQUESTS,
        "requests the hub sent on the cloud link",
    ),
    (
        "sent_bytes",
        T_UP,
        "request body bytes the hub sent on the cloud link",
    ),
    (
        "received_bytes",
        T_DOWN,
        "response body bytes the cloud link carried to the hub (compressed when gzip)",
    ),
    (
        "gzip_saved_bytes",
        T_GZIP_SAVED,
        "bytes gzip saved the cloud link on answers the hub inflated itself (plain minus compressed)",
    ),
    (
        "pool_saved_bytes",
        T_POOL_SAVED,
        "bytes pool leaders and pool caches served instead of the cloud (plain bytes: an upper bound)",
    ),
];

/// `totals` as a JSON object's fields.
fn fields(totals: &Totals, object: &mut Map<String, Value>) {
    for (name, value) in FIELDS.iter().zip(totals) {
        object.insert((*name).to_owned(), json!(value));
    }
}

/// A period of (component, resource, verb) rows: the sums, then the rows in `by`.
fn keyed(rows: &BTreeMap<Key, Totals>, mut object: Map<String, Value>) -> Value {
    let mut sum = Totals::default();
    let by: Vec<Value> = rows
        .iter()
        .map(|((component, resource, verb), totals)| {
            for (s, t) in sum.iter_mut().zip(totals) {
                *s += t;
            }
            let mut row = Map::new();
            row.insert("component".into(), json!(component));
            row.insert("resource".into(), json!(resource));
            row.insert("verb".into(), json!(verb));
            fields(totals, &mut row);
            Value::Object(row)
        })
        .collect();
    fields(&sum, &mut object);
    object.insert("by".into(), Value::Array(by));
    Value::Object(object)
}

/// One day or month of component rows.
fn by_component(name: &str, at: String, rows: &ByComponent) -> Value {
    let by: Vec<Value> = rows
        .iter()
        .map(|(component, totals)| {
            let mut row = Map::new();
            row.insert("component".into(), json!(component));
            fields(totals, &mut row);
            Value::Object(row)
        })
        .collect();
    let mut object = Map::new();
    object.insert(name.to_owned(), json!(at));
    object.insert("by".into(), Value::Array(by));
    Value::Object(object)
}

/// `/v1/link`'s answer: since, writtenAt, lifetime, today, month (the day and month of the
/// last count), days and months, newest last.
pub(crate) fn render_json(book: &Book) -> String {
    // Nothing counted before the clock was set: no day yet.
    let day = book
        .last_day
        .or_else(|| book.since.map(|s| s.div_euclid(86_400)));
    let mut today = Map::new();
    today.insert("date".into(), json!(day.map(date_of)));
    let mut month = Map::new();
    month.insert("month".into(), json!(day.map(|d| month_name(month_of(d)))));
    let body = json!({
        "since": book.since.map(rfc3339),
        "writtenAt": book.written_at.map(rfc3339),
        "lifetime": keyed(&book.lifetime, Map::new()),
        "today": keyed(&book.today, today),
        "month": keyed(&book.month, month),
        "days": book.days.iter().map(|(d, rows)| by_component("date", date_of(*d), rows)).collect::<Vec<_>>(),
        "months": book.months.iter().map(|(m, rows)| by_component("month", month_name(*m), rows)).collect::<Vec<_>>(),
    });
    let mut text = body.to_string();
    text.push('\n');
    text
}

/// The lifetime rows as `tinyhub_link_*_total{component,resource,verb}`, and this process's
/// writes of the file.
pub(crate) fn render_series(book: &Book, writes: u64, bytes: u64, out: &mut String) {
    for (name, i, help) in SERIES {
        let _ = writeln!(
            out,
            "# HELP tinyhub_link_{name}_total {help}, by component, resource and verb, since the totals file began\n# TYPE tinyhub_link_{name}_total counter"
        );
        for ((component, resource, verb), totals) in &book.lifetime {
            let _ = writeln!(
                out,
                "tinyhub_link_{name}_total{{component=\"{}\",resource=\"{}\",verb=\"{}\"}} {}",
                escape(component),
                escape(resource),
                escape(verb),
                totals[i]
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP tinyhub_link_file_writes_total writes of the link totals file by this process\n# TYPE tinyhub_link_file_writes_total counter\ntinyhub_link_file_writes_total {writes}\n# HELP tinyhub_link_file_bytes_total bytes of the link totals files this process wrote\n# TYPE tinyhub_link_file_bytes_total counter\ntinyhub_link_file_bytes_total {bytes}"
    );
}
