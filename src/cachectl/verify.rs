//! `tinyhub cache verify`.

use crate::config::CacheArgs;

/// Runs `verify`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    if let Some(code) = super::refuse_unless_cache(&args.disk_cache_path) {
        return code;
    }
    match super::probe_hub(&args.disk_cache_path) {
        Ok(hub) => eprintln!("{}", hub.line()),
        Err(code) => return code,
    }
    eprintln!("tinyhub cache {}: not built yet", args.command.name());
    super::USAGE
}
