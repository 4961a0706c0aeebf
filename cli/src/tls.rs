//! `--tls-ca-file`, `--tls-cert`, `--tls-key`: the flags of `dask scheduler`
//! and `dask worker`, read into a [`TlsConfig`] when a `tls://` address
//! needs one.

use std::path::PathBuf;

use framewire::transport::{Address, TlsConfig};

/// One set of TLS files, under Dask's flag names.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// CA certificate(s) that peers' certificates must chain to (PEM).
    #[arg(long = "tls-ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Our certificate chain (PEM); may hold the key too, as for Dask.
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Our private key (PEM), when not in the certificate file.
    #[arg(long = "tls-key", value_name = "FILE")]
    pub key: Option<PathBuf>,
}

impl TlsArgs {
    /// Whether any of the three flags was given.
    pub fn given(&self) -> bool {
        self.ca_file.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The configuration these files make, `None` when no flag was given.
    /// `flags` names them in errors (`--tls-*` or `--upstream-tls-*`).
    pub fn config(&self, flags: &str) -> Result<Option<TlsConfig>, String> {
        if !self.given() {
            return Ok(None);
        }
        let (Some(ca), Some(cert)) = (&self.ca_file, &self.cert) else {
            return Err(format!(
                "{flags}: TLS needs {flags}-ca-file and {flags}-cert (and {flags}-key unless the certificate file holds the key)"
            ));
        };
        TlsConfig::from_pem_files(ca, cert, self.key.as_deref())
            .map(Some)
            .map_err(|e| format!("{flags}: {e}"))
    }
}

/// `--upstream-tls-ca-file`, `--upstream-tls-cert`, `--upstream-tls-key`:
/// the tap's files for its upstream side, when they differ from `--tls-*`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct UpstreamTlsArgs {
    /// For a tls:// upstream: the CA its certificate must chain to (PEM);
    /// default: --tls-ca-file.
    #[arg(long = "upstream-tls-ca-file", value_name = "FILE")]
    pub upstream_ca_file: Option<PathBuf>,
    /// For a tls:// upstream: the certificate the tap presents to it (PEM);
    /// default: --tls-cert.
    #[arg(long = "upstream-tls-cert", value_name = "FILE")]
    pub upstream_cert: Option<PathBuf>,
    /// For a tls:// upstream: the key of --upstream-tls-cert, when not in
    /// it; default: --tls-key.
    #[arg(long = "upstream-tls-key", value_name = "FILE")]
    pub upstream_key: Option<PathBuf>,
}

impl UpstreamTlsArgs {
    /// The same files as a [`TlsArgs`].
    pub fn args(&self) -> TlsArgs {
        TlsArgs {
            ca_file: self.upstream_ca_file.clone(),
            cert: self.upstream_cert.clone(),
            key: self.upstream_key.clone(),
        }
    }
}

/// The configuration for `address`: required for `tls://` (an error naming
/// the flags when absent), ignored for `tcp://`.
pub fn for_address<'a>(
    address: &Address,
    config: Option<&'a TlsConfig>,
    flags: &str,
) -> Result<Option<&'a TlsConfig>, String> {
    match (address.is_tls(), config) {
        (true, None) => Err(format!(
            "{address}: a tls:// address needs {flags}-ca-file, {flags}-cert and {flags}-key"
        )),
        (true, Some(c)) => Ok(Some(c)),
        (false, _) => Ok(None),
    }
}
