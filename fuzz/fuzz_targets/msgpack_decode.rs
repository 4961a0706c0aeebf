//! Frame 0 msgpack: any bytes as the only frame of a message, decoded on a
//! thread with a 128 KiB stack (depth is an error, never a stack overflow).
//! Oracle: decode → encode → decode is stable.
#![no_main]
use bytes::Bytes;
use framewire::{loads, message, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let frame = Bytes::copy_from_slice(data);
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            for limits in [Limits::strict(), Limits::dask_compat()] {
                let frames = vec![frame.clone()];
                let Ok(value) = loads(&frames, &limits) else {
                    continue;
                };
                // Placeholders need more frames; a lone frame 0 has none.
                let again = message::dumps(&value).expect("a decoded value encodes");
                let back = loads(&again, &limits).expect("our encoding decodes");
                assert_eq!(back, value);
                assert_eq!(message::dumps(&back).unwrap(), again, "encoding is canonical");
            }
        })
        .unwrap()
        .join()
        .unwrap();
});
