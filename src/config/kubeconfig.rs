//! Reads the hub's own kubeconfig: which cloud server, which CA to trust, and which client
//! certificate or bearer token to present. Only the fields a proxy needs are mapped; the rest
//! of the file is ignored, as kubectl ignores what it does not use.
//!
//! File references (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`)
//! are resolved relative to the kubeconfig's directory, as client-go does. This module reads
//! those files but does not interpret PEM; `tls.rs` does.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use yaml_rust2::{ScanError, Yaml, YamlLoader};

use crate::error::StartupError;

/// The credentials and server of the current context.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Kubeconfig {
    /// `cluster.server` of the current context.
    pub server: Option<String>,
    /// PEM of the CA bundle to trust (`certificate-authority[-data]`).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM of the client certificate chain.
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM of the client key.
    pub client_key_pem: Option<Vec<u8>>,
    /// Bearer token, inline or as a file to re-read.
    pub token: Option<Token>,
    /// `insecure-skip-tls-verify`, refused later: the hub must know its cloud.
    pub insecure_skip_tls_verify: bool,
}

/// Where the bearer token comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// `user.token`.
    Inline(String),
    /// `user.tokenFile`, re-read when it changes (projected tokens rotate).
    File(PathBuf),
}

impl fmt::Debug for Kubeconfig {
    // Says which credentials are present, never what they are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("server", &self.server)
            .field("ca", &self.ca_pem.as_ref().map(|_| "present"))
            .field(
                "client_certificate",
                &self.client_cert_pem.as_ref().map(|_| "present"),
            )
            .field(
                "client_key",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .field("token", &self.token)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .finish()
    }
}

impl fmt::Debug for Token {
    // Never print an inline token: configurations are logged at high verbosity.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Inline(_) => f.write_str("Inline(<redacted>)"),
            Token::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// Why a kubeconfig cannot be used: the YAML, its structure, or a file it names.
#[derive(Debug)]
pub(crate) enum KubeconfigError {
    /// The text is not YAML.
    Yaml(ScanError),
    /// No document.
    Empty,
    /// The document is not a mapping.
    NotAMapping,
    /// `contexts`, `clusters` or `users` (named) is not a list.
    NotAList(&'static str),
    /// An entry of that list has no name.
    Unnamed(&'static str),
    /// `current-context` names no context.
    UnknownContext(String),
    /// Several contexts and none is current.
    NoCurrentContext,
    /// The current context's cluster is not defined.
    UnknownCluster(String),
    /// The current context's user is not defined.
    UnknownUser(String),
    /// A field that must be a string is not.
    NotAString(&'static str),
    /// A `*-data` field is not base64.
    Base64(&'static str),
    /// A file a field names cannot be read.
    File {
        /// The field.
        key: &'static str,
        /// The file, resolved against the kubeconfig's directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// `exec` or `auth-provider` credentials.
    ExecUnsupported,
    /// Only one of the client certificate and key.
    HalfClientCertificate,
}

impl fmt::Display for KubeconfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeconfigError::Yaml(e) => write!(f, "not valid YAML: {e}"),
            KubeconfigError::Empty => f.write_str("the file is empty"),
            KubeconfigError::NotAMapping => f.write_str("the top level is not a mapping"),
            KubeconfigError::NotAList(list) => write!(f, "{list} is not a list"),
            KubeconfigError::Unnamed(list) => write!(f, "an entry of {list} has no name"),
            KubeconfigError::UnknownContext(name) => {
                write!(f, "current-context {name:?} is not among the contexts")
            }
            KubeconfigError::NoCurrentContext => f.write_str("no current-context is set"),
            KubeconfigError::UnknownCluster(name) => {
                write!(f, "cluster {name:?} of the current context is not defined")
            }
            KubeconfigError::UnknownUser(name) => {
                write!(f, "user {name:?} of the current context is not defined")
            }
            KubeconfigError::NotAString(key) => write!(f, "{key} is not a string"),
            KubeconfigError::Base64(key) => write!(f, "{key} is not valid base64"),
            KubeconfigError::File { key, path, error } => {
                write!(f, "{key} {}: {error}", path.display())
            }
            KubeconfigError::ExecUnsupported => f.write_str(
                "exec and auth-provider credentials are not supported: use a client certificate or a token",
            ),
            KubeconfigError::HalfClientCertificate => {
                f.write_str("a client certificate needs both client-certificate and client-key")
            }
        }
    }
}

impl std::error::Error for KubeconfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KubeconfigError::Yaml(e) => Some(e),
            KubeconfigError::File { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Reads and maps the kubeconfig at `path`; an error names the path.
pub(crate) fn load(path: &Path) -> Result<Kubeconfig, StartupError> {
    let err =
        |what: String| StartupError::new(what).context(format!("kubeconfig {}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, base).map_err(|e| err(e.to_string()))
}

/// Maps kubeconfig YAML text; `base` resolves relative file references.
pub(crate) fn parse(text: &str, base: &Path) -> Result<Kubeconfig, KubeconfigError> {
    let docs = YamlLoader::load_from_str(text).map_err(KubeconfigError::Yaml)?;
    let doc = docs.first().ok_or(KubeconfigError::Empty)?;
    if doc.as_hash().is_none() {
        return Err(KubeconfigError::NotAMapping);
    }

    let contexts = named_list(doc, "contexts", "context")?;
    let clusters = named_list(doc, "clusters", "cluster")?;
    let users = named_list(doc, "users", "user")?;

    // client-go falls back to the only context when current-context is unset.
    let context = match doc["current-context"].as_str().filter(|s| !s.is_empty()) {
        Some(name) => contexts
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| KubeconfigError::UnknownContext(name.into()))?,
        None if contexts.len() == 1 => contexts[0].1,
        None if contexts.is_empty() && clusters.len() == 1 => &Yaml::BadValue,
        None => return Err(KubeconfigError::NoCurrentContext),
    };

    let cluster = match context["cluster"].as_str() {
        Some(name) => Some(
            clusters
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .ok_or_else(|| KubeconfigError::UnknownCluster(name.into()))?,
        ),
        None if clusters.len() == 1 => Some(clusters[0].1),
        None => None,
    };
    let user = match context["user"].as_str() {
        Some(name) => Some(
            users
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, u)| *u)
                .ok_or_else(|| KubeconfigError::UnknownUser(name.into()))?,
        ),
        None if users.len() == 1 => Some(users[0].1),
        None => None,
    };

    let mut out = Kubeconfig::default();
    if let Some(cluster) = cluster {
        out.server = string_field(cluster, "server")?;
        out.ca_pem = data_or_file(
            cluster,
            "certificate-authority-data",
            "certificate-authority",
            base,
        )?;
        out.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"]
            .as_bool()
            .unwrap_or(false);
    }
    if let Some(user) = user {
        out.client_cert_pem =
            data_or_file(user, "client-certificate-data", "client-certificate", base)?;
        out.client_key_pem = data_or_file(user, "client-key-data", "client-key", base)?;
        if let Some(token) = string_field(user, "token")?.filter(|t| !t.is_empty()) {
            out.token = Some(Token::Inline(token));
        } else if let Some(file) = string_field(user, "tokenFile")?.filter(|t| !t.is_empty()) {
            out.token = Some(Token::File(base.join(file)));
        }
        if user["exec"].as_hash().is_some() || user["auth-provider"].as_hash().is_some() {
            return Err(KubeconfigError::ExecUnsupported);
        }
    }
    if out.client_cert_pem.is_some() != out.client_key_pem.is_some() {
        return Err(KubeconfigError::HalfClientCertificate);
    }
    Ok(out)
}

/// `(name, inner)` pairs of a kubeconfig list such as `clusters: [{name, cluster: {...}}]`.
fn named_list<'a>(
    doc: &'a Yaml,
    list: &'static str,
    inner: &str,
) -> Result<Vec<(&'a str, &'a Yaml)>, KubeconfigError> {
    match &doc[list] {
        Yaml::BadValue | Yaml::Null => Ok(Vec::new()),
        Yaml::Array(items) => items
            .iter()
            .map(|item| {
                let name = item["name"]
                    .as_str()
                    .ok_or(KubeconfigError::Unnamed(list))?;
                Ok((name, &item[inner]))
            })
            .collect(),
        _ => Err(KubeconfigError::NotAList(list)),
    }
}

fn string_field(node: &Yaml, key: &'static str) -> Result<Option<String>, KubeconfigError> {
    match &node[key] {
        Yaml::BadValue | Yaml::Null => Ok(None),
        Yaml::String(s) => Ok(Some(s.clone())),
        _ => Err(KubeconfigError::NotAString(key)),
    }
}

/// An inline `*-data` field (base64) or else the file a path field names.
fn data_or_file(
    node: &Yaml,
    data_key: &'static str,
    file_key: &'static str,
    base: &Path,
) -> Result<Option<Vec<u8>>, KubeconfigError> {
    if let Some(data) = string_field(node, data_key)?.filter(|s| !s.is_empty()) {
        return base64_decode(&data)
            .map(Some)
            .ok_or(KubeconfigError::Base64(data_key));
    }
    match string_field(node, file_key)?.filter(|s| !s.is_empty()) {
        Some(file) => {
            let path = base.join(&file);
            std::fs::read(&path)
                .map(Some)
                .map_err(|error| KubeconfigError::File {
                    key: file_key,
                    path,
                    error,
                })
        }
        None => Ok(None),
    }
}

/// Standard base64 with optional padding; whitespace (line-wrapped data) is skipped.
///
/// The `base64` crate decodes; around it stay the rules this reader always had and Go's
/// decoder does not share: spaces and tabs are skipped as well as line ends, and up to two
/// `=` may end the data whatever its length (the engine refuses one anywhere else).
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let symbols: String = text
        .chars()
        .filter(|c| !matches!(c, ' ' | '\n' | '\r' | '\t'))
        .collect();
    let data = symbols.trim_end_matches('=');
    if symbols.len() - data.len() > 2 {
        return None;
    }
    // No padding left to check; trailing bits of the last symbol must be zero (the default).
    // A `&str`, as tokens.rs decodes: one copy of the generic decoder serves both.
    STANDARD_NO_PAD.decode(data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn base64_round_trips() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("a$==").is_none());
        assert!(base64_decode("aGVsbG8=x").is_none());
    }

    #[test]
    fn base64_edges_stay_as_they_were() {
        let check = |text: &str, want: Option<&[u8]>| {
            assert_eq!(base64_decode(text).as_deref(), want, "{text:?}");
        };
        check(" aGVs\r\n\tbG8=\n", Some(b"hello"));
        check("aGVsbG8==", Some(b"hello"));
        check("aGVsbA=", Some(b"hell"));
        check("==", Some(b""));
        check("aGVsbG8===", None);
        check("a", None);
        check("aGVsbG9=", None);
        check("aGVs=bG8=", None);
        check("aGVs\x0bbG8=", None);
        check("aGVsbG8-", None);
    }

    const INLINE: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://other:6443
- name: edge
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0E=
users:
- name: hub
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
contexts:
- name: a
  context: {cluster: other, user: hub}
- name: b
  context:
    cluster: edge
    user: hub
current-context: b
"#;

    #[test]
    fn inline_data_of_the_current_context() {
        let k = parse(INLINE, &base()).unwrap();
        assert_eq!(k.server.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(k.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(k.client_cert_pem.as_deref(), Some(&b"CERT"[..]));
        assert_eq!(k.client_key_pem.as_deref(), Some(&b"KEY"[..]));
        assert_eq!(k.token, None);
    }

    #[test]
    fn files_resolve_relative_to_the_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("tinyhub-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), "CAFILE").unwrap();
        let text = "clusters:\n- name: c\n  cluster:\n    server: https://s:1\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    tokenFile: tok\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        let k = parse(text, &dir).unwrap();
        assert_eq!(k.ca_pem.as_deref(), Some(&b"CAFILE"[..]));
        assert_eq!(k.token, Some(Token::File(dir.join("tok"))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inline_token() {
        let text = "clusters:\n- name: c\n  cluster: {server: 'https://s:1'}\nusers:\n- name: u\n  user: {token: abc}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        assert_eq!(
            parse(text, &base()).unwrap().token,
            Some(Token::Inline("abc".into()))
        );
    }

    #[test]
    fn bad_kubeconfigs_say_why() {
        let cases: &[(&str, &str)] = &[
            ("a: [", "not valid YAML"),
            ("- 1", "not a mapping"),
            (
                "current-context: nope\ncontexts: []\n",
                "\"nope\" is not among the contexts",
            ),
            (
                "contexts:\n- name: x\n  context: {cluster: gone}\ncurrent-context: x\n",
                "cluster \"gone\"",
            ),
            (
                "clusters:\n- name: c\n  cluster: {certificate-authority-data: '!!'}\ncontexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
                "not valid base64",
            ),
            (
                "clusters:\n- name: c\n  cluster: {certificate-authority: /nonexistent/ca}\ncontexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
                "/nonexistent/ca",
            ),
            (
                "users:\n- name: u\n  user: {client-certificate-data: Q0E=}\ncontexts:\n- name: x\n  context: {user: u}\ncurrent-context: x\n",
                "needs both",
            ),
            (
                "users:\n- name: u\n  user: {exec: {command: aws}}\ncontexts:\n- name: x\n  context: {user: u}\ncurrent-context: x\n",
                "exec",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text, &base()).expect_err(text).to_string();
            assert!(
                err.contains(want),
                "{text:?}: {err:?} should mention {want:?}"
            );
        }
    }

    #[test]
    fn a_file_it_names_that_cannot_be_read_is_that_files_error() {
        let text = "clusters:\n- name: c\n  cluster: {certificate-authority: /nonexistent/ca}\n";
        let err = parse(text, &base()).unwrap_err();
        let KubeconfigError::File { key, path, error } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*key, "certificate-authority");
        assert_eq!(path, Path::new("/nonexistent/ca"));
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn unreadable_file_names_the_path() {
        let err = load(Path::new("/nonexistent/kubeconfig")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/kubeconfig"));
    }
}
