//! `tinyhub cache …`: the cache tool of the same binary, no hub needed. One file per
//! command (`ls`, `get`, `verify`, `repair`, `export`, `import`); this file dispatches, and
//! holds what they share: the exit codes, the "is this a cache" test and the lock's probe.
//!
//! The tool renders and decides; every file it reads or changes goes through
//! `cache::store` (the invariant that only the store touches the cache directory). Results
//! go to stdout, warnings to stderr. The read-only commands (`ls`, `get`, `verify`,
//! `export`) probe the cache's lock and release it at once: a hub that starts meanwhile is
//! never refused, and a running one is never disturbed. `repair` and `import` hold it for
//! their whole run, and refuse (exit 3) when a hub holds it.

mod export;
mod get;
mod import;
mod ls;
mod render;
mod repair;
mod verify;

use std::path::Path;
use std::process::ExitCode;

use crate::cache::key::METADATA_DIR;
use crate::cache::store::view::{RootVerdict, judge_root, kinds_of};
use crate::config::CacheArgs;
use crate::config::cache_args::CacheCommand;
use crate::dir_lock::{DirLock, Probe};

/// Exit: done, or clean.
pub(crate) const DONE: u8 = 0;
/// Exit: `verify` found problems, `get` found nothing or a refused file.
pub(crate) const FOUND: u8 = 1;
/// Exit: a bad command line, or a directory that is not a cache.
pub(crate) const USAGE: u8 = 2;
/// Exit: refused because the hub runs (`repair`, `import`).
pub(crate) const HUB_RUNS: u8 = 3;
/// Exit: an I/O failure.
pub(crate) const IO_FAILED: u8 = 4;

/// Runs one `tinyhub cache` command; its exit status.
pub fn run(args: CacheArgs) -> ExitCode {
    crate::logging::init(&crate::logging::LogOptions {
        verbosity: args.verbosity,
        skip_headers: true,
        ..Default::default()
    });
    // The tool's results are its output; info lines only when asked for (`--v=2`).
    if args.verbosity < 2 {
        log::set_max_level(log::LevelFilter::Warn);
    }
    ExitCode::from(match &args.command {
        CacheCommand::Ls { .. } => ls::run(&args),
        CacheCommand::Get { .. } => get::run(&args),
        CacheCommand::Verify => verify::run(&args),
        CacheCommand::Repair => repair::run(&args),
        CacheCommand::Export { .. } => return export::run(&args),
        CacheCommand::Import { .. } => return import::run(&args),
    })
}

/// Says on stderr why `root` is no cache and gives the exit code, or `None` when it is
/// one. Every command asks this first: nothing is read below, or written in, a directory
/// that is not a cache.
pub(crate) fn refuse_unless_cache(root: &Path) -> Option<u8> {
    match judge_root(root) {
        Ok(RootVerdict::Cache) => None,
        Ok(RootVerdict::NotACache(why)) => {
            eprintln!(
                "tinyhub cache: {} is not a tinyhub or YurtHub cache: {why}",
                root.display()
            );
            Some(USAGE)
        }
        Err(e) => {
            eprintln!("tinyhub cache: {e}");
            Some(IO_FAILED)
        }
    }
}

/// Whether a hub runs on the cache, as its lock says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HubState {
    /// No one holds the lock.
    Stopped,
    /// A hub (or another tool) holds it; its note, when it wrote one.
    Running(Option<String>),
}

impl HubState {
    /// `stopped` or `running`, as `-o json` says it.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            HubState::Stopped => "stopped",
            HubState::Running(_) => "running",
        }
    }

    /// The line a read-only command prints on stderr first.
    pub(crate) fn line(&self) -> String {
        match self {
            HubState::Stopped => "hub stopped".to_owned(),
            HubState::Running(Some(note)) => format!("hub running ({note}): read-only"),
            HubState::Running(None) => "hub running: read-only".to_owned(),
        }
    }
}

/// How every read-only command (`ls`, `get`, `verify`, `export`) starts: refused unless
/// `root` is a cache, then the hub's state probed and said on stderr.
pub(crate) fn read_only_start(root: &Path) -> Result<HubState, u8> {
    if let Some(code) = refuse_unless_cache(root) {
        return Err(code);
    }
    let hub = probe_hub(root)?;
    eprintln!("{}", hub.line());
    Ok(hub)
}

/// Probes the cache's lock and lets it go at once (a read-only command): never holds it,
/// never writes the note.
fn probe_hub(root: &Path) -> Result<HubState, u8> {
    match DirLock::probe(root, None) {
        Ok(Probe::Free(lock)) => {
            drop(lock);
            Ok(HubState::Stopped)
        }
        Ok(Probe::Held { note }) => Ok(HubState::Running(note)),
        Ok(Probe::NoLocks(lock, _)) => {
            drop(lock);
            eprintln!(
                "tinyhub cache: {} cannot be locked (NFS, CIFS?): whether a hub runs cannot be told",
                root.display()
            );
            Ok(HubState::Running(None))
        }
        Err(e) => {
            eprintln!("tinyhub cache: {e}");
            Err(IO_FAILED)
        }
    }
}

/// Takes the cache's lock for a command that writes (`repair`, `import`), writing the note
/// `tinyhub cache <command> pid … on … since …`; exit 3 naming the holder when a hub runs.
/// On a filesystem that cannot lock, a running hub cannot be seen: exit 2 unless `force`.
pub(crate) fn hold_lock(root: &Path, command: &str, force: bool) -> Result<DirLock, u8> {
    let note = crate::dir_lock::tool_note(&format!("tinyhub cache {command}"));
    match DirLock::probe(root, Some(&note)) {
        Ok(Probe::Free(lock)) => Ok(lock),
        Ok(Probe::NoLocks(lock, _)) if force => {
            eprintln!(
                "tinyhub cache {command}: {} cannot be locked; going on as --force says: \
                 make sure no hub runs on it",
                root.display()
            );
            Ok(lock)
        }
        Ok(Probe::NoLocks(..)) => {
            eprintln!(
                "tinyhub cache {command}: {} cannot be locked (NFS, CIFS?), so a running hub \
                 cannot be seen: stop it and give --force",
                root.display()
            );
            Err(USAGE)
        }
        Ok(Probe::Held { note }) => {
            eprintln!(
                "tinyhub cache {command}: a hub runs on {} ({}): stop it first",
                root.display(),
                note.as_deref()
                    .unwrap_or("it has not written its .tinyhub.lock yet")
            );
            Err(HUB_RUNS)
        }
        Err(e) => {
            eprintln!("tinyhub cache {command}: {e}");
            Err(IO_FAILED)
        }
    }
}

/// The kind directory a command's `resource` names in `component`'s cache: the directory's
/// own name (`pods.v1.core`) or its plural (`pods`), in the metadata view with `--view=metadata`.
/// Exit 1 when nothing matches, 2 when a plural names several (each listed).
pub(crate) fn resolve_kind(
    root: &Path,
    component: &str,
    resource: &str,
    metadata_view: bool,
) -> Result<String, u8> {
    let in_view = |kind: &str| match kind.split_once('/') {
        Some((METADATA_DIR, inner)) if metadata_view => Some(inner.to_owned()),
        None if !metadata_view => Some(kind.to_owned()),
        _ => None,
    };
    let on_disk = kinds_of(root, component);
    let kinds: Vec<String> = on_disk.iter().filter_map(|k| in_view(k)).collect();
    let prefix = if metadata_view {
        format!("{METADATA_DIR}/")
    } else {
        String::new()
    };
    if kinds.iter().any(|k| k == resource) {
        return Ok(format!("{prefix}{resource}"));
    }
    let plural: Vec<&String> = kinds
        .iter()
        .filter(|k| k.split('.').next() == Some(resource))
        .collect();
    match plural[..] {
        [one] => Ok(format!("{prefix}{one}")),
        [] => {
            // The other view may hold it: say so rather than only "nothing".
            let other_view = on_disk.iter().any(|k| {
                let inner = k.rsplit('/').next().unwrap_or(k);
                k.contains('/') != metadata_view
                    && (inner == resource || inner.split('.').next() == Some(resource))
            });
            let hint = match (metadata_view, other_view) {
                (true, true) => " in the metadata view (it is without --view=metadata)",
                (true, false) => " in the metadata view",
                (false, true) => " (its metadata view is: --view=metadata)",
                (false, false) => "",
            };
            eprintln!("tinyhub cache: {component} has no {resource} cached{hint}");
            Err(FOUND)
        }
        _ => {
            let names: Vec<&str> = plural.iter().map(|k| k.as_str()).collect();
            eprintln!(
                "tinyhub cache: {resource} names several kinds in {component}: {}; give one",
                names.join(", ")
            );
            Err(USAGE)
        }
    }
}
