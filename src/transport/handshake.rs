//! The Dask connection handshake (SPEC.md §6), with framewire
//! extensions.
//!
//! ```text
//!   us                                                     peer
//!   │── {"compression": nil|str, "python": [3, 11, 7],      ──▶│   both sides write at once,
//!   │    "pickle-protocol": 5, "framewire-<ext>": v, ...}      │   then read (we do both
//!   │◀── {"compression": .., "python": .., "pickle-protocol": ..}   concurrently: no deadlock
//!   │                                                          │   even on a tiny pipe)
//!   negotiate: pickle-protocol = min(ours, theirs)   (missing → error)
//!              compression     = ours if equal, else nil   (missing → error)
//!              extensions      = "framewire-<name>" keys; agreed(name) if both offered it
//! ```
//!
//! Python `distributed` ignores keys it does not know, so extension keys are
//! invisible to a Python peer; two framewire peers see each other's and can
//! switch on a feature only when both offered it.
//!
//! # Examples
//!
//! ```
//! use framewire::transport::{ConnectionBuilder, HandshakeOptions};
//! use framewire::Value;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let (a, b) = tokio::io::duplex(64);
//! let ours = HandshakeOptions::default().extension("crc32c", Value::Bool(true));
//! let mut theirs = HandshakeOptions::default().extension("crc32c", Value::Bool(true));
//! theirs.pickle_protocol = 4;
//! let builder = ConnectionBuilder::new();
//! let (x, y) = tokio::join!(builder.handshake(a, &ours), builder.handshake(b, &theirs));
//! let ((_conn, agreed), _) = (x?, y?);
//! assert_eq!(agreed.pickle_protocol(), 4);
//! assert_eq!(agreed.codec(), None);
//! assert!(agreed.agreed("crc32c"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::envelope::Envelope;
use crate::limits::Limits;
use crate::message;
use crate::serialize::Codec;
use crate::value::Value;

use super::checksum;
use super::conn::Connection;
use super::error::{HandshakeError, TimeoutPhase, TransportError};
use super::session::Negotiated;

/// Extension keys are this prefix followed by the extension's name.
pub const EXTENSION_PREFIX: &str = "framewire-";

/// Limits for reading the peer's handshake: a few small frames, whatever
/// the connection's own limits allow later.
const HANDSHAKE_LIMITS: Limits = Limits {
    max_frames: 16,
    max_frame_len: 64 << 10,
    max_message_len: 64 << 10,
    max_header_len: 64 << 10,
    prealloc_cap: 64 << 10,
    max_depth: 32,
    max_msgpack_items: 4096,
    max_pickle_values: 0,
    max_decompressed_len: 0,
};

/// Whether a connection uses checksum trailers (SPEC.md §6.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// Not offered (what Python peers do).
    #[default]
    Off,
    /// Offered; used when the peer offers them too.
    Offer,
    /// Offered, and the handshake fails with
    /// [`HandshakeError::ChecksumRequired`] if the peer does not offer them.
    Require,
}

/// What we announce in the handshake.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HandshakeOptions {
    /// The codec we offer, or `None` (Dask's default, `compression: false`).
    /// It is only used when the peer offers the same, and only if this
    /// build has its feature ([`Codec::is_enabled`]): the handshake refuses
    /// to offer one it could not use ([`HandshakeError::InvalidValue`]).
    pub compression: Option<Codec>,
    /// The `python` key: `[major, minor, micro]`. Informational; Dask never
    /// checks it. Default `[3, 11, 7]`.
    pub python: [u16; 3],
    /// The highest pickle protocol we accept (Dask: 5; a Scheduler's
    /// outgoing connections announce 4).
    pub pickle_protocol: u8,
    /// framewire extensions: `(name, value)`, sent as `"framewire-<name>"`.
    pub extensions: Vec<(String, Value)>,
    /// Checksum trailers (SPEC.md §6.2): offered as the extension
    /// `"framewire-checksum": "crc32"`. Default: off, as Python peers.
    pub checksums: Checksums,
    /// Time allowed for the whole exchange (default 30 s, Dask's
    /// `distributed.comm.timeouts.connect`); `None` waits forever.
    pub timeout: Option<Duration>,
}

impl Default for HandshakeOptions {
    fn default() -> HandshakeOptions {
        HandshakeOptions {
            compression: None,
            python: [3, 11, 7],
            pickle_protocol: 5,
            extensions: Vec::new(),
            checksums: Checksums::Off,
            timeout: Some(Duration::from_secs(30)),
        }
    }
}

impl HandshakeOptions {
    /// These options plus an extension.
    pub fn extension(mut self, name: &str, value: Value) -> HandshakeOptions {
        self.extensions.push((name.to_owned(), value));
        self
    }

    /// The handshake map, keys in Dask's order, then the extensions.
    ///
    /// ```
    /// use framewire::transport::HandshakeOptions;
    /// use framewire::{dumps, Envelope};
    /// // Byte for byte what Python sends (fixture handshake/client_to_server.bin).
    /// let v = HandshakeOptions::default().to_value()?;
    /// let wire = Envelope::new(dumps(&v)?)?.to_bytes();
    /// assert_eq!(wire.len(), 66);
    /// assert_eq!(&wire[24..], b"\x83\xabcompression\xc0\xa6python\x93\x03\x0b\x07\xafpickle-protocol\x05");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_value(&self) -> Result<Value, HandshakeError> {
        if self.compression.is_some_and(|c| !c.is_enabled()) {
            return Err(HandshakeError::InvalidValue("compression"));
        }
        let mut map = vec![
            (
                Value::str("compression"),
                self.compression
                    .map_or(Value::Nil, |c| Value::from_static(c.name())),
            ),
            (
                Value::str("python"),
                Value::Array(self.python.iter().map(|&v| Value::from(v)).collect()),
            ),
            (
                Value::str("pickle-protocol"),
                Value::from(self.pickle_protocol),
            ),
        ];
        let offered = self.offered();
        for (i, (name, value)) in offered.iter().enumerate() {
            let duplicate = offered[..i].iter().any(|(n, _)| n == name);
            if name.is_empty() || duplicate {
                return Err(HandshakeError::InvalidExtensionName);
            }
            map.push((
                Value::from(format!("{EXTENSION_PREFIX}{name}")),
                value.clone(),
            ));
        }
        Ok(Value::Map(map))
    }

    /// Every extension we offer: the checksum one, then the others.
    fn offered(&self) -> Vec<(String, Value)> {
        let mut all = Vec::with_capacity(self.extensions.len() + 1);
        if self.checksums != Checksums::Off {
            all.push((
                checksum::EXTENSION.to_owned(),
                Value::str(checksum::ALGORITHM),
            ));
        }
        all.extend(self.extensions.iter().cloned());
        all
    }
}

impl Negotiated {
    /// Computes the agreement from our options and the peer's handshake map,
    /// as Dask's `handshake_configuration` does.
    ///
    /// ```
    /// use framewire::serialize::Codec;
    /// use framewire::transport::{HandshakeError, HandshakeOptions, Negotiated};
    /// use framewire::Value;
    /// let theirs = Value::map_of([("compression", Value::str("lz4")), ("pickle-protocol", 4.into())]);
    /// let mut ours = HandshakeOptions::default();
    /// ours.compression = Some(Codec::Lz4);
    /// let n = Negotiated::new(&ours, theirs)?;
    /// assert_eq!((n.codec(), n.pickle_protocol()), (Some(Codec::Lz4), 4));
    ///
    /// let missing = Value::map_of([("compression", Value::Nil)]);
    /// assert_eq!(
    ///     Negotiated::new(&ours, missing),
    ///     Err(HandshakeError::MissingKey("pickle-protocol"))
    /// );
    /// # Ok::<(), HandshakeError>(())
    /// ```
    pub fn new(ours: &HandshakeOptions, peer: Value) -> Result<Negotiated, HandshakeError> {
        if peer.as_map().is_none() {
            return Err(HandshakeError::NotAMap);
        }
        let theirs_pickle = match peer.get("pickle-protocol") {
            None => return Err(HandshakeError::MissingKey("pickle-protocol")),
            Some(v) => v
                .as_int()
                .and_then(|i| i.as_u64())
                .ok_or(HandshakeError::InvalidValue("pickle-protocol"))?,
        };
        let theirs_compression = match peer.get("compression") {
            None => return Err(HandshakeError::MissingKey("compression")),
            Some(Value::Nil) => None,
            Some(Value::Str(s)) => Some(&s[..]),
            Some(_) => return Err(HandshakeError::InvalidValue("compression")),
        };
        let compression = ours
            .compression
            .filter(|c| Some(c.name()) == theirs_compression);
        // min(ours, theirs) ≤ ours, which is a u8.
        let pickle_protocol = u8::try_from(theirs_pickle)
            .map_or(ours.pickle_protocol, |p| p.min(ours.pickle_protocol));
        let key = format!("{EXTENSION_PREFIX}{}", checksum::EXTENSION);
        let peer_sums = peer.get(&key).and_then(Value::as_str) == Some(checksum::ALGORITHM);
        let checksums = ours.checksums != Checksums::Off && peer_sums;
        if ours.checksums == Checksums::Require && !checksums {
            return Err(HandshakeError::ChecksumRequired);
        }
        Ok(Negotiated {
            compression,
            pickle_protocol,
            ours: ours.offered().into_iter().map(|(n, _)| n).collect(),
            peer,
            checksums,
        })
    }

    /// The codec both sides compress with: ours if the peer offered the
    /// same, else none. [`Session::serialize_options`](super::Session::serialize_options)
    /// carries it.
    pub fn codec(&self) -> Option<Codec> {
        self.compression
    }

    /// Whether both sides offered checksum trailers: every message after the
    /// handshake carries one, both ways.
    pub fn checksums(&self) -> bool {
        self.checksums
    }

    /// The pickle protocol both sides use: the lower of the two.
    pub fn pickle_protocol(&self) -> u8 {
        self.pickle_protocol
    }

    /// The peer's whole handshake map, unknown keys included.
    pub fn peer_info(&self) -> &Value {
        &self.peer
    }

    /// The peer's `python` version, if it sent three integers.
    pub fn peer_python(&self) -> Option<[u64; 3]> {
        match self.peer.get("python")?.as_array()? {
            [a, b, c] => Some([
                a.as_int()?.as_u64()?,
                b.as_int()?.as_u64()?,
                c.as_int()?.as_u64()?,
            ]),
            _ => None,
        }
    }

    /// The extensions the peer offered: `(name, value)` for every
    /// `"framewire-<name>"` key, in its order. Empty for a Python peer.
    pub fn peer_extensions(&self) -> Vec<(&str, &Value)> {
        self.peer
            .as_map()
            .unwrap_or_default()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str()?.strip_prefix(EXTENSION_PREFIX)?, v)))
            .collect()
    }

    /// The value the peer offered for extension `name`.
    pub fn peer_extension(&self, name: &str) -> Option<&Value> {
        self.peer_extensions()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// Whether both sides offered extension `name`.
    pub fn agreed(&self, name: &str) -> bool {
        self.ours.iter().any(|n| n == name) && self.peer_extension(name).is_some()
    }
}

/// Runs the exchange on a fresh connection.
pub(crate) async fn exchange<T>(
    conn: &mut Connection<T>,
    opts: &HandshakeOptions,
) -> Result<Negotiated, TransportError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let frames = message::encode(&opts.to_value()?)?;
    if frames.len() != 1 {
        return Err(HandshakeError::UnexpectedFrames(frames.len()).into());
    }
    let ours = Envelope::new(frames)?;
    let (io, reader, writer) = conn.parts();
    let limits = reader.replace_limits(Arc::new(HANDSHAKE_LIMITS));
    // The handshake itself never carries a trailer.
    reader.set_checksums(false);
    writer.set_checksums(false);
    writer.start_send(&ours)?;
    let (mut sent, mut theirs) = (false, None);
    let both = poll_fn(|cx| {
        if !sent {
            match writer.poll_flush(io, cx) {
                Poll::Ready(Ok(())) => sent = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if theirs.is_none() {
            match reader.poll_recv(io, cx) {
                Poll::Ready(Some(Ok(env))) => theirs = Some(env),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(None) => return Poll::Ready(Err(TransportError::Closed)),
                Poll::Pending => {}
            }
        }
        if sent && theirs.is_some() {
            Poll::Ready(Ok(theirs.take()))
        } else {
            Poll::Pending
        }
    });
    let result = match opts.timeout {
        Some(t) => tokio::time::timeout(t, both)
            .await
            .unwrap_or(Err(TransportError::Timeout {
                phase: TimeoutPhase::Handshake,
            })),
        None => both.await,
    };
    let env = match result {
        Ok(Some(env)) => env,
        Ok(None) => return Err(TransportError::Closed), // unreachable: Ready only with Some
        Err(e) => {
            reader.poison();
            writer.poison();
            return Err(e);
        }
    };
    reader.replace_limits(limits);
    let peer = message::decode(env.frames(), &HANDSHAKE_LIMITS)?;
    let agreed = Negotiated::new(opts, peer)?;
    reader.set_checksums(agreed.checksums);
    writer.set_checksums(agreed.checksums);
    conn.session_mut().agreed(agreed.clone());
    Ok(agreed)
}
