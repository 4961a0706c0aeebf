//! A simulated worker's listener: the RPCs a peer, the scheduler or a
//! client sends a worker (`Worker.handlers`): `get_data` answered with
//! bytes of each key's declared size, `update_data`, `gather`,
//! `free_keys`, `identity`, `keys`, `ping`; anything else an error reply
//! (no code runs here).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use framewire::dask::{
    gather_from_pool, nbytes, GatherReply, GetDataReply, Key, Map, RequestError, Requests,
    UpdateDataReply, WorkerIdentity, WorkerRequest,
};
use framewire::transport::Socket;
use framewire::Value;
use tokio::net::TcpListener;

use super::node::{op_of, Event, Node};
use super::shared::Shared;

/// Time a `get_data` caller gets to acknowledge the reply.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// `get_data` replies a worker has on their way at most before it answers
/// `{"status": "busy"}`: Dask's `distributed.worker.connections.incoming`
/// (the worker's `transfer_outgoing_count_limit`, `worker.py:541`),
/// doubled for a caller on the worker's own host (`Worker.get_data`,
/// `worker.py:1639`). (Python's limit of 1 when paused never applies: a
/// simulated worker has no memory pressure to pause it.)
const OUTGOING_LIMIT: u32 = 10;

/// Serves every connection made to the worker, each in a task of its own.
pub async fn accept(listener: TcpListener, node: Arc<Node>, sh: Arc<Shared>) {
    let host = listener.local_addr().ok().map(|a| a.ip());
    loop {
        let (socket, limit) = match listener.accept().await {
            Ok((s, peer)) if Some(peer.ip()) == host => (s, 2 * OUTGOING_LIMIT),
            Ok((s, _)) => (s, OUTGOING_LIMIT),
            Err(e) => {
                if sh.log_once() {
                    eprintln!("framewire swarm: accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (node, sh) = (node.clone(), sh.clone());
        tokio::spawn(async move {
            let Ok((conn, _)) = sh.builder.accept(socket, &sh.handshake).await else {
                return;
            };
            let mut rq = Requests::new(conn);
            while let Some(req) = rq.next::<WorkerRequest>().await {
                let done = match req {
                    Ok(req) => handle(&node, &sh, &mut rq, req, limit).await,
                    Err(RequestError::Bad(_)) => Ok(()),
                    Err(_) => Err(()),
                };
                if done.is_err() {
                    return;
                }
            }
        });
    }
}

async fn handle(
    node: &Node,
    sh: &Arc<Shared>,
    rq: &mut Requests<Socket>,
    req: WorkerRequest,
    outgoing_limit: u32,
) -> Result<(), ()> {
    sh.stats.received(req.op().unwrap_or("?"));
    let sent = match req {
        WorkerRequest::GetData(_) if node.outgoing.load(Relaxed) >= outgoing_limit => {
            let busy = GetDataReply {
                status: "busy".into(),
                data: None,
            };
            rq.reply(&busy).await
        }
        WorkerRequest::GetData(m) => {
            let data: Map<Key, Value> = {
                let held = node.held.lock().expect("not poisoned");
                m.keys
                    .keys()
                    .iter()
                    .filter_map(|k| held.get(k).map(|n| (k.clone(), sh.payload(*n))))
                    .collect()
            };
            let bytes: u64 = data.values().map(nbytes).sum();
            sh.stats.bytes_served.fetch_add(bytes, Relaxed);
            let reply = GetDataReply {
                status: "OK".into(),
                data: Some(data),
            };
            // Counted until the caller's "OK" (or the connection's end).
            node.outgoing.fetch_add(1, Relaxed);
            let sent = rq.reply_get_data(&reply, ACK_TIMEOUT).await;
            node.outgoing.fetch_sub(1, Relaxed);
            sent
        }
        WorkerRequest::UpdateData(m) => {
            let sizes: Map<Key, u64> = {
                let mut held = node.held.lock().expect("not poisoned");
                m.data
                    .into_iter()
                    .map(|(k, v)| {
                        let n = nbytes(&v);
                        held.insert(k.clone(), n);
                        (k, n)
                    })
                    .collect()
            };
            let reply = UpdateDataReply {
                nbytes: sizes,
                status: "OK".into(),
            };
            rq.reply(&reply).await
        }
        WorkerRequest::Gather(m) => {
            // `Worker.gather` (rebalance, replicate): fetch what is not
            // here from the holders.
            let mut who_has = m.who_has.clone();
            {
                let held = node.held.lock().expect("not poisoned");
                who_has.retain(|k, _| !held.contains_key(k));
            }
            let got = gather_from_pool(&who_has, Some(&node.address), &sh.peers).await;
            {
                let mut held = node.held.lock().expect("not poisoned");
                for (k, v) in &got.data {
                    held.insert(k.clone(), nbytes(v));
                }
            }
            let missing = got.missing;
            let reply = GatherReply {
                status: if missing.is_empty() {
                    "OK"
                } else {
                    "partial-fail"
                }
                .into(),
                keys: Some(missing).filter(|k| !k.is_empty()),
            };
            rq.reply(&reply).await
        }
        WorkerRequest::FreeKeys(m) => {
            let inbox = node.events.lock().expect("not poisoned").clone();
            if let Some(inbox) = inbox {
                inbox.send(Event::FreeKeys(m.keys, m.stimulus_id));
            }
            rq.reply(&()).await
        }
        WorkerRequest::Identity(_) => {
            let identity = WorkerIdentity {
                type_: "Worker".into(),
                id: node.server_id.lock().expect("not poisoned").clone(),
                scheduler: sh.scheduler.clone(),
                nthreads: sh.nthreads,
                memory_limit: sh.memory_limit,
            };
            rq.reply(&identity).await
        }
        WorkerRequest::Other(v) if op_of(&v) == "keys" => {
            let keys: Vec<Key> = node
                .held
                .lock()
                .expect("not poisoned")
                .keys()
                .cloned()
                .collect();
            rq.reply(&keys).await
        }
        WorkerRequest::Other(v) if op_of(&v) == "ping" => rq.reply("pong").await,
        other => {
            let op = other.op().unwrap_or("?");
            rq.reply_error(&format!(
                "a simulated framewire swarm worker has no handler for {op:?}"
            ))
            .await
        }
    };
    sent.map_err(|_| ())
}
