//! What the benches share: the collections measured by `benches/serialize.rs`
//! and `benches/compare.rs`, the task messages, and the loopback TCP links
//! of `benches/transport.rs` and `benches/compare.rs` (one setup for every
//! transport variant, so the variants differ only in their framing code).
#![allow(dead_code)]

use std::io::IoSlice;
use std::time::{Duration, Instant};

use bytes::Bytes;
use framewire::message::decode;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{serialize, DeserializeOptions, IterateCollection, SerializeOptions};
use framewire::transport::{Connection, ConnectionBuilder, FrameCodec, ReadHalf, WriteHalf};
use framewire::{dumps, Envelope, Limits, NdArray, Value};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
pub const GIB: usize = 1 << 30;

/// The frames of a captured 2026.8.0 message,
/// `tests/captures/conversation/<case>/frame_NNN.bin`.
pub fn capture_frames(case: &str) -> Vec<Bytes> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/captures/conversation")
        .join(case);
    (0..)
        .map(|i| dir.join(format!("frame_{i:03}.bin")))
        .take_while(|p| p.exists())
        .map(|p| Bytes::from(std::fs::read(p).expect("a capture frame")))
        .collect()
}

/// A human size name: `1KiB`, `64MiB`, `1GiB`.
pub fn size_name(size: usize) -> String {
    match size {
        s if s >= GIB && s % GIB == 0 => format!("{}GiB", s / GIB),
        s if s >= MIB && s % MIB == 0 => format!("{}MiB", s / MIB),
        s if s >= KIB && s % KIB == 0 => format!("{}KiB", s / KIB),
        s => format!("{s}B"),
    }
}

// ---- collections -------------------------------------------------------------------------

/// The collections of the serialize benches; `n` is the number of leaf
/// elements (the per-element figures divide by it).
pub const STRUCTS: [&str; 7] = [
    "tuple_small_ints",
    "list_bytes8",
    "dict_str_int",
    "nested_small_ints",
    "serialized_start",
    "serialized_middle",
    "serialized_end",
];

/// `never` / `auto` / `always`: Dask's `iterate_collection=False / None / True`.
pub fn modes() -> [(&'static str, IterateCollection); 3] {
    [
        ("never", IterateCollection::Never),
        ("auto", IterateCollection::Auto),
        ("always", IterateCollection::Always),
    ]
}

pub fn mode(name: &str) -> IterateCollection {
    modes()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown mode {name}"))
        .1
}

/// A collection of `n` leaves:
/// * `tuple_small_ints`: `tuple(i % 100 for i in range(n))`;
/// * `tuple_small_ints_packed`: the same, built as a [`Value::IntArray`];
/// * `list_bytes8`: `[i.to_bytes(8, "little") for i in range(n)]`;
/// * `dict_str_int`: `{f"k{i}": i % 100 for i in range(n)}`;
/// * `nested_small_ints`: `n / 10` lists of 10 small ints;
/// * `serialized_{start,middle,end}`: small ints with one pre-serialized
///   `Serialized` block (64 bytes) at index 0, `n / 2` or `n - 1`: `Never`
///   refuses it, `Auto` has to find it.
pub fn collection(name: &str, n: usize) -> Value {
    let int = |i: usize| Value::from(i % 100);
    match name {
        "tuple_small_ints" => Value::Array((0..n).map(int).collect()),
        "tuple_small_ints_packed" => {
            Value::from((0..n).map(|i| (i % 100) as i64).collect::<Vec<_>>())
        }
        "list_bytes8" => Value::Array(
            (0..n)
                .map(|i| Value::Bin(Bytes::copy_from_slice(&(i as u64).to_le_bytes())))
                .collect(),
        ),
        "dict_str_int" => Value::Map(
            (0..n)
                .map(|i| (Value::str(&format!("k{i}")), int(i)))
                .collect(),
        ),
        "nested_small_ints" => Value::Array(
            (0..n)
                .step_by(10)
                .map(|start| Value::Array((start..(start + 10).min(n)).map(int).collect()))
                .collect(),
        ),
        "serialized_start" => with_serialized(n, 0),
        "serialized_middle" => with_serialized(n, n / 2),
        "serialized_end" => with_serialized(n, n.saturating_sub(1)),
        other => panic!("unknown collection {other}"),
    }
}

fn with_serialized(n: usize, at: usize) -> Value {
    let block = serialize(
        &Value::Bin(Bytes::from_static(&[7; 64])),
        &SerializeOptions::default(),
    )
    .expect("serialize 64 bytes");
    let mut items: Vec<Value> = (0..n).map(|i| Value::from(i % 100)).collect();
    if let Some(slot) = items.get_mut(at) {
        *slot = Value::Serialized(Box::new(block));
    }
    Value::Array(items)
}

pub fn serialize_options(mode: IterateCollection) -> SerializeOptions {
    {
        let mut o = SerializeOptions::default();
        o.iterate = mode;
        o
    }
}

pub fn deserialize_options() -> DeserializeOptions {
    DeserializeOptions::with_limits(Limits::dask_compat())
}

// ---- messages ----------------------------------------------------------------------------

/// `size` bytes, not all equal (so nothing can shortcut them).
pub fn payload(size: usize) -> Bytes {
    Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

/// `{"op": "compute-task", "key": ("x", 0), "data": to_serialize(bytes)}`:
/// the `dumps` rows (Python: the same dict with `to_serialize(b"..." * size)`).
pub fn serialize_task(payload: Bytes) -> Value {
    Value::map_of([
        ("op", "compute-task".into()),
        ("key", Value::Array(vec!["x".into(), 0.into()])),
        ("data", Value::ToSerialize(Box::new(Value::Bin(payload)))),
    ])
}

/// `{"op": "send", "data": to_serialize(np.ndarray(uint8, size))}`: the
/// task-message transport rows and the peak-RSS row (Dask's zero-copy
/// numpy path on the Python side).
pub fn ndarray_message(payload: Bytes) -> Value {
    let n = payload.len() as u64;
    let array = NdArray::from_c_order("|u1", &[n], payload).expect("a u8 array");
    Value::map_of([
        ("op", "send".into()),
        ("data", Value::NdArray(Box::new(array))),
    ])
}

/// `py_small_msgs.py`'s message: `{"op": "compute-task", "key": ("x", 1),
/// "run_spec": ("f", to_serialize(b"\0" * 1024)), "priority": (0, 1)}`.
pub fn small_task() -> Value {
    Value::map_of([
        ("op", "compute-task".into()),
        ("key", Value::Array(vec!["x".into(), 1.into()])),
        (
            "run_spec",
            Value::Array(vec![
                "f".into(),
                Value::ToSerialize(Box::new(Value::Bin(Bytes::from(vec![0u8; 1024])))),
            ]),
        ),
        ("priority", Value::Array(vec![0.into(), 1.into()])),
    ])
}

// ---- loopback links ----------------------------------------------------------------------

/// The runtime of a transport measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `new_current_thread`: every task on the one thread that drives it
    /// (like one Python process with one event loop).
    OneThread,
    /// `new_multi_thread` with 2 workers (tokio's default on this
    /// 2-core machine): tasks may run on both cores.
    TwoThreads,
}

impl Flavor {
    pub fn parse(s: &str) -> Flavor {
        match s {
            "1thread" => Flavor::OneThread,
            "2threads" => Flavor::TwoThreads,
            other => panic!("unknown runtime flavor {other}"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Flavor::OneThread => "1thread",
            Flavor::TwoThreads => "2threads",
        }
    }

    pub fn runtime(self) -> Runtime {
        match self {
            Flavor::OneThread => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Flavor::TwoThreads => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build(),
        }
        .expect("a tokio runtime")
    }
}

/// A connected loopback TCP pair with `TCP_NODELAY` on both ends.
pub async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (a, b) = (a.expect("connect"), b.expect("accept").0);
    a.set_nodelay(true).expect("nodelay");
    b.set_nodelay(true).expect("nodelay");
    (a, b)
}

/// The transport variants: one direction, `count` messages of `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// framewire `Connection`: `send(Envelope[payload])` / `recv()`,
    /// receive buffers recycled (the default): one ready-made frame, no
    /// frame 0, no `dumps`/`loads`.
    Connection,
    /// The same with `recycle_buffers(false)`: a fresh buffer per message.
    ConnectionFresh,
    /// [`Variant::Connection`] with checksum trailers on both sides
    /// (`ConnectionBuilder::checksums`, SPEC.md §6.2): CRC32 of every frame,
    /// sent and verified.
    ConnectionChecksums,
    /// A whole task message each way: `dumps` of `{"op": "send", "data":
    /// ndarray}` + `Envelope` + `send`; `recv` + `loads` +
    /// `deserialize_blocks` (the work Python's comm does, `deserialize=True`).
    ConnectionTask,
    /// `Framed` with framewire's `FrameCodec` (the encoder copies).
    FrameCodec,
    /// `Framed` with tokio-util's `LengthDelimitedCodec`, one frame = the
    /// payload (8-byte length field).
    LengthDelimited,
    /// `writev(header, payload)`; `read_exact` into one reused buffer.
    RawWritev,
    /// [`small_task`] each way, as [`Variant::ConnectionTask`] (the payload
    /// size is ignored).
    SmallTask,
}

impl Variant {
    /// The variants with a payload of a given size (`SmallTask` aside).
    pub const ALL: [Variant; 7] = [
        Variant::Connection,
        Variant::ConnectionFresh,
        Variant::ConnectionChecksums,
        Variant::ConnectionTask,
        Variant::FrameCodec,
        Variant::LengthDelimited,
        Variant::RawWritev,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Connection => "connection",
            Variant::ConnectionFresh => "connection_fresh",
            Variant::ConnectionChecksums => "connection_checksums",
            Variant::ConnectionTask => "connection_task",
            Variant::FrameCodec => "framecodec",
            Variant::LengthDelimited => "length_delimited",
            Variant::RawWritev => "raw_writev",
            Variant::SmallTask => "small_task",
        }
    }

    pub fn parse(s: &str) -> Variant {
        Variant::ALL
            .into_iter()
            .chain([Variant::SmallTask])
            .find(|v| v.name() == s)
            .unwrap_or_else(|| panic!("unknown transport variant {s}"))
    }

    /// The message a task variant sends (`dumps` per send), built over
    /// `payload`.
    fn message(self, payload: &Bytes) -> Option<Value> {
        match self {
            Variant::ConnectionTask => Some(ndarray_message(payload.clone())),
            Variant::SmallTask => Some(small_task()),
            _ => None,
        }
    }

    fn builder(self) -> ConnectionBuilder {
        let mut builder = Connection::builder();
        builder
            .limits(Limits::dask_compat())
            .recycle_buffers(self != Variant::ConnectionFresh)
            .checksums(self == Variant::ConnectionChecksums);
        builder
    }

    /// The sending end of this variant over `w`.
    pub fn sender(self, w: OwnedWriteHalf, payload: &Bytes) -> Sender {
        match self {
            Variant::Connection
            | Variant::ConnectionFresh
            | Variant::ConnectionChecksums
            | Variant::ConnectionTask
            | Variant::SmallTask => Sender::Conn {
                tx: WriteHalf::new(w, &self.builder()),
                task: self.message(payload),
            },
            Variant::FrameCodec => Sender::Codec(
                FrameCodec::builder()
                    .limits(Limits::dask_compat())
                    .new_write(w),
            ),
            Variant::LengthDelimited => {
                Sender::LengthDelimited(FramedWrite::new(w, length_delimited()))
            }
            Variant::RawWritev => Sender::Raw(w),
        }
    }

    /// The receiving end of this variant over `r`, for messages of `size`
    /// payload bytes.
    pub fn receiver(self, r: OwnedReadHalf, size: usize) -> Receiver {
        match self {
            Variant::Connection | Variant::ConnectionFresh | Variant::ConnectionChecksums => {
                Receiver::Conn {
                    rx: ReadHalf::new(r, &self.builder()),
                    task: false,
                    size,
                }
            }
            Variant::ConnectionTask | Variant::SmallTask => Receiver::Conn {
                rx: ReadHalf::new(r, &self.builder()),
                task: true,
                size,
            },
            Variant::FrameCodec => Receiver::Codec(
                FrameCodec::builder()
                    .limits(Limits::dask_compat())
                    .new_read(r),
                size,
            ),
            Variant::LengthDelimited => {
                Receiver::LengthDelimited(FramedRead::new(r, length_delimited()), size)
            }
            // Reused and already faulted in: the ceiling for any receiver.
            Variant::RawWritev => Receiver::Raw(r, vec![1u8; size]),
        }
    }
}

fn length_delimited() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(8)
        .max_frame_length(usize::MAX)
        .new_codec()
}

/// The sending end of a [`Variant`] (one per measurement: the size
/// difference between variants does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Sender {
    Conn {
        tx: WriteHalf<OwnedWriteHalf>,
        /// `Some(message)`: `dumps` it per send.
        task: Option<Value>,
    },
    Codec(FramedWrite<OwnedWriteHalf, FrameCodec>),
    LengthDelimited(FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>),
    Raw(OwnedWriteHalf),
}

impl Sender {
    /// Sends `count` messages (of `payload`, or the task message) and
    /// hands itself back.
    pub async fn send(mut self, payload: Bytes, count: u64) -> Sender {
        match &mut self {
            Sender::Conn { tx, task: None } => {
                let env = Envelope::new(vec![payload]).expect("an envelope");
                for _ in 0..count {
                    tx.send(env.clone()).await.expect("send");
                }
            }
            Sender::Conn {
                tx,
                task: Some(msg),
            } => {
                for _ in 0..count {
                    let frames = dumps(msg).expect("dumps");
                    tx.send(Envelope::new(frames).expect("envelope"))
                        .await
                        .expect("send");
                }
            }
            Sender::Codec(tx) => {
                let env = Envelope::new(vec![payload]).expect("an envelope");
                for _ in 0..count {
                    tx.send(env.clone()).await.expect("send");
                }
            }
            Sender::LengthDelimited(tx) => {
                for _ in 0..count {
                    tx.send(payload.clone()).await.expect("send");
                }
            }
            Sender::Raw(tx) => {
                for _ in 0..count {
                    write_all_vectored(tx, &payload).await;
                }
            }
        }
        self
    }
}

/// The receiving end of a [`Variant`].
#[allow(clippy::large_enum_variant)]
pub enum Receiver {
    Conn {
        rx: ReadHalf<OwnedReadHalf>,
        /// `loads` + `deserialize_blocks` (backed by the receive buffers)
        /// per message; else the frame's length is checked.
        task: bool,
        size: usize,
    },
    Codec(FramedRead<OwnedReadHalf, FrameCodec>, usize),
    LengthDelimited(FramedRead<OwnedReadHalf, LengthDelimitedCodec>, usize),
    Raw(OwnedReadHalf, Vec<u8>),
}

impl Receiver {
    /// Receives `count` messages and hands itself back.
    pub async fn recv(mut self, count: u64) -> Receiver {
        match &mut self {
            Receiver::Conn {
                rx,
                task: false,
                size,
            } => {
                for _ in 0..count {
                    let env = rx.recv().await.expect("a message").expect("recv");
                    assert_eq!(env.frames()[0].len(), *size);
                }
            }
            Receiver::Conn { rx, task: true, .. } => {
                let limits = Limits::dask_compat();
                let de = deserialize_options();
                for _ in 0..count {
                    let env = rx.recv().await.expect("a message").expect("recv");
                    let value = decode(env.frames(), &limits).expect("loads");
                    let de = de.clone().backed_by(&env);
                    drop(env);
                    std::hint::black_box(deserialize_blocks(value, &de).expect("deserialize"));
                }
            }
            Receiver::Codec(rx, size) => {
                for _ in 0..count {
                    let env = rx.next().await.expect("a message").expect("recv");
                    assert_eq!(env.frames()[0].len(), *size);
                }
            }
            Receiver::LengthDelimited(rx, size) => {
                for _ in 0..count {
                    let frame = rx.next().await.expect("a frame").expect("recv");
                    assert_eq!(frame.len(), *size);
                }
            }
            Receiver::Raw(rx, buf) => {
                for _ in 0..count {
                    let mut header = [0u8; 8];
                    rx.read_exact(&mut header).await.expect("read header");
                    let len = u64::from_le_bytes(header) as usize;
                    assert_eq!(len, buf.len());
                    rx.read_exact(&mut buf[..len]).await.expect("read payload");
                }
            }
        }
        self
    }
}

/// One connected sender/receiver pair of a [`Variant`] in this process,
/// kept between measurements (so a recycled buffer stays warm, as on a
/// long-lived connection). Built with one warm-up message already through.
pub struct Link {
    tx: Option<Sender>,
    rx: Option<Receiver>,
    payload: Bytes,
}

impl Link {
    pub fn new(rt: &Runtime, variant: Variant, size: usize) -> Link {
        Link::build(rt, variant, payload(size))
    }

    /// A `Connection` link sending [`small_task`] (dumps per send, loads +
    /// deserialize per receive): the small-message rows.
    pub fn small(rt: &Runtime) -> Link {
        Link::build(rt, Variant::SmallTask, Bytes::new())
    }

    fn build(rt: &Runtime, variant: Variant, payload: Bytes) -> Link {
        let (tx, rx) = rt.block_on(async {
            let (a, b) = tcp_pair().await;
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            drop((ar, bw)); // one direction: a writes, b reads
            (
                variant.sender(aw, &payload),
                variant.receiver(br, payload.len()),
            )
        });
        let mut link = Link {
            tx: Some(tx),
            rx: Some(rx),
            payload,
        };
        link.run(rt, 1); // warm-up: buffers allocated and faulted in, code paths hot
        link
    }

    /// Sends `count` messages one way and returns the time until the
    /// receiver has the last one. Sender and receiver are two spawned tasks
    /// of the runtime (same setup for every variant).
    pub fn run(&mut self, rt: &Runtime, count: u64) -> Duration {
        let (tx, rx) = (
            self.tx.take().expect("link in use"),
            self.rx.take().expect("link in use"),
        );
        let payload = self.payload.clone();
        let (tx, rx, elapsed) = rt.block_on(async move {
            let start = Instant::now();
            let sender = tokio::spawn(tx.send(payload, count));
            let receiver = tokio::spawn(rx.recv(count));
            let rx = receiver.await.expect("receiver panicked");
            let elapsed = start.elapsed();
            (sender.await.expect("sender panicked"), rx, elapsed)
        });
        self.tx = Some(tx);
        self.rx = Some(rx);
        elapsed
    }
}

/// `writev(len, payload)` until all of it is written.
async fn write_all_vectored(tx: &mut OwnedWriteHalf, payload: &[u8]) {
    let header = (payload.len() as u64).to_le_bytes();
    let mut slices = [IoSlice::new(&header), IoSlice::new(payload)];
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let n = tx.write_vectored(rest).await.expect("writev");
        assert!(n > 0, "writev wrote nothing");
        IoSlice::advance_slices(&mut rest, n);
    }
}

/// The server of the request/response rows: `loads` each message, which
/// must be `"ping"`, and answer with `dumps("pong")`, encoded for each
/// answer (as Python's `comm.write("pong")` encodes each one), until the
/// client closes.
pub async fn pong_server(stream: TcpStream) {
    let limits = Limits::dask_compat();
    let mut server = Connection::builder().limits(limits.clone()).build(stream);
    while let Some(env) = server.recv().await {
        let value = decode(env.expect("recv").frames(), &limits).expect("loads");
        assert_eq!(value.as_str(), Some("ping"));
        let pong = Envelope::new(dumps(&Value::str("pong")).expect("dumps")).expect("env");
        server.send(pong).await.expect("send");
    }
}

/// `count` request/response round trips from the client's side: `dumps`
/// of `"ping"` and `send`, then `recv` and `loads` of the answer
/// (`py_small_msgs.py`'s ping-pong).
pub async fn ping_client(client: &mut Connection<TcpStream>, count: u64) {
    let limits = Limits::dask_compat();
    for _ in 0..count {
        let ping = Envelope::new(dumps(&Value::str("ping")).expect("dumps")).expect("env");
        client.send(ping).await.expect("send");
        let env = client.recv().await.expect("a reply").expect("recv");
        let value = decode(env.frames(), &limits).expect("loads");
        assert_eq!(value.as_str(), Some("pong"));
    }
}

/// Request/response over framewire `Connection`s in this process: the
/// server is a spawned task, the client runs in `block_on`.
pub struct PingPong {
    client: Connection<TcpStream>,
}

impl PingPong {
    pub fn new(rt: &Runtime) -> PingPong {
        let client = rt.block_on(async {
            let (a, b) = tcp_pair().await;
            tokio::spawn(pong_server(b));
            Connection::builder().limits(Limits::dask_compat()).build(a)
        });
        let mut pp = PingPong { client };
        pp.run(rt, 10);
        pp
    }

    /// `count` round trips; the time they took.
    pub fn run(&mut self, rt: &Runtime, count: u64) -> Duration {
        let client = &mut self.client;
        rt.block_on(async {
            let start = Instant::now();
            ping_client(client, count).await;
            start.elapsed()
        })
    }
}

// ---- memory and time ---------------------------------------------------------------------

/// Seconds this thread has been running on a CPU (the first field of
/// `/proc/thread-self/schedstat`, in nanoseconds): the time a measurement
/// took away from waiting for a core on a loaded machine.
pub fn thread_cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(f64::NAN, |ns| ns as f64 * 1e-9)
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
pub fn rss_and_hwm() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
