//! [`MsgpackError`]: what can be wrong with a msgpack frame (frame 0, a
//! sub-header, a `msgpack` family blob), and [`Position`], where.

use std::fmt;

/// Where in a message a msgpack error happened.
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

/// A msgpack frame framewire refuses (SPEC.md §3.4). Every check runs before
/// anything is allocated for what the bytes declare.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MsgpackError {
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
    Truncated(Position),
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
}

impl MsgpackError {
    /// Where in the message the error is, when it is at a byte of a frame.
    pub fn position(&self) -> Option<Position> {
        use MsgpackError::*;
        match self {
            Truncated(at) | UnsupportedExt(at) | InvalidUtf8(at) | TrailingBytes(at) => Some(*at),
            InvalidMarker { at, .. }
            | LengthExceedsRemaining { at, .. }
            | DepthExceeded { at, .. }
            | ItemBudgetExceeded { at, .. } => Some(*at),
            HeaderTooLarge { .. } => None,
        }
    }
}

impl fmt::Display for MsgpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use MsgpackError::*;
        match self {
            HeaderTooLarge { frame, len, limit } => {
                write!(f, "msgpack frame {frame} is {len} bytes, limit {limit}")
            }
            Truncated(at) => write!(f, "msgpack truncated at {at}"),
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
        }
    }
}

impl std::error::Error for MsgpackError {}
