//! Compression in the serialize layer (SPEC.md §5.12), against the Dask
//! captures that carry compressed frames and against hostile input
//! (hostile-inputs.md §3.3, C1–C9):
//!
//! * golden: the four compression captures decode to what Python's `loads`
//!   returned; framewire's lz4 and zstd encoders rebuild Dask's messages byte
//!   for byte; `framewire inspect --deserialize` decompresses them;
//! * round trips for every codec × shard size, and the deterministic policy
//!   (sizes, the evenly spaced sample, pass-through blocks never compressed);
//! * C1–C9, each asserting the exact error and a bounded peak allocation
//!   (the counting allocator of `tests/common`; zstd allocates through it
//!   too, with the crate's `with-rust-allocator` feature).

mod common;

use std::path::Path;

use bytes::Bytes;
use common::{bounded, measure, SMALL};
use framewire::dumps_with;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{
    decompress, deserialize, deserialize_with_budget, maybe_compress, Codec, DecompressBudget,
    DeserializeOptions, SerializeOptions,
};
use framewire::{Block, Envelope, Header, Limits, NdArray, Value};
use framewire::{CompressionError, DeserializeError};
use serde_json::Value as J;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn captures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/captures"))
}

struct Case {
    json: J,
    wire: Bytes,
    frames: Vec<Bytes>,
}

fn case(name: &str) -> Case {
    let dir = captures().join(name);
    let json: J =
        serde_json::from_str(&std::fs::read_to_string(dir.join("case.json")).unwrap()).unwrap();
    let wire = Bytes::from(std::fs::read(dir.join("wire.bin")).unwrap());
    let (env, used) = Envelope::decode(&wire, &Limits::dask_compat()).unwrap();
    assert_eq!(used, wire.len());
    Case {
        json,
        frames: env.frames().to_vec(),
        wire,
    }
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn compat() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::dask_compat())
}

fn strict() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::strict())
}

/// Strict limits with this frame limit and per-message decompression budget.
fn limits(frame: u64, budget: u64) -> Limits {
    let mut l = Limits::strict();
    l.max_frame_len = frame;
    l.max_decompressed_len = budget;
    l
}

/// `{"$bytes": hex}` or `{"$bytes": null, "len", "sha256"}`.
fn blob_is(b: &[u8], j: &J) -> bool {
    match &j["$bytes"] {
        J::String(h) => *h == hex::encode(b),
        J::Null => j["len"].as_u64() == Some(b.len() as u64) && j["sha256"] == sha(b).as_str(),
        _ => false,
    }
}

/// A decoded value against gen_captures.py's tagged JSON (the parts these
/// captures use: maps with str keys, bytes, 1-d arrays).
fn same_as_python(v: &Value, j: &J) -> bool {
    match v {
        Value::Bin(b) => blob_is(b, j),
        Value::NdArray(a) => {
            let e = &j["$ndarray"];
            let c = a.to_c_order();
            let data_ok = match (&e["data_hex"], &e["data_sha256"]) {
                (J::String(h), _) => *h == hex::encode(&c),
                (_, J::String(s)) => *s == sha(&c) && e["nbytes"] == c.len(),
                _ => false,
            };
            e["dtype"] == a.dtype()
                && e["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .eq(a.logical_shape().iter().copied())
                && data_ok
        }
        Value::Map(m) => {
            let Some(o) = j.as_object() else { return false };
            o.len() == m.len()
                && m.iter()
                    .zip(o)
                    .all(|((k, x), (jk, jx))| k.as_str() == Some(jk) && same_as_python(x, jx))
        }
        Value::Str(s) => j.as_str() == Some(s),
        _ => false,
    }
}

const BYTES_TYPE: &[u8] =
    b"\x80\x05\x95\x16\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x05bytes\x94\x93\x94.";

/// A Dask `bytes` block with these frames and header entries.
fn bytes_block(frames: Vec<Bytes>, extra: Vec<(&str, Value)>) -> Block {
    let mut h = vec![
        ("sub-header", Value::Map(vec![])),
        ("type", Value::str("bytes")),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(BYTES_TYPE)),
        ),
        ("serializer", Value::str("dask")),
    ];
    h.extend(extra);
    Block::new(Header::new(Value::map_of(h)), frames)
}

fn names(c: &[Option<Codec>]) -> Value {
    Value::Array(
        c.iter()
            .map(|c| c.map_or(Value::Nil, |c| Value::str(c.name())))
            .collect(),
    )
}

/// What zstd's decompression context costs (about 100 KiB, allocated
/// through the Rust allocator with the `with-rust-allocator` feature).
const ZSTD_CTX: usize = 256 << 10;

/// One compressed frame as a block, deserialized under `opts`.
fn decode_one(
    codec: Codec,
    frame: Vec<u8>,
    opts: &DeserializeOptions,
) -> Result<Value, DeserializeError> {
    let block = bytes_block(
        vec![Bytes::from(frame)],
        vec![("compression", names(&[Some(codec)]))],
    );
    deserialize(&block, opts)
}

// ---------------------------------------------------------------------------
// Golden: the Dask captures
// ---------------------------------------------------------------------------

const SERIALIZED_CASES: [&str; 3] = [
    "lz4_compression",
    "lz4_compression_sharded",
    "zstd_compression",
];

#[test]
fn golden_compressed_captures_deserialize_like_dask() {
    for name in SERIALIZED_CASES {
        let c = case(name);
        let passthrough = decode(&c.frames, &Limits::dask_compat()).unwrap();
        let mut opts = compat();
        opts.backing = vec![c.wire.clone()];
        let value = deserialize_blocks(passthrough, &opts).unwrap();
        assert!(
            same_as_python(&value, &c.json["value"]),
            "{name}: {value:?}"
        );
    }
    // The compression lists are Dask's: per shard, the tail raw.
    let c = case("lz4_compression_sharded");
    let Value::Map(m) = decode(&c.frames, &Limits::dask_compat()).unwrap() else {
        panic!()
    };
    let Value::Serialized(b) = &m[0].1 else {
        panic!()
    };
    assert_eq!(
        b.header().get("compression"),
        Some(&names(&[Some(Codec::Lz4), Some(Codec::Lz4), None]))
    );
    assert_eq!(
        b.frames().iter().map(Bytes::len).collect::<Vec<_>>(),
        [61, 61, 6000]
    );
}

#[test]
fn golden_topickle_lz4_stays_opaque_and_its_buffer_decompresses() {
    // framewire never unpickles: a Pickled block stays as it came, its
    // out-of-band buffer still lz4-compressed, byte for byte.
    let c = case("topickle_lz4");
    let value = deserialize_blocks(
        decode(&c.frames, &Limits::dask_compat()).unwrap(),
        &compat(),
    )
    .unwrap();
    let Some(Value::Pickled(b)) = value.get("arr") else {
        panic!("{value:?}")
    };
    assert_eq!(b.header().raw().unwrap().as_ptr(), c.frames[1].as_ptr());
    assert_eq!(b.frames()[0].as_ptr(), c.frames[2].as_ptr());
    assert_eq!(
        b.header().get("compression"),
        Some(&names(&[Some(Codec::Lz4)]))
    );
    // The buffer decompresses (by hand) to the array's memory Python rebuilt.
    let mut budget = DecompressBudget::new(&Limits::strict());
    let data = decompress(Codec::Lz4, &b.frames()[0], &mut budget).unwrap();
    let exp = &c.json["value"]["arr"]["$ndarray"];
    assert_eq!(data.len() as u64, exp["nbytes"].as_u64().unwrap());
    assert_eq!(sha(&data), exp["data_sha256"].as_str().unwrap());
    assert_eq!(
        budget.remaining(),
        Limits::strict().max_decompressed_len - 20_000
    );
}

/// Replaces every `Serialized` block of a pass-through message by
/// `Serialize(its value)`.
fn reserializable(v: &Value, opts: &DeserializeOptions) -> Value {
    match v {
        Value::Serialized(b) => Value::ToSerialize(Box::new(deserialize(b, opts).unwrap())),
        Value::Map(m) => Value::Map(
            m.iter()
                .map(|(k, x)| (k.clone(), reserializable(x, opts)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn golden_lz4_and_zstd_encoding_rebuilds_dasks_messages_byte_for_byte() {
    for name in SERIALIZED_CASES {
        let c = case(name);
        let codec = Codec::from_name(
            c.json["dumps_call"]["context"]["compression"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let mut opts = SerializeOptions::default();
        opts.compression = Some(codec);
        opts.shard_size = c.json["dumps_call"]["frame_split_size"].as_u64().unwrap() as usize;
        let msg = reserializable(
            &decode(&c.frames, &Limits::dask_compat()).unwrap(),
            &compat(),
        );
        let frames = dumps_with(&msg, &opts).unwrap();
        assert_eq!(frames.len(), c.frames.len(), "{name}");
        for (i, (ours, theirs)) in frames.iter().zip(&c.frames).enumerate() {
            assert_eq!(ours, theirs, "{name}: frame {i}");
        }
        assert_eq!(Envelope::new(frames).unwrap().to_bytes(), c.wire, "{name}");
    }
    // 50 000 zero bytes -> 210 bytes, as Python writes them (SPEC.md §5.12).
    let frame = std::fs::read(captures().join("lz4_compression/frame_002.bin")).unwrap();
    let (codec, packed) = maybe_compress(&Bytes::from(vec![0u8; 50_000]), Codec::Lz4);
    assert_eq!((codec, &packed[..]), (Some(Codec::Lz4), &frame[..]));
    assert_eq!(&packed[..8], b"\x50\xc3\x00\x00\x1f\x00\x01\x00");
}

#[test]
fn golden_topickle_lz4_passes_through_unchanged_with_compression_on() {
    let c = case("topickle_lz4");
    let msg = decode(&c.frames, &Limits::dask_compat()).unwrap();
    let mut opts = SerializeOptions::default();
    opts.compression = Some(Codec::Lz4);
    let frames = dumps_with(&msg, &opts).unwrap();
    assert_eq!(frames, c.frames);
    assert_eq!(frames[2].as_ptr(), c.frames[2].as_ptr(), "the same memory");
}

// ---------------------------------------------------------------------------
// Round trips and the policy
// ---------------------------------------------------------------------------

fn f8_array(n: u32) -> Value {
    let data: Vec<u8> = (0..n).flat_map(|i| f64::from(i).to_le_bytes()).collect();
    Value::NdArray(Box::new(
        NdArray::from_c_order("<f8", &[u64::from(n)], Bytes::from(data)).unwrap(),
    ))
}

fn noise(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(747_796_405).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn round_trip_every_codec_and_shard_size() {
    let payloads: Vec<(&str, Value)> = vec![
        ("zeros", Value::Bin(Bytes::from(vec![0u8; 100_000]))),
        ("text", Value::Bin(Bytes::from(b"abcd".repeat(25_000)))),
        ("f8", f8_array(20_000)),
        ("noise", Value::Bin(Bytes::from(noise(30_000, 1)))),
        ("small", Value::Bin(Bytes::from_static(b"tiny"))),
        (
            "collection",
            Value::Array(vec![
                f8_array(5_000),
                Value::Bin(Bytes::from(vec![7u8; 20_000])),
                Value::str("s"),
                Value::from(1u8),
            ]),
        ),
    ];
    let mut compressed = 0;
    for codec in Codec::ALL {
        for shard_size in [1_000, 4_096, 12_000, 1 << 20, 64 << 20] {
            for (name, v) in &payloads {
                let at = format!("{codec} shard {shard_size} {name}");
                let mut opts = SerializeOptions::default();
                opts.compression = Some(codec);
                opts.shard_size = shard_size;
                let msg = Value::map_of([("v", Value::ToSerialize(Box::new(v.clone())))]);
                let wire = Envelope::new(dumps_with(&msg, &opts).unwrap())
                    .unwrap()
                    .to_bytes();
                let (env, _) = Envelope::decode(&wire, &Limits::strict()).unwrap();
                let passthrough = decode(env.frames(), &Limits::strict()).unwrap();
                // What was compressed: only frames (shards) of 10 000 bytes or
                // more, each on its own, and only when it paid.
                let Some(Value::Serialized(b)) = passthrough.get("v") else {
                    panic!("{at}")
                };
                let entries = b.header().get("compression").unwrap().as_array().unwrap();
                for (e, f) in entries.iter().zip(b.frames()) {
                    if let Some(n) = e.as_str() {
                        assert_eq!(n, codec.name(), "{at}");
                        assert!(
                            shard_size >= 10_000,
                            "{at}: a shard under 10 000 bytes compressed"
                        );
                        assert!(f.len() < shard_size.min(200_000) * 7 / 10, "{at}");
                        compressed += 1;
                    }
                }
                if *name == "zeros" && shard_size >= 12_000 {
                    assert!(entries.iter().any(|e| e.as_str().is_some()), "{at}");
                }
                if *name == "noise" || *name == "small" {
                    assert!(entries.iter().all(|e| *e == Value::Nil), "{at}");
                }
                let back = deserialize_blocks(passthrough, &strict()).unwrap();
                assert_eq!(back.get("v"), Some(v), "{at}");
            }
        }
    }
    assert!(compressed > 50, "{compressed}");
}

#[test]
fn every_codec_round_trips_every_size_boundary() {
    let text = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(2_000);
    let mut budget = DecompressBudget::new(&Limits::dask_compat());
    for codec in Codec::ALL {
        for n in [
            0, 1, 5, 12, 13, 14, 100, 65_535, 65_546, 65_547, 65_548, 100_000,
        ] {
            for data in [vec![0u8; n], text[..n].to_vec(), noise(n, n as u32)] {
                let packed = codec.compress(&data).unwrap();
                let back = decompress(codec, &packed, &mut budget)
                    .unwrap_or_else(|e| panic!("{codec} {n}: {e}"));
                assert_eq!(back, data, "{codec} {n}");
            }
        }
    }
}

#[test]
fn decompressed_frames_are_exactly_sized_buffers() {
    // 16 MiB out of lz4, snappy and zstd: one allocation of the declared
    // size (zstd's context comes on top), nothing kept beyond the frame.
    let data = b"0123456789abcdef".repeat(1 << 20);
    for (codec, overhead) in [
        (Codec::Lz4, 0),
        (Codec::Snappy, 0),
        (Codec::Zstd, 256 << 10),
    ] {
        let packed = codec.compress(&data).unwrap();
        let mut budget = DecompressBudget::new(&Limits::strict());
        let (out, stats) = measure(|| decompress(codec, &packed, &mut budget).unwrap());
        assert_eq!(out, data);
        assert!(
            stats.peak <= data.len() + overhead + 4096,
            "{codec}: {stats:?}"
        );
        assert!(stats.retained <= data.len() + 4096, "{codec}: {stats:?}");
    }
}

#[test]
fn policy_sizes_and_ratio() {
    let z = |n| Bytes::from(vec![0u8; n]);
    for codec in Codec::ALL {
        // Under 10 000 bytes: the frame itself, not a copy.
        let small = z(9_999);
        let (c, out) = maybe_compress(&small, codec);
        assert_eq!((c, out.as_ptr()), (None, small.as_ptr()), "{codec}");
        assert_eq!(maybe_compress(&z(10_000), codec).0, Some(codec), "{codec}");
        // Incompressible: unchanged.
        let n = Bytes::from(noise(200_000, 3));
        let (c, out) = maybe_compress(&n, codec);
        assert_eq!((c, out.as_ptr()), (None, n.as_ptr()), "{codec}");
    }
    // Over 2^31 bytes: never compressed (the zeroed pages are never touched).
    let huge = z((1 << 31) + 1);
    assert_eq!(maybe_compress(&huge, Codec::Lz4).0, None);
}

#[test]
fn policy_samples_five_evenly_spaced_pieces() {
    // 1 000 000 bytes: the pieces start at i * 990 000 / 4 = 0, 247 500,
    // 495 000, 742 500 and 990 000, 10 000 bytes each.
    let len = 1_000_000;
    let starts = [0, 247_500, 495_000, 742_500, 990_000];
    let mut compressible_sample = noise(len, 9);
    for s in starts {
        compressible_sample[s..s + 10_000].fill(0);
    }
    let mut incompressible_sample = vec![0u8; len];
    for s in starts {
        incompressible_sample[s..s + 10_000].copy_from_slice(&noise(10_000, s as u32 + 1));
    }
    let mut shifted = vec![0u8; len];
    for s in starts {
        let s = (s + 10_000).min(len - 10_000) - if s == 990_000 { 10_000 } else { 0 };
        shifted[s..s + 10_000].copy_from_slice(&noise(10_000, s as u32 + 1));
    }
    for codec in Codec::ALL {
        // The sample compresses, the whole frame (95 % noise) does not.
        assert_eq!(
            maybe_compress(&Bytes::from(compressible_sample.clone()), codec).0,
            None
        );
        // The sample is all noise: skipped, though the frame is 95 % zeros.
        assert_eq!(
            maybe_compress(&Bytes::from(incompressible_sample.clone()), codec).0,
            None
        );
        // The same noise just beside the sampled pieces: compressed.
        assert_eq!(
            maybe_compress(&Bytes::from(shifted.clone()), codec).0,
            Some(codec),
            "{codec}"
        );
    }
}

#[test]
fn pass_through_blocks_are_never_compressed() {
    let zeros = Bytes::from(vec![0u8; 100_000]);
    let serialized = Value::Serialized(Box::new(bytes_block(vec![zeros.clone()], vec![])));
    let pickled = Value::Pickled(Box::new(Block::new(
        Header::new(Value::map_of([
            ("pickled-obj", Value::Bin(Bytes::from_static(b"\x80\x05N."))),
            ("compression", Value::Array(vec![Value::Nil])),
        ])),
        vec![zeros.clone()],
    )));
    let msg = Value::map_of([("s", serialized), ("p", pickled)]);
    for codec in Codec::ALL {
        let mut opts = SerializeOptions::default();
        opts.compression = Some(codec);
        let frames = dumps_with(&msg, &opts).unwrap();
        assert_eq!(frames.len(), 5);
        assert_eq!(
            (frames[2].as_ptr(), frames[2].len()),
            (zeros.as_ptr(), 100_000)
        );
        assert_eq!(
            (frames[4].as_ptr(), frames[4].len()),
            (zeros.as_ptr(), 100_000)
        );
    }
}

#[test]
fn serialized_inside_a_serialize_collection_is_compressed_as_dask_does() {
    // Dask's serialize() of a collection takes a Serialized element's frames
    // into the collection's; dumps then compresses every nil entry.
    let zeros = Bytes::from(vec![0u8; 100_000]);
    let inner = bytes_block(vec![zeros.clone()], vec![]);
    let pickle = Block::new(
        Header::new(Value::map_of([("serializer", Value::str("pickle"))])),
        vec![zeros.clone()],
    );
    let msg = Value::map_of([(
        "v",
        Value::ToSerialize(Box::new(Value::Array(vec![
            Value::Serialized(Box::new(inner)),
            Value::Serialized(Box::new(pickle)),
        ]))),
    )]);
    let mut opts = SerializeOptions::default();
    opts.compression = Some(Codec::Zstd);
    let frames = dumps_with(&msg, &opts).unwrap();
    let passthrough = decode(&frames, &Limits::strict()).unwrap();
    let Some(Value::Serialized(b)) = passthrough.get("v") else {
        panic!()
    };
    assert_eq!(
        b.header().get("compression"),
        Some(&names(&[Some(Codec::Zstd), Some(Codec::Zstd)]))
    );
    let back = deserialize(b, &strict()).unwrap();
    let Value::Array(items) = back else {
        panic!("{back:?}")
    };
    assert_eq!(items[0], Value::Bin(zeros.clone()));
    // The element framewire cannot rebuild stays opaque, with its frames
    // decompressed and a compression list that says so.
    let Value::Serialized(p) = &items[1] else {
        panic!("{:?}", items[1])
    };
    assert_eq!(p.frames(), [zeros]);
    assert_eq!(p.header().get("compression"), None);
}

// ---------------------------------------------------------------------------
// Hostile input: hostile-inputs.md §3.3
// ---------------------------------------------------------------------------

/// An lz4 block of `matches` maximal matches: a literal 0, then one
/// sequence whose match length is extended by `matches` bytes of 255
/// (255 output bytes per input byte, lz4's best ratio), then 5 literals.
fn lz4_bomb(declared: u32, ext: usize) -> Vec<u8> {
    let mut f = declared.to_le_bytes().to_vec();
    f.extend_from_slice(&[0x1f, 0x00, 0x01, 0x00]); // 1 literal (0), offset 1, match 19+
    f.extend(std::iter::repeat_n(0xff, ext));
    f.push(0x00);
    f.extend_from_slice(&[0x50, 0, 0, 0, 0, 0]); // the last 5 literals
    f
}

/// What `lz4_bomb` decodes to.
fn lz4_bomb_len(ext: usize) -> usize {
    1 + 19 + 255 * ext + 5
}

/// A zstd frame of RLE blocks of zero bytes, each 128 KiB from 4 bytes
/// (zstd's best ratio), with a 128 KiB window and, if `fcs` is given, that
/// content size (8-byte field).
fn zstd_rle_bomb(blocks: usize, fcs: Option<u64>, last_len: usize) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd];
    match fcs {
        Some(n) => {
            f.push(0b1100_0000); // FCS field 8 bytes, window descriptor present
            f.push(7 << 3); // window 2^(10+7) = 128 KiB
            f.extend_from_slice(&n.to_le_bytes());
        }
        None => {
            f.push(0);
            f.push(7 << 3);
        }
    }
    for i in 0..blocks {
        let last = i + 1 == blocks;
        let size = if last { last_len } else { 128 << 10 };
        let header = (size << 3) as u32 | (1 << 1) | u32::from(last);
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(0);
    }
    f
}

/// A zlib stream with one fixed-Huffman block: a literal 0 then `matches`
/// matches of 258 bytes at distance 1 (13 bits each: deflate's fixed codes
/// give 159:1), the end of block and a valid Adler-32: it inflates to
/// 1 + 258 × `matches` zero bytes.
fn zlib_bomb(matches: usize) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= v << self.n;
            self.n += n;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code: most significant bit first.
        fn code(&mut self, code: u64, n: u32) {
            let rev = (0..n).fold(0, |r, i| r | (((code >> i) & 1) << (n - 1 - i)));
            self.put(rev, n);
        }
        fn matches(&mut self, k: usize) {
            for _ in 0..k {
                self.code(0b1100_0101, 8); // length 258 (symbol 285)
                self.code(0, 5); // distance 1
            }
        }
    }
    let mut b = Bits {
        out: vec![0x78, 0x9c],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // BFINAL
    b.put(1, 2); // fixed Huffman codes
    b.code(0x30, 8); // literal 0
                     // 8 matches are 104 bits, 13 bytes: from the second group of 8 on, each
                     // group writes the same 13 bytes (the 3 bits carried are the same).
    let groups = matches / 8;
    if groups >= 2 {
        b.matches(16);
        let group = b.out[b.out.len() - 13..].to_vec();
        for _ in 2..groups {
            b.out.extend_from_slice(&group);
        }
        b.matches(matches % 8);
    } else {
        b.matches(matches);
    }
    b.code(0, 7); // end of block (symbol 256)
    if b.n > 0 {
        b.put(0, 8 - b.n);
    }
    let len = 1 + 258 * matches as u64;
    let adler = ((len % 65_521) << 16) | 1;
    b.out.extend_from_slice(&(adler as u32).to_be_bytes());
    b.out
}

#[test]
fn bomb_builders_make_valid_streams() {
    let mut budget = DecompressBudget::new(&Limits::dask_compat());
    let lz = decompress(
        Codec::Lz4,
        &lz4_bomb(lz4_bomb_len(100) as u32, 100),
        &mut budget,
    )
    .unwrap();
    assert_eq!(lz, vec![0u8; lz4_bomb_len(100)]);
    let zs = decompress(Codec::Zstd, &zstd_rle_bomb(3, None, 1000), &mut budget).unwrap();
    assert_eq!(zs, vec![0u8; (256 << 10) + 1000]);
    let fcs = (256 << 10) + 1000;
    let zs = decompress(Codec::Zstd, &zstd_rle_bomb(3, Some(fcs), 1000), &mut budget).unwrap();
    assert_eq!(zs.len() as u64, fcs);
    for m in [1, 7, 8, 9, 16, 100, 1001] {
        let zl = decompress(Codec::Zlib, &zlib_bomb(m), &mut budget).unwrap();
        assert_eq!(zl, vec![0u8; 1 + 258 * m], "{m}");
    }
}

#[test]
fn c1_bombs_are_capped_at_the_limit() {
    // zlib, 10 GiB from 67 MB (fixed Huffman, 159:1): output stops at the
    // 16 MiB frame limit; peak = the capped buffer.
    let bomb = zlib_bomb(41_615_000); // 1 + 258 * 41 615 000 bytes: 10.7 GB
    let l = Limits::strict();
    let r = bounded((16 << 20) + (256 << 10), || {
        decode_one(Codec::Zlib, bomb, &DeserializeOptions::with_limits(l))
    });
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DecompressedTooLarge {
                codec: Codec::Zlib,
                limit: 16 << 20
            }
        ))
    );
    // zstd without a content size, 10 GiB from 320 KiB of RLE blocks: the
    // capped output, plus zstd's context and stream buffers (128 KiB window).
    let bomb = zstd_rle_bomb(81_920, None, 128 << 10);
    let r = bounded((16 << 20) + (1 << 20), || {
        decode_one(Codec::Zstd, bomb, &strict())
    });
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DecompressedTooLarge {
                codec: Codec::Zstd,
                limit: 16 << 20
            }
        ))
    );
    // The same bomb declaring its 10 GiB: refused before allocating.
    let declared = zstd_rle_bomb(81_920, Some(10 << 30), 128 << 10);
    let r = bounded(SMALL, || decode_one(Codec::Zstd, declared, &strict()));
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DeclaredSizeTooLarge {
                codec: Codec::Zstd,
                declared: 10 << 30,
                limit: 16 << 20
            }
        ))
    );
    // lz4 and snappy cannot even declare 10 GiB (32-bit sizes): their
    // largest honest bombs are refused on the declared size alone.
    let bomb = lz4_bomb(u32::MAX, 1_000);
    let bound = 255 * (bomb.len() as u64 - 4);
    let r = bounded(SMALL, || decode_one(Codec::Lz4, bomb, &compat()));
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DeclaredSizeTooLarge {
                codec: Codec::Lz4,
                declared: u64::from(u32::MAX),
                limit: bound,
            }
        ))
    );
    // A lying prefix (1 KiB) on the same bomb: decoding stops at 1 KiB.
    let r = bounded(SMALL, || {
        decode_one(Codec::Lz4, lz4_bomb(1024, 1_000), &compat())
    });
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::SizeMismatch {
                codec: Codec::Lz4,
                declared: 1024,
                actual: None
            }
        ))
    );
}

#[test]
fn c2_huge_declared_sizes_are_refused_before_allocating() {
    // Bodies long enough that only the frame limit stops them.
    let mut lz4 = vec![0xff; 4];
    lz4.resize(70_000, 0);
    let mut snappy = vec![0xff, 0xff, 0xff, 0xff, 0x0f]; // varint 2^32 - 1
    snappy.resize(800_000, 0);
    let zstd_fcs = zstd_rle_bomb(200, Some(1 << 40), 1000);
    let cases: [(Codec, Vec<u8>, u64, u64); 6] = [
        // Over the 16 MiB frame limit.
        (Codec::Lz4, lz4, u64::from(u32::MAX), 16 << 20),
        (Codec::Snappy, snappy, u64::from(u32::MAX), 16 << 20),
        (Codec::Zstd, zstd_fcs, 1 << 40, 16 << 20),
        // Under the frame limit, but more than the input can expand to.
        (
            Codec::Lz4,
            vec![0, 0, 0x10, 0, 0x1f, 0, 1, 0, 0],
            1 << 20,
            5 * 255,
        ),
        (
            Codec::Snappy,
            {
                let mut s = vec![0x80, 0x80, 0x40]; // varint 2^20
                s.extend_from_slice(&[0xfe, 1, 0]);
                s
            },
            1 << 20,
            6 * 22,
        ),
        // An 18-byte zstd frame (one RLE block) declaring 16 MiB.
        (
            Codec::Zstd,
            zstd_rle_bomb(1, Some(16 << 20), 1000),
            16 << 20,
            18 * 32_768,
        ),
    ];
    for (codec, frame, declared, limit) in cases {
        let r = bounded(SMALL, || decode_one(codec, frame, &strict()));
        assert_eq!(
            r,
            Err(DeserializeError::Compression(
                CompressionError::DeclaredSizeTooLarge {
                    codec,
                    declared,
                    limit
                }
            )),
            "{codec}"
        );
    }
}

/// A zstd frame from `compress` with its content size set to `fcs` (the
/// field keeps its width).
fn zstd_with_fcs(mut frame: Vec<u8>, fcs: u64) -> Vec<u8> {
    let fhd = frame[4];
    let single = fhd & 0x20 != 0;
    assert_eq!(fhd & 3, 0, "no dictionary id");
    let at = 5 + usize::from(!single);
    match fhd >> 6 {
        0 => frame[at] = fcs as u8,
        1 => frame[at..at + 2].copy_from_slice(&((fcs - 256) as u16).to_le_bytes()),
        2 => frame[at..at + 4].copy_from_slice(&(fcs as u32).to_le_bytes()),
        _ => frame[at..at + 8].copy_from_slice(&fcs.to_le_bytes()),
    }
    frame
}

/// A snappy block from `compress` with its varint set to `n` (< 2^14).
fn snappy_with_len(frame: &[u8], n: u64) -> Vec<u8> {
    let skip = frame.iter().position(|b| b & 0x80 == 0).unwrap() + 1;
    let mut f = vec![(n & 0x7f) as u8 | 0x80, (n >> 7) as u8];
    f.extend_from_slice(&frame[skip..]);
    f
}

#[test]
fn c3_c4_output_longer_or_shorter_than_declared() {
    let data = b"abcdefgh".repeat(125); // 1000 bytes
    let lz4 = Codec::Lz4.compress(&data).unwrap().to_vec();
    let snappy = Codec::Snappy.compress(&data).unwrap().to_vec();
    let zstd = Codec::Zstd.compress(&data).unwrap().to_vec();
    let with_prefix = |n: u32| {
        let mut f = lz4.clone();
        f[..4].copy_from_slice(&n.to_le_bytes());
        f
    };
    let mismatch = |codec, declared, actual| {
        Err(DeserializeError::Compression(
            CompressionError::SizeMismatch {
                codec,
                declared,
                actual,
            },
        ))
    };
    // Longer: decoding stops at the declared size.
    for (codec, frame, declared) in [
        (Codec::Lz4, with_prefix(999), 999),
        (Codec::Snappy, snappy_with_len(&snappy, 999), 999),
        (Codec::Zstd, zstd_with_fcs(zstd.clone(), 999), 999),
        (Codec::Lz4, with_prefix(10), 10),
    ] {
        let r = bounded(SMALL + ZSTD_CTX, || decode_one(codec, frame, &strict()));
        assert_eq!(r, mismatch(codec, declared, None), "{codec}");
    }
    // Shorter: an error, never the zeroed tail of the buffer.
    for (codec, frame, declared) in [
        (Codec::Lz4, with_prefix(1001), 1001),
        (Codec::Snappy, snappy_with_len(&snappy, 1001), 1001),
    ] {
        let r = bounded(SMALL, || decode_one(codec, frame, &strict()));
        assert_eq!(r, mismatch(codec, declared, Some(1000)), "{codec}");
    }
    // zstd checks the content size itself: a shorter output is corruption.
    let r = decode_one(Codec::Zstd, zstd_with_fcs(zstd, 1001), &strict());
    assert_eq!(
        r,
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Zstd
        }))
    );
}

#[test]
fn c5_unknown_codecs() {
    let cases: [(Value, &str); 8] = [
        (Value::str("brotli"), "brotli"),
        (Value::str(""), ""),
        (Value::str("auto"), "auto"),
        (Value::str("LZ4"), "LZ4"),
        (Value::from(7u8), "<int 7>"),
        (Value::from(0u8), "<int 0>"),
        (Value::Bool(true), "<bool true>"),
        (Value::Bin(Bytes::from_static(b"lz4")), "<bin of 3 bytes>"),
    ];
    for (entry, name) in cases {
        let block = bytes_block(
            vec![Bytes::from_static(b"x")],
            vec![("compression", Value::Array(vec![entry.clone()]))],
        );
        let r = deserialize(&block, &strict());
        assert_eq!(
            r,
            Err(DeserializeError::Compression(
                CompressionError::UnknownCodec { name: name.into() }
            )),
            "{entry:?}"
        );
    }
    // Checked before anything is decompressed: a valid frame first changes nothing.
    let packed = Codec::Lz4.compress(&[1u8; 50_000]).unwrap();
    let block = bytes_block(
        vec![packed, Bytes::from_static(b"x")],
        vec![(
            "compression",
            Value::Array(vec![Value::str("lz4"), Value::str("brotli")]),
        )],
    );
    let r = bounded(SMALL, || deserialize(&block, &strict()));
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::UnknownCodec {
                name: "brotli".into()
            }
        ))
    );
    // `false` is raw, as Dask's table says (cuda writes it).
    let block = bytes_block(
        vec![Bytes::from_static(b"raw")],
        vec![("compression", Value::Array(vec![Value::Bool(false)]))],
    );
    assert_eq!(
        deserialize(&block, &strict()),
        Ok(Value::Bin(Bytes::from_static(b"raw")))
    );
}

#[test]
fn c6_raw_bytes_flagged_compressed_and_the_reverse() {
    let text = b"hello world, these bytes were never compressed".to_vec();
    let z = |c, f: &[u8]| {
        let f = f.to_vec();
        bounded(SMALL + ZSTD_CTX, || decode_one(c, f, &strict()))
    };
    // lz4: the first 4 bytes "hell" read as a 1.8 GB size.
    assert_eq!(
        z(Codec::Lz4, &text),
        Err(DeserializeError::Compression(
            CompressionError::DeclaredSizeTooLarge {
                codec: Codec::Lz4,
                declared: 0x6c6c_6568,
                limit: 255 * (text.len() as u64 - 4)
            }
        ))
    );
    // lz4 with a small first word: "h" is 6 literals and a match at offset
    // "or" (29 295), before the start of the output.
    let mut raw = vec![100, 0, 0, 0];
    raw.extend_from_slice(&text);
    assert_eq!(
        z(Codec::Lz4, &raw),
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Lz4
        }))
    );
    // snappy: "h" declares 104 bytes; "e" is a copy reaching before the start.
    assert_eq!(
        z(Codec::Snappy, &text),
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Snappy
        }))
    );
    // zstd and zlib: no magic number / header.
    assert_eq!(
        z(Codec::Zstd, &text),
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Zstd
        }))
    );
    assert_eq!(
        z(Codec::Zlib, &text),
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Zlib
        }))
    );
    // An empty frame flagged compressed.
    for codec in Codec::ALL {
        assert_eq!(
            z(codec, b""),
            Err(DeserializeError::Compression(CompressionError::Corrupt {
                codec
            })),
            "{codec}"
        );
    }
    // Trailing bytes after a valid zstd frame or zlib stream.
    for codec in [Codec::Zstd, Codec::Zlib] {
        let mut f = codec.compress(&[5u8; 1000]).unwrap().to_vec();
        f.push(0);
        assert_eq!(
            z(codec, &f),
            Err(DeserializeError::Compression(CompressionError::Corrupt {
                codec
            })),
            "{codec}"
        );
    }
    // The reverse: compressed bytes flagged raw. An array's header no
    // longer matches its frame; for bytes it cannot be told (as in Dask).
    let packed = Codec::Lz4.compress(&[0u8; 80_000]).unwrap();
    let header = Value::map_of([
        (
            "sub-header",
            Value::map_of([
                ("dtype", Value::Array(vec![Value::from(0u8), Value::str("<f8")])),
                ("shape", Value::Array(vec![Value::from(10_000u32)])),
                ("strides", Value::Array(vec![Value::from(8u8)])),
                ("writeable", Value::Array(vec![Value::Bool(true)])),
            ]),
        ),
        ("type", Value::str("numpy.ndarray")),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(
                b"\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94.",
            )),
        ),
        ("serializer", Value::str("dask")),
        ("compression", Value::Array(vec![Value::Nil])),
    ]);
    let r = deserialize(&Block::new(Header::new(header), vec![packed]), &strict());
    assert!(
        matches!(r, Err(DeserializeError::InvalidArray { .. })),
        "{r:?}"
    );
}

#[test]
fn c7_zstd_window_above_the_limit_is_refused_before_allocating() {
    // No content size, window descriptor 2^(10+21) = 2 GiB.
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3];
    f.extend_from_slice(&[0x01, 0x00, 0x00]); // a last, empty raw block
    let frame = f.clone();
    let r = bounded(SMALL + ZSTD_CTX, || {
        decode_one(Codec::Zstd, frame, &strict())
    });
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::WindowTooLarge {
                codec: Codec::Zstd,
                limit: 16 << 20
            }
        ))
    );
    // With dask_compat (1 GiB frames) the window stays within zstd's default 128 MiB.
    let r = decode_one(Codec::Zstd, f, &compat());
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::WindowTooLarge {
                codec: Codec::Zstd,
                limit: 128 << 20
            }
        ))
    );
}

#[test]
fn c8_one_budget_for_the_whole_message() {
    // 100 blocks of 1 MiB of zeros, 4 KiB each compressed: 100 MiB in all
    // against an 8 MiB message budget.
    let l = limits(16 << 20, 8 << 20);
    let opts = DeserializeOptions::with_limits(l.clone());
    let packed = Codec::Lz4.compress(&vec![0u8; 1 << 20]).unwrap();
    assert!(packed.len() < 5_000);
    let block = || {
        Value::Serialized(Box::new(bytes_block(
            vec![packed.clone()],
            vec![("compression", names(&[Some(Codec::Lz4)]))],
        )))
    };
    let msg = Value::Array((0..100).map(|_| block()).collect());
    let r = bounded((8 << 20) + (1 << 20), || {
        deserialize_blocks(msg.clone(), &opts)
    });
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DecompressedTooLarge {
                codec: Codec::Lz4,
                limit: 8 << 20
            }
        ))
    );
    // Block by block with a fresh budget each, all 100 decode.
    let Value::Array(blocks) = &msg else { panic!() };
    for b in blocks {
        let Value::Serialized(b) = b else { panic!() };
        assert!(deserialize(b, &opts).is_ok());
    }
    // One budget shared by hand: the 9th block is refused.
    let mut budget = DecompressBudget::new(&l);
    let results: Vec<_> = blocks
        .iter()
        .map(|b| {
            let Value::Serialized(b) = b else { panic!() };
            deserialize_with_budget(b, &opts, &mut budget).is_ok()
        })
        .collect();
    assert_eq!(results.iter().filter(|ok| **ok).count(), 8);
    assert!(!results[8]);
    // One block of many compressed frames (a collection), zlib (streamed):
    // the budget ends inside the 9th frame.
    let z = Codec::Zlib.compress(&vec![0u8; 1 << 20]).unwrap();
    let n = 100;
    let header = Value::map_of([
        (
            "sub-headers",
            Value::Array(
                (0..n)
                    .map(|_| {
                        Value::map_of([
                            ("serializer", Value::str("dask")),
                            ("type", Value::str("bytes")),
                            (
                                "type-serialized",
                                Value::Bin(Bytes::from_static(BYTES_TYPE)),
                            ),
                            ("sub-header", Value::Map(vec![])),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("is-collection", Value::Bool(true)),
        ("frame-lengths", Value::Array(vec![Value::from(1u8); n])),
        ("type-serialized", Value::str("tuple")),
        ("compression", Value::Array(vec![Value::str("zlib"); n])),
    ]);
    let block = Block::new(Header::new(header), vec![z; n]);
    let r = bounded((8 << 20) + (4 << 20), || deserialize(&block, &opts));
    assert_eq!(
        r,
        Err(DeserializeError::Compression(
            CompressionError::DecompressedTooLarge {
                codec: Codec::Zlib,
                limit: 8 << 20
            }
        ))
    );
}

#[test]
fn c9_split_and_compressed() {
    // Dask's own form: every shard compressed on its own, the raw tail
    // under 10 000 bytes; merged into one exactly-sized buffer.
    let data = noise(1_000, 5).repeat(30); // 30 000 bytes
    let shards: Vec<&[u8]> = data.chunks(12_000).collect();
    let frames: Vec<Bytes> = vec![
        Codec::Lz4.compress(shards[0]).unwrap(),
        Codec::Zstd.compress(shards[1]).unwrap(),
        Bytes::copy_from_slice(shards[2]),
    ];
    let split = |c: Value, n: u64| {
        vec![
            ("split-num-sub-frames", Value::Array(vec![Value::from(n)])),
            ("split-offsets", Value::Array(vec![Value::from(0u8)])),
            ("compression", c),
        ]
    };
    let block = bytes_block(
        frames,
        split(names(&[Some(Codec::Lz4), Some(Codec::Zstd), None]), 3),
    );
    let (r, stats) = measure(|| deserialize(&block, &strict()));
    assert_eq!(r, Ok(Value::Bin(Bytes::from(data.clone()))));
    assert!(stats.peak < 30_000 + ZSTD_CTX, "{stats:?}");
    // A frame compressed whole, then cut in two shards (Dask never does
    // this). Defined semantics: every shard's declared size is checked
    // first, then each shard is decompressed on its own. The second half's
    // first 4 bytes are no size: refused before anything is decoded.
    let whole = Codec::Lz4.compress(&data).unwrap();
    let (a, b) = (
        whole.slice(..whole.len() / 2),
        whole.slice(whole.len() / 2..),
    );
    let block = bytes_block(
        vec![a.clone(), b.clone()],
        split(names(&[Some(Codec::Lz4); 2]), 2),
    );
    assert_eq!(
        deserialize(&block, &strict()),
        Err(DeserializeError::Compression(
            CompressionError::DeclaredSizeTooLarge {
                codec: Codec::Lz4,
                declared: u64::from(u32::from_le_bytes(b[..4].try_into().unwrap())),
                limit: 255 * (b.len() as u64 - 4),
            }
        ))
    );
    // Flagged [lz4, nil]: the first half alone is a truncated block.
    let block = bytes_block(vec![a, b], split(names(&[Some(Codec::Lz4), None]), 2));
    assert_eq!(
        deserialize(&block, &strict()),
        Err(DeserializeError::Compression(CompressionError::Corrupt {
            codec: Codec::Lz4
        }))
    );
    // Shards that decompress past the frame limit together.
    let mb = Codec::Lz4.compress(&vec![0u8; 6 << 20]).unwrap();
    let block = bytes_block(
        vec![mb.clone(), mb.clone(), mb],
        split(names(&[Some(Codec::Lz4); 3]), 3),
    );
    let r = bounded(SMALL, || deserialize(&block, &strict()));
    assert_eq!(
        r,
        Err(DeserializeError::FrameTooLarge {
            index: 0,
            declared: 18 << 20,
            limit: 16 << 20
        })
    );
}

#[test]
fn errors_read_well() {
    let e = DeserializeError::Compression(CompressionError::SizeMismatch {
        codec: Codec::Lz4,
        declared: 999,
        actual: None,
    });
    assert_eq!(
        e.to_string(),
        "lz4 frame declares 999 bytes but decompresses to more"
    );
    let e = DeserializeError::Compression(CompressionError::UnknownCodec {
        name: "brotli".into(),
    });
    assert_eq!(e.to_string(), "unknown compression codec \"brotli\"");
    let e = DeserializeError::Compression(CompressionError::DeclaredSizeTooLarge {
        codec: Codec::Zstd,
        declared: 1 << 40,
        limit: 16 << 20,
    });
    assert_eq!(
        e.to_string(),
        "zstd frame declares 1099511627776 decompressed bytes, limit 16777216"
    );
}
