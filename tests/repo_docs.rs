//! What the repository says about itself holds: README.md's "Measured" block is what
//! BENCHMARKS.md gives (`benches/hub/readme.rs`, the function `make bench` writes it with),
//! with every missed target shown missed; the LICENSE file is the licence Cargo.toml names;
//! README.md states Cargo.toml's minimum Rust version; and every file the sources, tests,
//! benches, examples, cross builds, fuzz targets and the top documents cite exists in the
//! repository.
//!
//! It reads files only: no hub, no cloud.

#[allow(dead_code)]
#[path = "../benches/hub/readme.rs"]
mod readme;
#[allow(dead_code)]
#[path = "../benches/hub/report.rs"]
mod report;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The benchmark's running case (benches/hub.rs sets it), which `report` reads when a target is
/// recorded; only the test of that sets it here.
static CASE: Mutex<&'static str> = Mutex::new("");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    let path = repo().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The value of `key = "value"` in Cargo.toml's `[package]` table.
fn package_field(key: &str) -> Option<String> {
    let manifest = read("Cargo.toml");
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
        })
}

#[test]
fn readme_measured_block_is_what_benchmarks_md_gives() {
    let readme_text = read("README.md");
    let block = readme::measured_block(&read("BENCHMARKS.md"))
        .unwrap_or_else(|e| panic!("BENCHMARKS.md cannot give README.md's block: {e}"));
    let expected = readme::splice(&readme_text, &block).unwrap_or_else(|e| panic!("{e}"));
    if readme_text != expected {
        let (line, (got, want)) = readme_text
            .lines()
            .zip(expected.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, pair)| (i + 1, pair))
            .unwrap_or((0, ("(README.md ends)", "(more lines)")));
        panic!(
            "README.md's measured block is not what BENCHMARKS.md gives; run {}.\n\
             first difference, line {line}:\n  README.md: {got}\n  expected:  {want}",
            readme::REGENERATE
        );
    }
}

/// BENCHMARKS.md with `from` replaced by `to` once, where it must be.
fn edited(benchmarks: &str, from: &str, to: &str) -> String {
    assert!(
        benchmarks.contains(from),
        "BENCHMARKS.md has no {from:?} to edit"
    );
    benchmarks.replacen(from, to, 1)
}

#[test]
fn a_missed_target_is_shown_missed_and_a_met_one_met() {
    let benchmarks = read("BENCHMARKS.md");
    // The watch delivery target, whatever the last run measured, set to each result.
    let row_start = benchmarks
        .find("| Watch delivery: added latency")
        .expect("BENCHMARKS.md's targets have the watch delivery row");
    let row = benchmarks[row_start..].lines().next().unwrap_or("");
    // Cells of a table line: "" before the first bar, then the columns (target, goal,
    // measured, result, section).
    let cells =
        |line: &str| -> Vec<String> { line.split('|').map(|c| c.trim().to_owned()).collect() };
    let with = |r: &str| {
        let mut new_row = cells(row);
        new_row[4] = r.to_owned();
        let new_row = new_row.join(" | ");
        readme::measured_block(&edited(&benchmarks, row, new_row.trim())).expect("a block")
    };
    let watch_result = |block: &str| -> String {
        let line = block
            .lines()
            .find(|l| l.starts_with("| Watch delivery: added latency"))
            .expect("the block lists the watch delivery target");
        cells(line)[4].clone()
    };
    let summary = |block: &str| -> String {
        block
            .lines()
            .find(|l| l.starts_with("The targets set for the hub"))
            .expect("the block sums the targets up")
            .to_owned()
    };
    let missed = with("**missed**");
    assert_eq!(watch_result(&missed), "**missed**");
    let line = summary(&missed);
    assert!(
        line.contains("**missed**: ") && line.contains("Watch delivery: added latency"),
        "the summary names the missed target: {line}"
    );
    let met = with("met");
    assert_eq!(watch_result(&met), "met");
    assert!(
        !summary(&met).contains("Watch delivery"),
        "{}",
        summary(&met)
    );
}

/// The cells of the targets rows of BENCHMARKS.md's text `doc`, past the header and rule.
fn target_rows(doc: &str) -> Vec<Vec<String>> {
    let at = doc.find("## Targets").expect("a targets section");
    doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// BENCHMARKS.md's text without its targets section.
fn without_targets(doc: &str) -> String {
    let at = doc.find("## Targets").expect("a targets section");
    let end = at
        + 3
        + doc[at + 3..]
            .find("\n## ")
            .expect("a section after the targets");
    format!("{}{}", &doc[..at], &doc[end..])
}

/// The section number of a target row ("10" of "10, partial run of ...").
fn section_of(row: &[String]) -> &str {
    row[4].split(',').next().unwrap_or_default().trim()
}

fn row(what: &str, goal: &str, measured: &str, result: &str, section: &str) -> Vec<String> {
    [what, goal, measured, result, section]
        .map(String::from)
        .to_vec()
}

#[test]
fn a_partial_run_replaces_the_target_rows_of_its_sections_only() {
    let doc = read("BENCHMARKS.md");
    let old = target_rows(&doc);
    let of = |rows: &[Vec<String>], n: &str| -> Vec<Vec<String>> {
        rows.iter().filter(|r| r[4] == n).cloned().collect()
    };
    let in_10 = |rows: &[Vec<String>]| -> Vec<Vec<String>> {
        rows.iter()
            .filter(|r| section_of(r) == "10")
            .cloned()
            .collect()
    };
    let kept_name = "Cloud-mode CPU per small get, 1 client (issue 18)";
    // A case 10 target the run no longer reports (as a renamed one).
    let renamed = in_10(&old)
        .into_iter()
        .map(|r| r[0].clone())
        .find(|n| n != kept_name)
        .expect("BENCHMARKS.md has case 10's targets");
    let note = "10, partial run of 2026-12-07 00:01 UTC";
    let new = vec![
        row(
            "List CPU, 1 client (new)",
            "≤ 1×",
            "5 µs vs 9 µs (0.56×)",
            "met",
            note,
        ),
        row(
            kept_name,
            "≤ 1.2× nginx",
            "99 µs vs 78 µs (1.27×)",
            "**missed**",
            note,
        ),
    ];
    let merged = report::merge_targets(&doc, &["10".into()], new.clone()).expect("merged");
    let rows = target_rows(&merged);

    // Case 10's old rows gone, renamed ones too; the run's rows in their place; the other
    // sections' rows as they were, in order.
    let others: Vec<Vec<String>> = old
        .iter()
        .filter(|r| section_of(r) != "10")
        .cloned()
        .collect();
    assert!(!rows.iter().any(|r| r[0] == renamed), "{rows:?}");
    assert_eq!(of(&rows, note), new);
    assert_eq!(in_10(&rows), new, "{rows:?}");
    let first_10 = old
        .iter()
        .position(|r| section_of(r) == "10")
        .expect("a case 10 row");
    assert_eq!(rows[first_10..first_10 + 2], new[..]);
    let rest: Vec<Vec<String>> = rows.iter().filter(|r| r[4] != note).cloned().collect();
    assert_eq!(rest, others);
    // Nothing else in the document changed.
    assert_eq!(without_targets(&merged), without_targets(&doc));

    // The README's summary counts the rows as they are now.
    let block = readme::measured_block(&merged).expect("a block");
    let met = others.iter().filter(|r| r[3] == "met").count() + 1;
    let summary = block
        .lines()
        .find(|l| l.starts_with("The targets set for the hub"))
        .expect("a summary");
    assert!(
        summary.starts_with(&format!(
            "The targets set for the hub: {met} of {} met; **missed**: ",
            others.len() + 2
        )),
        "{summary}"
    );
    assert!(
        summary.contains(kept_name) && !summary.contains(&renamed),
        "{summary}"
    );
    assert!(!summary.contains("List CPU, 1 client (new)"), "{summary}");
    assert!(
        block.contains(&format!("| 5 µs vs 9 µs (0.56×) | met | {note} |")),
        "{block}"
    );
}

#[test]
fn a_targets_table_without_sections_gets_the_column() {
    let doc = "# t\n\n## Targets (issue 6)\n\n| target | goal | measured | result |\n\
               |---|---:|---:|---:|\n| a | ≤ 1 | 2 | **missed** |\n| b | ≤ 1 | 0 | met |\n\n\
               ## 1. A\n\ntext\n";
    let merged = report::merge_targets(
        doc,
        &["1".into()],
        vec![row("b", "≤ 1", "3", "**missed**", "1, partial run of D")],
    )
    .expect("merged");
    assert_eq!(
        target_rows(&merged),
        vec![
            row("a", "≤ 1", "2", "**missed**", ""),
            row("b", "≤ 1", "3", "**missed**", "1, partial run of D"),
        ]
    );
    assert!(merged.ends_with("\n## 1. A\n\ntext\n"), "{merged}");
}

#[test]
fn update_writes_a_partial_runs_section_and_targets_and_the_block_says_so() {
    let dir = std::env::temp_dir().join(format!("repo-docs-update-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("BENCHMARKS.md");
    let doc = read("BENCHMARKS.md");
    std::fs::write(&path, &doc).expect("a copy");

    let date = "2026-12-07 00:02 UTC";
    let mut run = report::Report {
        preamble: vec![
            ("Date".into(), date.into()),
            ("Machine".into(), "nproc 2, Test CPU".into()),
            ("Commit".into(), "`abc1234 test`".into()),
            ("Mode".into(), "full".into()),
        ],
        ..Default::default()
    };
    // Case 10's old section, with one figure changed, stands in for a fresh one.
    let at = doc.find("## 10. ").expect("case 10");
    let body = &doc[at..at + doc[at..].find("\n## 9.").expect("case 9 after case 10")];
    let (heading, rest) = body.split_once('\n').expect("a heading line");
    // Without the provenance of the run that wrote it: the fresh run adds its own.
    let rest: String = rest
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("_From a partial run"))
        .collect();
    let mut section = report::Section::new(
        heading.trim_start_matches("## "),
        &format!("Fresh.\n\n{}", rest.trim()),
    );
    section.notes.push("a fresh note".into());
    run.sections.push(section);
    run.target("Fresh target (issue 34)", "≤ 1", "0.5".into(), true);
    run.targets[0].section = "10".into();
    run.update(&path).expect("updated");
    let updated = std::fs::read_to_string(&path).expect("the copy");
    std::fs::remove_dir_all(&dir).expect("the temp dir removed");

    let fresh = &updated[updated.find("## 10. ").expect("case 10")..];
    let fresh = &fresh[..fresh.find("\n## 9.").expect("case 9 after case 10")];
    assert!(fresh.contains("Fresh.\n"), "{fresh}");
    assert!(
        fresh.contains(&format!(
            "- a fresh note\n\n_From a partial run (`--cases`); Date: {date}; "
        )),
        "{fresh}"
    );
    let rows = target_rows(&updated);
    let note = format!("10, partial run of {date}");
    assert_eq!(rows.iter().filter(|r| r[4] == note).count(), 1, "{rows:?}");
    assert!(
        !rows.iter().any(|r| section_of(r) == "10" && r[4] != note),
        "{rows:?}"
    );
    assert_eq!(
        rows.len(),
        target_rows(&doc)
            .iter()
            .filter(|r| section_of(r) != "10")
            .count()
            + 1
    );

    let block = readme::measured_block(&updated).expect("a block");
    let run_line = block
        .lines()
        .find(|l| l.starts_with("From [BENCHMARKS.md]"))
        .expect("a run line");
    assert!(
        run_line.contains(&format!(
            "; section 10 and its targets from a partial run of {date} on nproc 2, Test CPU"
        )),
        "{run_line}"
    );
    assert!(run_line.contains("run of 2026-12-03"), "{run_line}");
}

#[test]
fn a_target_belongs_to_the_section_its_case_made() {
    let mut r = report::Report::default();
    let record = |r: &mut report::Report, case: &'static str, what: &str| {
        *CASE.lock().unwrap_or_else(|p| p.into_inner()) = case;
        r.target(what, "≤ 1", "1".into(), true);
    };
    // Case 1 records before it pushes its section.
    record(&mut r, "case 1 (small get)", "one");
    r.sections.push(report::Section::new("1. Small get", ""));
    // Cases 4 and 5 push both, then record the memory targets.
    r.sections.push(report::Section::new("4. Cache writer", ""));
    r.sections.push(report::Section::new("5. Memory", ""));
    record(&mut r, "cases 4 and 5 (cache writer, memory)", "five");
    // Case 8 pushes, then records; case 10 on an emulated hub records, then pushes 10a.
    r.sections.push(report::Section::new("8. Heartbeat", ""));
    record(&mut r, "case 8 (heartbeat)", "eight");
    record(&mut r, "case 10 (peer: tinyhub beside nginx)", "ten");
    r.sections
        .push(report::Section::new("10a. Peer case on armv7", ""));
    // Case 2's name has other numbers after its own ("1,000").
    record(&mut r, "case 2 (list of 1,000 pods)", "two");
    r.sections
        .push(report::Section::new("2. List of 1,000 pods", ""));
    let sections: Vec<(String, String)> = r
        .targets
        .iter()
        .map(|t| (t.what.clone(), r.section_of(t)))
        .collect();
    let want = [
        ("one", "1"),
        ("five", "5"),
        ("eight", "8"),
        ("ten", "10a"),
        ("two", "2"),
    ];
    assert_eq!(
        sections,
        want.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );
}

#[test]
fn the_block_follows_the_figures_of_benchmarks_md() {
    let benchmarks = read("BENCHMARKS.md");
    let size_row = benchmarks
        .lines()
        .find(|l| l.starts_with("| armv7 musl release"))
        .expect("BENCHMARKS.md's binary sizes have an armv7 row");
    let cells: Vec<&str> = size_row.split('|').map(str::trim).collect();
    let new_row = size_row.replacen(cells[3], "9.99 MiB (10,475,274 bytes)", 1);
    let block = readme::measured_block(&edited(&benchmarks, size_row, &new_row)).expect("a block");
    assert!(block.contains("/ 9.99 MiB /"), "{block}");

    // A section the block reads that is gone is named, not papered over.
    let heading = benchmarks
        .lines()
        .find(|l| l.starts_with("## 8."))
        .expect("BENCHMARKS.md has case 8");
    let err = readme::measured_block(&edited(&benchmarks, heading, "## Gone"))
        .expect_err("no block without case 8");
    assert!(err.contains("8."), "{err}");
}

#[test]
fn splice_replaces_only_the_block() {
    let readme_text = format!(
        "# t\n\nbefore\n{}\nold figures\n{}\nafter\n",
        readme::BEGIN,
        readme::END
    );
    let block = format!("{}\nnew\n{}\n", readme::BEGIN, readme::END);
    let out = readme::splice(&readme_text, &block).expect("markers present");
    assert_eq!(
        out,
        format!(
            "# t\n\nbefore\n{}\nnew\n{}\nafter\n",
            readme::BEGIN,
            readme::END
        )
    );
    assert!(readme::splice("# no markers\n", &block).is_err());
}

#[test]
fn license_file_is_the_licence_cargo_toml_names() {
    let id = package_field("license").expect("Cargo.toml's [package] has a license");
    // The opening lines of each licence's standard text, by SPDX id.
    let titles: &[(&str, &[&str])] = &[(
        "Apache-2.0",
        &["Apache License", "Version 2.0, January 2004"],
    )];
    let (_, title) = titles
        .iter()
        .find(|(spdx, _)| *spdx == id)
        .unwrap_or_else(|| {
            panic!("no known title for license {id:?}: add its text's first lines here")
        });
    let license = read("LICENSE");
    let head: Vec<&str> = license
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(title.len())
        .collect();
    assert_eq!(&head, title, "LICENSE does not open as the {id} text");
    assert!(
        license.contains("END OF TERMS AND CONDITIONS"),
        "LICENSE is not the whole {id} text"
    );
}

#[test]
fn readme_states_the_minimum_rust_version_of_cargo_toml() {
    let version = package_field("rust-version").expect("Cargo.toml's [package] has a rust-version");
    let readme_text = read("README.md");
    assert!(
        readme_text.contains(&format!("({version} or newer")),
        "README.md does not state the minimum Rust version {version} as \"({version} or newer\""
    );
}

/// The repository's top-level directories a cited path may start with.
const TOP_DIRS: &[&str] = &["src", "tests", "benches", "examples", "cross", "fuzz"];

/// The text of `line` in which a file of kind `path` may cite files: a Rust file's comment
/// (after a `//` outside a string), any other file's whole line.
fn citing_text<'a>(path: &Path, line: &'a str) -> Option<&'a str> {
    if path.extension().is_none_or(|e| e != "rs") {
        return Some(line);
    }
    line.match_indices("//").find_map(|(at, _)| {
        let before = &line[..at];
        let in_string = before.matches('"').count() % 2 == 1;
        (!in_string && !before.ends_with(':')).then(|| &line[at..])
    })
}

/// The repository paths `text` cites: words ending in `.md`, or starting with a top-level
/// directory and a `/`. A word in a URL (after `:` or `/`) is not one; nor is one under
/// `target/`, which holds what builds write.
fn cited_paths(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(is_path_char) {
        let preceded = rest[..start].chars().next_back();
        let len = rest[start..]
            .find(|c| !is_path_char(c))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + len];
        rest = &rest[start + len..];
        // After `:` a URL or `repo:path`; after `$` a shell variable's value.
        if matches!(preceded, Some(':' | '$')) {
            continue;
        }
        let word = word
            .trim_start_matches("./")
            .trim_end_matches(['.', '/', '-']);
        let top = word.split('/').next().unwrap_or("");
        let name = word.rsplit('/').next().unwrap_or("");
        // `*.md` is a pattern, not a file.
        let markdown = name.len() > ".md".len() && name.ends_with(".md");
        let cites = markdown || (word.contains('/') && TOP_DIRS.contains(&top));
        if cites && !word.starts_with("target/") && !word.starts_with('/') {
            out.push(word.to_owned());
        }
    }
    out
}

/// Files under `dir`, recursively, leaving out fuzz inputs (not text).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if ["corpus", "seeds", "regressions", "target"].contains(&name.to_str().unwrap_or("")) {
            continue;
        }
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// `file:line: path` for each path cited in the files that does not exist, relative to the
/// repository or to the citing file's directory.
fn missing_citations(files: &[PathBuf]) -> Vec<String> {
    let mut missing = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        let dir = file.parent().unwrap_or(repo());
        for (n, line) in text.lines().enumerate() {
            let Some(citing) = citing_text(file, line) else {
                continue;
            };
            for cited in cited_paths(citing) {
                // A `..` may climb out of the repository (`../shared/…` exists beside a
                // checkout, not in it): such a path is missing whatever is there.
                let inside = !cited.split('/').any(|part| part == "..")
                    || dir
                        .join(&cited)
                        .canonicalize()
                        .is_ok_and(|p| repo().canonicalize().is_ok_and(|repo| p.starts_with(repo)));
                if !inside || !repo().join(&cited).exists() && !dir.join(&cited).exists() {
                    let shown = file.strip_prefix(repo()).unwrap_or(file);
                    missing.push(format!("{}:{}: {cited}", shown.display(), n + 1));
                }
            }
        }
    }
    missing
}

#[test]
fn every_file_the_code_cites_exists() {
    let mut files: Vec<PathBuf> = ["Makefile", "build.rs", "README.md", "ARCHITECTURE.md"]
        .iter()
        .map(|name| repo().join(name))
        .collect();
    for dir in TOP_DIRS {
        files_under(&repo().join(dir), &mut files);
    }
    assert!(
        files.iter().any(|f| f.ends_with("src/lib.rs")),
        "the scan found the sources"
    );
    let missing = missing_citations(&files);
    assert!(
        missing.is_empty(),
        "files cited that are not in the repository (cite README.md, ARCHITECTURE.md or the \
         file that holds the fact):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_citation_scan_finds_what_is_missing_and_only_that() {
    let check = |line: &str, expected: &[&str]| {
        assert_eq!(cited_paths(line), expected, "{line}");
    };
    check("/// Components (DESIGN.md §1).", &["DESIGN.md"]);
    check(
        "//! see src/cache/store.rs: recovery",
        &["src/cache/store.rs"],
    );
    check(
        "//! `fuzz/regressions/<target>` inputs",
        &["fuzz/regressions"],
    );
    check(
        "// https://github.com/openyurtio/openyurt/blob/x/README.md",
        &[],
    );
    check("//! writes `target/BENCHMARKS-quick.md` for --quick", &[]);
    check("//! YurtHub's `pkg/yurthub/filter/masterservice`", &[]);
    check("//! every `*.md` file", &[]);
    check("readme=$here/../../README.md", &[]);
    check("(apk-tools/src/adb.c)", &[]);
    assert_eq!(
        citing_text(
            Path::new("x.rs"),
            r#"let u = "https://x/DESIGN.md"; // fine"#
        ),
        Some("// fine")
    );

    let dir = std::env::temp_dir().join(format!("tinyhub-repo-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("cites.rs");
    let outside = dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a UTF-8 name");
    std::fs::write(dir.join("cites.md"), "").expect("writing the file");
    // Built from parts, so that this file does not cite them itself.
    let comment = "//!";
    std::fs::write(
        &file,
        format!(
            "{comment} Cites README.md and src/lib.rs, which exist,\n\
             {comment} and NOWHERE.md and src/nowhere.rs, which do not,\n\
             {comment} and ../{outside}/cites.md, which is outside the repository.\n"
        ),
    )
    .expect("writing the file");
    let missing = missing_citations(std::slice::from_ref(&file));
    std::fs::remove_dir_all(&dir).ok();
    let cited: Vec<&str> = missing
        .iter()
        .filter_map(|m| m.rsplit(": ").next())
        .collect();
    let outside_md = format!("../{outside}/cites.md");
    assert_eq!(
        cited,
        ["NOWHERE.md", "src/nowhere.rs", outside_md.as_str()],
        "{missing:?}"
    );
}

#[test]
fn the_build_line_names_the_dependencies_own_opt_level() {
    let line = report::release_profile(&repo().join("Cargo.toml"));
    assert!(line.starts_with("release (opt-level=\"z\""), "{line}");
    assert!(line.ends_with("dependencies: opt-level=\"s\")"), "{line}");
}
