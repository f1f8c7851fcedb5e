//! `tinyhub cache export`: not built yet (its own part of the work fills this file).

use std::process::ExitCode;

use crate::config::CacheArgs;

/// Runs `export`; the exit status.
pub(crate) fn run(args: &CacheArgs) -> ExitCode {
    let _ = args;
    eprintln!("tinyhub cache export: not built yet");
    ExitCode::from(super::USAGE)
}
