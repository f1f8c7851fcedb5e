//! `tinyhub cache get <component> <resource> [-n ns] <name>`: one object as the hub would
//! serve it offline (the store's checks applied), verbatim, as JSON or as YAML. The
//! endpoints overlay lives in the hub's memory and is not applied.

use std::io::Write;

use super::{FOUND, IO_FAILED, USAGE};
use crate::cache::store::view::{self, Got};
use crate::config::CacheArgs;
use crate::config::cache_args::{CacheCommand, Output};

/// Runs `get`; the exit code.
pub(crate) fn run(args: &CacheArgs) -> u8 {
    let CacheCommand::Get {
        component,
        resource,
        name,
    } = &args.command
    else {
        return USAGE;
    };
    let root = &args.disk_cache_path;
    if let Err(code) = super::read_only_start(root) {
        return code;
    }
    let kind = match super::resolve_kind(root, component, resource, args.metadata_view) {
        Ok(kind) => kind,
        Err(code) => return code,
    };
    let bytes = match view::get(root, component, &kind, args.namespace.as_deref(), name) {
        Ok(Got::Object(bytes)) => bytes,
        Ok(Got::Missing) => {
            let at = match &args.namespace {
                Some(ns) => format!("{component}/{kind}/{ns}/{name}"),
                None => format!("{component}/{kind}/{name}"),
            };
            eprintln!("tinyhub cache get: {at}: not cached");
            if args.namespace.is_none()
                && let Ok(namespaces) = view::namespaces_holding(root, component, &kind, name)
                && !namespaces.is_empty()
            {
                eprintln!(
                    "tinyhub cache get: {name} is cached in namespace {}: give -n",
                    namespaces.join(", ")
                );
            }
            return FOUND;
        }
        Ok(Got::Refused(path, refusal)) => {
            eprintln!("{path}: {}: {refusal}", refusal.code());
            return FOUND;
        }
        Err(e) => {
            eprintln!("tinyhub cache get: {e}");
            return IO_FAILED;
        }
    };
    let text = match args.output {
        Output::Text | Output::Json => bytes,
        Output::Yaml => match serde_json::from_slice(&bytes) {
            Ok(value) => super::render::yaml(&value).into_bytes(),
            Err(e) => {
                eprintln!("tinyhub cache get: not JSON, no YAML of it: {e}");
                return FOUND;
            }
        },
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(&text).and_then(|()| out.flush()) {
        Ok(()) => super::DONE,
        Err(e) => {
            eprintln!("tinyhub cache get: {e}");
            IO_FAILED
        }
    }
}
