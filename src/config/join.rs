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
    pub(crate) fn parse(text: &str) -> Result<JoinToken, String> {
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
            _ => Err("a join token has the form [a-z0-9]{6}.[a-z0-9]{16}".into()),
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
    pub(crate) fn parse(text: &str) -> Result<CaPin, String> {
        let err = || format!("CA pin {text:?} is not of the form sha256:<64 hex digits>");
        let hex = text.strip_prefix("sha256:").ok_or_else(err)?;
        if hex.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |b: u8| char::from(b).to_digit(16).ok_or_else(err);
            out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).map_err(|_| err())?;
        }
        Ok(CaPin(out))
    }

    /// The pin of a SubjectPublicKeyInfo whose SHA-256 is `digest`.
    pub(crate) fn from_spki_sha256(digest: [u8; 32]) -> CaPin {
        CaPin(digest)
    }
}

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
            let err = JoinToken::parse(bad).expect_err(bad);
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
        for bad in [
            hex.clone(),
            format!("sha1:{hex}"),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("sha256:{}g", &hex[1..]),
            format!("sha256:{}+1", &hex[2..]),
            "sha256:".into(),
        ] {
            let err = CaPin::parse(&bad).expect_err(&bad);
            assert!(err.contains("sha256:<64 hex digits>"), "{err}");
        }
    }
}
