//! The serve port: `/v1/healthz`, `/v1/readyz` (YurtHub's paths), the standard `/healthz`,
//! `/livez` and `/readyz`, `/metrics`, `GET /v1/link` (the cloud link's totals, `linkbook`),
//! `POST|PUT /v1/token`, and `GET /pods` (kubelet's
//! cached pods, as YurtHub's `pkg/yurthub/server/server.go` registers them). It has its own
//! listener and caps, so it keeps answering when the proxy port is saturated, and stays
//! open through a shutdown (readyz then says 503).
//!
//! YurtHub's OTA `upgrade` and `imagepull` of a pod (`POST
//! /openyurt.io/v1/namespaces/{ns}/pods/{pod}/…`) are [`ota`]'s. Go's `/debug/pprof/*` is
//! answered 501 with why (tinyhub is no Go program).

mod ota;

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cache::store::Store;
use crate::cache::synced::{self, Synced};
use crate::metrics::METRICS;
use crate::offline;
use crate::pki::IdentityState;
use crate::server::Exchange;
use crate::status::Status;

pub(crate) use ota::Ota;

/// Largest `/v1/token` body: a join token in a small JSON object.
const MAX_TOKEN_BODY: u64 = 4096;

/// What readiness depends on.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    /// The hub's certificates.
    pub identity: std::sync::Arc<IdentityState>,
    /// A shutdown has begun.
    pub shutting_down: AtomicBool,
    /// When each kind of the disk cache last heard the cloud (edge mode): informational
    /// lines of the verbose answer, never a check.
    pub synced: Option<std::sync::Arc<Synced>>,
}

/// One readiness check.
struct Check {
    name: &'static str,
    ok: bool,
    /// Why not, when not ok.
    why: String,
    /// Readiness waits for it. The serving certificate does not: the hub does its job on
    /// the plain port, and a cluster without yurt-manager may never approve it.
    required: bool,
}

impl Readiness {
    /// The readiness checks.
    fn checks(&self) -> Vec<Check> {
        let (client_ok, client_why) = self.identity.client_check();
        let (serving_ok, serving_why) = self.identity.serving_check();
        let check = |name, ok, why: &str| Check {
            name,
            ok,
            why: why.to_owned(),
            required: true,
        };
        vec![
            check("certificates", client_ok, &client_why),
            Check {
                required: false,
                ..check("serving-certificate", serving_ok, &serving_why)
            },
            check(
                "shutdown",
                !self.shutting_down.load(Ordering::Acquire),
                "the hub is shutting down",
            ),
        ]
    }
}

/// Answers one request on the serve port. `store` is the disk cache (edge mode), which
/// `/pods` reads; `ota` answers the OTA endpoints, and its cloud servers' health is what
/// `/metrics` reports.
pub(crate) fn handle(
    mut ex: Exchange<'_>,
    readiness: &Readiness,
    store: Option<&Store>,
    ota: &Ota,
) {
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
            let ready = checks.iter().all(|c| c.ok || !c.required);
            let body = if verbose {
                let mut out = String::new();
                for c in &checks {
                    let (name, why) = (c.name, &c.why);
                    if c.ok {
                        out.push_str(&format!("[+]{name} ok\n"));
                    } else if c.required {
                        out.push_str(&format!("[-]{name} failed: {why}\n"));
                    } else {
                        out.push_str(&format!(
                            "[-]{name} failed (not required for readiness): {why}\n"
                        ));
                    }
                }
                // How fresh each cache is: offline is a normal edge state, so these lines
                // inform and never fail readiness.
                if let Some(synced) = &readiness.synced {
                    synced::readyz_lines(synced, &mut out);
                }
                if let Some(store) = store {
                    crate::cache::relist::readyz_lines(store, &mut out);
                }
                crate::watchcache::series::readyz_lines(&mut out);
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
                    .filter(|c| !c.ok && c.required)
                    .map(|c| c.why.as_str())
                    .collect();
                format!("not ready: {}\n", reasons.join("; "))
            };
            ex.send(if ready { 200 } else { 503 }, &text, body.as_bytes())
        }
        "/metrics" => {
            let body = METRICS.render(&ota.backends().snapshot());
            ex.send(
                200,
                &[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body.as_bytes(),
            )
        }
        "/v1/link" if ex.method() == "GET" => {
            let body = crate::linkbook::render_json(&crate::linkbook::BOOK.view());
            ex.send(
                200,
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            )
        }
        "/v1/token" if matches!(ex.method(), "POST" | "PUT") => {
            let (code, message) = match read_join_token(&mut ex) {
                Ok(token) => match readiness.identity.update_token(&token) {
                    Ok(message) => (200, message.to_owned()),
                    Err(failed) => failed,
                },
                Err(failed) => failed,
            };
            if code == 200 {
                ex.send(200, &text, message.as_bytes())
            } else {
                log::warn!("/v1/token: {message}");
                let status = match code {
                    400 => Status::bad_request(message),
                    409 => Status::conflict(message),
                    _ => Status::internal(message),
                };
                ex.send_status(&status)
            }
        }
        "/pods" if ex.method() == "GET" => match store {
            Some(store) => {
                offline::kubelet_pods(store, ex);
                Ok(())
            }
            None => ex.send_status(&Status::not_implemented(
                "cloud mode keeps no cache of kubelet's pods: list them from the apiserver \
                 (GET /api/v1/pods?fieldSelector=spec.nodeName=<node>)",
            )),
        },
        _ if path.starts_with("/debug/pprof") => ex.send_status(&Status::not_implemented(
            "tinyhub is not a Go program and has no pprof: see /metrics for its memory, \
             threads and connections",
        )),
        // Another method is a 404, as on the port's other paths.
        _ if ex.method() == "POST"
            && let Some(target) = ota::target_of(path) =>
        {
            ota.handle(ex, &target);
            Ok(())
        }
        _ => ex.send(404, &text, b"404 page not found\n"),
    };
}

/// The `jointoken` of a `/v1/token` body (`{"jointoken": "..."}`), or (400, why).
fn read_join_token(ex: &mut Exchange<'_>) -> Result<String, (u16, String)> {
    let bad = |why: String| (400, why);
    if ex.body_length().is_some_and(|n| n > MAX_TOKEN_BODY) {
        return Err(bad(format!(
            "the body is larger than {MAX_TOKEN_BODY} bytes"
        )));
    }
    let mut body = Vec::new();
    ex.body()
        .take(MAX_TOKEN_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| bad(format!("cannot read the body: {e}")))?;
    if body.len() as u64 > MAX_TOKEN_BODY {
        return Err(bad(format!(
            "the body is larger than {MAX_TOKEN_BODY} bytes"
        )));
    }
    #[derive(serde::Deserialize)]
    struct Body {
        jointoken: String,
    }
    let parsed: Body = serde_json::from_slice(&body)
        .map_err(|e| bad(format!("the body is not {{\"jointoken\": \"...\"}}: {e}")))?;
    if parsed.jointoken.trim().is_empty() {
        return Err(bad("jointoken is empty".to_owned()));
    }
    Ok(parsed.jointoken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn readiness_lists_the_certificates_and_fails_without_them() {
        let r = Readiness::default();
        let failed = |r: &Readiness| -> Vec<&'static str> {
            r.checks()
                .into_iter()
                .filter(|c| !c.ok && c.required)
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(
            failed(&r),
            ["certificates"],
            "a serving certificate is not required"
        );
        let later = SystemTime::now() + Duration::from_secs(3600);
        r.identity.client_installed(Some(later));
        assert!(failed(&r).is_empty());
        let serving = |r: &Readiness| {
            r.checks()
                .into_iter()
                .find(|c| c.name == "serving-certificate")
                .unwrap()
        };
        assert!(!serving(&r).ok && serving(&r).why.contains("no serving certificate"));
        r.identity.serving_installed(later);
        assert!(serving(&r).ok);
        r.identity
            .client_installed(Some(SystemTime::now() - Duration::from_secs(1)));
        assert_eq!(failed(&r), ["certificates"]);
    }
}
