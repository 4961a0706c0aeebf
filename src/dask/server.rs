//! [`Requests`]: the server side of an RPC connection, as
//! `Server._handle_comm` serves one.

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};

use super::wire::op_of;
use super::{ErrorReply, GetDataReply};
use crate::transport::{Connection, TransportError};
use crate::typed;
use crate::value::Value;

/// A request that could not be read as one; it was answered with Dask's
/// error reply when its sender wanted a reply, and the connection goes on.
#[derive(Clone, Debug, PartialEq)]
pub struct BadRequest {
    /// Its op, when it had one.
    pub op: Option<String>,
    /// What is wrong with it.
    pub error: String,
}

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.op {
            Some(op) => write!(f, "bad {op:?} request: {}", self.error),
            None => write!(f, "bad request: {}", self.error),
        }
    }
}

impl std::error::Error for BadRequest {}

/// What [`Requests::next`] can meet.
#[derive(Debug)]
#[non_exhaustive]
pub enum RequestError {
    /// A request that is not what the handler table expects (answered;
    /// the connection goes on).
    Bad(BadRequest),
    /// The connection failed (it is done).
    Transport(TransportError),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Bad(e) => e.fmt(f),
            RequestError::Transport(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RequestError {}

impl From<TransportError> for RequestError {
    fn from(e: TransportError) -> RequestError {
        RequestError::Transport(e)
    }
}

/// The requests arriving on one connection to a Dask server, read and
/// answered as `Server._handle_comm` does: each request is a map with an
/// `op` and a `reply` flag (default true); `close` ends the connection
/// (answered `"OK"` when it asks for a reply); a reply is written only when
/// the request wants one.
///
/// ```
/// use framewire::dask::{Identity, Requests, Rpc, WorkerRequest};
/// use framewire::transport::Connection;
/// use framewire::Value;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 16);
/// let server = async move {
///     let mut requests = Requests::new(Connection::new(b));
///     while let Some(req) = requests.next::<WorkerRequest>().await {
///         match req? {
///             WorkerRequest::Identity(_) => {
///                 requests.reply(&Value::map_of([("type", Value::str("Worker"))])).await?
///             }
///             _ => requests.reply_error("no such handler").await?,
///         }
///     }
///     Ok::<(), Box<dyn std::error::Error>>(())
/// };
/// let client = async move {
///     let mut rpc = Rpc::new(Connection::new(a));
///     let reply: Value = rpc.call(&Identity::default()).await?;
///     assert_eq!(reply.get("type").and_then(Value::as_str), Some("Worker"));
///     rpc.close().await?;
///     Ok::<(), Box<dyn std::error::Error>>(())
/// };
/// let (s, c) = tokio::join!(server, client);
/// s.unwrap();
/// c.unwrap();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Requests<T> {
    conn: Connection<T>,
    reply: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Requests<T> {
    /// Serves `conn` (a connection that has done its handshake).
    pub fn new(conn: Connection<T>) -> Requests<T> {
        Requests { conn, reply: true }
    }

    /// The connection.
    pub fn connection(&mut self) -> &mut Connection<T> {
        &mut self.conn
    }

    /// Whether the request last read wants a reply.
    pub fn wants_reply(&self) -> bool {
        self.reply
    }

    /// The next request, as `M` (a channel enum such as
    /// [`WorkerRequest`](super::WorkerRequest), whose `Other` takes any op
    /// it does not know); `None` when the peer closed the connection or
    /// said `close`. On a pass-through connection
    /// ([`deserialize_blocks(false)`](crate::transport::ConnectionBuilder::deserialize_blocks))
    /// blocks stay as they came. A request that is not a map with an `op`, or whose
    /// fields `M` refuses, is answered with Dask's error reply (when it
    /// wants one) and returned as [`RequestError::Bad`]: the caller logs
    /// it and reads on.
    pub async fn next<M: DeserializeOwned>(&mut self) -> Option<Result<M, RequestError>> {
        let msg = match self.conn.recv_value().await? {
            Ok(msg) => msg,
            Err(e) => return Some(Err(e.into())),
        };
        self.reply = msg.get("reply").and_then(bool_of).unwrap_or(true);
        let op = op_of(&msg).map(str::to_owned);
        let bad = match &op {
            None if msg.as_map().is_none() => "not a map".to_owned(),
            None => "no op".to_owned(),
            Some(op) if op == "close" => {
                if self.reply {
                    if let Err(e) = self.conn.send_value(&Value::from_static("OK")).await {
                        return Some(Err(e.into()));
                    }
                }
                return None;
            }
            Some(_) => match typed::from_value::<M>(msg) {
                Ok(m) => return Some(Ok(m)),
                Err(e) => e.to_string(),
            },
        };
        let bad = BadRequest { op, error: bad };
        if let Err(e) = self.reply_error(&bad.to_string()).await {
            return Some(Err(e.into()));
        }
        Some(Err(RequestError::Bad(bad)))
    }

    /// Answers the request last read with `reply` (nothing if it wanted
    /// no reply). `&()` answers nil.
    pub async fn reply<R: Serialize + ?Sized>(&mut self, reply: &R) -> Result<(), TransportError> {
        if !self.reply {
            return Ok(());
        }
        self.conn.send_msg(reply).await
    }

    /// Answers the request last read with Dask's error reply
    /// (`"uncaught-error"`, what a handler that raised produces), carrying
    /// `text` as the exception (a Python caller raises `Exception(text)`).
    pub async fn reply_error(&mut self, text: &str) -> Result<(), TransportError> {
        let reply = ErrorReply {
            status: "uncaught-error".to_owned(),
            exception: Value::str(text),
            traceback: Value::Nil,
            exception_text: format!("Exception({text:?})"),
            traceback_text: String::new(),
        };
        self.reply(&reply).await
    }

    /// Answers a `get_data` as `Worker.get_data` does: writes `reply`, then,
    /// when its status is `"OK"`, reads the caller's `"OK"` (within
    /// `ack_timeout`) before the connection serves anything else. The
    /// values go out as they are: blocks held as received are written from
    /// their own frames.
    pub async fn reply_get_data(
        &mut self,
        reply: &GetDataReply,
        ack_timeout: Duration,
    ) -> Result<(), TransportError> {
        self.conn.send_msg(reply).await?;
        if reply.status != "OK" {
            return Ok(());
        }
        let ack = tokio::time::timeout(ack_timeout, self.conn.recv_value())
            .await
            .map_err(|_| {
                TransportError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no \"OK\" after a get_data reply",
                ))
            })?;
        match ack {
            Some(Ok(v)) if v.as_str() == Some("OK") => Ok(()),
            Some(Ok(_)) => Err(TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a get_data reply was answered with something else than \"OK\"",
            ))),
            Some(Err(e)) => Err(e),
            None => Err(TransportError::Closed),
        }
    }

    /// Writes what is queued and shuts the write direction down.
    pub async fn close(mut self) -> Result<(), TransportError> {
        self.conn.close().await
    }
}

/// `reply`'s truth, as Dask's `_handle_comm` tests it (nil: no reply).
fn bool_of(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Nil => Some(false),
        _ => None,
    }
}
