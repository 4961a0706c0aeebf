//! [`Session`]: what a connection and its peer agreed on, and what every
//! later call needs from it: the codec, the limits, and the serialize and
//! deserialize options made from them.

use std::sync::Arc;

use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::protocol;
use crate::serialize::{Codec, DeserializeOptions, SerializeOptions};
use crate::value::Value;

use super::error::TransportError;

/// The outcome of a handshake: what both sides agreed on, and what the peer
/// sent (made by [`Negotiated::new`], in the handshake's module).
#[derive(Clone, Debug, PartialEq)]
pub struct Negotiated {
    pub(super) compression: Option<Codec>,
    pub(super) pickle_protocol: u8,
    pub(super) ours: Vec<String>,
    pub(super) peer: Value,
    pub(super) checksums: bool,
}

/// The settings of one connection: its [`Limits`], and after a handshake
/// what the two sides agreed ([`Negotiated`]). Every
/// [`Connection`](super::Connection) has one ([`Connection::session`](super::Connection::session)),
/// and so do its halves, so one call sends or receives a whole message
/// ([`Connection::send_value`](super::Connection::send_value),
/// [`Connection::recv_value`](super::Connection::recv_value)).
///
/// ```
/// # #[cfg(feature = "lz4")] {
/// use framewire::serialize::Codec;
/// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
/// use framewire::Value;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 16);
/// let mut opts = HandshakeOptions::default();
/// opts.compression = Some(Codec::Lz4);
/// let builder = ConnectionBuilder::new();
/// let (left, right) = tokio::join!(builder.handshake(a, &opts), builder.handshake(b, &opts));
/// let ((mut left, _), (mut right, _)) = (left?, right?);
/// assert_eq!(left.session().codec(), Some(Codec::Lz4));
/// assert_eq!(left.session().serialize_options().compression, Some(Codec::Lz4));
///
/// // One call each way: serialized with the agreed codec, deserialized
/// // from the receive buffers.
/// let msg = Value::map_of([("data", Value::ToSerialize(Box::new(Value::bin(vec![0u8; 100_000]))))]);
/// left.send_value(&msg).await?;
/// assert_eq!(right.recv_value().await.expect("a message")?.get("data"), Some(&Value::bin(vec![0u8; 100_000])));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    limits: Limits,
    /// The options given to the builder (their `compression` is replaced
    /// by the agreed codec).
    serialize: Arc<SerializeOptions>,
    /// Whether whole messages are received with their blocks deserialized.
    deserialize: bool,
    negotiated: Option<Arc<Negotiated>>,
}

impl Session {
    /// A session without a handshake: no codec, these limits and options.
    pub(crate) fn new(limits: Limits, serialize: SerializeOptions, deserialize: bool) -> Session {
        Session {
            limits,
            serialize: Arc::new(serialize),
            deserialize,
            negotiated: None,
        }
    }

    /// Whether [`recv_value`](super::Connection::recv_value) deserializes
    /// the blocks of what it receives (the default), or keeps them as they
    /// came ([`ConnectionBuilder::deserialize_blocks`](super::ConnectionBuilder::deserialize_blocks)).
    pub fn deserializes_blocks(&self) -> bool {
        self.deserialize
    }

    /// This session after a handshake.
    pub(crate) fn agreed(&mut self, negotiated: Negotiated) {
        self.negotiated = Some(Arc::new(negotiated));
    }

    /// The limits incoming messages are checked against (and outgoing ones:
    /// a connection refuses to send what it would refuse to receive).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What the handshake agreed, if there was one.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_deref()
    }

    /// The codec both sides compress with (none without a handshake).
    pub fn codec(&self) -> Option<Codec> {
        self.negotiated.as_ref().and_then(|n| n.codec())
    }

    /// How to serialize messages for this peer: the connection's options
    /// ([`ConnectionBuilder::serialize_options`](super::ConnectionBuilder::serialize_options),
    /// by default [`SerializeOptions::default()`]) with the agreed codec:
    /// Dask compresses only what a comm negotiated.
    pub fn serialize_options(&self) -> SerializeOptions {
        SerializeOptions {
            compression: self.codec(),
            ..(*self.serialize).clone()
        }
    }

    /// How to deserialize `received`: this session's limits and families,
    /// and its receive buffers as the backing, so shards that arrived back
    /// to back merge without a copy.
    pub fn deserialize_options(&self, received: &Envelope) -> DeserializeOptions {
        DeserializeOptions {
            limits: self.limits.clone(),
            registry: self.serialize.registry.clone(),
            backing: Vec::new(),
        }
        .backed_by(received)
    }
}

/// `value` as a message, serialized with the session's options.
pub(crate) fn encode_value(value: &Value, session: &Session) -> Result<Envelope, TransportError> {
    let frames = protocol::dumps_with(value, &session.serialize_options())?;
    Ok(Envelope::new(frames)?)
}

/// A typed message as the session sends it (its options, the agreed codec).
#[cfg(feature = "serde")]
pub(crate) fn encode_msg<M: serde::Serialize + ?Sized>(
    msg: &M,
    session: &Session,
) -> Result<Envelope, TransportError> {
    let frames = crate::typed::to_frames(msg, &session.serialize_options())?;
    Ok(Envelope::new(frames)?)
}

/// A received message read as `M`, under the session's limits, backed by
/// its receive buffers (through [`decode_value`] when the session is
/// pass-through).
#[cfg(feature = "serde")]
pub(crate) fn decode_msg<M: serde::de::DeserializeOwned>(
    env: &Envelope,
    session: &Session,
) -> Result<M, TransportError> {
    if !session.deserializes_blocks() {
        // Blocks stay as they came: read through the dynamic path.
        return Ok(crate::typed::from_value(decode_value(env, session)?)?);
    }
    Ok(crate::typed::from_frames(
        env.frames(),
        &session.deserialize_options(env),
    )?)
}

/// A received message, decoded under the session's limits: its blocks
/// deserialized (backed by its receive buffers), or kept as they came when
/// the session is pass-through ([`Session::deserializes_blocks`]).
pub(crate) fn decode_value(env: &Envelope, session: &Session) -> Result<Value, TransportError> {
    if !session.deserializes_blocks() {
        return Ok(crate::message::decode(env.frames(), session.limits())
            .map_err(protocol::DecodeError::from)?);
    }
    Ok(protocol::loads_with(
        env.frames(),
        &session.deserialize_options(env),
    )?)
}
