//! Frame 0 msgpack: any bytes as the only frame of a message, decoded on a
//! small stack (depth is an error, never a stack overflow). Oracle:
//! decode → encode → decode is stable.
//!
//! Decoding is iterative, but dropping, comparing and re-encoding a `Value`
//! recurse once per level, so their stack use is bounded by `max_depth`
//! (SPEC.md §7): `strict()` (64) runs on 128 KiB; `dask_compat()` (1024)
//! gets 1 MiB, because AddressSanitizer inflates every frame (the first
//! 20-minute ASan run overflowed 128 KiB dropping a 1000-deep array;
//! `tests/hostile.rs` h3 checks 1024 levels on 512 KiB in debug builds).
#![no_main]
use bytes::Bytes;
use framewire::message::decode;
use framewire::{message, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (limits, stack) in [
        (Limits::strict(), 128 << 10),
        (Limits::dask_compat(), 1 << 20),
    ] {
        let frames = vec![Bytes::copy_from_slice(data)];
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || {
                let Ok(value) = decode(&frames, &limits) else {
                    return;
                };
                // Placeholders need more frames; a lone frame 0 has none.
                let again = message::encode(&value).expect("a decoded value encodes");
                let back = decode(&again, &limits).expect("our encoding decodes");
                assert_eq!(back, value);
                assert_eq!(
                    message::encode(&back).unwrap(),
                    again,
                    "encoding is canonical"
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }
});
