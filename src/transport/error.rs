//! [`TransportError`]: what can stop a connection, and [`HandshakeError`]:
//! what can be wrong with a peer's handshake.
//!
//! ```text
//! TransportError ─┬─ Io(io::Error)          the socket failed (reset, EPIPE, ...)
//!                 ├─ Decode(DecodeError)    the peer's bytes are not a valid message
//!                 ├─ Checksum(..)           a frame fails its CRC32 (agreed trailers)
//!                 ├─ Encode(EncodeError)    a message we were asked to send is refused
//!                 ├─ PeerTimeout(io::Error) the peer stopped answering (TCP keepalive or
//!                 │                         TCP_USER_TIMEOUT gave up: a dead host, a partition)
//!                 ├─ Connect(ConnectError)  no connection to the address before the connect
//!                 │                         deadline (or, without one, the one attempt failed)
//!                 ├─ Timeout { phase }      a per-message deadline passed
//!                 ├─ Handshake(..)          the peer's handshake is unusable
//!                 ├─ Poisoned               an earlier error left the stream out of sync
//!                 └─ Closed                 the connection was closed (by us, or by the peer
//!                                           before the handshake completed)
//! ```
//!
//! Every error but `Encode` (which is raised before a single byte is
//! written) is terminal: the connection is poisoned.

use std::fmt;
use std::io;
use std::time::Duration;

use super::checksum::ChecksumError;
use crate::envelope::EnvelopeError;
use crate::error::{EncodeError, ErrorKind};
use crate::protocol::DecodeError;

/// Which step a deadline interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// Exchanging the Dask handshake.
    Handshake,
    /// Reading a message's prelude (`N`, `count`, the length table).
    ReadPrelude,
    /// Reading a message's frames.
    ReadFrames,
    /// Writing a message.
    Write,
    /// Connecting: the TCP connection to the peer.
    Connect,
    /// The TLS handshake, before the Dask handshake.
    TlsHandshake,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Handshake => "the handshake",
            TimeoutPhase::ReadPrelude => "reading a prelude",
            TimeoutPhase::ReadFrames => "reading frames",
            TimeoutPhase::Write => "writing a message",
            TimeoutPhase::Connect => "connecting",
            TimeoutPhase::TlsHandshake => "in the TLS handshake",
        })
    }
}

/// What is wrong with the handshake a peer sent (SPEC.md §6).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The handshake message is not a msgpack map.
    NotAMap,
    /// A required key is missing (Dask fails the same way: "Your Dask
    /// versions may not be in sync" for `pickle-protocol`, `KeyError` for
    /// `compression`).
    MissingKey(&'static str),
    /// A key has a value of the wrong type or out of range.
    InvalidValue(&'static str),
    /// The handshake message has more than one frame (out-of-band values).
    UnexpectedFrames(usize),
    /// An extension name we offer is not usable as a key suffix (empty or
    /// offered twice).
    InvalidExtensionName,
    /// Our policy requires checksums and the peer did not offer them (a
    /// Python peer, or a downgrade).
    ChecksumRequired,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::NotAMap => f.write_str("the peer's handshake is not a map"),
            HandshakeError::MissingKey(k) => write!(
                f,
                "the peer's handshake has no {k:?} key (Dask versions may not be in sync)"
            ),
            HandshakeError::InvalidValue(k) => {
                write!(f, "the peer's handshake has an invalid {k:?} value")
            }
            HandshakeError::UnexpectedFrames(n) => {
                write!(f, "the handshake message has {n} frames, expected 1")
            }
            HandshakeError::InvalidExtensionName => {
                f.write_str("an extension name is empty or offered twice")
            }
            HandshakeError::ChecksumRequired => {
                f.write_str("checksums are required and the peer did not offer them")
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

/// Why TLS could not be set up or a TLS handshake failed: one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsError {
    message: String,
}

impl TlsError {
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn new(message: impl Into<String>) -> TlsError {
        TlsError {
            message: message.into(),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsError {}

/// An address [`Address::parse`](super::Address::parse) cannot read (`address: what is wrong`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressError {
    address: String,
    problem: String,
}

impl AddressError {
    pub(super) fn new(address: String, problem: String) -> AddressError {
        AddressError { address, problem }
    }

    /// The address as given.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.address, self.problem)
    }
}

impl std::error::Error for AddressError {}

/// Everything that can stop a [`Connection`](super::Connection) or a
/// [`FrameCodec`](super::FrameCodec).
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// The underlying IO failed. The stream is poisoned.
    Io(io::Error),
    /// The peer sent bytes that are not a valid message: its framing
    /// ([`DecodeError::Envelope`], e.g. [`EnvelopeError::Truncated`] when it
    /// ended in the middle of one), or, for the calls that decode what they
    /// receive, its content. The stream is poisoned.
    Decode(DecodeError),
    /// A message fails its checksum trailer (when checksums were agreed).
    /// The stream is poisoned.
    Checksum(ChecksumError),
    /// A message to send was refused before any byte of it was written; the
    /// connection is still usable.
    Encode(EncodeError),
    /// The peer stopped answering: the kernel gave up on the connection
    /// (TCP keepalive probes unanswered, or data unacknowledged for the
    /// connection's [`tcp_timeout`](super::ConnectionBuilder::tcp_timeout)),
    /// as after a host lost power or a network partition. The error the
    /// kernel reported (`Connection timed out`, or `No route to host` /
    /// `Network is unreachable` when the route itself went) is inside. The
    /// stream is poisoned.
    PeerTimeout(io::Error),
    /// No connection could be made to an address: every attempt until the
    /// connect deadline failed (see [`ConnectError`]). Nothing was sent.
    /// Boxed: every `Result` of the transport carries this enum, and the
    /// connect failure is its largest and rarest variant.
    Connect(Box<ConnectError>),
    /// A per-message deadline passed. The stream is poisoned.
    Timeout {
        /// What was going on.
        phase: TimeoutPhase,
    },
    /// The peer's handshake is unusable.
    Handshake(HandshakeError),
    /// TLS could not be set up, or the TLS handshake failed (a certificate
    /// refused, a peer that does not speak TLS...).
    Tls(TlsError),
    /// An address that cannot be connected to as given (not
    /// `tcp://HOST:PORT` or `tls://HOST:PORT`). Nothing was tried.
    Address(AddressError),
    /// An earlier error (or a send cancelled after part of its message was
    /// written) left this direction of the stream out of sync.
    Poisoned,
    /// The connection is closed: a send after `close`, or the peer closed
    /// before the handshake completed.
    Closed,
}

impl TransportError {
    /// Whether this error leaves the connection unusable (everything but
    /// [`TransportError::Encode`]).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, TransportError::Encode(_))
    }

    /// What kind of failure this is, to branch on (the same kinds as a
    /// call's and a client's errors).
    ///
    /// ```
    /// use framewire::{ErrorKind, TransportError};
    ///
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    /// assert_eq!(TransportError::from(refused).kind(), ErrorKind::Io);
    /// assert_eq!(TransportError::Closed.kind(), ErrorKind::Closed);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            TransportError::Io(_) => ErrorKind::Io,
            TransportError::Decode(_)
            | TransportError::Checksum(_)
            | TransportError::Handshake(_) => ErrorKind::Protocol,
            TransportError::Encode(_) => ErrorKind::Encode,
            TransportError::PeerTimeout(_) => ErrorKind::PeerTimeout,
            TransportError::Connect(_) => ErrorKind::Connect,
            TransportError::Timeout { .. } => ErrorKind::Timeout,
            TransportError::Tls(_) => ErrorKind::Tls,
            TransportError::Address(_) => ErrorKind::InvalidAddress,
            // Unusable either way: closed, or out of sync after an error.
            TransportError::Poisoned | TransportError::Closed => ErrorKind::Closed,
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Io(e) => write!(f, "io error: {e}"),
            TransportError::Decode(e) => write!(f, "invalid message from the peer: {e}"),
            TransportError::Checksum(e) => write!(f, "invalid message from the peer: {e}"),
            TransportError::Encode(e) => write!(f, "cannot send the message: {e}"),
            TransportError::PeerTimeout(e) => write!(f, "the peer stopped answering ({e})"),
            TransportError::Connect(e) => e.fmt(f),
            TransportError::Timeout { phase } => write!(f, "timed out {phase}"),
            TransportError::Handshake(e) => write!(f, "handshake failed: {e}"),
            TransportError::Tls(e) => e.fmt(f),
            TransportError::Address(e) => e.fmt(f),
            TransportError::Poisoned => f.write_str(
                "the connection is poisoned: an earlier error left the stream out of sync",
            ),
            TransportError::Closed => f.write_str("the connection is closed"),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Io(e) | TransportError::PeerTimeout(e) => Some(e),
            TransportError::Connect(e) => Some(e),
            TransportError::Decode(e) => Some(e),
            TransportError::Checksum(e) => Some(e),
            TransportError::Encode(e) => Some(e),
            TransportError::Handshake(e) => Some(e),
            TransportError::Tls(e) => Some(e),
            TransportError::Address(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> TransportError {
        // Our record layer's errors (a refused record, an alert).
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<TlsError>()) {
            return TransportError::Tls(tls.clone());
        }
        if is_peer_timeout(&e) {
            return TransportError::PeerTimeout(e);
        }
        TransportError::Io(e)
    }
}

impl From<AddressError> for TransportError {
    fn from(e: AddressError) -> TransportError {
        TransportError::Address(e)
    }
}

impl From<DecodeError> for TransportError {
    fn from(e: DecodeError) -> TransportError {
        TransportError::Decode(e)
    }
}

impl From<EnvelopeError> for TransportError {
    fn from(e: EnvelopeError) -> TransportError {
        TransportError::Decode(DecodeError::Envelope(e))
    }
}

impl From<crate::message::MessageError> for TransportError {
    fn from(e: crate::message::MessageError) -> TransportError {
        TransportError::Decode(DecodeError::Message(e))
    }
}

impl From<ChecksumError> for TransportError {
    fn from(e: ChecksumError) -> TransportError {
        TransportError::Checksum(e)
    }
}

impl From<EncodeError> for TransportError {
    fn from(e: EncodeError) -> TransportError {
        TransportError::Encode(e)
    }
}

impl From<HandshakeError> for TransportError {
    fn from(e: HandshakeError) -> TransportError {
        TransportError::Handshake(e)
    }
}

impl From<TransportError> for io::Error {
    fn from(e: TransportError) -> io::Error {
        match e {
            TransportError::Io(e) | TransportError::PeerTimeout(e) => e,
            TransportError::Timeout { .. } => io::Error::new(io::ErrorKind::TimedOut, e),
            TransportError::Closed => io::Error::new(io::ErrorKind::NotConnected, e),
            TransportError::Encode(_) => io::Error::new(io::ErrorKind::InvalidInput, e),
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        }
    }
}

/// Whether an error of an established connection's socket means that the
/// peer stopped answering: the kernel's own timeout (`ETIMEDOUT`, from
/// keepalive or `TCP_USER_TIMEOUT`), or the route to it gone (`EHOSTUNREACH`,
/// `ENETUNREACH`: what a connection whose link went down reports when its
/// retransmissions give up). Only errors from the operating system count
/// (a `TimedOut` made by a library is not the kernel's verdict).
pub(crate) fn is_peer_timeout(e: &io::Error) -> bool {
    e.raw_os_error().is_some()
        && matches!(
            e.kind(),
            io::ErrorKind::TimedOut
                | io::ErrorKind::HostUnreachable
                | io::ErrorKind::NetworkUnreachable
        )
}

/// No connection to an address: what the last attempt failed with, after
/// how long and how many attempts (see
/// [`ConnectionBuilder::connect_timeout`](super::ConnectionBuilder::connect_timeout)).
///
/// Its message names the address in one line, as Dask's does:
/// `timed out trying to connect to tcp://10.0.0.1:8786 after 30 s (41
/// attempts): Connection refused (os error 111)`; with one attempt and no
/// deadline, `cannot connect to tcp://10.0.0.1:8786: Connection refused (os
/// error 111)`.
#[derive(Debug)]
pub struct ConnectError {
    pub(crate) address: String,
    pub(crate) deadline: Option<Duration>,
    pub(crate) elapsed: Duration,
    pub(crate) attempts: u32,
    pub(crate) last: io::Error,
}

impl ConnectError {
    /// The address, as given (`tcp://HOST:PORT`, `tls://HOST:PORT`, or
    /// the socket addresses a name resolved to).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The connect deadline that passed (`None`: there was none, and the
    /// one attempt failed).
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// Time from the first attempt to giving up.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// How many attempts were made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// What the last attempt failed with (`TimedOut` when the attempt
    /// itself ran out of time).
    pub fn last_error(&self) -> &io::Error {
        &self.last
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.deadline {
            Some(d) => write!(
                f,
                "timed out trying to connect to {} after {} s ({} attempt{}): {}",
                self.address,
                seconds(d),
                self.attempts,
                if self.attempts == 1 { "" } else { "s" },
                self.last
            ),
            None => write!(f, "cannot connect to {}: {}", self.address, self.last),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.last)
    }
}

/// A duration in seconds as a person writes it: `30`, `0.5`.
fn seconds(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}
