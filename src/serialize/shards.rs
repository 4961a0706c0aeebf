//! Shards: payload frames longer than the shard size are cut into slices
//! (Dask's `frame_split_size`), and merged back on decode.

use bytes::{Bytes, BytesMut};

use super::{set_key, DeserializeOptions, Out};
use crate::error::DecodeError;
use crate::value::Value;

/// Cuts every frame whose `compression` entry is nil into shards of at most
/// `shard_size` bytes, at a multiple of its shard unit, and adds Dask's
/// `split-num-sub-frames`, `split-offsets` and `compression` keys. Shards are
/// `Bytes::slice`s: nothing is copied.
pub(super) fn split(
    mut header: Vec<(Value, Value)>,
    out: Out,
    shard_size: usize,
) -> (Vec<(Value, Value)>, Vec<Bytes>) {
    let given: Option<Vec<Value>> = header
        .iter()
        .find(|(k, _)| k.as_str() == Some("compression"))
        .and_then(|(_, v)| v.as_array())
        .map(<[Value]>::to_vec);
    let mut counts = Vec::with_capacity(out.frames.len());
    let mut offsets = Vec::with_capacity(out.frames.len());
    let mut frames = Vec::with_capacity(out.frames.len());
    let mut compression = Vec::with_capacity(out.frames.len());
    for (i, (frame, unit)) in out.frames.into_iter().zip(out.units).enumerate() {
        offsets.push(Value::from(frames.len()));
        let codec = given
            .as_ref()
            .and_then(|c| c.get(i))
            .cloned()
            .unwrap_or(Value::Nil);
        if codec != Value::Nil || frame.len() <= shard_size {
            counts.push(Value::from(1u64));
            frames.push(frame);
            compression.push(codec);
            continue;
        }
        let step = (shard_size / unit).max(1) * unit;
        let mut n = 0u64;
        let mut at = 0;
        while at < frame.len() {
            let end = (at + step).min(frame.len());
            frames.push(frame.slice(at..end));
            compression.push(Value::Nil);
            at = end;
            n += 1;
        }
        counts.push(Value::from(n));
    }
    set_key(&mut header, "split-num-sub-frames", Value::Array(counts));
    set_key(&mut header, "split-offsets", Value::Array(offsets));
    set_key(&mut header, "compression", Value::Array(compression));
    (header, frames)
}

/// The frames of a block with its shards merged (Dask's
/// `merge_and_deserialize`), or `None` when a frame is compressed (kept
/// opaque until framewire decompresses it). The split table must tile the
/// frames exactly; `compression` must have one entry per frame.
pub(super) fn merge(
    header: &Value,
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<Option<Vec<Bytes>>, DecodeError> {
    if let Some(c) = header.get("compression") {
        let c = c.as_array().ok_or(DecodeError::InvalidHeader {
            field: "compression",
        })?;
        if c.len() != frames.len() {
            return Err(DecodeError::LengthMismatch {
                field: "compression",
                expected: frames.len(),
                got: c.len(),
            });
        }
        if c.iter()
            .any(|x| !matches!(x, Value::Nil | Value::Bool(false)))
        {
            return Ok(None);
        }
    }
    let Some(counts) = header.get("split-num-sub-frames") else {
        return Ok(Some(frames.to_vec()));
    };
    let invalid = |reason| DecodeError::SplitTableInvalid { reason };
    let counts = counts
        .as_array()
        .ok_or(invalid("split-num-sub-frames is not an array"))?;
    let offsets = header
        .get("split-offsets")
        .and_then(Value::as_array)
        .ok_or(invalid("split-offsets missing"))?;
    if counts.len() != offsets.len() {
        return Err(invalid(
            "split-num-sub-frames and split-offsets differ in length",
        ));
    }
    let mut merged = Vec::with_capacity(counts.len());
    let mut next = 0usize;
    for (n, off) in counts.iter().zip(offsets) {
        let as_usize = |v: &Value| {
            v.as_int()
                .and_then(|i| i.as_u64())
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
        let total: u64 = frames[off..end].iter().map(|f| f.len() as u64).sum();
        if total > opts.limits.max_frame_len {
            return Err(DecodeError::FrameTooLarge {
                index: merged.len(),
                declared: total,
                limit: opts.limits.max_frame_len,
            });
        }
        merged.push(merge_frames(&frames[off..end], opts.backing.as_ref()));
        next = end;
    }
    if next != frames.len() {
        return Err(invalid("shards do not cover every frame"));
    }
    Ok(Some(merged))
}

/// Joins shards into one frame: a slice of `backing` when they lie back to
/// back inside it (no copy), else one copy.
pub fn merge_frames(shards: &[Bytes], backing: Option<&Bytes>) -> Bytes {
    match shards {
        [] => return Bytes::new(),
        [one] => return one.clone(),
        _ => {}
    }
    if let Some(parent) = backing {
        let base = parent.as_ptr() as usize;
        let start = shards[0].as_ptr() as usize;
        let adjacent = shards
            .windows(2)
            .all(|w| w[0].as_ptr() as usize + w[0].len() == w[1].as_ptr() as usize);
        let last = &shards[shards.len() - 1];
        let end = last.as_ptr() as usize + last.len();
        if adjacent && start >= base && end <= base + parent.len() {
            return parent.slice(start - base..end - base);
        }
    }
    let mut out = BytesMut::with_capacity(shards.iter().map(Bytes::len).sum());
    shards.iter().for_each(|s| out.extend_from_slice(s));
    out.freeze()
}
