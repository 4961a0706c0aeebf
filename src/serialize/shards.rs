//! Shards: payload frames longer than the shard size are cut into slices
//! (Dask's `frame_split_size`), and merged back on decode, after each shard
//! is decompressed (`compression.rs`).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

use super::compression::{self, Codec, DecompressBudget};
use super::error::DeserializeError;
use super::options::DeserializeOptions;
use super::write::Out;
use crate::msgpack::RawMap;
use crate::value::{Integer, Value};

/// Dask's split table for a block's frames, as [`split`] makes it.
pub(super) struct SplitTable {
    /// `split-num-sub-frames`: how many shards each original frame became.
    pub(super) counts: Vec<i64>,
    /// `split-offsets`: where each original frame's shards start.
    pub(super) offsets: Vec<i64>,
    /// `compression`: one entry per shard.
    pub(super) compression: Vec<Value>,
}

/// Cuts every frame whose `compression` entry (in `given`, the header's own
/// list if it has one) is nil into shards of at most `shard_size` bytes, at
/// a multiple of its shard unit, and makes Dask's split table. Shards are
/// `Bytes::slice`s: nothing is copied.
pub(super) fn split(
    given: Option<Vec<Value>>,
    out: Out,
    shard_size: usize,
) -> (SplitTable, Vec<Bytes>) {
    let n = out.frames.len();
    let codec = |i: usize| {
        given
            .as_ref()
            .and_then(|c| c.get(i))
            .cloned()
            .unwrap_or(Value::Nil)
    };
    // Each frame's shard step (`None`: not cut), then the shard counts, so
    // that every table is allocated once at its size.
    let mut units = out.units.into_iter().peekable();
    let steps: Vec<Option<usize>> = (0..n)
        .map(|i| {
            let unit = units
                .next_if(|&(at, _)| at == i)
                .map_or(1, |(_, unit)| unit);
            let cut = codec(i) == Value::Nil && out.frames[i].len() > shard_size;
            cut.then(|| (shard_size / unit).max(1) * unit)
        })
        .collect();
    let counts: Vec<i64> = out
        .frames
        .iter()
        .zip(&steps)
        .map(|(f, step)| step.map_or(1, |step| f.len().div_ceil(step)) as i64)
        .collect();
    let shards = counts.iter().sum::<i64>() as usize;
    let mut table = SplitTable {
        counts,
        offsets: Vec::with_capacity(n),
        compression: Vec::with_capacity(shards),
    };
    let mut frames = Vec::with_capacity(shards);
    for (i, (frame, step)) in out.frames.into_iter().zip(steps).enumerate() {
        table.offsets.push(frames.len() as i64);
        let Some(step) = step else {
            frames.push(frame);
            table.compression.push(codec(i));
            continue;
        };
        let mut at = 0;
        while at < frame.len() {
            let end = (at + step).min(frame.len());
            frames.push(frame.slice(at..end));
            table.compression.push(Value::Nil);
            at = end;
        }
    }
    (table, frames)
}

/// The entries of a block header that [`merge`] reads.
pub(super) struct Tables {
    /// `compression`.
    pub(super) compression: Option<Value>,
    /// `split-num-sub-frames`.
    pub(super) counts: Option<Value>,
    /// `split-offsets`.
    pub(super) offsets: Option<Value>,
}

impl Tables {
    /// The entries of a header map.
    pub(super) fn of(header: &Value) -> Tables {
        let get = |key| header.get(key).cloned();
        Tables {
            compression: get("compression"),
            counts: get("split-num-sub-frames"),
            offsets: get("split-offsets"),
        }
    }

    /// The entries of a header read in place (the integer tables packed).
    pub(super) fn of_raw(header: &RawMap<'_>) -> Result<Tables, DeserializeError> {
        Ok(Tables {
            compression: header.value("compression")?,
            counts: header.table("split-num-sub-frames")?,
            offsets: header.table("split-offsets")?,
        })
    }
}

/// The frames of a block, decompressed and with their shards merged (Dask's
/// `decompress` then `merge_and_deserialize`). Each frame whose
/// `compression` entry names a codec is decompressed on its own (a shard is
/// a frame: Dask compresses each shard separately), then the shards of each
/// original frame are joined: in place when none was compressed (a slice of
/// the backing buffer when they lie back to back in it), else into one
/// buffer of exactly the total size. The split table must tile the frames
/// exactly; `compression` must have one entry per frame, each nil, `false`
/// or a codec name ([`DeserializeError::UnknownCodec`] otherwise, before anything
/// is decompressed).
pub(super) fn merge<'f>(
    header: &Tables,
    frames: &'f [Bytes],
    opts: &DeserializeOptions,
    budget: &mut DecompressBudget,
) -> Result<Cow<'f, [Bytes]>, DeserializeError> {
    let mut codecs: Vec<Option<Codec>> = Vec::new();
    if let Some(c) = &header.compression {
        let c = c.as_array().ok_or(DeserializeError::InvalidHeader {
            field: "compression",
        })?;
        if c.len() != frames.len() {
            return Err(DeserializeError::LengthMismatch {
                field: "compression",
                expected: frames.len(),
                got: c.len(),
            });
        }
        codecs = c
            .iter()
            .map(Codec::from_header_entry)
            .collect::<Result<_, _>>()?;
    }
    let codec = |i: usize| codecs.get(i).copied().flatten();
    let Some(counts) = &header.counts else {
        if codecs.iter().all(Option::is_none) {
            return Ok(Cow::Borrowed(frames));
        }
        return frames
            .iter()
            .enumerate()
            .map(|(i, f)| match codec(i) {
                None => Ok(f.clone()),
                Some(c) => compression::decompress_shards(&[(Some(c), f)], i, budget),
            })
            .collect();
    };
    let invalid = |reason| DeserializeError::SplitTableInvalid { reason };
    let counts = counts
        .int_items()
        .ok_or(invalid("split-num-sub-frames is not an array"))?;
    let offsets = header
        .offsets
        .as_ref()
        .and_then(Value::int_items)
        .ok_or(invalid("split-offsets missing"))?;
    if counts.len() != offsets.len() {
        return Err(invalid(
            "split-num-sub-frames and split-offsets differ in length",
        ));
    }
    // The whole table is checked before anything is decompressed.
    let mut ranges = Vec::with_capacity(counts.len().min(frames.len() + 1));
    let mut next = 0usize;
    for (n, off) in counts.zip(offsets) {
        let as_usize = |v: Option<Integer>| {
            v.and_then(|i| i.as_u64())
                .and_then(|u| usize::try_from(u).ok())
        };
        let (Some(n), Some(off)) = (as_usize(n), as_usize(off)) else {
            return Err(invalid("split entries must be non-negative integers"));
        };
        if off != next {
            return Err(invalid("shards do not tile the frames in order"));
        }
        let end = off
            .checked_add(n)
            .filter(|&e| e <= frames.len())
            .ok_or(invalid("shards run past the frames"))?;
        ranges.push(off..end);
        next = end;
    }
    if next != frames.len() {
        return Err(invalid("shards do not cover every frame"));
    }
    let mut merged = Vec::with_capacity(ranges.len());
    for range in ranges {
        let index = merged.len();
        if range.clone().any(|i| codec(i).is_some()) {
            let shards: Vec<(Option<Codec>, &Bytes)> =
                range.clone().map(|i| (codec(i), &frames[i])).collect();
            merged.push(compression::decompress_shards(&shards, index, budget)?);
            continue;
        }
        let total: u64 = frames[range.clone()].iter().map(|f| f.len() as u64).sum();
        if total > opts.limits.max_frame_len {
            return Err(DeserializeError::FrameTooLarge {
                index,
                declared: total,
                limit: opts.limits.max_frame_len,
            });
        }
        merged.push(merge_frames(&frames[range], &opts.backing));
    }
    Ok(Cow::Owned(merged))
}

/// Joins shards into one frame: a slice of `backing` when they lie back to
/// back inside it (no copy), else one copy.
pub fn merge_frames(shards: &[Bytes], backing: &[Bytes]) -> Bytes {
    match shards {
        [] => return Bytes::new(),
        [one] => return one.clone(),
        _ => {}
    }
    let start = shards[0].as_ptr() as usize;
    let adjacent = shards
        .windows(2)
        .all(|w| w[0].as_ptr() as usize + w[0].len() == w[1].as_ptr() as usize);
    let last = &shards[shards.len() - 1];
    let end = last.as_ptr() as usize + last.len();
    if adjacent {
        for parent in backing {
            let base = parent.as_ptr() as usize;
            if start >= base && end <= base + parent.len() {
                return parent.slice(start - base..end - base);
            }
        }
    }
    let mut out = BytesMut::with_capacity(shards.iter().map(Bytes::len).sum());
    shards.iter().for_each(|s| out.extend_from_slice(s));
    out.freeze()
}
