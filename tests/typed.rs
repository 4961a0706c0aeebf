//! Typed messages: `to_value` / `from_value` over derived types with every
//! field kind, zero-copy for out-of-band fields (plain structs and tagged
//! enums, whose derive buffers every field), errors naming the field, and
//! property round trips. Every type here also goes through the direct
//! paths (`to_frames` / `from_frames`), which must agree with the `Value`
//! path byte for byte and value for value ([`agree`]).

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;

use bytes::Bytes;
use framewire::serialize::Codec;
use framewire::typed::{from_frames, to_frames, Bin, ToSerialize};
use framewire::{
    dumps, from_value, loads_with, to_value, Block, DecodeError, DeserializeOptions, EncodeError,
    Header, NdArray, SerializeOptions, Value,
};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use common::measure;

/// The direct paths agree with the `Value` path on `x`: `to_frames` writes
/// what `dumps` of `to_value` writes, byte for byte, and `from_frames` of
/// those frames gives what `from_value` of `loads` gives (the same value,
/// or the same error). Returns what `from_frames` gave.
#[track_caller]
fn agree<T: Serialize + DeserializeOwned + PartialEq + Debug>(x: &T) -> Result<T, DecodeError> {
    let opts = SerializeOptions::default();
    let frames = to_frames(x, &opts);
    let dynamic = to_value(x).and_then(|v| framewire::dumps_with(&v, &opts));
    assert_eq!(frames, dynamic, "to_frames vs to_value + dumps");
    let frames = frames.expect("encodes");
    let opts = DeserializeOptions::default();
    let direct = from_frames::<T>(&frames, &opts);
    let dynamic = loads_with(&frames, &opts).and_then(from_value::<T>);
    assert_eq!(direct, dynamic, "from_frames vs loads + from_value");
    direct
}

/// [`agree`] for a `T` read from a message written from a `Value`.
#[track_caller]
fn agree_on<T: DeserializeOwned + PartialEq + Debug>(v: &Value) -> Result<T, DecodeError> {
    let frames = dumps(v).expect("dumps");
    let opts = DeserializeOptions::default();
    let direct = from_frames::<T>(&frames, &opts);
    let dynamic = loads_with(&frames, &opts).and_then(from_value::<T>);
    assert_eq!(direct, dynamic, "from_frames vs loads + from_value");
    direct
}

fn array(n: usize) -> NdArray {
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f64).to_le_bytes()).collect();
    NdArray::from_c_order("<f8", &[n as u64], Bytes::from(data)).unwrap()
}

fn block(pickled: bool) -> Block {
    let header = Header::new(Value::map_of([("serializer", Value::str("pickle"))]));
    let frames = [Bytes::from_static(b"\x80\x05K\x07.")];
    match pickled {
        true => Block::new_pickled(header, frames),
        false => Block::new(header, frames),
    }
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Scalars {
    b: bool,
    i8: i8,
    i64: i64,
    u64: u64,
    f32: f32,
    f64: f64,
    c: char,
    s: String,
    unit: (),
    tuple: (u8, String, f64),
    list: Vec<u16>,
    map: BTreeMap<String, i32>,
    int_keys: BTreeMap<i64, String>,
    absent: Option<u8>,
    present: Option<u8>,
    nested: Vec<Vec<i64>>,
}

fn scalars() -> Scalars {
    Scalars {
        b: true,
        i8: -5,
        i64: i64::MIN,
        u64: u64::MAX,
        f32: 1.5,
        f64: -0.25,
        c: 'é',
        s: "text".into(),
        unit: (),
        tuple: (1, "two".into(), 3.0),
        list: vec![1, 2, 300],
        map: [("a".to_string(), 1), ("b".to_string(), -2)].into(),
        int_keys: [(7, "seven".to_string())].into(),
        absent: None,
        present: Some(9),
        nested: vec![vec![1, 2], vec![], vec![-3]],
    }
}

#[test]
fn structs_are_maps_keyed_by_field_names_in_field_order() {
    let v = to_value(&scalars()).unwrap();
    let keys: Vec<&str> = v
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "b", "i8", "i64", "u64", "f32", "f64", "c", "s", "unit", "tuple", "list", "map",
            "int_keys", "absent", "present", "nested"
        ]
    );
    assert_eq!(v.get("absent"), Some(&Value::Nil));
    assert_eq!(
        v.get("tuple"),
        Some(&Value::Array(vec![1.into(), Value::str("two"), 3.0.into()]))
    );
    // The same bytes rmp-serde's named form (msgpack-python's dict) gives.
    assert_eq!(from_value::<Scalars>(v).unwrap(), scalars());
    assert_eq!(agree(&scalars()).unwrap(), scalars());
}

#[test]
fn options_may_be_absent_or_nil_and_unknown_keys_are_ignored() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct Msg {
        key: String,
        who: Option<String>,
        n: Option<u64>,
    }
    let v = Value::map_of([
        ("key", Value::str("x")),
        ("who", Value::Nil),
        ("extra", Value::str("ignored")),
    ]);
    assert_eq!(
        from_value::<Msg>(v.clone()).unwrap(),
        Msg {
            key: "x".into(),
            who: None,
            n: None
        }
    );
    agree_on::<Msg>(&v).unwrap();

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        key: String,
    }
    let v = Value::map_of([("key", Value::str("x")), ("extra", 1.into())]);
    let frames = dumps(&v).unwrap();
    let direct = from_frames::<Strict>(&frames, &DeserializeOptions::default()).unwrap_err();
    let err = from_value::<Strict>(v).unwrap_err();
    assert_eq!(direct, err);
    assert!(
        matches!(&err, DecodeError::Field { message, .. } if message.contains("unknown field `extra`")),
        "{err}"
    );
}

#[allow(clippy::large_enum_variant)] // a test message, built once
#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
#[serde(tag = "op", rename_all = "kebab-case")]
enum Stream {
    Store {
        key: String,
        data: Bin,
        #[serde(with = "framewire::typed::bytes")]
        raw: Bytes,
        block: Block,
        array: NdArray,
        dynamic: Value,
    },
    TaskFinished {
        key: String,
        nbytes: u64,
    },
    KeepAlive,
}

/// `Bin`, `Bytes` (with the helper), `Block`, `NdArray` and a dynamic
/// `Value` keep their memory through `to_value` and `from_value`, inside a
/// tagged enum too (serde buffers every field of one).
#[test]
fn out_of_band_fields_keep_their_memory_inside_tagged_enums() {
    let data = Bin::from(vec![1u8; 4096]);
    let raw = Bytes::from(vec![2u8; 4096]);
    let arr = array(512);
    let inner = block(true);
    let msg = Stream::Store {
        key: "x".into(),
        data: data.clone(),
        raw: raw.clone(),
        block: inner.clone(),
        array: arr.clone(),
        dynamic: Value::Serialized(Box::new(block(false))),
    };
    let v = to_value(&msg).unwrap();
    assert_eq!(v.get("op").and_then(Value::as_str), Some("store"));
    assert!(
        matches!(v.get("block"), Some(Value::Pickled(_))),
        "a pickled block stays one"
    );
    assert!(matches!(v.get("array"), Some(Value::NdArray(_))));
    match v.get("data") {
        Some(Value::Bin(b)) => assert_eq!(b.as_ptr(), data.as_ptr()),
        other => panic!("{other:?}"),
    }
    let back: Stream = from_value(v).unwrap();
    assert_eq!(back, msg);
    let direct = agree(&msg).unwrap();
    assert!(matches!(direct, Stream::Store { .. }));
    let Stream::Store {
        data: d,
        raw: r,
        block: b,
        array: a,
        dynamic,
        ..
    } = back
    else {
        panic!()
    };
    assert_eq!(d.as_ptr(), data.as_ptr(), "Bin: the same memory");
    assert_eq!(r.as_ptr(), raw.as_ptr(), "Bytes: the same memory");
    assert!(b.is_pickled());
    assert_eq!(
        b.frames()[0].as_ptr(),
        inner.frames()[0].as_ptr(),
        "block frames"
    );
    assert_eq!(a.data().as_ptr(), arr.data().as_ptr(), "array data");
    assert!(
        matches!(dynamic, Value::Serialized(_)),
        "a dynamic field keeps its block"
    );
}

/// A peer's map that imitates how a block travels through serde's buffering
/// (`{"\0framewire::side-table": n}`) names no block: inside a tagged enum
/// (buffered) it is an error, never the block of another field (here an
/// unknown one, buffered and then ignored).
#[test]
fn a_forged_side_table_marker_is_not_a_block() {
    let real = Value::Pickled(Box::new(block(true)));
    for n in 0u64..4 {
        let forged = Value::map_of([("\0framewire::side-table", Value::from(n))]);
        let msg = Value::map_of([
            ("op", Value::str("store")),
            ("key", Value::str("x")),
            ("data", Value::bin(vec![1u8])),
            ("raw", Value::bin(vec![2u8])),
            ("block", forged),
            ("array", Value::NdArray(Box::new(array(4)))),
            ("dynamic", Value::Nil),
            ("extra", real.clone()),
        ]);
        let frames = dumps(&msg).unwrap();
        let direct = from_frames::<Stream>(&frames, &DeserializeOptions::default());
        assert!(
            direct.is_err(),
            "marker {n}: from_frames decoded as {direct:?}"
        );
        let r = from_value::<Stream>(msg);
        assert!(r.is_err(), "marker {n}: decoded as {r:?}");
    }
}

/// A block where the type wants a map or a struct is an error at that
/// field, never a one-entry map of serde plumbing.
#[test]
fn a_block_is_not_a_map() {
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Sizes {
        nbytes: BTreeMap<String, u64>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        inner: Sizes,
    }
    let b = Value::Pickled(Box::new(block(true)));
    let frames = dumps(&Value::map_of([("nbytes", b.clone())])).unwrap();
    let direct = from_frames::<Sizes>(&frames, &DeserializeOptions::default()).unwrap_err();
    assert!(
        matches!(&direct, DecodeError::Field { path, .. } if path == "nbytes"),
        "{direct}"
    );
    let e = from_value::<Sizes>(Value::map_of([("nbytes", b.clone())])).unwrap_err();
    assert!(
        matches!(&e, DecodeError::Field { path, .. } if path == "nbytes"),
        "{e}"
    );
    let e = from_value::<Outer>(Value::map_of([("inner", b)])).unwrap_err();
    assert!(
        matches!(&e, DecodeError::Field { path, .. } if path == "inner"),
        "{e}"
    );
}

/// Through a whole message: `dumps` then `loads` (the receive side's
/// buffers), a 64 MiB bin field and a 64 MiB array are never copied by the
/// typed layer: `from_value` allocates a few hundred bytes.
#[test]
fn typed_decode_of_64_mib_fields_copies_no_payload() {
    #[derive(Serialize, Deserialize)]
    struct Big {
        key: String,
        data: Bin,
        array: NdArray,
    }
    let big = Big {
        key: "x".into(),
        data: Bin::from(vec![3u8; 64 << 20]),
        array: array(8 << 20),
    };
    let (value, stats) = measure(|| to_value(&big).unwrap());
    assert!(stats.peak < 4096, "to_value allocated {} bytes", stats.peak);
    let frames = dumps(&value).unwrap();
    let wire = framewire::Envelope::new(frames).unwrap().to_bytes();
    let (env, _) = framewire::Envelope::decode(&wire, &Default::default()).unwrap();
    let value = loads_with(env.frames(), &DeserializeOptions::default().backed_by(&env)).unwrap();
    let (back, stats) = measure(|| from_value::<Big>(value).unwrap());
    assert!(
        stats.peak < 4096,
        "from_value allocated {} bytes",
        stats.peak
    );
    let inside = |p: *const u8| {
        let (p, w) = (p as usize, wire.as_ptr() as usize);
        p >= w && p < w + wire.len()
    };
    assert!(
        inside(back.data.as_ptr()),
        "the bin is a slice of the received message"
    );
    assert!(inside(back.array.data().as_ptr()), "the array too");
    assert_eq!(back.data.len(), 64 << 20);
}

#[test]
fn to_serialize_sends_a_field_out_of_band() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Msg {
        op: String,
        data: ToSerialize<Vec<i64>>,
    }
    let msg = Msg {
        op: "store".into(),
        data: ToSerialize((0..100).collect()),
    };
    let v = to_value(&msg).unwrap();
    assert!(matches!(v.get("data"), Some(Value::ToSerialize(_))));
    let frames = dumps(&v).unwrap();
    assert!(
        frames.len() >= 3,
        "frame 0, a sub-header and a payload frame"
    );
    let back: Msg =
        from_value(loads_with(&frames, &DeserializeOptions::default()).unwrap()).unwrap();
    assert_eq!(back, msg);
    assert_eq!(agree(&msg).unwrap(), msg);
}

#[test]
fn errors_name_the_field() {
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        start: f64,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Msg {
        key: String,
        startstops: Vec<Inner>,
    }
    let path_of = |v: Value| match from_value::<Msg>(v.clone()).unwrap_err() {
        DecodeError::Field { path, message } => {
            let direct = from_frames::<Msg>(&dumps(&v).unwrap(), &DeserializeOptions::default());
            assert_eq!(
                direct.unwrap_err(),
                DecodeError::Field {
                    path: path.clone(),
                    message: message.clone()
                }
            );
            (path, message)
        }
        other => panic!("{other:?}"),
    };
    let wrong_type = Value::map_of([
        ("key", Value::str("x")),
        (
            "startstops",
            Value::Array(vec![Value::map_of([("start", Value::str("soon"))])]),
        ),
    ]);
    let (path, message) = path_of(wrong_type);
    assert_eq!(path, "startstops[0].start");
    assert!(message.contains("expected f64"), "{message}");
    let missing = Value::map_of([("key", Value::str("x"))]);
    assert_eq!(path_of(missing).1, "missing field `startstops`");
    let not_a_map = Value::from(7u8);
    assert!(from_value::<Msg>(not_a_map).is_err());
    // Integers that do not fit.
    assert!(matches!(
        from_value::<u8>(Value::from(300u16)),
        Err(DecodeError::Field { .. })
    ));
    assert!(matches!(
        to_value(&u128::MAX),
        Err(EncodeError::Field { .. })
    ));
    assert_eq!(
        to_frames(&u128::MAX, &SerializeOptions::default()),
        to_value(&u128::MAX).map(|_| vec![])
    );
}

#[test]
fn unknown_variants_and_wrong_tags_are_errors() {
    let v = Value::map_of([("op", Value::str("no-such-op"))]);
    assert!(agree_on::<Stream>(&v).is_err());
    let err = from_value::<Stream>(v).unwrap_err();
    assert!(err.to_string().contains("unknown variant"), "{err}");
    assert!(from_value::<Stream>(Value::map_of([("key", Value::str("x"))])).is_err());
    // A unit variant.
    let v = to_value(&Stream::KeepAlive).unwrap();
    assert_eq!(v, Value::map_of([("op", Value::str("keep-alive"))]));
    assert_eq!(from_value::<Stream>(v).unwrap(), Stream::KeepAlive);
    assert_eq!(agree(&Stream::KeepAlive).unwrap(), Stream::KeepAlive);
}

#[test]
fn externally_tagged_enums_and_newtypes_read_as_serde_json_writes_them() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum E {
        A,
        B(u8),
        C { x: String },
        D(u8, u8),
    }
    for e in [E::A, E::B(1), E::C { x: "y".into() }, E::D(1, 2)] {
        let v = to_value(&e).unwrap();
        assert_eq!(from_value::<E>(v).unwrap(), e);
        assert_eq!(agree(&e).unwrap(), e);
    }
    // Not an enum's form: the same error either way.
    for v in [
        Value::from(3u8),
        Value::map_of([]),
        Value::map_of([("A", Value::from(1u8))]),
        Value::map_of([("B", Value::str("x"))]),
        Value::map_of([("Z", Value::Nil)]),
    ] {
        assert!(agree_on::<E>(&v).is_err(), "{v:?}");
    }
    assert_eq!(to_value(&E::A).unwrap(), Value::str("A"));
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Newtype(String);
    assert_eq!(to_value(&Newtype("n".into())).unwrap(), Value::str("n"));
}

#[test]
fn flattened_fields_keep_blocks() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Outer {
        op: String,
        #[serde(flatten)]
        rest: BTreeMap<String, Value>,
    }
    let mut rest = BTreeMap::new();
    rest.insert(
        "block".to_string(),
        Value::Serialized(Box::new(block(false))),
    );
    rest.insert("n".to_string(), Value::from(3u8));
    let o = Outer {
        op: "x".into(),
        rest,
    };
    let v = to_value(&o).unwrap();
    assert!(matches!(v.get("block"), Some(Value::Serialized(_))));
    assert_eq!(from_value::<Outer>(v).unwrap(), o);
    agree(&o).unwrap();
}

/// A `Vec<i64>` is packed (8 bytes an item) both ways.
#[test]
fn integer_vectors_are_packed() {
    let ints: Vec<i64> = (0..1000).map(|i| i * 7 - 500).collect();
    let v = to_value(&ints).unwrap();
    assert_eq!(v.as_int_array(), Some(&ints[..]));
    assert_eq!(from_value::<Vec<i64>>(v).unwrap(), ints);
    assert_eq!(agree(&ints).unwrap(), ints);
    // A mixed list unpacks at its first non-integer.
    let mixed = to_value(&(1u8, "a")).unwrap();
    assert_eq!(mixed, Value::Array(vec![1.into(), Value::str("a")]));
}

/// Every kind of item in a sequence is the value it is on its own, whether
/// it comes while the items are still packed or after: integers of every
/// width, integers outside `i64`, options, strings, bins, nested sequences,
/// maps, structs, blocks and dynamic values.
#[test]
fn sequence_items_are_the_values_they_are_alone() {
    #[derive(Serialize, Clone)]
    #[serde(untagged)]
    enum Item {
        I8(i8),
        U64(u64),
        U128(u128),
        Opt(Option<i16>),
        S(String),
        B(Bin),
        L(Vec<i32>),
        M(BTreeMap<String, u8>),
        St { x: u32 },
        Blk(Block),
        V(Value),
    }
    let items = vec![
        Item::I8(-3),
        Item::U64(7),
        Item::U128(5),
        Item::Opt(Some(-9)),
        Item::Opt(None),
        Item::U64(u64::MAX),
        Item::U128(u128::from(u64::MAX)),
        Item::S("s".into()),
        Item::B(Bin::from(&b"raw"[..])),
        Item::L(vec![1, 2]),
        Item::M(BTreeMap::from([("k".to_string(), 1)])),
        Item::St { x: 4 },
        Item::Blk(block(false)),
        Item::V(Value::from(11u8)),
        Item::V(Value::str("v")),
    ];
    let alone = |it: &Item| to_value(it).unwrap();
    // Each item first (so that it meets a packed builder), and after a
    // string (so that it meets an unpacked one), in a Vec and in a tuple.
    for it in &items {
        let expected = Value::Array(vec![alone(it), Value::from(1u8)]);
        assert_eq!(to_value(&vec![it.clone(), Item::I8(1)]).unwrap(), expected);
        assert_eq!(to_value(&(it.clone(), 1u8)).unwrap(), expected);
        let expected = Value::Array(vec![Value::str("a"), alone(it)]);
        assert_eq!(
            to_value(&vec![Item::S("a".into()), it.clone()]).unwrap(),
            expected
        );
    }
    assert!(matches!(alone(&items[12]), Value::Serialized(_)));
    // A long run of integers packs, and unpacks at the first that is not
    // an `i64`, keeping the ones before it.
    let mut long: Vec<u64> = (0..40).collect();
    assert_eq!(
        to_value(&long).unwrap().as_int_array().map(<[i64]>::len),
        Some(40)
    );
    long.push(u64::MAX);
    let expected: Vec<Value> = long.iter().map(|&u| Value::from(u)).collect();
    assert_eq!(to_value(&long).unwrap(), Value::Array(expected));
}

#[test]
fn value_is_serde_both_ways_elsewhere_too() {
    // Outside a framewire conversion a Value serializes as its data.
    let v = Value::map_of([
        ("a", Value::from(vec![1i64, 2, 3])),
        ("b", Value::bin(vec![1u8])),
    ]);
    let json = serde_json::to_string(&v).unwrap();
    assert_eq!(json, r#"{"a":[1,2,3],"b":[1]}"#);
    let back: Value = serde_json::from_str(r#"{"a":[1,2,3],"s":"x","n":null}"#).unwrap();
    assert_eq!(back.get("s"), Some(&Value::str("x")));
}

#[cfg(feature = "lz4")]
#[test]
fn typed_codec_and_connection_send_typed_messages() {
    use framewire::transport::{ConnectionBuilder, HandshakeOptions, MessageCodec};
    use futures_util::{SinkExt, StreamExt};
    use tokio_util::codec::Framed;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let msg = Stream::TaskFinished {
            key: "k".into(),
            nbytes: 8,
        };
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut tx = Framed::new(a, MessageCodec::<Stream>::new());
        let mut rx = Framed::new(b, MessageCodec::<Stream>::new());
        tx.send(&msg).await.unwrap();
        assert_eq!(rx.next().await.unwrap().unwrap(), msg);
        // A message that does not fit the type is a field error.
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut tx = Framed::new(a, MessageCodec::<Value>::new());
        let mut rx = Framed::new(b, MessageCodec::<Stream>::new());
        tx.send(&Value::map_of([("op", Value::str("task-finished"))]))
            .await
            .unwrap();
        assert!(matches!(
            rx.next().await.unwrap(),
            Err(framewire::TransportError::Decode(DecodeError::Field { .. }))
        ));

        // Connection: send_msg / recv_msg, with the codec a handshake agreed.
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut opts = HandshakeOptions::default();
        opts.compression = Some(Codec::Lz4);
        let builder = ConnectionBuilder::new();
        let (l, r) = tokio::join!(builder.handshake(a, &opts), builder.handshake(b, &opts));
        let ((mut l, _), (mut r, _)) = (l.unwrap(), r.unwrap());
        let store = Stream::Store {
            key: "x".into(),
            data: Bin::from(vec![0u8; 1 << 16]),
            raw: Bytes::from_static(b"raw"),
            block: block(false),
            array: array(1 << 16),
            dynamic: Value::Nil,
        };
        let (sent, got) = tokio::join!(l.send_msg(&store), r.recv_msg::<Stream>());
        sent.unwrap();
        let (
            Stream::Store {
                key,
                data,
                raw,
                block: b,
                array: a,
                dynamic,
            },
            Stream::Store {
                data: d0,
                array: a0,
                ..
            },
        ) = (got.unwrap().unwrap(), &store)
        else {
            panic!("not a store")
        };
        assert_eq!(
            (key.as_str(), &raw[..], dynamic),
            ("x", &b"raw"[..], Value::Nil)
        );
        assert!(data == *d0 && a == *a0, "the bin and the array come back");
        // The block comes back as it went, with the `num-sub-frames` the
        // wire adds to its header.
        assert_eq!(b.frames(), block(false).frames());
        assert_eq!(b.header().get("num-sub-frames"), Some(&Value::from(1u8)));
    });
}

// ---- property round trips --------------------------------------------------------

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
#[serde(tag = "op")]
enum Prop {
    A {
        n: i64,
        u: u64,
        f: f64,
        s: String,
        o: Option<i32>,
        v: Vec<i64>,
        b: Bin,
        t: (bool, String),
        m: BTreeMap<String, Vec<u8>>,
    },
    B {
        inner: Vec<Prop>,
    },
    C,
}

fn prop_strategy() -> impl Strategy<Value = Prop> {
    let leaf = prop_oneof![
        Just(Prop::C),
        (
            any::<i64>(),
            any::<u64>(),
            any::<f64>().prop_filter("NaN compares unequal", |f| !f.is_nan()),
            ".{0,12}",
            any::<Option<i32>>(),
            prop::collection::vec(any::<i64>(), 0..80),
            prop::collection::vec(any::<u8>(), 0..40),
            (any::<bool>(), ".{0,4}"),
            prop::collection::btree_map(".{0,4}", prop::collection::vec(any::<u8>(), 0..4), 0..4),
        )
            .prop_map(|(n, u, f, s, o, v, b, t, m)| Prop::A {
                n,
                u,
                f,
                s,
                o,
                v,
                b: Bin::from(b),
                t,
                m,
            }),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(|inner| Prop::B { inner })
    })
}

proptest! {
    #[test]
    fn to_value_then_from_value_is_the_identity(p in prop_strategy()) {
        let v = to_value(&p).unwrap();
        prop_assert_eq!(from_value::<Prop>(v.clone()).unwrap(), p.clone());
        // And through the wire: dumps, then loads.
        let frames = dumps(&v).unwrap();
        let back = loads_with(&frames, &DeserializeOptions::default()).unwrap();
        prop_assert_eq!(from_value::<Prop>(back).unwrap(), p.clone());
        // And the direct paths.
        prop_assert_eq!(agree(&p).unwrap(), p);
    }
}
