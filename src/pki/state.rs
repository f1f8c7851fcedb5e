//! What the rest of the hub sees of its identity: whether a client and a serving
//! certificate are installed and until when, why not when they are not (readyz says it),
//! and the door `POST /v1/token` knocks on.

use std::fmt;
use std::sync::{Mutex, TryLockError};
use std::time::SystemTime;

use crossbeam_channel::{Receiver, Sender};

use super::error::PkiError;
use crate::lock;

/// What replaces the bootstrap token for `POST /v1/token` (token mode's
/// `bootstrap::TokenUpdates`): the state only holds the door, the mode that has one owns it.
pub(crate) trait TokenReplacer: fmt::Debug + Send {
    /// Discovery with `join_token`, then the bootstrap kubeconfig rewritten with it; its
    /// error's [`PkiError::status`] is what `POST /v1/token` answers.
    fn replace(&self, join_token: &str) -> Result<(), PkiError>;
}

/// The token door and the wake-up of the client certificate's thread.
type TokenDoor = (Box<dyn TokenReplacer>, Sender<()>);

/// The hub's certificates as readyz reports them. Shared by the identity threads (writers)
/// and the serve port (reader).
#[derive(Debug, Default)]
pub(crate) struct IdentityState {
    client: Mutex<Slot>,
    serving: Mutex<Slot>,
    updates: Mutex<Option<TokenDoor>>,
}

/// One certificate's state.
#[derive(Debug, Default)]
struct Slot {
    /// A credential is installed (a token-only kubeconfig has no expiry).
    installed: bool,
    /// Its expiry, when it is a certificate.
    not_after: Option<SystemTime>,
    /// Why there is none, or why the last renewal failed.
    problem: Option<String>,
}

impl Slot {
    /// Installed and not expired at `now`.
    fn usable(&self, now: SystemTime) -> bool {
        self.installed && self.not_after.is_none_or(|t| now < t)
    }

    /// (usable, why not).
    fn check(&self, what: &str) -> (bool, String) {
        let now = SystemTime::now();
        if self.usable(now) {
            return (true, String::new());
        }
        let state = if self.installed {
            format!("the hub's {what} has expired")
        } else {
            format!("the hub has no {what} yet")
        };
        match &self.problem {
            Some(why) => (false, format!("{state}: {why}")),
            None => (false, state),
        }
    }
}

impl IdentityState {
    /// A client credential was installed (`not_after`: its certificate's expiry, if any).
    pub(crate) fn client_installed(&self, not_after: Option<SystemTime>) {
        *lock(&self.client) = Slot {
            installed: true,
            not_after,
            problem: None,
        };
    }

    /// Getting or renewing the client certificate failed.
    pub(crate) fn client_problem(&self, why: String) {
        lock(&self.client).problem = Some(why);
    }

    /// A serving certificate valid until `not_after` was installed.
    pub(crate) fn serving_installed(&self, not_after: SystemTime) {
        *lock(&self.serving) = Slot {
            installed: true,
            not_after: Some(not_after),
            problem: None,
        };
    }

    /// Getting or renewing the serving certificate failed.
    pub(crate) fn serving_problem(&self, why: String) {
        lock(&self.serving).problem = Some(why);
    }

    /// The hub can authenticate to the cloud now.
    pub(crate) fn has_client(&self) -> bool {
        lock(&self.client).usable(SystemTime::now())
    }

    /// The client certificate is usable, or why not.
    pub(crate) fn client_check(&self) -> (bool, String) {
        lock(&self.client).check("client certificate")
    }

    /// The serving certificate is usable, or why not.
    pub(crate) fn serving_check(&self) -> (bool, String) {
        lock(&self.serving).check("serving certificate")
    }

    /// Token mode: `POST /v1/token` may replace the bootstrap token. The receiver wakes the
    /// client certificate's thread when it did.
    pub(crate) fn enable_token_updates(&self, updates: Box<dyn TokenReplacer>) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        *lock(&self.updates) = Some((updates, tx));
        rx
    }

    /// `POST /v1/token` with the body's join token: `Err((status, message))` as YurtHub
    /// answers (400 for a bad token, 500 when discovery fails; 409 while another runs). Outside token mode there is
    /// no bootstrap token to replace and nothing changes, as in YurtHub.
    pub(crate) fn update_token(&self, join_token: &str) -> Result<&'static str, (u16, String)> {
        // Discovery takes seconds: a second update waits for none of it (the serve port has
        // few connections to spare).
        let guard = match self.updates.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => {
                return Err((409, "a bootstrap token update is already under way".into()));
            }
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let Some((updates, wake)) = guard.as_ref() else {
            return Ok("the hub does not use a bootstrap token in this mode: nothing changed");
        };
        updates
            .replace(join_token)
            .map_err(|e| (e.status(), e.to_string()))?;
        // Full: a wake-up is already pending, which is all the thread needs.
        let _ = wake.try_send(());
        Ok("update bootstrap token successfully")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn readyz_says_why_a_certificate_is_missing_or_expired() {
        let s = IdentityState::default();
        let (ok, why) = s.client_check();
        assert!(
            !ok && why == "the hub has no client certificate yet",
            "{why}"
        );
        let (serving_ok, serving_why) = s.serving_check();
        assert!(!serving_ok && serving_why.contains("no serving certificate"));
        s.client_problem("CSR csr-x was denied".into());
        assert!(s.client_check().1.ends_with(": CSR csr-x was denied"));
        s.client_installed(Some(SystemTime::now() + Duration::from_secs(60)));
        assert!(s.client_check().0 && s.has_client());
        s.client_installed(Some(SystemTime::now() - Duration::from_secs(1)));
        assert!(!s.has_client());
        assert!(s.client_check().1.contains("has expired"));
        // A token-only kubeconfig never expires.
        s.client_installed(None);
        assert!(s.has_client());
        s.serving_installed(SystemTime::now() + Duration::from_secs(60));
        assert!(s.serving_check().0);
    }

    #[test]
    fn a_token_update_outside_token_mode_changes_nothing() {
        let s = IdentityState::default();
        assert!(s.update_token("abcdef.0123456789abcdef").is_ok());
    }
}
