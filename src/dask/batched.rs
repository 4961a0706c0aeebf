//! Batched streams, as Dask's `BatchedSend` writes them and
//! `Server.handle_stream` reads them: every message is a list of op maps
//! (a single map is accepted too), written at most once per interval.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde::de::{self, DeserializeOwned, IgnoredAny, VariantAccess};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::wire::op_of;
use super::wire::{Dispatch, OpSeed};
use crate::envelope::Envelope;
use crate::error::EncodeError;
use crate::limits::Limits;
use crate::message;
use crate::msgpack;
use crate::protocol::{self, DecodeError};
use crate::serialize::SerializeOptions;
use crate::transport::{ReadHalf, TransportError, WriteHalf};
use crate::typed;
use crate::typed::by_op::BY_OP;
use crate::value::Value;

/// The interval a worker's `BatchedSend` writes at (`"2ms"`, `worker.py:641`;
/// the scheduler's to a worker is `"5ms"`).
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(2);

/// Reads a batched stream one op at a time, as `Server.handle_stream`
/// does: a message that is a list is a batch, any other is one op; the
/// string `"OK"` ends its batch early; `close-stream` ends the stream.
///
/// ```
/// use framewire::dask::{BatchedReader, WorkerToScheduler};
/// use framewire::transport::Connection;
/// use framewire::Value;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 16);
/// let mut tx = Connection::new(a);
/// let (r, _w) = Connection::new(b).into_split();
/// let mut stream = BatchedReader::new(r);
/// let op = |name: &str| Value::map_of([("op", Value::str(name))]);
/// tx.send_value(&Value::Array(vec![op("keep-alive"), op("close-stream"), op("keep-alive")])).await?;
/// let first: WorkerToScheduler = stream.recv().await.expect("an op")?;
/// assert_eq!(first.op(), Some("keep-alive"));
/// assert!(stream.recv::<WorkerToScheduler>().await.is_none()); // close-stream
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BatchedReader<R> {
    half: ReadHalf<R>,
    pending: VecDeque<Value>,
    /// The ops of the last message, read by [`BatchedReader::recv`] as the
    /// type it asked for.
    typed: Option<TypedBatch>,
    closed: bool,
}

/// The ops of one message read straight into `M` ([`typed::from_frames`]):
/// a `VecDeque<M>`, with the message, so that what is left can be read
/// again as values if the next call asks for another type.
struct TypedBatch {
    ops: Box<dyn Any + Send>,
    /// Whether `close-stream` ended the batch.
    closes: bool,
    env: Envelope,
    /// Ops already returned.
    taken: usize,
}

impl fmt::Debug for TypedBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedBatch")
            .field("closes", &self.closes)
            .field("taken", &self.taken)
            .finish_non_exhaustive()
    }
}

impl<R: AsyncRead + Unpin> BatchedReader<R> {
    /// Reads the stream on `half`.
    pub fn new(half: ReadHalf<R>) -> BatchedReader<R> {
        BatchedReader {
            half,
            pending: VecDeque::new(),
            typed: None,
            closed: false,
        }
    }

    /// The next op, as a map; `None` at `close-stream` or when the peer
    /// closed. Cancel-safe.
    pub async fn recv_value(&mut self) -> Option<Result<Value, TransportError>> {
        loop {
            if self.closed {
                return None;
            }
            if let Err(e) = self.untype() {
                return Some(Err(e));
            }
            if let Some(v) = self.pending.pop_front() {
                if op_of(&v) == Some("close-stream") {
                    self.closed = true;
                    self.pending.clear();
                    return None;
                }
                return Some(Ok(v));
            }
            let msg = match self.half.recv_value().await? {
                Ok(msg) => msg,
                Err(e) => return Some(Err(e)),
            };
            self.queue(msg);
        }
    }

    /// A message's ops, queued as values.
    fn queue(&mut self, msg: Value) {
        match msg {
            Value::Array(items) => {
                // `"OK"` ends the batch: the ops after it are dropped.
                let end = items
                    .iter()
                    .position(|v| v.as_str() == Some("OK"))
                    .unwrap_or(items.len());
                self.pending.extend(items.into_iter().take(end));
            }
            Value::Str(s) if &*s == "OK" => {}
            other => self.pending.push_back(other),
        }
    }

    /// The ops of a typed batch not returned yet, queued as values.
    fn untype(&mut self) -> Result<(), TransportError> {
        let Some(batch) = self.typed.take() else {
            return Ok(());
        };
        let msg = self.half.decode_value(&batch.env)?;
        self.queue(msg);
        self.pending.drain(..batch.taken);
        Ok(())
    }

    /// The next op, as `M` (a channel enum such as
    /// [`WorkerToScheduler`](super::WorkerToScheduler)); `None` at
    /// `close-stream` or when the peer closed. Each message is read
    /// straight into `M`s ([`typed::from_frames`], no `Value` built); one
    /// that does not fit goes the way of [`BatchedReader::recv_value`] and
    /// [`from_value`](crate::from_value), so that the ops before a bad one
    /// are still returned and the bad one is an error of its own.
    /// Cancel-safe.
    pub async fn recv<M: DeserializeOwned + Send + 'static>(
        &mut self,
    ) -> Option<Result<M, TransportError>> {
        loop {
            if self.closed {
                return None;
            }
            if let Some(batch) = &mut self.typed {
                let Some(ops) = batch.ops.downcast_mut::<VecDeque<M>>() else {
                    // Read as another type: the rest as values.
                    if let Err(e) = self.untype() {
                        return Some(Err(e));
                    }
                    continue;
                };
                if let Some(op) = ops.pop_front() {
                    batch.taken += 1;
                    return Some(Ok(op));
                }
                self.closed = batch.closes;
                self.typed = None;
                continue;
            }
            if !self.pending.is_empty() {
                return match self.recv_value().await? {
                    Ok(v) => Some(typed::from_value(v).map_err(TransportError::Decode)),
                    Err(e) => Some(Err(e)),
                };
            }
            let env = match self.half.recv().await? {
                Ok(env) => env,
                Err(e) => return Some(Err(e)),
            };
            let opts = self.half.session().deserialize_options(&env);
            match typed::from_frames::<Batch<M>>(env.frames(), &opts) {
                Ok(batch) => {
                    self.typed = Some(TypedBatch {
                        ops: Box::new(batch.ops),
                        closes: batch.closes,
                        env,
                        taken: 0,
                    })
                }
                Err(_) => match self.half.decode_value(&env) {
                    Ok(msg) => self.queue(msg),
                    Err(e) => return Some(Err(e)),
                },
            }
        }
    }

    /// The read half.
    pub fn into_inner(self) -> ReadHalf<R> {
        self.half
    }
}

/// A list message read as `M`s, up to `"OK"` or `close-stream` (the rest
/// is still checked by the deserializer, never read as ops). Anything else
/// (a single op, an op that does not fit) is an error: the caller reads the
/// message as values instead.
struct Batch<M> {
    ops: VecDeque<M>,
    closes: bool,
}

impl<'de, M: Deserialize<'de>> Deserialize<'de> for Batch<M> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Batch<M>, D::Error> {
        struct Ops<M>(PhantomData<M>);
        impl<'de, M: Deserialize<'de>> de::Visitor<'de> for Ops<M> {
            type Value = Batch<M>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of ops")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Batch<M>, A::Error> {
                let mut batch = Batch {
                    ops: VecDeque::with_capacity(seq.size_hint().unwrap_or(0).min(64)),
                    closes: false,
                };
                while let Some(item) = seq.next_element::<Item<M>>()? {
                    match item {
                        Item::Op(op) => batch.ops.push_back(op),
                        Item::Ok => break,
                        Item::CloseStream => {
                            batch.closes = true;
                            break;
                        }
                    }
                }
                Ok(batch)
            }
        }
        d.deserialize_seq(Ops(PhantomData))
    }
}

/// An element of a batch: `"OK"`, `close-stream`, or an op.
enum Item<M> {
    Ok,
    CloseStream,
    Op(M),
}

impl<'de, M: Deserialize<'de>> Deserialize<'de> for Item<M> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Item<M>, D::Error> {
        struct ByOp<M>(PhantomData<M>);
        impl<'de, M: Deserialize<'de>> de::Visitor<'de> for ByOp<M> {
            type Value = Item<M>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an op")
            }
            fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Item<M>, A::Error> {
                let (op, message) = data.variant_seed(OpSeed(&["close-stream"]))?;
                match op {
                    Dispatch::Known(_) => {
                        message.newtype_variant::<IgnoredAny>()?;
                        Ok(Item::CloseStream)
                    }
                    Dispatch::Unknown => message.newtype_variant().map(Item::Op),
                    Dispatch::NotAMap => match message.newtype_variant::<Value>()? {
                        v if v.as_str() == Some("OK") => Ok(Item::Ok),
                        _ => Err(de::Error::custom("an op that is not a map")),
                    },
                }
            }
        }
        d.deserialize_newtype_struct(BY_OP, ByOp(PhantomData))
    }
}

/// An op waiting for its batch, or a run of them.
enum Queued {
    /// Ops written without blocks ([`typed::append_to`]), one after the
    /// other, after [`LIST_HEAD`] bytes kept for the list's header: what
    /// the batch's frame 0 is when they are all it holds.
    Joined { buf: BytesMut, count: usize },
    /// An op written with its blocks (frame 0, then the blocks).
    Frames(Vec<Bytes>),
    /// An op given as a value.
    Value(Value),
}

/// Room kept before a batch's ops for its list header (an array 32's).
const LIST_HEAD: usize = 5;

impl Queued {
    fn joined() -> Queued {
        let mut buf = BytesMut::with_capacity(256);
        buf.resize(LIST_HEAD, 0);
        Queued::Joined { buf, count: 0 }
    }
}

/// `ops` joined as a list: `buf` after its room, with the header written
/// into the end of the room (as short as msgpack has it, as `msgpack`
/// writes it in Python) and the rest of the room cut off. No byte moves.
fn finish_list(mut buf: BytesMut, count: usize) -> Result<Bytes, TransportError> {
    let (head, width) = msgpack::array_len_bytes(count).map_err(TransportError::Encode)?;
    buf[LIST_HEAD - width..LIST_HEAD].copy_from_slice(&head[..width]);
    bytes::Buf::advance(&mut buf, LIST_HEAD - width);
    Ok(buf.freeze())
}

/// The message of a batch: the list of its ops. Ops written without blocks
/// are joined as they are (the list's frame 0 is their bytes one after the
/// other); otherwise the list is written as a value, the written ops read
/// back pass-through (their blocks re-emitted byte for byte).
fn batch_frames(
    ops: &mut Vec<Queued>,
    opts: &SerializeOptions,
) -> Result<Vec<Bytes>, TransportError> {
    if let [Queued::Joined { .. }] = ops.as_slice() {
        let Some(Queued::Joined { buf, count }) = ops.pop() else {
            unreachable!("one run of written ops")
        };
        return Ok(vec![finish_list(buf, count)?]);
    }
    // Written by `append_to` under no limit tighter than these.
    let decode = |frames: &[Bytes]| {
        message::decode(frames, &Limits::dask_compat())
            .map_err(|e| TransportError::Decode(DecodeError::Message(e)))
    };
    let mut items = Vec::new();
    for op in ops.drain(..) {
        match op {
            Queued::Value(v) => items.push(v),
            Queued::Frames(f) => items.push(decode(&f)?),
            Queued::Joined { buf, count } => match decode(&[finish_list(buf, count)?])? {
                Value::Array(ops) => items.extend(ops),
                _ => unreachable!("a run of ops is written as a list"),
            },
        }
    }
    Ok(protocol::dumps_with(&Value::Array(items), opts)?)
}

/// Writes `msg` into `ops`: after the written ops that end them, or as an
/// op of its own when it has blocks. On an error `ops` is as it was.
fn write_op<M: Serialize + ?Sized>(
    ops: &mut Vec<Queued>,
    msg: &M,
    opts: &SerializeOptions,
) -> Result<(), EncodeError> {
    if !matches!(ops.last(), Some(Queued::Joined { .. })) {
        ops.push(Queued::joined());
    }
    let Some(Queued::Joined { buf, count }) = ops.last_mut() else {
        unreachable!("a run of written ops was just made if none was last")
    };
    let start = buf.len();
    // Inside the batch's list: nested one level deeper. An op whose
    // `Serialize` panics leaves the batch as it was (the panic goes on).
    let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        typed::append_to(msg, opts, 1, buf)
    }));
    let frames = match written {
        Ok(Ok(blocks)) if blocks.is_empty() => {
            *count += 1;
            return Ok(());
        }
        Ok(Ok(blocks)) => std::iter::once(buf.split_off(start).freeze())
            .chain(blocks)
            .collect(),
        failed => {
            // An error took back what was written; a panic did not.
            buf.truncate(start);
            if *count == 0 {
                ops.pop();
            }
            match failed {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(written) => return written.map(drop),
            }
        }
    };
    if *count == 0 {
        ops.pop();
    }
    ops.push(Queued::Frames(frames));
    Ok(())
}

/// What a writer and its task share: the ops of the next batch.
#[derive(Default)]
struct Outbox {
    pending: std::sync::Mutex<Pending>,
    /// The task's wake-up: the first op of a batch, or the close.
    notify: Notify,
}

#[derive(Default)]
struct Pending {
    ops: Vec<Queued>,
    /// Everything queued is to go, then the stream closes.
    closing: bool,
    /// The task ended (closed, or an error writing): no op is taken.
    ended: bool,
}

impl Outbox {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // An op's `Serialize` that panicked while it was written left the
        // ops as they were (`write_op` takes back what it had written).
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn close(&self) {
        self.pending().closing = true;
        self.notify.notify_one();
    }
}

/// Writes a batched stream as Dask's `BatchedSend`: ops are queued without
/// waiting, and a task writes what has queued as one list message at most
/// once per interval.
///
/// ```
/// use std::time::Duration;
/// use framewire::dask::{BatchedReader, BatchedWriter, KeepAlive, Op, WorkerToScheduler};
/// use framewire::transport::Connection;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let (a, b) = tokio::io::duplex(1 << 16);
/// let (_r, w) = Connection::new(a).into_split();
/// let writer = BatchedWriter::new(w, Duration::from_millis(2));
/// for _ in 0..3 {
///     writer.send(&KeepAlive { op: Op::new() })?;
/// }
/// writer.close().await?;
/// let (r, _w) = Connection::new(b).into_split();
/// let mut reader = BatchedReader::new(r);
/// let mut n = 0;
/// while let Some(op) = reader.recv::<WorkerToScheduler>().await {
///     assert_eq!(op?.op(), Some("keep-alive"));
///     n += 1;
/// }
/// assert_eq!(n, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BatchedWriter {
    batch: Arc<Outbox>,
    /// Taken by [`BatchedWriter::close`].
    task: Option<JoinHandle<Result<(), TransportError>>>,
    /// The session's, for writing ops as they are queued.
    serialize: SerializeOptions,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.pending();
        f.debug_struct("Outbox")
            .field("ops", &p.ops.len())
            .field("closing", &p.closing)
            .field("ended", &p.ended)
            .finish()
    }
}

impl BatchedWriter {
    /// A writer on `half`, flushing at most once per `interval`
    /// ([`DEFAULT_BATCH_INTERVAL`] as a worker does), less the half
    /// millisecond its timer is set early: tokio's timer is coarser than
    /// asyncio's, and so batches go on average as late after the interval
    /// as Python's `BatchedSend` sends them. Spawns its task on the current
    /// tokio runtime.
    pub fn new<W>(half: WriteHalf<W>, interval: Duration) -> BatchedWriter
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let serialize = half.session().serialize_options();
        let batch = Arc::new(Outbox::default());
        let task = tokio::spawn(write_batches(half, batch.clone(), interval));
        BatchedWriter {
            batch,
            task: Some(task),
            serialize,
        }
    }

    /// Queues an op. It is written now, with the session's options, by
    /// [`to_frames`](crate::typed::to_frames) (the bytes its
    /// [`to_value`](crate::to_value) would give in the batch), straight
    /// after the ops queued before it: an op that cannot be written is an
    /// error at once and never queued; an error writing the stream is
    /// returned by [`BatchedWriter::close`], and [`TransportError::Closed`]
    /// by later calls.
    pub fn send<M: Serialize + ?Sized>(&self, msg: &M) -> Result<(), TransportError> {
        self.queue(|ops| write_op(ops, msg, &self.serialize))
    }

    /// Queues an op given as a map.
    pub fn send_value(&self, msg: Value) -> Result<(), TransportError> {
        self.queue(|ops| {
            ops.push(Queued::Value(msg));
            Ok(())
        })
    }

    /// Puts an op in the batch with `put`, and wakes the task for a
    /// batch's first op.
    fn queue(
        &self,
        put: impl FnOnce(&mut Vec<Queued>) -> Result<(), EncodeError>,
    ) -> Result<(), TransportError> {
        let mut p = self.batch.pending();
        if p.closing || p.ended {
            return Err(TransportError::Closed);
        }
        let first = p.ops.is_empty();
        put(&mut p.ops).map_err(TransportError::Encode)?;
        drop(p);
        if first {
            self.batch.notify.notify_one();
        }
        Ok(())
    }

    /// Writes what is queued, then shuts the write direction down.
    pub async fn close(mut self) -> Result<(), TransportError> {
        self.batch.close();
        let task = self.task.take().expect("taken only here");
        task.await
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?
    }
}

impl Drop for BatchedWriter {
    /// What is queued still goes, then the stream closes (as when the
    /// writer is closed, without waiting).
    fn drop(&mut self) {
        self.batch.close();
    }
}

/// How much sooner than its interval a batched stream's timer is set
/// (see `write_batches`).
const TIMER_SLACK: Duration = Duration::from_micros(500);

async fn write_batches<W: AsyncWrite + Unpin>(
    mut half: WriteHalf<W>,
    batch: Arc<Outbox>,
    interval: Duration,
) -> Result<(), TransportError> {
    let written = write_until_closed(&mut half, &batch, interval).await;
    batch.pending().ended = true;
    written?;
    half.close().await
}

async fn write_until_closed<W: AsyncWrite + Unpin>(
    half: &mut WriteHalf<W>,
    batch: &Outbox,
    interval: Duration,
) -> Result<(), TransportError> {
    use tokio::time::Instant;
    let opts = half.session().serialize_options();
    // As `BatchedSend`: a batch goes at once when the last one went at
    // least `interval` ago, else when that interval is over. The wait is
    // set `TIMER_SLACK` short of the interval: tokio's timer fires on its
    // next 1 ms tick after a deadline and parks for a whole number of
    // milliseconds rounded up (0–2 ms late, about 1.1 ms at the median),
    // asyncio's (which `BatchedSend` waits with) only rounds the wait up
    // to a millisecond (about 0.7 ms late). With the slack, batches go on
    // average as late after the interval as Python's do, never more than
    // `TIMER_SLACK` before it.
    let wait = interval.saturating_sub(TIMER_SLACK);
    let mut next_deadline = Instant::now();
    // One timer, moved for each batch that has to wait.
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(next_deadline));
    let mut ops = Vec::new();
    loop {
        // An op, or the close. (A wake-up given while this task was busy
        // is kept by `Notify` for this wait.)
        let mut closing = loop {
            {
                let p = batch.pending();
                if p.closing || !p.ops.is_empty() {
                    break p.closing;
                }
            }
            batch.notify.notified().await;
        };
        if !closing && Instant::now() < next_deadline {
            sleep.as_mut().reset(next_deadline);
            while !closing {
                let mut woken = std::pin::pin!(batch.notify.notified());
                let due = std::future::poll_fn(|cx| {
                    if sleep.as_mut().poll(cx).is_ready() {
                        Poll::Ready(true)
                    } else {
                        woken.as_mut().poll(cx).map(|()| false)
                    }
                })
                .await;
                if due {
                    break;
                }
                closing = batch.pending().closing;
            }
        }
        // What is queued now goes (and everything, when closing).
        {
            let mut p = batch.pending();
            std::mem::swap(&mut p.ops, &mut ops);
            closing = p.closing;
        }
        if !ops.is_empty() {
            let frames = batch_frames(&mut ops, &opts)?;
            ops.clear();
            half.send(Envelope::new(frames)?).await?;
            next_deadline = Instant::now() + wait;
        }
        if closing {
            return Ok(());
        }
    }
}
