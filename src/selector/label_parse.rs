//! Label selector parsing: a streaming lexer and a recursive-descent parser that follow the
//! structure of apimachinery's (`labels.Parse`), so that every text it accepts or refuses is
//! accepted or refused by the apiserver too. The lexer does not tokenize ahead, so refusing
//! early costs nothing.

use super::{
    LabelOp, LabelSelector, MAX_NAME_LEN, MAX_PREFIX_LEN, MAX_TERMS, Problem, Requirement,
    SelectorError, SelectorKind,
};
use crate::names::{is_dns_subdomain, is_label_name};
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    End,
    /// An identifier or a keyword: `in` and `notin` are operators only where an operator is
    /// expected, and plain words (keys, values) everywhere else, as in Kubernetes.
    Word(&'a str),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    Nul,
}

impl Token<'_> {
    fn text(self) -> &'static str {
        match self {
            Token::End | Token::Word(_) => "",
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::OpenParen => "(",
            Token::CloseParen => ")",
            Token::Comma => ",",
            Token::Nul => "\0",
        }
    }

    fn found(self) -> String {
        match self {
            Token::Word(w) => w.to_owned(),
            other => other.text().to_owned(),
        }
    }
}

fn is_label_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_label_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

pub(super) struct LabelParser<'a> {
    text: &'a str,
    pos: usize,
    peeked: Option<(Token<'a>, usize)>,
    /// Where the requirement being parsed starts, to quote it in errors.
    term_start: usize,
    terms: usize,
}

impl<'a> LabelParser<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        LabelParser {
            text,
            pos: 0,
            peeked: None,
            term_start: 0,
            terms: 0,
        }
    }

    /// Lexes the token at `from`; returns it and the position after it.
    fn lex(&self, mut from: usize) -> (Token<'a>, usize) {
        let bytes = self.text.as_bytes();
        while from < bytes.len() && is_label_space(bytes[from]) {
            from += 1;
        }
        let Some(&b) = bytes.get(from) else {
            return (Token::End, from);
        };
        let next = bytes.get(from + 1).copied();
        let token = match (b, next) {
            (0, _) => Token::Nul,
            (b'=', Some(b'=')) => return (Token::DoubleEquals, from + 2),
            (b'!', Some(b'=')) => return (Token::NotEquals, from + 2),
            (b'=', _) => Token::Equals,
            (b'!', _) => Token::Not,
            (b'>', _) => Token::GreaterThan,
            (b'<', _) => Token::LessThan,
            (b'(', _) => Token::OpenParen,
            (b')', _) => Token::CloseParen,
            (b',', _) => Token::Comma,
            _ => {
                let len = bytes[from..]
                    .iter()
                    .position(|&c| is_label_special(c) || is_label_space(c) || c == 0)
                    .unwrap_or(bytes.len() - from);
                // Word boundaries are ASCII bytes, so the slice is on character boundaries.
                return (Token::Word(&self.text[from..from + len]), from + len);
            }
        };
        (token, from + 1)
    }

    fn peek(&mut self) -> Token<'a> {
        match self.peeked {
            Some((token, _)) => token,
            None => {
                let (token, end) = self.lex(self.pos);
                self.peeked = Some((token, end));
                token
            }
        }
    }

    fn next(&mut self) -> Token<'a> {
        let (token, end) = match self.peeked.take() {
            Some(peeked) => peeked,
            None => self.lex(self.pos),
        };
        self.pos = end;
        token
    }

    fn error(&self, problem: Problem) -> SelectorError {
        let end = self.peeked.map_or(self.pos, |(_, end)| end);
        SelectorError::Invalid {
            kind: SelectorKind::Label,
            term: self.text[self.term_start..end].trim().to_owned(),
            problem,
        }
    }

    fn unexpected(&self, found: Token<'_>, expected: &'static str) -> SelectorError {
        if found == Token::Nul {
            return self.error(Problem::NulByte);
        }
        self.error(Problem::Unexpected {
            found: found.found(),
            expected,
        })
    }

    fn count_term(&mut self) -> Result<(), SelectorError> {
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return Err(SelectorError::TooManyTerms {
                kind: SelectorKind::Label,
            });
        }
        Ok(())
    }

    pub(super) fn parse(mut self) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            self.term_start = self.pos;
            match self.peek() {
                Token::Word(_) | Token::Not => {
                    self.count_term()?;
                    requirements.push(self.parse_requirement()?);
                    match self.next() {
                        Token::End => break,
                        Token::Comma => match self.peek() {
                            Token::Word(_) | Token::Not => {}
                            other => {
                                return Err(self.unexpected(other, "'!' or a label key after ','"));
                            }
                        },
                        other => return Err(self.unexpected(other, "',' or the end")),
                    }
                }
                Token::End => break,
                other => return Err(self.unexpected(other, "'!', a label key or the end")),
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let mut negated = false;
        let mut token = self.next();
        if token == Token::Not {
            negated = true;
            token = self.next();
        }
        let Token::Word(key) = token else {
            return Err(self.unexpected(token, "a label key"));
        };
        if let Err(why) = validate_label_key(key) {
            return Err(self.error(Problem::InvalidKey {
                key: key.to_owned(),
                why,
            }));
        }
        let key = key.to_owned();
        // `!key` takes no operator; whatever follows it is the caller's to refuse.
        if negated {
            return Ok(Requirement {
                key,
                op: LabelOp::DoesNotExist,
            });
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Requirement {
                key,
                op: LabelOp::Exists,
            });
        }
        let op = match self.next() {
            Token::Word("in") => LabelOp::In(self.parse_set()?),
            Token::Word("notin") => LabelOp::NotIn(self.parse_set()?),
            Token::Equals | Token::DoubleEquals => LabelOp::Equals(self.parse_exact_value()?),
            Token::NotEquals => LabelOp::NotEquals(self.parse_exact_value()?),
            Token::GreaterThan => LabelOp::GreaterThan(self.parse_integer_value()?),
            Token::LessThan => LabelOp::LessThan(self.parse_integer_value()?),
            other => {
                return Err(self.unexpected(other, "one of in, notin, =, ==, !=, >, <"));
            }
        };
        Ok(Requirement { key, op })
    }

    /// `( v1, v2, ... )`, where empty values are allowed and `()` is the set {""}.
    fn parse_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let open = self.next();
        if open != Token::OpenParen {
            return Err(self.unexpected(open, "'('"));
        }
        let mut values: Vec<String> = Vec::new();
        match self.peek() {
            Token::CloseParen => {
                self.next();
                self.add_value(&mut values, "")?;
                return Ok(values);
            }
            Token::Word(_) | Token::Comma => {}
            other => return Err(self.unexpected(other, "',', ')' or a label value")),
        }
        loop {
            match self.next() {
                Token::Word(value) => {
                    self.add_value(&mut values, value)?;
                    match self.peek() {
                        Token::Comma => {}
                        Token::CloseParen => break,
                        other => return Err(self.unexpected(other, "',' or ')'")),
                    }
                }
                // A comma with nothing before or after it stands for the empty value.
                Token::Comma => {
                    if values.is_empty() {
                        self.add_value(&mut values, "")?;
                    }
                    match self.peek() {
                        Token::CloseParen => {
                            self.add_value(&mut values, "")?;
                            break;
                        }
                        Token::Comma => self.add_value(&mut values, "")?,
                        _ => {}
                    }
                }
                other => return Err(self.unexpected(other, "',' or a label value")),
            }
        }
        // The loop stops only with ')' peeked.
        self.next();
        Ok(values)
    }

    fn add_value(&mut self, values: &mut Vec<String>, value: &str) -> Result<(), SelectorError> {
        self.count_term()?;
        self.check_value(value)?;
        values.push(value.to_owned());
        Ok(())
    }

    /// The value after `=`, `==` or `!=`; nothing before `,` or the end is the empty value.
    fn parse_exact_value(&mut self) -> Result<String, SelectorError> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next() {
            Token::Word(value) => {
                self.check_value(value)?;
                Ok(value.to_owned())
            }
            other => Err(self.unexpected(other, "a label value")),
        }
    }

    fn parse_integer_value(&mut self) -> Result<i64, SelectorError> {
        let value = self.parse_exact_value()?;
        value
            .parse::<i64>()
            .map_err(|_| self.error(Problem::NotAnInteger(value)))
    }

    fn check_value(&self, value: &str) -> Result<(), SelectorError> {
        validate_label_value(value).map_err(|why| {
            self.error(Problem::InvalidValue {
                value: value.to_owned(),
                why,
            })
        })
    }
}

/// Kubernetes' qualified name: `[prefix/]name`, prefix a DNS-1123 subdomain of at most 253
/// bytes, name at most 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn validate_label_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if name.contains('/') {
                return Err("at most one '/' (between a DNS subdomain prefix and a name)");
            }
            if prefix.is_empty() {
                return Err("the prefix before '/' is empty");
            }
            if prefix.len() > MAX_PREFIX_LEN {
                return Err("the prefix is longer than 253 bytes");
            }
            if !is_dns_subdomain(prefix) {
                return Err(
                    "the prefix must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; \
                     starting and ending alphanumeric)",
                );
            }
            name
        }
    };
    if name.is_empty() {
        return Err("the name part is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return Err("the name part is longer than 63 bytes");
    }
    if !is_label_name(name) {
        return Err(
            "the name part must consist of alphanumerics, '-', '_' or '.', \
             starting and ending alphanumeric",
        );
    }
    Ok(())
}

/// Kubernetes' label value: empty, or like a key's name part.
fn validate_label_value(value: &str) -> Result<(), &'static str> {
    if value.len() > MAX_NAME_LEN {
        return Err("longer than 63 bytes");
    }
    if !value.is_empty() && !is_label_name(value) {
        return Err(
            "must be empty or consist of alphanumerics, '-', '_' or '.', \
             starting and ending alphanumeric",
        );
    }
    Ok(())
}
