//! `framewire::pickle` against Python's own `pickle` and Dask's `pickle`
//! family (`tests/dask/pickle_peer.py`, the pinned `distributed==2026.8.0`
//! with numpy 2). These tests FAIL when Python Dask is missing: they never
//! skip.
//!
//! * Python → framewire: every case of the peer (None, bool, int, float,
//!   str, bytes, bytearray, tuple, list, set, frozenset, dict, shared
//!   references, complex, numpy arrays of many dtypes and layouts, numpy
//!   scalars) pickled at protocols 2, 3, 4, 5 and 5 with out-of-band
//!   buffers; framewire reads each and must give exactly what the peer says
//!   (array data a slice of the pickle or of its buffer, never a copy, but
//!   at protocol 2), or refuse it with the error the peer names (ints out
//!   of range, `collections.OrderedDict`, a class instance, object arrays,
//!   a list inside itself). Then pickles no pickler writes, made by hand:
//!   dicts that set a key twice (`1`, `1.0`, `True`; NaNs; tuples), which
//!   framewire must read as Python's own `pickle.loads` does.
//! * framewire → Python: each value read is written again with
//!   `pickle::serialize`, together with values built in Rust (broadcast,
//!   strided and read-only arrays, 0-d arrays, tuple keys...); Python
//!   unpickles every one and checks it, type for type, and prints a verdict.
//! * Dask: messages made by `distributed.protocol.dumps` holding
//!   `Serialized(*serialize(x, serializers=("pickle",)))` and `ToPickle(x)`
//!   for ints, floats, strs, a dict of str → float, a list of arrays and an
//!   array; `pickle::deserialize` reads each block, arrays zero-copy from the
//!   frames they arrived in, and `PickleFamily` gives the same through
//!   `framewire::loads`.

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use framewire::pickle::{self, PickleError, PickleFamily};
use framewire::serialize::{deserialize, DeserializeOptions, Registry};
use framewire::{Block, Envelope, Header, Limits, NdArray, Value};
use serde_json::{json, Value as J};
use sha2::{Digest, Sha256};

#[path = "support/dask_python.rs"]
mod dask_python;
use dask_python::python;

fn peer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dask/pickle_peer.py")
}

/// Runs the peer (hash seed fixed: sets iterate alike in every run).
fn run_peer(args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(peer())
        .args(args)
        .env("PYTHONHASHSEED", "0")
        .output()
        .expect("start pickle_peer.py");
    assert!(
        out.status.success(),
        "pickle_peer.py {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn read(path: &Path) -> Bytes {
    Bytes::from(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (a, b) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
    a >= b && a + inner.len() <= b + outer.len()
}

/// Whether `got` is what the peer's tagged JSON says framewire reads;
/// arrays marked `inside` must lie in one of `memory`.
fn check(got: &Value, exp: &J, memory: &[&Bytes], path: &str) -> Result<(), String> {
    let fail = |why: &str| {
        Err(format!(
            "{path}: {why}\n  got      {got:?}\n  expected {exp}"
        ))
    };
    let items = |got: &Value| -> Option<Vec<Value>> {
        (0..got.array_len()?).map(|i| got.array_item(i)).collect()
    };
    match (got, exp) {
        (Value::Nil, J::Null) => Ok(()),
        (Value::Bool(b), J::Bool(e)) if b == e => Ok(()),
        (Value::Int(i), J::Number(n)) if !n.is_f64() => {
            let e = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
            match e == Some(i.as_i128()) {
                true => Ok(()),
                false => fail("int"),
            }
        }
        // Python's repr, parsed exactly ("nan" and "inf" too).
        (Value::Float(f), J::Object(o)) if o.contains_key("$float") => {
            let e: f64 = o["$float"].as_str().unwrap().parse().unwrap();
            match f.to_bits() == e.to_bits() || (f.is_nan() && e.is_nan()) {
                true => Ok(()),
                false => fail("float"),
            }
        }
        (Value::Str(s), J::String(e)) if &**s == e => Ok(()),
        (Value::Bin(b), J::Object(o)) if o.contains_key("$bytes") => {
            match o["$bytes"].as_str() == Some(&hex::encode(b)) {
                true => Ok(()),
                false => fail("bytes"),
            }
        }
        (Value::Array(_) | Value::IntArray(_), J::Array(es)) => {
            let got_items = items(got).expect("an array");
            if got_items.len() != es.len() {
                return fail("length");
            }
            if let Value::IntArray(ints) = got {
                if ints.len() < 32 {
                    return fail("an IntArray under 32 items");
                }
            }
            for (i, (x, e)) in got_items.iter().zip(es).enumerate() {
                check(x, e, memory, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Map(entries), J::Object(o)) if o.contains_key("$map") => {
            let es = o["$map"].as_array().unwrap();
            if es.len() != entries.len() {
                return fail("length");
            }
            for (i, ((k, v), e)) in entries.iter().zip(es).enumerate() {
                check(k, &e[0], memory, &format!("{path}.key{i}"))?;
                check(v, &e[1], memory, &format!("{path}.value{i}"))?;
            }
            Ok(())
        }
        (Value::NdArray(a), J::Object(o)) if o.contains_key("$ndarray") => {
            let e = &o["$ndarray"];
            let shape: Vec<u64> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            if e["dtype"].as_str() != Some(a.dtype()) || a.logical_shape() != &shape[..] {
                return fail("dtype or shape");
            }
            let c = a.to_c_order();
            let data_ok = match e.get("hex") {
                Some(h) => h.as_str() == Some(&hex::encode(&c)),
                None => {
                    e["len"].as_u64() == Some(c.len() as u64)
                        && e["sha256"].as_str() == Some(&hex::encode(Sha256::digest(&c)))
                }
            };
            if !data_ok {
                return fail("array data");
            }
            let inside = e["inside"] == J::Bool(true) && !a.data().is_empty();
            if inside && !memory.iter().any(|m| within(a.data(), m)) {
                return fail("array data copied, not a slice of the pickle or its buffers");
            }
            Ok(())
        }
        _ => fail("a different value"),
    }
}

/// The error the peer names: the variant, and for a global its name.
fn check_error(got: &PickleError, exp: &J) -> Result<(), String> {
    let variant = exp["$error"].as_str().unwrap();
    let debug = format!("{got:?}");
    if !debug.starts_with(variant) {
        return Err(format!("expected {variant}, got {debug}"));
    }
    if let Some(global) = exp.get("global").and_then(J::as_str) {
        let text = got.to_string();
        if text != format!("pickle global not allowed: {global}") {
            return Err(format!("the global is not named: {text}"));
        }
    }
    Ok(())
}

/// Builds an array with explicit strides the way a receiver gets one: from
/// a Dask `numpy.ndarray` header (`NdArray` has no public strided
/// constructor).
fn strided(
    dtype: &str,
    shape: &[u64],
    strides: &[u64],
    broadcast_to: Option<&[u64]>,
    writeable: bool,
    data: Vec<u8>,
) -> Value {
    let ints = |xs: &[u64]| Value::Array(xs.iter().map(|&x| x.into()).collect());
    let mut sub = vec![
        ("dtype", Value::Array(vec![0u8.into(), Value::str(dtype)])),
        ("shape", ints(shape)),
        ("strides", ints(strides)),
        ("writeable", Value::Array(vec![writeable.into()])),
    ];
    if let Some(b) = broadcast_to {
        sub.push(("broadcast_to", ints(b)));
    }
    let header = Value::map_of([
        ("sub-header", Value::map_of(sub)),
        ("type", Value::str("numpy.ndarray")),
        (
            "type-serialized",
            Value::bin(
                &b"\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94."[..],
            ),
        ),
        ("serializer", Value::str("dask")),
    ]);
    let v = deserialize(
        &Block::new(Header::new(header), [Bytes::from(data)]),
        &DeserializeOptions::default(),
    )
    .unwrap();
    assert!(matches!(v, Value::NdArray(_)), "{v:?}");
    v
}

fn le<T: Copy, const N: usize>(xs: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

fn array(a: NdArray) -> Value {
    Value::NdArray(Box::new(a))
}

/// The values `pickle_peer.py`'s `rust_cases` expects, by name.
fn rust_values() -> Vec<(&'static str, Value)> {
    let ints = [
        0i128,
        255,
        256,
        65536,
        -1,
        -(1 << 31) - 1,
        i64::MAX as i128,
        i64::MIN as i128,
        u64::MAX as i128,
    ];
    vec![
        (
            "rust:ints",
            Value::Array(
                ints.iter()
                    .map(|&i| Value::Int(framewire::Integer::try_from_i128(i).unwrap()))
                    .collect(),
            ),
        ),
        (
            "rust:floats",
            Value::Array(vec![
                f64::NAN.into(),
                (-0.0).into(),
                f64::INFINITY.into(),
                2.5.into(),
            ]),
        ),
        (
            "rust:text",
            Value::map_of([
                ("key", Value::str("välue")),
                ("bytes", Value::bin(&b"\x00\x01"[..])),
                ("none", Value::Nil),
                ("t", true.into()),
            ]),
        ),
        ("rust:packed", Value::from((-20i64..20).collect::<Vec<_>>())),
        (
            "rust:tuple_keys",
            Value::Map(vec![
                (Value::Array(vec![1u8.into(), Value::str("a")]), 1.5.into()),
                (Value::bin(&b"k"[..]), Value::Array(vec![])),
                (7u8.into(), Value::Map(vec![])),
            ]),
        ),
        (
            "rust:broadcast",
            strided(
                "<i8",
                &[1, 3],
                &[0, 8],
                Some(&[4, 3]),
                false,
                le(&[0i64, 1, 2], i64::to_le_bytes),
            ),
        ),
        (
            "rust:fortran",
            strided(
                "<i4",
                &[2, 3],
                &[4, 8],
                None,
                true,
                le(&[0i32, 3, 1, 4, 2, 5], i32::to_le_bytes),
            ),
        ),
        (
            "rust:strided",
            strided(
                "<u2",
                &[5],
                &[8],
                None,
                true,
                le(&(0u16..20).collect::<Vec<_>>(), u16::to_le_bytes),
            ),
        ),
        (
            "rust:readonly",
            strided(
                ">f8",
                &[4],
                &[8],
                None,
                false,
                le(&[0.0f64, 1.0, 2.0, 3.0], f64::to_be_bytes),
            ),
        ),
        (
            "rust:scalar",
            array(
                NdArray::from_c_order("<f4", &[], Bytes::from(0.25f32.to_le_bytes().to_vec()))
                    .unwrap(),
            ),
        ),
        (
            "rust:datetime",
            array(
                NdArray::from_c_order(
                    "<M8[10ms]",
                    &[2],
                    Bytes::from(le(&[1i64, 2], i64::to_le_bytes)),
                )
                .unwrap(),
            ),
        ),
        (
            "rust:nested",
            Value::Array(vec![Value::Array(vec![Value::Array(vec![Value::Array(
                vec![],
            )])])]),
        ),
    ]
}

#[test]
fn python_pickles_read_and_written_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_peer(&["produce", d.to_str().unwrap()]);
    let cases: Vec<J> =
        serde_json::from_slice(&std::fs::read(d.join("cases.json")).unwrap()).unwrap();
    let out = d.join("rt");
    std::fs::create_dir(&out).unwrap();

    let mut failures = Vec::new();
    let mut written = Vec::new();
    let mut write = |id: &str, name: &str, value: &Value| {
        let block = pickle::serialize(value).unwrap_or_else(|e| panic!("{id}: {e}"));
        let frames = block.frames();
        std::fs::write(out.join(format!("{id}.pkl")), &frames[0]).unwrap();
        for (i, b) in frames[1..].iter().enumerate() {
            std::fs::write(out.join(format!("{id}.buf{i}")), b).unwrap();
        }
        let writeable = block.header().get("writeable").cloned().unwrap();
        let writeable: Vec<bool> = writeable
            .as_array()
            .unwrap()
            .iter()
            .map(|w| matches!(w, Value::Bool(true)))
            .collect();
        assert_eq!(writeable.len(), frames.len() - 1, "{id}: a flag per buffer");
        written.push(json!({"id": id, "name": name, "writeable": writeable}));
    };
    let (mut read_ok, mut refused) = (0, 0);
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let data = read(&d.join(format!("{id}.pkl")));
        let buffers: Vec<Bytes> = (0..case["buffers"].as_u64().unwrap())
            .map(|i| read(&d.join(format!("{id}.buf{i}"))))
            .collect();
        let mut memory = vec![&data];
        memory.extend(&buffers);
        let expect = &case["expect"];
        match pickle::loads(&data, &buffers, &Limits::default()) {
            Ok(v) if expect.get("$error").is_none() => {
                match check(&v, expect, &memory, id) {
                    Ok(()) => read_ok += 1,
                    Err(why) => failures.push(why),
                }
                write(id, case["name"].as_str().unwrap(), &v);
            }
            Ok(v) => failures.push(format!("{id}: read {v:?}, expected {expect}")),
            Err(e) if expect.get("$error").is_some() => match check_error(&e, expect) {
                Ok(()) => refused += 1,
                Err(why) => failures.push(format!("{id}: {why}")),
            },
            Err(e) => failures.push(format!("{id}: {e} ({e:?})")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // 28 value cases and 7 refusals, at 5 protocols each, and 12 hand-made
    // pickles.
    assert_eq!((read_ok, refused), (28 * 5 + 12, 7 * 5));

    // Arrays go out of band as their own memory when they are contiguous.
    let values = rust_values();
    for (name, v) in &values {
        write(&name.replace(':', "_"), name, v);
    }
    for (name, v) in &values {
        let Value::NdArray(a) = v else { continue };
        let (_, buffers) = pickle::dumps(v).unwrap();
        let contiguous = matches!(*name, "rust:readonly" | "rust:fortran" | "rust:datetime");
        if contiguous {
            assert_eq!(buffers[0].as_ptr(), a.data().as_ptr(), "{name}: copied");
        }
    }
    std::fs::write(
        out.join("check.json"),
        serde_json::to_vec(&written).unwrap(),
    )
    .unwrap();
    let verdicts = run_peer(&["check", out.to_str().unwrap()]);
    let verdicts: Vec<J> = verdicts
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(verdicts.len(), written.len(), "one verdict per pickle");
    let bad: Vec<&J> = verdicts
        .iter()
        .filter(|v| v["ok"] != J::Bool(true))
        .collect();
    assert!(bad.is_empty(), "Python disagrees:\n{bad:#?}");
}

#[test]
fn dask_pickle_blocks_read_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (stream, sidecar) = (dir.path().join("stream.bin"), dir.path().join("cases.json"));
    run_peer(&["dask", stream.to_str().unwrap(), sidecar.to_str().unwrap()]);
    let wire = read(&stream);
    let cases: Vec<J> = serde_json::from_slice(&std::fs::read(&sidecar).unwrap()).unwrap();
    let family = {
        let mut o = DeserializeOptions::default();
        o.registry = Registry::default().with(PickleFamily);
        o
    };
    let mut rest = wire.clone();
    let mut arrays = 0;
    for case in &cases {
        let name = format!(
            "{} {}",
            case["name"].as_str().unwrap(),
            case["kind"].as_str().unwrap()
        );
        let (env, used) = Envelope::decode(&rest, &Limits::default()).unwrap();
        rest = rest.slice(used..);
        let msg = framewire::message::decode(env.frames(), &Limits::default()).unwrap();
        let block = match (msg.get("v"), case["kind"].as_str()) {
            (Some(Value::Serialized(b)), Some("pickle-family")) => b,
            (Some(Value::Pickled(b)), Some("ToPickle")) => b,
            other => panic!("{name}: {other:?}"),
        };
        // A list Dask iterates: a collection of pickle blocks, which the
        // serialize layer reads with the pickle family; any other block is
        // one pickle.
        let v = match case["collection"].as_bool().unwrap() {
            true => {
                assert_eq!(
                    pickle::deserialize(block, &DeserializeOptions::default()),
                    Err(PickleError::NotPickle)
                );
                deserialize(block, &family).unwrap()
            }
            false => pickle::deserialize(block, &DeserializeOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        };
        // Arrays lie in the frames the message arrived in: its buffers.
        let frames: Vec<&Bytes> = block.frames().iter().collect();
        check(&v, &case["expect"], &frames, &name).unwrap();
        let mut stack = vec![&v];
        while let Some(x) = stack.pop() {
            match x {
                Value::NdArray(a) => {
                    assert!(within(a.data(), &wire), "{name}: not in the received bytes");
                    arrays += 1;
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        // The pickle family reads the same through the serialize layer.
        if case["kind"] == "pickle-family" {
            let through = framewire::loads_with(env.frames(), &family).unwrap();
            assert_eq!(through.get("v"), Some(&v), "{name}: PickleFamily");
        }
    }
    assert!(rest.is_empty(), "every message read");
    // The array, and the two of the list, from both kinds of block.
    assert_eq!(arrays, 6);
}
