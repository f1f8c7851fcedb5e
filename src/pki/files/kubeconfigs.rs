//! The two kubeconfigs under `--root-dir`, in clientcmd's layout: yurtadm's bootstrap file
//! (token) and the hub's own `yurthub.conf` (client certificate by file).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::RootDir;
use super::atomic::{make_dirs, parent_of, write_atomic};
use super::dated::CertKind;

impl RootDir {
    /// yurtadm's bootstrap kubeconfig (YurtHub's `pkg/yurthub/certificate/token`): cluster
    /// `kubernetes` {server, certificate-authority-data}, user `token-bootstrap-client` {token},
    /// context
    /// `token-bootstrap-client@kubernetes` (current). Written to `path` (the
    /// `--bootstrap-file` path when set, else `bootstrap_conf()`).
    pub(crate) fn write_bootstrap_conf(
        &self,
        path: &Path,
        server: &str,
        ca_pem: &[u8],
        token: &str,
    ) -> io::Result<()> {
        let text = bootstrap_yaml(server, ca_pem, token);
        make_dirs(parent_of(path))?;
        write_atomic(path, text.as_bytes())
    }

    /// `yurthub.conf` as YurtHub writes it (§3.5): `default-cluster`/`default-auth`/
    /// `default-context`, namespace `default`, client certificate and key both the current
    /// client pair's path.
    pub(crate) fn write_hub_conf(&self, server: &str, ca_pem: &[u8]) -> io::Result<()> {
        let current = self.current_cert(CertKind::Client);
        let current = current.to_str().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not UTF-8", current.display()),
            )
        })?;
        let text = hub_yaml(server, ca_pem, current);
        make_dirs(&self.root)?;
        write_atomic(&self.hub_conf(), text.as_bytes())
    }
}

/// The YAML of the bootstrap kubeconfig, in clientcmd's layout (keys sorted), every value
/// quoted.
fn bootstrap_yaml(server: &str, ca_pem: &[u8], token: &str) -> String {
    format!(
        "apiVersion: \"v1\"\n\
         clusters:\n\
         - cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"kubernetes\"\n\
         contexts:\n\
         - context:\n    cluster: \"kubernetes\"\n    user: \"token-bootstrap-client\"\n  name: \"token-bootstrap-client@kubernetes\"\n\
         current-context: \"token-bootstrap-client@kubernetes\"\n\
         kind: \"Config\"\n\
         preferences: {{}}\n\
         users:\n\
         - name: \"token-bootstrap-client\"\n  user:\n    token: {token}\n",
        ca = quote(&STANDARD.encode(ca_pem)),
        server = quote(server),
        token = quote(token),
    )
}

/// The YAML of `yurthub.conf`, in clientcmd's layout (keys sorted), every value quoted.
fn hub_yaml(server: &str, ca_pem: &[u8], current: &str) -> String {
    format!(
        "apiVersion: \"v1\"\n\
         clusters:\n\
         - cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"default-cluster\"\n\
         contexts:\n\
         - context:\n    cluster: \"default-cluster\"\n    namespace: \"default\"\n    user: \"default-auth\"\n  name: \"default-context\"\n\
         current-context: \"default-context\"\n\
         kind: \"Config\"\n\
         preferences: {{}}\n\
         users:\n\
         - name: \"default-auth\"\n  user:\n    client-certificate: {current}\n    client-key: {current}\n",
        ca = quote(&STANDARD.encode(ca_pem)),
        server = quote(server),
        current = quote(current),
    )
}

/// A YAML double-quoted scalar: whatever the text, it stays one scalar with that value.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // Controls (C0, DEL, C1 with NEL) and YAML's other line breaks and BOM.
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
