//! The Dask conversations (feature `dask`): the messages of `distributed`
//! 2026.8.0 as Rust types, one enum per channel, and the sessions they are
//! exchanged in — RPC calls ([`Rpc`]) and batched streams
//! ([`BatchedReader`], [`BatchedWriter`]).
//!
//! ```text
//! channel                         enum                 Dask's handler table
//! scheduler → worker stream       SchedulerToWorker    worker.py stream_handlers
//! worker → scheduler stream       WorkerToScheduler    scheduler.py worker_handlers (+ steal-response)
//! requests to a worker (RPC)      WorkerRequest        worker.py handlers
//! requests to the scheduler       SchedulerRequest     scheduler.py handlers
//! scheduler → client stream       SchedulerToClient    client.py _stream_handlers
//! client → scheduler stream       ClientToScheduler    scheduler.py client_handlers
//! ```
//!
//! Every enum has a variant per op it knows and [`Other`](WorkerToScheduler::Other),
//! which holds any other message whole, so unknown ops pass through
//! untouched. Field and op names are the 2026.8.0 source's (the repository's
//! `tests/dask/ops-2026.8.0.md` gives the line of each); every type is
//! tested against real captures of a scheduler, workers and a client
//! (`tests/captures/conversation/`).
//!
//! ```
//! use framewire::dask::{Key, SchedulerToWorker, StealRequest, Op};
//!
//! let msg = SchedulerToWorker::StealRequest(StealRequest {
//!     op: Op::new(),
//!     key: Key::from(("slow", 3)),
//!     stimulus_id: "steal-3".into(),
//! });
//! let v = framewire::to_value(&msg)?;
//! assert_eq!(v.get("op").and_then(framewire::Value::as_str), Some("steal-request"));
//! assert_eq!(framewire::from_value::<SchedulerToWorker>(v)?, msg);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batched;
mod client;
mod key;
mod messages;
mod op;
mod pool;
mod rpc;
pub mod runtime;
mod server;
mod store;
mod worker;

use serde::{Deserialize, Serialize};

use crate::value::Value;

pub use batched::{BatchedReader, BatchedWriter, DEFAULT_BATCH_INTERVAL};
pub use client::{Client, ClientError, ClientOptions};
pub use key::Key;
pub use messages::*;
pub use op::{Op, OpName};
pub use pool::{ConnectionPool, Pooled, DEFAULT_CONNECTION_LIMIT, DEFAULT_IDLE_PER_ADDRESS};
pub use rpc::{RemoteError, Rpc, RpcError};
pub use server::{BadRequest, RequestError, Requests};
pub use store::{gather_from_pool, gather_from_workers, nbytes, DataStore, Gathered};
pub use worker::{
    register_worker, versions_like_scheduler, Bandwidth, HeartbeatError, Heartbeats, SpilledBytes,
    WorkerIdentity, WorkerMetrics, WorkerStream,
};

/// A map that keeps its entries in the order they came (Dask's dicts do):
/// `indexmap::IndexMap`.
pub type Map<K, V> = indexmap::IndexMap<K, V>;

/// A collection of keys: a list, or the `{"__Set__": true, "as-list": [...]}`
/// a Python `set` becomes (a worker fetching dependencies sends one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// A list (or tuple).
    List(Vec<Key>),
    /// A set.
    Set(Vec<Key>),
}

impl Keys {
    /// The keys, whatever the form.
    pub fn keys(&self) -> &[Key] {
        match self {
            Keys::List(k) | Keys::Set(k) => k,
        }
    }
}

/// The wire form of a Python set.
#[derive(Serialize, Deserialize)]
struct SetForm {
    #[serde(rename = "__Set__")]
    set: bool,
    #[serde(rename = "as-list")]
    as_list: Vec<Key>,
}

impl Serialize for Keys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Keys::List(k) => k.serialize(s),
            Keys::Set(k) => SetForm {
                set: true,
                as_list: k.clone(),
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            List(Vec<Key>),
            Set(SetForm),
        }
        Ok(match Form::deserialize(d)? {
            Form::List(k) => Keys::List(k),
            Form::Set(s) => Keys::Set(s.as_list),
        })
    }
}

/// What a task spent its time on: `{"action", "start", "stop"[, "source"]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StartStop {
    /// `"compute"`, `"transfer"`, `"disk-read"`...
    pub action: String,
    /// Seconds since the epoch.
    pub start: f64,
    /// Seconds since the epoch.
    pub stop: f64,
    /// Where a transfer came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Dask's error reply (`distributed.core.error_message`): a handler raised
/// (`"uncaught-error"`) or reported an error (`"error"`). `exception` and
/// `traceback` are pickled (a block, or its bytes once deserialized);
/// framewire reads the texts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// `"error"` or `"uncaught-error"`.
    pub status: String,
    /// The pickled exception.
    #[serde(default)]
    pub exception: Value,
    /// The pickled traceback, or nil.
    #[serde(default)]
    pub traceback: Value,
    /// `repr` of the exception.
    #[serde(default)]
    pub exception_text: String,
    /// The formatted traceback.
    #[serde(default)]
    pub traceback_text: String,
}

/// The op of a message map, if it has one.
pub(crate) fn op_of(v: &Value) -> Option<&str> {
    v.get("op").and_then(Value::as_str)
}

/// A message's `reply` key: absent is `None` (Dask's server replies), and
/// nil reads as `Some(false)`: Dask's `handle_comm` tests the value's truth,
/// so a nil `reply` asks for no reply, which an absent one would not say.
pub(crate) fn reply_flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Some(Option::<bool>::deserialize(d)?.unwrap_or(false)))
}

/// A key that may be absent and may be nil, read as `Some` of what it holds
/// (`Some(None)` or `Some(Value::Nil)` for a nil): with `default` (absent is
/// `None`) and `skip_serializing_if = "Option::is_none"`, a nil is written
/// back as nil and an absent key stays absent.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

macro_rules! channel {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident($ty:ty)),* $(,)? }
    ) => {
        $(#[$meta])*
        // A message is built and moved once; boxing the large ones
        // (`compute-task`, `register-worker`) would only add allocations.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant($ty),)*
            /// Any other message, whole (unknown ops pass through untouched).
            Other(Value),
        }

        impl $name {
            /// The message's op.
            pub fn op(&self) -> Option<&str> {
                match self {
                    $($name::$variant(_) => Some(<$ty as OpName>::NAME),)*
                    $name::Other(v) => op_of(v),
                }
            }

            /// The message read from a map: the type its `op` names, or
            /// [`Other`]($name::Other) for an op this enum does not know.
            /// A known op whose fields are wrong is an error naming the field.
            pub fn from_value(v: Value) -> Result<$name, crate::DecodeError> {
                $(if op_of(&v) == Some(<$ty as OpName>::NAME) {
                    return crate::typed::from_value(v).map($name::$variant);
                })*
                Ok($name::Other(v))
            }
        }

        $(impl From<$ty> for $name {
            fn from(m: $ty) -> $name {
                $name::$variant(m)
            }
        })*

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $($name::$variant(m) => m.serialize(s),)*
                    $name::Other(v) => v.serialize(s),
                }
            }
        }

        /// Read by op: from a framewire conversion, the message is read
        /// straight into the type its op names (or `Other`); from any other
        /// deserializer, as a [`Value`] first.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                const OPS: &[&str] = &[$(<$ty as OpName>::NAME),*];
                struct ByOp;
                impl<'de> serde::de::Visitor<'de> for ByOp {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a message of ", stringify!($name)))
                    }
                    fn visit_enum<A: serde::de::EnumAccess<'de>>(
                        self,
                        data: A,
                    ) -> Result<$name, A::Error> {
                        use serde::de::VariantAccess;
                        let (op, message) = data.variant_seed(crate::typed::OpSeed(OPS))?;
                        $(if op == crate::typed::Dispatch::Known(<$ty as OpName>::NAME) {
                            return message.newtype_variant::<$ty>().map($name::$variant);
                        })*
                        message.newtype_variant::<Value>().map($name::Other)
                    }
                    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
                        self,
                        d: D,
                    ) -> Result<$name, D::Error> {
                        let v = Value::deserialize(d)?;
                        $name::from_value(v).map_err(crate::typed::field_error)
                    }
                }
                d.deserialize_newtype_struct(crate::typed::BY_OP, ByOp)
            }
        }
    };
}

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

channel! {
    /// The requests a worker answers (its RPC handlers).
    pub enum WorkerRequest {
        /// `get_data`.
        GetData(GetData),
        /// `update_data`.
        UpdateData(UpdateData),
        /// `gather`.
        Gather(Gather),
        /// `free_keys`.
        FreeKeys(FreeKeysRpc),
        /// `identity`.
        Identity(Identity),
        /// `run`.
        Run(Run),
        /// `close`.
        Close(Close),
    }
}

channel! {
    /// The requests the scheduler answers (some of its RPC handlers).
    pub enum SchedulerRequest {
        /// `register-worker`.
        RegisterWorker(RegisterWorker),
        /// `heartbeat_worker`.
        HeartbeatWorker(HeartbeatWorker),
        /// `gather`.
        Gather(GatherKeys),
        /// `scatter`.
        Scatter(Scatter),
        /// `update_data`.
        UpdateData(UpdateWhoHas),
        /// `identity`.
        Identity(Identity),
        /// `register-client` (the first message of a client's stream, also
        /// read by [`ClientToScheduler`]).
        RegisterClient(RegisterClient),
        /// `who_has`.
        WhoHas(WhoHas),
        /// `has_what`.
        HasWhat(HasWhat),
        /// `ncores`.
        Ncores(Ncores),
        /// `ncores_running`.
        NcoresRunning(NcoresRunning),
        /// `broadcast`.
        Broadcast(Broadcast),
        /// `retire_workers`.
        RetireWorkers(RetireWorkers),
        /// `replicate`.
        Replicate(Replicate),
        /// `amm_handler`.
        AmmHandler(AmmHandler),
        /// `close`.
        Close(Close),
    }
}

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

channel! {
    /// What a client sends the scheduler on its batched stream
    /// (`register-client` first, then 2026.8.0's `Scheduler.client_handlers`
    /// that `Client` sends, and `close-stream`).
    pub enum ClientToScheduler {
        /// `register-client`.
        RegisterClient(RegisterClient),
        /// `update-graph`.
        UpdateGraph(UpdateGraph),
        /// `client-desires-keys`.
        ClientDesiresKeys(ClientDesiresKeys),
        /// `report-key`.
        ReportKey(ReportKey),
        /// `client-releases-keys`.
        ClientReleasesKeys(ClientReleasesKeys),
        /// `heartbeat-client`.
        HeartbeatClient(HeartbeatClient),
        /// `subscribe-topic`.
        SubscribeTopic(SubscribeTopic),
        /// `unsubscribe-topic`.
        UnsubscribeTopic(UnsubscribeTopic),
        /// `cancel-keys`.
        CancelKeys(CancelKeys),
        /// `close-client`.
        CloseClient(CloseClient),
        /// `close-stream`.
        CloseStream(CloseStream),
    }
}
