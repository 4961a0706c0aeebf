//! `framewire swarm`: thousands of simulated Dask workers in one process,
//! against a real scheduler. Each worker has its own listening address and
//! its own batched stream to the scheduler, and answers as a Python worker
//! answers, but computes nothing: a task "runs" for the model's duration
//! and its result is `nbytes` of bytes. All workers share one tokio
//! runtime (its timers and sockets), the configuration, and two
//! connection pools: one to the scheduler for heartbeats (Dask's worker
//! has a pooled `rpc` to it too) and one to peers for `get_data`.

mod fetch;
mod maps;
mod model;
mod node;
mod plot;
mod priority;
mod serve;
mod shared;
mod stats;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use framewire::dask::ConnectionPool;
use framewire::transport::{Address, ConnectionBuilder, HandshakeOptions};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::args::Connect;
pub use model::{parse_nbytes, parse_task_ms, Model, TaskTime};
use node::Node;
use shared::Shared;
use stats::Stats;

/// `framewire swarm`'s options.
#[derive(Clone, Debug)]
pub struct Options {
    pub scheduler: String,
    pub workers: usize,
    pub nthreads: u32,
    pub memory_limit: Option<u64>,
    pub name_prefix: String,
    pub listen_host: String,
    pub model: Model,
    pub run_for: Option<Duration>,
    pub output: Option<String>,
    /// Draw the timeline here (PNG).
    pub plot: Option<String>,
    /// Leave (as Dask's worker does) instead of registering again when
    /// the scheduler goes away.
    pub exit_on_scheduler_loss: bool,
    /// Transfers between the swarm's own workers from memory, not with
    /// `get_data` over sockets.
    pub memory_transfers: bool,
    pub connect: Connect,
}

/// Raises the soft limit of open files to the hard one (each simulated
/// worker holds a listener, a stream and sometimes more); the limit now,
/// if known.
fn raise_fd_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let mut l = getrlimit(Resource::Nofile);
        if l.current < l.maximum {
            l.current = l.maximum;
            let _ = setrlimit(Resource::Nofile, l);
        }
        getrlimit(Resource::Nofile).current
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The open `get_data` connections the swarm's one pool of them keeps at
/// most. Dask's worker has a pool of its own limited to 512
/// (`Server`'s `rpc = ConnectionPool(limit=connection_limit)`, `core.py:370`);
/// the swarm's workers share one, so 512 would make a thousand workers
/// fetching from a thousand peers close and open a connection for most
/// transfers. As many as the open files allow instead: a connection
/// between two of the swarm's workers takes two, each worker about three
/// of its own (its listener, its stream, its heartbeat connection), with
/// some to spare.
fn peer_connection_limit(workers: usize, open_files: Option<u64>) -> usize {
    let dask = 512;
    let Some(files) = open_files.and_then(|f| usize::try_from(f).ok()) else {
        return dask;
    };
    let spare = files.saturating_sub(3 * workers + 256) / 2;
    spare.max(dask)
}

/// Resolves at the first SIGTERM (a supervisor's stop, `kill`), which
/// stops the swarm as Ctrl-C does: the workers leave cleanly and the
/// results are written.
#[cfg(unix)]
fn terminated() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    Ok(async move {
        term.recv().await;
    })
}

#[cfg(not(unix))]
fn terminated() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(std::future::pending::<()>())
}

/// Runs the swarm until Ctrl-C, SIGTERM, `--for`, or every worker is gone; writes
/// the results and prints the summary line. `Ok(false)`: a worker could
/// not register.
pub fn run(opts: &Options, out: &mut impl std::io::Write) -> Result<bool, String> {
    let address = Address::parse(&opts.scheduler).map_err(|e| e.to_string())?;
    if let Some(path) = &opts.plot {
        plot::check_name(path)?;
    }
    let mut builder = ConnectionBuilder::new();
    opts.connect.configure(&mut builder, &address)?;
    builder.deserialize_blocks(false);
    let scheme = match address {
        Address::Tls(_) => "tls",
        Address::Tcp(_) => "tcp",
    };
    let open_files = raise_fd_limit();
    let peer_limit = peer_connection_limit(opts.workers, open_files);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let (results, summary, ok) = rt.block_on(async {
        let handshake = HandshakeOptions::default();
        let sh = Arc::new(Shared {
            scheduler: opts.scheduler.clone(),
            nthreads: opts.nthreads,
            memory_limit: opts.memory_limit,
            model: opts.model.clone(),
            // As Dask's pool, idle connections are kept whatever their
            // address, up to the limit (a shuffle's fetch asks one holder
            // many times at once; four idle per address closed the rest).
            peers: Arc::new(
                ConnectionPool::new(builder.clone(), handshake.clone())
                    .limit(peer_limit)
                    .idle_per_address(peer_limit),
            ),
            // One connection a worker kept idle between its heartbeats, as
            // each Dask worker's own pool keeps its comm to the scheduler
            // (`self.scheduler = self.rpc(scheduler_addr)`, `worker.py:770`;
            // `ConnectionPool.reuse` keeps it, `core.py:1497`): at 64, the
            // heartbeats of a thousand workers, which come in bursts, closed
            // and opened connections (the scheduler accepting each).
            heartbeats: ConnectionPool::new(builder.clone(), handshake.clone())
                .idle_per_address(opts.workers.max(1))
                .limit(opts.workers.max(1)),
            builder,
            handshake,
            registering: Semaphore::new(64),
            versions: tokio::sync::Mutex::new(None),
            stats: Stats::new(),
            zeros: Bytes::from(vec![0u8; 1 << 20]),
            reconnect: !opts.exit_on_scheduler_loss,
            workers: opts.workers,
            logged: AtomicBool::new(false),
            memory_transfers: opts.memory_transfers,
            nodes: OnceLock::new(),
        });
        // The reason each worker closes with, as `dask worker` closes on a
        // signal (`reason=f"signal-{signum}"`, `cli/dask_worker.py:430`);
        // `--for` has no Python counterpart: `Worker.close`'s default.
        let (stop_tx, stop) = watch::channel(None);
        let mut set = tokio::task::JoinSet::new();
        let mut servers = tokio::task::JoinSet::new();
        let mut listening = Vec::with_capacity(opts.workers);
        for i in 0..opts.workers {
            let listener = TcpListener::bind((opts.listen_host.as_str(), 0))
                .await
                .map_err(|e| format!("cannot listen on {}: {e} (worker {i})", opts.listen_host))?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            let node = Arc::new(Node {
                address: format!("{scheme}://{local}"),
                held: Mutex::new(Default::default()),
                server_id: Mutex::new(String::new()),
                events: Mutex::new(None),
                outgoing: Default::default(),
            });
            listening.push((listener, node));
        }
        let nodes = listening
            .iter()
            .map(|(_, n)| (n.address.clone(), n.clone()))
            .collect();
        sh.nodes.set(nodes).expect("set once");
        for (i, (listener, node)) in listening.into_iter().enumerate() {
            servers.spawn(serve::accept(listener, node.clone(), sh.clone()));
            let name = format!("{}{i}", opts.name_prefix);
            set.spawn(worker::run(sh.clone(), name, node, stop.clone()));
        }
        // Sampling, and one line once every worker is registered.
        let sampler = {
            let sh = sh.clone();
            let n = opts.workers as u64;
            tokio::spawn(async move {
                let mut said = false;
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    sh.stats.sample();
                    if !said && sh.stats.registered.load(Relaxed) >= n {
                        said = true;
                        println!("swarm: {n} workers registered");
                    }
                }
            })
        };
        let deadline = async {
            match opts.run_for {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let mut ok = true;
        let mut stopped = false;
        tokio::pin!(deadline);
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let term = terminated()?;
        tokio::pin!(term);
        let mut exits = (0usize, 0usize);
        let mut removal = None;
        while !set.is_empty() {
            tokio::select! {
                _ = &mut deadline, if !stopped => { stopped = true; let _ = stop_tx.send(Some("worker-close")); }
                _ = &mut ctrl_c, if !stopped => { stopped = true; let _ = stop_tx.send(Some("signal-2")); }
                _ = &mut term, if !stopped => { stopped = true; let _ = stop_tx.send(Some("signal-15")); }
                Some(done) = set.join_next() => match done {
                    Ok(worker::Exit::Failed(e)) => {
                        ok = false;
                        if sh.log_once() { eprintln!("framewire swarm: {e}"); }
                    }
                    Ok(worker::Exit::Removed(why)) => { exits.0 += 1; removal = Some(why); }
                    Ok(worker::Exit::Stopped) => exits.1 += 1,
                    Err(e) => { ok = false; eprintln!("framewire swarm: a worker failed: {e}"); }
                },
            }
        }
        sampler.abort();
        servers.abort_all();
        sh.peers.close().await;
        sh.heartbeats.close().await;
        let config = json!({
            "scheduler": opts.scheduler,
            "workers": opts.workers,
            "nthreads": opts.nthreads,
            "memory_limit": opts.memory_limit,
            "task_ms": opts.model.default.time.to_json(),
            "nbytes": opts.model.default.nbytes,
            "model": opts.model.to_json(),
            "memory_transfers": opts.memory_transfers,
            "left_when_removed": exits.0,
            "left_when_stopped": exits.1,
            "last_removal_reason": removal,
            // `get_data` connections between the swarm's workers (and to
            // workers elsewhere): opened, and calls on an idle one.
            "peer_connections": {"opened": sh.peers.opened(), "reused": sh.peers.reused()},
        });
        let (results, summary) = sh.stats.report(opts.workers, config);
        Ok::<_, String>((results, summary, ok))
    })?;
    if let Some(path) = &opts.output {
        let text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(path) = &opts.plot {
        plot::write_png(path, &results)?;
    }
    writeln!(out, "{summary}").map_err(|e| e.to_string())?;
    Ok(ok)
}
