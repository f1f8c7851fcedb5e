//! client-go's `FileStore` pairs: dated files holding chain and key, `-current.pem` a symlink
//! to the newest (through `-updated.pem`), the older ones pruned, and a pair read back and
//! checked to belong together.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::atomic::{make_dirs, parent_of, read_limited, sync_dir, with_path, write_atomic};
use super::{KEEP, RootDir};
use crate::tls::ClientIdentity;

/// Which of the hub's two certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CertKind {
    /// The client certificate for the cloud: prefix `yurthub`.
    Client,
    /// The serving certificate of the HTTPS port: prefix `yurthub-server`.
    Serving,
}

impl CertKind {
    /// client-go `FileStore`'s pair name prefix, as YurtHub names it.
    pub(super) fn prefix(self) -> &'static str {
        match self {
            CertKind::Client => "yurthub",
            CertKind::Serving => "yurthub-server",
        }
    }
}

/// A certificate pair read back from `pki/`.
pub(crate) struct StoredCert {
    /// Chain DER and key, checked to belong together.
    pub identity: ClientIdentity,
    /// The dated file `-current.pem` resolves to (itself when it is a plain file).
    pub path: PathBuf,
}

impl fmt::Debug for StoredCert {
    // The identity's own Debug redacts the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredCert")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .finish()
    }
}

impl RootDir {
    /// Stores a new pair the way client-go's `FileStore` does: `<prefix>-YYYY-MM-DD-HH-MM-SS.pem`
    /// (UTC; chain PEM then key PEM, 0600, fsynced), a symlink `<prefix>-updated.pem` to its
    /// absolute path (as client-go makes it) renamed over `<prefix>-current.pem`, the
    /// directory fsynced. A second store in the same second takes the next free second, so
    /// names stay unique and sort by age.
    ///
    /// Unlike YurtHub, which never deletes a pair, this keeps only the newest [`KEEP`] dated
    /// files besides the current one and removes older ones: every rotation would otherwise
    /// grow a router's flash for ever.
    ///
    /// A pair whose key does not belong to its certificate is refused before anything is
    /// written. A plain file at `-current.pem` (a pair copied in by hand) is replaced, where
    /// client-go refuses to rotate. One writer per kind at a time (the rotation manager).
    pub(crate) fn store_cert(
        &self,
        kind: CertKind,
        chain_pem: &[u8],
        key_pem: &str,
        now: SystemTime,
    ) -> io::Result<PathBuf> {
        crate::tls::identity(chain_pem, key_pem.as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let pki = self.pki();
        make_dirs(&pki)?;

        let mut content = Vec::with_capacity(chain_pem.len() + key_pem.len() + 2);
        for part in [chain_pem, key_pem.as_bytes()] {
            content.extend_from_slice(part);
            if !content.ends_with(b"\n") {
                content.push(b'\n');
            }
        }
        let prefix = kind.prefix();
        let secs = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dated = (secs..secs + 3600)
            .map(|s| pki.join(format!("{prefix}-{}.pem", timestamp(s))))
            .find(|p| matches!(fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("no free name for a new {prefix} pair in {}", pki.display()),
                )
            })?;
        write_atomic(&dated, &content)?;

        let updated = self.updated_cert(kind);
        match fs::remove_file(&updated) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(with_path(&updated, "remove")(e)),
        }
        std::os::unix::fs::symlink(&dated, &updated).map_err(with_path(&updated, "symlink"))?;
        let current = self.current_cert(kind);
        fs::rename(&updated, &current).map_err(with_path(&current, "rename"))?;
        sync_dir(&pki)?;

        self.prune(kind, &dated);
        Ok(dated)
    }

    /// Removes the dated files of `kind` older than the newest [`KEEP`] besides `current`.
    /// A failure only warns: the new pair is in place.
    fn prune(&self, kind: CertKind, current: &Path) {
        let pki = self.pki();
        let entries = match fs::read_dir(&pki) {
            Ok(entries) => entries,
            Err(e) => {
                log::warn!("cannot list {}: {e}", pki.display());
                return;
            }
        };
        let mut dated: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path())
            .filter(|path| path != current)
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| is_dated(n, kind.prefix()))
            })
            .collect();
        // The timestamp format sorts by name as by age.
        dated.sort_unstable_by(|a, b| b.cmp(a));
        let mut removed = false;
        for old in dated.iter().skip(KEEP) {
            match fs::remove_file(old) {
                Ok(()) => removed = true,
                Err(e) => log::warn!("cannot remove old pair {}: {e}", old.display()),
            }
        }
        if removed && let Err(e) = sync_dir(&pki) {
            log::warn!("{e}");
        }
    }

    /// The current pair, or None when missing, or (with a warning naming the file and why)
    /// unreadable, not PEM, or the key does not belong to the certificate: YurtHub then
    /// requests a new one (§3.4). Like client-go, it first finishes a store that a kill left
    /// with only `-updated.pem`.
    pub(crate) fn load_cert(&self, kind: CertKind) -> Option<StoredCert> {
        let current = self.current_cert(kind);
        self.recover(kind, &current);
        let why = |what: String| {
            log::warn!("{}: {what}; a new certificate is needed", current.display());
        };
        let path = match fs::read_link(&current) {
            Ok(target) => parent_of(&current).join(target),
            // Not a symlink: a pair copied in by hand.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => current.clone(),
            // The normal state before the first certificate: not worth a warning.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                log::debug!("{}: none yet", current.display());
                return None;
            }
            Err(e) => {
                why(format!("cannot read the link: {e}"));
                return None;
            }
        };
        let bytes = match read_limited(&current) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                why(format!("dangling link to {}", path.display()));
                return None;
            }
            Err(e) => {
                why(format!("cannot read: {e}"));
                return None;
            }
        };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            why("not PEM".into());
            return None;
        };
        // The key alone: ureq takes the client key as PEM.
        let (chain_pem, key_pem) = split_pair(text);
        if chain_pem.is_empty() || key_pem.is_empty() {
            why("not a certificate and key in PEM".into());
            return None;
        }
        match crate::tls::identity(chain_pem.as_bytes(), key_pem.as_bytes()) {
            Ok(identity) => Some(StoredCert { identity, path }),
            Err(e) => {
                why(e.to_string());
                None
            }
        }
    }

    /// client-go's recovery: a store interrupted before its first `-current.pem` existed
    /// left only `-updated.pem`; it becomes current.
    fn recover(&self, kind: CertKind, current: &Path) {
        if fs::symlink_metadata(current).is_ok() {
            return;
        }
        let updated = self.updated_cert(kind);
        let is_link = fs::symlink_metadata(&updated).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            match fs::rename(&updated, current) {
                Ok(()) => log::info!("{} recovered from an interrupted store", current.display()),
                Err(e) => log::warn!("cannot recover {}: {e}", updated.display()),
            }
        }
    }
}

/// `YYYY-MM-DD-HH-MM-SS` (UTC) of seconds since the epoch, client-go's pair file stamp.
pub(super) fn timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let (year, month, day) = crate::logging::civil_from_days(days);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}-{:02}-{:02}-{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Whether `name` is `<prefix>-YYYY-MM-DD-HH-MM-SS.pem`.
pub(super) fn is_dated(name: &str, prefix: &str) -> bool {
    let Some(stamp) = name
        .strip_prefix(prefix)
        .and_then(|n| n.strip_prefix('-'))
        .and_then(|n| n.strip_suffix(".pem"))
    else {
        return false;
    };
    stamp.len() == 19
        && stamp.bytes().enumerate().all(|(i, b)| {
            if matches!(i, 4 | 7 | 10 | 13 | 16) {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

/// The certificate blocks (leaf first) and the first private-key block of a pair file.
fn split_pair(text: &str) -> (String, String) {
    let mut chain = String::new();
    let mut key = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = rest[start..].find(&end_marker) else {
            break;
        };
        let end = start + end + end_marker.len();
        let block = &rest[start..end];
        if label == "CERTIFICATE" {
            chain.push_str(block);
            chain.push('\n');
        } else if label.ends_with("PRIVATE KEY") && key.is_empty() {
            key.push_str(block);
            key.push('\n');
        }
        rest = &rest[end..];
    }
    (chain, key)
}
