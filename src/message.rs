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

use bytes::{Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError, Position};
use crate::limits::Limits;
use crate::msgpack::{self, PICKLED_KEY, SERIALIZED_KEY};
use crate::value::{Block, Header, Value};

/// The key in a sub-header that says how many payload frames follow it.
pub const NUM_SUB_FRAMES: &str = "num-sub-frames";

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
pub struct Loaded {
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
/// use framewire::{dumps, loads, Limits, Value};
///
/// let frames = vec![Bytes::from_static(b"\x81\xa2op\xa4ping")];
/// let value = loads(&frames, &Limits::strict())?;
/// assert_eq!(value.get("op").and_then(Value::as_str), Some("ping"));
/// assert_eq!(dumps(&value)?, frames);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn loads(frames: &[Bytes], limits: &Limits) -> Result<Value, DecodeError> {
    loads_detailed(frames, limits).map(|l| l.value)
}

/// [`loads`], also returning where each block was and which frames are orphans.
pub fn loads_detailed(frames: &[Bytes], limits: &Limits) -> Result<Loaded, DecodeError> {
    let frame0 = frames.first().ok_or(DecodeError::EmptyMessage)?;
    let mut claimed = vec![false; frames.len()];
    claimed[0] = true;
    let mut blocks = Vec::new();
    let mut hook = |entries: Vec<(Value, Value)>, at: Position| {
        let Some(kind) = placeholder_kind(&entries, at)? else {
            return Ok(Value::Map(entries));
        };
        let offset = placeholder_offset(&entries[0].1, at)?;
        let (block, num_sub_frames) = claim_block(frames, &mut claimed, offset, limits)?;
        blocks.push(BlockRef {
            kind,
            offset: offset as usize, // checked by claim_block
            num_sub_frames,
        });
        Ok(match kind {
            BlockKind::Serialized => Value::Serialized(Box::new(block)),
            BlockKind::Pickled => Value::Pickled(Box::new(block)),
        })
    };
    let value = msgpack::decode(frame0, 0, limits, &mut hook)?;
    let orphans = (1..frames.len()).filter(|&i| !claimed[i]).collect();
    Ok(Loaded {
        value,
        blocks,
        orphans,
    })
}

/// Whether a map is a placeholder. A map that uses a reserved key in any
/// other way than as a one-entry placeholder is refused.
fn placeholder_kind(
    entries: &[(Value, Value)],
    at: Position,
) -> Result<Option<BlockKind>, DecodeError> {
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
        return Err(DecodeError::AmbiguousReference { at });
    }
    Ok(Some(kind))
}

fn placeholder_offset(v: &Value, at: Position) -> Result<u64, DecodeError> {
    match v.as_int().and_then(|i| i.as_u64()) {
        Some(0) | None => Err(DecodeError::InvalidOffset { at }),
        Some(i) => Ok(i),
    }
}

/// Takes the block at `offset`: decodes its sub-header and claims its frames.
fn claim_block(
    frames: &[Bytes],
    claimed: &mut [bool],
    offset: u64,
    limits: &Limits,
) -> Result<(Block, usize), DecodeError> {
    let out_of_range = DecodeError::OffsetOutOfRange {
        offset,
        frames: frames.len(),
    };
    let offset = usize::try_from(offset)
        .ok()
        .filter(|&o| o < frames.len())
        .ok_or(out_of_range)?;
    let header_frame = &frames[offset];
    if claimed[offset] {
        return Err(DecodeError::FrameAliased { frame: offset });
    }
    // Checked like a decode, but nothing is built: a pass-through relay never
    // needs the map (see `Header::map`).
    let skimmed = msgpack::skim(header_frame, offset, limits, NUM_SUB_FRAMES)?;
    if !skimmed.is_map {
        return Err(DecodeError::SubHeaderNotMap { frame: offset });
    }
    let n = skimmed
        .int_at_key
        .and_then(|i| i.as_u64())
        .ok_or(DecodeError::InvalidSubFrameCount { frame: offset })?;
    let out_of_bounds = DecodeError::SubFrameRangeOutOfBounds {
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
        return Err(DecodeError::FrameAliased { frame });
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
/// This is layer 2 alone: a [`Value::Serialize`] or [`Value::NdArray`] leaf is
/// refused ([`EncodeError::NotSerialized`]); [`crate::dumps`] serializes them.
/// A plain map that uses `__Serialized__` or `__Pickled__` as a key is refused
/// ([`EncodeError::ReservedKey`]): Dask would misread it.
pub fn dumps(value: &Value) -> Result<Vec<Bytes>, EncodeError> {
    dumps_with(value, &mut |_| Err(EncodeError::NotSerialized))
}

/// [`dumps`], with `serialize` turning each [`Value::Serialize`] or
/// [`Value::NdArray`] leaf into the block that replaces it.
pub(crate) fn dumps_with(
    value: &Value,
    serialize: &mut dyn FnMut(&Value) -> Result<Block, EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut frames = vec![Bytes::new()];
    let mut frame0 = BytesMut::with_capacity(128);
    let mut leaf = |v: &Value, out: &mut BytesMut| {
        let built;
        let (key, block) = match v {
            Value::Serialized(b) => (SERIALIZED_KEY, &**b),
            Value::Pickled(b) => (PICKLED_KEY, &**b),
            other => {
                built = serialize(other)?;
                (SERIALIZED_KEY, &built)
            }
        };
        msgpack::write_placeholder(out, key, frames.len());
        frames.push(sub_header_bytes(block)?);
        frames.extend(block.frames().iter().cloned());
        Ok(())
    };
    msgpack::encode_into(value, &mut frame0, usize::MAX, &mut leaf)?;
    frames[0] = frame0.freeze();
    Ok(frames)
}

/// The sub-header frame of a block: its wire bytes when they still describe
/// its frames, else its bytes (as it came or was written, or its map
/// encoded) with `num-sub-frames` set: kept in place if the key exists,
/// appended otherwise, as Dask's dict assignment does.
fn sub_header_bytes(block: &Block) -> Result<Bytes, EncodeError> {
    let header = block.header();
    let n = block.frames().len();
    if let Some(raw) = header.raw_for(n) {
        return Ok(raw.clone());
    }
    // Its bytes (or its map's), with the count set in them.
    let encoded;
    let raw = match header.raw_bytes() {
        Some(raw) => raw,
        None => {
            encoded = msgpack::encode(header.map())?;
            &encoded
        }
    };
    msgpack::set_entries(raw, &[(NUM_SUB_FRAMES, &Value::from(n))])
}
