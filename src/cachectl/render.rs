//! How the cache tool prints: aligned columns for a person, ages as kubectl words them, and
//! an object as YAML (`get -o yaml`, through yaml-rust2's emitter).

use serde_json::Value;
use yaml_rust2::YamlEmitter;
use yaml_rust2::yaml::{Hash, Yaml};

/// Rows under a header, each column as wide as its widest cell, two spaces between.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// An age as kubectl prints one: `42s`, `5m`, `3h`, `2d`.
pub(crate) fn age(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7_200 => format!("{}m", seconds / 60),
        7_200..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// A JSON value as YAML, one document with its `---` line.
pub(crate) fn yaml(value: &Value) -> String {
    let mut out = String::new();
    let mut emitter = YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    // Writing to a String cannot fail.
    let _ = emitter.dump(&to_yaml(value));
    out.push('\n');
    out
}

fn to_yaml(value: &Value) -> Yaml {
    match value {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(items) => Yaml::Array(items.iter().map(to_yaml).collect()),
        Value::Object(map) => {
            let mut hash = Hash::new();
            for (k, v) in map {
                hash.insert(Yaml::String(k.clone()), to_yaml(v));
            }
            Yaml::Hash(hash)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_trailing_blanks_go() {
        let text = table(
            &["A", "LONGER"],
            &[
                vec!["wide-cell".into(), "1".into()],
                vec!["x".into(), String::new()],
            ],
        );
        assert_eq!(text, "A          LONGER\nwide-cell  1\nx\n");
    }

    #[test]
    fn ages_read_as_kubectl_reads_them() {
        for (s, text) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (7_199, "119m"),
            (7_200, "2h"),
            (172_800, "2d"),
        ] {
            assert_eq!(age(s), text);
        }
    }

    #[test]
    fn yaml_reads_back_as_the_same_json() {
        let value: Value = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"a":"1"}},"spec":{"n":3,"x":1.5,"on":true,"none":null,"list":["a","b: c"],"text":"two\nlines"}}"#,
        )
        .unwrap();
        let text = yaml(&value);
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
        let back = &docs[0];
        assert_eq!(back["metadata"]["name"].as_str(), Some("web"));
        assert_eq!(back["spec"]["n"].as_i64(), Some(3));
        assert_eq!(back["spec"]["list"][1].as_str(), Some("b: c"));
        assert_eq!(back["spec"]["text"].as_str(), Some("two\nlines"));
        assert_eq!(back["metadata"]["labels"]["a"].as_str(), Some("1"));
        assert!(back["spec"]["none"].is_null());
    }
}
