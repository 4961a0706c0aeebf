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
//! ```text
//! mod.rs           this map, the public names
//! wire.rs          what every channel shares: Map, Keys, Number, Timedelta,
//!                  StartStop, ErrorReply; op_of and the serde helpers
//! messages/        a file per channel: its enum, then its messages, each
//!                  with its op name and constructor
//!   mod.rs                   the channel!, op_names! and request! macros
//!   scheduler_to_worker.rs   SchedulerToWorker: compute-task, free-keys, close…
//!   worker_to_scheduler.rs   WorkerToScheduler: task-finished, add-keys…
//!   worker_requests.rs       WorkerRequest: get_data, update_data, gather, run…
//!   scheduler_requests.rs    SchedulerRequest, and a worker's requests of it:
//!                            register-worker, heartbeat_worker; identity
//!   client_requests.rs       a client's SchedulerRequests: gather, scatter,
//!                            who_has, broadcast, retire_workers…
//!   scheduler_to_client.rs   SchedulerToClient: key-in-memory, lost-data…
//!   client_to_scheduler.rs   ClientToScheduler: register-client, update-graph…
//! key.rs           Key: a str, int, float or tuple of keys
//! op.rs            Op<M>, OpName: the op field, written and checked by type
//! rpc.rs           Rpc: request/reply calls; RpcError, RemoteError
//! batched.rs       BatchedReader, BatchedWriter: batched streams
//! server.rs        Requests: the server side of an RPC connection
//! pool.rs          ConnectionPool: connections to workers kept open
//! store.rs         DataStore, gather_from_workers: a worker's data
//! worker.rs        register_worker, Heartbeats, WorkerMetrics: joining as a worker
//! client/          Client: a Rust program as a client of a cluster
//! task.rs          Call, Arg: tasks to compute; the graph pickles per release
//! runtime.rs       clock, server and stimulus ids, memory, as Dask computes them
//! ```
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
mod task;
mod wire;
mod worker;

pub use crate::pickle::{PyException, PyFunction, PyFunctionError};
pub use batched::{BatchedReader, BatchedWriter, DEFAULT_BATCH_INTERVAL};
pub use client::{
    Client, ClientError, ClientOptions, GatherError, KeyFailure, TaskError, TopicEvent, TopicEvents,
};
pub use client::{
    Dataset, Lock, Queue, Semaphore, SharedEvent, Variable, VariableValue, DEFAULT_LEASE_TIMEOUT,
};
pub use key::Key;
pub use messages::*;
pub use op::{Op, OpName};
pub use pool::{ConnectionPool, Pooled, DEFAULT_CONNECTION_LIMIT, DEFAULT_IDLE_PER_ADDRESS};
pub use rpc::{RemoteError, Rpc, RpcCause, RpcError};
pub use server::{BadRequest, RequestError, Requests};
pub use store::{gather_from_pool, gather_from_workers, nbytes, DataStore, Gathered, Transfer};
pub use task::{Arg, Call};
pub use wire::{ErrorReply, Keys, Map, Number, StartStop, Timedelta};
pub use worker::{
    register_worker, versions_like_scheduler, Bandwidth, HeartbeatError, Heartbeats, SpilledBytes,
    WorkerIdentity, WorkerMetrics, WorkerStream,
};
