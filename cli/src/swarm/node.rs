//! What a simulated worker shows the rest of the swarm: its address, the
//! keys it holds, and the inbox through which its listener, its fetches
//! and its heartbeats reach its main loop (`worker.rs`).

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use framewire::dask::{HeartbeatReply, Key, RpcError};
use framewire::Value;

use super::fetch::Answer;
use super::maps::HashMap;

/// What a worker's connections share with its main loop.
#[derive(Debug)]
pub struct Node {
    /// `tcp://host:port` (or `tls://`).
    pub address: String,
    /// Keys in memory, with their declared sizes.
    pub held: Mutex<HashMap<Key, u64>>,
    /// The `server_id` of the current registration.
    pub server_id: Mutex<String>,
    /// The current registration's events from the worker's connections
    /// (a `free_keys` RPC).
    pub events: Mutex<Option<Arc<Inbox>>>,
    /// `get_data` replies sent and not yet acknowledged
    /// (`Worker.transfer_outgoing_count`).
    pub outgoing: AtomicU32,
}

/// Events for a registration's main loop from its other tasks (fetches,
/// heartbeats, `free_keys` RPCs): a queue under a lock, with the loop's
/// waker. The loop polls it at every turn, which costs one uncontended
/// lock when it is empty. (An empty tokio channel's poll reads its block
/// list, cold in the cache at 1 000 workers: 4.6 % of the swarm's CPU in a
/// call-graph profile of the 1 000-worker independent workload, where
/// this inbox takes 0.9 %.)
#[derive(Debug, Default)]
pub struct Inbox(Mutex<Queue>);

#[derive(Debug, Default)]
struct Queue {
    events: Vec<Event>,
    waker: Option<Waker>,
    /// The registration ended: events are dropped.
    closed: bool,
}

impl Inbox {
    pub fn send(&self, ev: Event) {
        let waker = {
            let mut q = self.0.lock().expect("not poisoned");
            if q.closed {
                return;
            }
            q.events.push(ev);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The events queued, or pending (the task woken) until one is.
    pub fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Vec<Event>> {
        let mut q = self.0.lock().expect("not poisoned");
        if q.events.is_empty() {
            if !q.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                q.waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        Poll::Ready(std::mem::take(&mut q.events))
    }

    pub fn close(&self) {
        let mut q = self.0.lock().expect("not poisoned");
        q.closed = true;
        q.events.clear();
        q.waker = None;
    }
}

/// What the main loop hears besides the scheduler's stream.
#[derive(Debug)]
pub enum Event {
    /// A `get_data` to `worker` for `keys`, from `start` to `stop`, ended.
    Gathered {
        worker: String,
        keys: Vec<Key>,
        answer: Answer,
        start: f64,
        stop: f64,
    },
    /// A heartbeat's answer.
    Beat(Result<HeartbeatReply, RpcError>),
    /// `free_keys` came as an RPC.
    FreeKeys(Vec<Key>, String),
}

/// The `op` of a message the library does not type.
pub fn op_of(v: &Value) -> &str {
    v.get("op").and_then(Value::as_str).unwrap_or("?")
}
