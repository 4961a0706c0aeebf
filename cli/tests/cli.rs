//! The `framewire` binary against the project's Dask captures
//! (`tests/captures/`, made by `tests/dask/gen_captures.py`) and against
//! crafted bad input.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value as Json;

#[path = "support/procs.rs"]
mod procs;
use procs::{scratch_dir, spawn_framewire};

/// A hang guard only (every command here finishes in milliseconds): a
/// command still running after it is killed and the test fails.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn captures() -> PathBuf {
    procs::repo_root().join("tests/captures")
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let child = spawn_framewire(args, stdin);
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("framewire {args:?} still running after {HANG_GUARD:?}: killed")
        }
    }
}

fn run_file(args: &[&str], file: &Path) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.push(file.to_str().unwrap());
    run(&all, None)
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The parts of a `case.json` these tests compare against: `wire`,
/// `message`, `blocks`, `orphans` and (handshake folders) `files`.
///
/// Other keys (`input`, `value`) wrap every tuple in `{"$tuple": ..}` and can
/// nest deeper than serde_json's recursion limit of 128, so the top-level
/// object is split without parsing them.
fn read_json(path: &Path) -> Json {
    const WANTED: [&str; 5] = ["wire", "message", "blocks", "orphans", "files"];
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = serde_json::Map::new();
    for (key, raw) in top_level_entries(&text) {
        if WANTED.contains(&key.as_str()) {
            let v = serde_json::from_str(raw)
                .unwrap_or_else(|e| panic!("{}: {key}: {e}", path.display()));
            out.insert(key, v);
        }
    }
    Json::Object(out)
}

/// The `(key, raw value text)` entries of a top-level JSON object, found by
/// scanning brackets, commas and colons outside strings.
fn top_level_entries(text: &str) -> Vec<(String, &str)> {
    let mut entries = Vec::new();
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    let (mut start, mut colon) = (0usize, None);
    let mut push = |start: usize, colon: Option<usize>, end: usize| {
        if let Some(c) = colon {
            let key: String = serde_json::from_str(text[start..c].trim()).unwrap();
            entries.push((key, &text[c + 1..end]));
        }
    };
    for (i, c) in text.bytes().enumerate() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth == 1 {
                    start = i + 1;
                }
            }
            b'}' | b']' => {
                if depth == 1 {
                    push(start, colon, i);
                }
                depth -= 1;
            }
            b',' if depth == 1 => {
                push(start, colon.take(), i);
                start = i + 1;
            }
            b':' if depth == 1 && colon.is_none() => colon = Some(i),
            _ => {}
        }
    }
    entries
}

/// Case directories with a `wire.bin`, sorted.
fn wire_cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(captures())
        .expect("tests/captures exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("wire.bin").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 20,
        "expected the capture cases, found {dirs:?}"
    );
    dirs
}

/// Checks one `inspect --json` line against a capture's expectations
/// (`wire`, `message`, `blocks`, `orphans`).
fn check_line(what: &str, line: &Json, expected: &Json) {
    let wire = &expected["wire"];
    let pairs = [
        ("n_frames", &wire["n_frames"]),
        ("frame_lengths", &wire["frame_lengths"]),
        ("first_read", &wire["first_read"]),
        ("blocks", &expected["blocks"]),
        ("orphans", &expected["orphans"]),
        ("message", &expected["message"]),
    ];
    for (key, want) in pairs {
        assert!(!want.is_null(), "{what}: the capture has no {key}");
        assert_eq!(&line[key], want, "{what}: {key}");
    }
    let keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "n_frames",
            "frame_lengths",
            "first_read",
            "blocks",
            "orphans",
            "message"
        ],
        "{what}: keys and their order"
    );
}

fn inspect_one(file: &Path) -> Json {
    let out = run_file(&["inspect", "--json"], file);
    assert!(out.status.success(), "{}: {}", file.display(), stderr(&out));
    let lines = stdout_lines(&out);
    assert_eq!(lines.len(), 1, "{}: one message", file.display());
    serde_json::from_str(&lines[0]).unwrap()
}

// ---- 1. inspect --json matches the captures ---------------------------------

#[test]
fn inspect_json_matches_every_capture() {
    for dir in wire_cases() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let line = inspect_one(&dir.join("wire.bin"));
        check_line(&name, &line, &read_json(&dir.join("case.json")));
    }
}

#[test]
fn inspect_json_matches_handshake_and_real_scheduler_files() {
    for case in ["handshake", "real_scheduler_echo"] {
        let dir = captures().join(case);
        let expected = read_json(&dir.join("case.json"));
        let files = expected["files"].as_object().expect("files");
        assert!(!files.is_empty());
        for (file, want) in files {
            let line = inspect_one(&dir.join(file));
            check_line(&format!("{case}/{file}"), &line, want);
        }
        // Every .bin in the folder decodes, listed or not.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "bin") {
                inspect_one(&path);
            }
        }
    }
}

// ---- 2. roundtrip -------------------------------------------------------------

#[test]
fn roundtrip_is_identical_without_orphans() {
    let mut orphan_cases = 0;
    for dir in wire_cases() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let expected = read_json(&dir.join("case.json"));
        let out = run_file(&["roundtrip"], &dir.join("wire.bin"));
        let lines = stdout_lines(&out);
        if expected["orphans"].as_array().unwrap().is_empty() {
            assert!(out.status.success(), "{name}: {lines:?} {}", stderr(&out));
            assert_eq!(lines, ["message #0: identical"], "{name}");
        } else {
            orphan_cases += 1;
            assert_eq!(out.status.code(), Some(1), "{name}");
            assert_eq!(lines.len(), 1, "{name}");
            assert!(
                lines[0].starts_with("message #0: differs"),
                "{name}: {lines:?}"
            );
        }
        assert!(out.stderr.is_empty(), "{name}: {}", stderr(&out));
    }
    assert!(orphan_cases >= 1);
}

#[test]
fn roundtrip_reports_dropped_orphans() {
    let file = captures().join("pickle_fallback_orphans/wire.bin");
    let out = run_file(&["roundtrip"], &file);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout_lines(&out),
        ["message #0: differs: orphan frames [1, 2] are dropped on re-encoding"]
    );
}

#[test]
fn roundtrip_of_handshake_streams() {
    for file in [
        "handshake/client_to_server.bin",
        "real_scheduler_echo/reply.bin",
    ] {
        let out = run_file(&["roundtrip"], &captures().join(file));
        assert!(out.status.success(), "{file}: {}", stderr(&out));
    }
}

// ---- 3. several messages, stdin ----------------------------------------------

/// A stream of several captures back to back, and their expectations.
fn stream() -> (Vec<u8>, Vec<(String, Json)>) {
    let names = [
        "plain_dict",
        "task_with_numpy",
        "pickle_fallback_orphans",
        "reply_ok",
    ];
    let mut wire = Vec::new();
    let mut expected = Vec::new();
    for name in names {
        let dir = captures().join(name);
        wire.extend(std::fs::read(dir.join("wire.bin")).unwrap());
        expected.push((name.to_owned(), read_json(&dir.join("case.json"))));
    }
    (wire, expected)
}

fn check_stream_output(out: &Output, expected: &[(String, Json)]) {
    assert!(out.status.success(), "{}", stderr(out));
    let lines = stdout_lines(out);
    assert_eq!(lines.len(), expected.len());
    for (line, (name, want)) in lines.iter().zip(expected) {
        check_line(name, &serde_json::from_str(line).unwrap(), want);
    }
}

#[test]
fn several_messages_back_to_back() {
    let (wire, expected) = stream();
    let dir = scratch_dir("cli-stream");
    let dir = dir.path();
    let file = dir.join("stream.bin");
    std::fs::write(&file, &wire).unwrap();
    check_stream_output(&run_file(&["inspect", "--json"], &file), &expected);

    // Two files: their messages one after the other.
    let out = run(
        &[
            "inspect",
            "--json",
            file.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        None,
    );
    let twice: Vec<_> = expected.iter().chain(&expected).cloned().collect();
    check_stream_output(&out, &twice);

    // roundtrip numbers the messages and fails only for the orphan one.
    let out = run_file(&["roundtrip"], &file);
    assert_eq!(out.status.code(), Some(1));
    let lines = stdout_lines(&out);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], "message #0: identical");
    assert_eq!(lines[1], "message #1: identical");
    assert!(lines[2].starts_with("message #2: differs: orphan frames"));
    assert_eq!(lines[3], "message #3: identical");
}

#[test]
fn stdin_as_dash() {
    let (wire, expected) = stream();
    check_stream_output(&run(&["inspect", "--json", "-"], Some(&wire)), &expected);
    let human = run(&["inspect", "-"], Some(&wire));
    assert!(human.status.success());
    assert!(String::from_utf8(human.stdout)
        .unwrap()
        .contains("message #3:"));
}

#[test]
fn empty_input_has_no_messages() {
    let out = run(&["inspect", "--json", "-"], Some(b""));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let out = run(&["roundtrip", "-"], Some(b""));
    assert!(out.status.success(), "{}", stderr(&out));
}

// ---- 4. bad input ---------------------------------------------------------------

/// A message with this `N` and these declared lengths, followed by `body`.
fn raw_message(first_read: u64, lengths: &[u64], body: &[u8]) -> Vec<u8> {
    let mut out = first_read.to_le_bytes().to_vec();
    out.extend((lengths.len() as u64).to_le_bytes());
    for l in lengths {
        out.extend(l.to_le_bytes());
    }
    out.extend(body);
    out
}

/// A well-formed envelope around these frames (first read = everything).
/// A map of one string key `key` (its bytes as given, UTF-8 or not) to the
/// integer 0, as msgpack: frame 0 of a bad message.
fn map_to_zero(key: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    rmp::encode::write_map_len(&mut frame, 1).unwrap();
    rmp::encode::write_str_len(&mut frame, key.len() as u32).unwrap();
    frame.extend_from_slice(key);
    rmp::encode::write_pfix(&mut frame, 0).unwrap();
    frame
}

fn message(frames: &[&[u8]]) -> Vec<u8> {
    let lengths: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
    let n = 8 + 8 * frames.len() as u64 + lengths.iter().sum::<u64>();
    raw_message(n, &lengths, &frames.concat())
}

/// Runs `inspect --json` (from a file, and from stdin) and `roundtrip` on bad
/// input; returns the single stderr line.
fn assert_rejected(tag: &str, prefix: &[u8], bad: &[u8], index: usize, expect: &str) -> String {
    let mut data = prefix.to_vec();
    data.extend(bad);
    let dir = scratch_dir(&format!("cli-{tag}"));
    let file = dir.path().join("bad.bin");
    std::fs::write(&file, &data).unwrap();
    let path = file.to_str().unwrap();
    let mut first = None;
    for (args, stdin) in [
        (vec!["inspect", "--json", path], None),
        (vec!["inspect", path], None),
        (vec!["inspect", "--json", "-"], Some(&data[..])),
        (vec!["roundtrip", path], None),
    ] {
        let out = run(&args, stdin);
        assert_eq!(out.status.code(), Some(1), "{tag} {args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{tag} {args:?}: one line: {err:?}");
        assert!(!err.contains("panicked"), "{tag}: {err}");
        let name = if stdin.is_some() { "<stdin>" } else { path };
        let at = format!("{name}: message #{index} at byte {}: ", prefix.len());
        assert!(err.contains(&at), "{tag} {args:?}: {err:?} lacks {at:?}");
        assert!(
            err.contains(expect),
            "{tag} {args:?}: {err:?} lacks {expect:?}"
        );
        if index == 0 {
            assert!(out.stdout.is_empty(), "{tag} {args:?}: stdout not empty");
        } else if args[1] == "--json" {
            assert_eq!(stdout_lines(&out).len(), index, "{tag} {args:?}");
        }
        first.get_or_insert(err);
    }
    first.unwrap()
}

#[test]
fn huge_declared_frame() {
    let bad = raw_message(16, &[1 << 60], b"");
    assert_rejected(
        "huge-frame",
        b"",
        &bad,
        0,
        // dask_compat() sets no frame limit: the file just ends too soon.
        "truncated at byte 24: the message needs 1152921504606847000 bytes, 24 available",
    );
}

#[test]
fn huge_declared_frame_count() {
    let mut bad = raw_message(16, &[], b"");
    bad[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert_rejected(
        "huge-count",
        b"",
        &bad,
        0,
        "1152921504606846976 frames declared",
    );
}

#[test]
fn deep_nesting() {
    let mut frame0 = vec![0x91u8; 100_000];
    frame0.push(0x00);
    let bad = message(&[&frame0]);
    let err = assert_rejected("deep", b"", &bad, 0, "nesting deeper than 1024");
    // The error's own offset, in the file: prelude (24) + 1024 containers.
    assert!(err.contains("(file byte 1048)"), "{err}");
}

#[test]
fn truncated_file() {
    let wire = std::fs::read(captures().join("task_with_numpy/wire.bin")).unwrap();
    let cut = &wire[..wire.len() - 5];
    let err = assert_rejected("truncated", b"", cut, 0, "truncated");
    assert!(err.contains(&format!("{} bytes", wire.len())), "{err}");
    // A prelude cut short, after a good message.
    let ok = std::fs::read(captures().join("plain_dict/wire.bin")).unwrap();
    assert_rejected("truncated-prelude", &ok, &wire[..11], 1, "truncated");
}

#[test]
fn first_read_not_on_a_frame_boundary() {
    let mut a = Vec::new();
    rmp::encode::write_str(&mut a, "a").unwrap();
    let mut bad = message(&[&a, b"xyz"]);
    bad[..8].copy_from_slice(&(24u64 + 1).to_le_bytes());
    assert_rejected("boundary", b"", &bad, 0, "not on a frame boundary");
}

#[test]
fn invalid_utf8() {
    // A key of two bytes that are not UTF-8.
    let bad = message(&[&map_to_zero(&[0xff, 0xfe])]);
    let err = assert_rejected("utf8", b"", &bad, 0, "not UTF-8");
    assert!(err.contains("frame 0 byte 1"), "{err}");
}

#[test]
fn placeholder_offset_zero() {
    let bad = message(&[&map_to_zero(b"__Serialized__")]);
    assert_rejected("offset0", b"", &bad, 0, "not a positive integer");
}

#[test]
fn error_in_a_later_message() {
    let ok = std::fs::read(captures().join("plain_dict/wire.bin")).unwrap();
    let mut prefix = ok.clone();
    prefix.extend(&ok);
    let bad = message(&[&map_to_zero(b"__Serialized__")]);
    let err = assert_rejected("later", &prefix, &bad, 2, "not a positive integer");
    // The placeholder map starts at byte 0 of frame 0, after a 24-byte prelude.
    assert!(
        err.contains(&format!("(file byte {})", prefix.len() + 24)),
        "{err}"
    );
}

#[test]
fn missing_file() {
    let out = run(&["inspect", "/nonexistent/framewire/capture.bin"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1);
    assert!(err.contains("/nonexistent/framewire/capture.bin"), "{err}");
}

// ---- 5. human output ----------------------------------------------------------

#[test]
fn human_output_for_task_with_numpy() {
    let out = run_file(&["inspect"], &captures().join("task_with_numpy/wire.bin"));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "message #0: 5 frames, 664 bytes, first read 644",
        "frame",
        "role",
        "message",
        "sub-header of serialized@1",
        "payload 0 of serialized@1",
        "sub-header of serialized@3",
        "op: \"compute-task\"",
        "serialized@1: serializer dask, type numpy.ndarray, dtype <i8, shape [5]",
        "serialized@3: serializer dask, type numpy.ndarray, dtype <f4, shape [3]",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // The frame table: index, length, role.
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["2", "40", "payload", "0", "of", "serialized@1"]),
        "{text}"
    );
}

#[test]
fn human_output_marks_orphans() {
    let out = run_file(
        &["inspect"],
        &captures().join("pickle_fallback_orphans/wire.bin"),
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["1", "160", "orphan"]),
        "{text}"
    );
    assert!(text.contains("pickled@5"), "{text}");
}

/// `framewire inspect --json --deserialize FILE`, its one line.
fn inspect_deserialize(file: &Path) -> Json {
    let out = run(
        &["inspect", "--json", "--deserialize", file.to_str().unwrap()],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn inspect_deserialize_decompresses_the_captures() {
    use sha2::{Digest, Sha256};
    let sha = |b: &[u8]| hex::encode(Sha256::digest(b));
    for name in [
        "lz4_compression",
        "lz4_compression_sharded",
        "zstd_compression",
    ] {
        let dir = captures().join(name);
        let case: Json =
            serde_json::from_str(&std::fs::read_to_string(dir.join("case.json")).unwrap()).unwrap();
        let line = inspect_deserialize(&dir.join("wire.bin"));
        let (ours, theirs) = (&line["value"], &case["value"]);
        let ours = ours.as_object().unwrap();
        assert_eq!(ours.len(), theirs.as_object().unwrap().len(), "{name}");
        for (k, v) in ours {
            let t = &theirs[k];
            match (v.get("$ndarray"), t.get("$ndarray")) {
                (Some(a), Some(b)) => {
                    assert_eq!(
                        (&a["dtype"], &a["shape"]),
                        (&b["dtype"], &b["shape"]),
                        "{name}/{k}"
                    );
                    let want = match b["data_hex"].as_str() {
                        Some(h) => sha(&hex::decode(h).unwrap()),
                        None => b["data_sha256"].as_str().unwrap().to_owned(),
                    };
                    assert_eq!(a["data_sha256"], want.as_str(), "{name}/{k}");
                }
                _ => assert_eq!(v, t, "{name}/{k}"),
            }
        }
    }
    // The Pickled block stays opaque, its 93-byte compressed buffer as it came.
    let line = inspect_deserialize(&captures().join("topickle_lz4/wire.bin"));
    assert_eq!(
        line["value"]["arr"]["$opaque"],
        serde_json::json!({"serializer": "pickle", "frame_lengths": [93]})
    );
}
