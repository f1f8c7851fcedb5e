//! The identity's errors: [`PkiError`], the one type every fallible function of `pki`
//! returns, says where a failure came from — a file (with its path and the I/O error),
//! material that does not parse, the cloud's answer (its status and message, or the
//! transport's error), discovery with the join token, or something the hub does not have yet.
//! The cloud conversations' own failures it wraps live here too, below `csr_api.rs` and
//! `discovery.rs` that make them: [`ApiError`] (one call), [`CsrError`] (a certificate signing
//! request), [`DiscoveryError`] with [`FetchError`] and [`SignatureError`] (cluster-info).
//!
//! `Display` is the one line readyz, the log and `POST /v1/token` show; nothing decides by
//! that text. It does not say what to do about a failure: the renewal loop retries every kind
//! the same way, and `POST /v1/token` asks [`PkiError::status`].

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::config::join::JoinTokenError;
use crate::error::StartupError;
use crate::server::tls::ServingCertError;
use crate::tls::ClientKeyError;

/// Why the hub's identity could not be had.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum PkiError {
    /// A file the identity needs cannot be read.
    Read {
        /// What the file is.
        file: IdentityFile,
        /// Where it is.
        path: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// kubelet's certificate file is not there (or its metadata cannot be read), as its
    /// watch saw.
    Gone {
        /// What the file is.
        file: IdentityFile,
        /// Where it should be.
        path: PathBuf,
    },
    /// A file the hub writes (`pki/ca.crt`, `yurthub.conf`, the bootstrap kubeconfig)
    /// cannot be written.
    Write {
        /// The file.
        path: PathBuf,
        /// Why (the I/O error names the step and the temporary file).
        source: io::Error,
    },
    /// A CA bundle, certificate or key read from a file does not parse, or the certificate
    /// and key do not belong together.
    Unparsable {
        /// What the file is.
        file: IdentityFile,
        /// Where it is.
        path: PathBuf,
        /// The parser's reason.
        source: StartupError,
    },
    /// The bootstrap kubeconfig cannot be read or is not a kubeconfig (the kubeconfig
    /// loader's error, which names the file).
    BootstrapKubeconfig(StartupError),
    /// The bootstrap kubeconfig lacks something token mode needs.
    BootstrapIncomplete {
        /// The file.
        path: PathBuf,
        /// What it lacks: "token", "server", "certificate-authority-data".
        missing: &'static str,
    },
    /// Something the request needs is not there (yet).
    Missing(Missing),
    /// No cloud server accepts a TCP connection.
    NoServer {
        /// The server tried last (all of them when none was given).
        server: String,
        /// Why it refused: "cannot resolve: …", "cannot connect: …".
        why: String,
    },
    /// The CA data to trust holds no PEM certificate.
    NoCaCertificate,
    /// The client key cannot be given to ureq (for the identity's own calls, or the cloud
    /// client's new TLS material).
    ClientKey(ClientKeyError),
    /// The HTTPS port refused the new serving certificate.
    ServingCert(ServingCertError),
    /// Generating a key failed.
    KeyGeneration(KeyFailure),
    /// Signing the certificate request failed.
    Signing,
    /// A DNS name for the certificate is not ASCII (IA5String).
    NotAscii {
        /// The name.
        name: String,
    },
    /// The certificate signing request brought no certificate: the cloud refused, denied,
    /// failed or did not answer (the status code and the cloud's message are kept).
    Csr(CsrError),
    /// The cloud did not give the `kubernetes` Service the serving certificate is named by.
    ServiceLookup(ApiError),
    /// The `kubernetes` Service has no cluster IP.
    NoClusterIp,
    /// The issued certificate and the key the hub made do not make an identity.
    IssuedUnusable {
        /// "client certificate", "serving certificate".
        what: &'static str,
        /// Why.
        source: StartupError,
    },
    /// The issued certificate's fields cannot be read.
    IssuedUnparsable {
        /// "client certificate", "serving certificate".
        what: &'static str,
    },
    /// The issued certificate expired already (the node's clock is likely wrong).
    IssuedExpired {
        /// "client certificate", "serving certificate".
        what: &'static str,
        /// Its end of validity.
        not_after: SystemTime,
    },
    /// Join-token discovery of `cluster-info` failed.
    Discovery(DiscoveryError),
    /// `POST /v1/token` was given something that is not a join token.
    BadJoinToken(JoinTokenError),
    /// `POST /v1/token`: no pin and no known CA to trust a new token's discovery with.
    NoPin,
}

/// The files the identity reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdentityFile {
    /// A kubeconfig's `tokenFile`.
    TokenFile,
    /// kubeletcertificate mode: the cluster CA kubelet trusts.
    KubeletCa,
    /// kubeletcertificate mode: kubelet's client certificate and key (one PEM file).
    KubeletCert,
    /// Token mode: `pki/ca.crt` under `--root-dir`.
    ClusterCa,
}

impl IdentityFile {
    /// How the file is named in a message.
    fn label(self) -> &'static str {
        match self {
            IdentityFile::TokenFile => "tokenFile",
            IdentityFile::KubeletCa => "kubeletcertificate mode: the cluster CA",
            IdentityFile::KubeletCert => "kubeletcertificate mode: kubelet's client certificate",
            IdentityFile::ClusterCa => "the cluster CA",
        }
    }
}

/// What a request for a certificate lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The user's kubeconfig has neither a certificate nor a token (config validation
    /// refuses that).
    KubeconfigUser,
    /// Token mode has no `pki/ca.crt` yet.
    ClusterCa,
    /// The cluster CA file was there and is gone.
    ClusterCaGone,
    /// Token mode has no stored client certificate yet.
    ClientCertificate,
    /// The serving certificate waits for a client certificate to request it with.
    WaitingForClient,
    /// Token mode with neither a bootstrap kubeconfig nor a join token (config validation
    /// refuses that).
    BootstrapSource,
}

/// Why a new key could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFailure {
    /// The system's random source failed.
    NoRandomness,
    /// ring refused the key it had just generated.
    Rejected,
    /// The generated PKCS#8 document is not laid out as expected.
    Layout,
}

impl PkiError {
    /// The status `POST /v1/token` answers this failure with: 400 for a token that is not
    /// one, else 500.
    pub(crate) fn status(&self) -> u16 {
        match self {
            PkiError::BadJoinToken(_) => 400,
            _ => 500,
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Missing::KubeconfigUser => "the kubeconfig has no user",
            Missing::ClusterCa => "the cluster CA is not known yet",
            Missing::ClusterCaGone => "the cluster CA file is gone",
            Missing::ClientCertificate => "the hub has no client certificate yet",
            Missing::WaitingForClient => "waiting for the hub's client certificate",
            Missing::BootstrapSource => "neither a bootstrap kubeconfig nor a join token",
        })
    }
}

impl fmt::Display for KeyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyFailure::NoRandomness => "cannot generate a P-256 key: no system randomness",
            KeyFailure::Rejected => "ring rejected the P-256 key it generated",
            KeyFailure::Layout => "unexpected PKCS#8 layout of a generated P-256 key",
        })
    }
}

impl fmt::Display for PkiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PkiError::Read { file, path, source } => {
                write!(f, "{} {}: {source}", file.label(), path.display())
            }
            PkiError::Gone { file, path } => {
                write!(f, "{} {} cannot be read", file.label(), path.display())
            }
            PkiError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
            PkiError::Unparsable { file, path, source } => match file {
                IdentityFile::KubeletCa | IdentityFile::KubeletCert => {
                    write!(f, "kubeletcertificate mode: {}: {source}", path.display())
                }
                // The parser's text says what it read ("certificate authority: …").
                IdentityFile::TokenFile | IdentityFile::ClusterCa => write!(f, "{source}"),
            },
            PkiError::BootstrapKubeconfig(source) => write!(f, "{source}"),
            PkiError::BootstrapIncomplete { path, missing } => {
                write!(f, "bootstrap kubeconfig {}: no {missing}", path.display())
            }
            PkiError::Missing(m) => write!(f, "{m}"),
            PkiError::NoServer { server, why } => {
                write!(f, "no cloud server accepts connections ({server}: {why})")
            }
            PkiError::NoCaCertificate => f.write_str("the CA data holds no PEM certificate"),
            PkiError::ClientKey(e) => write!(f, "{e}"),
            PkiError::ServingCert(e) => write!(f, "{e}"),
            PkiError::KeyGeneration(k) => write!(f, "{k}"),
            PkiError::Signing => f.write_str("cannot sign the certificate request"),
            PkiError::NotAscii { name } => {
                write!(f, "DNS name {name:?} is not ASCII (IA5String)")
            }
            PkiError::Csr(e) => write!(f, "{e}"),
            PkiError::ServiceLookup(e) => write!(
                f,
                "cannot read the kubernetes Service for the serving certificate: {e}"
            ),
            PkiError::NoClusterIp => f.write_str("the kubernetes Service has no cluster IP"),
            PkiError::IssuedUnusable { what, source } => {
                write!(f, "the issued {what} is unusable: {source}")
            }
            PkiError::IssuedUnparsable { what } => {
                write!(f, "the issued {what} cannot be parsed")
            }
            PkiError::IssuedExpired { what, not_after } => write!(
                f,
                "the issued {what} expired at {} already: is this node's clock right?",
                crate::logging::time_rfc3339(*not_after)
            ),
            PkiError::Discovery(e) => write!(f, "{e}"),
            PkiError::BadJoinToken(e) => write!(f, "{e}"),
            PkiError::NoPin => f.write_str(
                "no CA to pin discovery to: give --discovery-token-ca-cert-hash (or --discovery-token-unsafe-skip-ca-verification)",
            ),
        }
    }
}

impl std::error::Error for PkiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PkiError::Read { source, .. } | PkiError::Write { source, .. } => Some(source),
            PkiError::Unparsable { source, .. }
            | PkiError::BootstrapKubeconfig(source)
            | PkiError::IssuedUnusable { source, .. } => Some(source),
            PkiError::Csr(e) => Some(e),
            PkiError::ServiceLookup(e) => Some(e),
            PkiError::Discovery(e) => Some(e),
            PkiError::ClientKey(e) => Some(e),
            PkiError::ServingCert(e) => Some(e),
            PkiError::BadJoinToken(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Missing> for PkiError {
    fn from(m: Missing) -> PkiError {
        PkiError::Missing(m)
    }
}

/// A failed API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// The server answered a status other than 2xx; `message` is its `Status` message.
    Status {
        /// The HTTP status code.
        status: u16,
        /// The `message` of the Kubernetes `Status` body, or the start of the body.
        message: String,
    },
    /// No answer: connection, TLS or timeout.
    Transport(String),
    /// A 2xx answer that is not the JSON expected.
    Invalid(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status { status, message } => {
                write!(f, "the server answered {status}: {message}")
            }
            ApiError::Transport(e) => write!(f, "no answer from the server: {e}"),
            ApiError::Invalid(e) => write!(f, "the server's answer is not what was expected: {e}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// Why no certificate came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CsrError {
    /// The server refused to create the request (401, 403 or another 4xx).
    Refused {
        /// The HTTP status code.
        status: u16,
        /// The server's `Status` message.
        message: String,
    },
    /// An approver denied the request (the text names it, the reason and the message).
    Denied(String),
    /// The signer failed the request, or it vanished before it was issued.
    Failed(String),
    /// No answer within the wait.
    TimedOut,
    /// The server could not be reached, answered 5xx or answered nonsense.
    Transport(String),
    /// The hub is shutting down.
    Stopped,
}

impl fmt::Display for CsrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsrError::Refused { status, message } => write!(
                f,
                "the cloud refused the certificate signing request ({status}): {message}"
            ),
            CsrError::Denied(why) => write!(f, "certificate signing request denied: {why}"),
            CsrError::Failed(why) => write!(f, "certificate signing request failed: {why}"),
            CsrError::TimedOut => f.write_str(
                "no certificate was issued in time (is an approver running for this signer?)",
            ),
            CsrError::Transport(e) => write!(f, "certificate signing request: {e}"),
            CsrError::Stopped => {
                f.write_str("certificate signing request abandoned: shutting down")
            }
        }
    }
}

impl std::error::Error for CsrError {}

/// Why discovery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DiscoveryError {
    /// No server gave cluster-info in time.
    Unreachable {
        /// The server tried last.
        server: String,
        /// Its last error.
        error: FetchError,
    },
    /// cluster-info never carried a signature for the token's id.
    NoSignature {
        /// The token id.
        id: String,
    },
    /// The signature does not verify with the token.
    BadSignature(SignatureError),
    /// The signed kubeconfig does not hold exactly one cluster.
    Clusters(usize),
    /// The signed kubeconfig is unusable (not YAML, no CA data).
    BadClusterInfo(String),
    /// No CA certificate has a pinned public key.
    PinMismatch {
        /// The pins of the CA certificates seen.
        seen: Vec<String>,
    },
    /// The fetch over verified TLS gave another kubeconfig.
    SecondFetchDiffers,
    /// The hub is shutting down.
    Stopped,
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Unreachable { server, error } => {
                write!(f, "cluster-info discovery: cannot reach {server}: {error}")
            }
            DiscoveryError::NoSignature { id } => write!(
                f,
                "cluster-info holds no signature for token id {id} (token unknown or expired)"
            ),
            DiscoveryError::BadSignature(why) => write!(
                f,
                "cluster-info's signature does not match the join token ({why})"
            ),
            DiscoveryError::Clusters(n) => write!(
                f,
                "cluster-info's kubeconfig holds {n} clusters, exactly one is expected"
            ),
            DiscoveryError::BadClusterInfo(why) => write!(f, "cluster-info is unusable: {why}"),
            DiscoveryError::PinMismatch { seen } => write!(
                f,
                "no CA certificate in cluster-info matches --discovery-token-ca-cert-hash; its CA has {}",
                if seen.is_empty() {
                    "no readable certificate".to_string()
                } else {
                    seen.join(", ")
                }
            ),
            DiscoveryError::SecondFetchDiffers => f.write_str(
                "cluster-info fetched again over verified TLS differs from the first answer",
            ),
            DiscoveryError::Stopped => f.write_str("cluster-info discovery: shutting down"),
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// Why one try gave no cluster-info: the cloud's answer (its status) or why there was none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FetchError {
    /// No server accepted a TCP connection: "cannot resolve: …", "cannot connect: …".
    Dial(String),
    /// The server's address makes no request URL.
    BadAddress(String),
    /// No answer, or it broke off: connection, TLS, timeout (ureq's text).
    Transport(String),
    /// The server answered this status, not 200.
    Status(u16),
    /// A 200 answer that is not JSON.
    NotJson(String),
    /// The ConfigMap has no `data`.
    NoData,
    /// Nothing came back before the deadline.
    NoAnswerInTime,
    /// The helper thread could not run the fetch.
    Lost(String),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Dial(why) | FetchError::Transport(why) => f.write_str(why),
            FetchError::BadAddress(e) => write!(f, "bad server address: {e}"),
            FetchError::Status(status) => write!(f, "answered {status}"),
            FetchError::NotJson(e) => write!(f, "answer is not JSON: {e}"),
            FetchError::NoData => f.write_str("the ConfigMap has no data"),
            FetchError::NoAnswerInTime => f.write_str("no answer in time"),
            FetchError::Lost(e) => write!(f, "helper thread: {e}"),
        }
    }
}

/// Why cluster-info's detached JWS does not verify with the join token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignatureError {
    /// Not `<header>..<signature>`.
    NotDetached,
    /// The header is not base64url.
    HeaderNotBase64,
    /// The header is not JSON.
    HeaderNotJson,
    /// The header's `alg`, as JSON, is not HS256.
    Algorithm(String),
    /// The header's `kid`, as JSON, is not the token's id.
    KeyId(String),
    /// The signature is not base64url.
    SignatureNotBase64,
    /// The HMAC does not match.
    Wrong,
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::NotDetached => f.write_str("not a detached JWS"),
            SignatureError::HeaderNotBase64 => f.write_str("its header is not base64url"),
            SignatureError::HeaderNotJson => f.write_str("its header is not JSON"),
            SignatureError::Algorithm(alg) => write!(f, "algorithm {alg} is not HS256"),
            SignatureError::KeyId(kid) => write!(f, "key id {kid} is not the token's"),
            SignatureError::SignatureNotBase64 => f.write_str("its signature is not base64url"),
            SignatureError::Wrong => f.write_str("wrong signature"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn check(error: PkiError, expected: &str) {
        assert_eq!(error.to_string(), expected, "{error:?}");
    }

    fn not_found() -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, "gone")
    }

    #[test]
    fn each_failure_reads_as_the_line_the_hub_printed_before() {
        let read = |file, path: &str| PkiError::Read {
            file,
            path: path.into(),
            source: not_found(),
        };
        check(read(IdentityFile::TokenFile, "/t"), "tokenFile /t: gone");
        check(
            read(IdentityFile::KubeletCa, "/ca.crt"),
            "kubeletcertificate mode: the cluster CA /ca.crt: gone",
        );
        check(
            read(IdentityFile::KubeletCert, "/k.pem"),
            "kubeletcertificate mode: kubelet's client certificate /k.pem: gone",
        );
        check(
            PkiError::Gone {
                file: IdentityFile::KubeletCert,
                path: "/k.pem".into(),
            },
            "kubeletcertificate mode: kubelet's client certificate /k.pem cannot be read",
        );
        check(
            PkiError::Write {
                path: "/r/pki/ca.crt".into(),
                source: not_found(),
            },
            "cannot write /r/pki/ca.crt: gone",
        );
        let parser = || StartupError::new("no PEM").context("certificate authority");
        let unparsable = |file, path: &str| PkiError::Unparsable {
            file,
            path: path.into(),
            source: parser(),
        };
        check(
            unparsable(IdentityFile::KubeletCa, "/ca.crt"),
            "kubeletcertificate mode: /ca.crt: certificate authority: no PEM",
        );
        check(
            unparsable(IdentityFile::ClusterCa, "/r/pki/ca.crt"),
            "certificate authority: no PEM",
        );
        check(
            PkiError::BootstrapIncomplete {
                path: "/b.conf".into(),
                missing: "token",
            },
            "bootstrap kubeconfig /b.conf: no token",
        );
        check(
            Missing::WaitingForClient.into(),
            "waiting for the hub's client certificate",
        );
        check(
            Missing::ClientCertificate.into(),
            "the hub has no client certificate yet",
        );
        check(
            PkiError::NoServer {
                server: "https://a:6443".into(),
                why: "cannot connect: refused".into(),
            },
            "no cloud server accepts connections (https://a:6443: cannot connect: refused)",
        );
        check(
            PkiError::Csr(CsrError::Refused {
                status: 403,
                message: "forbidden".into(),
            }),
            "the cloud refused the certificate signing request (403): forbidden",
        );
        check(
            PkiError::ServiceLookup(ApiError::Status {
                status: 401,
                message: "Unauthorized".into(),
            }),
            "cannot read the kubernetes Service for the serving certificate: the server answered 401: Unauthorized",
        );
        check(
            PkiError::IssuedExpired {
                what: "client certificate",
                not_after: UNIX_EPOCH + Duration::from_secs(86_400),
            },
            "the issued client certificate expired at 1970-01-02T00:00:00Z already: is this node's clock right?",
        );
        check(
            PkiError::KeyGeneration(KeyFailure::NoRandomness),
            "cannot generate a P-256 key: no system randomness",
        );
        check(
            PkiError::NotAscii {
                name: "nœud".into(),
            },
            "DNS name \"nœud\" is not ASCII (IA5String)",
        );
    }

    #[test]
    fn a_failure_that_wraps_another_gives_it_as_its_source() {
        let read = PkiError::Read {
            file: IdentityFile::TokenFile,
            path: "/t".into(),
            source: not_found(),
        };
        let io = read.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(io.map(io::Error::kind), Some(io::ErrorKind::NotFound));

        let refused = PkiError::Csr(CsrError::Refused {
            status: 403,
            message: "forbidden".into(),
        });
        let csr = refused.source().and_then(|s| s.downcast_ref::<CsrError>());
        assert!(
            matches!(csr, Some(CsrError::Refused { status: 403, .. })),
            "{csr:?}"
        );

        assert!(PkiError::Missing(Missing::ClusterCa).source().is_none());
    }

    #[test]
    fn only_a_bad_join_token_is_the_callers_fault() {
        assert_eq!(PkiError::BadJoinToken(JoinTokenError).status(), 400);
        assert_eq!(PkiError::NoPin.status(), 500);
        assert_eq!(PkiError::Discovery(DiscoveryError::Stopped).status(), 500);
    }
}
