//! `tinyhub cache repair`.

use crate::config::CacheArgs;

/// Runs `repair`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    if let Some(code) = super::refuse_unless_cache(&args.disk_cache_path) {
        return code;
    }
    let _lock = match super::hold_lock(&args.disk_cache_path, "repair") {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    eprintln!("tinyhub cache repair: not built yet");
    super::USAGE
}
