//! The requests a worker answers ([`WorkerRequest`], its RPC handlers) and
//! their replies: `get_data`, `update_data`, `gather`, `free_keys`,
//! `identity`, `run`.

use serde::{Deserialize, Serialize};

use super::scheduler_to_worker::Close;
use crate::dask::wire::{Keys, Map};
use crate::dask::{Key, Op};
use crate::typed::Bin;
use crate::value::Value;

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

op_names! {
    GetData => "get_data",
    UpdateData => "update_data",
    Gather => "gather",
    FreeKeysRpc => "free_keys",
    Identity => "identity",
    Run => "run",
}

request! {
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
    }
    /// Always true (the worker replies); set by [`Rpc`](crate::dask::Rpc).
    reply
}

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

request! {
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

/// The reply to [`UpdateData`]: the size of each value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateDataReply {
    /// The size of each value.
    pub nbytes: Map<Key, u64>,
    /// `"OK"`.
    pub status: String,
}

request! {
    /// `gather` to a worker: fetch these keys from the workers that hold them
    /// (`replicate`, `rebalance`).
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct Gather {
        /// `"gather"`.
        pub op: Op<Gather>,
        /// For each key, the workers that hold it.
        pub who_has: Map<Key, Vec<String>>,
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

request! {
    /// `free_keys`, the RPC form of [`FreeKeys`](super::FreeKeys) (`replicate` dropping
    /// surplus replicas); the reply is nil.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct FreeKeysRpc {
        /// `"free_keys"`.
        pub op: Op<FreeKeysRpc>,
        /// The keys.
        pub keys: Vec<Key>,
        /// Why.
        pub stimulus_id: String,
    }
}

request! {
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
    }
}

request! {
    /// `run`: call a function on the worker (`Client.run`, through the
    /// scheduler's [`Broadcast`](super::Broadcast)); the reply is a [`RunReply`]. The function
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
        deserialize_with = "crate::dask::wire::present"
    )]
    pub traceback: Option<Value>,
    /// `repr` of the exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception_text: Option<String>,
    /// The formatted traceback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback_text: Option<String>,
}
