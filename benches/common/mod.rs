//! What the benches share: the collections measured by `benches/serialize.rs`
//! and `benches/compare.rs`, the task messages, and the loopback TCP links
//! of `benches/transport.rs` and `benches/compare.rs` (one setup for every
//! transport variant, so the variants differ only in their framing code).
#![allow(dead_code)]

use std::future::Future;
use std::io::IoSlice;
use std::time::{Duration, Instant};

use bytes::Bytes;
use framewire::message::loads;
use framewire::serialize::deserialize_blocks;
use framewire::serialize::{serialize, DeserializeOptions, IterateCollection, SerializeOptions};
use framewire::transport::{Connection, FrameCodec, ReadHalf, WriteHalf};
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
    SerializeOptions {
        iterate: mode,
        ..Default::default()
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
        ("data", Value::Serialize(Box::new(Value::Bin(payload)))),
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
                Value::Serialize(Box::new(Value::Bin(Bytes::from(vec![0u8; 1024])))),
            ]),
        ),
        ("priority", Value::Array(vec![0.into(), 1.into()])),
    ])
}

// ---- loopback links ----------------------------------------------------------------------

/// The runtime of a transport measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `new_current_thread`: both ends on one thread (like one Python
    /// process with one event loop).
    OneThread,
    /// `new_multi_thread` with 2 workers: sender and receiver tasks may run
    /// on both cores.
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
    /// receive buffers recycled (the default).
    Connection,
    /// The same with `recycle_buffers(false)`: a fresh buffer per message.
    ConnectionFresh,
    /// A whole task message each way: `dumps` of `{"op": "send", "data":
    /// ndarray}` + `Envelope` + `send`; `recv` + `loads` + `deserialize_blocks`.
    ConnectionTask,
    /// `Framed` with framewire's `FrameCodec` (the encoder copies).
    FrameCodec,
    /// `Framed` with tokio-util's `LengthDelimitedCodec`, one frame = the
    /// payload (8-byte length field).
    LengthDelimited,
    /// `writev(header, payload)`; `read_exact` into one reused buffer.
    RawWritev,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Connection,
        Variant::ConnectionFresh,
        Variant::ConnectionTask,
        Variant::FrameCodec,
        Variant::LengthDelimited,
        Variant::RawWritev,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Connection => "connection",
            Variant::ConnectionFresh => "connection_fresh",
            Variant::ConnectionTask => "connection_task",
            Variant::FrameCodec => "framecodec",
            Variant::LengthDelimited => "length_delimited",
            Variant::RawWritev => "raw_writev",
        }
    }

    pub fn parse(s: &str) -> Variant {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .unwrap_or_else(|| panic!("unknown transport variant {s}"))
    }
}

type ConnTx = WriteHalf<OwnedWriteHalf>;
type ConnRx = ReadHalf<OwnedReadHalf>;

// One per link, built once: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Ends {
    Conn {
        tx: Option<ConnTx>,
        rx: Option<ConnRx>,
        /// `Some(message)`: `dumps` it per send, `loads` + deserialize per receive.
        task: Option<Value>,
    },
    Codec {
        tx: Option<FramedWrite<OwnedWriteHalf, FrameCodec>>,
        rx: Option<FramedRead<OwnedReadHalf, FrameCodec>>,
    },
    LengthDelimited {
        tx: Option<FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>>,
        rx: Option<FramedRead<OwnedReadHalf, LengthDelimitedCodec>>,
    },
    Raw {
        tx: Option<OwnedWriteHalf>,
        rx: Option<(OwnedReadHalf, Vec<u8>)>,
    },
}

/// One connected sender/receiver pair of a [`Variant`], kept between
/// measurements (so a recycled buffer stays warm, as on a long-lived
/// connection). Built with one warm-up message already through.
pub struct Link {
    ends: Ends,
    payload: Bytes,
}

fn length_delimited() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(8)
        .max_frame_length(usize::MAX)
        .new_codec()
}

impl Link {
    pub fn new(rt: &Runtime, variant: Variant, size: usize) -> Link {
        let payload = payload(size);
        let task = (variant == Variant::ConnectionTask).then(|| ndarray_message(payload.clone()));
        Link::build(rt, variant, payload, task)
    }

    /// A `Connection` link sending `msg` (dumps per send, loads +
    /// deserialize per receive): the small-message rows.
    pub fn task(rt: &Runtime, msg: Value) -> Link {
        Link::build(rt, Variant::ConnectionTask, Bytes::new(), Some(msg))
    }

    fn build(rt: &Runtime, variant: Variant, payload: Bytes, task: Option<Value>) -> Link {
        let ends = rt.block_on(async {
            let (a, b) = tcp_pair().await;
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            drop((ar, bw)); // one direction: a writes, b reads
            match variant {
                Variant::Connection | Variant::ConnectionFresh | Variant::ConnectionTask => {
                    let mut builder = Connection::builder();
                    builder
                        .limits(Limits::dask_compat())
                        .recycle_buffers(variant != Variant::ConnectionFresh);
                    Ends::Conn {
                        tx: Some(WriteHalf::new(aw, &builder)),
                        rx: Some(ReadHalf::new(br, &builder)),
                        task,
                    }
                }
                Variant::FrameCodec => {
                    let codec = FrameCodec::builder().limits(Limits::dask_compat()).clone();
                    Ends::Codec {
                        tx: Some(codec.new_write(aw)),
                        rx: Some(codec.new_read(br)),
                    }
                }
                Variant::LengthDelimited => Ends::LengthDelimited {
                    tx: Some(FramedWrite::new(aw, length_delimited())),
                    rx: Some(FramedRead::new(br, length_delimited())),
                },
                Variant::RawWritev => {
                    // Reused and already faulted in: the ceiling for any receiver.
                    let buf = vec![1u8; payload.len()];
                    Ends::Raw {
                        tx: Some(aw),
                        rx: Some((br, buf)),
                    }
                }
            }
        });
        let mut link = Link { ends, payload };
        link.run(rt, 1); // warm-up: buffers allocated and faulted in, code paths hot
        link
    }

    /// Sends `count` messages one way and returns the time until the
    /// receiver has the last one.
    pub fn run(&mut self, rt: &Runtime, count: u64) -> Duration {
        let payload = self.payload.clone();
        let size = payload.len();
        rt.block_on(async {
            match &mut self.ends {
                Ends::Conn { tx, rx, task } => match task.clone() {
                    None => {
                        let env = Envelope::new(vec![payload]).expect("an envelope");
                        drive(
                            tx,
                            rx,
                            |mut tx: ConnTx| async move {
                                for _ in 0..count {
                                    tx.send(env.clone()).await.expect("send");
                                }
                                tx
                            },
                            |mut rx: ConnRx| async move {
                                for _ in 0..count {
                                    let env = rx.recv().await.expect("a message").expect("recv");
                                    assert_eq!(env.frames()[0].len(), size);
                                }
                                rx
                            },
                        )
                        .await
                    }
                    Some(msg) => {
                        drive(
                            tx,
                            rx,
                            |mut tx: ConnTx| async move {
                                for _ in 0..count {
                                    let frames = dumps(&msg).expect("dumps");
                                    tx.send(Envelope::new(frames).expect("envelope"))
                                        .await
                                        .expect("send");
                                }
                                tx
                            },
                            |mut rx: ConnRx| async move {
                                let limits = Limits::dask_compat();
                                let de = deserialize_options();
                                for _ in 0..count {
                                    let env = rx.recv().await.expect("a message").expect("recv");
                                    let value = loads(env.frames(), &limits).expect("loads");
                                    let de = de.clone().backed_by(&env);
                                    drop(env);
                                    std::hint::black_box(
                                        deserialize_blocks(value, &de).expect("deserialize"),
                                    );
                                }
                                rx
                            },
                        )
                        .await
                    }
                },
                Ends::Codec { tx, rx } => {
                    let env = Envelope::new(vec![payload]).expect("an envelope");
                    drive(
                        tx,
                        rx,
                        |mut tx: FramedWrite<OwnedWriteHalf, FrameCodec>| async move {
                            for _ in 0..count {
                                tx.send(env.clone()).await.expect("send");
                            }
                            tx
                        },
                        |mut rx: FramedRead<OwnedReadHalf, FrameCodec>| async move {
                            for _ in 0..count {
                                let env = rx.next().await.expect("a message").expect("recv");
                                assert_eq!(env.frames()[0].len(), size);
                            }
                            rx
                        },
                    )
                    .await
                }
                Ends::LengthDelimited { tx, rx } => {
                    drive(
                        tx,
                        rx,
                        |mut tx: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>| async move {
                            for _ in 0..count {
                                tx.send(payload.clone()).await.expect("send");
                            }
                            tx
                        },
                        |mut rx: FramedRead<OwnedReadHalf, LengthDelimitedCodec>| async move {
                            for _ in 0..count {
                                let frame = rx.next().await.expect("a frame").expect("recv");
                                assert_eq!(frame.len(), size);
                            }
                            rx
                        },
                    )
                    .await
                }
                Ends::Raw { tx, rx } => {
                    drive(
                        tx,
                        rx,
                        |mut tx: OwnedWriteHalf| async move {
                            for _ in 0..count {
                                write_all_vectored(&mut tx, &payload).await;
                            }
                            tx
                        },
                        |(mut rx, mut buf): (OwnedReadHalf, Vec<u8>)| async move {
                            for _ in 0..count {
                                let mut header = [0u8; 8];
                                rx.read_exact(&mut header).await.expect("read header");
                                let len = u64::from_le_bytes(header) as usize;
                                assert_eq!(len, buf.len());
                                rx.read_exact(&mut buf[..len]).await.expect("read payload");
                            }
                            (rx, buf)
                        },
                    )
                    .await
                }
            }
        })
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

/// Runs the sender and the receiver as two tasks of the runtime (same setup
/// for every variant) and returns the time until the receiver is done.
async fn drive<S, R, FS, FR>(
    tx: &mut Option<S>,
    rx: &mut Option<R>,
    send: impl FnOnce(S) -> FS,
    recv: impl FnOnce(R) -> FR,
) -> Duration
where
    S: Send + 'static,
    R: Send + 'static,
    FS: Future<Output = S> + Send + 'static,
    FR: Future<Output = R> + Send + 'static,
{
    let (t, r) = (
        tx.take().expect("link in use"),
        rx.take().expect("link in use"),
    );
    let start = Instant::now();
    let sender = tokio::spawn(send(t));
    let receiver = tokio::spawn(recv(r));
    let r = receiver.await.expect("receiver panicked");
    let elapsed = start.elapsed();
    *tx = Some(sender.await.expect("sender panicked"));
    *rx = Some(r);
    elapsed
}

/// Request/response over framewire `Connection`s: the client sends
/// `dumps("ping")`, the server `loads` it and answers `dumps("pong")`
/// (`py_small_msgs.py`'s ping-pong).
pub struct PingPong {
    client: Connection<TcpStream>,
}

impl PingPong {
    pub fn new(rt: &Runtime) -> PingPong {
        let client = rt.block_on(async {
            let (a, b) = tcp_pair().await;
            tokio::spawn(async move {
                let limits = Limits::dask_compat();
                let mut server = Connection::builder().limits(limits.clone()).build(b);
                let pong = Envelope::new(dumps(&Value::str("pong")).expect("dumps")).expect("env");
                while let Some(env) = server.recv().await {
                    let value = loads(env.expect("recv").frames(), &limits).expect("loads");
                    assert_eq!(value.as_str(), Some("ping"));
                    server.send(pong.clone()).await.expect("send");
                }
            });
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
            let limits = Limits::dask_compat();
            let start = Instant::now();
            for _ in 0..count {
                let ping = Envelope::new(dumps(&Value::str("ping")).expect("dumps")).expect("env");
                client.send(ping).await.expect("send");
                let env = client.recv().await.expect("a reply").expect("recv");
                let value = loads(env.frames(), &limits).expect("loads");
                assert_eq!(value.as_str(), Some("pong"));
            }
            start.elapsed()
        })
    }
}

// ---- memory ------------------------------------------------------------------------------

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
