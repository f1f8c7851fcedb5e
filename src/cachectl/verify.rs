//! `tinyhub cache verify [-o json]`: every file of the cache judged once (the store's walk,
//! `cache::store::audit`), one line per problem, `<path below the cache>: <code>: <detail>`;
//! exit 0 when clean, 1 with problems, for fleet automation. With the hub running it is
//! read-only as every read command is, and leaves the hub's work in progress (staging,
//! journals) unjudged.

use serde_json::json;

use super::{DONE, FOUND, HubState, IO_FAILED};
use crate::cache::store::audit::{self, AuditOptions, Checked, Problem};
use crate::config::CacheArgs;
use crate::config::cache_args::Output;

/// Runs `verify`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    let root = &args.disk_cache_path;
    if let Some(code) = super::refuse_unless_cache(root) {
        return code;
    }
    let hub = match super::probe_hub(root) {
        Ok(hub) => hub,
        Err(code) => return code,
    };
    eprintln!("{}", hub.line());
    let options = AuditOptions {
        hub_running: matches!(hub, HubState::Running(_)),
    };
    let mut problems = Vec::new();
    let checked = match audit::walk(root, options, &mut |p| {
        if args.output == Output::Text {
            println!("{}", line(&p));
        }
        problems.push(p);
    }) {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("tinyhub cache verify: {e}");
            return IO_FAILED;
        }
    };
    if args.output == Output::Json {
        println!("{}", json_report(args, &hub, checked, &problems));
    } else {
        eprintln!("{}", summary(checked, problems.len()));
    }
    if problems.is_empty() { DONE } else { FOUND }
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

/// `-o json`: the cache, the hub's state, what was read and each problem with what repair
/// would do about it.
fn json_report(args: &CacheArgs, hub: &HubState, checked: Checked, problems: &[Problem]) -> String {
    let doc = json!({
        "cache": args.disk_cache_path.display().to_string(),
        "hub": hub.as_str(),
        "checked": {"files": checked.files, "bytes": checked.bytes},
        "problems": problems.iter().map(|p| json!({
            "path": p.path,
            "code": p.code.as_str(),
            "detail": p.detail,
            "action": p.code.action().as_str(),
        })).collect::<Vec<_>>(),
    });
    format!("{doc:#}")
}
