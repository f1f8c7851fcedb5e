//! `kubectl` through a hub, the way the end-to-end tests drive it: a plain kubeconfig for the
//! hub's port and a discovery cache of its own, both in the test's directory.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::hub::{Hub, kubectl_command};
use super::write_plain_kubeconfig;

/// kubectl configured for one hub.
pub struct Kubectl {
    /// Its kubeconfig file.
    pub kubeconfig: PathBuf,
    /// Its discovery cache directory.
    pub cache: PathBuf,
}

impl Kubectl {
    /// kubectl for `hub`, its kubeconfig and discovery cache under `dir`.
    pub fn new(dir: &Path, hub: &Hub) -> Kubectl {
        Kubectl {
            kubeconfig: write_plain_kubeconfig(dir, "kubectl.kubeconfig", &hub.url()),
            cache: dir.join("kubectl-cache"),
        }
    }

    /// Runs `kubectl <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        kubectl_command(&self.kubeconfig, &self.cache, self.cache.parent().unwrap())
            .args(args)
            .output()
            .expect("kubectl is installed (Debian package kubectl; .ci/run installs it)")
    }

    /// Runs a command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a command that must fail; its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "kubectl {args:?} answered: {stdout}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}
