//! Certificates for the TLS tests, made here with rcgen (nothing to install):
//! a CA, a certificate it signs that serves both sides (as Dask clusters
//! often use one), another CA with its own certificate, and an expired one.
//! Included by each test file that needs it
//! (`#[path = "support/certs.rs"] mod certs;`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files of one test set, in a directory.
pub struct Certs {
    pub dir: PathBuf,
    /// The scratch directory of [`scratch`], removed on drop.
    scratch: Option<tempfile::TempDir>,
}

impl Certs {
    /// The set [`make`] wrote into `dir` earlier.
    pub fn at(dir: &Path) -> Certs {
        Certs {
            dir: dir.to_path_buf(),
            scratch: None,
        }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    /// The CA of the cluster.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }
    /// A certificate the CA signed, for servers and clients alike.
    pub fn cert(&self) -> PathBuf {
        self.path("node.pem")
    }
    pub fn key(&self) -> PathBuf {
        self.path("node.key")
    }
    /// Another CA, and a certificate it signed.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }
    pub fn other_cert(&self) -> PathBuf {
        self.path("other.pem")
    }
    pub fn other_key(&self) -> PathBuf {
        self.path("other.key")
    }
    /// Signed by the CA, but expired yesterday.
    pub fn expired_cert(&self) -> PathBuf {
        self.path("expired.pem")
    }
    pub fn expired_key(&self) -> PathBuf {
        self.path("expired.key")
    }
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (params, KeyPair::generate().unwrap())
}

/// A leaf for servers and clients (both extended key usages), for
/// `localhost` and 127.0.0.1 (framewire does not check names anyway).
fn leaf(cn: &str, expired: bool) -> (CertificateParams, KeyPair) {
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    if expired {
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(30);
        params.not_after = now - time::Duration::days(1);
    }
    (params, KeyPair::generate().unwrap())
}

/// A fresh set in a scratch directory of its own (`framewire-<tag>-…`),
/// removed with it.
pub fn scratch(tag: &str) -> Certs {
    let dir = tempfile::Builder::new()
        .prefix(&format!("framewire-{tag}-"))
        .tempdir()
        .expect("a scratch directory");
    let mut certs = make(dir.path());
    certs.scratch = Some(dir);
    certs
}

/// Writes a fresh set into `dir`.
pub fn make(dir: &Path) -> Certs {
    std::fs::create_dir_all(dir).unwrap();
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();

    let (ca_params, ca_key) = ca("framewire test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    write("ca.pem", ca_cert.pem());
    let issuer = Issuer::new(ca_params, ca_key);

    let (node, node_key) = leaf("framewire node", false);
    write(
        "node.pem",
        node.signed_by(&node_key, &issuer).unwrap().pem(),
    );
    write("node.key", node_key.serialize_pem());

    let (old, old_key) = leaf("framewire expired", true);
    write(
        "expired.pem",
        old.signed_by(&old_key, &issuer).unwrap().pem(),
    );
    write("expired.key", old_key.serialize_pem());

    let (other_params, other_ca_key) = ca("another CA");
    write(
        "other-ca.pem",
        other_params.self_signed(&other_ca_key).unwrap().pem(),
    );
    let other_issuer = Issuer::new(other_params, other_ca_key);
    let (other, other_key) = leaf("stranger", false);
    write(
        "other.pem",
        other.signed_by(&other_key, &other_issuer).unwrap().pem(),
    );
    write("other.key", other_key.serialize_pem());

    Certs::at(dir)
}
