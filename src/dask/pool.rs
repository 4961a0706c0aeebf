//! [`ConnectionPool`]: connections to workers kept open between calls, as
//! Dask's `distributed.core.ConnectionPool`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{GetData, GetDataReply, Rpc, RpcError};
use crate::transport::{ConnectionBuilder, HandshakeOptions, Socket};

/// Idle connections a pool keeps per address by default.
pub const DEFAULT_IDLE_PER_ADDRESS: usize = 4;

/// Connections to Dask servers (workers), kept open between calls and
/// reused, as Dask's `ConnectionPool` (`distributed/core.py`: its
/// `connect(addr)` takes an idle comm to `addr` if one is open, else opens
/// one; `reuse(addr, comm)` puts it back unless it is closed; idle comms
/// are bounded). A client's `get_data` and `update_data` calls then cost no
/// connect and no handshake after the first, and a connection keeps its
/// recycled receive buffer (a large value's memory is not faulted in again
/// when the last one was dropped).
///
/// Dask bounds open connections in all (`limit`, 512) and closes idle ones
/// above it; this pool keeps at most
/// [`idle_per_address`](ConnectionPool::idle_per_address) idle ones per
/// address and closes any beyond. A pooled connection that turns out dead
/// on its next call (the server closed it while idle) is dropped, and
/// [`call`](ConnectionPool::call) tries once more on a fresh one — what a
/// Dask caller's `retry_operation` would do on a `CommClosedError`, for
/// calls that may be repeated (`get_data`, `update_data`).
///
/// Connections are made with the pool's [`ConnectionBuilder`], so they
/// read as it says (`deserialize_blocks`, limits, TLS).
#[derive(Debug)]
pub struct ConnectionPool {
    builder: ConnectionBuilder,
    handshake: HandshakeOptions,
    idle_per_address: usize,
    idle: Mutex<HashMap<String, Vec<Rpc<Socket>>>>,
    opened: AtomicU64,
    reused: AtomicU64,
}

impl ConnectionPool {
    /// A pool whose connections are made with `builder` and `handshake`,
    /// keeping [`DEFAULT_IDLE_PER_ADDRESS`] idle ones per address.
    pub fn new(builder: ConnectionBuilder, handshake: HandshakeOptions) -> ConnectionPool {
        ConnectionPool {
            builder,
            handshake,
            idle_per_address: DEFAULT_IDLE_PER_ADDRESS,
            idle: Mutex::new(HashMap::new()),
            opened: AtomicU64::new(0),
            reused: AtomicU64::new(0),
        }
    }

    /// Keeps at most `n` idle connections per address (0: none, every
    /// call on a connection of its own).
    pub fn idle_per_address(mut self, n: usize) -> ConnectionPool {
        self.idle_per_address = n;
        self
    }

    /// Connections opened so far (connect and handshake).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Calls served on an idle connection taken from the pool.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// Idle connections to `address` now.
    pub fn idle(&self, address: &str) -> usize {
        let idle = self.idle.lock().expect("not poisoned");
        idle.get(address).map_or(0, Vec::len)
    }

    /// A connection to `address`: an idle one if there is one (`true`),
    /// else a new one (`false`).
    pub async fn connect(&self, address: &str) -> Result<(Rpc<Socket>, bool), RpcError> {
        if let Some(rpc) = self.take_idle(address) {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok((rpc, true));
        }
        Ok((self.open(address).await?, false))
    }

    /// A new connection to `address`, never an idle one.
    pub async fn open(&self, address: &str) -> Result<Rpc<Socket>, RpcError> {
        let rpc = Rpc::connect(address, &self.builder, &self.handshake).await?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(rpc)
    }

    /// Puts a connection whose call went through back for the next call
    /// to `address`; one that failed (poisoned), or one past
    /// [`idle_per_address`](ConnectionPool::idle_per_address), is dropped
    /// instead (closing it).
    pub fn reuse(&self, address: &str, mut rpc: Rpc<Socket>) {
        if rpc.connection().is_poisoned() {
            return;
        }
        let mut idle = self.idle.lock().expect("not poisoned");
        let list = idle.entry(address.to_owned()).or_default();
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
        let (mut rpc, pooled) = self.connect(address).await?;
        let mut result = rpc.call(request).await;
        if pooled && dead(&result) {
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
        let (mut rpc, pooled) = self.connect(address).await?;
        let mut result = rpc.get_data(request).await;
        if pooled && dead(&result) {
            rpc = self.open(address).await?;
            result = rpc.get_data(request).await;
        }
        self.after(address, rpc, &result);
        result
    }

    /// A connection whose call went through goes back to the pool; one
    /// whose call failed is closed (dropped).
    fn after<R>(&self, address: &str, rpc: Rpc<Socket>, result: &Result<R, RpcError>) {
        if result.is_ok() {
            self.reuse(address, rpc);
        }
    }

    /// Closes every idle connection with Dask's goodbye.
    pub async fn close(&self) {
        let idle: Vec<Rpc<Socket>> = {
            let mut idle = self.idle.lock().expect("not poisoned");
            idle.drain().flat_map(|(_, list)| list).collect()
        };
        for rpc in idle {
            let _ = rpc.close().await;
        }
    }

    fn take_idle(&self, address: &str) -> Option<Rpc<Socket>> {
        let mut idle = self.idle.lock().expect("not poisoned");
        let list = idle.get_mut(address)?;
        // The most recently used first (its buffers are the warmest).
        let rpc = list.pop();
        if list.is_empty() {
            idle.remove(address);
        }
        rpc
    }
}

/// Whether a call failed as a connection that died while idle fails: in
/// the transport, or closed before any reply.
fn dead<R>(result: &Result<R, RpcError>) -> bool {
    matches!(result, Err(RpcError::Transport(_) | RpcError::Closed))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;
    use crate::dask::{Key, Keys, Op};
    use crate::value::Value;

    /// A stand-in for a worker's `get_data` handler on 127.0.0.1: answers
    /// each `get_data` with `{"status": "OK", "data": {key: b"v"}}` and
    /// reads the caller's `"OK"`; closes a connection after `per_conn`
    /// calls (a worker that went away while the connection was idle).
    /// Returns its address and the count of connections it accepted.
    async fn worker(per_conn: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let builder = ConnectionBuilder::new();
                    let (mut conn, _) = builder
                        .accept(stream, &HandshakeOptions::default())
                        .await
                        .unwrap();
                    for _ in 0..per_conn {
                        let Some(Ok(msg)) = conn.recv_value().await else {
                            return;
                        };
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
        (address, accepted)
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
        let (address, accepted) = worker(usize::MAX).await;
        let pool = pool();
        for i in 0..3 {
            let key = format!("k{i}");
            let reply = pool.get_data(&address, &request(&key)).await.unwrap();
            assert_eq!(got(&reply, &key), Value::bin(&b"v"[..]));
            assert_eq!(pool.idle(&address), 1);
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
        let (address, accepted) = worker(1).await;
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
        let (address, accepted) = worker(usize::MAX).await;
        let pool = pool().idle_per_address(0);
        for _ in 0..2 {
            pool.get_data(&address, &request("k")).await.unwrap();
        }
        assert_eq!((pool.opened(), pool.reused()), (2, 0));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.idle(&address), 0);
    }
}
