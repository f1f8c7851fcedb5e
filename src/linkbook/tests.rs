use super::*;
use crate::link::VERBS;

/// 2026-12-06T12:00:00Z.
const NOON: i64 = 1_796_558_400;
const DAY: i64 = 86_400;

fn key(c: &str, r: &str, v: &str) -> Key {
    (c.to_owned(), r.to_owned(), v.to_owned())
}

fn one(c: &str, n: u64) -> Vec<(Key, Totals)> {
    vec![(key(c, "pods", "list"), [1, 0, n, 0, 0, 0])]
}

#[test]
fn the_test_instant_is_the_day_it_says() {
    assert_eq!(date_of(NOON.div_euclid(DAY)), "2026-12-06");
    assert_eq!(month_name(month_of(NOON.div_euclid(DAY))), "2026-12");
    assert_eq!(
        first_day(month_of(NOON / DAY)),
        days_from_civil(2026, 12, 1)
    );
}

#[test]
fn a_new_day_empties_today_and_a_new_month_the_month() {
    let mut book = Book::new(Some(NOON));
    book.absorb(&one("kubelet", 100), NOON);
    book.absorb(&one("kubelet", 50), NOON + 3600);
    let k = key("kubelet", "pods", "list");
    assert_eq!(book.today[&k], [2, 0, 150, 0, 0, 0]);
    // The next day (2026-12-07): today starts over, the month and the lifetime go on.
    book.absorb(&one("kubelet", 10), NOON + DAY);
    assert_eq!(book.today[&k], [1, 0, 10, 0, 0, 0]);
    assert_eq!(book.month[&k], [3, 0, 160, 0, 0, 0]);
    assert_eq!(book.days.len(), 2);
    assert_eq!(book.days[&(NOON / DAY)]["kubelet"][2], 150);
    // 2027-01-01: a new month too.
    let new_year = days_from_civil(2027, 1, 1) * DAY + 60;
    book.absorb(&one("kubelet", 1), new_year);
    assert_eq!(book.month[&k], [1, 0, 1, 0, 0, 0]);
    assert_eq!(book.lifetime[&k], [4, 0, 161, 0, 0, 0]);
    assert_eq!(book.months.len(), 2);
    let json: serde_json::Value = serde_json::from_str(&render_json(&book)).unwrap();
    assert_eq!(json["today"]["date"], "2027-01-01");
    assert_eq!(json["month"]["month"], "2027-01");
    assert_eq!(json["lifetime"]["downBytes"], 161);
    assert_eq!(json["months"][0]["month"], "2026-12");
    assert_eq!(json["days"][0]["by"][0]["component"], "kubelet");
}

#[test]
fn only_35_days_and_13_months_are_kept() {
    let mut book = Book::new(Some(NOON));
    for d in 0..400 {
        book.absorb(&one("kubelet", 1), NOON + d * DAY);
    }
    assert_eq!(book.days.len(), DAYS);
    assert_eq!(book.months.len(), MONTHS);
    assert_eq!(*book.days.keys().last().unwrap(), NOON / DAY + 399);
    assert_eq!(*book.days.keys().next().unwrap(), NOON / DAY + 399 - 34);
    assert_eq!(book.lifetime[&key("kubelet", "pods", "list")][0], 400);
}

#[test]
fn keys_and_components_past_the_caps_go_to_other() {
    let mut book = Book::new(Some(NOON));
    let delta: Vec<(Key, Totals)> = (0..MAX_TOTALS + 5)
        .map(|i| (key(&format!("c{i}"), "pods", "get"), [1, 0, 0, 0, 0, 0]))
        .collect();
    book.absorb(&delta, NOON);
    assert_eq!(book.lifetime.len(), MAX_TOTALS + 1);
    assert_eq!(book.lifetime[&key(OTHER, OTHER, OTHER)][0], 5);
    let today = &book.days[&(NOON / DAY)];
    assert_eq!(today.len(), COMPONENTS + 1);
    assert_eq!(today[OTHER][0], (MAX_TOTALS + 5 - COMPONENTS) as u64);
    // A kept key still counts under its own name.
    book.absorb(&[(key("c0", "pods", "get"), [1, 0, 0, 0, 0, 0])], NOON);
    assert_eq!(book.lifetime[&key("c0", "pods", "get")][0], 2);
}

#[test]
fn a_clock_before_2020_or_a_day_behind_counts_on_the_last_known_day() {
    let mut book = Book::new(Some(NOON));
    assert!(book.absorb(&one("kubelet", 1), NOON));
    // No RTC: 1970 after a reboot, before NTP.
    assert!(book.absorb(&one("kubelet", 2), 30));
    // A clock stepped back a few hours, over midnight.
    assert!(book.absorb(&one("kubelet", 4), NOON - DAY / 2 - 3600));
    assert_eq!(book.days.len(), 1, "{:?}", book.days.keys());
    assert_eq!(book.today[&key("kubelet", "pods", "list")][2], 7);
    assert_eq!(book.last_day, Some(NOON / DAY));
    // The clock right again: the next day starts as usual.
    book.absorb(&one("kubelet", 8), NOON + DAY);
    assert_eq!(book.today[&key("kubelet", "pods", "list")][2], 8);
}

#[test]
fn a_first_start_before_the_clock_is_set_waits_for_it() {
    let mut book = Book::new(None);
    // 1970: nothing absorbed, so the caller keeps the delta for later.
    assert!(!book.absorb(&one("kubelet", 5), 30));
    assert_eq!(book, Book::new(None));
    let json: serde_json::Value = serde_json::from_str(&render_json(&book)).unwrap();
    assert_eq!(json["since"], serde_json::Value::Null);
    assert_eq!(json["today"]["date"], serde_json::Value::Null);
    // The clock set: the waiting counts land on its day, and counting began then.
    assert!(book.absorb(&one("kubelet", 5), NOON));
    assert_eq!(book.since, Some(NOON));
    assert_eq!(book.days.keys().collect::<Vec<_>>(), [&(NOON / DAY)]);
    assert_eq!(book.lifetime[&key("kubelet", "pods", "list")][2], 5);
}

#[test]
fn a_clock_that_was_far_ahead_does_not_pin_the_counts() {
    let mut book = Book::new(Some(NOON));
    // A clock a year ahead for a while (a bad RTC), then right again.
    let ahead = NOON + 365 * DAY;
    book.absorb(&one("kubelet", 1), ahead);
    book.absorb(&one("kubelet", 2), NOON + 60);
    assert_eq!(book.last_day, Some(NOON / DAY));
    assert_eq!(book.today[&key("kubelet", "pods", "list")][2], 2);
    book.absorb(&one("kubelet", 4), NOON + DAY);
    assert_eq!(book.last_day, Some(NOON / DAY + 1));
    assert_eq!(book.days[&(NOON / DAY + 1)]["kubelet"][2], 4);
    assert_eq!(book.lifetime[&key("kubelet", "pods", "list")][2], 7);
}

#[test]
fn lifetime_keys_not_counted_for_13_months_go_to_other() {
    let mut book = Book::new(Some(NOON));
    // A client that changes its name every day fills the keys...
    for d in 0..MAX_TOTALS as i64 {
        book.absorb(&one(&format!("rotating-{d}"), 1), NOON + d * DAY);
    }
    book.absorb(&one("kubelet", 1), NOON + 100 * DAY);
    assert_eq!(book.lifetime[&key(OTHER, OTHER, OTHER)][2], 1);
    // ...but not for good: 13 months later the old names are `_other`, and a new key has room.
    let later = NOON + (MAX_TOTALS as i64 + 400) * DAY;
    book.absorb(&one("kubelet", 1), later);
    assert_eq!(book.lifetime[&key("kubelet", "pods", "list")][2], 1);
    assert!(book.lifetime.len() <= 2, "{:?}", book.lifetime.keys());
    assert_eq!(
        book.lifetime[&key(OTHER, OTHER, OTHER)][2],
        MAX_TOTALS as u64 + 1
    );
    assert_eq!(book.last_seen.len(), 1);
    // Kept keys still count under their names, and the file keeps when they were seen.
    let back = file::decode(&file::encode(&book)).unwrap();
    assert_eq!(back, book);
}

#[test]
fn the_file_at_the_caps_is_at_most_64_kib() {
    let label = |prefix: &str, i: usize| format!("{prefix}{i:0>31}");
    let big = [MAX_COUNT; 6];
    let mut book = Book::new(Some(NOON));
    // Every key with the longest labels, counted on each of the days kept.
    let delta: Vec<(Key, Totals)> = (0..MAX_TOTALS + 1)
        .map(|i| {
            (
                (label("c", i), label("r", i), "deletecollection".into()),
                big,
            )
        })
        .collect();
    for d in 0..(MONTHS as i64 * 31) {
        book.absorb(&delta, NOON + d * DAY);
    }
    book.written_at = Some(NOON);
    assert_eq!(book.lifetime.len(), MAX_TOTALS + 1);
    assert_eq!(book.today.len(), MAX_TOTALS + 1);
    assert_eq!(book.days.len(), DAYS);
    assert_eq!(book.months.len(), MONTHS);
    assert!(book.days.values().all(|by| by.len() == COMPONENTS + 1));
    assert!(book.lifetime.values().all(|t| *t == big));
    let size = file::encode(&book).len();
    assert!(size <= 64 * 1024, "{size} bytes at the caps");
    // Labels need no escaping: the worst case is what was counted.
    assert!(size > 48 * 1024, "{size} bytes: not the caps");
}

#[test]
fn the_file_reads_back_what_was_written() {
    let mut book = Book::new(Some(NOON - 5 * DAY));
    for (d, verb) in VERBS.iter().enumerate() {
        book.absorb(
            &[(key("kube-proxy", "services", verb), [1, 2, 3, 4, 5, 6])],
            NOON + d as i64 * DAY,
        );
    }
    book.written_at = Some(NOON + 9 * DAY);
    let bytes = file::encode(&book);
    assert_eq!(file::decode(&bytes).unwrap(), book);
    // Not ours, cut short, or of another version: refused, not misread.
    for bad in [
        &b"{}"[..],
        &bytes[..bytes.len() / 2],
        br#"{"version":2,"since":0,"writtenAt":null,"lastDay":null,"keys":[],"days":[],"months":[]}"#,
        br#"{"version":1,"since":0,"writtenAt":null,"lastDay":null,"keys":[["a","b","steal",null,[1,1,1,1,1,1],[0,0,0,0,0,0],[0,0,0,0,0,0]]],"days":[],"months":[]}"#,
    ] {
        assert!(file::decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn a_written_file_replaces_the_old_one_whole() {
    let dir = std::env::temp_dir().join(format!("linkbook-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(FILE_NAME);
    let mut book = Book::new(Some(NOON));
    book.absorb(&one("kubelet", 1), NOON);
    file::write(&path, &file::encode(&book)).unwrap();
    book.absorb(&one("kubelet", 1), NOON);
    file::write(&path, &file::encode(&book)).unwrap();
    assert_eq!(file::load(&path).unwrap(), Some(book));
    // Nothing beside it: no temp file left over.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [FILE_NAME]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(file::load(&dir.join("none.json")).unwrap(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_series_carry_the_lifetime_rows() {
    let mut book = Book::new(Some(NOON));
    book.absorb(
        &[(key("kubelet", "pods", "list"), [3, 0, 900, 0, 100, 50])],
        NOON,
    );
    let mut out = String::new();
    render_series(&book, 2, 4096, &mut out);
    for line in [
        "tinyhub_link_requests_total{component=\"kubelet\",resource=\"pods\",verb=\"list\"} 3",
        "tinyhub_link_received_bytes_total{component=\"kubelet\",resource=\"pods\",verb=\"list\"} 900",
        "tinyhub_link_gzip_saved_bytes_total{component=\"kubelet\",resource=\"pods\",verb=\"list\"} 100",
        "tinyhub_link_pool_saved_bytes_total{component=\"kubelet\",resource=\"pods\",verb=\"list\"} 50",
        "tinyhub_link_file_writes_total 2",
        "tinyhub_link_file_bytes_total 4096",
    ] {
        assert!(out.lines().any(|l| l == line), "{line}\n{out}");
    }
}
