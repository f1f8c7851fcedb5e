//! kubelet's lease requests in edge mode with `--heartbeat-mode=lease` (YurtHub's
//! `pkg/yurthub/proxy/proxy.go`): answered by the hub from its current lease, online and offline,
//! never forwarded and never cached. The hub's renewal is the only writer of the node lease: two
//! writers conflict (YurtHub #1986), and kubelet's PUTs would cost the link a round trip every 10
//! s.

use std::time::Duration;

use crate::heartbeat::NodeHeartbeat;
use crate::heartbeat::local::{KubeletVerb, LocalAnswer};
use crate::offline::{self, Offline};
use crate::request::ApiRequest;
use crate::server::Exchange;
use crate::status::Status;

/// Largest lease create read: a Lease is a few hundred bytes.
const MAX_LEASE_BODY: u64 = 64 * 1024;
/// Shortest hold of a lease watch: YurtHub ends one within ~2 s once the cloud is healthy
/// (it checks every 2 s); a watch ended at once would let its client spin.
const LEASE_WATCH_AT_LEAST: Duration = Duration::from_secs(2);

/// Answers kubelet's `verb` on a lease; `offline` holds a watch (none without a cache).
/// Returns the HTTP status sent.
pub(super) fn answer(
    heartbeat: &NodeHeartbeat,
    offline: Option<&Offline>,
    mut ex: Exchange<'_>,
    req: &ApiRequest,
    verb: KubeletVerb,
) -> u16 {
    let (namespace, name) = req
        .resource()
        .map(|path| {
            (
                path.namespace.as_deref().unwrap_or_default(),
                path.name.as_deref().unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    // Only a create's body is used (YurtHub ignores the rest): the server drains the others.
    let body = if verb == KubeletVerb::Create {
        match offline::read_body(&mut ex, MAX_LEASE_BODY + 1) {
            Ok(body) if body.len() as u64 > MAX_LEASE_BODY => {
                return refuse(ex, &Status::body_too_large(MAX_LEASE_BODY));
            }
            Ok(body) => body,
            Err(status) => return refuse(ex, &status),
        }
    } else {
        Vec::new()
    };
    match heartbeat.answer(verb, namespace, name, &body) {
        LocalAnswer::Lease(lease) => {
            let _ = ex.send(200, &[("Content-Type", "application/json")], &lease);
            200
        }
        LocalAnswer::Created => {
            // Echoed as it came: kubelet sends protobuf by default and takes it back.
            let content_type = ex
                .header("Content-Type")
                .unwrap_or("application/json")
                .to_owned();
            let _ = ex.send(201, &[("Content-Type", content_type.as_str())], &body);
            201
        }
        LocalAnswer::Status(status) => refuse(ex, &status),
        LocalAnswer::Held => match offline {
            Some(offline) => offline.hold(ex, req, LEASE_WATCH_AT_LEAST, None),
            None => refuse(
                ex,
                &Status::service_unavailable("lease watches are not served without a cache"),
            ),
        },
    }
}

fn refuse(ex: Exchange<'_>, status: &Status) -> u16 {
    let _ = ex.send_status(status);
    status.code
}
