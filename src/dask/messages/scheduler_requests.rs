//! The requests the scheduler answers ([`SchedulerRequest`]), and a
//! worker's of them with their replies: `register-worker`,
//! `heartbeat_worker`; the scheduler's `identity` (a client's requests are
//! in `client_requests.rs`).

use serde::{Deserialize, Serialize};

use super::client_requests::{
    AmmHandler, Broadcast, GatherKeys, HasWhat, Ncores, NcoresRunning, Replicate, RetireWorkers,
    Scatter, UpdateWhoHas, WhoHas, WorkerInfo,
};
use super::client_to_scheduler::RegisterClient;
use super::scheduler_to_worker::Close;
use super::worker_requests::Identity;
use crate::dask::runtime::{now, server_id, stimulus_id};
use crate::dask::wire::{Map, Number};
use crate::dask::{Key, Op, WorkerMetrics};
use crate::typed::Bin;
use crate::value::Value;

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
        /// read by [`ClientToScheduler`](super::ClientToScheduler)).
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

op_names! {
    RegisterWorker => "register-worker",
    HeartbeatWorker => "heartbeat_worker",
}

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

impl RegisterWorker {
    /// A `register-worker` the 2026.8.0 scheduler accepts, for a worker
    /// reached at `address` (`tcp://host:port`): status `"init"` (send
    /// `worker-status-change` `"running"` once registered, as Dask's worker
    /// does), no resources, services or nanny, empty `versions` and
    /// `extra`, [`WorkerMetrics::new(0)`](WorkerMetrics::new), a fresh
    /// `server_id`.
    pub fn new(
        address: &str,
        name: Value,
        nthreads: u32,
        memory_limit: Option<u64>,
    ) -> RegisterWorker {
        RegisterWorker {
            op: Op::new(),
            reply: false,
            address: address.to_owned(),
            status: "init".to_owned(),
            nthreads,
            name,
            now: now(),
            resources: Map::default(),
            memory_limit,
            local_directory: std::env::temp_dir().display().to_string(),
            services: Map::default(),
            nanny: None,
            pid: std::process::id(),
            versions: Value::Map(Vec::new()),
            metrics: WorkerMetrics::new(0).to_value(),
            extra: Value::Map(Vec::new()),
            stimulus_id: stimulus_id("worker-connect"),
            server_id: server_id("Worker"),
        }
    }
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

request! {
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
    }
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
