//! The hub's own identity for the cloud: its client certificate, obtained with a bootstrap
//! token (token mode) or taken from kubelet (kubeletcertificate mode) or from the user's
//! `--kubeconfig`, and its serving certificate for the HTTPS proxy port. Both are renewed
//! before they expire, as YurtHub renews them (YurtHub's `pkg/yurthub/certificate`), with its
//! faults fixed: a missing or expired certificate never stops answers from the cache, the HTTPS
//! port comes up when its certificate arrives instead of holding back the whole hub, and
//! kubelet's certificate is re-read when kubelet rotates it, not after it expired.
//!
//! Files: `csr.rs` (P-256 keys and PKCS#10 requests; DER and certificate fields are
//! `crate::x509`'s), `discovery.rs` (join-token discovery of `cluster-info`; the token and
//! the pins are `config::join`'s), `csr_api.rs` (the CSR API and the small cloud client it needs),
//! `files.rs` (what lives under `--root-dir`), `bootstrap.rs` (token mode's bootstrap
//! kubeconfig), `renew.rs` (the renewal loop both certificates share), `kubelet.rs`
//! (kubeletcertificate mode), `state.rs` (what readyz, `/v1/token` and the metrics see),
//! `error.rs` (`PkiError`, every failure of these by its origin).

pub(crate) mod csr;
pub(crate) mod csr_api;
pub(crate) mod discovery;
pub(crate) mod error;
pub(crate) mod files;

mod bootstrap;
mod kubelet;
mod renew;
mod state;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::config::{ClientSigner, Config, IdentitySource, Token};
use crate::error::StartupError;
use crate::server::tls::ServingCert;
use crate::spawn;
use crate::tls::{self, ClientIdentity, TlsMaterial};
use crate::upstream::Upstream;
use csr::CsrTemplate;
use csr_api::{ApiClient, Auth};
pub(crate) use error::PkiError;
use error::{IdentityFile, Missing};
use files::{CertKind, RootDir};
pub(crate) use state::IdentityState;

/// The organizations YurtHub puts in its client certificate before `--hub-cert-organizations`.
const HUB_ORGANIZATIONS: [&str; 2] = ["openyurt:yurthub", "system:nodes"];
/// The serving certificate's DNS names: the `kubernetes` Service's, as YurtHub's (pods that
/// reach the apiserver through the hub check these).
const SERVING_DNS_NAMES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
/// Time to wait for a TCP connection when choosing the server the identity calls go to.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The credentials the hub can present now, read from files only (no network): the user's
/// kubeconfig, the certificate token mode stored last time, or kubelet's. `None` when there
/// is none yet; the cloud is then unusable until the identity threads get one, and reads
/// are answered from the cache.
pub(crate) fn initial_credentials(config: &Config) -> (Option<TlsMaterial>, Option<Token>) {
    match &config.identity {
        IdentitySource::Kubeconfig { tls, token } => (Some(tls.clone()), token.clone()),
        IdentitySource::Token(mode) => {
            let root = RootDir::new(config.root_dir.clone());
            // YurtHub empties the whole root when the cloud changed; only what the hub made
            // goes here, never the user's bootstrap file.
            let servers: Vec<String> = config.servers.iter().map(|s| s.base.clone()).collect();
            let user_file = mode.bootstrap_file.as_deref();
            let bootstrap_ca = user_file
                .and_then(|p| crate::config::kubeconfig::load(p).ok())
                .and_then(|k| k.ca_pem);
            match root.forget_stale(&servers, bootstrap_ca.as_deref(), user_file) {
                Ok(removed) if !removed.is_empty() => log::info!(
                    "the cloud changed since the hub last joined: removed {removed:?} from {}",
                    config.root_dir.display()
                ),
                Ok(_) => {}
                Err(e) => log::warn!("cannot clean {}: {e}", config.root_dir.display()),
            }
            let material = root.read_ca().and_then(|ca| {
                let stored = root.load_cert(CertKind::Client)?;
                material(&ca, &stored.identity)
                    .map_err(|e| log::warn!("the stored client certificate is unusable: {e}"))
                    .ok()
            });
            (material, None)
        }
        IdentitySource::Kubelet(files) => match kubelet::read(files) {
            Ok(material) => (Some(material), None),
            Err(e) => {
                log::error!("{e}");
                (None, None)
            }
        },
    }
}

/// What the identity threads act on.
pub(crate) struct Parts {
    /// The cloud client whose TLS material they replace.
    pub upstream: Arc<Upstream>,
    /// The HTTPS port's certificate.
    pub serving: Arc<ServingCert>,
    /// What readyz and `/v1/token` see.
    pub state: Arc<IdentityState>,
    /// Called once, when the first serving certificate is installed: opens the HTTPS port.
    pub on_first_serving_cert: Box<dyn FnOnce() + Send>,
}

/// Starts the threads that keep the hub's certificates: the client certificate's (token and
/// kubeletcertificate modes) and the serving certificate's. They end when `stop` closes.
pub(crate) fn start(
    config: &Config,
    parts: Parts,
    stop: &Receiver<()>,
) -> Result<(), StartupError> {
    let root = Arc::new(RootDir::new(config.root_dir.clone()));
    let servers: Arc<[String]> = config.servers.iter().map(|s| s.base.clone()).collect();
    let Parts {
        upstream,
        serving,
        state,
        on_first_serving_cert,
    } = parts;

    // Who the serving certificate's CSR is sent as: the client identity of the moment.
    let api: Arc<dyn Fn() -> Result<ApiClient, PkiError> + Send + Sync> = match &config.identity {
        IdentitySource::Kubeconfig { tls, token } => {
            state.client_installed(tls.client_not_after());
            let ca: Vec<u8> = tls
                .roots
                .iter()
                .flat_map(|c| csr::pem("CERTIFICATE", c.as_ref()).into_bytes())
                .collect();
            // `pki/ca.crt` as the other modes write it, so that HTTPS clients of the hub
            // verify it with the same file whatever the mode (issue 35); rewritten only when
            // the kubeconfig's CA changed. Not fatal: the hub works without it.
            if root.read_ca().as_deref() != Some(ca.as_slice())
                && let Err(e) = root.write_ca(&ca)
            {
                log::warn!(
                    "cannot write {}: {e}; HTTPS clients must take the CA from the kubeconfig",
                    root.ca_file().display()
                );
            }
            let (servers, client, token) =
                (Arc::clone(&servers), tls.client.clone(), token.clone());
            Arc::new(move || {
                // A tokenFile is read at each use: projected tokens rotate.
                let auth = match (&client, &token) {
                    (Some(id), _) => Auth::Certificate(id.clone()),
                    (None, Some(token)) => Auth::Token(token_text(token)?),
                    // Refused by config validation.
                    (None, None) => return Err(Missing::KubeconfigUser.into()),
                };
                ApiClient::new(&reachable(&servers)?, &ca, auth)
            })
        }
        IdentitySource::Token(mode) => {
            let ctx = bootstrap::TokenContext {
                root: Arc::clone(&root),
                servers: Arc::clone(&servers),
                upstream: Arc::clone(&upstream),
                state: Arc::clone(&state),
                template: client_template(config, mode.signer),
                signer: mode.signer,
                probe_timeout: config.heartbeat.timeout,
            };
            let api = ctx.api_as_hub();
            let wake = state.enable_token_updates(Box::new(bootstrap::TokenUpdates::new(
                Arc::clone(&root),
                Arc::clone(&servers),
                mode,
            )));
            let (mode, stop) = (mode.clone(), stop.clone());
            spawn("client-certificate", move || ctx.run(mode, &wake, &stop))?;
            api
        }
        IdentitySource::Kubelet(files) => {
            let watch = kubelet::Watch::new(
                files.clone(),
                Arc::clone(&upstream),
                Arc::clone(&state),
                config.heartbeat.timeout,
            );
            let api = watch.api(Arc::clone(&servers));
            let stop = stop.clone();
            spawn("kubelet-certificate", move || watch.run(&stop))?;
            api
        }
    };

    let template = serving_template(config);
    let stop = stop.clone();
    spawn("serving-certificate", move || {
        renew::serving(
            &root,
            &api,
            template,
            &serving,
            &state,
            on_first_serving_cert,
            &stop,
        )
    })?;
    Ok(())
}

/// The client certificate's subject: YurtHub's, or the kubelet signer's.
fn client_template(config: &Config, signer: ClientSigner) -> CsrTemplate {
    let mut organizations: Vec<String> = match signer {
        ClientSigner::ApiserverClient => {
            HUB_ORGANIZATIONS.iter().map(|o| (*o).to_owned()).collect()
        }
        // kube-controller-manager approves this signer only for O exactly system:nodes.
        ClientSigner::ApiserverClientKubelet => vec!["system:nodes".to_owned()],
    };
    if signer == ClientSigner::ApiserverClient {
        for org in &config.hub_cert_organizations {
            if !organizations.contains(org) {
                organizations.push(org.clone());
            }
        }
    }
    CsrTemplate {
        common_name: format!("system:node:{}", config.node_name),
        organizations,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
    }
}

/// The serving certificate's subject and the names it must hold but the `kubernetes`
/// Service's cluster IP, which is asked of the cloud when the request is made.
pub(crate) fn serving_template(config: &Config) -> CsrTemplate {
    let mut ips: Vec<IpAddr> = Vec::new();
    let candidates = [
        config.node_ip,
        config.dummy_if.as_ref().map(|d| d.ip),
        Some(config.proxy_addr.ip()),
        Some(config.serve_addr.ip()),
        Some(config.proxy_secure_addr.ip()),
    ];
    // 0.0.0.0 names no address a client could check.
    for ip in candidates.into_iter().flatten() {
        if !ip.is_unspecified() && !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    CsrTemplate {
        common_name: format!("system:node:{}", config.node_name),
        organizations: vec!["system:nodes".to_owned()],
        dns_names: SERVING_DNS_NAMES.iter().map(|n| (*n).to_owned()).collect(),
        ip_addresses: ips,
    }
}

/// Puts new TLS material to use. When no server is healthy (no credentials until now, or an
/// expired certificate the cloud refused), they are probed at once rather than after the
/// checkers' next rounds, so the hub goes online as soon as it can.
fn install_tls(
    upstream: &Upstream,
    tls: &TlsMaterial,
    probe_timeout: Duration,
) -> Result<(), PkiError> {
    upstream.set_tls(tls).map_err(PkiError::ClientKey)?;
    if !upstream.backends().any_healthy() {
        crate::health::probe_all_once(upstream.backends(), upstream, probe_timeout);
    }
    Ok(())
}

/// TLS material from the CA bundle's PEM and a client identity already checked when it was
/// read (`tls::identity`): only the CA is parsed here.
fn material(ca_pem: &[u8], identity: &ClientIdentity) -> Result<TlsMaterial, StartupError> {
    let mut material = tls::load(ca_pem, None)?;
    material.client = Some(identity.clone());
    Ok(material)
}

/// The bearer token of a kubeconfig, read now when it is a file.
fn token_text(token: &Token) -> Result<String, PkiError> {
    match token {
        Token::Inline(text) => Ok(text.clone()),
        Token::File(path) => std::fs::read_to_string(path)
            .map(|t| t.trim().to_owned())
            .map_err(|source| PkiError::Read {
                file: IdentityFile::TokenFile,
                path: path.clone(),
                source,
            }),
    }
}

/// The first server that accepts a TCP connection within [`DIAL_TIMEOUT`], as YurtHub picks
/// the server for its CSRs; with one server, that one without a dial.
pub(crate) fn reachable(servers: &[String]) -> Result<String, PkiError> {
    discovery::endpoint(servers, DIAL_TIMEOUT)
        .map_err(|(server, why)| PkiError::NoServer { server, why })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A path in the temp dir that no file has.
    fn nowhere(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tinyhub-pki-{name}-{}-absent", std::process::id()))
    }

    #[test]
    fn an_unreadable_token_file_is_named_with_its_io_error() {
        let path = nowhere("token");
        match token_text(&Token::File(path.clone())) {
            Err(PkiError::Read {
                file: IdentityFile::TokenFile,
                path: named,
                source,
            }) => {
                assert_eq!(named, path);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kubelets_files_are_named_by_what_failed() {
        let files = crate::config::KubeletFiles {
            kubeconfig: nowhere("kubelet-conf"),
            ca: nowhere("kubelet-ca"),
            cert: nowhere("kubelet-cert"),
        };
        let err = kubelet::read(&files).expect_err("no files");
        assert!(
            matches!(&err, PkiError::Read { file: IdentityFile::KubeletCa, path, .. } if *path == files.ca),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("kubeletcertificate mode: the cluster CA "),
            "{err}"
        );
    }
}
