//! [`Address`] and [`Socket`]: Dask's `tcp://` and `tls://` addresses, and
//! the stream a [`Connection`] runs over for either.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::conn::{Connection, ConnectionBuilder};
use super::error::{TimeoutPhase, TransportError};
use super::handshake::{HandshakeOptions, Negotiated};
#[cfg(feature = "tls")]
use super::tls::{TlsConfig, TlsError};

/// A Dask address: `tcp://HOST:PORT`, `tls://HOST:PORT`, or a bare
/// `HOST:PORT` (TCP), as `distributed.comm.parse_address` reads them.
///
/// ```
/// use framewire::transport::Address;
/// assert_eq!(Address::parse("tcp://127.0.0.1:8786")?, Address::Tcp("127.0.0.1:8786".into()));
/// assert_eq!(Address::parse("tls://[::1]:8786")?, Address::Tls("[::1]:8786".into()));
/// assert_eq!(Address::parse("localhost:8786")?, Address::Tcp("localhost:8786".into()));
/// assert!(Address::parse("ucx://h:1").is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// `tcp://HOST:PORT`.
    Tcp(String),
    /// `tls://HOST:PORT`.
    Tls(String),
}

impl Address {
    /// Parses an address; the error says what is wrong in one line.
    pub fn parse(address: &str) -> Result<Address, String> {
        let (tls, rest) = match address.split_once("://") {
            Some(("tcp", rest)) => (false, rest),
            Some(("tls", rest)) => (true, rest),
            Some((scheme, _)) => {
                return Err(format!(
                    "{address}: only tcp:// and tls:// addresses are supported, not {scheme}://"
                ))
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
            _ => Err(format!(
                "{address}: expected tcp://HOST:PORT or tls://HOST:PORT"
            )),
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
/// TCP (feature `tls`). `TCP_NODELAY` is set, as Dask does.
#[derive(Debug)]
#[non_exhaustive]
pub enum Socket {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS, as the side that connected.
    #[cfg(feature = "tls")]
    TlsClient(Box<tokio_rustls::client::TlsStream<Ciphertext>>),
    /// TLS, as the side that accepted.
    #[cfg(feature = "tls")]
    TlsServer(Box<tokio_rustls::server::TlsStream<Ciphertext>>),
}

/// The TCP stream under TLS, read ahead into a buffer: rustls asks for at
/// most 4 KiB of ciphertext per read, and as many `recv` calls (each one
/// acknowledging, waking the sender) cost more than the decryption.
#[cfg(feature = "tls")]
pub type Ciphertext = tokio::io::BufReader<TcpStream>;

/// How much ciphertext a TLS socket reads from the kernel at once (a
/// buffer each TLS connection keeps; 256 KiB measured no faster over
/// loopback).
#[cfg(feature = "tls")]
const CIPHERTEXT_READ_AHEAD: usize = 64 * 1024;

/// How much encrypted data a TLS socket queues before writing it out:
/// rustls' default (64 KiB) makes a large message as many `writev` calls.
#[cfg(feature = "tls")]
const CIPHERTEXT_WRITE_BEHIND: usize = 1024 * 1024;

impl Socket {
    /// The TCP stream underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Tcp(s) => s,
            #[cfg(feature = "tls")]
            Socket::TlsClient(s) => s.get_ref().0.get_ref(),
            #[cfg(feature = "tls")]
            Socket::TlsServer(s) => s.get_ref().0.get_ref(),
        }
    }

    /// The TLS cipher suite in use (`None` for plain TCP).
    pub fn cipher_suite(&self) -> Option<String> {
        match self {
            Socket::Tcp(_) => None,
            #[cfg(feature = "tls")]
            Socket::TlsClient(s) => s
                .get_ref()
                .1
                .negotiated_cipher_suite()
                .map(|c| format!("{:?}", c.suite())),
            #[cfg(feature = "tls")]
            Socket::TlsServer(s) => s
                .get_ref()
                .1
                .negotiated_cipher_suite()
                .map(|c| format!("{:?}", c.suite())),
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
        match each_socket!(self, s => Pin::new(s).poll_read(cx, buf)) {
            // Python's TLS streams close without a close_notify; the Dask
            // framing is self-delimiting, so a cut inside a message is still
            // caught there, and a close between messages is an end of stream.
            #[cfg(feature = "tls")]
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
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

/// TLS for an address: none for `tcp://`, the config for `tls://` (an
/// error when there is none).
#[cfg(feature = "tls")]
pub type TlsOption<'a> = Option<&'a TlsConfig>;
/// Without the `tls` feature there is no TLS configuration to give.
#[cfg(not(feature = "tls"))]
pub type TlsOption<'a> = Option<&'a std::convert::Infallible>;

impl Socket {
    /// Connects to `address` (`TCP_NODELAY` set) and, for `tls://`, does the
    /// TLS handshake with `tls`: the server's chain is verified, our
    /// certificate presented. No deadline: see [`Socket::connect_within`],
    /// or use [`ConnectionBuilder::connect_address`].
    pub async fn connect(address: &Address, tls: TlsOption<'_>) -> Result<Socket, TransportError> {
        Socket::connect_by(address, tls, None).await
    }

    /// [`Socket::connect`] within `timeout`: the TCP connection and the TLS
    /// handshake together. Past it: [`TransportError::Timeout`] with
    /// [`TimeoutPhase::Connect`] or [`TimeoutPhase::TlsHandshake`], the
    /// step that was under way.
    pub async fn connect_within(
        address: &Address,
        tls: TlsOption<'_>,
        timeout: Duration,
    ) -> Result<Socket, TransportError> {
        Socket::connect_by(address, tls, Some(Instant::now() + timeout)).await
    }

    async fn connect_by(
        address: &Address,
        tls: TlsOption<'_>,
        deadline: Option<Instant>,
    ) -> Result<Socket, TransportError> {
        #[cfg(feature = "tls")]
        if address.is_tls() && tls.is_none() {
            return Err(no_tls_config());
        }
        #[cfg(not(feature = "tls"))]
        if address.is_tls() {
            let _ = tls;
            return Err(no_tls_feature());
        }
        let stream = by(deadline, TimeoutPhase::Connect, async {
            Ok(TcpStream::connect(address.host_port()).await?)
        })
        .await?;
        stream.set_nodelay(true)?;
        match (address, tls) {
            #[cfg(feature = "tls")]
            (Address::Tls(_), Some(config)) => {
                let name = server_name(address.host())?;
                let connector = tokio_rustls::TlsConnector::from(config.client_config().clone());
                let stream = Ciphertext::with_capacity(CIPHERTEXT_READ_AHEAD, stream);
                let mut s = by(deadline, TimeoutPhase::TlsHandshake, async {
                    connector.connect(name, stream).await.map_err(tls_error)
                })
                .await?;
                s.get_mut()
                    .1
                    .set_buffer_limit(Some(CIPHERTEXT_WRITE_BEHIND));
                Ok(Socket::TlsClient(Box::new(s)))
            }
            _ => Ok(Socket::Tcp(stream)),
        }
    }

    /// Takes an accepted TCP stream (`TCP_NODELAY` set) and, when `tls` is
    /// given, does the TLS handshake as the server: a client certificate
    /// signed by the CA is required. No deadline: see
    /// [`Socket::accept_within`], or use [`ConnectionBuilder::accept_socket`].
    pub async fn accept(stream: TcpStream, tls: TlsOption<'_>) -> Result<Socket, TransportError> {
        Socket::accept_by(stream, tls, None).await
    }

    /// [`Socket::accept`] with a deadline on the TLS handshake: a peer that
    /// stalls it (or sends nothing) is refused after `timeout` with
    /// [`TransportError::Timeout`] ([`TimeoutPhase::TlsHandshake`]).
    pub async fn accept_within(
        stream: TcpStream,
        tls: TlsOption<'_>,
        timeout: Duration,
    ) -> Result<Socket, TransportError> {
        Socket::accept_by(stream, tls, Some(Instant::now() + timeout)).await
    }

    async fn accept_by(
        stream: TcpStream,
        tls: TlsOption<'_>,
        deadline: Option<Instant>,
    ) -> Result<Socket, TransportError> {
        stream.set_nodelay(true)?;
        match tls {
            None => Ok(Socket::Tcp(stream)),
            #[cfg(feature = "tls")]
            Some(config) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(config.server_config().clone());
                let stream = Ciphertext::with_capacity(CIPHERTEXT_READ_AHEAD, stream);
                let mut s = by(deadline, TimeoutPhase::TlsHandshake, async {
                    acceptor.accept(stream).await.map_err(tls_error)
                })
                .await?;
                s.get_mut()
                    .1
                    .set_buffer_limit(Some(CIPHERTEXT_WRITE_BEHIND));
                Ok(Socket::TlsServer(Box::new(s)))
            }
            #[cfg(not(feature = "tls"))]
            Some(never) => {
                let _ = deadline;
                match *never {}
            }
        }
    }

    /// Whether it is a TLS stream (its bytes on the wire are ciphertext:
    /// they cannot be moved between sockets as they are, e.g. spliced).
    pub fn is_tls(&self) -> bool {
        !matches!(self, Socket::Tcp(_))
    }
}

/// `fut`, failing with a timeout in `phase` past `deadline` (if any).
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

impl ConnectionBuilder {
    /// Connects to a Dask address — `tcp://`, or `tls://` with the
    /// builder's [`tls`](ConnectionBuilder::tls) certificates (see
    /// [`Socket::connect`]) — and exchanges the Dask handshake, all within
    /// `opts.timeout`.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), framewire::transport::TransportError> {
    /// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
    /// let (mut conn, _) = ConnectionBuilder::new()
    ///     .connect_address("tcp://127.0.0.1:8786", &HandshakeOptions::default())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_address(
        &self,
        address: &str,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let address = Address::parse(address).map_err(address_error)?;
        let socket = within(opts, Socket::connect(&address, self.tls_config())).await?;
        self.handshake(socket, opts).await
    }

    /// Takes an accepted TCP stream, does the TLS handshake when the builder
    /// has [`tls`](ConnectionBuilder::tls) certificates (see
    /// [`Socket::accept`]), then the Dask handshake, all within
    /// `opts.timeout`.
    pub async fn accept_socket(
        &self,
        stream: TcpStream,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let socket = within(opts, Socket::accept(stream, self.tls_config())).await?;
        self.handshake(socket, opts).await
    }
}

/// `fut` within the handshake's deadline.
async fn within<T>(
    opts: &HandshakeOptions,
    fut: impl std::future::Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    match opts.timeout {
        Some(t) => tokio::time::timeout(t, fut)
            .await
            .unwrap_or(Err(TransportError::Timeout {
                phase: TimeoutPhase::Handshake,
            })),
        None => fut.await,
    }
}

fn address_error(e: String) -> TransportError {
    TransportError::Io(io::Error::new(io::ErrorKind::InvalidInput, e))
}

#[cfg(not(feature = "tls"))]
fn no_tls_feature() -> TransportError {
    address_error("tls:// needs framewire's `tls` feature".into())
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

/// A failed TLS handshake: rustls' reason, in one line.
#[cfg(feature = "tls")]
fn tls_error(e: io::Error) -> TransportError {
    let reason = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
        .map(TlsError::handshake);
    match reason {
        Some(r) => TransportError::Tls(r),
        None if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ) =>
        {
            TransportError::Tls(TlsError::new(format!(
                "TLS handshake failed: the peer closed the connection ({e}); is it a tls:// endpoint, with our CA?"
            )))
        }
        None => TransportError::Tls(TlsError::new(format!("TLS handshake failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            .contains("not ucx://"));
        for bad in ["tcp://a", "tcp://:80", "tls://a:99999", ""] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }
}
