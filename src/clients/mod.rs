//! The hub's own clients of the cloud: background jobs that make requests of their own, on
//! the hub's credentials, through the same routing and upstream as any client, and feed what
//! they read to the cache. They sit above the cache, which knows nothing of them.
//!
//! - [`refill`]: fetches again the answers whose cache session the writer had to drop.
//! - [`agents_watch`]: keeps the cache-agent set in step with the `yurt-hub-cfg` ConfigMap.
//! - [`services_watch`]: keeps the topology annotations of all Services for servicetopology.
//! - [`leader_config`]: follows the pool's `leader-hub-<pool>` ConfigMap into the shared
//!   `pool::route::PoolRoute` (the source, the leaders and their health).
//! - [`pool_watch`]: feeds each pool-scope resource's node-local watch cache (one list and
//!   watch per resource, as the multiplexer).
//!
//! The response filters' cloud lookups ([`FetchObject`]) are GETs as the hub, made here too.

pub(crate) mod agents_watch;
pub(crate) mod leader_config;
pub(crate) mod leader_probe;
pub(crate) mod pool_watch;
pub(crate) mod refill;
pub(crate) mod services_watch;

use std::fmt;
use std::io::{self, Read};
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::Value;

use crate::cache::decode::{BodyDecoder, BodyShape, DecodeError, Unit};
use crate::cache::writer::MAX_OBJECT_BYTES;
use crate::filters::lookups::{FetchError, FetchObject, LOOKUP_DEADLINE, MAX_OBJECT};
use crate::route::{self, Deadline, Identity, NoCacheReason};
use crate::stream::BodyReads;
use crate::upstream::{Answer, Encoding, Outgoing, Upstream, UpstreamError};

/// The User-Agent of the hub's own requests: component `tinyhub`, never filtered.
pub(crate) fn user_agent() -> String {
    crate::upstream::HUB_USER_AGENT.to_owned()
}

/// A GET of `path` as the hub (its credentials and User-Agent), asking for JSON; a status
/// other than 200 is an error.
fn get_as_hub(upstream: &Upstream, path: &str, deadline: Deadline) -> Result<Answer, ClientError> {
    let answer = send_get_as_hub(upstream, path, deadline)?;
    match answer.status {
        200 => Ok(answer),
        status => Err(ClientError::Status(status)),
    }
}

/// A GET of `path` as the hub, asking for JSON, and for gzip unless it is a watch
/// (`--upstream-gzip`; the apiserver never compresses a watch): the answer, whatever its
/// status, its body plain ([`Answer::inflate_for_hub`]: bounded as a whole, and by what each
/// reader takes).
fn send_get_as_hub(
    upstream: &Upstream,
    path: &str,
    deadline: Deadline,
) -> Result<Answer, UpstreamError> {
    let headers = [("User-Agent".to_owned(), user_agent())];
    let encoding = match deadline {
        Deadline::Bounded(_) => Encoding::Gzip,
        Deadline::Stream(_) => Encoding::AsClient,
    };
    let answer = upstream.send(Outgoing {
        method: "GET",
        verb: crate::request::Verb::Get,
        path_and_query: path,
        headers: &headers,
        accept: Some("application/json"),
        encoding,
        body: None,
        deadline,
        identity: Identity::Hub,
        affinity: None,
    })?;
    Ok(answer.inflate_for_hub())
}

/// The response filters' lookups (a Service, this Node, a NodePool) as the hub's own GETs.
impl FetchObject for Upstream {
    fn fetch(&self, path: &str) -> Result<Option<Value>, FetchError> {
        let mut answer = send_get_as_hub(self, path, Deadline::Bounded(LOOKUP_DEADLINE))
            .map_err(FetchError::NoAnswer)?;
        match answer.status {
            200 => {}
            404 => return Ok(None),
            status => return Err(FetchError::Status(status)),
        }
        let mut body = Vec::new();
        (&mut answer.body)
            .take(MAX_OBJECT)
            .read_to_end(&mut body)
            .map_err(FetchError::Read)?;
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(FetchError::Json)
    }
}

/// The deadline of a watch of `seconds`.
fn watch_deadline(seconds: u64) -> Deadline {
    Deadline::Stream(Duration::from_secs(seconds) + route::WATCH_MARGIN)
}

/// Reads a list, handing each item to `on_item`: the list's resourceVersion when the whole
/// list was read, None when `stop` fired first. As [`read_units`] otherwise.
fn read_list_items(
    answer: &mut Answer,
    stop: &Receiver<()>,
    on_item: &mut dyn FnMut(&[u8]) -> Result<(), ClientError>,
) -> Result<Option<String>, ClientError> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    let mut rv = None;
    let whole = read_units(answer, BodyShape::List, stop, &mut |_| {}, &mut |unit| {
        match unit {
            Unit::ListItem(raw) => on_item(raw)?,
            Unit::ListMember {
                key: "metadata",
                value,
            } => rv = serde_json::from_slice::<Meta>(value)?.resource_version,
            _ => {}
        }
        Ok(())
    })?;
    if !whole {
        return Ok(None);
    }
    rv.map(Some)
        .ok_or(ClientError::Answer("the list has no resourceVersion"))
}

/// Reads a watch stream of JSON events, handing each object to `apply` with whether it was
/// deleted, and keeping in `last` the newest resourceVersion seen (bookmarks included), for
/// the watch that resumes after it. An ERROR event ends the read with an error (the caller
/// lists again). As [`read_units`] otherwise.
fn read_object_events(
    answer: &mut Answer,
    stop: &Receiver<()>,
    last: &mut String,
    apply: &mut dyn FnMut(&Value, bool),
) -> Result<bool, ClientError> {
    read_units(
        answer,
        BodyShape::WatchStream,
        stop,
        &mut |_| {},
        &mut |unit| {
            let Unit::WatchEvent(raw) = unit else {
                return Ok(());
            };
            let event: Value = serde_json::from_slice(raw)?;
            let object = event.get("object").unwrap_or(&Value::Null);
            match event.get("type").and_then(Value::as_str) {
                Some("ADDED" | "MODIFIED") => apply(object, false),
                Some("DELETED") => apply(object, true),
                Some("BOOKMARK") => {}
                // 410 Gone and the like: the next round lists again.
                _ => return Err(ClientError::Answer("the watch ended with an ERROR event")),
            }
            if let Some(rv) = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
            {
                rv.clone_into(last);
            }
            Ok(())
        },
    )
}

/// Reads `answer`'s body to its end: each chunk as read (plain for an answer of
/// [`send_get_as_hub`], which inflates it; else as the link carried it) to `on_chunk`, each
/// unit of `shape` to `on_unit`, whose first error ends the read. A gzip-encoded body is
/// inflated on the way (the cache's own decoder). Ok(false) when `stop` fired first.
fn read_units(
    answer: &mut Answer,
    shape: BodyShape,
    stop: &Receiver<()>,
    on_chunk: &mut dyn FnMut(&[u8]),
    on_unit: &mut dyn FnMut(Unit<'_>) -> Result<(), ClientError>,
) -> Result<bool, ClientError> {
    let mut units = BodyDecoder::new(shape, answer.is_gzip(), MAX_OBJECT_BYTES);
    // A watch waits for hours between events: its reads hold no buffer while it waits, as a
    // relayed watch's (`stream::BodyReads`).
    let mut reads = BodyReads::for_stream(shape == BodyShape::WatchStream);
    let mut traffic = 0;
    let mut failed = None;
    // The request went deep (the TLS handshake, the client key's signature); a watch's body
    // is then read for as long as it lasts, far higher up: give those pages back.
    crate::alloc::trim_stack();
    loop {
        if !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty)) {
            return Ok(false);
        }
        let Some(chunk) = reads.next(&mut answer.body, &mut traffic)? else {
            break;
        };
        on_chunk(chunk);
        units.feed(chunk, &mut |unit| {
            if failed.is_none() {
                failed = on_unit(unit).err();
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    units.finish(&mut |unit| {
        if failed.is_none() {
            failed = on_unit(unit).err();
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

/// Why one request of a background client came to nothing; the job logs it and tries again
/// later (the next refill, the next list-then-watch round).
#[derive(Debug)]
pub(crate) enum ClientError {
    /// The hub's own rules refuse the request the job built (the text says which rule).
    Refused(String),
    /// Routing would not cache the answer, so there is nothing to fetch it for.
    NotCacheable(NoCacheReason),
    /// The exchange with the cloud failed.
    Upstream(UpstreamError),
    /// The cloud answered with another status than the job needs.
    Status(u16),
    /// Reading the answer's body failed.
    Read(io::Error),
    /// The answer is not the JSON it should be.
    Json(serde_json::Error),
    /// The watch stream could not be decoded.
    Decode(DecodeError),
    /// The answer is well-formed but not usable (the text says how).
    Answer(&'static str),
    /// The cache writer's queue stayed full.
    QueueFull,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Refused(why) => f.write_str(why),
            ClientError::NotCacheable(reason) => write!(f, "not cacheable: {}", reason.as_str()),
            ClientError::Upstream(e) => e.fmt(f),
            ClientError::Status(status) => write!(f, "the cloud answered {status}"),
            ClientError::Read(e) => e.fmt(f),
            ClientError::Json(e) => e.fmt(f),
            ClientError::Decode(e) => e.fmt(f),
            ClientError::Answer(why) => f.write_str(why),
            ClientError::QueueFull => f.write_str("the writer queue stayed full"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<UpstreamError> for ClientError {
    fn from(e: UpstreamError) -> ClientError {
        ClientError::Upstream(e)
    }
}

impl From<serde_json::Error> for ClientError {
    fn from(e: serde_json::Error) -> ClientError {
        ClientError::Json(e)
    }
}

impl From<DecodeError> for ClientError {
    fn from(e: DecodeError) -> ClientError {
        ClientError::Decode(e)
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Read(e)
    }
}

#[cfg(test)]
mod tests;
