//! Layer 1, the envelope: Dask's TCP framing of one message (SPEC.md §2).
//!
//! ```text
//! offset  size        field
//! 0       8           N      u64le  bytes of the first read, counted from offset 8:
//!                                   the prelude below plus the first k frames (0 ≤ k ≤ count)
//! 8       8           count  u64le  number of frames (≥ 1)
//! 16      8 × count   len[i] u64le  length of frame i
//! 16+8c   Σ len[i]    frames        back to back, no padding
//! ```
//!
//! Decoding slices frames out of one [`Bytes`] (no copy). Encoding produces
//! a small prelude and hands back the frames' own `Bytes`, ready for a
//! vectored write (no copy).

use std::io::IoSlice;

use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

use crate::error::EncodeError;
#[cfg(feature = "transport")]
use crate::error::LimitName;
use crate::limits::Limits;

/// The fixed start of every message: `N` and `count`.
#[derive(FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Head {
    first_read: U64,
    count: U64,
}

/// Size of the `N` field, which does not count itself.
const N_LEN: u64 = 8;

/// What can be wrong with a message's framing (SPEC.md §2). Every declared
/// number is checked before anything is allocated for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvelopeError {
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
}

impl std::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use EnvelopeError::*;
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
        }
    }
}

impl std::error::Error for EnvelopeError {}

impl From<EnvelopeError> for std::io::Error {
    fn from(e: EnvelopeError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// A parsed and checked prelude: `N` and the frame lengths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prelude {
    first_read: u64,
    lengths: Vec<u64>,
    total: u64,
}

impl Prelude {
    /// The `N` field: bytes of the first read after the `N` field itself.
    pub fn first_read(&self) -> u64 {
        self.first_read
    }

    /// The declared frame lengths.
    pub fn lengths(&self) -> &[u64] {
        &self.lengths
    }

    /// The declared frame lengths, by value.
    pub fn into_lengths(self) -> Vec<u64> {
        self.lengths
    }

    /// Bytes of the prelude itself: `count` plus the length table (`8 + 8 × count`),
    /// plus the 8-byte `N` field.
    pub fn header_len(&self) -> u64 {
        N_LEN + prelude_len(self.lengths.len() as u64)
    }

    /// Bytes of the whole message on the wire, `N` field included.
    pub fn wire_len(&self) -> u64 {
        self.header_len() + self.total
    }

    /// How many frames fall inside the first read.
    pub fn frames_in_first_read(&self) -> usize {
        let mut at = prelude_len(self.lengths.len() as u64);
        self.lengths
            .iter()
            .take_while(|&&len| {
                let inside = at < self.first_read;
                at += len;
                inside
            })
            .count()
    }
}

/// `8 + 8 × count`: the prelude as `N` counts it (without the `N` field).
fn prelude_len(count: u64) -> u64 {
    8 + 8 * count
}

/// The result of looking at the start of a buffer for a prelude.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreludeStatus {
    /// At least this many bytes (from the start of the message) are needed
    /// before the prelude can be checked.
    Need(usize),
    /// The prelude is complete and within the limits.
    Complete(Prelude),
}

/// Parses and checks the prelude at the start of `buf`.
///
/// Every declared number is checked against `limits` as soon as it is
/// readable, and before anything is allocated for it: the frame count before
/// the length table is read, each length and the checked sum before any frame.
///
/// ```
/// use framewire::{envelope, Limits};
/// let wire = [0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0x10];
/// let err = envelope::parse_prelude(&wire, &Limits::strict()).unwrap_err();
/// assert!(matches!(err, framewire::EnvelopeError::FrameCountExceeded { .. }));
/// ```
pub fn parse_prelude(buf: &[u8], limits: &Limits) -> Result<PreludeStatus, EnvelopeError> {
    let Ok((head, rest)) = Head::ref_from_prefix(buf) else {
        return Ok(PreludeStatus::Need(16));
    };
    let first_read = head.first_read.get();
    let count = head.count.get();
    let n = check_count(count, limits)?;
    let Ok((table, _)) = <[U64]>::ref_from_prefix_with_elems(rest, n) else {
        // n ≤ max_frames, and the table is only read once all of it is here.
        let need = n
            .checked_mul(8)
            .and_then(|t| t.checked_add(16))
            .ok_or(EnvelopeError::LengthOverflow)?;
        return Ok(PreludeStatus::Need(need));
    };
    let lengths: Vec<u64> = table.iter().map(|len| len.get()).collect();
    prelude_of_table(first_read, count, lengths, limits).map(PreludeStatus::Complete)
}

/// The fixed head of a prelude (`N` and the frame count) at the start of
/// `buf`, the count checked against `limits` as [`parse_prelude`] checks
/// it: `N`, the count, and the bytes of the whole prelude. (The
/// transport's reader decodes a long table as it arrives.)
#[cfg(feature = "transport")]
pub(crate) fn prelude_head(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(u64, u64, usize)>, EnvelopeError> {
    let Ok((head, _)) = Head::ref_from_prefix(buf) else {
        return Ok(None);
    };
    let n = check_count(head.count.get(), limits)?;
    let need = n
        .checked_mul(8)
        .and_then(|t| t.checked_add(16))
        .ok_or(EnvelopeError::LengthOverflow)?;
    Ok(Some((head.first_read.get(), head.count.get(), need)))
}

/// A prelude whose length table was read (as [`parse_prelude`] reads it, or
/// decoded piece by piece as it arrived), checked as `parse_prelude` checks
/// it.
pub(crate) fn prelude_of_table(
    first_read: u64,
    count: u64,
    lengths: Vec<u64>,
    limits: &Limits,
) -> Result<Prelude, EnvelopeError> {
    let total = check_lengths(lengths.iter().copied(), limits)?;
    // The whole message must be addressable: N field + prelude + frames.
    let prelude = prelude_len(count);
    prelude
        .checked_add(N_LEN)
        .and_then(|h| h.checked_add(total))
        .and_then(|w| usize::try_from(w).ok())
        .ok_or(EnvelopeError::LengthOverflow)?;
    // N must fall on a frame boundary at or after the prelude.
    let inconsistent = EnvelopeError::InconsistentPrelude {
        first_read,
        prelude_len: prelude,
    };
    let mut boundary = prelude;
    let mut lens = lengths.iter();
    while boundary < first_read {
        boundary += lens.next().ok_or(inconsistent.clone())?;
    }
    if boundary != first_read {
        return Err(inconsistent);
    }
    Ok(Prelude {
        first_read,
        lengths,
        total,
    })
}

/// A frame count checked against the limits: not zero, at most
/// [`Limits::max_frames`]. Checked on a prelude before its length table is
/// read, and on a message before it is sent.
fn check_count(count: u64, limits: &Limits) -> Result<usize, EnvelopeError> {
    if count == 0 {
        return Err(EnvelopeError::EmptyMessage);
    }
    match usize::try_from(count) {
        Ok(n) if n <= limits.max_frames => Ok(n),
        _ => Err(EnvelopeError::FrameCountExceeded {
            declared: count,
            limit: limits.max_frames,
        }),
    }
}

/// Frame lengths checked against the limits, in order: each against
/// [`Limits::max_frame_len`] with a checked running sum, then the sum
/// against [`Limits::max_message_len`]. Returns the sum.
fn check_lengths(
    lengths: impl Iterator<Item = u64>,
    limits: &Limits,
) -> Result<u64, EnvelopeError> {
    let mut total: u64 = 0;
    for (index, len) in lengths.enumerate() {
        if len > limits.max_frame_len {
            return Err(EnvelopeError::FrameTooLarge {
                index,
                declared: len,
                limit: limits.max_frame_len,
            });
        }
        total = total
            .checked_add(len)
            .ok_or(EnvelopeError::LengthOverflow)?;
    }
    if total > limits.max_message_len {
        return Err(EnvelopeError::MessageTooLarge {
            declared: total,
            limit: limits.max_message_len,
        });
    }
    Ok(total)
}

#[cfg(feature = "transport")]
fn exceeds(limit: LimitName, declared: u64, max: u64) -> EncodeError {
    EncodeError::ExceedsLimit {
        limit,
        declared,
        max,
    }
}

/// One message: its frames, and the `N` its prelude carries.
///
/// ```
/// use bytes::Bytes;
/// use framewire::{Envelope, Limits};
///
/// let env = Envelope::new(vec![Bytes::from_static(b"\xa2hi"), Bytes::from_static(b"payload")])?;
/// let wire = env.to_bytes();
/// let (back, used) = Envelope::decode(&wire, &Limits::strict())?;
/// assert_eq!(used, wire.len());
/// assert_eq!(back.frames(), env.frames());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Envelope {
    first_read: u64,
    frames: Vec<Bytes>,
    /// The receive buffers the frames are slices of (none for a message
    /// built locally): what lets shards merge without a copy.
    buffers: SmallVec<[Bytes; 2]>,
}

/// Two messages are equal when their `N` and frames are: where the bytes
/// live does not matter.
impl PartialEq for Envelope {
    fn eq(&self, other: &Envelope) -> bool {
        self.first_read == other.first_read && self.frames == other.frames
    }
}

impl Eq for Envelope {}

impl Envelope {
    /// A message of these frames, with `N` covering the whole message (the
    /// simplest choice a Python reader accepts). Zero frames are refused:
    /// Python's reader cannot handle them.
    pub fn new(frames: Vec<Bytes>) -> Result<Envelope, EncodeError> {
        let k = frames.len();
        Envelope::with_first_read_frames(frames, k)
    }

    /// A message whose `N` covers the prelude and the first `k` frames, as a
    /// Python sender chooses to keep large buffers out of the first read.
    pub fn with_first_read_frames(frames: Vec<Bytes>, k: usize) -> Result<Envelope, EncodeError> {
        if frames.is_empty() {
            return Err(EncodeError::NoFrames);
        }
        let first = frames.get(..k).ok_or(EncodeError::FirstReadOutOfRange {
            k,
            frames: frames.len(),
        })?;
        let first_read =
            first.iter().map(|f| f.len() as u64).sum::<u64>() + prelude_len(frames.len() as u64);
        Ok(Envelope {
            first_read,
            frames,
            buffers: SmallVec::new(),
        })
    }

    /// Decodes the message at the start of `buf`: the frames are slices of
    /// `buf` (no copy). Returns the message and the bytes it used; bytes after
    /// it (the next message on a stream) are left alone.
    pub fn decode(buf: &Bytes, limits: &Limits) -> Result<(Envelope, usize), EnvelopeError> {
        let prelude = match parse_prelude(buf, limits)? {
            PreludeStatus::Complete(p) => p,
            PreludeStatus::Need(n) => {
                return Err(EnvelopeError::Truncated {
                    offset: buf.len() as u64,
                    needed: n as u64,
                    got: buf.len() as u64,
                })
            }
        };
        let wire_len = prelude.wire_len();
        if (buf.len() as u64) < wire_len {
            return Err(EnvelopeError::Truncated {
                offset: buf.len() as u64,
                needed: wire_len,
                got: buf.len() as u64,
            });
        }
        Ok((Envelope::from_prelude(&prelude, buf), wire_len as usize))
    }

    /// The frames of a message whose prelude was parsed from the start of
    /// `buf`, which must hold the whole message.
    pub(crate) fn from_prelude(prelude: &Prelude, buf: &Bytes) -> Envelope {
        let mut at = prelude.header_len() as usize;
        let frames = prelude
            .lengths
            .iter()
            .map(|&len| {
                let len = len as usize; // the whole message fits in usize: checked
                let frame = buf.slice(at..at + len);
                at += len;
                frame
            })
            .collect();
        Envelope {
            first_read: prelude.first_read,
            frames,
            buffers: SmallVec::from_iter([buf.clone()]),
        }
    }

    /// Refuses a message that these limits would refuse to receive: the
    /// checks [`parse_prelude`] makes on a received prelude, made on this
    /// message before it is sent.
    #[cfg(feature = "transport")]
    pub(crate) fn check_limits(&self, limits: &Limits) -> Result<(), EncodeError> {
        let lengths = self.frames.iter().map(|f| f.len() as u64);
        check_count(self.frames.len() as u64, limits)
            .and_then(|_| check_lengths(lengths, limits))
            .map(drop)
            .map_err(|e| match e {
                EnvelopeError::FrameCountExceeded { declared, limit } => {
                    exceeds(LimitName::MaxFrames, declared, limit as u64)
                }
                EnvelopeError::FrameTooLarge {
                    declared, limit, ..
                } => exceeds(LimitName::MaxFrameLen, declared, limit),
                EnvelopeError::MessageTooLarge { declared, limit } => {
                    exceeds(LimitName::MaxMessageLen, declared, limit)
                }
                // Lengths of frames held in memory add up in a u64.
                EnvelopeError::LengthOverflow => {
                    exceeds(LimitName::MaxMessageLen, u64::MAX, limits.max_message_len)
                }
                // An `Envelope` always has a frame.
                _ => EncodeError::NoFrames,
            })
    }

    /// Writes the prelude: `N`, `count` and the length table. With
    /// `trailer`, the prelude of this message with one more final frame of
    /// that many bytes (a checksum trailer, SPEC.md §6.2): the length table
    /// grows by one entry, and the first read covers the new frame if it
    /// covered every frame. The one place a prelude is written.
    pub(crate) fn put_prelude(&self, out: &mut impl BufMut, trailer: Option<u64>) {
        let all = self.wire_len() - N_LEN;
        let first_read = match trailer {
            None => self.first_read,
            Some(len) if self.first_read >= all => all + 8 + len,
            Some(_) => self.first_read + 8,
        };
        let count = self.frames.len() + usize::from(trailer.is_some());
        out.put_u64_le(first_read);
        out.put_u64_le(count as u64);
        for f in &self.frames {
            out.put_u64_le(f.len() as u64);
        }
        if let Some(len) = trailer {
            out.put_u64_le(len);
        }
    }

    /// The frames.
    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    /// The buffers this message was received into, which its frames are
    /// slices of (empty for a message built locally). Handed to
    /// [`DeserializeOptions::backing`](crate::serialize::DeserializeOptions::backing),
    /// they let shards that arrived back to back merge without a copy.
    pub fn buffers(&self) -> &[Bytes] {
        &self.buffers
    }

    /// Records the buffers the frames were read into.
    #[cfg(feature = "transport")]
    pub(crate) fn with_buffers(mut self, buffers: SmallVec<[Bytes; 2]>) -> Envelope {
        self.buffers = buffers;
        self
    }

    /// The frames, by value.
    pub fn into_frames(self) -> Vec<Bytes> {
        self.frames
    }

    /// The `N` field.
    pub fn first_read(&self) -> u64 {
        self.first_read
    }

    /// The prelude bytes: `N`, `count` and the length table.
    pub fn prelude(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(16 + 8 * self.frames.len());
        self.put_prelude(&mut out, None);
        out.freeze()
    }

    /// Bytes of the whole message on the wire.
    pub fn wire_len(&self) -> u64 {
        N_LEN
            + prelude_len(self.frames.len() as u64)
            + self.frames.iter().map(|f| f.len() as u64).sum::<u64>()
    }

    /// The message as a list of byte slices for a vectored write: the
    /// prelude, then each non-empty frame's own bytes (no copy).
    pub fn io_slices<'a>(&'a self, prelude: &'a Bytes) -> Vec<IoSlice<'a>> {
        std::iter::once(&prelude[..])
            .chain(self.frames.iter().map(|f| &f[..]))
            .filter(|s| !s.is_empty())
            .map(IoSlice::new)
            .collect()
    }

    /// The whole message in one buffer. This copies every frame: for files
    /// and tests; sockets should use [`Envelope::io_slices`].
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.wire_len() as usize);
        self.put_prelude(&mut out, None);
        for f in &self.frames {
            out.put_slice(f);
        }
        out.freeze()
    }
}
