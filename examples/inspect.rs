//! A capture inspector on the library API: reads one direction of a Dask
//! TCP stream from a file (such as `tests/captures/*/wire.bin`), and for
//! each message prints its frames, its ops, and what each block holds once
//! deserialized.
//!
//! ```text
//! cargo run --example inspect -- tests/captures/task_with_numpy/wire.bin
//! ```

use bytes::Bytes;
use framewire::message::{self, BlockKind};
use framewire::serialize::{self, DeserializeOptions};
use framewire::{Envelope, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: inspect FILE")?;
    let wire = Bytes::from(std::fs::read(&path)?);
    let opts = DeserializeOptions::default();
    let mut rest = wire.clone();
    let mut index = 0;
    while !rest.is_empty() {
        // Frames are slices of `wire`: nothing is copied.
        let (env, used) = Envelope::decode(&rest, &opts.limits)?;
        let loaded = message::decode_detailed(env.frames(), &opts.limits)?;
        let lengths: Vec<usize> = env.frames().iter().map(Bytes::len).collect();
        println!("message #{index}: {} bytes, frames {lengths:?}", used);
        println!("  ops: {}", ops(&loaded.value).join(", "));
        for (r, block) in loaded.blocks.iter().zip(blocks(&loaded.value)) {
            let kind = match r.kind {
                BlockKind::Serialized => "__Serialized__",
                BlockKind::Pickled => "__Pickled__",
            };
            let what = match (
                r.kind,
                serialize::deserialize(block, &opts.clone().backed_by(&env)),
            ) {
                (BlockKind::Pickled, _) => "pickled: never unpickled".to_owned(),
                (_, Ok(Value::Serialized(b))) => {
                    format!("opaque ({:?})", b.header().get("serializer"))
                }
                (_, Ok(v)) => describe(&v),
                (_, Err(e)) => format!("error: {e}"),
            };
            println!(
                "  {kind} {} (+{} frames): {what}",
                r.offset, r.num_sub_frames
            );
        }
        if !loaded.orphans.is_empty() {
            println!("  orphan frames: {:?}", loaded.orphans);
        }
        rest = rest.slice(used..);
        index += 1;
    }
    Ok(())
}

/// The `op` of a message, or of each message of a batch.
fn ops(v: &Value) -> Vec<&str> {
    fn op(m: &Value) -> Option<&str> {
        m.get("op").and_then(Value::as_str)
    }
    match v {
        Value::Array(items) => items.iter().map(|m| op(m).unwrap_or("-")).collect(),
        other => vec![op(other).unwrap_or("-")],
    }
}

/// The blocks of a decoded message, in placeholder order (as `blocks`).
fn blocks(v: &Value) -> Vec<&framewire::Block> {
    let mut out = Vec::new();
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        match v {
            Value::Serialized(b) | Value::Pickled(b) => out.push(&**b),
            Value::Array(items) => todo.extend(items.iter().rev()),
            Value::Map(entries) => {
                for (k, x) in entries.iter().rev() {
                    todo.push(x);
                    todo.push(k);
                }
            }
            _ => {}
        }
    }
    out
}

fn describe(v: &Value) -> String {
    match v {
        Value::NdArray(a) => format!(
            "ndarray {} {:?}, {} bytes",
            a.dtype(),
            a.shape(),
            a.data().len()
        ),
        Value::Bin(b) => format!("bytes, {} long", b.len()),
        Value::Array(a) => format!("a sequence of {}", a.len()),
        Value::IntArray(a) => format!("a sequence of {} integers", a.len()),
        Value::BinArray(a) => format!("a sequence of {} bytes", a.len()),
        Value::Map(m) => format!("a dict of {}", m.len()),
        other => format!("{other:?}"),
    }
}
