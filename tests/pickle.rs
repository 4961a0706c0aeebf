//! `framewire::pickle` without Python: the pickles of the project's real
//! Dask captures, hostile pickles (huge declared lengths, deep nesting, memo
//! abuse, truncation, globals that are not plain data), each refused with
//! its typed error and an allocation bounded by the input (the counting
//! allocator of `tests/common`), the writer's refusals, and round trips of
//! arbitrary plain values.

mod common;

use std::path::Path;

use bytes::Bytes;
use framewire::pickle::{self, PickleError, PickleFamily};
use framewire::serialize::{deserialize, DeserializeOptions, Registry};
use framewire::{EncodeError, Envelope, Integer, Limits, NdArray, Value};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

use common::{bounded, on_small_stack, SMALL};

fn loads(data: &[u8]) -> Result<Value, PickleError> {
    pickle::loads(&Bytes::copy_from_slice(data), &[], &Limits::default())
}

/// What reading may allocate per byte of pickle: a 56-byte stack slot
/// for a one-byte opcode, twice while the stack grows, and its memo slot
/// (Python builds a 56-byte object and a stack pointer for the same byte).
const PER_BYTE: usize = 128;

/// `loads` of a hostile pickle: its peak allocation stays within 64 KiB
/// plus [`PER_BYTE`] per byte of input.
#[track_caller]
fn hostile(data: &[u8], limits: &Limits) -> Result<Value, PickleError> {
    let data = Bytes::copy_from_slice(data);
    bounded(SMALL + PER_BYTE * data.len(), || {
        pickle::loads(&data, &[], limits)
    })
}

fn s(text: &str) -> Value {
    Value::str(text)
}

// ---- real Dask pickles ------------------------------------------------------

/// The message of a capture's `wire.bin`, and the bytes it came in.
fn capture(name: &str) -> (Value, Bytes) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/captures/{name}/wire.bin"));
    let wire = Bytes::from(std::fs::read(path).unwrap());
    let (env, used) = Envelope::decode(&wire, &Limits::default()).unwrap();
    assert_eq!(used, wire.len());
    let msg = framewire::message::decode(env.frames(), &Limits::default()).unwrap();
    (msg, wire)
}

fn block_value(msg: &Value, key: &str) -> Result<Value, PickleError> {
    match msg.get(key) {
        Some(Value::Pickled(b) | Value::Serialized(b)) => {
            pickle::deserialize(b, &DeserializeOptions::default())
        }
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn topickle_blocks_of_real_dask_read() {
    // ToPickle({"a": 1, "b": (2, 3), "c": {4, 5}}) and ToPickle(arange(4, "<i4")).
    let (msg, wire) = capture("topickle");
    assert_eq!(
        block_value(&msg, "graph").unwrap(),
        Value::map_of([
            ("a", 1.into()),
            ("b", Value::Array(vec![2.into(), 3.into()])),
            ("c", Value::Array(vec![4.into(), 5.into()])),
        ])
    );
    let Value::NdArray(a) = block_value(&msg, "arr").unwrap() else {
        panic!("not an array")
    };
    assert_eq!((a.dtype(), a.shape()), ("<i4", &[4u64][..]));
    assert_eq!(
        &a.data()[..],
        &[0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]
    );
    // The out-of-band frame itself, inside the bytes received.
    let (p, w) = (a.data().as_ptr() as usize, wire.as_ptr() as usize);
    assert!(p >= w && p + a.data().len() <= w + wire.len());

    // An lz4-compressed out-of-band buffer: decompressed, then read.
    let (msg, _) = capture("topickle_lz4");
    let Value::NdArray(a) = block_value(&msg, "arr").unwrap() else {
        panic!("not an array")
    };
    assert_eq!((a.dtype(), a.shape()), ("|u1", &[20000u64][..]));
    assert_eq!(
        hex::encode(Sha256::digest(a.data())),
        "28b4f41a7f3ee6d8cc87272db6e09c6d3566551fd4d18702b041a21658272a85"
    );

    // A Pickled(header, frames) passed through: ("pre", 1).
    let (msg, _) = capture("pickled_preexisting");
    assert_eq!(
        block_value(&msg, "obj").unwrap(),
        Value::Array(vec![s("pre"), 1.into()])
    );
}

#[test]
fn pickle_fallback_blocks_name_what_they_refuse() {
    // Dask's pickle fallback for a Decimal and a complex in frame 0.
    let (msg, _) = capture("pickle_fallback_orphans");
    let err = block_value(&msg, "b").unwrap_err();
    assert_eq!(
        err.to_string(),
        "pickle global not allowed: decimal.Decimal"
    );
    let Value::NdArray(c) = block_value(&msg, "c").unwrap() else {
        panic!("complex is a 0-d <c16 array")
    };
    assert_eq!((c.dtype(), c.shape()), ("<c16", &[][..]));
    let parts: Vec<f64> = c
        .data()
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(parts, [1.0, 2.0]);
    // A bytes block of the dask family holds no pickle.
    assert_eq!(block_value(&msg, "a"), Err(PickleError::NotPickle));
}

#[test]
fn pickle_family_reads_collection_elements() {
    // serializers=["dask", "pickle", "msgpack"]: [[1, 2], ["x"], (3, 4)],
    // each element pickled.
    let (msg, _) = capture("pickle_before_msgpack_rule");
    let Some(Value::Serialized(block)) = msg.get("data") else {
        panic!("{msg:?}")
    };
    let without = deserialize(block, &DeserializeOptions::default()).unwrap();
    assert!(
        matches!(&without.as_array().unwrap()[0], Value::Serialized(_)),
        "opaque without the family"
    );
    let opts = {
        let mut o = DeserializeOptions::default();
        o.registry = Registry::default().with(PickleFamily);
        o
    };
    assert_eq!(
        deserialize(block, &opts).unwrap(),
        Value::Array(vec![
            Value::Array(vec![1.into(), 2.into()]),
            Value::Array(vec![s("x")]),
            Value::Array(vec![3.into(), 4.into()]),
        ])
    );
    // A pickle the family refuses stays an opaque block, whole.
    let (msg, _) = capture("pickle_fallback_orphans");
    let Some(Value::Pickled(decimal)) = msg.get("b") else {
        panic!()
    };
    let header = decimal.header().map().get("pickled-obj").cloned().unwrap();
    let Value::Bin(pickled) = header else {
        panic!()
    };
    let refused = pickle::serialize(&Value::Nil).unwrap();
    let (h, _) = refused.into_parts();
    let block = framewire::Block::new(h, [pickled]);
    assert_eq!(
        deserialize(&block, &opts).unwrap(),
        Value::Serialized(Box::new(block.clone()))
    );
}

// ---- hostile pickles ------------------------------------------------------------

#[test]
fn huge_declared_lengths_are_truncation_not_allocation() {
    let limits = [Limits::strict(), Limits::dask_compat()];
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for op in [0x8du8, 0x8e, 0x96, 0x95] {
        for n in [u64::MAX, 1 << 62, 1 << 40, 100] {
            let mut p = vec![0x80, 5, op];
            p.extend_from_slice(&n.to_le_bytes());
            p.push(b'.');
            cases.push(p);
        }
    }
    for op in [b'X', b'B'] {
        let mut p = vec![0x80, 5, op];
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        p.extend_from_slice(b"abc.");
        cases.push(p);
    }
    let mut long4 = vec![0x80, 5, 0x8b];
    long4.extend_from_slice(&i32::MAX.to_le_bytes());
    long4.push(b'.');
    cases.push(long4);
    cases.push(vec![0x80, 5, 0x8c, 200, b'a', b'.']);
    for case in &cases {
        for l in &limits {
            assert_eq!(
                hostile(case, l),
                Err(PickleError::Truncated { at: 2 }),
                "{case:02x?}"
            );
        }
    }
    let mut negative = vec![0x80, 5, 0x8b];
    negative.extend_from_slice(&(-1i32).to_le_bytes());
    assert!(matches!(
        hostile(&negative, &Limits::strict()),
        Err(PickleError::Invalid { at: 2, .. })
    ));
}

#[test]
fn integers_beyond_the_value_range_are_refused() {
    // 2^64 and -2^63 - 1 as Python writes them; 255 bytes of a long.
    assert_eq!(
        loads(b"\x80\x05\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."),
        Err(PickleError::IntegerOutOfRange { at: 2 })
    );
    assert_eq!(
        loads(b"\x80\x05\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff."),
        Err(PickleError::IntegerOutOfRange { at: 2 })
    );
    let mut wide = vec![0x80, 5, 0x8a, 255];
    wide.extend(std::iter::repeat_n(0x11, 255));
    wide.push(b'.');
    assert_eq!(
        hostile(&wide, &Limits::strict()),
        Err(PickleError::IntegerOutOfRange { at: 2 })
    );
    // Padded with sign bytes, the edges still read.
    assert_eq!(
        loads(b"\x80\x05\x8a\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00."),
        Ok(Value::from(u64::MAX))
    );
    assert_eq!(
        loads(b"\x80\x05\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff."),
        Ok(Value::from(i64::MIN))
    );
    assert_eq!(loads(b"\x80\x05\x8a\x00."), Ok(Value::from(0u8)));
}

#[test]
fn deep_nesting_is_an_error_on_a_small_stack() {
    // The machine never recurses; what is built up to the limit is dropped
    // recursively, as any Value is (SPEC.md §7: under 512 KiB of stack for
    // 1 024 levels in debug builds).
    for (limits, limit, stack) in [
        (Limits::strict(), 64, 128 << 10),
        (Limits::dask_compat(), 1024, 1 << 20),
    ] {
        // (Under Limits::max_pickle_values of either profile.)
        // A tuple of a tuple of ... (TUPLE1 50 000 times).
        let mut tuples = vec![0x80, 5, b')'];
        tuples.extend(std::iter::repeat_n(0x85, 50_000));
        tuples.push(b'.');
        // 50 000 lists, each appended into the one below.
        let mut lists = vec![0x80, 5];
        lists.extend(std::iter::repeat_n(b']', 50_000));
        lists.extend(std::iter::repeat_n(b'a', 49_999));
        lists.push(b'.');
        // Dicts, each the value of the one below.
        let mut dicts = vec![0x80, 5, b'}'];
        for _ in 0..30_000 {
            dicts.extend_from_slice(b"K\x01}");
        }
        dicts.extend(std::iter::repeat_n(b's', 30_000));
        dicts.push(b'.');
        for p in [tuples, lists, dicts] {
            let l = limits.clone();
            let r = on_small_stack(stack, move || {
                let data = Bytes::from(p);
                bounded(SMALL + PER_BYTE * data.len(), || {
                    pickle::loads(&data, &[], &l)
                })
            });
            assert_eq!(r, Err(PickleError::DepthExceeded { limit }));
        }
    }
    // At the limit it reads: 64 tuples, each the only item of the one
    // around it, the innermost empty.
    let mut at_limit = vec![0x80, 5, b')'];
    at_limit.extend(std::iter::repeat_n(0x85, 63));
    at_limit.push(b'.');
    let mut expected = Value::Array(Vec::new());
    for _ in 0..63 {
        expected = Value::Array(vec![expected]);
    }
    assert_eq!(
        pickle::loads(&Bytes::from(at_limit), &[], &Limits::strict()),
        Ok(expected)
    );
}

#[test]
fn memo_abuse_is_refused() {
    // GET of an index never PUT, small and huge.
    assert_eq!(
        loads(b"\x80\x05h\x05."),
        Err(PickleError::MemoIndex { index: 5, at: 2 })
    );
    assert_eq!(
        hostile(b"\x80\x05N\x94j\xff\xff\xff\xff.", &Limits::strict()),
        Err(PickleError::MemoIndex {
            index: u32::MAX as u64,
            at: 4
        })
    );
    // PUT past the pickle's length: no memo table of 2^32 slots.
    assert_eq!(
        hostile(b"\x80\x05Nr\xff\xff\xff\xff.", &Limits::dask_compat()),
        Err(PickleError::MemoIndex {
            index: u32::MAX as u64,
            at: 3
        })
    );
    // Below it, a sparse index is fine (4 bytes of memo per byte of input).
    let mut sparse = vec![0x80, 5, b'N', b'r'];
    sparse.extend_from_slice(&60_000u32.to_le_bytes());
    sparse.extend_from_slice(b"0j");
    sparse.extend_from_slice(&60_000u32.to_le_bytes());
    sparse.resize(65_000, b'N');
    sparse.push(b'.');
    assert_eq!(hostile(&sparse, &Limits::strict()), Ok(Value::Nil));

    // A billion-fold memo bomb: L0 = [], Li = [L(i-1), L(i-1)], 40 times.
    let mut bomb = vec![0x80, 5, b']', 0x94];
    for i in 0..40u8 {
        bomb.extend_from_slice(&[b']', 0x94, b'(', b'h', i, b'h', i, b'e']);
    }
    bomb.push(b'.');
    assert_eq!(
        hostile(&bomb, &Limits::dask_compat()),
        Err(PickleError::TooManyValues { limit: bomb.len() })
    );
    // A list inside itself: x = [1]; x.append(x).
    assert_eq!(
        loads(b"\x80\x05]\x94(K\x01h\x00e."),
        Err(PickleError::Recursive { at: 9 })
    );
    // Shared but finite: [x, x] with x = [1, 2], copied.
    let x = Value::Array(vec![1.into(), 2.into()]);
    assert_eq!(
        loads(b"\x80\x05]\x94(]\x94(K\x01K\x02eh\x01e."),
        Ok(Value::Array(vec![x.clone(), x]))
    );
}

#[test]
fn every_truncation_is_an_error() {
    let data = Bytes::from(
        (0..24u8)
            .map(|i| i as f64)
            .flat_map(f64::to_le_bytes)
            .collect::<Vec<u8>>(),
    );
    let array = NdArray::from_c_order("<f8", &[4, 6], data).unwrap();
    let value = Value::map_of([
        ("ints", Value::from((0..40i64).collect::<Vec<_>>())),
        ("text", s("héllo")),
        ("big", Value::from(u64::MAX)),
        (
            "nested",
            Value::Array(vec![Value::Nil, 1.5.into(), Value::bin(&b"x"[..])]),
        ),
        (
            "scalar",
            Value::NdArray(Box::new(
                NdArray::from_c_order("<i2", &[], Bytes::from_static(&[7, 0])).unwrap(),
            )),
        ),
        ("array", Value::NdArray(Box::new(array))),
    ]);
    let (whole, buffers) = pickle::dumps(&value).unwrap();
    assert_eq!(
        pickle::loads(&whole, &buffers, &Limits::strict()),
        Ok(value)
    );
    for cut in 0..whole.len() {
        let r = bounded(SMALL + PER_BYTE * whole.len(), || {
            pickle::loads(&whole.slice(..cut), &buffers, &Limits::strict())
        });
        assert!(
            matches!(r, Err(PickleError::Truncated { .. })),
            "cut at {cut}: {r:?}"
        );
    }
    // Without its out-of-band buffer.
    assert!(matches!(
        pickle::loads(&whole, &[], &Limits::strict()),
        Err(PickleError::MissingBuffer { given: 0, .. })
    ));
}

#[test]
fn globals_that_are_not_plain_data_are_named_never_run() {
    let refused = [
        // pickle.dumps(Point(3), protocol=4), Point a class of __main__.
        (
            &b"\x80\x04\x95\x23\x00\x00\x00\x00\x00\x00\x00\x8c\x08__main__\x94\x8c\x05Point\x94\x93\x94)\x81\x94}\x94\x8c\x01x\x94K\x03sb."[..],
            "__main__.Point",
        ),
        // The same at protocol 2.
        (&b"\x80\x02c__main__\nPoint\nq\x00)\x81q\x01}q\x02X\x01\x00\x00\x00xq\x03K\x03sb."[..], "__main__.Point"),
        // os.system("echo hi"), protocol 0.
        (&b"cos\nsystem\n(S'echo hi'\ntR."[..], "os.system"),
        // builtins.eval at protocol 4.
        (
            &b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x011\x85R."[..],
            "builtins.eval",
        ),
    ];
    for (p, name) in refused {
        let err = hostile(p, &Limits::strict()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("pickle global not allowed: {name}")
        );
        let (module, global) = name.split_once('.').unwrap();
        assert_eq!(
            err,
            PickleError::GlobalNotAllowed {
                module: module.into(),
                name: global.into()
            }
        );
    }
    // A long name is cut in the error.
    let mut long = b"\x80\x04\x8c\x01a\x8d".to_vec();
    long.extend_from_slice(&100_000u64.to_le_bytes());
    long.extend(std::iter::repeat_n(b'b', 100_000));
    long.extend_from_slice(b"\x93.");
    let Err(PickleError::GlobalNotAllowed { name, .. }) = loads(&long) else {
        panic!()
    };
    assert_eq!(name.len(), 200);
    // An allowed global is still not a value: a bare set class, a dtype.
    assert!(matches!(
        loads(b"\x80\x04\x8c\x08builtins\x8c\x03set\x93."),
        Err(PickleError::NotPlainData {
            what: "a global",
            ..
        })
    ));
    // pickle.dumps(np.dtype("f8"), protocol=4)
    let dtype = b"\x80\x04\x95\x37\x00\x00\x00\x00\x00\x00\x00\x8c\x05numpy\x94\x8c\x05dtype\x94\x93\x94\x8c\x02f8\x94\x89\x88\x87\x94R\x94(K\x03\x8c\x01<\x94NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t\x94b.";
    assert!(matches!(
        loads(dtype),
        Err(PickleError::NotPlainData {
            what: "a numpy.dtype",
            ..
        })
    ));
    // Allowed globals with arguments their pickles never carry.
    assert!(matches!(
        loads(b"\x80\x04\x8c\x08builtins\x8c\x07complex\x93\x8c\x011\x85R."),
        Err(PickleError::Invalid { .. })
    ));
}

#[test]
fn malformed_machines_are_typed_errors() {
    type Expected = fn(&PickleError) -> bool;
    let cases: [(&[u8], Expected); 12] = [
        (b"", |e| matches!(e, PickleError::Truncated { at: 0 })),
        (b"\x80\x06N.", |e| {
            matches!(e, PickleError::UnsupportedProtocol { protocol: 6 })
        }),
        (b"\x80\x05I1\n.", |e| {
            matches!(
                e,
                PickleError::UnsupportedOpcode {
                    opcode: b'I',
                    at: 2
                }
            )
        }),
        (b"\x80\x05N2.", |e| {
            matches!(e, PickleError::UnsupportedOpcode { opcode: b'2', .. })
        }),
        (b"\x80\x05.", |e| matches!(e, PickleError::Invalid { .. })),
        (b"\x80\x05t.", |e| matches!(e, PickleError::Invalid { .. })),
        (b"\x80\x05K\x01a.", |e| {
            matches!(e, PickleError::Invalid { .. })
        }),
        (b"\x80\x05}(K\x01u.", |e| {
            matches!(e, PickleError::Invalid { .. })
        }),
        (b"\x80\x05K\x01(K\x02a.", |e| {
            matches!(e, PickleError::Invalid { .. })
        }),
        (b"\x80\x05(\x85.", |e| {
            matches!(e, PickleError::Invalid { .. })
        }),
        (b"\x80\x05\x8c\x02\xff\xfe.", |e| {
            matches!(e, PickleError::InvalidUtf8 { at: 2 })
        }),
        (b"\x80\x05K\x01K\x02R.", |e| {
            matches!(e, PickleError::Invalid { .. })
        }),
    ];
    for (p, ok) in cases {
        let r = hostile(p, &Limits::strict());
        assert!(r.as_ref().is_err_and(ok), "{p:02x?}: {r:?}");
    }
}

#[test]
fn batched_scalars_read_as_the_machine_reads_them() {
    // Python pickles a list or dict of scalars as MARK, a thousand scalars
    // (strs memoized, repeats fetched), APPENDS or SETITEMS: the reader takes
    // such a batch in one step. What it reads and refuses is the machine's.
    let list = |items: Vec<Value>| Value::Array(items);
    let ok: [(&[u8], Value); 8] = [
        (
            b"\x80\x05]\x94(K\x01K\x02e.",
            list(vec![1.into(), 2.into()]),
        ),
        (
            b"\x80\x05}\x94(\x8c\x01a\x94G?\xe0\x00\x00\x00\x00\x00\x00\x8c\x01b\x94h\x01u.",
            Value::Map(vec![(s("a"), Value::Float(0.5)), (s("b"), s("a"))]),
        ),
        // A str the batch memoizes, fetched in the same batch.
        (
            b"\x80\x05]\x94(\x8c\x01a\x94h\x01e.",
            list(vec![s("a"), s("a")]),
        ),
        // MEMOIZE over an id a PUT set before: a GET in the batch fetches
        // the batch's value, not the one it replaced.
        (
            b"\x80\x05Nr\x02\x00\x00\x000]\x94(K\x07\x94h\x02e.",
            list(vec![7.into(), 7.into()]),
        ),
        // A frame boundary inside the batch.
        (
            b"\x80\x05]\x94(K\x01\x95\x04\x00\x00\x00\x00\x00\x00\x00K\x02e.",
            list(vec![1.into(), 2.into()]),
        ),
        (b"\x80\x05]\x94(e.", list(vec![])),
        // Fetched after their batch: in the next batch, by the machine.
        (
            b"\x80\x05]\x94(\x8c\x01a\x94e(h\x01e.",
            list(vec![s("a"), s("a")]),
        ),
        (
            b"\x80\x05]\x94(C\x01x\x94\x8c\x01a\x94eh\x01h\x02h\x01\x87a.",
            list(vec![
                Value::Bin(Bytes::from_static(b"x")),
                s("a"),
                list(vec![
                    Value::Bin(Bytes::from_static(b"x")),
                    s("a"),
                    Value::Bin(Bytes::from_static(b"x")),
                ]),
            ]),
        ),
    ];
    for (p, want) in ok {
        assert_eq!(hostile(p, &Limits::strict()), Ok(want), "{p:02x?}");
    }
    let invalid: [&[u8]; 4] = [
        // The list is below the mark before the batch's own.
        b"\x80\x05]\x94((K\x01e.",
        b"\x80\x05}\x94(K\x01u.",
        b"\x80\x05}\x94(K\x01K\x02e.",
        b"\x80\x05]\x94(K\x01K\x02u.",
    ];
    for p in invalid {
        let r = hostile(p, &Limits::strict());
        assert!(
            matches!(r, Err(PickleError::Invalid { .. })),
            "{p:02x?}: {r:?}"
        );
    }
    let mut shallow = Limits::strict();
    shallow.max_depth = 0;
    assert_eq!(
        hostile(b"\x80\x05]\x94(K\x01e.", &shallow),
        Err(PickleError::DepthExceeded { limit: 0 })
    );
    let mut few = Limits::strict();
    few.max_pickle_values = 3;
    assert_eq!(
        hostile(b"\x80\x05]\x94(K\x01K\x02K\x03e.", &few),
        Err(PickleError::TooManyValues { limit: 3 })
    );
}

/// A dict that sets one key twice reads as `pickle.loads` reads it: one
/// entry, the first key in its place, the last value. Keys are equal as
/// Python's `==` says (`1`, `1.0`, `True`; tuples item by item), whichever
/// opcodes build the dict.
#[test]
fn a_key_set_twice_keeps_its_last_value() {
    let map = |entries: Vec<(Value, Value)>| Value::Map(entries);
    let f = |x: f64| Value::Float(x);
    let one_three = map(vec![(1.into(), 3.into())]);
    let cases: [(&[u8], Value); 12] = [
        // EMPTY_DICT, MARK, 1, None, 1, None, SETITEMS (the dict on the stack).
        (b"}(K\x01NK\x01Nu.", map(vec![(1.into(), Value::Nil)])),
        (b"}K\x01K\x02sK\x01K\x03s.", one_three.clone()),
        (b"(K\x01K\x02K\x01K\x03d.", one_three.clone()),
        // Memoized: a batch of scalars, then across two batches.
        (b"\x80\x05}\x94(K\x01K\x02K\x01K\x03u.", one_three.clone()),
        (b"\x80\x05}\x94(K\x01K\x02u(K\x01K\x03u.", one_three),
        // Values that are containers: plain, then memoized ones.
        (
            b"\x80\x05}\x94(K\x01)K\x01K\x05\x85u.",
            map(vec![(1.into(), Value::Array(vec![5.into()]))]),
        ),
        (
            b"\x80\x05}\x94(K\x01]\x94K\x01]\x94K\x07au.",
            map(vec![(1.into(), Value::Array(vec![7.into()]))]),
        ),
        // 1, 1.0 and True are one key; so are False, 0 and -0.0.
        (
            b"}(K\x01\x8c\x01aG?\xf0\x00\x00\x00\x00\x00\x00\x8c\x01b\x88\x8c\x01cK\x02\x8c\x01du.",
            map(vec![(1.into(), s("c")), (2.into(), s("d"))]),
        ),
        (
            b"}(\x89NG\x80\x00\x00\x00\x00\x00\x00\x00K\x01K\x00K\x02u.",
            map(vec![(false.into(), 2.into())]),
        ),
        // 2**53 and 2.0**53 are one key; 2**53 + 1 is another.
        (
            b"}(\x8a\x07\x00\x00\x00\x00\x00\x00\x20K\x01GC@\x00\x00\x00\x00\x00\x00K\x02\x8a\x07\x01\x00\x00\x00\x00\x00\x20K\x03u.",
            map(vec![
                (Value::int(1u64 << 53), 2.into()),
                (Value::int((1u64 << 53) + 1), 3.into()),
            ]),
        ),
        // (1, "a") and (1.0, "a") are one key; (1,) another.
        (
            b"}(K\x01\x8c\x01a\x86K\x01G?\xf0\x00\x00\x00\x00\x00\x00\x8c\x01a\x86K\x02K\x01\x85K\x03u.",
            map(vec![
                (Value::Array(vec![1.into(), s("a")]), 2.into()),
                (Value::Array(vec![1.into()]), 3.into()),
            ]),
        ),
        // Never one key: two NaNs, a str and bytes, 2**64 - 1 and 2.0**64,
        // 0.5 and 0.25.
        (
            b"}(G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x01G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x02\x8c\x01aK\x03C\x01aK\x04\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00K\x05GC\xf0\x00\x00\x00\x00\x00\x00K\x06G?\xe0\x00\x00\x00\x00\x00\x00K\x07G?\xd0\x00\x00\x00\x00\x00\x00K\x08u.",
            map(vec![
                (f(f64::NAN), 1.into()),
                (f(f64::NAN), 2.into()),
                (s("a"), 3.into()),
                (Value::bin(&b"a"[..]), 4.into()),
                (Value::int(u64::MAX), 5.into()),
                (f(2f64.powi(64)), 6.into()),
                (f(0.5), 7.into()),
                (f(0.25), 8.into()),
            ]),
        ),
    ];
    for (p, want) in &cases {
        assert_eq!(hostile(p, &Limits::strict()), Ok(want.clone()), "{p:02x?}");
    }
    // The last case's pairs and eight more keys, none equal to another
    // (tuples whose strs join alike too): through the hash table.
    let (p, Value::Map(mut entries)) = cases[cases.len() - 1].clone() else {
        unreachable!("a dict")
    };
    let mut p = p[..p.len() - 2].to_vec(); // SETITEMS, STOP after them
    for (i, pair) in [["a", "bc"], ["ab", "c"], ["abc", ""], ["", "abc"]]
        .iter()
        .enumerate()
    {
        p.push(b'(');
        for x in pair {
            p.extend_from_slice(&[0x8c, x.len() as u8]);
            p.extend_from_slice(x.as_bytes());
        }
        p.extend_from_slice(&[b't', b'K', i as u8]);
        entries.push((Value::Array(pair.map(s).to_vec()), Value::from(i as u8)));
    }
    for i in 100..104u8 {
        p.extend_from_slice(&[b'K', i, b'N']);
        entries.push((i.into(), Value::Nil));
    }
    p.extend_from_slice(b"u.");
    assert_eq!(hostile(&p, &Limits::strict()), Ok(map(entries)));

    // Larger dicts go through a hash table: 300 pairs over 30 keys, each
    // set as an int and as a float (numbers, then 1-tuples of them), in a
    // memoized dict and in one built by DICT.
    let key = |i: usize| {
        let n = (i % 30) as u8;
        let number = match (i / 30) % 2 {
            0 => vec![b'K', n],
            _ => [&b"G"[..], &f64::from(n).to_be_bytes()].concat(),
        };
        match n < 15 {
            true => number,
            false => [number, vec![0x85]].concat(),
        }
    };
    let body: Vec<u8> = (0..300u16)
        .flat_map(|i| [key(usize::from(i)), [&b"M"[..], &i.to_le_bytes()].concat()].concat())
        .collect();
    // Each key as first set (an int), with the last of its ten values.
    let want = map((0..30u16)
        .map(|n| {
            let k = match n < 15 {
                true => Value::from(n),
                false => Value::Array(vec![Value::from(n)]),
            };
            (k, Value::from(270 + n))
        })
        .collect());
    for (open, close) in [(&b"\x80\x05}\x94("[..], &b"u."[..]), (b"(", b"d.")] {
        let p = [open, &body, close].concat();
        assert_eq!(hostile(&p, &Limits::default()), Ok(want.clone()));
    }
}

// ---- writing ----------------------------------------------------------------------

#[test]
fn the_writer_refuses_what_python_cannot_read() {
    let block = pickle::serialize(&Value::Nil).unwrap();
    for v in [
        block.clone().into_value(),
        Value::ToSerialize(Box::new(Value::Nil)),
        Value::Map(vec![(Value::Map(vec![]), Value::Nil)]),
        Value::Map(vec![(
            Value::Array(vec![Value::NdArray(Box::new(
                NdArray::from_c_order("|u1", &[1], Bytes::from_static(&[1])).unwrap(),
            ))]),
            Value::Nil,
        )]),
    ] {
        assert!(
            matches!(pickle::dumps(&v), Err(EncodeError::Unserializable { .. })),
            "{v:?}"
        );
    }
    let mut deep = Value::Nil;
    for _ in 0..1025 {
        deep = Value::Array(vec![deep]);
    }
    assert_eq!(
        pickle::dumps(&deep).unwrap_err(),
        EncodeError::DepthExceeded { limit: 1024 }
    );
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::int),
        any::<u64>().prop_map(Value::int),
        prop::sample::select(vec![
            0i128,
            255,
            256,
            65_535,
            65_536,
            i32::MIN as i128 - 1,
            i32::MAX as i128 + 1,
            i64::MIN as i128,
            u64::MAX as i128,
        ])
        .prop_map(|i| Value::Int(Integer::try_from_i128(i).unwrap())),
        any::<u64>().prop_map(|b| Value::Float(f64::from_bits(b))),
        "\\PC{0,20}".prop_map(Value::from),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Value::bin),
        (prop::sample::select(vec![
            "<f8", ">i4", "|u1", "|b1", "<c8", "|S3", "<U2", "<M8[ns]"
        ]))
        .prop_flat_map(|dtype| {
            let item = match dtype {
                "<f8" | "<c8" | "<M8[ns]" | "<U2" => 8,
                ">i4" => 4,
                "|S3" => 3,
                _ => 1,
            };
            (Just(dtype), prop::collection::vec(0u64..4, 0..3)).prop_flat_map(move |(d, shape)| {
                let n = shape.iter().product::<u64>() as usize * item;
                (Just(d), Just(shape), prop::collection::vec(any::<u8>(), n))
            })
        })
        .prop_map(|(dtype, shape, data)| {
            let data = match dtype {
                // numpy reads only 0 and 1 as booleans.
                "|b1" => data.iter().map(|b| b & 1).collect(),
                _ => data,
            };
            Value::NdArray(Box::new(
                NdArray::from_c_order(dtype, &shape, Bytes::from(data)).unwrap(),
            ))
        }),
    ]
}

/// A dict key Python can hash: a scalar (a 0-d array is a numpy scalar), or
/// a tuple of them.
fn key() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => scalar().prop_filter("an array is unhashable", |v| match v {
            Value::NdArray(a) => a.shape().is_empty(),
            _ => true,
        }),
        1 => prop::collection::vec(any::<i32>().prop_map(Value::from), 0..3).prop_map(Value::Array),
    ]
}

/// A map of the entries whose keys Python tells apart (a later key equal to
/// an earlier one dropped): a dict read back holds each key once.
fn distinct_keys(entries: Vec<(Value, Value)>) -> Value {
    // Keys Python may hold equal have one form here: numbers by their
    // value, tuples by their items'; NaNs and numpy scalars equal nothing.
    fn form(v: &Value) -> Option<String> {
        Some(match v {
            Value::Nil => "None".into(),
            Value::Bool(b) => u8::from(*b).to_string(),
            Value::Int(i) => i.as_i128().to_string(),
            Value::Float(f) if f.is_nan() => return None,
            Value::Float(f) if *f == 0.0 => "0".into(),
            Value::Float(f) if f.fract() == 0.0 => format!("{f:.0}"),
            Value::Float(f) => format!("{f:e}"),
            Value::Str(s) => format!("{s:?}"),
            Value::Bin(b) => format!("b{b:?}"),
            Value::Array(_) | Value::IntArray(_) => {
                let items = (0..v.array_len()?).map(|i| form(&v.array_item(i)?));
                format!("({})", items.collect::<Option<Vec<_>>>()?.join(","))
            }
            _ => return None,
        })
    }
    let mut seen = std::collections::HashSet::new();
    Value::Map(
        entries
            .into_iter()
            .filter(|(k, _)| form(k).is_none_or(|f| seen.insert(f)))
            .collect(),
    )
}

fn plain() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(any::<i64>(), 30..40).prop_map(Value::from),
            prop::collection::vec((key(), inner), 0..5).prop_map(distinct_keys),
        ]
    })
}

proptest! {
    #[test]
    fn plain_values_round_trip(v in plain()) {
        let (p, buffers) = pickle::dumps(&v).unwrap();
        prop_assert_eq!(pickle::loads(&p, &buffers, &Limits::strict()).unwrap(), v.clone());
        let block = pickle::serialize(&v).unwrap();
        prop_assert_eq!(pickle::deserialize(&block, &DeserializeOptions::default()).unwrap(), v);
    }
}

/// A packed list of bytes (`Value::BinArray`) pickles as the tuple of bytes
/// it stands for, and loads back equal.
#[test]
fn packed_bytes_pickle_as_the_boxed_tuple() {
    for n in [0usize, 1, 3, 40] {
        let items: Vec<Bytes> = (0..n)
            .map(|i| Bytes::from(vec![i as u8; i % 300]))
            .collect();
        let boxed = Value::Array(items.iter().cloned().map(Value::Bin).collect());
        let packed = Value::from(items);
        let (p, _) = pickle::dumps(&packed).unwrap();
        assert_eq!(p, pickle::dumps(&boxed).unwrap().0, "n = {n}");
        assert_eq!(loads(&p).unwrap(), packed);
    }
}

/// Found by the `pickle_loads` fuzz target: a dtype whose byte order does
/// not fit its item size (`|` for a four-byte int, a state numpy never
/// writes) was read as `|i4` and written back as `<i4`. Now a typed error.
#[test]
fn a_dtype_byte_order_numpy_never_writes_is_refused() {
    let hex = [
        "8005957d000000000000007d94288c01768585858585858585858585948c03617272948c136e756d",
        "70792e5f636f72652e6e756d65726963948c0b5f66726f6d627566665d5d5d5d8c016b948c017694",
        "8c03617272948c136e756d70792e5f636f72652e6e756d65726963948c0b5f66726f6d6275666665",
        "7294939428978c056e756d7079948c0564747970659493948c02693494898887945294284b038c01",
        "7c944e4e4e4affffffff4affffffff4b007494624b0285948c01439474945294752e",
    ]
    .concat();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let input = Bytes::from(bytes);
    // The fuzz target's out-of-band buffers: slices of the input.
    let buffers: Vec<Bytes> = [8, 16, 24, 64].map(|n| input.slice(..n)).to_vec();
    let got = pickle::loads(&input, &buffers, &Limits::dask_compat());
    assert!(
        matches!(got, Err(PickleError::InvalidArray { .. })),
        "{got:?}"
    );
}
