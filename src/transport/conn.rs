//! [`Connection`]: the zero-copy message stream over any
//! `AsyncRead + AsyncWrite`, and its [`ReadHalf`] / [`WriteHalf`].
//!
//! ```text
//!              ┌──────────── Connection<T> ────────────┐
//! send(env) ──▶│ Sender:   one queued message, vectored │──▶ T ──▶ peer
//! recv()    ◀──│ Receiver: FrameReader + read buffer     │◀── T ◀── peer
//!              └── into_split() ──▶ ReadHalf<R> + WriteHalf<W>
//! ```
//!
//! * `Stream<Item = Result<Envelope, TransportError>>` and
//!   `Sink<Envelope>`, plus `send` / `recv` helpers.
//! * `recv` is cancel-safe: all state lives in the connection, so a
//!   `recv` dropped by `select!` or `timeout` loses nothing.
//! * `send` is cancel-aware: dropped before any byte is written, the message
//!   is discarded and the connection stays usable; dropped after part of it
//!   was written, the writer is poisoned (later sends fail with
//!   [`TransportError::Poisoned`]), so the peer never sees a message appended
//!   after half a message. Through the `Sink` interface, a queued message is
//!   instead always completed by the next `poll_ready` / `poll_flush`.
//! * Any error (but a refused [`TransportError::Encode`]) poisons the
//!   connection: `recv` returns `None` afterwards, `send` returns `Poisoned`.
//! * Optional per-message deadlines: the read deadline starts with the first
//!   byte of a message (an idle connection to a live peer never times out;
//!   wrap `recv` in `tokio::time::timeout` for that), the write deadline
//!   when a message is queued. A peer that stops answering altogether ends
//!   the connection after the TCP timeout
//!   ([`ConnectionBuilder::tcp_timeout`], SPEC.md §6.4).
//!
//! # Examples
//!
//! ```
//! use bytes::Bytes;
//! use framewire::transport::Connection;
//! use framewire::{Envelope, Limits};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let (a, b) = tokio::io::duplex(1 << 16);
//! let mut a = Connection::new(a);
//! let mut b = Connection::builder().limits(Limits::dask_compat()).build(b);
//! a.send(Envelope::new(vec![Bytes::from_static(b"\xa4ping")])?).await?;
//! let env = b.recv().await.expect("a message")?;
//! assert_eq!(env.frames(), [Bytes::from_static(b"\xa4ping")]);
//! drop(a);
//! assert!(b.recv().await.is_none()); // clean close
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_sink::Sink;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::serialize::SerializeOptions;
use crate::value::Value;

use super::error::TransportError;

use super::read::{FrameReader, Placement, Receiver};
use super::session::Session;
use super::socket;
use super::stats::Stats;
use super::write::Sender;

/// Large receive buffers bigger than this are not kept for reuse: above
/// Dask's 512 MiB arrays (8 shards of 64 MiB, received as one run), so a
/// stream of them is not paying for a fresh, page-faulted buffer each.
const DEFAULT_RECYCLE_LIMIT: usize = 1 << 30;

/// Options for a [`Connection`].
///
/// ```
/// use std::time::Duration;
/// use framewire::transport::Connection;
/// use framewire::Limits;
/// let (a, _b) = tokio::io::duplex(64);
/// let conn = Connection::builder()
///     .limits(Limits::dask_compat())
///     .read_timeout(Some(Duration::from_secs(30)))
///     .build(a);
/// assert!(!conn.is_poisoned());
/// ```
#[derive(Clone, Debug)]
pub struct ConnectionBuilder {
    limits: Limits,
    serialize: SerializeOptions,
    deserialize: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    recycle: bool,
    recycle_limit: usize,
    checksums: bool,
    tcp_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    spill: Option<(std::path::PathBuf, usize)>,
    #[cfg(feature = "tls")]
    tls: Option<super::TlsConfig>,
}

impl Default for ConnectionBuilder {
    fn default() -> ConnectionBuilder {
        ConnectionBuilder {
            limits: Limits::default(),
            serialize: SerializeOptions::default(),
            deserialize: true,
            read_timeout: None,
            write_timeout: None,
            recycle: true,
            recycle_limit: DEFAULT_RECYCLE_LIMIT,
            checksums: false,
            tcp_timeout: Some(socket::DEFAULT_TCP_TIMEOUT),
            connect_timeout: Some(socket::DEFAULT_CONNECT_TIMEOUT),
            #[cfg(all(target_os = "linux", feature = "mmap"))]
            spill: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

impl ConnectionBuilder {
    /// The shortest [`tcp_timeout`](ConnectionBuilder::tcp_timeout): 11 s,
    /// a second for each of the 10 keepalive probes plus one (Dask asserts
    /// the same).
    pub const MIN_TCP_TIMEOUT: Duration = socket::MIN_TCP_TIMEOUT;

    /// Default options: [`Limits::default()`], no per-message deadlines,
    /// recycling on, Dask's TCP and connect timeouts (30 s each).
    pub fn new() -> ConnectionBuilder {
        ConnectionBuilder::default()
    }

    /// Dask's `distributed.comm.timeouts.tcp` (default 30 s): how long a
    /// peer may stop answering before the connection is called dead. Every
    /// TCP socket this builder connects or accepts (plain and TLS) gets TCP
    /// keepalive and, on Linux, `TCP_USER_TIMEOUT` computed from it as
    /// Dask's `set_tcp_timeout` computes them ([`Socket::set_tcp_timeout`](super::Socket::set_tcp_timeout)),
    /// so a peer whose host died or went behind a partition ends `recv` and
    /// `send` within about this time with
    /// [`TransportError::PeerTimeout`](super::TransportError::PeerTimeout),
    /// even on an idle connection. `None` turns keepalive off (the
    /// kernel's defaults: such a connection may wait for hours).
    ///
    /// # Panics
    ///
    /// If the timeout is shorter than [`ConnectionBuilder::MIN_TCP_TIMEOUT`]
    /// (its whole seconds are used, as Dask uses them).
    pub fn tcp_timeout(&mut self, timeout: Option<Duration>) -> &mut ConnectionBuilder {
        if let Some(t) = timeout {
            assert!(
                t.as_secs() >= Self::MIN_TCP_TIMEOUT.as_secs(),
                "tcp_timeout {t:?} is shorter than ConnectionBuilder::MIN_TCP_TIMEOUT (11 s)"
            );
        }
        self.tcp_timeout = timeout;
        self
    }

    /// Dask's `distributed.comm.timeouts.connect` (default 30 s): how long
    /// [`connect`](ConnectionBuilder::connect),
    /// [`connect_socket`](ConnectionBuilder::connect_socket) and
    /// [`connect`](ConnectionBuilder::connect) keep trying to connect, with
    /// Dask's backoff, before they give up with
    /// [`TransportError::Connect`](super::TransportError::Connect). `None`:
    /// one attempt, without a deadline. The handshake that follows has its
    /// own deadline ([`HandshakeOptions::timeout`](super::HandshakeOptions::timeout)).
    pub fn connect_timeout(&mut self, timeout: Option<Duration>) -> &mut ConnectionBuilder {
        self.connect_timeout = timeout;
        self
    }

    pub(crate) fn tcp_timeout_setting(&self) -> Option<Duration> {
        self.tcp_timeout
    }

    pub(crate) fn connect_timeout_setting(&self) -> Option<Duration> {
        self.connect_timeout
    }

    /// Limits for incoming messages (and outgoing ones: the connection
    /// refuses to send what it would refuse to receive). Default:
    /// [`Limits::default()`], which accepts everything a Dask peer sends;
    /// [`Limits::strict()`] for peers not trusted with memory.
    pub fn limits(&mut self, limits: Limits) -> &mut ConnectionBuilder {
        self.limits = limits;
        self
    }

    /// Time allowed to receive one message, from its first byte
    /// ([`TimeoutPhase::ReadPrelude`](super::TimeoutPhase) /
    /// [`ReadFrames`](super::TimeoutPhase)). Default: none.
    pub fn read_timeout(&mut self, timeout: Option<Duration>) -> &mut ConnectionBuilder {
        self.read_timeout = timeout;
        self
    }

    /// Time allowed to write one message once queued
    /// ([`TimeoutPhase::Write`](super::TimeoutPhase)). Default: none.
    pub fn write_timeout(&mut self, timeout: Option<Duration>) -> &mut ConnectionBuilder {
        self.write_timeout = timeout;
        self
    }

    /// Whether the buffer of a large incoming frame is reused for the next
    /// one once the application has dropped every frame in it (default:
    /// on). Saves the first-touch page faults of a fresh buffer per message.
    pub fn recycle_buffers(&mut self, on: bool) -> &mut ConnectionBuilder {
        self.recycle = on;
        self
    }

    /// Receive buffers larger than this are freed rather than kept for reuse
    /// (default 1 GiB). A connection keeps at most one buffer, the last
    /// large one, and only once the application has dropped every frame in
    /// it: after a 512 MiB message that was dropped, an idle connection
    /// still holds 512 MiB (until its next large message reuses it, or the
    /// connection goes). Lower this to bound that memory; messages above
    /// it then pay for a fresh buffer each, first-touch page faults
    /// included (BENCHMARKS.md, the transport's fresh-buffer rows).
    pub fn max_recycled_buffer(&mut self, bytes: usize) -> &mut ConnectionBuilder {
        self.recycle_limit = bytes;
        self
    }

    /// Checksum trailers on every message, both ways, from the start
    /// (SPEC.md §6.2), for connections without a handshake; both peers must
    /// agree. After a handshake, they are on when both sides offered them
    /// ([`HandshakeOptions::checksums`](super::HandshakeOptions)), whatever this says.
    pub fn checksums(&mut self, on: bool) -> &mut ConnectionBuilder {
        self.checksums = on;
        self
    }

    /// Receives runs of large frames of at least `min_run` bytes into an
    /// anonymous memory-mapped file in `dir` ([`SpillBuffer`](crate::mmap::SpillBuffer))
    /// instead of the heap: the frames are `Bytes` over the mapping, and
    /// the page cache, not the process's heap, holds them. The file grows
    /// as bytes arrive (never more than twice what arrived plus
    /// [`Limits::prealloc_cap`]); a full disk is an `Io` error, never a
    /// `SIGBUS` (SPEC.md §6, `mmap` module docs). Linux only.
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    pub fn spill(
        &mut self,
        dir: impl Into<std::path::PathBuf>,
        min_run: usize,
    ) -> &mut ConnectionBuilder {
        self.spill = Some((dir.into(), min_run.max(1)));
        self
    }

    fn reader(&self) -> Receiver {
        let placement = Placement::connection(self.recycle, self.recycle_limit);
        #[cfg(all(target_os = "linux", feature = "mmap"))]
        let placement = placement.spill(self.spill.clone());
        let mut frames = FrameReader::messages(self.limits.clone(), placement);
        frames.set_checksums(self.checksums);
        Receiver::new(frames, self.read_timeout)
    }

    fn writer(&self) -> Sender {
        let mut w = Sender::new(self.limits.clone(), self.write_timeout);
        w.set_checksums(self.checksums);
        w
    }

    /// How [`Connection::send_value`] serializes messages (default:
    /// [`SerializeOptions::default()`]); a handshake replaces their
    /// `compression` with the codec it agreed. The families are also those
    /// [`Connection::recv_value`] deserializes with.
    pub fn serialize_options(&mut self, opts: SerializeOptions) -> &mut ConnectionBuilder {
        self.serialize = opts;
        self
    }

    /// Whether [`Connection::recv_value`] deserializes the blocks of the
    /// messages it receives (`true`, the default: Dask's
    /// `loads_with(deserialize=True)`), or keeps every block as it came
    /// (`false`: Dask's `deserialize=False`, what a relay or a data store
    /// that serves blocks back unchanged wants).
    pub fn deserialize_blocks(&mut self, on: bool) -> &mut ConnectionBuilder {
        self.deserialize = on;
        self
    }

    /// The certificates for `tls://` (feature `tls`): what
    /// [`connect`](ConnectionBuilder::connect) presents and
    /// verifies with for a `tls://` address, and what
    /// [`accept`](ConnectionBuilder::accept) serves TLS with
    /// (without them it accepts plain TCP).
    #[cfg(feature = "tls")]
    pub fn tls(&mut self, config: super::TlsConfig) -> &mut ConnectionBuilder {
        self.tls = Some(config);
        self
    }

    /// The `tls` configuration, if any.
    pub(crate) fn tls_config(&self) -> Option<&super::TlsConfig> {
        #[cfg(feature = "tls")]
        return self.tls.as_ref();
        #[cfg(not(feature = "tls"))]
        None
    }

    fn session(&self) -> Session {
        Session::new(
            self.limits.clone(),
            self.serialize.clone(),
            self.deserialize,
        )
    }

    /// A connection over `io`, without a handshake.
    pub fn build<T>(&self, io: T) -> Connection<T> {
        Connection {
            io,
            reader: self.reader(),
            writer: self.writer(),
            session: self.session(),
        }
    }
}

/// A message stream over `T`: `Stream` of [`Envelope`]s, `Sink` of
/// [`Envelope`]s, with [`send`](Connection::send) / [`recv`](Connection::recv).
///
/// * Writes are zero-copy for large frames: the prelude and frames under
///   [`COALESCE_THRESHOLD`](super::COALESCE_THRESHOLD) (16 KiB) are coalesced into one
///   buffer (a small message is one system call), larger frames go out from
///   their own `Bytes` in vectored writes of at most
///   1024 slices (Linux's `IOV_MAX`).
/// * Reads check the prelude against [`Limits`] before allocating, read
///   small frames into one shared buffer and frames of at least
///   64 KiB into a buffer of
///   their own, which is reused for the next large message once the
///   application has dropped every frame in it ([`ConnectionBuilder::recycle_buffers`]).
/// * `recv` is cancel-safe; `send` dropped before writing anything discards
///   its message, dropped after writing part of it poisons the writer, so a
///   later message is never appended after half a message. Through the
///   `Sink` interface a queued message is always completed first.
/// * Any error but [`TransportError::Encode`] poisons the connection:
///   `recv` returns `None` afterwards and `send` returns
///   [`TransportError::Poisoned`].
/// * Optional per-message deadlines ([`ConnectionBuilder::read_timeout`],
///   [`ConnectionBuilder::write_timeout`]). The read deadline starts at a message's
///   first byte; an idle connection to a live peer never times out, and one
///   whose peer stopped answering ends after
///   [`ConnectionBuilder::tcp_timeout`] ([`TransportError::PeerTimeout`]).
///
/// # Examples
///
/// ```no_run
/// use framewire::transport::{Connection, HandshakeOptions};
/// use framewire::serialize::DeserializeOptions;
/// use framewire::{dumps, loads_with, Envelope, Limits, Value};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// // A Dask scheduler's RPC port: connect, handshake, one request and its reply.
/// let (mut conn, agreed) = Connection::builder()
///     .limits(Limits::dask_compat())
///     .connect("127.0.0.1:8786", &HandshakeOptions::default())
///     .await?;
/// assert!(agreed.pickle_protocol() >= 4);
/// let msg = Value::map_of([("op", Value::str("identity")), ("reply", Value::Bool(true))]);
/// conn.send(Envelope::new(dumps(&msg)?)?).await?;
/// let reply = conn.recv().await.ok_or("closed")??;
/// println!("{:?}", loads_with(reply.frames(), &DeserializeOptions::default().backed_by(&reply))?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Connection<T> {
    io: T,
    reader: Receiver,
    writer: Sender,
    session: Session,
}

impl Connection<()> {
    /// Options for a connection (`Connection::builder()...build(io)`).
    pub fn builder() -> ConnectionBuilder {
        ConnectionBuilder::default()
    }
}

impl<T> Connection<T> {
    /// A connection over `io` with default options ([`Limits::default()`], no
    /// deadlines), without a handshake.
    pub fn new(io: T) -> Connection<T> {
        ConnectionBuilder::default().build(io)
    }

    /// The underlying IO.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// The underlying IO. Reading or writing it directly desynchronizes the
    /// stream.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.io
    }

    /// Whether an error (or a cancelled partial send) made the connection
    /// unusable.
    pub fn is_poisoned(&self) -> bool {
        self.reader.is_poisoned() || self.writer.is_poisoned()
    }

    /// Bytes currently reserved for reading: the read-ahead buffer plus the
    /// buffer of a large frame being received. Bounded by twice what has
    /// arrived plus [`Limits::prealloc_cap`], whatever the peer declares.
    pub fn read_reserved(&self) -> usize {
        self.reader.reserved()
    }

    /// What this connection has sent and received so far.
    pub fn stats(&self) -> Stats {
        Stats::merge(self.writer.stats(), self.reader.received())
    }

    /// This connection's settings: its limits and, after a handshake, what
    /// was agreed (the codec...), with the options they make.
    pub fn session(&self) -> &Session {
        &self.session
    }

    pub(crate) fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    pub(crate) fn poison(&mut self) {
        self.reader.poison();
        self.writer.poison();
    }

    pub(crate) fn parts(&mut self) -> (&mut T, &mut Receiver, &mut Sender) {
        (&mut self.io, &mut self.reader, &mut self.writer)
    }

    /// A message [`Connection::recv`] gave, decoded as
    /// [`Connection::recv_value`] decodes it (with this connection's
    /// limits and `deserialize_blocks`; an error poisons the connection):
    /// for a caller that looks at the frames before deciding to decode
    /// (a batched stream that skips what it cannot read, say).
    pub fn decode_value(&mut self, env: &Envelope) -> Result<Value, TransportError> {
        let r = self.reader.decode_value(env, &self.session);
        if r.is_err() {
            self.writer.poison();
        }
        r
    }

    /// The halves of the stream `split` makes of the IO, with this
    /// connection's state.
    fn split_with<R, W>(self, split: impl FnOnce(T) -> (R, W)) -> (ReadHalf<R>, WriteHalf<W>) {
        let Connection {
            io,
            reader,
            writer,
            session,
        } = self;
        let (r, w) = split(io);
        let read = ReadHalf {
            io: r,
            reader,
            session: session.clone(),
        };
        (
            read,
            WriteHalf {
                io: w,
                writer,
                session,
            },
        )
    }

    /// A receive error ends the connection both ways (the stream is out of
    /// sync, or gone).
    fn received<M>(
        &mut self,
        r: Option<Result<M, TransportError>>,
    ) -> Option<Result<M, TransportError>> {
        if let Some(Err(_)) = &r {
            self.writer.poison();
        }
        r
    }

    /// A send error ends the connection both ways (the writer stopped
    /// itself), unless the message was refused before a byte was written
    /// ([`TransportError::Encode`]).
    fn sent(&mut self, r: Result<(), TransportError>) -> Result<(), TransportError> {
        if let Err(e) = &r {
            if e.is_fatal() {
                self.reader.poison();
            }
        }
        r
    }

    /// A `Sink` call's error ends the connection both ways, unless the
    /// message was refused before a byte was written.
    fn write_result(
        &mut self,
        r: Poll<Result<(), TransportError>>,
    ) -> Poll<Result<(), TransportError>> {
        if let Poll::Ready(Err(e)) = &r {
            if e.is_fatal() {
                self.poison();
            }
        }
        r
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Connection<T> {
    /// Sends one message and flushes. Dropped before any byte is written, the
    /// message is discarded; dropped after part of it was written, the
    /// writer is poisoned.
    pub async fn send(&mut self, env: Envelope) -> Result<(), TransportError> {
        let r = self.writer.send(&mut self.io, &env).await;
        self.sent(r)
    }

    /// The next message; `None` after a clean close or after an error was
    /// returned. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Result<Envelope, TransportError>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Sends a whole message: `value` serialized with the session's options
    /// (the agreed codec) as [`crate::dumps_with`] does, then sent as
    /// [`Connection::send`] does (payload frames never copied).
    pub async fn send_value(&mut self, value: &Value) -> Result<(), TransportError> {
        let r = self
            .writer
            .send_value(&mut self.io, &self.session, value)
            .await;
        self.sent(r)
    }

    /// Sends a typed message: written with the session's options by
    /// [`to_frames`](crate::typed::to_frames) (the bytes
    /// [`Connection::send_value`] of its [`to_value`](crate::to_value)
    /// would send, without building the value), then sent as
    /// [`Connection::send`] does.
    #[cfg(feature = "serde")]
    pub async fn send_msg<M: serde::Serialize + ?Sized>(
        &mut self,
        msg: &M,
    ) -> Result<(), TransportError> {
        let r = self.writer.send_msg(&mut self.io, &self.session, msg).await;
        self.sent(r)
    }

    /// The next typed message: received as [`Connection::recv`] does, then
    /// read by [`from_frames`](crate::typed::from_frames) as
    /// [`Connection::recv_value`] and [`from_value`](crate::from_value)
    /// would read it. A message that does not decode is an error, one that
    /// does not fit `M` is [`DecodeError::Field`](crate::DecodeError::Field);
    /// either poisons the connection. Cancel-safe.
    #[cfg(feature = "serde")]
    pub async fn recv_msg<M: serde::de::DeserializeOwned>(
        &mut self,
    ) -> Option<Result<M, TransportError>> {
        let r = self.reader.recv_msg(&mut self.io, &self.session).await;
        self.received(r)
    }

    /// The next whole message: received as [`Connection::recv`] does, then
    /// decoded and its blocks deserialized as [`crate::loads`] does, backed by
    /// the receive buffers (shards merge without a copy). A message that
    /// does not decode is an error, and poisons the connection like any
    /// other. Cancel-safe.
    pub async fn recv_value(&mut self) -> Option<Result<Value, TransportError>> {
        let r = self.reader.recv_value(&mut self.io, &self.session).await;
        self.received(r)
    }

    /// Polls for the next message (what `Stream::poll_next` does).
    pub fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Envelope, TransportError>>> {
        let r = self.reader.poll_recv(&mut self.io, cx);
        if let Poll::Ready(r) = r {
            return Poll::Ready(self.received(r));
        }
        Poll::Pending
    }

    /// Flushes and shuts down the write direction.
    pub async fn close(&mut self) -> Result<(), TransportError> {
        poll_fn(|cx| self.writer.poll_close(&mut self.io, cx)).await
    }

    /// Splits into independently usable halves (through
    /// [`tokio::io::split`]); buffered bytes and state go with them.
    #[allow(clippy::type_complexity)]
    pub fn into_split(
        self,
    ) -> (
        ReadHalf<tokio::io::ReadHalf<T>>,
        WriteHalf<tokio::io::WriteHalf<T>>,
    ) {
        self.split_with(tokio::io::split)
    }
}

impl Connection<TcpStream> {
    /// Splits a TCP connection into owned halves (no lock between them, unlike
    /// [`Connection::into_split`]).
    pub fn into_tcp_split(
        self,
    ) -> (
        ReadHalf<tokio::net::tcp::OwnedReadHalf>,
        WriteHalf<tokio::net::tcp::OwnedWriteHalf>,
    ) {
        self.split_with(TcpStream::into_split)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Stream for Connection<T> {
    type Item = Result<Envelope, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Sink<Envelope> for Connection<T> {
    type Error = TransportError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        let r = this.writer.poll_ready(&mut this.io, cx);
        this.write_result(r)
    }

    fn start_send(self: Pin<&mut Self>, env: Envelope) -> Result<(), TransportError> {
        self.get_mut().writer.start_send(&env)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        let r = this.writer.poll_flush(&mut this.io, cx);
        this.write_result(r)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        let r = this.writer.poll_close(&mut this.io, cx);
        this.write_result(r)
    }
}

/// The receiving half of a [`Connection`]: a `Stream` of messages.
#[derive(Debug)]
pub struct ReadHalf<R> {
    io: R,
    reader: Receiver,
    session: Session,
}

impl<R: AsyncRead + Unpin> ReadHalf<R> {
    /// A receiving half over `r` with the builder's options (for example an
    /// owned half of a stream split some other way).
    pub fn new(r: R, builder: &ConnectionBuilder) -> ReadHalf<R> {
        ReadHalf {
            io: r,
            reader: builder.reader(),
            session: builder.session(),
        }
    }

    /// The next message; `None` after a clean close or after an error was
    /// returned. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Result<Envelope, TransportError>> {
        self.reader.recv(&mut self.io).await
    }

    /// The next whole message, decoded; see [`Connection::recv_value`].
    pub async fn recv_value(&mut self) -> Option<Result<Value, TransportError>> {
        self.reader.recv_value(&mut self.io, &self.session).await
    }

    /// A message [`ReadHalf::recv`] gave, decoded as
    /// [`ReadHalf::recv_value`] decodes it (an error poisons this half);
    /// see [`Connection::decode_value`].
    pub fn decode_value(&mut self, env: &Envelope) -> Result<Value, TransportError> {
        self.reader.decode_value(env, &self.session)
    }

    /// The next typed message; see [`Connection::recv_msg`].
    #[cfg(feature = "serde")]
    pub async fn recv_msg<M: serde::de::DeserializeOwned>(
        &mut self,
    ) -> Option<Result<M, TransportError>> {
        self.reader.recv_msg(&mut self.io, &self.session).await
    }

    /// The connection's settings, as they were when it was split.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Whether an error stopped this half.
    pub fn is_poisoned(&self) -> bool {
        self.reader.is_poisoned()
    }

    /// See [`Connection::read_reserved`].
    pub fn read_reserved(&self) -> usize {
        self.reader.reserved()
    }

    /// What this half has received (its send counters are zero).
    pub fn stats(&self) -> Stats {
        self.reader.received().into()
    }

    /// Expects (or stops expecting) checksum trailers from the next message
    /// on (SPEC.md §6.2): for relays that watched two peers agree on them.
    pub fn set_checksums(&mut self, on: bool) {
        self.reader.set_checksums(on);
    }
}

impl<R: AsyncRead + Unpin> Stream for ReadHalf<R> {
    type Item = Result<Envelope, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.reader.poll_recv(&mut this.io, cx)
    }
}

/// The sending half of a [`Connection`]: a `Sink` of messages.
#[derive(Debug)]
pub struct WriteHalf<W> {
    io: W,
    writer: Sender,
    session: Session,
}

impl<W: AsyncWrite + Unpin> WriteHalf<W> {
    /// A sending half over `w` with the builder's options.
    pub fn new(w: W, builder: &ConnectionBuilder) -> WriteHalf<W> {
        WriteHalf {
            io: w,
            writer: builder.writer(),
            session: builder.session(),
        }
    }

    /// Sends one message and flushes; see [`Connection::send`].
    pub async fn send(&mut self, env: Envelope) -> Result<(), TransportError> {
        self.writer.send(&mut self.io, &env).await
    }

    /// Sends a whole message; see [`Connection::send_value`].
    pub async fn send_value(&mut self, value: &Value) -> Result<(), TransportError> {
        self.writer
            .send_value(&mut self.io, &self.session, value)
            .await
    }

    /// Sends a typed message; see [`Connection::send_msg`].
    #[cfg(feature = "serde")]
    pub async fn send_msg<M: serde::Serialize + ?Sized>(
        &mut self,
        msg: &M,
    ) -> Result<(), TransportError> {
        self.writer.send_msg(&mut self.io, &self.session, msg).await
    }

    /// The connection's settings, as they were when it was split.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Flushes and shuts down the write direction.
    pub async fn close(&mut self) -> Result<(), TransportError> {
        poll_fn(|cx| self.writer.poll_close(&mut self.io, cx)).await
    }

    /// Whether an error or a cancelled partial send stopped this half.
    pub fn is_poisoned(&self) -> bool {
        self.writer.is_poisoned()
    }

    /// What this half has sent (its receive counters are zero).
    pub fn stats(&self) -> Stats {
        self.writer.stats()
    }

    /// The underlying writer; a message still queued is dropped.
    pub fn into_inner(self) -> W {
        self.io
    }

    /// Appends (or stops appending) checksum trailers from the next message
    /// on (SPEC.md §6.2): for relays that watched two peers agree on them.
    pub fn set_checksums(&mut self, on: bool) {
        self.writer.set_checksums(on);
    }
}

impl<W: AsyncWrite + Unpin> Sink<Envelope> for WriteHalf<W> {
    type Error = TransportError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        this.writer.poll_ready(&mut this.io, cx)
    }

    fn start_send(self: Pin<&mut Self>, env: Envelope) -> Result<(), TransportError> {
        self.get_mut().writer.start_send(&env)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        this.writer.poll_flush(&mut this.io, cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        let this = self.get_mut();
        this.writer.poll_close(&mut this.io, cx)
    }
}
