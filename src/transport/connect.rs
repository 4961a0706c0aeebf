//! Connecting and accepting: a socket (`tcp://`, or `tls://` with the
//! builder's certificates; connecting retried as Dask's `connect()`), then
//! the Dask handshake. Above the connection, the socket and the handshake,
//! which it puts together.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::conn::{Connection, ConnectionBuilder};
use super::error::{TimeoutPhase, TransportError};
use super::handshake::{exchange, HandshakeOptions};
use super::session::Negotiated;
use super::socket::{self, Address, Socket};

impl ConnectionBuilder {
    /// Connects to a Dask address (`tcp://HOST:PORT`, `HOST:PORT`, or
    /// `tls://HOST:PORT` with the builder's [`tls`][tls] certificates) as
    /// [`connect_socket`](ConnectionBuilder::connect_socket) does (retrying
    /// until the [`connect_timeout`](ConnectionBuilder::connect_timeout)),
    /// then exchanges the Dask handshake within `opts.timeout`.
    ///
    #[cfg_attr(feature = "tls", doc = "[tls]: ConnectionBuilder::tls")]
    #[cfg_attr(not(feature = "tls"), doc = "[tls]: crate#cargo-features")]
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), framewire::transport::TransportError> {
    /// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
    /// let (mut conn, _) = ConnectionBuilder::new()
    ///     .connect("tcp://127.0.0.1:8786", &HandshakeOptions::default())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(
        &self,
        address: &str,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let address = Address::parse(address)?;
        let socket = self.connect_socket(&address).await?;
        self.handshake(socket, opts).await
    }

    /// Takes an accepted TCP stream (setting `TCP_NODELAY` and the
    /// [`tcp_timeout`](ConnectionBuilder::tcp_timeout)), does the TLS
    /// handshake when the builder has [`tls`][tls] certificates (a client
    /// certificate signed by the CA is required), then the Dask handshake,
    /// all within `opts.timeout`.
    ///
    #[cfg_attr(feature = "tls", doc = "[tls]: ConnectionBuilder::tls")]
    #[cfg_attr(not(feature = "tls"), doc = "[tls]: crate#cargo-features")]
    pub async fn accept(
        &self,
        stream: TcpStream,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let accept = Socket::accept_by(stream, self.tls_config(), None, self.tcp_timeout_setting());
        let socket = within(opts, accept).await?;
        self.handshake(socket, opts).await
    }

    /// Wraps `io` (any byte stream: a socket of your own, an in-memory
    /// pipe) and exchanges the Dask handshake: both sides send theirs at
    /// once, then agree (see [`HandshakeOptions`], [`Negotiated`]). Writing
    /// and reading run concurrently, as in Dask, so two peers that both
    /// write first never deadlock, even on a pipe smaller than a handshake.
    ///
    /// ```
    /// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
    /// let (a, b) = tokio::io::duplex(1 << 16);
    /// let (builder, opts) = (ConnectionBuilder::new(), HandshakeOptions::default());
    /// let (left, right) = tokio::join!(builder.handshake(a, &opts), builder.handshake(b, &opts));
    /// assert_eq!(left?.1.pickle_protocol(), right?.1.pickle_protocol());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn handshake<T>(
        &self,
        io: T,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<T>, Negotiated), TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let mut conn = self.build(io);
        let agreed = exchange(&mut conn, opts).await?;
        Ok((conn, agreed))
    }

    /// For a relay, which carries bytes without a handshake of its own:
    /// connects to `address` as Dask's `connect()` does
    /// (`distributed/comm/core.py`): attempts until the builder's
    /// [`connect_timeout`](ConnectionBuilder::connect_timeout) (default
    /// 30 s) has passed, the first ones each capped at a fifth of it, with
    /// "full jitter" exponential backoff between them (a random wait up to
    /// 10 ms × 2^attempt, at most the time left). Retries are for the TCP
    /// connection: refused, unreachable, a name that does not resolve (yet),
    /// an attempt that ran out of time (in the TLS handshake too). A failed
    /// TLS handshake is final at once (Dask's `FatalCommClosedError` for an
    /// `SSLError`): retrying a wrong certificate helps nobody. At the deadline, a
    /// [`TransportError::Connect`] names the address, the time and the last
    /// cause.
    ///
    /// The socket gets `TCP_NODELAY` and the builder's
    /// [`tcp_timeout`](ConnectionBuilder::tcp_timeout) ([`Socket::set_tcp_timeout`]).
    pub async fn connect_socket(&self, address: &Address) -> Result<Socket, TransportError> {
        socket::connect_socket(
            address,
            self.tls_config(),
            self.tcp_timeout_setting(),
            self.connect_timeout_setting(),
        )
        .await
    }

    /// For a relay: takes an accepted TCP stream (`TCP_NODELAY` and the
    /// [`tcp_timeout`](ConnectionBuilder::tcp_timeout) set) and, when the
    /// builder has [`tls`][tls] certificates, does the TLS handshake as the
    /// server (a client certificate signed by the CA is required), within
    /// `timeout`: a peer that stalls it (or sends nothing) is refused with
    /// [`TransportError::Timeout`] ([`TimeoutPhase::TlsHandshake`]).
    ///
    #[cfg_attr(feature = "tls", doc = "[tls]: ConnectionBuilder::tls")]
    #[cfg_attr(not(feature = "tls"), doc = "[tls]: crate#cargo-features")]
    pub async fn accept_socket(
        &self,
        stream: TcpStream,
        timeout: Option<Duration>,
    ) -> Result<Socket, TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        Socket::accept_by(
            stream,
            self.tls_config(),
            deadline,
            self.tcp_timeout_setting(),
        )
        .await
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
