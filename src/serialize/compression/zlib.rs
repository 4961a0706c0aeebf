//! `"zlib"`: a zlib stream (2-byte header, deflate, Adler-32) at level 6,
//! as Python's `zlib.compress` writes it. It declares no size: decoding
//! streams into a buffer that is refused past its cap.

use super::CompressionError;
use super::{grow, Codec};

/// zlib's `zlib.compress` default level.
const LEVEL: u32 = 6;

pub(super) fn compress(data: &[u8]) -> Option<Vec<u8>> {
    let mut z = flate2::Compress::new(flate2::Compression::new(LEVEL), true);
    // A bound on deflate's worst case: stored blocks of 64 KiB with 5 bytes
    // each, plus the zlib header and checksum.
    let mut out = Vec::with_capacity(data.len() + data.len() / 16_000 * 5 + 64);
    loop {
        let consumed = usize::try_from(z.total_in()).ok()?;
        match z.compress_vec(&data[consumed..], &mut out, flate2::FlushCompress::Finish) {
            Ok(flate2::Status::StreamEnd) => return Some(out),
            Ok(_) => out.reserve(out.capacity().max(64)),
            Err(_) => return None,
        }
    }
}

/// Streams `frame` through `out`, refused (`too_large`) past `cap` bytes.
pub(super) fn inflate(
    frame: &[u8],
    cap: usize,
    too_large: CompressionError,
) -> Result<Vec<u8>, CompressionError> {
    let corrupt = CompressionError::Corrupt { codec: Codec::Zlib };
    let mut z = flate2::Decompress::new(true);
    let mut out = Vec::new();
    let out = &mut out;
    loop {
        if !grow(out, frame.len(), cap) {
            return Err(too_large);
        }
        let consumed = usize::try_from(z.total_in()).map_err(|_| corrupt.clone())?;
        let before = (consumed, out.len());
        let status = z
            .decompress_vec(&frame[consumed..], out, flate2::FlushDecompress::None)
            .map_err(|_| corrupt.clone())?;
        if out.len() > cap {
            return Err(too_large);
        }
        let consumed = usize::try_from(z.total_in()).map_err(|_| corrupt.clone())?;
        match status {
            flate2::Status::StreamEnd if consumed == frame.len() => return Ok(std::mem::take(out)),
            // Bytes after the stream's end.
            flate2::Status::StreamEnd => return Err(corrupt),
            // No progress with room left: the stream is cut short.
            _ if (consumed, out.len()) == before && out.len() < out.capacity() => {
                return Err(corrupt)
            }
            _ => {}
        }
    }
}
