//! A small tmpfs mounted for one test (needs root or CAP_SYS_ADMIN): a full disk, a
//! read-only filesystem.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted at a directory, unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts `size` (e.g. `4m`) at `dir`; the reason as an error where mounting is not
    /// allowed (not root, no CAP_SYS_ADMIN, a container without mount rights).
    pub fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        mount(
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ],
            dir,
        )?;
        Ok(Tmpfs(dir.to_owned()))
    }

    /// [`Tmpfs::mount`], or `None` having said SKIP (naming `test` and why) where this
    /// process may not mount.
    pub fn mount_or_skip(dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(dir, size) {
            Ok(t) => Some(t),
            Err(why) => {
                eprintln!("SKIP: cannot mount a tmpfs for the {test} test (needs root): {why}");
                None
            }
        }
    }

    /// Fills the filesystem with one file until it is full; returns the file.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.0.join("filler");
        let mut file = std::fs::File::create(&filler).expect("create the filler");
        let block = vec![0x5a_u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.0.display()),
            }
        }
        // Whatever part of a page is left: write byte by byte until refused.
        while matches!(file.write(&[0x5a]), Ok(1)) {}
        filler
    }

    /// Makes the mount read-only (what is on it stays readable).
    pub fn remount_read_only(&self) -> Result<(), String> {
        mount(&["-o", "remount,ro"], &self.0)
    }
}

/// Runs mount(8) with `args` and `dir`; its message as the error.
fn mount(args: &[&str], dir: &Path) -> Result<(), String> {
    let dir = dir.display().to_string();
    let args: Vec<&str> = args.iter().copied().chain([dir.as_str()]).collect();
    super::namespace::run_tool("mount", &args).map(drop)
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
