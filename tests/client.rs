//! `framewire::dask::Client` in a real Dask cluster: an unmodified Python
//! `dask scheduler` (2026.8.0), Python `dask worker`s, and Python
//! `Client`s (`tests/dask/client_peer.py`) that use the keys the Rust
//! client holds and compute the keys it waits for, and report what the
//! scheduler knows. The tests fail, never skip, when Python Dask is
//! missing.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/dask_python.rs"]
mod dask_python;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use bytes::Bytes;
use cluster::{python_worker, scheduler, scheduler_with, scratch_dir, Daemon};
use framewire::dask::{Client, ClientOptions, Key};
use framewire::pickle::PickleFamily;
use framewire::serialize::{deserialize_blocks, DeserializeOptions, Registry};
use framewire::{NdArray, Value};
use serde_json::Value as Json;

fn peer_script() -> std::path::PathBuf {
    dask_python::repo_root().join("tests/dask/client_peer.py")
}

fn facts_of(stdout: &str) -> HashMap<String, Json> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Json>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .map(|j| (j["check"].as_str().unwrap().to_owned(), j))
        .collect()
}

/// Runs the peer script to its end; its facts by check name.
fn peer(python: &Path, args: &[&str], logs: &[&Daemon]) -> HashMap<String, Json> {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(python)
        .arg(peer_script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the peer script");
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        status.success(),
        "peer script failed ({status})\n--- stdout:\n{stdout}--- stderr:\n{}\n{}",
        String::from_utf8_lossy(&stderr),
        logs.iter().map(|d| d.logs()).collect::<Vec<_>>().join("\n")
    );
    print!("{stdout}");
    facts_of(&stdout)
}

fn f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn as_f64s(v: &Json) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The interval at which the scheduler asks clients for heartbeats here
/// (10 × its worker interval of 0.5 s), s.
const HEARTBEAT_S: f64 = 5.0;
/// How late a heartbeat may be on a loaded machine, s.
const LATE_S: f64 = 3.0;

/// The client's heartbeats as the scheduler records them over `seconds`
/// (`client_peer.py heartbeats`): their times, s; the client stays
/// registered meanwhile.
fn heartbeats(python: &Path, addr: &str, id: &str, seconds: u64, logs: &[&Daemon]) -> Vec<f64> {
    let facts = peer(
        python,
        &[addr, "heartbeats", id, &seconds.to_string()],
        logs,
    );
    let h = &facts["heartbeats"];
    assert_eq!(h["registered"], true, "{h}");
    as_f64s(&h["beats"])
}

/// The Rust client scatters a 1000×1000 float64 array; a Python `Client`
/// picks it up by key and gets the right sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_computes_on_what_rust_scattered() {
    let python = dask_python::python();
    let dir = scratch_dir("client-scatter");
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, a1) = python_worker(&python, dir.path(), &addr, "w1");
    let (w2, a2) = python_worker(&python, dir.path(), &addr, "w2");

    let client = Client::connect(&addr, ClientOptions::default())
        .await
        .expect("connect");
    // x[i, j] = (1000 i + j) / 2: the sum is exact in float64.
    let n = 1_000_000u64;
    let data: Vec<u8> = (0..n)
        .flat_map(|i| (i as f64 / 2.0).to_le_bytes())
        .collect();
    let array = NdArray::from_c_order("<f8", &[1000, 1000], Bytes::from(data)).unwrap();
    let key = Key::from("rust-array");
    let small = Key::from("rust-bytes");
    let who_has = client
        .scatter([
            (key.clone(), Value::NdArray(Box::new(array))),
            (small.clone(), Value::bin(&b"hello from rust"[..])),
        ])
        .await
        .expect("scatter");
    // Round robin over the two workers.
    let placed: Vec<&str> = [&key, &small]
        .iter()
        .map(|k| who_has[*k][0].as_str())
        .collect();
    assert_ne!(placed[0], placed[1], "{who_has:?}");
    for w in &placed {
        assert!([&a1, &a2].contains(&&w.to_string()), "{w}");
    }
    assert_eq!(client.who_has(std::slice::from_ref(&key)).await.unwrap(), {
        let mut m = framewire::dask::Map::default();
        m.insert(key.clone(), who_has[&key].clone());
        m
    });

    let facts = peer(
        &python,
        &[&addr, "sum", "rust-array", "rust-bytes"],
        &[&sched, &w1, &w2],
    );
    // Python holds `bytes`, as when a Python client scatters them (that
    // they went inline is checked on the wire: worker_connections_are_pooled).
    assert_eq!(facts["bytes"]["type"], "bytes", "{facts:?}");
    assert_eq!(facts["bytes"]["value"], "hello from rust");
    // What 2026.8.0 needs: `Future(key, client=c)` alone stays pending.
    assert_eq!(facts["plain-future"]["pending"], true, "{facts:?}");
    let s = &facts["sum"];
    assert_eq!(s["status"], "finished");
    assert_eq!(s["dtype"], "float64");
    assert_eq!(s["shape"], serde_json::json!([1000, 1000]));
    assert_eq!(as_f64s(&s["corner"]), vec![0.0, 0.5, 499_999.5]);
    let expected = (n * (n - 1) / 2) as f64 / 2.0;
    assert_eq!(s["sum"].as_f64(), Some(expected));
    assert_eq!(s["local_sum"].as_f64(), Some(expected));
    assert_eq!(s["who_has"], serde_json::json!([who_has[&key][0]]));

    // Back from the workers, the bytes as they went.
    let got = client
        .gather(std::slice::from_ref(&small))
        .await
        .expect("gather");
    assert_eq!(got[&small], Value::bin(&b"hello from rust"[..]));
    client.close().await.expect("close");
}

/// Python computes under known keys; the Rust client waits for each and
/// gathers it: the array zero-copy, the others from their pickles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_waits_for_and_gathers_what_python_computed() {
    let python = dask_python::python();
    let dir = scratch_dir("client-gather");
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, _) = python_worker(&python, dir.path(), &addr, "w1");
    let done = dir.path().join("rust-done");
    let mut py = Daemon::start(
        "peer",
        Command::new(&python).arg(peer_script()).args([
            addr.as_str(),
            "compute",
            done.to_str().unwrap(),
        ]),
        dir.path(),
    );
    let submitted: Json = py.wait_for(cluster::STARTUP, |out| {
        out.lines()
            .filter(|l| l.starts_with("{\"check\": \"submitted\""))
            .find_map(|l| serde_json::from_str(l).ok())
    });

    let registry = Registry::default().with(PickleFamily);
    let opts = ClientOptions::new().registry(registry.clone());
    let client = Client::connect(&addr, opts).await.expect("connect");
    let keys: Vec<Key> = ["py-array", "py-int", "py-dict", "py-list"]
        .into_iter()
        .map(Key::from)
        .collect();
    // The tasks sleep 1.5 s: the wait is on the scheduler's reports.
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), client.wait(&keys))
        .await
        .expect("the keys in memory within 60 s")
        .expect("wait");
    eprintln!("waited {:?}", started.elapsed());
    let who_has = client.who_has(&keys).await.unwrap();
    assert!(who_has.values().all(|w| w.len() == 1), "{who_has:?}");

    // A task that raised: an error naming the key, not a hang.
    let bad = Key::from("py-bad");
    match tokio::time::timeout(
        Duration::from_secs(60),
        client.wait(std::slice::from_ref(&bad)),
    )
    .await
    .expect("py-bad reported within 60 s")
    {
        Err(e) if e.kind() == framewire::ErrorKind::TaskErred => {
            assert_eq!(e.keys(), std::slice::from_ref(&bad), "{e}");
            let framewire::dask::ClientError::Erred(task) = &e else {
                unreachable!()
            };
            assert_eq!(task.key(), &bad);
        }
        other => panic!("py-bad: {other:?}"),
    }

    // The array: an NdArray over the frame it arrived in.
    let blocks = client.gather_blocks(&keys[..1]).await.expect("gather");
    let block = blocks[&keys[0]].clone();
    let frame_ptrs: Vec<*const u8> = match &block {
        Value::Serialized(b) => b.frames().iter().map(|f| f.as_ptr()).collect(),
        other => panic!("not a block: {other:?}"),
    };
    let mut read = DeserializeOptions::default();
    read.registry = registry;
    let array = match deserialize_blocks(block, &read).unwrap() {
        Value::NdArray(a) => a,
        other => panic!("not an array: {other:?}"),
    };
    assert!(
        frame_ptrs.contains(&array.data().as_ptr()),
        "the array's data is not one of the frames"
    );
    assert_eq!(array.dtype(), "<f8");
    assert_eq!(array.shape(), &[3, 4]);
    assert_eq!(f64s(array.data()), as_f64s(&submitted["array"]["values"]));

    let got = client.gather(&keys).await.expect("gather");
    assert!(matches!(&got[&keys[0]], Value::NdArray(_)));
    assert_eq!(
        got[&keys[1]].as_int().and_then(|i| i.as_i64()),
        Some(1234567)
    );
    let dict: Vec<(String, f64)> = got[&keys[2]]
        .as_map()
        .unwrap_or_else(|| panic!("not a dict: {:?}", got[&keys[2]]))
        .iter()
        .map(|(k, v)| match v {
            Value::Float(f) => (k.as_str().unwrap().to_owned(), *f),
            other => panic!("not a float: {other:?}"),
        })
        .collect();
    let expected: Vec<(String, f64)> = submitted["dict"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    assert_eq!(dict, expected);
    let list = got[&keys[3]]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {:?}", got[&keys[3]]));
    assert_eq!(list.len(), 2);
    let (Value::NdArray(a), Value::NdArray(b)) = (&list[0], &list[1]) else {
        panic!("not arrays: {list:?}");
    };
    assert_eq!((a.dtype(), a.shape()), ("<i8", &[5u64][..]));
    let ints: Vec<i64> = a
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(ints, vec![0, 1, 2, 3, 4]);
    assert_eq!((b.dtype(), b.shape()), ("<f8", &[3u64][..]));
    assert_eq!(f64s(b.data()), vec![0.0, 0.5, 1.0]);

    // Python sees the Rust client among those who want the keys.
    std::fs::write(&done, b"").unwrap();
    let status = py
        .wait_exit(Duration::from_secs(60))
        .expect("the peer ends");
    let logs = py.logs();
    assert!(status.success(), "{logs}\n{}\n{}", sched.logs(), w1.logs());
    let held = facts_of(&py.stdout()).remove("held").expect("held");
    for k in ["py-array", "py-int", "py-dict", "py-list"] {
        let wanted: Vec<&str> = held["wanted"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert!(wanted.contains(&client.id()), "{k}: {wanted:?}");
    }
    assert_eq!(held["bad"], "error", "{held}");
    client.close().await.expect("close");
}

/// The Rust client stays registered across several heartbeat intervals;
/// after `close`, the scheduler forgets its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_then_close_forgets_keys() {
    let python = dask_python::python();
    let dir = scratch_dir("client-close");
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, _) = python_worker(&python, dir.path(), &addr, "w1");
    let logs = [&sched, &w1];

    let opts = ClientOptions::new().heartbeat_interval(Duration::from_millis(500));
    let client = Client::connect(&addr, opts).await.expect("connect");
    let key = Key::from("rust-held");
    client
        .scatter([(key.clone(), Value::from(7u8))])
        .await
        .expect("scatter");
    let id = client.id().to_owned();
    let look = || peer(&python, &[&addr, "client", &id, "rust-held"], &logs)["client"].clone();

    let first = look();
    assert_eq!(first["registered"], true, "{first}");
    assert_eq!(first["key_state"], "memory", "{first}");
    assert_eq!(first["who_wants"], serde_json::json!([id.clone()]));
    // The scheduler asks for a heartbeat every 5 s (10 × its worker interval
    // of 0.5 s): over 15 s it records them at that interval, and the client
    // stays registered. The client starts at its own 0.5 s until the
    // scheduler's `adjust-heartbeat-interval` reaches it.
    let beats = heartbeats(&python, &addr, &id, 15, &logs);
    let gaps: Vec<f64> = beats.windows(2).map(|w| w[1] - w[0]).collect();
    let Some(adjusted) = gaps.iter().position(|g| *g >= 4.0) else {
        panic!("never at the scheduler's interval of {HEARTBEAT_S} s: {beats:?}")
    };
    assert!(
        gaps.len() - adjusted >= 2,
        "fewer than two heartbeats at the scheduler's interval in 15 s: {beats:?}"
    );
    for gap in &gaps[adjusted..] {
        // Not faster than asked; late by no more than a loaded machine is.
        assert!(
            (4.0..=HEARTBEAT_S + LATE_S).contains(gap),
            "a heartbeat {gap:.2} s after the last (every {HEARTBEAT_S} s asked): {beats:?}"
        );
    }
    for gap in &gaps[..adjusted] {
        assert!(*gap < 1.5, "before the adjustment, every 0.5 s: {beats:?}");
    }
    let now = look();
    assert_eq!(now["key_state"], "memory", "{now}");
    // Holds are counted: held twice, released once, the key stays wanted.
    client.desire(std::slice::from_ref(&key)).expect("desire");
    client.release(std::slice::from_ref(&key)).expect("release");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = look();
    assert_eq!(now["who_wants"], serde_json::json!([id.clone()]), "{now}");
    assert_eq!(client.held(), vec![key.clone()]);
    // The last hold goes: the scheduler forgets the key.
    client.release(std::slice::from_ref(&key)).expect("release");
    let mut now = look();
    for _ in 0..50 {
        if now["key_state"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = look();
    }
    assert!(now["key_state"].is_null(), "released, yet kept: {now}");
    assert_eq!(now["registered"], true, "{now}");
    client
        .scatter([(key.clone(), Value::from(7u8))])
        .await
        .expect("scatter");
    client.close().await.expect("close");
    // The scheduler needs a moment to forget.
    let mut last = Json::Null;
    for _ in 0..50 {
        last = look();
        if last["registered"] == false && last["key_state"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last["registered"], false, "{last}");
    assert!(last["key_state"].is_null(), "the key is kept: {last}");
}

/// A scheduler that goes away and comes back on the same address: the
/// client lets go of its keys (as Dask cancels every future) and registers
/// again under its id (`Client._reconnect`), heartbeats on, and scatters to
/// the new cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_after_the_scheduler_restarts() {
    let python = dask_python::python();
    let dir = scratch_dir("client-reconnect");
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, _) = python_worker(&python, dir.path(), &addr, "w1");

    let opts = ClientOptions::new()
        .heartbeat_interval(Duration::from_millis(500))
        .registry(Registry::default().with(PickleFamily));
    let client = Client::connect(&addr, opts).await.expect("connect");
    let id = client.id().to_owned();
    let before = Key::from("before-restart");
    client
        .scatter([(before.clone(), Value::from(1u8))])
        .await
        .expect("scatter");
    assert_eq!(client.held(), vec![before.clone()]);

    drop(w1);
    drop(sched);
    // The stream's end is seen at once: the keys are let go.
    let mut held = client.held();
    for _ in 0..100 {
        if held.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        held = client.held();
    }
    assert!(
        held.is_empty(),
        "keys still held after the stream ended: {held:?}"
    );

    let port = addr.rsplit(':').next().unwrap().to_owned();
    let (sched, addr2) = scheduler_with(&python, dir.path(), "scheduler2", &[], &["--port", &port]);
    assert_eq!(addr2, addr);
    let (w2, _) = python_worker(&python, dir.path(), &addr, "w2");
    let logs = [&sched, &w2];
    let after = Key::from("after-restart");
    let look = || peer(&python, &[&addr, "client", &id, "after-restart"], &logs)["client"].clone();
    // Registered again by itself (connect retry, then every 0.1 s).
    let mut now = look();
    for _ in 0..60 {
        if now["registered"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        now = look();
    }
    assert_eq!(now["registered"], true, "not registered again: {now}");
    client
        .scatter([(after.clone(), Value::from(2u8))])
        .await
        .expect("scatter after the restart");
    let now = look();
    assert_eq!(now["key_state"], "memory", "{now}");
    assert_eq!(now["who_wants"], serde_json::json!([id.clone()]), "{now}");
    // Heartbeats resumed: the scheduler records one within the interval
    // (and a loaded machine's lateness).
    let window = (HEARTBEAT_S + LATE_S).ceil() as u64;
    let beats = heartbeats(&python, &addr, &id, window, &logs);
    assert!(
        beats.len() >= 2,
        "no heartbeat in {window} s after registering again: {beats:?}"
    );
    let got = client
        .gather(std::slice::from_ref(&after))
        .await
        .expect("gather");
    assert_eq!(got[&after], Value::from(2u8));
    client.close().await.expect("close");
}

/// The same over `tls://`: the client's connections (scheduler, stream,
/// workers) present the cluster's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scatter_wait_gather_over_tls() {
    let python = dask_python::python();
    let dir = scratch_dir("client-tls");
    let c = certs::make(&dir.path().join("certs"));
    let files = [c.ca(), c.cert(), c.key()].map(|p| p.to_str().unwrap().to_owned());
    let tls_args = [
        "--tls-ca-file",
        &files[0],
        "--tls-cert",
        &files[1],
        "--tls-key",
        &files[2],
    ];
    let sched_args: Vec<&str> = ["--protocol", "tls"].into_iter().chain(tls_args).collect();
    let (sched, addr) = cluster::scheduler_with(&python, dir.path(), "scheduler", &[], &sched_args);
    assert!(addr.starts_with("tls://"), "{addr}");
    let (w1, w_addr) = cluster::python_worker_with(&python, dir.path(), &addr, "w1", &tls_args);

    let mut connection = framewire::transport::ConnectionBuilder::new();
    connection.tls(
        framewire::transport::TlsConfig::from_pem_files(&c.ca(), &c.cert(), Some(&c.key()))
            .unwrap(),
    );
    let client = Client::connect(&addr, ClientOptions::new().connection(connection))
        .await
        .expect("connect over tls");
    let key = Key::from(("rust-tls", 1));
    let who_has = client
        .scatter([(key.clone(), Value::bin(vec![7u8; 1 << 20]))])
        .await
        .unwrap_or_else(|e| panic!("scatter: {e}\n{}\n{}", sched.logs(), w1.logs()));
    assert_eq!(who_has[&key], vec![w_addr.clone()]);
    let keys = std::slice::from_ref(&key);
    tokio::time::timeout(Duration::from_secs(30), client.wait(keys))
        .await
        .expect("in memory")
        .expect("wait");
    let got = client.gather(keys).await.expect("gather");
    assert_eq!(got[&key], Value::bin(vec![7u8; 1 << 20]));
    client.close().await.expect("close");
}

/// Worker connections are pooled: a scatter opens one connection to the
/// worker, and the gathers after it reuse it (no connect, no handshake),
/// each getting the value back; a large array gathered again lands in the
/// same (recycled) memory once the last one was dropped, never copied out
/// of it; small bytes are scattered inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_connections_are_pooled() {
    let python = dask_python::python();
    let dir = scratch_dir("client-pool");
    let (sched, addr) = scheduler(&python, dir.path(), &[]);
    let (w1, _) = python_worker(&python, dir.path(), &addr, "w1");

    let client = Client::connect(&addr, ClientOptions::default())
        .await
        .expect("connect");
    let small = Key::from("pooled-bytes");
    let big = Key::from("pooled-array");
    let data = Bytes::from(vec![3u8; 16 << 20]);
    let array = NdArray::from_c_order("<f8", &[2 << 20], data.clone()).unwrap();
    client
        .scatter([
            (small.clone(), Value::bin(&b"pooled"[..])),
            (big.clone(), Value::NdArray(Box::new(array))),
        ])
        .await
        .unwrap_or_else(|e| panic!("scatter: {e}\n{}\n{}", sched.logs(), w1.logs()));
    // One pool, as Dask's client has: the scheduler's connection
    // (`ncores_running`, then reused for `update_data` of who has what) and
    // the worker's (`update_data`).
    assert_eq!((client.pool().opened(), client.pool().reused()), (2, 1));
    assert_eq!(client.pool().idle(&addr), 1);
    for i in 1..=3 {
        let got = client
            .gather(std::slice::from_ref(&small))
            .await
            .expect("gather");
        assert_eq!(got[&small], Value::bin(&b"pooled"[..]));
        // `who_has` to the scheduler, `get_data` to the worker: both reused.
        assert_eq!(
            (client.pool().opened(), client.pool().reused()),
            (2, 1 + 2 * i)
        );
    }
    // The large array gathered twice: the first lands in a fresh receive
    // buffer, the second in the same memory, recycled (the transport counts
    // it when it takes the recycled buffer). Each time the array is the
    // frame itself, not a copy: its memory is shared with the buffer the
    // connection keeps for recycling (a copy would own its memory alone).
    let mut at = None;
    for recycled in 0..2 {
        let before = client.pool().stats();
        let got = client
            .gather(std::slice::from_ref(&big))
            .await
            .expect("gather");
        let Value::NdArray(a) = &got[&big] else {
            panic!("{:?}", got[&big]);
        };
        assert_eq!(a.data(), &data);
        assert!(
            !a.data().is_unique(),
            "gather copied the array out of the buffer it was received in"
        );
        let ptr = a.data().as_ptr();
        drop(got);
        // Counted when the connections were handed back, before `gather`
        // returned.
        let d = client.pool().stats() - before;
        assert_eq!(d.buffers_recycled_on_receive, recycled, "{d:?}");
        assert!(d.bytes_received > 16 << 20, "{d:?}");
        if let Some(first) = at {
            assert_eq!(ptr, first, "the recycled buffer is the first one");
        }
        at = Some(ptr);
    }
    assert_eq!((client.pool().opened(), client.pool().reused()), (2, 11));

    // Bytes of up to 64 KiB go inline in `update_data` (msgpack bin: one
    // frame per message on every connection), larger ones in frames of
    // their own (a header and the payload: two more).
    for (len, out_of_band) in [(64 << 10, 0), ((64 << 10) + 1, 2)] {
        let before = client.pool().stats();
        let key = Key::from(("scattered", len as i64));
        client
            .scatter([(key.clone(), Value::bin(vec![5u8; len]))])
            .await
            .expect("scatter");
        let d = client.pool().stats() - before;
        // `ncores_running`, `update_data` to the worker, then to the
        // scheduler: a request each, a reply each.
        assert_eq!((d.messages_sent, d.messages_received), (3, 3), "{d:?}");
        assert_eq!(
            d.frames_sent,
            d.messages_sent + out_of_band,
            "{len} bytes: {d:?}"
        );
        let got = client
            .gather(std::slice::from_ref(&key))
            .await
            .expect("gather");
        assert_eq!(got[&key], Value::bin(vec![5u8; len]));
    }
    client.close().await.expect("close");
}
