//! `tinyhub cache repair`: what `verify` refuses, handled, with the hub stopped and the
//! cache's lock held for the whole run (a hub started meanwhile is refused, naming this
//! run, and its supervisor starts it again).
//!
//! In order: complete journals rolled forward (as the hub's recovery would), then the walk
//! again; the collections files will be taken from marked in `.relist` (before anything
//! moves, so a run killed halfway leaves no collection short and unmarked); each refused
//! entry moved into `.quarantine/<UTC time>/` (never deleted), each wrong mode set, each
//! wrong owner given back (as root only); `REPAIR.json` written beside what was moved; and
//! `verify` once more: exit 0 only when clean. Every step is one rename, chmod or chown,
//! so a repair killed at any moment is finished by running it again.

use std::collections::BTreeSet;
use std::time::SystemTime;

use serde_json::json;

use super::verify::{line, summary};
use super::{DONE, FOUND, IO_FAILED};
use crate::cache::store::STAGING;
use crate::cache::store::audit::{self, Action, AuditOptions, Code, Problem};
use crate::cache::store::quarantine::{self, Quarantine};
use crate::cache::store::relist::{RELIST_FILE, RelistMarks, RelistReason};
use crate::config::CacheArgs;

/// Runs `repair`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    let root = &args.disk_cache_path;
    if let Some(code) = super::refuse_unless_cache(root) {
        return code;
    }
    let _lock = match super::hold_lock(root, "repair", args.force) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    match repair(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tinyhub cache repair: {e}");
            IO_FAILED
        }
    }
}

fn walk(args: &CacheArgs) -> Result<Vec<Problem>, crate::cache::store::StoreError> {
    let mut problems = Vec::new();
    audit::walk(&args.disk_cache_path, AuditOptions::default(), &mut |p| {
        problems.push(p)
    })?;
    Ok(problems)
}

fn repair(args: &CacheArgs) -> Result<u8, crate::cache::store::StoreError> {
    let root = &args.disk_cache_path;
    let now = SystemTime::now();
    let mut done: Vec<(Problem, &'static str)> = Vec::new();
    let mut problems = walk(args)?;
    let mut quarantine = Quarantine::new(root, now);
    let journals: Vec<String> = problems
        .iter()
        .filter(|p| p.code == Code::PendingJournal)
        .map(|p| p.path.clone())
        .collect();
    if !journals.is_empty() {
        for rel in quarantine.roll_forward(&journals)? {
            println!(
                "rolled forward {rel} (kept in {}/ with what it deleted)",
                quarantine.rel_dir().unwrap_or_default()
            );
            if let Some(p) = problems.iter().find(|p| p.path == rel) {
                done.push((p.clone(), "rolled forward"));
            }
        }
        problems = walk(args)?;
    }
    if problems.is_empty() && done.is_empty() {
        println!("nothing to repair");
        return Ok(DONE);
    }
    // A record that does not read goes first: the marks are written over its name; and a
    // staging directory that is none (a file, a symlink): the marks are staged in it.
    while let Some(at) = problems.iter().position(|p| {
        (p.path == RELIST_FILE || p.path == STAGING) && p.code.action() == Action::Quarantine
    }) {
        let bad = problems.remove(at);
        quarantine.move_in(&bad.path)?;
        println!(
            "moved {} to {} ({})",
            bad.path,
            quarantine.rel_dir().unwrap_or_default(),
            bad.code.as_str()
        );
        done.push((bad, "moved"));
    }
    let taken: BTreeSet<(String, String)> = problems
        .iter()
        .filter(|p| p.code.action() == Action::Quarantine)
        .filter_map(|p| p.collection.clone())
        .collect();
    if !taken.is_empty() {
        let mut marks = RelistMarks::load(root)?;
        for (component, kind) in &taken {
            marks.mark(component, kind, RelistReason::Repaired, now);
        }
        marks.save(root)?;
        for (component, kind) in &taken {
            println!("marked {component}/{kind} for a relist at the next online read");
        }
    }
    let mut left = 0;
    for p in problems {
        let what = match p.code.action() {
            Action::Quarantine => {
                if !quarantine.move_in(&p.path)? {
                    continue;
                }
                println!(
                    "moved {} to {}/ ({})",
                    p.path,
                    quarantine.rel_dir().unwrap_or_default(),
                    p.code.as_str()
                );
                "moved"
            }
            Action::Chmod => {
                quarantine::fix_mode(root, &p.path, p.is_dir)?;
                println!(
                    "chmod {:04o} {}",
                    if p.is_dir { 0o700 } else { 0o600 },
                    p.path
                );
                "chmod"
            }
            Action::Chown => match quarantine::fix_owner(root, &p.path) {
                Ok(()) => {
                    println!("chown {} to the cache's owner", p.path);
                    "chown"
                }
                Err(e) => {
                    println!("left {}: {e} (only root gives a file away)", line(&p));
                    left += 1;
                    continue;
                }
            },
            // Rolled forward above; one seen now appeared since (no hub runs: none can).
            Action::RollForward => continue,
        };
        done.push((p, what));
    }
    let report = json!({
        "at": crate::logging::rfc3339(crate::unix_now()),
        "cache": root.display().to_string(),
        "by": crate::dir_lock::tool_note("tinyhub cache repair"),
        "actions": done.iter().map(|(p, what)| json!({
            "path": p.path,
            "code": p.code.as_str(),
            "detail": p.detail,
            "done": what,
        })).collect::<Vec<_>>(),
        "relisted": taken.iter().map(|(c, k)| json!({"component": c, "resource": k})).collect::<Vec<_>>(),
    });
    let written = quarantine.write_report(format!("{report:#}\n").as_bytes())?;
    let moved = done.iter().filter(|(_, w)| *w == "moved").count();
    println!(
        "repaired: {} actions ({moved} moved to {}, {} collections marked); report {}",
        done.len(),
        quarantine.rel_dir().unwrap_or_default(),
        taken.len(),
        written.display()
    );
    let mut again = Vec::new();
    let checked = audit::walk(root, AuditOptions::default(), &mut |p| again.push(p))?;
    for p in &again {
        println!("{}", line(p));
    }
    eprintln!("verify after repair: {}", summary(checked, again.len()));
    Ok(if again.is_empty() && left == 0 {
        DONE
    } else {
        FOUND
    })
}
