//! Layer 1: any bytes → `Envelope::decode`. Oracle: consumed ≤ given; the
//! frames tile the consumed bytes exactly, in order, as slices of the input;
//! re-encoding with the same first read gives the consumed bytes back.
#![no_main]
use bytes::Bytes;
use framewire::{Envelope, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let Ok((env, used)) = Envelope::decode(&input, &Limits::strict()) else {
        return;
    };
    assert!(used <= input.len());
    let mut at = input.as_ptr() as usize + 16 + 8 * env.frames().len();
    for f in env.frames() {
        if !f.is_empty() {
            assert_eq!(f.as_ptr() as usize, at, "frames must tile the input");
        }
        at += f.len();
    }
    assert_eq!(at, input.as_ptr() as usize + used);
    assert_eq!(env.to_bytes(), input.slice(..used));
});
