//! The scheduler's batched stream to a worker ([`SchedulerToWorker`]): the
//! tasks it runs, the keys it drops or fetches, steal requests, `close`.

use serde::{Deserialize, Serialize};

use crate::dask::runtime::stimulus_id;
use crate::dask::wire::{Map, Number};
use crate::dask::{Key, Op};
use crate::value::{Block, Value};

channel! {
    /// What the scheduler sends a worker on its batched stream.
    pub enum SchedulerToWorker {
        /// `compute-task`.
        ComputeTask(ComputeTask),
        /// `free-keys`.
        FreeKeys(FreeKeys),
        /// `acquire-replicas`.
        AcquireReplicas(AcquireReplicas),
        /// `remove-replicas`.
        RemoveReplicas(RemoveReplicas),
        /// `steal-request`.
        StealRequest(StealRequest),
        /// `remove-worker`.
        RemoveWorker(RemoveWorker),
        /// `worker-status-change`.
        WorkerStatusChange(WorkerStatusChange),
        /// `close`.
        Close(Close),
        /// `close-stream`.
        CloseStream(CloseStream),
    }
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
    RemoveWorker => "remove-worker",
}

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

/// `free-keys` (stream) and, with [`FreeKeysRpc`](super::FreeKeysRpc), `free_keys` (RPC): drop
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
/// (`stealing.py:333`); answered with [`StealResponse`](super::StealResponse) and the same
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

impl WorkerStatusChange {
    /// The worker's status is now `status` (a `Status` name), with a fresh
    /// `stimulus_id`.
    pub fn new(status: &str) -> WorkerStatusChange {
        WorkerStatusChange {
            op: Op::new(),
            status: status.to_owned(),
            stimulus_id: stimulus_id("worker-status-change"),
        }
    }
}

request! {
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
    }
    /// Whether the server answers `"OK"` (RPC form).
    reply
}

/// `close-stream`: the end of a batched stream, either way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CloseStream {
    /// `"close-stream"`.
    pub op: Op<CloseStream>,
}
