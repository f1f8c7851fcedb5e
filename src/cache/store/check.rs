//! What the store serves: only a file that is an object, and the object its path names.
//!
//! A file is read only when it is a regular file (never through a symlink) of at most
//! [`MAX_FILE`] bytes ([`read_bounded`]); it is served only when its head parses as a JSON
//! object whose `metadata.name` is the file's name, whose `metadata.namespace` is the
//! namespace directory's (absent or empty outside one), and whose `apiVersion`, when it has
//! one, is the kind directory's ([`check_object`]). The writer only ever stores files that
//! pass; what fails was planted or left behind (a YurtHub `tmp_<name>`, a hand copy
//! `ghost-pod` holding another pod, an editor's `settings.tmp`), and served under its path it
//! would be a second copy of another object, or an object no list of the cloud's ever held.
//!
//! A refusal answers as a file that is not there; the hub counts it in
//! `tinyhub_cache_refused_files_total{reason}` and warns once per path per 10 min
//! ([`refused`]). `tinyhub cache verify` reports the same refusals by their
//! [`Refusal::code`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::error::{StoreError, StoreOp, io_err};
use crate::cache::key::{CollectionKey, METADATA_DIR, ObjectKey, View};
use crate::cache::object::ObjectHead;
use crate::metrics::{METRICS, RefusedFile};

/// The largest file the store reads: the largest object the writer stores
/// (`writer::MAX_OBJECT_BYTES`, 8 MiB) and 64 KiB to spare. Anything larger was never
/// written by a hub (a planted or runaway file); reading it whole would cost its size in
/// heap. Spelled here because the store stands below the writer; a unit test holds the two
/// together.
pub(crate) const MAX_FILE: u64 = 8 * 1024 * 1024 + 64 * 1024;

/// The metadata view's objects' `apiVersion` ([`View::Metadata`]).
const METADATA_API_VERSION: &str = "meta.k8s.io/v1";

/// What a stored file must say to be served under its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expect<'a> {
    /// The namespace directory it is in; `None` directly in the kind directory (cluster
    /// scope).
    pub namespace: Option<&'a str>,
    /// The file's name.
    pub name: &'a str,
    /// The kind directory's `apiVersion` (`v1`, `apps/v1`, `meta.k8s.io/v1`); `None` when
    /// it cannot be told, and then not checked.
    pub api_version: Option<Cow<'a, str>>,
}

impl<'a> Expect<'a> {
    /// What the file `name` (in `namespace`'s directory, if any) of the kind directory
    /// `kind_rel` must hold. `kind_rel` is the kind's path below its component's directory,
    /// [`CollectionKey::dir_name`](crate::cache::key::CollectionKey::dir_name):
    /// `pods.v1.core` → `v1`, `deployments.v1.apps` → `apps/v1`,
    /// `partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core` → `meta.k8s.io/v1`; anything
    /// else → no apiVersion to check.
    pub(crate) fn for_kind_dir(
        kind_rel: &str,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> Expect<'a> {
        Expect {
            namespace,
            name,
            api_version: api_version_of_kind_dir(kind_rel).map(Cow::Owned),
        }
    }

    /// What the file of `key` must hold.
    pub(crate) fn for_key(key: &'a ObjectKey) -> Expect<'a> {
        Expect {
            namespace: key.namespace.as_deref(),
            name: &key.name,
            api_version: Some(Cow::Owned(Expect::for_collection(&key.collection))),
        }
    }

    /// The `apiVersion` every object of the collection `c` has, when it says one.
    pub(crate) fn for_collection(c: &CollectionKey) -> String {
        match c.view {
            View::Full => c.gvr.api_version(),
            View::Metadata => METADATA_API_VERSION.to_owned(),
        }
    }
}

/// The `apiVersion` of a kind directory's objects, from its path below the component's
/// directory; `None` when it is not `<resource>.<version>.<group>` (or the metadata view's
/// directory above one).
pub(crate) fn api_version_of_kind_dir(kind_rel: &str) -> Option<String> {
    let mut parts = kind_rel.split('/');
    let first = parts.next()?;
    match (parts.next(), parts.next()) {
        (None, _) => {
            let (_resource, rest) = first.split_once('.')?;
            let (version, group) = rest.split_once('.')?;
            if version.is_empty() || group.is_empty() || _resource.is_empty() {
                return None;
            }
            Some(if group == "core" {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            })
        }
        (Some(inner), None) if first == METADATA_DIR => {
            // The inner directory must be a kind's too, or it is no view of one.
            api_version_of_kind_dir(inner).map(|_| METADATA_API_VERSION.to_owned())
        }
        _ => None,
    }
}

/// Why a stored file is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Larger than [`MAX_FILE`]: never read.
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// Not a JSON object, or one without a name: no object of the cloud's.
    NotObject {
        /// What is wrong, for the log and `verify`.
        why: String,
    },
    /// An object, but another one than its path names (name, namespace or apiVersion).
    NamesOther {
        /// What it names instead.
        why: String,
    },
}

impl Refusal {
    /// [`Refusal::TooLarge`]'s code.
    pub(crate) const TOO_LARGE: &'static str = "too-large";
    /// [`Refusal::NotObject`]'s code.
    pub(crate) const NOT_OBJECT: &'static str = "not-object";
    /// [`Refusal::NamesOther`]'s code.
    pub(crate) const NAMES_OTHER: &'static str = "names-other";

    /// The refusal's code, as `tinyhub cache verify` prints it.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::TooLarge { .. } => Refusal::TOO_LARGE,
            Refusal::NotObject { .. } => Refusal::NOT_OBJECT,
            Refusal::NamesOther { .. } => Refusal::NAMES_OTHER,
        }
    }

    /// Its row of `tinyhub_cache_refused_files_total`.
    fn series(&self) -> RefusedFile {
        match self {
            Refusal::TooLarge { .. } => RefusedFile::Size,
            Refusal::NotObject { .. } => RefusedFile::NotObject,
            Refusal::NamesOther { .. } => RefusedFile::NamesOther,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooLarge { size } => {
                write!(f, "{size} bytes, over the {MAX_FILE}-byte bound: not read")
            }
            Refusal::NotObject { why } | Refusal::NamesOther { why } => f.write_str(why),
        }
    }
}

/// Whether `bytes` are the object `expect` describes, reading only the object's head
/// ([`ObjectHead`]): a JSON object, named `expect.name`, in `expect.namespace` (absent or
/// empty for none), and of `expect.api_version` when both say one.
pub(crate) fn check_object(bytes: &[u8], expect: &Expect<'_>) -> Result<(), Refusal> {
    checked_head(bytes, expect).map(drop)
}

/// [`check_object`], handing back the head it read, so that a reader needing the head
/// (an offline list: kind and resourceVersion) parses the file once.
pub(crate) fn checked_head<'b>(
    bytes: &'b [u8],
    expect: &Expect<'_>,
) -> Result<ObjectHead<'b>, Refusal> {
    if bytes.len() as u64 > MAX_FILE {
        return Err(Refusal::TooLarge {
            size: bytes.len() as u64,
        });
    }
    let head = ObjectHead::read(bytes).map_err(|e| Refusal::NotObject {
        why: format!("not a JSON object: {e}"),
    })?;
    let meta = head.metadata.as_ref();
    let name = meta.and_then(|m| m.name.as_deref()).unwrap_or("");
    if name.is_empty() {
        return Err(Refusal::NotObject {
            why: "an object without metadata.name".to_owned(),
        });
    }
    if name != expect.name {
        return Err(Refusal::NamesOther {
            why: format!("holds {name:?}, not {:?}", expect.name),
        });
    }
    let namespace = meta
        .and_then(|m| m.namespace.as_deref())
        .filter(|ns| !ns.is_empty());
    if namespace != expect.namespace {
        let said = |ns: Option<&str>| match ns {
            Some(ns) => format!("namespace {ns:?}"),
            None => "no namespace".to_owned(),
        };
        return Err(Refusal::NamesOther {
            why: format!("holds {}, not {}", said(namespace), said(expect.namespace)),
        });
    }
    if let (Some(found), Some(wanted)) = (head.api_version.as_deref(), &expect.api_version)
        && found != wanted.as_ref()
    {
        return Err(Refusal::NamesOther {
            why: format!("holds apiVersion {found:?}, not {wanted:?}"),
        });
    }
    Ok(head)
}

/// What [`read_bounded`] found at a path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileRead {
    /// A regular file's bytes, at most [`MAX_FILE`] of them.
    Bytes(Vec<u8>),
    /// Nothing there (or a parent is not a directory).
    Missing,
    /// A symlink: never followed.
    Symlink,
    /// A directory, FIFO, socket or device: not a regular file, never read.
    NotFile,
    /// A regular file larger than [`MAX_FILE`]: never read.
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
}

/// Reads the file at `path` if it is a regular file of at most [`MAX_FILE`] bytes: opened
/// `O_NOFOLLOW | O_NONBLOCK` (the kernel refuses a final symlink, a FIFO is never waited
/// on), judged by `fstat` of the open descriptor (no race with a rename), and read with the
/// bound even if it grows meanwhile. An error only for a failure [`FileRead`] does not
/// name (permission, I/O).
pub(crate) fn read_bounded(path: &Path) -> Result<FileRead, StoreError> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(FileRead::Missing);
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(FileRead::Symlink),
        Err(e) => return Err(io_err(StoreOp::Read, path)(e)),
    };
    let meta = file.metadata().map_err(io_err(StoreOp::Stat, path))?;
    if !meta.is_file() {
        return Ok(FileRead::NotFile);
    }
    if meta.len() > MAX_FILE {
        return Ok(FileRead::TooLarge { size: meta.len() });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the bound tells a file that grew past it since the `fstat`.
    (&file)
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err(StoreOp::Read, path))?;
    if bytes.len() as u64 > MAX_FILE {
        return Ok(FileRead::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(FileRead::Bytes(bytes))
}

/// What [`read_judged`] found at a path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Judged<E> {
    /// A regular file the judge passed: its bytes.
    Good(Vec<u8>),
    /// A regular file the judge refused: why, and its bytes.
    Bad(E, Vec<u8>),
    /// A regular file over [`MAX_FILE`]: never read.
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// No regular file: [`FileRead::Missing`], [`FileRead::Symlink`] or
    /// [`FileRead::NotFile`].
    Absent(FileRead),
}

/// A stored object read and checked ([`read_checked`]).
pub(crate) type Checked = Judged<Refusal>;

impl<E> Judged<E> {
    /// The bytes read, passed or not.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Judged::Good(bytes) | Judged::Bad(_, bytes) => Some(bytes),
            Judged::TooLarge { .. } | Judged::Absent(_) => None,
        }
    }
}

/// Reads the file at `path` bounded ([`read_bounded`]) and judges its bytes with `judge`:
/// the one read-then-check of a stored file (the hub's reads, `tinyhub cache get`, `ls`
/// and `verify`).
pub(crate) fn read_judged<E>(
    path: &Path,
    judge: impl FnOnce(&[u8]) -> Result<(), E>,
) -> Result<Judged<E>, StoreError> {
    Ok(match read_bounded(path)? {
        FileRead::Bytes(bytes) => match judge(&bytes) {
            Ok(()) => Judged::Good(bytes),
            Err(e) => Judged::Bad(e, bytes),
        },
        FileRead::TooLarge { size } => Judged::TooLarge { size },
        absent => Judged::Absent(absent),
    })
}

/// Reads the file at `path` as the object `expect` describes ([`check_object`]).
pub(crate) fn read_checked(path: &Path, expect: &Expect<'_>) -> Result<Checked, StoreError> {
    read_judged(path, |bytes| check_object(bytes, expect))
}

/// What the hub serves of a stored object read from `path`: the object; a file naming
/// another object, or too large, is not served ([`refused`]: counted, warned of); one that
/// is no object at all is served to its reader, which answers it as damaged (a get's 500, a
/// list's skipped file, each with its own warning), and only counted here. A symlink is
/// warned of, never followed.
pub(crate) fn serve(path: &Path, read: Checked) -> Option<Vec<u8>> {
    match read {
        Judged::Good(bytes) => Some(bytes),
        Judged::Bad(Refusal::NotObject { .. }, bytes) => {
            METRICS.refused_file(RefusedFile::NotObject);
            Some(bytes)
        }
        Judged::Bad(refusal, _) => {
            refused(path, &refusal);
            None
        }
        Judged::TooLarge { size } => {
            refused(path, &Refusal::TooLarge { size });
            None
        }
        Judged::Absent(FileRead::Symlink) => {
            log::warn!("cache: not following symlink {}", path.display());
            None
        }
        Judged::Absent(_) => None,
    }
}

/// How long a refused path stays quiet after its warning.
const WARN_EVERY: Duration = Duration::from_secs(600);

/// Paths warned of at most: past it, entries older than [`WARN_EVERY`] go, and a path that
/// still finds no room is counted without a line (a cache of that many planted files has
/// said so already).
const WARNED_CAP: usize = 1024;

/// When each refused path was last warned of.
static WARNED: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);

/// Counts a refused file in `tinyhub_cache_refused_files_total{reason}` and warns of it,
/// once per path per 10 min.
pub(crate) fn refused(path: &Path, refusal: &Refusal) {
    METRICS.refused_file(refusal.series());
    let now = Instant::now();
    let warn = {
        let mut warned = crate::lock(&WARNED);
        let warned = warned.get_or_insert_with(HashMap::new);
        match warned.get(path) {
            Some(at) if now.duration_since(*at) < WARN_EVERY => false,
            _ => {
                if warned.len() >= WARNED_CAP {
                    warned.retain(|_, at| now.duration_since(*at) < WARN_EVERY);
                }
                let room = warned.len() < WARNED_CAP || warned.contains_key(path);
                if room {
                    warned.insert(path.to_owned(), now);
                }
                room
            }
        }
    };
    if warn {
        log::warn!(
            "cache: not serving {}: {}: {refusal} (answered as missing; counted in \
             tinyhub_cache_refused_files_total; `tinyhub cache repair` moves it aside)",
            path.display(),
            refusal.code()
        );
    }
}
