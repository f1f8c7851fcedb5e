//! The hub's own identity for the cloud (issue 13): its client certificate, obtained with a
//! bootstrap token or taken from kubelet, and its serving certificate for the HTTPS port,
//! both renewed before they expire.
//!
//! Files: `der.rs` (DER reading and writing), `x509.rs` (the certificate fields the hub
//! reads), `csr.rs` (P-256 keys and PKCS#10 requests), `discovery.rs` (join token and
//! `cluster-info`), `csr_api.rs` (the CSR API and the small cloud client it needs),
//! `files.rs` (what lives under `--root-dir`).

pub(crate) mod csr;
pub(crate) mod csr_api;
pub(crate) mod der;
pub(crate) mod discovery;
pub(crate) mod files;
pub(crate) mod x509;
