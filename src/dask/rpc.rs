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

/// What can stop a call.
#[derive(Debug)]
#[non_exhaustive]
pub enum RpcError {
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
    /// What kind of failure this is, to branch on: the transport's kind
    /// for a failed connection ([`TransportError::kind`]), else the call's
    /// own (an error reply is [`ErrorKind::Remote`], a reply not of the
    /// expected shape [`ErrorKind::UnexpectedReply`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            RpcError::Transport(e) => e.kind(),
            RpcError::Encode(_) => ErrorKind::Encode,
            RpcError::Decode(_) => ErrorKind::UnexpectedReply,
            RpcError::Remote(_) => ErrorKind::Remote,
            RpcError::Closed => ErrorKind::Closed,
        }
    }

    /// The server's error reply, when this is one.
    pub fn remote(&self) -> Option<&RemoteError> {
        match self {
            RpcError::Remote(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Transport(e) => e.fmt(f),
            RpcError::Encode(e) => write!(f, "cannot send the request: {e}"),
            RpcError::Decode(e) => write!(f, "unexpected reply: {e}"),
            RpcError::Remote(e) => e.fmt(f),
            RpcError::Closed => f.write_str("the server closed the connection without replying"),
        }
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RpcError::Transport(e) => Some(e),
            RpcError::Encode(e) => Some(e),
            RpcError::Decode(e) => Some(e),
            RpcError::Remote(e) => Some(e),
            RpcError::Closed => None,
        }
    }
}

impl From<TransportError> for RpcError {
    fn from(e: TransportError) -> RpcError {
        RpcError::Transport(e)
    }
}

impl From<EncodeError> for RpcError {
    fn from(e: EncodeError) -> RpcError {
        RpcError::Encode(e)
    }
}

impl From<DecodeError> for RpcError {
    fn from(e: DecodeError) -> RpcError {
        RpcError::Decode(e)
    }
}

/// A connection to a Dask server for request/reply calls, as Dask's `rpc`:
/// each request is sent with `"reply": true` appended, an error reply
/// (`"status": "error"` / `"uncaught-error"`) becomes [`RpcError::Remote`]
/// with Dask's texts, and [`Rpc::get_data`] writes the `"OK"` Dask's caller
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
        let (conn, _) = builder.connect_address(addr, opts).await?;
        Ok(Rpc { conn })
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Rpc<T> {
    /// Calls over a connection that has done its handshake.
    pub fn new(conn: Connection<T>) -> Rpc<T> {
        Rpc { conn }
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
        self.send_request(request, true).await?;
        let env = self.conn.recv().await.ok_or(RpcError::Closed)??;
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
            Some(e) => Err(RpcError::Remote(e)),
            None => Ok(typed::from_value(reply)?),
        }
    }

    /// Sends `request` with `"reply": false`: the server answers nothing.
    pub async fn send<Q: Serialize + ?Sized>(&mut self, request: &Q) -> Result<(), RpcError> {
        self.send_request(request, false).await
    }

    /// `get_data`, then the `"OK"` Dask's caller writes when the reply's
    /// status is `"OK"` (the worker waits for it before serving anyone else).
    pub async fn get_data(&mut self, request: &GetData) -> Result<GetDataReply, RpcError> {
        let reply: GetDataReply = self.call(request).await?;
        if reply.status == "OK" {
            self.conn.send_value(&Value::from_static("OK")).await?;
        }
        Ok(reply)
    }

    /// Writes Dask's goodbye (`{"op": "close", "reply": false}`) and closes
    /// the connection.
    pub async fn close(mut self) -> Result<(), RpcError> {
        let bye = Value::map_of([("op", Value::from_static("close")), ("reply", false.into())]);
        self.conn.send_value(&bye).await?;
        Ok(self.conn.close().await?)
    }

    /// Writes `request` with its `reply` key set, as the session writes
    /// messages, and sends it.
    async fn send_request<Q: Serialize + ?Sized>(
        &mut self,
        request: &Q,
        reply: bool,
    ) -> Result<(), RpcError> {
        let frames = typed::to_frames(request, &self.conn.session().serialize_options()).map_err(
            |e| match e {
                // As `to_value` reports it.
                e @ EncodeError::Field { .. } => RpcError::Encode(e),
                // As sending the value reports it.
                e => RpcError::Transport(e.into()),
            },
        )?;
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
