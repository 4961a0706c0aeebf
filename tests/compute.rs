//! `Client::submit`, `compute`, `map` against a real Dask cluster (the
//! release of `FRAMEWIRE_DASK_RELEASE`: 2026.8.0's `expr_ser` form, or
//! 2024.12.1's `graph_header`/`graph_frames` form with that release's
//! venv), and the pickles of calls read by Python. The tests fail, never
//! skip, when Python Dask is missing.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/dask_python.rs"]
mod dask_python;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use cluster::{python_worker, scheduler, scratch_dir, Daemon};
use framewire::dask::{Arg, Call, Client, ClientError, ClientOptions, Key, KeyFailure, PyFunction};
use framewire::pickle::PickleFamily;
use framewire::serialize::Registry;
use framewire::{NdArray, Value};
use serde_json::Value as Json;

fn f(name: &str) -> PyFunction {
    name.parse().unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The pickles of calls, read by Python: `pickletools` names only the
/// globals written from the `PyFunction`s and the fixed ones, and
/// `pickle.loads` gives the tuple tasks Dask converts.
#[test]
fn python_reads_the_pickles_of_calls() {
    let python = dask_python::python();
    let calls = [
        Call::new(f("operator:add")).arg(1i64).arg(2.5f64),
        Call::new(f("builtins:int")).arg("ff").kwarg("base", 16i64),
        Call::new(f("operator:add"))
            .arg(Key::from(("x", 1i64)))
            .arg(Call::new(f("operator:neg")).arg(Value::from(vec![Value::from("a")]))),
        Call::new(f("numpy.linalg:norm")).arg(
            NdArray::from_c_order(
                "<f8",
                &[2],
                Bytes::from(
                    [3.0f64, 4.0]
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<_>>(),
                ),
            )
            .unwrap(),
        ),
    ];
    let script = r#"
import pickle, pickletools, sys, json, io
out = []
for arg in sys.argv[1:]:
    parts = arg.split(",")
    data = bytes.fromhex(parts[0])
    buffers = [bytes.fromhex(b) for b in parts[1:]]
    globs = []
    for op, a, _ in pickletools.genops(data):
        if op.name == "STACK_GLOBAL":
            globs.append("?")
    text = io.StringIO()
    pickletools.dis(data, out=text)
    names = [l.split("'")[1] for l in text.getvalue().splitlines() if "SHORT_BINUNICODE" in l]
    obj = pickle.loads(data, buffers=buffers)
    def show(x):
        if isinstance(x, tuple):
            return [show(i) for i in x]
        if isinstance(x, list):
            return {"list": [show(i) for i in x]}
        if isinstance(x, dict):
            return {"dict": {k: show(v) for k, v in x.items()}}
        if callable(x) and not isinstance(x, type(None)):
            return "fn:" + getattr(x, "__module__", "?") + "." + getattr(x, "__qualname__", "?")
        if type(x).__name__ == "TaskRef":
            return {"ref": show(x.key)}
        if type(x).__name__ == "ndarray":
            return {"array": x.tolist(), "dtype": str(x.dtype)}
        return x
    out.append({"globals": len(globs), "strs": names, "obj": show(obj)})
print(json.dumps(out))
"#;
    let args: Vec<String> = calls
        .iter()
        .map(|c| {
            let (p, buffers) = c.pickle().unwrap();
            std::iter::once(hex(&p))
                .chain(buffers.iter().map(|b| hex(b)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(&args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Json = serde_json::from_slice(&out.stdout).unwrap();
    let expected = serde_json::json!([
        {"globals": 1, "strs": ["operator", "add"], "obj": ["fn:_operator.add", 1, 2.5]},
        {"globals": 2, "strs": ["dask.utils", "apply", "builtins", "int", "ff", "base"],
         "obj": ["fn:dask.utils.apply", "fn:builtins.int", {"list": ["ff"]}, {"dict": {"base": 16}}]},
        {"globals": 3, "strs": ["operator", "add", "dask._task_spec", "TaskRef", "x", "operator", "neg", "a"],
         "obj": ["fn:_operator.add", {"ref": ["x", 1]}, ["fn:_operator.neg", ["a"]]]},
    ]);
    for i in 0..3 {
        assert_eq!(got[i], expected[i], "call {i}");
    }
    // The array: numpy's own reconstructor, out of band.
    assert_eq!(got[3]["obj"][0], "fn:numpy.linalg.norm");
    assert_eq!(got[3]["obj"][1]["array"], serde_json::json!([3.0, 4.0]));
}

/// A scheduler and two Python workers.
fn cluster(tag: &str) -> (tempfile::TempDir, Vec<Daemon>, String) {
    let python = dask_python::python();
    let dir = scratch_dir(tag);
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, _) = python_worker(&python, dir.path(), &addr, "w1");
    let (w2, _) = python_worker(&python, dir.path(), &addr, "w2");
    (dir, vec![sched, w1, w2], addr)
}

async fn connect(addr: &str) -> Client {
    let opts = ClientOptions::new().registry(Registry::default().with(PickleFamily));
    Client::connect(addr, opts).await.expect("connect")
}

async fn result(client: &Client, key: &Key) -> Result<Value, ClientError> {
    tokio::time::timeout(Duration::from_secs(60), client.result(key))
        .await
        .expect("a result within 60 s")
}

fn int(v: &Value) -> i128 {
    match v {
        Value::Int(i) => i.as_i128(),
        other => panic!("not an int: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_compute_and_map_on_a_real_cluster() {
    let (_dir, daemons, addr) = cluster("compute");
    let client = connect(&addr).await;
    assert_eq!(client.scheduler_release(), dask_python::release());
    let logs = || {
        daemons
            .iter()
            .map(|d| d.logs())
            .collect::<Vec<_>>()
            .join("\n")
    };

    // operator.add(1, 2)
    let key = client
        .submit(Call::new(f("operator:add")).arg(1i64).arg(2i64))
        .unwrap();
    assert!(
        matches!(&key, Key::Str(s) if s.starts_with("add-") && s.len() == 36),
        "{key}"
    );
    let v = result(&client, &key)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(int(&v), 3);

    // numpy.sum of an array Rust scattered.
    let data: Vec<u8> = (0..100).flat_map(|i| (i as f64).to_le_bytes()).collect();
    let x = NdArray::from_c_order("<f8", &[100], Bytes::from(data)).unwrap();
    client
        .scatter([(Key::from("rust-x"), Value::NdArray(Box::new(x)))])
        .await
        .unwrap();
    let key = client
        .submit(Call::new(f("numpy:sum")).arg(Key::from("rust-x")))
        .unwrap();
    match result(&client, &key).await.unwrap() {
        Value::NdArray(a) => {
            assert_eq!(a.dtype(), "<f8");
            assert_eq!(a.to_c_order()[..], 4950.0f64.to_le_bytes()[..]);
        }
        Value::Float(s) => assert_eq!(s, 4950.0),
        other => panic!("numpy.sum: {other:?}"),
    }

    // Keyword arguments: int("ff", base=16).
    let key = client
        .submit(Call::new(f("builtins:int")).arg("ff").kwarg("base", 16i64))
        .unwrap();
    assert_eq!(int(&result(&client, &key).await.unwrap()), 255);

    // A chain of three tasks in one graph: neg(add(2, 3)) * 10.
    let (a, b, c) = (
        Key::from("chain-a"),
        Key::from("chain-b"),
        Key::from("chain-c"),
    );
    let keys = client
        .compute([
            (a.clone(), Call::new(f("operator:add")).arg(2i64).arg(3i64)),
            (b.clone(), Call::new(f("operator:neg")).arg(a.clone())),
            (
                c.clone(),
                Call::new(f("operator:mul")).arg(b.clone()).arg(10i64),
            ),
        ])
        .unwrap();
    assert_eq!(keys, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(int(&result(&client, &c).await.unwrap()), -50);
    assert_eq!(int(&result(&client, &a).await.unwrap()), 5);

    // An inline call: add(1, neg(5)).
    let key = client
        .submit(
            Call::new(f("operator:add"))
                .arg(1i64)
                .arg(Arg::from(Call::new(f("operator:neg")).arg(5i64))),
        )
        .unwrap();
    assert_eq!(int(&result(&client, &key).await.unwrap()), -4);

    // map: neg over 0..1000, in one graph.
    let neg = f("operator:neg");
    let keys = client.map(&neg, (0..1000i64).map(|i| [i])).unwrap();
    assert_eq!(keys.len(), 1000);
    assert!(keys
        .iter()
        .all(|k| matches!(k, Key::Str(s) if s.starts_with("neg-"))));
    tokio::time::timeout(Duration::from_secs(120), client.wait(&keys))
        .await
        .expect("the map within 120 s")
        .unwrap();
    let values = client.gather(&keys).await.unwrap();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(int(&values[k]), -(i as i128), "{k}");
    }

    // A task that raises: its exception, read from the pickles.
    let key = client
        .submit(Call::new(f("operator:truediv")).arg(1i64).arg(0i64))
        .unwrap();
    match result(&client, &key).await {
        Err(ClientError::Erred(e)) => {
            assert_eq!(e.key(), &key);
            assert_eq!(e.type_name(), Some("ZeroDivisionError"), "{e}");
            assert_eq!(e.message(), Some("division by zero"));
            let exc = e.exception().unwrap();
            assert_eq!(exc.module, "builtins");
            assert_eq!(exc.args, vec![Value::from("division by zero")]);
            eprintln!("{e}\n{:?}", e.traceback());
        }
        other => panic!("truediv(1, 0): {other:?}"),
    }

    // A module the scheduler cannot import: the error names it.
    let key = client
        .submit(Call::new(f("no_such_module:f")).arg(1i64))
        .unwrap();
    match result(&client, &key).await {
        Err(ClientError::Erred(e)) => {
            let text = e.to_string();
            assert!(
                e.chain().any(|x| x.message.contains("no_such_module")),
                "{text}: {:?}",
                e.exception()
            );
            assert!(text.contains("no_such_module"), "{text}");
        }
        other => panic!("no_such_module:f: {other:?}"),
    }
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computes_on_a_key_a_python_client_holds() {
    let python = dask_python::python();
    let (dir, _daemons, addr) = cluster("compute-peer");
    let done = dir.path().join("rust-done");
    let mut py = Daemon::start(
        "peer",
        Command::new(&python)
            .arg(dask_python::repo_root().join("tests/dask/client_peer.py"))
            .args([addr.as_str(), "compute", done.to_str().unwrap()]),
        dir.path(),
    );
    let submitted: Json = py.wait_for(cluster::STARTUP, |out| {
        out.lines()
            .filter(|l| l.starts_with("{\"check\": \"submitted\""))
            .find_map(|l| serde_json::from_str(l).ok())
    });
    let client = connect(&addr).await;
    let key = client
        .submit(
            Call::new(f("operator:add"))
                .arg(Key::from("py-int"))
                .arg(1i64),
        )
        .unwrap();
    let v = result(&client, &key).await.unwrap();
    assert_eq!(int(&v), submitted["int"].as_i64().unwrap() as i128 + 1);
    std::fs::write(&done, b"").unwrap();
    assert!(
        py.wait_exit(Duration::from_secs(60))
            .is_some_and(|s| s.success()),
        "{}",
        py.logs()
    );
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_task() {
    let (_dir, _daemons, addr) = cluster("compute-cancel");
    let client = connect(&addr).await;
    let key = client
        .submit(Call::new(f("time:sleep")).arg(30i64))
        .unwrap();
    // Running: give the scheduler a moment to hand it to a worker.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    client.cancel(std::slice::from_ref(&key), false).unwrap();
    match tokio::time::timeout(Duration::from_secs(2), client.result(&key)).await {
        Ok(Err(ClientError::Cancelled(k))) => assert_eq!(k, key),
        other => panic!("cancelled sleep: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    client.close().await.unwrap();
}

/// A key the scheduler does not know is `Unknown` to `wait`, at once; one
/// submitted later (here by a second client) is waited for by `wait_for`;
/// one that never comes is `TimedOut` at the time given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_and_keys_still_to_come() {
    let (_dir, _daemons, addr) = cluster("compute-wait-for");
    let client = connect(&addr).await;
    let never = Key::from("never-submitted");
    let never_ = std::slice::from_ref(&never);
    match tokio::time::timeout(Duration::from_secs(10), client.wait(never_)).await {
        Ok(Err(e)) => {
            assert_eq!(e.kind(), framewire::ErrorKind::Unknown, "{e}");
            assert_eq!(e.keys(), never_);
        }
        other => panic!("a key never submitted: {other:?}"),
    }

    // Unknown, then submitted: no longer unknown.
    client
        .submit_as(never.clone(), Call::new(f("operator:neg")).arg(1i64))
        .expect("submit");
    assert_eq!(int(&result(&client, &never).await.expect("now known")), -1);
    client.release(never_).unwrap();
    let never = Key::from("never-submitted-either");
    let never_ = std::slice::from_ref(&never);

    let later = Key::from("submitted-later");
    let submitter = connect(&addr).await;
    let key = later.clone();
    let submitting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let add = Call::new(f("operator:add")).arg(40i64).arg(2i64);
        submitter.submit_as(key, add).expect("submit");
        submitter
    });
    let later_ = std::slice::from_ref(&later);
    client
        .wait_for(later_, Duration::from_secs(60))
        .await
        .expect("the key submitted later, in memory");
    assert_eq!(
        int(&client.gather(later_).await.expect("gather")[&later]),
        42
    );
    let submitter = submitting.await.unwrap();

    let started = std::time::Instant::now();
    match client.wait_for(never_, Duration::from_secs(1)).await {
        Err(e) => {
            assert_eq!(e.kind(), framewire::ErrorKind::Timeout, "{e}");
            assert_eq!(e.keys(), never_);
        }
        Ok(()) => panic!("a key never submitted came"),
    }
    assert!(started.elapsed() >= Duration::from_secs(1));
    submitter.close().await.unwrap();
    client.close().await.unwrap();
}

/// `gather` that fails names each key and why: an erred key with its
/// exception (for a client that followed it, and for one that did not), a
/// key the scheduler does not know, one still computing, one cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gather_names_why_each_key_failed() {
    let (_dir, _daemons, addr) = cluster("compute-gather-why");
    let client = connect(&addr).await;
    let good = Key::from("good");
    let bad = Key::from("bad");
    let nope = Key::from("never-there");
    client
        .compute([
            (
                good.clone(),
                Call::new(f("operator:add")).arg(1i64).arg(2i64),
            ),
            (
                bad.clone(),
                Call::new(f("operator:truediv")).arg(1i64).arg(0i64),
            ),
        ])
        .unwrap();
    client.wait(std::slice::from_ref(&good)).await.unwrap();
    match tokio::time::timeout(
        Duration::from_secs(60),
        client.wait(std::slice::from_ref(&bad)),
    )
    .await
    {
        Ok(Err(ClientError::Erred(_))) => {}
        other => panic!("bad: {other:?}"),
    }

    let check = |e: ClientError| {
        let text = e.to_string();
        let ClientError::Missing(missing) = e else {
            panic!("not Missing: {text}");
        };
        assert_eq!(missing.keys(), [bad.clone(), nope.clone()], "{text}");
        match missing.reason(&bad) {
            Some(KeyFailure::Erred(task)) => {
                assert_eq!(task.type_name(), Some("ZeroDivisionError"), "{text}");
                assert_eq!(task.message(), Some("division by zero"), "{text}");
            }
            other => panic!("bad: {other:?} ({text})"),
        }
        assert_eq!(missing.reason(&nope), Some(&KeyFailure::Unknown), "{text}");
        assert!(
            text.contains("ZeroDivisionError: division by zero")
                && text.contains("unknown to the scheduler"),
            "{text}"
        );
    };
    let asked = [good.clone(), bad.clone(), nope.clone()];
    // The client that followed `bad`: its exception from the stream.
    check(client.gather(&asked).await.unwrap_err());
    // A client that did not: asked of the scheduler, and let go again.
    let other = connect(&addr).await;
    check(other.gather(&asked).await.unwrap_err());
    assert!(other.held().is_empty(), "{:?}", other.held());
    other.close().await.unwrap();

    // Still computing, then cancelled.
    let slow = client
        .submit(Call::new(f("time:sleep")).arg(30i64))
        .unwrap();
    let slow_ = std::slice::from_ref(&slow);
    // Known to the scheduler first (the graph goes on the stream).
    while client.task_status(slow_).await.unwrap()[&slow].is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match client.gather(slow_).await {
        Err(ClientError::Missing(e)) => match e.reason(&slow) {
            Some(KeyFailure::NotInMemory(state)) => {
                assert!(
                    ["processing", "waiting", "queued", "released"].contains(&state.as_str()),
                    "{state}"
                )
            }
            other => panic!("slow: {other:?}"),
        },
        other => panic!("slow: {other:?}"),
    }
    client.cancel(slow_, false).unwrap();
    match tokio::time::timeout(Duration::from_secs(10), client.wait(slow_)).await {
        Ok(Err(ClientError::Cancelled(_))) => {}
        other => panic!("cancelled: {other:?}"),
    }
    match client.gather(slow_).await {
        Err(ClientError::Missing(e)) => {
            assert_eq!(e.reason(&slow), Some(&KeyFailure::Cancelled), "{e}")
        }
        other => panic!("cancelled: {other:?}"),
    }
    client.close().await.unwrap();
}
