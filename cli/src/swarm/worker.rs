//! One simulated worker: it registers as `dask worker` does, keeps the
//! worker-side task state the scheduler can observe (`distributed`'s
//! `worker_state_machine.py`), "runs" each task for the model's duration
//! on `nthreads` slots, fetches dependencies from their holders with
//! `get_data` as its `_ensure_communicating` does (`fetch.rs`), and
//! serves what it holds as bytes of the declared size.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use framewire::dask::runtime::{next_tick, now, stimulus_id};
use framewire::dask::{
    nbytes, register_worker, AddKeys, Bandwidth, CloseStream, ComputeTask, GetData, HeartbeatReply,
    HeartbeatWorker, KeepAlive, Key, Keys, LogEvent, Map, Number, Op, RegisterWorker,
    ReleaseWorkerData, RpcError, SchedulerToWorker, SpilledBytes, StartStop, StealResponse,
    TaskFinished, Transfer, WorkerMetrics, WorkerStatusChange, WorkerStream,
};
use framewire::transport::TransportError;
use framewire::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::fetch::{Answer, Fetches, DEFAULT_NBYTES};
use super::maps::{HashMap, HashSet};
use super::node::{op_of, Event, Inbox, Node};
use super::priority::{self, priority_of, Priority};
use super::shared::Shared;

/// Between two `keep-alive`s.
const KEEP_ALIVE: Duration = Duration::from_secs(60);

/// Between two registration attempts (Dask's worker sleeps 0.1 s).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How a simulated worker's life ended.
#[derive(Debug)]
pub enum Exit {
    /// The scheduler closed it (`close`, or heartbeat `missing`).
    Removed(String),
    /// The swarm is stopping (Ctrl-C, `--for`).
    Stopped,
    /// It cannot register.
    Failed(String),
}

/// Registers (waiting for the scheduler as a Dask worker does), runs, and
/// registers again when the scheduler goes away without closing the
/// worker (as a `dask worker` restarted by its supervisor would), until
/// stopped or removed.
pub async fn run(
    sh: Arc<Shared>,
    name: String,
    node: Arc<Node>,
    mut stop: watch::Receiver<Option<&'static str>>,
) -> Exit {
    let mut first = true;
    loop {
        let registered = tokio::select! {
            r = register(&sh, &name, &node, first) => r,
            _ = stopped(&mut stop) => return Exit::Stopped,
        };
        first = false;
        let stream = match registered {
            Ok(s) => s,
            Err(e) => return Exit::Failed(e),
        };
        sh.stats.registered.fetch_add(1, Relaxed);
        sh.stats.registrations.fetch_add(1, Relaxed);
        let inbox = Arc::new(Inbox::default());
        *node.events.lock().expect("not poisoned") = Some(inbox.clone());
        let end = Sim::new(&sh, &node, stream, inbox.clone())
            .run(&mut stop)
            .await;
        sh.stats.registered.fetch_sub(1, Relaxed);
        node.events.lock().expect("not poisoned").take();
        inbox.close();
        node.held.lock().expect("not poisoned").clear();
        match end {
            End::Lost(why) if sh.reconnect => {
                if sh.log_once() {
                    eprintln!("framewire swarm: lost the scheduler ({why}); registering again");
                }
            }
            End::Lost(why) => return Exit::Removed(format!("lost the scheduler: {why}")),
            End::Removed(why) => return Exit::Removed(why),
            End::Stopped => return Exit::Stopped,
        }
    }
}

/// Resolves once the swarm stops, with the reason a Python worker would
/// close with (`Worker.close`'s `reason`).
async fn stopped(stop: &mut watch::Receiver<Option<&'static str>>) -> &'static str {
    match stop.wait_for(Option::is_some).await {
        Ok(reason) => reason.unwrap_or(CLOSE_REASON),
        Err(_) => CLOSE_REASON,
    }
}

/// One registration, retried while the scheduler cannot be reached.
async fn register(
    sh: &Shared,
    name: &str,
    node: &Node,
    first: bool,
) -> Result<WorkerStream, String> {
    let mut logged = false;
    loop {
        let attempt = async {
            let _permit = sh.registering.acquire().await.expect("never closed");
            let versions = sh.versions().await?;
            let mut msg = RegisterWorker::new(
                &node.address,
                Value::str(name),
                sh.nthreads,
                sh.memory_limit,
            );
            msg.versions = versions;
            msg.metrics = metrics(sh, node);
            let stream = register_worker(&sh.scheduler, &sh.builder, &sh.handshake, &msg).await?;
            *node.server_id.lock().expect("not poisoned") = msg.server_id;
            Ok::<_, RpcError>(stream)
        };
        match attempt.await {
            Ok(stream) => {
                sh.stats.sent("register-worker");
                return Ok(stream);
            }
            Err(e) if e.is_unreachable() => {
                if !logged && !first && sh.log_once() {
                    eprintln!(
                        "framewire swarm: waiting to connect to {} ({e})",
                        sh.scheduler
                    );
                }
                logged = true;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(format!("cannot register with {}: {e}", sh.scheduler)),
        }
    }
}

/// The metrics of a heartbeat: the data held, and the swarm's memory
/// shared among its workers.
fn metrics(sh: &Shared, node: &Node) -> Value {
    let held: u64 = node.held.lock().expect("not poisoned").values().sum();
    // As `WorkerMetrics::new`, without reading /proc for every heartbeat
    // of thousands of workers: the swarm's RSS, sampled each second.
    let m = WorkerMetrics {
        task_counts: Map::default(),
        bandwidth: Bandwidth {
            total: 100e6,
            workers: Map::default(),
            types: Map::default(),
        },
        digests_total_since_heartbeat: Map::default(),
        managed_bytes: held,
        spilled_bytes: SpilledBytes::default(),
        memory: held + sh.stats.rss.load(Relaxed) / sh.workers.max(1) as u64,
        cpu: 0.0,
        time: now(),
        extra: Map::default(),
    };
    m.to_value()
}

/// Why a registration's loop ended.
enum End {
    Lost(String),
    /// Closed, with the reason `Worker.close` is given.
    Removed(String),
    Stopped,
}

/// `Worker.close`'s reason when none is given.
const CLOSE_REASON: &str = "worker-close";

/// A task the worker knows, as `worker_state_machine.TaskState` would be.
struct Task {
    run_id: i64,
    state: State,
    /// Its transfers (`"transfer"` startstops), reported before its
    /// `compute` (`ts.startstops`).
    startstops: Vec<StartStop>,
    /// Dependencies not yet in memory here (`waiting`).
    waiting_for: Vec<Key>,
    /// Dask's priority, then the worker's `generation` (later arrivals
    /// first among equals, as `_handle_compute_task`).
    priority: Priority,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Waiting,
    Ready,
    Executing,
    /// Freed while executing: its result is dropped.
    Cancelled,
    /// Executing, and since wanted here as a dependency (`resumed`, from
    /// `executing` to `fetch`: `_transition_cancelled_fetch`, `:2116`): not
    /// fetched; its run's result is kept and reported with `add-keys`
    /// (`_transition_resumed_memory`, `:2345`).
    Resumed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Ready => "ready",
            State::Executing => "executing",
            State::Cancelled => "cancelled",
            State::Resumed => "resumed",
        }
    }
}

/// A dependency no holder gave.
struct Missing {
    /// Wanted as a replica (`acquire-replicas`), not by a task here.
    replica: bool,
    priority: Priority,
    nbytes: u64,
}

/// A task running.
struct Running {
    key: Key,
    start: f64,
    /// The model's duration of the run: the `compute` it reports is
    /// `start` to `start + duration`, whenever the runtime's timer (whole
    /// milliseconds, late by about one) gets to it; the lateness is the
    /// worker's, between the run's end and its `task-finished`, as a Python
    /// worker's event loop is between its thread's return and its report.
    duration: Duration,
    run_id: i64,
    /// Its thread: the lowest of the worker's `nthreads` free when it
    /// started, numbered from 1 (a Python worker reports the
    /// `threading.get_ident()` of its executor's thread that ran it,
    /// `worker.py:2990`: one per thread, reused).
    thread: u32,
}

/// A ready task in the queue, ordered by priority alone.
struct Ready {
    priority: Priority,
    key: Key,
}

impl PartialEq for Ready {
    fn eq(&self, other: &Ready) -> bool {
        self.priority == other.priority
    }
}

impl Eq for Ready {}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Ready) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ready {
    fn cmp(&self, other: &Ready) -> std::cmp::Ordering {
        self.priority.cmp(&other.priority)
    }
}

/// A registered worker's state.
struct Sim<'a> {
    sh: &'a Arc<Shared>,
    node: &'a Arc<Node>,
    stream: WorkerStream,
    tasks: HashMap<Key, Task>,
    /// Ready tasks by priority (Dask's priority, then `generation`: later
    /// arrivals first among equals, as `_handle_compute_task`).
    ready: BinaryHeap<Reverse<Ready>>,
    generation: i64,
    /// Executing: when each ends.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Executing: the key, its start, and the `run_id` it started with
    /// (`Worker.execute` reads it at the start, `worker.py:2130`, and
    /// reports that one, even if a `compute-task` for the task freed while
    /// it ran has brought another, `worker.py:2231`).
    executing: HashMap<u64, Running>,
    seq: u64,
    /// Dependencies on their way (`fetch`, `flight`, `cancelled`, and
    /// `resumed` from `flight`).
    fetches: Fetches,
    /// The scheduler's last status for the worker is `running`.
    running: bool,
    events: Arc<Inbox>,
    beat_interval: Duration,
    next_beat: Instant,
    beating: bool,
    /// `Worker`'s `keep-alive` on the stream, every 60 s (`worker.py:781`).
    next_keep_alive: Instant,
    /// Dependencies no holder gave (`WorkerState.missing_dep_flight`):
    /// asked of the scheduler again by `find_missing`.
    missing: HashMap<Key, Missing>,
    /// Keys `acquire-replicas` asked for, not yet here.
    acquiring: HashSet<Key>,
    /// Keys sent to be computed here while on their way from a holder
    /// (`resumed`): the `compute-task`, and the transfers that came for the
    /// key itself (`Worker._get_cause`'s last resort).
    resumed: HashMap<Key, (ComputeTask, Vec<StartStop>)>,
    /// The tasks waiting for each dependency not yet here.
    waiters: HashMap<Key, Vec<Key>>,
    /// `Worker.find_missing`'s next run (`worker.py:784`: a periodic
    /// callback, every 1 s at first, then at the heartbeat's period,
    /// `worker.py:2050`).
    next_find_missing: Instant,
}

impl<'a> Sim<'a> {
    fn new(
        sh: &'a Arc<Shared>,
        node: &'a Arc<Node>,
        stream: WorkerStream,
        events: Arc<Inbox>,
    ) -> Sim<'a> {
        // `Worker.__init__`'s heartbeat period is 1 s (`heartbeat_interval`,
        // `worker.py:777`) until the first reply of `Worker.heartbeat` sets
        // the scheduler's (`worker.py:1200`); the registration's reply does
        // not change it.
        let beat_interval = Duration::from_secs(1);
        Sim {
            sh,
            node,
            stream,
            tasks: HashMap::default(),
            ready: BinaryHeap::new(),
            generation: 0,
            timers: BinaryHeap::new(),
            executing: HashMap::default(),
            seq: 0,
            fetches: Fetches::new(&node.address, sh.memory_limit),
            running: true,
            events,
            beat_interval,
            next_beat: Instant::now() + beat_interval,
            beating: false,
            next_keep_alive: Instant::now() + KEEP_ALIVE,
            missing: HashMap::default(),
            acquiring: HashSet::default(),
            resumed: HashMap::default(),
            waiters: HashMap::default(),
            next_find_missing: Instant::now() + beat_interval,
        }
    }

    fn send<M: serde::Serialize>(&self, op: &'static str, msg: &M) {
        if self.stream.writer.send(msg).is_ok() {
            self.sh.stats.sent(op);
        }
    }

    async fn run(mut self, stop: &mut watch::Receiver<Option<&'static str>>) -> End {
        // Registered with status "init"; `running` once started, as
        // `Worker.start_unsafe` sets it.
        self.send("worker-status-change", &WorkerStatusChange::new("running"));
        // One timer for all the worker's deadlines, moved only when the
        // earliest changes (a timer made and dropped at every turn of the
        // loop costs the timer wheel's lock twice).
        let wake = tokio::time::sleep_until(self.next_deadline());
        tokio::pin!(wake);
        let mut armed = Some(self.next_deadline());
        let stop = stopped(stop);
        tokio::pin!(stop);
        loop {
            let due = self.next_deadline();
            if armed != Some(due) {
                wake.as_mut().reset(due);
                armed = Some(due);
            }
            tokio::select! {
                // Read straight into `SchedulerToWorker`s (no `Value` built
                // first); an op that does not fit is an error of its own.
                op = self.stream.reader.recv::<SchedulerToWorker>() => match op {
                    None => return End::Lost("the scheduler closed the stream".into()),
                    Some(Err(TransportError::Decode(e))) => {
                        if self.sh.log_once() {
                            eprintln!("framewire swarm: a malformed message from the scheduler: {e}");
                        }
                    }
                    Some(Err(e)) => return End::Lost(e.to_string()),
                    Some(Ok(op)) => {
                        if let Some(end) = self.on_op(op) {
                            if let End::Removed(reason) = &end {
                                self.leave(reason).await;
                            }
                            return end;
                        }
                    }
                },
                _ = &mut wake => {
                    self.on_deadlines();
                    // Re-armed at the next turn, even at the same instant.
                    armed = None;
                }
                evs = std::future::poll_fn(|cx| self.events.poll_take(cx)) => {
                    for ev in evs {
                        if let Some(end) = self.on_event(ev) {
                            if let End::Removed(reason) = &end {
                                self.leave(reason).await;
                            }
                            return end;
                        }
                    }
                }
                reason = &mut stop => {
                    self.leave(reason).await;
                    return End::Stopped;
                }
            }
        }
    }

    /// The earliest of the worker's deadlines: a task's end, the next
    /// heartbeat (unless one is on its way), `find_missing` (while keys
    /// are missing), the next `keep-alive`.
    fn next_deadline(&self) -> Instant {
        let mut t = self.next_keep_alive;
        if let Some(Reverse((end, _))) = self.timers.peek() {
            t = t.min(*end);
        }
        if !self.beating {
            t = t.min(self.next_beat);
        }
        if !self.missing.is_empty() {
            t = t.min(self.next_find_missing);
        }
        if let Some(retry) = self.fetches.next_retry() {
            t = t.min(retry);
        }
        t
    }

    /// Whatever is due at the worker's timer.
    fn on_deadlines(&mut self) {
        let now = Instant::now();
        if self
            .timers
            .peek()
            .is_some_and(|Reverse((end, _))| *end <= now)
        {
            self.finish_due();
        }
        if !self.beating && self.next_beat <= now {
            self.beat();
        }
        if !self.missing.is_empty() && self.next_find_missing <= now {
            self.find_missing();
        }
        if self.fetches.next_retry().is_some_and(|t| t <= now) {
            self.fetches.retry_busy(now);
            self.communicate();
        }
        if self.next_keep_alive <= now {
            self.next_keep_alive = now + KEEP_ALIVE;
            self.send("keep-alive", &KeepAlive { op: Op::new() });
        }
    }

    /// `Worker.close` (`worker.py:1398`): the `closing-worker` event under
    /// the worker's address with the reason (`:1453`), status `closing`,
    /// then `close-stream`, and the stream closed.
    async fn leave(self, reason: &str) {
        let event = LogEvent {
            op: Op::new(),
            topic: Value::str(&self.node.address),
            msg: Value::Map(vec![
                (Value::str("action"), Value::str("closing-worker")),
                (Value::str("reason"), Value::str(reason)),
            ]),
        };
        self.send("log-event", &event);
        self.send("worker-status-change", &WorkerStatusChange::new("closing"));
        self.send("close-stream", &CloseStream { op: Op::new() });
        let _ = self.stream.writer.close().await;
    }

    fn on_op(&mut self, msg: SchedulerToWorker) -> Option<End> {
        if !matches!(msg, SchedulerToWorker::ComputeTask(_)) {
            self.sh.stats.received(msg.op().unwrap_or("?"));
        }
        match msg {
            SchedulerToWorker::ComputeTask(t) => {
                self.sh.stats.compute_received();
                self.compute(t);
            }
            SchedulerToWorker::FreeKeys(m) => self.free_keys(&m.keys, &m.stimulus_id),
            SchedulerToWorker::RemoveReplicas(m) => {
                // `_handle_remove_replicas`: only what is in memory.
                for key in &m.keys {
                    self.release(key, &m.stimulus_id);
                }
            }
            SchedulerToWorker::AcquireReplicas(m) => {
                self.acquiring.extend(m.who_has.keys().cloned());
                self.fetch(m.who_has, &m.nbytes, priority::replica());
            }
            SchedulerToWorker::StealRequest(m) => {
                // `_handle_steal_request`: answer the task's state; give it
                // up if it has not started.
                let state = match self.tasks.get(&m.key) {
                    Some(t) => Some(t.state.name()),
                    None if self.holds(&m.key) => Some("memory"),
                    None if self.resumed.contains_key(&m.key) => Some("resumed"),
                    None => None,
                };
                if matches!(state, Some("ready" | "waiting")) {
                    self.forget_task(&m.key);
                }
                let msg = StealResponse {
                    key: m.key,
                    state: state.map(str::to_owned),
                    op: Op::new(),
                    stimulus_id: m.stimulus_id,
                };
                self.send("steal-response", &msg);
            }
            SchedulerToWorker::WorkerStatusChange(m) => {
                // `handle_worker_status_change` sets the status, whose
                // setter reports it back.
                self.running = m.status == "running";
                self.send("worker-status-change", &WorkerStatusChange::new(&m.status));
                self.start_ready();
                self.communicate();
            }
            SchedulerToWorker::Close(m) => {
                self.sh.stats.removed.fetch_add(1, Relaxed);
                // `close` calls `Worker.close(reason=...)`.
                return Some(End::Removed(
                    m.reason.unwrap_or_else(|| CLOSE_REASON.into()),
                ));
            }
            SchedulerToWorker::CloseStream(_) => {
                return Some(End::Lost("close-stream from the scheduler".into()))
            }
            // `_handle_remove_worker`: no longer a holder of anything; a key
            // waiting for it alone is missing.
            SchedulerToWorker::RemoveWorker(m) => {
                for (key, priority, n) in self.fetches.remove_worker(&m.worker) {
                    self.go_missing(key, priority, n);
                }
            }
            // `refresh-who-has`, the answer to `request-refresh-who-has`:
            // `_handle_refresh_who_has` (`worker_state_machine.py:3194`)
            // fetches a missing key from the holders it now has (`missing`
            // -> `fetch`, `:3204`), one still without holders staying
            // missing, and tells a key on its way of its holders now
            // (`_update_who_has`).
            SchedulerToWorker::Other(v) if op_of(&v) == "refresh-who-has" => {
                let who_has = v
                    .get("who_has")
                    .cloned()
                    .map(framewire::typed::from_value::<Map<Key, Vec<String>>>);
                if let Some(Ok(who_has)) = who_has {
                    for (key, holders) in who_has {
                        if holders.is_empty() {
                            continue;
                        }
                        if let Some(m) = self.missing.remove(&key) {
                            self.fetches.want(key, holders, m.nbytes, m.priority);
                        } else {
                            self.fetches.update_who_has(key, holders);
                        }
                    }
                    self.communicate();
                }
            }
            // `cancel-compute`: `_handle_cancel_compute` releases a task
            // that has not started. (`refresh-who-has` only updates where
            // peers' keys are, which each fetch is told afresh.)
            SchedulerToWorker::Other(v) if op_of(&v) == "cancel-compute" => {
                let key = v
                    .get("key")
                    .cloned()
                    .map(framewire::typed::from_value::<Key>);
                if let Some(Ok(key)) = key {
                    let state = self.tasks.get(&key).map(|t| t.state);
                    if matches!(state, Some(State::Ready | State::Waiting)) {
                        self.forget_task(&key);
                    }
                }
            }
            _ => {}
        }
        None
    }

    fn holds(&self, key: &Key) -> bool {
        self.node
            .held
            .lock()
            .expect("not poisoned")
            .contains_key(key)
    }

    /// `compute-task`, as `_handle_compute_task`: a task in memory is
    /// reported finished again; a known one keeps its state; a key on its
    /// way here waits for its transfer (`resumed`); a new one waits for the
    /// dependencies not held here, fetched from their holders, then is
    /// ready.
    fn compute(&mut self, t: ComputeTask) {
        let held = self
            .node
            .held
            .lock()
            .expect("not poisoned")
            .get(&t.key)
            .copied();
        if let Some(nbytes) = held {
            return self.report_finished(t.key, t.run_id, nbytes, Vec::new(), None);
        }
        if let Some(task) = self.tasks.get_mut(&t.key) {
            task.run_id = t.run_id;
            // Running, freed (and perhaps since wanted as a dependency):
            // it runs on for the task (`_transition_cancelled_waiting`).
            if matches!(task.state, State::Cancelled | State::Resumed) {
                task.state = State::Executing;
            }
            return;
        }
        // A key on its way from a holder: its task waits for the transfer
        // (`resumed`). One not yet asked for, or missing, is released and
        // computed (`_transition_missing_waiting`, `:1805`).
        if let Some((resumed, _)) = self.resumed.get_mut(&t.key) {
            *resumed = t;
            return;
        }
        if self.fetches.resume(&t.key) {
            self.resumed.insert(t.key.clone(), (t, Vec::new()));
            return;
        }
        self.missing.remove(&t.key);
        let waiting_for: Vec<Key> = t
            .who_has
            .keys()
            .filter(|k| !self.holds(k))
            .cloned()
            .collect();
        let state = if waiting_for.is_empty() {
            State::Ready
        } else {
            State::Waiting
        };
        let priority = priority_of(&t.priority, self.generation);
        self.generation -= 1;
        if state == State::Ready {
            self.ready.push(Reverse(Ready {
                priority,
                key: t.key.clone(),
            }));
        } else {
            for dep in &waiting_for {
                self.waiters
                    .entry(dep.clone())
                    .or_default()
                    .push(t.key.clone());
            }
            let mut who_has = t.who_has;
            who_has.retain(|k, _| waiting_for.contains(k));
            self.fetch(who_has, &t.nbytes, priority);
        }
        let task = Task {
            run_id: t.run_id,
            state,
            startstops: Vec::new(),
            waiting_for,
            priority,
        };
        self.tasks.insert(t.key, task);
        self.start_ready();
    }

    /// Starts ready tasks while threads are free and the worker runs.
    fn start_ready(&mut self) {
        while self.running && self.executing.len() < self.sh.nthreads as usize {
            let Some(Reverse(r)) = self.ready.pop() else {
                return;
            };
            let Some(task) = self.tasks.get_mut(&r.key) else {
                continue;
            };
            if task.state != State::Ready {
                continue;
            }
            task.state = State::Executing;
            let duration = self.sh.model.duration(&r.key);
            self.seq += 1;
            self.timers
                .push(Reverse((Instant::now() + duration, self.seq)));
            // A cancelled task still running keeps its thread, as in Python.
            let thread = (1..)
                .find(|n| self.executing.values().all(|e| e.thread != *n))
                .expect("fewer running than threads");
            let run = Running {
                key: r.key,
                start: now(),
                duration,
                run_id: task.run_id,
                thread,
            };
            self.executing.insert(self.seq, run);
        }
    }

    /// Tasks whose time is up finish.
    fn finish_due(&mut self) {
        let t = Instant::now();
        let mut finished = Vec::new();
        while let Some(Reverse((due, seq))) = self.timers.peek().copied() {
            if due > t {
                break;
            }
            self.timers.pop();
            let Some(run) = self.executing.remove(&seq) else {
                continue;
            };
            match self.tasks.remove(&run.key) {
                Some(task) if task.state == State::Executing => {
                    let ran = (
                        run.start,
                        run.start + run.duration.as_secs_f64(),
                        run.thread,
                    );
                    let nbytes = self.sh.model.nbytes(&run.key);
                    // Tasks here waiting for it (wanted as a dependency
                    // before it was sent to be computed here) may start.
                    if self.waiters.contains_key(&run.key) {
                        finished.push(run.key.clone());
                    }
                    self.report_finished(run.key, run.run_id, nbytes, task.startstops, Some(ran));
                }
                Some(task) if task.state == State::Resumed => {
                    let nbytes = self.sh.model.nbytes(&run.key);
                    self.add_key(&run.key, nbytes, stimulus_id("execute-success"));
                    finished.push(run.key);
                }
                // Cancelled (freed while running): dropped silently.
                _ => {}
            }
        }
        if !finished.is_empty() {
            self.deps_arrived(&finished);
        }
        self.start_ready();
    }

    /// A key now held here that the scheduler did not send to be computed
    /// here (a transfer, a run kept as a dependency): told with `add-keys`,
    /// one a key (`_transition_flight_memory`, `_transition_resumed_memory`).
    fn add_key(&mut self, key: &Key, nbytes: u64, stimulus_id: String) {
        self.acquiring.remove(key);
        self.node
            .held
            .lock()
            .expect("not poisoned")
            .insert(key.clone(), nbytes);
        self.send("add-keys", &AddKeys::new(vec![key.clone()], stimulus_id));
    }

    /// `task-finished` of a result of `nbytes`, after the task's
    /// transfers: of a run from `start` to `stop` on `thread`, or (`ran:
    /// None`) of a key held here, which reports its size and no run (its
    /// first report is not kept, as a replica's is not).
    fn report_finished(
        &mut self,
        key: Key,
        run_id: i64,
        nbytes: u64,
        mut startstops: Vec<StartStop>,
        ran: Option<(f64, f64, u32)>,
    ) {
        self.node
            .held
            .lock()
            .expect("not poisoned")
            .insert(key.clone(), nbytes);
        if let Some((start, stop, _)) = ran {
            startstops.push(StartStop {
                action: "compute".into(),
                start,
                stop,
                source: None,
            });
        }
        let msg = TaskFinished {
            key,
            run_id,
            nbytes,
            type_: framewire::typed::Bin::from(PICKLED_BYTES_TYPE),
            typename: "bytes".into(),
            metadata: Value::Map(Vec::new()),
            thread: ran.map(|(_, _, thread)| u64::from(thread)),
            startstops,
            op: Op::new(),
            stimulus_id: stimulus_id("task-finished"),
            status: "OK".into(),
        };
        if self.stream.writer.send(&msg).is_ok() {
            self.sh.stats.task_finished();
        }
    }

    /// Drops a key in memory, telling the scheduler
    /// (`_transition_memory_released`).
    fn release(&self, key: &Key, stimulus_id: &str) {
        let held = self
            .node
            .held
            .lock()
            .expect("not poisoned")
            .remove(key)
            .is_some();
        if held {
            self.send(
                "release-worker-data",
                &ReleaseWorkerData::new(key.clone(), stimulus_id.into()),
            );
        }
    }

    /// `free-keys`: every task released; a running one's result dropped,
    /// a key in flight dropped when it arrives.
    fn free_keys(&mut self, keys: &[Key], stimulus_id: &str) {
        for key in keys {
            self.release(key, stimulus_id);
            self.missing.remove(key);
            self.acquiring.remove(key);
            self.resumed.remove(key);
            self.fetches.release(key);
            match self.tasks.get_mut(key) {
                // `_transition_executing_released`, `_transition_resumed_released`.
                Some(t) if matches!(t.state, State::Executing | State::Resumed) => {
                    t.state = State::Cancelled
                }
                Some(t) if t.state == State::Cancelled => {}
                Some(_) => self.forget_task(key),
                None => {}
            }
        }
    }

    /// A task released before it ran (`free-keys`, a steal,
    /// `cancel-compute`), as `_transition_generic_released`
    /// (`worker_state_machine.py:1858`): each dependency it was waiting for
    /// that no other task here waits for is released too. One in flight is
    /// `cancelled` (`_transition_flight_released`, `:2253`): when it
    /// arrives it is dropped without a word to the scheduler
    /// (`_transition_cancelled_released`, `:2181`), unless a task wants it
    /// again first (`_transition_cancelled_fetch`, `:2116`).
    fn forget_task(&mut self, key: &Key) {
        let Some(task) = self.tasks.remove(key) else {
            return;
        };
        for dep in task.waiting_for {
            let (tasks, waiters) = (&self.tasks, &mut self.waiters);
            let waited = waiters.get_mut(&dep).is_some_and(|ws| {
                ws.retain(|w| w != key);
                ws.iter().any(|w| {
                    tasks
                        .get(w)
                        .is_some_and(|t| t.state == State::Waiting && t.waiting_for.contains(&dep))
                })
            });
            if waited {
                continue;
            }
            waiters.remove(&dep);
            // Released even if `acquire-replicas` asked for it (Python's
            // `waiters` know nothing of that): a missing one is not asked
            // for again (`_transition_missing_released`, `:1824`).
            self.acquiring.remove(&dep);
            self.missing.remove(&dep);
            self.fetches.release(&dep);
            // A run here kept for it goes back to being dropped
            // (`_transition_resumed_released`).
            if let Some(t) = self.tasks.get_mut(&dep) {
                if t.state == State::Resumed {
                    t.state = State::Cancelled;
                }
            }
        }
    }

    /// The keys of `who_has` not held here are wanted from their holders
    /// (`fetch`, or `missing` without any), with the scheduler's sizes and
    /// at `priority` (the dependent task's: `_ensure_task_exists`); one on
    /// its way is told of its holders now, and wanted again if it was
    /// cancelled. Then the transfers that can start, start.
    fn fetch(&mut self, who_has: Map<Key, Vec<String>>, sizes: &Map<Key, u64>, priority: Priority) {
        for (key, holders) in who_has {
            if self.holds(&key) {
                continue;
            }
            // Running here (freed or not): its run's result will do.
            if let Some(t) = self.tasks.get_mut(&key) {
                if matches!(
                    t.state,
                    State::Executing | State::Cancelled | State::Resumed
                ) {
                    t.state = State::Resumed;
                    continue;
                }
            }
            let n = sizes.get(&key).copied().unwrap_or(DEFAULT_NBYTES);
            if holders.is_empty() {
                if !self.fetches.contains(&key) && !self.missing.contains_key(&key) {
                    self.go_missing(key, priority, n);
                }
                continue;
            }
            self.missing.remove(&key);
            self.fetches.want(key, holders, n, priority);
        }
        self.communicate();
    }

    /// `_ensure_communicating`, while the worker runs (a paused or retiring
    /// worker starts no transfer): one `get_data` per holder chosen
    /// ([`Fetches::select`]), its answer coming back as an event. With
    /// `--memory-transfers`, a holder that is a worker of this swarm is not
    /// asked over a socket: the keys it holds are taken from its memory,
    /// with their sizes, arriving as an event as a transfer's answer does.
    /// The scheduler sees nothing of a transfer between two workers but its
    /// outcome (`add-keys`, or a key missing), which is the same.
    fn communicate(&mut self) {
        if !self.running {
            return;
        }
        for (worker, keys) in self.fetches.select() {
            if self.sh.memory_transfers {
                if let Some(peer) = self.sh.node(&worker) {
                    let got: Vec<(Key, u64)> = {
                        let held = peer.held.lock().expect("not poisoned");
                        keys.iter()
                            .filter_map(|k| held.get(k).map(|n| (k.clone(), *n)))
                            .collect()
                    };
                    // No message went: none is counted (the bytes are, as
                    // served).
                    let served = got.iter().map(|(_, n)| n).sum();
                    self.sh.stats.bytes_served.fetch_add(served, Relaxed);
                    let t = now();
                    self.events.send(Event::Gathered {
                        worker,
                        keys,
                        answer: Answer::Data(got),
                        start: t,
                        stop: t,
                    });
                    continue;
                }
            }
            let request = GetData {
                op: Op::new(),
                keys: Keys::List(keys.clone()),
                who: Some(self.node.address.clone()),
                reply: Some(true),
            };
            let (tx, sh) = (self.events.clone(), self.sh.clone());
            tokio::spawn(async move {
                let start = now();
                let reply = sh.peers.get_data(&worker, &request).await;
                let stop = now();
                sh.stats.sent("get_data");
                let answer = match reply {
                    Ok(r) if r.status == "busy" => Answer::Busy,
                    Ok(r) => Answer::Data(
                        r.data
                            .unwrap_or_default()
                            .iter()
                            .map(|(k, v)| (k.clone(), nbytes(v)))
                            .collect(),
                    ),
                    // `gather_dep` takes any error for the holder's loss
                    // (`GatherDepNetworkFailureEvent`; a reply that fails to
                    // deserialize, Python's other case, cannot happen here).
                    Err(_) => Answer::Failed,
                };
                tx.send(Event::Gathered {
                    worker,
                    keys,
                    answer,
                    start,
                    stop,
                });
            });
        }
    }

    /// A dependency no holder is left for: `missing`
    /// (`_transition_generic_missing`, `:1840`: into `missing_dep_flight`),
    /// its dependents waiting while `find_missing` asks the scheduler where
    /// it is now.
    fn go_missing(&mut self, key: Key, priority: Priority, nbytes: u64) {
        let replica = self.acquiring.contains(&key);
        if self.missing.is_empty() {
            // `find-missing` ran at its ticks while nothing was missing,
            // sending nothing: the key is asked for at the next tick, not
            // now.
            self.next_find_missing =
                next_tick(self.next_find_missing, self.beat_interval, Instant::now());
        }
        let m = Missing {
            replica,
            priority,
            nbytes,
        };
        self.missing.insert(key, m);
    }

    fn on_event(&mut self, ev: Event) -> Option<End> {
        match ev {
            Event::Gathered {
                worker,
                keys,
                answer,
                start,
                stop,
            } => {
                if let Answer::Data(got) = &answer {
                    let n = got.iter().map(|(_, n)| n).sum();
                    self.sh.stats.bytes_fetched.fetch_add(n, Relaxed);
                    let transfer = Transfer {
                        worker: worker.clone(),
                        keys,
                        start,
                        stop,
                    };
                    self.note_transfer(&transfer);
                }
                let done = self.fetches.done(&worker, answer, Instant::now());
                let id = stimulus_id("gather-dep-success");
                let mut arrived = Vec::with_capacity(done.arrived.len());
                for (key, n) in done.arrived {
                    self.add_key(&key, n, id.clone());
                    arrived.push(key);
                }
                for (key, priority, n) in done.missing {
                    self.go_missing(key, priority, n);
                }
                // A resumed key's transfer is its task's run: reported with
                // `task-finished` (`_transition_resumed_memory`, `:2345`).
                for (key, n) in done.resumed {
                    if let Some((t, startstops)) = self.resumed.remove(&key) {
                        self.acquiring.remove(&key);
                        self.report_finished(key.clone(), t.run_id, n, startstops, None);
                        arrived.push(key);
                    }
                }
                for key in done.compute {
                    if let Some((t, _)) = self.resumed.remove(&key) {
                        self.compute(t);
                    }
                }
                if !done.refresh.is_empty() {
                    let msg = RequestRefreshWhoHas {
                        op: "request-refresh-who-has",
                        keys: done.refresh,
                        stimulus_id: stimulus_id("gather-dep-busy"),
                    };
                    self.send("request-refresh-who-has", &msg);
                }
                self.deps_arrived(&arrived);
                self.communicate();
            }
            Event::Beat(r) => {
                self.beating = false;
                if let Ok(reply) = &r {
                    if let Some(i) = interval_of(reply.heartbeat_interval.as_ref()) {
                        self.beat_interval = i;
                    }
                }
                // The heartbeat is a tornado `PeriodicCallback`: the next
                // call is on the grid of the one that just ended (one
                // period after its start, at the period the reply set),
                // not a period after the reply.
                self.next_beat = next_tick(self.next_beat, self.beat_interval, Instant::now());
                match r {
                    Ok(reply) if reply.status == "missing" => {
                        // `Worker.heartbeat`: the scheduler forgot this
                        // worker; it closes.
                        self.sh.stats.removed.fetch_add(1, Relaxed);
                        return Some(End::Removed("worker-heartbeat-missing".into()));
                    }
                    // `Worker.heartbeat` logs an OSError and goes on.
                    Ok(_) | Err(_) => {}
                }
            }
            Event::FreeKeys(keys, id) => self.free_keys(&keys, &id),
        }
        None
    }

    /// A transfer goes into the `startstops` of one task waiting for its
    /// keys, as `Worker._get_cause` picks it (a dependent of the first key
    /// that has one, `worker.py:1868`), to be reported with its
    /// `task-finished` before its `compute`.
    fn note_transfer(&mut self, x: &Transfer) {
        {
            let cause = x
                .keys
                .iter()
                .filter_map(|k| self.waiters.get(k))
                .flatten()
                .find(|w| self.tasks.contains_key(*w))
                .cloned();
            if let Some(task) = cause.and_then(|w| self.tasks.get_mut(&w)) {
                task.startstops.push(x.startstop());
            } else if let Some((_, startstops)) =
                x.keys.last().and_then(|k| self.resumed.get_mut(k))
            {
                // No dependent: the transfer is the last key's own.
                startstops.push(x.startstop());
            }
        }
    }

    /// The tasks waiting for the keys `arrived` whose dependencies are now
    /// all here become ready.
    fn deps_arrived(&mut self, arrived: &[Key]) {
        let held = self.node.held.lock().expect("not poisoned");
        let mut ready = Vec::new();
        for dep in arrived {
            for key in self.waiters.remove(dep).unwrap_or_default() {
                let Some(t) = self.tasks.get_mut(&key) else {
                    continue;
                };
                if t.state != State::Waiting {
                    continue;
                }
                t.waiting_for.retain(|d| !held.contains_key(d));
                if t.waiting_for.is_empty() {
                    t.state = State::Ready;
                    ready.push(Ready {
                        priority: t.priority,
                        key,
                    });
                }
            }
        }
        drop(held);
        self.ready.extend(ready.into_iter().map(Reverse));
        self.start_ready();
    }

    /// `Worker.find_missing` (`worker.py:2046`) and
    /// `_handle_find_missing` (`worker_state_machine.py:3179`): the keys
    /// in `missing_dep_flight` go to the scheduler in one
    /// `request-refresh-who-has` (`RequestRefreshWhoHasMsg`, `:526`), which
    /// answers `refresh-who-has` with their holders now
    /// (`Scheduler.handle_request_refresh_who_has`, `scheduler.py:6133`),
    /// or `free-keys` for keys it forgot. A key whose dependents were all
    /// released here is forgotten first, as Python's released dependency
    /// is (`_transition_missing_released`, `:1824`). The callback's period
    /// is the heartbeat's (`worker.py:2050`).
    fn find_missing(&mut self) {
        self.next_find_missing =
            next_tick(self.next_find_missing, self.beat_interval, Instant::now());
        let (tasks, waiters) = (&self.tasks, &mut self.waiters);
        self.missing.retain(|k, m| {
            let needed = waiters.get(k).is_some_and(|ds| {
                ds.iter().any(|d| {
                    tasks
                        .get(d)
                        .is_some_and(|t| t.state == State::Waiting && t.waiting_for.contains(k))
                })
            });
            if !needed {
                waiters.remove(k);
            }
            m.replica || needed
        });
        if self.missing.is_empty() {
            return;
        }
        let msg = RequestRefreshWhoHas {
            op: "request-refresh-who-has",
            keys: self.missing.keys().cloned().collect(),
            stimulus_id: stimulus_id("find-missing"),
        };
        self.send("request-refresh-who-has", &msg);
    }

    /// A heartbeat, on the swarm's pooled connections to the scheduler.
    fn beat(&mut self) {
        self.beating = true;
        let t = now();
        let executing: Map<Key, f64> = self
            .executing
            .values()
            .map(|r| (r.key.clone(), t - r.start))
            .collect();
        let msg = HeartbeatWorker {
            op: Op::new(),
            address: self.node.address.clone(),
            now: t,
            metrics: metrics(self.sh, self.node),
            executing,
            extensions: Value::Map(Vec::new()),
            reply: None,
        };
        let (sh, tx) = (self.sh.clone(), self.events.clone());
        tokio::spawn(async move {
            sh.stats.sent("heartbeat_worker");
            let r = match sh.handshake.timeout {
                Some(d) => tokio::time::timeout(
                    d,
                    sh.heartbeats.call::<_, HeartbeatReply>(&sh.scheduler, &msg),
                )
                .await
                .unwrap_or_else(|_| {
                    let late = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no answer to a heartbeat",
                    );
                    Err(RpcError::from(TransportError::Io(late)))
                }),
                None => {
                    sh.heartbeats
                        .call::<_, HeartbeatReply>(&sh.scheduler, &msg)
                        .await
                }
            };
            tx.send(Event::Beat(r));
        });
    }
}

/// `request-refresh-who-has` (`RequestRefreshWhoHasMsg`,
/// `worker_state_machine.py:526`).
#[derive(serde::Serialize)]
struct RequestRefreshWhoHas {
    op: &'static str,
    keys: Vec<Key>,
    stimulus_id: String,
}

/// `pickle.dumps(bytes, protocol=5)`: the `type` of a `task-finished`
/// whose result is `bytes`.
const PICKLED_BYTES_TYPE: &[u8] = &[
    128, 5, 149, 22, 0, 0, 0, 0, 0, 0, 0, 140, 8, 98, 117, 105, 108, 116, 105, 110, 115, 148, 140,
    5, 98, 121, 116, 101, 115, 148, 147, 148, 46,
];

/// A `heartbeat-interval` as a duration (at most an hour).
fn interval_of(n: Option<&Number>) -> Option<Duration> {
    let s = n?.as_f64();
    (s > 0.0).then(|| Duration::from_secs_f64(s.min(3600.0)))
}
