//! Every hex example in SPEC.md is a test.
//!
//! The preamble of SPEC.md ("Examples are tests") defines the format: a fenced block with info string
//! `hex example=NAME` holds the bytes (hex digit pairs, whitespace ignored, `#`
//! starts a comment to the end of the line, `XX*n` repeats the bytes `XX` n
//! times), and the very next fenced block, `json expect=NAME`, says what
//! decoding those bytes with `Limits::dask_compat()` must produce:
//!
//! * accepted: `first_read`, `frame_lengths`, `blocks` (`[kind, offset,
//!   num_sub_frames]` in placeholder order), `orphans`, and optionally
//!   `message` (frame 0 as JSON), `depth` (container nesting of frame 0),
//!   `sub_headers` (`{"offset": map}`), `deserialized` (what layer 3 makes of
//!   each block, in placeholder order), `rest` (bytes left after the message),
//!   `next` (the expectation for the bytes after the message), `reencoded` (hex
//!   of the re-encoding when it is not byte-identical to the input);
//! * rejected: `{"error": "Variant"}`, the `Debug` name of the innermost
//!   variant of the error (`DepthExceeded` for
//!   `MessageError::Msgpack(MsgpackError::DepthExceeded { .. })`);
//! * either: `limits: "strict"` to decode with `Limits::strict()` instead.
//!
//! Accepted examples are re-encoded (`dumps`, then an envelope whose first read
//! covers as many frames as the input's did) and must give back the input's
//! bytes exactly, or `reencoded` when it is given.

use bytes::Bytes;
use framewire::message::decode_detailed;
use framewire::message::{BlockKind, Decoded};
use framewire::serialize::{deserialize, DeserializeOptions};
use framewire::{dumps, Block, Envelope, Limits, Value};
use serde_json::{json, Map, Value as Json};

const SPEC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/SPEC.md");

struct Example {
    name: String,
    line: usize,
    bytes: Vec<u8>,
    expect: Json,
}

/// The info string of a fence line (` ```hex example=x ` → `hex example=x`).
fn fence_info(line: &str) -> Option<&str> {
    line.trim_start().strip_prefix("```").map(str::trim)
}

/// The `NAME` of `lang key=NAME`, if the info string has that shape.
fn tagged<'a>(info: &'a str, lang: &str, key: &str) -> Option<&'a str> {
    let rest = info.strip_prefix(lang)?.trim_start();
    rest.strip_prefix(key)?.strip_prefix('=').map(str::trim)
}

/// Reads a fenced block starting after line `start`; returns its body and the
/// index of the closing fence.
fn block_body(lines: &[&str], start: usize) -> (String, usize) {
    let mut body = String::new();
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        if fence_info(line) == Some("") {
            return (body, i);
        }
        body.push_str(line);
        body.push('\n');
    }
    panic!("SPEC.md line {}: fenced block never closed", start + 1);
}

fn parse_hex(name: &str, text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split('#').next().unwrap_or("");
        for token in code.split_whitespace() {
            let (digits, times) = match token.split_once('*') {
                Some((d, n)) => (
                    d,
                    n.parse::<usize>()
                        .unwrap_or_else(|_| panic!("{name}: bad repeat count in {token:?}")),
                ),
                None => (token, 1),
            };
            let bytes =
                hex::decode(digits).unwrap_or_else(|e| panic!("{name}: bad hex {token:?}: {e}"));
            for _ in 0..times {
                out.extend_from_slice(&bytes);
            }
        }
    }
    out
}

fn examples() -> Vec<Example> {
    let spec = std::fs::read_to_string(SPEC_PATH)
        .unwrap_or_else(|e| panic!("cannot read {SPEC_PATH}: {e}"));
    let lines: Vec<&str> = spec.lines().collect();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = fence_info(lines[i]) else {
            i += 1;
            continue;
        };
        if info.is_empty() {
            // An untagged block: skip to its end so its contents are not
            // mistaken for fences.
            i = block_body(&lines, i).1 + 1;
            continue;
        }
        if let Some(name) = tagged(info, "json", "expect") {
            panic!(
                "SPEC.md line {}: expectation {name:?} does not follow a hex example",
                i + 1
            );
        }
        let Some(name) = tagged(info, "hex", "example") else {
            assert!(
                !info.contains("example=") && !info.contains("expect="),
                "SPEC.md line {}: malformed example fence {info:?}",
                i + 1
            );
            i = block_body(&lines, i).1 + 1;
            continue;
        };
        let name = name.to_string();
        assert!(
            !name.is_empty(),
            "SPEC.md line {}: example without a name",
            i + 1
        );
        assert!(
            out.iter().all(|e| e.name != name),
            "SPEC.md line {}: duplicate example name {name:?}",
            i + 1
        );
        let (hex_text, end) = block_body(&lines, i);
        let bytes = parse_hex(&name, &hex_text);
        assert!(!bytes.is_empty(), "example {name:?} has no bytes");
        // The expectation must come next (blank lines allowed in between).
        let mut j = end + 1;
        while j < lines.len() && lines[j].trim().is_empty() {
            j += 1;
        }
        let expect_info = lines.get(j).and_then(|l| fence_info(l));
        let expect_name = expect_info.and_then(|info| tagged(info, "json", "expect"));
        assert_eq!(
            expect_name,
            Some(name.as_str()),
            "SPEC.md line {}: example {name:?} is not followed by ```json expect={name}",
            i + 1
        );
        let (json_text, json_end) = block_body(&lines, j);
        let expect: Json = serde_json::from_str(&json_text)
            .unwrap_or_else(|e| panic!("expectation {name:?}: invalid JSON: {e}"));
        out.push(Example {
            name,
            line: i + 1,
            bytes,
            expect,
        });
        i = json_end + 1;
    }
    out
}

/// The `Debug` name of an error's innermost variant, past the wrappers of
/// the layers above: `FrameAliased { frame: 1 }` → `FrameAliased`,
/// `Msgpack(DepthExceeded { .. })` → `DepthExceeded`.
fn variant_name(e: &impl std::fmt::Debug) -> String {
    const WRAPPERS: [&str; 5] = [
        "Envelope",
        "Message",
        "Deserialize",
        "Msgpack",
        "Compression",
    ];
    let text = format!("{e:?}");
    let mut rest = text.as_str();
    loop {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        match rest[name.len()..].strip_prefix('(') {
            Some(inner) if WRAPPERS.contains(&name.as_str()) => rest = inner,
            _ => return name,
        }
    }
}

/// Frame 0 as JSON. Placeholders are numbered in the order the walk meets
/// them (map keys before values), which is the order of `Decoded::blocks`.
/// With `deserialized`, the value is a block's layer-3 result instead:
/// arrays become `{"$ndarray": ..}`, blocks kept opaque `{"$opaque": serializer}`.
struct ToJson<'a> {
    loaded: &'a Decoded,
    next_block: usize,
    sub_headers: Map<String, Json>,
    /// Every block met, in placeholder order.
    found: Vec<Block>,
    deserialized: bool,
    errors: Vec<String>,
}

impl ToJson<'_> {
    fn convert(&mut self, v: &Value) -> Json {
        match v {
            Value::Nil => Json::Null,
            Value::Bool(b) => json!(b),
            Value::Int(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => json!(u),
                (None, Some(s)) => json!(s),
                (None, None) => unreachable!("integers are in i64 ∪ u64"),
            },
            Value::Float(f) if f.is_finite() => json!(f),
            Value::Float(f) => json!({ "$float": f.to_string() }),
            Value::Str(s) => json!(&**s),
            Value::Bin(b) => json!({ "$bytes": hex::encode(b) }),
            Value::Array(items) => Json::Array(items.iter().map(|x| self.convert(x)).collect()),
            Value::Map(entries) => {
                let pairs: Vec<(Json, Json)> = entries
                    .iter()
                    .map(|(k, v)| (self.convert(k), self.convert(v)))
                    .collect();
                let mut seen = std::collections::HashSet::new();
                let plain = pairs
                    .iter()
                    .all(|(k, _)| k.as_str().is_some_and(|s| seen.insert(s.to_string())));
                if plain {
                    Json::Object(
                        pairs
                            .into_iter()
                            .map(|(k, v)| (k.as_str().unwrap().to_string(), v))
                            .collect(),
                    )
                } else {
                    json!({ "$map": pairs.into_iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>() })
                }
            }
            Value::Serialized(b) if self.deserialized => {
                json!({ "$opaque": b.header().get("serializer").map(|s| self.convert(s)) })
            }
            Value::NdArray(a) if self.deserialized => {
                let ints = |xs: &[u64]| json!(xs);
                let mut o = Map::new();
                o.insert("dtype".into(), json!(a.dtype()));
                o.insert("shape".into(), ints(a.shape()));
                o.insert("strides".into(), ints(a.strides()));
                if let Some(full) = a.broadcast_to() {
                    o.insert("broadcast_to".into(), ints(full));
                }
                o.insert("writeable".into(), json!(a.writeable()));
                o.insert("data".into(), json!(hex::encode(a.data())));
                json!({ "$ndarray": o })
            }
            Value::Serialized(b) => self.block(BlockKind::Serialized, b),
            Value::Pickled(b) => self.block(BlockKind::Pickled, b),
            // Values that only exist before serialization never come out of `loads`.
            #[allow(unreachable_patterns)]
            other => {
                self.errors
                    .push(format!("unexpected value from loads: {other:?}"));
                Json::Null
            }
        }
    }

    fn block(&mut self, kind: BlockKind, block: &framewire::Block) -> Json {
        let Some(r) = self.loaded.blocks.get(self.next_block).copied() else {
            self.errors
                .push("more blocks in the value than in Decoded::blocks".into());
            return Json::Null;
        };
        self.next_block += 1;
        self.found.push(block.clone());
        if r.kind != kind {
            self.errors
                .push(format!("block {} kind {:?} != {kind:?}", r.offset, r.kind));
        }
        if r.num_sub_frames != block.frames().len() {
            self.errors
                .push(format!("block {} frame count mismatch", r.offset));
        }
        // Sub-headers are plain msgpack: convert them with a walker of their own.
        let mut inner = ToJson {
            loaded: self.loaded,
            next_block: usize::MAX,
            sub_headers: Map::new(),
            found: Vec::new(),
            deserialized: false,
            errors: Vec::new(),
        };
        let header = inner.convert(block.header().map());
        self.errors.extend(inner.errors);
        self.sub_headers.insert(r.offset.to_string(), header);
        let tag = match kind {
            BlockKind::Serialized => "$serialized",
            BlockKind::Pickled => "$pickled",
        };
        json!({ tag: r.offset })
    }
}

/// Equal as values and as text: JSON object equality ignores key order, and
/// wire order matters here.
fn same(a: &Json, b: &Json) -> bool {
    a == b && serde_json::to_string(a).ok() == serde_json::to_string(b).ok()
}

fn kind_name(k: BlockKind) -> &'static str {
    match k {
        BlockKind::Serialized => "serialized",
        BlockKind::Pickled => "pickled",
    }
}

/// Container nesting of a value (a scalar is 0, `[]` is 1, `[[]]` is 2).
fn depth(v: &Value) -> usize {
    // Iterative: examples nest up to Dask's 1024 levels.
    let mut max = 0;
    let mut todo = vec![(v, 0usize)]; // (value, containers around it)
    while let Some((v, around)) = todo.pop() {
        match v {
            Value::Array(items) => {
                max = max.max(around + 1);
                todo.extend(items.iter().map(|x| (x, around + 1)));
            }
            Value::Map(entries) => {
                max = max.max(around + 1);
                for (k, x) in entries {
                    todo.push((k, around + 1));
                    todo.push((x, around + 1));
                }
            }
            _ => {}
        }
    }
    max
}

/// Frames the first read covers: the smallest `k` with `prelude + Σ len[..k] = N`.
fn first_read_frames(env: &Envelope) -> usize {
    let mut at = 8 + 8 * env.frames().len() as u64;
    let mut k = 0;
    while at < env.first_read() {
        at += env.frames()[k].len() as u64;
        k += 1;
    }
    k
}

fn check(name: &str, input: &Bytes, exp: &Json) -> Result<(), String> {
    let obj = exp
        .as_object()
        .ok_or_else(|| "expectation is not a JSON object".to_string())?;
    let limits = match obj.get("limits").and_then(Json::as_str) {
        None | Some("dask_compat") => Limits::dask_compat(),
        Some("strict") => Limits::strict(),
        Some(other) => return Err(format!("unknown limits {other:?}")),
    };
    let decoded = Envelope::decode(input, &limits).map_err(|e| (variant_name(&e), e.to_string()));
    let decoded = decoded.and_then(|(env, used)| {
        decode_detailed(env.frames(), &limits)
            .map(|loaded| (env, used, loaded))
            .map_err(|e| (variant_name(&e), e.to_string()))
    });
    if let Some(want) = obj.get("error") {
        return match decoded {
            Err((got, _)) if Some(got.as_str()) == want.as_str() => Ok(()),
            Err((got, text)) => Err(format!("expected error {want}, got {got} ({text})")),
            Ok(_) => Err(format!("expected error {want}, but the bytes decoded")),
        };
    }
    let (env, used, loaded) =
        decoded.map_err(|(v, text)| format!("decoding failed: {v} ({text})"))?;

    let mut problems = Vec::new();
    let expect_eq = |problems: &mut Vec<String>, field: &str, got: Json| match obj.get(field) {
        Some(want) if !same(want, &got) => {
            problems.push(format!("{field}:\n  expected {want}\n  got      {got}"))
        }
        _ => {}
    };
    for required in ["first_read", "frame_lengths", "blocks", "orphans"] {
        if !obj.contains_key(required) {
            return Err(format!("expectation lacks {required:?}"));
        }
    }
    expect_eq(&mut problems, "first_read", json!(env.first_read()));
    expect_eq(
        &mut problems,
        "frame_lengths",
        json!(env.frames().iter().map(|f| f.len()).collect::<Vec<_>>()),
    );
    expect_eq(
        &mut problems,
        "blocks",
        json!(loaded
            .blocks
            .iter()
            .map(|b| json!([kind_name(b.kind), b.offset, b.num_sub_frames]))
            .collect::<Vec<_>>()),
    );
    expect_eq(&mut problems, "orphans", json!(loaded.orphans));
    let mut conv = ToJson {
        loaded: &loaded,
        next_block: 0,
        sub_headers: Map::new(),
        found: Vec::new(),
        deserialized: false,
        errors: Vec::new(),
    };
    let message = conv.convert(&loaded.value);
    if conv.next_block != loaded.blocks.len() {
        problems.push("Decoded::blocks has blocks the value does not".into());
    }
    problems.append(&mut conv.errors);
    if obj.contains_key("message") {
        expect_eq(&mut problems, "message", message);
    }
    if obj.contains_key("depth") {
        expect_eq(&mut problems, "depth", json!(depth(&loaded.value)));
    }
    if let Some(Json::Object(want)) = obj.get("sub_headers") {
        for (offset, want) in want {
            match conv.sub_headers.get(offset) {
                Some(got) if same(got, want) => {}
                got => problems.push(format!(
                    "sub-header {offset}:\n  expected {want}\n  got      {got:?}"
                )),
            }
        }
    }

    // Layer 3: each block deserialized on its own, with the input as the
    // backing buffer; `Pickled` blocks are never deserialized.
    if obj.contains_key("deserialized") {
        let mut opts = DeserializeOptions::with_limits(limits.clone());
        opts.backing = vec![input.clone()];
        let got: Vec<Json> = conv
            .found
            .iter()
            .zip(&loaded.blocks)
            .map(|(block, r)| match r.kind {
                BlockKind::Pickled => json!({ "$pickled": r.offset }),
                BlockKind::Serialized => match deserialize(block, &opts) {
                    Err(e) => json!({ "$error": variant_name(&e) }),
                    Ok(v) => {
                        let mut out = ToJson {
                            loaded: &loaded,
                            next_block: usize::MAX,
                            sub_headers: Map::new(),
                            found: Vec::new(),
                            deserialized: true,
                            errors: Vec::new(),
                        };
                        let j = out.convert(&v);
                        problems.append(&mut out.errors);
                        j
                    }
                },
            })
            .collect();
        expect_eq(&mut problems, "deserialized", json!(got));
    }

    // Re-encode: the same frames, the same first read.
    let frames = dumps(&loaded.value).map_err(|e| format!("re-encoding failed: {e}"))?;
    let k = first_read_frames(&env).min(frames.len());
    let again = Envelope::with_first_read_frames(frames, k)
        .map_err(|e| format!("re-encoding failed: {e}"))?
        .to_bytes();
    let want = match obj.get("reencoded").and_then(Json::as_str) {
        Some(h) => parse_hex(name, h),
        None => input[..used].to_vec(),
    };
    if again[..] != want[..] {
        problems.push(format!(
            "re-encoding differs:\n  expected {}\n  got      {}",
            hex::encode(&want),
            hex::encode(&again)
        ));
    }

    // What follows the message.
    let rest = input.slice(used..);
    match (obj.get("next"), obj.get("rest").and_then(Json::as_u64)) {
        (Some(next), _) => {
            if let Err(e) = check(name, &rest, next) {
                problems.push(format!("next message: {e}"));
            }
        }
        (None, Some(n)) if rest.len() as u64 != n => problems.push(format!(
            "expected {n} bytes after the message, got {}",
            rest.len()
        )),
        (None, None) if !rest.is_empty() => {
            problems.push(format!("{} unexpected bytes after the message", rest.len()))
        }
        _ => {}
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn every_spec_example_decodes_as_documented() {
    // The JSON converter recurses, and examples nest up to 1024 levels: give
    // it a stack that debug builds cannot overflow.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(check_all)
        .expect("spawn")
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

fn check_all() {
    let examples = examples();
    assert!(!examples.is_empty(), "SPEC.md has no examples");
    let mut failures = Vec::new();
    for ex in &examples {
        if let Err(e) = check(&ex.name, &Bytes::from(ex.bytes.clone()), &ex.expect) {
            failures.push(format!(
                "example {} (SPEC.md line {}):\n{e}",
                ex.name, ex.line
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} SPEC.md examples failed:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

/// The examples the spec promises are there.
#[test]
fn spec_has_the_required_examples() {
    let names: Vec<String> = examples().into_iter().map(|e| e.name).collect();
    for required in [
        "handshake",
        "ping",
        "ping-first-read-0",
        "one-block",
        "task-with-numpy",
        "first-read-inside-frame",
        "zero-frames",
        "offset-zero",
        "offset-true",
        "aliased",
        "depth-1025",
        "serialize-bytes",
        "serialize-sharded",
        "h23-split-gap",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "SPEC.md lacks example {required:?}"
        );
    }
}

/// The handshake example is the 66-byte capture.
#[test]
fn handshake_example_is_66_bytes() {
    let hs = examples()
        .into_iter()
        .find(|e| e.name == "handshake")
        .expect("handshake example");
    assert_eq!(hs.bytes.len(), 66);
}

// ---- the examples against Python Dask ----------------------------------------------------

#[path = "support/dask_python.rs"]
mod dask_python;

/// What §8's table says Dask 2026.8.0 does with each example it names (the
/// "Dask 2026.8.0" column of every row whose "example" column names it;
/// rows naming one example twice are joined with "; ").
fn dask_column() -> std::collections::HashMap<String, String> {
    let spec = std::fs::read_to_string(SPEC_PATH).unwrap();
    let table = spec
        .split("\n## 8. Edge cases")
        .nth(1)
        .expect("SPEC.md has §8")
        .split("\n### ")
        .next()
        .unwrap();
    let mut out: std::collections::HashMap<String, String> = Default::default();
    for line in table.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let [_, dask, _, examples] = cells[..] else {
            continue;
        };
        for name in examples.split('`').skip(1).step_by(2) {
            let entry = out.entry(name.to_string()).or_default();
            if !entry.is_empty() {
                entry.push_str("; ");
            }
            entry.push_str(dask);
        }
    }
    assert!(out.len() > 20, "§8's table names too few examples: {out:?}");
    out
}

/// The first exception a Dask column names: a backticked word ending in
/// `Error`, `error` or `ExtraData` (`struct.error`, `KeyError 'data'` →
/// `KeyError`).
fn named_exception(dask: &str) -> Option<&str> {
    dask.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_whitespace().next())
        .find(|w| w.ends_with("Error") || w.ends_with("error") || w.ends_with("ExtraData"))
}

/// Bytes the example's prelude declares (`N + 8`, or the prelude and the
/// frames), when they are more than the example holds: Python's reader
/// allocates what is declared before reading it.
fn declared_len(bytes: &[u8]) -> u64 {
    let u64_at = |i: usize| {
        bytes
            .get(i..i + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let (n, count) = (u64_at(0), u64_at(8));
    let mut total = n.saturating_add(8);
    if count <= (bytes.len() as u64).saturating_sub(16) / 8 {
        let lengths = (0..count as usize).map(|i| u64_at(16 + 8 * i));
        total = total.max(lengths.fold(16 + 8 * count, u64::saturating_add));
    }
    total
}

/// Container nesting of a JSON value (as `depth` counts it for `Value`).
fn json_depth(v: &Json) -> usize {
    match v {
        Json::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        Json::Object(o) if o.contains_key("$map") => 1 + json_depth(&o["$map"]) - 2,
        Json::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `message` with the k-th placeholder `{"$serialized": i}` replaced by
/// `deserialized[k]` (placeholders in wire order, as `blocks` lists them;
/// a `{"$pickled": i}` entry stays as it is).
fn with_blocks(message: &Json, blocks: &mut std::slice::Iter<'_, Json>) -> Json {
    match message {
        Json::Array(items) => Json::Array(items.iter().map(|x| with_blocks(x, blocks)).collect()),
        Json::Object(o) if o.contains_key("$serialized") || o.contains_key("$pickled") => {
            blocks.next().cloned().unwrap_or(Json::Null)
        }
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), with_blocks(x, blocks)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn parse_deep(text: &str) -> Json {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    Json::deserialize(&mut de).expect("spec_examples.py's output is JSON")
}

#[test]
fn spec_examples_against_python_dask() {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(check_against_python)
        .expect("spawn")
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

fn check_against_python() {
    let python = dask_python::python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dask/spec_examples.py");
    let examples = examples();
    let dask = dask_column();
    let mut input = Vec::new();
    let mut unchecked = Vec::new();
    for ex in &examples {
        if declared_len(&ex.bytes) > ex.bytes.len() as u64 + (1 << 20) {
            unchecked.push(ex.name.as_str());
            continue;
        }
        let accepted = !ex.expect.as_object().unwrap().contains_key("error");
        let mut reads = 1;
        let mut e = &ex.expect;
        while let Some(next) = e.get("next") {
            reads += 1;
            e = next;
        }
        let deserialize = match accepted && ex.expect.get("deserialized").is_some() {
            true => json!([false, true]),
            false => json!([false]),
        };
        input.push(json!({
            "name": ex.name, "hex": hex::encode(&ex.bytes), "reads": reads, "deserialize": deserialize
        }));
    }
    // SPEC.md names exactly these as not fed to Python.
    assert_eq!(
        unchecked,
        ["too-many-frames", "frame-too-large", "length-overflow"],
        "examples declaring more than they hold"
    );
    let mut child = std::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run spec_examples.py");
    let text = serde_json::to_vec(&input).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &text));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "spec_examples.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outcomes = parse_deep(std::str::from_utf8(&out.stdout).unwrap());
    let mut failures = Vec::new();
    let mut checked = 0;
    for ex in &examples {
        let Some(got) = outcomes.get(&ex.name) else {
            continue;
        };
        checked += 1;
        if let Err(why) = check_python(ex, got, dask.get(&ex.name).map(String::as_str)) {
            failures.push(format!(
                "example {} (SPEC.md line {}): {why}\n  Python: {}",
                ex.name,
                ex.line,
                short(got)
            ));
        }
    }
    assert_eq!(checked, examples.len() - unchecked.len());
    assert!(
        failures.is_empty(),
        "{} of {checked} SPEC.md examples are not read by Python Dask as SPEC.md says:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn short(v: &Json) -> String {
    let s = v.to_string();
    match s.char_indices().nth(600) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// A `{"$map": ...}` whose keys are all distinct strings as an object (what
/// substituting a block for a placeholder key can make), everywhere.
fn normalize(v: &Json) -> Json {
    match v {
        Json::Array(items) => Json::Array(items.iter().map(normalize).collect()),
        Json::Object(o) => {
            if let (1, Some(Json::Array(pairs))) = (o.len(), o.get("$map")) {
                let pairs: Vec<(Json, Json)> = pairs
                    .iter()
                    .map(|p| (normalize(&p[0]), normalize(&p[1])))
                    .collect();
                let mut seen = std::collections::HashSet::new();
                if pairs
                    .iter()
                    .all(|(k, _)| k.as_str().is_some_and(|k| seen.insert(k.to_string())))
                {
                    return Json::Object(
                        pairs
                            .into_iter()
                            .map(|(k, x)| (k.as_str().unwrap().to_string(), x))
                            .collect(),
                    );
                }
                return json!({ "$map": pairs.into_iter().map(|(k, x)| json!([k, x])).collect::<Vec<_>>() });
            }
            Json::Object(o.iter().map(|(k, x)| (k.clone(), normalize(x))).collect())
        }
        other => other.clone(),
    }
}

/// The message of one Python outcome, or why there is none.
fn message_of(outcome: &Json) -> Result<&Json, String> {
    match (outcome.get("message"), outcome.get("error")) {
        (Some(m), _) => Ok(m),
        (None, Some(e)) => Err(format!("Python raised {} ({})", e["types"][0], e["text"])),
        _ => Err(format!("no outcome: {outcome}")),
    }
}

/// Whether Python raised an exception of class (or base class) `name`.
fn raised(outcome: &Json, name: &str) -> bool {
    outcome["error"]["types"]
        .as_array()
        .is_some_and(|t| t.iter().any(|x| x.as_str() == Some(name)))
}

/// Checks Python's outcomes for one example against what SPEC.md says:
/// §8's Dask column where it names the example, else the example's own
/// expectation (framewire's decoding, which Dask must share).
fn check_python(ex: &Example, got: &Json, dask: Option<&str>) -> Result<(), String> {
    let expect = ex.expect.as_object().unwrap();
    let first = &got["false"][0];
    let dask = dask.unwrap_or("");
    if let Some(exception) = named_exception(dask) {
        return match raised(first, exception) {
            true => Ok(()),
            false => Err(format!("§8 says Dask raises {exception}")),
        };
    }
    if dask.contains("waits") {
        return match raised(first, "CommClosedError") {
            true => Ok(()),
            false => Err("§8 says Dask waits: no message before the stream ends".into()),
        };
    }
    let message = message_of(first)?;
    // framewire refuses it (outside the strict profile): Dask accepting it
    // is the difference §8 describes; nothing to compare.
    if expect.contains_key("error") && expect.get("limits").and_then(Json::as_str) != Some("strict")
    {
        return Ok(());
    }
    if let Some(want) = expect.get("message") {
        let same = normalize(message) == normalize(want);
        match (dask.contains("becomes"), same) {
            (false, false) => {
                return Err(format!("Dask decodes a different message; SPEC.md: {want}"))
            }
            (true, true) => return Err("§8 says Dask makes something else of it".into()),
            _ => {}
        }
    }
    if let Some(want) = expect.get("depth") {
        if Some(json_depth(message) as u64) != want.as_u64() {
            return Err(format!("depth {} ≠ {want}", json_depth(message)));
        }
    }
    let mut next = expect.get("next");
    let mut read = 1;
    while let Some(n) = next {
        let message =
            message_of(&got["false"][read]).map_err(|e| format!("message {}: {e}", read + 1))?;
        if let Some(want) = n.get("message") {
            if normalize(message) != normalize(want) {
                return Err(format!(
                    "message {}: Dask decodes a different one; SPEC.md: {want}",
                    read + 1
                ));
            }
        }
        next = n.get("next");
        read += 1;
    }
    // deserialize=True: the message with each block deserialized, where
    // framewire deserializes it; a block it keeps opaque Dask cannot
    // deserialize (KeyError); one it refuses is not compared.
    let Some(Json::Array(blocks)) = expect.get("deserialized") else {
        return Ok(());
    };
    let tagged = |b: &Json, tag: &str| {
        b.as_object()
            .is_some_and(|o| o.len() == 1 && o.contains_key(tag))
    };
    let worker = &got["true"][0];
    if blocks.iter().any(|b| tagged(b, "$opaque")) {
        return match raised(worker, "KeyError") {
            true => Ok(()),
            false => Err("deserialize=True: Dask cannot deserialize a block framewire keeps opaque (KeyError)".into()),
        };
    }
    if blocks.iter().any(|b| tagged(b, "$error")) {
        return Ok(());
    }
    let want = match expect.get("message") {
        Some(m) => with_blocks(m, &mut blocks.iter()),
        None => return message_of(worker).map(|_| ()),
    };
    let message = message_of(worker).map_err(|e| format!("deserialize=True: {e}"))?;
    match normalize(message) == normalize(&want) {
        true => Ok(()),
        false => Err(format!(
            "deserialize=True: Dask gives another value; SPEC.md: {want}"
        )),
    }
}
