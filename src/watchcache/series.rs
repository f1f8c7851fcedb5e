//! The node-local watch caches' series for the metrics page (`tinyhub_pool_cache_*{resource}`),
//! measured at each scrape, and their lines in `/v1/readyz?verbose` (how long ago each feeder
//! last heard the cloud). A cache is [`export`]ed when it is made; [`render`] is the source
//! app/build.rs registers ([`crate::metrics::Metrics::register`]).

use std::fmt::Write as _;
use std::sync::Mutex;

use super::{Memory, WatchCache};
use crate::lock;
use crate::metrics::{escape, header};

/// The caches exported so far (a clone shares the cache).
static EXPORTED: Mutex<Vec<WatchCache>> = Mutex::new(Vec::new());

/// Exports `cache`'s size as `tinyhub_pool_cache_*{resource}` from now on.
pub(crate) fn export(cache: &WatchCache) {
    lock(&EXPORTED).push(cache.clone());
}

/// Renders the exported caches' series (nothing while there is none).
pub(crate) fn render(out: &mut String) {
    render_caches(out, &lock(&EXPORTED));
}

/// `/v1/readyz?verbose`'s informational lines, one per exported cache: how long ago its
/// feeder last heard the cloud's word (`[+]synced pool/services.v1.core 12s ago`), or that
/// it has not yet.
pub(crate) fn readyz_lines(out: &mut String) {
    for cache in lock(&EXPORTED).iter() {
        let resource = cache.resource().gvr.dir_name();
        let _ = match cache.synced_age() {
            Some(age) => writeln!(out, "[+]synced pool/{resource} {}s ago", age.as_secs()),
            None => writeln!(out, "[+]synced pool/{resource} not yet"),
        };
    }
}

/// When the cache's feeder last heard the cloud's word, in Unix seconds by the wall clock
/// (its age is monotonic: the wall clock now less the age); `None` before the first, or
/// when the clock reads before it.
pub(crate) fn last_sync_unix(cache: &WatchCache) -> Option<u64> {
    let age = cache.synced_age()?;
    crate::unix_secs().checked_sub(age.as_secs())
}

/// One figure of a pool cache from its memory and its skipped objects.
type CacheFigure = fn(&Memory, u64) -> u64;

/// The node-local watch caches' series, one per resource: what each holds (objects, the
/// bytes `WatchCache::memory` counts, events in the history) and the objects left out as
/// unreadable. Walks each cache under its lock: a scrape's cost, not a request's.
fn render_caches(out: &mut String, caches: &[WatchCache]) {
    if caches.is_empty() {
        return;
    }
    let sizes: Vec<(&str, Memory, u64)> = caches
        .iter()
        .map(|c| {
            (
                c.resource().gvr.resource.as_str(),
                c.memory(),
                c.skipped_objects(),
            )
        })
        .collect();
    let series: [(&str, &str, &str, CacheFigure); 4] = [
        (
            "tinyhub_pool_cache_objects",
            "gauge",
            "objects held by the node-local watch cache of a pool-scope resource",
            |m, _| m.objects as u64,
        ),
        (
            "tinyhub_pool_cache_bytes",
            "gauge",
            "bytes the node-local watch cache holds: objects, their index, the event history (its own accounting)",
            |m, _| m.total_bytes as u64,
        ),
        (
            "tinyhub_pool_cache_events",
            "gauge",
            "events in the node-local watch cache's history",
            |m, _| m.events as u64,
        ),
        (
            "tinyhub_pool_cache_skipped_objects_total",
            "counter",
            "objects from the cloud the node-local watch cache could not index and left out",
            |_, skipped| skipped,
        ),
    ];
    for (name, kind, help, value) in series {
        header(out, name, kind, help);
        for (resource, memory, skipped) in &sizes {
            let _ = writeln!(
                out,
                "{name}{{resource=\"{}\"}} {}",
                escape(resource),
                value(memory, *skipped)
            );
        }
    }
    // Freshness (issue 32): when each feeder last heard the cloud's word, by the wall clock;
    // a cache that has not yet has no line.
    let name = "tinyhub_pool_cache_last_sync_timestamp_seconds";
    header(
        out,
        name,
        "gauge",
        "when the node-local watch cache of a pool-scope resource last heard the cloud's word \
         (a list, an event, a bookmark; a follower: its leader's), Unix seconds",
    );
    for cache in caches {
        if let Some(at) = last_sync_unix(cache) {
            let resource = cache.resource().gvr.resource.as_str();
            let _ = writeln!(out, "{name}{{resource=\"{}\"}} {at}", escape(resource));
        }
    }
}
