//! The hub's one start-up error: why a command line, a kubeconfig, TLS material, a listener
//! or one of the hub's threads keeps it from starting (or running). `main` prints it on one
//! line and exits.
//!
//! Failures of single requests are not here: they become a Kubernetes `Status` (see
//! `status.rs`), and request classification has its own [`crate::request::RequestError`].

use std::fmt;

/// Why the hub cannot start or run: a message, and what the hub was doing when it failed
/// (`kubeconfig /etc/kubeconfig`, `--proxy-port`, `cannot set up TLS to the cloud`).
///
/// Displays as `context: message`, or only the message when there is no context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupError {
    /// What the hub was doing, outermost first; `None` when the message says it all.
    context: Option<String>,
    /// What went wrong.
    message: String,
    /// The process's exit status when this error stops the hub.
    exit_status: u8,
}

/// The exit status of a hub refused because a directory it needs is unusable or held by
/// another hub: sysexits.h's `EX_CONFIG`, a configuration error that a restart cannot heal
/// (the systemd unit does not restart on it).
pub const EX_CONFIG: u8 = 78;

impl StartupError {
    /// An error whose message says it all.
    pub fn new(message: impl Into<String>) -> StartupError {
        StartupError {
            context: None,
            message: message.into(),
            exit_status: 1,
        }
    }

    /// Marks the error as a directory the hub cannot use (exit status [`EX_CONFIG`]).
    pub fn unusable_directory(self) -> StartupError {
        StartupError {
            exit_status: EX_CONFIG,
            ..self
        }
    }

    /// The exit status the hub ends with: [`EX_CONFIG`] for a directory it cannot use, 1
    /// otherwise.
    pub fn exit_status(&self) -> u8 {
        self.exit_status
    }

    /// A value given for the flag `--name` that cannot be used: `--name: message`.
    pub fn flag(name: &str, message: impl Into<String>) -> StartupError {
        StartupError::new(message).context(format!("--{name}"))
    }

    /// Puts what the hub was doing in front of the error; a context already there stays
    /// closer to the message (`outer: inner: message`).
    pub fn context(self, context: impl Into<String>) -> StartupError {
        let context = context.into();
        StartupError {
            context: Some(match self.context {
                Some(inner) => format!("{context}: {inner}"),
                None => context,
            }),
            message: self.message,
            exit_status: self.exit_status,
        }
    }

    /// What the hub was doing, if that was recorded apart from the message.
    pub fn context_text(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// What went wrong, without the context.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(context) = &self.context {
            write!(f, "{context}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for StartupError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_context_then_message() {
        let check = |e: StartupError, want: &str| assert_eq!(e.to_string(), want);
        check(StartupError::new("no cloud server"), "no cloud server");
        check(
            StartupError::flag("proxy-port", "70000 is above 65535"),
            "--proxy-port: 70000 is above 65535",
        );
        check(
            StartupError::new("bad PEM")
                .context("client key")
                .context("kubeconfig /k"),
            "kubeconfig /k: client key: bad PEM",
        );
        let e = StartupError::new("x").context("inner").context("outer");
        assert_eq!(e.context_text(), Some("outer: inner"));
        assert_eq!(e.message(), "x");
        assert_eq!(e.exit_status(), 1);
        assert_eq!(e.unusable_directory().context("more").exit_status(), 78);
    }
}
