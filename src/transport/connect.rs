//! Connecting and accepting: a socket (`tcp://`, or `tls://` with the
//! builder's certificates; connecting retried as Dask's `connect()`), then
//! the Dask handshake. Above the connection, the socket and the handshake,
//! which it puts together.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs};

use super::conn::{Connection, ConnectionBuilder};
use super::error::{TimeoutPhase, TransportError};
use super::handshake::{exchange, HandshakeOptions};
use super::session::Negotiated;
use super::socket::{self, Address, Socket};

impl ConnectionBuilder {
    /// Connects to a Dask address — `tcp://`, or `tls://` with the
    /// builder's [`tls`][tls] certificates — as
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
    ///     .connect_address("tcp://127.0.0.1:8786", &HandshakeOptions::default())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_address(
        &self,
        address: &str,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let address = Address::parse(address)?;
        let socket = self.connect_socket(&address).await?;
        self.handshake(socket, opts).await
    }

    /// Connects to `address` as Dask's `connect()` does
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

    /// [`connect_socket`](ConnectionBuilder::connect_socket) to the
    /// addresses `addr` resolves to (resolved once), plain TCP.
    pub(crate) async fn connect_tcp<A: ToSocketAddrs>(
        &self,
        addr: A,
    ) -> Result<TcpStream, TransportError> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr).await?.collect();
        socket::connect_tcp(
            &addrs,
            self.tcp_timeout_setting(),
            self.connect_timeout_setting(),
        )
        .await
    }

    /// Takes an accepted TCP stream, does the TLS handshake when the builder
    /// has [`tls`][tls] certificates (see
    /// [`Socket::accept`]), then the Dask handshake, all within
    /// `opts.timeout`.
    ///
    #[cfg_attr(feature = "tls", doc = "[tls]: ConnectionBuilder::tls")]
    #[cfg_attr(not(feature = "tls"), doc = "[tls]: crate#cargo-features")]
    pub async fn accept_socket(
        &self,
        stream: TcpStream,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<Socket>, Negotiated), TransportError> {
        let accept = Socket::accept_by(stream, self.tls_config(), None, self.tcp_timeout_setting());
        let socket = within(opts, accept).await?;
        self.handshake(socket, opts).await
    }

    /// Wraps `io` and exchanges the Dask handshake (see [`handshake`](super::handshake)).
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

    /// Connects over TCP to what `addr` resolves to (resolved once), retrying
    /// as [`connect_socket`](ConnectionBuilder::connect_socket) does until the
    /// [`connect_timeout`](ConnectionBuilder::connect_timeout), with
    /// `TCP_NODELAY` and the [`tcp_timeout`](ConnectionBuilder::tcp_timeout)
    /// set, as Dask does; then exchanges the handshake.
    pub async fn connect<A: ToSocketAddrs>(
        &self,
        addr: A,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<TcpStream>, Negotiated), TransportError> {
        let stream = self.connect_tcp(addr).await?;
        self.handshake(stream, opts).await
    }

    /// Takes an accepted TCP stream (setting `TCP_NODELAY` and the
    /// [`tcp_timeout`](ConnectionBuilder::tcp_timeout)) and exchanges the
    /// handshake.
    pub async fn accept(
        &self,
        stream: TcpStream,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<TcpStream>, Negotiated), TransportError> {
        stream.set_nodelay(true)?;
        socket::set_tcp_timeout(&stream, self.tcp_timeout_setting())?;
        self.handshake(stream, opts).await
    }
}

impl Connection<TcpStream> {
    /// Connects over TCP and exchanges the handshake, with default options
    /// (use [`ConnectionBuilder::connect`] for others).
    pub async fn connect<A: ToSocketAddrs>(
        addr: A,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<TcpStream>, Negotiated), TransportError> {
        ConnectionBuilder::default().connect(addr, opts).await
    }

    /// Exchanges the handshake on an accepted TCP stream, with default
    /// options (use [`ConnectionBuilder::accept`] for others).
    pub async fn accept(
        stream: TcpStream,
        opts: &HandshakeOptions,
    ) -> Result<(Connection<TcpStream>, Negotiated), TransportError> {
        ConnectionBuilder::default().accept(stream, opts).await
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
