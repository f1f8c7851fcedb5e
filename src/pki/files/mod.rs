//! What lives under `--root-dir` (default `/var/lib/yurthub`), laid out exactly as YurtHub
//! lays it out so that `yurtadm`, scripts and a migration from YurtHub keep working:
//!
//! - `bootstrap-hub.conf`: the bootstrap kubeconfig (token) from join-token discovery;
//! - `yurthub.conf`: the hub's own kubeconfig, client certificate by file;
//! - `pki/ca.crt`: the cluster CA;
//! - `pki/yurthub-*.pem`, `pki/yurthub-server-*.pem`: client-go `FileStore` pairs (dated
//!   files holding chain and key, `-current.pem` a symlink to the newest).
//!
//! Every write is atomic (a temporary file in the same directory, fsynced, renamed, the
//! directory fsynced): a kill at any point leaves the old file or the new one. Files are
//! 0600, directories this module creates 0700.

//!
//! Files by job: `atomic.rs` the atomic writes and bounded reads every file goes through,
//! `dated.rs` client-go's dated pair files and their `-current` links, `kubeconfigs.rs` the two
//! kubeconfigs; this file the layout, `ca.crt`, and what is forgotten when the cluster changed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::kubeconfig;

mod atomic;
mod dated;
mod kubeconfigs;

use atomic::{make_dirs, read_limited, sync_dir, temp_target, with_path, write_atomic};
pub(crate) use dated::{CertKind, StoredCert};

/// Dated certificate files kept besides the current one: the previous pair stays for a
/// manual roll-back. YurtHub (client-go) never deletes any; on a router's flash we do.
pub(crate) const KEEP: usize = 1;
/// A stored pair is a few kilobytes; anything much larger is not one and is not read whole.
const MAX_PEM: u64 = 1 << 20;

/// The hub's working directory (`--root-dir`).
#[derive(Clone, Debug)]
pub(crate) struct RootDir {
    root: PathBuf,
}

impl RootDir {
    /// The layout under `root`. A relative root is made absolute now: the paths written
    /// into `yurthub.conf` and the symlinks must not depend on the working directory.
    pub(crate) fn new(root: PathBuf) -> RootDir {
        let root = std::path::absolute(&root).unwrap_or(root);
        RootDir { root }
    }

    /// `<root>/bootstrap-hub.conf`.
    pub(crate) fn bootstrap_conf(&self) -> PathBuf {
        self.root.join("bootstrap-hub.conf")
    }

    /// `<root>/yurthub.conf`.
    pub(crate) fn hub_conf(&self) -> PathBuf {
        self.root.join("yurthub.conf")
    }

    /// `<root>/pki`.
    fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }

    /// `<root>/pki/ca.crt`.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.pki().join("ca.crt")
    }

    /// `<root>/pki/yurthub-current.pem` or `<root>/pki/yurthub-server-current.pem`.
    pub(crate) fn current_cert(&self, kind: CertKind) -> PathBuf {
        self.pki().join(format!("{}-current.pem", kind.prefix()))
    }

    fn updated_cert(&self, kind: CertKind) -> PathBuf {
        self.pki().join(format!("{}-updated.pem", kind.prefix()))
    }

    /// Writes `pki/ca.crt`.
    pub(crate) fn write_ca(&self, pem: &[u8]) -> io::Result<()> {
        make_dirs(&self.pki())?;
        write_atomic(&self.ca_file(), pem)
    }

    /// `pki/ca.crt`, or None when missing (or unreadable, with a warning).
    pub(crate) fn read_ca(&self) -> Option<Vec<u8>> {
        let path = self.ca_file();
        match read_limited(&path) {
            // An empty or torn file (a power cut, a hand edit) is as good as none: it is
            // written again from the bootstrap kubeconfig.
            Ok(bytes) if crate::tls::load(&bytes, None).is_err() => {
                log::warn!(
                    "{} holds no usable CA certificate; it will be written again",
                    path.display()
                );
                None
            }
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                log::warn!("cannot read {}: {e}", path.display());
                None
            }
        }
    }

    /// §3.3's clean-up, done right: when `yurthub.conf` exists and its server host is not the
    /// host of any of `servers` (an empty list: no opinion), or its CA differs from `ca_pem`
    /// (when given), removes only what the hub generated: `yurthub.conf`,
    /// `pki/yurthub-*.pem` (serving pairs included), `pki/ca.crt`, the hub's leftover temporary
    /// files, and `bootstrap-hub.conf` unless it is `user_bootstrap_file`. Never the user's
    /// bootstrap file, never the cache. A `yurthub.conf` that cannot be read as a kubeconfig
    /// says nothing about the server: nothing is removed (with a warning). Returns what was
    /// removed, for one log line.
    pub(crate) fn forget_stale(
        &self,
        servers: &[String],
        ca_pem: Option<&[u8]>,
        user_bootstrap_file: Option<&Path>,
    ) -> io::Result<Vec<PathBuf>> {
        let conf = self.hub_conf();
        let text = match fs::read_to_string(&conf) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(with_path(&conf, "read")(e)),
        };
        // The files it names may be gone (`rm pki/*` is the classic fix): then its sole
        // cluster still says which server and CA it was for.
        let old = match kubeconfig::parse(&text, &self.root) {
            Ok(old) => Some((old.server, old.ca_pem)),
            Err(e) => sole_cluster(&text).or_else(|| {
                log::warn!(
                    "{}: {e}; cannot tell whether it is for this cluster, keeping it",
                    conf.display()
                );
                None
            }),
        };
        let Some((old_server, old_ca)) = old else {
            return Ok(Vec::new());
        };
        let server_changed = match old_server.as_deref().and_then(host_of) {
            Some(old_host) => {
                !servers.is_empty()
                    && !servers
                        .iter()
                        .any(|s| host_of(s).is_some_and(|h| h == old_host))
            }
            None => false,
        };
        let ca_changed = ca_pem.is_some_and(|want| !same_ca(old_ca.as_deref(), want));
        if !server_changed && !ca_changed {
            return Ok(Vec::new());
        }

        let pki = self.pki();
        let mut doomed = Vec::new();
        generated_files(
            &pki,
            |n| (n.starts_with("yurthub-") && n.ends_with(".pem")) || n == "ca.crt",
            &mut doomed,
        )?;
        generated_files(
            &self.root,
            |n| n == "bootstrap-hub.conf" || n == "yurthub.conf",
            &mut doomed,
        )?;
        let bootstrap = self.bootstrap_conf();
        if let Some(user) = user_bootstrap_file
            && same_file(user, &bootstrap)
        {
            doomed.retain(|p| p != &bootstrap);
        }
        doomed.retain(|p| p != &conf);
        doomed.sort();
        // yurthub.conf goes last: a kill half-way leaves it, and the next start finishes.
        doomed.push(conf);
        let mut removed = Vec::with_capacity(doomed.len());
        for path in doomed {
            match fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_path(&path, "remove")(e)),
            }
        }
        if fs::symlink_metadata(&pki).is_ok() {
            sync_dir(&pki)?;
        }
        sync_dir(&self.root)?;
        Ok(removed)
    }
}

/// Adds to `out` the entries of `dir` that `generated` names, and the temporary files of
/// interrupted writes of such names. A missing `dir` has none.
fn generated_files(
    dir: &Path,
    generated: impl Fn(&str) -> bool,
    out: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(with_path(dir, "list")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(with_path(dir, "list"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if generated(name) || temp_target(name).is_some_and(&generated) {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Server and inline CA of a kubeconfig's only cluster, read without the files it names.
fn sole_cluster(text: &str) -> Option<(Option<String>, Option<Vec<u8>>)> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).ok()?;
    let clusters = docs.first()?["clusters"].as_vec()?;
    let [only] = clusters.as_slice() else {
        return None;
    };
    let cluster = &only["cluster"];
    let server = cluster["server"].as_str().map(str::to_owned);
    let ca = match cluster["certificate-authority-data"].as_str() {
        Some(data) => Some(kubeconfig::base64_decode(data)?),
        None => None,
    };
    Some((server, ca))
}

/// The host of a server address (`https://host:port/path`, `host:port`, `[v6]:port`),
/// lower-cased.
fn host_of(server: &str) -> Option<String> {
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split_once(']')?.0
    } else {
        match hostport.rsplit_once(':') {
            // One colon: a port; more: a bare IPv6 address.
            Some((host, port))
                if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                host
            }
            _ => hostport,
        }
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Whether two CA bundles hold the same certificates (PEM layout aside).
fn same_ca(old: Option<&[u8]>, new: &[u8]) -> bool {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let Some(old) = old else { return false };
    let ders = |pem: &[u8]| {
        CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|v| !v.is_empty())
    };
    match (ders(old), ders(new)) {
        (Some(a), Some(b)) => a == b,
        _ => old == new,
    }
}

/// Whether two paths name the same file (or the same name, when it does not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::dated::{is_dated, timestamp};
    use super::*;
    use crate::config::kubeconfig::{Kubeconfig, Token, parse};

    /// A fresh directory removed again on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "tinyhub-files-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A self-signed certificate and its PKCS#8 key, as PEM.
    fn pair(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![cn.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The certificates of a PEM text, as a loaded pair's chain holds them.
    fn ders(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// 2026-12-02 03:04:05 UTC.
    fn at(extra_secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_180_645 + extra_secs)
    }

    #[test]
    fn stamps_are_client_go_s_layout() {
        assert_eq!(timestamp(1_796_180_645), "2026-12-02-03-04-05");
        assert_eq!(timestamp(0), "1970-01-01-00-00-00");
        assert!(is_dated("yurthub-2026-12-02-03-04-05.pem", "yurthub"));
        assert!(!is_dated(
            "yurthub-server-2026-12-02-03-04-05.pem",
            "yurthub"
        ));
        assert!(is_dated(
            "yurthub-server-2026-12-02-03-04-05.pem",
            "yurthub-server"
        ));
        assert!(!is_dated("yurthub-current.pem", "yurthub"));
        assert!(!is_dated(
            "yurthub-2026-12-02-03-04-05.pem.1.2.tmp",
            "yurthub"
        ));
    }

    #[test]
    fn hub_conf_is_yurthub_s_file_and_reads_back() {
        let tmp = TempDir::new("hubconf");
        let root = RootDir::new(tmp.0.join("root"));
        let (ca, _) = pair("ca");
        let (cert, key) = pair("system:node:n1");
        root.store_cert(CertKind::Client, cert.as_bytes(), &key, at(0))
            .unwrap();
        root.write_hub_conf("https://10.0.0.1:6443", ca.as_bytes())
            .unwrap();

        let text = fs::read_to_string(root.hub_conf()).unwrap();
        let current = tmp.0.join("root/pki/yurthub-current.pem");
        let golden = format!(
            "apiVersion: \"v1\"
clusters:
- cluster:
    certificate-authority-data: \"{ca64}\"
    server: \"https://10.0.0.1:6443\"
  name: \"default-cluster\"
contexts:
- context:
    cluster: \"default-cluster\"
    namespace: \"default\"
    user: \"default-auth\"
  name: \"default-context\"
current-context: \"default-context\"
kind: \"Config\"
preferences: {{}}
users:
- name: \"default-auth\"
  user:
    client-certificate: \"{cur}\"
    client-key: \"{cur}\"
",
            ca64 = STANDARD.encode(&ca),
            cur = current.display()
        );
        assert_eq!(text, golden);

        let k = parse(&text, &tmp.0).unwrap();
        let stored = fs::read(&current).unwrap();
        assert_eq!(k.server.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(k.ca_pem.as_deref(), Some(ca.as_bytes()));
        assert_eq!(k.client_cert_pem.as_deref(), Some(&stored[..]));
        assert_eq!(k.client_key_pem.as_deref(), Some(&stored[..]));
        assert!(k.token.is_none());
        // What the proxy does with it: the pair loads.
        crate::tls::load(&k.ca_pem.unwrap(), Some((&stored, &stored))).unwrap();

        assert_eq!(mode(&root.hub_conf()), 0o600);
        assert_eq!(mode(&tmp.0.join("root")), 0o700);
        assert_eq!(mode(&tmp.0.join("root/pki")), 0o700);
    }

    #[test]
    fn bootstrap_conf_is_yurtadm_s_file_and_reads_back() {
        let tmp = TempDir::new("bootconf");
        let root = RootDir::new(tmp.0.join("root"));
        let path = tmp.0.join("etc/hub/bootstrap.conf");
        let ca = b"-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n";
        root.write_bootstrap_conf(&path, "https://1.2.3.4:6443", ca, "abcdef.0123456789abcdef")
            .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let golden = format!(
            "apiVersion: \"v1\"
clusters:
- cluster:
    certificate-authority-data: \"{}\"
    server: \"https://1.2.3.4:6443\"
  name: \"kubernetes\"
contexts:
- context:
    cluster: \"kubernetes\"
    user: \"token-bootstrap-client\"
  name: \"token-bootstrap-client@kubernetes\"
current-context: \"token-bootstrap-client@kubernetes\"
kind: \"Config\"
preferences: {{}}
users:
- name: \"token-bootstrap-client\"
  user:
    token: \"abcdef.0123456789abcdef\"
",
            STANDARD.encode(ca)
        );
        assert_eq!(text, golden);
        let k = parse(&text, &tmp.0).unwrap();
        assert_eq!(k.server.as_deref(), Some("https://1.2.3.4:6443"));
        assert_eq!(k.ca_pem.as_deref(), Some(&ca[..]));
        assert_eq!(
            k.token,
            Some(Token::Inline("abcdef.0123456789abcdef".into()))
        );
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&tmp.0.join("etc")), 0o700);
        assert_eq!(mode(&tmp.0.join("etc/hub")), 0o700);
        // The default place is the root's.
        assert_eq!(root.bootstrap_conf(), tmp.0.join("root/bootstrap-hub.conf"));
    }

    #[test]
    fn odd_characters_cannot_break_the_yaml() {
        let tmp = TempDir::new("odd");
        let odd_root = tmp.0.join("r o'o\"t: #x\\y\u{2028}é\t");
        let root = RootDir::new(odd_root.clone());
        let server = "https://h:1/p?q=\"x\": #c\n- y\\z'\u{85}\u{feff}\r\u{1}";
        let token = "t: \"'\\\n#";
        let (ca, _) = pair("ca");
        let (cert, key) = pair("c");
        root.store_cert(CertKind::Client, cert.as_bytes(), &key, at(0))
            .unwrap();
        root.write_hub_conf(server, ca.as_bytes()).unwrap();
        let text = fs::read_to_string(root.hub_conf()).unwrap();
        let k: Kubeconfig = parse(&text, &tmp.0).unwrap();
        assert_eq!(k.server.as_deref(), Some(server));
        let stored = fs::read(root.current_cert(CertKind::Client)).unwrap();
        assert_eq!(k.client_cert_pem.as_deref(), Some(&stored[..]));

        let boot = root.bootstrap_conf();
        root.write_bootstrap_conf(&boot, server, ca.as_bytes(), token)
            .unwrap();
        let k = parse(&fs::read_to_string(&boot).unwrap(), &tmp.0).unwrap();
        assert_eq!(k.server.as_deref(), Some(server));
        assert_eq!(k.token, Some(Token::Inline(token.into())));
    }

    #[test]
    fn store_cert_rotates_and_prunes() {
        let tmp = TempDir::new("store");
        let root = RootDir::new(tmp.0.clone());
        let pki = tmp.0.join("pki");
        let (c1, k1) = pair("one");
        let (c2, k2) = pair("two");
        let (c3, k3) = pair("three");
        let (s1, sk1) = pair("serving");
        let serving = root
            .store_cert(CertKind::Serving, s1.as_bytes(), &sk1, at(0))
            .unwrap();
        let first = root
            .store_cert(CertKind::Client, c1.as_bytes(), &k1, at(0))
            .unwrap();
        // Twice in one second: a new name, still in client-go's layout.
        let second = root
            .store_cert(CertKind::Client, c2.as_bytes(), &k2, at(0))
            .unwrap();
        assert_eq!(first, pki.join("yurthub-2026-12-02-03-04-05.pem"));
        assert_eq!(second, pki.join("yurthub-2026-12-02-03-04-06.pem"));
        let current = root.current_cert(CertKind::Client);
        // client-go links to the absolute path of the dated file.
        assert_eq!(fs::read_link(&current).unwrap(), second);
        assert!(first.exists(), "KEEP keeps the previous pair");
        let loaded = root.load_cert(CertKind::Client).unwrap();
        assert_eq!(loaded.path, second);
        assert_eq!(loaded.identity.chain, ders(&c2));
        let file = fs::read_to_string(&second).unwrap();
        assert_eq!(file, format!("{c2}{k2}"));
        assert_eq!(mode(&second), 0o600);

        let third = root
            .store_cert(CertKind::Client, c3.as_bytes(), &k3, at(60))
            .unwrap();
        assert_eq!(fs::read_link(&current).unwrap(), third);
        assert!(!first.exists(), "older than KEEP: pruned");
        assert!(second.exists());
        assert!(serving.exists(), "the other kind is not pruned");
        assert_eq!(
            names(&pki),
            [
                "yurthub-2026-12-02-03-04-06.pem",
                "yurthub-2026-12-02-03-05-05.pem",
                "yurthub-current.pem",
                "yurthub-server-2026-12-02-03-04-05.pem",
                "yurthub-server-current.pem",
            ]
        );
        assert_eq!(
            root.load_cert(CertKind::Serving).unwrap().identity.chain,
            ders(&s1)
        );

        // A pair that does not belong together is refused and changes nothing.
        let err = root
            .store_cert(CertKind::Client, c1.as_bytes(), &k2, at(120))
            .unwrap_err();
        assert!(err.to_string().contains("do not belong together"), "{err}");
        assert_eq!(fs::read_link(&current).unwrap(), third);
        assert_eq!(names(&pki).len(), 5);
    }

    #[test]
    fn a_bad_current_pair_is_no_pair() {
        let tmp = TempDir::new("bad");
        let root = RootDir::new(tmp.0.clone());
        assert!(root.load_cert(CertKind::Client).is_none(), "missing");
        let (c1, k1) = pair("one");
        let (_, k2) = pair("two");
        let dated = root
            .store_cert(CertKind::Client, c1.as_bytes(), &k1, at(0))
            .unwrap();
        assert!(root.load_cert(CertKind::Client).is_some());

        fs::write(&dated, "garbage").unwrap();
        assert!(root.load_cert(CertKind::Client).is_none(), "garbage");
        fs::write(&dated, [0xff, 0xfe, 0]).unwrap();
        assert!(root.load_cert(CertKind::Client).is_none(), "binary");
        fs::write(&dated, format!("{c1}{k2}")).unwrap();
        assert!(root.load_cert(CertKind::Client).is_none(), "another key");
        fs::write(&dated, &c1).unwrap();
        assert!(root.load_cert(CertKind::Client).is_none(), "no key");
        fs::remove_file(&dated).unwrap();
        assert!(root.load_cert(CertKind::Client).is_none(), "dangling");
        // The next store replaces the dangling link.
        root.store_cert(CertKind::Client, c1.as_bytes(), &k1, at(9))
            .unwrap();
        assert!(root.load_cert(CertKind::Client).is_some());
    }

    /// `openssl ecparam -genkey -name prime256v1`: SEC1 with an `EC PARAMETERS` block first.
    const SEC1: &str = "-----BEGIN EC PARAMETERS-----
BggqhkjOPQMBBw==
-----END EC PARAMETERS-----
-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIOzQx97iOA6mA0dWi1lfVluAaUwhgFCGSoUvkfZRGo7boAoGCCqGSM49
AwEHoUQDQgAE6vhSK375kmwzuc2O7npxoD+d0p9dN96YSLx/1FXDKZyg5wIv3Hh1
dUnvw5Araq5EMj44yo0efqMpzEg64SJarQ==
-----END EC PRIVATE KEY-----
";
    /// The same key as PKCS#8 (`openssl pkcs8 -topk8 -nocrypt`), for rcgen to sign with.
    const SEC1_AS_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg7NDH3uI4DqYDR1aL
WV9WW4BpTCGAUIZKhS+R9lEajtuhRANCAATq+FIrfvmSbDO5zY7uenGgP53Sn103
3phIvH/UVcMpnKDnAi/ceHV1Se/DkCtqrkQyPjjKjR5+oynMSDrhIlqt
-----END PRIVATE KEY-----
";

    #[test]
    fn reads_a_pair_yurthub_wrote() {
        let tmp = TempDir::new("yurthub");
        let root = RootDir::new(tmp.0.clone());
        let pki = tmp.0.join("pki");
        fs::create_dir_all(&pki).unwrap();
        let key = rcgen::KeyPair::from_pem(SEC1_AS_PKCS8).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_params = rcgen::CertificateParams::new(vec!["ca".to_owned()]).unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, &ca_key);
        let cert = rcgen::CertificateParams::new(vec![])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        // client-go's layout, written by hand: chain (leaf, then CA), then the SEC1 key.
        let dated = pki.join("yurthub-2025-01-02-03-04-05.pem");
        fs::write(&dated, format!("{}{}{SEC1}", cert.pem(), ca_cert.pem())).unwrap();
        std::os::unix::fs::symlink(&dated, pki.join("yurthub-current.pem")).unwrap();
        let loaded = root.load_cert(CertKind::Client).expect("SEC1 pair");
        assert_eq!(loaded.path, dated);
        assert_eq!(loaded.identity.chain.len(), 2);
        assert_eq!(
            loaded.identity.chain,
            ders(&format!("{}{}", cert.pem(), ca_cert.pem()))
        );
        let key_pem = String::from_utf8(loaded.identity.key_pem.clone()).unwrap();
        assert!(
            key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----"),
            "{key_pem}"
        );

        // A relative link (made by hand) resolves against pki/.
        fs::remove_file(pki.join("yurthub-current.pem")).unwrap();
        std::os::unix::fs::symlink(
            "yurthub-2025-01-02-03-04-05.pem",
            pki.join("yurthub-current.pem"),
        )
        .unwrap();
        assert_eq!(root.load_cert(CertKind::Client).unwrap().path, dated);

        // An RSA pair (PKCS#1) copied in as a plain file.
        let current = root.current_cert(CertKind::Serving);
        fs::write(&current, format!("{RSA_CERT}{RSA_KEY}")).unwrap();
        let loaded = root.load_cert(CertKind::Serving).expect("RSA pair");
        assert_eq!(loaded.path, current);
    }

    #[test]
    fn interrupted_writes_do_not_break_the_next_ones() {
        let tmp = TempDir::new("leftover");
        let root = RootDir::new(tmp.0.clone());
        let pki = tmp.0.join("pki");
        fs::create_dir_all(&pki).unwrap();
        // What a kill -9 can leave: half-written temporary files, an `-updated` link.
        fs::write(tmp.0.join(".yurthub.conf.4242.0.tmp"), "apiVersion: [").unwrap();
        fs::write(
            pki.join(".yurthub-2026-12-02-03-04-05.pem.4242.1.tmp"),
            "-----BEGIN",
        )
        .unwrap();
        fs::write(pki.join(".ca.crt.4242.2.tmp"), "x").unwrap();
        let (c1, k1) = pair("one");
        let (ca, _) = pair("ca");
        let first = root
            .store_cert(CertKind::Client, c1.as_bytes(), &k1, at(0))
            .unwrap();
        // Killed between the link and the rename of a first store: only -updated exists.
        fs::rename(
            root.current_cert(CertKind::Client),
            pki.join("yurthub-updated.pem"),
        )
        .unwrap();
        assert_eq!(root.load_cert(CertKind::Client).unwrap().path, first);
        assert_eq!(
            fs::read_link(root.current_cert(CertKind::Client)).unwrap(),
            first
        );
        // A stale -updated link does not stop the next store.
        std::os::unix::fs::symlink("/nonexistent", pki.join("yurthub-updated.pem")).unwrap();
        let (c2, k2) = pair("two");
        let second = root
            .store_cert(CertKind::Client, c2.as_bytes(), &k2, at(0))
            .unwrap();
        assert_eq!(root.load_cert(CertKind::Client).unwrap().path, second);

        root.write_hub_conf("https://s:1", ca.as_bytes()).unwrap();
        root.write_ca(ca.as_bytes()).unwrap();
        assert_eq!(root.read_ca().unwrap(), ca.as_bytes());
        assert!(parse(&fs::read_to_string(root.hub_conf()).unwrap(), &tmp.0).is_ok());
        assert_eq!(mode(&root.ca_file()), 0o600);
        // The leftovers of the files written again are gone.
        assert!(!tmp.0.join(".yurthub.conf.4242.0.tmp").exists());
        assert!(!pki.join(".ca.crt.4242.2.tmp").exists());
        assert!(!names(&tmp.0).iter().any(|n| n.ends_with(".tmp")));
        assert_eq!(
            names(&pki),
            [
                "ca.crt",
                "yurthub-2026-12-02-03-04-05.pem",
                "yurthub-2026-12-02-03-04-06.pem",
                "yurthub-current.pem",
            ]
        );
    }

    /// A root with a hub that was set up for `server` and `ca`, plus user and cache files.
    fn set_up(tmp: &TempDir, server: &str, ca: &str) -> RootDir {
        let root = RootDir::new(tmp.0.clone());
        let (c, k) = pair("c");
        let (s, sk) = pair("s");
        root.store_cert(CertKind::Client, c.as_bytes(), &k, at(0))
            .unwrap();
        root.store_cert(CertKind::Serving, s.as_bytes(), &sk, at(0))
            .unwrap();
        root.write_ca(ca.as_bytes()).unwrap();
        root.write_hub_conf(server, ca.as_bytes()).unwrap();
        root.write_bootstrap_conf(&root.bootstrap_conf(), server, ca.as_bytes(), "a.b")
            .unwrap();
        fs::create_dir_all(tmp.0.join("cache/kubelet")).unwrap();
        fs::write(tmp.0.join("cache/kubelet/pods"), "x").unwrap();
        fs::write(tmp.0.join("pki/user-extra.crt"), "x").unwrap();
        fs::write(tmp.0.join("pki/.yurthub-x.pem.1.2.tmp"), "x").unwrap();
        root
    }

    #[test]
    fn forget_stale_keeps_everything_for_the_same_cluster() {
        let tmp = TempDir::new("same");
        let (ca, _) = pair("ca");
        let root = set_up(&tmp, "https://Master.example:6443", &ca);
        let before = (names(&tmp.0), names(&tmp.0.join("pki")));
        let servers = [
            "https://10.0.0.9:6443".to_owned(),
            "master.example:443".to_owned(),
        ];
        // The same CA written with other line ends is the same CA.
        let ca_crlf = ca.replace('\n', "\r\n");
        let removed = root
            .forget_stale(&servers, Some(ca_crlf.as_bytes()), None)
            .unwrap();
        assert!(removed.is_empty(), "{removed:?}");
        assert!(root.forget_stale(&[], None, None).unwrap().is_empty());
        assert_eq!(before, (names(&tmp.0), names(&tmp.0.join("pki"))));
        // No yurthub.conf: nothing to compare.
        let empty = RootDir::new(tmp.0.join("none"));
        assert!(empty.forget_stale(&servers, None, None).unwrap().is_empty());
    }

    #[test]
    fn forget_stale_removes_what_the_hub_made_for_another_server() {
        let tmp = TempDir::new("moved");
        let (ca, _) = pair("ca");
        let root = set_up(&tmp, "https://[fd00::1]:6443", &ca);
        let servers = ["https://[fd00::2]:6443".to_owned()];
        // The chart's --bootstrap-file is <root>/bootstrap-hub.conf: the user's, kept.
        let user_file = tmp.0.join("./bootstrap-hub.conf");
        let removed = root.forget_stale(&servers, None, Some(&user_file)).unwrap();
        assert_eq!(removed.last(), Some(&root.hub_conf()));
        assert_eq!(
            names(&tmp.0),
            ["bootstrap-hub.conf", "cache", "pki"],
            "{removed:?}"
        );
        assert_eq!(names(&tmp.0.join("pki")), ["user-extra.crt"]);
        assert!(tmp.0.join("cache/kubelet/pods").exists());
        assert!(root.load_cert(CertKind::Client).is_none());
        assert!(root.read_ca().is_none());
    }

    #[test]
    fn forget_stale_reads_the_server_even_when_the_pair_files_are_gone() {
        let tmp = TempDir::new("rmpki");
        let (ca, _) = pair("ca");
        let root = set_up(&tmp, "https://old:6443", &ca);
        fs::remove_file(root.current_cert(CertKind::Client)).unwrap();
        assert!(
            root.forget_stale(&["https://old:1".to_owned()], Some(ca.as_bytes()), None)
                .unwrap()
                .is_empty()
        );
        let removed = root
            .forget_stale(&["https://new:6443".to_owned()], None, None)
            .unwrap();
        assert!(removed.contains(&root.hub_conf()), "{removed:?}");
        assert_eq!(names(&tmp.0), ["cache", "pki"]);
        // Not a kubeconfig at all: kept, nothing else touched.
        let tmp = TempDir::new("notyaml");
        let root = set_up(&tmp, "https://old:6443", &ca);
        fs::write(root.hub_conf(), "clusters: [").unwrap();
        let removed = root
            .forget_stale(&["https://new:6443".to_owned()], None, None)
            .unwrap();
        assert!(removed.is_empty(), "{removed:?}");
        assert!(root.load_cert(CertKind::Client).is_some());
    }

    #[test]
    fn forget_stale_removes_the_generated_bootstrap_file_and_a_changed_ca() {
        let tmp = TempDir::new("newca");
        let (ca, _) = pair("ca");
        let (other_ca, _) = pair("other-ca");
        let root = set_up(&tmp, "https://10.0.0.1:6443", &ca);
        let user_file = tmp.0.join("elsewhere.conf");
        let removed = root
            .forget_stale(
                &["https://10.0.0.1:6443".to_owned()],
                Some(other_ca.as_bytes()),
                Some(&user_file),
            )
            .unwrap();
        assert!(removed.contains(&root.bootstrap_conf()), "{removed:?}");
        assert_eq!(names(&tmp.0), ["cache", "pki"]);
        assert_eq!(names(&tmp.0.join("pki")), ["user-extra.crt"]);
    }

    #[test]
    fn hosts_of_server_addresses() {
        for (addr, host) in [
            ("https://10.0.0.1:6443", Some("10.0.0.1")),
            ("https://Master.Example/path", Some("master.example")),
            ("master:6443", Some("master")),
            ("https://u:p@h:1", Some("h")),
            ("https://[fd00::1]:6443", Some("fd00::1")),
            ("fd00::1", Some("fd00::1")),
            ("https://", None),
        ] {
            assert_eq!(host_of(addr).as_deref(), host, "{addr}");
        }
    }

    /// `openssl genrsa -traditional 2048`: an RSA key as PKCS#1.
    const RSA_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEA4WITo18s21HN39190whfiyDcNnU+OWywRHU1m0dkzVdmo6MS
uaMFmhfXnB42hN7qoNo15LlhY7B0XzLGvv3jMrI7CspbdKl7Svoi8l2paIm0te/u
KeMjxTN709aaXVNrIYHIEEIIJz/1jRGCHJv6qTFa25XTJ+PMbRcA2OTcLZy53zHx
TICspLLKcMmtMTtPSs6tWOCiuTH5MbBFts1PgyYl4KZfteHVlo9hjtKNUEiAeul0
VGbqMg+T7WEGR5PSYtpb5LNk9VexFMJEg/OdeqAlUbguNZsEC+9yujqttf5rPyDa
qQOAZIJ5ohnmg+PUyClTZzroHyUOYPTKhePbEwIDAQABAoIBAAqU9UEVZeDCPX1G
Q/MVkI7SsyQnaw19KeV871BkELqHYP1L2cQ3gDrU5b2huYORh8iXljIv9f+dOEmD
88rh1rn5nkYKbDLVBkHl7qAcf6i11nM4WaFD1dkbarPufn7lPMFs+3yv7PwSx6+g
48/+Ds3E0HRA25Ii4uU4UETeseu+OnZ5BbdRpPoEUyoNNUfkS/We/cTHE849ANX0
hzw6h7INpanIrm9RoOVBL3LNjce4ExyhpMsM8L05Ro3UApiwcqo7yNEJjIRnkyDk
RL94BoMNniB68I5RMvcJmrzA7cTqc6iktdq6sSBkpI1qPM+0tnooR23Yl1BJUsT2
kS2MDBECgYEA+DbLVWFA7LKTob95nd51p5iEBIOLQC+SHP5hSIiN13TCrCFDDQaZ
CeFdPSrqosAYAStNuBgtT9sD7LF2Mjz+vCyNK7mp2uabP3homsFdHRyXxRJRv8Nv
xAFGhh96lssJh/8PnqKuVy8nZnhdmmMtgGtBNdCYn0HMHM7aOEzGOrsCgYEA6HPy
HcMzaXK4ekdJoD7sRXJRCIe5Aesl+BM/P60PovATdnePO7jYyyKYKuFzjptZnHRm
89Y/HIf29Jl30D0/B9hquCDbUXyiBpRUiOs1FAl+K1NcsbtR/zX1ZuAqSi4+zYcW
bzzyv/S67GNTcvxk8l3Xl/ZPUrEzFX0G128s94kCgYBg8xYMrUXsrfuYC+/2x7Nw
2NOH59F2Kp6JkJpy+FNeuo5nKT7FUbRo9YuznpWzKBC4NC/RHjBkpokr5EzkZoqg
+U3SrFw50iUFb4R8Hda+zjJBmVww6Kc5Cb6AGL+LMpbwdaGmNqieCR78mTsGWIKn
TD1WRbm3Sr3s6qa1otcyjQKBgB5ksp6TnFBIULikQ4sxTwFRjijYXidTELbcBWQV
A7thOpo9zbuYUrhUwKKyscJOq6vaSG/PbpcTbAXVXyYaK/ihomqK2UJRUnobwOXa
IymIiDewAam3fWQqMPkPjFgArfN/mz5WMMNKg3pPDmU1fRl3ja3v5bVBOBWyMEfQ
4IdJAoGBAK6015ZPToyCDbvwV26E/UubTBjlC+64CcwUaGxBgYYLo2RWyx7hBxM5
uiiU2v7r3DrfI8i1Q6CFZf3IYRAE9nISKq6gtqIwyCwr2iAfIwrnW7zuXVkUaszQ
omOjsTQkEzN1cbxhQIvb77oCHAbEYhm2gD234PoXuyU6+gN7R1aJ
-----END RSA PRIVATE KEY-----
";
    /// `openssl req -x509 -new -key` of [`RSA_KEY`].
    const RSA_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIDBzCCAe+gAwIBAgIUGfxZ+lkqdSXyBwjoLmnD0VzGhR8wDQYJKoZIhvcNAQEL
BQAwEjEQMA4GA1UEAwwHcnNhLWh1YjAgFw0yNjEyMDIwMzM5MzFaGA8yMTI2MTEw
ODAzMzkzMVowEjEQMA4GA1UEAwwHcnNhLWh1YjCCASIwDQYJKoZIhvcNAQEBBQAD
ggEPADCCAQoCggEBAOFiE6NfLNtRzd/dfdMIX4sg3DZ1PjlssER1NZtHZM1XZqOj
ErmjBZoX15weNoTe6qDaNeS5YWOwdF8yxr794zKyOwrKW3Spe0r6IvJdqWiJtLXv
7injI8Uze9PWml1TayGByBBCCCc/9Y0Rghyb+qkxWtuV0yfjzG0XANjk3C2cud8x
8UyArKSyynDJrTE7T0rOrVjgorkx+TGwRbbNT4MmJeCmX7Xh1ZaPYY7SjVBIgHrp
dFRm6jIPk+1hBkeT0mLaW+SzZPVXsRTCRIPznXqgJVG4LjWbBAvvcro6rbX+az8g
2qkDgGSCeaIZ5oPj1MgpU2c66B8lDmD0yoXj2xMCAwEAAaNTMFEwHQYDVR0OBBYE
FHHCSnl+mFYGg3Sze8O5n5+N5uOIMB8GA1UdIwQYMBaAFHHCSnl+mFYGg3Sze8O5
n5+N5uOIMA8GA1UdEwEB/wQFMAMBAf8wDQYJKoZIhvcNAQELBQADggEBAJcM3fxG
btCUS7+wDXFNPdaYCYNCRXLnevqq1kyOUFWExyZW3rlUX2EAlZnMyzRkxUbI5KhP
AcBsjPPKtatfgWqR5S5ugVrWcwhD24EUIDlA3VVOmGWmIpwNHEizRLWVJCBQue1E
D0IHTwV7geqLn2dLxvDkATwD+XF8tStbEOzaFVvoRDq0tvtfbxwriyLMgwRAWVPf
trGSTa7wtQJxa0o1pBchp90umNBOI/2J5YwA+v0POqgbJo5lSErOO/mmaO1C7ejy
GXRxLAnjGF46DiuVwcnirBGKrDrmYoFfmbMdP7OMhD7DXXs5qW8oOEzdc5IFrzA3
dJgks5py6U+aLNI=
-----END CERTIFICATE-----
";
}
