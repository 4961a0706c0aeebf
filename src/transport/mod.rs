//! The async transport: Dask's TCP framing on tokio and the handshake
//! (SPEC.md §2, §6).
//!
//! ```text
//!                   ┌──────────────────────── Connection<T> ────────────────────────┐
//!  Envelope ──Sink──▶ write: prelude + small frames coalesced │ large frames' own Bytes ──writev──▶ T
//!  Envelope ◀─Stream─ read:  prelude → Limits → small frames in one buffer,           ◀──read──── T
//!                   │        large frames in their own (recycled) buffer               │
//!                   └─── handshake:   {"compression", "python", "pickle-protocol",      ┘
//!                                      "framewire-<ext>"...} both ways, then negotiate
//!
//!  read::FrameReader: the framing, sans IO, that Connection's reader, FrameCodec and a relay drive.
//!  FrameCodec: the same framing as a tokio-util Decoder/Encoder (the encoder copies).
//!  Stats: what each moved, and the bytes copied, counted where the copies happen.
//! ```
//!
//! * [`Connection`] (and its halves [`ReadHalf`] / [`WriteHalf`]): the
//!   zero-copy path. Frames are written from their own `Bytes` with vectored
//!   writes and read into buffers the decoded frames are slices of.
//! * [`FrameCodec`]: for `Framed` users; simple, but its encoder copies
//!   every payload.
//! * [`ConnectionBuilder`]: the way in: `connect` to an address, `accept` a
//!   TCP stream, or `handshake` over any byte stream: the Dask handshake,
//!   with framewire extensions, then a [`Connection`].
//!
//! # Examples
//!
//! ```
//! use bytes::Bytes;
//! use framewire::transport::{ConnectionBuilder, HandshakeOptions};
//! use framewire::{dumps, loads, Envelope, Value};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let (a, b) = tokio::io::duplex(1 << 16);
//! let opts = HandshakeOptions::default();
//! let builder = ConnectionBuilder::new();
//! let (left, right) = tokio::join!(builder.handshake(a, &opts), builder.handshake(b, &opts));
//! let ((mut left, agreed), (mut right, _)) = (left?, right?);
//! assert_eq!(agreed.pickle_protocol(), 5);
//!
//! let msg = Value::map_of([("op", Value::str("ping"))]);
//! left.send(Envelope::new(dumps(&msg)?)?).await?;
//! let env = right.recv().await.expect("a message")?;
//! assert_eq!(loads(env.frames())?, msg);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checksum;
mod codec;
mod conn;
mod connect;
mod deadline;
mod error;
mod handshake;
#[cfg(feature = "serde")]
mod message_codec;
// The sans-IO reader the connections drive, public for a relay that drives
// it itself (the CLI's tap): an API that may change in any release, so only
// behind the `unstable` feature (as h2 keeps its `frame` module).
#[cfg(feature = "unstable")]
pub mod read;
// Without it, the relay's part of the reader is unused here, and its public
// items are reached only from within the crate.
#[cfg(not(feature = "unstable"))]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod read;
mod session;
mod socket;
mod stats;
#[cfg(feature = "tls")]
mod tls;
mod write;

pub use checksum::ChecksumError;
pub use codec::{FrameCodec, FrameCodecBuilder};
pub use conn::{Connection, ConnectionBuilder, ReadHalf, WriteHalf};
pub use error::{
    AddressError, ConnectError, HandshakeError, TimeoutPhase, TlsError, TransportError,
};
pub use handshake::{Checksums, HandshakeOptions, EXTENSION_PREFIX};
#[cfg(feature = "serde")]
pub use message_codec::MessageCodec;
#[cfg(feature = "serde")]
pub(crate) use session::decode_msg;
pub use session::Negotiated;
pub use session::Session;
#[cfg(not(feature = "tls"))]
pub use socket::TlsConfig;
pub use socket::{Address, Socket};
pub use stats::Stats;
/// The TLS record reader under a fuzzer (`fuzz/fuzz_targets/tls_record_read.rs`).
#[cfg(all(feature = "tls", feature = "unstable"))]
pub use tls::fuzz_tls_records;
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, TlsCopies, TlsStream};
pub use write::COALESCE_THRESHOLD;
