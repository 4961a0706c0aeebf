//! [`ClientError`]: what can stop a [`Client`](super::Client) call.

use std::fmt;

use crate::dask::{Key, RpcError};
use crate::error::ErrorKind;
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

impl ClientError {
    /// What kind of failure this is, to branch on: a failed call's or the
    /// stream's kind ([`RpcError::kind`], [`TransportError::kind`]), else
    /// the client's own ([`ErrorKind::TaskErred`], [`ErrorKind::Missing`]...).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Rpc(e) => e.kind(),
            ClientError::Transport(e) => e.kind(),
            ClientError::Refused(_) => ErrorKind::Refused,
            ClientError::NoWorkers => ErrorKind::NoWorkers,
            ClientError::Erred(_) => ErrorKind::TaskErred,
            ClientError::Cancelled(_) => ErrorKind::Cancelled,
            ClientError::Lost(_) => ErrorKind::Lost,
            ClientError::Missing(_) => ErrorKind::Missing,
            ClientError::ConnectionLost => ErrorKind::ConnectionLost,
        }
    }

    /// The keys this error concerns (the key whose task erred, was
    /// cancelled or lost; the keys that could not be gathered); none for
    /// the others.
    pub fn keys(&self) -> &[Key] {
        match self {
            ClientError::Erred(k) | ClientError::Cancelled(k) | ClientError::Lost(k) => {
                std::slice::from_ref(k)
            }
            ClientError::Missing(keys) => keys,
            _ => &[],
        }
    }
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
            ClientError::Missing(keys) => {
                write!(f, "could not gather {} keys: ", keys.len())?;
                for (i, k) in keys.iter().take(10).enumerate() {
                    write!(f, "{}{k}", if i > 0 { ", " } else { "" })?;
                }
                if keys.len() > 10 {
                    write!(f, " and {} more", keys.len() - 10)?;
                }
                Ok(())
            }
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
