//! # framewire
//!
//! Nested task messages as scatter-gather frame lists, zero-copy and
//! byte-compatible with Dask `distributed`'s wire protocol (2026.8.0).
//!
//! The layers, each in its own module and each a section of `SPEC.md`; data
//! flows one way through them, and no layer names one above it:
//!
//! ```text
//! Value ──dumps──▶ frames (Vec<Bytes>) ──Envelope──▶ prelude + frames ──▶ socket (vectored)
//! Value ◀──loads── frames (slices)     ◀──Envelope── one Bytes          ◀── socket
//! ```
//!
//! * [`envelope`]: the TCP framing, `u64 N | u64 count | count × u64 len | frames`.
//! * [`message`]: frame 0 is msgpack; `{"__Serialized__": i}` and
//!   `{"__Pickled__": i}` placeholders point at blocks of frames.
//! * [`serialize`]: a value becomes a header plus frames of its own
//!   (families, collections with offset tables, shards, compression).
//! * [`dumps`] / [`loads`]: a whole message through every layer, as Dask's
//!   `distributed.protocol.dumps` / `loads` (`deserialize=True`);
//!   [`message::encode`] / [`message::decode`] are the pass-through layer alone.
//! * `typed` (feature `serde`): your serde types as messages,
//!   [`to_value`][to_value] / [`from_value`][from_value],
//!   blocks, arrays and bin fields kept zero-copy.
//! * `transport` (feature `transport`): the tokio transport, a zero-copy
//!   `Connection` (vectored writes, recycled receive buffers) with its
//!   `Session`, the `FrameCodec` for `Framed`, `MessageCodec<T>` for typed
//!   messages, the Dask handshake, and `tcp://` / `tls://` addresses
//!   (feature `tls`: mutual TLS as Dask configures it).
//! * `dask` (feature `dask`): the 2026.8.0 messages as Rust types, one enum
//!   per channel, RPC calls and batched streams.
//! * `mmap` (feature `mmap`, Linux): payload frames in sealed memfds or
//!   spill files, mapped instead of read; the only module with `unsafe` code.
//! * `pickle` (feature `pickle`): plain Python values and numpy arrays out
//!   of Dask's pickle blocks and into them, nothing imported or run.
//!
//! Decoding never copies payloads: frames are slices of the receive buffer,
//! and so are the str and bin values inside frame 0. Encoding never copies
//! them either: a block's frames go out as the same `Bytes`. Every size a
//! peer declares is checked against [`Limits`] before anything is allocated;
//! each layer has its own error type, all of them in [`DecodeError`].
//!
//! ```
//! use framewire::{dumps, loads, Envelope, Limits, Value};
//!
//! // A Dask RPC message, as a Python peer writes it.
//! let msg = Value::map_of([("op", Value::str("identity")), ("reply", Value::Bool(true))]);
//! let wire = Envelope::new(dumps(&msg)?)?.to_bytes();
//!
//! // Read it back: split into frames (slices of `wire`), then decode them.
//! let (env, used) = Envelope::decode(&wire, &Limits::default())?;
//! assert_eq!(used, wire.len());
//! assert_eq!(loads(env.frames())?, msg);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Cargo features
//!
//! | feature | default | brings |
//! |---|---|---|
//! | `transport` | yes | `transport`: `Connection`, `FrameCodec`, the handshake, checksum trailers (tokio, tokio-util) |
//! | `serde` | yes | `typed`: serde types to and from messages |
//! | `dask` | yes | `dask`: the messages of `distributed` 2026.8.0, `Rpc`, batched streams (`serde` + `transport`) |
//! | `tls` | no | `tls://` with mutual certificates (rustls through tokio-rustls) |
//! | `lz4` | yes | Dask's `"lz4"` frames, written byte for byte as Python writes them |
//! | `zstd`, `snappy`, `zlib` | no | Dask's other codecs |
//! | `mmap` | no | Linux: frames in sealed memfds, large runs received into spill files |
//! | `pickle` | no | `pickle`: plain Python values (numpy arrays zero-copy) out of pickles and into them |
//!
//! Without a codec's feature, a frame compressed with it is
//! [`CompressionError::CodecNotEnabled`], never a panic.
//!
//! # Examples
//!
//! Runnable programs in the repository's `examples/`:
//!
//! * `examples/echo.rs` — an echo server and client over `Connection`:
//!   handshake, then whole messages with `send_value` / `recv_value`;
//! * `examples/framed.rs` — a `Framed` pipeline with `FrameCodec`;
//! * `examples/inspect.rs` — a capture inspector on the library API: frames,
//!   ops, and every block deserialized.
//!
// Links to items of a feature that is off go to the feature table.
#![cfg_attr(feature = "serde", doc = "[to_value]: crate::to_value")]
#![cfg_attr(not(feature = "serde"), doc = "[to_value]: crate#cargo-features")]
#![cfg_attr(feature = "serde", doc = "[from_value]: crate::from_value")]
#![cfg_attr(not(feature = "serde"), doc = "[from_value]: crate#cargo-features")]
#![deny(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![warn(unreachable_pub)]
// `unsafe` is denied everywhere but in `mmap`, the one audited module.
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "dask")]
pub mod dask;
pub mod envelope;
mod error;
mod limits;
pub mod message;
#[cfg(all(target_os = "linux", feature = "mmap"))]
pub mod mmap;
mod msgpack;
mod ndarray;
#[cfg(feature = "pickle")]
pub mod pickle;
mod protocol;
pub mod serialize;
#[cfg(feature = "transport")]
pub mod transport;
#[cfg(feature = "serde")]
pub mod typed;
mod value;

pub use envelope::{Envelope, EnvelopeError};
pub use error::{EncodeError, ErrorKind, LimitName};
pub use limits::Limits;
pub use message::MessageError;
pub use msgpack::{MsgpackError, Position};
pub use ndarray::{ArrayElement, NdArray};
pub use protocol::{dumps, dumps_with, loads, loads_with, DecodeError};
pub use serialize::{
    CompressionError, DeserializeError, DeserializeOptions, IterateCollection, SerializeOptions,
};
#[cfg(feature = "transport")]
pub use transport::{Connection, FrameCodec, TransportError};
#[cfg(feature = "serde")]
pub use typed::{from_value, to_value};
pub use value::{BinArray, BinItems, Block, BlockFrames, Header, Integer, Value};

// The README's and the guide's Rust examples, compiled and run as doctests
// (a page whose examples need features is compiled when they are on).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/README.md")]
mod guide_index {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/cli.md")]
mod guide_cli {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/tap.md")]
mod guide_tap {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/worker.md")]
mod guide_worker {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/swarm.md")]
mod guide_swarm {}
#[cfg(all(doctest, feature = "dask", feature = "pickle"))]
#[doc = include_str!("../docs/guide/client.md")]
mod guide_client {}
#[cfg(all(doctest, feature = "dask", feature = "tls", feature = "pickle"))]
#[doc = include_str!("../docs/guide/library.md")]
mod guide_library {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/tls-and-timeouts.md")]
mod guide_tls_and_timeouts {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/features.md")]
mod guide_features {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/testing.md")]
mod guide_testing {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/layout.md")]
mod guide_layout {}
