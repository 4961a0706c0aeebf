//! The scheduler's batched stream to a client ([`SchedulerToClient`]): keys
//! in memory, lost, cancelled or erred, events.

use serde::{Deserialize, Serialize};

use crate::dask::wire::Number;
use crate::dask::{Key, Op};
use crate::typed::Bin;
use crate::value::Value;

channel! {
    /// What the scheduler sends a client on its batched stream (2026.8.0's
    /// `Client._stream_handlers`, and `stream-start`).
    pub enum SchedulerToClient {
        /// `stream-start`.
        StreamStart(StreamStart),
        /// `key-in-memory`.
        KeyInMemory(KeyInMemory),
        /// `lost-data`.
        LostData(LostData),
        /// `cancelled-keys`.
        CancelledKeys(CancelledKeys),
        /// `task-retried`.
        TaskRetried(TaskRetried),
        /// `task-erred`.
        TaskErred(ClientTaskErred),
        /// `restart`.
        Restart(Restart),
        /// `error`.
        Error(SchedulerError),
        /// `event`.
        Event(Event),
        /// `adjust-heartbeat-interval`.
        AdjustHeartbeatInterval(AdjustHeartbeatInterval),
    }
}

op_names! {
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
}

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
        deserialize_with = "crate::dask::wire::present"
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
        deserialize_with = "crate::dask::wire::present"
    )]
    pub reason: Option<Option<String>>,
    /// The client's message with a `cancel-keys`; `Some(None)` for a nil.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::dask::wire::present"
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
        deserialize_with = "crate::dask::wire::present"
    )]
    pub traceback: Option<Value>,
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
