//! `"zstd"`: one zstd frame at level 3 (`distributed.comm.zstd.level`),
//! with its content size (Python refuses frames without one; framewire
//! decodes them too, streamed under a cap).

use zstd::zstd_safe::{self, zstd_sys::ZSTD_ErrorCode, DCtx, DParameter, InBuffer, OutBuffer};

use super::CompressionError;
use super::{grow, size_mismatch, Codec};

/// Dask's zstd level (`distributed.comm.zstd.level`).
const LEVEL: i32 = 3;
/// zstd's default window limit (Python zstandard's too): 128 MiB.
const WINDOW_LOG_MAX: u32 = 27;
/// The smallest window zstd knows.
const WINDOW_LOG_MIN: u32 = 10;

const CORRUPT: CompressionError = CompressionError::Corrupt { codec: Codec::Zstd };

pub(super) fn compress(data: &[u8]) -> Option<Vec<u8>> {
    zstd::bulk::compress(data, LEVEL).ok()
}

/// The frame's content size, if it has one. The frame must be exactly one
/// zstd frame: no second frame, no trailing bytes.
pub(super) fn declared_size(frame: &[u8]) -> Result<Option<u64>, CompressionError> {
    if zstd_safe::find_frame_compressed_size(frame) != Ok(frame.len()) {
        return Err(CORRUPT);
    }
    zstd_safe::get_frame_content_size(frame).map_err(|_| CORRUPT)
}

/// Decodes the frame in one shot into `dst` (its content size): zstd
/// allocates no window for it.
pub(super) fn decode_exact(frame: &[u8], dst: &mut [u8]) -> Result<usize, CompressionError> {
    let mut dctx = DCtx::try_create().ok_or(CORRUPT)?;
    match dctx.decompress(dst, frame) {
        Ok(n) => Ok(n),
        Err(code)
            if zstd_safe::is_error_kind(code, ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall) =>
        {
            Err(size_mismatch(Codec::Zstd, dst.len() as u64, None))
        }
        Err(_) => Err(CORRUPT),
    }
}

/// A frame without a content size: streamed through `out`, refused past
/// `cap` bytes, the window bounded by `cap` (and zstd's default 128 MiB)
/// before zstd allocates it.
pub(super) fn decode_stream(
    frame: &[u8],
    cap: usize,
    too_large: CompressionError,
) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    let out = &mut out;
    // `declared_size` checked that `frame` is exactly one frame.
    let window_log = (usize::BITS - 1)
        .saturating_sub(cap.max(1).leading_zeros())
        .clamp(WINDOW_LOG_MIN, WINDOW_LOG_MAX);
    let mut dctx = DCtx::try_create().ok_or(CORRUPT)?;
    dctx.set_parameter(DParameter::WindowLogMax(window_log))
        .map_err(|_| CORRUPT)?;
    let mut input = InBuffer::around(frame);
    loop {
        if !grow(out, frame.len(), cap) {
            return Err(too_large);
        }
        let before = (input.pos(), out.len());
        let mut output = OutBuffer::around_pos(out, out.len());
        let result = dctx.decompress_stream(&mut output, &mut input);
        match result {
            Err(code)
                if zstd_safe::is_error_kind(
                    code,
                    ZSTD_ErrorCode::ZSTD_error_frameParameter_windowTooLarge,
                ) =>
            {
                return Err(CompressionError::WindowTooLarge {
                    codec: Codec::Zstd,
                    limit: 1 << window_log,
                })
            }
            Err(_) => return Err(CORRUPT),
            _ if out.len() > cap => return Err(too_large),
            // The frame is complete (and `frame` is exactly one frame).
            Ok(0) => return Ok(std::mem::take(out)),
            Ok(_) if (input.pos(), out.len()) == before && out.len() < out.capacity() => {
                return Err(CORRUPT)
            }
            Ok(_) => {}
        }
    }
}
