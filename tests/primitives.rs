//! The coordination primitives of `framewire::dask::Client` against
//! Python's own objects in the same cluster: an unmodified Python `dask
//! scheduler` and worker, and Python `Client`s
//! (`tests/dask/primitives_peer.py`) that read what the Rust client
//! published or set, and set what it reads. Each test checks that no key is
//! left in the scheduler afterwards. The tests fail, never skip, when
//! Python Dask is missing. Run against 2026.8.0 and, by `scripts/test`,
//! older releases (`FRAMEWIRE_DASK_RELEASE`, `FRAMEWIRE_PYTHON`): before
//! 2026.6.0 the datasets take their older wire form.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/dask_python.rs"]
mod dask_python;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cluster::{python_worker, scheduler, scratch_dir, Daemon};
use framewire::dask::{Client, ClientOptions, Key, VariableValue};
use framewire::pickle::PickleFamily;
use framewire::serialize::Registry;
use framewire::Value;
use serde_json::Value as Json;

fn peer_script() -> PathBuf {
    dask_python::repo_root().join("tests/dask/primitives_peer.py")
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
fn peer(python: &Path, addr: &str, args: &[&str], logs: &[&Daemon]) -> HashMap<String, Json> {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(python)
        .arg(peer_script())
        .arg(addr)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the peer script");
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        status.success(),
        "peer script {args:?} failed ({status})\n--- stdout:\n{stdout}--- stderr:\n{}\n{}",
        String::from_utf8_lossy(&stderr),
        logs.iter().map(|d| d.logs()).collect::<Vec<_>>().join("\n")
    );
    print!("{stdout}");
    facts_of(&stdout)
}

/// A peer script running on its own, read until it prints `marker`.
struct Running {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
    args: Vec<String>,
}

fn spawn_peer(python: &Path, addr: &str, args: &[&str], marker: &str) -> Running {
    let mut child = Command::new(python)
        .arg(peer_script())
        .arg(addr)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the peer script");
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        let n = lines.read_line(&mut line).unwrap();
        assert!(
            n > 0,
            "peer script {args:?} ended before printing {marker:?}"
        );
        if line.trim() == marker {
            break;
        }
    }
    Running {
        child,
        lines,
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

impl Running {
    /// Its facts, once it ends (successfully).
    fn finish(mut self) -> HashMap<String, Json> {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.lines, &mut rest).unwrap();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "peer {:?} failed ({status}): {rest}",
            self.args
        );
        print!("{rest}");
        facts_of(&rest)
    }
}

/// The keys the scheduler knows, and who wants each (`tasks` mode).
fn tasks(python: &Path, addr: &str, logs: &[&Daemon]) -> serde_json::Map<String, Json> {
    let facts = peer(python, addr, &["tasks"], logs);
    facts["tasks"]["tasks"].as_object().unwrap().clone()
}

/// Waits (up to 10 s) until the scheduler knows no key: none is left
/// pinned.
async fn no_key_left(python: &Path, addr: &str, logs: &[&Daemon]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = tasks(python, addr, logs);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "keys left in the scheduler: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

struct Cluster {
    python: PathBuf,
    addr: String,
    _dir: tempfile::TempDir,
    sched: Daemon,
    worker: Daemon,
}

impl Cluster {
    fn start(tag: &str, env: &[(&str, &str)]) -> Cluster {
        let python = dask_python::python();
        let dir = scratch_dir(tag);
        let (sched, addr) = scheduler(&python, dir.path(), env);
        let (worker, _) = python_worker(&python, dir.path(), &addr, "w1");
        Cluster {
            python,
            addr,
            _dir: dir,
            sched,
            worker,
        }
    }

    fn logs(&self) -> [&Daemon; 2] {
        [&self.sched, &self.worker]
    }

    fn peer(&self, args: &[&str]) -> HashMap<String, Json> {
        peer(&self.python, &self.addr, args, &self.logs())
    }

    async fn client(&self) -> Client {
        // Python's workers pickle the ints Python scattered: read them.
        let opts = ClientOptions::new().registry(Registry::default().with(PickleFamily));
        Client::connect(&self.addr, opts).await.expect("connect")
    }
}

/// A dataset the Rust client publishes is Python's `get_dataset` future;
/// one Python publishes is the Rust client's keys, gathered; unpublished
/// and released, no key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datasets_both_ways() {
    let cl = Cluster::start("prims-datasets", &[]);
    let client = cl.client().await;

    // Rust → Python.
    let x = Key::from("rust-x");
    client
        .scatter([(x.clone(), Value::from(42))])
        .await
        .unwrap();
    client
        .publish_dataset("rust-ds", std::slice::from_ref(&x), false)
        .await
        .unwrap();
    // Publishing the name again without `replace` is the scheduler's error.
    let again = client
        .publish_dataset("rust-ds", std::slice::from_ref(&x), false)
        .await;
    assert!(again.is_err(), "published twice: {again:?}");
    // The dataset holds the key once the client lets it go.
    client.release(std::slice::from_ref(&x)).unwrap();
    let got = cl.peer(&["dataset-get", "rust-ds"]);
    let got = &got["dataset-get"];
    assert_eq!(got["type"], "Future", "{got}");
    assert_eq!(got["key"], "rust-x", "{got}");
    assert_eq!(got["value"], 42, "{got}");
    assert!(
        got["names"].as_array().unwrap().contains(&"rust-ds".into()),
        "{got}"
    );
    assert_eq!(
        client.list_datasets().await.unwrap(),
        vec![Key::from("rust-ds")]
    );

    // Python → Rust.
    let put = cl.peer(&["dataset-put", "py-ds", "1234"]);
    let py_key = Key::from(put["dataset-put"]["key"].as_str().unwrap());
    let ds = client
        .get_dataset("py-ds")
        .await
        .unwrap()
        .expect("py-ds published");
    assert_eq!(ds.keys, vec![py_key.clone()]);
    assert!(matches!(ds.data, Value::Serialized(_)), "{:?}", ds.data);
    let values = client.gather(&ds.keys).await.unwrap();
    assert_eq!(values[&py_key], Value::from(1234));
    assert_eq!(client.get_dataset("no-such").await.unwrap(), None);
    let mut names = client.list_datasets().await.unwrap();
    names.sort_by_key(|k| k.to_string());
    assert_eq!(names, vec![Key::from("py-ds"), Key::from("rust-ds")]);

    // Plain objects, no key: Rust's `publish_value` read by Python's
    // `get_dataset`, and the reverse.
    let plain = Value::map_of([
        ("from", Value::str("rust")),
        ("n", Value::Array(vec![Value::from(1), Value::from(2)])),
    ]);
    client
        .publish_value("rust-plain", plain, false)
        .await
        .unwrap();
    let got = cl.peer(&["dataset-get-plain", "rust-plain"]);
    let got = &got["dataset-get-plain"];
    assert_eq!(got["type"], "dict", "{got}");
    assert_eq!(
        got["value"],
        serde_json::json!({"from": "rust", "n": [1, 2]})
    );
    cl.peer(&["dataset-put-plain", "py-plain"]);
    let plain_ds = client
        .get_dataset("py-plain")
        .await
        .unwrap()
        .expect("py-plain published");
    assert!(plain_ds.keys.is_empty(), "{plain_ds:?}");
    assert_eq!(
        plain_ds.data,
        Value::map_of([
            ("from", Value::str("python")),
            ("n", Value::Array(vec![Value::from(1), Value::from(2)])),
        ])
    );
    client.unpublish_dataset("rust-plain").await.unwrap();
    client.unpublish_dataset("py-plain").await.unwrap();

    // Unpublished and released: nothing left.
    client.unpublish_dataset("rust-ds").await.unwrap();
    client.unpublish_dataset("py-ds").await.unwrap();
    client.release(&ds.keys).unwrap();
    assert!(client.list_datasets().await.unwrap().is_empty());
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;
    client.close().await.unwrap();
}

/// A Variable set by Python (a future, a plain value) is read by Rust and
/// the reverse; with the receipt confirmed, deleting the variable and
/// releasing the key leaves no key pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_both_ways() {
    let cl = Cluster::start("prims-variables", &[]);
    let client = cl.client().await;

    // Python → Rust: a future.
    let set = cl.peer(&["variable-set", "py-var", "7"]);
    let py_key = Key::from(set["variable-set"]["key"].as_str().unwrap());
    let var = client.variable("py-var");
    let Some(VariableValue::Key { key, state }) =
        var.get(Some(Duration::from_secs(10))).await.unwrap()
    else {
        panic!("py-var holds no key");
    };
    assert_eq!(key, py_key);
    assert_eq!(state, "memory");
    assert_eq!(
        client.gather(std::slice::from_ref(&key)).await.unwrap()[&key],
        Value::from(7)
    );
    var.delete().unwrap();
    client.release(std::slice::from_ref(&key)).unwrap();
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;

    // Python → Rust: a plain value.
    cl.peer(&["variable-set-plain", "py-plain"]);
    let plain = client.variable("py-plain").get(None).await.unwrap();
    assert_eq!(
        plain,
        Some(VariableValue::Value(Value::map_of([(
            "from",
            Value::str("python")
        )])))
    );
    // Not set: a timeout.
    let none = client
        .variable("never-set")
        .get(Some(Duration::from_millis(300)))
        .await
        .unwrap();
    assert_eq!(none, None);

    // Rust → Python: a key, then a plain value.
    let x = Key::from("rust-var-x");
    client
        .scatter([(x.clone(), Value::from(99))])
        .await
        .unwrap();
    let rv = client.variable("rust-var");
    rv.set_key(&x).await.unwrap();
    client.release(std::slice::from_ref(&x)).unwrap();
    let got = cl.peer(&["variable-get", "rust-var"]);
    assert_eq!(got["variable-get"]["type"], "Future");
    assert_eq!(got["variable-get"]["key"], "rust-var-x");
    assert_eq!(got["variable-get"]["value"], 99);
    rv.set(Value::map_of([("from", Value::str("rust"))]))
        .await
        .unwrap();
    let got = cl.peer(&["variable-get", "rust-var"]);
    assert_eq!(got["variable-get"]["type"], "dict");
    assert_eq!(got["variable-get"]["value"]["from"], "rust");
    rv.delete().unwrap();
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;
    client.close().await.unwrap();
}

/// An Event set by Rust wakes a Python `Event.wait`; one set by Python
/// wakes Rust's; `is_set` and `clear` agree with Python's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_both_ways() {
    let cl = Cluster::start("prims-events", &[]);
    let client = cl.client().await;

    let ev = client.event("rust-sets");
    assert!(!ev.is_set().await.unwrap());
    let waiting = spawn_peer(
        &cl.python,
        &cl.addr,
        &["event-wait", "rust-sets", "30"],
        "waiting",
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ev.set().await.unwrap();
    let woke = waiting.finish();
    assert_eq!(woke["event-wait"]["woke"], true, "{woke:?}");
    let waited = woke["event-wait"]["waited"].as_f64().unwrap();
    assert!(waited > 0.5 && waited < 25.0, "waited {waited} s");
    assert!(ev.is_set().await.unwrap());
    ev.clear().await.unwrap();
    assert!(!ev.is_set().await.unwrap());
    // Cleared: a wait times out, here and in Python.
    assert!(!ev.wait(Some(Duration::from_millis(300))).await.unwrap());
    let timed_out = cl.peer(&["event-wait", "rust-sets", "0.3"]);
    assert_eq!(timed_out["event-wait"]["woke"], false);

    // Python sets, Rust waits.
    let py = client.event("python-sets");
    let waiter = {
        let py = py.clone();
        tokio::spawn(async move { py.wait(Some(Duration::from_secs(30))).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    let set = cl.peer(&["event-set", "python-sets"]);
    assert_eq!(set["event-set"]["is_set"], true);
    assert!(waiter.await.unwrap().unwrap());
    assert!(py.is_set().await.unwrap());
    client.close().await.unwrap();
}

/// A Lock held by Rust blocks Python's `Lock.acquire(timeout=...)` and the
/// reverse; a lock held past the lease timeout stays held, as the Rust
/// client refreshes its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_both_ways() {
    // Leases checked every 0.5 s, so that one not refreshed lapses fast.
    let cl = Cluster::start(
        "prims-locks",
        &[(
            "DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_VALIDATION_INTERVAL",
            "0.5s",
        )],
    );
    let client = cl.client().await;

    // Rust holds: Python's acquire times out; released, Python gets it.
    let lock = client.lock("rust-lock");
    assert!(lock.acquire(Some(Duration::from_secs(5))).await.unwrap());
    assert!(lock.locked().await.unwrap());
    let tried = cl.peer(&["lock-try", "rust-lock", "1"]);
    assert_eq!(tried["lock-try"]["acquired"], false, "{tried:?}");
    assert!(tried["lock-try"]["waited"].as_f64().unwrap() >= 0.9);
    assert!(lock.release().await.unwrap());
    assert!(!lock.release().await.unwrap(), "released twice");
    let tried = cl.peer(&["lock-try", "rust-lock", "5"]);
    assert_eq!(tried["lock-try"]["acquired"], true, "{tried:?}");

    // Python holds: Rust's acquire times out, then gets it once released.
    let holding = spawn_peer(&cl.python, &cl.addr, &["lock-hold", "py-lock", "3"], "held");
    let lock = client.lock("py-lock");
    let start = Instant::now();
    assert!(!lock
        .acquire(Some(Duration::from_millis(500)))
        .await
        .unwrap());
    assert!(start.elapsed() >= Duration::from_millis(450));
    assert!(lock.acquire(Some(Duration::from_secs(30))).await.unwrap());
    assert_eq!(holding.finish()["lock-hold"]["released"], true);
    assert!(lock.release().await.unwrap());

    // A lease of 2 s held for 5 s: refreshed (every 0.4 s), so still held.
    let short = client.semaphore_with("short-lease", 1, Some(Duration::from_secs(2)));
    assert!(short.acquire(Some(Duration::from_secs(5))).await.unwrap());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let tried = cl.peer(&["lock-try", "short-lease", "0.2"]);
    assert_eq!(
        tried["lock-try"]["acquired"], false,
        "the lease lapsed: {tried:?}"
    );
    assert_eq!(short.value().await.unwrap(), 1);
    assert!(short.release().await.unwrap());
    assert_eq!(short.value().await.unwrap(), 0);
    client.close().await.unwrap();
}

/// A Queue filled by Python is emptied by Rust and the reverse (keys and
/// plain values, in order); the events log is shared both ways; no key is
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_and_the_events_log() {
    let cl = Cluster::start("prims-queues", &[]);
    let client = cl.client().await;

    // Python → Rust.
    let put = cl.peer(&["queue-put", "py-q", "5"]);
    assert_eq!(put["queue-put"]["qsize"], 2);
    let py_key = Key::from(put["queue-put"]["key"].as_str().unwrap());
    let q = client.queue("py-q", 0).await.unwrap();
    assert_eq!(q.qsize().await.unwrap(), 2);
    let Some(VariableValue::Key { key, state }) =
        q.get(Some(Duration::from_secs(10))).await.unwrap()
    else {
        panic!("the first item is not a key");
    };
    assert_eq!((&key, state.as_str()), (&py_key, "memory"));
    assert_eq!(
        client.gather(std::slice::from_ref(&key)).await.unwrap()[&key],
        Value::from(5)
    );
    assert_eq!(
        q.get(None).await.unwrap(),
        Some(VariableValue::Value(Value::str("plain")))
    );
    assert_eq!(q.qsize().await.unwrap(), 0);
    // Empty: a timeout.
    assert_eq!(q.get(Some(Duration::from_millis(300))).await.unwrap(), None);
    client.release(std::slice::from_ref(&key)).unwrap();
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;

    // Rust → Python.
    let rq = client.queue("rust-q", 0).await.unwrap();
    let x = Key::from("rust-q-x");
    client
        .scatter([(x.clone(), Value::from(11))])
        .await
        .unwrap();
    rq.put_key(&x).await.unwrap();
    client.release(std::slice::from_ref(&x)).unwrap();
    rq.put(Value::from(12)).await.unwrap();
    assert_eq!(rq.qsize().await.unwrap(), 2);
    let got = cl.peer(&["queue-get", "rust-q", "2"]);
    let items = &got["queue-get"]["items"];
    assert_eq!(items[0]["future"], "rust-q-x", "{items}");
    assert_eq!(items[0]["value"], 11, "{items}");
    assert_eq!(items[1]["value"], 12, "{items}");
    assert_eq!(got["queue-get"]["qsize"], 0);
    rq.close().unwrap();
    q.close().unwrap();
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;

    // The events log.
    client
        .log_event("rust-topic", Value::map_of([("from", Value::str("rust"))]))
        .await
        .unwrap();
    let seen = cl.peer(&["events", "rust-topic"]);
    assert_eq!(
        seen["events"]["msgs"],
        serde_json::json!([{"from": "rust"}])
    );
    cl.peer(&["log-event", "py-topic"]);
    let events = client.events("py-topic").await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, Value::map_of([("from", Value::str("python"))]));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - events[0].0).abs() < 120.0, "{events:?}");
    assert!(client.events("no-topic").await.unwrap().is_empty());
    client.close().await.unwrap();
}

/// Subscriptions to event topics, both ways: Rust's `subscribe_topic`
/// receives what Python's `log_event` logs, as a stream; Python's
/// `subscribe_topic` handler receives what Rust logs; dropping the
/// subscription unsubscribes (the scheduler's broker no longer names the
/// Rust client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_as_streams_both_ways() {
    let cl = Cluster::start("prims-topics", &[]);
    let client = cl.client().await;

    // Python → Rust.
    let mut events = client.subscribe_topic("py-news").unwrap();
    assert_eq!(events.topic(), "py-news");
    // The subscription goes on the batched stream, an event logged by a
    // call (as Python's client does both: `subscribe_topic` with
    // `_send_to_scheduler`, `log_event` with `scheduler.log_event`): an
    // event logged before the subscription arrived is not sent to it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribed = cl.peer(&["subscribers", "py-news"]);
        if subscribed["subscribers"]["clients"] == serde_json::json!([client.id()]) {
            break;
        }
        assert!(Instant::now() < deadline, "not subscribed: {subscribed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .log_event("py-news", Value::str("ping"))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("the ping within 30 s")
        .expect("the subscription lives");
    assert_eq!(
        (first.topic.as_str(), &first.msg),
        ("py-news", &Value::str("ping"))
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - first.time).abs() < 120.0, "{first:?}");
    // A second subscription to the topic gets the events too.
    let mut second = client.subscribe_topic("py-news").unwrap();
    cl.peer(&["log-event", "py-news"]);
    for subscription in [&mut events, &mut second] {
        let got = tokio::time::timeout(Duration::from_secs(30), subscription.next())
            .await
            .expect("Python's event within 30 s")
            .expect("the subscription lives");
        assert_eq!(got.msg, Value::map_of([("from", Value::str("python"))]));
    }
    assert_eq!(events.try_next(), None);
    let subscribed = cl.peer(&["subscribers", "py-news"]);
    assert_eq!(
        subscribed["subscribers"]["clients"],
        serde_json::json!([client.id()])
    );
    // One dropped: still subscribed; both: not.
    drop(second);
    let subscribed = cl.peer(&["subscribers", "py-news"]);
    assert_eq!(
        subscribed["subscribers"]["clients"],
        serde_json::json!([client.id()])
    );
    drop(events);
    // The unsubscription goes on the stream: a moment to arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribed = cl.peer(&["subscribers", "py-news"]);
        if subscribed["subscribers"]["clients"] == serde_json::json!([]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still subscribed: {subscribed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Rust → Python.
    let python = cl.python.clone();
    let addr = cl.addr.clone();
    let listening = spawn_peer(
        &python,
        &addr,
        &["subscribe", "rust-news", "2"],
        "subscribed",
    );
    client
        .log_event("rust-news", Value::map_of([("n", Value::from(1))]))
        .await
        .unwrap();
    client
        .log_event("rust-news", Value::map_of([("n", Value::from(2))]))
        .await
        .unwrap();
    let heard = listening.finish();
    assert_eq!(
        heard["subscribe"]["msgs"],
        serde_json::json!([{"n": 1}, {"n": 2}])
    );

    // Unsubscribed by name: the stream ends.
    let mut ended = client.subscribe_topic("ends").unwrap();
    client.unsubscribe_topic("ends").unwrap();
    assert_eq!(ended.next().await, None);
    client.close().await.unwrap();
}

/// Keys handed over to a Python client: scattered for it
/// (`scatter_for`) and a computed key held on its behalf (`desire_for`);
/// the Rust client closes, the keys stay, held for the Python client only,
/// which reads them; when it is done, no key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_to_a_python_client() {
    let cl = Cluster::start("prims-handover", &[]);
    let dir = tempfile::tempdir().unwrap();
    let idfile = dir.path().join("id");
    let gofile = dir.path().join("go");
    let computed = Key::from("computed-for-python");
    let adopting = spawn_peer(
        &cl.python,
        &cl.addr,
        &[
            "adopt",
            idfile.to_str().unwrap(),
            gofile.to_str().unwrap(),
            "handed",
            "computed-for-python",
        ],
        "ready",
    );
    let python_id = std::fs::read_to_string(&idfile).unwrap();
    assert!(python_id.starts_with("Client-"), "{python_id}");

    let client = cl.client().await;
    let handed = Key::from("handed");
    let who_has = client
        .scatter_for(&python_id, [(handed.clone(), Value::from(7))])
        .await
        .unwrap();
    assert!(who_has.contains_key(&handed));
    assert!(client.held().is_empty(), "{:?}", client.held());
    let add: framewire::dask::PyFunction = "operator:add".parse().unwrap();
    client
        .submit_as(
            computed.clone(),
            framewire::dask::Call::new(add).arg(40i64).arg(2i64),
        )
        .unwrap();
    client.wait(std::slice::from_ref(&computed)).await.unwrap();
    client
        .desire_for(&python_id, std::slice::from_ref(&computed))
        .unwrap();
    client.close().await.unwrap();

    std::fs::write(&gofile, b"").unwrap();
    let adopted = adopting.finish();
    let facts = &adopted["adopt"];
    assert_eq!(
        facts["wants"],
        serde_json::json!({"handed": [python_id], "computed-for-python": [python_id]}),
        "{facts}"
    );
    assert_eq!(
        facts["values"],
        serde_json::json!({"handed": 7, "computed-for-python": 42})
    );
    no_key_left(&cl.python, &cl.addr, &cl.logs()).await;
}
