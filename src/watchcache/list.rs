//! Lists from the cache: at the cache's resourceVersion (`resourceVersion` unset, `0`, or
//! not newer than the cache's), filtered by namespace and selectors, paged by `limit` and
//! the apiserver's continue tokens, and written item by item.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::ops::Bound;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::object::{Object, parse_rv, write_json_str};
use super::{State, WatchCache, selected};
use crate::lock;
use crate::selector::Selectors;
use crate::status::Status;

/// Bytes of list output gathered before one write to the client.
const LIST_FLUSH: usize = 32 * 1024;

/// The `v` of the apiserver's continue tokens.
const CONTINUE_VERSION: &str = "meta.k8s.io/v1";

/// The apiserver's text for a continue token older than what it can serve consistently
/// (etcd3 store, when it cannot offer an inconsistent token instead).
pub(crate) const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

/// A list request, as the query says it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListRequest<'a> {
    /// `resourceVersion`: unset, "" and "0" mean "what the cache holds"; a number not
    /// newer than the cache's too (the apiserver's NotOlderThan), unless `exact`.
    pub resource_version: Option<&'a str>,
    /// The request's namespace; `None` for all.
    pub namespace: Option<&'a str>,
    /// `labelSelector` and `fieldSelector`.
    pub selectors: &'a Selectors,
    /// `limit`; `None` or 0 for no limit.
    pub limit: Option<u64>,
    /// `continue`.
    pub continue_token: Option<&'a str>,
    /// `resourceVersionMatch=Exact`: the list as it was at `resource_version`, rebuilt from
    /// the history (410 when older than it).
    pub exact: bool,
}

/// One page of a list: the objects chosen (shared, not copied) and the list's metadata.
/// Written after the cache's lock is released.
#[derive(Debug)]
pub(crate) struct ListPage {
    items: Vec<Object>,
    rv: u64,
    continue_token: Option<String>,
    list_kind: String,
    api_version: String,
}

impl ListPage {
    /// The objects of the page, in key order.
    #[cfg(test)]
    pub(crate) fn items(&self) -> &[Object] {
        &self.items
    }

    /// The list's `metadata.resourceVersion`.
    #[cfg(test)]
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The list's `metadata.continue`, when more objects match.
    #[cfg(test)]
    pub(crate) fn continue_token(&self) -> Option<&str> {
        self.continue_token.as_deref()
    }

    /// Writes the list as the apiserver does (`kind`, `apiVersion`, `metadata`, `items`),
    /// item by item, in writes of about [`LIST_FLUSH`] bytes.
    pub(crate) fn write_to(&self, w: &mut dyn Write) -> io::Result<()> {
        let mut out = Gather {
            w,
            buf: Vec::with_capacity(LIST_FLUSH),
        };
        out.write_all(b"{\"kind\":")?;
        write_json_str(&mut out, &self.list_kind)?;
        out.write_all(b",\"apiVersion\":")?;
        write_json_str(&mut out, &self.api_version)?;
        write!(out, ",\"metadata\":{{\"resourceVersion\":\"{}\"", self.rv)?;
        if let Some(token) = &self.continue_token {
            out.write_all(b",\"continue\":")?;
            write_json_str(&mut out, token)?;
        }
        out.write_all(b"},\"items\":[")?;
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(item.json())?;
        }
        out.write_all(b"]}")?;
        out.flush_buf()
    }
}

/// Gathers small writes into one buffer; large ones go straight through.
struct Gather<'w> {
    w: &'w mut dyn Write,
    buf: Vec<u8>,
}

impl Gather<'_> {
    fn flush_buf(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

impl Write for Gather<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > LIST_FLUSH {
            self.flush_buf()?;
        }
        if data.len() >= LIST_FLUSH {
            self.w.write_all(data)?;
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.w.flush()
    }
}

/// The apiserver's continue token (`storage.continueToken`).
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

/// A token to continue after `last_key` in the list taken at `rv`.
fn encode_continue(rv: u64, last_key: &str) -> String {
    let token = ContinueToken {
        v: CONTINUE_VERSION.to_owned(),
        rv: i64::try_from(rv).unwrap_or(i64::MAX),
        start: format!("{last_key}\u{0}"),
    };
    // Serializing strings and a number into a Vec cannot fail.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// The resourceVersion and the first key of a continue token, or the apiserver's 400.
fn decode_continue(token: &str) -> Result<(i64, String), Status> {
    let invalid = |why: String| {
        Status::bad_request(format!(
            "invalid continue token: continue key is not valid: {why}"
        ))
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| invalid(e.to_string()))?;
    let token: ContinueToken =
        serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    if token.v != CONTINUE_VERSION {
        return Err(invalid(format!(
            "incorrect encoded start resourceVersion (version {CONTINUE_VERSION})"
        )));
    }
    if token.start.is_empty() {
        return Err(invalid("encoded start key empty".to_owned()));
    }
    Ok((token.rv, token.start))
}

/// A requested resourceVersion: `None` for "any" (unset, "", "0").
fn requested_rv(text: Option<&str>) -> Result<Option<u64>, Status> {
    match text {
        None | Some("" | "0") => Ok(None),
        Some(text) => parse_rv(text)
            .map(Some)
            .ok_or_else(|| Status::bad_request(format!("invalid resource version: {text:?}"))),
    }
}

impl WatchCache {
    /// Chooses one page of a list (see [`ListRequest`]); the refusals are the apiserver's:
    /// 429 while warming, 400 for a bad selector, token or resourceVersion, 410 for a
    /// continue token older than the history, 504 when the cache does not reach a newer
    /// requested resourceVersion within [`super::CacheOptions::fresh_wait`].
    pub(crate) fn list(&self, req: &ListRequest<'_>) -> Result<ListPage, Status> {
        let resource = &self.inner.resource;
        resource.check_selectors(req.selectors)?;
        let position = req
            .continue_token
            .filter(|t| !t.is_empty())
            .map(decode_continue)
            .transpose()?;
        let wanted = if position.is_some() {
            None
        } else {
            requested_rv(req.resource_version)?
        };
        if req.exact && wanted.is_none() && position.is_none() {
            return Err(Status::bad_request(
                "resourceVersionMatch \"Exact\" is forbidden unless resourceVersion is provided and is not 0",
            ));
        }
        let state = self.fresh_state(wanted, self.inner.options.fresh_wait)?;
        let ns_prefix = req
            .namespace
            .filter(|ns| !ns.is_empty())
            .map(|ns| format!("{ns}/"));
        let start = match (&position, &ns_prefix) {
            (Some((_, key)), Some(prefix)) => key.as_str().max(prefix.as_str()),
            (Some((_, key)), None) => key.as_str(),
            (None, Some(prefix)) => prefix.as_str(),
            (None, None) => "",
        };
        // The apiserver's watch cache answers a list at resourceVersion ""/"0" whole, whatever
        // its limit: client-go's reflectors ask `limit=500&resourceVersion=0` and expect it,
        // and the hub's disk cache prunes only from whole lists (`route.rs`).
        let from_cache = position.is_none() && !req.exact && wanted.is_none();
        let limit = req
            .limit
            .filter(|&l| l > 0 && !from_cache)
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut page = Page {
            namespace: req.namespace.filter(|ns| !ns.is_empty()),
            selectors: req.selectors,
            cache: self,
            limit,
            items: Vec::new(),
            more: false,
        };
        let first = state
            .objects
            .partition_point(|o| o.cmp_key(start.as_bytes()).is_lt());
        let current = state.objects.get(first..).unwrap_or_default();
        // An older state is served for a continue token of an older list, and for an exact
        // resourceVersion. A token at the cache's resourceVersion, or an inconsistent one
        // (rv ≤ 0, as the apiserver hands out with a 410), continues in the current objects.
        let older = match (&position, wanted) {
            (Some((rv, _)), _) => u64::try_from(*rv).ok().filter(|&rv| rv > 0),
            (None, Some(rv)) if req.exact => Some(rv),
            (None, _) => None,
        }
        .filter(|&rv| rv != state.rv);
        let rv = match older {
            Some(rv) => {
                if rv > state.rv || rv < state.start_rv {
                    return Err(match position {
                        Some(_) => Status::expired(CONTINUE_EXPIRED),
                        None => Status::expired(format!(
                            "too old resource version: {rv} ({})",
                            state.start_rv
                        )),
                    });
                }
                let before = states_before(&state, rv, start);
                for object in merge(current, &before) {
                    if !page.offer(object) {
                        break;
                    }
                }
                rv
            }
            None => {
                for object in current {
                    if !page.offer(object) {
                        break;
                    }
                }
                state.rv
            }
        };
        drop(state);
        let continue_token = match (page.more, page.items.last()) {
            (true, Some(last)) => Some(encode_continue(rv, &last.key())),
            _ => None,
        };
        Ok(ListPage {
            items: page.items,
            rv,
            continue_token,
            list_kind: resource.list_kind(),
            api_version: resource.gvr.api_version(),
        })
    }

    /// The locked state once it is ready and (for `wanted`) at least that fresh, waiting at
    /// most `wait` for it.
    pub(super) fn fresh_state(
        &self,
        wanted: Option<u64>,
        wait: Duration,
    ) -> Result<std::sync::MutexGuard<'_, State>, Status> {
        let state = lock(&self.inner.state);
        if !state.ready {
            return Err(self.initializing());
        }
        let Some(wanted) = wanted.filter(|&w| w > state.rv) else {
            return Ok(state);
        };
        drop(state);
        self.wait_fresh(wanted, wait);
        let state = lock(&self.inner.state);
        if wanted > state.rv {
            return Err(Status::too_large_resource_version(wanted, state.rv));
        }
        Ok(state)
    }
}

/// The page being chosen.
struct Page<'r> {
    namespace: Option<&'r str>,
    selectors: &'r Selectors,
    cache: &'r WatchCache,
    limit: usize,
    items: Vec<Object>,
    more: bool,
}

impl Page<'_> {
    /// Takes `object` if it is selected; false once the page is full and one more object
    /// was found to match (or the namespace's objects are behind), so the scan stops.
    fn offer(&mut self, object: &Object) -> bool {
        if let Some(ns) = self.namespace
            && object.namespace() != ns
        {
            // Keys of one namespace are contiguous: past them, nothing more can match.
            return false;
        }
        if !selected(object, None, self.selectors, &self.cache.inner.resource) {
            return true;
        }
        if self.items.len() == self.limit {
            self.more = true;
            return false;
        }
        self.items.push(object.clone());
        true
    }
}

/// The state at `rv` of every key an event after `rv` touched, from `start` on: the
/// object before its first such event, or `None` when it did not exist at `rv`.
fn states_before(state: &State, rv: u64, start: &str) -> BTreeMap<String, Option<Object>> {
    let mut before = BTreeMap::new();
    let first = state.history.partition_point(|e| e.rv <= rv);
    for event in state.history.range(first..) {
        let key = event.object.key();
        if key.as_str() >= start {
            before.entry(key).or_insert_with(|| event.prev.clone());
        }
    }
    before
}

/// The objects at an older resourceVersion in key order: `current` (sorted, from the
/// start key) with every key in `before` replaced by its older state.
fn merge<'s>(
    current: &'s [Object],
    before: &'s BTreeMap<String, Option<Object>>,
) -> impl Iterator<Item = &'s Object> {
    let mut cur = current.iter().peekable();
    let mut old = before
        .range::<str, _>((Bound::Unbounded, Bound::Unbounded))
        .peekable();
    std::iter::from_fn(move || {
        loop {
            let order = match (cur.peek(), old.peek()) {
                (None, None) => return None,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(o), Some((key, _))) => o.cmp_key(key.as_bytes()),
            };
            match order {
                std::cmp::Ordering::Less => return cur.next(),
                std::cmp::Ordering::Equal => {
                    cur.next();
                    if let Some((_, Some(o))) = old.next() {
                        return Some(o);
                    }
                }
                std::cmp::Ordering::Greater => {
                    if let Some((_, Some(o))) = old.next() {
                        return Some(o);
                    }
                }
            }
        }
    })
}
