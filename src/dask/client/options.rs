//! [`ClientOptions`]: how a [`Client`](super::Client) connects and behaves.

use std::time::Duration;

use crate::dask::{DEFAULT_CONNECTION_LIMIT, DEFAULT_IDLE_PER_ADDRESS};
use crate::serialize::Registry;
use crate::transport::{ConnectionBuilder, HandshakeOptions};

/// How a [`Client`](super::Client) connects and behaves: a builder over private settings,
/// each set by the method of its name (every default is Dask's client's).
///
/// ```
/// use std::time::Duration;
/// use framewire::dask::ClientOptions;
///
/// let opts = ClientOptions::new()
///     .heartbeat_interval(Duration::from_secs(2))
///     .timeout(Some(Duration::from_secs(10)))
///     .connection_limit(64);
/// # let _ = opts;
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ClientOptions {
    pub(super) connection: ConnectionBuilder,
    pub(super) handshake: HandshakeOptions,
    pub(super) heartbeat_interval: Duration,
    pub(super) batch_interval: Duration,
    pub(super) timeout: Option<Duration>,
    pub(super) registry: Registry,
    pub(super) idle_connections_per_address: usize,
    pub(super) connection_limit: usize,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connection: ConnectionBuilder::new(),
            handshake: HandshakeOptions::default(),
            heartbeat_interval: Duration::from_secs(5),
            batch_interval: Duration::from_millis(10),
            timeout: Some(Duration::from_secs(30)),
            registry: Registry::default(),
            idle_connections_per_address: DEFAULT_IDLE_PER_ADDRESS,
            connection_limit: DEFAULT_CONNECTION_LIMIT,
        }
    }
}

impl ClientOptions {
    /// Dask's client's defaults.
    pub fn new() -> ClientOptions {
        ClientOptions::default()
    }

    /// Connections to the scheduler and the workers: the connect retry
    /// ([`connect_timeout`](ConnectionBuilder::connect_timeout)), TCP
    /// timeouts, and the certificates for `tls://`
    /// ([`tls`][tls]).
    ///
    #[cfg_attr(feature = "tls", doc = "[tls]: ConnectionBuilder::tls")]
    #[cfg_attr(not(feature = "tls"), doc = "[tls]: crate#cargo-features")]
    pub fn connection(mut self, builder: ConnectionBuilder) -> ClientOptions {
        self.connection = builder;
        self
    }

    /// The handshake (its `timeout` also bounds registering).
    pub fn handshake(mut self, handshake: HandshakeOptions) -> ClientOptions {
        self.handshake = handshake;
        self
    }

    /// Time between `heartbeat-client`s until the scheduler says otherwise
    /// (`adjust-heartbeat-interval`): 5 s, Dask's
    /// `distributed.client.heartbeat` (at least 1 ms).
    pub fn heartbeat_interval(mut self, interval: Duration) -> ClientOptions {
        self.heartbeat_interval = interval;
        self
    }

    /// How the client's stream batches what it sends: 10 ms, as Dask's
    /// client.
    pub fn batch_interval(mut self, interval: Duration) -> ClientOptions {
        self.batch_interval = interval;
        self
    }

    /// How long [`Client::scatter`](super::Client::scatter) waits for a running worker, and how
    /// long the client tries to register again after losing its stream to
    /// the scheduler (30 s, the default `timeout` of Dask's `Client`);
    /// `None`: for ever.
    pub fn timeout(mut self, timeout: Option<Duration>) -> ClientOptions {
        self.timeout = timeout;
        self
    }

    /// The serializer families [`Client::gather`](super::Client::gather) reads values with, as
    /// they arrive (add [`PickleFamily`][PickleFamily],
    /// feature `pickle`, for the values Python pickles: ints, dicts, lists
    /// of arrays...).
    ///
    #[cfg_attr(
        feature = "pickle",
        doc = "[PickleFamily]: crate::pickle::PickleFamily"
    )]
    #[cfg_attr(not(feature = "pickle"), doc = "[PickleFamily]: crate#cargo-features")]
    pub fn registry(mut self, registry: Registry) -> ClientOptions {
        self.registry = registry;
        self
    }

    /// Idle connections kept per server (the scheduler, each worker)
    /// between calls, `gather`s and `scatter`s (a [`ConnectionPool`](crate::dask::ConnectionPool), as
    /// Dask's client keeps its `rpc` pool): [`DEFAULT_IDLE_PER_ADDRESS`];
    /// 0: a connection per call. An idle connection keeps its last large
    /// receive buffer for the next value once every frame in it is dropped
    /// (that memory is not faulted in again), up to
    /// [`max_recycled_buffer`](ConnectionBuilder::max_recycled_buffer) each;
    /// [`recycle_buffers(false)`](ConnectionBuilder::recycle_buffers) on
    /// [`connection`](ClientOptions::connection), or 0 here, gives that
    /// memory back after each call.
    pub fn idle_connections_per_address(mut self, n: usize) -> ClientOptions {
        self.idle_connections_per_address = n;
        self
    }

    /// Connections to the scheduler and the workers open at once, idle or
    /// in use, for calls, `gather`s and `scatter`s (the stream excepted):
    /// [`DEFAULT_CONNECTION_LIMIT`], as Dask's `Client(connection_limit=512)`.
    /// At the limit, idle connections are closed, then a call waits for
    /// one in use (see [`ConnectionPool`](crate::dask::ConnectionPool)).
    pub fn connection_limit(mut self, n: usize) -> ClientOptions {
        self.connection_limit = n;
        self
    }
}
