//! The renewal loop both of the hub's certificates share, with client-go's certificate
//! manager rules as YurtHub uses them: renew at a uniformly random 70–90 % of the lifetime,
//! at once when there is no certificate or it no longer fits its template; after a failure
//! wait 2 s doubling (±10 %) for five attempts, then every 32 s. A request is a new P-256
//! key and a CSR, waited for while it is pending (see [`CSR_WAIT`]); the issued certificate
//! is stored under `--root-dir` before it is used, so a restart picks it up.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, TryRecvError, select};
use ring::rand::{SecureRandom, SystemRandom};

use super::csr::{self, CsrTemplate, KeyPair};
use super::csr_api::{self, ApiClient, CsrSpec};
use super::error::{Missing, PkiError};
use super::files::{CertKind, RootDir, StoredCert};
use super::state::IdentityState;
use crate::metrics::{METRICS, Metrics};
use crate::server::tls::ServingCert;
use crate::tls;
use crate::x509::{self, CertInfo};

/// How long one CSR may wait for its certificate. client-go gives up after 15 minutes and
/// sends a new CSR; a CSR nobody approves (a cluster without yurt-manager, for the serving
/// certificate) would then pile up ~100 objects a day per node. A pending one is waited for
/// until kube-controller-manager's cleaner removes it (24 h), then sent again.
const CSR_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Longest single sleep: the wall clock is looked at again after it, since a router without
/// a real-time clock may jump by years when NTP first answers.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Which certificate a loop keeps, and how it is requested.
pub(super) struct Renewal {
    /// Where it is stored.
    pub kind: CertKind,
    /// `spec.signerName`.
    pub signer: &'static str,
    /// `spec.usages`.
    pub usages: &'static [&'static str],
    /// For log lines: "client certificate", "serving certificate".
    pub what: &'static str,
}

/// The client certificate's usages (YurtHub's; yurt-manager approves exactly these).
pub(super) const CLIENT_USAGES: &[&str] = &["key encipherment", "digital signature", "client auth"];
/// The serving certificate's usages.
const SERVING_USAGES: &[&str] = &["key encipherment", "digital signature", "server auth"];

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WaitEnd {
    /// Its time passed.
    Elapsed,
    /// Something asked for a new attempt now (a new bootstrap token).
    Woken,
    /// The hub is shutting down.
    Stopped,
}

/// Waits up to `d` (at most [`MAX_SLEEP`]), for `wake` or for `stop` to close. The stack
/// pages the attempt before went through (a TLS handshake, a key made and signed) go back
/// first: a renewal loop spends nearly all its life here.
pub(super) fn wait(d: Duration, wake: &Receiver<()>, stop: &Receiver<()>) -> WaitEnd {
    crate::alloc::trim_stack();
    select! {
        recv(stop) -> _ => WaitEnd::Stopped,
        recv(wake) -> msg => match msg {
            Ok(()) => WaitEnd::Woken,
            // Nobody can wake this loop any more: wait for the time or the stop alone.
            Err(_) if csr_api::pause(stop, d.min(MAX_SLEEP)) => WaitEnd::Stopped,
            Err(_) => WaitEnd::Elapsed,
        },
        default(d.min(MAX_SLEEP)) => WaitEnd::Elapsed,
    }
}

/// A uniform random fraction in [0, 1).
fn random_fraction() -> f64 {
    let mut bytes = [0u8; 4];
    // ring's system random reads getrandom(2); if even that fails, a fixed midpoint keeps
    // the schedule sane.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

/// When to renew a certificate valid from `not_before` to `not_after`: at `0.7 + 0.2 × r`
/// of its lifetime (`r` in [0, 1)).
pub(super) fn renew_at(not_before: SystemTime, not_after: SystemTime, r: f64) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_before + lifetime.mul_f64(0.7 + 0.2 * r.clamp(0.0, 1.0))
}

/// The wait after `failures` failed attempts (1 = the first): 2 s, 4 s, 8 s, 16 s, 32 s,
/// then 32 s for ever; `r` in [0, 1) spreads each by ±10 %.
pub(super) fn backoff(failures: u32, r: f64) -> Duration {
    let base = 2u64 << failures.saturating_sub(1).min(4);
    Duration::from_secs(base).mul_f64(0.9 + 0.2 * r.clamp(0.0, 1.0))
}

/// The certificate still fits what the hub would ask for now: the same CN and
/// organizations, and every name the template wants (a new `--node-ip` asks for a new
/// serving certificate).
pub(super) fn satisfies(info: &CertInfo, template: &CsrTemplate) -> bool {
    let same_orgs = info.organizations.len() == template.organizations.len()
        && template
            .organizations
            .iter()
            .all(|o| info.organizations.contains(o));
    info.common_name.as_deref() == Some(template.common_name.as_str())
        && same_orgs
        && template
            .dns_names
            .iter()
            .all(|n| info.dns_names.contains(n))
        && template
            .ip_addresses
            .iter()
            .all(|ip| info.ip_addresses.contains(ip))
}

/// The fields of a stored certificate's leaf.
pub(super) fn info(stored: &StoredCert) -> Option<CertInfo> {
    x509::parse(stored.identity.chain.first()?.as_ref())
}

/// A certificate the hub got: its chain and key, and where it is stored (`None`: the store
/// failed, as on a full disk; it is used from memory and stored again later).
struct Issued {
    stored: StoredCert,
    info: CertInfo,
    unsaved: Option<(Vec<u8>, String)>,
}

/// One request: a new key, a CSR, the wait for its certificate, and its storing.
fn request(
    root: &RootDir,
    renewal: &Renewal,
    template: &CsrTemplate,
    api: &ApiClient,
    stop: &Receiver<()>,
) -> Result<Issued, PkiError> {
    let key = KeyPair::generate()?;
    let request_pem = csr::request_pem(&key, template)?;
    let spec = CsrSpec {
        request_pem: &request_pem,
        signer: renewal.signer,
        usages: renewal.usages,
    };
    let chain = csr_api::request_certificate(api, &spec, CSR_WAIT, stop).map_err(PkiError::Csr)?;
    let key_pem = key.private_key_pem();
    let what = renewal.what;
    let identity = tls::identity(&chain, key_pem.as_bytes())
        .map_err(|source| PkiError::IssuedUnusable { what, source })?;
    let info =
        x509::parse(identity.chain[0].as_ref()).ok_or(PkiError::IssuedUnparsable { what })?;
    if SystemTime::now() >= info.not_after {
        return Err(PkiError::IssuedExpired {
            what,
            not_after: info.not_after,
        });
    }
    let (path, unsaved) = match root.store_cert(renewal.kind, &chain, &key_pem, SystemTime::now()) {
        Ok(path) => (path, None),
        Err(e) => {
            log::warn!(
                "cannot store the new {}: {e}; using it from memory and storing it again later",
                renewal.what
            );
            (PathBuf::new(), Some((chain, key_pem)))
        }
    };
    Ok(Issued {
        stored: StoredCert { identity, path },
        info,
        unsaved,
    })
}

/// What a renewal loop is given.
pub(super) struct Hooks<'a> {
    /// Whether a request may be made now, or why not (the serving certificate waits for a
    /// client certificate); not a failure.
    pub ready: &'a dyn Fn() -> Result<(), PkiError>,
    /// The template to request with now (the serving one asks the cloud for an address).
    pub template: &'a mut dyn FnMut() -> Result<CsrTemplate, PkiError>,
    /// The template's fixed part, to judge a stored certificate by without the cloud.
    pub fixed: &'a CsrTemplate,
    /// Who to send the CSR as, and where.
    pub api: &'a dyn Fn() -> Result<ApiClient, PkiError>,
    /// Puts a certificate to use.
    pub install: &'a mut dyn FnMut(&StoredCert, &CertInfo) -> Result<(), PkiError>,
    /// Records why getting one failed (readyz shows it).
    pub problem: &'a dyn Fn(String),
}

/// The certificate a loop has put to use, and when to renew it (drawn once per
/// certificate, so a fleet spreads its renewals over the whole 70–90 % window).
struct InUse {
    leaf: Vec<u8>,
    not_after: SystemTime,
    due: SystemTime,
}

impl InUse {
    fn new(stored: &StoredCert, info: &CertInfo, renew_now: bool) -> InUse {
        InUse {
            leaf: stored.identity.chain[0].as_ref().to_vec(),
            not_after: info.not_after,
            due: if renew_now {
                SystemTime::now()
            } else {
                renew_at(info.not_before, info.not_after, random_fraction())
            },
        }
    }
}

/// Keeps one certificate until `stop` closes; `wake` asks for an attempt now. A stored
/// certificate newer than the one in use (at start, after a restart) is put to use first.
pub(super) fn run(
    root: &RootDir,
    renewal: &Renewal,
    mut hooks: Hooks<'_>,
    wake: &Receiver<()>,
    stop: &Receiver<()>,
) {
    let counter = match renewal.kind {
        CertKind::Client => &METRICS.client_certificate_rotations,
        CertKind::Serving => &METRICS.serving_certificate_rotations,
    };
    let mut in_use: Option<InUse> = None;
    // A stored certificate that could not be put to use, said once.
    let mut refused: Option<Vec<u8>> = None;
    let mut unsaved: Option<(Vec<u8>, String)> = None;
    let mut failures = 0u32;
    loop {
        if let Some((chain, key_pem)) = &unsaved {
            match root.store_cert(renewal.kind, chain, key_pem, SystemTime::now()) {
                Ok(_) => unsaved = None,
                Err(e) => (hooks.problem)(format!("cannot store the {}: {e}", renewal.what)),
            }
        }
        adopt_stored(
            root,
            renewal,
            &mut hooks,
            (&mut in_use, &mut refused),
            counter,
        );
        let now = SystemTime::now();
        let due = match &in_use {
            Some(u) if now < u.not_after => u.due,
            _ => now,
        };
        if let Ok(left) = due.duration_since(now)
            && !left.is_zero()
        {
            match wait(left, wake, stop) {
                WaitEnd::Stopped => return,
                // Elapsed at most MAX_SLEEP: look at the clock again.
                WaitEnd::Elapsed | WaitEnd::Woken => continue,
            }
        }
        if let Err(why) = (hooks.ready)() {
            (hooks.problem)(why.to_string());
            if wait(Duration::from_secs(1), wake, stop) == WaitEnd::Stopped {
                return;
            }
            continue;
        }
        // Said while the CSR waits for approval, which may take minutes.
        (hooks.problem)(format!(
            "a {} was requested from signer {} and is not issued yet",
            renewal.what, renewal.signer
        ));
        let attempt = attempt(root, renewal, &mut hooks, stop);
        match attempt {
            Ok(issued) => {
                failures = 0;
                in_use = Some(InUse::new(&issued.stored, &issued.info, false));
                if issued.unsaved.is_some() {
                    unsaved = issued.unsaved;
                    (hooks.problem)(format!(
                        "the {} could not be stored under --root-dir (see the log)",
                        renewal.what
                    ));
                }
                Metrics::inc(counter);
                log::info!(
                    "new {} installed: valid {} to {}",
                    renewal.what,
                    crate::logging::time_rfc3339(issued.info.not_before),
                    crate::logging::time_rfc3339(issued.info.not_after),
                );
            }
            Err(why) => {
                // A request the shutdown cut short is no failure to report.
                if matches!(stop.try_recv(), Err(TryRecvError::Disconnected)) {
                    return;
                }
                failures = failures.saturating_add(1);
                let pause = backoff(failures, random_fraction());
                log::warn!(
                    "cannot get a {}: {why}; next attempt in {:.0?}",
                    renewal.what,
                    pause
                );
                (hooks.problem)(why.to_string());
                if wait(pause, wake, stop) == WaitEnd::Stopped {
                    return;
                }
            }
        }
    }
}

/// Puts to use a stored certificate newer than the one in use (at start, after a restart,
/// or one a request stored): counted, one line. One that cannot be used is said once and
/// remembered in `refused`.
fn adopt_stored(
    root: &RootDir,
    renewal: &Renewal,
    hooks: &mut Hooks<'_>,
    (in_use, refused): (&mut Option<InUse>, &mut Option<Vec<u8>>),
    counter: &AtomicU64,
) {
    if let Some(stored) = root.load_cert(renewal.kind)
        && let Some(info) = info(&stored)
        && SystemTime::now() < info.not_after
        && in_use.as_ref().is_none_or(|u| {
            u.leaf != stored.identity.chain[0].as_ref() && info.not_after > u.not_after
        })
        && refused.as_deref() != Some(stored.identity.chain[0].as_ref())
    {
        match (hooks.install)(&stored, &info) {
            Ok(()) => {
                // One that no longer fits (other organizations, a new node IP) is used
                // while a new one is requested.
                *in_use = Some(InUse::new(&stored, &info, !satisfies(&info, hooks.fixed)));
                Metrics::inc(counter);
                log::info!(
                    "using the stored {} {}, valid until {}",
                    renewal.what,
                    stored.path.display(),
                    crate::logging::time_rfc3339(info.not_after)
                );
            }
            Err(e) => {
                log::warn!(
                    "the stored {} {} cannot be used: {e}; requesting a new one",
                    renewal.what,
                    stored.path.display()
                );
                *refused = Some(stored.identity.chain[0].as_ref().to_vec());
            }
        }
    }
}

/// One request for a new certificate, put to use once issued.
fn attempt(
    root: &RootDir,
    renewal: &Renewal,
    hooks: &mut Hooks<'_>,
    stop: &Receiver<()>,
) -> Result<Issued, PkiError> {
    (hooks.template)().and_then(|template| {
        let api = (hooks.api)()?;
        let issued = request(root, renewal, &template, &api, stop)?;
        (hooks.install)(&issued.stored, &issued.info)?;
        if !satisfies(&issued.info, &template) {
            log::warn!(
                "the issued {} differs from the request (subject or names changed by the signer); it is used until its renewal",
                renewal.what
            );
        }
        Ok(issued)
    })
}

/// The serving certificate's loop: a stored one that is still valid is used at once (the
/// HTTPS port serves after an offline restart); a new one is requested once the hub has a
/// client credential. The first one installed opens the HTTPS port.
pub(super) fn serving(
    root: &RootDir,
    api: &Arc<dyn Fn() -> Result<ApiClient, PkiError> + Send + Sync>,
    fixed: CsrTemplate,
    serving: &ServingCert,
    state: &IdentityState,
    on_first: Box<dyn FnOnce() + Send>,
    stop: &Receiver<()>,
) {
    let mut on_first = Some(on_first);
    let mut install = |stored: &StoredCert, info: &CertInfo| -> Result<(), PkiError> {
        serving
            .set(
                stored.identity.chain.clone(),
                stored.identity.key.clone_key(),
            )
            .map_err(PkiError::ServingCert)?;
        state.serving_installed(info.not_after);
        if let Some(open) = on_first.take() {
            open();
        }
        Ok(())
    };
    let never = crossbeam_channel::never();
    let ready = || {
        if state.has_client() {
            Ok(())
        } else {
            Err(Missing::WaitingForClient.into())
        }
    };
    // The `kubernetes` Service's cluster IP, asked once: pods reach the hub by it.
    let mut cluster_ip: Option<IpAddr> = None;
    let mut template = || -> Result<CsrTemplate, PkiError> {
        let ip = match cluster_ip {
            Some(ip) => ip,
            None => {
                let service = (api)()?
                    .get_json(
                        "/api/v1/namespaces/default/services/kubernetes",
                        Duration::from_secs(10),
                    )
                    .map_err(PkiError::ServiceLookup)?;
                let ip = service["spec"]["clusterIP"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or(PkiError::NoClusterIp)?;
                *cluster_ip.insert(ip)
            }
        };
        let mut t = CsrTemplate {
            common_name: fixed.common_name.clone(),
            organizations: fixed.organizations.clone(),
            dns_names: fixed.dns_names.clone(),
            ip_addresses: vec![ip],
        };
        for other in &fixed.ip_addresses {
            if !t.ip_addresses.contains(other) {
                t.ip_addresses.push(*other);
            }
        }
        Ok(t)
    };
    let api_call = || (api)();
    let renewal = Renewal {
        kind: CertKind::Serving,
        signer: "kubernetes.io/kubelet-serving",
        usages: SERVING_USAGES,
        what: "serving certificate",
    };
    let problem = |why: String| state.serving_problem(why);
    run(
        root,
        &renewal,
        Hooks {
            ready: &ready,
            template: &mut template,
            fixed: &fixed,
            api: &api_call,
            install: &mut install,
            problem: &problem,
        },
        &never,
        stop,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_request_keeps_the_clouds_status() {
        use super::super::csr_api::Auth;
        use super::super::csr_api::test_cloud::{self, Reply};
        use super::super::error::CsrError;
        let cloud = test_cloud::start(|_| {
            Reply::Json(
                403,
                r#"{"kind":"Status","message":"bootstrap tokens may not ask for this"}"#.into(),
            )
        });
        let api = ApiClient::new(
            &cloud.url,
            cloud.ca_pem.as_bytes(),
            Auth::Token("abcdef.0123456789abcdef".into()),
        )
        .expect("client");
        // Refused before anything is stored: the root dir is never made.
        let root = RootDir::new(std::env::temp_dir().join(format!(
            "tinyhub-renew-refused-{}-absent",
            std::process::id()
        )));
        let renewal = Renewal {
            kind: CertKind::Client,
            signer: "kubernetes.io/kube-apiserver-client",
            usages: CLIENT_USAGES,
            what: "client certificate",
        };
        let template = CsrTemplate {
            common_name: "system:node:a".into(),
            ..CsrTemplate::default()
        };
        let (_keep, stop) = crossbeam_channel::bounded::<()>(0);
        let Err(err) = request(&root, &renewal, &template, &api, &stop) else {
            panic!("issued");
        };
        match &err {
            PkiError::Csr(CsrError::Refused { status, message }) => {
                assert_eq!(*status, 403);
                assert_eq!(message, "bootstrap tokens may not ask for this");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("(403)"), "{err}");
    }

    #[test]
    fn renewal_falls_in_70_to_90_percent_of_the_lifetime() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let end = start + Duration::from_secs(1000);
        assert_eq!(renew_at(start, end, 0.0), start + Duration::from_secs(700));
        assert_eq!(renew_at(start, end, 0.5), start + Duration::from_secs(800));
        let late = renew_at(start, end, 0.999_999);
        assert!(late < start + Duration::from_secs(900) && late > start + Duration::from_secs(899));
        // A certificate that ends before it begins is due at once.
        assert_eq!(renew_at(end, start, 0.5), end);
        for _ in 0..100 {
            let at = renew_at(start, end, random_fraction());
            assert!(
                at >= start + Duration::from_secs(700) && at < start + Duration::from_secs(900)
            );
        }
    }

    #[test]
    fn backoff_doubles_from_two_seconds_to_thirty_two() {
        let secs: Vec<u64> = (1..=7).map(|n| backoff(n, 0.5).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 32, 32]);
        assert_eq!(backoff(1, 0.0), Duration::from_millis(1800));
        assert!(backoff(5, 0.999) < Duration::from_millis(35_200));
    }

    #[test]
    fn a_certificate_that_no_longer_fits_is_renewed() {
        let t = CsrTemplate {
            common_name: "system:node:a".into(),
            organizations: vec!["openyurt:yurthub".into(), "system:nodes".into()],
            dns_names: vec!["kubernetes".into()],
            ip_addresses: vec!["10.0.0.5".parse().unwrap()],
        };
        let now = SystemTime::now();
        let fits = CertInfo {
            not_before: now,
            not_after: now,
            common_name: Some("system:node:a".into()),
            organizations: vec!["system:nodes".into(), "openyurt:yurthub".into()],
            dns_names: vec!["kubernetes".into(), "kubernetes.default".into()],
            ip_addresses: vec!["10.96.0.1".parse().unwrap(), "10.0.0.5".parse().unwrap()],
            spki_sha256: [0; 32],
        };
        assert!(satisfies(&fits, &t));
        let mut other = fits.clone();
        other.organizations.push("openyurt:tenant:x".into());
        assert!(
            !satisfies(&other, &t),
            "an organization was removed from the flags"
        );
        let mut other = fits.clone();
        other.common_name = Some("system:node:b".into());
        assert!(!satisfies(&other, &t), "the node was renamed");
        let mut other = fits;
        other.ip_addresses.pop();
        assert!(!satisfies(&other, &t), "a new node IP");
    }
}
