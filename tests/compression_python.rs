//! Live compression interop with the real Python `distributed` 2026.8.0
//! (`tests/dask/compression_peer.py`, `tests/dask/serialize_peer.py`).
//! These tests FAIL when Python Dask is missing: they never skip.
//!
//! * Python → framewire: messages Dask's `dumps` compresses with lz4, zstd
//!   and zlib (as a comm that negotiated the codec sends them: bytes,
//!   arrays, shards compressed one by one, an iterated collection) decode in
//!   framewire to what Python's own `loads` returns.
//! * framewire → Python: messages framewire compresses with lz4, zstd and
//!   zlib decode in Python's `loads` to the values framewire sent. (Snappy
//!   needs python-snappy, which Dask's pinned environment does not install.)
//! * Byte for byte: framewire's lz4 and zstd output equals Python's
//!   `lz4.block.compress` and Dask's zstd compressor on inputs around every
//!   boundary of liblz4's compressor.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bytes::Bytes;
use framewire::dumps_with;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{Codec, DeserializeOptions, SerializeOptions};
use framewire::{Envelope, Limits, NdArray, Value};
use serde_json::{json, Value as J};
use sha2::{Digest, Sha256};

#[path = "support/dask_python.rs"]
mod dask_python;
use dask_python::python;

fn dask_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dask")
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// gen_captures.py's `_blob`: inline hex up to 512 bytes, else length + sha256.
fn blob(b: &[u8]) -> J {
    if b.len() <= 512 {
        json!({ "$bytes": hex::encode(b) })
    } else {
        json!({ "$bytes": null, "len": b.len(), "sha256": sha(b) })
    }
}

/// What Python's `py_json` prints for a value (arrays are tuples in Python).
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
        Value::Bin(b) => blob(b),
        Value::Array(a) => json!({ "$tuple": a.iter().map(py).collect::<Vec<_>>() }),
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, x)| (k.as_str().expect("str keys").to_owned(), py(x)))
                .collect(),
        ),
        Value::ToSerialize(x) => py(x),
        Value::NdArray(a) => {
            let c = a.to_c_order();
            let mut body = json!({ "dtype": a.dtype(), "shape": a.logical_shape() });
            if c.len() <= 512 {
                body["data_hex"] = json!(hex::encode(&c));
            } else {
                body["nbytes"] = json!(c.len());
                body["data_sha256"] = json!(sha(&c));
            }
            json!({ "$ndarray": body })
        }
        other => panic!("no Python form for {other:?}"),
    }
}

/// Splits a stream of enveloped messages.
fn split_stream(mut data: Bytes) -> Vec<Vec<Bytes>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let (env, used) = Envelope::decode(&data, &Limits::dask_compat()).unwrap();
        out.push(env.frames().to_vec());
        let _ = data.split_to(used);
    }
    out
}

/// The codec names in every block's `compression` list, in frame order.
fn codecs_on_the_wire(frames: &[Bytes]) -> Vec<String> {
    let mut names = Vec::new();
    fn walk(v: &Value, names: &mut Vec<String>) {
        match v {
            Value::Serialized(b) | Value::Pickled(b) => {
                if let Some(c) = b.header().get("compression").and_then(Value::as_array) {
                    names.extend(c.iter().filter_map(Value::as_str).map(str::to_owned));
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, names)),
            Value::Map(m) => m.iter().for_each(|(_, x)| walk(x, names)),
            _ => {}
        }
    }
    walk(&decode(frames, &Limits::dask_compat()).unwrap(), &mut names);
    names
}

#[test]
fn framewire_decodes_what_dask_compresses() {
    let dir = tempfile::tempdir().unwrap();
    let side = dir.path().join("expected.json");
    let out = Command::new(python())
        .arg(dask_dir().join("compression_peer.py"))
        .arg("produce")
        .arg(&side)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<J> = serde_json::from_str(&std::fs::read_to_string(&side).unwrap()).unwrap();
    let messages = split_stream(Bytes::from(out.stdout));
    assert_eq!(messages.len(), expected.len());
    assert_eq!(messages.len(), 24, "3 codecs x 8 messages");
    let opts = DeserializeOptions::with_limits(Limits::dask_compat());
    for (frames, exp) in messages.iter().zip(&expected) {
        let name = exp["name"].as_str().unwrap();
        let codec = exp["codec"].as_str().unwrap();
        // Dask compressed what it should, with the negotiated codec only.
        let used = codecs_on_the_wire(frames);
        assert!(used.iter().all(|c| c == codec), "{name}: {used:?}");
        let compressible = !name.ends_with("random_bytes") && !name.ends_with("small_bytes");
        assert_eq!(!used.is_empty(), compressible, "{name}: {used:?}");
        let value = deserialize_blocks(decode(frames, &Limits::dask_compat()).unwrap(), &opts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(py(&value), exp["value"], "{name}");
    }
}

fn arr(dtype: &str, shape: &[u64], data: Vec<u8>) -> Value {
    Value::NdArray(Box::new(
        NdArray::from_c_order(dtype, shape, Bytes::from(data)).unwrap(),
    ))
}

#[test]
fn dask_decodes_what_framewire_compresses() {
    let f8: Vec<u8> = (0..40_000u32)
        .flat_map(|i| f64::from(i).to_le_bytes())
        .collect();
    let smallints: Vec<u8> = (0..200_000u32).map(|i| (i * 7 / 3 % 4) as u8).collect();
    let noise: Vec<u8> = (0..30_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let ser = |v: Value| Value::ToSerialize(Box::new(v));
    let msgs: Vec<(&str, Value, usize)> = vec![
        (
            "zeros",
            ser(arr("|u1", &[50_000], vec![0; 50_000])),
            64 << 20,
        ),
        ("f8", ser(arr("<f8", &[40_000], f8)), 64 << 20),
        (
            "smallints",
            ser(arr("|u1", &[200_000], smallints)),
            64 << 20,
        ),
        (
            "text",
            ser(Value::Bin(Bytes::from(
                b"the quick brown fox ".repeat(2000),
            ))),
            64 << 20,
        ),
        ("noise", ser(Value::Bin(Bytes::from(noise))), 64 << 20),
        (
            "sharded",
            ser(arr("|u1", &[30_000], vec![0; 30_000])),
            12_000,
        ),
        (
            "collection",
            ser(Value::Array(vec![
                arr("<u2", &[20_000], vec![0; 40_000]),
                Value::Bin(Bytes::from(vec![b'y'; 15_000])),
                Value::str("s"),
                Value::from(1u8),
            ])),
            64 << 20,
        ),
    ];
    let mut stream = Vec::new();
    let mut expected = Vec::new();
    let mut compressed = 0;
    for codec in [Codec::Lz4, Codec::Zstd, Codec::Zlib] {
        for (name, v, shard_size) in &msgs {
            let mut opts = SerializeOptions::default();
            opts.compression = Some(codec);
            opts.shard_size = *shard_size;
            let msg = Value::map_of([("op", Value::str("x")), ("v", v.clone())]);
            let frames = dumps_with(&msg, &opts).unwrap();
            let used = codecs_on_the_wire(&frames);
            assert!(used.iter().all(|c| c == codec.name()), "{name}: {used:?}");
            compressed += used.len();
            stream.extend_from_slice(&Envelope::new(frames).unwrap().to_bytes());
            expected.push((format!("{codec}/{name}"), json!({"op": "x", "v": py(v)})));
        }
    }
    assert!(compressed >= 3 * 7, "{compressed} frames compressed");
    let mut child = Command::new(python())
        .arg(dask_dir().join("serialize_peer.py"))
        .arg("consume")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<J> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), expected.len());
    for (line, (name, exp)) in lines.iter().zip(&expected) {
        assert_eq!(line, exp, "{name}");
    }
}

#[test]
fn lz4_and_zstd_output_is_pythons_byte_for_byte() {
    let out = Command::new(python())
        .arg(dask_dir().join("compression_peer.py"))
        .arg("vectors")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut pieces = Vec::new();
    let mut data = &out.stdout[..];
    while !data.is_empty() {
        let n = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
        pieces.push(&data[8..8 + n]);
        data = &data[8 + n..];
    }
    let mut checked = 0;
    for v in pieces.chunks(3) {
        let (input, lz4, zstd) = (v[0], v[1], v[2]);
        let at = format!("input of {} bytes", input.len());
        assert_eq!(&Codec::Lz4.compress(input).unwrap()[..], lz4, "lz4, {at}");
        assert_eq!(
            &Codec::Zstd.compress(input).unwrap()[..],
            zstd,
            "zstd, {at}"
        );
        checked += 1;
    }
    assert!(checked >= 50, "{checked} vectors");
}
