//! [`Address`] and [`Socket`]: Dask's `tcp://` and `tls://` addresses, and
//! the stream a [`Connection`](super::Connection) runs over for either.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::error::{AddressError, ConnectError, TimeoutPhase, TlsError, TransportError};
#[cfg(feature = "tls")]
use super::tls::{TlsConfig, TlsStream};

/// A Dask address: `tcp://HOST:PORT`, `tls://HOST:PORT`, or a bare
/// `HOST:PORT` (TCP), as `distributed.comm.parse_address` reads them.
///
/// ```
/// use framewire::transport::Address;
/// assert_eq!(Address::parse("tcp://127.0.0.1:8786")?, Address::Tcp("127.0.0.1:8786".into()));
/// assert_eq!(Address::parse("tls://[::1]:8786")?, Address::Tls("[::1]:8786".into()));
/// assert_eq!(Address::parse("localhost:8786")?, Address::Tcp("localhost:8786".into()));
/// assert!(Address::parse("ucx://h:1").is_err());
/// # Ok::<(), framewire::transport::AddressError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// `tcp://HOST:PORT`.
    Tcp(String),
    /// `tls://HOST:PORT`.
    Tls(String),
}

impl Address {
    /// Parses an address; the error names it and says what is wrong.
    pub fn parse(address: &str) -> Result<Address, AddressError> {
        let error = |problem: String| AddressError::new(address.to_owned(), problem);
        let (tls, rest) = match address.split_once("://") {
            Some(("tcp", rest)) => (false, rest),
            Some(("tls", rest)) => (true, rest),
            Some((scheme, _)) => {
                return Err(error(format!(
                    "only tcp:// and tls:// addresses are supported, not {scheme}://"
                )))
            }
            None => (false, address),
        };
        match rest.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(match tls {
                    true => Address::Tls(rest.to_owned()),
                    false => Address::Tcp(rest.to_owned()),
                })
            }
            _ => Err(error("expected tcp://HOST:PORT or tls://HOST:PORT".into())),
        }
    }

    /// `HOST:PORT`.
    pub fn host_port(&self) -> &str {
        match self {
            Address::Tcp(a) | Address::Tls(a) => a,
        }
    }

    /// The host, without brackets around an IPv6 address.
    pub fn host(&self) -> &str {
        let hp = self.host_port();
        let host = hp.rsplit_once(':').map_or(hp, |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Whether it is a `tls://` address.
    pub fn is_tls(&self) -> bool {
        matches!(self, Address::Tls(_))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(a) => write!(f, "tcp://{a}"),
            Address::Tls(a) => write!(f, "tls://{a}"),
        }
    }
}

/// The stream under a connection made from an [`Address`]: TCP, or TLS over
/// TCP (feature `tls`). `TCP_NODELAY` is set, and TCP keepalive with
/// `TCP_USER_TIMEOUT` from a TCP timeout ([`Socket::set_tcp_timeout`]), as
/// Dask does.
#[derive(Debug)]
#[non_exhaustive]
pub enum Socket {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS, as the side that connected.
    #[cfg(feature = "tls")]
    TlsClient(Box<TlsStream>),
    /// TLS, as the side that accepted.
    #[cfg(feature = "tls")]
    TlsServer(Box<TlsStream>),
}

impl Socket {
    /// The TCP stream underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Tcp(s) => s,
            #[cfg(feature = "tls")]
            Socket::TlsClient(s) | Socket::TlsServer(s) => s.tcp(),
        }
    }

    /// The TLS cipher suite in use (`None` for plain TCP).
    pub fn cipher_suite(&self) -> Option<String> {
        match self {
            Socket::Tcp(_) => None,
            #[cfg(feature = "tls")]
            Socket::TlsClient(s) | Socket::TlsServer(s) => Some(s.cipher_suite()),
        }
    }
}

macro_rules! each_socket {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Socket::Tcp($s) => $e,
            #[cfg(feature = "tls")]
            Socket::TlsClient($s) => $e,
            #[cfg(feature = "tls")]
            Socket::TlsServer($s) => $e,
        }
    };
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // (Python's TLS streams close without a close_notify: the TLS
        // stream ends there between records, as Dask's framing is
        // self-delimiting; inside a record it is an error.)
        each_socket!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each_socket!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each_socket!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Tcp(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            Socket::TlsClient(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            Socket::TlsServer(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_socket!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_socket!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// TLS configuration without the `tls` feature: a type with no values, so
/// that the functions taking an `Option<&TlsConfig>` (none for `tcp://`, the
/// config for `tls://`) have one signature whatever the features, and `None`
/// is the only option. With the feature it is the certificates and keys of
/// `tls://` (`TlsConfig::from_pem_files` and others).
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub enum TlsConfig {}

impl Socket {
    /// Takes an accepted TCP stream (`TCP_NODELAY` and `tcp_timeout` set)
    /// and, when `tls` is given, does the TLS handshake as the server, by
    /// `deadline`: a client certificate signed by the CA is required.
    pub(super) async fn accept_by(
        stream: TcpStream,
        tls: Option<&TlsConfig>,
        deadline: Option<Instant>,
        tcp_timeout: Option<Duration>,
    ) -> Result<Socket, TransportError> {
        configure(&stream, tcp_timeout)?;
        match tls {
            None => Ok(Socket::Tcp(stream)),
            #[cfg(feature = "tls")]
            Some(config) => {
                let config = config.server_config().clone();
                let s = by(deadline, TimeoutPhase::TlsHandshake, async {
                    super::tls::accept(stream, config).await
                })
                .await?;
                Ok(Socket::TlsServer(Box::new(s)))
            }
            #[cfg(not(feature = "tls"))]
            Some(never) => {
                let _ = deadline;
                match *never {}
            }
        }
    }

    /// Sets the TCP timeout of the socket as Dask's `set_tcp_timeout`
    /// (`distributed/comm/tcp.py`) sets `distributed.comm.timeouts.tcp`:
    /// keepalive on, 10 probes, `idle` and `interval` computed from the
    /// timeout's whole seconds `t` (`idle = max(2, t / 4)`, `interval =
    /// max(1, (t - idle) / 10)`, then `idle = t - 10 × interval`: 10 s and
    /// 2 s for Dask's default 30 s), and on Linux `TCP_USER_TIMEOUT` = `t`
    /// (data unacknowledged that long ends the connection). A peer that
    /// stops answering — a host that lost power, a partition — then ends
    /// the connection within about `t` with
    /// [`TransportError::PeerTimeout`], idle or not. `None` turns keepalive
    /// and the user timeout off (the kernel's defaults: minutes to hours).
    ///
    /// A timeout under [`ConnectionBuilder::MIN_TCP_TIMEOUT`](super::ConnectionBuilder::MIN_TCP_TIMEOUT) (11 s: one
    /// second per probe plus one, what Dask asserts) is an
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) error.
    pub fn set_tcp_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        set_tcp_timeout(self.tcp(), timeout)
    }

    /// Whether it is a TLS stream (its bytes on the wire are ciphertext:
    /// they cannot be moved between sockets as they are, e.g. spliced).
    pub fn is_tls(&self) -> bool {
        !matches!(self, Socket::Tcp(_))
    }
}

/// Dask's default `distributed.comm.timeouts.tcp`.
pub(crate) const DEFAULT_TCP_TIMEOUT: Duration = Duration::from_secs(30);

/// Dask's default `distributed.comm.timeouts.connect`.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Keepalive probes before the kernel gives up (Dask's `nprobes`, the fixed
/// count on Windows).
const KEEPALIVE_PROBES: u32 = 10;

/// The shortest TCP timeout: a second per probe, and a second of idleness
/// (Dask: `assert timeout >= nprobes + 1`).
pub(crate) const MIN_TCP_TIMEOUT: Duration = Duration::from_secs(KEEPALIVE_PROBES as u64 + 1);

/// The first backoff between connect attempts (Dask's `backoff_base`).
const BACKOFF_BASE: Duration = Duration::from_millis(10);

/// Keepalive `(idle, interval)` in seconds from a TCP timeout of `t` whole
/// seconds (`t` ≥ 11), as Dask's `set_tcp_timeout` computes them.
pub(crate) fn keepalive_times(t: u64) -> (u64, u64) {
    let probes = u64::from(KEEPALIVE_PROBES);
    let idle = (t / 4).max(2);
    let interval = (t.saturating_sub(idle) / probes).max(1);
    (t - interval * probes, interval)
}

/// See [`Socket::set_tcp_timeout`].
pub(crate) fn set_tcp_timeout(stream: &TcpStream, timeout: Option<Duration>) -> io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    let Some(timeout) = timeout else {
        sock.set_keepalive(false)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        sock.set_tcp_user_timeout(None)?;
        return Ok(());
    };
    let t = timeout.as_secs();
    if t < MIN_TCP_TIMEOUT.as_secs() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a TCP timeout of {timeout:?} is too short: at least {} s (one second per \
                 keepalive probe, {KEEPALIVE_PROBES}, plus one)",
                MIN_TCP_TIMEOUT.as_secs()
            ),
        ));
    }
    let (idle, interval) = keepalive_times(t);
    let params = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(idle))
        .with_interval(Duration::from_secs(interval));
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "windows"
    ))]
    let params = params.with_retries(KEEPALIVE_PROBES);
    sock.set_tcp_keepalive(&params)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(Duration::from_secs(t)))?;
    Ok(())
}

/// What every TCP stream framewire makes gets: `TCP_NODELAY` (as Dask)
/// and the TCP timeout.
fn configure(stream: &TcpStream, tcp_timeout: Option<Duration>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    set_tcp_timeout(stream, tcp_timeout)
}

/// How one attempt to connect failed.
enum Failure {
    /// Worth another attempt (the TCP connection was refused, the address
    /// is unreachable, its name does not resolve).
    Retry(io::Error),
    /// The attempt ran out of time in this step (also retried).
    TimedOut(TimeoutPhase),
    /// Final: the TLS handshake failed (a certificate refused, a peer that
    /// does not speak TLS), or there is no TLS configuration.
    Final(TransportError),
}

impl Failure {
    /// The cause to report once attempts are over.
    fn cause(self) -> Result<io::Error, TransportError> {
        match self {
            Failure::Retry(e) => Ok(e),
            Failure::TimedOut(phase) => Ok(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the last attempt timed out {phase}"),
            )),
            Failure::Final(e) => Err(e),
        }
    }
}

/// How to connect: the TLS configuration and the TCP timeout.
struct Dial<'a> {
    tls: Option<&'a TlsConfig>,
    tcp_timeout: Option<Duration>,
}

impl<'a> Dial<'a> {
    /// One TCP connection attempt, configured.
    async fn tcp(&self, target: &Address, deadline: Option<Instant>) -> Result<TcpStream, Failure> {
        let connect = TcpStream::connect(target.host_port());
        let stream = match deadline {
            Some(d) => tokio::time::timeout_at(d, connect)
                .await
                .map_err(|_| Failure::TimedOut(TimeoutPhase::Connect))?,
            None => connect.await,
        }
        .map_err(Failure::Retry)?;
        configure(&stream, self.tcp_timeout).map_err(|e| Failure::Final(e.into()))?;
        Ok(stream)
    }

    /// One attempt: TCP, then for `tls://` the TLS handshake, all by
    /// `deadline`.
    async fn attempt(
        &self,
        address: &Address,
        deadline: Option<Instant>,
    ) -> Result<Socket, Failure> {
        #[cfg(feature = "tls")]
        if address.is_tls() && self.tls.is_none() {
            return Err(Failure::Final(no_tls_config()));
        }
        #[cfg(not(feature = "tls"))]
        if address.is_tls() {
            return Err(Failure::Final(no_tls_feature()));
        }
        let stream = self.tcp(address, deadline).await?;
        match (address, self.tls) {
            #[cfg(feature = "tls")]
            (Address::Tls(_), Some(config)) => {
                let name = server_name(address.host()).map_err(Failure::Final)?;
                let handshake = super::tls::connect(stream, config.client_config().clone(), name);
                let result = match deadline {
                    Some(d) => tokio::time::timeout_at(d, handshake)
                        .await
                        .map_err(|_| Failure::TimedOut(TimeoutPhase::TlsHandshake))?,
                    None => handshake.await,
                };
                Ok(Socket::TlsClient(Box::new(result.map_err(Failure::Final)?)))
            }
            _ => Ok(Socket::Tcp(stream)),
        }
    }
}

/// Runs `attempt` (given each attempt's deadline) until it succeeds,
/// fails for good, or `timeout` has passed, as Dask's `connect()` does:
/// the first attempt capped at `timeout / 5`, later ones at the time
/// left, "full jitter" backoff in between. `None`: one attempt, no
/// deadline.
async fn retry<T, F, Fut>(
    target: &Address,
    timeout: Option<Duration>,
    mut attempt: F,
) -> Result<T, TransportError>
where
    F: FnMut(Option<Instant>) -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>>,
{
    let start = Instant::now();
    let Some(limit) = timeout else {
        return attempt(None)
            .await
            .map_err(|f| give_up(target, None, (start, 1), f));
    };
    let deadline = start + limit;
    let mut cap = limit / 5;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let now = Instant::now();
        let failure = match attempt(Some(deadline.min(now + cap))).await {
            Ok(done) => return Ok(done),
            Err(f @ Failure::Final(_)) => {
                return Err(give_up(target, timeout, (start, attempts), f))
            }
            Err(f) => f,
        };
        cap = limit;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(give_up(target, timeout, (start, attempts), failure));
        }
        let upper = left.min(BACKOFF_BASE.saturating_mul(1 << (attempts - 1).min(20)));
        tokio::time::sleep(upper.mul_f64(fastrand::f64())).await;
        if Instant::now() >= deadline {
            return Err(give_up(target, timeout, (start, attempts), failure));
        }
    }
}

/// The error once attempts are over: [`TransportError::Connect`] naming
/// the target, the time since `start` and the number of attempts, unless
/// the last failure was final.
fn give_up(
    target: &Address,
    deadline: Option<Duration>,
    (start, attempts): (Instant, u32),
    failure: Failure,
) -> TransportError {
    match failure.cause() {
        Ok(last) => TransportError::Connect(Box::new(ConnectError {
            address: target.to_string(),
            deadline,
            elapsed: start.elapsed(),
            attempts,
            last,
        })),
        Err(fatal) => fatal,
    }
}

/// `fut`, failing with a timeout in `phase` past `deadline` (if any).
#[cfg(feature = "tls")]
async fn by<T>(
    deadline: Option<Instant>,
    phase: TimeoutPhase,
    fut: impl std::future::Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut)
            .await
            .unwrap_or(Err(TransportError::Timeout { phase })),
        None => fut.await,
    }
}

/// Connects to `address` as Dask's `connect()` does (see
/// [`ConnectionBuilder::connect_socket`](super::ConnectionBuilder::connect_socket)).
pub(super) async fn connect_socket(
    address: &Address,
    tls: Option<&TlsConfig>,
    tcp_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
) -> Result<Socket, TransportError> {
    let dial = Dial { tls, tcp_timeout };
    retry(address, connect_timeout, |deadline| {
        dial.attempt(address, deadline)
    })
    .await
}

#[cfg(not(feature = "tls"))]
fn no_tls_feature() -> TransportError {
    TransportError::Tls(TlsError::new("tls:// needs framewire's `tls` feature"))
}

#[cfg(feature = "tls")]
fn no_tls_config() -> TransportError {
    TransportError::Tls(TlsError::new(
        "a tls:// address needs certificates (a CA file, a certificate and a key)",
    ))
}

#[cfg(feature = "tls")]
fn server_name(host: &str) -> Result<rustls_pki_types::ServerName<'static>, TransportError> {
    rustls_pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| TransportError::Tls(TlsError::new(format!("{host}: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attempts `retry` makes with a connect timeout of 10 s when each
    /// fails as `fail` says after `takes`: for each, when it started and the
    /// deadline it was given (from the start), in tokio's paused time.
    fn attempts(
        takes: Duration,
        fail: fn() -> Failure,
    ) -> (Vec<(Duration, Duration)>, TransportError) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let start = Instant::now();
            let mut seen = Vec::new();
            let address = Address::Tcp("h:1".into());
            let err = retry(&address, Some(Duration::from_secs(10)), |deadline| {
                let deadline = deadline.expect("a deadline");
                seen.push((start.elapsed(), deadline - start));
                async move {
                    tokio::time::sleep_until(deadline.min(Instant::now() + takes)).await;
                    Err::<(), _>(fail())
                }
            })
            .await
            .unwrap_err();
            (seen, err)
        })
    }

    #[test]
    fn attempts_back_off_as_dask_connect() {
        // Refused at once: attempt k waits up to 10 ms × 2^(k-1) before
        // the next, at random; the first has a fifth of the timeout.
        let refused = || Failure::Retry(io::ErrorKind::ConnectionRefused.into());
        let (seen, err) = attempts(Duration::ZERO, refused);
        assert_eq!(seen[0], (Duration::ZERO, Duration::from_secs(2)));
        for (k, pair) in seen.windows(2).enumerate() {
            let wait = pair[1].0 - pair[0].0;
            assert!(
                wait <= BACKOFF_BASE * (1 << k.min(20)),
                "attempt {k}: waited {wait:?}"
            );
            assert_eq!(
                pair[1].1,
                Duration::from_secs(10),
                "later attempts: the time left"
            );
        }
        let TransportError::Connect(e) = err else {
            panic!("{err:?}")
        };
        assert_eq!(e.attempts() as usize, seen.len());
        assert!(e.elapsed() >= Duration::from_secs(10));
        // Jittered: the waits are not all the same fraction of their bound.
        let waits: std::collections::HashSet<Duration> =
            seen.windows(2).map(|p| p[1].0 - p[0].0).collect();
        assert!(waits.len() > 3, "{waits:?}");
    }

    #[test]
    fn an_attempt_that_hangs_is_cut_at_a_fifth_of_the_timeout_then_given_the_rest() {
        let hangs = || Failure::TimedOut(TimeoutPhase::Connect);
        let (seen, err) = attempts(Duration::from_secs(3600), hangs);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0], (Duration::ZERO, Duration::from_secs(2)));
        assert_eq!(seen[1].1, Duration::from_secs(10));
        assert!(
            err.to_string()
                .ends_with("(2 attempts): the last attempt timed out connecting"),
            "{err}"
        );
    }

    #[test]
    fn a_final_failure_stops_the_attempts() {
        let fatal = || Failure::Final(TransportError::Closed);
        let (seen, err) = attempts(Duration::ZERO, fatal);
        assert_eq!(seen.len(), 1);
        assert!(matches!(err, TransportError::Closed), "{err:?}");
    }

    #[test]
    fn keepalive_times_are_dasks() {
        // distributed/comm/tcp.py's set_tcp_timeout, by hand: (idle, interval).
        assert_eq!(keepalive_times(11), (1, 1));
        assert_eq!(keepalive_times(30), (10, 2));
        assert_eq!(keepalive_times(45), (15, 3));
        assert_eq!(keepalive_times(100), (30, 7));
    }

    #[test]
    fn addresses_parse_as_dask_reads_them() {
        let tcp = |a: &str| Address::Tcp(a.into());
        assert_eq!(
            Address::parse("tcp://127.0.0.1:8786"),
            Ok(tcp("127.0.0.1:8786"))
        );
        assert_eq!(Address::parse("localhost:1"), Ok(tcp("localhost:1")));
        assert_eq!(Address::parse("tcp://[::1]:8786"), Ok(tcp("[::1]:8786")));
        let tls = Address::parse("tls://[::1]:8786").unwrap();
        assert_eq!((tls.host(), tls.is_tls()), ("::1", true));
        assert_eq!(tls.to_string(), "tls://[::1]:8786");
        assert!(Address::parse("ucx://a:1")
            .unwrap_err()
            .to_string()
            .contains("not ucx://"));
        for bad in ["tcp://a", "tcp://:80", "tls://a:99999", ""] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }
}
