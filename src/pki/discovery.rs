//! (lead's placeholder until the discovery branch lands)
#![allow(dead_code)]

/// A bootstrap token.
#[derive(Clone)]
pub(crate) struct JoinToken {
    id: String,
    secret: String,
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JoinToken({}.<redacted>)", self.id)
    }
}

impl JoinToken {
    /// Parses `id.secret`.
    pub(crate) fn parse(text: &str) -> Result<JoinToken, String> {
        let (id, secret) = text.split_once('.').ok_or("not id.secret")?;
        Ok(JoinToken {
            id: id.into(),
            secret: secret.into(),
        })
    }
    /// The id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
    /// `id.secret`.
    pub(crate) fn bearer(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// A CA pin.
#[derive(Debug, Clone)]
pub(crate) struct CaPin([u8; 32]);

impl CaPin {
    /// Parses `sha256:<hex>`.
    pub(crate) fn parse(text: &str) -> Result<CaPin, String> {
        text.strip_prefix("sha256:").ok_or("no sha256:")?;
        Ok(CaPin([0; 32]))
    }
}
