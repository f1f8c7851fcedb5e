//! What the stand-in cloud saw: one record per request (method, path, query, headers that
//! matter, credentials presented, resulting identity, status), kept for tests to assert
//! on, with a blocking wait so tests never sleep to see a request arrive.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::super::util::{lock, parse_query};

/// How a request was authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMethod {
    /// A client certificate issued by the test CA.
    ClientCert,
    /// A registered bearer token.
    Token,
    /// Nothing (only health and version endpoints allow it).
    Anonymous,
}

/// Who the cloud decided a request came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// User name (certificate CN, or the user a token maps to).
    pub user: String,
    /// Groups (from the certificate as issued; empty for tokens).
    pub groups: Vec<String>,
    /// How it was established.
    pub method: AuthMethod,
}

/// One request as the cloud saw it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// Sequence number, increasing over the cloud's life.
    pub seq: u64,
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (without `?`), "" when none.
    pub query: String,
    /// `User-Agent`, "" when absent.
    pub user_agent: String,
    /// `Accept`, "" when absent.
    pub accept: String,
    /// `Accept-Encoding`, "" when absent.
    pub accept_encoding: String,
    /// `Content-Type`, "" when absent.
    pub content_type: String,
    /// The bearer token presented, if any (valid or not).
    pub bearer_token: Option<String>,
    /// CN of the client certificate presented on the TLS connection, if any.
    pub client_cert_cn: Option<String>,
    /// The resulting identity; `None` when the request was refused with 401.
    pub identity: Option<Identity>,
    /// Status code sent (set when the status line is written; `None` before, or when the
    /// connection died first).
    pub status: Option<u16>,
    /// Request body as text (lossy), "" for none.
    pub body: String,
    /// Every header as received (names as sent).
    pub headers: Vec<(String, String)>,
}

impl RecordedRequest {
    /// A request of the hub's certificate bootstrap (its CSRs), not one a client made.
    pub fn is_csr(&self) -> bool {
        self.path.starts_with("/apis/certificates.k8s.io/")
    }

    /// A request of the hub's node heartbeat (User-Agent `tinyhub/…`, `?timeout=` as
    /// client-go adds): its lease renewal, and the Node it reads for the lease's owner (the
    /// response filters' Node reads carry no `timeout`).
    pub fn is_heartbeat(&self) -> bool {
        let by_hub = self.user_agent.starts_with("tinyhub/");
        by_hub
            && self.query.starts_with("timeout=")
            && (self
                .path
                .starts_with("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/")
                || self.path.starts_with("/api/v1/nodes/"))
    }

    /// A request the hub made on its own account (certificates, heartbeat), not a client's.
    pub fn is_hubs_own(&self) -> bool {
        self.is_csr() || self.is_heartbeat()
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A decoded query parameter.
    pub fn param(&self, key: &str) -> Option<String> {
        parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// A watch request (`watch=true|1` or a `/watch/` path).
    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch").as_deref(), Some("true" | "1"))
            || self.path.contains("/watch/")
    }

    /// The component: User-Agent up to the first `/`, lower-cased (as the hub computes it).
    pub fn component(&self) -> String {
        self.user_agent
            .split('/')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
    }

    /// The user name, if authenticated.
    pub fn user(&self) -> Option<&str> {
        self.identity.as_ref().map(|i| i.user.as_str())
    }
}

/// The request log.
#[derive(Default)]
pub struct Recorder {
    list: Mutex<(u64, Vec<RecordedRequest>)>,
    changed: Condvar,
}

impl Recorder {
    /// Appends a record and returns its sequence number.
    pub fn push(&self, mut r: RecordedRequest) -> u64 {
        let mut l = lock(&self.list);
        l.0 += 1;
        r.seq = l.0;
        l.1.push(r);
        self.changed.notify_all();
        l.0
    }

    /// Sets the status of record `seq` (if it is still kept).
    pub fn set_status(&self, seq: u64, code: u16) {
        let mut l = lock(&self.list);
        // Records are kept in sequence order; 0 means "not recorded".
        if let Ok(i) = l.1.binary_search_by_key(&seq, |r| r.seq) {
            l.1[i].status = Some(code);
        }
        self.changed.notify_all();
    }

    /// A copy of every record, oldest first.
    pub fn all(&self) -> Vec<RecordedRequest> {
        lock(&self.list).1.clone()
    }

    /// Number of records satisfying `pred`.
    pub fn count(&self, pred: &dyn Fn(&RecordedRequest) -> bool) -> usize {
        lock(&self.list).1.iter().filter(|r| pred(r)).count()
    }

    /// Forgets every record.
    pub fn reset(&self) {
        lock(&self.list).1.clear();
    }

    /// Blocks until a record satisfies `pred` (checked against all kept records, including
    /// status updates) or `timeout` passes.
    pub fn wait_for(
        &self,
        pred: &dyn Fn(&RecordedRequest) -> bool,
        timeout: Duration,
    ) -> Option<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        let mut l = lock(&self.list);
        loop {
            if let Some(r) = l.1.iter().find(|r| pred(r)) {
                return Some(r.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            l = self
                .changed
                .wait_timeout(l, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
