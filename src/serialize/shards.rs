//! Shards: payload frames longer than the shard size are cut into slices
//! (Dask's `frame_split_size`), and merged back on decode, after each shard
//! is decompressed (`compression.rs`).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

use super::codec::Codec;
use super::compression::{self, DecompressBudget};
use super::error::DeserializeError;
use super::options::DeserializeOptions;
use crate::msgpack::RawMap;
use crate::value::{Integer, Value};

/// Dask's split table for a block's frames, as [`split`] makes it.
pub(super) struct SplitTable {
    /// `split-num-sub-frames`: how many shards each original frame became.
    pub(super) counts: Vec<i64>,
    /// `split-offsets`: where each original frame's shards start.
    pub(super) offsets: Vec<i64>,
    /// `compression`: one entry per shard; `None` while every entry is nil
    /// (no list of a million nils is built for a million small frames).
    pub(super) compression: Option<Vec<Value>>,
}

/// Cuts every frame of `out_frames` (the serializer's) whose `compression`
/// entry (in `given`, the header's own list if it has one) is nil into
/// shards of at most `shard_size` bytes, at a multiple of its shard unit
/// (`units`: (frame index, unit), in frame order), and makes Dask's split
/// table. Shards are `Bytes::slice`s: nothing is copied, and when no frame
/// is cut the frame list is `out_frames` itself.
pub(super) fn split(
    given: Option<Vec<Value>>,
    out_frames: Vec<Bytes>,
    units: &[(usize, usize)],
    shard_size: usize,
) -> (SplitTable, Vec<Bytes>) {
    let n = out_frames.len();
    let codec = |i: usize| {
        given
            .as_ref()
            .and_then(|c| c.get(i))
            .cloned()
            .unwrap_or(Value::Nil)
    };
    // Frame i's shard step (`None`: not cut), asked in frame order.
    let mut units = units.iter().copied().peekable();
    let mut step = |i: usize, frame: &Bytes| {
        let unit = units
            .next_if(|&(at, _)| at == i)
            .map_or(1, |(_, unit)| unit);
        let nil = given
            .as_ref()
            .and_then(|c| c.get(i))
            .is_none_or(|c| *c == Value::Nil);
        (nil && frame.len() > shard_size).then(|| (shard_size / unit).max(1) * unit)
    };
    let steps: Vec<(usize, usize)> = (0..n)
        .filter_map(|i| step(i, &out_frames[i]).map(|s| (i, s)))
        .collect();
    let mut counts = vec![1i64; n];
    for &(i, s) in &steps {
        counts[i] = out_frames[i].len().div_ceil(s) as i64;
    }
    let mut at = 0;
    let offsets: Vec<i64> = counts
        .iter()
        .map(|&c| {
            at += c;
            at - c
        })
        .collect();
    // One entry per shard: a frame's own (a frame cut has a nil one).
    let compression = given.as_ref().map(|_| {
        let mut all = Vec::with_capacity(at as usize);
        for (i, &c) in counts.iter().enumerate() {
            all.extend(std::iter::repeat_n(codec(i), c as usize));
        }
        all
    });
    let table = SplitTable {
        counts,
        offsets,
        compression,
    };
    if steps.is_empty() {
        return (table, out_frames);
    }
    let mut frames = Vec::with_capacity(at as usize);
    let mut cuts = steps.into_iter().peekable();
    for (i, frame) in out_frames.into_iter().enumerate() {
        let Some((_, step)) = cuts.next_if(|&(j, _)| j == i) else {
            frames.push(frame);
            continue;
        };
        let mut at = 0;
        while at < frame.len() {
            let end = (at + step).min(frame.len());
            frames.push(frame.slice(at..end));
            at = end;
        }
    }
    (table, frames)
}

/// The entries of a block header that [`merge`] reads.
pub(super) struct Tables {
    /// `compression`.
    pub(super) compression: Option<Compression>,
    /// `split-num-sub-frames`.
    pub(super) counts: Option<Value>,
    /// `split-offsets`.
    pub(super) offsets: Option<Value>,
}

/// A header's `compression` entry.
pub(super) enum Compression {
    /// A list of this many nils (read in place, nothing built per entry).
    Nils(usize),
    /// Any other value.
    Value(Value),
}

impl Tables {
    /// The entries of a header map.
    pub(super) fn of(header: &Value) -> Tables {
        let get = |key| header.get(key).cloned();
        Tables {
            compression: get("compression").map(Compression::Value),
            counts: get("split-num-sub-frames"),
            offsets: get("split-offsets"),
        }
    }

    /// The entries of a header read in place (the integer tables packed).
    pub(super) fn of_raw(header: &RawMap<'_>) -> Result<Tables, DeserializeError> {
        let compression = match header.nils("compression") {
            Some(n) => Some(Compression::Nils(n)),
            None => header.value("compression")?.map(Compression::Value),
        };
        Ok(Tables {
            compression,
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
    let listed = match &header.compression {
        None => None,
        Some(Compression::Nils(n)) => Some((*n, None)),
        Some(Compression::Value(c)) => {
            let c = c.as_array().ok_or(DeserializeError::InvalidHeader {
                field: "compression",
            })?;
            Some((c.len(), Some(c)))
        }
    };
    if let Some((len, entries)) = listed {
        if len != frames.len() {
            return Err(DeserializeError::LengthMismatch {
                field: "compression",
                expected: frames.len(),
                got: len,
            });
        }
        if let Some(c) = entries {
            codecs = c
                .iter()
                .map(Codec::from_header_entry)
                .collect::<Result<_, _>>()?;
        }
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
    // The whole table is checked before anything is decompressed. The
    // ranges are kept from the first frame cut into shards on; before it,
    // frame i is shard i.
    let (mut ranges, mut cut) = (Vec::new(), false);
    let mut next = 0usize;
    for (i, (n, off)) in counts.zip(offsets).enumerate() {
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
        if n != 1 && !cut {
            cut = true;
            ranges.reserve(frames.len().saturating_sub(i));
            ranges.extend((0..i).map(|j| j..j + 1));
        }
        if cut {
            ranges.push(off..end);
        }
        next = end;
    }
    if next != frames.len() {
        return Err(invalid("shards do not cover every frame"));
    }
    let too_large = |index: usize, total: u64| DeserializeError::FrameTooLarge {
        index,
        declared: total,
        limit: opts.limits.max_frame_len,
    };
    if !cut {
        // One shard per frame: the frames are the merged ones.
        if codecs.iter().all(Option::is_none) {
            return match frames
                .iter()
                .position(|f| f.len() as u64 > opts.limits.max_frame_len)
            {
                Some(index) => Err(too_large(index, frames[index].len() as u64)),
                None => Ok(Cow::Borrowed(frames)),
            };
        }
        ranges = (0..frames.len()).map(|i| i..i + 1).collect();
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
            return Err(too_large(index, total));
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
