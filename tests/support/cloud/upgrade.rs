//! Connection upgrades at the stand-in cloud, as the kube-apiserver takes exec, attach and
//! port-forward: the request is authenticated as `server.rs` authenticates any request
//! (the front's client certificate, else a registered bearer token) and recorded, then
//! [`dispatch`] chooses, by the request's headers, what serves the upgraded stream. After
//! a 101 the front is told the connection switched protocols (`Front::switch_protocols`),
//! so each side's end crosses it as a half-close.
//!
//! What this file serves:
//! - `Upgrade: SPDY/3.1` with `x-test-echo: raw`: a 101, then every byte echoed back until
//!   the client's end, then the end of the cloud's writing; with `x-test-greet: <text>`
//!   the text goes first, in the 101's own write (as a SPDY server sends its SETTINGS);
//! - `x-test-upgrade: silent`: no answer at all, until the client goes (a cloud that never
//!   answers the upgrade);
//! - `x-test-upgrade: status=<code>`: that status with a `Status` body, no upgrade;
//! - exec, attach and port-forward over WebSocket or SPDY: kubectl's protocols, answered
//!   by `remotecommand.rs` and `portforward.rs`;
//! - anything else: 400, as the apiserver answers an upgrade it cannot serve.
//!
//! An unauthenticated upgrade is 401, as any request.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;

use super::super::util::lock;
use super::Instance;
use super::http1::Request;
use super::observe::{AuthMethod, Identity, RecordedRequest};
use super::server::bootstrap_identity;

/// What serves an upgraded stream, chosen by [`dispatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Served {
    /// A 101, then the bytes echoed back as they come.
    RawEcho,
    /// Never answered.
    Silent,
    /// Refused with this status.
    Refused(u16),
    /// Not a protocol the stand-in speaks: 400.
    Unknown,
}

/// The one place that decides what serves an upgrade request, by its headers. The
/// protocols the stand-in speaks are added here.
pub(super) fn dispatch(req: &Request) -> Served {
    let test = req.header("x-test-upgrade");
    if test.eq_ignore_ascii_case("silent") {
        return Served::Silent;
    }
    if let Some(code) = test.strip_prefix("status=").and_then(|c| c.parse().ok()) {
        return Served::Refused(code);
    }
    let protocol = req.header("upgrade");
    if protocol.eq_ignore_ascii_case("SPDY/3.1") && req.header("x-test-echo") == "raw" {
        return Served::RawEcho;
    }
    Served::Unknown
}

/// Serves one upgrade request on the internal connection (`r` holds what was read past
/// its head); the connection carries nothing else afterwards.
pub(super) fn serve(
    inst: &Arc<Instance>,
    req: Request,
    mut r: BufReader<TcpStream>,
    mut w: TcpStream,
) {
    let identity = authenticate(inst, &req);
    let seq = record(inst, &req, identity.clone());
    let answer = |w: &mut TcpStream, code: u16, message: &str| {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "code": code,
        })
        .to_string();
        let _ = write!(
            w,
            "HTTP/1.1 {code} Refused\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        inst.recorder.set_status(seq, code);
    };
    if identity.is_none() {
        answer(&mut w, 401, "Unauthorized");
        return;
    }
    match dispatch(&req) {
        Served::Refused(code) => answer(&mut w, code, "refused by the test"),
        Served::Unknown => {
            // kubectl's exec, attach and port-forward; anything else is refused.
            inst.front.switch_protocols(&req.remote);
            let streamed = super::remotecommand::serve(&req, &mut r, &mut w)
                .and_then(|done| Ok(done || super::portforward::serve(&req, &mut r, &mut w)?));
            if matches!(streamed, Ok(false)) {
                answer(
                    &mut w,
                    400,
                    "unable to upgrade: the protocol is not supported",
                );
            }
        }
        Served::Silent => {
            // Holds the connection until the client goes, answering nothing.
            let mut sink = [0u8; 1024];
            while matches!(r.read(&mut sink), Ok(1..)) {}
        }
        Served::RawEcho => {
            inst.front.switch_protocols(&req.remote);
            let head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
            // A greeting in the same write as the head: it reaches the hub with it.
            let greeting = req.header("x-test-greet");
            if w.write_all(format!("{head}{greeting}").as_bytes()).is_err() {
                return;
            }
            inst.recorder.set_status(seq, 101);
            let _ = echo(&mut r, &mut w);
            let _ = w.shutdown(Shutdown::Write);
        }
    }
}

/// Writes back every byte read (those read with the head first) until the client's end.
fn echo(r: &mut BufReader<TcpStream>, w: &mut TcpStream) -> io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        let n = buf.len();
        w.write_all(buf)?;
        r.consume(n);
    }
}

/// Who sent `req`, as `server.rs` decides it: the client certificate the front saw, else a
/// registered or bootstrap bearer token; `None`: refused with 401.
fn authenticate(inst: &Arc<Instance>, req: &Request) -> Option<Identity> {
    let subject = inst.front.view(&req.remote).and_then(|v| v.subject);
    if let Some(s) = subject {
        return Some(Identity {
            user: s.cn,
            groups: s.groups,
            method: AuthMethod::ClientCert,
        });
    }
    let token = req.header("Authorization").strip_prefix("Bearer ")?.trim();
    let known = lock(&inst.shared.tokens).get(token).map(|user| Identity {
        user: user.clone(),
        groups: vec![],
        method: AuthMethod::Token,
    });
    known.or_else(|| bootstrap_identity(inst, token))
}

/// Records `req` as `server.rs` records requests; its sequence number.
fn record(inst: &Arc<Instance>, req: &Request, identity: Option<Identity>) -> u64 {
    if !lock(&inst.knobs).record {
        return 0;
    }
    let url = req.url.as_str();
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let bearer = req
        .header("Authorization")
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    inst.recorder.push(RecordedRequest {
        seq: 0,
        method: req.method.clone(),
        path: path.to_string(),
        query: query.to_string(),
        user_agent: req.header("User-Agent").to_string(),
        accept: req.header("Accept").to_string(),
        accept_encoding: req.header("Accept-Encoding").to_string(),
        content_type: req.header("Content-Type").to_string(),
        bearer_token: bearer,
        client_cert_cn: inst
            .front
            .view(&req.remote)
            .and_then(|v| v.subject)
            .map(|s| s.cn),
        identity,
        status: None,
        body: String::new(),
        headers: req.headers.clone(),
    })
}
