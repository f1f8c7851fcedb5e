//! The hub's own copy of the node lease, which answers kubelet's lease requests in edge mode
//! (YurtHub's `pkg/yurthub/proxy/proxy.go`), and the rule for when that copy goes to disk.
//!
//! The copy is always the newest lease the hub renewed (YurtHub serves a stale in-memory
//! copy), and a lease kubelet creates while nothing is known is kept, so kubelet's following
//! PUTs get 200 instead of 404 (fresh node, offline). The disk copy only serves the next
//! start: it is written when something other than the renewal stamp changed, or every
//! [`PERSIST_EVERY`], not on every renewal.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lease;
use crate::status::Status;

/// What kubelet asked to do with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KubeletVerb {
    /// `GET` one lease.
    Get,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `POST`.
    Create,
    /// `DELETE` one lease.
    Delete,
    /// `DELETE` of the collection.
    DeleteCollection,
    /// `GET ?watch=true`.
    Watch,
}

/// The hub's answer to a kubelet lease request; the caller writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LocalAnswer {
    /// 200 with this lease (JSON).
    Lease(Vec<u8>),
    /// 201 echoing the request body as it came, with its content type (JSON or protobuf).
    Created,
    /// A failure (404 nothing known, 403 delete).
    Status(Status),
    /// A watch: hold it open with no events, as the offline watches are held (ends at its
    /// `timeoutSeconds`, or when the cloud is healthy again).
    Held,
}

/// The hub's current node lease, shared by the renewal and kubelet's request threads.
#[derive(Debug)]
pub(crate) struct LocalLease {
    node: String,
    current: Mutex<Option<Arc<Value>>>,
}

impl LocalLease {
    /// No lease known yet for `node`.
    pub(crate) fn new(node: &str) -> LocalLease {
        LocalLease {
            node: node.to_owned(),
            current: Mutex::new(None),
        }
    }

    /// Makes `lease` the current one: each renewed lease, or the disk copy at start-up.
    pub(crate) fn set(&self, mut lease: Value) {
        lease::stamp_type(&mut lease);
        *crate::lock(&self.current) = Some(Arc::new(lease));
    }

    /// The current lease: the base of the next renewal.
    pub(crate) fn current(&self) -> Option<Arc<Value>> {
        crate::lock(&self.current).clone()
    }

    /// The answer to kubelet's `verb` on the lease `namespace/name` (name empty for a
    /// create or a collection); `body` is the request body, used only by a create.
    pub(crate) fn answer(
        &self,
        verb: KubeletVerb,
        namespace: &str,
        name: &str,
        body: &[u8],
    ) -> LocalAnswer {
        match verb {
            KubeletVerb::Get | KubeletVerb::Update | KubeletVerb::Patch => {
                let ours = namespace == lease::LEASE_NAMESPACE && name == self.node;
                match self.current().filter(|_| ours) {
                    // Serializing a Value cannot fail: its keys are strings.
                    Some(current) => {
                        LocalAnswer::Lease(serde_json::to_vec(&*current).unwrap_or_default())
                    }
                    None => LocalAnswer::Status(Status::not_found(
                        "coordination.k8s.io",
                        "leases",
                        name,
                    )),
                }
            }
            KubeletVerb::Create => {
                self.keep_created(namespace, body);
                LocalAnswer::Created
            }
            KubeletVerb::Delete | KubeletVerb::DeleteCollection => LocalAnswer::Status(
                Status::forbidden("delete request is not supported in local cache"),
            ),
            KubeletVerb::Watch => LocalAnswer::Held,
        }
    }

    /// Keeps kubelet's new lease as the current one when none is known and it is this node's
    /// (JSON, or the protobuf kubelet sends by default).
    fn keep_created(&self, namespace: &str, body: &[u8]) {
        let created = if body.starts_with(crate::protobuf::PROTOBUF_MAGIC) {
            lease::lease_from_protobuf(body)
        } else {
            serde_json::from_slice::<Value>(body).ok()
        };
        let Some(created) = created else {
            return;
        };
        let name = created.pointer("/metadata/name").and_then(Value::as_str);
        let in_body = created
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let ns_ok = in_body.unwrap_or(namespace) == lease::LEASE_NAMESPACE;
        if name != Some(self.node.as_str()) || !ns_ok {
            return;
        }
        let mut current = crate::lock(&self.current);
        if current.is_none() {
            let mut created = created;
            lease::stamp_type(&mut created);
            *current = Some(Arc::new(created));
        }
    }
}

/// Longest time between two disk writes of an unchanged lease.
pub(crate) const PERSIST_EVERY: Duration = Duration::from_secs(600);

/// Decides which renewed leases reach the disk cache.
#[derive(Debug)]
pub(crate) struct PersistPolicy {
    every: Duration,
    /// The last lease written, without the renewal stamp, and when.
    last: Option<(Value, Instant)>,
}

impl PersistPolicy {
    /// Nothing written yet; an unchanged lease is written again after `every`.
    pub(crate) fn new(every: Duration) -> PersistPolicy {
        PersistPolicy { every, last: None }
    }

    /// Whether `lease` must be written at `now`: nothing written yet, something other than
    /// `spec.renewTime`, `metadata.resourceVersion` and `metadata.managedFields` changed, or
    /// `every` passed since the last write.
    pub(crate) fn should_persist(&self, lease: &Value, now: Instant) -> bool {
        match &self.last {
            None => true,
            Some((written, at)) => {
                now.saturating_duration_since(*at) >= self.every || *written != without_stamp(lease)
            }
        }
    }

    /// Notes that `lease` reached the disk at `now` (also the disk copy read at start-up).
    pub(crate) fn persisted(&mut self, lease: &Value, now: Instant) {
        self.last = Some((without_stamp(lease), now));
    }

    /// Call after each renewal: whether to write `lease` now; a yes counts as written, so
    /// after a failed write call [`Self::forget`].
    pub(crate) fn after_renewal(&mut self, lease: &Value, now: Instant) -> bool {
        let write = self.should_persist(lease, now);
        if write {
            self.persisted(lease, now);
        }
        write
    }

    /// The last write failed: the next renewal writes again.
    pub(crate) fn forget(&mut self) {
        self.last = None;
    }
}

/// `lease` without the fields every renewal changes.
fn without_stamp(lease: &Value) -> Value {
    let mut copy = lease.clone();
    if let Some(spec) = copy.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("renewTime");
    }
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
        metadata.remove("managedFields");
    }
    copy
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn renewed(rv: u64, renew_secs: u64) -> Value {
        json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"edge-1","namespace":"kube-node-lease",
                "resourceVersion": rv.to_string(), "uid":"l1",
                "managedFields":[{"manager":"tinyhub","time": renew_secs}],
                "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"edge-1","uid":"u1"}]},
            "spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40,
                "renewTime": format!("t{renew_secs}")}})
    }

    fn body(answer: &LocalAnswer) -> (u16, Value) {
        match answer {
            LocalAnswer::Lease(body) => (
                200,
                serde_json::from_slice(body).expect("the answer is JSON"),
            ),
            LocalAnswer::Created => (201, Value::Null),
            LocalAnswer::Status(s) => (s.code, Value::Null),
            LocalAnswer::Held => (0, Value::Null),
        }
    }

    const NS: &str = "kube-node-lease";

    #[test]
    fn kubelet_reads_and_writes_get_the_newest_renewed_lease() {
        let local = LocalLease::new("edge-1");
        local.set(renewed(5, 0));
        local.set(renewed(6, 10));
        for verb in [KubeletVerb::Get, KubeletVerb::Update, KubeletVerb::Patch] {
            let (code, lease) = body(&local.answer(verb, NS, "edge-1", b"{\"ignored\":1}"));
            assert_eq!(code, 200);
            assert_eq!(lease["metadata"]["resourceVersion"], "6", "{verb:?}");
        }
    }

    #[test]
    fn nothing_known_is_a_404_status() {
        let local = LocalLease::new("edge-1");
        let LocalAnswer::Status(s) = local.answer(KubeletVerb::Update, NS, "edge-1", b"{}") else {
            panic!("not a status")
        };
        assert_eq!((s.code, s.reason), (404, "NotFound"));
        assert!(s.message.contains("\"edge-1\" not found"), "{}", s.message);
        // Another node's lease is not ours to answer with.
        local.set(renewed(5, 0));
        let answer = local.answer(KubeletVerb::Get, NS, "edge-2", b"");
        assert!(matches!(answer, LocalAnswer::Status(s) if s.code == 404));
    }

    #[test]
    fn a_create_is_echoed_and_kept_only_when_nothing_is_known() {
        let local = LocalLease::new("edge-1");
        let sent = br#"{"metadata":{"name":"edge-1","namespace":"kube-node-lease"},"spec":{"holderIdentity":"edge-1","leaseDurationSeconds":40}}"#;
        let answer = local.answer(KubeletVerb::Create, NS, "", sent);
        assert_eq!(answer, LocalAnswer::Created);
        let (code, lease) = body(&local.answer(KubeletVerb::Update, NS, "edge-1", b"{}"));
        assert_eq!(code, 200);
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(lease["kind"], "Lease");
        // A renewed lease exists: a second create does not replace it.
        local.set(renewed(7, 0));
        local.answer(KubeletVerb::Create, NS, "", sent);
        let (_, lease) = body(&local.answer(KubeletVerb::Get, NS, "edge-1", b""));
        assert_eq!(lease["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_protobuf_create_from_kubelet_is_kept_as_json() {
        let local = LocalLease::new("edge-1");
        let sent = super::super::lease::proto_lease::encode_lease(
            "edge-1",
            NS,
            "edge-1",
            40,
            1_800_000_000,
            123_456_000,
            Some("node-uid"),
        );
        assert_eq!(
            local.answer(KubeletVerb::Create, NS, "", &sent),
            LocalAnswer::Created
        );
        let (code, lease) = body(&local.answer(KubeletVerb::Update, NS, "edge-1", b""));
        assert_eq!(code, 200);
        assert_eq!(lease["kind"], "Lease");
        assert_eq!(lease["spec"]["holderIdentity"], "edge-1");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(lease["spec"]["renewTime"], "2027-01-15T08:00:00.123456Z");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "node-uid");
    }

    #[test]
    fn a_create_that_is_not_this_nodes_lease_is_echoed_but_not_kept() {
        let local = LocalLease::new("edge-1");
        for sent in [
            &b"not json"[..],
            br#"{"metadata":{"name":"edge-2"}}"#,
            br#"{"metadata":{"name":"edge-1","namespace":"default"}}"#,
        ] {
            let answer = local.answer(KubeletVerb::Create, NS, "", sent);
            assert_eq!(answer, LocalAnswer::Created);
        }
        assert!(local.current().is_none());
    }

    #[test]
    fn deletes_are_refused_and_watches_held() {
        let local = LocalLease::new("edge-1");
        local.set(renewed(5, 0));
        for verb in [KubeletVerb::Delete, KubeletVerb::DeleteCollection] {
            let LocalAnswer::Status(s) = local.answer(verb, NS, "edge-1", b"") else {
                panic!("not a status")
            };
            assert_eq!(s.code, 403);
            assert_eq!(s.message, "delete request is not supported in local cache");
        }
        assert_eq!(
            local.answer(KubeletVerb::Watch, NS, "", b""),
            LocalAnswer::Held
        );
        assert!(local.current().is_some(), "a delete leaves the lease");
    }

    #[test]
    fn an_hour_of_renewals_every_10s_writes_6_times() {
        let t0 = Instant::now();
        let mut policy = PersistPolicy::new(PERSIST_EVERY);
        let mut writes = Vec::new();
        for i in 0..360u64 {
            let now = t0 + Duration::from_secs(10 * i);
            if policy.after_renewal(&renewed(100 + i, 10 * i), now) {
                writes.push(10 * i);
            }
        }
        assert_eq!(writes, [0, 600, 1200, 1800, 2400, 3000]);
    }

    #[test]
    fn a_real_change_is_written_at_once() {
        let t0 = Instant::now();
        let mut policy = PersistPolicy::new(PERSIST_EVERY);
        assert!(policy.after_renewal(&renewed(1, 0), t0));
        assert!(!policy.after_renewal(&renewed(2, 10), t0 + Duration::from_secs(10)));
        let mut changed = renewed(3, 20);
        changed["spec"]["holderIdentity"] = json!("kubelet");
        assert!(policy.after_renewal(&changed, t0 + Duration::from_secs(20)));
        let mut no_owner = renewed(4, 30);
        no_owner["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("ownerReferences");
        assert!(policy.should_persist(&no_owner, t0 + Duration::from_secs(30)));
    }

    #[test]
    fn a_failed_write_is_tried_again_at_the_next_renewal() {
        let t0 = Instant::now();
        let mut policy = PersistPolicy::new(PERSIST_EVERY);
        assert!(policy.after_renewal(&renewed(1, 0), t0));
        policy.forget();
        assert!(policy.after_renewal(&renewed(2, 10), t0 + Duration::from_secs(10)));
        assert!(!policy.after_renewal(&renewed(3, 20), t0 + Duration::from_secs(20)));
    }

    #[test]
    fn the_disk_copy_read_at_start_up_counts_as_written() {
        let t0 = Instant::now();
        let mut policy = PersistPolicy::new(PERSIST_EVERY);
        policy.persisted(&renewed(1, 0), t0);
        assert!(!policy.after_renewal(&renewed(9, 90), t0 + Duration::from_secs(10)));
    }
}
