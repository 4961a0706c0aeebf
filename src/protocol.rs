//! A whole message through every layer, as Dask's `distributed.protocol`
//! does it: [`dumps`] serializes out-of-band values and writes frame 0,
//! [`loads`] reads frame 0 and deserializes the blocks; and [`DecodeError`],
//! the error of any decoding layer.
//!
//! Decoding has one error type per layer, each wrapped by the layer above
//! (as h2 wraps `frame::Error` in its `RecvError`):
//!
//! ```text
//! EnvelopeError     layer 1: the TCP framing                 envelope::parse_prelude, Envelope::decode
//! MsgpackError      msgpack in frame 0, sub-headers, blobs    (inside the two below)
//! MessageError      layer 2: frame 0 and placeholders         message::decode
//! DeserializeError  layer 3: headers, families, shards        serialize::deserialize
//!   CompressionError  compressed frames (SPEC.md §5.12)
//! DecodeError       any of these                              framewire::loads, the transport
//! ```

use std::fmt;
use std::io;

use bytes::Bytes;

use crate::envelope::EnvelopeError;
use crate::error::EncodeError;
use crate::message::{self, MessageError};
use crate::msgpack::MsgpackError;
use crate::serialize::{
    self, CompressionError, DeserializeError, DeserializeOptions, SerializeOptions,
};
use crate::value::Value;

/// A message as frames, as Dask's `distributed.protocol.dumps` makes them:
/// every [`Value::ToSerialize`] leaf (and every bare [`Value::NdArray`]) is
/// serialized and split into a block of its own with
/// [`SerializeOptions::default()`], pre-serialized blocks pass through
/// untouched, and frame 0 is the msgpack of the rest
/// ([`message::encode`] is the same without the serializing).
///
/// ```
/// use bytes::Bytes;
/// use framewire::{dumps, Value};
///
/// let payload = Bytes::from(vec![7u8; 1 << 20]);
/// let msg = Value::map_of([
///     ("op", "store".into()),
///     ("data", Value::ToSerialize(Box::new(Value::Bin(payload.clone())))),
/// ]);
/// let frames = dumps(&msg)?;
/// assert_eq!(frames.len(), 3); // frame 0, the sub-header, the payload
/// assert_eq!(frames[2].as_ptr(), payload.as_ptr()); // the payload itself, not a copy
/// # Ok::<(), framewire::EncodeError>(())
/// ```
pub fn dumps(value: &Value) -> Result<Vec<Bytes>, EncodeError> {
    dumps_with(value, &SerializeOptions::default())
}

/// [`dumps`] with explicit options (a codec the handshake agreed, another
/// shard size, [`IterateCollection`](crate::IterateCollection)...).
pub fn dumps_with(value: &Value, opts: &SerializeOptions) -> Result<Vec<Bytes>, EncodeError> {
    message::encode_with(value, &mut |leaf| {
        serialize::serialize_and_split(leaf, opts)
    })
}

/// A message from its frames, as Dask's `distributed.protocol.loads`
/// (`deserialize=True`) reads it, with the default [`DeserializeOptions`]
/// (limits that accept everything real Dask traffic holds): [`loads_with`]
/// with `&DeserializeOptions::default()`.
///
/// ```
/// use framewire::{dumps, loads, Value};
///
/// let msg = Value::map_of([("op", "ping".into())]);
/// assert_eq!(loads(&dumps(&msg)?)?, msg);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn loads(frames: &[Bytes]) -> Result<Value, DecodeError> {
    loads_with(frames, &DeserializeOptions::default())
}

/// [`loads`] with explicit options (other limits, a buffer the frames were
/// sliced from, more serializer families).
///
/// A message from its frames, as Dask's `distributed.protocol.loads`
/// (`deserialize=True`) reads it: frame 0 and its placeholders
/// ([`message::decode`]), then every `Serialized` block deserialized
/// ([`serialize::deserialize_blocks`]) under one decompression budget.
/// What framewire does not rebuild (pickle, unknown families) stays a
/// block, and `Pickled` blocks are never unpickled.
///
/// ```
/// use bytes::Bytes;
/// use framewire::serialize::DeserializeOptions;
/// use framewire::{dumps, loads_with, Value};
///
/// let msg = Value::map_of([
///     ("op", "store".into()),
///     ("data", Value::ToSerialize(Box::new(Value::from(vec![1i64, 2, 3])))),
/// ]);
/// let back = loads_with(&dumps(&msg)?, &DeserializeOptions::default())?;
/// assert_eq!(back.get("data"), Some(&Value::from(vec![1i64, 2, 3])));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn loads_with(frames: &[Bytes], opts: &DeserializeOptions) -> Result<Value, DecodeError> {
    let value = message::decode(frames, &opts.limits)?;
    Ok(serialize::deserialize_blocks(value, opts)?)
}

/// Anything wrong with bytes framewire decodes, from whichever layer found
/// it. Every decode path returns an error instead of panicking; after an
/// error on a stream the stream is out of sync, and the transport poisons
/// the connection.
///
/// ```
/// use framewire::{envelope, DecodeError, EnvelopeError, Limits};
///
/// // A prelude declaring 2^60 frames, refused from its 16-byte head.
/// let head = [[8u8, 0, 0, 0, 0, 0, 0, 0x80], [0, 0, 0, 0, 0, 0, 0, 0x10]].concat();
/// let err: DecodeError = envelope::parse_prelude(&head, &Limits::default()).unwrap_err().into();
/// assert!(matches!(err, DecodeError::Envelope(EnvelopeError::FrameCountExceeded { .. })));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Layer 1: the TCP framing.
    Envelope(EnvelopeError),
    /// Layer 2: frame 0 and its placeholders (msgpack errors in frame 0 and
    /// in sub-headers included).
    Message(MessageError),
    /// Layer 3: rebuilding a value from a block.
    Deserialize(DeserializeError),
    /// A value that does not fit the type asked of it
    /// (`framewire::from_value`): a wrong type, a missing field,
    /// an unknown variant, at `path` (`"who_has.x[0]"`; empty at the top).
    ///
    Field {
        /// Where: field names, map keys and indexes from the top.
        path: String,
        /// What is wrong, as serde says it.
        message: String,
    },
}

impl DecodeError {
    /// Where in the message the error is, when it is at a byte of a frame
    /// (msgpack and placeholder errors).
    pub fn position(&self) -> Option<crate::msgpack::Position> {
        match self {
            DecodeError::Message(e) => e.position(),
            DecodeError::Deserialize(DeserializeError::Msgpack(e)) => e.position(),
            _ => None,
        }
    }

    /// The msgpack error underneath, if that is what it is.
    pub fn msgpack(&self) -> Option<&MsgpackError> {
        match self {
            DecodeError::Message(MessageError::Msgpack(e))
            | DecodeError::Deserialize(DeserializeError::Msgpack(e)) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Envelope(e) => e.fmt(f),
            DecodeError::Message(e) => e.fmt(f),
            DecodeError::Deserialize(e) => e.fmt(f),
            DecodeError::Field { path, message } if path.is_empty() => f.write_str(message),
            DecodeError::Field { path, message } => write!(f, "{path}: {message}"),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Envelope(e) => Some(e),
            DecodeError::Message(e) => Some(e),
            DecodeError::Deserialize(e) => Some(e),
            DecodeError::Field { .. } => None,
        }
    }
}

impl From<EnvelopeError> for DecodeError {
    fn from(e: EnvelopeError) -> DecodeError {
        DecodeError::Envelope(e)
    }
}

impl From<MessageError> for DecodeError {
    fn from(e: MessageError) -> DecodeError {
        DecodeError::Message(e)
    }
}

impl From<DeserializeError> for DecodeError {
    fn from(e: DeserializeError) -> DecodeError {
        DecodeError::Deserialize(e)
    }
}

impl From<CompressionError> for DecodeError {
    fn from(e: CompressionError) -> DecodeError {
        DecodeError::Deserialize(DeserializeError::Compression(e))
    }
}

impl From<DecodeError> for io::Error {
    fn from(e: DecodeError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}
