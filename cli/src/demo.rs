//! `framewire demo`: the whole transport in one process, no external service.
//!
//! ```text
//!  client task                          loopback TCP                    server task
//!  Value ─dumps_with─▶ Envelope ─send─▶ Watched ─writev─▶ ─recv─▶ Envelope ─loads─▶ deserialize_blocks ─▶ == expected?
//!                                         └── which bytes handed to the kernel lie in a payload's own memory
//! ```
//!
//! The stream: heartbeats (`heartbeat_worker`, hundreds, small), two
//! `compute-task` messages whose task tuples carry a 64 MiB payload (bytes,
//! and an `NdArray`), and three large collections (100 000 elements under
//! `IterateCollection::Auto` and `Always`; 1 000 under `Auto` with a large
//! bytes element last, which Dask's first-element inference would miss).
//! Every message that arrives is deserialized and compared with what was
//! sent; payload bytes must be identical. The client's socket is wrapped in
//! [`Watched`], which looks at the address of every byte the transport hands
//! to the kernel: every payload byte must leave from the payload's own
//! memory, exactly once (a copy anywhere on the way would show as bytes
//! from elsewhere). The report also gives the connection's copy counters
//! ([`Stats`]), counted by the transport where it copies.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use framewire::dask::{HeartbeatWorker, Op};
use framewire::dumps_with;
use framewire::serialize::{Codec, DeserializeOptions, IterateCollection, SerializeOptions};
// Frames under the threshold are copied next to their prelude on send;
// larger ones are written from their own memory.
use framewire::transport::{Connection, HandshakeOptions, Stats, COALESCE_THRESHOLD};
use framewire::{Envelope, Limits, NdArray, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Size of each large payload.
const PAYLOAD: usize = 64 << 20;
/// Elements of the large collections.
const COLLECTION: usize = 100_000;
/// `heartbeat_worker` messages.
const HEARTBEATS: usize = 500;
/// The whole demo must finish within this (a hang guard).
const HANG_GUARD: Duration = Duration::from_secs(120);

/// One message of the stream: what is sent, with which options, and what
/// deserializing it must give back.
struct Planned {
    label: &'static str,
    value: Value,
    iterate: IterateCollection,
    expected: Value,
}

/// What the sending side measured.
struct Sent {
    stats: Stats,
    frames: u64,
    /// Frames at or above the coalesce threshold, and their bytes.
    large_frames: u64,
    large_bytes: u64,
    /// The payloads' bytes, and how many of the bytes handed to the kernel
    /// were read from the payloads' own memory ([`Watched`]).
    payload_bytes: u64,
    from_payload_memory: u64,
}

/// A socket that watches where the bytes written to it come from: of the
/// bytes the kernel accepted, how many lay in the memory of one of the
/// `payloads` (address ranges). Reads pass through.
struct Watched<S> {
    io: S,
    payloads: Vec<(usize, usize)>,
    from_payloads: u64,
}

impl<S> Watched<S> {
    fn new(io: S, payloads: &[Bytes]) -> Watched<S> {
        let payloads = payloads
            .iter()
            .map(|p| (p.as_ptr() as usize, p.as_ptr() as usize + p.len()))
            .collect();
        Watched {
            io,
            payloads,
            from_payloads: 0,
        }
    }

    /// Counts the first `n` bytes of `slices` (what the kernel took) that
    /// lie inside a payload.
    fn account<'a>(&mut self, slices: impl IntoIterator<Item = &'a [u8]>, mut n: usize) {
        for s in slices {
            if n == 0 {
                break;
            }
            let m = s.len().min(n);
            let (start, end) = (s.as_ptr() as usize, s.as_ptr() as usize + m);
            for &(a, b) in &self.payloads {
                self.from_payloads += end.min(b).saturating_sub(start.max(a)) as u64;
            }
            n -= m;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.account([buf], n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.account(bufs.iter().map(|b| &**b), n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

/// What the receiving side measured.
struct Received {
    stats: Stats,
    verified: usize,
    payload_bytes_checked: u64,
    done: Instant,
}

/// Runs the demo and prints its report; an error if anything did not verify.
pub fn run(out: &mut impl Write) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("demo: cannot start the runtime: {e}"))?;
    let report = rt.block_on(async {
        tokio::time::timeout(HANG_GUARD, demo())
            .await
            .map_err(|_| format!("demo: did not finish within {} s", HANG_GUARD.as_secs()))?
    })?;
    out.write_all(report.as_bytes())
        .map_err(crate::output::error)
}

async fn demo() -> Result<String, String> {
    let plan = plan()?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("demo: cannot listen on 127.0.0.1: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("demo: cannot listen on 127.0.0.1: {e}"))?;
    let opts = HandshakeOptions::default().extension("demo", Value::Bool(true));
    let builder = Connection::builder();

    // Handshake, both ends at once.
    let server = async {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("demo: accept: {e}"))?;
        builder
            .accept(stream, &opts)
            .await
            .map_err(|e| format!("demo: server handshake: {e}"))
    };
    let payloads = payloads(&plan);
    let client = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("demo: connect: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("demo: connect: {e}"))?;
        builder
            .handshake(Watched::new(stream, &payloads), &opts)
            .await
            .map_err(|e| format!("demo: client handshake: {e}"))
    };
    let (server, client) = tokio::join!(server, client);
    let ((mut server, agreed), (mut client, _)) = (server?, client?);
    if !agreed.agreed("demo") {
        return Err("demo: the framewire-demo handshake extension was not agreed".into());
    }
    let handshake = format!(
        "pickle-protocol {}, compression {}, framewire-demo extension agreed",
        agreed.pickle_protocol(),
        agreed.codec().map_or("none", Codec::name)
    );

    let expected: Vec<(&'static str, Value)> =
        plan.iter().map(|p| (p.label, p.expected.clone())).collect();
    let started = Instant::now();
    let receiving = tokio::spawn(async move {
        let opts = DeserializeOptions::with_limits(Limits::default());
        let mut checked = 0u64;
        for (i, (label, want)) in expected.iter().enumerate() {
            let env = match server.recv().await {
                Some(Ok(env)) => env,
                Some(Err(e)) => return Err(format!("demo: message #{i} ({label}): {e}")),
                None => {
                    return Err(format!(
                        "demo: the connection closed after {i} of {} messages",
                        expected.len()
                    ))
                }
            };
            // Backed by the receive buffers: shards merge without a copy.
            let opts = opts.clone().backed_by(&env);
            let got = framewire::loads_with(env.frames(), &opts)
                .map_err(|e| format!("demo: message #{i} ({label}): {e}"))?;
            if &got != want {
                return Err(format!(
                    "demo: message #{i} ({label}) differs from what was sent after deserialize"
                ));
            }
            checked += payload_bytes(want, &got)?;
        }
        if let Some(extra) = server.recv().await {
            return Err(format!(
                "demo: a message after the last one ({})",
                extra.map_or_else(
                    |e| e.to_string(),
                    |env| format!("{} frames", env.frames().len())
                )
            ));
        }
        Ok(Received {
            stats: server.stats(),
            verified: expected.len(),
            payload_bytes_checked: checked,
            done: Instant::now(),
        })
    });

    // The handshake went out first: one frame.
    let mut frames = 1u64;
    let (mut large_frames, mut large_bytes) = (0u64, 0u64);
    for (i, p) in plan.iter().enumerate() {
        let mut opts = SerializeOptions::default();
        opts.iterate = p.iterate;
        let env = dumps_with(&p.value, &opts)
            .and_then(Envelope::new)
            .map_err(|e| format!("demo: message #{i} ({}): cannot encode: {e}", p.label))?;
        for f in env.frames() {
            frames += 1;
            if f.len() >= COALESCE_THRESHOLD {
                large_frames += 1;
                large_bytes += f.len() as u64;
            }
        }
        if let Err(e) = client.send(env).await {
            // The receiver hanging up (say, on a verification failure) is
            // the real story: report its error first.
            if let Ok(Err(why)) = receiving.await {
                return Err(why);
            }
            return Err(format!("demo: message #{i} ({}): {e}", p.label));
        }
    }
    client
        .close()
        .await
        .map_err(|e| format!("demo: closing the client: {e}"))?;
    let sent = Sent {
        stats: client.stats(),
        frames,
        large_frames,
        large_bytes,
        payload_bytes: payloads.iter().map(|p| p.len() as u64).sum(),
        from_payload_memory: client.get_ref().from_payloads,
    };
    let received = receiving
        .await
        .map_err(|e| format!("demo: the receiving task failed: {e}"))??;
    report(
        &plan,
        &sent,
        &received,
        received.done - started,
        addr,
        &handshake,
    )
}

/// Checks the counters and writes the report.
fn report(
    plan: &[Planned],
    sent: &Sent,
    received: &Received,
    elapsed: Duration,
    addr: std::net::SocketAddr,
    handshake: &str,
) -> Result<String, String> {
    let (s, r) = (&sent.stats, &received.stats);
    // The handshake message is counted on both sides too.
    let messages = plan.len() as u64 + 1;
    if s.messages_sent != messages || r.messages_received != messages {
        return Err(format!(
            "demo: {} messages sent and {} received, expected {messages}",
            s.messages_sent, r.messages_received
        ));
    }
    if s.frames_sent != sent.frames {
        return Err(format!(
            "demo: the connection counted {} frames sent, the messages had {}",
            s.frames_sent, sent.frames
        ));
    }
    if (s.frames_sent, s.bytes_sent) != (r.frames_received, r.bytes_received) {
        return Err(format!(
            "demo: sent {} frames / {} bytes but received {} frames / {} bytes",
            s.frames_sent, s.bytes_sent, r.frames_received, r.bytes_received
        ));
    }
    // Every payload byte went to the kernel from the payload's own memory,
    // once: fewer means some were copied on the way (or never sent).
    if sent.from_payload_memory != sent.payload_bytes {
        return Err(format!(
            "demo: {} of the {} payload bytes were handed to the kernel from the payloads' own memory",
            sent.from_payload_memory, sent.payload_bytes
        ));
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    let heartbeats = plan
        .iter()
        .filter(|p| p.label == "heartbeat_worker")
        .count();
    let mut text = String::new();
    let mut line = |l: String| {
        text.push_str(&l);
        text.push('\n');
    };
    line(format!(
        "framewire demo: loopback {addr}, handshake: {handshake}"
    ));
    line(format!(
        "messages: {} ({heartbeats} heartbeat_worker, 2 compute-task with {} MiB payloads, 3 collections, the handshake)",
        s.messages_sent,
        PAYLOAD >> 20
    ));
    line(format!("frames: {}", s.frames_sent));
    line(format!("bytes: {}", s.bytes_sent));
    line(format!(
        "throughput: {:.1} MB/s, {:.0} msgs/s ({:.3} s end to end: encoded, sent, received, deserialized, verified)",
        r.bytes_received as f64 / 1e6 / secs,
        r.messages_received as f64 / secs,
        secs
    ));
    line(format!(
        "large frames (>= {COALESCE_THRESHOLD} bytes): {}, {} bytes",
        sent.large_frames, sent.large_bytes
    ));
    line(format!(
        "payload bytes written from their own memory: {} of {} (seen at the socket: the address of every byte handed to the kernel)",
        sent.from_payload_memory, sent.payload_bytes
    ));
    line(format!(
        "frame bytes copied on send: {} (counted where copied: frames < {COALESCE_THRESHOLD} bytes coalesced with their prelude)",
        s.bytes_copied_on_send
    ));
    line(format!(
        "bytes copied on receive: {} (counted where copied: read ahead, then moved into a large frame's buffer; or held by a receive buffer whose growth moved it)",
        r.bytes_copied_on_receive
    ));
    line(format!(
        "bytes relocated on receive: {} (of those copied: held by a receive buffer whose growth moved it)",
        r.bytes_relocated_on_receive
    ));
    line(format!(
        "verified: {} of {} messages equal after deserialize, {} payload bytes identical",
        received.verified,
        plan.len(),
        received.payload_bytes_checked
    ));
    Ok(text)
}

/// The large payloads of the plan (bins and array data of at least the
/// coalesce threshold), each once.
fn payloads(plan: &[Planned]) -> Vec<Bytes> {
    let mut out = Vec::new();
    for p in plan {
        large_payloads(&p.value, &mut out);
    }
    out
}

/// The payload bytes of `want` and `got` compared one by one (bins and
/// array data of at least the coalesce threshold): their total.
fn payload_bytes(want: &Value, got: &Value) -> Result<u64, String> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    large_payloads(want, &mut a);
    large_payloads(got, &mut b);
    if a.len() != b.len() {
        return Err("demo: payload count differs".into());
    }
    let mut total = 0;
    for (x, y) in a.iter().zip(&b) {
        if x[..] != y[..] {
            return Err("demo: payload bytes differ".into());
        }
        total += x.len() as u64;
    }
    Ok(total)
}

fn large_payloads(v: &Value, out: &mut Vec<Bytes>) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Bin(b) if b.len() >= COALESCE_THRESHOLD => out.push(b.clone()),
            Value::NdArray(a) if a.data().len() >= COALESCE_THRESHOLD => out.push(a.data().clone()),
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Map(entries) => {
                for (k, v) in entries.iter().rev() {
                    stack.push(v);
                    stack.push(k);
                }
            }
            Value::ToSerialize(x) => stack.push(x),
            _ => {}
        }
    }
}

// ---- the stream ---------------------------------------------------------------

/// Pseudo-random bytes (xorshift64*), so that a misplaced byte shows.
fn pattern(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let word = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        let n = word.len().min(len - v.len());
        v.extend_from_slice(&word[..n]);
    }
    Bytes::from(v)
}

/// What deserializing gives back: `Serialize` wrappers gone.
fn unwrapped(v: &Value) -> Value {
    match v {
        Value::ToSerialize(x) => unwrapped(x),
        Value::Array(a) => Value::Array(a.iter().map(unwrapped).collect()),
        Value::Map(m) => Value::Map(m.iter().map(|(k, x)| (k.clone(), unwrapped(x))).collect()),
        other => other.clone(),
    }
}

fn ser(v: Value) -> Value {
    Value::ToSerialize(Box::new(v))
}

fn s(text: &str) -> Value {
    Value::str(text)
}

/// A worker's `heartbeat_worker`, built as its Rust type (the fields
/// `Scheduler.heartbeat_worker` reads), with `reply: true` as Dask's rpc
/// sends it.
fn heartbeat(i: usize) -> Result<Value, String> {
    let now = 1.7e9 + i as f64 * 0.5;
    let metrics = Value::map_of([
        (
            "task_counts",
            Value::map_of([("memory", Value::from(i as u64))]),
        ),
        (
            "bandwidth",
            Value::map_of([
                ("total", Value::Float(1e8)),
                ("workers", Value::map_of([])),
                ("types", Value::map_of([])),
            ]),
        ),
        ("digests_total_since_heartbeat", Value::map_of([])),
        ("managed_bytes", Value::from(1_000_000 + i as u64)),
        (
            "spilled_bytes",
            Value::map_of([("memory", 0u8.into()), ("disk", 0u8.into())]),
        ),
        ("event_loop_interval", Value::Float(0.02)),
        ("cpu", Value::Float(12.5)),
        ("memory", Value::from(150_000_000u64)),
        ("time", Value::Float(now)),
        (
            "host_net_io",
            Value::map_of([
                ("read_bps", Value::Float(0.0)),
                ("write_bps", Value::Float(0.0)),
            ]),
        ),
        ("num_fds", Value::from(31u8)),
    ]);
    let beat = HeartbeatWorker {
        op: Op::new(),
        address: "tcp://127.0.0.1:40411".into(),
        now,
        metrics,
        executing: Default::default(),
        extensions: Value::map_of([("spans", Value::map_of([])), ("shuffle", Value::map_of([]))]),
        reply: Some(true),
    };
    framewire::to_value(&beat).map_err(|e| format!("demo: {e}"))
}

/// A Dask task message whose run_spec is a task tuple `(func, arg, kwargs)`.
fn compute_task(key: &str, func: &str, arg: Value, nbytes: usize) -> Value {
    Value::map_of([
        ("op", s("compute-task")),
        ("key", s(key)),
        (
            "priority",
            Value::Array(vec![0u8.into(), 1u8.into(), 0u8.into()]),
        ),
        ("duration", Value::Float(0.5)),
        (
            "run_spec",
            Value::Array(vec![
                s(func),
                ser(arg),
                Value::map_of([("axis", 0u8.into())]),
            ]),
        ),
        ("who_has", Value::map_of([])),
        ("nbytes", Value::map_of([(key, Value::from(nbytes as u64))])),
        ("resource_restrictions", Value::map_of([])),
        ("actor", Value::Bool(false)),
        ("annotations", Value::map_of([])),
        ("stimulus_id", s("compute-task-1700000000.0")),
    ])
}

/// `n` small mixed elements.
fn elements(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| match i % 4 {
            0 => Value::from(i as u64),
            1 => Value::Float(i as f64 * 0.25),
            2 => Value::from(format!("x-{i}")),
            _ => Value::Bool(i % 8 == 3),
        })
        .collect()
}

fn update_data(key: &str, collection: Vec<Value>) -> Value {
    Value::map_of([
        ("op", s("update-data")),
        (
            "data",
            ser(Value::map_of([(key, Value::Array(collection))])),
        ),
        ("report", Value::Bool(false)),
        ("reply", Value::Bool(true)),
    ])
}

fn plan() -> Result<Vec<Planned>, String> {
    let bytes = pattern(PAYLOAD, 0x5eed_0001);
    let array_data = pattern(PAYLOAD, 0x5eed_0002);
    let array = NdArray::from_c_order("<f8", &[2048, (PAYLOAD / 8 / 2048) as u64], array_data)
        .map_err(|e| format!("demo: {e}"))?;
    let mut with_large_last = elements(999);
    with_large_last.push(Value::Bin(pattern(1 << 20, 0x5eed_0003)));

    let mut plan = Vec::new();
    let mut push = |label: &'static str, value: Value, iterate: IterateCollection| {
        let expected = unwrapped(&value);
        plan.push(Planned {
            label,
            value,
            iterate,
            expected,
        });
    };
    let auto = IterateCollection::Auto;
    let mut beats = 0..HEARTBEATS;
    let mut some_beats = |n: usize,
                          push: &mut dyn FnMut(&'static str, Value, IterateCollection)|
     -> Result<(), String> {
        for i in beats.by_ref().take(n) {
            push("heartbeat_worker", heartbeat(i)?, auto);
        }
        Ok(())
    };
    some_beats(200, &mut push)?;
    push(
        "compute-task",
        compute_task("('load-7f3a', 0)", "load", Value::Bin(bytes), PAYLOAD),
        auto,
    );
    some_beats(100, &mut push)?;
    push(
        "compute-task",
        compute_task(
            "('mean-9c1e', 0)",
            "numpy.mean",
            Value::NdArray(Box::new(array)),
            PAYLOAD,
        ),
        auto,
    );
    some_beats(100, &mut push)?;
    push(
        "collection (Auto)",
        update_data("('range-auto', 0)", elements(COLLECTION)),
        auto,
    );
    push(
        "collection (Always)",
        update_data("('range-always', 0)", elements(COLLECTION)),
        IterateCollection::Always,
    );
    push(
        "collection (Auto, large element last)",
        update_data("('mixed', 0)", with_large_last),
        auto,
    );
    some_beats(HEARTBEATS, &mut push)?;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;
    use tokio::io::AsyncWriteExt;

    /// The instrument sees a copy: the same bytes from another buffer are
    /// not counted, and of a write only what the kernel took is.
    #[test]
    fn watched_counts_only_bytes_from_payload_memory() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let payload = pattern(100_000, 1);
            let copy = Bytes::copy_from_slice(&payload);
            let (a, _a) = tokio::io::duplex(1 << 20);
            let mut w = Watched::new(a, std::slice::from_ref(&payload));
            w.write_all(&copy).await.unwrap();
            assert_eq!(w.from_payloads, 0, "a copy's bytes are not the payload's");
            w.write_all(&payload[10..20]).await.unwrap();
            assert_eq!(w.from_payloads, 10);
            // A write the other end takes only 1000 bytes of.
            let (c, _c) = tokio::io::duplex(1000);
            let mut w = Watched::new(c, std::slice::from_ref(&payload));
            let tail = [0u8; 5];
            let slices = [IoSlice::new(&payload), IoSlice::new(&tail)];
            let n = std::future::poll_fn(|cx| Pin::new(&mut w).poll_write_vectored(cx, &slices))
                .await
                .unwrap();
            assert_eq!(n, 1000);
            assert_eq!(w.from_payloads, 1000);
        });
    }
}
