//! A Rust data worker in a real Dask cluster: it registers with an
//! unmodified `distributed` 2026.8.0 scheduler, holds what is scattered to
//! it, serves it to Python workers, clients and the scheduler with
//! `get_data`, fetches keys from other workers when the scheduler asks
//! (`gather`, `acquire-replicas`), and never runs a task.
//!
//! ```text
//! cargo run --release --example data_worker -- SCHEDULER_ADDRESS \
//!     [--listen HOST:PORT] [--name NAME] [--memory-limit BYTES] [--nthreads N]
//!     [--tls-ca-file FILE --tls-cert FILE --tls-key FILE]
//!     [--tcp-timeout SECONDS] [--connect-timeout SECONDS] [--death-timeout SECONDS]
//! ```
//!
//! Started before its scheduler (in docker-compose or Kubernetes, say), it
//! waits for it as a Dask worker does (`Worker._register_with_scheduler`):
//! each attempt connects as Dask's `connect()` (retrying for
//! `--connect-timeout`, Dask's `distributed.comm.timeouts.connect`, 30 s by
//! default), and between attempts it logs `waiting to connect to ADDRESS`
//! and tries again, for ever, or until `--death-timeout` has passed (then
//! exit status 1, as `dask worker --death-timeout`). Every connection gets
//! TCP keepalive from `--tcp-timeout` (Dask's
//! `distributed.comm.timeouts.tcp`, 30 s; at least 11), so a scheduler that
//! goes silent (its host died, a partition) is noticed within about that
//! time.
//!
//! With the three TLS files (Dask's `dask worker` flags; the example needs
//! framewire's `tls` feature: `--features tls`) it joins a `tls://` cluster:
//! it connects to the scheduler and to other workers over TLS and listens on
//! `tls://` (a client certificate required), as a Dask worker of a cluster
//! with `require_encryption` does.
//!
//! It prints `listening on tcp://HOST:PORT` (or `tls://`; the address it
//! registered under) and runs until the scheduler closes it (exit status 0: after
//! `client.retire_workers([address])`, or when the scheduler shuts down
//! cleanly). A scheduler that goes away (its stream ends without `close`,
//! or stops answering for `--tcp-timeout`, or no heartbeat goes through
//! for 30 s) is one line on stderr and exit status 1. A malformed or unexpected message is one line on stderr; the
//! connection it came on goes on. `--memory-limit` is reported to the
//! scheduler, not enforced.
//!
//! Zero-copy: every connection is pass-through (`deserialize_blocks(false)`),
//! so a value arrives as a block whose frames are views of the receive
//! buffers, is held as such, and is written back from those same frames.
//! The bytes the worker sent and the bytes its sends copied (small frames
//! coalesced next to the prelude) are in its heartbeat metrics, under
//! `framewire`.
//!
//! Never computing: the scheduler picks a worker for a task among its
//! *running* workers and prefers those holding the task's dependencies, so
//! tasks whose inputs live here are sent here. This worker answers each
//! `compute-task` with `worker-status-change` `"paused"` then `reschedule`:
//! the scheduler (`_reschedule`) releases the task and, as this worker is
//! no longer running, decides again among the others; the client sees
//! nothing. After `HOLD` without a new task, the worker is `"running"`
//! again, which `client.scatter(..., workers=[it])` needs (the scheduler
//! waits up to the client's timeout, 30 s, for a paused target).
//! Limits: (1) it needs another running worker; without one a task bounces
//! once per `HOLD` and waits; (2) a task restricted to this worker
//! (`workers=[it]`, `allow_other_workers=False`) never runs; (3) while every
//! other worker is saturated, queued root tasks may come here and bounce
//! once per `HOLD`, costing the scheduler a few transitions each;
//! (4) `client.run` on every worker fails here (no code runs here).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use framewire::dask::{
    gather_from_workers, register_worker, versions_like_scheduler, AddKeys, BatchedWriter,
    CloseStream, DataStore, GatherReply, Heartbeats, Key, Map, Op, RegisterWorker,
    ReleaseWorkerData, RequestError, Requests, Reschedule, SchedulerToWorker, StealResponse,
    WorkerIdentity, WorkerMetrics, WorkerRequest, WorkerStatusChange, WorkerStream,
};
use framewire::transport::{ConnectionBuilder, HandshakeOptions, Socket};
use framewire::Value;
use tokio::net::TcpListener;
use tokio::time::{sleep_until, Instant};

/// How long the worker stays paused after giving a task back.
const HOLD: Duration = Duration::from_millis(100);
/// Heartbeats failing for this long mean the scheduler is gone.
const GIVE_UP: Duration = Duration::from_secs(30);
/// Time a `get_data` caller gets to acknowledge the reply.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

const USAGE: &str = "usage: data_worker SCHEDULER_ADDRESS [--listen HOST:PORT] [--name NAME] \
                     [--memory-limit BYTES] [--nthreads N] \
                     [--tls-ca-file FILE --tls-cert FILE --tls-key FILE] \
                     [--tcp-timeout SECONDS] [--connect-timeout SECONDS] [--death-timeout SECONDS]";

/// Between two rounds of attempts to reach the scheduler (Dask's worker
/// sleeps 0.1 s).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

macro_rules! log {
    ($($arg:tt)*) => { eprintln!("data_worker: {}", format_args!($($arg)*)) };
}

struct Args {
    scheduler: String,
    listen: String,
    name: Option<String>,
    memory_limit: Option<u64>,
    nthreads: u32,
    /// `--tls-ca-file`, `--tls-cert`, `--tls-key`.
    tls: [Option<String>; 3],
    /// `--tcp-timeout` (`0`: none).
    tcp_timeout: Option<Duration>,
    connect_timeout: Duration,
    death_timeout: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let (mut it, mut positional) = (std::env::args().skip(1), Vec::new());
    let (mut listen, mut name, mut memory_limit, mut nthreads) =
        ("127.0.0.1:0".into(), None, None, 1);
    let mut tls: [Option<String>; 3] = Default::default();
    let (mut tcp_timeout, mut connect_timeout, mut death_timeout) =
        (Some(Duration::from_secs(30)), Duration::from_secs(30), None);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{arg}: {e}"));
        let seconds = |v: String| match v.parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(format!("{arg}: {v:?} is not a number of seconds above 0")),
        };
        match arg.as_str() {
            "--tcp-timeout" => {
                let secs = number(value()?)?;
                let min = ConnectionBuilder::MIN_TCP_TIMEOUT.as_secs();
                if secs != 0 && secs < min {
                    return Err(format!("--tcp-timeout: at least {min} s, or 0 for none"));
                }
                tcp_timeout = (secs != 0).then(|| Duration::from_secs(secs));
            }
            "--connect-timeout" => connect_timeout = seconds(value()?)?,
            "--death-timeout" => death_timeout = Some(seconds(value()?)?),
            "--listen" => listen = value()?,
            "--name" => name = Some(value()?),
            "--memory-limit" => memory_limit = Some(number(value()?)?),
            "--tls-ca-file" => tls[0] = Some(value()?),
            "--tls-cert" => tls[1] = Some(value()?),
            "--tls-key" => tls[2] = Some(value()?),
            "--nthreads" => {
                nthreads = number(value()?)?
                    .try_into()
                    .map_err(|_| "--nthreads: too large")?
            }
            a if a.starts_with('-') => return Err(format!("unknown option {a}\n{USAGE}")),
            _ => positional.push(arg),
        }
    }
    match <[String; 1]>::try_from(positional) {
        Ok([scheduler]) => Ok(Args {
            scheduler,
            listen,
            name,
            memory_limit,
            nthreads,
            tls,
            tcp_timeout,
            connect_timeout,
            death_timeout,
        }),
        Err(_) => Err(USAGE.into()),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let code = match parse_args() {
        Err(e) => {
            log!("{e}");
            2
        }
        Ok(args) => match run(args).await {
            Ok(reason) => {
                log!("closed by the scheduler ({reason})");
                0
            }
            Err(e) => {
                log!("error: {e}");
                1
            }
        },
    };
    std::process::exit(code);
}

/// Sets the builder's TLS certificates (`tls://` both ways).
#[cfg(feature = "tls")]
fn tls(builder: &mut ConnectionBuilder, ca: &str, cert: &str, key: &str) -> Result<(), String> {
    let config = framewire::transport::TlsConfig::from_pem_files(
        ca.as_ref(),
        cert.as_ref(),
        Some(key.as_ref()),
    )
    .map_err(|e| e.to_string())?;
    builder.tls(config);
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn tls(_: &mut ConnectionBuilder, _: &str, _: &str, _: &str) -> Result<(), String> {
    Err(
        "TLS needs framewire's `tls` feature (cargo run --features tls --example data_worker)"
            .into(),
    )
}

/// What every connection of the worker shares.
struct Worker {
    address: String,
    identity: WorkerIdentity,
    builder: ConnectionBuilder,
    opts: HandshakeOptions,
    store: Mutex<DataStore>,
    stream: BatchedWriter,
    bytes_sent: AtomicU64,
    bytes_copied_on_send: AtomicU64,
}

async fn run(args: Args) -> Result<String, String> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let mut builder = ConnectionBuilder::new();
    builder.deserialize_blocks(false); // blocks stay as they came: zero-copy
    let scheme = match &args.tls {
        [None, None, None] => "tcp",
        [Some(ca), Some(cert), Some(key)] => {
            tls(&mut builder, ca, cert, key)?;
            "tls"
        }
        _ => return Err("TLS needs --tls-ca-file, --tls-cert and --tls-key".into()),
    };
    let address = format!(
        "{scheme}://{}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let opts = HandshakeOptions::default();
    builder
        .tcp_timeout(args.tcp_timeout)
        .connect_timeout(Some(args.connect_timeout));
    let name = Value::str(args.name.as_deref().unwrap_or(&address));
    let mut registration = RegisterWorker::new(&address, name, args.nthreads, args.memory_limit);
    let register = wait_for_scheduler(&args.scheduler, &builder, &opts, &mut registration);
    let WorkerStream {
        mut reader, writer, ..
    } = match args.death_timeout {
        None => register.await,
        Some(t) => tokio::time::timeout(t, register).await.unwrap_or_else(|_| {
            Err(format!(
                "cannot register with {}: no scheduler within the death timeout ({} s)",
                args.scheduler,
                t.as_secs_f64()
            ))
        }),
    }?;
    println!("listening on {address}");
    let w = Arc::new(Worker {
        identity: WorkerIdentity {
            type_: "Worker".into(),
            id: registration.server_id,
            scheduler: args.scheduler.clone(),
            nthreads: args.nthreads,
            memory_limit: args.memory_limit,
        },
        address,
        builder,
        opts,
        store: Mutex::new(DataStore::new()),
        stream: writer,
        bytes_sent: AtomicU64::new(0),
        bytes_copied_on_send: AtomicU64::new(0),
    });
    w.send(&WorkerStatusChange::new("running"));
    tokio::spawn(accept(listener, w.clone()));
    let beats = Heartbeats::new(
        &args.scheduler,
        &w.address,
        w.builder.clone(),
        w.opts.clone(),
    );
    let metrics = {
        let w = w.clone();
        move || w.metrics()
    };
    let mut heartbeats = tokio::spawn(beats.run(GIVE_UP, metrics));

    // The scheduler's stream. `running`: the status the scheduler last set
    // is running (or paused); `paused_until`: paused after giving tasks back.
    let (mut running, mut paused_until, mut given_back) = (true, None::<Instant>, 0u64);
    loop {
        let resume = sleep_until(paused_until.unwrap_or_else(Instant::now));
        tokio::select! {
            op = reader.recv_value() => match op {
                None => return Err("the scheduler closed the stream".into()),
                Some(Err(e)) => return Err(format!("lost the scheduler: {e}")),
                Some(Ok(op)) => match SchedulerToWorker::from_value(op) {
                    Err(e) => log!("ignoring a malformed message from the scheduler: {e}"),
                    Ok(SchedulerToWorker::ComputeTask(task)) => {
                        if running && paused_until.is_none() {
                            w.send(&WorkerStatusChange::new("paused"));
                        }
                        if running {
                            paused_until = Some(Instant::now() + HOLD);
                        }
                        w.send(&Reschedule::new(task.key));
                        given_back += 1;
                    }
                    Ok(SchedulerToWorker::StealRequest(r)) => w.send(&StealResponse {
                        key: r.key, state: Some("released".into()), op: Op::new(), stimulus_id: r.stimulus_id,
                    }),
                    Ok(SchedulerToWorker::FreeKeys(m)) => w.drop_keys(&m.keys, &m.stimulus_id),
                    Ok(SchedulerToWorker::RemoveReplicas(m)) => w.drop_keys(&m.keys, &m.stimulus_id),
                    Ok(SchedulerToWorker::AcquireReplicas(m)) => {
                        let w = w.clone();
                        tokio::spawn(async move { w.fetch(&m.who_has, m.stimulus_id).await });
                    }
                    Ok(SchedulerToWorker::WorkerStatusChange(m)) => {
                        running = matches!(m.status.as_str(), "running" | "paused");
                        paused_until = paused_until.filter(|_| running);
                        let paused = paused_until.is_some();
                        w.send(&WorkerStatusChange::new(if paused { "paused" } else { &m.status }));
                    }
                    Ok(SchedulerToWorker::Close(m)) => {
                        w.send(&CloseStream { op: Op::new() });
                        tokio::time::sleep(Duration::from_millis(50)).await; // the batch goes out
                        return Ok(m.reason.unwrap_or_default());
                    }
                    // Another worker left: nothing here refers to it.
                    Ok(other) if other.op() == Some("remove-worker") => {}
                    Ok(other) => log!("ignoring {:?} from the scheduler", other.op().unwrap_or("a message without op")),
                },
            },
            _ = resume, if paused_until.is_some() => {
                paused_until = None;
                if running {
                    w.send(&WorkerStatusChange::new("running"));
                }
                log!("gave {given_back} task(s) back to the scheduler (this worker never computes)");
                given_back = 0;
            }
            why = &mut heartbeats => return Err(why.map_or_else(|e| e.to_string(), |e| e.to_string())),
        }
    }
}

/// Registers with the scheduler, waiting for it as a Dask worker does:
/// attempts (each retrying for the connect timeout) until one gets through,
/// logging each failed one; a refusal or an unexpected reply ends it.
async fn wait_for_scheduler(
    scheduler: &str,
    builder: &ConnectionBuilder,
    opts: &HandshakeOptions,
    registration: &mut RegisterWorker,
) -> Result<WorkerStream, String> {
    // Dask's worker retries while the scheduler is unreachable; a TLS
    // refusal or an unreadable handshake is final.
    loop {
        let attempt = async {
            registration.versions = versions_like_scheduler(scheduler, builder, opts).await?;
            register_worker(scheduler, builder, opts, registration).await
        };
        match attempt.await {
            Ok(stream) => return Ok(stream),
            Err(e) if e.is_unreachable() => {
                log!("waiting to connect to {scheduler} ({e})");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(format!("cannot register with {scheduler}: {e}")),
        }
    }
}

impl Worker {
    /// Queues an op on the scheduler stream (a failed stream ends the
    /// main loop).
    fn send<M: serde::Serialize>(&self, msg: &M) {
        if let Err(e) = self.stream.send(msg) {
            log!("cannot send to the scheduler: {e}");
        }
    }

    fn metrics(&self) -> Value {
        let mut m = WorkerMetrics::new(self.store.lock().unwrap().nbytes());
        let counters = Value::map_of([
            ("bytes_sent", self.bytes_sent.load(Relaxed).into()),
            (
                "bytes_copied_on_send",
                self.bytes_copied_on_send.load(Relaxed).into(),
            ),
        ]);
        m.extra.insert("framewire".into(), counters);
        m.to_value()
    }

    /// Drops these keys, telling the scheduler of each one it held.
    fn drop_keys(&self, keys: &[Key], stimulus_id: &str) {
        let mut store = self.store.lock().unwrap();
        for key in keys.iter().filter(|k| store.remove(k)) {
            self.send(&ReleaseWorkerData::new(key.clone(), stimulus_id.into()));
        }
    }

    /// Fetches the keys of `who_has` it does not hold from their holders,
    /// stores them and tells the scheduler (`add-keys`); returns the keys
    /// that could not be fetched.
    async fn fetch(&self, who_has: &Map<Key, Vec<String>>, stimulus_id: String) -> Vec<Key> {
        let mut who_has = who_has.clone();
        who_has.retain(|k, _| !self.store.lock().unwrap().contains(k));
        let got =
            gather_from_workers(&who_has, Some(&self.address), &self.builder, &self.opts).await;
        for (worker, why) in &got.failed_workers {
            log!("cannot fetch from {worker}: {why}");
        }
        let keys: Vec<Key> = got.data.keys().cloned().collect();
        let mut store = self.store.lock().unwrap();
        for (key, value) in got.data {
            store.insert(key, value);
        }
        if !keys.is_empty() {
            self.send(&AddKeys::new(keys, stimulus_id));
        }
        got.missing
    }

    /// Answers one request, counting the bytes sent (and copied to send).
    async fn handle(&self, rq: &mut Requests<Socket>, req: WorkerRequest) -> Result<(), String> {
        let before = rq.connection().stats();
        match req {
            WorkerRequest::GetData(m) => {
                let reply = self.store.lock().unwrap().get_data(m.keys.keys());
                rq.reply_get_data(&reply, ACK_TIMEOUT).await
            }
            WorkerRequest::UpdateData(m) => {
                let reply = self.store.lock().unwrap().update_data(m);
                rq.reply(&reply).await
            }
            WorkerRequest::Gather(m) => {
                let missing = self
                    .fetch(&m.who_has, framewire::dask::runtime::stimulus_id("gather"))
                    .await;
                let status = if missing.is_empty() {
                    "OK"
                } else {
                    "partial-fail"
                };
                let keys = Some(missing).filter(|k| !k.is_empty());
                rq.reply(&GatherReply {
                    status: status.into(),
                    keys,
                })
                .await
            }
            WorkerRequest::FreeKeys(m) => {
                self.drop_keys(&m.keys, &m.stimulus_id);
                rq.reply(&()).await
            }
            WorkerRequest::Identity(_) => rq.reply(&self.identity).await,
            other => {
                let op = other.op().unwrap_or("?").to_owned();
                log!("no handler for op {op:?} (a data worker runs no code)");
                rq.reply_error(&format!("the Rust data worker has no handler for {op:?}"))
                    .await
            }
        }
        .map_err(|e| e.to_string())?;
        let after = rq.connection().stats();
        self.bytes_sent
            .fetch_add(after.bytes_sent - before.bytes_sent, Relaxed);
        let copied = after.bytes_copied_on_send - before.bytes_copied_on_send;
        self.bytes_copied_on_send.fetch_add(copied, Relaxed);
        Ok(())
    }
}

/// Serves every connection made to the worker, each in a task of its own.
async fn accept(listener: TcpListener, w: Arc<Worker>) {
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let w = w.clone();
        tokio::spawn(async move {
            let mut rq = match w.builder.accept(socket, &w.opts).await {
                Ok((conn, _)) => Requests::new(conn),
                Err(e) => return log!("connection from {peer}: handshake failed: {e}"),
            };
            while let Some(req) = rq.next::<WorkerRequest>().await {
                let result = match req {
                    Ok(req) => w.handle(&mut rq, req).await,
                    Err(RequestError::Bad(e)) => {
                        log!("connection from {peer}: {e}");
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = result {
                    return log!("connection from {peer}: {e}");
                }
            }
        });
    }
}
