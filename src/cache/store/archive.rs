//! The cache's archive format (`tinyhub cache export` / `import`): a gzip'd POSIX tar,
//! written by hand (ustar headers, plus a pax `x` record holding `path` when a path does not
//! fit ustar's 100 + 155 bytes; object paths reach ~450), and read back by a strict
//! streaming reader that refuses whatever a tinyhub did not write.
//!
//! Entries, in order:
//!
//! 1. `tinyhub-cache/MANIFEST.json`: [`Manifest`] (node name, time, whether credentials are
//!    in, the number of files and their bytes). It comes first, so a wrong node is refused
//!    before a byte is written.
//! 2. `cache/…`: directories and files below the cache root, as the store lays them out.
//! 3. `root/…`: with credentials only, files below `--root-dir` (`yurthub.conf`,
//!    `bootstrap-hub.conf`, `pki/<file>`).
//!
//! The reader takes regular files and directories only. Every path is relative, made of
//! segments the store could have made (no `..`, no absolute path, no empty segment), under
//! `cache/` or `root/`; a file is at most the store's largest file; a path comes once and is
//! never both a file and a directory; pax keys other than `path` and `size`, links, devices,
//! FIFOs and GNU records are refused. At the end the files and bytes must be the manifest's,
//! the two zero blocks there, anything after them zeros, and the gzip trailer (CRC and size)
//! right: a truncated archive fails one of those.
//!
//! This module knows the format and nothing of the store's rules for what a file holds
//! (`archive/import.rs` checks that) or where files come from (`archive/export.rs`).

mod export;
mod import;

use std::collections::HashSet;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};

use flate2::Compression;
use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Value, json};

use super::check::{Expect, Refusal, check_object};

use crate::cache::key::METADATA_DIR;
use crate::names::is_safe_segment;

pub(crate) use export::{ExportError, ExportOptions, ExportReport, export};
pub(crate) use import::{ImportOptions, ImportReport};

/// The manifest's path in the archive.
const MANIFEST_PATH: &str = "tinyhub-cache/MANIFEST.json";
/// The largest manifest read.
const MAX_MANIFEST: u64 = 64 * 1024;
/// The manifest's `format`.
const FORMAT: u64 = 1;
/// One tar block.
const BLOCK: usize = 512;
/// The largest pax record read (a path of ~450 bytes needs ~470).
const MAX_PAX: u64 = 4096;
/// Zeros read after the end-of-archive blocks at most (a tar's record padding is 10 KiB).
const MAX_TRAILING_ZEROS: u64 = 1 << 20;

/// Directories an archive may name per file the manifest counts: a cache path has at most
/// five segments, so a file needs at most four directories above it.
const DIRS_PER_FILE: u64 = 4;

/// Directories beyond those the files need: empty collections and namespaces. Without a
/// bound, an archive of nothing but directory entries would exhaust the inodes and the
/// reader's memory.
const SPARE_DIRS: u64 = 4096;

use super::journal::RECORD_FILES as CACHE_RECORDS;

/// The archive's first entry: what it holds, said before any of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The node whose cache it is (`--node-name` at export).
    pub node_name: String,
    /// When the export began, Unix seconds.
    pub created_at: i64,
    /// The exporting tinyhub's version.
    pub tinyhub: String,
    /// Whether token answers, `.grants` and `root/` are in.
    pub with_credentials: bool,
    /// Files after the manifest.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Manifest {
    fn to_json(&self) -> Vec<u8> {
        let doc = json!({
            "format": FORMAT,
            "nodeName": self.node_name,
            "createdAt": crate::logging::rfc3339(self.created_at),
            "tinyhub": self.tinyhub,
            "withCredentials": self.with_credentials,
            "files": self.files,
            "bytes": self.bytes,
        });
        let mut bytes = doc.to_string().into_bytes();
        bytes.push(b'\n');
        bytes
    }

    fn from_json(bytes: &[u8]) -> Result<Manifest, ArchiveError> {
        let bad = |why: String| ArchiveError::Manifest(why);
        let doc: Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        let field = |name: &str| doc.get(name).ok_or_else(|| bad(format!("no {name:?}")));
        let number = |name: &str| {
            field(name)?
                .as_u64()
                .ok_or_else(|| bad(format!("{name:?} is not a count")))
        };
        let text = |name: &str| {
            field(name)?
                .as_str()
                .ok_or_else(|| bad(format!("{name:?} is not a string")))
        };
        let format = number("format")?;
        if format != FORMAT {
            return Err(bad(format!(
                "format {format}; this tinyhub reads format {FORMAT}"
            )));
        }
        let created = text("createdAt")?;
        Ok(Manifest {
            node_name: text("nodeName")?.to_owned(),
            created_at: crate::tokens::parse_rfc3339(created)
                .ok_or_else(|| bad(format!("createdAt {created:?} is not an RFC 3339 time")))?,
            tinyhub: text("tinyhub")?.to_owned(),
            with_credentials: field("withCredentials")?
                .as_bool()
                .ok_or_else(|| bad("\"withCredentials\" is not a boolean".to_owned()))?,
            files: number("files")?,
            bytes: number("bytes")?,
        })
    }
}

/// Why a file may not be the one at its path below the cache: a code as `tinyhub cache
/// verify` prints it (`foreign`, `not-object`, `names-other`, `too-large`) and the detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRefusal {
    /// The code.
    pub code: &'static str,
    /// What is wrong.
    pub detail: String,
}

impl FileRefusal {
    fn foreign(detail: &str) -> FileRefusal {
        FileRefusal {
            code: "foreign",
            detail: detail.to_owned(),
        }
    }
}

impl From<Refusal> for FileRefusal {
    fn from(r: Refusal) -> FileRefusal {
        FileRefusal {
            code: r.code(),
            detail: r.to_string(),
        }
    }
}

impl fmt::Display for FileRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

/// Whether `bytes` may be the file at `rel` below the cache: a record or a document at the
/// top, a token answer, or an object naming the path it is at (the store's own check, which
/// the hub applies before serving).
pub(crate) fn check_cache_file(rel: &str, bytes: &[u8]) -> Result<(), FileRefusal> {
    let segments: Vec<&str> = rel.split('/').collect();
    let is_json = || {
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(drop)
            .map_err(|e| FileRefusal {
                code: "not-object",
                detail: format!("not JSON: {e}"),
            })
    };
    match segments.as_slice() {
        [record] if CACHE_RECORDS.contains(record) => is_json(),
        [document] if *document == "version" || document.starts_with('_') => is_json(),
        [_] => Err(FileRefusal::foreign("not a cache document")),
        // A TokenRequest answer: an object (its name is the service account's).
        [_, "tokens", namespace, account, _] => Ok(check_object(
            bytes,
            &Expect::for_kind_dir("tokens", Some(namespace), account),
        )?),
        [_, kind, rest @ ..] => {
            let (kind_rel, rest) = match rest {
                [inner, rest @ ..] if *kind == METADATA_DIR => (format!("{kind}/{inner}"), rest),
                _ => ((*kind).to_owned(), rest),
            };
            let (namespace, name) = match rest {
                [name] => (None, *name),
                [namespace, name] => (Some(*namespace), *name),
                _ => return Err(FileRefusal::foreign("not at an object's depth")),
            };
            if !kind_rel.contains('.') {
                return Err(FileRefusal::foreign("not in a kind directory"));
            }
            Ok(check_object(
                bytes,
                &Expect::for_kind_dir(&kind_rel, namespace, name),
            )?)
        }
        _ => Err(FileRefusal::foreign("not at an object's depth")),
    }
}

/// Whether the store could have made a directory at `rel` below the cache: a component, a
/// kind (`<r>.<v>.<g>`, or one below the metadata view's), a namespace in one, or the token
/// answers' `tokens/<namespace>/<service account>`.
pub(crate) fn check_cache_dir(rel: &str) -> Result<(), FileRefusal> {
    let is_kind = |kind: &str| kind.contains('.') && kind != METADATA_DIR;
    let segments: Vec<&str> = rel.split('/').collect();
    let fits = match segments.as_slice() {
        [_] => true,
        [_, "tokens", rest @ ..] => rest.len() <= 2,
        [_, view] => *view == METADATA_DIR || is_kind(view),
        [_, view, kind, rest @ ..] if *view == METADATA_DIR => is_kind(kind) && rest.len() <= 1,
        [_, kind, _namespace] => is_kind(kind),
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(FileRefusal::foreign(
            "a directory where the cache holds none (an object's place, or too deep)",
        ))
    }
}

/// Where an entry belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Place {
    /// Below the cache root.
    Cache,
    /// Below `--root-dir` (credentials).
    Root,
}

impl Place {
    fn prefix(self) -> &'static str {
        match self {
            Place::Cache => "cache",
            Place::Root => "root",
        }
    }
}

/// A path in the archive: its place and the path below it (`/`-separated, checked).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ArchivePath {
    /// Below the cache or the root directory.
    pub place: Place,
    /// The path below it.
    pub rel: String,
}

impl ArchivePath {
    /// `rel` below the cache root.
    pub(crate) fn cache(rel: impl Into<String>) -> ArchivePath {
        ArchivePath {
            place: Place::Cache,
            rel: rel.into(),
        }
    }

    /// `rel` below `--root-dir`.
    pub(crate) fn root(rel: impl Into<String>) -> ArchivePath {
        ArchivePath {
            place: Place::Root,
            rel: rel.into(),
        }
    }

    /// Its segments.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &str> {
        self.rel.split('/')
    }

    /// Parses a path as the archive holds it; `Err` says why it is refused.
    fn parse(path: &str) -> Result<ArchivePath, &'static str> {
        if path.starts_with('/') {
            return Err("an absolute path");
        }
        if path.split('/').any(|s| s == "..") {
            return Err("a path with \"..\"");
        }
        let (prefix, rel) = path
            .split_once('/')
            .ok_or("a path outside cache/ and root/")?;
        let place = match prefix {
            "cache" => Place::Cache,
            "root" => Place::Root,
            _ => return Err("a path outside cache/ and root/"),
        };
        let found = ArchivePath {
            place,
            rel: rel.to_owned(),
        };
        if found.is_valid() {
            Ok(found)
        } else {
            Err("a path the cache cannot hold")
        }
    }

    /// Whether the store could have written this path: safe segments (the cache's records
    /// and nothing else with a leading dot, at the top only), at most 5 deep below the cache
    /// (`<c>/partialobjectmetadatas.v1.meta.k8s.io/<kind>/<ns>/<name>`, and token answers
    /// `<c>/tokens/<ns>/<sa>/<digest>`); below the root, the identity's files only.
    pub(crate) fn is_valid(&self) -> bool {
        let segments: Vec<&str> = self.segments().collect();
        match self.place {
            Place::Cache => {
                let top_record = segments.len() == 1 && CACHE_RECORDS.contains(&segments[0]);
                top_record || (segments.len() <= 5 && segments.iter().all(|s| is_safe_segment(s)))
            }
            Place::Root => match segments.as_slice() {
                ["yurthub.conf" | "bootstrap-hub.conf" | "pki"] => true,
                ["pki", file] => is_safe_segment(file),
                _ => false,
            },
        }
    }
}

impl fmt::Display for ArchivePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.place.prefix(), self.rel)
    }
}

/// Writes an archive: the manifest, then each entry as it is given.
pub(crate) struct ArchiveWriter<W: Write> {
    out: GzEncoder<W>,
    mtime: i64,
}

impl<W: Write> ArchiveWriter<W> {
    /// Starts an archive on `out` with its manifest.
    pub(crate) fn new(out: W, manifest: &Manifest) -> io::Result<ArchiveWriter<W>> {
        let mut writer = ArchiveWriter {
            out: GzEncoder::new(out, Compression::default()),
            mtime: manifest.created_at,
        };
        writer.entry(MANIFEST_PATH, b'0', &manifest.to_json())?;
        Ok(writer)
    }

    /// Adds a directory.
    pub(crate) fn dir(&mut self, path: &ArchivePath) -> io::Result<()> {
        self.entry(&format!("{path}/"), b'5', &[])
    }

    /// Adds a file with its whole content.
    pub(crate) fn file(&mut self, path: &ArchivePath, bytes: &[u8]) -> io::Result<()> {
        self.entry(&path.to_string(), b'0', bytes)
    }

    /// Ends the archive (two zero blocks, the gzip trailer) and hands back the output.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0; 2 * BLOCK])?;
        self.out.finish()
    }

    fn entry(&mut self, path: &str, kind: u8, body: &[u8]) -> io::Result<()> {
        let name = match ustar_name(path) {
            Some(name) => name,
            None => {
                // A pax record carries the path; the ustar name is only a hint for old readers.
                let record = pax_record("path", path);
                let header = header(
                    &format!("PaxHeaders/{}", short(path)),
                    b'x',
                    record.len(),
                    self.mtime,
                );
                self.out.write_all(&header)?;
                self.write_body(record.as_bytes())?;
                (String::new(), short(path).to_owned())
            }
        };
        let mut block = header(&name.1, kind, body.len(), self.mtime);
        if !name.0.is_empty() {
            block[345..345 + name.0.len()].copy_from_slice(name.0.as_bytes());
            set_checksum(&mut block);
        }
        self.out.write_all(&block)?;
        self.write_body(body)
    }

    fn write_body(&mut self, body: &[u8]) -> io::Result<()> {
        self.out.write_all(body)?;
        let pad = (BLOCK - body.len() % BLOCK) % BLOCK;
        self.out.write_all(&[0; BLOCK][..pad])
    }
}

/// `path` as ustar's (prefix, name) when it fits: name ≤ 100 bytes, prefix ≤ 155, split at a `/`.
fn ustar_name(path: &str) -> Option<(String, String)> {
    if path.len() <= 100 {
        return Some((String::new(), path.to_owned()));
    }
    // The name must end the path and begin after a '/'; the prefix is everything before.
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let split = trimmed
        .char_indices()
        .filter(|&(i, c)| c == '/' && i <= 155 && path.len() - i - 1 <= 100)
        .map(|(i, _)| i)
        .next()?;
    Some((path[..split].to_owned(), path[split + 1..].to_owned()))
}

/// The last 90 bytes of `path`, cut at a character boundary (a pax header's ustar name).
fn short(path: &str) -> &str {
    let mut start = path.len().saturating_sub(90);
    while !path.is_char_boundary(start) {
        start += 1;
    }
    &path[start..]
}

/// One pax record: `<length> <key>=<value>\n`, the length counting itself.
fn pax_record(key: &str, value: &str) -> String {
    let rest = key.len() + value.len() + 3;
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    format!("{len} {key}={value}\n")
}

/// A ustar header block.
fn header(name: &str, kind: u8, size: usize, mtime: i64) -> [u8; BLOCK] {
    let mut block = [0u8; BLOCK];
    let name = name.as_bytes();
    block[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
    let mode = if kind == b'5' { 0o700 } else { 0o600 };
    octal(&mut block[100..108], mode);
    octal(&mut block[108..116], 0);
    octal(&mut block[116..124], 0);
    octal(&mut block[124..136], size as u64);
    octal(&mut block[136..148], u64::try_from(mtime).unwrap_or(0));
    block[156] = kind;
    block[257..263].copy_from_slice(b"ustar\0");
    block[263..265].copy_from_slice(b"00");
    set_checksum(&mut block);
    block
}

/// Writes `value` in octal, zero-padded, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = format!("{value:0width$o}", width = field.len() - 1);
    let digits = &digits.as_bytes()[digits.len() - (field.len() - 1)..];
    field[..digits.len()].copy_from_slice(digits);
    field[field.len() - 1] = 0;
}

fn checksum(block: &[u8; BLOCK]) -> u64 {
    block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum()
}

fn set_checksum(block: &mut [u8; BLOCK]) {
    let sum = checksum(block);
    let digits = format!("{sum:06o}\0 ");
    block[148..156].copy_from_slice(digits.as_bytes());
}

/// Why an archive was refused.
#[derive(Debug)]
pub(crate) enum ArchiveError {
    /// The stream itself is broken: not gzip, a bad CRC, cut short, a bad tar block.
    Damaged(String),
    /// The manifest is missing or unreadable.
    Manifest(String),
    /// An entry the reader refuses, named as the archive names it.
    Entry {
        /// The entry's path as written in the archive.
        path: String,
        /// Why.
        why: String,
    },
    /// The files or bytes at the end are not the manifest's.
    Counts {
        /// The manifest's (files, bytes).
        said: (u64, u64),
        /// What the archive held, as far as it was read.
        found: (u64, u64),
    },
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Damaged(why) => write!(f, "the archive is damaged: {why}"),
            ArchiveError::Manifest(why) => write!(f, "the archive's manifest: {why}"),
            ArchiveError::Entry { path, why } => write!(f, "archive entry {path:?}: {why}"),
            ArchiveError::Counts { said, found } => write!(
                f,
                "the archive holds {} files of {} bytes, its manifest says {} of {}: cut short or altered",
                found.0, found.1, said.0, said.1
            ),
        }
    }
}

impl std::error::Error for ArchiveError {}

fn damaged(e: io::Error) -> ArchiveError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        ArchiveError::Damaged("it ends early (truncated)".to_owned())
    } else {
        ArchiveError::Damaged(e.to_string())
    }
}

/// One entry read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A directory.
    Dir(ArchivePath),
    /// A file and its whole content (at most the reader's `max_file` bytes).
    File(ArchivePath, Vec<u8>),
}

/// Reads an archive strictly, one entry at a time; see the module doc for what it refuses.
pub(crate) struct ArchiveReader<R: Read> {
    src: GzDecoder<BufReader<R>>,
    manifest: Manifest,
    max_file: u64,
    files: u64,
    bytes: u64,
    /// Every path seen, and every directory implied by one: no path twice, never both.
    files_seen: HashSet<ArchivePath>,
    dirs_seen: HashSet<ArchivePath>,
    done: bool,
}

impl<R: Read> ArchiveReader<R> {
    /// Opens an archive and reads its manifest; files larger than `max_file` are refused.
    pub(crate) fn open(src: R, max_file: u64) -> Result<ArchiveReader<R>, ArchiveError> {
        let mut src = GzDecoder::new(BufReader::new(src));
        let manifest = match read_header(&mut src, MAX_MANIFEST)? {
            Some(Raw {
                path,
                kind: b'0',
                body,
            }) if path == MANIFEST_PATH => Manifest::from_json(&body)?,
            Some(raw) => {
                return Err(ArchiveError::Manifest(format!(
                    "the first entry is {:?}, not {MANIFEST_PATH}",
                    raw.path
                )));
            }
            None => return Err(ArchiveError::Manifest("the archive is empty".to_owned())),
        };
        Ok(ArchiveReader {
            src,
            manifest,
            max_file,
            files: 0,
            bytes: 0,
            files_seen: HashSet::new(),
            dirs_seen: HashSet::new(),
            done: false,
        })
    }

    /// The manifest.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The next entry; `None` after the last, once the end was checked (counts, padding,
    /// gzip trailer).
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, ArchiveError> {
        if self.done {
            return Ok(None);
        }
        let Some(raw) = read_header(&mut self.src, self.max_file)? else {
            self.done = true;
            self.finish()?;
            return Ok(None);
        };
        let refuse = |why: &str| ArchiveError::Entry {
            path: raw.path.clone(),
            why: why.to_owned(),
        };
        let path = raw.path.strip_suffix('/').filter(|_| raw.kind == b'5');
        let path = ArchivePath::parse(path.unwrap_or(&raw.path)).map_err(refuse)?;
        if self.files_seen.contains(&path) || self.dirs_seen.contains(&path) {
            return Err(refuse("comes twice, or is both a file and a directory"));
        }
        // Every directory above it: none may be a file.
        let mut above = path.clone();
        while let Some((parent, _)) = above.rel.rsplit_once('/') {
            above.rel = parent.to_owned();
            if self.files_seen.contains(&above) {
                return Err(refuse("is below a file"));
            }
            self.dirs_seen.insert(above.clone());
        }
        if raw.kind == b'5' {
            self.dirs_seen.insert(path.clone());
        }
        let max_dirs = self
            .manifest
            .files
            .saturating_mul(DIRS_PER_FILE)
            .saturating_add(SPARE_DIRS);
        if self.dirs_seen.len() as u64 > max_dirs {
            return Err(refuse(&format!(
                "more than {max_dirs} directories, more than {} files can need",
                self.manifest.files
            )));
        }
        match raw.kind {
            b'5' => Ok(Some(Entry::Dir(path))),
            _ => {
                self.files += 1;
                self.bytes += raw.body.len() as u64;
                if self.files > self.manifest.files || self.bytes > self.manifest.bytes {
                    return Err(self.counts());
                }
                self.files_seen.insert(path.clone());
                Ok(Some(Entry::File(path, raw.body)))
            }
        }
    }

    fn counts(&self) -> ArchiveError {
        ArchiveError::Counts {
            said: (self.manifest.files, self.manifest.bytes),
            found: (self.files, self.bytes),
        }
    }

    /// After the end blocks: the counts, then only zeros up to the gzip trailer, which the
    /// decoder checks when it reaches it, and nothing after the gzip member.
    fn finish(&mut self) -> Result<(), ArchiveError> {
        if (self.files, self.bytes) != (self.manifest.files, self.manifest.bytes) {
            return Err(self.counts());
        }
        let mut rest = (&mut self.src).take(MAX_TRAILING_ZEROS + 1);
        let mut buf = [0u8; 4096];
        let mut read = 0u64;
        loop {
            let n = rest.read(&mut buf).map_err(damaged)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            if buf[..n].iter().any(|&b| b != 0) || read > MAX_TRAILING_ZEROS {
                return Err(ArchiveError::Damaged(
                    "data after the end of the archive".to_owned(),
                ));
            }
        }
        let after = self.src.get_mut().fill_buf().map_err(damaged)?;
        if !after.is_empty() {
            return Err(ArchiveError::Damaged(
                "data after the end of the gzip stream".to_owned(),
            ));
        }
        Ok(())
    }
}

/// One header (with its pax record folded in) and its body.
struct Raw {
    path: String,
    kind: u8,
    body: Vec<u8>,
}

/// Reads the next entry; `None` at the end-of-archive blocks.
fn read_header(src: &mut impl Read, max_file: u64) -> Result<Option<Raw>, ArchiveError> {
    let mut pax_path: Option<String> = None;
    let mut pax_size: Option<u64> = None;
    let mut saw_pax = false;
    loop {
        let mut block = [0u8; BLOCK];
        src.read_exact(&mut block).map_err(damaged)?;
        if block.iter().all(|&b| b == 0) {
            if saw_pax {
                return Err(ArchiveError::Damaged(
                    "a pax record with no entry after it".to_owned(),
                ));
            }
            let mut second = [0u8; BLOCK];
            src.read_exact(&mut second).map_err(damaged)?;
            if second.iter().any(|&b| b != 0) {
                return Err(ArchiveError::Damaged(
                    "a zero block amid entries".to_owned(),
                ));
            }
            return Ok(None);
        }
        if &block[257..263] != b"ustar\0" || &block[263..265] != b"00" {
            return Err(ArchiveError::Damaged(
                "not a POSIX tar header (ustar magic)".to_owned(),
            ));
        }
        let stored = parse_octal(&block[148..156])
            .ok_or_else(|| ArchiveError::Damaged("a header checksum is unreadable".to_owned()))?;
        if stored != checksum(&block) {
            return Err(ArchiveError::Damaged(
                "a header checksum is wrong".to_owned(),
            ));
        }
        let name = text(&block[..100]);
        let prefix = text(&block[345..500]);
        let path = match &pax_path {
            Some(p) => p.clone(),
            None if prefix.is_empty() => name.clone(),
            None => format!("{prefix}/{name}"),
        };
        let refuse = |why: &str| ArchiveError::Entry {
            path: path.clone(),
            why: why.to_owned(),
        };
        let size = match pax_size {
            Some(size) => size,
            None => parse_octal(&block[124..136]).ok_or_else(|| refuse("an unreadable size"))?,
        };
        let kind = block[156];
        match kind {
            b'x' if saw_pax => return Err(refuse("two pax records for one entry")),
            b'x' => {
                if size > MAX_PAX {
                    return Err(refuse("a pax record too large"));
                }
                let body = read_body(src, size)?;
                let (p, s) = parse_pax(&body).map_err(|why| refuse(&why.to_string()))?;
                pax_path = p;
                pax_size = s;
                saw_pax = true;
                continue;
            }
            b'0' | 0 => {
                if size > max_file {
                    return Err(refuse(&format!(
                        "a file of {size} bytes, more than the cache's largest ({max_file})"
                    )));
                }
                let body = read_body(src, size)?;
                return Ok(Some(Raw {
                    path,
                    kind: b'0',
                    body,
                }));
            }
            b'5' if size == 0 => {
                return Ok(Some(Raw {
                    path,
                    kind,
                    body: Vec::new(),
                }));
            }
            b'5' => return Err(refuse("a directory with a size")),
            b'1' => return Err(refuse("a hard link")),
            b'2' => return Err(refuse("a symlink")),
            b'3' | b'4' => return Err(refuse("a device")),
            b'6' => return Err(refuse("a FIFO")),
            b'g' => return Err(refuse("a global pax record")),
            b'L' | b'K' => return Err(refuse("a GNU long-name record")),
            _ => return Err(refuse("an entry that is not a file or a directory")),
        }
    }
}

/// Reads `size` bytes of body and the padding to the next block.
fn read_body(src: &mut impl Read, size: u64) -> Result<Vec<u8>, ArchiveError> {
    let len = usize::try_from(size)
        .map_err(|_| ArchiveError::Damaged("an entry too large for this machine".to_owned()))?;
    let mut body = vec![0u8; len];
    src.read_exact(&mut body).map_err(damaged)?;
    let pad = (BLOCK - len % BLOCK) % BLOCK;
    let mut padding = [0u8; BLOCK];
    src.read_exact(&mut padding[..pad]).map_err(damaged)?;
    Ok(body)
}

/// Why a pax record is refused.
enum PaxRefusal {
    /// It cannot be read.
    Unreadable(&'static str),
    /// It holds a key the reader does not take.
    Key(String),
}

impl fmt::Display for PaxRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PaxRefusal::Unreadable(why) => f.write_str(why),
            PaxRefusal::Key(key) => write!(f, "pax key {key:?} (only path and size are read)"),
        }
    }
}

/// The `path` and `size` of a pax record; any other key is refused.
fn parse_pax(mut body: &[u8]) -> Result<(Option<String>, Option<u64>), PaxRefusal> {
    let mut path = None;
    let mut size = None;
    while !body.is_empty() {
        let space = body
            .iter()
            .position(|&b| b == b' ')
            .ok_or(PaxRefusal::Unreadable("an unreadable pax record"))?;
        let len: usize = std::str::from_utf8(&body[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|&len| len > space + 1 && len <= body.len())
            .ok_or(PaxRefusal::Unreadable("an unreadable pax record length"))?;
        let record = &body[space + 1..len];
        body = &body[len..];
        let record = record
            .strip_suffix(b"\n")
            .ok_or(PaxRefusal::Unreadable("a pax record without its newline"))?;
        let record = std::str::from_utf8(record)
            .map_err(|_| PaxRefusal::Unreadable("a pax record not in UTF-8"))?;
        let (key, value) = record
            .split_once('=')
            .ok_or(PaxRefusal::Unreadable("a pax record without '='"))?;
        match key {
            "path" => path = Some(value.to_owned()),
            "size" => {
                size = Some(
                    value
                        .parse()
                        .map_err(|_| PaxRefusal::Unreadable("an unreadable pax size"))?,
                )
            }
            other => return Err(PaxRefusal::Key(other.to_owned())),
        }
    }
    Ok((path, size))
}

/// A NUL-terminated header field as text (lossy: a bad byte then fails the path checks).
fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// An octal header field: digits, then NULs or spaces; base-256 (a high bit) is refused.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_start_matches(' ').trim_end_matches(['\0', ' ']);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u64::from_str_radix(digits, 8).ok()
}

#[cfg(test)]
mod tests;
