//! The fallback policy, case by case, against a fake cloud that fails as told.

use std::time::Duration;

use super::*;
use crate::route::{Deadline, Identity};
use crate::upstream::{Answer, Outgoing};

/// A cloud whose every send fails with `error()`.
struct FakeCloud {
    healthy: bool,
    /// Healthy by the last probe, though maybe suspect (`healthy` false).
    probed: bool,
    error: Error,
}

impl Cloud for FakeCloud {
    fn send(&self, _: Outgoing<'_>) -> Result<Answer, UpstreamError> {
        Err((self.error)())
    }

    fn any_healthy(&self) -> bool {
        self.healthy
    }

    fn any_probed_healthy(&self) -> bool {
        self.healthy || self.probed
    }

    fn server(&self, _: usize) -> &str {
        "https://cloud:6443"
    }

    fn healthy(&self, _: usize) -> bool {
        self.healthy
    }

    fn recoveries(&self) -> u64 {
        0
    }
}

fn transport(timeout: bool, maybe_sent: bool) -> UpstreamError {
    UpstreamError::Transport {
        server: "https://cloud:6443".into(),
        detail: "what happened".into(),
        timeout,
        maybe_sent,
    }
}

/// Refused: the request never left the hub.
fn refused() -> UpstreamError {
    transport(false, false)
}
/// Timed out connecting: never sent either.
fn connect_timeout() -> UpstreamError {
    transport(true, false)
}
/// Timed out waiting for the answer: the cloud may have it.
fn answer_timeout() -> UpstreamError {
    transport(true, true)
}
/// Broke off after sending (also: a small answer cut short).
fn broke_off() -> UpstreamError {
    transport(false, true)
}
/// How the fake cloud fails.
type Error = fn() -> UpstreamError;

fn no_backend() -> UpstreamError {
    UpstreamError::NoHealthyBackend
}
/// No TLS material for the cloud yet: nothing was sent.
fn no_credentials() -> UpstreamError {
    UpstreamError::NoCredentials("the cluster CA is not known yet".into())
}
fn client_body() -> UpstreamError {
    UpstreamError::ClientBody("unexpected end of chunked body".into())
}
fn unbuildable() -> UpstreamError {
    UpstreamError::Request("invalid header value".into())
}

#[derive(Debug, PartialEq, Eq)]
enum Want {
    /// Answered from the cache.
    Cache,
    /// Answered with this status.
    Status(u16),
}
use Want::{Cache, Status as Code};

/// The whole path of a failed send: the fake cloud fails, the failure is sorted by origin
/// (with the server's reading of the client's body), and the policy answers.
fn outcome(mode: WorkingMode, local: &Local, error: Error, body_failure: Option<u16>) -> Want {
    let cloud = FakeCloud {
        healthy: true,
        probed: true,
        error,
    };
    let outgoing = Outgoing {
        method: "POST",
        verb: crate::request::Verb::Create,
        path_and_query: "/api/v1/namespaces/a/configmaps",
        headers: &[],
        accept: None,
        encoding: crate::upstream::Encoding::AsClient,
        body: None,
        deadline: Deadline::Bounded(Duration::from_secs(600)),
        identity: Identity::Hub,
        affinity: None,
    };
    let error = match (&cloud as &dyn Cloud).send(outgoing) {
        Ok(_) => panic!("the fake cloud always fails"),
        Err(error) => error,
    };
    let body_failure = body_failure.map(|code| Status::new(code, "BodyFailure", "the body"));
    match after(mode, local, sort(error, body_failure)) {
        Fallback::FromCache(_) => Cache,
        Fallback::Answer(status) => Code(status.code),
    }
}

const EDGE: WorkingMode = WorkingMode::Edge;
const CLOUD: WorkingMode = WorkingMode::Cloud;

#[test]
fn reads_are_answered_from_the_cache_whatever_the_cloud_did() {
    let reads = [
        Local::Get,
        Local::List,
        Local::Watch,
        Local::NonResource("version".into()),
    ];
    for local in &reads {
        for error in [
            refused,
            connect_timeout,
            answer_timeout,
            broke_off,
            no_backend,
            no_credentials,
        ] {
            assert_eq!(outcome(EDGE, local, error, None), Cache, "{local:?}");
        }
    }
}

#[test]
fn writes_are_answered_from_the_cache_only_when_never_sent() {
    let writes = [Local::Echo, Local::Token, Local::WriteRefused];
    let cases: &[(Error, Want)] = &[
        (refused, Cache),
        (connect_timeout, Cache),
        (no_backend, Cache),
        (no_credentials, Cache),
        (broke_off, Code(503)),
        (answer_timeout, Code(504)),
    ];
    for local in &writes {
        assert!(local.is_write(), "{local:?}");
        for (error, want) in cases {
            assert_eq!(
                outcome(EDGE, local, *error, None),
                *want,
                "{local:?} {}",
                error()
            );
        }
    }
    for read in [Local::Get, Local::List, Local::Watch, Local::Unavailable] {
        assert!(!read.is_write(), "{read:?}");
    }
}

#[test]
fn what_the_cache_cannot_answer_says_the_cloud_is_unreachable() {
    let cases: &[(WorkingMode, Local, Error, Want)] = &[
        (EDGE, Local::Unavailable, refused, Code(503)),
        (EDGE, Local::Unavailable, no_backend, Code(503)),
        (EDGE, Local::Unavailable, broke_off, Code(503)),
        (EDGE, Local::Unavailable, connect_timeout, Code(504)),
        (EDGE, Local::Unavailable, answer_timeout, Code(504)),
        // Cloud mode never answers from a cache, whatever the route says.
        (CLOUD, Local::Get, refused, Code(503)),
        (CLOUD, Local::List, no_backend, Code(503)),
        (CLOUD, Local::Get, answer_timeout, Code(504)),
        (CLOUD, Local::WriteRefused, refused, Code(503)),
        (CLOUD, Local::Unavailable, connect_timeout, Code(504)),
        (EDGE, Local::Unavailable, no_credentials, Code(503)),
        (CLOUD, Local::Get, no_credentials, Code(503)),
        (CLOUD, Local::WriteRefused, no_credentials, Code(503)),
    ];
    for (mode, local, error, want) in cases {
        assert_eq!(
            outcome(*mode, local, *error, None),
            *want,
            "{mode:?} {local:?} {}",
            error()
        );
    }
}

#[test]
fn a_broken_client_body_is_the_clients_error_never_a_cache_answer() {
    for mode in [EDGE, CLOUD] {
        for local in [Local::Get, Local::WriteRefused, Local::Unavailable] {
            // ureq says the body failed; the server has no status for it: 400.
            assert_eq!(outcome(mode, &local, client_body, None), Code(400));
            // The server's reading of the body wins over whatever the cloud side saw.
            for (body, code) in [(400, 400), (408, 408), (413, 413)] {
                for error in [client_body, refused, broke_off, answer_timeout, no_backend] {
                    assert_eq!(
                        outcome(mode, &local, error, Some(body)),
                        Code(code),
                        "{mode:?} {local:?} {}",
                        error()
                    );
                }
            }
        }
    }
}

#[test]
fn a_request_the_hub_cannot_build_is_its_own_error() {
    for mode in [EDGE, CLOUD] {
        for local in [Local::Get, Local::WriteRefused, Local::Unavailable] {
            assert_eq!(outcome(mode, &local, unbuildable, None), Code(500));
        }
    }
    // Only reachable through `status_of` directly: a 502.
    assert_eq!(status_of(&unbuildable()).code, 502);
}

#[test]
fn no_usable_server_answers_offline_in_edge_mode_only() {
    let cloud = |healthy| FakeCloud {
        healthy,
        probed: healthy,
        error: refused,
    };
    for local in [Local::Get, Local::WriteRefused] {
        assert!(offline(EDGE, &local, &cloud(false)));
        assert!(!offline(EDGE, &local, &cloud(true)));
        assert!(!offline(CLOUD, &local, &cloud(false)));
        assert!(!offline(CLOUD, &local, &cloud(true)));
    }
}

#[test]
fn a_suspect_server_still_takes_writes_not_reads() {
    // Healthy by its last probe, suspect since a request failed: the probe has not ruled.
    let suspect = FakeCloud {
        healthy: false,
        probed: true,
        error: refused,
    };
    for read in [Local::Get, Local::List, Local::Watch] {
        assert!(offline(EDGE, &read, &suspect), "{read:?}");
    }
    // No local answer (an eviction, a non-agent's create): the cloud's server choice decides.
    assert!(!offline(EDGE, &Local::Unavailable, &suspect));
    for write in [Local::Echo, Local::Token, Local::WriteRefused] {
        assert!(!offline(EDGE, &write, &suspect), "{write:?}");
    }
}

#[test]
fn no_credentials_says_so_in_its_503() {
    let status = status_of(&no_credentials());
    assert_eq!(status.code, 503);
    let body = String::from_utf8(status.to_json()).unwrap();
    assert!(
        body.contains(
            "the hub has no credentials for the cloud yet: the cluster CA is not known yet"
        ),
        "{body}"
    );
    assert!(!body.contains("unreachable"), "{body}");
}
