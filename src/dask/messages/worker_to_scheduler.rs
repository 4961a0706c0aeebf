//! A worker's batched stream to the scheduler ([`WorkerToScheduler`]):
//! tasks finished or erred, keys added or released, steal responses, events.

use serde::{Deserialize, Serialize};

use super::scheduler_to_worker::{CloseStream, WorkerStatusChange};
use crate::dask::runtime::stimulus_id;
use crate::dask::wire::StartStop;
use crate::dask::{Key, Op};
use crate::typed::Bin;
use crate::value::Value;

channel! {
    /// What a worker sends the scheduler on its batched stream.
    pub enum WorkerToScheduler {
        /// `task-finished`.
        TaskFinished(TaskFinished),
        /// `task-erred`.
        TaskErred(TaskErred),
        /// `release-worker-data`.
        ReleaseWorkerData(ReleaseWorkerData),
        /// `add-keys`.
        AddKeys(AddKeys),
        /// `reschedule`.
        Reschedule(Reschedule),
        /// `steal-response`.
        StealResponse(StealResponse),
        /// `log-event`.
        LogEvent(LogEvent),
        /// `worker-status-change`.
        WorkerStatusChange(WorkerStatusChange),
        /// `keep-alive`.
        KeepAlive(KeepAlive),
        /// `close-stream`.
        CloseStream(CloseStream),
    }
}

op_names! {
    TaskFinished => "task-finished",
    TaskErred => "task-erred",
    ReleaseWorkerData => "release-worker-data",
    AddKeys => "add-keys",
    Reschedule => "reschedule",
    StealResponse => "steal-response",
    KeepAlive => "keep-alive",
    LogEvent => "log-event",
}

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

impl ReleaseWorkerData {
    /// `key` is gone from the worker.
    pub fn new(key: Key, stimulus_id: String) -> ReleaseWorkerData {
        ReleaseWorkerData {
            key,
            op: Op::new(),
            stimulus_id,
        }
    }
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

impl AddKeys {
    /// The worker now holds `keys`.
    pub fn new(keys: Vec<Key>, stimulus_id: String) -> AddKeys {
        AddKeys {
            keys,
            op: Op::new(),
            stimulus_id,
        }
    }
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

impl Reschedule {
    /// Give `key` back to the scheduler, with a fresh `stimulus_id`.
    pub fn new(key: Key) -> Reschedule {
        Reschedule {
            key,
            op: Op::new(),
            stimulus_id: stimulus_id("reschedule"),
        }
    }
}

/// `steal-response`: the answer to a [`StealRequest`](super::StealRequest), with its
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

/// `keep-alive`: every 60 s on a worker's stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepAlive {
    /// `"keep-alive"`.
    pub op: Op<KeepAlive>,
}
