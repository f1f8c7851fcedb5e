//! The file work of `tinyhub cache repair`, run with the cache's lock held and no hub:
//! moving what `verify` refuses into `<root>/.quarantine/<UTC time>/` (never deleting it),
//! setting modes and owners in place, and rolling a complete journal forward as the hub's
//! recovery would.
//!
//! Each step is one `rename`, `chmod` or `chown`, its directories fsynced, so a repair
//! killed at any moment leaves every byte either in the cache or in the quarantine, and
//! running it again finishes (the files not moved yet are still refused). Each run moves
//! into a directory of its own (`<time>`, `<time>-1`, …), so nothing quarantined before is
//! ever replaced. The hub, `verify` and export never look into `.quarantine`.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::{StoreError, StoreOp, io_err};
use super::fs::{DIR_MODE, FILE_MODE, make_dir, parent_of, sync_dir, write_new_file};
use super::journal::{ApplyHooks, apply_journal, journal_is_complete, journal_seq};
use super::view::QUARANTINE;

/// The name of the summary a repair leaves in its quarantine directory.
pub(crate) const REPORT_FILE: &str = "REPAIR.json";

/// One repair's quarantine directory, made when the first file is moved.
#[derive(Debug)]
pub(crate) struct Quarantine {
    root: PathBuf,
    /// Its name below `.quarantine` (`20261206T153000Z`), fixed at the start.
    stamp: String,
    /// The directory, once made.
    dir: Option<PathBuf>,
    /// Whether `.quarantine` itself was no directory and went into it (see `displace`).
    displaced: bool,
}

impl Quarantine {
    /// A quarantine for a repair of the cache at `root` starting at `now`.
    pub(crate) fn new(root: &Path, now: SystemTime) -> Quarantine {
        Quarantine {
            root: root.to_owned(),
            stamp: stamp(now),
            dir: None,
            displaced: false,
        }
    }

    /// The directory below the root, as a repair reports it (`.quarantine/<time>`), once
    /// something went into it.
    pub(crate) fn rel_dir(&self) -> Option<String> {
        let dir = self.dir.as_ref()?;
        let name = dir.file_name()?.to_string_lossy();
        Some(format!("{QUARANTINE}/{name}"))
    }

    /// Makes `.quarantine` and this run's directory in it: the stamp, or the stamp with
    /// `-1`, `-2`, … when a run in the same second made it already (never shared).
    fn dir(&mut self) -> Result<PathBuf, StoreError> {
        if let Some(dir) = &self.dir {
            return Ok(dir.clone());
        }
        let top = self.root.join(QUARANTINE);
        if fs::symlink_metadata(&top).is_ok_and(|m| !m.is_dir()) {
            return self.displace(&top);
        }
        if make_dir(&top)? {
            sync_dir(&self.root)?;
        }
        for n in 0..1000 {
            let name = match n {
                0 => self.stamp.clone(),
                n => format!("{}-{n}", self.stamp),
            };
            let dir = top.join(name);
            match DirBuilder::new().mode(DIR_MODE).create(&dir) {
                Ok(()) => {
                    sync_dir(&top)?;
                    self.dir = Some(dir.clone());
                    return Ok(dir);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err(StoreOp::CreateDir, &dir)(e)),
            }
        }
        let e = io::Error::new(io::ErrorKind::AlreadyExists, "1000 repairs in one second");
        Err(io_err(StoreOp::CreateDir, &top)(e))
    }

    /// `.quarantine` is a file or a symlink, so nothing can be made in it: a quarantine is
    /// made beside it under another name (`.quarantine.<time>.<n>`), the offender moved into
    /// this run's directory there, and the new one renamed to `.quarantine`. Never through
    /// the symlink. Killed midway, the new one is a foreign root entry the next repair moves
    /// whole into its own quarantine: nothing is lost, and the next run gets on.
    fn displace(&mut self, top: &Path) -> Result<PathBuf, StoreError> {
        let mut fresh = None;
        for n in 0..1000 {
            let path = self.root.join(format!("{QUARANTINE}.{}.{n}", self.stamp));
            match DirBuilder::new().mode(DIR_MODE).create(&path) {
                Ok(()) => {
                    fresh = Some(path);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err(StoreOp::CreateDir, &path)(e)),
            }
        }
        let Some(fresh) = fresh else {
            let e = io::Error::new(io::ErrorKind::AlreadyExists, "1000 repairs in one second");
            return Err(io_err(StoreOp::CreateDir, top)(e));
        };
        let run = fresh.join(&self.stamp);
        make_dir(&run)?;
        sync_dir(&fresh)?;
        sync_dir(&self.root)?;
        let kept = run.join(QUARANTINE);
        fs::rename(top, &kept).map_err(io_err(StoreOp::Rename, &kept))?;
        sync_dir(&run)?;
        fs::rename(&fresh, top).map_err(io_err(StoreOp::Rename, top))?;
        sync_dir(&self.root)?;
        self.displaced = true;
        let dir = top.join(&self.stamp);
        self.dir = Some(dir.clone());
        Ok(dir)
    }

    /// Moves the entry at `rel` (below the root; a file, a symlink itself or a directory
    /// with all it holds) to the same path below this run's directory, parents made 0700;
    /// `false` when it is gone already. Both directories are fsynced: once this returns,
    /// the move survives a crash.
    pub(crate) fn move_in(&mut self, rel: &str) -> Result<bool, StoreError> {
        check_rel(rel)?;
        if rel == QUARANTINE {
            // Only a `.quarantine` that is no directory is ever moved: by `dir` itself.
            self.dir()?;
            return Ok(self.displaced);
        }
        let from = self.root.join(rel);
        if fs::symlink_metadata(&from).is_err() {
            return Ok(false);
        }
        let dir = self.dir()?;
        let to = dir.join(rel);
        let mut made = Vec::new();
        let mut parent = parent_of(&to).to_owned();
        while parent != dir && !parent.is_dir() {
            made.push(parent.clone());
            parent = parent_of(&parent).to_owned();
        }
        for new in made.iter().rev() {
            make_dir(new)?;
            sync_dir(parent_of(new))?;
        }
        match fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(StoreOp::Rename, &to)(e)),
        }
        sync_dir(parent_of(&to))?;
        sync_dir(parent_of(&from))?;
        Ok(true)
    }

    /// Rolls the complete journals `rels` (root entries, `.journal.<n>`) forward in the
    /// order they were committed, with the store's own applier, as the hub's recovery does
    /// (an import's too), except that nothing is deleted: a file the journal deletes, and
    /// then the applied journal itself, move into this run's directory. Idempotent: a run
    /// killed halfway is finished by the next. Returns the journals in the order applied.
    pub(crate) fn roll_forward(&mut self, rels: &[String]) -> Result<Vec<String>, StoreError> {
        let mut ordered: Vec<(u64, &String)> = Vec::new();
        for rel in rels {
            check_rel(rel)?;
            let Some(seq) = journal_seq(rel) else {
                return Err(StoreError::UnsafeKey {
                    field: "journal",
                    value: rel.clone(),
                });
            };
            ordered.push((seq, rel));
        }
        ordered.sort();
        let root = self.root.clone();
        let mut done = Vec::new();
        for (_, rel) in ordered {
            let journal = root.join(rel);
            if !journal_is_complete(&journal)? {
                // Not one to apply (it changed since the walk): verify says what it is.
                continue;
            }
            let applied = apply_journal(&root, &journal, self, &mut |_| Ok(()))?;
            if let Some(e) = applied.first_error {
                // Kept: the next run tries again, and applying twice is harmless.
                return Err(e);
            }
            for dir in &applied.touched {
                sync_dir(dir)?;
            }
            self.move_in(rel)?;
            done.push(rel.clone());
        }
        Ok(done)
    }

    /// Writes the repair's summary as `REPAIR.json` in this run's directory (made if
    /// nothing was moved), 0600, flushed.
    pub(crate) fn write_report(&mut self, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let dir = self.dir()?;
        let path = dir.join(REPORT_FILE);
        write_new_file(&path, bytes, true)?;
        sync_dir(&dir)?;
        Ok(path)
    }
}

/// A journal applied by a repair: no index to tell (no hub runs), and a delete moves the
/// file into the quarantine.
impl ApplyHooks for Quarantine {
    fn changing(&mut self, _rel: Option<&str>) {}

    fn delete(&mut self, rel: &str) -> Result<bool, StoreError> {
        self.move_in(rel)
    }
}

/// Sets the entry at `rel` (below `root`; `.` for the root) to 0600, or 0700 when
/// `is_dir`, in place; never through a symlink (the walk reported those apart).
pub(crate) fn fix_mode(root: &Path, rel: &str, is_dir: bool) -> Result<(), StoreError> {
    let path = entry_path(root, rel)?;
    let meta = match fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        // Moved away (quarantined) since the walk: nothing to set.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(StoreOp::Stat, &path)(e)),
    };
    if meta.file_type().is_symlink() || meta.is_dir() != is_dir {
        // Changed since the walk: the next verify says what it is now.
        return Ok(());
    }
    let mode = if is_dir { DIR_MODE } else { FILE_MODE };
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
        .map_err(io_err(StoreOp::Write, &path))
}

/// Gives the entry at `rel` (below `root`) to the root's owner; never through a symlink.
pub(crate) fn fix_owner(root: &Path, rel: &str) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let owner = fs::symlink_metadata(root).map_err(io_err(StoreOp::Stat, root))?;
    let path = entry_path(root, rel)?;
    std::os::unix::fs::lchown(&path, Some(owner.uid()), Some(owner.gid()))
        .map_err(io_err(StoreOp::Write, &path))
}

/// `rel` must be a relative path below the root: segments neither empty, `.` nor `..`, no
/// NUL. The walk names what it found, so a foreign name (`a%b`, a control character) must
/// still move; nothing outside the root is ever touched.
fn check_rel(rel: &str) -> Result<(), StoreError> {
    let safe = !rel.is_empty()
        && !rel.starts_with('/')
        && !rel.contains('\0')
        && rel
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if safe {
        Ok(())
    } else {
        Err(StoreError::UnsafeKey {
            field: "path",
            value: rel.to_owned(),
        })
    }
}

/// The path of `rel` below `root`, `.` being the root.
fn entry_path(root: &Path, rel: &str) -> Result<PathBuf, StoreError> {
    if rel == "." {
        return Ok(root.to_owned());
    }
    check_rel(rel)?;
    Ok(root.join(rel))
}

/// `yyyymmddThhmmssZ`, UTC.
fn stamp(now: SystemTime) -> String {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let text = crate::logging::rfc3339(secs);
    // `2026-12-06T15:30:00Z` → `20261206T153000Z`.
    text.chars().filter(|c| !matches!(c, '-' | ':')).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::temp_dir::TempDir;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_moved_file_keeps_its_path_below_a_directory_of_its_own_run() {
        let dir = TempDir::new("quarantine");
        let root = dir.0.clone();
        fs::create_dir_all(root.join("kubelet/pods.v1.core/default")).unwrap();
        fs::write(root.join("kubelet/pods.v1.core/default/ghost"), "x").unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1_796_571_000);
        let mut first = Quarantine::new(&root, at);
        assert!(first.move_in("kubelet/pods.v1.core/default/ghost").unwrap());
        assert!(!first.move_in("kubelet/pods.v1.core/default/ghost").unwrap());
        let rel = first.rel_dir().unwrap();
        assert!(rel.starts_with(".quarantine/20261"), "{rel}");
        assert_eq!(
            fs::read(root.join(&rel).join("kubelet/pods.v1.core/default/ghost")).unwrap(),
            b"x"
        );
        // A second run in the same second never shares the directory.
        fs::write(root.join("notes.txt"), "y").unwrap();
        let mut second = Quarantine::new(&root, at);
        assert!(second.move_in("notes.txt").unwrap());
        assert_eq!(second.rel_dir().unwrap(), format!("{rel}-1"));
        assert!(second.move_in("../outside").is_err());
        assert!(second.move_in("/etc/passwd").is_err());
        assert!(second.move_in("kubelet/./x").is_err());
        // A name the cache never writes still moves: it is what the walk found.
        fs::write(root.join("kubelet/a%b\tc"), "z").unwrap();
        assert!(second.move_in("kubelet/a%b\tc").unwrap());
        assert!(root.join(format!("{rel}-1/kubelet/a%b\tc")).exists());
    }

    #[test]
    fn a_journal_a_crash_left_is_rolled_forward_as_recovery_would() {
        use crate::cache::key::{CollectionKey, ObjectKey};
        use crate::cache::store::audit::{AuditOptions, Code, walk};
        use crate::cache::store::{CommitStep, Store, StoreOptions};
        let dir = TempDir::new("roll-forward");
        let root = dir.root();
        let pods = CollectionKey::new("kubelet", "pods", "v1", "");
        let pod = |ns: &str, name: &str, rv: u32| {
            format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}}}}"#
            )
        };
        {
            let options = StoreOptions {
                crash_at: Some(CommitStep::JournalDurable),
                ..StoreOptions::default()
            };
            let (store, _) = Store::open_with(&root, options).unwrap();
            let old = ObjectKey {
                collection: pods.clone(),
                namespace: Some("a".into()),
                name: "gone".into(),
            };
            store
                .put(&old, pod("a", "gone", 1).as_bytes(), Some("1"))
                .unwrap();
            let mut replace = store.begin_replace(&pods, None).unwrap();
            replace
                .put(Some("c"), "new", pod("c", "new", 9).as_bytes(), Some("9"))
                .unwrap();
            assert!(replace.commit(&mut |_| true, Some("10")).is_err());
        }
        let mut journals = Vec::new();
        walk(&root, AuditOptions::default(), &mut |p| {
            if p.code == Code::PendingJournal {
                journals.push(p.path);
            }
        })
        .unwrap();
        assert_eq!(journals.len(), 1);
        let journal = fs::read(root.join(&journals[0])).unwrap();
        let mut quarantine = Quarantine::new(&root, UNIX_EPOCH + Duration::from_secs(1));
        assert_eq!(quarantine.roll_forward(&journals).unwrap(), journals);
        let objects = root.join("kubelet/pods.v1.core");
        assert_eq!(
            fs::read_to_string(objects.join("c/new")).unwrap(),
            pod("c", "new", 9)
        );
        assert!(!objects.join("a/gone").exists());
        assert!(!root.join(&journals[0]).exists());
        // Nothing deleted: what the journal deleted, and the journal, are in the quarantine.
        let kept = root.join(quarantine.rel_dir().unwrap());
        assert_eq!(
            fs::read_to_string(kept.join("kubelet/pods.v1.core/a/gone")).unwrap(),
            pod("a", "gone", 1)
        );
        assert_eq!(fs::read(kept.join(&journals[0])).unwrap(), journal);
        // Applied again (a run killed before the journal moved): nothing changes.
        assert_eq!(quarantine.roll_forward(&[]).unwrap(), Vec::<String>::new());
        // Nothing is left to judge: the staged file went where the journal said.
        let mut left = Vec::new();
        walk(&root, AuditOptions::default(), &mut |p| left.push(p)).unwrap();
        assert_eq!(left, []);
    }

    #[test]
    fn journals_roll_forward_in_the_order_committed_an_imports_too() {
        let dir = TempDir::new("roll-order");
        let root = dir.0.clone();
        let stage = root.join(".staging/import.4/cache");
        fs::create_dir_all(stage.join("coredns/services.v1.core/default")).unwrap();
        fs::write(stage.join("coredns/services.v1.core/default/dns"), "dns").unwrap();
        fs::write(stage.join("version"), "new").unwrap();
        fs::write(root.join("version"), "old").unwrap();
        fs::create_dir_all(root.join(".quarantine/x-replaced")).unwrap();
        fs::create_dir_all(root.join(".staging")).unwrap();
        fs::write(root.join(".staging/r.1.0"), "nine").unwrap();
        fs::write(root.join(".staging/r.2.0"), "ten").unwrap();
        fs::create_dir_all(root.join("kubelet/pods.v1.core/default")).unwrap();
        // .journal.9 first, then .journal.10: the last word on `web` is ten's.
        fs::write(
            root.join(".journal.9"),
            "tinyhub-journal 1\nrename\tr.1.0\tkubelet/pods.v1.core/default/web\nend\t1\n",
        )
        .unwrap();
        fs::write(
            root.join(".journal.10"),
            "tinyhub-journal 1\nrename\tr.2.0\tkubelet/pods.v1.core/default/web\nend\t1\n",
        )
        .unwrap();
        fs::write(
            root.join(".journal.11"),
            "tinyhub-journal 1\nmove\tversion\t.quarantine/x-replaced/version\n\
             move\t.staging/import.4/cache/coredns\tcoredns\n\
             install\t.staging/import.4/cache/version\tversion\nend\t3\n",
        )
        .unwrap();
        let rels: Vec<String> = [".journal.10", ".journal.11", ".journal.9"]
            .map(String::from)
            .to_vec();
        let mut quarantine = Quarantine::new(&root, UNIX_EPOCH);
        assert_eq!(
            quarantine.roll_forward(&rels).unwrap(),
            [".journal.9", ".journal.10", ".journal.11"]
        );
        assert_eq!(
            fs::read_to_string(root.join("kubelet/pods.v1.core/default/web")).unwrap(),
            "ten"
        );
        assert_eq!(
            fs::read_to_string(root.join("coredns/services.v1.core/default/dns")).unwrap(),
            "dns"
        );
        assert_eq!(fs::read_to_string(root.join("version")).unwrap(), "new");
        assert_eq!(
            fs::read_to_string(root.join(".quarantine/x-replaced/version")).unwrap(),
            "old"
        );
        let kept = root.join(quarantine.rel_dir().unwrap());
        for rel in &rels {
            assert!(!root.join(rel).exists());
            assert!(kept.join(rel).exists(), "{rel} kept");
        }
    }

    #[test]
    fn a_quarantine_that_is_a_file_or_a_symlink_is_moved_into_the_new_one() {
        let dir = TempDir::new("quarantine-displaced");
        let root = dir.0.join("cache");
        let outside = dir.0.join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::create_dir_all(&root).unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1_796_571_000);
        for (n, offender) in ["a file", "a symlink"].into_iter().enumerate() {
            let top = root.join(QUARANTINE);
            if n == 0 {
                fs::write(&top, "not a directory").unwrap();
            } else {
                std::os::unix::fs::symlink(&outside, &top).unwrap();
            }
            fs::write(root.join("notes.txt"), offender).unwrap();
            let mut quarantine = Quarantine::new(&root, at + Duration::from_secs(n as u64));
            assert!(quarantine.move_in(QUARANTINE).unwrap(), "{offender}");
            assert!(quarantine.move_in("notes.txt").unwrap(), "{offender}");
            let run = root.join(quarantine.rel_dir().unwrap());
            assert!(fs::symlink_metadata(&top).unwrap().is_dir(), "{offender}");
            let kept = fs::symlink_metadata(run.join(QUARANTINE)).unwrap();
            assert_eq!(kept.file_type().is_symlink(), n == 1, "{offender}");
            assert_eq!(fs::read_to_string(run.join("notes.txt")).unwrap(), offender);
            assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "never followed");
            // Only the cache and the new quarantine: nothing left beside them.
            let names: Vec<String> = fs::read_dir(&root)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert_eq!(names, [QUARANTINE], "{offender}");
            fs::remove_dir_all(&top).unwrap();
        }
    }

    #[test]
    fn a_time_stamps_as_the_quarantine_names_it() {
        assert_eq!(
            stamp(UNIX_EPOCH + Duration::from_secs(86_400 + 3_661)),
            "19700102T010101Z"
        );
    }
}
