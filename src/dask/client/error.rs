//! [`ClientError`]: what can stop a [`Client`](super::Client) call.

use std::fmt;

use crate::dask::{Key, RpcError};
use crate::error::ErrorKind;
use crate::pickle::{PickleError, PyException};
use crate::transport::TransportError;
use crate::value::Value;

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
    /// The task of a key erred: the exception it raised, read from the
    /// scheduler's `task-erred` (see [`TaskError`]).
    Erred(Box<TaskError>),
    /// The scheduler runs a `distributed` release whose `update-graph`
    /// framewire does not know (it writes the forms of 2024.12.1 through
    /// 2026.8.x): the release, as the scheduler's `versions` gave it.
    UnsupportedRelease(String),
    /// The graph could not be pickled (a value with no pickle, nesting too
    /// deep).
    Graph(crate::EncodeError),
    /// The scheduler cancelled this key (a client's `cancel`, lost
    /// dependencies, already forgotten).
    Cancelled(Key),
    /// The scheduler does not know this key now: not submitted yet, or
    /// forgotten (see [`Client::wait_for`](super::Client::wait_for)).
    Unknown(Key),
    /// These keys were not in memory within the time given.
    TimedOut(Vec<Key>),
    /// The data of this key was lost (its workers left).
    Lost(Key),
    /// [`gather`](super::Client::gather) could not give these keys: each
    /// with why ([`GatherError::reasons`]: its task erred, with the
    /// exception; cancelled; lost; unknown to the scheduler; not computed
    /// yet; in memory yet unreachable).
    Missing(Box<GatherError>),
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
            ClientError::UnsupportedRelease(_) => ErrorKind::UnsupportedRelease,
            ClientError::Graph(_) => ErrorKind::Encode,
            ClientError::Cancelled(_) => ErrorKind::Cancelled,
            ClientError::Unknown(_) => ErrorKind::Unknown,
            ClientError::TimedOut(_) => ErrorKind::Timeout,
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
            ClientError::Erred(e) => std::slice::from_ref(e.key()),
            ClientError::Cancelled(k) | ClientError::Unknown(k) | ClientError::Lost(k) => {
                std::slice::from_ref(k)
            }
            ClientError::Missing(e) => e.keys(),
            ClientError::TimedOut(keys) => keys,
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
            ClientError::Erred(e) => e.fmt(f),
            ClientError::UnsupportedRelease(r) => write!(
                f,
                "the scheduler runs distributed {r:?}: framewire computes on 2024.12.1 through 2026.8.x"
            ),
            ClientError::Graph(e) => write!(f, "the graph could not be pickled: {e}"),
            ClientError::Cancelled(k) => write!(f, "{k} was cancelled"),
            ClientError::Unknown(k) => write!(
                f,
                "{k} is unknown to the scheduler (not submitted yet, or forgotten)"
            ),
            ClientError::TimedOut(keys) => {
                write!(f, "not in memory in time: ")?;
                list_keys(f, keys)
            }
            ClientError::Lost(k) => write!(f, "the data of {k} was lost"),
            ClientError::Missing(e) => e.fmt(f),
            ClientError::ConnectionLost => f.write_str(
                "the connection to the scheduler was lost: every key the client held was let go",
            ),
        }
    }
}

/// The first ten keys, and how many more.
fn list_keys(f: &mut fmt::Formatter<'_>, keys: &[Key]) -> fmt::Result {
    for (i, k) in keys.iter().take(10).enumerate() {
        write!(f, "{}{k}", if i > 0 { ", " } else { "" })?;
    }
    if keys.len() > 10 {
        write!(f, " and {} more", keys.len() - 10)?;
    }
    Ok(())
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Rpc(e) => Some(e),
            ClientError::Transport(e) => Some(e),
            ClientError::Graph(e) => Some(e),
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

/// A task that raised, as the scheduler reported it (`task-erred`): the
/// key and the exception, read from its pickles without running anything
/// ([`pickle::read_exception`](crate::pickle::read_exception)). A module
/// the scheduler could not import shows as its `RuntimeError` ("Error
/// during deserialization of the task graph") caused by the
/// `ModuleNotFoundError` naming the module: see [`TaskError::chain`].
#[derive(Clone, Debug, PartialEq)]
pub struct TaskError {
    key: Key,
    exception: Result<PyException, PickleError>,
}

impl TaskError {
    /// Reads `task-erred`'s exception and traceback (blocks of `bytes`
    /// holding pickles, or the bytes themselves).
    pub(crate) fn read(key: Key, exception: &Value, traceback: Option<&Value>) -> TaskError {
        let tb = traceback.and_then(pickle_bytes);
        let exception = match pickle_bytes(exception) {
            Some(p) => crate::pickle::read_exception(&p, tb.as_deref()),
            None => Err(PickleError::NotPickle),
        };
        TaskError { key, exception }
    }

    /// The key whose task erred.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The exception, or why its pickle could not be read.
    pub fn exception(&self) -> Result<&PyException, &PickleError> {
        self.exception.as_ref()
    }

    /// The exception's class name (`"ZeroDivisionError"`), if read.
    pub fn type_name(&self) -> Option<&str> {
        self.exception.as_ref().ok().map(|e| e.name.as_str())
    }

    /// `str(exception)` (`"division by zero"`), if read.
    pub fn message(&self) -> Option<&str> {
        self.exception.as_ref().ok().map(|e| e.message.as_str())
    }

    /// The traceback text Dask sent, if any.
    pub fn traceback(&self) -> Option<&str> {
        self.exception.as_ref().ok()?.traceback.as_deref()
    }

    /// The exception and its causes, outermost first (none if unread).
    pub fn chain(&self) -> impl Iterator<Item = &PyException> {
        self.exception
            .as_ref()
            .ok()
            .into_iter()
            .flat_map(|e| e.chain())
    }
}

/// The pickle in a `task-erred` field: bytes, or a block whose frames are
/// bytes (Dask's `dask` serializer for `bytes`).
fn pickle_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Bin(b) => Some(b.to_vec()),
        Value::Serialized(block) => {
            let frames = block.frames();
            Some(frames.iter().flat_map(|f| f.iter().copied()).collect())
        }
        _ => None,
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the task of {} erred", self.key)?;
        match &self.exception {
            Ok(e) => {
                write!(f, ": {}: {}", e.name, e.message)?;
                for cause in e.chain().skip(1) {
                    write!(f, " (caused by {}: {})", cause.name, cause.message)?;
                }
                Ok(())
            }
            Err(why) => write!(f, " (its exception could not be read: {why})"),
        }
    }
}

impl std::error::Error for TaskError {}

/// Why [`gather`](super::Client::gather) could not give a key (see
/// [`GatherError`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum KeyFailure {
    /// Its task erred: the exception it raised (`task-erred`).
    Erred(Box<TaskError>),
    /// The scheduler cancelled it (a client's `cancel`, lost
    /// dependencies).
    Cancelled,
    /// Its data was lost (the workers that held it left).
    Lost,
    /// The scheduler does not know it (not submitted yet, or forgotten).
    Unknown,
    /// The scheduler knows it, not in memory: its state then
    /// (`"processing"`, `"waiting"`, `"queued"`, `"no-worker"`,
    /// `"released"`, or `"erred"` when its exception could not be had).
    NotInMemory(String),
    /// In memory as the scheduler said, yet neither its workers nor the
    /// scheduler gave it (they left meanwhile, or failed).
    Unreachable,
}

impl fmt::Display for KeyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFailure::Erred(e) => match e.exception() {
                Ok(x) => write!(f, "erred: {}: {}", x.name, x.message),
                Err(why) => write!(f, "erred (its exception could not be read: {why})"),
            },
            KeyFailure::Cancelled => f.write_str("cancelled"),
            KeyFailure::Lost => f.write_str("lost"),
            KeyFailure::Unknown => f.write_str("unknown to the scheduler"),
            KeyFailure::NotInMemory(state) => write!(f, "not in memory: {state}"),
            KeyFailure::Unreachable => {
                f.write_str("in memory, yet neither its workers nor the scheduler gave it")
            }
        }
    }
}

/// The keys [`gather`](super::Client::gather) could not give, each with
/// its [`KeyFailure`], in the order asked
/// ([`ClientError::Missing`]).
///
/// ```no_run
/// # use framewire::dask::{Client, ClientError, Key, KeyFailure};
/// # async fn f(client: Client) {
/// match client.gather(&[Key::from("x"), Key::from("y")]).await {
///     Err(ClientError::Missing(e)) => {
///         for (key, why) in e.reasons() {
///             if let KeyFailure::Erred(task) = why {
///                 eprintln!("{key}: {:?} {:?}", task.type_name(), task.message());
///             } else {
///                 eprintln!("{key}: {why}");
///             }
///         }
///     }
///     Err(e) => eprintln!("{e}"),
///     Ok(values) => println!("{} values", values.len()),
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GatherError {
    keys: Vec<Key>,
    reasons: Vec<KeyFailure>,
}

impl GatherError {
    pub(crate) fn new(failed: Vec<(Key, KeyFailure)>) -> GatherError {
        let (keys, reasons) = failed.into_iter().unzip();
        GatherError { keys, reasons }
    }

    /// The keys not gathered.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Each key not gathered, and why.
    pub fn reasons(&self) -> impl Iterator<Item = (&Key, &KeyFailure)> {
        self.keys.iter().zip(&self.reasons)
    }

    /// Why `key` was not gathered (`None`: it was, or was not asked).
    pub fn reason(&self, key: &Key) -> Option<&KeyFailure> {
        self.reasons().find(|(k, _)| *k == key).map(|(_, why)| why)
    }
}

impl fmt::Display for GatherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not gather {} keys: ", self.keys.len())?;
        for (i, (k, why)) in self.reasons().take(10).enumerate() {
            write!(f, "{}{k} ({why})", if i > 0 { ", " } else { "" })?;
        }
        if self.keys.len() > 10 {
            write!(f, " and {} more", self.keys.len() - 10)?;
        }
        Ok(())
    }
}

impl std::error::Error for GatherError {}
