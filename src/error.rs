//! Typed errors: one enum per direction, carrying the offsets and numbers a
//! person needs to act on them.

use std::fmt;
use std::io;

/// Where in a message a msgpack decode error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Index of the frame being decoded (0 = the message frame).
    pub frame: usize,
    /// Byte offset inside that frame.
    pub offset: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {} byte {}", self.frame, self.offset)
    }
}

/// Everything that can be wrong with bytes framewire decodes.
///
/// Every decode path returns one of these instead of panicking. After an
/// error on a stream, the stream is out of sync: the transport poisons the
/// connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    // ---- layer 1: the envelope -------------------------------------------
    /// The input ended before the message did.
    Truncated {
        /// Byte offset (from the start of the message) at which more was needed.
        offset: u64,
        /// Bytes the message needs from its start.
        needed: u64,
        /// Bytes that were available.
        got: u64,
    },
    /// The prelude declares zero frames (Dask never sends this).
    EmptyMessage,
    /// The prelude declares more frames than [`Limits::max_frames`](crate::Limits).
    FrameCountExceeded {
        /// The declared count.
        declared: u64,
        /// The limit.
        limit: usize,
    },
    /// A frame is longer than [`Limits::max_frame_len`](crate::Limits).
    FrameTooLarge {
        /// Index of the frame.
        index: usize,
        /// Its declared length.
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// The frame lengths add up to more than [`Limits::max_message_len`](crate::Limits).
    MessageTooLarge {
        /// The declared total (saturated at `u64::MAX`).
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// The declared lengths overflow `u64` or `usize`.
    LengthOverflow,
    /// The first-read length `N` is smaller than the prelude or does not fall
    /// on a frame boundary.
    InconsistentPrelude {
        /// The `N` field.
        first_read: u64,
        /// The prelude's own size (`8 + 8 * count`).
        prelude_len: u64,
    },

    // ---- msgpack (frame 0 and sub-headers) ---------------------------------
    /// A msgpack frame is longer than [`Limits::max_header_len`](crate::Limits).
    HeaderTooLarge {
        /// Index of the frame.
        frame: usize,
        /// Its length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A msgpack frame ends in the middle of a value.
    MsgpackTruncated(Position),
    /// A byte that msgpack reserves (`0xc1`) where a value should start.
    InvalidMarker {
        /// Where.
        at: Position,
        /// The byte.
        byte: u8,
    },
    /// An ext type: Dask never sends them, and framewire does not guess.
    UnsupportedExt(Position),
    /// A str, bin, array or map declares more than the bytes that remain
    /// (each item takes at least one byte).
    LengthExceedsRemaining {
        /// Where the length was declared.
        at: Position,
        /// The declared length or item count.
        declared: u64,
        /// Bytes remaining in the frame.
        remaining: u64,
    },
    /// msgpack nesting deeper than [`Limits::max_depth`](crate::Limits).
    DepthExceeded {
        /// Where the container that went too deep starts.
        at: Position,
        /// The limit.
        limit: usize,
    },
    /// More msgpack items than [`Limits::max_msgpack_items`](crate::Limits).
    ItemBudgetExceeded {
        /// Where the budget ran out.
        at: Position,
        /// The limit.
        limit: usize,
    },
    /// A msgpack str that is not UTF-8.
    InvalidUtf8(Position),
    /// Bytes left over after a frame's single msgpack value.
    TrailingBytes(Position),

    // ---- layer 2: the message ----------------------------------------------
    /// A `__Serialized__` / `__Pickled__` offset that is not a positive integer
    /// (0, negative, `true`, a float, nil...). Dask silently ignores offsets
    /// ≤ 0 and reads `true` as 1; framewire refuses them.
    InvalidOffset {
        /// Where the placeholder map starts in frame 0.
        at: Position,
    },
    /// A block offset at or past the end of the frame list.
    OffsetOutOfRange {
        /// The offset.
        offset: u64,
        /// Frames in the message.
        frames: usize,
    },
    /// A block's sub-frames run past the end of the frame list.
    SubFrameRangeOutOfBounds {
        /// The block's offset (its sub-header frame).
        offset: usize,
        /// Its `num-sub-frames`.
        num_sub_frames: u64,
        /// Frames in the message.
        frames: usize,
    },
    /// Two placeholders claim the same frame (aliasing amplification).
    FrameAliased {
        /// The frame claimed twice.
        frame: usize,
    },
    /// A map with a reserved key (`__Serialized__`, `__Pickled__`) that is not
    /// exactly a one-entry placeholder.
    AmbiguousReference {
        /// Where the map starts in frame 0.
        at: Position,
    },
    /// A sub-header that is not a msgpack map.
    SubHeaderNotMap {
        /// Its frame.
        frame: usize,
    },
    /// A sub-header without a valid non-negative integer `num-sub-frames`.
    InvalidSubFrameCount {
        /// The sub-header's frame.
        frame: usize,
    },

    // ---- layer 3: serialize ------------------------------------------------
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
    /// A frame's CRC32 differs from the one in the checksum trailer (SPEC.md
    /// §6.3): the bytes changed on the way.
    ChecksumMismatch {
        /// Index of the frame.
        frame: usize,
        /// The CRC32 the sender computed.
        expected: u32,
        /// The CRC32 of the bytes received.
        actual: u32,
    },
    /// The CRC32 of the length table differs from the trailer's: a length
    /// changed on the way (the frames may be cut in the wrong places).
    PreludeChecksumMismatch {
        /// The CRC32 the sender computed.
        expected: u32,
        /// The CRC32 of the lengths received.
        actual: u32,
    },
    /// Checksums were agreed, but the last frame is not a trailer of
    /// `4 × count` bytes.
    ChecksumTrailerInvalid {
        /// The last frame's length.
        len: u64,
        /// `4 × count`.
        expected: u64,
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

    // ---- layer 3: compression (SPEC.md §5.12) --------------------------------
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
        codec: crate::serialize::Codec,
        /// The cargo feature that brings it.
        feature: &'static str,
    },
    /// A compressed frame declares (lz4 size prefix, snappy varint, zstd
    /// content size) more bytes than it may decompress to:
    /// [`Limits::max_frame_len`](crate::Limits) (at most 2 GiB: Dask compresses
    /// no larger frame), or more than its input can
    /// possibly expand to. Refused before anything is allocated.
    DeclaredSizeTooLarge {
        /// The codec.
        codec: crate::serialize::Codec,
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
        codec: crate::serialize::Codec,
        /// The limit reached.
        limit: u64,
    },
    /// A compressed frame decodes to another size than it declares. Nothing
    /// is written past the declared size, and the partial output is dropped.
    SizeMismatch {
        /// The codec.
        codec: crate::serialize::Codec,
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
        codec: crate::serialize::Codec,
        /// The largest window allowed, in bytes.
        limit: u64,
    },
    /// A frame is not valid data in the codec its header names (bad block,
    /// bad checksum, truncated, trailing bytes, raw bytes flagged compressed).
    Corrupt {
        /// The codec.
        codec: crate::serialize::Codec,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeError::*;
        match self {
            Truncated { offset, needed, got } => write!(
                f,
                "truncated at byte {offset}: the message needs {needed} bytes, {got} available"
            ),
            EmptyMessage => f.write_str("the prelude declares zero frames"),
            FrameCountExceeded { declared, limit } => {
                write!(f, "{declared} frames declared, limit {limit}")
            }
            FrameTooLarge {
                index,
                declared,
                limit,
            } => write!(f, "frame {index} declares {declared} bytes, limit {limit}"),
            MessageTooLarge { declared, limit } => {
                write!(f, "frames add up to {declared} bytes, limit {limit}")
            }
            LengthOverflow => f.write_str("frame lengths overflow"),
            InconsistentPrelude {
                first_read,
                prelude_len,
            } => write!(
                f,
                "first-read length {first_read} is below the {prelude_len}-byte prelude or not on a frame boundary"
            ),
            HeaderTooLarge { frame, len, limit } => {
                write!(f, "msgpack frame {frame} is {len} bytes, limit {limit}")
            }
            MsgpackTruncated(at) => write!(f, "msgpack truncated at {at}"),
            InvalidMarker { at, byte } => write!(f, "invalid msgpack marker 0x{byte:02x} at {at}"),
            UnsupportedExt(at) => write!(f, "msgpack ext type at {at} (Dask never sends them)"),
            LengthExceedsRemaining {
                at,
                declared,
                remaining,
            } => write!(
                f,
                "msgpack length {declared} at {at} exceeds the {remaining} bytes remaining"
            ),
            DepthExceeded { at, limit } => {
                write!(f, "msgpack nesting deeper than {limit} at {at}")
            }
            ItemBudgetExceeded { at, limit } => {
                write!(f, "more than {limit} msgpack items, at {at}")
            }
            InvalidUtf8(at) => write!(f, "msgpack str at {at} is not UTF-8"),
            TrailingBytes(at) => write!(f, "trailing bytes after the msgpack value, at {at}"),
            InvalidOffset { at } => write!(
                f,
                "placeholder at {at}: the offset is not a positive integer"
            ),
            OffsetOutOfRange { offset, frames } => write!(
                f,
                "block offset {offset} is out of range ({frames} frames)"
            ),
            SubFrameRangeOutOfBounds {
                offset,
                num_sub_frames,
                frames,
            } => write!(
                f,
                "block at frame {offset} with {num_sub_frames} sub-frames runs past the {frames} frames"
            ),
            FrameAliased { frame } => write!(f, "frame {frame} is claimed by two placeholders"),
            AmbiguousReference { at } => write!(
                f,
                "map at {at} uses a reserved key but is not a one-entry placeholder"
            ),
            SubHeaderNotMap { frame } => write!(f, "sub-header in frame {frame} is not a map"),
            InvalidSubFrameCount { frame } => write!(
                f,
                "sub-header in frame {frame} has no valid num-sub-frames"
            ),
            InvalidHeader { field } => write!(f, "header field {field:?} is missing or invalid"),
            LengthMismatch {
                field,
                expected,
                got,
            } => write!(f, "header field {field:?} has {got} entries, expected {expected}"),
            FrameLengthsMismatch { declared, frames } => write!(
                f,
                "frame-lengths add up to {declared}, but the collection has {frames} frames"
            ),
            SplitTableInvalid { reason } => write!(f, "invalid split table: {reason}"),
            CollectionTooDeep { limit } => {
                write!(f, "collections nested deeper than {limit}")
            }
            ChecksumMismatch {
                frame,
                expected,
                actual,
            } => write!(
                f,
                "frame {frame} fails its checksum: CRC32 {actual:#010x}, the sender's {expected:#010x}"
            ),
            PreludeChecksumMismatch { expected, actual } => write!(
                f,
                "the length table fails its checksum: CRC32 {actual:#010x}, the sender's {expected:#010x}"
            ),
            ChecksumTrailerInvalid { len, expected } => write!(
                f,
                "checksums were agreed but the last frame is {len} bytes, not a {expected}-byte trailer"
            ),
            InvalidArray { reason } => write!(f, "invalid numpy.ndarray header: {reason}"),
            RemoteSerializationError { text } => {
                write!(f, "the sender could not serialize a value: {text}")
            }
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

impl std::error::Error for DecodeError {}

impl From<DecodeError> for io::Error {
    fn from(e: DecodeError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
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
    /// A `Serialize` or `NdArray` value given to the message layer alone
    /// (`message::dumps`); `framewire::dumps` serializes them.
    NotSerialized,
    /// `IterateCollection::Never` was asked to put a value that needs frames
    /// of its own (`Serialized`, `Pickled`, `Serialize`, an array, or bytes
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
    /// A message to send exceeds one of the sender's own [`Limits`](crate::Limits)
    /// (the transport refuses to send what it would refuse to receive).
    ExceedsLimit {
        /// The `Limits` field: `"max_frames"`, `"max_frame_len"` or `"max_message_len"`.
        limit: &'static str,
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
            EncodeError::NoFrames => f.write_str("a message needs at least one frame"),
            EncodeError::FirstReadOutOfRange { k, frames } => {
                write!(f, "first read of {k} frames asked for a message of {frames}")
            }
            EncodeError::TooLong { len } => {
                write!(f, "{len} bytes or items exceed msgpack's 2^32 - 1")
            }
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
