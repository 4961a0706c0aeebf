//! Layer 3 against the committed Dask captures (`tests/captures/<case>/`):
//! every `Serialized` block found in every capture's pass-through decode is
//! deserialized and compared with what Python's `loads` returned
//! (`value` in case.json, tagged JSON), then re-serialized and compared with
//! the captured sub-header and payload frames byte for byte (or with the
//! documented difference asserted explicitly). Then hostile headers
//! (hostile-inputs.md §3.2, H17–H26), the `CollectionView` offset table on
//! 10^5 elements, and shard merging with and without a backing buffer.

#[path = "support/child_test.rs"]
mod child_test;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::{
    self, deserialize, deserialize_owned, CollectionView, DeserializeOptions, IterateCollection,
    SerializeOptions,
};
use framewire::DeserializeError;
use framewire::{Block, Envelope, Header, Limits, Value};
use serde_json::Value as J;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------
// Loading captures
// ---------------------------------------------------------------------------

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// JSON as deep as Dask's 1024-level messages (serde_json stops at 128).
fn parse_deep_json(text: &str) -> J {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    J::deserialize(&mut de).unwrap()
}

struct Case {
    name: String,
    json: J,
    /// The whole wire.bin: every frame is a slice of it.
    wire: Bytes,
    frames: Vec<Bytes>,
}

fn cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("tests/captures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("wire.bin").exists() && p.join("case.json").exists())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 30,
        "expected the committed captures, found {}",
        dirs.len()
    );
    dirs.into_iter()
        .map(|dir| {
            let json = parse_deep_json(&std::fs::read_to_string(dir.join("case.json")).unwrap());
            let wire = Bytes::from(std::fs::read(dir.join("wire.bin")).unwrap());
            let (env, used) = Envelope::decode(&wire, &Limits::dask_compat()).unwrap();
            assert_eq!(used, wire.len());
            let frames = env.into_frames();
            for (i, f) in frames.iter().enumerate() {
                let file = std::fs::read(dir.join(format!("frame_{i:03}.bin"))).unwrap();
                assert_eq!(
                    &f[..],
                    &file[..],
                    "{}: wire.bin frame {i} != frame_{i:03}.bin",
                    dir.display()
                );
            }
            Case {
                name: dir.file_name().unwrap().to_string_lossy().into_owned(),
                json,
                wire,
                frames,
            }
        })
        .collect()
}

fn opts() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::dask_compat())
}

fn opts_backed(wire: &Bytes) -> DeserializeOptions {
    {
        let mut o = opts();
        o.backing = vec![wire.clone()];
        o
    }
}

fn inside(b: &[u8], wire: &Bytes) -> bool {
    let (p, w) = (b.as_ptr() as usize, wire.as_ptr() as usize);
    p >= w && p + b.len() <= w + wire.len()
}

/// The items of a Python sequence in tagged JSON (list, tuple, set).
fn seq(j: &J) -> Option<(&[J], bool)> {
    match j {
        J::Array(a) => Some((a, false)),
        J::Object(o) if o.len() == 1 => {
            if let Some(J::Array(a)) = o.get("$tuple") {
                Some((a, false))
            } else if let Some(J::Array(a)) = o.get("$set").or_else(|| o.get("$frozenset")) {
                Some((a, true))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Walks a pass-through decoded frame 0 and the Python value side by side,
/// collecting each `Serialized` block with the Python value at its place.
fn collect_blocks(v: &Value, j: &J, path: String, out: &mut Vec<(String, Block, J)>) {
    if j.get("$exception").is_some() && !matches!(v, Value::Serialized(_)) {
        // Python's loads raised (the `error` family): the whole message is the
        // exception; it belongs to the block(s) below.
        match v {
            Value::Array(items) => items
                .iter()
                .for_each(|x| collect_blocks(x, j, path.clone(), out)),
            Value::Map(entries) => entries
                .iter()
                .for_each(|(_, x)| collect_blocks(x, j, path.clone(), out)),
            _ => {}
        }
        return;
    }
    match v {
        Value::Serialized(b) => out.push((path, (**b).clone(), j.clone())),
        Value::Array(items) => {
            let Some((js, _)) = seq(j) else {
                panic!("{path}: frame 0 has an array, Python gave {j}");
            };
            assert_eq!(items.len(), js.len(), "{path}");
            for (i, (x, y)) in items.iter().zip(js).enumerate() {
                collect_blocks(x, y, format!("{path}[{i}]"), out);
            }
        }
        Value::Map(entries) => {
            let values: Vec<&J> = match j {
                J::Object(o) if o.len() == 1 && o.contains_key("$dict") => o["$dict"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| &p[1])
                    .collect(),
                J::Object(o) => o.values().collect(),
                _ => panic!("{path}: frame 0 has a map, Python gave {j}"),
            };
            assert_eq!(entries.len(), values.len(), "{path}");
            for (i, ((_, x), y)) in entries.iter().zip(values).enumerate() {
                collect_blocks(x, y, format!("{path}.{i}"), out);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Comparing framewire values with tagged JSON
// ---------------------------------------------------------------------------

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// `{"$bytes": hex}` or `{"$bytes": null, "len", "sha256"}` (same for `$bytearray`).
fn blob_matches(b: &[u8], j: &J, tag: &str) -> bool {
    match j.get(tag) {
        Some(J::String(h)) => *h == hex::encode(b),
        Some(J::Null) => {
            j["len"].as_u64() == Some(b.len() as u64) && j["sha256"].as_str() == Some(&sha(b))
        }
        _ => false,
    }
}

const BYTES_TYPE: &[u8] =
    b"\x80\x05\x95\x16\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x05bytes\x94\x93\x94.";
const BYTEARRAY_TYPE: &[u8] = b"\x80\x05\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x09bytearray\x94\x93\x94.";
const NDARRAY_TYPE: &[u8] =
    b"\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94.";

/// Whether a block has a compressed frame (decompressed into new memory).
fn compressed(h: &Value) -> bool {
    h.get("compression")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|x| x.as_str().is_some()))
}

/// Why framewire must keep a block opaque, or `None` if it must decode it.
fn opaque_reason(h: &Value) -> Option<&'static str> {
    if h.get("is-collection").is_some() {
        return None;
    }
    match h.get("serializer").and_then(Value::as_str) {
        Some("dask") => {}
        Some("msgpack") | Some("error") => return None,
        Some("pickle") => return Some("pickle"),
        _ => return Some("unknown serializer"),
    }
    match h.get("type-serialized") {
        Some(Value::Bin(t)) if &t[..] == BYTES_TYPE || &t[..] == BYTEARRAY_TYPE => None,
        Some(Value::Bin(t)) if &t[..] == NDARRAY_TYPE => {
            let sub = h.get("sub-header").unwrap();
            if sub.get("pickle").is_some() {
                Some("pickled object array")
            } else if sub
                .get("dtype")
                .and_then(Value::as_array)
                .and_then(|d| d[0].as_int())
                == Some(1u8.into())
            {
                Some("pickled dtype")
            } else {
                None
            }
        }
        _ => Some("other dask type (masked, memoryview, array.array...)"),
    }
}

fn short(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.len() > 300 {
        format!("{}...", &s[..300])
    } else {
        s
    }
}

/// Whether a deserialized value is what Python's loads returned.
fn check(got: &Value, exp: &J, path: &str) -> Result<(), String> {
    let fail = |why: &str| -> Result<(), String> {
        Err(format!(
            "{path}: {why}\n  got      {}\n  expected {}",
            short(got),
            exp
        ))
    };
    let ok = |c: bool, why: &str| if c { Ok(()) } else { fail(why) };
    match got {
        Value::Serialized(b) => ok(
            opaque_reason(b.header().map()).is_some(),
            "kept opaque, but framewire decodes this family",
        ),
        Value::Nil => ok(exp.is_null(), "nil"),
        Value::Bool(b) => ok(*exp == J::Bool(*b), "bool"),
        Value::Int(i) => ok(
            exp.as_i64().map(i128::from) == Some(i.as_i128())
                || exp.as_u64().map(i128::from) == Some(i.as_i128()),
            "int",
        ),
        Value::Float(f) => ok(exp.as_f64() == Some(*f), "float"),
        Value::Str(s) => ok(exp.as_str() == Some(&**s), "str"),
        // Documented: a bytearray comes back as bytes.
        Value::Bin(b) => ok(
            blob_matches(b, exp, "$bytes") || blob_matches(b, exp, "$bytearray"),
            "bytes",
        ),
        Value::Array(items) => {
            let Some((js, unordered)) = seq(exp) else {
                return fail("not a sequence");
            };
            if items.len() != js.len() {
                return fail("length");
            }
            if unordered {
                let mut used = vec![false; js.len()];
                for (i, x) in items.iter().enumerate() {
                    let k = (0..js.len())
                        .find(|&k| !used[k] && check(x, &js[k], path).is_ok())
                        .ok_or(format!("{path}: set item {i} not found"))?;
                    used[k] = true;
                }
                return Ok(());
            }
            for (i, (x, y)) in items.iter().zip(js).enumerate() {
                check(x, y, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::Map(entries) => {
            let pairs: Vec<(J, &J)> = match exp {
                J::Object(o) if o.len() == 1 && o.contains_key("$dict") => o["$dict"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].clone(), &p[1]))
                    .collect(),
                J::Object(o) if !o.keys().any(|k| k.starts_with('$')) => {
                    o.iter().map(|(k, v)| (J::String(k.clone()), v)).collect()
                }
                _ => return fail("not a dict"),
            };
            if pairs.len() != entries.len() {
                return fail("length");
            }
            for (i, ((k, v), (jk, jv))) in entries.iter().zip(&pairs).enumerate() {
                check(k, jk, &format!("{path}.key{i}"))?;
                check(v, jv, &format!("{path}.{i}"))?;
            }
            Ok(())
        }
        Value::NdArray(a) => {
            let Some(e) = exp.get("$ndarray") else {
                return fail("not an ndarray");
            };
            let shape: Vec<u64> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            if e["dtype"].as_str() != Some(a.dtype()) {
                return fail("dtype");
            }
            if a.logical_shape() != &shape[..] {
                return fail("logical shape");
            }
            let c = a.to_c_order();
            match (e.get("data_hex"), e.get("data_sha256")) {
                (Some(h), _) => ok(h.as_str() == Some(&hex::encode(&c)), "C-order bytes"),
                (_, Some(s)) => ok(
                    s.as_str() == Some(&sha(&c)) && e["nbytes"].as_u64() == Some(c.len() as u64),
                    "C-order sha256",
                ),
                _ => fail("no data in expected"),
            }
        }
        _ => fail("unexpected variant"),
    }
}

// ---------------------------------------------------------------------------
// Re-serialization: what framewire writes vs what Dask wrote
// ---------------------------------------------------------------------------

/// Dask's collection types become "tuple" and bytearray becomes bytes in
/// what framewire writes (documented differences).
fn normalise(h: &Value) -> Value {
    match h {
        Value::Map(entries) => {
            let is_coll = h.get("is-collection").is_some();
            Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let v = match (k.as_str(), v) {
                            (Some("type-serialized"), Value::Str(s))
                                if is_coll && (&**s == "list" || &**s == "set") =>
                            {
                                Value::str("tuple")
                            }
                            (Some("type-serialized"), Value::Bin(b))
                                if &b[..] == BYTEARRAY_TYPE =>
                            {
                                Value::Bin(Bytes::from_static(BYTES_TYPE))
                            }
                            (Some("type"), Value::Str(s)) if &**s == "bytearray" => {
                                Value::str("bytes")
                            }
                            (Some("sub-headers"), Value::Array(subs)) => {
                                Value::Array(subs.iter().map(normalise).collect())
                            }
                            _ => v.clone(),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// Blocks where framewire deliberately writes something else than Dask, with
/// the documented reason. Everything else must be byte-identical, or equal
/// after [`normalise`].
const DIFFERS: &[(&str, usize, &str)] = &[
    (
        "iterate_inference",
        1,
        "Dask iterates {b'z'} because its first element is bytes; framewire's exact Auto \
         sends a 1-byte bin inline in a msgpack blob",
    ),
    (
        "nested_serialize",
        1,
        "Dask iterates [b'z', Serialize(b'w')] (first element is bytes); the decoded \
         [b'z', b'w'] has nothing out of band, so framewire's Auto writes one blob",
    ),
    (
        "msgpack_family",
        7,
        "serializers=['msgpack'] makes Dask iterate every inner list; framewire's Auto \
         writes [1, 2] and [3] as msgpack blobs",
    ),
    (
        "msgpack_before_pickle_rule",
        1,
        "msgpack before pickle makes Dask iterate the inner lists; framewire's Auto writes blobs",
    ),
    (
        "preserialized_serialized",
        1,
        "Dask passed a pre-built Serialized through without split-*/compression keys; \
         re-serializing the array adds them, as Dask's serialize_and_split does",
    ),
];

/// Blocks that must re-serialize byte for byte.
const MUST_BE_IDENTICAL: &[(&str, usize)] = &[
    ("task_with_numpy", 1),
    ("task_with_numpy", 3),
    ("numpy_layouts", 1),
    ("numpy_layouts", 3),
    ("numpy_layouts", 5),
    ("numpy_layouts", 7),
    ("numpy_layouts", 9),
    ("numpy_layouts", 11),
    ("numpy_layouts", 13),
    ("numpy_layouts", 15),
    ("numpy_layouts", 17),
    ("numpy_layouts", 21),
    ("sharded_4096", 1),
    ("sharded_4096", 5),
    ("sharded_4096", 9),
    ("sharded_itemsize_rounding", 1),
    ("sharded_itemsize_rounding", 5),
    ("bytes_payloads", 1),
    ("deeply_nested", 1),
    ("scheduler_relay", 1),
    ("zstd_compression", 1),
    ("zstd_compression", 3),
    ("zstd_compression", 5),
    ("zstd_compression", 7),
    ("lz4_compression", 1),
    ("lz4_compression", 3),
    ("lz4_compression", 5),
    ("lz4_compression", 7),
    ("lz4_compression_sharded", 1),
    ("msgpack_family", 1),
    ("msgpack_family", 3),
    ("msgpack_family", 11),
    ("empty_frames", 1),
    ("empty_frames", 3),
    ("dict_key_safety", 1),
    ("pickle_fallback_orphans", 3),
];

/// Serializes `v` as Dask's dumps does for `{"__Serialized__": 1}`, returning
/// the sub-header frame, the payload frames, and the block as framewire reads it.
fn reserialize(
    v: &Value,
    shard_size: usize,
    compression: Option<serialize::Codec>,
) -> (Bytes, Vec<Bytes>, Block) {
    let mut opts = SerializeOptions::default();
    opts.shard_size = shard_size;
    opts.compression = compression;
    let frames = framewire::dumps_with(
        &Value::Array(vec![Value::ToSerialize(Box::new(v.clone()))]),
        &opts,
    )
    .unwrap();
    let Value::Array(items) = decode(&frames, &Limits::dask_compat()).unwrap() else {
        panic!("frame 0 is not an array");
    };
    let Value::Serialized(b) = &items[0] else {
        panic!("no block");
    };
    (frames[1].clone(), frames[2..].to_vec(), (**b).clone())
}

fn block_offset(path_block: &Block, case: &Case) -> usize {
    let raw = path_block.header().raw().unwrap();
    case.frames
        .iter()
        .position(|f| f.as_ptr() == raw.as_ptr() && f.len() == raw.len())
        .unwrap()
}

#[test]
fn golden_blocks_deserialize_like_dask_and_reserialize_byte_for_byte() {
    let mut identical = BTreeSet::new();
    let mut normalised = BTreeSet::new();
    let mut differs = BTreeSet::new();
    let mut opaque: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut errors = 0;
    let mut failures = Vec::new();

    for case in cases() {
        let Some(expected) = case.json.get("value") else {
            continue;
        };
        if case.json["blocks"].as_array().is_none_or(|b| b.is_empty()) {
            continue;
        }
        let value = decode(&case.frames, &Limits::dask_compat()).unwrap();
        let mut found = Vec::new();
        collect_blocks(&value, expected, format!("{}:$", case.name), &mut found);
        // The codec the capture's connection negotiated: framewire
        // compresses with it as Dask did.
        let codec = case.json["dumps_call"]["context"]["compression"]
            .as_str()
            .map(|c| serialize::Codec::from_name(c).unwrap());
        let shard_size = case.json["dumps_call"]["frame_split_size"]
            .as_u64()
            .unwrap() as usize;
        for (path, block, exp) in found {
            let offset = block_offset(&block, &case);
            let at = format!("{} block@{offset} ({path})", case.name);
            let got = deserialize(&block, &opts());
            let got_backed = deserialize(&block, &opts_backed(&case.wire));
            assert_eq!(got, got_backed, "{at}: backing changes the value");
            let v = match got {
                Err(DeserializeError::RemoteSerializationError { text }) => {
                    assert_eq!(exp["$exception"], "TypeError", "{at}");
                    assert_eq!(
                        exp["message"].as_str(),
                        Some(text.as_str()),
                        "{at}: error text"
                    );
                    errors += 1;
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{at}: unexpected error {e:?}"));
                    continue;
                }
                Ok(Value::Serialized(b)) => {
                    let reason = opaque_reason(block.header().map());
                    match reason {
                        Some(r) => *opaque.entry(r).or_default() += 1,
                        None => failures.push(format!("{at}: kept opaque but decodable")),
                    }
                    // Returned unchanged: same header bytes, same frames (same memory).
                    assert_eq!(*b, block, "{at}");
                    assert_eq!(
                        b.header().raw().unwrap().as_ptr(),
                        block.header().raw().unwrap().as_ptr(),
                        "{at}"
                    );
                    assert_eq!(b.frames().len(), block.frames().len(), "{at}");
                    for (x, y) in b.frames().iter().zip(block.frames()) {
                        assert_eq!(
                            (x.as_ptr(), x.len()),
                            (y.as_ptr(), y.len()),
                            "{at}: opaque frame copied"
                        );
                    }
                    continue;
                }
                Ok(v) => v,
            };
            if let Some(r) = opaque_reason(block.header().map()) {
                failures.push(format!("{at}: decoded a block that must stay opaque ({r})"));
            }
            if let Err(e) = check(&v, &exp, &at) {
                failures.push(e);
                continue;
            }

            // Zero-copy: a one-frame payload is the frame itself; shards merge
            // into a slice of the wire buffer when it is given as backing.
            let payload = match &v {
                Value::Bin(b) => Some(b.clone()),
                Value::NdArray(a) => Some(a.data().clone()),
                _ => None,
            };
            if let Some(p) = payload
                .as_ref()
                .filter(|_| !compressed(block.header().map()))
            {
                *kinds
                    .entry(if matches!(v, Value::Bin(_)) {
                        "bytes"
                    } else {
                        "ndarray"
                    })
                    .or_default() += 1;
                let frames = block.frames();
                if frames.len() == 1 {
                    assert_eq!(
                        p.as_ptr(),
                        frames[0].as_ptr(),
                        "{at}: one-frame payload copied"
                    );
                    assert!(p.is_empty() || inside(p, &case.wire), "{at}");
                } else {
                    assert!(frames.len() > 1);
                    let backed = match deserialize(&block, &opts_backed(&case.wire)).unwrap() {
                        Value::Bin(b) => b,
                        Value::NdArray(a) => a.data().clone(),
                        _ => unreachable!(),
                    };
                    assert_eq!(
                        backed.as_ptr(),
                        frames[0].as_ptr(),
                        "{at}: shards not merged in place"
                    );
                    assert!(inside(&backed, &case.wire), "{at}");
                    assert!(
                        !inside(p, &case.wire),
                        "{at}: without backing, merged shards are one copy"
                    );
                    assert_eq!(backed, *p, "{at}");
                    *kinds.entry("sharded").or_default() += 1;
                }
            } else {
                *kinds
                    .entry(if matches!(v, Value::Array(_) | Value::Map(_)) {
                        "collection"
                    } else {
                        "scalar"
                    })
                    .or_default() += 1;
            }

            // Re-serialization.
            let (sub, payload_frames, ours) = reserialize(&v, shard_size, codec);
            let theirs_raw = block.header().raw().unwrap();
            let same_frames = payload_frames.len() == block.frames().len()
                && payload_frames
                    .iter()
                    .zip(block.frames())
                    .all(|(a, b)| a == b);
            let key = (case.name.clone(), offset);
            let differ_reason = DIFFERS
                .iter()
                .find(|(n, o, _)| *n == case.name && *o == offset);
            if sub == *theirs_raw && same_frames {
                if let Some((_, _, why)) = differ_reason {
                    failures.push(format!("{at}: listed as differing ({why}) but identical"));
                }
                identical.insert(key);
            } else if ours.header().map() == &normalise(block.header().map()) && same_frames {
                assert!(
                    differ_reason.is_none(),
                    "{at}: listed as differing but only normalised"
                );
                normalised.insert(key);
            } else if differ_reason.is_some() {
                differs.insert(key);
            } else {
                failures.push(format!(
                    "{at}: re-serialization differs\n  ours   {:?}\n  theirs {:?}\n  frames same: {same_frames}",
                    ours.header().map(),
                    block.header().map()
                ));
            }
            // Whatever was written, it reads back as the same value.
            let back = deserialize(&ours, &opts()).unwrap();
            if back != v {
                failures.push(format!(
                    "{at}: round trip\n  {}\n  {}",
                    short(&back),
                    short(&v)
                ));
            }
            // Payload frames are the decoded value's memory, not copies.
            if let (Some(p), 1, false) = (
                &payload,
                payload_frames.len(),
                compressed(ours.header().map()),
            ) {
                assert_eq!(
                    payload_frames[0].as_ptr(),
                    p.as_ptr(),
                    "{at}: re-serialization copied"
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    for (n, o) in MUST_BE_IDENTICAL {
        assert!(
            identical.contains(&(n.to_string(), *o)),
            "{n} block@{o} must re-serialize byte for byte (normalised: {}, differs: {})",
            normalised.contains(&(n.to_string(), *o)),
            differs.contains(&(n.to_string(), *o)),
        );
    }
    for (n, o, _) in DIFFERS {
        assert!(
            differs.contains(&(n.to_string(), *o)),
            "{n} block@{o} not visited"
        );
    }
    // The documented normalisations were actually exercised.
    for k in [
        ("bytes_payloads", 3),            // bytearray -> bytes
        ("serialize_collection_list", 1), // list -> tuple
        ("empty_frames", 6),              // [] -> tuple
        ("msgpack_family", 13),           // [(1, "a", None)] -> tuple
        ("pickle_before_msgpack_rule", 1),
    ] {
        assert!(
            normalised.contains(&(k.0.to_string(), k.1)),
            "{k:?} not normalised: {normalised:?}"
        );
    }
    for r in ["pickle", "pickled dtype", "pickled object array"] {
        assert!(
            opaque.contains_key(r),
            "no opaque block of kind {r}: {opaque:?}"
        );
    }
    assert!(opaque.keys().any(|k| k.starts_with("other dask type")));
    assert_eq!(errors, 2, "error_family and error_family_traceback");
    assert!(kinds["sharded"] >= 4, "{kinds:?}");
    eprintln!(
        "identical {} normalised {} differs {} opaque {opaque:?} kinds {kinds:?}",
        identical.len(),
        normalised.len(),
        differs.len()
    );
}

// ---------------------------------------------------------------------------
// Shards
// ---------------------------------------------------------------------------

#[test]
fn shards_merge_in_place_with_backing_and_copy_once_without() {
    let data: Vec<u8> = (0..10_000u32)
        .flat_map(|i| (i as u16).to_le_bytes())
        .collect();
    let a = framewire::NdArray::from_c_order("<u2", &[10_000], Bytes::from(data.clone())).unwrap();
    let mut sopts = SerializeOptions::default();
    sopts.shard_size = 3000;
    let frames = framewire::dumps_with(
        &Value::ToSerialize(Box::new(Value::NdArray(Box::new(a)))),
        &sopts,
    )
    .unwrap();
    let wire = Envelope::new(frames).unwrap().to_bytes();
    let (env, _) = Envelope::decode(&wire, &Limits::dask_compat()).unwrap();
    let Value::Serialized(block) = decode(env.frames(), &Limits::dask_compat()).unwrap() else {
        panic!()
    };
    assert_eq!(block.frames().len(), 7, "20000 bytes in 3000-byte shards");
    assert!(block
        .frames()
        .iter()
        .all(|f| f.len() <= 3000 && f.len() % 2 == 0));
    let Value::NdArray(in_place) = deserialize(&block, &opts_backed(&wire)).unwrap() else {
        panic!()
    };
    assert_eq!(in_place.data().as_ptr(), block.frames()[0].as_ptr());
    assert_eq!(&in_place.data()[..], &data[..]);
    let Value::NdArray(copied) = deserialize(&block, &opts()).unwrap() else {
        panic!()
    };
    assert!(!inside(copied.data(), &wire));
    assert_eq!(&copied.data()[..], &data[..]);
    // A backing buffer the shards are not inside: one copy.
    let other = Bytes::from(vec![0u8; 100]);
    let Value::NdArray(elsewhere) = deserialize(&block, &opts_backed(&other)).unwrap() else {
        panic!()
    };
    assert!(!inside(elsewhere.data(), &wire));
    assert_eq!(&elsewhere.data()[..], &data[..]);
    // Shards that are not adjacent in the backing buffer: one copy too.
    let mut frames: Vec<Bytes> = block.frames().to_vec();
    frames.swap(0, 1);
    let swapped = Block::new(block.header().clone(), frames);
    let Value::NdArray(s) = deserialize(&swapped, &opts_backed(&wire)).unwrap() else {
        panic!()
    };
    assert!(!inside(s.data(), &wire));
    assert_eq!(&s.data()[..3000], &data[3000..6000]);
}

// ---------------------------------------------------------------------------
// Hostile headers (hostile-inputs.md §3.2, H17–H26)
// ---------------------------------------------------------------------------

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::map_of(entries)
}

fn ints(xs: &[i64]) -> Value {
    Value::Array(xs.iter().map(|&x| Value::from(x)).collect())
}

fn frame(b: &'static [u8]) -> Bytes {
    Bytes::from_static(b)
}

fn bytes_header(extra: Vec<(&str, Value)>) -> Value {
    let mut e = vec![
        ("sub-header", Value::Map(vec![])),
        ("type", Value::str("bytes")),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(BYTES_TYPE)),
        ),
        ("serializer", Value::str("dask")),
    ];
    e.extend(extra);
    map(e)
}

fn msgpack_leaf() -> Value {
    map(vec![("serializer", Value::str("msgpack"))])
}

fn coll(subs: Vec<Value>, lengths: &[i64], kind: &str) -> Value {
    map(vec![
        ("sub-headers", Value::Array(subs)),
        ("is-collection", Value::Bool(true)),
        ("frame-lengths", ints(lengths)),
        ("type-serialized", Value::str(kind)),
    ])
}

/// Deserializes a block built from a header map, and checks that the same
/// block sent through a message (its header then read in place, as from the
/// wire) deserializes the same, error included.
fn de(h: Value, frames: Vec<Bytes>) -> Result<Value, DeserializeError> {
    let block = Block::new(Header::new(h), frames);
    let direct = deserialize(&block, &opts());
    // A top-level opaque block comes back as itself: its wire header also
    // has `num-sub-frames`. Headers too deep to write are not sent.
    if !matches!(direct, Ok(Value::Serialized(_))) {
        if let Ok(wire) = framewire::dumps(&Value::Serialized(Box::new(block))) {
            let Value::Serialized(sent) = decode(&wire, &Limits::dask_compat()).unwrap() else {
                panic!("one block")
            };
            assert_eq!(deserialize(&sent, &opts()), direct, "off the wire");
            assert_eq!(
                deserialize_owned(*sent, &opts()),
                direct,
                "off the wire, by value"
            );
        }
    }
    direct
}

#[test]
fn h17_compression_length_mismatch() {
    let r = de(
        bytes_header(vec![(
            "compression",
            Value::Array(vec![Value::Nil, Value::Nil]),
        )]),
        vec![frame(b"x")],
    );
    assert!(
        matches!(
            r,
            Err(DeserializeError::LengthMismatch {
                field: "compression",
                expected: 1,
                got: 2
            })
        ),
        "{r:?}"
    );
    let r = de(
        bytes_header(vec![("compression", Value::Array(vec![]))]),
        vec![frame(b"x")],
    );
    assert!(
        matches!(
            r,
            Err(DeserializeError::LengthMismatch {
                field: "compression",
                expected: 1,
                got: 0
            })
        ),
        "{r:?}"
    );
    // A collection's table covers all its frames.
    let r = de(
        map(vec![
            ("sub-headers", Value::Array(vec![msgpack_leaf()])),
            ("is-collection", Value::Bool(true)),
            ("frame-lengths", ints(&[1])),
            ("type-serialized", Value::str("tuple")),
            ("compression", Value::Array(vec![Value::Nil, Value::Nil])),
        ]),
        vec![frame(b"\x01")],
    );
    assert!(
        matches!(
            r,
            Err(DeserializeError::LengthMismatch {
                field: "compression",
                expected: 1,
                got: 2
            })
        ),
        "{r:?}"
    );
}

#[test]
fn h18_sub_headers_vs_frame_lengths() {
    let r = de(
        coll(vec![msgpack_leaf(), msgpack_leaf()], &[1], "tuple"),
        vec![frame(b"\x01"), frame(b"\x02")],
    );
    assert!(
        matches!(
            r,
            Err(DeserializeError::LengthMismatch {
                field: "frame-lengths",
                expected: 2,
                got: 1
            })
        ),
        "{r:?}"
    );
    let r = de(
        coll(vec![msgpack_leaf()], &[1, 0], "list"),
        vec![frame(b"\x01")],
    );
    assert!(
        matches!(
            r,
            Err(DeserializeError::LengthMismatch {
                field: "frame-lengths",
                expected: 1,
                got: 2
            })
        ),
        "{r:?}"
    );
}

#[test]
fn h19_frame_lengths_do_not_add_up() {
    for (lengths, n) in [
        (&[1i64, 1][..], 3usize),
        (&[1, 1][..], 1),
        (&[0, 0][..], 1),
        (&[2, 0][..], 1),
    ] {
        let frames = vec![frame(b"\x01"); n];
        let r = de(
            coll(vec![msgpack_leaf(), msgpack_leaf()], lengths, "tuple"),
            frames,
        );
        assert!(
            matches!(r, Err(DeserializeError::FrameLengthsMismatch { .. })),
            "{lengths:?} {n}: {r:?}"
        );
    }
    // Huge lengths saturate instead of overflowing.
    let h = map(vec![
        (
            "sub-headers",
            Value::Array(vec![msgpack_leaf(), msgpack_leaf()]),
        ),
        ("is-collection", Value::Bool(true)),
        (
            "frame-lengths",
            Value::Array(vec![Value::from(u64::MAX), Value::from(u64::MAX)]),
        ),
        ("type-serialized", Value::str("tuple")),
    ]);
    let r = de(h, vec![frame(b"\x01")]);
    assert!(
        matches!(r, Err(DeserializeError::FrameLengthsMismatch { .. })),
        "{r:?}"
    );
    // Negative lengths: a bad header field.
    let r = de(coll(vec![msgpack_leaf()], &[-1], "tuple"), vec![]);
    assert!(r.is_err(), "{r:?}");
}

/// Runs [`h20_child_nested_collections`] in a child process, so a stack
/// overflow (which aborts the whole process) is reported as a failure of
/// this test instead of killing every other test of the binary.
#[test]
fn h20_collections_nested_too_deep() {
    // Deserializing is-collection headers nested up to
    // Limits::dask_compat().max_depth (1024) on a normal 2 MiB test thread.
    child_test::run_alone("h20_child_nested_collections", |cmd| {
        cmd.env_remove("RUST_MIN_STACK");
    });
}

#[test]
#[ignore = "run in a child process by h20_collections_nested_too_deep"]
fn h20_child_nested_collections() {
    fn nested(levels: usize) -> Value {
        let mut h = msgpack_leaf();
        for _ in 0..levels {
            h = coll(vec![h], &[1], "tuple");
        }
        h
    }
    let limits = Limits::dask_compat();
    assert_eq!(limits.max_depth, 1024);
    // At the limit: fine (runs on the normal 2 MiB test thread).
    let ok = de(nested(1024), vec![frame(b"\x07")]).unwrap();
    let mut v = &ok;
    for _ in 0..1024 {
        v = &v.as_array().unwrap()[0];
    }
    assert_eq!(*v, Value::from(7u8));
    // One past it.
    let r = de(nested(1025), vec![frame(b"\x07")]);
    assert!(
        matches!(r, Err(DeserializeError::CollectionTooDeep { limit: 1024 })),
        "{r:?}"
    );
    // Far past it: still an error, no stack overflow. (5000 levels: a
    // `Value` that deep is itself dropped recursively, by Rust, not framewire.)
    let r = de(nested(5000), vec![frame(b"\x07")]);
    assert!(
        matches!(r, Err(DeserializeError::CollectionTooDeep { limit: 1024 })),
        "{r:?}"
    );
    // Strict limits stop earlier.
    let r = deserialize(
        &Block::new(Header::new(nested(65)), vec![frame(b"\x07")]),
        &DeserializeOptions::with_limits(Limits::strict()),
    );
    assert!(
        matches!(r, Err(DeserializeError::CollectionTooDeep { limit: 64 })),
        "{r:?}"
    );
}

#[test]
fn h21_unknown_type_serialized_or_serializer() {
    for kind in ["frozenset", "deque", "", "Tuple"] {
        let r = de(coll(vec![msgpack_leaf()], &[1], kind), vec![frame(b"\x01")]);
        assert!(
            matches!(
                r,
                Err(DeserializeError::InvalidHeader {
                    field: "type-serialized"
                })
            ),
            "{kind}: {r:?}"
        );
    }
    let h = map(vec![
        ("sub-headers", Value::Array(vec![])),
        ("is-collection", Value::Bool(true)),
        ("frame-lengths", Value::Array(vec![])),
        ("type-serialized", Value::from(3u8)),
    ]);
    assert!(matches!(
        de(h, vec![]),
        Err(DeserializeError::InvalidHeader {
            field: "type-serialized"
        })
    ));
    // An unknown serializer family is kept opaque, unchanged.
    let h = map(vec![("serializer", Value::str("cuda"))]);
    let block = Block::new(Header::new(h), vec![frame(b"abc"), frame(b"")]);
    assert_eq!(
        deserialize(&block, &opts()).unwrap(),
        Value::Serialized(Box::new(block.clone()))
    );
    // A dask header without type-serialized.
    let h = map(vec![
        ("serializer", Value::str("dask")),
        ("sub-header", Value::Map(vec![])),
    ]);
    assert!(matches!(
        de(h, vec![frame(b"x")]),
        Err(DeserializeError::InvalidHeader {
            field: "type-serialized"
        })
    ));
}

fn split_header(counts: &[i64], offsets: &[i64], n_frames: usize) -> Value {
    bytes_header(vec![
        ("split-num-sub-frames", ints(counts)),
        ("split-offsets", ints(offsets)),
        ("compression", Value::Array(vec![Value::Nil; n_frames])),
    ])
}

#[test]
fn h22_to_h26_split_tables() {
    let three = || vec![frame(b"ab"), frame(b"cd"), frame(b"ef")];
    // Valid: one frame of three shards.
    assert_eq!(
        de(split_header(&[3], &[0], 3), three()).unwrap(),
        Value::Bin(Bytes::from_static(b"abcdef"))
    );
    let cases: &[(&str, &[i64], &[i64])] = &[
        ("H22 lengths differ", &[3], &[0, 1]),
        ("H22 lengths differ", &[1, 2], &[0]),
        ("H23 gap", &[1, 1], &[0, 2]),
        ("H23 overlap", &[2, 1], &[0, 1]),
        ("H23 not increasing", &[1, 2], &[2, 0]),
        ("H23 starts late", &[2], &[1]),
        ("H24 past the end", &[4], &[0]),
        ("H24 past the end", &[1, 3], &[0, 1]),
        ("H24 does not cover", &[2], &[0]),
        ("H24 does not cover", &[1, 1], &[0, 1]),
        ("H26 repeats", &[1, 1, 1], &[0, 0, 0]),
        ("H26 repeats", &[3, 3], &[0, 0]),
        ("negative", &[-1, 4], &[0, 0]),
        ("negative offset", &[3], &[-1]),
    ];
    for (what, counts, offsets) in cases {
        let r = de(split_header(counts, offsets, 3), three());
        assert!(
            matches!(r, Err(DeserializeError::SplitTableInvalid { .. })),
            "{what} {counts:?} {offsets:?}: {r:?}"
        );
    }
    // Non-array split tables.
    let h = bytes_header(vec![
        ("split-num-sub-frames", Value::from(1u8)),
        ("split-offsets", ints(&[0])),
    ]);
    assert!(matches!(
        de(h, vec![frame(b"x")]),
        Err(DeserializeError::SplitTableInvalid { .. })
    ));
    let h = bytes_header(vec![("split-num-sub-frames", ints(&[1]))]);
    assert!(matches!(
        de(h, vec![frame(b"x")]),
        Err(DeserializeError::SplitTableInvalid { .. })
    ));
}

#[test]
fn h25_merged_shard_larger_than_max_frame_len() {
    let mut limits = Limits::dask_compat();
    limits.max_frame_len = 5;
    let opts = DeserializeOptions::with_limits(limits);
    let block = Block::new(
        Header::new(split_header(&[3], &[0], 3)),
        vec![frame(b"ab"), frame(b"cd"), frame(b"ef")],
    );
    let r = deserialize(&block, &opts);
    assert!(
        matches!(
            r,
            Err(DeserializeError::FrameTooLarge {
                index: 0,
                declared: 6,
                limit: 5
            })
        ),
        "{r:?}"
    );
    // Exactly at the limit is fine.
    let block = Block::new(
        Header::new(split_header(&[1, 2], &[0, 1], 3)),
        vec![frame(b"ab"), frame(b"cd"), frame(b"e")],
    );
    assert_eq!(
        deserialize(&block, &opts).unwrap(),
        Value::Bin(Bytes::from_static(b"abcde"))
    );
}

fn ndarray_header(dtype: &str, shape: &[i64], strides: &[i64], extra: Vec<(&str, Value)>) -> Value {
    let mut sub = vec![
        (
            "dtype",
            Value::Array(vec![Value::from(0u8), Value::str(dtype)]),
        ),
        ("shape", ints(shape)),
        ("strides", ints(strides)),
        ("writeable", Value::Array(vec![Value::Bool(true)])),
    ];
    sub.extend(extra);
    map(vec![
        ("sub-header", map(sub)),
        ("type", Value::str("numpy.ndarray")),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(NDARRAY_TYPE)),
        ),
        ("serializer", Value::str("dask")),
    ])
}

#[test]
fn bad_ndarray_headers_are_invalid_array() {
    let data = || Bytes::from(vec![0u8; 24]);
    // Valid: 3 × <i8, and an F-order 2 × 3 <i4.
    assert!(matches!(
        de(ndarray_header("<i8", &[3], &[8], vec![]), vec![data()]),
        Ok(Value::NdArray(_))
    ));
    let Ok(Value::NdArray(f)) = de(
        ndarray_header("<i4", &[2, 3], &[4, 8], vec![]),
        vec![data()],
    ) else {
        panic!()
    };
    assert_eq!(f.strides(), &[4, 8]);
    let bad: Vec<(&str, Value, Vec<Bytes>)> = vec![
        (
            "strides past the data",
            ndarray_header("<i8", &[3], &[16], vec![]),
            vec![data()],
        ),
        (
            "shape past the data",
            ndarray_header("<i8", &[4], &[8], vec![]),
            vec![data()],
        ),
        (
            "2-D past the data",
            ndarray_header("<i8", &[2, 2], &[8, 16], vec![]),
            vec![data()],
        ),
        (
            "negative stride",
            ndarray_header("<i8", &[3], &[-8], vec![]),
            vec![data()],
        ),
        (
            "negative shape",
            ndarray_header("<i8", &[-3], &[8], vec![]),
            vec![data()],
        ),
        (
            "shape/strides length",
            ndarray_header("<i8", &[3], &[8, 8], vec![]),
            vec![data()],
        ),
        (
            "no frame",
            ndarray_header("<i8", &[3], &[8], vec![]),
            vec![],
        ),
        (
            "two frames",
            ndarray_header("<i8", &[3], &[8], vec![]),
            vec![data(), data()],
        ),
        (
            "unsupported dtype",
            ndarray_header("<q7", &[3], &[8], vec![]),
            vec![data()],
        ),
        (
            "stride overflow",
            ndarray_header("<i8", &[3], &[i64::MAX], vec![]),
            vec![data()],
        ),
        (
            "broadcast_to does not fit",
            ndarray_header("<i8", &[3], &[8], vec![("broadcast_to", ints(&[4]))]),
            vec![data()],
        ),
        (
            "broadcast past the data",
            ndarray_header(
                "<i8",
                &[1, 4],
                &[0, 8],
                vec![("broadcast_to", ints(&[5, 4]))],
            ),
            vec![data()],
        ),
    ];
    for (what, h, frames) in bad {
        let r = de(h, frames);
        assert!(
            matches!(r, Err(DeserializeError::InvalidArray { .. })),
            "{what}: {r:?}"
        );
    }
    // A missing writeable / dtype also refused.
    let h = map(vec![
        (
            "sub-header",
            map(vec![("shape", ints(&[3])), ("strides", ints(&[8]))]),
        ),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(NDARRAY_TYPE)),
        ),
        ("serializer", Value::str("dask")),
    ]);
    assert!(matches!(
        de(h, vec![data()]),
        Err(DeserializeError::InvalidArray { .. })
    ));
}

// ---------------------------------------------------------------------------
// CollectionView: O(1) element access
// ---------------------------------------------------------------------------

#[test]
fn collection_view_element_equals_full_deserialize_on_1e5_elements() {
    const N: usize = 100_000;
    let opaque = |i: usize| {
        let frames: Vec<Bytes> = (0..i % 3)
            .map(|k| Bytes::from(format!("{i}-{k}")))
            .collect();
        Value::Serialized(Box::new(Block::new(
            Header::new(Value::map_of([("serializer", "pickle".into())])),
            frames,
        )))
    };
    let items: Vec<Value> = (0..N)
        .map(|i| match i % 4 {
            0 => Value::from(i as u64),
            1 => Value::ToSerialize(Box::new(Value::Bin(Bytes::from(format!("b{i}"))))),
            2 => opaque(i),
            _ => Value::Array(vec![Value::from(i as u64), Value::str("x")]),
        })
        .collect();
    let block = serialize::serialize(&Value::Array(items), &{
        let mut o = SerializeOptions::default();
        o.iterate = IterateCollection::Always;
        o
    })
    .unwrap();
    let all = deserialize(&block, &opts()).unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), N);
    let view = CollectionView::new(block.header().map(), block.frames()).unwrap();
    assert_eq!(view.len(), N);
    assert_eq!(view.kind(), serialize::CollectionKind::Tuple);
    let mut touched = 0usize;
    for i in (0..N).rev() {
        let (h, f) = view.element(i);
        touched += f.len();
        let one = deserialize(&Block::new(Header::new(h.clone()), f.to_vec()), &opts()).unwrap();
        assert_eq!(one, all[i], "element {i}");
        if i % 4 == 2 {
            // Opaque elements: the very frames, in order.
            let Value::Serialized(b) = &all[i] else {
                panic!()
            };
            assert_eq!(f.len(), i % 3);
            for (x, y) in f.iter().zip(b.frames()) {
                assert_eq!(x.as_ptr(), y.as_ptr());
            }
        }
    }
    assert_eq!(touched, block.frames().len());
    // Lookups in any order (each is two indexings into the prefix sums
    // `CollectionView::new` builds once: no scan per lookup).
    let mut sum = 0usize;
    for i in 0..N {
        sum += view.element((i * 7919) % N).1.len();
    }
    assert_eq!(sum, block.frames().len());
}

/// A collection whose `compression` list holds integers, and split tables
/// with a non-integer: refused the same way whether the header is read as a
/// map or in place (`de` checks both).
#[test]
fn h17_collection_tables_of_the_wrong_types() {
    let leaf = msgpack_leaf();
    let mut h = coll(vec![leaf.clone(), leaf], &[1, 1], "tuple");
    let Value::Map(entries) = &mut h else {
        unreachable!()
    };
    entries.push((Value::str("compression"), ints(&[1, 2])));
    assert!(de(h, vec![frame(b"\x01"), frame(b"\x02")]).is_err());

    let mut h = coll(vec![msgpack_leaf()], &[1], "tuple");
    let Value::Map(entries) = &mut h else {
        unreachable!()
    };
    entries.push((
        Value::str("split-num-sub-frames"),
        Value::Array(vec![Value::str("1")]),
    ));
    entries.push((Value::str("split-offsets"), ints(&[0])));
    assert!(de(h, vec![frame(b"\x01")]).is_err());
}

// ---------------------------------------------------------------------------
// A list of bytes deserializes packed (Value::BinArray)
// ---------------------------------------------------------------------------

/// `n` distinct byte strings of 1 to 9 bytes, each its own allocation.
fn bins(n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| {
            Bytes::from(
                (0..=(i % 9) as u8)
                    .map(|b| b ^ i as u8)
                    .collect::<Vec<u8>>(),
            )
        })
        .collect()
}

fn boxed(items: &[Bytes]) -> Value {
    Value::Array(items.iter().cloned().map(Value::Bin).collect())
}

fn iterate(mode: IterateCollection) -> SerializeOptions {
    let mut o = SerializeOptions::default();
    o.iterate = mode;
    o
}

/// `deserialize` of `block`, checked against `deserialize_owned` of it (its
/// frames moved into the value): the same value in the same form, each
/// item over the same memory.
fn both(block: &Block, opts: &DeserializeOptions) -> Value {
    let got = deserialize(block, opts).unwrap();
    let owned = deserialize_owned(block.clone(), opts).unwrap();
    assert_eq!(owned, got);
    let form = |v: &Value| {
        v.as_bin_array().map(|p| {
            let span = p.as_contiguous().map(|c| (c.as_ptr(), c.len()));
            let items: Vec<_> = p.iter().map(|b| (b.as_ptr(), b.len())).collect();
            (span, items)
        })
    };
    assert_eq!(form(&owned), form(&got), "by value, in another form");
    got
}

/// Under `Always`, a list of 32 bytes or more comes back as a `BinArray` of
/// views of its frames, equal to the boxed array; fewer stay boxed.
#[test]
fn a_list_of_bytes_deserializes_packed_as_views_of_its_frames() {
    for n in [0, 1, 31, 32, 1000] {
        let items = bins(n);
        let block =
            serialize::serialize(&boxed(&items), &iterate(IterateCollection::Always)).unwrap();
        assert_eq!(block.frames().len(), n);
        let got = both(&block, &opts());
        assert_eq!(got, boxed(&items), "n = {n}");
        assert_eq!(boxed(&items), got, "n = {n}");
        assert_eq!(got.array_len(), Some(n));
        match got.as_bin_array() {
            Some(packed) => {
                assert!(n >= 32, "packed under 32 items: {n}");
                // No backing buffer: the frames as they are, never joined.
                assert!(packed.as_contiguous().is_none());
                for (i, (b, f)) in packed.iter().zip(block.frames()).enumerate() {
                    assert_eq!(b.as_ptr(), f.as_ptr(), "item {i} copied");
                    assert_eq!(got.array_item(i), Some(Value::Bin(items[i].clone())));
                }
                assert_eq!(got.array_item(n), None);
            }
            None => assert!(n < 32, "not packed: {n}"),
        }
    }
    // A mixed list stays boxed, whichever element breaks the run.
    let mut mixed = boxed(&bins(40));
    if let Value::Array(a) = &mut mixed {
        a[35] = Value::from(7u8);
    }
    let block = serialize::serialize(&mixed, &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts());
    assert!(got.as_bin_array().is_none());
    assert_eq!(got, mixed);
    // Not equal to another array, nor to an array of other values.
    let packed = Value::from(bins(40));
    assert_ne!(packed, Value::from(bins(41)));
    assert_ne!(packed, mixed);
    assert_ne!(packed, Value::Array(vec![Value::Nil; 40]));
}

/// The packed form is the same value as the boxed one everywhere it goes:
/// msgpack bytes, the serialized block under every mode, pickle, typed serde.
#[test]
fn a_packed_list_of_bytes_encodes_and_serializes_as_the_boxed_one() {
    let items = bins(100);
    let (packed, boxed) = (Value::from(items.clone()), boxed(&items));
    // In frame 0 (msgpack), and in a message.
    let msg = |v: &Value| Value::map_of([("op", Value::str("x")), ("data", v.clone())]);
    assert_eq!(
        framewire::dumps(&msg(&packed)).unwrap(),
        framewire::dumps(&msg(&boxed)).unwrap()
    );
    for mode in [
        IterateCollection::Never,
        IterateCollection::Auto,
        IterateCollection::Always,
    ] {
        let (p, b) = (
            serialize::serialize(&packed, &iterate(mode)).unwrap(),
            serialize::serialize(&boxed, &iterate(mode)).unwrap(),
        );
        assert_eq!(p.header().map(), b.header().map(), "{mode:?}");
        assert_eq!(p.frames(), b.frames(), "{mode:?}");
        if mode == IterateCollection::Always {
            // One frame an item, each the item itself (no copy).
            for (f, i) in p.frames().iter().zip(&items) {
                assert_eq!(f.as_ptr(), i.as_ptr());
            }
        }
        // And it comes back the same value.
        assert_eq!(both(&p, &opts()), boxed);
    }
    // Re-encoding what was deserialized packed gives the same bytes again.
    let block = serialize::serialize(&boxed, &iterate(IterateCollection::Always)).unwrap();
    let back = both(&block, &opts());
    assert!(back.as_bin_array().is_some());
    assert_eq!(
        framewire::dumps(&msg(&back)).unwrap(),
        framewire::dumps(&msg(&boxed)).unwrap()
    );
    // Typed serde reads it as bytes, views of the items.
    let typed: Vec<framewire::typed::Bin> = framewire::from_value(back.clone()).unwrap();
    assert_eq!(typed.len(), items.len());
    for ((t, i), f) in typed.iter().zip(&items).zip(block.frames()) {
        assert_eq!(t.as_bytes(), i);
        assert_eq!(
            t.as_bytes().as_ptr(),
            f.as_ptr(),
            "typed serde copied an item"
        );
    }
    let typed_boxed: Vec<framewire::typed::Bin> = framewire::from_value(boxed.clone()).unwrap();
    assert_eq!(typed, typed_boxed);
    assert_eq!(framewire::to_value(&back).unwrap(), boxed);
    assert_eq!(framewire::to_value(&packed).unwrap(), boxed);
}

/// Items back to back in a backing buffer are kept as one slice of it and
/// their ends; items merely adjacent in memory that no backing buffer holds
/// are never joined.
#[test]
fn packed_bytes_span_a_backing_buffer_only() {
    let wire = Bytes::from((0..=255u8).cycle().take(4000).collect::<Vec<u8>>());
    let items: Vec<Bytes> = (0..100)
        .map(|i| wire.slice(i * 40..i * 40 + 1 + i % 40))
        .collect();
    // Adjacent: item i ends where item i + 1 starts.
    let adjacent: Vec<Bytes> = {
        let mut at = 0;
        // Some empty, none first.
        (1..101)
            .map(|i| {
                let b = wire.slice(at..at + i % 7);
                at += i % 7;
                b
            })
            .collect()
    };
    let block =
        serialize::serialize(&boxed(&adjacent), &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts_backed(&wire));
    let packed = got.as_bin_array().unwrap();
    let span = packed.as_contiguous().expect("one slice of the backing");
    assert_eq!(span.as_ptr(), wire.as_ptr());
    assert_eq!(span.len(), adjacent.iter().map(Bytes::len).sum::<usize>());
    assert_eq!(got, boxed(&adjacent));
    assert_eq!(packed.to_vec(), adjacent);
    for (i, b) in packed.iter().enumerate() {
        assert_eq!(b.as_ptr(), adjacent[i].as_ptr(), "item {i}");
    }
    // The same frames without their backing buffer: kept as they are.
    let got = both(&block, &opts());
    assert!(got.as_bin_array().unwrap().as_contiguous().is_none());
    assert_eq!(got, boxed(&adjacent));
    // Not back to back: kept as they are, even with the backing.
    let block = serialize::serialize(&boxed(&items), &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts_backed(&wire));
    assert!(got.as_bin_array().unwrap().as_contiguous().is_none());
    assert_eq!(got, boxed(&items));
    // Back to back for a while, then not (or not bytes): the items seen so
    // far become views of their own, the same memory.
    let mut broken = adjacent[..50].to_vec();
    broken.push(wire.slice(3990..3995));
    broken.extend(adjacent[50..].iter().cloned());
    let block = serialize::serialize(&boxed(&broken), &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts_backed(&wire));
    let packed = got.as_bin_array().unwrap();
    assert!(packed.as_contiguous().is_none());
    assert_eq!(got, boxed(&broken));
    for (i, b) in packed.iter().enumerate() {
        assert_eq!(b.as_ptr(), broken[i].as_ptr(), "item {i}");
    }
    let mut mixed = boxed(&adjacent);
    if let Value::Array(a) = &mut mixed {
        a[60] = Value::str("x");
    }
    let block = serialize::serialize(&mixed, &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts_backed(&wire));
    assert!(got.as_bin_array().is_none());
    assert_eq!(got, mixed);
    // Fewer than 32 back to back: boxed, the same memory.
    let block =
        serialize::serialize(&boxed(&adjacent[..31]), &iterate(IterateCollection::Always)).unwrap();
    let got = both(&block, &opts_backed(&wire));
    assert_eq!(got, boxed(&adjacent[..31]));
    for (x, y) in got.as_array().unwrap().iter().zip(&adjacent) {
        assert!(matches!(x, Value::Bin(b) if b.as_ptr() == y.as_ptr()));
    }
    // Equal across the two forms.
    let spanned = deserialize(
        &serialize::serialize(&boxed(&adjacent), &iterate(IterateCollection::Always)).unwrap(),
        &opts_backed(&wire),
    )
    .unwrap();
    assert_eq!(spanned, Value::from(adjacent.clone()));
    assert_eq!(Value::from(adjacent), spanned);
}
