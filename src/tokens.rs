//! Service account tokens while the cloud is away (YurtHub's
//! `pkg/yurthub/proxy/local/faketoken.go`).
//!
//! Every pod with a projected service account volume needs a TokenRequest
//! (`POST …/namespaces/<ns>/serviceaccounts/<name>/token`) answered before kubelet starts it.
//! Online, the cloud's answers are cached (the writer stores them, keyed by what was asked:
//! [`TokenSpec::digest`]); offline, the cached answer is served while its token is valid for
//! at least [`MIN_VALIDITY`] more by its own `exp` ([`offline_answer`], saying it expires in
//! a minute), else a token made here ([`local_answer`]) that expires in one minute, so
//! kubelet asks again soon and gets a real one once the cloud is back.
//!
//! Pure functions but for the signing key, drawn once from the system's random source. A
//! token is a credential: nothing here logs one, and no type holding one implements `Debug`
//! with its contents.

use std::fmt;
use std::sync::OnceLock;

use crate::logging::rfc3339;
use crate::protobuf::PROTOBUF_MAGIC;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{digest, hmac, rand};
use serde_json::{Value, json};

/// A cached token is served only while it stays valid at least this long (seconds).
pub(crate) const MIN_VALIDITY: i64 = 60;
/// Lifetime of a token made here (seconds): kubelet refreshes a token past 80 % of its life,
/// so it asks again within a minute.
pub(crate) const LOCAL_LIFETIME: i64 = 60;
/// Issuer of the tokens made here.
pub(crate) const ISSUER: &str = "tinyhub";
/// Longest request body read for a TokenRequest; a real one is a few hundred bytes.
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// What a TokenRequest asks for, from its body (JSON, or the protobuf kubelet sends by
/// default: `--kube-api-content-type=application/vnd.kubernetes.protobuf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenSpec {
    /// `spec.audiences`, as sent.
    pub audiences: Vec<String>,
    /// `spec.expirationSeconds`.
    pub expiration_seconds: Option<i64>,
    /// `spec.boundObjectRef`: (kind, apiVersion, name, uid).
    pub bound: Option<[String; 4]>,
}

impl TokenSpec {
    /// Reads a TokenRequest body; `None` when it is neither a JSON object nor a Kubernetes
    /// protobuf envelope holding a TokenRequest.
    pub(crate) fn parse(body: &[u8]) -> Option<TokenSpec> {
        if body.starts_with(PROTOBUF_MAGIC) {
            proto::token_spec(body)
        } else {
            from_json(body)
        }
    }

    /// Hex SHA-256 of the sorted audience set and the bound object: the cache key's last
    /// segment. The bound object is part of it because a token bound to one pod must not
    /// be handed to another (it dies with the first, and names it).
    pub(crate) fn digest(&self) -> String {
        let mut audiences: Vec<&str> = self.audiences.iter().map(String::as_str).collect();
        audiences.sort_unstable();
        audiences.dedup();
        // JSON: an unambiguous encoding of strings that may hold any character.
        let canonical = json!([audiences, self.bound]).to_string();
        let sum = digest::digest(&digest::SHA256, canonical.as_bytes());
        sum.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The spec as JSON, to echo in an answer.
    fn to_json(&self) -> Value {
        let mut spec = json!({ "audiences": self.audiences });
        if let Some(seconds) = self.expiration_seconds {
            spec["expirationSeconds"] = seconds.into();
        }
        if let Some([kind, api_version, name, uid]) = &self.bound {
            spec["boundObjectRef"] =
                json!({"kind": kind, "apiVersion": api_version, "name": name, "uid": uid});
        }
        spec
    }
}

fn from_json(body: &[u8]) -> Option<TokenSpec> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    let spec = match object.get("spec") {
        None | Some(Value::Null) => return Some(empty_spec()),
        Some(spec) => spec.as_object()?,
    };
    let audiences = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => list
            .as_array()?
            .iter()
            .map(|a| a.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()?,
    };
    let text = |v: &Value, field: &str| {
        v.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let bound = spec
        .get("boundObjectRef")
        .filter(|b| b.is_object())
        .map(|b| {
            [
                text(b, "kind"),
                text(b, "apiVersion"),
                text(b, "name"),
                text(b, "uid"),
            ]
        });
    Some(TokenSpec {
        audiences,
        expiration_seconds: spec.get("expirationSeconds").and_then(Value::as_i64),
        bound,
    })
}

fn empty_spec() -> TokenSpec {
    TokenSpec {
        audiences: Vec::new(),
        expiration_seconds: None,
        bound: None,
    }
}

/// True when a cached answer holds a token valid for at least [`MIN_VALIDITY`] after `now`
/// (Unix seconds).
pub(crate) fn still_valid(answer: &[u8], now: i64) -> bool {
    expiry(answer).is_some_and(|expires| expires >= now.saturating_add(MIN_VALIDITY))
}

/// The expiry (Unix seconds) of an answer's token: the JWT's own `exp` claim when it has
/// one, else `status.expirationTimestamp`; `None` when it has no token or no readable
/// `status.expirationTimestamp` — such an answer is not worth keeping.
///
/// The claim wins: with `--service-account-extend-token-expiration` (the apiserver's
/// default) kubelet's `kube-api-access` tokens are valid for a year while the answer says
/// the hour asked for.
pub(crate) fn expiry(answer: &[u8]) -> Option<i64> {
    let value: Value = serde_json::from_slice(answer).ok()?;
    let status = value.get("status")?;
    let token = status
        .get("token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())?;
    let stated = parse_rfc3339(status.get("expirationTimestamp")?.as_str()?)?;
    Some(jwt_exp(token).unwrap_or(stated))
}

/// The `exp` claim of a JWT, read without verifying it; `None` for anything else.
pub(crate) fn jwt_exp(token: &str) -> Option<i64> {
    let mut parts = token.split('.');
    let (_, claims, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
    let exp = claims.get("exp")?;
    // A NumericDate may have a fraction.
    exp.as_i64().or_else(|| exp.as_f64().map(|f| f as i64))
}

/// A cached answer as served offline: `None` unless its token is [`still_valid`]; its
/// `status.expirationTimestamp` says `now` + [`MIN_VALIDITY`], so that kubelet asks again
/// soon — and gets a fresh token once the cloud is back. The token is left as it is.
pub(crate) fn offline_answer(answer: &[u8], now: i64) -> Option<Vec<u8>> {
    if !still_valid(answer, now) {
        return None;
    }
    let mut value: Value = serde_json::from_slice(answer).ok()?;
    let expires = value.get_mut("status")?.get_mut("expirationTimestamp")?;
    *expires = rfc3339(now.saturating_add(MIN_VALIDITY)).into();
    serde_json::to_vec(&value).ok()
}

/// The signing key of the tokens made here: random, per process, in memory only.
///
/// Nobody verifies these tokens — the apiserver rejects them as it rejects any token it did
/// not sign, and they live a minute — so the key need not be shared or kept; it is random
/// so that a token made here can never pass for one made by another hub (YurtHub signs
/// with the constant `"openyurt"`).
struct Signer(hmac::Key);

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signer(..)")
    }
}

fn signer() -> Option<&'static Signer> {
    static SIGNER: OnceLock<Option<Signer>> = OnceLock::new();
    SIGNER
        .get_or_init(|| {
            // getrandom(2) through ring; fails only without a kernel random source.
            hmac::Key::generate(hmac::HMAC_SHA256, &rand::SystemRandom::new())
                .ok()
                .map(Signer)
        })
        .as_ref()
}

/// A TokenRequest answer made here: the request's spec echoed, and a token for
/// `system:serviceaccount:<namespace>:<name>` issued `now` (Unix seconds) that expires
/// [`LOCAL_LIFETIME`] later. `None` only when the system has no random source.
pub(crate) fn local_answer(
    namespace: &str,
    name: &str,
    spec: &TokenSpec,
    now: i64,
) -> Option<Vec<u8>> {
    let expires = now.saturating_add(LOCAL_LIFETIME);
    let token = local_token(namespace, name, now, expires)?;
    let answer = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(now)},
        "spec": spec.to_json(),
        "status": {"token": token, "expirationTimestamp": rfc3339(expires)},
    });
    serde_json::to_vec(&answer).ok()
}

/// An HS256 JWT with the claims the apiserver's own tokens carry at the least.
fn local_token(namespace: &str, name: &str, now: i64, expires: i64) -> Option<String> {
    let signer = signer()?;
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = json!({
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "iat": now,
        "exp": expires,
    });
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{claims}");
    let tag = hmac::sign(&signer.0, signed.as_bytes());
    Some(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref())))
}

/// Unix seconds of an RFC 3339 timestamp (`Z` or a `±hh:mm` offset, optional fraction).
pub(crate) fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(i, c)| b.get(i) != Some(&c))
        || !matches!(b.get(10), Some(b'T' | b't'))
    {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut rest = &b[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &fraction[n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| -> Option<i64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let minutes = two(*h1, *h2)? * 60 + two(*m1, *m2)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    // Both checked above: 1..=12 and 1..=31.
    let days = crate::logging::days_from_civil(year, month as u32, day as u32);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second.min(60) - offset * 60)
}

/// Reads a TokenRequest's spec from kubelet's protobuf body
/// (k8s.io/api/authentication/v1/generated.proto) with the crate's protobuf reader.
mod proto {
    use super::TokenSpec;
    use crate::protobuf::{Wire, bytes_field, fields, open_envelope, text};

    /// A whole body (`PROTOBUF_MAGIC` + `runtime.Unknown`) → TokenRequest{spec 2}.
    pub(super) fn token_spec(body: &[u8]) -> Option<TokenSpec> {
        let raw = open_envelope(body, "TokenRequest")?;
        let Some(spec) = bytes_field(raw, 2)? else {
            return Some(super::empty_spec());
        };
        let mut out = super::empty_spec();
        let mut bound = None;
        let mut ok = true;
        fields(spec, |n, v| match (n, v) {
            (1, Wire::Bytes(audience)) => match text(audience) {
                Some(a) => out.audiences.push(a),
                None => ok = false,
            },
            // int64: two's complement in a varint.
            (4, Wire::Varint(seconds)) => out.expiration_seconds = Some(seconds as i64),
            (3, Wire::Bytes(reference)) => bound = Some(reference),
            _ => {}
        })?;
        if let Some(reference) = bound {
            let mut parts: [String; 4] = Default::default();
            fields(reference, |n, v| {
                if let (1..=4, Wire::Bytes(b)) = (n, v) {
                    match text(b) {
                        Some(t) => parts[(n - 1) as usize] = t,
                        None => ok = false,
                    }
                }
            })?;
            out.bound = Some(parts);
        }
        ok.then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(token: &str) -> Value {
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
    }

    #[test]
    fn json_requests_parse_and_key_by_audience_set_and_bound_object() {
        let a = TokenSpec::parse(
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest",
                "spec":{"audiences":["b","a"],"expirationSeconds":3607,
                "boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"web-0","uid":"u1"}}}"#,
        )
        .unwrap();
        assert_eq!(a.audiences, ["b", "a"]);
        assert_eq!(a.expiration_seconds, Some(3607));
        let b = TokenSpec::parse(
            br#"{"spec":{"audiences":["a","b","a"],
                "boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"web-0","uid":"u1"}}}"#,
        )
        .unwrap();
        assert_eq!(a.digest(), b.digest(), "the audience set, not its order");
        assert_eq!(a.digest().len(), 64);
        let other_pod = TokenSpec::parse(
            br#"{"spec":{"audiences":["a","b"],"boundObjectRef":{"kind":"Pod","name":"web-1","uid":"u2"}}}"#,
        )
        .unwrap();
        assert_ne!(a.digest(), other_pod.digest());
        let none = TokenSpec::parse(br#"{"spec":{}}"#).unwrap();
        assert_eq!(none, TokenSpec::parse(b"{}").unwrap());
        assert_ne!(none.digest(), a.digest());
        for bad in [
            &b"[]"[..],
            b"",
            b"{\"spec\":[]}",
            b"{\"spec\":{\"audiences\":[1]}}",
        ] {
            assert_eq!(TokenSpec::parse(bad), None, "{bad:?}");
        }
    }

    /// Protobuf encoding helpers for the tests.
    fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![n << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn protobuf_requests_parse_like_json_ones() {
        // What client-go sends for a TokenRequest with Content-Type protobuf.
        let bound = [
            field(1, b"Pod"),
            field(2, b"v1"),
            field(3, b"web-0"),
            field(4, b"u1"),
        ]
        .concat();
        let mut spec = [field(1, b"b"), field(1, b"a"), field(3, &bound)].concat();
        spec.extend_from_slice(&[4 << 3, 0x8f, 0x1c]); // expirationSeconds 3599
        let request = [field(1, &field(1, b"web")), field(2, &spec)].concat();
        let type_meta = [
            field(1, b"authentication.k8s.io/v1"),
            field(2, b"TokenRequest"),
        ]
        .concat();
        let envelope = [
            PROTOBUF_MAGIC.to_vec(),
            field(1, &type_meta),
            field(2, &request),
        ]
        .concat();
        let parsed = TokenSpec::parse(&envelope).unwrap();
        assert_eq!(parsed.audiences, ["b", "a"]);
        assert_eq!(parsed.expiration_seconds, Some(3599));
        let json = TokenSpec::parse(
            br#"{"spec":{"audiences":["a","b"],"expirationSeconds":3599,
                "boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"web-0","uid":"u1"}}}"#,
        )
        .unwrap();
        assert_eq!(parsed.digest(), json.digest());
        // Truncated, another kind, or an encoded payload: not read.
        assert_eq!(TokenSpec::parse(&envelope[..envelope.len() - 3]), None);
        let pod_meta = [field(1, b"v1"), field(2, b"Pod")].concat();
        let pod = [
            PROTOBUF_MAGIC.to_vec(),
            field(1, &pod_meta),
            field(2, &request),
        ]
        .concat();
        assert_eq!(TokenSpec::parse(&pod), None);
        let gzip = [envelope.clone(), field(3, b"gzip")].concat();
        assert_eq!(TokenSpec::parse(&gzip), None);
        assert_eq!(TokenSpec::parse(b"k8s\0\xff"), None);
    }

    #[test]
    fn local_tokens_are_hs256_jwts_for_the_service_account_for_a_minute() {
        let spec = TokenSpec::parse(br#"{"spec":{"audiences":["api"]}}"#).unwrap();
        let now = 1_800_000_000;
        let answer: Value =
            serde_json::from_slice(&local_answer("default", "builder", &spec, now).unwrap())
                .unwrap();
        assert_eq!(answer["kind"], "TokenRequest");
        assert_eq!(answer["spec"]["audiences"], json!(["api"]));
        let token = answer["status"]["token"].as_str().unwrap();
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "HS256");
        assert_eq!(
            claims(token),
            json!({"iss": "tinyhub", "sub": "system:serviceaccount:default:builder",
                   "iat": now, "exp": now + 60})
        );
        assert_eq!(
            answer["status"]["expirationTimestamp"]
                .as_str()
                .map(parse_rfc3339),
            Some(Some(now + 60))
        );
        let bytes = serde_json::to_vec(&answer).unwrap();
        assert_eq!(expiry(&bytes), Some(now + 60));
        assert!(still_valid(&bytes, now));
        assert!(!still_valid(&bytes, now + 1));
        assert!(format!("{:?}", signer().unwrap()).ends_with("(..)"));
    }

    #[test]
    fn a_real_token_is_judged_by_its_own_exp_and_served_for_a_minute_at_a_time() {
        let now = 1_800_000_000;
        let b64 = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let jwt = |exp: Value| {
            format!(
                "{}.{}.c2ln",
                b64(json!({"alg": "RS256", "kid": "k1"})),
                b64(
                    json!({"iss": "https://kubernetes.default.svc", "exp": exp, "iat": now - 3660})
                )
            )
        };
        let answer = |token: &str, stated: i64| {
            serde_json::to_vec(&json!({
                "kind": "TokenRequest",
                "spec": {"audiences": ["api"], "expirationSeconds": 3607},
                "status": {"token": token, "expirationTimestamp": rfc3339(stated)},
            }))
            .unwrap()
        };
        // kubelet's kube-api-access token with the apiserver's extended expiration: a year
        // by its claim, an hour (past now) by the answer.
        let year = now + 365 * 86_400;
        let token = jwt(year.into());
        let cached = answer(&token, now - 60);
        assert_eq!(expiry(&cached), Some(year));
        let served: Value = serde_json::from_slice(&offline_answer(&cached, now).unwrap()).unwrap();
        assert_eq!(
            served["status"]["token"],
            token.as_str(),
            "the token as it was"
        );
        assert_eq!(served["status"]["expirationTimestamp"], rfc3339(now + 60));
        assert_eq!(served["spec"]["expirationSeconds"], 3607);
        // A claim within a minute: not served, whatever the answer says.
        assert_eq!(
            offline_answer(&answer(&jwt((now + 59).into()), year), now),
            None
        );
        assert_eq!(
            expiry(&answer(&jwt(json!(1.8e9 + 30.5)), year)),
            Some(now + 30)
        );
        // No readable claim (an opaque token, a broken JWT): the answer's expiry.
        for opaque in ["cloud-token-1", "a.b.c", "a.!.c", "x.e30.y", "a.b.c.d"] {
            assert_eq!(
                expiry(&answer(opaque, now + 600)),
                Some(now + 600),
                "{opaque}"
            );
            let served: Value =
                serde_json::from_slice(&offline_answer(&answer(opaque, now + 600), now).unwrap())
                    .unwrap();
            assert_eq!(served["status"]["expirationTimestamp"], rfc3339(now + 60));
            assert_eq!(offline_answer(&answer(opaque, now + 30), now), None);
        }
    }

    #[test]
    fn answers_without_a_token_or_expiry_are_not_valid() {
        for bad in [
            &br#"{"status":{"token":"","expirationTimestamp":"2099-01-01T00:00:00Z"}}"#[..],
            br#"{"status":{"token":"t"}}"#,
            br#"{"status":{"token":"t","expirationTimestamp":"soon"}}"#,
            b"not json",
        ] {
            assert_eq!(expiry(bad), None);
            assert!(!still_valid(bad, 0));
        }
    }

    #[test]
    fn timestamps_round_trip() {
        for secs in [0, 951_782_400, 1_800_000_000, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs), "{secs}");
        }
        assert_eq!(rfc3339(1_800_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(
            parse_rfc3339("2027-01-15T09:30:00.123456+01:30"),
            Some(1_800_000_000)
        );
        for bad in [
            "",
            "2027-01-15",
            "2027-01-15T08:00:00",
            "2027-13-15T08:00:00Z",
            "2027-01-15T08:00:00.Z",
            "2027-01-15T08:00:00+0100",
            "2027-01-15 08:00:00Z",
            "+027-01-15T08:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
