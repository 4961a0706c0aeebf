//! [`EncodeError`]: everything that can stop framewire from encoding a
//! value, in every layer (decoding has an error type per layer, gathered in
//! [`DecodeError`](crate::DecodeError)); [`ErrorKind`]: what the error of a
//! facade (a connection, a call, a client) is, to branch on.

use std::fmt;
use std::io;

/// What kind of failure an error is, the same for every facade a program
/// holds: `TransportError::kind` (a `Connection`, a codec), `RpcError::kind`
/// (an `Rpc`, a `ConnectionPool`) and `ClientError::kind` (a `Client`) give
/// one, each delegating to the error it wraps, so a caller branches on the
/// cause whichever facade reported it (`ErrorKind::Connect` from a client's
/// call is the connect that failed underneath). The error itself still says
/// what failed (its `Display`, and the cause through `source()`).
///
/// ```
/// use framewire::ErrorKind;
///
/// /// Worth trying again later: the peer or the network, not the request.
/// fn transient(kind: ErrorKind) -> bool {
///     matches!(kind, ErrorKind::Connect | ErrorKind::PeerTimeout | ErrorKind::Closed)
/// }
/// assert!(transient(ErrorKind::Connect));
/// assert!(!transient(ErrorKind::Remote));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No connection could be made to the address (refused, unreachable, or
    /// the connect deadline passed): nothing was sent.
    Connect,
    /// An address that cannot be read (not `tcp://HOST:PORT` or
    /// `tls://HOST:PORT`): nothing was tried.
    InvalidAddress,
    /// The peer stopped answering (TCP keepalive or `TCP_USER_TIMEOUT` gave
    /// up: a dead host, a partition).
    PeerTimeout,
    /// A deadline of framewire's own passed (a handshake, a message).
    Timeout,
    /// The connection is closed: by the peer (before a reply, or before the
    /// handshake completed), or by this side.
    Closed,
    /// The socket failed otherwise (a reset, a broken pipe...).
    Io,
    /// TLS could not be set up, or its handshake failed.
    Tls,
    /// The peer sent something that is not a valid message: its framing,
    /// its msgpack, a checksum, its handshake.
    Protocol,
    /// A valid message, but not what the call expects (a reply without a
    /// field, of another type).
    UnexpectedReply,
    /// What was to be sent cannot be encoded (nothing was sent).
    Encode,
    /// The server answered with an error (Dask's error reply: its handler
    /// raised).
    Remote,
    /// The scheduler refused the client.
    Refused,
    /// No running worker within the client's timeout.
    NoWorkers,
    /// The task of a key raised.
    TaskErred,
    /// The scheduler runs a release whose graph form framewire does not
    /// know.
    UnsupportedRelease,
    /// A key was cancelled.
    Cancelled,
    /// A key is unknown to the scheduler now (not submitted yet, or
    /// forgotten).
    Unknown,
    /// The data of a key was lost (its workers left).
    Lost,
    /// Keys that could be fetched neither from the workers nor through the
    /// scheduler.
    Missing,
    /// The client's stream to the scheduler was lost while waiting.
    ConnectionLost,
}

/// Everything that can stop framewire from encoding a value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// Containers nested deeper than msgpack-python accepts (1024), or than
    /// the limit given.
    DepthExceeded {
        /// The limit.
        limit: usize,
    },
    /// A plain map uses `__Serialized__` or `__Pickled__` as a key: Dask would
    /// read it as a placeholder, so framewire refuses to write it.
    ReservedKey {
        /// The key.
        key: &'static str,
    },
    /// A `Serialized` or `Pickled` leaf inside a sub-header or a msgpack-family
    /// frame, where it has no representation.
    OutOfBandInHeader,
    /// A block's header is not a map.
    HeaderNotMap,
    /// A `ToSerialize` or `NdArray` value given to the message layer alone
    /// (`message::encode`); `framewire::dumps` serializes them.
    NotSerialized,
    /// `IterateCollection::Never` was asked to put a value that needs frames
    /// of its own (`Serialized`, `Pickled`, `ToSerialize`, an array, or bytes
    /// over the out-of-band threshold) into a single blob. framewire never
    /// glues such frames into a blob.
    OutOfBandInBlob,
    /// No serializer family accepts the value.
    Unserializable {
        /// What the value is.
        what: &'static str,
    },
    /// An `NdArray` whose parts do not agree.
    InvalidArray {
        /// What is wrong.
        reason: &'static str,
    },
    /// A numpy object array (dtype `|O`, as in a `.npy` file of one): its
    /// elements are pointers to Python objects, which travel pickled, not
    /// numbers an `NdArray` can hold.
    ObjectArray,
    /// A message with no frames: Python's reader cannot handle one.
    NoFrames,
    /// The first read was asked to cover more frames than the message has.
    FirstReadOutOfRange {
        /// Frames asked for.
        k: usize,
        /// Frames in the message.
        frames: usize,
    },
    /// A str or bin longer than msgpack's 2^32 − 1 bytes, or a container with
    /// more than 2^32 − 1 items.
    TooLong {
        /// The length.
        len: usize,
    },
    /// A value that serde could not write (`framewire::to_value`):
    /// a map key or an integer msgpack cannot hold, a type's own error, at
    /// `path` (`"data.x"`; empty at the top).
    ///
    Field {
        /// Where: field names, map keys and indexes from the top.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A message to send exceeds one of the sender's own [`Limits`](crate::Limits)
    /// (the transport refuses to send what it would refuse to receive).
    ExceedsLimit {
        /// Which limit.
        limit: LimitName,
        /// The message's value.
        declared: u64,
        /// The limit.
        max: u64,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::DepthExceeded { limit } => {
                write!(f, "containers nested deeper than {limit}")
            }
            EncodeError::ReservedKey { key } => write!(
                f,
                "a plain map uses the reserved key {key:?}, which Dask would read as a placeholder"
            ),
            EncodeError::OutOfBandInHeader => {
                f.write_str("a Serialized or Pickled value inside a header has no encoding")
            }
            EncodeError::HeaderNotMap => f.write_str("a block's header is not a map"),
            EncodeError::NotSerialized => f.write_str(
                "a Serialize or NdArray value reached the message layer unserialized (use framewire::dumps)",
            ),
            EncodeError::OutOfBandInBlob => f.write_str(
                "IterateCollection::Never: a value inside the collection needs frames of its own",
            ),
            EncodeError::Unserializable { what } => write!(f, "no serializer family accepts {what}"),
            EncodeError::InvalidArray { reason } => write!(f, "invalid array: {reason}"),
            EncodeError::ObjectArray => f.write_str(
                "object arrays (dtype |O) cannot be read: they hold pickled Python objects",
            ),
            EncodeError::NoFrames => f.write_str("a message needs at least one frame"),
            EncodeError::FirstReadOutOfRange { k, frames } => {
                write!(f, "first read of {k} frames asked for a message of {frames}")
            }
            EncodeError::TooLong { len } => {
                write!(f, "{len} bytes or items exceed msgpack's 2^32 - 1")
            }
            EncodeError::Field { path, message } if path.is_empty() => f.write_str(message),
            EncodeError::Field { path, message } => write!(f, "{path}: {message}"),
            EncodeError::ExceedsLimit {
                limit,
                declared,
                max,
            } => write!(f, "{limit} exceeded: the message has {declared}, the limit is {max}"),
        }
    }
}

impl std::error::Error for EncodeError {}

impl From<EncodeError> for io::Error {
    fn from(e: EncodeError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// The name of one of the [`Limits`](crate::Limits) a message can exceed: which one a
/// sender's message went over ([`EncodeError::ExceedsLimit`]).
///
/// ```
/// use framewire::LimitName;
/// assert_eq!(LimitName::MaxFrameLen.to_string(), "max_frame_len");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitName {
    /// [`Limits::max_frames`](crate::Limits::max_frames).
    MaxFrames,
    /// [`Limits::max_frame_len`](crate::Limits::max_frame_len).
    MaxFrameLen,
    /// [`Limits::max_message_len`](crate::Limits::max_message_len).
    MaxMessageLen,
}

impl LimitName {
    /// The name of the [`Limits`](crate::Limits) field, as written in Rust (`"max_frames"`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitName::MaxFrames => "max_frames",
            LimitName::MaxFrameLen => "max_frame_len",
            LimitName::MaxMessageLen => "max_message_len",
        }
    }
}

impl fmt::Display for LimitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
