//! What the TLS test files share, over `certs.rs` (which each includes as
//! `mod certs` beside this one, `mod tls_support`): the configuration of
//! a set's node, a connection builder with certificates, a runtime.
#![allow(dead_code)]

use framewire::transport::{ConnectionBuilder, TlsConfig};

use crate::certs::Certs;

/// The configuration of these PEM files: the CA to trust, the certificate
/// to present and its key.
pub fn config(ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> TlsConfig {
    TlsConfig::from_pem_files(ca, cert, Some(key)).unwrap()
}

/// The node of `c`: its CA, its certificate (for servers and clients
/// alike) and key.
pub fn node_config(c: &Certs) -> TlsConfig {
    config(&c.ca(), &c.cert(), &c.key())
}

/// A connection builder with these certificates, if any.
pub fn builder(tls: Option<&TlsConfig>) -> ConnectionBuilder {
    let mut b = ConnectionBuilder::new();
    if let Some(config) = tls {
        b.tls(config.clone());
    }
    b
}

/// A runtime of two worker threads (a peer and the test's side each run).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
