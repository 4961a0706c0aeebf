//! [`DeserializeError`]: what can stop a block from being rebuilt into a
//! value (SPEC.md §5.8–5.10), and [`CompressionError`] for its compressed
//! frames (§5.12).

use std::fmt;

use super::codec::Codec;
use crate::msgpack::MsgpackError;

/// A block whose header or frames do not describe a value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeserializeError {
    /// A header or a `msgpack` family frame is not acceptable msgpack.
    Msgpack(MsgpackError),
    /// A header field is missing or has the wrong type (for `type-serialized`
    /// of a collection: not `list`, `tuple`, `set` or `dict`).
    InvalidHeader {
        /// The field.
        field: &'static str,
    },
    /// Two tables that must have one entry each per item differ in length
    /// (`sub-headers` vs `frame-lengths`, `compression` vs the frames...).
    LengthMismatch {
        /// The field whose length is wrong.
        field: &'static str,
        /// The length it should have.
        expected: usize,
        /// The length it has.
        got: usize,
    },
    /// `frame-lengths` of a collection do not add up to its frames.
    FrameLengthsMismatch {
        /// Their sum (saturated).
        declared: u64,
        /// Frames the collection has.
        frames: usize,
    },
    /// `split-num-sub-frames` / `split-offsets` do not tile the frames exactly.
    SplitTableInvalid {
        /// What is wrong.
        reason: &'static str,
    },
    /// `is-collection` headers nested deeper than [`Limits::max_depth`](crate::Limits).
    CollectionTooDeep {
        /// The limit.
        limit: usize,
    },
    /// A frame merged from its shards (or decompressed from them) would be
    /// longer than [`Limits::max_frame_len`](crate::Limits); refused before
    /// anything is copied.
    FrameTooLarge {
        /// Index of the merged frame in the block.
        index: usize,
        /// Its length.
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// A Dask `numpy.ndarray` header that does not describe its data frame.
    InvalidArray {
        /// What is wrong.
        reason: &'static str,
    },
    /// The sender could not serialize a value and sent Dask's `error` family
    /// instead: its text, joined by newlines as Dask does.
    RemoteSerializationError {
        /// The text frames.
        text: String,
    },
    /// A compressed frame that does not decompress.
    Compression(CompressionError),
}

impl fmt::Display for DeserializeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DeserializeError::*;
        match self {
            Msgpack(e) => e.fmt(f),
            InvalidHeader { field } => write!(f, "header field {field:?} is missing or invalid"),
            LengthMismatch {
                field,
                expected,
                got,
            } => write!(
                f,
                "header field {field:?} has {got} entries, expected {expected}"
            ),
            FrameLengthsMismatch { declared, frames } => write!(
                f,
                "frame-lengths add up to {declared}, but the collection has {frames} frames"
            ),
            SplitTableInvalid { reason } => write!(f, "invalid split table: {reason}"),
            CollectionTooDeep { limit } => write!(f, "collections nested deeper than {limit}"),
            FrameTooLarge {
                index,
                declared,
                limit,
            } => write!(f, "frame {index} declares {declared} bytes, limit {limit}"),
            InvalidArray { reason } => write!(f, "invalid numpy.ndarray header: {reason}"),
            RemoteSerializationError { text } => {
                write!(f, "the sender could not serialize a value: {text}")
            }
            Compression(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DeserializeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeserializeError::Msgpack(e) => Some(e),
            DeserializeError::Compression(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MsgpackError> for DeserializeError {
    fn from(e: MsgpackError) -> DeserializeError {
        DeserializeError::Msgpack(e)
    }
}

impl From<CompressionError> for DeserializeError {
    fn from(e: CompressionError) -> DeserializeError {
        DeserializeError::Compression(e)
    }
}

/// A compressed frame framewire does not decompress.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompressionError {
    /// A `compression` entry that is not nil, `false` or a codec framewire
    /// knows (`"lz4"`, `"zstd"`, `"snappy"`, `"zlib"`): another string (`""`,
    /// `"auto"`, `"brotli"`), or another type (shown as `<int 7>`...).
    UnknownCodec {
        /// The entry: the string itself (cut at 64 bytes), or its type and value.
        name: String,
    },
    /// A frame is compressed with a codec this build leaves out: its cargo
    /// feature (named after the codec) is off.
    CodecNotEnabled {
        /// The codec.
        codec: Codec,
        /// The cargo feature that brings it.
        feature: &'static str,
    },
    /// A compressed frame declares (lz4 size prefix, snappy varint, zstd
    /// content size) more bytes than it may decompress to:
    /// [`Limits::max_frame_len`](crate::Limits) (at most 2 GiB: Dask
    /// compresses no larger frame), or more than its input can possibly
    /// expand to. Refused before anything is allocated.
    DeclaredSizeTooLarge {
        /// The codec.
        codec: Codec,
        /// The declared size.
        declared: u64,
        /// The smaller of the frame limit and the codec's bound for the input.
        limit: u64,
    },
    /// Decompressing would go past a limit: a message's frames together past
    /// [`Limits::max_decompressed_len`](crate::Limits) (the per-message
    /// budget), or a frame without a declared size (zlib, zstd without a
    /// content size) past its bound ([`Limits::max_frame_len`](crate::Limits),
    /// at most Dask's 2 GiB). Output stops at the limit.
    DecompressedTooLarge {
        /// The codec.
        codec: Codec,
        /// The limit reached.
        limit: u64,
    },
    /// A compressed frame decodes to another size than it declares. Nothing
    /// is written past the declared size, and the partial output is dropped.
    SizeMismatch {
        /// The codec.
        codec: Codec,
        /// The declared size.
        declared: u64,
        /// The size it decoded to when shorter; `None` when it is longer
        /// (decoding stopped at the declared size).
        actual: Option<u64>,
    },
    /// A zstd frame without a content size asks for a window above the
    /// limit (its output cap, `max_frame_len` or the budget left, rounded
    /// down to a power of two; at most zstd's default 128 MiB), refused
    /// before zstd allocates it.
    WindowTooLarge {
        /// The codec.
        codec: Codec,
        /// The largest window allowed, in bytes.
        limit: u64,
    },
    /// A frame is not valid data in the codec its header names (bad block,
    /// bad checksum, truncated, trailing bytes, raw bytes flagged compressed).
    Corrupt {
        /// The codec.
        codec: Codec,
    },
}

impl fmt::Display for CompressionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CompressionError::*;
        match self {
            UnknownCodec { name } => write!(f, "unknown compression codec {name:?}"),
            CodecNotEnabled { codec, feature } => write!(
                f,
                "{codec} frame, but this build of framewire leaves out {codec} (cargo feature {feature:?})"
            ),
            DeclaredSizeTooLarge {
                codec,
                declared,
                limit,
            } => write!(
                f,
                "{codec} frame declares {declared} decompressed bytes, limit {limit}"
            ),
            DecompressedTooLarge { codec, limit } => {
                write!(f, "{codec} frame decompresses past the limit of {limit} bytes")
            }
            SizeMismatch {
                codec,
                declared,
                actual: Some(actual),
            } => write!(
                f,
                "{codec} frame declares {declared} bytes but decompresses to {actual}"
            ),
            SizeMismatch {
                codec,
                declared,
                actual: None,
            } => write!(
                f,
                "{codec} frame declares {declared} bytes but decompresses to more"
            ),
            WindowTooLarge { codec, limit } => {
                write!(f, "{codec} frame needs a window above the limit of {limit} bytes")
            }
            Corrupt { codec } => write!(f, "corrupt {codec} frame"),
        }
    }
}

impl std::error::Error for CompressionError {}
