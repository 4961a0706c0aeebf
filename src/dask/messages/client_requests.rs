//! The requests a client makes of the scheduler, of the
//! [`SchedulerRequest`](super::SchedulerRequest) channel (its file has the
//! enum and a worker's requests), and their
//! replies: `gather`, `scatter`, `update_data`, `who_has`, `has_what`,
//! `ncores`, `broadcast`, `retire_workers`, `replicate`, `amm_handler`.

use serde::{Deserialize, Serialize};

use super::worker_requests::{RunReply, WorkerRequest};
use crate::dask::wire::{Map, Number};
use crate::dask::{Key, Op};
use crate::value::Value;

op_names! {
    GatherKeys => "gather",
    Scatter => "scatter",
    UpdateWhoHas => "update_data",
    WhoHas => "who_has",
    HasWhat => "has_what",
    Ncores => "ncores",
    NcoresRunning => "ncores_running",
    Broadcast => "broadcast",
    RetireWorkers => "retire_workers",
    Replicate => "replicate",
    AmmHandler => "amm_handler",
}

request! {
    /// `gather` to the scheduler: the values of these keys (`Client.gather`).
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct GatherKeys {
        /// `"gather"`.
        pub op: Op<GatherKeys>,
        /// The keys.
        pub keys: Vec<Key>,
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

request! {
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

request! {
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

request! {
    /// `who_has`: the workers that hold these keys (all keys when nil); the
    /// reply is a [`WhoHasReply`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct WhoHas {
        /// `"who_has"`.
        pub op: Op<WhoHas>,
        /// The keys, or nil for all.
        pub keys: Option<Vec<Key>>,
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

/// The reply to [`WhoHas`]: for each key, the workers that hold it (`[]`
/// for a key the scheduler does not know).
pub type WhoHasReply = Map<Key, Vec<String>>;

request! {
    /// `has_what`: the keys these workers hold (all workers when nil); the
    /// reply is a [`HasWhatReply`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct HasWhat {
        /// `"has_what"`.
        pub op: Op<HasWhat>,
        /// The workers' addresses, or nil for all.
        pub workers: Option<Vec<String>>,
    }
}

/// The reply to [`HasWhat`]: for each worker, the keys it holds.
pub type HasWhatReply = Map<String, Vec<Key>>;

request! {
    /// `ncores`: the threads of these workers (all when nil); the reply is an
    /// [`NcoresReply`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct Ncores {
        /// `"ncores"`.
        pub op: Op<Ncores>,
        /// The workers' addresses, or nil for all.
        pub workers: Option<Vec<String>>,
    }
}

/// The reply to [`Ncores`] and [`NcoresRunning`]: for each worker, its
/// threads.
pub type NcoresReply = Map<String, u32>;

request! {
    /// `ncores_running`: as [`Ncores`], the running workers only
    /// (`Client.scatter` asks it first).
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct NcoresRunning {
        /// `"ncores_running"`.
        pub op: Op<NcoresRunning>,
        /// The workers' addresses, or nil for all.
        pub workers: Option<Vec<String>>,
    }
}

request! {
    /// `broadcast`: send `msg` to these workers (all when nil) or their
    /// nannies, and answer each one's reply by address (`Client.run` sends a
    /// [`Run`](super::Run)); with `on_error: "return_pickle"` a worker that failed answers
    /// the pickled exception instead.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct Broadcast {
        /// `"broadcast"`.
        pub op: Op<Broadcast>,
        /// The request to send (read by op, [`Other`](WorkerRequest::Other)
        /// for an op framewire does not type).
        pub msg: WorkerRequest,
        /// The workers' addresses, or nil for all.
        pub workers: Option<Vec<String>>,
        /// To the workers' nannies instead.
        pub nanny: bool,
        /// `"raise"`, `"return"`, `"return_pickle"` or `"ignore"`.
        pub on_error: String,
    }
}

impl Broadcast {
    /// `msg` to every worker, errors returned pickled (as `Client.run`).
    pub fn new(msg: impl Into<WorkerRequest>) -> Broadcast {
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

/// The reply to a [`Broadcast`] of a [`Run`](super::Run): each worker's [`RunReply`],
/// by address.
pub type BroadcastReply = Map<String, RunReply>;

request! {
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

/// The reply to [`RetireWorkers`]: each retired worker as the scheduler
/// saw it.
pub type RetireWorkersReply = Map<String, WorkerInfo>;

/// A worker as the scheduler sees it (`WorkerState.identity`,
/// `scheduler.py:689`): in [`SchedulerIdentity`](super::SchedulerIdentity)
/// and the [`RetireWorkersReply`].
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

request! {
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
    }
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

request! {
    /// `amm_handler`: call a method of the Active Memory Manager
    /// (`"start"`, `"stop"`, `"run_once"`, `"running"`); the reply is what it
    /// returns (nil, or a bool for `"running"`).
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct AmmHandler {
        /// `"amm_handler"`.
        pub op: Op<AmmHandler>,
        /// The method.
        pub method: String,
    }
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
