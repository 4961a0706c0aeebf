//! Decompression of one frame: an arbitrary codec × bytes × limit →
//! `serialize::decompress`. Oracle: a typed result, never a panic; the
//! output is at most the frame limit, exactly what the budget was charged,
//! and never more than the size the frame declares (the lz4 prefix, the
//! snappy varint: exactly it). Then the round trip: the bytes compressed
//! by every codec, whole and under `maybe_compress`, decompress to themselves.
#![no_main]
use bytes::Bytes;
use framewire::serialize::{decompress, maybe_compress, Codec, DecompressBudget};
use framewire::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, u32, Vec<u8>)| {
    let (which, limit, data) = input;
    let codec = Codec::ALL[usize::from(which) % Codec::ALL.len()];
    // At most 8 MiB per frame and 16 MiB per message: under the smoke run's
    // 256 MiB malloc limit whatever the bytes declare.
    let mut limits = Limits::strict();
    limits.max_frame_len = u64::from(limit % (8 << 20));
    limits.max_decompressed_len = 16 << 20;
    let mut budget = DecompressBudget::new(&limits);
    if let Ok(out) = decompress(codec, &data, &mut budget) {
        let n = out.len() as u64;
        assert!(
            n <= limits.max_frame_len,
            "{codec}: {n} bytes past the frame limit"
        );
        assert_eq!(
            budget.remaining(),
            limits.max_decompressed_len - n,
            "{codec}: budget"
        );
        let declared = match codec {
            Codec::Lz4 => Some(u64::from(u32::from_le_bytes(data[..4].try_into().unwrap()))),
            Codec::Snappy => {
                let mut v = 0u64;
                for (i, b) in data.iter().take(5).enumerate() {
                    v |= u64::from(b & 0x7f) << (7 * i);
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                Some(v)
            }
            _ => None,
        };
        if let Some(d) = declared {
            assert_eq!(n, d, "{codec}: output is not the declared size");
        }
    }

    // Round trip of the input itself.
    let mut budget = DecompressBudget::new(&Limits::dask_compat());
    for codec in Codec::ALL {
        let packed = codec.compress(&data).expect("small inputs always compress");
        let back = decompress(codec, &packed, &mut budget).expect("own output decodes");
        assert_eq!(back, data, "{codec}: round trip");
    }
    let frame = Bytes::from(data);
    let (used, bytes) = maybe_compress(&frame, codec);
    match used {
        None => assert_eq!(
            bytes.as_ptr(),
            frame.as_ptr(),
            "not compressed means the frame itself"
        ),
        Some(c) => {
            assert!(frame.len() >= 10_000 && bytes.len() as f64 <= 0.7 * frame.len() as f64);
            assert_eq!(decompress(c, &bytes, &mut budget).unwrap(), frame);
        }
    }
});
