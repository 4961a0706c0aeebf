//! Hostile inputs (reference/hostile-inputs.md §3.1 P1–P11 and §3.2 H1–H16)
//! against the slice API (`Envelope::decode`, `envelope::parse_prelude`) and
//! the message layer (`loads_detailed`), plus the `Limits` boundaries and the
//! encoder's refusals.
//!
//! Every test asserts the exact error (variant and fields), and, through the
//! counting allocator in `tests/common`, that decoding an input that declares
//! huge sizes allocates no more than a small constant plus the input size.

#[path = "support/child_test.rs"]
mod child_test;
mod common;

use bytes::Bytes;
use framewire::envelope::{parse_prelude, PreludeStatus};
use framewire::message::{decode_detailed, encode, BlockKind, BlockRef, Decoded};
use framewire::{
    Block, EncodeError, Envelope, EnvelopeError, Header, Limits, MessageError, MsgpackError,
    Position, Value,
};

use common::{bounded, measure, on_small_stack, SMALL};

// ---- helpers ----------------------------------------------------------------

fn strict() -> Limits {
    Limits::strict()
}
fn compat() -> Limits {
    Limits::dask_compat()
}
fn presets() -> [Limits; 2] {
    [strict(), compat()]
}
/// Limits that let any declared size through the size checks, so the
/// overflow and truncation checks behind them can be reached.
fn unlimited() -> Limits {
    let mut l = Limits::dask_compat();
    l.max_frame_len = u64::MAX;
    l.max_message_len = u64::MAX;
    l
}

fn at(frame: usize, offset: usize) -> Position {
    Position { frame, offset }
}

/// `N | count | lengths`, little-endian, without frame bytes.
fn prelude(first_read: u64, count: u64, lens: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 8 * lens.len());
    out.extend_from_slice(&first_read.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    for l in lens {
        out.extend_from_slice(&l.to_le_bytes());
    }
    out
}

/// A whole message whose first read covers every frame.
fn wire_of(frames: &[&[u8]]) -> Vec<u8> {
    let lens: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
    let n = 8 + 8 * frames.len() as u64 + lens.iter().sum::<u64>();
    let mut out = prelude(n, frames.len() as u64, &lens);
    for f in frames {
        out.extend_from_slice(f);
    }
    out
}

/// `Envelope::decode`, with the peak allocation bounded by 64 KiB + input.
#[track_caller]
fn decode_env(buf: &[u8], limits: &Limits) -> Result<(Envelope, usize), EnvelopeError> {
    let buf = Bytes::copy_from_slice(buf);
    let len = buf.len();
    bounded(SMALL + len, || Envelope::decode(&buf, limits))
}

/// `parse_prelude`, with the peak allocation bounded by 64 KiB + input.
#[track_caller]
fn parse(buf: &[u8], limits: &Limits) -> Result<PreludeStatus, EnvelopeError> {
    bounded(SMALL + buf.len(), || parse_prelude(buf, limits))
}

/// Asserts that both slice entry points refuse `buf` with `expected`.
#[track_caller]
fn both_refuse(buf: &[u8], limits: &Limits, expected: EnvelopeError) {
    assert_eq!(parse(buf, limits).unwrap_err(), expected, "parse_prelude");
    assert_eq!(
        decode_env(buf, limits).unwrap_err(),
        expected,
        "Envelope::decode"
    );
}

fn frames(list: &[&[u8]]) -> Vec<Bytes> {
    list.iter().map(|f| Bytes::copy_from_slice(f)).collect()
}

/// `loads_detailed`, with the peak allocation bounded by 64 KiB + input +
/// `prealloc_cap` (what one container may reserve ahead of its items).
#[track_caller]
fn loads_bounded(list: &[&[u8]], limits: &Limits) -> Result<Decoded, MessageError> {
    let fr = frames(list);
    let total: usize = list.iter().map(|f| f.len()).sum();
    bounded(SMALL + total + limits.prealloc_cap, || {
        decode_detailed(&fr, limits)
    })
}

/// Bytes a decoded container of `items` items may hold: its `Vec<Value>`
/// (with doubling slack).
fn items_cost(items: usize) -> usize {
    2 * items * std::mem::size_of::<Value>()
}

/// `loads_detailed` of one deeply nested frame: each nesting level may cost
/// a container on the decoder's stack plus its first item (about 100 bytes).
#[track_caller]
fn loads_deep(frame: &[u8], limits: &Limits) -> Result<Decoded, MessageError> {
    let fr = frames(&[frame]);
    let bound = SMALL + frame.len() + limits.max_depth.min(frame.len()) * 128;
    bounded(bound, || decode_detailed(&fr, limits))
}

#[track_caller]
fn loads_err(list: &[&[u8]], limits: &Limits) -> MessageError {
    loads_bounded(list, limits).expect_err("hostile input accepted")
}

/// A fixstr (< 32 bytes).
fn fixstr(s: &str) -> Vec<u8> {
    assert!(s.len() < 32);
    let mut v = vec![0xa0 | s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

const SER: &str = "__Serialized__";
const PIC: &str = "__Pickled__";

/// `{key: <offset bytes>}`.
fn ph(key: &str, offset: &[u8]) -> Vec<u8> {
    let mut v = vec![0x81];
    v.extend(fixstr(key));
    v.extend_from_slice(offset);
    v
}

/// A sub-header `{"num-sub-frames": <n bytes>}`.
fn sub(n: &[u8]) -> Vec<u8> {
    let mut v = vec![0x81];
    v.extend(fixstr("num-sub-frames"));
    v.extend_from_slice(n);
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `depth` nested one-item arrays around a 0.
fn nested_arrays(depth: usize) -> Vec<u8> {
    let mut v = vec![0x91; depth];
    v.push(0x00);
    v
}

// ---- §3.1 prelude -------------------------------------------------------------

#[test]
fn p1_frame_count_2_pow_63_rejected_before_reading_lengths() {
    for limits in presets() {
        for declared in [1u64 << 63, u64::MAX, 1 << 60, limits.max_frames as u64 + 1] {
            // Only the 16-byte head: the length table is never looked at.
            let buf = prelude(16, declared, &[]);
            let expected = EnvelopeError::FrameCountExceeded {
                declared,
                limit: limits.max_frames,
            };
            let (r, stats) = measure(|| parse_prelude(&buf, &limits));
            assert_eq!(r.unwrap_err(), expected);
            assert_eq!(
                stats.peak, 0,
                "parse_prelude reserved memory for {declared} frames"
            );
            both_refuse(&buf, &limits, expected);
        }
    }
}

#[test]
fn p2_length_table_cut_off_needs_more_then_truncated() {
    for limits in presets() {
        // dask_compat's 2^32 - 1 would need a 32 GiB table: 65 536 will do.
        let n = (limits.max_frames as u64).min(1 << 16);
        let full = 16 + 8 * n;
        for cut in [16u64, 24, 16 + 8 * (n / 2), full - 1] {
            let mut buf = prelude(8 + 8 * n, n, &vec![0; n as usize]);
            buf.truncate(cut as usize);
            let (r, stats) = measure(|| parse_prelude(&buf, &limits));
            assert_eq!(r.unwrap(), PreludeStatus::Need(full as usize));
            assert_eq!(stats.peak, 0, "reserved for a table that has not arrived");
            assert_eq!(
                decode_env(&buf, &limits).unwrap_err(),
                EnvelopeError::Truncated {
                    offset: cut,
                    needed: full,
                    got: cut
                }
            );
        }
        // Not even the head.
        for cut in 0..16u64 {
            let buf = vec![0u8; cut as usize];
            assert_eq!(parse(&buf, &limits).unwrap(), PreludeStatus::Need(16));
            assert_eq!(
                decode_env(&buf, &limits).unwrap_err(),
                EnvelopeError::Truncated {
                    offset: cut,
                    needed: 16,
                    got: cut
                }
            );
        }
    }
}

#[test]
fn p3_length_sum_overflowing_u64_is_length_overflow() {
    let buf = prelude(24, 2, &[1 << 63, 1 << 63]);
    both_refuse(&buf, &unlimited(), EnvelopeError::LengthOverflow);
    let buf = prelude(32, 3, &[u64::MAX, 0, 1]);
    both_refuse(&buf, &unlimited(), EnvelopeError::LengthOverflow);
    // dask_compat() has no per-frame limit: the sum is what overflows.
    both_refuse(
        &buf_of_two_halves(),
        &compat(),
        EnvelopeError::LengthOverflow,
    );
    // Under strict() the first length is already refused.
    both_refuse(
        &buf_of_two_halves(),
        &strict(),
        EnvelopeError::FrameTooLarge {
            index: 0,
            declared: 1 << 63,
            limit: 16 << 20,
        },
    );
}

/// Two frames of 2^63 bytes: their sum overflows u64.
fn buf_of_two_halves() -> Vec<u8> {
    prelude(24, 2, &[1 << 63, 1 << 63])
}

/// The limits of `strict()` and a custom profile that sets each size limit:
/// `dask_compat()` sets none of them (it bounds memory by the bytes
/// received instead; see `compat_*` below).
fn capped() -> [Limits; 2] {
    let mut custom = compat();
    custom.max_frames = 5;
    custom.max_frame_len = 100;
    custom.max_message_len = 250;
    custom.max_header_len = 50;
    custom.max_msgpack_items = 20;
    [strict(), custom]
}

#[test]
fn p4_message_not_addressable_is_length_overflow() {
    // The sum fits u64, but N field + prelude + frames does not (nor usize).
    let buf = prelude(16, 1, &[u64::MAX - 10]);
    both_refuse(&buf, &unlimited(), EnvelopeError::LengthOverflow);
    let buf = prelude(24, 2, &[u64::MAX - 30, 7]);
    both_refuse(&buf, &unlimited(), EnvelopeError::LengthOverflow);
}

#[cfg(target_pointer_width = "32")]
#[test]
fn p4_length_beyond_usize_on_32_bit_is_length_overflow() {
    let buf = prelude(16, 1, &[1 << 40]);
    both_refuse(&buf, &unlimited(), EnvelopeError::LengthOverflow);
}

#[test]
fn p5_frame_longer_than_max_frame_len_is_frame_too_large() {
    for limits in capped() {
        let buf = prelude(24 + 8, 3, &[10, 0, 1 << 60]);
        both_refuse(
            &buf,
            &limits,
            EnvelopeError::FrameTooLarge {
                index: 2,
                declared: 1 << 60,
                limit: limits.max_frame_len,
            },
        );
    }
}

#[test]
fn p5_sum_above_max_message_len_is_message_too_large() {
    for limits in capped() {
        let f = limits.max_frame_len;
        let lens = [f, f, f, f, f];
        let buf = prelude(8 + 40, 5, &lens);
        both_refuse(
            &buf,
            &limits,
            EnvelopeError::MessageTooLarge {
                declared: 5 * f,
                limit: limits.max_message_len,
            },
        );
    }
}

#[test]
fn p6_frame_longer_than_bytes_left_is_truncated() {
    let mut buf = prelude(24 + 1 + 100, 2, &[1, 100]);
    buf.push(0x90);
    buf.extend_from_slice(&[7; 10]);
    let got = buf.len() as u64;
    assert_eq!(got, 43);
    for limits in presets() {
        assert!(matches!(
            parse(&buf, &limits),
            Ok(PreludeStatus::Complete(_))
        ));
        assert_eq!(
            decode_env(&buf, &limits).unwrap_err(),
            EnvelopeError::Truncated {
                offset: got,
                needed: 8 + 24 + 101,
                got
            }
        );
    }
    // A 2^60-byte frame declared, 3 bytes present: no allocation for it.
    let mut buf = prelude(24, 2, &[0, 1 << 60]);
    buf.extend_from_slice(b"abc");
    let got = buf.len() as u64;
    assert_eq!(
        decode_env(&buf, &unlimited()).unwrap_err(),
        EnvelopeError::Truncated {
            offset: got,
            needed: 32 + (1 << 60),
            got
        }
    );
}

#[test]
fn p7_first_read_inside_prelude_or_off_boundary_is_inconsistent() {
    let body = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    for limits in presets() {
        for first_read in [0u64, 8, 23, 24 + 3, 24 + 7, 24 + 11, u64::MAX] {
            let mut buf = prelude(first_read, 2, &[5, 5]);
            buf.extend_from_slice(&body);
            both_refuse(
                &buf,
                &limits,
                EnvelopeError::InconsistentPrelude {
                    first_read,
                    prelude_len: 24,
                },
            );
        }
        // Every boundary is fine: 24 (k=0), 29 (k=1), 34 (k=2).
        for first_read in [24u64, 29, 34] {
            let mut buf = prelude(first_read, 2, &[5, 5]);
            buf.extend_from_slice(&body);
            let (env, used) = decode_env(&buf, &limits).unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(env.first_read(), first_read);
        }
    }
}

#[test]
fn p8_zero_frames_is_empty_message() {
    for limits in presets() {
        for first_read in [8u64, 0, u64::MAX] {
            both_refuse(
                &prelude(first_read, 0, &[]),
                &limits,
                EnvelopeError::EmptyMessage,
            );
        }
        assert_eq!(
            decode_detailed(&[], &limits).unwrap_err(),
            MessageError::NoFrames
        );
    }
}

#[test]
fn p9_max_frames_empty_frames_accepted_with_linear_memory() {
    for limits in capped() {
        let n = limits.max_frames;
        let mut buf = prelude(8 + 8 * n as u64, n as u64, &vec![0; n]);
        // Frame 0 must hold bytes for the message layer; make it 1 byte.
        buf[16..24].copy_from_slice(&1u64.to_le_bytes());
        buf[0..8].copy_from_slice(&(8 + 8 * n as u64 + 1).to_le_bytes());
        buf.push(0xc0);
        let wire = Bytes::from(buf);
        let bound = SMALL + n * (8 + std::mem::size_of::<Bytes>());
        let (env, used) = bounded(bound, || Envelope::decode(&wire, &limits)).unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(env.frames().len(), n);
        assert!(env.frames()[1..].iter().all(|f| f.is_empty()));
        // The message layer: every empty frame is an orphan.
        let loaded = bounded(SMALL + n * 16, || decode_detailed(env.frames(), &limits)).unwrap();
        assert_eq!(loaded.value, Value::Nil);
        assert_eq!(loaded.orphans, (1..n).collect::<Vec<_>>());
        // One more is refused.
        let buf = prelude(8 + 8 * (n as u64 + 1), n as u64 + 1, &vec![0; n + 1]);
        both_refuse(
            &buf,
            &limits,
            EnvelopeError::FrameCountExceeded {
                declared: n as u64 + 1,
                limit: n,
            },
        );
    }
}

#[test]
fn p10_empty_messages_always_make_progress_and_never_decode_as_values() {
    // One zero-length frame: 24 bytes each. The slice API consumes exactly
    // one message per call (counting them, `max_empty_messages`, is the
    // codec's job); the message layer refuses an empty frame 0.
    let one = wire_of(&[b""]);
    assert_eq!(one.len(), 24);
    let stream = Bytes::from(one.repeat(1000));
    let limits = strict();
    let mut rest = stream.clone();
    let mut count = 0;
    while !rest.is_empty() {
        let (env, used) = Envelope::decode(&rest, &limits).unwrap();
        assert_eq!(used, 24);
        assert_eq!(env.frames(), &[Bytes::new()]);
        assert_eq!(
            decode_detailed(env.frames(), &limits).unwrap_err(),
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 0)))
        );
        rest = rest.slice(used..);
        count += 1;
    }
    assert_eq!(count, 1000);
}

#[test]
fn p11_trailing_bytes_are_left_for_the_next_message() {
    let first = wire_of(&[b"\x92\x01\x02", b"xyz"]);
    let second = wire_of(&[b"\xc0"]);
    let mut stream = first.clone();
    stream.extend_from_slice(&second);
    stream.extend_from_slice(b"\x01\x02garbage");
    for limits in presets() {
        let (env, used) = decode_env(&stream, &limits).unwrap();
        assert_eq!(used, first.len());
        assert_eq!(env.frames(), &frames(&[b"\x92\x01\x02", b"xyz"])[..]);
        let (env2, used2) = decode_env(&stream[used..], &limits).unwrap();
        assert_eq!(used2, second.len());
        assert_eq!(env2.frames(), &frames(&[b"\xc0"])[..]);
        // The garbage after it is not a message (yet): N = 0x...0201 needs more.
        let tail = &stream[used + used2..];
        assert_eq!(
            decode_env(tail, &limits).unwrap_err(),
            EnvelopeError::Truncated {
                offset: 9,
                needed: 16,
                got: 9
            }
        );
    }
}

// ---- §3.2 headers, sub-headers and offsets -------------------------------------

#[test]
fn h1_header_longer_than_max_header_len_is_refused_before_parsing() {
    let limits = strict();
    let limit = limits.max_header_len;
    // Frame 0 one byte over the limit (it would be a valid bin32 if parsed).
    let mut f0 = vec![0xc6];
    f0.extend_from_slice(&((limit - 4) as u32).to_be_bytes());
    f0.resize(limit as usize + 1, 0);
    assert_eq!(
        loads_err(&[&f0], &limits),
        MessageError::Msgpack(MsgpackError::HeaderTooLarge {
            frame: 0,
            len: limit + 1,
            limit
        })
    );
    // A sub-header one byte over.
    let mut big_sub = sub(&[0x00]);
    big_sub.resize(limit as usize + 1, 0);
    assert_eq!(
        loads_err(&[&ph(SER, &[1]), &big_sub], &limits),
        MessageError::Msgpack(MsgpackError::HeaderTooLarge {
            frame: 1,
            len: limit + 1,
            limit
        })
    );
}

#[test]
fn h2_malformed_or_truncated_msgpack_and_reserved_marker() {
    let cases: &[(&[u8], MessageError)] = &[
        (
            b"",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 0))),
        ),
        (
            b"\xcd\x01",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 1))),
        ),
        (
            b"\xcb\x00\x00\x00",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 1))),
        ),
        (
            b"\xdb\x00\x00",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 1))),
        ),
        (
            b"\x92\x00\xcf\x00",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 3))),
        ),
        (
            b"\x81\xa1k",
            MessageError::Msgpack(MsgpackError::Truncated(at(0, 3))),
        ),
        (
            b"\x81\xa1",
            MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                at: at(0, 0),
                declared: 1,
                remaining: 1,
            }),
        ),
        (
            b"\xc1",
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(0, 0),
                byte: 0xc1,
            }),
        ),
        (
            b"\x92\x00\xc1",
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(0, 2),
                byte: 0xc1,
            }),
        ),
        (
            b"\x81\xc1\x00",
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(0, 1),
                byte: 0xc1,
            }),
        ),
        (
            b"\xc0\xc0",
            MessageError::Msgpack(MsgpackError::TrailingBytes(at(0, 1))),
        ),
        (
            b"\x91\x00\x00",
            MessageError::Msgpack(MsgpackError::TrailingBytes(at(0, 2))),
        ),
    ];
    for limits in presets() {
        for (input, expected) in cases {
            assert_eq!(
                &loads_err(&[input], &limits),
                expected,
                "input {input:02x?}"
            );
        }
        // The same inside a sub-header carries the sub-header's frame index.
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), b"\x81\xc1\x00"], &limits),
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(1, 1),
                byte: 0xc1
            })
        );
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), b"\x81\xaenum-sub-frames"], &limits),
            MessageError::Msgpack(MsgpackError::Truncated(at(1, 16)))
        );
    }
}

#[test]
fn h3_100k_nested_fixarrays_is_depth_exceeded_on_a_128k_stack() {
    for limits in presets() {
        let input = nested_arrays(100_000);
        let expected = MessageError::Msgpack(MsgpackError::DepthExceeded {
            at: at(0, limits.max_depth),
            limit: limits.max_depth,
        });
        let result = on_small_stack(128 * 1024, move || {
            let fr = vec![Bytes::from(input)];
            let len = fr[0].len();
            bounded(SMALL + len + limits.max_depth * 128, || {
                decode_detailed(&fr, &limits)
            })
            .map(|l| l.blocks.len())
        });
        assert_eq!(result.unwrap_err(), expected);
    }
    // Nested maps, and the same bomb in a sub-header.
    for limits in presets() {
        let mut maps = [0x81, 0x00].repeat(100_000);
        maps.push(0x00);
        let sub_bomb = nested_arrays(100_000);
        let limit = limits.max_depth;
        let (a, b) = on_small_stack(128 * 1024, move || {
            let a = decode_detailed(&[Bytes::from(maps)], &limits).map(|_| ());
            let fr = vec![Bytes::from(ph(SER, &[1])), Bytes::from(sub_bomb)];
            let b = decode_detailed(&fr, &limits).map(|_| ());
            (a, b)
        });
        assert_eq!(
            a.unwrap_err(),
            MessageError::Msgpack(MsgpackError::DepthExceeded {
                at: at(0, 2 * limit),
                limit
            })
        );
        assert_eq!(
            b.unwrap_err(),
            MessageError::Msgpack(MsgpackError::DepthExceeded {
                at: at(1, limit),
                limit
            })
        );
    }
}

#[test]
fn h3_depth_1024_accepted_1025_rejected_under_dask_compat() {
    let limits = compat();
    assert_eq!(limits.max_depth, 1024);
    let ok = loads_deep(&nested_arrays(1024), &limits).unwrap();
    let mut depth = 0;
    let mut v = &ok.value;
    while let Value::Array(items) = v {
        depth += 1;
        v = &items[0];
    }
    assert_eq!(depth, 1024);
    assert_eq!(*v, Value::int(0u8));
    assert_eq!(
        loads_deep(&nested_arrays(1025), &limits).unwrap_err(),
        MessageError::Msgpack(MsgpackError::DepthExceeded {
            at: at(0, 1024),
            limit: 1024
        })
    );
}

/// Child half of the next test, run only by it (a stack overflow aborts the
/// whole process, so it must not run in the main one).
#[test]
#[ignore = "run in a child process by h3_accepted_1024_deep_value_decodes_and_drops_on_a_512k_stack"]
fn child_decode_and_drop_1024_deep_value_on_512k_stack() {
    let ok = on_small_stack(512 * 1024, || {
        let fr = vec![Bytes::from(nested_arrays(1024))];
        let loaded = decode_detailed(&fr, &compat());
        let ok = loaded.is_ok();
        drop(loaded); // dropping must not need a deep stack either
        ok
    });
    assert!(ok);
}

/// The deepest value dask_compat accepts (1024 levels) must be decodable
/// *and droppable* on a small stack. Decoding is iterative (the depth bomb
/// passes on 128 KiB); dropping a `Value` recurses once per level, so its
/// stack use is bounded by `max_depth`: about 200 bytes a level in debug
/// builds, hence 512 KiB here (release builds pass on 128 KiB).
#[test]
fn h3_accepted_1024_deep_value_decodes_and_drops_on_a_512k_stack() {
    const CHILD: &str = "child_decode_and_drop_1024_deep_value_on_512k_stack";
    child_test::run_alone(CHILD, |_| {});
}

#[test]
fn h4_array32_and_map32_declaring_2_pow_32_minus_1_items() {
    let max = u32::MAX as u64;
    for limits in presets() {
        let cases: Vec<(Vec<u8>, MessageError)> = vec![
            (
                b"\xdd\xff\xff\xff\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 0,
                }),
            ),
            (
                b"\xdf\xff\xff\xff\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 0,
                }),
            ),
            (
                cat(&[b"\xdd\xff\xff\xff\xff", &[0; 100]]),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 100,
                }),
            ),
            (
                b"\x91\xdd\xff\xff\xff\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 1),
                    declared: max,
                    remaining: 0,
                }),
            ),
            (
                b"\xdc\xff\xff\x00".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: 0xffff,
                    remaining: 1,
                }),
            ),
            // A map needs two items per entry: 3 entries in 5 bytes do not fit.
            (
                cat(&[b"\x83", &[0; 5]]),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: 3,
                    remaining: 5,
                }),
            ),
            (
                b"\x9f".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: 15,
                    remaining: 0,
                }),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                loads_err(&[&input], &limits),
                expected,
                "input {input:02x?}"
            );
        }
    }
}

/// Nested containers that each declare as many items as the bytes left allow
/// must not each reserve `prealloc_cap`: reservations ahead of data should be
/// bounded by the limit for the whole decode, not per nesting level.
#[test]
fn h4_nested_containers_cannot_multiply_prealloc_cap() {
    for limits in presets() {
        let per_level = (limits.prealloc_cap / std::mem::size_of::<Value>()).max(1) as u32;
        let levels = limits.max_depth.min(64);
        let mut input = Vec::new();
        for _ in 0..levels {
            input.push(0xdd);
            input.extend_from_slice(&per_level.to_be_bytes());
        }
        // Enough bytes for every declared count, but ending in an invalid marker.
        input.push(0xc1);
        input.resize(input.len() + per_level as usize, 0);
        let fr = vec![Bytes::from(input)];
        let len = fr[0].len();
        let (r, stats) = measure(|| decode_detailed(&fr, &limits).map(|_| ()));
        assert_eq!(
            r.unwrap_err(),
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(0, 5 * levels),
                byte: 0xc1
            })
        );
        let bound = 2 * limits.prealloc_cap + SMALL + len;
        assert!(
            stats.peak <= bound,
            "{} nested array32s in a {}-byte frame reserved {} bytes (prealloc_cap {}, bound {})",
            levels,
            len,
            stats.peak,
            limits.prealloc_cap,
            bound
        );
    }
}

#[test]
fn h5_bin32_and_str32_declaring_4_gib() {
    let max = u32::MAX as u64;
    for limits in presets() {
        let cases: Vec<(Vec<u8>, MessageError)> = vec![
            (
                b"\xc6\xff\xff\xff\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 0,
                }),
            ),
            (
                b"\xdb\xff\xff\xff\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 0,
                }),
            ),
            (
                cat(&[b"\xc6\xff\xff\xff\xff", b"abc"]),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: max,
                    remaining: 3,
                }),
            ),
            (
                cat(&[b"\xc5\xff\xff", &[0; 10]]),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: 0xffff,
                    remaining: 10,
                }),
            ),
            (
                b"\x92\xc0\xd9\xff".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 2),
                    declared: 0xff,
                    remaining: 0,
                }),
            ),
            (
                b"\xa5ab".to_vec(),
                MessageError::Msgpack(MsgpackError::LengthExceedsRemaining {
                    at: at(0, 0),
                    declared: 5,
                    remaining: 2,
                }),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                loads_err(&[&input], &limits),
                expected,
                "input {input:02x?}"
            );
        }
        // In bounds: the bin is a slice of the frame.
        let fr = frames(&[b"\xc6\x00\x00\x00\x03abc"]);
        let v = decode_detailed(&fr, &limits).unwrap().value;
        let Value::Bin(b) = &v else { panic!("{v:?}") };
        assert_eq!(&b[..], b"abc");
        assert_eq!(b.as_ptr(), fr[0][5..].as_ptr());
    }
}

#[test]
fn h6_item_count_bomb_is_item_budget_exceeded() {
    let limits = strict();
    let limit = limits.max_msgpack_items;
    // 10^6 one-byte items: within max_header_len (1 MiB), far over the budget.
    let mut input = vec![0xdd];
    input.extend_from_slice(&1_000_000u32.to_be_bytes());
    input.resize(5 + 1_000_000, 0);
    assert!((input.len() as u64) < limits.max_header_len);
    let fr = vec![Bytes::from(input)];
    // The items actually read cost memory, bounded by the budget.
    let bound = SMALL + items_cost(limit);
    let err = bounded(bound, || decode_detailed(&fr, &limits).map(|_| ())).unwrap_err();
    assert_eq!(
        err,
        MessageError::Msgpack(MsgpackError::ItemBudgetExceeded {
            at: at(0, limit + 4),
            limit
        })
    );
    // A map of maps counts keys, values and containers.
    let mut maps = vec![0xde, 0xff, 0xff];
    for _ in 0..0xffff {
        maps.extend_from_slice(&[0x00, 0x80]);
    }
    let fr = frames(&[&maps]);
    let bound = SMALL + maps.len() + items_cost(limit);
    let err = bounded(bound, || decode_detailed(&fr, &limits).map(|_| ())).unwrap_err();
    // Items: the outer map (1) then key, value alternate; item limit+1 is a
    // value (an even item number when counting from the map as 1).
    assert_eq!(
        err,
        MessageError::Msgpack(MsgpackError::ItemBudgetExceeded {
            at: at(0, 3 + limit - 1),
            limit
        })
    );
}

#[test]
fn h7_invalid_utf8_in_str() {
    let cases: &[(&[u8], MessageError)] = &[
        (
            b"\xa2\xff\xfe",
            MessageError::Msgpack(MsgpackError::InvalidUtf8(at(0, 0))),
        ),
        (
            b"\xa1\xe2",
            MessageError::Msgpack(MsgpackError::InvalidUtf8(at(0, 0))),
        ),
        (
            b"\x81\xa1\x80\x00",
            MessageError::Msgpack(MsgpackError::InvalidUtf8(at(0, 1))),
        ),
        (
            b"\x92\x00\xd9\x03\xed\xa0\x80",
            MessageError::Msgpack(MsgpackError::InvalidUtf8(at(0, 2))),
        ), // a surrogate
    ];
    for limits in presets() {
        for (input, expected) in cases {
            assert_eq!(
                &loads_err(&[input], &limits),
                expected,
                "input {input:02x?}"
            );
        }
        // In a sub-header too.
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), b"\x81\xa2\xc3\x28\x00"], &limits),
            MessageError::Msgpack(MsgpackError::InvalidUtf8(at(1, 1)))
        );
    }
}

#[test]
fn h8_ext_types_are_refused_and_never_read_as_offsets() {
    let cases: &[(&[u8], MessageError)] = &[
        (
            b"\xd4\x01\x00",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 0))),
        ),
        (
            b"\xd8\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 0))),
        ),
        // ext32 declaring 4 GiB: refused at the marker, nothing reserved.
        (
            b"\xc9\xff\xff\xff\xff\x05",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 0))),
        ),
        (
            b"\xc7\xff\x01",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 0))),
        ),
        // Timestamp (type -1) with nanoseconds >= 1e9.
        (
            b"\xd7\xff\xff\xff\xff\xfc\x00\x00\x00\x00",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 0))),
        ),
        (
            b"\x92\x00\xd5\x00\x00\x00",
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 2))),
        ),
    ];
    for limits in presets() {
        for (input, expected) in cases {
            assert_eq!(
                &loads_err(&[input], &limits),
                expected,
                "input {input:02x?}"
            );
        }
        // An ext where a placeholder offset should be.
        assert_eq!(
            loads_err(&[&ph(SER, b"\xd4\x00\x01"), &sub(&[0])], &limits),
            MessageError::Msgpack(MsgpackError::UnsupportedExt(at(0, 16)))
        );
    }
}

#[test]
fn h9_reserved_key_with_extra_keys_is_ambiguous_reference() {
    let s = fixstr(SER);
    let p = fixstr(PIC);
    let x = fixstr("x");
    let cases: Vec<(Vec<u8>, Position)> = vec![
        // Duplicate __Serialized__.
        (cat(&[b"\x82", &s, b"\x01", &s, b"\x01"]), at(0, 0)),
        // Both reserved keys.
        (cat(&[b"\x82", &s, b"\x01", &p, b"\x01"]), at(0, 0)),
        (cat(&[b"\x82", &p, b"\x01", &s, b"\x01"]), at(0, 0)),
        // An extra string key, before or after.
        (cat(&[b"\x82", &s, b"\x01", &x, b"\x00"]), at(0, 0)),
        (cat(&[b"\x82", &x, b"\x00", &p, b"\x01"]), at(0, 0)),
        // An extra non-string key.
        (cat(&[b"\x82", &s, b"\x01", b"\x05\x00"]), at(0, 0)),
        (cat(&[b"\x82", b"\xc0\x00", &s, b"\x01"]), at(0, 0)),
        // Nested: the position is the map's.
        (cat(&[b"\x92\x00\x82", &s, b"\x01", &p, b"\x02"]), at(0, 2)),
        // Reserved key with a non-offset value and an extra key.
        (cat(&[b"\x82", &s, b"\xc0", &x, b"\x00"]), at(0, 0)),
    ];
    let sh = sub(&[0]);
    for limits in presets() {
        for (input, pos) in &cases {
            assert_eq!(
                loads_err(&[input, &sh, &sh], &limits),
                MessageError::AmbiguousReference { at: *pos },
                "input {input:02x?}"
            );
        }
        // Non-string keys alone are fine (Dask allows them), and a *bin*
        // "__Serialized__" key is not a placeholder.
        let mut bin_key = vec![0x81, 0xc4, SER.len() as u8];
        bin_key.extend_from_slice(SER.as_bytes());
        bin_key.push(0x01);
        let l = loads_bounded(&[&bin_key, &sh], &limits).unwrap();
        assert!(l.blocks.is_empty());
        assert_eq!(l.orphans, vec![1]);
        let l = loads_bounded(&[b"\x82\x01\xa1a\xc3\x02"], &limits).unwrap();
        assert_eq!(
            l.value,
            Value::Map(vec![
                (Value::int(1u8), Value::str("a")),
                (Value::Bool(true), Value::int(2u8))
            ])
        );
    }
}

#[test]
fn h10_offset_past_the_frame_list_is_offset_out_of_range() {
    let sh = sub(&[0]);
    for limits in presets() {
        for (offset_bytes, offset) in [
            (vec![0x03], 3u64),
            (vec![0x05], 5),
            (vec![0x7f], 127),
            (vec![0xcd, 0xff, 0xff], 0xffff),
            (vec![0xce, 0xff, 0xff, 0xff, 0xff], u32::MAX as u64),
            (
                vec![0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                u64::MAX,
            ),
            (
                vec![0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                i64::MAX as u64,
            ),
        ] {
            for key in [SER, PIC] {
                assert_eq!(
                    loads_err(&[&ph(key, &offset_bytes), &sh, &sh], &limits),
                    MessageError::OffsetOutOfRange { offset, frames: 3 }
                );
            }
        }
    }
}

#[test]
fn h11_offset_true_zero_negative_float_nil_is_invalid_offset() {
    let sh = sub(&[0]);
    let bad: &[&[u8]] = &[
        b"\xc3",                                 // true (Dask reads it as 1)
        b"\xc2",                                 // false
        b"\x00",                                 // 0: the main header itself
        b"\xcc\x00",                             // 0 as uint8
        b"\xcf\x00\x00\x00\x00\x00\x00\x00\x00", // 0 as uint64
        b"\xff",                                 // -1
        b"\xd0\x80",                             // -128
        b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", // i64::MIN
        b"\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00", // 1.0
        b"\xca\x3f\x80\x00\x00",                 // 1.0f32
        b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", // NaN
        b"\xc0",                                 // nil
        b"\xa1\x31",                             // "1"
        b"\xc4\x01\x01",                         // b"\x01"
        b"\x91\x01",                             // [1]
        b"\x80",                                 // {}
    ];
    for limits in presets() {
        for key in [SER, PIC] {
            for offset in bad {
                assert_eq!(
                    loads_err(&[&ph(key, offset), &sh, &sh], &limits),
                    MessageError::InvalidOffset { at: at(0, 0) },
                    "{key} offset {offset:02x?}"
                );
                // Nested: the position of the placeholder map.
                let nested = cat(&[b"\x82\xa1k\x00\xa1v", &ph(key, offset)]);
                assert_eq!(
                    loads_err(&[&nested, &sh, &sh], &limits),
                    MessageError::InvalidOffset { at: at(0, 6) },
                    "{key} offset {offset:02x?}"
                );
            }
        }
    }
}

#[test]
fn h12_two_placeholders_on_one_block_is_frame_aliased() {
    let s1 = ph(SER, &[1]);
    let p1 = ph(PIC, &[1]);
    let s2 = ph(SER, &[2]);
    let one = sub(&[1]);
    let zero = sub(&[0]);
    for limits in presets() {
        assert_eq!(
            loads_err(&[&cat(&[b"\x92", &s1, &s1]), &one, b"payload"], &limits),
            MessageError::FrameAliased { frame: 1 }
        );
        assert_eq!(
            loads_err(&[&cat(&[b"\x92", &s1, &p1]), &zero], &limits),
            MessageError::FrameAliased { frame: 1 }
        );
        // A placeholder pointing at another block's payload frame.
        assert_eq!(
            loads_err(&[&cat(&[b"\x92", &s1, &s2]), &one, &zero], &limits),
            MessageError::FrameAliased { frame: 2 }
        );
        // Amplification: 10 000 placeholders on one frame stop at the second.
        let mut many = vec![0xdc];
        many.extend_from_slice(&10_000u16.to_be_bytes());
        for _ in 0..10_000 {
            many.extend_from_slice(&s1);
        }
        assert_eq!(
            loads_err(&[&many, &zero], &limits),
            MessageError::FrameAliased { frame: 1 }
        );
    }
}

#[test]
fn h13_sub_frame_range_overlapping_another_sub_header_is_frame_aliased() {
    let two = sub(&[2]);
    let zero = sub(&[0]);
    for limits in presets() {
        // Block at 1 claims 1..=3, then a placeholder points at 3.
        assert_eq!(
            loads_err(
                &[
                    &cat(&[b"\x92", &ph(SER, &[1]), &ph(SER, &[3])]),
                    &two,
                    b"a",
                    &zero
                ],
                &limits
            ),
            MessageError::FrameAliased { frame: 3 }
        );
        // Block at 2 first, then a block at 1 whose range covers 2.
        assert_eq!(
            loads_err(
                &[
                    &cat(&[b"\x92", &ph(SER, &[2]), &ph(PIC, &[1])]),
                    &two,
                    &zero,
                    b"a"
                ],
                &limits
            ),
            MessageError::FrameAliased { frame: 2 }
        );
    }
}

#[test]
fn h14_orphan_frames_are_reported_not_attached() {
    let frame0 = cat(&[b"\x82\xa1a", &ph(SER, &[2]), b"\xa1b\xc0"]);
    for limits in presets() {
        let l = loads_bounded(
            &[&frame0, b"orphan", &sub(&[1]), b"payload", b"orphan too"],
            &limits,
        )
        .unwrap();
        assert_eq!(
            l.blocks,
            vec![BlockRef {
                kind: BlockKind::Serialized,
                offset: 2,
                num_sub_frames: 1
            }]
        );
        assert_eq!(l.orphans, vec![1, 4]);
        let Value::Serialized(block) = l.value.get("a").unwrap() else {
            panic!()
        };
        assert_eq!(block.frames(), &frames(&[b"payload"])[..]);
    }
}

#[test]
fn h15_sub_frames_past_the_end_is_sub_frame_range_out_of_bounds() {
    for limits in presets() {
        for (n_bytes, n) in [
            (vec![0x05], 5u64),
            (vec![0x02], 2),
            (vec![0xce, 0xff, 0xff, 0xff, 0xff], u32::MAX as u64),
        ] {
            assert_eq!(
                loads_err(&[&ph(SER, &[1]), &sub(&n_bytes), b"p"], &limits),
                MessageError::SubFrameRangeOutOfBounds {
                    offset: 1,
                    num_sub_frames: n,
                    frames: 3
                }
            );
        }
        // Exactly up to the end is fine.
        let l = loads_bounded(&[&ph(SER, &[1]), &sub(&[1]), b"p"], &limits).unwrap();
        assert_eq!(l.blocks[0].num_sub_frames, 1);
    }
}

#[test]
fn h16_num_sub_frames_negative_or_not_an_int_is_invalid_sub_frame_count() {
    let bad: &[&[u8]] = &[
        b"\xff",                                 // -1
        b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", // i64::MIN
        b"\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00", // 1.0
        b"\xc0",                                 // nil
        b"\xc3",                                 // true
        b"\xa1\x31",                             // "1"
        b"\x91\x01",                             // [1]
    ];
    for limits in presets() {
        for n in bad {
            assert_eq!(
                loads_err(&[&ph(SER, &[1]), &sub(n), b"p"], &limits),
                MessageError::InvalidSubFrameCount { frame: 1 },
                "num-sub-frames {n:02x?}"
            );
        }
        // Missing.
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), b"\x81\xa1x\x00"], &limits),
            MessageError::InvalidSubFrameCount { frame: 1 }
        );
        // Huge: refused by checked range arithmetic, not wrapped.
        assert_eq!(
            loads_err(
                &[
                    &ph(SER, &[1]),
                    &sub(b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
                    b"p"
                ],
                &limits
            ),
            MessageError::SubFrameRangeOutOfBounds {
                offset: 1,
                num_sub_frames: u64::MAX,
                frames: 3
            }
        );
        // A sub-header that is not a map.
        for not_map in [&b"\x90"[..], b"\xc0", b"\x01", b"\xa3abc"] {
            assert_eq!(
                loads_err(&[&ph(SER, &[1]), not_map], &limits),
                MessageError::SubHeaderNotMap { frame: 1 }
            );
        }
    }
}

// ---- dask_compat(): real traffic at scale, memory bounded by bytes received ------

/// A `scatter` of `keys` small values as Dask's client writes it: frame 0
/// maps each key to a placeholder, and each value is a block of a pickle
/// sub-header and one payload frame: 2 × keys + 1 frames.
fn scatter_message(keys: usize) -> Envelope {
    let header =
        Bytes::from_static(b"\x83\xaaserializer\xa6pickle\xa9writeable\x90\xaenum-sub-frames\x01");
    let payload = Bytes::from_static(b"\x80\x05K\x07.");
    // The sub-header exactly as Dask writes it (kept as its wire bytes).
    let header = wire_header(&header);
    let data = (0..keys)
        .map(|i| {
            let block = Block::new(header.clone(), [payload.clone()]);
            (
                Value::from(format!("int-{i:032x}")),
                Value::Serialized(Box::new(block)),
            )
        })
        .collect();
    let msg = Value::Map(vec![
        (Value::str("op"), Value::str("scatter")),
        (Value::str("data"), Value::Map(data)),
        (Value::str("broadcast"), Value::Bool(false)),
    ]);
    Envelope::new(encode(&msg).unwrap()).unwrap()
}

/// A header as it came off the wire (decoded from its bytes).
fn wire_header(raw: &Bytes) -> Header {
    let frames = vec![
        Bytes::from_static(b"\x81\xae__Serialized__\x01"),
        raw.clone(),
        Bytes::new(),
    ];
    match decode_detailed(&frames, &compat()).unwrap().value {
        Value::Serialized(b) => b.header().clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn compat_scatter_of_a_million_keys_is_accepted_in_memory_linear_in_its_bytes() {
    let keys = 1_000_000;
    let env = scatter_message(keys);
    let n = env.frames().len();
    assert_eq!(n, 2 * keys + 1);
    let wire = env.to_bytes();
    // The envelope: a length and a `Bytes` handle per frame, about 6 × the
    // 8 bytes of length table each frame costs on the wire.
    let per_frame = 8 + std::mem::size_of::<Bytes>();
    let (back, used) =
        bounded(SMALL + n * per_frame, || Envelope::decode(&wire, &compat())).unwrap();
    assert_eq!(used, wire.len());
    assert_eq!(back.frames(), env.frames());
    // The message layer: a block per key (about 330 bytes each: the map
    // entry, the boxed block and its frame handles), within a small
    // multiple of the message's own bytes (about 125 bytes a key here).
    let loaded = bounded(3 * wire.len(), || decode_detailed(back.frames(), &compat())).unwrap();
    assert_eq!(loaded.blocks.len(), keys);
    assert!(loaded.orphans.is_empty());
    assert_eq!(loaded.blocks[keys - 1].offset, 2 * keys - 1);
    // strict() refuses it before reading the length table.
    assert_eq!(
        Envelope::decode(&wire, &strict()).unwrap_err(),
        EnvelopeError::FrameCountExceeded {
            declared: n as u64,
            limit: 1024
        }
    );
}

#[test]
#[cfg(feature = "transport")]
fn compat_scatter_of_a_million_keys_through_the_transport() {
    use framewire::transport::{Connection, FrameCodec};
    use futures_util::StreamExt;
    let env = scatter_message(1_000_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Connection (default limits = dask_compat) both ways.
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut tx = Connection::new(a);
        let mut rx = Connection::new(b);
        let sent = env.clone();
        let send = tokio::spawn(async move { tx.send(sent).await });
        let got = rx.recv().await.expect("a message").unwrap();
        send.await.unwrap().unwrap();
        assert_eq!(got, env);
        // FrameCodec reads what a Connection writes.
        let (a, b) = tokio::io::duplex(1 << 20);
        let mut tx2 = Connection::new(a);
        let sent = env.clone();
        let send = tokio::spawn(async move { tx2.send(sent).await });
        let mut framed = FrameCodec::builder().new_read(b);
        let got = framed.next().await.expect("a message").unwrap();
        send.await.unwrap().unwrap();
        assert_eq!(got, env);
    });
}

// ---- Limits: just at the limit accepted, just above refused ---------------------

#[test]
fn limit_max_frames_boundary() {
    let mut custom = strict();
    custom.max_frames = 3;
    assert_eq!(compat().max_frames, u32::MAX as usize); // see compat_*
    for limits in [custom, strict()] {
        let n = limits.max_frames;
        let mut lens = vec![0u64; n];
        lens[0] = 1;
        let mut buf = prelude(8 + 8 * n as u64 + 1, n as u64, &lens);
        buf.push(0xc0);
        let wire = Bytes::from(buf);
        let bound = SMALL + n * (8 + std::mem::size_of::<Bytes>());
        let (env, _) = bounded(bound, || Envelope::decode(&wire, &limits))
            .unwrap_or_else(|e| panic!("{n} frames refused: {e}"));
        assert_eq!(env.frames().len(), n);
        let mut lens = vec![0u64; n + 1];
        lens[0] = 1;
        let mut buf = prelude(8 + 8 * (n as u64 + 1) + 1, n as u64 + 1, &lens);
        buf.push(0xc0);
        both_refuse(
            &buf,
            &limits,
            EnvelopeError::FrameCountExceeded {
                declared: n as u64 + 1,
                limit: n,
            },
        );
    }
}

#[test]
fn limit_max_frame_len_boundary() {
    let mut custom = strict();
    custom.max_frame_len = 100;
    assert_eq!(compat().max_frame_len, u64::MAX); // no limit: see compat_*
    for limits in [custom, strict()] {
        let l = limits.max_frame_len;
        // At the limit: the prelude is accepted; with the bytes present the
        // whole message decodes (only for limits small enough to materialise).
        let head = prelude(24 + 1, 2, &[1, l]);
        assert!(matches!(
            parse(&head, &limits).unwrap(),
            PreludeStatus::Complete(_)
        ));
        if l <= 16 << 20 {
            let mut buf = head.clone();
            buf.push(0xc0);
            buf.resize(buf.len() + l as usize, 0xab);
            let (env, used) = Envelope::decode(&Bytes::from(buf.clone()), &limits).unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(env.frames()[1].len() as u64, l);
        }
        let head = prelude(24 + 1, 2, &[1, l + 1]);
        both_refuse(
            &head,
            &limits,
            EnvelopeError::FrameTooLarge {
                index: 1,
                declared: l + 1,
                limit: l,
            },
        );
    }
}

#[test]
fn limit_max_message_len_boundary() {
    let mut custom = strict();
    custom.max_frame_len = 100;
    custom.max_message_len = 250;
    assert_eq!(compat().max_message_len, u64::MAX); // no limit: see compat_*
    for limits in [custom, strict()] {
        let (f, m) = (limits.max_frame_len, limits.max_message_len);
        // Frames of at most f bytes that add up to exactly m.
        let mut lens = vec![1u64];
        let mut left = m - 1;
        while left > 0 {
            let x = left.min(f);
            lens.push(x);
            left -= x;
        }
        let n = lens.len() as u64;
        let head = prelude(8 + 8 * n + 1, n, &lens);
        assert!(matches!(
            parse(&head, &limits).unwrap(),
            PreludeStatus::Complete(_)
        ));
        if m <= 1 << 20 {
            let mut buf = head.clone();
            buf.push(0xc0);
            buf.resize(buf.len() + (m - 1) as usize, 0);
            let (env, used) = Envelope::decode(&Bytes::from(buf.clone()), &limits).unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(env.frames().iter().map(|f| f.len() as u64).sum::<u64>(), m);
        }
        // One more byte in a frame that still has room, or one more frame.
        let mut over = lens.clone();
        over.push(1);
        let n = over.len() as u64;
        both_refuse(
            &prelude(8 + 8 * n + 1, n, &over),
            &limits,
            EnvelopeError::MessageTooLarge {
                declared: m + 1,
                limit: m,
            },
        );
    }
}

#[test]
fn limit_max_header_len_boundary() {
    let mut custom = strict();
    custom.max_header_len = 40;
    for limits in [custom, strict()] {
        let l = limits.max_header_len as usize;
        // A bin32 of l - 5 bytes is exactly l bytes of msgpack.
        let frame = |len: usize| {
            let mut f = vec![0xc6];
            f.extend_from_slice(&((len - 5) as u32).to_be_bytes());
            f.resize(len, 0x5a);
            f
        };
        let v = loads_bounded(&[&frame(l)], &limits).unwrap().value;
        assert!(matches!(v, Value::Bin(b) if b.len() == l - 5));
        assert_eq!(
            loads_err(&[&frame(l + 1)], &limits),
            MessageError::Msgpack(MsgpackError::HeaderTooLarge {
                frame: 0,
                len: l as u64 + 1,
                limit: l as u64
            })
        );
        // The same limit applies to sub-headers.
        let mut sh = sub(&[0]);
        sh.resize(l, 0);
        // (padding after the map makes it invalid, but the size check comes first)
        let mut sh_over = sh.clone();
        sh_over.push(0);
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), &sh_over], &limits),
            MessageError::Msgpack(MsgpackError::HeaderTooLarge {
                frame: 1,
                len: l as u64 + 1,
                limit: l as u64
            })
        );
        assert_eq!(
            loads_err(&[&ph(SER, &[1]), &sh], &limits),
            MessageError::Msgpack(MsgpackError::TrailingBytes(at(1, 17)))
        );
    }
}

#[test]
fn limit_max_depth_boundary() {
    let mut zero = strict();
    zero.max_depth = 0;
    let mut one = strict();
    one.max_depth = 1;
    for limits in [zero, one, strict(), compat()] {
        let d = limits.max_depth;
        let v = loads_deep(&nested_arrays(d), &limits).unwrap().value;
        drop(v);
        assert_eq!(
            loads_deep(&nested_arrays(d + 1), &limits).unwrap_err(),
            MessageError::Msgpack(MsgpackError::DepthExceeded {
                at: at(0, d),
                limit: d
            })
        );
        // Empty containers count too.
        let mut empty_inner = vec![0x91; d];
        empty_inner.push(0x90);
        assert_eq!(
            loads_deep(&empty_inner, &limits).unwrap_err(),
            MessageError::Msgpack(MsgpackError::DepthExceeded {
                at: at(0, d),
                limit: d
            })
        );
    }
}

#[test]
fn limit_max_msgpack_items_boundary() {
    let mut one = strict();
    one.max_msgpack_items = 1;
    let mut small = strict();
    small.max_msgpack_items = 10;
    for limits in [one, small, strict()] {
        let n = limits.max_msgpack_items;
        // An array32 of n - 1 zeros is exactly n items.
        let arr = |items: usize| {
            let mut f = vec![0xdd];
            f.extend_from_slice(&(items as u32).to_be_bytes());
            f.resize(5 + items, 0);
            f
        };
        let ok = arr(n - 1);
        let fr = frames(&[&ok]);
        let bound = SMALL + ok.len() + items_cost(n);
        let v = bounded(bound, || decode_detailed(&fr, &limits))
            .unwrap()
            .value;
        assert_eq!(v.as_array().unwrap().len(), n - 1);
        let over = arr(n);
        let fr = frames(&[&over]);
        let bound = SMALL + over.len() + items_cost(n);
        assert_eq!(
            bounded(bound, || decode_detailed(&fr, &limits).map(|_| ())).unwrap_err(),
            MessageError::Msgpack(MsgpackError::ItemBudgetExceeded {
                at: at(0, 4 + n),
                limit: n
            })
        );
        // The budget is per frame: a sub-header has its own.
        let mut sh = vec![0x81];
        sh.extend(fixstr("num-sub-frames"));
        sh.push(0x00);
        if n >= 3 {
            let l = loads_bounded(&[&ph(SER, &[1]), &sh], &limits).unwrap();
            assert_eq!(l.blocks.len(), 1);
        }
    }
}

#[test]
fn limit_prealloc_cap_bounds_reservation_not_acceptance() {
    // 65 536 items declared, the bytes present, the first item invalid: only
    // the reservation ahead of data is allocated before the error.
    let mut input = vec![0xdd, 0x00, 0x01, 0x00, 0x00];
    input.resize(5 + 65_536, 0xc1);
    let fr = vec![Bytes::from(input)];
    let mut peaks = Vec::new();
    for cap in [0usize, 4096, 64 << 10, 1 << 20] {
        let mut limits = compat();
        limits.prealloc_cap = cap;
        let (r, stats) = measure(|| decode_detailed(&fr, &limits).map(|_| ()));
        assert_eq!(
            r.unwrap_err(),
            MessageError::Msgpack(MsgpackError::InvalidMarker {
                at: at(0, 5),
                byte: 0xc1
            })
        );
        assert!(
            stats.peak <= cap + 4096,
            "prealloc_cap {cap}: {} bytes reserved ahead of the data",
            stats.peak
        );
        peaks.push(stats.peak);
    }
    // The cap is actually used (1 MiB lets it reserve more than 64 KiB).
    assert!(peaks[3] > peaks[2], "{peaks:?}");
    // Acceptance does not depend on it.
    let mut valid = vec![0xdd, 0x00, 0x01, 0x00, 0x00];
    valid.resize(5 + 65_536, 0x07);
    let fr = vec![Bytes::from(valid)];
    for cap in [0usize, 1, 4096, 1 << 20] {
        let mut limits = compat();
        limits.prealloc_cap = cap;
        let v = decode_detailed(&fr, &limits).unwrap().value;
        assert_eq!(v.as_array().unwrap().len(), 65_536);
    }
}

// ---- encode side ------------------------------------------------------------------

#[test]
fn encode_plain_map_with_reserved_key_is_reserved_key() {
    for (key, expected) in [(SER, "__Serialized__"), (PIC, "__Pickled__")] {
        let m = Value::map_of([(key, Value::int(1u8))]);
        assert_eq!(
            encode(&m).unwrap_err(),
            EncodeError::ReservedKey { key: expected }
        );
        let nested = Value::Array(vec![
            Value::Nil,
            Value::map_of([("a", Value::Nil), (key, Value::Nil)]),
        ]);
        assert_eq!(
            encode(&nested).unwrap_err(),
            EncodeError::ReservedKey { key: expected }
        );
        // Inside a block's header too.
        let block = Block::new(
            Header::new(Value::map_of([(key, Value::Nil)])),
            [Bytes::from_static(b"x")],
        );
        assert_eq!(
            encode(&Value::Serialized(Box::new(block))).unwrap_err(),
            EncodeError::ReservedKey { key: expected }
        );
    }
    // A bin key with the same bytes is not reserved.
    let m = Value::Map(vec![(
        Value::bin(Bytes::from_static(SER.as_bytes())),
        Value::Nil,
    )]);
    assert!(encode(&m).is_ok());
}

fn deep(depth: usize, map: bool) -> Value {
    let mut v = Value::int(0u8);
    for _ in 0..depth {
        v = if map {
            Value::Map(vec![(Value::Nil, v)])
        } else {
            Value::Array(vec![v])
        };
    }
    v
}

#[test]
fn encode_1025_deep_value_is_depth_exceeded() {
    for map in [false, true] {
        let ok = deep(1024, map);
        let frames = encode(&ok).unwrap();
        assert_eq!(decode_detailed(&frames, &compat()).unwrap().value, ok);
        assert_eq!(
            encode(&deep(1025, map)).unwrap_err(),
            EncodeError::DepthExceeded { limit: 1024 }
        );
    }
    // A block's sub-header has the same limit.
    let header = Value::Map(vec![(Value::str("deep"), deep(1024, false))]);
    let block = Block::new(Header::new(header), []);
    assert_eq!(
        encode(&Value::Serialized(Box::new(block))).unwrap_err(),
        EncodeError::DepthExceeded { limit: 1024 }
    );
}

#[test]
fn encode_zero_frames_and_first_read_out_of_range() {
    assert_eq!(Envelope::new(vec![]).unwrap_err(), EncodeError::NoFrames);
    assert_eq!(
        Envelope::with_first_read_frames(vec![Bytes::new()], 2).unwrap_err(),
        EncodeError::FirstReadOutOfRange { k: 2, frames: 1 }
    );
}

/// Regression for the first 20-minute ASan run of `msgpack_decode`
/// (fuzz/artifacts/msgpack_decode/crash-f6b3560…): a frame 0 of about
/// 3 KB that opens with `93` (fixarray of 3) and then nests `91`
/// (fixarray of 1) about a thousand times, with a few `c4 01 93` (bin8 of
/// one byte) leaves, decodes under `dask_compat()` (depth ≤ 1024) and then
/// overflowed the target's 128 KiB thread *while being dropped*: decoding
/// is iterative, dropping a `Value` recurses once per level. Not a decoder
/// bug: stack use is bounded by `max_depth` (SPEC.md §7), and the fuzz
/// target now gives `dask_compat()` values the 1 MiB SPEC.md asks for. This
/// checks that bound: the same shape, 1 000 levels, decoded, compared,
/// re-encoded and dropped on 1 MiB.
#[test]
fn fuzz_msgpack_decode_1000_deep_fixarray_chain_fits_the_documented_stack() {
    let mut bytes = vec![0x93];
    bytes.extend(std::iter::repeat_n(0x91, 999));
    bytes.extend_from_slice(b"\xc4\x01\x93"); // the innermost: bin8 of one byte
    bytes.extend_from_slice(b"\xc0\xc0"); // the outer array's other two items
    let ok = on_small_stack(1 << 20, move || {
        let frames = vec![Bytes::from(bytes)];
        let v = framewire::message::decode(&frames, &compat())
            .expect("1 000 levels are within dask_compat");
        let again = encode(&v).expect("re-encodes");
        assert_eq!(again, frames, "byte for byte");
        let back = framewire::message::decode(&again, &compat()).unwrap();
        assert_eq!(back, v);
        drop((v, back));
        true
    });
    assert!(ok);
    // Under strict() (depth 64) the same bytes are refused before any of it is built.
    let mut strict = vec![0x93];
    strict.extend(std::iter::repeat_n(0x91, 999));
    strict.extend_from_slice(b"\xc4\x01\x93\xc0\xc0");
    assert!(matches!(
        framewire::message::decode(&[Bytes::from(strict)], &Limits::strict()),
        Err(MessageError::Msgpack(MsgpackError::DepthExceeded {
            limit: 64,
            ..
        }))
    ));
}

/// An iterated collection's header takes two msgpack containers per level
/// (its map and its `sub-headers` array): `serialize` refuses one that
/// msgpack-python could not read (over 1024 nested containers) instead of
/// writing it. The deepest it accepts goes through `dumps`, `loads` and
/// `deserialize` whole.
#[test]
fn iterated_nesting_stops_where_the_header_would_exceed_1024_containers() {
    use framewire::serialize::{
        deserialize, serialize, DeserializeOptions, IterateCollection, SerializeOptions,
    };
    let nested = |levels: usize| {
        let mut v = Value::from(7u8);
        for _ in 0..levels {
            v = Value::Array(vec![v]);
        }
        v
    };
    let mut opts = SerializeOptions::default();
    opts.iterate = IterateCollection::Always;
    // Level L's map sits in 2L containers; the innermost leaf's header in
    // 2 × 511 = 1022, its entries' values in 1023.
    let deepest = nested(511);
    // `serialize` recurses once per iterated level (SPEC.md §7).
    on_small_stack(8 << 20, move || {
        let block = serialize(&deepest, &opts).unwrap();
        let frames = framewire::dumps(&Value::Serialized(Box::new(block))).unwrap();
        let Value::Serialized(sent) = decode_detailed(&frames, &compat()).unwrap().value else {
            panic!("one block");
        };
        let back = deserialize(&sent, &DeserializeOptions::with_limits(compat())).unwrap();
        assert!(back == deepest, "511 iterated levels round-trip");
        assert_eq!(
            serialize(&nested(512), &opts).unwrap_err(),
            EncodeError::DepthExceeded { limit: 1024 }
        );
    });
}
