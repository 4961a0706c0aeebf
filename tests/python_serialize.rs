//! Live serialize-layer interop with the real Python `distributed` 2026.8.0
//! (`tests/dask/serialize_peer.py`). These tests FAIL when Python Dask is
//! missing: they never skip.
//!
//! * framewire → Python: values built with framewire (bytes, arrays of many
//!   dtypes and layouts, mixed collections under every `IterateCollection`
//!   mode, a sharded 200 KB payload) wrapped in `Value::ToSerialize`, encoded
//!   with `dumps` + `Envelope`, piped as one stream to the peer, which splits
//!   it itself and prints `py_json(decode(frames, deserialize=True))` per
//!   message; each line must equal the tagged JSON framewire expects.
//! * Python → framewire: the peer writes messages made by
//!   `distributed.protocol.dumps` (C / F-order / broadcast / 0-d / strided
//!   arrays, bytes, collections, shards) plus what Python's own `loads` returns
//!   for them; framewire decodes the stream with `Envelope::decode` + `loads` +
//!   `deserialize_blocks` and must agree on dtype, logical shape, C-order
//!   bytes, bytes and collection structure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{deserialize, DeserializeOptions, SerializeOptions};
use framewire::{Block, Envelope, Header, IterateCollection, Limits, NdArray, Value};
use serde_json::{json, Value as J};
use sha2::{Digest, Sha256};

#[path = "support/dask_python.rs"]
mod dask_python;
use dask_python::python;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn peer() -> PathBuf {
    root().join("tests/dask/serialize_peer.py")
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// gen_captures.py's `_blob`: inline hex up to 512 bytes, else length + sha256.
fn blob(tag: &str, b: &[u8]) -> J {
    if b.len() <= 512 {
        json!({ tag: hex::encode(b) })
    } else {
        json!({ tag: null, "len": b.len(), "sha256": sha(b) })
    }
}

fn nd_json(dtype: &str, shape: &[u64], c_order: &[u8]) -> J {
    let mut body = json!({ "dtype": dtype, "shape": shape });
    if c_order.len() <= 512 {
        body["data_hex"] = json!(hex::encode(c_order));
    } else {
        body["nbytes"] = json!(c_order.len());
        body["data_sha256"] = json!(sha(c_order));
    }
    json!({ "$ndarray": body })
}

/// What Python's `py_json` prints for a value framewire sent (msgpack arrays
/// and iterated collections come back as tuples in Python).
fn py(v: &Value) -> J {
    match v {
        Value::Nil => J::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => match i.as_i64() {
            Some(x) => json!(x),
            None => json!(i.as_u64().unwrap()),
        },
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(&**s),
        Value::Bin(b) => blob("$bytes", b),
        Value::Array(a) => json!({ "$tuple": a.iter().map(py).collect::<Vec<_>>() }),
        Value::IntArray(a) => json!({ "$tuple": a }),
        Value::BinArray(a) => {
            json!({ "$tuple": a.iter().map(|b| py(&Value::Bin(b))).collect::<Vec<_>>() })
        }
        Value::Map(m) => {
            if m.iter().all(|(k, _)| k.as_str().is_some()) {
                J::Object(
                    m.iter()
                        .map(|(k, x)| (k.as_str().unwrap().to_owned(), py(x)))
                        .collect(),
                )
            } else {
                json!({ "$dict": m.iter().map(|(k, x)| json!([py(k), py(x)])).collect::<Vec<_>>() })
            }
        }
        Value::ToSerialize(x) => py(x),
        Value::NdArray(a) => nd_json(a.dtype(), a.logical_shape(), &a.to_c_order()),
        other => panic!("no Python form for {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Building arrays
// ---------------------------------------------------------------------------

fn le_bytes<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Bytes {
    Bytes::from(xs.iter().flat_map(|&x| f(x)).collect::<Vec<u8>>())
}

fn c_array(dtype: &str, shape: &[u64], data: Bytes) -> Value {
    Value::NdArray(Box::new(NdArray::from_c_order(dtype, shape, data).unwrap()))
}

fn ints(xs: &[u64]) -> Value {
    Value::Array(xs.iter().map(|&x| Value::from(x)).collect())
}

const NDARRAY_TYPE: &[u8] =
    b"\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94.";

/// An array with explicit strides (F-order, broadcast): `NdArray` has no
/// public constructor taking strides, so it is built the way a receiver
/// gets one, by deserializing a Dask `numpy.ndarray` header.
fn strided_array(
    dtype: &str,
    shape: &[u64],
    strides: &[u64],
    broadcast_to: Option<&[u64]>,
    writeable: bool,
    data: Bytes,
) -> Value {
    let mut sub = vec![
        (
            "dtype",
            Value::Array(vec![Value::from(0u8), Value::str(dtype)]),
        ),
        ("shape", ints(shape)),
        ("strides", ints(strides)),
        ("writeable", Value::Array(vec![Value::Bool(writeable)])),
    ];
    if let Some(b) = broadcast_to {
        sub.push(("broadcast_to", ints(b)));
    }
    let header = Value::map_of([
        ("sub-header", Value::map_of(sub)),
        ("type", Value::str("numpy.ndarray")),
        (
            "type-serialized",
            Value::Bin(Bytes::from_static(NDARRAY_TYPE)),
        ),
        ("serializer", Value::str("dask")),
    ]);
    let v = deserialize(
        &Block::new(Header::new(header), vec![data]),
        &DeserializeOptions::with_limits(Limits::dask_compat()),
    )
    .unwrap();
    assert!(matches!(v, Value::NdArray(_)), "{v:?}");
    v
}

fn ser(v: Value) -> Value {
    Value::ToSerialize(Box::new(v))
}

fn msg(entries: Vec<(&str, Value)>) -> Value {
    let mut all = vec![("op", Value::str("x"))];
    all.extend(entries);
    Value::map_of(all)
}

fn with_mode(mode: IterateCollection) -> SerializeOptions {
    {
        let mut o = SerializeOptions::default();
        o.iterate = mode;
        o
    }
}

// ---------------------------------------------------------------------------
// framewire -> Python
// ---------------------------------------------------------------------------

#[test]
fn python_loads_what_framewire_serializes() {
    let mut sends: Vec<(String, Value, SerializeOptions, J)> = Vec::new();
    let mut add = |name: &str, m: Value, opts: SerializeOptions, expected: J| {
        sends.push((name.to_owned(), m, opts, expected));
    };

    // Bytes, including empty.
    let m = msg(vec![
        ("b", ser(Value::Bin(Bytes::from_static(b"hello world")))),
        ("e", ser(Value::Bin(Bytes::new()))),
    ]);
    add(
        "bytes",
        m,
        Default::default(),
        json!({"op": "x", "b": {"$bytes": "68656c6c6f20776f726c64"}, "e": {"$bytes": ""}}),
    );

    // Arrays of several dtypes; expected bytes written out independently.
    let f8: Vec<f64> = (0..6).map(|i| i as f64 * 1.5).collect();
    let f8_bytes = le_bytes(&f8, f64::to_le_bytes);
    let arrays: Vec<(&str, Value, J)> = vec![
        (
            "f8_2d",
            c_array("<f8", &[2, 3], f8_bytes.clone()),
            nd_json("<f8", &[2, 3], &f8_bytes),
        ),
        (
            "u1",
            c_array("|u1", &[5], Bytes::from_static(&[0, 1, 2, 254, 255])),
            nd_json("|u1", &[5], &[0, 1, 2, 254, 255]),
        ),
        (
            "i4",
            c_array(
                "<i4",
                &[4],
                le_bytes(&[-1i32, 0, 7, i32::MAX], i32::to_le_bytes),
            ),
            nd_json(
                "<i4",
                &[4],
                &le_bytes(&[-1i32, 0, 7, i32::MAX], i32::to_le_bytes),
            ),
        ),
        (
            "c16",
            c_array(
                "<c16",
                &[2],
                le_bytes(&[1.0f64, 2.0, -0.5, 0.0], f64::to_le_bytes),
            ),
            nd_json(
                "<c16",
                &[2],
                &le_bytes(&[1.0f64, 2.0, -0.5, 0.0], f64::to_le_bytes),
            ),
        ),
        (
            "be_i4",
            c_array(">i4", &[3], le_bytes(&[1i32, 2, -3], i32::to_be_bytes)),
            nd_json(">i4", &[3], &le_bytes(&[1i32, 2, -3], i32::to_be_bytes)),
        ),
        (
            "datetime_ns",
            c_array(
                "<M8[ns]",
                &[2],
                le_bytes(&[0i64, 1_000_000_000_000_000_000], i64::to_le_bytes),
            ),
            nd_json(
                "<M8[ns]",
                &[2],
                &le_bytes(&[0i64, 1_000_000_000_000_000_000], i64::to_le_bytes),
            ),
        ),
        (
            "zero_d",
            c_array("<f8", &[], le_bytes(&[2.5f64], f64::to_le_bytes)),
            nd_json("<f8", &[], &le_bytes(&[2.5f64], f64::to_le_bytes)),
        ),
        (
            "empty",
            c_array("<i8", &[0, 3], Bytes::new()),
            nd_json("<i8", &[0, 3], &[]),
        ),
        (
            // F-order 2 x 3 whose logical value is arange(6).reshape(2, 3).
            "fortran_i4",
            strided_array(
                "<i4",
                &[2, 3],
                &[4, 8],
                None,
                true,
                le_bytes(&[0i32, 3, 1, 4, 2, 5], i32::to_le_bytes),
            ),
            nd_json(
                "<i4",
                &[2, 3],
                &le_bytes(&[0i32, 1, 2, 3, 4, 5], i32::to_le_bytes),
            ),
        ),
        (
            // np.broadcast_to(arange(3), (4, 3)), read-only as numpy makes it.
            "broadcast_i8",
            strided_array(
                "<i8",
                &[1, 3],
                &[0, 8],
                Some(&[4, 3]),
                false,
                le_bytes(&[0i64, 1, 2], i64::to_le_bytes),
            ),
            nd_json(
                "<i8",
                &[4, 3],
                &le_bytes(&[0i64, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], i64::to_le_bytes),
            ),
        ),
    ];
    for (name, a, expected) in arrays {
        // Wrapped in Serialize, and bare (a bare NdArray is serialized too).
        add(
            name,
            msg(vec![("a", ser(a.clone()))]),
            Default::default(),
            json!({"op": "x", "a": expected.clone()}),
        );
        add(
            &format!("{name} bare"),
            msg(vec![("a", a)]),
            Default::default(),
            json!({"op": "x", "a": expected}),
        );
    }

    // Mixed collections under every mode.
    let arr = c_array("<i8", &[3], le_bytes(&[1i64, 2, 3], i64::to_le_bytes));
    let big = Value::Bin(Bytes::from(vec![b'z'; 20_000]));
    let tuple = Value::Array(vec![
        arr.clone(),
        Value::Bin(Bytes::from_static(b"raw")),
        Value::str("s"),
        Value::from(42u8),
        Value::Float(-0.25),
        Value::Nil,
        Value::Array(vec![Value::from(1u8), Value::from(-2i8)]),
        Value::map_of([("k", Value::Bin(Bytes::from_static(b"v")))]),
        Value::Map(vec![(Value::from(1u8), Value::str("one"))]),
    ]);
    let dict = Value::map_of([
        ("arr", arr.clone()),
        (
            "list",
            Value::Array(vec![Value::str("a"), Value::Bool(true)]),
        ),
        ("big", big.clone()),
    ]);
    // Out-of-band values one level down (Never refuses these; see below).
    let deep = Value::Array(vec![
        Value::Array(vec![arr.clone(), big.clone()]),
        Value::map_of([("x", arr.clone())]),
    ]);
    for mode in [
        IterateCollection::Never,
        IterateCollection::Auto,
        IterateCollection::Always,
    ] {
        add(
            &format!("tuple {mode:?}"),
            msg(vec![("t", ser(tuple.clone()))]),
            with_mode(mode),
            json!({"op": "x", "t": py(&tuple)}),
        );
        add(
            &format!("dict {mode:?}"),
            msg(vec![("d", ser(dict.clone()))]),
            with_mode(mode),
            json!({"op": "x", "d": py(&dict)}),
        );
        if mode != IterateCollection::Never {
            add(
                &format!("deep {mode:?}"),
                msg(vec![("d", ser(deep.clone()))]),
                with_mode(mode),
                json!({"op": "x", "d": py(&deep)}),
            );
        } else {
            let r = framewire::dumps_with(&msg(vec![("d", ser(deep.clone()))]), &with_mode(mode));
            assert_eq!(r, Err(framewire::EncodeError::OutOfBandInBlob));
        }
        // Packed integer arrays: at the top (iterated, as Dask iterates a
        // Serialize'd tuple) and inside a dict (a blob unless Always).
        let packed = Value::from((-40i64..40).chain([i64::MAX, i64::MIN]).collect::<Vec<_>>());
        let holder = Value::map_of([("p", packed.clone()), ("arr", arr.clone())]);
        add(
            &format!("packed ints {mode:?}"),
            msg(vec![("t", ser(packed.clone())), ("d", ser(holder.clone()))]),
            with_mode(mode),
            json!({"op": "x", "t": py(&packed), "d": py(&holder)}),
        );
        // Packed bytes arrays: at the top (iterated) and inside a dict.
        let bins = Value::from(
            (0..40u64)
                .map(|i| Bytes::from(i.to_le_bytes()[..(i % 9) as usize].to_vec()))
                .collect::<Vec<_>>(),
        );
        let holder = Value::map_of([("b", bins.clone()), ("n", Value::Nil)]);
        add(
            &format!("packed bytes {mode:?}"),
            msg(vec![("t", ser(bins.clone())), ("d", ser(holder.clone()))]),
            with_mode(mode),
            json!({"op": "x", "t": py(&bins), "d": py(&holder)}),
        );
        // Scalars under Serialize go through the msgpack family.
        add(
            &format!("scalars {mode:?}"),
            msg(vec![
                ("i", ser(Value::from(7u8))),
                ("s", ser(Value::str("text"))),
                ("n", ser(Value::Nil)),
            ]),
            with_mode(mode),
            json!({"op": "x", "i": 7, "s": "text", "n": null}),
        );
    }
    // Serialize nested inside a Serialize'd collection, and in frame 0 lists.
    let nested = Value::Array(vec![
        ser(Value::Bin(Bytes::from_static(b"x"))),
        Value::from(1u8),
    ]);
    add(
        "nested serialize",
        msg(vec![("n", ser(nested.clone()))]),
        Default::default(),
        json!({"op": "x", "n": py(&nested)}),
    );
    let frame0 = msg(vec![(
        "tasks",
        Value::Array(vec![
            Value::map_of([
                ("key", Value::Array(vec![Value::str("k"), Value::from(0u8)])),
                ("data", ser(arr.clone())),
            ]),
            Value::map_of([
                ("key", Value::Array(vec![Value::str("k"), Value::from(1u8)])),
                ("data", arr.clone()),
            ]),
        ]),
    )]);
    add(
        "frame0 nesting",
        frame0.clone(),
        Default::default(),
        py(&frame0),
    );

    // 200 KB payloads cut into 64 KiB shards.
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let floats: Vec<f64> = (0..25_000).map(|i| i as f64 / 7.0).collect();
    let float_bytes = le_bytes(&floats, f64::to_le_bytes);
    let sharded = msg(vec![
        ("blob", ser(Value::Bin(Bytes::from(payload.clone())))),
        ("arr", ser(c_array("<f8", &[25_000], float_bytes.clone()))),
        (
            "both",
            ser(Value::Array(vec![
                Value::Bin(Bytes::from(payload.clone())),
                Value::from(1u8),
            ])),
        ),
    ]);
    let expected = json!({
        "op": "x",
        "blob": blob("$bytes", &payload),
        "arr": nd_json("<f8", &[25_000], &float_bytes),
        "both": {"$tuple": [blob("$bytes", &payload), 1]},
    });
    let mut shard_opts = SerializeOptions::default();
    shard_opts.shard_size = 64 << 10;
    add("sharded", sharded, shard_opts, expected);

    // One stream, every message enveloped.
    let mut stream = Vec::new();
    let mut names = Vec::new();
    let mut expected = Vec::new();
    for (name, m, opts, exp) in sends {
        let frames = framewire::dumps_with(&m, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "sharded" {
            // 200 000 bytes in 65 536-byte shards: 4 shards, three times.
            let big_frames = frames.iter().filter(|f| f.len() == 65_536).count();
            assert!(
                big_frames >= 9,
                "{name}: not sharded ({} frames)",
                frames.len()
            );
        }
        stream.extend_from_slice(&Envelope::new(frames).unwrap().to_bytes());
        names.push(name);
        expected.push(exp);
    }
    let mut child = Command::new(python())
        .arg(peer())
        .arg("consume")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serialize_peer.py");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&stream));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "serialize_peer.py consume failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<J> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), names.len(), "one line per message");
    let mut failures = Vec::new();
    for ((name, got), exp) in names.iter().zip(&lines).zip(&expected) {
        if got != exp {
            failures.push(format!("{name}:\n  python  {got}\n  expected {exp}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} messages differ:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Python -> framewire
// ---------------------------------------------------------------------------

/// Whether a framewire value is what Python's `loads` returned (tagged JSON).
fn check(got: &Value, exp: &J, path: &str) -> Result<(), String> {
    let fail = |why: &str| -> Result<(), String> {
        Err(format!(
            "{path}: {why}\n  got      {got:?}\n  expected {exp}"
        ))
    };
    let ok = |c: bool, why: &str| if c { Ok(()) } else { fail(why) };
    let blob_ok = |b: &[u8], tag: &str| match exp.get(tag) {
        Some(J::String(h)) => *h == hex::encode(b),
        Some(J::Null) => {
            exp["len"].as_u64() == Some(b.len() as u64) && exp["sha256"].as_str() == Some(&sha(b))
        }
        _ => false,
    };
    match got {
        Value::Nil => ok(exp.is_null(), "nil"),
        Value::Bool(b) => ok(*exp == J::Bool(*b), "bool"),
        Value::Int(i) => ok(
            exp.as_i64().map(i128::from) == Some(i.as_i128())
                || exp.as_u64().map(i128::from) == Some(i.as_i128()),
            "int",
        ),
        Value::Float(f) => ok(exp.as_f64() == Some(*f), "float"),
        Value::Str(s) => ok(exp.as_str() == Some(&**s), "str"),
        Value::Bin(b) => ok(blob_ok(b, "$bytes"), "bytes"),
        Value::BinArray(a) => check(&Value::Array(a.iter().map(Value::Bin).collect()), exp, path),
        Value::Array(items) => {
            let js = match exp {
                J::Array(a) => a,
                J::Object(o) if o.len() == 1 && o.contains_key("$tuple") => {
                    o["$tuple"].as_array().unwrap()
                }
                _ => return fail("not a sequence"),
            };
            if js.len() != items.len() {
                return fail("length");
            }
            for (i, (x, y)) in items.iter().zip(js).enumerate() {
                check(x, y, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::IntArray(items) => {
            let js = match exp {
                J::Array(a) => a,
                J::Object(o) if o.len() == 1 && o.contains_key("$tuple") => {
                    o["$tuple"].as_array().unwrap()
                }
                _ => return fail("not a sequence"),
            };
            ok(
                js.iter().map(J::as_i64).collect::<Vec<_>>()
                    == items.iter().map(|&x| Some(x)).collect::<Vec<_>>(),
                "packed ints",
            )
        }
        Value::Map(entries) => {
            let Some(o) = exp.as_object() else {
                return fail("not a dict");
            };
            if o.len() != entries.len() {
                return fail("length");
            }
            for ((k, v), (jk, jv)) in entries.iter().zip(o) {
                if k.as_str() != Some(jk.as_str()) {
                    return fail("key");
                }
                check(v, jv, &format!("{path}.{jk}"))?;
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
                (_, Some(s)) => ok(s.as_str() == Some(&sha(&c)), "C-order sha256"),
                _ => fail("no data"),
            }
        }
        // Dask pickles str / int elements of a collection (serializers
        // ("dask", "pickle")); framewire never unpickles: kept opaque.
        Value::Serialized(b) => ok(
            b.header().get("serializer").and_then(Value::as_str) == Some("pickle"),
            "opaque block that is not pickle",
        ),
        _ => fail("unexpected variant"),
    }
}

fn find<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or_else(|| panic!("no {key} in {v:?}"))
}

fn nd(v: &Value) -> &NdArray {
    match v {
        Value::NdArray(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

#[test]
fn framewire_deserializes_what_python_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = dir.path().join("expected.json");
    let out = Command::new(python())
        .arg(peer())
        .arg("produce")
        .arg(&sidecar)
        .output()
        .expect("run serialize_peer.py produce");
    assert!(
        out.status.success(),
        "serialize_peer.py produce failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<J> =
        serde_json::from_str(&std::fs::read_to_string(&sidecar).unwrap()).unwrap();
    let wire = Bytes::from(out.stdout);
    let limits = Limits::dask_compat();
    let mut opts = DeserializeOptions::with_limits(limits.clone());
    opts.backing = vec![wire.clone()];
    let inside = |b: &[u8]| {
        let (p, w) = (b.as_ptr() as usize, wire.as_ptr() as usize);
        p >= w && p + b.len() <= w + wire.len()
    };

    let mut pos = 0;
    let mut decoded = Vec::new();
    while pos < wire.len() {
        let (env, used) = Envelope::decode(&wire.slice(pos..), &limits).unwrap();
        pos += used;
        let value = deserialize_blocks(decode(env.frames(), &limits).unwrap(), &opts).unwrap();
        decoded.push((env.frames().len(), value));
    }
    assert_eq!(
        decoded.len(),
        expected.len(),
        "one message per sidecar entry"
    );
    let mut failures = Vec::new();
    let mut by_name = std::collections::HashMap::new();
    for ((n_frames, value), exp) in decoded.iter().zip(&expected) {
        let name = exp["name"].as_str().unwrap();
        assert_eq!(exp["n_frames"].as_u64(), Some(*n_frames as u64), "{name}");
        if let Err(e) = check(value, &exp["value"], name) {
            failures.push(e);
        }
        by_name.insert(name.to_owned(), value.clone());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // Layouts are kept as sent, and the data is the wire buffer itself.
    let f = nd(find(&by_name["fortran_i4"], "a"));
    assert_eq!(
        (f.shape(), f.strides()),
        (&[2u64, 3][..], &[4u64, 8][..]),
        "F-order kept"
    );
    assert!(inside(f.data()));
    let b = nd(find(&by_name["broadcast_i8"], "a"));
    assert_eq!(
        (b.shape(), b.strides(), b.broadcast_to()),
        (&[1u64, 3][..], &[0u64, 8][..], Some(&[4u64, 3][..]))
    );
    assert!(!b.writeable());
    assert_eq!(
        b.data().len(),
        24,
        "a broadcast array sends its base row only"
    );
    // Long integer arrays in msgpack blobs come back packed; a short one, or
    // one with an integer above i64, as a plain array.
    let ints = &by_name["msgpack_ints"];
    let small: Vec<i64> = (-50..50).collect();
    assert_eq!(find(ints, "small").as_int_array(), Some(&small[..]));
    assert_eq!(
        find(ints, "wide").as_int_array().map(<[i64]>::len),
        Some(40)
    );
    assert_eq!(find(ints, "over").array_len(), Some(41));
    assert!(find(ints, "over").as_array().is_some());
    assert!(find(ints, "short").as_array().is_some());
    assert_eq!(
        find(find(ints, "nested"), "n").as_int_array(),
        Some(&(0..40).collect::<Vec<i64>>()[..])
    );
    let z = nd(find(&by_name["zero_d_i2"], "a"));
    assert_eq!((z.shape(), z.strides()), (&[][..], &[][..]));
    let f2 = nd(find(&by_name["dtypes"], "f2d"));
    assert_eq!(f2.strides(), &[8, 24]);
    // Shards of the 10 000-byte array were merged in place (backing = wire).
    let big = nd(find(&by_name["sharded"], "big"));
    assert!(inside(big.data()), "sharded array copied");
    let Value::Bin(blob) = find(&by_name["sharded"], "blob") else {
        panic!()
    };
    assert!(inside(blob), "sharded bytes copied");
    // A long list of bytes, one frame each, back to back in the wire buffer:
    // packed into one slice of it.
    let long = find(&by_name["bytes_list_long"], "l")
        .as_bin_array()
        .expect("packed");
    assert_eq!(long.len(), 40);
    assert!(inside(long.as_contiguous().expect("one slice of the wire")));
    assert_eq!(long.get(3).as_deref(), Some(&3u64.to_le_bytes()[..]));
    assert!(find(&by_name["bytes_list"], "l").as_array().is_some());
    // Bytes in their own frame: zero-copy.
    let Value::Bin(hello) = find(&by_name["bytes"], "b") else {
        panic!()
    };
    assert!(inside(hello));
    // Re-sent by framewire, Python reads the same value again.
    let resend: Vec<u8> = by_name
        .values()
        .flat_map(|v| {
            Envelope::new(framewire::dumps(&reserialize(v)).unwrap())
                .unwrap()
                .to_bytes()
                .to_vec()
        })
        .collect();
    let mut child = Command::new(python())
        .arg(peer())
        .arg("consume")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&resend));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let lines: Vec<J> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), by_name.len());
    for ((name, v), line) in by_name.iter().zip(&lines) {
        let exp = &expected.iter().find(|e| e["name"] == **name).unwrap()["value"];
        // framewire writes collections as tuples and frame-0 arrays as
        // msgpack arrays (tuples in Python): compare modulo list/tuple.
        assert_eq!(
            untuple(line),
            untuple(exp),
            "{name}: re-sent by framewire ({v:?})"
        );
    }
}

/// Wraps every out-of-band value of a decoded message back in `Serialize`.
fn reserialize(v: &Value) -> Value {
    match v {
        Value::Bin(_) | Value::NdArray(_) => Value::ToSerialize(Box::new(v.clone())),
        Value::Array(a) => Value::Array(a.iter().map(reserialize).collect()),
        Value::Map(m) => Value::Map(m.iter().map(|(k, x)| (k.clone(), reserialize(x))).collect()),
        other => other.clone(),
    }
}

/// Tagged JSON with tuples turned into lists.
fn untuple(j: &J) -> J {
    match j {
        J::Array(a) => J::Array(a.iter().map(untuple).collect()),
        J::Object(o) if o.len() == 1 && o.contains_key("$tuple") => untuple(&o["$tuple"]),
        J::Object(o) => J::Object(o.iter().map(|(k, v)| (k.clone(), untuple(v))).collect()),
        other => other.clone(),
    }
}
