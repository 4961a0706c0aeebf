//! What every simulated worker of the swarm shares: the configuration,
//! the connection pools, the statistics, and every worker's [`Node`].

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use framewire::dask::{versions_like_scheduler, ConnectionPool, RpcError};
use framewire::transport::{ConnectionBuilder, HandshakeOptions};
use framewire::Value;
use tokio::sync::Semaphore;

use super::maps::HashMap;
use super::model::Model;
use super::node::Node;
use super::stats::Stats;

/// What every simulated worker shares.
#[derive(Debug)]
pub struct Shared {
    pub scheduler: String,
    pub nthreads: u32,
    pub memory_limit: Option<u64>,
    pub model: Model,
    pub builder: ConnectionBuilder,
    pub handshake: HandshakeOptions,
    /// `get_data` to peers.
    pub peers: Arc<ConnectionPool>,
    /// Heartbeats to the scheduler.
    pub heartbeats: ConnectionPool,
    /// Registrations at once (thousands of workers do not all connect in
    /// the same instant).
    pub registering: Semaphore,
    pub(super) versions: tokio::sync::Mutex<Option<Value>>,
    pub stats: Stats,
    /// Zeros, sliced for the values served.
    pub(super) zeros: Bytes,
    pub reconnect: bool,
    pub workers: usize,
    pub(super) logged: AtomicBool,
    /// A dependency held by another worker of the swarm is taken from its
    /// memory (`--memory-transfers`) instead of with `get_data` over a
    /// socket.
    pub memory_transfers: bool,
    /// Every worker of the swarm by address, set once all listen.
    pub(super) nodes: OnceLock<HashMap<String, Arc<Node>>>,
}

impl Shared {
    /// The `versions` to register with (the scheduler's, asked once).
    pub async fn versions(&self) -> Result<Value, RpcError> {
        let mut v = self.versions.lock().await;
        if v.is_none() {
            *v = Some(
                versions_like_scheduler(&self.scheduler, &self.builder, &self.handshake).await?,
            );
        }
        Ok(v.clone().expect("set above"))
    }

    /// `n` bytes for a value served (shared zeros when small enough).
    pub fn payload(&self, n: u64) -> Value {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n <= self.zeros.len() {
            Value::Bin(self.zeros.slice(..n))
        } else {
            Value::bin(vec![0u8; n])
        }
    }

    /// The worker of this swarm at `address`, if it is one.
    pub fn node(&self, address: &str) -> Option<&Arc<Node>> {
        self.nodes.get()?.get(address)
    }

    /// Whether to log a recurring event: the first time only (thousands
    /// of workers meet the same thing at once).
    pub fn log_once(&self) -> bool {
        !self.logged.swap(true, Relaxed)
    }
}
