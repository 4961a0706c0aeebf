//! The direct paths of typed messages (`to_frames` / `from_frames`) against
//! the `Value` path (`to_value` + `dumps`, `loads` + `from_value`):
//!
//! * generated messages (structs and enums whose fields hold any `Value`,
//!   blocks, arrays, values to serialize, bins): the same bytes, the same
//!   value or the same error;
//! * captured 2026.8.0 messages with bytes changed, cut or appended: the
//!   same result for the channel enums and reply types (hostile input:
//!   refused alike, never a panic);
//! * zero copy: a 64 MiB bin and a 64 MiB array through both directions
//!   allocate no payload;
//! * errors of the message (reserved keys, nesting, limits) as `dumps` and
//!   `loads` report them.
#![cfg(feature = "dask")]

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;

use bytes::Bytes;
use framewire::dask::{GetDataReply, SchedulerToWorker, WorkerRequest, WorkerToScheduler};
use framewire::typed::{from_frames, to_frames, Bin, ToSerialize};
use framewire::{
    dumps, dumps_with, from_value, loads_with, message, to_value, Block, DecodeError,
    DeserializeOptions, EncodeError, Header, Limits, MessageError, MsgpackError, NdArray,
    SerializeOptions, Value,
};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use common::measure;

// ---- the two paths ---------------------------------------------------------------

/// `to_frames` is `dumps_with(to_value)`, bytes or error; when it encodes,
/// `from_frames` of the frames is `from_value(loads)`, value or error.
fn agree<T: Serialize + DeserializeOwned + PartialEq + Debug>(
    x: &T,
    sopts: &SerializeOptions,
    dopts: &DeserializeOptions,
) -> Result<(), TestCaseError> {
    let direct = to_frames(x, sopts);
    let dynamic = to_value(x).and_then(|v| dumps_with(&v, sopts));
    prop_assert_eq!(&direct, &dynamic, "to_frames vs to_value + dumps");
    if let Ok(frames) = direct {
        decode_agrees::<T>(&frames, dopts)?;
    }
    Ok(())
}

/// `from_frames::<T>(frames)` is `from_value(loads_with(frames))`.
fn decode_agrees<T: DeserializeOwned + PartialEq + Debug>(
    frames: &[Bytes],
    opts: &DeserializeOptions,
) -> Result<(), TestCaseError> {
    let direct = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        from_frames::<T>(frames, opts)
    }))
    .map_err(|_| TestCaseError::fail("from_frames panicked"))?;
    let dynamic = loads_with(frames, opts).and_then(from_value::<T>);
    prop_assert_eq!(direct, dynamic, "from_frames vs loads + from_value");
    Ok(())
}

/// `dumps(v)`'s frames, to read back; for a value `dumps` refuses (nested
/// past the depth limit, a reserved key), `None` once `to_frames` is checked
/// to refuse it with the same error: a case never passes unchecked.
fn dumps_or_same_refusal(v: &Value) -> Result<Option<Vec<Bytes>>, TestCaseError> {
    match dumps(v) {
        Ok(frames) => Ok(Some(frames)),
        Err(e) => {
            let direct = to_frames(v, &SerializeOptions::default());
            prop_assert_eq!(direct, Err(e), "to_frames vs dumps on a refused value");
            Ok(None)
        }
    }
}

// ---- generated messages ------------------------------------------------------------

fn array(n: usize) -> NdArray {
    let data: Vec<u8> = (0..n).flat_map(|i| (i as u16).to_le_bytes()).collect();
    NdArray::from_c_order("<u2", &[n as u64], Bytes::from(data)).unwrap()
}

fn block(pickled: bool, payload: Vec<u8>) -> Value {
    let header = Header::new(Value::map_of([("serializer", Value::str("pickle"))]));
    match pickled {
        true => Value::Pickled(Box::new(Block::new_pickled(header, [Bytes::from(payload)]))),
        false => Value::Serialized(Box::new(Block::new(header, [Bytes::from(payload)]))),
    }
}

/// Any value a message may hold: scalars, bins (some out of band once
/// serialized), arrays, blocks of both kinds, values to serialize, and
/// containers of them, keys of any type.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("NaN compares unequal", |f| !f.is_nan())
            .prop_map(Value::Float),
        ".{0,8}".prop_map(|s: String| Value::str(&s)),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::bin),
        (0usize..24).prop_map(|n| Value::NdArray(Box::new(array(n)))),
        (any::<bool>(), prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(pickled, p)| block(pickled, p)),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            prop::collection::vec(("[a-c]{1,3}", inner.clone()), 0..4).prop_map(|e| {
                Value::Map(e.into_iter().map(|(k, v)| (Value::str(&k), v)).collect())
            }),
            inner.prop_map(|v| Value::ToSerialize(Box::new(v))),
        ]
    })
}

#[allow(clippy::large_enum_variant)] // test messages, built once
#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
#[serde(tag = "op", rename_all = "kebab-case")]
enum Tagged {
    Store {
        key: String,
        data: Bin,
        array: Option<NdArray>,
        dynamic: Value,
    },
    Many {
        items: Vec<Value>,
    },
    Empty,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
enum External {
    Unit,
    New(Value),
    Tuple(u8, Value),
    Struct { v: Value, n: Option<i32> },
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Message {
    op: String,
    value: Value,
    items: Vec<Value>,
    by_key: BTreeMap<String, Value>,
    ints: ToSerialize<Vec<i64>>,
    array: NdArray,
    bin: Bin,
    #[serde(with = "framewire::typed::bytes")]
    raw: Bytes,
    tagged: Tagged,
    external: External,
    maybe: Option<Box<Message>>,
}

fn tagged() -> impl Strategy<Value = Tagged> {
    prop_oneof![
        (
            ".{0,6}",
            prop::collection::vec(any::<u8>(), 0..16),
            prop::option::of((0usize..8).prop_map(array)),
            value()
        )
            .prop_map(|(key, data, array, dynamic)| Tagged::Store {
                key,
                data: Bin::from(data),
                array,
                dynamic,
            }),
        prop::collection::vec(value(), 0..4).prop_map(|items| Tagged::Many { items }),
        Just(Tagged::Empty),
    ]
}

fn external() -> impl Strategy<Value = External> {
    prop_oneof![
        Just(External::Unit),
        value().prop_map(External::New),
        (any::<u8>(), value()).prop_map(|(a, v)| External::Tuple(a, v)),
        (value(), any::<Option<i32>>()).prop_map(|(v, n)| External::Struct { v, n }),
    ]
}

fn one_message() -> impl Strategy<Value = Message> {
    (
        ".{0,6}",
        value(),
        prop::collection::vec(value(), 0..4),
        prop::collection::btree_map("[a-d]{1,2}", value(), 0..3),
        prop::collection::vec(any::<i64>(), 0..40),
        (0usize..16).prop_map(array),
        prop::collection::vec(any::<u8>(), 0..24),
        tagged(),
        external(),
    )
        .prop_map(
            |(op, value, items, by_key, ints, array, bin, tagged, external)| Message {
                op,
                value,
                items,
                by_key,
                ints: ToSerialize(ints),
                array,
                raw: Bytes::from(bin.clone()),
                bin: Bin::from(bin),
                tagged,
                external,
                maybe: None,
            },
        )
}

fn message_strategy() -> impl Strategy<Value = Message> {
    (one_message(), prop::option::of(one_message())).prop_map(|(mut outer, inner)| {
        outer.maybe = inner.map(Box::new);
        outer
    })
}

fn options() -> impl Strategy<Value = (SerializeOptions, DeserializeOptions)> {
    (any::<bool>(), 1usize..64).prop_map(|(strict, shard)| {
        let mut s = SerializeOptions::default();
        if strict {
            // Small shards: blocks of several frames, merged when read.
            s.shard_size = shard;
        }
        let limits = match strict {
            true => Limits::strict(),
            false => Limits::default(),
        };
        (s, DeserializeOptions::with_limits(limits))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn generated_messages_agree(m in message_strategy(), (s, d) in options()) {
        agree(&m, &s, &d)?;
    }

    #[test]
    fn generated_values_agree(v in value(), (s, d) in options()) {
        agree(&v, &s, &d)?;
        agree(&vec![v.clone(), v.clone()], &s, &d)?;
        agree(&External::New(v), &s, &d)?;
    }

    /// Values nested past the depth where the direct paths hand over to
    /// the value (de)serializers, read as nested types too.
    #[test]
    fn deep_values_agree(depth in 1usize..80, maps in any::<u64>(), leaf in value()) {
        let mut v = leaf;
        for level in 0..depth {
            v = match maps >> (level % 64) & 1 {
                1 => Value::map_of([("k", v)]),
                _ => Value::Array(vec![v, Value::Nil]),
            };
        }
        let d = DeserializeOptions::default();
        agree(&vec![v.clone()], &SerializeOptions::default(), &d)?;
        agree(&External::New(v.clone()), &SerializeOptions::default(), &d)?;
        let Some(frames) = dumps_or_same_refusal(&v)? else { return Ok(()) };
        decode_agrees::<framewire::dask::Key>(&frames, &d)?;
        decode_agrees::<Vec<External>>(&frames, &d)?;
        decode_agrees::<BTreeMap<String, Vec<Value>>>(&frames, &d)?;
    }

    /// A value read as types it may not fit: the same value or error.
    #[test]
    fn values_read_as_other_types_agree(v in value()) {
        let d = DeserializeOptions::default();
        let Some(frames) = dumps_or_same_refusal(&v)? else { return Ok(()) };
        decode_agrees::<Tagged>(&frames, &d)?;
        decode_agrees::<External>(&frames, &d)?;
        decode_agrees::<Vec<External>>(&frames, &d)?;
        decode_agrees::<BTreeMap<String, Value>>(&frames, &d)?;
        decode_agrees::<Vec<i64>>(&frames, &d)?;
        decode_agrees::<(Bin, Value)>(&frames, &d)?;
        decode_agrees::<Option<NdArray>>(&frames, &d)?;
        decode_agrees::<Block>(&frames, &d)?;
        decode_agrees::<SchedulerToWorker>(&frames, &d)?;
        decode_agrees::<Vec<WorkerToScheduler>>(&frames, &d)?;
    }
}

// ---- captured messages, changed -------------------------------------------------------

fn capture(case: &str) -> Vec<Bytes> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/captures/conversation")
        .join(case);
    let frames: Vec<Bytes> = (0..)
        .map(|i| dir.join(format!("frame_{i:03}.bin")))
        .take_while(|p| p.exists())
        .map(|p| Bytes::from(std::fs::read(p).unwrap()))
        .collect();
    assert!(!frames.is_empty(), "no capture {case}");
    frames
}

/// `frames` with the changes applied: `(frame, offset, byte)` sets a byte
/// (offsets wrap), then frame `cut.0` is cut to `cut.1` bytes (or grows by
/// a byte when `cut.1` is past its end).
fn changed(frames: &[Bytes], changes: &[(usize, usize, u8)], cut: (usize, usize)) -> Vec<Bytes> {
    let mut out: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
    for &(frame, offset, byte) in changes {
        let f = &mut out[frame % frames.len()];
        if !f.is_empty() {
            let i = offset % f.len();
            f[i] = byte;
        }
    }
    let f = &mut out[cut.0 % frames.len()];
    match cut.1 {
        n if n < f.len() => f.truncate(n),
        n if n == f.len() => f.push(0xc0),
        _ => {}
    }
    out.into_iter().map(Bytes::from).collect()
}

/// Every type a capture is read as, decoded both ways from `frames`.
fn all_agree(frames: &[Bytes]) -> Result<(), TestCaseError> {
    for limits in [Limits::default(), Limits::strict()] {
        let d = DeserializeOptions::with_limits(limits);
        decode_agrees::<Vec<SchedulerToWorker>>(frames, &d)?;
        decode_agrees::<Vec<WorkerToScheduler>>(frames, &d)?;
        decode_agrees::<WorkerRequest>(frames, &d)?;
        decode_agrees::<GetDataReply>(frames, &d)?;
        decode_agrees::<Value>(frames, &d)?;
    }
    Ok(())
}

const CAPTURES: &[&str] = &[
    "compute-task_1",
    "compute-task_2",
    "task-finished_1",
    "task-erred_1",
    "free-keys_1",
    "acquire-replicas_1",
    "update_data_2",
    "get_data-reply_1",
    "get_data_1",
];

#[test]
fn captures_agree_unchanged() {
    for case in CAPTURES {
        all_agree(&capture(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Bytes changed anywhere in a real message (frame 0, a sub-header, a
    /// payload), a frame cut short or grown: both paths accept and refuse
    /// the same messages, with the same value or error.
    #[test]
    fn changed_captures_agree(
        case in prop::sample::select(CAPTURES),
        changes in prop::collection::vec((0usize..8, any::<usize>(), any::<u8>()), 0..4),
        cut in (0usize..8, 0usize..4096),
    ) {
        all_agree(&changed(&capture(case), &changes, cut))?;
    }
}

// ---- zero copy --------------------------------------------------------------------

/// A 64 MiB bin field and a 64 MiB array: `to_frames` hands out the
/// array's own memory as its frame and writes the bin once, into frame 0
/// (msgpack bin, as `dumps` writes it: frame 0 is that one copy, never
/// regrown); `from_frames` slices both out of the received buffer and
/// allocates nothing near a payload.
#[test]
fn sixty_four_mib_fields_are_never_copied() {
    #[derive(Serialize, Deserialize)]
    struct Big {
        key: String,
        data: Bin,
        array: NdArray,
    }
    let data = Bin::from(vec![3u8; 64 << 20]);
    let array = {
        let bytes: Vec<u8> = vec![5u8; 64 << 20];
        NdArray::from_c_order("<f8", &[8 << 20], Bytes::from(bytes)).unwrap()
    };
    let big = Big {
        key: "x".into(),
        data: data.clone(),
        array: array.clone(),
    };
    let (frames, stats) = measure(|| to_frames(&big, &SerializeOptions::default()).unwrap());
    assert!(
        stats.peak < (64 << 20) + (256 << 10),
        "to_frames allocated {} bytes",
        stats.peak
    );
    assert!(frames[0].len() > 64 << 20, "the bin is in frame 0");
    assert!(frames
        .iter()
        .any(|f| f.as_ptr() == array.data().as_ptr() && f.len() == 64 << 20));

    let wire = framewire::Envelope::new(frames).unwrap().to_bytes();
    let (env, _) = framewire::Envelope::decode(&wire, &Default::default()).unwrap();
    let opts = DeserializeOptions::default().backed_by(&env);
    let (back, stats) = measure(|| from_frames::<Big>(env.frames(), &opts).unwrap());
    assert!(
        stats.peak < 64 << 10,
        "from_frames allocated {} bytes",
        stats.peak
    );
    let inside = |p: *const u8, len: usize| {
        let (p, w) = (p as usize, wire.as_ptr() as usize);
        p >= w && p + len <= w + wire.len()
    };
    assert!(
        inside(back.data.as_ptr(), back.data.len()),
        "the bin is a slice of the message"
    );
    assert!(
        inside(back.array.data().as_ptr(), back.array.data().len()),
        "the array too"
    );
    assert_eq!(back.data.len(), 64 << 20);
    assert_eq!(&back.data[..16], &data[..16]);
}

/// The same inside an internally tagged enum, whose derive buffers every
/// field before it knows the variant.
#[test]
fn fields_of_tagged_enums_are_never_copied() {
    let data = Bin::from(vec![1u8; 1 << 20]);
    let msg = Tagged::Store {
        key: "k".into(),
        data: data.clone(),
        array: Some(array(1 << 19)),
        dynamic: Value::Nil,
    };
    let frames = to_frames(&msg, &SerializeOptions::default()).unwrap();
    let (back, stats) =
        measure(|| from_frames::<Tagged>(&frames, &DeserializeOptions::default()).unwrap());
    assert!(
        stats.peak < 64 << 10,
        "from_frames allocated {} bytes",
        stats.peak
    );
    let Tagged::Store {
        data: d,
        array: Some(a),
        ..
    } = back
    else {
        panic!("{back:?}")
    };
    let frame0 = frames[0].as_ptr_range();
    assert!(
        frame0.contains(&d.as_ptr()),
        "the bin is a slice of frame 0"
    );
    assert!(
        frames.iter().any(|f| f.as_ptr() == a.data().as_ptr()),
        "the array is its frame"
    );
}

// ---- errors of the message -----------------------------------------------------------

/// A reserved key in a struct or a map, nesting past msgpack-python's
/// 1024 levels, a value no family serializes: `to_frames` refuses as
/// `dumps` does, with the same error.
#[test]
fn encode_errors_are_the_message_layers() {
    #[derive(Serialize)]
    struct Reserved {
        #[serde(rename = "__Serialized__")]
        x: u8,
    }
    let s = SerializeOptions::default();
    assert_eq!(
        to_frames(&Reserved { x: 1 }, &s),
        Err(EncodeError::ReservedKey {
            key: "__Serialized__"
        })
    );
    let mut map = BTreeMap::new();
    map.insert("__Pickled__", 1u8);
    assert_eq!(
        to_frames(&map, &s),
        Err(EncodeError::ReservedKey { key: "__Pickled__" })
    );
    let mut deep = Value::Nil;
    for _ in 0..1025 {
        deep = Value::Array(vec![deep]);
    }
    let nested: Vec<Value> = vec![deep];
    let r = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            (
                to_frames(&nested, &s),
                to_value(&nested).and_then(|v| dumps(&v)),
            )
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(
        matches!(r.0, Err(EncodeError::DepthExceeded { .. })),
        "{:?}",
        r.0
    );
    assert_eq!(r.0, r.1);
    // A field's error comes first, with its path, as `to_value` gives it.
    #[derive(Serialize)]
    struct Both {
        reserved: BTreeMap<&'static str, u8>,
        big: u128,
    }
    let both = Both {
        reserved: [("__Serialized__", 1)].into(),
        big: u128::MAX,
    };
    let err = to_frames(&both, &SerializeOptions::default()).unwrap_err();
    assert!(
        matches!(&err, EncodeError::Field { path, .. } if path == "big"),
        "{err:?}"
    );
    let pickled = ToSerialize(block(true, vec![1]));
    assert_eq!(
        to_frames(&pickled, &SerializeOptions::default()),
        to_value(&pickled).and_then(|v| dumps(&v))
    );
}

/// What `loads` refuses, `from_frames` refuses with `loads`'s error, even
/// where the type would have failed first or ignored the part in error.
#[test]
fn decode_errors_are_the_message_layers() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct Small {
        a: u8,
    }
    let d = DeserializeOptions::default();
    // {"a": "x", "b": {"__Serialized__": 5}}: a field error first, then a
    // placeholder out of range: `loads` reports the placeholder.
    let frame0 = Bytes::from_static(b"\x82\xa1a\xa1x\xa1b\x81\xae__Serialized__\x05");
    let err = from_frames::<Small>(std::slice::from_ref(&frame0), &d).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Message(MessageError::OffsetOutOfRange {
            offset: 5,
            frames: 1
        })
    );
    assert_eq!(Err(err), loads_with(&[frame0], &d).map(|_| ()));
    // An ignored field holding a bad placeholder is still refused.
    let frame0 = Bytes::from_static(b"\x82\xa1a\x01\xa1b\x81\xae__Serialized__\x05");
    assert!(from_frames::<Small>(&[frame0], &d).is_err());
    // Trailing bytes after frame 0's value.
    let frame0 = Bytes::from_static(b"\x81\xa1a\x01\xc0");
    assert!(matches!(
        from_frames::<Small>(&[frame0], &d),
        Err(DecodeError::Message(MessageError::Msgpack(
            MsgpackError::TrailingBytes(_)
        )))
    ));
    // Without a field error, the message's own.
    let frame0 = Bytes::from_static(b"\x81\xa1a\x01");
    assert_eq!(from_frames::<Small>(&[frame0], &d), Ok(Small { a: 1 }));
    assert_eq!(
        from_frames::<Small>(&[], &d),
        Err(DecodeError::Message(MessageError::NoFrames))
    );
    // A reserved key in a map of more than one entry.
    let frame0 = Bytes::from_static(b"\x82\xa1a\x01\xae__Serialized__\x01");
    let frames = [frame0, Bytes::from_static(b"\x81\xaenum-sub-frames\x00")];
    assert!(matches!(
        from_frames::<Small>(&frames, &d),
        Err(DecodeError::Message(
            MessageError::AmbiguousReference { .. }
        ))
    ));
    assert_eq!(
        from_frames::<Small>(&frames, &d).map(|_| ()),
        loads_with(&frames, &d).map(|_| ())
    );
    // The pass-through decoding of the same frames refuses it too.
    assert!(message::decode(&frames, &d.limits).is_err());
}

// ---- batched streams and calls ------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn add_keys(key: &str) -> framewire::dask::AddKeys {
    framewire::dask::AddKeys {
        keys: vec![key.into()],
        op: framewire::dask::Op::new(),
        stimulus_id: "s".into(),
    }
}

/// `BatchedWriter` writes each op when it is queued and joins them: the
/// batch is byte for byte `dumps` of the list of their values, with ops
/// given as values and ops with blocks (renumbered) in it too.
#[test]
fn batched_writer_writes_what_dumps_writes() {
    use framewire::dask::{BatchedWriter, KeepAlive, Op};
    use framewire::transport::Connection;
    let with_block = Value::map_of([
        ("op", Value::str("x")),
        (
            "data",
            Value::ToSerialize(Box::new(Value::bin(vec![7u8; 100]))),
        ),
        ("pickled", block(true, vec![1, 2])),
    ]);
    let batches: Vec<(Vec<Value>, bool)> = vec![
        // Written ops only: joined as they are.
        (
            vec![
                to_value(&KeepAlive { op: Op::new() }).unwrap(),
                to_value(&add_keys("a")).unwrap(),
            ],
            false,
        ),
        // A written op with blocks, a value, another written op.
        (
            vec![
                with_block.clone(),
                Value::str("OK"),
                to_value(&add_keys("b")).unwrap(),
            ],
            true,
        ),
        // Written ops, then one with blocks, then written ops again.
        (
            vec![
                to_value(&add_keys("c")).unwrap(),
                to_value(&add_keys("d")).unwrap(),
                with_block.clone(),
                to_value(&add_keys("e")).unwrap(),
            ],
            false,
        ),
        // More ops than a fixarray holds: the list's header is an array 16.
        (
            (0..20)
                .map(|i| to_value(&add_keys(&i.to_string())).unwrap())
                .collect(),
            false,
        ),
    ];
    let rt = runtime();
    for (ops, as_values) in batches {
        let expected = dumps(&Value::Array(ops.clone())).unwrap();
        let got = rt.block_on(async {
            let (a, b) = tokio::io::duplex(1 << 20);
            let (_r, w) = Connection::new(a).into_split();
            let writer = BatchedWriter::new(w, std::time::Duration::from_secs(3600));
            for (i, op) in ops.iter().enumerate() {
                match (as_values && i == 1, op) {
                    (true, v) => writer.send_value(v.clone()).unwrap(),
                    (false, v) => writer.send(v).unwrap(),
                }
            }
            writer.close().await.unwrap();
            let mut rx = Connection::new(b);
            rx.recv().await.unwrap().unwrap()
        });
        assert_eq!(got.frames(), &expected[..]);
    }
}

/// Queues ops with `queue` on a `BatchedWriter` whose interval never ends,
/// then drops it: the stream carries one batch, `add-keys` "a" then "b"
/// byte for byte as `dumps` writes them, and ends.
fn assert_one_batch_of_a_and_b(
    rt: &tokio::runtime::Runtime,
    queue: impl FnOnce(&framewire::dask::BatchedWriter),
) {
    use framewire::dask::BatchedWriter;
    use framewire::transport::Connection;
    let got = rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (_r, w) = Connection::new(a).into_split();
        let writer = BatchedWriter::new(w, std::time::Duration::from_secs(3600));
        queue(&writer);
        // Dropped, not closed: what was queued goes, then the stream ends.
        drop(writer);
        let mut rx = Connection::new(b);
        let first = rx.recv().await.unwrap().unwrap();
        let end = rx.recv().await;
        assert!(end.is_none(), "{end:?}");
        first
    });
    let expected = dumps(&Value::Array(vec![
        to_value(&add_keys("a")).unwrap(),
        to_value(&add_keys("b")).unwrap(),
    ]))
    .unwrap();
    assert_eq!(got.frames(), &expected[..]);
}

/// An op that cannot be written is an error at once and leaves the batch
/// as it was; ops queued before a writer is dropped still go; after
/// `close` the stream ends, and a writer whose stream failed refuses ops.
#[test]
fn batched_writer_refuses_what_it_cannot_write_and_sends_the_rest() {
    use framewire::dask::BatchedWriter;
    use framewire::transport::{Connection, TransportError};
    let rt = runtime();
    let reserved = Value::map_of([("__Serialized__", Value::from(0u8))]);
    assert_one_batch_of_a_and_b(&rt, |writer| {
        writer.send(&add_keys("a")).unwrap();
        let refused = writer.send(&reserved);
        assert!(
            matches!(refused, Err(TransportError::Encode(_))),
            "{refused:?}"
        );
        writer.send(&add_keys("b")).unwrap();
    });
    // A stream that cannot be written: `close` says why, and ops queued
    // after the failure are refused.
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(64);
        drop(b);
        let (_r, w) = Connection::new(a).into_split();
        let writer = BatchedWriter::new(w, std::time::Duration::ZERO);
        writer.send(&add_keys("a")).unwrap();
        let mut refused = Ok(());
        for _ in 0..100 {
            tokio::task::yield_now().await;
            refused = writer.send(&add_keys("b"));
            if refused.is_err() {
                break;
            }
        }
        assert!(
            matches!(refused, Err(TransportError::Closed)),
            "{refused:?}"
        );
        assert!(writer.close().await.is_err());
    });
}

/// An op whose `Serialize` panics after writing part of itself leaves the
/// batch as it was, whether it would have been the batch's first op or
/// come after others: the ops queued around it go, byte for byte.
#[test]
fn batched_writer_keeps_its_batch_through_a_panicking_op() {
    use serde::ser::SerializeMap;
    struct Panics;
    impl serde::Serialize for Panics {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(2))?;
            m.serialize_entry("op", "add-keys")?;
            panic!("a Serialize that panics halfway");
        }
    }
    assert_one_batch_of_a_and_b(&runtime(), |writer| {
        let panicking = || {
            let sent =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.send(&Panics)));
            assert!(sent.is_err(), "the panic goes on to the caller");
        };
        panicking();
        writer.send(&add_keys("a")).unwrap();
        panicking();
        writer.send(&add_keys("b")).unwrap();
    });
}

/// `BatchedReader::recv` reads a batch straight into its ops and returns
/// what reading it as values returns: the ops up to `"OK"`, `None` at
/// `close-stream`, the ops around a bad one (an error of its own), and the
/// rest of a batch as values when the next call asks for them.
#[test]
fn batched_reader_returns_what_reading_values_returns() {
    use framewire::dask::{BatchedReader, WorkerToScheduler};
    use framewire::transport::{Connection, TransportError};
    let op = |k: &str| to_value(&add_keys(k)).unwrap();
    let bad = Value::map_of([("op", Value::str("add-keys")), ("keys", Value::from(3u8))]);
    let close = Value::map_of([("op", Value::str("close-stream"))]);
    let messages = vec![
        Value::Array(vec![op("a"), op("b"), Value::str("OK"), op("dropped")]),
        Value::Array(vec![op("c"), bad, op("d")]),
        Value::Array(vec![op("e"), op("f"), op("g")]),
        op("h"),
        Value::Array(vec![op("i"), close, op("after")]),
    ];
    #[allow(clippy::large_enum_variant)] // a test's results
    #[derive(Debug, PartialEq)]
    enum Got {
        Op(WorkerToScheduler),
        Value(Value),
        Error,
    }
    let rt = runtime();
    let read = |values_every: usize| {
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(1 << 20);
            let mut tx = Connection::new(a);
            for m in &messages {
                tx.send_value(m).await.unwrap();
            }
            let (r, _w) = Connection::new(b).into_split();
            let mut stream = BatchedReader::new(r);
            let mut got = Vec::new();
            for i in 0.. {
                // A call that reads a value: the rest of a typed batch comes
                // back as values.
                let next = match i % values_every == values_every - 1 {
                    true => stream.recv_value().await.map(|r| r.map(Got::Value)),
                    false => stream
                        .recv::<WorkerToScheduler>()
                        .await
                        .map(|r| r.map(Got::Op)),
                };
                match next {
                    None => break,
                    Some(Ok(g)) => got.push(g),
                    Some(Err(TransportError::Decode(DecodeError::Field { .. }))) => {
                        got.push(Got::Error)
                    }
                    Some(Err(e)) => panic!("{e}"),
                }
            }
            got
        })
    };
    let typed = |k: &str| Got::Op(WorkerToScheduler::AddKeys(add_keys(k)));
    assert_eq!(
        read(usize::MAX),
        vec![
            typed("a"),
            typed("b"),
            typed("c"),
            Got::Error,
            typed("d"),
            typed("e"),
            typed("f"),
            typed("g"),
            typed("h"),
            typed("i"),
        ]
    );
    assert_eq!(
        read(3),
        vec![
            typed("a"),
            typed("b"),
            Got::Value(op("c")),
            Got::Error,
            typed("d"),
            Got::Value(op("e")),
            typed("f"),
            typed("g"),
            Got::Value(op("h")),
            typed("i"),
        ]
    );
}

/// `Rpc` writes a request as `dumps` of its value with `reply` set (in
/// place, or appended), blocks included, and reads a reply as `loads` +
/// `from_value` would, an error reply included.
#[test]
fn rpc_requests_and_replies_as_values_would_be() {
    use framewire::dask::{Identity, Op, Rpc, RpcCause, RpcError};
    use framewire::transport::Connection;
    #[derive(Serialize)]
    struct Store {
        op: &'static str,
        data: ToSerialize<Bin>,
        reply: Option<bool>,
    }
    let store = Store {
        op: "store",
        data: ToSerialize(Bin::from(vec![1u8; 64])),
        reply: Some(false),
    };
    let identity = Identity {
        op: Op::new(),
        n_workers: Some(2),
        reply: None,
    };
    let with_reply = |mut v: Value, reply: bool| {
        let Value::Map(entries) = &mut v else {
            panic!()
        };
        match entries
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some("reply"))
        {
            Some((_, r)) => *r = Value::Bool(reply),
            None => entries.push((Value::str("reply"), Value::Bool(reply))),
        }
        dumps(&v).unwrap()
    };
    let error_reply = Value::map_of([
        ("status", Value::str("uncaught-error")),
        ("exception", block(true, vec![1])),
        ("traceback", Value::Nil),
        ("exception_text", Value::str("KeyError('x')")),
        ("traceback_text", Value::str("")),
    ]);
    let rt = runtime();
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut rpc = Rpc::new(Connection::new(a));
        let mut server = Connection::new(b);
        let (sent, got) = tokio::join!(rpc.send(&store), server.recv());
        sent.unwrap();
        let expected = with_reply(to_value(&store).unwrap(), false);
        assert_eq!(got.unwrap().unwrap().frames(), &expected[..]);

        let reply = Value::map_of([("type", Value::str("Scheduler")), ("id", Value::str("s"))]);
        let (r, _) = tokio::join!(rpc.call::<_, Value>(&identity), async {
            let got = server.recv().await.unwrap().unwrap();
            let expected = with_reply(to_value(&identity).unwrap(), true);
            assert_eq!(got.frames(), &expected[..]);
            server.send_value(&reply).await.unwrap();
        });
        assert_eq!(r.unwrap(), reply);

        let (r, _) = tokio::join!(rpc.call::<_, Value>(&identity), async {
            server.recv().await.unwrap().unwrap();
            server.send_value(&error_reply).await.unwrap();
        });
        match r {
            Err(e) => {
                assert_eq!(e.remote().unwrap().exception_text, "KeyError('x')");
                // The error names the op it was calling.
                assert_eq!(e.op(), Some("identity"));
                assert!(e.to_string().starts_with("calling identity: "), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // A reply that does not fit: a field error, the connection still up.
        let (r, _) = tokio::join!(rpc.call::<_, u8>(&identity), async {
            server.recv().await.unwrap().unwrap();
            server.send_value(&reply).await.unwrap();
        });
        assert!(
            matches!(
                r.as_ref().map_err(RpcError::cause),
                Err(RpcCause::Decode(DecodeError::Field { .. }))
            ),
            "{r:?}"
        );
        assert!(!rpc.connection().is_poisoned());
    });
}

/// A `Value` field nested as deep as a message may be (1024 levels in
/// all) is written by `to_frames` on a 2 MiB stack, the default of a
/// spawned thread and of tokio's workers, as `dumps` writes it; one level
/// more is refused alike. (Deeper values are beyond what a `Value` may
/// hold on such a stack at all: cloning and dropping one recurse, SPEC.md
/// §7.)
#[test]
fn a_value_at_the_depth_limit_is_written_on_a_default_stack() {
    #[derive(Serialize)]
    struct Holder {
        v: Value,
    }
    for (levels, fits) in [(1023, true), (1024, false)] {
        let (same, direct) = common::on_small_stack(2 << 20, move || {
            let mut deep = Value::Nil;
            for _ in 0..levels {
                deep = Value::Array(vec![deep]);
            }
            let holder = Holder { v: deep };
            let s = SerializeOptions::default();
            let direct = to_frames(&holder, &s).map(|_| ());
            let expected = to_value(&holder).and_then(|v| dumps(&v)).map(|_| ());
            // Dropping a deep value recurses: not what is measured here.
            std::mem::forget(holder);
            (direct == expected, direct)
        });
        assert!(same, "{levels}: to_frames vs to_value + dumps");
        assert_eq!(direct.is_ok(), fits, "{levels}: {direct:?}");
    }
}
