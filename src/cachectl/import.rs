//! `tinyhub cache import <file>`: an archive made by `export` installed into the cache, with
//! the hub stopped (the cache's lock held for the whole run; exit 3 when a hub holds it).
//!
//! The store stages, checks and installs it in one journal (`cache/store/archive/import.rs`):
//! any refusal (a damaged archive, an entry the store could not have made, a file naming
//! another object, another node's archive, a cache that holds content without `--replace`)
//! is one line and exit 2, a full disk is exit 4, and in both cases the cache is as it was.
//! A directory that does not exist yet, or is empty, is a cache to be (a node pre-seeded
//! before its first start); anything else must pass the "is this a cache" test.

use std::fs::File;
use std::io;
use std::path::Path;
use std::process::ExitCode;

use crate::cache::store::Store;
use crate::cache::store::archive::{ImportOptions, ImportReport};
use crate::cache::store::{StoreError, StoreOptions};
use crate::config::cache_args::CacheCommand;
use crate::config::{CacheArgs, parse_quantity};
use crate::dir_lock::LockError;

/// Runs `import`; the exit status.
pub(crate) fn run(args: &CacheArgs) -> ExitCode {
    ExitCode::from(import_from(args))
}

fn import_from(args: &CacheArgs) -> u8 {
    let CacheCommand::Import { file } = &args.command else {
        return super::USAGE;
    };
    let cache = &args.disk_cache_path;
    if !missing_or_empty(cache)
        && let Some(code) = super::refuse_unless_cache(cache)
    {
        return code;
    }
    // The hub's bound: an archive it could not keep is refused before anything is read.
    let max_bytes = match args.cache_max_bytes.as_deref().map(parse_quantity) {
        None => 0,
        Some(Some(bound)) => bound,
        Some(None) => {
            eprintln!(
                "tinyhub cache import: --cache-max-bytes={:?} is not a byte count",
                args.cache_max_bytes.as_deref().unwrap_or_default()
            );
            return super::USAGE;
        }
    };
    let src: Box<dyn io::Read> = if file.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(file) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("tinyhub cache import: {}: {e}", file.display());
                return super::USAGE;
            }
        }
    };
    // The lock, recovery of an interrupted import, and the write probe; no index: an
    // import reads no object back, and its journal drops every entry anyway.
    let options = StoreOptions {
        background_index: true,
        ..StoreOptions::default()
    };
    let store = match Store::open_with(cache, options) {
        Ok((store, _)) => store,
        Err(StoreError::Lock(LockError::Held { holder, .. })) => {
            eprintln!(
                "tinyhub cache import: a hub runs on {} ({}): stop it first",
                cache.display(),
                holder
                    .as_deref()
                    .unwrap_or("it has not written its .tinyhub.lock yet")
            );
            return super::HUB_RUNS;
        }
        Err(e) => {
            eprintln!("tinyhub cache import: {e}");
            return super::IO_FAILED;
        }
    };
    let opts = ImportOptions {
        node_name: &args.node_name,
        allow_other_node: args.allow_other_node,
        replace: args.replace,
        with_credentials: args.with_credentials,
        root_dir: &args.root_dir,
        now: crate::unix_now(),
        max_bytes,
    };
    match store.import(src, &opts) {
        Ok(report) => {
            say(&report, args);
            super::DONE
        }
        Err(e) if e.is_refusal() => {
            eprintln!("tinyhub cache import: refused: {e}; the cache is unchanged");
            super::USAGE
        }
        Err(e) => {
            eprintln!("tinyhub cache import: {e}");
            super::IO_FAILED
        }
    }
}

/// A cache directory not made yet, or made and empty: nothing to judge.
fn missing_or_empty(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// The warnings (stderr), then what was installed (stdout).
fn say(report: &ImportReport, args: &CacheArgs) {
    if report.node_name != args.node_name {
        eprintln!(
            "WARNING: the archive is node {:?}'s, this is {:?}: its cached Secrets are that node's",
            report.node_name, args.node_name
        );
    }
    if report.credentials > 0 {
        eprintln!(
            "WARNING: installed {} credential files (token answers, .grants, private keys and kubeconfigs)",
            report.credentials
        );
    }
    if report.credentials_skipped > 0 {
        eprintln!(
            "left out {} credential files of the archive (--with-credentials installs them)",
            report.credentials_skipped
        );
    }
    if let Some(into) = &report.replaced_into {
        println!(
            "moved the cache's old {} into {}",
            report.replaced.join(", "),
            args.disk_cache_path.join(into).display()
        );
    }
    println!(
        "imported {}'s cache of {}: {} files, {} bytes",
        report.node_name,
        crate::logging::rfc3339(report.created_at),
        report.files,
        report.bytes
    );
}
