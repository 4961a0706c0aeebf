//! Layer 3 decode: an arbitrary msgpack header (collection headers,
//! `frame-lengths` offset tables, split tables, array headers) with arbitrary
//! frames → `deserialize`. Oracle: a typed result, never a panic; never more
//! bytes out than in: the payload bytes of the value (every bin, str,
//! ndarray buffer and opaque block's frames), plus [`PER_VALUE`] byte for
//! each value in it, are at most the header's bytes plus the frames' (plus
//! `max_decompressed_len` when the header declares compression, the one
//! budget bytes received do not bound); the block's header read in place
//! (sent through a message) gives the same result as its map.
#![no_main]
use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::{deserialize, DeserializeOptions};
use framewire::{Block, Header, Limits, Value};
use libfuzzer_sys::fuzz_target;

/// What each value of the result costs on top of its payload bytes: every
/// value (a container, a scalar, an element of a packed array) was
/// read from at least one byte of a header or a frame.
const PER_VALUE: usize = 1;

/// (payload bytes, values) of `v`, its own and everything inside it.
fn bytes_out(v: &Value) -> (usize, usize) {
    let block = |b: &Block| (b.frames().iter().map(Bytes::len).sum(), 1);
    let sum = |parts: &mut dyn Iterator<Item = (usize, usize)>| {
        parts.fold((0, 1), |(p, n), (q, m)| (p + q, n + m))
    };
    match v {
        Value::Str(s) => (s.len(), 1),
        Value::Bin(b) => (b.len(), 1),
        Value::NdArray(a) => (a.data().len(), 1),
        Value::IntArray(ints) => (0, ints.len().max(1)),
        Value::BinArray(bins) => (bins.total_len(), bins.len().max(1)),
        Value::Serialized(b) | Value::Pickled(b) => block(b),
        Value::ToSerialize(inner) => sum(&mut std::iter::once(bytes_out(inner))),
        Value::Array(items) => sum(&mut items.iter().map(bytes_out)),
        Value::Map(entries) => sum(&mut entries.iter().map(|(k, x)| {
            let (a, b) = (bytes_out(k), bytes_out(x));
            (a.0 + b.0, a.1 + b.1)
        })),
        _ => (0, 1),
    }
}

fuzz_target!(|input: (Vec<u8>, Vec<Vec<u8>>)| {
    let (header, frames) = input;
    let header_len = header.len();
    let limits = Limits::strict();
    // Decode the header bytes as msgpack through the message layer.
    let Ok(map) = decode(&[Bytes::from(header)], &limits) else {
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
            if let Ok(Value::Serialized(sent)) = decode(&wire, &Limits::dask_compat()) {
                assert_eq!(deserialize(&sent, &opts), result, "off the wire");
            }
        }
    }
    if let Ok(v) = result {
        let compressed = block.header().map().get("compression").is_some();
        let budget = if compressed {
            limits.max_decompressed_len as usize
        } else {
            0
        };
        let (payload, values) = bytes_out(&v);
        let out = payload + PER_VALUE * values;
        assert!(
            out <= header_len + total + budget,
            "deserialize invented bytes: {payload} payload bytes and {values} values \
             out of a {header_len}-byte header and {total} bytes of frames"
        );
    }
});
