//! The floors hold: every arrow between the library's top-level modules runs down, and no
//! files import each other in a circle.
//!
//! The floors are declared once, in ARCHITECTURE.md's "Floors" table (top floor first); this
//! test reads that table, so the document cannot drift from the rule it checks (a second
//! copy here, compared with the document, would be one more place to edit for each move).
//! Names re-exported by a `mod.rs` count as the `mod.rs`'s: a circle through re-exports is
//! not seen. It reads every
//! `src/**/*.rs` the library compiles outside tests, collects the `crate::…` and `super::…`
//! paths each file names (in `use` trees and in code; comments and strings apart), and fails:
//!
//! - when a top-level module names one on its own floor or a higher one (an upward arrow);
//! - when files name each other in a circle (`a.rs` → `b.rs` → `a.rs`), naming the files and
//!   the names each takes from the next. A file naming its parent's `mod.rs` (`super::X`), or
//!   a `mod.rs` naming its children, is the ordinary shape of a module, not a circle;
//! - when the table misses a module of `src/`, or names one that is not there.
//!
//! Tests may reach anywhere: `#[cfg(test)]` items and the files of `#[cfg(test)] mod x;` are
//! skipped (as is code compiled only for the fuzz targets, `cfg(any(test, feature = "fuzzing"))`).
//! `main.rs` is the binary, a crate of its own above every floor.
//!
//! It reads files only: no hub, no cloud.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles of files allowed for now, each with why. An entry that no longer occurs fails the
/// test, so the list shrinks as circles are removed.
const ALLOWED_CIRCLES: &[(&str, &str, &str)] = &[];

/// Arrows listed per circle: an upward import can close a circle through dozens of files.
const MAX_ARROWS_SHOWN: usize = 12;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The floors declared in ARCHITECTURE.md, top first: each floor's top-level modules.
fn declared_floors() -> Vec<Vec<String>> {
    let text = read(&repo().join("ARCHITECTURE.md"));
    let section = text
        .split("\n## Floors\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Floors\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut floors = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if !line.trim_start().starts_with('|') || cells.len() < 2 {
            continue;
        }
        let number = cells[0].trim();
        if number.parse::<usize>().is_err() {
            continue; // the header and its rule
        }
        let modules: Vec<String> = cells[1]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        floors.push((number.parse::<usize>().unwrap_or(0), modules));
    }
    let count = floors.len();
    for (i, (number, _)) in floors.iter().enumerate() {
        assert_eq!(
            *number,
            count - i,
            "ARCHITECTURE.md's Floors table is numbered from the top floor ({count}) down to 1, one row a floor"
        );
    }
    floors.into_iter().map(|(_, m)| m).collect()
}

/// One token of Rust source, comments and literals dropped.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The tokens of `src` with their line numbers: identifiers, `::` and single punctuation;
/// comments, strings, characters and numbers are left out.
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_string = |i: &mut usize, line: &mut usize| {
        // at the opening quote
        *i += 1;
        while *i < b.len() && b[*i] != b'"' {
            if b[*i] == b'\\' {
                *i += 1;
            }
            if *i < b.len() && b[*i] == b'\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'"' => skip_string(&mut i, &mut line),
            b'\'' => {
                // A character literal, or a lifetime (left out either way).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    // a lifetime, or a multi-byte character
                    let rest = &src[i + 1..];
                    match rest.chars().next() {
                        Some(ch) if rest[ch.len_utf8()..].starts_with('\'') => {
                            i += 1 + ch.len_utf8() + 1;
                        }
                        _ => i += 1,
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let word = &src[start..i];
                let raw_string = matches!(word, "r" | "br" | "b" | "c" | "cr")
                    && matches!(b.get(i), Some(b'"') | Some(b'#'));
                if raw_string && b.get(i) == Some(&b'#') && word.ends_with('r') {
                    // r#"…"# (or a raw identifier r#name)
                    let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
                    if b.get(i + hashes) == Some(&b'"') {
                        let close = format!("\"{}", "#".repeat(hashes));
                        let body = i + hashes + 1;
                        let end = src[body..]
                            .find(&close)
                            .map_or(b.len(), |e| body + e + close.len());
                        line += src[i..end].matches('\n').count();
                        i = end;
                    } else {
                        let start = i + 1;
                        i = start;
                        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                            i += 1;
                        }
                        out.push((Tok::Ident(src[start..i].to_owned()), line));
                    }
                } else if raw_string && b.get(i) == Some(&b'"') {
                    if word.ends_with('r') {
                        let end = src[i + 1..].find('"').map_or(b.len(), |e| i + 1 + e + 1);
                        line += src[i..end].matches('\n').count();
                        i = end;
                    } else {
                        skip_string(&mut i, &mut line);
                    }
                } else {
                    out.push((Tok::Ident(word.to_owned()), line));
                }
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.')
                {
                    if b[i] == b'.' && !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                        break;
                    }
                    i += 1;
                }
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::Path, line));
                i += 2;
            }
            c if c.is_ascii_whitespace() => i += 1,
            c if c.is_ascii() => {
                out.push((Tok::Punct(c as char), line));
                i += 1;
            }
            _ => i += 1, // non-ASCII outside literals: nothing a path is made of
        }
    }
    out
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn is(t: Option<&(Tok, usize)>, p: char) -> bool {
    matches!(t, Some((Tok::Punct(c), _)) if *c == p)
}

/// Whether the attribute at `toks[i]` (`#`) is a `cfg` that holds only in tests or fuzzing;
/// returns the index after the attribute.
fn attribute(toks: &[(Tok, usize)], i: usize) -> (bool, usize) {
    let mut j = i + 1;
    if is(toks.get(j), '!') {
        j += 1;
    }
    if !is(toks.get(j), '[') {
        return (false, i + 1);
    }
    let mut depth = 0;
    let mut words = Vec::new();
    while j < toks.len() {
        match &toks[j].0 {
            Tok::Punct('[') | Tok::Punct('(') => depth += 1,
            Tok::Punct(']') | Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    j += 1;
                    break;
                }
            }
            Tok::Ident(w) => words.push(w.as_str()),
            _ => {}
        }
        j += 1;
    }
    let test_only = words.first() == Some(&"cfg")
        && words.contains(&"test")
        && !words.contains(&"not")
        && !words.contains(&"all");
    (test_only, j)
}

/// From `toks[i]`, the index after one item (at its `;`, `,` or closing `}`); the name of
/// the module it declares, if it is `mod name;` or `mod name { … }`.
fn skip_item(toks: &[(Tok, usize)], mut i: usize) -> (usize, Option<String>) {
    let mut depth = 0i32;
    let mut module = None;
    while i < toks.len() {
        if let (Some("mod"), Some(name)) = (ident(toks.get(i)), ident(toks.get(i + 1)))
            && depth == 0
            && module.is_none()
        {
            module = Some(name.to_owned());
        }
        match toks[i].0 {
            Tok::Punct('{') | Tok::Punct('(') | Tok::Punct('[') => depth += 1,
            Tok::Punct(c @ ('}' | ')' | ']')) => {
                depth -= 1;
                if depth < 0 {
                    return (i, module); // the end of the enclosing block: leave it
                }
                if depth == 0 && c == '}' {
                    return (i + 1, module);
                }
            }
            Tok::Punct(';') | Tok::Punct(',') if depth == 0 => return (i + 1, module),
            _ => {}
        }
        i += 1;
    }
    (i, module)
}

/// The tokens of `src` outside test-only items, and the modules it declares test-only.
fn production_tokens(src: &str) -> (Vec<(Tok, usize)>, Vec<String>) {
    let toks = tokens(src);
    let mut out = Vec::with_capacity(toks.len());
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if is(toks.get(i), '#') {
            let (test_only, after) = attribute(&toks, i);
            if test_only {
                let mut j = after;
                while is(toks.get(j), '#') {
                    j = attribute(&toks, j).1;
                }
                let (end, module) = skip_item(&toks, j);
                test_modules.extend(module);
                i = end;
            } else {
                out.extend_from_slice(&toks[i..after]);
                i = after;
            }
            continue;
        }
        out.push(toks[i].clone());
        i += 1;
    }
    (out, test_modules)
}

/// A path as written: its segments (`crate`, `super`, `self` kept) and its line.
type Written = (Vec<String>, usize);

/// The paths a use tree starting at `toks[i]` names, each whole (groups expanded); the index
/// after it.
fn use_tree(
    toks: &[(Tok, usize)],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<Written>,
) -> usize {
    let mut path = prefix.to_vec();
    let line = toks.get(i).map_or(0, |t| t.1);
    if matches!(toks.get(i), Some((Tok::Path, _))) {
        i += 1; // a leading `::`
    }
    loop {
        match toks.get(i) {
            Some((Tok::Ident(w), _)) if w != "as" => {
                path.push(w.clone());
                i += 1;
                if matches!(toks.get(i), Some((Tok::Path, _))) {
                    i += 1;
                    continue;
                }
                if ident(toks.get(i)) == Some("as") {
                    i += 2;
                }
                out.push((path, line));
                return i;
            }
            Some((Tok::Punct('*'), _)) => {
                out.push((path, line));
                return i + 1;
            }
            Some((Tok::Punct('{'), _)) => {
                i += 1;
                while i < toks.len() && !is(toks.get(i), '}') {
                    i = use_tree(toks, i, &path, out);
                    if is(toks.get(i), ',') {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => return i + 1,
        }
    }
}

/// Every path a file names: in its `use` items, and `crate::…`, `super::…`, `self::…` in code.
fn written_paths(toks: &[(Tok, usize)]) -> Vec<Written> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if ident(toks.get(i)) == Some("use") {
            i = use_tree(toks, i + 1, &[], &mut out);
            continue;
        }
        let head = ident(toks.get(i));
        let after_path = i > 0 && matches!(toks.get(i - 1), Some((Tok::Path, _)));
        if matches!(head, Some("crate" | "super" | "self"))
            && !after_path
            && matches!(toks.get(i + 1), Some((Tok::Path, _)))
        {
            let line = toks[i].1;
            let mut path = vec![head.unwrap_or_default().to_owned()];
            let mut j = i + 1;
            while matches!(toks.get(j), Some((Tok::Path, _))) {
                match ident(toks.get(j + 1)) {
                    Some(w) => path.push(w.to_owned()),
                    None => break,
                }
                j += 2;
            }
            out.push((path, line));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// One library source file: its module path (`["cache", "store", "journal"]`) and file.
struct File {
    module: Vec<String>,
    path: PathBuf,
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The library's production files, by module path, starting from `lib.rs`.
fn library_files() -> Vec<(File, Vec<(Tok, usize)>)> {
    let mut files = Vec::new();
    let mut todo = vec![(Vec::<String>::new(), repo().join("src/lib.rs"))];
    while let Some((module, path)) = todo.pop() {
        let (toks, test_modules) = production_tokens(&read(&path));
        // The children it declares: `mod name;` outside tests.
        let dir = if module.is_empty() || path.ends_with("mod.rs") {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            path.with_extension("")
        };
        for w in toks.windows(3) {
            if let (Tok::Ident(m), Tok::Ident(name), Tok::Punct(';')) = (&w[0].0, &w[1].0, &w[2].0)
                && m == "mod"
                && !test_modules.contains(name)
            {
                let mut child = module.clone();
                child.push(name.clone());
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(name).join("mod.rs");
                let file = if flat.exists() { flat } else { nested };
                todo.push((child, file));
            }
        }
        files.push((File { module, path }, toks));
    }
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    files
}

/// What one file names from another: target module → the names, with the first line.
type Names = BTreeMap<Vec<String>, (BTreeSet<String>, usize)>;

/// The modules each file names (resolved to the library's file modules) and which names.
fn arrows(files: &[(File, Vec<(Tok, usize)>)]) -> Vec<Names> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.0.module.clone()).collect();
    files
        .iter()
        .map(|(file, toks)| {
            let mut names = Names::new();
            for (path, line) in written_paths(toks) {
                let mut absolute = match path.first().map(String::as_str) {
                    Some("crate") => Vec::new(),
                    Some("self") => file.module.clone(),
                    Some("super") => file.module.clone(),
                    _ => continue, // an external crate, or a child by its bare name
                };
                let mut rest = &path[1..];
                if path[0] == "super" {
                    absolute.pop();
                }
                while rest.first().map(String::as_str) == Some("super") {
                    absolute.pop();
                    rest = &rest[1..];
                }
                absolute.extend(rest.iter().filter(|s| *s != "self").cloned());
                let Some(k) = (1..=absolute.len())
                    .rev()
                    .find(|k| modules.contains(&absolute[..*k]))
                else {
                    continue; // an item of the crate root (`crate::lock`)
                };
                let name = absolute
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| "the module itself".into());
                let entry = names
                    .entry(absolute[..k].to_vec())
                    .or_insert_with(|| (BTreeSet::new(), line));
                entry.0.insert(name);
            }
            names
        })
        .collect()
}

fn show(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn circles(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.found.push(component);
            }
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.found
}

/// Upward arrows between top-level modules, as messages.
fn upward_arrows(
    files: &[(File, Vec<(Tok, usize)>)],
    arrows: &[Names],
    floors: &[Vec<String>],
) -> Vec<String> {
    let floor_of: BTreeMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.iter().map(move |m| (m.as_str(), floors.len() - i)))
        .collect();
    let mut found = Vec::new();
    for ((file, _), names) in files.iter().zip(arrows) {
        let Some(from) = file.module.first() else {
            continue;
        };
        for (target, (items, line)) in names {
            let Some(to) = target.first() else { continue };
            if to == from {
                continue;
            }
            let (Some(&f), Some(&t)) = (floor_of.get(from.as_str()), floor_of.get(to.as_str()))
            else {
                continue; // a module missing from the table fails on its own
            };
            if t >= f {
                found.push(format!(
                    "{}:{line} names `{}` ({}) on floor {t}, but `{from}` is on floor {f}: \
                     a module may name only modules on floors below its own",
                    rel(&file.path),
                    show(target),
                    items.iter().cloned().collect::<Vec<_>>().join(", "),
                ));
            }
        }
    }
    found
}

/// Circles of files, as messages, the allowed ones apart; and the allowed ones not seen.
fn file_circles(
    files: &[(File, Vec<(Tok, usize)>)],
    arrows: &[Names],
) -> (Vec<String>, Vec<String>) {
    let index: BTreeMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.0.module.as_slice(), i))
        .collect();
    let allowed = |a: usize, b: usize| {
        let (a, b) = (rel(&files[a].0.path), rel(&files[b].0.path));
        ALLOWED_CIRCLES
            .iter()
            .any(|(x, y, _)| (a == *x && b == *y) || (a == *y && b == *x))
    };
    let mut edges = vec![BTreeSet::new(); files.len()];
    let mut seen_allowed = BTreeSet::new();
    for (from, names) in arrows.iter().enumerate() {
        let module = &files[from].0.module;
        for target in names.keys() {
            // A child naming its parent, or a parent its child: the shape of a module.
            if module.starts_with(target) || target.starts_with(module) {
                continue;
            }
            let Some(&to) = index.get(target.as_slice()) else {
                continue;
            };
            if allowed(from, to) {
                if arrows[to].contains_key(module) {
                    seen_allowed.insert((
                        rel(&files[from.min(to)].0.path),
                        rel(&files[from.max(to)].0.path),
                    ));
                }
                continue;
            }
            edges[from].insert(to);
        }
    }
    let mut found = Vec::new();
    for component in circles(&edges) {
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let mut text = format!(
            "a circle of {} files: {}",
            component.len(),
            component
                .iter()
                .map(|&v| rel(&files[v].0.path))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut shown = 0;
        for &v in &component {
            for &w in edges[v].iter().filter(|w| members.contains(w)) {
                shown += 1;
                if shown > MAX_ARROWS_SHOWN {
                    continue;
                }
                let (items, line) = &arrows[v][&files[w].0.module];
                text.push_str(&format!(
                    "\n    {}:{line} -> {}: {}",
                    rel(&files[v].0.path),
                    rel(&files[w].0.path),
                    items.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if shown > MAX_ARROWS_SHOWN {
            text.push_str(&format!(
                "\n    … and {} more arrows",
                shown - MAX_ARROWS_SHOWN
            ));
        }
        found.push(text);
    }
    let stale = ALLOWED_CIRCLES
        .iter()
        .filter(|(a, b, _)| {
            !seen_allowed.contains(&(a.to_string(), b.to_string()))
                && !seen_allowed.contains(&(b.to_string(), a.to_string()))
        })
        .map(|(a, b, _)| {
            format!("{a} and {b} no longer name each other: remove them from ALLOWED_CIRCLES in tests/floors.rs")
        })
        .collect();
    (found, stale)
}

#[test]
fn every_arrow_runs_down_and_no_files_circle() {
    let floors = declared_floors();
    let files = library_files();
    let arrows = arrows(&files);

    let top: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.0.module.first().map(String::as_str))
        .collect();
    let declared: Vec<&str> = floors.iter().flatten().map(String::as_str).collect();
    let mut problems = Vec::new();
    for m in &top {
        if !declared.contains(m) {
            problems.push(format!(
                "`{m}` (src/) is on no floor of ARCHITECTURE.md's Floors table"
            ));
        }
    }
    let mut once = BTreeSet::new();
    for m in &declared {
        if !top.contains(m) {
            problems.push(format!(
                "ARCHITECTURE.md's Floors table names `{m}`, which is no module of src/"
            ));
        }
        if !once.insert(*m) {
            problems.push(format!("ARCHITECTURE.md's Floors table names `{m}` twice"));
        }
    }
    problems.extend(upward_arrows(&files, &arrows, &floors));
    let (circles, stale) = file_circles(&files, &arrows);
    problems.extend(circles);
    problems.extend(stale);
    assert!(
        problems.is_empty(),
        "the floors do not hold ({} problems):\n{}\n\n{}",
        problems.len(),
        problems.join("\n"),
        module_summary(&files, &arrows)
    );
}

/// The arrows between top-level modules: their circles, or (when there is none) the floors
/// they would stand on, lowest first: to help whoever edits the Floors table.
fn module_summary(files: &[(File, Vec<(Tok, usize)>)], arrows: &[Names]) -> String {
    let top: Vec<&str> = files
        .iter()
        .filter_map(|f| f.0.module.first().map(String::as_str))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let at = |m: &str| top.iter().position(|t| *t == m);
    let mut edges = vec![BTreeSet::new(); top.len()];
    for ((file, _), names) in files.iter().zip(arrows) {
        let Some(from) = file.module.first().and_then(|m| at(m)) else {
            continue;
        };
        for target in names.keys() {
            if let Some(to) = target.first().and_then(|m| at(m))
                && to != from
            {
                edges[from].insert(to);
            }
        }
    }
    let found = circles(&edges);
    if !found.is_empty() {
        return format!(
            "circles of top-level modules ({}):\n{}",
            found.len(),
            found
                .iter()
                .map(|c| format!(
                    "    {}",
                    c.iter().map(|&v| top[v]).collect::<Vec<_>>().join(", ")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Longest path down from each module: its floor, counted from 1.
    fn height(v: usize, edges: &[BTreeSet<usize>], memo: &mut Vec<Option<usize>>) -> usize {
        if let Some(h) = memo[v] {
            return h;
        }
        let h = 1 + edges[v]
            .iter()
            .map(|&w| height(w, edges, memo))
            .max()
            .unwrap_or(0);
        memo[v] = Some(h);
        h
    }
    let mut memo = vec![None; top.len()];
    let mut by_floor: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (v, module) in top.iter().enumerate() {
        by_floor
            .entry(height(v, &edges, &mut memo))
            .or_default()
            .push(module);
    }
    format!(
        "no circle of top-level modules; the lowest floors they fit, top first:\n{}",
        by_floor
            .iter()
            .rev()
            .map(|(f, m)| format!(
                "| {f} | {} |",
                m.iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The scanner sees what an import looks like however it is written, and nothing in
/// comments, strings or test-only items: a blind scanner would pass any tree.
#[test]
fn the_scanner_reads_use_trees_and_paths_and_skips_tests_comments_and_strings() {
    let src = r##"
        //! Names `crate::doc_only` in a comment.
        use crate::{a::{B, c::D}, e as f};
        use super::sibling::Item;
        pub(crate) fn g() -> crate::h::I {
            let _ = "crate::in_a_string::X";
            let _ = r#"crate::in_a_raw_string"#;
            let _c = 'c';
            /* crate::in_a_block_comment */
            crate::j::k::call()
        }
        #[cfg(test)]
        use crate::test_only::T;
        #[cfg(test)]
        mod tests {
            use crate::tests_only::U;
        }
        #[cfg(any(test, feature = "fuzzing"))]
        fn fuzz_only() -> crate::fuzz_only::V {}
        #[cfg(test)]
        mod other_tests;
    "##;
    let (toks, test_modules) = production_tokens(src);
    let seen: Vec<String> = written_paths(&toks)
        .into_iter()
        .map(|(path, _)| path.join("::"))
        .collect();
    assert_eq!(
        seen,
        [
            "crate::a::B",
            "crate::a::c::D",
            "crate::e",
            "super::sibling::Item",
            "crate::h::I",
            "crate::j::k::call",
        ]
    );
    assert_eq!(test_modules, ["tests", "other_tests"]);
}
