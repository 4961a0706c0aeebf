//! The Dask 2026.8.0 messages, field by field in the order Dask writes
//! them (`tests/dask/ops-2026.8.0.md` has the source line of each).

use serde::{Deserialize, Serialize};

use super::{Key, Keys, Map, Op, OpName, StartStop};
use crate::typed::Bin;
use crate::value::{Block, Value};

macro_rules! op_names {
    ($($ty:ty => $name:literal),* $(,)?) => {$(
        impl OpName for $ty {
            const NAME: &'static str = $name;
        }
    )*};
}

op_names! {
    ComputeTask => "compute-task",
    FreeKeys => "free-keys",
    AcquireReplicas => "acquire-replicas",
    RemoveReplicas => "remove-replicas",
    StealRequest => "steal-request",
    WorkerStatusChange => "worker-status-change",
    Close => "close",
    CloseStream => "close-stream",
    TaskFinished => "task-finished",
    TaskErred => "task-erred",
    ReleaseWorkerData => "release-worker-data",
    AddKeys => "add-keys",
    Reschedule => "reschedule",
    StealResponse => "steal-response",
    KeepAlive => "keep-alive",
    GetData => "get_data",
    UpdateData => "update_data",
    Gather => "gather",
    FreeKeysRpc => "free_keys",
    Identity => "identity",
    RegisterWorker => "register-worker",
    HeartbeatWorker => "heartbeat_worker",
    GatherKeys => "gather",
    Scatter => "scatter",
    UpdateWhoHas => "update_data",
    StreamStart => "stream-start",
    ClientTaskErred => "task-erred",
    KeyInMemory => "key-in-memory",
    LostData => "lost-data",
    CancelledKeys => "cancelled-keys",
    TaskRetried => "task-retried",
    Restart => "restart",
    SchedulerError => "error",
    Event => "event",
    AdjustHeartbeatInterval => "adjust-heartbeat-interval",
    RegisterClient => "register-client",
    UpdateGraph => "update-graph",
    ClientDesiresKeys => "client-desires-keys",
    ReportKey => "report-key",
    ClientReleasesKeys => "client-releases-keys",
    HeartbeatClient => "heartbeat-client",
    CloseClient => "close-client",
    SubscribeTopic => "subscribe-topic",
    UnsubscribeTopic => "unsubscribe-topic",
    CancelKeys => "cancel-keys",
    WhoHas => "who_has",
    HasWhat => "has_what",
    Ncores => "ncores",
    NcoresRunning => "ncores_running",
    Broadcast => "broadcast",
    RetireWorkers => "retire_workers",
    Replicate => "replicate",
    AmmHandler => "amm_handler",
    Run => "run",
    RemoveWorker => "remove-worker",
    LogEvent => "log-event",
}

/// A number as Dask wrote it, an int or a float. Where the 2026.8.0 source
/// says `float`, Python still lets an int through, and Dask sends one:
/// `heartbeat_interval(n)` is the int `1` for 11 to 49 workers
/// (`scheduler.py:9203-9213`), resources are whatever the user wrote
/// (`submit(..., resources={"GPU": 1})`). Kept as it came, so a message
/// encodes back to the same bytes; [`Number::as_f64`] reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A msgpack int.
    Int(i64),
    /// A msgpack float.
    Float(f64),
}

impl Number {
    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

impl From<f64> for Number {
    fn from(f: f64) -> Number {
        Number::Float(f)
    }
}

impl From<i64> for Number {
    fn from(i: i64) -> Number {
        Number::Int(i)
    }
}

impl Serialize for Number {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Number::Int(i) => s.serialize_i64(i),
            Number::Float(f) => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct NumberVisitor;
        impl serde::de::Visitor<'_> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number (int or float)")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Number, E> {
                i64::try_from(v)
                    .map(Number::Int)
                    .map_err(|_| E::custom(format!("{v} is above i64")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Float(v))
            }
        }
        d.deserialize_any(NumberVisitor)
    }
}

/// A duration as Dask's `parse_timedelta` reads it (`utils.py`): seconds
/// (an int or a float), or a string with its unit (`"100 ms"`, `"60s"`).
/// Kept as it came, so a message encodes back to the same bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Timedelta {
    /// Seconds.
    Seconds(Number),
    /// A number and a unit, as Dask's configuration writes them.
    Text(String),
}

// ---- scheduler → worker (the worker's batched stream) ----------------------

/// `compute-task`: run a task (`SchedulerState._task_to_msg`,
/// `scheduler.py:3576`). The worker reads it into `ComputeTaskEvent`, which
/// takes exactly these fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeTask {
    /// `"compute-task"`.
    pub op: Op<ComputeTask>,
    /// The task.
    pub key: Key,
    /// A fresh id for this run of the task; `task-finished` repeats it.
    pub run_id: i64,
    /// `(-user priority, generation, graph order)`: integers (a float where
    /// the user gave one, `submit(..., priority=0.5)`).
    pub priority: Vec<Number>,
    /// The scheduler's estimate of the run time in seconds: sent by
    /// `distributed` 2024.12.1 (whose workers ignore it), not by 2025.5.1 and
    /// later; `None` writes no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// Why the scheduler sent it.
    pub stimulus_id: String,
    /// For each dependency, the workers that hold it.
    pub who_has: Map<Key, Vec<String>>,
    /// For each dependency, its size.
    pub nbytes: Map<Key, u64>,
    /// The task spec, pickled (`ToPickle`): a `{"__Pickled__": i}` block,
    /// kept verbatim (framewire never unpickles).
    pub run_spec: Block,
    /// Resource restrictions (as the user wrote them: ints or floats), or nil.
    pub resource_restrictions: Option<Map<String, Number>>,
    /// Whether the task is an actor.
    pub actor: bool,
    /// The task's annotations (`{}` when none).
    pub annotations: Value,
    /// The task group's span, a uuid4 string.
    pub span_id: Option<String>,
}

/// `free-keys` (stream) and, with [`FreeKeysRpc`], `free_keys` (RPC): drop
/// these keys (`FreeKeysEvent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FreeKeys {
    /// `"free-keys"`.
    pub op: Op<FreeKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Why.
    pub stimulus_id: String,
}

/// `acquire-replicas`: fetch these keys from the workers that hold them
/// (the Active Memory Manager, `scheduler.py:8900`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcquireReplicas {
    /// `"acquire-replicas"`.
    pub op: Op<AcquireReplicas>,
    /// For each key, the workers that hold it.
    pub who_has: Map<Key, Vec<String>>,
    /// For each key, its size.
    pub nbytes: Map<Key, u64>,
    /// Why.
    pub stimulus_id: String,
}

/// `remove-replicas`: drop these replicas (the worker skips keys it does
/// not hold in memory).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoveReplicas {
    /// `"remove-replicas"`.
    pub op: Op<RemoveReplicas>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Why.
    pub stimulus_id: String,
}

/// `steal-request`: give this task up if it has not started
/// (`stealing.py:333`); answered with [`StealResponse`] and the same
/// `stimulus_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StealRequest {
    /// `"steal-request"`.
    pub op: Op<StealRequest>,
    /// The task.
    pub key: Key,
    /// Matches the response to the request (`"steal-<n>"`).
    pub stimulus_id: String,
}

/// `worker-status-change`, both ways on the worker's stream: a worker's
/// status, by `Status` name (`"running"`, `"paused"`, `"closing_gracefully"`...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatusChange {
    /// `"worker-status-change"`.
    pub op: Op<WorkerStatusChange>,
    /// The status name.
    pub status: String,
    /// Why.
    pub stimulus_id: String,
}

/// `close`: on the worker's stream, the scheduler closing the worker
/// (`{"op": "close", "reason": ...}`); on an RPC connection, the goodbye
/// Dask's `rpc` writes before closing it (`{"op": "close", "reply": false}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Close {
    /// `"close"`.
    pub op: Op<Close>,
    /// Why (stream form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the server answers `"OK"` (RPC form).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// `close-stream`: the end of a batched stream, either way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CloseStream {
    /// `"close-stream"`.
    pub op: Op<CloseStream>,
}

// ---- worker → scheduler (the worker's batched stream) ----------------------

/// `task-finished`: a task's result is in memory (`TaskFinishedMsg`,
/// `worker_state_machine.py:434`). The fields come first, then `op`,
/// `stimulus_id` and `status`, as the worker writes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskFinished {
    /// The task.
    pub key: Key,
    /// The `run_id` of its `compute-task`.
    pub run_id: i64,
    /// The result's size.
    pub nbytes: u64,
    /// `pickle.dumps(type(result))`, inline in frame 0.
    #[serde(rename = "type")]
    pub type_: Bin,
    /// The result's type name, e.g. `"int"`.
    pub typename: String,
    /// Task metadata (`{}` usually).
    pub metadata: Value,
    /// The thread that ran it.
    pub thread: Option<u64>,
    /// What the task spent its time on.
    pub startstops: Vec<StartStop>,
    /// `"task-finished"`.
    pub op: Op<TaskFinished>,
    /// Why.
    pub stimulus_id: String,
    /// `"OK"`.
    pub status: String,
}

/// `task-erred` from a worker: the task raised (`TaskErredMsg`).
/// `exception` and `traceback` are Dask's `to_serialize(pickle.dumps(...))`
/// blocks (after [`loads`](crate::loads), the pickled bytes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskErred {
    /// The task.
    pub key: Key,
    /// The `run_id` of its `compute-task`.
    pub run_id: i64,
    /// The pickled exception (a block, or its bytes once deserialized).
    pub exception: Value,
    /// The pickled traceback, or nil.
    pub traceback: Value,
    /// `repr` of the exception.
    pub exception_text: String,
    /// The formatted traceback.
    pub traceback_text: String,
    /// The thread that ran it.
    pub thread: Option<u64>,
    /// What the task spent its time on.
    pub startstops: Vec<StartStop>,
    /// `"task-erred"`.
    pub op: Op<TaskErred>,
    /// Why.
    pub stimulus_id: String,
    /// `"error"`.
    pub status: String,
}

/// `release-worker-data`: a key the worker held is gone from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReleaseWorkerData {
    /// The key.
    pub key: Key,
    /// `"release-worker-data"`.
    pub op: Op<ReleaseWorkerData>,
    /// Why.
    pub stimulus_id: String,
}

/// `add-keys`: the worker now holds these keys (fetched from a peer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AddKeys {
    /// The keys.
    pub keys: Vec<Key>,
    /// `"add-keys"`.
    pub op: Op<AddKeys>,
    /// Why.
    pub stimulus_id: String,
}

/// `reschedule`: the task asked to run elsewhere (`distributed.Reschedule`);
/// the scheduler decides again and frees it on this worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reschedule {
    /// The task.
    pub key: Key,
    /// `"reschedule"`.
    pub op: Op<Reschedule>,
    /// Why.
    pub stimulus_id: String,
}

/// `steal-response`: the answer to a [`StealRequest`], with its
/// `stimulus_id`; `state` is the worker's task state (`"ready"`,
/// `"waiting"`, `"constrained"`: given up; nil or `"released"`: the
/// scheduler reschedules; others: kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StealResponse {
    /// The task.
    pub key: Key,
    /// The task's state on the worker.
    pub state: Option<String>,
    /// `"steal-response"`.
    pub op: Op<StealResponse>,
    /// The request's.
    pub stimulus_id: String,
}

/// `keep-alive`: every 60 s on a worker's stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepAlive {
    /// `"keep-alive"`.
    pub op: Op<KeepAlive>,
}

// ---- requests to a worker (RPC) ----------------------------------------------

/// `get_data`: send me these keys. The reply is a [`GetDataReply`]; when its
/// status is `"OK"`, the caller writes the string `"OK"` back before the
/// worker goes on (`worker.py:2733`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetData {
    /// `"get_data"`.
    pub op: Op<GetData>,
    /// The keys (a list, or a set when a worker fetches dependencies).
    pub keys: Keys,
    /// The asking worker's address, or nil (the scheduler, a client).
    pub who: Option<String>,
    /// Always true (the worker replies); set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`GetData`]: `{"status": "OK", "data": {key: value}}` (keys
/// the worker does not hold are absent), or `{"status": "busy"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetDataReply {
    /// `"OK"` or `"busy"`.
    pub status: String,
    /// The values: blocks as they travel (pass-through), or deserialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<Key, Value>>,
}

/// `update_data` to a worker: hold these values (`scatter`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateData {
    /// `"update_data"`.
    pub op: Op<UpdateData>,
    /// The values, as blocks.
    pub data: Map<Key, Value>,
    /// Why (absent from Dask's own senders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stimulus_id: Option<String>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`UpdateData`]: the size of each value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateDataReply {
    /// The size of each value.
    pub nbytes: Map<Key, u64>,
    /// `"OK"`.
    pub status: String,
}

/// `gather` to a worker: fetch these keys from the workers that hold them
/// (`replicate`, `rebalance`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gather {
    /// `"gather"`.
    pub op: Op<Gather>,
    /// For each key, the workers that hold it.
    pub who_has: Map<Key, Vec<String>>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`Gather`]: `{"status": "OK"}` or
/// `{"status": "partial-fail", "keys": [...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherReply {
    /// `"OK"` or `"partial-fail"`.
    pub status: String,
    /// The keys that could not be fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<Key>>,
}

/// `free_keys`, the RPC form of [`FreeKeys`] (`replicate` dropping
/// surplus replicas); the reply is nil.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FreeKeysRpc {
    /// `"free_keys"`.
    pub op: Op<FreeKeysRpc>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Why.
    pub stimulus_id: String,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// `identity`, to any Dask server; the reply is a map (`{"type":
/// "Scheduler", "id", "address", "workers", ...}` or `{"type": "Worker",
/// "id", "scheduler", "nthreads", "memory_limit"}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// `"identity"`.
    pub op: Op<Identity>,
    /// Scheduler only: how many workers to describe (`-1`: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_workers: Option<i64>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

// ---- requests to the scheduler (RPC) -----------------------------------------

/// `register-worker`: the first message of a worker's stream
/// (`Worker._register_with_scheduler`); `Scheduler.add_worker` takes exactly
/// these fields and writes the [`RegisterWorkerReply`] itself, even though
/// `reply` is false. `metrics` must hold `bandwidth.total`,
/// `bandwidth.workers`, `bandwidth.types`, `digests_total_since_heartbeat`,
/// `memory` and `spilled_bytes.memory`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterWorker {
    /// `"register-worker"`.
    pub op: Op<RegisterWorker>,
    /// False: the handler answers by itself.
    pub reply: bool,
    /// The address the worker is reached at.
    pub address: String,
    /// Its `Status` name (`"init"`, then `worker-status-change` `"running"`).
    pub status: String,
    /// Threads.
    pub nthreads: u32,
    /// Its name (a str, or an int).
    pub name: Value,
    /// The worker's clock.
    pub now: f64,
    /// Resources it offers (ints or floats).
    pub resources: Map<String, Number>,
    /// Bytes, or nil.
    pub memory_limit: Option<u64>,
    /// Its scratch directory.
    pub local_directory: String,
    /// Services (`{"dashboard": port}`).
    pub services: Map<String, u64>,
    /// Its nanny's address, or nil.
    pub nanny: Option<String>,
    /// Its process id.
    pub pid: u32,
    /// `{"host": {...}, "packages": {...}}`; `{}` is accepted.
    pub versions: Value,
    /// Its metrics (see above for the keys the scheduler reads).
    pub metrics: Value,
    /// Startup information (`{}`).
    pub extra: Value,
    /// Why.
    pub stimulus_id: String,
    /// `"Worker-<uuid>"`.
    pub server_id: String,
}

/// The scheduler's answer to [`RegisterWorker`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterWorkerReply {
    /// `"OK"`, or `"error"` (then `message` says why, e.g. `"name taken, w1"`).
    pub status: String,
    /// The scheduler's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
    /// Seconds between heartbeats the scheduler wants now (`0.5`, the int
    /// `1` or `2`, or `n / 200 + 1`).
    #[serde(
        rename = "heartbeat-interval",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat_interval: Option<Number>,
    /// Worker plugins: name → pickled plugin.
    #[serde(
        rename = "worker-plugins",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub worker_plugins: Option<Map<String, Bin>>,
    /// A version mismatch warning (`""` when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// An error (`""` when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why registration failed, with `status: "error"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `heartbeat_worker` (an underscore: `scheduler.py:4181`), on the pooled
/// RPC connection; answered with [`HeartbeatReply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatWorker {
    /// `"heartbeat_worker"`.
    pub op: Op<HeartbeatWorker>,
    /// The worker's address.
    pub address: String,
    /// The worker's clock.
    pub now: f64,
    /// Its metrics (as in [`RegisterWorker`]).
    pub metrics: Value,
    /// For each running task, seconds it has run.
    pub executing: Map<Key, f64>,
    /// Per scheduler extension, data for its `heartbeat` (`{}` for none).
    pub extensions: Value,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`HeartbeatWorker`]: `{"status": "OK", "time",
/// "heartbeat-interval"}` (seconds), or `{"status": "missing"}` when the
/// scheduler does not know the worker (it should then close).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// `"OK"` or `"missing"`.
    pub status: String,
    /// The scheduler's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
    /// Seconds until the next heartbeat (as in [`RegisterWorkerReply`]).
    #[serde(
        rename = "heartbeat-interval",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat_interval: Option<Number>,
}

/// `gather` to the scheduler: the values of these keys (`Client.gather`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherKeys {
    /// `"gather"`.
    pub op: Op<GatherKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`GatherKeys`]: `{"status": "OK", "data": {key: value}}`, or
/// `{"status": "error", "keys": [...]}` (not Dask's error-reply shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherKeysReply {
    /// `"OK"` or `"error"`.
    pub status: String,
    /// The values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<Key, Value>>,
    /// The keys that could not be gathered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<Key>>,
}

/// `scatter` to the scheduler: place these values on workers; the reply is
/// the list of keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scatter {
    /// `"scatter"`.
    pub op: Op<Scatter>,
    /// The values, as blocks.
    pub data: Map<Key, Value>,
    /// Where (nil: anywhere).
    pub workers: Option<Vec<String>>,
    /// The client's id.
    pub client: String,
    /// To every worker.
    pub broadcast: bool,
    /// Seconds (an int or a float: `Client.scatter` sends the int `30`).
    pub timeout: Number,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// `update_data` to the scheduler: these keys now live on these workers
/// (after a direct scatter); the reply is nil.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateWhoHas {
    /// `"update_data"`.
    pub op: Op<UpdateWhoHas>,
    /// For each key, the workers that hold it.
    pub who_has: Map<Key, Vec<String>>,
    /// For each key, its size.
    pub nbytes: Map<Key, u64>,
    /// The client's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

// ---- scheduler → client (the client's batched stream) ------------------------

/// `stream-start`: the first message on a client's stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamStart {
    /// `"stream-start"`.
    pub op: Op<StreamStart>,
    /// A version mismatch warning (`""` when none).
    #[serde(default)]
    pub warning: String,
    /// An error (`""` when none).
    #[serde(default)]
    pub error: String,
}

/// `task-erred` to a client (a shape of its own): the worker's exception
/// and traceback blocks, passed through.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientTaskErred {
    /// `"task-erred"`.
    pub op: Op<ClientTaskErred>,
    /// The task.
    pub key: Key,
    /// The pickled exception.
    pub exception: Value,
    /// The pickled traceback (`Some(Value::Nil)` for a nil one); `None`
    /// writes no key, as the scheduler does when an actor's worker is lost
    /// (`scheduler.py:2977`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub traceback: Option<Value>,
}

/// `key-in-memory`: a key the client wants is in memory
/// (`scheduler.py:3475`, `_task_to_report_msg`, `update_data`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyInMemory {
    /// `"key-in-memory"`.
    pub op: Op<KeyInMemory>,
    /// The key.
    pub key: Key,
    /// `pickle.dumps(type(result))`, inline, when a task finished; absent
    /// when the client asked about the key or scattered it; `Some(None)`
    /// for a nil.
    #[serde(
        rename = "type",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub type_: Option<Option<Bin>>,
    /// The workers that hold it, after an `update_data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<String>>,
}

/// `lost-data`: the last copy of a key is gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LostData {
    /// `"lost-data"`.
    pub op: Op<LostData>,
    /// The key.
    pub key: Key,
}

/// `cancelled-keys`: these keys are cancelled (or forgotten).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelledKeys {
    /// `"cancelled-keys"`.
    pub op: Op<CancelledKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Why (`"lost dependencies"`, `"already forgotten"`, the client's
    /// reason); absent from `report-key`'s answer, `Some(None)` for a nil.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub reason: Option<Option<String>>,
    /// The client's message with a `cancel-keys`; `Some(None)` for a nil.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub msg: Option<Option<String>>,
}

/// `task-retried`: an erred task is being retried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRetried {
    /// `"task-retried"`.
    pub op: Op<TaskRetried>,
    /// The key.
    pub key: Key,
}

/// `restart`: the scheduler restarted; every future is cancelled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// `"restart"`.
    pub op: Op<Restart>,
}

/// `error`: a scheduler exception the client logs (`Client._handle_error`;
/// 2026.8.0's scheduler sends none itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulerError {
    /// `"error"`.
    pub op: Op<SchedulerError>,
    /// The exception.
    #[serde(default)]
    pub exception: Value,
}

/// `event`: an event on a topic the client subscribed to
/// (`broker.py:79`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `"event"`.
    pub op: Op<Event>,
    /// The topic.
    pub topic: String,
    /// `(time, msg)`: the event as logged.
    pub event: Value,
}

/// `adjust-heartbeat-interval`: heartbeat every `interval` seconds
/// (the answer to `heartbeat-client`, `scheduler.py:5845`; 2024.12.1 sends
/// none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdjustHeartbeatInterval {
    /// `"adjust-heartbeat-interval"`.
    pub op: Op<AdjustHeartbeatInterval>,
    /// Seconds (ten times the workers' interval: a float, or an int).
    pub interval: Number,
}

// ---- client → scheduler (the client's batched stream) ------------------------

/// `register-client`: the first message of a client's stream
/// (`Client._ensure_connected`, `client.py:1570`); `Scheduler.add_client`
/// answers on the stream with [`StreamStart`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterClient {
    /// `"register-client"`.
    pub op: Op<RegisterClient>,
    /// The client's id (`"Client-<uuid>"`).
    pub client: String,
    /// False: the scheduler answers on the stream.
    pub reply: bool,
    /// `{"host": {...}, "packages": {...}}` (`get_versions()`).
    pub versions: Value,
}

impl RegisterClient {
    /// Register `client`, with these versions (see
    /// [`versions_like_scheduler`](super::versions_like_scheduler)).
    pub fn new(client: impl Into<String>, versions: Value) -> RegisterClient {
        RegisterClient {
            op: Op::new(),
            client: client.into(),
            reply: false,
            versions,
        }
    }
}

/// `update-graph`: compute these keys (`Client._graph_to_futures`,
/// `client.py:3440`). The graph is Python (a pickled expression) and stays
/// an opaque block: framewire never unpickles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateGraph {
    /// `"update-graph"`.
    pub op: Op<UpdateGraph>,
    /// The pickled expression (`Serialized`), 2025.5.1 and later: a
    /// `{"__Serialized__": i}` block, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr_ser: Option<Value>,
    /// 2024.12.1: the graph's serialization header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_header: Option<Value>,
    /// 2024.12.1: the graph's pickled frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_frames: Option<Value>,
    /// The keys wanted (a set).
    pub keys: Keys,
    /// Each key's place in the graph's order, or nil.
    pub internal_priority: Option<Map<Key, i64>>,
    /// The task that submitted the graph (from inside a task), or nil.
    pub submitting_task: Option<Key>,
    /// How long a batch counts as one submission (`"100 ms"`, `"60s"`, or
    /// seconds).
    pub fifo_timeout: Timedelta,
    /// Whether the tasks are actors (a bool, a list of keys, or nil).
    pub actors: Value,
    /// The submitting code (`ToPickle`): a `{"__Pickled__": i}` block.
    pub code: Block,
    /// The annotations (`ToPickle`).
    pub annotations: Block,
    /// The span metadata (`ToPickle`).
    pub span_metadata: Block,
}

/// `client-desires-keys`: keep these keys for me (`client.py:3368`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientDesiresKeys {
    /// `"client-desires-keys"`.
    pub op: Op<ClientDesiresKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// The client's id (the scheduler fills it in from the stream when
    /// absent, as `Client` sends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// `report-key`: tell me where this key stands (answered with
/// `key-in-memory`, `task-erred` or `cancelled-keys`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportKey {
    /// `"report-key"`.
    pub op: Op<ReportKey>,
    /// The key.
    pub key: Key,
}

/// `client-releases-keys`: the client no longer needs these keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientReleasesKeys {
    /// `"client-releases-keys"`.
    pub op: Op<ClientReleasesKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// The client's id.
    pub client: String,
}

/// `heartbeat-client`: the client is alive (answered with
/// [`AdjustHeartbeatInterval`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatClient {
    /// `"heartbeat-client"`.
    pub op: Op<HeartbeatClient>,
}

/// `close-client`: the client leaves (followed by `close-stream`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CloseClient {
    /// `"close-client"`.
    pub op: Op<CloseClient>,
}

/// `subscribe-topic`: send me the events of this topic (as [`Event`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscribeTopic {
    /// `"subscribe-topic"`.
    pub op: Op<SubscribeTopic>,
    /// The topic (`Client` subscribes to `"print"` and `"warn"`).
    pub topic: String,
    /// The client's id.
    pub client: String,
}

/// `unsubscribe-topic`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnsubscribeTopic {
    /// `"unsubscribe-topic"`.
    pub op: Op<UnsubscribeTopic>,
    /// The topic.
    pub topic: String,
    /// The client's id.
    pub client: String,
}

/// `cancel-keys`: cancel these keys (`Client._cancel`, `client.py:2788`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelKeys {
    /// `"cancel-keys"`.
    pub op: Op<CancelKeys>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Cancel even if other clients want them.
    pub force: bool,
    /// Why, or nil.
    pub reason: Option<String>,
    /// A message for the futures, or nil.
    pub msg: Option<String>,
}

// ---- requests a client makes of the scheduler (RPC) --------------------------

/// `who_has`: the workers that hold these keys (all keys when nil); the
/// reply is a [`WhoHasReply`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhoHas {
    /// `"who_has"`.
    pub op: Op<WhoHas>,
    /// The keys, or nil for all.
    pub keys: Option<Vec<Key>>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`WhoHas`]: for each key, the workers that hold it (`[]`
/// for a key the scheduler does not know).
pub type WhoHasReply = Map<Key, Vec<String>>;

/// `has_what`: the keys these workers hold (all workers when nil); the
/// reply is a [`HasWhatReply`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HasWhat {
    /// `"has_what"`.
    pub op: Op<HasWhat>,
    /// The workers' addresses, or nil for all.
    pub workers: Option<Vec<String>>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`HasWhat`]: for each worker, the keys it holds.
pub type HasWhatReply = Map<String, Vec<Key>>;

/// `ncores`: the threads of these workers (all when nil); the reply is an
/// [`NcoresReply`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ncores {
    /// `"ncores"`.
    pub op: Op<Ncores>,
    /// The workers' addresses, or nil for all.
    pub workers: Option<Vec<String>>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`Ncores`] and [`NcoresRunning`]: for each worker, its
/// threads.
pub type NcoresReply = Map<String, u32>;

/// `ncores_running`: as [`Ncores`], the running workers only
/// (`Client.scatter` asks it first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcoresRunning {
    /// `"ncores_running"`.
    pub op: Op<NcoresRunning>,
    /// The workers' addresses, or nil for all.
    pub workers: Option<Vec<String>>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// `broadcast`: send `msg` to these workers (all when nil) or their
/// nannies, and answer each one's reply by address (`Client.run` sends a
/// [`Run`]); with `on_error: "return_pickle"` a worker that failed answers
/// the pickled exception instead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Broadcast {
    /// `"broadcast"`.
    pub op: Op<Broadcast>,
    /// The request to send (read by op, [`Other`](super::WorkerRequest::Other)
    /// for an op framewire does not type).
    pub msg: super::WorkerRequest,
    /// The workers' addresses, or nil for all.
    pub workers: Option<Vec<String>>,
    /// To the workers' nannies instead.
    pub nanny: bool,
    /// `"raise"`, `"return"`, `"return_pickle"` or `"ignore"`.
    pub on_error: String,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

impl Broadcast {
    /// `msg` to every worker, errors returned pickled (as `Client.run`).
    pub fn new(msg: impl Into<super::WorkerRequest>) -> Broadcast {
        Broadcast {
            op: Op::new(),
            msg: msg.into(),
            workers: None,
            nanny: false,
            on_error: "return_pickle".into(),
            reply: None,
        }
    }
}

/// The reply to a [`Broadcast`] of a [`Run`]: each worker's [`RunReply`],
/// by address.
pub type BroadcastReply = Map<String, RunReply>;

/// `retire_workers`: move the data off these workers and remove them; the
/// reply is a [`RetireWorkersReply`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RetireWorkers {
    /// `"retire_workers"`.
    pub op: Op<RetireWorkers>,
    /// The workers' addresses (absent when `names` says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<String>>,
    /// The workers' names instead of addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<Value>>,
    /// Close the workers (and their nannies) too.
    pub close_workers: bool,
    /// Forget the workers once retired (the scheduler's default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<bool>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stimulus_id: Option<String>,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`RetireWorkers`]: each retired worker as the scheduler
/// saw it.
pub type RetireWorkersReply = Map<String, WorkerInfo>;

/// `replicate`: keep `n` copies of these keys (all workers when nil); the
/// reply is nil.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replicate {
    /// `"replicate"`.
    pub op: Op<Replicate>,
    /// The keys.
    pub keys: Vec<Key>,
    /// Copies wanted, or nil for one per worker.
    pub n: Option<u32>,
    /// Among these workers, or nil for all.
    pub workers: Option<Vec<String>>,
    /// Copies each holder sends per round (`2`).
    pub branching_factor: u32,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

impl Replicate {
    /// `n` copies of `keys` (nil: on every worker), as `Client.replicate`.
    pub fn new(keys: Vec<Key>, n: Option<u32>) -> Replicate {
        Replicate {
            op: Op::new(),
            keys,
            n,
            workers: None,
            branching_factor: 2,
            reply: None,
        }
    }
}

/// `amm_handler`: call a method of the Active Memory Manager
/// (`"start"`, `"stop"`, `"run_once"`, `"running"`); the reply is what it
/// returns (nil, or a bool for `"running"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AmmHandler {
    /// `"amm_handler"`.
    pub op: Op<AmmHandler>,
    /// The method.
    pub method: String,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

impl AmmHandler {
    /// Call `method`.
    pub fn new(method: impl Into<String>) -> AmmHandler {
        AmmHandler {
            op: Op::new(),
            method: method.into(),
            reply: None,
        }
    }
}

/// The scheduler's answer to `identity` (`Scheduler.identity`,
/// `scheduler.py:4280`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulerIdentity {
    /// `"Scheduler"`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `"Scheduler-<uuid>"`.
    pub id: String,
    /// The scheduler's address.
    pub address: String,
    /// Its services' ports (`{"dashboard": 8787}`).
    pub services: Map<String, u64>,
    /// When it started, seconds since the epoch.
    pub started: f64,
    /// Workers connected (2025.5.1 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_workers: Option<u64>,
    /// Threads over all workers (2025.5.1 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_threads: Option<u64>,
    /// Memory limit over all workers, bytes (2025.5.1 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_memory: Option<u64>,
    /// The first `n_workers` workers, by address.
    pub workers: Map<String, WorkerInfo>,
}

/// A worker as the scheduler sees it (`WorkerState.identity`,
/// `scheduler.py:689`): in [`SchedulerIdentity`] and the
/// [`RetireWorkersReply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// `"Worker"`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its name (a str, or an int).
    pub id: Value,
    /// Its host.
    pub host: String,
    /// Resources it offers (ints or floats).
    pub resources: Map<String, Number>,
    /// Its scratch directory.
    pub local_directory: String,
    /// Its name (a str, or an int).
    pub name: Value,
    /// Threads.
    pub nthreads: u32,
    /// Bytes (0: none), or nil.
    pub memory_limit: Option<u64>,
    /// The scheduler's clock at its last heartbeat.
    pub last_seen: f64,
    /// Services (`{"dashboard": port}`).
    pub services: Map<String, u64>,
    /// Its metrics, as its last heartbeat sent them.
    pub metrics: Value,
    /// Its `Status` name.
    pub status: String,
    /// Its nanny's address, or nil.
    pub nanny: Option<String>,
}

// ---- requests to a worker (RPC), continued ----------------------------------

/// `run`: call a function on the worker (`Client.run`, through the
/// scheduler's [`Broadcast`]); the reply is a [`RunReply`]. The function
/// and its arguments are pickled by the caller (cloudpickle), inline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Whether the server closes the connection after replying: written
    /// first by the scheduler's `broadcast`, absent from its `msg`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<bool>,
    /// `"run"`.
    pub op: Op<Run>,
    /// The pickled function.
    pub function: Bin,
    /// The pickled positional arguments (a tuple).
    pub args: Bin,
    /// Await the result when it is a coroutine.
    pub wait: bool,
    /// The pickled keyword arguments (a dict).
    pub kwargs: Bin,
    /// Always true; set by [`Rpc`](super::Rpc).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::reply_flag"
    )]
    pub reply: Option<bool>,
}

/// The reply to [`Run`]: `{"status": "OK", "result": <block>}`, or Dask's
/// error reply (`status: "error"`, the exception and texts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReply {
    /// `"OK"` or `"error"`.
    pub status: String,
    /// The result (`to_serialize`: a block pass-through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The pickled exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<Value>,
    /// The pickled traceback (`Some(Value::Nil)` for a nil one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub traceback: Option<Value>,
    /// `repr` of the exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception_text: Option<String>,
    /// The formatted traceback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback_text: Option<String>,
}

// ---- the worker's stream, continued ------------------------------------------

/// `remove-worker` (scheduler → worker): the scheduler removed this worker
/// (`retire_workers`); it closes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoveWorker {
    /// `"remove-worker"`.
    pub op: Op<RemoveWorker>,
    /// The worker's address.
    pub worker: String,
    /// Why.
    pub stimulus_id: String,
}

/// `log-event` (worker → scheduler): log `msg` under `topic`
/// (`Worker.log_event`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEvent {
    /// `"log-event"`.
    pub op: Op<LogEvent>,
    /// A topic, or a list of topics.
    pub topic: Value,
    /// The event (any msgpack value; a map usually).
    pub msg: Value,
}

// ---- constructors: a request names what it sets, the rest as Dask's callers
// send it ------------------------------------------------------------------------

impl GetData {
    /// The values of `keys` (as a client asks: a list, `who` nil).
    pub fn new(keys: impl IntoIterator<Item = Key>) -> GetData {
        GetData {
            op: Op::new(),
            keys: Keys::List(keys.into_iter().collect()),
            who: None,
            reply: None,
        }
    }
}

impl UpdateData {
    /// Hold these values (blocks, or values framewire serializes).
    pub fn new(data: Map<Key, Value>) -> UpdateData {
        UpdateData {
            op: Op::new(),
            data,
            stimulus_id: None,
            reply: None,
        }
    }
}

impl Gather {
    /// Fetch these keys from the workers that hold them.
    pub fn new(who_has: Map<Key, Vec<String>>) -> Gather {
        Gather {
            op: Op::new(),
            who_has,
            reply: None,
        }
    }
}

impl GatherKeys {
    /// The values of `keys`, gathered by the scheduler.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> GatherKeys {
        GatherKeys {
            op: Op::new(),
            keys: keys.into_iter().collect(),
            reply: None,
        }
    }
}

impl Scatter {
    /// Place these values on any workers, for `client`, with
    /// `Client.scatter`'s timeout (the int `30`).
    pub fn new(data: Map<Key, Value>, client: impl Into<String>) -> Scatter {
        Scatter {
            op: Op::new(),
            data,
            workers: None,
            client: client.into(),
            broadcast: false,
            timeout: Number::Int(30),
            reply: None,
        }
    }
}

impl UpdateWhoHas {
    /// These keys, of these sizes, now live on these workers (for
    /// `client`, which then holds a reference to them).
    pub fn new(
        who_has: Map<Key, Vec<String>>,
        nbytes: Map<Key, u64>,
        client: Option<String>,
    ) -> UpdateWhoHas {
        UpdateWhoHas {
            op: Op::new(),
            who_has,
            nbytes,
            client,
            reply: None,
        }
    }
}

impl WhoHas {
    /// The workers that hold `keys`.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> WhoHas {
        WhoHas {
            keys: Some(keys.into_iter().collect()),
            ..WhoHas::default()
        }
    }
}

impl RetireWorkers {
    /// Retire these workers and close them (`Client.retire_workers`).
    pub fn new(workers: impl IntoIterator<Item = String>) -> RetireWorkers {
        RetireWorkers {
            workers: Some(workers.into_iter().collect()),
            close_workers: true,
            ..RetireWorkers::default()
        }
    }
}

impl Run {
    /// Call the pickled `function` with the pickled `args` (a tuple) and
    /// `kwargs` (a dict), awaiting a coroutine's result.
    pub fn new(function: impl Into<Bin>, args: impl Into<Bin>, kwargs: impl Into<Bin>) -> Run {
        Run {
            close: None,
            op: Op::new(),
            function: function.into(),
            args: args.into(),
            wait: true,
            kwargs: kwargs.into(),
            reply: None,
        }
    }
}

impl ClientDesiresKeys {
    /// Keep `keys` for the client on this stream.
    pub fn new(keys: impl IntoIterator<Item = Key>) -> ClientDesiresKeys {
        ClientDesiresKeys {
            op: Op::new(),
            keys: keys.into_iter().collect(),
            client: None,
        }
    }
}

impl ClientReleasesKeys {
    /// `client` no longer needs `keys`.
    pub fn new(
        keys: impl IntoIterator<Item = Key>,
        client: impl Into<String>,
    ) -> ClientReleasesKeys {
        ClientReleasesKeys {
            op: Op::new(),
            keys: keys.into_iter().collect(),
            client: client.into(),
        }
    }
}

impl ReportKey {
    /// Where does `key` stand.
    pub fn new(key: Key) -> ReportKey {
        ReportKey { op: Op::new(), key }
    }
}

impl SubscribeTopic {
    /// Send `client` the events of `topic`.
    pub fn new(topic: impl Into<String>, client: impl Into<String>) -> SubscribeTopic {
        SubscribeTopic {
            op: Op::new(),
            topic: topic.into(),
            client: client.into(),
        }
    }
}

impl CancelKeys {
    /// Cancel `keys` (not forced, no reason).
    pub fn new(keys: impl IntoIterator<Item = Key>) -> CancelKeys {
        CancelKeys {
            op: Op::new(),
            keys: keys.into_iter().collect(),
            force: false,
            reason: None,
            msg: None,
        }
    }
}
