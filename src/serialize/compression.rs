//! Compression of payload frames (SPEC.md §5.12): every codec Dask names in
//! a header, decoded under [`Limits`]; lz4 / zstd / snappy / zlib encoded
//! under Dask's `maybe_compress` policy, made deterministic.
//!
//! ```text
//! sub-header {..., "split-num-sub-frames": [3], "split-offsets": [0],
//!             "compression": ["lz4", "lz4", nil]}      one entry per frame (shard)
//!
//! "lz4"     u32 LE uncompressed size | raw LZ4 block        (lz4.block.compress)
//! "zstd"    one zstd frame, content size in its header      (level 3)
//! "snappy"  varint uncompressed size | raw snappy block     (not the framed format)
//! "zlib"    zlib stream: 2-byte header | deflate | Adler-32 (level 6; no size)
//! nil/false the frame's bytes as they are
//! ```
//!
//! Decoding never trusts a declared size: it is checked against
//! [`Limits::max_frame_len`], against what the input could possibly expand
//! to, and against the message's [`DecompressBudget`] before a byte is
//! allocated, and the output buffer is exactly that size. Formats without a
//! size (zlib, a zstd frame without its content size) decode through a
//! buffer that grows as output arrives and stops one byte past the limit.

#[cfg(feature = "lz4")]
mod lz4;
#[cfg(feature = "lz4")]
mod lz4_block;
#[cfg(feature = "snappy")]
mod snappy;
#[cfg(feature = "zlib")]
mod zlib;
#[cfg(feature = "zstd")]
mod zstd;

use bytes::Bytes;

use super::codec::Codec;
use super::error::{CompressionError, DeserializeError};
use crate::limits::Limits;
use crate::value::Value;

/// Frames below this many bytes are never compressed (Dask's `min_size`).
const MIN_COMPRESS_SIZE: usize = 10_000;
/// Frames above this many bytes are never compressed (Dask's `2**31`).
const MAX_COMPRESS_SIZE: usize = 1 << 31;
/// Bytes in one piece of the sample (Dask's `sample_size`).
const SAMPLE_SIZE: usize = 10_000;
/// Pieces in the sample (Dask's `nsamples`).
const SAMPLES: usize = 5;
/// Compressed output is kept only at or below this fraction (Dask's `min_ratio`).
const MIN_RATIO: f64 = 0.7;

impl Codec {
    /// The codec one entry of a header's `compression` list names:
    /// `Ok(None)` for nil or `false` (raw bytes), the codec for its name, and
    /// [`CompressionError::UnknownCodec`] for anything else: other strings (`""`,
    /// `"auto"`, `"brotli"`) and other types (Dask's dict lookup would take
    /// `0` for `False`; framewire does not guess).
    pub fn from_header_entry(entry: &Value) -> Result<Option<Codec>, CompressionError> {
        match entry {
            Value::Nil | Value::Bool(false) => Ok(None),
            Value::Str(s) => {
                Codec::from_name(s)
                    .map(Some)
                    .ok_or_else(|| CompressionError::UnknownCodec {
                        name: shorten(s).into_owned(),
                    })
            }
            other => Err(CompressionError::UnknownCodec {
                name: describe(other),
            }),
        }
    }

    /// `data` compressed whole in this codec's Dask format (no policy: see
    /// [`maybe_compress`]); `None` when the codec cannot take that much
    /// (lz4 above 0x7E000000 bytes, snappy above 2^32 − 1), or when its
    /// feature is off.
    pub fn compress(self, data: &[u8]) -> Option<Bytes> {
        let out: Option<Vec<u8>> = match self {
            #[cfg(feature = "lz4")]
            Codec::Lz4 => lz4::compress(data),
            #[cfg(feature = "zstd")]
            Codec::Zstd => zstd::compress(data),
            #[cfg(feature = "snappy")]
            Codec::Snappy => snappy::compress(data),
            #[cfg(feature = "zlib")]
            Codec::Zlib => zlib::compress(data),
            #[allow(unreachable_patterns)]
            _ => {
                let _ = data;
                None
            }
        };
        let mut out = out?;
        // Encoders reserve their worst case: keep only what was written.
        out.shrink_to_fit();
        Some(Bytes::from(out))
    }
}

/// The error for a codec whose feature is off.
#[allow(dead_code)] // unused when every codec is enabled
fn not_enabled(codec: Codec) -> CompressionError {
    CompressionError::CodecNotEnabled {
        codec,
        feature: codec.feature(),
    }
}

/// An unknown codec name as the error shows it: cut at 64 bytes.
fn shorten(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= 64 {
        return s.into();
    }
    let mut cut = 64;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut]).into()
}

/// A non-string header entry, as [`CompressionError::UnknownCodec`] names it.
fn describe(v: &Value) -> String {
    match v {
        Value::Bool(b) => format!("<bool {b}>"),
        Value::Int(i) => format!("<int {i}>"),
        Value::Float(x) => format!("<float {x:?}>"),
        Value::Bin(b) => format!("<bin of {} bytes>", b.len()),
        Value::Array(a) => format!("<array of {}>", a.len()),
        Value::IntArray(a) => format!("<array of {}>", a.len()),
        Value::BinArray(a) => format!("<array of {}>", a.len()),
        Value::Map(m) => format!("<map of {}>", m.len()),
        _ => "<not a string>".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// The decompressed bytes one message may still produce: one budget is
/// shared by every frame of every block of a message
/// ([`deserialize_blocks`](super::deserialize_blocks) makes one per call;
/// [`deserialize_with_budget`](super::deserialize_with_budget) takes one).
///
/// It starts at [`Limits::max_decompressed_len`]; each frame is also
/// bounded by [`Limits::max_frame_len`] and by Dask's own ceiling: Dask
/// compresses no frame above 2 GiB (`maybe_compress`), so no compressed
/// frame may decompress to more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecompressBudget {
    frame_limit: u64,
    message_limit: u64,
    remaining: u64,
}

impl DecompressBudget {
    /// A full budget for one message under `limits`.
    #[inline]
    pub fn new(limits: &Limits) -> DecompressBudget {
        DecompressBudget {
            frame_limit: limits.max_frame_len.min(MAX_COMPRESS_SIZE as u64),
            message_limit: limits.max_decompressed_len,
            remaining: limits.max_decompressed_len,
        }
    }

    /// Decompressed bytes the message may still produce.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Takes `declared` bytes for one frame of `input_len` compressed bytes,
    /// before anything is allocated for it.
    fn take_declared(
        &mut self,
        codec: Codec,
        declared: u64,
        input_len: usize,
    ) -> Result<usize, CompressionError> {
        let limit = self.frame_limit.min(max_expansion(codec, input_len));
        let too_large = CompressionError::DeclaredSizeTooLarge {
            codec,
            declared,
            limit,
        };
        if declared > limit {
            return Err(too_large);
        }
        if declared > self.remaining {
            return Err(CompressionError::DecompressedTooLarge {
                codec,
                limit: self.message_limit,
            });
        }
        let n = usize::try_from(declared).map_err(|_| too_large)?;
        self.remaining -= declared;
        Ok(n)
    }

    /// The most a frame without a declared size may produce, and the error
    /// for going past it.
    fn cap(&self, codec: Codec) -> (u64, CompressionError) {
        let limit = match self.frame_limit <= self.remaining {
            true => self.frame_limit,
            false => self.message_limit,
        };
        (
            self.frame_limit.min(self.remaining),
            CompressionError::DecompressedTooLarge { codec, limit },
        )
    }
}

/// What `input_len` bytes of a codec's format can decode to at most: a
/// declared size above it is a lie, refused before allocating.
///
/// * lz4: an extra match-length byte (255) adds at most 255 output bytes,
///   a 3-byte token + offset at most 19: ≤ 255 per input byte.
/// * snappy: the best element is a 3-byte copy of 64 bytes: ≤ 22 per byte.
/// * zstd: a block yields at most 128 KiB and takes at least 4 bytes (an
///   RLE block): ≤ 32 768 per byte.
/// * zlib has no declared size (it is capped while it streams).
fn max_expansion(codec: Codec, input_len: usize) -> u64 {
    let n = input_len as u64;
    match codec {
        Codec::Lz4 => n.saturating_sub(4).saturating_mul(255),
        Codec::Snappy => n.saturating_mul(22),
        Codec::Zstd => n.saturating_mul(32_768),
        Codec::Zlib => n.saturating_mul(1_032),
    }
}

/// Decompresses one frame in `codec`'s Dask format into a buffer of exactly
/// its size, checked against the budget (and the limits it was made from)
/// before allocating, and charged to it.
///
/// Errors: [`CompressionError::DeclaredSizeTooLarge`] (a declared size above the
/// frame limit or above what the input can produce),
/// [`CompressionError::DecompressedTooLarge`] (the message's budget or, for zlib
/// and zstd without a content size, the frame limit reached while
/// streaming), [`CompressionError::SizeMismatch`] (the output is longer or
/// shorter than declared; never more than the declared size is written),
/// [`CompressionError::WindowTooLarge`] (zstd), [`CompressionError::Corrupt`].
///
/// ```
/// # #[cfg(feature = "lz4")] {
/// use framewire::serialize::{decompress, Codec, DecompressBudget};
/// use framewire::{CompressionError, Limits};
///
/// let packed = Codec::Lz4.compress(&[7u8; 100_000]).unwrap();
/// let mut budget = DecompressBudget::new(&Limits::strict());
/// assert_eq!(decompress(Codec::Lz4, &packed, &mut budget)?.len(), 100_000);
///
/// // A 9-byte lz4 frame that claims 1 GiB is refused before allocating.
/// let liar = [0, 0, 0, 0x40, 0x1f, 0, 1, 0, 0xff];
/// assert!(matches!(
///     decompress(Codec::Lz4, &liar, &mut budget),
///     Err(CompressionError::DeclaredSizeTooLarge { declared: 0x4000_0000, .. })
/// ));
/// # }
/// # Ok::<(), framewire::CompressionError>(())
/// ```
pub fn decompress(
    codec: Codec,
    frame: &[u8],
    budget: &mut DecompressBudget,
) -> Result<Bytes, CompressionError> {
    if !codec.is_enabled() {
        return Err(not_enabled(codec));
    }
    match declared_size(codec, frame)? {
        Some(declared) => {
            let n = budget.take_declared(codec, declared, frame.len())?;
            let mut out = vec![0u8; n];
            decode_exact(codec, frame, &mut out)?;
            Ok(Bytes::from(out))
        }
        None => decode_capped(codec, frame, budget).map(Bytes::from),
    }
}

/// The frames of one original frame (its shards, each compressed or not)
/// decompressed and joined. When every size is known up front the output is
/// one buffer of exactly the total size, each shard decoded in place.
/// `index` names the merged frame in a [`DeserializeError::FrameTooLarge`].
pub(super) fn decompress_shards(
    shards: &[(Option<Codec>, &Bytes)],
    index: usize,
    budget: &mut DecompressBudget,
) -> Result<Bytes, DeserializeError> {
    if let [(Some(codec), frame)] = shards {
        return Ok(decompress(*codec, frame, budget)?);
    }
    if let Some(codec) = shards
        .iter()
        .find_map(|(c, _)| c.filter(|c| !c.is_enabled()))
    {
        return Err(not_enabled(codec).into());
    }
    let mut sizes = Vec::with_capacity(shards.len());
    for (codec, frame) in shards {
        sizes.push(match codec {
            None => Some(frame.len() as u64),
            Some(c) => match declared_size(*c, frame)? {
                Some(d) => Some(budget.take_declared(*c, d, frame.len())? as u64),
                None => None,
            },
        });
    }
    let frame_limit = budget.frame_limit;
    let too_large = |declared| DeserializeError::FrameTooLarge {
        index,
        declared,
        limit: frame_limit,
    };
    if sizes.iter().all(Option::is_some) {
        let total = sizes
            .iter()
            .flatten()
            .fold(0u64, |a, &b| a.saturating_add(b));
        if total > frame_limit {
            return Err(too_large(total));
        }
        let total = usize::try_from(total).map_err(|_| too_large(total))?;
        let mut out = vec![0u8; total];
        let mut at = 0;
        for ((codec, frame), size) in shards.iter().zip(sizes.iter().flatten()) {
            let dst = &mut out[at..at + *size as usize];
            match codec {
                None => dst.copy_from_slice(frame),
                Some(c) => decode_exact(*c, frame, dst)?,
            }
            at += *size as usize;
        }
        return Ok(Bytes::from(out));
    }
    // A shard without a declared size: decode each, then join (one copy).
    let mut parts = Vec::with_capacity(shards.len());
    let mut total = 0u64;
    for ((codec, frame), size) in shards.iter().zip(&sizes) {
        let part = match (codec, size) {
            (None, _) => (*frame).clone(),
            (Some(c), Some(n)) => {
                let mut out = vec![0u8; *n as usize];
                decode_exact(*c, frame, &mut out)?;
                Bytes::from(out)
            }
            (Some(c), None) => decode_capped(*c, frame, budget).map(Bytes::from)?,
        };
        total = total.saturating_add(part.len() as u64);
        if total > frame_limit {
            return Err(too_large(total));
        }
        parts.push(part);
    }
    Ok(super::families::concat(&parts))
}

/// The size a frame declares it decompresses to, if its format has one.
fn declared_size(codec: Codec, frame: &[u8]) -> Result<Option<u64>, CompressionError> {
    match codec {
        #[cfg(feature = "lz4")]
        Codec::Lz4 => lz4::declared_size(frame).map(Some),
        #[cfg(feature = "snappy")]
        Codec::Snappy => snappy::declared_size(frame).map(Some),
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::declared_size(frame),
        #[cfg(feature = "zlib")]
        Codec::Zlib => Ok(None),
        #[allow(unreachable_patterns)]
        _ => {
            let _ = frame;
            Err(not_enabled(codec))
        }
    }
}

/// Decodes a frame whose declared size is `dst.len()` into `dst`, writing
/// nothing past it.
fn decode_exact(codec: Codec, frame: &[u8], dst: &mut [u8]) -> Result<(), CompressionError> {
    let declared = dst.len() as u64;
    let written: Result<usize, CompressionError> = match codec {
        #[cfg(feature = "lz4")]
        Codec::Lz4 => lz4::decode_exact(frame, dst),
        #[cfg(feature = "snappy")]
        Codec::Snappy => snappy::decode_exact(frame, dst),
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::decode_exact(frame, dst),
        // zlib declares no size: `decode_capped` decodes it.
        _ => {
            let _ = (frame, dst);
            Err(not_enabled(codec))
        }
    };
    let written = written?;
    match written as u64 == declared {
        true => Ok(()),
        false => Err(size_mismatch(codec, declared, Some(written as u64))),
    }
}

/// A frame that decoded to another size than the `declared` one: `actual`
/// when shorter, `None` when longer (decoding stopped at the declared size).
fn size_mismatch(codec: Codec, declared: u64, actual: Option<u64>) -> CompressionError {
    CompressionError::SizeMismatch {
        codec,
        declared,
        actual,
    }
}

/// Decodes a frame without a declared size (zlib, zstd without a content
/// size) into a buffer that grows as output arrives, up to one byte past the
/// budget's cap; the bytes produced are charged to the budget.
fn decode_capped(
    codec: Codec,
    frame: &[u8],
    budget: &mut DecompressBudget,
) -> Result<Vec<u8>, CompressionError> {
    let (cap, too_large) = budget.cap(codec);
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let out: Result<Vec<u8>, CompressionError> = match codec {
        #[cfg(feature = "zlib")]
        Codec::Zlib => zlib::inflate(frame, cap, too_large),
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::decode_stream(frame, cap, too_large),
        // lz4 and snappy always declare their size.
        _ => {
            let _ = (frame, cap, too_large);
            Err(not_enabled(codec))
        }
    };
    let mut out = out?;
    budget.remaining -= out.len() as u64;
    out.shrink_to_fit();
    Ok(out)
}

/// Makes room for more output: doubles the buffer (from 4 × the input, at
/// least 4 KiB), never past `cap + 1` bytes; `false` when it is full there.
#[cfg(any(feature = "zlib", feature = "zstd"))]
fn grow(out: &mut Vec<u8>, input_len: usize, cap: usize) -> bool {
    let hard = cap.saturating_add(1);
    if out.len() < out.capacity() {
        return true;
    }
    if out.len() >= hard {
        return false;
    }
    let want = match out.capacity() {
        0 => input_len.saturating_mul(4).max(4096),
        c => c.saturating_mul(2),
    };
    out.reserve_exact(want.min(hard) - out.len());
    true
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// Dask's `maybe_compress`, deterministic: a frame is compressed when it has
/// 10 000 to 2^31 bytes, a sample of it shrinks to ≤ 70 % and the whole
/// frame shrinks to ≤ 70 %. Returns the codec used (or `None`) and the bytes
/// to send (the frame itself, not a copy, when it is not compressed).
///
/// The sample is Dask's: 5 pieces of up to 10 000 bytes, each cut short
/// where the next one starts; but where Dask draws the 5 offsets at random,
/// framewire spaces them evenly: `i × (len − 10 000) / 4` for i = 0..=4.
/// So the decision depends on the bytes alone. Frames of at most 50 000
/// bytes are sampled whole (the pieces tile them), so only the whole frame
/// is compressed.
///
/// ```
/// # #[cfg(feature = "lz4")] {
/// use bytes::Bytes;
/// use framewire::serialize::{maybe_compress, Codec};
///
/// let zeros = Bytes::from(vec![0u8; 50_000]);
/// let (codec, packed) = maybe_compress(&zeros, Codec::Lz4);
/// assert_eq!((codec, packed.len()), (Some(Codec::Lz4), 210)); // as Dask writes it
///
/// let small = Bytes::from(vec![0u8; 9_999]);
/// assert_eq!(maybe_compress(&small, Codec::Lz4).0, None);
/// # }
/// ```
pub fn maybe_compress(frame: &Bytes, codec: Codec) -> (Option<Codec>, Bytes) {
    let len = frame.len();
    let skip = (None, frame.clone());
    if !(MIN_COMPRESS_SIZE..=MAX_COMPRESS_SIZE).contains(&len) {
        return skip;
    }
    if len > SAMPLES * SAMPLE_SIZE {
        let sample = byte_sample(frame);
        match codec.compress(&sample) {
            Some(c) if shrinks(c.len(), sample.len()) => {}
            _ => return skip,
        }
    }
    match codec.compress(frame) {
        Some(c) if shrinks(c.len(), len) => (Some(codec), c),
        _ => skip,
    }
}

/// Python's `len(compressed) <= min_ratio * len(original)` (int ≤ float).
fn shrinks(compressed: usize, original: usize) -> bool {
    compressed as f64 <= MIN_RATIO * original as f64
}

/// Dask's `byte_sample` with evenly spaced offsets instead of random ones.
fn byte_sample(frame: &[u8]) -> Vec<u8> {
    let max_start = frame.len() - SAMPLE_SIZE;
    let start = |i: usize| i * max_start / (SAMPLES - 1);
    let mut sample = Vec::with_capacity(SAMPLES * SAMPLE_SIZE);
    for i in 0..SAMPLES {
        let end = match i + 1 < SAMPLES {
            true => (start(i) + SAMPLE_SIZE).min(start(i + 1)),
            false => start(i) + SAMPLE_SIZE,
        };
        sample.extend_from_slice(&frame[start(i)..end]);
    }
    sample
}

/// Compresses, under [`maybe_compress`], every frame whose `compression`
/// entry is nil (Dask's `_inplace_compress_frames`) and records the codec
/// in its place. Entries already set (`false`, a codec) are kept. `None`
/// stands for a nil entry per frame, and stays `None` while nothing is
/// compressed.
pub(super) fn compress_frames(
    entries: &mut Option<Vec<Value>>,
    frames: &mut [Bytes],
    codec: Codec,
) {
    let n = frames.len();
    for (i, frame) in frames.iter_mut().enumerate() {
        if entries
            .as_ref()
            .is_some_and(|e| e.get(i) != Some(&Value::Nil))
        {
            continue;
        }
        if let (Some(c), packed) = maybe_compress(frame, codec) {
            entries.get_or_insert_with(|| vec![Value::Nil; n])[i] = Value::from_static(c.name());
            *frame = packed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "compresses megabytes: hours under Miri")]
    fn sample_pieces_are_evenly_spaced_and_cut_where_the_next_starts() {
        // 1 000 000 bytes: pieces at 0, 247 500, 495 000, 742 500, 990 000.
        let frame: Vec<u8> = (0..1_000_000u32).map(|i| (i / 2_500) as u8).collect();
        let sample = byte_sample(&frame);
        let mut want = Vec::new();
        for s in [0, 247_500, 495_000, 742_500, 990_000] {
            want.extend_from_slice(&frame[s..s + SAMPLE_SIZE]);
        }
        assert_eq!(sample, want);
        // Up to 5 × 10 000 bytes the pieces tile the frame exactly.
        for len in [10_000, 10_001, 33_333, 50_000] {
            let frame: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert_eq!(byte_sample(&frame), frame, "{len}");
        }
    }

    #[test]
    fn ratio_is_pythons_int_le_float() {
        // 0.7 * 10 is 7.000000000000001 in binary floating point: 7 passes.
        assert!(shrinks(7, 10));
        assert!(!shrinks(8, 10));
        assert!(shrinks(7_000, 10_000));
        assert!(!shrinks(7_001, 10_000));
    }

    #[test]
    #[cfg(any(feature = "zlib", feature = "zstd"))]
    fn growth_stops_one_byte_past_the_cap() {
        let mut out = Vec::new();
        let mut steps = 0;
        while grow(&mut out, 10, 100_000) {
            out.resize(out.capacity(), 0);
            steps += 1;
        }
        assert_eq!(out.len(), 100_001);
        assert!(steps <= 6, "{steps}");
    }

    #[test]
    fn a_codec_whose_feature_is_off_is_a_typed_error() {
        let limits = Limits::strict();
        for codec in Codec::ALL.into_iter().filter(|c| !c.is_enabled()) {
            let mut budget = DecompressBudget::new(&limits);
            let err = decompress(codec, b"\x05\x00\x00\x00hello", &mut budget);
            let want = CompressionError::CodecNotEnabled {
                codec,
                feature: codec.name(),
            };
            assert_eq!(err, Err(want.clone()));
            let shards = [
                (Some(codec), &Bytes::from_static(b"ab")),
                (None, &Bytes::new()),
            ];
            assert_eq!(decompress_shards(&shards, 0, &mut budget), Err(want.into()));
            assert_eq!(codec.compress(&[0; 20_000]), None);
            assert_eq!(budget.remaining(), limits.max_decompressed_len);
        }
    }

    #[test]
    fn header_entries() {
        assert_eq!(Codec::from_header_entry(&Value::Nil), Ok(None));
        assert_eq!(Codec::from_header_entry(&Value::Bool(false)), Ok(None));
        for c in Codec::ALL {
            assert_eq!(Codec::from_header_entry(&Value::str(c.name())), Ok(Some(c)));
        }
        let long = "x".repeat(100);
        assert_eq!(
            Codec::from_header_entry(&Value::str(&long)),
            Err(CompressionError::UnknownCodec {
                name: format!("{}…", &long[..64])
            })
        );
    }
}
