//! The hub's bearer token: inline, or a `tokenFile` re-read when it changes.
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Token;

/// The hub's bearer token; a `tokenFile` is re-read when it changes (projected service
/// account tokens rotate), checked at most every few seconds.
pub(super) struct TokenSource {
    source: Token,
    cache: Mutex<CachedToken>,
}

struct CachedToken {
    value: Option<String>,
    modified: Option<SystemTime>,
    checked: Option<Instant>,
}

const TOKEN_RECHECK: Duration = Duration::from_secs(10);

impl TokenSource {
    pub(super) fn new(source: Token) -> TokenSource {
        TokenSource {
            source,
            cache: Mutex::new(CachedToken {
                value: None,
                modified: None,
                checked: None,
            }),
        }
    }

    pub(super) fn current(&self) -> Option<String> {
        let path: &PathBuf = match &self.source {
            Token::Inline(token) => return Some(token.clone()),
            Token::File(path) => path,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let due = cache.checked.is_none_or(|t| t.elapsed() >= TOKEN_RECHECK);
        if due {
            cache.checked = Some(Instant::now());
            let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
            if modified != cache.modified || cache.value.is_none() {
                match std::fs::read_to_string(path) {
                    Ok(text) => {
                        cache.value = Some(text.trim().to_owned());
                        cache.modified = modified;
                    }
                    // Keep the last good token: a rotation writes a new file atomically.
                    Err(e) => log::warn!("cannot read tokenFile {}: {e}", path.display()),
                }
            }
        }
        cache.value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_reread_when_it_changes() {
        let path = std::env::temp_dir().join(format!("tinyhub-token-{}", std::process::id()));
        std::fs::write(&path, "one\n").unwrap();
        let source = TokenSource::new(Token::File(path.clone()));
        assert_eq!(source.current().as_deref(), Some("one"));
        std::fs::write(&path, "two").unwrap();
        // Force the next call to look again, and make the change visible by mtime.
        {
            let mut c = source.cache.lock().unwrap();
            c.checked = None;
            c.modified = None;
        }
        assert_eq!(source.current().as_deref(), Some("two"));
        std::fs::remove_file(&path).unwrap();
        source.cache.lock().unwrap().checked = None;
        assert_eq!(
            source.current().as_deref(),
            Some("two"),
            "keeps the last good token"
        );
    }
}
