//! A one-shot HTTPS client for tests: one request over a fresh TLS connection that trusts one
//! CA, with or without a client certificate, read to the end (chunked bodies decoded). Used
//! against the stand-in cloud and against the hub's HTTPS port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A client certificate (DER) and its private key.
pub struct ClientId {
    /// The certificate, DER.
    pub cert: Vec<u8>,
    /// Its key.
    pub key: PrivateKeyDer<'static>,
}

impl ClientId {
    /// From PEM texts (a certificate and a PKCS#8, SEC1 or PKCS#1 key).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> ClientId {
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .expect("a PEM certificate")
            .to_vec();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a PEM private key");
        ClientId { cert, key }
    }
}

/// An answer: status and body (chunked bodies decoded).
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (a panic that shows the body otherwise).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request to `addr` (whose certificate names 127.0.0.1 and chains to `ca_der`), with
/// `headers` besides Host, Connection, Accept (JSON) and Content-Length; `Err` when TLS or
/// the connection fails (a refused client certificate).
pub fn call(
    addr: SocketAddr,
    ca_der: &[u8],
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    client: Option<&ClientId>,
    body: Option<&[u8]>,
) -> Result<Answer, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .map_err(|e| e.to_string())?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(c.cert.clone())],
                c.key.clone_key(),
            )
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    let name = "127.0.0.1".try_into().map_err(|e| format!("{e:?}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let body = body.unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: hub\r\nConnection: close\r\nAccept: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head += &format!("{name}: {value}\r\n");
    }
    head += "\r\n";
    tls.write_all(head.as_bytes())
        .and_then(|()| tls.write_all(body))
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    if let Err(e) = tls.read_to_end(&mut raw) {
        // A close without close_notify after a complete answer is not a failure.
        if raw.is_empty() || e.kind() != std::io::ErrorKind::UnexpectedEof {
            return Err(e.to_string());
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no answer head")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Ok(Answer { status, body })
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
}
