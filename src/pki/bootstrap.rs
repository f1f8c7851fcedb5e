//! Token mode (YurtHub's `pkg/yurthub/certificate/token`): the bootstrap kubeconfig comes from
//! `--bootstrap-file`, or from `<root>/bootstrap-hub.conf`, or from `cluster-info` discovery with
//! the join token (which then writes that file); `pki/ca.crt` and `yurthub.conf` are written from
//! it once, as YurtHub writes them. The client certificate is requested with the bootstrap token
//! while the hub has no valid certificate, and with its own certificate to renew it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::Receiver;

use super::csr::CsrTemplate;
use super::csr_api::{ApiClient, Auth};
use super::discovery::{self, DiscoveryTiming};
use super::error::{IdentityFile, Missing, PkiError};
use super::files::{CertKind, RootDir, StoredCert};
use super::renew::{self, CLIENT_USAGES, Hooks, Renewal};
use super::state::{IdentityState, TokenReplacer};
use super::{install_tls, material, reachable, token_text};
use crate::config::join::{CaPin, JoinToken};
use crate::config::{ClientSigner, TokenMode, kubeconfig};
use crate::upstream::Upstream;
use crate::x509::{self, CertInfo};

/// How long `POST /v1/token` tries each of discovery's fetches with the new token.
const TOKEN_UPDATE_WAIT: Duration = Duration::from_secs(10);

/// What a bootstrap kubeconfig gives: where to send the first CSR, the CA, the token.
struct Bootstrap {
    server: String,
    ca_pem: Vec<u8>,
    token: String,
}

/// Token mode's client certificate thread.
pub(super) struct TokenContext {
    /// `--root-dir`.
    pub root: Arc<RootDir>,
    /// `--server-addr`.
    pub servers: Arc<[String]>,
    /// Gets each new certificate.
    pub upstream: Arc<Upstream>,
    /// readyz's view.
    pub state: Arc<IdentityState>,
    /// The client certificate's subject.
    pub template: CsrTemplate,
    /// Which signer it is requested from.
    pub signer: ClientSigner,
    /// `--heartbeat-timeout-seconds`, for the probe after a new certificate.
    pub probe_timeout: Duration,
}

impl TokenContext {
    /// The CSR API as the hub itself, with its stored client certificate (for the serving
    /// certificate, which a bootstrap token may not request).
    pub(super) fn api_as_hub(&self) -> Arc<dyn Fn() -> Result<ApiClient, PkiError> + Send + Sync> {
        let (root, servers) = (Arc::clone(&self.root), Arc::clone(&self.servers));
        Arc::new(move || {
            let ca = root.read_ca().ok_or(Missing::ClusterCa)?;
            let stored = root
                .load_cert(CertKind::Client)
                .ok_or(Missing::ClientCertificate)?;
            ApiClient::new(
                &reachable(&servers)?,
                &ca,
                Auth::Certificate(stored.identity),
            )
        })
    }

    /// Keeps the client certificate until `stop` closes; `wake` says `/v1/token` gave a new
    /// bootstrap token.
    pub(super) fn run(self, mode: TokenMode, wake: &Receiver<()>, stop: &Receiver<()>) {
        let renewal = Renewal {
            kind: CertKind::Client,
            signer: match self.signer {
                ClientSigner::ApiserverClient => "kubernetes.io/kube-apiserver-client",
                ClientSigner::ApiserverClientKubelet => {
                    "kubernetes.io/kube-apiserver-client-kubelet"
                }
            },
            usages: CLIENT_USAGES,
            what: "client certificate",
        };
        let fixed = self.template.clone();
        let mut template = || Ok(fixed.clone());
        let api = || self.client_api(&mode, stop);
        let mut install = |stored: &StoredCert, info: &CertInfo| -> Result<(), PkiError> {
            let ca = self.root.read_ca().ok_or(Missing::ClusterCaGone)?;
            let tls = material(&ca, &stored.identity).map_err(|source| PkiError::Unparsable {
                file: IdentityFile::ClusterCa,
                path: self.root.ca_file(),
                source,
            })?;
            install_tls(&self.upstream, &tls, self.probe_timeout)?;
            self.state.client_installed(Some(info.not_after));
            Ok(())
        };
        let problem = |why: String| self.state.client_problem(why);
        renew::run(
            &self.root,
            &renewal,
            Hooks {
                ready: &|| Ok(()),
                template: &mut template,
                fixed: &self.template,
                api: &api,
                install: &mut install,
                problem: &problem,
            },
            wake,
            stop,
        );
    }

    /// Who the client CSR is sent as: the hub's own certificate while it is valid, else the
    /// bootstrap token (writing `pki/ca.crt` and `yurthub.conf` the first time).
    fn client_api(&self, mode: &TokenMode, stop: &Receiver<()>) -> Result<ApiClient, PkiError> {
        let now = SystemTime::now();
        if let (Some(ca), Some(stored)) =
            (self.root.read_ca(), self.root.load_cert(CertKind::Client))
            && renew::info(&stored).is_some_and(|i| now < i.not_after)
        {
            return ApiClient::new(
                &reachable(&self.servers)?,
                &ca,
                Auth::Certificate(stored.identity),
            );
        }
        let boot = self.bootstrap(mode, stop)?;
        let ca = match self.root.read_ca() {
            Some(ca) => ca,
            None => {
                self.root
                    .write_ca(&boot.ca_pem)
                    .map_err(|source| PkiError::Write {
                        path: self.root.ca_file(),
                        source,
                    })?;
                boot.ca_pem.clone()
            }
        };
        if !self.root.hub_conf().exists() {
            self.root
                .write_hub_conf(&boot.server, &ca)
                .map_err(|source| PkiError::Write {
                    path: self.root.hub_conf(),
                    source,
                })?;
        }
        ApiClient::new(&reachable(&self.servers)?, &ca, Auth::Token(boot.token))
    }

    /// The bootstrap kubeconfig: the user's file, the one written before, or discovery.
    fn bootstrap(&self, mode: &TokenMode, stop: &Receiver<()>) -> Result<Bootstrap, PkiError> {
        let path = bootstrap_path(&self.root, mode.bootstrap_file.as_ref());
        if mode.bootstrap_file.is_some() || path.exists() {
            let k = kubeconfig::load(&path).map_err(PkiError::BootstrapKubeconfig)?;
            let in_file = |missing: &'static str| PkiError::BootstrapIncomplete {
                path: path.clone(),
                missing,
            };
            let token = token_text(&k.token.ok_or_else(|| in_file("token"))?)?;
            return Ok(Bootstrap {
                server: k
                    .server
                    .or_else(|| self.servers.first().cloned())
                    .ok_or_else(|| in_file("server"))?,
                ca_pem: k
                    .ca_pem
                    .ok_or_else(|| in_file("certificate-authority-data"))?,
                token,
            });
        }
        // Config validation makes sure one of the two is there.
        let token = mode.join_token.as_ref().ok_or(Missing::BootstrapSource)?;
        self.state.client_problem(format!(
            "discovering the cluster with join token {}",
            token.id()
        ));
        let found = discovery::discover(
            &self.servers,
            token,
            &mode.pins,
            &DiscoveryTiming::default(),
            stop,
        )
        .map_err(PkiError::Discovery)?;
        self.root
            .write_bootstrap_conf(&path, &found.server, &found.ca_pem, &token.bearer())
            .map_err(|source| PkiError::Write {
                path: path.clone(),
                source,
            })?;
        log::info!(
            "cluster discovered through cluster-info with join token {} at {}; wrote {}",
            token.id(),
            found.server,
            path.display()
        );
        Ok(Bootstrap {
            server: found.server,
            ca_pem: found.ca_pem,
            token: token.bearer(),
        })
    }
}

/// Where the bootstrap kubeconfig is: the user's `--bootstrap-file`, else the hub's own.
fn bootstrap_path(root: &RootDir, user_file: Option<&PathBuf>) -> PathBuf {
    user_file.cloned().unwrap_or_else(|| root.bootstrap_conf())
}

/// `POST /v1/token`: a new join token replaces the bootstrap token after discovery with it
/// succeeds (a node whose certificate and token both expired while it was offline).
#[derive(Debug)]
pub(crate) struct TokenUpdates {
    root: Arc<RootDir>,
    servers: Arc<[String]>,
    bootstrap_file: Option<PathBuf>,
    pins: Vec<CaPin>,
    unsafe_skip: bool,
}

impl TokenUpdates {
    /// Updates for token mode's files.
    pub(super) fn new(
        root: Arc<RootDir>,
        servers: Arc<[String]>,
        mode: &TokenMode,
    ) -> TokenUpdates {
        TokenUpdates {
            root,
            servers,
            bootstrap_file: mode.bootstrap_file.clone(),
            pins: mode.pins.clone(),
            unsafe_skip: mode.unsafe_skip,
        }
    }
}

impl TokenReplacer for TokenUpdates {
    /// Discovery with `join_token`, then the bootstrap kubeconfig rewritten with it:
    /// [`PkiError::BadJoinToken`] (a 400) for a token that is not one, discovery's or the
    /// write's error (a 500) when they fail. Without `--discovery-token-ca-cert-hash` the CA the hub already trusts
    /// (`pki/ca.crt`, else the bootstrap kubeconfig's) is the pin: a new token must not bring
    /// a new cluster. With no pin at all, only `--discovery-token-unsafe-skip-ca-verification`
    /// lets discovery go unpinned, as at start.
    fn replace(&self, join_token: &str) -> Result<(), PkiError> {
        let token = JoinToken::parse(join_token.trim()).map_err(PkiError::BadJoinToken)?;
        let path = bootstrap_path(&self.root, self.bootstrap_file.as_ref());
        let mut pins = self.pins.clone();
        if pins.is_empty() {
            let known_ca = self
                .root
                .read_ca()
                .or_else(|| kubeconfig::load(&path).ok()?.ca_pem);
            pins.extend(known_ca.as_deref().and_then(ca_pin));
        }
        if pins.is_empty() && !self.unsafe_skip {
            return Err(PkiError::NoPin);
        }
        // Someone waits for the answer: a token the cluster has not signed within a few
        // retries is refused rather than after YurtHub's two minutes.
        let timing = DiscoveryTiming {
            give_up_after: TOKEN_UPDATE_WAIT,
            ..DiscoveryTiming::default()
        };
        let found = discovery::discover(
            &self.servers,
            &token,
            &pins,
            &timing,
            &crossbeam_channel::never(),
        )
        .map_err(PkiError::Discovery)?;
        self.root
            .write_bootstrap_conf(&path, &found.server, &found.ca_pem, &token.bearer())
            .map_err(|source| PkiError::Write {
                path: path.clone(),
                source,
            })?;
        log::info!(
            "bootstrap token replaced through /v1/token: token id {}, {} rewritten",
            token.id(),
            path.display()
        );
        Ok(())
    }
}

/// The pin of the first certificate of a CA bundle.
fn ca_pin(ca_pem: &[u8]) -> Option<CaPin> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let first = CertificateDer::pem_slice_iter(ca_pem).next()?.ok()?;
    CaPin::parse(&x509::pin(first.as_ref())?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Token updates for a root dir that does not exist (nothing is written: both refusals
    /// come before discovery).
    fn updates() -> TokenUpdates {
        let root = std::env::temp_dir().join(format!(
            "tinyhub-token-updates-{}-absent",
            std::process::id()
        ));
        TokenUpdates {
            root: Arc::new(RootDir::new(root)),
            servers: Arc::from(vec!["https://127.0.0.1:1".to_owned()]),
            bootstrap_file: None,
            pins: Vec::new(),
            unsafe_skip: false,
        }
    }

    #[test]
    fn a_token_update_says_whose_fault_a_refusal_is() {
        let bad = updates().replace("not-a-token").expect_err("bad token");
        assert!(matches!(bad, PkiError::BadJoinToken(_)), "{bad:?}");
        assert_eq!(bad.status(), 400);
        let good = "abcdef.0123456789abcdef";
        let unpinned = updates().replace(good).expect_err("nothing to pin");
        assert!(matches!(unpinned, PkiError::NoPin), "{unpinned:?}");
        assert_eq!(unpinned.status(), 500);
        assert!(
            unpinned
                .to_string()
                .contains("--discovery-token-ca-cert-hash"),
            "{unpinned}"
        );
    }
}
