//! Layer 2: arbitrary frame lists → `loads_detailed` (placeholder offsets,
//! ranges, orphans, aliasing). Oracle: every frame is claimed at most once,
//! blocks are in range, and a pass-through re-encoding decodes to the same
//! value with the same payload frames.
#![no_main]
use bytes::Bytes;
use framewire::message::decode;
use framewire::message::decode_detailed;
use framewire::{message, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Vec<u8>, Vec<Vec<u8>>)| {
    let (frame0, rest) = input;
    let mut frames = vec![Bytes::from(frame0)];
    frames.extend(rest.into_iter().take(64).map(Bytes::from));
    let limits = Limits::strict();
    let Ok(loaded) = decode_detailed(&frames, &limits) else {
        return;
    };
    let mut claimed = vec![false; frames.len()];
    claimed[0] = true;
    for b in &loaded.blocks {
        for i in b.offset..=b.offset + b.num_sub_frames {
            assert!(!claimed[i], "frame {i} claimed twice");
            claimed[i] = true;
        }
    }
    for &o in &loaded.orphans {
        assert!(!claimed[o]);
    }
    let again = message::encode(&loaded.value).expect("a decoded value encodes");
    assert_eq!(decode(&again, &limits).expect("re-encoding decodes"), loaded.value);
});
