//! Property tests for layer 3 (serialize): random nested values × every
//! `IterateCollection` mode.
//!
//! * `Never`: a collection that is not directly under a `Serialize` is one
//!   msgpack blob, so a value with an out-of-band leaf inside such a blob
//!   (Serialized / Serialize / NdArray; bins are inlined whatever their size)
//!   gives `EncodeError::OutOfBandInBlob`; anything else round-trips.
//! * `Auto`: a collection is iterated iff something inside needs frames of its
//!   own ([`needs_frames`], an independent reference, shared with the
//!   `serialize_iterate` fuzz target: `tests/support/serialize_reference.rs`),
//!   one blob otherwise.
//! * `Always`: every collection is iterated.
//!
//! Round trip: `deserialize(serialize(v)) == norm(v)` (Serialize wrappers
//! unwrapped); every `Serialized` leaf comes back with the very same frames
//! (same count, same memory), never glued; arrays come back over the very
//! same data. Then the whole message path: `dumps` → `loads` →
//! `deserialize_blocks`.

use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{
    self, deserialize, deserialize_owned, DeserializeOptions, SerializeOptions,
};

/// SPEC.md §5.9: a `msgpack`-family blob packs every array of at least 32
/// integers into a `Value::IntArray`.
const PACK_MIN: usize = 32;
use framewire::{dumps, Block, Header, IterateCollection, Limits, NdArray, Value};
use proptest::prelude::*;

#[path = "support/serialize_reference.rs"]
mod reference;
use reference::{
    check_header, check_same_memory, expected_frames, needs_frames, norm, refusal, Refusal,
};

/// A small out-of-band threshold, so bins on both sides of it are cheap.
const THRESHOLD: usize = 48;

const MODES: [IterateCollection; 3] = [
    IterateCollection::Never,
    IterateCollection::Auto,
    IterateCollection::Always,
];

fn sopts(mode: IterateCollection, threshold: usize) -> SerializeOptions {
    {
        let mut o = SerializeOptions::default();
        o.iterate = mode;
        o.out_of_band_threshold = threshold;
        o
    }
}

fn dopts() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::dask_compat())
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn opaque_block() -> impl Strategy<Value = Value> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..4).prop_map(|frames| {
        Value::Serialized(Box::new(Block::new(
            Header::new(Value::map_of([("serializer", "pickle".into())])),
            frames.into_iter().map(Bytes::from),
        )))
    })
}

fn ndarray() -> impl Strategy<Value = Value> {
    let dtypes = prop::sample::select(vec![
        ("<f8", 8usize),
        ("|u1", 1),
        ("<i4", 4),
        (">i2", 2),
        ("<c16", 16),
        ("<M8[ns]", 8),
        ("|b1", 1),
    ]);
    (dtypes, prop::collection::vec(0u64..4, 0..3)).prop_flat_map(|((dtype, size), shape)| {
        let n = shape.iter().product::<u64>() as usize * size;
        prop::collection::vec(any::<u8>(), n..=n).prop_map(move |data| {
            Value::NdArray(Box::new(
                NdArray::from_c_order(dtype, &shape, Bytes::from(data)).unwrap(),
            ))
        })
    })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop_oneof![
            Just(Value::Nil),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::Float),
            "[a-z]{0,6}".prop_map(Value::from),
        ],
        // Bins below, at and above the threshold.
        2 => prop::collection::vec(any::<u8>(), 0..=THRESHOLD + 8)
            .prop_map(|b| Value::Bin(Bytes::from(b))),
        1 => ndarray(),
        1 => opaque_block(),
        // Integer arrays around PACK_MIN, packed and boxed: either form
        // decodes packed from PACK_MIN items on.
        1 => prop::collection::vec(any::<i64>(), 0..=PACK_MIN + 4).prop_map(Value::from),
        1 => prop::collection::vec(-200i64..200, PACK_MIN - 2..=PACK_MIN + 2)
            .prop_map(|v| Value::Array(v.into_iter().map(Value::from).collect())),
    ]
}

fn key() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[a-z]{1,3}".prop_map(Value::from),
        (-3i64..40).prop_map(Value::from)
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner.clone()), 0..5).prop_map(|entries| {
                // Python dicts: one entry per key.
                let mut out: Vec<(Value, Value)> = Vec::new();
                for (k, v) in entries {
                    if !out.iter().any(|(x, _)| *x == k) {
                        out.push((k, v));
                    }
                }
                Value::Map(out)
            }),
            inner.prop_map(|v| Value::ToSerialize(Box::new(v))),
        ]
    })
}

/// Keys the message layer and Dask's `serialize_and_split` add to a header.
const TRANSPORT_KEYS: [&str; 4] = [
    "num-sub-frames",
    "split-num-sub-frames",
    "split-offsets",
    "compression",
];

/// A block's frames with its shards joined as its split table says (an
/// opaque block comes back exactly as it was on the wire: shards included).
fn merged(b: &Block) -> Vec<Vec<u8>> {
    let (Some(counts), Some(offsets)) = (
        b.header()
            .get("split-num-sub-frames")
            .and_then(Value::as_array),
        b.header().get("split-offsets").and_then(Value::as_array),
    ) else {
        return b.frames().iter().map(|f| f.to_vec()).collect();
    };
    counts
        .iter()
        .zip(offsets)
        .map(|(n, o)| {
            let n = n.as_int().unwrap().as_u64().unwrap() as usize;
            let o = o.as_int().unwrap().as_u64().unwrap() as usize;
            b.frames()[o..o + n].concat()
        })
        .collect()
}

/// Equality where opaque blocks compare by header map (without the
/// transport keys) and merged frame bytes.
fn same_modulo_transport(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Serialized(x), Value::Serialized(y)) => {
            let strip = |m: &Value| -> Vec<(Value, Value)> {
                m.as_map()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| !k.as_str().is_some_and(|k| TRANSPORT_KEYS.contains(&k)))
                    .cloned()
                    .collect()
            };
            strip(x.header().map()) == strip(y.header().map()) && merged(x) == merged(y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_modulo_transport(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && same_modulo_transport(v1, v2))
        }
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

fn roundtrip_one(v: &Value, mode: IterateCollection, thr: usize) -> Result<(), TestCaseError> {
    let result = serialize::serialize(v, &sopts(mode, thr));
    if let Some(why) = refusal(v, mode, false, thr) {
        prop_assert_eq!(
            result.as_ref().err().and_then(Refusal::of),
            Some(why),
            "{:?} must refuse {:?}",
            mode,
            v
        );
        return Ok(());
    }
    let block = result.map_err(|e| TestCaseError::fail(format!("{mode:?}: {e} for {v:?}")))?;
    prop_assert_eq!(
        block.frames().len(),
        expected_frames(v, mode, false, thr),
        "{:?}: frames glued or lost",
        mode
    );
    check_header(v, block.header().map(), mode, false, thr).map_err(TestCaseError::fail)?;
    let got = deserialize(&block, &dopts())
        .map_err(|e| TestCaseError::fail(format!("{mode:?}: deserialize: {e}")))?;
    let expected = norm(v);
    prop_assert_eq!(&got, &expected, "{:?}", mode);
    check_same_memory(&expected, &got).map_err(TestCaseError::fail)?;
    // By value: the frames move into the value, which is the same, over
    // the same memory.
    let owned = deserialize_owned(block, &dopts())
        .map_err(|e| TestCaseError::fail(format!("{mode:?}: deserialize_owned: {e}")))?;
    prop_assert_eq!(&owned, &expected, "{:?}: by value", mode);
    check_same_memory(&expected, &owned).map_err(TestCaseError::fail)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn serialize_roundtrips_under_every_mode(v in value()) {
        for mode in MODES {
            roundtrip_one(&v, mode, THRESHOLD)?;
        }
    }

    /// Auto: the top header is a collection iff something inside needs frames.
    #[test]
    fn auto_iterates_exactly_when_needed(items in prop::collection::vec(value(), 0..5)) {
        let v = Value::Array(items);
        let block = serialize::serialize(&v, &sopts(IterateCollection::Auto, THRESHOLD)).unwrap();
        prop_assert_eq!(block.header().get("is-collection").is_some(), needs_frames(&v, THRESHOLD));
        if !needs_frames(&v, THRESHOLD) {
            prop_assert_eq!(block.frames().len(), 1);
        }
        // Always always iterates.
        let block = serialize::serialize(&v, &sopts(IterateCollection::Always, THRESHOLD)).unwrap();
        prop_assert_eq!(block.header().get("is-collection"), Some(&Value::Bool(true)));
    }

    /// The full message path: dumps -> loads -> deserialize_blocks.
    #[test]
    fn message_path_roundtrips(v in value()) {
        let msg = Value::map_of([("op", "x".into()), ("data", Value::ToSerialize(Box::new(v.clone())))]);
        let expected = Value::map_of([("op", "x".into()), ("data", norm(&v))]);
        // framewire::dumps (default options: Auto, 16 KiB threshold, 64 MiB shards).
        let frames = dumps(&msg).map_err(|e| TestCaseError::fail(format!("{e} for {v:?}")))?;
        let got = deserialize_blocks(decode(&frames, &Limits::dask_compat()).unwrap(), &dopts()).unwrap();
        prop_assert!(same_modulo_transport(&got, &expected), "got {:?}\nexpected {:?}", got, expected);
        check_same_memory(&expected, &got).map_err(TestCaseError::fail)?;
        // Every mode, small threshold, tiny shards (zero-copy shards merge by copy).
        for mode in MODES {
            let opts = { let mut o = sopts(mode, THRESHOLD); o.shard_size = 7; o };
            match framewire::dumps_with(&msg, &opts) {
                Err(e) => {
                    prop_assert!(refusal(&v, mode, true, THRESHOLD).is_some(), "{:?}: {}", mode, e);
                    prop_assert_eq!(Refusal::of(&e), refusal(&v, mode, true, THRESHOLD));
                }
                Ok(frames) => {
                    prop_assert_eq!(refusal(&v, mode, true, THRESHOLD), None);
                    let got = deserialize_blocks(decode(&frames, &Limits::dask_compat()).unwrap(), &dopts()).unwrap();
                    prop_assert!(same_modulo_transport(&got, &expected), "{:?}: got {:?}\nexpected {:?}", mode, got, expected);
                }
            }
        }
    }

    /// Bins around the default 16 KiB threshold, inside a collection.
    #[test]
    fn default_threshold_bins(len in (16 << 10) - 3..(16 << 10) + 3usize, before in any::<bool>()) {
        let bin = Value::Bin(Bytes::from(vec![b'x'; len]));
        let items = if before { vec![bin.clone(), Value::from(1u8)] } else { vec![Value::from(1u8), bin.clone()] };
        let v = Value::Array(items);
        let opts = SerializeOptions::default();
        let block = serialize::serialize(&v, &opts).unwrap();
        let big = len >= serialize::DEFAULT_OUT_OF_BAND_THRESHOLD;
        prop_assert_eq!(block.header().get("is-collection").is_some(), big);
        prop_assert_eq!(block.frames().len(), if big { 2 } else { 1 });
        if big {
            // The bin is its own frame: the same memory.
            let Value::Bin(b) = &bin else { unreachable!() };
            prop_assert!(block.frames().iter().any(|f| f.as_ptr() == b.as_ptr()));
        }
        prop_assert_eq!(deserialize(&block, &dopts()).unwrap(), v.clone());
        // Never inlines it whatever its size.
        let never = serialize::serialize(&v, &{ let mut o = SerializeOptions::default(); o.iterate = IterateCollection::Never; o }).unwrap();
        prop_assert_eq!(never.frames().len(), 1);
        prop_assert_eq!(deserialize(&never, &dopts()).unwrap(), v);
    }
}

/// Dask pops `key` from a dict element's header before deserializing it; an
/// opaque element comes back without it.
#[test]
fn opaque_dict_element_comes_back_without_its_key() {
    let blk = Value::Serialized(Box::new(Block::new(
        Header::new(Value::map_of([("serializer", "pickle".into())])),
        vec![Bytes::from_static(b"abc")],
    )));
    let v = Value::map_of([("a", blk)]);
    for mode in [
        IterateCollection::Auto,
        IterateCollection::Always,
        IterateCollection::Never,
    ] {
        let block = serialize::serialize(
            &Value::ToSerialize(Box::new(v.clone())),
            &sopts(mode, THRESHOLD),
        )
        .unwrap();
        let subs = block
            .header()
            .get("sub-headers")
            .and_then(Value::as_array)
            .unwrap();
        assert_eq!(subs[0].get("key"), Some(&Value::str("a")));
        assert_eq!(deserialize(&block, &dopts()).unwrap(), v, "{mode:?}");
    }
}
