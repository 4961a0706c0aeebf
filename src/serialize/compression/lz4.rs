//! `"lz4"`: a 4-byte little-endian uncompressed size, then a raw LZ4 block
//! (`lz4.block.compress`). Decoded by `lz4_flex` (safe Rust), encoded by
//! [`lz4_block`](super::lz4_block), which writes Python's bytes exactly.

use super::CompressionError;
use super::{lz4_block, size_mismatch, Codec};

/// The largest input liblz4 (and so Python's `lz4.block`) accepts.
const MAX_INPUT: usize = 0x7E00_0000;

pub(super) fn compress(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() > MAX_INPUT {
        return None;
    }
    // liblz4's LZ4_compressBound, after the size prefix.
    let mut out = Vec::with_capacity(4 + data.len() + data.len() / 255 + 16);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    lz4_block::compress_into(data, &mut out);
    Some(out)
}

/// The size prefix.
pub(super) fn declared_size(frame: &[u8]) -> Result<u64, CompressionError> {
    let prefix: [u8; 4] = frame
        .get(..4)
        .and_then(|p| p.try_into().ok())
        .ok_or(CompressionError::Corrupt { codec: Codec::Lz4 })?;
    Ok(u32::from_le_bytes(prefix).into())
}

/// Decodes the block after the prefix into `dst` (the declared size).
pub(super) fn decode_exact(frame: &[u8], dst: &mut [u8]) -> Result<usize, CompressionError> {
    use lz4_flex::block::DecompressError as E;
    match lz4_flex::block::decompress_into(&frame[4..], dst) {
        Ok(n) => Ok(n),
        Err(E::OutputTooSmall { .. }) => Err(size_mismatch(Codec::Lz4, dst.len() as u64, None)),
        Err(_) => Err(CompressionError::Corrupt { codec: Codec::Lz4 }),
    }
}
