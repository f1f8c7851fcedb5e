//! The serve port: `/v1/healthz`, `/v1/readyz` (YurtHub's paths), the standard `/healthz`,
//! `/livez` and `/readyz`, and `/metrics`. It has its own listener and caps, so it keeps
//! answering when the proxy port is saturated, and stays open through a shutdown (readyz
//! then says 503).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::health::Backends;
use crate::metrics::METRICS;
use crate::server::Exchange;

/// What readiness depends on.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    /// The cache is open and recovered (always true in cloud mode once started).
    pub cache_loaded: AtomicBool,
    /// Seconds since the epoch when the hub's client certificate expires; 0 for none.
    pub client_cert_not_after: AtomicU64,
    /// A shutdown has begun.
    pub shutting_down: AtomicBool,
}

impl Readiness {
    /// The readiness checks as (name, ok, reason when not ok).
    fn checks(&self) -> [(&'static str, bool, &'static str); 3] {
        let not_after = self.client_cert_not_after.load(Ordering::Acquire);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        [
            (
                "cache",
                self.cache_loaded.load(Ordering::Acquire),
                "the disk cache is not loaded (see the log)",
            ),
            (
                "certificates",
                not_after == 0 || now < not_after,
                "the hub's client certificate has expired",
            ),
            (
                "shutdown",
                !self.shutting_down.load(Ordering::Acquire),
                "the hub is shutting down",
            ),
        ]
    }
}

/// Answers one request on the serve port.
pub(crate) fn handle(ex: Exchange<'_>, readiness: &Readiness, backends: &Backends) {
    let url = ex.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let verbose = query
        .split('&')
        .any(|p| p == "verbose" || p.starts_with("verbose="));
    let text = [("Content-Type", "text/plain; charset=utf-8")];
    let _ = match path {
        "/v1/healthz" | "/healthz" | "/livez" => {
            let body: &[u8] = if verbose {
                b"[+]ping ok\nhealthz check passed\n"
            } else {
                b"OK"
            };
            ex.send(200, &text, body)
        }
        "/v1/readyz" | "/readyz" => {
            let checks = readiness.checks();
            let ready = checks.iter().all(|(_, ok, _)| *ok);
            let body = if verbose {
                let mut out = String::new();
                for (name, ok, why) in checks {
                    if ok {
                        out.push_str(&format!("[+]{name} ok\n"));
                    } else {
                        out.push_str(&format!("[-]{name} failed: {why}\n"));
                    }
                }
                out.push_str(if ready {
                    "readyz check passed\n"
                } else {
                    "readyz check failed\n"
                });
                out
            } else if ready {
                "OK".to_owned()
            } else {
                let reasons: Vec<&str> = checks
                    .iter()
                    .filter(|(_, ok, _)| !ok)
                    .map(|(_, _, why)| *why)
                    .collect();
                format!("not ready: {}\n", reasons.join("; "))
            };
            ex.send(if ready { 200 } else { 503 }, &text, body.as_bytes())
        }
        "/metrics" => {
            let body = METRICS.render(&backends.snapshot());
            ex.send(
                200,
                &[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body.as_bytes(),
            )
        }
        _ => ex.send(404, &text, b"404 page not found\n"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_client_certificate_makes_the_hub_unready() {
        let r = Readiness::default();
        r.cache_loaded.store(true, Ordering::Release);
        let ok = |r: &Readiness| r.checks().iter().all(|(_, ok, _)| *ok);
        assert!(ok(&r), "no client certificate: nothing to expire");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        r.client_cert_not_after.store(now + 3600, Ordering::Release);
        assert!(ok(&r));
        r.client_cert_not_after.store(now - 1, Ordering::Release);
        let failed: Vec<_> = r
            .checks()
            .iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(n, _, _)| *n)
            .collect();
        assert_eq!(failed, ["certificates"]);
    }
}
