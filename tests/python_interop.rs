//! Live interop with the real Python `distributed` 2026.8.0 (installed by
//! `scripts/setup-python`, which `scripts/test` and `.ci/run` run).
//!
//! These tests FAIL when Python Dask is missing: they never skip.
//!
//! * Python → framewire: `gen_captures.py --check` regenerates every capture
//!   from the real package and compares it with the committed bytes the other
//!   tests decode.
//! * framewire → Python: framewire re-encodes every capture (pass-through)
//!   and writes it, plus values it builds itself, over a real TCP connection
//!   to a real `distributed.comm.listen` listener; what Python's `comm.read()`
//!   decodes must equal what Python decoded from its own bytes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use bytes::{Bytes, BytesMut};
use framewire::message::decode;
use framewire::{dumps, envelope, Envelope, Limits, Value};
use serde_json::json;

#[path = "support/dask_python.rs"]
mod dask_python;
use dask_python::python;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// JSON as deep as Dask's 1024-level messages (serde_json stops at 128).
fn parse_deep_json(text: &str) -> serde_json::Value {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    serde_json::Value::deserialize(&mut de).unwrap()
}

#[test]
fn captures_regenerate_identically_from_real_dask() {
    let out = Command::new(python())
        .arg(root().join("tests/dask/gen_captures.py"))
        .arg("--check")
        .arg(root().join("tests/captures"))
        .output()
        .expect("run gen_captures.py");
    assert!(
        out.status.success(),
        "gen_captures.py --check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads one enveloped message from a blocking stream.
fn read_message(sock: &mut TcpStream) -> Vec<Bytes> {
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let envelope::PreludeStatus::Complete(p) =
            envelope::parse_prelude(&buf, &Limits::dask_compat()).unwrap()
        {
            if buf.len() as u64 >= p.wire_len() {
                let (env, _) = Envelope::decode(&buf.freeze(), &Limits::dask_compat()).unwrap();
                return env.into_frames();
            }
        }
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "peer closed before a whole message");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn handshake() -> Value {
    Value::map_of([
        ("compression", Value::Nil),
        ("python", Value::Array(vec![3.into(), 11.into(), 7.into()])),
        ("pickle-protocol", 5.into()),
    ])
}

/// Messages framewire builds itself, with what Python must decode them to.
fn built_messages() -> Vec<(Value, serde_json::Value)> {
    let ints: Vec<i128> = vec![
        0,
        127,
        128,
        255,
        256,
        65535,
        65536,
        (1 << 32) - 1,
        1 << 32,
        i64::MAX as i128,
        u64::MAX as i128,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32768,
        -32769,
        -(1 << 31),
        -(1 << 31) - 1,
        i64::MIN as i128,
    ];
    let int_values = ints
        .iter()
        .map(|&i| Value::Int(framewire::Integer::try_from_i128(i).unwrap()))
        .collect();
    let int_json: Vec<serde_json::Value> = ints
        .iter()
        .map(|&i| {
            if i >= 0 {
                json!(i as u64)
            } else {
                json!(i as i64)
            }
        })
        .collect();
    let long = "é".repeat(40_000);
    let blob = Bytes::from(vec![0xabu8; 70_000]);
    use sha2::Digest;
    let blob_sha = hex::encode(sha2::Sha256::digest(&blob));
    vec![
        (
            Value::map_of([("op", "identity".into()), ("reply", true.into())]),
            json!({"op": "identity", "reply": true}),
        ),
        (Value::Array(int_values), json!({"$tuple": int_json})),
        (
            Value::Array(vec![
                0.5.into(),
                f64::NAN.into(),
                f64::INFINITY.into(),
                f64::NEG_INFINITY.into(),
                (-0.0).into(),
            ]),
            json!({"$tuple": [0.5, {"$float": "nan"}, {"$float": "inf"}, {"$float": "-inf"}, {"$float": "-0.0"}]}),
        ),
        (
            Value::Array(vec![
                "".into(),
                "x".repeat(31).into(),
                "y".repeat(32).into(),
                long.clone().into(),
                Value::bin(Bytes::new()),
                Value::bin(vec![1u8, 2, 3]),
                Value::Bin(blob),
            ]),
            json!({"$tuple": ["", "x".repeat(31), "y".repeat(32), long,
                   {"$bytes": ""}, {"$bytes": "010203"},
                   {"$bytes": null, "len": 70_000, "sha256": blob_sha}]}),
        ),
        (
            Value::Map(vec![
                (1.into(), "int".into()),
                (Value::Nil, "nil".into()),
                (Value::Array(vec![1.into(), "a".into()]), "tuple".into()),
                (Value::bin(vec![0u8]), "bytes".into()),
            ]),
            json!({"$dict": [[1, "int"], [null, "nil"], [{"$tuple": [1, "a"]}, "tuple"],
                             [{"$bytes": "00"}, "bytes"]]}),
        ),
        (
            Value::map_of([
                ("__Set__", true.into()),
                ("as-list", Value::Array(vec![2.into(), 1.into()])),
            ]),
            json!({"$set": [1, 2]}),
        ),
    ]
}

#[test]
fn python_comm_reads_what_framewire_writes() {
    let limits = Limits::dask_compat();
    // Every committed capture, decoded in pass-through mode and re-encoded.
    let mut sends: Vec<(String, Vec<Bytes>, serde_json::Value)> = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("tests/captures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("wire.bin").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 30, "expected the committed captures");
    for dir in dirs {
        let case = parse_deep_json(&std::fs::read_to_string(dir.join("case.json")).unwrap());
        let wire = Bytes::from(std::fs::read(dir.join("wire.bin")).unwrap());
        let (env, _) = Envelope::decode(&wire, &limits).unwrap();
        let value = decode(env.frames(), &limits).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        sends.push((name, dumps(&value).unwrap(), case["value"].clone()));
    }
    for (i, (value, expected)) in built_messages().into_iter().enumerate() {
        sends.push((format!("built #{i}"), dumps(&value).unwrap(), expected));
    }

    let mut peer = Command::new(python())
        .arg(root().join("tests/dask/peer.py"))
        .arg("listen")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start peer.py");
    let mut lines = BufReader::new(peer.stdout.take().unwrap()).lines();
    let port: String = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let mut sock = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();

    // The Dask handshake, both ways.
    let hs = Envelope::new(dumps(&handshake()).unwrap()).unwrap();
    sock.write_all(&hs.to_bytes()).unwrap();
    let theirs = decode(&read_message(&mut sock), &limits).unwrap();
    assert_eq!(theirs.get("pickle-protocol"), Some(&Value::from(5)));

    // Alternate the first read between the whole message and the prelude
    // alone (k = 0): Python must accept any frame boundary.
    for (i, (_, frames, _)) in sends.iter().enumerate() {
        let k = if i % 2 == 0 { frames.len() } else { 0 };
        let env = Envelope::with_first_read_frames(frames.clone(), k).unwrap();
        sock.write_all(&env.to_bytes()).unwrap();
    }
    sock.shutdown(std::net::Shutdown::Write).unwrap();

    for (name, _, expected) in &sends {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("Python stopped before {name}"))
            .unwrap();
        let got = parse_deep_json(&line);
        assert_eq!(&got, expected, "Python decoded {name} differently");
    }
    drop(sock);
    assert!(peer.wait().unwrap().success());
}
