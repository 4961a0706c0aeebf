//! What any program that joins a Dask cluster as a worker needs: a valid
//! `register-worker` ([`RegisterWorker::new`], [`WorkerMetrics`]), the
//! registration that opens the worker's batched stream
//! ([`register_worker`]), and the heartbeats that keep it registered
//! ([`Heartbeats`]).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    BatchedReader, BatchedWriter, HeartbeatReply, HeartbeatWorker, Map, Op, RegisterWorker,
    RegisterWorkerReply, RemoteError, Rpc, RpcError, DEFAULT_BATCH_INTERVAL,
};
use crate::transport::{ConnectionBuilder, HandshakeOptions, Socket, TransportError};
use crate::typed;
use crate::value::Value;

use super::runtime::{next_tick, now, resident_memory};

/// `spilled_bytes` of [`WorkerMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpilledBytes {
    /// Bytes spilled, counted in memory.
    pub memory: u64,
    /// Bytes on disk.
    pub disk: u64,
}

/// `bandwidth` of [`WorkerMetrics`]: the worker's transfer bandwidth
/// estimates (bytes/s): in total, per peer and per type, each of the last
/// two as `[bandwidth, count]`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bandwidth {
    /// The overall estimate.
    pub total: f64,
    /// Per peer address.
    pub workers: Map<String, (f64, u64)>,
    /// Per type name.
    pub types: Map<String, (f64, u64)>,
}

/// The `metrics` of a `register-worker` or `heartbeat_worker`: the keys
/// `Scheduler.heartbeat_worker` reads (`bandwidth.total`,
/// `bandwidth.workers`, `bandwidth.types`, `digests_total_since_heartbeat`,
/// `memory`, `spilled_bytes.memory`; `spilled_bytes.disk` for
/// `WorkerState.memory`), those `Worker.get_metrics` always sends, and
/// any custom metrics (`extra`, merged at the end, as
/// `Worker.metrics` are).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerMetrics {
    /// Tasks per state (`{}` for a worker that runs none).
    pub task_counts: Map<String, u64>,
    /// Transfer bandwidth estimates.
    pub bandwidth: Bandwidth,
    /// Fine performance metrics since the last heartbeat.
    pub digests_total_since_heartbeat: Map<String, f64>,
    /// Bytes of data held.
    pub managed_bytes: u64,
    /// Spilled bytes.
    pub spilled_bytes: SpilledBytes,
    /// The process's resident memory.
    pub memory: u64,
    /// CPU use, percent.
    pub cpu: f64,
    /// The worker's clock.
    pub time: f64,
    /// Custom metrics, as name → value.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl WorkerMetrics {
    /// Metrics of a worker holding `managed_bytes` of data, now: resident
    /// memory from [`resident_memory`], a bandwidth estimate of 100 MB/s
    /// (Dask's `distributed.scheduler.bandwidth` default), nothing else.
    pub fn new(managed_bytes: u64) -> WorkerMetrics {
        WorkerMetrics {
            task_counts: Map::default(),
            bandwidth: Bandwidth {
                total: 100e6,
                workers: Map::default(),
                types: Map::default(),
            },
            digests_total_since_heartbeat: Map::default(),
            managed_bytes,
            spilled_bytes: SpilledBytes::default(),
            memory: resident_memory(),
            cpu: 0.0,
            time: now(),
            extra: Map::default(),
        }
    }

    /// The metrics as the map a message carries.
    pub fn to_value(&self) -> Value {
        typed::to_value(self).expect("metrics are plain msgpack values")
    }
}

/// A registered worker's batched stream to the scheduler.
#[derive(Debug)]
pub struct WorkerStream {
    /// What the scheduler sends (read [`SchedulerToWorker`](super::SchedulerToWorker)s).
    pub reader: BatchedReader<tokio::io::ReadHalf<Socket>>,
    /// What the worker sends, batched every
    /// [`DEFAULT_BATCH_INTERVAL`] as Dask's worker does.
    pub writer: BatchedWriter,
    /// The scheduler's answer to the registration.
    pub reply: RegisterWorkerReply,
}

/// Registers a worker as `Worker._register_with_scheduler` does: connects
/// to `scheduler` (`tcp://host:port` or `host:port`) with `builder`'s
/// options (retrying until its connect timeout), writes `msg` (`reply:
/// false`: `Scheduler.add_worker` answers by itself) and reads the answer. The connection then is the worker's
/// batched stream. A refusal (`{"status": "error", "message": "name taken,
/// ..."}`) is an [`RpcError`] whose cause is
/// [`RpcCause::Remote`](super::RpcCause::Remote), with the scheduler's
/// message; no answer within `opts.timeout` (a duplicate address gets none) is a timeout.
///
/// Must be called within a tokio runtime (the writer's task is spawned).
pub async fn register_worker(
    scheduler: &str,
    builder: &ConnectionBuilder,
    opts: &HandshakeOptions,
    msg: &RegisterWorker,
) -> Result<WorkerStream, RpcError> {
    // Connecting has its own deadline (the builder's connect timeout).
    let (mut conn, _) = builder.connect(scheduler, opts).await?;
    let exchange = async {
        conn.send_msg(msg).await?;
        Ok::<_, RpcError>(conn.recv_value().await.ok_or_else(RpcError::closed)??)
    };
    let reply = match opts.timeout {
        Some(t) => tokio::time::timeout(t, exchange)
            .await
            .map_err(|_| RpcError::from(timed_out("registering with the scheduler")))??,
        None => exchange.await?,
    };
    let reply: RegisterWorkerReply = typed::from_value(reply)?;
    if reply.status != "OK" {
        return Err(RpcError::from(RemoteError {
            status: reply.status.clone(),
            exception_text: reply.message.clone().unwrap_or_default(),
            traceback_text: String::new(),
        }));
    }
    let (r, w) = conn.into_split();
    Ok(WorkerStream {
        reader: BatchedReader::new(r),
        writer: BatchedWriter::new(w, DEFAULT_BATCH_INTERVAL),
        reply,
    })
}

fn timed_out(what: &str) -> TransportError {
    TransportError::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer {what}"),
    ))
}

/// Why heartbeats stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum HeartbeatError {
    /// The scheduler answered `{"status": "missing"}`: it no longer knows
    /// this worker (Dask's worker closes itself then).
    Missing,
    /// No heartbeat went through for `for_`; the last error.
    Failed {
        /// Since the last heartbeat that went through.
        for_: Duration,
        /// What the last attempt met.
        last: RpcError,
    },
}

impl fmt::Display for HeartbeatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeartbeatError::Missing => f.write_str("the scheduler no longer knows this worker"),
            HeartbeatError::Failed { for_, last } => write!(
                f,
                "no heartbeat reached the scheduler for {:.1} s: {last}",
                for_.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for HeartbeatError {}

/// A worker's heartbeats (`heartbeat_worker`, on a connection of their own
/// as Dask's pooled RPC): sent every [`interval`](Heartbeats::interval),
/// which each reply sets (`heartbeat-interval`), as `Worker.heartbeat`
/// does, so the scheduler keeps the worker however short its
/// `distributed.scheduler.worker-ttl`. The interval runs from one
/// heartbeat's start to the next, however late the reply, as Dask's
/// periodic callback runs them ([`next_tick`](super::runtime::next_tick)).
///
/// ```no_run
/// use std::time::Duration;
/// use framewire::dask::{Heartbeats, WorkerMetrics};
/// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
///
/// # async fn f() {
/// let beats = Heartbeats::new("tcp://127.0.0.1:8786", "tcp://127.0.0.1:40000",
///     ConnectionBuilder::new(), HandshakeOptions::default());
/// // Runs until the scheduler forgets the worker or stays out of reach for 30 s.
/// let why = beats.run(Duration::from_secs(30), || WorkerMetrics::new(0).to_value()).await;
/// eprintln!("{why}");
/// # }
/// ```
#[derive(Debug)]
pub struct Heartbeats {
    scheduler: String,
    address: String,
    builder: ConnectionBuilder,
    opts: HandshakeOptions,
    rpc: Option<Rpc<Socket>>,
    /// Time between heartbeats: 1 s (Dask's worker default) until a reply
    /// says otherwise.
    pub interval: Duration,
}

impl Heartbeats {
    /// Heartbeats of the worker at `address` to `scheduler`; connections
    /// are made with `builder` and `opts` (whose `timeout` also bounds each
    /// call).
    pub fn new(
        scheduler: &str,
        address: &str,
        builder: ConnectionBuilder,
        opts: HandshakeOptions,
    ) -> Heartbeats {
        Heartbeats {
            scheduler: scheduler.to_owned(),
            address: address.to_owned(),
            builder,
            opts,
            rpc: None,
            interval: Duration::from_secs(1),
        }
    }

    /// One heartbeat with these metrics (connecting first if needed); sets
    /// [`interval`](Heartbeats::interval) from the reply. A failed call
    /// drops the connection (the next one reconnects).
    pub async fn beat(&mut self, metrics: Value) -> Result<HeartbeatReply, RpcError> {
        let msg = HeartbeatWorker {
            op: Op::new(),
            address: self.address.clone(),
            now: now(),
            metrics,
            executing: Map::default(),
            extensions: Value::Map(Vec::new()),
            reply: None,
        };
        let call = async {
            if self.rpc.is_none() {
                let (conn, _) = self.builder.connect(&self.scheduler, &self.opts).await?;
                self.rpc = Some(Rpc::new(conn));
            }
            let rpc = self.rpc.as_mut().expect("connected above");
            rpc.call::<_, HeartbeatReply>(&msg).await
        };
        let result = match self.opts.timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .unwrap_or_else(|_| Err(timed_out("to a heartbeat").into())),
            None => call.await,
        };
        match &result {
            Ok(reply) => {
                let asked = reply.heartbeat_interval.map(|s| s.as_f64());
                if let Some(s) = asked.filter(|s| *s > 0.0) {
                    self.interval = Duration::from_secs_f64(s.min(3600.0));
                }
            }
            Err(_) => self.rpc = None,
        }
        result
    }

    /// Heartbeats until the scheduler answers `missing`, or none went
    /// through for `give_up_after` (then the last error). `metrics` makes
    /// each heartbeat's metrics.
    pub async fn run(
        mut self,
        give_up_after: Duration,
        mut metrics: impl FnMut() -> Value,
    ) -> HeartbeatError {
        let mut last_ok = tokio::time::Instant::now();
        let mut tick = last_ok;
        loop {
            match self.beat(metrics()).await {
                Ok(reply) if reply.status == "missing" => return HeartbeatError::Missing,
                Ok(_) => last_ok = tokio::time::Instant::now(),
                Err(last) => {
                    let for_ = last_ok.elapsed();
                    if for_ >= give_up_after {
                        return HeartbeatError::Failed { for_, last };
                    }
                }
            }
            tick = next_tick(tick, self.interval, tokio::time::Instant::now());
            tokio::time::sleep_until(tick).await;
        }
    }
}

/// The package versions of the scheduler at `scheduler` (its `versions`
/// RPC), under this host's description: the `versions` a worker that runs
/// no Python registers with. Such a worker never unpickles, so no package
/// can be at odds with it; registering without versions would make every
/// client warn of a version mismatch with it.
pub async fn versions_like_scheduler(
    scheduler: &str,
    builder: &ConnectionBuilder,
    opts: &HandshakeOptions,
) -> Result<Value, RpcError> {
    let (conn, _) = builder.connect(scheduler, opts).await?;
    let mut rpc = Rpc::new(conn);
    let theirs: Value = rpc
        .call(&Value::map_of([("op", Value::from_static("versions"))]))
        .await?;
    let _ = rpc.close().await;
    let host = Value::map_of([
        ("OS", Value::str(std::env::consts::OS)),
        ("machine", Value::str(std::env::consts::ARCH)),
        ("framewire", Value::from_static(env!("CARGO_PKG_VERSION"))),
    ]);
    let packages = theirs
        .get("packages")
        .cloned()
        .unwrap_or(Value::Map(Vec::new()));
    Ok(Value::map_of([("host", host), ("packages", packages)]))
}

/// A worker's answer to `identity` (`Worker.identity`); a client reads it
/// from a Dask worker as well.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerIdentity {
    /// `"Worker"`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its `server_id`.
    pub id: String,
    /// The scheduler's address.
    pub scheduler: String,
    /// Threads.
    pub nthreads: u32,
    /// Bytes, or nil.
    pub memory_limit: Option<u64>,
}
