//! Test support shared by tinyhub's integration tests, examples and benchmarks: the
//! stand-in cloud apiserver ([`Cloud`]), its test PKI ([`Pki`]), kubeconfig writers, and
//! the launcher and client of a real hub process ([`hub`]).
//!
//! Included as a plain module (`#[path = "../support/mod.rs"] mod support;`), never built
//! as a crate of its own; it does not touch tinyhub's code.

// Several binaries include this module and each uses only a part of it.
#![allow(dead_code)]

mod cloud;
pub mod feed;
pub mod https;
pub mod hub;
mod kubeconfig;
pub mod kubectl;
pub mod kubelet;
pub mod mount;
pub mod namespace;
mod pki;
pub mod pool;
pub mod proto_lease;
mod util;

// The re-exports are the module's API; each including binary imports only what it needs.
#[allow(unused_imports)]
pub use cloud::{
    APISERVER_ADDRESSES, APISERVER_PORT, ApiError, AuthMethod, Cloud, CsrMode, DISCARD_ANNOTATION,
    FieldSelector, FieldTerm, Identity, KUBE_PROXY_CONFIG_CONF, LabelOp, LabelSelector,
    NODEPOOL_LABEL, NODEPORT_LISTEN_ANNOTATION, PodFill, RecordedRequest, Requirement,
    TOPOLOGY_ANNOTATION,
};
#[allow(unused_imports)]
pub use kubeconfig::{Auth, CaRef, KubeconfigOptions, KubeletFiles, write_plain_kubeconfig};
#[allow(unused_imports)]
pub use pki::{
    CertKey, CertSpec, CertSubject, ClientCert, ParsedCsr, Pki, csr_pem, parse_csr, pem,
};
#[allow(unused_imports)]
pub use util::{base64_decode, base64_encode, lock, parse_rfc3339, rfc3339, unix_now};
