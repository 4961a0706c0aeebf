//! `framewire encode` and `framewire inspect --deserialize`: encode → inspect
//! round trips, encode → the REAL Python `distributed.protocol.loads`, the
//! deserialized value of the captures against Python's own decode, and
//! hostile sub-headers.
//!
//! The Python tests FAIL when Python Dask is missing: they never skip.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use bytes::Bytes;
use framewire::{Block, Envelope, Header, Value};
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

#[path = "../../tests/support/dask_python.rs"]
mod dask_python;
use dask_python::python;
#[path = "support/procs.rs"]
mod procs;
use procs::spawn_framewire;

fn root() -> PathBuf {
    procs::repo_root()
}

fn captures() -> PathBuf {
    root().join("tests/captures")
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    spawn_framewire(args, stdin).wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// JSON as deep as Dask's 1024-level messages (serde_json stops at 128).
fn parse_deep(text: &str) -> Json {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    Json::deserialize(&mut de).unwrap()
}

/// `framewire encode [flags] -` with `message` on stdin; the wire bytes.
fn encode(flags: &[&str], message: &Json) -> Vec<u8> {
    let mut args = vec!["encode"];
    args.extend(flags);
    args.push("-");
    let out = run(&args, Some(message.to_string().as_bytes()));
    assert!(
        out.status.success(),
        "encode {flags:?} {message}: {}",
        stderr(&out)
    );
    assert!(out.stderr.is_empty());
    out.stdout
}

/// `encode` that must fail: exit 1 and one line on stderr, which is returned.
fn encode_fails(flags: &[&str], message: &str) -> String {
    let mut args = vec!["encode"];
    args.extend(flags);
    args.push(message);
    let out = run(&args, None);
    assert_eq!(out.status.code(), Some(1), "encode {message}");
    assert!(out.stdout.is_empty(), "encode {message}: wrote output");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{message}: one line: {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// `inspect [flags] --json -` of one message.
fn inspect(flags: &[&str], wire: &[u8]) -> Json {
    let mut args = vec!["inspect", "--json"];
    args.extend(flags);
    args.push("-");
    let out = run(&args, Some(wire));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one message");
    parse_deep(&text)
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256_hex(b: &[u8]) -> String {
    hex_of(&Sha256::digest(b))
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// ---- (a) encode → inspect --json ----------------------------------------------

#[test]
fn plain_values_round_trip_through_inspect() {
    let cases = [
        json!({"op": "x", "reply": true, "n": null}),
        json!([0, 1, -1, 127, 128, 255, 256, 65535, 65536, -32, -33, -129, -32769]),
        json!([
            18446744073709551615u64,
            -9223372036854775808i64,
            4294967296u64
        ]),
        json!([0.5, -2.25, 1e300, 5e-324, 0.0, 1.0]),
        json!([{"$float": "nan"}, {"$float": "inf"}, {"$float": "-inf"}, {"$float": "-0.0"}]),
        json!({"b": {"$bytes": ""}, "c": {"$bytes": "00ff10"}, "d": {"$bytes": "ab".repeat(512)}}),
        json!({"$map": [[1, "int key"], [null, "nil"], [{"$bytes": "6b"}, 2], [[1, 2], 3]]}),
        json!({"$map": [["a", 1], ["a", 2]]}),
        // Str-keyed maps that would read as tags.
        json!({"$map": [["$bytes", "not bin"]]}),
        json!({"x": {"$map": [["$serialize", 1]]}, "y": {"$map": [["$ndarray", {}]]}}),
        json!({"$map": [["$bytes", null], ["len", 1], ["sha256", "00"]]}),
        // Two keys, one of them "$bytes": a plain map.
        json!({"$bytes": "00", "other": 1}),
        json!({"s": "h\u{e9}llo \u{1f600}", "empty": "", "a": [], "m": {}}),
        json!([[[[[]]]], {"a": {"b": {"c": [1, {"$bytes": "01"}]}}}]),
    ];
    for message in &cases {
        let line = inspect(&[], &encode(&[], message));
        assert_eq!(&line["message"], message, "{message}");
        assert_eq!(line["n_frames"], 1);
        assert_eq!(line["blocks"], json!([]));
    }
}

/// Runs `f` on a thread whose stack holds 1024-level JSON values (building,
/// parsing, comparing and dropping them all recurse).
fn with_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn deep_nesting_round_trips_through_stdin() {
    with_big_stack(deep_nesting);
}

fn deep_nesting() {
    let mut message = json!(7);
    for i in 0..1000 {
        message = if i % 2 == 0 {
            json!([message])
        } else {
            json!({"k": message})
        };
    }
    assert_eq!(inspect(&[], &encode(&[], &message))["message"], message);
    // Deeper than msgpack-python (and Dask) accept: refused, one line.
    let too_deep = format!("{}1{}", "[".repeat(1100), "]".repeat(1100));
    let err = encode_fails(&[], &too_deep);
    assert!(err.contains("depth") || err.contains("deep"), "{err}");
    // Absurdly deep JSON is refused before parsing.
    let absurd = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let out = run(&["encode", "-"], Some(absurd.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nesting deeper"), "{}", stderr(&out));
}

/// A header-only message decoded, written as JSON by `inspect`, and encoded
/// again gives the same bytes, for the captures and for a map whose only key
/// looks like a tag.
#[test]
fn decode_json_encode_gives_the_same_bytes() {
    let tag_like = Value::map_of([("$bytes", Value::from(1u8))]);
    let frame0 = framewire::dumps(&tag_like).unwrap();
    let mut want = Vec::new();
    rmp::encode::write_map_len(&mut want, 1).unwrap();
    rmp::encode::write_str(&mut want, "$bytes").unwrap();
    rmp::encode::write_pfix(&mut want, 1).unwrap();
    assert_eq!(&frame0[0][..], &want[..]);
    let wire = Envelope::new(frame0).unwrap().to_bytes();
    let line = inspect(&[], &wire);
    assert_eq!(line["message"], json!({"$map": [["$bytes", 1]]}));
    assert_eq!(encode(&[], &line["message"]), &wire[..]);

    let mut checked = 0;
    for entry in std::fs::read_dir(captures()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(wire) = std::fs::read(dir.join("wire.bin")) else {
            continue;
        };
        let line = inspect(&[], &wire);
        let text = line["message"].to_string();
        if line["n_frames"] != 1 || text.contains(r#""$bytes":null"#) {
            continue;
        }
        let frame0 = std::fs::read(dir.join("frame_000.bin")).unwrap();
        let again = encode(&[], &line["message"]);
        assert_eq!(
            &again[24..],
            &frame0[..],
            "{}: frame 0 re-encoded from JSON differs",
            dir.display()
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} header-only captures");
}

#[test]
fn first_read_and_shard_size_flags() {
    let message = json!({"d": {"$serialize": {"$bytes": "00".repeat(100)}}});
    let all = inspect(&[], &encode(&[], &message));
    let wire_len: u64 = 8
        + 8 * 3
        + all["frame_lengths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_u64().unwrap())
            .sum::<u64>();
    assert_eq!(all["first_read"], wire_len);
    let prelude = inspect(&[], &encode(&["--first-read", "prelude"], &message));
    assert_eq!(prelude["first_read"], 8 + 8 * 3);
    let sharded = inspect(&[], &encode(&["--shard-size", "30"], &message));
    assert_eq!(
        sharded["frame_lengths"].as_array().unwrap()[2..],
        [30, 30, 30, 10]
    );
    let header = &sharded["blocks"][0]["header"];
    assert_eq!(header["split-num-sub-frames"], json!([4]));
    // The JSON may also be given as the argument.
    let out = run(&["encode", r#"{"op": "ping"}"#], None);
    assert!(out.status.success());
    assert_eq!(out.stdout, encode(&[], &json!({"op": "ping"})));
}

#[test]
fn inputs_that_cannot_be_rebuilt_are_refused() {
    for (message, needle) in [
        (r#"{"x": {"$serialized": 1}}"#, "$serialized"),
        (r#"{"x": [{"$pickled": 2}]}"#, "$pickled"),
        (
            r#"{"b": {"$bytes": null, "len": 600, "sha256": "00"}}"#,
            "abbreviated",
        ),
        (
            r#"{"a": {"$ndarray": {"dtype": "<i8", "shape": [1], "data_sha256": "00"}}}"#,
            "data_sha256",
        ),
        (r#"{"$opaque": {"serializer": "pickle"}}"#, "$opaque"),
        (r#"{"$error": "boom"}"#, "$error"),
        (
            r#"{"a": {"$ndarray": {"dtype": "<f8", "shape": [2, 3], "data": "00"}}}"#,
            "do not agree",
        ),
        (
            r#"{"a": {"$ndarray": {"dtype": "object", "shape": [1], "data": "00"}}}"#,
            "do not agree",
        ),
        (r#"{"$bytes": "zz"}"#, "hex"),
        (r#"{"$float": "NaN"}"#, "$float"),
        (r#"{"$map": [[1]]}"#, "pair"),
        (r#"{"a": 1"#, "JSON input"),
        ("1 2", "JSON input"),
    ] {
        let err = encode_fails(&[], message);
        assert!(err.contains(needle), "{message}: {err}");
        assert!(err.starts_with("framewire: "), "{err}");
    }
    // Where: the path of the offending value.
    let err = encode_fails(&[], r#"{"x": [0, {"$serialized": 1}]}"#);
    assert!(err.contains("/x/1/$serialized"), "{err}");
}

// ---- (b) encode → real Python ---------------------------------------------------

/// Splits each enveloped message on stdin into frames (our own reading of the
/// prelude), decodes it with `distributed.protocol.loads(frames,
/// deserialize=True)` and prints the value in gen_captures.py's tagged JSON.
const LOADS: &str = r#"
import json, struct, sys
sys.path.insert(0, sys.argv[1])
from gen_captures import py_json
from distributed.protocol import loads
raw = sys.stdin.buffer.read()
at = 0
while at < len(raw):
    n, count = struct.unpack_from("<QQ", raw, at)
    lengths = struct.unpack_from("<%dQ" % count, raw, at + 16)
    assert 8 + 8 * count <= n <= 8 + 8 * count + sum(lengths), (n, count)
    at += 16 + 8 * count
    frames = []
    for length in lengths:
        frames.append(raw[at:at + length])
        at += length
    try:
        value = py_json(loads(frames, deserialize=True))
    except Exception as e:
        value = {"$exception": type(e).__name__, "message": str(e)}
    print(json.dumps(value))
"#;

/// What Python makes of each message.
fn python_loads(messages: &[Vec<u8>]) -> Vec<Json> {
    let mut child = Command::new(python())
        .arg("-c")
        .arg(LOADS)
        .arg(root().join("tests/dask"))
        // gen_captures.py re-executes itself unless the hash seed is fixed.
        .env("PYTHONHASHSEED", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    let mut pipe = child.stdin.take().unwrap();
    let data = messages.concat();
    let writer = std::thread::spawn(move || pipe.write_all(&data).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "python loads failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let values: Vec<Json> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(parse_deep)
        .collect();
    assert_eq!(values.len(), messages.len());
    values
}

/// An `$ndarray` input, and what Python's `py_json` must say of it.
fn ndarray(dtype: &str, shape: &[u64], data: &[u8]) -> (Json, Json) {
    let input = json!({"$ndarray": {"dtype": dtype, "shape": shape, "data": hex_of(data)}});
    let expected = json!({"$ndarray": {"dtype": dtype, "shape": shape, "data_hex": hex_of(data)}});
    (input, expected)
}

fn le_bytes<const N: usize, T: Copy>(items: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    items.iter().flat_map(|&x| f(x)).collect()
}

#[test]
fn python_reads_what_encode_writes() {
    let f8 = ndarray(
        "<f8",
        &[2, 3],
        &le_bytes(&[0.5f64, 1.0, -2.0, 3.25, 1e300, -0.0], f64::to_le_bytes),
    );
    let i4 = ndarray(
        "<i4",
        &[4],
        &le_bytes(&[1i32, -2, 3, i32::MIN], i32::to_le_bytes),
    );
    let u1 = ndarray("|u1", &[2, 2], &[0, 1, 254, 255]);
    let i2_be = ndarray(">i2", &[3], &le_bytes(&[1i16, -2, 300], i16::to_be_bytes));
    let b1 = ndarray("|b1", &[3], &[1, 0, 1]);
    let c16 = ndarray("<c16", &[1], &le_bytes(&[1.0f64, -1.0], f64::to_le_bytes));
    let m8 = ndarray(
        "<M8[ns]",
        &[2],
        &le_bytes(&[0i64, 1_000_000_000], i64::to_le_bytes),
    );
    let zero_d = ndarray("<i8", &[], &le_bytes(&[42i64], i64::to_le_bytes));
    let f4_3d = ndarray(
        "<f4",
        &[2, 1, 3],
        &le_bytes(&[1.5f32, 2.0, 3.0, 4.0, 5.0, 6.0], f32::to_le_bytes),
    );
    let empty = ndarray("<u2", &[0, 3], &[]);
    let long = vec![0xa5u8; 100 * 1024];

    let cases: Vec<(Vec<&str>, Json, Json)> = vec![
        // Bytes: inline, and out of band.
        (
            vec![],
            json!({"inline": {"$bytes": "00ff"}, "oob": {"$serialize": {"$bytes": "0102"}}}),
            json!({"inline": {"$bytes": "00ff"}, "oob": {"$bytes": "0102"}}),
        ),
        // Arrays: several dtypes, several dimensions, bare and in $serialize.
        (
            vec![],
            json!({"f8": f8.0, "i4": {"$serialize": i4.0}, "u1": u1.0, "be": i2_be.0,
                   "b1": b1.0, "c16": c16.0, "m8": m8.0, "zero_d": zero_d.0,
                   "f4_3d": f4_3d.0, "empty": empty.0}),
            json!({"f8": f8.1, "i4": i4.1, "u1": u1.1, "be": i2_be.1, "b1": b1.1,
                   "c16": c16.1, "m8": m8.1, "zero_d": zero_d.1, "f4_3d": f4_3d.1,
                   "empty": empty.1}),
        ),
        // Plain values and dicts in frame 0 (msgpack arrays are tuples there).
        (
            vec![],
            json!({"op": "x", "l": [1, [2.5, null]], "d": {"a": true},
                   "m": {"$map": [[1, "one"], [{"$bytes": "6b"}, 2]]},
                   "big": 18446744073709551615u64, "neg": -9223372036854775808i64,
                   "f": [{"$float": "-0.0"}, {"$float": "inf"}]}),
            json!({"op": "x", "l": {"$tuple": [1, {"$tuple": [2.5, null]}]}, "d": {"a": true},
                   "m": {"$dict": [[1, "one"], [{"$bytes": "6b"}, 2]]},
                   "big": 18446744073709551615u64, "neg": -9223372036854775808i64,
                   "f": {"$tuple": [{"$float": "-0.0"}, {"$float": "inf"}]}}),
        ),
        // Dicts in $serialize, iterated (an array inside) and as a blob.
        (
            vec![],
            json!({"d": {"$serialize": {"a": 1, "arr": i4.0, "s": "t"}},
                   "blob": {"$serialize": {"x": [1, 2], "y": {"$bytes": "00"}}}}),
            json!({"d": {"a": 1, "arr": i4.1, "s": "t"},
                   "blob": {"x": {"$tuple": [1, 2]}, "y": {"$bytes": "00"}}}),
        ),
        // A 100 KB payload cut into 4096-byte shards: Python gets it whole.
        (
            vec!["--shard-size", "4096"],
            json!({"payload": {"$serialize": {"$bytes": hex_of(&long)}}}),
            json!({"payload": {"$bytes": null, "len": long.len(), "sha256": sha256_hex(&long)}}),
        ),
        // `--iterate never` iterates the top level of a $serialize only.
        (
            vec!["--iterate", "never"],
            json!({"x": {"$serialize": [f8.0, [1, 2]]}}),
            json!({"x": {"$tuple": [f8.1, {"$tuple": [1, 2]}]}}),
        ),
        // `--first-read prelude`.
        (
            vec!["--first-read", "prelude"],
            json!({"x": {"$serialize": {"$bytes": "aa"}}}),
            json!({"x": {"$bytes": "aa"}}),
        ),
    ];

    // A list under $serialize, with every --iterate mode: the same tuple.
    let list = json!({"x": {"$serialize": [1, "a", {"$bytes": "ff"}, [2, 3], {"k": [4]}]}});
    let tuple = json!({"x": {"$tuple": [1, "a", {"$bytes": "ff"}, {"$tuple": [2, 3]},
                                        {"k": {"$tuple": [4]}}]}});
    let mut cases = cases;
    for mode in ["always", "never", "auto"] {
        cases.push((vec!["--iterate", mode], list.clone(), tuple.clone()));
    }

    let wires: Vec<Vec<u8>> = cases
        .iter()
        .map(|(flags, input, _)| encode(flags, input))
        .collect();
    let values = python_loads(&wires);
    for ((flags, input, expected), got) in cases.iter().zip(&values) {
        assert_eq!(got, expected, "{flags:?} {input:.300}");
    }

    // What each mode wrote for the list.
    let n = cases.len();
    let header = |i: usize| inspect(&[], &wires[i])["blocks"][0]["header"].clone();
    assert_eq!(header(n - 3)["is-collection"], true, "always");
    assert_eq!(header(n - 3)["frame-lengths"], json!([1, 1, 1, 2, 1]));
    assert_eq!(header(n - 3)["sub-headers"][3]["is-collection"], true);
    // The top level of a $serialize is iterated in every mode (as in Dask);
    // below it, never and auto (nothing needs frames of its own) make blobs.
    for (i, mode) in [(n - 2, "never"), (n - 1, "auto")] {
        assert_eq!(header(i)["is-collection"], true, "{mode}");
        assert_eq!(
            header(i)["sub-headers"][3]["serializer"],
            "msgpack",
            "{mode}"
        );
        assert_eq!(header(i)["frame-lengths"], json!([1, 1, 1, 1, 1]), "{mode}");
    }

    // The sharded payload: frame 0, its sub-header and 25 shards.
    let sharded = inspect(&[], &wires[4]);
    assert_eq!(sharded["n_frames"], 2 + 25);
    assert_eq!(sharded["blocks"][0]["num_sub_frames"], 25);
    let lengths = sharded["frame_lengths"].as_array().unwrap();
    assert!(lengths[2..].iter().all(|l| l == 4096));
    // And inspect --deserialize merges it back.
    let line = inspect(&["--deserialize"], &wires[4]);
    assert_eq!(line["value"], cases[4].2);
}

#[test]
fn iterate_never_refuses_an_array_below_the_top_level() {
    let (arr, _) = ndarray("<i8", &[1], &[0; 8]);
    let message = json!({"x": {"$serialize": [[arr]]}}).to_string();
    let err = encode_fails(&["--iterate", "never"], &message);
    assert!(err.contains("cannot encode"), "{err}");
    // The same under auto iterates down to it.
    let out = run(&["encode", &message], None);
    assert!(out.status.success(), "{}", stderr(&out));
}

// ---- (c) inspect --deserialize against Python's own decode ------------------------

/// `value` of a capture's case.json: Python's decode, in tagged JSON.
fn python_value(case: &str) -> Json {
    let text = std::fs::read_to_string(captures().join(case).join("case.json")).unwrap();
    parse_deep(&text)["value"].clone()
}

/// A `$exception` anywhere in Python's value: ours has `$error` with its text.
fn find_error(ours: &Json, message: &str) -> bool {
    match ours {
        Json::Object(o) if o.len() == 1 && o.contains_key("$error") => {
            o["$error"].as_str().is_some_and(|t| t.contains(message))
        }
        Json::Object(o) => o.values().any(|v| find_error(v, message)),
        Json::Array(a) => a.iter().any(|v| find_error(v, message)),
        _ => false,
    }
}

/// Compares our deserialized value with Python's. `opaque` lists the paths
/// (and serializer) where ours may be `$opaque`; those found are removed.
fn compare(ours: &Json, py: &Json, path: &str, opaque: &mut Vec<(String, String)>) {
    if let Some(body) = ours
        .get("$opaque")
        .filter(|_| ours.as_object().unwrap().len() == 1)
    {
        let pos = opaque
            .iter()
            .position(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("{path}: unexpected $opaque {ours} (Python: {py:.300})"));
        let (_, serializer) = opaque.remove(pos);
        assert_eq!(body["serializer"], serializer.as_str(), "{path}");
        assert!(body["frame_lengths"].is_array(), "{path}");
        return;
    }
    let tag = py
        .as_object()
        .and_then(|o| o.keys().next())
        .map(String::as_str);
    match (tag, py) {
        (Some("$tuple"), _) => compare(ours, &py["$tuple"], path, opaque),
        (Some("$bytearray"), _) => {
            let mut as_bytes = py.as_object().unwrap().clone();
            let v = as_bytes.shift_remove("$bytearray").unwrap();
            as_bytes.insert("$bytes".into(), v);
            let as_bytes = Json::Object(as_bytes);
            assert_eq!(ours, &as_bytes, "{path}");
        }
        (Some("$ndarray"), _) => {
            let (o, p) = (&ours["$ndarray"], &py["$ndarray"]);
            assert!(o.is_object(), "{path}: {ours} is not an $ndarray");
            assert_eq!(o["dtype"], p["dtype"], "{path}: dtype");
            assert_eq!(o["shape"], p["shape"], "{path}: shape");
            let sha = match p["data_hex"].as_str() {
                Some(h) => sha256_hex(&unhex(h)),
                None => p["data_sha256"].as_str().unwrap().to_owned(),
            };
            assert_eq!(o["data_sha256"], sha.as_str(), "{path}: data");
        }
        (Some("$exception"), _) => {
            let message = py["message"].as_str().unwrap();
            assert!(
                find_error(ours, message),
                "{path}: no $error {message:?} in {ours}"
            );
        }
        (Some("$dict"), _) => compare(&ours["$map"], &py["$dict"], path, opaque),
        (_, Json::Array(items)) => {
            let mine = ours
                .as_array()
                .unwrap_or_else(|| panic!("{path}: {ours} vs {py}"));
            assert_eq!(mine.len(), items.len(), "{path}: length");
            for (i, (a, b)) in mine.iter().zip(items).enumerate() {
                compare(a, b, &format!("{path}/{i}"), opaque);
            }
        }
        (Some("$bytes" | "$float"), _) => assert_eq!(ours, py, "{path}"),
        (Some(t), _) if t.starts_with('$') && py.as_object().unwrap().len() <= 3 => {
            panic!("{path}: Python's {t} has no counterpart here: {ours}")
        }
        (_, Json::Object(map)) => {
            let mine = ours
                .as_object()
                .unwrap_or_else(|| panic!("{path}: {ours} vs {py}"));
            let keys: Vec<&String> = mine.keys().collect();
            assert_eq!(keys, map.keys().collect::<Vec<_>>(), "{path}: keys");
            for (k, v) in map {
                compare(&mine[k], v, &format!("{path}/{k}"), opaque);
            }
        }
        _ => assert_eq!(ours, py, "{path}"),
    }
}

#[test]
fn deserialized_captures_match_python() {
    let cases: [(&str, &[(&str, &str)]); 8] = [
        ("task_with_numpy", &[]),
        // A structured dtype is pickled: kept opaque.
        ("numpy_layouts", &[("/structured", "dask")]),
        // memoryview and array.array are dask types framewire keeps opaque.
        (
            "bytes_payloads",
            &[("/ser_memoryview", "dask"), ("/ser_array", "dask")],
        ),
        ("sharded_4096", &[]),
        ("error_family", &[]),
        ("topickle", &[("/graph", "pickle"), ("/arr", "pickle")]),
        // A str and an int inside an iterated collection are pickled.
        (
            "serialize_collection_list",
            &[("/data/2", "pickle"), ("/data/3", "pickle")],
        ),
        ("msgpack_family", &[]),
    ];
    for (case, opaque) in cases {
        let wire = std::fs::read(captures().join(case).join("wire.bin")).unwrap();
        let line = inspect(&["--deserialize"], &wire);
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.last(), Some(&"value"), "{case}");
        let mut opaque: Vec<(String, String)> = opaque
            .iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect();
        compare(&line["value"], &python_value(case), "", &mut opaque);
        // The paths above are relative to the case.
        let missing: Vec<_> = opaque.iter().map(|(p, _)| p).collect();
        assert!(
            missing.is_empty(),
            "{case}: expected $opaque at {missing:?}"
        );
    }
}

#[test]
fn deserialize_every_capture_and_human_output() {
    // Every capture deserializes without a command error.
    for entry in std::fs::read_dir(captures()).unwrap() {
        let wire = entry.unwrap().path().join("wire.bin");
        if wire.is_file() {
            let out = run(
                &["inspect", "--deserialize", "--json", wire.to_str().unwrap()],
                None,
            );
            assert!(out.status.success(), "{}: {}", wire.display(), stderr(&out));
        }
    }
    let file = captures().join("task_with_numpy/wire.bin");
    let out = run(&["inspect", "--deserialize", file.to_str().unwrap()], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\n  value:\n    op: \"compute-task\"\n"),
        "{text}"
    );
    assert!(
        text.contains(r#""$ndarray":{"dtype":"<i8","shape":[5]"#),
        "{text}"
    );
    let file = captures().join("error_family/wire.bin");
    let out = run(&["inspect", "--deserialize", file.to_str().unwrap()], None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(r#"x: {"$error":"#), "{text}");
}

// ---- (d) hostile sub-headers ----------------------------------------------------

/// One message whose frame 0 is `{"x": <block>}`.
fn message_with_block(header: Value, frames: &[&'static [u8]]) -> Vec<u8> {
    let block = Block::new(
        Header::new(header),
        frames.iter().map(|f| Bytes::from_static(f)),
    );
    let msg = Value::map_of([("x", Value::Serialized(Box::new(block)))]);
    let frames = framewire::dumps(&msg).unwrap();
    Envelope::new(frames).unwrap().to_bytes().to_vec()
}

fn bytes_header(extra: Vec<(&str, Value)>) -> Value {
    let mut h = vec![
        ("sub-header", Value::Map(vec![])),
        ("type", Value::str("bytes")),
        (
            "type-serialized",
            Value::bin(
                &b"\x80\x05\x95\x16\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x05bytes\x94\x93\x94."[..],
            ),
        ),
        ("serializer", Value::str("dask")),
    ];
    h.extend(extra);
    Value::map_of(h)
}

fn collection_header(kind: &str, lengths: &[u64]) -> Value {
    Value::map_of([
        (
            "sub-headers",
            Value::Array(
                lengths
                    .iter()
                    .map(|_| Value::map_of([("serializer", Value::str("msgpack"))]))
                    .collect(),
            ),
        ),
        ("is-collection", Value::Bool(true)),
        (
            "frame-lengths",
            Value::Array(lengths.iter().map(|&n| Value::from(n)).collect()),
        ),
        ("type-serialized", Value::str(kind)),
    ])
}

fn ints(v: &[u64]) -> Value {
    Value::Array(v.iter().map(|&n| Value::from(n)).collect())
}

#[test]
fn hostile_headers_are_one_line_errors() {
    let ok = std::fs::read(captures().join("plain_dict/wire.bin")).unwrap();
    let cases = [
        (
            "split table that does not tile the frames",
            message_with_block(
                bytes_header(vec![
                    ("split-num-sub-frames", ints(&[3])),
                    ("split-offsets", ints(&[0])),
                ]),
                &[b"ab", b"cd"],
            ),
            "shards",
        ),
        (
            "split offsets out of order",
            message_with_block(
                bytes_header(vec![
                    ("split-num-sub-frames", ints(&[1, 1])),
                    ("split-offsets", ints(&[1, 0])),
                ]),
                &[b"ab", b"cd"],
            ),
            "tile",
        ),
        (
            "frame-lengths that do not add up",
            message_with_block(collection_header("tuple", &[1, 2]), &[b"\x01", b"\x02"]),
            "frame",
        ),
        (
            "unknown collection type",
            message_with_block(collection_header("frozenbag", &[1]), &[b"\x01"]),
            "type-serialized",
        ),
        (
            "compression table of the wrong length",
            message_with_block(
                bytes_header(vec![("compression", Value::Array(vec![Value::Nil; 3]))]),
                &[b"ab"],
            ),
            "compression",
        ),
    ];
    for (what, bad, needle) in cases {
        // Alone, and after a good message (whose line is printed first).
        for prefix in [&[][..], &ok[..]] {
            let mut data = prefix.to_vec();
            data.extend(&bad);
            let out = run(&["inspect", "--deserialize", "--json", "-"], Some(&data));
            assert_eq!(out.status.code(), Some(1), "{what}");
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "{what}: {err:?}");
            assert!(!err.contains("panicked"), "{what}: {err}");
            let index = usize::from(!prefix.is_empty());
            let at = format!(
                "<stdin>: message #{index} at byte {}: block serialized@1",
                prefix.len()
            );
            assert!(err.contains(&at), "{what}: {err:?} lacks {at:?}");
            assert!(err.contains(needle), "{what}: {err:?} lacks {needle:?}");
            assert_eq!(
                String::from_utf8(out.stdout).unwrap().lines().count(),
                index,
                "{what}"
            );
            // Without --deserialize the message is fine.
            let out = run(&["inspect", "--json", "-"], Some(&data));
            assert!(out.status.success(), "{what}: {}", stderr(&out));
        }
    }
}

/// Integer arrays long enough to come back packed (`Value::IntArray`), in a
/// blob and iterated, print as the plain JSON arrays they stand for.
#[test]
fn packed_integer_arrays_print_as_arrays() {
    let ints: Vec<i64> = (-20..20).chain([i64::MIN, i64::MAX]).collect();
    for mode in ["never", "auto", "always"] {
        let message =
            json!({"op": "x", "t": {"$serialize": {"n": ints, "top": {"$serialize": ints}}}});
        let line = inspect(&["--deserialize"], &encode(&["--iterate", mode], &message));
        assert_eq!(
            line["value"],
            json!({"op": "x", "t": {"n": ints, "top": ints}}),
            "{mode}"
        );
    }
}
