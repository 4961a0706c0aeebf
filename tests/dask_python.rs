//! The typed Dask messages against the real Python `distributed` 2026.8.0
//! (or the release `FRAMEWIRE_DASK_RELEASE` names, as `scripts/test` runs
//! them against an older one too), live over 127.0.0.1:
//!
//! * every typed message, built in Rust with realistic values (tuple and
//!   nested keys, sets, floats, a `__Pickled__` run_spec block taken from a
//!   real `compute-task`, an `NdArray`, `ToSerialize` of a map, pickled
//!   exception bytes), is sent with `Connection::send_msg` to
//!   `tests/dask/typed_peer.py`, which reads it with `comm.read()` as every
//!   Dask server does and describes the Python objects it got; the test
//!   checks they are what the Python source builds (keys as tuples, a set
//!   as a set, `type` as bytes, blocks deserialized, arrays as numpy);
//! * a real `dask scheduler` accepts a worker registered from Rust: a typed
//!   `register-worker` and its reply, `worker-status-change` on the batched
//!   stream, `heartbeat_worker` through `Rpc`, and a Python `Client` sees the
//!   worker with the name, threads and memory limit it registered with.
//!
//! These tests FAIL when Python Dask is missing: they never skip.
#![cfg(feature = "dask")]

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use framewire::dask::{
    AcquireReplicas, AddKeys, BatchedReader, BatchedWriter, ClientTaskErred, Close, CloseStream,
    ComputeTask, ErrorReply, FreeKeys, FreeKeysRpc, Gather, GatherKeys, GatherKeysReply,
    GatherReply, GetData, GetDataReply, HeartbeatReply, HeartbeatWorker, Identity, KeepAlive, Key,
    Keys, Map, Number, Op, RegisterWorker, RegisterWorkerReply, ReleaseWorkerData, RemoveReplicas,
    Reschedule, Rpc, Scatter, SchedulerRequest, SchedulerToClient, SchedulerToWorker, StartStop,
    StealRequest, StealResponse, StreamStart, TaskErred, TaskFinished, UpdateData, UpdateDataReply,
    UpdateWhoHas, WorkerRequest, WorkerStatusChange, WorkerToScheduler, DEFAULT_BATCH_INTERVAL,
};
use framewire::transport::{Connection, ConnectionBuilder, HandshakeOptions};
use framewire::typed::{Bin, Block, ToSerialize};
use framewire::{message, DeserializeOptions, Envelope, Limits, NdArray, Value};
use serde_json::Value as Json;

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/dask_python.rs"]
mod dask_python;
use cluster::scratch_dir;
use dask_python::{python, repo_root};

// ---- processes -----------------------------------------------------------------

/// A child process, killed and reaped on drop, whatever happens.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn script(name: &str) -> PathBuf {
    repo_root().join("tests/dask").join(name)
}

/// `typed_peer.py`, listening: the process, its stdout lines, its port.
fn start_peer() -> (Proc, Lines<BufReader<ChildStdout>>, u16) {
    let mut child = Command::new(python())
        .arg(script("typed_peer.py"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start typed_peer.py");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let proc = Proc(child);
    let first = lines
        .next()
        .expect("typed_peer.py printed nothing")
        .unwrap();
    let port: Json = serde_json::from_str(&first).unwrap();
    let port = port["port"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first}"));
    (proc, lines, port)
}

// ---- realistic pieces, some from real captures ---------------------------------

fn limits() -> Limits {
    Limits::dask_compat()
}

/// The first op of a conversation capture, pass-through (blocks kept) or
/// deserialized.
fn captured_op(name: &str, deserialize: bool) -> Value {
    let path = repo_root().join("tests/captures/conversation").join(name);
    let wire = Bytes::from(std::fs::read(path.join("wire.bin")).unwrap());
    let (env, _) = Envelope::decode(&wire, &limits()).unwrap();
    let value = match deserialize {
        false => message::decode(env.frames(), &limits()).unwrap(),
        true => framewire::loads_with(
            env.frames(),
            &DeserializeOptions::with_limits(limits()).backed_by(&env),
        )
        .unwrap(),
    };
    match value {
        Value::Array(mut items) => items.remove(0),
        v => v,
    }
}

/// The `run_spec` of a real `compute-task` of the release under test: a
/// `__Pickled__` block holding `dask._task_spec.Task` for `slow-3`, from
/// that release's session (`tests/captures/sessions/<release>/`: each
/// release unpickles only its own `Task`).
fn captured_run_spec() -> Block {
    let dir = repo_root()
        .join("tests/captures/sessions")
        .join(dask_python::release());
    let index: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("session.json")).unwrap()).unwrap();
    let bin = Bytes::from(std::fs::read(dir.join("session.bin")).unwrap());
    let compute_tasks = index["messages"].as_array().unwrap().iter().filter(|m| {
        m["labels"]
            .as_array()
            .unwrap()
            .contains(&"compute-task".into())
    });
    for m in compute_tasks {
        let offset = m["offset"].as_u64().unwrap() as usize;
        let wire = bin.slice(offset..offset + m["nbytes"].as_u64().unwrap() as usize);
        let (env, _) = Envelope::decode(&wire, &limits()).unwrap();
        let Value::Array(ops) = message::decode(env.frames(), &limits()).unwrap() else {
            panic!("a batch")
        };
        let slow_3 = Value::str("slow-3");
        if let Some(op) = ops.iter().find(|op| op.get("key") == Some(&slow_3)) {
            return framewire::from_value(op.get("run_spec").unwrap().clone()).unwrap();
        }
    }
    panic!("no compute-task of slow-3 in {}", dir.display())
}

/// `pickle.dumps(ValueError('boom 1'))` as a real worker sent it.
fn captured_pickled_exception() -> Bin {
    let op = captured_op("task-erred_1", true);
    framewire::from_value(op.get("exception").unwrap().clone()).unwrap()
}

/// `pickle.dumps(int)` as a real worker sent it in `task-finished`.
fn captured_pickled_int_type() -> Bin {
    let op = captured_op("task-finished_1", false);
    framewire::from_value(op.get("type").unwrap().clone()).unwrap()
}

fn f64_array(dtype_shape: &[u64], values: &[f64]) -> NdArray {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    NdArray::from_c_order("<f8", dtype_shape, Bytes::from(data)).unwrap()
}

fn addr(port: u16) -> String {
    format!("tcp://127.0.0.1:{port}")
}

fn map<K: std::hash::Hash + Eq, V>(entries: impl IntoIterator<Item = (K, V)>) -> Map<K, V> {
    entries.into_iter().collect()
}

/// What `Worker.get_metrics` sends, with the keys `Scheduler.add_worker` /
/// `heartbeat_worker` read (tests/dask/ops-2026.8.0.md, register-worker:
/// `bandwidth.total`, `bandwidth.workers`, `bandwidth.types`,
/// `digests_total_since_heartbeat`, `memory`, `spilled_bytes.memory`;
/// `spilled_bytes.disk` for `WorkerState.memory`).
fn metrics() -> Value {
    let m = |entries: Vec<(&str, Value)>| Value::map_of(entries);
    m(vec![
        ("task_counts", m(vec![])),
        (
            "bandwidth",
            m(vec![
                ("total", Value::from(100_000_000i64)),
                ("workers", m(vec![])),
                ("types", m(vec![])),
            ]),
        ),
        (
            "digests_total_since_heartbeat",
            Value::Map(vec![
                (Value::str("latency"), Value::Float(0.0125)),
                (
                    Value::Array(vec![
                        Value::str("execute"),
                        Value::str("inc"),
                        Value::str("thread-cpu"),
                        Value::str("seconds"),
                    ]),
                    Value::Float(0.5),
                ),
            ]),
        ),
        ("managed_bytes", Value::from(0i64)),
        (
            "spilled_bytes",
            m(vec![
                ("memory", Value::from(0i64)),
                ("disk", Value::from(0i64)),
            ]),
        ),
        ("event_loop_interval", Value::Float(0.02)),
        ("cpu", Value::Float(2.5)),
        ("memory", Value::from(123_456_789i64)),
        ("time", Value::Float(1_796_136_778.9)),
        ("num_fds", Value::from(31i64)),
    ])
}

// ---- what Python must have built ------------------------------------------------

/// Asserts that `py` (typed_peer.py's description of what `comm.read()`
/// returned) is what Dask's decoding makes of `v`, the message as
/// framewire sent it (tests/dask/ops-2026.8.0.md §0): maps are dicts in the
/// same order, arrays tuples (`use_list=False`), `{"__Set__": true,
/// "as-list"}` a set, bin bytes, floats the same double, a
/// `Value::ToSerialize` the value it wraps, an array a numpy array with its
/// dtype, shape and values, a `__Pickled__` block the unpickled object.
#[track_caller]
fn assert_python_sees(path: &str, v: &Value, py: &Json) {
    if let Err(e) = python_sees(path, v, py) {
        panic!("{e}");
    }
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    match ok {
        true => Ok(()),
        false => Err(what()),
    }
}

fn python_sees(path: &str, v: &Value, py: &Json) -> Result<(), String> {
    let tag = |t: &str| -> Result<&Json, String> {
        py.get(t)
            .ok_or_else(|| format!("{path}: Python built {py}, expected a {t} for {v:?}"))
    };
    let differs = || format!("{path}: Python built {py} for {v:?}");
    match v {
        Value::Nil => check(tag("none")?.is_null(), differs),
        Value::Bool(b) => check(tag("bool")?.as_bool() == Some(*b), differs),
        Value::Int(i) => check(
            tag("int")?.as_str() == Some(i.as_i128().to_string().as_str()),
            differs,
        ),
        Value::Float(f) => {
            let repr = tag("float")?.as_str().ok_or_else(differs)?;
            let theirs: f64 = repr.parse().map_err(|_| differs())?;
            check(theirs.to_bits() == f.to_bits(), differs)
        }
        Value::Str(s) => check(tag("str")?.as_str() == Some(&**s), differs),
        Value::Bin(b) => check(
            tag("bytes")?.as_str() == Some(hex::encode(b).as_str()),
            differs,
        ),
        Value::Array(_) | Value::IntArray(_) | Value::BinArray(_) => {
            let items = tag("tuple")?.as_array().ok_or_else(differs)?;
            check(items.len() == v.array_len().unwrap(), differs)?;
            for (i, py_item) in items.iter().enumerate() {
                let item = v.array_item(i).unwrap();
                python_sees(&format!("{path}[{i}]"), &item, py_item)?;
            }
            Ok(())
        }
        Value::Map(entries) if is_set(entries) => {
            let items = entries[1].1.as_array().ok_or_else(differs)?;
            let py_items = tag("set")?.as_array().ok_or_else(differs)?;
            check(py_items.len() == items.len(), differs)?;
            // A set has no order: each item matches one Python item.
            for item in items {
                let found = py_items.iter().any(|p| python_sees(path, item, p).is_ok());
                check(found, || format!("{path}: {item:?} not in the set {py}"))?;
            }
            Ok(())
        }
        Value::Map(entries) => {
            let py_entries = tag("dict")?.as_array().ok_or_else(differs)?;
            check(py_entries.len() == entries.len(), differs)?;
            for ((k, val), pair) in entries.iter().zip(py_entries) {
                let name = k.as_str().map(str::to_owned).unwrap_or(format!("{k:?}"));
                python_sees(&format!("{path}.<key {name}>"), k, &pair[0])?;
                python_sees(&format!("{path}.{name}"), val, &pair[1])?;
            }
            Ok(())
        }
        Value::ToSerialize(inner) => python_sees(path, inner, py),
        Value::NdArray(a) => {
            let nd = tag("ndarray")?;
            check(nd["dtype"].as_str() == Some(a.dtype()), differs)?;
            let shape: Vec<u64> = nd["shape"]
                .as_array()
                .ok_or_else(differs)?
                .iter()
                .map(|s| s.as_u64().unwrap_or(u64::MAX))
                .collect();
            check(shape == a.shape(), differs)?;
            check(a.dtype() == "<f8", || {
                format!("{path}: the test sends float64 arrays")
            })?;
            let ours: Vec<u64> = a
                .to_c_order()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()).to_bits())
                .collect();
            let theirs: Vec<u64> = nd["values"]["list"]
                .as_array()
                .ok_or_else(differs)?
                .iter()
                .map(|x| {
                    let repr = x["float"].as_str().unwrap_or("nan");
                    repr.parse::<f64>().map(f64::to_bits).unwrap_or(0)
                })
                .collect();
            check(theirs == ours, differs)
        }
        // Always unpickled, even by the scheduler (protocol/core.py:165-172).
        Value::Pickled(_) => check(tag("object")?.is_string(), differs),
        Value::Serialized(_) => Err(format!(
            "{path}: the test sends no pre-serialized block: {v:?}"
        )),
        other => Err(format!(
            "{path}: a value this test does not compare: {other:?}"
        )),
    }
}

/// `{"__Set__": true, "as-list": [...]}`: a Python set on the wire.
fn is_set(entries: &[(Value, Value)]) -> bool {
    entries.len() == 2
        && entries[0].0.as_str() == Some("__Set__")
        && entries[0].1 == Value::Bool(true)
        && entries[1].0.as_str() == Some("as-list")
}

/// The value of `key` in a Python dict description.
fn py_get<'a>(py: &'a Json, key: &str) -> &'a Json {
    py["dict"]
        .as_array()
        .unwrap_or_else(|| panic!("not a dict: {py}"))
        .iter()
        .find(|pair| pair[0]["str"].as_str() == Some(key))
        .map(|pair| &pair[1])
        .unwrap_or_else(|| panic!("no {key} in {py}"))
}

/// A Python tuple of strs and ints, as the description says it.
fn py_tuple(items: &[Json]) -> Json {
    serde_json::json!({ "tuple": items })
}

fn py_str(s: &str) -> Json {
    serde_json::json!({ "str": s })
}

fn py_int(i: i64) -> Json {
    serde_json::json!({ "int": i.to_string() })
}

// ---- the tests ---------------------------------------------------------------------

/// Every typed message, sent from Rust, read by Python's `comm.read()`.
#[tokio::test(flavor = "current_thread")]
async fn typed_messages_reach_python_as_dask_builds_them() {
    let (_peer, mut lines, port) = start_peer();
    let (mut conn, _) = Connection::builder()
        .connect(&format!("127.0.0.1:{port}"), &HandshakeOptions::default())
        .await
        .expect("connect to typed_peer.py");

    let w0 = addr(40001);
    let w1 = addr(40002);
    let tuple_key = Key::from(("inc-6a3c1f", 0));
    let nested_key = Key::Tuple(vec![Key::from(("x", 1)), Key::Int(2)]);
    let str_key = Key::from("bytes-ba0ecf5f2b7dd78963eab69093250a32");
    let int_key = Key::Int(7);
    let float_key = Key::Float(1.5);
    let array = f64_array(&[2, 3], &[0.5, 1.5, 2.5, -3.0, 1e-300, 6.02e23]);
    let exception = captured_pickled_exception();
    let pickled_exc = || framewire::to_value(&ToSerialize(exception.clone())).unwrap();
    let startstops = vec![StartStop {
        action: "compute".into(),
        start: 1_796_136_778.113_406_7,
        stop: 1_796_136_778.114_740_6,
        source: None,
    }];
    let scatter_payload: Map<String, Value> = map([
        ("rows".to_owned(), Value::from(3i64)),
        ("name".to_owned(), Value::str("part-0")),
        (
            "weights".to_owned(),
            Value::Array(vec![0.25.into(), 0.75.into()]),
        ),
    ]);

    // What was sent, as framewire sent it (to_value of the typed message).
    let mut sent: Vec<(&str, Value)> = Vec::new();
    macro_rules! send {
        ($label:expr, $msg:expr) => {{
            let msg = $msg;
            sent.push(($label, framewire::to_value(&msg).unwrap()));
            conn.send_msg(&msg).await.expect($label);
        }};
    }

    send!(
        "scheduler->worker batch",
        vec![
            SchedulerToWorker::ComputeTask(ComputeTask {
                op: Op::new(),
                key: tuple_key.clone(),
                run_id: 3,
                priority: vec![Number::Int(0), Number::Int(1), Number::Int(2)],
                duration: None,
                stimulus_id: "compute-task-1796136778.0782242".into(),
                who_has: map([(nested_key.clone(), vec![w1.clone()])]),
                nbytes: map([(nested_key.clone(), 28)]),
                run_spec: captured_run_spec(),
                resource_restrictions: Some(map([("GPU".to_owned(), Number::Int(1))])),
                actor: false,
                annotations: Value::map_of([("retries", Value::from(2i64))]),
                span_id: Some("9571f45a-aa2b-4abc-9d27-cf64a28d231d".into()),
            }),
            SchedulerToWorker::FreeKeys(FreeKeys {
                op: Op::new(),
                keys: vec![str_key.clone(), int_key.clone()],
                stimulus_id: "client-releases-keys-1796136786.09".into(),
            }),
            SchedulerToWorker::AcquireReplicas(AcquireReplicas {
                op: Op::new(),
                who_has: map([(float_key.clone(), vec![w1.clone(), w0.clone()])]),
                nbytes: map([(float_key.clone(), 64)]),
                stimulus_id: "active_memory_manager-1796136785.80".into(),
            }),
            SchedulerToWorker::RemoveReplicas(RemoveReplicas {
                op: Op::new(),
                keys: vec![nested_key.clone()],
                stimulus_id: "active_memory_manager-1796136778.22".into(),
            }),
            SchedulerToWorker::StealRequest(StealRequest {
                op: Op::new(),
                key: tuple_key.clone(),
                stimulus_id: "steal-3".into(),
            }),
            SchedulerToWorker::WorkerStatusChange(WorkerStatusChange {
                op: Op::new(),
                status: "closing_gracefully".into(),
                stimulus_id: "retire-workers-1796136785.80".into(),
            }),
            SchedulerToWorker::Close(Close {
                op: Op::new(),
                reason: Some("scheduler-close".into()),
                reply: None,
            }),
            SchedulerToWorker::CloseStream(CloseStream { op: Op::new() }),
        ]
    );
    send!(
        "worker->scheduler batch",
        vec![
            WorkerToScheduler::TaskFinished(TaskFinished {
                key: tuple_key.clone(),
                run_id: 3,
                nbytes: 28,
                type_: captured_pickled_int_type(),
                typename: "int".into(),
                metadata: Value::Map(vec![]),
                thread: Some(140_552_716_588_736),
                startstops: startstops.clone(),
                op: Op::new(),
                stimulus_id: "task-finished-1796136779.788759".into(),
                status: "OK".into(),
            }),
            WorkerToScheduler::TaskErred(TaskErred {
                key: nested_key.clone(),
                run_id: 4,
                exception: pickled_exc(),
                traceback: Value::Nil,
                exception_text: "ValueError('boom 1')".into(),
                traceback_text: "  File \"<dynamic-code>\", line 254, in boom\n".into(),
                thread: None,
                startstops: startstops.clone(),
                op: Op::new(),
                stimulus_id: "task-erred-1796136778.0902011".into(),
                status: "error".into(),
            }),
            WorkerToScheduler::ReleaseWorkerData(ReleaseWorkerData {
                key: str_key.clone(),
                op: Op::new(),
                stimulus_id: "delete-data-1796136778.2153761".into(),
            }),
            WorkerToScheduler::AddKeys(AddKeys {
                keys: vec![float_key.clone()],
                op: Op::new(),
                stimulus_id: "gather-dep-success-1796136778.10".into(),
            }),
            WorkerToScheduler::Reschedule(Reschedule {
                key: int_key.clone(),
                op: Op::new(),
                stimulus_id: "reschedule-1796136778.0981977".into(),
            }),
            WorkerToScheduler::StealResponse(StealResponse {
                key: tuple_key.clone(),
                state: None,
                op: Op::new(),
                stimulus_id: "steal-3".into(),
            }),
            WorkerToScheduler::WorkerStatusChange(WorkerStatusChange {
                op: Op::new(),
                status: "running".into(),
                stimulus_id: "worker-status-change-1796136777.90".into(),
            }),
            WorkerToScheduler::KeepAlive(KeepAlive { op: Op::new() }),
            WorkerToScheduler::CloseStream(CloseStream { op: Op::new() }),
        ]
    );
    send!(
        "register-worker",
        SchedulerRequest::RegisterWorker(RegisterWorker {
            op: Op::new(),
            reply: false,
            address: w0.clone(),
            status: "init".into(),
            nthreads: 4,
            name: Value::str("rust-worker-0"),
            now: 1_796_136_777.826_021_4,
            resources: map([("GPU".to_owned(), Number::Float(2.0))]),
            memory_limit: Some(2_147_483_648),
            local_directory: "/tmp/dask-scratch-space/worker-3g5moxec".into(),
            services: map([("dashboard".to_owned(), 33145)]),
            nanny: None,
            pid: 3136,
            versions: Value::Map(vec![]),
            metrics: metrics(),
            extra: Value::Map(vec![]),
            stimulus_id: "worker-connect-1796136777.82".into(),
            server_id: "Worker-7e312361-d1ac-4e84-b83c-49e5bbe73167".into(),
        })
    );
    send!(
        "register-worker reply",
        RegisterWorkerReply {
            status: "OK".into(),
            time: Some(1_796_136_777.860_27),
            heartbeat_interval: Some(Number::Float(0.5)),
            worker_plugins: Some(map([("shuffle".to_owned(), captured_pickled_int_type())])),
            warning: Some(String::new()),
            error: Some(String::new()),
            message: None,
        }
    );
    send!(
        "heartbeat_worker",
        SchedulerRequest::HeartbeatWorker(HeartbeatWorker {
            op: Op::new(),
            address: w0.clone(),
            now: 1_796_136_778.904_451_1,
            metrics: metrics(),
            executing: map([(tuple_key.clone(), 0.25), (nested_key.clone(), 1.0)]),
            extensions: Value::map_of([("shuffle", Value::Map(vec![]))]),
            reply: Some(true),
        })
    );
    send!(
        "heartbeat_worker reply",
        HeartbeatReply {
            status: "OK".into(),
            time: Some(1_796_136_778.920_464_8),
            heartbeat_interval: Some(Number::Int(1)),
        }
    );
    send!(
        "get_data",
        WorkerRequest::GetData(GetData {
            op: Op::new(),
            keys: Keys::Set(vec![tuple_key.clone(), str_key.clone()]),
            who: Some(w1.clone()),
            reply: Some(true),
        })
    );
    send!(
        "get_data reply",
        GetDataReply {
            status: "OK".into(),
            data: Some(map([
                (tuple_key.clone(), framewire::to_value(&array).unwrap()),
                (
                    str_key.clone(),
                    framewire::to_value(&ToSerialize(Bin::from(&b"\x00payload\xff"[..]))).unwrap(),
                ),
            ])),
        }
    );
    send!("get_data OK", "OK");
    send!(
        "update_data (worker)",
        WorkerRequest::UpdateData(UpdateData {
            op: Op::new(),
            data: map([(nested_key.clone(), framewire::to_value(&array).unwrap())]),
            stimulus_id: None,
            reply: Some(true),
        })
    );
    send!(
        "update_data reply",
        UpdateDataReply {
            nbytes: map([(nested_key.clone(), 48)]),
            status: "OK".into(),
        }
    );
    send!(
        "gather (worker)",
        WorkerRequest::Gather(Gather {
            op: Op::new(),
            who_has: map([(tuple_key.clone(), vec![w1.clone()])]),
            reply: Some(true),
        })
    );
    send!(
        "gather reply (worker)",
        GatherReply {
            status: "partial-fail".into(),
            keys: Some(vec![tuple_key.clone()]),
        }
    );
    send!(
        "free_keys",
        WorkerRequest::FreeKeys(FreeKeysRpc {
            op: Op::new(),
            keys: vec![nested_key.clone()],
            stimulus_id: "delete-data-1796136778.2153761".into(),
            reply: Some(true),
        })
    );
    send!(
        "identity (worker)",
        WorkerRequest::Identity(Identity {
            op: Op::new(),
            n_workers: None,
            reply: Some(true),
        })
    );
    send!(
        "identity (scheduler)",
        SchedulerRequest::Identity(Identity {
            op: Op::new(),
            n_workers: Some(-1),
            reply: Some(true),
        })
    );
    send!(
        "gather (scheduler)",
        SchedulerRequest::Gather(GatherKeys {
            op: Op::new(),
            keys: vec![tuple_key.clone(), int_key.clone()],
            reply: Some(true),
        })
    );
    send!(
        "gather reply (scheduler)",
        GatherKeysReply {
            status: "OK".into(),
            data: Some(map([(
                int_key.clone(),
                framewire::to_value(&ToSerialize(Bin::from(&b"seven"[..]))).unwrap(),
            )])),
            keys: None,
        }
    );
    send!(
        "scatter",
        SchedulerRequest::Scatter(Scatter {
            op: Op::new(),
            data: map([(
                str_key.clone(),
                framewire::to_value(&ToSerialize(scatter_payload.clone())).unwrap(),
            )]),
            workers: Some(vec![w0.clone()]),
            client: "Client-e5af80aa-ed96-11f1-8c10-02fc00000001".into(),
            broadcast: false,
            timeout: Number::Int(30),
            reply: Some(true),
        })
    );
    send!(
        "update_data (scheduler)",
        SchedulerRequest::UpdateData(UpdateWhoHas {
            op: Op::new(),
            who_has: map([(str_key.clone(), vec![w0.clone()])]),
            nbytes: map([(str_key.clone(), 4096)]),
            client: Some("Client-e5af80aa-ed96-11f1-8c10-02fc00000001".into()),
            reply: Some(true),
        })
    );
    send!(
        "close (rpc)",
        SchedulerRequest::Close(Close {
            op: Op::new(),
            reason: None,
            reply: Some(false),
        })
    );
    send!(
        "scheduler->client batch",
        vec![
            SchedulerToClient::StreamStart(StreamStart {
                op: Op::new(),
                warning: String::new(),
                error: String::new(),
            }),
            SchedulerToClient::TaskErred(ClientTaskErred {
                op: Op::new(),
                key: nested_key.clone(),
                exception: pickled_exc(),
                traceback: Some(Value::Nil),
            }),
        ]
    );
    send!(
        "error reply",
        ErrorReply {
            status: "uncaught-error".into(),
            exception: pickled_exc(),
            traceback: Value::Nil,
            exception_text: "TypeError(\"identity() got an unexpected keyword\")".into(),
            traceback_text: "  File \"core.py\", line 796, in _handle_comm\n".into(),
        }
    );
    conn.close().await.unwrap();
    drop(conn);

    // What Python built, one line per message.
    let got: Vec<Json> = lines
        .by_ref()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    let (done, got) = got.split_last().expect("typed_peer.py output");
    assert_eq!(done["done"].as_u64(), Some(sent.len() as u64), "{done}");
    assert_eq!(got.len(), sent.len());

    // Everything, by Dask's decoding rules.
    for ((label, value), py) in sent.iter().zip(got) {
        assert_python_sees(label, value, py);
    }

    // And spelled out for the fields the issue names.
    let by_label = |label: &str| &got[sent.iter().position(|(l, _)| *l == label).unwrap()];
    let tuple_py = py_tuple(&[py_str("inc-6a3c1f"), py_int(0)]);
    let nested_py = py_tuple(&[py_tuple(&[py_str("x"), py_int(1)]), py_int(2)]);

    let batch = by_label("scheduler->worker batch")["tuple"]
        .as_array()
        .unwrap();
    assert_eq!(batch.len(), 8, "a batch is a tuple of dicts");
    let compute = &batch[0];
    assert_eq!(py_get(compute, "op"), &py_str("compute-task"));
    assert_eq!(py_get(compute, "key"), &tuple_py, "a tuple key is a tuple");
    let who_has = py_get(compute, "who_has")["dict"].as_array().unwrap();
    assert_eq!(who_has[0][0], nested_py, "a nested key as a dict key");
    let run_spec = py_get(compute, "run_spec");
    assert_eq!(
        run_spec["object"].as_str(),
        Some("dask._task_spec.Task"),
        "the run_spec block unpickled: {run_spec}"
    );
    assert_eq!(run_spec["key"], py_str("slow-3"));
    assert_eq!(
        py_get(compute, "resource_restrictions"),
        &serde_json::json!({"dict": [[{"str": "GPU"}, {"int": "1"}]]}),
        "resources as the user wrote them (an int)"
    );
    assert_eq!(
        py_get(compute, "span_id")["str"].as_str().unwrap().len(),
        36
    );

    let batch = by_label("worker->scheduler batch")["tuple"]
        .as_array()
        .unwrap();
    let finished = &batch[0];
    let keys: Vec<&str> = finished["dict"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0]["str"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "key",
            "run_id",
            "nbytes",
            "type",
            "typename",
            "metadata",
            "thread",
            "startstops",
            "op",
            "stimulus_id",
            "status"
        ],
        "TaskFinishedMsg.to_dict's order"
    );
    let type_bytes = py_get(finished, "type")["bytes"].as_str().expect("bytes");
    assert!(type_bytes.starts_with("80"), "a pickle: {type_bytes}");
    assert_eq!(
        py_get(finished, "thread"),
        &serde_json::json!({"int": "140552716588736"})
    );
    let erred = &batch[1];
    assert_eq!(
        py_get(erred, "exception")["bytes"].as_str(),
        Some(hex::encode(&*exception).as_str()),
        "to_serialize(pickle.dumps(exc)) arrives as the pickled bytes"
    );

    let get_data = by_label("get_data");
    let keys = py_get(get_data, "keys")["set"].as_array().expect("a set");
    assert!(keys.contains(&tuple_py), "{get_data}");
    assert!(keys.contains(&py_str("bytes-ba0ecf5f2b7dd78963eab69093250a32")));

    let reply = by_label("get_data reply");
    let data = py_get(reply, "data")["dict"].as_array().unwrap();
    assert_eq!(data[0][0], tuple_py);
    assert_eq!(data[0][1]["ndarray"]["dtype"].as_str(), Some("<f8"));
    assert_eq!(data[0][1]["ndarray"]["shape"], serde_json::json!([2, 3]));
    assert_eq!(
        data[1][1],
        serde_json::json!({"bytes": "007061796c6f6164ff"})
    );
    assert_eq!(by_label("get_data OK"), &py_str("OK"));

    let scatter = by_label("scatter");
    let payload = &py_get(scatter, "data")["dict"].as_array().unwrap()[0][1];
    assert_eq!(
        py_get(payload, "weights"),
        &serde_json::json!({"tuple": [{"float": "0.25"}, {"float": "0.75"}]}),
        "ToSerialize of a map arrives as the dict: {payload}"
    );
    assert_eq!(py_get(scatter, "workers"), &py_tuple(&[py_str(&w0)]));

    let register = by_label("register-worker");
    assert_eq!(
        py_get(register, "reply"),
        &serde_json::json!({"bool": false})
    );
    assert_eq!(
        py_get(register, "nanny"),
        &serde_json::json!({"none": null})
    );
    let digests = py_get(py_get(register, "metrics"), "digests_total_since_heartbeat");
    assert_eq!(
        digests["dict"][1][0],
        py_tuple(&[
            py_str("execute"),
            py_str("inc"),
            py_str("thread-cpu"),
            py_str("seconds")
        ])
    );

    let plugins = py_get(by_label("register-worker reply"), "worker-plugins");
    assert!(py_get(plugins, "shuffle")["bytes"].is_string());
}

/// `register-worker` as `Worker._register_with_scheduler` writes it.
fn register(
    address: &str,
    name: &str,
    nthreads: u32,
    memory_limit: u64,
    resources: Map<String, Number>,
    dir: &Path,
) -> SchedulerRequest {
    SchedulerRequest::RegisterWorker(RegisterWorker {
        op: Op::new(),
        reply: false,
        address: address.to_owned(),
        status: "init".into(),
        nthreads,
        name: Value::str(name),
        now: now(),
        resources,
        memory_limit: Some(memory_limit),
        local_directory: dir.display().to_string(),
        services: Map::new(),
        nanny: None,
        pid: std::process::id(),
        versions: Value::Map(vec![]),
        metrics: metrics(),
        extra: Value::Map(vec![]),
        stimulus_id: format!("worker-connect-{}", now()),
        server_id: format!("Worker-{name}"),
    })
}

/// A socket that accepts, and its `tcp://` address: where a worker is
/// reached (the scheduler does not connect in these tests, but could).
async fn worker_socket() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = addr(listener.local_addr().unwrap().port());
    (listener, address)
}

/// `from_value` of a value Dask wrote, and `to_value` back: the same value.
#[track_caller]
fn exact<T>(what: &str, raw: &Value) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let typed: T =
        framewire::from_value(raw.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{raw:?}"));
    let back = framewire::to_value(&typed).unwrap();
    assert_eq!(
        back, *raw,
        "{what}: to_value differs from what Dask wrote\n{typed:?}"
    );
    typed
}

/// A real `dask scheduler` accepts a worker registered from Rust with typed
/// messages, a Python `Client` sees it, and the scheduler's own messages to
/// it (`compute-task`, `free-keys`, the replies) decode into their types and
/// encode back to exactly what the scheduler wrote.
#[tokio::test(flavor = "current_thread")]
async fn real_scheduler_accepts_a_typed_worker() {
    let dir = scratch_dir("typed-scheduler");
    let (_scheduler, scheduler_addr) = cluster::scheduler(&python(), dir.path(), &[]);
    let host_port = scheduler_addr.strip_prefix("tcp://").unwrap().to_owned();

    let (_listener, worker_addr) = worker_socket().await;
    let name = format!("rust-worker-{}", std::process::id());
    let memory_limit = 3 * (1u64 << 30);
    let nthreads = 3;

    // register-worker on a fresh connection; the reply on the same one.
    let (mut stream, _) = Connection::builder()
        .connect(host_port.as_str(), &HandshakeOptions::default())
        .await
        .expect("connect to the scheduler");
    let gpus = map([("GPU".to_owned(), Number::Float(2.0))]);
    let msg = register(
        &worker_addr,
        &name,
        nthreads,
        memory_limit,
        gpus,
        dir.path(),
    );
    stream.send_msg(&msg).await.unwrap();
    let reply: RegisterWorkerReply =
        tokio::time::timeout(Duration::from_secs(30), stream.recv_msg())
            .await
            .expect("the scheduler answers register-worker")
            .expect("a reply")
            .expect("a RegisterWorkerReply");
    assert_eq!(reply.status, "OK", "{reply:?}");
    assert!(
        reply.heartbeat_interval.unwrap().as_f64() > 0.0,
        "{reply:?}"
    );
    assert!(reply.time.unwrap() > 1.0e9, "{reply:?}");
    assert_eq!(reply.error.as_deref(), Some(""), "{reply:?}");
    assert!(reply.worker_plugins.unwrap().contains_key("shuffle"));

    // From now on the connection is the worker's batched stream: the
    // scheduler's ops are collected as they come.
    let (read, write) = stream.into_split();
    let batched = BatchedWriter::new(write, DEFAULT_BATCH_INTERVAL);
    batched
        .send(&WorkerToScheduler::WorkerStatusChange(WorkerStatusChange {
            op: Op::new(),
            status: "running".into(),
            stimulus_id: format!("worker-status-change-{}", now()),
        }))
        .unwrap();
    let (ops_tx, mut ops) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut stream = BatchedReader::new(read);
        while let Some(op) = stream.recv_value().await {
            if ops_tx.send(op.expect("the scheduler's stream")).is_err() {
                break;
            }
        }
    });

    // heartbeat_worker over a second connection, through Rpc.
    let mut rpc = Rpc::connect(
        &scheduler_addr,
        &ConnectionBuilder::new(),
        &HandshakeOptions::default(),
    )
    .await
    .expect("rpc connection");
    let heartbeat = SchedulerRequest::HeartbeatWorker(HeartbeatWorker {
        op: Op::new(),
        address: worker_addr.clone(),
        now: now(),
        metrics: metrics(),
        executing: Map::new(),
        extensions: Value::Map(vec![]),
        reply: None,
    });
    let beat: HeartbeatReply = rpc.call(&heartbeat).await.expect("heartbeat_worker");
    assert_eq!(beat.status, "OK", "{beat:?}");
    assert!(beat.heartbeat_interval.unwrap().as_f64() > 0.0, "{beat:?}");

    // Ten more workers (status "init": registered, not running). With 11,
    // the scheduler asks for a heartbeat every `heartbeat_interval(11)`
    // seconds: the int 1 (scheduler.py:9203-9213).
    let mut peers = Vec::new();
    let mut intervals = Vec::new();
    for i in 0..10 {
        let (listener, address) = worker_socket().await;
        let (mut conn, _) = Connection::builder()
            .connect(host_port.as_str(), &HandshakeOptions::default())
            .await
            .unwrap();
        let msg = register(
            &address,
            &format!("{name}-peer-{i}"),
            1,
            1 << 30,
            Map::new(),
            dir.path(),
        );
        conn.send_msg(&msg).await.unwrap();
        let raw = tokio::time::timeout(Duration::from_secs(30), conn.recv_value())
            .await
            .expect("a reply")
            .unwrap()
            .unwrap();
        let reply: RegisterWorkerReply = exact("register-worker reply", &raw);
        assert_eq!(reply.status, "OK");
        intervals.push(raw.get("heartbeat-interval").cloned());
        peers.push((listener, conn));
    }
    assert_eq!(
        intervals.last().unwrap(),
        &Some(Value::from(1i64)),
        "the 11th worker's reply: {intervals:?}"
    );
    let raw: Value = rpc.call(&heartbeat).await.expect("heartbeat_worker");
    let beat: HeartbeatReply = exact("heartbeat reply with 11 workers", &raw);
    assert_eq!(beat.status, "OK", "{beat:?}");

    // A Python Client sees the worker, and submits a task that only this
    // worker can run (it alone has a GPU).
    let client = {
        let (scheduler_addr, worker_addr) = (scheduler_addr.clone(), worker_addr.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(python())
                .arg(script("typed_client.py"))
                .args([&scheduler_addr, &worker_addr])
                .output()
                .expect("run typed_client.py")
        })
        .await
        .unwrap()
    };
    let stdout = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "typed_client.py failed: {}\n{stdout}",
        String::from_utf8_lossy(&client.stderr)
    );
    let seen: Json = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(seen["found"], true, "{seen}");
    let worker = &seen["worker"];
    assert_eq!(worker["name"].as_str(), Some(name.as_str()), "{seen}");
    assert_eq!(
        worker["nthreads"].as_u64(),
        Some(u64::from(nthreads)),
        "{seen}"
    );
    assert_eq!(
        worker["memory_limit"].as_u64(),
        Some(memory_limit),
        "{seen}"
    );
    assert_eq!(worker["status"].as_str(), Some("running"), "{seen}");
    assert_eq!(
        worker["resources"],
        serde_json::json!({"GPU": 2.0}),
        "{seen}"
    );
    assert_eq!(seen["n_workers"].as_u64(), Some(11), "{seen}");
    assert_eq!(
        seen["running"],
        serde_json::json!([worker_addr]),
        "worker-status-change running made it (alone) schedulable: {seen}"
    );
    assert!(
        worker["metrics_keys"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("spilled_bytes")),
        "{seen}"
    );
    let task = &seen["task"];
    assert_eq!(task["state"].as_str(), Some("processing"), "{seen}");
    assert_eq!(task["processing_on"].as_str(), Some(worker_addr.as_str()));
    let task_key = Key::from(task["key"].as_str().unwrap());

    // What the scheduler sent this worker: compute-task for the task, then
    // free-keys when the client left; each op decodes and encodes back.
    let mut computed = None;
    let mut freed = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while computed.is_none() || freed.is_none() {
        let raw = tokio::time::timeout_at(deadline, ops.recv())
            .await
            .unwrap_or_else(|_| panic!("no compute-task and free-keys: {computed:?} {freed:?}"))
            .expect("the stream stays open");
        let op: SchedulerToWorker = exact("an op of the scheduler", &raw);
        match op {
            SchedulerToWorker::ComputeTask(m) => computed = Some(m),
            SchedulerToWorker::FreeKeys(m) => freed = Some(m),
            SchedulerToWorker::Other(v) => panic!("an op framewire does not type: {v:?}"),
            other => panic!("unexpected: {other:?}"),
        }
    }
    let computed = computed.unwrap();
    assert_eq!(computed.key, task_key);
    assert!(computed.run_spec.is_pickled());
    let gpu = computed
        .resource_restrictions
        .as_ref()
        .expect("restrictions");
    assert_eq!(
        gpu.get("GPU").copied(),
        Some(Number::Int(1)),
        "resources={{\"GPU\": 1}} as the user wrote it: {computed:?}"
    );
    assert!(computed.who_has.is_empty());
    assert_eq!(freed.unwrap().keys, vec![task_key]);

    // Leave as a worker does: close-stream on the stream, the rpc's goodbye.
    batched
        .send(&WorkerToScheduler::CloseStream(CloseStream {
            op: Op::new(),
        }))
        .unwrap();
    batched.close().await.unwrap();
    rpc.close().await.unwrap();
    reader.abort();
    drop(peers);
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What docs/guide/client.md says about handing keys between Rust and Python
/// (`tests/dask/key_handoff.py`, the Rust side played by the same messages
/// from Python): a bare `Future(key, client=c)` stays pending,
/// `state="memory"` reads it without holding it, scattering under the
/// Python client's id or `client-desires-keys` for it hands it over.
#[test]
fn key_handoff_between_rust_and_python() {
    let out = Command::new(python())
        .arg(script("key_handoff.py"))
        .output()
        .expect("run key_handoff.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "key_handoff.py: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
}
