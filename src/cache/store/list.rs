//! Reading a collection in (namespace, name) order, one namespace directory at a time:
//! [`ObjectIter`] for readers, [`NameIter`] for names alone, the name cursor for a replacement's merge.

use std::borrow::Cow;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[cfg(doc)]
use super::Store;
use super::check::{self, Expect};
use super::error::{StoreError, StoreOp, io_err};
use super::fs::real_dir;
use super::index::Reading;
use super::{StoredHead, StoredObject};
use crate::names::is_safe_segment;

/// The objects of one collection, read lazily; see [`Store::list`].
///
/// A file that vanishes between listing its directory and reading it is skipped, and so
/// are symlinks, dot-names, anything that is not a regular file, a file over
/// [`check::MAX_FILE`] and a file holding another object than its path names.
#[derive(Debug)]
pub(crate) struct ObjectIter {
    pub(super) cursor: NameCursor,
    /// The collection's `apiVersion`: a file is handed out only as the object its path
    /// names ([`check::serve`]).
    pub(super) api_version: String,
    /// Counted as a read in flight while it lives: the index build yields to it.
    pub(super) _reading: Reading,
}

impl Iterator for ObjectIter {
    type Item = Result<StoredObject, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (namespace, name) = match self.cursor.next_name()? {
                Ok(found) => found,
                Err(e) => return Some(Err(e)),
            };
            let path = self.cursor.path_of(namespace.as_deref(), &name);
            let expect = Expect {
                namespace: namespace.as_deref(),
                name: &name,
                api_version: Some(Cow::Borrowed(&self.api_version)),
            };
            // The check parses the head: what a list needs of it is kept, not parsed again.
            let mut head = None;
            let read = check::read_judged(&path, |bytes| {
                let found = check::checked_head(bytes, &expect)?;
                head = Some(StoredHead {
                    kind: found.kind.map(Cow::into_owned),
                    resource_version: found
                        .metadata
                        .and_then(|m| m.resource_version)
                        .map(Cow::into_owned),
                });
                Ok(())
            });
            match read {
                Ok(read) => {
                    let Some(bytes) = check::serve(&path, read) else {
                        continue;
                    };
                    return Some(Ok(StoredObject {
                        namespace,
                        name,
                        bytes,
                        head,
                    }));
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The names of one collection's objects, as (namespace, name), read lazily without
/// opening a file; see [`Store::names`].
#[derive(Debug)]
pub(crate) struct NameIter {
    pub(super) cursor: NameCursor,
}

impl Iterator for NameIter {
    type Item = Result<(Option<String>, String), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next_name()
    }
}

/// Hands out the names of a collection in (namespace, name) order, reading one
/// namespace directory at a time.
#[derive(Debug)]
pub(super) struct NameCursor {
    kind_dir: PathBuf,
    /// Namespaces still to read, last first (so `pop` gives the next).
    pending: Vec<String>,
    /// The namespace of `names`; `None` for cluster-scoped objects.
    current: Option<String>,
    names: std::vec::IntoIter<String>,
    after: Option<(String, String)>,
}

impl NameCursor {
    pub(super) fn open(
        kind_dir: PathBuf,
        scope: Option<&str>,
        after: Option<(&str, &str)>,
    ) -> Result<NameCursor, StoreError> {
        let after = after.map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        let not_before = |ns: &str| {
            after
                .as_ref()
                .is_none_or(|(after_ns, _)| ns >= after_ns.as_str())
        };
        let (names, pending) = match scope {
            Some(ns) => (
                Vec::new(),
                if not_before(ns) {
                    vec![ns.to_owned()]
                } else {
                    Vec::new()
                },
            ),
            None => {
                let (mut files, mut dirs) = read_dir_sorted(&kind_dir)?;
                resume("", &mut files, after.as_ref());
                dirs.retain(|ns| not_before(ns));
                dirs.reverse();
                (files, dirs)
            }
        };
        Ok(NameCursor {
            kind_dir,
            pending,
            current: None,
            names: names.into_iter(),
            after,
        })
    }

    pub(super) fn next_name(&mut self) -> Option<Result<(Option<String>, String), StoreError>> {
        loop {
            if let Some(name) = self.names.next() {
                return Some(Ok((self.current.clone(), name)));
            }
            let ns = self.pending.pop()?;
            let dir = self.kind_dir.join(&ns);
            let files = match real_dir(&dir) {
                Ok(true) => read_dir_sorted(&dir).map(|(files, _)| files),
                Ok(false) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            match files {
                Ok(mut files) => {
                    resume(&ns, &mut files, self.after.as_ref());
                    self.names = files.into_iter();
                    self.current = Some(ns);
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    pub(super) fn path_of(&self, namespace: Option<&str>, name: &str) -> PathBuf {
        match namespace {
            Some(ns) => self.kind_dir.join(ns).join(name),
            None => self.kind_dir.join(name),
        }
    }
}

/// Drops the names at or before `after` from one namespace's sorted names.
fn resume(namespace: &str, names: &mut Vec<String>, after: Option<&(String, String)>) {
    let Some((after_ns, after_name)) = after else {
        return;
    };
    match namespace.cmp(after_ns.as_str()) {
        std::cmp::Ordering::Less => names.clear(),
        std::cmp::Ordering::Equal => names.retain(|n| n.as_str() > after_name.as_str()),
        std::cmp::Ordering::Greater => {}
    }
}

/// The regular files and the real directories of `dir`, each sorted; symlinks,
/// dot-names and names that are not safe segments are left out. Missing = empty.
fn read_dir_sorted(dir: &Path) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((files, dirs)),
        Err(e) => return Err(io_err(StoreOp::ReadDir, dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(StoreOp::ReadDir, dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !is_safe_segment(&name) {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_file() => files.push(name),
            Ok(t) if t.is_dir() => dirs.push(name),
            Ok(_) => {}
            // Vanished since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(StoreOp::Stat, &entry.path())(e)),
        }
    }
    files.sort_unstable();
    dirs.sort_unstable();
    Ok((files, dirs))
}
