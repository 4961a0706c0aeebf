//! A client's batched stream to the scheduler ([`ClientToScheduler`]):
//! `register-client` first, the graph, the keys it wants and releases.

use serde::{Deserialize, Serialize};

use super::scheduler_to_worker::CloseStream;
use crate::dask::wire::{Keys, Map, Timedelta};
use crate::dask::{Key, Op};
use crate::value::{Block, Value};

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

op_names! {
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
}

/// `register-client`: the first message of a client's stream
/// (`Client._ensure_connected`, `client.py:1570`); `Scheduler.add_client`
/// answers on the stream with [`StreamStart`](super::StreamStart).
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
    /// [`versions_like_scheduler`](crate::dask::versions_like_scheduler)).
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

/// `report-key`: tell me where this key stands (answered with
/// `key-in-memory`, `task-erred` or `cancelled-keys`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportKey {
    /// `"report-key"`.
    pub op: Op<ReportKey>,
    /// The key.
    pub key: Key,
}

impl ReportKey {
    /// Where does `key` stand.
    pub fn new(key: Key) -> ReportKey {
        ReportKey { op: Op::new(), key }
    }
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

/// `heartbeat-client`: the client is alive (answered with
/// [`AdjustHeartbeatInterval`](super::AdjustHeartbeatInterval)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatClient {
    /// `"heartbeat-client"`.
    pub op: Op<HeartbeatClient>,
}

/// `subscribe-topic`: send me the events of this topic (as [`Event`](super::Event)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscribeTopic {
    /// `"subscribe-topic"`.
    pub op: Op<SubscribeTopic>,
    /// The topic (`Client` subscribes to `"print"` and `"warn"`).
    pub topic: String,
    /// The client's id.
    pub client: String,
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

/// `close-client`: the client leaves (followed by `close-stream`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CloseClient {
    /// `"close-client"`.
    pub op: Op<CloseClient>,
}
