//! [`Client`]: a Rust program as a client of a Dask cluster (see its docs).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::runtime::server_id;
use super::{
    gather_from_pool, BatchedReader, BatchedWriter, ClientDesiresKeys, ClientReleasesKeys,
    ConnectionPool, GatherKeys, GatherKeysReply, HeartbeatClient, Key, Map, NcoresRunning, Op,
    RegisterClient, ReportKey, RpcError, SchedulerToClient, StreamStart, UpdateData,
    UpdateDataReply, UpdateWhoHas, WhoHas,
};
use crate::serialize::SerializeOptions;
use crate::transport::{ReadHalf, Socket, TransportError, WriteHalf};
use crate::typed;
use crate::value::Value;

mod compute;
mod error;
mod options;
mod primitives;
mod queue;
mod semaphore;

pub use error::{ClientError, TaskError};
pub use options::ClientOptions;
pub use primitives::{Dataset, SharedEvent, Variable, VariableValue};
pub use queue::Queue;
pub use semaphore::{Lock, Semaphore, DEFAULT_LEASE_TIMEOUT};

// ---- state ------------------------------------------------------------------

/// Where a key the client follows is, as the scheduler reported it.
#[derive(Clone, Debug, PartialEq)]
enum KeyState {
    Memory,
    /// The exception and traceback of `task-erred`, as they came.
    Erred(Box<(Value, Option<Value>)>),
    Cancelled,
    /// Unknown to the scheduler: it answered `report-key` with a
    /// `cancelled-keys` of no reason (not submitted yet, or forgotten).
    Unknown,
    Lost,
}

#[derive(Debug, Default)]
struct State {
    /// What the scheduler last reported of each key.
    keys: HashMap<Key, KeyState>,
    /// The keys this client holds, each with its number of holds.
    held: HashMap<Key, usize>,
    /// Reports of a failure (erred, cancelled, unknown, lost), any key:
    /// [`Client::wait`] looks at every key again when this moved.
    failures: u64,
    /// Keys this client asked the scheduler to cancel, until submitted
    /// again (2024.12.1's `cancelled-keys` gives no reason: these are
    /// cancelled, not unknown, however many times it reports them).
    cancelling: HashSet<Key>,
    /// Times the stream was lost (and registered again).
    connections_lost: u64,
    /// The stream ended for good (closed, or lost and not registered again).
    ended: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Bumped on each report, to wake [`Client::wait`].
    changed: watch::Sender<u64>,
    /// Milliseconds between heartbeats.
    heartbeat_ms: AtomicU64,
    writer: Mutex<Option<BatchedWriter>>,
    /// [`Client::close`] ends the stream: not to be registered again.
    closing: AtomicBool,
    /// The scheduler's `distributed` release, as its `versions` gave it
    /// at the last registration.
    release: Mutex<String>,
}

impl State {
    /// One more hold of each key.
    fn hold<'k>(&mut self, keys: impl Iterator<Item = &'k Key>) {
        for k in keys {
            *self.held.entry(k.clone()).or_insert(0) += 1;
        }
    }
}

impl Shared {
    fn send<M: Serialize>(&self, msg: &M) -> Result<(), TransportError> {
        match &*self.writer.lock().expect("not poisoned") {
            Some(w) => w.send(msg),
            None => Err(TransportError::Closed),
        }
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state.lock().expect("not poisoned"));
        self.changed.send_modify(|n| *n += 1);
    }
}

/// Bytes values up to this size are scattered inline (msgpack bin), larger
/// ones as blocks whose frames go out as they are.
const INLINE_BYTES: usize = 64 << 10;

/// Dask's `scatter_to_workers` round-robin counter (process-wide, as
/// `utils_comm._round_robin_counter`).
static ROUND_ROBIN: AtomicUsize = AtomicUsize::new(0);

/// A Rust program as a client of a Dask cluster (`tcp://` or `tls://`), as
/// `distributed.Client` 2026.8.0 is one — registered on a batched stream
/// of its own, heartbeating, putting data on workers (`scatter`), fetching
/// it (`gather`), waiting for keys to be in memory and letting them go.
///
/// **Keys live as long as the client holds them**, as with Python futures:
/// a key the client scattered or waited for is one the scheduler keeps for
/// it (`client-desires-keys`) until [`Client::release`] or
/// [`Client::close`] lets it go (`client-releases-keys`, `close-client`);
/// then, when no other client wants it, the scheduler forgets it and the
/// workers drop it. Holds are counted as Python counts a key's futures:
/// each `scatter`, `wait` or `desire` of a key is one more hold, each
/// `release` one less, and the scheduler is told when the last one goes.
///
/// **Handing keys over.** A key the Rust client scattered is in the
/// scheduler's memory under that key; a Python client picks it up with
/// `Future(key, client=c, state="memory")` (in 2026.8.0 `Future(key,
/// client=c)` alone registers a future the scheduler is never asked about,
/// so it stays pending forever; `state="memory"` marks it finished at once).
/// Keys a Python client computed are waited for ([`Client::wait`]) and
/// gathered ([`Client::gather`]) by name, while the Python client holds them
/// (or after, as long as the Rust client asked for them first).
///
/// ```no_run
/// use framewire::dask::{Client, ClientOptions, Key};
/// use framewire::{NdArray, Value};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::connect("tcp://127.0.0.1:8786", ClientOptions::default()).await?;
/// // Scatter an array: the scheduler keeps "x" for this client.
/// let data = bytes::Bytes::from(vec![0u8; 8 * 1000]);
/// let x = NdArray::from_c_order("<f8", &[1000], data)?;
/// let who_has = client
///     .scatter([(Key::from("x"), Value::NdArray(Box::new(x)))])
///     .await?;
/// println!("x is on {:?}", who_has[&Key::from("x")]);
/// // Python: Future("x", client=c, state="memory") computes on it.
///
/// // Wait for a key Python computes, then fetch it from its worker.
/// let y = Key::from("y");
/// client.wait(std::slice::from_ref(&y)).await?;
/// let values = client.gather(std::slice::from_ref(&y)).await?;
/// println!("{:?}", values[&y]);
///
/// client.release(&[Key::from("x"), y])?; // the scheduler may forget them now
/// client.close().await?;
/// # Ok(())
/// # }
/// ```
///
/// A `Client` is cheap to clone: its clones share one registration, one
/// stream and one pool, so hand a clone to each task (no `Arc` needed).
/// Every method takes `&self`; calls to the scheduler and the workers go
/// over pooled connections ([`Client::pool`]). Must be used within a tokio
/// runtime. [`close`](Client::close) ends the client for every clone; the
/// last clone dropped without it ends the stream: the scheduler then
/// removes the client and releases its keys, as at `close`.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

/// What the clones of a [`Client`] share.
#[derive(Debug)]
struct Inner {
    id: String,
    scheduler: String,
    opts: ClientOptions,
    shared: Arc<Shared>,
    /// Connections to the scheduler and the workers for calls, `gather`
    /// (values read on arrival) and `scatter`; and to the workers for
    /// `gather_blocks` (blocks as they arrived).
    pool: Arc<ConnectionPool>,
    pool_blocks: Arc<ConnectionPool>,
    /// Taken by [`Client::close`], which waits for it.
    reader: Mutex<Option<JoinHandle<()>>>,
    heartbeat: JoinHandle<()>,
}

impl Client {
    /// Connects to the scheduler at `address` (retrying until the
    /// connection builder's connect timeout), registers as Dask's client
    /// does (`register-client` on a connection of its own, which becomes
    /// the batched stream once the scheduler answers `stream-start`), and
    /// starts heartbeating.
    pub async fn connect(address: &str, opts: ClientOptions) -> Result<Client, ClientError> {
        let id = server_id("Client");
        let (r, w, release) = register(address, &id, &opts).await?;
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed,
            heartbeat_ms: AtomicU64::new((opts.heartbeat_interval.as_millis() as u64).max(1)),
            writer: Mutex::new(Some(BatchedWriter::new(w, opts.batch_interval))),
            closing: AtomicBool::new(false),
            release: Mutex::new(release),
        });
        let registration = Registration {
            address: address.to_owned(),
            id: id.clone(),
            opts: opts.clone(),
        };
        let reader = tokio::spawn(read_stream(
            BatchedReader::new(r),
            shared.clone(),
            registration,
        ));
        let heartbeat = tokio::spawn(heartbeats(shared.clone()));
        // Two pools under one limit: connections that read values, and
        // connections that keep blocks as they arrived.
        let mut values = opts.connection.clone();
        values.deserialize_blocks(true);
        values.serialize_options(SerializeOptions {
            registry: opts.registry.clone(),
            ..Default::default()
        });
        let pool = ConnectionPool::new(values, opts.handshake.clone())
            .idle_per_address(opts.idle_connections_per_address)
            .limit(opts.connection_limit);
        let mut blocks = opts.connection.clone();
        blocks.deserialize_blocks(false);
        let pool_blocks = Arc::new(pool.sharing_limit(blocks));
        let pool = Arc::new(pool);
        Ok(Client {
            inner: Arc::new(Inner {
                id,
                scheduler: address.to_owned(),
                opts,
                shared,
                pool,
                pool_blocks,
                reader: Mutex::new(Some(reader)),
                heartbeat,
            }),
        })
    }

    /// The client's id (`"Client-<32 hex digits>"`), as the scheduler
    /// knows it.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The keys this client holds (scattered or waited for, and not
    /// released as many times).
    pub fn held(&self) -> Vec<Key> {
        let state = self.inner.shared.state.lock().expect("not poisoned");
        state.held.keys().cloned().collect()
    }

    /// A call to the scheduler on a pooled connection (a closed one is
    /// replaced and the call made once more: the calls the client makes
    /// are idempotent).
    async fn call<Q: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        request: &Q,
    ) -> Result<R, RpcError> {
        self.inner.pool.call(&self.inner.scheduler, request).await
    }

    /// Places values on the workers as `Client.scatter` does (direct):
    /// asks the scheduler for the running workers (`ncores_running`),
    /// spreads the keys round robin over them (sorted by address), sends
    /// each worker its values (`update_data`), then tells the scheduler who
    /// has what (`update_data` with this client's id: the scheduler holds
    /// the keys for it, in memory). Returns where each key went.
    ///
    /// Values: bytes (`Value::Bin`, Python gets `bytes`; up to 64 KiB
    /// inline in the message, larger ones in frames of their own), arrays
    /// (`Value::NdArray`, numpy arrays), blocks (`Value::Serialized`,
    /// `Value::Pickled`: sent as they are) and plain values (the `msgpack`
    /// family: Python gets ints, floats, strs, dicts, and tuples for
    /// arrays, as Dask reads msgpack arrays).
    pub async fn scatter(
        &self,
        data: impl IntoIterator<Item = (Key, Value)>,
    ) -> Result<Map<Key, Vec<String>>, ClientError> {
        let data: Vec<(Key, Value)> = data.into_iter().collect();
        if data.is_empty() {
            return Ok(Map::new());
        }
        // As `_scatter`: asked again every 0.1 s until a worker runs, for
        // at most the client's timeout.
        let started = tokio::time::Instant::now();
        let mut workers: Vec<String> = loop {
            let nthreads: Map<String, u64> = self.call(&NcoresRunning::default()).await?;
            if !nthreads.is_empty() {
                break nthreads.into_keys().collect();
            }
            if self
                .inner
                .opts
                .timeout
                .is_some_and(|t| started.elapsed() >= t)
            {
                return Err(ClientError::NoWorkers);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        workers.sort();
        let start = ROUND_ROBIN.fetch_add(data.len(), Ordering::Relaxed);
        let mut groups: Map<String, Map<Key, Value>> = Map::new();
        let mut who_has: Map<Key, Vec<String>> = Map::new();
        for (i, (key, value)) in data.into_iter().enumerate() {
            let worker = &workers[(start + i) % workers.len()];
            let value = match value {
                v @ (Value::Serialized(_) | Value::Pickled(_) | Value::ToSerialize(_)) => v,
                // Small bytes inline, as msgpack bin: the worker's reader
                // makes them `bytes` as it reads the message, where a
                // serialized block costs it a `deserialize` call per value
                // (10,000 small keys: about 40% of the worker's
                // `update_data`).
                Value::Bin(b) if b.len() <= INLINE_BYTES => Value::Bin(b),
                v => Value::ToSerialize(Box::new(v)),
            };
            groups
                .entry(worker.clone())
                .or_default()
                .insert(key.clone(), value);
            who_has.insert(key, vec![worker.clone()]);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (worker, values) in groups {
            let pool = self.inner.pool.clone();
            tasks.spawn(async move {
                let request = UpdateData {
                    op: Op::new(),
                    data: values,
                    stimulus_id: None,
                    reply: None,
                };
                let reply: UpdateDataReply = pool.call(&worker, &request).await?;
                Ok::<_, RpcError>(reply)
            });
        }
        let mut nbytes = Map::new();
        while let Some(done) = tasks.join_next().await {
            let reply = done.expect("an update_data task does not panic")?;
            nbytes.extend(reply.nbytes);
        }
        self.inner.shared.update(|s| s.hold(who_has.keys()));
        let () = self
            .call(&UpdateWhoHas {
                op: Op::new(),
                who_has: who_has.clone(),
                nbytes,
                client: Some(self.inner.id.clone()),
                reply: None,
            })
            .await?;
        Ok(who_has)
    }

    /// Where each key is in memory, as the scheduler knows (`who_has`; a
    /// key it does not know has no workers).
    pub async fn who_has(&self, keys: &[Key]) -> Result<Map<Key, Vec<String>>, ClientError> {
        Ok(self.call(&WhoHas::new(keys.iter().cloned())).await?)
    }

    /// Where every key in memory is (`who_has` for all keys, as Python's
    /// `Client.who_has()` with no futures).
    pub async fn who_has_all(&self) -> Result<Map<Key, Vec<String>>, ClientError> {
        Ok(self.call(&WhoHas::default()).await?)
    }

    /// Keeps `keys` in the cluster after this client is gone, as Dask's
    /// `fire_and_forget`: they are wanted by the scheduler's pseudo-client
    /// `"fire-and-forget"` (`client-desires-keys`), whom no client closing
    /// releases. (A Python client lets them go with
    /// `c.run_on_scheduler(lambda dask_scheduler:
    /// dask_scheduler.client_releases_keys(keys, "fire-and-forget"))`.)
    pub fn fire_and_forget(&self, keys: &[Key]) -> Result<(), ClientError> {
        let mut wish = ClientDesiresKeys::new(keys.iter().cloned());
        wish.client = Some("fire-and-forget".into());
        self.inner.shared.send(&wish)?;
        Ok(())
    }

    /// Holds `keys` (`client-desires-keys`): the scheduler keeps them for
    /// this client and reports on them. A key the scheduler does not know
    /// yet is ignored by it (with a warning in its log).
    pub fn desire(&self, keys: &[Key]) -> Result<(), ClientError> {
        self.inner.shared.update(|s| s.hold(keys.iter()));
        let mut wish = ClientDesiresKeys::new(keys.iter().cloned());
        wish.client = Some(self.inner.id.clone());
        self.inner.shared.send(&wish)?;
        Ok(())
    }

    /// Lets go of one hold of each of `keys` (Python: a future dropped);
    /// the keys whose last hold this was are released
    /// (`client-releases-keys`): when no other client holds them, the
    /// scheduler forgets them and the workers drop them. A key this client
    /// does not hold is left alone.
    pub fn release(&self, keys: &[Key]) -> Result<(), ClientError> {
        let mut gone = Vec::new();
        self.inner.shared.update(|s| {
            for k in keys {
                let Some(n) = s.held.get_mut(k) else { continue };
                *n -= 1;
                if *n == 0 {
                    s.held.remove(k);
                    s.keys.remove(k);
                    gone.push(k.clone());
                }
            }
        });
        if !gone.is_empty() {
            self.inner
                .shared
                .send(&ClientReleasesKeys::new(gone, self.inner.id.clone()))?;
        }
        Ok(())
    }

    /// Waits until every key is in memory: holds them
    /// ([`desire`](Client::desire)) and waits for the scheduler's
    /// `key-in-memory` reports (sent at once for a key already in memory),
    /// as Dask's `wait` on futures. A key whose task erred, was cancelled
    /// or lost is an error, and so is a key the scheduler does not know
    /// now ([`ClientError::Unknown`]: not submitted yet, or forgotten; to
    /// wait for a key that is still to come, [`wait_for`](Client::wait_for)).
    /// A key still computing is waited for as
    /// long as it takes: bound the wait with `tokio::time::timeout`. When
    /// the stream to the scheduler is lost meanwhile, the wait fails with
    /// [`ClientError::ConnectionLost`] (the client lets go of its keys and
    /// registers again, as Dask's client cancels its futures).
    pub async fn wait(&self, keys: &[Key]) -> Result<(), ClientError> {
        let mut changed = self.inner.shared.changed.subscribe();
        let lost = self
            .inner
            .shared
            .state
            .lock()
            .expect("not poisoned")
            .connections_lost;
        self.desire(keys)?;
        // The scheduler ignores a key it does not know in
        // `client-desires-keys`; `report-key` answers `cancelled-keys` for
        // one (and `key-in-memory` again for one in memory), so that waiting
        // on an unknown key fails instead of hanging.
        // A key already reported needs no asking (an erred key the
        // scheduler has forgotten would be answered `cancelled-keys`).
        let unknown: Vec<Key> = {
            let state = self.inner.shared.state.lock().expect("not poisoned");
            keys.iter()
                .filter(|k| !state.keys.contains_key(*k))
                .cloned()
                .collect()
        };
        for key in unknown {
            self.inner.shared.send(&ReportKey::new(key))?;
        }
        // Keys before `next` are in memory. Every key is looked at again
        // only when the scheduler reported a failure (of any key) since the
        // last look: a wait on n keys reported one by one costs O(n), not
        // O(n) per report.
        let mut next = 0;
        let mut failures_seen = None;
        loop {
            {
                let state = self.inner.shared.state.lock().expect("not poisoned");
                if state.connections_lost != lost {
                    return Err(ClientError::ConnectionLost);
                }
                if failures_seen != Some(state.failures) {
                    failures_seen = Some(state.failures);
                    for k in keys {
                        if let Some(e) = key_error(k, state.keys.get(k)) {
                            return Err(e);
                        }
                    }
                }
                while next < keys.len() {
                    match state.keys.get(&keys[next]) {
                        Some(KeyState::Memory) => next += 1,
                        None => break,
                        failed => return Err(key_error(&keys[next], failed).expect("a failure")),
                    }
                }
                if next == keys.len() {
                    return Ok(());
                }
                if state.ended {
                    return Err(TransportError::Closed.into());
                }
            }
            if changed.changed().await.is_err() {
                return Err(TransportError::Closed.into());
            }
        }
    }

    /// The scheduler's state of each key (`"processing"`, `"memory"`,
    /// `"erred"`...; `None`: it does not know the key), as Dask's
    /// `get_task_status`.
    pub async fn task_status(&self, keys: &[Key]) -> Result<Map<Key, Option<String>>, ClientError> {
        Ok(self.call(&GetTaskStatus::new(keys)).await?)
    }

    /// Waits, for at most `timeout`, until every key is in memory, keys the
    /// scheduler does not know yet included (submitted later, by this
    /// client or another): it asks the scheduler for their states
    /// (`get_task_status`, every 0.1 s, which logs nothing) until it knows
    /// each, then waits as [`wait`](Client::wait) does. Past the timeout:
    /// [`ClientError::TimedOut`] with the keys not in memory. A key that
    /// erred, was cancelled or lost once known is that error.
    pub async fn wait_for(&self, keys: &[Key], timeout: Duration) -> Result<(), ClientError> {
        let waiting = async {
            loop {
                let states = self.task_status(keys).await?;
                if keys
                    .iter()
                    .all(|k| states.get(k).is_some_and(Option::is_some))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Known now: an earlier "unknown" is moot.
            self.inner.shared.update(|s| {
                for k in keys {
                    if matches!(s.keys.get(k), Some(KeyState::Unknown)) {
                        s.keys.remove(k);
                    }
                }
            });
            self.wait(keys).await
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(done) => done,
            Err(_) => {
                let state = self.inner.shared.state.lock().expect("not poisoned");
                let late = keys
                    .iter()
                    .filter(|k| !matches!(state.keys.get(*k), Some(KeyState::Memory)))
                    .cloned()
                    .collect();
                Err(ClientError::TimedOut(late))
            }
        }
    }

    /// The values of `keys`, fetched as `Client.gather` does: where they
    /// are from the scheduler (`who_has`), then straight from the workers
    /// that hold them (`get_data`), and what they could not give through
    /// the scheduler (`gather`). Values are read on arrival with the
    /// options' [`registry`](ClientOptions::registry): a numpy array is an
    /// [`NdArray`](crate::NdArray) over the receive buffer it arrived in
    /// (its shards too, when they arrived back to back: no copy).
    ///
    /// A value the registry cannot read (a pickle naming a global that
    /// framewire does not read, such as `collections.OrderedDict`) stays
    /// the block it arrived as; `framewire::pickle::deserialize` of that
    /// block gives the error naming the global.
    ///
    /// Worker connections are kept open for the next call (see
    /// [`ClientOptions::idle_connections_per_address`]): a large value's
    /// receive buffer is then reused once the last one was dropped.
    pub async fn gather(&self, keys: &[Key]) -> Result<Map<Key, Value>, ClientError> {
        self.fetch(keys, &self.inner.pool).await
    }

    /// [`gather`](Client::gather), the values left as the blocks they
    /// arrived as (views of the receive buffers).
    pub async fn gather_blocks(&self, keys: &[Key]) -> Result<Map<Key, Value>, ClientError> {
        self.fetch(keys, &self.inner.pool_blocks).await
    }

    /// The connections of the client's calls, [`gather`](Client::gather)
    /// and [`scatter`](Client::scatter). Its counters (opened, reused, open
    /// now, and what they sent and received:
    /// [`stats`](ConnectionPool::stats)) include
    /// [`gather_blocks`](Client::gather_blocks)' connections, which share
    /// its limit.
    pub fn pool(&self) -> &ConnectionPool {
        &self.inner.pool
    }

    async fn fetch(
        &self,
        keys: &[Key],
        pool: &Arc<ConnectionPool>,
    ) -> Result<Map<Key, Value>, ClientError> {
        let who_has = self.who_has(keys).await?;
        let got = gather_from_pool(&who_has, None, pool).await;
        let mut data = got.data;
        let missing: Vec<Key> = keys
            .iter()
            .filter(|k| !data.contains_key(*k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            // Through the scheduler (Dask's `retry_operation(
            // self.inner.scheduler.gather, ...)`), on a pooled connection that
            // reads values as the workers' do.
            let request = GatherKeys {
                op: Op::new(),
                keys: missing,
                reply: None,
            };
            let reply: GatherKeysReply = pool.call(&self.inner.scheduler, &request).await?;
            if reply.status != "OK" {
                return Err(ClientError::Missing(reply.keys.unwrap_or_default()));
            }
            data.extend(reply.data.unwrap_or_default());
        }
        // In the order asked.
        let mut out = Map::new();
        for k in keys {
            match data.swap_remove(k) {
                Some(v) => {
                    out.insert(k.clone(), v);
                }
                None => return Err(ClientError::Missing(vec![k.clone()])),
            }
        }
        Ok(out)
    }

    /// Closes the client as Dask's does: `close-client` (the scheduler
    /// releases every key this client holds) and `close-stream` on the
    /// stream, then the stream and the scheduler connection are closed.
    pub async fn close(&self) -> Result<(), ClientError> {
        self.inner.heartbeat.abort();
        self.inner.shared.closing.store(true, Ordering::Release);
        let writer = self
            .inner
            .shared
            .writer
            .lock()
            .expect("not poisoned")
            .take();
        let mut result = Ok(());
        if let Some(w) = writer {
            let bye = |op: &'static str| Value::map_of([("op", Value::from_static(op))]);
            let _ = w.send_value(bye("close-client"));
            let _ = w.send_value(bye("close-stream"));
            result = w.close().await.map_err(ClientError::from);
        }
        // The scheduler answers with `stream-closed` and closes its end.
        let reader = self.inner.reader.lock().expect("not poisoned").take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        }
        self.inner.pool.close().await;
        self.inner.pool_blocks.close().await;
        result
    }
}

/// Connects to the scheduler and registers as client `id`, as
/// `Client._ensure_connected` does (`register-client` on a connection of
/// its own, which becomes the batched stream once the scheduler answers
/// `stream-start`): the stream's halves.
async fn register(
    address: &str,
    id: &str,
    opts: &ClientOptions,
) -> Result<(StreamReader, StreamWriter, String), ClientError> {
    let (mut conn, _) = opts
        .connection
        .connect(address, &opts.handshake)
        .await
        .map_err(RpcError::from)?;
    // As `_ensure_connected`: the scheduler's information first (here
    // its package versions, which this client, running no Python, takes
    // as its own so that no version mismatch is reported).
    let versions =
        super::versions_like_scheduler(address, &opts.connection, &opts.handshake).await?;
    let release = versions
        .get("packages")
        .and_then(|p| p.get("distributed"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let register = RegisterClient::new(id.to_owned(), versions);
    let exchange = async {
        conn.send_msg(&register).await?;
        conn.recv_value().await.ok_or(TransportError::Closed)?
    };
    let first = match opts.handshake.timeout {
        Some(t) => tokio::time::timeout(t, exchange).await.map_err(|_| {
            TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no stream-start from the scheduler",
            ))
        })??,
        None => exchange.await?,
    };
    // The scheduler's batched stream: a list of one `stream-start`.
    let start = match first {
        Value::Array(mut ops) if ops.len() == 1 => ops.remove(0),
        other => other,
    };
    let start: StreamStart = typed::from_value(start).map_err(RpcError::from)?;
    if !start.error.is_empty() {
        return Err(ClientError::Refused(start.error));
    }
    let (r, w) = conn.into_split();
    Ok((r, w, release))
}

/// The error of a key in a failed state; `None` when it is in memory or
/// not reported yet.
fn key_error(k: &Key, state: Option<&KeyState>) -> Option<ClientError> {
    Some(match state? {
        KeyState::Memory => return None,
        KeyState::Erred(report) => ClientError::Erred(Box::new(TaskError::read(
            k.clone(),
            &report.0,
            report.1.as_ref(),
        ))),
        KeyState::Cancelled => ClientError::Cancelled(k.clone()),
        KeyState::Unknown => ClientError::Unknown(k.clone()),
        KeyState::Lost => ClientError::Lost(k.clone()),
    })
}

/// `get_task_status`: the scheduler's state of each key (`None`: unknown).
#[derive(Serialize)]
struct GetTaskStatus<'a> {
    op: &'static str,
    keys: &'a [Key],
    reply: bool,
}

impl<'a> GetTaskStatus<'a> {
    fn new(keys: &'a [Key]) -> GetTaskStatus<'a> {
        GetTaskStatus {
            op: "get_task_status",
            keys,
            reply: true,
        }
    }
}

/// The halves of the client's stream.
type StreamReader = ReadHalf<tokio::io::ReadHalf<Socket>>;
type StreamWriter = WriteHalf<tokio::io::WriteHalf<Socket>>;

/// What the stream's reader needs to register again.
#[derive(Debug)]
struct Registration {
    address: String,
    id: String,
    opts: ClientOptions,
}

impl Registration {
    /// Registers again as `Client._reconnect` does (`client.py`): attempts
    /// (each retrying its connection until the connect timeout) until the
    /// client's [`timeout`](ClientOptions::timeout) has passed, 0.1 s
    /// apart; `None` when it passed.
    async fn again(&self) -> Option<(StreamReader, StreamWriter, String)> {
        let deadline = self.opts.timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            if let Ok(halves) = register(&self.address, &self.id, &self.opts).await {
                return Some(halves);
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone gone, without `close`: the stream's end tells the
        // scheduler.
        self.heartbeat.abort();
        if let Some(reader) = self.reader.lock().expect("not poisoned").take() {
            reader.abort();
        }
    }
}

/// Reads the client's stream, and registers again when it is lost (not
/// closed by [`Client::close`]), as `Client._reconnect` does: every key the
/// client held is let go (Dask cancels every future, reason
/// `scheduler-connection-lost`; a scheduler that restarted knows none of
/// them), [`Client::wait`]s in progress fail with
/// [`ClientError::ConnectionLost`], and the client registers again under
/// its id. When that fails within the client's timeout, the client is
/// ended: calls fail with [`TransportError::Closed`].
async fn read_stream(
    mut reader: BatchedReader<tokio::io::ReadHalf<Socket>>,
    shared: Arc<Shared>,
    registration: Registration,
) {
    loop {
        read_reports(&mut reader, &shared).await;
        if shared.closing.load(Ordering::Acquire) {
            break;
        }
        *shared.writer.lock().expect("not poisoned") = None;
        shared.update(|s| {
            s.held.clear();
            s.keys.clear();
            s.cancelling.clear();
            s.connections_lost += 1;
        });
        let Some((r, w, release)) = registration.again().await else {
            break;
        };
        *shared.release.lock().expect("not poisoned") = release;
        let batch = registration.opts.batch_interval;
        *shared.writer.lock().expect("not poisoned") = Some(BatchedWriter::new(w, batch));
        reader = BatchedReader::new(r);
    }
    shared.update(|s| s.ended = true);
}

/// The reports on keys and the heartbeat intervals, until the stream ends.
async fn read_reports<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BatchedReader<R>,
    shared: &Shared,
) {
    while let Some(Ok(msg)) = reader.recv_value().await {
        // A message this client cannot read is skipped, as Dask's client
        // logs and skips one.
        let Ok(report) = typed::from_value::<SchedulerToClient>(msg) else {
            continue;
        };
        let one = |key: Key, state: KeyState| {
            move |s: &mut State| {
                if !matches!(state, KeyState::Memory) {
                    s.failures += 1;
                }
                s.keys.insert(key, state);
            }
        };
        match report {
            SchedulerToClient::KeyInMemory(m) => shared.update(one(m.key, KeyState::Memory)),
            SchedulerToClient::TaskErred(m) => shared.update(one(
                m.key,
                KeyState::Erred(Box::new((m.exception, m.traceback))),
            )),
            SchedulerToClient::LostData(m) => shared.update(one(m.key, KeyState::Lost)),
            SchedulerToClient::CancelledKeys(m) => shared.update(|s| {
                s.failures += 1;
                for k in m.keys {
                    // An erred key the scheduler then forgot stays erred:
                    // its exception is what the client needs.
                    if !matches!(s.keys.get(&k), Some(KeyState::Erred(_))) {
                        // `report-key`'s answer for a key the scheduler
                        // does not know is the one without a reason.
                        let state = if m.reason.is_some() || s.cancelling.contains(&k) {
                            KeyState::Cancelled
                        } else {
                            KeyState::Unknown
                        };
                        s.keys.insert(k, state);
                    }
                }
            }),
            SchedulerToClient::TaskRetried(m) => shared.update(|s| {
                s.keys.remove(&m.key);
            }),
            SchedulerToClient::AdjustHeartbeatInterval(m) => {
                let secs = m.interval.as_f64();
                if secs > 0.0 && secs.is_finite() {
                    let ms = (secs.min(3600.0) * 1000.0) as u64;
                    shared.heartbeat_ms.store(ms.max(1), Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}

/// `heartbeat-client` on the stream, every interval (as `Client._heartbeat`).
async fn heartbeats(shared: Arc<Shared>) {
    loop {
        let ms = shared.heartbeat_ms.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        // No stream while the client registers again: the next beat.
        if let Some(w) = &*shared.writer.lock().expect("not poisoned") {
            let _ = w.send(&HeartbeatClient::default());
        }
        if shared.state.lock().expect("not poisoned").ended {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
