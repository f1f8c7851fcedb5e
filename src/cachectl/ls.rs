//! `tinyhub cache ls [component] [resource] [-n ns]`: what is cached (in one namespace with
//! `-n`). Without a resource, a row per collection (its namespaces, objects, bytes and the age of the cloud's last
//! word on it, as the hub reads it: `.synced`, or the kind directories' times without one) and a footer (totals, token answers per component, documents,
//! the quarantine, pending relists); with one, a row per object.

use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

use super::render::{age, table};
use super::{DONE, HubState, IO_FAILED, USAGE};
use crate::cache::store::relist::RelistMarks;
use crate::cache::store::synced::stored_ages;
use crate::cache::store::view::{self, CollectionSummary, ObjectRow};
use crate::cache::synced::age_at;
use crate::config::CacheArgs;
use crate::config::cache_args::{CacheCommand, Output};

/// Runs `ls`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    let CacheCommand::Ls {
        component,
        resource,
    } = &args.command
    else {
        return USAGE;
    };
    let root = &args.disk_cache_path;
    let hub = match super::read_only_start(root) {
        Ok(hub) => hub,
        Err(code) => return code,
    };
    let text = match (component, resource) {
        (Some(component), Some(resource)) => {
            let kind = match super::resolve_kind(root, component, resource, args.metadata_view) {
                Ok(kind) => kind,
                Err(code) => return code,
            };
            match view::objects(root, component, &kind, args.namespace.as_deref()) {
                Ok(rows) => objects(args, &hub, component, &kind, &rows.unwrap_or_default()),
                Err(e) => {
                    eprintln!("tinyhub cache ls: {e}");
                    return IO_FAILED;
                }
            }
        }
        _ => match collections(args, &hub, component.as_deref()) {
            Ok(text) => text,
            Err(code) => return code,
        },
    };
    print!("{text}");
    DONE
}

/// The collection rows and the footer.
fn collections(args: &CacheArgs, hub: &HubState, component: Option<&str>) -> Result<String, u8> {
    let root = &args.disk_cache_path;
    let mut all = view::collections(root, args.namespace.as_deref());
    all.retain(|c| component.is_none_or(|want| c.component == want));
    all.retain(|c| c.kind.contains('/') == args.metadata_view || !args.metadata_view);
    let extras = view::extras(root).map_err(|e| {
        eprintln!("tinyhub cache ls: {e}");
        IO_FAILED
    })?;
    // The ages the hub would answer with: from `.synced`, or without one the kind
    // directories' times; none when the record does not read (said, not fatal).
    let synced = stored_ages(root).unwrap_or_else(|e| {
        eprintln!("tinyhub cache ls: {e}; ages unknown");
        Vec::new()
    });
    let now = crate::unix_secs();
    let age_of = |c: &CollectionSummary| {
        synced
            .iter()
            .find(|e| e.component == c.component && e.resource == c.kind)
            .and_then(|e| age_at(e.at, now))
    };
    // An unreadable record is said, not fatal: ls still shows what is there.
    let relist = RelistMarks::load(root).unwrap_or_else(|e| {
        eprintln!("tinyhub cache ls: {e}");
        RelistMarks::default()
    });
    let pending: Vec<(String, String, &'static str)> = relist
        .iter()
        .map(|m| (m.component.clone(), m.kind.clone(), m.reason.as_str()))
        .collect();
    let (objects, bytes) = all
        .iter()
        .fold((0, 0), |(o, b), c| (o + c.objects, b + c.bytes));
    if args.output == Output::Json {
        let doc = json!({
            "cache": root.display().to_string(),
            "hub": hub.as_str(),
            "collections": all.iter().map(|c| json!({
                "component": c.component,
                "resource": c.kind,
                "namespaces": c.namespaces,
                "objects": c.objects,
                "bytes": c.bytes,
                "ageSeconds": age_of(c),
            })).collect::<Vec<Value>>(),
            "total": {"collections": all.len(), "objects": objects, "bytes": bytes},
            "bound": args.cache_max_bytes,
            "tokens": extras.tokens.iter().map(|(c, n)| json!({"component": c, "answers": n})).collect::<Vec<Value>>(),
            "documents": extras.documents,
            "quarantine": {"files": extras.quarantine.0, "bytes": extras.quarantine.1},
            "relistPending": pending.iter().map(|(c, k, r)| json!({"component": c, "resource": k, "reason": r})).collect::<Vec<Value>>(),
        });
        return Ok(format!("{doc:#}\n"));
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|c| {
            vec![
                c.component.clone(),
                c.kind.clone(),
                c.namespaces.to_string(),
                c.objects.to_string(),
                c.bytes.to_string(),
                age_of(c).map_or_else(|| "age unknown".to_owned(), age),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "COMPONENT",
            "RESOURCE",
            "NAMESPACES",
            "OBJECTS",
            "BYTES",
            "AGE",
        ],
        &rows,
    );
    out.push_str(&format!(
        "\n{} collections, {objects} objects, {bytes} bytes\n",
        all.len()
    ));
    out.push_str(&match &args.cache_max_bytes {
        Some(bound) => format!("bound: --cache-max-bytes={bound}\n"),
        None => "bound: not given (pass the hub's --cache-max-bytes to see it here)\n".to_owned(),
    });
    let tokens: Vec<String> = extras
        .tokens
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    out.push_str(&format!(
        "token answers: {}\n",
        if tokens.is_empty() {
            "none".to_owned()
        } else {
            tokens.join(", ")
        }
    ));
    out.push_str(&format!("documents: {}\n", extras.documents));
    out.push_str(&format!(
        "quarantine: {} files, {} bytes\n",
        extras.quarantine.0, extras.quarantine.1
    ));
    let pending: Vec<String> = pending
        .iter()
        .map(|(c, k, r)| format!("{c}/{k} ({r})"))
        .collect();
    out.push_str(&format!(
        "relist pending: {}\n",
        if pending.is_empty() {
            "none".to_owned()
        } else {
            pending.join(", ")
        }
    ));
    Ok(out)
}

/// A row per object of one collection.
fn objects(
    args: &CacheArgs,
    hub: &HubState,
    component: &str,
    kind: &str,
    rows: &[ObjectRow],
) -> String {
    let modified = |r: &ObjectRow| {
        r.modified
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| crate::logging::rfc3339(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)))
    };
    if args.output == Output::Json {
        let doc = json!({
            "cache": args.disk_cache_path.display().to_string(),
            "hub": hub.as_str(),
            "component": component,
            "resource": kind,
            "objects": rows.iter().map(|r| json!({
                "namespace": r.namespace,
                "name": r.name,
                "bytes": r.bytes,
                "resourceVersion": r.resource_version,
                "modified": modified(r),
                "refused": r.refused.as_ref().map(|f| json!({"code": f.code(), "detail": f.to_string()})),
            })).collect::<Vec<Value>>(),
        });
        return format!("{doc:#}\n");
    }
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone().unwrap_or_default(),
                r.name.clone(),
                r.bytes.to_string(),
                match &r.refused {
                    Some(refusal) => format!("({})", refusal.code()),
                    None => r.resource_version.clone().unwrap_or_default(),
                },
                modified(r).unwrap_or_default(),
            ]
        })
        .collect();
    let mut out = table(
        &["NAMESPACE", "NAME", "BYTES", "RV", "MODIFIED"],
        &table_rows,
    );
    let refused = rows.iter().filter(|r| r.refused.is_some()).count();
    if refused > 0 {
        out.push_str(&format!(
            "\n{refused} not served (see tinyhub cache verify)\n"
        ));
    }
    out
}
