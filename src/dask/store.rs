//! Holding and moving a worker's data: [`DataStore`] (what `update_data`
//! stores and `get_data` serves) and [`gather_from_workers`] (fetching
//! keys from the workers that hold them, as `distributed.utils_comm`'s
//! function of that name).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::runtime::now;
use super::{
    ConnectionPool, GetData, GetDataReply, Key, Keys, Map, Op, Rpc, RpcError, StartStop,
    UpdateData, UpdateDataReply,
};
use crate::transport::{ConnectionBuilder, HandshakeOptions};
use crate::value::Value;

/// The size Dask is told a value has: the bytes of a block's frames (what a
/// worker that holds blocks as they came actually holds), or the length of
/// a bin, str or other inline value's payload.
pub fn nbytes(value: &Value) -> u64 {
    match value {
        Value::Serialized(b) | Value::Pickled(b) => b.frames().iter().map(|f| f.len() as u64).sum(),
        Value::Bin(b) => b.len() as u64,
        Value::Str(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(nbytes).sum(),
        Value::Map(entries) => entries.iter().map(|(k, v)| nbytes(k) + nbytes(v)).sum(),
        Value::IntArray(items) => 8 * items.len() as u64,
        Value::BinArray(items) => items.total_len() as u64,
        Value::ToSerialize(v) => nbytes(v),
        Value::NdArray(a) => a.data().len() as u64,
        _ => 8,
    }
}

/// A worker's data: values by key, each kept as given (a block received
/// with [`ConnectionBuilder::deserialize_blocks(false)`](ConnectionBuilder::deserialize_blocks)
/// is a view of the receive buffers, and [`DataStore::get_data`] hands the
/// same frames back, so serving it copies nothing).
///
/// ```
/// use framewire::dask::{DataStore, Key, Keys, GetData, Op};
/// use framewire::Value;
///
/// let mut store = DataStore::new();
/// store.insert(Key::from("x"), Value::bin(vec![1u8, 2, 3]));
/// let reply = store.get_data(&[Key::from("x"), Key::from("missing")]);
/// assert_eq!(reply.status, "OK");
/// assert_eq!(reply.data.as_ref().map(|d| d.len()), Some(1));
/// assert_eq!(store.nbytes(), 3);
/// ```
#[derive(Clone, Debug, Default)]
pub struct DataStore {
    data: HashMap<Key, (Value, u64)>,
    bytes: u64,
}

impl DataStore {
    /// An empty store.
    pub fn new() -> DataStore {
        DataStore::default()
    }

    /// Holds `value` under `key` (replacing what was there); returns its
    /// size ([`nbytes`]).
    pub fn insert(&mut self, key: Key, value: Value) -> u64 {
        let n = nbytes(&value);
        if let Some((_, old)) = self.data.insert(key, (value, n)) {
            self.bytes -= old;
        }
        self.bytes += n;
        n
    }

    /// Drops `key`; whether it was held.
    pub fn remove(&mut self, key: &Key) -> bool {
        match self.data.remove(key) {
            Some((_, n)) => {
                self.bytes -= n;
                true
            }
            None => false,
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.data.get(key).map(|(v, _)| v)
    }

    /// Whether `key` is held.
    pub fn contains(&self, key: &Key) -> bool {
        self.data.contains_key(key)
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The bytes held (the sum of [`nbytes`]).
    pub fn nbytes(&self) -> u64 {
        self.bytes
    }

    /// The keys held.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.data.keys()
    }

    /// Stores `update_data`'s values and makes its reply (`{"nbytes": {key:
    /// size}, "status": "OK"}`), as `Worker.update_data`.
    pub fn update_data(&mut self, msg: UpdateData) -> UpdateDataReply {
        let nbytes = msg
            .data
            .into_iter()
            .map(|(k, v)| {
                let n = self.insert(k.clone(), v);
                (k, n)
            })
            .collect();
        UpdateDataReply {
            nbytes,
            status: "OK".to_owned(),
        }
    }

    /// The reply to a `get_data` for `keys`: `{"status": "OK", "data":
    /// {key: value}}` with the keys held (others are absent, as from
    /// `Worker.get_data`). Values are cloned by reference count: their
    /// frames are the held ones.
    pub fn get_data(&self, keys: &[Key]) -> GetDataReply {
        let data = keys
            .iter()
            .filter_map(|k| self.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        GetDataReply {
            status: "OK".to_owned(),
            data: Some(data),
        }
    }
}

/// What [`gather_from_workers`] got.
#[derive(Debug, Default)]
pub struct Gathered {
    /// The values fetched, by key (blocks as they arrived when the
    /// connections are pass-through).
    pub data: Map<Key, Value>,
    /// Keys no holder gave.
    pub missing: Vec<Key>,
    /// Workers that could not be reached, or failed, with why.
    pub failed_workers: Vec<(String, String)>,
    /// Each holder's `get_data` that answered, timed.
    pub transfers: Vec<Transfer>,
}

/// One holder's `get_data` that answered `"OK"`: what Dask's worker keeps
/// as a `"transfer"` in the `startstops` of a task waiting for the keys
/// (`Worker._update_metrics_received_data`), reported with its
/// `task-finished`.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    /// The holder.
    pub worker: String,
    /// The keys asked of it (some may not have come).
    pub keys: Vec<Key>,
    /// Seconds since the epoch, before the call.
    pub start: f64,
    /// Seconds since the epoch, after the reply.
    pub stop: f64,
}

impl Transfer {
    /// `{"action": "transfer", "start", "stop", "source": worker}`.
    pub fn startstop(&self) -> StartStop {
        StartStop {
            action: "transfer".to_owned(),
            start: self.start,
            stop: self.stop,
            source: Some(self.worker.clone()),
        }
    }
}

/// How long workers that answered `{"status": "busy"}` are left alone when
/// no other holder of the keys left is ready (`gather_from_workers`'s
/// `asyncio.sleep(0.15)`, `utils_comm.py:79`; a worker's own `gather_dep`
/// waits as long, `Worker.retry_busy_worker_later`).
const BUSY_PAUSE: Duration = Duration::from_millis(150);

/// Fetches the keys of `who_has` (key → the addresses holding it) with
/// `get_data` from the workers that hold them, as Dask's
/// `utils_comm.gather_from_workers` (2026.8.0): each key goes to one of its
/// holders picked at random, the keys are grouped by holder, the holders
/// are asked concurrently (one connection each, the `"OK"` after each reply
/// included, closed with Dask's goodbye), a key a holder does not give or a
/// holder that fails is tried at another one, and a holder answering
/// `busy` is passed over for the others; when only busy ones are left,
/// they are asked again 0.15 s later, for as long as they answer `busy`
/// (as Dask's: bound the call with a timeout to give up). `who` is the
/// asking worker's address (`None` for a client). Connections are made with `builder` —
/// with [`deserialize_blocks(false)`](ConnectionBuilder::deserialize_blocks)
/// the values are the blocks as they arrived, views of the receive
/// buffers.
///
/// Must be called within a tokio runtime (holders are asked in tasks of
/// their own).
pub async fn gather_from_workers(
    who_has: &Map<Key, Vec<String>>,
    who: Option<&str>,
    builder: &ConnectionBuilder,
    opts: &HandshakeOptions,
) -> Gathered {
    gather_via(
        who_has,
        who,
        Via::Fresh(Box::new((builder.clone(), opts.clone()))),
    )
    .await
}

/// [`gather_from_workers`] on the connections of `pool`, as Dask's
/// `gather_from_workers` on its `rpc` pool: a holder's connection is taken
/// from the pool (opened the first time) and put back after its reply,
/// instead of a connection per call closed with a goodbye; a pooled
/// connection found dead is replaced by a fresh one for that call
/// ([`ConnectionPool::get_data`]).
pub async fn gather_from_pool(
    who_has: &Map<Key, Vec<String>>,
    who: Option<&str>,
    pool: &Arc<ConnectionPool>,
) -> Gathered {
    gather_via(who_has, who, Via::Pool(pool.clone())).await
}

/// How [`gather_via`] reaches holders.
#[derive(Clone)]
enum Via {
    /// A connection per call.
    Fresh(Box<(ConnectionBuilder, HandshakeOptions)>),
    /// A pool's connections.
    Pool(Arc<ConnectionPool>),
}

async fn gather_via(who_has: &Map<Key, Vec<String>>, who: Option<&str>, via: Via) -> Gathered {
    let mut out = Gathered::default();
    // Each key's holders not yet found without it (`to_gather`).
    let mut todo: Map<Key, Vec<String>> = who_has.clone();
    let mut failed: HashSet<String> = HashSet::new();
    let mut busy: HashSet<String> = HashSet::new();
    while !todo.is_empty() {
        // Each key goes to a holder picked at random among those neither
        // failed nor busy (`random.choice(list(ready_addresses))`).
        let mut groups: Map<String, Vec<Key>> = Map::default();
        for (key, holders) in &mut todo {
            holders.retain(|w| !failed.contains(w));
            let ready: Vec<&String> = holders.iter().filter(|w| !busy.contains(*w)).collect();
            if !ready.is_empty() {
                let w = ready[fastrand::usize(..ready.len())];
                groups.entry(w.clone()).or_default().push(key.clone());
            }
        }
        if groups.is_empty() {
            if busy.is_empty() {
                break;
            }
            tokio::time::sleep(BUSY_PAUSE).await;
            busy.clear();
            continue;
        }
        // One holder (the usual fetch of a worker's dependencies) is
        // asked here; several at once, each in a task of its own.
        let mut replies = Vec::with_capacity(groups.len());
        if groups.len() == 1 {
            let (worker, keys) = groups.pop().expect("one group");
            replies.push(get_group(via.clone(), who.map(str::to_owned), worker, keys).await);
        } else {
            let mut tasks = tokio::task::JoinSet::new();
            for (worker, keys) in groups {
                tasks.spawn(get_group(via.clone(), who.map(str::to_owned), worker, keys));
            }
            while let Some(done) = tasks.join_next().await {
                replies.push(done.expect("a get_data task does not panic"));
            }
        }
        for (worker, keys, reply, (start, stop)) in replies {
            match reply {
                Ok(reply) if reply.status == "busy" => {
                    busy.insert(worker);
                }
                Ok(reply) => {
                    let mut data = reply.data.unwrap_or_default();
                    for key in &keys {
                        match data.swap_remove(key) {
                            Some(v) => {
                                todo.swap_remove(key);
                                out.data.insert(key.clone(), v);
                            }
                            // Not there: asked of another holder.
                            None => {
                                if let Some(holders) = todo.get_mut(key) {
                                    holders.retain(|w| *w != worker);
                                }
                            }
                        }
                    }
                    out.transfers.push(Transfer {
                        worker,
                        keys,
                        start,
                        stop,
                    });
                }
                Err(e) => {
                    out.failed_workers.push((worker.clone(), e.to_string()));
                    failed.insert(worker);
                }
            }
        }
    }
    // No holder left to ask.
    out.missing.extend(todo.into_keys());
    out
}

/// `get_data` of `keys` from `worker`.
async fn get_group(
    via: Via,
    who: Option<String>,
    worker: String,
    keys: Vec<Key>,
) -> (String, Vec<Key>, Result<GetDataReply, RpcError>, (f64, f64)) {
    let start = now();
    let request = GetData {
        op: Op::new(),
        keys: Keys::List(keys.clone()),
        who,
        reply: Some(true),
    };
    let reply = match &via {
        Via::Fresh(fresh) => get_data_from(&worker, &request, &fresh.0, &fresh.1).await,
        Via::Pool(pool) => pool.get_data(&worker, &request).await,
    };
    (worker, keys, reply, (start, now()))
}

/// One `get_data` to `worker`, on a connection of its own.
async fn get_data_from(
    worker: &str,
    request: &GetData,
    builder: &ConnectionBuilder,
    opts: &HandshakeOptions,
) -> Result<GetDataReply, RpcError> {
    // The handshake's timeout bounds the connection; a transfer of any
    // size gets no deadline (Dask's has none either).
    let (conn, _) = builder.connect(worker, opts).await?;
    let mut rpc = Rpc::new(conn);
    let reply = rpc.get_data(request).await?;
    rpc.close().await?;
    Ok(reply)
}
