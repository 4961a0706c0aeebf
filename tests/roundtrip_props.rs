//! Property tests: value round trips through the message layer and the
//! envelope, pass-through stability, zero-copy block frames, the prefix
//! property, mutation robustness, and the ops `peek_ops` reads from frame 0
//! alone against those of the decoded message.

mod common;

use bytes::Bytes;
use framewire::envelope::{parse_prelude, PreludeStatus};
use framewire::message::{
    decode, decode_detailed, encode, peek_ops, BlockKind, Ops, NUM_SUB_FRAMES,
};
use framewire::EnvelopeError;
use framewire::{Block, Envelope, Header, Integer, Limits, Value};
use proptest::prelude::*;
use proptest::sample::select;

// ---- strategies -------------------------------------------------------------

/// Lengths where msgpack changes form (fixstr/str8/str16/str32, bin8/16/32).
const BOUNDARIES: &[usize] = &[0, 1, 15, 16, 31, 32, 255, 256, 65_535, 65_536];

const INT_EDGES: &[i128] = &[
    0,
    1,
    -1,
    -32,
    -33,
    127,
    128,
    255,
    256,
    -128,
    -129,
    32_767,
    32_768,
    -32_768,
    -32_769,
    65_535,
    65_536,
    2_147_483_647,
    2_147_483_648,
    -2_147_483_648,
    -2_147_483_649,
    4_294_967_295,
    4_294_967_296,
    i64::MIN as i128,
    i64::MAX as i128,
    u64::MAX as i128,
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "\\PC{0,40}",
        // Exactly n bytes, sometimes ending in a 2-byte character.
        1 => (select(BOUNDARIES), any::<bool>()).prop_map(|(n, multi)| {
            if multi && n >= 2 {
                let mut s = "x".repeat(n - 2);
                s.push('é');
                s
            } else {
                "y".repeat(n)
            }
        }),
    ]
}

fn bin() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        12 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from),
        1 => (select(BOUNDARIES), any::<u8>()).prop_map(|(n, b)| Bytes::from(vec![b; n])),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Nil),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => any::<i64>().prop_map(Value::int),
        2 => any::<u64>().prop_map(Value::int),
        2 => select(INT_EDGES).prop_map(|i| Value::Int(Integer::try_from_i128(i).unwrap())),
        2 => any::<u64>().prop_map(|b| Value::Float(f64::from_bits(b))),
        1 => select(vec![
            f64::NAN,
            -f64::NAN,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            f64::MAX,
            1.5,
        ])
        .prop_map(Value::Float),
        3 => text().prop_map(Value::from),
        2 => bin().prop_map(Value::Bin),
    ]
}

fn is_reserved(k: &Value) -> bool {
    matches!(k.as_str(), Some("__Serialized__") | Some("__Pickled__"))
}

/// Map keys: any scalar, sometimes a small array; never a reserved string.
fn key() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => scalar(),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(Value::Array),
    ]
    .prop_filter("reserved key", |k| !is_reserved(k))
}

/// msgpack data without out-of-band leaves (what a sub-header may hold).
fn plain() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5).prop_map(Value::Map),
        ]
    })
}

fn frame() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        3 => Just(Bytes::new()),
        8 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Bytes::from),
        1 => prop::collection::vec(any::<u8>(), 1000..3000).prop_map(Bytes::from),
    ]
}

/// How a generated header treats `num-sub-frames`.
#[derive(Clone, Debug)]
enum Nsf {
    Absent,
    /// Present with the right count, at this position.
    Correct(usize),
    /// Present with this wrong value, at this position.
    Wrong(usize, Value),
}

fn block() -> impl Strategy<Value = Block> {
    let nsf = prop_oneof![
        1 => Just(Nsf::Absent),
        2 => any::<usize>().prop_map(Nsf::Correct),
        1 => (any::<usize>(), scalar()).prop_map(|(i, v)| Nsf::Wrong(i, v)),
    ];
    let entries = prop::collection::vec(
        (
            text().prop_filter("reserved", |s| s != NUM_SUB_FRAMES),
            plain(),
        ),
        0..5,
    );
    (entries, nsf, prop::collection::vec(frame(), 0..4)).prop_map(|(entries, nsf, frames)| {
        let mut entries: Vec<(Value, Value)> = entries
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect();
        entries.retain(|(k, _)| !is_reserved(k));
        let slot = |i: usize, len: usize| i % (len + 1);
        match nsf {
            Nsf::Absent => {}
            Nsf::Correct(i) => {
                let at = slot(i, entries.len());
                entries.insert(at, (Value::str(NUM_SUB_FRAMES), Value::from(frames.len())));
            }
            Nsf::Wrong(i, v) => {
                let at = slot(i, entries.len());
                entries.insert(at, (Value::str(NUM_SUB_FRAMES), v));
            }
        }
        Block::new(Header::new(Value::Map(entries)), frames)
    })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => scalar(),
        1 => block().prop_map(|b| Value::Serialized(Box::new(b))),
        1 => block().prop_map(|b| Value::Pickled(Box::new(b))),
    ]
}

/// Any value frame 0 can carry, with out-of-band leaves, depth-limited.
fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6).prop_map(Value::Map),
        ]
    })
}

/// A message's ops: an op map (its op any scalar, sometimes a str), a
/// batch of them beside other values, a map with the handshake's key, or
/// any value.
fn message() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        3 => select(vec!["compute-task", "op", "pickle-protocol", ""]).prop_map(Value::str),
        1 => leaf(),
    ];
    let entry_key = prop_oneof![
        2 => select(vec!["op", "pickle-protocol", "reply"]).prop_map(Value::str),
        3 => key(),
    ];
    let op_map = (op, prop::collection::vec((entry_key, value()), 0..4))
        .prop_map(|(op, rest)| {
            let mut m = vec![(Value::str("op"), op)];
            m.extend(rest);
            Value::Map(m)
        })
        .boxed();
    let keyed = prop::collection::vec(
        (
            prop_oneof![
                2 => select(vec!["op", "pickle-protocol"]).prop_map(Value::str),
                3 => key(),
            ],
            value(),
        ),
        0..5,
    )
    .prop_map(Value::Map)
    .boxed();
    let item = prop_oneof![3 => op_map.clone(), 1 => keyed.clone(), 1 => value()];
    prop_oneof![
        2 => op_map,
        2 => keyed,
        2 => prop::collection::vec(item, 0..6).prop_map(Value::Array),
        1 => value(),
    ]
}

// ---- oracles ------------------------------------------------------------------

/// What `peek_ops` must say of a message, from the message decoded.
fn ops_of(v: &Value) -> Ops<'_> {
    fn op(m: &Value) -> Option<&str> {
        match m {
            Value::Map(_) => m.get("op").and_then(Value::as_str),
            _ => None,
        }
    }
    match v {
        Value::Map(_) if v.get("op").is_none() && v.get("pickle-protocol").is_some() => {
            Ops::Handshake
        }
        Value::Map(_) => op(v).map_or(Ops::Other, Ops::Op),
        Value::Array(items) => Ops::Batch(items.iter().map(op).collect()),
        _ => Ops::Other,
    }
}

fn limits() -> Limits {
    Limits::dask_compat()
}

/// The value as it comes back: every block's header carries
/// `num-sub-frames` = its frame count, kept in place if the key was there,
/// appended otherwise (Dask's dict assignment).
fn normalize(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, v)| (normalize(k), normalize(v)))
                .collect(),
        ),
        Value::Serialized(b) => Value::Serialized(Box::new(normalize_block(b))),
        Value::Pickled(b) => Value::Pickled(Box::new(normalize_block(b))),
        other => other.clone(),
    }
}

fn normalize_block(b: &Block) -> Block {
    let n = b.frames().len();
    let mut entries = b.header().map().as_map().expect("header map").to_vec();
    match entries
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some(NUM_SUB_FRAMES))
    {
        Some((_, v)) => *v = Value::from(n),
        None => entries.push((Value::str(NUM_SUB_FRAMES), Value::from(n))),
    }
    Block::new(Header::new(Value::Map(entries)), b.frames().iter().cloned())
}

/// The blocks of a value in the order `dumps` meets them (depth first, map
/// keys before values).
fn blocks_of<'a>(v: &'a Value, out: &mut Vec<(BlockKind, &'a Block)>) {
    match v {
        Value::Array(items) => items.iter().for_each(|x| blocks_of(x, out)),
        Value::Map(entries) => entries.iter().for_each(|(k, v)| {
            blocks_of(k, out);
            blocks_of(v, out);
        }),
        Value::Serialized(b) => out.push((BlockKind::Serialized, b)),
        Value::Pickled(b) => out.push((BlockKind::Pickled, b)),
        _ => {}
    }
}

fn is_truncated(e: &EnvelopeError, prefix_len: usize, wire_len: usize) -> bool {
    match *e {
        EnvelopeError::Truncated {
            offset,
            needed,
            got,
        } => {
            offset == prefix_len as u64
                && got == prefix_len as u64
                && needed > prefix_len as u64
                && needed <= wire_len as u64
        }
        _ => false,
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---- properties -------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// decode(encode(v)) == v, headers gaining `num-sub-frames`.
    #[test]
    fn loads_dumps_roundtrip(v in value()) {
        let frames = encode(&v).unwrap();
        let back = decode(&frames, &limits()).unwrap();
        prop_assert_eq!(back, normalize(&v));
    }

    /// encode(decode(encode(v))) == encode(v), byte for byte; and once more.
    #[test]
    fn reencoding_is_byte_stable(v in value()) {
        let frames = encode(&v).unwrap();
        let again = encode(&decode(&frames, &limits()).unwrap()).unwrap();
        prop_assert_eq!(&again, &frames);
        // Decoded sub-headers are re-emitted as the very same bytes.
        for (a, b) in again.iter().zip(&frames).skip(1) {
            prop_assert!(a.is_empty() || a.as_ptr() == b.as_ptr());
        }
        let normalized = encode(&normalize(&v)).unwrap();
        prop_assert_eq!(&normalized, &frames);
    }

    /// Every block's payload frames are separate frames, byte-identical (and,
    /// when encoding, the very same memory); decoding hands out slices of the
    /// frame list.
    #[test]
    fn block_frames_travel_separately_and_zero_copy(v in value()) {
        let frames = encode(&v).unwrap();
        let mut expected = Vec::new();
        blocks_of(&v, &mut expected);
        let loaded = decode_detailed(&frames, &limits()).unwrap();
        prop_assert!(loaded.orphans.is_empty());
        prop_assert_eq!(loaded.blocks.len(), expected.len());
        let mut next = 1;
        for (r, (kind, block)) in loaded.blocks.iter().zip(&expected) {
            prop_assert_eq!(r.kind, *kind);
            prop_assert_eq!(r.offset, next);
            prop_assert_eq!(r.num_sub_frames, block.frames().len());
            for (j, f) in block.frames().iter().enumerate() {
                let out = &frames[r.offset + 1 + j];
                prop_assert_eq!(out, f);
                prop_assert!(f.is_empty() || out.as_ptr() == f.as_ptr(), "payload frame copied");
            }
            next = r.offset + 1 + r.num_sub_frames;
        }
        prop_assert_eq!(next, frames.len());
        let mut got = Vec::new();
        blocks_of(&loaded.value, &mut got);
        for (r, (_, block)) in loaded.blocks.iter().zip(&got) {
            let header_frame = &frames[r.offset];
            prop_assert_eq!(block.header().raw().map(|b| b.as_ptr()), Some(header_frame.as_ptr()));
            for (j, f) in block.frames().iter().enumerate() {
                let src = &frames[r.offset + 1 + j];
                prop_assert!(f.is_empty() || f.as_ptr() == src.as_ptr(), "decoded frame copied");
            }
        }
    }

    /// Envelope::decode(with_first_read_frames(frames, k)) for every k.
    #[test]
    fn envelope_roundtrip_for_every_first_read(v in value()) {
        let frames = encode(&v).unwrap();
        let n = frames.len();
        for k in 0..=n {
            let env = Envelope::with_first_read_frames(frames.clone(), k).unwrap();
            let wire = env.to_bytes();
            prop_assert_eq!(wire.len() as u64, env.wire_len());
            let (back, used) = Envelope::decode(&wire, &limits()).unwrap();
            prop_assert_eq!(used, wire.len());
            prop_assert_eq!(back.frames(), &frames[..]);
            prop_assert_eq!(back.first_read(), env.first_read());
            let prelude_len = 8 + 8 * n as u64;
            let first: u64 = frames[..k].iter().map(|f| f.len() as u64).sum();
            prop_assert_eq!(back.first_read(), prelude_len + first);
            // frames_in_first_read: the frames that start before N; the ones
            // of the first k it leaves out can only be empty.
            let PreludeStatus::Complete(p) = parse_prelude(&wire, &limits()).unwrap() else {
                panic!("complete wire gives Need")
            };
            let m = p.frames_in_first_read();
            prop_assert!(m <= k);
            prop_assert!(frames[m..k].iter().all(|f| f.is_empty()));
            prop_assert_eq!(p.lengths(), &frames.iter().map(|f| f.len() as u64).collect::<Vec<_>>()[..]);
            // Frames are slices of the wire.
            let range = wire.as_ptr_range();
            for f in back.frames().iter().filter(|f| !f.is_empty()) {
                prop_assert!(range.contains(&f.as_ptr()) && f.as_ptr_range().end <= range.end);
            }
        }
    }

    /// Every strict prefix of a valid message: `Truncated` from
    /// Envelope::decode, `Need`/`Complete` from parse_prelude; never another
    /// error, never a message.
    #[test]
    fn every_strict_prefix_is_truncated(v in value(), k_seed in any::<usize>()) {
        let frames = encode(&v).unwrap();
        let k = k_seed % (frames.len() + 1);
        let wire = Envelope::with_first_read_frames(frames, k).unwrap().to_bytes();
        let cuts: Vec<usize> = if wire.len() <= 4096 {
            (0..wire.len()).collect()
        } else {
            let mut c: Vec<usize> = (0..2048).chain(wire.len() - 1024..wire.len()).collect();
            c.extend((0..256).map(|i| (k_seed.wrapping_mul(31).wrapping_add(i * 7919)) % wire.len()));
            c
        };
        for cut in cuts {
            let prefix = wire.slice(..cut);
            match Envelope::decode(&prefix, &limits()) {
                Ok(_) => prop_assert!(false, "prefix of {} bytes decoded as a message", cut),
                Err(e) => prop_assert!(is_truncated(&e, cut, wire.len()), "prefix {}: {:?}", cut, e),
            }
            match parse_prelude(&prefix, &limits()) {
                Ok(PreludeStatus::Need(n)) => prop_assert!(n > cut && n <= wire.len()),
                Ok(PreludeStatus::Complete(p)) => prop_assert_eq!(p.wire_len(), wire.len() as u64),
                Err(e) => prop_assert!(false, "prefix {}: parse_prelude error {:?}", cut, e),
            }
        }
    }

    /// Messages back to back on a stream: each decode uses exactly one message
    /// and leaves the rest.
    #[test]
    fn concatenated_messages_decode_in_order(vs in prop::collection::vec(value(), 1..4), ks in prop::collection::vec(any::<usize>(), 4)) {
        let mut stream = Vec::new();
        let mut all = Vec::new();
        for (v, k) in vs.iter().zip(&ks) {
            let frames = encode(v).unwrap();
            let k = k % (frames.len() + 1);
            stream.extend_from_slice(&Envelope::with_first_read_frames(frames.clone(), k).unwrap().to_bytes());
            all.push(frames);
        }
        let mut rest = Bytes::from(stream);
        for frames in &all {
            let (env, used) = Envelope::decode(&rest, &limits()).unwrap();
            prop_assert_eq!(env.frames(), &frames[..]);
            rest = rest.slice(used..);
        }
        prop_assert!(rest.is_empty());
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// A random byte edit of a valid message: Ok or a typed error at every
    /// layer, never a panic. An edit past the prelude never breaks the
    /// envelope.
    #[test]
    fn mutated_message_never_panics(
        v in value(),
        k_seed in any::<usize>(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let frames = encode(&v).unwrap();
        let k = k_seed % (frames.len() + 1);
        let env = Envelope::with_first_read_frames(frames.clone(), k).unwrap();
        let prelude_len = env.prelude().len();
        let mut wire = env.to_bytes().to_vec();
        let mut touched_prelude = false;
        for (pos, byte) in &edits {
            let pos = pos % wire.len();
            touched_prelude |= pos < prelude_len;
            wire[pos] = *byte;
        }
        let wire = Bytes::from(wire);
        for limits in [Limits::strict(), Limits::dask_compat()] {
            match Envelope::decode(&wire, &limits) {
                Ok((env2, used)) => {
                    prop_assert!(used <= wire.len());
                    let _ = decode_detailed(env2.frames(), &limits);
                    if let Ok(value) = decode(env2.frames(), &limits) {
                        // What decodes re-encodes.
                        let again = encode(&value).unwrap();
                        let _ = decode(&again, &limits).unwrap();
                    }
                }
                Err(e) => {
                    let _ = e.to_string();
                    prop_assert!(touched_prelude, "edit past the prelude broke the envelope: {:?}", e);
                }
            }
        }
        // The frames alone, edited in place, through the message layer.
        if !touched_prelude {
            let (env2, _) = Envelope::decode(&wire, &limits()).unwrap();
            prop_assert_eq!(env2.frames().len(), frames.len());
        }
    }

    /// Random bytes as a whole message, and as frame 0.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let b = Bytes::from(bytes);
        for limits in [Limits::strict(), Limits::dask_compat()] {
            let _ = Envelope::decode(&b, &limits);
            let _ = parse_prelude(&b, &limits);
            if let Ok(v) = decode(std::slice::from_ref(&b), &limits) {
                prop_assert_eq!(decode(&encode(&v).unwrap(), &limits).unwrap(), v);
            }
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// Frame 0 alone gives the ops the whole message decoded gives, for
    /// messages of every shape (placeholders and their blocks included);
    /// every strict prefix of frame 0, and frame 0 with a byte after it,
    /// gives none.
    #[test]
    fn peek_ops_reads_the_ops_of_the_decoded_message(v in message(), cut in any::<usize>()) {
        let frames = encode(&v).unwrap();
        let decoded = decode(&frames, &limits()).unwrap();
        let frame0 = &frames[0];
        prop_assert_eq!(peek_ops(frame0), Some(ops_of(&decoded)));
        prop_assert_eq!(peek_ops(&frame0[..cut % frame0.len()]), None);
        let mut trailing = frame0.to_vec();
        trailing.push(0);
        prop_assert_eq!(peek_ops(&trailing), None);
    }

    /// Random bytes as frame 0: an answer or `None`, never a panic; an
    /// answer only for bytes that are one msgpack value.
    #[test]
    fn peek_ops_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Some(ops) = peek_ops(&bytes) {
            if let Ok(v) = decode(&[Bytes::from(bytes.clone())], &limits()) {
                prop_assert_eq!(ops, ops_of(&v));
            }
        }
    }
}

// ---- deterministic edges -----------------------------------------------------------

/// `peek_ops` on forms Python's msgpack does not write, and on bytes that
/// are not one msgpack value.
#[test]
fn peek_ops_steps_over_every_form_and_refuses_what_is_not_msgpack() {
    // float 32, ext 8, fixext 16, a str that is not UTF-8, then the op.
    let exotic = b"\x86\xa1a\xca\0\0\0\0\xa1b\xc7\x02\x05xy\xa1c\xd8\x01\
                   0123456789abcdef\xa1d\xa2\xff\xfe\x07\x08\xa2op\xa1x";
    assert_eq!(peek_ops(exotic), Some(Ops::Op("x")));
    assert_eq!(peek_ops(&exotic[..exotic.len() - 1]), None);
    // The byte msgpack never uses; nothing at all; a byte after the value.
    assert_eq!(peek_ops(b"\xc1"), None);
    assert_eq!(peek_ops(b""), None);
    assert_eq!(peek_ops(b"\x81\xa2op\xa4ping\x00"), None);
    // A declared count far beyond the frame ends at the frame's end.
    assert_eq!(peek_ops(b"\xdf\xff\xff\xff\xff\xa2op"), None);
    assert_eq!(peek_ops(b"\xdd\xff\xff\xff\xff\x80"), None);
    // An op that is not a str, a handshake that has an op key, a reply.
    assert_eq!(peek_ops(b"\x81\xa2op\x05"), Some(Ops::Other));
    let hs_with_op = b"\x82\xa2op\xc0\xafpickle-protocol\x05";
    assert_eq!(peek_ops(hs_with_op), Some(Ops::Other));
    assert_eq!(peek_ops(b"\xa2OK"), Some(Ops::Other));
    assert_eq!(peek_ops(b"\x90"), Some(Ops::Batch(vec![])));
}

/// msgpack-python's forms at the length boundaries (frame 0's first bytes).
#[test]
fn str_and_bin_forms_at_length_boundaries() {
    let cases: &[(usize, &[u8], &[u8])] = &[
        (0, b"\xa0", b"\xc4\x00"),
        (31, b"\xbf", b"\xc4\x1f"),
        (32, b"\xd9\x20", b"\xc4\x20"),
        (255, b"\xd9\xff", b"\xc4\xff"),
        (256, b"\xda\x01\x00", b"\xc5\x01\x00"),
        (65_535, b"\xda\xff\xff", b"\xc5\xff\xff"),
        (65_536, b"\xdb\x00\x01\x00\x00", b"\xc6\x00\x01\x00\x00"),
    ];
    for &(n, str_head, bin_head) in cases {
        let s = Value::from("s".repeat(n));
        let f = encode(&s).unwrap();
        assert_eq!(&f[0][..str_head.len()], str_head, "str of {n}");
        assert_eq!(f[0].len(), str_head.len() + n);
        assert_eq!(decode(&f, &limits()).unwrap(), s);
        let b = Value::bin(vec![7u8; n]);
        let f = encode(&b).unwrap();
        assert_eq!(&f[0][..bin_head.len()], bin_head, "bin of {n}");
        assert_eq!(decode(&f, &limits()).unwrap(), b);
    }
}

#[test]
fn integer_and_float_forms() {
    let cases: &[(i128, &[u8])] = &[
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\xcc\x80"),
        (256, b"\xcd\x01\x00"),
        (65_536, b"\xce\x00\x01\x00\x00"),
        (u64::MAX as i128, b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
        (-1, b"\xff"),
        (-32, b"\xe0"),
        (-33, b"\xd0\xdf"),
        (-129, b"\xd1\xff\x7f"),
        (-32_769, b"\xd2\xff\xff\x7f\xff"),
        (i64::MIN as i128, b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00"),
    ];
    for &(i, bytes) in cases {
        let v = Value::Int(Integer::try_from_i128(i).unwrap());
        let f = encode(&v).unwrap();
        assert_eq!(&f[0][..], bytes, "{i}");
        assert_eq!(decode(&f, &limits()).unwrap(), v);
    }
    for x in [
        0.0,
        -0.0,
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::INFINITY,
        1.5,
    ] {
        let f = encode(&Value::Float(x)).unwrap();
        let mut want = vec![0xcb];
        want.extend_from_slice(&x.to_bits().to_be_bytes());
        assert_eq!(&f[0][..], &want[..]);
        let Value::Float(y) = decode(&f, &limits()).unwrap() else {
            panic!()
        };
        assert_eq!(y.to_bits(), x.to_bits());
    }
}

/// A block whose header already has a `num-sub-frames` keeps it in place;
/// one without gets it appended.
#[test]
fn num_sub_frames_kept_in_place_or_appended() {
    let frames = [Bytes::from_static(b"a"), Bytes::new()];
    let header = Value::Map(vec![
        (Value::str(NUM_SUB_FRAMES), Value::int(99u8)),
        (Value::str("x"), Value::Nil),
    ]);
    let v = Value::Serialized(Box::new(Block::new(Header::new(header), frames.clone())));
    let out = encode(&v).unwrap();
    assert_eq!(&out[1][..], b"\x82\xaenum-sub-frames\x02\xa1x\xc0");
    let header = Value::Map(vec![(Value::str("x"), Value::Nil)]);
    let v = Value::Pickled(Box::new(Block::new(Header::new(header), frames.clone())));
    let out = encode(&v).unwrap();
    assert_eq!(&out[0][..], b"\x81\xab__Pickled__\x01");
    assert_eq!(&out[1][..], b"\x82\xa1x\xc0\xaenum-sub-frames\x02");
    assert_eq!(&out[2..], &frames[..]);
}
