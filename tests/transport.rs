//! The transport under scripted IO: partial reads at every split point,
//! partial and vectored writes, EOF / reset mid-frame, cancelled sends and
//! receives, a prelude declaring 1 GiB, deadlines on a paused clock, the
//! `FrameCodec` in `Framed`, and the handshake (hostile-inputs.md §3.5, §4.3).
//! (Throughput is measured by `cargo bench --bench transport`.)

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use framewire::dumps_with;
use framewire::serialize::Codec;
use framewire::transport::{
    Connection, ConnectionBuilder, FrameCodec, HandshakeError, HandshakeOptions, Negotiated,
    TimeoutPhase, TransportError,
};
use framewire::EnvelopeError;
use framewire::{dumps, DecodeError, EncodeError, Envelope, LimitName, Limits, Value};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_util::codec::{Decoder, Encoder, FramedRead};

// The `Connection`'s documented behaviour: frames under 16 KiB are coalesced
// with their prelude, a vectored write takes at most 1024 slices, and frames
// of at least 64 KiB are read into a buffer of their own.
const COALESCE_THRESHOLD: usize = 16 << 10;
const MAX_IOVECS: usize = 1024;
const OWN_BUFFER_THRESHOLD: usize = 64 << 10;

// ---- fixtures ----------------------------------------------------------------

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn env(frames: Vec<Bytes>, k: usize) -> Envelope {
    Envelope::with_first_read_frames(frames, k).unwrap()
}

/// Small messages: empty frames, k = 0, k = count, one-byte frames.
fn small_messages() -> Vec<Envelope> {
    vec![
        Envelope::new(vec![Bytes::from_static(b"\x81\xa2op\xa4ping")]).unwrap(),
        env(
            vec![pattern(12, 1), Bytes::new(), pattern(40, 2), Bytes::new()],
            1,
        ),
        env(vec![pattern(300, 3), pattern(5, 4)], 0),
        Envelope::new(vec![Bytes::from_static(b"\xc0")]).unwrap(),
    ]
}

/// Messages with frames over the own-buffer threshold: consecutive shards,
/// small frames between them, an empty frame inside a large run.
fn large_messages() -> Vec<Envelope> {
    let big = OWN_BUFFER_THRESHOLD + 4096;
    vec![
        env(
            vec![
                pattern(90, 5),
                pattern(big, 6),
                pattern(big, 7),
                pattern(20, 8),
                Bytes::new(),
                pattern(big + 1, 9),
            ],
            1,
        ),
        Envelope::new(vec![pattern(3 * big, 10)]).unwrap(),
        small_messages().remove(1),
    ]
}

fn wire(msgs: &[Envelope]) -> Bytes {
    let mut out = BytesMut::new();
    for m in msgs {
        out.extend_from_slice(&m.to_bytes());
    }
    out.freeze()
}

/// Decodes back-to-back messages; returns them and the undecodable tail.
fn decode_all(mut buf: Bytes) -> (Vec<Envelope>, Bytes) {
    let mut out = Vec::new();
    while let Ok((m, used)) = Envelope::decode(&buf, &Limits::dask_compat()) {
        out.push(m);
        buf = buf.slice(used..);
    }
    (out, buf)
}

fn dask() -> Limits {
    Limits::dask_compat()
}

// ---- scripted IO -------------------------------------------------------------

/// A reader that returns `data` in pieces ending at `cuts`, with
/// `Poll::Pending` (after waking the task) before every piece.
struct Script {
    data: Bytes,
    pos: usize,
    cuts: Vec<usize>,
    next_cut: usize,
    pending: bool,
    /// Bytes handed out so far, visible from outside.
    given: Arc<AtomicUsize>,
    /// Pending forever (without EOF) once the data is out.
    stall_at_end: bool,
}

impl Script {
    fn new(data: Bytes, mut cuts: Vec<usize>) -> Script {
        cuts.retain(|&c| c > 0 && c < data.len());
        cuts.sort_unstable();
        cuts.dedup();
        Script {
            data,
            pos: 0,
            cuts,
            next_cut: 0,
            pending: true,
            given: Arc::new(AtomicUsize::new(0)),
            stall_at_end: false,
        }
    }

    /// Pieces of `k` bytes.
    fn chunked(data: Bytes, k: usize) -> Script {
        let cuts = (1..=data.len() / k).map(|i| i * k).collect();
        Script::new(data, cuts)
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending {
            self.pending = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.pos == self.data.len() && self.stall_at_end {
            return Poll::Pending;
        }
        while self.cuts.get(self.next_cut).is_some_and(|&c| c <= self.pos) {
            self.next_cut += 1;
        }
        let end = self
            .cuts
            .get(self.next_cut)
            .copied()
            .unwrap_or(self.data.len());
        let n = (end - self.pos).min(buf.remaining());
        let pos = self.pos;
        buf.put_slice(&self.data[pos..pos + n]);
        self.pos += n;
        self.given.fetch_add(n, Ordering::SeqCst);
        self.pending = true;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Script {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A writer that takes at most `max` bytes per call (across slices when
/// vectored), returns `Pending` (after waking) every other call when
/// `pending` is set, and records the slices offered per call.
#[derive(Clone)]
struct Trickle {
    out: Arc<Mutex<Vec<u8>>>,
    max: usize,
    vectored: bool,
    pending: bool,
    flip: bool,
    slices_per_call: Arc<Mutex<Vec<usize>>>,
}

impl Trickle {
    fn new(max: usize, vectored: bool, pending: bool) -> Trickle {
        Trickle {
            out: Arc::default(),
            max,
            vectored,
            pending,
            flip: false,
            slices_per_call: Arc::default(),
        }
    }

    fn written(&self) -> Bytes {
        Bytes::from(self.out.lock().unwrap().clone())
    }

    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        if self.pending {
            self.flip = !self.flip;
            if self.flip {
                cx.waker().wake_by_ref();
                return true;
            }
        }
        false
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let n = buf.len().min(self.max);
        self.out.lock().unwrap().extend_from_slice(&buf[..n]);
        self.slices_per_call.lock().unwrap().push(1);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        assert!(
            self.vectored,
            "poll_write_vectored on a writer that is not vectored"
        );
        assert!(bufs.len() <= MAX_IOVECS, "{} slices", bufs.len());
        if self.stall(cx) {
            return Poll::Pending;
        }
        self.slices_per_call.lock().unwrap().push(bufs.len());
        let mut left = self.max;
        let mut out = self.out.lock().unwrap();
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(left);
            out.extend_from_slice(&b[..take]);
            left -= take;
            n += take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Trickle {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// Everything a connection yields from `script`, up to the end of the stream.
fn recv_all(script: Script, limits: Limits) -> Vec<Result<Envelope, TransportError>> {
    let mut conn = Connection::builder().limits(limits).build(script);
    tokio_test::block_on(async {
        let mut out = Vec::new();
        while let Some(r) = conn.recv().await {
            out.push(r);
        }
        out
    })
}

fn oks(results: Vec<Result<Envelope, TransportError>>) -> Vec<Envelope> {
    results.into_iter().map(|r| r.expect("a message")).collect()
}

// ---- reads: split invariance (T1, T2) ----------------------------------------

#[test]
fn read_every_split_point_small() {
    let msgs = small_messages();
    let w = wire(&msgs);
    for split in 0..=w.len() {
        let got = oks(recv_all(
            Script::new(w.clone(), vec![split]),
            Limits::strict(),
        ));
        assert_eq!(got, msgs, "split at {split}");
    }
}

#[test]
fn read_every_pair_of_split_points_small() {
    let msgs = small_messages();
    let w = wire(&msgs);
    for a in (0..w.len()).step_by(7) {
        for b in (a..=w.len()).step_by(5) {
            let got = oks(recv_all(
                Script::new(w.clone(), vec![a, b]),
                Limits::strict(),
            ));
            assert_eq!(got, msgs, "splits at {a}, {b}");
        }
    }
}

#[test]
fn read_one_byte_at_a_time_with_pending() {
    for msgs in [small_messages(), large_messages()] {
        let w = wire(&msgs);
        let got = oks(recv_all(Script::chunked(w, 1), dask()));
        assert_eq!(got, msgs);
    }
}

#[test]
fn read_large_frames_in_chunks() {
    let msgs = large_messages();
    let w = wire(&msgs);
    for k in [2, 7, 15, 16, 17, 1000, 4096, 65_536, 65_537, 300_000] {
        assert_eq!(
            oks(recv_all(Script::chunked(w.clone(), k), dask())),
            msgs,
            "k = {k}"
        );
    }
}

#[test]
fn read_split_points_around_every_frame_boundary() {
    let msgs = large_messages();
    let w = wire(&msgs);
    // Every boundary of every message: prelude fields and frame edges.
    let mut boundaries = vec![];
    let mut at = 0;
    for m in &msgs {
        boundaries.extend([at + 8, at + 16]);
        let mut p = at + 16 + 8 * m.frames().len();
        boundaries.push(p);
        for f in m.frames() {
            p += f.len();
            boundaries.push(p);
        }
        at = p;
    }
    assert_eq!(at, w.len());
    for b in boundaries {
        for split in b.saturating_sub(3)..=(b + 3).min(w.len()) {
            let got = oks(recv_all(Script::new(w.clone(), vec![split]), dask()));
            assert_eq!(got, msgs, "split at {split}");
        }
    }
    for split in (0..w.len()).step_by(997) {
        let got = oks(recv_all(Script::new(w.clone(), vec![split]), dask()));
        assert_eq!(got, msgs, "split at {split}");
    }
}

#[test]
fn codec_every_split_point_small() {
    let msgs = small_messages();
    let w = wire(&msgs);
    for split in 0..=w.len() {
        let framed = FramedRead::new(Script::new(w.clone(), vec![split]), FrameCodec::new());
        let got: Vec<_> = tokio_test::block_on(framed.collect::<Vec<_>>());
        let got: Vec<Envelope> = got.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, msgs, "split at {split}");
    }
}

#[test]
fn codec_large_frames_one_byte_at_a_time() {
    let msgs = large_messages();
    let framed = FramedRead::new(
        Script::chunked(wire(&msgs), 1),
        FrameCodec::builder().limits(dask()).new_codec(),
    );
    let got: Vec<_> = tokio_test::block_on(framed.collect::<Vec<_>>());
    assert_eq!(
        got.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>(),
        msgs
    );
}

// ---- reads: zero copy and buffer recycling -------------------------------------

#[test]
fn read_frames_are_slices_of_shared_buffers() {
    let msgs = large_messages();
    let got = oks(recv_all(Script::chunked(wire(&msgs), 50_000), dask()));
    let f = got[0].frames();
    // The two consecutive shards are contiguous in one buffer: merging them needs no copy.
    assert_eq!(f[1].as_ptr().wrapping_add(f[1].len()), f[2].as_ptr());
    // The small frame 0 does not live next to the payload.
    let far = (f[0].as_ptr() as usize).abs_diff(f[1].as_ptr() as usize);
    assert!(far > f[0].len(), "frame 0 shares the payload's buffer");
    // Small frames of the next message after a large run: one buffer.
    let g = got[2].frames();
    assert_eq!(g[0].as_ptr().wrapping_add(g[0].len()), g[1].as_ptr());
}

#[tokio::test]
async fn read_recycles_large_buffers_once_dropped() {
    let big = Envelope::new(vec![pattern(20, 1), pattern(1 << 20, 2)]).unwrap();
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut tx = Connection::new(a);
    let mut rx = Connection::builder().limits(dask()).build(b);
    let sender = tokio::spawn(async move {
        for _ in 0..4 {
            tx.send(big.clone()).await.unwrap();
        }
    });
    let first = rx.recv().await.unwrap().unwrap();
    let p1 = first.frames()[1].as_ptr();
    drop(first);
    let second = rx.recv().await.unwrap().unwrap();
    assert_eq!(
        second.frames()[1].as_ptr(),
        p1,
        "the dropped buffer is reused"
    );
    // Still held: the next message gets a buffer of its own.
    let third = rx.recv().await.unwrap().unwrap();
    assert_ne!(third.frames()[1].as_ptr(), p1);
    assert_eq!(
        second.frames()[1],
        pattern(1 << 20, 2),
        "held data is untouched"
    );
    assert_eq!(third.frames()[1], pattern(1 << 20, 2));
    drop((second, third));
    let fourth = rx.recv().await.unwrap().unwrap();
    assert_eq!(fourth.frames()[1], pattern(1 << 20, 2));
    sender.await.unwrap();
}

// ---- reads: cancellation (T11) ------------------------------------------------

#[test]
fn read_cancelled_after_n_polls_loses_nothing() {
    let msgs = large_messages();
    let w = wire(&msgs);
    for n in [1, 2, 3, 5, 8, 13, 40, 100, 1000] {
        let mut conn = Connection::builder()
            .limits(dask())
            .build(Script::chunked(w.clone(), 3000));
        let mut got = Vec::new();
        loop {
            // Poll a recv future n times, then drop it.
            let mut fut = tokio_test::task::spawn(conn.recv());
            let mut done = None;
            for _ in 0..n {
                if let Poll::Ready(r) = fut.poll() {
                    done = Some(r);
                    break;
                }
            }
            drop(fut);
            match done {
                Some(Some(r)) => got.push(r.unwrap()),
                Some(None) => break,
                None => {}
            }
        }
        assert_eq!(got, msgs, "n = {n}");
    }
}

// ---- reads: faults (T3, T4) ------------------------------------------------------

#[tokio::test]
async fn read_eof_mid_frame_is_truncated_then_nothing() {
    let msgs = small_messages();
    let w = wire(&msgs);
    let first = msgs[0].to_bytes().len();
    let cut = first + 70; // inside the second message's frames (its prelude is 48 bytes)
    let mock = tokio_test::io::Builder::new().read(&w[..cut]).build();
    let mut conn = Connection::new(mock);
    assert_eq!(conn.recv().await.unwrap().unwrap(), msgs[0]);
    match conn.recv().await {
        Some(Err(TransportError::Decode(DecodeError::Envelope(EnvelopeError::Truncated {
            offset,
            needed,
            ..
        })))) => {
            assert_eq!(offset, 70);
            assert_eq!(needed, msgs[1].wire_len());
        }
        other => panic!("{other:?}"),
    }
    assert!(conn.recv().await.is_none());
    assert!(conn.recv().await.is_none());
    assert!(conn.is_poisoned());
    assert!(matches!(
        conn.send(msgs[0].clone()).await,
        Err(TransportError::Poisoned)
    ));
}

#[tokio::test]
async fn read_eof_mid_prelude_is_truncated() {
    let w = small_messages()[1].to_bytes();
    for cut in [1, 8, 15, 16, 17, 23] {
        let mock = tokio_test::io::Builder::new().read(&w[..cut]).build();
        let mut conn = Connection::new(mock);
        match conn.recv().await {
            Some(Err(TransportError::Decode(DecodeError::Envelope(
                EnvelopeError::Truncated { offset, .. },
            )))) => {
                assert_eq!(offset, cut as u64)
            }
            other => panic!("cut {cut}: {other:?}"),
        }
        assert!(conn.recv().await.is_none());
    }
}

#[tokio::test]
async fn read_reset_mid_frame_poisons() {
    let w = large_messages()[0].to_bytes();
    let mock = tokio_test::io::Builder::new()
        .read(&w[..17])
        .read(&w[17..100_000])
        .read_error(io::ErrorKind::ConnectionReset.into())
        .build();
    let mut conn = Connection::builder().limits(dask()).build(mock);
    match conn.recv().await {
        Some(Err(TransportError::Io(e))) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        other => panic!("{other:?}"),
    }
    assert!(conn.recv().await.is_none());
    assert!(conn.is_poisoned());
}

#[tokio::test]
async fn read_nothing_after_a_bad_prelude() {
    let good = small_messages()[0].to_bytes();
    let mut bytes = good.to_vec();
    bytes.extend_from_slice(&[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // count = 0
    bytes.extend_from_slice(&good); // a valid message after the garbage
    let mut conn = Connection::new(tokio_test::io::Builder::new().read(&bytes).build());
    assert!(conn.recv().await.unwrap().is_ok());
    assert!(matches!(
        conn.recv().await,
        Some(Err(TransportError::Decode(DecodeError::Envelope(
            EnvelopeError::EmptyMessage
        ))))
    ));
    assert!(
        conn.recv().await.is_none(),
        "never a message after a desync"
    );
}

#[tokio::test]
async fn read_limits_are_checked_before_reading_frames() {
    // 17 MiB declared under strict limits (16 MiB frames).
    let mut p = vec![];
    p.extend_from_slice(&24u64.to_le_bytes());
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&(17u64 << 20).to_le_bytes());
    let mut conn = Connection::builder()
        .limits(Limits::strict())
        .build(tokio_test::io::Builder::new().read(&p).build());
    assert!(matches!(
        conn.recv().await,
        Some(Err(TransportError::Decode(DecodeError::Envelope(
            EnvelopeError::FrameTooLarge { index: 0, .. }
        ))))
    ));
    assert!(conn.read_reserved() <= 64 << 10);
}

// ---- reads: a prelude declaring 1 GiB, then trickling (T6) ----------------------

fn one_gib_prelude() -> Vec<u8> {
    let mut p = vec![];
    p.extend_from_slice(&16u64.to_le_bytes()); // N: the prelude alone (k = 0)
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&(1u64 << 30).to_le_bytes());
    p
}

/// The data of a trickle: the prelude, then 4 MiB of a declared 1 GiB
/// frame, in 1-byte pieces for the first KiB, then 64 KiB pieces.
fn trickle_script() -> Script {
    trickle_after(one_gib_prelude())
}

/// `head`, then 4 MiB of 7s, in 1-byte pieces for the first KiB, then
/// 64 KiB pieces, then nothing (pending forever).
fn trickle_after(head: Vec<u8>) -> Script {
    trickle_n_after(head, 4 << 20)
}

/// `head`, then `n` bytes of 7s, as [`trickle_after`].
fn trickle_n_after(head: Vec<u8>, n: usize) -> Script {
    let mut data = head;
    data.extend(std::iter::repeat_n(7u8, n));
    let mut cuts: Vec<usize> = (1..24 + 1024).collect();
    cuts.extend((24 + 1024..data.len()).step_by(64 << 10));
    let mut s = Script::new(data.into(), cuts);
    s.stall_at_end = true;
    s
}

/// Polls a connection reading `script` until all of it has arrived,
/// checking after every poll that the reader has reserved no more than
/// twice what arrived plus `prealloc_cap` (and a little read-ahead).
/// Returns the most it reserved.
fn reserve_follows_arrivals(script: Script, limits: Limits) -> usize {
    let total = script.data.len();
    let given = script.given.clone();
    let cap = limits.prealloc_cap;
    let mut conn = Connection::builder().limits(limits).build(script);
    let mut cx = Context::from_waker(Waker::noop());
    let mut max_seen = 0;
    for _ in 0..100_000 {
        assert!(conn.poll_recv(&mut cx).is_pending());
        let arrived = given.load(Ordering::SeqCst);
        let reserved = conn.read_reserved();
        max_seen = max_seen.max(reserved);
        assert!(
            reserved <= 2 * arrived + cap + (128 << 10),
            "{reserved} bytes reserved after {arrived} arrived"
        );
        if arrived == total {
            break;
        }
    }
    assert_eq!(given.load(Ordering::SeqCst), total);
    max_seen
}

#[test]
fn read_reserve_is_bounded_by_arrived_bytes_not_declared_length() {
    let max_seen = reserve_follows_arrivals(trickle_script(), dask());
    assert!(
        max_seen < 16 << 20,
        "reserved {max_seen} for a 1 GiB declaration"
    );
}

#[test]
fn read_compat_2_pow_60_byte_frame_reserves_only_what_arrives() {
    // dask_compat() sets no frame limit: the declaration is accepted, and
    // costs nothing until its bytes arrive.
    let mut head = vec![];
    head.extend_from_slice(&16u64.to_le_bytes());
    head.extend_from_slice(&1u64.to_le_bytes());
    head.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let max_seen = reserve_follows_arrivals(trickle_after(head), dask());
    assert!(max_seen < 16 << 20, "reserved {max_seen}");
}

/// A large frame's buffer grows geometrically (by what it holds), which
/// stays bounded by what arrived: 48 MiB of a declared 2^60-byte frame
/// never have more than twice their size (plus `prealloc_cap`) reserved,
/// at any point of their arrival.
#[test]
fn read_compat_geometric_growth_stays_within_twice_what_arrived() {
    let mut head = vec![];
    head.extend_from_slice(&16u64.to_le_bytes());
    head.extend_from_slice(&1u64.to_le_bytes());
    head.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let max_seen = reserve_follows_arrivals(trickle_n_after(head, 48 << 20), dask());
    // It did grow past fixed steps of `prealloc_cap`: the bound is what
    // arrived, not the declared length.
    assert!(max_seen >= 48 << 20, "reserved {max_seen}");
    assert!(
        max_seen <= 2 * (48 << 20) + (1 << 20) + (128 << 10),
        "reserved {max_seen}"
    );
}

#[test]
fn read_compat_length_table_of_2_pow_32_frames_costs_only_what_arrives() {
    // The largest count dask_compat() accepts: a 32 GiB length table,
    // of which 4 MiB arrive (the 7s read as lengths of 0x0707... bytes:
    // never checked, the table is not complete).
    let n = Limits::dask_compat().max_frames as u64;
    let mut head = vec![];
    head.extend_from_slice(&(8 + 8 * n).to_le_bytes());
    head.extend_from_slice(&n.to_le_bytes());
    let max_seen = reserve_follows_arrivals(trickle_after(head), dask());
    assert!(max_seen < 16 << 20, "reserved {max_seen}");
}

#[test]
fn codec_reserve_is_bounded_by_arrived_bytes_not_declared_length() {
    let script = trickle_script();
    let given = script.given.clone();
    let cap = dask().prealloc_cap;
    let mut framed = FramedRead::new(script, FrameCodec::builder().limits(dask()).new_codec());
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..100_000 {
        assert!(framed.poll_next_unpin(&mut cx).is_pending());
        let arrived = given.load(Ordering::SeqCst);
        let reserved = framed.read_buffer().capacity();
        assert!(
            reserved <= 2 * arrived + cap + (128 << 10),
            "{reserved} bytes reserved after {arrived} arrived"
        );
        if arrived == (4 << 20) + 24 {
            break;
        }
    }
    assert_eq!(given.load(Ordering::SeqCst), (4 << 20) + 24);
}

// ---- reads: deadlines (T5) ---------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn read_deadline_slowloris_in_prelude() {
    let w = small_messages()[2].to_bytes();
    let (mut tx, rx) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::builder()
        .read_timeout(Some(Duration::from_secs(30)))
        .build(rx);
    tokio::spawn(async move {
        for b in w.iter() {
            tx.write_all(&[*b]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(29)).await;
        }
    });
    let start = tokio::time::Instant::now();
    match conn.recv().await {
        Some(Err(TransportError::Timeout { phase })) => {
            assert_eq!(phase, TimeoutPhase::ReadPrelude)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert!(conn.recv().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn read_deadline_in_frames() {
    let w = small_messages()[2].to_bytes();
    let (mut tx, rx) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::builder()
        .read_timeout(Some(Duration::from_secs(10)))
        .build(rx);
    tx.write_all(&w[..100]).await.unwrap(); // the prelude and part of a frame, then silence
    match conn.recv().await {
        Some(Err(TransportError::Timeout { phase })) => assert_eq!(phase, TimeoutPhase::ReadFrames),
        other => panic!("{other:?}"),
    }
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn read_deadline_does_not_count_idle_time() {
    let msgs = small_messages();
    let (mut tx, rx) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::builder()
        .read_timeout(Some(Duration::from_secs(10)))
        .build(rx);
    let w = wire(&msgs[..2]);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        tx.write_all(&w).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
    });
    assert_eq!(conn.recv().await.unwrap().unwrap(), msgs[0]);
    assert_eq!(conn.recv().await.unwrap().unwrap(), msgs[1]);
    assert!(conn.recv().await.is_none());
}

// ---- writes: partial and vectored (T14) ------------------------------------------

fn send_all_through(writer: Trickle, msgs: &[Envelope]) -> Bytes {
    let mut conn = Connection::builder().limits(dask()).build(writer.clone());
    tokio_test::block_on(async {
        for m in msgs {
            conn.send(m.clone()).await.unwrap();
        }
    });
    writer.written()
}

#[test]
fn write_one_byte_per_call() {
    let mut msgs = small_messages();
    msgs.extend(large_messages());
    for vectored in [true, false] {
        let out = send_all_through(Trickle::new(1, vectored, true), &msgs);
        assert_eq!(out, wire(&msgs), "vectored = {vectored}");
    }
}

#[test]
fn write_partial_vectored_at_every_size() {
    let mut msgs = small_messages();
    msgs.extend(large_messages());
    for max in [2, 7, 16, 25, 1000, COALESCE_THRESHOLD + 5, 70_000, 1 << 20] {
        for vectored in [true, false] {
            let out = send_all_through(Trickle::new(max, vectored, max % 2 == 0), &msgs);
            assert_eq!(out, wire(&msgs), "max = {max}, vectored = {vectored}");
        }
    }
}

#[test]
fn write_small_message_is_one_call() {
    for m in small_messages() {
        let w = Trickle::new(usize::MAX, true, false);
        assert_eq!(
            send_all_through(w.clone(), std::slice::from_ref(&m)),
            m.to_bytes()
        );
        assert_eq!(*w.slices_per_call.lock().unwrap(), [1]);
    }
}

#[test]
fn write_large_frames_are_their_own_slices() {
    let big = pattern(COALESCE_THRESHOLD, 1);
    let m = Envelope::new(vec![pattern(100, 2), big.clone(), pattern(20, 3), big]).unwrap();
    let w = Trickle::new(usize::MAX, true, false);
    assert_eq!(
        send_all_through(w.clone(), std::slice::from_ref(&m)),
        m.to_bytes()
    );
    // prelude + frame 0 | big | frame 2 | big
    assert_eq!(*w.slices_per_call.lock().unwrap(), [4]);
}

#[test]
fn write_batches_under_the_iovec_limit() {
    let frame = pattern(COALESCE_THRESHOLD, 4);
    let m = Envelope::new(vec![frame; 1500]).unwrap();
    let w = Trickle::new(usize::MAX, true, false);
    assert_eq!(
        send_all_through(w.clone(), std::slice::from_ref(&m)),
        m.to_bytes()
    );
    let calls = w.slices_per_call.lock().unwrap().clone();
    assert_eq!(calls[0], MAX_IOVECS);
    assert_eq!(calls.iter().sum::<usize>(), 1501);
}

#[tokio::test]
async fn write_error_poisons() {
    let m = small_messages()[1].clone();
    let mock = tokio_test::io::Builder::new()
        .write(&m.to_bytes()[..10])
        .write_error(io::ErrorKind::BrokenPipe.into())
        .build();
    let mut conn = Connection::new(mock);
    match conn.send(m.clone()).await {
        Err(TransportError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::BrokenPipe),
        other => panic!("{other:?}"),
    }
    assert!(matches!(conn.send(m).await, Err(TransportError::Poisoned)));
    assert!(conn.is_poisoned());
}

#[tokio::test]
async fn write_over_the_limits_is_refused_before_any_byte() {
    let mut conn = Connection::builder()
        .limits(Limits::strict())
        .build(tokio_test::io::Builder::new().build()); // panics on any write
    let m = Envelope::new(vec![Bytes::from_static(b"x"); 2000]).unwrap();
    match conn.send(m).await {
        Err(TransportError::Encode(EncodeError::ExceedsLimit {
            limit, declared, ..
        })) => {
            assert_eq!((limit, declared), (LimitName::MaxFrames, 2000))
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !conn.is_poisoned(),
        "a refused message leaves the connection usable"
    );
}

#[tokio::test(start_paused = true)]
async fn write_deadline_when_the_peer_never_reads() {
    let (a, _b) = tokio::io::duplex(64);
    let mut conn = Connection::builder()
        .limits(dask())
        .write_timeout(Some(Duration::from_secs(5)))
        .build(a);
    let m = Envelope::new(vec![pattern(1 << 20, 1)]).unwrap();
    match conn.send(m.clone()).await {
        Err(TransportError::Timeout { phase }) => assert_eq!(phase, TimeoutPhase::Write),
        other => panic!("{other:?}"),
    }
    assert!(matches!(conn.send(m).await, Err(TransportError::Poisoned)));
}

// ---- writes: cancellation harness (T10) -----------------------------------------------

#[test]
fn write_cancelled_after_n_polls_never_appends_after_half_a_message() {
    let m1 = Envelope::new(vec![pattern(50, 1), pattern(20_000, 2), pattern(30, 3)]).unwrap();
    let m2 = small_messages()[1].clone();
    let w1 = m1.to_bytes();
    let mut saw = [false; 3]; // nothing written / partial / complete
    for n in 1.. {
        let writer = Trickle::new(1000, true, true);
        let mut conn = Connection::new(writer.clone());
        let mut fut = tokio_test::task::spawn(conn.send(m1.clone()));
        let mut completed = false;
        for _ in 0..n {
            if let Poll::Ready(r) = fut.poll() {
                r.unwrap();
                completed = true;
                break;
            }
        }
        drop(fut);
        let second = tokio_test::block_on(conn.send(m2.clone()));
        drop(conn);
        let out = writer.written();
        let (decoded, tail) = decode_all(out.clone());
        if completed {
            second.unwrap();
            assert_eq!(decoded, [m1.clone(), m2.clone()]);
            assert!(tail.is_empty());
            saw[2] = true;
            break;
        } else if out.is_empty() || decoded.first() == Some(&m2) {
            // Dropped before a byte was written: the message is discarded.
            second.unwrap();
            assert_eq!(decoded, std::slice::from_ref(&m2), "n = {n}");
            assert!(tail.is_empty());
            saw[0] = true;
        } else {
            // Half a message: poisoned, nothing appended after it.
            assert!(matches!(second, Err(TransportError::Poisoned)), "n = {n}");
            assert!(decoded.is_empty());
            assert!(w1.starts_with(&out) && out.len() < w1.len(), "n = {n}");
            saw[1] = true;
        }
    }
    assert_eq!(saw, [true; 3]);
}

#[test]
fn sink_send_cancelled_completes_the_queued_message_first() {
    let m1 = Envelope::new(vec![pattern(50, 1), pattern(20_000, 2)]).unwrap();
    let m2 = small_messages()[0].clone();
    let writer = Trickle::new(1000, true, true);
    let mut conn = Connection::new(writer.clone());
    {
        let mut fut = tokio_test::task::spawn(SinkExt::send(&mut conn, m1.clone()));
        for _ in 0..5 {
            assert!(fut.poll().is_pending());
        }
    }
    tokio_test::block_on(SinkExt::send(&mut conn, m2.clone())).unwrap();
    let (decoded, tail) = decode_all(writer.written());
    assert_eq!(decoded, [m1, m2]);
    assert!(tail.is_empty());
}

// ---- connections over real sockets -------------------------------------------------------

#[tokio::test]
async fn tcp_round_trip_and_split_halves() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut msgs = small_messages();
    msgs.extend(large_messages());
    let expected = msgs.clone();
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let conn = Connection::builder().limits(dask()).build(s);
        // Echo everything through owned halves.
        let (mut rx, mut tx) = conn.into_tcp_split();
        while let Some(m) = rx.recv().await {
            tx.send(m.unwrap()).await.unwrap();
        }
        tx.close().await.unwrap();
    });
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let conn = Connection::builder().limits(dask()).build(s);
    let (mut rx, mut tx) = conn.into_split();
    let writer = tokio::spawn(async move {
        for _ in 0..3 {
            for m in &msgs {
                tx.send(m.clone()).await.unwrap();
            }
        }
        tx.close().await.unwrap();
    });
    let mut got = Vec::new();
    while let Some(m) = rx.recv().await {
        got.push(m.unwrap());
    }
    writer.await.unwrap();
    server.await.unwrap();
    assert_eq!(got.len(), 3 * expected.len());
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m, &expected[i % expected.len()]);
    }
}

#[tokio::test]
async fn sink_and_stream_interfaces() {
    let (a, b) = tokio::io::duplex(4096);
    let mut tx = Connection::builder().limits(dask()).build(a);
    let rx = Connection::builder().limits(dask()).build(b);
    let msgs: Vec<Envelope> = (0..100u32)
        .map(|i| Envelope::new(dumps(&Value::from(i)).unwrap()).unwrap())
        .collect();
    let expected = msgs.clone();
    let sender = tokio::spawn(async move {
        let mut items = futures_util::stream::iter(msgs.into_iter().map(Ok));
        tx.send_all(&mut items).await.unwrap();
        SinkExt::<Envelope>::close(&mut tx).await.unwrap();
    });
    let got: Vec<Envelope> = rx.map(|r| r.unwrap()).collect().await;
    sender.await.unwrap();
    assert_eq!(got, expected);
}

// ---- FrameCodec in Framed ----------------------------------------------------------------

#[tokio::test]
async fn codec_framed_round_trip_over_duplex() {
    let (a, b) = tokio::io::duplex(1 << 12);
    let codec = FrameCodec::builder().limits(dask()).clone();
    let mut tx = codec.new_framed(a);
    let rx = codec.new_framed(b);
    let mut msgs = small_messages();
    msgs.extend(large_messages());
    let expected = msgs.clone();
    let sender = tokio::spawn(async move {
        for m in msgs {
            tx.send(m).await.unwrap();
        }
        SinkExt::<Envelope>::close(&mut tx).await.unwrap();
    });
    let got: Vec<Envelope> = rx.map(|r| r.unwrap()).collect().await;
    sender.await.unwrap();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn codec_poisoned_after_an_error_in_framed() {
    let good = small_messages()[0].to_bytes();
    let (mut a, b) = tokio::io::duplex(1 << 12);
    let mut bytes = vec![16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // count = 0
    for _ in 0..3 {
        bytes.extend_from_slice(&good);
    }
    a.write_all(&bytes).await.unwrap();
    drop(a);
    let mut framed = FrameCodec::builder().new_framed(b);
    assert!(matches!(
        framed.next().await,
        Some(Err(TransportError::Decode(DecodeError::Envelope(
            EnvelopeError::EmptyMessage
        ))))
    ));
    // FramedRead yields None once, then would resume: the codec must refuse.
    for _ in 0..4 {
        match framed.next().await {
            None | Some(Err(TransportError::Poisoned)) => {}
            other => panic!("a message after a desync: {other:?}"),
        }
    }
    assert!(framed.codec().is_poisoned());
}

#[test]
fn codec_encode_refuses_oversize_before_writing() {
    let mut codec = FrameCodec::builder().limits(Limits::strict()).new_codec();
    let mut dst = BytesMut::new();
    let m = Envelope::new(vec![pattern(17 << 20, 1)]).unwrap();
    assert!(matches!(
        codec.encode(&m, &mut dst),
        Err(TransportError::Encode(EncodeError::ExceedsLimit {
            limit: LimitName::MaxFrameLen,
            ..
        }))
    ));
    assert!(dst.is_empty());
    // The same bytes, decoded: identical to Envelope::decode.
    let m = small_messages()[1].clone();
    codec.encode(m.clone(), &mut dst).unwrap();
    assert_eq!(dst.len() as u64, m.wire_len());
    assert_eq!(codec.decode(&mut dst).unwrap(), Some(m));
}

// ---- handshake ---------------------------------------------------------------------------

fn capture(name: &str) -> Bytes {
    std::fs::read(format!(
        "{}/tests/captures/handshake/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .into()
}

fn peer_map(bytes: &Bytes) -> Value {
    let (env, _) = Envelope::decode(bytes, &Limits::strict()).unwrap();
    framewire::message::decode(env.frames(), &Limits::strict()).unwrap()
}

#[test]
fn handshake_bytes_match_python() {
    let ours = Envelope::new(dumps(&HandshakeOptions::default().to_value().unwrap()).unwrap())
        .unwrap()
        .to_bytes();
    assert_eq!(ours, capture("client_to_server.bin"));
    assert_eq!(ours, capture("server_to_client.bin"));
}

#[test]
fn handshake_negotiation_from_python_captures() {
    let plain = HandshakeOptions::default();
    let mut lz4 = HandshakeOptions::default();
    lz4.compression = Some(Codec::Lz4);
    let n = Negotiated::new(&plain, peer_map(&capture("server_to_client.bin"))).unwrap();
    assert_eq!((n.codec(), n.pickle_protocol()), (None, 5));
    assert_eq!(n.peer_python(), Some([3, 11, 7]));
    let theirs = peer_map(&capture("lz4_server_to_client.bin"));
    assert_eq!(theirs.get("compression"), Some(&Value::str("lz4")));
    let n = Negotiated::new(&lz4, theirs.clone()).unwrap();
    assert_eq!(n.codec(), Some(Codec::Lz4));
    let n = Negotiated::new(&plain, theirs).unwrap();
    assert_eq!(n.codec(), None, "different offers: no compression");
}

#[test]
fn handshake_negotiation_rules() {
    let ours = HandshakeOptions::default();
    let map = |entries: Vec<(&str, Value)>| Value::map_of(entries);
    let n = Negotiated::new(
        &ours,
        map(vec![
            ("compression", Value::Nil),
            ("pickle-protocol", 4.into()),
        ]),
    )
    .unwrap();
    assert_eq!(n.pickle_protocol(), 4);
    let n = Negotiated::new(
        &ours,
        map(vec![
            ("compression", Value::Nil),
            ("pickle-protocol", 9.into()),
        ]),
    )
    .unwrap();
    assert_eq!(n.pickle_protocol(), 5, "the lower of the two");
    let cases = [
        (
            map(vec![("compression", Value::Nil)]),
            HandshakeError::MissingKey("pickle-protocol"),
        ),
        (
            map(vec![("pickle-protocol", 5.into())]),
            HandshakeError::MissingKey("compression"),
        ),
        (
            map(vec![
                ("compression", Value::Nil),
                ("pickle-protocol", "5".into()),
            ]),
            HandshakeError::InvalidValue("pickle-protocol"),
        ),
        (
            map(vec![
                ("compression", Value::Nil),
                ("pickle-protocol", (-1).into()),
            ]),
            HandshakeError::InvalidValue("pickle-protocol"),
        ),
        (
            map(vec![
                ("compression", 1.into()),
                ("pickle-protocol", 5.into()),
            ]),
            HandshakeError::InvalidValue("compression"),
        ),
        (Value::Array(vec![]), HandshakeError::NotAMap),
    ];
    for (peer, err) in cases {
        assert_eq!(Negotiated::new(&ours, peer.clone()), Err(err), "{peer:?}");
    }
}

#[test]
fn handshake_extensions() {
    let ours = HandshakeOptions::default()
        .extension("crc32c", Value::Bool(true))
        .extension("mmap", Value::str("v2"));
    let v = ours.to_value().unwrap();
    let keys: Vec<&str> = v
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "compression",
            "python",
            "pickle-protocol",
            "framewire-crc32c",
            "framewire-mmap"
        ]
    );
    let theirs = Value::map_of([
        ("compression", Value::Nil),
        ("python", Value::Array(vec![3.into(), 11.into(), 7.into()])),
        ("pickle-protocol", 5.into()),
        ("framewire-mmap", Value::str("v1")),
        ("framewire-zstd", Value::Bool(true)),
        ("unrelated", Value::Nil),
    ]);
    let n = Negotiated::new(&ours, theirs).unwrap();
    assert_eq!(
        n.peer_extensions(),
        [("mmap", &Value::str("v1")), ("zstd", &Value::Bool(true))]
    );
    assert!(n.agreed("mmap"));
    assert!(!n.agreed("crc32c"), "only we offered it");
    assert!(!n.agreed("zstd"), "only they offered it");
    assert_eq!(n.peer_extension("mmap"), Some(&Value::str("v1")));

    let dup = HandshakeOptions::default()
        .extension("a", Value::Nil)
        .extension("a", Value::Nil);
    assert_eq!(dup.to_value(), Err(HandshakeError::InvalidExtensionName));
    let empty = HandshakeOptions::default().extension("", Value::Nil);
    assert_eq!(empty.to_value(), Err(HandshakeError::InvalidExtensionName));
}

#[tokio::test]
async fn handshake_both_write_first_on_a_tiny_pipe() {
    // An 8-byte pipe: a write-then-read handshake would deadlock.
    let (a, b) = tokio::io::duplex(8);
    let x = HandshakeOptions::default().extension("crc32c", Value::Bool(true));
    let y = {
        let mut o = HandshakeOptions::default();
        o.pickle_protocol = 4;
        o.compression = Some(Codec::Lz4);
        o
    }
    .extension("crc32c", Value::str("yes"));
    let builder = ConnectionBuilder::new();
    let (l, r) = tokio::join!(builder.handshake(a, &x), builder.handshake(b, &y));
    let ((mut l, nl), (mut r, nr)) = (l.unwrap(), r.unwrap());
    for n in [&nl, &nr] {
        assert_eq!(n.pickle_protocol(), 4);
        assert_eq!(n.codec(), None);
        assert!(n.agreed("crc32c"));
    }
    assert_eq!(nl.peer_extension("crc32c"), Some(&Value::str("yes")));
    // The connection works afterwards, in both directions.
    let m = small_messages()[2].clone();
    let (sent, got) = tokio::join!(l.send(m.clone()), r.recv());
    sent.unwrap();
    assert_eq!(got.unwrap().unwrap(), m);
    let (sent, got) = tokio::join!(r.send(m.clone()), l.recv());
    sent.unwrap();
    assert_eq!(got.unwrap().unwrap(), m);
}

#[tokio::test]
async fn handshake_then_large_message_in_the_same_read() {
    // A peer's handshake and first message arrive together: the message is
    // kept, and read under the connection's limits, not the handshake's.
    let theirs = Envelope::new(dumps(&HandshakeOptions::default().to_value().unwrap()).unwrap())
        .unwrap()
        .to_bytes();
    let big = Envelope::new(vec![pattern(10, 1), pattern(2 << 20, 2)]).unwrap();
    let mut bytes = theirs.to_vec();
    bytes.extend_from_slice(&big.to_bytes());
    let ours = theirs.clone();
    let (mut a, b) = tokio::io::duplex(1 << 16);
    let peer = tokio::spawn(async move {
        a.write_all(&bytes).await.unwrap();
        let mut got = vec![0u8; ours.len()];
        tokio::io::AsyncReadExt::read_exact(&mut a, &mut got)
            .await
            .unwrap();
        assert_eq!(got, ours);
        a
    });
    let (mut conn, n) = Connection::builder()
        .limits(dask())
        .handshake(b, &HandshakeOptions::default())
        .await
        .unwrap();
    assert_eq!(n.pickle_protocol(), 5);
    assert_eq!(conn.recv().await.unwrap().unwrap(), big);
    drop(peer.await.unwrap());
    assert!(conn.recv().await.is_none());
}

#[tokio::test]
async fn handshake_failures() {
    // The peer closes without a handshake.
    let (a, b) = tokio::io::duplex(1 << 12);
    drop(b);
    assert!(matches!(
        ConnectionBuilder::new()
            .handshake(a, &HandshakeOptions::default())
            .await,
        Err(TransportError::Closed) | Err(TransportError::Io(_))
    ));
    // The peer sends garbage.
    let (a, mut b) = tokio::io::duplex(1 << 12);
    b.write_all(&[0u8; 16]).await.unwrap();
    assert!(matches!(
        ConnectionBuilder::new()
            .handshake(a, &HandshakeOptions::default())
            .await,
        Err(TransportError::Decode(DecodeError::Envelope(
            EnvelopeError::EmptyMessage
        )))
    ));
    // The peer's handshake lacks pickle-protocol.
    let (a, mut b) = tokio::io::duplex(1 << 12);
    let bad = Value::map_of([("compression", Value::Nil)]);
    b.write_all(&Envelope::new(dumps(&bad).unwrap()).unwrap().to_bytes())
        .await
        .unwrap();
    assert!(matches!(
        ConnectionBuilder::new()
            .handshake(a, &HandshakeOptions::default())
            .await,
        Err(TransportError::Handshake(HandshakeError::MissingKey(
            "pickle-protocol"
        )))
    ));
    // A handshake over the handshake limits (64 KiB).
    let (a, mut b) = tokio::io::duplex(1 << 12);
    let huge = Envelope::new(vec![pattern(1 << 20, 0)]).unwrap();
    let writer = tokio::spawn(async move {
        let _ = b.write_all(&huge.to_bytes()).await;
        b
    });
    assert!(matches!(
        ConnectionBuilder::new()
            .handshake(a, &HandshakeOptions::default())
            .await,
        Err(TransportError::Decode(DecodeError::Envelope(
            EnvelopeError::FrameTooLarge { .. }
        )))
    ));
    drop(writer.await);
}

#[tokio::test(start_paused = true)]
async fn handshake_timeout() {
    let (a, _b) = tokio::io::duplex(1 << 12);
    let mut opts = HandshakeOptions::default();
    opts.timeout = Some(Duration::from_secs(5));
    assert!(matches!(
        ConnectionBuilder::new().handshake(a, &opts).await,
        Err(TransportError::Timeout {
            phase: TimeoutPhase::Handshake
        })
    ));
}

#[tokio::test]
async fn handshake_over_tcp_connect_and_accept() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = HandshakeOptions::default().extension("x", Value::from(1u8));
    let server_opts = opts.clone();
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let (mut conn, n) = Connection::builder().accept(s, &server_opts).await.unwrap();
        assert!(n.agreed("x"));
        let m = conn.recv().await.unwrap().unwrap();
        conn.send(m).await.unwrap();
    });
    let (mut conn, n) = Connection::builder()
        .connect(&addr.to_string(), &opts)
        .await
        .unwrap();
    assert!(n.agreed("x"));
    assert!(conn.get_ref().tcp().nodelay().unwrap());
    let m = small_messages()[1].clone();
    conn.send(m.clone()).await.unwrap();
    assert_eq!(conn.recv().await.unwrap().unwrap(), m);
    server.await.unwrap();
}

/// Shards that arrive back to back merge into a slice of the receive
/// buffer (`Envelope::buffers` → `DeserializeOptions::backed_by`), not a copy.
#[tokio::test]
async fn received_shards_merge_in_the_receive_buffer() {
    use framewire::serialize::{deserialize_blocks, DeserializeOptions, SerializeOptions};
    let payload: Bytes = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
    let msg = Value::map_of([
        ("op", Value::str("put")),
        (
            "data",
            Value::ToSerialize(Box::new(Value::Bin(payload.clone()))),
        ),
    ]);
    let mut opts = SerializeOptions::default();
    opts.shard_size = 1 << 20;
    let frames = dumps_with(&msg, &opts).unwrap();
    assert_eq!(frames.len(), 6, "frame 0, a sub-header, 4 shards");
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut tx = Connection::builder().limits(dask()).build(a);
    let mut rx = Connection::builder().limits(dask()).build(b);
    let (sent, got) = tokio::join!(tx.send(Envelope::new(frames).unwrap()), rx.recv());
    sent.unwrap();
    let env = got.unwrap().unwrap();
    let value = framewire::message::decode(env.frames(), &dask()).unwrap();
    let de = DeserializeOptions::with_limits(dask()).backed_by(&env);
    let value = deserialize_blocks(value, &de).unwrap();
    let Some(Value::Bin(data)) = value.get("data") else {
        panic!("no bytes")
    };
    assert!(*data == payload);
    let inside = env.buffers().iter().any(|buf| {
        let base = buf.as_ptr() as usize;
        let p = data.as_ptr() as usize;
        p >= base && p + data.len() <= base + buf.len()
    });
    assert!(inside, "the merged payload was copied");
    // Without the backing, the same merge copies (one copy, same bytes).
    let copy = deserialize_blocks(
        framewire::message::decode(env.frames(), &dask()).unwrap(),
        &DeserializeOptions::with_limits(dask()),
    )
    .unwrap();
    assert!(copy == value);
}
