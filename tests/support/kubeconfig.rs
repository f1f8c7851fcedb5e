//! Writes real kubeconfig files (YAML) for clients of the stand-in cloud or of the hub:
//! client certificate or token credentials, inline or as files, and a CA inline or as a
//! file; plus a bare kubeconfig for a plain `http://` server.
//!
//! Also the files other tools leave for a node agent: `yurtadm join`'s bootstrap kubeconfig
//! and kubelet's credentials (kubeconfig, CA, rotating certificate symlink).
//!
//! It only writes files; it does not read kubeconfigs back.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::pki::{CertKey, ClientCert};
use super::util::{base64_encode, rfc3339, unix_now};

/// The credentials a kubeconfig carries.
#[derive(Clone, Debug)]
pub enum Auth {
    /// `client-certificate-data` / `client-key-data` (base64 PEM, inline).
    CertInline(ClientCert),
    /// `client-certificate` / `client-key`: paths to PEM files written beside the kubeconfig.
    CertFiles(ClientCert),
    /// `token: <token>` inline.
    Token(String),
    /// `tokenFile: <path>`: the token written to a file beside the kubeconfig.
    TokenFile(String),
    /// No user credentials.
    None,
}

/// How the kubeconfig names the cluster CA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaRef {
    /// `certificate-authority-data` (base64 PEM, inline).
    #[default]
    Inline,
    /// `certificate-authority`: the path of a PEM file written beside the kubeconfig.
    File,
}

/// Everything that varies between kubeconfigs written by `Cloud::write_kubeconfig`.
#[derive(Clone, Debug)]
pub struct KubeconfigOptions {
    /// Credentials.
    pub auth: Auth,
    /// CA inline or as a file.
    pub ca: CaRef,
    /// File name of the kubeconfig in the directory; also the prefix of the files written
    /// beside it (`<name>.ca.crt`, `<name>.client.crt`, `<name>.client.key`, `<name>.token`).
    pub name: String,
    /// Server URL to write instead of the cloud's own (for example the hub's HTTPS port).
    pub server: Option<String>,
}

impl KubeconfigOptions {
    /// These options with the file named `name` (and the files beside it prefixed so).
    pub fn named(self, name: &str) -> KubeconfigOptions {
        KubeconfigOptions {
            name: name.to_owned(),
            ..self
        }
    }
}

impl From<Auth> for KubeconfigOptions {
    fn from(auth: Auth) -> Self {
        KubeconfigOptions {
            auth,
            ca: CaRef::Inline,
            name: "kubeconfig".to_string(),
            server: None,
        }
    }
}

/// Writes `<dir>/<opts.name>` for `server` with CA `ca_pem` and returns its path.
///
/// # Panics
/// When the directory cannot be written (a broken test environment).
pub fn write_kubeconfig(
    dir: &Path,
    server: &str,
    ca_pem: &str,
    opts: &KubeconfigOptions,
) -> PathBuf {
    let file = |suffix: &str, content: &str| -> String {
        let p = dir.join(format!("{}.{suffix}", opts.name));
        write(&p, content);
        p.to_string_lossy().into_owned()
    };
    let server = opts.server.as_deref().unwrap_or(server);
    let mut y =
        String::from("apiVersion: v1\nkind: Config\nclusters:\n- name: cloud\n  cluster:\n");
    y += &format!("    server: {}\n", quote(server));
    match opts.ca {
        CaRef::Inline => {
            y += &format!(
                "    certificate-authority-data: {}\n",
                base64_encode(ca_pem.as_bytes())
            )
        }
        CaRef::File => {
            y += &format!(
                "    certificate-authority: {}\n",
                quote(&file("ca.crt", ca_pem))
            )
        }
    }
    let user = match &opts.auth {
        Auth::CertInline(c) => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            base64_encode(c.pair.cert_pem.as_bytes()),
            base64_encode(c.pair.key_pem.as_bytes())
        ),
        Auth::CertFiles(c) => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            quote(&file("client.crt", &c.pair.cert_pem)),
            quote(&file("client.key", &c.pair.key_pem))
        ),
        Auth::Token(t) => format!("    token: {}\n", quote(t)),
        Auth::TokenFile(t) => format!("    tokenFile: {}\n", quote(&file("token", t))),
        Auth::None => String::new(),
    };
    if user.is_empty() {
        y += "users: []\ncontexts:\n- name: cloud\n  context:\n    cluster: cloud\n";
    } else {
        y += "users:\n- name: user\n  user:\n";
        y += &user;
        y += "contexts:\n- name: cloud\n  context:\n    cluster: cloud\n    user: user\n";
    }
    y += "current-context: cloud\n";
    let path = dir.join(&opts.name);
    write(&path, &y);
    path
}

/// Writes `<dir>/<name>`: a kubeconfig for a plain `http://` server with no CA and no user
/// (for kubectl pointed at the hub's proxy port), and returns its path.
pub fn write_plain_kubeconfig(dir: &Path, name: &str, url: &str) -> PathBuf {
    let y = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {}\n\
         users: []\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n\
         current-context: hub\n",
        quote(url)
    );
    let path = dir.join(name);
    write(&path, &y);
    path
}

fn write(path: &Path, content: &str) {
    if let Err(e) = fs::write(path, content) {
        panic!("writing {}: {e}", path.display());
    }
}

/// A YAML double-quoted scalar.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes at `path` the bootstrap kubeconfig `yurtadm join` writes (`bootstrap-hub.conf`):
/// cluster `kubernetes` with the CA inline, user `token-bootstrap-client` with `token`,
/// context `token-bootstrap-client@kubernetes`.
pub fn write_bootstrap_kubeconfig(path: &Path, server: &str, ca_pem: &str, token: &str) {
    let y = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {}\n  name: kubernetes\n\
         contexts:\n- context:\n    cluster: kubernetes\n    user: token-bootstrap-client\n  name: token-bootstrap-client@kubernetes\n\
         current-context: token-bootstrap-client@kubernetes\nkind: Config\npreferences: {{}}\n\
         users:\n- name: token-bootstrap-client\n  user:\n    token: {}\n",
        base64_encode(ca_pem.as_bytes()),
        quote(server),
        quote(token)
    );
    write(path, &y);
}

/// The files kubelet's credentials live in (`--bootstrap-mode=kubeletcertificate`).
#[derive(Clone, Debug)]
pub struct KubeletFiles {
    /// `<dir>/kubelet.conf`: the cloud's server and CA, the client certificate and key both
    /// in the `cert` file.
    pub kubeconfig: PathBuf,
    /// `<dir>/pki/ca.crt`.
    pub ca: PathBuf,
    /// `<dir>/kubelet-client-current.pem`: a symlink to the dated file holding the
    /// certificate then the key.
    pub cert: PathBuf,
}

/// Writes kubelet's credentials in `dir` as kubeadm and kubelet's certificate store do:
/// `kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem` (mode 0600) for `now`, then the
/// `kubelet-client-current.pem` symlink swapped to it through `kubelet-client-updated.pem`
/// and a rename. A dated name already taken waits for the next second, so each rotation has
/// a file of its own.
pub fn write_kubelet_files(
    dir: &Path,
    server: &str,
    ca_pem: &str,
    pair: &CertKey,
    now: SystemTime,
) -> KubeletFiles {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let pki = dir.join("pki");
    if let Err(e) = fs::create_dir_all(&pki) {
        panic!("creating {}: {e}", pki.display());
    }
    let ca = pki.join("ca.crt");
    write(&ca, ca_pem);
    let current = dir.join("kubelet-client-current.pem");
    let mut secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dated = loop {
        let stamp = rfc3339(secs).replace(['T', ':'], "-").replace('Z', "");
        let p = dir.join(format!("kubelet-client-{stamp}.pem"));
        if !p.exists() {
            break p;
        }
        secs += 1;
        while unix_now() < secs {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    write(&dated, &format!("{}{}", pair.cert_pem, pair.key_pem));
    if let Err(e) = fs::set_permissions(&dated, fs::Permissions::from_mode(0o600)) {
        panic!("chmod {}: {e}", dated.display());
    }
    let updated = dir.join("kubelet-client-updated.pem");
    let _ = fs::remove_file(&updated);
    if let Err(e) = symlink(&dated, &updated).and_then(|()| fs::rename(&updated, &current)) {
        panic!("swapping {}: {e}", current.display());
    }
    let cert = current.to_string_lossy().into_owned();
    let y = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {}\n  name: default-cluster\n\
         contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\nkind: Config\npreferences: {{}}\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: {}\n    client-key: {}\n",
        base64_encode(ca_pem.as_bytes()),
        quote(server),
        quote(&cert),
        quote(&cert)
    );
    let kubeconfig = dir.join("kubelet.conf");
    write(&kubeconfig, &y);
    KubeletFiles {
        kubeconfig,
        ca,
        cert: current,
    }
}
