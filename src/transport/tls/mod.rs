//! TLS as Dask speaks it (feature `tls`): `tls://` addresses with mutual
//! certificates, as `distributed.security.Security` configures them
//! (SPEC.md §6.3).
//!
//! ```text
//! TlsConfig::from_pem_files(ca, cert, key)
//!   client side: the server's chain must lead to `ca` and be valid now;
//!                the host name is not checked (Dask: check_hostname = False);
//!                our certificate is presented (the server asks for it)
//!   server side: a client certificate is required and must lead to `ca`
//!   both:        TLS 1.2 minimum (Dask's `tls-min-version`), rustls with ring
//!                for the handshake; our record layer (ring's AEAD) after it
//! ```
//!
//! The Dask handshake, the limits, checksums and vectored writes are the
//! same over TLS as over TCP: a TLS stream is one more
//! `AsyncRead + AsyncWrite` under a [`Connection`](super::Connection)
//! ([`Socket`](super::Socket)).
//!
//! rustls does the handshake ([`handshake`]); after it, the records are
//! ours ([`record`], [`read`], [`stream`]): rustls 0.23 copies every
//! record three times on the way in (SPEC.md §6.3), ours are decrypted
//! where the frame's bytes go.

#[cfg(feature = "unstable")]
mod fuzz;
mod handshake;
mod read;
mod record;
mod stream;

#[cfg(feature = "unstable")]
pub use fuzz::fuzz_tls_records;
pub(crate) use handshake::{accept, connect};
pub use stream::{TlsCopies, TlsStream};

use super::error::TlsError;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};

impl TlsError {
    /// A TLS handshake that failed with this rustls error.
    pub(crate) fn handshake(e: &rustls::Error) -> TlsError {
        TlsError::new(format!("TLS handshake failed: {}", Self::reason(e)))
    }

    /// A TLS error on an established connection. With TLS 1.3 a client's
    /// handshake completes before the server has checked its certificate,
    /// so a refused certificate shows up here, as an alert on the first read.
    pub(crate) fn session(e: &rustls::Error) -> TlsError {
        TlsError::new(format!("TLS: {}", Self::reason(e)))
    }

    fn reason(e: &rustls::Error) -> String {
        use rustls::AlertDescription as A;
        match e {
            rustls::Error::AlertReceived(
                alert @ (A::BadCertificate
                | A::UnknownCA
                | A::CertificateExpired
                | A::CertificateRequired
                | A::CertificateUnknown
                | A::CertificateRevoked
                | A::UnsupportedCertificate
                | A::AccessDenied),
            ) => format!("the peer refused our certificate (alert {alert:?})"),
            e => e.to_string(),
        }
    }
}

/// The certificates of one side of `tls://` connections, as Dask's
/// `--tls-ca-file`, `--tls-cert` and `--tls-key` give them: the CA that
/// signs every peer's certificate, and this side's certificate chain and
/// private key (PEM). Both directions are mutual, as in Dask: a server
/// requires a client certificate, and a client presents one.
///
/// ```no_run
/// use framewire::transport::{ConnectionBuilder, HandshakeOptions, TlsConfig};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let tls = TlsConfig::from_pem_files("ca.pem".as_ref(), "client.pem".as_ref(), Some("client.key".as_ref()))?;
/// let (conn, agreed) = ConnectionBuilder::new()
///     .tls(tls)
///     .connect("tls://127.0.0.1:8786", &HandshakeOptions::default())
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// TLS 1.2 and 1.3: Dask's minimum is 1.2 (`distributed.comm.tls.min-version`).
const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

impl TlsConfig {
    /// Reads the CA certificates, this side's certificate chain, and its
    /// private key (from `key_file`, or from `cert_file` when it holds both,
    /// as Dask allows).
    pub fn from_pem_files(
        ca_file: &Path,
        cert_file: &Path,
        key_file: Option<&Path>,
    ) -> Result<TlsConfig, TlsError> {
        let read = |what: &str, p: &Path| {
            std::fs::read(p).map_err(|e| TlsError::new(format!("{what} {}: {e}", p.display())))
        };
        let ca = read("CA file", ca_file)?;
        let cert = read("certificate", cert_file)?;
        let key = match key_file {
            Some(k) => read("key", k)?,
            None => cert.clone(),
        };
        TlsConfig::from_pem(&ca, &cert, &key)
    }

    /// [`TlsConfig::from_pem_files`] from PEM text already read.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<TlsConfig, TlsError> {
        let certs = |pem: &[u8], what: &str| -> Result<Vec<CertificateDer<'static>>, TlsError> {
            let all = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TlsError::new(format!("{what}: {e}")))?;
            match all.is_empty() {
                true => Err(TlsError::new(format!("{what}: no PEM certificate in it"))),
                false => Ok(all),
            }
        };
        let mut roots = RootCertStore::empty();
        for c in certs(ca, "CA file")? {
            roots
                .add(c)
                .map_err(|e| TlsError::new(format!("CA file: {e}")))?;
        }
        let roots = Arc::new(roots);
        let chain = certs(cert, "certificate")?;
        let key =
            PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::new(format!("key: {e}")))?;

        let verifier = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::new(format!("CA file: {e}")))?;
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| TlsError::new(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| TlsError::new(format!("certificate and key: {e}")))?;

        let clients = WebPkiClientVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError::new(format!("CA file: {e}")))?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| TlsError::new(e.to_string()))?
            .with_client_cert_verifier(clients)
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::new(format!("certificate and key: {e}")))?;
        // The traffic secrets go to our record layer after the handshake.
        client.enable_secret_extraction = true;
        server.enable_secret_extraction = true;
        Ok(TlsConfig {
            client: Arc::new(client),
            server: Arc::new(server),
        })
    }

    /// The rustls configuration of the connecting side.
    pub fn client_config(&self) -> &Arc<ClientConfig> {
        &self.client
    }

    /// The rustls configuration of the accepting side.
    pub fn server_config(&self) -> &Arc<ServerConfig> {
        &self.server
    }
}

/// Verifies the server's chain (to the CA, valid now, for server auth) but
/// not its host name: Dask's TLS contexts set `check_hostname = False`, and
/// Dask clusters use certificates issued to any name (often one for all).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain and the validity period first, the name
        // last: a name mismatch means everything else passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
