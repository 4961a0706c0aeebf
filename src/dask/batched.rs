//! Batched streams, as Dask's `BatchedSend` writes them and
//! `Server.handle_stream` reads them: every message is a list of op maps
//! (a single map is accepted too), written at most once per interval.

use std::collections::VecDeque;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::op_of;
use crate::transport::{ReadHalf, TransportError, WriteHalf};
use crate::typed;
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
    closed: bool,
}

impl<R: AsyncRead + Unpin> BatchedReader<R> {
    /// Reads the stream on `half`.
    pub fn new(half: ReadHalf<R>) -> BatchedReader<R> {
        BatchedReader {
            half,
            pending: VecDeque::new(),
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
    }

    /// The next op, as `M` (a channel enum such as
    /// [`WorkerToScheduler`](super::WorkerToScheduler)); `None` at
    /// `close-stream` or when the peer closed.
    pub async fn recv<M: DeserializeOwned>(&mut self) -> Option<Result<M, TransportError>> {
        match self.recv_value().await? {
            Ok(v) => Some(typed::from_value(v).map_err(TransportError::Decode)),
            Err(e) => Some(Err(e)),
        }
    }

    /// The read half.
    pub fn into_inner(self) -> ReadHalf<R> {
        self.half
    }
}

enum Command {
    Send(Value),
    Close,
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
    tx: mpsc::UnboundedSender<Command>,
    task: JoinHandle<Result<(), TransportError>>,
}

impl BatchedWriter {
    /// A writer on `half`, flushing at most once per `interval`
    /// ([`DEFAULT_BATCH_INTERVAL`] as a worker does). Spawns its task on
    /// the current tokio runtime.
    pub fn new<W>(half: WriteHalf<W>, interval: Duration) -> BatchedWriter
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_batches(half, rx, interval));
        BatchedWriter { tx, task }
    }

    /// Queues an op. It is converted now (an error is returned at once);
    /// an error writing the stream is returned by [`BatchedWriter::close`],
    /// and [`TransportError::Closed`] by later calls.
    pub fn send<M: Serialize + ?Sized>(&self, msg: &M) -> Result<(), TransportError> {
        self.send_value(typed::to_value(msg).map_err(TransportError::Encode)?)
    }

    /// Queues an op given as a map.
    pub fn send_value(&self, msg: Value) -> Result<(), TransportError> {
        self.tx
            .send(Command::Send(msg))
            .map_err(|_| TransportError::Closed)
    }

    /// Writes what is queued, then shuts the write direction down.
    pub async fn close(self) -> Result<(), TransportError> {
        let _ = self.tx.send(Command::Close);
        self.task
            .await
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?
    }
}

async fn write_batches<W: AsyncWrite + Unpin>(
    mut half: WriteHalf<W>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    interval: Duration,
) -> Result<(), TransportError> {
    use tokio::time::{timeout_at, Instant};
    let mut batch = Vec::new();
    // As `BatchedSend`: a batch goes at once when the last one went at
    // least `interval` ago, else when that interval is over.
    let mut next_deadline = Instant::now();
    let mut closing = false;
    while !closing {
        match rx.recv().await {
            None | Some(Command::Close) => closing = true,
            Some(Command::Send(v)) => batch.push(v),
        }
        while !closing && Instant::now() < next_deadline {
            match timeout_at(next_deadline, rx.recv()).await {
                Err(_) => break,
                Ok(None) | Ok(Some(Command::Close)) => closing = true,
                Ok(Some(Command::Send(v))) => batch.push(v),
            }
        }
        // What is already queued goes too (and everything, when closing).
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Command::Send(v) => batch.push(v),
                Command::Close => closing = true,
            }
        }
        if !batch.is_empty() {
            half.send_value(&Value::Array(std::mem::take(&mut batch)))
                .await?;
            next_deadline = Instant::now() + interval;
        }
    }
    half.close().await
}
