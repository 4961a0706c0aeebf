//! Agreement tests across the msgpack paths: `head` reads every marker as
//! rmp does; `skim`, `decode_packed` and `RawMap` accept and refuse exactly
//! what `decode` does; `Static` builds the bytes the encoder writes.

use bytes::{Bytes, BytesMut};

use super::decode::plain_map;
use super::encode::{len_prefix_width, put_bin, Plain};
use super::head::{head, is_fixpos, Head};
use super::raw::ArrayItems;
use super::reader::CHECKED;
use super::*;
use crate::error::EncodeError;
use crate::limits::Limits;
use crate::value::{Integer, Value};

/// `skim` must accept and refuse exactly what `decode` does, with the
/// same error, and find the same `num-sub-frames`.
fn agree(buf: &[u8], limits: &Limits) {
    let buf = Bytes::copy_from_slice(buf);
    let decoded = decode(&buf, 3, limits, &mut plain_map);
    let skimmed = skim(&buf, 3, limits, "num-sub-frames");
    match (&decoded, &skimmed) {
        (Ok(v), Ok(s)) => {
            assert_eq!(s.is_map, v.as_map().is_some(), "{buf:02x?}");
            assert_eq!(
                s.int_at_key,
                v.get("num-sub-frames").and_then(Value::as_int),
                "{buf:02x?}"
            );
        }
        (Err(d), Err(s)) => assert_eq!(d, s, "{buf:02x?}"),
        _ => panic!(
            "decode {decoded:?} but skim {:?} for {buf:02x?}",
            skimmed.is_ok()
        ),
    }
}

#[test]
fn skim_agrees_with_decode_on_mutated_sub_headers() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/captures");
    let mut seeds: Vec<Vec<u8>> = vec![
        b"\x82\xaenum-sub-frames\x01\xaenum-sub-frames\x02".to_vec(),
        b"\x81\xaenum-sub-frames\xc3".to_vec(),
        b"\x81\x01\xaenum-sub-frames".to_vec(),
        b"\x91\x81\xaenum-sub-frames\x01".to_vec(),
        // Flat maps (skim's one-pass path), and what it leaves to the walk.
        b"\x83\xaenum-sub-frames\x00\xabcompression\x90\xa4name\xa3abc".to_vec(),
        b"\x83\xa1k\xc4\x02ab\xaenum-sub-frames\xcd\x01\x00\xa1m\x80".to_vec(),
        b"\x82\xa1f\xcb\x3f\xf0\0\0\0\0\0\0\xa1g\xca\x3f\x80\0\0".to_vec(),
        b"\x82\xa2\xc3\xa9\x01\xa1s\xa2\xc3\xa9".to_vec(),
    ];
    for case in [
        "task_with_numpy",
        "sharded_4096",
        "msgpack_family",
        "topickle",
    ] {
        seeds.push(std::fs::read(format!("{dir}/{case}/frame_001.bin")).unwrap());
    }
    let mut tight = Limits::strict();
    tight.max_depth = 2;
    tight.max_msgpack_items = 12;
    if cfg!(miri) {
        // Every seed, but only the small ones: the captures' headers
        // times every mutation take hours under Miri.
        seeds.retain(|s| s.len() <= 64);
    }
    for seed in &seeds {
        for limits in [Limits::strict(), tight.clone()] {
            agree(seed, &limits);
            for cut in 0..seed.len() {
                agree(&seed[..cut], &limits);
            }
            for i in 0..seed.len() {
                for byte in [0x00, 0x7f, 0x80, 0xc1, 0xd9, 0xdc, 0xde, 0xff] {
                    let mut m = seed.clone();
                    m[i] = byte;
                    agree(&m, &limits);
                }
            }
        }
    }
}

/// `RawMap::nils`: the length of an array of nils only, from its bytes.
#[test]
fn nils_reads_an_array_of_nils_only() {
    let nils = |n: usize| Value::Array(vec![Value::Nil; n]);
    for (value, want) in [
        (nils(0), Some(0)),
        (nils(3), Some(3)),
        (nils(16), Some(16)),         // array 16
        (nils(70_000), Some(70_000)), // array 32
        (Value::Array(vec![Value::Nil, Value::from(false)]), None),
        (Value::Array(vec![Value::str("lz4"), Value::Nil]), None),
        (Value::Nil, None),
    ] {
        let raw = encode(
            &Value::map_of([("c", value.clone()), ("d", Value::Nil)]),
            &mut Plain,
        )
        .unwrap();
        let (map, _) = RawMap::read(&raw, 0).unwrap().unwrap();
        assert_eq!(map.nils("c"), want, "{value:?}");
        assert_eq!(map.nils("missing"), None);
    }
}

/// `RawMap::fixints`: the items of an array of positive fixints only, as
/// its bytes.
#[test]
fn fixints_reads_an_array_of_small_non_negative_ints_only() {
    let ints = |xs: &[i64]| Value::Array(xs.iter().map(|&x| Value::from(x)).collect());
    let many: Vec<i64> = (0..70_000).map(|i| i % 128).collect();
    let many_bytes: Vec<u8> = many.iter().map(|&x| x as u8).collect();
    for (value, want) in [
        (ints(&[]), Some(vec![])),
        (ints(&[1, 1, 1]), Some(vec![1, 1, 1])),
        (ints(&[0, 127, 5]), Some(vec![0, 127, 5])),
        (ints(&many), Some(many_bytes)), // array 32
        (ints(&[1, 128]), None),         // a uint8
        (ints(&[1, -1]), None),          // a negative fixint
        (Value::Array(vec![Value::from(1), Value::Nil]), None),
        (Value::Nil, None),
    ] {
        let raw = encode(
            &Value::map_of([("c", value.clone()), ("d", Value::Nil)]),
            &mut Plain,
        )
        .unwrap();
        let (map, _) = RawMap::read(&raw, 0).unwrap().unwrap();
        assert_eq!(map.fixints("c").map(<[u8]>::to_vec), want, "{value:?}");
        assert_eq!(map.fixints("missing"), None);
    }
}

/// Arrays of byte-for-byte equal containers (a collection header's
/// sub-headers), which `skim` steps over once it has checked the first: the
/// same answers and errors as `decode`, with every item budget (one that
/// runs out inside a copy included) and every depth limit, and under
/// mutations that make one copy differ.
#[test]
fn skim_agrees_with_decode_on_repeated_containers() {
    let sub = b"\x82\xaaserializer\xa1x\xa1a\x92\x01\xa2\xc3\xa9".to_vec(); // {"serializer": "x", "a": [1, "\xc3\xa9"]}
    let mut header = b"\x82\xabsub-headers\x94".to_vec();
    (0..4).for_each(|_| header.extend_from_slice(&sub));
    header.extend_from_slice(b"\xaenum-sub-frames\x04");
    let mut nested = b"\x92\x92".to_vec();
    nested.extend_from_slice(&sub);
    nested.extend_from_slice(&sub);
    nested.extend_from_slice(b"\x92");
    nested.extend_from_slice(&sub);
    nested.extend_from_slice(&sub);
    for seed in [header, nested] {
        for items in 1..=40 {
            for depth in 1..=4 {
                let mut limits = Limits::strict();
                limits.max_msgpack_items = items;
                limits.max_depth = depth;
                agree(&seed, &limits);
            }
        }
        let mut tight = Limits::strict();
        tight.max_msgpack_items = 30;
        for limits in [Limits::strict(), tight] {
            for i in 0..seed.len() {
                for byte in [0x00, 0x7f, 0x80, 0x91, 0xa1, 0xc1, 0xff] {
                    let mut m = seed.clone();
                    m[i] = byte;
                    agree(&m, &limits);
                }
            }
        }
    }
}

/// `decode_packed` must accept and refuse exactly what `decode` does
/// (same error), give an equal value, and pack exactly the arrays of at
/// least `pack_min` items that are all integers in `i64`'s range.
fn packed_agrees(buf: &[u8], limits: &Limits, pack_min: usize) {
    let buf = Bytes::copy_from_slice(buf);
    let plain = decode(&buf, 0, limits, &mut plain_map);
    let packed = decode_packed(&buf, 0, limits, pack_min);
    match (&plain, &packed) {
        (Ok(p), Ok(q)) => {
            assert_eq!(p, q, "{buf:02x?}");
            assert_packed_exactly(p, q, pack_min);
        }
        (Err(p), Err(q)) => assert_eq!(p, q, "{buf:02x?}"),
        _ => panic!("decode {plain:?} but decode_packed {packed:?} for {buf:02x?}"),
    }
}

fn assert_packed_exactly(plain: &Value, packed: &Value, pack_min: usize) {
    match (plain, packed) {
        (Value::Array(a), Value::IntArray(p)) => {
            assert!(a.len() >= pack_min && a.len() == p.len());
        }
        (Value::Array(a), Value::Array(b)) => {
            let all_i64 = a
                .iter()
                .all(|v| v.as_int().and_then(Integer::as_i64).is_some());
            assert!(a.len() < pack_min || !all_i64, "not packed: {a:?}");
            for (x, y) in a.iter().zip(b) {
                assert_packed_exactly(x, y, pack_min);
            }
        }
        (Value::Map(a), Value::Map(b)) => {
            for ((k, x), (l, y)) in a.iter().zip(b) {
                assert_packed_exactly(k, l, pack_min);
                assert_packed_exactly(x, y, pack_min);
            }
        }
        (p, q) => assert_eq!(p, q),
    }
}

#[test]
fn packed_decoding_covers_every_int_form_and_agrees_with_decode() {
    // Every integer form at its edges, in i64's range.
    let ints: Vec<i64> = vec![
        0,
        1,
        127,
        128,
        255,
        256,
        65535,
        65536,
        1 << 32,
        i64::MAX,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32768,
        -32769,
        -(1 << 31) - 1,
        i64::MIN,
    ];
    let mut buf = BytesMut::new();
    encode_into(&Value::from(ints.clone()), &mut buf, &mut Plain).unwrap();
    let buf = buf.freeze();
    let v = decode_packed(&buf, 0, &Limits::strict(), 4).unwrap();
    assert_eq!(v.as_int_array(), Some(&ints[..]));
    assert_eq!(
        encode(&v, &mut Plain).unwrap(),
        buf,
        "IntArray encodes as the Array does"
    );
    let boxed = Value::Array(ints.iter().map(|&x| Value::from(x)).collect());
    assert_eq!(encode(&boxed, &mut Plain).unwrap(), buf);
    // Below pack_min: a plain array.
    assert!(decode_packed(&buf, 0, &Limits::strict(), 20)
        .unwrap()
        .as_array()
        .is_some());

    let seeds: Vec<Vec<u8>> = vec![
        buf.to_vec(),
        // u64 above i64::MAX in the middle, then more ints: unpacked.
        b"\x95\x01\x02\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x03\x04".to_vec(),
        // A string last, a nested packed array, a map of arrays.
        b"\x94\x01\x02\x03\xa1x".to_vec(),
        b"\x92\x94\x01\x02\x03\x04\x94\xd0\x80\xd1\x80\x00\x00\xc0".to_vec(),
        b"\x81\xa1k\x94\x01\xcc\x80\xcd\x01\x00\xce\x00\x01\x00\x00".to_vec(),
        // 70 fixints: longer than two of the chunks a run of them is
        // scanned by, so a mutation lands before, on and after each edge.
        [&[0xdc, 0x00, 70][..], &(0..70).collect::<Vec<u8>>()].concat(),
    ];
    let mut tight = Limits::strict();
    tight.max_msgpack_items = 6;
    let seeds = if cfg!(miri) { &seeds[1..2] } else { &seeds[..] }; // hours under Miri
    for seed in seeds {
        for limits in [Limits::strict(), tight.clone()] {
            for pack_min in [1, 4, 5] {
                packed_agrees(seed, &limits, pack_min);
                for cut in 0..seed.len() {
                    packed_agrees(&seed[..cut], &limits, pack_min);
                }
                for i in 0..seed.len() {
                    for byte in [
                        0x00, 0x7f, 0x80, 0xa1, 0xc0, 0xcc, 0xcf, 0xd0, 0xd3, 0xe0, 0xff,
                    ] {
                        let mut m = seed.clone();
                        m[i] = byte;
                        packed_agrees(&m, &limits, pack_min);
                    }
                }
            }
        }
    }
}

#[test]
fn raw_maps_are_read_and_set_in_place() {
    let map = Value::Map(vec![
        (Value::str("a"), 1u8.into()),
        (2u8.into(), Value::str("x")),
        (Value::str("a"), 3u8.into()),
        (
            Value::str("b"),
            Value::Array(vec![Value::Nil, Value::str("y")]),
        ),
    ]);
    let raw = encode(&map, &mut Plain).unwrap();
    let (read, end) = RawMap::read_noting_items(&raw, 0, Some("b"), |_| None)
        .unwrap()
        .unwrap();
    assert_eq!(end, raw.len());
    // The first entry with a key counts; non-str keys are never found.
    assert_eq!(
        decode_range(&raw, read.get("a").unwrap(), 1).unwrap(),
        1u8.into()
    );
    assert!(read.has("b") && !read.has("x") && !read.has("2"));
    assert_eq!(read.str("a"), None);
    let items = read.items().unwrap();
    assert_eq!((items.count, items.all_maps), (2, false));
    let second = value_end(&raw, items.start).unwrap();
    assert_eq!(value_end(&raw, second).unwrap(), items.end);
    assert_eq!(
        decode_range(&raw, second..items.end, 1).unwrap(),
        Value::str("y")
    );
    // A known map is stepped over by its length.
    let fixmap = encode(&Value::map_of([("k", Value::Nil)]), &mut Plain).unwrap();
    let maps = encode(
        &Value::map_of([("b", Value::Array(vec![Value::Nil; 0]))]),
        &mut Plain,
    )
    .unwrap();
    let mut two = BytesMut::from(&maps[..maps.len() - 1]);
    two.extend_from_slice(&[0x92]);
    two.extend_from_slice(&fixmap);
    two.extend_from_slice(&fixmap);
    let two = two.freeze();
    let (plain, _) = RawMap::read_noting_items(&two, 0, Some("b"), |_| None)
        .unwrap()
        .unwrap();
    let known = |rest: &[u8]| rest.starts_with(&fixmap).then_some(fixmap.len());
    let (fast, _) = RawMap::read_noting_items(&two, 0, Some("b"), known)
        .unwrap()
        .unwrap();
    // The same items, and every one of them the known map.
    let plain_items = plain.items().unwrap();
    assert_eq!(plain_items.same_known, None, "nothing known");
    assert_eq!(
        fast.items(),
        Some(ArrayItems {
            same_known: Some(fixmap.len()),
            ..plain_items
        })
    );
    assert_eq!((plain_items.count, plain_items.all_maps), (2, true));
    // Not all of them known, or not all of one length: not the same.
    let other = encode(&Value::map_of([("kk", Value::Nil)]), &mut Plain).unwrap();
    let both = |rest: &[u8]| {
        (rest.starts_with(&fixmap).then_some(fixmap.len()))
            .or(rest.starts_with(&other).then_some(other.len()))
    };
    for (second, known_other) in [(&other, false), (&other, true)] {
        let mut mixed = BytesMut::from(&maps[..maps.len() - 1]);
        mixed.extend_from_slice(&[0x92]);
        mixed.extend_from_slice(&fixmap);
        mixed.extend_from_slice(second);
        let mixed = mixed.freeze();
        let (read, _) = match known_other {
            true => RawMap::read_noting_items(&mixed, 0, Some("b"), both),
            false => RawMap::read_noting_items(&mixed, 0, Some("b"), known),
        }
        .unwrap()
        .unwrap();
        let items = read.items().unwrap();
        assert_eq!(
            (items.count, items.all_maps, items.same_known),
            (2, true, None)
        );
    }
    // An empty array has no items to be the same.
    let (empty, _) = RawMap::read_noting_items(&maps, 0, Some("b"), known)
        .unwrap()
        .unwrap();
    assert_eq!(empty.items().unwrap().same_known, None);
    assert!(RawMap::read(&encode(&Value::Nil, &mut Plain).unwrap(), 0)
        .unwrap()
        .is_none());

    // Dict assignment: the first "a" takes the value in place, the rest
    // are copied, a new key is appended.
    let set = set_entries(
        raw.clone(),
        &[("a", &9u8.into()), ("c", &Value::Nil)],
        &mut Plain,
        false,
    )
    .unwrap();
    let back = decode(&set, 0, &CHECKED, &mut plain_map).unwrap();
    assert_eq!(
        back,
        Value::Map(vec![
            (Value::str("a"), 9u8.into()),
            (2u8.into(), Value::str("x")),
            (Value::str("a"), 3u8.into()),
            (
                Value::str("b"),
                Value::Array(vec![Value::Nil, Value::str("y")])
            ),
            (Value::str("c"), Value::Nil),
        ])
    );
    for not_a_map in [Value::Nil, Value::Array(vec![])] {
        let raw = encode(&not_a_map, &mut Plain).unwrap();
        let entry = [("a", &Value::Nil)];
        let err = Err(EncodeError::HeaderNotMap);
        assert_eq!(set_entries(raw.clone(), &entry, &mut Plain, false), err);
        assert_eq!(set_entries(raw, &entry, &mut Plain, true), err);
    }
    let truncated_map16 = Bytes::from_static(b"\xde\x00");
    assert_eq!(
        set_entries(truncated_map16, &[("a", &Value::Nil)], &mut Plain, true),
        Err(EncodeError::HeaderNotMap)
    );
}

/// `set_entries` on the only handle of a buffer, every key new: the entries
/// go at its end and the length prefix is rewritten, nothing copied; the
/// bytes are those the copying path writes. A shared buffer, a key already
/// there, or a prefix that would grow: copied, the original untouched.
/// With `known_new` (which reads only the length): the same bytes,
/// in place in the same cases.
#[test]
fn set_entries_appends_in_place_to_a_buffer_it_owns() {
    let map_of = |n: usize| {
        Value::Map(
            (0..n)
                .map(|i| (Value::str(&format!("k{i}")), Value::from(i)))
                .collect(),
        )
    };
    let owned = |v: &Value| {
        let mut buf = BytesMut::with_capacity(1024);
        crate::msgpack::encode_into(v, &mut buf, &mut Plain).unwrap();
        buf.freeze()
    };
    let new = [("x", &Value::from(7u8)), ("y", &Value::str("z"))];
    // 3 → 5 entries (fixmap), 20 → 22 (map16), 14 → 16 (fixmap to map16),
    // 65 534 → 65 536 (map16 to map32).
    for (n, in_place) in [(3, true), (20, true), (14, false), (65_534, false)] {
        let raw = owned(&map_of(n));
        let copied = set_entries(raw.clone(), &new, &mut Plain, false).unwrap();
        let appended = set_entries(raw.clone(), &new, &mut Plain, true).unwrap();
        assert_eq!(appended, copied, "{n} entries: appended, shared");
        let at = raw.as_ptr();
        let set = set_entries(raw, &new, &mut Plain, false).unwrap();
        assert_eq!(set, copied, "{n} entries: the same bytes either way");
        assert_eq!(set.as_ptr() == at, in_place, "{n} entries: in place");
        let raw = owned(&map_of(n));
        let at = raw.as_ptr();
        let appended = set_entries(raw, &new, &mut Plain, true).unwrap();
        assert_eq!(appended, copied, "{n} entries: appended, owned");
        assert_eq!(
            appended.as_ptr() == at,
            in_place,
            "{n} entries: appended in place"
        );
        let mut want = map_of(n);
        if let Value::Map(m) = &mut want {
            m.extend(new.iter().map(|(k, v)| (Value::str(k), (*v).clone())));
        }
        assert_eq!(decode(&set, 0, &CHECKED, &mut plain_map).unwrap(), want);
    }
    // A key already there: copied, its value replaced where it stands.
    let raw = owned(&map_of(3));
    let at = raw.as_ptr();
    let set = set_entries(raw, &[("k1", &Value::Nil)], &mut Plain, false).unwrap();
    assert_ne!(set.as_ptr(), at);
    // A shared buffer: copied, the other handle still reads the old map.
    let raw = owned(&map_of(3));
    let other = raw.clone();
    let set = set_entries(raw, &new, &mut Plain, false).unwrap();
    assert_ne!(set.as_ptr(), other.as_ptr());
    assert_eq!(
        decode(&other, 0, &CHECKED, &mut plain_map).unwrap(),
        map_of(3)
    );
}

/// `head` reads every marker's head as rmp's decoders do (the value or
/// length, and how many bytes that took), and no head from fewer bytes.
#[test]
fn head_reads_every_marker_as_rmp_does() {
    use rmp::decode as rmp;
    for b in 0..=255u8 {
        let mut buf = vec![b];
        buf.extend((1..=16u8).map(|x| x.wrapping_mul(0x3b)));
        let (h, width) = head(&buf, 0).expect("a whole head");
        let mut rd = &buf[..];
        match h {
            Head::Nil => rmp::read_nil(&mut rd).unwrap(),
            Head::Bool(v) => assert_eq!(rmp::read_bool(&mut rd).unwrap(), v),
            Head::Int(i) => assert_eq!(rmp::read_int::<i128, _>(&mut rd).unwrap(), i.as_i128()),
            Head::Float(f) => {
                let g = match rmp::read_f64(&mut &buf[..]) {
                    Ok(g) => g,
                    Err(_) => rmp::read_f32(&mut &buf[..]).unwrap().into(),
                };
                assert_eq!(f.to_bits(), g.to_bits());
                rd = &buf[width..];
            }
            Head::Str(n) => assert_eq!(rmp::read_str_len(&mut rd).unwrap(), n),
            Head::Bin(n) => assert_eq!(rmp::read_bin_len(&mut rd).unwrap(), n),
            Head::Array(n) => assert_eq!(rmp::read_array_len(&mut rd).unwrap(), n),
            Head::Map(n) => assert_eq!(rmp::read_map_len(&mut rd).unwrap(), n),
            Head::Ext(n) => assert_eq!(rmp::read_ext_meta(&mut rd).unwrap().size, n),
            Head::Reserved => {
                assert!(matches!(
                    rmp::read_marker(&mut rd),
                    Ok(::rmp::Marker::Reserved)
                ));
            }
        }
        assert_eq!(buf.len() - rd.len(), width, "marker {b:#04x}");
        let fixpos = matches!(::rmp::Marker::from_u8(b), ::rmp::Marker::FixPos(_));
        assert_eq!(is_fixpos(b), fixpos, "marker {b:#04x}");
        for cut in 0..width {
            assert_eq!(head(&buf[..cut], 0), None, "marker {b:#04x} cut at {cut}");
        }
    }
}

/// The compile-time encodings are byte for byte what the encoder writes,
/// at every boundary of their forms.
#[test]
fn static_encodings_are_what_the_encoder_writes() {
    for n in [0, 1, 15] {
        let mut out = BytesMut::new();
        put_map_len(&mut out, n as u32);
        assert_eq!(Static::new().map(n).bytes(), &out[..], "map of {n}");
    }
    for n in [0, 1, 31, 32, 255] {
        let s = "s".repeat(n);
        let mut out = BytesMut::new();
        put_str(&mut out, &s).unwrap();
        assert_eq!(Static::new().str(&s).bytes(), &out[..], "str of {n}");
        let b = vec![7u8; n];
        let mut out = BytesMut::new();
        put_bin(&mut out, &b).unwrap();
        assert_eq!(Static::new().bin(&b).bytes(), &out[..], "bin of {n}");
    }
    let built = Static::new().map(2).str("a").bin(b"x").str("b").map(0);
    let want = Value::map_of([
        ("a", Value::Bin(Bytes::from_static(b"x"))),
        ("b", Value::Map(vec![])),
    ]);
    assert_eq!(built.bytes(), &encode(&want, &mut Plain).unwrap()[..]);
}

/// A map's length rewritten in place is the prefix `put_map_len` writes,
/// at every width; one more entry in a fixmap is one more in its prefix.
#[test]
fn map_lengths_rewritten_in_place() {
    for (from, to) in [(0u32, 15u32), (16, 0xffff), (0x1_0000, u32::MAX)] {
        assert_eq!(
            len_prefix_width(from as usize),
            len_prefix_width(to as usize)
        );
        let mut buf = BytesMut::new();
        put_map_len(&mut buf, from);
        set_map_len(&mut buf, 0, to);
        let mut want = BytesMut::new();
        put_map_len(&mut want, to);
        assert_eq!(buf, want, "{from} -> {to}");
        assert_eq!(buf.len(), len_prefix_width(to as usize));
    }
    let mut buf = BytesMut::new();
    put_map_len(&mut buf, 3);
    add_map_entry(&mut buf, 0);
    let mut want = BytesMut::new();
    put_map_len(&mut want, 4);
    assert_eq!(buf, want);
}

/// A str read item by item: ASCII and other UTF-8 as text, anything else
/// refused where the str starts, in both of the stream's paths (a fixstr
/// and str 8 read in place, a str 16 through the reader).
#[cfg(feature = "serde")]
#[test]
fn stream_str_is_text_or_refused() {
    let limits = Limits::default();
    let read = |bytes: &'static [u8]| {
        let buf = Bytes::from_static(bytes);
        let mut s = Stream::new(&buf, 0, &limits).unwrap();
        s.next().map(|t| match t {
            Token::Str(text) => text.to_owned(),
            _ => panic!("not a str"),
        })
    };
    for (bytes, want) in [
        (&b"\xa3abc"[..], "abc"),
        (b"\xa0", ""),
        (b"\xa2\xc3\xa9", "é"),
        (b"\xd9\x05caf\xc3\xa9", "café"),
        (b"\xda\x00\x04\xe2\x82\xac!", "€!"),
        (b"\xd9\x09abcdefgh\x7f", "abcdefgh\x7f"),
    ] {
        assert_eq!(read(bytes).unwrap(), want, "{bytes:02x?}");
    }
    for bytes in [
        &b"\xa2\xff\xfe"[..],
        b"\xa1\x80",
        b"\xd9\x09abcdefgh\x80",
        b"\xda\x00\x03\xed\xa0\x80", // a surrogate
    ] {
        assert_eq!(
            read(bytes),
            Err(MsgpackError::InvalidUtf8(Position {
                frame: 0,
                offset: 0
            })),
            "{bytes:02x?}"
        );
    }
}
