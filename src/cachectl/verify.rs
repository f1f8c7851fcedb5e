//! `tinyhub cache verify [-o json]`: every file of the cache judged once (the store's walk,
//! `cache::store::audit`), one line per problem, `<path below the cache>: <code>: <detail>`;
//! exit 0 when clean, 1 with problems, for fleet automation. With the hub running it is
//! read-only as every read command is, and leaves the hub's work in progress (staging,
//! journals) unjudged. `-o json` streams one document: `{"cache","hub","problems":[…],
//! "checked":{"files","bytes"}}`, a problem a line.

use serde_json::json;

use super::{DONE, FOUND, HubState, IO_FAILED};
use crate::cache::store::audit::{self, AuditOptions, Checked, Problem};
use crate::config::CacheArgs;
use crate::config::cache_args::Output;

/// Runs `verify`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    let root = &args.disk_cache_path;
    let hub = match super::read_only_start(root) {
        Ok(hub) => hub,
        Err(code) => return code,
    };
    let options = AuditOptions {
        hub_running: matches!(hub, HubState::Running(_)),
    };
    // Streamed: each problem printed as the walk finds it (a collection's when it ends), so
    // the tool holds one file and one directory's names, not the report.
    let json = args.output == Output::Json;
    if json {
        let head = json!({"cache": root.display().to_string(), "hub": hub.as_str()}).to_string();
        // `{"cache":…,"hub":…` then the problems, then what was checked.
        println!("{},\"problems\":[", head.trim_end_matches('}'));
    }
    let mut problems = 0usize;
    let walked = audit::walk(root, options, &mut |p| {
        if json {
            let comma = if problems > 0 { "," } else { "" };
            println!("{comma}{}", problem_json(&p));
        } else {
            println!("{}", line(&p));
        }
        problems += 1;
    });
    let checked = match walked {
        Ok(checked) => checked,
        Err(e) => {
            if json {
                // The document stays whole: what was checked is unknown.
                println!("],\"checked\":null}}");
            }
            eprintln!("tinyhub cache verify: {e}");
            return IO_FAILED;
        }
    };
    if json {
        let checked = json!({"files": checked.files, "bytes": checked.bytes});
        println!("],\"checked\":{checked}}}");
    } else {
        eprintln!("{}", summary(checked, problems));
    }
    if problems == 0 { DONE } else { FOUND }
}

/// One problem as `verify` prints it.
pub(crate) fn line(p: &Problem) -> String {
    format!("{}: {}: {}", p.path, p.code.as_str(), p.detail)
}

/// `checked 120 files, 345678 bytes: 3 problems`.
pub(crate) fn summary(checked: Checked, problems: usize) -> String {
    format!(
        "checked {} files, {} bytes: {}",
        checked.files,
        checked.bytes,
        match problems {
            0 => "clean".to_owned(),
            1 => "1 problem".to_owned(),
            n => format!("{n} problems"),
        }
    )
}

/// One problem in `-o json`, with what repair would do about it.
fn problem_json(p: &Problem) -> serde_json::Value {
    json!({
        "path": p.path,
        "code": p.code.as_str(),
        "detail": p.detail,
        "action": p.code.action().as_str(),
    })
}
