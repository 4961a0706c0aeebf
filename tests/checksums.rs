//! Checksum trailers (SPEC.md §6.2; hostile-inputs.md §3.4, K1–K5):
//! negotiation, the exact trailer layout, every single-bit flip in frames
//! up to 64 KiB detected, length-table flips and cut-off trailers are
//! errors (never a hang, never "valid"), and a downgrade is refused when
//! checksums are required. (What they cost: `cargo bench --bench transport
//! -- connection_checksums`, beside `connection`.)

use std::time::Duration;

use bytes::Bytes;
use framewire::transport::ChecksumError;
use framewire::transport::{
    Checksums, Connection, HandshakeError, HandshakeOptions, TransportError,
};
use framewire::EnvelopeError;
use framewire::{dumps, DecodeError, Envelope, Limits, Value};
use tokio::io::AsyncReadExt;

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn limits() -> Limits {
    Limits::dask_compat()
}

/// A task-like message: frame 0, a small frame, a 64 KiB frame (read into
/// its own buffer), a 20 KiB frame (written from its own memory) and an
/// empty frame.
fn message() -> Envelope {
    let head = dumps(&Value::map_of([("op", Value::str("compute-task"))])).unwrap();
    Envelope::new(vec![
        head[0].clone(),
        pattern(100, 1),
        pattern(64 << 10, 2),
        pattern(20 << 10, 3),
        Bytes::new(),
    ])
    .unwrap()
}

/// What a sender with checksums on puts on the wire for `env`.
fn wire_with_trailer(env: &Envelope) -> Vec<u8> {
    rt().block_on(async {
        let (a, mut b) = tokio::io::duplex(64 << 10);
        let mut tx = Connection::builder().checksums(true).build(a);
        let reading = async {
            let mut out = Vec::new();
            b.read_to_end(&mut out).await.unwrap();
            out
        };
        let writing = async {
            tx.send(env.clone()).await.unwrap();
            tx.close().await.unwrap();
            drop(tx);
        };
        tokio::join!(writing, reading).1
    })
}

/// Decodes one message from `wire` with checksums on.
fn read_checked(wire: &[u8]) -> Result<Envelope, TransportError> {
    rt().block_on(async {
        let mut rx = Connection::builder()
            .limits(limits())
            .checksums(true)
            .build(tokio::io::join(wire, tokio::io::sink()));
        match rx.recv().await {
            Some(r) => r,
            None => Err(TransportError::Closed),
        }
    })
}

#[test]
fn the_trailer_is_one_final_frame_of_crcs_then_the_length_tables_crc() {
    let env = message();
    let wire = wire_with_trailer(&env);
    // Read without checksums: one more frame than sent.
    let (raw, used) = Envelope::decode(&Bytes::from(wire.clone()), &limits()).unwrap();
    assert_eq!(used, wire.len());
    assert_eq!(raw.frames().len(), env.frames().len() + 1);
    assert_eq!(&raw.frames()[..env.frames().len()], env.frames());
    // Computed here independently: u32 LE CRC32 of each frame, then of the
    // lengths as u64 LE.
    let mut want = Vec::new();
    for f in env.frames() {
        want.extend_from_slice(&crc32fast::hash(f).to_le_bytes());
    }
    let table: Vec<u8> = env
        .frames()
        .iter()
        .flat_map(|f| (f.len() as u64).to_le_bytes())
        .collect();
    want.extend_from_slice(&crc32fast::hash(&table).to_le_bytes());
    assert_eq!(raw.frames().last().unwrap(), &want[..]);
    // N still covers the whole message, trailer included.
    assert_eq!(raw.first_read(), wire.len() as u64 - 8);

    // N = prelude only stays prelude only (one more length entry).
    let k0 = Envelope::with_first_read_frames(env.frames().to_vec(), 0).unwrap();
    let wire0 = wire_with_trailer(&k0);
    let (raw0, _) = Envelope::decode(&Bytes::from(wire0), &limits()).unwrap();
    assert_eq!(raw0.first_read(), 8 + 8 * raw0.frames().len() as u64);

    // And reading it with checksums on gives back exactly what was sent.
    let got = read_checked(&wire).unwrap();
    assert_eq!(got.frames(), env.frames());
    assert_eq!(got.first_read(), env.first_read());
}

#[test]
fn small_messages_keep_one_write_with_the_trailer_inside() {
    // All frames small: the trailer is computed up front and coalesced.
    let env = Envelope::new(vec![pattern(30, 1), pattern(1000, 2)]).unwrap();
    let wire = wire_with_trailer(&env);
    let got = read_checked(&wire).unwrap();
    assert_eq!(got.frames(), env.frames());
}

/// K1: every single-bit flip anywhere in the frames (and in the trailer)
/// of a message with a 64 KiB frame is a checksum error naming the frame.
#[test]
fn every_single_bit_flip_in_frames_up_to_64_kib_is_detected() {
    let env = Envelope::new(vec![
        dumps(&Value::map_of([("op", Value::str("x"))])).unwrap()[0].clone(),
        pattern(64 << 10, 9),
    ])
    .unwrap();
    let mut wire = wire_with_trailer(&env);
    let prelude = 8 + 8 + 8 * 3;
    let f0 = env.frames()[0].len();
    let rt = rt();
    let mut flips = 0u64;
    for byte in prelude..wire.len() {
        for bit in 0..8 {
            wire[byte] ^= 1 << bit;
            let r = rt.block_on(async {
                let mut rx = Connection::builder()
                    .limits(limits())
                    .checksums(true)
                    .build(tokio::io::join(&wire[..], tokio::io::sink()));
                rx.recv().await.expect("a result")
            });
            wire[byte] ^= 1 << bit;
            let at = byte - prelude;
            match r {
                Err(TransportError::Checksum(ChecksumError::Mismatch { frame, .. })) => {
                    // A flip in the trailer names the frame whose CRC it hit.
                    let trailer_at = f0 + (64 << 10);
                    let expect = if at < f0 {
                        0
                    } else if at < trailer_at {
                        1
                    } else {
                        (at - trailer_at) / 4
                    };
                    assert_eq!(frame, expect, "flip at byte {byte} bit {bit}");
                }
                Err(TransportError::Checksum(ChecksumError::PreludeMismatch { .. })) => {
                    // Only the trailer's own last 4 bytes hold the table's CRC.
                    assert!(byte >= wire.len() - 4, "flip at byte {byte} bit {bit}");
                }
                other => panic!("flip at byte {byte} bit {bit}: {other:?}"),
            }
            flips += 1;
        }
    }
    assert_eq!(flips, 8 * (wire.len() - prelude) as u64);
}

/// K2: a flipped bit in the length table never yields a message: the
/// table's CRC, the trailer's length, the limits or a truncation stop it.
#[test]
fn every_bit_flip_in_the_length_table_is_an_error() {
    let env = Envelope::new(vec![pattern(40, 1), pattern(3000, 2), pattern(70_000, 3)]).unwrap();
    let mut wire = wire_with_trailer(&env);
    let rt = rt();
    for byte in 8..8 + 8 + 8 * 4 {
        for bit in 0..8 {
            wire[byte] ^= 1 << bit;
            let r = rt.block_on(async {
                let mut rx = Connection::builder()
                    .limits(limits())
                    .checksums(true)
                    .read_timeout(Some(Duration::from_secs(5)))
                    .build(tokio::io::join(&wire[..], tokio::io::sink()));
                rx.recv().await
            });
            wire[byte] ^= 1 << bit;
            match r {
                Some(Err(_)) => {}
                other => panic!("flip at byte {byte} bit {bit}: {other:?}"),
            }
        }
    }
}

/// K3: a trailer cut off at EOF is a truncation, never "valid without CRC".
#[test]
fn a_trailer_cut_off_at_eof_is_truncated() {
    let wire = wire_with_trailer(&message());
    for cut in [1, 4, 10] {
        let r = read_checked(&wire[..wire.len() - cut]);
        assert!(
            matches!(
                r,
                Err(TransportError::Decode(DecodeError::Envelope(
                    EnvelopeError::Truncated { .. }
                )))
            ),
            "cut {cut}: {r:?}"
        );
    }
    // A message without any trailer, read by a peer that expects one.
    let plain = message().to_bytes();
    let r = read_checked(&plain);
    assert!(
        matches!(
            r,
            Err(TransportError::Checksum(ChecksumError::TrailerInvalid {
                len: 0,
                expected: 20
            }))
        ),
        "{r:?}"
    );
}

/// A failed check poisons the connection: nothing after it is decoded.
#[test]
fn a_mismatch_poisons_the_connection() {
    let one = wire_with_trailer(&message());
    let mut two = one.clone();
    two.extend_from_slice(&one);
    let last = one.len() - 30; // inside the 20 KiB frame
    two[last] ^= 0x10;
    rt().block_on(async {
        let mut rx = Connection::builder()
            .limits(limits())
            .checksums(true)
            .build(tokio::io::join(&two[..], tokio::io::sink()));
        let r = rx.recv().await.unwrap();
        assert!(matches!(
            r,
            Err(TransportError::Checksum(ChecksumError::Mismatch {
                frame: 3,
                ..
            }))
        ));
        assert!(rx.is_poisoned());
        assert!(rx.recv().await.is_none());
    });
}

fn offer(c: Checksums) -> HandshakeOptions {
    {
        let mut o = HandshakeOptions::default();
        o.checksums = c;
        o
    }
}

async fn pair(
    a: Checksums,
    b: Checksums,
) -> (
    Result<
        (
            Connection<tokio::io::DuplexStream>,
            framewire::transport::Negotiated,
        ),
        TransportError,
    >,
    Result<
        (
            Connection<tokio::io::DuplexStream>,
            framewire::transport::Negotiated,
        ),
        TransportError,
    >,
) {
    let (x, y) = tokio::io::duplex(1 << 20);
    let mut builder = Connection::builder();
    builder.limits(limits());
    let (oa, ob) = (offer(a), offer(b));
    tokio::join!(builder.handshake(x, &oa), builder.handshake(y, &ob))
}

#[test]
fn both_offer_then_every_message_carries_a_trailer_both_ways() {
    rt().block_on(async {
        let (l, r) = pair(Checksums::Offer, Checksums::Require).await;
        let ((mut l, la), (mut r, ra)) = (l.unwrap(), r.unwrap());
        assert!(la.checksums() && ra.checksums());
        assert!(la.agreed("checksum"));
        for _ in 0..3 {
            let (s, got) = tokio::join!(l.send(message()), r.recv());
            s.unwrap();
            assert_eq!(got.unwrap().unwrap().frames(), message().frames());
            let (s, got) = tokio::join!(r.send(message()), l.recv());
            s.unwrap();
            assert_eq!(got.unwrap().unwrap().frames(), message().frames());
        }
        // The trailer is on the wire (5 frames + trailer), invisible to the application.
        let (ls, rs) = (l.stats(), r.stats());
        assert_eq!(ls.bytes_sent, rs.bytes_received);
        assert_eq!(ls.frames_sent, rs.frames_received);
        let plain = message().wire_len() * 3;
        let trailer = 8 + 4 * 6;
        assert_eq!(rs.bytes_received - ls.bytes_sent, 0);
        // The handshake went without a trailer; the 3 messages with one.
        assert_eq!(ls.bytes_sent - plain - 3 * trailer, la_handshake_len(&la));
    });
}

/// Bytes of our handshake message on the wire with these options.
fn la_handshake_len(_: &framewire::transport::Negotiated) -> u64 {
    let v = offer(Checksums::Offer).to_value().unwrap();
    Envelope::new(dumps(&v).unwrap()).unwrap().wire_len()
}

#[test]
fn one_side_off_means_no_trailers() {
    rt().block_on(async {
        let (l, r) = pair(Checksums::Offer, Checksums::Off).await;
        let ((mut l, la), (mut r, ra)) = (l.unwrap(), r.unwrap());
        assert!(!la.checksums() && !ra.checksums());
        let (s, got) = tokio::join!(l.send(message()), r.recv());
        s.unwrap();
        assert_eq!(got.unwrap().unwrap().frames(), message().frames());
        assert_eq!(
            l.stats().bytes_sent - la_handshake_len(&la),
            message().wire_len()
        );
    });
}

/// K4: a peer that does not offer checksums (a Python peer, or a
/// downgrade that stripped the key) is refused when they are required.
#[test]
fn require_refuses_a_peer_without_checksums() {
    rt().block_on(async {
        let (l, r) = pair(Checksums::Require, Checksums::Off).await;
        assert!(matches!(
            l,
            Err(TransportError::Handshake(HandshakeError::ChecksumRequired))
        ));
        // The other side completed its handshake without checksums.
        assert!(!r.unwrap().1.checksums());
    });
}
