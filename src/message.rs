//! Layer 2, the message: frame 0 is msgpack; out-of-band values are blocks
//! elsewhere in the frame list (SPEC.md §4).
//!
//! ```text
//! frame 0   msgpack  {"op": "compute-task", "run_spec": ["f", {"__Serialized__": 1}, {"__Pickled__": 3}]}
//! frame 1   msgpack  sub-header {..., "num-sub-frames": 1}  ┐ block at offset 1
//! frame 2   payload                                         ┘
//! frame 3   msgpack  sub-header {"pickled-obj": .., "num-sub-frames": 0}   block at offset 3
//! ```
//!
//! Offsets are absolute frame indices (≥ 1); blocks appear in the order a
//! depth-first walk of frame 0 meets their placeholders (map keys before
//! values). Frames no placeholder claims (orphans) are tolerated, as Dask
//! does; a frame claimed twice is refused.

use std::borrow::Cow;
use std::fmt;

use bytes::{Bytes, BytesMut};

use crate::error::EncodeError;
use crate::limits::Limits;
#[cfg(feature = "serde")]
use crate::msgpack::Static;
use crate::msgpack::{self, Leaves, MsgpackError, Position, Seen, Walk};
use crate::value::{Block, Header, Value};

/// The key in a sub-header that says how many payload frames follow it.
pub const NUM_SUB_FRAMES: &str = "num-sub-frames";

/// The key of a `{"__Serialized__": i}` placeholder.
pub const SERIALIZED_KEY: &str = "__Serialized__";
/// The key of a `{"__Pickled__": i}` placeholder.
pub const PICKLED_KEY: &str = "__Pickled__";

/// What can be wrong with a message's frame 0 and its blocks (SPEC.md §4):
/// the msgpack of frame 0 or of a sub-header, or the placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// Frame 0 or a sub-header is not acceptable msgpack.
    Msgpack(MsgpackError),
    /// No frames at all: a message has at least frame 0.
    NoFrames,
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
}

impl MessageError {
    /// Where in the message the error is, when it is at a byte of a frame.
    pub fn position(&self) -> Option<Position> {
        match self {
            MessageError::Msgpack(e) => e.position(),
            MessageError::InvalidOffset { at } | MessageError::AmbiguousReference { at } => {
                Some(*at)
            }
            _ => None,
        }
    }
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use MessageError::*;
        match self {
            Msgpack(e) => e.fmt(f),
            NoFrames => f.write_str("a message without frames"),
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
        }
    }
}

impl std::error::Error for MessageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MessageError::Msgpack(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MsgpackError> for MessageError {
    fn from(e: MsgpackError) -> MessageError {
        MessageError::Msgpack(e)
    }
}

/// Refuses a map key Dask would read as a placeholder: a plain map keyed
/// `__Serialized__` or `__Pickled__` (in frame 0 or in a sub-header, whose
/// decoder reads them too) would not come back as written.
pub(crate) fn check_key(key: &Value) -> Result<(), EncodeError> {
    match key.as_str() {
        Some(SERIALIZED_KEY) => Err(EncodeError::ReservedKey {
            key: SERIALIZED_KEY,
        }),
        Some(PICKLED_KEY) => Err(EncodeError::ReservedKey { key: PICKLED_KEY }),
        _ => Ok(()),
    }
}

/// [`check_key`] for a str key (a struct's field name, a variant's name).
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn check_key_str(key: &str) -> Result<(), EncodeError> {
    match key {
        SERIALIZED_KEY => Err(EncodeError::ReservedKey {
            key: SERIALIZED_KEY,
        }),
        PICKLED_KEY => Err(EncodeError::ReservedKey { key: PICKLED_KEY }),
        _ => Ok(()),
    }
}

/// [`check_key`] for a key already written as msgpack (in the forms
/// framewire writes, §3.2): refuses the str `__Serialized__` / `__Pickled__`.
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn check_key_bytes(key: &[u8]) -> Result<(), EncodeError> {
    const SERIALIZED: &[u8] = Static::new().str(SERIALIZED_KEY).bytes();
    const PICKLED: &[u8] = Static::new().str(PICKLED_KEY).bytes();
    match key {
        SERIALIZED => Err(EncodeError::ReservedKey {
            key: SERIALIZED_KEY,
        }),
        PICKLED => Err(EncodeError::ReservedKey { key: PICKLED_KEY }),
        _ => Ok(()),
    }
}

/// Whether the value at `buf[pos]` is a placeholder map (`{"__Serialized__":
/// i}` or `{"__Pickled__": i}`, whatever its `i`). Looks only.
#[cfg(feature = "serde")]
#[inline(always)]
pub(crate) fn is_placeholder_at(buf: &[u8], pos: usize) -> bool {
    msgpack::one_entry_map_keyed(buf, pos, SERIALIZED_KEY, PICKLED_KEY)
}

/// The placeholder at `buf[pos]` when its offset is an int of 1 or more
/// (any other is refused by [`Claims::resolve`]): its kind and offset,
/// read in place. Looks only.
#[cfg(feature = "serde")]
#[inline]
pub(crate) fn placeholder_at(buf: &[u8], pos: usize) -> Option<(BlockKind, u64)> {
    msgpack::one_entry_map_to_count(buf, pos, SERIALIZED_KEY, PICKLED_KEY).map(|(pickled, i)| {
        let kind = match pickled {
            true => BlockKind::Pickled,
            false => BlockKind::Serialized,
        };
        (kind, i)
    })
}

/// The key only a handshake has among the messages (SPEC.md §6).
const HANDSHAKE_KEY: &str = "pickle-protocol";

/// What frame 0 of a message says of its op, as [`peek_ops`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ops<'a> {
    /// A map whose first `"op"` key has a str value: one message.
    Op(&'a str),
    /// An array: a batched stream's list of messages, each item's op in
    /// order (`None` for an item that is not a map with a str `"op"`).
    Batch(Vec<Option<&'a str>>),
    /// A map without an `"op"` key that has `"pickle-protocol"`: the
    /// handshake each side sends first (SPEC.md §6).
    Handshake,
    /// Anything else: a map whose `"op"` is missing or not a str, or a
    /// value that is neither a map nor an array (a reply such as `"OK"`).
    Other,
}

/// The op of a message, or the ops of a batched list, read from its frame 0
/// alone without decoding it: only the keys of the top-level map (or of the
/// maps in a top-level array) are looked at, everything else is stepped
/// over in place. A placeholder is a map like any other here, so the
/// blocks after frame 0 need not have arrived.
///
/// It looks rather than checks: no [`Limits`] apply, and every form
/// msgpack can encode is stepped over (ext types, float 32, a str that is
/// not UTF-8), where [`decode`] would refuse some. `None` when frame 0 is not
/// one whole msgpack value (cut short, a byte msgpack never uses, or bytes
/// after the value).
///
/// ```
/// use framewire::message::{encode, peek_ops, Ops};
/// use framewire::Value;
///
/// let op = |name: &str| Value::map_of([("op", Value::str(name))]);
/// let frames = encode(&op("compute-task"))?;
/// assert_eq!(peek_ops(&frames[0]), Some(Ops::Op("compute-task")));
///
/// let batch = encode(&Value::Array(vec![op("task-finished"), Value::str("OK")]))?;
/// assert_eq!(peek_ops(&batch[0]), Some(Ops::Batch(vec![Some("task-finished"), None])));
/// assert_eq!(peek_ops(&frames[0][..3]), None); // cut short
/// # Ok::<(), framewire::EncodeError>(())
/// ```
pub fn peek_ops(frame0: &[u8]) -> Option<Ops<'_>> {
    let mut walk = Walk::new(frame0);
    let ops = match walk.next()? {
        Seen::Map(n) => {
            let keys = peek_keys(&mut walk, n)?;
            match keys.op {
                Some(op) => Ops::Op(op),
                None if !keys.has_op && keys.has_handshake_key => Ops::Handshake,
                None => Ops::Other,
            }
        }
        Seen::Array(n) => {
            let mut ops = Vec::new();
            for _ in 0..n {
                ops.push(match walk.next()? {
                    Seen::Map(n) => peek_keys(&mut walk, n)?.op,
                    other => {
                        walk.skip_rest(other)?;
                        None
                    }
                });
            }
            Ops::Batch(ops)
        }
        other => {
            walk.skip_rest(other)?;
            Ops::Other
        }
    };
    walk.at_end().then_some(ops)
}

/// What [`peek_ops`] learns of a map's keys.
#[derive(Default)]
struct PeekedKeys<'a> {
    /// The value of its first `"op"` key, if that is a str.
    op: Option<&'a str>,
    has_op: bool,
    has_handshake_key: bool,
}

/// The `n` entries of the map whose head `walk` has just read.
fn peek_keys<'a>(walk: &mut Walk<'a>, n: u64) -> Option<PeekedKeys<'a>> {
    let mut keys = PeekedKeys::default();
    for _ in 0..n {
        let key = match walk.next()? {
            Seen::Str(s) => Some(s),
            other => {
                walk.skip_rest(other)?;
                None
            }
        };
        let first_op = key == Some("op") && !keys.has_op;
        keys.has_op |= key == Some("op");
        keys.has_handshake_key |= key == Some(HANDSHAKE_KEY);
        match walk.next()? {
            Seen::Str(s) if first_op => keys.op = Some(s),
            value => walk.skip_rest(value)?,
        }
    }
    Some(keys)
}

/// Which placeholder a block was reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// `{"__Serialized__": i}`.
    Serialized,
    /// `{"__Pickled__": i}`.
    Pickled,
}

/// Where a block sat in the frame list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// The placeholder's kind.
    pub kind: BlockKind,
    /// Index of the sub-header frame.
    pub offset: usize,
    /// Payload frames after it.
    pub num_sub_frames: usize,
}

/// A message decoded in pass-through mode, with where its blocks were.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// Frame 0, with every placeholder replaced by its block.
    pub value: Value,
    /// The blocks, in the order their placeholders appear in frame 0.
    pub blocks: Vec<BlockRef>,
    /// Frames (≥ 1) that no placeholder claims, in increasing order.
    pub orphans: Vec<usize>,
}

/// Decodes a frame list in pass-through mode (Dask's `deserialize=False`):
/// every block stays a [`Value::Serialized`] / [`Value::Pickled`] with its
/// original sub-header bytes and payload frames, so writing the value again
/// re-emits them untouched.
///
/// ```
/// use bytes::Bytes;
/// use framewire::message::{encode, decode};
/// use framewire::{Limits, Value};
///
/// let frames = vec![Bytes::from_static(b"\x81\xa2op\xa4ping")];
/// let value = decode(&frames, &Limits::strict())?;
/// assert_eq!(value.get("op").and_then(Value::as_str), Some("ping"));
/// assert_eq!(encode(&value)?, frames);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode(frames: &[Bytes], limits: &Limits) -> Result<Value, MessageError> {
    decode_detailed(frames, limits).map(|l| l.value)
}

/// [`decode`], also returning where each block was and which frames are orphans.
pub fn decode_detailed(frames: &[Bytes], limits: &Limits) -> Result<Decoded, MessageError> {
    let mut claims = Claims::recording(frames, limits)?;
    let value = msgpack::decode(&frames[0], 0, limits, &mut |entries, at| {
        claims.resolve(entries, at)
    })?;
    Ok(Decoded {
        value,
        orphans: claims.orphans(),
        blocks: claims.blocks,
    })
}

/// The blocks of one message as its placeholders claim them (SPEC.md §4.2):
/// what [`decode`] does with each map of frame 0, for any reader of frame 0.
pub(crate) struct Claims<'f> {
    frames: &'f [Bytes],
    limits: &'f Limits,
    /// Which frames a block holds (no allocation for most messages).
    claimed: smallvec::SmallVec<[bool; 16]>,
    /// The blocks claimed so far, in the order their placeholders came
    /// (when recorded: [`Claims::recording`]).
    pub(crate) blocks: Vec<BlockRef>,
    record: bool,
}

impl<'f> Claims<'f> {
    /// Nothing claimed yet but frame 0, which must exist.
    #[inline]
    pub(crate) fn new(frames: &'f [Bytes], limits: &'f Limits) -> Result<Claims<'f>, MessageError> {
        if frames.is_empty() {
            return Err(MessageError::NoFrames);
        }
        // Frame 0 claimed, the others not (written as it is made: a few
        // frames are not worth a call to `memset`).
        let claimed = (0..frames.len()).map(|i| i == 0).collect();
        Ok(Claims {
            frames,
            limits,
            claimed,
            blocks: Vec::new(),
            record: false,
        })
    }

    /// [`Claims::new`], recording in `blocks` where each block was.
    pub(crate) fn recording(
        frames: &'f [Bytes],
        limits: &'f Limits,
    ) -> Result<Claims<'f>, MessageError> {
        let mut claims = Claims::new(frames, limits)?;
        claims.record = true;
        Ok(claims)
    }

    /// A map of frame 0, once its entries are decoded: plain data, or the
    /// block its placeholder claims (a map using a reserved key otherwise
    /// is refused).
    pub(crate) fn resolve(
        &mut self,
        entries: Vec<(Value, Value)>,
        at: Position,
    ) -> Result<Value, MessageError> {
        let Some(kind) = placeholder_kind(&entries, at)? else {
            return Ok(Value::Map(entries));
        };
        let offset = placeholder_offset(&entries[0].1, at)?;
        Ok(self.claim(kind, offset)?.into_value())
    }

    /// The block a placeholder of `kind` at `offset` (1 or more) claims.
    pub(crate) fn claim(&mut self, kind: BlockKind, offset: u64) -> Result<Block, MessageError> {
        let (block, num_sub_frames) =
            claim_block(self.frames, &mut self.claimed, offset, self.limits)?;
        if self.record {
            self.blocks.push(BlockRef {
                kind,
                offset: offset as usize, // checked by claim_block
                num_sub_frames,
            });
        }
        Ok(block.with_kind(kind == BlockKind::Pickled))
    }

    /// Frames (≥ 1) no block claimed, in increasing order.
    pub(crate) fn orphans(&self) -> Vec<usize> {
        (1..self.frames.len())
            .filter(|&i| !self.claimed[i])
            .collect()
    }
}

/// Whether a map is a placeholder. A map that uses a reserved key in any
/// other way than as a one-entry placeholder is refused.
fn placeholder_kind(
    entries: &[(Value, Value)],
    at: Position,
) -> Result<Option<BlockKind>, MessageError> {
    let kind_of = |k: &Value| match k.as_str() {
        Some(SERIALIZED_KEY) => Some(BlockKind::Serialized),
        Some(PICKLED_KEY) => Some(BlockKind::Pickled),
        _ => None,
    };
    let mut reserved = entries.iter().filter_map(|(k, _)| kind_of(k));
    let Some(kind) = reserved.next() else {
        return Ok(None);
    };
    if entries.len() != 1 {
        return Err(MessageError::AmbiguousReference { at });
    }
    Ok(Some(kind))
}

fn placeholder_offset(v: &Value, at: Position) -> Result<u64, MessageError> {
    match v.as_int().and_then(|i| i.as_u64()) {
        Some(0) | None => Err(MessageError::InvalidOffset { at }),
        Some(i) => Ok(i),
    }
}

/// Takes the block at `offset`: decodes its sub-header and claims its frames.
fn claim_block(
    frames: &[Bytes],
    claimed: &mut [bool],
    offset: u64,
    limits: &Limits,
) -> Result<(Block, usize), MessageError> {
    let out_of_range = MessageError::OffsetOutOfRange {
        offset,
        frames: frames.len(),
    };
    let offset = usize::try_from(offset)
        .ok()
        .filter(|&o| o < frames.len())
        .ok_or(out_of_range)?;
    let header_frame = &frames[offset];
    if claimed[offset] {
        return Err(MessageError::FrameAliased { frame: offset });
    }
    // Checked like a decode, but nothing is built: a pass-through relay never
    // needs the map (see `Header::map`).
    let skimmed = msgpack::skim(header_frame, offset, limits, NUM_SUB_FRAMES)?;
    if !skimmed.is_map {
        return Err(MessageError::SubHeaderNotMap { frame: offset });
    }
    let n = skimmed
        .int_at_key
        .and_then(|i| i.as_u64())
        .ok_or(MessageError::InvalidSubFrameCount { frame: offset })?;
    let out_of_bounds = MessageError::SubFrameRangeOutOfBounds {
        offset,
        num_sub_frames: n,
        frames: frames.len(),
    };
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| (offset + 1).checked_add(n))
        .filter(|&end| end <= frames.len())
        .ok_or(out_of_bounds)?;
    if let Some(frame) = (offset..end).find(|&i| claimed[i]) {
        return Err(MessageError::FrameAliased { frame });
    }
    claimed[offset..end].iter_mut().for_each(|c| *c = true);
    let header = Header::from_wire(header_frame.clone(), n);
    let payload = frames[offset + 1..end].iter().cloned();
    Ok((Block::new(header, payload), end - offset - 1))
}

/// Encodes a value as a frame list: frame 0 is its msgpack, and every
/// [`Value::Serialized`] / [`Value::Pickled`] leaf becomes a placeholder plus a
/// block of its sub-header and its own payload frames (the same `Bytes`, never
/// copied). Sub-headers that came off the wire are re-emitted byte for byte.
///
/// This is layer 2 alone: a [`Value::ToSerialize`] or [`Value::NdArray`] leaf is
/// refused ([`EncodeError::NotSerialized`]); [`crate::dumps`] serializes them.
/// A plain map that uses `__Serialized__` or `__Pickled__` as a key is refused
/// ([`EncodeError::ReservedKey`]): Dask would misread it.
pub fn encode(value: &Value) -> Result<Vec<Bytes>, EncodeError> {
    encode_with(value, &mut |_| Err(EncodeError::NotSerialized))
}

/// [`encode`], with `serialize` turning each [`Value::ToSerialize`] or
/// [`Value::NdArray`] leaf into the block that replaces it.
pub(crate) fn encode_with(
    value: &Value,
    serialize: &mut dyn FnMut(&Value) -> Result<Block, EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut placeholders = Placeholders::new(serialize);
    let mut frame0 = BytesMut::with_capacity(128);
    msgpack::encode_into(value, &mut frame0, &mut placeholders)?;
    Ok(placeholders.finish(frame0.freeze()))
}

/// Frame 0's rules for the msgpack encoder: every out-of-band leaf becomes
/// a placeholder whose block is appended to the frames, and reserved keys
/// are refused. A writer of frame 0 that is not [`encode`] (the typed
/// layer's direct path) hands it each value it cannot write itself.
pub(crate) struct Placeholders<'s> {
    frames: Vec<Bytes>,
    serialize: &'s mut dyn FnMut(&Value) -> Result<Block, EncodeError>,
}

impl<'s> Placeholders<'s> {
    /// No block yet; `serialize` turns a [`Value::ToSerialize`] or
    /// [`Value::NdArray`] leaf into the block that replaces it.
    pub(crate) fn new(
        serialize: &'s mut dyn FnMut(&Value) -> Result<Block, EncodeError>,
    ) -> Placeholders<'s> {
        Placeholders {
            frames: Vec::new(),
            serialize,
        }
    }

    /// The message: `frame0`, then the blocks.
    pub(crate) fn finish(self, frame0: Bytes) -> Vec<Bytes> {
        let mut frames = Vec::with_capacity(1 + self.frames.len());
        frames.push(frame0);
        frames.extend(self.frames);
        frames
    }

    /// The blocks alone (frames 1 and on), for a frame 0 the caller keeps:
    /// nothing allocated when there are none.
    #[cfg(feature = "serde")]
    pub(crate) fn into_blocks(self) -> Vec<Bytes> {
        self.frames
    }

    /// Writes `{key: index}`, index being where the block's sub-header goes
    /// (frame 0 comes before the blocks placed so far).
    fn placeholder(&self, key: &str, out: &mut BytesMut) -> Result<(), EncodeError> {
        msgpack::put_map_len(out, 1);
        msgpack::put_str(out, key)?;
        msgpack::put_uint(out, 1 + self.frames.len() as u64);
        Ok(())
    }
}

impl Leaves for Placeholders<'_> {
    fn write(&mut self, v: &Value, out: &mut BytesMut) -> Result<(), EncodeError> {
        let (key, block) = match v {
            Value::Serialized(b) => (SERIALIZED_KEY, &**b),
            Value::Pickled(b) => (PICKLED_KEY, &**b),
            other => {
                // A block built here: its frames move into the message.
                let (header, frames) = (self.serialize)(other)?.into_parts();
                self.placeholder(SERIALIZED_KEY, out)?;
                let n = frames.len();
                self.frames.push(sub_header_bytes(Cow::Owned(header), n)?);
                self.frames.extend(frames);
                return Ok(());
            }
        };
        self.placeholder(key, out)?;
        self.frames.push(sub_header_bytes(
            Cow::Borrowed(block.header()),
            block.frames().len(),
        )?);
        self.frames.extend(block.frames().iter().cloned());
        Ok(())
    }

    fn check_key(&mut self, key: &Value) -> Result<(), EncodeError> {
        check_key(key)
    }
}

/// The rules of a sub-header for the msgpack encoder: plain msgpack (an
/// out-of-band value is [`EncodeError::OutOfBandInHeader`]) without reserved
/// keys (Dask's sub-header decoder reads them as placeholders too).
pub(crate) struct HeaderRules;

impl Leaves for HeaderRules {
    fn write(&mut self, _: &Value, _: &mut BytesMut) -> Result<(), EncodeError> {
        Err(EncodeError::OutOfBandInHeader)
    }

    fn check_key(&mut self, key: &Value) -> Result<(), EncodeError> {
        check_key(key)
    }
}

/// The sub-header frame of a block: its wire bytes when they still describe
/// its frames, else its bytes (as it came or was written, or its map
/// encoded) with `num-sub-frames` set: kept in place if the key exists,
/// appended otherwise, as Dask's dict assignment does. The bytes of a
/// header handed over (a block just serialized) take the key without being
/// copied.
fn sub_header_bytes(header: Cow<'_, Header>, n: usize) -> Result<Bytes, EncodeError> {
    if let Some(raw) = header.raw_for(n) {
        return Ok(raw.clone());
    }
    // Its bytes (or its map's), with the count set in them: appended
    // without reading the bytes again when they are known to lack it.
    let lacks_count = header.lacks_count();
    let raw = match header {
        Cow::Owned(Header { raw: Some(raw), .. }) => raw,
        Cow::Borrowed(Header { raw: Some(raw), .. }) => raw.clone(),
        header => msgpack::encode(header.map(), &mut HeaderRules)?,
    };
    let entry = [(NUM_SUB_FRAMES, &Value::from(n))];
    msgpack::set_entries(raw, &entry, &mut HeaderRules, lacks_count)
}
