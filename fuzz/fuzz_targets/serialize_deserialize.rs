//! Layer 3 decode: an arbitrary msgpack header (collection headers,
//! `frame-lengths` offset tables, split tables, array headers) with arbitrary
//! frames → `deserialize`. Oracle: a typed result, never a panic; without
//! compression no value holds more bytes than the frames did, with it none
//! holds more than `max_frame_len` (decompression is bounded); the block's
//! header read in place (sent through a message) gives the same result as
//! its map.
#![no_main]
use bytes::Bytes;
use framewire::message::loads;
use framewire::serialize::{deserialize, DeserializeOptions};
use framewire::{Block, Header, Limits, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Vec<u8>, Vec<Vec<u8>>)| {
    let (header, frames) = input;
    let limits = Limits::strict();
    // Decode the header bytes as msgpack through the message layer.
    let Ok(map) = loads(&[Bytes::from(header)], &limits) else {
        return;
    };
    if map.as_map().is_none() {
        return;
    }
    let frames: Vec<Bytes> = frames.into_iter().take(64).map(Bytes::from).collect();
    let total: usize = frames.iter().map(Bytes::len).sum();
    let block = Block::new(Header::new(map), frames);
    let opts = DeserializeOptions::with_limits(limits.clone());
    let result = deserialize(&block, &opts);
    // The same block through a message: its header is then read in place
    // (as from the wire), and must give the same value or error. (A
    // top-level opaque block comes back as itself, `num-sub-frames` added.)
    if !matches!(result, Ok(Value::Serialized(_))) {
        if let Ok(wire) = framewire::dumps(&Value::Serialized(Box::new(block.clone()))) {
            if let Ok(Value::Serialized(sent)) = loads(&wire, &Limits::dask_compat()) {
                assert_eq!(deserialize(&sent, &opts), result, "off the wire");
            }
        }
    }
    if let Ok(v) = result {
        fn max_bin(v: &Value) -> usize {
            match v {
                Value::Bin(b) => b.len(),
                Value::Array(a) => a.iter().map(max_bin).max().unwrap_or(0),
                Value::Map(m) => m
                    .iter()
                    .map(|(k, x)| max_bin(k).max(max_bin(x)))
                    .max()
                    .unwrap_or(0),
                _ => 0,
            }
        }
        let compressed = block.header().map().get("compression").is_some();
        let bound = if compressed {
            limits.max_frame_len as usize
        } else {
            total
        };
        assert!(max_bin(&v) <= bound, "deserialize invented bytes");
    }
});
