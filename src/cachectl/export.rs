//! `tinyhub cache export <file>`: the cache as a tar.gz (`-`: to stdout), for pre-seeding a
//! node. Read-only: the lock is probed and let go, nothing under the cache is written, and a
//! running hub is not disturbed. The archive file is made new (`O_EXCL`, never through a
//! symlink, 0600: it holds the cached Secrets), never inside the cache, and removed again
//! when the export fails.
//!
//! Without `--with-credentials` no token answer, `.grants` or key goes in; with it, a loud
//! warning says so. Files the store would not serve are left out, one stderr line each.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

use crate::cache::store::archive::{ExportError, ExportOptions, ExportReport, export};
use crate::config::CacheArgs;
use crate::config::cache_args::CacheCommand;

/// Attempts at an export to a file while a hub writes: each starts the file again.
const ATTEMPTS: usize = 3;

/// Runs `export`; the exit status.
pub(crate) fn run(args: &CacheArgs) -> ExitCode {
    ExitCode::from(export_to(args))
}

fn export_to(args: &CacheArgs) -> u8 {
    let CacheCommand::Export { file } = &args.command else {
        return super::USAGE;
    };
    let cache = &args.disk_cache_path;
    if let Err(code) = super::read_only_start(cache) {
        return code;
    }
    let opts = ExportOptions {
        cache,
        root_dir: &args.root_dir,
        node_name: &args.node_name,
        with_credentials: args.with_credentials,
        now: crate::unix_now(),
    };
    if args.with_credentials {
        eprintln!("WARNING: the archive holds this node's private keys and tokens");
    }
    let done = if file.as_os_str() == "-" {
        export(&opts, io::stdout().lock()).map(|(_, report)| report)
    } else {
        match to_file(file, cache, &opts) {
            Ok(report) => Ok(report),
            Err(Failure::Refused(line)) => {
                eprintln!("tinyhub cache export: {line}");
                return super::USAGE;
            }
            Err(Failure::Export(e)) => Err(e),
        }
    };
    match done {
        Ok(report) => {
            say(&report, file, args);
            super::DONE
        }
        Err(e) => {
            eprintln!("tinyhub cache export: {e}");
            super::IO_FAILED
        }
    }
}

/// Why an export to a file did not happen: refused before it began (exit 2), or failed.
enum Failure {
    /// The file exists, or would be inside the cache.
    Refused(String),
    /// The export itself failed.
    Export(ExportError),
}

/// Exports into a new file at `path`, again from its start when the cache changed during an
/// attempt; the file is removed when no attempt succeeds.
fn to_file(path: &Path, cache: &Path, opts: &ExportOptions<'_>) -> Result<ExportReport, Failure> {
    if inside(path, cache) {
        return Err(Failure::Refused(format!(
            "{} is inside the cache: write the archive elsewhere",
            path.display()
        )));
    }
    let mut out = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(Failure::Refused(format!(
                "{} exists: an export never writes over a file",
                path.display()
            )));
        }
        Err(e) => return Err(Failure::Export(ExportError::Io(e))),
    };
    let mut attempt = 1;
    let result = loop {
        match export(opts, &mut out).and_then(|(out, report)| {
            out.flush()
                .and_then(|()| out.sync_all())
                .map_err(ExportError::Io)?;
            Ok(report)
        }) {
            Err(ExportError::Changed(what)) if attempt < ATTEMPTS => {
                eprintln!("{what} changed during the export; starting again");
                attempt += 1;
                if let Err(e) = restart(&mut out) {
                    break Err(ExportError::Io(e));
                }
            }
            done => break done,
        }
    };
    if result.is_err()
        && let Err(e) = fs::remove_file(path)
    {
        eprintln!(
            "tinyhub cache export: cannot remove {}: {e}",
            path.display()
        );
    }
    result.map_err(Failure::Export)
}

fn restart(out: &mut File) -> io::Result<()> {
    out.set_len(0)?;
    out.rewind()
}

/// Whether `path` would be inside the cache directory (its parent resolved).
fn inside(path: &Path, cache: &Path) -> bool {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (fs::canonicalize(parent), fs::canonicalize(cache)) {
        (Ok(parent), Ok(cache)) => parent.starts_with(cache),
        _ => false,
    }
}

/// What was left out (stderr), then the summary: on stdout, or on stderr when stdout is the
/// archive.
fn say(report: &ExportReport, file: &Path, args: &CacheArgs) {
    for line in &report.left_out {
        eprintln!("left out {line}");
    }
    let credentials = if args.with_credentials {
        format!(", {} of them credentials", report.credentials)
    } else {
        String::from(", no credentials")
    };
    let summary = format!(
        "exported {}'s cache to {}: {} files, {} bytes{credentials}; {} left out",
        args.node_name,
        file.display(),
        report.files,
        report.bytes,
        report.left_out.len()
    );
    if file.as_os_str() == "-" {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
}
