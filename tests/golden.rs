//! Golden tests against the committed Dask `distributed` 2026.8.0 captures in
//! `tests/captures/` (made by `tests/dask/gen_captures.py`).
//!
//! For every capture: the envelope gives the frame files and the framing of
//! `case.json`; the message layer gives its blocks, orphans, frame 0 and
//! sub-headers; decoding is zero-copy; and re-encoding what was decoded gives
//! the captured bytes back.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::json::Json;
use framewire::envelope::{parse_prelude, PreludeStatus};
use framewire::message::{decode_detailed, encode, BlockKind, Decoded};
use framewire::{Envelope, Integer, Limits, Value};
use sha2::{Digest, Sha256};

/// Cases whose frame 0 is the whole message and uses only msgpack types.
const MSGPACK_ONLY: &[&str] = &[
    "plain_dict",
    "msgpack_scalar_widths",
    "lists_vs_tuples",
    "non_str_keys",
    "batched_stream",
    "set_and_enum",
    "reply_ok",
    "reply_pong",
];

const MIN_CASES: usize = 30;

fn captures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("captures")
}

fn limits() -> Limits {
    Limits::dask_compat()
}

fn read(path: &Path) -> Bytes {
    Bytes::from(fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn read_json(path: &Path) -> Json {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Json::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ordinary case directories (those with a `wire.bin`), sorted.
fn case_dirs() -> Vec<PathBuf> {
    let root = captures();
    assert!(
        root.is_dir(),
        "{} is missing: the golden tests need the committed Dask captures",
        root.display()
    );
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("wire.bin").is_file() && p.join("case.json").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= MIN_CASES,
        "only {} capture cases in {} (at least {MIN_CASES} expected)",
        dirs.len(),
        root.display()
    );
    dirs
}

fn name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

fn frame_files(dir: &Path) -> Vec<Bytes> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("frame_") && n.ends_with(".bin")
        })
        .collect();
    files.sort();
    for (i, f) in files.iter().enumerate() {
        assert_eq!(
            f.file_name().unwrap().to_string_lossy(),
            format!("frame_{i:03}.bin"),
            "{}: frame files are not numbered 000..",
            dir.display()
        );
    }
    files.iter().map(|f| read(f)).collect()
}

fn as_u64(j: &Json, what: &str) -> u64 {
    j.as_u64()
        .unwrap_or_else(|| panic!("{what}: not an unsigned integer: {j}"))
}

// ---- framewire JSON (the `message` / `blocks[].header` convention) ----------

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn float_matches(x: f64, j: &Json) -> bool {
    if let Some(tag) = j.get("$float").as_str() {
        return match tag {
            "nan" => x.is_nan(),
            "inf" => x == f64::INFINITY,
            "-inf" => x == f64::NEG_INFINITY,
            "-0.0" => x == 0.0 && x.is_sign_negative(),
            _ => false,
        };
    }
    // Python writes floats with repr (shortest round trip), and Rust parses
    // them correctly rounded: the bits must be equal.
    j.as_float().is_some_and(|y| x.to_bits() == y.to_bits())
}

fn int_matches(i: Integer, j: &Json) -> bool {
    j.as_int() == Some(i.as_i128())
}

fn bin_matches(b: &[u8], j: &Json) -> bool {
    let Some(obj) = j.as_obj() else { return false };
    match obj.iter().find(|(k, _)| k == "$bytes").map(|(_, v)| v) {
        Some(Json::Str(h)) => obj.len() == 1 && *h == hex(b),
        Some(Json::Null) => {
            j["len"].as_u64() == Some(b.len() as u64)
                && j["sha256"].as_str() == Some(hex(&Sha256::digest(b)).as_str())
        }
        _ => false,
    }
}

/// Compares a decoded value with its framewire JSON. Blocks are expected as
/// `{"$serialized": i}` / `{"$pickled": i}`, with `i` taken in order from
/// `offsets` (the depth-first order of `Decoded::blocks`).
fn check_json(
    v: &Value,
    j: &Json,
    path: &str,
    offsets: &mut std::slice::Iter<'_, (BlockKind, usize)>,
) -> Result<(), String> {
    let fail = || Err(format!("{path}: {v:?} does not match {j}"));
    let ok = match v {
        Value::Nil => j.is_null(),
        Value::Bool(b) => j.as_bool() == Some(*b),
        Value::Int(i) => int_matches(*i, j),
        Value::Float(x) => float_matches(*x, j),
        Value::Str(s) => j.as_str() == Some(&**s),
        Value::Bin(b) => bin_matches(b, j),
        Value::Array(items) => {
            let Some(arr) = j.as_arr() else { return fail() };
            if arr.len() != items.len() {
                return fail();
            }
            for (i, (x, y)) in items.iter().zip(arr).enumerate() {
                check_json(x, y, &format!("{path}[{i}]"), offsets)?;
            }
            true
        }
        Value::Map(entries) => {
            let all_str = entries.iter().all(|(k, _)| k.as_str().is_some());
            if all_str {
                let Some(obj) = j.as_obj() else { return fail() };
                let keys = || obj.iter().map(|(k, _)| k.as_str());
                if obj.len() != entries.len()
                    || keys().ne(entries.iter().map(|(k, _)| k.as_str().unwrap()))
                {
                    return Err(format!(
                        "{path}: keys {:?} vs {:?}",
                        entries.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                        keys().collect::<Vec<_>>()
                    ));
                }
                for ((k, x), (_, y)) in entries.iter().zip(obj) {
                    check_json(x, y, &format!("{path}.{}", k.as_str().unwrap()), offsets)?;
                }
            } else {
                let Some(pairs) = j.get("$map").as_arr() else {
                    return fail();
                };
                if pairs.len() != entries.len() {
                    return fail();
                }
                for (i, ((k, x), p)) in entries.iter().zip(pairs).enumerate() {
                    let p = p
                        .as_arr()
                        .filter(|p| p.len() == 2)
                        .ok_or(format!("{path}: bad $map pair"))?;
                    check_json(k, &p[0], &format!("{path}<key {i}>"), offsets)?;
                    check_json(x, &p[1], &format!("{path}<value {i}>"), offsets)?;
                }
            }
            true
        }
        Value::Serialized(_) | Value::Pickled(_) => {
            let (kind, offset) = *offsets
                .next()
                .ok_or(format!("{path}: more blocks than Decoded::blocks"))?;
            let (want_kind, tag) = match v {
                Value::Serialized(_) => (BlockKind::Serialized, "$serialized"),
                _ => (BlockKind::Pickled, "$pickled"),
            };
            kind == want_kind && j.get(tag).as_u64() == Some(offset as u64)
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        fail()
    }
}

// ---- zero-copy ------------------------------------------------------------------

fn inside(inner: &[u8], outer: &[u8]) -> bool {
    let o = outer.as_ptr_range();
    let i = inner.as_ptr_range();
    inner.is_empty() || (o.start <= i.start && i.end <= o.end)
}

/// Every str and bin of `v` points into `frame`; blocks' headers into their
/// header frame and payload frames are the frame list's own bytes.
fn check_views(v: &Value, frame: &Bytes, frames: &[Bytes], loaded: &Decoded, path: &str) {
    let mut blocks = Vec::new();
    views(v, frame, &mut blocks, path);
    assert_eq!(blocks.len(), loaded.blocks.len(), "{path}: blocks");
    for (block, r) in blocks.iter().zip(&loaded.blocks) {
        let header_frame = &frames[r.offset];
        let mut nested = Vec::new();
        views(
            block.header().map(),
            header_frame,
            &mut nested,
            &format!("{path}: header {}", r.offset),
        );
        assert!(nested.is_empty());
        assert_eq!(
            block.header().raw().map(|b| b.as_ptr()),
            Some(header_frame.as_ptr()),
            "{path}: header {} copied",
            r.offset
        );
        for (j, f) in block.frames().iter().enumerate() {
            let src = &frames[r.offset + 1 + j];
            assert!(
                f.is_empty() || f.as_ptr() == src.as_ptr(),
                "{path}: frame {} copied",
                r.offset + 1 + j
            );
        }
    }
}

fn views<'a>(v: &'a Value, frame: &Bytes, blocks: &mut Vec<&'a framewire::Block>, path: &str) {
    match v {
        Value::Str(s) => assert!(
            inside(s.as_bytes(), frame),
            "{path}: str {s:?} is not a view of its frame"
        ),
        Value::Bin(b) => assert!(
            inside(b, frame),
            "{path}: bin of {} bytes is not a view of its frame",
            b.len()
        ),
        Value::Array(items) => items.iter().for_each(|x| views(x, frame, blocks, path)),
        Value::Map(entries) => entries.iter().for_each(|(k, x)| {
            views(k, frame, blocks, path);
            views(x, frame, blocks, path);
        }),
        Value::Serialized(b) | Value::Pickled(b) => blocks.push(b),
        _ => {}
    }
}

// ---- an owned rebuild (no byte of the original reused) -------------------------

#[derive(Debug)]
enum Owned {
    Nil,
    Bool(bool),
    Int(i128),
    Float(u64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Owned>),
    Map(Vec<(Owned, Owned)>),
}

fn to_owned(v: &Value) -> Owned {
    match v {
        Value::Nil => Owned::Nil,
        Value::Bool(b) => Owned::Bool(*b),
        Value::Int(i) => Owned::Int(i.as_i128()),
        Value::Float(f) => Owned::Float(f.to_bits()),
        Value::Str(s) => Owned::Str(String::from(&**s)),
        Value::Bin(b) => Owned::Bin(b.to_vec()),
        Value::Array(items) => Owned::Array(items.iter().map(to_owned).collect()),
        Value::Map(entries) => Owned::Map(
            entries
                .iter()
                .map(|(k, x)| (to_owned(k), to_owned(x)))
                .collect(),
        ),
        other => panic!("not a msgpack-only value: {other:?}"),
    }
}

fn from_owned(o: Owned) -> Value {
    match o {
        Owned::Nil => Value::Nil,
        Owned::Bool(b) => Value::Bool(b),
        Owned::Int(i) => Value::Int(Integer::try_from_i128(i).unwrap()),
        Owned::Float(bits) => Value::Float(f64::from_bits(bits)),
        Owned::Str(s) => Value::from(s),
        Owned::Bin(b) => Value::Bin(Bytes::from(b)),
        Owned::Array(items) => Value::Array(items.into_iter().map(from_owned).collect()),
        Owned::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, x)| (from_owned(k), from_owned(x)))
                .collect(),
        ),
    }
}

// ---- one message ------------------------------------------------------------------

struct Checked {
    frames: Vec<Bytes>,
    loaded: Decoded,
}

/// Checks one captured message against its `case.json` entry (`wire`,
/// `message`, `blocks`, `orphans`). `frame_files`, when given, are the
/// expected frames.
fn check_message(label: &str, wire: &Bytes, case: &Json, frame_files: Option<&[Bytes]>) -> Checked {
    let w = &case["wire"];
    // Envelope.
    let (env, used) =
        Envelope::decode(wire, &limits()).unwrap_or_else(|e| panic!("{label}: decode: {e}"));
    assert_eq!(used, wire.len(), "{label}: used");
    assert_eq!(
        wire.len() as u64,
        as_u64(&w["total_nbytes"], "total_nbytes"),
        "{label}: total_nbytes"
    );
    let frames = env.frames().to_vec();
    if let Some(files) = frame_files {
        assert_eq!(
            frames.len(),
            files.len(),
            "{label}: frame count vs frame files"
        );
        for (i, (a, b)) in frames.iter().zip(files).enumerate() {
            assert!(a == b, "{label}: frame {i} differs from frame_{i:03}.bin");
        }
    }
    assert_eq!(
        env.first_read(),
        as_u64(&w["first_read"], "first_read"),
        "{label}: first_read"
    );
    assert_eq!(
        frames.len() as u64,
        as_u64(&w["n_frames"], "n_frames"),
        "{label}: n_frames"
    );
    let lengths: Vec<u64> = w["frame_lengths"]
        .as_arr()
        .unwrap()
        .iter()
        .map(|x| as_u64(x, "frame_lengths"))
        .collect();
    assert_eq!(
        frames.iter().map(|f| f.len() as u64).collect::<Vec<_>>(),
        lengths,
        "{label}: frame_lengths"
    );
    let PreludeStatus::Complete(prelude) = parse_prelude(wire, &limits()).unwrap() else {
        panic!("{label}: prelude incomplete")
    };
    assert_eq!(prelude.lengths(), &lengths[..], "{label}: prelude lengths");
    assert_eq!(prelude.first_read(), env.first_read());
    assert_eq!(prelude.wire_len(), wire.len() as u64);
    let k = as_u64(&w["frames_inside_first_read"], "frames_inside_first_read") as usize;
    assert_eq!(
        prelude.frames_in_first_read(),
        k,
        "{label}: frames_inside_first_read"
    );
    // Zero-copy envelope.
    for (i, f) in frames.iter().enumerate() {
        assert!(
            inside(f, wire),
            "{label}: frame {i} is not a slice of the wire buffer"
        );
    }

    // Message layer.
    let loaded =
        decode_detailed(&frames, &limits()).unwrap_or_else(|e| panic!("{label}: loads: {e}"));
    let blocks = case["blocks"].as_arr().unwrap();
    assert_eq!(
        loaded.blocks.len(),
        blocks.len(),
        "{label}: number of blocks"
    );
    let mut offsets = Vec::new();
    for (i, (r, b)) in loaded.blocks.iter().zip(blocks).enumerate() {
        let kind = match b["kind"].as_str().unwrap() {
            "serialized" => BlockKind::Serialized,
            "pickled" => BlockKind::Pickled,
            other => panic!("{label}: block kind {other}"),
        };
        assert_eq!(r.kind, kind, "{label}: block {i} kind");
        assert_eq!(
            r.offset as u64,
            as_u64(&b["offset"], "offset"),
            "{label}: block {i} offset"
        );
        assert_eq!(
            r.num_sub_frames as u64,
            as_u64(&b["num_sub_frames"], "num_sub_frames"),
            "{label}: block {i} num_sub_frames"
        );
        offsets.push((r.kind, r.offset));
    }
    let orphans: Vec<usize> = case["orphans"]
        .as_arr()
        .unwrap()
        .iter()
        .map(|x| as_u64(x, "orphans") as usize)
        .collect();
    assert_eq!(loaded.orphans, orphans, "{label}: orphans");
    // Frame 0 and every sub-header, against the JSON.
    let mut it = offsets.iter();
    check_json(
        &loaded.value,
        &case["message"],
        &format!("{label}: message"),
        &mut it,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        it.next().is_none(),
        "{label}: fewer placeholders than blocks"
    );
    let mut found = Vec::new();
    views(&loaded.value, &frames[0], &mut found, label);
    for ((block, r), b) in found.iter().zip(&loaded.blocks).zip(blocks) {
        check_json(
            block.header().map(),
            &b["header"],
            &format!("{label}: header {}", r.offset),
            &mut [].iter(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // Zero-copy values.
    check_views(&loaded.value, &frames[0], &frames, &loaded, label);

    // Re-encoding.
    if orphans.is_empty() {
        let again = encode(&loaded.value).unwrap_or_else(|e| panic!("{label}: dumps: {e}"));
        assert_eq!(again.len(), frames.len(), "{label}: re-encoded frame count");
        for (i, (a, b)) in again.iter().zip(&frames).enumerate() {
            assert!(
                a == b,
                "{label}: re-encoded frame {i} differs:\n  ours   {}\n  theirs {}",
                hex(&a[..a.len().min(96)]),
                hex(&b[..b.len().min(96)])
            );
        }
        let rewire = Envelope::with_first_read_frames(again, k)
            .unwrap()
            .to_bytes();
        assert!(
            rewire == *wire,
            "{label}: re-framed message differs from the capture"
        );
    }
    Checked { frames, loaded }
}

// ---- tests ---------------------------------------------------------------------

#[test]
fn captures_directory_is_complete() {
    let dirs = case_dirs();
    let names: Vec<String> = dirs.iter().map(|d| name(d)).collect();
    for n in MSGPACK_ONLY {
        assert!(names.iter().any(|x| x == n), "capture {n} is missing");
    }
    for special in ["handshake", "real_scheduler_echo"] {
        assert!(
            captures().join(special).join("case.json").is_file(),
            "capture {special} is missing"
        );
    }
    let index = read_json(&captures().join("index.json"));
    assert_eq!(index["versions"]["distributed"].as_str(), Some("2026.8.0"));
}

#[test]
fn every_capture_decodes_to_its_case_json_and_reencodes_byte_identical() {
    let mut orphan_cases = 0;
    for dir in case_dirs() {
        let label = name(&dir);
        let wire = read(&dir.join("wire.bin"));
        let case = read_json(&dir.join("case.json"));
        let files = frame_files(&dir);
        let checked = check_message(&label, &wire, &case, Some(&files));
        if !checked.loaded.orphans.is_empty() {
            orphan_cases += 1;
        }
    }
    // The orphan rule is exercised by at least one capture.
    assert!(orphan_cases >= 1);
}

#[test]
fn msgpack_only_frame0_reencodes_from_a_freshly_built_value() {
    for n in MSGPACK_ONLY {
        let dir = captures().join(n);
        let files = frame_files(&dir);
        assert_eq!(files.len(), 1, "{n}: not a one-frame message");
        let wire = read(&dir.join("wire.bin"));
        let case = read_json(&dir.join("case.json"));
        let checked = check_message(n, &wire, &case, Some(&files));
        assert!(checked.loaded.blocks.is_empty());
        // Deep rebuild: no str, bin or container of the decoded value survives.
        let owned = to_owned(&checked.loaded.value);
        let fresh = from_owned(owned);
        assert_eq!(fresh, checked.loaded.value);
        let mut shared = false;
        fn any_view(v: &Value, frame: &Bytes, shared: &mut bool) {
            match v {
                Value::Str(s) if !s.is_empty() => *shared |= inside(s.as_bytes(), frame),
                Value::Bin(b) if !b.is_empty() => *shared |= inside(b, frame),
                Value::Array(items) => items.iter().for_each(|x| any_view(x, frame, shared)),
                Value::Map(entries) => entries.iter().for_each(|(k, x)| {
                    any_view(k, frame, shared);
                    any_view(x, frame, shared);
                }),
                _ => {}
            }
        }
        any_view(&fresh, &checked.frames[0], &mut shared);
        assert!(
            !shared,
            "{n}: the rebuilt value still points into the capture"
        );
        let out = encode(&fresh).unwrap();
        assert_eq!(out.len(), 1, "{n}");
        assert!(
            out[0] == files[0],
            "{n}: frame 0 encoded from a fresh value differs:\n  ours   {}\n  theirs {}",
            hex(&out[0][..out[0].len().min(200)]),
            hex(&files[0][..files[0].len().min(200)])
        );
        let k = case["wire"]["frames_inside_first_read"].as_u64().unwrap() as usize;
        assert!(
            Envelope::with_first_read_frames(out, k).unwrap().to_bytes() == wire,
            "{n}: wire"
        );
    }
}

#[test]
fn handshakes_decode_to_compression_python_pickle_protocol() {
    let dir = captures().join("handshake");
    let case = read_json(&dir.join("case.json"));
    let files = case["files"].as_obj().expect("handshake files");
    assert_eq!(files.len(), 4);
    for (file, entry) in files {
        let label = format!("handshake/{file}");
        let wire = read(&dir.join(file));
        let checked = check_message(&label, &wire, entry, None);
        let v = &checked.loaded.value;
        let keys: Vec<&str> = v
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            ["compression", "python", "pickle-protocol"],
            "{label}"
        );
        assert_eq!(v.get("pickle-protocol"), Some(&Value::int(5u8)), "{label}");
        let python = v.get("python").unwrap().as_array().unwrap();
        assert_eq!(python.len(), 3, "{label}");
        let compression = v.get("compression").unwrap();
        if file.starts_with("lz4") {
            assert_eq!(compression.as_str(), Some("lz4"), "{label}");
        } else {
            assert_eq!(*compression, Value::Nil, "{label}");
        }
        // Fresh rebuild re-encodes identically too.
        let fresh = from_owned(to_owned(v));
        assert!(encode(&fresh).unwrap()[0] == checked.frames[0], "{label}");
    }
}

#[test]
fn real_scheduler_echo_decodes_and_reencodes() {
    let dir = captures().join("real_scheduler_echo");
    let case = read_json(&dir.join("case.json"));
    let files = case["files"].as_obj().expect("real_scheduler_echo files");
    assert_eq!(files.len(), 4);
    let mut decoded = std::collections::BTreeMap::new();
    for (file, entry) in files {
        let label = format!("real_scheduler_echo/{file}");
        let wire = read(&dir.join(file));
        decoded.insert(file.clone(), check_message(&label, &wire, entry, None));
    }
    // The scheduler echoes the block unchanged: same sub-header and payload bytes.
    let req = &decoded["request.bin"];
    let rep = &decoded["reply.bin"];
    assert_eq!(req.frames[1..], rep.frames[1..]);
    let hs = &decoded["scheduler_handshake.bin"].loaded.value;
    let keys: Vec<&str> = hs
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, ["compression", "python", "pickle-protocol"]);
}

/// The JSON comparison is not vacuous: a changed value, key order, float
/// bit or placeholder offset is caught.
#[test]
fn json_comparison_catches_differences() {
    let dir = captures().join("plain_dict");
    let frames = frame_files(&dir);
    let case = read_json(&dir.join("case.json"));
    let v = decode_detailed(&frames, &limits()).unwrap().value;
    let good = &case["message"];
    assert!(check_json(&v, good, "plain_dict", &mut [].iter()).is_ok());
    let text = good.to_string();
    for (from, to) in [
        ("\"heartbeat-worker\"", "\"heartbeat-workers\""),
        ("1700000000.25", "1700000000.2500002"),
        ("123456789", "123456788"),
        ("\"executing\": 3", "\"executing\": 3.0"),
        ("null", "false"),
    ] {
        assert!(text.contains(from), "{from}");
        let bad = Json::parse(&text.replacen(from, to, 1)).unwrap();
        assert!(
            check_json(&v, &bad, "plain_dict", &mut [].iter()).is_err(),
            "{from} -> {to} not caught"
        );
    }
    // Key order matters.
    let Json::Obj(mut entries) = good.clone() else {
        panic!()
    };
    entries.swap(0, 1);
    assert!(check_json(&v, &Json::Obj(entries), "plain_dict", &mut [].iter()).is_err());
    // Placeholder offsets are checked.
    let dir = captures().join("task_with_numpy");
    let frames = frame_files(&dir);
    let case = read_json(&dir.join("case.json"));
    let l = decode_detailed(&frames, &limits()).unwrap();
    let offsets: Vec<_> = l.blocks.iter().map(|b| (b.kind, b.offset)).collect();
    assert!(check_json(&l.value, &case["message"], "t", &mut offsets.iter()).is_ok());
    let shifted: Vec<_> = offsets.iter().map(|&(k, o)| (k, o + 1)).collect();
    assert!(check_json(&l.value, &case["message"], "t", &mut shifted.iter()).is_err());
}
