//! The copy counters of `Stats` are counted where the copies happen, by the
//! bytes each copy moves: a test here forces each copy the transport can
//! make and sees exactly its bytes counted, beside the zero-copy cases
//! seeing zero.
//!
//! * send: frames under `COALESCE_THRESHOLD` are copied next to the prelude
//!   (vectored writers and not, checksums on and off); larger frames never;
//! * `FrameCodec`'s encoder: every frame byte, and the earlier bytes a
//!   growing write buffer moved;
//! * receive: the start of a large frame read ahead into the shared buffer
//!   and moved into the frame's own; a small frame split across reads whose
//!   buffer had to grow while an earlier message still held it.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use framewire::transport::{Connection, FrameCodec, Stats, COALESCE_THRESHOLD};
use framewire::{Envelope, Limits};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::codec::{Decoder, Encoder};

fn frame(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `env` over `a` (and receives it on `b`); the sender's stats.
async fn send_over<A, B>(a: A, b: B, env: Envelope, checksums: bool) -> Stats
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let builder = Connection::builder().checksums(checksums).clone();
    let (mut tx, mut rx) = (builder.build(a), builder.build(b));
    let (sent, got) = tokio::join!(tx.send(env.clone()), rx.recv());
    sent.unwrap();
    assert_eq!(got.unwrap().unwrap().frames(), env.frames());
    tx.stats()
}

async fn tcp() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (a, b) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
    (a.unwrap(), b.unwrap().0)
}

#[test]
fn coalesced_frames_are_counted_as_they_are_copied() {
    let t = COALESCE_THRESHOLD;
    let env = Envelope::new(vec![
        frame(10, 1),
        frame(100_000, 2),
        frame(5, 3),
        frame(t - 1, 4),
        frame(t, 5),
        Bytes::new(),
    ])
    .unwrap();
    // Frames under the threshold: 10 + 5 + (t - 1) bytes, whatever the
    // writer (TCP: vectored; duplex: one chunk per call) and with checksum
    // trailers (not frame bytes) or not.
    let small = (10 + 5 + t - 1) as u64;
    rt().block_on(async {
        for checksums in [false, true] {
            let (a, b) = tcp().await;
            let s = send_over(a, b, env.clone(), checksums).await;
            assert_eq!(s.bytes_copied_on_send, small, "tcp, checksums {checksums}");
            let (a, b) = tokio::io::duplex(1 << 20);
            let s = send_over(a, b, env.clone(), checksums).await;
            assert_eq!(
                s.bytes_copied_on_send, small,
                "duplex, checksums {checksums}"
            );
            assert_eq!((s.messages_sent, s.frames_sent), (1, 6));
        }
    });
}

#[test]
fn frames_at_or_above_the_threshold_are_never_copied() {
    let env = Envelope::new(vec![
        frame(COALESCE_THRESHOLD, 1),
        frame(3 * COALESCE_THRESHOLD, 2),
    ])
    .unwrap();
    rt().block_on(async {
        for checksums in [false, true] {
            let (a, b) = tcp().await;
            let s = send_over(a, b, env.clone(), checksums).await;
            assert_eq!(s.bytes_copied_on_send, 0, "checksums {checksums}");
            // With checksums: a length entry and a 4-byte CRC per frame (trailer included).
            assert_eq!(
                s.bytes_sent,
                env.wire_len() + if checksums { 8 + 4 * 3 } else { 0 }
            );
        }
    });
}

#[test]
fn the_codec_encoder_counts_every_frame_byte_it_copies() {
    let env = Envelope::new(vec![frame(3, 1), frame(100_000, 2), Bytes::new()]).unwrap();
    let mut codec = FrameCodec::new();
    let mut dst = BytesMut::new();
    codec.encode(&env, &mut dst).unwrap();
    let s = codec.stats();
    assert_eq!(s.bytes_copied_on_send, 100_003);
    assert_eq!((s.messages_sent, s.frames_sent), (1, 3));
    assert_eq!(s.bytes_sent, dst.len() as u64);
    // A second message into the same, full buffer: its frames, plus the
    // first message's bytes if growing the buffer moved them.
    let (before, held) = (dst.as_ptr(), dst.len() as u64);
    codec.encode(&env, &mut dst).unwrap();
    let moved = if dst.as_ptr() != before { held } else { 0 };
    assert_eq!(codec.stats().bytes_copied_on_send, 2 * 100_003 + moved);
    // Decoding slices: nothing copied; both messages counted.
    let mut dec = FrameCodec::new();
    for _ in 0..2 {
        assert_eq!(dec.decode(&mut dst).unwrap().unwrap(), env);
    }
    let d = dec.stats();
    assert_eq!((d.messages_received, d.frames_received), (2, 6));
    assert_eq!(
        (d.bytes_copied_on_receive, d.bytes_relocated_on_receive),
        (0, 0)
    );
}

/// The decoder grows a read buffer whose front an earlier message still
/// holds: the buffer must move, with every byte it held.
#[test]
fn the_codec_decoder_counts_a_buffer_it_moved() {
    let first = Envelope::new(vec![frame(20, 1)]).unwrap().to_bytes();
    let second = Envelope::new(vec![frame(30_000, 2)]).unwrap().to_bytes();
    let part = 1000;
    let mut src = BytesMut::with_capacity(first.len() + part);
    src.extend_from_slice(&first);
    src.extend_from_slice(&second[..part]);
    assert_eq!(src.capacity(), src.len());
    let mut dec = FrameCodec::new();
    let held = dec.decode(&mut src).unwrap().unwrap();
    assert_eq!(dec.decode(&mut src).unwrap(), None);
    assert_eq!(dec.stats().bytes_relocated_on_receive, part as u64);
    // A move into a new allocation is a copy.
    assert_eq!(dec.stats().bytes_copied_on_receive, part as u64);
    src.extend_from_slice(&second[part..]);
    assert_eq!(dec.decode(&mut src).unwrap().unwrap().to_bytes(), second);
    drop(held);
}

/// A reader that hands out `chunks` one read at a time (a chunk larger than
/// the buffer's room is cut, the rest kept for the next read).
struct Script {
    chunks: VecDeque<Vec<u8>>,
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(c) = self.chunks.front_mut() {
            let n = c.len().min(buf.remaining());
            buf.put_slice(&c[..n]);
            c.drain(..n);
            if c.is_empty() {
                self.chunks.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn reader(chunks: Vec<Vec<u8>>) -> Connection<tokio::io::Join<Script, tokio::io::Sink>> {
    let io = tokio::io::join(
        Script {
            chunks: chunks.into(),
        },
        tokio::io::sink(),
    );
    Connection::builder()
        .limits(Limits::dask_compat())
        .build(io)
}

/// The first read (8 KiB of room) takes the prelude, frame 0 and `ahead`
/// bytes of the 200 KiB frame: those, and only those, are copied into the
/// frame's own buffer; a message whose large frame arrives in reads of its
/// own copies nothing.
#[test]
fn read_ahead_into_a_large_frame_is_counted() {
    let env = Envelope::new(vec![frame(40, 1), frame(200 << 10, 2)]).unwrap();
    let wire = env.to_bytes().to_vec();
    let start = 8 + 8 + 2 * 8 + 40; // prelude + frame 0
    rt().block_on(async {
        for ahead in [0, 1, 1000, 4000] {
            let cut = start + ahead;
            let mut rx = reader(vec![wire[..cut].to_vec(), wire[cut..].to_vec()]);
            let got = rx.recv().await.unwrap().unwrap();
            assert_eq!(got, env);
            let s = rx.stats();
            // Copied: the read-ahead, and whatever a growing buffer moved.
            assert_eq!(
                s.bytes_copied_on_receive - s.bytes_relocated_on_receive,
                ahead as u64,
                "{ahead} bytes ahead"
            );
            assert_eq!(s.messages_received, 1);
        }
    });
}

/// A message of one `len`-byte frame whose start comes in the read that
/// brings an earlier message (held meanwhile, so that it pins the front of
/// the shared buffer), its rest in the next: the reader's stats after it,
/// and how many of its bytes came in that first read.
fn split_behind_a_held_message(len: usize) -> (framewire::transport::Stats, usize) {
    let first = Envelope::new(vec![frame(100, 1)])
        .unwrap()
        .to_bytes()
        .to_vec();
    let second = Envelope::new(vec![frame(len, 2)]).unwrap();
    let second_wire = second.to_bytes().to_vec();
    let cut = 8192 - first.len();
    let mut chunk = first.clone();
    chunk.extend_from_slice(&second_wire[..cut]);
    rt().block_on(async {
        let mut rx = reader(vec![chunk, second_wire[cut..].to_vec()]);
        let held = rx.recv().await.unwrap().unwrap();
        let got = rx.recv().await.unwrap().unwrap();
        assert_eq!(got, second);
        let s = rx.stats();
        drop(held);
        (s, cut)
    })
}

/// A small frame split across reads, while an earlier message (held here)
/// pins the front of the shared buffer: the read that took its start left
/// room for the rest of it, so nothing moves and nothing is copied.
#[test]
fn a_small_frame_split_across_reads_is_not_moved() {
    let (s, _) = split_behind_a_held_message(20_000);
    assert_eq!(s.bytes_relocated_on_receive, 0, "{s:?}");
    assert_eq!(s.bytes_copied_on_receive, 0, "{s:?}");
}

/// A message longer than the room a read ahead keeps (24 KiB), whose start
/// a read ahead took while an earlier message pins the buffer: the buffer
/// grows once for the rest of it, and what it held of it is counted as
/// relocated (and copied).
#[test]
fn a_long_message_a_read_ahead_started_is_counted_when_moved() {
    let (s, cut) = split_behind_a_held_message(60_000);
    // What the buffer held of the second message: its frame's bytes
    // after the 24-byte prelude.
    assert_eq!(s.bytes_relocated_on_receive, (cut - 24) as u64, "{s:?}");
    assert_eq!(s.bytes_copied_on_receive, (cut - 24) as u64, "{s:?}");
}

/// The shapes of `framewire demo`'s stream (hundreds of small messages, a
/// small frame 0 before a large frame, a collection of 100 000 small frames
/// whose prelude is 800 KB, one ending in a large element after small
/// frames: a prelude and run within the 24 KiB a read keeps room for),
/// received in reads that end anywhere, every message held (pinning its
/// buffers): nothing a receive buffer held is ever moved. What is copied
/// is at most the read-ahead into each large frame's own buffer.
#[test]
fn the_demo_shapes_relocate_nothing() {
    let mut sent = Vec::new();
    for i in 0..500u32 {
        sent.push(Envelope::new(vec![frame(150 + (i as usize * 7) % 120, i as u8)]).unwrap());
    }
    sent.push(Envelope::new(vec![frame(300, 1), frame(4 << 20, 2)]).unwrap());
    let mut many = vec![frame(60, 3)];
    many.extend((0..100_000).map(|i| frame(3 + i % 9, i as u8)));
    sent.push(Envelope::new(many).unwrap());
    for i in 0..50u32 {
        sent.push(Envelope::new(vec![frame(200, i as u8), frame(40, 5)]).unwrap());
    }
    let mut tail = vec![frame(60, 4)];
    tail.extend((0..500).map(|i| frame(20, i as u8)));
    tail.push(frame(1 << 20, 6));
    sent.push(Envelope::new(tail).unwrap());
    let large_frames = 2;
    let wire: Vec<u8> = sent.iter().flat_map(|e| e.to_bytes().to_vec()).collect();
    rt().block_on(async {
        for step in [1_000, 4_093, 65_537, 200_003] {
            let chunks = wire.chunks(step).map(<[u8]>::to_vec).collect();
            let mut rx = reader(chunks);
            let mut held = Vec::new();
            for env in &sent {
                let got = rx.recv().await.unwrap().unwrap();
                assert_eq!(&got, env);
                held.push(got);
            }
            let s = rx.stats();
            assert_eq!(s.messages_received, sent.len() as u64);
            assert_eq!(s.bytes_relocated_on_receive, 0, "reads of {step}: {s:?}");
            assert!(
                s.bytes_copied_on_receive <= large_frames * (64 << 10),
                "reads of {step}: {s:?}"
            );
        }
    });
}

/// A 64 MiB frame arriving in 64 KiB reads: its buffer grows geometrically
/// (by what it holds), so growing it moves fewer bytes than the frame has
/// (fixed `prealloc_cap` steps, each moving all that arrived, would move
/// about 2 GiB), and every byte moved is counted as copied. The next such
/// message, the first one dropped, lands in the recycled buffer: nothing
/// grows or moves.
#[test]
fn a_64_mib_frame_relocates_less_than_itself_then_nothing_when_recycled() {
    let len = 64 << 20;
    let env = Envelope::new(vec![frame(40, 1), frame(len, 2)]).unwrap();
    let wire = env.to_bytes().to_vec();
    let start = 8 + 8 + 2 * 8 + 40; // prelude + frame 0
    let mut chunks = vec![wire[..start].to_vec()];
    for _ in 0..2 {
        chunks.extend(wire[start..].chunks(64 << 10).map(<[u8]>::to_vec));
        chunks.push(wire[..start].to_vec());
    }
    chunks.pop();
    rt().block_on(async {
        let mut rx = reader(chunks);
        let got = rx.recv().await.unwrap().unwrap();
        assert_eq!(got, env);
        let first = rx.stats();
        assert!(
            first.bytes_relocated_on_receive < len as u64,
            "{} bytes relocated for a {len}-byte frame",
            first.bytes_relocated_on_receive
        );
        // Nothing was read ahead: every copy is a relocation.
        assert_eq!(
            first.bytes_copied_on_receive,
            first.bytes_relocated_on_receive
        );
        drop(got);
        let got = rx.recv().await.unwrap().unwrap();
        assert_eq!(got, env);
        let second = rx.stats();
        assert_eq!(second.messages_received, 2);
        assert_eq!(
            second.bytes_relocated_on_receive,
            first.bytes_relocated_on_receive
        );
        assert_eq!(
            second.bytes_copied_on_receive,
            first.bytes_copied_on_receive
        );
    });
}
