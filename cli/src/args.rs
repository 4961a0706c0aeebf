//! The options several commands share, defined once: Dask's comm timeouts
//! ([`Timeouts`]: `--tcp-timeout`, `--connect-timeout`), and with the TLS
//! files ([`TlsArgs`]: `--tls-*`) the options of every command that connects
//! to a Dask server ([`ConnectArgs`]), read into a [`Connect`] that sets up a
//! [`ConnectionBuilder`].

use std::time::Duration;

use framewire::transport::{Address, ConnectionBuilder, TlsConfig};

use crate::tls::{self, TlsArgs};

/// Dask's `distributed.comm.timeouts`, under its names.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Timeouts {
    /// Dask's `distributed.comm.timeouts.tcp`: a connection whose peer
    /// stops answering (a dead host, a partition) is called dead after
    /// about this long (TCP keepalive and TCP_USER_TIMEOUT, as Dask sets
    /// them; at least 11), `0`: keepalive off.
    #[arg(long, value_name = "SECONDS", default_value = "30",
          value_parser = parse_tcp_timeout)]
    tcp_timeout: TcpTimeout,
    /// Dask's `distributed.comm.timeouts.connect`: how long connecting is
    /// retried (with Dask's backoff) before giving up.
    #[arg(long, value_name = "SECONDS", default_value = "30",
          value_parser = parse_timeout)]
    connect_timeout: Duration,
}

impl Timeouts {
    /// `--tcp-timeout`; `None` for 0 (keepalive off).
    pub fn tcp_timeout(&self) -> Option<Duration> {
        self.tcp_timeout.0
    }

    /// `--connect-timeout`.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
}

/// `--tcp-timeout`; `None` for 0.
#[derive(Clone, Copy, Debug)]
struct TcpTimeout(Option<Duration>);

/// `--tcp-timeout`: whole seconds, at least 11 (Dask's bound), or 0 for
/// none.
fn parse_tcp_timeout(s: &str) -> Result<TcpTimeout, String> {
    let secs: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of seconds"))?;
    let min = ConnectionBuilder::MIN_TCP_TIMEOUT;
    match secs {
        0 => Ok(TcpTimeout(None)),
        s if s < min.as_secs() => Err(format!(
            "{s} s is too short: at least {} s (10 keepalive probes a second apart, plus one), or 0 for none",
            min.as_secs()
        )),
        s => Ok(TcpTimeout(Some(Duration::from_secs(s)))),
    }
}

/// A timeout option (`--timeout`, `--connect-timeout`, `--hold`, ...):
/// seconds, fractions allowed, more than 0.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs.is_nan() || secs <= 0.0 || secs.is_infinite() {
        return Err(format!("{s:?}: the timeout must be more than 0 seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// The options of a command that connects to one Dask server (`call`,
/// `scatter`, `gather`, `who-has`): the timeouts and the `--tls-*` files.
#[derive(Clone, Debug, clap::Args)]
pub struct ConnectArgs {
    /// `--tcp-timeout`, `--connect-timeout`.
    #[command(flatten)]
    timeouts: Timeouts,
    /// `--tls-ca-file`, `--tls-cert`, `--tls-key`.
    #[command(flatten)]
    tls: TlsArgs,
}

impl ConnectArgs {
    /// The options, the TLS files read (an error when they are incomplete
    /// or unreadable, whatever the address).
    pub fn read(&self) -> Result<Connect, String> {
        Ok(Connect {
            timeouts: self.timeouts,
            tls: self.tls.config("--tls")?,
        })
    }
}

/// How to reach a Dask server: [`ConnectArgs`] with the TLS files read.
#[derive(Clone, Debug)]
pub struct Connect {
    /// `--tcp-timeout`, `--connect-timeout`.
    pub timeouts: Timeouts,
    /// `--tls-*`, for a `tls://` address.
    pub tls: Option<TlsConfig>,
}

impl Connect {
    /// Sets the timeouts on `builder`, and the TLS configuration when
    /// `address` is `tls://` (an error naming the flags when there is none).
    pub fn configure(
        &self,
        builder: &mut ConnectionBuilder,
        address: &Address,
    ) -> Result<(), String> {
        builder
            .tcp_timeout(self.timeouts.tcp_timeout())
            .connect_timeout(Some(self.timeouts.connect_timeout()));
        if let Some(config) = tls::for_address(address, self.tls.as_ref(), "--tls")? {
            builder.tls(config.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("nan").is_err());
        assert!(parse_timeout("-1").is_err());
        assert!(parse_timeout("x").is_err());
    }

    #[test]
    fn tcp_timeouts() {
        assert_eq!(parse_tcp_timeout("0").unwrap().0, None);
        assert_eq!(
            parse_tcp_timeout("11").unwrap().0,
            Some(Duration::from_secs(11))
        );
        assert!(parse_tcp_timeout("10").is_err());
        assert!(parse_tcp_timeout("1.5").is_err());
    }
}
