//! [`ClientError`]: what can stop a [`Client`](super::Client) call.

use std::fmt;

use crate::dask::{Key, RpcError};
use crate::transport::TransportError;

/// What can stop a [`Client`](super::Client) call.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// A call to the scheduler or a worker failed.
    Rpc(RpcError),
    /// The client's stream failed, or the client is closed.
    Transport(TransportError),
    /// The scheduler refused the client (`stream-start` with an error).
    Refused(String),
    /// No running worker to scatter to within the options'
    /// [`timeout`](super::ClientOptions::timeout).
    NoWorkers,
    /// The task of this key erred.
    Erred(Key),
    /// The scheduler cancelled this key, or does not know it.
    Cancelled(Key),
    /// The data of this key was lost (its workers left).
    Lost(Key),
    /// These keys could be fetched neither from the workers nor through
    /// the scheduler.
    Missing(Vec<Key>),
    /// The stream to the scheduler was lost while waiting: the client let
    /// go of every key it held (as Dask cancels every future) and
    /// registers again on its own.
    ConnectionLost,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Rpc(e) => e.fmt(f),
            ClientError::Transport(e) => e.fmt(f),
            ClientError::Refused(why) => write!(f, "the scheduler refused the client: {why}"),
            ClientError::NoWorkers => f.write_str("no running worker"),
            ClientError::Erred(k) => write!(f, "the task of {k} erred"),
            ClientError::Cancelled(k) => {
                write!(f, "{k} was cancelled, or is unknown to the scheduler")
            }
            ClientError::Lost(k) => write!(f, "the data of {k} was lost"),
            ClientError::Missing(keys) => write!(f, "could not gather {} keys", keys.len()),
            ClientError::ConnectionLost => f.write_str(
                "the connection to the scheduler was lost: every key the client held was let go",
            ),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Rpc(e) => Some(e),
            ClientError::Transport(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RpcError> for ClientError {
    fn from(e: RpcError) -> ClientError {
        ClientError::Rpc(e)
    }
}

impl From<TransportError> for ClientError {
    fn from(e: TransportError) -> ClientError {
        ClientError::Transport(e)
    }
}
