//! The benchmark's output: tables printed as each case finishes, the targets of issue 6 with
//! their measured values, and the Markdown file (`BENCHMARKS.md`, or
//! `target/BENCHMARKS-quick.md` for `--quick`) with the date, the machine and the build.
//! A partial run (`--cases`, `--update`) rewrites its own sections in that file and its own
//! rows of the targets table (each row names the section that measured it), marked as its.
//!
//! It holds figures as text already formatted by the cases; it measures nothing.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// A table: a header row and rows of cells.
pub struct Table {
    /// Optional caption printed above the table.
    pub caption: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(caption: &str, header: &[&str]) -> Table {
        Table {
            caption: caption.to_owned(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are left blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// GitHub Markdown, columns padded so the source reads as a table too.
    pub fn markdown(&self) -> String {
        let cols = self.header.len();
        let cell = |row: &[String], i: usize| row.get(i).cloned().unwrap_or_default();
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| cell(r, i).chars().count())
                .chain([self.header[i].chars().count(), 3])
                .max()
                .unwrap_or(3)
        };
        let widths: Vec<usize> = (0..cols).map(width).collect();
        let line = |cells: Vec<String>| {
            let mut out = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                // Figures right-aligned, the first column (labels) left-aligned.
                if i == 0 {
                    let _ = write!(out, " {c}{} |", " ".repeat(pad));
                } else {
                    let _ = write!(out, " {}{c} |", " ".repeat(pad));
                }
            }
            out.push('\n');
            out
        };
        let mut out = String::new();
        out.push_str(&line(self.header.clone()));
        let rule: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if i == 0 {
                    "-".repeat(*w)
                } else {
                    format!("{}:", "-".repeat(w - 1))
                }
            })
            .collect();
        out.push_str(&line(rule));
        for r in &self.rows {
            out.push_str(&line((0..cols).map(|i| cell(r, i)).collect()));
        }
        out
    }
}

/// One case's results.
pub struct Section {
    /// Heading, e.g. "1. Small get".
    pub title: String,
    /// What was measured, one paragraph.
    pub intro: String,
    /// Its tables.
    pub tables: Vec<Table>,
    /// Remarks under the tables.
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section.
    pub fn new(title: &str, intro: &str) -> Section {
        Section {
            title: title.to_owned(),
            intro: intro.to_owned(),
            tables: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Markdown for the file (and the terminal).
    pub fn markdown(&self) -> String {
        let mut out = format!("## {}\n\n", self.title);
        if !self.intro.is_empty() {
            let _ = writeln!(out, "{}\n", self.intro);
        }
        for t in &self.tables {
            if !t.caption.is_empty() {
                let _ = writeln!(out, "{}\n", t.caption);
            }
            let _ = writeln!(out, "{}", t.markdown());
        }
        for n in &self.notes {
            let _ = writeln!(out, "- {n}");
        }
        if !self.notes.is_empty() {
            out.push('\n');
        }
        out
    }
}

/// A target of the issue and how the run did against it.
pub struct Target {
    /// What is measured.
    pub what: String,
    /// The target, as the issue states it.
    pub goal: String,
    /// The measured value.
    pub measured: String,
    /// Met or missed.
    pub met: bool,
    /// The number of the section that measured it ("10", "10a"), or "" until
    /// [`Report::section_of`] works it out.
    pub section: String,
    /// The numbers of the case running when it was recorded ("4", "5" of "cases 4 and 5
    /// (...)"), and how many sections the report had then.
    recorded_in: (Vec<String>, usize),
}

/// Everything the run produced.
#[derive(Default)]
pub struct Report {
    /// Lines describing the machine and the build.
    pub preamble: Vec<(String, String)>,
    /// Per-case results, in order.
    pub sections: Vec<Section>,
    /// The targets.
    pub targets: Vec<Target>,
    /// Paragraphs of the "how measured" section.
    pub method: Vec<String>,
}

impl Report {
    /// Adds a target of the case running now (hub.rs's `CASE`): a partial run's `--update`
    /// replaces the rows of the sections it ran, so each row says its section.
    pub fn target(&mut self, what: &str, goal: &str, measured: String, met: bool) {
        // A poisoned lock still holds the name (a panicking case is reported by its name).
        let case = match crate::CASE.lock() {
            Ok(name) => name.to_string(),
            Err(poisoned) => poisoned.into_inner().to_string(),
        };
        self.targets.push(Target {
            what: what.to_owned(),
            goal: goal.to_owned(),
            measured,
            met,
            section: String::new(),
            recorded_in: (case_numbers(&case), self.sections.len()),
        });
    }

    /// The section number of `target`: its own when set, else the section of the case that
    /// recorded it pushed next after it (cases 1 to 3, 10, 12 record before pushing), else
    /// the one pushed last before it (cases 5, 8, 11, 14 record after). A section belongs to
    /// the case whose number starts it ("10a" to case 10).
    pub fn section_of(&self, target: &Target) -> String {
        if !target.section.is_empty() {
            return target.section.clone();
        }
        let (case, at) = &target.recorded_in;
        let of_case = |i: usize| {
            let n = number(&self.sections.get(i)?.title);
            let digits = n.trim_end_matches(|c: char| !c.is_ascii_digit());
            case.iter().any(|c| c == digits).then(|| n.to_owned())
        };
        of_case(*at)
            .or_else(|| at.checked_sub(1).and_then(of_case))
            .or_else(|| (case.len() == 1).then(|| case[0].clone()))
            .unwrap_or_default()
    }

    /// The targets as table rows (target, goal, measured, result, section), each section cell
    /// followed by `note` (", partial run of ..." for `--update`).
    fn target_rows(&self, note: &str) -> Vec<Vec<String>> {
        self.targets
            .iter()
            .map(|g| {
                vec![
                    g.what.clone(),
                    g.goal.clone(),
                    g.measured.clone(),
                    if g.met { "met" } else { "**missed**" }.into(),
                    format!("{}{note}", self.section_of(g)),
                ]
            })
            .collect()
    }

    /// The targets as a table.
    pub fn targets_table(&self) -> Table {
        let mut t = Table::new("", &TARGET_COLUMNS);
        for row in self.target_rows("") {
            t.row(row);
        }
        t
    }

    /// The whole Markdown document.
    pub fn markdown(&self, title: &str) -> String {
        let mut out = format!("# {title}\n\n");
        out.push_str(
            "Generated by `make bench` (`cargo bench --bench hub`, source `benches/hub.rs`). \
             Every case is measured two ways in the same run, alternating: a client talking to \
             the stand-in cloud directly over TLS, and the same client through tinyhub over \
             plain HTTP on loopback.\n\n",
        );
        for (k, v) in &self.preamble {
            let _ = writeln!(out, "- **{k}**: {v}");
        }
        out.push('\n');
        out.push_str("## Targets (issue 6)\n\n");
        out.push_str(&self.targets_table().markdown());
        out.push('\n');
        for s in &self.sections {
            out.push_str(&s.markdown());
        }
        out.push_str("## How measured\n\n");
        for p in &self.method {
            let _ = writeln!(out, "- {p}");
        }
        out
    }

    /// Writes the document to `path`.
    pub fn write(&self, path: &Path, title: &str) -> Result<(), String> {
        std::fs::write(path, self.markdown(title))
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Writes this (partial) run's sections into the document at `path`: each replaces the
    /// section of the same number ("9." of "## 9. ..."), or goes before "How measured" when
    /// the document has none; the rest stays as the last full run wrote it. Each section
    /// says it came from a partial run, with this run's date, machine and commit (the
    /// document's preamble is the full run's). The targets table likewise: this run's
    /// targets replace the rows of the sections it ran (rows it no longer reports go), each
    /// marked with this run's date; other sections' rows stay.
    pub fn update(&self, path: &Path) -> Result<(), String> {
        let old = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {} to update it: {e}", path.display()))?;
        let provenance: Vec<String> = self
            .preamble
            .iter()
            .filter(|(k, _)| k != "Mode")
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let sections: Vec<(String, String)> = self
            .sections
            .iter()
            .map(|s| {
                let mut text = s.markdown();
                let _ = writeln!(
                    text,
                    "{}{}._\n",
                    crate::readme::PARTIAL_LINE,
                    provenance.join("; ")
                );
                (number(&s.title).to_owned(), text)
            })
            .collect();
        let run: Vec<String> = sections.iter().map(|(n, _)| n.clone()).collect();
        let date = self
            .preamble
            .iter()
            .find(|(k, _)| k == "Date")
            .map_or("", |(_, v)| v.as_str());
        let rows = self.target_rows(&format!("{PARTIAL}{date}"));
        let merged = merge_targets(&merge_sections(&old, &sections), &run, rows)?;
        std::fs::write(path, merged).map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

/// The columns of the targets table.
pub const TARGET_COLUMNS: [&str; 5] = ["target", "goal", "measured", "result", "section"];

/// What follows the section number in the section cell of a target row from a partial run,
/// before that run's date.
pub const PARTIAL: &str = ", partial run of ";

/// The numbers a case's name starts with: "4", "5" of "cases 4 and 5 (cache writer, memory)".
fn case_numbers(name: &str) -> Vec<String> {
    let head = name.split('(').next().unwrap_or("");
    head.split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The section number of a targets row's section cell: "10" of "10, partial run of ...".
fn row_section(cell: &str) -> &str {
    cell.split(',').next().unwrap_or("").trim()
}

/// `doc` with the rows of its "## Targets" table that belong to a section in `run`, or share
/// the name of one of `rows`, replaced by `rows` (cells as [`TARGET_COLUMNS`]): where the
/// first replaced row stood, or at the end. A table without a section column (as written
/// before there was one) gets one, its old rows' cells blank.
pub fn merge_targets(doc: &str, run: &[String], rows: Vec<Vec<String>>) -> Result<String, String> {
    let mut chunks = chunks(doc);
    let chunk = chunks
        .iter_mut()
        .find(|c| c.starts_with("## Targets"))
        .ok_or("the document has no \"## Targets\" section to update")?;
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_owned()).collect()
    };
    let lines: Vec<&str> = chunk.split_inclusive('\n').collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with('|'))
        .ok_or("the \"## Targets\" section has no table")?;
    let end = lines[first..]
        .iter()
        .position(|l| !l.starts_with('|'))
        .map_or(lines.len(), |n| first + n);
    let header = cells(lines[first]);
    let column = |name: &str| header.iter().position(|h| h == name);
    let (what, section) = (column("target").unwrap_or(0), column("section"));
    let ours: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.first().map(String::as_str))
        .collect();
    let mut kept: Vec<Vec<String>> = Vec::new();
    let mut at = None;
    // Past the header and the rule under it.
    for line in lines.iter().take(end).skip(first + 2) {
        let old = cells(line);
        let label = old.get(what).map_or("", String::as_str);
        let of = section
            .and_then(|i| old.get(i))
            .map_or("", |c| row_section(c));
        if ours.contains(&label) || (!of.is_empty() && run.iter().any(|n| n == of)) {
            at.get_or_insert(kept.len());
            continue;
        }
        // Old cells in the order of the columns now.
        let by_name = |name: &str| {
            column(name)
                .and_then(|i| old.get(i))
                .cloned()
                .unwrap_or_default()
        };
        kept.push(TARGET_COLUMNS.iter().map(|c| by_name(c)).collect());
    }
    let at = at.unwrap_or(kept.len());
    kept.splice(at..at, rows);
    let mut table = Table::new("", &TARGET_COLUMNS);
    for row in kept {
        table.row(row);
    }
    *chunk = format!(
        "{}{}{}",
        lines[..first].concat(),
        table.markdown(),
        lines[end..].concat()
    );
    Ok(chunks.concat())
}

/// The document as chunks, each from a `## ` heading to the next (the first: the title and
/// preamble).
fn chunks(doc: &str) -> Vec<String> {
    let mut chunks: Vec<String> = Vec::new();
    for line in doc.split_inclusive('\n') {
        if line.starts_with("## ") || chunks.is_empty() {
            chunks.push(String::new());
        }
        if let Some(c) = chunks.last_mut() {
            c.push_str(line);
        }
    }
    chunks
}

/// The number of a section title: "9" of "9. A pool"; "" when it has none.
fn number(title: &str) -> &str {
    title.split_once(". ").map_or("", |(n, _)| n).trim()
}

/// `doc` with each of `sections` (number, Markdown from its `## ` heading on) in place of
/// the section of that number, or before "## How measured" (at the end without one).
fn merge_sections(doc: &str, sections: &[(String, String)]) -> String {
    let mut chunks = chunks(doc);
    let heading_number = |chunk: &str| -> String {
        chunk
            .strip_prefix("## ")
            .map(|rest| number(rest.lines().next().unwrap_or("")).to_owned())
            .unwrap_or_default()
    };
    for (n, text) in sections {
        if let Some(c) = chunks
            .iter_mut()
            .find(|c| !n.is_empty() && heading_number(c) == *n)
        {
            *c = text.clone();
        } else {
            let at = chunks
                .iter()
                .position(|c| c.starts_with("## How measured"))
                .unwrap_or(chunks.len());
            chunks.insert(at, text.clone());
        }
    }
    chunks.concat()
}

/// `YYYY-MM-DD HH:MM UTC` of now.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = tinyhub::logging::civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60
    )
}

/// `nproc`, the CPU model and the kernel, from the system.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kib| format!(", {:.1} GiB RAM", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("nproc {cpus}, {model}{mem}, Linux {kernel}")
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The `[profile.release]` settings from the manifest, on one line, with the dependencies'
/// own (`[profile.release.package."*"]`) when it has them.
pub fn release_profile(manifest: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return "release".into();
    };
    let table = |name: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| l.trim() != name)
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('['))
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.replace(' ', ""))
            .collect()
    };
    let mut settings = table("[profile.release]");
    let deps = table("[profile.release.package.\"*\"]");
    if !deps.is_empty() {
        settings.push(format!("dependencies: {}", deps.join(", ")));
    }
    if settings.is_empty() {
        "release".into()
    } else {
        format!("release ({})", settings.join(", "))
    }
}

/// CPU time the whole machine has spent busy and stolen by the hypervisor, in USER_HZ ticks,
/// from `/proc/stat`.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some((busy, *v.get(7)?))
}

/// The commit of the repository at `dir`, and whether tracked files differ from it.
pub fn commit(dir: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["log", "-1", "--format=%h %s"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("`{head}`, with uncommitted changes to tracked files")
            } else {
                format!("`{head}`")
            }
        }
        None => "unknown (not a git checkout)".into(),
    }
}
