//! The hub's open-file limit: raised at start from the soft limit to the hard one, and both
//! said in one log line. Every connection and every watch holds a socket (two when it is
//! forwarded), and the usual soft limit of 1,024 is close to what a node's clients use: a
//! review saw 250 watches take 1,015 of 1,024 (issue 28). The hard limit is what the
//! administrator allows; the soft one is only the default a process starts with, and a server
//! that needs more raises it itself, as nginx's `worker_rlimit_nofile` or systemd's services do.
//!
//! It does not raise the hard limit (that needs privilege and is the administrator's to set),
//! and a failure is logged, never fatal: the hub runs as before with the limit it was given.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs one line with both: what it
/// was, what it is now, or why it could not be raised.
pub(crate) fn raise_open_files() {
    match raise() {
        Ok(Raised { from, to }) if from == to => {
            log::info!("open files limit (RLIMIT_NOFILE): soft={to} hard={to}");
        }
        Ok(Raised { from, to }) => {
            log::info!(
                "open files limit (RLIMIT_NOFILE): soft={to} hard={to} (soft raised from {from})"
            );
        }
        Err(Failed { soft, hard, error }) => {
            log::warn!(
                "open files limit (RLIMIT_NOFILE): soft={soft} hard={hard}; cannot raise the soft limit: {error}"
            );
        }
    }
}

/// The soft limit raised: from what to what (the hard limit; equal when there was nothing
/// to do).
struct Raised {
    from: libc::rlim_t,
    to: libc::rlim_t,
}

/// The limits in force when raising failed, and why it failed.
struct Failed {
    soft: libc::rlim_t,
    hard: libc::rlim_t,
    error: std::io::Error,
}

/// Sets the soft limit to the hard one.
#[allow(unsafe_code, reason = "std has no rlimit API")]
fn raise() -> Result<Raised, Failed> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the rlimit we own and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(Failed {
            soft: 0,
            hard: 0,
            error,
        });
    }
    let from = limit.rlim_cur;
    if from == limit.rlim_max {
        return Ok(Raised { from, to: from });
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads the rlimit we own and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(Failed {
            soft: from,
            hard: limit.rlim_max,
            error: std::io::Error::last_os_error(),
        });
    }
    Ok(Raised {
        from,
        to: limit.rlim_max,
    })
}
