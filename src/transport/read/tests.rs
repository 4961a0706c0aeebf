//! The reader without IO: real captures fed at every split point (one
//! byte per read, a poll between reads), through every kind of reader,
//! must give the messages (or heads and bytes) that `Envelope::decode`
//! finds in them, and the same errors.

use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

use super::{Event, FrameReader, Need, Place, Placement, Progress, Target};
use crate::envelope::{Envelope, EnvelopeError};
use crate::limits::Limits;
use crate::protocol::DecodeError;
use crate::transport::checksum;
use crate::transport::error::TransportError;
use crate::transport::write;

/// Every capture of a real Dask stream in the repository: each
/// `wire.bin` (one direction of a TCP connection, one or more messages)
/// and the handshakes.
fn captures() -> Vec<(PathBuf, Bytes)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, Bytes)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_str().unwrap();
            if path.is_dir() {
                walk(&path, out);
            } else if name == "wire.bin"
                || name.ends_with("_to_server.bin")
                || name.ends_with("_to_client.bin")
            {
                out.push((path.clone(), Bytes::from(std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/captures"),
        &mut out,
    );
    assert!(out.len() > 90, "captures missing: {}", out.len());
    out
}

/// The messages of a stream, by the slice decoder (which no reader uses).
fn decode_all(wire: &Bytes) -> Vec<Envelope> {
    let mut out = Vec::new();
    let mut rest = wire.clone();
    while !rest.is_empty() {
        let (env, used) = Envelope::decode(&rest, &Limits::dask_compat()).unwrap();
        out.push(env);
        rest = rest.slice(used..);
    }
    out
}

/// What a reader gave for a stream.
#[derive(Debug, PartialEq)]
enum Got {
    Message(Envelope),
    /// A relay's head: frame 0, frames, wire length.
    Head(Vec<u8>, u64, u64),
    /// How the stream ended (`end`), or the error a poll returned.
    End(Result<(), String>),
}

fn err(e: TransportError) -> String {
    format!("{e:?}")
}

/// Drives `reader` over `input` as a driver does: poll, and on `Need`
/// read at most `piece` bytes into the reader's target (never more than
/// the target takes), until the input is used up. A relay reader's
/// forwarded bytes are returned apart.
fn drive(reader: &mut FrameReader, input: &[u8], piece: usize) -> (Vec<Got>, Vec<u8>) {
    let mut shared = BytesMut::new();
    let (mut got, mut forwarded) = (Vec::new(), Vec::new());
    let mut at = 0;
    loop {
        match reader.poll(&mut shared) {
            Err(e) => {
                got.push(Got::End(Err(err(e))));
                return (got, forwarded);
            }
            Ok(Event::Message(env)) => got.push(Got::Message(env)),
            Ok(Event::Head(h)) => {
                got.push(Got::Head(h.frame0().to_vec(), h.frames(), h.wire_len()))
            }
            Ok(Event::Forward(bytes)) => forwarded.extend_from_slice(&bytes),
            Ok(Event::Need(need)) => {
                assert!(need.more() >= 1, "{need:?}");
                if at == input.len() {
                    got.push(Got::End(reader.end(&shared).map_err(err)));
                    return (got, forwarded);
                }
                let rest = &input[at..];
                let n = match reader.target(&mut shared).unwrap() {
                    Target::Buf { buf, limit } => {
                        // A read takes what fits, as `read_buf` does.
                        let room = (buf.capacity() - buf.len()).max(64);
                        let n = piece.min(rest.len()).min(limit).min(room);
                        assert!(n > 0, "a target with no room");
                        buf.put_slice(&rest[..n]);
                        n
                    }
                    Target::Slice(slice) => {
                        let n = piece.min(rest.len()).min(slice.len());
                        slice[..n].copy_from_slice(&rest[..n]);
                        n
                    }
                };
                reader.filled(n);
                at += n;
            }
        }
    }
}

fn connection(limits: Limits) -> FrameReader {
    FrameReader::messages(limits, Placement::connection(true, 1 << 30))
}

/// Every kind of message reader: the codec's, a connection's (large
/// frames in their own buffers) and, with feature `mmap`, one that spills
/// large runs to a file.
fn message_readers(limits: &Limits) -> Vec<(&'static str, FrameReader)> {
    #[cfg_attr(not(all(target_os = "linux", feature = "mmap")), allow(unused_mut))]
    let mut readers = vec![
        ("codec", FrameReader::shared_only(limits.clone())),
        ("connection", connection(limits.clone())),
    ];
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    readers.push((
        "spill",
        FrameReader::messages(
            limits.clone(),
            Placement::connection(true, 1 << 30).spill(Some((std::env::temp_dir(), 1))),
        ),
    ));
    readers
}

/// What each kind of reader must give for `input`: the messages (and a
/// clean end), or for a relay the heads and every byte forwarded.
fn check_every_reader(name: &str, input: &Bytes, piece: usize) {
    let want = decode_all(input);
    let mut want_got: Vec<Got> = want.iter().cloned().map(Got::Message).collect();
    want_got.push(Got::End(Ok(())));
    for (kind, mut reader) in message_readers(&Limits::dask_compat()) {
        let (got, forwarded) = drive(&mut reader, input, piece);
        assert!(forwarded.is_empty());
        assert!(got == want_got, "{name}, {kind} reader, pieces of {piece}");
        let s = reader.stats();
        assert_eq!(s.messages_received, want.len() as u64);
        assert_eq!(s.bytes_received, input.len() as u64);
    }
    let mut relay = FrameReader::relay(Limits::dask_compat());
    let (got, forwarded) = drive(&mut relay, input, piece);
    let mut heads: Vec<Got> = want
        .iter()
        .map(|e| {
            Got::Head(
                e.frames()[0].to_vec(),
                e.frames().len() as u64,
                e.wire_len(),
            )
        })
        .collect();
    heads.push(Got::End(Ok(())));
    assert!(got == heads, "{name}, relay, pieces of {piece}");
    assert!(
        forwarded == input[..],
        "{name}, relay, pieces of {piece}: bytes forwarded"
    );
    assert_eq!(relay.stats().bytes_received, input.len() as u64);
}

#[test]
fn every_capture_one_byte_per_read_through_every_reader() {
    for (path, wire) in captures() {
        check_every_reader(&path.display().to_string(), &wire, 1);
    }
}

#[test]
fn every_capture_in_reads_of_many_sizes_and_all_back_to_back() {
    let captures = captures();
    let mut stream = BytesMut::new();
    for (path, wire) in &captures {
        for piece in [2, 3, 7, 16, 1000, 64 << 10, usize::MAX] {
            check_every_reader(&path.display().to_string(), wire, piece);
        }
        stream.extend_from_slice(wire);
    }
    // One stream of every capture back to back: each read ends in one
    // message and starts the next.
    let stream = stream.freeze();
    for piece in [1, 5, 4096, usize::MAX] {
        check_every_reader("all captures", &stream, piece);
    }
}

/// The captures cut at every byte: every reader reports the same
/// truncation (the offset reached in the message cut, and its size or the
/// prelude's), after the same messages.
#[test]
fn a_stream_cut_anywhere_is_the_same_truncation_from_every_reader() {
    let captures = captures();
    let (_, a) = captures
        .iter()
        .find(|(p, _)| p.ends_with("task_with_numpy/wire.bin"))
        .unwrap();
    let (_, b) = captures
        .iter()
        .find(|(p, _)| p.ends_with("reply_pong/wire.bin"))
        .unwrap();
    let wire = [&a[..], &b[..]].concat();
    for cut in 0..wire.len() {
        let input = &wire[..cut];
        let mut results = Vec::new();
        for (kind, mut reader) in message_readers(&Limits::dask_compat()) {
            let (got, _) = drive(&mut reader, input, 1);
            // The messages as `Head`s, to compare with the relay.
            let got: Vec<Got> = got
                .into_iter()
                .map(|g| match g {
                    Got::Message(e) => Got::Head(
                        e.frames()[0].to_vec(),
                        e.frames().len() as u64,
                        e.wire_len(),
                    ),
                    other => other,
                })
                .collect();
            results.push((kind, got));
        }
        let (_, first) = &results[0];
        for (kind, got) in &results {
            assert!(got == first, "cut at {cut}: {kind} {got:?} vs {first:?}");
        }
        // A relay hands back the same heads, and the head of the message
        // cut if it arrived, then the same end; it forwards the bytes of
        // each message whose head it handed back.
        let mut relay = FrameReader::relay(Limits::dask_compat());
        let (mut got, forwarded) = drive(&mut relay, input, 1);
        assert!(input.starts_with(&forwarded));
        if got.len() > first.len() {
            let Got::Head(frame0, ..) = got.remove(first.len() - 1) else {
                panic!("cut at {cut}: {got:?}")
            };
            assert!(forwarded.len() > frame0.len(), "cut at {cut}");
        }
        assert!(&got == first, "cut at {cut}: relay {got:?} vs {first:?}");
        let end = first.last().unwrap();
        let boundary = cut == 0 || cut == a.len();
        assert_eq!(
            matches!(end, Got::End(Ok(()))),
            boundary,
            "cut at {cut}: {end:?}"
        );
    }
}

/// A bad prelude after good messages: every reader hands back the
/// messages before it, then the same error, then nothing.
#[test]
fn a_bad_prelude_is_the_same_error_from_every_reader() {
    let good = Envelope::new(vec![Bytes::from_static(b"\xa2OK")])
        .unwrap()
        .to_bytes();
    let prelude = |n: u64, count: u64, lens: &[u64]| {
        let mut b = Vec::new();
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        for l in lens {
            b.extend_from_slice(&l.to_le_bytes());
        }
        b
    };
    let cases: Vec<(Vec<u8>, Limits, EnvelopeError)> = vec![
        (
            prelude(16, 0, &[]),
            Limits::dask_compat(),
            EnvelopeError::EmptyMessage,
        ),
        (
            prelude(24, 1 << 60, &[]),
            Limits::dask_compat(),
            EnvelopeError::FrameCountExceeded {
                declared: 1 << 60,
                limit: u32::MAX as usize,
            },
        ),
        (
            prelude(24, 1, &[17 << 20]),
            Limits::strict(),
            EnvelopeError::FrameTooLarge {
                index: 0,
                declared: 17 << 20,
                limit: 16 << 20,
            },
        ),
        (
            prelude(25, 1, &[3]),
            Limits::dask_compat(),
            EnvelopeError::InconsistentPrelude {
                first_read: 25,
                prelude_len: 16,
            },
        ),
    ];
    for (bad, limits, want) in cases {
        let input = [&good[..], &good[..], &bad[..], &[0u8; 40][..]].concat();
        let want_err = err(TransportError::from(want.clone()));
        for piece in [1, usize::MAX] {
            for (kind, mut reader) in every_reader(&limits) {
                let (got, _) = drive(&mut reader, &input, piece);
                assert_eq!(got.len(), 3, "{kind}: {got:?}");
                assert_eq!(got[2], Got::End(Err(want_err.clone())), "{kind}, {want:?}");
                assert!(reader.is_poisoned());
                assert!(matches!(
                    reader.poll(&mut BytesMut::from(&good[..])),
                    Err(TransportError::Poisoned)
                ));
            }
        }
    }
}

fn every_reader(limits: &Limits) -> Vec<(&'static str, FrameReader)> {
    let mut readers = message_readers(limits);
    readers.push(("relay", FrameReader::relay(limits.clone())));
    readers
}

/// Checksum trailers as the connection's writer lays them out: read
/// through every message reader, verified and removed; one flipped bit
/// anywhere in a message is an error.
#[test]
fn checksum_trailers_are_verified_at_every_split_point() {
    let captures = captures();
    let (_, wire) = captures
        .iter()
        .find(|(p, _)| p.ends_with("msgpack_scalar_widths/wire.bin"))
        .unwrap();
    let (_, small) = captures
        .iter()
        .find(|(p, _)| p.ends_with("task_with_numpy/wire.bin"))
        .unwrap();
    let mut sent = BytesMut::new();
    let mut want = Vec::new();
    for env in decode_all(wire).into_iter().chain(decode_all(small)) {
        let count = env.frames().len() + 1;
        let trailer_len = checksum::trailer_len(count);
        write::plan(&env, Some(trailer_len), &mut sent, |buf, _, f| {
            buf.put_slice(f)
        });
        let sums: Vec<u32> = env.frames().iter().map(|f| crc32fast::hash(f)).collect();
        sent.put_slice(&checksum::trailer(
            &sums,
            env.frames().iter().map(|f| f.len() as u64),
        ));
        want.push(Got::Message(env));
    }
    want.push(Got::End(Ok(())));
    let sent = sent.freeze();
    for (kind, mut reader) in message_readers(&Limits::dask_compat()) {
        reader.set_checksums(true);
        for piece in [1, 4096] {
            let (got, _) = drive(&mut reader, &sent, piece);
            assert!(got == want, "{kind}, pieces of {piece}");
        }
    }
    for at in [30, 1000, wire.len() / 2, sent.len() - 3] {
        let mut bad = sent.to_vec();
        bad[at] ^= 0x10;
        for (kind, mut reader) in message_readers(&Limits::dask_compat()) {
            reader.set_checksums(true);
            let (got, _) = drive(&mut reader, &bad, 7);
            match got.last() {
                Some(Got::End(Err(e))) => assert!(
                    e.contains("Checksum") || e.contains("Decode"),
                    "{kind}, bit {at}: {e}"
                ),
                other => panic!("{kind}, bit {at}: {other:?}"),
            }
        }
    }
}

/// Where frames go: small runs in the shared buffer, large ones in a
/// buffer of their own (a connection's) or a spill file, and for a codec
/// everything in the shared buffer.
#[test]
fn needs_name_each_run_and_where_it_goes() {
    let env = Envelope::new(vec![
        Bytes::from_static(b"\x90"),
        Bytes::from(vec![1; 70_000]),
        Bytes::new(),
        Bytes::from(vec![2; 80_000]),
        Bytes::from_static(b"tail"),
    ])
    .unwrap();
    let wire = env.to_bytes();
    let needs = |mut reader: FrameReader| {
        let mut shared = BytesMut::new();
        let mut needs = Vec::new();
        let mut at = 0;
        loop {
            match reader.poll(&mut shared).unwrap() {
                Event::Message(got) => {
                    assert_eq!(got, env);
                    return needs;
                }
                Event::Need(need) => {
                    if let Need::Frames {
                        frames, len, place, ..
                    } = &need
                    {
                        if needs.last() != Some(&(frames.clone(), *len, *place)) {
                            needs.push((frames.clone(), *len, *place));
                        }
                    }
                    let n = match reader.target(&mut shared).unwrap() {
                        Target::Buf { buf, limit } => {
                            let n = limit.min(wire.len() - at).min(1);
                            buf.put_slice(&wire[at..at + n]);
                            n
                        }
                        Target::Slice(s) => {
                            let n = s.len().min(wire.len() - at).min(1);
                            s[..n].copy_from_slice(&wire[at..at + n]);
                            n
                        }
                    };
                    reader.filled(n);
                    at += n;
                }
                other => panic!("{other:?}"),
            }
        }
    };
    assert_eq!(
        needs(connection(Limits::dask_compat())),
        vec![
            (0..1, 1, Place::Shared),
            (1..4, 150_000, Place::Own),
            (4..5, 4, Place::Shared),
        ]
    );
    assert_eq!(
        needs(FrameReader::shared_only(Limits::dask_compat())),
        vec![(0..5, 150_005, Place::Shared)]
    );
    #[cfg(all(target_os = "linux", feature = "mmap"))]
    assert_eq!(
        needs(FrameReader::messages(
            Limits::dask_compat(),
            Placement::connection(true, 1 << 30).spill(Some((std::env::temp_dir(), 100_000))),
        )),
        vec![
            (0..1, 1, Place::Shared),
            (1..4, 150_000, Place::Spill),
            (4..5, 4, Place::Shared),
        ]
    );
}

/// A relay reader reports how far it is into a message, and bytes passed
/// outside the buffer count as forwarded.
#[test]
fn relay_progress_and_passed_bytes() {
    let env = Envelope::new(vec![
        Bytes::from_static(b"\xa4ping"),
        Bytes::from(vec![9; 1000]),
    ])
    .unwrap();
    let wire = env.to_bytes();
    let mut relay = FrameReader::relay(Limits::dask_compat());
    let mut shared = BytesMut::from(&wire[..10]);
    assert!(matches!(
        relay.poll(&mut shared).unwrap(),
        Event::Need(Need::Prelude { more: 6 })
    ));
    assert_eq!(
        relay.progress(shared.len()),
        Some(Progress {
            received: 10,
            total: None
        })
    );
    shared.extend_from_slice(&wire[10..40]);
    assert!(matches!(relay.poll(&mut shared).unwrap(), Event::Head(_)));
    let Event::Forward(head) = relay.poll(&mut shared).unwrap() else {
        panic!()
    };
    assert_eq!(head, wire[..40]);
    let total = wire.len() as u64;
    assert!(
        matches!(relay.poll(&mut shared).unwrap(), Event::Need(Need::Body { more }) if more == total - 40)
    );
    assert_eq!(
        relay.progress(0),
        Some(Progress {
            received: 40,
            total: Some(total)
        })
    );
    relay.passed(500); // spliced, say
    assert_eq!(
        relay.progress(0),
        Some(Progress {
            received: 540,
            total: Some(total)
        })
    );
    shared.extend_from_slice(&wire[540..]);
    let Event::Forward(rest) = relay.poll(&mut shared).unwrap() else {
        panic!()
    };
    assert_eq!(rest, wire[540..]);
    assert_eq!(relay.progress(0), None);
    assert_eq!(relay.stats().messages_received, 1);
}

#[test]
fn truncation_names_the_offset_reached() {
    let wire = Envelope::new(vec![
        Bytes::from_static(b"\xa1a"),
        Bytes::from(vec![0; 100_000]),
    ])
    .unwrap()
    .to_bytes();
    let cut = wire.len() - 10;
    for (kind, mut reader) in message_readers(&Limits::dask_compat()) {
        let (got, _) = drive(&mut reader, &wire[..cut], 333);
        let want = TransportError::Decode(DecodeError::Envelope(EnvelopeError::Truncated {
            offset: cut as u64,
            needed: wire.len() as u64,
            got: cut as u64,
        }));
        assert_eq!(got, vec![Got::End(Err(err(want)))], "{kind}");
    }
}

/// A relay keeps two readers per connection, idle or not (`framewire tap`
/// relays thousands): their state stays small. 104 bytes on 64-bit targets
/// today; 280 when each held its own `Limits` and all of `Stats`.
#[test]
fn a_relay_reader_stays_small() {
    let size = std::mem::size_of::<FrameReader>();
    eprintln!("FrameReader: {size} bytes");
    assert!(size <= 128, "FrameReader is {size} bytes");
}
