//! The values of join-token discovery as the configuration reads them: a bootstrap token
//! `<id>.<secret>` (`--join-token`, `POST /v1/token`) and kubeadm's CA pins
//! (`--discovery-token-ca-cert-hash`). Pure; discovery itself is `pki/discovery.rs`.

use std::fmt;

/// A bootstrap token `<id>.<secret>`; the secret never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct JoinToken {
    id: String,
    secret: String,
}

impl JoinToken {
    /// Parses `[a-z0-9]{6}.[a-z0-9]{16}` exactly.
    pub(crate) fn parse(text: &str) -> Result<JoinToken, JoinTokenError> {
        let valid = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match text.split_once('.') {
            Some((id, secret)) if valid(id, 6) && valid(secret, 16) => Ok(JoinToken {
                id: id.to_string(),
                secret: secret.to_string(),
            }),
            _ => Err(JoinTokenError),
        }
    }

    /// The public part, named in `jws-kubeconfig-<id>`.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The secret part, the key of the cluster's detached signatures: never logged.
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token, for `Authorization: Bearer`.
    pub(crate) fn bearer(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// The text is not a join token. It carries nothing of the text: that may be a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JoinTokenError;

impl fmt::Display for JoinTokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a join token has the form [a-z0-9]{6}.[a-z0-9]{16}")
    }
}

impl std::error::Error for JoinTokenError {}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JoinToken({}.<redacted>)", self.id)
    }
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.<redacted>", self.id)
    }
}

/// A CA pin: SHA-256 of a CA certificate's DER SubjectPublicKeyInfo.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct CaPin([u8; 32]);

impl CaPin {
    /// Parses kubeadm's `sha256:<64 hex digits>` (hex in either case).
    pub(crate) fn parse(text: &str) -> Result<CaPin, CaPinError> {
        let err = |cause| CaPinError {
            text: text.into(),
            cause,
        };
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| err(CaPinFault::NoPrefix))?;
        if hex.len() != 64 {
            return Err(err(CaPinFault::Length));
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |b: u8| {
                char::from(b)
                    .to_digit(16)
                    .ok_or_else(|| err(CaPinFault::NotHex))
            };
            out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?)
                .map_err(|_| err(CaPinFault::NotHex))?;
        }
        Ok(CaPin(out))
    }

    /// The pin of a SubjectPublicKeyInfo whose SHA-256 is `digest`.
    pub(crate) fn from_spki_sha256(digest: [u8; 32]) -> CaPin {
        CaPin(digest)
    }
}

/// A text that is not a CA pin, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CaPinError {
    /// The text given (a pin is public: it may be repeated).
    pub text: String,
    /// What is wrong.
    pub cause: CaPinFault,
}

/// What is wrong with a CA pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CaPinFault {
    /// It does not start with `sha256:`.
    NoPrefix,
    /// The digest is not 64 digits long.
    Length,
    /// A digit is not hexadecimal.
    NotHex,
}

impl fmt::Display for CaPinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One text for every fault: the form says what is wanted.
        write!(
            f,
            "CA pin {:?} is not of the form sha256:<64 hex digits>",
            self.text
        )
    }
}

impl std::error::Error for CaPinError {}

impl fmt::Display for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn token() -> JoinToken {
        JoinToken::parse(TOKEN).expect("token")
    }

    #[test]
    fn join_tokens_parse_exactly_and_hide_their_secret() {
        let t = token();
        assert_eq!(t.id(), "abcdef");
        assert_eq!(t.bearer(), TOKEN);
        assert!(!format!("{t:?}").contains("0123456789abcdef"));
        assert!(!t.to_string().contains("0123456789abcdef"));
        assert!(t.to_string().contains("abcdef"));
        for bad in [
            "",
            "abcdef",
            "abcdef.",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef0",
            "abcde.0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcdef.0123456789ABCDEF",
            "abcdef:0123456789abcdef",
            "abcdef.0123456789abcdef.x",
            " abcdef.0123456789abcdef",
        ] {
            let err = JoinToken::parse(bad).expect_err(bad).to_string();
            assert!(err.contains("[a-z0-9]{6}.[a-z0-9]{16}"), "{err}");
            assert!(
                !err.contains("0123456789"),
                "the error must not echo the token: {err}"
            );
        }
    }

    #[test]
    fn ca_pins_parse_kubeadms_format_in_either_case() {
        let hex = "0123456789abcdef".repeat(4);
        let lower = CaPin::parse(&format!("sha256:{hex}")).expect("lower");
        let upper = CaPin::parse(&format!("sha256:{}", hex.to_uppercase())).expect("upper");
        assert_eq!(lower, upper);
        assert_eq!(lower.0[..3], [0x01, 0x23, 0x45]);
        assert_eq!(lower.to_string(), format!("sha256:{hex}"));
        for (bad, cause) in [
            (hex.clone(), CaPinFault::NoPrefix),
            (format!("sha1:{hex}"), CaPinFault::NoPrefix),
            (format!("sha256:{}", &hex[1..]), CaPinFault::Length),
            (format!("sha256:{hex}0"), CaPinFault::Length),
            (format!("sha256:{}g", &hex[1..]), CaPinFault::NotHex),
            (format!("sha256:{}+1", &hex[2..]), CaPinFault::NotHex),
            ("sha256:".into(), CaPinFault::Length),
        ] {
            let err = CaPin::parse(&bad).expect_err(&bad);
            assert_eq!(err.cause, cause, "{bad}");
            assert_eq!(
                err.to_string(),
                format!("CA pin {bad:?} is not of the form sha256:<64 hex digits>")
            );
        }
    }
}
