//! kubeletcertificate mode (YurtHub's `pkg/yurthub/certificate/kubeletcertificate`): the hub
//! presents kubelet's client certificate. YurtHub re-reads it only after it expired, although
//! kubelet rotates it at 70–90 % of its lifetime; here the file is looked at every few seconds and
//! a change (kubelet swaps the
//! `kubelet-client-current.pem` symlink) is put to use at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::Receiver;

use super::csr_api::{ApiClient, Auth};
use super::error::{IdentityFile, PkiError};
use super::renew::{WaitEnd, wait};
use super::state::IdentityState;
use super::{install_tls, reachable};
use crate::config::KubeletFiles;
use crate::metrics::{METRICS, Metrics};
use crate::tls::{self, ClientIdentity, TlsMaterial};
use crate::upstream::Upstream;

/// Time between two looks at kubelet's certificate file.
const RECHECK: Duration = Duration::from_secs(2);

/// What identifies one version of the certificate file: the symlink's target and the
/// file's modification time and length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    target: Option<PathBuf>,
    modified: Option<SystemTime>,
    len: u64,
}

fn version(files: &KubeletFiles) -> Option<Version> {
    let meta = std::fs::metadata(&files.cert).ok()?;
    Some(Version {
        target: std::fs::read_link(&files.cert).ok(),
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Reads the CA and kubelet's certificate and key (one PEM file, as kubelet writes it).
pub(super) fn read(files: &KubeletFiles) -> Result<TlsMaterial, PkiError> {
    let (ca, identity) = read_files(files)?;
    super::material(&ca, &identity).map_err(|source| PkiError::Unparsable {
        file: IdentityFile::KubeletCa,
        path: files.ca.clone(),
        source,
    })
}

/// The CA's PEM and kubelet's client identity, each file read once.
fn read_files(files: &KubeletFiles) -> Result<(Vec<u8>, ClientIdentity), PkiError> {
    let read = |file: IdentityFile, path: &PathBuf| {
        std::fs::read(path).map_err(|source| PkiError::Read {
            file,
            path: path.clone(),
            source,
        })
    };
    let ca = read(IdentityFile::KubeletCa, &files.ca)?;
    let pem = read(IdentityFile::KubeletCert, &files.cert)?;
    let identity = tls::identity(&pem, &pem).map_err(|source| PkiError::Unparsable {
        file: IdentityFile::KubeletCert,
        path: files.cert.clone(),
        source,
    })?;
    Ok((ca, identity))
}

/// Follows kubelet's certificate file.
pub(super) struct Watch {
    files: KubeletFiles,
    upstream: Arc<Upstream>,
    state: Arc<IdentityState>,
    probe_timeout: Duration,
}

impl Watch {
    /// A watch that gives `upstream` each new version of the certificate.
    pub(super) fn new(
        files: KubeletFiles,
        upstream: Arc<Upstream>,
        state: Arc<IdentityState>,
        probe_timeout: Duration,
    ) -> Watch {
        Watch {
            files,
            upstream,
            state,
            probe_timeout,
        }
    }

    /// The CSR API as kubelet's identity (for the serving certificate), read fresh each time.
    pub(super) fn api(
        &self,
        servers: Arc<[String]>,
    ) -> Arc<dyn Fn() -> Result<ApiClient, PkiError> + Send + Sync> {
        let files = self.files.clone();
        Arc::new(move || {
            let (ca, identity) = read_files(&files)?;
            ApiClient::new(&reachable(&servers)?, &ca, Auth::Certificate(identity))
        })
    }

    /// Installs the certificate now, then again whenever the file changes, until `stop`.
    pub(super) fn run(self, stop: &Receiver<()>) {
        let never = crossbeam_channel::never();
        let mut seen: Option<Version> = None;
        let mut first = true;
        let mut last_problem: Option<String> = None;
        loop {
            let now = version(&self.files);
            if now.is_some() && now != seen {
                match read(&self.files) {
                    Ok(material) => {
                        let not_after = material.client_not_after();
                        match install_tls(&self.upstream, &material, self.probe_timeout) {
                            Ok(()) => {
                                self.state.client_installed(not_after);
                                Metrics::inc(&METRICS.client_certificate_rotations);
                                log::info!(
                                    "{} kubelet's client certificate {}{}",
                                    if first {
                                        "using"
                                    } else {
                                        "kubelet rotated its certificate: now using"
                                    },
                                    self.files.cert.display(),
                                    not_after
                                        .map(|t| format!(
                                            ", valid until {}",
                                            crate::logging::time_rfc3339(t)
                                        ))
                                        .unwrap_or_default()
                                );
                                first = false;
                                seen = now;
                                last_problem = None;
                            }
                            Err(e) => self.report(&mut last_problem, &e),
                        }
                    }
                    // A half-written file is read again next time.
                    Err(e) => self.report(&mut last_problem, &e),
                }
            } else if now.is_none() {
                self.report(
                    &mut last_problem,
                    &PkiError::Gone {
                        file: IdentityFile::KubeletCert,
                        path: self.files.cert.clone(),
                    },
                );
            }
            if wait(RECHECK, &never, stop) == WaitEnd::Stopped {
                return;
            }
        }
    }

    /// Says what is wrong in readyz, and in the log once per new problem: the file is
    /// looked at every few seconds.
    fn report(&self, last: &mut Option<String>, why: &PkiError) {
        // Compared by text: an I/O error has no equality, and the text is what is shown.
        let why = why.to_string();
        if last.as_ref() != Some(&why) {
            log::warn!("{why}");
            *last = Some(why.clone());
        }
        self.state.client_problem(why);
    }
}
