//! Proof of zero copy, in bytes (deterministic), never in seconds.
//!
//! A counting global allocator (per thread, like `tests/common`'s, plus the
//! address range of every large allocation and the bytes a `realloc` moved)
//! watches one side of a loopback TCP connection at a time:
//!
//! * **encode**: `dumps` + `Envelope::new` + `Connection::send` of a message
//!   carrying a 64 MiB payload allocates a few KiB, and the transport's
//!   `Stats::bytes_copied_on_send` is exactly the small frames;
//! * **decode**: `recv` + `loads` + `deserialize_blocks` allocates the payload
//!   once (the buffer the socket reads into), the payload frame lies inside
//!   that allocation and the deserialized bytes are the frame itself; a
//!   second message on the same connection reuses the buffer (no large
//!   allocation at all); `Envelope::decode` of a wire buffer allocates
//!   nothing large;
//! * a control: `FrameCodec`'s encoder, which copies by design, is seen to
//!   allocate the payload (the instrument sees a copy when there is one).
//!
//! Every test prints its figures (`cargo test --test zero_copy -- --nocapture`).

#[path = "support/mappings.rs"]
mod mappings;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{TcpListener, TcpStream};

use bytes::{Bytes, BytesMut};
use framewire::dumps_with;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{DeserializeOptions, SerializeOptions};
use framewire::transport::{Connection, FrameCodec, COALESCE_THRESHOLD};
use framewire::{dumps, Envelope, Limits, Value};
use tokio_util::codec::Encoder;

// ---- the instrument ----------------------------------------------------------------------

/// Allocations of at least this size have their address range recorded.
const BIG: usize = 1 << 20;
const SLOTS: usize = 64;

struct Counting;

thread_local! {
    // const-initialised, no destructor: safe to touch from inside the allocator.
    static ON: Cell<bool> = const { Cell::new(false) };
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static CALLS: Cell<usize> = const { Cell::new(0) };
    static MOVED: Cell<usize> = const { Cell::new(0) };
    static BIGS: Cell<[(usize, usize); SLOTS]> = const { Cell::new([(0, 0); SLOTS]) };
}

fn on() -> bool {
    ON.try_with(Cell::get).unwrap_or(false)
}

fn add(cell: &'static std::thread::LocalKey<Cell<usize>>, n: usize) {
    let _ = cell.try_with(|c| c.set(c.get() + n));
}

fn live(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

/// Records `[ptr, ptr + size)`, replacing the entry of `old` (a realloc).
fn record_big(old: usize, ptr: usize, size: usize) {
    let _ = BIGS.try_with(|b| {
        let mut slots = b.get();
        let i = slots
            .iter()
            .position(|&(p, n)| old != 0 && p == old && n > 0)
            .or_else(|| slots.iter().position(|&(_, n)| n == 0));
        if let Some(i) = i {
            slots[i] = (ptr, size);
            b.set(slots);
        }
    });
}

/// Counts a fresh allocation of `size` bytes at `p` (null: none).
fn allocated(p: *mut u8, size: usize) -> *mut u8 {
    if !p.is_null() && on() {
        add(&ALLOCATED, size);
        add(&CALLS, 1);
        live(size as isize);
        if size >= BIG {
            record_big(0, p as usize, size);
        }
    }
    p
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocated(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        allocated(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if on() {
            live(-(layout.size() as isize));
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && on() {
            add(&ALLOCATED, new_size.saturating_sub(layout.size()));
            add(&CALLS, 1);
            live(new_size as isize - layout.size() as isize);
            if p != ptr {
                // The old contents were carried over (memcpy, or mremap for large blocks).
                add(&MOVED, layout.size().min(new_size));
            }
            if new_size >= BIG {
                record_big(ptr as usize, p as usize, new_size);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the calling thread allocated during one [`measure`].
#[derive(Debug)]
struct Report {
    /// Bytes newly allocated: every `alloc`, plus the growth of every `realloc`.
    allocated: usize,
    /// Highest number of bytes live at once, relative to the start.
    peak: usize,
    /// Allocation calls.
    calls: usize,
    /// Bytes carried over by reallocs that moved their block.
    moved: usize,
    /// Address ranges of the allocations of at least 1 MiB.
    bigs: Vec<(usize, usize)>,
}

impl Report {
    /// Whether `b` lies inside one of the large allocations.
    fn contains(&self, b: &[u8]) -> bool {
        let (start, end) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        self.bigs.iter().any(|&(p, n)| start >= p && end <= p + n)
    }
}

fn measure<R>(f: impl FnOnce() -> R) -> (R, Report) {
    ALLOCATED.with(|c| c.set(0));
    LIVE.with(|c| c.set(0));
    PEAK.with(|c| c.set(0));
    CALLS.with(|c| c.set(0));
    MOVED.with(|c| c.set(0));
    BIGS.with(|c| c.set([(0, 0); SLOTS]));
    ON.with(|c| c.set(true));
    let r = f();
    ON.with(|c| c.set(false));
    let report = Report {
        allocated: ALLOCATED.with(Cell::get),
        peak: PEAK.with(Cell::get).max(0) as usize,
        calls: CALLS.with(Cell::get),
        moved: MOVED.with(Cell::get),
        bigs: BIGS
            .with(Cell::get)
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect(),
    };
    (r, report)
}

// ---- set-up ------------------------------------------------------------------------------

const MIB: usize = 1 << 20;
const PAYLOAD: usize = 64 * MIB;

fn payload(size: usize) -> Bytes {
    let mut v = vec![0x5au8; size];
    for (i, b) in v.iter_mut().enumerate().step_by(4096) {
        *b = (i / 4096) as u8;
    }
    Bytes::from(v)
}

fn task(payload: Bytes) -> Value {
    Value::map_of([
        ("op", "compute-task".into()),
        ("key", Value::Array(vec!["x".into(), 1.into()])),
        (
            "run_spec",
            Value::Array(vec![
                "f".into(),
                Value::ToSerialize(Box::new(Value::Bin(payload))),
            ]),
        ),
        ("priority", Value::Array(vec![0.into(), 1.into()])),
    ])
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    (a, b)
}

/// A current-thread runtime (so the I/O happens on the measured thread) and
/// a connection over `s` under `Limits::dask_compat()`.
fn connection(s: TcpStream) -> (tokio::runtime::Runtime, Connection<tokio::net::TcpStream>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = {
        let _guard = rt.enter();
        tokio::net::TcpStream::from_std(s).unwrap()
    };
    let conn = Connection::builder().limits(Limits::dask_compat()).build(s);
    (rt, conn)
}

fn de() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::dask_compat())
}

/// The `Bin` at `run_spec[1]` of a deserialized [`task`].
fn bin_of(value: &Value) -> &Bytes {
    match value.get("run_spec").and_then(Value::as_array) {
        Some([_, Value::Bin(b)]) => b,
        other => panic!("expected run_spec = [f, bytes], got {other:?}"),
    }
}

fn mib(n: usize) -> String {
    format!("{:.3} MiB", n as f64 / MIB as f64)
}

// ---- encode ------------------------------------------------------------------------------

#[test]
fn encode_and_send_copy_only_small_frames() {
    let payload = payload(PAYLOAD);
    let msg = task(payload.clone());
    let (a, b) = tcp_pair();
    let (sent, received) = std::thread::scope(|scope| {
        let receiver = scope.spawn(move || {
            let (rt, mut rx) = connection(b);
            let env = rt.block_on(rx.recv()).unwrap().unwrap();
            (env.wire_len(), rx.stats())
        });
        let (rt, mut tx) = connection(a);
        let ((small, frames), report) = measure(|| {
            let frames = dumps(&msg).unwrap();
            assert!(
                frames
                    .iter()
                    .any(|f| f.as_ptr() == payload.as_ptr() && f.len() == PAYLOAD),
                "dumps must hand over the payload's own Bytes"
            );
            let small: usize = frames
                .iter()
                .filter(|f| f.len() < COALESCE_THRESHOLD)
                .map(Bytes::len)
                .sum();
            let count = frames.len();
            rt.block_on(tx.send(Envelope::new(frames).unwrap()))
                .unwrap();
            (small, count)
        });
        let stats = tx.stats();
        println!(
            "encode: dumps + Envelope + Connection::send of a {} payload ({frames} frames): \
             allocated {} bytes in {} calls (peak {} bytes); bytes_copied_on_send {} \
             (small frames: {small} bytes); payload bytes copied: {}",
            mib(PAYLOAD),
            report.allocated,
            report.calls,
            report.peak,
            stats.bytes_copied_on_send,
            stats.bytes_copied_on_send.saturating_sub(small as u64),
        );
        assert!(
            report.allocated < 64 << 10,
            "sending a 64 MiB payload allocated {} bytes: the payload was copied",
            report.allocated
        );
        assert!(
            report.bigs.is_empty(),
            "large allocations: {:?}",
            report.bigs
        );
        assert_eq!(stats.bytes_copied_on_send, small as u64);
        assert!(small < 4096, "small frames: {small} bytes");
        assert_eq!((stats.messages_sent, stats.frames_sent), (1, frames as u64));
        (stats, receiver.join().unwrap())
    });
    assert_eq!(received.0, sent.bytes_sent);
    assert_eq!(received.1.bytes_received, sent.bytes_sent);
}

/// The control: an encoder that copies is seen copying.
#[test]
fn framecodec_encoder_is_seen_copying() {
    let payload = payload(16 * MIB);
    let env = Envelope::new(vec![Bytes::from_static(b"\x90"), payload.clone()]).unwrap();
    let mut codec = FrameCodec::builder()
        .limits(Limits::dask_compat())
        .new_codec();
    let (buf, report) = measure(|| {
        let mut buf = BytesMut::new();
        codec.encode(&env, &mut buf).unwrap();
        buf
    });
    println!(
        "control: FrameCodec::encode of a {} payload allocated {} bytes (it copies, by design)",
        mib(payload.len()),
        report.allocated
    );
    assert!(report.allocated >= payload.len());
    assert!(report.contains(&buf[buf.len() - payload.len()..]));
}

// ---- decode ------------------------------------------------------------------------------

#[test]
fn recv_reads_the_payload_once_into_the_buffer_frames_slice() {
    let payload = payload(PAYLOAD);
    let msg = task(payload.clone());
    let (a, b) = tcp_pair();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let (rt, mut tx) = connection(a);
            for _ in 0..2 {
                rt.block_on(tx.send(Envelope::new(dumps(&msg).unwrap()).unwrap()))
                    .unwrap();
            }
        });
        let (rt, mut rx) = connection(b);

        // First message: one buffer mapped at the payload's length, the
        // payload lands in it, once (from the kernel; only the read-ahead
        // is copied), and it never moves.
        let before = mappings::anonymous_mappings();
        let ((env, value), report) = measure(|| {
            let env = rt.block_on(rx.recv()).unwrap().unwrap();
            let value = decode(env.frames(), &Limits::dask_compat()).unwrap();
            let value = deserialize_blocks(value, &de()).unwrap();
            (env, value)
        });
        let frame = env
            .frames()
            .iter()
            .find(|f| f.len() == PAYLOAD)
            .expect("the payload frame");
        let bin = bin_of(&value);
        println!(
            "decode: recv + loads + deserialize_blocks of a {} payload: allocated {} in {} calls \
             (peak {}); large allocations {:?}; moved by realloc while growing: {}; \
             deserialized bytes are the frame: {}; {:?}",
            mib(PAYLOAD),
            mib(report.allocated),
            report.calls,
            mib(report.peak),
            report.bigs.iter().map(|&(_, n)| mib(n)).collect::<Vec<_>>(),
            mib(report.moved),
            bin.as_ptr() == frame.as_ptr(),
            rx.stats(),
        );
        let mapped = mappings::anonymous_mappings()
            .into_iter()
            .filter(|m| !before.contains(m))
            .find(|m| m.contains(&(frame.as_ptr() as usize)));
        let mapped = mapped.expect("the payload frame is not in a buffer recv mapped for it");
        assert!(frame.as_ptr() as usize + frame.len() <= mapped.end);
        assert!(
            report.allocated < PAYLOAD / 64,
            "recv allocated {} bytes on the heap for a {PAYLOAD}-byte payload",
            report.allocated
        );
        let stats = rx.stats();
        assert_eq!(stats.bytes_relocated_on_receive, 0, "{stats:?}");
        assert!(stats.bytes_copied_on_receive <= 64 << 10, "{stats:?}");
        assert_eq!(
            bin.as_ptr(),
            frame.as_ptr(),
            "deserialize copied the payload"
        );
        assert_eq!(bin.len(), PAYLOAD);
        assert!(bin[..] == payload[..], "payload bytes differ");
        drop((env, value));

        // Second message: the recycled buffer takes it, nothing large is allocated.
        let (env, report) = measure(|| rt.block_on(rx.recv()).unwrap().unwrap());
        println!(
            "decode: second message on the same connection (first one dropped): allocated {} \
             bytes in {} calls; large allocations: {}",
            report.allocated,
            report.calls,
            report.bigs.len()
        );
        assert!(
            report.allocated < 256 << 10,
            "recycled recv allocated {} bytes",
            report.allocated
        );
        assert!(report.bigs.is_empty());
        let frame = env.frames().iter().find(|f| f.len() == PAYLOAD).unwrap();
        assert!(
            mapped.contains(&(frame.as_ptr() as usize)),
            "the second payload is not in the first one's buffer"
        );
        assert_eq!(rx.stats().buffers_recycled_on_receive, 1);
        assert_eq!(rx.stats().bytes_relocated_on_receive, 0);
    });
}

#[test]
fn envelope_decode_and_loads_slice_the_wire_buffer() {
    let payload = payload(PAYLOAD);
    let wire = Envelope::new(dumps(&task(payload)).unwrap())
        .unwrap()
        .to_bytes();
    let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
    let ((env, value), report) = measure(|| {
        let (env, used) = Envelope::decode(&wire, &Limits::dask_compat()).unwrap();
        assert_eq!(used, wire.len());
        let value = decode(env.frames(), &Limits::dask_compat()).unwrap();
        let value = deserialize_blocks(value, &de()).unwrap();
        (env, value)
    });
    let inside = |b: &[u8]| {
        range.contains(&(b.as_ptr() as usize)) && b.as_ptr() as usize + b.len() <= range.end
    };
    println!(
        "decode: Envelope::decode + loads + deserialize_blocks of a {}-byte wire buffer: \
         allocated {} bytes in {} calls; every frame a slice of the wire: {}",
        wire.len(),
        report.allocated,
        report.calls,
        env.frames().iter().all(|f| inside(f)),
    );
    assert!(env.frames().iter().all(|f| inside(f)));
    assert!(inside(bin_of(&value)));
    assert!(
        report.allocated < 64 << 10,
        "allocated {}",
        report.allocated
    );
    assert!(report.bigs.is_empty());
}

/// A sharded payload (8 shards of 1 MiB here; Dask shards at 64 MiB) arrives
/// as adjacent slices of one receive buffer, allocated once.
#[test]
fn shards_arrive_adjacent_in_one_buffer() {
    const SIZE: usize = 8 * MIB;
    let payload = payload(SIZE);
    let mut opts = SerializeOptions::default();
    opts.shard_size = MIB;
    let frames = dumps_with(&task(payload), &opts).unwrap();
    let (a, b) = tcp_pair();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let (rt, mut tx) = connection(a);
            rt.block_on(tx.send(Envelope::new(frames).unwrap()))
                .unwrap();
        });
        let (rt, mut rx) = connection(b);
        let (env, report) = measure(|| rt.block_on(rx.recv()).unwrap().unwrap());
        let shards: Vec<&Bytes> = env.frames().iter().filter(|f| f.len() == MIB).collect();
        let adjacent = shards
            .windows(2)
            .all(|w| w[0].as_ptr() as usize + w[0].len() == w[1].as_ptr() as usize);
        println!(
            "decode: {} shards of 1 MiB: adjacent {adjacent}, inside one receive allocation {}; \
             allocated {}",
            shards.len(),
            report.bigs.iter().any(|&(p, n)| {
                let (s, e) = (
                    shards[0].as_ptr() as usize,
                    shards[7].as_ptr() as usize + MIB,
                );
                s >= p && e <= p + n
            }),
            mib(report.allocated)
        );
        assert_eq!(shards.len(), 8);
        assert!(adjacent);
        assert!(
            report.allocated <= SIZE + SIZE / 4,
            "allocated {}",
            report.allocated
        );
    });
}

/// Received shards lie back to back in one receive buffer
/// (`Envelope::buffers`); deserialized with `DeserializeOptions::backed_by`,
/// they merge into a slice of it: no copy.
#[test]
fn received_shards_merge_without_copy() {
    const SIZE: usize = 8 * MIB;
    let mut opts = SerializeOptions::default();
    opts.shard_size = MIB;
    let frames = dumps_with(&task(payload(SIZE)), &opts).unwrap();
    let (a, b) = tcp_pair();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let (rt, mut tx) = connection(a);
            rt.block_on(tx.send(Envelope::new(frames).unwrap()))
                .unwrap();
        });
        let (rt, mut rx) = connection(b);
        let env = rt.block_on(rx.recv()).unwrap().unwrap();
        let value = decode(env.frames(), &Limits::dask_compat()).unwrap();
        let backed = de().backed_by(&env);
        let (value, report) = measure(|| deserialize_blocks(value, &backed).unwrap());
        println!(
            "deserialize_blocks of 8 received 1 MiB shards allocated {}",
            mib(report.allocated)
        );
        assert_eq!(bin_of(&value).len(), SIZE);
        assert!(
            report.allocated < MIB,
            "merging copied {} bytes",
            report.allocated
        );
    });
}

/// A list of bytes sent iterated (one frame an item) arrives back to back in
/// one receive buffer, and deserializes packed: one slice of that buffer and
/// 4 bytes an item, not a `Value` (40 bytes) an item.
#[test]
fn a_received_list_of_bytes_deserializes_into_one_slice_of_the_receive_buffer() {
    use framewire::serialize::IterateCollection;
    const N: usize = 10_000;
    let items: Vec<Value> = (0..N as u64)
        .map(|i| Value::Bin(Bytes::copy_from_slice(&i.to_le_bytes())))
        .collect();
    let boxed = Value::Array(items);
    let msg = Value::map_of([
        ("op", Value::str("update-data")),
        ("data", Value::ToSerialize(Box::new(boxed.clone()))),
    ]);
    let mut opts = SerializeOptions::default();
    opts.iterate = IterateCollection::Always;
    let frames = dumps_with(&msg, &opts).unwrap();
    assert!(frames.len() > N);
    let (a, b) = tcp_pair();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let (rt, mut tx) = connection(a);
            rt.block_on(tx.send(Envelope::new(frames).unwrap()))
                .unwrap();
        });
        let (rt, mut rx) = connection(b);
        let env = rt.block_on(rx.recv()).unwrap().unwrap();
        let value = decode(env.frames(), &Limits::dask_compat()).unwrap();
        let backed = de().backed_by(&env);
        let (value, report) = measure(|| deserialize_blocks(value, &backed).unwrap());
        let data = value.get("data").unwrap();
        let packed = data.as_bin_array().expect("packed");
        let span = packed
            .as_contiguous()
            .expect("one slice of the receive buffer");
        println!(
            "deserialize_blocks of {N} received 8-byte bytes: packed into one slice of {} bytes; \
             allocated {} ({:.1} bytes an item) in {} calls, peak {}",
            span.len(),
            report.allocated,
            report.allocated as f64 / N as f64,
            report.calls,
            report.peak
        );
        assert_eq!(span.len(), 8 * N);
        assert!(env.buffers().iter().any(|buf| buf.as_ptr() <= span.as_ptr()
            && span.as_ptr() as usize + span.len() <= buf.as_ptr() as usize + buf.len()));
        assert_eq!(*data, boxed);
        // The items' ends (4 bytes each) and the frame-lengths table live at
        // once at most, never a `Value` (40 bytes) or a `Bytes` (32) an item.
        assert!(
            report.peak < N * 32,
            "{} bytes live at once for {N} items",
            report.peak
        );
    });
}
