//! Signals as messages: SIGTERM, SIGINT and SIGUSR1 are blocked in every thread and one
//! thread waits for them with `sigwait`. It sends each termination signal on a channel: the
//! first starts a graceful shutdown; `app/shutdown.rs` exits 1 on the second, as Kubernetes
//! components do. SIGUSR1 it answers itself, at any time from the start on, with a dump of
//! the threads (`thread_dump.rs`), as YurtHub dumps its goroutines from a goroutine of its
//! own; unblocked, SIGUSR1 would end the process.
//!
//! Must run before any other thread starts, so every thread inherits the blocked mask.

use std::path::{Path, PathBuf};

use crossbeam_channel::Receiver;

/// Blocks SIGTERM, SIGINT and SIGUSR1 for the process and returns a channel of the
/// termination signals received; a SIGUSR1 is answered with a thread dump under `dump_dir`.
#[allow(unsafe_code)]
pub(crate) fn listen(dump_dir: PathBuf) -> std::io::Result<Receiver<i32>> {
    // SAFETY: `set` is a plain C struct initialised by sigemptyset before use; the calls only
    // read and write that local and the calling thread's signal mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        set
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(crate::SMALL_STACK)
        .spawn(move || {
            loop {
                let mut signal: libc::c_int = 0;
                // SAFETY: `set` is a valid, initialised signal set owned by this closure and
                // `signal` a valid place for the result.
                let rc = unsafe { libc::sigwait(&set, &mut signal) };
                if rc != 0 {
                    continue;
                }
                if signal == libc::SIGUSR1 {
                    dump_threads(&dump_dir);
                } else if tx.send(signal).is_err() {
                    return;
                }
            }
        })?;
    Ok(rx)
}

/// Answers a SIGUSR1: the dump, and a log line saying where it went or why it did not.
fn dump_threads(dir: &Path) {
    match crate::thread_dump::write(dir) {
        Ok((path, threads)) => {
            log::info!("SIGUSR1: {threads} threads dumped to {}", path.display())
        }
        Err(e) => log::error!("SIGUSR1: cannot dump the threads: {e}"),
    }
}

/// The name of a signal number, for logs.
pub(crate) fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGUSR1 => "SIGUSR1",
        _ => "signal",
    }
}
