//! `--join-token` and `--join-token-file`: the join token from the command line, or from a
//! file so that it is not in `/proc/<pid>/cmdline` for every local user to read.

use std::fmt;
use std::io;

use super::flags;
use super::join::{JoinToken, JoinTokenError};
use crate::error::StartupError;

/// `--join-token`, or `--join-token-file`: the same token read from a file (one trailing
/// line end trimmed), so that it is not in `/proc/<pid>/cmdline` for every local user to
/// read. Both given is an error, as is a file that cannot be read or holds no token; the
/// token's format is checked alike, and an error never repeats the file's content.
pub(super) fn join_token(raw: &flags::RawFlags) -> Result<Option<JoinToken>, StartupError> {
    let inline = raw.get("join-token").filter(|t| !t.is_empty());
    let file = raw.get("join-token-file").filter(|p| !p.is_empty());
    match (inline, file) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(StartupError::flag(
            "join-token-file",
            "give --join-token or --join-token-file, not both",
        )),
        (Some(text), None) => JoinToken::parse(text)
            .map(Some)
            .map_err(|e| StartupError::flag("join-token", e.to_string())),
        (None, Some(path)) => join_token_from_file(path)
            .map(Some)
            .map_err(|e| StartupError::flag("join-token-file", e.to_string())),
    }
}

/// Why `--join-token-file` gives no join token. None repeats the file's content.
#[derive(Debug)]
enum JoinTokenFileError {
    /// The file cannot be read (or is not UTF-8).
    Read(String, io::Error),
    /// It is longer than a token can be.
    TooLong(String),
    /// It is empty (but for a line end).
    Empty(String),
    /// Its content is not a join token.
    NotAToken(String, JoinTokenError),
}

impl fmt::Display for JoinTokenFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinTokenFileError::Read(path, e) => write!(f, "cannot read {path}: {e}"),
            JoinTokenFileError::TooLong(path) => {
                write!(f, "{path} is longer than a join token can be")
            }
            JoinTokenFileError::Empty(path) => write!(f, "{path} holds no token"),
            JoinTokenFileError::NotAToken(path, e) => write!(f, "{path}: {e}"),
        }
    }
}

impl std::error::Error for JoinTokenFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JoinTokenFileError::Read(_, e) => Some(e),
            JoinTokenFileError::NotAToken(_, e) => Some(e),
            JoinTokenFileError::TooLong(_) | JoinTokenFileError::Empty(_) => None,
        }
    }
}

/// The join token in the file at `path`: its content less one trailing line end.
fn join_token_from_file(path: &str) -> Result<JoinToken, JoinTokenFileError> {
    use std::io::Read;
    // A token is 23 bytes: a wrong path (a device, a large file) is not read whole.
    const MAX_TOKEN_FILE: u64 = 1024;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TOKEN_FILE + 1).read_to_string(&mut text))
        .map_err(|e| JoinTokenFileError::Read(path.into(), e))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        return Err(JoinTokenFileError::TooLong(path.into()));
    }
    let token = text.strip_suffix('\n').unwrap_or(&text);
    let token = token.strip_suffix('\r').unwrap_or(token);
    if token.is_empty() {
        return Err(JoinTokenFileError::Empty(path.into()));
    }
    JoinToken::parse(token).map_err(|e| JoinTokenFileError::NotAToken(path.into(), e))
}
