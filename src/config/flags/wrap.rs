//! `--help` fitted to the reader (issue 35: lines ran to 400 characters): each line longer
//! than the width is broken at spaces, its continuation lines indented to where its text
//! starts (a flag's description column), and "did you mean" for a flag name close to a real
//! one. Pure but for [`help_width`], which asks the terminal.

/// The narrowest width wrapped to: below it a description column would not fit.
const MIN_WIDTH: usize = 40;
/// The width when stdout is no terminal and `COLUMNS` says nothing (a pipe, a file, a man
/// page generator).
pub(crate) const DEFAULT_WIDTH: usize = 80;

/// The width to wrap `--help` to: `COLUMNS` when it holds a number (the user's explicit
/// choice), else the terminal's (`TIOCGWINSZ` on stdout), else [`DEFAULT_WIDTH`].
pub(crate) fn help_width() -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok());
    columns
        .or_else(terminal_width)
        .filter(|&w| w > 0)
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// The columns of the terminal stdout is, when it is one.
#[allow(unsafe_code, reason = "std has no call for a terminal's size")]
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: `winsize` is plain old data, zeroed is a valid value; TIOCGWINSZ writes one
    // `winsize` through the pointer, which is ours and valid for writing.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &raw mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// `text` with every line longer than `width` characters broken at spaces, continuation
/// lines indented to where the line's text starts ([`hanging_indent`]). A flag line whose
/// description column is past a third of the width (the longest flag name sets it) gets its
/// description below the name instead, four spaces further in. A word longer than the room
/// left stays whole on its own line.
pub(crate) fn wrap(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for line in text.split_inclusive('\n') {
        let (line, newline) = match line.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (line, ""),
        };
        if line.chars().count() <= width {
            out.push_str(line);
        } else {
            let (indent, description) = hanging_indent(line);
            match description {
                Some(at) if indent > width / 3 => {
                    let lead = line.len() - line.trim_start_matches(' ').len();
                    out.push_str(line[..at].trim_end());
                    out.push('\n');
                    let below = format!("{}{}", " ".repeat(lead + 4), &line[at..]);
                    fill(&mut out, &below, lead + 4, width);
                }
                _ => fill(&mut out, line, indent.min(width / 3), width),
            }
        }
        out.push_str(newline);
    }
    out
}

/// Appends `line` broken at spaces into lines of at most `width` characters (but for a
/// word longer than the room), each continuation indented by `indent` spaces.
fn fill(out: &mut String, line: &str, indent: usize, width: usize) {
    let mut current = 0usize;
    for (i, word) in line.split(' ').enumerate() {
        let len = word.chars().count();
        if i > 0 && current > indent && current + 1 + len > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            current = indent;
        } else if i > 0 {
            out.push(' ');
            current += 1;
        }
        out.push_str(word);
        current += len;
    }
}

/// Where a long line's text starts, and the byte where a flag line's description begins:
/// at the margin for prose (no leading spaces); else after the leading spaces, the name and
/// the first run of two or more spaces (a flag line's description column), else after `: `
/// (an ignored flag's line), else four past the leading spaces.
fn hanging_indent(line: &str) -> (usize, Option<usize>) {
    let lead = line.len() - line.trim_start_matches(' ').len();
    if lead == 0 {
        // Prose.
        return (0, None);
    }
    let rest = &line[lead..];
    if let Some(gap) = rest.find("  ") {
        let spaces = rest[gap..].len() - rest[gap..].trim_start_matches(' ').len();
        let at = lead + gap + spaces;
        return (line[..at].chars().count(), Some(at));
    }
    match rest.find(": ") {
        Some(colon) => (lead + rest[..colon].chars().count() + 2, None),
        None => (lead + 4, None),
    }
}

/// The real name closest to `given`, when one is close: within two edits, or one that
/// `given` begins (`--proxy` for `--proxy-port`); the fewest edits win, then the table's order.
pub(crate) fn did_you_mean<'a>(
    given: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    names
        .into_iter()
        .filter_map(|name| {
            let distance = edit_distance(given, name);
            // (Two edits of a name of four letters or fewer make another word: `--x` is no `--v`.)
            let near = distance <= 2 && distance * 2 < name.len();
            let close = near || (given.len() >= 3 && name.starts_with(given));
            close.then_some((distance, name))
        })
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

/// Levenshtein distance over bytes (flag names are ASCII), one row kept.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn help_wraps_at_80_and_at_a_given_width_with_hanging_indents() {
        let help = super::super::help_text();
        assert!(widest(&help) > 120, "the unwrapped help has long lines");
        for width in [80, 100, 132] {
            let wrapped = wrap(&help, width);
            assert!(widest(&wrapped) <= width, "{width}:\n{wrapped}");
            // Nothing lost or reordered: the same words in the same order.
            let words = |t: &str| t.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
            assert_eq!(words(&wrapped), words(&help));
        }
        // At 80 the flag column (the longest name's) leaves too little room: descriptions go
        // below their flag, four spaces in; at 200 they stay beside it.
        let wrapped = wrap(&help, 80);
        let lines: Vec<&str> = wrapped.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("      --cache-agents strings"))
            .unwrap();
        assert_eq!(lines[at], "      --cache-agents strings", "{wrapped}");
        assert!(
            lines[at + 1].starts_with("          extra components"),
            "{wrapped}"
        );
        assert!(
            lines[at + 2].starts_with("          ") && !lines[at + 2].starts_with("           ")
        );
        let wide = wrap(&help, 200);
        let line = wide
            .lines()
            .find(|l| l.starts_with("      --cache-agents strings"))
            .unwrap();
        assert!(line.contains("   extra components"), "{line}");
    }

    #[test]
    fn short_lines_and_long_words_are_left_alone() {
        assert_eq!(wrap("a b\n\nc\n", 10), "a b\n\nc\n");
        assert_eq!(
            wrap("  --x  one two three four", 21),
            "  --x  one two three\n       four"
        );
        assert_eq!(
            wrap("  --x  one two three four", 16),
            "  --x\n      one two\n      three four"
        );
        let long = format!("  --y  {}", "z".repeat(30));
        assert_eq!(
            wrap(&long, 30),
            long,
            "one word longer than the room stays whole"
        );
        assert_eq!(
            wrap("      --name: why it is so and so", 30),
            "      --name: why it is so and\n          so"
        );
        assert_eq!(wrap("prose that is long", 10), "prose that\nis long");
    }

    #[test]
    fn a_close_name_is_suggested_and_a_far_one_is_not() {
        let names = [
            "proxy-port",
            "proxy-secure-port",
            "lb-mode",
            "working-mode",
            "v",
        ];
        assert_eq!(did_you_mean("proxy-prot", names), Some("proxy-port"));
        assert_eq!(did_you_mean("proxyport", names), Some("proxy-port"));
        assert_eq!(did_you_mean("lb-mod", names), Some("lb-mode"));
        assert_eq!(did_you_mean("proxy", names), Some("proxy-port"), "a prefix");
        assert_eq!(did_you_mean("working", names), Some("working-mode"));
        assert_eq!(did_you_mean("no-such-flag", names), None);
        assert_eq!(did_you_mean("xyz", names), None);
        assert_eq!(did_you_mean("x", names), None, "not --v");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
