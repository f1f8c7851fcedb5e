//! Label and field selectors with the kube-apiserver's grammar and matching rules, written
//! from the Kubernetes documentation independently of the hub's own implementation, so
//! each can check the other.
//!
//! Labels: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//! `k notin (a,b)`, `k>5`, `k<5`; `!=` and `notin` match objects without the label.
//! Fields: `f=v`, `f==v`, `f!=v` joined by `,`, with `\,` `\=` `\\` escapes; a missing
//! field reads as "". Which fields a kind supports is decided by the caller.

/// Operator of one label requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelOp {
    /// `k=v`, `k==v`, `k in (..)`.
    In,
    /// `k!=v`, `k notin (..)`.
    NotIn,
    /// `k`.
    Exists,
    /// `!k`.
    DoesNotExist,
    /// `k>n`.
    Gt,
    /// `k<n`.
    Lt,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: LabelOp,
    /// Values (one for `=`, `!=`, `>`, `<`; none for existence).
    pub values: Vec<String>,
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
    End,
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::Bang => "!".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::End => "".into(),
        }
    }

    /// In value position the keywords are ordinary words (`k=in` is valid).
    fn as_value(&self) -> Option<String> {
        match self {
            Tok::Ident(s) => Some(s.clone()),
            Tok::In | Tok::NotIn => Some(self.text()),
            _ => None,
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

fn lex(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    while let Some(&c) = it.peek() {
        if c.is_whitespace() {
            it.next();
            continue;
        }
        if is_special(c) {
            it.next();
            let next_eq = it.peek() == Some(&'=');
            let t = match c {
                '!' if next_eq => Tok::NotEq,
                '!' => Tok::Bang,
                '=' if next_eq => Tok::DoubleEq,
                '=' => Tok::Eq,
                '(' => Tok::Open,
                ')' => Tok::Close,
                ',' => Tok::Comma,
                '<' => Tok::Lt,
                _ => Tok::Gt,
            };
            if matches!(t, Tok::NotEq | Tok::DoubleEq) {
                it.next();
            }
            out.push(t);
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = it.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            word.push(c);
            it.next();
        }
        out.push(match word.as_str() {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident(word),
        });
    }
    out.push(Tok::End);
    out
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if *self.peek() == Tok::Bang {
            self.next();
            let key = match self.next() {
                Tok::Ident(k) => k,
                t => return Err(format!("found '{}', expected: identifier", t.text())),
            };
            check_key(&key)?;
            return Ok(Requirement {
                key,
                op: LabelOp::DoesNotExist,
                values: vec![],
            });
        }
        let key = match self.next() {
            Tok::Ident(k) => k,
            t => return Err(format!("found '{}', expected: identifier", t.text())),
        };
        check_key(&key)?;
        let (op, values) = match self.peek().clone() {
            Tok::End | Tok::Comma => (LabelOp::Exists, vec![]),
            Tok::Eq | Tok::DoubleEq | Tok::NotEq | Tok::Gt | Tok::Lt => {
                let op = match self.next() {
                    Tok::Eq | Tok::DoubleEq => LabelOp::In,
                    Tok::NotEq => LabelOp::NotIn,
                    Tok::Gt => LabelOp::Gt,
                    _ => LabelOp::Lt,
                };
                let v = match self.peek() {
                    Tok::End | Tok::Comma => String::new(),
                    t => match t.as_value() {
                        Some(v) => {
                            self.next();
                            v
                        }
                        None => return Err(format!("found '{}', expected: identifier", t.text())),
                    },
                };
                if matches!(op, LabelOp::Gt | LabelOp::Lt) && v.parse::<i64>().is_err() {
                    return Err(format!(
                        "for 'Gt', 'Lt' operators, the value must be an integer: {v:?}"
                    ));
                }
                (op, vec![v])
            }
            Tok::In | Tok::NotIn => {
                let op = if self.next() == Tok::In {
                    LabelOp::In
                } else {
                    LabelOp::NotIn
                };
                if self.next() != Tok::Open {
                    return Err("found something else, expected: '('".into());
                }
                let values = self.value_list()?;
                if values.is_empty() {
                    return Err("for 'in', 'notin' operators, values set can't be empty".into());
                }
                (op, values)
            }
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.text()
                ));
            }
        };
        for v in &values {
            check_value(v)?;
        }
        Ok(Requirement { key, op, values })
    }

    /// After `(`: `a, b, c)`; empty elements are "" values, `()` is an empty list.
    fn value_list(&mut self) -> Result<Vec<String>, String> {
        let mut values = Vec::new();
        if *self.peek() == Tok::Close {
            self.next();
            return Ok(values);
        }
        loop {
            let v = match self.peek().as_value() {
                Some(v) => {
                    self.next();
                    v
                }
                None => String::new(),
            };
            if !values.contains(&v) {
                values.push(v);
            }
            match self.next() {
                Tok::Comma => continue,
                Tok::Close => return Ok(values),
                t => return Err(format!("found '{}', expected: ',' or ')'", t.text())),
            }
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(is_name_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS-1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 characters.
fn valid_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn check_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => valid_subdomain(prefix) && valid_name(name),
        None => valid_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {key:?}: must be a qualified name"
        ))
    }
}

fn check_value(v: &str) -> Result<(), String> {
    if v.is_empty() || valid_name(v) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: {v:?}: must be 63 characters or less, alphanumeric, '-', '_' or '.'"
        ))
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            toks: lex(s),
            pos: 0,
        };
        let mut reqs = Vec::new();
        loop {
            match p.peek() {
                Tok::End => return Ok(LabelSelector(reqs)),
                Tok::Ident(_) | Tok::Bang => {}
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.text()
                    ));
                }
            }
            reqs.push(p.requirement()?);
            match p.next() {
                Tok::End => return Ok(LabelSelector(reqs)),
                Tok::Comma => {
                    if !matches!(p.peek(), Tok::Ident(_) | Tok::Bang) {
                        return Err(format!(
                            "found '{}', expected: identifier after ','",
                            p.peek().text()
                        ));
                    }
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        t.text()
                    ));
                }
            }
        }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.0.iter().all(|r| {
            let v = labels
                .iter()
                .find(|(k, _)| *k == r.key)
                .map(|(_, v)| v.as_str());
            match (r.op, v) {
                (LabelOp::Exists, v) => v.is_some(),
                (LabelOp::DoesNotExist, v) => v.is_none(),
                (LabelOp::In, Some(v)) => r.values.iter().any(|x| x == v),
                (LabelOp::In, None) => false,
                (LabelOp::NotIn, Some(v)) => !r.values.iter().any(|x| x == v),
                (LabelOp::NotIn, None) => true,
                (LabelOp::Gt | LabelOp::Lt, None) => false,
                (op, Some(v)) => {
                    let (Ok(have), Ok(want)) = (v.parse::<i64>(), r.values[0].parse::<i64>())
                    else {
                        return false;
                    };
                    if op == LabelOp::Gt {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    /// Field path, e.g. `spec.nodeName`.
    pub field: String,
    /// `!=` rather than `=`/`==`.
    pub negate: bool,
    /// Value.
    pub value: String,
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<FieldTerm>);

impl FieldSelector {
    /// Parses a `fieldSelector` query value.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for part in split_unescaped(s, ',') {
            if part.is_empty() {
                continue;
            }
            let Some((at, op_len, negate)) = find_operator(part) else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            terms.push(FieldTerm {
                field: unescape(&part[..at])?,
                negate,
                value: unescape(&part[at + op_len..])?,
            });
        }
        Ok(FieldSelector(terms))
    }

    /// Whether the object (through `field`, "" for a missing field) satisfies every term.
    pub fn matches(&self, field: &dyn Fn(&str) -> String) -> bool {
        self.0
            .iter()
            .all(|t| (field(&t.field) == t.value) != t.negate)
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// First unescaped `!=`, `==` or `=`: (byte offset, operator length, negated).
fn find_operator(term: &str) -> Option<(usize, usize, bool)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'!' if b.get(i + 1) == Some(&b'=') => return Some((i, 2, true)),
            b'=' if b.get(i + 1) == Some(&b'=') => return Some((i, 2, false)),
            b'=' => return Some((i, 1, false)),
            _ => {}
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence in {s:?}"
                    ));
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> Vec<(String, String)> {
        s.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    fn check(selector: &str, object_labels: &str, want: bool) {
        let sel = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
        assert_eq!(
            sel.matches(&labels(object_labels)),
            want,
            "{selector:?} on {object_labels:?}"
        );
    }

    #[test]
    fn label_grammar_matches_like_the_apiserver() {
        check("", "a=1", true);
        check("app=web", "app=web", true);
        check("app==web", "app=db", false);
        check("app!=web", "tier=x", true);
        check("app!=web", "app=web", false);
        check("app in (web, db)", "app=db", true);
        check("app notin (web,db)", "", true);
        check("app notin (web,db)", "app=web", false);
        check("app", "app=", true);
        check("!app", "app=x", false);
        check("!app", "b=x", true);
        check("app=", "app=", true);
        check("app=web,tier in (fe),!canary", "app=web,tier=fe", true);
        check(
            "app=web,tier in (fe),!canary",
            "app=web,tier=fe,canary=1",
            false,
        );
        check("n>5", "n=10", true);
        check("n<5", "n=10", false);
        check("example.com/role=edge", "example.com/role=edge", true);
        check("app=in", "app=in", true);
    }

    #[test]
    fn bad_label_selectors_are_refused() {
        for s in [
            "app=web,",
            "app in ()",
            "app in (a",
            "=x",
            "app===x",
            "a b",
            "ab!",
            "-a=b",
            "a=b c",
            "n>x",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?} should be refused");
        }
    }

    #[test]
    fn field_selectors_parse_and_match() {
        let f = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed").unwrap();
        let get = |phase: &'static str| {
            move |k: &str| match k {
                "spec.nodeName" => "n1".to_string(),
                "status.phase" => phase.to_string(),
                _ => String::new(),
            }
        };
        assert!(f.matches(&get("Running")));
        assert!(!f.matches(&get("Failed")));
        let e = FieldSelector::parse(r"metadata.name==a\,b").unwrap();
        assert_eq!(e.0[0].value, "a,b");
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse(r"metadata.name=a\x").is_err());
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }
}
