//! TokenRequest answers: `<component>/tokens/<namespace>/<service account>/<digest>`,
//! apart from every kind directory (a name without a dot is never one), pruned when a pod's
//! answer goes unrenewed. A token never reaches the log.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::fs::{all_real_dirs, read_object, sync_dir};
use super::usage::account_weight;
use super::{PutOutcome, Store, StoreError, unsafe_key};
use crate::cache::key::TokenKey;

/// Token answers (see `src/tokens.rs`).
impl Store {
    /// A cached TokenRequest answer; `None` if there is none.
    pub(crate) fn get_token(&self, key: &TokenKey) -> Result<Option<Vec<u8>>, StoreError> {
        unsafe_key(key.unsafe_field())?;
        let dirs = self.token_dirs(key);
        if !all_real_dirs(&dirs)? {
            return Ok(None);
        }
        read_object(&dirs[dirs.len() - 1].join(&key.digest))
    }

    /// Stores a TokenRequest answer (0600, like every file here), replacing the one before,
    /// and removes the service account's answers not renewed for [`TOKEN_STALE`] or beyond
    /// [`TOKEN_CAP`].
    pub(crate) fn put_token(&self, key: &TokenKey, bytes: &[u8]) -> Result<PutOutcome, StoreError> {
        unsafe_key(key.unsafe_field())?;
        let dirs = self.token_dirs(key);
        let account = &dirs[dirs.len() - 1];
        let target = account.join(&key.digest);
        if all_real_dirs(&dirs)? && read_object(&target)?.as_deref() == Some(bytes) {
            return Ok(PutOutcome::Identical);
        }
        for dir in &dirs {
            self.ensure_dir(dir)?;
        }
        let before = account_weight(account);
        let written = self.write_file(&target, bytes);
        if written.is_ok() {
            self.prune_tokens(account, &key.digest);
        }
        self.weigh_tokens(key.component.as_str(), before, account_weight(account));
        written?;
        Ok(PutOutcome::Written {
            bytes: bytes.len() as u64,
        })
    }

    /// Removes the answers in a service account's directory, but `keep`, that were last
    /// written more than [`TOKEN_STALE`] ago, and the oldest beyond [`TOKEN_CAP`]. Each
    /// pod's tokens are kept apart (the key holds the pod), so without this every pod that
    /// ever ran would leave a file.
    /// Best effort: what cannot be removed now is tried again at the next put.
    fn prune_tokens(&self, account: &Path, keep: &str) {
        let Ok(entries) = fs::read_dir(account) else {
            return;
        };
        let now = SystemTime::now();
        let mut removed = false;
        // The answers kept, but `keep`, by when they were written; beyond TOKEN_CAP - 1 of
        // them, the oldest go.
        let mut kept = Vec::new();
        for entry in entries.flatten() {
            if entry.file_name().to_str() == Some(keep)
                || !entry.file_type().is_ok_and(|t| t.is_file())
            {
                continue;
            }
            let written = entry.metadata().and_then(|m| m.modified()).ok();
            let stale = written
                .and_then(|written| now.duration_since(written).ok())
                .is_some_and(|age| age > TOKEN_STALE);
            if stale {
                removed |= fs::remove_file(entry.path()).is_ok();
            } else {
                kept.push((written, entry.path()));
            }
        }
        if kept.len() >= TOKEN_CAP {
            // An unreadable time sorts first: such a file goes before any other.
            kept.sort_unstable();
            for (_, path) in &kept[..=kept.len() - TOKEN_CAP] {
                removed |= fs::remove_file(path).is_ok();
            }
        }
        if removed && let Err(e) = sync_dir(account) {
            log::debug!("{e}");
        }
    }

    /// `<component>/tokens/<namespace>/<name>`, from the root down.
    fn token_dirs(&self, key: &TokenKey) -> Vec<PathBuf> {
        let component = self.root.join(&key.component);
        let tokens = component.join(TokenKey::DIR);
        let namespace = tokens.join(&key.namespace);
        let account = namespace.join(&key.name);
        vec![component, tokens, namespace, account]
    }
}

/// How long a TokenRequest answer may go without being renewed before it is removed: kubelet
/// renews a live pod's token at least daily (within 80 % of its life, and after 24 h at the
/// latest), so one this old belongs to a pod that is gone.
pub(crate) const TOKEN_STALE: Duration = Duration::from_secs(48 * 3600);
/// Most answers kept per service account: each pod's are kept apart, so a CronJob started
/// every minute would leave thousands within [`TOKEN_STALE`], each read at every put.
pub(crate) const TOKEN_CAP: usize = 64;
