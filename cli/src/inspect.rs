//! `framewire inspect`: what is in a capture, message by message.

use std::io::Write;

use framewire::message::BlockRef;
use framewire::serialize::DeserializeOptions;
use framewire::{Block, DeserializeError, Limits, Value};
use serde_json::{Map, Value as Json};

use crate::input::{self, Decoded, Input};
use crate::json;

/// Prints every message of every file; stops at the first bad message.
/// With `deserialize`, each message also gets its deserialized `value`.
pub fn run(
    files: &[String],
    as_json: bool,
    deserialize: bool,
    out: &mut impl Write,
) -> Result<(), String> {
    for path in files {
        let input = Input::read(path)?;
        if !as_json && files.len() > 1 {
            writeln!(out, "== {} ==", input.name).map_err(crate::output::error)?;
        }
        for msg in input.messages() {
            let msg = msg?;
            let value = match deserialize {
                true => {
                    let results = deserialize_message(&input, &msg)?;
                    Some(json::deserialized_to_json(&msg.loaded.value, &results))
                }
                false => None,
            };
            if as_json {
                let mut obj = message_json(&msg);
                if let (Some(v), Json::Object(o)) = (value, &mut obj) {
                    o.insert("value".into(), v);
                }
                let line = serde_json::to_string(&obj).map_err(|e| e.to_string())?;
                writeln!(out, "{line}").map_err(crate::output::error)?;
            } else {
                human(&msg, out).map_err(crate::output::error)?;
                if let Some(v) = value {
                    writeln!(out, "  value:").map_err(crate::output::error)?;
                    json_tree(&v, 2, out).map_err(crate::output::error)?;
                }
            }
        }
    }
    Ok(())
}

/// Every block of a message deserialized (`serialize::deserialize`, Dask's
/// limits, zero-copy over the file, compressed frames decompressed under one
/// budget for the message), in the order of [`json::blocks_in_order`]: its
/// value (a `Pickled` block stays itself, frames as they came), or the text
/// of a remote serialization error. Any other error is the command's error.
fn deserialize_message(input: &Input, msg: &Decoded) -> Result<Vec<Result<Value, String>>, String> {
    let mut opts = DeserializeOptions::default();
    opts.limits = Limits::dask_compat();
    opts.backing = vec![input.buf.clone()];
    json::deserialize_blocks(&msg.loaded, &opts, |r, e| match e {
        DeserializeError::RemoteSerializationError { text } => Ok(text),
        e => Err(input::block_error(&input.name, msg, r, &e.into())),
    })
}

/// The `--json` object of one message.
pub fn message_json(msg: &Decoded) -> Json {
    let frames = msg.env.frames();
    let loaded = &msg.loaded;
    let mut obj = Map::new();
    obj.insert("n_frames".into(), Json::from(frames.len()));
    obj.insert(
        "frame_lengths".into(),
        frames.iter().map(|f| Json::from(f.len())).collect(),
    );
    obj.insert("first_read".into(), Json::from(msg.env.first_read()));
    let blocks = json::blocks_in_order(&loaded.value);
    obj.insert(
        "blocks".into(),
        loaded
            .blocks
            .iter()
            .zip(&blocks)
            .map(|(r, b)| block_json(r, b))
            .collect(),
    );
    obj.insert(
        "orphans".into(),
        loaded.orphans.iter().map(|&i| Json::from(i)).collect(),
    );
    obj.insert(
        "message".into(),
        json::message_to_json(&loaded.value, &loaded.blocks),
    );
    Json::Object(obj)
}

fn block_json(r: &BlockRef, b: &Block) -> Json {
    let mut obj = Map::new();
    obj.insert("kind".into(), Json::from(json::kind_name(r.kind)));
    obj.insert("offset".into(), Json::from(r.offset));
    obj.insert("num_sub_frames".into(), Json::from(r.num_sub_frames));
    obj.insert("header".into(), json::value_to_json(b.header().map()));
    Json::Object(obj)
}

// ---- human output ------------------------------------------------------------

fn human(msg: &Decoded, out: &mut impl Write) -> std::io::Result<()> {
    let frames = msg.env.frames();
    let loaded = &msg.loaded;
    let in_first = first_read_frames(msg);
    writeln!(
        out,
        "message #{}: {} frames, {} bytes, first read {} ({} of {} frames), at byte {}",
        msg.index,
        frames.len(),
        msg.wire.len(),
        msg.env.first_read(),
        in_first,
        frames.len(),
        msg.start,
    )?;

    // Frame table.
    let mut roles = vec![String::new(); frames.len()];
    roles[0] = "message".into();
    for b in &loaded.blocks {
        let name = block_name(b);
        roles[b.offset] = format!("sub-header of {name}");
        for j in 0..b.num_sub_frames {
            roles[b.offset + 1 + j] = format!("payload {j} of {name}");
        }
    }
    for &i in &loaded.orphans {
        roles[i] = "orphan".into();
    }
    writeln!(out, "  {:>5}  {:>12}  role", "frame", "bytes")?;
    for (i, (f, role)) in frames.iter().zip(&roles).enumerate() {
        let mark = if i < in_first {
            ""
        } else {
            "  (after first read)"
        };
        writeln!(out, "  {i:>5}  {:>12}  {role}{mark}", f.len())?;
    }

    // Frame 0.
    writeln!(out, "  frame 0:")?;
    let mut tree = Tree {
        blocks: loaded.blocks.iter(),
        out,
    };
    tree.value(&loaded.value, 2)?;

    // Blocks.
    if !loaded.blocks.is_empty() {
        writeln!(out, "  blocks:")?;
        let blocks = json::blocks_in_order(&loaded.value);
        for (r, b) in loaded.blocks.iter().zip(&blocks) {
            writeln!(out, "    {}: {}", block_name(r), block_summary(r, b))?;
        }
    }
    if !loaded.orphans.is_empty() {
        writeln!(
            out,
            "  orphans: {:?} (no placeholder refers to them)",
            loaded.orphans
        )?;
    }
    Ok(())
}

/// Frames inside the first read, from `N`.
pub fn first_read_frames(msg: &Decoded) -> usize {
    let mut at = 8 + 8 * msg.env.frames().len() as u64;
    msg.env
        .frames()
        .iter()
        .take_while(|f| {
            let inside = at < msg.env.first_read();
            at += f.len() as u64;
            inside
        })
        .count()
}

fn block_name(b: &BlockRef) -> String {
    format!("{}@{}", json::kind_name(b.kind), b.offset)
}

/// `serializer dask, type numpy.ndarray, dtype <i8, shape [5], ...`.
fn block_summary(r: &BlockRef, b: &Block) -> String {
    let h = b.header();
    let mut parts = Vec::new();
    if let Some(s) = h.get("serializer") {
        parts.push(format!("serializer {}", text(s)));
    }
    if let Some(t) = h.get("type") {
        parts.push(format!("type {}", text(t)));
    }
    if let Some(sub) = h.get("sub-header") {
        if let Some(d) = sub.get("dtype") {
            parts.push(format!("dtype {}", dtype(d)));
        }
        if let Some(s) = sub.get("shape") {
            parts.push(format!("shape {}", compact(s)));
        }
    }
    if let Some(Value::Bin(p)) = h.get("pickled-obj") {
        parts.push(format!("pickled-obj {} bytes", p.len()));
    }
    if let Some(c) = h.get("compression") {
        parts.push(format!("compression {}", compact(c)));
    }
    let payload: Vec<String> = b.frames().iter().map(|f| f.len().to_string()).collect();
    let header_len = h.raw().map_or(0, |r| r.len());
    parts.push(format!(
        "frames: header {header_len} bytes + {} payload [{}]",
        r.num_sub_frames,
        payload.join(", ")
    ));
    parts.join(", ")
}

/// A str without quotes, anything else on one line.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| inline(v), str::to_owned)
}

/// A numpy dtype as Dask's serializer writes it: `(0, "<i8")` is shown as `<i8`.
fn dtype(d: &Value) -> String {
    match d.as_array() {
        Some([Value::Int(_), Value::Str(s)]) => s.to_string(),
        _ => compact(d),
    }
}

/// One-line JSON (in the JSON conventions) of a value.
fn compact(v: &Value) -> String {
    json::value_to_json(v).to_string()
}

const MAX_STR: usize = 120;
const MAX_BIN: usize = 32;

/// A scalar on one line.
fn inline(v: &Value) -> String {
    match v {
        Value::Nil => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Str(s) if s.len() > MAX_STR => {
            let mut cut = MAX_STR;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}… ({} bytes)", Json::from(&s[..cut]), s.len())
        }
        Value::Str(s) => Json::from(&s[..]).to_string(),
        Value::Bin(b) if b.len() > MAX_BIN => {
            format!("bytes[{}] {}…", b.len(), hex::encode(&b[..MAX_BIN]))
        }
        Value::Bin(b) => format!("bytes[{}] {}", b.len(), hex::encode(b)),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::IntArray(a) if a.is_empty() => "[]".into(),
        Value::BinArray(a) if a.is_empty() => "[]".into(),
        Value::Map(m) if m.is_empty() => "{}".into(),
        other => compact(other),
    }
}

/// An indented tree of frame 0; recursion bounded by the value's depth.
struct Tree<'a, W> {
    blocks: std::slice::Iter<'a, BlockRef>,
    out: &'a mut W,
}

impl<W: Write> Tree<'_, W> {
    fn leaf_name(&mut self) -> String {
        self.blocks.next().map_or("<block>".into(), block_name)
    }

    /// Whether `v` fits on the line of its key or dash.
    fn is_inline(v: &Value) -> bool {
        match v {
            Value::Array(a) => a.is_empty(),
            Value::IntArray(a) => a.is_empty(),
            Value::BinArray(a) => a.is_empty(),
            Value::Map(m) => m.is_empty(),
            _ => true,
        }
    }

    fn scalar(&mut self, v: &Value) -> String {
        match v {
            Value::Serialized(_) | Value::Pickled(_) => self.leaf_name(),
            other => inline(other),
        }
    }

    fn value(&mut self, v: &Value, depth: usize) -> std::io::Result<()> {
        let pad = "  ".repeat(depth);
        match v {
            Value::Array(items) if !items.is_empty() => {
                for item in items {
                    if Self::is_inline(item) {
                        let s = self.scalar(item);
                        writeln!(self.out, "{pad}- {s}")?;
                    } else {
                        writeln!(self.out, "{pad}-")?;
                        self.value(item, depth + 1)?;
                    }
                }
            }
            Value::IntArray(items) if !items.is_empty() => {
                for x in items {
                    writeln!(self.out, "{pad}- {x}")?;
                }
            }
            Value::BinArray(items) if !items.is_empty() => {
                for b in items.iter() {
                    writeln!(self.out, "{pad}- {}", inline(&Value::Bin(b)))?;
                }
            }
            Value::Map(entries) if !entries.is_empty() => {
                for (k, v) in entries {
                    let key = match k {
                        Value::Str(s) if is_bare(s) => s.to_string(),
                        k if Self::is_inline(k) => self.scalar(k),
                        // A container key: shown on one line (placeholders
                        // inside it still take their turn).
                        k => self.key_json(k),
                    };
                    if Self::is_inline(v) {
                        let s = self.scalar(v);
                        writeln!(self.out, "{pad}{key}: {s}")?;
                    } else {
                        writeln!(self.out, "{pad}{key}:")?;
                        self.value(v, depth + 1)?;
                    }
                }
            }
            other => {
                let s = self.scalar(other);
                writeln!(self.out, "{pad}{s}")?;
            }
        }
        Ok(())
    }

    fn key_json(&mut self, k: &Value) -> String {
        let n = json::blocks_in_order(k).len();
        let refs: Vec<BlockRef> = self.blocks.by_ref().take(n).copied().collect();
        json::message_to_json(k, &refs).to_string()
    }
}

/// A JSON value (the deserialized message) as an indented tree: tagged
/// objects other than `$map` on one line. Recursion bounded by its depth.
fn json_tree(v: &Json, depth: usize, out: &mut dyn Write) -> std::io::Result<()> {
    let pad = "  ".repeat(depth);
    match v {
        Json::Array(items) if !items.is_empty() => {
            for item in items {
                json_entry(&format!("{pad}-"), item, depth, out)?;
            }
        }
        Json::Object(obj) if !json_is_inline(v) => match obj.get("$map").and_then(Json::as_array) {
            Some(pairs) if obj.len() == 1 => {
                for pair in pairs {
                    if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                        let key = match k.as_str() {
                            Some(s) if is_bare(s) => s.to_owned(),
                            _ => k.to_string(),
                        };
                        json_entry(&format!("{pad}{key}:"), v, depth, out)?;
                    }
                }
            }
            _ => {
                for (k, v) in obj {
                    let key = match is_bare(k) {
                        true => k.clone(),
                        false => Json::from(k.as_str()).to_string(),
                    };
                    json_entry(&format!("{pad}{key}:"), v, depth, out)?;
                }
            }
        },
        other => writeln!(out, "{pad}{}", json_scalar(other))?,
    }
    Ok(())
}

/// One item or entry of [`json_tree`]: after `lead` on its line, or below it.
fn json_entry(lead: &str, v: &Json, depth: usize, out: &mut dyn Write) -> std::io::Result<()> {
    if json_is_inline(v) {
        writeln!(out, "{lead} {}", json_scalar(v))
    } else {
        writeln!(out, "{lead}")?;
        json_tree(v, depth + 1, out)
    }
}

/// Whether a JSON value fits on the line of its key or dash.
fn json_is_inline(v: &Json) -> bool {
    match v {
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => match json::tag_of(o.keys().map(String::as_str)) {
            Some("$map") => o["$map"].as_array().is_none_or(Vec::is_empty),
            Some(_) => true,
            None => o.is_empty(),
        },
        _ => true,
    }
}

/// A JSON value on one line; long strings cut.
fn json_scalar(v: &Json) -> String {
    match v {
        Json::String(s) if s.len() > MAX_STR => {
            let mut cut = MAX_STR;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}… ({} bytes)", Json::from(&s[..cut]), s.len())
        }
        other => other.to_string(),
    }
}

/// A str key that reads unambiguously without quotes.
fn is_bare(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
}
