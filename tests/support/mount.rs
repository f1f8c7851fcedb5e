//! A small tmpfs mounted for one test: a full disk, a read-only filesystem. Mounted only in
//! a test's own mount namespace (`namespace::run_test_in_namespaces`), never the machine's.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::namespace::{is_root, run_test_in_namespaces};

/// Runs the ignored test `name` (`module::test`, which starts with
/// `namespace::enter_child(marker)`) in new mount and network namespaces, and a user
/// namespace when this process is not root (where mounting a tmpfs is allowed too): its
/// mounts are private to it and go with it, even when it is killed.
pub fn run_with_private_mounts(name: &str, marker: &str) {
    let namespaces: &[&str] = if is_root() {
        &["-m", "-n"]
    } else {
        &["-r", "-m", "-n"]
    };
    run_test_in_namespaces(namespaces, name, marker);
}

/// A tmpfs mounted at a directory, unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts `size` (e.g. `4m`) at `dir`, in the test's own mount namespace (made by
    /// [`run_with_private_mounts`]); a panic with mount's message when it cannot.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("create the mount point");
        mount(
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ],
            dir,
        )
        .expect("mount a tmpfs in the test's mount namespace");
        Tmpfs(dir.to_owned())
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
