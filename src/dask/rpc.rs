//! [`Rpc`]: requests and replies on one connection to a Dask server, as
//! `distributed.core.rpc` makes them.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};

use bytes::Bytes;

use super::{ErrorReply, GetData, GetDataReply};
use crate::envelope::Envelope;
use crate::error::{EncodeError, ErrorKind};
use crate::message::{self, HeaderRules};
use crate::msgpack;
use crate::protocol::DecodeError;
use crate::transport::{
    decode_msg, Connection, ConnectionBuilder, HandshakeOptions, Socket, TransportError,
};
use crate::typed;
use crate::value::Value;

/// An error reply from the server: its handler raised (`"uncaught-error"`)
/// or reported an error (`"error"`), with Dask's texts.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteError {
    /// `"error"` or `"uncaught-error"`.
    pub status: String,
    /// `repr` of the exception, e.g. `"KeyError('x')"`.
    pub exception_text: String,
    /// The formatted traceback.
    pub traceback_text: String,
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server answered {}: {}",
            self.status, self.exception_text
        )
    }
}

impl std::error::Error for RemoteError {}

/// What can stop a call: its cause ([`RpcError::cause`], with
/// [`kind`](RpcError::kind) to branch on) and, where known, the op it was
/// calling and the address it was calling it on, which its `Display` names
/// (`calling gather on tcp://10.0.0.5:8786: the server closed the
/// connection without replying`).
///
/// ```
/// use framewire::dask::RpcError;
/// use framewire::ErrorKind;
///
/// fn worth_retrying(e: &RpcError) -> bool {
///     matches!(e.kind(), ErrorKind::Connect | ErrorKind::Closed | ErrorKind::PeerTimeout)
/// }
/// # let _ = worth_retrying;
/// ```
#[derive(Debug)]
pub struct RpcError {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    cause: RpcCause,
    op: Option<String>,
    address: Option<String>,
}

/// The cause of an [`RpcError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RpcCause {
    /// The connection failed.
    Transport(TransportError),
    /// The request could not be written.
    Encode(EncodeError),
    /// The reply is not what the call expects (a field, a type).
    Decode(DecodeError),
    /// The server answered with Dask's error reply.
    Remote(RemoteError),
    /// The server closed the connection without replying.
    Closed,
}

impl RpcError {
    /// The server closed the connection without replying.
    pub(crate) fn closed() -> RpcError {
        RpcCause::Closed.into()
    }

    /// This error, naming the op that was called and the address it was
    /// called on (either kept if already known).
    pub(crate) fn calling(mut self, op: Option<&str>, address: Option<&str>) -> RpcError {
        let inner = &mut *self.inner;
        if inner.op.is_none() {
            inner.op = op.map(str::to_owned);
        }
        if inner.address.is_none() {
            inner.address = address.map(str::to_owned);
        }
        self
    }

    /// What kind of failure this is, to branch on: the transport's kind
    /// for a failed connection ([`TransportError::kind`]), else the call's
    /// own (an error reply is [`ErrorKind::Remote`], a reply not of the
    /// expected shape [`ErrorKind::UnexpectedReply`]).
    pub fn kind(&self) -> ErrorKind {
        match &self.inner.cause {
            RpcCause::Transport(e) => e.kind(),
            RpcCause::Encode(_) => ErrorKind::Encode,
            RpcCause::Decode(_) => ErrorKind::UnexpectedReply,
            RpcCause::Remote(_) => ErrorKind::Remote,
            RpcCause::Closed => ErrorKind::Closed,
        }
    }

    /// What stopped the call.
    pub fn cause(&self) -> &RpcCause {
        &self.inner.cause
    }

    /// What stopped the call, by value.
    pub fn into_cause(self) -> RpcCause {
        self.inner.cause
    }

    /// The server's error reply, when this is one.
    pub fn remote(&self) -> Option<&RemoteError> {
        match &self.inner.cause {
            RpcCause::Remote(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the peer could not be reached or went away (a refused or
    /// timed-out connect, an I/O error, a peer that stopped answering, a
    /// connection closed): what Dask's worker retries its registration on
    /// (`OSError`, which `CommClosedError` is, and timeouts:
    /// `Worker._register_with_scheduler`). A refusal in the handshake (TLS,
    /// an unreadable greeting), a request that cannot be written, an
    /// unexpected reply or an error reply are not: trying again gives the
    /// same.
    pub fn is_unreachable(&self) -> bool {
        match &self.inner.cause {
            RpcCause::Closed => true,
            RpcCause::Transport(t) => matches!(
                t,
                TransportError::Connect(_)
                    | TransportError::Timeout { .. }
                    | TransportError::Io(_)
                    | TransportError::PeerTimeout(_)
                    | TransportError::Closed
            ),
            _ => false,
        }
    }

    /// The op of the call that failed (`"gather"`, `"get_data"`...), when
    /// the error came from a call of [`Rpc`] or of a pool.
    pub fn op(&self) -> Option<&str> {
        self.inner.op.as_deref()
    }

    /// The address the call was made to, when the connection was made by
    /// address ([`Rpc::connect`], a pool).
    pub fn address(&self) -> Option<&str> {
        self.inner.address.as_deref()
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.inner.op, &self.inner.address) {
            (Some(op), Some(address)) => write!(f, "calling {op} on {address}: ")?,
            (Some(op), None) => write!(f, "calling {op}: ")?,
            (None, Some(address)) => write!(f, "calling {address}: ")?,
            (None, None) => {}
        }
        match &self.inner.cause {
            RpcCause::Transport(e) => e.fmt(f),
            RpcCause::Encode(e) => write!(f, "cannot send the request: {e}"),
            RpcCause::Decode(e) => write!(f, "unexpected reply: {e}"),
            RpcCause::Remote(e) => e.fmt(f),
            RpcCause::Closed => f.write_str("the server closed the connection without replying"),
        }
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.cause {
            RpcCause::Transport(e) => Some(e),
            RpcCause::Encode(e) => Some(e),
            RpcCause::Decode(e) => Some(e),
            RpcCause::Remote(e) => Some(e),
            RpcCause::Closed => None,
        }
    }
}

impl From<RpcCause> for RpcError {
    fn from(cause: RpcCause) -> RpcError {
        RpcError {
            inner: Box::new(Inner {
                cause,
                op: None,
                address: None,
            }),
        }
    }
}

impl From<TransportError> for RpcError {
    fn from(e: TransportError) -> RpcError {
        RpcCause::Transport(e).into()
    }
}

impl From<EncodeError> for RpcError {
    fn from(e: EncodeError) -> RpcError {
        RpcCause::Encode(e).into()
    }
}

impl From<DecodeError> for RpcError {
    fn from(e: DecodeError) -> RpcError {
        RpcCause::Decode(e).into()
    }
}

impl From<RemoteError> for RpcError {
    fn from(e: RemoteError) -> RpcError {
        RpcCause::Remote(e).into()
    }
}

/// A connection to a Dask server for request/reply calls, as Dask's `rpc`:
/// each request is sent with `"reply": true` appended, an error reply
/// (`"status": "error"` / `"uncaught-error"`) becomes an [`RpcError`]
/// whose cause is [`RpcCause::Remote`], with Dask's texts, and [`Rpc::get_data`] writes the `"OK"` Dask's caller
/// writes after a `get_data` reply.
///
/// ```no_run
/// use framewire::dask::{Identity, Rpc};
/// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
/// use framewire::Value;
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let builder = ConnectionBuilder::new();
/// let mut rpc = Rpc::connect("tcp://127.0.0.1:8786", &builder, &HandshakeOptions::default()).await?;
/// let reply: Value = rpc.call(&Identity::default()).await?;
/// println!("{:?}", reply.get("type"));
/// rpc.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Rpc<T> {
    conn: Connection<T>,
    /// The address it was connected to, named by its errors.
    address: Option<String>,
}

impl Rpc<Socket> {
    /// Connects to a Dask address (`tcp://host:port`, `host:port`, or
    /// `tls://host:port` with `builder`'s certificates) and does the
    /// handshake, with `builder`'s connection options.
    pub async fn connect(
        addr: &str,
        builder: &ConnectionBuilder,
        opts: &HandshakeOptions,
    ) -> Result<Rpc<Socket>, RpcError> {
        let (conn, _) = builder
            .connect(addr, opts)
            .await
            .map_err(|e| RpcError::from(e).calling(None, Some(addr)))?;
        Ok(Rpc {
            conn,
            address: Some(addr.to_owned()),
        })
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Rpc<T> {
    /// Calls over a connection that has done its handshake.
    pub fn new(conn: Connection<T>) -> Rpc<T> {
        Rpc {
            conn,
            address: None,
        }
    }

    /// The address [`Rpc::connect`] connected to.
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The connection.
    pub fn connection(&mut self) -> &mut Connection<T> {
        &mut self.conn
    }

    /// The connection, by value.
    pub fn into_inner(self) -> Connection<T> {
        self.conn
    }

    /// Sends `request` (with `"reply": true`) and reads the reply into `R`
    /// (`Value` for any reply, `()` for nil). Both ways go the direct path
    /// ([`to_frames`](crate::typed::to_frames),
    /// [`from_frames`](crate::typed::from_frames)) as the session reads
    /// typed messages ([`Connection::recv_msg`]); a reply that may be an
    /// error reply is read as a `Value` first.
    pub async fn call<Q: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        request: &Q,
    ) -> Result<R, RpcError> {
        let mut op = None;
        let reply = self.call_op(request, &mut op).await;
        reply.map_err(|e| e.calling(op.as_deref(), self.address.as_deref()))
    }

    /// [`call`](Rpc::call), setting `op` once the request is written.
    async fn call_op<Q: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        request: &Q,
        op: &mut Option<String>,
    ) -> Result<R, RpcError> {
        self.send_request(request, true, op).await?;
        let env = self.conn.recv().await.ok_or_else(RpcError::closed)??;
        if !may_be_error_reply(&env.frames()[0]) {
            return match decode_msg(&env, self.conn.session()) {
                Ok(reply) => Ok(reply),
                // The reply does not fit `R`.
                Err(TransportError::Decode(e @ DecodeError::Field { .. })) => Err(e.into()),
                // The message itself is bad: the connection is out of sync.
                Err(e) => {
                    self.conn.poison();
                    Err(e.into())
                }
            };
        }
        let reply = self.conn.decode_value(&env)?;
        match remote_error(&reply) {
            Some(e) => Err(e.into()),
            None => Ok(typed::from_value(reply)?),
        }
    }

    /// Sends `request` with `"reply": false`: the server answers nothing.
    pub async fn send<Q: Serialize + ?Sized>(&mut self, request: &Q) -> Result<(), RpcError> {
        let mut op = None;
        let sent = self.send_request(request, false, &mut op).await;
        sent.map_err(|e| e.calling(op.as_deref(), self.address.as_deref()))
    }

    /// `get_data`, then the `"OK"` Dask's caller writes when the reply's
    /// status is `"OK"` (the worker waits for it before serving anyone else).
    pub async fn get_data(&mut self, request: &GetData) -> Result<GetDataReply, RpcError> {
        let reply: GetDataReply = self.call(request).await?;
        if reply.status == "OK" {
            let ok = self.conn.send_value(&Value::from_static("OK")).await;
            ok.map_err(|e| RpcError::from(e).calling(Some("get_data"), self.address.as_deref()))?;
        }
        Ok(reply)
    }

    /// Writes Dask's goodbye (`{"op": "close", "reply": false}`) and closes
    /// the connection.
    pub async fn close(mut self) -> Result<(), RpcError> {
        let bye = Value::map_of([("op", Value::from_static("close")), ("reply", false.into())]);
        let address = self.address.take();
        let closed = match self.conn.send_value(&bye).await {
            Ok(()) => self.conn.close().await,
            Err(e) => Err(e),
        };
        closed.map_err(|e| RpcError::from(e).calling(Some("close"), address.as_deref()))
    }

    /// Writes `request` with its `reply` key set, as the session writes
    /// messages, and sends it.
    async fn send_request<Q: Serialize + ?Sized>(
        &mut self,
        request: &Q,
        reply: bool,
        op: &mut Option<String>,
    ) -> Result<(), RpcError> {
        let frames = typed::to_frames(request, &self.conn.session().serialize_options()).map_err(
            |e| match e {
                // As `to_value` reports it.
                e @ EncodeError::Field { .. } => RpcError::from(e),
                // As sending the value reports it.
                e => RpcError::from(TransportError::from(e)),
            },
        )?;
        if let Some(Some(name)) = msgpack::lookup_str(&frames[0], 0, "op") {
            *op = Some(name.to_owned());
        }
        let frames = with_reply(frames, reply)?;
        let env = Envelope::new(frames).map_err(TransportError::from)?;
        Ok(self.conn.send(env).await?)
    }
}

/// `frames` with the `reply` key of frame 0's map set (in place if present,
/// appended otherwise, as Python's dict assignment): frame 0 is rewritten,
/// the blocks after it are untouched. A message that is not a map (or is a
/// block) is left as it is.
fn with_reply(mut frames: Vec<Bytes>, reply: bool) -> Result<Vec<Bytes>, TransportError> {
    let frame0 = &frames[0];
    if !msgpack::is_map_at(frame0, 0) || message::is_placeholder_at(frame0, 0) {
        return Ok(frames);
    }
    let reply = Value::Bool(reply);
    frames[0] = msgpack::set_entries(
        frame0.clone(),
        &[("reply", &reply)],
        &mut HeaderRules,
        false,
    )?;
    Ok(frames)
}

/// Whether frame 0 may be Dask's error reply (a map whose first `status`
/// is `"error"` or `"uncaught-error"`), or cannot be told without decoding
/// it (see [`msgpack::lookup_str`]); a block, which may deserialize to one.
fn may_be_error_reply(frame0: &Bytes) -> bool {
    if !msgpack::is_map_at(frame0, 0) {
        return false;
    }
    if message::is_placeholder_at(frame0, 0) {
        return true;
    }
    match msgpack::lookup_str(frame0, 0, "status") {
        Some(Some(status)) => matches!(status, "error" | "uncaught-error"),
        Some(None) => false,
        None => true,
    }
}

/// Dask's error reply, if `reply` is one: a map whose `status` is
/// `"error"` or `"uncaught-error"` and that carries `exception_text`
/// (the scheduler's `gather` answers `{"status": "error", "keys": [...]}`,
/// which is data, not an error reply).
pub(crate) fn remote_error(reply: &Value) -> Option<RemoteError> {
    let status = reply.get("status")?.as_str()?;
    if !matches!(status, "error" | "uncaught-error") || reply.get("exception_text").is_none() {
        return None;
    }
    let parsed: ErrorReply = typed::from_value(reply.clone()).ok()?;
    Some(RemoteError {
        status: parsed.status,
        exception_text: parsed.exception_text,
        traceback_text: parsed.traceback_text,
    })
}
