//! [`ConnectionPool`]: connections to workers kept open between calls, as
//! Dask's `distributed.core.ConnectionPool`.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{GetData, GetDataReply, Rpc, RpcCause, RpcError};
use crate::transport::{ConnectionBuilder, HandshakeOptions, Socket, Stats};

/// Idle connections a pool keeps per address by default.
pub const DEFAULT_IDLE_PER_ADDRESS: usize = 4;

/// Connections a pool keeps open in all by default, idle or in use: Dask's
/// (`ConnectionPool(limit=512)`, `Client(connection_limit=512)`).
pub const DEFAULT_CONNECTION_LIMIT: usize = 512;

/// Connections to Dask servers (workers), kept open between calls and
/// reused, as Dask's `ConnectionPool` (`distributed/core.py`: its
/// `connect(addr)` takes an idle comm to `addr` if one is open, else opens
/// one; `reuse(addr, comm)` puts it back unless it is closed). A client's
/// `get_data` and `update_data` calls then cost no connect and no handshake
/// after the first, and a connection keeps its recycled receive buffer (a
/// large value's memory is not faulted in again when the last one was
/// dropped).
///
/// **Bounds.** At most [`limit`](ConnectionPool::limit) connections are
/// open at once, idle or in use (default [`DEFAULT_CONNECTION_LIMIT`],
/// Dask's 512: file descriptors stay bounded however many workers a
/// gather reaches). At the limit, a caller that needs a new connection
/// first closes every idle one (Dask's `collect()`), then waits for one in
/// use to come back; a connection handed back while someone waits is
/// closed rather than kept idle, as Dask's `reuse` collects then. Idle
/// connections are also bounded per address
/// ([`idle_per_address`](ConnectionPool::idle_per_address)), beyond which
/// they are closed.
///
/// A pooled connection that turns out dead on its next call (the server
/// closed it while idle) is dropped, and [`call`](ConnectionPool::call)
/// tries once more on a fresh one: what a Dask caller's `retry_operation`
/// would do on a `CommClosedError`, for calls that may be repeated
/// (`get_data`, `update_data`).
///
/// Connections are made with the pool's [`ConnectionBuilder`], so they
/// read as it says (`deserialize_blocks`, limits, TLS).
///
/// ```no_run
/// use framewire::dask::{ConnectionPool, GetData, Key};
/// use framewire::transport::{ConnectionBuilder, HandshakeOptions};
///
/// # async fn run() -> Result<(), framewire::dask::RpcError> {
/// let pool = ConnectionPool::new(ConnectionBuilder::new(), HandshakeOptions::default())
///     .limit(64);
/// let worker = "tcp://10.0.0.5:40331";
/// for key in ["x", "y"] {
///     // The second call reuses the first one's connection.
///     let reply = pool.get_data(worker, &GetData::new([Key::from(key)])).await?;
///     println!("{key}: {:?}", reply.data);
/// }
/// assert_eq!((pool.opened(), pool.reused()), (1, 1));
/// pool.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ConnectionPool {
    builder: ConnectionBuilder,
    handshake: HandshakeOptions,
    idle_per_address: usize,
    /// This pool's connections in `shared.idle`: pools sharing a limit
    /// ([`ConnectionPool::sharing_limit`]) keep their idle ones apart.
    kind: usize,
    shared: Arc<Shared>,
}

/// What pools sharing one limit share: the permits (one per open
/// connection) and the idle connections, so that any of them can close
/// the others' idle ones at the limit.
#[derive(Debug)]
struct Shared {
    limit: usize,
    permits: Arc<Semaphore>,
    /// Callers waiting for a permit.
    waiting: AtomicUsize,
    idle: Mutex<HashMap<(usize, String), Vec<Pooled>>>,
    kinds: AtomicUsize,
    opened: AtomicU64,
    reused: AtomicU64,
    /// What the connections handed back or closed had moved by then.
    stats: Mutex<Stats>,
}

impl Shared {
    fn new(limit: usize) -> Arc<Shared> {
        Arc::new(Shared {
            limit,
            permits: Arc::new(Semaphore::new(limit)),
            waiting: AtomicUsize::new(0),
            idle: Mutex::new(HashMap::new()),
            kinds: AtomicUsize::new(1),
            opened: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            stats: Mutex::new(Stats::default()),
        })
    }
}

/// A connection taken from a [`ConnectionPool`]: an [`Rpc`] (through
/// `Deref`) that counts against the pool's limit until it is dropped or
/// handed back ([`ConnectionPool::reuse`]).
#[derive(Debug)]
pub struct Pooled {
    /// `None` only once [`Pooled::close`] took it.
    rpc: Option<Rpc<Socket>>,
    reused: bool,
    /// Its counters as last added to the pool's ([`ConnectionPool::stats`]).
    counted: Stats,
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
}

impl Pooled {
    /// Whether this connection was idle in the pool (`true`) or opened for
    /// this call (`false`).
    pub fn was_reused(&self) -> bool {
        self.reused
    }

    /// Closes the connection with Dask's goodbye ([`Rpc::close`]) instead
    /// of handing it back; its place under the limit is freed after.
    pub async fn close(mut self) -> Result<(), RpcError> {
        self.count();
        let rpc = self.rpc.take().expect("taken only here");
        rpc.close().await
    }

    /// Adds what the connection moved since it was last counted to the
    /// pool's [`stats`](ConnectionPool::stats).
    fn count(&mut self) {
        let Some(rpc) = &mut self.rpc else { return };
        let now = rpc.connection().stats();
        *self.shared.stats.lock().expect("not poisoned") += now - self.counted;
        self.counted = now;
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.count();
    }
}

impl Deref for Pooled {
    type Target = Rpc<Socket>;
    fn deref(&self) -> &Rpc<Socket> {
        self.rpc.as_ref().expect("taken only by close")
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Rpc<Socket> {
        self.rpc.as_mut().expect("taken only by close")
    }
}

impl ConnectionPool {
    /// A pool whose connections are made with `builder` and `handshake`,
    /// keeping [`DEFAULT_IDLE_PER_ADDRESS`] idle ones per address and at
    /// most [`DEFAULT_CONNECTION_LIMIT`] open.
    pub fn new(builder: ConnectionBuilder, handshake: HandshakeOptions) -> ConnectionPool {
        ConnectionPool {
            builder,
            handshake,
            idle_per_address: DEFAULT_IDLE_PER_ADDRESS,
            kind: 0,
            shared: Shared::new(DEFAULT_CONNECTION_LIMIT),
        }
    }

    /// Keeps at most `n` idle connections per address (0: none, every
    /// call on a connection of its own).
    pub fn idle_per_address(mut self, n: usize) -> ConnectionPool {
        self.idle_per_address = n;
        self
    }

    /// Keeps at most `n` connections open at once, idle or in use (at
    /// least 1). A new limit starts the pool afresh: call it before the
    /// pool is used or shared.
    pub fn limit(mut self, n: usize) -> ConnectionPool {
        self.shared = Shared::new(n.max(1));
        self
    }

    /// A pool of connections made with `builder` that counts against this
    /// pool's limit (one limit for both, their idle connections kept
    /// apart; the counters are shared). A client's pools of connections
    /// that deserialize and that keep blocks are two such.
    pub fn sharing_limit(&self, builder: ConnectionBuilder) -> ConnectionPool {
        ConnectionPool {
            builder,
            handshake: self.handshake.clone(),
            idle_per_address: self.idle_per_address,
            kind: self.shared.kinds.fetch_add(1, Ordering::Relaxed),
            shared: self.shared.clone(),
        }
    }

    /// Connections opened so far (connect and handshake).
    pub fn opened(&self) -> u64 {
        self.shared.opened.load(Ordering::Relaxed)
    }

    /// Calls served on an idle connection taken from the pool.
    pub fn reused(&self) -> u64 {
        self.shared.reused.load(Ordering::Relaxed)
    }

    /// What the connections of this pool and of those sharing its limit
    /// sent and received ([`Stats`]: messages, frames, bytes, and the
    /// bytes copied on the way), counted when a connection is handed back,
    /// closed or dropped: a connection in use adds its part when its call
    /// is done.
    pub fn stats(&self) -> Stats {
        *self.shared.stats.lock().expect("not poisoned")
    }

    /// Idle connections to `address` now.
    pub fn idle(&self, address: &str) -> usize {
        let idle = self.shared.idle.lock().expect("not poisoned");
        idle.get(&(self.kind, address.to_owned()))
            .map_or(0, Vec::len)
    }

    /// Connections open now, idle or in use, in this pool and those
    /// sharing its limit.
    pub fn open_connections(&self) -> usize {
        self.shared.limit - self.shared.permits.available_permits()
    }

    /// A connection to `address`: an idle one if there is one, else a new
    /// one ([`open`](ConnectionPool::open)).
    pub async fn connect(&self, address: &str) -> Result<Pooled, RpcError> {
        if let Some(mut rpc) = self.take_idle(address) {
            self.shared.reused.fetch_add(1, Ordering::Relaxed);
            rpc.reused = true;
            return Ok(rpc);
        }
        self.open(address).await
    }

    /// A new connection to `address`, never an idle one. At the limit,
    /// every idle connection is closed first, then this waits for a
    /// connection in use to be dropped or handed back.
    pub async fn open(&self, address: &str) -> Result<Pooled, RpcError> {
        let shared = &self.shared;
        // Counted as waiting before looking (until the permit is had, or
        // this future dropped): a connection handed back meanwhile is
        // closed, not kept idle holding the permit waited for.
        let waiting = Waiting::new(&shared.waiting);
        if shared.permits.available_permits() == 0 {
            self.collect();
        }
        let permit = shared.permits.clone().acquire_owned().await;
        drop(waiting);
        let permit = permit.expect("the pool's semaphore is never closed");
        let rpc = Rpc::connect(address, &self.builder, &self.handshake).await?;
        shared.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Pooled {
            rpc: Some(rpc),
            reused: false,
            counted: Stats::default(),
            shared: shared.clone(),
            _permit: permit,
        })
    }

    /// Puts a connection whose call went through back for the next call
    /// to `address`. One that failed (poisoned), one past
    /// [`idle_per_address`](ConnectionPool::idle_per_address), and any
    /// while a caller waits for the limit, is dropped instead (closing it).
    pub fn reuse(&self, address: &str, mut rpc: Pooled) {
        rpc.count();
        if rpc.connection().is_poisoned() || self.shared.waiting.load(Ordering::SeqCst) > 0 {
            return;
        }
        let mut idle = self.shared.idle.lock().expect("not poisoned");
        let list = idle.entry((self.kind, address.to_owned())).or_default();
        if list.len() < self.idle_per_address {
            list.push(rpc);
        }
    }

    /// Calls `request` on a connection to `address` ([`Rpc::call`]) and
    /// puts the connection back when the call went through. When a
    /// connection taken from the pool fails on the way (the transport, or
    /// closed before replying: the server closed it while it was idle), the
    /// call is made again once on a fresh connection; an error reply, or a
    /// failure on a fresh connection, is final. Only for requests that may
    /// be repeated (`update_data`, `who_has`...).
    pub async fn call<Q, R>(&self, address: &str, request: &Q) -> Result<R, RpcError>
    where
        Q: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let mut rpc = self.connect(address).await?;
        let mut result = rpc.call(request).await;
        if rpc.reused && dead(&result) {
            rpc = self.open(address).await?;
            result = rpc.call(request).await;
        }
        self.after(address, rpc, &result);
        result
    }

    /// `get_data` on a connection to `address` ([`Rpc::get_data`]: the
    /// `"OK"` after an `"OK"` reply included), as Dask's
    /// `get_data_from_worker` does on its pool's comm, with
    /// [`call`](ConnectionPool::call)'s retry of a dead pooled connection.
    pub async fn get_data(
        &self,
        address: &str,
        request: &GetData,
    ) -> Result<GetDataReply, RpcError> {
        let mut rpc = self.connect(address).await?;
        let mut result = rpc.get_data(request).await;
        if rpc.reused && dead(&result) {
            rpc = self.open(address).await?;
            result = rpc.get_data(request).await;
        }
        self.after(address, rpc, &result);
        result
    }

    /// A connection whose call went through goes back to the pool; one
    /// whose call failed is closed (dropped).
    fn after<R>(&self, address: &str, rpc: Pooled, result: &Result<R, RpcError>) {
        if result.is_ok() {
            self.reuse(address, rpc);
        }
    }

    /// Closes every idle connection of this pool with Dask's goodbye.
    pub async fn close(&self) {
        let idle: Vec<Pooled> = {
            let mut idle = self.shared.idle.lock().expect("not poisoned");
            let mine: Vec<_> = idle.keys().filter(|k| k.0 == self.kind).cloned().collect();
            mine.iter()
                .flat_map(|k| idle.remove(k).unwrap_or_default())
                .collect()
        };
        for pooled in idle {
            let _ = pooled.close().await;
        }
    }

    /// Closes (drops) every idle connection of the pools sharing this
    /// limit, as Dask's `collect()` does when its limit is reached.
    fn collect(&self) {
        let idle = std::mem::take(&mut *self.shared.idle.lock().expect("not poisoned"));
        drop(idle);
    }

    fn take_idle(&self, address: &str) -> Option<Pooled> {
        let mut idle = self.shared.idle.lock().expect("not poisoned");
        let key = (self.kind, address.to_owned());
        let list = idle.get_mut(&key)?;
        // The most recently used first (its buffers are the warmest).
        let rpc = list.pop();
        if list.is_empty() {
            idle.remove(&key);
        }
        rpc
    }
}

/// One caller counted in [`Shared::waiting`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a call failed as a connection that died while idle fails: in
/// the transport, or closed before any reply.
fn dead<R>(result: &Result<R, RpcError>) -> bool {
    matches!(
        result.as_ref().map_err(RpcError::cause),
        Err(RpcCause::Transport(_) | RpcCause::Closed)
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dask::{Key, Keys, Op};
    use crate::value::Value;

    /// A stand-in for a worker's `get_data` handler on 127.0.0.1: answers
    /// each `get_data` with `{"status": "OK", "data": {key: b"v"}}` and
    /// reads the caller's `"OK"`; closes a connection after `per_conn`
    /// calls (a worker that went away while the connection was idle).
    async fn worker(per_conn: usize) -> Worker {
        gated_worker(per_conn, Arc::new(Semaphore::new(Semaphore::MAX_PERMITS))).await
    }

    /// What a stand-in worker saw: connections accepted, and connections
    /// the caller closed.
    struct Worker {
        address: String,
        accepted: Arc<AtomicUsize>,
        closed: Arc<AtomicUsize>,
    }

    /// [`worker`], each reply waiting for a permit of `gate`.
    async fn gated_worker(per_conn: usize, gate: Arc<Semaphore>) -> Worker {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (count, closes) = (accepted.clone(), closed.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let (gate, closes) = (gate.clone(), closes.clone());
                tokio::spawn(async move {
                    let builder = ConnectionBuilder::new();
                    let (mut conn, _) = builder
                        .accept(stream, &HandshakeOptions::default())
                        .await
                        .unwrap();
                    for _ in 0..per_conn {
                        let Some(Ok(msg)) = conn.recv_value().await else {
                            // The caller closed it (Dask's goodbye, or EOF).
                            closes.fetch_add(1, Ordering::SeqCst);
                            return;
                        };
                        if msg.get("op").and_then(Value::as_str) == Some("close") {
                            closes.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        gate.acquire().await.unwrap().forget();
                        let key = msg.get("keys").and_then(|k| k.as_array()).unwrap()[0].clone();
                        let data = Value::Map(vec![(key, Value::bin(&b"v"[..]))]);
                        let reply =
                            Value::map_of([("status", Value::from_static("OK")), ("data", data)]);
                        conn.send_value(&reply).await.unwrap();
                        let ok = conn.recv_value().await.unwrap().unwrap();
                        assert_eq!(ok.as_str(), Some("OK"));
                    }
                    // Dropped: closed.
                });
            }
        });
        Worker {
            address,
            accepted,
            closed,
        }
    }

    /// Polls `done` every 5 ms, for at most 5 s.
    async fn eventually(done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("not within 5 s");
    }

    fn request(key: &str) -> GetData {
        GetData {
            op: Op::new(),
            keys: Keys::List(vec![Key::from(key)]),
            who: None,
            reply: Some(true),
        }
    }

    fn pool() -> ConnectionPool {
        ConnectionPool::new(ConnectionBuilder::new(), HandshakeOptions::default())
    }

    fn got(reply: &GetDataReply, key: &str) -> Value {
        reply.data.as_ref().unwrap()[&Key::from(key)].clone()
    }

    /// Calls after the first take the connection back from the pool: one
    /// connect and handshake in all.
    #[tokio::test]
    async fn a_connection_is_reused() {
        let Worker {
            address, accepted, ..
        } = worker(usize::MAX).await;
        let pool = pool();
        for i in 0..3 {
            let key = format!("k{i}");
            let before = pool.stats();
            let reply = pool.get_data(&address, &request(&key)).await.unwrap();
            assert_eq!(got(&reply, &key), Value::bin(&b"v"[..]));
            assert_eq!(pool.idle(&address), 1);
            // Counted once handed back: `get_data` and the `"OK"` out, the
            // reply in (and the handshake both ways on the first call).
            let d = pool.stats() - before;
            let handshake = u64::from(i == 0);
            assert_eq!(
                (d.messages_sent, d.messages_received),
                (2 + handshake, 1 + handshake),
                "{d:?}"
            );
        }
        assert_eq!((pool.opened(), pool.reused()), (1, 2));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        pool.close().await;
        assert_eq!(pool.idle(&address), 0);
    }

    /// A pooled connection the worker closed while it was idle fails on
    /// its next call; the call is made again on a fresh connection, and
    /// the dead one is not put back.
    #[tokio::test]
    async fn a_dead_pooled_connection_is_replaced() {
        let Worker {
            address, accepted, ..
        } = worker(1).await;
        let pool = pool();
        pool.get_data(&address, &request("a")).await.unwrap();
        assert_eq!(pool.idle(&address), 1);
        // Let the worker's close reach this end.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let reply = pool.get_data(&address, &request("b")).await.unwrap();
        assert_eq!(got(&reply, "b"), Value::bin(&b"v"[..]));
        // Taken from the pool once (dead), opened twice.
        assert_eq!((pool.opened(), pool.reused()), (2, 1));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.idle(&address), 1);
    }

    /// With no idle connections allowed, every call opens its own.
    #[tokio::test]
    async fn no_idle_connections_means_a_connection_per_call() {
        let Worker {
            address, accepted, ..
        } = worker(usize::MAX).await;
        let pool = pool().idle_per_address(0);
        for _ in 0..2 {
            pool.get_data(&address, &request("k")).await.unwrap();
        }
        assert_eq!((pool.opened(), pool.reused()), (2, 0));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.idle(&address), 0);
    }

    /// At the limit, a call that needs a connection waits for one in use
    /// instead of opening another: while two calls are held, the third
    /// waits for a permit and the worker sees no third connection; then
    /// every call completes.
    #[tokio::test]
    async fn the_limit_bounds_open_connections() {
        let gate = Arc::new(Semaphore::new(0));
        let w = gated_worker(usize::MAX, gate.clone()).await;
        let pool = Arc::new(pool().limit(2));
        let calls: Vec<_> = (0..3)
            .map(|i| {
                let (pool, address) = (pool.clone(), w.address.clone());
                tokio::spawn(async move {
                    let key = format!("k{i}");
                    let reply = pool.get_data(&address, &request(&key)).await.unwrap();
                    assert_eq!(got(&reply, &key), Value::bin(&b"v"[..]));
                })
            })
            .collect();
        // Two calls hold the two connections (the worker holds their
        // replies); the third is parked, waiting for a permit, which it
        // needs before it connects.
        eventually(|| w.accepted.load(Ordering::SeqCst) == 2).await;
        eventually(|| pool.shared.waiting.load(Ordering::SeqCst) == 1).await;
        assert_eq!(pool.shared.permits.available_permits(), 0);
        assert_eq!(w.accepted.load(Ordering::SeqCst), 2, "a third connection");
        assert_eq!(pool.open_connections(), 2);
        gate.add_permits(3);
        for call in calls {
            let done = tokio::time::timeout(Duration::from_secs(5), call).await;
            done.expect("a call waits for ever").unwrap();
        }
        // The first connection handed back while the third call waited
        // was closed for it, not kept idle.
        assert_eq!(w.accepted.load(Ordering::SeqCst), 3);
        eventually(|| w.closed.load(Ordering::SeqCst) >= 1).await;
        assert!(pool.open_connections() <= 2);
    }

    /// A call given up while it waits at the limit (its future dropped)
    /// leaves the pool as it was: connections handed back are kept again.
    #[tokio::test]
    async fn a_waiter_given_up_is_forgotten() {
        let w = worker(usize::MAX).await;
        let pool = pool().limit(1);
        let held = pool.open(&w.address).await.unwrap();
        let wait = tokio::time::timeout(Duration::from_millis(50), pool.open(&w.address));
        assert!(wait.await.is_err(), "opened past the limit");
        pool.reuse(&w.address, held);
        assert_eq!(pool.idle(&w.address), 1);
    }

    /// At the limit, idle connections (to any address, of any pool sharing
    /// the limit) are closed to make room, as Dask's `collect()`.
    #[tokio::test]
    async fn at_the_limit_idle_connections_are_closed() {
        let (a, b) = (worker(usize::MAX).await, worker(usize::MAX).await);
        let pool = pool().limit(1);
        let blocks = pool.sharing_limit(ConnectionBuilder::new());
        pool.get_data(&a.address, &request("x")).await.unwrap();
        assert_eq!((pool.idle(&a.address), pool.open_connections()), (1, 1));
        // Another address: a's idle connection is closed for it.
        pool.get_data(&b.address, &request("y")).await.unwrap();
        eventually(|| a.closed.load(Ordering::SeqCst) == 1).await;
        assert_eq!(pool.idle(&a.address), 0);
        assert_eq!((pool.idle(&b.address), pool.open_connections()), (1, 1));
        // The pool sharing the limit: b's idle connection of the first
        // pool is closed for it, and its own stays apart.
        blocks.get_data(&b.address, &request("z")).await.unwrap();
        eventually(|| b.closed.load(Ordering::SeqCst) == 1).await;
        assert_eq!((pool.idle(&b.address), blocks.idle(&b.address)), (0, 1));
        assert_eq!(blocks.open_connections(), 1);
        assert_eq!((pool.opened(), blocks.opened()), (3, 3), "counters shared");
    }
}
