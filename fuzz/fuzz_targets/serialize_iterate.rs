//! The iteration logic: arbitrary nested values with `Serialize`,
//! `Serialized` and array leaves, and maps keyed by anything (the reserved
//! placeholder keys too) × every `IterateCollection` mode. Oracle: the exact
//! recursive reference of `tests/support/serialize_reference.rs` (shared
//! with the property tests): `serialize` refuses exactly when and as it
//! says, writes exactly its header tree (every collection, at any depth,
//! iterated or a blob as the mode demands, every leaf under its family) and
//! its number of frames; every `Serialized` leaf's frames come back as the
//! same, separate memory; the round trip is equal.
#![no_main]
use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use framewire::serialize::{deserialize, serialize, DeserializeOptions, IterateCollection, SerializeOptions};
use framewire::{Block, Header, Limits, NdArray, Value};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/serialize_reference.rs"]
mod reference;
use reference::{check_header, check_same_memory, expected_frames, norm, refusal, Refusal};

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

/// A map key: a scalar, now and then one of the keys Dask reads as a
/// placeholder (refused in a blob).
fn key(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=15)? {
        0 => Value::str("__Serialized__"),
        1 => Value::str("__Pickled__"),
        _ => scalar(u)?,
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
            Value::Map((0..n).map(|_| Ok((key(u)?, value(u, depth + 1)?))).collect::<Result<_>>()?)
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
            1 => Value::ToSerialize(Box::new(value(u, depth + 1)?)),
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
        _ => Value::ToSerialize(Box::new(value(u, depth + 1)?)),
    })
}

/// The payload frames of every `Serialized` leaf, in order.
fn leaf_frames(v: &Value, out: &mut Vec<Bytes>) {
    match v {
        Value::Serialized(b) => out.extend(b.frames().iter().cloned()),
        Value::ToSerialize(x) => leaf_frames(x, out),
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
        let mut opts = SerializeOptions::default();
        opts.iterate = mode;
        opts.out_of_band_threshold = THRESHOLD;
        // Every refusal warranted, every warranted refusal made: exactly
        // what the reference says, for every mode.
        let block = match (serialize(&v, &opts), refusal(&v, mode, false, THRESHOLD)) {
            (Err(e), Some(why)) => {
                assert_eq!(Refusal::of(&e), Some(why), "{mode:?}: refused with {e}, the reference says {why:?}");
                continue;
            }
            (Err(e), None) => panic!("{mode:?}: an unwarranted refusal: {e}"),
            (Ok(_), Some(why)) => panic!("{mode:?}: accepted what must be refused ({why:?})"),
            (Ok(block), None) => block,
        };
        // The whole header tree: collections iterated exactly when the
        // reference says, each leaf under its family; and the frames.
        if let Err(why) = check_header(&v, block.header().map(), mode, false, THRESHOLD) {
            panic!("{mode:?}: {why}");
        }
        assert_eq!(
            block.frames().len(),
            expected_frames(&v, mode, false, THRESHOLD),
            "{mode:?}: frames glued or lost"
        );
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
        let expected = norm(&v);
        assert_eq!(back, expected, "{mode:?}");
        if let Err(why) = check_same_memory(&expected, &back) {
            panic!("{mode:?}: {why}");
        }
    }
});
