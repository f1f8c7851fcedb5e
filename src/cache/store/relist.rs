//! The relist record, `<root>/.relist`: the collections whose cached content is known to be
//! incomplete, so the next online read of each relists it whole. `tinyhub cache repair`
//! marks what it moved files out of (`repaired`); the bound marks what it evicted
//! (`evicted`). The hub clears a mark when a whole list of the collection is committed.
//!
//! JSON, version 1:
//! `{"version":1,"collections":[{"component":"kubelet","kind":"pods.v1.core","reason":"repaired","at":"2026-12-06T15:00:00Z"}]}`,
//! where `kind` is the kind's path below the component's directory
//! ([`CollectionKey::dir_name`](crate::cache::key::CollectionKey::dir_name): the metadata
//! view's `partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core`). At most [`MAX_MARKS`]
//! entries; past it the oldest goes (its collection is then relisted only when its client
//! lists it, as before the record). Written as `.synced` is: staged in `.staging`, synced,
//! renamed, 0600. A dot name: every reader of the cache skips it.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::check::{FileRead, read_bounded};
use super::error::{StoreError, StoreOp, io_err};
use super::fs::{make_dir, remove_quietly, sync_dir, write_new_file};
use super::synced::BadRecord;
use super::{STAGING, Store, next_id};
use crate::cache::key::CollectionKey;
use crate::logging::rfc3339;
use crate::tokens::parse_rfc3339;

/// The record's file name under the cache root.
pub(crate) const RELIST_FILE: &str = ".relist";

/// Marks kept at most.
pub(crate) const MAX_MARKS: usize = 256;

/// The record's format version.
const VERSION: u32 = 1;

/// Why a collection waits for a relist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RelistReason {
    /// `tinyhub cache repair` moved files out of it.
    Repaired,
    /// The cache's bound evicted it.
    Evicted,
}

impl RelistReason {
    /// The reason as the record and readyz word it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RelistReason::Repaired => "repaired",
            RelistReason::Evicted => "evicted",
        }
    }
}

/// One marked collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelistMark {
    /// The component's directory name (`kubelet`).
    pub component: String,
    /// The kind's path below it (`pods.v1.core`).
    pub kind: String,
    /// Why it was marked.
    pub reason: RelistReason,
    /// When, to the second.
    pub at: SystemTime,
}

/// The marked collections, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RelistMarks {
    marks: Vec<RelistMark>,
}

/// The record on disk.
#[derive(Serialize, Deserialize)]
struct Record {
    version: u32,
    collections: Vec<RecordEntry>,
}

#[derive(Serialize, Deserialize)]
struct RecordEntry {
    component: String,
    kind: String,
    reason: RelistReason,
    at: String,
}

impl RelistMarks {
    /// The record under `root`: empty when there is none; an error (naming the file and
    /// why) when it cannot be read or is not a version-1 record.
    pub(crate) fn load(root: &Path) -> Result<RelistMarks, StoreError> {
        let path = root.join(RELIST_FILE);
        let invalid = |why: String| io_err(StoreOp::Read, &path)(io::Error::other(why));
        let bytes = match read_bounded(&path)? {
            FileRead::Bytes(bytes) => bytes,
            FileRead::Missing => return Ok(RelistMarks::default()),
            FileRead::Symlink => return Err(invalid("a symlink, not followed".into())),
            FileRead::NotFile => return Err(invalid("not a regular file".into())),
            FileRead::TooLarge { size } => {
                return Err(invalid(format!("{size} bytes, not a relist record")));
            }
        };
        RelistMarks::parse(&bytes).map_err(|e| invalid(e.0))
    }

    /// The record's bytes read: the one judge of them (the hub's open, repair's, and
    /// `verify`). Why not, when they are not a version-1 record.
    pub(crate) fn parse(bytes: &[u8]) -> Result<RelistMarks, BadRecord> {
        let record: Record = serde_json::from_slice(bytes)
            .map_err(|e| BadRecord(format!("not a relist record: {e}")))?;
        if record.version != VERSION {
            return Err(BadRecord(format!(
                "relist record version {} (this tinyhub reads {VERSION})",
                record.version
            )));
        }
        let mut marks = RelistMarks::default();
        for entry in record.collections {
            let secs = parse_rfc3339(&entry.at)
                .ok_or_else(|| BadRecord(format!("not an RFC 3339 time: {:?}", entry.at)))?;
            let at = UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
            marks.mark(&entry.component, &entry.kind, entry.reason, at);
        }
        Ok(marks)
    }

    /// Marks a collection (again: its reason and time are the new ones). Past
    /// [`MAX_MARKS`], the oldest mark goes.
    pub(crate) fn mark(
        &mut self,
        component: &str,
        kind: &str,
        reason: RelistReason,
        at: SystemTime,
    ) {
        self.clear(component, kind);
        self.marks.push(RelistMark {
            component: component.to_owned(),
            kind: kind.to_owned(),
            reason,
            at,
        });
        if self.marks.len() > MAX_MARKS {
            // Oldest by time; the first such in the record on a tie.
            let oldest = (0..self.marks.len())
                .min_by_key(|&i| self.marks[i].at)
                .unwrap_or(0);
            self.marks.remove(oldest);
        }
    }

    /// Clears a collection's mark; `true` if it had one.
    pub(crate) fn clear(&mut self, component: &str, kind: &str) -> bool {
        let before = self.marks.len();
        self.marks
            .retain(|m| !(m.component == component && m.kind == kind));
        self.marks.len() != before
    }

    /// Why a collection is marked; `None` when it is not.
    pub(crate) fn contains(&self, component: &str, kind: &str) -> Option<RelistReason> {
        self.marks
            .iter()
            .find(|m| m.component == component && m.kind == kind)
            .map(|m| m.reason)
    }

    /// The marks, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &RelistMark> {
        self.marks.iter()
    }

    /// How many collections are marked.
    #[allow(dead_code, reason = "for `tinyhub cache ls`'s footer")]
    pub(crate) fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether none is.
    pub(crate) fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// The record's bytes.
    fn to_bytes(&self) -> Vec<u8> {
        let record = Record {
            version: VERSION,
            collections: self
                .marks
                .iter()
                .map(|m| RecordEntry {
                    component: m.component.clone(),
                    kind: m.kind.clone(),
                    reason: m.reason,
                    at: rfc3339(
                        m.at.duration_since(UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs())
                            .try_into()
                            .unwrap_or(i64::MAX),
                    ),
                })
                .collect(),
        };
        // Strings and numbers only: serializing cannot fail.
        serde_json::to_vec(&record).unwrap_or_default()
    }

    /// Writes the record under `root` crash-safely: staged in `<root>/.staging` (made if
    /// missing), flushed, renamed over `.relist`, the root fsynced; 0600. A crash leaves the
    /// old record or the new one. Only the cache's lock holder may call it (the hub's writer
    /// side, or `tinyhub cache repair` with the hub stopped).
    pub(crate) fn save(&self, root: &Path) -> Result<(), StoreError> {
        let staging = root.join(STAGING);
        make_dir(&staging)?;
        let bytes = self.to_bytes();
        let mut tries = 0;
        let temp = loop {
            let temp = staging.join(format!("relist.{}", next_id()));
            match write_new_file(&temp, &bytes, true) {
                Ok(()) => break temp,
                // A leftover of a killed run: a tool's counter starts again at 0 each run,
                // and only the hub's open clears `.staging`. The next name is free.
                Err(StoreError::Io { source, .. })
                    if source.kind() == io::ErrorKind::AlreadyExists && tries < 1000 =>
                {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let target = root.join(RELIST_FILE);
        if let Err(e) = std::fs::rename(&temp, &target) {
            remove_quietly(&temp);
            return Err(io_err(StoreOp::Rename, &target)(e));
        }
        sync_dir(root)
    }
}

impl Store {
    /// The collections marked for a relist, loaded at open (an unreadable record is warned
    /// of and read as none: the hub still starts, and the collections it named are relisted
    /// when their clients list them, as before the record).
    pub(super) fn load_relist(root: &Path) -> RelistMarks {
        RelistMarks::load(root).unwrap_or_else(|e| {
            log::warn!("{e}; no collection is marked for a relist");
            RelistMarks::default()
        })
    }

    /// Why `c` waits for a relist; `None` when it does not (one atomic load when no
    /// collection does).
    pub(crate) fn relist_reason(&self, c: &CollectionKey) -> Option<RelistReason> {
        if !self.relist_any.load(Ordering::Acquire) {
            return None;
        }
        self.relist_marks()
            .contains(c.component.as_str(), &c.dir_name())
    }

    /// The marked collections, oldest first.
    pub(crate) fn relist_pending(&self) -> Vec<RelistMark> {
        if !self.relist_any.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.relist_marks().iter().cloned().collect()
    }

    /// Marks `c` for a relist and saves the record. The writer's (or the lock holder's) to
    /// call: it writes the cache.
    #[allow(
        dead_code,
        reason = "for the bound's eviction, which marks what it evicts"
    )]
    pub(crate) fn mark_relist(
        &self,
        c: &CollectionKey,
        reason: RelistReason,
    ) -> Result<(), StoreError> {
        // Marked as not to be trusted whole: no proof of an earlier list stands.
        self.moved_collection(c);
        let mut marks = self.relist_marks();
        marks.mark(
            c.component.as_str(),
            &c.dir_name(),
            reason,
            SystemTime::now(),
        );
        self.relist_any.store(true, Ordering::Release);
        marks.save(&self.root)
    }

    /// Clears `c`'s mark, if it has one, and saves the record: a whole list of it was
    /// committed. `true` when it had one. The writer's to call.
    pub(crate) fn clear_relist(&self, c: &CollectionKey) -> Result<bool, StoreError> {
        if !self.relist_any.load(Ordering::Acquire) {
            return Ok(false);
        }
        let mut marks = self.relist_marks();
        if !marks.clear(c.component.as_str(), &c.dir_name()) {
            return Ok(false);
        }
        self.relist_any.store(!marks.is_empty(), Ordering::Release);
        marks.save(&self.root)?;
        Ok(true)
    }

    fn relist_marks(&self) -> MutexGuard<'_, RelistMarks> {
        self.relist.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
