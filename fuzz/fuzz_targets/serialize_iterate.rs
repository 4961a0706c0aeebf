//! The iteration logic: arbitrary nested values with `Serialize`,
//! `Serialized` and array leaves × every `IterateCollection` mode. Oracle:
//! the round trip is equal; every `Serialized` leaf's frames come back as the
//! same, separate frames; Auto iterates exactly when something inside needs
//! frames of its own; Never with such a leaf is a typed error.
#![no_main]
use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use framewire::serialize::{deserialize, serialize, DeserializeOptions, IterateCollection, SerializeOptions};
use framewire::{Block, EncodeError, Header, Limits, NdArray, Value};
use libfuzzer_sys::fuzz_target;

const THRESHOLD: usize = 64;

fn scalar(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=4)? {
        0 => Value::Nil,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::Float(u.arbitrary()?),
        _ => Value::from(u.arbitrary::<String>()?),
    })
}

fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let top = if depth >= 5 { 5 } else { 9 };
    Ok(match u.int_in_range(0..=top)? {
        0..=4 => scalar(u)?,
        5 => {
            let len = u.int_in_range(0..=THRESHOLD * 2)?;
            Value::Bin(Bytes::from(u.bytes(len.min(u.len()))?.to_vec()))
        }
        6 => {
            let n = u.int_in_range(0..=6)?;
            Value::Array((0..n).map(|_| value(u, depth + 1)).collect::<Result<_>>()?)
        }
        7 => {
            let n = u.int_in_range(0..=6)?;
            Value::Map((0..n).map(|_| Ok((scalar(u)?, value(u, depth + 1)?))).collect::<Result<_>>()?)
        }
        8 => match u.int_in_range(0..=3)? {
            0 => {
                let n = u.int_in_range(0..=3)?;
                let frames: Vec<Bytes> = (0..n)
                    .map(|_| Ok(Bytes::from(u.arbitrary::<Vec<u8>>()?)))
                    .collect::<Result<_>>()?;
                let header = Header::new(Value::map_of([("serializer", "pickle".into())]));
                Value::Serialized(Box::new(Block::new(header, frames)))
            }
            1 => Value::Serialize(Box::new(value(u, depth + 1)?)),
            // A packed integer array, around PACK_MIN long.
            2 => {
                let n = u.int_in_range(0..=40)?;
                Value::from((0..n).map(|_| u.arbitrary::<i64>()).collect::<Result<Vec<i64>>>()?)
            }
            _ => {
                let n = u.int_in_range(0..=16u64)?;
                let data = Bytes::from(u.bytes(n as usize)?.to_vec());
                let a = NdArray::from_c_order("|u1", &[data.len() as u64], data).unwrap();
                Value::NdArray(Box::new(a))
            }
        },
        _ => Value::Serialize(Box::new(value(u, depth + 1)?)),
    })
}

/// Reference: does anything inside need frames of its own?
fn needs_frames(v: &Value, threshold: usize) -> bool {
    match v {
        Value::Serialized(_) | Value::Pickled(_) | Value::Serialize(_) | Value::NdArray(_) => true,
        Value::Bin(b) => b.len() >= threshold,
        Value::Array(a) => a.iter().any(|x| needs_frames(x, threshold)),
        Value::Map(m) => m.iter().any(|(k, x)| needs_frames(k, threshold) || needs_frames(x, threshold)),
        _ => false,
    }
}

fn has_reserved_key(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().any(has_reserved_key),
        Value::Map(m) => m.iter().any(|(k, x)| {
            matches!(k.as_str(), Some("__Serialized__" | "__Pickled__")) || has_reserved_key(x)
        }),
        Value::Serialize(x) => has_reserved_key(x),
        _ => false,
    }
}

/// What deserialize gives back: `Serialize` wrappers are gone.
fn unwrap_serialize(v: &Value) -> Value {
    match v {
        Value::Serialize(inner) => unwrap_serialize(inner),
        Value::Array(a) => Value::Array(a.iter().map(unwrap_serialize).collect()),
        Value::Map(m) => Value::Map(m.iter().map(|(k, x)| (k.clone(), unwrap_serialize(x))).collect()),
        other => other.clone(),
    }
}

/// The payload frames of every `Serialized` leaf, in order.
fn leaf_frames(v: &Value, out: &mut Vec<Bytes>) {
    match v {
        Value::Serialized(b) => out.extend(b.frames().iter().cloned()),
        Value::Serialize(x) => leaf_frames(x, out),
        Value::Array(a) => a.iter().for_each(|x| leaf_frames(x, out)),
        Value::Map(m) => m.iter().for_each(|(_, x)| leaf_frames(x, out)),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(v) = value(&mut u, 0) else { return };
    let de = DeserializeOptions::with_limits(Limits::dask_compat());
    for mode in [IterateCollection::Always, IterateCollection::Never, IterateCollection::Auto] {
        let opts = SerializeOptions { iterate: mode, out_of_band_threshold: THRESHOLD, ..Default::default() };
        let result = serialize(&v, &opts);
        let is_collection = matches!(v, Value::Array(_) | Value::IntArray(_) | Value::Map(_));
        if mode == IterateCollection::Never && is_collection && needs_frames(&v, usize::MAX) {
            match result.unwrap_err() {
                EncodeError::OutOfBandInBlob => {}
                EncodeError::ReservedKey { .. } if has_reserved_key(&v) => {}
                e => panic!("Never: {e}"),
            }
            continue;
        }
        let block = match result {
            Ok(b) => b,
            // Never reaches a nested Serialize's collection only through an
            // iterated level; below it, Never still refuses out-of-band leaves.
            Err(EncodeError::OutOfBandInBlob) if mode == IterateCollection::Never => continue,
            // A map keyed by "__Serialized__" or "__Pickled__" is refused in a blob.
            Err(EncodeError::ReservedKey { .. }) if has_reserved_key(&v) => continue,
            Err(e) => panic!("{mode:?}: {e}"),
        };
        if mode == IterateCollection::Auto && is_collection {
            assert_eq!(
                block.header().get("is-collection").is_some(),
                needs_frames(&v, THRESHOLD),
                "Auto must iterate exactly when something inside needs frames"
            );
        }
        if mode == IterateCollection::Always && is_collection {
            assert!(block.header().get("is-collection").is_some());
        }
        // Every Serialized leaf's frames are in the output as the same memory.
        let mut leaves = Vec::new();
        leaf_frames(&v, &mut leaves);
        for f in leaves.iter().filter(|f| !f.is_empty()) {
            assert!(
                block.frames().iter().any(|g| g.as_ptr() == f.as_ptr() && g.len() == f.len()),
                "a Serialized leaf's frame was copied or glued"
            );
        }
        let back = deserialize(&block, &de).expect("our own output deserializes");
        let expected = match &v {
            // A lone opaque leaf comes back as itself.
            Value::Serialized(_) => v.clone(),
            _ => unwrap_serialize(&v),
        };
        assert_eq!(back, expected, "{mode:?}");
    }
});
