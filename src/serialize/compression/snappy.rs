//! `"snappy"`: a raw snappy block (a varint uncompressed size, then
//! elements), not snappy's framed format.

use super::CompressionError;
use super::{size_mismatch, Codec};

pub(super) fn compress(data: &[u8]) -> Option<Vec<u8>> {
    snap::raw::Encoder::new().compress_vec(data).ok()
}

/// The varint size at the start: little-endian base 128, at most 2^32 − 1.
pub(super) fn declared_size(frame: &[u8]) -> Result<u64, CompressionError> {
    let mut n = 0u64;
    for (i, &b) in frame.iter().take(5).enumerate() {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(CompressionError::Corrupt {
        codec: Codec::Snappy,
    })
}

/// Decodes the block into `dst` (the declared size).
pub(super) fn decode_exact(frame: &[u8], dst: &mut [u8]) -> Result<usize, CompressionError> {
    use snap::Error as E;
    let declared = dst.len() as u64;
    let mismatch = |actual| size_mismatch(Codec::Snappy, declared, actual);
    match snap::raw::Decoder::new().decompress(frame, dst) {
        Ok(n) => Ok(n),
        Err(E::HeaderMismatch { got_len, .. }) => Err(mismatch(Some(got_len))),
        Err(E::CopyWrite { .. }) => Err(mismatch(None)),
        Err(E::Literal {
            len,
            src_len,
            dst_len,
        }) if len <= src_len && len > dst_len => Err(mismatch(None)),
        Err(_) => Err(CompressionError::Corrupt {
            codec: Codec::Snappy,
        }),
    }
}
